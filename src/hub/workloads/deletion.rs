//! Deletion stage: a deleted hub resource's slices are removed from every member (a
//! member that is down gets a pending clean-up record and loses the slice when it is
//! back), the hub forgets the workload, then the finalizer goes.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kube::runtime::controller::Action;

use super::{HubContext, HubError, meta_key};
use crate::api::common::Condition;
use crate::api::federation::PendingCleanup;
use crate::api::kind::PinterestKind;
use crate::controller::own_writes::Wrote;
use crate::hub::cleanups;
use crate::hub::slices::FINALIZER;

/// Removes the slices of the deleted hub resource `meta` of kind `K` (`conditions`: its
/// stored ones), then its finalizer. Metadata is all it reads, so a resource whose spec
/// does not decode is deleted too.
pub async fn remove_slices<K: PinterestKind>(
    meta: &ObjectMeta,
    conditions: &[Condition],
    ctx: &HubContext,
) -> Result<Action, HubError> {
    let ns = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let key = meta_key::<K>(meta);
    // Owed Events of a workload being deleted are not written.
    let _ = ctx.status_deferrals.done(&key);
    ctx.report_pace.forget(&key);
    // Out of the queue, never a victim; the room it held goes to the first waiting.
    ctx.priority.forget(&key);
    ctx.priority.wake_first(Timestamp::now().as_second(), 3);
    ctx.hub_metrics.rollout_phase(&key, None);
    // A copy from before this process removed the finalizer (the watch has not delivered
    // the deletion yet; a slice's removal triggered this run): the clean-up is done.
    if ctx
        .own_writes
        .unseen(&key, meta.resource_version.as_deref())
        .is_some_and(|u| u.released)
    {
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    let hub_uid = meta.uid.clone().unwrap_or_default();
    let mut failures = Vec::new();
    for mc in ctx.members.state() {
        let member_name = mc.name_any();
        let member = ctx
            .registry
            .get(&member_name)
            // Whatever can be written: a pull member's slices are on the hub (its agent
            // removes what they carried when it is back); a push member whose agent is
            // lost still takes the delete.
            .filter(|m| m.is_writable(now, ctx.member_grace));
        match member {
            // Only "not found" means gone: a refusal or an overloaded member keeps the
            // finalizer until the slice is really removed, shown in a condition and a
            // metric. Only our own slice goes.
            Some(m) => match m.target.delete_own(K::KIND, &ns, &name, &hub_uid).await {
                Ok(cleanups::Removal::Gone) => {}
                Ok(cleanups::Removal::NotOurs(other)) => {
                    tracing::warn!(member = %m.name, workload = %key, other_hub_uid = ?other, "a slice of this name in the member was not written for this resource; left alone");
                }
                Err(e) => {
                    tracing::warn!(member = %m.name, error = %e, "slice not removed yet; will retry");
                    ctx.hub_metrics
                        .slice_removal_failures
                        .get_or_create(&crate::hub::member_loop::MemberLabels {
                            member: m.name.clone(),
                        })
                        .inc();
                    failures.push(format!("{}: {e}", m.name));
                }
            },
            None => {
                let record = PendingCleanup {
                    kind: K::KIND.as_str().into(),
                    namespace: ns.clone(),
                    name: name.clone(),
                    hub_uid: hub_uid.clone(),
                };
                tracing::info!(workload = %key, member = %member_name, "member unreachable; its slice is removed when it is back");
                cleanups::record(&ctx.hub, &ctx.cleanup_lock, &member_name, record)
                    .await
                    .map_err(HubError::RecordCleanup)?;
            }
        }
    }
    if !failures.is_empty() {
        let message = format!(
            "the finalizer stays until every slice is removed; not removed yet from {}",
            failures.join("; ")
        );
        super::write_condition::<K>(
            ctx,
            meta,
            conditions,
            crate::api::common::condition_types::DEGRADED,
            "SliceNotRemoved",
            &message,
        )
        .await;
        let delay = ctx.retries.failed(&key);
        return Ok(Action::requeue(delay));
    }
    forget(ctx, &key);
    ctx.config.forget(K::KIND, &ns, &name);
    let finalizers: Vec<String> = meta
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    let patch = serde_json::json!({"metadata": {"finalizers": finalizers, "resourceVersion": meta.resource_version}});
    // Only the metadata comes back: a reply decoded as `K` would fail where the spec does.
    match Api::<K>::namespaced(ctx.hub.clone(), &ns)
        .patch_metadata(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(stored) => {
            ctx.record_write_on::<K>(meta, None, &stored.metadata, Wrote::Released);
        }
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        // Changed meanwhile: the change brings another reconcile.
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(HubError::Finalizer(e)),
    }
    Ok(Action::await_change())
}

/// Drops what this process holds for a workload: capacity, quota, held-back record,
/// remembered decision, backoff.
fn forget(ctx: &HubContext, key: &str) {
    if let Ok(mut l) = ctx.ledger.lock() {
        l.release(key);
    }
    ctx.quota_book.remove(key);
    if let Ok(mut h) = ctx.held_back.lock() {
        h.remove(key);
    }
    if let Ok(mut d) = ctx.decisions.lock() {
        d.remove(key);
    }
    ctx.retries.succeeded(key);
}

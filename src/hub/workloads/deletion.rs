//! Deletion stage: a deleted hub resource's slices are removed from every member (a
//! member that is down gets a pending clean-up record and loses the slice when it is
//! back), the hub forgets the workload, then the finalizer goes.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;

use super::{HubContext, HubError, hub_api, workload_key};
use crate::api::federation::PendingCleanup;
use crate::api::kind::PinterestKind;
use crate::hub::cleanups;
use crate::hub::slices::FINALIZER;

pub async fn remove_slices<K: PinterestKind>(
    obj: &K,
    ctx: &HubContext,
) -> Result<Action, HubError> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let key = workload_key(obj);
    let now = Timestamp::now();
    let mut retry = false;
    for mc in ctx.members.state() {
        let member_name = mc.name_any();
        let member = ctx
            .registry
            .get(&member_name)
            .filter(|m| m.is_ready(now, ctx.member_grace));
        match member {
            Some(m) => match super::rollout::slice_api::<K>(&m.client, &ns)
                .delete(&name, &DeleteParams::background())
                .await
            {
                // Only "not found" means gone: a refusal or an overloaded member keeps
                // the finalizer until the slice is really removed.
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    tracing::warn!(member = %m.name, error = %e, "slice not removed yet; will retry");
                    retry = true;
                }
            },
            None => {
                let record = PendingCleanup {
                    kind: K::KIND.as_str().into(),
                    namespace: ns.clone(),
                    name: name.clone(),
                    hub_uid: obj.uid().unwrap_or_default(),
                };
                tracing::info!(workload = %key, member = %member_name, "member unreachable; its slice is removed when it is back");
                cleanups::record(&ctx.hub, &ctx.cleanup_lock, &member_name, record)
                    .await
                    .map_err(HubError::RecordCleanup)?;
            }
        }
    }
    if retry {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    forget(ctx, &key);
    let finalizers: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    let patch = serde_json::json!({"metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()}});
    match hub_api(ctx, obj)
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
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

//! Revisions on the hub: one ControllerRevision per revision of a workload (its
//! content, [`crate::rollout::revision`]), owned by the workload and labelled with its
//! uid, written before any slice carries the revision, pruned to the history limit
//! (never one a member is told to run). Contents read back are cached: a rollout writes
//! old revisions into members on every look.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};

use super::{HubContext, HubError};
use crate::api::kind::PinterestKind;
use crate::api::rollout::LABEL_REVISION_OF;
use crate::api::runtime_profile::LABEL_PROFILE_DIGEST;

/// Revisions this process recorded or read, and the contents it read back.
#[derive(Default)]
pub struct RevisionCache {
    /// Contents read back from the hub (a rollout's older revisions), by (workload uid,
    /// revision). Not those written: a first sync of 10,000 kept ~40 MiB of contents no
    /// reconcile read again.
    contents: Mutex<BTreeMap<(String, i64), Arc<serde_json::Value>>>,
    /// (workload uid, revision) of every revision known to be on the hub: written or read
    /// by this process.
    known: Mutex<BTreeSet<(String, i64)>>,
    /// Digests of the RuntimeProfile contents snapshotted on the hub by this process (or
    /// seen there): a burst of revisions on one profile makes its snapshot once.
    snapshots: Mutex<BTreeSet<String>>,
}

/// Contents past this are dropped all at once (they are re-read on demand): rollouts in
/// flight at once are few, a cache of every workload's revisions is not needed.
const CACHE_LIMIT: usize = 4096;
/// Known revisions past this are forgotten all at once (a forgotten one costs a LIST or a
/// 409 at most): ~100 bytes each.
const KNOWN_LIMIT: usize = 65_536;

impl RevisionCache {
    fn get(&self, uid: &str, revision: i64) -> Option<Arc<serde_json::Value>> {
        self.contents
            .lock()
            .ok()?
            .get(&(uid.to_string(), revision))
            .cloned()
    }

    fn has_any(&self, uid: &str) -> bool {
        let (from, to) = ((uid.to_string(), i64::MIN), (uid.to_string(), i64::MAX));
        self.known
            .lock()
            .is_ok_and(|k| k.range(from..=to).next().is_some())
    }

    fn is_known(&self, uid: &str, revision: i64) -> bool {
        self.known
            .lock()
            .is_ok_and(|k| k.contains(&(uid.to_string(), revision)))
    }

    fn known(&self, uid: &str, revision: i64) {
        if let Ok(mut k) = self.known.lock() {
            if k.len() >= KNOWN_LIMIT {
                k.clear();
            }
            k.insert((uid.to_string(), revision));
        }
    }

    pub fn snapshot_known(&self, digest: &str) -> bool {
        self.snapshots.lock().is_ok_and(|s| s.contains(digest))
    }

    pub fn snapshot_made(&self, digest: &str, made: bool) {
        if let Ok(mut s) = self.snapshots.lock() {
            if made {
                s.insert(digest.to_string());
            } else {
                s.remove(digest);
            }
        }
    }

    fn put(&self, uid: &str, revision: i64, content: Arc<serde_json::Value>) {
        self.known(uid, revision);
        if let Ok(mut c) = self.contents.lock() {
            if c.len() >= CACHE_LIMIT {
                c.clear();
            }
            c.insert((uid.to_string(), revision), content);
        }
    }
}

/// The ControllerRevision name of `obj`'s revision `revision` (a valid name whatever the
/// workload's name, distinct per kind).
pub fn revision_name<K: PinterestKind>(obj: &K, revision: i64) -> String {
    let base = format!("{}-{}", K::KIND.as_str().to_lowercase(), obj.name_any());
    crate::expand::names::child_name(&base, &revision.to_string(), 253, false)
}

fn api(ctx: &HubContext, ns: &str) -> Api<ControllerRevision> {
    Api::namespaced(ctx.hub.clone(), ns)
}

/// Records revision `revision` of `obj` with `content` (an existing record of that name
/// is kept: a hub that stopped after writing it writes the same), then prunes the
/// history to `limit`, keeping every revision in `in_use`.
pub async fn record<K: PinterestKind>(
    ctx: &HubContext,
    obj: &K,
    revision: i64,
    content: &serde_json::Value,
    limit: usize,
    in_use: &BTreeSet<i64>,
) -> Result<(), HubError> {
    let ns = obj.namespace().unwrap_or_default();
    let uid = obj.uid().unwrap_or_default();
    // Written (or read back) by this process already: a reconcile that runs before the
    // status naming the revision is written or seen would otherwise create it again and
    // be refused (409) — under a burst, two wasted writes per workload.
    if ctx.revisions.is_known(&uid, revision) {
        return Ok(());
    }
    let owner = OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: obj.name_any(),
        uid: uid.clone(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    // The profile content the revision pins is kept on the hub first: an edit of the
    // profile in place must not take away what members still on this revision run.
    let pin = content["runtimeVersion"].as_str().unwrap_or_default();
    super::profiles::ensure_snapshot(ctx, pin).await?;
    let mut labels: BTreeMap<String, String> =
        [(LABEL_REVISION_OF.to_string(), uid.clone())].into();
    // The snapshot's clean-up asks whether any revision still pins its digest.
    if let Some((_, digest)) = pin.split_once('@')
        && crate::api::runtime_profile::is_profile_digest(digest)
    {
        labels.insert(LABEL_PROFILE_DIGEST.to_string(), digest.to_string());
    }
    let cr = ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name(obj, revision)),
            namespace: Some(ns.clone()),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        data: Some(RawExtension(content.clone())),
        revision,
    };
    match api(ctx, &ns).create(&PostParams::default(), &cr).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(HubError::RecordRevision(e)),
    }
    ctx.revisions.known(&uid, revision);
    prune(ctx, &ns, &uid, revision, limit, in_use).await;
    Ok(())
}

/// Whether any revision of `obj` is recorded on the hub (one is written before any slice
/// carries it: none means no slice of it is out in a member). One metadata LIST, limit 1.
pub async fn any_recorded<K: PinterestKind>(ctx: &HubContext, obj: &K) -> Result<bool, HubError> {
    let uid = obj.uid().unwrap_or_default();
    if ctx.revisions.has_any(&uid) {
        return Ok(true);
    }
    let lp = ListParams::default()
        .labels(&format!("{LABEL_REVISION_OF}={uid}"))
        .limit(1);
    let list = api(ctx, &obj.namespace().unwrap_or_default())
        .list_metadata(&lp)
        .await
        .map_err(HubError::ReadRevision)?;
    Ok(!list.items.is_empty())
}

/// Drops revisions older than the newest `limit` (best effort: a failure leaves one more
/// record, retried at the next revision).
async fn prune(
    ctx: &HubContext,
    ns: &str,
    uid: &str,
    newest: i64,
    limit: usize,
    in_use: &BTreeSet<i64>,
) {
    let keep_from = newest - i64::try_from(limit).unwrap_or(i64::MAX) + 1;
    // Revisions count from 1: while the history is within the limit nothing is older
    // (a first revision needs no LIST).
    if keep_from <= 1 {
        return;
    }
    let lp = ListParams::default().labels(&format!("{LABEL_REVISION_OF}={uid}"));
    let list = match api(ctx, ns).list_metadata(&lp).await {
        Ok(l) => l,
        Err(e) => {
            tracing::debug!(error = %e, "revisions not listed for pruning");
            return;
        }
    };
    for cr in list.items {
        let Some(rev) = cr
            .name_any()
            .rsplit('-')
            .next()
            .and_then(|r| r.parse::<i64>().ok())
        else {
            continue;
        };
        if rev < keep_from && !in_use.contains(&rev) {
            let _ = api(ctx, ns)
                .delete(&cr.name_any(), &DeleteParams::default())
                .await;
        }
    }
}

/// The content of `obj`'s revision `revision`, or `None` when no record of it is left.
pub async fn content<K: PinterestKind>(
    ctx: &HubContext,
    obj: &K,
    revision: i64,
) -> Result<Option<Arc<serde_json::Value>>, HubError> {
    let uid = obj.uid().unwrap_or_default();
    if let Some(c) = ctx.revisions.get(&uid, revision) {
        return Ok(Some(c));
    }
    let ns = obj.namespace().unwrap_or_default();
    let got = api(ctx, &ns)
        .get_opt(&revision_name(obj, revision))
        .await
        .map_err(HubError::ReadRevision)?;
    let Some(cr) = got else { return Ok(None) };
    // Only this workload's record (a workload of the same name deleted and made again
    // has another uid).
    let ours = cr
        .labels()
        .get(LABEL_REVISION_OF)
        .is_some_and(|u| *u == uid);
    let Some(RawExtension(data)) = cr.data.filter(|_| ours) else {
        return Ok(None);
    };
    let data = Arc::new(data);
    ctx.revisions.put(&uid, revision, data.clone());
    Ok(Some(data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::service::PinterestService;

    #[test]
    fn written_revisions_are_known_by_key_and_only_contents_read_are_kept() {
        let c = RevisionCache::default();
        assert!(!c.has_any("u1") && !c.is_known("u1", 1));
        c.known("u1", 1);
        assert!(c.has_any("u1") && c.is_known("u1", 1) && !c.is_known("u1", 2));
        assert!(
            c.get("u1", 1).is_none(),
            "a written revision keeps no content"
        );
        assert!(
            !c.has_any("u0") && !c.has_any("u10"),
            "by uid, not by prefix"
        );
        c.put("u2", 3, Arc::new(serde_json::json!({"image": "a:1"})));
        assert!(c.is_known("u2", 3) && c.has_any("u2"));
        assert_eq!(
            c.get("u2", 3).as_deref(),
            Some(&serde_json::json!({"image": "a:1"}))
        );
    }

    #[test]
    fn revision_names_are_valid_and_end_with_the_revision() {
        let mut s: PinterestService = serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
            "metadata": {"name": "web"},
            "spec": {"owner": {"team": "t", "contact": "c"}, "template": {}}
        }))
        .unwrap();
        assert_eq!(revision_name(&s, 3), "pinterestservice-web-3");
        s.metadata.name = Some("a.b".repeat(100));
        let long = revision_name(&s, 12);
        assert!(long.len() <= 253 && long.ends_with("-12"), "{long}");
    }
}

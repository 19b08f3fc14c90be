//! Deletion records: a hub resource deleted while a member is unreachable leaves a
//! `status.pendingCleanups` entry on that MemberCluster, so the finalizer does not wait for
//! a member that may never come back. When the member is Ready again the hub removes the
//! recorded slices (only those still labelled with the deleted resource's uid) and drops
//! the records; `pinfed unjoin --force` drops them without a member.
//!
//! The list has its own field manager, and every change is read-modify-apply under one
//! lock per process, so the member loop's status writes and concurrent deletions never
//! drop each other's entries.

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use kube::{Client, ResourceExt};

use crate::api::federation::{MemberCluster, PendingCleanup};
use crate::hub::slices::LABEL_HUB_UID;

pub const CLEANUP_FIELD_MANAGER: &str = "pinfed-hub-cleanups";

/// Changes a member's pending clean-ups; `false` when the MemberCluster is gone.
pub async fn update(
    hub: &Client,
    lock: &tokio::sync::Mutex<()>,
    member: &str,
    change: impl FnOnce(&mut Vec<PendingCleanup>),
) -> Result<bool, kube::Error> {
    let _guard = lock.lock().await;
    let api: Api<MemberCluster> = Api::all(hub.clone());
    let Some(mc) = api.get_opt(member).await? else {
        return Ok(false);
    };
    let before = mc.status.map(|s| s.pending_cleanups).unwrap_or_default();
    let mut after = before.clone();
    change(&mut after);
    after.sort();
    after.dedup();
    if after == before {
        return Ok(true);
    }
    let patch = serde_json::json!({
        "apiVersion": "federation.pinterest.com/v1alpha1",
        "kind": "MemberCluster",
        "status": {"pendingCleanups": after},
    });
    api.patch_status(
        member,
        &PatchParams::apply(CLEANUP_FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(true)
}

pub async fn record(
    hub: &Client,
    lock: &tokio::sync::Mutex<()>,
    member: &str,
    entry: PendingCleanup,
) -> Result<(), kube::Error> {
    update(hub, lock, member, |list| list.push(entry)).await?;
    Ok(())
}

/// What became of a member's slice the hub asked to remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// Deleted now, or not there.
    Gone,
    /// There, but written for another hub resource (`hub-uid` label, or none): left alone.
    NotOurs(Option<String>),
}

/// Deletes the member's slice `namespace/name` only when it carries `hub_uid` (the hub
/// resource it was written for), and only that object (uid precondition): a newer
/// resource's slice of the same name, or one another hub wrote, is never removed. Only
/// "not found" means gone; every other error is returned.
pub async fn delete_own_slice(
    member: &Client,
    kind: &str,
    namespace: &str,
    name: &str,
    hub_uid: &str,
) -> Result<Removal, kube::Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(member.clone(), namespace, &slice_resource(kind));
    let Some(slice) = api.get_metadata_opt(name).await? else {
        return Ok(Removal::Gone);
    };
    let owner = slice.labels().get(LABEL_HUB_UID).cloned();
    if owner.as_deref() != Some(hub_uid) {
        return Ok(Removal::NotOurs(owner));
    }
    let params = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: slice.uid(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(Removal::Gone),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Removal::Gone),
        Err(e) => Err(e),
    }
}

fn slice_resource(kind: &str) -> ApiResource {
    ApiResource {
        group: "compute.pinterest.com".into(),
        version: "v1alpha1".into(),
        api_version: "compute.pinterest.com/v1alpha1".into(),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()),
    }
}

/// Removes the recorded slices from a reachable member and drops the records that are
/// done. Returns how many were done.
pub async fn process(
    hub: &Client,
    lock: &tokio::sync::Mutex<()>,
    member_name: &str,
    member: &Client,
    pending: &[PendingCleanup],
) -> Result<usize, kube::Error> {
    let mut done = Vec::new();
    for p in pending {
        // Any error but "not found" keeps the record. Gone already, or a newer resource's
        // slice of the same name: nothing to do.
        if delete_own_slice(member, &p.kind, &p.namespace, &p.name, &p.hub_uid).await?
            == Removal::Gone
        {
            tracing::info!(member = %member_name, kind = %p.kind, namespace = %p.namespace, name = %p.name, "removed the slice of a hub resource deleted while the member was down");
        }
        done.push(p.clone());
    }
    if !done.is_empty() {
        update(hub, lock, member_name, |list| {
            list.retain(|e| !done.contains(e))
        })
        .await?;
    }
    Ok(done.len())
}

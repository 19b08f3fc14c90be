//! Deletion records: a hub resource deleted while a member is unreachable leaves a
//! `status.pendingCleanups` entry on that MemberCluster, so the finalizer does not wait for
//! a member that may never come back. When the member is Ready again the hub removes the
//! recorded slices (only those still labelled with the deleted resource's uid) and drops
//! the records; `pinfed unjoin --force` drops them without a member.
//!
//! The list has its own field manager, and every change is read-modify-apply under one
//! lock per process, so the member loop's status writes and concurrent deletions never
//! drop each other's entries.

use kube::Client;
use kube::api::{Patch, PatchParams};

use crate::api::federation::{MemberCluster, PendingCleanup};
use crate::api::workload::WorkloadKind;
use crate::hub::slice_target::SliceTarget;

pub const CLEANUP_FIELD_MANAGER: &str = "pinfed-hub-cleanups";

/// Changes a member's pending clean-ups; `false` when the MemberCluster is gone.
pub async fn update(
    hub: &Client,
    lock: &tokio::sync::Mutex<()>,
    member: &str,
    change: impl FnOnce(&mut Vec<PendingCleanup>),
) -> Result<bool, kube::Error> {
    let _guard = lock.lock().await;
    let untyped = crate::hub::members::member_clusters(hub);
    let Some(found) = untyped.get_opt(member).await? else {
        return Ok(false);
    };
    // An entry another pinfed version wrote in another shape is left out (and said):
    // the rest are kept through this write.
    let mc: MemberCluster = crate::controller::mirror::decode_object(found)
        .map(|(mc, _)| mc)
        .map_err(|e| kube::Error::Service(format!("{e:#}").into()))?;
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
    untyped
        .patch_status(
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

/// Removes the recorded slices from a reachable member and drops the records that are
/// done. Returns how many were done.
pub async fn process(
    hub: &Client,
    lock: &tokio::sync::Mutex<()>,
    member_name: &str,
    member: &SliceTarget,
    pending: &[PendingCleanup],
) -> Result<usize, kube::Error> {
    let mut done = Vec::new();
    for p in pending {
        // Any error but "not found" keeps the record. Gone already, or a newer resource's
        // slice of the same name: nothing to do.
        let Some(kind) = WorkloadKind::from_kind(&p.kind) else {
            // Not a kind of ours: nothing of it can be in the member.
            done.push(p.clone());
            continue;
        };
        if member
            .delete_own(kind, &p.namespace, &p.name, &p.hub_uid)
            .await?
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

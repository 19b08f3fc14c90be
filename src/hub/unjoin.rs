//! `pinfed unjoin`: takes a member out of the federation.
//!
//! Clean (the member is reachable): mark the MemberCluster draining, so the hub moves
//! every workload off it (replacements first, then its slices go); wait for that; remove
//! the hub's ServiceAccount and RBAC from the member; delete the kubeconfig Secret and the
//! MemberCluster. `--force` (the member is gone for good): drop its pending clean-ups
//! (reported), delete the Secret and the MemberCluster; the hub re-places what ran there.

use std::time::Duration;

use anyhow::{Context, bail};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use kube::{Client, ResourceExt};

use crate::api::federation::{MemberCluster, PendingCleanup};
use crate::api::kind::api_resource;
use crate::api::workload::WorkloadKind;
use crate::hub::join::{HUB_MEMBER_ROLE, HUB_SERVICE_ACCOUNT, MEMBER_NAMESPACE};
use crate::hub::members::{self, HUB_NAMESPACE};
use crate::hub::slices::LABEL_HUB_UID;
use crate::hub::workloads::ANNOTATION_DRAINING;

/// What an unjoin did.
#[derive(Debug, Default)]
pub struct Unjoined {
    /// Pending clean-ups dropped (`--force`): slices that may remain in the member.
    pub dropped: Vec<PendingCleanup>,
    /// Workloads that still had a share on the member when it was removed.
    pub still_placed: Vec<String>,
}

/// Hub workloads whose placement still names `member`.
pub async fn placed_on(hub: &Client, member: &str) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for kind in WorkloadKind::ALL {
        let api: Api<DynamicObject> = Api::all_with(hub.clone(), &api_resource(kind));
        for o in api.list(&ListParams::default()).await?.items {
            let placed = o.data["status"]["placement"]["placements"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["cluster"] == member));
            if placed {
                out.push(workload_path(kind, &o));
            }
        }
    }
    Ok(out)
}

/// Slices (hub-labelled workloads) left in a member.
async fn slices_in(member: &Client) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for kind in WorkloadKind::ALL {
        let api: Api<DynamicObject> = Api::all_with(member.clone(), &api_resource(kind));
        for o in api
            .list(&ListParams::default().labels(LABEL_HUB_UID))
            .await?
            .items
        {
            out.push(workload_path(kind, &o));
        }
    }
    Ok(out)
}

/// `Kind/namespace/name`, as the unjoin reports what is left.
fn workload_path(kind: WorkloadKind, o: &DynamicObject) -> String {
    format!(
        "{}/{}/{}",
        kind.as_str(),
        o.namespace().unwrap_or_default(),
        o.name_any()
    )
}

fn is_pull(mc: &MemberCluster) -> bool {
    mc.spec.mode == Some(crate::api::federation::ClusterMode::Pull)
}

/// MemberSlices left in a pull member's namespace on the hub.
async fn member_slices_of(hub: &Client, member: &str) -> anyhow::Result<Vec<String>> {
    let api: Api<crate::api::member_slice::MemberSlice> = Api::namespaced(
        hub.clone(),
        &crate::api::member_slice::pull_namespace(member),
    );
    Ok(api
        .list_metadata(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|o| o.name_any())
        .collect())
}

/// A pull member: drained like any (the hub removes its MemberSlices, its agent the
/// slices), then its namespace on the hub, its agent's hub identity and, with the
/// member's admin context, the Secret and rights the agent had for pulling.
async fn unjoin_pull_member(
    hub: &Client,
    mc: &MemberCluster,
    timeout: Duration,
    member_admin: Option<&Client>,
    progress: &dyn Fn(&str),
) -> anyhow::Result<Unjoined> {
    let name = mc.name_any();
    let api = crate::hub::members::member_clusters(hub);
    let patch = serde_json::json!({"metadata": {"annotations": {ANNOTATION_DRAINING: "true"}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    progress(&format!(
        "{name} draining: the hub moves its workloads to other members"
    ));
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let placed = placed_on(hub, &name).await?;
        let left = member_slices_of(hub, &name).await?;
        if placed.is_empty() && left.is_empty() {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "{name} still runs {} workload(s) and holds {} MemberSlice(s) after {}s: placed: \
                 {placed:?}; MemberSlices: {left:?}",
                placed.len(),
                left.len(),
                timeout.as_secs()
            );
        }
        progress(&format!(
            "waiting: {} workload(s) still placed on {name}, {} MemberSlice(s) left",
            placed.len(),
            left.len()
        ));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // The agent removes the slices of MemberSlices that are gone; give it a moment to
    // see the last ones before its identity goes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    crate::hub::join_pull::unjoin_pull(hub, member_admin, &name).await?;
    remove_registration(hub, mc).await?;
    progress(&format!(
        "{name} unjoined: no workload left there; its namespace and agent identity on the hub \
         removed{}; MemberCluster deleted",
        if member_admin.is_some() {
            ", and the agent's hub kubeconfig and pull rights in the member"
        } else {
            " (pass --member-context to remove the agent's hub kubeconfig and pull rights in the member)"
        }
    ));
    Ok(Unjoined::default())
}

async fn remove_registration(hub: &Client, mc: &MemberCluster) -> anyhow::Result<()> {
    let name = mc.name_any();
    if let Some(r) = &mc.spec.secret_ref {
        let ns = r.namespace.clone().unwrap_or_else(|| HUB_NAMESPACE.into());
        match Api::<k8s_openapi::api::core::v1::Secret>::namespaced(hub.clone(), &ns)
            .delete(&r.name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e).context("deleting the member's kubeconfig Secret"),
        }
    }
    match crate::hub::members::member_clusters(hub)
        .delete(&name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e).context("deleting the MemberCluster"),
    }
}

/// Removes a member. `progress` gets one line per step.
pub async fn unjoin(
    hub: &Client,
    name: &str,
    force: bool,
    timeout: Duration,
    member_admin: Option<&Client>,
    progress: &dyn Fn(&str),
) -> anyhow::Result<Unjoined> {
    let api = crate::hub::members::member_clusters(hub);
    let Some(found) = api.get_opt(name).await? else {
        bail!("no MemberCluster {name:?} on the hub");
    };
    let (mc, _) = crate::controller::mirror::decode_object::<MemberCluster>(found)?;
    let mut result = Unjoined::default();
    if force {
        result.dropped = mc
            .status
            .as_ref()
            .map(|s| s.pending_cleanups.clone())
            .unwrap_or_default();
        result.still_placed = placed_on(hub, name).await?;
        remove_registration(hub, &mc).await?;
        if is_pull(&mc) {
            crate::hub::join_pull::unjoin_pull(hub, None, name).await?;
        }
        progress(&format!(
            "{name} detached: MemberCluster and kubeconfig Secret deleted; the hub re-places what ran there"
        ));
        return Ok(result);
    }

    if is_pull(&mc) {
        return unjoin_pull_member(hub, &mc, timeout, member_admin, progress).await;
    }
    let member = members::member_client(hub, &mc)
        .await
        .with_context(|| format!("connecting to {name} (use --force for a member that is gone)"))?;
    member.apiserver_version().await.with_context(|| {
        format!("{name} does not answer (use --force for a member that is gone)")
    })?;
    let patch = serde_json::json!({"metadata": {"annotations": {ANNOTATION_DRAINING: "true"}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    progress(&format!(
        "{name} draining: the hub moves its workloads to other members"
    ));
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let placed = placed_on(hub, name).await?;
        let left = slices_in(&member).await?;
        if placed.is_empty() && left.is_empty() {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            // Leave it draining: nothing new goes there, and unjoin can be run again.
            bail!(
                "{name} still runs {} workload(s) and holds {} slice(s) after {}s (is the hub running? \
                 does the rest of the federation have room?): placed: {:?}; slices: {:?}",
                placed.len(),
                left.len(),
                timeout.as_secs(),
                placed,
                left
            );
        }
        progress(&format!(
            "waiting: {} workload(s) still placed on {name}, {} slice(s) left",
            placed.len(),
            left.len()
        ));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // The hub's identity in the member: its own ServiceAccount may not delete RBAC (least
    // privilege), so this takes the member's admin context.
    let Some(member) = member_admin else {
        remove_registration(hub, &mc).await?;
        progress(&format!(
            "{name} unjoined: no workload left there; MemberCluster deleted. The hub's \
             ServiceAccount pinfed-system/{HUB_SERVICE_ACCOUNT}, its roles and bindings \
             {HUB_MEMBER_ROLE} and the namespace pinfed-drop remain in the member (pass \
             --member-context to remove them)"
        ));
        return Ok(result);
    };
    remove_hub_identity(member).await?;
    remove_registration(hub, &mc).await?;
    progress(&format!(
        "{name} unjoined: no workload left there; hub identity removed from the member; MemberCluster deleted"
    ));
    Ok(result)
}

/// Deletes what `pinfed join` created for the hub in a member: its roles and bindings, its
/// ServiceAccount (every token it was given dies with it) and the drop namespace.
async fn remove_hub_identity(member: &Client) -> anyhow::Result<()> {
    let rbac = [
        (
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            None,
            HUB_MEMBER_ROLE,
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            None,
            HUB_MEMBER_ROLE,
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            Some(MEMBER_NAMESPACE),
            HUB_MEMBER_ROLE,
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "Role",
            Some(MEMBER_NAMESPACE),
            HUB_MEMBER_ROLE,
        ),
        (
            "v1",
            "ServiceAccount",
            Some(MEMBER_NAMESPACE),
            HUB_SERVICE_ACCOUNT,
        ),
        // No hub vouches for the member's job sets any more.
        (
            "coordination.k8s.io/v1",
            "Lease",
            Some(MEMBER_NAMESPACE),
            crate::controller::fence::FENCE_LEASE,
        ),
        // The bundles are the hub's data; the Roles in the namespace go with it.
        (
            "v1",
            "Namespace",
            None,
            crate::expand::bundle::DROP_NAMESPACE,
        ),
    ];
    for (api_version, kind, ns, name) in rbac {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let ar = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
        };
        let api: Api<DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(member.clone(), ns, &ar),
            None => Api::all_with(member.clone(), &ar),
        };
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(e).with_context(|| format!("deleting {kind} {name}"));
            }
        }
    }
    Ok(())
}

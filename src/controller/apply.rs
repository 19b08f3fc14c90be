//! Server-side apply of generated objects and label-based pruning. Objects arrive as plain
//! JSON (the pure core's output); their kind decides the API endpoint.

use std::collections::BTreeSet;

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};

/// The field manager of each writer, stable across versions so ownership stays explicit.
pub const AGENT_FIELD_MANAGER: &str = "pinfed-agent";
pub const HUB_FIELD_MANAGER: &str = "pinfed-hub";

/// Creates a namespace if it does not exist (a plain create with the caller's field
/// manager; "already exists" is success). Never patches: an identity that may create
/// namespaces may not change those it did not create (the hub in a member), and one that
/// may only read them passes when the namespace is there (the agent under its role).
pub async fn ensure_namespace(
    client: &Client,
    name: &str,
    field_manager: &str,
) -> Result<(), ApplyError> {
    ensure_namespace_labelled(client, name, field_manager, &[]).await
}

/// Labels of a namespace the hub creates in a member for a workload: Pod Security
/// `baseline` enforced, so a slice written with a stolen hub credential cannot run a pod
/// with host access or privileges there. Privileged workloads (granted infrastructure
/// teams) run in namespaces the member's admins made for them.
pub const WORKLOAD_NAMESPACE_LABELS: &[(&str, &str)] = &[
    ("pod-security.kubernetes.io/enforce", "baseline"),
    crate::api::member_policy::CREATED_LABEL,
];

/// [`ensure_namespace`], with `labels` on a namespace it creates (one that exists is left
/// as it is).
pub async fn ensure_namespace_labelled(
    client: &Client,
    name: &str,
    field_manager: &str,
    labels: &[(&str, &str)],
) -> Result<(), ApplyError> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    if let Ok(Some(_)) = api.get_opt(name).await {
        return Ok(());
    }
    let ns = k8s_openapi::api::core::v1::Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            labels: (!labels.is_empty()).then(|| {
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let params = kube::api::PostParams {
        field_manager: Some(field_manager.to_string()),
        ..Default::default()
    };
    match api.create(&params, &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(source) => Err(ApplyError::Kube {
            kind: "Namespace".into(),
            name: name.to_string(),
            source,
        }),
    }
}

/// Kinds pinfed writes with [`apply_json`] (what the expansion engine produces, plus what
/// `pinfed join` creates), with their plural resource names.
const NATIVE_KINDS: &[(&str, &str, &str, &str)] = &[
    ("", "v1", "ConfigMap", "configmaps"),
    ("", "v1", "Secret", "secrets"),
    ("", "v1", "Service", "services"),
    ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    ("", "v1", "Namespace", "namespaces"),
    ("", "v1", "ServiceAccount", "serviceaccounts"),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
    ),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles"),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
    ),
    (
        "federation.pinterest.com",
        "v1alpha1",
        "MemberCluster",
        "memberclusters",
    ),
    (
        "federation.pinterest.com",
        "v1alpha1",
        "MemberReport",
        "memberreports",
    ),
    ("coordination.k8s.io", "v1", "Lease", "leases"),
    ("apps", "v1", "Deployment", "deployments"),
    ("apps", "v1", "StatefulSet", "statefulsets"),
    ("apps", "v1", "DaemonSet", "daemonsets"),
    ("batch", "v1", "Job", "jobs"),
    ("batch", "v1", "CronJob", "cronjobs"),
    ("networking.k8s.io", "v1", "Ingress", "ingresses"),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("object has no {0}")]
    Incomplete(&'static str),
    #[error("pinfed does not manage objects of kind {0}")]
    UnknownKind(String),
    #[error("applying {kind} {name}: {source}")]
    Kube {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// The API resource of a native kind pinfed writes.
pub fn native_resource(api_version: &str, kind: &str) -> Option<ApiResource> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    NATIVE_KINDS
        .iter()
        .find(|(g, v, k, _)| *g == group && *v == version && *k == kind)
        .map(|(g, v, k, plural)| {
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, k), plural)
        })
}

/// Forced server-side apply of one object (cluster-scoped when it has no namespace).
pub async fn apply_json(
    client: &Client,
    obj: &serde_json::Value,
    field_manager: &str,
) -> Result<DynamicObject, ApplyError> {
    let api_version = obj["apiVersion"]
        .as_str()
        .ok_or(ApplyError::Incomplete("apiVersion"))?;
    let kind = obj["kind"].as_str().ok_or(ApplyError::Incomplete("kind"))?;
    let name = obj["metadata"]["name"]
        .as_str()
        .ok_or(ApplyError::Incomplete("metadata.name"))?;
    let ar = native_resource(api_version, kind)
        .ok_or_else(|| ApplyError::UnknownKind(kind.to_string()))?;
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    api.patch(
        name,
        &PatchParams::apply(field_manager).force(),
        &Patch::Apply(obj),
    )
    .await
    .map_err(|source| ApplyError::Kube {
        kind: kind.to_string(),
        name: name.to_string(),
        source,
    })
}

/// Deletes objects of the given kinds in `namespace` that match `selector`, are owned by
/// `owner_uid` (so objects other controllers made from ours, such as a StatefulSet's
/// PVCs, are left alone) and are not in `keep` (pairs of kind and name). Returns what it
/// deleted, as `Kind/name`.
pub async fn prune(
    client: &Client,
    namespace: &str,
    resources: &[ApiResource],
    selector: &str,
    owner_uid: &str,
    keep: &BTreeSet<(String, String)>,
) -> Result<Vec<String>, kube::Error> {
    let mut deleted = Vec::new();
    for ar in resources {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, ar);
        for obj in api
            .list_metadata(&ListParams::default().labels(selector))
            .await?
            .items
        {
            let name = obj.metadata.name.clone().unwrap_or_default();
            let ours = obj
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == owner_uid);
            if !ours
                || keep.contains(&(ar.kind.clone(), name.clone()))
                || obj.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            if delete_generated(client, namespace, ar, &name).await? {
                deleted.push(format!("{}/{name}", ar.kind));
            }
        }
    }
    Ok(deleted)
}

/// Deletes one generated object; false when it was gone already. Background propagation
/// lets the garbage collector remove a Job's pods.
pub async fn delete_generated(
    client: &Client,
    namespace: &str,
    ar: &ApiResource,
    name: &str,
) -> Result<bool, kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, ar);
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_kinds_resolve_to_their_endpoints() {
        let d = native_resource("apps/v1", "Deployment").unwrap();
        assert_eq!(
            (d.group.as_str(), d.plural.as_str()),
            ("apps", "deployments")
        );
        let c = native_resource("v1", "ConfigMap").unwrap();
        assert_eq!(
            (c.group.as_str(), c.version.as_str(), c.plural.as_str()),
            ("", "v1", "configmaps")
        );
        assert!(native_resource("apps/v1", "ReplicaSet").is_none());
    }
}

/// The names of `objects` that `manager` applied (it holds fields in them) and that are
/// not in `keep`: copies a controller made whose source is gone. What others made alone
/// is never among them.
pub fn applied_by_and_not_in<K: kube::Resource>(
    objects: &[K],
    manager: &str,
    keep: &std::collections::BTreeSet<String>,
) -> Vec<String> {
    use kube::ResourceExt;
    objects
        .iter()
        .filter(|o| {
            o.managed_fields()
                .iter()
                .any(|f| f.manager.as_deref() == Some(manager))
        })
        .map(|o| o.name_any())
        .filter(|n| !keep.contains(n))
        .collect()
}

#[cfg(test)]
mod applied_by_tests {
    use super::*;
    use kube::api::DynamicObject;

    fn object(name: &str, managers: &[&str]) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "RuntimeProfile",
            "metadata": {"name": name, "managedFields": managers.iter().map(|m| serde_json::json!({
                "manager": m, "operation": "Apply", "apiVersion": "compute.pinterest.com/v1alpha1"
            })).collect::<Vec<_>>()},
        }))
        .unwrap()
    }

    #[test]
    fn only_what_the_manager_applied_and_is_gone_at_the_source_is_named() {
        let member = [
            object("kept", &[HUB_FIELD_MANAGER]),
            object("gone", &[HUB_FIELD_MANAGER, "kubectl-edit"]),
            object("local", &["kubectl-client-side-apply"]),
        ];
        let keep = std::collections::BTreeSet::from(["kept".to_string()]);
        assert_eq!(
            applied_by_and_not_in(&member, HUB_FIELD_MANAGER, &keep),
            vec!["gone".to_string()]
        );
    }
}

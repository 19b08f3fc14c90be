//! `pinfed join`: registers a member. In the member it creates a least-privilege
//! ServiceAccount for the hub (with a token Secret) and installs the CRDs; on the hub it
//! stores a kubeconfig for that ServiceAccount as a Secret and creates the MemberCluster.
//! The object builders are pure; [`join`] applies them.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};

use crate::api::workload;
use crate::controller::apply::apply_json;
use crate::hub::members::{HUB_NAMESPACE, KUBECONFIG_KEY};

pub const JOIN_FIELD_MANAGER: &str = "pinfed-join";
pub use crate::controller::cluster_side::HUB_SERVICE_ACCOUNT;
/// Its ClusterRole (and binding) in a member. Not `pinfed-hub`: that is the hub's role in
/// the hub cluster (deploy/hub/rbac.yaml), and a cluster can be both (single-cluster).
pub const HUB_MEMBER_ROLE: &str = "pinfed-hub-member";
/// The agent's read-only Role on the bundles in the drop namespace.
pub const AGENT_BUNDLES_ROLE: &str = "pinfed-agent-bundles";
pub use crate::controller::cluster_side::{LEGACY_TOKEN_SECRET, MEMBER_NAMESPACE};

#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub name: String,
    pub region: Option<String>,
    pub zone: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub weight: Option<i32>,
    /// The member API server as the hub reaches it, and its CA (PEM).
    pub server: String,
    pub ca_pem: Vec<u8>,
    /// The workload schemas of the CRDs installed in the member.
    pub schemas: MemberSchemas,
}

/// What the hub may do in a member, and nothing else: write pinfed's own resources
/// (slices, RuntimeProfiles) and create namespaces for them; read capacity (nodes, pods);
/// write ConfigMaps and Secrets in the drop namespace only, where no ServiceAccount has
/// rights (a Secret-create right in a namespace lets its holder mint a token for any
/// ServiceAccount there); renew its own token. It may not read any other Secret, create
/// Pods or RBAC, patch namespaces or delete Jobs: the member's agent materializes
/// bundles and stops moved shards (`docs/security.md`).
pub fn member_rbac(member: &str) -> Vec<serde_json::Value> {
    let rw = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    let drop_ns = crate::expand::bundle::DROP_NAMESPACE;
    let binding = |kind: &str, name: &str, ns: Option<&str>| {
        let mut b = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": format!("{kind}Binding"),
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": HUB_SERVICE_ACCOUNT, "namespace": MEMBER_NAMESPACE}]});
        if let Some(ns) = ns {
            b["metadata"]["namespace"] = ns.into();
        }
        b
    };
    vec![
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MEMBER_NAMESPACE}}),
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": drop_ns,
            "labels": {"app.kubernetes.io/part-of": "pinfed"}}}),
        serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": HUB_SERVICE_ACCOUNT, "namespace": MEMBER_NAMESPACE}}),
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": HUB_MEMBER_ROLE},
        "rules": [
            {"apiGroups": ["compute.pinterest.com"], "resources": [
                "pinterestservices", "pinterestjobsets", "pinterestcronjobs", "pinterestdaemons",
                "pinteresttrainingjobs", "pintereststatefulsets", "runtimeprofiles"], "verbs": rw},
            {"apiGroups": ["compute.pinterest.com"], "resources": [
                "pinterestservices/status", "pinterestjobsets/status", "pinterestcronjobs/status",
                "pinterestdaemons/status", "pinteresttrainingjobs/status", "pintereststatefulsets/status"],
             "verbs": ["get"]},
            // Create only: a namespace that exists is never changed.
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "create"]},
            {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
        ]}),
        binding("ClusterRole", HUB_MEMBER_ROLE, None),
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": HUB_MEMBER_ROLE, "namespace": drop_ns},
            "rules": [{"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": rw}]}),
        binding("Role", HUB_MEMBER_ROLE, Some(drop_ns)),
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": HUB_MEMBER_ROLE, "namespace": MEMBER_NAMESPACE},
            "rules": [{"apiGroups": [""], "resources": ["serviceaccounts/token"],
                       "resourceNames": [HUB_SERVICE_ACCOUNT], "verbs": ["create"]},
                      // The agent's Lease: the hub's evidence that the agent runs.
                      {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                       "resourceNames": [crate::api::member_slice::agent_lease_name(member)],
                       "verbs": ["get"]},
                      // The fence Lease (made here, below): the hub vouches for the
                      // member's job-set slices by renewing it (`controller::fence`).
                      {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                       "resourceNames": [crate::controller::fence::FENCE_LEASE],
                       "verbs": ["get", "patch"]}]}),
        binding("Role", HUB_MEMBER_ROLE, Some(MEMBER_NAMESPACE)),
        // Not renewed yet: the member's job sets start no shard until the hub does.
        serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": crate::controller::fence::FENCE_LEASE, "namespace": MEMBER_NAMESPACE}}),
        // The member's agent reads the bundles here (it writes the copies elsewhere). Made
        // with the namespace, by join, so a kustomize overlay that moves the agent's own
        // namespace does not move this one; an agent installed under another identity
        // needs its own binding to this Role.
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": AGENT_BUNDLES_ROLE, "namespace": drop_ns},
            "rules": [{"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "list", "watch"]}]}),
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": AGENT_BUNDLES_ROLE, "namespace": drop_ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": AGENT_BUNDLES_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": "pinfed-agent", "namespace": MEMBER_NAMESPACE}]}),
    ]
}

/// A kubeconfig for the hub's ServiceAccount in a member.
pub fn member_kubeconfig(req: &JoinRequest, token: &str) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(&req.ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {n}\n  cluster:\n    server: {s}\n    certificate-authority-data: {ca}\n\
         users:\n- name: {sa}\n  user:\n    token: {token}\n\
         contexts:\n- name: {n}\n  context:\n    cluster: {n}\n    user: {sa}\ncurrent-context: {n}\n",
        n = req.name,
        s = req.server,
        sa = HUB_SERVICE_ACCOUNT,
    )
}

/// The name of a member's kubeconfig Secret on the hub.
pub fn member_secret_name(member: &str) -> String {
    format!("member-{member}")
}

/// A MemberCluster spec in `mode` (Push or Pull) with the request's region, zone, labels
/// and weight.
pub fn member_spec(req: &JoinRequest, mode: &str) -> serde_json::Value {
    let mut spec = serde_json::json!({"mode": mode});
    if !req.labels.is_empty() {
        spec["labels"] = serde_json::to_value(&req.labels).unwrap_or_default();
    }
    if let Some(r) = &req.region {
        spec["region"] = r.clone().into();
    }
    if let Some(z) = &req.zone {
        spec["zone"] = z.clone().into();
    }
    if let Some(w) = req.weight {
        spec["weight"] = w.into();
    }
    spec
}

/// The hub objects of a member: its kubeconfig Secret and the MemberCluster.
pub fn hub_objects(req: &JoinRequest, kubeconfig: &str) -> Vec<serde_json::Value> {
    use base64::Engine;
    let secret_name = member_secret_name(&req.name);
    let mut spec = member_spec(req, "Push");
    spec["secretRef"] = serde_json::json!({"name": secret_name, "namespace": HUB_NAMESPACE});
    vec![
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": HUB_NAMESPACE}}),
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": secret_name, "namespace": HUB_NAMESPACE,
                         "labels": {"federation.pinterest.com/member": req.name}},
            "data": {KUBECONFIG_KEY: base64::engine::general_purpose::STANDARD.encode(kubeconfig)}}),
        serde_json::json!({"apiVersion": "federation.pinterest.com/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": req.name}, "spec": spec}),
    ]
}

/// The workload schemas a member's CRDs carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum MemberSchemas {
    /// Full: the member's API server validates every slice's spec as the hub does.
    #[default]
    Full,
    /// The workload kinds' spec left open: the hub validates specs before it writes
    /// slices and the agent refuses a slice it cannot decode; a member's API server then
    /// needs ~150–190 MiB rather than ~290 (for large fleets of light members).
    Open,
}

/// Applies every CRD of the product (server-side apply) and waits until they are served.
pub async fn install_crds(client: &Client) -> anyhow::Result<()> {
    install_crds_with(client, MemberSchemas::Full).await
}

/// [`install_crds`] with the workload schemas `schemas` (a member's choice; the hub's are
/// always full).
pub async fn install_crds_with(client: &Client, schemas: MemberSchemas) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crds = match schemas {
        MemberSchemas::Full => workload::crds(),
        MemberSchemas::Open => workload::crds_with_open_workload_specs(),
    };
    for crd in &crds {
        api.patch(
            &crd.name_any(),
            &PatchParams::apply(JOIN_FIELD_MANAGER).force(),
            &Patch::Apply(crd),
        )
        .await
        .with_context(|| format!("installing CRD {}", crd.name_any()))?;
    }
    for crd in &crds {
        let name = crd.name_any();
        let mut established = false;
        for _ in 0..100 {
            let c = api.get(&name).await?;
            established = c
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::ensure!(established, "CRD {name} was not established within 10s");
    }
    Ok(())
}

/// The hub's admission policies: its pod policy for writers other than the JSS
/// (`deploy/hub/pod-policy.yaml`), the finalizer every workload gets as it is created
/// (`deploy/hub/finalizer-policy.yaml`), the tokens' lifetime, and the hub's writes to
/// RuntimeProfiles limited to its snapshots (`deploy/hub/snapshot-policy.yaml`).
pub const HUB_POLICIES: [(&str, &str); 4] = [
    (
        "deploy/hub/pod-policy.yaml",
        include_str!("../../deploy/hub/pod-policy.yaml"),
    ),
    (
        "deploy/hub/finalizer-policy.yaml",
        include_str!("../../deploy/hub/finalizer-policy.yaml"),
    ),
    TOKEN_POLICY,
    (
        "deploy/hub/snapshot-policy.yaml",
        include_str!("../../deploy/hub/snapshot-policy.yaml"),
    ),
];

/// How long a token pinfed's identities mint for themselves may live
/// (`deploy/hub/token-policy.yaml`): pull agents on the hub, the hub in each member.
const TOKEN_POLICY: (&str, &str) = (
    "deploy/hub/token-policy.yaml",
    include_str!("../../deploy/hub/token-policy.yaml"),
);

/// The member's admission policies: the agent's copies of bundles changed by the agent
/// alone (`deploy/agent/copy-policy.yaml`), and the hub's tokens there bounded.
pub const MEMBER_POLICIES: [(&str, &str); 2] = [
    (
        "deploy/agent/copy-policy.yaml",
        include_str!("../../deploy/agent/copy-policy.yaml"),
    ),
    TOKEN_POLICY,
];

/// Installs the hub's admission policies (each a policy and its binding), then waits
/// until the API server applies the finalizer policy: it loads a new policy a moment
/// after storing it, and workloads created in that moment lack the finalizer, costing
/// the hub a metadata patch each (7% of a first sync created right after a join).
pub async fn install_hub_policies(hub: &Client) -> anyhow::Result<()> {
    install_policies(hub, &HUB_POLICIES, "the hub").await?;
    wait_for_finalizer_policy(hub).await;
    Ok(())
}

/// Dry-runs the create of a PinterestService until it comes back with the hub's
/// finalizer, for up to 10 s. Nothing is stored. A probe refused for any other reason
/// (no `default` namespace, an identity that may not create workloads) ends the wait:
/// the hub adds the finalizer itself wherever the policy did not.
async fn wait_for_finalizer_policy(hub: &Client) {
    use kube::api::PostParams;
    let api: Api<crate::api::service::PinterestService> = Api::namespaced(hub.clone(), "default");
    let probe: crate::api::service::PinterestService =
        match serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1",
            "kind": "PinterestService",
            "metadata": {"generateName": "pinfed-join-probe-"},
            "spec": {
                "owner": {"team": "pinfed", "contact": "pinfed-join"},
                "template": {"spec": {"containers": [{"name": "probe", "image": "probe"}]}},
            },
        })) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "the finalizer policy's probe does not parse");
                return;
            }
        };
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match api.create(&dry_run, &probe).await {
            Ok(o)
                if o.finalizers()
                    .iter()
                    .any(|f| f == crate::hub::slices::FINALIZER) =>
            {
                return;
            }
            Ok(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Ok(_) => {
                tracing::warn!(
                    "the hub's finalizer policy did not take effect within 10s: the hub adds the finalizer itself"
                );
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot probe the finalizer policy");
                return;
            }
        }
    }
}

/// Installs the member's admission policies.
pub async fn install_member_policies(member: &Client) -> anyhow::Result<()> {
    install_policies(member, &MEMBER_POLICIES, "the member").await
}

async fn install_policies(
    client: &Client,
    files: &[(&str, &str)],
    place: &str,
) -> anyhow::Result<()> {
    use kube::api::DynamicObject;
    use kube::core::{ApiResource, GroupVersionKind};
    for (file, text) in files {
        let docs: Vec<serde_json::Value> =
            crate::api::yaml::documents(text).with_context(|| format!("reading {file}"))?;
        for doc in docs {
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            let name = doc["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let plural = match kind.as_str() {
                "ValidatingAdmissionPolicy" => "validatingadmissionpolicies",
                "ValidatingAdmissionPolicyBinding" => "validatingadmissionpolicybindings",
                "MutatingAdmissionPolicy" => "mutatingadmissionpolicies",
                "MutatingAdmissionPolicyBinding" => "mutatingadmissionpolicybindings",
                other => anyhow::bail!("{file}: unexpected kind {other}"),
            };
            let ar = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", &kind),
                plural,
            );
            Api::<DynamicObject>::all_with(client.clone(), &ar)
                .patch(
                    &name,
                    &PatchParams::apply(JOIN_FIELD_MANAGER).force(),
                    &Patch::Apply(&doc),
                )
                .await
                .with_context(|| format!("installing {kind} {name} in {place}"))?;
        }
    }
    Ok(())
}

/// The agent image `deploy/image/build` tags: `pinfed:<crate version>`.
pub const DEFAULT_AGENT_IMAGE: &str = concat!("pinfed:", env!("CARGO_PKG_VERSION"));
pub const AGENT_DEPLOYMENT: &str = "pinfed-agent";

/// The agent's manifests from `deploy/` (CRDs aside: join installs them) for one member:
/// the namespace, the agent base's RBAC, Deployment and PodDisruptionBudget, with the
/// member's name and the image filled in (what the member-cluster overlay's patch does).
pub fn agent_manifests(member: &str, image: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    const FILES: [(&str, &str); 3] = [
        (
            "deploy/namespace/namespace.yaml",
            include_str!("../../deploy/namespace/namespace.yaml"),
        ),
        (
            "deploy/agent/rbac.yaml",
            include_str!("../../deploy/agent/rbac.yaml"),
        ),
        (
            "deploy/agent/deployment.yaml",
            include_str!("../../deploy/agent/deployment.yaml"),
        ),
    ];
    let mut out = Vec::new();
    for (file, text) in FILES {
        out.extend(
            crate::api::yaml::documents::<serde_json::Value>(text)
                .with_context(|| format!("{file} does not parse"))?,
        );
    }
    let deployment = out
        .iter_mut()
        .find(|o| o["kind"] == "Deployment")
        .context("deploy/agent has no Deployment")?;
    let container = &mut deployment["spec"]["template"]["spec"]["containers"][0];
    container["image"] = image.into();
    let env = container["env"]
        .as_array_mut()
        .context("the agent container has no env")?;
    env.retain(|e| e["name"] != "PINFED_CLUSTER_NAME");
    env.insert(
        0,
        serde_json::json!({"name": "PINFED_CLUSTER_NAME", "value": member}),
    );
    Ok(out)
}

/// Checks an image reference's form (`[registry/]path[:tag][@digest]`) before anything is
/// installed; whether the member can pull it, only its nodes can tell.
pub fn check_image_reference(image: &str) -> anyhow::Result<()> {
    let bad = |why: &str| anyhow::anyhow!("agent image {image:?} is not an image reference: {why}");
    if image.is_empty() {
        return Err(bad("it is empty"));
    }
    if image.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("it contains white space"));
    }
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    if let Some(d) = digest
        && !d.split_once(':').is_some_and(|(alg, hex)| {
            !alg.is_empty() && hex.len() >= 32 && hex.chars().all(|c| c.is_ascii_hexdigit())
        })
    {
        return Err(bad("the digest is not ALGORITHM:HEX"));
    }
    // A tag follows the last ':' after the last '/' (a registry may have a port).
    let last = name.rsplit('/').next().unwrap_or(name);
    let (path, tag) = match last.rsplit_once(':') {
        Some((_, t)) => (&name[..name.len() - t.len() - 1], Some(t)),
        None => (name, None),
    };
    if let Some(t) = tag
        && (t.is_empty()
            || t.len() > 128
            || !t
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
            || t.starts_with(['.', '-']))
    {
        return Err(bad("the tag may hold only letters, digits, '_', '.', '-'"));
    }
    let mut components = path.split('/').collect::<Vec<_>>();
    if components.len() > 1 && (components[0].contains(['.', ':']) || components[0] == "localhost")
    {
        let host = components.remove(0);
        if host
            .split_once(':')
            .is_some_and(|(_, port)| port.is_empty() || !port.chars().all(|c| c.is_ascii_digit()))
        {
            return Err(bad("the registry's port is not a number"));
        }
    }
    let path_ok = !components.is_empty()
        && components.iter().all(|c| {
            !c.is_empty()
                && c.chars()
                    .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || "._-".contains(ch))
                && c.starts_with(|ch: char| ch.is_ascii_alphanumeric())
        });
    if !path_ok {
        return Err(bad(
            "the repository path may hold only lower-case letters, digits, '.', '_', '-' and '/'",
        ));
    }
    Ok(())
}

/// The agent a member already runs: its Deployment's image and member name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledAgent {
    pub image: String,
    pub cluster_name: Option<String>,
}

/// Reads the agent Deployment `pinfed-system/pinfed-agent` of a member, if there is one.
pub async fn installed_agent(member: &Client) -> anyhow::Result<Option<InstalledAgent>> {
    use k8s_openapi::api::apps::v1::Deployment;
    let d = Api::<Deployment>::namespaced(member.clone(), MEMBER_NAMESPACE)
        .get_opt(AGENT_DEPLOYMENT)
        .await
        .context("reading the member's agent Deployment")?;
    Ok(d.map(|d| {
        let c = d
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|s| s.containers.into_iter().next());
        InstalledAgent {
            image: c.as_ref().and_then(|c| c.image.clone()).unwrap_or_default(),
            cluster_name: c.and_then(|c| c.env).and_then(|env| {
                env.into_iter()
                    .find(|e| e.name == "PINFED_CLUSTER_NAME")
                    .and_then(|e| e.value)
            }),
        }
    }))
}

/// Whether installing `image` as member `name` over what is there is what the user asked
/// for: an agent of another image or of another member name is replaced only with
/// `replace`.
pub fn check_agent_replacement(
    existing: Option<&InstalledAgent>,
    name: &str,
    image: &str,
    replace: bool,
) -> anyhow::Result<()> {
    let Some(e) = existing else { return Ok(()) };
    if replace {
        return Ok(());
    }
    if e.image != image {
        anyhow::bail!(
            "the member already runs an agent of another version: Deployment \
             {MEMBER_NAMESPACE}/{AGENT_DEPLOYMENT} has image {:?}, this join would install {image:?}. \
             Nothing was changed. Pass --agent-image {:?} to keep it, or --replace-agent to \
             upgrade it to {image:?}",
            e.image,
            e.image
        );
    }
    if let Some(other) = e.cluster_name.as_deref().filter(|n| *n != name) {
        anyhow::bail!(
            "the member's agent serves it as member {other:?}, not {name:?}: join it under that \
             name, or pass --replace-agent to rename it. Nothing was changed"
        );
    }
    Ok(())
}

/// Installs the agent into a member (its namespace, least-privilege RBAC, Deployment,
/// PodDisruptionBudget) and returns what it applied, as `Kind namespace/name` lines.
pub async fn install_agent(
    member: &Client,
    name: &str,
    image: &str,
    pull: bool,
) -> anyhow::Result<Vec<String>> {
    let mut objs = agent_manifests(name, image)?;
    if pull {
        for o in objs.iter_mut().filter(|o| o["kind"] == "Deployment") {
            if let Some(env) = o["spec"]["template"]["spec"]["containers"][0]["env"].as_array_mut()
            {
                env.push(serde_json::json!({"name": "PINFED_AGENT_MODE", "value": "pull"}));
            }
        }
    }
    apply_all(member, &objs)
        .await
        .context("installing the agent in the member")?;
    Ok(objs
        .iter()
        .map(|o| {
            let ns = o["metadata"]["namespace"]
                .as_str()
                .map(|n| format!("{n}/"))
                .unwrap_or_default();
            format!(
                "{} {ns}{}",
                o["kind"].as_str().unwrap_or("?"),
                o["metadata"]["name"].as_str().unwrap_or("?")
            )
        })
        .collect())
}

async fn apply_all(client: &Client, objs: &[serde_json::Value]) -> anyhow::Result<()> {
    for o in objs {
        apply_json(client, o, JOIN_FIELD_MANAGER).await?;
    }
    Ok(())
}

/// A re-join right after an unjoin finds the drop namespace still terminating (its
/// bundles being deleted): nothing can be created in it until it is gone.
async fn wait_drop_namespace_gone_if_terminating(member: &Client) -> anyhow::Result<()> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(member.clone());
    let drop_ns = crate::expand::bundle::DROP_NAMESPACE;
    for _ in 0..120 {
        match api.get_opt(drop_ns).await? {
            Some(ns) if ns.metadata.deletion_timestamp.is_some() => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            _ => return Ok(()),
        }
    }
    anyhow::bail!("namespace {drop_ns} in the member is still terminating after 60 s")
}

/// Joins a member: RBAC and CRDs in the member, kubeconfig Secret and MemberCluster on the hub.
pub async fn join(hub: &Client, member: &Client, req: &JoinRequest) -> anyhow::Result<()> {
    install_crds_with(member, req.schemas)
        .await
        .context("installing CRDs in the member")?;
    wait_drop_namespace_gone_if_terminating(member).await?;
    apply_all(member, &member_rbac(&req.name))
        .await
        .context("creating the hub's ServiceAccount in the member")?;
    install_member_policies(member).await?;
    // An expiring token (TokenRequest) the hub renews itself; the Secret-held token of
    // an older join never expired and goes.
    match Api::<Secret>::namespaced(member.clone(), MEMBER_NAMESPACE)
        .delete(LEGACY_TOKEN_SECRET, &Default::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e).context("deleting the old non-expiring token Secret"),
    }
    // Joining again keeps a stored token that still works and is not due for renewal: the
    // kubeconfig Secret is then unchanged and the hub keeps its connection.
    let token = match crate::hub::member_token::reusable_token(hub, req).await {
        Some(t) => t,
        None => crate::hub::member_token::request_token(member)
            .await
            .context("requesting a token for the hub's ServiceAccount in the member")?,
    };
    anyhow::ensure!(!token.is_empty(), "the member returned an empty token");
    install_crds(hub)
        .await
        .context("installing CRDs on the hub")?;
    install_hub_policies(hub).await?;
    apply_all(hub, &hub_objects(req, &member_kubeconfig(req, &token)))
        .await
        .context("registering the member on the hub")?;
    clear_draining(hub, &req.name).await
}

/// Joining again means using the member again: an unfinished unjoin's mark goes.
pub(crate) async fn clear_draining(hub: &Client, member: &str) -> anyhow::Result<()> {
    let undrain = serde_json::json!({"metadata": {"annotations": {crate::hub::workloads::ANNOTATION_DRAINING: null}}});
    Api::<crate::api::federation::MemberCluster>::all(hub.clone())
        .patch(member, &PatchParams::default(), &Patch::Merge(&undrain))
        .await
        .context("clearing a draining mark")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> JoinRequest {
        JoinRequest {
            name: "use1a".into(),
            region: Some("us-east-1".into()),
            zone: Some("us-east-1a".into()),
            labels: BTreeMap::from([("tier".into(), "prod".into())]),
            weight: Some(2),
            server: "https://127.0.0.1:6443".into(),
            ca_pem: b"-----BEGIN CERTIFICATE-----\n".to_vec(),
            schemas: Default::default(),
        }
    }

    /// The identity join creates (and unjoin deletes) in a member is none of the
    /// ServiceAccounts `deploy/` runs pinfed as, since a cluster can be hub and member.
    #[test]
    fn the_member_identity_is_not_a_shipped_service_account() {
        let shipped: Vec<String> = ["hub", "jss", "agent"]
            .iter()
            .flat_map(|d| {
                let path = format!("{}/deploy/{d}/rbac.yaml", env!("CARGO_MANIFEST_DIR"));
                let text = std::fs::read_to_string(&path).expect(&path);
                text.split("\n---")
                    .filter(|doc| doc.contains("kind: ServiceAccount\n"))
                    .filter_map(|doc| {
                        doc.lines()
                            .find_map(|l| l.trim().strip_prefix("name: "))
                            .map(str::to_string)
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        assert!(shipped.contains(&"pinfed-hub".to_string()), "{shipped:?}");
        let objects = member_rbac("use1a");
        let created: Vec<&str> = objects
            .iter()
            .filter(|o| o["kind"] == "ServiceAccount")
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect();
        assert_eq!(created, [HUB_SERVICE_ACCOUNT]);
        for sa in created {
            assert!(
                !shipped.iter().any(|s| s == sa),
                "{sa} is shipped in deploy/"
            );
        }
    }

    #[test]
    fn the_member_kubeconfig_uses_the_token_and_parses() {
        let text = member_kubeconfig(&req(), "tok123");
        let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("use1a"));
        assert_eq!(
            kc.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
            Some("https://127.0.0.1:6443")
        );
        assert!(text.contains("token: tok123"));
    }

    #[test]
    fn agent_manifests_name_the_member_and_the_image() {
        let objs = agent_manifests("use1b", "registry.example/pinfed:9").unwrap();
        let kinds: Vec<&str> = objs.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert!(
            kinds.contains(&"Namespace") && kinds.contains(&"ClusterRole"),
            "{kinds:?}"
        );
        let d = objs.iter().find(|o| o["kind"] == "Deployment").unwrap();
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], "registry.example/pinfed:9");
        assert!(
            c["env"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["name"] == "PINFED_CLUSTER_NAME" && e["value"] == "use1b")
        );
    }

    #[test]
    fn agent_manifests_name_the_member_once_over_the_base() {
        let objs = agent_manifests("use1c", DEFAULT_AGENT_IMAGE).unwrap();
        let d = objs.iter().find(|o| o["kind"] == "Deployment").unwrap();
        let env = d["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap();
        let names: Vec<_> = env
            .iter()
            .filter(|e| e["name"] == "PINFED_CLUSTER_NAME")
            .collect();
        assert_eq!(names.len(), 1, "{env:?}");
        assert!(objs.iter().any(|o| o["kind"] == "PodDisruptionBudget"));
        assert_eq!(
            DEFAULT_AGENT_IMAGE,
            format!("pinfed:{}", env!("CARGO_PKG_VERSION"))
        );
    }

    #[test]
    fn image_references_are_checked_before_anything_is_installed() {
        for good in [
            "pinfed:0.1.0",
            "localhost/pinfed:0.1.0",
            "registry.example:5000/team/pinfed:v0.1.0-rc.1",
            "ghcr.io/org/pinfed@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "pinfed",
        ] {
            check_image_reference(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for (bad, why) in [
            ("", "empty"),
            ("pinfed: 0.1.0", "white space"),
            ("Pinfed:0.1.0", "repository path"),
            ("pinfed:", "tag"),
            ("pinfed:0.1/0", "port"),
            ("pinfed@sha256:xyz", "digest"),
            ("registry.example/", "repository path"),
        ] {
            let e = check_image_reference(bad).expect_err(bad).to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn an_agent_of_another_version_or_name_is_kept_unless_replaced() {
        let there = InstalledAgent {
            image: "pinfed:0.0.9".into(),
            cluster_name: Some("use1a".into()),
        };
        check_agent_replacement(None, "use1a", "pinfed:0.1.0", false).unwrap();
        check_agent_replacement(Some(&there), "use1a", "pinfed:0.0.9", false).unwrap();
        let e = check_agent_replacement(Some(&there), "use1a", "pinfed:0.1.0", false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"pinfed:0.0.9\"")
                && e.contains("--replace-agent")
                && e.contains("Nothing was changed"),
            "{e}"
        );
        let e = check_agent_replacement(Some(&there), "use1b", "pinfed:0.0.9", false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("as member \"use1a\""), "{e}");
        check_agent_replacement(Some(&there), "use1b", "pinfed:0.1.0", true).unwrap();
    }

    #[test]
    fn hub_objects_point_the_member_cluster_at_its_secret() {
        let objs = hub_objects(&req(), "kc");
        let mc = objs.iter().find(|o| o["kind"] == "MemberCluster").unwrap();
        assert_eq!(mc["spec"]["secretRef"]["name"], "member-use1a");
        assert_eq!(mc["spec"]["zone"], "us-east-1a");
        assert_eq!(mc["spec"]["weight"], 2);
        let mc: crate::api::federation::MemberCluster = serde_json::from_value(mc.clone()).unwrap();
        assert_eq!(
            mc.spec.selector_labels()["topology.kubernetes.io/zone"],
            "us-east-1a"
        );
    }

    #[test]
    fn the_hub_may_not_touch_member_workload_status_or_rbac() {
        let rbac = member_rbac("use1a");
        let role = rbac.iter().find(|o| o["kind"] == "ClusterRole").unwrap();
        let text = role.to_string();
        assert!(
            !text.contains("rbac.authorization.k8s.io\""),
            "no RBAC escalation"
        );
        let status_rule = role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r.to_string().contains("/status"))
            .unwrap();
        assert_eq!(status_rule["verbs"], serde_json::json!(["get"]));
        // Cluster-wide: no Secrets, ConfigMaps, Jobs or Pods to write, no namespace patch.
        for rule in role["rules"].as_array().unwrap() {
            let has = |r: &str| rule["resources"].as_array().unwrap().iter().any(|x| x == r);
            let may = |v: &str| rule["verbs"].as_array().unwrap().iter().any(|x| x == v);
            for r in ["secrets", "configmaps", "jobs", "serviceaccounts"] {
                assert!(!has(r), "cluster-wide {r}: {rule}");
            }
            if has("pods") || has("namespaces") {
                assert!(!may("patch") && !may("update") && !may("delete"), "{rule}");
                assert!(!has("pods") || !may("create"), "{rule}");
            }
        }
        // Secrets only in the drop namespace; its own token only.
        let roles: Vec<_> = rbac.iter().filter(|o| o["kind"] == "Role").collect();
        for r in &roles {
            let text = r["rules"].to_string();
            if text.contains("secrets") {
                assert_eq!(
                    r["metadata"]["namespace"],
                    crate::expand::bundle::DROP_NAMESPACE
                );
            }
            if text.contains("serviceaccounts/token") {
                assert_eq!(
                    r["rules"][0]["resourceNames"],
                    serde_json::json!([HUB_SERVICE_ACCOUNT])
                );
                assert_eq!(r["rules"][0]["verbs"], serde_json::json!(["create"]));
            }
        }
        assert!(
            !rbac
                .iter()
                .any(|o| o["type"] == "kubernetes.io/service-account-token"),
            "no token Secret: tokens expire"
        );
    }
}

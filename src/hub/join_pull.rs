//! `pinfed join NAME --mode pull`: a member the hub never connects to. On the hub: the
//! member's namespace `pinfed-member-NAME`, its agent's ServiceAccount there with a Role
//! on that namespace only (read its MemberSlices and bundles, write their status, renew
//! its Lease, renew its own token) and a ClusterRole on its own MemberCluster and the
//! RuntimeProfiles; the hub's own Role in that namespace; the MemberCluster (mode Pull,
//! no Secret). In the member: the agent's extra rights to apply what it pulls, and the
//! Secret with its kubeconfig for the hub (an expiring token the agent renews). No
//! credential for the member exists on the hub. The builders are pure; [`join_pull`]
//! applies them.

use anyhow::Context;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;

use crate::api::member_slice::{agent_lease_name, pull_namespace};
use crate::controller::apply::apply_json;
use crate::controller::cluster_side::MEMBER_NAMESPACE;
use crate::controller::tokens;
use crate::hub::join::{AGENT_BUNDLES_ROLE, JOIN_FIELD_MANAGER, JoinRequest, install_crds};

/// The agent's ServiceAccount on the hub, in the member's pull namespace.
pub const PULL_AGENT: &str = "pinfed-agent";
/// The member Secret with the agent's kubeconfig for the hub.
pub const HUB_KUBECONFIG_SECRET: &str = "pinfed-hub-kubeconfig";
/// The member-side ClusterRole (and Role) that let a pull agent apply what it pulls.
pub const PULL_AGENT_ROLE: &str = "pinfed-agent-pull";
/// The hub's Role in a pull namespace.
pub const HUB_PULL_ROLE: &str = "pinfed-hub-pull";
/// The hub's ServiceAccount in the hub cluster (deploy/hub/rbac.yaml).
pub const HUB_ACCOUNT: &str = "pinfed-hub";
/// How long the agent's token lives; it renews it at two thirds.
pub const AGENT_TOKEN_SECS: i64 = 3 * 24 * 3600;
/// The Secret in the pull namespace every token of the member's agent is bound to: the
/// chain of renewals ends with it (`pinfed-token-lifetime` refuses the agent a token
/// bound to anything else). The hub deletes it when the credential expires; joining
/// again makes a new one.
pub use crate::api::member_slice::AGENT_CREDENTIAL;
/// On that Secret: when the agent's credential ends (RFC 3339).
pub const ANNOTATION_CREDENTIAL_EXPIRES: &str = "federation.pinterest.com/credential-expires";
/// How long a pull agent's credential lasts unless `pinfed join --credential-days` says.
pub const DEFAULT_CREDENTIAL_DAYS: u64 = 90;

/// The agent's credential as `pinfed join` makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CredentialTerms {
    /// How long from the join it lasts.
    pub lifetime: std::time::Duration,
    /// Make a new one even while the current one lasts (every token of the old one is
    /// refused from then on).
    pub renew: bool,
}

impl Default for CredentialTerms {
    fn default() -> CredentialTerms {
        CredentialTerms {
            lifetime: std::time::Duration::from_secs(DEFAULT_CREDENTIAL_DAYS * 24 * 3600),
            renew: false,
        }
    }
}

/// The credential Secret, ending at `expires` (no data: only its existence counts).
pub fn credential_secret(member: &str, expires: k8s_openapi::jiff::Timestamp) -> Secret {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": AGENT_CREDENTIAL,
            "namespace": pull_namespace(member),
            "labels": {"app.kubernetes.io/part-of": "pinfed", "federation.pinterest.com/member": member},
            "annotations": {ANNOTATION_CREDENTIAL_EXPIRES: expires.to_string()},
        },
        "type": "federation.pinterest.com/agent-credential",
    }))
    .expect("a Secret")
}

/// When a credential Secret says it ends; `None` when it does not say (or not readably).
pub fn credential_expires(s: &Secret) -> Option<k8s_openapi::jiff::Timestamp> {
    s.metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_CREDENTIAL_EXPIRES)?
        .parse()
        .ok()
}

/// The member's agent credential on the hub: the current one while it lasts (and no
/// renewal is asked for), else a new one.
async fn agent_credential(
    hub: &Client,
    member: &str,
    terms: &CredentialTerms,
) -> anyhow::Result<tokens::BoundSecret> {
    let api: Api<Secret> = Api::namespaced(hub.clone(), &pull_namespace(member));
    let now = k8s_openapi::jiff::Timestamp::now();
    if let Some(s) = api.get_opt(AGENT_CREDENTIAL).await? {
        let lasts = credential_expires(&s).is_some_and(|e| e > now);
        match (&s.metadata.uid, lasts && !terms.renew) {
            (Some(uid), true) => {
                return Ok(tokens::BoundSecret {
                    name: AGENT_CREDENTIAL.into(),
                    uid: uid.clone(),
                });
            }
            _ => {
                api.delete(AGENT_CREDENTIAL, &Default::default()).await?;
                // (A create right after the delete could still meet the old object.)
                for _ in 0..50 {
                    if api.get_opt(AGENT_CREDENTIAL).await?.is_none() {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }
    let lifetime =
        k8s_openapi::jiff::SignedDuration::try_from(terms.lifetime).context("--credential-days")?;
    let expires = now
        .checked_add(lifetime)
        .context("the credential's end is out of range")?;
    let made = api
        .create(&Default::default(), &credential_secret(member, expires))
        .await
        .context("making the agent's credential Secret")?;
    Ok(tokens::BoundSecret {
        name: AGENT_CREDENTIAL.into(),
        uid: made
            .metadata
            .uid
            .context("the credential Secret has no uid")?,
    })
}

/// The hub side of the API server as the member's agent reaches it.
#[derive(Debug, Clone)]
pub struct HubEndpoint {
    pub server: String,
    pub ca_pem: Vec<u8>,
}

fn rbac(kind: &str, name: &str, ns: Option<&str>, rules: serde_json::Value) -> serde_json::Value {
    let mut o = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
        "metadata": {"name": name}, "rules": rules});
    if let Some(ns) = ns {
        o["metadata"]["namespace"] = ns.into();
    }
    o
}

fn binding(kind: &str, name: &str, ns: Option<&str>, sa: (&str, &str)) -> serde_json::Value {
    let mut b = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": format!("{kind}Binding"),
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": sa.1, "namespace": sa.0}]});
    if let Some(ns) = ns {
        b["metadata"]["namespace"] = ns.into();
    }
    b
}

/// What a pull member's agent may do on the hub: its own namespace only (no Secret or
/// slice of another member is readable), its own MemberCluster, the RuntimeProfiles.
pub fn hub_objects(req: &JoinRequest) -> Vec<serde_json::Value> {
    let ns = pull_namespace(&req.name);
    let agent = (ns.as_str(), PULL_AGENT);
    let cluster_role = format!("pinfed-agent-{}", req.name);
    let read = ["get", "list", "watch"];
    let rw = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    let spec = crate::hub::join::member_spec(req, "Pull");
    vec![
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns,
            "labels": {"app.kubernetes.io/part-of": "pinfed", "federation.pinterest.com/member": req.name}}}),
        serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": PULL_AGENT, "namespace": ns}}),
        rbac(
            "Role",
            PULL_AGENT,
            Some(&ns),
            serde_json::json!([
                {"apiGroups": ["federation.pinterest.com"], "resources": ["memberslices"], "verbs": read},
                {"apiGroups": ["federation.pinterest.com"], "resources": ["memberslices/status"],
                 "verbs": ["get", "patch", "update"]},
                // The bundles the hub drops for this member's slices.
                {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": read},
                // Its Lease: created once, then only this one renewed.
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "resourceNames": [agent_lease_name(&req.name)], "verbs": ["get", "update", "patch"]},
                // Its report: the status of this one object, which join creates (no create
                // right, no write of the spec).
                {"apiGroups": ["federation.pinterest.com"], "resources": ["memberreports"],
                 "resourceNames": [agent_lease_name(&req.name)], "verbs": ["get"]},
                {"apiGroups": ["federation.pinterest.com"], "resources": ["memberreports/status"],
                 "resourceNames": [agent_lease_name(&req.name)], "verbs": ["get", "update", "patch"]},
                // A fresh token for itself before the current one expires.
                {"apiGroups": [""], "resources": ["serviceaccounts/token"],
                 "resourceNames": [PULL_AGENT], "verbs": ["create"]},
            ]),
        ),
        binding("Role", PULL_AGENT, Some(&ns), agent),
        rbac(
            "ClusterRole",
            &cluster_role,
            None,
            serde_json::json!([
                {"apiGroups": ["federation.pinterest.com"], "resources": ["memberclusters"],
                 "resourceNames": [req.name], "verbs": ["get"]},
                {"apiGroups": ["federation.pinterest.com"], "resources": ["memberclusters/status"],
                 "resourceNames": [req.name], "verbs": ["get"]},
                {"apiGroups": ["compute.pinterest.com"], "resources": ["runtimeprofiles"], "verbs": read},
            ]),
        ),
        binding("ClusterRole", &cluster_role, None, agent),
        // The hub writes this member's slices and bundles here and reads the Lease.
        rbac(
            "Role",
            HUB_PULL_ROLE,
            Some(&ns),
            serde_json::json!([
                {"apiGroups": ["federation.pinterest.com"], "resources": ["memberslices"], "verbs": rw},
                {"apiGroups": ["federation.pinterest.com"], "resources": ["memberslices/status"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": rw},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": read},
                {"apiGroups": ["federation.pinterest.com"], "resources": ["memberreports"], "verbs": read},
            ]),
        ),
        binding(
            "Role",
            HUB_PULL_ROLE,
            Some(&ns),
            (MEMBER_NAMESPACE, HUB_ACCOUNT),
        ),
        // The agent's report, empty until its first (it may not create one).
        serde_json::json!({"apiVersion": "federation.pinterest.com/v1alpha1", "kind": "MemberReport",
            "metadata": {"name": agent_lease_name(&req.name), "namespace": ns},
            "spec": {"member": req.name}}),
        serde_json::json!({"apiVersion": "federation.pinterest.com/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": req.name}, "spec": spec}),
    ]
}

/// A kubeconfig for the member's agent on the hub.
pub fn agent_kubeconfig(member: &str, hub: &HubEndpoint, token: &str) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(&hub.ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: {s}\n    certificate-authority-data: {ca}\n\
         users:\n- name: {member}-agent\n  user:\n    token: {token}\n\
         contexts:\n- name: hub\n  context:\n    cluster: hub\n    user: {member}-agent\n    namespace: {ns}\ncurrent-context: hub\n",
        s = hub.server,
        ns = pull_namespace(member),
    )
}

/// What a pull member's agent needs in the member beyond a push agent's rights: apply the
/// slices and profiles it pulls (and their namespaces), read nodes for its report, and
/// read and renew its hub kubeconfig Secret — which this also holds.
pub fn member_objects(member: &str, kubeconfig: &str) -> Vec<serde_json::Value> {
    use base64::Engine;
    let drop_ns = crate::expand::bundle::DROP_NAMESPACE;
    let agent = (MEMBER_NAMESPACE, PULL_AGENT);
    let rw = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    vec![
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MEMBER_NAMESPACE}}),
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": drop_ns,
            "labels": {"app.kubernetes.io/part-of": "pinfed"}}}),
        rbac(
            "ClusterRole",
            PULL_AGENT_ROLE,
            None,
            serde_json::json!([
                {"apiGroups": ["compute.pinterest.com"], "resources": [
                    "pinterestservices", "pinterestjobsets", "pinterestcronjobs", "pinterestdaemons",
                    "pinteresttrainingjobs", "pintereststatefulsets", "runtimeprofiles"], "verbs": rw},
                // Create only: it reads no namespace, and one that exists is never changed.
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
            ]),
        ),
        binding("ClusterRole", PULL_AGENT_ROLE, None, agent),
        rbac(
            "Role",
            PULL_AGENT_ROLE,
            Some(MEMBER_NAMESPACE),
            serde_json::json!([
                {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [HUB_KUBECONFIG_SECRET],
                 "verbs": ["get", "patch"]},
            ]),
        ),
        binding("Role", PULL_AGENT_ROLE, Some(MEMBER_NAMESPACE), agent),
        rbac(
            "Role",
            AGENT_BUNDLES_ROLE,
            Some(drop_ns),
            serde_json::json!([
                {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "list", "watch"]},
            ]),
        ),
        binding("Role", AGENT_BUNDLES_ROLE, Some(drop_ns), agent),
        serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": HUB_KUBECONFIG_SECRET, "namespace": MEMBER_NAMESPACE,
                "labels": {crate::expand::bundle::LABEL_CREDENTIAL: member}},
            "data": {"kubeconfig": base64::engine::general_purpose::STANDARD.encode(kubeconfig)}}),
    ]
}

async fn apply_all(client: &Client, objs: &[serde_json::Value]) -> anyhow::Result<()> {
    for o in objs {
        apply_json(client, o, JOIN_FIELD_MANAGER)
            .await
            .with_context(|| {
                format!(
                    "applying {} {}",
                    o["kind"].as_str().unwrap_or("?"),
                    o["metadata"]["name"].as_str().unwrap_or("?")
                )
            })?;
    }
    Ok(())
}

/// Joins a member in pull mode (see the module's text).
pub async fn join_pull(
    hub: &Client,
    member: &Client,
    req: &JoinRequest,
    endpoint: &HubEndpoint,
    terms: &CredentialTerms,
) -> anyhow::Result<()> {
    install_crds(hub)
        .await
        .context("installing CRDs on the hub")?;
    crate::hub::join::install_hub_policies(hub).await?;
    crate::hub::join::install_crds_with(member, req.schemas)
        .await
        .context("installing CRDs in the member")?;
    crate::hub::join::install_member_policies(member).await?;
    apply_all(hub, &hub_objects(req))
        .await
        .context("registering the pull member on the hub")?;
    let bound = agent_credential(hub, &req.name, terms)
        .await
        .context("the agent's credential on the hub")?;
    let token = tokens::request_bound_token(
        hub,
        &pull_namespace(&req.name),
        PULL_AGENT,
        AGENT_TOKEN_SECS,
        Some(&bound),
    )
    .await
    .context("requesting a token for the member's agent on the hub")?;
    anyhow::ensure!(!token.is_empty(), "the hub returned an empty token");
    apply_all(
        member,
        &member_objects(&req.name, &agent_kubeconfig(&req.name, endpoint, &token)),
    )
    .await
    .context("leaving the agent's hub kubeconfig in the member")?;
    crate::hub::join::clear_draining(hub, &req.name).await
}

/// Removes a pull member's registration: its namespace on the hub (MemberSlices,
/// bundles, Lease, the agent's ServiceAccount and Roles go with it) and the agent's
/// ClusterRole; in the member (when reachable), the Secret and the pull rights.
pub async fn unjoin_pull(hub: &Client, member: Option<&Client>, name: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let gone = |r: Result<_, kube::Error>| match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    };
    let cluster_role = format!("pinfed-agent-{name}");
    gone(
        Api::<ClusterRoleBinding>::all(hub.clone())
            .delete(&cluster_role, &Default::default())
            .await
            .map(drop),
    )?;
    gone(
        Api::<ClusterRole>::all(hub.clone())
            .delete(&cluster_role, &Default::default())
            .await
            .map(drop),
    )?;
    gone(
        Api::<Namespace>::all(hub.clone())
            .delete(&pull_namespace(name), &Default::default())
            .await
            .map(drop),
    )?;
    if let Some(member) = member {
        gone(
            Api::<Secret>::namespaced(member.clone(), MEMBER_NAMESPACE)
                .delete(HUB_KUBECONFIG_SECRET, &Default::default())
                .await
                .map(drop),
        )?;
        gone(
            Api::<RoleBinding>::namespaced(member.clone(), MEMBER_NAMESPACE)
                .delete(PULL_AGENT_ROLE, &Default::default())
                .await
                .map(drop),
        )?;
        gone(
            Api::<Role>::namespaced(member.clone(), MEMBER_NAMESPACE)
                .delete(PULL_AGENT_ROLE, &Default::default())
                .await
                .map(drop),
        )?;
        gone(
            Api::<ClusterRoleBinding>::all(member.clone())
                .delete(PULL_AGENT_ROLE, &Default::default())
                .await
                .map(drop),
        )?;
        gone(
            Api::<ClusterRole>::all(member.clone())
                .delete(PULL_AGENT_ROLE, &Default::default())
                .await
                .map(drop),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> JoinRequest {
        JoinRequest {
            name: "use1c".into(),
            region: None,
            zone: Some("us-east-1c".into()),
            labels: Default::default(),
            weight: None,
            server: String::new(),
            ca_pem: vec![],
            schemas: Default::default(),
        }
    }

    #[test]
    fn the_agent_may_read_only_its_own_namespace_on_the_hub() {
        let objs = hub_objects(&req());
        let role = objs
            .iter()
            .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == PULL_AGENT)
            .unwrap();
        assert_eq!(role["metadata"]["namespace"], "pinfed-member-use1c");
        let cr = objs.iter().find(|o| o["kind"] == "ClusterRole").unwrap();
        for rule in cr["rules"].as_array().unwrap() {
            let res = rule["resources"][0].as_str().unwrap();
            assert!(
                res == "runtimeprofiles" || rule["resourceNames"] == serde_json::json!(["use1c"]),
                "cluster-wide rule beyond its own MemberCluster: {rule}"
            );
            assert_ne!(res, "secrets");
            // Its report is its own object: nothing of the MemberCluster is writable.
            let verbs = rule["verbs"].as_array().unwrap();
            assert!(
                verbs.iter().all(|v| v == "get" || res == "runtimeprofiles"),
                "the agent writes its MemberCluster: {rule}"
            );
        }
        let reports: Vec<&serde_json::Value> = role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["resources"][0] == "memberreports/status")
            .collect();
        assert_eq!(reports.len(), 1);
        assert_eq!(
            reports[0]["resourceNames"],
            serde_json::json!(["pinfed-agent-use1c"]),
            "one report, its own"
        );
        assert!(
            !reports[0]["verbs"]
                .as_array()
                .unwrap()
                .contains(&"create".into())
        );
        let report = objs.iter().find(|o| o["kind"] == "MemberReport").unwrap();
        assert_eq!(report["metadata"]["name"], "pinfed-agent-use1c");
        assert_eq!(report["metadata"]["namespace"], "pinfed-member-use1c");
        let mc = objs.iter().find(|o| o["kind"] == "MemberCluster").unwrap();
        assert_eq!(mc["spec"]["mode"], "Pull");
        assert!(
            mc["spec"].get("secretRef").is_none(),
            "no credential for the member"
        );
    }

    #[test]
    fn the_agent_kubeconfig_points_at_its_namespace_on_the_hub() {
        let hub = HubEndpoint {
            server: "https://127.0.0.1:7000".into(),
            ca_pem: b"ca".to_vec(),
        };
        let text = agent_kubeconfig("use1c", &hub, "tok");
        let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        let ctx = kc.contexts[0].context.as_ref().unwrap();
        assert_eq!(ctx.namespace.as_deref(), Some("pinfed-member-use1c"));
        assert_eq!(tokens::kubeconfig_token(&text).as_deref(), Some("tok"));
    }
}

//! The attacker's view (issue 36): with the credential the hub stores for a push member,
//! and as a kubectl user of the hub with rights in one namespace, try to get a privileged
//! pod, the host, a privileged ServiceAccount, a privileged sidecar or a daemon on every
//! node into a member, or take over an object someone else made. Each is refused (a
//! condition and an Event saying why) and nothing of it reaches the member. One agent
//! runs for the first push member, as the ServiceAccount `deploy/` ships.

mod support;

use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use kube::api::{Api, DynamicObject, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use support::{Daemon, Federation, agent_args, eventually, join_all, spawn_daemon, unique_name};

const WAIT: Duration = Duration::from_secs(60);

/// The first push member, with its agent running (shared by the tests of this file).
fn member_with_agent(fed: &Federation) -> &'static (String, Daemon) {
    static AGENT: OnceLock<(String, Daemon)> = OnceLock::new();
    AGENT.get_or_init(|| {
        join_all(fed);
        let m = fed
            .member_names()
            .into_iter()
            .find(|m| !fed.is_pull(m))
            .expect("the topology has a push member");
        let agent = spawn_daemon(fed, &format!("esc-agent-{m}"), &agent_args(fed, &m));
        (m, agent)
    })
}

/// A client for `member` with the credential the hub stores for it (its Secret on the
/// hub, as `pinfed join` wrote it): what someone who read that Secret holds.
async fn stolen_hub_credential(fed: &Federation, member: &str) -> Client {
    let secret = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(fed.hub(), "pinfed-system")
        .get(&format!("member-{member}"))
        .await
        .expect("the hub's kubeconfig Secret for the member");
    let text = String::from_utf8(secret.data.unwrap()["kubeconfig"].0.clone()).unwrap();
    let kc = Kubeconfig::from_yaml(&text).expect("a kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("a usable kubeconfig");
    Client::try_from(cfg).expect("client")
}

fn resource(kind: &str) -> ApiResource {
    let plural = format!("{}s", kind.to_lowercase());
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("compute.pinterest.com", "v1alpha1", kind),
        &plural,
    )
}

fn workload(kind: &str, name: &str, pod: serde_json::Value) -> serde_json::Value {
    let mut spec = serde_json::json!({
        "owner": {"team": "mallory", "contact": "mallory@example.com"},
        "template": {"spec": pod},
    });
    if kind == "PinterestService" {
        spec["replicas"] = 1.into();
    }
    serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": kind,
        "metadata": {"name": name}, "spec": spec,
    })
}

fn container() -> serde_json::Value {
    serde_json::json!({"name": "app", "image": "registry.example/app:1",
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}})
}

async fn create(client: &Client, ns: &str, obj: &serde_json::Value) {
    let kind = obj["kind"].as_str().unwrap();
    let o: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &resource(kind))
        .create(&PostParams::default(), &o)
        .await
        .unwrap_or_else(|e| panic!("creating {kind} in {ns}: {e}"));
}

/// Waits until the agent refuses the workload: its Invalid condition with `reason`, whose
/// message holds every one of `says`. Returns the message.
async fn refused(
    member: &Client,
    ns: &str,
    kind: &str,
    name: &str,
    reason: &str,
    says: &[&str],
    agent: &Daemon,
) -> String {
    let api = Api::<DynamicObject>::namespaced_with(member.clone(), ns, &resource(kind));
    let mut message = String::new();
    let found = std::sync::Mutex::new(String::new());
    eventually(
        WAIT,
        &format!(
            "{kind} {ns}/{name} refused with {reason}\n{}",
            agent.log_tail()
        ),
        || {
            let api = api.clone();
            let found = &found;
            async move {
                let Ok(o) = api.get(name).await else {
                    return false;
                };
                let c = o.data["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| {
                        c["type"] == "Invalid" && c["status"] == "True" && c["reason"] == reason
                    })
                    .cloned();
                if let Some(c) = c {
                    *found.lock().unwrap() = c["message"].as_str().unwrap_or("").to_string();
                    return true;
                }
                false
            }
        },
    )
    .await;
    message.push_str(&found.lock().unwrap());
    for s in says {
        assert!(message.contains(s), "the refusal says {s:?}: {message}");
    }
    message
}

/// Nothing of the workload was created in the member: no object carries its name.
async fn nothing_created(member: &Client, ns: &str, name: &str) {
    let d = Api::<Deployment>::namespaced(member.clone(), ns);
    assert!(
        d.get_opt(name).await.unwrap().is_none(),
        "Deployment {ns}/{name} exists"
    );
    let ds = Api::<DaemonSet>::namespaced(member.clone(), ns);
    assert!(
        ds.get_opt(name).await.unwrap().is_none(),
        "DaemonSet {ns}/{name} exists"
    );
}

/// A namespace in the member as pinfed would create it (the hub's credential may create
/// namespaces, and label them as it likes).
async fn pinfed_namespace(client: &Client, prefix: &str) -> String {
    let name = unique_name(prefix);
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name,
        "labels": {"app.kubernetes.io/managed-by": "pinfed", "pinfed.dev/e2e": "true"}}}))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    name
}

async fn delete_namespace(admin: &Client, ns: &str) {
    let _ = Api::<Namespace>::all(admin.clone())
        .delete(ns, &Default::default())
        .await;
}

#[tokio::test]
async fn the_hub_credential_cannot_run_a_privileged_pod_where_the_member_did_not_enable_pinfed() {
    let fed = Federation::connect().await;
    let (m, agent) = member_with_agent(&fed);
    let stolen = stolen_hub_credential(&fed, m).await;
    let admin = fed.client(m);
    let name = unique_name("esc-priv");
    let mut c = container();
    c["securityContext"] = serde_json::json!({"privileged": true});
    create(
        &stolen,
        "default",
        &workload(
            "PinterestService",
            &name,
            serde_json::json!({"containers": [c]}),
        ),
    )
    .await;
    refused(
        &admin,
        "default",
        "PinterestService",
        &name,
        "NamespaceNotEnabled",
        &[
            "namespace default is not enabled for pinfed",
            "nothing was created",
        ],
        agent,
    )
    .await;
    nothing_created(&admin, "default", &name).await;
    let _ = Api::<DynamicObject>::namespaced_with(
        admin.clone(),
        "default",
        &resource("PinterestService"),
    )
    .delete(&name, &Default::default())
    .await;
}

#[tokio::test]
async fn the_hub_credential_cannot_reach_the_host_from_a_namespace_it_creates() {
    let fed = Federation::connect().await;
    let (m, agent) = member_with_agent(&fed);
    let stolen = stolen_hub_credential(&fed, m).await;
    let admin = fed.client(m);
    let ns = pinfed_namespace(&stolen, "esc-host").await;
    let name = "rooted";
    let pod = serde_json::json!({"hostNetwork": true, "hostPID": true,
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
        "containers": [container()]});
    create(&stolen, &ns, &workload("PinterestService", name, pod)).await;
    refused(
        &admin,
        &ns,
        "PinterestService",
        name,
        "PodPolicyDenied",
        &[
            "Pod Security baseline",
            "spec.template.spec.hostNetwork",
            "spec.template.spec.hostPID",
            "spec.template.spec.volumes[0].hostPath",
        ],
        agent,
    )
    .await;
    nothing_created(&admin, &ns, name).await;
    delete_namespace(&admin, &ns).await;
}

#[tokio::test]
async fn the_hub_credential_cannot_run_as_a_privileged_service_account_of_an_enabled_namespace() {
    let fed = Federation::connect().await;
    let (m, agent) = member_with_agent(&fed);
    let stolen = stolen_hub_credential(&fed, m).await;
    let admin = fed.client(m);
    // A namespace the member's admins enabled (e2e/member-policy.yaml: agent-*), holding a
    // ServiceAccount bound to cluster-admin.
    let ns = support::TestNamespace::create(&admin, "agent-esc-sa").await;
    let sa: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "powerful"}})).unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), &ns.name)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    let binding = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {n}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n- kind: ServiceAccount\n  name: powerful\n  namespace: {n}\n",
        n = ns.name
    );
    support::kubectl_apply(&fed, m, &binding);
    let name = "as-admin";
    let pod = serde_json::json!({"serviceAccountName": "powerful", "containers": [container()]});
    create(&stolen, &ns.name, &workload("PinterestService", name, pod)).await;
    refused(
        &admin,
        &ns.name,
        "PinterestService",
        name,
        "PodPolicyDenied",
        &["spec.template.spec.serviceAccountName"],
        agent,
    )
    .await;
    nothing_created(&admin, &ns.name, name).await;
    support::kubectl_in(&fed, m, &["delete", "clusterrolebinding", &ns.name], "");
    ns.delete().await;
}

#[tokio::test]
async fn a_runtime_profile_from_the_hub_cannot_inject_a_privileged_sidecar() {
    let fed = Federation::connect().await;
    let (m, agent) = member_with_agent(&fed);
    let stolen = stolen_hub_credential(&fed, m).await;
    let admin = fed.client(m);
    let version = unique_name("esc");
    let profile = serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "RuntimeProfile",
        "metadata": {"name": version},
        "spec": {"version": version, "sidecars": [{"container": {"name": "evil",
            "image": "registry.example/evil:1", "securityContext": {"privileged": true}}}]}
    });
    let profiles = Api::<DynamicObject>::all_with(
        stolen.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("compute.pinterest.com", "v1alpha1", "RuntimeProfile"),
            "runtimeprofiles",
        ),
    );
    profiles
        .create(
            &PostParams::default(),
            &serde_json::from_value(profile).unwrap(),
        )
        .await
        .expect("the hub's credential writes RuntimeProfiles");
    let ns = pinfed_namespace(&stolen, "esc-profile").await;
    // Pinned to the profile: its pods would carry the sidecar.
    let mut pinned = workload(
        "PinterestService",
        "pinned",
        serde_json::json!({"containers": [container()]}),
    );
    pinned["spec"]["runtimeVersion"] = version.clone().into();
    create(&stolen, &ns, &pinned).await;
    let message = refused(
        &admin,
        &ns,
        "PinterestService",
        "pinned",
        "PodPolicyDenied",
        &["securityContext.privileged"],
        agent,
    )
    .await;
    assert!(message.contains("Deployment/pinned"), "{message}");
    nothing_created(&admin, &ns, "pinned").await;
    // An ordinary workload in the same namespace runs: the agent refuses what breaks the
    // policy, not everything.
    create(
        &stolen,
        &ns,
        &workload(
            "PinterestService",
            "plain",
            serde_json::json!({"containers": [container()]}),
        ),
    )
    .await;
    let d = Api::<Deployment>::namespaced(admin.clone(), &ns);
    eventually(
        WAIT,
        &format!("the plain service's Deployment\n{}", agent.log_tail()),
        || {
            let d = d.clone();
            async move { d.get_opt("plain").await.ok().flatten().is_some() }
        },
    )
    .await;
    let _ = profiles.delete(&version, &Default::default()).await;
    delete_namespace(&admin, &ns).await;
}

#[tokio::test]
async fn the_hub_credential_cannot_start_a_daemon_on_every_node() {
    let fed = Federation::connect().await;
    let (m, agent) = member_with_agent(&fed);
    let stolen = stolen_hub_credential(&fed, m).await;
    let admin = fed.client(m);
    let ns = pinfed_namespace(&stolen, "esc-daemon").await;
    create(
        &stolen,
        &ns,
        &workload(
            "PinterestDaemon",
            "everywhere",
            serde_json::json!({"containers": [container()]}),
        ),
    )
    .await;
    refused(
        &admin,
        &ns,
        "PinterestDaemon",
        "everywhere",
        "DaemonNotAllowed",
        &["PinterestDaemons are not allowed"],
        agent,
    )
    .await;
    nothing_created(&admin, &ns, "everywhere").await;
    delete_namespace(&admin, &ns).await;
}

#[tokio::test]
async fn the_agent_takes_over_no_object_it_did_not_make_until_a_member_admin_hands_it_over() {
    let fed = Federation::connect().await;
    let (m, agent) = member_with_agent(&fed);
    let stolen = stolen_hub_credential(&fed, m).await;
    let admin = fed.client(m);
    let ns = pinfed_namespace(&admin, "esc-clash").await;
    // Another app's Service, made by the member's own team.
    let theirs: Service = serde_json::from_value(serde_json::json!({"metadata": {"name": "web"},
        "spec": {"selector": {"app": "theirs"}, "ports": [{"name": "http", "port": 7000}]}}))
    .unwrap();
    let services = Api::<Service>::namespaced(admin.clone(), &ns);
    services
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    let mut w = workload(
        "PinterestService",
        "web",
        serde_json::json!({"containers": [container()]}),
    );
    w["spec"]["service"] =
        serde_json::json!({"ports": [{"name": "http", "port": 80, "targetPort": 8080}]});
    create(&stolen, &ns, &w).await;
    refused(
        &admin,
        &ns,
        "PinterestService",
        "web",
        "Conflict",
        &["Service/web already exists", "pinfed adopt Service/web"],
        agent,
    )
    .await;
    // Untouched, and nothing half-created.
    let s = services.get("web").await.unwrap();
    assert!(s.owner_references().is_empty(), "{:?}", s.metadata);
    assert_eq!(s.spec.unwrap().ports.unwrap()[0].port, 7000);
    nothing_created(&admin, &ns, "web").await;
    // The member's admin hands it over: the agent takes it and the workload runs.
    let out = support::pinfed(
        &fed,
        &[
            "adopt",
            "Service/web",
            "-n",
            &ns,
            "--to",
            "PinterestService/web",
            "--context",
            m,
        ],
    );
    assert!(
        out.status.success(),
        "pinfed adopt: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually(
        WAIT,
        &format!(
            "the Service taken over by the workload\n{}",
            agent.log_tail()
        ),
        || {
            let services = services.clone();
            async move {
                services.get("web").await.is_ok_and(|s| {
                    s.owner_references()
                        .iter()
                        .any(|o| o.kind == "PinterestService" && o.name == "web")
                        && s.spec
                            .and_then(|s| s.ports)
                            .is_some_and(|p| p.iter().any(|p| p.port == 80))
                })
            }
        },
    )
    .await;
    assert!(
        Api::<Deployment>::namespaced(admin.clone(), &ns)
            .get_opt("web")
            .await
            .unwrap()
            .is_some()
    );
    delete_namespace(&admin, &ns).await;
}

#[tokio::test]
async fn a_member_admin_enables_a_namespace_and_its_refused_workload_runs() {
    let fed = Federation::connect().await;
    let (m, agent) = member_with_agent(&fed);
    let admin = fed.client(m);
    // Made by the member's admins, not enabled yet: nothing runs there.
    let ns = support::TestNamespace::create(&admin, "esc-enable").await;
    create(
        &admin,
        &ns.name,
        &workload(
            "PinterestService",
            "waits",
            serde_json::json!({"containers": [container()]}),
        ),
    )
    .await;
    refused(
        &admin,
        &ns.name,
        "PinterestService",
        "waits",
        "NamespaceNotEnabled",
        &[],
        agent,
    )
    .await;
    let base = std::fs::read_to_string(support::member_policy_file()).unwrap();
    let file = std::env::temp_dir().join(unique_name("member-policy"));
    std::fs::write(
        &file,
        format!("{base}  - names: [{}]\n    level: baseline\n", ns.name),
    )
    .unwrap();
    let out = support::pinfed(
        &fed,
        &[
            "member-policy",
            "set",
            "-f",
            file.to_str().unwrap(),
            "--context",
            m,
        ],
    );
    assert!(
        out.status.success(),
        "pinfed member-policy set: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = Api::<Deployment>::namespaced(admin.clone(), &ns.name);
    let ran = tokio::time::timeout(WAIT, async {
        while d.get_opt("waits").await.ok().flatten().is_none() {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
    .await;
    // Back to the topology's policy before asserting, for the other tests.
    let out = support::pinfed(
        &fed,
        &[
            "member-policy",
            "set",
            "-f",
            &support::member_policy_file(),
            "--context",
            m,
        ],
    );
    assert!(
        out.status.success(),
        "restoring the policy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        ran.is_ok(),
        "the workload did not run after its namespace was enabled\n{}",
        agent.log_tail()
    );
    ns.delete().await;
}

/// A user of the hub with rights on one namespace only, without the JSS: the hub API
/// server's ValidatingAdmissionPolicy refuses what the JSS would refuse them.
#[tokio::test]
async fn a_kubectl_user_of_the_hub_cannot_submit_host_access_privileges_or_daemons() {
    let fed = Federation::connect().await;
    join_all(&fed); // installs the policy with the CRDs
    let hub = fed.hub();
    let ns = support::TestNamespace::create(&hub, "esc-hubuser").await;
    let role = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: writer\n  namespace: {n}\nrules:\n- apiGroups: [compute.pinterest.com]\n  resources: [pinterestservices, pinterestdaemons]\n  verbs: [get, list, create, patch, update, delete]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: writer\n  namespace: {n}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: writer\nsubjects:\n- kind: User\n  name: mallory\n  apiGroup: rbac.authorization.k8s.io\n",
        n = ns.name
    );
    support::kubectl_apply(&fed, &fed.topology.hub.name, &role);
    let mallory = fed.client_as_user(&fed.topology.hub.name, "mallory").await;
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let submit = |obj: serde_json::Value| {
        let mallory = mallory.clone();
        let ns = ns.name.clone();
        let dry = dry.clone();
        async move {
            let kind = obj["kind"].as_str().unwrap().to_string();
            let o: DynamicObject = serde_json::from_value(obj).unwrap();
            Api::<DynamicObject>::namespaced_with(mallory, &ns, &resource(&kind))
                .create(&dry, &o)
                .await
        }
    };
    // Allowed: an ordinary service (so the refusals below are the policy's).
    submit(workload(
        "PinterestService",
        "ok",
        serde_json::json!({"containers": [container()]}),
    ))
    .await
    .expect("an ordinary service is admitted");
    let mut privileged = container();
    privileged["securityContext"] = serde_json::json!({"privileged": true});
    let mut sysadmin = container();
    sysadmin["securityContext"] = serde_json::json!({"capabilities": {"add": ["SYS_ADMIN"]}});
    for (what, obj, says) in [
        (
            "privileged",
            workload(
                "PinterestService",
                "p",
                serde_json::json!({"containers": [privileged]}),
            ),
            "privileged",
        ),
        (
            "hostPID",
            workload(
                "PinterestService",
                "h",
                serde_json::json!({"hostPID": true, "containers": [container()]}),
            ),
            "host namespaces",
        ),
        (
            "hostPath",
            workload(
                "PinterestService",
                "v",
                serde_json::json!({"volumes": [{"name": "r", "hostPath": {"path": "/"}}], "containers": [container()]}),
            ),
            "hostPath",
        ),
        (
            "SYS_ADMIN",
            workload(
                "PinterestService",
                "c",
                serde_json::json!({"containers": [sysadmin]}),
            ),
            "capabilities",
        ),
        (
            "pinned",
            workload(
                "PinterestService",
                "n",
                serde_json::json!({"nodeName": "node-0", "containers": [container()]}),
            ),
            "nodeName",
        ),
        (
            "daemon",
            workload(
                "PinterestDaemon",
                "d",
                serde_json::json!({"containers": [container()]}),
            ),
            "PinterestDaemons",
        ),
    ] {
        match submit(obj).await {
            Err(kube::Error::Api(e)) => {
                assert_eq!(e.code, 403, "{what}: {e:?}");
                assert!(
                    e.message.contains("pinfed-hub-pod-policy") && e.message.contains(says),
                    "{what}: {}",
                    e.message
                );
            }
            other => panic!("{what} was admitted on the hub: {other:?}"),
        }
    }
    ns.delete().await;
}

/// A pull member's agent reports its capacity with its hub token, which may write its
/// one MemberReport and not its MemberCluster (a forged Ready condition is 403): forged
/// with that token, an impossible report is refused and a sudden growth is held
/// (`ReportAccepted` says which), so placement keeps the last report it accepted. A hub
/// runs for this test alone.
#[tokio::test]
async fn a_pull_members_forged_capacity_is_refused_or_held() {
    use pinfed::api::federation::MemberCluster;
    let fed = Federation::connect().await;
    join_all(&fed);
    let m = fed
        .member_names()
        .into_iter()
        .find(|m| fed.is_pull(m))
        .expect("the topology has a pull member");
    let token = support::pull_agent_hub_client(&fed, &m).await;
    let forge = |nodes: usize, cpu: &str| {
        let names: Vec<serde_json::Value> = (0..nodes)
            .map(|i| serde_json::json!({"name": format!("forged-{i}"), "schedulable": true, "allocated": {}}))
            .collect();
        serde_json::json!({"apiVersion": "federation.pinterest.com/v1alpha1", "kind": "MemberReport",
            "status": {"report": {"healthy": true, "time": "2026-01-01T00:00:00Z",
                "nodePools": [{"capacity": {"cpu": cpu, "memory": "64Gi", "pods": "110"},
                    "allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110"}, "nodes": names}]}}})
    };
    // The token may not touch its MemberCluster: the report is its own object.
    let refused = Api::<MemberCluster>::all(token.clone())
        .patch_status(
            &m,
            &kube::api::PatchParams::apply("e2e-forger").force(),
            &kube::api::Patch::Apply(&serde_json::json!({
                "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "MemberCluster",
                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Forged",
                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})),
        )
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.code == 403),
        "the pull agent's token wrote its MemberCluster's status: {refused:?}"
    );
    let reports = Api::<pinfed::api::member_slice::MemberReport>::namespaced(
        token,
        &format!("pinfed-member-{m}"),
    );
    let report_name = format!("pinfed-agent-{m}");
    let report = |body: serde_json::Value| {
        let reports = reports.clone();
        let name = report_name.clone();
        async move {
            reports
                .patch_status(
                    &name,
                    &kube::api::PatchParams::apply("e2e-forger").force(),
                    &kube::api::Patch::Apply(&body),
                )
                .await
                .expect("the pull agent's token writes its report");
        }
    };
    let hub_api = Api::<MemberCluster>::all(fed.hub());
    let original = reports
        .get(&report_name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.report);
    let condition = |reason: &'static str| {
        let hub_api = hub_api.clone();
        let m = m.clone();
        async move {
            hub_api
                .get(&m)
                .await
                .ok()
                .and_then(|mc| mc.status)
                .is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "ReportAccepted" && c.reason == reason)
                })
        }
    };
    // Refused first: a condition an earlier hub left is never mistaken for this one's.
    report(forge(4, "100000")).await;
    // No agent runs for the pull member here: a long grace, so this hub records no member
    // lost (a return would keep work off it in the tests that follow).
    let hub = support::spawn_hub(&fed, "esc-hub", &["--member-grace-secs", "3600"]);
    eventually(
        WAIT,
        &format!("a 100,000-core node refused\n{}", hub.log_tail()),
        || condition("Refused"),
    )
    .await;
    report(forge(4, "16")).await;
    eventually(
        WAIT,
        &format!("the modest report accepted\n{}", hub.log_tail()),
        || condition("Accepted"),
    )
    .await;
    report(forge(40, "16")).await;
    eventually(
        WAIT,
        &format!("ten times the nodes held\n{}", hub.log_tail()),
        || condition("GrowthHeld"),
    )
    .await;
    let held = hub_api.get(&m).await.unwrap().status.unwrap();
    let c = held
        .conditions
        .iter()
        .find(|c| c.type_ == "ReportAccepted")
        .unwrap();
    assert!(c.message.contains("nodes 4 → 40"), "{}", c.message);
    drop(hub);
    // The agent's own report back, for the tests that follow.
    let restore = match original {
        Some(r) => serde_json::json!({"apiVersion": "federation.pinterest.com/v1alpha1",
            "kind": "MemberReport", "status": {"report": r}}),
        None => serde_json::json!({"apiVersion": "federation.pinterest.com/v1alpha1",
            "kind": "MemberReport", "status": {}}),
    };
    report(restore).await;
}

/// A token pinfed's identities mint for themselves lives at most 3 days
/// (`deploy/hub/token-policy.yaml`, which `pinfed join` installs on the hub and in every
/// member): with the hub's stolen credential for a push member, and with a pull agent's
/// token on the hub, a ten-year token is refused, while the 3-day renewal pinfed makes
/// still works.
#[tokio::test]
async fn a_stolen_credential_cannot_mint_itself_a_long_lived_token() {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    let fed = Federation::connect().await;
    join_all(&fed);
    let push = fed
        .member_names()
        .into_iter()
        .find(|m| !fed.is_pull(m))
        .expect("a push member");
    let pull = fed
        .member_names()
        .into_iter()
        .find(|m| fed.is_pull(m))
        .expect("a pull member");
    // The pull agent's tokens are bound to its credential (as pinfed renews them).
    let pull_ns = pinfed::api::member_slice::pull_namespace(&pull);
    let credential = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(fed.hub(), &pull_ns)
        .get(pinfed::hub::join_pull::AGENT_CREDENTIAL)
        .await
        .expect("the pull agent's credential on the hub (pinfed join --mode pull makes it)");
    let bound = k8s_openapi::api::authentication::v1::BoundObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Secret".into()),
        name: credential.metadata.name.clone(),
        uid: credential.metadata.uid.clone(),
    };
    let request = |seconds: i64, account: &str| TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(seconds),
            bound_object_ref: (account == "pinfed-agent").then(|| bound.clone()),
            ..Default::default()
        }),
        ..Default::default()
    };
    const TEN_YEARS: i64 = 10 * 365 * 24 * 3600;
    const THREE_DAYS: i64 = 3 * 24 * 3600;
    let cases = [
        (
            format!("the hub's credential in {push}"),
            Api::<ServiceAccount>::namespaced(
                stolen_hub_credential(&fed, &push).await,
                "pinfed-system",
            ),
            "pinfed-hub-member".to_string(),
        ),
        (
            format!("{pull}'s agent token on the hub"),
            Api::<ServiceAccount>::namespaced(
                support::pull_agent_hub_client(&fed, &pull).await,
                &pinfed::api::member_slice::pull_namespace(&pull),
            ),
            "pinfed-agent".to_string(),
        ),
    ];
    for (who, accounts, account) in cases {
        match accounts
            .create_token_request(
                &account,
                &PostParams::default(),
                &request(TEN_YEARS, &account),
            )
            .await
        {
            Err(kube::Error::Api(e)) => assert!(
                e.code == 403 && e.message.contains("pinfed-token-lifetime"),
                "{who}: a ten-year token refused for another reason: {e:?}"
            ),
            Ok(t) => panic!(
                "{who} minted itself a token until {:?}",
                t.status.map(|s| s.expiration_timestamp)
            ),
            Err(e) => panic!("{who}: {e}"),
        }
        let renewed = accounts
            .create_token_request(
                &account,
                &PostParams::default(),
                &request(THREE_DAYS, &account),
            )
            .await
            .unwrap_or_else(|e| panic!("{who}: the 3-day renewal pinfed makes was refused: {e}"));
        assert!(
            renewed
                .status
                .is_some_and(|s| s.token.is_some_and(|t| !t.is_empty())),
            "{who}: no token"
        );
    }
}

/// The hub's identity may make and remove its snapshots of RuntimeProfiles (what a
/// revision pins when a profile is edited in place), nothing else: not a profile of its
/// own, not a default one, not an edit or a deletion of a profile someone else made
/// (`deploy/hub/snapshot-policy.yaml`, which `pinfed join` installs on the hub).
#[tokio::test(flavor = "multi_thread")]
async fn the_hubs_identity_may_make_and_remove_only_profile_snapshots() {
    use pinfed::api::runtime_profile::RuntimeProfile;
    let fed = Federation::connect().await;
    join_all(&fed);
    support::apply_shipped_rbac(&fed);
    let hub_name = fed.topology.hub.name.clone();
    let hub_user = support::identity_daemon("hub").user();
    let as_hub: Api<RuntimeProfile> = Api::all(fed.client_as_user(&hub_name, &hub_user).await);
    let admin: Api<RuntimeProfile> = Api::all(fed.hub());
    let name = unique_name("esc-rtp");
    let profile = |name: &str, labels: serde_json::Value, default: bool| -> RuntimeProfile {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "RuntimeProfile",
            "metadata": {"name": name, "labels": labels},
            "spec": {"version": name, "default": default,
                "sidecars": [{"container": {"name": "evil", "image": "registry.example/evil:1"}}]}
        }))
        .unwrap()
    };
    // Edits are refused by RBAC already (no patch or update verb), the policy is the
    // second lock.
    let refused = |r: Result<RuntimeProfile, kube::Error>, what: &str| match r {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("{what}: expected a refusal, got {other:?}"),
    };
    let refused_by_policy = |r: Result<RuntimeProfile, kube::Error>, what: &str| match r {
        Err(kube::Error::Api(e))
            if e.code == 403 && e.message.contains("pinfed-profile-snapshots") => {}
        other => panic!("{what}: expected a refusal by pinfed-profile-snapshots, got {other:?}"),
    };
    // A profile of its own, plain or default: refused.
    refused_by_policy(
        as_hub
            .create(
                &PostParams::default(),
                &profile(&name, serde_json::json!({}), false),
            )
            .await,
        "a plain profile made by the hub",
    );
    let snapshot_labels = serde_json::json!({
        "rollout.pinterest.com/snapshot-of": "x",
        "rollout.pinterest.com/profile-digest": "0123456789abcdef"});
    refused_by_policy(
        as_hub
            .create(
                &PostParams::default(),
                &profile(&name, snapshot_labels.clone(), true),
            )
            .await,
        "a default snapshot",
    );
    // A snapshot: made, never edited, removed.
    as_hub
        .create(
            &PostParams::default(),
            &profile(&name, snapshot_labels, false),
        )
        .await
        .expect("the hub makes a snapshot");
    let edit = serde_json::json!({"spec": {"default": true}});
    refused(
        as_hub
            .patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&edit),
            )
            .await,
        "an edit of a snapshot",
    );
    as_hub
        .delete(&name, &Default::default())
        .await
        .expect("the hub removes its snapshot");
    // Someone else's profile: neither edited nor removed.
    let theirs = unique_name("esc-rtp-theirs");
    admin
        .create(
            &PostParams::default(),
            &profile(&theirs, serde_json::json!({}), false),
        )
        .await
        .unwrap();
    refused(
        as_hub
            .patch(
                &theirs,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&edit),
            )
            .await,
        "an edit of a team's profile",
    );
    match as_hub.delete(&theirs, &Default::default()).await {
        Err(kube::Error::Api(e))
            if e.code == 403 && e.message.contains("pinfed-profile-snapshots") => {}
        other => panic!(
            "deleting a team's profile: expected a refusal, got {:?}",
            other.map(|_| ())
        ),
    }
    admin.delete(&theirs, &Default::default()).await.unwrap();
}

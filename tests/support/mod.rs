//! Shared support for e2e tests against the local topology that `e2e/up` brings up.
//! Tests find it through `PINFED_E2E_KUBECONFIG` (and `PINFED_E2E_TOPOLOGY` for the
//! expected capacity); they fail with a clear message when it is missing, never skip.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use pinfed::topology::Topology;
use testkit::federation::{self as kit, ClientTimeouts, DaemonStyle};

mod identity;
#[allow(unused_imports)] // each test binary uses a different part
pub use identity::{
    SYSTEM_NAMESPACE, apply_shipped_rbac, identity_daemon, kubeconfig_as, kubectl_apply,
    kubectl_bin, kubectl_in,
};

/// The running topology (testkit's, which this derefs to) and its file as pinfed reads it.
pub struct Federation {
    kit: kit::Federation,
    pub topology: Topology,
}

impl std::ops::Deref for Federation {
    type Target = kit::Federation;
    fn deref(&self) -> &kit::Federation {
        &self.kit
    }
}

impl Federation {
    /// Connects to every cluster of the running topology.
    pub async fn connect() -> Federation {
        let kit = kit::Federation::from_env(
            env!("CARGO_BIN_EXE_pinfed"),
            // A request to a stopped or hung API server fails soon, and the wait that made
            // it checks again.
            ClientTimeouts {
                connect: Duration::from_secs(3),
                read: Some(Duration::from_secs(30)),
            },
            DaemonStyle {
                log_dir: std::env::temp_dir(),
                // e.g. `info,pinfed::controller::leader=debug` to follow an election.
                rust_log: std::env::var("PINFED_TEST_DAEMON_LOG")
                    .unwrap_or_else(|_| "info,kube=warn".into()),
                no_color: false,
                // A test that panics half-way must not leave a daemon acting on the
                // clusters during the tests that follow.
                on_drop: testkit::OnDrop::Kill,
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
        let path = kit.topology_path.display().to_string();
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
        let topology = Topology::from_yaml(&path, &text).expect("valid topology");
        Federation { kit, topology }
    }

    /// A client of `cluster` acting as the user `user` (admin impersonation, in no group
    /// but `system:authenticated`): what a kubectl user with only the rights bound to
    /// that name may do.
    pub async fn client_as_user(&self, cluster: &str, user: &str) -> Client {
        let mut cfg = self
            .config(cluster)
            .await
            .unwrap_or_else(|e| panic!("{e:#}"));
        cfg.auth_info.impersonate = Some(user.into());
        cfg.auth_info.impersonate_groups = Some(vec!["system:authenticated".into()]);
        Client::try_from(cfg).expect("a client")
    }

    /// The first member that has a pool with GPUs.
    pub fn gpu_member(&self) -> String {
        self.topology
            .members
            .iter()
            .find(|m| m.node_pools.iter().any(|p| p.gpu > 0))
            .map(|m| m.name.clone())
            .expect("the topology has a member with a GPU pool")
    }
}

/// A uniquely named namespace for one test; `delete` it at the end.
pub struct TestNamespace {
    pub name: String,
    client: Client,
}

pub use testkit::unique_name;

impl TestNamespace {
    /// Creates the namespace and waits for its default ServiceAccount, so pods can be created.
    pub async fn create(client: &Client, prefix: &str) -> TestNamespace {
        let name = kit::create_namespace(client, prefix, "pinfed.dev/e2e")
            .await
            .unwrap_or_else(|e| panic!("{e:#}"));
        let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        eventually(
            Duration::from_secs(60),
            "the namespace's default ServiceAccount",
            || {
                let sa = sa.clone();
                async move { sa.get_opt("default").await.ok().flatten().is_some() }
            },
        )
        .await;
        TestNamespace {
            name,
            client: client.clone(),
        }
    }

    pub async fn delete(self) {
        kit::delete_namespace(&self.client, &self.name).await;
    }

    /// Deletes the namespace and waits until it is gone: every workload's finalizer
    /// released, so the hub that runs now has removed its slices from the members (and
    /// the next test does not start amid that clean-up).
    pub async fn delete_and_wait(self, timeout: Duration) {
        if let Err(e) = kit::delete_namespace_and_wait(&self.client, &self.name, timeout).await {
            panic!("{e}");
        }
    }
}

/// The `type_` condition of `o` (read untyped), when it is True.
pub fn true_condition(o: &kube::api::DynamicObject, type_: &str) -> Option<serde_json::Value> {
    o.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_ && c["status"] == "True")
        .cloned()
}

/// Waits until `name` (read through `api`) is Invalid, reason `Undecodable`, its message
/// naming `field` first, with a Warning Event `Undecodable` for it in `ns` (read through
/// `client`); returns it as then stored. `log`: what a timeout shows.
pub async fn marked_undecodable(
    client: &Client,
    api: &Api<kube::api::DynamicObject>,
    ns: &str,
    name: &str,
    field: &str,
    wait: Duration,
    log: &dyn Fn() -> String,
) -> kube::api::DynamicObject {
    eventually(wait, &format!("{name} Invalid\n{}", log()), || async {
        true_condition(&api.get(name).await.unwrap(), "Invalid").is_some()
    })
    .await;
    let o = api.get(name).await.unwrap();
    let condition = true_condition(&o, "Invalid").unwrap();
    assert_eq!(condition["reason"], "Undecodable", "{condition}");
    let message = condition["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!("{field}:")),
        "names the field {field}: {message}"
    );
    eventually(
        wait,
        &format!("a Warning Event Undecodable for {name}"),
        || async {
            events(client, Some(ns))
                .await
                .iter()
                .any(|e| e.type_ == "Warning" && e.reason == "Undecodable" && e.name == name)
        },
    )
    .await;
    o
}

/// Polls `check` until it holds; panics naming `what` after `timeout`.
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_logged(timeout, what, &[], check).await
}

/// `eventually`, but a timeout also shows the last lines of `daemons`' logs as they are
/// then (a message built before the wait would show them as they were when it began).
pub async fn eventually_logged<F, Fut>(timeout: Duration, what: &str, daemons: &[&Daemon], check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    if let Err(e) = testkit::wait::until(timeout, Duration::from_millis(250), what, check).await {
        panic!("{e}{}", log_tails(daemons));
    }
}

/// The last lines of `daemons`' logs, each under its path.
fn log_tails(daemons: &[&Daemon]) -> String {
    daemons
        .iter()
        .map(|d| format!("\n--- {} ---\n{}", d.log.display(), d.log_tail()))
        .collect()
}

/// Path of the harness binary that manages the running topology: `PINFED_E2E_HARNESS`,
/// else the debug build in `CARGO_TARGET_DIR` (or the repository's `target/`), where
/// `e2e/harness.sh` builds it.
pub fn harness() -> PathBuf {
    std::env::var_os("PINFED_E2E_HARNESS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/target")))
                .join("debug/pinfed-e2e")
        })
}

/// Runs `pinfed-e2e ARGS` against the running topology's state directory.
pub fn run_harness(args: &[&str]) -> std::process::Output {
    std::process::Command::new(harness())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {} {args:?}: {e}", harness().display()))
}

impl Federation {
    /// Waits until the hub says every member of the topology is Ready (a hub or agent
    /// that has just started may not have seen them yet); a timeout shows `daemons`' logs.
    pub async fn members_ready(&self, timeout: Duration, daemons: &[&Daemon]) {
        if let Err(e) = self.kit.members_ready(timeout).await {
            panic!("{e}{}", log_tails(daemons));
        }
    }

    /// The server URL of a cluster's context in the kubeconfig.
    pub fn kubeconfig_server(&self, cluster: &str) -> String {
        let kc = Kubeconfig::read_from(&self.kubeconfig).expect("kubeconfig");
        kc.clusters
            .iter()
            .find(|c| c.name == cluster)
            .and_then(|c| c.cluster.as_ref()?.server.clone())
            .unwrap_or_else(|| panic!("no cluster {cluster} in {}", self.kubeconfig.display()))
    }
}

/// The `pinfed` binary the daemons run: this build's, or `PINFED_BIN` (e2e/bench runs
/// the chaos test against the release binary).
pub fn pinfed_bin() -> PathBuf {
    kit::pinfed_bin(env!("CARGO_BIN_EXE_pinfed"))
}

/// Runs `pinfed ARGS` against the topology's kubeconfig and returns its output.
pub fn pinfed(fed: &Federation, args: &[&str]) -> std::process::Output {
    fed.pinfed_command(args)
        .output()
        .unwrap_or_else(|e| panic!("running pinfed {args:?}: {e}"))
}

/// The member policy the tests join members with (`e2e/member-policy.yaml`).
pub fn member_policy_file() -> String {
    kit::member_policy_file().display().to_string()
}

/// Joins every member of the topology to the hub (idempotent).
pub fn join_all(fed: &Federation) {
    // Joined some other way than `join_all_once` does: its next call joins them again.
    JOINED.lock().unwrap().clear();
    fed.kit.join_all().unwrap_or_else(|e| panic!("{e:#}"));
}

/// What `join_all_once` last saw of each member right after joining it, in this process.
static JOINED: std::sync::Mutex<BTreeMap<String, String>> = std::sync::Mutex::new(BTreeMap::new());

/// `join_all`, but a member this test process joined already is joined again only if
/// what the join made has changed since: its MemberCluster (a new uid after an unjoin, a
/// new generation after a spec change, or being deleted), the hub's ServiceAccount in a
/// push member, a pull member's hub kubeconfig in the member and its credential on the
/// hub. A `pinfed join` takes ~7 s, and the destructive tests run one at a time, each
/// joining all three members first: most of that repeated what the test before had left
/// as it was. A test that joins with other arguments (`join_member` with `extra`) or
/// unjoins is seen, and the next call joins that member again.
pub async fn join_all_once(fed: &Federation) {
    for m in fed.member_names() {
        let seen = join_fingerprint(fed, &m).await;
        let known = JOINED.lock().unwrap().get(&m).cloned();
        if seen.is_some() && seen == known {
            continue;
        }
        join_member(fed, &m, &[]);
        match join_fingerprint(fed, &m).await {
            Some(f) => JOINED.lock().unwrap().insert(m, f),
            None => JOINED.lock().unwrap().remove(&m),
        };
    }
}

/// What a join of `member` leaves behind, as one string (None when some of it is missing
/// or cannot be read).
async fn join_fingerprint(fed: &Federation, member: &str) -> Option<String> {
    use k8s_openapi::api::core::v1::Secret;
    use std::hash::{Hash, Hasher};
    let mc = Api::<pinfed::api::federation::MemberCluster>::all(fed.hub())
        .get_opt(member)
        .await
        .ok()??;
    if mc.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let mut f = format!(
        "MemberCluster {:?} generation {:?}",
        mc.metadata.uid, mc.metadata.generation
    );
    if fed.is_pull(member) {
        let kubeconfig = Api::<Secret>::namespaced(fed.client(member), SYSTEM_NAMESPACE)
            .get_opt(pinfed::hub::join_pull::HUB_KUBECONFIG_SECRET)
            .await
            .ok()??;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for (k, v) in kubeconfig.data.as_ref()? {
            (k, &v.0).hash(&mut h);
        }
        let credential = Api::<Secret>::namespaced(
            fed.hub(),
            &pinfed::api::member_slice::pull_namespace(member),
        )
        .get_opt(pinfed::hub::join_pull::AGENT_CREDENTIAL)
        .await
        .ok()??;
        f.push_str(&format!(
            ", hub kubeconfig {:x}, credential {:?}",
            h.finish(),
            credential.metadata.uid
        ));
    } else {
        let sa = Api::<ServiceAccount>::namespaced(fed.client(member), SYSTEM_NAMESPACE)
            .get_opt(pinfed::hub::join::HUB_SERVICE_ACCOUNT)
            .await
            .ok()??;
        f.push_str(&format!(", hub ServiceAccount {:?}", sa.metadata.uid));
    }
    Some(f)
}

/// `pinfed join NAME` as the topology describes the member, with `extra` arguments.
pub fn join_member(fed: &Federation, name: &str, extra: &[&str]) {
    // Joined some other way than `join_all_once` does: its next call joins it again.
    JOINED.lock().unwrap().remove(name);
    fed.join(name, extra).unwrap_or_else(|e| panic!("{e:#}"));
}

/// A pinfed long-running process (hub, agent) that dies with the test process
/// (`PR_SET_PDEATHSIG`); dropping it kills it, so a test that panics half-way does not
/// leave it acting on the clusters during the tests that follow.
pub use testkit::Daemon;

/// Starts `pinfed ARGS`; a hub or an agent runs as the ServiceAccount `deploy/` ships
/// for it, under the shipped roles (see `identity`). `PINFED_TEST_DAEMON_LOG` overrides
/// its `RUST_LOG`.
pub fn spawn_daemon(fed: &Federation, name: &str, args: &[String]) -> Daemon {
    let kubeconfig = match identity::Daemon::of_args(args) {
        Some(daemon) => kubeconfig_as(fed, daemon),
        None => fed.kubeconfig.clone(),
    };
    fed.spawn_pinfed(name, args, &kubeconfig)
        .unwrap_or_else(|e| panic!("spawn pinfed daemon: {e:#}"))
}

/// A hub as the e2e federations run it: on the topology's hub, no leader election, a
/// heartbeat a second, metrics on a free port, then `extra` (grace periods and the like).
pub fn spawn_hub(fed: &Federation, name: &str, extra: &[&str]) -> Daemon {
    let flags = [&["--no-leader-election", "--heartbeat-secs", "1"], extra].concat();
    let args = fed.hub_args(&flags).expect("a free loopback port");
    spawn_daemon(fed, name, &args)
}

/// A client with a pull member's own hub credential, as its agent's Secret in the member
/// holds it (`pinfed-system/pinfed-hub-kubeconfig`): what an attacker who owns that member
/// can do on the hub.
pub async fn pull_agent_hub_client(fed: &Federation, member: &str) -> Client {
    let secret =
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(fed.client(member), "pinfed-system")
            .get("pinfed-hub-kubeconfig")
            .await
            .expect("the pull agent's hub kubeconfig");
    let text = String::from_utf8(secret.data.unwrap()["kubeconfig"].0.clone()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(
        Kubeconfig::from_yaml(&text).unwrap(),
        &KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    Client::try_from(cfg).unwrap()
}

/// One agent per member (no leader election, metrics on a free port), as the e2e
/// federations run them.
pub fn spawn_agents(fed: &Federation) -> Vec<Daemon> {
    fed.member_names()
        .into_iter()
        .map(|m| spawn_daemon(fed, &format!("agent-{m}"), &agent_args(fed, &m)))
        .collect()
}

/// The arguments of the agent of member `m` as the e2e federations run it (no leader
/// election, metrics on a free port, `--mode pull` for a pull member of the topology).
pub fn agent_args(fed: &Federation, m: &str) -> Vec<String> {
    fed.agent_args(m, &[]).expect("a free loopback port")
}

/// A free loopback port for a daemon's metrics server.
pub fn free_port() -> u16 {
    testkit::free_port().expect("a free loopback port")
}

/// The body of a GET against a loopback server; retries for 5 s until it answers.
pub async fn http_get(url: &str) -> String {
    let mut last = None;
    for _ in 0..50 {
        match testkit::http::get(url, Duration::from_secs(10)).await {
            Ok(r) => return r.body,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "nothing answers {url}: {:#}",
        last.expect("at least one try")
    );
}

/// The status (`True`/`False`/`Unknown`) of condition `t` in a status as JSON.
pub fn condition(status: &serde_json::Value, t: &str) -> Option<String> {
    kit::condition(status, t).map(String::from)
}

/// The `status` of `name` as JSON (null when it cannot be read).
pub async fn status_of<K>(api: &Api<K>, name: &str) -> serde_json::Value
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.get(name)
        .await
        .map(|o| serde_json::to_value(o).unwrap()["status"].clone())
        .unwrap_or_default()
}

/// An Event as the tests read it.
#[derive(Debug, Clone, Default)]
pub struct SeenEvent {
    /// `Normal` or `Warning`.
    pub type_: String,
    pub reason: String,
    /// The name and uid of the object it is about.
    pub name: String,
    pub uid: Option<String>,
    pub note: String,
}

/// The Events of namespace `ns` (of every namespace: `None`) that `client` lists; none
/// when the list fails (callers wait for what they look for).
pub async fn events(client: &Client, ns: Option<&str>) -> Vec<SeenEvent> {
    use k8s_openapi::api::events::v1::Event;
    let api: Api<Event> = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    api.list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .map(|e| SeenEvent {
            type_: e.type_.unwrap_or_default(),
            reason: e.reason.unwrap_or_default(),
            name: e
                .regarding
                .as_ref()
                .and_then(|r| r.name.clone())
                .unwrap_or_default(),
            uid: e.regarding.and_then(|r| r.uid),
            note: e.note.unwrap_or_default(),
        })
        .collect()
}

/// The note of the first Event in `ns` with `reason`, if any.
pub async fn event_note(client: &Client, ns: &str, reason: &str) -> Option<String> {
    events(client, Some(ns))
        .await
        .into_iter()
        .find(|e| e.reason == reason)
        .map(|e| e.note)
}

/// Every request the hub API server audited, one JSON event each
/// (`--audit-log-format=json`; the topology audits the hub: `hub: {audit: true}`).
pub fn hub_audit_events(fed: &Federation) -> Vec<serde_json::Value> {
    let path = fed
        .kubeconfig
        .parent()
        .expect("the kubeconfig sits in the state directory")
        .join("logs")
        .join(format!("{}-audit.log", fed.topology.hub.name));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the topology must audit the hub: `hub: {{audit: true}}`; bring it up again)",
            path.display()
        )
    });
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Serves (or stops serving) a second version `v1alpha0` of CRD `crd_name` whose schema
/// is open and which has no subresources, and returns its API: what writes an object —
/// its status too — in a shape this version of pinfed cannot decode, as another version
/// would store it. Objects written through it are stored as the CRD's storage version.
pub async fn serve_open_version(
    client: &Client,
    crd_name: &str,
    served: bool,
) -> kube::core::ApiResource {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceDefinition, CustomResourceValidation, JSONSchemaProps,
    };
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut crd = crds.get(crd_name).await.expect("the CRD");
    crd.spec.versions.retain(|v| v.name != "v1alpha0");
    let stored = crd.spec.versions[0].clone();
    if served {
        let mut open = stored.clone();
        open.name = "v1alpha0".into();
        open.storage = false;
        open.subresources = None;
        open.additional_printer_columns = None;
        open.schema = Some(CustomResourceValidation {
            open_api_v3_schema: Some(JSONSchemaProps {
                type_: Some("object".into()),
                x_kubernetes_preserve_unknown_fields: Some(true),
                ..Default::default()
            }),
        });
        crd.spec.versions.push(open);
    }
    crds.replace(crd_name, &Default::default(), &crd)
        .await
        .unwrap_or_else(|e| panic!("serving v1alpha0 of {crd_name} ({served}): {e}"));
    let group = crd.spec.group.clone();
    kube::core::ApiResource {
        api_version: format!("{group}/v1alpha0"),
        group,
        version: "v1alpha0".into(),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    }
}

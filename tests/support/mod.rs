//! Shared support for e2e tests against the local topology that `e2e/up` brings up.
//! Tests find it through `PINFED_E2E_KUBECONFIG` (and `PINFED_E2E_TOPOLOGY` for the
//! expected capacity); they fail with a clear message when it is missing, never skip.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use pinfed::topology::Topology;

mod identity;
#[allow(unused_imports)] // each test binary uses a different part
pub use identity::{
    SYSTEM_NAMESPACE, apply_shipped_rbac, identity_daemon, kubeconfig_as, kubectl_apply,
    kubectl_bin, kubectl_in,
};

pub struct Federation {
    pub kubeconfig: PathBuf,
    pub topology: Topology,
    clients: BTreeMap<String, Client>,
}

fn required_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: e2e tests need a running local topology. Run the README's test \
             command (e2e/test), or `e2e/up clusters/local-3.yaml` and export \
             PINFED_E2E_KUBECONFIG=<the printed path> PINFED_E2E_TOPOLOGY=clusters/local-3.yaml"
        )
    })
}

impl Federation {
    /// Connects to every cluster of the running topology.
    pub async fn connect() -> Federation {
        let kubeconfig = PathBuf::from(required_env("PINFED_E2E_KUBECONFIG"));
        let topo_path = std::env::var("PINFED_E2E_TOPOLOGY").unwrap_or_else(|_| {
            concat!(env!("CARGO_MANIFEST_DIR"), "/clusters/local-3.yaml").to_string()
        });
        let text = std::fs::read_to_string(&topo_path)
            .unwrap_or_else(|e| panic!("reading {topo_path}: {e}"));
        let topology = Topology::from_yaml(&topo_path, &text).expect("valid topology");
        let kc = Kubeconfig::read_from(&kubeconfig)
            .unwrap_or_else(|e| panic!("reading kubeconfig {}: {e}", kubeconfig.display()));
        let mut clients = BTreeMap::new();
        for name in topology.cluster_names() {
            let opts = KubeConfigOptions {
                context: Some(name.to_string()),
                ..Default::default()
            };
            let mut cfg = kube::Config::from_custom_kubeconfig(kc.clone(), &opts)
                .await
                .unwrap_or_else(|e| panic!("context {name} in {}: {e}", kubeconfig.display()));
            cfg.connect_timeout = Some(Duration::from_secs(3));
            cfg.read_timeout = Some(Duration::from_secs(30));
            clients.insert(name.to_string(), Client::try_from(cfg).expect("client"));
        }
        Federation {
            kubeconfig,
            topology,
            clients,
        }
    }

    pub fn client(&self, cluster: &str) -> Client {
        self.clients
            .get(cluster)
            .unwrap_or_else(|| panic!("no cluster {cluster} in the topology"))
            .clone()
    }

    /// Whether the topology has member `m` join in pull mode.
    /// A client of `cluster` acting as the user `user` (admin impersonation, in no group
    /// but `system:authenticated`): what a kubectl user with only the rights bound to
    /// that name may do.
    pub async fn client_as_user(&self, cluster: &str, user: &str) -> Client {
        let kc = Kubeconfig::read_from(&self.kubeconfig).expect("the topology's kubeconfig");
        let mut cfg = kube::Config::from_custom_kubeconfig(
            kc,
            &KubeConfigOptions {
                context: Some(cluster.to_string()),
                ..Default::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("no context {cluster}: {e}"));
        cfg.auth_info.impersonate = Some(user.into());
        cfg.auth_info.impersonate_groups = Some(vec!["system:authenticated".into()]);
        Client::try_from(cfg).expect("a client")
    }

    pub fn is_pull(&self, m: &str) -> bool {
        self.topology
            .members
            .iter()
            .any(|t| t.name == m && t.mode == pinfed::api::federation::ClusterMode::Pull)
    }

    pub fn hub(&self) -> Client {
        self.client(&self.topology.hub.name)
    }

    pub fn member_names(&self) -> Vec<String> {
        self.topology
            .members
            .iter()
            .map(|m| m.name.clone())
            .collect()
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
        let name = unique_name(prefix);
        let api: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"pinfed.dev/e2e": "true"}}
        }))
        .unwrap();
        api.create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
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
        let api: Api<Namespace> = Api::all(self.client.clone());
        let _ = api.delete(&self.name, &DeleteParams::default()).await;
    }

    /// Deletes the namespace and waits until it is gone: every workload's finalizer
    /// released, so the hub that runs now has removed its slices from the members (and
    /// the next test does not start amid that clean-up).
    pub async fn delete_and_wait(self, timeout: Duration) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let _ = api.delete(&self.name, &DeleteParams::default()).await;
        eventually(
            timeout,
            &format!("namespace {} deleted", self.name),
            || async { matches!(api.get_opt(&self.name).await, Ok(None)) },
        )
        .await;
    }
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
        let logs: String = daemons
            .iter()
            .map(|d| format!("\n--- {} ---\n{}", d.log.display(), d.log_tail()))
            .collect();
        panic!("{e}{logs}");
    }
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
        let mcs: Api<pinfed::api::federation::MemberCluster> = Api::all(self.hub());
        let want = self.member_names();
        eventually_logged(
            timeout,
            "every member Ready to the hub",
            daemons,
            || async {
                let Ok(list) = mcs.list(&Default::default()).await else {
                    return false;
                };
                want.iter().all(|m| {
                    list.items.iter().any(|mc| {
                        kube::ResourceExt::name_any(mc) == *m
                            && mc.status.as_ref().is_some_and(|s| {
                                s.conditions.iter().any(|c| {
                                    c.type_ == "Ready"
                                        && c.status == pinfed::api::common::ConditionStatus::True
                                })
                            })
                    })
                })
            },
        )
        .await;
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

/// The `pinfed` binary under test.
/// The `pinfed` binary the daemons run: this build's, or `PINFED_BIN` (e2e/bench runs
/// the chaos test against the release binary).
pub fn pinfed_bin() -> PathBuf {
    std::env::var_os("PINFED_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_pinfed")))
}

/// Runs `pinfed ARGS` against the topology's kubeconfig and returns its output.
pub fn pinfed(fed: &Federation, args: &[&str]) -> std::process::Output {
    std::process::Command::new(pinfed_bin())
        .args(args)
        .env("KUBECONFIG", &fed.kubeconfig)
        .env_remove("PINFED_CONTEXT")
        .output()
        .unwrap_or_else(|e| panic!("running pinfed {args:?}: {e}"))
}

/// The member policy the tests join members with (`e2e/member-policy.yaml`).
pub fn member_policy_file() -> String {
    format!("{}/e2e/member-policy.yaml", env!("CARGO_MANIFEST_DIR"))
}

/// Joins every member of the topology to the hub (idempotent).
pub fn join_all(fed: &Federation) {
    for m in &fed.topology.members {
        join_member(fed, &m.name, &[]);
    }
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
    let m = fed
        .topology
        .members
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("the topology has no member {name}"));
    let mut args = vec![
        "join",
        &m.name,
        "--member-context",
        &m.name,
        "--hub-context",
        &fed.topology.hub.name,
    ];
    let region;
    let zone;
    if let Some(r) = &m.region {
        region = r.clone();
        args.extend(["--region", &region]);
    }
    if let Some(z) = &m.zone {
        zone = z.clone();
        args.extend(["--zone", &zone]);
    }
    let labels: Vec<String> = m.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    for l in &labels {
        args.extend(["--label", l]);
    }
    if m.mode == pinfed::api::federation::ClusterMode::Pull {
        args.extend(["--mode", "pull"]);
    }
    let policy = member_policy_file();
    args.extend(["--member-policy", &policy]);
    args.extend(extra);
    // Joined some other way than `join_all_once` does: its next call joins it again.
    JOINED.lock().unwrap().remove(name);
    let out = pinfed(fed, &args);
    assert!(
        out.status.success(),
        "pinfed join {} failed: {}",
        m.name,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A pinfed long-running process (hub, agent) that dies with the test process
/// (`PR_SET_PDEATHSIG`); dropping it kills it, so a test that panics half-way does not
/// leave it acting on the clusters during the tests that follow.
pub use testkit::Daemon;

/// Starts `pinfed ARGS`; a hub or an agent runs as the ServiceAccount `deploy/` ships
/// for it, under the shipped roles (see `identity`). `PINFED_TEST_DAEMON_LOG` overrides
/// its `RUST_LOG` (e.g. `info,pinfed::controller::leader=debug` to follow an election).
pub fn spawn_daemon(fed: &Federation, name: &str, args: &[String]) -> Daemon {
    let log = std::env::temp_dir().join(format!("{}.log", unique_name(name)));
    let kubeconfig = match identity::Daemon::of_args(args) {
        Some(daemon) => kubeconfig_as(fed, daemon),
        None => fed.kubeconfig.clone(),
    };
    let mut cmd = std::process::Command::new(pinfed_bin());
    cmd.args(args).env("KUBECONFIG", &kubeconfig).env(
        "RUST_LOG",
        std::env::var("PINFED_TEST_DAEMON_LOG").unwrap_or_else(|_| "info,kube=warn".into()),
    );
    Daemon::spawn(name, cmd, &log).expect("spawn pinfed daemon")
}

/// A hub as the e2e federations run it: on the topology's hub, no leader election, a
/// heartbeat a second, metrics on a free port, then `extra` (grace periods and the like).
pub fn spawn_hub(fed: &Federation, name: &str, extra: &[&str]) -> Daemon {
    let mut args: Vec<String> = [
        "hub",
        "--context",
        "hub",
        "--no-leader-election",
        "--heartbeat-secs",
        "1",
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect();
    args.extend([
        "--metrics-addr".into(),
        format!("127.0.0.1:{}", free_port()),
    ]);
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

/// A free loopback port for a daemon's metrics server.
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
    let port = free_port().to_string();
    let mut args: Vec<String> = [
        "agent",
        "--context",
        m,
        "--cluster-name",
        m,
        "--no-leader-election",
        "--metrics-addr",
        &format!("127.0.0.1:{port}"),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    if fed.is_pull(m) {
        args.extend(["--mode".to_string(), "pull".to_string()]);
    }
    args
}

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
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .and_then(|c| c["status"].as_str())
        .map(String::from)
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

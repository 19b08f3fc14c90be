//! The running topology that `e2e/up` brings up, as the e2e tests and the federation
//! benchmarks use it: a client per cluster, the `pinfed` commands they run on it (join,
//! hub, agent) and the namespaces they work in. Errors are `anyhow`; the tests turn them
//! into panics, the benchmarks into a failed scenario.
//!
//! testkit does not depend on pinfed (pinfed's tests depend on testkit), so the topology
//! file is read here for what this module needs of it: the hub's name and how each member
//! joins. Tests that need more (node pools) read it again with `pinfed::topology`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde::Deserialize;

use crate::daemon::{Daemon, OnDrop};
use crate::wait::{self, TimedOut};

/// The repository's root: topology files, the member policy and `target/` are found from it.
pub fn repo_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ sits in the repository")
}

/// The `pinfed` binary to run: `PINFED_BIN` (a release build, for benchmarks and the chaos
/// test), else `built`, the caller's `env!("CARGO_BIN_EXE_pinfed")`.
pub fn pinfed_bin(built: &str) -> PathBuf {
    std::env::var_os("PINFED_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(built))
}

/// The topology file: `PINFED_E2E_TOPOLOGY`, else `clusters/local-3.yaml`.
pub fn topology_path() -> PathBuf {
    std::env::var_os("PINFED_E2E_TOPOLOGY")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_dir().join("clusters/local-3.yaml"))
}

/// The member policy every member is joined with (its namespaces include the benchmarks').
pub fn member_policy_file() -> PathBuf {
    repo_dir().join("e2e/member-policy.yaml")
}

/// A member of the topology, as `pinfed join` is told about it.
#[derive(Debug, Clone, Deserialize)]
pub struct Member {
    pub name: String,
    pub region: Option<String>,
    pub zone: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    mode: Mode,
}

impl Member {
    /// Whether its agent pulls its slices from the hub (`mode: Pull`).
    pub fn is_pull(&self) -> bool {
        self.mode == Mode::Pull
    }
}

/// `pinfed::api::federation::ClusterMode` as the topology file spells it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
enum Mode {
    #[default]
    Push,
    Pull,
}

/// The part of a topology file (`pinfed::topology::Topology`) this module reads.
#[derive(Deserialize)]
struct TopologyFile {
    hub: HubEntry,
    members: Vec<Member>,
}

#[derive(Deserialize)]
struct HubEntry {
    name: String,
}

/// How long a client waits for an API server.
#[derive(Debug, Clone, Copy)]
pub struct ClientTimeouts {
    pub connect: Duration,
    /// None: kube's default, long enough for a watch.
    pub read: Option<Duration>,
}

/// How the `pinfed` daemons of this process run.
#[derive(Debug, Clone)]
pub struct DaemonStyle {
    /// Where their logs go, one file per daemon named after it.
    pub log_dir: PathBuf,
    pub rust_log: String,
    /// `NO_COLOR=1`, for logs read as plain text.
    pub no_color: bool,
    pub on_drop: OnDrop,
}

pub struct Federation {
    pub kubeconfig: PathBuf,
    pub topology_path: PathBuf,
    pub pinfed: PathBuf,
    pub daemons: DaemonStyle,
    hub: String,
    members: Vec<Member>,
    clients: BTreeMap<String, Client>,
}

fn member_cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("federation.pinterest.com", "v1alpha1", "MemberCluster"),
        "memberclusters",
    )
}

/// The config of `context` in a kubeconfig read from `path`.
async fn config_of(kc: Kubeconfig, path: &Path, context: &str) -> anyhow::Result<kube::Config> {
    let opts = KubeConfigOptions {
        context: Some(context.to_string()),
        ..Default::default()
    };
    kube::Config::from_custom_kubeconfig(kc, &opts)
        .await
        .with_context(|| format!("context {context} in {}", path.display()))
}

impl Federation {
    /// The topology of `PINFED_E2E_KUBECONFIG` and `PINFED_E2E_TOPOLOGY`, run with the
    /// `pinfed` of [`pinfed_bin`].
    pub async fn from_env(
        built_pinfed: &str,
        timeouts: ClientTimeouts,
        daemons: DaemonStyle,
    ) -> anyhow::Result<Federation> {
        let kubeconfig = std::env::var_os("PINFED_E2E_KUBECONFIG").context(
            "PINFED_E2E_KUBECONFIG is not set: e2e tests and benchmarks need a running local \
             topology. Run the README's test command (e2e/test), or `e2e/up \
             clusters/local-3.yaml` and export PINFED_E2E_KUBECONFIG=<the printed path> \
             PINFED_E2E_TOPOLOGY=clusters/local-3.yaml",
        )?;
        Federation::connect(
            PathBuf::from(kubeconfig),
            topology_path(),
            pinfed_bin(built_pinfed),
            timeouts,
            daemons,
        )
        .await
    }

    /// A client for every cluster of the topology in `topology_path`, each from its
    /// context in `kubeconfig`. Connects lazily: a cluster that does not answer fails
    /// its first request, not this.
    pub async fn connect(
        kubeconfig: PathBuf,
        topology_path: PathBuf,
        pinfed: PathBuf,
        timeouts: ClientTimeouts,
        daemons: DaemonStyle,
    ) -> anyhow::Result<Federation> {
        let text = std::fs::read_to_string(&topology_path)
            .with_context(|| format!("reading the topology {}", topology_path.display()))?;
        let topology: TopologyFile = serde_saphyr::from_str(&text)
            .with_context(|| format!("topology {}", topology_path.display()))?;
        let kc = Kubeconfig::read_from(&kubeconfig)
            .with_context(|| format!("reading kubeconfig {}", kubeconfig.display()))?;
        let mut clients = BTreeMap::new();
        let names =
            std::iter::once(&topology.hub.name).chain(topology.members.iter().map(|m| &m.name));
        for name in names {
            let mut cfg = config_of(kc.clone(), &kubeconfig, name).await?;
            cfg.connect_timeout = Some(timeouts.connect);
            if let Some(read) = timeouts.read {
                cfg.read_timeout = Some(read);
            }
            clients.insert(name.clone(), Client::try_from(cfg)?);
        }
        Ok(Federation {
            kubeconfig,
            topology_path,
            pinfed,
            daemons,
            hub: topology.hub.name,
            members: topology.members,
            clients,
        })
    }

    /// The client config of `cluster`'s context (read anew, for a caller to change).
    pub async fn config(&self, cluster: &str) -> anyhow::Result<kube::Config> {
        let kc = Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("reading kubeconfig {}", self.kubeconfig.display()))?;
        config_of(kc, &self.kubeconfig, cluster).await
    }

    pub fn client(&self, cluster: &str) -> Client {
        self.clients
            .get(cluster)
            .unwrap_or_else(|| panic!("no cluster {cluster} in the topology"))
            .clone()
    }

    pub fn clients(&self) -> &BTreeMap<String, Client> {
        &self.clients
    }

    pub fn hub(&self) -> Client {
        self.client(&self.hub)
    }

    pub fn hub_name(&self) -> &str {
        &self.hub
    }

    pub fn members(&self) -> &[Member] {
        &self.members
    }

    pub fn member_names(&self) -> Vec<String> {
        self.members.iter().map(|m| m.name.clone()).collect()
    }

    /// Whether member `m` joins in pull mode (its agent pulls from the hub).
    pub fn is_pull(&self, m: &str) -> bool {
        self.members.iter().any(|t| t.name == m && t.is_pull())
    }

    /// `pinfed ARGS` against the topology's kubeconfig; every command names its context,
    /// so a `PINFED_CONTEXT` of the caller's shell is left out.
    pub fn pinfed_command<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Command {
        let mut cmd = Command::new(&self.pinfed);
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env_remove("PINFED_CONTEXT");
        cmd
    }

    /// `pinfed join MEMBER` as the topology describes the member, then `extra`.
    pub fn join(&self, member: &str, extra: &[&str]) -> anyhow::Result<()> {
        let m = self
            .members
            .iter()
            .find(|m| m.name == member)
            .with_context(|| format!("the topology has no member {member}"))?;
        let mut args: Vec<String> = [
            "join",
            &m.name,
            "--member-context",
            &m.name,
            "--hub-context",
            &self.hub,
        ]
        .map(String::from)
        .into();
        if let Some(r) = &m.region {
            args.extend(["--region".into(), r.clone()]);
        }
        if let Some(z) = &m.zone {
            args.extend(["--zone".into(), z.clone()]);
        }
        for (k, v) in &m.labels {
            args.extend(["--label".into(), format!("{k}={v}")]);
        }
        if m.is_pull() {
            args.extend(["--mode".into(), "pull".into()]);
        }
        args.push("--member-policy".into());
        args.push(member_policy_file().display().to_string());
        args.extend(extra.iter().map(|a| a.to_string()));
        let out = self
            .pinfed_command(&args)
            .output()
            .with_context(|| format!("running {}", self.pinfed.display()))?;
        if !out.status.success() {
            bail!(
                "pinfed join {member} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Joins every member of the topology to the hub (idempotent).
    pub fn join_all(&self) -> anyhow::Result<()> {
        // Four at a time: a join takes seconds of round trips, and a fleet has dozens.
        let started = std::time::Instant::now();
        for (i, batch) in self.members.chunks(4).enumerate() {
            // Progress on a fleet's join (minutes at 100 members).
            if i > 0 && i % 5 == 0 {
                eprintln!(
                    "joined {} of {} members ({:.0} s)",
                    i * 4,
                    self.members.len(),
                    started.elapsed().as_secs_f64()
                );
            }
            std::thread::scope(|scope| {
                let joins: Vec<_> = batch
                    .iter()
                    .map(|m| scope.spawn(move || self.join(&m.name, &[])))
                    .collect();
                joins.into_iter().try_for_each(|j| {
                    j.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a join thread panicked")))
                })
            })?;
        }
        Ok(())
    }

    /// `pinfed hub` on the topology's hub with its metrics on a free loopback port, then
    /// `flags`.
    pub fn hub_args(&self, flags: &[&str]) -> anyhow::Result<Vec<String>> {
        let mut args: Vec<String> = ["hub", "--context", &self.hub, "--metrics-addr"]
            .map(String::from)
            .into();
        args.push(format!("127.0.0.1:{}", crate::free_port()?));
        args.extend(flags.iter().map(|f| f.to_string()));
        Ok(args)
    }

    /// `pinfed agent` of `member`, without leader election (one agent a member), its
    /// metrics on a free loopback port, in pull mode for a pull member; then `flags`.
    pub fn agent_args(&self, member: &str, flags: &[&str]) -> anyhow::Result<Vec<String>> {
        let mut args: Vec<String> = [
            "agent",
            "--context",
            member,
            "--cluster-name",
            member,
            "--no-leader-election",
            "--metrics-addr",
        ]
        .map(String::from)
        .into();
        args.push(format!("127.0.0.1:{}", crate::free_port()?));
        if self.is_pull(member) {
            args.extend(["--mode".into(), "pull".into()]);
        }
        args.extend(flags.iter().map(|f| f.to_string()));
        Ok(args)
    }

    /// Starts `pinfed ARGS` as a daemon named `name` that acts with `kubeconfig`, as
    /// [`Federation::daemons`] says (its log: `<log_dir>/<name>-<unique>.log`).
    pub fn spawn_pinfed(
        &self,
        name: &str,
        args: &[String],
        kubeconfig: &Path,
    ) -> anyhow::Result<Daemon> {
        let style = &self.daemons;
        let log = style
            .log_dir
            .join(format!("{}.log", crate::unique_name(name)));
        let mut cmd = self.pinfed_command(args);
        cmd.env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", &style.rust_log);
        if style.no_color {
            cmd.env("NO_COLOR", "1");
        }
        Ok(Daemon::spawn(name, cmd, &log)
            .with_context(|| format!("spawning {}", self.pinfed.display()))?
            .on_drop(style.on_drop))
    }

    /// Waits until the hub says every member of the topology is Ready (a hub or agent
    /// that has just started may not have seen them yet).
    pub async fn members_ready(&self, timeout: Duration) -> Result<(), TimedOut> {
        let api: Api<DynamicObject> = Api::all_with(self.hub(), &member_cluster_resource());
        let want = self.member_names();
        wait::until(
            timeout,
            Duration::from_millis(250),
            "every member Ready to the hub",
            || async {
                let Ok(list) = api.list(&ListParams::default()).await else {
                    return false;
                };
                want.iter().all(|m| {
                    list.items.iter().any(|mc| {
                        mc.name_any() == *m
                            && condition(&mc.data["status"], "Ready") == Some("True")
                    })
                })
            },
        )
        .await
    }
}

/// Creates a uniquely named namespace, labelled `label: "true"` so that what a run left
/// behind can be found.
pub async fn create_namespace(
    client: &Client,
    prefix: &str,
    label: &str,
) -> anyhow::Result<String> {
    remove_leftovers(client, prefix, label).await;
    let name = crate::unique_name(prefix);
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {label: "true"}}
    }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(name)
}

/// When this test process made its first namespace: one of the same prefix made before
/// it (by more than [`LEFTOVER_MARGIN_SECS`]) is a leftover of an earlier run.
static FIRST_NAMESPACE_AT: std::sync::OnceLock<k8s_openapi::jiff::Timestamp> =
    std::sync::OnceLock::new();

/// How much older than this process's first namespace a leftover is at least.
const LEFTOVER_MARGIN_SECS: i64 = 5;

/// Deletes the namespaces an earlier run's failed tests of `prefix` left on a kept
/// topology (a failed test keeps its namespace; its objects could meet the tests that
/// follow: an agent-* service the agent refuses, say). Best effort; nothing waits.
async fn remove_leftovers(client: &Client, prefix: &str, label: &str) {
    // The API server keeps whole seconds: a namespace this process made in the second it
    // began reads as older than that moment. A margin keeps them all out.
    let started = *FIRST_NAMESPACE_AT.get_or_init(k8s_openapi::jiff::Timestamp::now);
    let before = started - k8s_openapi::jiff::SignedDuration::from_secs(LEFTOVER_MARGIN_SECS);
    let api = Api::<Namespace>::all(client.clone());
    let Ok(list) = api.list(&ListParams::default().labels(label)).await else {
        return;
    };
    for ns in list.items {
        let name = ns.name_any();
        let earlier = ns
            .metadata
            .creation_timestamp
            .as_ref()
            .is_some_and(|t| t.0 < before);
        if earlier && is_named_for(&name, prefix) && ns.metadata.deletion_timestamp.is_none() {
            let _ = api.delete(&name, &DeleteParams::background()).await;
        }
    }
}

/// Whether `name` is one [`crate::unique_name`] makes for `prefix`.
fn is_named_for(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|suffix| !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Deletes namespace `name`; a failure is left for the API server's own clean-up (it may
/// be gone already).
pub async fn delete_namespace(client: &Client, name: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

/// [`delete_namespace`], then waits until it is gone: every finalizer in it released.
pub async fn delete_namespace_and_wait(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> Result<(), TimedOut> {
    delete_namespace(client, name).await;
    let api: Api<Namespace> = Api::all(client.clone());
    wait::until(
        timeout,
        Duration::from_millis(250),
        &format!("namespace {name} deleted"),
        || async { matches!(api.get_opt(name).await, Ok(None)) },
    )
    .await
}

/// The status (`True`/`False`/`Unknown`) of condition `type_` in a status as JSON.
pub fn condition<'a>(status: &'a serde_json::Value, type_: &str) -> Option<&'a str> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topology_file_gives_the_hub_and_how_each_member_joins() {
        let text = std::fs::read_to_string(repo_dir().join("clusters/local-3.yaml")).unwrap();
        let t: TopologyFile = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(t.hub.name, "hub");
        let pull: Vec<&str> = t
            .members
            .iter()
            .filter(|m| m.is_pull())
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(pull, ["use1c"]);
        let a = &t.members[0];
        assert_eq!(
            (a.region.as_deref(), a.zone.as_deref()),
            (Some("us-east-1"), Some("us-east-1a"))
        );
        assert_eq!(a.labels["tier"], "prod");
    }

    #[test]
    fn a_condition_is_read_by_type() {
        let status = serde_json::json!({"conditions": [
            {"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]});
        assert_eq!(condition(&status, "Ready"), Some("True"));
        assert_eq!(condition(&status, "Gone"), None);
        assert_eq!(condition(&serde_json::Value::Null, "Ready"), None);
    }
}

#[cfg(test)]
mod leftover_tests {
    use super::is_named_for;

    #[test]
    fn only_names_unique_name_makes_for_the_prefix_are_leftovers() {
        let made = crate::unique_name("fed");
        assert!(is_named_for(&made, "fed"));
        assert!(is_named_for("fed-1a2b3", "fed"));
        assert!(!is_named_for("fed-long-1a2b3", "fed"), "another prefix's");
        assert!(!is_named_for("fed-", "fed"));
        assert!(!is_named_for("fedx-1a", "fed"));
        assert!(!is_named_for("kube-system", "fed"));
    }
}

//! Federation benchmarks against a running local topology (see docs/benchmarks.md).
//!
//! Scenarios (run one or several; default: the three local-3 scenarios):
//!
//! - `distribution` — hub resource created → slice present in each member;
//! - `aggregation`  — slice status written in a member → the hub's `status.clusters[]`;
//! - `takeover`     — SIGKILL of the leading `pinfed hub` → the standby holds the Lease, and
//!   a workload created right after the kill gets its slices;
//! - `scale10k`     — hub first sync and memory with 10,000 workloads (`clusters/bench.yaml`);
//! - `agent1k`      — one `pinfed agent` alone on the first member: memory with 1,000
//!   PinterestServices created in that member, and the time until all are Ready
//!   (`clusters/bench.yaml`).
//!
//! The topology comes from `PINFED_E2E_KUBECONFIG` (required) and `PINFED_E2E_TOPOLOGY`;
//! `e2e/bench` brings one up, runs the scenarios and takes it down. Hub and agents are
//! started here as child processes of `$PINFED_BIN` (default: the `pinfed` binary of the
//! same cargo profile) and die with this process. Everything is measured from outside:
//! objects on the API servers, timestamps taken when this process receives watch events.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use pinfed::topology::Topology;

const SCENARIOS: [&str; 5] = [
    "distribution",
    "aggregation",
    "takeover",
    "scale10k",
    "agent1k",
];
const LABEL_HUB_NAMESPACE: &str = "federation.pinterest.com/hub-namespace";
const LEASE_NAME: &str = "pinfed-hub";

// ---------------------------------------------------------------------------------------
// Configuration

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> anyhow::Result<T> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map_err(|_| anyhow!("{name}={v:?} is not a valid value")),
        _ => Ok(default),
    }
}

struct Settings {
    kubeconfig: PathBuf,
    topology_path: String,
    topology: Topology,
    pinfed: PathBuf,
    log_dir: PathBuf,
    /// Extra flags for every `pinfed hub` (PINFED_BENCH_HUB_ARGS, split on whitespace).
    hub_args: Vec<String>,
    timeout: Duration,
}

impl Settings {
    fn load() -> anyhow::Result<Settings> {
        let kubeconfig = PathBuf::from(std::env::var("PINFED_E2E_KUBECONFIG")?);
        let topology_path = std::env::var("PINFED_E2E_TOPOLOGY").unwrap_or_else(|_| {
            concat!(env!("CARGO_MANIFEST_DIR"), "/clusters/local-3.yaml").to_string()
        });
        let text = std::fs::read_to_string(&topology_path)
            .with_context(|| format!("reading the topology {topology_path}"))?;
        let topology = Topology::from_yaml(&topology_path, &text)
            .map_err(|e| anyhow!("topology {topology_path}: {e}"))?;
        let pinfed = std::env::var_os("PINFED_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_pinfed")));
        if !pinfed.is_file() {
            bail!(
                "no pinfed binary at {} (build it with `cargo build --release --bin pinfed` \
                 and set PINFED_BIN)",
                pinfed.display()
            );
        }
        let log_dir = std::env::var_os("PINFED_BENCH_LOG_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                std::env::temp_dir().join(format!("pinfed-bench-{}", std::process::id()))
            });
        std::fs::create_dir_all(&log_dir)
            .with_context(|| format!("creating {}", log_dir.display()))?;
        let hub_args = std::env::var("PINFED_BENCH_HUB_ARGS")
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from)
            .collect();
        Ok(Settings {
            kubeconfig,
            topology_path,
            topology,
            pinfed,
            log_dir,
            hub_args,
            timeout: Duration::from_secs(env_or("PINFED_BENCH_TIMEOUT_SECS", 300)?),
        })
    }

    fn hub_name(&self) -> &str {
        &self.topology.hub.name
    }

    fn members(&self) -> Vec<String> {
        self.topology
            .members
            .iter()
            .map(|m| m.name.clone())
            .collect()
    }

    fn describe(&self) -> String {
        let kind = if self.pinfed.components().any(|c| c.as_os_str() == "release") {
            "release"
        } else {
            "NOT a release build"
        };
        format!(
            "topology {} ({} members), pinfed {} ({kind}), hub flags: defaults{}",
            self.topology_path,
            self.topology.members.len(),
            self.pinfed.display(),
            if self.hub_args.is_empty() {
                String::new()
            } else {
                format!(" + {}", self.hub_args.join(" "))
            }
        )
    }
}

// ---------------------------------------------------------------------------------------
// Clusters

struct Fed {
    s: Settings,
    clients: BTreeMap<String, Client>,
}

fn service_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("compute.pinterest.com", "v1alpha1", "PinterestService"),
        "pinterestservices",
    )
}

fn member_cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("federation.pinterest.com", "v1alpha1", "MemberCluster"),
        "memberclusters",
    )
}

impl Fed {
    async fn connect(s: Settings) -> anyhow::Result<Fed> {
        let kc = Kubeconfig::read_from(&s.kubeconfig)
            .with_context(|| format!("reading kubeconfig {}", s.kubeconfig.display()))?;
        let mut clients = BTreeMap::new();
        for name in s.topology.cluster_names() {
            let opts = KubeConfigOptions {
                context: Some(name.to_string()),
                ..Default::default()
            };
            let mut cfg = kube::Config::from_custom_kubeconfig(kc.clone(), &opts)
                .await
                .with_context(|| format!("context {name} in {}", s.kubeconfig.display()))?;
            cfg.connect_timeout = Some(Duration::from_secs(5));
            let client = Client::try_from(cfg)?;
            client
                .apiserver_version()
                .await
                .with_context(|| format!("cluster {name} does not answer"))?;
            clients.insert(name.to_string(), client);
        }
        Ok(Fed { s, clients })
    }

    fn client(&self, cluster: &str) -> Client {
        self.clients[cluster].clone()
    }

    fn hub(&self) -> Client {
        self.client(self.s.hub_name())
    }

    fn services(&self, cluster: &str, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client(cluster), ns, &service_resource())
    }

    /// `pinfed join` of every member (idempotent), as tests/support does.
    fn join_all(&self) -> anyhow::Result<()> {
        for m in &self.s.topology.members {
            let mut args: Vec<String> = vec![
                "join".into(),
                m.name.clone(),
                "--member-context".into(),
                m.name.clone(),
                "--hub-context".into(),
                self.s.hub_name().into(),
            ];
            if let Some(r) = &m.region {
                args.extend(["--region".into(), r.clone()]);
            }
            if let Some(z) = &m.zone {
                args.extend(["--zone".into(), z.clone()]);
            }
            for (k, v) in &m.labels {
                args.extend(["--label".into(), format!("{k}={v}")]);
            }
            let out = std::process::Command::new(&self.s.pinfed)
                .args(&args)
                .env("KUBECONFIG", &self.s.kubeconfig)
                .env_remove("PINFED_CONTEXT")
                .output()
                .with_context(|| format!("running {}", self.s.pinfed.display()))?;
            if !out.status.success() {
                bail!(
                    "pinfed join {} failed: {}",
                    m.name,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        Ok(())
    }

    fn spawn(&self, name: &str, args: &[String]) -> anyhow::Result<Daemon> {
        Daemon::spawn(&self.s, name, args)
    }

    /// A hub with leader election (the default), on a free loopback port.
    fn spawn_hub(&self, identity: &str) -> anyhow::Result<Daemon> {
        let mut args: Vec<String> = [
            "hub",
            "--context",
            self.s.hub_name(),
            "--identity",
            identity,
            "--metrics-addr",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(format!("127.0.0.1:{}", free_port()?));
        args.extend(self.s.hub_args.iter().cloned());
        self.spawn(identity, &args)
    }

    fn spawn_agents(&self) -> anyhow::Result<Vec<Daemon>> {
        self.s
            .members()
            .iter()
            .map(|m| self.spawn_agent(m))
            .collect()
    }

    /// An agent for `member` without leader election, on a free loopback port.
    fn spawn_agent(&self, member: &str) -> anyhow::Result<Daemon> {
        let args: Vec<String> = vec![
            "agent".into(),
            "--context".into(),
            member.into(),
            "--cluster-name".into(),
            member.into(),
            "--no-leader-election".into(),
            "--metrics-addr".into(),
            format!("127.0.0.1:{}", free_port()?),
        ];
        self.spawn(&format!("agent-{member}"), &args)
    }

    /// Waits until every member's MemberCluster says Ready.
    async fn members_ready(&self) -> anyhow::Result<()> {
        let api: Api<DynamicObject> = Api::all_with(self.hub(), &member_cluster_resource());
        let want: BTreeSet<String> = self.s.members().into_iter().collect();
        wait_for(self.s.timeout, "every MemberCluster Ready", || {
            let api = api.clone();
            let want = want.clone();
            async move {
                let Ok(list) = api.list(&ListParams::default()).await else {
                    return false;
                };
                let ready: BTreeSet<String> = list
                    .items
                    .iter()
                    .filter(|m| condition(&m.data["status"], "Ready") == Some("True"))
                    .map(|m| m.name_any())
                    .collect();
                want.is_subset(&ready)
            }
        })
        .await
    }

    async fn create_namespace(&self, prefix: &str) -> anyhow::Result<String> {
        self.create_namespace_in(self.s.hub_name(), prefix).await
    }

    async fn create_namespace_in(&self, cluster: &str, prefix: &str) -> anyhow::Result<String> {
        let name = unique_name(prefix);
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"pinfed.dev/bench": "true"}}
        }))?;
        Api::<Namespace>::all(self.client(cluster))
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name} in {cluster}"))?;
        Ok(name)
    }

    /// Deletes every PinterestService of `ns` on the hub (a hub must run to remove the
    /// slices and finalizers), waits until they are gone, then deletes the namespace.
    async fn clean_up(&self, ns: &str) {
        let api = self.services(self.s.hub_name(), ns);
        let _ = api
            .delete_collection(&DeleteParams::background(), &ListParams::default())
            .await;
        let gone = wait_for(
            Duration::from_secs(180),
            "the workloads to be deleted",
            || {
                let api = api.clone();
                async move {
                    api.list_metadata(&ListParams::default())
                        .await
                        .is_ok_and(|l| l.items.is_empty())
                }
            },
        )
        .await;
        if let Err(e) = gone {
            progress(&format!("clean-up of {ns}: {e:#}"));
        }
        let _ = Api::<Namespace>::all(self.hub())
            .delete(ns, &DeleteParams::default())
            .await;
    }
}

fn condition<'a>(status: &'a serde_json::Value, type_: &str) -> Option<&'a str> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str())
}

fn service(name: &str, replicas: i64, spread: Option<i64>) -> serde_json::Value {
    let mut v = serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
        "metadata": {"name": name, "labels": {"pinfed.dev/bench": "true"}},
        "spec": {
            "owner": {"team": "bench", "contact": "bench@example.com"},
            "replicas": replicas,
            "template": {"spec": {"containers": [{
                "name": "app", "image": "registry.example/bench:1",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}},
        }
    });
    if let Some(n) = spread {
        v["spec"]["placement"] = serde_json::json!({"spread": {"minClusters": n}});
    }
    v
}

async fn create_service(api: &Api<DynamicObject>, obj: &serde_json::Value) -> anyhow::Result<()> {
    let obj: DynamicObject = serde_json::from_value(obj.clone())?;
    let mut delay = Duration::from_millis(100);
    for attempt in 0.. {
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => return Ok(()),
            // Overload or a dropped connection on a busy machine: retry a few times.
            Err(e)
                if attempt < 5
                    && !matches!(&e, kube::Error::Api(s) if s.code == 409 || s.code == 422) =>
            {
                progress(&format!("create {}: {e}; retrying", obj.name_any()));
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Err(e) => return Err(e).with_context(|| format!("creating {}", obj.name_any())),
        }
    }
    unreachable!()
}

// ---------------------------------------------------------------------------------------
// Child processes

/// A `pinfed` long-running process. It is spawned from a thread that lives as long as this
/// process, with PR_SET_PDEATHSIG, so it dies with us; dropping it stops it (SIGTERM, then
/// SIGKILL).
struct Daemon {
    name: String,
    pid: i32,
    log: PathBuf,
    metrics_addr: Option<String>,
    exited: Arc<AtomicBool>,
}

impl Daemon {
    fn spawn(s: &Settings, name: &str, args: &[String]) -> anyhow::Result<Daemon> {
        use std::os::unix::process::CommandExt;
        let log = s.log_dir.join(format!("{}.log", unique_name(name)));
        let out = std::fs::File::create(&log)?;
        let mut cmd = std::process::Command::new(&s.pinfed);
        cmd.args(args)
            .env("KUBECONFIG", &s.kubeconfig)
            .env_remove("PINFED_CONTEXT")
            .env("RUST_LOG", "info,kube=warn")
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let exited = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let flag = exited.clone();
        std::thread::spawn(move || {
            let mut child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let _ = tx.send(Ok(child.id()));
            let _ = child.wait();
            flag.store(true, Ordering::SeqCst);
            // Keep the thread (the parent of the daemon) alive until the process ends.
            loop {
                std::thread::park();
            }
        });
        let pid = rx
            .recv()?
            .with_context(|| format!("spawning {}", s.pinfed.display()))?;
        let metrics_addr = args
            .iter()
            .position(|a| a == "--metrics-addr")
            .and_then(|i| args.get(i + 1))
            .cloned();
        Ok(Daemon {
            name: name.to_string(),
            pid: pid as i32,
            log,
            metrics_addr,
            exited,
        })
    }

    fn alive(&self) -> bool {
        !self.exited.load(Ordering::SeqCst)
    }

    fn signal(&self, sig: i32) {
        if self.alive() {
            unsafe { libc::kill(self.pid, sig) };
        }
    }

    /// SIGTERM (a hub releases its Lease), then SIGKILL after 10 s.
    fn stop(&self) {
        self.signal(libc::SIGTERM);
        let start = Instant::now();
        while self.alive() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.signal(libc::SIGKILL);
    }

    /// (VmHWM, VmRSS) in KiB.
    fn memory_kib(&self) -> Option<(u64, u64)> {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let field = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        };
        Some((field("VmHWM:")?, field("VmRSS:")?))
    }

    /// User + system CPU seconds so far.
    fn cpu_secs(&self) -> Option<f64> {
        let text = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        let rest = text.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        Some(ticks / hz)
    }

    async fn wait_http(&self, path: &str, timeout: Duration) -> anyhow::Result<()> {
        let addr = self.metrics_addr.clone().context("no metrics address")?;
        let start = Instant::now();
        loop {
            if http_status(&addr, path).await == Some(200) {
                return Ok(());
            }
            if !self.alive() {
                bail!("{} exited:\n{}", self.name, self.log_tail(30));
            }
            if start.elapsed() > timeout {
                bail!(
                    "{} did not answer {path} within {timeout:?}:\n{}",
                    self.name,
                    self.log_tail(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn log_tail(&self, n: usize) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Warnings and errors of the log, counted by message (timestamps and fields cut).
    fn problems(&self) -> Vec<(usize, String)> {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for line in self.log_text().lines() {
            let Some(level) = [" WARN ", " ERROR "].iter().find(|l| line.contains(**l)) else {
                continue;
            };
            let after = line.split_once(level).map(|x| x.1).unwrap_or(line);
            // "target: message key=value ..." -> "target: message"
            let msg: String = after.chars().take(160).collect();
            let key = match msg.find('=') {
                Some(i) => msg[..i]
                    .rsplit_once(' ')
                    .map(|x| x.0)
                    .unwrap_or(&msg)
                    .to_string(),
                None => msg,
            };
            *counts.entry(format!("{}{key}", level.trim())).or_default() += 1;
        }
        let mut v: Vec<(usize, String)> = counts.into_iter().map(|(k, n)| (n, k)).collect();
        v.sort_by_key(|x| std::cmp::Reverse(x.0));
        v
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

fn report_logs(daemons: &[&Daemon]) {
    for d in daemons {
        let problems = d.problems();
        if problems.is_empty() {
            println!("  log {}: no warnings or errors", d.name);
            continue;
        }
        println!("  log {} ({}):", d.name, d.log.display());
        for (n, msg) in problems.iter().take(8) {
            println!("    {n:>6} × {msg}");
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The status code of a tiny HTTP/1.0 GET against a loopback server.
async fn http_status(addr: &str, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut out))
        .await
        .ok()?
        .ok()?;
    String::from_utf8_lossy(&out)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

// ---------------------------------------------------------------------------------------
// Helpers

fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!(
        "{prefix}-{:x}{:x}",
        std::process::id() % 0xfff,
        nanos % 0xfffff
    )
}

static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn progress(msg: &str) {
    let t = START.get_or_init(Instant::now).elapsed().as_secs();
    eprintln!("[bench {t:>4}s] {msg}");
}

async fn wait_for<F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return Ok(());
        }
        if start.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Nearest-rank percentiles of durations, in milliseconds.
struct Dist {
    ms: Vec<f64>,
}

impl Dist {
    fn new(durations: impl IntoIterator<Item = Duration>) -> Dist {
        let mut ms: Vec<f64> = durations
            .into_iter()
            .map(|d| d.as_secs_f64() * 1000.0)
            .collect();
        ms.sort_by(|a, b| a.total_cmp(b));
        Dist { ms }
    }

    fn pct(&self, q: f64) -> f64 {
        if self.ms.is_empty() {
            return f64::NAN;
        }
        let rank = ((q * self.ms.len() as f64).ceil() as usize).clamp(1, self.ms.len());
        self.ms[rank - 1]
    }

    fn line(&self, what: &str) -> String {
        if self.ms.is_empty() {
            return format!("{what}: no samples");
        }
        format!(
            "{what} (n={}): p50 {} ms, p99 {} ms, max {} ms",
            self.ms.len(),
            fmt_ms(self.pct(0.50)),
            fmt_ms(self.pct(0.99)),
            fmt_ms(self.ms[self.ms.len() - 1]),
        )
    }
}

fn fmt_ms(ms: f64) -> String {
    if ms >= 100.0 {
        format!("{ms:.0}")
    } else {
        format!("{ms:.1}")
    }
}

fn load_line() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!(
        "load average {} on {cpus} CPUs",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    )
}

/// Watches the PinterestServices of `ns` in `cluster` (optionally by label) and calls
/// `on_event` with each applied object and the instant it was received. Ends when the
/// returned flag is cleared... by dropping the task handle.
fn watch_services<F>(
    fed: &Fed,
    cluster: &str,
    ns: &str,
    labels: Option<String>,
    mut on_event: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut(&DynamicObject, Instant) + Send + 'static,
{
    let api = fed.services(cluster, ns);
    let mut cfg = watcher::Config::default();
    if let Some(l) = labels {
        cfg = cfg.labels(&l);
    }
    let cluster = cluster.to_string();
    tokio::spawn(async move {
        let mut stream = watcher(api, cfg).default_backoff().boxed();
        loop {
            match stream.try_next().await {
                Ok(Some(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => {
                    on_event(&o, Instant::now())
                }
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(e) => progress(&format!("watch on {cluster}: {e}")),
            }
        }
    })
}

struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

/// The clusters of `status.placement.placements[]` with their replicas.
fn placements(status: &serde_json::Value) -> Option<Vec<(String, i64)>> {
    let ps = status["placement"]["placements"].as_array()?;
    Some(
        ps.iter()
            .filter_map(|p| Some((p["cluster"].as_str()?.to_string(), p["replicas"].as_i64()?)))
            .collect(),
    )
}

/// Creates `names` on the hub: as a burst (`rate` None: `concurrency` at a time, as fast
/// as the API server takes them) or at a steady `rate` per second. Records when each
/// create returned.
async fn create_all(
    api: &Api<DynamicObject>,
    objs: Vec<serde_json::Value>,
    rate: Option<f64>,
    concurrency: usize,
    created: Arc<Mutex<HashMap<String, Instant>>>,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let total = objs.len();
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let one = |i: usize, obj: serde_json::Value| {
        let api = api.clone();
        let created = created.clone();
        let done = done.clone();
        async move {
            if let Some(r) = rate {
                tokio::time::sleep_until(
                    tokio::time::Instant::from_std(start) + Duration::from_secs_f64(i as f64 / r),
                )
                .await;
            }
            let name = obj["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            create_service(&api, &obj).await?;
            created.lock().unwrap().insert(name, Instant::now());
            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_multiple_of(1000) && n < total {
                progress(&format!(
                    "created {n}/{total} ({:.0}/s)",
                    n as f64 / start.elapsed().as_secs_f64()
                ));
            }
            anyhow::Ok(())
        }
    };
    let width = if rate.is_some() {
        total.max(1)
    } else {
        concurrency
    };
    futures::stream::iter(objs.into_iter().enumerate().map(|(i, o)| one(i, o)))
        .buffer_unordered(width)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(start.elapsed())
}

// ---------------------------------------------------------------------------------------
// Scenario: distribution

#[derive(Default)]
struct DistObs {
    /// Hub create returned.
    created: HashMap<String, Instant>,
    /// Hub status.placement first seen: clusters and replicas.
    placed: HashMap<String, (Instant, Vec<(String, i64)>)>,
    /// (workload, member) → slice first seen in the member.
    slice_seen: HashMap<(String, String), Instant>,
    /// (workload, member) → the agent reported the slice fully available.
    slice_available: HashMap<(String, String), Instant>,
    /// (workload, member) → the hub's clusters[] entry says Ready with that availability.
    hub_member_ready: HashMap<(String, String), Instant>,
    /// The hub resource's Ready condition True.
    hub_ready: HashMap<String, Instant>,
}

async fn distribution(fed: &Fed) -> anyhow::Result<()> {
    let n: usize = env_or("PINFED_BENCH_WORKLOADS", 200)?;
    let replicas: i64 = env_or("PINFED_BENCH_REPLICAS", 3)?;
    let spread = fed.s.members().len() as i64;
    let rate: f64 = env_or("PINFED_BENCH_RATE", 20.0)?;
    let concurrency: usize = env_or("PINFED_BENCH_CONCURRENCY", 32)?;
    // 0: no agents — the members only store slices, so the figures are the hub's own
    // (no Deployments, pods or kwok competing for the same cores).
    let with_agents = env_or::<u8>("PINFED_BENCH_AGENTS", 1)? != 0;
    let pacings: Vec<String> = std::env::var("PINFED_BENCH_PACING")
        .unwrap_or_else(|_| "burst,steady".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();

    progress(if with_agents {
        "distribution: joining members, starting the hub and one agent per member"
    } else {
        "distribution: joining members, starting the hub (no agents: PINFED_BENCH_AGENTS=0)"
    });
    fed.join_all()?;
    let hub = fed.spawn_hub("bench-hub")?;
    let agents = if with_agents {
        fed.spawn_agents()?
    } else {
        Vec::new()
    };
    hub.wait_http("/readyz", fed.s.timeout).await?;
    for a in &agents {
        a.wait_http("/readyz", fed.s.timeout).await?;
    }
    fed.members_ready().await?;

    for pacing in &pacings {
        let rate = match pacing.as_str() {
            "burst" => None,
            "steady" => Some(rate),
            other => bail!("PINFED_BENCH_PACING: unknown pacing {other:?} (burst, steady)"),
        };
        let ns = fed.create_namespace("bench-dist").await?;
        // One warm-up workload first, so the one-time namespace creation in each member is
        // not in the figures.
        let warm = fed.services(fed.s.hub_name(), &ns);
        create_service(&warm, &service("warm-up", replicas, Some(spread))).await?;
        for m in fed.s.members() {
            let api = fed.services(&m, &ns);
            wait_for(fed.s.timeout, &format!("the warm-up slice in {m}"), || {
                let api = api.clone();
                async move { api.get_opt("warm-up").await.ok().flatten().is_some() }
            })
            .await?;
        }

        let obs = Arc::new(Mutex::new(DistObs::default()));
        let mut watches = AbortOnDrop(Vec::new());
        for m in fed.s.members() {
            let obs = obs.clone();
            let member = m.clone();
            watches.0.push(watch_services(
                fed,
                &m,
                &ns,
                Some(format!("{LABEL_HUB_NAMESPACE}={ns}")),
                move |o, at| {
                    let key = (o.name_any(), member.clone());
                    let mut obs = obs.lock().unwrap();
                    obs.slice_seen.entry(key.clone()).or_insert(at);
                    let st = &o.data["status"];
                    let want = o.data["spec"]["replicas"].as_i64();
                    if condition(st, "Ready") == Some("True")
                        && st["observedGeneration"].as_i64() == o.metadata.generation
                        && st["availableReplicas"].as_i64() == want
                    {
                        obs.slice_available.entry(key).or_insert(at);
                    }
                },
            ));
        }
        {
            let obs = obs.clone();
            watches.0.push(watch_services(
                fed,
                fed.s.hub_name(),
                &ns,
                None,
                move |o, at| {
                    let name = o.name_any();
                    let st = &o.data["status"];
                    let mut obs = obs.lock().unwrap();
                    if let Some(p) = placements(st).filter(|p| !p.is_empty()) {
                        obs.placed.entry(name.clone()).or_insert((at, p));
                    }
                    for c in st["clusters"].as_array().into_iter().flatten() {
                        if c["state"] == "Ready"
                            && c["availableReplicas"].as_i64().is_some()
                            && c["availableReplicas"] == c["replicas"]
                        {
                            let m = c["cluster"].as_str().unwrap_or_default().to_string();
                            obs.hub_member_ready.entry((name.clone(), m)).or_insert(at);
                        }
                    }
                    if condition(st, "Ready") == Some("True") {
                        obs.hub_ready.entry(name).or_insert(at);
                    }
                },
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await; // let the watches list

        let names: Vec<String> = (0..n).map(|i| format!("svc-{i:04}")).collect();
        let objs = names
            .iter()
            .map(|nm| service(nm, replicas, Some(spread)))
            .collect();
        let created = Arc::new(Mutex::new(HashMap::new()));
        progress(&format!(
            "distribution ({pacing}): creating {n} PinterestServices in {ns}"
        ));
        let load_before = load_line();
        let hub_cpu_before = hub.cpu_secs();
        let took = create_all(&warm, objs, rate, concurrency, created.clone()).await?;
        obs.lock().unwrap().created = created.lock().unwrap().clone();

        // Every placed (workload, member) has its slice; then, best effort, Ready.
        let everything_sliced = |obs: &DistObs| {
            names.iter().all(|nm| {
                obs.placed.get(nm).is_some_and(|(_, ps)| {
                    ps.iter()
                        .all(|(m, _)| obs.slice_seen.contains_key(&(nm.clone(), m.clone())))
                })
            })
        };
        let mut last = Instant::now();
        let start = Instant::now();
        loop {
            if everything_sliced(&obs.lock().unwrap()) {
                break;
            }
            if start.elapsed() > fed.s.timeout {
                progress("distribution: timed out waiting for every slice");
                break;
            }
            if last.elapsed() > Duration::from_secs(5) {
                last = Instant::now();
                let o = obs.lock().unwrap();
                progress(&format!(
                    "distribution: {} placed, {} slices seen",
                    o.placed.len(),
                    o.slice_seen.len()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let sliced_at = Instant::now();
        let hub_cpu_sliced = hub.cpu_secs();
        if with_agents {
            let _ = wait_for(fed.s.timeout, "every workload Ready on the hub", || {
                let done = {
                    let o = obs.lock().unwrap();
                    names.iter().all(|nm| o.hub_ready.contains_key(nm))
                };
                async move { done }
            })
            .await
            .map_err(|e| progress(&format!("distribution: {e:#}")));
        }
        let load_after = load_line();
        drop(watches);

        let o = std::mem::take(&mut *obs.lock().unwrap());
        let since_created =
            |nm: &str, at: Instant| o.created.get(nm).map(|c| at.saturating_duration_since(*c));
        let mut slice_lat = Vec::new();
        let mut missing = 0;
        let mut expected = 0;
        for nm in &names {
            let Some((_, ps)) = o.placed.get(nm) else {
                missing += 1;
                continue;
            };
            for (m, _) in ps {
                expected += 1;
                match o.slice_seen.get(&(nm.clone(), m.clone())) {
                    Some(at) => slice_lat.extend(since_created(nm, *at)),
                    None => missing += 1,
                }
            }
        }
        let all_slices: Vec<Duration> = names
            .iter()
            .filter_map(|nm| {
                let (_, ps) = o.placed.get(nm)?;
                let last = ps
                    .iter()
                    .map(|(m, _)| o.slice_seen.get(&(nm.clone(), m.clone())).copied())
                    .collect::<Option<Vec<_>>>()?
                    .into_iter()
                    .max()?;
                since_created(nm, last)
            })
            .collect();
        let placed: Vec<Duration> = names
            .iter()
            .filter_map(|nm| since_created(nm, o.placed.get(nm)?.0))
            .collect();
        let ready: Vec<Duration> = names
            .iter()
            .filter_map(|nm| since_created(nm, *o.hub_ready.get(nm)?))
            .collect();
        let agg: Vec<Duration> = o
            .hub_member_ready
            .iter()
            .filter(|(k, _)| names.contains(&k.0))
            .filter_map(|(k, at)| Some(at.saturating_duration_since(*o.slice_available.get(k)?)))
            .collect();
        let pacing_desc = match rate {
            None => format!("burst ({concurrency} concurrent creates, took {took:.1?})"),
            Some(r) => format!("steady {r}/s (took {took:.1?})"),
        };
        println!("\n== distribution: {pacing_desc} ==");
        println!(
            "config: {n} PinterestServices × {replicas} replicas, Divided, spread minClusters \
             {spread}; hub (leader election on) + {} agents; {}",
            agents.len(),
            fed.s.describe()
        );
        println!("load: before {load_before}; after {load_after}");
        if let (Some(a), Some(b)) = (hub_cpu_before, hub_cpu_sliced) {
            println!(
                "  hub CPU from the first create to every slice present: {:.1} s over {:.1?}",
                b - a,
                sliced_at.saturating_duration_since(start) + took
            );
        }
        println!(
            "  {}",
            Dist::new(slice_lat).line("create returned → slice present in member, per slice")
        );
        println!(
            "  {}",
            Dist::new(all_slices).line("create returned → every slice present, per workload")
        );
        println!(
            "  {}",
            Dist::new(placed).line("create returned → status.placement on the hub")
        );
        println!(
            "  {}",
            Dist::new(ready).line("create returned → hub Ready (agents expanded, kwok pods)")
        );
        if !with_agents {
            println!("  (no agents: nothing becomes Ready, and nothing was waited for)");
        }
        println!(
            "  {}",
            Dist::new(agg).line(
                "slice fully available in member → hub clusters[] entry Ready (end-to-end aggregation)"
            )
        );
        if missing > 0 {
            println!("  MISSING: {missing} of {expected} expected slices never seen");
        }
        progress(&format!("distribution ({pacing}): cleaning up {ns}"));
        fed.clean_up(&ns).await;
    }
    report_logs(&[&hub]);
    report_logs(&agents.iter().collect::<Vec<_>>());
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Scenario: aggregation

async fn aggregation(fed: &Fed) -> anyhow::Result<()> {
    let n: usize = env_or("PINFED_BENCH_AGG_WORKLOADS", 100)?;
    let replicas: i64 = env_or("PINFED_BENCH_REPLICAS", 3)?;
    let rate: f64 = env_or("PINFED_BENCH_AGG_RATE", 20.0)?;
    let rounds: usize = env_or("PINFED_BENCH_AGG_ROUNDS", 2)?;
    let spread = fed.s.members().len() as i64;

    progress(
        "aggregation: joining members and starting the hub (no agents: we write slice status)",
    );
    fed.join_all()?;
    let hub = fed.spawn_hub("bench-hub")?;
    hub.wait_http("/readyz", fed.s.timeout).await?;
    fed.members_ready().await?;
    let ns = fed.create_namespace("bench-agg").await?;
    let hub_api = fed.services(fed.s.hub_name(), &ns);

    // (workload, member) → slice generation and replicas, from the members.
    type Slices = HashMap<(String, String), (i64, i64)>;
    let slices: Arc<Mutex<Slices>> = Default::default();
    // (workload, member) → the hub's clusters[] availableReplicas, each change with when.
    type Seen = HashMap<(String, String), Vec<(Instant, Option<i64>)>>;
    let seen: Arc<Mutex<Seen>> = Default::default();
    let mut watches = AbortOnDrop(Vec::new());
    for m in fed.s.members() {
        let slices = slices.clone();
        let member = m.clone();
        watches.0.push(watch_services(
            fed,
            &m,
            &ns,
            Some(format!("{LABEL_HUB_NAMESPACE}={ns}")),
            move |o, _| {
                let generation = o.metadata.generation.unwrap_or(0);
                let r = o.data["spec"]["replicas"].as_i64().unwrap_or(0);
                slices
                    .lock()
                    .unwrap()
                    .insert((o.name_any(), member.clone()), (generation, r));
            },
        ));
    }
    {
        let seen = seen.clone();
        watches.0.push(watch_services(
            fed,
            fed.s.hub_name(),
            &ns,
            None,
            move |o, at| {
                let name = o.name_any();
                let mut seen = seen.lock().unwrap();
                for c in o.data["status"]["clusters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let m = c["cluster"].as_str().unwrap_or_default().to_string();
                    let v = c["availableReplicas"].as_i64();
                    let list = seen.entry((name.clone(), m)).or_default();
                    if list.last().map(|x| x.1) != Some(v) {
                        list.push((at, v));
                    }
                }
            },
        ));
    }

    progress(&format!("aggregation: placing {n} workloads"));
    let names: Vec<String> = (0..n).map(|i| format!("svc-{i:04}")).collect();
    let objs = names
        .iter()
        .map(|nm| service(nm, replicas, Some(spread)))
        .collect();
    create_all(&hub_api, objs, None, 32, Default::default()).await?;
    let want = n * spread as usize;
    wait_for(fed.s.timeout, "every slice and its hub entry", || {
        let ok = slices.lock().unwrap().len() >= want && seen.lock().unwrap().len() >= want;
        async move { ok }
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let keys: Vec<((String, String), (i64, i64))> = {
        let mut v: Vec<_> = slices
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        v.sort();
        v
    };
    println!("\n== aggregation ==");
    println!(
        "config: {n} PinterestServices × {replicas} replicas spread over {spread} members = \
         {} slices; status writes paced at {rate}/s, {rounds} rounds; hub (leader election on), \
         no agents (the bench writes each slice's status as an agent would); {}",
        keys.len(),
        fed.s.describe()
    );
    let load_before = load_line();
    let mut all = Vec::new();
    let mut rtts = Vec::new();
    for round in 0..rounds {
        // Round 0 reports every replica available, round 1 one fewer, and so on.
        let mut patched: Vec<((String, String), Instant, i64)> = Vec::new();
        let start = Instant::now();
        progress(&format!(
            "aggregation: round {}: writing {} slice statuses",
            round + 1,
            keys.len()
        ));
        for (i, ((name, member), (generation, r))) in keys.iter().enumerate() {
            tokio::time::sleep_until(
                tokio::time::Instant::from_std(start) + Duration::from_secs_f64(i as f64 / rate),
            )
            .await;
            let avail = (r - round as i64).max(0);
            let ready = if avail == *r { "True" } else { "False" };
            let patch = serde_json::json!({"status": {
                "observedGeneration": generation,
                "replicas": r, "readyReplicas": avail, "availableReplicas": avail,
                "conditions": [{"type": "Ready", "status": ready, "reason": "Bench",
                    "message": format!("bench round {round}"),
                    "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string()}],
            }});
            let api = fed.services(member, &ns);
            let sent = Instant::now();
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("patching the status of {name} in {member}"))?;
            let at = Instant::now();
            rtts.push(at - sent);
            patched.push(((name.clone(), member.clone()), at, avail));
        }
        let latency = |seen: &Seen, key: &(String, String), at: Instant, v: i64| {
            seen.get(key)?
                .iter()
                .find(|(t, val)| *t >= at && *val == Some(v))
                .map(|(t, _)| *t - at)
        };
        let _ = wait_for(
            fed.s.timeout,
            "the hub to reflect every status write",
            || {
                let s = seen.lock().unwrap();
                let done = patched
                    .iter()
                    .all(|(k, at, v)| latency(&s, k, *at, *v).is_some());
                async move { done }
            },
        )
        .await
        .map_err(|e| progress(&format!("aggregation: {e:#}")));
        let s = seen.lock().unwrap();
        let lat: Vec<Duration> = patched
            .iter()
            .filter_map(|(k, at, v)| latency(&s, k, *at, *v))
            .collect();
        let missing = patched.len() - lat.len();
        println!(
            "  {}",
            Dist::new(lat.clone()).line(&format!(
                "round {}: member status write returned → hub clusters[] shows it",
                round + 1
            ))
        );
        if missing > 0 {
            println!("  MISSING: {missing} status writes never reflected on the hub");
        }
        all.extend(lat);
    }
    println!("  {}", Dist::new(all).line("all rounds"));
    println!(
        "  {}",
        Dist::new(rtts).line("(status write round trip to the member, for reference)")
    );
    println!("load: before {load_before}; after {}", load_line());
    drop(watches);
    progress(&format!("aggregation: cleaning up {ns}"));
    fed.clean_up(&ns).await;
    report_logs(&[&hub]);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Scenario: takeover

async fn lease_holder(api: &Api<Lease>) -> Option<(String, Option<Instant>)> {
    let l = api.get_opt(LEASE_NAME).await.ok()??;
    let spec = l.spec?;
    let holder = spec.holder_identity?;
    // Age of the last renewal, turned into an instant of ours (same machine clock).
    let renewed = spec.renew_time.and_then(|t| {
        let age = k8s_openapi::jiff::Timestamp::now().duration_since(t.0);
        let age = Duration::try_from(age).ok()?;
        Instant::now().checked_sub(age)
    });
    Some((holder, renewed))
}

async fn takeover(fed: &Fed) -> anyhow::Result<()> {
    let rounds: usize = env_or("PINFED_BENCH_TAKEOVER_ROUNDS", 3)?;
    let lease_ns: String = env_or("PINFED_BENCH_LEASE_NAMESPACE", "pinfed-system".to_string())?;
    let replicas: i64 = env_or("PINFED_BENCH_REPLICAS", 3)?;
    let spread = fed.s.members().len() as i64;
    progress("takeover: joining members, starting two hubs with leader election");
    fed.join_all()?;
    let leases: Api<Lease> = Api::namespaced(fed.hub(), &lease_ns);
    let ids = ["bench-hub-a", "bench-hub-b"];
    let mut hubs: Vec<Option<Daemon>> = vec![Some(fed.spawn_hub(ids[0])?), None];
    wait_for(fed.s.timeout, "bench-hub-a to hold the Lease", || {
        let leases = leases.clone();
        async move {
            lease_holder(&leases)
                .await
                .is_some_and(|(h, _)| h == "bench-hub-a")
        }
    })
    .await?;
    hubs[0]
        .as_ref()
        .unwrap()
        .wait_http("/readyz", fed.s.timeout)
        .await?;
    hubs[1] = Some(fed.spawn_hub(ids[1])?);
    hubs[1]
        .as_ref()
        .unwrap()
        .wait_http("/healthz", fed.s.timeout)
        .await?;
    fed.members_ready().await?;
    let ns = fed.create_namespace("bench-takeover").await?;
    let hub_api = fed.services(fed.s.hub_name(), &ns);
    create_service(&hub_api, &service("warm-up", replicas, Some(spread))).await?;
    for m in fed.s.members() {
        let api = fed.services(&m, &ns);
        wait_for(fed.s.timeout, &format!("the warm-up slice in {m}"), || {
            let api = api.clone();
            async move { api.get_opt("warm-up").await.ok().flatten().is_some() }
        })
        .await?;
    }
    // Give the standby time to settle (warm caches, if it keeps them).
    tokio::time::sleep(Duration::from_secs(5)).await;

    println!("\n== takeover ==");
    println!(
        "config: two `pinfed hub` processes, Lease {lease_ns}/{LEASE_NAME}; the leader is \
         killed with SIGKILL ({rounds} rounds) and then SIGTERM (1 round); after each kill a \
         PinterestService × {replicas} replicas (spread {spread}) is created at once; {}",
        fed.s.describe()
    );
    let mut lease_times = Vec::new();
    let mut slice_times = Vec::new();
    let mut leader = 0usize;
    for round in 0..=rounds {
        let graceful = round == rounds;
        let standby = 1 - leader;
        let (holder, renewed) = lease_holder(&leases).await.context("no Lease holder")?;
        if holder != ids[leader] {
            bail!("expected {} to hold the Lease, found {holder}", ids[leader]);
        }
        let name = format!("after-kill-{round}");
        // Slices of the new workload, as they appear.
        let seen: Arc<Mutex<HashMap<String, Instant>>> = Default::default();
        let mut watches = AbortOnDrop(Vec::new());
        for m in fed.s.members() {
            let seen = seen.clone();
            let member = m.clone();
            let want = name.clone();
            watches.0.push(watch_services(
                fed,
                &m,
                &ns,
                Some(format!("{LABEL_HUB_NAMESPACE}={ns}")),
                move |o, at| {
                    if o.name_any() == want {
                        seen.lock().unwrap().entry(member.clone()).or_insert(at);
                    }
                },
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;

        let killed = Instant::now();
        let old = hubs[leader].take().expect("the leader runs");
        if graceful {
            old.signal(libc::SIGTERM);
        } else {
            old.signal(libc::SIGKILL);
        }
        create_service(&hub_api, &service(&name, replicas, Some(spread))).await?;
        let created = Instant::now();
        // (a) the standby holds the Lease.
        let mut acquired = None;
        while killed.elapsed() < fed.s.timeout {
            if let Some((h, _)) = lease_holder(&leases).await
                && h == ids[standby]
            {
                acquired = Some(killed.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let acquired = acquired.context("the standby never took the Lease")?;
        // (b) the new workload's slices.
        wait_for(fed.s.timeout, "the new workload's slices", || {
            let n = seen.lock().unwrap().len();
            async move { n >= spread as usize }
        })
        .await?;
        let last_slice = seen
            .lock()
            .unwrap()
            .values()
            .max()
            .copied()
            .unwrap_or(killed);
        drop(watches);
        let since_renewal = renewed.map(|r| killed.saturating_duration_since(r));
        println!(
            "  round {} ({}): standby holds the Lease {:.2} s after the kill (last renewal {} \
             before the kill); new workload's slices all present {:.2} s after the kill ({:.2} \
             s after its create returned)",
            round + 1,
            if graceful { "SIGTERM" } else { "SIGKILL" },
            acquired.as_secs_f64(),
            since_renewal
                .map(|d| format!("{:.2} s", d.as_secs_f64()))
                .unwrap_or_else(|| "unknown".into()),
            (last_slice - killed).as_secs_f64(),
            last_slice.saturating_duration_since(created).as_secs_f64(),
        );
        if !graceful {
            lease_times.push(acquired);
            slice_times.push(last_slice - killed);
        }
        drop(old);
        if !graceful {
            // The killed hub comes back as the new standby.
            let h = fed.spawn_hub(ids[leader])?;
            h.wait_http("/healthz", fed.s.timeout).await?;
            hubs[leader] = Some(h);
            tokio::time::sleep(Duration::from_secs(5)).await;
            leader = standby;
        }
    }
    println!(
        "  {}",
        Dist::new(lease_times).line("SIGKILL → standby holds the Lease")
    );
    println!(
        "  {}",
        Dist::new(slice_times).line("SIGKILL → workload created right after has every slice")
    );
    println!("load: {}", load_line());
    progress(&format!("takeover: cleaning up {ns}"));
    fed.clean_up(&ns).await;
    let running: Vec<&Daemon> = hubs.iter().flatten().collect();
    report_logs(&running);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Scenario: scale10k

async fn scale10k(fed: &Fed) -> anyhow::Result<()> {
    let n: usize = env_or("PINFED_BENCH_SCALE_WORKLOADS", 10_000)?;
    let concurrency: usize = env_or("PINFED_BENCH_CONCURRENCY", 32)?;
    let settle = Duration::from_secs(env_or("PINFED_BENCH_SETTLE_SECS", 30)?);
    let timeout = Duration::from_secs(env_or("PINFED_BENCH_SCALE_TIMEOUT_SECS", 1800)?);
    progress("scale10k: joining members (no hub runs while the workloads are created)");
    fed.join_all()?;
    let ns = fed.create_namespace("bench-10k").await?;
    let hub_api = fed.services(fed.s.hub_name(), &ns);
    let names: Vec<String> = (0..n).map(|i| format!("svc-{i:05}")).collect();
    let objs = names.iter().map(|nm| service(nm, 1, None)).collect();
    progress(&format!(
        "scale10k: creating {n} PinterestServices in {ns}, {concurrency} at a time"
    ));
    let took = create_all(&hub_api, objs, None, concurrency, Default::default()).await?;
    progress(&format!(
        "scale10k: created in {took:.1?} ({:.0}/s)",
        n as f64 / took.as_secs_f64()
    ));

    // Counters fed by watches: placed on the hub, slices in the members.
    let placed: Arc<Mutex<(BTreeSet<String>, Option<Instant>)>> = Default::default();
    let slices: Arc<Mutex<BTreeSet<(String, String)>>> = Default::default();
    let mut watches = AbortOnDrop(Vec::new());
    for m in fed.s.members() {
        let slices = slices.clone();
        let member = m.clone();
        watches.0.push(watch_services(
            fed,
            &m,
            &ns,
            Some(format!("{LABEL_HUB_NAMESPACE}={ns}")),
            move |o, _| {
                slices
                    .lock()
                    .unwrap()
                    .insert((o.name_any(), member.clone()));
            },
        ));
    }
    let hub_watch = {
        let placed = placed.clone();
        watch_services(fed, fed.s.hub_name(), &ns, None, move |o, at| {
            if placements(&o.data["status"]).is_some_and(|p| !p.is_empty()) {
                let mut p = placed.lock().unwrap();
                if p.0.insert(o.name_any()) && p.0.len() == n {
                    p.1 = Some(at);
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;

    let load_before = load_line();
    let started = Instant::now();
    let hub = fed.spawn_hub("bench-hub")?;
    let mut ready_at = None;
    let mut slices_at = None;
    let mut last = Instant::now();
    let mut peak_rss = 0u64;
    let first_sync = loop {
        if let Some((_, rss)) = hub.memory_kib() {
            peak_rss = peak_rss.max(rss);
        }
        if ready_at.is_none()
            && let Some(addr) = &hub.metrics_addr
            && http_status(addr, "/readyz").await == Some(200)
        {
            ready_at = Some(started.elapsed());
        }
        if slices_at.is_none() && slices.lock().unwrap().len() >= n {
            slices_at = Some(started.elapsed());
        }
        if let Some(at) = placed.lock().unwrap().1 {
            break at - started;
        }
        if !hub.alive() {
            bail!("the hub exited:\n{}", hub.log_tail(30));
        }
        if started.elapsed() > timeout {
            bail!(
                "scale10k: only {} of {n} workloads placed after {timeout:?}",
                placed.lock().unwrap().0.len()
            );
        }
        if last.elapsed() > Duration::from_secs(10) {
            last = Instant::now();
            progress(&format!(
                "scale10k: {:.0?} after start: {} placed, {} slices, RSS {} MiB",
                started.elapsed(),
                placed.lock().unwrap().0.len(),
                slices.lock().unwrap().len(),
                hub.memory_kib().map(|m| m.1 / 1024).unwrap_or(0)
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    hub_watch.abort();
    let at_sync = hub.memory_kib();
    let cpu_at_sync = hub.cpu_secs();
    // All slices, if not yet, then settle.
    let _ = wait_for(timeout, "every slice", || {
        let done = slices.lock().unwrap().len() >= n;
        async move { done }
    })
    .await;
    if slices_at.is_none() && slices.lock().unwrap().len() >= n {
        slices_at = Some(started.elapsed());
    }
    progress(&format!(
        "scale10k: first sync done; settling for {settle:?}"
    ));
    let settle_start = Instant::now();
    let cpu_before_settle = hub.cpu_secs();
    while settle_start.elapsed() < settle {
        if let Some((_, rss)) = hub.memory_kib() {
            peak_rss = peak_rss.max(rss);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let at_end = hub.memory_kib();
    let cpu_end = hub.cpu_secs();
    let mib = |k: Option<u64>| {
        k.map(|k| format!("{:.0} MiB", k as f64 / 1024.0))
            .unwrap_or_else(|| "?".into())
    };
    println!("\n== scale10k ==");
    println!(
        "config: {n} PinterestServices × 1 replica (10m cpu, 16Mi + runtime sidecars), \
         Divided, no spread; created {concurrency} at a time in {took:.1?} ({:.0}/s) with no \
         hub running; then one `pinfed hub` (leader election on) started; no agents; {}",
        n as f64 / took.as_secs_f64(),
        fed.s.describe()
    );
    println!("load: before {load_before}; after {}", load_line());
    println!(
        "  hub start → /readyz: {}",
        ready_at
            .map(|d| format!("{:.2} s", d.as_secs_f64()))
            .unwrap_or_else(|| "not seen".into())
    );
    println!(
        "  hub start → every workload has status.placement (first sync): {:.1} s",
        first_sync.as_secs_f64()
    );
    println!(
        "  hub start → every slice present in the members: {}",
        slices_at
            .map(|d| format!("{:.1} s", d.as_secs_f64()))
            .unwrap_or_else(|| format!("not reached ({} of {n})", slices.lock().unwrap().len()))
    );
    println!(
        "  hub RSS at first sync {}, peak (VmHWM) {}, after {settle:?} more {} (peak sampled \
         VmRSS {})",
        mib(at_sync.map(|m| m.1)),
        mib(at_end.map(|m| m.0)),
        mib(at_end.map(|m| m.1)),
        mib(Some(peak_rss)),
    );
    if let (Some(a), Some(b), Some(c)) = (cpu_at_sync, cpu_before_settle, cpu_end) {
        println!(
            "  hub CPU: {a:.1} s until first sync; {:.2} cores on average while idle-settling \
             for {settle:?}",
            (c - b) / settle.as_secs_f64()
        );
    }
    drop(watches);
    report_logs(&[&hub]);
    println!(
        "  note: the {n} workloads stay in namespace {ns} (deleting them needs a hub to remove \
         finalizers); e2e/bench throws the topology away"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Scenario: agent1k

/// What the watch on the member saw of the PinterestServices.
#[derive(Default)]
struct AgentObs {
    /// First received with a Ready condition True (for the current generation).
    ready: HashMap<String, Instant>,
    /// When the last of them became Ready.
    all_ready: Option<Instant>,
}

async fn agent1k(fed: &Fed) -> anyhow::Result<()> {
    let n: usize = env_or("PINFED_BENCH_AGENT_SERVICES", 1000)?;
    let concurrency: usize = env_or("PINFED_BENCH_CONCURRENCY", 32)?;
    let settle = Duration::from_secs(env_or("PINFED_BENCH_SETTLE_SECS", 30)?);
    let timeout = Duration::from_secs(env_or("PINFED_BENCH_AGENT_TIMEOUT_SECS", 900)?);
    let member = fed
        .s
        .members()
        .into_iter()
        .next()
        .context("the topology has no member")?;
    progress(&format!(
        "agent1k: installing the CRDs in {member} (no hub is used)"
    ));
    pinfed::hub::join::install_crds(&fed.client(&member))
        .await
        .with_context(|| format!("installing the CRDs in {member}"))?;
    let ns = fed.create_namespace_in(&member, "bench-agent").await?;
    progress(&format!(
        "agent1k: starting `pinfed agent --cluster-name {member}` (no leader election)"
    ));
    let agent = fed.spawn_agent(&member)?;
    let result = agent1k_run(fed, &member, &ns, &agent, n, concurrency, settle, timeout).await;
    if let Err(e) = &result {
        eprintln!(
            "agent1k failed: {e:#}\nlast lines of the agent log ({}):\n{}",
            agent.log.display(),
            agent.log_tail(40)
        );
    }
    progress(&format!(
        "agent1k: stopping the agent, deleting namespace {ns} in {member}"
    ));
    drop(agent);
    if let Err(e) = Api::<Namespace>::all(fed.client(&member))
        .delete(&ns, &DeleteParams::background())
        .await
    {
        progress(&format!("agent1k: deleting namespace {ns}: {e}"));
    }
    result
}

#[allow(clippy::too_many_arguments)]
async fn agent1k_run(
    fed: &Fed,
    member: &str,
    ns: &str,
    agent: &Daemon,
    n: usize,
    concurrency: usize,
    settle: Duration,
    timeout: Duration,
) -> anyhow::Result<()> {
    agent.wait_http("/readyz", fed.s.timeout).await?;
    // The agent watches every namespace: anything already in the member is its load too.
    let others = Api::<DynamicObject>::all_with(fed.client(member), &service_resource())
        .list_metadata(&ListParams::default())
        .await
        .map(|l| l.items.len())
        .unwrap_or(0);
    if others > 0 {
        progress(&format!(
            "agent1k: WARNING: {member} already holds {others} PinterestServices; the agent \
             reconciles them too"
        ));
    }
    // Watch first, so every Ready is received as it is written.
    let obs: Arc<Mutex<AgentObs>> = Default::default();
    let mut tasks = AbortOnDrop(Vec::new());
    {
        let obs = obs.clone();
        tasks
            .0
            .push(watch_services(fed, member, ns, None, move |o, at| {
                let st = &o.data["status"];
                if condition(st, "Ready") != Some("True")
                    || st["observedGeneration"].as_i64() != o.metadata.generation
                {
                    return;
                }
                let mut obs = obs.lock().unwrap();
                if let std::collections::hash_map::Entry::Vacant(e) = obs.ready.entry(o.name_any())
                {
                    e.insert(at);
                    if obs.ready.len() == n {
                        obs.all_ready = Some(at);
                    }
                }
            }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = agent.memory_kib();

    let names: Vec<String> = (0..n).map(|i| format!("svc-{i:05}")).collect();
    let objs: Vec<serde_json::Value> = names.iter().map(|nm| service(nm, 1, None)).collect();
    let created: Arc<Mutex<HashMap<String, Instant>>> = Default::default();
    let create_result: Arc<Mutex<Option<anyhow::Result<Duration>>>> = Default::default();
    progress(&format!(
        "agent1k: creating {n} PinterestServices in {member}/{ns}, {concurrency} at a time"
    ));
    let load_before = load_line();
    let cpu_before = agent.cpu_secs();
    let started = Instant::now();
    {
        let api = fed.services(member, ns);
        let created = created.clone();
        let slot = create_result.clone();
        tasks.0.push(tokio::spawn(async move {
            let r = create_all(&api, objs, None, concurrency, created).await;
            *slot.lock().unwrap() = Some(r);
        }));
    }

    let mut peak_rss = idle.map(|m| m.1).unwrap_or(0);
    let mut last_sample: Option<Instant> = None;
    let mut last_progress = Instant::now();
    let mut created_in: Option<Duration> = None;
    let all_ready = loop {
        if last_sample.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            last_sample = Some(Instant::now());
            if let Some((_, rss)) = agent.memory_kib() {
                peak_rss = peak_rss.max(rss);
            }
        }
        let done = create_result.lock().unwrap().take();
        if let Some(r) = done {
            let took = r?;
            progress(&format!(
                "agent1k: all {n} created in {took:.1?} ({:.0}/s)",
                n as f64 / took.as_secs_f64()
            ));
            created_in = Some(took);
        }
        let (ready, all) = {
            let o = obs.lock().unwrap();
            (o.ready.len(), o.all_ready)
        };
        if let Some(at) = all {
            break at;
        }
        if !agent.alive() {
            bail!("the agent exited ({ready} of {n} Ready)");
        }
        if started.elapsed() > timeout {
            bail!(
                "only {ready} of {n} PinterestServices Ready after {timeout:?} ({} created); \
                 raise PINFED_BENCH_AGENT_TIMEOUT_SECS if the machine is just slow",
                created.lock().unwrap().len()
            );
        }
        if last_progress.elapsed() > Duration::from_secs(10) {
            last_progress = Instant::now();
            progress(&format!(
                "agent1k: {:.0?} after the first create: {} created, {ready} Ready, agent RSS \
                 {} MiB",
                started.elapsed(),
                created.lock().unwrap().len(),
                agent.memory_kib().map(|m| m.1 / 1024).unwrap_or(0)
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let at_ready = agent.memory_kib();
    let cpu_at_ready = agent.cpu_secs();
    if let Some((_, rss)) = at_ready {
        peak_rss = peak_rss.max(rss);
    }
    // Every Ready implies every create returned, but the task may not have said so yet.
    let created_in = match created_in {
        Some(d) => d,
        None => loop {
            let done = create_result.lock().unwrap().take();
            if let Some(r) = done {
                break r?;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        },
    };
    progress(&format!(
        "agent1k: all {n} Ready after {:.1?}; settling for {settle:?}",
        all_ready - started
    ));
    let settle_start = Instant::now();
    while settle_start.elapsed() < settle {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Some((_, rss)) = agent.memory_kib() {
            peak_rss = peak_rss.max(rss);
        }
        if !agent.alive() {
            bail!("the agent exited while settling");
        }
    }
    let at_end = agent.memory_kib();
    let cpu_end = agent.cpu_secs();
    drop(tasks);

    let latencies: Vec<Duration> = {
        let created = created.lock().unwrap();
        let o = obs.lock().unwrap();
        names
            .iter()
            .filter_map(|nm| {
                Some(
                    o.ready
                        .get(nm)?
                        .saturating_duration_since(*created.get(nm)?),
                )
            })
            .collect()
    };
    let mib = |k: Option<u64>| {
        k.map(|k| format!("{:.0} MiB", k as f64 / 1024.0))
            .unwrap_or_else(|| "?".into())
    };
    println!("\n== agent1k ==");
    println!(
        "config: {n} PinterestServices × 1 replica (10m cpu, 16Mi + runtime sidecars) created \
         directly in member {member} (namespace {ns}), {concurrency} at a time, with one \
         `pinfed agent --no-leader-election` already running; no hub; {} other \
         PinterestServices in the member; {}",
        others,
        fed.s.describe()
    );
    println!("load: before {load_before}; after {}", load_line());
    println!(
        "  first create → all {n} created: {:.1} s ({:.0}/s)",
        created_in.as_secs_f64(),
        n as f64 / created_in.as_secs_f64()
    );
    println!(
        "  first create → all {n} Ready (Ready=True received by a watch on {member}): {:.1} s",
        (all_ready - started).as_secs_f64()
    );
    println!(
        "  {}",
        Dist::new(latencies).line("create returned → Ready, per PinterestService")
    );
    println!(
        "  agent RSS: {} idle before the creates, {} when all were Ready, final {} after \
         {settle:?} more; peak sampled VmRSS (every 1 s) {}, VmHWM {}",
        mib(idle.map(|m| m.1)),
        mib(at_ready.map(|m| m.1)),
        mib(at_end.map(|m| m.1)),
        mib(Some(peak_rss)),
        mib(at_end.map(|m| m.0)),
    );
    if let (Some(a), Some(b), Some(c)) = (cpu_before, cpu_at_ready, cpu_end) {
        println!(
            "  agent CPU: {:.1} s from the first create to all Ready; {:.2} cores on average \
             while settling for {settle:?}",
            b - a,
            (c - b) / settle.as_secs_f64().max(f64::EPSILON)
        );
    }
    report_logs(&[agent]);
    Ok(())
}

// ---------------------------------------------------------------------------------------

fn usage() -> String {
    format!(
        "usage: federation [SCENARIO...]   (or PINFED_BENCH_SCENARIO=a,b)\n\
         scenarios: {} (default: distribution aggregation takeover)\n\
         needs PINFED_E2E_KUBECONFIG (and PINFED_E2E_TOPOLOGY) of a running topology; \
         see docs/benchmarks.md or run e2e/bench",
        SCENARIOS.join(", ")
    )
}

fn main() -> ExitCode {
    START.get_or_init(Instant::now);
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{}", usage());
        return ExitCode::SUCCESS;
    }
    // `cargo bench` passes --bench (and filters); positional words name scenarios.
    let mut scenarios: Vec<String> = args.into_iter().filter(|a| !a.starts_with('-')).collect();
    if scenarios.is_empty()
        && let Ok(v) = std::env::var("PINFED_BENCH_SCENARIO")
    {
        scenarios = v
            .split([',', ' '])
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
    }
    if scenarios.is_empty() {
        scenarios = SCENARIOS[..3].iter().map(|s| s.to_string()).collect();
    }
    if let Some(bad) = scenarios.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
        eprintln!("unknown scenario {bad:?}\n{}", usage());
        return ExitCode::from(2);
    }
    if std::env::var_os("PINFED_E2E_KUBECONFIG").is_none() {
        eprintln!(
            "PINFED_E2E_KUBECONFIG is not set: the federation benchmarks need a running local \
             topology. Run `e2e/bench [{}]`, which brings one up and takes it down, or \
             `e2e/up clusters/local-3.yaml` (clusters/bench.yaml for scale10k and agent1k) and export \
             PINFED_E2E_KUBECONFIG=<the printed path> PINFED_E2E_TOPOLOGY=<that file>.",
            SCENARIOS.join("|")
        );
        return ExitCode::from(2);
    }
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        let fed = Fed::connect(Settings::load()?).await?;
        println!(
            "pinfed federation benchmarks, {} ({}); daemon logs in {}",
            unix_date(),
            load_line(),
            fed.s.log_dir.display()
        );
        for s in &scenarios {
            match s.as_str() {
                "distribution" => distribution(&fed).await,
                "aggregation" => aggregation(&fed).await,
                "takeover" => takeover(&fed).await,
                "scale10k" => scale10k(&fed).await,
                "agent1k" => agent1k(&fed).await,
                _ => unreachable!("checked above"),
            }
            .with_context(|| format!("scenario {s}"))?;
        }
        anyhow::Ok(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("federation bench failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn unix_date() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

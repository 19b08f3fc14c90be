//! pinfed-e2e: brings a topology file up as local control planes on 127.0.0.1 and manages
//! them (`up`, `down`, `status`, `stop CLUSTER`, `start CLUSTER`). Called through the
//! scripts in `e2e/`. One etcd serves every cluster under its own key prefix; each
//! cluster gets its own kube-apiserver and controller-manager, and members also get a
//! scheduler and kwok with the fake nodes of their pools. A topology with
//! `peers: {karmada: true}` also gets a Karmada control plane (`karmada`) that joins the
//! same members.
//!
//! One module per component (`etcd`, `apiserver`, `controllers`, `kwok`, `pki`, `karmada`), what runs
//! (`state`), and the commands (`commands`); processes, ports and sampling come from the
//! workspace's test kit (`testkit`).

mod apiserver;
mod commands;
mod controllers;
mod etcd;
mod karmada;
mod kwok;
mod pki;
mod state;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};
use pinfed::topology::Topology;

use crate::state::State;

#[derive(Debug, Parser)]
#[command(
    name = "pinfed-e2e",
    about = "Local multi-cluster Kubernetes control planes for pinfed e2e tests"
)]
struct Cli {
    /// Where clusters keep their data, logs, certificates and kubeconfig.
    #[arg(long, env = "PINFED_E2E_DIR", global = true)]
    state_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Validate a topology file; start nothing.
    Check { file: PathBuf },
    /// Bring a topology up; prints `KUBECONFIG=<path>` as the last line of stdout.
    Up {
        file: PathBuf,
        /// Directory with kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kwok
        /// (default: build or reuse them with e2e/toolchain/build).
        #[arg(long, env = "PINFED_BIN_DIR")]
        bin_dir: Option<PathBuf>,
        /// How long to wait for API servers and nodes to become ready.
        #[arg(long, default_value = "300")]
        timeout_secs: u64,
        /// How many API servers start at once; the next batch starts when these are ready
        /// (a fleet of light members all starting together starves two cores).
        #[arg(long, env = "PINFED_E2E_START_BATCH", default_value = "8", value_parser = clap::value_parser!(u16).range(1..))]
        start_batch: u16,
    },
    /// Stop everything and remove all state.
    Down,
    /// Show what runs: clusters, components, ports, memory.
    Status,
    /// Stop one cluster's API server with its controller-manager and scheduler, keeping
    /// its data (kwok's nodes keep running).
    Stop {
        cluster: String,
        /// Stop only these components of the cluster (e.g. `karmada-controller-manager`);
        /// `start` brings them back.
        #[arg(long = "component")]
        components: Vec<String>,
    },
    /// Start a stopped cluster's API server, then its controller-manager and scheduler
    /// afresh (and anything else of the cluster that does not run).
    Start {
        cluster: String,
        #[arg(long, default_value = "120")]
        timeout_secs: u64,
    },
    /// Print the kubeconfig path of the running topology.
    Kubeconfig,
    /// Print the kwok Node objects of one member as a JSON List (for `kubectl apply -f -`).
    Nodes { file: PathBuf, member: String },
}

fn main() {
    let cli = Cli::parse();
    let dir = cli.state_dir.clone().unwrap_or_else(default_state_dir);
    let result = match cli.command {
        Cmd::Check { file } => load_topology(&file).map(|t| {
            eprintln!("{}: valid ({} members)", file.display(), t.members.len());
        }),
        Cmd::Up {
            file,
            bin_dir,
            timeout_secs,
            start_batch,
        } => run_async(commands::up(
            &dir,
            &file,
            bin_dir,
            Duration::from_secs(timeout_secs),
            usize::from(start_batch),
        )),
        Cmd::Down => commands::down(&dir),
        Cmd::Status => commands::status(&dir),
        Cmd::Stop {
            cluster,
            components,
        } => commands::stop(&dir, &cluster, &components),
        Cmd::Start {
            cluster,
            timeout_secs,
        } => run_async(commands::start(
            &dir,
            &cluster,
            Duration::from_secs(timeout_secs),
        )),
        Cmd::Nodes { file, member } => load_topology(&file).and_then(|t| {
            let known = t
                .members
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            let m = t
                .member(&member)
                .with_context(|| format!("unknown member {member:?}; members: {known}"))?;
            let items: Vec<_> = Topology::nodes(m).iter().map(kwok::node_object).collect();
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items})
                )?
            );
            Ok(())
        }),
        Cmd::Kubeconfig => State::load(&dir).and_then(|s| {
            let s = s.context("nothing is up (no state in the state directory)")?;
            println!("KUBECONFIG={}", s.kubeconfig.display());
            Ok(())
        }),
    };
    if let Err(e) = result {
        eprintln!("e2e: error: {e:#}");
        std::process::exit(1);
    }
}

fn run_async(f: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(f)
}

fn default_state_dir() -> PathBuf {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join("pinfed/e2e")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

struct Progress(Instant);
impl Progress {
    fn say(&self, msg: impl AsRef<str>) {
        eprintln!(
            "[e2e {:>5.1}s] {}",
            self.0.elapsed().as_secs_f64(),
            msg.as_ref()
        );
    }
}

fn load_topology(file: &Path) -> anyhow::Result<Topology> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading topology {}", file.display()))?;
    Ok(Topology::from_yaml(&file.display().to_string(), &text)?)
}

fn marker(dir: &Path) -> String {
    dir.display().to_string()
}

async fn wait_until<F, Fut>(timeout: Duration, what: &str, check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    Ok(testkit::wait::until(timeout, Duration::from_millis(250), what, check).await?)
}

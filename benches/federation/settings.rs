//! What the benchmarks run against and with: the topology, the `pinfed` binary, log
//! directory and limits, from the environment.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use pinfed::topology::Topology;

pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> anyhow::Result<T> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map_err(|_| anyhow!("{name}={v:?} is not a valid value")),
        _ => Ok(default),
    }
}

pub struct Settings {
    pub kubeconfig: PathBuf,
    pub topology_path: String,
    pub topology: Topology,
    pub pinfed: PathBuf,
    pub log_dir: PathBuf,
    /// Extra flags for every `pinfed hub` (PINFED_BENCH_HUB_ARGS, split on whitespace).
    pub hub_args: Vec<String>,
    pub timeout: Duration,
}

impl Settings {
    pub fn load() -> anyhow::Result<Settings> {
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

    pub fn hub_name(&self) -> &str {
        &self.topology.hub.name
    }

    /// Whether member `m` joins in pull mode (its agent pulls from the hub).
    pub fn is_pull(&self, m: &str) -> bool {
        self.topology
            .members
            .iter()
            .any(|t| t.name == m && t.mode == pinfed::api::federation::ClusterMode::Pull)
    }

    /// "push" or "pull", for figures split by mode.
    pub fn mode_of(&self, m: &str) -> &'static str {
        if self.is_pull(m) { "pull" } else { "push" }
    }

    pub fn members(&self) -> Vec<String> {
        self.topology
            .members
            .iter()
            .map(|m| m.name.clone())
            .collect()
    }

    pub fn describe(&self) -> String {
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

//! What the benchmarks run with: the log directory, the hub's extra flags and the
//! timeout, from the environment (the topology and the `pinfed` binary: `testkit`'s
//! federation).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow};

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
    pub log_dir: PathBuf,
    /// Extra flags for every `pinfed hub` (PINFED_BENCH_HUB_ARGS, split on whitespace).
    pub hub_args: Vec<String>,
    pub timeout: Duration,
}

impl Settings {
    pub fn load() -> anyhow::Result<Settings> {
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
            log_dir,
            hub_args,
            timeout: Duration::from_secs(env_or("PINFED_BENCH_TIMEOUT_SECS", 300)?),
        })
    }
}

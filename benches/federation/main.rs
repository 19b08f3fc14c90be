//! Federation benchmarks against a running local topology (see docs/benchmarks.md), one
//! scenario per module.
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
//!   (`clusters/bench.yaml`);
//! - `rollout1k`    — one RuntimeProfile change rolled out over 1,000 PinterestServices at
//!   once (the hub's default canary rollout, agents running): time until every rollout is
//!   Complete, hub writes per workload per stage, hub CPU and memory (`clusters/bench.yaml`);
//! - `compare`      — the same work through pinfed and Karmada on the same members, side
//!   by side (`clusters/compare.yaml`).
//!
//! The topology comes from `PINFED_E2E_KUBECONFIG` (required) and `PINFED_E2E_TOPOLOGY`;
//! `e2e/bench` brings one up, runs the scenarios and takes it down. Hub and agents are
//! started here as child processes of `$PINFED_BIN` (default: the `pinfed` binary of the
//! same cargo profile) and die with this process. Everything is measured from outside:
//! objects on the API servers, timestamps taken when this process receives watch events.

mod agent1k;
mod aggregation;
mod compare;
mod daemon;
mod distribution;
mod fed;
mod heartbeat;
mod helpers;
mod karmada;
mod rollout1k;
mod scale10k;
mod settings;
mod takeover;

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;

use crate::fed::Fed;
use crate::helpers::{START, load_line};
use crate::settings::Settings;

const SCENARIOS: [&str; 8] = [
    "distribution",
    "aggregation",
    "takeover",
    "scale10k",
    "agent1k",
    "rollout1k",
    "compare",
    "heartbeat",
];
pub const LABEL_HUB_NAMESPACE: &str = "federation.pinterest.com/hub-namespace";
pub const LEASE_NAME: &str = "pinfed-hub";

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
             `e2e/up clusters/local-3.yaml` (clusters/bench.yaml for scale10k, agent1k and rollout1k) and export \
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
                "distribution" => distribution::run(&fed).await,
                "aggregation" => aggregation::run(&fed).await,
                "takeover" => takeover::run(&fed).await,
                "scale10k" => scale10k::run(&fed).await,
                "agent1k" => agent1k::run(&fed).await,
                "rollout1k" => rollout1k::run(&fed).await,
                "compare" => compare::run(&fed).await,
                "heartbeat" => heartbeat::run(&fed).await,
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

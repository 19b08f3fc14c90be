//! Scenario agent1k: one `pinfed agent` alone on the first member: memory with 1,000 PinterestServices created in that member, and the time until all are Ready (`clusters/bench.yaml`).

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kube::ResourceExt;

use crate::daemon::{Daemon, report_logs};
use crate::fed::{Fed, condition, service, service_resource};
use crate::helpers::{AbortOnDrop, Dist, create_all, load_line, progress, watch_services};
use crate::settings::env_or;

/// What the watch on the member saw of the PinterestServices.
#[derive(Default)]
struct AgentObs {
    /// First received with a Ready condition True (for the current generation).
    ready: HashMap<String, Instant>,
    /// When the last of them became Ready.
    all_ready: Option<Instant>,
}

pub async fn run(fed: &Fed) -> anyhow::Result<()> {
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
            agent.log_last(40)
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

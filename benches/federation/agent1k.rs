//! Scenario agent1k: one `pinfed agent` alone on the first member: memory with 1,000
//! PinterestServices created in that member, and the time until all are Ready
//! (`clusters/bench.yaml`); by default also 250, 500 and 2,000, each with a fresh agent,
//! for the cost of one more workload.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kube::ResourceExt;

use crate::daemon::{Daemon, report_logs};
use crate::fed::{Fed, condition, service, service_resource};
use crate::helpers::{
    AbortOnDrop, Dist, cpu_by_component, cpu_used_line, create_all, load_line, progress,
    request_counts, wait_for, watch_services,
};
use crate::settings::env_or;

/// What the watch on the member saw of the PinterestServices.
#[derive(Default)]
struct AgentObs {
    /// First received with a Ready condition True (for the current generation).
    ready: HashMap<String, Instant>,
    /// When the last of them became Ready.
    all_ready: Option<Instant>,
}

/// What one run (one fresh agent, `n` PinterestServices) measured.
struct AgentRun {
    n: usize,
    /// VmRSS when all were Ready, and the peak sampled until the end of the settle, in KiB.
    at_ready_kib: u64,
    peak_kib: u64,
    ready_secs: f64,
    /// The same services under a fresh agent process.
    restart: Option<Restart>,
}

pub async fn run(fed: &Fed) -> anyhow::Result<()> {
    // One fresh agent per count, so each figure is that count's and the slope between them
    // is what an extra workload costs.
    let counts: Vec<usize> = std::env::var("PINFED_BENCH_AGENT_SERVICES")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "250,500,1000,2000".into())
        .split(',')
        .map(|c| {
            c.trim()
                .parse()
                .map_err(|_| anyhow::anyhow!("PINFED_BENCH_AGENT_SERVICES: {c:?} is not a count"))
        })
        .collect::<anyhow::Result<_>>()?;
    let concurrency: usize = env_or("PINFED_BENCH_CONCURRENCY", 32)?;
    let settle = Duration::from_secs(env_or("PINFED_BENCH_SETTLE_SECS", 30)?);
    let timeout = Duration::from_secs(env_or("PINFED_BENCH_AGENT_TIMEOUT_SECS", 900)?);
    let member = fed
        .member_names()
        .into_iter()
        .next()
        .context("the topology has no member")?;
    progress(&format!(
        "agent1k: installing the CRDs in {member} (no hub is used)"
    ));
    pinfed::hub::join::install_crds(&fed.client(&member))
        .await
        .with_context(|| format!("installing the CRDs in {member}"))?;
    let mut runs = Vec::new();
    for n in counts {
        runs.push(one_count(fed, &member, n, concurrency, settle, timeout).await?);
    }
    print_model(&runs);
    Ok(())
}

/// A fresh namespace and agent, `n` services until all are Ready; then the namespace is
/// deleted while the agent still runs (it holds their finalizers) and the agent stopped.
async fn one_count(
    fed: &Fed,
    member: &str,
    n: usize,
    concurrency: usize,
    settle: Duration,
    timeout: Duration,
) -> anyhow::Result<AgentRun> {
    let ns = fed.create_namespace_in(member, "bench-agent").await?;
    progress(&format!(
        "agent1k: starting `pinfed agent --cluster-name {member}` (no leader election) for {n}"
    ));
    let mut agent = fed.spawn_agent(member)?;
    let mut result = agent1k_run(fed, member, &ns, &agent, n, concurrency, settle, timeout).await;
    if let Ok(run) = &mut result {
        // The same services under a new agent process (an upgrade, a leader change).
        progress(&format!(
            "agent1k: restarting the agent over the {n} services"
        ));
        drop(agent);
        let client = fed.client(member);
        let requests_before = request_counts(&client, ALL_VERBS).await;
        let cpu_before = cpu_by_component();
        let started = Instant::now();
        agent = fed.spawn_agent(member)?;
        match restart_run(fed, member, n, &agent, started, timeout).await {
            Ok(quiet_after) => {
                let requests = request_counts(&client, ALL_VERBS).await;
                let cpu = cpu_by_component();
                run.restart = Some(print_restart(
                    member,
                    n,
                    quiet_after,
                    &requests_before,
                    &requests,
                    &cpu_before,
                    &cpu,
                ));
            }
            Err(e) => result = Err(e.context("restarting the agent")),
        }
    }
    if let Err(e) = &result {
        eprintln!(
            "agent1k failed: {e:#}\nlast lines of the agent log ({}):\n{}",
            agent.log.display(),
            agent.log_last(40)
        );
    }
    progress(&format!(
        "agent1k: deleting namespace {ns} in {member}, then stopping the agent"
    ));
    let namespaces = Api::<Namespace>::all(fed.client(member));
    match namespaces.delete(&ns, &DeleteParams::background()).await {
        Ok(_) => {
            let gone = wait_for(timeout, &format!("namespace {ns} deleted"), || {
                let namespaces = namespaces.clone();
                let ns = ns.clone();
                async move { matches!(namespaces.get_opt(&ns).await, Ok(None)) }
            })
            .await;
            if let Err(e) = gone {
                progress(&format!("agent1k: {e:#}"));
            }
        }
        Err(e) => progress(&format!("agent1k: deleting namespace {ns}: {e}")),
    }
    drop(agent);
    result
}

/// Verbs counted for a restart (not WATCH: a watch is counted when it ends).
const ALL_VERBS: &[&str] = &["LIST", "GET", "POST", "PUT", "PATCH", "APPLY", "DELETE"];

/// What a restart of the agent over the same services cost its member.
struct Restart {
    quiet_secs: f64,
    lists: f64,
    writes: f64,
    apiserver_cpu: f64,
}

/// Waits for the new agent's `/readyz`, then until it has reconciled at least `n` times and
/// then nothing for 5 s; returns the time from `started` to its last reconcile.
async fn restart_run(
    fed: &Fed,
    member: &str,
    n: usize,
    agent: &Daemon,
    started: Instant,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    agent.wait_http("/readyz", fed.s.timeout).await?;
    let addr = agent.metrics_addr.clone().context("no metrics address")?;
    let mut last = (0.0, started);
    loop {
        let text = testkit::http::get(&format!("http://{addr}/metrics"), Duration::from_secs(5))
            .await?
            .body;
        let total: f64 = text
            .lines()
            .filter(|l| l.starts_with("pinfed_agent_reconciles_total{"))
            .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
            .sum();
        if total != last.0 {
            last = (total, Instant::now());
        } else if total >= n as f64 && last.1.elapsed() >= Duration::from_secs(5) {
            return Ok(last.1 - started);
        }
        if !agent.alive() {
            bail!("the restarted agent exited:\n{}", agent.log_last(30));
        }
        if started.elapsed() > timeout {
            bail!(
                "the restarted agent in {member} reconciled {total} times in {timeout:?}, not yet \
                 {n} and quiet"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn print_restart(
    member: &str,
    n: usize,
    quiet_after: Duration,
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    cpu_before: &BTreeMap<String, f64>,
    cpu: &BTreeMap<String, f64>,
) -> Restart {
    let mut by_verb: BTreeMap<String, f64> = BTreeMap::new();
    let mut by_request: Vec<(f64, &String)> = Vec::new();
    for (key, v) in after {
        let d = v - before.get(key).copied().unwrap_or(0.0);
        if d > 0.0 {
            let verb = key.rsplit_once(' ').map(|x| x.1).unwrap_or(key);
            *by_verb.entry(verb.to_string()).or_default() += d;
            by_request.push((d, key));
        }
    }
    by_request.sort_by(|a, b| b.0.total_cmp(&a.0));
    let get = |v: &str| by_verb.get(v).copied().unwrap_or(0.0);
    let writes = ["POST", "PUT", "PATCH", "APPLY", "DELETE"]
        .iter()
        .map(|v| get(v))
        .sum::<f64>();
    let apiserver = format!("kube-apiserver {member}");
    let apiserver_cpu = cpu.get(&apiserver).copied().unwrap_or(0.0)
        - cpu_before.get(&apiserver).copied().unwrap_or(0.0);
    println!("\n== agent1k: the agent restarted over {n} services ==");
    println!(
        "  new process → last reconcile (then 5 s quiet): {:.1} s",
        quiet_after.as_secs_f64()
    );
    println!(
        "  {member} API server requests until then: {} (set-up and the other controllers \
         of the member included); its CPU {apiserver_cpu:.1} s; all components: {}",
        by_verb
            .iter()
            .map(|(v, d)| format!("{v} {d:.0}"))
            .collect::<Vec<_>>()
            .join(", "),
        cpu_used_line(cpu_before, cpu)
    );
    println!(
        "  most requests: {}",
        by_request
            .iter()
            .take(8)
            .map(|(d, k)| format!("{k} {d:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  per service: {:.2} LISTs, {:.2} writes",
        get("LIST") / n as f64,
        writes / n as f64
    );
    Restart {
        quiet_secs: quiet_after.as_secs_f64(),
        lists: get("LIST"),
        writes,
        apiserver_cpu,
    }
}

/// RSS at all Ready against the count: the least-squares line through the runs.
fn print_model(runs: &[AgentRun]) {
    println!("\n== agent1k: memory per workload ==");
    println!(
        "  services | first create → all Ready | RSS at all Ready | peak RSS | restart: → quiet \
         | LISTs | writes | member API server CPU"
    );
    for r in runs {
        let restart = r
            .restart
            .as_ref()
            .map(|x| {
                format!(
                    "{:>6.1} s | {:>5.0} | {:>6.0} | {:>5.1} s",
                    x.quiet_secs, x.lists, x.writes, x.apiserver_cpu
                )
            })
            .unwrap_or_else(|| "-".into());
        println!(
            "  {:>8} | {:>22.1} s | {:>12.1} MiB | {:>6.1} MiB | {restart}",
            r.n,
            r.ready_secs,
            r.at_ready_kib as f64 / 1024.0,
            r.peak_kib as f64 / 1024.0
        );
    }
    match fit(runs
        .iter()
        .map(|r| (r.n as f64, r.at_ready_kib as f64 * 1024.0)))
    {
        Some((slope, intercept)) => println!(
            "  model (least squares over {} runs): RSS at all Ready ≈ {:.1} MiB + {:.0} bytes × \
             services ({:.1} KiB per service)",
            runs.len(),
            intercept / 1048576.0,
            slope,
            slope / 1024.0
        ),
        None => {
            println!("  model: needs at least two different counts (PINFED_BENCH_AGENT_SERVICES)")
        }
    }
}

/// Slope and intercept of the least-squares line through `points`; None for fewer than two
/// distinct x.
fn fit(points: impl Iterator<Item = (f64, f64)>) -> Option<(f64, f64)> {
    let pts: Vec<(f64, f64)> = points.collect();
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (pts.len() >= 2 && sxx > 0.0).then(|| (sxy / sxx, my - sxy / sxx * mx))
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
) -> anyhow::Result<AgentRun> {
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
        fed.describe()
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
    Ok(AgentRun {
        n,
        at_ready_kib: at_ready.map(|m| m.1).unwrap_or(0),
        peak_kib: peak_rss,
        ready_secs: (all_ready - started).as_secs_f64(),
        restart: None,
    })
}

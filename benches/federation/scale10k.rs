//! Scenario scale10k: hub first sync and memory with 10,000 workloads (`clusters/bench.yaml`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use kube::ResourceExt;

use crate::LABEL_HUB_NAMESPACE;
use crate::daemon::{http_status, report_logs};
use crate::fed::{Fed, condition, service};
use crate::helpers::{
    AbortOnDrop, counts_since, cpu_by_component, cpu_used_line, create_all, load_line, placements,
    progress, raw_write_rates, wait_for, watch_objects, watch_services, write_counts,
};
use crate::settings::env_or;

pub async fn run(fed: &Fed) -> anyhow::Result<()> {
    let n: usize = env_or("PINFED_BENCH_SCALE_WORKLOADS", 10_000)?;
    let concurrency: usize = env_or("PINFED_BENCH_CONCURRENCY", 32)?;
    let settle = Duration::from_secs(env_or("PINFED_BENCH_SETTLE_SECS", 30)?);
    let timeout = Duration::from_secs(env_or("PINFED_BENCH_SCALE_TIMEOUT_SECS", 1800)?);
    // PINFED_BENCH_SCALE_AGENTS=1: an agent in each member, started before the hub (as
    // after a hub restart): the first sync then ends with every workload Ready on the hub
    // (its Deployment expanded by the agent, kwok's pod running, the status reported back).
    let with_agents = env_or::<u8>("PINFED_BENCH_SCALE_AGENTS", 0)? != 0;
    progress("scale10k: joining members (no hub runs while the workloads are created)");
    fed.join_all()?;
    // With agents, the same-run floor first: what the members take for these workloads'
    // Deployments with no pinfed at all (PINFED_BENCH_SCALE_FLOOR=0 skips it).
    let floor = if with_agents && env_or::<u8>("PINFED_BENCH_SCALE_FLOOR", 1)? != 0 {
        Some(native_floor(fed, n, concurrency, timeout).await?)
    } else {
        None
    };
    let ns = fed.create_namespace("bench-10k").await?;
    let hub_api = fed.services(fed.hub_name(), &ns);
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

    // Counters fed by watches: placed on the hub, slices in the members; with agents,
    // Ready on the hub and the agents' Deployments in the members.
    let placed: Arc<Mutex<(BTreeSet<String>, Option<Instant>)>> = Default::default();
    let ready: Arc<Mutex<(BTreeSet<String>, Option<Instant>)>> = Default::default();
    let deployments: Arc<Mutex<BTreeSet<(String, String)>>> = Default::default();
    let slices: Arc<Mutex<BTreeSet<(String, String)>>> = Default::default();
    let mut watches = AbortOnDrop(Vec::new());
    for m in fed.member_names() {
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
    if with_agents {
        for m in fed.member_names() {
            let deployments = deployments.clone();
            let member = m.clone();
            let api = kube::Api::namespaced_with(fed.client(&m), &ns, &deployment_resource());
            watches.0.push(watch_objects(api, &m, None, move |o, _| {
                deployments
                    .lock()
                    .unwrap()
                    .insert((o.name_any(), member.clone()));
            }));
        }
    }
    let hub_watch = {
        let (placed, ready) = (placed.clone(), ready.clone());
        watch_services(fed, fed.hub_name(), &ns, None, move |o, at| {
            let status = &o.data["status"];
            if placements(status).is_some_and(|p| !p.is_empty()) {
                let mut p = placed.lock().unwrap();
                if p.0.insert(o.name_any()) && p.0.len() == n {
                    p.1 = Some(at);
                }
            }
            if condition(status, "Ready") == Some("True") {
                let mut r = ready.lock().unwrap();
                if r.0.insert(o.name_any()) && r.0.len() == n {
                    r.1 = Some(at);
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;

    let agents = if with_agents {
        progress("scale10k: starting an agent in each member");
        let agents = fed.spawn_agents()?;
        for a in &agents {
            a.wait_http("/readyz", fed.s.timeout).await?;
        }
        agents
    } else {
        fed.hub_only_agents().await?
    };
    let agents_cpu_before: f64 = agents.iter().filter_map(|a| a.cpu_secs()).sum();
    let writes_before = write_counts(&fed.hub()).await;
    let mut member_writes_before = Vec::new();
    for m in fed.member_names() {
        member_writes_before.push((m.clone(), write_counts(&fed.client(&m)).await));
    }
    let cpu_before = cpu_by_component();
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
            bail!("the hub exited:\n{}", hub.log_last(30));
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
                "scale10k: {:.0?} after start: {} placed, {} slices, {} Deployments, {} Ready, RSS {} MiB",
                started.elapsed(),
                placed.lock().unwrap().0.len(),
                slices.lock().unwrap().len(),
                deployments.lock().unwrap().len(),
                ready.lock().unwrap().0.len(),
                hub.memory_kib().map(|m| m.1 / 1024).unwrap_or(0)
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let writes_at_sync = write_counts(&fed.hub()).await;
    let cpu_at_first_sync = cpu_by_component();
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
    // With agents: every Deployment in the members, then every workload Ready on the hub.
    let mut agents_line = None;
    if with_agents {
        let mut deployments_at = None;
        let mut last = Instant::now();
        loop {
            if let Some((_, rss)) = hub.memory_kib() {
                peak_rss = peak_rss.max(rss);
            }
            if deployments_at.is_none() && deployments.lock().unwrap().len() >= n {
                deployments_at = Some(started.elapsed());
            }
            if ready.lock().unwrap().1.is_some() || started.elapsed() > timeout {
                break;
            }
            if last.elapsed() > Duration::from_secs(10) {
                last = Instant::now();
                progress(&format!(
                    "scale10k: {:.0?} after start: {} Deployments in the members, {} Ready on the hub",
                    started.elapsed(),
                    deployments.lock().unwrap().len(),
                    ready.lock().unwrap().0.len(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let ready_all = ready.lock().unwrap().1.map(|at| at - started);
        let mut member_writes = std::collections::BTreeMap::<String, f64>::new();
        for (m, before) in &member_writes_before {
            for (key, d) in counts_since(before, &write_counts(&fed.client(m)).await) {
                *member_writes.entry(key).or_default() += d;
            }
        }
        let hub_writes = counts_since(&writes_before, &write_counts(&fed.hub()).await);
        let per = |w: &std::collections::BTreeMap<String, f64>| {
            let total: f64 = w.values().sum();
            let rows: Vec<String> = w
                .iter()
                .filter(|(_, v)| **v / n as f64 >= 0.05)
                .map(|(k, v)| format!("{k} {:.2}", v / n as f64))
                .collect();
            format!("{:.2} ({})", total / n as f64, rows.join(", "))
        };
        let agents_cpu: f64 =
            agents.iter().filter_map(|a| a.cpu_secs()).sum::<f64>() - agents_cpu_before;
        let agents_rss: Vec<String> = agents
            .iter()
            .map(|a| {
                a.memory_kib()
                    .map(|m| format!("{:.0}", m.1 as f64 / 1024.0))
                    .unwrap_or_else(|| "?".into())
            })
            .collect();
        let secs = |d: Option<Duration>| {
            d.map(|d| format!("{:.1} s", d.as_secs_f64()))
                .unwrap_or_else(|| "not reached".into())
        };
        let against_floor = match (ready_all, floor.as_ref().and_then(|f| f.1)) {
            (Some(r), Some(f)) => format!(
                ", {:.2}× the floor below ({:.1} s)",
                r.as_secs_f64() / f.as_secs_f64(),
                f.as_secs_f64()
            ),
            _ => String::new(),
        };
        agents_line = Some(format!(
            "  with agents: hub start → every agent's Deployment in the members: {} ({} of {n}); \
             → every workload Ready on the hub (first sync with agents): {} ({} of {n}){against_floor}\n  \
             agents' CPU until then {agents_cpu:.1} s, their RSS {} MiB\n  \
             until every workload Ready: hub API server writes per workload {}\n  \
             members' API servers' writes per workload (every writer, summed over the members; \
             each workload has one slice): {}",
            secs(deployments_at),
            deployments.lock().unwrap().len(),
            secs(ready_all),
            ready.lock().unwrap().0.len(),
            agents_rss.join(" / "),
            per(&hub_writes),
            per(&member_writes),
        ));
    }
    hub_watch.abort();
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
         hub running; then one `pinfed hub` (leader election on) started; {}; {}",
        n as f64 / took.as_secs_f64(),
        if with_agents {
            "an agent in each member, started before the hub"
        } else {
            "no agents"
        },
        fed.describe()
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
    // The hub API server's ceiling, measured in this run: the bench's own creates of the
    // same objects (no hub running). The first sync's writes as a fraction of it.
    let create_rate = n as f64 / took.as_secs_f64();
    let mut sync_writes: Vec<(String, f64)> = counts_since(&writes_before, &writes_at_sync)
        .into_iter()
        .filter(|(_, d)| *d >= 1.0)
        .collect();
    sync_writes.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = sync_writes.iter().map(|(_, d)| d).sum();
    let rate = total / first_sync.as_secs_f64();
    println!(
        "  hub API server writes until first sync: {total:.0} ({:.2} per workload; {rate:.0}/s \
         = {:.0}% of the {create_rate:.0} creates/s the same API server took from the bench \
         before the hub started): {}",
        total / n as f64,
        100.0 * rate / create_rate,
        sync_writes
            .iter()
            .map(|(k, d)| format!("{k} {:.2}", d / n as f64))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  CPU of the topology's processes from hub start to first sync: {}",
        cpu_used_line(&cpu_before, &cpu_at_first_sync)
    );
    if let Some(line) = agents_line {
        println!("{line}");
    }
    if let Some((line, _)) = &floor {
        println!("{line}");
    }
    drop(watches);
    report_logs(&[&hub]);
    drop(agents);
    // The same API server's raw rate for the hub's two kinds of writes on these objects,
    // with the hub stopped: what one placed workload costs there at the least.
    let raw_n: usize = env_or("PINFED_BENCH_RAW_WRITES", 1_000)?;
    drop(hub);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let raw = raw_write_rates(
        &hub_api,
        &names[..raw_n.min(n)],
        concurrency,
        fed.hub_name(),
    )
    .await?;
    // What a first placement must write (docs/federation.md): its ControllerRevision, a
    // create (counted at the rate the bench's creates went in), and one status apply.
    let mut per_workload_ms = 1000.0 / create_rate;
    for (what, rate, cpu_ms) in &raw {
        println!(
            "  raw {what} on the hub API server (hub stopped, {} objects, {concurrency} in \
             flight): {rate:.0}/s, {cpu_ms:.2} ms of its CPU each",
            raw_n.min(n)
        );
        if *what == "status apply" {
            per_workload_ms += 1000.0 / rate;
        }
    }
    let floor_secs = n as f64 * per_workload_ms / 1000.0;
    println!(
        "  floor: one create (the ControllerRevision, at the create rate) + one status apply \
         per workload at these rates = {:.0} workloads/s; {n} take {floor_secs:.0} s on this \
         API server alone; the first sync took {:.0} s, {:.2}× that floor",
        1000.0 / per_workload_ms,
        first_sync.as_secs_f64(),
        first_sync.as_secs_f64() / floor_secs
    );
    println!(
        "  note: the {n} workloads stay in namespace {ns} (deleting them needs a hub to remove \
         finalizers); e2e/bench throws the topology away"
    );
    Ok(())
}

/// apps/v1 Deployments, as the agents write them.
fn deployment_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&())
}

/// The first sync's floor with agents, measured in the same topology before pinfed runs:
/// each of the `n` workloads' Deployment as the agent expands it (the same pod template,
/// its four sidecars included), created straight into the members (round robin, as the
/// hub spreads one-replica services) `concurrency` at a time, until every one is
/// available — the members' API servers, controller-managers, schedulers and kwok doing
/// what they must for these pods, with no pinfed. Its namespaces are then deleted and
/// waited for. Returns the lines to print.
async fn native_floor(
    fed: &Fed,
    n: usize,
    concurrency: usize,
    timeout: Duration,
) -> anyhow::Result<(String, Option<Duration>)> {
    use pinfed::expand::{ExpandInput, expand};
    let svc: pinfed::api::service::PinterestService =
        serde_json::from_value(service("floor-00000", 1, None))?;
    let deployment = expand(&ExpandInput::new(&svc))?
        .into_iter()
        .find(|o| o.types.as_ref().is_some_and(|t| t.kind == "Deployment"))
        .ok_or_else(|| anyhow::anyhow!("the expansion has no Deployment"))?;
    let template = serde_json::to_string(&deployment)?;
    let members = fed.member_names();
    let load_before = load_line();
    let cpu_before = cpu_by_component();
    let mut namespaces = Vec::new();
    let mut per_member: Vec<Vec<serde_json::Value>> = vec![Vec::new(); members.len()];
    for i in 0..n {
        // Each its own name and labels (selectors must not overlap).
        let one: serde_json::Value =
            serde_json::from_str(&template.replace("floor-00000", &format!("floor-{i:05}")))?;
        per_member[i % members.len()].push(one);
    }
    let available: Arc<Mutex<BTreeSet<(String, String)>>> = Default::default();
    let mut watches = AbortOnDrop(Vec::new());
    for m in &members {
        let ns = fed.create_namespace_in(m, "bench-floor").await?;
        let api = kube::Api::namespaced_with(fed.client(m), &ns, &deployment_resource());
        let (available, member) = (available.clone(), m.clone());
        watches.0.push(watch_objects(api, m, None, move |o, _| {
            if o.data["status"]["availableReplicas"].as_i64() >= Some(1) {
                available
                    .lock()
                    .unwrap()
                    .insert((member.clone(), o.name_any()));
            }
        }));
        namespaces.push(ns);
    }
    progress(&format!(
        "scale10k: the floor: {n} Deployments straight into the members, no pinfed"
    ));
    let started = Instant::now();
    let width = concurrency.div_ceil(members.len()).max(1);
    let creates = members
        .iter()
        .zip(&namespaces)
        .zip(per_member)
        .map(|((m, ns), objs)| {
            let api = kube::Api::namespaced_with(fed.client(m), ns, &deployment_resource());
            async move { create_all(&api, objs, None, width, Default::default()).await }
        });
    let created = futures::future::try_join_all(creates).await?;
    let created_in = created.into_iter().max().unwrap_or_default();
    let mut last = Instant::now();
    while available.lock().unwrap().len() < n && started.elapsed() < timeout {
        if last.elapsed() > Duration::from_secs(10) {
            last = Instant::now();
            progress(&format!(
                "scale10k: the floor: {:.0?}: {} of {n} Deployments available",
                started.elapsed(),
                available.lock().unwrap().len()
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let took = started.elapsed();
    let done = available.lock().unwrap().len();
    let cpu = cpu_used_line(&cpu_before, &cpu_by_component());
    let load_after = load_line();
    drop(watches);
    progress("scale10k: the floor: deleting its namespaces (and waiting for its pods to go)");
    for (m, ns) in members.iter().zip(&namespaces) {
        testkit::federation::delete_namespace_and_wait(&fed.client(m), ns, timeout)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let line = format!(
        "  the floor, measured first in the same topology: {n} Deployments (the agent's expansion \
         of these services, sidecars included) created straight into the members, no pinfed: \
         created in {:.1} s, every one available after {} ({done} of {n}); load before {load_before}, \
         after {load_after}\n  CPU of the topology's processes during the floor: {cpu}",
        created_in.as_secs_f64(),
        if done >= n {
            format!("{:.1} s", took.as_secs_f64())
        } else {
            format!("not reached in {:.0} s", took.as_secs_f64())
        },
    );
    progress(line.trim_start());
    Ok((line, (done >= n).then_some(took)))
}

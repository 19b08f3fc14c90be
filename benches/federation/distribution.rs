//! Scenario distribution: hub resource created → slice present in each member, available, and aggregated back on the hub.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use kube::ResourceExt;

use crate::LABEL_HUB_NAMESPACE;
use crate::daemon::report_logs;
use crate::fed::{Fed, condition, create_service, service};
use crate::helpers::{
    AbortOnDrop, Dist, counts_since, create_all, load_line, placements, progress, wait_for,
    watch_services, write_counts,
};
use crate::settings::env_or;

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

pub async fn run(fed: &Fed) -> anyhow::Result<()> {
    let n: usize = env_or("PINFED_BENCH_WORKLOADS", 200)?;
    let replicas: i64 = env_or("PINFED_BENCH_REPLICAS", 3)?;
    let spread = fed.member_names().len() as i64;
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
    // Without agents, a pull member still gets one that only mirrors (`--pull-only`): its
    // only link to the hub, so its slices arrive through it. Started before the hub, so
    // that the hub never reads an agent Lease an earlier scenario left in a push member
    // (it would judge that member's agent lost and fail its workloads over).
    let agents = if with_agents {
        fed.spawn_agents()?
    } else {
        fed.hub_only_agents().await?
    };
    let hub = fed.spawn_hub("bench-hub")?;
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
        let warm = fed.services(fed.hub_name(), &ns);
        create_service(&warm, &service("warm-up", replicas, Some(spread))).await?;
        for m in fed.member_names() {
            let api = fed.services(&m, &ns);
            wait_for(fed.s.timeout, &format!("the warm-up slice in {m}"), || {
                let api = api.clone();
                async move { api.get_opt("warm-up").await.ok().flatten().is_some() }
            })
            .await?;
        }

        let obs = Arc::new(Mutex::new(DistObs::default()));
        let mut watches = AbortOnDrop(Vec::new());
        for m in fed.member_names() {
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
                fed.hub_name(),
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
        let hub_writes_before = write_counts(&fed.client(fed.hub_name())).await;
        let mut member_writes_before = Vec::new();
        for m in fed.member_names() {
            member_writes_before.push((m.clone(), write_counts(&fed.client(&m)).await));
        }
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
        // Every write the members' API servers took until then (the hub's slices, the
        // agents' native objects and slice statuses, kube-controller-manager's and kwok's
        // own), per workload and member, by resource and verb.
        let mut member_writes: std::collections::BTreeMap<String, f64> = Default::default();
        for (m, before) in &member_writes_before {
            for (key, v) in write_counts(&fed.client(m)).await {
                let d = v - before.get(&key).copied().unwrap_or(0.0);
                if d > 0.0 {
                    *member_writes.entry(key).or_default() += d;
                }
            }
        }
        let per = (n * fed.member_names().len()) as f64;
        // The hub API server's writes from every writer (the bench's creates, the hub's
        // revisions and statuses, pull agents' slice statuses and Leases) per workload.
        let hub_writes = counts_since(
            &hub_writes_before,
            &write_counts(&fed.client(fed.hub_name())).await,
        );

        let o = std::mem::take(&mut *obs.lock().unwrap());
        let since_created =
            |nm: &str, at: Instant| o.created.get(nm).map(|c| at.saturating_duration_since(*c));
        let mut slice_lat = Vec::new();
        // The same, split by the member's mode (push: the hub writes into it; pull: the
        // hub writes a MemberSlice on the hub and the member's agent copies it in).
        let mut slice_lat_by_mode: std::collections::BTreeMap<&str, Vec<Duration>> =
            Default::default();
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
                    Some(at) => {
                        slice_lat.extend(since_created(nm, *at));
                        slice_lat_by_mode
                            .entry(fed.mode_of(m))
                            .or_default()
                            .extend(since_created(nm, *at));
                    }
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
        let agg_with_mode: Vec<(&str, Duration)> = o
            .hub_member_ready
            .iter()
            .filter(|(k, _)| names.contains(&k.0))
            .filter_map(|(k, at)| {
                Some((
                    fed.mode_of(&k.1),
                    at.saturating_duration_since(*o.slice_available.get(k)?),
                ))
            })
            .collect();
        let agg: Vec<Duration> = agg_with_mode.iter().map(|(_, d)| *d).collect();
        let pacing_desc = match rate {
            None => format!("burst ({concurrency} concurrent creates, took {took:.1?})"),
            Some(r) => format!("steady {r}/s (took {took:.1?})"),
        };
        println!("\n== distribution: {pacing_desc} ==");
        println!(
            "config: {n} PinterestServices × {replicas} replicas, Divided, spread minClusters \
             {spread}; hub (leader election on) + {} agents; {}",
            agents.len(),
            fed.describe()
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
        if slice_lat_by_mode.len() > 1 {
            for (mode, lat) in &slice_lat_by_mode {
                println!(
                    "    {}",
                    Dist::new(lat.clone()).line(&format!("… to a {mode} member"))
                );
            }
        }
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
        let modes: std::collections::BTreeSet<&str> =
            agg_with_mode.iter().map(|(m, _)| *m).collect();
        if modes.len() > 1 {
            for mode in modes {
                let lat: Vec<Duration> = agg_with_mode
                    .iter()
                    .filter(|(m, _)| *m == mode)
                    .map(|(_, d)| *d)
                    .collect();
                println!(
                    "    {}",
                    Dist::new(lat).line(&format!("… from a {mode} member"))
                );
            }
        }
        if with_agents {
            let total: f64 = member_writes.values().sum();
            let rows: Vec<String> = member_writes
                .iter()
                .filter(|(_, v)| **v / per >= 0.05)
                .map(|(k, v)| format!("{k} {:.2}", v / per))
                .collect();
            println!(
                "  members' API server writes per workload per member until hub Ready: {:.2} ({})",
                total / per,
                rows.join(", ")
            );
        }
        if with_agents {
            let total: f64 = hub_writes.values().sum();
            let rows: Vec<String> = hub_writes
                .iter()
                .filter(|(_, v)| **v / n as f64 >= 0.05)
                .map(|(k, v)| format!("{k} {:.2}", v / n as f64))
                .collect();
            println!(
                "  hub API server writes per workload until hub Ready: {:.2} ({})",
                total / n as f64,
                rows.join(", ")
            );
        }
        if missing > 0 {
            println!("  MISSING: {missing} of {expected} expected slices never seen");
        }
        progress(&format!("distribution ({pacing}): cleaning up {ns}"));
        fed.clean_up(&ns).await;
    }
    if with_agents {
        idle_writes(fed).await;
    }
    report_logs(&[&hub]);
    report_logs(&agents.iter().collect::<Vec<_>>());
    Ok(())
}

/// What keeping the federation alive costs the hub's API server with nothing to do: the
/// writes per identity over an idle window, from the hub's audit log (topologies with
/// `hub.audit: true`, e.g. local-3; reads are not audited). A pull agent renews its Lease
/// and writes its report there; a push member's agent writes nothing on the hub.
async fn idle_writes(fed: &Fed) {
    let Some(log) = fed
        .kubeconfig
        .parent()
        .map(|d| d.join("logs/hub-audit.log"))
    else {
        return;
    };
    if !log.is_file() {
        println!(
            "\n(idle writes: no hub audit log at {}; the topology does not audit)",
            log.display()
        );
        return;
    }
    const WINDOW: Duration = Duration::from_secs(60);
    progress(
        "distribution: measuring the idle writes on the hub API server (60 s, then the audit flush)",
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let from = k8s_openapi::jiff::Timestamp::now();
    tokio::time::sleep(WINDOW).await;
    let to = k8s_openapi::jiff::Timestamp::now();
    // The audit log is written in batches (at most every 30 s by default).
    tokio::time::sleep(Duration::from_secs(35)).await;
    let Ok(text) = std::fs::read_to_string(&log) else {
        return;
    };
    let mut by: std::collections::BTreeMap<(String, String), u64> = Default::default();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if e["stage"] != "ResponseComplete" {
            continue;
        }
        let Some(at) = e["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        else {
            continue;
        };
        if at < from || at >= to {
            continue;
        }
        let user = e["user"]["username"].as_str().unwrap_or("?").to_string();
        let r = &e["objectRef"];
        let resource = match r["subresource"].as_str() {
            Some(sub) => format!("{}/{sub}", r["resource"].as_str().unwrap_or("?")),
            None => r["resource"].as_str().unwrap_or("?").to_string(),
        };
        *by.entry((user, resource)).or_default() += 1;
    }
    let secs = WINDOW.as_secs_f64();
    println!("\n== idle writes on the hub API server ({secs:.0} s, nothing submitted) ==");
    println!(
        "members: {} push, {} pull",
        fed.member_names()
            .iter()
            .filter(|m| !fed.is_pull(m))
            .count(),
        fed.member_names().iter().filter(|m| fed.is_pull(m)).count()
    );
    for ((user, resource), n) in &by {
        println!("  {user:<60} {resource:<28} {:.2}/s", *n as f64 / secs);
    }
}

//! Scenario aggregation: slice status written in a member → the hub's `status.clusters[]`.

use kube::api::{Patch, PatchParams};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use kube::ResourceExt;

use crate::LABEL_HUB_NAMESPACE;
use crate::daemon::report_logs;
use crate::fed::{Fed, service};
use crate::helpers::{
    AbortOnDrop, Dist, create_all, load_line, progress, wait_for, watch_services,
};
use crate::settings::env_or;

pub async fn run(fed: &Fed) -> anyhow::Result<()> {
    let n: usize = env_or("PINFED_BENCH_AGG_WORKLOADS", 100)?;
    let replicas: i64 = env_or("PINFED_BENCH_REPLICAS", 3)?;
    let rate: f64 = env_or("PINFED_BENCH_AGG_RATE", 20.0)?;
    let rounds: usize = env_or("PINFED_BENCH_AGG_ROUNDS", 2)?;
    let spread = fed.member_names().len() as i64;

    progress(
        "aggregation: joining members and starting the hub (no agents: we write slice status)",
    );
    fed.join_all()?;
    // A pull member's slices reach it and their status reaches the hub only through its
    // agent: run it mirroring only (--pull-only), so it expands nothing and the bench
    // writes the status there as for the others. Before the hub: this also removes the
    // agent Leases an earlier scenario left in the push members, which the hub would
    // otherwise read as agents lost (failing every workload over to the pull member).
    let pull_agents = fed.hub_only_agents().await?;
    let hub = fed.spawn_hub("bench-hub")?;
    hub.wait_http("/readyz", fed.s.timeout).await?;
    fed.members_ready().await?;
    let ns = fed.create_namespace("bench-agg").await?;
    let hub_api = fed.services(fed.hub_name(), &ns);

    // (workload, member) → slice generation and replicas, from the members.
    type Slices = HashMap<(String, String), (i64, i64)>;
    let slices: Arc<Mutex<Slices>> = Default::default();
    // (workload, member) → the hub's clusters[] availableReplicas, each change with when.
    type Seen = HashMap<(String, String), Vec<(Instant, Option<i64>)>>;
    let seen: Arc<Mutex<Seen>> = Default::default();
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
            fed.hub_name(),
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
         no agents but {} pull agent(s) mirroring only (the bench writes each slice's status \
         as an agent would); {}",
        keys.len(),
        pull_agents.len(),
        fed.describe()
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
        for mode in ["push", "pull"] {
            let of_mode: Vec<Duration> = patched
                .iter()
                .filter(|(k, _, _)| fed.mode_of(&k.1) == mode)
                .filter_map(|(k, at, v)| latency(&s, k, *at, *v))
                .collect();
            if !of_mode.is_empty() && of_mode.len() < lat.len() {
                println!(
                    "    {}",
                    Dist::new(of_mode).line(&format!("… from {mode} members"))
                );
            }
        }
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
    drop(pull_agents);
    progress(&format!("aggregation: cleaning up {ns}"));
    fed.clean_up(&ns).await;
    report_logs(&[&hub]);
    Ok(())
}

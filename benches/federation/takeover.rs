//! Scenario takeover: SIGKILL of the leading `pinfed hub` → the standby holds the Lease, and a workload created right after the kill gets its slices.

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kube::ResourceExt;

use crate::daemon::{Daemon, report_logs};
use crate::fed::{Fed, create_service, service};
use crate::helpers::{AbortOnDrop, Dist, load_line, progress, wait_for, watch_services};
use crate::settings::env_or;
use crate::{LABEL_HUB_NAMESPACE, LEASE_NAME};

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

pub async fn run(fed: &Fed) -> anyhow::Result<()> {
    let rounds: usize = env_or("PINFED_BENCH_TAKEOVER_ROUNDS", 3)?;
    let term_rounds: usize = env_or("PINFED_BENCH_TAKEOVER_TERM_ROUNDS", 3)?;
    // The hubs' Lease: a SIGKILLed leader is replaced within one lease at most.
    let lease_secs: u64 = env_or("PINFED_BENCH_LEASE_SECS", 2)?;
    let hub_args = ["--lease-duration-secs".to_string(), lease_secs.to_string()];
    let lease_ns: String = env_or("PINFED_BENCH_LEASE_NAMESPACE", "pinfed-system".to_string())?;
    let replicas: i64 = env_or("PINFED_BENCH_REPLICAS", 3)?;
    let spread = fed.member_names().len() as i64;
    progress("takeover: joining members, starting two hubs with leader election");
    fed.join_all()?;
    let _agents = fed.hub_only_agents().await?;
    let leases: Api<Lease> = Api::namespaced(fed.hub(), &lease_ns);
    let ids = ["bench-hub-a", "bench-hub-b"];
    let mut hubs: Vec<Option<Daemon>> = vec![Some(fed.spawn_hub_with(ids[0], &hub_args)?), None];
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
    hubs[1] = Some(fed.spawn_hub_with(ids[1], &hub_args)?);
    hubs[1]
        .as_ref()
        .unwrap()
        .wait_http("/healthz", fed.s.timeout)
        .await?;
    fed.members_ready().await?;
    let ns = fed.create_namespace("bench-takeover").await?;
    let hub_api = fed.services(fed.hub_name(), &ns);
    create_service(&hub_api, &service("warm-up", replicas, Some(spread))).await?;
    for m in fed.member_names() {
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
        "config: two `pinfed hub` processes, Lease {lease_ns}/{LEASE_NAME} of {lease_secs} s; \
         the leader is killed with SIGKILL ({rounds} rounds) and then SIGTERM ({term_rounds} \
         rounds); after each kill a \
         PinterestService × {replicas} replicas (spread {spread}) is created at once; {}",
        fed.describe()
    );
    let mut lease_times = Vec::new();
    let mut slice_times = Vec::new();
    let mut term_lease_times = Vec::new();
    let mut term_slice_times = Vec::new();
    let mut leader = 0usize;
    for round in 0..rounds + term_rounds {
        let graceful = round >= rounds;
        let standby = 1 - leader;
        let (holder, renewed) = lease_holder(&leases).await.context("no Lease holder")?;
        if holder != ids[leader] {
            bail!("expected {} to hold the Lease, found {holder}", ids[leader]);
        }
        let name = format!("after-kill-{round}");
        // Slices of the new workload, as they appear.
        let seen: Arc<Mutex<HashMap<String, Instant>>> = Default::default();
        let mut watches = AbortOnDrop(Vec::new());
        for m in fed.member_names() {
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
        if graceful {
            term_lease_times.push(acquired);
            term_slice_times.push(last_slice - killed);
        } else {
            lease_times.push(acquired);
            slice_times.push(last_slice - killed);
        }
        drop(old);
        if round + 1 < rounds + term_rounds {
            // The stopped hub comes back as the new standby.
            let h = fed.spawn_hub_with(ids[leader], &hub_args)?;
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
    println!(
        "  {}",
        Dist::new(term_lease_times).line("SIGTERM → standby holds the Lease")
    );
    println!(
        "  {}",
        Dist::new(term_slice_times).line("SIGTERM → workload created right after has every slice")
    );
    println!("load: {}", load_line());
    progress(&format!("takeover: cleaning up {ns}"));
    fed.clean_up(&ns).await;
    let running: Vec<&Daemon> = hubs.iter().flatten().collect();
    report_logs(&running);
    Ok(())
}

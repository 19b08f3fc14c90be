//! Scenario heartbeat: what each member costs the hub while nothing else happens (issue 40
//! item 2: heartbeats and capacity reads must not grow the hub's cost per member beyond a
//! stated figure). Joins every member, starts the hub, times it to every MemberCluster
//! Ready (liveness and capacity read), then measures an idle window: the hub's CPU and
//! RSS, the writes it makes on the hub's API server and the requests it makes on the
//! members' API servers, each per member.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::Api;
use pinfed::api::common::ConditionStatus;
use pinfed::api::federation::MemberCluster;

use crate::daemon::report_logs;
use crate::fed::Fed;
use crate::helpers::{counts_since, load_line, progress, request_counts, wait_for, write_counts};
use crate::settings::env_or;

/// Every verb a client can send, for the members' side of the cost.
const ALL_VERBS: [&str; 9] = [
    "GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "APPLY", "DELETE", "CONNECT",
];

pub async fn run(fed: &Fed) -> anyhow::Result<()> {
    let idle = Duration::from_secs(env_or("PINFED_BENCH_IDLE_SECS", 60)?);
    let members = fed.member_names();
    let n = members.len();
    println!("\n## heartbeat: the hub's cost per member, idle ({n} members)");
    let t = Instant::now();
    progress(&format!("heartbeat: joining {n} members"));
    fed.join_all()?;
    println!("join of every member: {:.1?}", t.elapsed());
    let _agents = fed.hub_only_agents().await?;

    // What the API servers do on their own (their leases, the hub's controller-manager),
    // measured before the hub starts and taken off the idle window's figures.
    let base_secs = idle.min(Duration::from_secs(30));
    progress(&format!(
        "heartbeat: baseline of {base_secs:?} without a hub"
    ));
    let (b_hub0, b_mem0) = (
        write_counts(&fed.hub()).await,
        members_requests(fed, &members).await,
    );
    tokio::time::sleep(base_secs).await;
    let base_hub = counts_since(&b_hub0, &write_counts(&fed.hub()).await);
    let base_mem = counts_since(&b_mem0, &members_requests(fed, &members).await);

    let started = k8s_openapi::jiff::Timestamp::now().as_second();
    let hub = fed.spawn_hub("hub-heartbeat")?;
    let t = Instant::now();
    ready_since(fed, started).await?;
    println!("hub start → every MemberCluster Ready: {:.1?}", t.elapsed());
    // Past the first reads (watches listing, the first capacity report) into steady state.
    tokio::time::sleep(Duration::from_secs(10)).await;

    progress(&format!("heartbeat: idle window of {idle:?}"));
    let hub_writes0 = write_counts(&fed.hub()).await;
    let member_reqs0 = members_requests(fed, &members).await;
    let cpu0 = hub.cpu_secs().unwrap_or(0.0);
    let t = Instant::now();
    tokio::time::sleep(idle).await;
    let secs = t.elapsed().as_secs_f64();
    let cpu = hub.cpu_secs().unwrap_or(0.0) - cpu0;
    let scale = secs / base_secs.as_secs_f64();
    let hub_writes = less(
        counts_since(&hub_writes0, &write_counts(&fed.hub()).await),
        &base_hub,
        scale,
    );
    let member_reqs = less(
        counts_since(&member_reqs0, &members_requests(fed, &members).await),
        &base_mem,
        scale,
    );
    let (peak_kib, rss_kib) = hub.memory_kib().unwrap_or_default();

    let per_member_min = |v: f64| v / n as f64 / secs * 60.0;
    println!(
        "| {n} members, idle {secs:.0} s (the API servers' own requests without a hub taken off) | in all | per member |"
    );
    println!("|---|---|---|");
    println!(
        "| hub CPU | {:.3} cores | {:.2} ms/s |",
        cpu / secs,
        cpu / secs / n as f64 * 1000.0
    );
    println!(
        "| hub RSS (peak) | {} MiB ({} MiB) | {:.2} MiB |",
        rss_kib >> 10,
        peak_kib >> 10,
        (rss_kib >> 10) as f64 / n as f64
    );
    let total = |m: &BTreeMap<String, f64>| m.values().sum::<f64>();
    println!(
        "| writes on the hub's API server | {:.0}/min | {:.2}/min |",
        total(&hub_writes) / secs * 60.0,
        per_member_min(total(&hub_writes))
    );
    println!(
        "| requests on the members' API servers | {:.0}/min | {:.2}/min |",
        total(&member_reqs) / secs * 60.0,
        per_member_min(total(&member_reqs))
    );
    for (what, counts) in [("hub", &hub_writes), ("members", &member_reqs)] {
        let mut rows: Vec<_> = counts.iter().filter(|(_, v)| **v > 0.0).collect();
        rows.sort_by(|a, b| b.1.total_cmp(a.1));
        let rows: Vec<String> = rows
            .iter()
            .take(6)
            .map(|(k, v)| format!("{k} {:.2}", per_member_min(**v)))
            .collect();
        println!("  {what}, per member per minute: {}", rows.join(", "));
    }
    println!("  {}", load_line());
    report_logs(&[&hub]);
    Ok(())
}

/// Waits until every MemberCluster is Ready with a heartbeat recorded at or after `since`
/// (Unix seconds): written by the hub just started, not left by an earlier one.
async fn ready_since(fed: &Fed, since: i64) -> anyhow::Result<()> {
    let api: Api<MemberCluster> = Api::all(fed.hub());
    let want = fed.member_names().len();
    wait_for(
        fed.s.timeout,
        "every MemberCluster Ready, heartbeat by this hub",
        || {
            let api = api.clone();
            async move {
                let Ok(list) = api.list(&Default::default()).await else {
                    return false;
                };
                let fresh = list
                    .items
                    .iter()
                    .filter_map(|m| m.status.as_ref())
                    .filter(|s| {
                        s.conditions
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.status == ConditionStatus::True)
                            && s.last_heartbeat_time
                                .as_ref()
                                .is_some_and(|t| t.0.as_second() >= since)
                    });
                fresh.count() >= want
            }
        },
    )
    .await
}

/// Requests of every verb on every member's API server, summed by resource and verb. The
/// benchmark's own GETs of `/metrics` are not counted (`apiserver_request_total` has no
/// resource for them).
async fn members_requests(fed: &Fed, members: &[String]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for m in members {
        for (k, v) in request_counts(&fed.client(m), &ALL_VERBS).await {
            *out.entry(k).or_default() += v;
        }
    }
    out
}

/// `counts` less `base` scaled to the same window, never below 0.
fn less(
    counts: BTreeMap<String, f64>,
    base: &BTreeMap<String, f64>,
    scale: f64,
) -> BTreeMap<String, f64> {
    counts
        .into_iter()
        .map(|(k, v)| {
            let b = base.get(&k).copied().unwrap_or(0.0) * scale;
            (k, (v - b).max(0.0))
        })
        .collect()
}

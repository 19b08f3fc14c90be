//! Scenario compare: the same work through pinfed and through Karmada v1.18.2 on the same
//! members in one run (`clusters/compare.yaml`: the hub, a Karmada control plane beside
//! it, light members joined to both in push mode). Each side gets workloads whose
//! replicas are divided over every member, one replica per member:
//!
//! - pinfed: a PinterestService on the hub (spread over all members); the hub writes a
//!   slice into each member, whose agent expands it into a Deployment (and its PDB);
//! - Karmada: a Deployment on Karmada's API server, selected by one PropagationPolicy per
//!   namespace (Divided, Weighted 1:1 over all members); Karmada writes a
//!   ResourceBinding, a Work per member, and the Deployment into each member.
//!
//! Figures, per side: create returned → the Deployment present in each member (a burst
//! and a steady rate); a member Deployment's status written → the hub-side status shows
//! it (pinfed: the PinterestService's `status.clusters[]` entry; Karmada: the Deployment's
//! aggregated `status.availableReplicas`); the first sync of many workloads after the
//! controllers start (pinfed hub vs karmada-controller-manager + karmada-scheduler) until
//! every workload has its Deployment in every member, with the controllers' memory and
//! CPU; and every API server write per workload (`apiserver_request_total`), so what each
//! side writes is on the table. Sides run one after the other; both stay up throughout.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};
use testkit::Sample;

use crate::daemon::{Daemon, report_logs};
use crate::fed::{Fed, create_service, service};
use crate::helpers::{
    AbortOnDrop, Dist, create_all, fmt_ms, load_line, progress, watch_objects, write_counts,
};
use crate::karmada::{self, Karmada, deployment};
use crate::settings::env_or;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Side {
    Pinfed,
    Karmada,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Pinfed => "pinfed",
            Side::Karmada => "Karmada",
        }
    }
}

/// The idle window over which the background writes are measured.
const IDLE_WINDOW: Duration = Duration::from_secs(10);

/// (workload, member) → when its Deployment was first seen in the member, and its name.
type Seen = Arc<Mutex<HashMap<(String, String), (Instant, String)>>>;

struct Bench<'a> {
    fed: &'a Fed,
    k: &'a Karmada,
    members: Vec<String>,
    /// One replica per member.
    replicas: i64,
}

/// What one distribution run measured.
struct Spread {
    ns: String,
    names: Vec<String>,
    /// create returned → Deployment present, per (workload, member).
    each: Dist,
    /// create returned → the last member's Deployment present, per workload.
    all: Dist,
    missing: usize,
    took: Duration,
    /// The Deployment's name in each member, for the status phase.
    deployments: HashMap<(String, String), String>,
    /// API server writes per workload, by API server and resource.
    writes: BTreeMap<(String, String), f64>,
    load: String,
}

/// What a first sync measured.
struct Sync {
    n: usize,
    /// start → every workload has its Deployment in every member.
    took: Option<Duration>,
    done: usize,
    /// RSS at the end, peak sampled RSS, CPU seconds from the start to the end.
    rss_mib: u64,
    peak_mib: u64,
    cpu_secs: f64,
    load: String,
}

pub async fn run(fed: &Fed) -> anyhow::Result<()> {
    let n: usize = env_or("PINFED_BENCH_WORKLOADS", 200)?;
    let rate: f64 = env_or("PINFED_BENCH_RATE", 20.0)?;
    let concurrency: usize = env_or("PINFED_BENCH_CONCURRENCY", 32)?;
    let sync_n: usize = env_or("PINFED_BENCH_COMPARE_SYNC_WORKLOADS", 10_000)?;
    let sync_timeout = Duration::from_secs(env_or("PINFED_BENCH_SCALE_TIMEOUT_SECS", 1800)?);
    let k = Karmada::connect(fed).await?;
    let members = fed.member_names();
    let b = Bench {
        fed,
        k: &k,
        replicas: members.len() as i64,
        members,
    };

    progress("compare: joining members to the hub, starting the hub and one agent per member");
    fed.join_all()?;
    let mut hub = Some(fed.spawn_hub("bench-hub")?);
    let agents = fed.spawn_agents()?;
    hub.as_ref()
        .unwrap()
        .wait_http("/readyz", fed.s.timeout)
        .await?;
    for a in &agents {
        a.wait_http("/readyz", fed.s.timeout).await?;
    }
    fed.members_ready().await?;
    k.clusters_ready(&b.members, fed.s.timeout).await?;
    let load_start = load_line();

    let mut spreads: BTreeMap<(&str, Side), Spread> = BTreeMap::new();
    for (pacing, r) in [("burst", None), ("steady", Some(rate))] {
        for side in [Side::Pinfed, Side::Karmada] {
            let s = b.distribute(side, r, n, concurrency).await?;
            print_spread(side, r, concurrency, &s);
            spreads.insert((pacing, side), s);
        }
    }

    let mut status: BTreeMap<Side, Dist> = BTreeMap::new();
    for side in [Side::Pinfed, Side::Karmada] {
        let s = &spreads[&("steady", side)];
        let d = b.status(side, s, rate).await?;
        println!(
            "  {}: {}",
            side.name(),
            d.line("member Deployment status written → hub-side status shows it")
        );
        status.insert(side, d);
    }

    let mut syncs: BTreeMap<Side, Sync> = BTreeMap::new();
    {
        // pinfed: the hub stops; the workloads are created; the hub starts. The agents
        // keep running (they are the members' side, as Karmada's members run nothing).
        drop(hub.take());
        let s = b
            .first_sync(
                Side::Pinfed,
                sync_n,
                concurrency,
                sync_timeout,
                &mut hub,
                &agents,
            )
            .await?;
        print_sync(Side::Pinfed, &s);
        syncs.insert(Side::Pinfed, s);
        k.stop_controllers()?;
        let s = b
            .first_sync(
                Side::Karmada,
                sync_n,
                concurrency,
                sync_timeout,
                &mut None,
                &[],
            )
            .await?;
        print_sync(Side::Karmada, &s);
        syncs.insert(Side::Karmada, s);
    }

    print_table(&b, n, rate, &spreads, &status, &syncs, &load_start);
    if let Some(h) = &hub {
        report_logs(&[h]);
    }
    report_logs(&agents.iter().collect::<Vec<_>>());
    Ok(())
}

impl Bench<'_> {
    fn workloads(&self, side: Side, ns: &str) -> Api<DynamicObject> {
        match side {
            Side::Pinfed => self.fed.services(self.fed.hub_name(), ns),
            Side::Karmada => self.k.deployments(ns),
        }
    }

    fn workload(&self, side: Side, name: &str) -> serde_json::Value {
        match side {
            Side::Pinfed => service(name, self.replicas, Some(self.members.len() as i64)),
            Side::Karmada => deployment(name, self.replicas),
        }
    }

    /// A fresh namespace on the hub side (with Karmada's PropagationPolicy in it).
    async fn namespace(&self, side: Side, prefix: &str) -> anyhow::Result<String> {
        match side {
            Side::Pinfed => self.fed.create_namespace(prefix).await,
            Side::Karmada => {
                let name = testkit::federation::create_namespace(
                    &self.k.client,
                    prefix,
                    "pinfed.dev/bench",
                )
                .await
                .context("on Karmada")?;
                self.k.apply_policy(&name, &self.members).await?;
                Ok(name)
            }
        }
    }

    /// Watches the Deployments of `ns` in every member (pinfed's by their workload label).
    fn watch_members(&self, side: Side, ns: &str, seen: &Seen) -> AbortOnDrop {
        let mut watches = AbortOnDrop(Vec::new());
        for m in &self.members {
            let api = Api::namespaced_with(self.fed.client(m), ns, &karmada::deployment_resource());
            let labels = match side {
                Side::Pinfed => Some("app.kubernetes.io/managed-by=pinfed".to_string()),
                Side::Karmada => None,
            };
            let seen = seen.clone();
            let member = m.clone();
            watches.0.push(watch_objects(api, m, labels, move |o, at| {
                let workload = match side {
                    Side::Pinfed => o.labels().get("pinterest.com/workload").cloned(),
                    Side::Karmada => Some(o.name_any()),
                };
                if let Some(w) = workload {
                    seen.lock()
                        .unwrap()
                        .entry((w, member.clone()))
                        .or_insert((at, o.name_any()));
                }
            }));
        }
        watches
    }

    /// Every API server's writes so far, by API server ("hub", "karmada", "members") and
    /// `resource[/subresource] VERB`.
    async fn writes(&self) -> BTreeMap<(String, String), f64> {
        let mut out = BTreeMap::new();
        let mut servers: Vec<(&str, Client)> =
            vec![("hub", self.fed.hub()), ("karmada", self.k.client.clone())];
        for m in &self.members {
            servers.push(("members", self.fed.client(m)));
        }
        for (role, client) in servers {
            for (key, v) in write_counts(&client).await {
                *out.entry((role.to_string(), key)).or_default() += v;
            }
        }
        out
    }

    async fn distribute(
        &self,
        side: Side,
        rate: Option<f64>,
        n: usize,
        concurrency: usize,
    ) -> anyhow::Result<Spread> {
        let ns = self.namespace(side, "cmp-dist").await?;
        let seen: Seen = Default::default();
        let watches = self.watch_members(side, &ns, &seen);
        let api = self.workloads(side, &ns);
        let all_seen = |names: &[String]| {
            let s = seen.lock().unwrap();
            names.iter().all(|w| {
                self.members
                    .iter()
                    .all(|m| s.contains_key(&(w.clone(), m.clone())))
            })
        };
        // A warm-up workload first: the namespace's first arrival in each member is not
        // in the figures.
        create_service(&api, &self.workload(side, "warm-up")).await?;
        let warm = ["warm-up".to_string()];
        let start = Instant::now();
        while !all_seen(&warm) {
            anyhow::ensure!(
                start.elapsed() < self.fed.s.timeout,
                "{}: the warm-up workload never reached every member",
                side.name()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;

        let names: Vec<String> = (0..n).map(|i| format!("w-{i:04}")).collect();
        let objs = names.iter().map(|nm| self.workload(side, nm)).collect();
        let created = Arc::new(Mutex::new(HashMap::new()));
        progress(&format!(
            "compare: {} {}: creating {n} workloads in {ns}",
            side.name(),
            if rate.is_some() { "steady" } else { "burst" }
        ));
        // Both federations write in the background (heartbeats, leases, cluster status):
        // measured over 10 idle seconds and taken out of the per-workload figures.
        let idle_from = self.writes().await;
        tokio::time::sleep(IDLE_WINDOW).await;
        let before = self.writes().await;
        let counted_from = Instant::now();
        let load_before = load_line();
        let took = create_all(&api, objs, rate, concurrency, created.clone()).await?;
        let start = Instant::now();
        let mut last = Instant::now();
        while !all_seen(&names) && start.elapsed() < self.fed.s.timeout {
            if last.elapsed() > Duration::from_secs(10) {
                last = Instant::now();
                progress(&format!(
                    "compare: {}: {} of {} Deployments in members",
                    side.name(),
                    seen.lock().unwrap().len(),
                    (n + 1) * self.members.len()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Status write-backs follow the objects; let them land before counting writes.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let after = self.writes().await;
        let counted = counted_from.elapsed().as_secs_f64() / IDLE_WINDOW.as_secs_f64();
        let load = format!("before {load_before}; after {}", load_line());
        drop(watches);

        let created = created.lock().unwrap().clone();
        let s = seen.lock().unwrap().clone();
        let mut each = Vec::new();
        let mut all = Vec::new();
        let mut missing = 0;
        let mut deployments = HashMap::new();
        for w in &names {
            let Some(c) = created.get(w) else { continue };
            let mut last = Some(*c);
            for m in &self.members {
                match s.get(&(w.clone(), m.clone())) {
                    Some((at, name)) => {
                        each.push(at.saturating_duration_since(*c));
                        last = last.map(|l| l.max(*at));
                        deployments.insert((w.clone(), m.clone()), name.clone());
                    }
                    None => {
                        missing += 1;
                        last = None;
                    }
                }
            }
            if let Some(l) = last {
                all.push(l.saturating_duration_since(*c));
            }
        }
        let at = |m: &BTreeMap<(String, String), f64>, k: &(String, String)| {
            m.get(k).copied().unwrap_or(0.0)
        };
        let writes = after
            .iter()
            .map(|(k, v)| {
                let idle = at(&before, k) - at(&idle_from, k);
                let busy = v - at(&before, k) - idle * counted;
                (k.clone(), busy / n as f64)
            })
            .filter(|(_, v)| *v >= 0.05)
            .collect();
        Ok(Spread {
            ns,
            names,
            each: Dist::new(each),
            all: Dist::new(all),
            missing,
            took,
            deployments,
            writes,
            load,
        })
    }

    /// For each workload of `s`, in turn at `rate`/s: one member's Deployment (member
    /// i mod members) gets a status with every replica available; timed until the hub
    /// side shows that member's replicas available.
    async fn status(&self, side: Side, s: &Spread, rate: f64) -> anyhow::Result<Dist> {
        progress(&format!(
            "compare: {}: writing {} member Deployment statuses at {rate}/s",
            side.name(),
            s.names.len()
        ));
        let shown: Arc<Mutex<HashMap<String, Instant>>> = Default::default();
        let target: HashMap<String, String> = s
            .names
            .iter()
            .enumerate()
            .map(|(i, w)| (w.clone(), self.members[i % self.members.len()].clone()))
            .collect();
        let watch = {
            let shown = shown.clone();
            let target = target.clone();
            let api = self.workloads(side, &s.ns);
            watch_objects(api, side.name(), None, move |o, at| {
                let w = o.name_any();
                let Some(m) = target.get(&w) else { return };
                let st = &o.data["status"];
                let available = match side {
                    Side::Pinfed => st["clusters"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|c| c["cluster"] == m.as_str())
                        .and_then(|c| c["availableReplicas"].as_i64())
                        .unwrap_or(0),
                    Side::Karmada => st["availableReplicas"].as_i64().unwrap_or(0),
                };
                if available > 0 {
                    shown.lock().unwrap().entry(w).or_insert(at);
                }
            })
        };
        let _watch = AbortOnDrop(vec![watch]);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let already = shown.lock().unwrap().len();
        anyhow::ensure!(
            already == 0,
            "{}: {already} workloads show available replicas before any status was written",
            side.name()
        );

        let written: Arc<Mutex<HashMap<String, Instant>>> = Default::default();
        let start = Instant::now();
        let writes = s.names.iter().enumerate().map(|(i, w)| {
            let m = target[w].clone();
            let name = s.deployments.get(&(w.clone(), m.clone())).cloned();
            let client = self.fed.client(&m);
            let ns = s.ns.clone();
            let written = written.clone();
            let w = w.clone();
            async move {
                tokio::time::sleep_until(
                    tokio::time::Instant::from_std(start)
                        + Duration::from_secs_f64(i as f64 / rate),
                )
                .await;
                let Some(name) = name else {
                    return anyhow::Ok(());
                };
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client, &ns, &karmada::deployment_resource());
                let d = api.get(&name).await?;
                let replicas = d.data["spec"]["replicas"].as_i64().unwrap_or(1);
                let status = serde_json::json!({"status": {
                    "observedGeneration": d.metadata.generation,
                    "replicas": replicas, "updatedReplicas": replicas,
                    "readyReplicas": replicas, "availableReplicas": replicas,
                    "conditions": [{"type": "Available", "status": "True",
                                    "reason": "MinimumReplicasAvailable",
                                    "message": "written by the compare benchmark"}]}});
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .with_context(|| format!("status of {name} in {m}"))?;
                written.lock().unwrap().insert(w, Instant::now());
                anyhow::Ok(())
            }
        });
        futures::future::try_join_all(writes).await?;
        let deadline = Instant::now() + self.fed.s.timeout;
        while shown.lock().unwrap().len() < written.lock().unwrap().len()
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let written = written.lock().unwrap().clone();
        let shown = shown.lock().unwrap().clone();
        let missing = written.keys().filter(|w| !shown.contains_key(*w)).count();
        if missing > 0 {
            println!(
                "  {}: {missing} of {} status writes never showed on the hub side",
                side.name(),
                written.len()
            );
        }
        Ok(Dist::new(written.iter().filter_map(|(w, at)| {
            shown.get(w).map(|s| s.saturating_duration_since(*at))
        })))
    }

    /// Creates `n` workloads while `side`'s controllers are stopped, starts them and
    /// times until every workload has its Deployment in every member.
    async fn first_sync(
        &self,
        side: Side,
        n: usize,
        concurrency: usize,
        timeout: Duration,
        hub: &mut Option<Daemon>,
        agents: &[Daemon],
    ) -> anyhow::Result<Sync> {
        let ns = self.namespace(side, "cmp-sync").await?;
        let api = self.workloads(side, &ns);
        let names: Vec<String> = (0..n).map(|i| format!("s-{i:05}")).collect();
        let objs = names.iter().map(|nm| self.workload(side, nm)).collect();
        progress(&format!(
            "compare: {} first sync: creating {n} workloads in {ns} with its controllers stopped",
            side.name()
        ));
        let took = create_all(&api, objs, None, concurrency, Default::default()).await?;
        progress(&format!(
            "compare: created in {took:.1?} ({:.0}/s)",
            n as f64 / took.as_secs_f64()
        ));
        let seen: Seen = Default::default();
        let _watches = self.watch_members(side, &ns, &seen);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let want = n * self.members.len();
        let load_before = load_line();
        let started = Instant::now();
        match side {
            Side::Pinfed => *hub = Some(self.fed.spawn_hub("bench-hub")?),
            Side::Karmada => self.k.start_controllers()?,
        }
        let agents_cpu0: f64 = agents.iter().filter_map(|a| a.cpu_secs()).sum();
        let sample = |hub: &Option<Daemon>| -> Option<Sample> {
            match side {
                Side::Pinfed => hub.as_ref().and_then(|h| h.sample()),
                Side::Karmada => self.k.controllers_sample(),
            }
        };
        let mut peak = 0u64;
        let mut last = Instant::now();
        let mut took = None;
        while started.elapsed() < timeout {
            if let Some(s) = sample(&*hub) {
                peak = peak.max(s.rss_bytes);
            }
            if seen.lock().unwrap().len() >= want {
                took = Some(started.elapsed());
                break;
            }
            if last.elapsed() > Duration::from_secs(15) {
                last = Instant::now();
                progress(&format!(
                    "compare: {} first sync: {:.0?}: {} of {want} Deployments in members",
                    side.name(),
                    started.elapsed(),
                    seen.lock().unwrap().len()
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let end = sample(&*hub);
        if side == Side::Pinfed {
            let cpu: f64 = agents.iter().filter_map(|a| a.cpu_secs()).sum();
            println!(
                "  (pinfed agents: {:.1} CPU s during the first sync)",
                cpu - agents_cpu0
            );
        }
        let done = seen.lock().unwrap().len();
        Ok(Sync {
            n,
            took,
            done,
            rss_mib: end.map(|s| s.rss_mib()).unwrap_or(0),
            peak_mib: peak >> 20,
            cpu_secs: end.map(|s| s.cpu_secs).unwrap_or(f64::NAN),
            load: format!("before {load_before}; after {}", load_line()),
        })
    }
}

fn print_spread(side: Side, rate: Option<f64>, concurrency: usize, s: &Spread) {
    let how = match rate {
        None => format!("burst, {concurrency} concurrent creates"),
        Some(r) => format!("steady {r}/s"),
    };
    println!(
        "\n== compare: {} distribution, {} workloads, {how} (created in {:.1?}) ==",
        side.name(),
        s.names.len(),
        s.took
    );
    println!("load: {}", s.load);
    println!(
        "  {}",
        s.each
            .line("create returned → Deployment present in member, per member")
    );
    println!(
        "  {}",
        s.all
            .line("create returned → Deployment present in every member, per workload")
    );
    if s.missing > 0 {
        println!("  MISSING: {} member Deployments never seen", s.missing);
    }
    println!("  API server writes per workload (the idle rate of both federations taken out):");
    for ((server, what), v) in &s.writes {
        println!("    {server:<8} {what:<40} {v:.2}");
    }
}

fn print_sync(side: Side, s: &Sync) {
    println!(
        "\n== compare: {} first sync of {} workloads ==\nload: {}",
        side.name(),
        s.n,
        s.load
    );
    println!(
        "  controllers start → every workload's Deployment in every member: {}",
        match s.took {
            Some(d) => format!("{:.1} s", d.as_secs_f64()),
            None => format!("not reached ({} Deployments seen)", s.done),
        }
    );
    println!(
        "  controllers' RSS at the end {} MiB (peak sampled {} MiB), CPU {:.1} s",
        s.rss_mib, s.peak_mib, s.cpu_secs
    );
}

fn ratio(p: f64, k: f64) -> String {
    if p > 0.0 && k.is_finite() && p.is_finite() {
        format!("{:.1}×", k / p)
    } else {
        "–".into()
    }
}

fn ms(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else if v >= 10_000.0 {
        format!("{:.1} s", v / 1000.0)
    } else {
        format!("{} ms", fmt_ms(v))
    }
}

fn print_table(
    b: &Bench<'_>,
    n: usize,
    rate: f64,
    spreads: &BTreeMap<(&str, Side), Spread>,
    status: &BTreeMap<Side, Dist>,
    syncs: &BTreeMap<Side, Sync>,
    load_start: &str,
) {
    println!(
        "\n== compare: pinfed vs Karmada {}, {} members, one run ==",
        crate::karmada::VERSION,
        b.members.len()
    );
    println!(
        "load: at the start {load_start}; at the end {}",
        load_line()
    );
    println!(
        "| {n} workloads × {} replicas (one per member) | pinfed | Karmada | Karmada / pinfed |",
        b.replicas
    );
    println!("|---|---|---|---|");
    let row = |what: String, p: f64, k: f64| {
        println!("| {what} | {} | {} | {} |", ms(p), ms(k), ratio(p, k));
    };
    for (pacing, label) in [
        ("burst", "burst of".to_string()),
        ("steady", format!("steady {rate}/s,")),
    ] {
        let (p, k) = (
            &spreads[&(pacing, Side::Pinfed)],
            &spreads[&(pacing, Side::Karmada)],
        );
        for (q, qn) in [(0.5, "p50"), (0.99, "p99")] {
            row(
                format!("create → Deployment in member, {label} {n}, {qn}"),
                p.each.pct(q),
                k.each.pct(q),
            );
        }
    }
    for (q, qn) in [(0.5, "p50"), (0.99, "p99")] {
        row(
            format!("member status written → hub-side status, {qn}"),
            status[&Side::Pinfed].pct(q),
            status[&Side::Karmada].pct(q),
        );
    }
    let (p, k) = (&syncs[&Side::Pinfed], &syncs[&Side::Karmada]);
    let secs = |s: &Sync| s.took.map(|d| d.as_secs_f64() * 1000.0).unwrap_or(f64::NAN);
    row(
        format!(
            "first sync of {} workloads (controllers start → all Deployments in members)",
            p.n
        ),
        secs(p),
        secs(k),
    );
    println!(
        "| controllers' RSS after the first sync (peak sampled) | {} MiB ({}) | {} MiB ({}) | {} |",
        p.rss_mib,
        p.peak_mib,
        k.rss_mib,
        k.peak_mib,
        ratio(p.rss_mib as f64, k.rss_mib as f64)
    );
    println!(
        "| controllers' CPU during the first sync | {:.1} s | {:.1} s | {} |",
        p.cpu_secs,
        k.cpu_secs,
        ratio(p.cpu_secs, k.cpu_secs)
    );
    let total = |s: &Spread, server: &str| -> f64 {
        s.writes
            .iter()
            .filter(|((srv, _), _)| srv == server)
            // (A fold from 0.0: an empty f64 sum is -0.0, printed as "-0.0" for the API
            // server the other side does not use.)
            .fold(0.0, |sum, (_, v)| sum + v)
    };
    for server in ["hub", "karmada", "members"] {
        let p = total(&spreads[&("burst", Side::Pinfed)], server);
        let k = total(&spreads[&("burst", Side::Karmada)], server);
        println!("| API server writes per workload, {server} (burst) | {p:.1} | {k:.1} | |");
    }
    println!(
        "pinfed: hub = `pinfed hub`; Karmada: controllers = karmada-controller-manager + \
         karmada-scheduler (its API server, aggregated API server and webhook not counted, \
         as pinfed's hub API server is not)"
    );
}

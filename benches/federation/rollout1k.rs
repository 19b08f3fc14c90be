//! Scenario rollout1k: one RuntimeProfile change rolled out over 1,000 PinterestServices
//! at once (`clusters/bench.yaml`, the hub and one agent per member running).
//!
//! The services (3 replicas spread over the 3 members, no `spec.rollout`: the hub's
//! default canary — one member first, then the rest) are created and waited for until
//! every one is Ready with `status.rollout` Complete at revision 1. Then one new default
//! RuntimeProfile with a sidecar is created on the hub: revision 2 of every service.
//! Timed from the profile's create request until every service's rollout is Complete at
//! revision 2 (and until every canary passed), with the hub API server's writes on the
//! rollout's resources, the members' writes, the hub's CPU and memory and the load.
//! Deleting the profile (revision 3: back to the built-in profile) is measured the same
//! way. The services are deleted at the end, so the members hold nothing of them for the
//! scenarios after.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};

use crate::daemon::{Daemon, report_logs};
use crate::fed::{Fed, condition, service};
use crate::helpers::{
    AbortOnDrop, Dist, cpu_by_component_in, cpu_used_line, create_all, fmt_ms, load_line, progress,
    request_counts, watch_services, write_counts,
};
use crate::settings::env_or;

/// The hub resources a rollout writes: the workload (metadata), its status (the rollout's
/// gates), the revision records and the rollout's Events.
const HUB_RESOURCES: [&str; 4] = [
    "pinterestservices",
    "pinterestservices/status",
    "controllerrevisions",
    "events",
];
const WRITE_VERBS: &[&str] = &["POST", "PUT", "PATCH", "APPLY", "DELETE"];
const READ_VERBS: &[&str] = &["GET", "LIST"];

fn profile_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("compute.pinterest.com", "v1alpha1", "RuntimeProfile"),
        "runtimeprofiles",
    )
}

/// What the watch on the hub saw of the services, for the revision being waited for.
#[derive(Default)]
struct Obs {
    target: i64,
    /// Stage names of the rollout (from `status.rollout.stages`).
    stages: usize,
    /// First seen with `status.rollout.revision` at the target.
    started: HashMap<String, Instant>,
    /// First seen with every member of the first stage Passed (or the rollout Complete).
    canary: HashMap<String, Instant>,
    /// First seen Complete at the target (revision 1: and Ready).
    done: HashMap<String, Instant>,
    /// First seen RolledBack or Halted at the target, with the rollout's message.
    failed: HashMap<String, (Instant, String)>,
    /// Seen RollingBack at the target at least once.
    rolling_back: HashSet<String>,
}

impl Obs {
    fn reset(&mut self, target: i64) {
        *self = Obs {
            target,
            stages: self.stages,
            ..Default::default()
        };
    }

    fn see(&mut self, o: &DynamicObject, at: Instant) {
        let st = &o.data["status"];
        let r = &st["rollout"];
        if r["revision"].as_i64() != Some(self.target) {
            return;
        }
        let name = o.name_any();
        let phase = r["phase"].as_str().unwrap_or_default();
        if let Some(s) = r["stages"].as_array() {
            self.stages = self.stages.max(s.len());
        }
        if self.target == 1 {
            if phase == "Complete" && condition(st, "Ready") == Some("True") {
                self.done.entry(name).or_insert(at);
            }
            return;
        }
        self.started.entry(name.clone()).or_insert(at);
        let first_stage: Vec<&serde_json::Value> = r["members"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["stage"].as_i64() == Some(0))
            .collect();
        let canary_passed = phase == "Complete"
            || (!first_stage.is_empty() && first_stage.iter().all(|m| m["state"] == "Passed"));
        if canary_passed {
            self.canary.entry(name.clone()).or_insert(at);
        }
        match phase {
            "Complete" => {
                self.done.entry(name).or_insert(at);
            }
            "RolledBack" | "Halted" => {
                let why = format!("{phase}: {}", r["message"].as_str().unwrap_or_default());
                self.failed.entry(name).or_insert((at, why));
            }
            "RollingBack" => {
                self.rolling_back.insert(name);
            }
            _ => {}
        }
    }
}

/// What the scenario runs with.
struct Run<'a> {
    fed: &'a Fed,
    hub: &'a Daemon,
    agents: &'a [Daemon],
    obs: Arc<Mutex<Obs>>,
    n: usize,
    timeout: Duration,
    quiet: Duration,
    /// The topology's state directory: its processes' CPU is read from /proc by it.
    state_dir: Option<PathBuf>,
}

/// The figures of one rollout.
struct Figures {
    what: &'static str,
    revision: i64,
    all_done: Option<f64>,
    all_canary: Option<f64>,
    done: Dist,
    failed: usize,
    hub_writes_per_stage: f64,
    member_writes: f64,
    hub_cpu: f64,
    hub_peak_mib: f64,
    load: String,
}

pub async fn run(fed: &Fed) -> anyhow::Result<()> {
    let n: usize = env_or("PINFED_BENCH_ROLLOUT_SERVICES", 1_000)?;
    let replicas: i64 = env_or("PINFED_BENCH_REPLICAS", 3)?;
    let concurrency: usize = env_or("PINFED_BENCH_CONCURRENCY", 32)?;
    let timeout = Duration::from_secs(env_or("PINFED_BENCH_ROLLOUT_TIMEOUT_SECS", 1800)?);
    let quiet = Duration::from_secs(env_or("PINFED_BENCH_ROLLOUT_QUIET_SECS", 20)?);
    let back = env_or::<u8>("PINFED_BENCH_ROLLOUT_BACK", 1)? != 0;
    let spread = fed.member_names().len() as i64;

    progress("rollout1k: joining members, starting the hub and one agent per member");
    fed.join_all()?;
    let profiles: Api<DynamicObject> = Api::all_with(fed.hub(), &profile_resource());
    let existing = profiles.list_metadata(&ListParams::default()).await?.items;
    if !existing.is_empty() {
        progress(&format!(
            "rollout1k: WARNING: the hub already holds RuntimeProfiles ({}); the new default \
             profile must be the newest default by name to change every service",
            existing
                .iter()
                .map(|p| p.name_any())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let hub = fed.spawn_hub("bench-hub")?;
    let agents = fed.spawn_agents()?;
    hub.wait_http("/readyz", fed.s.timeout).await?;
    for a in &agents {
        a.wait_http("/readyz", fed.s.timeout).await?;
    }
    fed.members_ready().await?;
    let ns = fed.create_namespace("bench-rollout").await?;

    let obs: Arc<Mutex<Obs>> = Default::default();
    obs.lock().unwrap().reset(1);
    let mut watches = AbortOnDrop(Vec::new());
    {
        let obs = obs.clone();
        watches.0.push(watch_services(
            fed,
            fed.hub_name(),
            &ns,
            None,
            move |o, at| obs.lock().unwrap().see(o, at),
        ));
    }
    tokio::time::sleep(Duration::from_secs(1)).await; // let the watch list

    let r = Run {
        fed,
        hub: &hub,
        agents: &agents,
        obs: obs.clone(),
        n,
        timeout,
        quiet,
        state_dir: fed.kubeconfig.parent().map(PathBuf::from),
    };
    // The profile is deleted whatever happens: a default profile left behind would be
    // every later workload's.
    let profile = testkit::unique_name("bench-rollout1k");
    let result = scenario(&r, &ns, replicas, spread, concurrency, &profile, back).await;
    match profiles.delete(&profile, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => progress(&format!(
            "rollout1k: deleting RuntimeProfile {profile}: {e}"
        )),
    }
    if let Err(e) = &result {
        eprintln!(
            "rollout1k failed: {e:#}\nlast lines of the hub log ({}):\n{}",
            hub.log.display(),
            hub.log_last(40)
        );
    }
    drop(watches);
    clean_up(&r, &ns).await;
    report_logs(&[&hub]);
    report_logs(&agents.iter().collect::<Vec<_>>());
    result
}

async fn scenario(
    r: &Run<'_>,
    ns: &str,
    replicas: i64,
    spread: i64,
    concurrency: usize,
    profile: &str,
    back: bool,
) -> anyhow::Result<()> {
    let n = r.n;
    let fed = r.fed;
    let names: Vec<String> = (0..n).map(|i| format!("svc-{i:05}")).collect();
    let objs = names
        .iter()
        .map(|nm| service(nm, replicas, Some(spread)))
        .collect();
    let created: Arc<Mutex<HashMap<String, Instant>>> = Default::default();
    progress(&format!(
        "rollout1k: creating {n} PinterestServices × {replicas} replicas in {ns}, {concurrency} \
         at a time"
    ));
    let load_before = load_line();
    let hub_cpu0 = r.hub.cpu_secs();
    let started = Instant::now();
    let took = create_all(
        &fed.services(fed.hub_name(), ns),
        objs,
        None,
        concurrency,
        created.clone(),
    )
    .await?;
    progress(&format!(
        "rollout1k: all {n} created in {took:.1?} ({:.0}/s); waiting until every one is Ready \
         at revision 1",
        n as f64 / took.as_secs_f64()
    ));
    let mut last = Instant::now();
    let all_ready = loop {
        let (done, last_at) = {
            let o = r.obs.lock().unwrap();
            (o.done.len(), o.done.values().max().copied())
        };
        if done >= n {
            break last_at.unwrap_or_else(Instant::now);
        }
        r.check_alive()?;
        if started.elapsed() > r.timeout {
            bail!(
                "only {done} of {n} PinterestServices Ready at revision 1 after {:?}; raise \
                 PINFED_BENCH_ROLLOUT_TIMEOUT_SECS if the machine is just slow",
                r.timeout
            );
        }
        if last.elapsed() > Duration::from_secs(10) {
            last = Instant::now();
            progress(&format!(
                "rollout1k: {:.0?} after the first create: {done} of {n} Ready at revision 1; \
                 hub RSS {} MiB; {}",
                started.elapsed(),
                r.hub.memory_kib().map(|m| m.1 / 1024).unwrap_or(0),
                load_line()
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let hub_cpu1 = r.hub.cpu_secs();
    let ready_lat: Vec<Duration> = {
        let c = created.lock().unwrap();
        let o = r.obs.lock().unwrap();
        names
            .iter()
            .filter_map(|nm| Some(o.done.get(nm)?.saturating_duration_since(*c.get(nm)?)))
            .collect()
    };
    println!("\n== rollout1k ==");
    println!(
        "config: {n} PinterestServices × {replicas} replicas (10m cpu, 16Mi), Divided, spread \
         minClusters {spread}, no spec.rollout (the hub's default rollout); hub (leader \
         election on) + {} agents; {}",
        r.agents.len(),
        fed.describe()
    );
    println!(
        "  creation: load before {load_before}; after {}",
        load_line()
    );
    println!(
        "  first create → all {n} created: {:.1} s ({:.0}/s); → all Ready with status.rollout \
         Complete at revision 1: {:.1} s; hub CPU {}",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64(),
        (all_ready - started).as_secs_f64(),
        match (hub_cpu0, hub_cpu1) {
            (Some(a), Some(b)) => format!("{:.1} s", b - a),
            _ => "?".into(),
        }
    );
    println!(
        "  {}",
        pct_line(
            &Dist::new(ready_lat),
            "create returned → Ready at revision 1, per service"
        )
    );

    let profiles: Api<DynamicObject> = Api::all_with(fed.hub(), &profile_resource());
    let mut figures = Vec::new();
    let up = one_rollout(
        r,
        "a new default RuntimeProfile with a sidecar (create)",
        2,
        async {
            let p: DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "RuntimeProfile",
                "metadata": {"name": profile, "labels": {"pinfed.dev/bench": "true"}},
                "spec": {"version": profile, "default": true,
                    "sidecars": [{"container": {"name": "mesh",
                        "image": "registry.example/mesh:2"}}]}
            }))?;
            profiles
                .create(&PostParams::default(), &p)
                .await
                .with_context(|| format!("creating RuntimeProfile {profile}"))?;
            anyhow::Ok(())
        },
    )
    .await?;
    let mut complete = up.all_done.is_some();
    figures.push(up);
    if back && complete {
        let down = one_rollout(
            r,
            "the profile deleted: back to the built-in profile",
            3,
            async {
                profiles
                    .delete(profile, &DeleteParams::default())
                    .await
                    .with_context(|| format!("deleting RuntimeProfile {profile}"))?;
                anyhow::Ok(())
            },
        )
        .await?;
        complete &= down.all_done.is_some();
        figures.push(down);
    }
    print_summary(n, &figures);
    if !complete {
        bail!("not every service's rollout completed (figures above)");
    }
    Ok(())
}

impl Run<'_> {
    fn check_alive(&self) -> anyhow::Result<()> {
        if !self.hub.alive() {
            bail!("the hub exited:\n{}", self.hub.log_last(30));
        }
        for a in self.agents {
            if !a.alive() {
                bail!("{} exited:\n{}", a.name, a.log_last(30));
            }
        }
        Ok(())
    }

    fn agents_cpu(&self) -> f64 {
        self.agents.iter().filter_map(|a| a.cpu_secs()).sum()
    }
}

/// Sum of the deltas of `keys` ("resource VERB") whose resource is one of `resources`.
fn delta(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    resources: Option<&[&str]>,
) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = after
        .iter()
        .filter(|(k, _)| {
            let res = k.rsplit_once(' ').map(|x| x.0).unwrap_or(k);
            resources.is_none_or(|rs| rs.contains(&res))
        })
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d >= 0.5)
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

fn total(d: &[(String, f64)]) -> f64 {
    d.iter().map(|x| x.1).sum()
}

fn pct_line(d: &Dist, what: &str) -> String {
    if d.ms.is_empty() {
        return format!("{what}: no samples");
    }
    let s = |ms: f64| format!("{} s", fmt_ms(ms / 1000.0));
    format!(
        "{what} (n={}): p50 {}, p90 {}, p99 {}, max {}",
        d.ms.len(),
        s(d.pct(0.50)),
        s(d.pct(0.90)),
        s(d.pct(0.99)),
        s(d.ms[d.ms.len() - 1])
    )
}

fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Triggers a new revision (`revision`) of every service with `trigger` and waits until
/// every service's rollout of it is Complete (or rolled back, or the timeout); prints
/// what it measured.
async fn one_rollout(
    r: &Run<'_>,
    what: &'static str,
    revision: i64,
    trigger: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<Figures> {
    let n = r.n;
    let hub_client = r.fed.hub();
    // The idle rate of the counted hub writes first (heartbeats, resync, the tail of
    // what came before), to tell the rollout's own writes from it.
    progress(&format!(
        "rollout1k: {:?} of quiet before revision {revision} (the hub API server's idle \
         write rate)",
        r.quiet
    ));
    let idle0 = request_counts(&hub_client, WRITE_VERBS).await;
    tokio::time::sleep(r.quiet).await;
    let before = request_counts(&hub_client, WRITE_VERBS).await;
    let idle_rate = (total(&delta(&idle0, &before, Some(&HUB_RESOURCES)))
        / r.quiet.as_secs_f64().max(1.0))
    .max(0.0);
    let reads_before = request_counts(&hub_client, READ_VERBS).await;
    let mut members_before = BTreeMap::new();
    for m in r.fed.member_names() {
        members_before.insert(m.clone(), write_counts(&r.fed.client(&m)).await);
    }
    r.obs.lock().unwrap().reset(revision);
    let cpu_before = cpu_by_component_in(r.state_dir.as_deref());
    let hub_cpu0 = r.hub.cpu_secs().unwrap_or(0.0);
    let agents_cpu0 = r.agents_cpu();
    let rss_before = r.hub.memory_kib();
    let hub_log_before = HubLog::read(r.hub);
    let load_before = load_line();
    let mut load_max = load1();
    let mut peak_kib = rss_before.map(|m| m.1).unwrap_or(0);

    progress(&format!("rollout1k: revision {revision}: {what}"));
    let t0 = Instant::now();
    trigger.await?;
    let mut last_sample: Option<Instant> = None;
    let mut last_progress = Instant::now();
    let timed_out = loop {
        if last_sample.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            last_sample = Some(Instant::now());
            if let Some((_, rss)) = r.hub.memory_kib() {
                peak_kib = peak_kib.max(rss);
            }
            load_max = load_max.max(load1());
        }
        let (started, canary, done, failed, back) = {
            let o = r.obs.lock().unwrap();
            (
                o.started.len(),
                o.canary.len(),
                o.done.len(),
                o.failed.len(),
                o.rolling_back.len(),
            )
        };
        if done + failed >= n {
            break false;
        }
        r.check_alive()?;
        if t0.elapsed() > r.timeout {
            progress(&format!(
                "rollout1k: revision {revision}: only {done} of {n} Complete after {:?}",
                r.timeout
            ));
            break true;
        }
        if last_progress.elapsed() > Duration::from_secs(10) {
            last_progress = Instant::now();
            progress(&format!(
                "rollout1k: revision {revision}, {:.0?} after the trigger: {started} of {n} at \
                 revision {revision}, {canary} canaries passed, {done} Complete, {back} rolling \
                 back, {failed} rolled back; hub RSS {} MiB; {}",
                t0.elapsed(),
                r.hub.memory_kib().map(|m| m.1 / 1024).unwrap_or(0),
                load_line()
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let elapsed = t0.elapsed();
    let hub_cpu = r.hub.cpu_secs().unwrap_or(0.0) - hub_cpu0;
    let agents_cpu = r.agents_cpu() - agents_cpu0;
    let cpu_after = cpu_by_component_in(r.state_dir.as_deref());
    let rss_after = r.hub.memory_kib();
    let hub_log = HubLog::read(r.hub).since(&hub_log_before);
    if let Some((_, rss)) = rss_after {
        peak_kib = peak_kib.max(rss);
    }
    let load_after = load_line();
    let after = request_counts(&hub_client, WRITE_VERBS).await;
    let reads_after = request_counts(&hub_client, READ_VERBS).await;
    let mut members_after = BTreeMap::new();
    for m in r.fed.member_names() {
        members_after.insert(m.clone(), write_counts(&r.fed.client(&m)).await);
    }

    let o = std::mem::take(&mut *r.obs.lock().unwrap());
    r.obs.lock().unwrap().stages = o.stages;
    let stages = o.stages.max(1);
    let since = |at: &Instant| at.saturating_duration_since(t0);
    let last_of = |m: &HashMap<String, Instant>| {
        (m.len() >= n)
            .then(|| m.values().max().map(|at| since(at).as_secs_f64()))
            .flatten()
    };
    let all_started = last_of(&o.started);
    let all_canary = last_of(&o.canary);
    let all_done = (o.done.len() >= n).then(|| last_of(&o.done)).flatten();
    let done = Dist::new(o.done.values().map(since));
    let canary = Dist::new(o.canary.values().map(since));
    let started = Dist::new(o.started.values().map(since));
    let rest = Dist::new(
        o.done
            .iter()
            .filter_map(|(nm, at)| Some(at.saturating_duration_since(*o.canary.get(nm)?))),
    );
    let secs = |v: Option<f64>, of: usize| {
        v.map(|s| format!("{s:.1} s"))
            .unwrap_or_else(|| format!("not reached ({of} of {n})"))
    };

    println!("\n== rollout1k: revision {revision} — {what} ==");
    println!(
        "load: before {load_before}; after {load_after}; highest 1-min load sampled {load_max:.2}"
    );
    println!(
        "  trigger → every service's rollout Complete at revision {revision}: {}{}",
        secs(all_done, o.done.len()),
        if timed_out {
            format!(" (gave up after {:.0} s)", elapsed.as_secs_f64())
        } else {
            String::new()
        }
    );
    println!(
        "  trigger → every service at revision {revision} (the hub began its rollout): {}",
        secs(all_started, o.started.len())
    );
    println!(
        "  trigger → the first stage (canary) of every service passed: {}",
        secs(all_canary, o.canary.len())
    );
    println!(
        "  {}",
        pct_line(&done, "trigger → rollout Complete, per service")
    );
    println!(
        "  {}",
        pct_line(&started, "trigger → rollout begun, per service")
    );
    println!(
        "  {}",
        pct_line(&canary, "trigger → canary passed, per service")
    );
    println!(
        "  {}",
        pct_line(&rest, "canary passed → Complete (the rest), per service")
    );
    if !o.failed.is_empty() || !o.rolling_back.is_empty() {
        let mut why: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, w) in o.failed.values() {
            *why.entry(w.as_str()).or_default() += 1;
        }
        println!(
            "  FAILED: {} rolled back or halted, {} seen rolling back: {}",
            o.failed.len(),
            o.rolling_back.len(),
            why.iter()
                .take(5)
                .map(|(w, c)| format!("{c} × {w}"))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }

    // The hub API server's writes on the rollout's resources.
    let counted = delta(&before, &after, Some(&HUB_RESOURCES));
    let counted_total = total(&counted);
    let idle_part = idle_rate * elapsed.as_secs_f64();
    let per = |v: f64| v / n as f64 / stages as f64;
    println!(
        "  hub API server writes on {}: {counted_total:.0} = {:.2} per workload per stage \
         ({stages} stages); idle rate before {idle_rate:.2}/s (≈ {idle_part:.0} of them over \
         the rollout; without: {:.2}); by request, per workload per stage: {}",
        HUB_RESOURCES.join(", "),
        per(counted_total),
        per((counted_total - idle_part).max(0.0)),
        counted
            .iter()
            .map(|(k, d)| format!("{k} {:.2}", per(*d)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let other = delta(&before, &after, None)
        .into_iter()
        .filter(|(k, _)| !counted.iter().any(|(c, _)| c == k))
        .collect::<Vec<_>>();
    println!(
        "  other hub API server writes: {:.0} ({})",
        total(&other),
        other
            .iter()
            .take(6)
            .map(|(k, d)| format!("{k} {d:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let reads = delta(
        &reads_before,
        &reads_after,
        Some(&["pinterestservices", "controllerrevisions"]),
    );
    println!(
        "  hub API server reads of pinterestservices and controllerrevisions: {}",
        if reads.is_empty() {
            "none".to_string()
        } else {
            reads
                .iter()
                .map(|(k, d)| format!("{k} {d:.0} ({:.2} per workload)", d / n as f64))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    let mut member_total = 0.0;
    for (m, b) in &members_before {
        let d = delta(b, &members_after[m], None);
        let t = total(&d);
        member_total += t;
        println!(
            "  {m} API server writes (agent, controller-manager, scheduler, kwok): {t:.0} \
             ({:.2} per workload): {}",
            t / n as f64,
            d.iter()
                .take(12)
                .map(|(k, v)| format!("{k} {v:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    println!(
        "  members' API servers in all: {member_total:.0} writes, {:.2} per workload",
        member_total / n as f64
    );
    let mib = |k: Option<u64>| {
        k.map(|k| format!("{:.0} MiB", k as f64 / 1024.0))
            .unwrap_or_else(|| "?".into())
    };
    println!(
        "  hub: CPU {hub_cpu:.1} s over {:.0} s ({:.2} cores); RSS {} at the trigger, {} at \
         the end, peak sampled every 1 s {}, VmHWM (whole life) {}; agents' CPU {agents_cpu:.1} s",
        elapsed.as_secs_f64(),
        hub_cpu / elapsed.as_secs_f64().max(f64::EPSILON),
        mib(rss_before.map(|m| m.1)),
        mib(rss_after.map(|m| m.1)),
        mib(Some(peak_kib)),
        mib(rss_after.map(|m| m.0)),
    );
    println!(
        "  CPU of the topology's processes (pinfed not included): {}",
        cpu_used_line(&cpu_before, &cpu_after)
    );
    println!(
        "  hub log meanwhile: {} leadership losses (Lease not renewed in time; a new term \
         reconciles every workload again), {} failed reconciles (retried), {} warnings and \
         errors in all",
        hub_log.lost_lease, hub_log.failed_reconciles, hub_log.problems
    );
    Ok(Figures {
        what,
        revision,
        all_done,
        all_canary,
        done,
        failed: o.failed.len(),
        hub_writes_per_stage: per(counted_total),
        member_writes: member_total / n as f64,
        hub_cpu,
        hub_peak_mib: peak_kib as f64 / 1024.0,
        load: format!(
            "{load_before} → {}",
            load_after.trim_start_matches("load average ")
        ),
    })
}

/// Counts of what the hub logged, for the part of a phase.
#[derive(Default)]
struct HubLog {
    lost_lease: usize,
    failed_reconciles: usize,
    problems: usize,
}

impl HubLog {
    fn read(hub: &Daemon) -> HubLog {
        let text = hub.log_text();
        let mut c = HubLog::default();
        for line in text.lines() {
            if line.contains(" WARN ") || line.contains(" ERROR ") {
                c.problems += 1;
                c.lost_lease += usize::from(line.contains("lost the lease"));
                c.failed_reconciles += usize::from(line.contains("hub reconcile failed"));
            }
        }
        c
    }

    fn since(&self, before: &HubLog) -> HubLog {
        HubLog {
            lost_lease: self.lost_lease.saturating_sub(before.lost_lease),
            failed_reconciles: self
                .failed_reconciles
                .saturating_sub(before.failed_reconciles),
            problems: self.problems.saturating_sub(before.problems),
        }
    }
}

fn print_summary(n: usize, figures: &[Figures]) {
    println!("\n== rollout1k: summary ({n} services) ==");
    for f in figures {
        let s = |v: Option<f64>| {
            v.map(|s| format!("{s:.1} s"))
                .unwrap_or_else(|| "not reached".into())
        };
        println!(
            "  revision {} ({}): all Complete {}, all canaries passed {}, per service p50/p90/p99 \
             {} / {} / {} s, {} rolled back; hub writes {:.2} per workload per stage, members' \
             {:.1} per workload; hub CPU {:.1} s, peak RSS {:.0} MiB; {}",
            f.revision,
            f.what,
            s(f.all_done),
            s(f.all_canary),
            fmt_ms(f.done.pct(0.50) / 1000.0),
            fmt_ms(f.done.pct(0.90) / 1000.0),
            fmt_ms(f.done.pct(0.99) / 1000.0),
            f.failed,
            f.hub_writes_per_stage,
            f.member_writes,
            f.hub_cpu,
            f.hub_peak_mib,
            f.load
        );
    }
}

/// Deletes the services while the hub and agents still run (they remove the slices and
/// what the agents made of them), so the members hold nothing of this scenario for the
/// next one; then the namespace.
async fn clean_up(r: &Run<'_>, ns: &str) {
    progress(&format!(
        "rollout1k: deleting the {} services of {ns} (the hub and agents remove their slices)",
        r.n
    ));
    let api = r.fed.services(r.fed.hub_name(), ns);
    if let Err(e) = api
        .delete_collection(&DeleteParams::background(), &ListParams::default())
        .await
    {
        progress(&format!("rollout1k: deleting the services: {e}"));
    }
    let start = Instant::now();
    let mut last = Instant::now();
    loop {
        let left = match api.list_metadata(&ListParams::default()).await {
            Ok(l) => l.items.len(),
            Err(_) => usize::MAX,
        };
        if left == 0 {
            progress(&format!(
                "rollout1k: services gone after {:.0?}",
                start.elapsed()
            ));
            break;
        }
        if start.elapsed() > r.timeout || !r.hub.alive() {
            progress(&format!(
                "rollout1k: {left} services still in {ns} after {:.0?}; left to the topology's \
                 removal",
                start.elapsed()
            ));
            return;
        }
        if last.elapsed() > Duration::from_secs(10) {
            last = Instant::now();
            progress(&format!("rollout1k: {left} services left in {ns}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let _ = Api::<Namespace>::all(r.fed.hub())
        .delete(ns, &DeleteParams::default())
        .await;
}

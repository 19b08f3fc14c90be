//! Progress lines, waiting, latency distributions, watches and bulk creation.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};

use crate::fed::{Fed, create_service};

pub static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

pub fn progress(msg: &str) {
    let t = START.get_or_init(Instant::now).elapsed().as_secs();
    eprintln!("[bench {t:>4}s] {msg}");
}

pub async fn wait_for<F, Fut>(timeout: Duration, what: &str, check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    Ok(testkit::wait::until(timeout, Duration::from_millis(100), what, check).await?)
}

/// Nearest-rank percentiles of durations, in milliseconds.
pub struct Dist {
    pub ms: Vec<f64>,
}

impl Dist {
    pub fn new(durations: impl IntoIterator<Item = Duration>) -> Dist {
        let mut ms: Vec<f64> = durations
            .into_iter()
            .map(|d| d.as_secs_f64() * 1000.0)
            .collect();
        ms.sort_by(|a, b| a.total_cmp(b));
        Dist { ms }
    }

    pub fn pct(&self, q: f64) -> f64 {
        if self.ms.is_empty() {
            return f64::NAN;
        }
        let rank = ((q * self.ms.len() as f64).ceil() as usize).clamp(1, self.ms.len());
        self.ms[rank - 1]
    }

    pub fn line(&self, what: &str) -> String {
        if self.ms.is_empty() {
            return format!("{what}: no samples");
        }
        format!(
            "{what} (n={}): p50 {} ms, p99 {} ms, max {} ms",
            self.ms.len(),
            fmt_ms(self.pct(0.50)),
            fmt_ms(self.pct(0.99)),
            fmt_ms(self.ms[self.ms.len() - 1]),
        )
    }
}

pub fn fmt_ms(ms: f64) -> String {
    if ms >= 100.0 {
        format!("{ms:.0}")
    } else {
        format!("{ms:.1}")
    }
}

pub fn load_line() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!(
        "load average {} on {cpus} CPUs",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    )
}

/// Watches the PinterestServices of `ns` in `cluster` (optionally by label) and calls
/// `on_event` with each applied object and the instant it was received. Ends when the
/// returned task handle is dropped... by aborting it ([`AbortOnDrop`]).
pub fn watch_services<F>(
    fed: &Fed,
    cluster: &str,
    ns: &str,
    labels: Option<String>,
    on_event: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut(&DynamicObject, Instant) + Send + 'static,
{
    watch_objects(fed.services(cluster, ns), cluster, labels, on_event)
}

/// Watches the objects of `api` (optionally by label) and calls `on_event` with each
/// applied object and the instant it was received; `what` names the watch in progress
/// lines.
pub fn watch_objects<F>(
    api: Api<DynamicObject>,
    what: &str,
    labels: Option<String>,
    mut on_event: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut(&DynamicObject, Instant) + Send + 'static,
{
    let mut cfg = watcher::Config::default();
    if let Some(l) = labels {
        cfg = cfg.labels(&l);
    }
    let what = what.to_string();
    tokio::spawn(async move {
        let mut stream = watcher(api, cfg).default_backoff().boxed();
        loop {
            match stream.try_next().await {
                Ok(Some(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => {
                    on_event(&o, Instant::now())
                }
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(e) => progress(&format!("watch on {what}: {e}")),
            }
        }
    })
}

pub struct AbortOnDrop(pub Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

/// The clusters of `status.placement.placements[]` with their replicas.
pub fn placements(status: &serde_json::Value) -> Option<Vec<(String, i64)>> {
    let ps = status["placement"]["placements"].as_array()?;
    Some(
        ps.iter()
            .filter_map(|p| Some((p["cluster"].as_str()?.to_string(), p["replicas"].as_i64()?)))
            .collect(),
    )
}

/// Creates `names` on the hub: as a burst (`rate` None: `concurrency` at a time, as fast
/// as the API server takes them) or at a steady `rate` per second. Records when each
/// create returned.
pub async fn create_all(
    api: &Api<DynamicObject>,
    objs: Vec<serde_json::Value>,
    rate: Option<f64>,
    concurrency: usize,
    created: Arc<Mutex<HashMap<String, Instant>>>,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let total = objs.len();
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let one = |i: usize, obj: serde_json::Value| {
        let api = api.clone();
        let created = created.clone();
        let done = done.clone();
        async move {
            if let Some(r) = rate {
                tokio::time::sleep_until(
                    tokio::time::Instant::from_std(start) + Duration::from_secs_f64(i as f64 / r),
                )
                .await;
            }
            let name = obj["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            create_service(&api, &obj).await?;
            created.lock().unwrap().insert(name, Instant::now());
            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_multiple_of(1000) && n < total {
                progress(&format!(
                    "created {n}/{total} ({:.0}/s)",
                    n as f64 / start.elapsed().as_secs_f64()
                ));
            }
            anyhow::Ok(())
        }
    };
    let width = if rate.is_some() {
        total.max(1)
    } else {
        concurrency
    };
    futures::stream::iter(objs.into_iter().enumerate().map(|(i, o)| one(i, o)))
        .buffer_unordered(width)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(start.elapsed())
}

/// What each counter of `after` grew by since `before` (a counter new in `after` from 0).
pub fn counts_since(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .collect()
}

/// The API server's mutating requests so far (`apiserver_request_total`), by
/// `resource[/subresource] VERB`.
pub async fn write_counts(client: &Client) -> BTreeMap<String, f64> {
    request_counts(client, &["POST", "PUT", "PATCH", "APPLY", "DELETE"]).await
}

/// The API server's requests with one of `verbs` so far (`apiserver_request_total`), by
/// `resource[/subresource] VERB`.
pub async fn request_counts(client: &Client, verbs: &[&str]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Ok(req) = http::Request::get("/metrics").body(Vec::new()) else {
        return out;
    };
    let Ok(text) = client.request_text(req).await else {
        return out;
    };
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |k: &str| -> String {
            labels
                .split("\",")
                .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let verb = label("verb");
        if !verbs.contains(&verb.as_str()) {
            continue;
        }
        let sub = label("subresource");
        let resource = if sub.is_empty() {
            label("resource")
        } else {
            format!("{}/{sub}", label("resource"))
        };
        *out.entry(format!("{resource} {verb}")).or_default() +=
            value.trim().parse().unwrap_or(0.0);
    }
    out
}

/// CPU seconds (user + system) so far of this machine's control-plane processes, by
/// component: `kube-apiserver <cluster>` (from its etcd prefix), `etcd`, and the other
/// binaries by name (`pinfed hub` and `pinfed agent` count as `pinfed`). Read from /proc,
/// so a figure is what the process used, whatever shared the machine.
pub fn cpu_by_component() -> BTreeMap<String, f64> {
    cpu_by_component_in(None)
}

/// [`cpu_by_component`] of the processes whose command line names a path under `dir` (a
/// topology's state directory: its API servers, etcd, controller-managers, schedulers and
/// kwoks), so that another topology on the same machine is not counted; `pinfed` daemons
/// name no such path and are left out then (sample them through their [`crate::daemon::Daemon`]).
pub fn cpu_by_component_in(dir: Option<&std::path::Path>) -> BTreeMap<String, f64> {
    let under = dir.map(|d| format!("{}/", d.display()));
    let tick = 100.0; // USER_HZ on Linux
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let pid = e.file_name();
        if !pid.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let Some(bin) = args.first().and_then(|a| a.rsplit('/').next()) else {
            continue;
        };
        if let Some(under) = &under
            && !args.iter().any(|a| a.contains(under.as_str()))
        {
            continue;
        }
        let name = match bin {
            "kube-apiserver" => {
                let cluster = args
                    .iter()
                    .find_map(|a| a.strip_prefix("--etcd-prefix="))
                    .and_then(|p| p.rsplit('/').next())
                    .unwrap_or("?");
                format!("kube-apiserver {cluster}")
            }
            "etcd"
            | "kube-controller-manager"
            | "kube-scheduler"
            | "kwok"
            | "pinfed"
            | "karmada-controller-manager"
            | "karmada-scheduler"
            | "karmada-aggregated-apiserver" => bin.to_string(),
            _ => continue,
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // Fields after the parenthesized command name: utime and stime are the 12th and
        // 13th of them.
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = f.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0)
            + f.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
        *out.entry(name).or_default() += ticks / tick;
    }
    out
}

/// The CPU each component used between two [`cpu_by_component`] readings, largest first,
/// as one line ("kube-apiserver hub 41.2 s, etcd 12.0 s, …").
pub fn cpu_used_line(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> String {
    let mut used: Vec<(&String, f64)> = after
        .iter()
        .map(|(k, v)| (k, v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d >= 0.05)
        .collect();
    used.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = used.iter().map(|(_, d)| d).sum();
    let parts: Vec<String> = used.iter().map(|(k, d)| format!("{k} {d:.1} s")).collect();
    format!("{total:.1} s in all: {}", parts.join(", "))
}

/// The rate at which this API server takes one kind of write of the hub's on `names`
/// (`concurrency` in flight), and its CPU per write: the same objects, the same request
/// shapes as the hub's — a merge patch of an annotation, and a server-side apply (forced,
/// the hub's field manager) of the status with one condition message changed.
pub async fn raw_write_rates(
    api: &Api<DynamicObject>,
    names: &[String],
    concurrency: usize,
    hub_name: &str,
) -> anyhow::Result<Vec<(&'static str, f64, f64)>> {
    use kube::api::{Patch, PatchParams};
    let server = format!("kube-apiserver {hub_name}");
    // Statuses read first, so the timed part is the writes alone.
    let mut statuses = Vec::with_capacity(names.len());
    for name in names {
        statuses.push(api.get(name).await?.data["status"].clone());
    }
    let mut out = Vec::new();
    for what in ["annotation merge patch", "status apply"] {
        let cpu0 = cpu_by_component();
        let start = Instant::now();
        let one = |i: usize, name: &String| {
            let api = api.clone();
            let name = name.clone();
            let mut status = statuses[i].clone();
            async move {
                if what == "status apply" {
                    if let Some(cs) = status["conditions"].as_array_mut() {
                        for c in cs.iter_mut().filter(|c| c["type"] == "Ready") {
                            c["message"] = serde_json::json!(format!("raw write {i}"));
                        }
                    }
                    let patch = serde_json::json!({
                        "apiVersion": "compute.pinterest.com/v1alpha1",
                        "kind": "PinterestService",
                        "status": status,
                    });
                    api.patch_status(
                        &name,
                        &PatchParams::apply("pinfed-hub").force(),
                        &Patch::Apply(&patch),
                    )
                    .await?;
                } else {
                    let patch = serde_json::json!({"metadata": {"annotations": {"bench.pinfed.dev/raw": i.to_string()}}});
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await?;
                }
                anyhow::Ok(())
            }
        };
        futures::stream::iter(names.iter().enumerate().map(|(i, n)| one(i, n)))
            .buffer_unordered(concurrency)
            .try_collect::<Vec<()>>()
            .await?;
        let took = start.elapsed().as_secs_f64();
        let cpu1 = cpu_by_component();
        let apiserver_cpu: f64 = cpu1
            .iter()
            .filter(|(k, _)| **k == server)
            .map(|(k, v)| v - cpu0.get(k).copied().unwrap_or(0.0))
            .sum();
        out.push((
            what,
            names.len() as f64 / took,
            1000.0 * apiserver_cpu / names.len() as f64,
        ));
    }
    Ok(out)
}

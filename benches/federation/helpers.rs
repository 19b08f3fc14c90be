//! Progress lines, waiting, latency distributions, watches and bulk creation.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
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

pub async fn wait_for<F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return Ok(());
        }
        if start.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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

/// The API server's mutating requests so far (`apiserver_request_total`), by
/// `resource[/subresource] VERB`.
pub async fn write_counts(client: &Client) -> BTreeMap<String, f64> {
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
        if !matches!(verb.as_str(), "POST" | "PUT" | "PATCH" | "APPLY" | "DELETE") {
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

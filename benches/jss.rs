//! Submissions per second through the Job Submission Service to the hub, with p50/p99
//! latency. Needs a running local topology (`e2e/up clusters/local-1.yaml`) and
//! PINFED_E2E_KUBECONFIG; it starts its own JSS (the `pinfed` binary of this build) on
//! loopback, installs the CRDs on the hub if needed, and removes what it created.
//!
//! `PINFED_E2E_KUBECONFIG=... cargo bench --bench jss`
//!
//! Knobs: PINFED_BENCH_SUBMISSIONS (default 400 per phase), PINFED_BENCH_CONCURRENCY
//! (default 8), PINFED_BENCH_HUB_CONTEXT (default `hub`). Phases:
//! - `inline-create`: distinct inline services into a namespace without a quota;
//! - `inline-create-quota`: the same into a namespace with a FederatedQuota (the JSS then
//!   lists the namespace's workloads for every submission, under a per-namespace lock);
//! - `artifact-resubmit`: the same reviewed artifact again and again (checksum
//!   verification and an unchanged server-side apply);
//! - `large-bodies`: two JSS replicas behind the client, PINFED_BENCH_LARGE (default 64)
//!   dry runs of ~1 MiB each (a service with thousands of env entries), 32 at once per
//!   replica; it prints each replica's peak resident memory (sampled every 20 ms) against
//!   the shipped 512Mi container limit, and how many waited for the memory budget.
//!   Meanwhile a browser logged in at replica A loads UI pages from both replicas in
//!   turn (the replicas share a session key): `ui-sessions` counts the pages each served
//!   with that one session; and one-pod services are sent from both replicas at once into
//!   a namespace whose quota holds half of them (`quota-race`: admitted, refused, stored).

use std::path::PathBuf;
use std::process::{Child, Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use pinfed::jss::client::JssClient;
use serde_json::{Value, json};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The tight quota's pods, and twice as many one-pod services sent at it.
const TIGHT_PODS: usize = 20;

fn service(name: &str) -> Value {
    json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
        "metadata": {"name": name},
        "spec": {
            "owner": {"team": "bench", "contact": "bench@pinterest.com"},
            "replicas": 1,
            "template": {"spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}
        }
    })
}

struct Figures {
    phase: &'static str,
    n: usize,
    concurrency: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    failures: usize,
}

impl Figures {
    fn pct(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let i = ((self.latencies.len() as f64 - 1.0) * p).round() as usize;
        self.latencies[i]
    }
    fn print(&self) {
        println!(
            "{:<22} {:>6} {:>5} {:>9.2} {:>10.1} {:>9.1} {:>9.1} {:>9.1} {:>6}",
            self.phase,
            self.n,
            self.concurrency,
            self.elapsed.as_secs_f64(),
            self.n as f64 / self.elapsed.as_secs_f64(),
            self.pct(0.50).as_secs_f64() * 1e3,
            self.pct(0.99).as_secs_f64() * 1e3,
            self.latencies
                .last()
                .copied()
                .unwrap_or_default()
                .as_secs_f64()
                * 1e3,
            self.failures,
        );
    }
}

async fn run_phase(
    phase: &'static str,
    client: &JssClient,
    n: usize,
    concurrency: usize,
    body: Arc<dyn Fn(usize) -> Value + Send + Sync>,
) -> Figures {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, next, body) = (client.clone(), next.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut failures = 0;
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let t = Instant::now();
                match client.post_json("/v1/submissions", &body(i)).await {
                    Ok(r) if r.is_success() => lat.push(t.elapsed()),
                    Ok(r) => {
                        failures += 1;
                        if failures <= 3 {
                            eprintln!("{phase}: submission {i}: {}", r.error_text());
                        }
                    }
                    Err(e) => {
                        failures += 1;
                        eprintln!("{phase}: submission {i}: {e:#}");
                    }
                }
            }
            (lat, failures)
        }));
    }
    let mut latencies = Vec::new();
    let mut failures = 0;
    for t in tasks {
        let (l, f) = t.await.expect("bench task");
        latencies.extend(l);
        failures += f;
    }
    let elapsed = started.elapsed();
    latencies.sort();
    Figures {
        phase,
        n,
        concurrency,
        elapsed,
        latencies,
        failures,
    }
}

/// A service whose JSON is about `bytes` long: env entries of 200-character values.
fn large_service(name: &str, bytes: usize) -> Value {
    let mut svc = service(name);
    let entry = |i: usize| json!({"name": format!("VAR_{i:05}"), "value": "x".repeat(200)});
    let per = entry(0).to_string().len() + 1;
    let env: Vec<Value> = (0..bytes / per).map(entry).collect();
    svc["spec"]["template"]["spec"]["containers"][0]["env"] = Value::Array(env);
    svc
}

/// Resident memory of `pid` now (KiB), from /proc.
/// Logs in at the UI of the JSS on `port`: the session cookie (`name=value`).
fn ui_login(port: u16, token: &str) -> anyhow::Result<String> {
    let body = format!("token={token}&next=%2Fui%2Ffleet");
    let out = raw_http(
        port,
        &format!(
            "POST /ui/login HTTP/1.1\r\nHost: jss\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )?;
    out.lines()
        .find_map(|l| {
            let v = l
                .get(..12)
                .filter(|h| h.eq_ignore_ascii_case("set-cookie: "))
                .and_then(|_| l.get(12..))?;
            Some(v.split(';').next()?.to_string())
        })
        .ok_or_else(|| anyhow::anyhow!("no session cookie from the login: {out}"))
}

/// `GET path` with a cookie: the status.
fn ui_get(port: u16, path: &str, cookie: &str) -> anyhow::Result<u16> {
    let out = raw_http(
        port,
        &format!(
            "GET {path} HTTP/1.1\r\nHost: jss\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
        ),
    )?;
    Ok(out
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0))
}

fn raw_http(port: u16, request: &str) -> anyhow::Result<String> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port))?;
    c.set_read_timeout(Some(Duration::from_secs(30)))?;
    c.write_all(request.as_bytes())?;
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    Ok(out)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// One counter's value from a Prometheus text page.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The metrics page at `127.0.0.1:port` (one plain HTTP/1.1 GET).
async fn metrics_page(port: u16) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return String::new();
    };
    let _ = s
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: jss\r\nConnection: close\r\n\r\n")
        .await;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    out
}

struct KillOnDrop(Child);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() -> ExitCode {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing useful either way.
    let Ok(kubeconfig) = std::env::var("PINFED_E2E_KUBECONFIG") else {
        eprintln!(
            "benches/jss: PINFED_E2E_KUBECONFIG is not set. This benchmark submits to a real \
             hub: run `e2e/up clusters/local-1.yaml` and export \
             PINFED_E2E_KUBECONFIG=<the printed path>, then `cargo bench --bench jss`."
        );
        return ExitCode::FAILURE;
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    match rt.block_on(bench(PathBuf::from(kubeconfig))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("benches/jss: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn bench(kubeconfig: PathBuf) -> anyhow::Result<()> {
    let n = env_or("PINFED_BENCH_SUBMISSIONS", 400);
    let concurrency = env_or("PINFED_BENCH_CONCURRENCY", 8).max(1);
    let context = std::env::var("PINFED_BENCH_HUB_CONTEXT").unwrap_or_else(|_| "hub".into());
    let kc = Kubeconfig::read_from(&kubeconfig)?;
    let opts = KubeConfigOptions {
        context: Some(context.clone()),
        ..Default::default()
    };
    let hub = kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &opts).await?)?;

    // CRDs on the hub (`pinfed join` installs them too; the bench needs no members).
    let crds: Api<CustomResourceDefinition> = Api::all(hub.clone());
    for crd in pinfed::api::workload::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(
            &name,
            &PatchParams::apply("pinfed-bench").force(),
            &Patch::Apply(&crd),
        )
        .await?;
    }
    for crd in pinfed::api::workload::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let c = crds.get(&name).await?;
            let established = c
                .status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "CRD {name} not established");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // Namespaces, one with a quota.
    let id = format!("{:x}", std::process::id());
    let (plain_ns, quota_ns) = (format!("jssb-{id}"), format!("jssb-q-{id}"));
    // A tight quota both replicas admit into at once during the large bodies.
    let tight_ns = format!("jssb-t-{id}");
    let nss: Api<Namespace> = Api::all(hub.clone());
    for ns in [&plain_ns, &quota_ns, &tight_ns] {
        nss.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await?;
    }
    let quota_api: Api<pinfed::api::federation::FederatedQuota> =
        Api::namespaced(hub.clone(), &quota_ns);
    quota_api
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "FederatedQuota",
                "metadata": {"name": "bench"},
                "spec": {"hard": {"cpu": "100000", "memory": "100000Gi", "pods": "1000000"}}
            }))?,
        )
        .await?;
    Api::<pinfed::api::federation::FederatedQuota>::namespaced(hub.clone(), &tight_ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "FederatedQuota",
                "metadata": {"name": "tight"},
                "spec": {"hard": {"pods": TIGHT_PODS.to_string()}}
            }))?,
        )
        .await?;

    // The JSS, with a token file and an artifact store of its own.
    let dir = std::env::temp_dir().join(format!("pinfed-jss-bench-{id}"));
    let store = dir.join("artifacts");
    std::fs::create_dir_all(&store)?;
    std::fs::write(
        dir.join("tokens.yaml"),
        "tokens: [{user: bench, token: bench-token, teams: [bench]}]\n\
         teams: {bench: {namespaces: [\"jssb-*\"], inline: true}}\n",
    )?;
    std::fs::set_permissions(
        dir.join("tokens.yaml"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )?;
    // One UI session key for every replica (sessions sealed in their cookies).
    std::fs::write(
        dir.join("ui-session.key"),
        pinfed::jss::ui::session::random_token().map_err(|e| anyhow::anyhow!("{e}"))?,
    )?;
    std::fs::set_permissions(
        dir.join("ui-session.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )?;
    pinfed::jss::artifacts::ArtifactStore::new(&store).publish(
        &pinfed::jss::artifacts::ArtifactRef {
            name: "bench-svc".into(),
            version: "1.0.0".into(),
        },
        &pinfed::api::yaml::to_string(&service("bench-artifact"))?,
    )?;
    // A JSS replica with default flags: (process, API port, metrics port).
    let start_jss = |log_name: &str| -> anyhow::Result<(KillOnDrop, u16, u16)> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log = std::fs::File::create(dir.join(log_name))?;
        let child = Command::new(env!("CARGO_BIN_EXE_pinfed"))
            .args(["jss", "--context", &context])
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{metrics_port}"))
            .arg("--tokens")
            .arg(dir.join("tokens.yaml"))
            .arg("--artifacts")
            .arg(&store)
            .arg("--ui-session-key-file")
            .arg(dir.join("ui-session.key"))
            // Its admission locks in a namespace of its own (the hub may have no
            // pinfed-system: the bench deploys nothing there).
            .arg("--lock-namespace")
            .arg(&plain_ns)
            // One user drives every phase: its per-principal budget would be the bound.
            .args([
                "--principal-burst",
                "1000000",
                "--principal-per-sec",
                "1000000",
            ])
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "warn")
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        Ok((KillOnDrop(child), port, metrics_port))
    };
    let wait_listening = |port: u16, log_name: &str| {
        let log = dir.join(log_name);
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "the JSS did not start; see {}",
                    log.display()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            anyhow::Ok(())
        }
    };
    let (jss, port, metrics_port) = start_jss("jss.log")?;
    wait_listening(port, "jss.log").await?;
    let client = JssClient::new(
        &format!("http://127.0.0.1:{port}"),
        Some("bench-token".into()),
        None,
    )?;

    let mut results = Vec::new();
    let ns1 = plain_ns.clone();
    results.push(
        run_phase(
            "inline-create",
            &client,
            n,
            concurrency,
            Arc::new(move |i| json!({"resource": service(&format!("svc-{i}")), "namespace": ns1})),
        )
        .await,
    );
    let ns2 = quota_ns.clone();
    results.push(
        run_phase(
            "inline-create-quota",
            &client,
            n / 4,
            concurrency,
            Arc::new(move |i| json!({"resource": service(&format!("svc-{i}")), "namespace": ns2})),
        )
        .await,
    );
    let ns3 = plain_ns.clone();
    results.push(
        run_phase(
            "artifact-resubmit",
            &client,
            n,
            concurrency,
            Arc::new(move |_| {
                json!({"artifact": {"name": "bench-svc", "version": "1.0.0"}, "namespace": ns3})
            }),
        )
        .await,
    );

    // Two replicas, ~1 MiB dry runs, 32 at once on each: peak memory of each.
    let large = env_or("PINFED_BENCH_LARGE", 64);
    let mut memory_lines = Vec::new();
    if large > 0 {
        let (jss_b, port_b, metrics_b) = start_jss("jss-b.log")?;
        wait_listening(port_b, "jss-b.log").await?;
        let client_b = JssClient::new(
            &format!("http://127.0.0.1:{port_b}"),
            Some("bench-token".into()),
            None,
        )?;
        let pids = [jss.0.id(), jss_b.0.id()];
        let body =
            Arc::new(json!({"resource": large_service("large", 1_000_000), "namespace": plain_ns}));
        let body_len = body.to_string().len();
        let idle = pids.map(rss_kib);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut peak = [0u64; 2];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for (p, pid) in peak.iter_mut().zip(pids) {
                        *p = (*p).max(rss_kib(pid));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                peak
            })
        };
        // A browser's session from A, its pages asked of A and B in turn meanwhile.
        let cookie = ui_login(port, "bench-token")?;
        let browsing = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut served = [(0u32, 0u32); 2];
                let mut lat = Vec::new();
                let mut i = 0usize;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let (k, p) = if i.is_multiple_of(2) {
                        (0, port)
                    } else {
                        (1, port_b)
                    };
                    let t = Instant::now();
                    let status = ui_get(p, "/ui/fleet", &cookie).unwrap_or(0);
                    lat.push(t.elapsed());
                    served[k].1 += 1;
                    if status == 200 {
                        served[k].0 += 1;
                    }
                    i += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                (served, lat)
            })
        };
        // One-pod services into the tight quota, from both replicas at once, meanwhile.
        let racing: Vec<_> = (0..2 * TIGHT_PODS)
            .map(|i| {
                let c = if i.is_multiple_of(2) {
                    client.clone()
                } else {
                    client_b.clone()
                };
                let body =
                    json!({"resource": service(&format!("tight-{i}")), "namespace": tight_ns});
                tokio::spawn(async move {
                    c.post_json("/v1/submissions", &body).await.map(|r| {
                        (
                            r.status,
                            r.body["reason"].as_str().unwrap_or("").to_string(),
                        )
                    })
                })
            })
            .collect();
        let started = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..large {
            let c = if i % 2 == 0 {
                client.clone()
            } else {
                client_b.clone()
            };
            let body = body.clone();
            tasks.push(tokio::spawn(async move {
                let t = Instant::now();
                let r = c.post_json("/v1/submissions?dryRun=true", &body).await;
                (t.elapsed(), r.map(|r| (r.status, r.error_text())))
            }));
        }
        let mut lat = Vec::new();
        let mut failed = 0;
        for t in tasks {
            let (d, r) = t.await.expect("bench task");
            match r {
                Ok((200, _)) => lat.push(d),
                Ok((code, text)) => {
                    failed += 1;
                    if failed <= 3 {
                        eprintln!("large-bodies: {code}: {text}");
                    }
                }
                Err(e) => {
                    failed += 1;
                    eprintln!("large-bodies: {e:#}");
                }
            }
        }
        let elapsed = started.elapsed();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let peak = sampler.join().expect("sampler");
        let (served, mut page_lat) = browsing.join().expect("browsing");
        let (mut admitted, mut refused, mut other) = (0, 0, Vec::new());
        for t in racing {
            match t.await.expect("race task") {
                Ok((201, _)) => admitted += 1,
                Ok((409, reason)) if reason == "QuotaExceeded" => refused += 1,
                Ok((code, reason)) => other.push(format!("{code} {reason}")),
                Err(e) => other.push(format!("{e:#}")),
            }
        }
        // What the hub holds in that namespace: never past the quota.
        let stored =
            Api::<pinfed::api::service::PinterestService>::namespaced(hub.clone(), &tight_ns)
                .list(&Default::default())
                .await?
                .items
                .len();
        memory_lines.push(format!(
            "quota-race: {} one-pod services into a quota of {TIGHT_PODS} pods, half to each replica, during the large bodies: {admitted} admitted, {refused} refused (QuotaExceeded), {} other; the hub holds {stored}",
            2 * TIGHT_PODS,
            other.len()
        ));
        anyhow::ensure!(
            stored <= TIGHT_PODS && admitted <= TIGHT_PODS && other.is_empty(),
            "the quota race: {admitted} admitted, {stored} stored (at most {TIGHT_PODS}), other answers {other:?}"
        );
        page_lat.sort();
        let page_p99 = page_lat
            .get(page_lat.len().saturating_sub(1) * 99 / 100)
            .copied()
            .unwrap_or_default();
        memory_lines.push(format!(
            "ui-sessions: one session made at A; during the large bodies A served {}/{} and B {}/{} of its pages (200), page p99 {} ms",
            served[0].0,
            served[0].1,
            served[1].0,
            served[1].1,
            page_p99.as_millis()
        ));
        lat.sort();
        let waits = |port: u16| async move {
            let text = metrics_page(port).await;
            metric(&text, "pinfed_jss_memory_waits_total")
        };
        let (wa, wb) = (waits(metrics_port).await, waits(metrics_b).await);
        results.push(Figures {
            phase: "large-bodies",
            n: large,
            concurrency: 64.min(large),
            elapsed,
            latencies: lat,
            failures: failed,
        });
        memory_lines.push(format!(
            "large-bodies: {large} dry runs of {body_len} bytes over 2 replicas, 32 at once each; \
             replica A idle {} MiB -> peak {} MiB, replica B idle {} MiB -> peak {} MiB \
             (shipped limit 512 MiB); waited for the memory budget: {wa} + {wb}",
            idle[0] / 1024,
            peak[0] / 1024,
            idle[1] / 1024,
            peak[1] / 1024,
        ));
        drop(jss_b);
    }

    println!(
        "JSS submissions to the hub ({context} in {})",
        kubeconfig.display()
    );
    println!(
        "{:<22} {:>6} {:>5} {:>9} {:>10} {:>9} {:>9} {:>9} {:>6}",
        "PHASE", "N", "CONC", "SECONDS", "SUBMIT/S", "P50 MS", "P99 MS", "MAX MS", "FAIL"
    );
    for r in &results {
        r.print();
    }
    for l in &memory_lines {
        println!("{l}");
    }

    for ns in [&plain_ns, &quota_ns, &tight_ns] {
        let _ = nss.delete(ns, &DeleteParams::default()).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    anyhow::ensure!(
        results.iter().all(|r| r.failures == 0),
        "some submissions failed (see above)"
    );
    Ok(())
}

//! Expansion cost per kind: the pure `expand::expand` with the built-in runtime profile
//! for a typical PinterestService (the target: at least 20,000 expansions/s on one
//! core), a 100-shard PinterestJobSet, and a PyTorch PinterestTrainingJob. Every case is
//! reported as a throughput (`elem/s` = expansions per second).
//!
//! Two groups: `expand` measures wall-clock time (criterion's default); `expand-cpu`
//! measures the benchmark thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), which stays
//! meaningful on a shared machine where other processes take the cores — its `elem/s` is
//! expansions per CPU-second of one core.
//!
//! Each case has floors measured in the same run, so its ratio to them holds from one
//! machine to the next: `floor/serialize-output/<case>` writes the expanded objects as
//! JSON (`serde_json::to_vec`, what sending them to the API server costs at least) and
//! `floor/clone-output/<case>` copies them (the allocations the output itself needs).
//!
//! A third group, `trace-off`, measures what the agent's trace spans cost with no exporter
//! configured (docs/observability.md).
//!
//! `cargo bench --bench expansion -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use pinfed::api::parse::{Document, parse_one};
use pinfed::api::workload::AnyWorkload;
use pinfed::expand::{ExpandInput, expand};

// The allocator of the `pinfed` binary (src/main.rs), so the figures are the agent's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn workload(text: &str) -> AnyWorkload {
    match parse_one(text).expect("a valid example") {
        Document::Workload(w) => w,
        _ => panic!("not a workload"),
    }
}

/// `examples/service.yaml` as the agent sees it in a member: with a uid (owner references)
/// and a creation time (expiry).
fn service() -> AnyWorkload {
    let mut w = workload(include_str!("../examples/service.yaml"));
    let AnyWorkload::Service(s) = &mut w else {
        panic!("examples/service.yaml is a PinterestService")
    };
    s.metadata.uid = Some("6f1c2d3e-0000-4000-8000-000000000001".into());
    s.metadata.creation_timestamp = Some(Time(
        Timestamp::from_second(1_750_000_000).expect("a valid time"),
    ));
    w
}

/// `examples/jobset.yaml` with 100 shards and no parallelism limit: 100 Jobs, 100
/// ConfigMaps, 100 PVCs.
fn jobset() -> AnyWorkload {
    let mut w = workload(include_str!("../examples/jobset.yaml"));
    let AnyWorkload::JobSet(j) = &mut w else {
        panic!("examples/jobset.yaml is a PinterestJobSet")
    };
    j.spec.shards = 100;
    j.spec.parallelism = None;
    j.metadata.uid = Some("6f1c2d3e-0000-4000-8000-000000000002".into());
    w
}

fn training() -> AnyWorkload {
    let mut w = workload(include_str!("../examples/training-pytorch.yaml"));
    let AnyWorkload::TrainingJob(t) = &mut w else {
        panic!("examples/training-pytorch.yaml is a PinterestTrainingJob")
    };
    t.metadata.uid = Some("6f1c2d3e-0000-4000-8000-000000000003".into());
    w
}

/// CPU time of the calling thread.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Criterion measurement of the benchmark thread's CPU time (criterion runs the routine on
/// the calling thread), in nanoseconds like wall time, so wall time's formatter applies.
struct ThreadCpuTime;

static WALL: WallTime = WallTime;

impl Measurement for ThreadCpuTime {
    type Intermediate = Duration;
    type Value = Duration;
    fn start(&self) -> Duration {
        thread_cpu_time()
    }
    fn end(&self, start: Duration) -> Duration {
        thread_cpu_time().saturating_sub(start)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, v: &Duration) -> f64 {
        v.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        WALL.formatter()
    }
}

fn run<M: Measurement>(
    c: &mut Criterion<M>,
    group: &str,
    name: &str,
    w: &AnyWorkload,
    objects: usize,
) {
    let input = ExpandInput {
        cluster: Some("use1a"),
        ..ExpandInput::new(w.as_ref())
    };
    let out = expand(&input).expect("the example expands");
    assert_eq!(out.len(), objects, "{name}: objects generated");
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(1));
    g.bench_function(name, |b| b.iter(|| expand(black_box(&input)).unwrap()));
    g.bench_function(format!("floor/serialize-output/{name}"), |b| {
        b.iter(|| serde_json::to_vec(black_box(&out)).unwrap())
    });
    g.bench_function(format!("floor/clone-output/{name}"), |b| {
        b.iter(|| black_box(&out).clone())
    });
    g.finish();
}

fn cases<M: Measurement>(c: &mut Criterion<M>, group: &str) {
    // ConfigMap, Deployment, Service, Ingress, PodDisruptionBudget.
    run(c, group, "service", &service(), 5);
    // 100 × (ConfigMap, PVC, Job).
    run(c, group, "jobset-100-shards", &jobset(), 300);
    // Headless Service + 4 replica Jobs (Master + 3 Workers).
    run(c, group, "training-pytorch", &training(), 5);
}

fn wall(c: &mut Criterion) {
    cases(c, "expand");
    trace_off(c);
}

/// What the agent's trace spans cost when no exporter is configured (the default): the
/// daemon's own subscriber (logs at `info`, no span layer), a service's expansion inside
/// the agent's spans (`agent.reconcile` with its fields, the slice's context followed,
/// `expand`), against the same expansion bare.
fn trace_off(c: &mut Criterion) {
    use pinfed::controller::trace::{TraceArgs, follow, init_tracing};
    let _logs = init_tracing("bench", &TraceArgs::default()).expect("the daemon's logging");
    let w = service();
    let input = ExpandInput {
        cluster: Some("use1a"),
        ..ExpandInput::new(w.as_ref())
    };
    let annotations = std::collections::BTreeMap::from([(
        pinfed::controller::trace::ANNOTATION_TRACEPARENT.to_string(),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string(),
    )]);
    let mut g = c.benchmark_group("trace-off");
    g.throughput(Throughput::Elements(1));
    g.bench_function("expand-service/bare", |b| {
        b.iter(|| expand(black_box(&input)).unwrap())
    });
    g.bench_function("expand-service/in-spans", |b| {
        b.iter(|| {
            let span = tracing::trace_span!(target: "pinfed::trace", "agent.reconcile", member = "use1a", workload = "ads/web", generation = 3);
            follow(&span, Some(black_box(&annotations)));
            span.in_scope(|| {
                tracing::trace_span!(target: "pinfed::trace", "expand")
                    .in_scope(|| expand(black_box(&input)).unwrap())
            })
        })
    });
    g.bench_function("spans-alone", |b| {
        b.iter(|| {
            let span = tracing::trace_span!(target: "pinfed::trace", "agent.reconcile", member = "use1a", workload = "ads/web", generation = 3);
            follow(&span, Some(black_box(&annotations)));
            span.in_scope(|| tracing::trace_span!(target: "pinfed::trace", "expand").in_scope(|| 1))
        })
    });
    g.finish();
}

fn cpu(c: &mut Criterion<ThreadCpuTime>) {
    cases(c, "expand-cpu");
}

criterion_group!(wall_time, wall);
criterion_group! {
    name = cpu_time;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = cpu
}
criterion_main!(wall_time, cpu_time);

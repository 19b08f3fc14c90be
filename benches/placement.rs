//! Placement decision cost: a service split over 3 (local-3) and 50 / 100 simulated
//! clusters, a re-plan from a current decision, a job set by shard index, a gang, and a
//! burst of decisions through the assume-and-deduct ledger.
//!
//! Floors over the same 100 clusters, measured in the same run so the headline's ratio to
//! them holds from one machine to the next: `floor/room-per-node/100` only counts how many
//! pods fit on each of the 2,000 nodes (the arithmetic no placement can skip),
//! `floor/clone-outcome/100` copies the outcome (the allocations of the output itself) and
//! `floor/serialize-decision/100` writes the decision as JSON, as the hub stores it.
//!
//! `cargo bench --bench placement`

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;
use std::time::SystemTime;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use pinfed::api::quantity::Milli;
use pinfed::placement::{
    ClusterView, Count, Demand, GangRole, Ledger, NodeRoom, PlacementPolicy, PlanInput, PodShape,
    Resources, plan,
};
use pinfed::topology::Topology;

fn local3() -> Vec<ClusterView> {
    let t = Topology::from_yaml("local-3.yaml", include_str!("../clusters/local-3.yaml"))
        .expect("local-3 topology");
    ClusterView::from_topology(&t)
}

/// `n` clusters in 3 zones with 20 nodes of 32 cores / 128Gi / 110 pods each.
fn synthetic(n: usize) -> Vec<ClusterView> {
    (0..n)
        .map(|i| ClusterView {
            name: format!("member-{i:03}"),
            zone: Some(format!("zone-{}", i % 3)),
            region: Some("region".into()),
            labels: BTreeMap::from([("tier".to_string(), "prod".to_string())]),
            taints: vec![],
            weight: 1 + (i % 3) as u32,
            ready: true,
            nodes: (0..20)
                .map(|k| NodeRoom {
                    name: format!("member-{i:03}-node-{k}"),
                    labels: BTreeMap::new(),
                    taints: vec![],
                    free: Resources {
                        cpu: Milli(32_000 - (k as i128 % 5) * 1_000),
                        memory: Milli(128 * (1i128 << 30) * 1000),
                        gpu: if k < 2 { 8 } else { 0 },
                        pods: 110,
                    },
                })
                .collect(),
        })
        .collect()
}

fn pod(cpu_milli: i128, gpu: i64) -> PodShape {
    PodShape {
        resources: Resources::pod(Milli(cpu_milli), Milli((1i128 << 30) * 1000), gpu),
        ..PodShape::default()
    }
}

fn decide(
    clusters: &[ClusterView],
    demand: &Demand,
    current: Option<&pinfed::placement::Decision>,
) -> pinfed::placement::Outcome {
    plan(&PlanInput {
        clusters,
        policy: &PlacementPolicy::default(),
        demand,
        quota: None,
        current,
    })
}

fn bench(c: &mut Criterion) {
    let service = Demand {
        member_pods: Default::default(),
        member_roles: Default::default(),
        pod: pod(500, 0),
        count: Count::Replicas(30),
    };
    let mut g = c.benchmark_group("divided_30_replicas");
    for (name, clusters) in [
        ("3", local3()),
        ("50", synthetic(50)),
        ("100", synthetic(100)),
    ] {
        g.bench_with_input(BenchmarkId::from_parameter(name), &clusters, |b, cl| {
            b.iter(|| decide(black_box(cl), black_box(&service), None))
        });
    }
    g.finish();

    let hundred = synthetic(100);
    let outcome = decide(&hundred, &service, None);
    let mut g = c.benchmark_group("floor");
    g.bench_function("room-per-node/100", |b| {
        let request = service.pod.resources.as_pod_request();
        b.iter(|| {
            black_box(&hundred)
                .iter()
                .flat_map(|c| &c.nodes)
                .map(|n| request.copies_in(&n.free))
                .fold(0u64, u64::saturating_add)
        })
    });
    g.bench_function("clone-outcome/100", |b| {
        b.iter(|| black_box(&outcome).clone())
    });
    g.bench_function("serialize-decision/100", |b| {
        b.iter(|| serde_json::to_vec(black_box(&outcome.decision)).unwrap())
    });
    g.finish();

    let clusters = synthetic(50);
    let current = decide(&clusters, &service, None).decision;
    let scaled = Demand {
        member_pods: Default::default(),
        member_roles: Default::default(),
        pod: pod(500, 0),
        count: Count::Replicas(45),
    };
    c.bench_function("replan_30_to_45_over_50", |b| {
        b.iter(|| decide(black_box(&clusters), black_box(&scaled), Some(&current)))
    });

    let jobset = Demand {
        member_pods: Default::default(),
        member_roles: Default::default(),
        pod: pod(1000, 0),
        count: Count::Shards {
            total: 1000,
            completed: (0..100).collect::<BTreeSet<u32>>(),
            parallelism: None,
        },
    };
    c.bench_function("jobset_1000_shards_over_50", |b| {
        b.iter(|| decide(black_box(&clusters), black_box(&jobset), None))
    });

    let gang = Demand {
        member_pods: Default::default(),
        member_roles: Default::default(),
        pod: pod(4000, 4),
        count: Count::Gang(vec![
            GangRole {
                role: "Master".into(),
                replicas: 1,
                pod: None,
            },
            GangRole {
                role: "Worker".into(),
                replicas: 3,
                pod: None,
            },
        ]),
    };
    c.bench_function("gang_4_over_50", |b| {
        b.iter(|| decide(black_box(&clusters), black_box(&gang), None))
    });

    // A burst: 100 services decided one after another over 100 clusters, each seeing the
    // reservations of the ones before.
    c.bench_function("burst_100_decisions_with_ledger_over_100", |b| {
        b.iter(|| {
            let mut ledger = Ledger::new();
            let mut view = hundred.clone();
            for i in 0..100 {
                let o = decide(&view, &service, None);
                ledger.reserve(&format!("w{i}"), &o, SystemTime::UNIX_EPOCH);
                view.clone_from(&hundred);
                ledger.apply(&mut view, None);
            }
            ledger
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);

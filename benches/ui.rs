//! The web UI's workloads page over the JSS's cache of the hub: rows for what the viewer
//! may see, filter choices, sort and one page of 50, rendered to HTML — the work of one
//! request (and of every live refresh of an open page) at 1,000 and 10,000 workloads.
//! `cold` builds every row from its object (the first request after a start); the other
//! cases run as the JSS does, with the rows cached per object version (`RowCache`).
//! Pure: synthetic hub objects with a three-cluster split and member statuses, no cluster.
//! Beside it, the floor: `serde_json::to_vec` of the same objects (the cost of merely
//! reading each once), so the ratio holds from one machine to the next.
//!
//! `cargo bench --bench ui`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use pinfed::api::workload::WorkloadKind;
use pinfed::jss::ui::model::{Filter, Grouping, RowCache};
use pinfed::jss::ui::pages::workloads_page;
use serde_json::json;

const CLUSTERS: [&str; 3] = ["use1a", "use1b", "use1c"];

/// `n` services in 50 namespaces of 10 teams, each split 2/2/2 with member statuses.
fn hub_objects(n: usize) -> Vec<(WorkloadKind, Arc<DynamicObject>)> {
    (0..n)
        .map(|i| {
            let team = format!("team-{}", i % 10);
            let placements: Vec<_> = CLUSTERS
                .iter()
                .map(|c| json!({"cluster": c, "replicas": 2}))
                .collect();
            let clusters: Vec<_> = CLUSTERS
                .iter()
                .map(|c| {
                    json!({"cluster": c, "observedTime": "2026-11-25T10:00:00Z", "observedGeneration": 1,
                       "replicas": 2, "readyReplicas": 2, "availableReplicas": 2})
                })
                .collect();
            let o: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
                "metadata": {"name": format!("svc-{i:05}"), "namespace": format!("ns-{}", i % 50),
                    "uid": format!("uid-{i}"), "resourceVersion": format!("{}", 1000 + i),
                    "creationTimestamp": "2026-11-25T09:00:00Z"},
                "spec": {
                    "owner": {"team": team, "contact": "team@pinterest.com"},
                    "replicas": 6,
                    "template": {"spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}
                },
                "status": {
                    "observedGeneration": 1, "replicas": 6, "readyReplicas": 6, "availableReplicas": 6,
                    "placement": {"strategy": "Divided", "placements": placements, "unplaced": 0},
                    "clusters": clusters,
                    "conditions": [
                        {"type": "Ready", "status": "True", "reason": "AllReady", "message": "",
                         "lastTransitionTime": "2026-11-25T09:01:00Z"},
                        {"type": "Placed", "status": "True", "reason": "Placed", "message": "",
                         "lastTransitionTime": "2026-11-25T09:00:01Z"}
                    ]
                }
            }))
            .expect("a hub object");
            (WorkloadKind::Service, Arc::new(o))
        })
        .collect()
}

fn bench_workloads_page(c: &mut Criterion) {
    let members: Vec<String> = CLUSTERS.iter().map(|c| c.to_string()).collect();
    let now = Timestamp::now();
    let mut g = c.benchmark_group("ui_workloads_page");
    g.sample_size(20);
    for n in [1_000usize, 10_000] {
        let objects = hub_objects(n);
        let cases = [
            ("first-page", Filter::default()),
            (
                "page-100-by-team",
                Filter {
                    group: Grouping::Team,
                    page: 100,
                    ..Filter::default()
                },
            ),
            (
                "cluster-and-name-filter",
                Filter {
                    cluster: Some("use1b".into()),
                    name: Some("svc-00".into()),
                    ..Filter::default()
                },
            ),
        ];
        let mut cache = RowCache::default();
        cache.rows(&objects);
        g.bench_with_input(BenchmarkId::new("cold", n), &objects, |b, objects| {
            b.iter(|| {
                let rows = RowCache::default().rows(objects);
                let html = workloads_page(rows, &members, &Filter::default(), None, now);
                black_box(html.len())
            })
        });
        for (case, filter) in cases {
            g.bench_with_input(BenchmarkId::new(case, n), &objects, |b, objects| {
                b.iter(|| {
                    let rows = cache.rows(objects);
                    let html = workloads_page(rows, &members, &filter, None, now);
                    black_box(html.len())
                })
            });
        }
        // A team that sees one namespace in 50: the rows it may not see cost a check each.
        g.bench_with_input(
            BenchmarkId::new("one-namespace-viewer", n),
            &objects,
            |b, objects| {
                b.iter(|| {
                    let rows = cache
                        .rows(objects)
                        .into_iter()
                        .filter(|r| r.namespace == "ns-7")
                        .collect();
                    let html = workloads_page(rows, &members, &Filter::default(), None, now);
                    black_box(html.len())
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("floor-to-json", n),
            &objects,
            |b, objects| {
                b.iter(|| {
                    let bytes: usize = objects
                        .iter()
                        .map(|(_, o)| serde_json::to_vec(o.as_ref()).expect("json").len())
                        .sum();
                    black_box(bytes)
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, bench_workloads_page);
criterion_main!(benches);

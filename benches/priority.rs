//! Priority and preemption cost on the hub's code path (`hub::workloads::decide`).
//!
//! The queue (`placement::priority::WaitQueue`): 1,000 waiting workloads of every count
//! kind (replicas, shards, gangs) over 20 members of 10 nodes. `standing` (one workload's
//! place: a rank for every entry), `ordered` (the whole queue sorted) and `first_ahead`
//! for the last-ranked workload with the hub's `could_use` (one `placement::plan` of the
//! one-unit demand over the 20 members per ask) and the hub's limit of 20 asks, in the
//! worst case: the room is small, none ahead can use it, so all 20 are asked. Next to it
//! `could_use` once, the unit of that cost.
//!
//! Preemption (`placement::preempt::choose`): 20 members of 10 nodes (8 cpu each), every
//! member full of lower-priority pods — a job set with 2 shard pods of 3 cpu on each node
//! and a service with 5 replicas of 1 cpu (one may go, its disruption budget) — so that
//! nothing fits without evicting: a gang of 2 × 4.5 cpu, 10 replicas of 4 cpu, and a gang
//! of 2 × 9 cpu that fits nowhere (`None` after looking at every member).
//!
//! Each case checks once, before it is measured, that its fixture does what it says.
//!
//! `cargo bench --bench priority`

use std::cell::Cell;
use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use pinfed::api::quantity::Milli;
use pinfed::hub::workloads::priority::could_use;
use pinfed::placement::preempt::{
    Candidate, MemberCandidates, PreemptInput, Preemption, VictimKind, VictimPod, choose,
};
use pinfed::placement::priority::{Aging, Priority, WaitQueue, Waiting, WaitingFor};
use pinfed::placement::{
    ClusterView, Count, Demand, GangRole, NodeRoom, PlacementPolicy, PodShape, Resources,
};

const MEMBERS: usize = 20;
const NODES: usize = 10;
const GI: i128 = 1 << 30;

/// What a node has in all: 8 cpu, 32Gi, 110 pods.
const NODE_CPU: i128 = 8_000;
const NODE_MEMORY: i128 = 32 * GI;
const NODE_PODS: i64 = 110;

/// The running victims: per node 2 shard pods of 3 cpu / 4Gi; on nodes 0..5 one service
/// replica of 1 cpu / 1Gi.
const SHARD_CPU: i128 = 3_000;
const SHARD_MEMORY: i128 = 4 * GI;
const SHARDS_PER_NODE: usize = 2;
const REPLICA_CPU: i128 = 1_000;
const REPLICA_MEMORY: i128 = GI;
const REPLICAS: usize = 5;

/// `cpu` milli-cores and `memory` bytes, one pod.
fn request(cpu: i128, memory: i128) -> Resources {
    Resources::pod(Milli(cpu), Milli(memory * 1000), 0)
}

fn shape(cpu: i128, memory: i128) -> PodShape {
    PodShape {
        resources: request(cpu, memory),
        ..PodShape::default()
    }
}

fn member_name(m: usize) -> String {
    format!("member-{m:02}")
}

fn node_name(m: usize, k: usize) -> String {
    format!("member-{m:02}-node-{k}")
}

/// 20 members in 3 zones, 10 nodes each, with the victims' pods running: node room left
/// is 1 cpu (nodes 0..5, a shard pair and a replica) or 2 cpu (nodes 5..10).
fn full_members() -> Vec<ClusterView> {
    (0..MEMBERS)
        .map(|m| ClusterView {
            name: member_name(m),
            zone: Some(format!("zone-{}", m % 3)),
            region: Some("region".into()),
            labels: BTreeMap::from([("tier".to_string(), "prod".to_string())]),
            taints: vec![],
            weight: 1,
            ready: true,
            nodes: (0..NODES)
                .map(|k| {
                    let replicas = usize::from(k < REPLICAS) as i128;
                    let shards = SHARDS_PER_NODE as i128;
                    NodeRoom {
                        name: node_name(m, k),
                        labels: BTreeMap::new(),
                        taints: vec![],
                        free: Resources {
                            cpu: Milli(NODE_CPU - shards * SHARD_CPU - replicas * REPLICA_CPU),
                            memory: Milli(
                                (NODE_MEMORY - shards * SHARD_MEMORY - replicas * REPLICA_MEMORY)
                                    * 1000,
                            ),
                            gpu: 0,
                            pods: NODE_PODS - SHARDS_PER_NODE as i64 - replicas as i64,
                        },
                    }
                })
                .collect(),
        })
        .collect()
}

/// The lower-priority pods of every member, as `hub::workloads::priority::candidates`
/// builds them: a job set (priority 100 + member index, so the members' costs differ and
/// member-00 is cheapest) and a service (priority 50, `can_lose` 1 as its default
/// disruption budget allows).
fn victims() -> Vec<MemberCandidates> {
    (0..MEMBERS)
        .map(|m| {
            let shards = (0..NODES)
                .flat_map(|k| (0..SHARDS_PER_NODE).map(move |s| (k, s)))
                .map(|(k, s)| VictimPod {
                    node: node_name(m, k),
                    resources: request(SHARD_CPU, SHARD_MEMORY),
                    shard: Some((k * SHARDS_PER_NODE + s) as u32),
                })
                .collect();
            let replicas = (0..REPLICAS)
                .map(|k| VictimPod {
                    node: node_name(m, k),
                    resources: request(REPLICA_CPU, REPLICA_MEMORY),
                    shard: None,
                })
                .collect();
            MemberCandidates {
                member: member_name(m),
                candidates: vec![
                    Candidate {
                        key: format!("team-b/PinterestJobSet/batch-{m:02}"),
                        priority: 100 + m as i32,
                        kind: VictimKind::Shards,
                        created: 1_000 + m as i64,
                        pods: shards,
                    },
                    Candidate {
                        key: format!("team-c/PinterestService/web-{m:02}"),
                        priority: 50,
                        kind: VictimKind::Replicas { can_lose: 1 },
                        created: 2_000 + m as i64,
                        pods: replicas,
                    },
                ],
            }
        })
        .collect()
}

fn gang(pod: PodShape) -> Demand {
    Demand {
        pod,
        count: Count::Gang(vec![
            GangRole {
                role: "Master".into(),
                replicas: 1,
                pod: None,
            },
            GangRole {
                role: "Worker".into(),
                replicas: 1,
                pod: None,
            },
        ]),
        member_pods: Default::default(),
        member_roles: Default::default(),
    }
}

fn replicas(pod: PodShape, n: u32) -> Demand {
    Demand {
        pod,
        count: Count::Replicas(n),
        member_pods: Default::default(),
        member_roles: Default::default(),
    }
}

const PREEMPTOR_PRIORITY: i32 = 1000;

fn preempt_input<'a>(
    clusters: &'a [ClusterView],
    policy: &'a PlacementPolicy,
    demand: &'a Demand,
    want: u32,
    members: &'a [MemberCandidates],
) -> PreemptInput<'a> {
    PreemptInput {
        clusters,
        policy,
        demand,
        quota: None,
        priority: PREEMPTOR_PRIORITY,
        want,
        members,
    }
}

/// The fixture evicts: a choice in member-00 (the cheapest) with lower-priority victims
/// there, placing `units`, and the preemptor does not fit anywhere without evicting.
fn check_evicts(input: &PreemptInput<'_>, units: u32) -> Preemption {
    let nothing: Vec<MemberCandidates> = input
        .members
        .iter()
        .map(|m| MemberCandidates {
            member: m.member.clone(),
            candidates: Vec::new(),
        })
        .collect();
    let without = PreemptInput {
        members: &nothing,
        ..*input
    };
    assert!(
        choose(&without).is_none(),
        "the preemptor must not fit without evicting"
    );
    let p = choose(input).expect("a member where evicting makes room");
    assert_eq!(p.member, "member-00", "{p:?}");
    assert_eq!(p.units, units, "{p:?}");
    assert!(!p.victims.is_empty(), "{p:?}");
    assert!(
        p.victims
            .iter()
            .all(|v| v.priority < PREEMPTOR_PRIORITY && v.key.ends_with("-00")),
        "victims of lower priority in member-00 only: {p:?}"
    );
    // No node has room for a pod of 4 cpu or more without a shard of 3 cpu going.
    assert!(
        p.victims.iter().any(|v| v.kind == VictimKind::Shards),
        "{p:?}"
    );
    p
}

/// What the fixture chose, once, on stderr (the victims are part of the result).
fn say(case: &str, p: &Preemption) {
    let victims: Vec<String> = p.victims.iter().map(|v| v.describe()).collect();
    let pods: u32 = p.victims.iter().map(|v| v.pods).sum();
    eprintln!(
        "{case}: {} units in {} by evicting {pods} pods: {}",
        p.units,
        p.member,
        victims.join("; ")
    );
}

fn bench_preempt(c: &mut Criterion) {
    let clusters = full_members();
    let members = victims();
    let policy = PlacementPolicy::default();
    let candidate_pods: usize = members
        .iter()
        .flat_map(|m| &m.candidates)
        .map(|c| c.pods.len())
        .sum();
    assert_eq!(
        candidate_pods,
        MEMBERS * (NODES * SHARDS_PER_NODE + REPLICAS)
    );

    let gang_small = gang(shape(4_500, 4 * GI));
    let ten = replicas(shape(4_000, 4 * GI), 10);
    let gang_big = gang(shape(9_000, 4 * GI));

    let gang_in = preempt_input(&clusters, &policy, &gang_small, 0, &members);
    let p = check_evicts(&gang_in, 2);
    say("gang_2x4.5cpu", &p);
    let ten_in = preempt_input(&clusters, &policy, &ten, 10, &members);
    let p = check_evicts(&ten_in, 10);
    say("replicas_10x4cpu", &p);
    let none_in = preempt_input(&clusters, &policy, &gang_big, 0, &members);
    assert!(choose(&none_in).is_none(), "a 9-cpu pod fits no 8-cpu node");

    let mut g = c.benchmark_group("preempt_over_20_members");
    g.bench_function("gang_2x4.5cpu", |b| b.iter(|| choose(black_box(&gang_in))));
    g.bench_function("replicas_10x4cpu", |b| {
        b.iter(|| choose(black_box(&ten_in)))
    });
    g.bench_function("no_member_fits", |b| b.iter(|| choose(black_box(&none_in))));
    g.finish();
}

const WAITING: usize = 1_000;
const NOW: i64 = 1_000_000;
const LAST: &str = "PinterestService/team-z/last";

/// 1,000 waiting workloads: replicas of 4 cpu, shards of 3 cpu and gangs of 2 × 4.5 cpu
/// (none fits the 1–2 cpu left on any node), priorities 0 to 1000, waiting up to an hour;
/// and the last-ranked one (priority -1000, waiting since now) of 500m, which fits.
fn queue() -> WaitQueue {
    let mut q = WaitQueue::new(Aging::default());
    for i in 0..WAITING - 1 {
        let (kind, demand) = match i % 3 {
            0 => ("PinterestService", replicas(shape(4_000, 4 * GI), 10)),
            1 => (
                "PinterestJobSet",
                Demand {
                    pod: shape(3_000, 4 * GI),
                    count: Count::Shards {
                        total: 100,
                        completed: Default::default(),
                        parallelism: None,
                    },
                    member_pods: Default::default(),
                    member_roles: Default::default(),
                },
            ),
            _ => ("PinterestTrainingJob", gang(shape(4_500, 4 * GI))),
        };
        let namespace = format!("team-{}", i % 10);
        q.upsert(Waiting {
            key: format!("{kind}/{namespace}/w-{i:04}"),
            namespace,
            priority: Priority {
                class: None,
                value: [0, 100, 500, 1000][i % 4],
                preempts: false,
            },
            since: NOW - (i as i64 * 7) % 3_600,
            waiting_for: WaitingFor::Room("room".into()),
            unit: demand.one_unit(),
            policy: PlacementPolicy::default(),
            yielding: None,
        });
    }
    q.upsert(Waiting {
        key: LAST.into(),
        namespace: "team-z".into(),
        priority: Priority {
            class: None,
            value: -1000,
            preempts: false,
        },
        since: NOW,
        waiting_for: WaitingFor::Room("room".into()),
        unit: replicas(shape(500, GI), 3).one_unit(),
        policy: PlacementPolicy::default(),
        yielding: None,
    });
    q
}

fn bench_queue(c: &mut Criterion) {
    let views = full_members();
    let q = queue();
    let last = q.get(LAST).expect("the last-ranked workload").clone();
    let ahead_of_last = |limit: usize, asked: &Cell<usize>| {
        q.first_ahead(last.priority.value, last.since, LAST, NOW, limit, |h| {
            asked.set(asked.get() + 1);
            could_use(&views, h, None)
        })
        .is_some()
    };

    // The fixture: 1,000 waiting, LAST ranked last and able to use the room, none of the
    // 20 asked ahead of it able to; it asks exactly 20.
    assert_eq!(q.len(), WAITING);
    let ordered = q.ordered(NOW);
    assert_eq!(ordered.len(), WAITING);
    assert_eq!(ordered.last().map(|w| w.key.as_str()), Some(LAST));
    assert_eq!(q.standing(LAST, NOW).map(|s| s.position), Some(WAITING));
    assert!(could_use(&views, &last, None), "the room is usable by LAST");
    let asked = Cell::new(0);
    assert!(!ahead_of_last(20, &asked), "none ahead can use the room");
    assert_eq!(asked.get(), 20);
    let first = ordered[0];
    assert!(!could_use(&views, first, None));

    let mut g = c.benchmark_group("queue_1000_over_20_members");
    g.bench_function("standing", |b| {
        b.iter(|| q.standing(black_box(LAST), black_box(NOW)))
    });
    g.bench_function("ordered", |b| b.iter(|| q.ordered(black_box(NOW)).len()));
    g.bench_function("could_use_once", |b| {
        b.iter(|| could_use(black_box(&views), black_box(first), None))
    });
    g.bench_function("first_ahead_last_ranked_limit_20", |b| {
        b.iter(|| {
            let asked = Cell::new(0);
            ahead_of_last(black_box(20), &asked)
        })
    });
    g.finish();
}

criterion_group!(benches, bench_queue, bench_preempt);
criterion_main!(benches);

//! Scenario tests of the whole engine (on the shipped `local-3` topology and small
//! hand-made clusters) and property tests over random clusters, policies and demands.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use super::*;
use crate::api::quantity::Milli;
use crate::topology::Topology;
use model::{REGION_LABEL, ZONE_LABEL};

fn q(s: &str) -> Milli {
    Milli::parse(s).unwrap()
}

fn local3() -> Vec<ClusterView> {
    let t =
        Topology::from_yaml("local-3.yaml", include_str!("../../clusters/local-3.yaml")).unwrap();
    ClusterView::from_topology(&t)
}

fn pod(cpu: &str, memory: &str, gpu: i64) -> PodShape {
    PodShape {
        resources: Resources::pod(q(cpu), q(memory), gpu),
        ..PodShape::default()
    }
}

fn gpu_pod(gpus: i64) -> PodShape {
    PodShape {
        resources: Resources::pod(q("4"), q("16Gi"), gpus),
        node_selector: BTreeMap::from([("pinterest.com/pool".into(), "gpu".into())]),
        tolerations: vec![Toleration {
            key: "dedicated".into(),
            operator: TolerationOperator::Equal,
            value: "gpu".into(),
            effect: Some(TaintEffect::NoSchedule),
        }],
    }
}

fn demand(pod: PodShape, count: Count) -> Demand {
    Demand {
        member_pods: Default::default(),
        member_roles: Default::default(),
        pod,
        count,
    }
}

fn replicas(pod: PodShape, n: u32) -> Demand {
    demand(pod, Count::Replicas(n))
}

/// `n` replicas of 1 cpu and 1Gi.
fn small_replicas(n: u32) -> Demand {
    replicas(pod("1", "1Gi", 0), n)
}

fn shards(pod: PodShape, total: u32, completed: &[u32]) -> Demand {
    demand(
        pod,
        Count::Shards {
            total,
            completed: completed.iter().copied().collect(),
            parallelism: None,
        },
    )
}

/// Nothing is placed: all `unplaced` wait, for `reason`.
fn assert_nothing_placed(o: &Outcome, unplaced: u32, reason: &str) {
    assert!(o.decision.placements.is_empty());
    assert_eq!(o.decision.unplaced, unplaced);
    assert_eq!(o.decision.reason.as_deref(), Some(reason));
}

/// The plan of `demand` over local3 by `policy`, without quota or a decision in force.
fn on_local3(policy: &PlacementPolicy, demand: &Demand) -> Outcome {
    run(&local3(), policy, demand, None, None)
}

/// [`on_local3`], divided.
fn divided_on_local3(demand: &Demand) -> Outcome {
    on_local3(&divided(), demand)
}

/// One plan from these inputs (the property tests use it too).
pub(super) fn run(
    clusters: &[ClusterView],
    policy: &PlacementPolicy,
    demand: &Demand,
    quota: Option<&QuotaView>,
    current: Option<&Decision>,
) -> Outcome {
    plan(&PlanInput {
        clusters,
        policy,
        demand,
        quota,
        current,
    })
}

fn divided() -> PlacementPolicy {
    PlacementPolicy::default()
}

fn json(o: &Outcome) -> String {
    o.decision.to_json()
}

fn node(name: &str, cpu: &str, pods: i64) -> NodeRoom {
    NodeRoom {
        name: name.into(),
        labels: BTreeMap::new(),
        taints: vec![],
        free: Resources {
            cpu: q(cpu),
            memory: q("64Gi"),
            gpu: 0,
            pods,
        },
    }
}

fn cluster(name: &str, zone: &str, nodes: Vec<NodeRoom>) -> ClusterView {
    ClusterView {
        name: name.into(),
        zone: Some(zone.into()),
        region: Some("r".into()),
        labels: BTreeMap::new(),
        taints: vec![],
        weight: 1,
        ready: true,
        nodes,
    }
}

// ---------------------------------------------------------------- Divided replicas

#[test]
fn service_is_split_by_room_on_local3() {
    // Room for 1 cpu / 1Gi pods: use1a 4×8 = 32, use1b 2×8 + 2×16 = 48, use1c 3×8 = 24
    // (its GPU nodes are tainted). Webster over 32:48:24 gives 9, 14, 7.
    let o = divided_on_local3(&small_replicas(30));
    assert_eq!(
        json(&o),
        r#"{"strategy":"Divided","placements":[{"cluster":"use1a","replicas":9},{"cluster":"use1b","replicas":14},{"cluster":"use1c","replicas":7}],"unplaced":0,"reason":null}"#
    );
}

#[test]
fn scaling_up_and_back_moves_as_little_as_possible() {
    let clusters = local3();
    let at = |n, current: Option<&Decision>| {
        run(&clusters, &divided(), &small_replicas(n), None, current).decision
    };
    let d30 = at(30, None);
    let d45 = at(45, Some(&d30));
    assert_eq!(
        d45.shares(),
        at(45, None).shares(),
        "house-monotone: same as fresh"
    );
    assert_eq!(
        d45.shares().values().copied().collect::<Vec<_>>(),
        [14, 21, 10]
    );
    let back = at(30, Some(&d45));
    assert_eq!(
        back, d30,
        "scaling back removes exactly the seats that were added"
    );
    assert_eq!(
        at(30, Some(&d30)),
        d30,
        "unchanged inputs: the current decision"
    );
}

#[test]
fn weights_and_policy_weights_scale_shares() {
    let mut clusters = local3();
    clusters[0].weight = 3; // use1a: 3 × 32 = 96 vs 48 and 24
    let o = run(&clusters, &divided(), &small_replicas(14), None, None);
    assert_eq!(
        o.decision.shares(),
        BTreeMap::from([
            ("use1a".into(), 8),
            ("use1b".into(), 4),
            ("use1c".into(), 2)
        ])
    );
    let mut policy = divided();
    policy.weights.insert("use1a".into(), 0);
    let o = run(&clusters, &policy, &small_replicas(14), None, None);
    assert!(!o.decision.shares().contains_key("use1a"));
    assert_eq!(o.excluded[0].why, "weight 0");
}

#[test]
fn min_and_max_per_cluster() {
    // Weights 10:1:1 would give the small ones ~1 each; min 3 lifts them, max 8 caps.
    let mut clusters = local3();
    clusters[0].weight = 10;
    let mut policy = divided();
    policy.per_cluster = Bounds {
        min: Some(3),
        max: None,
    };
    let shares = |policy: &PlacementPolicy| {
        let o = run(&clusters, policy, &small_replicas(12), None, None);
        o.decision.shares().values().copied().collect::<Vec<_>>()
    };
    assert_eq!(shares(&policy), [6, 3, 3]);
    policy.cluster_limits.insert(
        "use1a".into(),
        Bounds {
            min: None,
            max: Some(4),
        },
    );
    assert_eq!(shares(&policy), [4, 5, 3]);
}

#[test]
fn spread_over_zones_and_clusters() {
    let clusters = vec![
        cluster("a1", "za", vec![node("n", "100", 200)]),
        cluster("a2", "za", vec![node("n", "100", 200)]),
        cluster("b1", "zb", vec![node("n", "2", 200)]),
    ];
    let demand = small_replicas(6);
    let o = run(&clusters, &divided(), &demand, None, None);
    assert!(
        !o.decision.shares().contains_key("b1"),
        "b1 is small: {:?}",
        o.decision
    );
    let mut policy = divided();
    policy.spread.min_zones = 2;
    let o = run(&clusters, &policy, &demand, None, None);
    assert_eq!(o.decision.shares()["b1"], 1);
    assert!(o.warnings.is_empty());
    policy.spread.min_zones = 3;
    let o = run(&clusters, &policy, &demand, None, None);
    assert_eq!(
        o.decision.unplaced, 0,
        "a spread that cannot be met does not block"
    );
    assert!(
        o.warnings[0].contains("spread wants 3 zones"),
        "{:?}",
        o.warnings
    );
}

#[test]
fn not_enough_room_leaves_the_rest_unplaced_with_numbers() {
    let o = divided_on_local3(&replicas(pod("4", "1Gi", 0), 40));
    // 4-cpu pods: use1a 4×2 = 8, use1b 2×2 + 2×4 = 12, use1c 3×2 = 6.
    assert_eq!(o.decision.unplaced, 14);
    assert_eq!(o.cause, Some(Cause::InsufficientCapacity));
    assert_eq!(
        o.decision.reason.as_deref(),
        Some(
            "InsufficientCapacity: 14 of 40 replicas do not fit (use1a room 8, use1b room 12, use1c room 6)"
        )
    );
}

#[test]
fn no_eligible_cluster_names_why_each_was_excluded() {
    let mut clusters = local3();
    clusters[0].ready = false;
    clusters[1].taints.push(Taint {
        key: "maintenance".into(),
        value: String::new(),
        effect: TaintEffect::NoSchedule,
    });
    let mut policy = divided();
    policy
        .cluster_selector
        .match_labels
        .insert("tier".into(), "prod".into());
    clusters[2].labels.insert("tier".into(), "dev".into());
    let o = run(&clusters, &policy, &small_replicas(3), None, None);
    assert_eq!(o.decision.unplaced, 3);
    assert_eq!(
        o.decision.reason.as_deref(),
        Some(
            "NoEligibleCluster: no eligible cluster (use1a: not ready; use1b: cluster taint \
             maintenance:NoSchedule is not tolerated; use1c: does not match the cluster selector \
             (label tier=prod required))"
        )
    );
    // Tolerating the taint makes use1b eligible again.
    policy.tolerations.push(Toleration {
        key: "maintenance".into(),
        operator: TolerationOperator::Exists,
        ..Toleration::default()
    });
    let o = run(&clusters, &policy, &small_replicas(3), None, None);
    assert_eq!(o.decision.clusters(), ["use1b"]);
}

#[test]
fn selector_expressions_and_affinity_use_zone_and_region() {
    let clusters = local3();
    let mut policy = divided();
    policy.cluster_selector.match_expressions.push(Requirement {
        key: "topology.kubernetes.io/zone".into(),
        operator: SelectorOperator::NotIn,
        values: vec!["us-east-1a".into()],
    });
    let demand = small_replicas(4);
    let placed_in = |policy: &PlacementPolicy| run(&clusters, policy, &demand, None, None);
    assert_eq!(placed_in(&policy).decision.clusters(), ["use1b", "use1c"]);
    let mut policy = divided();
    policy.zones = vec!["us-east-1c".into()];
    assert_eq!(placed_in(&policy).decision.clusters(), ["use1c"]);
    let mut policy = divided();
    policy.cluster_names = vec!["use1a".into()];
    assert_eq!(placed_in(&policy).decision.clusters(), ["use1a"]);
    let mut policy = divided();
    policy.cluster_selector.match_expressions.push(Requirement {
        key: "accelerators".into(),
        operator: SelectorOperator::Exists,
        values: vec![],
    });
    assert_eq!(placed_in(&policy).decision.clusters(), ["use1c"]);
}

#[test]
fn a_pod_must_fit_on_one_node_with_matching_labels_and_tolerated_taints() {
    // 12 cpu fits only the highmem nodes of use1b (16 cpu), one per node.
    let o = divided_on_local3(&replicas(pod("12", "1Gi", 0), 3));
    assert_eq!(o.decision.shares(), BTreeMap::from([("use1b".into(), 2)]));
    assert_eq!(o.decision.unplaced, 1);
    let why: Vec<_> = o.excluded.iter().map(|e| e.why.as_str()).collect();
    assert_eq!(
        why,
        ["no node has room for one pod (cpu 12, memory 1Gi)"; 2]
    );
    assert!(
        o.excluded.iter().all(|e| e.full),
        "excluded for room alone: preemption may free it"
    );
    // GPU pods go only to use1c's tainted GPU pool, and only when they tolerate it.
    let o = divided_on_local3(&replicas(gpu_pod(1), 4));
    assert_eq!(o.decision.shares(), BTreeMap::from([("use1c".into(), 4)]));
    let mut untolerating = gpu_pod(1);
    untolerating.tolerations.clear();
    let o = divided_on_local3(&replicas(untolerating, 4));
    assert_eq!(o.cause, Some(Cause::NoEligibleCluster));
    assert!(
        o.excluded.iter().all(|e| !e.full),
        "a taint not tolerated is no lack of room"
    );
    assert!(
        o.decision
            .reason
            .unwrap()
            .contains("use1c: 2 of its 5 nodes match the node selector, and the pod does not tolerate their taint dedicated=gpu:NoSchedule")
    );
}

#[test]
fn losing_a_cluster_moves_only_its_replicas() {
    let mut clusters = local3();
    let demand = small_replicas(30);
    let before = run(&clusters, &divided(), &demand, None, None).decision;
    clusters[1].ready = false;
    let after = run(&clusters, &divided(), &demand, None, Some(&before)).decision;
    let (b, a) = (before.shares(), after.shares());
    assert_eq!(a.values().sum::<u32>(), 30);
    assert!(
        a["use1a"] >= b["use1a"] && a["use1c"] >= b["use1c"],
        "{b:?} -> {a:?}"
    );
    assert!(!a.contains_key("use1b"));
}

// ---------------------------------------------------------------- quota

fn cpu_quota(cpu: &str, used: &str) -> QuotaView {
    QuotaView {
        name: "team-a/default".into(),
        total: QuotaUse {
            hard: Limits {
                cpu: Some(q(cpu)),
                ..Limits::default()
            },
            used: Resources {
                cpu: q(used),
                ..Resources::ZERO
            },
        },
        clusters: BTreeMap::new(),
    }
}

#[test]
fn quota_is_never_exceeded() {
    let quota = cpu_quota("100", "60");
    let o = run(
        &local3(),
        &divided(),
        &replicas(pod("2", "1Gi", 0), 30),
        Some(&quota),
        None,
    );
    assert_eq!(o.decision.shares().values().sum::<u32>(), 20);
    assert_eq!(o.decision.unplaced, 10);
    assert_eq!(o.cause, Some(Cause::QuotaExceeded));
    assert_eq!(
        o.decision.reason.as_deref(),
        Some(
            "QuotaExceeded: quota team-a/default admits 20 of 30 replicas (cpu 40 of 100 left, \
             2 per pod); 10 unplaced"
        )
    );
}

#[test]
fn per_cluster_quota_caps_a_cluster() {
    let mut quota = cpu_quota("1000", "0");
    quota.clusters.insert(
        "use1b".into(),
        QuotaUse {
            hard: Limits {
                pods: Some(2),
                ..Limits::default()
            },
            used: Resources::ZERO,
        },
    );
    let o = run(
        &local3(),
        &divided(),
        &small_replicas(30),
        Some(&quota),
        None,
    );
    assert_eq!(o.decision.shares()["use1b"], 2);
    assert_eq!(o.decision.unplaced, 0, "the others take the rest");
    let o = run(
        &local3(),
        &divided(),
        &small_replicas(60),
        Some(&quota),
        None,
    );
    // Caps 32 + 2 + 24 = 58 of 60; without the cluster quota all 60 would fit.
    assert_eq!(o.decision.unplaced, 2);
    assert_eq!(o.cause, Some(Cause::QuotaExceeded));
    assert!(o.decision.reason.unwrap().contains("use1b admits 2"));
}

#[test]
fn quota_applies_to_gangs_all_or_nothing() {
    let quota = QuotaView {
        name: "ml".into(),
        total: QuotaUse {
            hard: Limits {
                gpu: Some(16),
                ..Limits::default()
            },
            used: Resources {
                gpu: 4,
                ..Resources::ZERO
            },
        },
        clusters: BTreeMap::new(),
    };
    let gang = demand(gpu_pod(8), Count::Gang(vec![role("Worker", 2, None)]));
    let o = run(&local3(), &divided(), &gang, Some(&quota), None);
    assert_nothing_placed(
        &o,
        2,
        "QuotaExceeded: quota ml: the gang of 2 replicas needs gpu 16, 12 of 16 left",
    );
}

// ---------------------------------------------------------------- shards

#[test]
fn job_set_is_split_by_contiguous_index_ranges() {
    let o = divided_on_local3(&shards(pod("1", "1Gi", 0), 100, &[]));
    assert_eq!(
        json(&o),
        r#"{"strategy":"Divided","placements":[{"cluster":"use1a","shards":"0-30"},{"cluster":"use1b","shards":"31-76"},{"cluster":"use1c","shards":"77-99"}],"unplaced":0,"reason":null}"#
    );
}

#[test]
fn on_failover_only_unfinished_shards_move_and_finished_ones_never_run_again() {
    let mut clusters = local3();
    let small = pod("500m", "512Mi", 0); // rooms 64, 96, 48
    let first = run(
        &clusters,
        &divided(),
        &shards(small.clone(), 100, &[]),
        None,
        None,
    )
    .decision;
    let had = first.shard_sets().unwrap();
    let indices = |r: &crate::api::ranges::RangeSet| -> BTreeSet<u32> { r.iter().collect() };
    // use1b finished some of its shards and went down; use1a finished 0-9.
    let completed: Vec<u32> = (0..10).chain(31..51).collect();
    clusters[1].ready = false;
    let demand = shards(small, 100, &completed);
    let o = run(&clusters, &divided(), &demand, None, Some(&first));
    assert_eq!(o.decision.unplaced, 0);
    let now = o.decision.shard_sets().unwrap();
    assert!(!now.contains_key("use1b"));
    for c in ["use1a", "use1c"] {
        let kept: BTreeSet<u32> = indices(&had[c])
            .into_iter()
            .filter(|i| !completed.contains(i))
            .collect();
        assert!(
            indices(&now[c]).is_superset(&kept),
            "{c} keeps its unfinished shards"
        );
    }
    let mut seen = BTreeSet::new();
    for r in now.values() {
        for i in indices(r) {
            assert!(seen.insert(i), "shard {i} placed twice");
        }
    }
    let expected: BTreeSet<u32> = (0..100).filter(|i| !completed.contains(i)).collect();
    assert_eq!(seen, expected, "exactly the unfinished shards");
    // Re-planning the same state changes nothing.
    let again = run(&clusters, &divided(), &demand, None, Some(&o.decision));
    assert_eq!(again.decision, o.decision);
}

#[test]
fn completed_shards_shrink_the_work_without_moving_anything() {
    let clusters = local3();
    let first = run(
        &clusters,
        &divided(),
        &shards(pod("1", "1Gi", 0), 100, &[]),
        None,
        None,
    );
    let done: Vec<u32> = (0..20).collect();
    let o = run(
        &clusters,
        &divided(),
        &shards(pod("1", "1Gi", 0), 100, &done),
        None,
        Some(&first.decision),
    );
    assert_eq!(
        json(&o),
        r#"{"strategy":"Divided","placements":[{"cluster":"use1a","shards":"20-30"},{"cluster":"use1b","shards":"31-76"},{"cluster":"use1c","shards":"77-99"}],"unplaced":0,"reason":null}"#
    );
}

#[test]
fn a_job_set_with_parallelism_is_charged_and_bounded_by_the_pods_it_runs_at_once() {
    let bounded = |completed: &[u32]| {
        demand(
            pod("2", "1Gi", 0),
            Count::Shards {
                total: 1000,
                completed: completed.iter().copied().collect(),
                parallelism: Some(10),
            },
        )
    };
    // A quota of 20 cpu holds 10 pods of 2 cpu at once: every one of 1,000 shards is
    // placed, in proportion to room, and the quota is charged 10 pods.
    let quota = cpu_quota("100", "80");
    let o = run(&local3(), &divided(), &bounded(&[]), Some(&quota), None);
    assert_eq!(o.decision.unplaced, 0, "{:?}", o.decision.reason);
    let held: Vec<u64> = o
        .decision
        .shard_sets()
        .unwrap()
        .values()
        .map(|r| r.len())
        .collect();
    assert_eq!(held.iter().sum::<u64>(), 1000);
    let charged = quota::usage_of(&o.decision, &bounded(&[]));
    assert_eq!(
        charged.values().map(|r| r.pods).sum::<i64>(),
        10,
        "charged {charged:?}"
    );
    assert_eq!(
        o.bindings.iter().map(|b| b.pods).sum::<u64>(),
        10,
        "room is taken for the pods that run at once"
    );
    // 18 cpu left holds 9 at once: not the parallelism, so each shard is a seat again and
    // the quota refuses the rest with its numbers.
    let o = run(
        &local3(),
        &divided(),
        &bounded(&[]),
        Some(&cpu_quota("100", "82")),
        None,
    );
    assert_eq!(o.cause, Some(Cause::QuotaExceeded));
    assert_eq!(o.decision.unplaced, 991);
    // A re-plan keeps every shard where it is; completed shards leave their cluster.
    let first = divided_on_local3(&bounded(&[])).decision;
    assert_eq!(
        run(&local3(), &divided(), &bounded(&[]), None, Some(&first)).decision,
        first
    );
    let done: Vec<u32> = (0..200).collect();
    let later = run(&local3(), &divided(), &bounded(&done), None, Some(&first)).decision;
    for (c, now) in later.shard_sets().unwrap() {
        let had = &first.shard_sets().unwrap()[&c];
        assert!(
            now.iter().all(|i| had.iter().any(|j| j == i)),
            "{c} got new shards"
        );
    }
}

#[test]
fn a_job_set_with_parallelism_waits_for_room_instead_of_dropping_shards() {
    // Room for 3 pods of 2 cpu in all; parallelism 8: every shard is placed, 3 run at once.
    let small = vec![
        cluster("a", "z1", vec![node("n", "2", 10)]),
        cluster("b", "z2", vec![node("n", "4", 10)]),
    ];
    let d = demand(
        pod("2", "1Gi", 0),
        Count::Shards {
            total: 30,
            completed: BTreeSet::new(),
            parallelism: Some(8),
        },
    );
    let o = run(&small, &divided(), &d, None, None);
    assert_eq!(o.decision.unplaced, 0);
    assert_eq!(
        json(&o),
        r#"{"strategy":"Divided","placements":[{"cluster":"a","shards":"0-9"},{"cluster":"b","shards":"10-29"}],"unplaced":0,"reason":null}"#
    );
    assert!(
        o.warnings.iter().any(|w| w.contains("room for 3 at once")),
        "{:?}",
        o.warnings
    );
    assert_eq!(o.bindings.iter().map(|b| b.pods).sum::<u64>(), 3);
}

// ---------------------------------------------------------------- gangs, single, duplicated

/// A gang role of `replicas` pods, shaped as the demand's pod unless `pod` says otherwise.
fn role(name: &str, replicas: u32, pod: Option<PodShape>) -> GangRole {
    GangRole {
        role: name.into(),
        replicas,
        pod,
    }
}

fn training(workers: u32, gpus: i64) -> Demand {
    demand(
        gpu_pod(gpus),
        Count::Gang(vec![role("Master", 1, None), role("Worker", workers, None)]),
    )
}

#[test]
fn a_gang_lands_whole_where_it_fits() {
    // use1c has 2 GPU nodes × 8 GPUs: a master and 3 workers of 4 GPUs fit.
    let o = divided_on_local3(&training(3, 4));
    assert_eq!(
        json(&o),
        r#"{"strategy":"Single","placements":[{"cluster":"use1c","replicas":4}],"unplaced":0,"reason":null}"#
    );
    let gpus: i64 = o.bindings.iter().map(|b| b.resources.gpu).sum();
    assert_eq!(gpus, 16);
}

#[test]
fn a_gang_that_fits_nowhere_waits_with_a_reason() {
    let o = divided_on_local3(&training(8, 4));
    // use1a and use1b are eligible clusters but have no GPU node: they fit none.
    assert_nothing_placed(
        &o,
        9,
        "InsufficientCapacity: no cluster fits all 9 replicas (largest fit: use1c 4)",
    );
}

#[test]
fn gang_roles_of_different_sizes_are_packed_largest_first() {
    // Two nodes with 5 and 3 GPUs; pods of 3, 3 and 2 GPUs from two roles fill both
    // exactly, whatever order the roles are listed in.
    let gpu_node = |name: &str, gpus: i64| NodeRoom {
        name: name.into(),
        labels: BTreeMap::new(),
        taints: vec![],
        free: Resources {
            cpu: q("64"),
            memory: q("256Gi"),
            gpu: gpus,
            pods: 110,
        },
    };
    let clusters = vec![cluster(
        "c",
        "z",
        vec![gpu_node("n1", 5), gpu_node("n2", 3)],
    )];
    let role = |name: &str, n, gpus| role(name, n, Some(pod("1", "1Gi", gpus)));
    let gang = demand(
        pod("1", "1Gi", 0),
        Count::Gang(vec![role("Worker", 1, 2), role("Master", 2, 3)]),
    );
    let o = run(&clusters, &divided(), &gang, None, None);
    assert_eq!(o.decision.shares()["c"], 3);
    let by_node: BTreeMap<_, _> = o
        .bindings
        .iter()
        .map(|b| (b.node.as_str(), b.resources.gpu))
        .collect();
    assert_eq!(by_node, BTreeMap::from([("n1", 5), ("n2", 3)]));
    // One more 2-GPU worker does not fit: all or nothing.
    let gang = demand(
        pod("1", "1Gi", 0),
        Count::Gang(vec![role("Worker", 2, 2), role("Master", 2, 3)]),
    );
    let o = run(&clusters, &divided(), &gang, None, None);
    assert_eq!((o.decision.placements.len(), o.decision.unplaced), (0, 4));
    assert!(o.bindings.is_empty());
}

#[test]
fn single_is_sticky_while_the_cluster_stays_eligible() {
    let mut clusters = local3();
    let cron = demand(pod("1", "1Gi", 0), Count::Whole);
    let single = PlacementPolicy::with_strategy(Strategy::Single);
    let first = run(&clusters, &single, &cron, None, None).decision;
    assert_eq!(
        first.to_json(),
        r#"{"strategy":"Single","placements":[{"cluster":"use1b"}],"unplaced":0,"reason":null}"#
    );
    // use1a becomes the best by weight × room, but the cron job stays put.
    clusters[0].weight = 5;
    assert_eq!(
        run(&clusters, &single, &cron, None, Some(&first)).decision,
        first
    );
    // Failover: use1b goes down, the best remaining takes it.
    clusters[1].ready = false;
    let moved = run(&clusters, &single, &cron, None, Some(&first)).decision;
    assert_eq!(moved.clusters(), ["use1a"]);
}

#[test]
fn stateful_set_goes_to_one_cluster_that_holds_all_replicas() {
    let single = PlacementPolicy::with_strategy(Strategy::Single);
    let o = on_local3(&single, &replicas(pod("4", "1Gi", 0), 10));
    // Rooms for 4 cpu: 8, 12, 6 — only use1b holds 10.
    assert_eq!(o.decision.shares(), BTreeMap::from([("use1b".into(), 10)]));
    let o = on_local3(&single, &replicas(pod("4", "1Gi", 0), 20));
    assert_eq!(o.decision.shares(), BTreeMap::from([("use1b".into(), 12)]));
    assert_eq!(o.decision.unplaced, 8);
}

#[test]
fn daemons_go_to_every_selected_cluster() {
    let daemon = demand(pod("100m", "128Mi", 0), Count::Whole);
    let o = divided_on_local3(&daemon);
    assert_eq!(
        json(&o),
        r#"{"strategy":"Duplicated","placements":[{"cluster":"use1a"},{"cluster":"use1b"},{"cluster":"use1c"}],"unplaced":0,"reason":null}"#
    );
    // One pod per node it fits on (use1c's tainted GPU nodes are not tolerated).
    assert_eq!(o.bindings.len(), 4 + 4 + 3);
    let mut policy = PlacementPolicy::with_strategy(Strategy::Duplicated);
    policy
        .cluster_selector
        .match_labels
        .insert("accelerators".into(), "gpu".into());
    assert_eq!(on_local3(&policy, &daemon).decision.clusters(), ["use1c"]);
}

#[test]
fn a_daemon_is_charged_its_pods_on_every_node_it_runs_on() {
    let daemon = demand(pod("500m", "128Mi", 0), Count::Whole);
    // a: 3 nodes with room; b: 5 with room, one full and one whose label the pod's node
    // selector does not match.
    let in_pool = |name: String, cpu: &str, pool: &str| {
        let mut n = node(&name, cpu, 110);
        n.labels.insert("pool".into(), pool.into());
        n
    };
    let a = (0..3)
        .map(|i| in_pool(format!("a{i}"), "4", "web"))
        .collect();
    let mut b: Vec<NodeRoom> = (0..5)
        .map(|i| in_pool(format!("b{i}"), "4", "web"))
        .collect();
    b.push(in_pool("b-full".into(), "100m", "web"));
    b.push(in_pool("b-other".into(), "4", "other"));
    let clusters = [cluster("a", "z1", a), cluster("b", "z2", b)];
    let mut daemon = daemon;
    daemon.pod.node_selector.insert("pool".into(), "web".into());
    let o = run(&clusters, &divided(), &daemon, None, None);
    assert_eq!(o.decision.unplaced, 0);
    let pods: Vec<Option<u32>> = o.decision.placements.iter().map(|p| p.pods).collect();
    assert_eq!(pods, [Some(3), Some(5)]);
    assert_eq!(o.decision.whole_pods(), 8);
    let charged = quota::usage_of(&o.decision, &daemon);
    assert_eq!((charged["a"].pods, charged["b"].pods), (3, 5));
    assert_eq!(charged["b"].cpu, q("2500m"));
    assert_eq!(
        o.bindings.iter().map(|b| b.pods).sum::<u64>(),
        8,
        "the ledger reserves what quota is charged"
    );
    // The plan contract is unchanged: a daemon's share is only its cluster.
    assert_eq!(
        json(&o),
        r#"{"strategy":"Duplicated","placements":[{"cluster":"a"},{"cluster":"b"}],"unplaced":0,"reason":null}"#
    );
    // A quota of 4 pods holds a's 3 but not b's 5: b is left out, and the charge is what
    // was placed.
    let mut quota = cpu_quota("100", "0");
    quota.total.hard.pods = Some(4);
    let o = run(&clusters, &divided(), &daemon, Some(&quota), None);
    assert_eq!(o.decision.clusters(), ["a"]);
    assert_eq!(o.cause, Some(Cause::QuotaExceeded));
    let charged = quota::usage_of(&o.decision, &daemon);
    assert_eq!(charged.values().map(|r| r.pods).sum::<i64>(), 3);
}

#[test]
fn duplicated_replicas_run_a_full_copy_per_cluster() {
    let policy = PlacementPolicy::with_strategy(Strategy::Duplicated);
    let o = on_local3(&policy, &replicas(pod("4", "1Gi", 0), 7));
    // use1c holds only 6 pods of 4 cpu.
    assert_eq!(o.decision.clusters(), ["use1a", "use1b"]);
    assert_eq!(o.decision.unplaced, 7);
    assert_eq!(
        o.decision.reason.as_deref(),
        Some("InsufficientCapacity: a copy of 7 replicas does not fit in use1c room 6")
    );
}

// ---------------------------------------------------------------- ledger

#[test]
fn a_burst_of_decisions_does_not_pile_onto_one_cluster() {
    let clusters = local3();
    let single = PlacementPolicy::with_strategy(Strategy::Single);
    // Three pods of 8 cpu: rooms use1a 4, use1b 2 + 2×2 = 6, use1c 3.
    let big = replicas(pod("8", "1Gi", 0), 3);
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
    let mut ledger = Ledger::new();
    let mut chosen = Vec::new();
    for i in 0..4 {
        let mut view = clusters.clone();
        ledger.apply(&mut view, None);
        let o = run(&view, &single, &big, None, None);
        assert_eq!(o.decision.unplaced, 0, "workload {i}: {:?}", o.decision);
        chosen.push(o.decision.clusters()[0].to_string());
        ledger.reserve(&format!("w{i}"), &o, t0);
    }
    // use1b (6) first, then use1a (4 > the 3 left in use1b), then use1b (3, ties use1c by
    // name), then use1c: each decision sees the room the earlier ones took.
    assert_eq!(chosen, ["use1b", "use1a", "use1b", "use1c"]);
    // Without the ledger every one would have picked use1b, which holds only 6.
    let o = run(&clusters, &single, &big, None, None);
    assert_eq!(o.decision.clusters(), ["use1b"]);
    let mut view = clusters.clone();
    ledger.apply(&mut view, None);
    assert!(
        view.iter()
            .flat_map(|c| &c.nodes)
            .all(|n| n.free.is_non_negative())
    );
    let o = run(&view, &single, &big, None, None);
    assert_eq!(
        o.decision.unplaced, 2,
        "a fifth finds only use1a's last node"
    );

    // Releasing or expiring gives the room back; a re-plan ignores its own reservation.
    let mut view = clusters.clone();
    ledger.apply(&mut view, Some("w0"));
    assert_eq!(
        run(&view, &single, &big, None, None).decision.clusters(),
        ["use1b"]
    );
    assert!(ledger.release("w1"));
    assert_eq!(ledger.expire(t0 + Duration::from_secs(1)), 3);
    assert!(ledger.is_empty());
}

#[test]
fn ledger_reservations_per_cluster_and_totals() {
    let clusters = local3();
    let o = divided_on_local3(&small_replicas(30));
    let mut ledger = Ledger::new();
    ledger.reserve("ns/web", &o, SystemTime::UNIX_EPOCH);
    assert_eq!(ledger.reserved(|w| w.starts_with("ns/")).cpu, q("30"));
    ledger.release_cluster("ns/web", "use1b");
    assert_eq!(ledger.reserved(|_| true).cpu, q("16"));
    let mut view = clusters.clone();
    ledger.apply(&mut view, None);
    let free: Milli = view[0]
        .nodes
        .iter()
        .map(|n| n.free.cpu)
        .fold(Milli(0), |a, b| a + b);
    assert_eq!(free, q("23"), "use1a: 32 cpu minus its 9 reserved");
}

/// Expiry takes only reservations made before the cut, a replaced one by its new time.
#[test]
fn ledger_expiry_follows_the_latest_reservation() {
    let o = divided_on_local3(&small_replicas(3));
    let t = |s: u64| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s);
    let mut ledger = Ledger::new();
    ledger.reserve("ns/a", &o, t(10));
    ledger.reserve("ns/b", &o, t(20));
    ledger.reserve("ns/a", &o, t(30));
    assert_eq!(
        ledger.expire(t(25)),
        1,
        "only b: a was reserved again at 30"
    );
    assert_eq!(ledger.reserved(|w| w == "ns/a").cpu, q("3"));
    assert_eq!(ledger.reserved(|w| w == "ns/b").cpu, q("0"));
    ledger.release_cluster("ns/a", "use1a");
    ledger.release_cluster("ns/a", "use1b");
    ledger.release_cluster("ns/a", "use1c");
    assert_eq!(
        ledger.expire(t(100)),
        0,
        "released in full: nothing left to expire"
    );
    assert_eq!(ledger, Ledger::new());
}

// ---------------------------------------------------------------- decision JSON

#[test]
fn decision_json_round_trips_and_rejects_unknown_fields() {
    let text = r#"{"strategy":"Divided","placements":[{"cluster":"a","replicas":2},{"cluster":"b","shards":"0-3,7"},{"cluster":"c"}],"unplaced":1,"reason":"x"}"#;
    let d = Decision::from_json(text).unwrap();
    assert_eq!(d.to_json(), text);
    assert_eq!(
        d.shares(),
        BTreeMap::from([("a".into(), 2), ("b".into(), 5), ("c".into(), 1)])
    );
    assert!(
        Decision::from_json(
            r#"{"strategy":"Divided","placements":[],"unplaced":0,"reason":null,"x":1}"#
        )
        .is_err()
    );
}

#[test]
fn empty_and_degenerate_inputs_do_not_panic() {
    let policy = divided();
    for count in [
        Count::Replicas(0),
        Count::Replicas(u32::MAX),
        Count::Shards {
            total: u32::MAX,
            completed: BTreeSet::from([0, 5, u32::MAX]),
            parallelism: None,
        },
        Count::Shards {
            total: u32::MAX,
            completed: BTreeSet::from([0, 5, u32::MAX]),
            parallelism: Some(u32::MAX - 7),
        },
        Count::Gang(vec![]),
        Count::Gang(vec![
            GangRole {
                role: "w".into(),
                replicas: u32::MAX,
                pod: None,
            };
            3
        ]),
        Count::Whole,
    ] {
        let demand = Demand {
            member_pods: Default::default(),
            member_roles: Default::default(),
            pod: PodShape {
                resources: Resources {
                    cpu: Milli(-5),
                    memory: Milli(0),
                    gpu: -1,
                    pods: 0,
                },
                ..PodShape::default()
            },
            count,
        };
        let o = run(&[], &policy, &demand, None, None);
        let _ = o.decision.to_json();
        let o = on_local3(&policy, &demand);
        let _ = o.decision.to_json();
    }
}

/// The selector check reads cluster labels one key at a time instead of building the map;
/// both must see the same labels (explicit labels win over zone and region).
#[test]
fn selector_label_agrees_with_selector_labels() {
    let plain = ClusterView {
        labels: BTreeMap::new(),
        zone: None,
        region: None,
        ..local3()[0].clone()
    };
    let zoned = ClusterView {
        labels: BTreeMap::from([("tier".to_string(), "prod".to_string())]),
        zone: Some("z1".into()),
        region: Some("r1".into()),
        ..plain.clone()
    };
    let overridden = ClusterView {
        labels: BTreeMap::from([(ZONE_LABEL.to_string(), "label-zone".to_string())]),
        ..zoned.clone()
    };
    let keys = [ZONE_LABEL, REGION_LABEL, "tier", "missing"];
    let selectors = [
        Selector::default(),
        Selector {
            match_labels: BTreeMap::from([("tier".to_string(), "prod".to_string())]),
            ..Selector::default()
        },
        Selector {
            match_expressions: vec![
                Requirement {
                    key: ZONE_LABEL.into(),
                    operator: SelectorOperator::In,
                    values: vec!["z1".into(), "label-zone".into()],
                },
                Requirement {
                    key: REGION_LABEL.into(),
                    operator: SelectorOperator::NotIn,
                    values: vec!["r2".into()],
                },
                Requirement {
                    key: "missing".into(),
                    operator: SelectorOperator::DoesNotExist,
                    values: vec![],
                },
            ],
            ..Selector::default()
        },
        Selector {
            match_expressions: vec![Requirement {
                key: "tier".into(),
                operator: SelectorOperator::Exists,
                values: vec![],
            }],
            ..Selector::default()
        },
    ];
    for view in [&plain, &zoned, &overridden] {
        let labels = view.selector_labels();
        for key in keys {
            assert_eq!(
                view.selector_label(key),
                labels.get(key).map(String::as_str),
                "{} {key}",
                view.name
            );
        }
        for s in &selectors {
            assert_eq!(
                s.first_mismatch_by(|k| view.selector_label(k)),
                s.first_mismatch(&labels)
            );
        }
    }
    assert_eq!(overridden.selector_label(ZONE_LABEL), Some("label-zone"));
}

/// A member without nodes, for the tests of which members a workload must leave or reach.
fn member_view(
    name: &str,
    ready: bool,
    labels: &[(&str, &str)],
    taints: Vec<Taint>,
) -> ClusterView {
    ClusterView {
        name: name.into(),
        zone: None,
        region: None,
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        taints,
        weight: 1,
        ready,
        nodes: Vec::new(),
    }
}

#[test]
fn a_placed_member_must_be_left_on_a_no_execute_taint_or_a_selector_it_lost() {
    let view =
        |labels: &[(&str, &str)], taints: Vec<Taint>| member_view("use1a", true, labels, taints);
    let taint = |effect| Taint {
        key: "maintenance".into(),
        value: "".into(),
        effect,
    };
    let mut policy = PlacementPolicy::with_strategy(Strategy::Divided);
    policy.cluster_selector.match_labels = [("tier".to_string(), "gold".to_string())].into();
    let gold = [("tier", "gold")];
    assert_eq!(must_leave(&policy, &view(&gold, vec![])), None);
    // NoSchedule keeps new work away, not what runs; NoExecute moves it.
    assert_eq!(
        must_leave(&policy, &view(&gold, vec![taint(TaintEffect::NoSchedule)])),
        None
    );
    let why = must_leave(&policy, &view(&gold, vec![taint(TaintEffect::NoExecute)])).unwrap();
    assert!(
        why.contains("maintenance") && why.contains("not tolerated"),
        "{why}"
    );
    // A taint's move is paced by the fleet's budget; a selector's is not.
    assert!(crate::placement::model::leaves_for_taint(
        &policy,
        &view(&gold, vec![taint(TaintEffect::NoExecute)])
    ));
    assert!(!crate::placement::model::leaves_for_taint(
        &policy,
        &view(&[("tier", "silver")], vec![])
    ));
    policy.tolerations = vec![Toleration {
        key: "maintenance".into(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: None,
    }];
    assert_eq!(
        must_leave(&policy, &view(&gold, vec![taint(TaintEffect::NoExecute)])),
        None,
        "tolerated"
    );
    let why = must_leave(&policy, &view(&[("tier", "silver")], vec![])).unwrap();
    assert!(
        why.contains("no longer matches the cluster selector"),
        "{why}"
    );
}

// ---------------------------------------------------------------- explanations

#[test]
fn every_member_gets_its_share_explained_with_the_numbers_of_the_decision() {
    let mut tainted = cluster("c", "z3", vec![node("c1", "8", 110)]);
    tainted.taints = vec![Taint {
        key: "maintenance".into(),
        value: "true".into(),
        effect: TaintEffect::NoSchedule,
    }];
    let clusters = vec![
        cluster("a", "z1", vec![node("a1", "1", 110)]),
        cluster("b", "z2", vec![node("b1", "8", 110)]),
        tainted,
        cluster("d", "z4", vec![node("d1", "50m", 110)]),
    ];
    let mut quota = cpu_quota("100", "0");
    quota.clusters.insert(
        "b".into(),
        QuotaUse {
            hard: Limits {
                cpu: Some(q("1")),
                ..Limits::default()
            },
            used: Resources::ZERO,
        },
    );
    let o = run(
        &clusters,
        &divided(),
        &replicas(pod("500m", "64Mi", 0), 4),
        Some(&quota),
        None,
    );
    let why: BTreeMap<&str, (&str, u32)> = o
        .explained
        .iter()
        .map(|r| (r.cluster.as_str(), (r.why.as_str(), r.share)))
        .collect();
    assert_eq!(why.len(), 4, "{:?}", o.explained);
    // Room 2 pods of 500m on a: both used.
    assert!(
        why["a"].0.contains("room 2 pods of cpu 500m"),
        "{}",
        why["a"].0
    );
    assert_eq!(why["a"].1, 2);
    assert!(why["a"].0.ends_with("→ 2 replicas"), "{}", why["a"].0);
    // b has room for 16 but its quota for 2.
    assert!(why["b"].0.contains("room 16 pods"), "{}", why["b"].0);
    assert!(why["b"].0.contains("quota room 2 pods"), "{}", why["b"].0);
    assert_eq!(why["b"].1, 2);
    // c: the taint, d: no room, both with their numbers.
    assert!(
        why["c"].0.contains("excluded: cluster taint maintenance"),
        "{}",
        why["c"].0
    );
    assert!(
        why["d"]
            .0
            .contains("excluded: no node has room for one pod (cpu 500m"),
        "{}",
        why["d"].0
    );
    assert_eq!(
        o.explained.iter().map(|r| r.share).sum::<u32>(),
        4,
        "shares add up to the decision"
    );
    // Recorded bounded.
    let recorded = recorded::reasons_to_status(&o.explained);
    assert_eq!(recorded.len(), 4);
    assert!(recorded.iter().all(|r| r.reason.chars().count() <= 300));
}

#[test]
fn a_gang_its_overrides_make_too_big_for_a_member_is_not_placed_there_and_is_charged_as_overridden()
{
    // On use1c (16 GPUs) a master and 3 workers of 4 GPUs fit; an override asking 8 GPUs
    // a pod there does not (4 × 8 = 32).
    let mut d = training(3, 4);
    let big = Count::Gang(vec![
        role("Master", 1, Some(gpu_pod(8))),
        role("Worker", 3, Some(gpu_pod(8))),
    ]);
    let Count::Gang(roles) = big else {
        unreachable!()
    };
    d.member_roles.insert("use1c".into(), roles);
    let o = divided_on_local3(&d);
    assert_eq!(o.decision.unplaced, 4, "{}", json(&o));
    assert!(
        o.decision
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("use1c 2"),
        "{:?}",
        o.decision.reason
    );
    // Where it is placed, quota is charged for the member's own roles.
    let placed = Decision {
        strategy: Strategy::Single,
        placements: vec![Placement {
            cluster: "use1c".into(),
            replicas: Some(4),
            shards: None,
            pods: None,
        }],
        unplaced: 0,
        reason: None,
    };
    let usage = quota::usage_of(&placed, &d);
    assert_eq!(usage["use1c"].gpu, 32);
    assert_eq!(quota::usage_of(&placed, &training(3, 4))["use1c"].gpu, 16);
}

#[test]
fn a_ready_member_an_everywhere_workload_does_not_run_in_is_found_unless_it_is_not_admitted() {
    let view = member_view;
    let policy = PlacementPolicy::with_strategy(Strategy::Duplicated);
    let placed: BTreeSet<&str> = ["use1a"].into();
    let views = vec![
        view("use1a", true, &[], vec![]),
        view("use1b", false, &[], vec![]),
        view("use1c", true, &[], vec![]),
    ];
    // use1c came up after the decision; use1b is not Ready.
    assert_eq!(missing_everywhere(&policy, &placed, &views), Some("use1c"));
    let all: BTreeSet<&str> = ["use1a", "use1c"].into();
    assert_eq!(missing_everywhere(&policy, &all, &views), None);
    // Not admitted there: another name asked for, a selector it does not match, a taint
    // not tolerated.
    let mut named = policy.clone();
    named.cluster_names = vec!["use1a".into()];
    assert_eq!(missing_everywhere(&named, &placed, &views), None);
    let mut gold = policy.clone();
    gold.cluster_selector.match_labels = [("tier".to_string(), "gold".to_string())].into();
    assert_eq!(missing_everywhere(&gold, &placed, &views), None);
    let tainted = vec![
        view("use1a", true, &[], vec![]),
        view(
            "use1c",
            true,
            &[],
            vec![Taint {
                key: "maintenance".into(),
                value: "".into(),
                effect: TaintEffect::NoSchedule,
            }],
        ),
    ];
    assert_eq!(missing_everywhere(&policy, &placed, &tainted), None);
}

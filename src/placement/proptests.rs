//! Property tests: random clusters (zones, weights, readiness, node taints and labels,
//! odd sizes), pods, policies (min, max, spread) and quotas.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::Strategy as Placing;
use super::tests::run;
use super::{
    Bounds, ClusterView, Count, Decision, Demand, GangRole, Ledger, Limits, NodeRoom, Outcome,
    PlacementPolicy, PodShape, QuotaUse, QuotaView, Resources, Spread, Taint, TaintEffect,
    Toleration, TolerationOperator,
};
use crate::api::quantity::Milli;

const GI: i128 = 1 << 30;

fn arb_node(i: usize) -> impl proptest::strategy::Strategy<Value = NodeRoom> {
    (
        0i128..=32,
        0i128..=64,
        0i64..=12,
        0i64..=4,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            move |(half_cores, gib, pods, gpu, tainted, gpu_pool)| NodeRoom {
                name: format!("n{i}"),
                labels: if gpu_pool {
                    BTreeMap::from([("pool".to_string(), "gpu".to_string())])
                } else {
                    BTreeMap::new()
                },
                taints: if tainted {
                    vec![Taint {
                        key: "dedicated".into(),
                        value: "gpu".into(),
                        effect: TaintEffect::NoSchedule,
                    }]
                } else {
                    vec![]
                },
                free: Resources {
                    cpu: Milli(half_cores * 500),
                    memory: Milli(gib * GI * 1000),
                    gpu,
                    pods,
                },
            },
        )
}

fn arb_cluster(i: usize) -> impl proptest::strategy::Strategy<Value = ClusterView> {
    (
        prop::option::weighted(0.9, 0usize..3),
        0u32..=4,
        prop::bool::weighted(0.9),
        prop::collection::vec(0usize..4, 1..=4),
    )
        .prop_flat_map(move |(zone, weight, ready, node_ids)| {
            let nodes: Vec<_> = (0..node_ids.len()).map(arb_node).collect();
            nodes.prop_map(move |nodes| ClusterView {
                name: format!("c{i}"),
                zone: zone.map(|z| format!("z{z}")),
                region: Some("r".into()),
                labels: BTreeMap::new(),
                taints: vec![],
                weight,
                ready,
                nodes,
            })
        })
}

fn arb_clusters() -> impl proptest::strategy::Strategy<Value = Vec<ClusterView>> {
    (1usize..=6).prop_flat_map(|n| (0..n).map(arb_cluster).collect::<Vec<_>>())
}

fn arb_pod() -> impl proptest::strategy::Strategy<Value = PodShape> {
    (
        0i128..=16,
        0i128..=8,
        0i64..=2,
        any::<bool>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(quarter_cores, gib, gpu, tolerates, gpu_pool)| PodShape {
            resources: Resources::pod(Milli(quarter_cores * 250), Milli(gib * GI * 1000), gpu),
            node_selector: if gpu_pool {
                BTreeMap::from([("pool".to_string(), "gpu".to_string())])
            } else {
                BTreeMap::new()
            },
            tolerations: if tolerates {
                vec![Toleration {
                    key: "dedicated".into(),
                    operator: TolerationOperator::Exists,
                    ..Toleration::default()
                }]
            } else {
                vec![]
            },
        })
}

fn arb_policy() -> impl proptest::strategy::Strategy<Value = PlacementPolicy> {
    (
        prop::option::of(0u32..=4),
        prop::option::of(0u32..=20),
        0u32..=4,
        0u32..=3,
    )
        .prop_map(|(min, max, min_clusters, min_zones)| PlacementPolicy {
            per_cluster: Bounds { min, max },
            spread: Spread {
                min_clusters,
                min_zones,
            },
            ..PlacementPolicy::default()
        })
}

fn arb_quota() -> impl proptest::strategy::Strategy<Value = Option<QuotaView>> {
    prop::option::of(
        (
            prop::option::of(0i128..=100),
            prop::option::of(0i64..=60),
            0i128..=20,
        )
            .prop_map(|(cores, pods, used_cores)| QuotaView {
                name: "q".into(),
                total: QuotaUse {
                    hard: Limits {
                        cpu: cores.map(|c| Milli(c * 1000)),
                        pods,
                        ..Limits::default()
                    },
                    used: Resources {
                        cpu: Milli(used_cores * 1000),
                        ..Resources::ZERO
                    },
                },
                clusters: BTreeMap::new(),
            }),
    )
}

/// Replays the bindings onto the nodes: nothing overfilled, and each cluster's bound pods
/// equal its share.
fn check_bindings(
    clusters: &[ClusterView],
    o: &Outcome,
    pods_per_share: bool,
) -> Result<(), TestCaseError> {
    let mut used: BTreeMap<(&str, &str), Resources> = BTreeMap::new();
    let mut per_cluster: BTreeMap<&str, u64> = BTreeMap::new();
    for b in &o.bindings {
        let e = used
            .entry((b.cluster.as_str(), b.node.as_str()))
            .or_default();
        *e = e.checked_add(&b.resources).expect("no overflow");
        *per_cluster.entry(b.cluster.as_str()).or_default() += b.pods;
    }
    for ((c, n), r) in &used {
        let node = clusters
            .iter()
            .find(|x| x.name == *c)
            .and_then(|x| x.nodes.iter().find(|y| y.name == *n))
            .expect("binding on a known node");
        prop_assert!(
            r.fits_in(&node.free),
            "node {c}/{n} overfilled: {r:?} > {:?}",
            node.free
        );
    }
    if pods_per_share {
        let shares: BTreeMap<String, u32> = o.decision.shares();
        for (c, s) in &shares {
            prop_assert_eq!(
                per_cluster.get(c.as_str()).copied().unwrap_or(0),
                u64::from(*s)
            );
        }
        prop_assert_eq!(per_cluster.len(), shares.len());
    }
    Ok(())
}

fn room(c: &ClusterView, pod: &PodShape) -> u64 {
    c.nodes.iter().map(|n| pod.fit_on(n)).sum()
}

fn quota_left_ok(quota: Option<&QuotaView>, pod: &PodShape, placed: u64) -> bool {
    let Some(q) = quota else { return true };
    let req = pod.resources.as_pod_request();
    let Some(total) = req.checked_mul(placed) else {
        return false;
    };
    let left_ok =
        |hard: Option<i128>, used: i128, need: i128| hard.is_none_or(|h| need <= (h - used).max(0));
    left_ok(
        q.total.hard.cpu.map(|m| m.0),
        q.total.used.cpu.0,
        total.cpu.0,
    ) && left_ok(
        q.total.hard.pods.map(i128::from),
        i128::from(q.total.used.pods),
        i128::from(total.pods),
    )
}

fn sorted_names(d: &Decision) -> bool {
    d.placements.windows(2).all(|w| w[0].cluster < w[1].cluster)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn replicas_are_conserved_bounded_packed_and_within_quota(
        clusters in arb_clusters(), pod in arb_pod(), policy in arb_policy(),
        quota in arb_quota(), n in 0u32..80,
    ) {
        let demand = Demand { member_pods: Default::default(), member_roles: Default::default(), pod: pod.clone(), count: Count::Replicas(n) };
        let o = run(&clusters, &policy, &demand, quota.as_ref(), None);
        let d = &o.decision;
        let placed: u64 = d.shares().values().map(|&s| u64::from(s)).sum();
        prop_assert_eq!(placed + u64::from(d.unplaced), u64::from(n), "conserved");
        prop_assert_eq!(d.unplaced == 0, d.reason.is_none(), "reason iff unplaced: {:?}", d);
        prop_assert_eq!(d.unplaced == 0, o.cause.is_none());
        prop_assert!(sorted_names(d));
        for p in &d.placements {
            let c = clusters.iter().find(|c| c.name == p.cluster).unwrap();
            let share = p.replicas.unwrap();
            prop_assert!(share > 0, "clusters without a share are left out");
            prop_assert!(c.ready && c.weight > 0);
            let cap = room(c, &pod).min(u64::from(policy.per_cluster.max.unwrap_or(u32::MAX)));
            prop_assert!(u64::from(share) <= cap, "{} over its cap {cap}", p.cluster);
            // A min is clipped to the cluster's cap and to what is placed in all.
            let floor = u64::from(policy.per_cluster.min.unwrap_or(0)).min(cap).min(placed);
            prop_assert!(u64::from(share) >= floor, "{} below its min {floor}: {:?}", p.cluster, d);
        }
        prop_assert!(quota_left_ok(quota.as_ref(), &pod, placed), "quota exceeded");
        check_bindings(&clusters, &o, true)?;
        // Deterministic, and independent of the order clusters are listed in.
        prop_assert_eq!(&run(&clusters, &policy, &demand, quota.as_ref(), None), &o);
        let mut reversed = clusters.clone();
        reversed.reverse();
        prop_assert_eq!(&run(&reversed, &policy, &demand, quota.as_ref(), None).decision, d);
        // A re-plan with unchanged inputs returns the current decision.
        prop_assert_eq!(&run(&clusters, &policy, &demand, quota.as_ref(), Some(d)).decision, d);
    }

    #[test]
    fn copies_in_is_the_smallest_quotient(
        free in (-5i128..1_000_000, -5i128..1_000_000, -2i64..50, -2i64..200),
        need in (-5i128..50_000, -5i128..50_000, -2i64..4, -2i64..3),
    ) {
        let free = Resources { cpu: Milli(free.0), memory: Milli(free.1), gpu: free.2, pods: free.3 };
        let need = Resources { cpu: Milli(need.0), memory: Milli(need.1), gpu: need.2, pods: need.3 }
            .as_pod_request();
        let naive = [
            (free.cpu.0, need.cpu.0),
            (free.memory.0, need.memory.0),
            (i128::from(free.gpu), i128::from(need.gpu)),
            (i128::from(free.pods), i128::from(need.pods)),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(f, n)| if *f <= 0 { 0 } else { (f / n) as u64 })
        .min()
        .unwrap_or(u64::MAX);
        prop_assert_eq!(need.copies_in(&free), naive);
        // n copies fit in every dimension the pod asks for.
        let n = naive.min(1000);
        let all = need.checked_mul(n).unwrap();
        if n > 0 {
            prop_assert!(need.cpu.0 == 0 || all.cpu <= free.cpu);
            prop_assert!(need.memory.0 == 0 || all.memory <= free.memory);
            prop_assert!(need.gpu == 0 || all.gpu <= free.gpu);
            prop_assert!(all.pods <= free.pods);
        }
    }

    #[test]
    fn all_fits_when_room_and_quota_allow(
        clusters in arb_clusters(), pod in arb_pod(), n in 0u32..40,
    ) {
        let demand = Demand { member_pods: Default::default(), member_roles: Default::default(), pod: pod.clone(), count: Count::Replicas(n) };
        let o = run(&clusters, &PlacementPolicy::default(), &demand, None, None);
        let total_room: u64 = clusters
            .iter()
            .filter(|c| c.ready && c.weight > 0)
            .map(|c| room(c, &pod))
            .sum();
        prop_assert_eq!(u64::from(o.decision.unplaced), u64::from(n).saturating_sub(total_room));
    }

    #[test]
    fn scaling_up_never_lowers_a_share(
        clusters in arb_clusters(), pod in arb_pod(), mut policy in arb_policy(),
        n in 0u32..60, more in 1u32..30,
    ) {
        // House monotonicity of the divisor method (mins are a floor that a small total
        // cannot grant to everyone, so they are left out here).
        policy.per_cluster.min = None;
        let at = |n| run(&clusters, &policy, &Demand { member_pods: Default::default(), member_roles: Default::default(), pod: pod.clone(), count: Count::Replicas(n) }, None, None).decision.shares();
        let (small, big) = (at(n), at(n + more));
        for (c, s) in &small {
            prop_assert!(big.get(c).copied().unwrap_or(0) >= *s, "{c}: {small:?} -> {big:?}");
        }
        // And a scale-up from the current decision is the same as planning afresh.
        let current = run(&clusters, &policy, &Demand { member_pods: Default::default(), member_roles: Default::default(), pod: pod.clone(), count: Count::Replicas(n) }, None, None).decision;
        let up = run(&clusters, &policy, &Demand { member_pods: Default::default(), member_roles: Default::default(), pod: pod.clone(), count: Count::Replicas(n + more) }, None, Some(&current)).decision;
        prop_assert_eq!(up.shares(), big);
    }

    #[test]
    fn losing_a_cluster_moves_only_its_share(
        clusters in arb_clusters(), pod in arb_pod(), mut policy in arb_policy(),
        n in 1u32..60, lost in 0usize..6,
    ) {
        policy.per_cluster.min = None;
        let demand = Demand { member_pods: Default::default(), member_roles: Default::default(), pod, count: Count::Replicas(n) };
        let before = run(&clusters, &policy, &demand, None, None).decision;
        let mut after_clusters = clusters.clone();
        let lost = lost % clusters.len();
        after_clusters[lost].ready = false;
        let after = run(&after_clusters, &policy, &demand, None, Some(&before)).decision;
        let (b, a) = (before.shares(), after.shares());
        for (c, s) in &b {
            if *c != clusters[lost].name {
                prop_assert!(a.get(c).copied().unwrap_or(0) >= *s, "{c} lost seats: {b:?} -> {a:?}");
            }
        }
        prop_assert!(!a.contains_key(&clusters[lost].name));
    }

    #[test]
    fn shards_are_disjoint_never_completed_and_cover_the_rest(
        clusters in arb_clusters(), pod in arb_pod(), policy in arb_policy(),
        total in 0u32..120, completed in prop::collection::btree_set(0u32..130, 0..40),
        lost in 0usize..6, parallelism in prop::option::of(1u32..60),
    ) {
        let demand = Demand { member_pods: Default::default(), member_roles: Default::default(), pod, count: Count::Shards { total, completed: completed.clone(), parallelism } };
        let check = |o: &Outcome| -> Result<(), TestCaseError> {
            let mut seen = BTreeSet::new();
            for (c, ranges) in o.decision.shard_sets().unwrap() {
                prop_assert!(!ranges.is_empty(), "{c} listed without shards");
                for i in ranges.iter() {
                    prop_assert!(i < total, "index {i} out of range");
                    prop_assert!(!completed.contains(&i), "completed shard {i} placed");
                    prop_assert!(seen.insert(i), "shard {i} placed twice");
                }
            }
            let remaining: BTreeSet<u32> = (0..total).filter(|i| !completed.contains(i)).collect();
            prop_assert_eq!(seen.len() + o.decision.unplaced as usize, remaining.len());
            if o.decision.unplaced == 0 {
                prop_assert_eq!(&seen, &remaining);
            }
            Ok(())
        };
        let o = run(&clusters, &policy, &demand, None, None);
        check(&o)?;
        // With parallelism a cluster binds the pods it runs at once, its part of it.
        check_bindings(&clusters, &o, parallelism.is_none())?;
        if let Some(p) = parallelism {
            let held: Vec<u64> = o.decision.shard_sets().unwrap().values().map(|r| r.len()).collect();
            let bound: u64 = o.bindings.iter().map(|b| b.pods).sum();
            prop_assert!(bound <= crate::placement::parallelism_shares(p, &held).iter().sum::<u64>());
        }
        prop_assert_eq!(&run(&clusters, &policy, &demand, None, Some(&o.decision)).decision, &o.decision);
        // Failover: the survivors keep every unfinished shard they had.
        let mut after_clusters = clusters.clone();
        let lost = lost % clusters.len();
        after_clusters[lost].ready = false;
        let mut policy = policy;
        policy.per_cluster.min = None;
        let before = run(&clusters, &policy, &demand, None, None);
        let after = run(&after_clusters, &policy, &demand, None, Some(&before.decision));
        check(&after)?;
        let had = before.decision.shard_sets().unwrap();
        let now = after.decision.shard_sets().unwrap();
        for (c, r) in &had {
            if *c == clusters[lost].name { continue; }
            let now_set: BTreeSet<u32> = now.get(c).into_iter().flat_map(|s| s.iter()).collect();
            for i in r.iter() {
                prop_assert!(now_set.contains(&i), "{c} lost shard {i}: {:?} -> {:?}", before.decision, after.decision);
            }
        }
    }

    #[test]
    fn gangs_are_all_or_nothing_in_one_cluster(
        clusters in arb_clusters(), pod in arb_pod(), other in arb_pod(),
        a in 0u32..6, b in 0u32..6, quota in arb_quota(),
    ) {
        let demand = Demand { member_pods: Default::default(), member_roles: Default::default(),
            pod: pod.clone(),
            count: Count::Gang(vec![
                GangRole { role: "Master".into(), replicas: a, pod: None },
                GangRole { role: "Worker".into(), replicas: b, pod: Some(other.clone()) },
            ]),
        };
        let o = run(&clusters, &PlacementPolicy::default(), &demand, quota.as_ref(), None);
        let d = &o.decision;
        prop_assert_eq!(d.strategy, Placing::Single);
        if d.placements.is_empty() {
            prop_assert_eq!(d.unplaced, a + b);
            prop_assert!(o.bindings.is_empty());
            prop_assert!(a + b == 0 || d.reason.is_some());
        } else {
            prop_assert_eq!(d.placements.len(), 1);
            prop_assert_eq!(d.placements[0].replicas, Some(a + b));
            prop_assert_eq!(d.unplaced, 0);
            check_bindings(&clusters, &o, true)?;
            let gpus: i64 = o.bindings.iter().map(|x| x.resources.gpu).sum();
            let want = i64::from(a) * pod.resources.gpu + i64::from(b) * other.resources.gpu;
            prop_assert_eq!(gpus, want);
        }
        prop_assert_eq!(&run(&clusters, &PlacementPolicy::default(), &demand, quota.as_ref(), Some(d)).decision, d);
    }

    #[test]
    fn daemons_and_single_are_deterministic_and_packed(
        clusters in arb_clusters(), pod in arb_pod(), quota in arb_quota(), single in any::<bool>(),
    ) {
        let policy = PlacementPolicy::with_strategy(if single { Placing::Single } else { Placing::Duplicated });
        let demand = Demand { member_pods: Default::default(), member_roles: Default::default(), pod, count: Count::Whole };
        let o = run(&clusters, &policy, &demand, quota.as_ref(), None);
        prop_assert!(sorted_names(&o.decision));
        prop_assert!(!single || o.decision.placements.len() <= 1);
        prop_assert_eq!(o.decision.unplaced == 0, o.decision.reason.is_none());
        check_bindings(&clusters, &o, false)?;
        let placed: u64 = o.bindings.iter().map(|b| b.pods).sum();
        prop_assert!(quota_left_ok(quota.as_ref(), &demand.pod, placed), "quota exceeded");
        prop_assert_eq!(&run(&clusters, &policy, &demand, quota.as_ref(), Some(&o.decision)), &o);
    }

    #[test]
    fn burst_with_the_ledger_never_overfills_a_node(
        clusters in arb_clusters(), pods in prop::collection::vec(arb_pod(), 1..6), n in 1u32..20,
    ) {
        let mut ledger = Ledger::new();
        let t = std::time::SystemTime::UNIX_EPOCH;
        for (i, pod) in pods.iter().enumerate() {
            let mut view = clusters.clone();
            ledger.apply(&mut view, None);
            let o = run(&view, &PlacementPolicy::default(), &Demand { member_pods: Default::default(), member_roles: Default::default(), pod: pod.clone(), count: Count::Replicas(n) }, None, None);
            ledger.reserve(&format!("w{i}"), &o, t);
        }
        // All reservations together fit the original room.
        let mut used: BTreeMap<(String, String), Resources> = BTreeMap::new();
        for i in 0..pods.len() {
            for b in ledger.get(&format!("w{i}")).map(|r| r.bindings.clone()).unwrap_or_default() {
                let e = used.entry((b.cluster, b.node)).or_default();
                *e = e.checked_add(&b.resources).unwrap();
            }
        }
        for ((c, n), r) in used {
            let node = clusters.iter().find(|x| x.name == c).and_then(|x| x.nodes.iter().find(|y| y.name == n)).unwrap();
            prop_assert!(r.fits_in(&node.free), "{c}/{n} overfilled by the burst");
        }
    }
}

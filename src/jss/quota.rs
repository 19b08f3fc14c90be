//! Quota at submission: what a workload requests (the pods it will run, each with its
//! runtime sidecars), what the namespace's other workloads already request, and whether
//! both fit under each FederatedQuota's hard totals. Pure.
//!
//! The hub enforces the same quota again at placement (per cluster too); the JSS checks
//! totals so a submission that cannot fit is turned down at once, with the numbers.

use serde::Serialize;

use crate::api::federation::{Amounts, FederatedQuota};
use crate::api::quantity::Milli;
use crate::placement;
use crate::placement::model::{ClusterView, Count, Demand, PlacementPolicy, Resources};
use crate::placement::{Cause, PlanInput, plan};

/// What a workload requests of the federation in total. Replicas, unfinished shards (at
/// most the job set's parallelism: that many run at once) and every pod of a gang count
/// once each; a whole workload counts `whole_pods` (at least one): a daemon its pods on
/// every member that runs it ([`whole_pods`], or as the hub recorded them), a cron job one.
pub fn requested(demand: &Demand, whole_pods: u64) -> Resources {
    // As the hub's engine counts a total: the biggest pod where overrides change it.
    let pod = demand.largest_pod().as_pod_request();
    let times = |r: &Resources, n: u64| {
        r.checked_mul(n).unwrap_or(Resources {
            cpu: Milli(i128::MAX),
            memory: Milli(i128::MAX),
            gpu: i64::MAX,
            pods: i64::MAX,
        })
    };
    match &demand.count {
        Count::Replicas(n) => times(&pod, u64::from(*n)),
        Count::Shards {
            total,
            completed,
            parallelism,
        } => {
            let left = u64::from(*total) - completed.iter().filter(|&&i| i < *total).count() as u64;
            times(&pod, parallelism.map_or(left, |p| left.min(u64::from(p))))
        }
        // The biggest gang over the members whose overrides change a role's pod.
        Count::Gang(roles) => std::iter::once(roles)
            .chain(demand.member_roles.values())
            .map(|roles| {
                roles.iter().fold(Resources::ZERO, |acc, role| {
                    let p = role
                        .pod
                        .as_ref()
                        .map(|s| s.resources.as_pod_request())
                        .unwrap_or(pod);
                    acc.saturating_add(&times(&p, u64::from(role.replicas)))
                })
            })
            .fold(Resources::ZERO, |a, b| Resources {
                cpu: a.cpu.max(b.cpu),
                memory: a.memory.max(b.memory),
                gpu: a.gpu.max(b.gpu),
                pods: a.pods.max(b.pods),
            }),
        Count::Whole => times(&pod, whole_pods.max(1)),
    }
}

/// One exceeded dimension, formatted for people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct QuotaRow {
    pub resource: &'static str,
    pub requested: String,
    pub used: String,
    pub hard: String,
}

/// A quota the submission does not fit in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
pub struct QuotaExceeded {
    /// `namespace/name` of the FederatedQuota.
    pub quota: String,
    pub rows: Vec<QuotaRow>,
}

impl std::fmt::Display for QuotaExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "quota {} exceeded:", self.quota)?;
        for (i, r) in self.rows.iter().enumerate() {
            let sep = if i == 0 { "" } else { ";" };
            if r.resource == PER_CLUSTER {
                write!(f, "{sep} {}: {}", r.resource, r.hard)?;
            } else {
                write!(
                    f,
                    "{sep} {}: requested {} + used {} > hard {}",
                    r.resource, r.requested, r.used, r.hard
                )?;
            }
        }
        Ok(())
    }
}

/// Checks `used + requested <= hard` in every dimension the quota limits and the
/// submission asks for (asking nothing of a dimension already over its limit adds
/// nothing to it; the hub places such a workload too).
pub fn check(
    quota: &str,
    hard: &Amounts,
    used: &Resources,
    requested: &Resources,
) -> Result<(), QuotaExceeded> {
    let mut rows = Vec::new();
    let sum = used.saturating_add(requested);
    if let Some(h) = hard.cpu
        && requested.cpu.0 > 0
        && sum.cpu > h
    {
        rows.push(QuotaRow {
            resource: "cpu",
            requested: requested.cpu.format_cpu(),
            used: used.cpu.format_cpu(),
            hard: h.format_cpu(),
        });
    }
    if let Some(h) = hard.memory
        && requested.memory.0 > 0
        && sum.memory > h
    {
        rows.push(QuotaRow {
            resource: "memory",
            requested: requested.memory.format_memory(),
            used: used.memory.format_memory(),
            hard: h.format_memory(),
        });
    }
    if let Some(h) = hard.gpus
        && requested.gpu > 0
        && i128::from(sum.gpu) * 1000 > h.0
    {
        rows.push(QuotaRow {
            resource: "gpus",
            requested: requested.gpu.to_string(),
            used: used.gpu.to_string(),
            hard: h.to_string(),
        });
    }
    if let Some(h) = hard.pods
        && requested.pods > 0
        && i128::from(sum.pods) * 1000 > h.0
    {
        rows.push(QuotaRow {
            resource: "pods",
            requested: requested.pods.to_string(),
            used: used.pods.to_string(),
            hard: h.to_string(),
        });
    }
    if rows.is_empty() {
        Ok(())
    } else {
        Err(QuotaExceeded {
            quota: quota.to_string(),
            rows,
        })
    }
}

/// Checks every quota of the namespace; the first exceeded one is the answer. A quota
/// whose `spec.hard` does not parse is reported as exceeded with the parse error (the
/// hub would not place under it either).
pub fn check_all(
    quotas: &[FederatedQuota],
    used: &Resources,
    requested: &Resources,
) -> Result<(), QuotaExceeded> {
    for q in quotas {
        let name = format!(
            "{}/{}",
            q.metadata.namespace.as_deref().unwrap_or_default(),
            q.metadata.name.as_deref().unwrap_or_default()
        );
        match q.spec.hard.parse() {
            Ok(hard) => check(&name, &hard, used, requested)?,
            Err(e) => {
                return Err(QuotaExceeded {
                    quota: name,
                    rows: vec![QuotaRow {
                        resource: "spec.hard",
                        requested: "-".into(),
                        used: "-".into(),
                        hard: e.to_string(),
                    }],
                });
            }
        }
    }
    Ok(())
}

/// The pods a whole workload runs as the hub's engine places it on `clusters` (at least
/// one): a daemon one per node of each member it runs in, a cron job one. It counts the
/// engine's own decision ([`Decision::whole_pods`]), the number the hub charges.
///
/// [`Decision::whole_pods`]: crate::placement::Decision::whole_pods
pub fn whole_pods(clusters: &[ClusterView], policy: &PlacementPolicy, demand: &Demand) -> u64 {
    let outcome = plan(&PlanInput {
        clusters,
        policy,
        demand: &without_node_selectors(demand),
        quota: None,
        current: None,
    });
    outcome.decision.whole_pods().max(1)
}

/// The demand with its pods' node selectors dropped: the JSS sees how many nodes each
/// member has, not their labels, so it counts every node a pod could land on (at most
/// what the hub finds; never less).
pub(super) fn without_node_selectors(demand: &Demand) -> Demand {
    let mut d = demand.clone();
    d.pod.node_selector.clear();
    for pod in d.member_pods.values_mut() {
        pod.node_selector.clear();
    }
    if let Count::Gang(roles) = &mut d.count {
        for pod in roles.iter_mut().filter_map(|r| r.pod.as_mut()) {
            pod.node_selector.clear();
        }
    }
    d
}

/// The row of a refusal by per-cluster caps: its `hard` is the placement's reason.
pub const PER_CLUSTER: &str = "perCluster";

/// Whether the namespace's quotas, per-cluster caps included, let the whole workload be
/// placed on `clusters` (capacity aside: give each member its count of
/// [`unbounded_nodes`]; node selectors are not narrowed). It asks the
/// hub's own engine with the tightest view of every quota, so the JSS turns down what the
/// hub would hold back for quota. `used` is the namespace's total; per-cluster usage is
/// what each quota's status records. Totals are [`check_all`]'s job (with numbers).
///
/// [`unbounded_nodes`]: crate::placement::from_member::unbounded_nodes
pub fn check_placeable(
    quotas: &[FederatedQuota],
    used: &Resources,
    clusters: &[ClusterView],
    policy: &PlacementPolicy,
    demand: &Demand,
) -> Result<(), QuotaExceeded> {
    let views = quotas
        .iter()
        .filter_map(|q| {
            // Per-cluster usage as the quota's status records it; the total as counted now.
            let mut view = placement::quota::quota_view(q, None).ok()?;
            view.total.used = *used;
            Some(view)
        })
        .collect();
    let Some(view) = placement::quota::tightest(views) else {
        return Ok(());
    };
    let outcome = plan(&PlanInput {
        clusters,
        policy,
        demand: &without_node_selectors(demand),
        quota: Some(&view),
        current: None,
    });
    if outcome.cause != Some(Cause::QuotaExceeded) {
        return Ok(());
    }
    Err(QuotaExceeded {
        quota: view.name,
        rows: vec![QuotaRow {
            resource: PER_CLUSTER,
            requested: outcome.decision.unplaced.to_string(),
            used: "-".into(),
            hard: outcome
                .decision
                .reason
                .unwrap_or_else(|| format!("{} unplaced", outcome.decision.unplaced)),
        }],
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::placement::model::{GangRole, PodShape};

    fn demand(count: Count) -> Demand {
        Demand {
            member_pods: Default::default(),
            member_roles: Default::default(),
            pod: PodShape {
                resources: Resources::pod(Milli(500), Milli(1000 << 30), 0),
                ..Default::default()
            },
            count,
        }
    }

    #[test]
    fn requested_counts_every_pod_that_will_run() {
        let r = requested(&demand(Count::Replicas(4)), 3);
        assert_eq!((r.cpu, r.pods), (Milli(2000), 4));
        let r = requested(
            &demand(Count::Shards {
                total: 10,
                completed: BTreeSet::from([0, 1, 2]),
                parallelism: None,
            }),
            3,
        );
        assert_eq!(r.pods, 7, "completed shards do not count");
        let r = requested(
            &demand(Count::Shards {
                total: 1000,
                completed: BTreeSet::from([0, 1, 2]),
                parallelism: Some(10),
            }),
            3,
        );
        assert_eq!(r.pods, 10, "a job set runs at most its parallelism at once");
        let gpu_pod = PodShape {
            resources: Resources::pod(Milli(4000), Milli(0), 2),
            ..Default::default()
        };
        let r = requested(
            &demand(Count::Gang(vec![
                GangRole {
                    role: "Master".into(),
                    replicas: 1,
                    pod: None,
                },
                GangRole {
                    role: "Worker".into(),
                    replicas: 3,
                    pod: Some(gpu_pod),
                },
            ])),
            3,
        );
        assert_eq!((r.cpu, r.gpu, r.pods), (Milli(12500), 6, 4));
        assert_eq!(requested(&demand(Count::Whole), 3).pods, 3);
        assert_eq!(requested(&demand(Count::Whole), 0).pods, 1);
    }

    #[test]
    fn check_reports_each_exceeded_dimension_with_numbers() {
        let hard = Amounts {
            cpu: Some(Milli(4000)),
            memory: Some(Milli(8000 << 30)),
            pods: Some(Milli(10_000)),
            gpus: None,
        };
        let used = Resources {
            cpu: Milli(3000),
            memory: Milli(1000 << 30),
            gpu: 5,
            pods: 6,
        };
        let fits = Resources::pod(Milli(1000), Milli(1000 << 30), 100);
        assert!(
            check("ads/q", &hard, &used, &fits).is_ok(),
            "gpus unlimited"
        );
        let too_much = Resources {
            cpu: Milli(1500),
            memory: Milli(1000 << 30),
            gpu: 0,
            pods: 5,
        };
        let e = check("ads/q", &hard, &used, &too_much).unwrap_err();
        assert_eq!(e.rows.len(), 2);
        assert_eq!(
            e.rows[0],
            QuotaRow {
                resource: "cpu",
                requested: "1500m".into(),
                used: "3".into(),
                hard: "4".into()
            }
        );
        assert_eq!(e.rows[1].resource, "pods");
        assert_eq!(
            e.to_string(),
            "quota ads/q exceeded: cpu: requested 1500m + used 3 > hard 4; pods: requested 5 + used 6 > hard 10"
        );
    }

    #[test]
    fn exactly_full_is_allowed() {
        let hard = Amounts {
            cpu: Some(Milli(2000)),
            ..Default::default()
        };
        let half = Resources::pod(Milli(1000), Milli(0), 0);
        assert!(check("q", &hard, &half, &half).is_ok());
    }

    fn clusters(names: &[&str]) -> Vec<ClusterView> {
        let one_node_each = vec![(1, 0); names.len()];
        clusters_with_nodes(names, &one_node_each)
    }

    /// Members with `(room, full)` nodes each: `room` nodes with room for anything, then
    /// `full` nodes with room for nothing.
    fn clusters_with_nodes(names: &[&str], nodes: &[(usize, usize)]) -> Vec<ClusterView> {
        use crate::placement::from_member::unbounded_node;
        names
            .iter()
            .zip(nodes)
            .map(|(n, &(room, full))| ClusterView {
                name: n.to_string(),
                zone: None,
                region: None,
                labels: Default::default(),
                taints: vec![],
                weight: 1,
                ready: true,
                nodes: (0..room + full)
                    .map(|i| crate::placement::NodeRoom {
                        name: format!("{n}-{i}"),
                        free: if i < room {
                            unbounded_node().free
                        } else {
                            Resources::ZERO
                        },
                        ..unbounded_node()
                    })
                    .collect(),
            })
            .collect()
    }

    #[test]
    fn a_daemon_counts_a_pod_on_every_node_of_every_member_it_runs_in() {
        // Members of 3 and 5 nodes: the daemon runs 8 pods, as the hub charges it.
        let cs = clusters_with_nodes(&["a", "b"], &[(3, 0), (5, 0)]);
        let mut daemon = demand(Count::Whole);
        // The JSS does not see node labels: a node selector is not narrowed.
        daemon.pod.node_selector.insert("pool".into(), "web".into());
        let policy = PlacementPolicy::default();
        let pods = whole_pods(&cs, &policy, &daemon);
        assert_eq!(pods, 8);
        assert_eq!(requested(&daemon, pods).pods, 8);
        // A quota of 7 pods does not hold it, whether by total or by a member's cap.
        let used = Resources::ZERO;
        let e = check_all(&[quota("q", "7", &[])], &used, &requested(&daemon, pods)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "quota ads/q exceeded: pods: requested 8 + used 0 > hard 7"
        );
        let capped = [quota("q", "100", &[("b", "4")])];
        let e = check_placeable(&capped, &used, &cs, &policy, &daemon).unwrap_err();
        assert!(e.rows[0].hard.contains("b (5 pods)"), "{e}");
        let fits = [quota("q", "8", &[("a", "3"), ("b", "5")])];
        assert_eq!(check_all(&fits, &used, &requested(&daemon, pods)), Ok(()));
        assert_eq!(check_placeable(&fits, &used, &cs, &policy, &daemon), Ok(()));
        // A cron job runs one pod wherever it runs.
        let cron = PlacementPolicy::with_strategy(crate::placement::Strategy::Single);
        assert_eq!(whole_pods(&cs, &cron, &demand(Count::Whole)), 1);
    }

    fn quota(name: &str, hard: &str, per_cluster: &[(&str, &str)]) -> FederatedQuota {
        let per: serde_json::Map<String, serde_json::Value> = per_cluster
            .iter()
            .map(|(c, pods)| (c.to_string(), serde_json::json!({ "pods": pods })))
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "FederatedQuota",
            "metadata": {"name": name, "namespace": "ads"},
            "spec": {"hard": {"pods": hard}, "perCluster": per}
        }))
        .unwrap()
    }

    #[test]
    fn per_cluster_caps_are_checked_at_submission_by_the_hubs_engine() {
        let cs = clusters(&["a", "b", "c"]);
        let policy = PlacementPolicy {
            cluster_names: vec!["a".into(), "b".into()],
            ..Default::default()
        };
        // One quota leaves totals open; another caps a and b at 2 pods each (c is not
        // allowed by the policy): 4 replicas fit, 5 do not, with the engine's reason.
        let quotas = [
            quota("big", "100", &[]),
            quota("caps", "100", &[("a", "2"), ("b", "2")]),
        ];
        let used = Resources::ZERO;
        let four = demand(Count::Replicas(4));
        assert_eq!(check_placeable(&quotas, &used, &cs, &policy, &four), Ok(()));
        let e =
            check_placeable(&quotas, &used, &cs, &policy, &demand(Count::Replicas(5))).unwrap_err();
        assert_eq!(e.quota, "ads/big+ads/caps");
        assert_eq!(e.rows[0].resource, PER_CLUSTER);
        assert_eq!(e.rows[0].requested, "1", "one replica unplaced");
        assert!(e.to_string().contains("perCluster: "), "{e}");
        assert!(e.rows[0].hard.contains("quota"), "{e}");
        // Without caps the same 5 fit; a total of 3 is check_all's job, not this one's.
        let open = [quota("big", "3", &[])];
        assert_eq!(
            check_placeable(&open, &used, &cs, &PlacementPolicy::default(), &four)
                .map_err(|e| e.quota),
            Err("ads/big".to_string()),
            "the engine also holds back over the total"
        );
    }

    proptest::proptest! {
        /// The JSS and the hub never disagree on what a workload costs: for random
        /// workloads, quotas and members of several nodes, what the hub charges its quota
        /// book for a whole placement is what the JSS counts (`requested`, a daemon by
        /// `whole_pods`: a pod on every node with room), and what the JSS admits (totals by
        /// `requested`, caps by the engine) is what the hub's engine places whole within
        /// the same quotas. The JSS sees each member's node count, not which nodes are
        /// full; with full nodes it counts a daemon more pods than the hub finds room for,
        /// so it admits only what the hub places.
        #[test]
        fn the_jss_admits_exactly_what_the_hub_places_within_quota(
            kind in 0u8..6,
            n in 1u32..12,
            par in 1u32..12,
            cpu_m in 1i128..3000,
            hard_pods in 1i64..30,
            hard_cpu_m in 1i128..40_000,
            caps in proptest::collection::vec(proptest::option::of(0i64..8), 3),
            used_pods in 0i64..10,
            done in proptest::collection::btree_set(0u32..12, 0..6),
            room_nodes in proptest::collection::vec(1usize..6, 3),
            full_nodes in proptest::collection::vec(proptest::prop_oneof![3 => proptest::strategy::Just(0usize), 1 => 1usize..3], 3),
        ) {
            let count = match kind {
                0 => Count::Replicas(n),
                1 => Count::Shards { total: n, completed: done.into_iter().filter(|i| *i < n).collect(), parallelism: None },
                4 => Count::Shards { total: n, completed: done.into_iter().filter(|i| *i < n).collect(), parallelism: Some(par) },
                2 => Count::Gang(vec![
                    crate::placement::GangRole { role: "Master".into(), replicas: 1, pod: None },
                    crate::placement::GangRole { role: "Worker".into(), replicas: n, pod: None },
                ]),
                _ => Count::Whole,
            };
            let policy = PlacementPolicy {
                strategy: match kind {
                    2 | 5 => crate::placement::Strategy::Single,
                    3 => crate::placement::Strategy::Duplicated,
                    _ => crate::placement::Strategy::Divided,
                },
                ..Default::default()
            };
            let d = Demand { member_pods: Default::default(), member_roles: Default::default(),
                pod: PodShape { resources: Resources::pod(Milli(cpu_m), Milli(0), 0), ..Default::default() },
                count,
            };
            let names = ["a", "b", "c"];
            // The hub sees which nodes have room; the JSS only how many nodes there are.
            let hub_nodes: Vec<(usize, usize)> = room_nodes.iter().copied().zip(full_nodes.iter().copied()).collect();
            let jss_nodes: Vec<(usize, usize)> = hub_nodes.iter().map(|&(r, f)| (r + f, 0)).collect();
            let hub_cs = clusters_with_nodes(&names, &hub_nodes);
            let jss_cs = clusters_with_nodes(&names, &jss_nodes);
            let exact = full_nodes.iter().all(|&f| f == 0);
            let per: Vec<(String, String)> = names.iter().zip(&caps)
                .filter_map(|(c, cap)| cap.map(|p| (c.to_string(), p.to_string())))
                .collect();
            let per: Vec<(&str, &str)> = per.iter().map(|(c, p)| (c.as_str(), p.as_str())).collect();
            let mut q = quota("q", &hard_pods.to_string(), &per);
            q.spec.hard.cpu = Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(format!("{hard_cpu_m}m")));
            let quotas = [q];
            let used = Resources { pods: used_pods, ..Resources::ZERO };
            let want = requested(&d, whole_pods(&jss_cs, &policy, &d));

            // What a whole placement charges the hub's book is what the JSS counts (a
            // daemon: a pod on each node with room in every member).
            let free = plan(&PlanInput { clusters: &hub_cs, policy: &policy, demand: &d, quota: None, current: None });
            proptest::prop_assert_eq!(free.decision.unplaced, 0);
            let charged = placement::quota::usage_of(&free.decision, &d)
                .values()
                .fold(Resources::ZERO, |acc, r| acc.saturating_add(r));
            if kind == 3 {
                let with_room: usize = room_nodes.iter().sum();
                proptest::prop_assert_eq!(charged.pods, with_room as i64);
            }
            if exact {
                proptest::prop_assert_eq!(charged, want);
            } else {
                proptest::prop_assert!(charged.pods <= want.pods && charged.cpu <= want.cpu, "charged {:?} counted {:?}", charged, want);
            }
            // The hub's restart charges the same, from the decision it recorded.
            let recorded = crate::placement::recorded::from_status(&crate::placement::recorded::to_status(&free.decision));
            proptest::prop_assert_eq!(placement::quota::usage_of(&recorded, &d), placement::quota::usage_of(&free.decision, &d));

            // Admitted by the JSS <=> placed whole by the hub within the same quota (=>
            // only, where the JSS cannot see full nodes).
            let jss = check_all(&quotas, &used, &want)
                .and_then(|()| check_placeable(&quotas, &used, &jss_cs, &policy, &d));
            let view = placement::quota::quota_view(&quotas[0], Some(&placement::quota::Usage { total: used, per_cluster: Default::default() })).unwrap();
            let hub = plan(&PlanInput { clusters: &hub_cs, policy: &policy, demand: &d, quota: Some(&view), current: None });
            if exact {
                proptest::prop_assert_eq!(jss.is_ok(), hub.decision.unplaced == 0, "jss {:?} hub {:?}", jss, hub.decision);
            } else {
                proptest::prop_assert!(jss.is_err() || hub.decision.unplaced == 0, "jss admitted, hub {:?}", hub.decision);
            }
        }
    }
}

//! From a Pinterest resource to the engine's inputs: its placement policy, and its demand
//! — the pod shape after runtime injection (so sidecars count), node selector and
//! tolerations, and what is counted (replicas, shards, a gang, or the whole workload).
//! Pure: the pod shape comes from the expansion engine.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::api::DynamicObject;

use super::capacity::pod_requests;
use super::model::{
    Bounds, ClusterView, Count, Demand, GangRole, PlacementPolicy, PodShape, Requirement,
    Resources, Selector, SelectorOperator, Spread, Strategy, TaintEffect, Toleration,
    TolerationOperator,
};
use crate::api::common::{self, LABEL_REPLICA_TYPE, PlacementStrategy};
use crate::api::kind::Sizing;
use crate::api::ranges::RangeSet;
use crate::api::runtime_profile::RuntimeProfile;
use crate::api::validate::Invalid;
use crate::api::workload::{AnyWorkload, WorkloadRef};
use crate::expand::{self, ExpandError, ExpandInput};
use crate::overrides;

fn effect(e: common::TaintEffect) -> TaintEffect {
    match e {
        common::TaintEffect::NoSchedule => TaintEffect::NoSchedule,
        common::TaintEffect::PreferNoSchedule => TaintEffect::PreferNoSchedule,
        common::TaintEffect::NoExecute => TaintEffect::NoExecute,
    }
}

fn bound(v: Option<i32>) -> Option<u32> {
    v.map(|n| u32::try_from(n).unwrap_or(0))
}

/// The workload's placement policy in the engine's terms (kind defaults applied).
pub fn policy_for(w: WorkloadRef<'_>) -> PlacementPolicy {
    let p = w.placement();
    let selector = p.cluster_selector.clone().unwrap_or_default();
    PlacementPolicy {
        strategy: match w.strategy() {
            PlacementStrategy::Divided => Strategy::Divided,
            PlacementStrategy::Duplicated => Strategy::Duplicated,
            PlacementStrategy::Single => Strategy::Single,
        },
        cluster_selector: Selector {
            match_labels: selector.match_labels,
            match_expressions: selector
                .match_expressions
                .into_iter()
                .map(|r| Requirement {
                    key: r.key,
                    operator: match r.operator {
                        common::SelectorOperator::In => SelectorOperator::In,
                        common::SelectorOperator::NotIn => SelectorOperator::NotIn,
                        common::SelectorOperator::Exists => SelectorOperator::Exists,
                        common::SelectorOperator::DoesNotExist => SelectorOperator::DoesNotExist,
                    },
                    values: r.values,
                })
                .collect(),
        },
        cluster_names: p
            .cluster_affinity
            .as_ref()
            .map(|a| a.cluster_names.clone())
            .unwrap_or_default(),
        zones: p
            .cluster_affinity
            .as_ref()
            .map(|a| a.zones.clone())
            .unwrap_or_default(),
        tolerations: p
            .tolerations
            .iter()
            .map(|t| Toleration {
                key: t.key.clone(),
                operator: match t.operator {
                    common::TolerationOperator::Equal => TolerationOperator::Equal,
                    common::TolerationOperator::Exists => TolerationOperator::Exists,
                },
                value: t.value.clone(),
                effect: t.effect.map(effect),
            })
            .collect(),
        weights: p
            .weights
            .iter()
            .map(|(k, v)| (k.clone(), u32::try_from(*v).unwrap_or(0)))
            .collect(),
        per_cluster: Bounds {
            min: bound(p.min_per_cluster),
            max: bound(p.max_per_cluster),
        },
        cluster_limits: p
            .cluster_limits
            .iter()
            .map(|(k, l)| {
                (
                    k.clone(),
                    Bounds {
                        min: bound(l.min),
                        max: bound(l.max),
                    },
                )
            })
            .collect(),
        spread: Spread {
            min_clusters: p
                .spread
                .as_ref()
                .and_then(|s| bound(s.min_clusters))
                .unwrap_or(0),
            min_zones: p
                .spread
                .as_ref()
                .and_then(|s| bound(s.min_zones))
                .unwrap_or(0),
        },
        // Filled by the hub from the workload's status (application failover).
        avoid: BTreeMap::new(),
    }
}

/// The pod shape of a pod spec: its scheduler requests (sidecars included), node
/// selector and tolerations.
pub fn pod_shape(spec: &PodSpec) -> PodShape {
    let pod = Pod {
        spec: Some(spec.clone()),
        ..Default::default()
    };
    let r = pod_requests(&pod);
    PodShape {
        resources: Resources {
            cpu: r.cpu,
            memory: r.memory,
            gpu: i64::try_from(r.gpus.units()).unwrap_or(i64::MAX),
            pods: 1,
        },
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        tolerations: spec
            .tolerations
            .iter()
            .flatten()
            .map(|t| Toleration {
                key: t.key.clone().unwrap_or_default(),
                operator: if t.operator.as_deref() == Some("Exists") {
                    TolerationOperator::Exists
                } else {
                    TolerationOperator::Equal
                },
                value: t.value.clone().unwrap_or_default(),
                effect: t.effect.as_deref().map(TaintEffect::parse),
            })
            .collect(),
    }
}

/// The pod spec inside a generated workload object, if it has one.
fn template_of(o: &DynamicObject) -> Option<PodSpec> {
    let kind = o.types.as_ref()?.kind.as_str();
    let spec = match kind {
        "Deployment" | "StatefulSet" | "DaemonSet" | "Job" => {
            o.data.pointer("/spec/template/spec")?
        }
        "CronJob" => o.data.pointer("/spec/jobTemplate/spec/template/spec")?,
        _ => return None,
    };
    serde_json::from_value(spec.clone()).ok()
}

/// What the workload asks of the federation.
pub fn demand_for(
    w: WorkloadRef<'_>,
    profile: Option<&RuntimeProfile>,
) -> Result<Demand, ExpandError> {
    demand_in(w, profile, None)
}

/// The workload's overrides in placement's terms, for the members there are: each
/// member's pod where its rules change it (resources, tolerations: sized from the
/// member's own expansion, so quota is charged as overridden) and each member's replica
/// bounds (a bound from an override wins over `clusterLimits`). Refused, naming the
/// field: a rule selecting no member, a variable a member has no value for, two rules
/// setting one thing for a member, a patch of a path the expansion lacks, an object the
/// rules make invalid.
pub fn apply_overrides(
    w: &AnyWorkload,
    profile: Option<&RuntimeProfile>,
    members: &[ClusterView],
    demand: &mut Demand,
    policy: &mut PlacementPolicy,
) -> Result<(), Invalid> {
    let rules = w.as_ref().overrides();
    if rules.is_empty() {
        return Ok(());
    }
    let labels: Vec<_> = members.iter().map(ClusterView::selector_labels).collect();
    let facts: Vec<overrides::Member<'_>> = members
        .iter()
        .zip(&labels)
        .map(|(v, l)| overrides::Member {
            name: &v.name,
            region: v.region.as_deref(),
            zone: v.zone.as_deref(),
            labels: l,
        })
        .collect();
    overrides::check_against_members(rules, &facts)?;
    for m in &facts {
        let resolved = overrides::resolve(rules, m)?;
        if resolved.is_empty() {
            continue;
        }
        if let Some(b) = overrides::replica_bounds(rules, m) {
            let own = policy.cluster_limits.entry(m.name.to_string()).or_default();
            own.min = bound(b.min).or(own.min);
            own.max = bound(b.max).or(own.max);
        }
        let mut slice = w.clone();
        slice.set_overrides(resolved);
        let there = demand_in(slice.as_ref(), profile, Some(m.name)).map_err(|e| {
            let mut i = e.invalid().clone();
            for fe in &mut i.errors {
                fe.message = format!("in member {}: {}", m.name, fe.message);
            }
            i
        })?;
        if let (Count::Gang(base), Count::Gang(mine)) = (&demand.count, &there.count)
            && base != mine
        {
            demand.member_roles.insert(m.name.to_string(), mine.clone());
        }
        if there.pod != demand.pod {
            demand.member_pods.insert(m.name.to_string(), there.pod);
        }
    }
    Ok(())
}

/// A placed workload's demand and policy as the hub charges it: its overrides applied
/// against `members` (rules that no longer hold leave the plain pod). The quota book's
/// seed after a restart, the JSS's usage of the other workloads and the dry run count
/// with it. `None`: it cannot be sized.
pub fn sized(
    w: &AnyWorkload,
    profile: Option<&RuntimeProfile>,
    members: &[ClusterView],
) -> Option<(Demand, PlacementPolicy)> {
    let mut demand = demand_for(w.as_ref(), profile).ok()?;
    let mut policy = policy_for(w.as_ref());
    if !w.as_ref().overrides().is_empty() {
        let (mut d, mut p) = (demand.clone(), policy.clone());
        if apply_overrides(w, profile, members, &mut d, &mut p).is_ok() {
            (demand, policy) = (d, p);
        }
    }
    Some((demand, policy))
}

/// [`demand_for`] as `cluster` runs the workload (its overrides applied).
fn demand_in(
    w: WorkloadRef<'_>,
    profile: Option<&RuntimeProfile>,
    cluster: Option<&str>,
) -> Result<Demand, ExpandError> {
    let mut input = ExpandInput::new(w);
    input.profile = profile;
    input.cluster = cluster;
    // Size one pod: for a job set, expand a single shard (other kinds ignore it).
    let one = RangeSet::from_indices([0]);
    input.admitted_shards = Some(&one);
    let objects = expand::expand(&input)?;
    let shape = objects
        .iter()
        .find_map(template_of)
        .map(|s| pod_shape(&s))
        .unwrap_or_default();
    let count = match w.sizing() {
        Sizing::Replicas(n) => Count::Replicas(n),
        Sizing::Shards {
            total,
            completed,
            parallelism,
        } => Count::Shards {
            total,
            completed: completed.iter().collect::<BTreeSet<u32>>(),
            parallelism,
        },
        Sizing::Gang(roles) => Count::Gang(
            roles
                .into_iter()
                .map(|(role, replicas)| GangRole {
                    pod: objects
                        .iter()
                        .find(|o| {
                            o.metadata
                                .labels
                                .as_ref()
                                .and_then(|l| l.get(LABEL_REPLICA_TYPE))
                                == Some(&role.to_lowercase())
                        })
                        .and_then(template_of)
                        .map(|s| pod_shape(&s)),
                    role,
                    replicas,
                })
                .collect(),
        ),
        Sizing::Whole => Count::Whole,
    };
    Ok(Demand {
        member_pods: Default::default(),
        member_roles: Default::default(),
        pod: shape,
        count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::service::PinterestService;

    #[test]
    fn a_gangs_roles_are_sized_per_member_as_its_overrides_make_them() {
        let mut w = match crate::api::parse::parse_one(include_str!(
            "../../examples/training-pytorch.yaml"
        ))
        .unwrap()
        {
            crate::api::parse::Document::Workload(w) => w,
            other => panic!("{}", other.kind()),
        };
        w.set_overrides(
            serde_json::from_value(serde_json::json!([{"name": "big", "clusters": ["use1c"],
                "resources": {"requests": {"cpu": "30"}}}]))
            .unwrap(),
        );
        let t = crate::topology::Topology::from_yaml(
            "local-3.yaml",
            include_str!("../../clusters/local-3.yaml"),
        )
        .unwrap();
        let views = ClusterView::from_topology(&t);
        let mut d = demand_for(w.as_ref(), None).unwrap();
        let mut p = policy_for(w.as_ref());
        apply_overrides(&w, None, &views, &mut d, &mut p).unwrap();
        assert_eq!(d.member_roles.keys().collect::<Vec<_>>(), ["use1c"]);
        let Count::Gang(base) = &d.count else {
            panic!("a gang")
        };
        let cpu = |roles: &[GangRole]| -> Vec<i128> {
            roles
                .iter()
                .map(|r| r.pod.as_ref().unwrap().resources.cpu.0)
                .collect()
        };
        for (there, plain) in cpu(&d.member_roles["use1c"]).into_iter().zip(cpu(base)) {
            assert!(there > plain + 20_000, "{there} vs {plain}");
        }
        // What the quota book's seed and the JSS count for it: the same.
        let (seeded, _) = sized(&w, None, &views).unwrap();
        assert_eq!(seeded, d);
        // Rules that no longer hold (no such member now) leave the plain sizing.
        let (plain, _) = sized(&w, None, &views[..1]).unwrap();
        assert!(plain.member_roles.is_empty());
    }

    #[test]
    fn a_service_demand_counts_sidecars_and_its_policy_keeps_the_bounds() {
        let svc: PinterestService = crate::api::yaml::from_str(
            r#"
apiVersion: compute.pinterest.com/v1alpha1
kind: PinterestService
metadata: {name: web, namespace: ads}
spec:
  owner: {team: ads, contact: a@b}
  replicas: 7
  placement:
    clusterSelector: {matchLabels: {tier: prod}}
    maxPerCluster: 4
    spread: {minClusters: 2}
    tolerations: [{key: dedicated, operator: Exists}]
  template:
    spec:
      containers: [{name: app, image: a, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"#,
        )
        .unwrap();
        let w = WorkloadRef::Service(&svc);
        let d = demand_for(w, None).unwrap();
        assert_eq!(d.count, Count::Replicas(7));
        assert!(
            d.pod.resources.cpu > crate::api::quantity::Milli(1000),
            "runtime sidecars add to the app's 1 cpu: {:?}",
            d.pod.resources
        );
        assert_eq!(d.pod.resources.pods, 1);
        let p = policy_for(w);
        assert_eq!(p.strategy, Strategy::Divided);
        assert_eq!(p.per_cluster.max, Some(4));
        assert_eq!(p.spread.min_clusters, 2);
        assert_eq!(p.cluster_selector.match_labels["tier"], "prod");
        assert_eq!(p.tolerations[0].operator, TolerationOperator::Exists);
    }
}

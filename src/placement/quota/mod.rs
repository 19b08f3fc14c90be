//! Quota in placement, in one place: from a FederatedQuota to the engine's [`QuotaView`],
//! from decisions to the usage they charge against it, and how much of a workload a
//! quota admits ([`admit`]). Pure.

use std::collections::BTreeMap;

pub(crate) mod admit;

use super::decision::Decision;
use super::model::{Count, Demand, Limits, QuotaUse, QuotaView, Resources};
use crate::api::federation::{Amounts, FederatedQuota, ResourceAmounts};
use crate::api::quantity::Milli;
use crate::api::ranges::RangeSet;

/// A quota field that does not parse, named by its path.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {message}")]
pub struct QuotaError {
    pub field: String,
    pub message: String,
}

pub fn limits(a: &Amounts) -> Limits {
    Limits {
        cpu: a.cpu,
        memory: a.memory,
        gpu: a.gpus.map(|g| i64::try_from(g.units()).unwrap_or(i64::MAX)),
        pods: a.pods.map(|p| i64::try_from(p.units()).unwrap_or(i64::MAX)),
    }
}

pub fn resources(a: &Amounts) -> Resources {
    Resources {
        cpu: a.cpu.unwrap_or_default(),
        memory: a.memory.unwrap_or_default(),
        gpu: a
            .gpus
            .map(|g| i64::try_from(g.units()).unwrap_or(0))
            .unwrap_or(0),
        pods: a
            .pods
            .map(|p| i64::try_from(p.units()).unwrap_or(0))
            .unwrap_or(0),
    }
}

/// Usage as the quota's status shows it.
pub fn amounts(r: &Resources) -> ResourceAmounts {
    ResourceAmounts::from_amounts(&Amounts {
        cpu: Some(r.cpu),
        memory: Some(r.memory),
        pods: Some(Milli(i128::from(r.pods) * 1000)),
        gpus: Some(Milli(i128::from(r.gpu) * 1000)),
    })
}

fn parse(a: &ResourceAmounts, field: &str) -> Result<Amounts, QuotaError> {
    a.parse().map_err(|e| QuotaError {
        field: field.to_string(),
        message: e.to_string(),
    })
}

/// What others use of a quota: federation-wide and per cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub total: Resources,
    pub per_cluster: BTreeMap<String, Resources>,
}

impl Usage {
    pub fn add(&mut self, per_cluster: &BTreeMap<String, Resources>) {
        for (c, r) in per_cluster {
            self.total = self.total.saturating_add(r);
            let e = self.per_cluster.entry(c.clone()).or_default();
            *e = e.saturating_add(r);
        }
    }

    /// Takes back what [`Usage::add`] added (clusters left with nothing are dropped).
    pub fn subtract(&mut self, per_cluster: &BTreeMap<String, Resources>) {
        for (c, r) in per_cluster {
            self.total = self.total.saturating_sub(r);
            if let Some(e) = self.per_cluster.get_mut(c) {
                *e = e.saturating_sub(r);
                if *e == Resources::ZERO {
                    self.per_cluster.remove(c);
                }
            }
        }
    }
}

/// The engine's view of a quota. `used` is what other workloads use; `None` takes the
/// usage recorded in the quota's status.
pub fn quota_view(q: &FederatedQuota, used: Option<&Usage>) -> Result<QuotaView, QuotaError> {
    let name = format!(
        "{}/{}",
        q.metadata.namespace.clone().unwrap_or_default(),
        q.metadata.name.clone().unwrap_or_default()
    );
    let hard = parse(&q.spec.hard, "spec.hard")?;
    let recorded = match used {
        Some(u) => u.clone(),
        None => {
            let status = q.status.clone().unwrap_or_default();
            let mut u = Usage::default();
            if let Some(t) = &status.used {
                u.total = resources(&parse(t, "status.used")?);
            }
            for (c, a) in &status.used_per_cluster {
                u.per_cluster.insert(
                    c.clone(),
                    resources(&parse(a, &format!("status.usedPerCluster.{c}"))?),
                );
            }
            u
        }
    };
    let mut clusters = BTreeMap::new();
    for (c, caps) in &q.spec.per_cluster {
        let h = parse(caps, &format!("spec.perCluster.{c}"))?;
        clusters.insert(
            c.clone(),
            QuotaUse {
                hard: limits(&h),
                used: recorded.per_cluster.get(c).copied().unwrap_or_default(),
            },
        );
    }
    Ok(QuotaView {
        name,
        total: QuotaUse {
            hard: limits(&hard),
            used: recorded.total,
        },
        clusters,
    })
}

/// Every quota of a namespace as one view: for each limit, total and per cluster, the
/// quota with the least of it left wins (quotas of a namespace all charge the same
/// workloads, so the tightest one decides). `None` without quotas.
pub fn tightest(views: Vec<QuotaView>) -> Option<QuotaView> {
    let mut views = views.into_iter();
    let mut acc = views.next()?;
    for v in views {
        acc.name = format!("{}+{}", acc.name, v.name);
        acc.total = tighter(&acc.total, &v.total);
        for (c, u) in v.clusters {
            let merged = match acc.clusters.get(&c) {
                Some(a) => tighter(a, &u),
                None => u,
            };
            acc.clusters.insert(c, merged);
        }
    }
    Some(acc)
}

/// Per dimension, the limit (and its usage) with the least left; unlimited loses.
fn tighter(a: &QuotaUse, b: &QuotaUse) -> QuotaUse {
    fn pick<H: Copy, U: Copy>(
        a: (Option<H>, U),
        b: (Option<H>, U),
        left: impl Fn(H, U) -> i128,
    ) -> (Option<H>, U) {
        match (a.0, b.0) {
            (Some(ha), Some(hb)) if left(hb, b.1) < left(ha, a.1) => b,
            (None, Some(_)) => b,
            _ => a,
        }
    }
    let milli = |h: Milli, u: Milli| h.0 - u.0;
    let count = |h: i64, u: i64| i128::from(h) - i128::from(u);
    let (cpu_h, cpu_u) = pick((a.hard.cpu, a.used.cpu), (b.hard.cpu, b.used.cpu), milli);
    let (mem_h, mem_u) = pick(
        (a.hard.memory, a.used.memory),
        (b.hard.memory, b.used.memory),
        milli,
    );
    let (gpu_h, gpu_u) = pick((a.hard.gpu, a.used.gpu), (b.hard.gpu, b.used.gpu), count);
    let (pods_h, pods_u) = pick(
        (a.hard.pods, a.used.pods),
        (b.hard.pods, b.used.pods),
        count,
    );
    QuotaUse {
        hard: Limits {
            cpu: cpu_h,
            memory: mem_h,
            gpu: gpu_h,
            pods: pods_h,
        },
        used: Resources {
            cpu: cpu_u,
            memory: mem_u,
            gpu: gpu_u,
            pods: pods_u,
        },
    }
}

/// What a decision charges against quota, per cluster: the requests of the pods it
/// places (a replica is one pod, a gang all its pods, a daemon one pod per node the
/// engine gave it there ([`Placement::whole_pods`]), a cron job one pod, a job set the
/// pods it runs at once: its unfinished shards there, or with parallelism that cluster's
/// part of it). The hub charges its quota book with it, at decision time and from the
/// decisions recorded in status after a restart; the JSS counts with it too.
///
/// [`Placement::whole_pods`]: super::Placement::whole_pods
pub fn usage_of(decision: &Decision, demand: &Demand) -> BTreeMap<String, Resources> {
    let mut out = BTreeMap::new();
    if let Count::Shards {
        parallelism: Some(p),
        ..
    } = &demand.count
    {
        let held: Vec<u64> = decision
            .placements
            .iter()
            .map(|pl| {
                pl.shards
                    .as_deref()
                    .and_then(|s| RangeSet::parse(s).ok())
                    .map_or(0, |r| r.len())
            })
            .collect();
        for (pl, n) in decision
            .placements
            .iter()
            .zip(super::parallelism_shares(*p, &held))
        {
            let per_pod = demand.pod_in(&pl.cluster).resources.as_pod_request();
            out.insert(
                pl.cluster.clone(),
                per_pod.checked_mul(n).unwrap_or(Resources::ZERO),
            );
        }
        return out;
    }
    for p in &decision.placements {
        // A member whose overrides change the pod is charged for the pod it runs.
        let per_pod = demand.pod_in(&p.cluster).resources.as_pod_request();
        let r = match &demand.count {
            Count::Gang(roles) => {
                demand
                    .roles_in(&p.cluster, roles)
                    .iter()
                    .fold(Resources::ZERO, |acc, role| {
                        let pod = role
                            .pod
                            .as_ref()
                            .map(|s| s.resources.as_pod_request())
                            .unwrap_or(per_pod);
                        acc.saturating_add(
                            &pod.checked_mul(u64::from(role.replicas))
                                .unwrap_or(Resources::ZERO),
                        )
                    })
            }
            _ => {
                let pods = match (&p.shards, p.replicas) {
                    (Some(s), _) => RangeSet::parse(s).map(|r| r.len()).unwrap_or(0),
                    (None, Some(n)) => u64::from(n),
                    (None, None) => p.whole_pods(),
                };
                per_pod.checked_mul(pods).unwrap_or(Resources::ZERO)
            }
        };
        out.insert(p.cluster.clone(), r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(name: &str, cpu: Option<i128>, pods: Option<i64>, used_cpu: i128) -> QuotaView {
        QuotaView {
            name: name.into(),
            total: QuotaUse {
                hard: Limits {
                    cpu: cpu.map(Milli),
                    pods,
                    ..Default::default()
                },
                used: Resources {
                    cpu: Milli(used_cpu),
                    pods: 1,
                    ..Default::default()
                },
            },
            clusters: BTreeMap::new(),
        }
    }

    #[test]
    fn status_usage_is_written_as_pinfed_shows_it() {
        let used = amounts(&Resources {
            cpu: Milli(2500),
            memory: Milli::parse("1536Mi").unwrap(),
            gpu: 1,
            pods: 3,
        });
        let q = |q: Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity>| q.unwrap().0;
        assert_eq!(q(used.cpu), "2500m");
        assert_eq!(q(used.memory), "1536Mi", "not 1610612736");
        assert_eq!((q(used.gpus), q(used.pods)), ("1".into(), "3".into()));
    }

    #[test]
    fn the_tightest_quota_wins_in_each_dimension_total_and_per_cluster() {
        assert_eq!(tightest(vec![]), None);
        let one = view("ns/a", Some(4000), None, 0);
        assert_eq!(tightest(vec![one.clone()]), Some(one));
        // a: 10 cpus with 9 used (1 left) and unlimited pods; b: 2 cpus unused, 5 pods.
        let mut a = view("ns/a", Some(10_000), None, 9000);
        let mut b = view("ns/b", Some(2000), Some(5), 0);
        let cap = |cpu: i128| QuotaUse {
            hard: Limits {
                cpu: Some(Milli(cpu)),
                ..Default::default()
            },
            used: Resources::ZERO,
        };
        a.clusters.insert("x".into(), cap(3000));
        b.clusters.insert("x".into(), cap(1000));
        b.clusters.insert("y".into(), cap(500));
        let t = tightest(vec![a, b]).unwrap();
        assert_eq!(t.name, "ns/a+ns/b");
        assert_eq!(
            (t.total.hard.cpu, t.total.used.cpu),
            (Some(Milli(10_000)), Milli(9000)),
            "a has less cpu left"
        );
        assert_eq!(t.total.hard.pods, Some(5), "only b limits pods");
        assert_eq!(t.clusters["x"].hard.cpu, Some(Milli(1000)));
        assert_eq!(t.clusters["y"].hard.cpu, Some(Milli(500)));
        // Order does not matter.
        let t2 = tightest(vec![
            view("ns/b", Some(2000), Some(5), 0),
            view("ns/a", Some(10_000), None, 9000),
        ])
        .unwrap();
        assert_eq!(t2.total.hard, t.total.hard);
    }
    use crate::placement::model::PodShape;
    use crate::placement::{Placement, Strategy};

    #[test]
    fn usage_counts_pods_of_each_share_and_quota_view_takes_given_usage() {
        let demand = Demand {
            member_pods: Default::default(),
            member_roles: Default::default(),
            pod: PodShape {
                resources: Resources::pod(Milli(500), Milli(1 << 30), 0),
                ..Default::default()
            },
            count: Count::Replicas(5),
        };
        let d = Decision {
            strategy: Strategy::Divided,
            placements: vec![
                Placement {
                    cluster: "a".into(),
                    replicas: Some(3),
                    shards: None,
                    pods: None,
                },
                Placement {
                    cluster: "b".into(),
                    replicas: Some(2),
                    shards: None,
                    pods: None,
                },
            ],
            unplaced: 0,
            reason: None,
        };
        let u = usage_of(&d, &demand);
        assert_eq!(u["a"].cpu, Milli(1500));
        assert_eq!(u["b"].pods, 2);
        // A member whose overrides make the pod bigger is charged as overridden, there
        // only; a federation-wide count takes the biggest pod.
        let mut overridden = demand.clone();
        overridden.member_pods.insert(
            "b".into(),
            PodShape {
                resources: Resources::pod(Milli(2000), Milli(1 << 30), 0),
                ..Default::default()
            },
        );
        let o = usage_of(&d, &overridden);
        assert_eq!(o["a"].cpu, Milli(1500));
        assert_eq!(o["b"].cpu, Milli(4000));
        assert_eq!(overridden.largest_pod().cpu, Milli(2000));
        let mut usage = Usage::default();
        usage.add(&u);
        assert_eq!(usage.total.cpu, Milli(2500));
        let q: FederatedQuota = crate::api::yaml::from_str(
            "apiVersion: federation.pinterest.com/v1alpha1\nkind: FederatedQuota\n\
             metadata: {name: q, namespace: ads}\nspec:\n  hard: {cpu: '4'}\n  perCluster:\n    a: {cpu: 2x}\n",
        )
        .unwrap();
        let err = quota_view(&q, Some(&usage)).unwrap_err();
        assert_eq!(err.field, "spec.perCluster.a");
        let q: FederatedQuota = crate::api::yaml::from_str(
            "apiVersion: federation.pinterest.com/v1alpha1\nkind: FederatedQuota\n\
             metadata: {name: q, namespace: ads}\nspec:\n  hard: {cpu: '4'}\n  perCluster:\n    a: {cpu: '2'}\n",
        )
        .unwrap();
        let v = quota_view(&q, Some(&usage)).unwrap();
        assert_eq!(v.name, "ads/q");
        assert_eq!(v.total.used.cpu, Milli(2500));
        assert_eq!(v.clusters["a"].used.cpu, Milli(1500));
    }
}

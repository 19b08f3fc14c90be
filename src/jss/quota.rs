//! Quota at submission: what a workload requests (the pods it will run, each with its
//! runtime sidecars), what the namespace's other workloads already request, and whether
//! both fit under each FederatedQuota's hard totals. Pure.
//!
//! The hub enforces the same quota again at placement (per cluster too); the JSS checks
//! totals so a submission that cannot fit is turned down at once, with the numbers.

use serde::Serialize;

use crate::api::federation::{Amounts, FederatedQuota};
use crate::api::quantity::Milli;
use crate::placement::model::{Count, Demand, Resources};

/// What a workload requests of the federation in total. Replicas, unfinished shards and
/// every pod of a gang count once each; a cron job counts one pod; a daemon one pod per
/// cluster it may run in (`daemon_clusters`, at least one).
pub fn requested(demand: &Demand, daemon_clusters: u32) -> Resources {
    let pod = demand.pod.resources.as_pod_request();
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
        Count::Shards { total, completed } => {
            let left = (0..*total).filter(|i| !completed.contains(i)).count() as u64;
            times(&pod, left)
        }
        Count::Gang(roles) => roles.iter().fold(Resources::ZERO, |acc, role| {
            let p = role
                .pod
                .as_ref()
                .map(|s| s.resources.as_pod_request())
                .unwrap_or(pod);
            acc.saturating_add(&times(&p, u64::from(role.replicas)))
        }),
        Count::Whole => times(&pod, u64::from(daemon_clusters.max(1))),
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
            write!(
                f,
                "{} {}: requested {} + used {} > hard {}",
                if i == 0 { "" } else { ";" },
                r.resource,
                r.requested,
                r.used,
                r.hard
            )?;
        }
        Ok(())
    }
}

/// Memory in the largest binary unit that divides it exactly (`1536Mi`, `3Gi`), else bytes.
pub fn format_memory(m: Milli) -> String {
    let bytes = m.0.div_euclid(1000) + i128::from(m.0.rem_euclid(1000) != 0);
    for (unit, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        let size = 1i128 << shift;
        if bytes != 0 && bytes % size == 0 {
            return format!("{}{unit}", bytes / size);
        }
    }
    bytes.to_string()
}

/// Checks `used + requested <= hard` in every dimension the quota limits.
pub fn check(
    quota: &str,
    hard: &Amounts,
    used: &Resources,
    requested: &Resources,
) -> Result<(), QuotaExceeded> {
    let mut rows = Vec::new();
    let sum = used.saturating_add(requested);
    if let Some(h) = hard.cpu
        && sum.cpu > h
    {
        rows.push(QuotaRow {
            resource: "cpu",
            requested: requested.cpu.to_string(),
            used: used.cpu.to_string(),
            hard: h.to_string(),
        });
    }
    if let Some(h) = hard.memory
        && sum.memory > h
    {
        rows.push(QuotaRow {
            resource: "memory",
            requested: format_memory(requested.memory),
            used: format_memory(used.memory),
            hard: format_memory(h),
        });
    }
    if let Some(h) = hard.gpus
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::placement::model::{GangRole, PodShape};

    fn demand(count: Count) -> Demand {
        Demand {
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
            }),
            3,
        );
        assert_eq!(r.pods, 7, "completed shards do not count");
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

    #[test]
    fn memory_is_shown_in_binary_units() {
        assert_eq!(format_memory(Milli(1536 * (1 << 20) * 1000)), "1536Mi");
        assert_eq!(format_memory(Milli(3 * (1 << 30) * 1000)), "3Gi");
        assert_eq!(format_memory(Milli(1500 * 1000)), "1500");
        assert_eq!(format_memory(Milli(0)), "0");
    }
}

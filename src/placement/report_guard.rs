//! A pull member's capacity is what its agent reports, and its agent's hub token may
//! write that report: a member that lies attracts work (placement weighs by room) and the
//! Secrets of what it is given. So the hub takes a report as input, not as truth: it
//! refuses one beyond what any real cluster has (node count, per-node size), and holds a
//! sudden growth until the same growth has been reported for a while. A shrinking report
//! is taken at once (that only sends work elsewhere). Pure.

use crate::api::federation::AgentReport;
use crate::api::quantity::Milli;

use super::capacity::{Res, from_pools, totals};

/// What a report may claim.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReportLimits {
    /// Kubernetes' own supported maximum is 5,000 nodes per cluster.
    pub max_nodes: usize,
    /// Per node: cores, bytes, pods, GPUs.
    pub max_node: Res,
    /// A total (nodes, cpu, memory, GPUs) that grows past this factor of the accepted
    /// report's is held...
    pub jump_factor: i128,
    /// ...until it has been reported this long.
    pub confirm_secs: i64,
}

impl Default for ReportLimits {
    fn default() -> Self {
        ReportLimits {
            max_nodes: 5_000,
            max_node: Res {
                cpu: Milli(1_024 * 1_000),
                memory: Milli((64_i128 << 40) * 1_000),
                pods: Milli(2_000 * 1_000),
                gpus: Milli(64 * 1_000),
            },
            jump_factor: 2,
            confirm_secs: 60,
        }
    }
}

/// What the guard made of the last report offered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    /// Growth waiting to be confirmed (reason, message); the accepted report stays.
    Held(String),
    /// Beyond the limits; the accepted report stays.
    Refused(String),
}

/// Per pull member: the report placement uses, and a growth being confirmed.
#[derive(Debug, Clone, Default)]
pub struct ReportGuard {
    accepted: Option<AgentReport>,
    /// The unconfirmed growth's totals and when it was first reported.
    growing_since: Option<i64>,
    pub verdict: Option<Verdict>,
}

/// (nodes, allocatable) of a report.
fn size(r: &AgentReport) -> (usize, Res) {
    let usage = from_pools(&r.node_pools);
    (usage.len(), totals(&usage).allocatable)
}

impl ReportGuard {
    /// The report placement may use.
    pub fn accepted(&self) -> Option<&AgentReport> {
        self.accepted.as_ref()
    }

    /// Takes in the report the member's status holds now (`None`: none yet), at `now`
    /// (seconds). Returns the verdict, also kept in `verdict`.
    pub fn offer(
        &mut self,
        report: Option<&AgentReport>,
        now: i64,
        limits: &ReportLimits,
    ) -> Verdict {
        let verdict = self.judge(report, now, limits);
        self.verdict = Some(verdict.clone());
        verdict
    }

    fn judge(&mut self, report: Option<&AgentReport>, now: i64, limits: &ReportLimits) -> Verdict {
        let Some(report) = report else {
            self.accepted = None;
            self.growing_since = None;
            return Verdict::Accepted;
        };
        if self.accepted.as_ref() == Some(report) {
            return Verdict::Accepted;
        }
        if let Err(why) = within_limits(report, limits) {
            return Verdict::Refused(why);
        }
        let grew = self
            .accepted
            .as_ref()
            .and_then(|old| grew(old, report, limits.jump_factor));
        match grew {
            None => {
                self.accepted = Some(report.clone());
                self.growing_since = None;
                Verdict::Accepted
            }
            Some(what) => {
                let since = *self.growing_since.get_or_insert(now);
                if now - since >= limits.confirm_secs {
                    self.accepted = Some(report.clone());
                    self.growing_since = None;
                    Verdict::Accepted
                } else {
                    // No countdown in the message: the condition carrying it is written
                    // only when it changes.
                    Verdict::Held(format!(
                        "the agent's report grew more than {}x ({what}); it is used once reported for {}s",
                        limits.jump_factor, limits.confirm_secs,
                    ))
                }
            }
        }
    }
}

fn within_limits(r: &AgentReport, limits: &ReportLimits) -> Result<(), String> {
    let nodes: usize = r.node_pools.iter().map(|p| p.nodes.len()).sum();
    if nodes > limits.max_nodes {
        return Err(format!(
            "the agent's report names {nodes} nodes (at most {})",
            limits.max_nodes
        ));
    }
    for (i, node) in from_pools(&r.node_pools).iter().enumerate() {
        let m = &limits.max_node;
        for (what, have, max) in [
            ("cpu", node.allocatable.cpu, m.cpu),
            ("memory", node.allocatable.memory, m.memory),
            ("pods", node.allocatable.pods, m.pods),
            ("gpus", node.allocatable.gpus, m.gpus),
        ] {
            if have > max || have.0 < 0 {
                return Err(format!(
                    "node {} ({i}) of the agent's report has {what} {} allocatable (at most {} per node)",
                    node.name,
                    show(what, have),
                    show(what, max)
                ));
            }
        }
    }
    // The workloads' pods it says run on a node: no more than a node may hold.
    for n in r.node_pools.iter().flat_map(|p| &p.nodes) {
        let pods: i64 = n.workloads.iter().map(|w| i64::from(w.pods.max(0))).sum();
        if i128::from(pods) * 1_000 > limits.max_node.pods.0
            || n.workloads.iter().any(|w| w.pods < 0)
        {
            return Err(format!(
                "node {} of the agent's report lists {pods} workload pods (at most {} per node)",
                n.name,
                show("pods", limits.max_node.pods)
            ));
        }
    }
    Ok(())
}

fn show(what: &str, v: Milli) -> String {
    match what {
        "memory" => v.format_memory(),
        _ => v.format_cpu(),
    }
}

/// What grew past `factor` times from `old` to `new`, if anything did.
fn grew(old: &AgentReport, new: &AgentReport, factor: i128) -> Option<String> {
    let (old_nodes, old_res) = size(old);
    let (new_nodes, new_res) = size(new);
    let past = |old: i128, new: i128| new > old.max(1) * factor;
    if past(old_nodes as i128, new_nodes as i128) {
        return Some(format!("nodes {old_nodes} → {new_nodes}"));
    }
    for (what, o, n) in [
        ("cpu", old_res.cpu, new_res.cpu),
        ("memory", old_res.memory, new_res.memory),
        ("gpus", old_res.gpus, new_res.gpus),
    ] {
        // From nothing (no GPUs before) any amount is growth; a tiny base is judged as 1.
        let base = if what == "memory" { 1 << 30 } else { 1 };
        if past(o.0.max(base * 1000), n.0) {
            return Some(format!("{what} {} → {}", show(what, o), show(what, n)));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::federation::{NodePoolReport, NodeReport, ResourceAmounts};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn report(nodes: usize, cpu: &str) -> AgentReport {
        AgentReport {
            healthy: true,
            node_pools: vec![NodePoolReport {
                allocatable: ResourceAmounts {
                    cpu: Some(Quantity(cpu.into())),
                    memory: Some(Quantity("64Gi".into())),
                    pods: Some(Quantity("110".into())),
                    gpus: None,
                },
                capacity: ResourceAmounts::default(),
                nodes: (0..nodes)
                    .map(|i| NodeReport {
                        name: format!("n{i}"),
                        schedulable: true,
                        allocated: ResourceAmounts::default(),
                        workloads: Vec::new(),
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_first_report_within_limits_is_taken_and_shrinking_at_once() {
        let mut g = ReportGuard::default();
        let l = ReportLimits::default();
        assert_eq!(g.offer(Some(&report(4, "16")), 0, &l), Verdict::Accepted);
        assert_eq!(g.offer(Some(&report(2, "16")), 1, &l), Verdict::Accepted);
        assert_eq!(g.accepted().unwrap().node_pools[0].nodes.len(), 2);
    }

    #[test]
    fn impossible_reports_are_refused_and_the_last_good_one_kept() {
        let mut g = ReportGuard::default();
        let l = ReportLimits::default();
        g.offer(Some(&report(4, "16")), 0, &l);
        let Verdict::Refused(why) = g.offer(Some(&report(4, "100000")), 1, &l) else {
            panic!("a 100,000-core node was taken")
        };
        assert!(why.contains("cpu 100000 allocatable"), "{why}");
        let Verdict::Refused(why) = g.offer(Some(&report(5_001, "16")), 2, &l) else {
            panic!("5,001 nodes were taken")
        };
        assert!(why.contains("5001 nodes"), "{why}");
        // More workload pods on a node than a node holds: refused (a report that lists
        // victims it cannot run would only mislead preemption).
        let mut crowded = report(4, "16");
        crowded.node_pools[0].nodes[0].workloads =
            vec![crate::api::federation::NodeWorkloadReport {
                workload: "PinterestJobSet/ml/batch".into(),
                pods: 2_001,
                ..Default::default()
            }];
        let Verdict::Refused(why) = g.offer(Some(&crowded), 3, &l) else {
            panic!("2,001 pods on one node were taken")
        };
        assert!(why.contains("2001 workload pods"), "{why}");
        assert_eq!(g.accepted().unwrap().node_pools[0].nodes.len(), 4);
    }

    #[test]
    fn a_sudden_growth_waits_until_it_is_confirmed() {
        let mut g = ReportGuard::default();
        let l = ReportLimits::default();
        g.offer(Some(&report(4, "16")), 0, &l);
        // Twice the nodes is not past 2x; 40 nodes is.
        assert_eq!(g.offer(Some(&report(8, "16")), 10, &l), Verdict::Accepted);
        let Verdict::Held(why) = g.offer(Some(&report(40, "16")), 20, &l) else {
            panic!("a 5x jump was taken at once")
        };
        assert!(why.contains("nodes 8 → 40"), "{why}");
        assert_eq!(g.accepted().unwrap().node_pools[0].nodes.len(), 8);
        assert!(matches!(
            g.offer(Some(&report(40, "16")), 79, &l),
            Verdict::Held(_)
        ));
        assert_eq!(g.offer(Some(&report(40, "16")), 80, &l), Verdict::Accepted);
        assert_eq!(g.accepted().unwrap().node_pools[0].nodes.len(), 40);
        // Bigger nodes count the same way.
        assert!(matches!(
            g.offer(Some(&report(40, "64")), 81, &l),
            Verdict::Held(_)
        ));
    }
}

//! Members' reports folded into fewer hub status writes (issue 40: hub writes per workload).
//!
//! With agents, each member reports each slice as it moves (created, then available), and
//! each report used to be one status apply of the hub workload: ≈ 5–7 per workload over
//! three members in a first sync, the largest share of the hub's writes. A report that
//! changes what the workload *is* — a condition's status, the observed generation, a
//! rollout's phase, stage or a member's rollout state — is written at once
//! ([`routine`] says which are not). A routine one (counts, messages, a member's entry
//! while the workload's conditions stand) is written at once when the workload's status
//! was not written for `pace`; otherwise it waits until `pace` has passed since that
//! write, and every report arriving meanwhile goes out with it. So an isolated change —
//! one member's slice recovering, the status row of the Karmada comparison — is still
//! written at once, members turning Ready one after another cost one write per `pace`,
//! and the last one (the workload Ready) goes at once. A status carrying a new placement
//! is not paced here ([`super::status_defer`] decides when it goes).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::api::common::ConditionStatus;
use crate::api::kind::HubPart;
use crate::api::rollout::RolloutStatus;

/// Whether going from `stored` to `new` only updates what the members report — counts,
/// messages, their entries — and leaves the workload's conditions, observed generation,
/// placement and rollout position as they were.
pub fn routine(stored: &HubPart, new: &HubPart) -> bool {
    let states = |p: &HubPart| -> Vec<(String, ConditionStatus)> {
        let mut c: Vec<_> = p
            .conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status))
            .collect();
        c.sort_by(|a, b| a.0.cmp(&b.0));
        c
    };
    let position = |r: &Option<RolloutStatus>| {
        r.as_ref().map(|r| {
            (
                r.revision,
                r.phase.clone(),
                r.stage,
                r.stable_revision,
                r.failed,
                r.members
                    .iter()
                    .map(|m| (m.cluster.clone(), m.stage, m.revision, m.state.clone()))
                    .collect::<Vec<_>>(),
            )
        })
    };
    stored.placement == new.placement
        && stored.observed_generation == new.observed_generation
        && states(stored) == states(new)
        && position(&stored.rollout) == position(&new.rollout)
}

/// When each workload's status was last written by this process.
#[derive(Debug, Default)]
pub struct ReportPace {
    /// The least time between two report-only writes of one workload (zero: never wait).
    pace: Duration,
    last: Mutex<Written>,
}

#[derive(Debug, Default)]
struct Written {
    at: HashMap<String, Instant>,
    /// When `at` was last swept of entries older than `pace`.
    swept: Option<Instant>,
}

/// Sweep the record once it holds this many workloads and `pace` has passed since the
/// last sweep: a first sync of 10,000 keeps it at the workloads written within `pace`.
const SWEEP_ABOVE: usize = 1024;

impl ReportPace {
    pub fn new(pace: Duration) -> ReportPace {
        ReportPace {
            pace,
            ..ReportPace::default()
        }
    }

    /// How long a report-only status of `key` waits at `now`: `None` to write now.
    pub fn wait(&self, key: &str, now: Instant) -> Option<Duration> {
        if self.pace.is_zero() {
            return None;
        }
        let last = self.last.lock().ok()?;
        let at = *last.at.get(key)?;
        let left = self.pace.saturating_sub(now.saturating_duration_since(at));
        (!left.is_zero()).then_some(left)
    }

    /// `key`'s status was written at `now`.
    pub fn wrote(&self, key: &str, now: Instant) {
        if self.pace.is_zero() {
            return;
        }
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        last.at.insert(key.to_string(), now);
        let due = last
            .swept
            .is_none_or(|s| now.saturating_duration_since(s) >= self.pace);
        if last.at.len() > SWEEP_ABOVE && due {
            let pace = self.pace;
            last.at
                .retain(|_, at| now.saturating_duration_since(*at) < pace);
            last.swept = Some(now);
        }
    }

    /// `key` is gone.
    pub fn forget(&self, key: &str) {
        if let Ok(mut last) = self.last.lock() {
            last.at.remove(key);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.last.lock().map(|l| l.at.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn part(ready: ConditionStatus, available: &[(&str, i32)]) -> HubPart {
        use crate::api::common::{Condition, MemberWorkloadStatus};
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        );
        HubPart {
            observed_generation: Some(1),
            conditions: vec![
                Condition::new(
                    "Progressing",
                    ConditionStatus::True,
                    "Rolling",
                    "",
                    Some(1),
                    &now,
                ),
                Condition::new("Ready", ready, "Members", "message varies", Some(1), &now),
            ],
            clusters: available
                .iter()
                .map(|(c, n)| MemberWorkloadStatus {
                    available_replicas: Some(*n),
                    state: Some(if *n > 0 { "Ready" } else { "Progressing" }.into()),
                    ..MemberWorkloadStatus::observed(c, now.clone())
                })
                .collect(),
            ..HubPart::default()
        }
    }

    #[test]
    fn a_members_count_is_routine_and_a_condition_or_rollout_state_change_is_not() {
        use ConditionStatus::{False, True};
        let before = part(False, &[("a", 0), ("b", 0)]);
        let one_member_up = part(False, &[("a", 2), ("b", 0)]);
        assert!(
            routine(&before, &one_member_up),
            "counts and a member's entry"
        );
        let mut messages = one_member_up.clone();
        messages.conditions[1].message = "1 of 2 members ready".into();
        assert!(routine(&one_member_up, &messages), "a message");
        let all_up = part(True, &[("a", 2), ("b", 2)]);
        assert!(!routine(&one_member_up, &all_up), "Ready turned True");
        let mut newer = one_member_up.clone();
        newer.observed_generation = Some(2);
        assert!(
            !routine(&one_member_up, &newer),
            "a new generation observed"
        );
        let mut placed = one_member_up.clone();
        placed.placement = Some(Default::default());
        assert!(!routine(&one_member_up, &placed), "a placement");

        use crate::api::rollout::{RolloutMember, RolloutStatus};
        let rollout = |state: &str, since: i64| RolloutStatus {
            revision: 2,
            phase: "Progressing".into(),
            members: vec![RolloutMember {
                cluster: "a".into(),
                state: state.into(),
                message: Some(format!("{since}")),
                ..RolloutMember::default()
            }],
            ..RolloutStatus::default()
        };
        let mut updating = one_member_up.clone();
        updating.rollout = Some(rollout("Updating", 1));
        let mut updating_later = updating.clone();
        updating_later.rollout = Some(rollout("Updating", 2));
        assert!(routine(&updating, &updating_later), "a member's message");
        let mut soaking = updating.clone();
        soaking.rollout = Some(rollout("Soaking", 2));
        assert!(!routine(&updating, &soaking), "a member's rollout state");
    }

    #[test]
    fn a_report_after_a_quiet_spell_goes_at_once_and_those_close_behind_wait_for_the_pace() {
        let p = ReportPace::new(MS(1000));
        let t0 = Instant::now();
        assert_eq!(p.wait("a", t0), None, "never written: at once");
        p.wrote("a", t0);
        assert_eq!(p.wait("a", t0 + MS(300)), Some(MS(700)));
        // A later report in the same window waits for the same deadline, not a new one:
        // a stream of reports cannot hold the status back for ever.
        assert_eq!(p.wait("a", t0 + MS(900)), Some(MS(100)));
        assert_eq!(p.wait("a", t0 + MS(1000)), None);
        assert_eq!(p.wait("b", t0 + MS(300)), None, "per workload");
        p.forget("a");
        assert_eq!(p.wait("a", t0 + MS(10)), None, "forgotten");
    }

    #[test]
    fn a_zero_pace_never_waits_nor_remembers() {
        let p = ReportPace::new(Duration::ZERO);
        let t0 = Instant::now();
        p.wrote("a", t0);
        assert_eq!(p.wait("a", t0), None);
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn the_record_keeps_only_the_workloads_written_within_the_pace_once_large() {
        let p = ReportPace::new(MS(1000));
        let t0 = Instant::now();
        for i in 0..=SWEEP_ABOVE {
            p.wrote(&format!("w{i}"), t0);
        }
        assert_eq!(p.len(), SWEEP_ABOVE + 1, "all within the pace: kept");
        p.wrote("late", t0 + MS(1500));
        assert_eq!(p.len(), 1, "the ones written 1.5 s before are swept");
        assert_eq!(p.wait("late", t0 + MS(1600)), Some(MS(900)));
    }
}

//! Aggregation rules. The hub never says Ready on stale or partial data: a member that is
//! NotReady, or whose status is older than the staleness bound, makes the workload
//! Degraded with Ready Unknown; `observedGeneration` advances only when every slice was
//! written from the current hub generation and its agent has processed it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::common::{
    Condition, ConditionStatus, MemberWorkloadStatus, PlacementDecision, condition_types as ct,
};
use crate::api::ranges::RangeSet;

pub use crate::api::kind::{Progress, Totals};

/// What the hub knows of one placed cluster.
#[derive(Debug, Clone)]
pub struct MemberObservation {
    pub cluster: String,
    /// The MemberCluster's Ready condition.
    pub member_ready: bool,
    /// The slice's status as read from the member, with the time it was read; `None` when
    /// the slice was not found (yet).
    pub status: Option<MemberWorkloadStatus>,
    /// The hub generation the slice in the member was written from.
    pub slice_hub_generation: Option<i64>,
    /// Whether the member agent has processed the slice's current generation.
    pub slice_processed: bool,
    /// The shards the slice in the member holds (a range list; job sets), as stored there.
    pub held_shards: Option<String>,
}

#[derive(Debug, Clone)]
pub struct AggregateInput<'a> {
    pub hub_generation: i64,
    /// The `observedGeneration` currently in hub status.
    pub previous_observed_generation: Option<i64>,
    /// Shards recorded as completed before (never forgotten).
    pub previous_completed: &'a RangeSet,
    pub progress: Progress,
    pub decision: &'a PlacementDecision,
    /// Whether the unplaced part is due to quota.
    pub quota_exceeded: bool,
    pub members: &'a [MemberObservation],
    pub now: &'a Time,
    /// Member data older than this is stale.
    pub stale_after_secs: i64,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Aggregate {
    pub clusters: Vec<MemberWorkloadStatus>,
    pub totals: Totals,
    pub conditions: Vec<Condition>,
    pub observed_generation: Option<i64>,
}

/// One-word state of a member slice as shown in `clusters[]`.
pub mod member_state {
    pub const READY: &str = "Ready";
    pub const PROGRESSING: &str = "Progressing";
    pub const DEGRADED: &str = "Degraded";
    pub const COMPLETE: &str = "Complete";
    pub const FAILED: &str = "Failed";
    /// The member's agent refused the slice (its member policy, an invalid spec, a name
    /// someone else owns): nothing of it runs there.
    pub const REFUSED: &str = "Refused";
    pub const UNKNOWN: &str = "Unknown";
}

fn age_secs(observed: &Time, now: &Time) -> i64 {
    now.0.as_second().saturating_sub(observed.0.as_second())
}

pub fn aggregate(input: &AggregateInput<'_>) -> Aggregate {
    let (mut out, findings) = tally(input);
    let hub_gen = Some(input.hub_generation);
    out.conditions.extend(placement_conditions(
        input.decision,
        input.quota_exceeded,
        hub_gen,
        input.now,
    ));
    let target_met = match input.progress {
        Progress::Replicas { desired } => {
            out.totals.available_replicas >= desired && input.decision.unplaced == 0
        }
        Progress::Shards { total } => out.totals.completed_shards.len() >= u64::from(total),
        Progress::RunToCompletion => findings.all_complete,
    };
    let conditions = health_conditions(input, &out.totals, &findings, target_met);
    out.conditions.extend(conditions);
    out.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    out.observed_generation = if findings.caught_up() && findings.lost.is_empty() {
        hub_gen
    } else {
        input.previous_observed_generation
    };
    out
}

/// What the members' observations say beyond their counts.
#[derive(Debug, Default)]
struct Findings {
    /// NotReady or stale members, with why.
    lost: Vec<String>,
    /// Placed but no status yet.
    missing: Vec<String>,
    failing: Vec<String>,
    /// Slices not yet at this hub generation.
    behind: Vec<String>,
    /// A member's agent refused its slice.
    refused: bool,
    all_complete: bool,
}

impl Findings {
    fn caught_up(&self) -> bool {
        self.behind.is_empty() && self.missing.is_empty()
    }
}

/// Counts summed over the members, each member's `clusters[]` entry, and the findings.
fn tally(input: &AggregateInput<'_>) -> (Aggregate, Findings) {
    let mut out = Aggregate::default();
    let mut t = Totals {
        completed_shards: input.previous_completed.clone(),
        ..Default::default()
    };
    let hub_gen = Some(input.hub_generation);
    let mut f = Findings {
        all_complete: !input.members.is_empty(),
        ..Default::default()
    };
    for m in input.members {
        let fresh = m
            .status
            .as_ref()
            .is_some_and(|s| age_secs(&s.observed_time, input.now) <= input.stale_after_secs);
        let mut shown = match &m.status {
            Some(s) => s.clone(),
            None => MemberWorkloadStatus::observed(&m.cluster, input.now.clone()),
        };
        if !m.member_ready {
            f.lost.push(format!("{} is NotReady", m.cluster));
            shown.state = Some(member_state::UNKNOWN.into());
            shown.message = Some("member cluster is NotReady; last known status shown".into());
        } else if m.status.is_none() {
            f.missing.push(m.cluster.clone());
            shown.state = Some(member_state::PROGRESSING.into());
            shown.message = Some("slice not observed yet".into());
        } else if !fresh {
            let age = m
                .status
                .as_ref()
                .map(|s| age_secs(&s.observed_time, input.now))
                .unwrap_or_default();
            f.lost.push(format!("{} status is {age}s old", m.cluster));
            shown.state = Some(member_state::UNKNOWN.into());
            shown.message = Some(format!(
                "status is {age}s old (bound {}s)",
                input.stale_after_secs
            ));
        }
        if m.slice_hub_generation != hub_gen || !m.slice_processed {
            f.behind.push(m.cluster.clone());
        }
        if let Some(s) = &m.status {
            // Counts come from the last observation even when stale; conditions say how far
            // to trust them. Completed shards are facts and are always kept.
            // Member reports are input: sums saturate, and completed shards count only
            // within the job set's shards (a report of 0-4294967294 is 0-(shards-1)).
            add_counts(&mut t, s);
            // A member's completions and failures count only for shards it holds or
            // the decision gives it: one member cannot mark another's shards done.
            let ours = |r: &Option<String>| -> Option<RangeSet> {
                let r = RangeSet::parse(r.as_deref()?).ok()?;
                Some(match input.progress {
                    Progress::Shards { total } => {
                        let placed = input
                            .decision
                            .placements
                            .iter()
                            .filter(|p| p.cluster == m.cluster)
                            .filter_map(|p| p.shards.as_deref())
                            .chain(m.held_shards.as_deref())
                            .filter_map(|r| RangeSet::parse(r).ok())
                            .fold(RangeSet::new(), |a, r| a.union(&r));
                        r.intersection(&RangeSet::full(total)).intersection(&placed)
                    }
                    _ => r,
                })
            };
            if let Some(done) = ours(&s.completed_shards) {
                t.completed_shards = t.completed_shards.union(&done);
            }
            if let Some(failed) = ours(&s.failed_shards) {
                t.failed_shards = t.failed_shards.union(&failed);
            }
            match s.state.as_deref() {
                Some(member_state::FAILED) => f.failing.push(format!("{} failed", m.cluster)),
                Some(member_state::REFUSED) => {
                    f.refused = true;
                    f.failing.push(format!(
                        "{} refused it: {}",
                        m.cluster,
                        s.message.as_deref().unwrap_or("no reason given")
                    ))
                }
                Some(member_state::DEGRADED) => {
                    f.failing.push(format!("{} is degraded", m.cluster))
                }
                _ => {}
            }
            if s.state.as_deref() != Some(member_state::COMPLETE) {
                f.all_complete = false;
            }
        } else {
            f.all_complete = false;
        }
        out.clusters.push(shown);
    }
    out.clusters.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    // Shard counters: succeeded is the size of the union, so a shard counted in two
    // members (rerun after failover) is counted once.
    if let Progress::Shards { .. } = input.progress {
        t.shards_succeeded = i32::try_from(t.completed_shards.len()).unwrap_or(i32::MAX);
    }
    // A shard that failed in one member and completed in another (rerun after failover)
    // is done.
    t.failed_shards = t.failed_shards.difference(&t.completed_shards);
    out.totals = t;
    (out, f)
}

/// Adds one member's counts to the totals. Member reports are input: sums saturate.
fn add_counts(t: &mut Totals, s: &MemberWorkloadStatus) {
    let add = |total: &mut i32, n: Option<i32>| *total = total.saturating_add(n.unwrap_or(0));
    add(&mut t.replicas, s.replicas);
    add(&mut t.ready_replicas, s.ready_replicas);
    add(&mut t.available_replicas, s.available_replicas);
    add(&mut t.updated_replicas, s.updated_replicas);
    add(&mut t.shards_running, s.shards_running);
    add(&mut t.shards_succeeded, s.shards_succeeded);
    add(&mut t.shards_failed, s.shards_failed);
    add(&mut t.active, s.active.map(|a| a.max(0)));
    t.last_schedule_time = latest(&t.last_schedule_time, &s.last_schedule_time);
    t.last_successful_time = latest(&t.last_successful_time, &s.last_successful_time);
}

/// The later of two optional times.
fn latest(a: &Option<Time>, b: &Option<Time>) -> Option<Time> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.0 > a.0 { b.clone() } else { a.clone() }),
        (a, b) => a.clone().or_else(|| b.clone()),
    }
}

/// Scheduled and QuotaExceeded, from the placement decision.
fn placement_conditions(
    d: &PlacementDecision,
    quota_exceeded: bool,
    hub_gen: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let cond = |t: &str, s: ConditionStatus, reason: &str, msg: String| {
        Condition::new(t, s, reason, msg, hub_gen, now)
    };
    let mut conds = Vec::new();
    // Scheduled
    let placed_any = !d.placements.is_empty();
    conds.push(if d.unplaced == 0 && placed_any {
        cond(
            ct::SCHEDULED,
            ConditionStatus::True,
            "Placed",
            format!("placed on {}", cluster_list(d)),
        )
    } else if placed_any {
        cond(
            ct::SCHEDULED,
            ConditionStatus::False,
            "PartiallyPlaced",
            format!(
                "{} unplaced: {}",
                d.unplaced,
                d.reason.clone().unwrap_or_default()
            ),
        )
    } else {
        cond(
            ct::SCHEDULED,
            ConditionStatus::False,
            "Unplaced",
            d.reason.clone().unwrap_or_else(|| "no placement".into()),
        )
    });
    conds.push(if quota_exceeded {
        cond(
            ct::QUOTA_EXCEEDED,
            ConditionStatus::True,
            "QuotaExceeded",
            d.reason.clone().unwrap_or_default(),
        )
    } else {
        cond(
            ct::QUOTA_EXCEEDED,
            ConditionStatus::False,
            "WithinQuota",
            String::new(),
        )
    });

    conds
}

/// Ready: never on stale data.
fn readiness(
    input: &AggregateInput<'_>,
    totals: &Totals,
    f: &Findings,
    target_met: bool,
) -> (ConditionStatus, &'static str, String) {
    let (lost, missing, failing, behind) = (&f.lost, &f.missing, &f.failing, &f.behind);
    if !lost.is_empty() {
        (
            ConditionStatus::Unknown,
            "MemberUnavailable",
            lost.join("; "),
        )
    } else if input.decision.placements.is_empty() {
        (
            ConditionStatus::False,
            "Unplaced",
            "no member cluster runs this workload".into(),
        )
    } else if !f.caught_up() {
        let mut waiting = missing.clone();
        waiting.extend(behind.iter().filter(|c| !missing.contains(c)).cloned());
        (
            ConditionStatus::False,
            "SlicesUpdating",
            format!("waiting for {}", waiting.join(", ")),
        )
    } else if !failing.is_empty() {
        (ConditionStatus::False, "MemberDegraded", failing.join("; "))
    } else if let Progress::Replicas { desired } = input.progress {
        let available = format!("{}/{desired} available", totals.available_replicas);
        if target_met {
            (ConditionStatus::True, "Available", available)
        } else {
            (ConditionStatus::False, "Unavailable", available)
        }
    } else {
        (ConditionStatus::True, "Running", String::new())
    }
}

/// Degraded, Ready, Progressing (and Complete, Failed for run-to-completion kinds).
fn health_conditions(
    input: &AggregateInput<'_>,
    totals: &Totals,
    f: &Findings,
    target_met: bool,
) -> Vec<Condition> {
    let hub_gen = Some(input.hub_generation);
    let now = input.now;
    let cond = |t: &str, s: ConditionStatus, reason: &str, msg: String| {
        Condition::new(t, s, reason, msg, hub_gen, now)
    };
    let (lost, failing) = (&f.lost, &f.failing);
    let caught_up = f.caught_up();
    let mut conds = Vec::new();
    // Degraded: something is lost, stale or failing.
    let mut degraded = lost.clone();
    degraded.extend(failing.iter().cloned());
    conds.push(if degraded.is_empty() {
        cond(
            ct::DEGRADED,
            ConditionStatus::False,
            "AllMembersHealthy",
            String::new(),
        )
    } else {
        let reason = if !lost.is_empty() {
            "MemberUnavailable"
        } else if f.refused {
            "MemberRefused"
        } else {
            "MemberDegraded"
        };
        cond(
            ct::DEGRADED,
            ConditionStatus::True,
            reason,
            degraded.join("; "),
        )
    });

    let (status, reason, message) = readiness(input, totals, f, target_met);
    conds.push(cond(ct::READY, status, reason, message));

    conds.push(if caught_up && target_met {
        cond(
            ct::PROGRESSING,
            ConditionStatus::False,
            "Settled",
            String::new(),
        )
    } else {
        cond(
            ct::PROGRESSING,
            ConditionStatus::True,
            "Rolling",
            String::new(),
        )
    });

    if !matches!(input.progress, Progress::Replicas { .. }) {
        let failed = !failing.is_empty() && failing.iter().any(|f| f.ends_with("failed"));
        conds.push(cond(
            ct::COMPLETE,
            target_met.into(),
            if target_met { "Completed" } else { "Running" },
            String::new(),
        ));
        conds.push(if failed {
            cond(
                ct::FAILED,
                ConditionStatus::True,
                "MemberFailed",
                failing.join("; "),
            )
        } else {
            cond(
                ct::FAILED,
                ConditionStatus::False,
                "NoFailure",
                String::new(),
            )
        });
    }
    conds
}

fn cluster_list(d: &PlacementDecision) -> String {
    d.placements
        .iter()
        .map(|p| p.cluster.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::ClusterPlacement;

    fn t(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + secs).unwrap())
    }

    fn status(cluster: &str, at: i64, available: i32, state: &str) -> MemberWorkloadStatus {
        MemberWorkloadStatus {
            observed_generation: Some(1),
            state: Some(state.into()),
            replicas: Some(available),
            ready_replicas: Some(available),
            available_replicas: Some(available),
            ..MemberWorkloadStatus::observed(cluster, t(at))
        }
    }

    fn obs(
        cluster: &str,
        ready: bool,
        s: Option<MemberWorkloadStatus>,
        hub_gen: i64,
    ) -> MemberObservation {
        MemberObservation {
            cluster: cluster.into(),
            member_ready: ready,
            status: s,
            slice_hub_generation: Some(hub_gen),
            slice_processed: true,
            held_shards: None,
        }
    }

    fn decision(parts: &[(&str, i32)]) -> PlacementDecision {
        placed(parts.iter().map(|(c, r)| ClusterPlacement {
            cluster: c.to_string(),
            replicas: Some(*r),
            shards: None,
            pods: None,
        }))
    }

    /// A job set's decision: (cluster, shard range) per member.
    fn shard_decision(parts: &[(&str, &str)]) -> PlacementDecision {
        placed(parts.iter().map(|(c, r)| ClusterPlacement {
            cluster: c.to_string(),
            replicas: None,
            shards: Some(r.to_string()),
            pods: None,
        }))
    }

    /// A decision that places these, with nothing unplaced.
    fn placed(placements: impl Iterator<Item = ClusterPlacement>) -> PlacementDecision {
        PlacementDecision {
            strategy: None,
            placements: placements.collect(),
            unplaced: 0,
            reason: None,
            ..Default::default()
        }
    }

    /// The aggregate of a job set of `total` shards at generation 1.
    fn aggregate_shards(
        d: &PlacementDecision,
        members: &[MemberObservation],
        previous: &RangeSet,
        total: u32,
    ) -> Aggregate {
        aggregate(&AggregateInput {
            hub_generation: 1,
            previous_observed_generation: None,
            previous_completed: previous,
            progress: Progress::Shards { total },
            decision: d,
            quota_exceeded: false,
            members,
            now: &t(1),
            stale_after_secs: 60,
        })
    }

    /// [`split_shards`] of a's and b's (state, completed shards, failed shards), and
    /// the shards completed before (`""`: none reported, none before).
    fn shards_of(
        a: (&str, &str, &str),
        b: (&str, &str, &str),
        b_holds: Option<&str>,
        prev: &str,
    ) -> Aggregate {
        let reported = |r: &str| (!r.is_empty()).then(|| r.to_string());
        let status =
            |cluster, (state, completed, failed): (&str, &str, &str)| MemberWorkloadStatus {
                completed_shards: reported(completed),
                failed_shards: reported(failed),
                ..status(cluster, 0, 0, state)
            };
        let prev = RangeSet::parse(prev).unwrap();
        split_shards(status("a", a), status("b", b), b_holds, &prev)
    }

    /// Ten shards split a 0-4, b 5-9, both ready; `b_holds`: what b's slice holds
    /// instead of 5-9 (after a move).
    fn split_shards(
        sa: MemberWorkloadStatus,
        sb: MemberWorkloadStatus,
        b_holds: Option<&str>,
        prev: &RangeSet,
    ) -> Aggregate {
        let d = shard_decision(&[("a", "0-4"), ("b", "5-9")]);
        let mut ob = obs("b", true, Some(sb), 1);
        if let Some(held) = b_holds {
            ob.held_shards = Some(held.into());
        }
        aggregate_shards(&d, &[obs("a", true, Some(sa), 1), ob], prev, 10)
    }

    /// a runs 6 replicas and b 4, both reporting Ready at hub generation 2, looked at
    /// 10 s on; `b_ready`: whether b's member is Ready.
    fn six_and_four(b_ready: bool) -> Aggregate {
        let d = decision(&[("a", 6), ("b", 4)]);
        let m = [
            obs("a", true, Some(status("a", 0, 6, "Ready")), 2),
            obs("b", b_ready, Some(status("b", 0, 4, "Ready")), 2),
        ];
        run(&m, &d, 10, 2)
    }

    fn get<'a>(a: &'a Aggregate, t: &str) -> &'a Condition {
        a.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    fn run(
        members: &[MemberObservation],
        d: &PlacementDecision,
        now: i64,
        hub_gen: i64,
    ) -> Aggregate {
        let empty = RangeSet::new();
        aggregate(&AggregateInput {
            hub_generation: hub_gen,
            previous_observed_generation: Some(1),
            previous_completed: &empty,
            progress: Progress::Replicas { desired: 10 },
            decision: d,
            quota_exceeded: false,
            members,
            now: &t(now),
            stale_after_secs: 60,
        })
    }

    #[test]
    fn cron_runs_add_up_and_the_latest_schedule_of_any_member_is_shown() {
        let d = decision(&[("a", 0), ("b", 0)]);
        let cron = |c: &str, active: i32, scheduled: Option<i64>| MemberWorkloadStatus {
            active: Some(active),
            last_schedule_time: scheduled.map(t),
            last_successful_time: scheduled.map(|s| t(s - 60)),
            ..status(c, 0, 0, "Ready")
        };
        // The member it failed over from ran at 60 and still has a run; the new one at 120.
        let m = [
            obs("a", true, Some(cron("a", 1, Some(60))), 2),
            obs("b", true, Some(cron("b", 2, Some(120))), 2),
        ];
        let a = run(&m, &d, 10, 2);
        assert_eq!(a.totals.active, 3);
        assert_eq!(a.totals.last_schedule_time, Some(t(120)));
        assert_eq!(a.totals.last_successful_time, Some(t(60)));
        // A member that never ran leaves the times to the others; a negative count from a
        // hostile member counts as nothing.
        let m = [
            obs("a", true, Some(cron("a", -5, None)), 2),
            obs("b", true, Some(cron("b", 0, Some(30))), 2),
        ];
        let a = run(&m, &d, 10, 2);
        assert_eq!(a.totals.active, 0);
        assert_eq!(a.totals.last_schedule_time, Some(t(30)));
    }

    #[test]
    fn fresh_caught_up_members_at_target_are_ready() {
        let a = six_and_four(true);
        assert_eq!(a.totals.available_replicas, 10);
        assert_eq!(get(&a, "Ready").status, ConditionStatus::True);
        assert_eq!(get(&a, "Degraded").status, ConditionStatus::False);
        assert_eq!(get(&a, "Progressing").status, ConditionStatus::False);
        assert_eq!(a.observed_generation, Some(2));
    }

    #[test]
    fn a_not_ready_member_is_never_reported_ready() {
        let a = six_and_four(false);
        assert_eq!(get(&a, "Ready").status, ConditionStatus::Unknown);
        assert_eq!(get(&a, "Degraded").status, ConditionStatus::True);
        assert!(get(&a, "Degraded").message.contains("b is NotReady"));
        assert_eq!(a.clusters[1].state.as_deref(), Some("Unknown"));
        assert_eq!(
            a.observed_generation,
            Some(1),
            "observedGeneration must not advance on lost members"
        );
    }

    #[test]
    fn stale_member_data_is_never_ready() {
        let d = decision(&[("a", 10)]);
        let m = [obs("a", true, Some(status("a", 0, 10, "Ready")), 2)];
        let fresh = run(&m, &d, 60, 2);
        assert_eq!(get(&fresh, "Ready").status, ConditionStatus::True);
        let stale = run(&m, &d, 61, 2);
        assert_eq!(get(&stale, "Ready").status, ConditionStatus::Unknown);
        assert!(get(&stale, "Ready").message.contains("61s old"));
    }

    #[test]
    fn observed_generation_waits_for_every_slice() {
        let d = decision(&[("a", 6), ("b", 4)]);
        let mut behind = obs("b", true, Some(status("b", 0, 4, "Ready")), 2);
        behind.slice_processed = false;
        let m = [obs("a", true, Some(status("a", 0, 6, "Ready")), 3), behind];
        let a = run(&m, &d, 1, 3);
        assert_eq!(a.observed_generation, Some(1));
        assert_eq!(get(&a, "Ready").status, ConditionStatus::False);
        assert_eq!(get(&a, "Ready").reason, "SlicesUpdating");
        assert_eq!(get(&a, "Progressing").status, ConditionStatus::True);
    }

    #[test]
    fn below_target_is_not_ready_and_unplaced_is_not_scheduled() {
        let mut d = decision(&[("a", 6)]);
        d.unplaced = 4;
        d.reason = Some("InsufficientCapacity".into());
        let m = [obs("a", true, Some(status("a", 0, 6, "Ready")), 1)];
        let a = run(&m, &d, 1, 1);
        assert_eq!(get(&a, "Ready").status, ConditionStatus::False);
        assert_eq!(get(&a, "Scheduled").status, ConditionStatus::False);
        assert!(get(&a, "Scheduled").message.contains("4 unplaced"));
    }

    #[test]
    fn completed_shards_are_a_union_and_never_forgotten() {
        let a = shards_of(
            ("Progressing", "0-2", ""),
            ("Complete", "2,5-9", ""),
            None,
            "3",
        );
        assert_eq!(a.totals.completed_shards.to_string(), "0-3,5-9");
        assert_eq!(
            a.totals.shards_succeeded, 9,
            "shard 2 reported twice counts once"
        );
        assert_eq!(get(&a, "Complete").status, ConditionStatus::False);
    }

    #[test]
    fn a_member_that_refused_its_slice_degrades_the_workload_and_fails_nothing() {
        let sa = MemberWorkloadStatus {
            message: Some("PodPolicyDenied: privileged is not allowed".into()),
            ..status("a", 0, 0, "Refused")
        };
        let a = split_shards(sa, status("b", 0, 0, "Progressing"), None, &RangeSet::new());
        let degraded = get(&a, "Degraded");
        assert_eq!(
            (degraded.status, degraded.reason.as_str()),
            (ConditionStatus::True, "MemberRefused")
        );
        assert_eq!(
            degraded.message,
            "a refused it: PodPolicyDenied: privileged is not allowed"
        );
        assert_eq!(
            get(&a, "Failed").status,
            ConditionStatus::False,
            "refused is not failed: nothing ran"
        );
    }

    #[test]
    fn a_member_completes_and_fails_only_shards_it_holds_or_held() {
        // (a's report, b's report, what b's slice holds, completed, failed)
        let cases = [
            // a claims b's shards too; b's slice still holds 3 from before a move.
            (
                ("Complete", "0-9", ""),
                ("Progressing", "3,5", ""),
                "3,5-9",
                "0-5",
                "",
            ),
            // a failed 1 and 2, and claims b's 7 failed too; b completed 2 after a move
            // (its slice holds it) and failed 8.
            (
                ("Failed", "", "1-2,7"),
                ("Progressing", "2", "8"),
                "2,5-9",
                "2",
                "1,8",
            ),
        ];
        for (ra, rb, b_holds, completed, failed) in cases {
            let a = shards_of(ra, rb, Some(b_holds), "");
            assert_eq!(
                a.totals.completed_shards.to_string(),
                completed,
                "{ra:?} {rb:?}"
            );
            assert_eq!(a.totals.failed_shards.to_string(), failed, "{ra:?} {rb:?}");
            assert_eq!(get(&a, "Complete").status, ConditionStatus::False);
        }
    }

    #[test]
    fn hostile_member_reports_are_bounded() {
        let d = shard_decision(&[("a", "0-9")]);
        let mut sa = status("a", 0, i32::MAX, "Progressing");
        sa.completed_shards = Some("0-4294967294".into());
        sa.shards_succeeded = Some(i32::MAX);
        let mut sb = status("b", 0, i32::MAX, "Progressing");
        sb.shards_succeeded = Some(i32::MAX);
        let members = [obs("a", true, Some(sa), 1), obs("b", true, Some(sb), 1)];
        let a = aggregate_shards(&d, &members, &RangeSet::new(), 10);
        assert_eq!(
            a.totals.completed_shards.to_string(),
            "0-9",
            "within the job set's shards"
        );
        assert_eq!(a.totals.shards_succeeded, 10);
        assert_eq!(a.totals.available_replicas, i32::MAX, "sums saturate");
    }
}

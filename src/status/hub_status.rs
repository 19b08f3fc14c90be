//! The hub resource's status from one reconcile: the aggregate of its slices, its
//! placement, its conditions (with FailedOver) and the kind's totals — and whether it
//! differs from what is stored, so an unchanged status is never rewritten. Pure.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::aggregate::{AggregateInput, aggregate};
use crate::api::common::{
    Condition, ConditionStatus, MemberWorkloadStatus, condition_types as ct, set_condition,
};
use crate::api::kind::{HubPart, PinterestKind};

/// Condition: the workload runs off a member it failed over from.
pub const FAILED_OVER: &str = "FailedOver";

/// Where the workload stands on failover, as the hub decided this reconcile.
#[derive(Debug, Clone, Default)]
pub struct FailoverView<'a> {
    /// What the last failover moved (the FailedOver message).
    pub message: Option<&'a str>,
    /// Members it moved off before and has not failed back to.
    pub failed_over_from: BTreeSet<String>,
    /// Members placed before and lost now.
    pub lost_now: BTreeSet<String>,
    /// Members it fails back to now.
    pub failing_back: BTreeSet<String>,
}

/// Everything the hub status of a `K` is computed from.
pub struct HubStatusInput<'a, K: PinterestKind> {
    /// The status as stored.
    pub stored: &'a K::Status,
    pub aggregate: AggregateInput<'a>,
    pub failover: FailoverView<'a>,
    /// Where the workload's change stands (`None`: as stored).
    pub rollout: Option<crate::api::rollout::RolloutStatus>,
}

/// The hub status to write, or `None` when the stored one already says all of it.
pub fn hub_status<K: PinterestKind>(input: &HubStatusInput<'_, K>) -> Option<K::Status> {
    let agg = aggregate(&input.aggregate);
    let a = &input.aggregate;
    let stored = K::hub_part(input.stored);
    let mut conditions = agg.conditions;
    conditions.push(failed_over_condition(
        &input.failover,
        a.hub_generation,
        a.now,
    ));
    let mut clusters = agg.clusters;
    keep_observed_times(&stored.clusters, &mut clusters);
    let rollout = input.rollout.clone().or(stored.rollout);
    if let Some(r) = &rollout {
        conditions.push(rollout_condition(r, a.hub_generation, a.now));
    }
    let part = HubPart {
        observed_generation: agg.observed_generation,
        conditions: merge_conditions(&stored.conditions, conditions),
        placement: Some(a.decision.clone()),
        clusters,
        rollout,
    };
    let status = K::hub_status(part, &agg.totals);
    (status != *input.stored).then_some(status)
}

/// The decision recorded in a status held as JSON (the JSS's dynamic cache).
pub fn stored_decision(
    status: &serde_json::Value,
) -> Option<crate::api::common::PlacementDecision> {
    serde_json::from_value(status.get("placement")?.clone()).ok()
}

/// Condition: the revision the spec asks for runs on every member of the workload.
pub const ROLLED_OUT: &str = "RolledOut";

/// RolledOut: True once the spec's revision is rolled out everywhere; False with the
/// rollout's phase as the reason while it is not (waiting for approval, rolled back...).
pub fn rollout_condition(
    r: &crate::api::rollout::RolloutStatus,
    generation: i64,
    now: &Time,
) -> Condition {
    let done = r.phase == crate::api::rollout::phase::COMPLETE;
    Condition::new(
        ROLLED_OUT,
        ConditionStatus::from(done),
        if done { "Complete" } else { r.phase.as_str() },
        r.message.clone().unwrap_or_default(),
        Some(generation),
        now,
    )
}

/// FailedOver: True while the workload runs off a member it failed over from.
pub fn failed_over_condition(f: &FailoverView<'_>, generation: i64, now: &Time) -> Condition {
    let mut from: BTreeSet<String> = f.failed_over_from.clone();
    from.extend(f.lost_now.iter().cloned());
    from.retain(|c| !f.failing_back.contains(c));
    if from.is_empty() {
        return Condition::new(
            FAILED_OVER,
            ConditionStatus::False,
            if f.failing_back.is_empty() {
                "NoMemberLost"
            } else {
                "FailedBack"
            },
            "",
            Some(generation),
            now,
        );
    }
    let moved = f.message.map(str::to_string).unwrap_or_else(|| {
        format!(
            "{} lost",
            from.iter().cloned().collect::<Vec<_>>().join(", ")
        )
    });
    Condition::new(
        FAILED_OVER,
        ConditionStatus::True,
        "MemberLost",
        format!("{moved}; fails back once the member is Ready past the failback window"),
        Some(generation),
        now,
    )
}

/// The stored conditions with `new` set over them (a condition whose status did not
/// change keeps its lastTransitionTime); Invalid is dropped once the workload is valid.
pub fn merge_conditions(stored: &[Condition], new: Vec<Condition>) -> Vec<Condition> {
    let mut old = stored.to_vec();
    old.retain(|c| c.type_ != ct::INVALID);
    for c in new {
        set_condition(&mut old, c);
    }
    old
}

/// Each `clusters[]` entry unchanged since the stored status keeps its `observedTime`,
/// so an unchanged status compares equal and is not rewritten: rewriting it costs an
/// API write and wakes every watcher of the hub resource (the hub itself included) for
/// nothing — with 10,000 workloads, refreshing the times alone kept the hub's API server
/// busy. `observedTime` thus means "seen as it is since"; a reachable member's entry is
/// read afresh on every reconcile, and a NotReady member's is marked as such whatever its age.
pub fn keep_observed_times(stored: &[MemberWorkloadStatus], new: &mut [MemberWorkloadStatus]) {
    for entry in new {
        let Some(prev) = stored.iter().find(|c| c.cluster == entry.cluster) else {
            continue;
        };
        let same = MemberWorkloadStatus {
            observed_time: prev.observed_time.clone(),
            ..entry.clone()
        };
        if same == *prev {
            entry.observed_time = prev.observed_time.clone();
        }
    }
}

/// What a status about to be written changes in the stored one, as paths (`ready`,
/// `conditions[Ready].reason`, `clusters[a].readyReplicas`): the hub logs them at debug
/// level, so "why did the hub write this status" has an answer.
pub fn status_changes(old: &serde_json::Value, new: &serde_json::Value) -> Vec<String> {
    // Entries of a list keyed by `key`, compared field by field.
    let keyed = |field: &str, key: &str, out: &mut Vec<String>| {
        let entries = |v: &serde_json::Value| -> Vec<(String, serde_json::Value)> {
            v[field]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|e| (e[key].as_str().unwrap_or_default().to_string(), e.clone()))
                        .collect()
                })
                .unwrap_or_default()
        };
        let (before, after) = (entries(old), entries(new));
        for (k, e) in &after {
            match before.iter().find(|(b, _)| b == k) {
                None => out.push(format!("{field}[{k}]+")),
                Some((_, b)) => {
                    let fields = e.as_object().into_iter().flatten();
                    for (f, _) in fields.filter(|(f, v)| b.get(f.as_str()) != Some(v)) {
                        out.push(format!("{field}[{k}].{f}"));
                    }
                }
            }
        }
        for (k, _) in before
            .iter()
            .filter(|(b, _)| !after.iter().any(|(a, _)| a == b))
        {
            out.push(format!("{field}[{k}]-"));
        }
    };
    let mut out = Vec::new();
    for (k, v) in new.as_object().into_iter().flatten() {
        if old.get(k) == Some(v) {
            continue;
        }
        match k.as_str() {
            "conditions" => keyed("conditions", "type", &mut out),
            "clusters" => keyed("clusters", "cluster", &mut out),
            _ => out.push(k.clone()),
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap())
    }

    #[test]
    fn an_unchanged_entry_keeps_its_observed_time() {
        let entry = |at: i64, avail: i32| MemberWorkloadStatus {
            available_replicas: Some(avail),
            ..MemberWorkloadStatus::observed("a", t(at))
        };
        let stored = [entry(0, 3)];
        // Same content later: keeps the old time.
        let mut new = [entry(600, 3)];
        keep_observed_times(&stored, &mut new);
        assert_eq!(new[0], stored[0]);
        // Changed content keeps the new time; so does an entry for another member.
        let mut new = [entry(600, 2)];
        keep_observed_times(&stored, &mut new);
        assert_eq!(new[0].observed_time, t(600));
        let mut new = [MemberWorkloadStatus {
            cluster: "b".into(),
            ..entry(600, 3)
        }];
        keep_observed_times(&stored, &mut new);
        assert_eq!(new[0].observed_time, t(600));
    }

    #[test]
    fn failed_over_is_true_while_off_a_lost_member_and_false_once_back() {
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let f = FailoverView {
            message: Some("use1a lost: its 4 replicas moved to use1b +4"),
            lost_now: set(&["use1a"]),
            ..Default::default()
        };
        let c = failed_over_condition(&f, 3, &t(1_800_000_000));
        assert_eq!(c.status, ConditionStatus::True);
        assert!(c.message.starts_with("use1a lost: its 4 replicas"));
        let back = FailoverView {
            failed_over_from: set(&["use1a"]),
            failing_back: set(&["use1a"]),
            ..Default::default()
        };
        let c = failed_over_condition(&back, 3, &t(1_800_000_000));
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::False, "FailedBack")
        );
        let none = failed_over_condition(&FailoverView::default(), 3, &t(1_800_000_000));
        assert_eq!(none.reason, "NoMemberLost");
    }

    #[test]
    fn merged_conditions_drop_invalid_and_keep_the_others() {
        let t0 = t(1_700_000_000);
        let stored = [
            Condition::new(
                ct::INVALID,
                ConditionStatus::True,
                "InvalidSpec",
                "x",
                Some(1),
                &t0,
            ),
            Condition::new(
                "Scheduled",
                ConditionStatus::True,
                "Placed",
                "",
                Some(1),
                &t0,
            ),
        ];
        let ready = Condition::new(
            ct::READY,
            ConditionStatus::True,
            "Available",
            "",
            Some(1),
            &t(1_800_000_000),
        );
        let merged = merge_conditions(&stored, vec![ready]);
        let types: Vec<&str> = merged.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            ["Ready", "Scheduled"],
            "sorted by type, Invalid gone"
        );
    }

    #[test]
    fn status_changes_name_the_fields_that_differ() {
        let old = serde_json::json!({
            "replicas": 3,
            "clusters": [{"cluster": "a", "readyReplicas": 1}, {"cluster": "b"}],
            "conditions": [{"type": "Ready", "status": "False", "reason": "Pending"}],
        });
        let new = serde_json::json!({
            "replicas": 3,
            "ready": true,
            "clusters": [{"cluster": "a", "readyReplicas": 2}, {"cluster": "c"}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "Pending"}],
        });
        assert_eq!(
            status_changes(&old, &new),
            vec![
                "clusters[a].readyReplicas",
                "clusters[b]-",
                "clusters[c]+",
                "conditions[Ready].status",
                "ready",
            ]
        );
        assert!(status_changes(&new, &new).is_empty());
        // Nothing stored yet: every field is new.
        assert_eq!(
            status_changes(
                &serde_json::Value::Null,
                &serde_json::json!({"replicas": 1})
            ),
            vec!["replicas"]
        );
    }
}

/// Golden files: the hub status each kind writes for one fixed scene (two members, one
/// ready and one behind; a stored status with an Invalid condition and an unchanged
/// member entry), under `tests/golden/hub-status/`, so a change to what the hub writes
/// shows up as a reviewable diff. Regenerate with `PINFED_UPDATE_GOLDEN=1`.
#[cfg(test)]
mod golden {
    use super::*;
    use crate::api::common::{ClusterPlacement, PlacementDecision};
    use crate::api::cronjob::PinterestCronJob;
    use crate::api::daemon::PinterestDaemon;
    use crate::api::jobset::PinterestJobSet;
    use crate::api::kind::{PinterestKind, Progress};
    use crate::api::ranges::RangeSet;
    use crate::api::service::PinterestService;
    use crate::api::statefulset::PinterestStatefulSet;
    use crate::api::training::PinterestTrainingJob;
    use crate::status::aggregate::MemberObservation;

    fn t(s: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + s).unwrap())
    }

    /// A member's entry as its slice reports it; `counts` sets the kind's numbers.
    fn entry(cluster: &str, state: &str, counts: serde_json::Value) -> MemberWorkloadStatus {
        let mut v = serde_json::json!({
            "cluster": cluster, "observedTime": t(100), "observedGeneration": 2, "state": state,
        });
        for (k, x) in counts.as_object().unwrap() {
            v[k] = x.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    struct Scene {
        progress: Progress,
        decision: PlacementDecision,
        a: MemberWorkloadStatus,
        b: MemberWorkloadStatus,
    }

    fn placement(parts: &[(&str, Option<i32>, Option<&str>)]) -> PlacementDecision {
        PlacementDecision {
            strategy: Some(crate::api::common::PlacementStrategy::Divided),
            placements: parts
                .iter()
                .map(|(c, r, s)| ClusterPlacement {
                    cluster: c.to_string(),
                    replicas: *r,
                    shards: s.map(str::to_string),
                    pods: None,
                })
                .collect(),
            unplaced: 0,
            reason: None,
            ..Default::default()
        }
    }

    fn replicated() -> Scene {
        use serde_json::json;
        Scene {
            progress: Progress::Replicas { desired: 5 },
            decision: placement(&[("a", Some(3), None), ("b", Some(2), None)]),
            a: entry(
                "a",
                "Ready",
                json!({"replicas": 3, "readyReplicas": 3, "availableReplicas": 3, "updatedReplicas": 3}),
            ),
            b: entry(
                "b",
                "Progressing",
                json!({"replicas": 2, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1,
                       "message": "1 of 2 pods available"}),
            ),
        }
    }

    fn scene(kind: &str) -> Scene {
        use serde_json::json;
        match kind {
            "PinterestService" | "PinterestStatefulSet" => replicated(),
            "PinterestDaemon" => Scene {
                progress: Progress::Replicas { desired: 0 },
                decision: placement(&[("a", None, None), ("b", None, None)]),
                ..replicated()
            },
            "PinterestJobSet" => Scene {
                progress: Progress::Shards { total: 10 },
                decision: placement(&[("a", None, Some("0-4")), ("b", None, Some("5-9"))]),
                a: entry(
                    "a",
                    "Complete",
                    json!({"shardsRunning": 0, "shardsSucceeded": 5, "shardsFailed": 0, "completedShards": "0-4"}),
                ),
                b: entry(
                    "b",
                    "Progressing",
                    json!({"shardsRunning": 1, "shardsSucceeded": 3, "shardsFailed": 1, "completedShards": "5-7",
                           "failedShards": "8"}),
                ),
            },
            "PinterestCronJob" => Scene {
                progress: Progress::RunToCompletion,
                decision: placement(&[("a", None, None)]),
                a: entry(
                    "a",
                    "Ready",
                    json!({"active": 1, "lastScheduleTime": t(60), "lastSuccessfulTime": t(0)}),
                ),
                b: entry("b", "Ready", json!({"active": 0})),
            },
            _ => Scene {
                progress: Progress::RunToCompletion,
                decision: placement(&[("a", Some(3), None), ("b", Some(1), None)]),
                a: entry("a", "Complete", json!({"replicas": 3})),
                b: entry("b", "Progressing", json!({"replicas": 1})),
            },
        }
    }

    fn render<K: PinterestKind>() -> String {
        let s = scene(K::KIND.as_str());
        let t0 = t(0);
        // Stored: an Invalid condition (dropped now the workload is valid) and `a`'s entry
        // as it is now but observed earlier (it keeps its time).
        let mut stored_a = s.a.clone();
        stored_a.observed_time = t(50);
        let stored: K::Status = serde_json::from_value(serde_json::json!({
            "conditions": [Condition::new(ct::INVALID, ConditionStatus::True, "InvalidSpec", "x", Some(1), &t0)],
            "clusters": [stored_a],
        }))
        .unwrap();
        let members: Vec<MemberObservation> = s
            .decision
            .placements
            .iter()
            .map(|p| MemberObservation {
                cluster: p.cluster.clone(),
                member_ready: true,
                status: Some(if p.cluster == "a" {
                    s.a.clone()
                } else {
                    s.b.clone()
                }),
                slice_hub_generation: Some(2),
                slice_processed: true,
                held_shards: p.shards.clone(),
            })
            .collect();
        let previous = RangeSet::new();
        let now = t(110);
        let input = |stored| HubStatusInput::<K> {
            stored,
            aggregate: AggregateInput {
                hub_generation: 2,
                previous_observed_generation: Some(1),
                previous_completed: &previous,
                progress: s.progress,
                decision: &s.decision,
                quota_exceeded: false,
                members: &members,
                now: &now,
                stale_after_secs: 60,
            },
            failover: FailoverView::default(),
            rollout: None,
        };
        let status =
            hub_status(&input(&stored)).expect("a status that differs from the stored one");
        // Once written, the same scene writes nothing.
        assert_eq!(hub_status(&input(&status)), None, "{}: rewritten", K::KIND);
        // (As a JSON value: its fields sorted, as the golden file has them.)
        serde_json::to_string_pretty(&serde_json::to_value(&status).unwrap()).unwrap() + "\n"
    }

    fn check(kind: &str, got: String) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden/hub-status")
            .join(format!("{kind}.json"));
        if std::env::var_os("PINFED_UPDATE_GOLDEN").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &got).unwrap();
            return;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{}: {e} (PINFED_UPDATE_GOLDEN=1 writes it)", path.display())
        });
        assert_eq!(
            got,
            want,
            "{kind}: the hub status differs from {}",
            path.display()
        );
    }

    #[test]
    fn every_kind_writes_its_golden_hub_status() {
        check("PinterestService", render::<PinterestService>());
        check("PinterestStatefulSet", render::<PinterestStatefulSet>());
        check("PinterestDaemon", render::<PinterestDaemon>());
        check("PinterestJobSet", render::<PinterestJobSet>());
        check("PinterestCronJob", render::<PinterestCronJob>());
        check("PinterestTrainingJob", render::<PinterestTrainingJob>());
    }
}

//! The hub resource's status from one reconcile: the aggregate of its slices, its
//! placement, its conditions (with FailedOver) and the kind's totals — and whether it
//! differs from what is stored, so an unchanged status is never rewritten. Pure.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::aggregate::{Aggregate, AggregateInput, aggregate};
use crate::api::common::{
    Condition, ConditionStatus, PlacementDecision, condition_types as ct, set_condition,
};
use crate::api::kind::Totals;

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

/// Everything the hub status is computed from.
pub struct HubStatusInput<'a> {
    /// The status as stored (JSON, as read from the hub resource).
    pub stored: &'a serde_json::Value,
    pub aggregate: AggregateInput<'a>,
    pub failover: FailoverView<'a>,
    /// The status fields of the kind's totals (from [`crate::api::kind::PinterestKind`]).
    pub totals_fields: fn(&Totals) -> Vec<(&'static str, serde_json::Value)>,
}

/// The hub status to write, or `None` when the stored one already says all of it.
pub fn hub_status(input: &HubStatusInput<'_>) -> Option<serde_json::Value> {
    let agg = aggregate(&input.aggregate);
    let a = &input.aggregate;
    let mut conditions = agg.conditions.clone();
    conditions.push(failed_over_condition(
        &input.failover,
        a.hub_generation,
        a.now,
    ));
    let mut st = serde_json::json!({
        "placement": a.decision,
        "clusters": agg.clusters,
        "conditions": merge_conditions(input.stored, conditions),
    });
    if let Some(g) = agg.observed_generation {
        st["observedGeneration"] = g.into();
    }
    // A total the members have not reported yet (a cron job's first schedule) is left out.
    for (field, value) in (input.totals_fields)(&totals_of(&agg)) {
        if !value.is_null() {
            st[field] = value;
        }
    }
    (!settle_status(input.stored, &mut st)).then_some(st)
}

fn totals_of(agg: &Aggregate) -> Totals {
    Totals {
        replicas: agg.replicas,
        ready_replicas: agg.ready_replicas,
        available_replicas: agg.available_replicas,
        shards_running: agg.shards_running,
        shards_succeeded: agg.shards_succeeded,
        shards_failed: agg.shards_failed,
        completed_shards: agg.completed_shards.clone(),
        active: agg.active,
        last_schedule_time: agg.last_schedule_time.clone(),
        last_successful_time: agg.last_successful_time.clone(),
    }
}

/// The decision recorded in a stored status.
pub fn stored_decision(status: &serde_json::Value) -> Option<PlacementDecision> {
    serde_json::from_value(status.get("placement")?.clone()).ok()
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
pub fn merge_conditions(status: &serde_json::Value, new: Vec<Condition>) -> Vec<Condition> {
    let mut old: Vec<Condition> =
        serde_json::from_value(status.get("conditions").cloned().unwrap_or_default())
            .unwrap_or_default();
    old.retain(|c| c.type_ != ct::INVALID);
    for c in new {
        set_condition(&mut old, c);
    }
    old
}

/// Readies a hub status for writing: each `clusters[]` entry that is unchanged since the
/// `old` status keeps its `observedTime`. Then says whether `new` matches `old` in every
/// field it sets, so the write can be skipped: rewriting an unchanged status costs an
/// API write and wakes every watcher of the hub resource (the hub itself included) for
/// nothing — with 10,000 workloads, refreshing the times alone kept the hub's API server
/// busy. `observedTime` thus means "seen as it is since"; a reachable member's entry is
/// read afresh on every reconcile, and a NotReady member's is marked as such whatever its age.
pub fn settle_status(old: &serde_json::Value, new: &mut serde_json::Value) -> bool {
    let without_time = |v: &serde_json::Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("observedTime");
        }
        v
    };
    if let Some(entries) = new.get_mut("clusters").and_then(|c| c.as_array_mut()) {
        for entry in entries {
            let Some(prev) = old["clusters"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["cluster"] == entry["cluster"]))
            else {
                continue;
            };
            if prev.get("observedTime").is_some() && without_time(prev) == without_time(entry) {
                entry["observedTime"] = prev["observedTime"].clone();
            }
        }
    }
    new.as_object()
        .is_some_and(|o| o.iter().all(|(k, v)| old.get(k) == Some(v)))
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
    fn an_unchanged_status_is_not_rewritten() {
        let old = serde_json::json!({
            "availableReplicas": 3,
            "clusters": [{"cluster": "a", "observedTime": "2026-01-01T00:00:00Z", "availableReplicas": 3}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "setByOthers": 1,
        });
        let fresh = |avail: i64| {
            serde_json::json!({
                "availableReplicas": avail,
                "clusters": [{"cluster": "a", "observedTime": "2026-01-01T00:10:00Z", "availableReplicas": avail}],
                "conditions": [{"type": "Ready", "status": "True"}],
            })
        };
        // Same content later: keeps the old time and is skipped.
        let mut new = fresh(3);
        assert!(settle_status(&old, &mut new));
        assert_eq!(new["clusters"][0]["observedTime"], "2026-01-01T00:00:00Z");
        // Changed content is written with the new time.
        let mut new = fresh(2);
        assert!(!settle_status(&old, &mut new));
        assert_eq!(new["clusters"][0]["observedTime"], "2026-01-01T00:10:00Z");
        // A new field is a change; a cluster entry missing before is a change.
        let mut new = fresh(3);
        new["observedGeneration"] = 2.into();
        assert!(!settle_status(&old, &mut new));
        let mut new = fresh(3);
        new["clusters"][0]["cluster"] = "b".into();
        assert!(!settle_status(&old, &mut new));
        assert_eq!(new["clusters"][0]["observedTime"], "2026-01-01T00:10:00Z");
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
        let stored = serde_json::json!({"conditions": [
            Condition::new(ct::INVALID, ConditionStatus::True, "InvalidSpec", "x", Some(1), &t0),
            Condition::new("Scheduled", ConditionStatus::True, "Placed", "", Some(1), &t0),
        ]});
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

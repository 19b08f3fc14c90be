//! Member-side status: what the agent observed of the native objects it made → the
//! workload's status. Pure; the reconcile loop lists the objects and writes the result.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::common::{
    Condition, ConditionStatus, LABEL_REPLICA_TYPE, LABEL_SHARD, condition_types as ct,
    set_condition,
};
use crate::api::ranges::RangeSet;

/// Native objects of one workload in this cluster, found by the workload's labels.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub deployments: Vec<Deployment>,
    pub statefulsets: Vec<StatefulSet>,
    pub daemonsets: Vec<DaemonSet>,
    pub jobs: Vec<Job>,
    pub cronjobs: Vec<CronJob>,
}

/// A kind-independent verdict that becomes the standard conditions.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Health {
    pub ready: bool,
    pub progressing: bool,
    /// Why the workload is degraded, if it is.
    pub degraded: Option<String>,
    /// Run-to-completion kinds: whether it completed.
    pub complete: Option<bool>,
    /// Run-to-completion kinds: why it failed, if it did.
    pub failed: Option<String>,
    pub message: String,
}

/// Writes Ready / Progressing / Degraded (and Complete / Failed) from `h`, clears Invalid.
pub fn set_health_conditions(
    conditions: &mut Vec<Condition>,
    h: &Health,
    generation: Option<i64>,
    now: &Time,
) {
    let c = |t: &str, s: bool, yes: &str, no: &str, msg: &str| {
        Condition::new(
            t,
            s.into(),
            if s { yes } else { no },
            msg.to_string(),
            generation,
            now,
        )
    };
    set_condition(
        conditions,
        Condition::new(
            ct::INVALID,
            ConditionStatus::False,
            "Valid",
            "",
            generation,
            now,
        ),
    );
    set_condition(
        conditions,
        c(ct::READY, h.ready, "Ready", "NotReady", &h.message),
    );
    set_condition(
        conditions,
        c(ct::PROGRESSING, h.progressing, "Progressing", "Settled", ""),
    );
    let deg = h.degraded.clone().unwrap_or_default();
    set_condition(
        conditions,
        c(
            ct::DEGRADED,
            h.degraded.is_some(),
            "Degraded",
            "Healthy",
            &deg,
        ),
    );
    if let Some(done) = h.complete {
        set_condition(
            conditions,
            c(ct::COMPLETE, done, "Completed", "Running", ""),
        );
        let why = h.failed.clone().unwrap_or_default();
        set_condition(
            conditions,
            c(ct::FAILED, h.failed.is_some(), "Failed", "NoFailure", &why),
        );
    }
}

/// Replica counts of a long-running workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplicaCounts {
    pub replicas: i32,
    pub ready: i32,
    pub available: i32,
    pub updated: i32,
}

pub fn deployment_counts(ds: &[Deployment]) -> (ReplicaCounts, Option<String>) {
    let mut c = ReplicaCounts::default();
    let mut problem = None;
    for d in ds {
        let Some(s) = &d.status else { continue };
        c.replicas += s.replicas.unwrap_or(0);
        c.ready += s.ready_replicas.unwrap_or(0);
        c.available += s.available_replicas.unwrap_or(0);
        // Updated only once the Deployment controller has seen the current template: a
        // status from before counts the old pods as updated (a rollout gate would pass a
        // change no pod runs yet).
        if observed_current(d.metadata.generation, s.observed_generation) {
            c.updated += s.updated_replicas.unwrap_or(0);
        }
        for cond in s.conditions.iter().flatten() {
            let stuck = cond.type_ == "Progressing" && cond.status == "False";
            let failure = cond.type_ == "ReplicaFailure" && cond.status == "True";
            if stuck || failure {
                problem = Some(
                    cond.message
                        .clone()
                        .unwrap_or_else(|| cond.reason.clone().unwrap_or_default()),
                );
            }
        }
    }
    (c, problem)
}

/// Whether a workload controller's status describes the object's current generation.
fn observed_current(generation: Option<i64>, observed: Option<i64>) -> bool {
    match (generation, observed) {
        (Some(g), Some(o)) => o >= g,
        (None, _) => true,
        (Some(_), None) => false,
    }
}

pub fn statefulset_counts(ss: &[StatefulSet]) -> ReplicaCounts {
    let mut c = ReplicaCounts::default();
    for st in ss {
        let Some(s) = st.status.as_ref() else {
            continue;
        };
        c.replicas += s.replicas;
        c.ready += s.ready_replicas.unwrap_or(0);
        c.available += s.available_replicas.unwrap_or(0);
        if observed_current(st.metadata.generation, s.observed_generation) {
            c.updated += s.updated_replicas.unwrap_or(0);
        }
    }
    c
}

/// desired, ready, available, updated of DaemonSets.
pub fn daemonset_counts(ds: &[DaemonSet]) -> ReplicaCounts {
    let mut c = ReplicaCounts::default();
    for d in ds {
        let Some(s) = d.status.as_ref() else { continue };
        c.replicas += s.desired_number_scheduled;
        c.ready += s.number_ready;
        c.available += s.number_available.unwrap_or(0);
        if observed_current(d.metadata.generation, s.observed_generation) {
            c.updated += s.updated_number_scheduled.unwrap_or(0);
        }
    }
    c
}

/// Health of a long-running workload that wants `desired` replicas.
pub fn replica_health(
    desired: i32,
    c: ReplicaCounts,
    exists: bool,
    problem: Option<String>,
) -> Health {
    let ready = exists && c.available >= desired && c.ready >= desired;
    Health {
        ready,
        progressing: !exists
            || c.updated < desired
            || c.available < desired
            || c.replicas > desired,
        degraded: problem,
        complete: None,
        failed: None,
        message: format!("{}/{} available", c.available, desired),
    }
}

/// Where one Job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Running,
    Succeeded,
    Failed,
}

pub fn job_state(job: &Job) -> JobState {
    let s = job.status.clone().unwrap_or_default();
    let has = |t: &str| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == t && c.status == "True")
    };
    if has("Complete") || has("SuccessCriteriaMet") {
        JobState::Succeeded
    } else if has("Failed") || has("FailureTarget") {
        JobState::Failed
    } else {
        JobState::Running
    }
}

/// What a job set's shards have done in this cluster.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShardAccount {
    /// Every shard ever recorded as completed here (previous record ∪ succeeded Jobs).
    pub completed: RangeSet,
    /// Shards whose Job failed for good (and that never completed).
    pub failed: RangeSet,
    /// Shards with a Job that is still running.
    pub running: RangeSet,
    /// Running shards whose Job has no pod Ready and none succeeded yet: pending,
    /// pulling an image, crashing (application failover's evidence).
    pub unready: RangeSet,
}

/// Folds the observed shard Jobs into the record. A completed shard stays completed even
/// when its Job is gone (TTL clean-up, pruning) — the record is the source of truth.
pub fn account_shards(
    jobs: &[Job],
    previous_completed: &RangeSet,
    previous_failed: &RangeSet,
) -> ShardAccount {
    let mut succeeded = Vec::new();
    let mut failed = Vec::new();
    let mut running = Vec::new();
    let mut unready = Vec::new();
    for j in jobs {
        let Some(index) = j
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_SHARD))
            .and_then(|v| v.parse::<u32>().ok())
        else {
            continue;
        };
        if j.metadata.deletion_timestamp.is_some() {
            continue;
        }
        match job_state(j) {
            JobState::Succeeded => succeeded.push(index),
            JobState::Failed => failed.push(index),
            JobState::Running => {
                running.push(index);
                let s = j.status.as_ref();
                if s.and_then(|s| s.ready).unwrap_or(0) == 0
                    && s.and_then(|s| s.succeeded).unwrap_or(0) == 0
                {
                    unready.push(index);
                }
            }
        }
    }
    let completed = previous_completed.union(&RangeSet::from_indices(succeeded));
    let failed = previous_failed
        .union(&RangeSet::from_indices(failed))
        .difference(&completed);
    let running = RangeSet::from_indices(running)
        .difference(&completed)
        .difference(&failed);
    let unready = RangeSet::from_indices(unready).intersection(&running);
    ShardAccount {
        completed,
        failed,
        running,
        unready,
    }
}

/// Per-role counts of a training job's replica Jobs.
pub fn training_roles(jobs: &[Job]) -> BTreeMap<String, (i32, i32, i32)> {
    let mut roles: BTreeMap<String, (i32, i32, i32)> = BTreeMap::new();
    for j in jobs {
        let Some(role) = j
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_REPLICA_TYPE))
        else {
            continue;
        };
        let e = roles.entry(role.clone()).or_default();
        match job_state(j) {
            JobState::Running => e.0 += 1,
            JobState::Succeeded => e.1 += 1,
            JobState::Failed => e.2 += 1,
        }
    }
    roles
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::set_invalid_conditions;

    fn job(shard: u32, cond: Option<&str>) -> Job {
        let conditions = cond
            .map(|c| vec![serde_json::json!({"type": c, "status": "True"})])
            .unwrap_or_default();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("s{shard}"), "labels": {LABEL_SHARD: shard.to_string()}},
            "status": {"conditions": conditions}
        }))
        .unwrap()
    }

    #[test]
    fn completed_shards_are_never_forgotten_and_failed_ones_are_tracked() {
        let prev = RangeSet::parse("0-1").unwrap();
        // Shard 0's Job is gone (TTL); 2 succeeded; 3 failed; 4 runs.
        let jobs = [
            job(1, Some("Complete")),
            job(2, Some("Complete")),
            job(3, Some("Failed")),
            job(4, None),
        ];
        let a = account_shards(&jobs, &prev, &RangeSet::new());
        assert_eq!(a.completed.to_string(), "0-2");
        assert_eq!(a.failed.to_string(), "3");
        assert_eq!(a.running.to_string(), "4");
    }

    #[test]
    fn a_running_shard_is_unready_until_a_pod_of_its_job_is_ready_or_succeeded() {
        let with = |shard: u32, status: serde_json::Value| -> Job {
            let mut j = job(shard, None);
            j.status = Some(serde_json::from_value(status).unwrap());
            j
        };
        let jobs = [
            job(0, None),
            with(1, serde_json::json!({"active": 1, "ready": 0})),
            with(2, serde_json::json!({"active": 1, "ready": 1})),
            // Its pod finished; the Job's Complete condition is not written yet.
            with(
                3,
                serde_json::json!({"active": 0, "ready": 0, "succeeded": 1}),
            ),
            job(4, Some("Complete")),
            job(5, Some("Failed")),
        ];
        let a = account_shards(&jobs, &RangeSet::new(), &RangeSet::new());
        assert_eq!(a.running.to_string(), "0-3");
        assert_eq!(a.unready.to_string(), "0-1");
    }

    #[test]
    fn a_shard_that_completes_after_a_failure_record_is_not_failed() {
        let a = account_shards(
            &[job(3, Some("Complete"))],
            &RangeSet::new(),
            &RangeSet::parse("3").unwrap(),
        );
        assert_eq!(a.completed.to_string(), "3");
        assert!(a.failed.is_empty());
    }

    #[test]
    fn a_deployment_status_from_before_its_template_counts_nothing_updated() {
        let d = |generation: i64, observed: i64| -> Deployment {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "d", "generation": generation},
                "status": {"observedGeneration": observed, "replicas": 3, "readyReplicas": 3,
                    "availableReplicas": 3, "updatedReplicas": 3}
            }))
            .unwrap()
        };
        assert_eq!(deployment_counts(&[d(2, 2)]).0.updated, 3);
        let (stale, _) = deployment_counts(&[d(3, 2)]);
        assert_eq!((stale.updated, stale.available), (0, 3));
    }

    #[test]
    fn replica_health_is_ready_only_at_target() {
        let c = ReplicaCounts {
            replicas: 3,
            ready: 3,
            available: 3,
            updated: 3,
        };
        assert!(replica_health(3, c, true, None).ready);
        assert!(!replica_health(3, c, true, None).progressing);
        let short = ReplicaCounts { available: 2, ..c };
        let h = replica_health(3, short, true, None);
        assert!(!h.ready && h.progressing);
        assert_eq!(h.message, "2/3 available");
        assert!(
            !replica_health(0, ReplicaCounts::default(), false, None).ready,
            "missing objects are not ready"
        );
    }

    #[test]
    fn conditions_keep_transition_times_and_clear_invalid() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap());
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_100).unwrap());
        let mut conds = Vec::new();
        set_invalid_conditions(&mut conds, "spec.replicas: must be >= 0", Some(1), &t0);
        assert!(
            conds
                .iter()
                .any(|c| c.type_ == "Invalid" && c.status == ConditionStatus::True)
        );
        let h = Health {
            ready: true,
            message: "3/3 available".into(),
            ..Default::default()
        };
        set_health_conditions(&mut conds, &h, Some(2), &t1);
        let invalid = conds.iter().find(|c| c.type_ == "Invalid").unwrap();
        assert_eq!(invalid.status, ConditionStatus::False);
        let ready = conds.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(
            (ready.status, ready.observed_generation),
            (ConditionStatus::True, Some(2))
        );
        set_health_conditions(&mut conds, &h, Some(2), &t0);
        assert_eq!(
            conds
                .iter()
                .find(|c| c.type_ == "Ready")
                .unwrap()
                .last_transition_time,
            t1,
            "unchanged status keeps its time"
        );
    }
}

//! One home per kind: the status vocabulary each Pinterest kind speaks in every layer.
//! The agent writes a slice's status in these terms, the hub reads a slice's counts and
//! progress through them and writes its totals back. Pure; adding a kind means one impl
//! here (beside its types) and one `observe` in the agent.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::common::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::cronjob::{PinterestCronJob, PinterestCronJobStatus};
use super::daemon::{PinterestDaemon, PinterestDaemonStatus};
use super::jobset::{PinterestJobSet, PinterestJobSetStatus};
use super::ranges::RangeSet;
use super::service::{PinterestService, PinterestServiceStatus};
use super::statefulset::{PinterestStatefulSet, PinterestStatefulSetStatus};
use super::training::{PinterestTrainingJob, PinterestTrainingJobStatus};
use super::workload::{Workload, WorkloadRef};

/// How a workload's progress is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Long-running replicas (services, stateful sets, daemons): Ready when `available`
    /// reaches `desired` everywhere.
    Replicas { desired: i32 },
    /// Job sets: Complete when every shard index is in `completedShards`.
    Shards { total: u32 },
    /// Cron and training jobs: Complete/Failed as the members report.
    RunToCompletion,
}

/// The counts one slice reports (a `clusters[]` entry's numbers); `None` where the kind
/// has no such count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SliceCounts {
    pub replicas: Option<i32>,
    pub ready_replicas: Option<i32>,
    pub available_replicas: Option<i32>,
    pub shards_running: Option<i32>,
    pub shards_succeeded: Option<i32>,
    pub shards_failed: Option<i32>,
    pub completed_shards: Option<String>,
    /// Cron jobs: runs in progress.
    pub active: Option<i32>,
    /// Cron jobs: when a run was last scheduled.
    pub last_schedule_time: Option<Time>,
    /// Cron jobs: when a run last succeeded.
    pub last_successful_time: Option<Time>,
}

/// The hub's totals over every slice of a workload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub replicas: i32,
    pub ready_replicas: i32,
    pub available_replicas: i32,
    pub shards_running: i32,
    pub shards_succeeded: i32,
    pub shards_failed: i32,
    pub completed_shards: RangeSet,
    /// Cron jobs: runs in progress in every member (a run on a member it failed over from
    /// counts until that member removes its slice).
    pub active: i32,
    /// Cron jobs: the latest schedule of any member.
    pub last_schedule_time: Option<Time>,
    /// Cron jobs: the latest success of any member.
    pub last_successful_time: Option<Time>,
}

/// A member's share of a workload, as its slice carries it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SliceShare {
    /// Replicas of a divided service or stateful set.
    pub replicas: Option<u32>,
    /// Shard indices of a job set (a range list).
    pub shards: Option<String>,
    /// A job set slice's part of the global parallelism (`Some(None)`: unbounded).
    pub parallelism: Option<Option<i32>>,
}

/// A Pinterest workload kind and its status vocabulary.
pub trait PinterestKind:
    Workload
    + Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    type Status: Serialize
        + serde::de::DeserializeOwned
        + Default
        + Clone
        + PartialEq
        + Debug
        + Send
        + Sync;
    fn status(&self) -> Option<&Self::Status>;
    fn status_mut(&mut self) -> &mut Option<Self::Status>;
    fn as_workload(&self) -> WorkloadRef<'_>;
    fn conditions(s: &mut Self::Status) -> &mut Vec<Condition>;
    fn conditions_of(s: &Self::Status) -> &[Condition];
    fn observed_generation(s: &Self::Status) -> Option<i64>;
    fn set_meta(s: &mut Self::Status, generation: Option<i64>, runtime_version: &str);
    /// How the hub counts this workload's progress.
    fn progress(&self) -> Progress;
    /// What a slice's status counts, in the hub's terms (bounded by the slice's spec: a
    /// member's report is not trusted beyond it).
    fn slice_counts(&self, _s: &Self::Status) -> SliceCounts {
        SliceCounts::default()
    }
    /// The share of a slice (replicas, shards): written into the slice's spec.
    fn assign_share(&mut self, _share: &SliceShare) {}
    /// The share a slice carries, read back from its spec.
    fn share_of(&self) -> SliceShare {
        SliceShare::default()
    }
    /// The hub status fields that hold this kind's totals.
    fn totals_fields(_t: &Totals) -> Vec<(&'static str, serde_json::Value)> {
        Vec::new()
    }
}

/// Evaluates `$body` with the type name `$K` bound to the Rust type of the kind `$kind`
/// (a [`crate::api::WorkloadKind`]): the one place a kind's name maps to its type.
#[macro_export]
macro_rules! with_kind {
    ($kind:expr, $K:ident => $body:expr) => {
        match $kind {
            $crate::api::WorkloadKind::Service => {
                type $K = $crate::api::service::PinterestService;
                $body
            }
            $crate::api::WorkloadKind::JobSet => {
                type $K = $crate::api::jobset::PinterestJobSet;
                $body
            }
            $crate::api::WorkloadKind::CronJob => {
                type $K = $crate::api::cronjob::PinterestCronJob;
                $body
            }
            $crate::api::WorkloadKind::Daemon => {
                type $K = $crate::api::daemon::PinterestDaemon;
                $body
            }
            $crate::api::WorkloadKind::TrainingJob => {
                type $K = $crate::api::training::PinterestTrainingJob;
                $body
            }
            $crate::api::WorkloadKind::StatefulSet => {
                type $K = $crate::api::statefulset::PinterestStatefulSet;
                $body
            }
        }
    };
}

pub use crate::with_kind;

/// The API resource (group, version, plural) of a workload kind, for dynamic clients.
pub fn api_resource(kind: super::workload::WorkloadKind) -> kube::core::ApiResource {
    with_kind!(kind, K => kube::core::ApiResource::erase::<K>(&()))
}

macro_rules! common {
    ($status:ty, $variant:ident) => {
        type Status = $status;
        fn status(&self) -> Option<&$status> {
            self.status.as_ref()
        }
        fn status_mut(&mut self) -> &mut Option<$status> {
            &mut self.status
        }
        fn as_workload(&self) -> WorkloadRef<'_> {
            WorkloadRef::$variant(self)
        }
        fn conditions(s: &mut $status) -> &mut Vec<Condition> {
            &mut s.conditions
        }
        fn conditions_of(s: &$status) -> &[Condition] {
            &s.conditions
        }
        fn observed_generation(s: &$status) -> Option<i64> {
            s.observed_generation
        }
        fn set_meta(s: &mut $status, generation: Option<i64>, runtime_version: &str) {
            s.observed_generation = generation;
            s.runtime_version = Some(runtime_version.to_string());
        }
    };
}

/// Services and stateful sets: divided replicas, replica counts.
macro_rules! replicated {
    () => {
        fn progress(&self) -> Progress {
            Progress::Replicas {
                desired: self.spec.replicas,
            }
        }
        fn slice_counts(&self, s: &Self::Status) -> SliceCounts {
            SliceCounts {
                replicas: Some(s.replicas),
                ready_replicas: Some(s.ready_replicas),
                available_replicas: Some(s.available_replicas),
                ..Default::default()
            }
        }
        fn assign_share(&mut self, share: &SliceShare) {
            self.spec.replicas = i32::try_from(share.replicas.unwrap_or(0)).unwrap_or(i32::MAX);
        }
        fn share_of(&self) -> SliceShare {
            SliceShare {
                replicas: u32::try_from(self.spec.replicas).ok(),
                ..Default::default()
            }
        }
        fn totals_fields(t: &Totals) -> Vec<(&'static str, serde_json::Value)> {
            vec![
                ("replicas", t.replicas.into()),
                ("readyReplicas", t.ready_replicas.into()),
                ("availableReplicas", t.available_replicas.into()),
            ]
        }
    };
}

impl PinterestKind for PinterestService {
    common!(PinterestServiceStatus, Service);
    replicated!();
}

impl PinterestKind for PinterestStatefulSet {
    common!(PinterestStatefulSetStatus, StatefulSet);
    replicated!();
}

impl PinterestKind for PinterestDaemon {
    common!(PinterestDaemonStatus, Daemon);
    /// A daemon's size is its members' nodes: Ready when every slice is.
    fn progress(&self) -> Progress {
        Progress::Replicas { desired: 0 }
    }
    fn slice_counts(&self, s: &PinterestDaemonStatus) -> SliceCounts {
        SliceCounts {
            replicas: Some(s.desired),
            ready_replicas: Some(s.ready),
            available_replicas: Some(s.available),
            ..Default::default()
        }
    }
    fn totals_fields(t: &Totals) -> Vec<(&'static str, serde_json::Value)> {
        vec![
            ("desired", t.replicas.into()),
            ("ready", t.ready_replicas.into()),
            ("available", t.available_replicas.into()),
        ]
    }
}

impl PinterestKind for PinterestJobSet {
    common!(PinterestJobSetStatus, JobSet);
    fn progress(&self) -> Progress {
        Progress::Shards {
            total: u32::try_from(self.spec.shards).unwrap_or(0),
        }
    }
    fn slice_counts(&self, s: &PinterestJobSetStatus) -> SliceCounts {
        let total = u32::try_from(self.spec.shards).unwrap_or(0);
        SliceCounts {
            shards_running: Some(s.shards_running),
            shards_succeeded: Some(s.shards_succeeded),
            shards_failed: Some(s.shards_failed),
            // A malformed record, or one naming shards the job set does not have, counts
            // as nothing completed (a range up to u32::MAX would be billions of shards).
            completed_shards: s.completed_shards.as_deref().map(|r| {
                RangeSet::parse_within(r, total)
                    .map(|r| r.to_string())
                    .unwrap_or_default()
            }),
            ..Default::default()
        }
    }
    fn assign_share(&mut self, share: &SliceShare) {
        self.spec.assigned_shards = Some(share.shards.clone().unwrap_or_default());
        if let Some(p) = share.parallelism {
            self.spec.parallelism = p;
        }
    }
    fn share_of(&self) -> SliceShare {
        SliceShare {
            shards: self.spec.assigned_shards.clone(),
            parallelism: Some(self.spec.parallelism),
            ..Default::default()
        }
    }
    fn totals_fields(t: &Totals) -> Vec<(&'static str, serde_json::Value)> {
        vec![
            ("shardsRunning", t.shards_running.into()),
            ("shardsSucceeded", t.shards_succeeded.into()),
            ("shardsFailed", t.shards_failed.into()),
            ("completedShards", t.completed_shards.to_string().into()),
        ]
    }
}

impl PinterestKind for PinterestCronJob {
    common!(PinterestCronJobStatus, CronJob);
    fn progress(&self) -> Progress {
        Progress::RunToCompletion
    }
    fn slice_counts(&self, s: &PinterestCronJobStatus) -> SliceCounts {
        SliceCounts {
            active: Some(s.active),
            last_schedule_time: s.last_schedule_time.clone(),
            last_successful_time: s.last_successful_time.clone(),
            ..Default::default()
        }
    }
    fn totals_fields(t: &Totals) -> Vec<(&'static str, serde_json::Value)> {
        let time = |t: &Option<Time>| {
            t.as_ref()
                .and_then(|t| serde_json::to_value(t).ok())
                .unwrap_or(serde_json::Value::Null)
        };
        vec![
            ("active", t.active.into()),
            ("lastScheduleTime", time(&t.last_schedule_time)),
            ("lastSuccessfulTime", time(&t.last_successful_time)),
        ]
    }
}

impl PinterestKind for PinterestTrainingJob {
    common!(PinterestTrainingJobStatus, TrainingJob);
    fn progress(&self) -> Progress {
        Progress::RunToCompletion
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobset() -> PinterestJobSet {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestJobSet",
            "metadata": {"name": "emb", "namespace": "ml"},
            "spec": {"owner": {"team": "ml", "contact": "ml@x"}, "shards": 10, "parallelism": 4,
                     "template": {"spec": {"containers": [{"name": "w", "image": "w:1"}]}}}
        }))
        .unwrap()
    }

    #[test]
    fn a_job_set_share_round_trips_through_its_spec() {
        let mut j = jobset();
        let share = SliceShare {
            shards: Some("2-5".into()),
            parallelism: Some(Some(2)),
            ..Default::default()
        };
        j.assign_share(&share);
        assert_eq!(j.spec.assigned_shards.as_deref(), Some("2-5"));
        assert_eq!(j.spec.parallelism, Some(2));
        assert_eq!(j.spec.shards, 10, "the shard count stays global");
        assert_eq!(j.share_of(), share);
        assert_eq!(j.progress(), Progress::Shards { total: 10 });
    }

    #[test]
    fn a_malformed_completion_record_counts_as_nothing_completed() {
        let s = PinterestJobSetStatus {
            completed_shards: Some("9-2".into()),
            shards_succeeded: 3,
            ..Default::default()
        };
        let c = jobset().slice_counts(&s);
        assert_eq!(c.completed_shards.as_deref(), Some(""));
        let huge = PinterestJobSetStatus {
            completed_shards: Some("0-4294967294".into()),
            ..Default::default()
        };
        assert_eq!(
            jobset().slice_counts(&huge).completed_shards.as_deref(),
            Some(""),
            "a member reporting shards the job set does not have"
        );
        let fine = PinterestJobSetStatus {
            completed_shards: Some("0-3,7".into()),
            ..Default::default()
        };
        assert_eq!(
            jobset().slice_counts(&fine).completed_shards.as_deref(),
            Some("0-3,7")
        );
        assert_eq!(c.shards_succeeded, Some(3));
        assert_eq!(c.replicas, None);
    }

    #[test]
    fn each_kind_names_its_totals() {
        let t = Totals {
            replicas: 5,
            available_replicas: 4,
            ..Default::default()
        };
        let names = |f: Vec<(&'static str, serde_json::Value)>| {
            f.into_iter().map(|(k, _)| k).collect::<Vec<_>>()
        };
        assert_eq!(
            names(PinterestService::totals_fields(&t)),
            ["replicas", "readyReplicas", "availableReplicas"]
        );
        assert_eq!(
            names(PinterestDaemon::totals_fields(&t)),
            ["desired", "ready", "available"]
        );
        assert_eq!(
            names(PinterestCronJob::totals_fields(&t)),
            ["active", "lastScheduleTime", "lastSuccessfulTime"]
        );
        // A time no member reported yet is null (the hub leaves it out of status).
        assert!(PinterestCronJob::totals_fields(&t)[1].1.is_null());
        assert_eq!(PinterestDaemon::totals_fields(&t)[0].1, 5);
    }
}

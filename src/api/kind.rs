//! One home per kind: what each Pinterest kind is in every layer. Its spec and status
//! types, the native kinds its expansion generates (and the agent watches), its expansion
//! entry and validation, its totals and conditions, its progress and its share of a
//! placement. The agent writes a slice's status in these terms, the hub reads a slice's
//! counts and progress through them and writes its totals back. Pure.
//!
//! Code elsewhere never matches on kind variants (`tests/architecture.rs` counts them):
//! it is generic over [`PinterestKind`], or dispatches a [`WorkloadRef`] with
//! [`on_workload!`](crate::on_workload) or a [`WorkloadKind`] with [`with_kind!`]. Adding
//! a kind means its types, its impl here, its builder in `expand/` and its `observe` in
//! the agent, plus one line in each dispatch macro.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::common::{Condition, MemberWorkloadStatus, PlacementDecision};
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
    /// Pods (daemons: nodes) running the slice's current template.
    pub updated_replicas: Option<i32>,
    pub shards_running: Option<i32>,
    pub shards_succeeded: Option<i32>,
    pub shards_failed: Option<i32>,
    pub completed_shards: Option<String>,
    /// Job sets: shard indices whose Job failed for good (a range list).
    pub failed_shards: Option<String>,
    /// Job sets: unfinished shard indices whose Job has no pod Ready (a range list;
    /// reported with application failover on).
    pub unready_shards: Option<String>,
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
    /// Pods (daemons: nodes) running their member's current template.
    pub updated_replicas: i32,
    pub shards_running: i32,
    pub shards_succeeded: i32,
    pub shards_failed: i32,
    pub completed_shards: RangeSet,
    /// Job sets: shards that failed for good in a member and did not complete since.
    pub failed_shards: RangeSet,
    /// Cron jobs: runs in progress in every member (a run on a member it failed over from
    /// counts until that member removes its slice).
    pub active: i32,
    /// Cron jobs: the latest schedule of any member.
    pub last_schedule_time: Option<Time>,
    /// Cron jobs: the latest success of any member.
    pub last_successful_time: Option<Time>,
}

/// The part of every kind's hub status that is not the kind's totals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HubPart {
    pub observed_generation: Option<i64>,
    pub conditions: Vec<Condition>,
    pub placement: Option<PlacementDecision>,
    pub clusters: Vec<MemberWorkloadStatus>,
    pub rollout: Option<super::rollout::RolloutStatus>,
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
    /// Shards a job set's slice held before and let go of (a range list): its agent may
    /// still report one finished (its Job completed as the move began), and that report
    /// counts ([`crate::api::jobset::ANNOTATION_RELEASED_SHARDS`]).
    pub released: Option<String>,
}

/// A native kind a Pinterest kind's expansion generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NativeKind {
    ConfigMap,
    PersistentVolumeClaim,
    Service,
    Deployment,
    StatefulSet,
    DaemonSet,
    Job,
    CronJob,
    Ingress,
    PodDisruptionBudget,
}

impl NativeKind {
    /// The Kubernetes kind, e.g. `Deployment`.
    pub fn as_str(self) -> &'static str {
        match self {
            NativeKind::ConfigMap => "ConfigMap",
            NativeKind::PersistentVolumeClaim => "PersistentVolumeClaim",
            NativeKind::Service => "Service",
            NativeKind::Deployment => "Deployment",
            NativeKind::StatefulSet => "StatefulSet",
            NativeKind::DaemonSet => "DaemonSet",
            NativeKind::Job => "Job",
            NativeKind::CronJob => "CronJob",
            NativeKind::Ingress => "Ingress",
            NativeKind::PodDisruptionBudget => "PodDisruptionBudget",
        }
    }
}

/// How a workload is counted when it is placed: what can be divided among members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sizing {
    /// Replicas that can be divided (services, stateful sets).
    Replicas(u32),
    /// Indexed shards, each run once (job sets): `completed` ones are not placed again.
    Shards {
        total: u32,
        completed: RangeSet,
        parallelism: Option<u32>,
    },
    /// A gang: each role's replicas, all in one member (training jobs).
    Gang(Vec<(String, u32)>),
    /// The whole workload goes to each member it is placed on (cron jobs, daemons).
    Whole,
}

/// A Pinterest workload kind: its types, what it generates, and its status vocabulary.
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
    /// Native kinds the expansion generates. The agent watches each one it owns: a
    /// change or deletion of a generated object brings its slice back.
    const GENERATES: &'static [NativeKind];
    /// The native kind whose status says how the workload runs (read by the agent).
    const RUNS_AS: NativeKind;
    /// The kind's own checks of its spec (shared checks are `validate::workload`'s).
    fn validate(&self) -> Result<(), super::validate::Invalid>;
    /// The kind's builder: its native objects into `out`, in apply order.
    fn expand(
        &self,
        ctx: &crate::expand::Ctx<'_>,
        out: &mut crate::expand::Out,
    ) -> Result<(), crate::expand::BuildError>;
    /// How the workload is counted when it is placed.
    fn sizing(&self) -> Sizing {
        Sizing::Whole
    }
    /// The ingress host it claims (services only).
    fn ingress_host(&self) -> Option<&str> {
        None
    }
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
    /// Writes the kind's totals into its status (a total no member reported yet, such
    /// as a cron job's first schedule, stays unset).
    fn set_totals(_s: &mut Self::Status, _t: &Totals) {}
    /// The totals a status holds (what [`Self::set_totals`] wrote), e.g. the completed
    /// shards recorded before.
    fn totals(_s: &Self::Status) -> Totals {
        Totals::default()
    }
    /// The hub's part of a status: placement, per-member entries, conditions.
    fn hub_part(s: &Self::Status) -> HubPart;
    /// A status holding `part` and `totals` and nothing else: what the hub writes.
    fn hub_status(part: HubPart, totals: &Totals) -> Self::Status;
}

impl<'a> WorkloadRef<'a> {
    /// The kind's own checks of its spec ([`PinterestKind::validate`]).
    pub fn validate_kind(self) -> Result<(), super::validate::Invalid> {
        crate::on_workload!(self, w => PinterestKind::validate(w))
    }

    /// How the workload is counted when it is placed ([`PinterestKind::sizing`]).
    pub fn sizing(self) -> Sizing {
        crate::on_workload!(self, w => PinterestKind::sizing(w))
    }

    /// The ingress host it claims ([`PinterestKind::ingress_host`]).
    pub fn ingress_host(self) -> Option<&'a str> {
        crate::on_workload!(self, w => PinterestKind::ingress_host(w))
    }

    /// Runs the kind's builder ([`PinterestKind::expand`]).
    pub fn build(
        self,
        ctx: &crate::expand::Ctx<'_>,
        out: &mut crate::expand::Out,
    ) -> Result<(), crate::expand::BuildError> {
        crate::on_workload!(self, w => PinterestKind::expand(w, ctx, out))
    }

    /// The job set, for its shard bookkeeping (the one kind that runs indexed shards;
    /// [`WorkloadKind::runs_shards`](super::workload::WorkloadKind::runs_shards)).
    pub fn job_set(self) -> Option<&'a PinterestJobSet> {
        match self {
            WorkloadRef::JobSet(j) => Some(j),
            _ => None,
        }
    }

    /// Native kinds its expansion generates ([`PinterestKind::GENERATES`]).
    pub fn generates(self) -> &'static [NativeKind] {
        fn of<K: PinterestKind>(_: &K) -> &'static [NativeKind] {
            K::GENERATES
        }
        crate::on_workload!(self, w => of(w))
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
    ($status:ident, $variant:ident) => {
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
        fn hub_part(s: &$status) -> HubPart {
            HubPart {
                observed_generation: s.observed_generation,
                conditions: s.conditions.clone(),
                placement: s.placement.clone(),
                clusters: s.clusters.clone(),
                rollout: s.rollout.clone(),
            }
        }
        fn hub_status(part: HubPart, totals: &Totals) -> $status {
            let mut s = $status {
                observed_generation: part.observed_generation,
                conditions: part.conditions,
                placement: part.placement,
                clusters: part.clusters,
                rollout: part.rollout,
                ..Default::default()
            };
            Self::set_totals(&mut s, totals);
            s
        }
    };
}

/// What a kind generates, how it runs, and its validation and builder.
macro_rules! parts {
    (generates [$($n:ident),*], runs as $r:ident, validated by $v:path, built by $e:path) => {
        const GENERATES: &'static [NativeKind] = &[$(NativeKind::$n),*];
        const RUNS_AS: NativeKind = NativeKind::$r;
        fn validate(&self) -> Result<(), super::validate::Invalid> {
            $v(self)
        }
        fn expand(
            &self,
            ctx: &crate::expand::Ctx<'_>,
            out: &mut crate::expand::Out,
        ) -> Result<(), crate::expand::BuildError> {
            $e(ctx, self, out)
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
        fn sizing(&self) -> Sizing {
            Sizing::Replicas(u32::try_from(self.spec.replicas).unwrap_or(0))
        }
        fn slice_counts(&self, s: &Self::Status) -> SliceCounts {
            SliceCounts {
                replicas: Some(s.replicas),
                ready_replicas: Some(s.ready_replicas),
                available_replicas: Some(s.available_replicas),
                updated_replicas: Some(s.updated_replicas),
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
        fn set_totals(s: &mut Self::Status, t: &Totals) {
            s.replicas = t.replicas;
            s.ready_replicas = t.ready_replicas;
            s.available_replicas = t.available_replicas;
            s.updated_replicas = t.updated_replicas;
        }
        fn totals(s: &Self::Status) -> Totals {
            Totals {
                replicas: s.replicas,
                ready_replicas: s.ready_replicas,
                available_replicas: s.available_replicas,
                updated_replicas: s.updated_replicas,
                ..Default::default()
            }
        }
    };
}

impl PinterestKind for PinterestService {
    common!(PinterestServiceStatus, Service);
    replicated!();
    parts!(
        generates [ConfigMap, Service, Deployment, Ingress, PodDisruptionBudget],
        runs as Deployment,
        validated by super::validate::service,
        built by crate::expand::service::expand
    );
    fn ingress_host(&self) -> Option<&str> {
        self.spec.ingress.as_ref()?.host.as_deref()
    }
}

impl PinterestKind for PinterestStatefulSet {
    common!(PinterestStatefulSetStatus, StatefulSet);
    replicated!();
    parts!(
        generates [Service, StatefulSet, PodDisruptionBudget],
        runs as StatefulSet,
        validated by super::validate::statefulset,
        built by crate::expand::statefulset::expand
    );
}

impl PinterestKind for PinterestDaemon {
    common!(PinterestDaemonStatus, Daemon);
    parts!(
        generates [DaemonSet],
        runs as DaemonSet,
        validated by super::validate::daemon,
        built by crate::expand::daemon::expand
    );
    /// A daemon's size is its members' nodes: Ready when every slice is.
    fn progress(&self) -> Progress {
        Progress::Replicas { desired: 0 }
    }
    fn slice_counts(&self, s: &PinterestDaemonStatus) -> SliceCounts {
        SliceCounts {
            replicas: Some(s.desired),
            ready_replicas: Some(s.ready),
            available_replicas: Some(s.available),
            updated_replicas: Some(s.updated),
            ..Default::default()
        }
    }
    fn set_totals(s: &mut PinterestDaemonStatus, t: &Totals) {
        s.desired = t.replicas;
        s.ready = t.ready_replicas;
        s.available = t.available_replicas;
        s.updated = t.updated_replicas;
    }
    fn totals(s: &PinterestDaemonStatus) -> Totals {
        Totals {
            replicas: s.desired,
            ready_replicas: s.ready,
            available_replicas: s.available,
            updated_replicas: s.updated,
            ..Default::default()
        }
    }
}

impl PinterestKind for PinterestJobSet {
    common!(PinterestJobSetStatus, JobSet);
    parts!(
        generates [ConfigMap, PersistentVolumeClaim, Job],
        runs as Job,
        validated by super::validate::jobset,
        built by crate::expand::jobset::expand
    );
    fn sizing(&self) -> Sizing {
        let total = u32::try_from(self.spec.shards).unwrap_or(0);
        // Bounded by the shard count: a recorded range is never expanded past it.
        let completed = self
            .status
            .as_ref()
            .and_then(|s| s.completed_shards.as_deref())
            .and_then(|r| RangeSet::parse_within(r, total).ok())
            .unwrap_or_default();
        Sizing::Shards {
            total,
            completed,
            parallelism: self.spec.parallelism.and_then(|p| u32::try_from(p).ok()),
        }
    }
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
            failed_shards: s.failed_shards.as_deref().map(|r| {
                RangeSet::parse_within(r, total)
                    .map(|r| r.to_string())
                    .unwrap_or_default()
            }),
            unready_shards: s.unready_shards.as_deref().map(|r| {
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
        let annotations = self.metadata.annotations.get_or_insert_default();
        match share.released.as_deref().filter(|r| !r.is_empty()) {
            Some(r) => {
                annotations.insert(super::jobset::ANNOTATION_RELEASED_SHARDS.into(), r.into());
            }
            None => {
                annotations.remove(super::jobset::ANNOTATION_RELEASED_SHARDS);
            }
        }
    }
    fn share_of(&self) -> SliceShare {
        SliceShare {
            shards: self.spec.assigned_shards.clone(),
            parallelism: Some(self.spec.parallelism),
            released: self
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(super::jobset::ANNOTATION_RELEASED_SHARDS))
                .cloned(),
            ..Default::default()
        }
    }
    fn set_totals(s: &mut PinterestJobSetStatus, t: &Totals) {
        s.shards_running = t.shards_running;
        s.shards_succeeded = t.shards_succeeded;
        s.shards_failed = t.shards_failed;
        s.completed_shards = Some(t.completed_shards.to_string());
        s.failed_shards = (!t.failed_shards.is_empty()).then(|| t.failed_shards.to_string());
    }
    /// (Completed shards as recorded, bounded by the job set's shards: a malformed
    /// record is none.)
    fn totals(s: &PinterestJobSetStatus) -> Totals {
        Totals {
            shards_running: s.shards_running,
            shards_succeeded: s.shards_succeeded,
            shards_failed: s.shards_failed,
            completed_shards: RangeSet::recorded(s.completed_shards.as_deref()),
            failed_shards: RangeSet::recorded(s.failed_shards.as_deref()),
            ..Default::default()
        }
    }
}

impl PinterestKind for PinterestCronJob {
    common!(PinterestCronJobStatus, CronJob);
    parts!(
        generates [CronJob],
        runs as CronJob,
        validated by super::validate::cronjob,
        built by crate::expand::cronjob::expand
    );
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
    fn set_totals(s: &mut PinterestCronJobStatus, t: &Totals) {
        s.active = t.active;
        s.last_schedule_time = t.last_schedule_time.clone();
        s.last_successful_time = t.last_successful_time.clone();
    }
    fn totals(s: &PinterestCronJobStatus) -> Totals {
        Totals {
            active: s.active,
            last_schedule_time: s.last_schedule_time.clone(),
            last_successful_time: s.last_successful_time.clone(),
            ..Default::default()
        }
    }
}

impl PinterestKind for PinterestTrainingJob {
    common!(PinterestTrainingJobStatus, TrainingJob);
    parts!(
        generates [ConfigMap, Service, Job],
        runs as Job,
        validated by super::validate::training_job,
        built by crate::expand::training::expand
    );
    fn sizing(&self) -> Sizing {
        Sizing::Gang(
            self.spec
                .replica_specs
                .iter()
                .map(|(role, spec)| (role.clone(), u32::try_from(spec.replicas).unwrap_or(0)))
                .collect(),
        )
    }
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
        // The shards it let go of ride on an annotation, gone once there are none.
        let released = SliceShare {
            released: Some("0-1".into()),
            ..share.clone()
        };
        j.assign_share(&released);
        assert_eq!(j.share_of(), released);
        j.assign_share(&share);
        assert_eq!(j.share_of(), share);
        assert!(
            !j.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(super::super::jobset::ANNOTATION_RELEASED_SHARDS))
        );
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
    fn each_kind_keeps_its_totals_in_its_own_fields() {
        let t = Totals {
            replicas: 5,
            available_replicas: 4,
            updated_replicas: 3,
            shards_succeeded: 2,
            completed_shards: RangeSet::parse("0-1").unwrap(),
            active: 1,
            ..Default::default()
        };
        let svc = PinterestService::hub_status(HubPart::default(), &t);
        assert_eq!(
            (svc.replicas, svc.available_replicas, svc.updated_replicas),
            (5, 4, 3)
        );
        let d = PinterestDaemon::hub_status(HubPart::default(), &t);
        assert_eq!((d.desired, d.available, d.updated), (5, 4, 3));
        let j = PinterestJobSet::hub_status(HubPart::default(), &t);
        assert_eq!(j.completed_shards.as_deref(), Some("0-1"));
        // A time no member reported yet stays out of the written status.
        let c = PinterestCronJob::hub_status(HubPart::default(), &t);
        let c = serde_json::to_value(&c).unwrap();
        assert_eq!(c["active"], 1);
        assert!(c.get("lastScheduleTime").is_none());
        // What is written reads back.
        for (written, read) in [
            (PinterestService::totals(&svc).replicas, 5),
            (PinterestDaemon::totals(&d).updated_replicas, 3),
            (
                i32::try_from(PinterestJobSet::totals(&j).completed_shards.len()).unwrap(),
                2,
            ),
        ] {
            assert_eq!(written, read);
        }
    }
}

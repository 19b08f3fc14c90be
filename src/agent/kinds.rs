//! What differs per kind in the agent: how its status is read from the native objects.
//! Everything here is pure.

use std::collections::BTreeMap;
use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::status::{self, Health, Observed, ShardAccount};
use crate::api::common::Condition;
use crate::api::cronjob::{PinterestCronJob, PinterestCronJobStatus};
use crate::api::daemon::{PinterestDaemon, PinterestDaemonStatus};
use crate::api::jobset::{PinterestJobSet, PinterestJobSetStatus};
use crate::api::ranges::RangeSet;
use crate::api::service::{PinterestService, PinterestServiceStatus};
use crate::api::statefulset::{PinterestStatefulSet, PinterestStatefulSetStatus};
use crate::api::training::{PinterestTrainingJob, PinterestTrainingJobStatus, ReplicaStatus};
use crate::api::workload::{Workload, WorkloadRef};

/// A Pinterest kind the agent reconciles.
pub trait AgentKind:
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
    type Status: Serialize + Default + Clone + PartialEq + Debug + Send + Sync;
    fn status(&self) -> Option<&Self::Status>;
    fn status_mut(&mut self) -> &mut Option<Self::Status>;
    fn as_workload(&self) -> WorkloadRef<'_>;
    fn conditions(s: &mut Self::Status) -> &mut Vec<Condition>;
    fn set_meta(s: &mut Self::Status, generation: Option<i64>, runtime_version: &str);
    /// Counts and health from the observed objects, written into `s`.
    fn observe(&self, observed: &Observed, s: &mut Self::Status) -> Health;
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
        fn set_meta(s: &mut $status, generation: Option<i64>, runtime_version: &str) {
            s.observed_generation = generation;
            s.runtime_version = Some(runtime_version.to_string());
        }
    };
}

impl AgentKind for PinterestService {
    common!(PinterestServiceStatus, Service);
    fn observe(&self, o: &Observed, s: &mut PinterestServiceStatus) -> Health {
        let (c, problem) = status::deployment_counts(&o.deployments);
        s.replicas = c.replicas;
        s.ready_replicas = c.ready;
        s.available_replicas = c.available;
        s.updated_replicas = c.updated;
        status::replica_health(self.spec.replicas, c, !o.deployments.is_empty(), problem)
    }
}

impl AgentKind for PinterestStatefulSet {
    common!(PinterestStatefulSetStatus, StatefulSet);
    fn observe(&self, o: &Observed, s: &mut PinterestStatefulSetStatus) -> Health {
        let c = status::statefulset_counts(&o.statefulsets);
        s.replicas = c.replicas;
        s.ready_replicas = c.ready;
        s.available_replicas = c.available;
        s.updated_replicas = c.updated;
        status::replica_health(self.spec.replicas, c, !o.statefulsets.is_empty(), None)
    }
}

impl AgentKind for PinterestDaemon {
    common!(PinterestDaemonStatus, Daemon);
    fn observe(&self, o: &Observed, s: &mut PinterestDaemonStatus) -> Health {
        let c = status::daemonset_counts(&o.daemonsets);
        s.desired = c.replicas;
        s.ready = c.ready;
        s.available = c.available;
        s.updated = c.updated;
        let mut h = status::replica_health(c.replicas, c, !o.daemonsets.is_empty(), None);
        h.message = format!("{}/{} ready", c.ready, c.replicas);
        h
    }
}

impl AgentKind for PinterestCronJob {
    common!(PinterestCronJobStatus, CronJob);
    fn observe(&self, o: &Observed, s: &mut PinterestCronJobStatus) -> Health {
        let cj = o
            .cronjobs
            .first()
            .and_then(|c| c.status.clone())
            .unwrap_or_default();
        s.active = cj.active.map(|a| a.len() as i32).unwrap_or(0);
        if cj.last_schedule_time.is_some() {
            s.last_schedule_time = cj.last_schedule_time;
        }
        if cj.last_successful_time.is_some() {
            s.last_successful_time = cj.last_successful_time;
        }
        let exists = !o.cronjobs.is_empty();
        Health {
            ready: exists,
            progressing: !exists,
            message: if exists {
                "scheduled".into()
            } else {
                "CronJob not created yet".into()
            },
            ..Default::default()
        }
    }
}

impl AgentKind for PinterestJobSet {
    common!(PinterestJobSetStatus, JobSet);
    fn observe(&self, o: &Observed, s: &mut PinterestJobSetStatus) -> Health {
        let account = shard_account(self, o);
        let assigned = assigned_shards(self);
        s.completed_shards = Some(account.completed.to_string());
        s.failed_shards = (!account.failed.is_empty()).then(|| account.failed.to_string());
        s.shards_running = account.running.len() as i32;
        s.shards_succeeded = account.completed.intersection(&assigned).len() as i32;
        s.shards_failed = account.failed.len() as i32;
        let done = assigned.difference(&account.completed).is_empty();
        let failed =
            (!account.failed.is_empty()).then(|| format!("shards {} failed", account.failed));
        Health {
            ready: failed.is_none(),
            progressing: !done && failed.is_none(),
            degraded: failed.clone(),
            complete: Some(done),
            failed,
            message: format!("{}/{} shards completed", s.shards_succeeded, assigned.len()),
        }
    }
}

/// Shards this slice runs (`assignedShards`, or all).
pub fn assigned_shards(j: &PinterestJobSet) -> RangeSet {
    let total = u32::try_from(j.spec.shards).unwrap_or(0);
    match j.spec.assigned_shards.as_deref() {
        Some(r) => RangeSet::parse_within(r, total).unwrap_or_default(),
        None => RangeSet::full(total),
    }
}

/// The completion record folded with the observed Jobs.
pub fn shard_account(j: &PinterestJobSet, o: &Observed) -> ShardAccount {
    let parse = |r: Option<&String>| r.and_then(|r| RangeSet::parse(r).ok()).unwrap_or_default();
    let s = j.status.as_ref();
    status::account_shards(
        &o.jobs,
        &parse(s.and_then(|s| s.completed_shards.as_ref())),
        &parse(s.and_then(|s| s.failed_shards.as_ref())),
    )
}

impl AgentKind for PinterestTrainingJob {
    common!(PinterestTrainingJobStatus, TrainingJob);
    fn observe(&self, o: &Observed, s: &mut PinterestTrainingJobStatus) -> Health {
        let roles = status::training_roles(&o.jobs);
        let mut statuses = BTreeMap::new();
        let mut want = 0;
        let mut succeeded = 0;
        let mut failed = 0;
        for (role, spec) in &self.spec.replica_specs {
            want += spec.replicas.max(0);
            let (a, ok, bad) = roles.get(&role.to_lowercase()).copied().unwrap_or_default();
            succeeded += ok;
            failed += bad;
            statuses.insert(
                role.clone(),
                ReplicaStatus {
                    active: a,
                    succeeded: ok,
                    failed: bad,
                },
            );
        }
        s.replica_statuses = statuses;
        let done = want > 0 && succeeded >= want;
        let failed = (failed > 0).then(|| format!("{failed} replica(s) failed"));
        Health {
            ready: failed.is_none(),
            progressing: !done && failed.is_none(),
            degraded: failed.clone(),
            complete: Some(done),
            failed,
            message: format!("{succeeded}/{want} replicas succeeded"),
        }
    }
}

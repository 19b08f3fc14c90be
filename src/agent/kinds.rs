//! What differs per kind in the agent: how its status is read from the native objects
//! (the status vocabulary itself is the kind's, in [`crate::api::kind`]).
//! Everything here is pure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::status::{self, Health, Observed, ShardAccount};
use crate::api::common::LABEL_SHARD;
use crate::api::cronjob::{PinterestCronJob, PinterestCronJobStatus};
use crate::api::daemon::{PinterestDaemon, PinterestDaemonStatus};
use crate::api::jobset::{PinterestJobSet, PinterestJobSetStatus};
use crate::api::kind::PinterestKind;
use crate::api::ranges::RangeSet;
use crate::api::service::{PinterestService, PinterestServiceStatus};
use crate::api::statefulset::{PinterestStatefulSet, PinterestStatefulSetStatus};
use crate::api::training::{PinterestTrainingJob, PinterestTrainingJobStatus, ReplicaStatus};

/// A Pinterest kind the agent reconciles: its status vocabulary ([`PinterestKind`]) and
/// how that status is read from the native objects.
pub trait AgentKind: PinterestKind {
    /// Counts and health from the observed objects, written into `s`.
    fn observe(&self, observed: &Observed, s: &mut Self::Status) -> Health;
}

impl AgentKind for PinterestService {
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
    fn observe(&self, o: &Observed, s: &mut PinterestJobSetStatus) -> Health {
        let account = shard_account(self, o);
        let assigned = assigned_shards(self);
        s.completed_shards = Some(account.completed.to_string());
        s.failed_shards = (!account.failed.is_empty()).then(|| account.failed.to_string());
        s.shards_running = account.running.len() as i32;
        // Only application failover reads it: without, a shard's start is no status write.
        let watched = self
            .spec
            .placement
            .failover
            .as_ref()
            .is_some_and(|f| f.application.is_some());
        let unready = account.unready.intersection(&assigned);
        s.unready_shards = (watched && !unready.is_empty()).then(|| unready.to_string());
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
    let s = j.status.as_ref();
    status::account_shards(
        &o.jobs,
        &RangeSet::recorded(s.and_then(|s| s.completed_shards.as_deref())),
        &RangeSet::recorded(s.and_then(|s| s.failed_shards.as_deref())),
    )
}

/// The shard index a generated object is labelled with.
fn shard_of(meta: &ObjectMeta) -> Option<u32> {
    meta.labels.as_ref()?.get(LABEL_SHARD)?.parse().ok()
}

/// Generated objects of shards this cluster has completed that pruning leaves alone, as
/// (kind, name) — even when the hub no longer assigns the shard here (it stops assigning
/// completed shards, and never runs them again anywhere):
///
/// - the shard's **Job**, finished: kept (never updated nor recreated) so Kubernetes'
///   TTL-after-finished controller removes it per `ttlSecondsAfterFinished`, and until
///   then its pods, logs and status can be read;
/// - its **ConfigMaps**, while that Job is still there (the finished pods refer to them);
///   pruned once the Job is gone;
/// - its **PVCs**, until the JobSet is deleted (owner references): they may hold the
///   shard's output.
pub fn completed_shard_objects(
    j: &PinterestJobSet,
    completed: &RangeSet,
    jobs: &[Job],
    claims: &[ObjectMeta],
) -> BTreeSet<(String, String)> {
    let mut keep = BTreeSet::new();
    let name = j.metadata.name.as_deref().unwrap_or_default();
    for job in jobs {
        let Some(shard) = shard_of(&job.metadata).filter(|s| completed.contains(*s)) else {
            continue;
        };
        if job.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Some(n) = &job.metadata.name {
            keep.insert(("Job".to_string(), n.clone()));
        }
        for t in &j.spec.config_templates {
            keep.insert((
                "ConfigMap".to_string(),
                crate::expand::jobset::config_map_name(name, shard, &t.name),
            ));
        }
    }
    for pvc in claims {
        if let (Some(n), Some(_)) = (&pvc.name, shard_of(pvc).filter(|s| completed.contains(*s))) {
            keep.insert(("PersistentVolumeClaim".to_string(), n.clone()));
        }
    }
    keep
}

impl AgentKind for PinterestTrainingJob {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn jobset() -> PinterestJobSet {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestJobSet",
            "metadata": {"name": "emb", "namespace": "ml"},
            "spec": {"owner": {"team": "ml", "contact": "ml@x"}, "shards": 6,
                     "configTemplates": [{"name": "cfg", "data": {"a": "{{shard}}"}}],
                     "volumeClaimTemplates": [{"metadata": {"name": "scratch"},
                         "spec": {"accessModes": ["ReadWriteOnce"]}}],
                     "template": {"spec": {"containers": [{"name": "w", "image": "w:1"}]}}}
        }))
        .unwrap()
    }

    fn meta(name: &str, shard: u32, deleting: bool) -> serde_json::Value {
        let mut m = serde_json::json!({"name": name, "labels": {LABEL_SHARD: shard.to_string()}});
        if deleting {
            m["deletionTimestamp"] = "2025-01-01T00:00:00Z".into();
        }
        m
    }

    fn job(name: &str, shard: u32, deleting: bool) -> Job {
        serde_json::from_value(serde_json::json!({"metadata": meta(name, shard, deleting)}))
            .unwrap()
    }

    #[test]
    fn completed_shards_keep_their_job_and_claims_and_configs_follow_the_job() {
        let j = jobset();
        let completed = RangeSet::parse("0-2").unwrap();
        let jobs = [
            job("emb-0", 0, false), // completed, Job still there (TTL pending)
            job("emb-1", 1, true),  // completed, Job being deleted (TTL fired)
            job("emb-4", 4, false), // running: not this function's business
        ];
        let claims: Vec<ObjectMeta> = [
            (0, "scratch-emb-0"),
            (2, "scratch-emb-2"),
            (5, "scratch-emb-5"),
        ]
        .iter()
        .map(|(s, n)| serde_json::from_value(meta(n, *s, false)).unwrap())
        .collect();
        let keep = completed_shard_objects(&j, &completed, &jobs, &claims);
        let want: BTreeSet<(String, String)> = [
            ("Job", "emb-0"),
            ("ConfigMap", "emb-0-cfg"),
            ("PersistentVolumeClaim", "scratch-emb-0"),
            ("PersistentVolumeClaim", "scratch-emb-2"),
        ]
        .iter()
        .map(|(k, n)| (k.to_string(), n.to_string()))
        .collect();
        assert_eq!(keep, want);
        // The names are the ones the engine generates.
        assert_eq!(
            crate::expand::jobset::config_map_name("emb", 0, "cfg"),
            "emb-0-cfg"
        );
        assert_eq!(
            crate::expand::jobset::claim_name("emb", "scratch", 2),
            "scratch-emb-2"
        );
        assert_eq!(crate::expand::jobset::job_name("emb", 0), "emb-0");
    }
}

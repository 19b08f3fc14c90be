//! Roll-out stage: the slices of every reachable member are read (from the member
//! watches' summaries; asked directly while a watch has not listed) and moved toward the
//! decision — grown first, shrunk and removed once the new shares are available, job
//! sets, cron and training jobs fenced at once — with the ConfigMaps and Secrets the pod
//! template references propagated. Then the observations aggregation reads.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::events::EventType;
use kube::{Client, ResourceExt};

use super::decide::Placed;
use super::health::Standings;
use super::{HubContext, HubError, workload_key};
use crate::api::kind::{PinterestKind, SliceShare};
use crate::api::ranges::RangeSet;
use crate::api::workload::{WorkloadKind, WorkloadRef};
use crate::controller::apply::{HUB_FIELD_MANAGER, apply_json};
use crate::hub::slices::{self, SliceSummary};
use crate::placement::failover::{self, Share, SliceSeen, SliceStep, TransitionInput};
use crate::status::MemberObservation;

/// The workload's slice in each member it has one in.
pub type Slices = BTreeMap<String, Arc<SliceSummary>>;

pub fn slice_api<K: PinterestKind>(client: &Client, ns: &str) -> Api<K> {
    Api::namespaced(client.clone(), ns)
}

/// The slices of every reachable member, from the hub's watch of them (a write of ours
/// not seen there yet is written again, which changes nothing); asked directly, all at
/// once, while a watch has not listed yet.
pub async fn read_slices<K: PinterestKind>(
    ctx: &HubContext,
    obj: &K,
    standings: &Standings,
) -> Result<Slices, HubError> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let reads = ctx
        .registry
        .all()
        .into_iter()
        .filter(|m| standings.reachable.contains(&m.name))
        .map(|m| {
            let (ns, name) = (&ns, &name);
            async move {
                let got = match m.cached_slice(K::KIND, ns, name) {
                    Ok(cached) => Ok(cached),
                    Err(_) => dynamic_api(&m.client, K::KIND, ns)
                        .get_opt(name)
                        .await
                        .map(|o| o.map(|o| Arc::new(slices::summarize_dynamic(K::KIND, &o)))),
                };
                (m.name.clone(), got)
            }
        });
    let mut found = Slices::new();
    for (cluster, got) in futures::future::join_all(reads).await {
        match got {
            Ok(Some(s)) => {
                found.insert(cluster, s);
            }
            Ok(None) => {}
            Err(source) => return Err(HubError::ReadSlice { cluster, source }),
        }
    }
    Ok(found)
}

fn dynamic_api(client: &Client, kind: WorkloadKind, ns: &str) -> Api<DynamicObject> {
    let ar = crate::api::kind::with_kind!(kind, K => ApiResource::erase::<K>(&()));
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Moves the slices toward the decision, every member at once (each step touches only its
/// own member). Slices written are put into `slices` as stored, so the status aggregated
/// next says what was just written rather than "slice not observed yet".
pub async fn roll_out<K: PinterestKind>(
    ctx: &HubContext,
    obj: &K,
    placed: &Placed,
    standings: &Standings,
    slices: &mut Slices,
) -> Result<(), HubError> {
    let seen: BTreeMap<String, SliceSeen> = slices
        .iter()
        .map(|(c, s)| {
            let counts = &s.report.counts;
            let seen = SliceSeen {
                replicas: s.share.replicas.unwrap_or(0),
                available: u32::try_from(counts.available_replicas.unwrap_or(0).max(0))
                    .unwrap_or(0),
                ready: matches!(s.report.state, "Ready" | "Complete"),
            };
            (c.clone(), seen)
        })
        .collect();
    let target = Share::of(&placed.decision);
    let steps = failover::transition(&TransitionInput {
        target: &target,
        seen: &seen,
        reachable: &standings.reachable,
        settling: &standings.settling,
        run_to_completion: K::KIND.runs_to_completion(),
    });
    let parallelism = job_set_parallelism(obj.as_workload(), &placed.decision);
    let pod_spec = pod_spec_of(obj);
    let found: &Slices = slices;
    let writes = steps.iter().map(|(cluster, step)| {
        let parallelism = parallelism.get(cluster).copied();
        let pod_spec = pod_spec.as_ref();
        async move {
            let Some(member) = ctx.registry.get(cluster) else {
                return Ok(None);
            };
            let target = Target {
                ctx,
                client: &member.client,
                cluster,
            };
            match step {
                SliceStep::Keep => Ok(None),
                SliceStep::Delete => target.remove(obj).await.map(|()| None),
                SliceStep::Apply(share) => {
                    let share = SliceShare {
                        replicas: match share {
                            Share::Replicas(n) => Some(*n),
                            _ => None,
                        },
                        shards: match share {
                            Share::Shards(s) => Some(s.clone()),
                            _ => None,
                        },
                        parallelism,
                    };
                    target
                        .apply(obj, &share, found.get(cluster.as_str()), pod_spec)
                        .await
                }
            }
        }
    });
    let results = futures::future::join_all(writes).await;
    for r in results {
        if let Some((cluster, stored)) = r? {
            slices.insert(cluster, stored);
        }
    }
    Ok(())
}

/// Each job-set slice's part of the global parallelism, by cluster.
fn job_set_parallelism(
    w: WorkloadRef<'_>,
    decision: &crate::placement::Decision,
) -> BTreeMap<String, Option<i32>> {
    let WorkloadRef::JobSet(j) = w else {
        return BTreeMap::new();
    };
    let shard_counts: Vec<(String, u64)> = decision
        .placements
        .iter()
        .map(|p| {
            let n = p
                .shards
                .as_deref()
                .and_then(|s| RangeSet::parse(s).ok())
                .map(|s| s.len())
                .unwrap_or(0);
            (p.cluster.clone(), n)
        })
        .collect();
    slices::divide_parallelism(j.spec.parallelism, &shard_counts)
        .into_iter()
        .collect()
}

/// The pod template's spec (`spec.template.spec`), for the config it references.
fn pod_spec_of<K: PinterestKind>(obj: &K) -> Option<PodSpec> {
    let v = serde_json::to_value(obj).ok()?;
    serde_json::from_value(v.pointer("/spec/template/spec")?.clone()).ok()
}

/// One member a roll-out step writes to.
struct Target<'a> {
    ctx: &'a HubContext,
    client: &'a Client,
    cluster: &'a str,
}

impl Target<'_> {
    fn member_error(&self, source: kube::Error) -> HubError {
        HubError::WriteSlice {
            cluster: self.cluster.to_string(),
            source,
        }
    }

    /// Removes the slice of a cluster that left the placement (and a job set's Jobs).
    async fn remove<K: PinterestKind>(&self, obj: &K) -> Result<(), HubError> {
        let ns = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        tracing::info!(workload = %workload_key(obj), member = %self.cluster, "removing the slice of a cluster that left the placement");
        match slice_api::<K>(self.client, &ns)
            .delete(&name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => {
                return Err(HubError::RemoveSlice {
                    cluster: self.cluster.to_string(),
                    source,
                });
            }
        }
        if K::KIND == WorkloadKind::JobSet {
            self.fence(obj, None).await?;
        }
        Ok(())
    }

    /// Writes the slice for `share` unless the member has it as it would be written;
    /// returns the slice as stored when written.
    async fn apply<K: PinterestKind>(
        &self,
        obj: &K,
        share: &SliceShare,
        found: Option<&Arc<SliceSummary>>,
        pod_spec: Option<&PodSpec>,
    ) -> Result<Option<(String, Arc<SliceSummary>)>, HubError> {
        let ns = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        let slice = slices::build_slice(obj, share);
        // Most reconciles find the slice as they would write it: no namespace or slice
        // write then. A slice edited in the member differs and is written. (A slice found
        // means its namespace is there for the config below.)
        let current = found.is_some_and(|f| slices::slice_is_current(f, &slice));
        // A namespace this process made (or found) in the member is not applied again; a
        // slice write that finds it gone forgets it.
        let ns_key = (self.cluster.to_string(), ns.clone());
        let ns_known = self
            .ctx
            .namespaces
            .lock()
            .is_ok_and(|n| n.contains(&ns_key));
        if !current && !ns_known {
            crate::controller::apply::ensure_namespace(self.client, &ns, HUB_FIELD_MANAGER)
                .await
                .map_err(|source| HubError::Propagate {
                    cluster: self.cluster.to_string(),
                    source,
                })?;
            if let Ok(mut n) = self.ctx.namespaces.lock() {
                n.insert(ns_key.clone());
            }
        }
        if let Some(spec) = pod_spec {
            self.propagate_config(&ns, spec).await?;
        }
        let mut written = None;
        if !current {
            let stored = slice_api::<K>(self.client, &ns)
                .patch(
                    &name,
                    &PatchParams::apply(HUB_FIELD_MANAGER).force(),
                    &Patch::Apply(&slice),
                )
                .await
                .map_err(|source| {
                    if matches!(&source, kube::Error::Api(s) if s.code == 404)
                        && let Ok(mut n) = self.ctx.namespaces.lock()
                    {
                        n.remove(&ns_key);
                    }
                    self.member_error(source)
                })?;
            written = Some((
                self.cluster.to_string(),
                Arc::new(slices::summarize(&stored)),
            ));
            self.ctx
                .hub_metrics
                .slice_writes
                .get_or_create(&crate::hub::member_loop::MemberLabels {
                    member: self.cluster.to_string(),
                })
                .inc();
        }
        // Shards that left this member (it was lost meanwhile): stop their Jobs now rather
        // than when its agent catches up.
        if let (Some(s), Some(old)) = (&share.shards, found) {
            let keep = RangeSet::parse(s).unwrap_or_default();
            let had = old
                .share
                .shards
                .as_deref()
                .and_then(|r| RangeSet::parse(r).ok())
                .unwrap_or_default();
            if had.iter().any(|i| !keep.contains(i)) {
                self.fence(obj, Some(&keep)).await?;
            }
        }
        Ok(written)
    }

    /// Deletes a job set's Jobs in the member, except those of `keep` shards (all when
    /// `None`): shards that moved elsewhere while the member was unreachable must not
    /// finish here too. Any error but "not found" fails the step, so the reconcile retries
    /// until the member confirms every fenced Job is gone.
    async fn fence<K: PinterestKind>(
        &self,
        obj: &K,
        keep: Option<&RangeSet>,
    ) -> Result<(), HubError> {
        use crate::api::common::{LABEL_KIND, LABEL_SHARD, LABEL_WORKLOAD};
        let ns = obj.namespace().unwrap_or_default();
        let api: Api<Job> = Api::namespaced(self.client.clone(), &ns);
        let selector = format!(
            "{LABEL_WORKLOAD}={},{LABEL_KIND}={}",
            crate::expand::names::label_value(&obj.name_any()),
            WorkloadKind::JobSet.as_str()
        );
        let fence_error = |source| HubError::Fence {
            cluster: self.cluster.to_string(),
            source,
        };
        let jobs = api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(fence_error)?
            .items;
        let mut fenced = BTreeSet::new();
        for j in jobs {
            // A finished Job cannot run again, and it carries the completion the member's
            // agent has yet to record: deleting it would make the shard look unstarted.
            if job_finished(&j) {
                continue;
            }
            let shard = j
                .labels()
                .get(LABEL_SHARD)
                .and_then(|s| s.parse::<u32>().ok());
            if let (Some(keep), Some(i)) = (keep, shard)
                && keep.contains(i)
            {
                continue;
            }
            match api.delete(&j.name_any(), &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(fence_error(e)),
            }
            if let Some(i) = shard {
                fenced.insert(i);
            }
        }
        if !fenced.is_empty() {
            let shards = RangeSet::from_indices(fenced);
            let note = format!(
                "stopped shards {shards} in {}: they run elsewhere now",
                self.cluster
            );
            self.ctx.event(obj, EventType::Normal, "Fenced", note).await;
        }
        Ok(())
    }

    /// Copies the ConfigMaps and Secrets the pod template references (same namespace
    /// only) into the member.
    async fn propagate_config(&self, ns: &str, spec: &PodSpec) -> Result<(), HubError> {
        let (cms, secrets) = slices::referenced_config(spec);
        let hub = &self.ctx.hub;
        for name in cms {
            let got = Api::<ConfigMap>::namespaced(hub.clone(), ns)
                .get_opt(&name)
                .await
                .map_err(HubError::ReadConfig)?;
            if let Some(cm) = got {
                self.copy(serde_json::to_value(cm)?, "ConfigMap").await?;
            }
        }
        for name in secrets {
            let got = Api::<Secret>::namespaced(hub.clone(), ns)
                .get_opt(&name)
                .await
                .map_err(HubError::ReadConfig)?;
            // Never the hub's own credentials.
            if let Some(s) =
                got.filter(|s| s.type_.as_deref() != Some("kubernetes.io/service-account-token"))
            {
                self.copy(serde_json::to_value(s)?, "Secret").await?;
            }
        }
        Ok(())
    }

    async fn copy(&self, mut v: serde_json::Value, kind: &str) -> Result<(), HubError> {
        v["apiVersion"] = "v1".into();
        v["kind"] = kind.into();
        if let Some(m) = v["metadata"].as_object_mut() {
            m.retain(|k, _| matches!(k.as_str(), "name" | "namespace" | "labels" | "annotations"));
        }
        v["metadata"]["labels"]["federation.pinterest.com/propagated"] = "true".into();
        apply_json(self.client, &v, HUB_FIELD_MANAGER)
            .await
            .map_err(|source| HubError::Propagate {
                cluster: self.cluster.to_string(),
                source,
            })?;
        Ok(())
    }
}

/// Finished means the Job's Complete or Failed condition, as the agent decides: a Job
/// with failed pods that is still retrying is not finished, and is fenced.
fn job_finished(j: &Job) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        })
}

/// What the hub knows of each placed cluster for aggregation: the slice's report, or for
/// a lost member the last status the hub showed (aggregation marks it).
pub fn observations(
    decision: &crate::placement::Decision,
    standings: &Standings,
    slices: &Slices,
    stored_status: &serde_json::Value,
    now: &Time,
) -> Vec<MemberObservation> {
    decision
        .placements
        .iter()
        .map(|p| {
            let member_ready = standings.reachable.contains(&p.cluster);
            let (status, hub_gen, processed) = match slices.get(&p.cluster) {
                Some(s) => (
                    Some(slices::member_workload_status(&p.cluster, s, now)),
                    s.hub_generation,
                    s.processed(),
                ),
                None if !member_ready => {
                    let shown = stored_status["clusters"]
                        .as_array()
                        .and_then(|cs| cs.iter().find(|c| c["cluster"] == p.cluster.as_str()))
                        .cloned()
                        .and_then(|p| serde_json::from_value(p).ok());
                    (shown, None, false)
                }
                None => (None, None, false),
            };
            MemberObservation {
                cluster: p.cluster.clone(),
                member_ready,
                status,
                slice_hub_generation: hub_gen,
                slice_processed: processed,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(status: serde_json::Value) -> Job {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "j"}, "status": status}))
            .unwrap()
    }

    #[test]
    fn a_retrying_job_is_not_finished_and_a_complete_or_failed_one_is() {
        assert!(!job_finished(&job(
            serde_json::json!({"failed": 1, "active": 1})
        )));
        assert!(!job_finished(&job(serde_json::json!({"succeeded": 1}))));
        assert!(job_finished(&job(serde_json::json!({"conditions": [
            {"type": "Complete", "status": "True"}]}))));
        assert!(job_finished(&job(serde_json::json!({"conditions": [
            {"type": "Failed", "status": "True"}]}))));
        assert!(!job_finished(&job(serde_json::json!({"conditions": [
            {"type": "Failed", "status": "False"}]}))));
    }
}

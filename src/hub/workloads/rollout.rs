//! Roll-out stage: the slices of every reachable member are read (from the member
//! watches' summaries; asked directly while a watch has not listed) and moved toward the
//! decision — grown first, shrunk and removed once the new shares are available, job
//! sets, cron and training jobs fenced at once — with the ConfigMaps and Secrets the pod
//! template references propagated. Then the observations aggregation reads.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::events::EventType;

use super::decide::Placed;
use super::health::Standings;
use super::{HubContext, HubError, workload_key};
use crate::api::kind::{PinterestKind, SliceShare};
use crate::api::ranges::RangeSet;
use crate::api::workload::WorkloadRef;
use crate::controller::fence;
use crate::expand::bundle::{self, ConfigKind, ConfigRef};
use crate::hub::slice_target::SliceTarget;
use crate::hub::slices::{self, SliceSummary};
use crate::placement::failover::{
    self, HeldBack, Share, SliceSeen, SliceStep, TransitionInput, WorkSeen,
};
use crate::status::MemberObservation;

/// The workload's slice in each member it has one in.
pub type Slices = BTreeMap<String, Arc<SliceSummary>>;

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
                    Err(_) => m.target.get(K::KIND, ns, name).await,
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

/// The decision the slices of `uid` out in the members carry: what a hub that placed the
/// workload and stopped before its status write (the status of a new placement may wait
/// under a burst) left behind. `None` without any.
pub fn decision_from_slices(
    uid: Option<&str>,
    slices: &Slices,
) -> Option<crate::api::common::PlacementDecision> {
    let placements: Vec<crate::api::common::ClusterPlacement> = slices
        .iter()
        .filter(|(_, s)| s.hub_uid.as_deref() == uid)
        .map(|(c, s)| crate::api::common::ClusterPlacement {
            cluster: c.clone(),
            replicas: s
                .share
                .replicas
                .map(|r| i32::try_from(r).unwrap_or(i32::MAX)),
            shards: s.share.shards.clone(),
            pods: None,
        })
        .collect();
    (!placements.is_empty()).then(|| crate::api::common::PlacementDecision {
        members: Vec::new(),
        placements,
        ..Default::default()
    })
}

/// Moves the slices toward the decision, every member at once (each step touches only its
/// own member). Slices written are put into `slices` as stored, so the status aggregated
/// next says what was just written rather than "slice not observed yet". Returns what a
/// hand-off between live members holds back for now (see [`failover::hand_off`]).
pub async fn roll_out<K: PinterestKind>(
    ctx: &HubContext,
    obj: &K,
    placed: &Placed,
    standings: &Standings,
    slices: &mut Slices,
    staged: &super::staged::Staged,
) -> Result<HeldBack, HubError> {
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
    let mut steps = failover::transition(&TransitionInput {
        target: &target,
        seen: &seen,
        reachable: &standings.reachable,
        settling: &standings.settling,
        run_to_completion: K::KIND.runs_to_completion(),
    });
    // Work that runs to completion moves between live members in two steps.
    let held = if K::KIND.runs_to_completion() {
        let parse = RangeSet::recorded;
        let work: BTreeMap<String, WorkSeen> = slices
            .iter()
            .map(|(c, s)| {
                let w = WorkSeen {
                    shards: parse(s.share.shards.as_deref()),
                    processed: s.processed(),
                    completed: parse(s.report.counts.completed_shards.as_deref()),
                    released: parse(s.share.released.as_deref()),
                };
                (c.clone(), w)
            })
            .collect();
        let held = failover::hand_off(&mut steps, &work, &standings.ready);
        if !held.is_empty() {
            tracing::info!(workload = %workload_key(obj), shards = %held.shards, whole = held.whole, "work moving between members waits until the member it leaves lets it go");
        }
        held
    } else {
        HeldBack::default()
    };
    let parallelism = job_set_parallelism(obj.as_workload(), &placed.decision);
    let config = config_of(obj);
    ctx.config.record(
        K::KIND,
        &obj.namespace().unwrap_or_default(),
        &obj.name_any(),
        &config,
    );
    let found: &Slices = slices;
    let writes = steps.iter().map(|(cluster, step)| {
        let parallelism = parallelism.get(cluster).copied();
        let config = &config;
        async move {
            let Some(member) = ctx.registry.get(cluster) else {
                return Ok(None);
            };
            let target = Target {
                ctx,
                target: &member.target,
                cluster,
            };
            let revision = staged.outcome.assign.get(cluster.as_str()).copied();
            match step {
                SliceStep::Keep => Ok(None),
                SliceStep::Apply(_) if staged.keep.contains(cluster.as_str()) => Ok(None),
                SliceStep::Delete => target.remove(obj).await.map(|()| None),
                SliceStep::Apply(share) => {
                    let shards = match share {
                        Share::Shards(s) => Some(s.clone()),
                        _ => None,
                    };
                    // What the slice lets go of, and let go of before (`released_shards`).
                    let released = shards.as_deref().map(|keeps| {
                        let had = found.get(cluster.as_str()).map(|f| &f.share);
                        failover::released_shards(
                            &RangeSet::recorded(had.and_then(|h| h.shards.as_deref())),
                            &RangeSet::recorded(had.and_then(|h| h.released.as_deref())),
                            &RangeSet::recorded(Some(keeps)),
                        )
                        .to_string()
                    });
                    let share = SliceShare {
                        replicas: match share {
                            Share::Replicas(n) => Some(*n),
                            _ => None,
                        },
                        shards,
                        parallelism,
                        released,
                    };
                    let run = Run {
                        revision,
                        overlay: staged.overlays.get(cluster.as_str()).map(|c| &**c),
                        runtime: &staged.runtime,
                    };
                    target
                        .apply(obj, &share, &run, found.get(cluster.as_str()), config)
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
    Ok(held)
}

/// Each job-set slice's part of the global parallelism, by cluster.
fn job_set_parallelism(
    w: WorkloadRef<'_>,
    decision: &crate::placement::Decision,
) -> BTreeMap<String, Option<i32>> {
    let Some(j) = w.job_set() else {
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

/// The ConfigMaps and Secrets the workload's pod templates reference (every template
/// of the kind: a training job's roles too).
fn config_of<K: PinterestKind>(obj: &K) -> BTreeSet<ConfigRef> {
    serde_json::to_value(obj)
        .map(|v| bundle::workload_config(&v))
        .unwrap_or_default()
}

/// The revision a slice carries and, when it is not the spec's own, its content.
struct Run<'a> {
    revision: Option<i64>,
    overlay: Option<&'a serde_json::Value>,
    /// The profile version the spec's own revision resolves to.
    runtime: &'a str,
}

/// One member a roll-out step writes to.
struct Target<'a> {
    ctx: &'a HubContext,
    target: &'a SliceTarget,
    cluster: &'a str,
}

impl Target<'_> {
    /// The member's epoch as its MemberCluster status records it.
    fn member_epoch(&self) -> String {
        let mc = self
            .ctx
            .members
            .get(&kube::runtime::reflector::ObjectRef::new(self.cluster));
        fence::member_epoch(
            mc.as_ref()
                .and_then(|mc| mc.status.as_ref())
                .and_then(|s| s.returned_time.as_ref())
                .map(|t| t.0),
        )
    }

    /// The override rules as this member runs them.
    fn resolve_overrides(
        &self,
        rules: &[crate::api::overrides::Override],
    ) -> Result<Vec<crate::api::overrides::Override>, crate::api::validate::Invalid> {
        let mc = self
            .ctx
            .members
            .get(&kube::runtime::reflector::ObjectRef::new(self.cluster));
        let view = mc
            .as_ref()
            .map(|mc| crate::placement::from_member::cluster_view(mc, true, Vec::new()));
        let labels = view
            .as_ref()
            .map(crate::placement::model::ClusterView::selector_labels)
            .unwrap_or_default();
        let member = crate::overrides::Member {
            name: self.cluster,
            region: view.as_ref().and_then(|v| v.region.as_deref()),
            zone: view.as_ref().and_then(|v| v.zone.as_deref()),
            labels: &labels,
        };
        crate::overrides::resolve(rules, &member)
    }

    fn member_error(&self, source: kube::Error) -> HubError {
        HubError::WriteSlice {
            cluster: self.cluster.to_string(),
            source,
        }
    }

    /// Removes the slice of a cluster that left the placement — only the slice written for
    /// this resource (a job set's Jobs go with it: the slice owns them).
    async fn remove<K: PinterestKind>(&self, obj: &K) -> Result<(), HubError> {
        let ns = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        tracing::info!(workload = %workload_key(obj), member = %self.cluster, "removing the slice of a cluster that left the placement");
        let removal = self
            .target
            .delete_own(K::KIND, &ns, &name, &obj.uid().unwrap_or_default())
            .await
            .map_err(|source| HubError::RemoveSlice {
                cluster: self.cluster.to_string(),
                source,
            })?;
        if let crate::hub::cleanups::Removal::NotOurs(other) = removal {
            tracing::warn!(workload = %workload_key(obj), member = %self.cluster, other_hub_uid = ?other, "a slice of this name there was not written for this resource; left alone");
        }
        Ok(())
    }

    /// Writes the slice for `share` unless the member has it as it would be written;
    /// returns the slice as stored when written.
    async fn apply<K: PinterestKind>(
        &self,
        obj: &K,
        share: &SliceShare,
        run: &Run<'_>,
        found: Option<&Arc<SliceSummary>>,
        config: &BTreeSet<ConfigRef>,
    ) -> Result<Option<(String, Arc<SliceSummary>)>, HubError> {
        let ns = obj.namespace().unwrap_or_default();
        // Only our own slice is overwritten: one written for another resource of this
        // name (deleted while the member was down: its clean-up removes it) waits.
        let uid = obj.uid();
        if let Some(f) = found.filter(|f| f.hub_uid != uid) {
            return Err(HubError::NotOurSlice {
                cluster: self.cluster.to_string(),
                other: f.hub_uid.clone().unwrap_or_default(),
            });
        }
        let mut slice = slices::build_slice(obj, share);
        match run.overlay {
            Some(content) => slice = slices::run_revision(slice, content)?,
            None if !run.runtime.is_empty() => {
                slice.set_runtime_version(Some(run.runtime.to_string()))
            }
            None => {}
        }
        // The rules selecting this member, its variables filled in (decide checked them
        // against every member before this decision).
        if !slice.overrides().is_empty() {
            let resolved =
                self.resolve_overrides(slice.overrides())
                    .map_err(|e| HubError::Overrides {
                        cluster: self.cluster.to_string(),
                        message: e.to_string(),
                    })?;
            if !resolved.is_empty() {
                let names: Vec<&str> = resolved.iter().map(|r| r.name.as_str()).collect();
                slice.annotations_mut().insert(
                    crate::api::overrides::ANNOTATION_APPLIED.into(),
                    names.join(","),
                );
            }
            slice.set_overrides(resolved);
        }
        if let Some(r) = run.revision {
            slice.annotations_mut().insert(
                crate::api::rollout::ANNOTATION_REVISION.into(),
                r.to_string(),
            );
        }
        if K::KIND.runs_shards() {
            // The fence (`controller::fence`): the slice starts shards only while the
            // hub vouches for this epoch of the member.
            slice
                .annotations_mut()
                .insert(fence::ANNOTATION_MEMBER_EPOCH.into(), self.member_epoch());
        }
        // Most reconciles find the slice as they would write it: no namespace or slice
        // write then. A slice edited in the member differs and is written. (A slice found
        // means its namespace is there for the config below.)
        let current = found.is_some_and(|f| slices::slice_is_current(f, &slice));
        if !current {
            // Written: the agent's reconcile continues this reconcile's trace.
            crate::controller::trace::mark(slice.annotations_mut());
        }
        // A namespace this process made (or found) in the member is not applied again; a
        // slice write that finds it gone forgets it.
        let ns_key = (self.cluster.to_string(), ns.clone());
        let ns_known = self
            .ctx
            .namespaces
            .lock()
            .is_ok_and(|n| n.contains(&ns_key));
        if !current && !ns_known {
            self.target
                .ensure_namespace(&ns)
                .await
                .map_err(|source| HubError::Propagate {
                    cluster: self.cluster.to_string(),
                    source,
                })?;
            if let Ok(mut n) = self.ctx.namespaces.lock() {
                n.insert(ns_key.clone());
            }
        }
        if !config.is_empty() {
            self.propagate_config(obj, config).await?;
        }
        let mut written = None;
        if !current {
            // Forced over our own slice (a change made in the member is undone); not
            // forced when none of ours is seen, so an object of this name that someone
            // else wrote there is a conflict, not overwritten.
            let stored = self
                .target
                .apply(&slice, found.is_some())
                .await
                .map_err(|source| {
                    if matches!(&source, kube::Error::Api(s) if s.code == 404)
                        && let Ok(mut n) = self.ctx.namespaces.lock()
                    {
                        n.remove(&ns_key);
                    }
                    self.member_error(source)
                })?;
            // Until the member's watch reports it, reconciles read this copy (one run
            // before the watch catches up would write the same slice again).
            if let Some(m) = self.ctx.registry.get(self.cluster) {
                m.wrote_slice(K::KIND, stored.clone(), &ns, &obj.name_any());
            }
            written = Some((self.cluster.to_string(), stored));
            self.ctx
                .hub_metrics
                .slice_writes
                .get_or_create(&crate::hub::member_loop::MemberLabels {
                    member: self.cluster.to_string(),
                })
                .inc();
        }
        // Shards that left this member (it was lost meanwhile): the slice just written is
        // the fence — the member's agent stops their unfinished Jobs as it reads it (the
        // hub holds no right to delete Jobs in a member).
        if let (Some(s), Some(old)) = (&share.shards, found) {
            let keep = RangeSet::parse(s).unwrap_or_default();
            let had = old
                .share
                .shards
                .as_deref()
                .and_then(|r| RangeSet::parse(r).ok())
                .unwrap_or_default();
            let moved = RangeSet::from_indices(had.iter().filter(|i| !keep.contains(*i)));
            if !moved.is_empty() && written.is_some() {
                let note = format!(
                    "shards {moved} left {}: its agent stops their Jobs, they run elsewhere now",
                    self.cluster
                );
                self.ctx.event(obj, EventType::Normal, "Fenced", note).await;
            }
        }
        Ok(written)
    }

    /// Drops a bundle of every ConfigMap and Secret the pod templates reference (same
    /// namespace only) into the member's drop namespace; the member's agent materializes
    /// them next to the workload. ServiceAccount tokens and pinfed's own credentials are
    /// never copied.
    async fn propagate_config<K: PinterestKind>(
        &self,
        obj: &K,
        config: &BTreeSet<ConfigRef>,
    ) -> Result<(), HubError> {
        let ns = obj.namespace().unwrap_or_default();
        let hub = &self.ctx.hub;
        for r in config {
            let got = match r.kind {
                ConfigKind::ConfigMap => Api::<ConfigMap>::namespaced(hub.clone(), &ns)
                    .get_opt(&r.name)
                    .await
                    .map_err(HubError::ReadConfig)?
                    .map(serde_json::to_value)
                    .transpose()?,
                ConfigKind::Secret => match Api::<Secret>::namespaced(hub.clone(), &ns)
                    .get_opt(&r.name)
                    .await
                {
                    // The hub reads only the Secrets a team granted it by name.
                    Err(kube::Error::Api(e)) if e.code == 403 => {
                        let note = format!(
                            "Secret {} not propagated: the hub may not read it; grant it with \
                             `pinfed grant-secrets -n {ns} {}`",
                            r.name, r.name
                        );
                        self.ctx
                            .event(obj, EventType::Warning, "SecretNotGranted", note)
                            .await;
                        continue;
                    }
                    got => {
                        let got = got.map_err(HubError::ReadConfig)?;
                        // Granted (read): its changes are followed from now on.
                        self.ctx.config.secret_read(&ns, &r.name);
                        if self.target.is_pull()
                            && let Some(secret) = &got
                            && !crate::hub::secret_grant::may_go_to_pull_member(
                                secret.metadata.annotations.as_ref(),
                                self.cluster,
                            )
                        {
                            let note = format!(
                                "Secret {} not propagated to pull member {}: its copy would be readable \
                                 there with the member's token, and the grant does not name it; grant it \
                                 with `pinfed grant-secrets -n {ns} {} --members {}` (or '*')",
                                r.name, self.cluster, r.name, self.cluster
                            );
                            self.ctx
                                .event(obj, EventType::Warning, "SecretNotGrantedToMember", note)
                                .await;
                            continue;
                        }
                        got.map(serde_json::to_value).transpose()?
                    }
                },
            };
            // Missing on the hub: the pods wait for it in the member as they would here.
            let Some(source) = got else { continue };
            match bundle::bundle(r.kind, &source) {
                Ok(b) => {
                    self.target
                        .drop_bundle(&b)
                        .await
                        .map_err(|source| HubError::Propagate {
                            cluster: self.cluster.to_string(),
                            source,
                        })?;
                }
                Err(why) => {
                    let note = format!("{} {} not propagated: {why}", r.kind.as_str(), r.name);
                    self.ctx
                        .event(obj, EventType::Warning, "NotPropagated", note)
                        .await;
                }
            }
        }
        Ok(())
    }
}

/// What the hub knows of each placed cluster for aggregation: the slice's report, or for
/// a lost member the last status the hub showed (aggregation marks it). A report is as
/// old as the member's agent's last sign of life (its Lease), not as the hub's read:
/// a silent agent's status ages and turns Unknown.
pub fn observations(
    decision: &crate::placement::Decision,
    standings: &Standings,
    slices: &Slices,
    stored_clusters: &[crate::api::common::MemberWorkloadStatus],
    agent_times: &BTreeMap<String, Time>,
    now: &Time,
) -> Vec<MemberObservation> {
    decision
        .placements
        .iter()
        .map(|p| {
            let member_ready = standings.ready.contains(&p.cluster);
            // A member's completions count within the shards its slice holds or let go of.
            let held_shards = slices.get(&p.cluster).and_then(|s| {
                let shards = RangeSet::recorded(Some(s.share.shards.as_deref()?));
                Some(
                    shards
                        .union(&RangeSet::recorded(s.share.released.as_deref()))
                        .to_string(),
                )
            });
            let (status, hub_gen, processed) = match slices.get(&p.cluster) {
                Some(s) => (
                    Some(slices::member_workload_status(
                        &p.cluster,
                        s,
                        agent_times
                            .get(&p.cluster)
                            .filter(|t| t.0 < now.0)
                            .unwrap_or(now),
                    )),
                    s.hub_generation,
                    s.processed(),
                ),
                None if !member_ready => {
                    let shown = stored_clusters
                        .iter()
                        .find(|c| c.cluster == p.cluster)
                        .cloned();
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
                held_shards,
            }
        })
        .collect()
}

/// What the roll-out stage hands on.
pub(super) struct RolledOut {
    /// Which revision each member runs, and the rollout's status.
    pub staged: super::staged::Staged,
    /// When to look again at the latest.
    pub requeue: std::time::Duration,
}

/// Stage 4, **roll out**: which revision each member runs (a new revision is recorded
/// before any slice carries it), then the slices moved toward the decision.
pub(super) async fn stage<K: PinterestKind>(
    ctx: &HubContext,
    obj: &K,
    read: &mut super::read::Read<K>,
    decided: &super::decide::Placed,
) -> Result<RolledOut, HubError> {
    use tracing::Instrument;
    // Which revision each member runs (a new revision is recorded before any slice
    // carries it).
    let staged = super::staged::stage(
        ctx,
        obj,
        &decided.decision,
        &read.standings,
        &read.slices,
        read.stored_part.rollout.as_ref(),
        &read.now_time,
    )
    .instrument(tracing::trace_span!(target: "pinfed::trace", "stage"))
    .await?;

    // Roll out: move the slices toward the decision.
    let held = roll_out(
        ctx,
        obj,
        decided,
        &read.standings,
        &mut read.slices,
        &staged,
    )
    .instrument(tracing::trace_span!(target: "pinfed::trace", "roll_out"))
    .await?;
    // A hand-off waits for the member the work leaves; its status brings the next look,
    // this is the net under it.
    let mut requeue = if held.is_empty() {
        decided.requeue
    } else {
        decided.requeue.min(super::HAND_OFF_RECHECK)
    };
    if let Some(due) = staged.outcome.recheck {
        requeue = requeue.min(due);
    }
    // Looked at again when an unavailable share's toleration ends.
    if let Some(secs) = read.app_look.next_in {
        requeue = requeue.min(std::time::Duration::from_secs(secs.unsigned_abs() + 1));
    }
    Ok(RolledOut { staged, requeue })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(uid: &str, replicas: Option<u32>, shards: Option<&str>) -> Arc<SliceSummary> {
        Arc::new(SliceSummary {
            hub_uid: Some(uid.to_string()),
            generation: Some(1),
            hub_generation: Some(1),
            spec_digest: 0,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            share: SliceShare {
                replicas,
                shards: shards.map(str::to_string),
                ..Default::default()
            },
            report: Default::default(),
        })
    }

    #[test]
    fn a_members_completions_count_within_the_shards_its_slice_holds_or_let_go_of() {
        // use1a held 0-1,4; the decision moved 4 to use1c as its Job completed.
        let mut a = (*slice("u1", None, Some("0-1"))).clone();
        a.share.released = Some("4".into());
        let slices: Slices = [
            ("use1a".to_string(), Arc::new(a)),
            ("use1c".to_string(), slice("u1", None, Some("5"))),
        ]
        .into();
        let decision = crate::placement::Decision::of_shards(&[("use1a", "0-1"), ("use1c", "4-5")]);
        let standings = Standings {
            standings: BTreeMap::new(),
            reachable: BTreeSet::new(),
            ready: BTreeSet::new(),
            settling: BTreeSet::new(),
            requeue: std::time::Duration::from_secs(60),
            fails_over: true,
        };
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let seen = observations(&decision, &standings, &slices, &[], &BTreeMap::new(), &now);
        let held: Vec<(&str, Option<&str>)> = seen
            .iter()
            .map(|o| (o.cluster.as_str(), o.held_shards.as_deref()))
            .collect();
        assert_eq!(held, [("use1a", Some("0-1,4")), ("use1c", Some("5"))]);
    }

    #[test]
    fn the_decision_out_in_the_members_is_read_from_this_resources_slices_only() {
        let slices: Slices = [
            ("a".to_string(), slice("u1", None, Some("0-2"))),
            ("b".to_string(), slice("u1", None, Some("3-5"))),
            ("c".to_string(), slice("other", None, Some("0-5"))),
        ]
        .into();
        let d = decision_from_slices(Some("u1"), &slices).unwrap();
        let got: Vec<(&str, Option<&str>)> = d
            .placements
            .iter()
            .map(|p| (p.cluster.as_str(), p.shards.as_deref()))
            .collect();
        assert_eq!(got, vec![("a", Some("0-2")), ("b", Some("3-5"))]);
        assert_eq!(d.unplaced, 0);
        let services: Slices = [("a".to_string(), slice("u2", Some(4), None))].into();
        let d = decision_from_slices(Some("u2"), &services).unwrap();
        assert_eq!(d.placements[0].replicas, Some(4));
        assert!(decision_from_slices(Some("u3"), &slices).is_none());
    }
}

//! Decide stage: keep the placement decision while it was made for this generation and
//! no placed cluster is lost, else plan again (the pure engine, moving as little as
//! possible — except on failback, where replicas go back toward the ideal split). A new
//! decision is charged to the capacity ledger and the quota book under one lock, and
//! recorded in the hub resource's annotations (with the finalizer) before any slice
//! moves, so a new leader continues from it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;

use super::health::{Standings, cluster_views};
use super::priority::{self as prio, Eviction};
use super::{
    ANNOTATION_FAILED_OVER_FROM, ANNOTATION_FAILOVER_MESSAGE, ANNOTATION_PLACEMENT_GENERATION,
    Decided, HubContext, HubError, hub_api, workload_key,
};
use crate::api::common::PlacementDecision;
use crate::api::federation::FederatedQuota;
use crate::api::kind::PinterestKind;
use crate::api::ranges::RangeSet;
use crate::api::runtime_profile::RuntimeProfile;
use crate::controller::own_writes::Wrote;
use crate::hub::quota_book as quota;
use crate::hub::slices::FINALIZER;
use crate::placement::failover::{self, Standing};
use crate::placement::{self, Decision, PlanInput, recorded};

/// What was decided for the workload before this reconcile (this process's memory
/// first: the watch cache may not show our own writes yet).
pub struct Remembered {
    pub previous: Option<PlacementDecision>,
    /// The generation `previous` was made for.
    pub decided_for: Option<i64>,
    pub failed_over_from: BTreeSet<String>,
    pub failover_message: Option<String>,
    /// Owed evictions this process applied to the decision it remembers, recorded in the
    /// status or not yet (a write held back): never applied twice.
    pub applied_evictions: BTreeSet<String>,
}

impl Remembered {
    pub fn read<K: PinterestKind>(
        ctx: &HubContext,
        obj: &K,
        stored_decision: Option<crate::api::common::PlacementDecision>,
    ) -> Remembered {
        let key = workload_key(obj);
        if let Some(r) = ctx.decisions.lock().ok().and_then(|d| d.get(&key).cloned()) {
            return Remembered {
                previous: Some(r.decision),
                decided_for: Some(r.placement_generation),
                failed_over_from: r.failed_over_from,
                failover_message: r.failover_message,
                applied_evictions: r.applied_evictions,
            };
        }
        let annotations = obj.annotations();
        Remembered {
            // Recorded with the decision in the status; a hub before that recorded it in
            // an annotation.
            decided_for: stored_decision
                .as_ref()
                .and_then(|d| d.generation)
                .or_else(|| {
                    annotations
                        .get(ANNOTATION_PLACEMENT_GENERATION)
                        .and_then(|g| g.parse::<i64>().ok())
                }),
            previous: stored_decision,
            failed_over_from: annotations
                .get(ANNOTATION_FAILED_OVER_FROM)
                .map(|s| {
                    s.split(',')
                        .filter(|c| !c.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            failover_message: annotations.get(ANNOTATION_FAILOVER_MESSAGE).cloned(),
            applied_evictions: BTreeSet::new(),
        }
    }
}

/// The decision of this reconcile and what the status says of failover.
pub struct Placed {
    pub decision: Decision,
    pub quota_exceeded: bool,
    /// As remembered before this reconcile (the status shows the recorded story).
    pub failed_over_from: BTreeSet<String>,
    pub failover_message: Option<String>,
    /// Clusters placed before and lost (or draining) now.
    pub lost_placed: BTreeSet<String>,
    /// Clusters the workload failed over from that are Ready again.
    pub failback: BTreeSet<String>,
    /// When to look again.
    pub requeue: Duration,
    /// The version this reconcile's own metadata write returned: its status write is made
    /// over that version, not over the copy it read.
    pub written: Option<String>,
    /// Each member's share and why, as recorded when the decision was made.
    pub reasons: Vec<crate::api::common::MemberDecision>,
    /// Where it stands in the hub's queue while part of it waits.
    pub queue: Option<crate::api::common::QueueStanding>,
    /// Evictions the status must record: applied by this decision (it gave up part of
    /// itself to a preemptor) or by one before it whose status was not written yet.
    pub evicted: Vec<Eviction>,
    /// The owed-eviction annotations read: removed once the status records them.
    pub owed_annotations: Vec<String>,
    /// The last rebalance request acted on (this reconcile's, or recorded before).
    pub rebalanced: Option<String>,
    /// Members application failover moved the workload off, still avoided.
    pub application_failovers: Vec<crate::api::common::ApplicationFailoverRecord>,
}

/// An Event a decision owes: written with the status that follows the decision (an Event
/// is a hub API server write: in a burst it would hold up slices).
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionEvent {
    pub type_: EventType,
    pub reason: &'static str,
    pub note: String,
}

pub enum Outcome {
    /// The workload does not validate (the message names the field).
    Invalid(String),
    Decided(Box<Placed>),
}

/// What the status and the slices say, for a decision.
pub struct Seen<'a> {
    /// The decision its status records (the preemptions and the rebalance it answered).
    pub stored: Option<&'a crate::api::common::PlacementDecision>,
    /// A placed share application failover says must move (`app_failover::look_at`).
    pub app_due: Option<&'a crate::placement::app_failover::Verdict>,
}

pub async fn decide<K: PinterestKind>(
    ctx: &HubContext,
    obj: &K,
    standings: &Standings,
    remembered: &Remembered,
    now: Timestamp,
    finalizer_written: bool,
    seen: Seen<'_>,
) -> Result<Outcome, HubError> {
    let Seen { stored, app_due } = seen;
    let recorded = stored.map_or(&[][..], |p| p.preemptions.as_slice());
    let rebalanced = stored.and_then(|p| p.rebalanced.as_deref());
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let generation = obj.meta().generation.unwrap_or(0);
    let w = obj.as_workload();
    let policy = placement::from_workload::policy_for(w);
    let lost_placed: BTreeSet<String> = remembered
        .previous
        .iter()
        .flat_map(|p| p.placements.iter())
        .filter(|c| {
            matches!(
                standings.of(&c.cluster),
                Standing::Lost | Standing::Draining
            )
        })
        .map(|c| c.cluster.clone())
        .collect();
    let failback: BTreeSet<String> = remembered
        .failed_over_from
        .iter()
        .filter(|c| standings.of(c) == Standing::Ready)
        .cloned()
        .collect();
    let own = Some((ns.as_str(), K::KIND.as_str(), name.as_str()));
    let key = workload_key(obj);
    // Its priority (an unknown class holds it Invalid) and what it owes preemptors.
    let priority = match crate::placement::priority::resolve(
        w.priority_class_name(),
        &ctx.priority.class_views(),
    ) {
        Ok(p) => p,
        Err(e) => return Ok(Outcome::Invalid(e)),
    };
    // What it owes preemptors: their annotations on it that its status has not recorded;
    // those this process applied already are recorded, not applied again.
    let read = prio::owed(obj.annotations(), recorded);
    for (annotation, why) in &read.unreadable {
        tracing::warn!(workload = %key, %annotation, %why, "an owed-eviction annotation that does not read: left alone");
    }
    // A rebalance asked for and not acted on yet: placed again from scratch.
    let rebalance = obj
        .annotations()
        .get(crate::api::federation::ANNOTATION_REBALANCE)
        .filter(|id| Some(id.as_str()) != rebalanced)
        .cloned();
    // Members application failover moved it off: avoided for this generation, until a
    // rebalance is asked for.
    let avoided_before: Vec<crate::api::common::ApplicationFailoverRecord> = if rebalance.is_some()
    {
        Vec::new()
    } else {
        remembered
            .previous
            .iter()
            .flat_map(|p| p.application_failovers.iter())
            .filter(|r| r.generation == generation)
            .cloned()
            .collect()
    };
    let (applied_before, owed): (Vec<Eviction>, Vec<Eviction>) = read
        .apply
        .into_iter()
        .partition(|e| remembered.applied_evictions.contains(&e.id));
    // The members as placement sees them, without node room: built once, and only if a
    // spread or a kept decision asks.
    let views_now = std::sync::OnceLock::new();
    let views = || views_now.get_or_init(|| cluster_views(ctx, now, own, standings, false));
    // (Only a spread asks how many are eligible.)
    let eligible = if policy.spread.min_clusters > 0 {
        views().iter().filter(|v| v.ready).count() as u32
    } else {
        0
    };
    // A decision made while fewer clusters were Ready than the spread asks for is redone
    // once more are. Nothing left to place (a finished job set) is never short.
    let spread_short = |p: &PlacementDecision| {
        !p.placements.is_empty()
            && (p.placements.len() as u32) < policy.spread.min_clusters.min(eligible)
    };
    // A workload that runs in every member that admits it (a daemon, a duplicated
    // service) and is missing from a Ready member that does: planned again (its decision
    // was made while that member could not take it, e.g. still connecting).
    let missing_somewhere = |p: &PlacementDecision| {
        p.strategy == Some(crate::api::common::PlacementStrategy::Duplicated) && {
            let placed: BTreeSet<&str> = p.placements.iter().map(|c| c.cluster.as_str()).collect();
            placement::missing_everywhere(&policy, &placed, views()).is_some()
        }
    };
    let unchanged = remembered.previous.as_ref().filter(|p| {
        remembered.decided_for == Some(generation)
            && p.unplaced == 0
            && !spread_short(p)
            && !missing_somewhere(p)
            && lost_placed.is_empty()
            && failback.is_empty()
            && owed.is_empty()
            && rebalance.is_none()
    });
    // Members the workload must leave although nothing else changed: a NoExecute taint it
    // does not tolerate, a selector the member no longer matches.
    let mut leaving: BTreeMap<String, String> = match unchanged {
        Some(p) => {
            let placed: BTreeSet<&str> = p.placements.iter().map(|c| c.cluster.as_str()).collect();
            views()
                .iter()
                .filter(|v| placed.contains(v.name.as_str()))
                .filter_map(|v| Some((v.name.clone(), placement::must_leave(&policy, v)?)))
                .collect()
        }
        None => BTreeMap::new(),
    };
    // A taint's moves are paced across the fleet: past the budget the workload stays where
    // it runs and looks again when a move is free (said once, as an Event).
    let mut taint_wait = None;
    let mut taint_move_taken = false;
    let tainted: Vec<String> = leaving
        .keys()
        .filter(|c| {
            views()
                .iter()
                .any(|v| &v.name == *c && placement::model::leaves_for_taint(&policy, v))
        })
        .cloned()
        .collect();
    if tainted.is_empty() {
        ctx.taint_moves.forget(&key);
    } else {
        let (taken, first) = ctx
            .taint_moves
            .take(&key, now.as_millisecond() as f64 / 1000.0);
        taint_move_taken = taken.is_ok();
        if let Err(wait) = taken {
            let why = tainted
                .iter()
                .filter_map(|c| leaving.remove(c))
                .collect::<Vec<_>>()
                .join("; ");
            let wait = Duration::from_secs_f64(wait.clamp(0.05, 3600.0));
            taint_wait = Some(wait);
            if first {
                ctx.event(
                    obj,
                    EventType::Normal,
                    "LeaveQueued",
                    format!("{why}; the fleet's moves off tainted members are paced (--taint-moves-per-second): it stays where it runs until its turn"),
                )
                .await;
            }
            tracing::debug!(workload = %key, ?wait, "move off a tainted member waits for the fleet's budget");
        }
        ctx.hub_metrics
            .taint_moves_waiting
            .set(ctx.taint_moves.waiting() as i64);
    }
    // A share that stayed unavailable leaves its member like one that must (grown
    // elsewhere first; kept where it is while there is no room elsewhere).
    if let Some(v) = app_due {
        leaving.insert(v.cluster.clone(), v.reason.clone());
    }
    let keep = unchanged.filter(|_| leaving.is_empty());
    // (Added by this process in a write the watch has not delivered yet counts.)
    let needs_finalizer = !finalizer_written && !obj.finalizers().iter().any(|f| f == FINALIZER);
    let (decision, quota_exceeded, written, reasons) = match keep {
        Some(kept) => {
            let mut written = None;
            if needs_finalizer {
                let mut f = obj.finalizers().to_vec();
                f.push(FINALIZER.to_string());
                let patch = serde_json::json!({"metadata": {"finalizers": f}});
                let stored = hub_api(ctx, obj)
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(HubError::Finalizer)?;
                written = ctx.record_write(obj, None, &stored, Wrote::Metadata { finalizer: true });
            }
            (
                recorded::from_status(kept),
                false,
                written,
                kept.members.clone(),
            )
        }
        None => {
            // Validate and size the workload (the profile it will run with counts). A
            // decision kept for this generation was made from the same spec, so the
            // reconciles that keep one (nearly all) skip this expansion.
            let profiles: Vec<RuntimeProfile> =
                ctx.profiles.state().iter().map(|p| (**p).clone()).collect();
            let profile = crate::expand::select_profile(&profiles, obj.runtime_version())
                .ok()
                .cloned();
            let mut demand = match placement::from_workload::demand_for(w, profile.as_ref()) {
                Ok(d) => d,
                Err(e) => return Ok(Outcome::Invalid(e.invalid().to_string())),
            };
            // Overrides: each member's pod and bounds as its rules make them, and the
            // rules checked against the members there are (held Invalid otherwise; the
            // slices out there stay as they are).
            let mut planned = policy.clone();
            planned.avoid = avoided_before
                .iter()
                .map(|r| (r.cluster.clone(), r.reason.clone()))
                .chain(app_due.map(|v| (v.cluster.clone(), v.reason.clone())))
                .collect();
            if !w.overrides().is_empty()
                && let Err(e) = placement::from_workload::apply_overrides(
                    &w.to_owned(),
                    profile.as_ref(),
                    views(),
                    &mut demand,
                    &mut planned,
                )
            {
                return Ok(Outcome::Invalid(e.to_string()));
            }
            let quotas = quotas_of(ctx, &ns, &profiles).await?;
            let replan = Replan {
                demand: &demand,
                policy: &planned,
                quotas: &quotas,
                // (A job set's unfinished shards stay where they are held either way:
                // `failover::keep_held_shards`.)
                ideal: rebalance.is_some()
                    || (!failback.is_empty()
                        && matches!(
                            demand.count,
                            placement::Count::Replicas(_) | placement::Count::Whole
                        )),
                rebalance: rebalance.as_deref(),
                lost_placed: &lost_placed,
                failback: &failback,
                leaving: &leaving,
                app_failover: app_due.is_some(),
                app_shards: app_due.and_then(|v| Some((v.cluster.as_str(), v.shards.as_ref()?))),
                priority: &priority,
                owed: &owed,
                applied_before: &applied_before,
                eviction_id: prio::eviction_id(
                    obj.meta().uid.as_deref().unwrap_or_default(),
                    obj.meta().resource_version.as_deref().unwrap_or_default(),
                ),
            };
            plan_again(
                ctx,
                obj,
                standings,
                remembered,
                &replan,
                now,
                needs_finalizer,
            )
            .await?
        }
    };
    // A move off a tainted member that did not happen (kept where it is: nowhere else
    // has room) gives its turn back.
    if taint_move_taken
        && remembered
            .previous
            .as_ref()
            .map(recorded::from_status)
            .is_some_and(|before| before == decision)
    {
        ctx.taint_moves.give_back();
    }
    // Avoided from now on: a member the share did leave (not one it is kept in for want
    // of room elsewhere: it is looked at again).
    let mut application_failovers = avoided_before;
    if let Some(v) = app_due {
        let there = decision
            .placements
            .iter()
            .filter(|p| p.cluster == v.cluster);
        let left = match &v.shards {
            // A job set: the shards that had no pod Ready there are elsewhere now.
            Some(moved) => !there
                .filter_map(|p| p.shards.as_deref())
                .filter_map(|s| RangeSet::parse(s).ok())
                .any(|s| !s.intersection(moved).is_empty()),
            None => !there.into_iter().any(|p| p.replicas.unwrap_or(0) > 0),
        };
        if left {
            ctx.hub_metrics.application_failovers.inc();
        }
        if left && !application_failovers.iter().any(|r| r.cluster == v.cluster) {
            application_failovers.push(crate::api::common::ApplicationFailoverRecord {
                cluster: v.cluster.clone(),
                generation,
                time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
                reason: v.reason.clone(),
            });
        }
    }
    // (This process's memory of the decision carries them, as the status does.)
    if let Ok(mut d) = ctx.decisions.lock()
        && let Some(e) = d.get_mut(&key)
    {
        e.decision.application_failovers = application_failovers.clone();
    }
    // The queue: in it while part waits, with its place; a victim's standing as the
    // preemption left it.
    let now_s = now.as_second();
    let queue = {
        let mut q = ctx.priority.queue.lock().expect("queue lock");
        if decision.unplaced == 0 {
            if q.remove(&key).is_some() {
                ctx.hub_metrics.queue_waiting.set(q.len() as i64);
            }
            None
        } else {
            q.standing(&key, now_s).map(|st| {
                let w = q.get(&key);
                crate::api::common::QueueStanding {
                    position: i32::try_from(st.position).unwrap_or(i32::MAX),
                    waiting: i32::try_from(st.waiting).unwrap_or(i32::MAX),
                    priority: priority.value,
                    effective_priority: st.effective_priority,
                    priority_class_name: priority.class.clone(),
                    since: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        Timestamp::from_second(st.since).unwrap_or(now),
                    ),
                    waiting_for: w
                        .map(|w| w.waiting_for.text().to_string())
                        .unwrap_or_default(),
                }
            })
        }
    };
    if let Ok(mut placed) = ctx.priority.placed.lock()
        && let Some(kind) = prio::victim_kind(w, decision.unplaced)
    {
        placed.insert(
            key.clone(),
            prio::VictimInfo {
                priority: priority.value,
                kind,
                created: obj
                    .meta()
                    .creation_timestamp
                    .as_ref()
                    .map_or(0, |t| t.0.as_second()),
            },
        );
    }
    let mut requeue = requeue_after(
        ctx,
        standings.requeue,
        &decision,
        policy.spread.min_clusters,
    );
    if let Some(wait) = taint_wait {
        requeue = requeue.min(wait);
    }
    Ok(Outcome::Decided(Box::new(Placed {
        decision,
        quota_exceeded,
        failed_over_from: remembered.failed_over_from.clone(),
        failover_message: remembered.failover_message.clone(),
        lost_placed,
        failback,
        requeue,
        written,
        reasons,
        queue,
        evicted: applied_before.into_iter().chain(owed).collect(),
        owed_annotations: read.annotations,
        rebalanced: rebalance.or_else(|| rebalanced.map(str::to_string)),
        application_failovers,
    })))
}

/// Something found no room or quota: try again soon (room frees up without an event this
/// workload hears). Spread over fewer clusters than asked while more members exist (one
/// still connecting or settling): look again soon, whatever triggers arrive.
fn requeue_after(
    ctx: &HubContext,
    standing_change: Duration,
    decision: &Decision,
    min_clusters: u32,
) -> Duration {
    let spread_wanted =
        min_clusters.min(u32::try_from(ctx.members.state().len()).unwrap_or(u32::MAX));
    if decision.unplaced > 0 {
        standing_change.min(Duration::from_secs(5))
    } else if !decision.placements.is_empty() && (decision.placements.len() as u32) < spread_wanted
    {
        standing_change.min(Duration::from_secs(2))
    } else {
        standing_change
    }
}

/// What a new plan is made from.
struct Replan<'a> {
    demand: &'a placement::Demand,
    policy: &'a placement::PlacementPolicy,
    /// Every FederatedQuota of the namespace (the tightest limit wins).
    quotas: &'a [Arc<FederatedQuota>],
    /// Plan from scratch (failback, a rebalance), not from the current decision.
    ideal: bool,
    /// The rebalance request this plan answers.
    rebalance: Option<&'a str>,
    lost_placed: &'a BTreeSet<String>,
    failback: &'a BTreeSet<String>,
    /// Placed members the workload must leave, with why ([`placement::must_leave`], or
    /// application failover).
    leaving: &'a BTreeMap<String, String>,
    /// One of them is left by application failover.
    app_failover: bool,
    /// A job set's application failover: the member and the shards it gives up (its
    /// others stay there).
    app_shards: Option<(&'a str, &'a RangeSet)>,
    priority: &'a crate::placement::priority::Priority,
    /// What it gives up to preemptors in this plan.
    owed: &'a [Eviction],
    /// What it gave up in a plan before whose status is not written yet.
    applied_before: &'a [Eviction],
    /// The id of the evictions this plan makes others owe ([`prio::eviction_id`]).
    eviction_id: String,
}

/// Plans again, charges the ledger and the quota book, records the decision (annotations
/// and finalizer, one write) and the Events that say what changed.
async fn plan_again<K: PinterestKind>(
    ctx: &HubContext,
    obj: &K,
    standings: &Standings,
    remembered: &Remembered,
    r: &Replan<'_>,
    now: Timestamp,
    needs_finalizer: bool,
) -> Result<
    (
        Decision,
        bool,
        Option<String>,
        Vec<crate::api::common::MemberDecision>,
    ),
    HubError,
> {
    let key = workload_key(obj);
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let started = std::time::Instant::now();
    let before = remembered.previous.as_ref().map(recorded::from_status);
    let own = Some((ns.as_str(), K::KIND.as_str(), name.as_str()));
    let mut views = cluster_views(ctx, now, own, standings, true);
    let mut blocked = false;
    let now_s = now.as_second();
    // What it gives up to preemptors leaves the decision it is planned from.
    let mut current = if r.ideal { None } else { before.clone() };
    let mut policy = r.policy.clone();
    if let Some(c) = current.as_mut()
        && !r.owed.is_empty()
    {
        prio::apply_evictions(c, &mut policy, r.owed);
    }
    let mut yielded_to: Option<(String, i32)> = None;
    let mut preempted: Option<(
        crate::placement::preempt::Preemption,
        Vec<(String, Eviction)>,
    )> = None;
    let mut outcome = {
        let mut ledger = ctx.ledger.lock().expect("ledger lock");
        ledger.expire(SystemTime::now() - Duration::from_secs(30));
        ledger.apply(&mut views, Some(&key));
        // Quota usage is read and charged under the same lock as capacity.
        let quota_view = quota_view_of(ctx, r.quotas, &ns, &key);
        let mut outcome = placement::plan(&PlanInput {
            clusters: &views,
            policy: &policy,
            demand: r.demand,
            quota: quota_view.as_ref(),
            current: current.as_ref(),
        });
        // Leaving a member must not leave part of the workload nowhere: it stays where it
        // is (and says why) until there is room elsewhere.
        if !r.leaving.is_empty()
            && let Some(b) = before
                .as_ref()
                .filter(|b| outcome.decision.unplaced > b.unplaced)
        {
            outcome.decision = b.clone();
            blocked = true;
        }
        // Room it would take goes first to a workload ranked ahead of it in the queue that
        // can use it (for a bounded time: one that does not take it stops blocking).
        let had = current.as_ref().map_or(0, prio::units);
        if prio::units(&outcome.decision) > had
            && let Ok(mut q) = ctx.priority.queue.lock()
        {
            let since = q.get(&key).map_or(now_s, |w| w.since);
            let all_quotas = ctx.quotas.state();
            // The room there is with this workload's own pods and reservation still
            // counted: what it already holds is not room another could take.
            let room = std::sync::OnceLock::new();
            let ahead = q
                .first_ahead(r.priority.value, since, &key, now_s, 20, |h| {
                    let room = room.get_or_init(|| {
                        let mut v = cluster_views(ctx, now, None, standings, true);
                        ledger.apply(&mut v, None);
                        v
                    });
                    let quotas: Vec<Arc<FederatedQuota>> = all_quotas
                        .iter()
                        .filter(|q| q.namespace().as_deref() == Some(h.namespace.as_str()))
                        .cloned()
                        .collect();
                    let qv = quota_view_of(ctx, &quotas, &h.namespace, &h.key);
                    prio::could_use(room, h, qv.as_ref())
                })
                .map(|h| (h.key.clone(), h.priority.value));
            if let Some((h, hp)) = ahead
                && q.note_yield(&key, &h, now_s)
            {
                outcome.decision = held_for(current.as_ref(), &outcome.decision, &h, hp);
                outcome.bindings.clear();
                outcome.cause = Some(placement::Cause::InsufficientCapacity);
                yielded_to = Some((h, hp));
            }
        }
        // Preemption: part still fits nowhere, its class may preempt, and the room (not
        // its quota) is what it lacks.
        if outcome.decision.unplaced > 0
            && yielded_to.is_none()
            && !blocked
            && r.priority.preempts
            && ctx.priority.preemption
            && lacks_room(&outcome)
        {
            preempted = preempt(
                ctx,
                &views,
                &ledger,
                &policy,
                r,
                quota_view.as_ref(),
                &key,
                &mut outcome,
            );
        }
        ledger.reserve(&key, &outcome, SystemTime::now());
        ctx.quota_book.set(
            &key,
            &ns,
            placement::quota::usage_of(&outcome.decision, r.demand),
        );
        outcome
    };
    // (Shards it gave up to a preemptor are not kept: what it is planned from lacks them.)
    let kept_from = if r.owed.is_empty() {
        before.as_ref()
    } else {
        current.as_ref()
    };
    if let (
        Some(b),
        placement::Count::Shards {
            completed, total, ..
        },
    ) = (kept_from, &r.demand.count)
    {
        let completed = RangeSet::from_indices(completed.iter().copied());
        // Live members it may still run in, and members settling back from a loss, keep
        // the shards they hold (failover::keep_held_shards says why).
        let staying: BTreeSet<String> = b
            .placements
            .iter()
            .map(|p| &p.cluster)
            .filter(|c| {
                standings.settling.contains(*c)
                    || (standings.keeps_held(c)
                        && !r.lost_placed.contains(*c)
                        && !r.leaving.contains_key(*c)
                        && (policy.cluster_names.is_empty() || policy.cluster_names.contains(*c))
                        && views
                            .iter()
                            .find(|v| &v.name == *c)
                            .is_some_and(|v| placement::must_leave(&policy, v).is_none()))
            })
            .cloned()
            .collect();
        let unfinished = RangeSet::full(*total).difference(&completed);
        failover::keep_held_shards(&mut outcome.decision, b, &unfinished, &staying);
        // Application failover moves only the shards that had no pod Ready there.
        if let Some((c, released)) = r.app_shards {
            failover::keep_held_shards(
                &mut outcome.decision,
                b,
                &unfinished.difference(released),
                &BTreeSet::from([c.to_string()]),
            );
        }
        failover::keep_completed_shards(&mut outcome.decision, b, &completed, r.lost_placed);
        // Charged as kept (a shard kept where it runs counts, whatever the plan said).
        ctx.quota_book.set(
            &key,
            &ns,
            placement::quota::usage_of(&outcome.decision, r.demand),
        );
    }
    let quota_exceeded = outcome.cause == Some(placement::Cause::QuotaExceeded);
    // The queue: in it while part waits (keeping its first wait), out once all is placed.
    let newly_queued = match ctx.priority.queue.lock() {
        Ok(mut q) if outcome.decision.unplaced > 0 => {
            let why = outcome.decision.reason.clone().unwrap_or_default();
            let new = q.get(&key).is_none();
            q.upsert(crate::placement::priority::Waiting {
                key: key.clone(),
                namespace: ns.clone(),
                priority: r.priority.clone(),
                // (A wait recorded before this process started counts from its start.)
                since: remembered
                    .previous
                    .as_ref()
                    .and_then(|p| p.queue.as_ref())
                    .map_or(now_s, |q| q.since.0.as_second().min(now_s)),
                waiting_for: if quota_exceeded {
                    crate::placement::priority::WaitingFor::Quota(why)
                } else {
                    crate::placement::priority::WaitingFor::Room(why)
                },
                unit: r.demand.one_unit(),
                policy: r.policy.clone(),
                yielding: None,
            });
            ctx.hub_metrics.queue_waiting.set(q.len() as i64);
            new.then(|| q.standing(&key, now_s)).flatten()
        }
        Ok(mut q) => {
            if q.remove(&key).is_some() {
                ctx.hub_metrics.queue_waiting.set(q.len() as i64);
            }
            None
        }
        Err(_) => None,
    };
    if let Some((h, _)) = &yielded_to {
        ctx.priority.wake(h);
    }
    if before
        .as_ref()
        .is_some_and(|b| prio::units(&outcome.decision) < prio::units(b))
    {
        // Room it held is free: the first waiting workloads look again.
        ctx.priority.wake_first(now_s, 3);
    }
    let mut priority_events = Vec::new();
    if let Some(st) = &newly_queued {
        priority_events.push(DecisionEvent {
            type_: EventType::Normal,
            reason: "Queued",
            note: format!(
                "waiting, position {} of {} (priority {}): {}",
                st.position,
                st.waiting,
                r.priority.value,
                outcome.decision.reason.clone().unwrap_or_default()
            ),
        });
    }
    if let Some((p, owed)) = &preempted {
        let victims: Vec<String> = p.victims.iter().map(|v| v.describe()).collect();
        let note = format!(
            "made room in {} by preempting {} (lower priority): {}",
            p.member,
            victims.join("; "),
            placed_text(&outcome.decision)
        );
        tracing::info!(workload = %key, member = %p.member, victims = ?victims, "preempting");
        priority_events.push(DecisionEvent {
            type_: EventType::Normal,
            reason: "Preempting",
            note,
        });
        // Owed before this decision is recorded: the debt outlives this process.
        for (victim, e) in owed {
            write_owed(ctx, victim, e).await?;
        }
        ctx.hub_metrics.preemptions.inc_by(p.victims.len() as u64);
    }
    for e in r.owed {
        let what = if e.whole {
            format!("its {} pods", e.pods)
        } else if !e.shards.is_empty() {
            format!("shards {} back to pending", e.shards)
        } else {
            format!("{} replicas", e.replicas)
        };
        priority_events.push(DecisionEvent {
            type_: EventType::Warning,
            reason: "Preempted",
            note: format!(
                "{what} in {} preempted by {} (priority {}): now {}",
                e.member,
                e.by,
                e.by_priority,
                placed_text(&outcome.decision)
            ),
        });
    }
    // (A workload that must leave a member but has nowhere to go keeps the decision
    // before; the reasons are those of the plan that could not be taken: they say why
    // no other member has room.)
    let reasons = recorded::reasons_to_status(&outcome.explained);
    let held_before = hold_back(ctx, &key, &ns, quota_exceeded, &outcome.decision);
    ctx.hub_metrics
        .placement_seconds
        .observe(started.elapsed().as_secs_f64());
    ctx.hub_metrics
        .placements
        .get_or_create(&crate::controller::metrics::KindLabels {
            kind: K::KIND.as_str().into(),
        })
        .inc();
    // Fail back later to members that were lost; not to members being unjoined or gone.
    let mut failed_over = remembered.failed_over_from.clone();
    failed_over.extend(r.lost_placed.iter().cloned());
    failed_over.retain(|c| !r.failback.contains(c) && standings.counts_for_failback(c));
    let moved = (!r.lost_placed.is_empty())
        .then(|| {
            before
                .as_ref()
                .map(|b| failover::moved_text(b, &outcome.decision, r.lost_placed))
        })
        .flatten();
    let message = if failed_over.is_empty() {
        None
    } else {
        moved
            .clone()
            .or_else(|| remembered.failover_message.clone())
    };
    // The decision and its generation are recorded with the status. A metadata write is
    // made only for what the status cannot carry: the finalizer (set at creation by the
    // hub's admission policy, `deploy/hub/finalizer-policy.yaml`, when it is installed)
    // and the failover record, when either changes — not on a routine placement.
    let failover_changed =
        failed_over != remembered.failed_over_from || message != remembered.failover_message;
    let written = if needs_finalizer || failover_changed {
        let mut patch = serde_json::json!({"metadata": {"annotations": {
            // (Where a hub before this one recorded the generation; the status has it.)
            ANNOTATION_PLACEMENT_GENERATION: null,
            ANNOTATION_FAILED_OVER_FROM: (!failed_over.is_empty())
                .then(|| failed_over.iter().cloned().collect::<Vec<_>>().join(",")),
            ANNOTATION_FAILOVER_MESSAGE: message.clone(),
        }}});
        if needs_finalizer {
            let mut f = obj.finalizers().to_vec();
            f.push(FINALIZER.to_string());
            patch["metadata"]["finalizers"] = serde_json::json!(f);
        }
        let stored = hub_api(ctx, obj)
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(HubError::RecordDecision)?;
        ctx.record_write(
            obj,
            None,
            &stored,
            Wrote::Metadata {
                finalizer: needs_finalizer,
            },
        )
    } else {
        None
    };
    tracing::info!(workload = %key, decision = %outcome.decision.to_json(), took = ?started.elapsed(), "placed");
    if let Ok(mut d) = ctx.decisions.lock() {
        d.insert(
            key.clone(),
            Decided {
                placement_generation: obj.meta().generation.unwrap_or(0),
                failed_over_from: failed_over,
                failover_message: message,
                decision: crate::api::common::PlacementDecision {
                    generation: obj.meta().generation,
                    members: reasons.clone(),
                    ..recorded::to_status(&outcome.decision)
                },
                applied_evictions: r
                    .applied_before
                    .iter()
                    .chain(r.owed)
                    .map(|e| e.id.clone())
                    .collect(),
            },
        );
    }
    let leaving = (!r.leaving.is_empty()).then(|| {
        let why = r.leaving.values().cloned().collect::<Vec<_>>().join("; ");
        if blocked {
            tracing::warn!(workload = %key, %why, "must leave a member but has nowhere to go");
            (true, format!("{why}: kept there, no other member has room"))
        } else {
            tracing::info!(workload = %key, %why, decision = %outcome.decision.to_json(), "leaving a member");
            (false, format!("{why}: now {}", placed_text(&outcome.decision)))
        }
    });
    let change = Change {
        moved,
        leaving,
        app_failover: r.app_failover,
        rebalance: r.rebalance.map(|id| {
            let before = before.as_ref().map_or("nowhere".into(), placed_text);
            (id.to_string(), before)
        }),
        failback: r.failback,
        // A first decision is routine (the status records it; an Event each would be a
        // hub write per workload in a burst); a changed one is news.
        changed: before.as_ref().is_some_and(|b| b != &outcome.decision),
        newly_held: quota_exceeded && !held_before,
    };
    ctx.status_deferrals.decided(std::time::Instant::now());
    let mut events = events_for(&key, &change, &outcome.decision);
    events.extend(priority_events);
    ctx.status_deferrals.owe_events(&key, events);
    Ok((outcome.decision, quota_exceeded, written, reasons))
}

/// What a new decision changed, for Events.
struct Change<'a> {
    /// The failover text when placed clusters were lost.
    moved: Option<String>,
    /// Why it leaves members (must_leave), and whether it could not (nowhere to go).
    leaving: Option<(bool, String)>,
    /// Application failover is why.
    app_failover: bool,
    /// A rebalance request answered: its id, and where the workload was before.
    rebalance: Option<(String, String)>,
    failback: &'a BTreeSet<String>,
    /// A decision there was before differs from this one.
    changed: bool,
    newly_held: bool,
}

/// Events: what changed where the workload runs, and why.
fn events_for(key: &str, c: &Change<'_>, d: &Decision) -> Vec<DecisionEvent> {
    let mut events = Vec::new();
    let mut say = |type_, reason, note| {
        events.push(DecisionEvent {
            type_,
            reason,
            note,
        })
    };
    if let Some(moved) = &c.moved {
        tracing::warn!(workload = %key, %moved, "failover");
        say(EventType::Warning, "FailedOver", moved.clone());
    } else if !c.failback.is_empty() {
        let to = c.failback.iter().cloned().collect::<Vec<_>>().join(", ");
        tracing::info!(workload = %key, members = %to, decision = %d.to_json(), "failback");
        say(
            EventType::Normal,
            "FailedBack",
            format!("back to {to}: {}", placed_text(d)),
        );
    } else if let Some((blocked, why)) = &c.leaving {
        match (*blocked, c.app_failover) {
            (true, false) => say(EventType::Warning, "LeaveBlocked", why.clone()),
            (false, false) => say(EventType::Normal, "LeftMember", why.clone()),
            (true, true) => say(
                EventType::Warning,
                "ApplicationFailoverBlocked",
                why.clone(),
            ),
            (false, true) => say(EventType::Warning, "ApplicationFailover", why.clone()),
        }
    } else if let Some((id, before)) = &c.rebalance {
        let note = if c.changed {
            format!("rebalanced (request {id}): {before} → {}", placed_text(d))
        } else {
            format!("rebalanced (request {id}): nothing to move, {before}")
        };
        tracing::info!(workload = %key, %note, "rebalance");
        say(EventType::Normal, "Rebalanced", note);
    } else if c.changed {
        say(EventType::Normal, "Placed", placed_text(d));
    }
    if c.newly_held {
        say(
            EventType::Warning,
            "QuotaExceeded",
            d.reason.clone().unwrap_or_default(),
        );
    }
    events
}

/// Records whether the workload's quota holds part of it back; says whether it was held
/// back before.
fn hold_back(ctx: &HubContext, key: &str, ns: &str, held: bool, d: &Decision) -> bool {
    let Ok(mut h) = ctx.held_back.lock() else {
        return false;
    };
    if held {
        let why = format!("{key}: {}", d.reason.clone().unwrap_or_default());
        h.insert(key.to_string(), (ns.to_string(), why)).is_some()
    } else {
        h.remove(key).is_some()
    }
}

/// "use1a 4 · use1b 3 (2 unplaced: …)", for Events.
fn placed_text(d: &Decision) -> String {
    let mut parts: Vec<String> = d
        .placements
        .iter()
        .map(|p| match (&p.replicas, &p.shards) {
            (Some(r), _) => format!("{} {r}", p.cluster),
            (None, Some(s)) => format!("{} shards {s}", p.cluster),
            (None, None) => p.cluster.clone(),
        })
        .collect();
    if parts.is_empty() {
        parts.push("nowhere".into());
    }
    let mut text = parts.join(" · ");
    if d.unplaced > 0 {
        text.push_str(&format!(
            " ({} unplaced: {})",
            d.unplaced,
            d.reason.clone().unwrap_or_default()
        ));
    }
    text
}

/// The tightest of a namespace's quotas with what the other workloads use of it.
fn quota_view_of(
    ctx: &HubContext,
    quotas: &[Arc<FederatedQuota>],
    ns: &str,
    key: &str,
) -> Option<placement::QuotaView> {
    if quotas.is_empty() {
        return None;
    }
    let used = ctx.quota_book.usage(ns, Some(key));
    placement::quota::tightest(
        quotas
            .iter()
            .filter_map(|q| {
                placement::quota::quota_view(q, Some(&used))
                    .map_err(|e| tracing::warn!(quota = %q.name_any(), error = %e, "quota ignored: it does not parse"))
                    .ok()
            })
            .collect(),
    )
}

/// The decision of a workload that leaves the room it could take to one ahead of it in
/// the queue: what it had, the rest waiting behind that one.
fn held_for(
    current: Option<&Decision>,
    proposed: &Decision,
    ahead: &str,
    priority: i32,
) -> Decision {
    let mut d = current.cloned().unwrap_or(Decision {
        strategy: proposed.strategy,
        placements: Vec::new(),
        unplaced: 0,
        reason: None,
    });
    let total = prio::units(proposed) + u64::from(proposed.unplaced);
    d.unplaced = u32::try_from(total.saturating_sub(prio::units(&d))).unwrap_or(u32::MAX);
    d.reason = Some(format!(
        "waiting behind {ahead} (priority {priority}): the room goes to it first"
    ));
    d
}

/// Whether what is left unplaced lacks room (not quota, not an eligible member): too little
/// room where it may run, or every member it may run in full — the case preemption is for.
fn lacks_room(o: &placement::Outcome) -> bool {
    match o.cause {
        Some(placement::Cause::InsufficientCapacity) => true,
        Some(placement::Cause::NoEligibleCluster) => o.excluded.iter().any(|e| e.full),
        _ => false,
    }
}

/// Chooses victims of lower priority in one member (`placement::preempt`) and adds what
/// their room places to the decision; returns the choice and what each victim owes.
#[allow(clippy::too_many_arguments)] // the plan's parts, named at the one call
fn preempt(
    ctx: &HubContext,
    views: &[placement::ClusterView],
    ledger: &placement::Ledger,
    policy: &placement::PlacementPolicy,
    r: &Replan<'_>,
    quota: Option<&placement::QuotaView>,
    key: &str,
    outcome: &mut placement::Outcome,
) -> Option<(
    crate::placement::preempt::Preemption,
    Vec<(String, Eviction)>,
)> {
    use crate::placement::preempt::{self, VictimKind};
    let ready: BTreeSet<&str> = views
        .iter()
        .filter(|v| v.ready)
        .map(|v| v.name.as_str())
        .collect();
    let members: Vec<(String, Vec<crate::hub::members::WorkloadPod>)> = ctx
        .registry
        .all()
        .iter()
        .filter(|m| ready.contains(m.name.as_str()))
        .map(|m| (m.name.clone(), m.workload_pods()))
        .collect();
    let placed = ctx.priority.placed.lock().ok()?.clone();
    let candidates = prio::candidates(&members, &placed, r.priority.value, key);
    if candidates.iter().all(|m| m.candidates.is_empty()) {
        tracing::debug!(workload = %key, members = members.len(), pods = members.iter().map(|m| m.1.len()).sum::<usize>(), known = placed.len(), "no lower-priority pods to preempt");
        no_preemption(
            &mut outcome.decision,
            "no lower-priority pods run in a member it may use",
        );
        return None;
    }
    // A victim's pods counted twice (reported and still reserved) are given back once.
    let mut views = views.to_vec();
    preempt::give_back_counted_twice(&mut views, ledger, &candidates);
    let started = std::time::Instant::now();
    let chosen = preempt::choose(&preempt::PreemptInput {
        clusters: &views,
        policy,
        demand: r.demand,
        quota,
        priority: r.priority.value,
        want: outcome.decision.unplaced,
        members: &candidates,
    });
    ctx.hub_metrics
        .preemption_seconds
        .observe(started.elapsed().as_secs_f64());
    let Some(chosen) = chosen else {
        tracing::debug!(workload = %key, candidates = ?candidates.iter().map(|m| (m.member.as_str(), m.candidates.iter().map(|c| (c.key.as_str(), c.priority, c.pods.len())).collect::<Vec<_>>())).collect::<Vec<_>>(), want = outcome.decision.unplaced, nodes = ?views.iter().map(|v| (v.name.as_str(), v.nodes.iter().map(|n| (n.name.as_str(), n.free.cpu.0 / 1000)).collect::<Vec<_>>())).collect::<Vec<_>>(), "no member where preempting lower priority makes room");
        no_preemption(
            &mut outcome.decision,
            "no member where evicting lower-priority pods (services within their disruption budgets, gangs whole) makes room",
        );
        return None;
    };
    prio::add_units(
        &mut outcome.decision,
        &chosen.member,
        chosen.units,
        &r.demand.count,
    );
    outcome
        .bindings
        .extend(chosen.outcome.bindings.iter().cloned());
    let owed = chosen
        .victims
        .iter()
        .map(|v| {
            let whole = matches!(placed.get(&v.key).map(|i| &i.kind), Some(VictimKind::Gang));
            (
                v.key.clone(),
                Eviction {
                    id: r.eviction_id.clone(),
                    by: key.to_string(),
                    by_priority: r.priority.value,
                    member: chosen.member.clone(),
                    shards: v.shards.clone(),
                    replicas: if whole || !v.shards.is_empty() {
                        0
                    } else {
                        v.replicas
                    },
                    whole,
                    pods: v.pods,
                    reason: format!(
                        "room for {key} (priority {}) in {}",
                        r.priority.value, chosen.member
                    ),
                },
            )
        })
        .collect();
    Some((chosen, owed))
}

/// Writes what `victim` (`Kind/namespace/name`) owes as an annotation on it, by merge
/// patch (an annotation of its own per preemption: writers never clash). The write
/// triggers the victim's reconcile. A victim gone meanwhile owes nothing.
async fn write_owed(ctx: &HubContext, victim: &str, e: &Eviction) -> Result<(), HubError> {
    let Some(at) = prio::event_of(victim) else {
        return Ok(());
    };
    let resource = crate::with_kind!(at.kind, K => kube::core::ApiResource::erase::<K>(&()));
    let api = kube::Api::<kube::core::DynamicObject>::namespaced_with(
        ctx.hub.clone(),
        &at.namespace,
        &resource,
    );
    let (name, value) = e.annotation();
    let patch = serde_json::json!({"metadata": {"annotations": {name: value}}});
    match api
        .patch(&at.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(HubError::RecordEviction(e)),
    }
}

/// Says in the decision's reason why preemption could not help (the queue shows it as
/// what the workload waits for).
fn no_preemption(d: &mut Decision, why: &str) {
    let reason = d.reason.get_or_insert_with(String::new);
    if !reason.is_empty() {
        reason.push_str("; ");
    }
    reason.push_str("preemption: ");
    reason.push_str(why);
}

/// Every FederatedQuota of a namespace, by name, with the namespace's usage book seeded
/// when there is one.
async fn quotas_of(
    ctx: &HubContext,
    ns: &str,
    profiles: &[RuntimeProfile],
) -> Result<Vec<Arc<FederatedQuota>>, HubError> {
    let mut quotas: Vec<Arc<FederatedQuota>> = ctx
        .quotas
        .state()
        .into_iter()
        .filter(|q| q.namespace().as_deref() == Some(ns))
        .collect();
    quotas.sort_by_key(|q| q.name_any());
    if quotas.is_empty() {
        return Ok(quotas);
    }
    // Names, labels, region and zone are what overrides need of the members.
    let members: Vec<crate::placement::ClusterView> = ctx
        .members
        .state()
        .iter()
        .map(|mc| crate::placement::from_member::cluster_view(mc, true, Vec::new()))
        .collect();
    quota::seed_namespace(&ctx.hub, &ctx.quota_book, profiles, &members, ns)
        .await
        .map_err(HubError::QuotaUsage)?;
    Ok(quotas)
}

/// Stage 3, **decide**: keep the decision or plan again, recorded before any slice
/// moves. An invalid workload ends the reconcile here (Invalid, and a Warning once per
/// change of what is wrong).
pub(super) async fn stage<K: PinterestKind>(
    ctx: &HubContext,
    obj: &K,
    read: &mut super::read::Read<K>,
) -> Result<super::Step<Box<Placed>>, HubError> {
    use super::Step;
    use kube::runtime::controller::Action;
    use tracing::Instrument;
    // Decide: keep or plan again, recorded before any slice moves.
    let decided = match decide(
        ctx,
        obj,
        &read.standings,
        &read.remembered,
        read.now,
        read.has_finalizer,
        Seen {
            stored: read.stored_part.placement.as_ref(),
            app_due: read.app_look.due.as_ref(),
        },
    )
    .instrument(tracing::trace_span!(target: "pinfed::trace", "decide"))
    .await?
    {
        Outcome::Invalid(message) => {
            // Said once per change of what is wrong, not on every resync.
            let said = read.stored_part.conditions.iter().any(|c| {
                c.type_ == crate::api::common::condition_types::INVALID
                    && c.status == crate::api::common::ConditionStatus::True
                    && c.message == message
            });
            super::write_invalid(
                ctx,
                obj,
                &read.stored_part.conditions,
                &message,
                &read.now_time,
            )
            .await?;
            if !said {
                ctx.event(obj, EventType::Warning, "InvalidSpec", message.clone())
                    .await;
            }
            return Ok(Step::Done(Action::await_change()));
        }
        Outcome::Decided(d) => d,
    };
    let mut decided = decided;
    if records_first(
        K::KIND.runs_to_completion(),
        read.stored_part.placement.as_ref(),
        &decided.decision,
    ) {
        // The status as stored, with the new decision: what runs stays reported.
        let placement =
            super::write::recorded_decision(obj, &read.stored_part, &decided, &read.now_time);
        let mut status = serde_json::to_value(&read.stored_status)?;
        if let Some(s) = status.as_object_mut() {
            s.insert("placement".into(), serde_json::to_value(placement)?);
        }
        let status: K::Status = serde_json::from_value(status)?;
        decided.written = super::write_hub_status(ctx, obj, decided.written.as_deref(), &status)
            .instrument(tracing::trace_span!(target: "pinfed::trace", "record_decision"))
            .await?;
        read.stored_part = K::hub_part(&status);
        read.stored_status = status;
    }
    Ok(Step::Next(decided))
}

/// Whether a decision is recorded in the status before any slice moves, rather than with
/// the status that follows the slices (which waits under a burst). Work that runs to
/// completion, when the decision changes one the status records: a leader stopped
/// between the slices and that write left the next one a decision older than the slices,
/// which it rolled back out — a shard the newer decision had moved and that finished
/// there was then counted nowhere and run nowhere. (A first decision needs no record
/// first: a leader that finds none plans from the slices out in the members.)
fn records_first(
    runs_to_completion: bool,
    stored: Option<&crate::api::common::PlacementDecision>,
    decision: &Decision,
) -> bool {
    runs_to_completion && stored.is_some_and(|s| recorded::from_status(s) != *decision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::Placement;

    #[test]
    fn placed_text_names_each_cluster_and_what_is_unplaced() {
        let d = Decision {
            strategy: placement::model::Strategy::Divided,
            placements: vec![
                Placement {
                    cluster: "use1a".into(),
                    replicas: Some(4),
                    shards: None,
                    pods: None,
                },
                Placement {
                    cluster: "use1b".into(),
                    replicas: None,
                    shards: Some("0-9".into()),
                    pods: None,
                },
            ],
            unplaced: 2,
            reason: Some("cpu quota".into()),
        };
        assert_eq!(
            placed_text(&d),
            "use1a 4 · use1b shards 0-9 (2 unplaced: cpu quota)"
        );
        assert_eq!(recorded::from_status(&recorded::to_status(&d)), d);
    }

    fn change(changed: bool, newly_held: bool) -> Change<'static> {
        static NONE: BTreeSet<String> = BTreeSet::new();
        Change {
            moved: None,
            leaving: None,
            app_failover: false,
            rebalance: None,
            failback: &NONE,
            changed,
            newly_held,
        }
    }

    #[test]
    fn a_changed_decision_of_work_that_runs_to_completion_is_recorded_before_its_slices_move() {
        let shards = |a: &str, b: &str| Decision::of_shards(&[("use1a", a), ("use1b", b)]);
        let before = shards("0-2", "3-5");
        let stored = recorded::to_status(&before);
        // A failover moved shard 5: recorded first.
        assert!(records_first(true, Some(&stored), &shards("0-2,5", "3-4")));
        // Kept as recorded: nothing to write.
        assert!(!records_first(true, Some(&stored), &before));
        // Recorded with its generation and reasons, the placements alone decide.
        let with_more = PlacementDecision {
            generation: Some(3),
            ..stored.clone()
        };
        assert!(!records_first(true, Some(&with_more), &before));
        // A first decision: a leader that finds none plans from the slices.
        assert!(!records_first(true, None, &before));
        // Replicas move back and forth without harm: recorded with the status.
        assert!(!records_first(
            false,
            Some(&stored),
            &shards("0-2,5", "3-4")
        ));
    }

    #[test]
    fn a_first_decision_is_no_event_but_a_change_or_a_refusal_is() {
        let d = Decision {
            strategy: placement::model::Strategy::Divided,
            placements: vec![Placement {
                cluster: "use1a".into(),
                replicas: Some(3),
                shards: None,
                pods: None,
            }],
            unplaced: 0,
            reason: None,
        };
        let reasons = |c: &Change<'_>| -> Vec<&'static str> {
            events_for("ns/w", c, &d).iter().map(|e| e.reason).collect()
        };
        assert!(reasons(&change(false, false)).is_empty());
        assert_eq!(reasons(&change(true, false)), ["Placed"]);
        assert_eq!(reasons(&change(false, true)), ["QuotaExceeded"]);
        let moved = Change {
            moved: Some("use1b lost: use1a 3".into()),
            ..change(false, false)
        };
        assert_eq!(reasons(&moved), ["FailedOver"]);
        // A rebalance request is answered with an Event, moved or not.
        let asked = |changed| Change {
            rebalance: Some(("r1".into(), "use1b 3".into())),
            ..change(changed, false)
        };
        let notes = |c: &Change<'_>| -> Vec<String> {
            events_for("ns/w", c, &d)
                .into_iter()
                .map(|e| e.note)
                .collect()
        };
        assert_eq!(reasons(&asked(true)), ["Rebalanced"]);
        assert_eq!(
            notes(&asked(true)),
            ["rebalanced (request r1): use1b 3 → use1a 3"]
        );
        assert_eq!(
            notes(&asked(false)),
            ["rebalanced (request r1): nothing to move, use1b 3"]
        );
        // Leaving a member: a must-leave one is Normal, application failover a Warning;
        // either kept there for want of room says so.
        let leaving = |blocked, app_failover| Change {
            leaving: Some((blocked, "why".into())),
            app_failover,
            ..change(true, false)
        };
        assert_eq!(reasons(&leaving(false, false)), ["LeftMember"]);
        assert_eq!(reasons(&leaving(true, false)), ["LeaveBlocked"]);
        assert_eq!(reasons(&leaving(false, true)), ["ApplicationFailover"]);
        assert_eq!(
            reasons(&leaving(true, true)),
            ["ApplicationFailoverBlocked"]
        );
        let warning = events_for("ns/w", &leaving(false, true), &d);
        assert!(matches!(warning[0].type_, EventType::Warning));
    }
}

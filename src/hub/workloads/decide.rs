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
use crate::placement::from_quota;
use crate::placement::{self, Decision, PlanInput, recorded};

/// What was decided for the workload before this reconcile (this process's memory
/// first: the watch cache may not show our own writes yet).
pub struct Remembered {
    pub previous: Option<PlacementDecision>,
    /// The generation `previous` was made for.
    pub decided_for: Option<i64>,
    pub failed_over_from: BTreeSet<String>,
    pub failover_message: Option<String>,
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
            };
        }
        let annotations = obj.annotations();
        Remembered {
            previous: stored_decision,
            decided_for: annotations
                .get(ANNOTATION_PLACEMENT_GENERATION)
                .and_then(|g| g.parse::<i64>().ok()),
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
    Decided(Placed),
}

pub async fn decide<K: PinterestKind>(
    ctx: &HubContext,
    obj: &K,
    standings: &Standings,
    remembered: &Remembered,
    now: Timestamp,
    finalizer_written: bool,
) -> Result<Outcome, HubError> {
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
    let unchanged = remembered.previous.as_ref().filter(|p| {
        remembered.decided_for == Some(generation)
            && p.unplaced == 0
            && !spread_short(p)
            && lost_placed.is_empty()
            && failback.is_empty()
    });
    // Members the workload must leave although nothing else changed: a NoExecute taint it
    // does not tolerate, a selector the member no longer matches.
    let leaving: BTreeMap<String, String> = match unchanged {
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
                ideal: !failback.is_empty()
                    && matches!(
                        demand.count,
                        placement::Count::Replicas(_) | placement::Count::Whole
                    ),
                lost_placed: &lost_placed,
                failback: &failback,
                leaving: &leaving,
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
    let requeue = requeue_after(
        ctx,
        standings.requeue,
        &decision,
        policy.spread.min_clusters,
    );
    Ok(Outcome::Decided(Placed {
        decision,
        quota_exceeded,
        failed_over_from: remembered.failed_over_from.clone(),
        failover_message: remembered.failover_message.clone(),
        lost_placed,
        failback,
        requeue,
        written,
        reasons,
    }))
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
    /// Plan from scratch (failback), not from the current decision.
    ideal: bool,
    lost_placed: &'a BTreeSet<String>,
    failback: &'a BTreeSet<String>,
    /// Placed members the workload must leave, with why ([`placement::must_leave`]).
    leaving: &'a BTreeMap<String, String>,
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
    let mut outcome = {
        let mut ledger = ctx.ledger.lock().expect("ledger lock");
        ledger.expire(SystemTime::now() - Duration::from_secs(30));
        ledger.apply(&mut views, Some(&key));
        // Quota usage is read and charged under the same lock as capacity.
        let used = ctx.quota_book.usage(&ns, Some(&key));
        let quota_view = from_quota::tightest(
            r.quotas
                .iter()
                .filter_map(|q| {
                    from_quota::quota_view(q, Some(&used))
                        .map_err(|e| tracing::warn!(quota = %q.name_any(), error = %e, "quota ignored: it does not parse"))
                        .ok()
                })
                .collect(),
        );
        let mut outcome = placement::plan(&PlanInput {
            clusters: &views,
            policy: r.policy,
            demand: r.demand,
            quota: quota_view.as_ref(),
            current: if r.ideal { None } else { before.as_ref() },
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
        ledger.reserve(&key, &outcome, SystemTime::now());
        ctx.quota_book
            .set(&key, &ns, from_quota::usage_of(&outcome.decision, r.demand));
        outcome
    };
    if let (Some(b), placement::Count::Shards { completed, .. }) = (&before, &r.demand.count) {
        let completed = RangeSet::from_indices(completed.iter().copied());
        failover::keep_settling_shards(&mut outcome.decision, b, &completed, &standings.settling);
        failover::keep_completed_shards(&mut outcome.decision, b, &completed, r.lost_placed);
    }
    let quota_exceeded = outcome.cause == Some(placement::Cause::QuotaExceeded);
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
    let mut patch = serde_json::json!({"metadata": {"annotations": {
        ANNOTATION_PLACEMENT_GENERATION: obj.meta().generation.unwrap_or(0).to_string(),
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
    let written = ctx.record_write(
        obj,
        None,
        &stored,
        Wrote::Metadata {
            finalizer: needs_finalizer,
        },
    );
    tracing::info!(workload = %key, decision = %outcome.decision.to_json(), took = ?started.elapsed(), "placed");
    if let Ok(mut d) = ctx.decisions.lock() {
        d.insert(
            key.clone(),
            Decided {
                placement_generation: obj.meta().generation.unwrap_or(0),
                failed_over_from: failed_over,
                failover_message: message,
                decision: crate::api::common::PlacementDecision {
                    members: reasons.clone(),
                    ..recorded::to_status(&outcome.decision)
                },
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
        failback: r.failback,
        first_or_new: before.as_ref() != Some(&outcome.decision),
        newly_held: quota_exceeded && !held_before,
    };
    ctx.status_deferrals.decided(std::time::Instant::now());
    ctx.status_deferrals
        .owe_events(&key, events_for(&key, &change, &outcome.decision));
    Ok((outcome.decision, quota_exceeded, written, reasons))
}

/// What a new decision changed, for Events.
struct Change<'a> {
    /// The failover text when placed clusters were lost.
    moved: Option<String>,
    /// Why it leaves members (must_leave), and whether it could not (nowhere to go).
    leaving: Option<(bool, String)>,
    failback: &'a BTreeSet<String>,
    first_or_new: bool,
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
        if *blocked {
            say(EventType::Warning, "LeaveBlocked", why.clone());
        } else {
            say(EventType::Normal, "LeftMember", why.clone());
        }
    } else if c.first_or_new {
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
}

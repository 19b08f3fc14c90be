//! The rollout stage of the hub's workload loop: the revision the spec asks for, each
//! placed member's gate from its slice ([`member_facts`], pure), one look at the rollout
//! ([`crate::rollout::step`]), the revision recorded before any slice carries it, and
//! the content each member is told to run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::health::Standings;
use super::rollout::Slices;
use super::{HubContext, HubError, revisions, workload_key};
use crate::api::kind::{PinterestKind, Progress};
use crate::api::rollout::{ANNOTATION_APPROVED, ANNOTATION_PAUSED, RolloutStatus};
use crate::hub::slices::SliceSummary;
use crate::rollout::revision;
use crate::rollout::step::{self, MemberFacts, Outcome};
use crate::status::member_state;

/// What the rollout decided for this reconcile.
pub struct Staged {
    pub outcome: Outcome,
    /// The RuntimeProfile content the spec's own revision resolves to (`version@digest`):
    /// pinned in the slices that run it, so a new default profile, or a profile edited
    /// in place, reaches a member only when its stage comes (never by the member's agent
    /// picking the new default or the new content itself).
    pub runtime: String,
    /// The revision content each member runs where it is not the spec's own (members on
    /// an older revision during a rollout or after a rollback).
    pub overlays: BTreeMap<String, Arc<serde_json::Value>>,
    /// Members told to run a revision whose record is gone: their slices are left as
    /// they are.
    pub keep: BTreeSet<String>,
}

/// The exact RuntimeProfile content `obj` resolves to on the hub, as a pin
/// `version@digest` ([`crate::expand::pin_of`]): an edit of the profile in place is a new
/// revision like a new version. A pin to a version the hub does not have stays the pin
/// (the member's agent reports it).
fn runtime_of<K: PinterestKind>(ctx: &HubContext, obj: &K) -> String {
    let profiles: Vec<crate::api::runtime_profile::RuntimeProfile> =
        ctx.profiles.state().iter().map(|p| (**p).clone()).collect();
    match crate::expand::select_profile(&profiles, obj.runtime_version()) {
        Ok(p) => crate::expand::pin_of(p),
        Err(_) => obj.runtime_version().unwrap_or_default().to_string(),
    }
}

/// The `(revision, stage)` a person approved, from the workload's annotation.
fn approved<K: PinterestKind>(obj: &K) -> Option<(i64, i32)> {
    let a = obj.annotations().get(ANNOTATION_APPROVED)?;
    let (rev, stage) = a.split_once('/')?;
    Some((rev.trim().parse().ok()?, stage.trim().parse().ok()?))
}

/// Decides the rollout for this reconcile and records a new revision.
pub async fn stage<K: PinterestKind>(
    ctx: &HubContext,
    obj: &K,
    decision: &crate::placement::Decision,
    standings: &Standings,
    slices: &Slices,
    stored: Option<&RolloutStatus>,
    now: &Time,
) -> Result<Staged, HubError> {
    let spec = serde_json::to_value(obj)?
        .get("spec")
        .cloned()
        .unwrap_or_default();
    let runtime = runtime_of(ctx, obj);
    let content = revision::content(&spec, &runtime);
    let hash = revision::hash(&content);
    let fresh_since = now.0.as_second() - ctx.stale_after_secs;
    let health_check = obj
        .rollout()
        .unwrap_or(&ctx.default_rollout)
        .health_check
        .as_deref();
    let placed: BTreeMap<String, MemberFacts> = decision
        .placements
        .iter()
        .map(|p| {
            let labels = ctx
                .members
                .get(&kube::runtime::reflector::ObjectRef::new(&p.cluster))
                .and_then(|mc| mc.metadata.labels.clone())
                .unwrap_or_default();
            let agent_fresh = ctx
                .registry
                .get(&p.cluster)
                .and_then(|m| m.agent_renewed())
                .is_some_and(|t| t.as_second() >= fresh_since);
            let fresh = standings.ready.contains(&p.cluster) && agent_fresh;
            let slice = slices.get(&p.cluster).map(|s| &**s);
            // Shards failed before the member was told to run the revision it is on.
            let before = stored
                .and_then(|r| r.members.iter().find(|m| m.cluster == p.cluster))
                .and_then(|m| m.failed_shards_before.as_deref());
            let mut facts = member_facts(obj.progress(), slice, before);
            if let (Some(expr), Some(slice)) = (health_check, slice)
                && facts.healthy
            {
                user_health(expr, &p.cluster, slice, now, &mut facts);
            }
            (
                p.cluster.clone(),
                MemberFacts {
                    labels,
                    fresh,
                    ..facts
                },
            )
        })
        .collect();
    let policy = obj.rollout().unwrap_or(&ctx.default_rollout);
    let paused = obj
        .annotations()
        .get(ANNOTATION_PAUSED)
        .is_some_and(|v| v == "true");
    let mut outcome = step::step(&step::Input {
        policy,
        stored,
        revision_hash: &hash,
        placed: &placed,
        approved: approved(obj),
        paused,
        now,
    });
    outcome.status.running = running(decision, &placed);
    let target = outcome.status.revision;
    let in_use: BTreeSet<i64> = outcome
        .assign
        .values()
        .copied()
        .chain(outcome.status.members.iter().map(|m| m.from_revision))
        .chain(outcome.status.stable_revision)
        .collect();
    if outcome.new_revision {
        revisions::record(ctx, obj, target, &content, policy.history_limit(), &in_use).await?;
    }
    let mut overlays = BTreeMap::new();
    let mut keep = BTreeSet::new();
    for (member, rev) in &outcome.assign {
        if *rev == target {
            continue;
        }
        match revisions::content(ctx, obj, *rev).await? {
            Some(c) => {
                overlays.insert(member.clone(), c);
            }
            None => {
                tracing::warn!(workload = %workload_key(obj), member = %member, revision = rev, "the revision this member runs has no record left; its slice is left as it is");
                keep.insert(member.clone());
            }
        }
    }
    Ok(Staged {
        outcome,
        runtime,
        overlays,
        keep,
    })
}

/// The policy's health check over the member's `clusters[]` entry: not healthy unless it
/// holds (the detail says why).
fn user_health(
    expr: &str,
    cluster: &str,
    slice: &SliceSummary,
    now: &Time,
    facts: &mut MemberFacts,
) {
    let entry = crate::hub::slices::member_workload_status(cluster, slice, now);
    let verdict = serde_json::to_value(&entry)
        .map_err(|e| e.to_string())
        .and_then(|v| crate::rollout::health::judge(expr, &v));
    match verdict {
        Ok(true) => {}
        Ok(false) => {
            facts.healthy = false;
            facts.detail = Some(format!("healthCheck {expr:?} is false"));
        }
        Err(e) => {
            facts.healthy = false;
            facts.detail = Some(format!("healthCheck {expr:?}: {e}"));
        }
    }
}

/// What runs where by revision: each placed member's reported revision with its share
/// (replicas, or shards of a job set).
pub fn running(
    decision: &crate::placement::Decision,
    placed: &BTreeMap<String, MemberFacts>,
) -> Vec<crate::api::rollout::RevisionCount> {
    let mut by: BTreeMap<i64, crate::api::rollout::RevisionCount> = BTreeMap::new();
    for p in &decision.placements {
        let Some(rev) = placed.get(&p.cluster).and_then(|f| f.running) else {
            continue;
        };
        let share = p.replicas.map(i64::from).or_else(|| {
            p.shards
                .as_deref()
                .and_then(|s| crate::api::ranges::RangeSet::parse(s).ok())
                .map(|s| i64::try_from(s.len()).unwrap_or(i64::MAX))
        });
        let e = by
            .entry(rev)
            .or_insert_with(|| crate::api::rollout::RevisionCount {
                revision: rev,
                ..Default::default()
            });
        e.clusters.push(p.cluster.clone());
        if let Some(n) = share {
            e.replicas = Some(e.replicas.unwrap_or(0) + n);
        }
    }
    by.into_values().collect()
}

/// Members that passed their gate in this look: (seconds since each was told to run the
/// new revision, member).
pub fn passed_now(before: Option<&RolloutStatus>, now: &RolloutStatus) -> Vec<(f64, String)> {
    use crate::api::rollout::gate;
    now.members
        .iter()
        .filter(|m| m.state == gate::PASSED)
        .filter(|m| {
            !before.is_some_and(|b| {
                b.revision == now.revision
                    && b.members
                        .iter()
                        .any(|x| x.cluster == m.cluster && x.state == gate::PASSED)
            })
        })
        .filter_map(|m| {
            let (from, to) = (m.updated_time.as_ref()?, m.since.as_ref()?);
            let secs = (to.0.as_millisecond() - from.0.as_millisecond()) as f64 / 1000.0;
            Some((secs.max(0.0), m.cluster.clone()))
        })
        .collect()
}

/// What a member's slice says for the gate: the revision it runs (once processed),
/// whether that revision is fully updated and available there, and why it fails.
/// Freshness and labels are the caller's.
pub fn member_facts(
    progress: Progress,
    slice: Option<&SliceSummary>,
    failed_before: Option<&str>,
) -> MemberFacts {
    let Some(s) = slice else {
        return MemberFacts {
            detail: Some("no slice seen yet".into()),
            ..Default::default()
        };
    };
    let processed = s.processed();
    let running = s.revision().filter(|_| processed);
    let c = &s.report.counts;
    let state = s.report.state;
    let message = s.report.message.clone().unwrap_or_default();
    // A profile version the member's agent has not received yet (the hub propagates new
    // profiles within seconds): waited for, not a failure; the deadline still holds.
    let profile_pending =
        state == member_state::REFUSED && message.starts_with("UnknownRuntimeVersion");
    let failing = match state {
        _ if profile_pending => None,
        // A job set is Failed for its failed shards: judged by those failed since the
        // member was told to run this revision.
        member_state::FAILED if matches!(progress, Progress::Shards { .. }) => {
            new_failures(c.failed_shards.as_deref(), failed_before)
                .map(|f| format!("shards {f} failed"))
        }
        member_state::REFUSED | member_state::FAILED => Some(format!(
            "{state}: {}",
            s.report.message.clone().unwrap_or_default()
        )),
        _ => new_failures(c.failed_shards.as_deref(), failed_before)
            .map(|f| format!("shards {f} failed")),
    };
    let (healthy, detail) = match progress {
        Progress::Replicas { .. } => {
            let desired = s
                .share
                .replicas
                .and_then(|r| i32::try_from(r).ok())
                .or(c.replicas)
                .unwrap_or(0);
            let updated = c.updated_replicas.unwrap_or(0);
            let available = c.available_replicas.unwrap_or(0);
            let total = c.replicas.unwrap_or(0);
            // Old pods gone too (a Deployment still replacing them counts them in `replicas`).
            let ok = processed && updated >= desired && available >= desired && total <= desired;
            (
                ok,
                (!ok).then(|| {
                    format!("{updated}/{desired} updated, {available}/{desired} available")
                }),
            )
        }
        Progress::Shards { .. } | Progress::RunToCompletion => {
            let ok = processed && failing.is_none();
            (
                ok,
                (!processed).then(|| "its agent has not processed it yet".into()),
            )
        }
    };
    MemberFacts {
        running,
        healthy: healthy && failing.is_none() && !profile_pending,
        failing,
        failed_shards: c.failed_shards.clone().filter(|f| !f.is_empty()),
        detail: if profile_pending {
            Some(message)
        } else if processed {
            detail
        } else {
            Some("its agent has not processed it yet".into())
        },
        ..Default::default()
    }
}

/// The failed shards `failed` lists that `before` does not (both shard ranges, e.g.
/// `0-3,7`); `None` when there are none. Ranges that do not parse count whole.
fn new_failures(failed: Option<&str>, before: Option<&str>) -> Option<String> {
    use crate::api::ranges::RangeSet;
    let failed = failed.filter(|f| !f.is_empty())?;
    let Some(before) = before.and_then(|b| RangeSet::parse(b).ok()) else {
        return Some(failed.to_string());
    };
    match RangeSet::parse(failed) {
        Ok(now) => {
            let new = now.difference(&before);
            (!new.is_empty()).then(|| new.to_string())
        }
        Err(_) => Some(failed.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::kind::{SliceCounts, SliceShare};
    use crate::hub::slices::SliceReport;

    fn slice(
        rev: i64,
        processed: bool,
        share: u32,
        counts: SliceCounts,
        state: &'static str,
    ) -> SliceSummary {
        SliceSummary {
            hub_uid: Some("u".into()),
            generation: Some(2),
            hub_generation: Some(1),
            spec_digest: 0,
            labels: Default::default(),
            annotations: [(
                crate::api::rollout::ANNOTATION_REVISION.to_string(),
                rev.to_string(),
            )]
            .into(),
            share: SliceShare {
                replicas: Some(share),
                ..Default::default()
            },
            report: SliceReport {
                observed_generation: Some(if processed { 2 } else { 1 }),
                state,
                message: Some("why".into()),
                not_ready_since: None,
                counts,
            },
        }
    }

    fn counts(updated: i32, available: i32) -> SliceCounts {
        SliceCounts {
            replicas: Some(3),
            updated_replicas: Some(updated),
            available_replicas: Some(available),
            ..Default::default()
        }
    }

    #[test]
    fn a_member_is_healthy_only_with_every_replica_updated_and_available_on_its_revision() {
        let p = Progress::Replicas { desired: 6 };
        let ok = member_facts(p, Some(&slice(2, true, 3, counts(3, 3), "Ready")), None);
        assert_eq!((ok.running, ok.healthy), (Some(2), true));
        // Old pods still available, the new ones not: not healthy.
        let rolling = member_facts(
            p,
            Some(&slice(2, true, 3, counts(1, 3), "Progressing")),
            None,
        );
        assert!(!rolling.healthy);
        assert_eq!(
            rolling.detail.as_deref(),
            Some("1/3 updated, 3/3 available")
        );
        // Not processed yet: it runs no revision as far as the gate knows.
        let unseen = member_facts(p, Some(&slice(2, false, 3, counts(3, 3), "Ready")), None);
        assert_eq!((unseen.running, unseen.healthy), (None, false));
        // Refused by the member's policy: failing.
        let refused = member_facts(
            p,
            Some(&slice(2, true, 3, counts(0, 0), member_state::REFUSED)),
            None,
        );
        assert_eq!(refused.failing.as_deref(), Some("Refused: why"));
        assert!(member_facts(p, None, None).detail.is_some());
    }

    #[test]
    fn rollout_gauges_follow_each_workloads_phase_and_passes_are_timed_once() {
        let mut registry = prometheus_client::registry::Registry::default();
        let m = super::super::HubMetrics::register(&mut registry);
        let g = |p: &str| {
            m.rollouts
                .get_or_create(&super::super::RolloutPhaseLabels { phase: p.into() })
                .get()
        };
        m.rollout_phase("a", Some("Progressing"));
        m.rollout_phase("b", Some("Progressing"));
        m.rollout_phase("a", Some("Progressing"));
        assert_eq!(g("Progressing"), 2);
        m.rollout_phase("a", Some("Complete"));
        m.rollout_phase("b", None);
        assert_eq!((g("Progressing"), g("Complete")), (0, 0));

        let t =
            |s: i64| Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + s).unwrap());
        let member = |state: &str| crate::api::rollout::RolloutMember {
            cluster: "a".into(),
            state: state.into(),
            updated_time: Some(t(0)),
            since: Some(t(12)),
            ..Default::default()
        };
        let status = |state: &str| RolloutStatus {
            revision: 2,
            members: vec![member(state)],
            ..Default::default()
        };
        let passed = passed_now(Some(&status("Soaking")), &status("Passed"));
        assert_eq!(passed, vec![(12.0, "a".to_string())]);
        assert!(passed_now(Some(&status("Passed")), &status("Passed")).is_empty());
    }

    #[test]
    fn failed_shards_fail_a_job_set_member() {
        let c = SliceCounts {
            failed_shards: Some("3-4".into()),
            ..Default::default()
        };
        let f = member_facts(
            Progress::Shards { total: 10 },
            Some(&slice(2, true, 0, c.clone(), "Progressing")),
            None,
        );
        assert_eq!(f.failing.as_deref(), Some("shards 3-4 failed"));
        assert!(!f.healthy);
        assert_eq!(f.failed_shards.as_deref(), Some("3-4"));
        // Failed before the member was told to run this revision: not charged to it
        // (the slice says Failed for them).
        let f = member_facts(
            Progress::Shards { total: 10 },
            Some(&slice(2, true, 0, c.clone(), member_state::FAILED)),
            Some("3-4"),
        );
        assert_eq!(f.failing, None);
        assert!(f.healthy);
        // A shard failing since is.
        let f = member_facts(
            Progress::Shards { total: 10 },
            Some(&slice(2, true, 0, c, member_state::FAILED)),
            Some("4"),
        );
        assert_eq!(f.failing.as_deref(), Some("shards 3 failed"));
    }
}

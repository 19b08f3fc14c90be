//! Stage 5, **aggregate and write**: the members' slices folded into the kind's typed hub
//! status (pure: [`crate::status::hub_status`]), written when it changed (a status that
//! carries a new placement may wait under a burst: [`super::status_defer`]; one that only
//! reports the members, for reports close behind it: [`super::report_pace`]), then the
//! Events and metrics the stages left for it.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use tracing::Instrument;

use super::decide::Placed;
use super::read::Read;
use super::rollout::RolledOut;
use super::{
    HubContext, HubError, RolloutLabels, hub_api, priority, rollout, staged, workload_key,
    write_hub_status,
};
use crate::api::kind::{HubPart, PinterestKind};
use crate::api::workload::Counted;
use crate::status::AggregateInput;
use crate::status::hub_status::{FailoverView, HubStatusInput, hub_status};

pub(super) async fn write<K: PinterestKind>(
    ctx: &HubContext,
    obj: &K,
    read: Read<K>,
    decided: &Placed,
    rolled: RolledOut,
) -> Result<Action, HubError> {
    let Read {
        now_time,
        stored_status,
        stored_part,
        standings,
        slices,
        ..
    } = read;
    let RolledOut { staged, requeue } = rolled;
    let key = workload_key(obj);

    // Aggregate and write.
    let started = std::time::Instant::now();
    let agent_times = ctx
        .registry
        .all()
        .iter()
        .filter_map(|m| Some((m.name.clone(), Time(m.agent_renewed()?))))
        .collect();
    let observations = rollout::observations(
        &decided.decision,
        &standings,
        &slices,
        &stored_part.clusters,
        &agent_times,
        &now_time,
    );
    let api_decision = recorded_decision(obj, &stored_part, decided, &now_time);
    // Completed shards as recorded, never beyond the job set's shard count.
    let shards = match obj.progress() {
        crate::api::kind::Progress::Shards { total } => total,
        _ => 0,
    };
    let previous_completed = K::totals(&stored_status)
        .completed_shards
        .intersection(&crate::api::ranges::RangeSet::full(shards));
    let generation = obj.meta().generation.unwrap_or(0);
    let counts = |c: &BTreeSet<String>| -> BTreeSet<String> {
        c.iter()
            .filter(|c| standings.counts_for_failback(c))
            .cloned()
            .collect()
    };
    let input = HubStatusInput::<K> {
        stored: &stored_status,
        aggregate: AggregateInput {
            hub_generation: generation,
            previous_observed_generation: stored_part.observed_generation,
            previous_completed: &previous_completed,
            progress: obj.progress(),
            decision: &api_decision,
            quota_exceeded: decided.quota_exceeded,
            members: &observations,
            now: &now_time,
            stale_after_secs: ctx.stale_after_secs,
        },
        failover: FailoverView {
            message: decided.failover_message.as_deref(),
            failed_over_from: counts(&decided.failed_over_from),
            lost_now: counts(&decided.lost_placed),
            failing_back: decided.failback.clone(),
        },
        rollout: Some(staged.outcome.status.clone()),
    };
    let status = hub_status(&input);
    // Only a status that carries a new placement waits: one that reports the members
    // (their slices' status) goes out at once, a backlog or not.
    let new_placement = status
        .as_ref()
        .is_some_and(|st| K::hub_part(st).placement != stored_part.placement);
    if new_placement
        && let Some(left) =
            ctx.status_deferrals
                .hold(&key, ctx.queue(K::KIND).len(), std::time::Instant::now())
    {
        return Ok(Action::requeue(requeue.min(left)));
    }
    // One that only updates what the members report may wait for others close behind it
    // (a service's, stateful set's or daemon's: a job's shard records go at once).
    let routine = status.as_ref().is_some_and(|st| {
        matches!(K::KIND.counted(), Counted::Replicas | Counted::Nodes)
            && super::report_pace::routine(&stored_part, &K::hub_part(st))
    });
    if routine && let Some(left) = ctx.report_pace.wait(&key, std::time::Instant::now()) {
        ctx.hub_metrics.reports_paced.inc();
        return Ok(Action::requeue(requeue.min(left)));
    }
    let events = ctx.status_deferrals.done(&key);
    let written = match status {
        Some(st) => {
            if tracing::enabled!(tracing::Level::DEBUG) {
                let changed = crate::status::hub_status::status_changes(
                    &serde_json::to_value(&stored_status)?,
                    &serde_json::to_value(&st)?,
                );
                tracing::debug!(workload = %key, ?changed, "writing the hub status");
            }
            let written = write_hub_status(ctx, obj, decided.written.as_deref(), &st)
                .instrument(tracing::trace_span!(target: "pinfed::trace", "write_status"))
                .await
                .map(|_| ());
            if written.is_ok() {
                ctx.report_pace.wrote(&key, std::time::Instant::now());
            }
            written
        }
        None => Ok(()),
    };
    for e in events {
        ctx.event(obj, e.type_, e.reason, e.note).await;
    }
    ctx.hub_metrics
        .rollout_phase(&key, Some(&staged.outcome.status.phase));
    for (secs, _) in staged::passed_now(stored_part.rollout.as_ref(), &staged.outcome.status) {
        ctx.hub_metrics.rollout_member_seconds.observe(secs);
    }
    for n in &staged.outcome.notes {
        ctx.hub_metrics
            .rollout_transitions
            .get_or_create(&RolloutLabels {
                reason: n.reason.to_string(),
            })
            .inc();
        let type_ = if n.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        ctx.event(obj, type_, n.reason, n.message.clone()).await;
    }
    written?;
    // Recorded: the debts' annotations go (a reconcile that ended before this leaves
    // them, and the next records them).
    if !decided.owed_annotations.is_empty() {
        remove_owed(ctx, obj, &decided.owed_annotations).await;
    }
    ctx.hub_metrics
        .aggregation_seconds
        .observe(started.elapsed().as_secs_f64());
    Ok(Action::requeue(requeue))
}

/// The decision as the status records it: kept or made, a decision of this reconcile is
/// for the generation it read, with the evictions it applied.
pub(super) fn recorded_decision<K: PinterestKind>(
    obj: &K,
    stored_part: &HubPart,
    decided: &Placed,
    now_time: &Time,
) -> crate::api::common::PlacementDecision {
    crate::api::common::PlacementDecision {
        generation: obj.meta().generation,
        members: decided.reasons.clone(),
        queue: decided.queue.clone(),
        preemptions: priority::records(
            stored_part
                .placement
                .as_ref()
                .map_or(&[][..], |p| p.preemptions.as_slice()),
            &decided.evicted,
            now_time,
        ),
        rebalanced: decided.rebalanced.clone(),
        application_failovers: decided.application_failovers.clone(),
        ..crate::placement::recorded::to_status(&decided.decision)
    }
}

/// Removes owed-eviction annotations the status has recorded. One that stays (the write
/// failed) is removed by a later reconcile: recorded, it is never applied again.
async fn remove_owed<K: PinterestKind>(ctx: &HubContext, obj: &K, names: &[String]) {
    let nulls: serde_json::Map<String, serde_json::Value> = names
        .iter()
        .map(|n| (n.clone(), serde_json::Value::Null))
        .collect();
    let patch = serde_json::json!({"metadata": {"annotations": nulls}});
    if let Err(e) = hub_api(ctx, obj)
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        tracing::debug!(workload = %workload_key(obj), error = %e, "owed-eviction annotations not removed yet");
    }
}

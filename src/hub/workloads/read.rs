//! Stage 2, **read**: what one reconcile knows before it decides. The status as stored
//! (or as this process last wrote it, when the watch has not delivered that write yet),
//! the members' standings as this workload sees them, its slices out in the members, the
//! decision recorded before and a look at shares that do not become available.
//!
//! Ends the reconcile early when an ingress host another workload holds keeps it back, or
//! when no decision is recorded and a member that may hold a slice is still waited for.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use tracing::Instrument;

use super::decide::Remembered;
use super::health::Standings;
use super::rollout::Slices;
use super::{
    HubContext, HubError, Step, app_failover, health, hosts, revisions, rollout, workload_key,
};
use crate::api::kind::{HubPart, PinterestKind};
use crate::placement::app_failover::Look;

/// What the read stage hands on.
pub(super) struct Read<K: PinterestKind> {
    pub now: Timestamp,
    pub now_time: Time,
    /// The finalizer is on (as stored, or as this process added it).
    pub has_finalizer: bool,
    pub stored_status: K::Status,
    pub stored_part: HubPart,
    pub standings: Standings,
    pub slices: Slices,
    pub remembered: Remembered,
    pub app_look: Look,
}

pub(super) async fn read<K: PinterestKind>(
    ctx: &HubContext,
    obj: &K,
) -> Result<Step<Read<K>>, HubError> {
    let now = Timestamp::now();
    let now_time = Time(now);
    // A copy older than this process's own writes: read what they wrote instead.
    let unseen = ctx
        .own_writes
        .unseen(&workload_key(obj), obj.meta().resource_version.as_deref())
        .unwrap_or_default();
    let stored_status: K::Status = match unseen.status {
        Some(s) => serde_json::from_value(s)?,
        None => obj.status().cloned().unwrap_or_default(),
    };
    let stored_part = K::hub_part(&stored_status);

    // An ingress host another workload holds: held before anything moves.
    if let Some(action) = hosts::hold_if_taken(ctx, obj, &stored_status).await? {
        return Ok(Step::Done(action));
    }

    // Read: standings of the members as this workload sees them, and what was decided.
    let standings = health::Standings::read(ctx, obj, now);
    let slices = rollout::read_slices(ctx, obj, &standings)
        .instrument(tracing::trace_span!(target: "pinfed::trace", "read"))
        .await?;
    let mut remembered = Remembered::read(ctx, obj, stored_part.placement.clone());
    if remembered.previous.is_none() {
        // No decision recorded where this process reads it: a new workload, or one a
        // leader stopped before its status write (which waits under a burst) had placed —
        // slices may be out in the members. Plan again from what the members run, so
        // nothing that runs moves without need — once every member that may hold a part
        // is Ready again: one NotReady within its failover grace (down, or its first
        // heartbeat under this leader not in yet) is waited for, not planned around.
        let waiting: Vec<&String> = standings
            .standings
            .iter()
            .filter(|(_, s)| **s == crate::placement::failover::Standing::Waiting)
            .map(|(m, _)| m)
            .collect();
        // (Without failover a NotReady member waits for good; its share is planned
        // around, as for a workload placed while it was down.) Whether it may have
        // slices: a revision is recorded before any slice carries it (a hub before this
        // one recorded the decision's generation in an annotation) — asked only while a
        // member is waited for; every Ready member's slices are in this process's caches.
        if standings.fails_over
            && !waiting.is_empty()
            && (remembered.decided_for.is_some() || revisions::any_recorded(ctx, obj).await?)
        {
            tracing::info!(workload = %workload_key(obj), members = ?waiting, "no recorded decision; waiting for every member that may hold a slice");
            return Ok(Step::Done(Action::requeue(
                standings.requeue.min(std::time::Duration::from_secs(5)),
            )));
        }
        if let Some(out_there) = rollout::decision_from_slices(obj.uid().as_deref(), &slices) {
            tracing::info!(workload = %workload_key(obj), decision = ?out_there, "no recorded decision; planning from the slices out in the members");
            remembered.previous = Some(out_there);
            remembered.decided_for = None;
        }
    }

    // A share that does not become available in a healthy member (opt-in).
    let app_look = app_failover::look_at(
        ctx,
        obj,
        remembered.previous.as_ref(),
        &standings,
        &slices,
        stored_part.rollout.as_ref(),
        now.as_second(),
    );

    Ok(Step::Next(Read {
        now,
        now_time,
        has_finalizer: unseen.finalizer,
        stored_status,
        stored_part,
        standings,
        slices,
        remembered,
        app_look,
    }))
}

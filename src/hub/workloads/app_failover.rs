//! Application failover in the hub's workload loop: the placed shares as their slices
//! report them, read by [`crate::placement::app_failover::look`] (pure). Opt-in per
//! workload (`spec.placement.failover.application`), services and stateful sets only.

use super::health::Standings;
use super::rollout::Slices;
use crate::api::common::PlacementDecision;
use crate::api::kind::PinterestKind;
use crate::api::rollout::{RolloutStatus, phase};
use crate::api::workload::WorkloadKind;
use crate::placement::app_failover::{Look, ShareSeen, look};
use crate::placement::failover::Standing;

/// One look at `obj`'s placed shares (`previous`, the decision they run).
pub fn look_at<K: PinterestKind>(
    obj: &K,
    previous: Option<&PlacementDecision>,
    standings: &Standings,
    slices: &Slices,
    rollout: Option<&RolloutStatus>,
    now: i64,
) -> Look {
    let Some(app) = obj
        .as_workload()
        .placement()
        .failover
        .as_ref()
        .and_then(|f| f.application)
    else {
        return Look::default();
    };
    if !matches!(K::KIND, WorkloadKind::Service | WorkloadKind::StatefulSet) {
        return Look::default();
    }
    // A rollout's health gates judge a new revision (and roll it back): a share that is
    // unavailable while one is under way is theirs, not a member's fault.
    if rollout.is_some_and(|r| !matches!(r.phase.as_str(), phase::COMPLETE | phase::ROLLED_BACK)) {
        return Look::default();
    }
    let Some(previous) = previous else {
        return Look::default();
    };
    let shares: Vec<ShareSeen<'_>> = previous
        .placements
        .iter()
        .filter_map(|p| {
            let s = slices.get(&p.cluster)?;
            let placed = u32::try_from(p.replicas.unwrap_or(0)).unwrap_or(0);
            Some(ShareSeen {
                cluster: &p.cluster,
                placed,
                available: u32::try_from(s.report.counts.available_replicas.unwrap_or(0))
                    .unwrap_or(0),
                // Processed as written, with the share the decision gives it.
                processed: s.processed() && s.share.replicas == Some(placed),
                not_ready_since: s.report.not_ready_since,
                member_ready: standings.of(&p.cluster) == Standing::Ready
                    && standings.ready.contains(&p.cluster),
            })
        })
        .collect();
    look(&shares, app.toleration_seconds(), now)
}

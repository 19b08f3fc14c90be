//! Application failover in the hub's workload loop: the placed shares as their slices
//! report them, read by [`crate::placement::app_failover::look`] and `look_shards`
//! (pure). Opt-in per workload (`spec.placement.failover.application`): services,
//! stateful sets and job sets.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use super::health::Standings;
use super::rollout::Slices;
use crate::api::common::PlacementDecision;
use crate::api::kind::PinterestKind;
use crate::api::ranges::RangeSet;
use crate::api::rollout::{RolloutStatus, phase};
use crate::placement::app_failover::{
    Look, ShardsSeen, ShareSeen, UnreadyClock, look, look_shards,
};
use crate::placement::failover::Standing;

/// Each job set's [`UnreadyClock`] per member, by workload key; a workload with no
/// unready shard anywhere has no entry.
#[derive(Default)]
pub struct UnreadyClocks(Mutex<HashMap<String, BTreeMap<String, UnreadyClock>>>);

impl UnreadyClocks {
    /// Folds in what each member reports now (`None`: its report does not count, and its
    /// clock starts again) and takes one look.
    fn look(
        &self,
        key: &str,
        reports: &[(ShardsSeen<'_>, Option<RangeSet>)],
        toleration: i64,
        now: i64,
    ) -> Look {
        let mut all = self.0.lock().expect("unready clocks lock");
        let clocks = all.entry(key.to_string()).or_default();
        for (seen, unready) in reports {
            let unready = unready.clone().unwrap_or_default();
            let c = clocks.entry(seen.cluster.to_string()).or_default();
            c.observe(&unready, now);
            if c.is_empty() {
                clocks.remove(seen.cluster);
            }
        }
        clocks.retain(|m, _| reports.iter().any(|(s, _)| s.cluster == m));
        let shares: Vec<ShardsSeen<'_>> = reports.iter().map(|(s, _)| s.clone()).collect();
        let look = look_shards(&shares, clocks, toleration, now);
        if clocks.is_empty() {
            all.remove(key);
        }
        look
    }

    /// A workload gone (or no longer watched): its clocks go.
    pub fn forget(&self, key: &str) {
        self.0.lock().expect("unready clocks lock").remove(key);
    }
}

/// One look at `obj`'s placed shares (`previous`, the decision they run).
pub fn look_at<K: PinterestKind>(
    ctx: &super::HubContext,
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
    if !K::KIND.moves_in_part() {
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
    if K::KIND.runs_shards() {
        let member_ready =
            |c: &str| standings.of(c) == Standing::Ready && standings.ready.contains(c);
        let reports: Vec<(ShardsSeen<'_>, Option<RangeSet>)> = previous
            .placements
            .iter()
            .filter_map(|p| {
                let s = slices.get(&p.cluster)?;
                let c = &s.report.counts;
                let placed = RangeSet::recorded(p.shards.as_deref());
                let completed = RangeSet::recorded(c.completed_shards.as_deref());
                let held = placed.difference(&completed);
                let unready = RangeSet::recorded(c.unready_shards.as_deref()).intersection(&held);
                let running = u64::try_from(c.shards_running.unwrap_or(0)).unwrap_or(0);
                let seen = ShardsSeen {
                    cluster: &p.cluster,
                    ran_any: !completed.intersection(&placed).is_empty() || running > unready.len(),
                    held,
                    // Processed as written, with the shards the decision gives it.
                    processed: s.processed() && s.share.shards == p.shards,
                    member_ready: member_ready(&p.cluster),
                };
                let counts = seen.processed && seen.member_ready;
                Some((seen, counts.then_some(unready)))
            })
            .collect();
        return ctx.unready_clocks.look(
            &super::workload_key(obj),
            &reports,
            app.toleration_seconds(),
            now,
        );
    }
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

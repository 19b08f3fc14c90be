//! Application failover, pure: which placed member's share has stayed unavailable past
//! the workload's toleration while the workload is available in another member — the
//! member is healthy, the workload is not, there (a member that is lost is the member
//! failover's, [`super::failover`]).
//!
//! A job set's share is its shards: a shard whose Job has no pod Ready there for the
//! toleration moves (its member's running and finished shards stay), while another
//! member runs the job set's shards. How long each shard has been unready is kept in an
//! [`UnreadyClock`] per member (the agent reports which shards are unready, not since
//! when).
//!
//! Times are unix seconds passed in; nothing here reads a clock or a client.

use std::collections::BTreeMap;

use crate::api::ranges::RangeSet;

/// One placed member's share as its slice reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareSeen<'a> {
    pub cluster: &'a str,
    /// Replicas placed there.
    pub placed: u32,
    /// Replicas available there.
    pub available: u32,
    /// The agent has processed the slice as written (a report about an older share says
    /// nothing about this one).
    pub processed: bool,
    /// Since when its slice is not Ready.
    pub not_ready_since: Option<i64>,
    /// The member counts as Ready for this workload (heartbeat and agent).
    pub member_ready: bool,
}

impl ShareSeen<'_> {
    fn available_in_full(&self) -> bool {
        self.member_ready && self.processed && self.placed > 0 && self.available >= self.placed
    }

    /// Since when it is unavailable, if it counts as such.
    fn unavailable_since(&self) -> Option<i64> {
        (self.member_ready && self.processed && self.placed > 0 && self.available < self.placed)
            .then_some(self.not_ready_since)
            .flatten()
    }
}

/// A member a share is to move off, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub cluster: String,
    pub reason: String,
    /// A job set: the shards to move (the member keeps its others).
    pub shards: Option<RangeSet>,
}

/// What application failover makes of the shares now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Look {
    /// The member to move off (at most one per look, the one unavailable longest:
    /// moving several at once could take every healthy member's room at the same time).
    pub due: Option<Verdict>,
    /// Seconds until an unavailable share's toleration ends, to look again then.
    pub next_in: Option<i64>,
}

/// One look at the shares of a workload with toleration `toleration` (seconds).
pub fn look(shares: &[ShareSeen<'_>], toleration: i64, now: i64) -> Look {
    let healthy_elsewhere = |c: &str| {
        shares
            .iter()
            .any(|s| s.cluster != c && s.available_in_full())
    };
    let mut look = Look::default();
    let mut longest: Option<(i64, &ShareSeen<'_>)> = None;
    for s in shares {
        let Some(since) = s.unavailable_since() else {
            continue;
        };
        if !healthy_elsewhere(s.cluster) {
            continue;
        }
        let left = since + toleration - now;
        if left > 0 {
            look.next_in = Some(look.next_in.map_or(left, |n: i64| n.min(left)));
        } else if longest.is_none_or(|(t, _)| since < t) {
            longest = Some((since, s));
        }
    }
    look.due = longest.map(|(since, s)| Verdict {
        cluster: s.cluster.to_string(),
        shards: None,
        reason: format!(
            "{} of {} replicas available in {} for {} s (application failover after {toleration} s)",
            s.available,
            s.placed,
            s.cluster,
            now - since
        ),
    });
    look
}

/// Since when a member's job-set shards have been seen unready: a shard enters at the
/// first look that sees it unready and leaves when a look sees it Ready (or finished, or
/// gone). Kept by the hub in memory: a hub that takes over starts the clocks again (a
/// later move, never an earlier one).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnreadyClock {
    /// Shards by the time they were first seen unready, oldest first; disjoint.
    since: Vec<(i64, RangeSet)>,
}

impl UnreadyClock {
    /// Folds in the shards unready now.
    pub fn observe(&mut self, unready: &RangeSet, now: i64) {
        let mut known = RangeSet::new();
        for (_, s) in &mut self.since {
            *s = s.intersection(unready);
            known = known.union(s);
        }
        self.since.retain(|(_, s)| !s.is_empty());
        let new = unready.difference(&known);
        if !new.is_empty() {
            self.since.push((now, new));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.since.is_empty()
    }

    /// The shards unready for `toleration` seconds or more, and since when the oldest.
    fn past(&self, toleration: i64, now: i64) -> (RangeSet, Option<i64>) {
        let mut due = RangeSet::new();
        let mut oldest = None;
        for (t, s) in self.since.iter().filter(|(t, _)| now - t >= toleration) {
            due = due.union(s);
            oldest = Some(oldest.map_or(*t, |o: i64| o.min(*t)));
        }
        (due, oldest)
    }

    /// Seconds until the next shard's toleration ends.
    fn next_in(&self, toleration: i64, now: i64) -> Option<i64> {
        self.since
            .iter()
            .map(|(t, _)| t + toleration - now)
            .filter(|left| *left > 0)
            .min()
    }
}

/// One placed member's job-set shards as its slice reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardsSeen<'a> {
    pub cluster: &'a str,
    /// Unfinished shards placed there.
    pub held: RangeSet,
    /// Shards there that ran: completed there, or running with a pod Ready.
    pub ran_any: bool,
    /// The agent has processed the slice as written.
    pub processed: bool,
    /// The member counts as Ready for this workload (heartbeat and agent).
    pub member_ready: bool,
}

/// One look at a job set's shares (`clocks`: each member's [`UnreadyClock`], observed
/// just before).
pub fn look_shards(
    shares: &[ShardsSeen<'_>],
    clocks: &BTreeMap<String, UnreadyClock>,
    toleration: i64,
    now: i64,
) -> Look {
    let counted = |s: &ShardsSeen<'_>| s.member_ready && s.processed;
    let due_in = |s: &ShardsSeen<'_>| {
        clocks
            .get(s.cluster)
            .map(|c| c.past(toleration, now))
            .map(|(due, since)| (due.intersection(&s.held), since))
            .filter(|(due, _)| !due.is_empty())
    };
    // Somewhere the job set's shards run: a member that ran some and has none unready
    // past the toleration (the spec works there; it is this member that does not).
    let healthy_elsewhere = |c: &str| {
        shares
            .iter()
            .any(|s| s.cluster != c && counted(s) && s.ran_any && due_in(s).is_none())
    };
    let mut look = Look::default();
    let mut longest: Option<(i64, &ShardsSeen<'_>, RangeSet)> = None;
    for s in shares.iter().filter(|s| counted(s)) {
        let Some(clock) = clocks.get(s.cluster) else {
            continue;
        };
        if !healthy_elsewhere(s.cluster) {
            continue;
        }
        if let Some(left) = clock.next_in(toleration, now) {
            look.next_in = Some(look.next_in.map_or(left, |n: i64| n.min(left)));
        }
        if let Some((due, Some(since))) = due_in(s)
            && longest.as_ref().is_none_or(|(t, _, _)| since < *t)
        {
            longest = Some((since, s, due));
        }
    }
    look.due = longest.map(|(since, s, due)| Verdict {
        cluster: s.cluster.to_string(),
        reason: format!(
            "shards {due} had no pod Ready in {} for {} s (application failover after {toleration} s)",
            s.cluster,
            now - since
        ),
        shards: Some(due),
    });
    look
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(cluster: &str, placed: u32, available: u32, since: Option<i64>) -> ShareSeen<'_> {
        ShareSeen {
            cluster,
            placed,
            available,
            processed: true,
            not_ready_since: since,
            member_ready: true,
        }
    }

    #[test]
    fn a_share_unavailable_past_the_toleration_moves_while_another_member_is_healthy() {
        let shares = [share("a", 3, 0, Some(100)), share("b", 3, 3, None)];
        let l = look(&shares, 60, 170);
        let v = l.due.expect("due");
        assert_eq!(v.cluster, "a");
        assert!(
            v.reason.contains("0 of 3 replicas available in a for 70 s"),
            "{}",
            v.reason
        );
        // Before the toleration ends: not yet, and when to look again.
        let l = look(&shares, 60, 130);
        assert_eq!(l.due, None);
        assert_eq!(l.next_in, Some(30));
    }

    #[test]
    fn nothing_moves_when_no_other_member_runs_the_workload_in_full() {
        // Broken everywhere: the spec, not a member (a rollout's gates judge that).
        let shares = [share("a", 3, 0, Some(0)), share("b", 3, 1, Some(0))];
        assert_eq!(look(&shares, 60, 1000), Look::default());
        // A single member: nowhere healthy to go.
        assert_eq!(
            look(&[share("a", 3, 0, Some(0))], 60, 1000),
            Look::default()
        );
        // The healthy one is not Ready for the hub, or its report is about an older share.
        let mut b = share("b", 3, 3, None);
        b.member_ready = false;
        assert_eq!(look(&[share("a", 3, 0, Some(0)), b], 60, 1000).due, None);
        let mut b = share("b", 3, 3, None);
        b.processed = false;
        assert_eq!(look(&[share("a", 3, 0, Some(0)), b], 60, 1000).due, None);
    }

    #[test]
    fn only_a_processed_report_of_a_ready_member_with_a_share_counts_as_unavailable() {
        let healthy = share("b", 2, 2, None);
        for a in [
            ShareSeen {
                processed: false,
                ..share("a", 3, 0, Some(0))
            },
            ShareSeen {
                member_ready: false,
                ..share("a", 3, 0, Some(0))
            },
            share("a", 0, 0, Some(0)),
            share("a", 3, 3, Some(0)),
            // Not Ready but with no time: never counted (no toleration can be measured).
            share("a", 3, 0, None),
        ] {
            assert_eq!(look(&[a, healthy], 60, 1000), Look::default(), "{a:?}");
        }
    }

    #[test]
    fn one_member_per_look_the_one_unavailable_longest() {
        let shares = [
            share("a", 2, 1, Some(50)),
            share("b", 2, 0, Some(20)),
            share("c", 2, 2, None),
            share("d", 2, 0, Some(990)),
        ];
        let l = look(&shares, 60, 1000);
        assert_eq!(l.due.map(|v| v.cluster), Some("b".to_string()));
        // d's toleration ends later: looked at again then.
        assert_eq!(l.next_in, Some(50));
    }

    fn shards(r: &str) -> RangeSet {
        RangeSet::parse(r).unwrap()
    }

    fn seen<'a>(cluster: &'a str, held: &str, ran_any: bool) -> ShardsSeen<'a> {
        ShardsSeen {
            cluster,
            held: shards(held),
            ran_any,
            processed: true,
            member_ready: true,
        }
    }

    #[test]
    fn an_unready_clock_counts_each_shard_from_when_it_was_first_seen_unready() {
        let mut c = UnreadyClock::default();
        c.observe(&shards("0-3"), 100);
        c.observe(&shards("2-5"), 120);
        // 0-1 turned Ready (left); 2-3 still count from 100; 4-5 from 120.
        assert_eq!(c.past(20, 125), (shards("2-3"), Some(100)));
        assert_eq!(c.next_in(20, 125), Some(15));
        assert_eq!(c.past(20, 140).0, shards("2-5"));
        // Ready again, then unready again: counted from the new time.
        c.observe(&shards("4-5"), 150);
        c.observe(&shards("2-5"), 160);
        assert_eq!(c.past(20, 175), (shards("4-5"), Some(120)));
        c.observe(&RangeSet::new(), 200);
        assert!(c.is_empty());
    }

    #[test]
    fn a_members_long_unready_shards_move_while_another_member_runs_the_job_set() {
        let mut clocks = BTreeMap::new();
        let mut a = UnreadyClock::default();
        a.observe(&shards("4-6"), 100);
        a.observe(&shards("4-7"), 150);
        clocks.insert("a".to_string(), a);
        let shares = [seen("a", "4-9", true), seen("b", "0-3", true)];
        // 4-6 past 60 s at 170; 7 not yet (looked at again at 210).
        let l = look_shards(&shares, &clocks, 60, 170);
        let v = l.due.expect("due");
        assert_eq!(v.cluster, "a");
        assert_eq!(v.shards, Some(shards("4-6")));
        assert!(
            v.reason
                .contains("shards 4-6 had no pod Ready in a for 70 s"),
            "{}",
            v.reason
        );
        assert_eq!(l.next_in, Some(40));
        // Before the toleration: nothing, looked at again when it ends.
        let l = look_shards(&shares, &clocks, 60, 130);
        assert_eq!((l.due, l.next_in), (None, Some(30)));
        // Only shards still held and unfinished there move.
        let shares = [seen("a", "5", true), seen("b", "0-3", true)];
        let v = look_shards(&shares, &clocks, 60, 170).due.expect("due");
        assert_eq!(v.shards, Some(shards("5")));
    }

    #[test]
    fn shards_stay_where_nothing_else_runs_the_job_set() {
        let mut clocks = BTreeMap::new();
        let mut a = UnreadyClock::default();
        a.observe(&shards("0-3"), 0);
        clocks.insert("a".to_string(), a.clone());
        // No other member; another that never ran a shard; another whose own shards are
        // unready past the toleration (the spec, not the member).
        assert_eq!(
            look_shards(&[seen("a", "0-3", false)], &clocks, 60, 1000),
            Look::default()
        );
        let idle = [seen("a", "0-3", false), seen("b", "4-7", false)];
        assert_eq!(look_shards(&idle, &clocks, 60, 1000).due, None);
        let mut b = UnreadyClock::default();
        b.observe(&shards("4"), 0);
        clocks.insert("b".to_string(), b);
        let both = [seen("a", "0-3", false), seen("b", "4-7", true)];
        assert_eq!(look_shards(&both, &clocks, 60, 1000).due, None);
        // The healthy member's report is stale, or the member is not Ready.
        clocks.remove("b");
        let mut b = seen("b", "4-7", true);
        b.processed = false;
        assert_eq!(
            look_shards(&[seen("a", "0-3", false), b.clone()], &clocks, 60, 1000).due,
            None
        );
        b.processed = true;
        b.member_ready = false;
        assert_eq!(
            look_shards(&[seen("a", "0-3", false), b], &clocks, 60, 1000).due,
            None
        );
        // With b healthy: a's shards move.
        let due = look_shards(
            &[seen("a", "0-3", false), seen("b", "4-7", true)],
            &clocks,
            60,
            1000,
        )
        .due
        .expect("due");
        assert_eq!(due.shards, Some(shards("0-3")));
    }
}

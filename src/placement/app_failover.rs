//! Application failover, pure: which placed member's share has stayed unavailable past
//! the workload's toleration while the workload is available in another member — the
//! member is healthy, the workload is not, there (a member that is lost is the member
//! failover's, [`super::failover`]).
//!
//! Times are unix seconds passed in; nothing here reads a clock or a client.

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
}

//! Slices before statuses under a backlog or a burst.
//!
//! Every write the hub makes competes for the same API servers; under a burst of new
//! workloads the hub status apply (the dearest of them: 6–9 ms of the hub API server's CPU
//! against ~2 ms for a decision's patch) of workloads already placed delayed the
//! decisions and slices of the ones still queued. A status write that carries a new
//! placement waits while other workloads of the kind wait for a reconcile, or while new
//! decisions keep coming faster than [`BURST_DECISIONS`] in [`BURST_WINDOW`] (a burst the
//! hub keeps up with leaves no queue, yet its statuses still crowd out its slices). It
//! waits `max` at most: under a backlog the reconcile is requeued once, at that deadline
//! (sooner when a trigger finds the queue empty) — not a poll: a first sync keeps the
//! queue full for minutes, and polling every held workload would multiply the hub's
//! reconciles; in a burst it looks again every [`BURST_RECHECK`]. Member reports arriving
//! meanwhile fold into that one write, and so do the decision's Events, owed until the
//! status is written. A status that only reports the members goes out at once: holding
//! those back too cost the member status → hub status p99 2.4 s in the Karmada comparison.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::decide::DecisionEvent;

/// More new decisions than this within [`BURST_WINDOW`] is a burst (32/s: a steady 20/s
/// is not one).
pub const BURST_DECISIONS: usize = 16;
pub const BURST_WINDOW: Duration = Duration::from_millis(500);
/// How often a status held back by a burst looks again.
pub const BURST_RECHECK: Duration = Duration::from_millis(250);

/// Workloads whose status write waits, and since when.
#[derive(Debug, Default)]
pub struct StatusDeferrals {
    /// The longest a status write waits (zero: never).
    max: Duration,
    since: Mutex<HashMap<String, Instant>>,
    /// When the latest new decisions were made ([`BURST_DECISIONS`] of them at most).
    decisions: Mutex<VecDeque<Instant>>,
    /// Events of decisions whose status is not written yet.
    events: Mutex<HashMap<String, Vec<DecisionEvent>>>,
}

impl StatusDeferrals {
    pub fn new(max: Duration) -> StatusDeferrals {
        StatusDeferrals {
            max,
            ..StatusDeferrals::default()
        }
    }

    /// A new decision was made at `now`.
    pub fn decided(&self, now: Instant) {
        if let Ok(mut d) = self.decisions.lock() {
            d.push_back(now);
            while d.len() > BURST_DECISIONS {
                d.pop_front();
            }
        }
    }

    fn in_burst(&self, now: Instant) -> bool {
        self.decisions.lock().is_ok_and(|d| {
            d.len() >= BURST_DECISIONS
                && d.front()
                    .is_some_and(|first| now.saturating_duration_since(*first) <= BURST_WINDOW)
        })
    }

    /// Whether `key`'s status write waits now, with `waiting` other workloads of its kind
    /// queued (its own trigger, queued again while it runs, can be one of them): when to
    /// look again at the latest, or `None` to write now.
    pub fn hold(&self, key: &str, waiting: usize, now: Instant) -> Option<Duration> {
        let backlog = waiting > 1;
        let burst = !backlog && self.in_burst(now);
        let mut since = self.since.lock().ok()?;
        if self.max.is_zero() || !(backlog || burst) {
            since.remove(key);
            return None;
        }
        let first = *since.entry(key.to_string()).or_insert(now);
        let left = self.max.saturating_sub(now.duration_since(first));
        if left.is_zero() {
            since.remove(key);
            return None;
        }
        Some(if burst { left.min(BURST_RECHECK) } else { left })
    }

    /// Events `key`'s next status write is to be followed by.
    pub fn owe_events(&self, key: &str, events: Vec<DecisionEvent>) {
        if events.is_empty() {
            return;
        }
        if let Ok(mut owed) = self.events.lock() {
            owed.entry(key.to_string()).or_default().extend(events);
        }
    }

    /// `key`'s status is written now, needs no write, or is gone: it no longer waits; the
    /// Events it owed.
    pub fn done(&self, key: &str) -> Vec<DecisionEvent> {
        if let Ok(mut since) = self.since.lock() {
            since.remove(key);
        }
        self.events
            .lock()
            .ok()
            .and_then(|mut owed| owed.remove(key))
            .unwrap_or_default()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.since.lock().map(|s| s.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_waits_while_others_are_queued_but_never_past_the_limit() {
        let d = StatusDeferrals::new(Duration::from_secs(2));
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(d.hold("a", 50, t0), Some(ms(2000)));
        assert_eq!(
            d.hold("a", 50, t0 + ms(1900)),
            Some(ms(100)),
            "counted from the first hold"
        );
        assert_eq!(d.hold("a", 50, t0 + ms(2000)), None, "waited long enough");
        assert_eq!(d.len(), 0);
        // Its own echo alone (or nothing) queued: written at once.
        assert_eq!(d.hold("b", 1, t0), None);
        assert!(d.hold("c", 2, t0).is_some());
        assert_eq!(d.hold("c", 0, t0 + ms(300)), None, "queue drained");
        assert_eq!(d.len(), 0);
        assert!(d.hold("e", 9, t0).is_some());
        d.done("e");
        assert_eq!(d.len(), 0);
    }

    #[test]
    fn a_burst_holds_statuses_without_a_queue_and_looks_again_soon() {
        let d = StatusDeferrals::new(Duration::from_secs(2));
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // A steady 20/s is no burst.
        for i in 0..40 {
            d.decided(t0 + ms(50 * i));
        }
        assert_eq!(d.hold("a", 0, t0 + ms(2000)), None, "20/s");
        // 100/s is.
        let t1 = t0 + ms(3000);
        for i in 0..20 {
            d.decided(t1 + ms(10 * i));
        }
        assert_eq!(d.hold("a", 0, t1 + ms(200)), Some(BURST_RECHECK));
        assert_eq!(
            d.hold("a", 0, t1 + ms(1900)),
            None,
            "the burst is over: no decision for 1.7 s"
        );
        // Never past the limit, burst or not.
        for i in 0..200 {
            d.decided(t1 + ms(2000 + 10 * i));
        }
        assert_eq!(d.hold("b", 0, t1 + ms(2100)), Some(BURST_RECHECK));
        assert_eq!(d.hold("b", 0, t1 + ms(3950)), Some(ms(150)));
        assert_eq!(d.hold("b", 0, t1 + ms(4100)), None);
    }

    #[test]
    fn owed_events_are_handed_over_once_when_the_status_is_done() {
        use kube::runtime::events::EventType;
        let d = StatusDeferrals::new(Duration::from_secs(2));
        let ev = |reason| DecisionEvent {
            type_: EventType::Normal,
            reason,
            note: String::new(),
        };
        d.owe_events("a", vec![ev("Placed")]);
        d.owe_events("a", vec![ev("FailedBack")]);
        d.owe_events("b", Vec::new());
        assert_eq!(d.done("b"), Vec::new());
        let owed: Vec<_> = d.done("a").into_iter().map(|e| e.reason).collect();
        assert_eq!(owed, ["Placed", "FailedBack"]);
        assert!(d.done("a").is_empty(), "handed over once");
    }

    #[test]
    fn a_zero_limit_never_holds() {
        let d = StatusDeferrals::new(Duration::ZERO);
        assert_eq!(d.hold("a", 1000, Instant::now()), None);
    }
}

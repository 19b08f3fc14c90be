//! Slices before statuses under a backlog.
//!
//! Every write the hub makes competes for the same API servers; under a burst of new
//! workloads the hub status apply (the dearest of them: 6–9 ms of the hub API server's CPU
//! against ~2 ms for a decision's patch) of workloads already placed delayed the
//! decisions and slices of the ones still queued. While other workloads of the kind wait
//! for a reconcile, a workload's status write waits too — the reconcile is requeued
//! shortly and writes it once the queue is empty, or when it has waited `max` — and the
//! member reports that arrive meanwhile are folded into that one write.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How soon a held-back status write is tried again.
pub const RETRY: Duration = Duration::from_millis(250);

/// Workloads whose status write waits, and since when.
#[derive(Debug, Default)]
pub struct StatusDeferrals {
    /// The longest a status write waits (zero: never).
    max: Duration,
    since: Mutex<HashMap<String, Instant>>,
}

impl StatusDeferrals {
    pub fn new(max: Duration) -> StatusDeferrals {
        StatusDeferrals {
            max,
            since: Mutex::default(),
        }
    }

    /// Whether `key`'s status write waits now, with `waiting` other workloads of its kind
    /// queued (its own trigger, queued again while it runs, can be one of them).
    pub fn hold(&self, key: &str, waiting: usize, now: Instant) -> bool {
        let Ok(mut since) = self.since.lock() else {
            return false;
        };
        if self.max.is_zero() || waiting <= 1 {
            since.remove(key);
            return false;
        }
        let first = *since.entry(key.to_string()).or_insert(now);
        if now.duration_since(first) >= self.max {
            since.remove(key);
            return false;
        }
        true
    }

    /// `key`'s status needs no write (or is gone): it no longer waits.
    pub fn done(&self, key: &str) {
        if let Ok(mut since) = self.since.lock() {
            since.remove(key);
        }
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
        assert!(d.hold("a", 50, t0));
        assert!(d.hold("a", 50, t0 + Duration::from_millis(1900)));
        assert!(
            !d.hold("a", 50, t0 + Duration::from_secs(2)),
            "waited long enough"
        );
        assert_eq!(d.len(), 0);
        // Its own echo alone (or nothing) queued: written at once.
        assert!(!d.hold("b", 1, t0));
        assert!(d.hold("c", 2, t0));
        assert!(
            !d.hold("c", 0, t0 + Duration::from_millis(300)),
            "queue drained"
        );
        assert_eq!(d.len(), 0);
        assert!(d.hold("e", 9, t0));
        d.done("e");
        assert_eq!(d.len(), 0);
    }

    #[test]
    fn a_zero_limit_never_holds() {
        let d = StatusDeferrals::new(Duration::ZERO);
        assert!(!d.hold("a", 1000, Instant::now()));
    }
}

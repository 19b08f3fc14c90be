//! Holding back a slice's in-progress status (issue 40: members' writes per workload).
//!
//! While a service's pods come up, its Deployment's status changes three or four times
//! (created, replicas counted, ready, available) and each change used to be one status
//! write on the member's API server, and one more reconcile on the hub. What the hub acts
//! on is where a slice ends up: Ready, Degraded, failed, complete. So a status that says
//! "still progressing" waits, at most `hold` from the first such status not written; a
//! later one replaces it meanwhile, and one that ends the progress is written at once.
//! Where pods start within the hold, a slice's first sync writes one status instead of
//! three. Only kinds counted by replicas or nodes are held: a job set's or a training
//! job's progress is its shards' and runs' bookkeeping, written as it happens.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::status::Health;
use crate::api::workload::{Counted, WorkloadKind};

/// Whether to write a changed status now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    Write,
    /// Look again after this long (the status is written then, if still in progress).
    Wait(Duration),
}

/// Whether a status with `health` ends a progress: it is what the hub acts on.
pub fn settles(health: &Health) -> bool {
    health.ready
        || !health.progressing
        || health.degraded.is_some()
        || health.failed.is_some()
        || health.complete.is_some()
}

/// Per slice uid, when its first unwritten in-progress status was seen.
#[derive(Debug, Default)]
pub struct StatusHold {
    hold: Duration,
    since: Mutex<HashMap<String, Instant>>,
}

impl StatusHold {
    pub fn new(hold: Duration) -> StatusHold {
        StatusHold {
            hold,
            since: Mutex::default(),
        }
    }

    /// For a changed status of slice `uid` of `kind`, seen at `now`: write it now, or
    /// look again later. A `Write` forgets the slice's hold. Only progress towards Ready
    /// waits: a slice whose last written status was Ready (`was_ready`) and is no longer
    /// is written at once. `cap` shortens the hold for this slice (a workload whose
    /// application failover tolerates less than the hold).
    pub fn decide(
        &self,
        uid: &str,
        kind: WorkloadKind,
        health: &Health,
        was_ready: bool,
        cap: Option<Duration>,
        now: Instant,
    ) -> Hold {
        let mut since = self.since.lock().expect("status hold lock");
        let held = matches!(kind.counted(), Counted::Replicas | Counted::Nodes);
        let hold = cap.map_or(self.hold, |c| c.min(self.hold));
        if !held || hold.is_zero() || settles(health) || was_ready {
            since.remove(uid);
            return Hold::Write;
        }
        let first = *since.entry(uid.to_string()).or_insert(now);
        let waited = now.saturating_duration_since(first);
        if waited >= hold {
            since.remove(uid);
            Hold::Write
        } else {
            Hold::Wait(hold - waited)
        }
    }

    /// Since when slice `uid` has had an unwritten in-progress status, if it has.
    pub fn since(&self, uid: &str) -> Option<Instant> {
        self.since
            .lock()
            .expect("status hold lock")
            .get(uid)
            .copied()
    }

    /// A deleted slice: nothing held for it any more.
    pub fn forget(&self, uid: &str) {
        self.since.lock().expect("status hold lock").remove(uid);
    }

    /// Slices with a status held back now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.since.lock().expect("status hold lock").len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progressing() -> Health {
        Health {
            progressing: true,
            ..Default::default()
        }
    }

    #[test]
    fn an_in_progress_status_waits_at_most_the_hold_and_a_settled_one_goes_at_once() {
        let h = StatusHold::new(Duration::from_secs(2));
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let svc = WorkloadKind::Service;
        // An in-progress status of slice `uid` seen `at` ms after t0.
        let in_progress = |uid: &str, was_ready, cap, at| {
            h.decide(uid, svc, &progressing(), was_ready, cap, t0 + ms(at))
        };
        assert_eq!(in_progress("a", false, None, 0), Hold::Wait(ms(2000)));
        // A later in-progress status waits for what is left of the first one's hold.
        assert_eq!(in_progress("a", false, None, 500), Hold::Wait(ms(1500)));
        assert_eq!(in_progress("a", false, None, 2000), Hold::Write);
        assert_eq!(h.held(), 0, "a write forgets the hold");
        // The next in-progress status starts a hold of its own.
        assert_eq!(in_progress("a", false, None, 3000), Hold::Wait(ms(2000)));
        // Ready ends it at once.
        let ready = Health {
            ready: true,
            ..Default::default()
        };
        assert_eq!(
            h.decide("a", svc, &ready, false, None, t0 + ms(3000)),
            Hold::Write
        );
        assert_eq!(h.held(), 0);
        // So does a problem.
        let degraded = Health {
            progressing: true,
            degraded: Some("ImagePullBackOff".into()),
            ..Default::default()
        };
        assert!(settles(&degraded));
        in_progress("b", false, None, 0);
        h.forget("b");
        assert_eq!(h.held(), 0);
        // A slice that was Ready and lost pods is no progress towards Ready: written at
        // once, for the hub's failovers.
        assert_eq!(
            in_progress("c", true, None, 0),
            Hold::Write,
            "a drop from Ready"
        );
        assert_eq!(h.held(), 0);
        // A cap shortens the hold for that slice.
        assert_eq!(
            in_progress("d", false, Some(ms(500)), 0),
            Hold::Wait(ms(500))
        );
        assert_eq!(in_progress("d", false, Some(ms(500)), 500), Hold::Write);
    }

    #[test]
    fn shards_runs_and_a_zero_hold_are_never_held() {
        let h = StatusHold::new(Duration::from_secs(2));
        let now = Instant::now();
        for kind in [
            WorkloadKind::JobSet,
            WorkloadKind::TrainingJob,
            WorkloadKind::CronJob,
        ] {
            assert_eq!(
                h.decide("x", kind, &progressing(), false, None, now),
                Hold::Write,
                "{kind:?}"
            );
        }
        for kind in [WorkloadKind::StatefulSet, WorkloadKind::Daemon] {
            assert!(matches!(
                h.decide("y", kind, &progressing(), false, None, now),
                Hold::Wait(_)
            ));
        }
        let off = StatusHold::new(Duration::ZERO);
        assert_eq!(
            off.decide("z", WorkloadKind::Service, &progressing(), false, None, now),
            Hold::Write
        );
    }
}

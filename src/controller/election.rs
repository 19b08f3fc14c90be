//! Leader election on a Lease, built for quick hand-overs.
//!
//! - A standby **watches** the Lease: a leader that shuts down releases it (no holder), and
//!   the standby takes it as soon as the watch says so, not when the old term would have
//!   run out.
//! - A standby times the holder's term from when it **saw** the record change (client-go's
//!   rule), not from the `renewTime` written in it: a renewal that lands late on a loaded
//!   API server still counts in full, and clocks of different hosts do not matter.
//! - Every write carries the `resourceVersion` it was decided on, so of two processes that
//!   act on the same record only one succeeds.
//! - The holder renews every `renew_every` and keeps the process's write gate open until
//!   the end of its last renewal (by its own clock, from when the renewal was sent).
//! - A holder whose renewals stop landing in time (a loaded API server) has **lapsed**:
//!   its gate is shut, but its term goes on if a later renewal lands on the record it
//!   last saw. That write succeeds only if nobody wrote the Lease in between, so nobody
//!   else led: the work under it can keep its caches and queues ([`Leadership`]).
//!
//! [`next_step`] decides; [`spawn`] is the loop around it.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::write_gate;

/// A write gate closes this long before the lease ends, for clock steps and the time a
/// write spends between the gate and the API server.
const GATE_MARGIN: Duration = Duration::from_millis(250);

/// The timing of one election.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How long a holder keeps the lease after a renewal.
    pub duration: Duration,
    /// How often the holder renews it (well under `duration`).
    pub renew_every: Duration,
}

/// The part of a Lease the decision depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub holder: Option<String>,
    /// The holder's term as written in the Lease (`leaseDurationSeconds`).
    pub duration: Option<Duration>,
}

impl Record {
    fn of(lease: &Lease) -> Record {
        let spec = lease.spec.as_ref();
        Record {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            duration: spec
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs),
        }
    }
}

/// What the elector does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// There is no Lease: create it, held by us.
    Create,
    /// Nobody holds it, or the holder's term is over: take it.
    Take,
    /// We hold it and a renewal is due.
    Renew,
    /// Nothing to do for this long (or until the Lease changes).
    Wait(Duration),
}

/// Decides the next step from the last record seen, when it was seen to change
/// (`observed`), when our last successful renewal was sent (`renewed`), and the time now.
pub fn next_step(
    seen: Option<&Record>,
    observed: Instant,
    renewed: Option<Instant>,
    me: &str,
    now: Instant,
    t: Timing,
) -> Step {
    let Some(r) = seen else {
        return Step::Create;
    };
    match r.holder.as_deref() {
        None => Step::Take,
        Some(h) if h == me => {
            // Held under our name but not renewed by this process (a restart with the same
            // identity): renew at once.
            let due = renewed.map_or(now, |at| at + t.renew_every);
            if now >= due {
                Step::Renew
            } else {
                Step::Wait(due - now)
            }
        }
        Some(_) => {
            let end = observed + r.duration.unwrap_or(t.duration);
            if now >= end {
                Step::Take
            } else {
                Step::Wait(end - now)
            }
        }
    }
}

/// Where this process stands in the election, as the work under it needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// Someone else holds the Lease, or nobody does (or we have not renewed it yet).
    Standby,
    /// We hold it and the last renewal has not run out. `term` counts the terms this
    /// process has begun: a new one after the Lease was someone else's (or nobody's).
    Leading { term: u64 },
    /// The record still names us, in the same term, but the last renewal has run out:
    /// writes wait. If a renewal lands, the term goes on (`Leading` with the same
    /// `term`); if someone else takes the Lease, it ends (`Standby`).
    Lapsed { term: u64 },
}

impl Leadership {
    pub fn leads(self) -> bool {
        matches!(self, Leadership::Leading { .. })
    }
}

/// Where we stand: leading while the record names us and our last renewal (in this
/// term) has not run out, lapsed once it has.
pub fn leadership(
    seen: Option<&Record>,
    renewed: Option<Instant>,
    me: &str,
    now: Instant,
    t: Timing,
    term: u64,
) -> Leadership {
    let named = seen.is_some_and(|r| r.holder.as_deref() == Some(me));
    match renewed {
        Some(at) if named && now + GATE_MARGIN < at + t.duration => Leadership::Leading { term },
        Some(_) if named => Leadership::Lapsed { term },
        _ => Leadership::Standby,
    }
}

/// A running election: the receiver [`spawn`] returns follows it; [`Election::release`]
/// ends it.
pub struct Election {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Election {
    /// Ends the election; a lease we hold is released, so a standby takes it at once.
    pub async fn release(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// The Lease `name` as the elector knows it.
struct Elector {
    api: Api<Lease>,
    name: String,
    me: String,
    timing: Timing,
    lease: Option<Lease>,
    record: Option<Record>,
    observed: Instant,
    /// When our last renewal in the current term was sent; None outside a term.
    renewed: Option<Instant>,
    /// Terms begun by this process, and the Lease's `leaseTransitions` when the current
    /// one began: a record that names us with another count was taken anew meanwhile.
    term: u64,
    term_transitions: Option<i32>,
}

/// Starts electing on Lease `name` in `api`'s namespace as `identity`. The process's
/// write gate is opened only while this process leads.
pub fn spawn(
    api: Api<Lease>,
    name: &str,
    identity: &str,
    timing: Timing,
) -> (watch::Receiver<Leadership>, Election) {
    let (tx, rx) = watch::channel(Leadership::Standby);
    let (stop, stopped) = oneshot::channel();
    let elector = Elector {
        api,
        name: name.to_string(),
        me: identity.to_string(),
        timing,
        lease: None,
        record: None,
        observed: Instant::now(),
        renewed: None,
        term: 0,
        term_transitions: None,
    };
    let task = tokio::spawn(elector.run(tx, stopped));
    (rx, Election { stop, task })
}

impl Elector {
    async fn run(mut self, leading: watch::Sender<Leadership>, mut stopped: oneshot::Receiver<()>) {
        let gate = write_gate::gate();
        gate.close();
        let events = watcher(
            self.api.clone(),
            watcher::Config::default().fields(&format!("metadata.name={}", self.name)),
        )
        .default_backoff();
        tokio::pin!(events);
        // Until the watch has told what is there, only read.
        let mut known = false;
        let mut retry = Duration::ZERO;
        loop {
            let now = Instant::now();
            let step = if known {
                next_step(
                    self.record.as_ref(),
                    self.observed,
                    self.renewed,
                    &self.me,
                    now,
                    self.timing,
                )
            } else {
                Step::Wait(Duration::from_secs(3600))
            };
            let wait = match step {
                Step::Wait(d) => d,
                _ if retry > Duration::ZERO => std::mem::take(&mut retry),
                Step::Create | Step::Take | Step::Renew => {
                    if let Err(e) = self.write(step).await {
                        tracing::debug!(lease = %self.name, error = %e, ?step, "lease write failed");
                        retry = self.timing.renew_every / 4;
                    }
                    Duration::ZERO
                }
            };
            // Leadership also ends by itself when renewals stop landing.
            let lead_end = self
                .renewed
                .map(|at| (at + self.timing.duration).saturating_duration_since(now + GATE_MARGIN));
            let wait = lead_end
                .filter(|_| leading.borrow().leads())
                .map_or(wait, |e| wait.min(e));
            self.publish(&leading);
            if wait > Duration::ZERO {
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    event = events.next() => match event {
                        Some(Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l))) => {
                            self.ingest(Some(l));
                            known = true;
                        }
                        Some(Ok(watcher::Event::Delete(_))) => {
                            self.ingest(None);
                            known = true;
                        }
                        Some(Ok(watcher::Event::InitDone)) => known = true,
                        Some(Ok(watcher::Event::Init)) => {}
                        Some(Err(e)) => tracing::warn!(lease = %self.name, error = %e, "lease watch failed; retrying"),
                        None => break,
                    },
                    _ = &mut stopped => break,
                }
            }
        }
        gate.close();
        let _ = leading.send(Leadership::Standby);
        self.release().await;
    }

    /// Tells the work whether it leads; the write gate follows.
    fn publish(&self, leading: &watch::Sender<Leadership>) {
        let now = Instant::now();
        let lead = leadership(
            self.record.as_ref(),
            self.renewed,
            &self.me,
            now,
            self.timing,
            self.term,
        );
        let gate = write_gate::gate();
        match (lead, self.renewed) {
            (Leadership::Leading { .. }, Some(at)) => {
                gate.open_until(at + self.timing.duration - GATE_MARGIN);
            }
            _ => gate.close(),
        }
        leading.send_if_modified(|l| std::mem::replace(l, lead) != lead);
    }

    /// Takes in a Lease read from the API server (a watch event or a write's answer).
    fn ingest(&mut self, lease: Option<Lease>) {
        // An event older than what a write already returned changes nothing.
        if let (Some(new), Some(old)) = (&lease, &self.lease)
            && let (Some(a), Some(b)) = (version(new), version(old))
            && a < b
        {
            return;
        }
        let record = lease.as_ref().map(Record::of);
        // Any change of the record counts (client-go's rule): a renewal changes renewTime
        // only, and the standby's clock starts again from it.
        let spec = |l: &Option<Lease>| l.as_ref().and_then(|l| l.spec.clone());
        let changed = spec(&lease) != spec(&self.lease);
        if changed {
            self.observed = Instant::now();
        }
        // Our term goes on only while the record names us with the count of takes it had
        // when the term began.
        let named = record.as_ref().and_then(|r| r.holder.as_deref()) == Some(self.me.as_str());
        let retaken = self.term_transitions.is_some()
            && lease.as_ref().and_then(transitions) != self.term_transitions;
        if !named || retaken {
            self.renewed = None;
        }
        self.record = record;
        self.lease = lease;
    }

    /// Creates, takes or renews the Lease, on the version last seen.
    async fn write(&mut self, step: Step) -> Result<(), kube::Error> {
        let sent = Instant::now();
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let secs = i32::try_from(self.timing.duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let params = PostParams {
            field_manager: Some(format!("{}-lease", self.name)),
            ..Default::default()
        };
        let result = match (step, &self.lease) {
            (Step::Create, _) | (_, None) => {
                let lease = Lease {
                    metadata: kube::api::ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.me.clone()),
                        lease_duration_seconds: Some(secs),
                        acquire_time: Some(now.clone()),
                        renew_time: Some(now),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                self.api.create(&params, &lease).await
            }
            (_, Some(current)) => {
                let mut lease = current.clone();
                let spec = lease.spec.get_or_insert_with(Default::default);
                if step == Step::Take {
                    spec.holder_identity = Some(self.me.clone());
                    spec.acquire_time = Some(now.clone());
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                }
                spec.lease_duration_seconds = Some(secs);
                spec.renew_time = Some(now);
                self.api.replace(&self.name, &params, &lease).await
            }
        };
        match result {
            Ok(lease) => {
                let begins = self.renewed.is_none();
                let count = transitions(&lease);
                if begins {
                    self.term_transitions = None;
                }
                self.ingest(Some(lease));
                if begins {
                    self.term += 1;
                    self.term_transitions = count;
                }
                self.renewed = Some(sent);
                if step != Step::Renew {
                    tracing::info!(lease = %self.name, identity = %self.me, "took the lease");
                }
                Ok(())
            }
            // Someone else wrote first: read what is there and decide again.
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let lease = self.api.get_opt(&self.name).await?;
                self.ingest(lease);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Gives the lease up when we hold it, so a standby takes it at once.
    async fn release(&mut self) {
        let Some(mut lease) = self.lease.clone() else {
            return;
        };
        if self.record.as_ref().and_then(|r| r.holder.as_deref()) != Some(self.me.as_str()) {
            return;
        }
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        let params = PostParams {
            field_manager: Some(format!("{}-lease", self.name)),
            ..Default::default()
        };
        match self.api.replace(&self.name, &params, &lease).await {
            Ok(_) => tracing::info!(lease = %self.name, "released the lease"),
            Err(e) => tracing::warn!(lease = %self.name, error = %e, "could not release the lease"),
        }
    }
}

/// The Lease's count of takes (`leaseTransitions`).
fn transitions(l: &Lease) -> Option<i32> {
    l.spec.as_ref()?.lease_transitions
}

/// The resourceVersion as a number where it is one (etcd revisions are), to order a
/// watch event against a write's answer for the same object.
fn version(l: &Lease) -> Option<u64> {
    l.metadata.resource_version.as_deref()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timing = Timing {
        duration: Duration::from_secs(8),
        renew_every: Duration::from_secs(2),
    };

    fn held_by(h: &str) -> Record {
        Record {
            holder: Some(h.into()),
            duration: Some(Duration::from_secs(8)),
        }
    }

    #[test]
    fn no_lease_is_created_and_a_released_one_is_taken_at_once() {
        let now = Instant::now();
        assert_eq!(next_step(None, now, None, "a", now, T), Step::Create);
        let free = Record {
            holder: None,
            duration: Some(Duration::from_secs(8)),
        };
        assert_eq!(next_step(Some(&free), now, None, "a", now, T), Step::Take);
    }

    #[test]
    fn a_standby_times_the_holder_from_when_it_saw_the_last_change() {
        let seen = Instant::now();
        let r = held_by("b");
        assert_eq!(
            next_step(Some(&r), seen, None, "a", seen + Duration::from_secs(3), T),
            Step::Wait(Duration::from_secs(5))
        );
        assert_eq!(
            next_step(Some(&r), seen, None, "a", seen + Duration::from_secs(8), T),
            Step::Take
        );
        // The holder's own term counts, not ours.
        let short = Record {
            holder: Some("b".into()),
            duration: Some(Duration::from_secs(2)),
        };
        assert_eq!(
            next_step(
                Some(&short),
                seen,
                None,
                "a",
                seen + Duration::from_secs(2),
                T
            ),
            Step::Take
        );
    }

    #[test]
    fn the_holder_renews_on_schedule_and_at_once_after_a_restart() {
        let at = Instant::now();
        let r = held_by("a");
        assert_eq!(
            next_step(
                Some(&r),
                at,
                Some(at),
                "a",
                at + Duration::from_millis(500),
                T
            ),
            Step::Wait(Duration::from_millis(1500))
        );
        assert_eq!(
            next_step(Some(&r), at, Some(at), "a", at + Duration::from_secs(2), T),
            Step::Renew
        );
        // Our name in the Lease, but not renewed by this process.
        assert_eq!(next_step(Some(&r), at, None, "a", at, T), Step::Renew);
    }

    #[test]
    fn leadership_lapses_with_the_last_renewal_and_ends_with_the_record() {
        let at = Instant::now();
        let r = held_by("a");
        let after = |s| at + Duration::from_secs(s);
        assert_eq!(
            leadership(Some(&r), Some(at), "a", after(7), T, 3),
            Leadership::Leading { term: 3 }
        );
        // The renewal ran out but the record still names us: the same term, lapsed.
        assert_eq!(
            leadership(Some(&r), Some(at), "a", after(8), T, 3),
            Leadership::Lapsed { term: 3 }
        );
        assert!(!Leadership::Lapsed { term: 3 }.leads());
        // Not renewed by this process, or someone else's: no term of ours.
        assert_eq!(
            leadership(Some(&r), None, "a", at, T, 3),
            Leadership::Standby
        );
        assert_eq!(
            leadership(Some(&held_by("b")), Some(at), "a", at, T, 3),
            Leadership::Standby
        );
        assert_eq!(
            leadership(None, Some(at), "a", at, T, 3),
            Leadership::Standby
        );
    }
}

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

/// Whether we lead: the record names us and our last renewal has not run out.
pub fn leads(
    seen: Option<&Record>,
    renewed: Option<Instant>,
    me: &str,
    now: Instant,
    t: Timing,
) -> bool {
    seen.is_some_and(|r| r.holder.as_deref() == Some(me))
        && renewed.is_some_and(|at| now + GATE_MARGIN < at + t.duration)
}

/// A running election: `leading` follows it; [`Election::release`] ends it.
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
    renewed: Option<Instant>,
}

/// Starts electing on Lease `name` in `api`'s namespace as `identity`. The process's
/// write gate is opened only while this process leads.
pub fn spawn(
    api: Api<Lease>,
    name: &str,
    identity: &str,
    timing: Timing,
) -> (watch::Receiver<bool>, Election) {
    let (tx, rx) = watch::channel(false);
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
    };
    let task = tokio::spawn(elector.run(tx, stopped));
    (rx, Election { stop, task })
}

impl Elector {
    async fn run(mut self, leading: watch::Sender<bool>, mut stopped: oneshot::Receiver<()>) {
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
                .filter(|_| *leading.borrow())
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
        let _ = leading.send(false);
        self.release().await;
    }

    /// Tells the work whether it leads; the write gate follows.
    fn publish(&self, leading: &watch::Sender<bool>) {
        let now = Instant::now();
        let lead = leads(
            self.record.as_ref(),
            self.renewed,
            &self.me,
            now,
            self.timing,
        );
        let gate = write_gate::gate();
        match (lead, self.renewed) {
            (true, Some(at)) => {
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
        if record.as_ref().and_then(|r| r.holder.as_deref()) != Some(self.me.as_str()) {
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
                self.ingest(Some(lease));
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
    fn leadership_ends_with_the_last_renewal_not_with_the_record() {
        let at = Instant::now();
        let r = held_by("a");
        assert!(leads(
            Some(&r),
            Some(at),
            "a",
            at + Duration::from_secs(7),
            T
        ));
        assert!(!leads(
            Some(&r),
            Some(at),
            "a",
            at + Duration::from_secs(8),
            T
        ));
        assert!(!leads(Some(&r), None, "a", at, T));
        assert!(!leads(Some(&held_by("b")), Some(at), "a", at, T));
    }
}

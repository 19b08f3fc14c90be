//! One writer. Under leader election a process may write only while its lease is
//! valid by its own clock: every client it builds carries [`WriteGateLayer`], which refuses
//! a mutating request (other than to its own election Lease) once the deadline has passed. Aborting the
//! leader's tasks when the lease manager reports the loss is not enough: a process that
//! was stopped (SIGSTOP, a long GC-like pause, a frozen VM) past its lease wakes with every
//! timer due at once, and its reconcilers can write before the lease task runs. The gate
//! needs no task to run: the deadline passes by itself.
//!
//! Without leader election (a single instance, the CLI, the JSS) the gate stays open.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::Request;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `u64::MAX`: open without a deadline (no leader election).
const OPEN: u64 = u64::MAX;

pub struct WriteGate {
    base: Instant,
    /// Milliseconds after `base` until which writes pass; 0 = closed.
    deadline_ms: AtomicU64,
    /// The election Lease's path (`/apis/coordination.k8s.io/v1/namespaces/NS/leases`,
    /// name): the one write a process that does not lead must make.
    election: Mutex<Option<(String, String)>>,
}

/// The process's gate (one leadership per process).
pub fn gate() -> &'static WriteGate {
    static GATE: OnceLock<WriteGate> = OnceLock::new();
    GATE.get_or_init(|| WriteGate {
        base: Instant::now(),
        deadline_ms: AtomicU64::new(OPEN),
        election: Mutex::new(None),
    })
}

impl WriteGate {
    /// Names the Lease this process elects itself with: writes to it pass a closed gate,
    /// and no other Lease's do (a deposed hub must not renew a member's fence Lease).
    pub fn set_election_lease(&self, namespace: &str, name: &str) {
        if let Ok(mut e) = self.election.lock() {
            *e = Some((
                format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"),
                name.to_string(),
            ));
        }
    }

    /// Whether `req` writes the election Lease (a create of it, or a change).
    fn is_election_lease<B>(&self, req: &Request<B>) -> bool {
        let Ok(e) = self.election.lock() else {
            return false;
        };
        let Some((collection, name)) = e.as_ref() else {
            return false;
        };
        let path = req.uri().path();
        match path.strip_prefix(collection.as_str()) {
            // A create names the Lease in its body; the collection is the election's.
            Some("") => req.method() == hyper::Method::POST,
            Some(rest) => rest.strip_prefix('/') == Some(name.as_str()),
            None => false,
        }
    }

    /// Writes pass until `deadline` (the lease's end by this process's clock).
    pub fn open_until(&self, deadline: Instant) {
        let ms = deadline.saturating_duration_since(self.base).as_millis();
        self.deadline_ms
            .store(u64::try_from(ms).unwrap_or(OPEN - 1), Ordering::SeqCst);
    }

    /// No write passes (standing by, or the lease is lost).
    pub fn close(&self) {
        self.deadline_ms.store(0, Ordering::SeqCst);
    }

    /// How long writes still pass: None when closed, `Duration::MAX` without a deadline.
    pub fn open_for(&self) -> Option<Duration> {
        let deadline = self.deadline_ms.load(Ordering::SeqCst);
        if deadline == OPEN {
            return Some(Duration::MAX);
        }
        let now = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(OPEN);
        (now < deadline).then(|| Duration::from_millis(deadline - now))
    }

    pub fn is_open(&self) -> bool {
        let deadline = self.deadline_ms.load(Ordering::SeqCst);
        deadline == OPEN
            || u64::try_from(self.base.elapsed().as_millis()).unwrap_or(OPEN) < deadline
    }

    /// The end of a lease held by this process: `renewed` (wall clock, seconds) plus its
    /// duration, less a margin for clock steps, as an instant of this process's clock.
    pub fn open_for_lease(&self, renewed_unix_ms: i64, duration: Duration) {
        let now_ms = k8s_openapi::jiff::Timestamp::now().as_millisecond();
        let margin = 250;
        let left =
            renewed_unix_ms + i64::try_from(duration.as_millis()).unwrap_or(0) - margin - now_ms;
        match u64::try_from(left) {
            Ok(left) if left > 0 => {
                self.open_until(Instant::now() + Duration::from_millis(left));
            }
            _ => self.close(),
        }
    }
}

/// Refused: this process does not hold its lease now.
#[derive(Debug, thiserror::Error)]
#[error("not leading: writes are refused until this process holds its lease again")]
pub struct NotLeading;

/// Whether `err` (or what caused it) is this gate's refusal: the write was not sent, and
/// is retried once the lease is renewed rather than counted as a failure.
pub fn refused(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if e.is::<NotLeading>() {
            return true;
        }
        next = e.source();
    }
    false
}

fn mutating(method: &hyper::Method) -> bool {
    !matches!(
        *method,
        hyper::Method::GET | hyper::Method::HEAD | hyper::Method::OPTIONS
    )
}

#[derive(Clone, Copy, Debug, Default)]
pub struct WriteGateLayer;

impl<S> tower::Layer<S> for WriteGateLayer {
    type Service = WriteGateService<S>;
    fn layer(&self, inner: S) -> WriteGateService<S> {
        WriteGateService { inner }
    }
}

#[derive(Clone, Debug)]
pub struct WriteGateService<S> {
    inner: S,
}

impl<S, B> tower::Service<Request<B>> for WriteGateService<S>
where
    S: tower::Service<Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let write = mutating(req.method());
        // Read before the gate is asked, so the time a write shows is never later than
        // the check it passed: a process stopped between the check and a clock read
        // taken after it would stamp a write decided before the stop with the time it
        // resumed (seen in e2e_hub_ha: stamped 94 s after the stop, sent at the resume).
        let checked_ms = k8s_openapi::jiff::Timestamp::now().as_millisecond();
        // The election Lease is how leadership is won and kept: never gated.
        if write && !gate().is_open() && !gate().is_election_lease(&req) {
            return Box::pin(async { Err(Box::new(NotLeading) as BoxError) });
        }
        // Every request names its process; a write also when it passed the gate, so an
        // audit log shows that a write landing late (sent as a stopped process resumed)
        // was decided while the lease was valid.
        let agent = if write {
            format!("{} gate={checked_ms}", super::kube_args::user_agent())
        } else {
            super::kube_args::user_agent()
        };
        if let Ok(v) = hyper::header::HeaderValue::from_str(&agent) {
            req.headers_mut().insert(hyper::header::USER_AGENT, v);
        }
        let f = self.inner.call(req);
        Box::pin(async move { f.await.map_err(Into::into) })
    }
}

/// A client from `config` whose writes pass the process's gate.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&WriteGateLayer)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_closes_by_itself_when_the_lease_runs_out() {
        let g = WriteGate {
            base: Instant::now(),
            deadline_ms: AtomicU64::new(OPEN),
            election: Mutex::new(None),
        };
        assert!(g.is_open(), "open without leader election");
        g.close();
        assert!(!g.is_open());
        g.open_until(Instant::now() + Duration::from_secs(60));
        assert!(g.is_open());
        g.open_until(Instant::now());
        assert!(!g.is_open(), "a deadline now is past");
        let now = k8s_openapi::jiff::Timestamp::now().as_millisecond();
        g.open_for_lease(now, Duration::from_secs(10));
        assert!(g.is_open(), "renewed now, 10 s lease");
        g.open_for_lease(now - 9_800, Duration::from_secs(10));
        assert!(!g.is_open(), "within the margin of the lease's end");
        g.open_for_lease(now - 60_000, Duration::from_secs(10));
        assert!(!g.is_open(), "renewed a minute ago");
        assert_eq!(g.open_for(), None);
        g.open_for_lease(now, Duration::from_secs(10));
        let left = g.open_for().expect("open");
        assert!(
            left > Duration::from_secs(9) && left <= Duration::from_millis(9_750),
            "{left:?}"
        );
    }

    #[test]
    fn a_refusal_is_told_apart_from_other_errors_through_its_causes() {
        let not_leading = kube::Error::Service(Box::new(NotLeading));
        assert!(refused(&not_leading));
        let other = kube::Error::Service("connection reset".into());
        assert!(!refused(&other));
    }

    #[test]
    fn only_writes_other_than_the_election_lease_are_gated() {
        let req =
            |m: hyper::Method, path: &str| Request::builder().method(m).uri(path).body(()).unwrap();
        assert!(!mutating(&hyper::Method::GET));
        assert!(mutating(&hyper::Method::PATCH));
        assert!(mutating(&hyper::Method::DELETE));
        let g = WriteGate {
            base: Instant::now(),
            deadline_ms: AtomicU64::new(0),
            election: Mutex::new(None),
        };
        let leases = "/apis/coordination.k8s.io/v1/namespaces/pinfed-system/leases";
        let own = format!("{leases}/pinfed-hub");
        assert!(
            !g.is_election_lease(&req(hyper::Method::PUT, &own)),
            "none named yet"
        );
        g.set_election_lease("pinfed-system", "pinfed-hub");
        assert!(g.is_election_lease(&req(hyper::Method::PUT, &own)));
        assert!(g.is_election_lease(&req(hyper::Method::POST, leases)));
        for other in [
            format!("{leases}/pinfed-hub-fence"),
            format!("{leases}/pinfed-hub2"),
            "/apis/coordination.k8s.io/v1/namespaces/other/leases/pinfed-hub".to_string(),
            "/apis/compute.pinterest.com/v1alpha1/namespaces/a/pinterestservices/web/status"
                .to_string(),
        ] {
            assert!(
                !g.is_election_lease(&req(hyper::Method::PATCH, &other)),
                "{other}"
            );
        }
    }
}

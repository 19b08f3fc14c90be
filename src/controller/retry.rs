//! The one error policy of the controllers: per-object exponential backoff with jitter
//! (`backon`), forgotten when the object reconciles cleanly. A failing object waits
//! longer each time; the others are not slowed down; jitter keeps many objects failing
//! on the same outage from retrying in lockstep.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

#[derive(Debug)]
pub struct RetryPolicy {
    first: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, usize>>,
}

impl RetryPolicy {
    /// Waits `first` after the first failure, twice as long after each further one, at
    /// most `max` (each plus jitter).
    pub fn new(first: Duration, max: Duration) -> RetryPolicy {
        RetryPolicy {
            first,
            max,
            failures: Mutex::default(),
        }
    }

    /// Records a failure of `key` and returns how long to wait before retrying it.
    pub fn failed(&self, key: &str) -> Duration {
        let n = self
            .failures
            .lock()
            .map(|mut f| {
                let n = f.entry(key.to_string()).or_insert(0);
                *n += 1;
                *n
            })
            .unwrap_or(1);
        ExponentialBuilder::default()
            .with_min_delay(self.first)
            .with_max_delay(self.max)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times()
            .build()
            .nth(n - 1)
            .unwrap_or(self.max)
    }

    /// Forgets the failures of `key` (it reconciled).
    pub fn succeeded(&self, key: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
    }

    /// Failures recorded for `key` since it last succeeded.
    pub fn failures(&self, key: &str) -> usize {
        self.failures
            .lock()
            .map(|f| f.get(key).copied().unwrap_or(0))
            .unwrap_or(0)
    }
}

/// Whether a request failed on the way rather than being answered: a pooled connection
/// the API server had closed (`SendRequest`), a timeout, an API server shedding load
/// (429, 503, 504). Any other answer (a 4xx, a conflict, a refusal) is final.
pub fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 429 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// Runs a request that is safe to repeat (a read, a server-side apply, a delete, a review)
/// again while it fails [`transient`]ly: three more tries, 100 ms apart and doubling,
/// with jitter. For a one-shot caller (a person waiting on the JSS) that has no queue to
/// retry it later; a controller's reconcile has its [`RetryPolicy`] instead.
pub async fn repeatable<T, F, Fut>(request: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    use backon::Retryable;
    request
        .retry(
            ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(100))
                .with_max_delay(Duration::from_secs(1))
                .with_max_times(3)
                .with_jitter(),
        )
        .when(transient)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("x", "y").with_code(code),
        ))
    }

    #[test]
    fn only_failures_on_the_way_are_transient() {
        assert!(transient(&kube::Error::Service(
            "client error (SendRequest)".into()
        )));
        for code in [429, 503, 504] {
            assert!(transient(&api_error(code)), "{code}");
        }
        for code in [400, 403, 404, 409, 422, 500] {
            assert!(!transient(&api_error(code)), "{code}");
        }
    }

    #[tokio::test]
    async fn a_repeatable_request_is_tried_again_only_while_it_fails_on_the_way() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let tries = AtomicUsize::new(0);
        let r = repeatable(|| async {
            match tries.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(kube::Error::Service("client error (SendRequest)".into())),
                n => Ok(n),
            }
        })
        .await;
        assert_eq!(r.unwrap(), 2, "answered on the third try");
        let tries = AtomicUsize::new(0);
        let r: Result<(), _> = repeatable(|| async {
            tries.fetch_add(1, Ordering::SeqCst);
            Err(api_error(409))
        })
        .await;
        assert!(r.is_err());
        assert_eq!(tries.load(Ordering::SeqCst), 1, "a refusal is final");
        let tries = AtomicUsize::new(0);
        let r: Result<(), _> = repeatable(|| async {
            tries.fetch_add(1, Ordering::SeqCst);
            Err(api_error(503))
        })
        .await;
        assert!(r.is_err());
        assert_eq!(tries.load(Ordering::SeqCst), 4, "at most three more tries");
    }

    #[test]
    fn delays_grow_per_object_up_to_the_cap_and_reset_on_success() {
        let p = RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(8));
        let d: Vec<Duration> = (0..6).map(|_| p.failed("a")).collect();
        // Jitter adds at most the delay itself.
        assert!(
            d[0] >= Duration::from_secs(1) && d[0] <= Duration::from_secs(2),
            "{d:?}"
        );
        assert!(d[2] >= Duration::from_secs(4), "{d:?}");
        assert!(d[5] <= Duration::from_secs(16), "capped: {d:?}");
        assert!(d[5] >= Duration::from_secs(8), "{d:?}");
        // Another object starts from the beginning.
        assert!(p.failed("b") <= Duration::from_secs(2));
        assert_eq!(p.failures("a"), 6);
        p.succeeded("a");
        assert_eq!(p.failures("a"), 0);
        assert!(p.failed("a") <= Duration::from_secs(2));
    }
}

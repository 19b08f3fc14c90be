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

#[cfg(test)]
mod tests {
    use super::*;

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

//! The one wait loop of the tests, the benchmarks and the e2e harness: check, and check
//! again every `every` until it holds or `timeout` has passed.

use std::future::Future;
use std::time::{Duration, Instant};

/// Waited `timeout` for `what`, and it never held.
#[derive(Debug)]
pub struct TimedOut {
    pub what: String,
    pub timeout: Duration,
}

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "timed out after {:?} waiting for {}",
            self.timeout, self.what
        )
    }
}

impl std::error::Error for TimedOut {}

/// Returns once `check` holds; `Err` once `timeout` has passed without it holding (it is
/// checked once more at the end, so a check slower than the timeout still gets a turn).
pub async fn until<F, Fut>(
    timeout: Duration,
    every: Duration,
    what: &str,
    mut check: F,
) -> Result<(), TimedOut>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(TimedOut {
                what: what.to_string(),
                timeout,
            });
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn holds_after_a_few_checks_or_times_out_naming_what() {
        let mut n = 0;
        until(
            Duration::from_secs(5),
            Duration::from_millis(1),
            "three",
            || {
                n += 1;
                let done = n >= 3;
                async move { done }
            },
        )
        .await
        .expect("held at the third check");
        assert_eq!(n, 3);
        let e = until(
            Duration::from_millis(20),
            Duration::from_millis(5),
            "never",
            || async { false },
        )
        .await
        .unwrap_err();
        assert_eq!(e.to_string(), "timed out after 20ms waiting for never");
    }
}

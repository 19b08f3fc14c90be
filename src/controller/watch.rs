//! Watch-error backoff shared by every watch of the agent, hub and JSS.
//!
//! kube's `default_backoff` (client-go's reflector: 0.8 s doubling to 30 s, jitter up to
//! twice that, reset only after 120 s) is kind to one struggling API server, but a member
//! API server that restarts is the case federation exists for: while it is down every
//! watch ramps up to its ceiling, and once it is back the first watch gets `410 Gone` (its
//! resource version predates the new watch cache), which is one more error and one more
//! wait at the ceiling before the relist. Measured on local-3, an agent took 1 min 45 s to
//! see a PinterestService created right after its API server returned. With a 4 s ceiling
//! the same path takes seconds, and ~20 watches each retrying every 4–8 s is no load for
//! an API server.

use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::watcher::{self, ExponentialBackoff};

/// Shortest wait after a watch error.
pub const MIN_DELAY: Duration = Duration::from_millis(200);
/// Longest wait before jitter (jitter adds up to as much again).
pub const MAX_DELAY: Duration = Duration::from_secs(4);
/// A watch that has not failed for this long starts again from `MIN_DELAY`.
pub const RESET_AFTER: Duration = Duration::from_secs(30);

/// How long the API server keeps a watch of a client from
/// `tokens::watch_client_from_kubeconfig` open before ending it (the watcher resumes from
/// where it was, no relist).
pub const WATCH_SECS: u32 = 60;
/// That client's read timeout: a watch's end (or a bookmark) comes before it, so only a
/// connection that went silent (a cluster cut off without a reset) trips it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(WATCH_SECS as u64 + 15);

/// The watch configuration for a client from `tokens::watch_client_from_kubeconfig`.
pub fn config() -> watcher::Config {
    watcher::Config::default().timeout(WATCH_SECS)
}

/// The backoff for `WatchStreamExt::backoff`: exponential from `MIN_DELAY` to `MAX_DELAY`
/// with jitter, reset on every event received and after `RESET_AFTER` without errors.
pub fn backoff() -> ResetTimerBackoff<ExponentialBackoff> {
    ResetTimerBackoff::new(
        backon::ExponentialBuilder::default()
            .with_min_delay(MIN_DELAY)
            .with_max_delay(MAX_DELAY)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times()
            .into(),
        RESET_AFTER,
    )
}

/// Logs and drops the errors of a controller's trigger stream, after its own `backoff()`
/// has paused it. An error that reaches `kube::runtime::Controller` pauses *every* trigger
/// of that controller (its `trigger_backoff`, client-go's 30 s ramp): after a member API
/// server restart each of the agent's ~20 watches fails once with `410 Gone`, and the
/// controller took no new object for minutes.
pub fn skip_errors<T, S>(watch: String, stream: S) -> impl Stream<Item = S::Item> + use<T, S>
where
    S: Stream<Item = Result<T, watcher::Error>>,
{
    stream.filter(move |r| {
        match r {
            // Expected once per watch after an API server restart: the watcher relists.
            Err(watcher::Error::WatchError(s)) if s.code == 410 => {
                tracing::debug!(%watch, "watch expired (410 Gone), relisting")
            }
            Err(e) => tracing::warn!(%watch, error = %super::Chain(e), "watch failed; retrying after backoff"),
            Ok(_) => {}
        }
        futures::future::ready(r.is_ok())
    })
}

/// The messages of a broadcast channel as a stream; a slow reader skips what it missed
/// (every trigger stream this feeds also has a resync behind it).
pub fn broadcast_stream<T: Clone + Send + 'static>(
    rx: tokio::sync::broadcast::Receiver<T>,
) -> impl Stream<Item = T> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(ev) => return Some((ev, rx)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_is_bounded_by_twice_the_ceiling_and_grows_from_the_floor() {
        let waits: Vec<Duration> = backoff().take(50).collect();
        assert_eq!(waits.len(), 50, "the backoff never gives up");
        assert!(
            waits[0] >= MIN_DELAY && waits[0] <= MIN_DELAY * 2,
            "{:?}",
            waits[0]
        );
        for w in &waits {
            assert!(*w <= MAX_DELAY * 2, "{w:?} exceeds twice {MAX_DELAY:?}");
        }
        assert!(
            waits[10..].iter().all(|w| *w >= MAX_DELAY),
            "after ten errors the wait sits at the ceiling: {waits:?}"
        );
    }

    #[tokio::test]
    async fn skip_errors_passes_items_and_drops_errors() {
        let status = kube::core::Status::failure("too old resource version", "Expired")
            .with_code(410)
            .boxed();
        let input = futures::stream::iter(vec![
            Ok(1),
            Err(watcher::Error::WatchError(status)),
            Ok(2),
            Err(watcher::Error::NoResourceVersion),
            Ok(3),
        ]);
        let out: Vec<i32> = skip_errors("test".into(), input)
            .map(|r| r.expect("errors are dropped"))
            .collect()
            .await;
        assert_eq!(out, vec![1, 2, 3]);
    }

    #[test]
    fn reset_starts_again_from_the_floor() {
        use kube::runtime::utils::Backoff;
        let mut b = backoff();
        for _ in 0..10 {
            b.next();
        }
        b.reset();
        let w = b.next().unwrap();
        assert!(w <= MIN_DELAY * 2, "{w:?}");
    }
}

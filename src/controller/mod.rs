//! The imperative shell shared by the long-running parts (agent, hub, JSS): health and
//! metrics endpoints, reconcile metrics, leader election, server-side apply helpers, the watch
//! backoff, logs and traces.

pub mod apply;
pub mod cluster_side;
pub mod compact;
pub mod election;
pub mod events;
pub mod fence;
pub mod http;
pub mod keyed_work;
pub mod kube_args;
pub mod leader;
pub mod metrics;
pub mod mirror;
pub mod own_writes;
pub mod queue;
pub mod retry;
pub mod step;
pub mod tokens;
pub mod trace;
pub mod watch;
pub mod write_gate;

/// Displays an error with its whole `source()` chain ("a: b: c"), skipping a source whose
/// text the outer message already contains. kube's transport errors say only
/// "client error (SendRequest)" at the top; the cause (timeout, reset, closed) is below.
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut shown = self.0.to_string();
        f.write_str(&shown)?;
        let mut next = self.0.source();
        while let Some(e) = next {
            let text = e.to_string();
            if !shown.contains(&text) {
                write!(f, ": {text}")?;
                shown.push_str(&text);
            }
            next = e.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Chain;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("wrapped: {0}")]
    struct Wrapped(#[source] std::io::Error);

    #[test]
    fn chain_shows_every_cause_once() {
        let e = Outer(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "timed out",
        ));
        assert_eq!(Chain(&e).to_string(), "outer: timed out");
        let e = Wrapped(std::io::Error::other("reset"));
        assert_eq!(Chain(&e).to_string(), "wrapped: reset");
    }
}

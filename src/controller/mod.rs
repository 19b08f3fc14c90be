//! The imperative shell shared by the long-running parts (agent, hub, JSS): health and
//! metrics endpoints, reconcile metrics, leader election, server-side apply helpers and the watch backoff.

pub mod apply;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod queue;
pub mod watch;

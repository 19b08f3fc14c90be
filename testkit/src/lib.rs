//! What pinfed's tests (`tests/support`), benchmarks (`benches/federation`) and the e2e
//! harness (`e2e/harness`) share, written once:
//!
//! - [`daemon`]: a child process that dies with the test or benchmark process
//!   (`PR_SET_PDEATHSIG`), with its log;
//! - [`detached`]: control-plane processes that outlive the harness command that started
//!   them, tracked by pid and only signalled while they still run one of our commands;
//! - [`net`]: free loopback ports;
//! - [`names`]: unique names for namespaces, logs and identities;
//! - [`sample`]: resident memory and CPU time of a process (through `procfs`);
//! - [`http`]: a small HTTP/1.1 client for loopback endpoints (metrics, health), on the
//!   hyper stack pinfed itself uses;
//! - [`wait`]: the one wait loop;
//! - [`federation`]: the running topology's clusters and the `pinfed` commands (join,
//!   hub, agent) the e2e tests and the federation benchmarks run on it.

pub mod daemon;
pub mod detached;
pub mod federation;
pub mod http;
pub mod names;
pub mod net;
pub mod sample;
pub mod wait;

pub use daemon::{Daemon, OnDrop};
pub use names::unique_name;
pub use net::{free_port, free_ports, port_open};
pub use sample::Sample;

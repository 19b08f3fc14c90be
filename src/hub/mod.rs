//! The hub: member registry and health, placement, slices and status aggregation.
//! [`run`] wires the process: its caches, loops and leader election.

pub mod bundle_gc;
pub mod cleanups;
pub mod config_follow;
pub mod join;
pub mod join_pull;
pub mod member_loop;
pub mod member_token;
pub mod members;
pub mod pull_credential;
pub mod quota_book;
mod run;
pub mod secret_grant;
pub mod slice_target;
pub mod slices;
pub mod unjoin;
pub mod workloads;

pub use run::{HubArgs, run};

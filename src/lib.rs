//! pinfed: a multi-cluster federation controller for Pinterest-style workloads.
//!
//! The pure core (`api`, `topology`, and later expansion, placement and status
//! aggregation) never touches a client; the long-running parts are thin loops around it.

pub mod agent;
pub mod api;
pub mod cli;
pub mod controller;
pub mod expand;
pub mod hub;
pub mod jss;
pub mod overrides;
pub mod placement;
pub mod rollout;
pub mod status;
pub mod topology;

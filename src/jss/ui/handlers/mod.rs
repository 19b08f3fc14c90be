//! The UI's handlers, one file per page: each reads the hub (through `feed`), authorizes,
//! and renders its page with `pages`. Shared parts (sessions, the frame, problems, CSRF
//! checks, the audit log) are in `super`.

pub mod fleet;
pub mod login;
pub mod owners;
pub mod queue;
pub mod quotas;
pub mod workload;
pub mod workloads;

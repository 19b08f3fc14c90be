//! API types and the value syntax they share. No I/O here.
//!
//! One file per kind (`service`, `jobset`, `cronjob`, `daemon`, `training`,
//! `statefulset`, `runtime_profile`), the federation group in `federation`, what the kinds
//! share in `common`, and the uniform view of workloads plus every CRD in `workload`.

pub mod common;
pub mod cronjob;
pub mod daemon;
pub mod federation;
pub mod ingress_host;
pub mod jobset;
pub mod kind;
pub mod member_policy;
pub mod member_slice;
pub mod overrides;
pub mod parse;
pub mod pod_policy;
pub mod pod_security;
pub mod quantity;
pub mod ranges;
pub mod rollout;
pub mod runtime_profile;
pub mod service;
pub mod statefulset;
pub mod training;
pub mod validate;
pub mod validation;
pub mod workload;
pub mod yaml;
pub mod yaml_budget;

pub use workload::{AnyWorkload, Workload, WorkloadKind, WorkloadRef, crds, crds_yaml};

//! Placement: which member clusters run a workload, and how much of it each runs.
//!
//! Pure — no client, no files, no clock, no randomness. The hub maps MemberCluster status,
//! the workload's `spec.placement`, its pod requests (with runtime sidecars) and the
//! FederatedQuota into the plain model of [`model`], calls [`plan`], and stores the
//! [`Decision`]; `pinfed plan` does the same from a topology file and prints the decision
//! as JSON. A [`Ledger`] carries reservations between consecutive decisions in one process
//! so that a burst of workloads sees each other's room.
//!
//! ```text
//! clusters ──Ledger::apply──▶ ClusterView[] ─┐
//! policy, demand, quota, current ────────────┴─▶ plan() ─▶ Outcome { decision, bindings, .. }
//!                                                              └──Ledger::reserve──▶
//! ```

pub mod app_failover;
pub mod capacity;
mod decision;
mod divide;
mod engine;
pub mod failover;
pub mod from_member;
pub mod from_workload;
mod ledger;
pub mod model;
pub mod move_budget;
pub mod pod_book;
pub mod preempt;
pub mod priority;
pub mod quota;
pub mod recorded;
pub mod report_guard;
mod shards;
mod text;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use decision::{Cause, Decision, Exclusion, MemberReason, NodeBinding, Outcome, Placement};
pub use engine::{PlanInput, plan};
pub use ledger::{Ledger, Reservation};
pub use model::{
    Bounds, ClusterView, Count, Demand, GangRole, Limits, NodeRoom, PlacementPolicy, PodShape,
    QuotaUse, QuotaView, Requirement, Resources, Selector, SelectorOperator, Spread, Strategy,
    Taint, TaintEffect, Toleration, TolerationOperator, missing_everywhere, must_leave,
};
pub use shards::parallelism_shares;

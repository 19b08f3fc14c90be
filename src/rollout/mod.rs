//! Revisions and staged rollouts, pure: what a revision is ([`revision`]), which members
//! each stage takes ([`plan`]) and one look at a rollout ([`step`]). The hub's workload
//! loop records revisions, asks [`step::step`] which revision each member runs, and
//! writes the slices; `docs/rollouts.md` is the user's view.

pub mod health;
pub mod plan;
pub mod revision;
pub mod step;
#[cfg(test)]
mod tests;

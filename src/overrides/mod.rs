//! Per-member overrides, pure: which rules select a member and what its variables make
//! of them (`select`, on the hub), what the resolved rules do to the expanded objects
//! (`apply`, in the expansion of a member's slice: after runtime injection, before the
//! member's pod policy judges the result), and what is refused before anything is
//! stored (`check`: reserved fields, unknown variables, conflicts between rules, rules
//! matching no member, patches of paths the expansion lacks). API: `api::overrides`;
//! guide: `docs/overrides.md`.

mod apply;
mod check;
mod select;
#[cfg(test)]
mod tests;

pub use apply::{Applied, application_containers, apply};
pub use check::{check_against_members, check_static};
pub use select::{Member, replica_bounds, resolve, selects};

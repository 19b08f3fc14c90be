//! Status aggregation: members' statuses of one workload → the hub resource's status.
//! Pure: the hub reads members and MemberClusters, calls [`aggregate`], writes the result.

mod aggregate;
pub mod hub_status;

pub use aggregate::*;

//! The decision as the hub records it in a workload's `status.placement`, and back. Pure.
//!
//! The record keeps what the engine decided, a daemon's pods per cluster included, so
//! that the hub after a restart and the JSS charge a placed workload what the hub charged
//! it when it decided ([`super::quota::usage_of`]).

use super::decision::{Decision, Placement};
use super::model::Strategy;
use crate::api::common::{ClusterPlacement, MemberDecision, PlacementDecision, PlacementStrategy};

/// The decision as written into hub status.
pub fn to_status(d: &Decision) -> PlacementDecision {
    PlacementDecision {
        strategy: Some(match d.strategy {
            Strategy::Divided => PlacementStrategy::Divided,
            Strategy::Duplicated => PlacementStrategy::Duplicated,
            Strategy::Single => PlacementStrategy::Single,
        }),
        placements: d
            .placements
            .iter()
            .map(|p| ClusterPlacement {
                cluster: p.cluster.clone(),
                replicas: p.replicas.map(|r| i32::try_from(r).unwrap_or(i32::MAX)),
                shards: p.shards.clone(),
                pods: p.pods.map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
            })
            .collect(),
        unplaced: i32::try_from(d.unplaced).unwrap_or(i32::MAX),
        reason: d.reason.clone(),
        ..Default::default()
    }
}

/// Members' reasons as hub status records them: bounded (100 members, 300 characters
/// each), so a status stays small however many members there are.
pub fn reasons_to_status(reasons: &[super::decision::MemberReason]) -> Vec<MemberDecision> {
    const MEMBERS: usize = 100;
    const CHARS: usize = 300;
    reasons
        .iter()
        .take(MEMBERS)
        .map(|r| MemberDecision {
            cluster: r.cluster.clone(),
            share: i32::try_from(r.share).unwrap_or(i32::MAX),
            reason: if r.why.chars().count() > CHARS {
                let mut s: String = r.why.chars().take(CHARS - 1).collect();
                s.push('…');
                s
            } else {
                r.why.clone()
            },
        })
        .collect()
}

/// The decision recorded in hub status. A negative count (the schema forbids it) reads as
/// none: no replicas, and a daemon share of one pod.
pub fn from_status(d: &PlacementDecision) -> Decision {
    Decision {
        strategy: match d.strategy {
            Some(PlacementStrategy::Duplicated) => Strategy::Duplicated,
            Some(PlacementStrategy::Single) => Strategy::Single,
            _ => Strategy::Divided,
        },
        placements: d
            .placements
            .iter()
            .map(|p| Placement {
                cluster: p.cluster.clone(),
                replicas: p.replicas.map(|r| u32::try_from(r).unwrap_or(0)),
                shards: p.shards.clone(),
                pods: p.pods.and_then(|n| u32::try_from(n).ok()),
            })
            .collect(),
        unplaced: u32::try_from(d.unplaced).unwrap_or(0),
        reason: d.reason.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_daemons_pods_survive_the_record_and_stay_out_of_the_plan_json() {
        let d = Decision {
            strategy: Strategy::Duplicated,
            placements: vec![
                Placement {
                    cluster: "a".into(),
                    pods: Some(3),
                    ..Default::default()
                },
                Placement {
                    cluster: "b".into(),
                    pods: Some(5),
                    ..Default::default()
                },
            ],
            unplaced: 0,
            reason: None,
        };
        let recorded = to_status(&d);
        assert_eq!(recorded.placements[1].pods, Some(5));
        let json = serde_json::to_value(&recorded).unwrap();
        assert_eq!(
            json["placements"][0],
            serde_json::json!({"cluster": "a", "pods": 3})
        );
        assert_eq!(from_status(&recorded), d);
        assert_eq!(from_status(&recorded).whole_pods(), 8);
        // The `pinfed plan` contract is unchanged: a daemon's share is `{"cluster": NAME}`,
        // and a `pods` field there is refused.
        assert_eq!(
            d.to_json(),
            r#"{"strategy":"Duplicated","placements":[{"cluster":"a"},{"cluster":"b"}],"unplaced":0,"reason":null}"#
        );
        assert!(
            Decision::from_json(
                r#"{"strategy":"Duplicated","placements":[{"cluster":"a","pods":3}],"unplaced":0,"reason":null}"#
            )
            .is_err()
        );
    }

    #[test]
    fn a_record_without_pods_or_with_a_negative_count_charges_one_pod() {
        let recorded = PlacementDecision {
            strategy: Some(PlacementStrategy::Duplicated),
            placements: vec![
                ClusterPlacement {
                    cluster: "a".into(),
                    ..Default::default()
                },
                ClusterPlacement {
                    cluster: "b".into(),
                    pods: Some(-2),
                    ..Default::default()
                },
            ],
            unplaced: 0,
            reason: None,
            ..Default::default()
        };
        assert_eq!(from_status(&recorded).whole_pods(), 2);
    }
}

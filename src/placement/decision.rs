//! The output of placement: the decision as `pinfed plan` prints it and the hub stores it,
//! plus what the hub needs besides (cause, exclusions, node bindings for the ledger).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::model::{Resources, Strategy};
use crate::api::ranges::{RangeError, RangeSet};

/// A placement decision. Serializes exactly as the `pinfed plan` contract:
/// `{"strategy":..,"placements":[..],"unplaced":N,"reason":STRING|null}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    pub strategy: Strategy,
    /// One entry per cluster with a share, sorted by cluster name.
    pub placements: Vec<Placement>,
    /// Replicas, shards or whole copies that found no place.
    pub unplaced: u32,
    /// Why something is unplaced; `None` (JSON `null`) when everything was placed.
    pub reason: Option<String>,
}

/// One cluster's share: `{"cluster":..,"replicas":N}`, `{"cluster":..,"shards":"0-9"}` or
/// `{"cluster":..}` (a whole copy).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    pub cluster: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    /// Range list of global shard indices (`0-3,7`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<String>,
    /// A daemon's pods in this cluster: one per matching node with room for one, as the
    /// engine admitted it against quota. The hub records it (`status.placement`) so that
    /// whoever charges the decision later charges the same; it is not part of the
    /// `pinfed plan` JSON, where a daemon's share stays `{"cluster":..}`.
    #[serde(skip)]
    pub pods: Option<u32>,
}

impl Placement {
    /// The pods a whole copy runs here: a daemon its recorded pods, else (a cron job, or
    /// a daemon recorded before its pods were) one.
    pub fn whole_pods(&self) -> u64 {
        self.pods.map_or(1, u64::from)
    }
}

impl Decision {
    /// A divided decision of shard ranges by cluster (test fixtures).
    #[cfg(test)]
    pub fn of_shards(v: &[(&str, &str)]) -> Decision {
        Decision {
            strategy: Strategy::Divided,
            placements: v
                .iter()
                .map(|(c, s)| Placement {
                    cluster: c.to_string(),
                    shards: Some(s.to_string()),
                    ..Default::default()
                })
                .collect(),
            unplaced: 0,
            reason: None,
        }
    }

    /// How many replicas or shards each cluster got (1 for a whole copy).
    pub fn shares(&self) -> BTreeMap<String, u32> {
        self.placements
            .iter()
            .map(|p| {
                let n = match (&p.replicas, &p.shards) {
                    (Some(n), _) => *n,
                    (None, Some(s)) => RangeSet::parse(s)
                        .map(|v| u32::try_from(v.len()).unwrap_or(u32::MAX))
                        .unwrap_or(0),
                    (None, None) => 1,
                };
                (p.cluster.clone(), n)
            })
            .collect()
    }

    /// The shard indices of each cluster; clusters without a shard list are left out.
    pub fn shard_sets(&self) -> Result<BTreeMap<String, RangeSet>, RangeError> {
        let mut out = BTreeMap::new();
        for p in &self.placements {
            if let Some(s) = &p.shards {
                out.insert(p.cluster.clone(), RangeSet::parse(s)?);
            }
        }
        Ok(out)
    }

    /// The pods of a whole workload (daemon or cron job) over every cluster it runs in.
    pub fn whole_pods(&self) -> u64 {
        self.placements
            .iter()
            .map(Placement::whole_pods)
            .fold(0, u64::saturating_add)
    }

    /// The clusters of the decision, in name order.
    pub fn clusters(&self) -> Vec<&str> {
        self.placements.iter().map(|p| p.cluster.as_str()).collect()
    }

    /// Parses a decision from JSON (`pinfed plan --current`).
    pub fn from_json(text: &str) -> Result<Decision, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The JSON of the `pinfed plan` contract (one line).
    pub fn to_json(&self) -> String {
        // Serializing plain strings and integers cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The kind of problem behind an unplaced share; the hub maps it to conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    NoEligibleCluster,
    InsufficientCapacity,
    QuotaExceeded,
}

impl Cause {
    pub fn as_str(&self) -> &'static str {
        match self {
            Cause::NoEligibleCluster => "NoEligibleCluster",
            Cause::InsufficientCapacity => "InsufficientCapacity",
            Cause::QuotaExceeded => "QuotaExceeded",
        }
    }
}

/// A cluster placement did not consider, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exclusion {
    pub cluster: String,
    pub why: String,
    /// Excluded only for lack of room (no node fits one pod now): evicting lower priority
    /// there could make it eligible.
    pub full: bool,
}

/// Pods a decision expects on one node (first fit over the cluster's nodes in order).
/// The ledger reserves these until the member reports the pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeBinding {
    pub cluster: String,
    pub node: String,
    pub pods: u64,
    /// Total requests of those pods.
    pub resources: Resources,
}

/// Everything a placement run produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub decision: Decision,
    /// Set when `decision.unplaced > 0`.
    pub cause: Option<Cause>,
    /// Clusters that were not eligible, with the reason (in cluster order of the input).
    pub excluded: Vec<Exclusion>,
    /// Soft problems that did not leave anything unplaced, e.g. a spread that could only
    /// be met partly.
    pub warnings: Vec<String>,
    /// Where the placed pods fit, node by node.
    pub bindings: Vec<NodeBinding>,
    /// Each member considered, with its share and why it got that share or none, from
    /// the numbers this decision was made with (cluster order).
    pub explained: Vec<MemberReason>,
}

/// Why one member got its share (or none), with the numbers behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberReason {
    pub cluster: String,
    /// Replicas, shards or pods it got (0: none).
    pub share: u32,
    pub why: String,
}

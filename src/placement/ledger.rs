//! Assume-and-deduct: a decision reserves its pods' requests on the nodes it expects them
//! on, and later decisions see that room as taken until the member reports the pods (then
//! the hub releases the reservation) or the reservation expires. Without it a burst of
//! decisions made from the same capacity snapshot piles onto one cluster.
//!
//! Pure: time is passed in; the ledger never reads a clock.

use std::collections::BTreeMap;
use std::time::SystemTime;

use super::decision::{NodeBinding, Outcome};
use super::model::{ClusterView, Resources};

/// One workload's reservation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub at: SystemTime,
    pub bindings: Vec<NodeBinding>,
}

/// Reservations by workload key (e.g. `namespace/kind/name`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    reservations: BTreeMap<String, Reservation>,
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// Reserves what `outcome` placed for `workload`, replacing its earlier reservation
    /// (a new decision for a workload supersedes the old one).
    pub fn reserve(&mut self, workload: &str, outcome: &Outcome, at: SystemTime) {
        if outcome.bindings.is_empty() {
            self.reservations.remove(workload);
            return;
        }
        self.reservations.insert(
            workload.to_string(),
            Reservation {
                at,
                bindings: outcome.bindings.clone(),
            },
        );
    }

    /// Drops a workload's reservation (its pods are reported, or it was deleted).
    pub fn release(&mut self, workload: &str) -> bool {
        self.reservations.remove(workload).is_some()
    }

    /// Drops a workload's reservation in one cluster (that member reported its pods).
    pub fn release_cluster(&mut self, workload: &str, cluster: &str) {
        if let Some(r) = self.reservations.get_mut(workload) {
            r.bindings.retain(|b| b.cluster != cluster);
            if r.bindings.is_empty() {
                self.reservations.remove(workload);
            }
        }
    }

    /// Drops reservations made before `older_than`; returns how many.
    pub fn expire(&mut self, older_than: SystemTime) -> usize {
        let before = self.reservations.len();
        self.reservations.retain(|_, r| r.at >= older_than);
        before - self.reservations.len()
    }

    pub fn get(&self, workload: &str) -> Option<&Reservation> {
        self.reservations.get(workload)
    }

    pub fn len(&self) -> usize {
        self.reservations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.reservations.is_empty()
    }

    /// Deducts every reservation except `except`'s (the workload being re-planned) from
    /// the nodes' free room. Reservations on nodes or clusters not in `clusters` are
    /// ignored.
    pub fn apply(&self, clusters: &mut [ClusterView], except: Option<&str>) {
        let mut per_node: BTreeMap<(&str, &str), Resources> = BTreeMap::new();
        for (workload, r) in &self.reservations {
            if Some(workload.as_str()) == except {
                continue;
            }
            for b in &r.bindings {
                let e = per_node
                    .entry((b.cluster.as_str(), b.node.as_str()))
                    .or_default();
                *e = e.saturating_add(&b.resources);
            }
        }
        for c in clusters.iter_mut() {
            for n in &mut c.nodes {
                if let Some(r) = per_node.get(&(c.name.as_str(), n.name.as_str())) {
                    n.free = n.free.saturating_sub(r);
                }
            }
        }
    }

    /// Total reserved by the workloads `include` selects (e.g. those under one quota),
    /// to add to the quota's `used`.
    pub fn reserved(&self, include: impl Fn(&str) -> bool) -> Resources {
        self.reservations
            .iter()
            .filter(|(w, _)| include(w))
            .flat_map(|(_, r)| &r.bindings)
            .fold(Resources::ZERO, |acc, b| acc.saturating_add(&b.resources))
    }
}

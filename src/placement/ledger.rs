//! Assume-and-deduct: a decision reserves its pods' requests on the nodes it expects them
//! on, and later decisions see that room as taken until the member reports the pods (then
//! the hub releases the reservation) or the reservation expires. Without it a burst of
//! decisions made from the same capacity snapshot piles onto one cluster.
//!
//! Pure: time is passed in; the ledger never reads a clock.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use super::decision::{NodeBinding, Outcome};
use super::model::{ClusterView, Resources};

/// One workload's reservation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub at: SystemTime,
    pub bindings: Vec<NodeBinding>,
}

/// Reservations by workload key (e.g. `namespace/kind/name`), with running totals per
/// node so that applying the ledger costs one lookup per node, however many workloads
/// hold reservations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    reservations: BTreeMap<String, Reservation>,
    /// cluster → node → reserved.
    per_node: BTreeMap<String, BTreeMap<String, Resources>>,
    /// The reservations by when they were made, so expiry looks only at the expired
    /// ones (it runs before every decision).
    by_time: BTreeSet<(SystemTime, String)>,
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// Reserves what `outcome` placed for `workload`, replacing its earlier reservation
    /// (a new decision for a workload supersedes the old one).
    pub fn reserve(&mut self, workload: &str, outcome: &Outcome, at: SystemTime) {
        self.release(workload);
        if outcome.bindings.is_empty() {
            return;
        }
        self.count(&outcome.bindings, true);
        self.by_time.insert((at, workload.to_string()));
        self.reservations.insert(
            workload.to_string(),
            Reservation {
                at,
                bindings: outcome.bindings.clone(),
            },
        );
    }

    /// What a workload holds reserved, node by node.
    pub fn reserved_by(&self, workload: &str) -> &[NodeBinding] {
        self.reservations
            .get(workload)
            .map_or(&[][..], |r| r.bindings.as_slice())
    }

    /// What `workload`'s reservation in `cluster` counts a second time, node by node: the
    /// part its `reported` pods (node, requests) already take from the member's report.
    /// Only that overlap is room; a reserved pod the report does not list yet runs all
    /// the same (the report lags the member by seconds) and stays counted.
    pub fn counted_twice<'n>(
        &self,
        workload: &str,
        cluster: &str,
        reported: impl IntoIterator<Item = (&'n str, Resources)>,
    ) -> BTreeMap<String, Resources> {
        let mut reserved: BTreeMap<&str, Resources> = BTreeMap::new();
        for b in self
            .reserved_by(workload)
            .iter()
            .filter(|b| b.cluster == cluster)
        {
            let e = reserved.entry(b.node.as_str()).or_default();
            *e = e.saturating_add(&b.resources);
        }
        let mut seen: BTreeMap<&str, Resources> = BTreeMap::new();
        for (node, r) in reported {
            let e = seen.entry(node).or_default();
            *e = e.saturating_add(&r);
        }
        reserved
            .into_iter()
            .filter_map(|(node, held)| {
                let both = held.min_each(seen.get(node)?);
                (both != Resources::ZERO).then(|| (node.to_string(), both))
            })
            .collect()
    }

    /// Drops a workload's reservation (its pods are reported, or it was deleted).
    pub fn release(&mut self, workload: &str) -> bool {
        match self.reservations.remove(workload) {
            Some(r) => {
                self.by_time.remove(&(r.at, workload.to_string()));
                self.count(&r.bindings, false);
                true
            }
            None => false,
        }
    }

    /// Drops a workload's reservation in one cluster (that member reported its pods).
    pub fn release_cluster(&mut self, workload: &str, cluster: &str) {
        let Some(r) = self.reservations.get_mut(workload) else {
            return;
        };
        let (gone, kept): (Vec<NodeBinding>, Vec<NodeBinding>) =
            r.bindings.drain(..).partition(|b| b.cluster == cluster);
        r.bindings = kept;
        if r.bindings.is_empty() {
            let at = r.at;
            self.reservations.remove(workload);
            self.by_time.remove(&(at, workload.to_string()));
        }
        self.count(&gone, false);
    }

    /// Drops reservations made before `older_than`; returns how many.
    pub fn expire(&mut self, older_than: SystemTime) -> usize {
        let old: Vec<String> = self
            .by_time
            .iter()
            .take_while(|(at, _)| *at < older_than)
            .map(|(_, w)| w.clone())
            .collect();
        for w in &old {
            self.release(w);
        }
        old.len()
    }

    /// Adds (or takes back) bindings in the per-node totals.
    fn count(&mut self, bindings: &[NodeBinding], add: bool) {
        for b in bindings {
            let nodes = self.per_node.entry(b.cluster.clone()).or_default();
            let total = nodes.entry(b.node.clone()).or_default();
            *total = if add {
                total.saturating_add(&b.resources)
            } else {
                total.saturating_sub(&b.resources)
            };
            if *total == Resources::ZERO {
                nodes.remove(&b.node);
                if nodes.is_empty() {
                    self.per_node.remove(&b.cluster);
                }
            }
        }
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
        if self.per_node.is_empty() {
            return;
        }
        // The excepted workload's own reservation is added back after deducting all.
        let own: BTreeMap<(&str, &str), Resources> = except
            .and_then(|w| self.reservations.get(w))
            .map(|r| {
                let mut m: BTreeMap<(&str, &str), Resources> = BTreeMap::new();
                for b in &r.bindings {
                    let e = m.entry((b.cluster.as_str(), b.node.as_str())).or_default();
                    *e = e.saturating_add(&b.resources);
                }
                m
            })
            .unwrap_or_default();
        for c in clusters.iter_mut() {
            let Some(nodes) = self.per_node.get(&c.name) else {
                continue;
            };
            for n in &mut c.nodes {
                let Some(total) = nodes.get(&n.name) else {
                    continue;
                };
                let mine = own
                    .get(&(c.name.as_str(), n.name.as_str()))
                    .copied()
                    .unwrap_or_default();
                n.free = n.free.saturating_sub(&total.saturating_sub(&mine));
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

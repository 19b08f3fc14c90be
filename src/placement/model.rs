//! The plain input model of placement: what a member cluster has room for, what a workload
//! asks for, the policy it is placed under and the quota it is placed within.
//!
//! These types are deliberately independent of the CRD types in `crate::api`: the hub maps
//! MemberCluster status, the workload's `spec.placement` and FederatedQuota into them, and
//! `pinfed plan --topology` builds them from a topology file ([`ClusterView::from_member`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::api::quantity::Milli;
use crate::topology::{self, Member, Topology};

/// Cluster label keys that carry a cluster's zone and region (as on nodes).
pub const ZONE_LABEL: &str = topology::ZONE_LABEL;
pub const REGION_LABEL: &str = topology::REGION_LABEL;

/// An amount of the resources placement counts. `cpu` is in milli-cores and `memory` in
/// milli-bytes (both [`Milli`], exact); `gpu` is `nvidia.com/gpu`; `pods` is a pod count.
/// Values may be negative (an over-committed node); such a node has no room.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    pub cpu: Milli,
    pub memory: Milli,
    pub gpu: i64,
    pub pods: i64,
}

impl Resources {
    pub const ZERO: Resources = Resources {
        cpu: Milli(0),
        memory: Milli(0),
        gpu: 0,
        pods: 0,
    };

    /// The request of one pod: the given cpu, memory and GPUs, and one pod slot.
    pub fn pod(cpu: Milli, memory: Milli, gpu: i64) -> Resources {
        Resources {
            cpu,
            memory,
            gpu,
            pods: 1,
        }
    }

    pub fn checked_add(&self, o: &Resources) -> Option<Resources> {
        Some(Resources {
            cpu: Milli(self.cpu.0.checked_add(o.cpu.0)?),
            memory: Milli(self.memory.0.checked_add(o.memory.0)?),
            gpu: self.gpu.checked_add(o.gpu)?,
            pods: self.pods.checked_add(o.pods)?,
        })
    }

    pub fn checked_sub(&self, o: &Resources) -> Option<Resources> {
        Some(Resources {
            cpu: Milli(self.cpu.0.checked_sub(o.cpu.0)?),
            memory: Milli(self.memory.0.checked_sub(o.memory.0)?),
            gpu: self.gpu.checked_sub(o.gpu)?,
            pods: self.pods.checked_sub(o.pods)?,
        })
    }

    /// `n` copies of this amount.
    pub fn checked_mul(&self, n: u64) -> Option<Resources> {
        Some(Resources {
            cpu: Milli(self.cpu.0.checked_mul(i128::from(n))?),
            memory: Milli(self.memory.0.checked_mul(i128::from(n))?),
            gpu: self.gpu.checked_mul(i64::try_from(n).ok()?)?,
            pods: self.pods.checked_mul(i64::try_from(n).ok()?)?,
        })
    }

    pub fn saturating_add(&self, o: &Resources) -> Resources {
        Resources {
            cpu: Milli(self.cpu.0.saturating_add(o.cpu.0)),
            memory: Milli(self.memory.0.saturating_add(o.memory.0)),
            gpu: self.gpu.saturating_add(o.gpu),
            pods: self.pods.saturating_add(o.pods),
        }
    }

    pub fn saturating_sub(&self, o: &Resources) -> Resources {
        Resources {
            cpu: Milli(self.cpu.0.saturating_sub(o.cpu.0)),
            memory: Milli(self.memory.0.saturating_sub(o.memory.0)),
            gpu: self.gpu.saturating_sub(o.gpu),
            pods: self.pods.saturating_sub(o.pods),
        }
    }

    /// The smaller of the two in each dimension.
    pub fn min_each(&self, o: &Resources) -> Resources {
        Resources {
            cpu: Milli(self.cpu.0.min(o.cpu.0)),
            memory: Milli(self.memory.0.min(o.memory.0)),
            gpu: self.gpu.min(o.gpu),
            pods: self.pods.min(o.pods),
        }
    }

    /// Whether this amount fits in `free`: no dimension exceeds it.
    pub fn fits_in(&self, free: &Resources) -> bool {
        self.cpu <= free.cpu
            && self.memory <= free.memory
            && self.gpu <= free.gpu
            && self.pods <= free.pods
    }

    /// Whether every dimension is zero or more.
    pub fn is_non_negative(&self) -> bool {
        self.cpu.0 >= 0 && self.memory.0 >= 0 && self.gpu >= 0 && self.pods >= 0
    }

    /// A pod request made safe for counting: negative dimensions count as zero and a pod
    /// always takes at least one pod slot, so room is never unbounded.
    pub fn as_pod_request(&self) -> Resources {
        Resources {
            cpu: Milli(self.cpu.0.max(0)),
            memory: Milli(self.memory.0.max(0)),
            gpu: self.gpu.max(0),
            pods: self.pods.max(1),
        }
    }

    /// How many copies of `self` fit into `free` (`self` should be an
    /// [`as_pod_request`](Resources::as_pod_request); zero dimensions impose no limit).
    #[inline]
    pub fn copies_in(&self, free: &Resources) -> u64 {
        // Pods first: usually the smallest bound, and a pod needs one slot, so it is
        // a division by one. For the others a multiplication shows whether they bound it
        // further; only then divide (this runs for every node in every decision).
        let dims = [
            (i128::from(free.pods), i128::from(self.pods)),
            (free.cpu.0, self.cpu.0),
            (free.memory.0, self.memory.0),
            (i128::from(free.gpu), i128::from(self.gpu)),
        ];
        let mut most = u64::MAX;
        for (free, need) in dims {
            if need <= 0 {
                continue;
            }
            if free <= 0 {
                return 0;
            }
            // Real amounts fit in 64 bits, where a division is one instruction rather than
            // a 128-bit library call; the result is the same.
            let n = match (u64::try_from(free), u64::try_from(need)) {
                (Ok(free), Ok(need)) => copies_u64(free, need, most),
                _ => copies_i128(free, need, most),
            };
            most = most.min(n);
        }
        most
    }
}

/// `free / need` (both positive), or `most` when `need × most` already fits in `free`.
fn copies_u64(free: u64, need: u64, most: u64) -> u64 {
    if most != u64::MAX && need.checked_mul(most).is_some_and(|all| all <= free) {
        return most;
    }
    if need == 1 { free } else { free / need }
}

/// [`copies_u64`] for amounts beyond 64 bits.
fn copies_i128(free: i128, need: i128, most: u64) -> u64 {
    if most != u64::MAX
        && need
            .checked_mul(i128::from(most))
            .is_some_and(|all| all <= free)
    {
        return most;
    }
    let n = if need == 1 { free } else { free / need };
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Effect of a taint (cluster or node).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaintEffect {
    NoSchedule,
    /// Only a preference: never makes a cluster or node ineligible.
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    /// Parses the Kubernetes spelling; anything unknown is treated as `NoSchedule`, the
    /// conservative reading.
    pub fn parse(s: &str) -> TaintEffect {
        match s {
            "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
            "NoExecute" => TaintEffect::NoExecute,
            _ => TaintEffect::NoSchedule,
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

/// A taint on a member cluster (cluster taint) or on a node (node taint).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Taint {
    pub key: String,
    /// Empty when the taint has no value.
    pub value: String,
    pub effect: TaintEffect,
}

impl std::fmt::Display for Taint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect.as_str())
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect.as_str())
        }
    }
}

impl From<&topology::Taint> for Taint {
    fn from(t: &topology::Taint) -> Taint {
        Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect: TaintEffect::parse(&t.effect),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TolerationOperator {
    /// Key and value must match.
    #[default]
    Equal,
    /// Key must match, any value; an empty key tolerates every taint.
    Exists,
}

/// A toleration, with Kubernetes semantics. Used both for cluster taints (in the policy)
/// and node taints (in the pod).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Toleration {
    pub key: String,
    pub operator: TolerationOperator,
    pub value: String,
    /// `None` tolerates every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => self.key.is_empty() || self.key == taint.key,
            TolerationOperator::Equal => self.key == taint.key && self.value == taint.value,
        }
    }
}

/// The first taint that keeps new pods or placements away (NoSchedule or NoExecute) and
/// that none of `tolerations` tolerates.
pub fn untolerated<'t>(tolerations: &[Toleration], taints: &'t [Taint]) -> Option<&'t Taint> {
    taints.iter().find(|t| {
        t.effect != TaintEffect::PreferNoSchedule && !tolerations.iter().any(|x| x.tolerates(t))
    })
}

/// Why a workload placed on `view` must leave it now, if it must: the member took a
/// `NoExecute` taint the workload does not tolerate, or no longer matches its cluster
/// selector. (A `NoSchedule` taint keeps new placements away and leaves what runs; a
/// weight change moves nothing until a rebalance is asked for.)
pub fn must_leave(policy: &PlacementPolicy, view: &ClusterView) -> Option<String> {
    if let Some(t) = view.taints.iter().find(|t| {
        t.effect == TaintEffect::NoExecute && !policy.tolerations.iter().any(|x| x.tolerates(t))
    }) {
        return Some(format!("{} has the taint {t}, not tolerated", view.name));
    }
    policy
        .cluster_selector
        .first_mismatch_by(|key| view.selector_label(key))
        .map(|why| {
            format!(
                "{} no longer matches the cluster selector ({why})",
                view.name
            )
        })
}

/// Whether [`must_leave`] says so for a `NoExecute` taint (a move the fleet's budget
/// paces, `move_budget`), not for a selector.
pub fn leaves_for_taint(policy: &PlacementPolicy, view: &ClusterView) -> bool {
    view.taints.iter().any(|t| {
        t.effect == TaintEffect::NoExecute && !policy.tolerations.iter().any(|x| x.tolerates(t))
    })
}

/// For a workload that runs in every member that admits it (a daemon, a duplicated
/// service): a Ready member it does not run in although its policy admits it there by
/// name, selector and taints — its decision was made while that member could not take
/// it (still connecting, its capacity not yet trusted) and is planned again; room
/// decides the rest.
pub fn missing_everywhere<'v>(
    policy: &PlacementPolicy,
    placed: &BTreeSet<&str>,
    views: &'v [ClusterView],
) -> Option<&'v str> {
    views
        .iter()
        .filter(|v| v.ready && !placed.contains(v.name.as_str()))
        .filter(|v| policy.cluster_names.is_empty() || policy.cluster_names.contains(&v.name))
        .filter(|v| {
            !v.taints.iter().any(|t| {
                matches!(t.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute)
                    && !policy.tolerations.iter().any(|x| x.tolerates(t))
            })
        })
        .find(|v| must_leave(policy, v).is_none())
        .map(|v| v.name.as_str())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// One set-based requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    pub key: String,
    pub operator: SelectorOperator,
    pub values: Vec<String>,
}

/// A Kubernetes label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<Requirement>,
}

impl Selector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.first_mismatch(labels).is_none()
    }

    /// A description of the first requirement `labels` do not meet.
    pub fn first_mismatch(&self, labels: &BTreeMap<String, String>) -> Option<String> {
        self.first_mismatch_by(|k| labels.get(k).map(String::as_str))
    }

    /// [`first_mismatch`](Selector::first_mismatch) over labels read one key at a time, so
    /// a caller need not build a map (placement checks every cluster in every decision).
    pub fn first_mismatch_by<'l>(&self, label: impl Fn(&str) -> Option<&'l str>) -> Option<String> {
        for (k, v) in &self.match_labels {
            if label(k) != Some(v.as_str()) {
                return Some(format!("label {k}={v} required"));
            }
        }
        for r in &self.match_expressions {
            let value = label(&r.key);
            let listed = |v: &str| r.values.iter().any(|x| x == v);
            let ok = match r.operator {
                SelectorOperator::In => value.is_some_and(listed),
                SelectorOperator::NotIn => value.is_none_or(|v| !listed(v)),
                SelectorOperator::Exists => value.is_some(),
                SelectorOperator::DoesNotExist => value.is_none(),
            };
            if !ok {
                return Some(match r.operator {
                    SelectorOperator::In => {
                        format!("label {} in [{}] required", r.key, r.values.join(","))
                    }
                    SelectorOperator::NotIn => {
                        format!("label {} not in [{}] required", r.key, r.values.join(","))
                    }
                    SelectorOperator::Exists => format!("label {} required", r.key),
                    SelectorOperator::DoesNotExist => format!("label {} must be absent", r.key),
                });
            }
        }
        None
    }
}

/// What is left on one node for new pods: allocatable minus the requests of the pods
/// already bound to it (and minus ledger reservations, see [`super::Ledger::apply`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRoom {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub free: Resources,
}

/// A member cluster as placement sees it.
///
/// `nodes[].free` is the room for *this workload's whole share*: when re-planning a
/// workload whose pods already run in the cluster, the caller must not count those pods
/// as used (placement decides the whole share, not only the change).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterView {
    pub name: String,
    pub zone: Option<String>,
    pub region: Option<String>,
    /// Cluster labels (the MemberCluster's labels). Zone and region are matched by
    /// selectors as [`ZONE_LABEL`] and [`REGION_LABEL`] too.
    pub labels: BTreeMap<String, String>,
    /// Cluster taints: the workload's placement must tolerate them.
    pub taints: Vec<Taint>,
    /// Default weight (the policy may override it); 0 makes the cluster ineligible.
    pub weight: u32,
    /// Ready and with fresh data. A cluster that is not ready gets nothing.
    pub ready: bool,
    pub nodes: Vec<NodeRoom>,
}

impl ClusterView {
    /// A topology member with every node empty (free = allocatable), ready.
    pub fn from_member(member: &Member) -> ClusterView {
        let nodes = Topology::nodes(member)
            .into_iter()
            .map(|n| NodeRoom {
                free: Resources {
                    cpu: n.cpu,
                    memory: n.memory,
                    gpu: i64::from(n.gpu),
                    pods: i64::from(n.pods),
                },
                name: n.name,
                labels: n.labels,
                taints: n.taints.iter().map(Taint::from).collect(),
            })
            .collect();
        ClusterView {
            name: member.name.clone(),
            zone: member.zone.clone(),
            region: member.region.clone(),
            labels: member.labels.clone(),
            taints: member.taints.iter().map(Taint::from).collect(),
            weight: member.weight,
            ready: true,
            nodes,
        }
    }

    /// Every member of a topology, in file order.
    pub fn from_topology(topology: &Topology) -> Vec<ClusterView> {
        topology
            .members
            .iter()
            .map(ClusterView::from_member)
            .collect()
    }

    /// The labels a cluster selector sees: the cluster labels plus zone and region under
    /// their well-known keys (explicit labels win).
    pub fn selector_labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        if let Some(z) = &self.zone {
            labels
                .entry(ZONE_LABEL.to_string())
                .or_insert_with(|| z.clone());
        }
        if let Some(r) = &self.region {
            labels
                .entry(REGION_LABEL.to_string())
                .or_insert_with(|| r.clone());
        }
        labels
    }

    /// One label of [`selector_labels`](ClusterView::selector_labels), without building
    /// the map.
    pub fn selector_label(&self, key: &str) -> Option<&str> {
        match self.labels.get(key) {
            Some(v) => Some(v.as_str()),
            None if key == ZONE_LABEL => self.zone.as_deref(),
            None if key == REGION_LABEL => self.region.as_deref(),
            None => None,
        }
    }

    /// Total free resources over all nodes.
    pub fn free_total(&self) -> Resources {
        self.nodes
            .iter()
            .fold(Resources::ZERO, |acc, n| acc.saturating_add(&n.free))
    }
}

/// Where a pod may run inside a cluster, and how big it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodShape {
    /// Requests of one pod including runtime sidecars and init containers as the
    /// scheduler counts them; limits stand in for extended resources such as GPUs.
    pub resources: Resources,
    /// `spec.nodeSelector`: every pair must be on the node.
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of node taints.
    pub tolerations: Vec<Toleration>,
}

impl PodShape {
    /// Runs for every node in every decision, so it stays cheap for the usual pod with no
    /// node selector and no tolerations.
    #[inline]
    pub fn matches_node(&self, node: &NodeRoom) -> bool {
        (self.node_selector.is_empty()
            || self
                .node_selector
                .iter()
                .all(|(k, v)| node.labels.get(k) == Some(v)))
            && (node.taints.is_empty() || untolerated(&self.tolerations, &node.taints).is_none())
    }

    /// How many of these pods fit on `node` (0 when the node does not match).
    pub fn fit_on(&self, node: &NodeRoom) -> u64 {
        if self.matches_node(node) {
            self.resources.as_pod_request().copies_in(&node.free)
        } else {
            0
        }
    }
}

/// What to place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Count {
    /// `n` interchangeable replicas (services, stateful sets).
    Replicas(u32),
    /// Shard indices `0..total` of a job set, one pod each; completed shards are never
    /// placed again. With `parallelism` below the unfinished shards, at most that many run
    /// at once: capacity and quota then bound the running pods, not the shards
    /// ([`super::parallelism_shares`]).
    Shards {
        total: u32,
        completed: BTreeSet<u32>,
        parallelism: Option<u32>,
    },
    /// A training job: every pod of every role in one cluster, or nothing.
    Gang(Vec<GangRole>),
    /// The workload as a whole: a daemon (one pod per matching node, Duplicated) or a cron
    /// job (Single).
    Whole,
}

/// One role of a gang (`Master`, `Worker`, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GangRole {
    pub role: String,
    pub replicas: u32,
    /// The role's pod; `None` uses [`Demand::pod`].
    pub pod: Option<PodShape>,
}

/// A workload's request to placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Demand {
    pub pod: PodShape,
    pub count: Count,
    /// The pod in members whose overrides change it (resources, tolerations): placement
    /// checks room and charges quota with it there.
    pub member_pods: BTreeMap<String, PodShape>,
    /// A gang's roles in members whose overrides change a role's pod.
    pub member_roles: BTreeMap<String, Vec<GangRole>>,
}

impl Demand {
    /// The pod as `cluster` runs it.
    pub fn pod_in(&self, cluster: &str) -> &PodShape {
        self.member_pods.get(cluster).unwrap_or(&self.pod)
    }

    /// A gang's roles as `cluster` runs them (`base`: the demand's own).
    pub fn roles_in<'a>(&'a self, cluster: &str, base: &'a [GangRole]) -> &'a [GangRole] {
        self.member_roles
            .get(cluster)
            .map(Vec::as_slice)
            .unwrap_or(base)
    }

    /// The biggest pod, dimension by dimension, over the members' overrides: what a
    /// federation-wide count charges, so a total is never exceeded.
    pub fn largest_pod(&self) -> Resources {
        self.member_pods
            .values()
            .fold(self.pod.resources, |acc, p| Resources {
                cpu: acc.cpu.max(p.resources.cpu),
                memory: acc.memory.max(p.resources.memory),
                gpu: acc.gpu.max(p.resources.gpu),
                pods: acc.pods.max(p.resources.pods),
            })
    }
}

/// How the hub spreads a workload over member clusters.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Strategy {
    #[default]
    Divided,
    Duplicated,
    Single,
}

/// Bounds of one cluster's share.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bounds {
    /// At least this many whenever the cluster gets a share (and every eligible cluster
    /// gets one when the total allows). Clipped to the cluster's room and max and to the
    /// total being placed: 2 replicas under a min of 3 still run (on one cluster).
    pub min: Option<u32>,
    pub max: Option<u32>,
}

/// Spread over at least this many clusters and zones (0 = no requirement).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spread {
    pub min_clusters: u32,
    pub min_zones: u32,
}

/// A workload's placement policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlacementPolicy {
    pub strategy: Strategy,
    /// Over cluster labels plus [`ZONE_LABEL`]/[`REGION_LABEL`].
    pub cluster_selector: Selector,
    /// Allow-list of cluster names (empty = any).
    pub cluster_names: Vec<String>,
    /// Allow-list of zones (empty = any).
    pub zones: Vec<String>,
    /// Tolerations of cluster taints.
    pub tolerations: Vec<Toleration>,
    /// Per-cluster weight overriding the cluster's own; 0 makes the cluster ineligible.
    pub weights: BTreeMap<String, u32>,
    /// Bounds of every cluster's share.
    pub per_cluster: Bounds,
    /// Per-cluster bounds, overriding `per_cluster` field by field.
    pub cluster_limits: BTreeMap<String, Bounds>,
    pub spread: Spread,
    /// Clusters this workload avoids, with why (application failover moved its share
    /// off them).
    pub avoid: BTreeMap<String, String>,
}

impl PlacementPolicy {
    pub fn with_strategy(strategy: Strategy) -> PlacementPolicy {
        PlacementPolicy {
            strategy,
            ..PlacementPolicy::default()
        }
    }

    /// The bounds that apply to `cluster`.
    pub fn bounds(&self, cluster: &str) -> Bounds {
        let own = self
            .cluster_limits
            .get(cluster)
            .copied()
            .unwrap_or_default();
        Bounds {
            min: own.min.or(self.per_cluster.min),
            max: own.max.or(self.per_cluster.max),
        }
    }
}

/// Hard limits of a quota; `None` = unlimited in that dimension. `pods` limits replicas.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub cpu: Option<Milli>,
    pub memory: Option<Milli>,
    pub gpu: Option<i64>,
    pub pods: Option<i64>,
}

/// A quota with what others already use of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuotaUse {
    pub hard: Limits,
    /// Used by every *other* workload under this quota (and their ledger reservations).
    pub used: Resources,
}

/// A FederatedQuota as placement sees it: federation-wide totals and optional per-cluster
/// caps. Placement never exceeds either.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuotaView {
    /// Name shown in reasons (e.g. `team-a/default`).
    pub name: String,
    pub total: QuotaUse,
    pub clusters: BTreeMap<String, QuotaUse>,
}

//! The placement engine: which clusters are eligible, then the strategy.
//!
//! - **Divided**: replicas or shard indices split by [`divide::apportion`] (Webster over
//!   weight × room, per-cluster min/max, spread, minimal movement from `current`).
//! - **Duplicated**: every eligible cluster gets the whole workload.
//! - **Single**: one cluster — the current one while it is eligible and holds the whole
//!   workload, else the best by weight × room, then name. Gangs (training jobs) are always
//!   Single and all-or-nothing, checked by first-fit-decreasing over the nodes.
//!
//! Capacity is per node: a pod must fit on one node whose labels match its node selector
//! and whose taints it tolerates. Quota (total and per cluster) is never exceeded.

use std::collections::{BTreeMap, BTreeSet};

use super::decision::{Cause, Decision, Exclusion, MemberReason, NodeBinding, Outcome, Placement};
use super::divide::{Seat, apportion};
use super::model::{
    Bounds, ClusterView, Count, Demand, PlacementPolicy, PodShape, QuotaUse, QuotaView, Resources,
    Strategy, untolerated,
};
use super::quota::admit::Admits;
use super::shards::{assign_shards, parallelism_shares};
use super::text;
use crate::api::ranges::RangeSet;

/// Everything one placement decision depends on.
#[derive(Clone, Copy, Debug)]
pub struct PlanInput<'a> {
    /// Member clusters with their free room (after [`super::Ledger::apply`]).
    pub clusters: &'a [ClusterView],
    pub policy: &'a PlacementPolicy,
    pub demand: &'a Demand,
    pub quota: Option<&'a QuotaView>,
    /// The decision in force, for minimal movement and stickiness.
    pub current: Option<&'a Decision>,
}

/// Room is counted up to this many pods per cluster; shares are `u32`.
const ROOM_LIMIT: u64 = u32::MAX as u64;

/// An eligible cluster.
struct Candidate<'a> {
    view: &'a ClusterView,
    weight: u32,
    /// Pods of the demand's shape that fit, node by node.
    room: u64,
    /// Nodes on which at least one pod fits (a daemon's pod count).
    nodes_fit: u64,
    bounds: Bounds,
    /// Pods the cluster's own quota admits.
    quota: Admits,
}

impl Candidate<'_> {
    fn name(&self) -> &str {
        &self.view.name
    }

    /// Webster numerator and the order of preference for Single.
    fn base(&self) -> u128 {
        u128::from(self.weight) * u128::from(self.room)
    }

    /// Most pods by capacity and max, before quota.
    fn capacity_cap(&self) -> u64 {
        self.room.min(self.bounds.max.map_or(u64::MAX, u64::from))
    }

    /// Most pods by capacity, max and the cluster's quota.
    fn cap(&self) -> u64 {
        self.capacity_cap().min(self.quota.pods)
    }

    /// What limits this cluster, for reasons.
    fn limit_text(&self) -> String {
        let cap = self.cap();
        if cap == self.quota.pods && self.quota.pods < self.capacity_cap() {
            format!("{} quota {}", self.name(), cap)
        } else if self
            .bounds
            .max
            .is_some_and(|m| u64::from(m) == cap && cap < self.room)
        {
            format!("{} max {}", self.name(), cap)
        } else {
            format!("{} room {}", self.name(), cap)
        }
    }
}

/// Decides a placement. Pure and deterministic: the same input gives the same outcome.
pub fn plan(input: &PlanInput<'_>) -> Outcome {
    let demand = input.demand;
    let strategy = match (&demand.count, input.policy.strategy) {
        (Count::Gang(_), _) => Strategy::Single,
        (Count::Whole, Strategy::Divided) => Strategy::Duplicated,
        // A shard runs once, so a "duplicated" job set is split.
        (Count::Shards { .. }, Strategy::Duplicated) => Strategy::Divided,
        (_, s) => s,
    };
    let gang = matches!(demand.count, Count::Gang(_));
    let (candidates, excluded) = eligibility(input, !gang);
    let mut out = Builder::new(strategy, excluded);
    // A member override can make the pod bigger there: the federation-wide count takes
    // the biggest, so the total is never exceeded.
    let total_quota = input
        .quota
        .map_or_else(unlimited, |q| q.total.admits(&demand.largest_pod()));
    let ctx = Ctx {
        input,
        candidates: &candidates,
        total_quota: &total_quota,
    };
    match (&demand.count, strategy) {
        (Count::Gang(roles), _) => place_gang(&ctx, roles, &mut out),
        (Count::Whole, Strategy::Single) => place_single_whole(&ctx, &mut out),
        (Count::Whole, _) => place_daemon(&ctx, &mut out),
        (Count::Replicas(n), Strategy::Duplicated) => place_duplicated(&ctx, *n, &mut out),
        (Count::Replicas(n), _) => place_replicas(&ctx, *n, strategy, &mut out),
        (
            Count::Shards {
                total,
                completed,
                parallelism,
            },
            _,
        ) => place_shards(&ctx, *total, completed, *parallelism, strategy, &mut out),
    }
    let mut outcome = out.finish();
    outcome.explained = explain(input, &candidates, &outcome);
    outcome
}

fn unlimited() -> Admits {
    Admits {
        pods: u64::MAX,
        limited_by: None,
    }
}

struct Ctx<'a, 'b> {
    input: &'b PlanInput<'a>,
    candidates: &'b [Candidate<'a>],
    total_quota: &'b Admits,
}

impl Ctx<'_, '_> {
    fn quota_name(&self) -> &str {
        self.input.quota.map_or("", |q| q.name.as_str())
    }

    /// Current shares by cluster.
    fn current_shares(&self) -> BTreeMap<String, u32> {
        self.input.current.map(Decision::shares).unwrap_or_default()
    }

    /// The cluster holding the largest current share (ties: name).
    fn current_single(&self) -> Option<String> {
        let shares = self.current_shares();
        shares
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(c, _)| c.clone())
    }

    /// Candidates best first: weight × room, then name.
    fn ranked(&self) -> Vec<&Candidate<'_>> {
        let mut v: Vec<&Candidate> = self.candidates.iter().collect();
        v.sort_by(|a, b| b.base().cmp(&a.base()).then(a.name().cmp(b.name())));
        v
    }

    /// The pod as `cluster` runs it (a member override may change it).
    fn pod(&self, cluster: &str) -> &PodShape {
        self.input.demand.pod_in(cluster)
    }

    /// The pod the placement's own reasons speak of.
    fn base_pod(&self) -> &PodShape {
        &self.input.demand.pod
    }
}

/// Collects the decision.
struct Builder {
    strategy: Strategy,
    placements: BTreeMap<String, Placement>,
    unplaced: u64,
    cause: Option<Cause>,
    reason: Option<String>,
    excluded: Vec<Exclusion>,
    warnings: Vec<String>,
    bindings: Vec<NodeBinding>,
}

impl Builder {
    fn new(strategy: Strategy, excluded: Vec<Exclusion>) -> Builder {
        Builder {
            strategy,
            placements: BTreeMap::new(),
            unplaced: 0,
            cause: None,
            reason: None,
            excluded,
            warnings: Vec::new(),
            bindings: Vec::new(),
        }
    }

    fn place(&mut self, cluster: &str, replicas: Option<u32>, shards: Option<String>) {
        self.placements.insert(
            cluster.to_string(),
            Placement {
                cluster: cluster.to_string(),
                replicas,
                shards,
                pods: None,
            },
        );
    }

    /// A daemon's share: the whole daemon, with the pods it runs there (what quota is
    /// charged for it).
    fn place_daemon(&mut self, cluster: &str, pods: u64) {
        self.placements.insert(
            cluster.to_string(),
            Placement {
                cluster: cluster.to_string(),
                replicas: None,
                shards: None,
                pods: Some(u32::try_from(pods).unwrap_or(u32::MAX)),
            },
        );
    }

    fn fail(&mut self, unplaced: u64, cause: Cause, reason: String) {
        self.unplaced = unplaced;
        self.cause = Some(cause);
        self.reason = Some(format!("{}: {reason}", cause.as_str()));
    }

    /// `NoEligibleCluster` naming why each cluster was excluded.
    fn no_eligible(&mut self, unplaced: u64) {
        let why = if self.excluded.is_empty() {
            "there are no member clusters".to_string()
        } else {
            format!("no eligible cluster ({})", self.exclusions_text())
        };
        self.fail(unplaced, Cause::NoEligibleCluster, why);
    }

    fn exclusions_text(&self) -> String {
        self.excluded
            .iter()
            .map(|e| format!("{}: {}", e.cluster, e.why))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// `; excluded: a: why; b: why` or nothing.
    fn exclusions_suffix(&self) -> String {
        if self.excluded.is_empty() {
            String::new()
        } else {
            format!("; excluded: {}", self.exclusions_text())
        }
    }

    fn finish(self) -> Outcome {
        let unplaced = u32::try_from(self.unplaced).unwrap_or(u32::MAX);
        let (cause, reason) = if unplaced == 0 {
            (None, None)
        } else {
            (self.cause, self.reason)
        };
        Outcome {
            decision: Decision {
                strategy: self.strategy,
                placements: self.placements.into_values().collect(),
                unplaced,
                reason,
            },
            cause,
            excluded: self.excluded,
            warnings: self.warnings,
            bindings: self.bindings,
            explained: Vec::new(),
        }
    }
}

/// Each member's share and why, from the numbers the decision was made with: an excluded
/// member's reason; an eligible one's weight, room (pods of its size that fit), quota
/// room and bounds, and what it got of them.
fn explain(
    input: &PlanInput<'_>,
    candidates: &[Candidate<'_>],
    outcome: &Outcome,
) -> Vec<MemberReason> {
    let unit = match input.demand.count {
        Count::Replicas(_) => "replicas",
        Count::Shards { .. } => "shards",
        Count::Gang(_) => "gang",
        Count::Whole => "copy",
    };
    let shares = outcome.decision.shares();
    let mut out: Vec<MemberReason> = outcome
        .excluded
        .iter()
        .map(|e| MemberReason {
            cluster: e.cluster.clone(),
            share: 0,
            why: format!("excluded: {}", e.why),
        })
        .collect();
    for c in candidates {
        let share = shares.get(c.name()).copied().unwrap_or(0);
        let pod = input.demand.pod_in(c.name());
        let mut facts = vec![
            format!("weight {}", c.weight),
            format!(
                "room {} pods of {}",
                if c.room >= ROOM_LIMIT {
                    "unbounded".to_string()
                } else {
                    c.room.to_string()
                },
                text::request(&pod.resources.as_pod_request())
            ),
        ];
        if c.quota.pods != u64::MAX {
            facts.push(format!(
                "quota room {} pods{}",
                c.quota.pods,
                c.quota
                    .limited_by
                    .as_deref()
                    .map(|l| format!(" ({l})"))
                    .unwrap_or_default()
            ));
        }
        if let Some(min) = c.bounds.min {
            facts.push(format!("min {min}"));
        }
        if let Some(max) = c.bounds.max {
            facts.push(format!("max {max}"));
        }
        if input.demand.member_pods.contains_key(c.name()) {
            facts.push("pod sized by its overrides".into());
        }
        let got = match (unit, share) {
            ("gang" | "copy", 0) => "not chosen".to_string(),
            ("gang", _) => "runs the whole gang".to_string(),
            ("copy", _) => match outcome
                .decision
                .placements
                .iter()
                .find(|p| p.cluster == c.name())
                .and_then(|p| p.pods)
            {
                Some(p) => format!("runs a copy ({p} pods)"),
                None => "runs a copy".to_string(),
            },
            (_, 0) if c.cap() == 0 => {
                if c.quota.pods == 0 {
                    "none: its quota room is 0".to_string()
                } else if c.bounds.max == Some(0) {
                    "none: max 0".to_string()
                } else {
                    "none: no room".to_string()
                }
            }
            (_, 0) => "none: the others took the whole count".to_string(),
            (u, 1) => format!("1 {}", u.trim_end_matches('s')),
            (u, n) => format!("{n} {u}"),
        };
        out.push(MemberReason {
            cluster: c.name().to_string(),
            share,
            why: format!("{} → {got}", facts.join(", ")),
        });
    }
    out.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    out
}

/// Splits the clusters into eligible candidates and exclusions with reasons.
fn eligibility<'a>(
    input: &PlanInput<'a>,
    need_node_fit: bool,
) -> (Vec<Candidate<'a>>, Vec<Exclusion>) {
    let policy = input.policy;
    let mut seen = BTreeSet::new();
    let mut candidates = Vec::new();
    let mut excluded = Vec::new();
    for view in input.clusters {
        let mut excluded_for = |why: String, full: bool| {
            excluded.push(Exclusion {
                cluster: view.name.clone(),
                why,
                full,
            })
        };
        let mut exclude = |why: String| excluded_for(why, false);
        if !seen.insert(view.name.as_str()) {
            exclude("listed twice; only the first entry counts".into());
            continue;
        }
        if !view.ready {
            exclude("not ready".into());
            continue;
        }
        let weight = policy
            .weights
            .get(&view.name)
            .copied()
            .unwrap_or(view.weight);
        if weight == 0 {
            exclude("weight 0".into());
            continue;
        }
        if !policy.cluster_names.is_empty() && !policy.cluster_names.contains(&view.name) {
            exclude("not among the policy's cluster names".into());
            continue;
        }
        if let Some(why) = policy.avoid.get(&view.name) {
            exclude(format!("avoided: {why}"));
            continue;
        }
        if !policy.zones.is_empty() {
            match &view.zone {
                None => {
                    exclude("has no zone and the policy names zones".into());
                    continue;
                }
                Some(z) if !policy.zones.contains(z) => {
                    exclude(format!("zone {z} is not among the policy's zones"));
                    continue;
                }
                Some(_) => {}
            }
        }
        if let Some(why) = policy
            .cluster_selector
            .first_mismatch_by(|key| view.selector_label(key))
        {
            exclude(format!("does not match the cluster selector ({why})"));
            continue;
        }
        if let Some(t) = untolerated(&policy.tolerations, &view.taints) {
            exclude(format!("cluster taint {t} is not tolerated"));
            continue;
        }
        let pod = input.demand.pod_in(&view.name);
        let request = pod.resources.as_pod_request();
        let mut room: u64 = 0;
        let mut nodes_fit: u64 = 0;
        let mut matching = 0usize;
        for node in &view.nodes {
            // One match per node: `PodShape::fit_on` would match again.
            if pod.matches_node(node) {
                matching += 1;
                let fit = request.copies_in(&node.free);
                if fit > 0 {
                    nodes_fit += 1;
                    room = room.saturating_add(fit);
                }
            }
        }
        if need_node_fit && matching == 0 {
            exclude(no_node_matches(pod, &view.nodes));
            continue;
        }
        if need_node_fit && room == 0 {
            excluded_for(
                format!(
                    "no node has room for one pod ({})",
                    text::request(&pod.resources.as_pod_request())
                ),
                true,
            );
            continue;
        }
        let quota = input
            .quota
            .and_then(|q| q.clusters.get(&view.name))
            .map_or_else(unlimited, |q: &QuotaUse| q.admits(&pod.resources));
        candidates.push(Candidate {
            view,
            weight,
            room: room.min(ROOM_LIMIT),
            nodes_fit,
            bounds: policy.bounds(&view.name),
            quota,
        });
    }
    // Name order from here on, so the outcome does not depend on the input order.
    candidates.sort_by(|a, b| a.view.name.cmp(&b.view.name));
    excluded.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    (candidates, excluded)
}

/// Why no node of a cluster takes the pod, with the numbers: how many nodes have the
/// node selector's labels, and the taint that keeps the pod off those.
fn no_node_matches(pod: &PodShape, nodes: &[super::model::NodeRoom]) -> String {
    let labelled: Vec<&super::model::NodeRoom> = nodes
        .iter()
        .filter(|n| {
            pod.node_selector
                .iter()
                .all(|(k, v)| n.labels.get(k) == Some(v))
        })
        .collect();
    if labelled.is_empty() {
        let selector: Vec<String> = pod
            .node_selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        return format!(
            "none of its {} nodes has the node selector's labels ({})",
            nodes.len(),
            selector.join(", ")
        );
    }
    let taint = labelled
        .iter()
        .find_map(|n| untolerated(&pod.tolerations, &n.taints));
    match taint {
        Some(t) => format!(
            "{} of its {} nodes match the node selector, and the pod does not tolerate their taint {t}",
            labelled.len(),
            nodes.len()
        ),
        None => "no node matches the pod's node selector and tolerations".into(),
    }
}

/// First fit of `count` pods over the cluster's nodes in order.
fn pack(view: &ClusterView, pod: &PodShape, count: u64) -> Vec<NodeBinding> {
    let req = pod.resources.as_pod_request();
    let mut left = count;
    let mut out = Vec::new();
    for node in &view.nodes {
        if left == 0 {
            break;
        }
        if !pod.matches_node(node) {
            continue;
        }
        let k = left.min(req.copies_in(&node.free));
        if k > 0 {
            left -= k;
            out.push(NodeBinding {
                cluster: view.name.clone(),
                node: node.name.clone(),
                pods: k,
                resources: req.checked_mul(k).unwrap_or(Resources::ZERO),
            });
        }
    }
    out
}

/// Reason when `placed` of `asked` fit, deciding between quota and capacity.
fn shortfall(
    ctx: &Ctx,
    out: &mut Builder,
    unit: &str,
    asked: u64,
    placed: u64,
    used: &[&Candidate],
) {
    let unplaced = asked.saturating_sub(placed);
    if unplaced == 0 {
        return;
    }
    let capacity: u64 = used
        .iter()
        .map(|c| c.capacity_cap())
        .fold(0, u64::saturating_add);
    let quota = ctx.total_quota;
    if quota.pods < asked && quota.pods <= capacity && placed >= quota.pods.min(capacity) {
        let why = quota.limited_by.clone().unwrap_or_default();
        out.fail(
            unplaced,
            Cause::QuotaExceeded,
            format!(
                "quota {} admits {} of {asked} {unit} ({why}); {unplaced} unplaced",
                ctx.quota_name(),
                quota.pods
            ),
        );
        return;
    }
    let quota_capped: Vec<String> = used
        .iter()
        .filter(|c| c.quota.pods < c.capacity_cap())
        .map(|c| format!("{} admits {}", c.name(), c.quota.pods))
        .collect();
    if capacity >= asked && !quota_capped.is_empty() {
        out.fail(
            unplaced,
            Cause::QuotaExceeded,
            format!(
                "per-cluster quota {} ({}); {unplaced} of {asked} {unit} unplaced",
                ctx.quota_name(),
                quota_capped.join(", ")
            ),
        );
        return;
    }
    let limits: Vec<String> = used.iter().map(|c| c.limit_text()).collect();
    let suffix = out.exclusions_suffix();
    out.fail(
        unplaced,
        Cause::InsufficientCapacity,
        format!(
            "{unplaced} of {asked} {unit} do not fit ({}){suffix}",
            limits.join(", ")
        ),
    );
}

fn seats<'c>(ctx: &Ctx<'c, '_>, current: &BTreeMap<String, u32>) -> Vec<Seat<'c>> {
    ctx.candidates
        .iter()
        .map(|c| Seat {
            name: c.view.name.as_str(),
            zone: c.view.zone.as_deref(),
            base: c.base(),
            cap: u32::try_from(c.cap()).unwrap_or(u32::MAX),
            floor: c.bounds.min.unwrap_or(0),
            current: current.get(c.name()).copied().unwrap_or(0),
        })
        .collect()
}

/// Shares for `asked` seats under `strategy` (Divided or Single).
fn shares_for(
    ctx: &Ctx,
    asked: u64,
    current: &BTreeMap<String, u32>,
    strategy: Strategy,
    out: &mut Builder,
) -> Vec<u32> {
    let (shares, warning) = shares_and_warning(ctx, asked, current, strategy);
    out.warnings.extend(warning);
    shares
}

fn shares_and_warning(
    ctx: &Ctx,
    asked: u64,
    current: &BTreeMap<String, u32>,
    strategy: Strategy,
) -> (Vec<u32>, Option<String>) {
    let target = asked.min(ctx.total_quota.pods);
    if strategy == Strategy::Single {
        return (single_shares(ctx, target), None);
    }
    let a = apportion(&seats(ctx, current), target, ctx.input.policy.spread);
    (a.shares, a.spread_shortfall)
}

/// Single: all of `target` on one cluster — the current one while it holds everything,
/// else the best that holds everything, else the one that holds the most.
fn single_shares(ctx: &Ctx, target: u64) -> Vec<u32> {
    let mut shares = vec![0u32; ctx.candidates.len()];
    if target == 0 || ctx.candidates.is_empty() {
        return shares;
    }
    let index = |name: &str| ctx.candidates.iter().position(|c| c.name() == name);
    let current = ctx.current_single().and_then(|c| index(&c));
    let chosen = current
        .filter(|&i| ctx.candidates[i].cap() >= target)
        .or_else(|| {
            ctx.ranked()
                .into_iter()
                .find(|c| c.cap() >= target)
                .and_then(|c| index(c.name()))
        })
        .or_else(|| {
            ctx.ranked()
                .into_iter()
                .max_by(|a, b| {
                    a.cap()
                        .cmp(&b.cap())
                        .then(b.base().cmp(&a.base()))
                        .then(b.name().cmp(a.name()))
                })
                .and_then(|c| index(c.name()))
        });
    if let Some(i) = chosen {
        shares[i] = u32::try_from(target.min(ctx.candidates[i].cap())).unwrap_or(u32::MAX);
    }
    shares
}

fn place_replicas(ctx: &Ctx, n: u32, strategy: Strategy, out: &mut Builder) {
    if ctx.candidates.is_empty() {
        if n > 0 {
            out.no_eligible(u64::from(n));
        }
        return;
    }
    let shares = shares_for(ctx, u64::from(n), &ctx.current_shares(), strategy, out);
    let mut placed = 0u64;
    for (c, &s) in ctx.candidates.iter().zip(&shares) {
        if s > 0 {
            placed += u64::from(s);
            out.place(c.name(), Some(s), None);
            out.bindings
                .extend(pack(c.view, ctx.pod(c.name()), u64::from(s)));
        }
    }
    let used: Vec<&Candidate> = ctx.candidates.iter().collect();
    shortfall(ctx, out, "replicas", u64::from(n), placed, &used);
}

fn place_shards(
    ctx: &Ctx,
    total: u32,
    completed: &BTreeSet<u32>,
    parallelism: Option<u32>,
    strategy: Strategy,
    out: &mut Builder,
) {
    let remaining =
        RangeSet::full(total).difference(&RangeSet::from_indices(completed.iter().copied()));
    let asked = remaining.len();
    // The unfinished shards each cluster holds now; a shard listed twice stays with the
    // first cluster by name.
    let mut current: BTreeMap<String, RangeSet> = BTreeMap::new();
    let mut taken = RangeSet::new();
    if let Some(d) = ctx.input.current {
        for p in &d.placements {
            let Some(s) = &p.shards else { continue };
            match RangeSet::parse(s) {
                Ok(r) => {
                    let held = r.intersection(&remaining).difference(&taken);
                    taken = taken.union(&held);
                    current.insert(p.cluster.clone(), held);
                }
                Err(e) => out
                    .warnings
                    .push(format!("current shards of {} ignored: {e}", p.cluster)),
            }
        }
    }
    if ctx.candidates.is_empty() {
        if asked > 0 {
            out.no_eligible(asked);
        }
        return;
    }
    let counts: BTreeMap<String, u32> = current
        .iter()
        .map(|(c, s)| (c.clone(), u32::try_from(s.len()).unwrap_or(u32::MAX)))
        .collect();
    let bounded = parallelism
        .filter(|&p| u64::from(p) < asked)
        .and_then(|p| bounded_shard_counts(ctx, p, asked, &counts, strategy));
    let shares = match bounded {
        Some((shares, warnings)) => {
            out.warnings.extend(warnings);
            shares
        }
        None => shares_for(ctx, asked, &counts, strategy, out),
    };
    let new_counts: BTreeMap<String, u32> = ctx
        .candidates
        .iter()
        .zip(&shares)
        .filter(|(_, s)| **s > 0)
        .map(|(c, s)| (c.name().to_string(), *s))
        .collect();
    let assigned = assign_shards(&remaining, &current, &new_counts);
    // Room is taken by the pods that run at once (each cluster's part of the parallelism),
    // as far as it goes.
    let held: Vec<u64> = ctx
        .candidates
        .iter()
        .map(|c| assigned.get(c.name()).map_or(0, RangeSet::len))
        .collect();
    let running = parallelism.map_or_else(|| held.clone(), |p| parallelism_shares(p, &held));
    let mut placed = 0u64;
    for (i, c) in ctx.candidates.iter().enumerate() {
        if let Some(set) = assigned.get(c.name()) {
            placed += set.len();
            out.place(c.name(), None, Some(set.to_string()));
            out.bindings
                .extend(pack(c.view, ctx.pod(c.name()), running[i]));
        }
    }
    let used: Vec<&Candidate> = ctx.candidates.iter().collect();
    shortfall(ctx, out, "shards", asked, placed, &used);
}

/// Shard counts for a job set whose parallelism `p` is below its `asked` unfinished shards:
/// only `p` pods run at once, so room, max and quota bound those running seats, and the
/// shards follow the seats. First the `p` seats are divided like replicas (sticking to each
/// cluster's current part); then the shards in proportion to the seats, each cluster
/// keeping the shards it holds where it can (max bounds its shards).
///
/// Quota is a hard limit on what the slices run at once ([`parallelism_shares`] of the
/// counts); room is not: with room for fewer than `p`, every shard is still placed, fewer
/// run at once and the rest wait (a warning says so), so a lost cluster's shards move to
/// the survivors without taking any from them. Shards beyond every max stay unplaced.
/// `None` when the quota does not admit `p` at once or nothing fits (then every shard is a
/// seat, as without parallelism).
fn bounded_shard_counts(
    ctx: &Ctx,
    p: u32,
    asked: u64,
    held: &BTreeMap<String, u32>,
    strategy: Strategy,
) -> Option<(Vec<u32>, Vec<String>)> {
    if ctx.total_quota.pods < u64::from(p) {
        return None;
    }
    let held_now: Vec<u64> = ctx
        .candidates
        .iter()
        .map(|c| u64::from(held.get(c.name()).copied().unwrap_or(0)))
        .collect();
    let running_now: BTreeMap<String, u32> = ctx
        .candidates
        .iter()
        .zip(parallelism_shares(p, &held_now))
        .map(|(c, r)| (c.name().to_string(), u32::try_from(r).unwrap_or(u32::MAX)))
        .collect();
    let (running, warning) = shares_and_warning(ctx, u64::from(p), &running_now, strategy);
    let at_once: u64 = running.iter().map(|&r| u64::from(r)).sum();
    if at_once == 0 {
        return None;
    }
    let mut warnings: Vec<String> = warning.into_iter().collect();
    if at_once < u64::from(p) {
        warnings.push(format!(
            "parallelism {p}: room for {at_once} at once now; the other shards wait"
        ));
    }
    // Each cluster keeps the shards it holds (up to its max) while it has running seats;
    // the rest go in proportion to the running seats.
    let caps: Vec<u64> = ctx
        .candidates
        .iter()
        .zip(&running)
        .map(|(c, &r)| {
            if r == 0 {
                0
            } else {
                c.bounds.max.map_or(u64::MAX, u64::from)
            }
        })
        .collect();
    let mut counts_u64: Vec<u64> = held_now
        .iter()
        .zip(&caps)
        .map(|(&h, &c)| h.min(c))
        .collect();
    let kept: u64 = counts_u64.iter().sum();
    let weights: Vec<u64> = running.iter().map(|&r| u64::from(r)).collect();
    // What max leaves over stays unplaced (the shortfall says why).
    distribute(asked.saturating_sub(kept), &weights, &caps, &mut counts_u64);
    let counts: Vec<u32> = counts_u64
        .iter()
        .map(|&n| u32::try_from(n).unwrap_or(u32::MAX))
        .collect();
    let parts = parallelism_shares(p, &counts_u64);
    let within_quota = ctx
        .candidates
        .iter()
        .zip(&parts)
        .all(|(c, &r)| r <= c.quota.pods);
    (within_quota && parts.iter().sum::<u64>() <= ctx.total_quota.pods)
        .then_some((counts, warnings))
}

/// Adds `n` to `counts` in proportion to `weights` (largest remainders, ties to the earlier
/// entry), never past `caps`; what a capped entry cannot take goes round again to the
/// others. Closed form per round and at most one round per entry, so a job set of
/// millions of shards costs no more than one of ten. Returns what the caps could not hold.
fn distribute(mut n: u64, weights: &[u64], caps: &[u64], counts: &mut [u64]) -> u64 {
    while n > 0 {
        let open: Vec<usize> = (0..counts.len())
            .filter(|&i| weights[i] > 0 && counts[i] < caps[i])
            .collect();
        let total: u128 = open.iter().map(|&i| u128::from(weights[i])).sum();
        if total == 0 {
            return n;
        }
        let mut given = 0u64;
        let mut remainders = Vec::with_capacity(open.len());
        let mut add = vec![0u64; counts.len()];
        for &i in &open {
            let q = u128::from(n) * u128::from(weights[i]);
            add[i] = u64::try_from(q / total).unwrap_or(u64::MAX);
            given += add[i];
            remainders.push((q % total, i));
        }
        remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for &(_, i) in remainders
            .iter()
            .take(usize::try_from(n - given).unwrap_or(0))
        {
            add[i] += 1;
        }
        let mut placed = 0u64;
        for &i in &open {
            let take = add[i].min(caps[i] - counts[i]);
            counts[i] += take;
            placed += take;
        }
        if placed == 0 {
            return n;
        }
        n -= placed;
    }
    0
}

/// Duplicated replicas: every eligible cluster that holds all `n` runs all `n`, as far as
/// the quota allows (current clusters first, then best first).
fn place_duplicated(ctx: &Ctx, n: u32, out: &mut Builder) {
    if ctx.candidates.is_empty() {
        if n > 0 {
            out.no_eligible(u64::from(n));
        }
        return;
    }
    let current = ctx.current_shares();
    let mut order = ctx.ranked();
    order.sort_by_key(|c| !current.contains_key(c.name()));
    let mut quota_left = ctx.total_quota.pods;
    let mut unplaced = 0u64;
    let mut no_room = Vec::new();
    let mut no_quota = Vec::new();
    for c in order {
        let need = u64::from(n);
        if c.capacity_cap() < need {
            unplaced += need;
            no_room.push(c.limit_text());
        } else if c.quota.pods < need || quota_left < need {
            unplaced += need;
            no_quota.push(c.name().to_string());
        } else {
            quota_left -= need;
            out.place(c.name(), Some(n), None);
            out.bindings.extend(pack(c.view, ctx.pod(c.name()), need));
        }
    }
    if unplaced > 0 {
        if no_room.is_empty() {
            let why = ctx.total_quota.limited_by.clone().unwrap_or_default();
            out.fail(
                unplaced,
                Cause::QuotaExceeded,
                format!(
                    "quota {} does not admit a copy of {n} replicas in {} ({why})",
                    ctx.quota_name(),
                    no_quota.join(", ")
                ),
            );
        } else {
            out.fail(
                unplaced,
                Cause::InsufficientCapacity,
                format!(
                    "a copy of {n} replicas does not fit in {}",
                    no_room.join(", ")
                ),
            );
        }
    }
}

/// Daemons: every eligible cluster, one pod per node that fits one, within quota.
fn place_daemon(ctx: &Ctx, out: &mut Builder) {
    if ctx.candidates.is_empty() {
        out.no_eligible(1);
        return;
    }
    let current = ctx.current_shares();
    let mut order = ctx.ranked();
    order.sort_by_key(|c| !current.contains_key(c.name()));
    let mut quota_left = ctx.total_quota.pods;
    let mut blocked = Vec::new();
    for c in order {
        let request = ctx.pod(c.name()).resources.as_pod_request();
        let pods = c.nodes_fit;
        if c.quota.pods < pods || quota_left < pods {
            blocked.push(format!("{} ({pods} pods)", c.name()));
            continue;
        }
        quota_left -= pods;
        out.place_daemon(c.name(), pods);
        for node in &c.view.nodes {
            if ctx.pod(c.name()).matches_node(node) && request.copies_in(&node.free) > 0 {
                out.bindings.push(NodeBinding {
                    cluster: c.view.name.clone(),
                    node: node.name.clone(),
                    pods: 1,
                    resources: request,
                });
            }
        }
    }
    if !blocked.is_empty() {
        let why = ctx.total_quota.limited_by.clone().unwrap_or_default();
        out.fail(
            blocked.len() as u64,
            Cause::QuotaExceeded,
            format!(
                "quota {} does not admit the daemon in {} ({why})",
                ctx.quota_name(),
                blocked.join(", ")
            ),
        );
    }
}

/// Cron jobs (and other whole workloads under Single): one cluster, sticky.
fn place_single_whole(ctx: &Ctx, out: &mut Builder) {
    if ctx.candidates.is_empty() {
        out.no_eligible(1);
        return;
    }
    if ctx.total_quota.pods == 0 {
        let why = ctx.total_quota.limited_by.clone().unwrap_or_default();
        out.fail(
            1,
            Cause::QuotaExceeded,
            format!("quota {} admits no pod ({why})", ctx.quota_name()),
        );
        return;
    }
    let current = ctx.current_single();
    let allowed = |c: &&Candidate| c.quota.pods > 0;
    let chosen = ctx
        .candidates
        .iter()
        .filter(allowed)
        .find(|c| Some(c.name()) == current.as_deref())
        .or_else(|| ctx.ranked().into_iter().find(allowed));
    match chosen {
        Some(c) => {
            out.place(c.name(), None, None);
            out.bindings.extend(pack(c.view, ctx.pod(c.name()), 1));
        }
        None => out.fail(
            1,
            Cause::QuotaExceeded,
            format!(
                "per-cluster quota {} admits no pod in any eligible cluster",
                ctx.quota_name()
            ),
        ),
    }
}

/// A gang: every pod of every role on nodes of one cluster, or nothing.
fn place_gang(ctx: &Ctx, roles: &[super::model::GangRole], out: &mut Builder) {
    // A member whose overrides change a role's pod is checked and charged with its own.
    let shapes_of = |cluster: Option<&str>| -> Vec<(&PodShape, u64)> {
        let (roles, pod) = match cluster {
            Some(c) => (ctx.input.demand.roles_in(c, roles), ctx.pod(c)),
            None => (roles, ctx.base_pod()),
        };
        roles
            .iter()
            .map(|r| (r.pod.as_ref().unwrap_or(pod), u64::from(r.replicas)))
            .collect()
    };
    let total_of = |shapes: &[(&PodShape, u64)]| {
        shapes.iter().try_fold(Resources::ZERO, |acc, (s, n)| {
            acc.checked_add(&s.resources.as_pod_request().checked_mul(*n)?)
        })
    };
    let shapes = shapes_of(None);
    let pods: u64 = shapes.iter().map(|(_, n)| n).sum();
    if pods == 0 {
        return;
    }
    let Ok(pods32) = u32::try_from(pods) else {
        out.fail(
            pods,
            Cause::InsufficientCapacity,
            format!("a gang of {pods} replicas is larger than any cluster"),
        );
        return;
    };
    if ctx.candidates.is_empty() {
        out.no_eligible(pods);
        return;
    }
    let Some(total) = total_of(&shapes) else {
        out.fail(
            pods,
            Cause::InsufficientCapacity,
            "the gang's total request overflows".into(),
        );
        return;
    };
    if let Some(q) = ctx.input.quota
        && let Err(why) = q.total.admits_total(&total)
    {
        out.fail(
            pods,
            Cause::QuotaExceeded,
            format!("quota {}: the gang of {pods} replicas {why}", q.name),
        );
        return;
    }
    // Feasibility per cluster, by first-fit decreasing.
    let mut fits: Vec<(usize, Vec<NodeBinding>)> = Vec::new();
    let mut largest: Option<(u64, &str)> = None;
    let mut quota_blocked = Vec::new();
    for (i, c) in ctx.candidates.iter().enumerate() {
        let overridden = ctx.input.demand.member_roles.contains_key(c.name())
            || ctx.input.demand.member_pods.contains_key(c.name());
        let own_shapes;
        let (shapes, total) = if overridden {
            own_shapes = shapes_of(Some(c.name()));
            (&own_shapes, total_of(&own_shapes).unwrap_or(total))
        } else {
            (&shapes, total)
        };
        let (placed, bindings) = first_fit_decreasing(c.view, shapes);
        if placed == pods {
            let cluster_quota = ctx
                .input
                .quota
                .and_then(|q| q.clusters.get(c.name()))
                .map(|q| q.admits_total(&total));
            // A gang its overrides make bigger here: the federation-wide total again.
            let total_quota = ctx
                .input
                .quota
                .filter(|_| overridden)
                .map(|q| q.total.admits_total(&total));
            if let Some(why) = [cluster_quota, total_quota]
                .into_iter()
                .flatten()
                .find_map(Result::err)
            {
                quota_blocked.push(format!("{}: {why}", c.name()));
                continue;
            }
            fits.push((i, bindings));
        } else if largest.is_none_or(|(n, _)| placed > n) {
            // Candidates are in name order, so ties keep the first name.
            largest = Some((placed, c.name()));
        }
    }
    if fits.is_empty() {
        if !quota_blocked.is_empty() {
            out.fail(
                pods,
                Cause::QuotaExceeded,
                format!(
                    "the gang of {pods} replicas fits only where per-cluster quota {} does not admit it ({})",
                    ctx.quota_name(),
                    quota_blocked.join("; ")
                ),
            );
            return;
        }
        let (n, name) = largest.unwrap_or((0, ""));
        let suffix = out.exclusions_suffix();
        out.fail(
            pods,
            Cause::InsufficientCapacity,
            format!("no cluster fits all {pods} replicas (largest fit: {name} {n}){suffix}"),
        );
        return;
    }
    let current = ctx.current_single();
    let pick = fits
        .iter()
        .position(|(i, _)| Some(ctx.candidates[*i].name()) == current.as_deref())
        .unwrap_or_else(|| {
            // Best: weight × room (of the demand's pod), then name.
            let mut best = 0;
            for (k, (i, _)) in fits.iter().enumerate() {
                let (c, b) = (&ctx.candidates[*i], &ctx.candidates[fits[best].0]);
                if (c.base(), std::cmp::Reverse(c.name())) > (b.base(), std::cmp::Reverse(b.name()))
                {
                    best = k;
                }
            }
            best
        });
    let (i, bindings) = fits.swap_remove(pick);
    out.place(ctx.candidates[i].name(), Some(pods32), None);
    out.bindings.extend(bindings);
}

/// Places the pods of each shape, largest first, each on the first node it fits.
/// Returns how many were placed and where.
fn first_fit_decreasing(
    view: &ClusterView,
    shapes: &[(&PodShape, u64)],
) -> (u64, Vec<NodeBinding>) {
    let mut order: Vec<usize> = (0..shapes.len()).collect();
    let size = |i: usize| {
        let r = shapes[i].0.resources.as_pod_request();
        (r.gpu, r.cpu, r.memory)
    };
    order.sort_by(|&a, &b| size(b).cmp(&size(a)).then(a.cmp(&b)));
    let mut free: Vec<Resources> = view.nodes.iter().map(|n| n.free).collect();
    let mut used: Vec<(u64, Resources)> = vec![(0, Resources::ZERO); view.nodes.len()];
    let mut placed = 0u64;
    for i in order {
        let (shape, count) = shapes[i];
        let req = shape.resources.as_pod_request();
        let mut left = count;
        for (k, node) in view.nodes.iter().enumerate() {
            if left == 0 {
                break;
            }
            if !shape.matches_node(node) {
                continue;
            }
            let n = left.min(req.copies_in(&free[k]));
            if n == 0 {
                continue;
            }
            let take = req.checked_mul(n).unwrap_or(Resources::ZERO);
            free[k] = free[k].saturating_sub(&take);
            used[k].0 += n;
            used[k].1 = used[k].1.saturating_add(&take);
            left -= n;
        }
        placed += count - left;
    }
    let bindings = view
        .nodes
        .iter()
        .zip(used)
        .filter(|(_, (n, _))| *n > 0)
        .map(|(node, (pods, resources))| NodeBinding {
            cluster: view.name.clone(),
            node: node.name.clone(),
            pods,
            resources,
        })
        .collect();
    (placed, bindings)
}

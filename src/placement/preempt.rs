//! Preemption: which lower-priority pods to evict, in ONE member, so that a waiting
//! higher-priority workload — the *preemptor* — fits there.
//!
//! Pure like the rest of placement (no client, no clock): the hub passes the members' views,
//! the preemptor's policy, demand and quota, and per member the workloads it could evict
//! ([`MemberCandidates`]); [`choose`] answers with one member, the victims there and the
//! preemptor's placement on the room they free. It evicts nothing itself.
//!
//! # Rules
//!
//! - A victim's priority is strictly lower than the preemptor's; equal or higher never.
//! - Every victim is in the one chosen member.
//! - Per victim kind: a job set's unfinished shards one pod at a time ([`VictimKind::Shards`];
//!   the hub passes only running shards); a service's or stateful set's replicas one at a
//!   time, at most `can_lose` of them (what its disruption budget allows, computed by the
//!   hub; [`VictimKind::Replicas`]); a training job's gang whole — every pod it has in the
//!   member — or not at all ([`VictimKind::Gang`]). Daemons and cron jobs are never victims:
//!   the hub does not pass them.
//! - A gang preemptor ([`Count::Gang`]) must fit whole in the member; if it fits nowhere even
//!   with every eligible victim evicted, nothing is evicted anywhere ([`choose`] is `None`).
//! - A preemptor of replicas or shards asks for `want` units. The target is `want` if some
//!   member can host them all (with every eligible victim there evicted), else the most units
//!   any member can host; `None` when that is 0.
//! - Among the members that reach the target, the cheapest set of victims wins, costs
//!   compared in order: highest victim priority, victim pods, service/stateful-set replica
//!   pods among them, sum of the victim pods' priorities, then the member's name. So: fewest
//!   and lowest-priority victims, job-set shards before service replicas.
//! - Only as much as needed: the chosen set is *minimal* — without any one of its units
//!   (one shard, one replica, or one whole gang) the preemptor places fewer units (a gang:
//!   does not place).
//!
//! An empty victim list means the preemptor reaches the target without evicting anything.
//!
//! # Fitting
//!
//! Whether the preemptor fits is decided by the engine ([`plan`]) on a view of the member
//! alone (the others' views are left out): the member's [`ClusterView`] with the chosen
//! victims' pods given back to the `free` of the node each runs on (a pod on a node the view
//! does not have frees nothing), the preemptor's policy with `spread` cleared (one member
//! cannot spread) and everything else kept — names, zones, selector, tolerations, weights and
//! bounds, so a member the policy excludes stays excluded and places nothing — and the given
//! quota (evicting does not credit it; the hub passes the quota as the preemptor would see
//! it). The demand's count becomes `Count::Replicas(want)` for replicas and for shards alike:
//! `want` is the number of pods that need room (for a job set with a parallelism, what may
//! run at once); a duplicated job set counts as divided, as the engine does. The returned
//! outcome's share therefore counts pods, not shard indices — the hub assigns the indices
//! when it places the job set again. A gang's demand is used unchanged. Units placed are the
//! sum of the outcome's shares; a gang counts only when placed whole. Members that are not
//! `ready`, are not in `clusters`, or are listed twice (the first entry counts) are skipped;
//! a member not in `members` is not considered. A preemptor whose count is
//! [`Count::Whole`] (daemon, cron job) does not preempt: `None`.
//!
//! # Search and its cost
//!
//! Exact cheapest victims are a multi-dimensional knapsack over nodes; the search is greedy,
//! per member, with `p` candidate pods, `u ≤ p` units and `k` chosen units:
//!
//! 1. Units: a pod is useful only on a node of the view that some pod of the preemptor
//!    matches (selector, taints); other shards and replicas are dropped, a gang is kept when
//!    one of its pods is useful. A service contributes its first `can_lose` useful pods in
//!    node order. Units are sorted (`O(p log p)`) by priority, then shards first, then fewer
//!    pods per unit (replicas before a bigger gang), then newer workloads first (`created`),
//!    then key. Evicting a prefix of this order keeps the highest victim priority as low as
//!    the member allows.
//! 2. One plan with every unit evicted: what the member can host at best.
//! 3. Growth without a plan per pod: a running total of the freed resources is added to the
//!    useful nodes' free room until the total could hold the target (a necessary condition,
//!    no plan); from there the prefix grows in doubling steps (1, 2, 4, … units) until the
//!    engine places the target, then a binary search between the last prefix that did not
//!    fit and the first that did finds the shortest fitting prefix: `O(log u)` plans.
//! 4. Pruning: the chosen units are tried for removal from the last added back to the first
//!    (the most expensive first); a unit whose removal still fits is dropped: one plan per
//!    chosen unit, `k` plans. The engine's room for replicas only grows with free room, so
//!    one pass leaves a minimal set; a gang is packed first-fit-decreasing, which need not be
//!    monotone, so for a gang the passes repeat until one drops nothing.
//! 5. A second order: steps 3–4 again over the units regrouped by node within each
//!    priority, the nodes with the most free room first (node-packed). The greedy order
//!    takes the newest workloads' pods wherever they run; freeing a little on many nodes,
//!    or two pods on a node that was nearly full, can cost more pods than emptying the
//!    node that was nearly free. The cheaper of the two minimal sets wins (the greedy one
//!    on a tie). Both are minimal; neither is guaranteed the fewest.
//!
//! Each plan sees one member: `O(nodes + pods of the units that change)` to build the view,
//! plus the engine on one cluster. In all, per member `O(p log p)` plus
//! `O(log u + k)` plans per order (gang preemptors: `k` per pass).

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use super::decision::Outcome;
use super::engine::{PlanInput, plan};
use super::model::{
    ClusterView, Count, Demand, PlacementPolicy, PodShape, QuotaView, Resources, Spread, Strategy,
};
use crate::api::ranges::RangeSet;

/// How a victim workload may be cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VictimKind {
    /// A job set: each pod is one unfinished shard ([`VictimPod::shard`]), evicted alone.
    Shards,
    /// A service or stateful set: replicas evicted one at a time, at most `can_lose`
    /// (what its disruption budget allows, as the hub computes it).
    Replicas { can_lose: u32 },
    /// A training job: all its pods in the member, or none.
    Gang,
}

/// One running pod of a victim workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VictimPod {
    /// The node it runs on; a node the member's view does not list gets nothing back.
    pub node: String,
    /// Its requests, as the scheduler counts them (what evicting it gives back).
    pub resources: Resources,
    /// The shard index, for [`VictimKind::Shards`].
    pub shard: Option<u32>,
}

/// A workload that could be evicted, with its pods in one member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// `namespace/Kind/name`.
    pub key: String,
    pub priority: i32,
    pub kind: VictimKind,
    /// Creation time (unix seconds): among otherwise equal victims, newer workloads' pods
    /// go first.
    pub created: i64,
    pub pods: Vec<VictimPod>,
}

/// The candidates of one member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberCandidates {
    pub member: String,
    pub candidates: Vec<Candidate>,
}

/// Everything one preemption choice depends on.
#[derive(Clone, Copy, Debug)]
pub struct PreemptInput<'a> {
    /// The members' views (as for [`plan`]); only the members in `members` are looked at.
    pub clusters: &'a [ClusterView],
    /// The preemptor's placement policy.
    pub policy: &'a PlacementPolicy,
    /// The preemptor's demand; for replicas and shards its count is replaced by `want`.
    pub demand: &'a Demand,
    pub quota: Option<&'a QuotaView>,
    /// The preemptor's priority: only strictly lower priorities are victims.
    pub priority: i32,
    /// Units to place for replicas or shards (pods that need room); ignored for a gang.
    pub want: u32,
    pub members: &'a [MemberCandidates],
}

/// What to evict of one candidate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eviction {
    pub key: String,
    pub kind: VictimKind,
    /// Pods evicted.
    pub pods: u32,
    /// Which pods: indices into the candidate's [`Candidate::pods`], ascending.
    pub taken: Vec<usize>,
    /// Shard indices taken ([`VictimKind::Shards`]); empty otherwise.
    pub shards: RangeSet,
    /// Replicas taken ([`VictimKind::Replicas`]) or the gang's pods ([`VictimKind::Gang`]);
    /// 0 for shards.
    pub replicas: u32,
    pub priority: i32,
    /// What the evicted pods give back to the nodes of the member's view.
    pub freed: Resources,
}

impl Eviction {
    /// One line for events and logs: `team-a/JobSet/batch: shards 3-5`,
    /// `team-b/Service/web: 2 replicas`, `team-c/TrainingJob/t: the whole gang (4 pods)`.
    pub fn describe(&self) -> String {
        let what = match self.kind {
            VictimKind::Shards => {
                let indexed = self.shards.len();
                let unindexed = u64::from(self.pods).saturating_sub(indexed);
                match (indexed, unindexed) {
                    (0, n) => plural(n, "pod"),
                    (_, 0) => format!("shards {}", self.shards),
                    (_, n) => format!(
                        "shards {} and {} without a shard index",
                        self.shards,
                        plural(n, "pod")
                    ),
                }
            }
            VictimKind::Replicas { .. } => plural(u64::from(self.replicas), "replica"),
            VictimKind::Gang => format!("the whole gang ({})", plural(u64::from(self.pods), "pod")),
        };
        format!("{}: {what}", self.key)
    }
}

fn plural(n: u64, unit: &str) -> String {
    if n == 1 {
        format!("1 {unit}")
    } else {
        format!("{n} {unit}s")
    }
}

/// The member chosen, what to evict there and where the preemptor then goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preemption {
    pub member: String,
    /// One entry per candidate with pods taken, by priority then key; empty when the
    /// preemptor fits without evicting anything.
    pub victims: Vec<Eviction>,
    /// The preemptor's placement in that member on the freed room (the engine's outcome on
    /// the one-member view; for replicas and shards its share counts pods).
    pub outcome: Outcome,
    /// Units placed: replicas or shard pods (at most `want`), or a gang's pods.
    pub units: u32,
}

/// The cost of a set of victims; smaller is cheaper (compared field by field, then the
/// member's name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Cost {
    /// `None` (no victim) is below every priority.
    highest: Option<i32>,
    pods: u64,
    replica_pods: u64,
    priority_sum: i128,
}

/// Chooses the member, the victims there and the preemptor's placement; `None` when the
/// preemptor cannot place a unit (a gang: cannot place whole) in any member even with every
/// eligible victim evicted. See the module documentation for the rules and the cost.
pub fn choose(input: &PreemptInput<'_>) -> Option<Preemption> {
    choose_counting(input).0
}

/// [`choose`] and the number of plans it ran.
fn choose_counting(input: &PreemptInput<'_>) -> (Option<Preemption>, usize) {
    let gang_pods = match &input.demand.count {
        Count::Gang(roles) => Some(roles.iter().map(|r| u64::from(r.replicas)).sum::<u64>()),
        Count::Whole => return (None, 0),
        Count::Replicas(_) | Count::Shards { .. } => None,
    };
    if gang_pods == Some(0) || (gang_pods.is_none() && input.want == 0) {
        return (None, 0);
    }
    let (policy, demand) = restricted(input);
    let mut seen = BTreeSet::new();
    let mut searches = Vec::new();
    for m in input.members {
        if !seen.insert(m.member.as_str()) {
            continue;
        }
        let Some(view) = input.clusters.iter().find(|c| c.name == m.member) else {
            continue;
        };
        if !view.ready {
            continue;
        }
        let search = Search::new(input, &policy, &demand, view, &m.candidates);
        let all: Vec<usize> = (0..search.units.len()).collect();
        let best = search.placed(&search.run(&search.extra_of(&all)));
        searches.push((search, best));
    }
    let target = match gang_pods {
        Some(pods) => pods,
        None => searches.iter().map(|(_, best)| *best).max().unwrap_or(0),
    };
    let mut chosen: Option<(Cost, Preemption)> = None;
    if target > 0 {
        for (search, best) in &searches {
            if *best < target {
                continue;
            }
            let Some((units, outcome)) = search.cheapest(target) else {
                continue;
            };
            let (cost, victims) = search.evictions(&units);
            let better = chosen
                .as_ref()
                .is_none_or(|(c, p)| (&cost, &search.view.name) < (c, &p.member));
            if better {
                chosen = Some((
                    cost,
                    Preemption {
                        member: search.view.name.clone(),
                        victims,
                        outcome,
                        units: u32::try_from(target).unwrap_or(u32::MAX),
                    },
                ));
            }
        }
    }
    let plans = searches.iter().map(|(s, _)| s.plans.get()).sum();
    (chosen.map(|(_, p)| p), plans)
}

/// The policy and demand each one-member plan runs with: spread cleared (one member), a
/// duplicated job set divided, and the count of replicas or shards set to `want` replicas.
fn restricted(input: &PreemptInput<'_>) -> (PlacementPolicy, Demand) {
    let mut policy = input.policy.clone();
    policy.spread = Spread::default();
    let mut demand = input.demand.clone();
    match demand.count {
        Count::Replicas(_) => demand.count = Count::Replicas(input.want),
        Count::Shards { .. } => {
            demand.count = Count::Replicas(input.want);
            if policy.strategy == Strategy::Duplicated {
                policy.strategy = Strategy::Divided;
            }
        }
        Count::Gang(_) | Count::Whole => {}
    }
    (policy, demand)
}

/// A set of pods evicted together: one shard, one replica, or a whole gang.
struct Unit {
    /// Index into the member's candidates.
    cand: usize,
    /// Indices into the candidate's pods.
    pods: Vec<usize>,
    /// What each pod gives back: (node index in the view, resources).
    frees: Vec<(usize, Resources)>,
    /// Sum of `frees`.
    freed: Resources,
}

/// The search in one member.
struct Search<'a> {
    view: &'a ClusterView,
    candidates: &'a [Candidate],
    policy: &'a PlacementPolicy,
    demand: &'a Demand,
    quota: Option<&'a QuotaView>,
    gang: bool,
    /// Eligible units, in the greedy order.
    units: Vec<Unit>,
    /// Free room (each dimension at least 0) of the nodes some pod of the preemptor matches.
    room: Resources,
    /// What one unit of the preemptor asks (replicas, shards) or the whole gang.
    need: Option<Resources>,
    plans: Cell<usize>,
}

impl<'a> Search<'a> {
    fn new(
        input: &PreemptInput<'a>,
        policy: &'a PlacementPolicy,
        demand: &'a Demand,
        view: &'a ClusterView,
        candidates: &'a [Candidate],
    ) -> Search<'a> {
        let member = view.name.as_str();
        let pod = demand.pod_in(member);
        let (gang, shapes, need): (bool, Vec<&PodShape>, Option<Resources>) = match &demand.count {
            Count::Gang(roles) => {
                let roles = demand.roles_in(member, roles);
                let shapes: Vec<&PodShape> = roles
                    .iter()
                    .map(|r| r.pod.as_ref().unwrap_or(pod))
                    .collect();
                let need = roles
                    .iter()
                    .zip(&shapes)
                    .try_fold(Resources::ZERO, |acc, (r, s)| {
                        acc.checked_add(
                            &s.resources
                                .as_pod_request()
                                .checked_mul(u64::from(r.replicas))?,
                        )
                    });
                (true, shapes, need)
            }
            _ => (false, vec![pod], Some(pod.resources.as_pod_request())),
        };
        let mut index: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, n) in view.nodes.iter().enumerate() {
            index.entry(n.name.as_str()).or_insert(i);
        }
        let useful_node: Vec<bool> = view
            .nodes
            .iter()
            .map(|n| shapes.iter().any(|s| s.matches_node(n)))
            .collect();
        let room = view
            .nodes
            .iter()
            .zip(&useful_node)
            .filter(|(_, u)| **u)
            .fold(Resources::ZERO, |acc, (n, _)| {
                acc.saturating_add(&non_negative(&n.free))
            });
        let node_of = |p: &VictimPod| index.get(p.node.as_str()).copied();
        let useful = |p: &VictimPod| node_of(p).is_some_and(|i| useful_node[i]);
        let unit = |cand: usize, pods: Vec<usize>| {
            let frees: Vec<(usize, Resources)> = pods
                .iter()
                .filter_map(|&i| {
                    let p = &candidates[cand].pods[i];
                    node_of(p).map(|n| (n, p.resources.as_pod_request()))
                })
                .collect();
            let freed = frees
                .iter()
                .fold(Resources::ZERO, |acc, (_, r)| acc.saturating_add(r));
            Unit {
                cand,
                pods,
                frees,
                freed,
            }
        };
        let mut units = Vec::new();
        for (ci, c) in candidates.iter().enumerate() {
            if c.priority >= input.priority || c.pods.is_empty() {
                continue;
            }
            match c.kind {
                VictimKind::Gang => {
                    if c.pods.iter().any(useful) {
                        units.push(unit(ci, (0..c.pods.len()).collect()));
                    }
                }
                VictimKind::Shards | VictimKind::Replicas { .. } => {
                    let mut pods: Vec<usize> =
                        (0..c.pods.len()).filter(|&i| useful(&c.pods[i])).collect();
                    pods.sort_by_key(|&i| node_of(&c.pods[i]));
                    if let VictimKind::Replicas { can_lose } = c.kind {
                        pods.truncate(usize::try_from(can_lose).unwrap_or(usize::MAX));
                    }
                    units.extend(pods.into_iter().map(|p| unit(ci, vec![p])));
                }
            }
        }
        // Stable: a candidate's pods keep their node order.
        units.sort_by(|a, b| {
            let key = |u: &Unit| {
                let c = &candidates[u.cand];
                (
                    c.priority,
                    c.kind != VictimKind::Shards,
                    u.pods.len(),
                    c.kind != VictimKind::Gang,
                    Reverse(c.created),
                    c.key.as_str(),
                    u.cand,
                )
            };
            key(a).cmp(&key(b))
        });
        Search {
            view,
            candidates,
            policy,
            demand,
            quota: input.quota,
            gang,
            units,
            room,
            need,
            plans: Cell::new(0),
        }
    }

    /// What the given units give back, node by node.
    fn extra_of(&self, units: &[usize]) -> Vec<Resources> {
        let mut extra = vec![Resources::ZERO; self.view.nodes.len()];
        for &u in units {
            for (n, r) in &self.units[u].frees {
                extra[*n] = extra[*n].saturating_add(r);
            }
        }
        extra
    }

    /// The engine on the member alone, with `extra` given back to its nodes.
    fn run(&self, extra: &[Resources]) -> Outcome {
        self.plans.set(self.plans.get() + 1);
        let mut view = self.view.clone();
        for (node, e) in view.nodes.iter_mut().zip(extra) {
            node.free = node.free.saturating_add(e);
        }
        plan(&PlanInput {
            clusters: std::slice::from_ref(&view),
            policy: self.policy,
            demand: self.demand,
            quota: self.quota,
            current: None,
        })
    }

    /// Units an outcome places: its shares; a gang only when placed whole.
    fn placed(&self, o: &Outcome) -> u64 {
        if self.gang && (o.decision.unplaced > 0 || o.decision.placements.is_empty()) {
            return 0;
        }
        o.decision.shares().values().map(|&s| u64::from(s)).sum()
    }

    /// The cheapest units found that let `target` units place, with the outcome: the
    /// search in the greedy order and in the node-packed order, the cheaper result (the
    /// greedy one on a tie).
    fn cheapest(&self, target: u64) -> Option<(Vec<usize>, Outcome)> {
        let greedy: Vec<usize> = (0..self.units.len()).collect();
        let first = self.cheapest_in(&greedy, target)?;
        let packed = self.node_packed();
        if packed == greedy {
            return Some(first);
        }
        match self.cheapest_in(&packed, target) {
            Some(second) if self.evictions(&second.0).0 < self.evictions(&first.0).0 => {
                Some(second)
            }
            _ => Some(first),
        }
    }

    /// The greedy order regrouped by node within each victim priority, the nodes with
    /// the most free room first: the greedy order takes the newest workloads' pods
    /// wherever they run, and freeing a little on many nodes can cost more pods than
    /// emptying the one node that was nearly free (a unit spanning nodes counts at its
    /// best-placed node).
    fn node_packed(&self) -> Vec<usize> {
        let mut nodes: Vec<usize> = (0..self.view.nodes.len()).collect();
        nodes.sort_by(|&a, &b| {
            let room = |i: usize| {
                let f = non_negative(&self.view.nodes[i].free);
                (f.gpu, f.cpu, f.memory)
            };
            room(b).cmp(&room(a)).then(a.cmp(&b))
        });
        let mut rank = vec![usize::MAX; self.view.nodes.len()];
        for (r, &n) in nodes.iter().enumerate() {
            rank[n] = r;
        }
        let mut order: Vec<usize> = (0..self.units.len()).collect();
        // Stable: within a node the greedy order holds.
        order.sort_by_key(|&u| {
            let unit = &self.units[u];
            let node = unit
                .frees
                .iter()
                .map(|(n, _)| rank[*n])
                .min()
                .unwrap_or(usize::MAX);
            (self.candidates[unit.cand].priority, node)
        });
        order
    }

    /// [`Search::cheapest`] over the units in `order`: the shortest fitting prefix, then
    /// pruned.
    fn cheapest_in(&self, order: &[usize], target: u64) -> Option<(Vec<usize>, Outcome)> {
        let n = order.len();
        let fits = |units: &[usize]| {
            let o = self.run(&self.extra_of(units));
            (self.placed(&o) >= target).then_some(o)
        };
        // Without a plan: the shortest prefix whose freed total could hold the target.
        let mut start = 0;
        if let Some(need) = self.need.and_then(|r| {
            if self.gang {
                Some(r)
            } else {
                r.checked_mul(target)
            }
        }) {
            let mut room = self.room;
            while start < n && !need.fits_in(&room) {
                room = room.saturating_add(&self.units[order[start]].freed);
                start += 1;
            }
        }
        // A prefix length known not to fit (the freed total could not hold the target).
        let mut short = start.checked_sub(1);
        let mut len = start;
        let mut step = 1usize;
        let (mut fit, mut outcome) = loop {
            if let Some(o) = fits(&order[..len]) {
                break (len, o);
            }
            short = Some(len);
            if len == n {
                return None;
            }
            len = len.saturating_add(step).min(n);
            step = step.saturating_mul(2);
        };
        if let Some(mut lo) = short {
            while fit - lo > 1 {
                let mid = lo + (fit - lo) / 2;
                match fits(&order[..mid]) {
                    Some(o) => {
                        fit = mid;
                        outcome = o;
                    }
                    None => lo = mid,
                }
            }
            short = Some(lo);
        }
        // Pruning, most expensive (last added) first.
        let mut chosen: Vec<usize> = order[..fit].to_vec();
        let mut extra = self.extra_of(&chosen);
        let mut last_is_needed = fit > 0 && short == Some(fit - 1);
        loop {
            let mut dropped = false;
            for pos in (0..chosen.len()).rev() {
                if std::mem::take(&mut last_is_needed) {
                    // Without it, it is the prefix known not to fit.
                    continue;
                }
                let mut trial = extra.clone();
                for (node, r) in &self.units[chosen[pos]].frees {
                    trial[*node] = trial[*node].saturating_sub(r);
                }
                let o = self.run(&trial);
                if self.placed(&o) >= target {
                    chosen.remove(pos);
                    extra = trial;
                    outcome = o;
                    dropped = true;
                }
            }
            if !dropped || !self.gang {
                break;
            }
        }
        Some((chosen, outcome))
    }

    /// The evictions of the chosen units, one per candidate, and their cost.
    fn evictions(&self, chosen: &[usize]) -> (Cost, Vec<Eviction>) {
        let mut by_candidate: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &u in chosen {
            by_candidate.entry(self.units[u].cand).or_default().push(u);
        }
        let mut cost = Cost {
            highest: None,
            pods: 0,
            replica_pods: 0,
            priority_sum: 0,
        };
        let mut victims = Vec::new();
        for (ci, units) in by_candidate {
            let c = &self.candidates[ci];
            let mut taken: Vec<usize> = units
                .iter()
                .flat_map(|&u| self.units[u].pods.iter().copied())
                .collect();
            taken.sort_unstable();
            let freed = units.iter().fold(Resources::ZERO, |acc, &u| {
                acc.saturating_add(&self.units[u].freed)
            });
            let pods = u32::try_from(taken.len()).unwrap_or(u32::MAX);
            let shards = match c.kind {
                VictimKind::Shards => {
                    RangeSet::from_indices(taken.iter().filter_map(|&i| c.pods[i].shard))
                }
                _ => RangeSet::new(),
            };
            let replicas = match c.kind {
                VictimKind::Shards => 0,
                VictimKind::Replicas { .. } | VictimKind::Gang => pods,
            };
            cost.highest = cost.highest.max(Some(c.priority));
            cost.pods += u64::from(pods);
            if matches!(c.kind, VictimKind::Replicas { .. }) {
                cost.replica_pods += u64::from(pods);
            }
            cost.priority_sum += i128::from(c.priority) * i128::from(pods);
            victims.push(Eviction {
                key: c.key.clone(),
                kind: c.kind,
                pods,
                taken,
                shards,
                replicas,
                priority: c.priority,
                freed,
            });
        }
        victims.sort_by(|a, b| a.priority.cmp(&b.priority).then(a.key.cmp(&b.key)));
        (cost, victims)
    }
}

/// Each dimension at least 0.
fn non_negative(r: &Resources) -> Resources {
    Resources {
        cpu: r.cpu.max(crate::api::quantity::Milli(0)),
        memory: r.memory.max(crate::api::quantity::Milli(0)),
        gpu: r.gpu.max(0),
        pods: r.pods.max(0),
    }
}

/// Gives back, on each member's nodes, what a candidate victim's reservation counts a
/// second time: its reported pods are in the member's report and, for up to the ledger's
/// expiry, in its reservation too. Only that overlap is room; a reserved pod the report
/// does not list yet runs all the same, and counting it as free would take too few
/// victims (`choose` frees only the pods it knows).
pub fn give_back_counted_twice(
    views: &mut [ClusterView],
    ledger: &super::Ledger,
    members: &[MemberCandidates],
) {
    for m in members {
        let Some(view) = views.iter_mut().find(|v| v.name == m.member) else {
            continue;
        };
        for c in &m.candidates {
            let twice = ledger.counted_twice(
                &c.key,
                &m.member,
                c.pods.iter().map(|p| (p.node.as_str(), p.resources)),
            );
            for (node, r) in twice {
                if let Some(n) = view.nodes.iter_mut().find(|n| n.name == node) {
                    n.free = n.free.saturating_add(&r);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use proptest::strategy::Strategy;

    use super::*;
    use crate::api::quantity::Milli;
    use crate::placement::Strategy as Placing;
    use crate::placement::{Bounds, GangRole, Limits, NodeRoom, QuotaUse};

    /// `m` milli-cores, no memory, one pod slot.
    fn cpu(m: i128) -> Resources {
        Resources::pod(Milli(m), Milli(0), 0)
    }

    fn node(name: &str, free_milli: i128, pods: i64) -> NodeRoom {
        NodeRoom {
            name: name.into(),
            labels: BTreeMap::new(),
            taints: vec![],
            free: Resources {
                cpu: Milli(free_milli),
                memory: Milli(0),
                gpu: 0,
                pods,
            },
        }
    }

    fn cluster(name: &str, nodes: Vec<NodeRoom>) -> ClusterView {
        ClusterView {
            name: name.into(),
            zone: None,
            region: None,
            labels: BTreeMap::new(),
            taints: vec![],
            weight: 1,
            ready: true,
            nodes,
        }
    }

    /// Members a and b, each with one full node (a1, b1) of 10 pod slots.
    fn two_full_clusters() -> Vec<ClusterView> {
        vec![
            cluster("a", vec![node("a1", 0, 10)]),
            cluster("b", vec![node("b1", 0, 10)]),
        ]
    }

    fn on(node: &str, milli: i128) -> VictimPod {
        VictimPod {
            node: node.into(),
            resources: cpu(milli),
            shard: None,
        }
    }

    fn shard(node: &str, milli: i128, index: u32) -> VictimPod {
        VictimPod {
            shard: Some(index),
            ..on(node, milli)
        }
    }

    fn victim(key: &str, priority: i32, kind: VictimKind, pods: Vec<VictimPod>) -> Candidate {
        Candidate {
            key: key.into(),
            priority,
            kind,
            created: 0,
            pods,
        }
    }

    /// `key`'s shards 0 to `n - 1` at `priority`, each `milli` milli-cores on `node`.
    fn shard_job(key: &str, priority: i32, node: &str, milli: i128, n: u32) -> Candidate {
        let pods = (0..n).map(|k| shard(node, milli, k)).collect();
        victim(key, priority, VictimKind::Shards, pods)
    }

    fn member(name: &str, candidates: Vec<Candidate>) -> MemberCandidates {
        MemberCandidates {
            member: name.into(),
            candidates,
        }
    }

    fn demand(milli: i128, count: Count) -> Demand {
        Demand {
            pod: PodShape {
                resources: cpu(milli),
                ..PodShape::default()
            },
            count,
            member_pods: BTreeMap::new(),
            member_roles: BTreeMap::new(),
        }
    }

    fn gang(replicas: u32) -> Count {
        Count::Gang(vec![GangRole {
            role: "Worker".into(),
            replicas,
            pod: None,
        }])
    }

    fn input<'a>(
        clusters: &'a [ClusterView],
        policy: &'a PlacementPolicy,
        demand: &'a Demand,
        priority: i32,
        want: u32,
        members: &'a [MemberCandidates],
    ) -> PreemptInput<'a> {
        PreemptInput {
            clusters,
            policy,
            demand,
            quota: None,
            priority,
            want,
            members,
        }
    }

    /// Units the preemptor places in `member` with the given pods of its candidates
    /// evicted: rebuilt from the view and the evictions, independently of the search.
    fn placed_after(input: &PreemptInput<'_>, member: &str, evicted: &[(&str, &[usize])]) -> u64 {
        let (policy, demand) = restricted(input);
        let mut view = input
            .clusters
            .iter()
            .find(|c| c.name == member)
            .expect("member has a view")
            .clone();
        let candidates = &input
            .members
            .iter()
            .find(|m| m.member == member)
            .expect("member has candidates")
            .candidates;
        for (key, taken) in evicted {
            let c = candidates
                .iter()
                .find(|c| c.key == *key)
                .expect("victim is a candidate of the member");
            for &i in *taken {
                let p = &c.pods[i];
                if let Some(n) = view.nodes.iter_mut().find(|n| n.name == p.node) {
                    n.free = n.free.saturating_add(&p.resources.as_pod_request());
                }
            }
        }
        let o = plan(&PlanInput {
            clusters: std::slice::from_ref(&view),
            policy: &policy,
            demand: &demand,
            quota: input.quota,
            current: None,
        });
        units_of(&o, matches!(input.demand.count, Count::Gang(_)))
    }

    fn units_of(o: &Outcome, gang: bool) -> u64 {
        if gang && (o.decision.unplaced > 0 || o.decision.placements.is_empty()) {
            return 0;
        }
        o.decision.shares().values().map(|&s| u64::from(s)).sum()
    }

    /// Every way to take one unit out of the victims: one shard, one replica, one gang.
    fn without_one_unit(victims: &[Eviction]) -> Vec<Vec<(&str, Vec<usize>)>> {
        let mut out = Vec::new();
        for (i, v) in victims.iter().enumerate() {
            let drops: Vec<Vec<usize>> = match v.kind {
                VictimKind::Gang => vec![v.taken.clone()],
                _ => v.taken.iter().map(|&p| vec![p]).collect(),
            };
            for drop in drops {
                let mut set: Vec<(&str, Vec<usize>)> = Vec::new();
                for (j, w) in victims.iter().enumerate() {
                    let taken: Vec<usize> = if i == j {
                        w.taken
                            .iter()
                            .copied()
                            .filter(|p| !drop.contains(p))
                            .collect()
                    } else {
                        w.taken.clone()
                    };
                    set.push((w.key.as_str(), taken));
                }
                out.push(set);
            }
        }
        out
    }

    fn placed_with(input: &PreemptInput<'_>, member: &str, set: &[(&str, Vec<usize>)]) -> u64 {
        let borrowed: Vec<(&str, &[usize])> = set.iter().map(|(k, t)| (*k, t.as_slice())).collect();
        placed_after(input, member, &borrowed)
    }

    fn assert_minimal(input: &PreemptInput<'_>, p: &Preemption) {
        let all: Vec<(&str, Vec<usize>)> = p
            .victims
            .iter()
            .map(|v| (v.key.as_str(), v.taken.clone()))
            .collect();
        assert!(placed_with(input, &p.member, &all) >= u64::from(p.units));
        for set in without_one_unit(&p.victims) {
            assert!(
                placed_with(input, &p.member, &set) < u64::from(p.units),
                "not minimal: {set:?} still places {} ({:?})",
                p.units,
                p.victims
            );
        }
    }

    #[test]
    fn shards_go_before_replicas_of_equal_priority() {
        // "a" would win on the name; the shards in "b" are cheaper.
        let clusters = two_full_clusters();
        let members = vec![
            member(
                "a",
                vec![victim(
                    "team-b/Service/web",
                    100,
                    VictimKind::Replicas { can_lose: 5 },
                    vec![on("a1", 1000), on("a1", 1000), on("a1", 1000)],
                )],
            ),
            member(
                "b",
                vec![victim(
                    "team-a/JobSet/batch",
                    100,
                    VictimKind::Shards,
                    vec![
                        shard("b1", 1000, 3),
                        shard("b1", 1000, 4),
                        shard("b1", 1000, 5),
                    ],
                )],
            ),
        ];
        let policy = PlacementPolicy::default();
        let d = demand(1000, Count::Replicas(2));
        let i = input(&clusters, &policy, &d, 200, 2, &members);
        let p = choose(&i).expect("a preemption");
        assert_eq!(p.member, "b");
        assert_eq!(p.units, 2);
        assert_eq!(p.victims.len(), 1);
        assert_eq!(p.victims[0].pods, 2);
        assert_eq!(p.victims[0].shards.len(), 2);
        assert_eq!(p.victims[0].replicas, 0);
        assert_eq!(
            p.victims[0].freed,
            Resources {
                cpu: Milli(2000),
                memory: Milli(0),
                gpu: 0,
                pods: 2
            }
        );
        assert!(
            p.victims[0]
                .describe()
                .starts_with("team-a/JobSet/batch: shards ")
        );
        assert_eq!(p.outcome.decision.shares().get("b"), Some(&2));
        assert_minimal(&i, &p);

        // Without the shards, the service's replicas are taken.
        let members = vec![members[0].clone()];
        let i = input(&clusters, &policy, &d, 200, 2, &members);
        let p = choose(&i).expect("a preemption");
        assert_eq!(p.member, "a");
        assert_eq!(p.victims[0].describe(), "team-b/Service/web: 2 replicas");
    }

    #[test]
    fn fewer_pods_win_over_the_name_and_lower_priority_over_fewer_pods() {
        let clusters = two_full_clusters();
        // "a" needs two small shards, "b" one big one: "b" is cheaper.
        let members = vec![
            member(
                "a",
                vec![victim(
                    "ns/JobSet/small",
                    10,
                    VictimKind::Shards,
                    vec![shard("a1", 500, 0), shard("a1", 500, 1)],
                )],
            ),
            member(
                "b",
                vec![victim(
                    "ns/JobSet/big",
                    10,
                    VictimKind::Shards,
                    vec![shard("b1", 1000, 0)],
                )],
            ),
        ];
        let policy = PlacementPolicy::default();
        let d = demand(1000, Count::Replicas(1));
        let i = input(&clusters, &policy, &d, 50, 1, &members);
        assert_eq!(choose(&i).unwrap().member, "b");
        // With the big one at a higher priority, the two small ones are cheaper.
        let mut members = members;
        members[1].candidates[0].priority = 20;
        let i = input(&clusters, &policy, &d, 50, 1, &members);
        let p = choose(&i).unwrap();
        assert_eq!(p.member, "a");
        assert_eq!(p.victims[0].describe(), "ns/JobSet/small: shards 0-1");
    }

    #[test]
    fn equal_or_higher_priority_is_never_a_victim() {
        let clusters = vec![cluster("a", vec![node("a1", 0, 10)])];
        let equal = victim(
            "ns/JobSet/equal",
            100,
            VictimKind::Shards,
            vec![shard("a1", 1000, 0), shard("a1", 1000, 1)],
        );
        let higher = victim(
            "ns/Service/higher",
            150,
            VictimKind::Replicas { can_lose: 9 },
            vec![on("a1", 1000), on("a1", 1000)],
        );
        let policy = PlacementPolicy::default();
        let d = demand(1000, Count::Replicas(1));
        let members = vec![member("a", vec![equal.clone(), higher.clone()])];
        let i = input(&clusters, &policy, &d, 100, 1, &members);
        assert_eq!(choose(&i), None);
        // A lower one is taken, the equal one still not, though it would be cheaper in pods.
        let lower = victim(
            "ns/JobSet/lower",
            99,
            VictimKind::Shards,
            vec![shard("a1", 500, 0), shard("a1", 500, 1)],
        );
        let members = vec![member("a", vec![equal, higher, lower])];
        let i = input(&clusters, &policy, &d, 100, 1, &members);
        let p = choose(&i).unwrap();
        assert_eq!(p.victims.len(), 1);
        assert_eq!(p.victims[0].key, "ns/JobSet/lower");
        assert_eq!(p.victims[0].pods, 2);
    }

    #[test]
    fn gang_preemptor_fits_whole_in_one_member_or_nothing_is_evicted() {
        let clusters = vec![
            cluster("x", vec![node("x1", 0, 10), node("x2", 1000, 10)]),
            cluster("y", vec![node("y1", 0, 10)]),
        ];
        let members = vec![
            member("x", vec![shard_job("ns/JobSet/x", 1, "x1", 1000, 4)]),
            member("y", vec![shard_job("ns/JobSet/y", 1, "y1", 1000, 3)]),
        ];
        let policy = PlacementPolicy::default();
        // A gang of 4: x has 1 free plus 4 to free, y only 3.
        let d = demand(1000, gang(4));
        let i = input(&clusters, &policy, &d, 10, 0, &members);
        let p = choose(&i).expect("the gang fits in x");
        assert_eq!(p.member, "x");
        assert_eq!(p.units, 4);
        assert_eq!(p.victims.len(), 1);
        assert_eq!(p.victims[0].key, "ns/JobSet/x");
        assert_eq!(p.victims[0].pods, 3, "one pod fits on x2 already");
        assert_eq!(p.outcome.decision.unplaced, 0);
        assert_minimal(&i, &p);
        // A gang of 6 fits nowhere, even with everything evicted: nothing is evicted.
        let d = demand(1000, gang(6));
        let i = input(&clusters, &policy, &d, 10, 0, &members);
        assert_eq!(choose(&i), None);
    }

    #[test]
    fn can_lose_bounds_the_replicas_taken_and_the_most_units_are_placed() {
        let clusters = vec![cluster("a", vec![node("a1", 0, 10)])];
        let members = vec![member(
            "a",
            vec![victim(
                "ns/Service/web",
                5,
                VictimKind::Replicas { can_lose: 2 },
                (0..5).map(|_| on("a1", 1000)).collect(),
            )],
        )];
        let policy = PlacementPolicy::default();
        let d = demand(1000, Count::Replicas(3));
        // 3 wanted, 2 may go: 2 placed, never 3 replicas taken.
        let i = input(&clusters, &policy, &d, 10, 3, &members);
        let p = choose(&i).unwrap();
        assert_eq!(p.units, 2);
        assert_eq!(p.victims[0].replicas, 2);
        assert_eq!(p.victims[0].describe(), "ns/Service/web: 2 replicas");
        assert_minimal(&i, &p);
        // 1 wanted: 1 replica.
        let i = input(&clusters, &policy, &d, 10, 1, &members);
        let p = choose(&i).unwrap();
        assert_eq!((p.units, p.victims[0].replicas), (1, 1));
        assert_eq!(p.victims[0].describe(), "ns/Service/web: 1 replica");
        // can_lose 0: nothing to take, nothing fits.
        let mut members = members;
        members[0].candidates[0].kind = VictimKind::Replicas { can_lose: 0 };
        let i = input(&clusters, &policy, &d, 10, 1, &members);
        assert_eq!(choose(&i), None);
    }

    #[test]
    fn a_victim_gang_goes_whole() {
        // Its pod on a node the view does not have goes too, though it frees nothing here.
        let clusters = vec![cluster("a", vec![node("a1", 0, 10), node("a2", 0, 10)])];
        let members = vec![member(
            "a",
            vec![victim(
                "ns/TrainingJob/t",
                5,
                VictimKind::Gang,
                vec![
                    on("a1", 1000),
                    on("a2", 1000),
                    on("gone", 1000),
                    on("a1", 1000),
                ],
            )],
        )];
        let policy = PlacementPolicy::default();
        let d = demand(1000, Count::Replicas(1));
        let i = input(&clusters, &policy, &d, 10, 1, &members);
        let p = choose(&i).unwrap();
        assert_eq!(p.victims.len(), 1);
        let v = &p.victims[0];
        assert_eq!((v.pods, v.replicas), (4, 4));
        assert_eq!(v.taken, vec![0, 1, 2, 3]);
        assert_eq!(
            v.freed.cpu,
            Milli(3000),
            "the pod on the unknown node frees nothing"
        );
        assert_eq!(v.describe(), "ns/TrainingJob/t: the whole gang (4 pods)");
        assert_minimal(&i, &p);
    }

    #[test]
    fn a_victims_unreported_pods_are_not_room() {
        // Node a1 has 4 cores. The victim placed 4 pods of 1 core there and still holds
        // their reservation; the member's report lists only 2 of them so far (2 free).
        use crate::placement::{NodeBinding, Outcome};
        let reported = |n: usize| -> Vec<MemberCandidates> {
            vec![member(
                "a",
                vec![victim(
                    "ns/PinterestService/low",
                    0,
                    VictimKind::Replicas { can_lose: 4 },
                    (0..n).map(|_| on("a1", 1000)).collect(),
                )],
            )]
        };
        let mut ledger = super::super::Ledger::new();
        let held = Outcome {
            decision: crate::placement::Decision {
                strategy: Placing::Divided,
                placements: vec![],
                unplaced: 0,
                reason: None,
            },
            cause: None,
            excluded: vec![],
            warnings: vec![],
            bindings: (0..4)
                .map(|_| NodeBinding {
                    cluster: "a".into(),
                    node: "a1".into(),
                    pods: 1,
                    resources: cpu(1000),
                })
                .collect(),
            explained: vec![],
        };
        ledger.reserve(
            "ns/PinterestService/low",
            &held,
            std::time::SystemTime::UNIX_EPOCH,
        );
        let policy = PlacementPolicy::default();
        let want3 = demand(1000, Count::Replicas(3));
        let room = |report_free: i128, members: &[MemberCandidates]| {
            let mut views = vec![cluster("a", vec![node("a1", report_free, 10)])];
            ledger.apply(&mut views, None);
            give_back_counted_twice(&mut views, &ledger, members);
            views
        };

        // Two reported: 2 free − 4 reserved + the 2 counted twice = 0 free; evicting the
        // 2 it knows frees 2 cores, short of 3. Nothing is taken until the report has
        // them all (the whole reservation given back read 2 free and took 2 victims for
        // 3 pods that could not start).
        let members = reported(2);
        let views = room(2000, &members);
        assert_eq!(views[0].nodes[0].free.cpu, Milli(0));
        let i = input(&views, &policy, &want3, 10, 3, &members);
        let p = choose(&i).expect("the 2 reported make room for 2");
        assert_eq!(
            (p.units, p.victims.iter().map(|v| v.pods).sum::<u32>()),
            (2, 2),
            "a pod placed for each one evicted, none on the unreported pods' room"
        );

        // All four reported: 0 free, the reservation is counted twice in full.
        let members = reported(4);
        let views = room(0, &members);
        assert_eq!(views[0].nodes[0].free.cpu, Milli(0));
        let i = input(&views, &policy, &want3, 10, 3, &members);
        let p = choose(&i).expect("room once 3 of the 4 go");
        assert_eq!(p.units, 3);
        assert_eq!(p.victims.iter().map(|v| v.pods).sum::<u32>(), 3);

        // A reported pod on a node it holds nothing on gives nothing back there.
        let elsewhere = vec![member(
            "a",
            vec![victim(
                "ns/PinterestService/low",
                0,
                VictimKind::Replicas { can_lose: 4 },
                vec![on("a2", 1000)],
            )],
        )];
        let mut views = vec![cluster("a", vec![node("a1", 0, 10), node("a2", 0, 10)])];
        give_back_counted_twice(&mut views, &ledger, &elsewhere);
        assert_eq!(views[0].nodes[0].free.cpu, Milli(0));
        assert_eq!(views[0].nodes[1].free.cpu, Milli(0));
    }

    #[test]
    fn only_as_much_as_needed() {
        // Cheap tiny pods on a2 cannot make room for a 1-core pod; shards on a1 can. The
        // greedy order takes the tiny ones first, pruning drops them.
        let clusters = vec![cluster("a", vec![node("a1", 500, 10), node("a2", 0, 10)])];
        let members = vec![member(
            "a",
            vec![
                shard_job("ns/JobSet/tiny", 5, "a2", 100, 3),
                shard_job("ns/JobSet/work", 10, "a1", 1000, 10),
            ],
        )];
        let policy = PlacementPolicy::default();
        let d = demand(1000, Count::Replicas(3));
        let i = input(&clusters, &policy, &d, 20, 3, &members);
        let p = choose(&i).unwrap();
        assert_eq!(p.units, 3);
        assert_eq!(p.victims.len(), 1);
        assert_eq!(p.victims[0].key, "ns/JobSet/work");
        // 0.5 free + 3 cores freed hold 3 pods of 1 core: 3 shards, not 4.
        assert_eq!(p.victims[0].pods, 3);
        assert_minimal(&i, &p);
        // Nothing to evict when it already fits.
        let small = demand(500, Count::Replicas(1));
        let i = input(&clusters, &policy, &small, 20, 1, &members);
        let p = choose(&i).unwrap();
        assert!(p.victims.is_empty());
        assert_eq!(p.units, 1);
    }

    #[test]
    fn the_node_nearly_free_is_emptied_before_two_pods_go_elsewhere() {
        // A gang pod of 8 cores. a1 has 2 free and holds the newest job set's two 3-core
        // shards (the greedy order takes them first: 2 pods); a2 has 5 free and one
        // 3-core shard of an older job set: evicting that one pod is enough.
        let clusters = vec![cluster(
            "a",
            vec![node("a1", 2000, 10), node("a2", 5000, 10)],
        )];
        let newest = Candidate {
            created: 100,
            ..victim(
                "ns/JobSet/newest",
                1,
                VictimKind::Shards,
                vec![shard("a1", 3000, 0), shard("a1", 3000, 1)],
            )
        };
        let older = victim(
            "ns/JobSet/older",
            1,
            VictimKind::Shards,
            vec![shard("a2", 3000, 0)],
        );
        let members = vec![member("a", vec![newest, older])];
        let policy = PlacementPolicy::default();
        let d = demand(8000, gang(1));
        let i = input(&clusters, &policy, &d, 10, 0, &members);
        let p = choose(&i).expect("the gang fits in a");
        assert_eq!(p.victims.len(), 1, "{:?}", p.victims);
        assert_eq!(p.victims[0].key, "ns/JobSet/older");
        assert_eq!(p.victims[0].pods, 1);
        assert_minimal(&i, &p);
        // Replicas the same: one 8-core replica wanted.
        let d = demand(8000, Count::Replicas(1));
        let i = input(&clusters, &policy, &d, 10, 1, &members);
        let p = choose(&i).expect("one replica fits in a");
        assert_eq!(p.victims.iter().map(|v| v.pods).sum::<u32>(), 1);
        assert_minimal(&i, &p);
    }

    #[test]
    fn excluded_and_unready_members_are_skipped() {
        let mut clusters = two_full_clusters();
        clusters[1].ready = false;
        let v = |key: &str, n: &str| victim(key, 1, VictimKind::Shards, vec![shard(n, 1000, 0)]);
        let members = vec![
            member("a", vec![v("ns/JobSet/a", "a1")]),
            member("b", vec![v("ns/JobSet/b", "b1")]),
            member("c", vec![v("ns/JobSet/c", "c1")]),
        ];
        let d = demand(1000, Count::Replicas(1));
        let names = PlacementPolicy {
            cluster_names: vec!["b".into()],
            ..PlacementPolicy::default()
        };
        // a is not among the names, b is not ready, c has no view.
        assert_eq!(choose(&input(&clusters, &names, &d, 5, 1, &members)), None);
        let any = PlacementPolicy::default();
        assert_eq!(
            choose(&input(&clusters, &any, &d, 5, 1, &members))
                .unwrap()
                .member,
            "a"
        );
        // Whole workloads do not preempt; nothing wanted, nothing done.
        assert_eq!(
            choose(&input(
                &clusters,
                &any,
                &demand(1000, Count::Whole),
                5,
                1,
                &members
            )),
            None
        );
        assert_eq!(choose(&input(&clusters, &any, &d, 5, 0, &members)), None);
    }

    #[test]
    fn shards_preemptor_places_pods_and_newer_victims_go_first() {
        let clusters = vec![cluster("a", vec![node("a1", 0, 10)])];
        let mut old = victim(
            "ns/JobSet/old",
            1,
            VictimKind::Shards,
            vec![shard("a1", 1000, 0), shard("a1", 1000, 1)],
        );
        old.created = 100;
        let mut new = victim(
            "ns/JobSet/new",
            1,
            VictimKind::Shards,
            vec![shard("a1", 1000, 7), shard("a1", 1000, 8)],
        );
        new.created = 200;
        let members = vec![member("a", vec![old, new])];
        let policy = PlacementPolicy::with_strategy(Placing::Duplicated);
        let d = demand(
            1000,
            Count::Shards {
                total: 50,
                completed: BTreeSet::new(),
                parallelism: None,
            },
        );
        let i = input(&clusters, &policy, &d, 5, 2, &members);
        let p = choose(&i).unwrap();
        assert_eq!(p.units, 2);
        assert_eq!(p.victims.len(), 1);
        assert_eq!(p.victims[0].describe(), "ns/JobSet/new: shards 7-8");
        assert_minimal(&i, &p);
    }

    #[test]
    fn thousands_of_victim_pods_cost_a_few_plans_to_grow() {
        // 3000 pods of 10m; a 10-core pod needs 1000 of them. Growth finds the prefix with
        // a handful of plans; pruning costs one plan per chosen unit.
        let clusters = vec![cluster("a", vec![node("a1", 0, 5000)])];
        let members = vec![member(
            "a",
            vec![shard_job("ns/JobSet/many", 1, "a1", 10, 3000)],
        )];
        let policy = PlacementPolicy::default();
        let d = demand(10_000, Count::Replicas(1));
        let i = input(&clusters, &policy, &d, 5, 1, &members);
        let (p, plans) = choose_counting(&i);
        let p = p.unwrap();
        assert_eq!(p.victims[0].pods, 1000);
        assert_eq!(p.victims[0].describe(), "ns/JobSet/many: shards 0-999");
        // 1 (everything evicted) + 1 (the prefix the totals point at) + pruning, whose last
        // unit is known to be needed.
        assert!(plans <= 2 + 1000, "{plans} plans");
        assert!(plans >= 1000, "pruning checks each chosen unit: {plans}");
    }

    #[test]
    fn quota_is_respected() {
        let clusters = vec![cluster("a", vec![node("a1", 0, 10)])];
        let members = vec![member(
            "a",
            vec![shard_job("ns/JobSet/j", 1, "a1", 1000, 4)],
        )];
        let policy = PlacementPolicy::default();
        let d = demand(1000, Count::Replicas(4));
        let quota = QuotaView {
            name: "q".into(),
            total: QuotaUse {
                hard: Limits {
                    pods: Some(2),
                    ..Limits::default()
                },
                used: Resources::ZERO,
            },
            clusters: BTreeMap::new(),
        };
        let mut i = input(&clusters, &policy, &d, 5, 4, &members);
        i.quota = Some(&quota);
        let p = choose(&i).unwrap();
        assert_eq!(p.units, 2);
        assert_eq!(
            p.victims[0].pods, 2,
            "no eviction for pods the quota refuses"
        );
        assert_minimal(&i, &p);
    }

    // ---- property tests ----

    const PRIORITIES: [i32; 4] = [0, 50, 100, 150];

    fn arb_victim_pod() -> impl Strategy<Value = VictimPod> {
        (0usize..4, 1i128..=4).prop_map(|(n, half)| VictimPod {
            node: format!("n{n}"),
            resources: cpu(half * 500),
            shard: None,
        })
    }

    fn arb_candidate(m: usize, i: usize) -> impl Strategy<Value = Candidate> {
        (
            0usize..4,
            0u8..3,
            0u32..=3,
            0i64..3,
            prop::collection::vec(arb_victim_pod(), 1..=4),
        )
            .prop_map(move |(p, kind, can_lose, created, mut pods)| {
                let kind = match kind {
                    0 => VictimKind::Shards,
                    1 => VictimKind::Replicas { can_lose },
                    _ => VictimKind::Gang,
                };
                if kind == VictimKind::Shards {
                    for (k, pod) in pods.iter_mut().enumerate() {
                        pod.shard = u32::try_from(k).ok();
                    }
                }
                Candidate {
                    key: format!("ns/Kind/m{m}-v{i}"),
                    priority: PRIORITIES[p],
                    kind,
                    created,
                    pods,
                }
            })
    }

    fn arb_member(m: usize) -> impl Strategy<Value = (ClusterView, MemberCandidates)> {
        (
            prop::collection::vec((-1i128..=2, 0i64..=6), 1..=3),
            prop::bool::weighted(0.9),
            0usize..=4,
        )
            .prop_flat_map(move |(nodes, ready, n)| {
                let candidates: Vec<_> = (0..n).map(|i| arb_candidate(m, i)).collect();
                candidates.prop_map(move |candidates| {
                    let mut view = cluster(
                        &format!("c{m}"),
                        nodes
                            .iter()
                            .enumerate()
                            .map(|(k, (half, pods))| node(&format!("n{k}"), half * 500, *pods))
                            .collect(),
                    );
                    view.ready = ready;
                    (
                        view,
                        MemberCandidates {
                            member: format!("c{m}"),
                            candidates,
                        },
                    )
                })
            })
    }

    fn arb_members() -> impl Strategy<Value = Vec<(ClusterView, MemberCandidates)>> {
        (1usize..=3).prop_flat_map(|n| (0..n).map(arb_member).collect::<Vec<_>>())
    }

    fn arb_demand() -> impl Strategy<Value = Demand> {
        (
            0u8..3,
            1i128..=4,
            prop::collection::vec((1u32..=3, prop::option::of(1i128..=3)), 1..=2),
        )
            .prop_map(|(kind, half, roles)| {
                let count = match kind {
                    0 => Count::Replicas(0),
                    1 => Count::Shards {
                        total: 20,
                        completed: BTreeSet::new(),
                        parallelism: None,
                    },
                    _ => Count::Gang(
                        roles
                            .iter()
                            .enumerate()
                            .map(|(k, (replicas, size))| GangRole {
                                role: format!("r{k}"),
                                replicas: *replicas,
                                pod: size.map(|h| PodShape {
                                    resources: cpu(h * 500),
                                    ..PodShape::default()
                                }),
                            })
                            .collect(),
                    ),
                };
                demand(half * 500, count)
            })
    }

    fn arb_policy() -> impl Strategy<Value = PlacementPolicy> {
        (
            0u8..3,
            prop::bool::weighted(0.2),
            prop::option::of(0u32..=5),
        )
            .prop_map(|(s, only_c0, max)| PlacementPolicy {
                strategy: match s {
                    0 => Placing::Divided,
                    1 => Placing::Single,
                    _ => Placing::Duplicated,
                },
                cluster_names: if only_c0 { vec!["c0".into()] } else { vec![] },
                per_cluster: Bounds { min: None, max },
                ..PlacementPolicy::default()
            })
    }

    fn arb_quota() -> impl Strategy<Value = Option<QuotaView>> {
        prop::option::weighted(
            0.2,
            (0i64..=8).prop_map(|pods| QuotaView {
                name: "q".into(),
                total: QuotaUse {
                    hard: Limits {
                        pods: Some(pods),
                        ..Limits::default()
                    },
                    used: Resources::ZERO,
                },
                clusters: BTreeMap::new(),
            }),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn preemption_holds_its_rules(
            generated in arb_members(), d in arb_demand(), policy in arb_policy(),
            quota in arb_quota(), p in 0usize..4, want in 1u32..=6,
        ) {
            let priority = PRIORITIES[p] + 50;
            let (clusters, members): (Vec<ClusterView>, Vec<MemberCandidates>) =
                generated.into_iter().unzip();
            let gang = matches!(d.count, Count::Gang(_));
            let i = PreemptInput {
                clusters: &clusters,
                policy: &policy,
                demand: &d,
                quota: quota.as_ref(),
                priority,
                want,
                members: &members,
            };
            let chosen = choose(&i);
            // What evicting every eligible shard and gang (no replica: those depend on
            // which ones) gives in each ready member: choose does at least as well.
            for m in &members {
                let view = clusters.iter().find(|c| c.name == m.member).unwrap();
                if !view.ready {
                    continue;
                }
                let all: Vec<(&str, Vec<usize>)> = m
                    .candidates
                    .iter()
                    .filter(|c| c.priority < priority && !matches!(c.kind, VictimKind::Replicas { .. }))
                    .map(|c| (c.key.as_str(), (0..c.pods.len()).collect()))
                    .collect();
                let reachable = placed_with(&i, &m.member, &all);
                if reachable > 0 {
                    let p = chosen.as_ref();
                    prop_assert!(p.is_some(), "{} could place {reachable}", m.member);
                    prop_assert!(u64::from(p.unwrap().units) >= reachable.min(u64::from(want)) || gang,
                        "{} could place {reachable}, chose {:?}", m.member, p.map(|p| p.units));
                }
            }
            let Some(p) = chosen else { return Ok(()) };
            // (7) it places something, and what it says.
            prop_assert!(p.units > 0);
            prop_assert_eq!(units_of(&p.outcome, gang), u64::from(p.units));
            if !gang {
                prop_assert!(p.units <= want);
            }
            // (6) a gang places whole.
            if let Count::Gang(roles) = &d.count {
                prop_assert_eq!(p.outcome.decision.unplaced, 0);
                prop_assert_eq!(u64::from(p.units), roles.iter().map(|r| u64::from(r.replicas)).sum::<u64>());
            }
            // (2) one member, and only its candidates.
            let m = members.iter().find(|m| m.member == p.member).unwrap();
            prop_assert!(clusters.iter().any(|c| c.name == p.member && c.ready));
            let mut keys = BTreeSet::new();
            for v in &p.victims {
                prop_assert!(keys.insert(v.key.as_str()), "one eviction per candidate");
                let c = m.candidates.iter().find(|c| c.key == v.key);
                prop_assert!(c.is_some(), "{} is not a candidate of {}", v.key, p.member);
                let c = c.unwrap();
                // (1) strictly lower priority.
                prop_assert!(c.priority < priority && v.priority == c.priority);
                prop_assert_eq!(v.kind, c.kind);
                prop_assert!(v.pods > 0);
                prop_assert_eq!(v.pods as usize, v.taken.len());
                prop_assert!(v.taken.windows(2).all(|w| w[0] < w[1]));
                prop_assert!(v.taken.iter().all(|&t| t < c.pods.len()));
                match c.kind {
                    // (4) at most can_lose replicas.
                    VictimKind::Replicas { can_lose } => {
                        prop_assert_eq!(v.replicas, v.pods);
                        prop_assert!(v.replicas <= can_lose);
                    }
                    // (5) a gang whole.
                    VictimKind::Gang => {
                        prop_assert_eq!(v.taken.len(), c.pods.len());
                        prop_assert_eq!(v.replicas, v.pods);
                    }
                    VictimKind::Shards => {
                        prop_assert_eq!(v.shards.len(), u64::from(v.pods));
                        prop_assert_eq!(v.replicas, 0);
                    }
                }
            }
            // (8) quota stays one arithmetic: preemption never places beyond it (every
            // unit here is one pod).
            if let Some(q) = &quota {
                prop_assert!(
                    i64::from(p.units) <= q.total.hard.pods.unwrap_or(i64::MAX),
                    "{} pods placed past a quota of {:?}", p.units, q.total.hard.pods
                );
            }
            // (3) minimal, checked on views rebuilt from the evictions.
            let all: Vec<(&str, Vec<usize>)> =
                p.victims.iter().map(|v| (v.key.as_str(), v.taken.clone())).collect();
            prop_assert!(placed_with(&i, &p.member, &all) >= u64::from(p.units));
            for set in without_one_unit(&p.victims) {
                prop_assert!(
                    placed_with(&i, &p.member, &set) < u64::from(p.units),
                    "not minimal without one unit: {:?} of {:?}", set, p.victims
                );
            }
        }
    }
}

//! The pure part of a dry run (`POST /v1/submissions?dryRun=true`, `pinfed submit
//! --dry-run`): the members as the dry run plans on them (each member's available room
//! spread evenly over its nodes, from its MemberCluster status), the engine's decision
//! with a reason for each member, the quota effect, the objects each placed member would
//! run, and for a workload that exists on the hub what would move and a diff per member.
//! The shell (`server.rs`) runs every check of a submission first and never applies.

use std::collections::{BTreeMap, BTreeSet};

use super::wire;
use crate::api::federation::{ANNOTATION_DRAINING, FederatedQuota, MemberCluster};
use crate::api::kind::{PinterestKind, SliceShare};
use crate::api::quantity::Milli;
use crate::api::runtime_profile::RuntimeProfile;
use crate::api::workload::AnyWorkload;
use crate::expand::{ExpandInput, expand, select_profile, to_yaml_stream};
use crate::placement;
use crate::placement::from_member::{MAX_NODES_COUNTED, cluster_view, unbounded_node};
use crate::placement::model::{
    ClusterView, Demand, NodeRoom, PlacementPolicy, QuotaView, Resources, Strategy,
};
use crate::placement::quota::usage_of;
use crate::placement::{Decision, Outcome, Placement, PlanInput, plan};

/// What the reply says of its own accuracy.
pub const NOTE: &str = "The hub decides on each member's live per-node room. This dry run \
places on the per-node room the hub last wrote into each MemberCluster's status.nodePools \
(node labels, taints and each node's free resources, with the heartbeat), so it packs as the \
hub does; it does not see placements the hub has made since, nor, for a workload that exists, \
which nodes its own pods hold (their room is spread evenly over the member's nodes). A member \
without nodePools (over 500 nodes, or not yet written) has its status.available spread evenly \
over its status.nodes nodes, without labels or taints. Quota, selectors, cluster taints, \
weights, bounds and overrides are the hub's.";

/// Objects shown per member at most (a job set's Jobs can be many).
pub const MAX_OBJECTS: usize = 50;

/// Most cells of the line table of an exact diff (4 bytes each); a changed middle with
/// more is shown as removed and added whole.
const MAX_DIFF_CELLS: usize = 4_000_000;

fn draining(mc: &MemberCluster) -> bool {
    mc.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANNOTATION_DRAINING))
}

/// The members as the dry run plans on them: spec and standing as the hub reads them
/// (a draining member is not eligible), and [`status_nodes`] for room. `own` is what the
/// workload being replaced uses on each member now: its pods' room counts as free (the
/// hub places a workload without counting its own pods).
pub fn member_views(
    members: &[MemberCluster],
    own: &BTreeMap<String, Resources>,
) -> Vec<ClusterView> {
    let mut views: Vec<ClusterView> = members
        .iter()
        .map(|mc| {
            let name = mc.metadata.name.clone().unwrap_or_default();
            let ready = super::hub_view::is_ready(mc) && !draining(mc);
            cluster_view(mc, ready, status_nodes(mc, own.get(&name)))
        })
        .collect();
    views.sort_by(|a, b| a.name.cmp(&b.name));
    views
}

/// `total` spread over `count` nodes: node `i`'s part (the remainder to the first ones).
fn part(total: i128, count: usize, i: usize) -> i128 {
    let n = i128::try_from(count.max(1)).unwrap_or(1);
    let total = total.max(0);
    total / n + i128::from(i128::try_from(i).unwrap_or(i128::MAX) < total % n)
}

fn has_node_pools(mc: &MemberCluster) -> bool {
    mc.status.as_ref().is_some_and(|s| !s.node_pools.is_empty())
}

/// The member's nodes from its status: per node as the hub wrote them
/// (`status.nodePools`, the room placement sees, [`crate::placement::capacity::node_rooms`]),
/// else [`even_nodes`]. `own` (the room a workload being replaced holds there) is spread
/// evenly over the nodes: which nodes hold its pods is not in the status.
pub fn status_nodes(mc: &MemberCluster, own: Option<&Resources>) -> Vec<NodeRoom> {
    let pools = mc.status.as_ref().map(|s| s.node_pools.as_slice());
    let Some(pools) = pools.filter(|p| !p.is_empty()) else {
        return even_nodes(mc, own);
    };
    let mut nodes =
        crate::placement::capacity::node_rooms(crate::placement::capacity::from_pools(pools));
    if let Some(own) = own {
        let count = nodes.len();
        for (i, n) in nodes.iter_mut().enumerate() {
            n.free.cpu = Milli(n.free.cpu.0.saturating_add(part(own.cpu.0, count, i)));
            n.free.memory = Milli(n.free.memory.0.saturating_add(part(own.memory.0, count, i)));
            let units = |v: i64| i64::try_from(part(i128::from(v), count, i)).unwrap_or(0);
            n.free.gpu = n.free.gpu.saturating_add(units(own.gpu));
            n.free.pods = n.free.pods.saturating_add(units(own.pods));
        }
    }
    nodes
}

/// The member's nodes as its status counts them (`status.nodes`; one while it counts
/// none), its available room (`status.available`, plus `own`) spread evenly over them, no
/// labels or taints. A dimension the status does not give is unbounded.
pub fn even_nodes(mc: &MemberCluster, own: Option<&Resources>) -> Vec<NodeRoom> {
    let status = mc.status.as_ref();
    let counted = status.and_then(|s| s.nodes).unwrap_or(1);
    let count = usize::try_from(counted).unwrap_or(0).min(MAX_NODES_COUNTED);
    let available = status
        .and_then(|s| s.available.as_ref())
        .and_then(|a| a.parse().ok());
    let own = own.copied().unwrap_or(Resources::ZERO);
    let any = unbounded_node().free;
    (0..count)
        .map(|i| {
            let share = |amount: Option<Milli>, own: i128, unbounded: i128| match amount {
                Some(m) => part(m.0.saturating_add(own), count, i),
                None => unbounded,
            };
            let units = |amount: Option<Milli>, own: i64, unbounded: i64| -> i64 {
                match amount {
                    Some(m) => {
                        let total = (m.0 / 1000).saturating_add(i128::from(own));
                        i64::try_from(part(total, count, i)).unwrap_or(i64::MAX)
                    }
                    None => unbounded,
                }
            };
            let free = match &available {
                Some(a) => Resources {
                    cpu: Milli(share(a.cpu, own.cpu.0, any.cpu.0)),
                    memory: Milli(share(a.memory, own.memory.0, any.memory.0)),
                    gpu: units(a.gpus, own.gpu, any.gpu),
                    pods: units(a.pods, own.pods, any.pods),
                },
                None => any,
            };
            NodeRoom {
                name: format!("node-{i}"),
                labels: Default::default(),
                taints: Vec::new(),
                free,
            }
        })
        .collect()
}

/// A hub workload's demand and policy as the hub sizes it (its overrides applied against
/// `views`; rules that no longer hold leave the plain pod).
pub fn sizing(
    w: &AnyWorkload,
    profile: Option<&RuntimeProfile>,
    views: &[ClusterView],
) -> Option<(Demand, PlacementPolicy)> {
    crate::placement::from_workload::sized(w, profile, views)
}

/// Everything a dry run is built from: the admitted submission with what its checks
/// computed, and the hub as it is.
pub struct Input<'a> {
    pub workload: &'a AnyWorkload,
    pub team: &'a str,
    pub submitted_by: &'a str,
    pub artifact: Option<String>,
    pub profiles: &'a [RuntimeProfile],
    pub members: &'a [MemberCluster],
    /// Its demand and policy, overrides applied (as the submission's checks sized it).
    pub demand: &'a Demand,
    pub policy: &'a PlacementPolicy,
    /// What it requests in total (as the quota check counted it).
    pub requested: &'a Resources,
    /// The namespace's quotas and what its other workloads use (read live).
    pub quotas: &'a [FederatedQuota],
    pub used: Option<&'a Resources>,
    /// The workload it replaces, and the decision the hub recorded for it.
    pub existing: Option<&'a AnyWorkload>,
    pub current: Option<&'a Decision>,
    /// Plan from scratch, not from the current split (a rebalance).
    pub from_scratch: bool,
}

/// `a - b`, no dimension below zero (a quota's status may trail what a workload uses).
fn less(a: &Resources, b: &Resources) -> Resources {
    let d = a.saturating_sub(b);
    Resources {
        cpu: Milli(d.cpu.0.max(0)),
        memory: Milli(d.memory.0.max(0)),
        gpu: d.gpu.max(0),
        pods: d.pods.max(0),
    }
}

/// The engine's view of the namespace's quotas for the dry run: totals with the live
/// usage of the other workloads, per member what each quota's status records, less what
/// the workload being replaced uses there.
pub fn quota_view(
    quotas: &[FederatedQuota],
    used: Option<&Resources>,
    own: &BTreeMap<String, Resources>,
) -> Option<QuotaView> {
    let views = quotas
        .iter()
        .filter_map(|q| {
            let mut v = placement::quota::quota_view(q, None).ok()?;
            if let Some(u) = used {
                v.total.used = *u;
            }
            for (c, u) in &mut v.clusters {
                if let Some(o) = own.get(c) {
                    u.used = less(&u.used, o);
                }
            }
            Some(v)
        })
        .collect();
    placement::quota::tightest(views)
}

/// Runs the engine as the hub would and assembles the reply.
pub fn build(input: &Input<'_>) -> wire::DryRun {
    let w = input.workload.as_ref();
    let profile = select_profile(input.profiles, w.runtime_version()).ok();
    // The workload being replaced: what it uses on each member now.
    let label_views = member_views(input.members, &BTreeMap::new());
    let before = input.existing.and_then(|old| {
        let profile = select_profile(input.profiles, old.as_ref().runtime_version()).ok();
        let (demand, _) = sizing(old, profile, &label_views)?;
        Some((old, demand))
    });
    let own: BTreeMap<String, Resources> = match (&before, input.current) {
        (Some((_, demand)), Some(d)) => usage_of(d, demand),
        _ => BTreeMap::new(),
    };
    let views = member_views(input.members, &own);
    let quota = quota_view(input.quotas, input.used, &own);
    // Node selectors narrow nodes only where the status lists them with their labels: a
    // member planned on even nodes (no labels) would otherwise match no selector.
    let demand = if input.members.iter().all(has_node_pools) {
        input.demand.clone()
    } else {
        super::quota::without_node_selectors(input.demand)
    };
    let outcome = plan(&PlanInput {
        clusters: &views,
        policy: input.policy,
        demand: &demand,
        quota: quota.as_ref(),
        current: input.current.filter(|_| !input.from_scratch),
    });
    let adds = usage_of(&outcome.decision, input.demand);
    let placements = outcome
        .decision
        .placements
        .iter()
        .map(|p| {
            share_entry(
                p,
                &adds,
                share_reason(
                    input,
                    &outcome,
                    views.iter().find(|v| v.name == p.cluster),
                    p,
                ),
            )
        })
        .collect();
    let current = match (&before, input.current) {
        (Some((_, demand)), Some(d)) => Some(
            d.placements
                .iter()
                .map(|p| share_entry(p, &usage_of(d, demand), "the hub's decision now".into()))
                .collect(),
        ),
        _ => None,
    };
    let moves = match input.current {
        Some(d) if input.existing.is_some() => moves(d, &outcome.decision),
        _ => Vec::new(),
    };
    let now_total = (before.is_some() && input.current.is_some_and(|d| !d.placements.is_empty()))
        .then(|| {
            own.values()
                .fold(Resources::ZERO, |a, r| a.saturating_add(r))
        });
    let quotas = quota_effects(
        input.quotas,
        input.used.copied().unwrap_or(Resources::ZERO),
        input.requested,
        now_total.as_ref(),
        &adds,
        &own,
    );
    // What each member would run, and what each runs now.
    let mut clusters: BTreeSet<&str> = outcome.decision.clusters().into_iter().collect();
    if let Some(d) = input.current.filter(|_| input.existing.is_some()) {
        clusters.extend(d.clusters());
    }
    let members = clusters
        .into_iter()
        .map(|c| {
            let view = views.iter().find(|v| v.name == c);
            let after = outcome
                .decision
                .placements
                .iter()
                .find(|p| p.cluster == c)
                .map(|p| objects_for(input.workload, p, &outcome.decision, profile, view));
            let now = before
                .as_ref()
                .zip(input.current)
                .and_then(|((old, _), d)| {
                    let p = d.placements.iter().find(|p| p.cluster == c)?;
                    let profile =
                        select_profile(input.profiles, old.as_ref().runtime_version()).ok();
                    Some(objects_for(old, p, d, profile, view))
                });
            preview(c, after, now, input.existing.is_some())
        })
        .collect();
    wire::DryRun {
        kind: input.workload.kind(),
        namespace: w.namespace().unwrap_or_default().to_string(),
        name: w.name().to_string(),
        team: input.team.to_string(),
        submitted_by: input.submitted_by.to_string(),
        artifact: input.artifact.clone(),
        exists: input.existing.is_some(),
        strategy: strategy_name(outcome.decision.strategy).into(),
        requested: input.requested.into(),
        placements,
        excluded: exclusions(input, &outcome, &views),
        unplaced: outcome.decision.unplaced,
        cause: outcome.cause.map(|c| c.as_str().to_string()),
        reason: outcome.decision.reason.clone(),
        warnings: outcome.warnings.clone(),
        quotas,
        current,
        moves,
        members,
        note: NOTE.into(),
    }
}

fn strategy_name(s: Strategy) -> &'static str {
    match s {
        Strategy::Divided => "Divided",
        Strategy::Duplicated => "Duplicated",
        Strategy::Single => "Single",
    }
}

fn share_entry(
    p: &Placement,
    usage: &BTreeMap<String, Resources>,
    reason: String,
) -> wire::DryRunShare {
    let r = usage.get(&p.cluster).copied().unwrap_or(Resources::ZERO);
    wire::DryRunShare {
        cluster: p.cluster.clone(),
        replicas: p.replicas,
        shards: p.shards.clone(),
        pods: u64::try_from(r.pods).unwrap_or(0),
        requests: (&r).into(),
        reason,
    }
}

/// The engine's own account of member `cluster` (`Outcome.explained`: the numbers the
/// decision was made with), as the hub records it.
fn explained<'o>(outcome: &'o Outcome, cluster: &str) -> &'o str {
    outcome
        .explained
        .iter()
        .find(|m| m.cluster == cluster)
        .map_or("", |m| m.why.as_str())
}

/// Why member `p` got its share: the engine's account, what the strategy made of it, and
/// the override rules that select the member.
fn share_reason(
    input: &Input<'_>,
    outcome: &Outcome,
    view: Option<&ClusterView>,
    p: &Placement,
) -> String {
    let current = input
        .current
        .and_then(|d| d.shares().get(&p.cluster).copied());
    let share = outcome
        .decision
        .shares()
        .get(&p.cluster)
        .copied()
        .unwrap_or(0);
    let mut parts = Vec::new();
    match outcome.decision.strategy {
        Strategy::Single if current.is_some() => {
            parts.push("Single: the member that runs it now keeps it".to_string());
        }
        Strategy::Single => parts.push("Single: the best weight × room".to_string()),
        Strategy::Duplicated => parts.push("Duplicated: a copy on every eligible member".into()),
        Strategy::Divided => {}
    }
    parts.push(explained(outcome, &p.cluster).to_string());
    if outcome.decision.strategy == Strategy::Divided && current == Some(share) {
        parts.push("unchanged from the current split".into());
    }
    let rules: Vec<&str> = input
        .workload
        .as_ref()
        .overrides()
        .iter()
        .filter(|r| view.is_some_and(|v| selects(r, v)))
        .map(|r| r.name.as_str())
        .collect();
    if !rules.is_empty() {
        parts.push(format!("overrides {}", rules.join(", ")));
    }
    parts.retain(|p| !p.is_empty());
    parts.join("; ")
}

fn selects(rule: &crate::api::overrides::Override, view: &ClusterView) -> bool {
    let labels = view.selector_labels();
    crate::overrides::selects(
        rule,
        &crate::overrides::Member {
            name: &view.name,
            region: view.region.as_deref(),
            zone: view.zone.as_deref(),
            labels: &labels,
        },
    )
}

/// Every member without a share, and why: the engine's exclusion (a draining member
/// said so), or for an eligible member the engine's account of why it got none.
fn exclusions(
    input: &Input<'_>,
    outcome: &Outcome,
    views: &[ClusterView],
) -> Vec<wire::DryRunExclusion> {
    let placed: BTreeSet<&str> = outcome.decision.clusters().into_iter().collect();
    let excluded: BTreeMap<&str, &str> = outcome
        .excluded
        .iter()
        .map(|e| (e.cluster.as_str(), e.why.as_str()))
        .collect();
    let draining: BTreeSet<String> = input
        .members
        .iter()
        .filter(|m| draining(m))
        .filter_map(|m| m.metadata.name.clone())
        .collect();
    let kept = outcome.decision.strategy == Strategy::Divided
        && input.current.is_some_and(|d| !d.placements.is_empty());
    views
        .iter()
        .filter(|v| !placed.contains(v.name.as_str()))
        .map(|v| {
            let why = match excluded.get(v.name.as_str()) {
                Some(&"not ready") if draining.contains(&v.name) => {
                    "draining: no new shares (being drained or unjoined)".to_string()
                }
                Some(why) => why.to_string(),
                None => {
                    let why = explained(outcome, &v.name);
                    let mut s = format!("eligible, no share: {why}");
                    if kept && why.ends_with("the others took the whole count") {
                        s.push_str(
                            " (the current split holds: the hub moves nothing it need not move)",
                        );
                    }
                    s
                }
            };
            wire::DryRunExclusion {
                cluster: v.name.clone(),
                why,
            }
        })
        .collect()
}

/// A share as people read it; `-` for none. A whole copy's pod count is left out (the
/// dry run counts a daemon's nodes without their labels).
pub fn share_text(p: Option<&Placement>) -> String {
    match p {
        None => "-".into(),
        Some(p) => match (&p.replicas, &p.shards) {
            (Some(n), _) => format!("{n} replicas"),
            (None, Some(s)) if s.is_empty() => "no shards".into(),
            (None, Some(s)) => format!("shards {s}"),
            (None, None) => "whole".into(),
        },
    }
}

/// The members whose share differs between `before` and `after`.
pub fn moves(before: &Decision, after: &Decision) -> Vec<wire::DryRunMove> {
    let find = |d: &Decision, c: &str| d.placements.iter().find(|p| p.cluster == c).cloned();
    let clusters: BTreeSet<&str> = before
        .clusters()
        .into_iter()
        .chain(after.clusters())
        .collect();
    clusters
        .into_iter()
        .filter_map(|c| {
            let (b, a) = (
                share_text(find(before, c).as_ref()),
                share_text(find(after, c).as_ref()),
            );
            (a != b).then(|| wire::DryRunMove {
                cluster: c.to_string(),
                before: b,
                after: a,
            })
        })
        .collect()
}

/// One dimension of a quota: its name, the amount in millis of a `Resources`, of a
/// quota's amounts, and how it is shown.
struct Dim {
    name: &'static str,
    of: fn(&Resources) -> i128,
    hard: fn(&crate::api::federation::Amounts) -> Option<i128>,
    show: fn(i128) -> String,
}

const DIMS: [Dim; 4] = [
    Dim {
        name: "cpu",
        of: |r| r.cpu.0,
        hard: |a| a.cpu.map(|m| m.0),
        show: |m| Milli(m).format_cpu(),
    },
    Dim {
        name: "memory",
        of: |r| r.memory.0,
        hard: |a| a.memory.map(|m| m.0),
        show: |m| Milli(m).format_memory(),
    },
    Dim {
        name: "gpus",
        of: |r| i128::from(r.gpu) * 1000,
        hard: |a| a.gpus.map(|m| m.0),
        show: |m| Milli(m).units().to_string(),
    },
    Dim {
        name: "pods",
        of: |r| i128::from(r.pods) * 1000,
        hard: |a| a.pods.map(|m| m.0),
        show: |m| Milli(m).units().to_string(),
    },
];

/// What the workload does to each quota: per dimension it limits, in total (what it
/// would count, what it counts now, what the others use, the limit) and on each member it
/// would run on or the quota caps.
pub fn quota_effects(
    quotas: &[FederatedQuota],
    used: Resources,
    requested: &Resources,
    now: Option<&Resources>,
    adds: &BTreeMap<String, Resources>,
    own: &BTreeMap<String, Resources>,
) -> Vec<wire::QuotaEffect> {
    quotas
        .iter()
        .map(|q| {
            let name = format!(
                "{}/{}",
                q.metadata.namespace.as_deref().unwrap_or_default(),
                q.metadata.name.as_deref().unwrap_or_default()
            );
            let mut rows = Vec::new();
            let hard = match q.spec.hard.parse() {
                Ok(h) => h,
                Err(e) => {
                    rows.push(wire::QuotaEffectRow {
                        scope: "total".into(),
                        resource: "spec.hard".into(),
                        adds: "-".into(),
                        now: None,
                        used: "-".into(),
                        hard: e.to_string(),
                        fits: false,
                    });
                    return wire::QuotaEffect { quota: name, rows };
                }
            };
            for d in &DIMS {
                let Some(h) = (d.hard)(&hard) else { continue };
                let (a, u) = ((d.of)(requested), (d.of)(&used));
                rows.push(wire::QuotaEffectRow {
                    scope: "total".into(),
                    resource: d.name.into(),
                    adds: (d.show)(a),
                    now: now.map(|n| (d.show)((d.of)(n))),
                    used: (d.show)(u),
                    hard: (d.show)(h),
                    fits: a == 0 || u.saturating_add(a) <= h,
                });
            }
            let status = q.status.clone().unwrap_or_default();
            let clusters: BTreeSet<&String> =
                q.spec.per_cluster.keys().chain(adds.keys()).collect();
            for c in clusters {
                let cap = q.spec.per_cluster.get(c).map(|a| a.parse());
                let cap = match cap {
                    Some(Err(e)) => {
                        rows.push(wire::QuotaEffectRow {
                            scope: c.clone(),
                            resource: format!("spec.perCluster.{c}"),
                            adds: "-".into(),
                            now: None,
                            used: "-".into(),
                            hard: e.to_string(),
                            fits: false,
                        });
                        continue;
                    }
                    Some(Ok(a)) => Some(a),
                    None => None,
                };
                let recorded = status
                    .used_per_cluster
                    .get(c)
                    .and_then(|a| a.parse().ok())
                    .map(|a| placement::quota::resources(&a))
                    .unwrap_or(Resources::ZERO);
                let others = less(&recorded, own.get(c).unwrap_or(&Resources::ZERO));
                let here = adds.get(c).copied().unwrap_or(Resources::ZERO);
                for d in &DIMS {
                    let h = cap.as_ref().and_then(|a| (d.hard)(a));
                    // A member without a cap shows the dimensions the total limits.
                    if h.is_none() && (cap.is_some() || (d.hard)(&hard).is_none()) {
                        continue;
                    }
                    let (a, u) = ((d.of)(&here), (d.of)(&others));
                    rows.push(wire::QuotaEffectRow {
                        scope: c.clone(),
                        resource: d.name.into(),
                        adds: (d.show)(a),
                        now: now.map(|_| (d.show)((d.of)(own.get(c).unwrap_or(&Resources::ZERO)))),
                        used: (d.show)(u),
                        hard: h.map_or_else(|| "-".into(), d.show),
                        fits: h.is_none_or(|h| a == 0 || u.saturating_add(a) <= h),
                    });
                }
            }
            wire::QuotaEffect { quota: name, rows }
        })
        .collect()
}

/// The slice a member would get for share `p` of `decision`: the workload with the share
/// written in, server metadata and status dropped, the rules that select the member
/// resolved for it. Returns the names of those rules too.
pub fn member_slice(
    w: &AnyWorkload,
    p: &Placement,
    decision: &Decision,
    view: Option<&ClusterView>,
) -> Result<(AnyWorkload, Vec<String>), String> {
    let mut slice = w.clone();
    let parallelism = w.as_ref().job_set().map(|j| {
        j.spec.parallelism.map(|n| {
            let held: Vec<u64> = decision
                .placements
                .iter()
                .map(|x| {
                    x.shards
                        .as_deref()
                        .and_then(|s| crate::api::ranges::RangeSet::parse(s).ok())
                        .map_or(0, |r| r.len())
                })
                .collect();
            let at = decision
                .placements
                .iter()
                .position(|x| x.cluster == p.cluster)
                .unwrap_or(0);
            let shares =
                crate::placement::parallelism_shares(u32::try_from(n.max(0)).unwrap_or(0), &held);
            i32::try_from(shares.get(at).copied().unwrap_or(0)).unwrap_or(i32::MAX)
        })
    });
    let share = SliceShare {
        replicas: p.replicas,
        shards: p.shards.clone(),
        parallelism,
        released: None,
    };
    fn settle<K: PinterestKind>(k: &mut K, share: &SliceShare) {
        let m = k.meta_mut();
        *m = kube::api::ObjectMeta {
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            labels: m.labels.clone(),
            annotations: m.annotations.clone(),
            ..Default::default()
        };
        *k.status_mut() = None;
        k.assign_share(share);
    }
    crate::on_any_workload!(&mut slice, x => settle(x, &share));
    let labels = view.map(ClusterView::selector_labels).unwrap_or_default();
    let member = crate::overrides::Member {
        name: &p.cluster,
        region: view.and_then(|v| v.region.as_deref()),
        zone: view.and_then(|v| v.zone.as_deref()),
        labels: &labels,
    };
    let resolved =
        crate::overrides::resolve(w.as_ref().overrides(), &member).map_err(|e| e.to_string())?;
    let names = resolved.iter().map(|r| r.name.clone()).collect();
    slice.set_overrides(resolved);
    Ok((slice, names))
}

/// What a member runs of share `p`: the rules that select it and its objects.
type Objects = Result<(Vec<String>, Vec<kube::api::DynamicObject>), String>;

fn objects_for(
    w: &AnyWorkload,
    p: &Placement,
    decision: &Decision,
    profile: Option<&RuntimeProfile>,
    view: Option<&ClusterView>,
) -> Objects {
    let (slice, rules) = member_slice(w, p, decision, view)?;
    // A job set's Jobs: those its member would start first (its part of the parallelism,
    // lowest pending shards), at most MAX_OBJECTS of them.
    let first = match slice.as_ref().job_set() {
        Some(j) => {
            let pending = crate::expand::pending_shards(j).map_err(|e| e.to_string())?;
            let parallelism = j.spec.parallelism.map(|n| u32::try_from(n).unwrap_or(0));
            let admitted = crate::expand::admit_shards(
                parallelism,
                &pending,
                &crate::api::ranges::RangeSet::default(),
            );
            Some(crate::api::ranges::RangeSet::from_indices(
                admitted.iter().take(MAX_OBJECTS),
            ))
        }
        _ => None,
    };
    let input = ExpandInput {
        profile,
        cluster: Some(&p.cluster),
        admitted_shards: first.as_ref(),
        ..ExpandInput::new(slice.as_ref())
    };
    let objects = expand(&input).map_err(|e| e.to_string())?;
    Ok((rules, objects))
}

fn yaml_of(objects: &[kube::api::DynamicObject]) -> String {
    to_yaml_stream(&objects[..objects.len().min(MAX_OBJECTS)])
}

/// One member's preview: its objects after, and against now a diff (`existing`).
fn preview(
    cluster: &str,
    after: Option<Objects>,
    now: Option<Objects>,
    existing: bool,
) -> wire::MemberPreview {
    let mut out = wire::MemberPreview {
        cluster: cluster.to_string(),
        ..Default::default()
    };
    let after_yaml = match after {
        Some(Ok((rules, objects))) => {
            out.overrides = rules;
            out.object_count = objects.len();
            out.objects = yaml_of(&objects);
            out.objects.clone()
        }
        Some(Err(e)) => {
            out.error = Some(e);
            return out;
        }
        None => String::new(),
    };
    if existing {
        let now_yaml = match now {
            Some(Ok((_, objects))) => yaml_of(&objects),
            Some(Err(e)) => {
                out.error = Some(format!("its objects now: {e}"));
                return out;
            }
            None => String::new(),
        };
        out.diff = Some(unified_diff(
            &now_yaml,
            &after_yaml,
            &format!("{cluster} (now)"),
            &format!("{cluster} (after)"),
        ));
    }
    out
}

/// One line of an edit script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Edit {
    Same(usize, usize),
    Del(usize),
    Add(usize),
}

/// The edit script from `a` to `b`: the longest common subsequence of lines (common
/// prefix and suffix first; a middle too big to compare is replaced whole).
fn edits(a: &[&str], b: &[&str]) -> Vec<Edit> {
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..]
        .iter()
        .rev()
        .zip(b[pre..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (am, bm) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    let mut out: Vec<Edit> = (0..pre).map(|i| Edit::Same(i, i)).collect();
    if (am.len() + 1).saturating_mul(bm.len() + 1) > MAX_DIFF_CELLS {
        out.extend((0..am.len()).map(|i| Edit::Del(pre + i)));
        out.extend((0..bm.len()).map(|j| Edit::Add(pre + j)));
    } else {
        // lcs[i][j]: the longest common subsequence of am[i..] and bm[j..].
        let (n, m) = (am.len(), bm.len());
        let mut lcs = vec![0u32; (n + 1) * (m + 1)];
        let at = |i: usize, j: usize| i * (m + 1) + j;
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lcs[at(i, j)] = if am[i] == bm[j] {
                    lcs[at(i + 1, j + 1)] + 1
                } else {
                    lcs[at(i + 1, j)].max(lcs[at(i, j + 1)])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && am[i] == bm[j] {
                out.push(Edit::Same(pre + i, pre + j));
                i += 1;
                j += 1;
            } else if i < n && (j == m || lcs[at(i + 1, j)] >= lcs[at(i, j + 1)]) {
                // Removed lines before added ones.
                out.push(Edit::Del(pre + i));
                i += 1;
            } else {
                out.push(Edit::Add(pre + j));
                j += 1;
            }
        }
    }
    let (a0, b0) = (a.len() - suf, b.len() - suf);
    out.extend((0..suf).map(|k| Edit::Same(a0 + k, b0 + k)));
    out
}

/// Lines of context around each change.
const CONTEXT: usize = 3;

/// A unified diff of `a` against `b` (`---`/`+++` headers named `from`/`to`, hunks with
/// three lines of context); empty when they are equal.
pub fn unified_diff(a: &str, b: &str, from: &str, to: &str) -> String {
    use std::fmt::Write as _;
    let (al, bl): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let script = edits(&al, &bl);
    let changed: Vec<usize> = script
        .iter()
        .enumerate()
        .filter(|(_, e)| !matches!(e, Edit::Same(..)))
        .map(|(i, _)| i)
        .collect();
    if changed.is_empty() {
        return String::new();
    }
    // Hunks: runs of the script around changes, joined when their context meets.
    let mut hunks: Vec<(usize, usize)> = Vec::new();
    for &c in &changed {
        let (start, end) = (
            c.saturating_sub(CONTEXT),
            (c + CONTEXT + 1).min(script.len()),
        );
        match hunks.last_mut() {
            Some(h) if start <= h.1 => h.1 = h.1.max(end),
            _ => hunks.push((start, end)),
        }
    }
    let mut out = format!("--- {from}\n+++ {to}\n");
    for (start, end) in hunks {
        let part = &script[start..end];
        // Where the hunk starts on each side (1-based), and its lengths.
        let a_start = script[..start]
            .iter()
            .filter(|e| !matches!(e, Edit::Add(_)))
            .count();
        let b_start = script[..start]
            .iter()
            .filter(|e| !matches!(e, Edit::Del(_)))
            .count();
        let a_len = part.iter().filter(|e| !matches!(e, Edit::Add(_))).count();
        let b_len = part.iter().filter(|e| !matches!(e, Edit::Del(_))).count();
        let pos = |s: usize, l: usize| if l == 0 { s } else { s + 1 };
        let _ = writeln!(
            out,
            "@@ -{},{a_len} +{},{b_len} @@",
            pos(a_start, a_len),
            pos(b_start, b_len)
        );
        for e in part {
            let _ = match e {
                Edit::Same(i, _) => writeln!(out, " {}", al[*i]),
                Edit::Del(i) => writeln!(out, "-{}", al[*i]),
                Edit::Add(j) => writeln!(out, "+{}", bl[*j]),
            };
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::parse::{Document, parse_one};

    fn member(name: &str, zone: &str, extra: serde_json::Value) -> MemberCluster {
        let mut v = json!({
            "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": name},
            "spec": {"region": "us-east-1", "zone": zone, "labels": {"tier": "prod"}},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "Heartbeat",
                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "nodes": 4,
                "available": {"cpu": "16", "memory": "64Gi", "pods": "400", "gpus": "0"},
            },
        });
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn members() -> Vec<MemberCluster> {
        vec![
            member(
                "use1a",
                "us-east-1a",
                json!({"status": {"available": {"gpus": "8"}}}),
            ),
            member("use1b", "us-east-1b", json!({})),
            member(
                "use1c",
                "us-east-1c",
                json!({"spec": {"labels": {"accelerators": "gpu"},
                    "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}),
            ),
        ]
    }

    /// A split as (member, replicas), in member order.
    type Split = Vec<(String, Option<u32>)>;

    /// For a new workload `w`: the split the engine decides on `views` and the one the dry
    /// run decides on the members' statuses `ms`, with each one's unplaced replicas.
    fn engine_and_dry_run(
        w: &AnyWorkload,
        ms: &[MemberCluster],
        views: &[ClusterView],
    ) -> ((Split, u32), (Split, u32), wire::DryRun) {
        let (demand, policy) = sizing(w, None, views).unwrap();
        let engine = plan(&PlanInput {
            clusters: views,
            policy: &policy,
            demand: &demand,
            quota: None,
            current: None,
        });
        let requested = super::super::quota::requested(&demand, 1);
        let r = build(&Input {
            workload: w,
            team: "ads",
            submitted_by: "a",
            artifact: None,
            profiles: &[],
            members: ms,
            demand: &demand,
            policy: &policy,
            requested: &requested,
            quotas: &[],
            used: None,
            existing: None,
            current: None,
            from_scratch: false,
        });
        let want: Split = engine
            .decision
            .placements
            .iter()
            .map(|p| (p.cluster.clone(), p.replicas))
            .collect();
        let got: Split = r
            .placements
            .iter()
            .map(|p| (p.cluster.clone(), p.replicas))
            .collect();
        ((want, engine.decision.unplaced), (got, r.unplaced), r)
    }

    fn workload(text: &str) -> AnyWorkload {
        match parse_one(text).unwrap() {
            Document::Workload(w) => w,
            _ => panic!("not a workload"),
        }
    }

    fn service(image: &str, replicas: u32) -> AnyWorkload {
        workload(&format!(
            r#"
apiVersion: compute.pinterest.com/v1alpha1
kind: PinterestService
metadata: {{name: web, namespace: ads}}
spec:
  owner: {{team: ads, contact: ads@example.com}}
  replicas: {replicas}
  template:
    spec:
      containers:
        - {{name: app, image: "{image}", resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}}}
  overrides:
    - name: mirror
      clusterSelector: {{matchLabels: {{topology.kubernetes.io/zone: us-east-1a}}}}
      image: {{registry: "mirror.{{{{zone}}}}.example"}}
"#
        ))
    }

    /// The dry run of `w` as the shell builds it (the submission's sizing).
    fn dry(
        w: &AnyWorkload,
        quotas: &[FederatedQuota],
        used: Option<&Resources>,
        existing: Option<&AnyWorkload>,
        current: Option<&Decision>,
    ) -> wire::DryRun {
        dry_from(w, quotas, used, existing, current, false)
    }

    fn dry_from(
        w: &AnyWorkload,
        quotas: &[FederatedQuota],
        used: Option<&Resources>,
        existing: Option<&AnyWorkload>,
        current: Option<&Decision>,
        from_scratch: bool,
    ) -> wire::DryRun {
        let members = members();
        let views = member_views(&members, &BTreeMap::new());
        let (demand, policy) = sizing(w, None, &views).unwrap();
        let requested = super::super::quota::requested(&demand, 1);
        build(&Input {
            workload: w,
            team: "ads",
            submitted_by: "alice",
            artifact: None,
            profiles: &[],
            members: &members,
            demand: &demand,
            policy: &policy,
            requested: &requested,
            quotas,
            used,
            existing,
            current,
            from_scratch,
        })
    }

    #[test]
    fn a_rebalance_plans_from_scratch_where_a_submission_keeps_the_current_split() {
        let w = service("registry.example/app:1", 4);
        let current = Decision {
            strategy: Strategy::Divided,
            placements: vec![Placement {
                cluster: "use1b".into(),
                replicas: Some(4),
                ..Default::default()
            }],
            unplaced: 0,
            reason: None,
        };
        let kept = dry_from(&w, &[], None, Some(&w), Some(&current), false);
        assert!(kept.moves.is_empty(), "sticky: {:?}", kept.moves);
        let fresh = dry_from(&w, &[], None, Some(&w), Some(&current), true);
        let shares: Vec<(&str, Option<u32>)> = fresh
            .placements
            .iter()
            .map(|p| (p.cluster.as_str(), p.replicas))
            .collect();
        assert_eq!(shares, [("use1a", Some(2)), ("use1b", Some(2))]);
        let moves: Vec<(&str, &str, &str)> = fresh
            .moves
            .iter()
            .map(|m| (m.cluster.as_str(), m.before.as_str(), m.after.as_str()))
            .collect();
        assert_eq!(
            moves,
            [
                ("use1a", "-", "2 replicas"),
                ("use1b", "4 replicas", "2 replicas")
            ]
        );
    }

    /// A dry run of an existing service with a quota (every field of the reply set),
    /// for the test that the client decodes it.
    pub(crate) fn sample_reply() -> wire::DryRun {
        let q: FederatedQuota = serde_json::from_value(json!({
            "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "FederatedQuota",
            "metadata": {"name": "team", "namespace": "ads"},
            "spec": {"hard": {"cpu": "20"}, "perCluster": {"use1a": {"pods": "2"}}},
        }))
        .unwrap();
        let current = Decision {
            strategy: Strategy::Divided,
            placements: vec![Placement {
                cluster: "use1b".into(),
                replicas: Some(4),
                ..Default::default()
            }],
            unplaced: 0,
            reason: None,
        };
        dry(
            &service("registry.example/app:2", 6),
            &[q],
            Some(&Resources::ZERO),
            Some(&service("registry.example/app:1", 4)),
            Some(&current),
        )
    }

    #[test]
    fn a_members_available_room_is_spread_over_its_nodes_with_its_own_pods_added_back() {
        let m = member(
            "a",
            "z",
            json!({"status": {"nodes": 3,
            "available": {"cpu": "10", "memory": "3Gi", "pods": "10", "gpus": "4"}}}),
        );
        let nodes = even_nodes(&m, None);
        assert_eq!(nodes.len(), 3);
        let cpu: Vec<i128> = nodes.iter().map(|n| n.free.cpu.0).collect();
        assert_eq!(
            cpu,
            vec![3334, 3333, 3333],
            "the remainder to the first nodes"
        );
        let pods: Vec<i64> = nodes.iter().map(|n| n.free.pods).collect();
        assert_eq!(pods, vec![4, 3, 3]);
        assert_eq!(nodes.iter().map(|n| n.free.gpu).sum::<i64>(), 4);
        assert!(
            nodes
                .iter()
                .all(|n| n.labels.is_empty() && n.taints.is_empty())
        );
        // What the workload being replaced uses there counts as free.
        let own = Resources::pod(Milli(2000), Milli(0), 0);
        let cpu: i128 = even_nodes(&m, Some(&own))
            .iter()
            .map(|n| n.free.cpu.0)
            .sum();
        assert_eq!(cpu, 12000);
        // Over-allocated: no room, not negative room.
        let over = member(
            "b",
            "z",
            json!({"status": {"nodes": 2,
            "available": {"cpu": "-1", "memory": "1Gi", "pods": "2", "gpus": "0"}}}),
        );
        assert!(even_nodes(&over, None).iter().all(|n| n.free.cpu.0 == 0));
        // No status yet: one node with room for anything; no nodes: none.
        let bare: MemberCluster = serde_json::from_value(json!({
            "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": "c"}, "spec": {}}))
        .unwrap();
        assert_eq!(
            even_nodes(&bare, None),
            vec![NodeRoom {
                name: "node-0".into(),
                ..unbounded_node()
            }]
        );
        let empty = member("d", "z", json!({"status": {"nodes": 0}}));
        assert!(even_nodes(&empty, None).is_empty());
    }

    #[test]
    fn a_draining_member_is_excluded_as_draining() {
        let mut ms = members();
        ms[1].metadata.annotations =
            Some([(ANNOTATION_DRAINING.to_string(), "true".to_string())].into());
        let views = member_views(&ms, &BTreeMap::new());
        assert!(!views[1].ready && views[0].ready);
        let w = service("registry.example/app:1", 4);
        let (demand, policy) = sizing(&w, None, &views).unwrap();
        let requested = super::super::quota::requested(&demand, 1);
        let r = build(&Input {
            workload: &w,
            team: "ads",
            submitted_by: "alice",
            artifact: None,
            profiles: &[],
            members: &ms,
            demand: &demand,
            policy: &policy,
            requested: &requested,
            quotas: &[],
            used: None,
            existing: None,
            current: None,
            from_scratch: false,
        });
        let b = r.excluded.iter().find(|e| e.cluster == "use1b").unwrap();
        assert!(b.why.starts_with("draining"), "{b:?}");
    }

    #[test]
    fn a_new_service_gets_its_split_with_reasons_and_the_override_only_where_it_selects() {
        let w = service("registry.example/app:1", 4);
        let r = dry(&w, &[], None, None, None);
        assert_eq!(
            (r.kind.as_str(), r.name.as_str(), r.team.as_str()),
            ("PinterestService", "web", "ads")
        );
        assert!(!r.exists && r.current.is_none() && r.moves.is_empty());
        assert_eq!(r.strategy, "Divided");
        assert_eq!(r.unplaced, 0);
        // use1c's cluster taint is not tolerated: excluded with the engine's reason.
        let split: Vec<(&str, Option<u32>)> = r
            .placements
            .iter()
            .map(|p| (p.cluster.as_str(), p.replicas))
            .collect();
        assert_eq!(split, vec![("use1a", Some(2)), ("use1b", Some(2))]);
        for p in &r.placements {
            assert!(
                p.reason
                    .starts_with("weight 1, room 104 pods of cpu 150m, memory 224Mi → 2 replicas"),
                "{p:?}"
            );
            assert_eq!(p.pods, 2);
        }
        assert!(
            r.placements[0].reason.contains("overrides mirror"),
            "{:?}",
            r.placements[0]
        );
        assert!(!r.placements[1].reason.contains("overrides"));
        assert_eq!(r.excluded.len(), 1);
        assert_eq!(r.excluded[0].cluster, "use1c");
        assert!(
            r.excluded[0].why.contains("taint dedicated=gpu:NoSchedule"),
            "{:?}",
            r.excluded
        );
        // Objects after overrides: the mirror only in the zone it selects.
        assert_eq!(r.members.len(), 2);
        let a = &r.members[0];
        assert_eq!(
            (a.cluster.as_str(), a.overrides.clone()),
            ("use1a", vec!["mirror".to_string()])
        );
        assert!(
            a.objects.contains("image: mirror.us-east-1a.example/app:1"),
            "{}",
            a.objects
        );
        assert!(a.objects.contains("kind: Deployment") && a.objects.contains("replicas: 2"));
        let b = &r.members[1];
        assert!(b.overrides.is_empty());
        assert!(
            b.objects.contains("image: registry.example/app:1"),
            "{}",
            b.objects
        );
        assert!(!b.objects.contains("mirror."));
        assert!(
            a.diff.is_none() && a.error.is_none(),
            "a new workload has no diff"
        );
        assert!(r.note.contains("status.available"));
    }

    #[test]
    fn an_existing_workload_shows_no_move_for_an_image_change_and_a_diff_per_member() {
        let old = service("registry.example/app:1", 4);
        let current = Decision {
            strategy: Strategy::Divided,
            placements: vec![
                Placement {
                    cluster: "use1a".into(),
                    replicas: Some(1),
                    ..Default::default()
                },
                Placement {
                    cluster: "use1b".into(),
                    replicas: Some(3),
                    ..Default::default()
                },
            ],
            unplaced: 0,
            reason: None,
        };
        let new = service("registry.example/app:2", 4);
        let r = dry(&new, &[], None, Some(&old), Some(&current));
        assert!(r.exists);
        assert!(
            r.moves.is_empty(),
            "the current split is kept: {:?}",
            r.moves
        );
        let split: Vec<Option<u32>> = r.placements.iter().map(|p| p.replicas).collect();
        assert_eq!(split, vec![Some(1), Some(3)]);
        assert!(
            r.placements[1]
                .reason
                .contains("unchanged from the current split")
        );
        assert_eq!(r.current.as_ref().map(Vec::len), Some(2));
        for m in &r.members {
            let diff = m.diff.as_deref().unwrap();
            assert!(diff.starts_with(&format!(
                "--- {} (now)\n+++ {} (after)\n",
                m.cluster, m.cluster
            )));
            assert!(
                diff.lines()
                    .any(|l| l.starts_with('+') && l.contains("app:2")),
                "{diff}"
            );
            assert!(
                diff.lines()
                    .any(|l| l.starts_with('-') && l.contains("app:1")),
                "{diff}"
            );
            assert!(
                !diff
                    .lines()
                    .any(|l| l.starts_with(['-', '+']) && l.contains("replicas:"))
            );
        }
        // More replicas: the new ones are placed, nothing taken away.
        let grown = service("registry.example/app:1", 6);
        let r = dry(&grown, &[], None, Some(&old), Some(&current));
        assert!(!r.moves.is_empty());
        for m in &r.moves {
            assert!(
                m.before.ends_with("replicas") && m.after.ends_with("replicas"),
                "{m:?}"
            );
        }
        let diff = r
            .members
            .iter()
            .filter_map(|m| m.diff.as_deref())
            .collect::<String>();
        assert!(diff.contains("-  replicas: "), "{diff}");
        // Unchanged: an empty diff.
        let r = dry(&old, &[], None, Some(&old), Some(&current));
        assert!(
            r.members.iter().all(|m| m.diff.as_deref() == Some("")),
            "{:?}",
            r.members
        );
        // A member it leaves: its objects go (all removed in the diff).
        let moved = Decision {
            placements: vec![Placement {
                cluster: "use1c".into(),
                replicas: Some(4),
                ..Default::default()
            }],
            ..current.clone()
        };
        let r = dry(&old, &[], None, Some(&old), Some(&moved));
        let c = r.members.iter().find(|m| m.cluster == "use1c").unwrap();
        assert!(c.objects.is_empty());
        assert!(
            c.diff
                .as_deref()
                .unwrap()
                .lines()
                .skip(3)
                .all(|l| l.starts_with('-'))
        );
        assert!(
            r.moves
                .iter()
                .any(|m| m.cluster == "use1c" && m.after == "-")
        );
    }

    #[test]
    fn the_quota_effect_names_what_it_adds_what_others_use_and_the_limits() {
        let q: FederatedQuota = serde_json::from_value(json!({
            "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "FederatedQuota",
            "metadata": {"name": "team", "namespace": "ads"},
            "spec": {"hard": {"cpu": "2", "pods": "10"}, "perCluster": {"use1a": {"pods": "1"}}},
            "status": {"usedPerCluster": {"use1b": {"cpu": "500m", "pods": "1"}}},
        }))
        .unwrap();
        let used = Resources {
            cpu: Milli(500),
            memory: Milli(0),
            gpu: 0,
            pods: 1,
        };
        let w = service("registry.example/app:1", 4);
        let r = dry(&w, std::slice::from_ref(&q), Some(&used), None, None);
        // use1a's cap of one pod holds its share at one.
        let a = r.placements.iter().find(|p| p.cluster == "use1a").unwrap();
        assert_eq!(a.replicas, Some(1));
        assert!(
            a.reason
                .contains("quota room 1 pods (pods 1 of 1 left, 1 per pod) → 1 replica"),
            "{a:?}"
        );
        assert_eq!(r.quotas.len(), 1);
        let rows = &r.quotas[0].rows;
        let row = |scope: &str, res: &str| {
            rows.iter()
                .find(|x| x.scope == scope && x.resource == res)
                .unwrap_or_else(|| panic!("no {scope} {res} in {rows:?}"))
        };
        let pods = row("total", "pods");
        assert_eq!(
            (
                pods.adds.as_str(),
                pods.used.as_str(),
                pods.hard.as_str(),
                pods.fits
            ),
            ("4", "1", "10", true)
        );
        assert_eq!(row("total", "cpu").used, "500m");
        let capped = row("use1a", "pods");
        assert_eq!((capped.adds.as_str(), capped.hard.as_str()), ("1", "1"));
        let b = row("use1b", "cpu");
        assert_eq!(
            (b.used.as_str(), b.hard.as_str(), b.fits),
            ("500m", "-", true)
        );
        assert!(
            !rows
                .iter()
                .any(|x| x.scope == "use1a" && x.resource == "cpu"),
            "only the cap's dimensions"
        );
    }

    proptest::proptest! {
        /// Where a member's nodes are alike (no labels or taints, the same free room),
        /// its status describes them exactly: the dry run then decides the split the hub
        /// decides on the live nodes, for a new workload and for one it already placed
        /// (whose pods the member's status counts as allocated, and the hub does not).
        #[test]
        fn the_dry_run_and_the_hub_decide_the_same_split_on_alike_nodes(
            nodes in proptest::collection::vec(1u32..6, 3),
            cpu_per_node in proptest::collection::vec(1i128..8, 3),
            replicas in 0u32..60,
            before in 0u32..60,
        ) {
            let free = |cpu: i128| Resources {
                cpu: Milli(cpu * 1000),
                memory: Milli((16i128 << 30) * 1000),
                gpu: 0,
                pods: 110,
            };
            // The hub's view: each member's real nodes, all alike.
            let hub_views: Vec<ClusterView> = members()
                .iter()
                .zip(nodes.iter().zip(&cpu_per_node))
                .map(|(m, (n, cpu))| {
                    let nodes = (0..*n)
                        .map(|i| NodeRoom {
                            name: format!("n{i}"),
                            labels: Default::default(),
                            taints: Vec::new(),
                            free: free(*cpu),
                        })
                        .collect();
                    cluster_view(m, true, nodes)
                })
                .collect();
            let old = service("registry.example/app:1", before);
            let (old_demand, old_policy) = sizing(&old, None, &hub_views).unwrap();
            let placed = plan(&PlanInput {
                clusters: &hub_views,
                policy: &old_policy,
                demand: &old_demand,
                quota: None,
                current: None,
            })
            .decision;
            let own = usage_of(&placed, &old_demand);
            let w = service("registry.example/app:2", replicas);
            let (demand, policy) = sizing(&w, None, &hub_views).unwrap();
            for existing in [false, true] {
                let current = existing.then_some(&placed);
                // What each member's status says: its nodes, and their room less the
                // pods of the workload already placed.
                let ms: Vec<MemberCluster> = members()
                    .into_iter()
                    .zip(nodes.iter().zip(&cpu_per_node))
                    .map(|(mut m, (n, cpu))| {
                        let name = m.metadata.name.clone().unwrap();
                        let mut total = free(*cpu).checked_mul(u64::from(*n)).unwrap();
                        if existing {
                            total = total.saturating_sub(own.get(&name).unwrap_or(&Resources::ZERO));
                        }
                        let s = m.status.as_mut().unwrap();
                        s.nodes = Some(i32::try_from(*n).unwrap());
                        s.available = Some(placement::quota::amounts(&total));
                        m
                    })
                    .collect();
                let hub = plan(&PlanInput {
                    clusters: &hub_views,
                    policy: &policy,
                    demand: &demand,
                    quota: None,
                    current,
                });
                let requested = super::super::quota::requested(&demand, 1);
                let r = build(&Input {
                    workload: &w,
                    team: "ads",
                    submitted_by: "a",
                    artifact: None,
                    profiles: &[],
                    members: &ms,
                    demand: &demand,
                    policy: &policy,
                    requested: &requested,
                    quotas: &[],
                    used: None,
                    existing: existing.then_some(&old),
                    current,
                    from_scratch: false,
                });
                let got: Vec<(String, Option<u32>)> =
                    r.placements.iter().map(|p| (p.cluster.clone(), p.replicas)).collect();
                let want: Vec<(String, Option<u32>)> = hub
                    .decision
                    .placements
                    .iter()
                    .map(|p| (p.cluster.clone(), p.replicas))
                    .collect();
                proptest::prop_assert_eq!(got, want, "existing: {}", existing);
                proptest::prop_assert_eq!(r.unplaced, hub.decision.unplaced);
            }
        }
    }

    proptest::proptest! {
        /// Where the hub has written each member's nodes into its status (`nodePools`,
        /// what its heartbeat writes), the dry run decides the split the hub decides on the
        /// live nodes, whatever the pools: labelled, tainted, partly used, cordoned, and a
        /// pod that fits only on some of them or selects a pool.
        #[test]
        fn the_dry_run_and_the_hub_decide_the_same_split_on_the_nodes_the_status_lists(
            layout in proptest::collection::vec(
                proptest::collection::vec((0usize..3, 0i128..16, proptest::bool::weighted(0.9)), 1..6),
                3,
            ),
            cpu in 1i128..14,
            replicas in 1u32..40,
            select_highmem in proptest::bool::ANY,
        ) {
            use crate::placement::capacity::{NodeTaint, NodeUsage, Res, node_rooms, to_pools};
            let pools = [("general", 8i128), ("highmem", 16), ("gpu", 32)];
            let usage: Vec<Vec<NodeUsage>> = layout
                .iter()
                .enumerate()
                .map(|(m, nodes)| {
                    nodes
                        .iter()
                        .enumerate()
                        .map(|(i, (pool, used, schedulable))| {
                            let (pool_name, size) = pools[*pool];
                            let res = |cpu: i128| Res {
                                cpu: Milli(cpu * 1000),
                                memory: Milli((64i128 << 30) * 1000),
                                pods: Milli(110_000),
                                gpus: Milli(0),
                            };
                            let name = format!("m{m}-{pool_name}-{i}");
                            NodeUsage {
                                labels: [
                                    ("pinterest.com/pool".to_string(), pool_name.to_string()),
                                    ("kubernetes.io/hostname".to_string(), name.clone()),
                                ]
                                .into(),
                                name,
                                taints: if pool_name == "gpu" {
                                    vec![NodeTaint {
                                        key: "dedicated".into(),
                                        value: Some("gpu".into()),
                                        effect: "NoSchedule".into(),
                                    }]
                                } else {
                                    Vec::new()
                                },
                                schedulable: *schedulable,
                                capacity: res(size),
                                allocatable: res(size),
                                allocated: Res {
                                    cpu: Milli((*used).min(size) * 1000),
                                    pods: Milli(5000),
                                    ..Default::default()
                                },
                            }
                        })
                        .collect()
                })
                .collect();
            let ms: Vec<MemberCluster> = members()
                .into_iter()
                .zip(&usage)
                .map(|(mut m, u)| {
                    m.spec.taints.clear();
                    let s = m.status.as_mut().unwrap();
                    s.node_pools = to_pools(u);
                    m
                })
                .collect();
            let hub_views: Vec<ClusterView> = ms
                .iter()
                .zip(&usage)
                .map(|(m, u)| cluster_view(m, true, node_rooms(u.clone())))
                .collect();
            let selector = if select_highmem {
                "\n      nodeSelector: {pinterest.com/pool: highmem}"
            } else {
                ""
            };
            let w = workload(&format!(
                r#"
apiVersion: compute.pinterest.com/v1alpha1
kind: PinterestService
metadata: {{name: web, namespace: ads}}
spec:
  owner: {{team: ads, contact: ads@example.com}}
  replicas: {replicas}
  template:
    spec:{selector}
      containers:
        - {{name: app, image: app, resources: {{requests: {{cpu: "{cpu}", memory: 64Mi}}}}}}
"#
            ));
            let (hub, dry, _) = engine_and_dry_run(&w, &ms, &hub_views);
            proptest::prop_assert_eq!(dry, hub);
        }
    }

    #[test]
    fn every_kind_dry_runs_with_objects_for_each_member_it_places() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
        for file in [
            "service.yaml",
            "statefulset.yaml",
            "jobset.yaml",
            "cronjob.yaml",
            "daemon.yaml",
            "training-pytorch.yaml",
        ] {
            let mut w = workload(&std::fs::read_to_string(dir.join(file)).unwrap());
            // Off every member's selector: tolerate everything the examples ask.
            if let AnyWorkload::Daemon(d) = &mut w {
                d.spec.placement = Default::default();
            }
            let r = dry(&w, &[], None, None, None);
            assert!(!r.placements.is_empty(), "{file}: {r:?}");
            for m in &r.members {
                assert!(m.error.is_none(), "{file} on {}: {:?}", m.cluster, m.error);
                assert!(m.object_count > 0 && !m.objects.is_empty(), "{file}");
            }
        }
        // A job set's Jobs: what each member starts first, at most MAX_OBJECTS.
        let big = workload(
            r#"
apiVersion: compute.pinterest.com/v1alpha1
kind: PinterestJobSet
metadata: {name: big, namespace: ml}
spec:
  owner: {team: ml, contact: ml@example.com}
  shards: 400
  template:
    spec:
      containers: [{name: c, image: x, resources: {requests: {cpu: 10m}}}]
"#,
        );
        let r = dry(&big, &[], None, None, None);
        let shards: u32 = r
            .placements
            .iter()
            .filter_map(|p| p.shards.as_deref())
            .map(|s| crate::api::ranges::RangeSet::parse(s).unwrap().len() as u32)
            .sum();
        assert_eq!(shards, 400, "{:?}", r.placements);
        for m in &r.members {
            let jobs = m.objects.matches("\nkind: Job\n").count();
            assert!(
                jobs > 0 && jobs <= MAX_OBJECTS,
                "{}: {jobs} Jobs",
                m.cluster
            );
        }
    }

    #[test]
    fn a_diff_too_big_to_compare_line_by_line_replaces_the_middle() {
        let a: String = (0..3000).map(|i| format!("a{i}\n")).collect();
        let b: String = (0..3000).map(|i| format!("b{i}\n")).collect();
        let d = unified_diff(&format!("same\n{a}"), &format!("same\n{b}"), "x", "y");
        assert!(
            d.starts_with("--- x\n+++ y\n@@ -1,3001 +1,3001 @@\n same\n-a0\n"),
            "{}",
            &d[..80]
        );
        assert_eq!(d.lines().filter(|l| l.starts_with('+')).count(), 3001);
    }

    #[test]
    fn unified_diffs_show_changes_with_context_and_nothing_for_equal_texts() {
        assert_eq!(unified_diff("a\nb\n", "a\nb\n", "x", "y"), "");
        let a = (1..=10).map(|i| format!("l{i}\n")).collect::<String>();
        let b = a.replace("l5\n", "l5b\n");
        let d = unified_diff(&a, &b, "x", "y");
        assert_eq!(
            d,
            "--- x\n+++ y\n@@ -2,7 +2,7 @@\n l2\n l3\n l4\n-l5\n+l5b\n l6\n l7\n l8\n"
        );
        // Far apart changes are two hunks; an insertion and a deletion.
        let b = a.replace("l1\n", "").replace("l10\n", "l10\nl11\n");
        let d = unified_diff(&a, &b, "x", "y");
        assert_eq!(d.matches("@@ -").count(), 2, "{d}");
        assert!(d.contains("@@ -1,4 +1,3 @@\n-l1\n l2\n"), "{d}");
        assert!(d.contains("+l11\n"), "{d}");
        // From nothing and to nothing.
        assert_eq!(
            unified_diff("", "a\n", "x", "y"),
            "--- x\n+++ y\n@@ -0,0 +1,1 @@\n+a\n"
        );
        assert_eq!(
            unified_diff("a\n", "", "x", "y"),
            "--- x\n+++ y\n@@ -1,1 +0,0 @@\n-a\n"
        );
    }

    #[test]
    fn the_dry_run_decides_the_split_the_engine_decides_on_the_same_members() {
        // Whatever the replicas and the room, the dry run's split is the engine's on the
        // members its status describes.
        for replicas in [0, 1, 3, 7, 40] {
            for nodes in [1, 2, 5] {
                let ms: Vec<MemberCluster> = members()
                    .into_iter()
                    .map(|mut m| {
                        m.status.as_mut().unwrap().nodes = Some(nodes);
                        m
                    })
                    .collect();
                let w = service("registry.example/app:1", replicas);
                let views = member_views(&ms, &BTreeMap::new());
                let (engine, dry, r) = engine_and_dry_run(&w, &ms, &views);
                assert_eq!(dry, engine, "{replicas} replicas on {nodes} nodes");
                let named: BTreeSet<&str> = r
                    .placements
                    .iter()
                    .map(|p| p.cluster.as_str())
                    .chain(r.excluded.iter().map(|e| e.cluster.as_str()))
                    .collect();
                assert_eq!(named.len(), 3, "every member is placed or excluded: {r:?}");
            }
        }
    }
}

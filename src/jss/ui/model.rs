//! What the UI shows, computed from hub objects. Pure — no client, no clock (the time is
//! passed in): a member's health, a workload's state and per-cluster split, the
//! workloads table with its filters, grouping and paging, why each member got a share or
//! not, and a job set's shard map.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::DynamicObject;

use crate::api::common::{
    Condition, ConditionStatus, MemberWorkloadStatus, PlacementDecision, condition_types as ct,
    find_condition,
};
use crate::api::federation::{ANNOTATION_DRAINING, ANNOTATION_FAILED_OVER_FROM};
use crate::api::federation::{ClusterMode, MemberCluster, ResourceAmounts};
use crate::api::quantity::Milli;
use crate::api::ranges::RangeSet;
use crate::api::rollout::{RolloutPolicy, RolloutStatus, gate, phase as rp};
use crate::api::workload::{AnyWorkload, Counted, WorkloadKind};
use crate::placement::from_workload::policy_for;
use crate::placement::model::untolerated;

/// Workloads per page of the workloads table.
pub const PAGE_SIZE: usize = 50;

/// Past this long NotReady a member counts as lost: the default failover grace, after
/// which workloads move off it.
pub const LOST_AFTER_SECS: i64 = 60;
/// A member that came back is shown as returned for this long: the hub's default failback
/// window, during which it takes no new shares.
pub const RETURNED_FOR_SECS: i64 = 120;

/// Seconds from `then` to `now` as people read an age: `45s`, `3m`, `2h5m`, `4d`.
pub fn age(now: Timestamp, then: Timestamp) -> String {
    let s = (now.as_second() - then.as_second()).max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 if (s % 3600) / 60 == 0 => format!("{}h", s / 3600),
        3600..86400 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d", s / 86400),
    }
}

/// A priority as people read it: `1000`, with what waiting added and the class when there
/// are — `1000 (effective 1010, class high)` (the CLI's `describe` says it so too).
pub fn priority_text(priority: i32, effective: i32, class: Option<&str>) -> String {
    let mut extra = Vec::new();
    if effective != priority {
        extra.push(format!("effective {effective}"));
    }
    if let Some(c) = class {
        extra.push(format!("class {c}"));
    }
    if extra.is_empty() {
        priority.to_string()
    } else {
        format!("{priority} ({})", extra.join(", "))
    }
}

// ---------------------------------------------------------------------------------------
// Members

/// A member's health as the fleet page shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    Ready,
    /// Ready again after a loss, within the failback window.
    Returned,
    /// NotReady for less than the failover grace.
    NotReady,
    /// NotReady past the failover grace: its workloads move elsewhere.
    Lost,
    /// Being unjoined.
    Draining,
    /// A pull-mode member whose agent stopped reporting.
    AgentLost,
    /// The hub has not reported on it yet.
    Unknown,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Ready => "Ready",
            Health::Returned => "Returned",
            Health::NotReady => "NotReady",
            Health::Lost => "Lost",
            Health::Draining => "Draining",
            Health::AgentLost => "AgentLost",
            Health::Unknown => "Unknown",
        }
    }

    /// The CSS class of its badge.
    pub fn tone(self) -> &'static str {
        match self {
            Health::Ready => "ok",
            Health::Returned | Health::Draining | Health::Unknown => "warn",
            Health::NotReady | Health::Lost | Health::AgentLost => "bad",
        }
    }
}

/// One row of the fleet page.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberRow {
    pub name: String,
    pub mode: &'static str,
    pub region: String,
    pub zone: String,
    pub health: Health,
    /// Since when it is in this health, when known.
    pub since: Option<Timestamp>,
    pub message: String,
    pub version: String,
    pub nodes: Option<i32>,
    pub last_heartbeat: Option<Timestamp>,
    pub resources: Vec<ResourceUse>,
    pub workloads: usize,
    pub taints: Vec<String>,
    pub weight: i32,
}

/// One resource of a member: allocatable, allocated, available.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceUse {
    pub resource: Resource,
    pub capacity: Option<Milli>,
    pub allocatable: Option<Milli>,
    pub allocated: Option<Milli>,
    pub available: Option<Milli>,
}

/// The resources the federation tracks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Resource {
    Cpu,
    Memory,
    Gpus,
    Pods,
}

impl Resource {
    pub const ALL: [Resource; 4] = [
        Resource::Cpu,
        Resource::Memory,
        Resource::Gpus,
        Resource::Pods,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Memory => "memory",
            Resource::Gpus => "gpus",
            Resource::Pods => "pods",
        }
    }

    /// An amount exactly as the CLI and the JSS print it (`7500m` cpu, `1536Mi` memory).
    pub fn format(self, m: Milli) -> String {
        match self {
            Resource::Memory => m.format_memory(),
            Resource::Cpu => m.format_cpu(),
            _ => m.to_string(),
        }
    }

    fn of(self, a: &ResourceAmounts) -> Option<Milli> {
        let q = match self {
            Resource::Cpu => &a.cpu,
            Resource::Memory => &a.memory,
            Resource::Gpus => &a.gpus,
            Resource::Pods => &a.pods,
        };
        q.as_ref().and_then(|q| Milli::parse(&q.0).ok())
    }
}

fn condition_time(c: &Condition) -> Timestamp {
    c.last_transition_time.0
}

/// A member's health from its MemberCluster (conditions, loss and return times, drain).
pub fn member_health(mc: &MemberCluster, now: Timestamp) -> (Health, Option<Timestamp>, String) {
    let status = mc.status.clone().unwrap_or_default();
    let ready = find_condition(&status.conditions, ct::READY);
    let message = ready
        .map(|c| {
            if c.message.is_empty() {
                c.reason.clone()
            } else {
                format!("{}: {}", c.reason, c.message)
            }
        })
        .unwrap_or_default();
    let lost = status.lost_time.as_ref().map(|t| t.0);
    let returned = status.returned_time.as_ref().map(|t| t.0);
    let draining = mc.annotations().contains_key(ANNOTATION_DRAINING);
    let (health, since) = match ready.map(|c| c.status) {
        Some(ConditionStatus::True) if draining => (Health::Draining, None),
        Some(ConditionStatus::True) => match returned {
            Some(t) if now.as_second() - t.as_second() < RETURNED_FOR_SECS => {
                (Health::Returned, Some(t))
            }
            _ => (Health::Ready, ready.map(condition_time)),
        },
        Some(ConditionStatus::False) => {
            let since = lost.or(ready.map(condition_time));
            if ready.is_some_and(|c| c.reason.contains("Agent")) {
                (Health::AgentLost, since)
            } else if since.is_some_and(|t| now.as_second() - t.as_second() >= LOST_AFTER_SECS) {
                (Health::Lost, since)
            } else {
                (Health::NotReady, since)
            }
        }
        Some(ConditionStatus::Unknown) | None => (Health::Unknown, ready.map(condition_time)),
    };
    // A pull agent's credential that ends soon, ended or is missing is said too.
    let credential = find_condition(
        &status.conditions,
        crate::api::federation::CONDITION_CREDENTIAL_VALID,
    )
    .filter(|c| c.reason != "Valid")
    .map(|c| format!("{}: {}", c.reason, c.message));
    let message = match (message.is_empty(), credential) {
        (_, None) => message,
        (true, Some(c)) => c,
        (false, Some(c)) => format!("{message}; credential {c}"),
    };
    (health, since, message)
}

/// The fleet page's row of a member; `workloads` is how many workloads have a share there.
pub fn member_row(mc: &MemberCluster, workloads: usize, now: Timestamp) -> MemberRow {
    let (health, since, message) = member_health(mc, now);
    let status = mc.status.clone().unwrap_or_default();
    let amount = |a: &Option<ResourceAmounts>, r: Resource| a.as_ref().and_then(|a| r.of(a));
    MemberRow {
        name: mc.name_any(),
        mode: match mc.spec.mode.unwrap_or_default() {
            ClusterMode::Push => "Push",
            ClusterMode::Pull => "Pull",
        },
        region: mc.spec.region.clone().unwrap_or_default(),
        zone: mc.spec.zone.clone().unwrap_or_default(),
        health,
        since,
        message,
        version: status.kubernetes_version.clone().unwrap_or_default(),
        nodes: status.nodes,
        last_heartbeat: status.last_heartbeat_time.as_ref().map(|t| t.0),
        resources: Resource::ALL
            .into_iter()
            .map(|r| ResourceUse {
                resource: r,
                capacity: amount(&status.capacity, r),
                allocatable: amount(&status.allocatable, r),
                allocated: amount(&status.allocated, r),
                available: amount(&status.available, r),
            })
            .collect(),
        workloads,
        taints: mc
            .spec
            .taints
            .iter()
            .map(|t| {
                let v = if t.value.is_empty() {
                    String::new()
                } else {
                    format!("={}", t.value)
                };
                format!("{}{v}:{:?}", t.key, t.effect)
            })
            .collect(),
        weight: mc.spec.weight_or_default(),
    }
}

// ---------------------------------------------------------------------------------------
// Workloads

/// The parts of a workload's hub status the UI reads, through its kind's status type.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HubStatus {
    pub placement: Option<PlacementDecision>,
    pub clusters: Vec<MemberWorkloadStatus>,
    pub conditions: Vec<Condition>,
    pub completed_shards: RangeSet,
    pub failed_shards: RangeSet,
}

impl HubStatus {
    pub fn of(o: &DynamicObject) -> HubStatus {
        let Some(kind) = o
            .types
            .as_ref()
            .and_then(|t| WorkloadKind::from_kind(&t.kind))
        else {
            return HubStatus::default();
        };
        let v = crate::jss::wire::HubStatusView::read(kind, &o.data["status"]);
        HubStatus {
            placement: v.part.placement,
            clusters: v.part.clusters,
            conditions: v.part.conditions,
            completed_shards: v.totals.completed_shards,
            failed_shards: v.totals.failed_shards,
        }
    }

    fn condition_is(&self, t: &str, s: ConditionStatus) -> bool {
        find_condition(&self.conditions, t).is_some_and(|c| c.status == s)
    }

    pub fn cluster(&self, name: &str) -> Option<&MemberWorkloadStatus> {
        self.clusters.iter().find(|c| c.cluster == name)
    }
}

/// A workload's state in one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorkloadState {
    Ready,
    Complete,
    Progressing,
    Degraded,
    Unplaced,
    QuotaExceeded,
    Failed,
    Invalid,
    Deleting,
}

impl WorkloadState {
    pub const ALL: [WorkloadState; 9] = [
        WorkloadState::Ready,
        WorkloadState::Complete,
        WorkloadState::Progressing,
        WorkloadState::Degraded,
        WorkloadState::Unplaced,
        WorkloadState::QuotaExceeded,
        WorkloadState::Failed,
        WorkloadState::Invalid,
        WorkloadState::Deleting,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadState::Ready => "Ready",
            WorkloadState::Complete => "Complete",
            WorkloadState::Progressing => "Progressing",
            WorkloadState::Degraded => "Degraded",
            WorkloadState::Unplaced => "Unplaced",
            WorkloadState::QuotaExceeded => "QuotaExceeded",
            WorkloadState::Failed => "Failed",
            WorkloadState::Invalid => "Invalid",
            WorkloadState::Deleting => "Deleting",
        }
    }

    pub fn parse(s: &str) -> Option<WorkloadState> {
        WorkloadState::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s))
    }

    pub fn tone(self) -> &'static str {
        match self {
            WorkloadState::Ready | WorkloadState::Complete => "ok",
            WorkloadState::Progressing | WorkloadState::Deleting => "info",
            WorkloadState::Degraded | WorkloadState::Unplaced | WorkloadState::QuotaExceeded => {
                "warn"
            }
            WorkloadState::Failed | WorkloadState::Invalid => "bad",
        }
    }
}

/// The state of a workload from its conditions, worst first.
pub fn workload_state(o: &DynamicObject, s: &HubStatus) -> WorkloadState {
    use ConditionStatus::True;
    if o.metadata.deletion_timestamp.is_some() {
        WorkloadState::Deleting
    } else if s.condition_is(ct::INVALID, True) {
        WorkloadState::Invalid
    } else if s.condition_is(ct::FAILED, True) {
        WorkloadState::Failed
    } else if s.condition_is(ct::COMPLETE, True) {
        WorkloadState::Complete
    } else if s.condition_is(ct::QUOTA_EXCEEDED, True) {
        WorkloadState::QuotaExceeded
    } else if s.condition_is(ct::SCHEDULED, ConditionStatus::False) {
        WorkloadState::Unplaced
    } else if s.condition_is(ct::DEGRADED, True) {
        WorkloadState::Degraded
    } else if s.condition_is(ct::READY, True) {
        WorkloadState::Ready
    } else {
        WorkloadState::Progressing
    }
}

/// One cluster's part of a workload: what it should run and how much of it is done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitPart {
    pub cluster: String,
    /// Ready pods, or completed shards; `None` when the member has not reported.
    pub done: Option<i64>,
    /// Pods or shards the cluster was given; `None` for a whole-workload share.
    pub want: Option<i64>,
    /// The member's one-word state (Ready, Progressing, Complete, ...).
    pub state: Option<String>,
}

impl std::fmt::Display for SplitPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.done, self.want) {
            (d, Some(w)) => write!(
                f,
                "{} {}/{w}",
                self.cluster,
                d.map_or_else(|| "?".to_string(), |d| d.to_string())
            ),
            (_, None) => write!(
                f,
                "{} {}",
                self.cluster,
                self.state.as_deref().unwrap_or("pending")
            ),
        }
    }
}

/// `use1a 4/4 · use1b 3/3`.
pub fn split_text(parts: &[SplitPart]) -> String {
    parts
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" · ")
}

/// How a workload is split over its clusters, in cluster order: every cluster of the
/// placement decision, and any cluster that still reports a slice (a share moving away).
pub fn split(kind: WorkloadKind, s: &HubStatus) -> Vec<SplitPart> {
    let mut names: BTreeSet<&str> = BTreeSet::new();
    let placements = s
        .placement
        .as_ref()
        .map(|p| p.placements.as_slice())
        .unwrap_or_default();
    names.extend(placements.iter().map(|p| p.cluster.as_str()));
    names.extend(s.clusters.iter().map(|c| c.cluster.as_str()));
    names
        .into_iter()
        .map(|name| {
            let placed = placements.iter().find(|p| p.cluster == name);
            let member = s.cluster(name);
            let state = member.and_then(|m| m.state.clone());
            let (done, want) = match kind.counted() {
                Counted::Shards => {
                    let want = placed
                        .and_then(|p| p.shards.as_deref())
                        .and_then(|r| RangeSet::parse(r).ok())
                        .map(|r| i64::try_from(r.len()).unwrap_or(i64::MAX))
                        .unwrap_or(0);
                    let done = member.map(|m| {
                        m.completed_shards
                            .as_deref()
                            .and_then(|r| RangeSet::parse(r).ok())
                            .map(|r| i64::try_from(r.len()).unwrap_or(i64::MAX))
                            .unwrap_or_else(|| i64::from(m.shards_succeeded.unwrap_or(0)))
                    });
                    (done, Some(want))
                }
                Counted::Runs | Counted::Nodes => (None, None),
                Counted::Replicas | Counted::Gang => {
                    let want = placed
                        .and_then(|p| p.replicas)
                        .or(member.and_then(|m| m.replicas))
                        .map(i64::from)
                        .unwrap_or(0);
                    let done = member.map(|m| i64::from(m.ready_replicas.unwrap_or(0)));
                    (done, Some(want))
                }
            };
            SplitPart {
                cluster: name.to_string(),
                done,
                want,
                state,
            }
        })
        .collect()
}

/// One row of the workloads table.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadRow {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    pub team: String,
    pub state: WorkloadState,
    pub split: Vec<SplitPart>,
    pub unplaced: i32,
    pub created: Option<Timestamp>,
}

impl WorkloadRow {
    pub fn of(kind: WorkloadKind, o: &DynamicObject) -> WorkloadRow {
        let s = HubStatus::of(o);
        WorkloadRow {
            kind,
            namespace: o.namespace().unwrap_or_default(),
            name: o.name_any(),
            team: o.data["spec"]["owner"]["team"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            state: workload_state(o, &s),
            split: split(kind, &s),
            unplaced: s.placement.as_ref().map_or(0, |p| p.unplaced),
            created: o.metadata.creation_timestamp.as_ref().map(|t| t.0),
        }
    }

    pub fn on_cluster(&self, cluster: &str) -> bool {
        self.split.iter().any(|p| p.cluster == cluster)
    }
}

/// How the workloads table groups its rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Grouping {
    #[default]
    None,
    Namespace,
    Team,
    Kind,
    State,
}

impl Grouping {
    pub const ALL: [Grouping; 5] = [
        Grouping::None,
        Grouping::Namespace,
        Grouping::Team,
        Grouping::Kind,
        Grouping::State,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Grouping::None => "",
            Grouping::Namespace => "namespace",
            Grouping::Team => "team",
            Grouping::Kind => "kind",
            Grouping::State => "state",
        }
    }

    pub fn parse(s: &str) -> Option<Grouping> {
        Grouping::ALL.into_iter().find(|g| g.as_str() == s)
    }

    /// The group a row falls in.
    pub fn key(self, r: &WorkloadRow) -> String {
        match self {
            Grouping::None => String::new(),
            Grouping::Namespace => r.namespace.clone(),
            Grouping::Team => r.team.clone(),
            Grouping::Kind => r.kind.as_str().to_string(),
            Grouping::State => r.state.as_str().to_string(),
        }
    }
}

/// The filters of the workloads table (each `None` matches everything).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    pub namespace: Option<String>,
    pub kind: Option<WorkloadKind>,
    pub team: Option<String>,
    pub state: Option<WorkloadState>,
    pub cluster: Option<String>,
    /// Part of the name.
    pub name: Option<String>,
    pub group: Grouping,
    /// 1-based.
    pub page: usize,
}

impl Filter {
    pub fn matches(&self, r: &WorkloadRow) -> bool {
        self.namespace.as_ref().is_none_or(|n| &r.namespace == n)
            && self.kind.is_none_or(|k| r.kind == k)
            && self.team.as_ref().is_none_or(|t| &r.team == t)
            && self.state.is_none_or(|s| r.state == s)
            && self.cluster.as_ref().is_none_or(|c| r.on_cluster(c))
            && self
                .name
                .as_ref()
                .is_none_or(|n| r.name.contains(n.as_str()))
    }
}

/// Rows of the workloads table by workload uid and resourceVersion: a row is rebuilt
/// only when its object changed, so a page over 10,000 workloads (and every live refresh
/// of it) filters cached rows instead of reading 10,000 statuses (`cargo bench --bench
/// ui`). Holds exactly the objects of the last call.
#[derive(Debug, Default)]
pub struct RowCache {
    rows: HashMap<String, (String, Arc<WorkloadRow>)>,
}

impl RowCache {
    pub fn rows(
        &mut self,
        objects: &[(WorkloadKind, Arc<DynamicObject>)],
    ) -> Vec<Arc<WorkloadRow>> {
        let mut next = HashMap::with_capacity(objects.len());
        let mut out = Vec::with_capacity(objects.len());
        for (kind, o) in objects {
            let (Some(uid), Some(rv)) = (&o.metadata.uid, &o.metadata.resource_version) else {
                out.push(Arc::new(WorkloadRow::of(*kind, o)));
                continue;
            };
            let row = match self.rows.remove(uid) {
                Some((old_rv, row)) if &old_rv == rv => row,
                _ => Arc::new(WorkloadRow::of(*kind, o)),
            };
            next.insert(uid.clone(), (rv.clone(), row.clone()));
            out.push(row);
        }
        self.rows = next;
        out
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// One page of the workloads table.
#[derive(Clone, Debug, PartialEq)]
pub struct Page {
    pub rows: Vec<Arc<WorkloadRow>>,
    /// Rows matching the filter over all pages.
    pub total: usize,
    /// 1-based, clamped to the pages there are.
    pub page: usize,
    pub pages: usize,
}

/// Filters, sorts (by group, then namespace, kind and name) and cuts one page. Rows are
/// built only for the page: the others are filtered on a cheap row each.
pub fn page_of(mut rows: Vec<Arc<WorkloadRow>>, f: &Filter) -> Page {
    rows.retain(|r| f.matches(r));
    rows.sort_by(|a, b| {
        (f.group.key(a), &a.namespace, a.kind, &a.name).cmp(&(
            f.group.key(b),
            &b.namespace,
            b.kind,
            &b.name,
        ))
    });
    let total = rows.len();
    let pages = total.div_ceil(PAGE_SIZE).max(1);
    let page = f.page.clamp(1, pages);
    let rows = rows
        .into_iter()
        .skip((page - 1) * PAGE_SIZE)
        .take(PAGE_SIZE)
        .collect();
    Page {
        rows,
        total,
        page,
        pages,
    }
}

// ---------------------------------------------------------------------------------------
// Placement reasons

/// Why a member has a share of a workload, or why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberReason {
    pub cluster: String,
    /// Its share: `4 replicas`, `shards 0-3`, `whole workload`; `None` without one.
    pub share: Option<String>,
    pub why: String,
}

/// Why each member got its share or none: the reason the hub recorded with its numbers
/// when it decided (`status.placement.members`); a member lost or failed over since says
/// so first. A decision recorded before reasons were: the first rule of the workload's
/// policy the member fails today (readiness, weight, names, zones, selector, taints).
pub fn member_reasons(
    w: Option<&AnyWorkload>,
    members: &[MemberCluster],
    s: &HubStatus,
    now: Timestamp,
) -> Vec<MemberReason> {
    let decision = s.placement.clone().unwrap_or_default();
    let policy = w.map(|w| policy_for(w.as_ref()));
    let failed_over_from: BTreeSet<String> = w
        .and_then(|w| {
            w.as_ref()
                .metadata()
                .annotations
                .as_ref()?
                .get(ANNOTATION_FAILED_OVER_FROM)
                .cloned()
        })
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect())
        .unwrap_or_default();
    let strategy = decision
        .strategy
        .map(|s| format!("{s:?}"))
        .unwrap_or_else(|| "the".into());
    let recorded = |name: &str| {
        decision
            .members
            .iter()
            .find(|m| m.cluster == name)
            .map(|m| m.reason.clone())
    };
    let mut out = Vec::new();
    for mc in members {
        let name = mc.name_any();
        if let Some(p) = decision.placements.iter().find(|p| p.cluster == name) {
            let share = match (&p.replicas, &p.shards) {
                (Some(1), _) => "1 replica".into(),
                (Some(r), _) => format!("{r} replicas"),
                (None, Some(sh)) => format!("shards {sh}"),
                (None, None) => "whole workload".into(),
            };
            let weight = policy
                .as_ref()
                .and_then(|p| p.weights.get(&name).copied())
                .map(|w| w as i32)
                .unwrap_or_else(|| mc.spec.weight_or_default());
            // The reason the hub recorded with its numbers when it decided, if it did.
            let why = recorded(&name)
                .map(|r| format!("{strategy} strategy: {r}"))
                .unwrap_or_else(|| {
                    format!(
                        "eligible; given this share by the {strategy} strategy (weight {weight})"
                    )
                });
            // The override rules its slice carries.
            let why = match w.map(|w| rules_selecting(w, mc)).filter(|r| !r.is_empty()) {
                Some(rules) => format!("{why} · overrides: {}", rules.join(", ")),
                None => why,
            };
            out.push(MemberReason {
                cluster: name,
                share: Some(share),
                why,
            });
            continue;
        }
        let (health, _, message) = member_health(mc, now);
        let why = if failed_over_from.contains(&name) {
            format!("failed over from it ({})", health.as_str())
        } else if !matches!(health, Health::Ready) {
            match health {
                Health::Returned => {
                    "returned recently: takes no new shares during the failback window".into()
                }
                Health::Draining => "draining (being unjoined): takes no new shares".into(),
                _ => format!(
                    "not ready ({})",
                    if message.is_empty() {
                        health.as_str().to_string()
                    } else {
                        message
                    }
                ),
            }
        } else if let Some(why) = recorded(&name) {
            format!("not given a share: {why}")
        } else if let Some(why) = policy.as_ref().and_then(|p| policy_exclusion(p, mc)) {
            why
        } else if w.is_none() {
            "the workload could not be read to check its policy".into()
        } else if decision.unplaced > 0 {
            format!(
                "eligible, but no share: {}",
                decision.reason.clone().unwrap_or_else(|| "no room".into())
            )
        } else {
            format!("eligible; the {strategy} strategy needed no share here")
        };
        out.push(MemberReason {
            cluster: name,
            share: None,
            why,
        });
    }
    out
}

/// The names of the workload's override rules that select member `mc`.
fn rules_selecting(w: &AnyWorkload, mc: &MemberCluster) -> Vec<String> {
    let rules = w.as_ref().overrides();
    if rules.is_empty() {
        return Vec::new();
    }
    let view = crate::placement::from_member::cluster_view(mc, true, Vec::new());
    let labels = view.selector_labels();
    let member = crate::overrides::Member {
        name: &view.name,
        region: view.region.as_deref(),
        zone: view.zone.as_deref(),
        labels: &labels,
    };
    rules
        .iter()
        .filter(|r| crate::overrides::selects(r, &member))
        .map(|r| r.name.clone())
        .collect()
}

fn policy_exclusion(
    policy: &crate::placement::model::PlacementPolicy,
    mc: &MemberCluster,
) -> Option<String> {
    let name = mc.name_any();
    let weight = policy
        .weights
        .get(&name)
        .map(|w| i64::from(*w))
        .unwrap_or_else(|| i64::from(mc.spec.weight_or_default()));
    if weight == 0 {
        return Some("weight 0".into());
    }
    if !policy.cluster_names.is_empty() && !policy.cluster_names.contains(&name) {
        return Some("not among the policy's cluster names".into());
    }
    if !policy.zones.is_empty() {
        match &mc.spec.zone {
            None => return Some("has no zone and the policy names zones".into()),
            Some(z) if !policy.zones.contains(z) => {
                return Some(format!("zone {z} is not among the policy's zones"));
            }
            Some(_) => {}
        }
    }
    if let Some(why) = policy
        .cluster_selector
        .first_mismatch(&mc.spec.selector_labels())
    {
        return Some(format!("does not match the cluster selector ({why})"));
    }
    let taints = crate::placement::from_member::taints(mc);
    untolerated(&policy.tolerations, &taints).map(|t| format!("cluster taint {t} is not tolerated"))
}

// ---------------------------------------------------------------------------------------
// Shard map

/// The state of one shard of a job set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ShardState {
    Succeeded,
    Failed,
    /// Given to a cluster, not finished.
    Assigned,
    /// Given to a cluster whose agent says its Job has no pod Ready (application
    /// failover's evidence).
    Unready,
    Unplaced,
}

impl ShardState {
    pub fn as_str(self) -> &'static str {
        match self {
            ShardState::Succeeded => "succeeded",
            ShardState::Failed => "failed",
            ShardState::Assigned => "assigned",
            ShardState::Unready => "unready",
            ShardState::Unplaced => "unplaced",
        }
    }
}

/// One cell of the shard map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardCell {
    pub index: u32,
    pub state: ShardState,
    /// Where it runs or ran.
    pub cluster: Option<String>,
}

/// Every shard of a job set with its state and cluster (at most `limit` cells).
pub fn shard_map(total: u32, s: &HubStatus, limit: u32) -> Vec<ShardCell> {
    let mut owner: BTreeMap<u32, String> = BTreeMap::new();
    // A shard's cluster: where it completed, else where the decision puts it.
    if let Some(p) = &s.placement {
        for pl in &p.placements {
            if let Some(r) = pl.shards.as_deref().and_then(|r| RangeSet::parse(r).ok()) {
                for i in r.iter() {
                    owner.insert(i, pl.cluster.clone());
                }
            }
        }
    }
    for c in &s.clusters {
        if let Some(r) = c
            .completed_shards
            .as_deref()
            .and_then(|r| RangeSet::parse(r).ok())
        {
            for i in r.iter() {
                owner.insert(i, c.cluster.clone());
            }
        }
    }
    // Unready where its own cluster says so (a report from a cluster it left says nothing).
    let unready: BTreeSet<u32> = s
        .clusters
        .iter()
        .filter_map(|c| {
            let r = RangeSet::parse(c.unready_shards.as_deref()?).ok()?;
            Some((c.cluster.as_str(), r))
        })
        .flat_map(|(c, r)| {
            r.iter()
                .filter(|i| owner.get(i).map(String::as_str) == Some(c))
                .collect::<Vec<_>>()
        })
        .collect();
    (0..total.min(limit))
        .map(|i| {
            let cluster = owner.get(&i).cloned();
            let state = if s.completed_shards.contains(i) {
                ShardState::Succeeded
            } else if s.failed_shards.contains(i) {
                ShardState::Failed
            } else if unready.contains(&i) {
                ShardState::Unready
            } else if cluster.is_some() {
                ShardState::Assigned
            } else {
                ShardState::Unplaced
            };
            ShardCell {
                index: i,
                state,
                cluster,
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Rollout

/// A rollout phase's badge colour.
pub fn phase_tone(phase: &str) -> &'static str {
    match phase {
        rp::COMPLETE => "ok",
        rp::PROGRESSING => "info",
        rp::WAITING_FOR_APPROVAL | rp::PAUSED | rp::ROLLING_BACK => "warn",
        rp::ROLLED_BACK | rp::HALTED | rp::INVALID => "bad",
        _ => "muted",
    }
}

/// A member gate state's badge colour.
pub fn gate_tone(state: &str) -> &'static str {
    match state {
        gate::PASSED => "ok",
        gate::UPDATING | gate::SOAKING => "info",
        gate::WAITING | gate::SKIPPED => "muted",
        gate::ROLLING_BACK => "warn",
        gate::FAILED | gate::ROLLED_BACK => "bad",
        _ => "muted",
    }
}

/// Where one stage of a rollout stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageState {
    Done,
    /// Done, with a member that failed it (within the failure budget).
    Failed,
    InProgress,
    WaitingForApproval,
    Paused,
    RollingBack,
    RolledBack,
    Halted,
    Invalid,
    NotStarted,
}

impl StageState {
    /// As `data-state` says it.
    pub fn as_str(self) -> &'static str {
        match self {
            StageState::Done => "done",
            StageState::Failed => "failed",
            StageState::InProgress => "in-progress",
            StageState::WaitingForApproval => "waiting-for-approval",
            StageState::Paused => "paused",
            StageState::RollingBack => "rolling-back",
            StageState::RolledBack => "rolled-back",
            StageState::Halted => "halted",
            StageState::Invalid => "invalid",
            StageState::NotStarted => "not-started",
        }
    }

    /// As people read it, with its mark (the CLI's marks).
    pub fn label(self) -> &'static str {
        match self {
            StageState::Done => "✓ done",
            StageState::Failed => "✗ done, a member failed",
            StageState::InProgress => "▶ in progress",
            StageState::WaitingForApproval => "‖ waiting for approval",
            StageState::Paused => "‖ paused",
            StageState::RollingBack => "↩ rolling back",
            StageState::RolledBack => "↩ rolled back",
            StageState::Halted => "✗ halted",
            StageState::Invalid => "✗ invalid",
            StageState::NotStarted => "· not started",
        }
    }

    pub fn tone(self) -> &'static str {
        match self {
            StageState::Done => "ok",
            StageState::InProgress => "info",
            StageState::WaitingForApproval | StageState::Paused | StageState::RollingBack => "warn",
            StageState::Failed
            | StageState::RolledBack
            | StageState::Halted
            | StageState::Invalid => "bad",
            StageState::NotStarted => "muted",
        }
    }
}

/// One stage of the strip.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageCell {
    pub name: String,
    pub state: StageState,
    /// The stage the rollout stands at.
    pub current: bool,
    /// The policy asks a person to approve it before it starts.
    pub approval: bool,
    /// Its members in this rollout.
    pub members: usize,
}

/// The stages of a rollout in order, each with where it stands (as `pinfed rollout
/// status` draws them). A rollout without stages has one, `all`.
pub fn stage_strip(s: &RolloutStatus, policy: Option<&RolloutPolicy>) -> Vec<StageCell> {
    let names: Vec<String> = if s.stages.is_empty() {
        vec!["all".into()]
    } else {
        s.stages.clone()
    };
    let complete = s.phase == rp::COMPLETE;
    let current = s.stage.unwrap_or(0);
    names
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let index = i32::try_from(i).unwrap_or(i32::MAX);
            let failed = s
                .members
                .iter()
                .any(|m| m.stage == index && m.state == gate::FAILED);
            let state = if complete || index < current {
                if failed {
                    StageState::Failed
                } else {
                    StageState::Done
                }
            } else if index == current {
                match s.phase.as_str() {
                    rp::WAITING_FOR_APPROVAL => StageState::WaitingForApproval,
                    rp::PAUSED => StageState::Paused,
                    rp::ROLLING_BACK => StageState::RollingBack,
                    rp::ROLLED_BACK => StageState::RolledBack,
                    rp::HALTED => StageState::Halted,
                    rp::INVALID => StageState::Invalid,
                    _ => StageState::InProgress,
                }
            } else {
                StageState::NotStarted
            };
            StageCell {
                name,
                state,
                current: !complete && index == current,
                approval: policy
                    .and_then(|p| p.stages.get(i))
                    .is_some_and(|st| st.approval),
                members: s.members.iter().filter(|m| m.stage == index).count(),
            }
        })
        .collect()
}

/// `45s`, `3m12s`, `2h5m`.
pub fn duration(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 if s % 60 == 0 => format!("{}m", s / 60),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        _ => format!("{}h{}m", s / 3600, (s % 3600) / 60),
    }
}

/// One member's gate, as the rollout table shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberGate {
    pub cluster: String,
    /// Its stage's name.
    pub stage: String,
    /// The revision it is told to run.
    pub revision: i64,
    /// The revision it ran when the rollout began.
    pub from_revision: i64,
    pub state: String,
    pub since: Option<Timestamp>,
    /// Why it is where it is: what it waits for (its stage, an approval, a slot, the
    /// soak), its deadline, the hub's message.
    pub why: String,
}

/// The members of a rollout with why each waits, computed at `now` from the status the
/// hub wrote and the policy (soak and deadline; `None`: the federation's default, whose
/// deadline the JSS does not know).
pub fn member_gates(
    s: &RolloutStatus,
    policy: Option<&RolloutPolicy>,
    now: Timestamp,
) -> Vec<MemberGate> {
    let current = s.stage.unwrap_or(0);
    let stage_name = |i: i32| {
        usize::try_from(i)
            .ok()
            .and_then(|i| s.stages.get(i))
            .cloned()
            .unwrap_or_else(|| {
                if s.stages.is_empty() {
                    "all".into()
                } else {
                    format!("stage-{i}")
                }
            })
    };
    let stage_policy =
        |i: i32| policy.and_then(|p| usize::try_from(i).ok().and_then(|i| p.stages.get(i)));
    let secs_since = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.as_ref().map(|t| now.as_second() - t.0.as_second())
    };
    s.members
        .iter()
        .map(|m| {
            let mut why: Vec<String> = Vec::new();
            let mut message = m.message.clone().filter(|x| !x.is_empty());
            match m.state.as_str() {
                gate::WAITING => why.push(match s.phase.as_str() {
                    rp::INVALID => "nobody moves: the policy cannot be applied".into(),
                    rp::ROLLING_BACK | rp::ROLLED_BACK | rp::HALTED => {
                        format!("not started: the rollout stopped ({})", s.phase)
                    }
                    rp::WAITING_FOR_APPROVAL if m.stage == current => format!(
                        "approval needed: stage {:?} starts once a person approves it",
                        stage_name(m.stage)
                    ),
                    rp::PAUSED => "the rollout is paused: no new member starts".into(),
                    _ if m.stage > current => format!(
                        "waits for stage {:?} to pass{}",
                        stage_name(current),
                        if stage_policy(m.stage).is_some_and(|st| st.approval) {
                            ", then for a person to approve its own"
                        } else {
                            ""
                        }
                    ),
                    _ => match stage_policy(m.stage).and_then(|st| st.max_concurrent) {
                        Some(n) => format!("waits for a slot ({n} of its stage change at once)"),
                        None => "starts at the hub's next look".into(),
                    },
                }),
                gate::UPDATING => {
                    let told = secs_since(&m.updated_time);
                    match (told, policy) {
                        (Some(t), Some(p)) => {
                            let left = p.deadline_secs() - t;
                            why.push(if left > 0 {
                                format!(
                                    "updating for {}; deadline in {}",
                                    duration(t),
                                    duration(left)
                                )
                            } else {
                                format!(
                                    "updating for {}; past its deadline ({} s): fails at the hub's next look",
                                    duration(t),
                                    p.deadline_secs()
                                )
                            });
                        }
                        (Some(t), None) => why.push(format!(
                            "updating for {} (deadline: the federation's default)",
                            duration(t)
                        )),
                        (None, _) => why.push("updating".into()),
                    }
                }
                gate::SOAKING => {
                    let soak = stage_policy(m.stage)
                        .and_then(|st| st.soak_seconds)
                        .unwrap_or(0);
                    let soaked = secs_since(&m.since).unwrap_or(0);
                    why.push(format!(
                        "healthy; soak {} left of {}",
                        duration(soak - soaked),
                        duration(soak)
                    ));
                    // The hub's own count is as old as its last look.
                    if message.as_deref().is_some_and(|x| x.starts_with("soaking:")) {
                        message = None;
                    }
                }
                gate::PASSED => why.push("passed its gate".into()),
                _ => {}
            }
            if let Some(x) = message {
                why.push(x);
            }
            MemberGate {
                cluster: m.cluster.clone(),
                stage: stage_name(m.stage),
                revision: m.revision,
                from_revision: m.from_revision,
                state: m.state.clone(),
                since: m.since.as_ref().map(|t| t.0),
                why: why.join(" · "),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn member(v: serde_json::Value) -> MemberCluster {
        serde_json::from_value(v).unwrap()
    }

    fn obj(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn cached_rows_are_rebuilt_only_for_changed_objects_and_gone_ones_are_dropped() {
        let svc = |name: &str, rv: &str, team: &str| {
            (
                WorkloadKind::Service,
                Arc::new(obj(json!({
                    "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
                    "metadata": {"name": name, "namespace": "ads", "uid": format!("uid-{name}"),
                                 "resourceVersion": rv},
                    "spec": {"owner": {"team": team}}
                }))),
            )
        };
        let mut cache = RowCache::default();
        let first = cache.rows(&[svc("a", "1", "ads"), svc("b", "1", "ads")]);
        assert_eq!(cache.len(), 2);
        let second = cache.rows(&[svc("a", "1", "ads"), svc("b", "2", "search")]);
        assert!(Arc::ptr_eq(&first[0], &second[0]), "unchanged: reused");
        assert!(!Arc::ptr_eq(&first[1], &second[1]), "changed: rebuilt");
        assert_eq!(second[1].team, "search");
        let third = cache.rows(&[svc("b", "2", "search")]);
        assert_eq!(cache.len(), 1, "a deleted workload's row goes");
        assert!(Arc::ptr_eq(&second[1], &third[0]));
    }

    fn ready_member(
        name: &str,
        zone: &str,
        status: &str,
        reason: &str,
        since: &str,
    ) -> MemberCluster {
        member(json!({
            "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": name},
            "spec": {"region": "us-east-1", "zone": zone},
            "status": {"conditions": [{"type": "Ready", "status": status, "reason": reason,
                "message": "", "lastTransitionTime": since}],
                "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "440"},
                "allocated": {"cpu": "7500m", "memory": "1Gi", "pods": "12"},
                "available": {"cpu": "24500m", "memory": "127Gi", "pods": "428"}}
        }))
    }

    #[test]
    fn ages_read_like_kubectl() {
        let now = ts("2026-11-23T12:00:00Z");
        assert_eq!(age(now, ts("2026-11-23T11:59:15Z")), "45s");
        assert_eq!(age(now, ts("2026-11-23T11:57:00Z")), "3m");
        assert_eq!(age(now, ts("2026-11-23T09:55:00Z")), "2h5m");
        assert_eq!(age(now, ts("2026-11-23T10:00:00Z")), "2h");
        assert_eq!(age(now, ts("2026-11-19T12:00:00Z")), "4d");
        assert_eq!(
            age(now, ts("2026-11-23T12:00:09Z")),
            "0s",
            "clock skew is not negative"
        );
    }

    #[test]
    fn a_member_is_not_ready_then_lost_after_the_failover_grace() {
        let now = ts("2026-11-23T12:00:00Z");
        let m = ready_member("a", "z", "False", "HeartbeatFailed", "2026-11-23T11:59:50Z");
        assert_eq!(member_health(&m, now).0, Health::NotReady);
        assert!(member_health(&m, now).2.contains("HeartbeatFailed"));
        let m = ready_member("a", "z", "False", "HeartbeatFailed", "2026-11-23T11:58:00Z");
        assert_eq!(member_health(&m, now).0, Health::Lost);
        let m = ready_member("a", "z", "True", "HeartbeatOK", "2026-11-23T11:00:00Z");
        assert_eq!(member_health(&m, now).0, Health::Ready);
        let mut m = ready_member("a", "z", "True", "HeartbeatOK", "2026-11-23T11:59:00Z");
        m.status.as_mut().unwrap().returned_time = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ts("2026-11-23T11:59:00Z")),
        );
        assert_eq!(member_health(&m, now).0, Health::Returned);
        m.metadata.annotations =
            Some([(ANNOTATION_DRAINING.to_string(), "true".to_string())].into());
        assert_eq!(member_health(&m, now).0, Health::Draining);
        let mut m = ready_member("a", "z", "True", "x", "2026-11-23T11:00:00Z");
        m.status = None;
        assert_eq!(member_health(&m, now).0, Health::Unknown);
    }

    #[test]
    fn a_pull_members_credential_is_said_unless_it_lasts() {
        let now = ts("2026-11-23T12:00:00Z");
        let with = |reason: &str| {
            let mut m = ready_member("c", "z", "True", "AgentRenewing", "2026-11-23T11:00:00Z");
            m.status.as_mut().unwrap().conditions.push(Condition {
                type_: crate::api::federation::CONDITION_CREDENTIAL_VALID.into(),
                status: ConditionStatus::True,
                observed_generation: None,
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
                reason: reason.into(),
                message: "renew it".into(),
            });
            member_health(&m, now).2
        };
        assert_eq!(with("Valid"), "AgentRenewing");
        assert_eq!(
            with("EndsSoon"),
            "AgentRenewing; credential EndsSoon: renew it"
        );
    }

    #[test]
    fn a_member_row_carries_its_capacity() {
        let now = ts("2026-11-23T12:00:00Z");
        let r = member_row(
            &ready_member(
                "use1a",
                "us-east-1a",
                "True",
                "HeartbeatOK",
                "2026-11-23T11:00:00Z",
            ),
            3,
            now,
        );
        assert_eq!(r.mode, "Push");
        assert_eq!(r.workloads, 3);
        let cpu = &r.resources[0];
        assert_eq!(cpu.resource, Resource::Cpu);
        assert_eq!(cpu.allocatable, Some(Milli(32000)));
        assert_eq!(cpu.allocated, Some(Milli(7500)));
        assert_eq!(Resource::Cpu.format(Milli(7500)), "7500m");
        assert_eq!(
            Resource::Cpu.format(Milli(7250)),
            "7250m",
            "not rounded to 7.2"
        );
        assert_eq!(
            Resource::Memory.format(Milli(130_624 * (1000 << 20))),
            "130624Mi",
            "not rounded to 127.6Gi"
        );
        assert_eq!(
            Resource::Memory.format(Milli(1536 * (1000 << 20))),
            "1536Mi"
        );
        assert_eq!(Resource::Memory.format(Milli(448 * (1000 << 20))), "448Mi");
        assert_eq!(
            Resource::Memory.format(cpu.allocated.map(|_| Milli(1000 << 30)).unwrap()),
            "1Gi"
        );
        assert_eq!(r.resources[2].allocatable, None, "no GPUs reported");
    }

    fn service(status: serde_json::Value) -> DynamicObject {
        obj(json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
            "metadata": {"name": "web", "namespace": "ads", "creationTimestamp": "2026-11-23T11:00:00Z"},
            "spec": {"owner": {"team": "ads", "contact": "c"}, "replicas": 9,
                "template": {"spec": {"containers": [{"name": "app", "image": "i"}]}}},
            "status": status
        }))
    }

    fn cond(t: &str, s: &str) -> serde_json::Value {
        json!({"type": t, "status": s, "reason": "R", "message": "", "lastTransitionTime": "2026-11-23T11:00:00Z"})
    }

    #[test]
    fn a_service_split_reads_ready_over_placed_per_cluster() {
        let o = service(json!({
            "placement": {"strategy": "Divided", "placements": [
                {"cluster": "use1a", "replicas": 4}, {"cluster": "use1b", "replicas": 3},
                {"cluster": "use1c", "replicas": 2}], "unplaced": 0},
            "clusters": [
                {"cluster": "use1a", "observedTime": "2026-11-23T11:00:00Z", "state": "Ready", "replicas": 4, "readyReplicas": 4},
                {"cluster": "use1b", "observedTime": "2026-11-23T11:00:00Z", "state": "Progressing", "replicas": 3, "readyReplicas": 1}],
            "conditions": [cond("Scheduled", "True"), cond("Ready", "False")]
        }));
        let row = WorkloadRow::of(WorkloadKind::Service, &o);
        assert_eq!(split_text(&row.split), "use1a 4/4 · use1b 1/3 · use1c ?/2");
        assert_eq!(row.state, WorkloadState::Progressing);
        assert_eq!(row.team, "ads");
        assert!(row.on_cluster("use1c") && !row.on_cluster("use1d"));
    }

    #[test]
    fn state_takes_the_worst_condition() {
        let state = |conds: Vec<serde_json::Value>| {
            let o = service(json!({"conditions": conds}));
            workload_state(&o, &HubStatus::of(&o))
        };
        assert_eq!(
            state(vec![cond("Ready", "True"), cond("Scheduled", "True")]),
            WorkloadState::Ready
        );
        assert_eq!(
            state(vec![cond("Ready", "False"), cond("Scheduled", "False")]),
            WorkloadState::Unplaced
        );
        assert_eq!(
            state(vec![
                cond("QuotaExceeded", "True"),
                cond("Scheduled", "False")
            ]),
            WorkloadState::QuotaExceeded
        );
        assert_eq!(
            state(vec![cond("Ready", "True"), cond("Degraded", "True")]),
            WorkloadState::Degraded
        );
        assert_eq!(
            state(vec![cond("Complete", "True")]),
            WorkloadState::Complete
        );
        assert_eq!(state(vec![]), WorkloadState::Progressing);
        let mut o = service(json!({"conditions": [cond("Ready", "True")]}));
        o.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            ts("2026-11-23T11:00:00Z"),
        ));
        assert_eq!(
            workload_state(&o, &HubStatus::of(&o)),
            WorkloadState::Deleting
        );
    }

    #[test]
    fn a_status_part_that_does_not_parse_leaves_the_others() {
        let o = service(json!({"placement": "garbage", "conditions": [cond("Ready", "True")]}));
        let s = HubStatus::of(&o);
        assert!(s.placement.is_none());
        assert_eq!(s.conditions.len(), 1);
    }

    fn row(
        ns: &str,
        name: &str,
        team: &str,
        kind: WorkloadKind,
        state: WorkloadState,
        cluster: &str,
    ) -> WorkloadRow {
        WorkloadRow {
            kind,
            namespace: ns.into(),
            name: name.into(),
            team: team.into(),
            state,
            split: vec![SplitPart {
                cluster: cluster.into(),
                done: Some(1),
                want: Some(1),
                state: None,
            }],
            unplaced: 0,
            created: None,
        }
    }

    #[test]
    fn filters_page_and_group_the_table() {
        let mut rows = Vec::new();
        for i in 0..120 {
            rows.push(row(
                if i % 2 == 0 { "ads" } else { "search" },
                &format!("w{i:03}"),
                if i % 2 == 0 { "ads" } else { "search" },
                if i % 3 == 0 {
                    WorkloadKind::JobSet
                } else {
                    WorkloadKind::Service
                },
                if i % 5 == 0 {
                    WorkloadState::Unplaced
                } else {
                    WorkloadState::Ready
                },
                if i % 4 == 0 { "use1a" } else { "use1b" },
            ));
        }
        let rows: Vec<Arc<WorkloadRow>> = rows.into_iter().map(Arc::new).collect();
        let all = page_of(
            rows.clone(),
            &Filter {
                page: 1,
                ..Filter::default()
            },
        );
        assert_eq!((all.total, all.pages, all.rows.len()), (120, 3, PAGE_SIZE));
        let last = page_of(
            rows.clone(),
            &Filter {
                page: 99,
                ..Filter::default()
            },
        );
        assert_eq!(
            (last.page, last.rows.len()),
            (3, 20),
            "a page past the end is the last"
        );
        let f = Filter {
            namespace: Some("ads".into()),
            kind: Some(WorkloadKind::JobSet),
            cluster: Some("use1a".into()),
            page: 1,
            ..Filter::default()
        };
        let p = page_of(rows.clone(), &f);
        assert!(p.rows.iter().all(|r| r.namespace == "ads"
            && r.kind == WorkloadKind::JobSet
            && r.on_cluster("use1a")));
        assert_eq!(
            p.total, 10,
            "i % 2 == 0, i % 3 == 0, i % 4 == 0 → i % 12 == 0"
        );
        let by_state = page_of(
            rows.clone(),
            &Filter {
                group: Grouping::State,
                page: 1,
                ..Filter::default()
            },
        );
        assert_eq!(
            by_state.rows[0].state,
            WorkloadState::Ready,
            "groups sort by their key"
        );
        let unplaced = page_of(
            rows,
            &Filter {
                state: Some(WorkloadState::Unplaced),
                team: Some("search".into()),
                page: 1,
                ..Filter::default()
            },
        );
        assert_eq!(unplaced.total, 12);
        assert_eq!(
            WorkloadState::parse("unplaced"),
            Some(WorkloadState::Unplaced)
        );
        assert_eq!(Grouping::parse("team"), Some(Grouping::Team));
    }

    #[test]
    fn the_shard_map_colours_every_shard_by_state_and_cluster() {
        let o = obj(json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestJobSet",
            "metadata": {"name": "j", "namespace": "ads"},
            "spec": {},
            "status": {
                "placement": {"placements": [{"cluster": "a", "shards": "0-3"}, {"cluster": "b", "shards": "4-5"}], "unplaced": 2},
                // a says 3 has no pod Ready (5 is b's: a's word on it does not count).
                "clusters": [{"cluster": "a", "observedTime": "2026-11-23T11:00:00Z", "completedShards": "0-1",
                              "unreadyShards": "3,5"}],
                "completedShards": "0-1", "failedShards": "4"
            }
        }));
        let s = HubStatus::of(&o);
        let map = shard_map(8, &s, 10_000);
        let states: Vec<&str> = map.iter().map(|c| c.state.as_str()).collect();
        assert_eq!(
            states,
            [
                "succeeded",
                "succeeded",
                "assigned",
                "unready",
                "failed",
                "assigned",
                "unplaced",
                "unplaced"
            ]
        );
        assert_eq!(map[0].cluster.as_deref(), Some("a"));
        assert_eq!(map[5].cluster.as_deref(), Some("b"));
        assert_eq!(map[7].cluster, None);
        assert_eq!(
            split_text(&split(WorkloadKind::JobSet, &s)),
            "a 2/4 · b ?/2"
        );
        assert_eq!(shard_map(100, &s, 10).len(), 10, "the map is capped");
    }

    #[test]
    fn reasons_name_why_each_member_has_a_share_or_not() {
        let now = ts("2026-11-23T12:00:00Z");
        let mut gpu = ready_member(
            "use1c",
            "us-east-1c",
            "True",
            "HeartbeatOK",
            "2026-11-23T11:00:00Z",
        );
        gpu.spec.taints = vec![
            serde_json::from_value(
                json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}),
            )
            .unwrap(),
        ];
        let members = vec![
            ready_member(
                "use1a",
                "us-east-1a",
                "True",
                "HeartbeatOK",
                "2026-11-23T11:00:00Z",
            ),
            ready_member(
                "use1b",
                "us-east-1b",
                "False",
                "HeartbeatFailed",
                "2026-11-23T11:59:58Z",
            ),
            gpu,
            ready_member(
                "use1d",
                "us-east-1d",
                "True",
                "HeartbeatOK",
                "2026-11-23T11:00:00Z",
            ),
        ];
        let o = service(
            json!({"placement": {"strategy": "Divided", "placements": [{"cluster": "use1a", "replicas": 9}], "unplaced": 0}}),
        );
        let w = crate::api::workload::AnyWorkload::from_dynamic(WorkloadKind::Service, &o)
            .expect("typed");
        let mut w = w;
        if let AnyWorkload::Service(s) = &mut w {
            s.spec.placement.cluster_affinity = Some(
                serde_json::from_value(
                    json!({"zones": ["us-east-1a", "us-east-1b", "us-east-1c"]}),
                )
                .unwrap(),
            );
        }
        if let AnyWorkload::Service(s) = &mut w {
            s.spec.overrides = serde_json::from_value(json!([
                {"name": "mirror-a", "clusterSelector": {"matchLabels": {"topology.kubernetes.io/zone": "us-east-1a"}},
                 "image": {"registry": "m.example"}},
                {"name": "only-b", "clusters": ["use1b"], "image": {"tag": "2"}}
            ]))
            .unwrap();
        }
        let r = member_reasons(Some(&w), &members, &HubStatus::of(&o), now);
        assert_eq!(r[0].share.as_deref(), Some("9 replicas"));
        assert!(r[0].why.contains("Divided"), "{}", r[0].why);
        assert!(r[0].why.ends_with("· overrides: mirror-a"), "{}", r[0].why);
        assert!(r[1].why.starts_with("not ready"), "{}", r[1].why);
        assert!(r[2].why.contains("taint dedicated=gpu"), "{}", r[2].why);
        assert!(
            r[3].why.contains("zone us-east-1d is not among"),
            "{}",
            r[3].why
        );
    }

    fn rollout_status(v: serde_json::Value) -> RolloutStatus {
        serde_json::from_value(v).unwrap()
    }

    fn rollout_policy(v: serde_json::Value) -> RolloutPolicy {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_stage_strip_says_what_is_done_current_and_to_come() {
        let p = rollout_policy(json!({"stages": [
            {"name": "canary", "clusters": ["a"]},
            {"name": "second", "count": 1, "approval": true},
            {"name": "rest"}]}));
        let s = rollout_status(
            json!({"revision": 2, "revisionHash": "h", "stableRevision": 1,
            "phase": "WaitingForApproval", "stage": 1, "stages": ["canary", "second", "rest"],
            "members": [
                {"cluster": "a", "stage": 0, "revision": 2, "fromRevision": 1, "state": "Passed"},
                {"cluster": "b", "stage": 1, "revision": 1, "fromRevision": 1, "state": "Waiting"},
                {"cluster": "c", "stage": 2, "revision": 1, "fromRevision": 1, "state": "Waiting"}]}),
        );
        let strip = stage_strip(&s, Some(&p));
        let got: Vec<(&str, StageState, bool, bool)> = strip
            .iter()
            .map(|c| (c.name.as_str(), c.state, c.current, c.approval))
            .collect();
        assert_eq!(
            got,
            [
                ("canary", StageState::Done, false, false),
                ("second", StageState::WaitingForApproval, true, true),
                ("rest", StageState::NotStarted, false, false)
            ]
        );
        assert_eq!(strip[0].members, 1);
        let mut done = s.clone();
        done.phase = "Complete".into();
        done.stage = None;
        done.members[0].state = "Failed".into();
        let strip = stage_strip(&done, Some(&p));
        assert_eq!(strip[0].state, StageState::Failed, "done, a member failed");
        assert!(strip.iter().all(|c| !c.current));
        assert!(strip[1..].iter().all(|c| c.state == StageState::Done));
        let none = rollout_status(
            json!({"revision": 1, "revisionHash": "h", "phase": "Progressing", "stage": 0}),
        );
        let strip = stage_strip(&none, None);
        assert_eq!(
            (strip.len(), strip[0].name.as_str(), strip[0].state),
            (1, "all", StageState::InProgress)
        );
    }

    #[test]
    fn each_member_says_why_it_waits() {
        let now = ts("2026-11-23T12:00:00Z");
        let p = rollout_policy(json!({"progressDeadlineSeconds": 600, "stages": [
            {"name": "canary", "clusters": ["a", "b", "e"], "soakSeconds": 300, "maxConcurrent": 2},
            {"name": "second", "clusters": ["c"], "approval": true},
            {"name": "rest"}]}));
        let s = rollout_status(
            json!({"revision": 2, "revisionHash": "h", "stableRevision": 1,
            "phase": "Progressing", "stage": 0, "stages": ["canary", "second", "rest"],
            "members": [
                {"cluster": "a", "stage": 0, "revision": 2, "fromRevision": 1, "state": "Soaking",
                 "since": "2026-11-23T11:58:00Z", "message": "soaking: 290 s left"},
                {"cluster": "b", "stage": 0, "revision": 2, "fromRevision": 1, "state": "Updating",
                 "since": "2026-11-23T11:59:00Z", "updatedTime": "2026-11-23T11:59:00Z",
                 "message": "1 of 2 replicas updated"},
                {"cluster": "e", "stage": 0, "revision": 1, "fromRevision": 1, "state": "Waiting"},
                {"cluster": "c", "stage": 1, "revision": 1, "fromRevision": 1, "state": "Waiting"},
                {"cluster": "d", "stage": 2, "revision": 1, "fromRevision": 1, "state": "Waiting"}]}),
        );
        let why: BTreeMap<String, String> = member_gates(&s, Some(&p), now)
            .into_iter()
            .map(|m| (m.cluster, m.why))
            .collect();
        assert_eq!(
            why["a"], "healthy; soak 3m left of 5m",
            "the hub's stale count goes"
        );
        assert_eq!(
            why["b"],
            "updating for 1m; deadline in 9m · 1 of 2 replicas updated"
        );
        assert_eq!(why["e"], "waits for a slot (2 of its stage change at once)");
        assert_eq!(
            why["c"],
            "waits for stage \"canary\" to pass, then for a person to approve its own"
        );
        assert_eq!(why["d"], "waits for stage \"canary\" to pass");

        let mut w = s.clone();
        w.phase = "WaitingForApproval".into();
        w.stage = Some(1);
        let gates = member_gates(&w, Some(&p), now);
        let c = gates.iter().find(|m| m.cluster == "c").unwrap();
        assert!(
            c.why.starts_with("approval needed: stage \"second\""),
            "{}",
            c.why
        );
        assert_eq!(c.stage, "second");

        let mut late = s.clone();
        late.members[1].updated_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            ts("2026-11-23T11:49:00Z"),
        ));
        let gates = member_gates(&late, Some(&p), now);
        assert!(
            gates[1].why.contains("past its deadline (600 s)"),
            "{}",
            gates[1].why
        );
        let gates = member_gates(&late, None, now);
        assert!(
            gates[1].why.contains("deadline: the federation's default"),
            "{}",
            gates[1].why
        );
        assert_eq!(duration(3725), "1h2m");
        assert_eq!(duration(-5), "0s");
        assert_eq!(
            (phase_tone("RolledBack"), gate_tone("Passed")),
            ("bad", "ok")
        );
    }
}

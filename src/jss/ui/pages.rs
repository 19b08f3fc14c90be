//! The bodies of the UI's pages, from plain data. Pure: the handlers in [`super`] read the
//! hub (through [`super::feed`]) and authorize; these only render.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;

use askama::Template;

use super::html::{Bar, Select, render, url_part};
use super::model::{
    Filter, Grouping, Health, MemberGate, MemberReason, MemberRow, Page, Resource, ShardCell,
    ShardState, SplitPart, StageCell, WorkloadRow, WorkloadState, age, priority_text,
};
use super::session::Flash;
use crate::api::common::{
    ApplicationFailoverRecord, Condition, MemberWorkloadStatus, PlacementDecision, PreemptionRecord,
};
use crate::api::federation::ResourceAmounts;
use crate::api::quantity::Milli;
use crate::api::rollout::{RolloutStatus, phase as rollout_phase};
use crate::api::workload::WorkloadKind;
use crate::jss::request::kind_path;
use crate::jss::wire::{QueueEntry, RolloutView};
use crate::placement::model::Resources;

/// Colour classes for clusters (`cl0` … `cl7`), by the members' name order.
pub struct Palette(BTreeMap<String, usize>);

impl Palette {
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Palette {
        Palette(
            names
                .into_iter()
                .enumerate()
                .map(|(i, n)| (n.to_string(), i % 8))
                .collect(),
        )
    }
    pub fn class(&self, cluster: &str) -> String {
        match self.0.get(cluster) {
            Some(i) => format!("cl{i}"),
            None => "cl-none".into(),
        }
    }
}

fn ago(now: Timestamp, t: Option<Timestamp>) -> String {
    t.map(|t| age(now, t)).unwrap_or_else(|| "-".into())
}

/// The link of a workload's page.
pub fn workload_href(kind: WorkloadKind, namespace: &str, name: &str) -> String {
    format!(
        "/ui/workloads/{}/{}/{}",
        url_part(namespace),
        kind_path(kind),
        url_part(name)
    )
}

fn milli_f(m: Option<Milli>) -> f64 {
    m.map_or(0.0, |m| m.0 as f64)
}

// ---------------------------------------------------------------------------------------

/// The login page (`templates/ui/login.html`).
#[derive(Template)]
#[template(path = "ui/login.html")]
struct Login<'a> {
    error: Option<&'a str>,
    next: &'a str,
}

pub fn login(error: Option<&str>, next: &str) -> String {
    render(&Login { error, next })
}

/// A page that says what went wrong (`templates/ui/problem.html`).
#[derive(Template)]
#[template(path = "ui/problem.html")]
struct Problem<'a> {
    code: u16,
    title: &'a str,
    message: &'a str,
}

/// A page that says what went wrong (404, 403, 503...), with a way back.
pub fn problem(code: u16, title: &str, message: &str) -> String {
    render(&Problem {
        code,
        title,
        message,
    })
}

// ---------------------------------------------------------------------------------------

/// The hub's leader, from its Lease.
pub enum Leader {
    Held {
        holder: String,
        renewed: Option<Timestamp>,
        acquired: Option<Timestamp>,
        duration_secs: Option<i32>,
        transitions: Option<i32>,
    },
    NoLease {
        lease: String,
    },
    Unreadable {
        lease: String,
        error: String,
    },
}

/// The leader card of the fleet page.
enum LeaderView<'a> {
    Held {
        /// Renewed within the lease's duration.
        fresh: bool,
        holder: &'a str,
        renewed: String,
        duration: String,
        acquired: String,
        transitions: i32,
    },
    NoLease {
        lease: &'a str,
    },
    Unreadable {
        lease: &'a str,
        error: &'a str,
    },
}

impl<'a> LeaderView<'a> {
    fn of(leader: &'a Leader, now: Timestamp) -> LeaderView<'a> {
        match leader {
            Leader::Held {
                holder,
                renewed,
                acquired,
                duration_secs,
                transitions,
            } => LeaderView::Held {
                fresh: match (renewed, duration_secs) {
                    (Some(r), Some(d)) => now.as_second() - r.as_second() <= i64::from(*d),
                    _ => false,
                },
                holder,
                renewed: ago(now, *renewed),
                duration: duration_secs.map_or("-".into(), |d| d.to_string()),
                acquired: ago(now, *acquired),
                transitions: transitions.unwrap_or(0),
            },
            Leader::NoLease { lease } => LeaderView::NoLease { lease },
            Leader::Unreadable { lease, error } => LeaderView::Unreadable { lease, error },
        }
    }
}

/// One resource's cell of a member's row: a bar of allocated out of allocatable, none
/// without allocatable.
struct ResourceCell {
    resource: &'static str,
    bar: Option<Bar>,
}

/// One member's row of the fleet page.
struct FleetRow<'a> {
    row: &'a MemberRow,
    since: String,
    nodes: String,
    cells: Vec<ResourceCell>,
    /// Its name as the workloads page's `cluster` filter.
    cluster_query: String,
    heartbeat: String,
    draining: bool,
    drain_action: String,
}

#[derive(Template)]
#[template(path = "ui/fleet.html")]
struct Fleet<'a> {
    flash: Option<&'a str>,
    leader: LeaderView<'a>,
    rows: Vec<FleetRow<'a>>,
    /// The admin's CSRF token, when the viewer may drain members.
    drain_csrf: Option<&'a str>,
    headers: Vec<&'static str>,
}

/// `drain_csrf`: the viewer is in an admin team and may drain members (each row gets a
/// Drain or Undrain form carrying this CSRF token).
pub fn fleet(
    rows: &[MemberRow],
    leader: &Leader,
    now: Timestamp,
    flash: Option<&str>,
    drain_csrf: Option<&str>,
) -> String {
    let rows = rows
        .iter()
        .map(|r| FleetRow {
            row: r,
            since: ago(now, r.since),
            nodes: r.nodes.map_or("?".into(), |n| n.to_string()),
            cells: r
                .resources
                .iter()
                .map(|u| ResourceCell {
                    resource: u.resource.as_str(),
                    bar: match u.allocatable {
                        Some(total) if total.0 > 0 => {
                            let used = u.allocated.unwrap_or(Milli(0));
                            Some(Bar::new(
                                milli_f(Some(used)),
                                milli_f(Some(total)),
                                format!(
                                    "{} / {} · {} free",
                                    u.resource.format(used),
                                    u.resource.format(total),
                                    u.available.map_or("?".into(), |a| u.resource.format(a))
                                ),
                            ))
                        }
                        _ => None,
                    },
                })
                .collect(),
            cluster_query: url_part(&r.name),
            heartbeat: ago(now, r.last_heartbeat),
            draining: r.health == Health::Draining,
            drain_action: format!("/ui/members/{}/drain", url_part(&r.name)),
        })
        .collect();
    let mut headers = vec![
        "Member",
        "Mode",
        "Region / zone",
        "Health",
        "Version",
        "CPU allocated",
        "Memory allocated",
        "GPUs allocated",
        "Pods",
        "Workloads",
        "Heartbeat",
    ];
    if drain_csrf.is_some() {
        headers.push("Actions");
    }
    render(&Fleet {
        flash,
        leader: LeaderView::of(leader, now),
        rows,
        drain_csrf,
        headers,
    })
}

// ---------------------------------------------------------------------------------------

/// The choices of the workloads filters.
pub struct FilterChoices {
    pub namespaces: Vec<String>,
    pub teams: Vec<String>,
    pub clusters: Vec<String>,
}

fn pairs(v: &[String]) -> Vec<(String, String)> {
    v.iter().map(|s| (s.clone(), s.clone())).collect()
}

/// The query string of the filter, for paging links.
pub fn filter_query(f: &Filter, page: usize) -> String {
    let mut q = Vec::new();
    let mut add = |k: &str, v: Option<&str>| {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            q.push(format!("{k}={}", url_part(v)));
        }
    };
    add("namespace", f.namespace.as_deref());
    add("kind", f.kind.map(kind_path).as_deref());
    add("team", f.team.as_deref());
    add("state", f.state.map(WorkloadState::as_str));
    add("cluster", f.cluster.as_deref());
    add("name", f.name.as_deref());
    add("group", Some(f.group.as_str()));
    q.push(format!("page={page}"));
    q.join("&")
}

/// How a workload is split across clusters, for the `split` macro: each part with its
/// cluster's colour class, and what is unplaced.
pub struct Split<'a> {
    parts: Vec<(String, &'a SplitPart)>,
    unplaced: i32,
}

impl<'a> Split<'a> {
    pub fn of(row: &'a WorkloadRow, palette: &Palette) -> Split<'a> {
        Split {
            parts: row
                .split
                .iter()
                .map(|p| (palette.class(&p.cluster), p))
                .collect(),
            unplaced: row.unplaced,
        }
    }
}

#[derive(Template)]
#[template(
    source = "{% import \"ui/macros.html\" as m %}{% call m::split(split) %}{% endcall %}",
    ext = "html"
)]
struct SplitCell<'a> {
    split: Split<'a>,
}

/// The split of a workload, as its cell shows it.
pub fn split_cell(row: &WorkloadRow, palette: &Palette) -> String {
    render(&SplitCell {
        split: Split::of(row, palette),
    })
}

/// The selects of the workloads filters.
fn filter_selects(f: &Filter, choices: &FilterChoices) -> Vec<Select> {
    let kinds: Vec<(String, String)> = WorkloadKind::ALL
        .iter()
        .map(|k| (kind_path(*k), k.as_str().to_string()))
        .collect();
    let states: Vec<(String, String)> = WorkloadState::ALL
        .iter()
        .map(|s| (s.as_str().to_string(), s.as_str().to_string()))
        .collect();
    let groups: Vec<(String, String)> = Grouping::ALL[1..]
        .iter()
        .map(|g| (g.as_str().to_string(), g.as_str().to_string()))
        .collect();
    vec![
        Select::new(
            "namespace",
            "Namespace",
            pairs(&choices.namespaces),
            f.namespace.as_deref(),
        ),
        Select::new("kind", "Kind", kinds, f.kind.map(kind_path).as_deref()),
        Select::new("team", "Team", pairs(&choices.teams), f.team.as_deref()),
        Select::new("state", "State", states, f.state.map(WorkloadState::as_str)),
        Select::new(
            "cluster",
            "Cluster",
            pairs(&choices.clusters),
            f.cluster.as_deref(),
        ),
        Select::new("group", "Group by", groups, Some(f.group.as_str())),
    ]
}

/// The workloads page from the rows of the hub's workloads the viewer may see (built
/// once per object change by `model::RowCache`): the filter choices over them, one page.
/// Pure, so its cost at 10,000 workloads is measured (`cargo bench --bench ui`).
pub fn workloads_page(
    rows: Vec<std::sync::Arc<WorkloadRow>>,
    members: &[String],
    filter: &Filter,
    flash: Option<&str>,
    now: Timestamp,
) -> String {
    let set = |f: fn(&WorkloadRow) -> &str| -> Vec<String> {
        rows.iter()
            .map(|r| f(r))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(str::to_string)
            .collect()
    };
    let mut clusters: std::collections::BTreeSet<&str> =
        members.iter().map(String::as_str).collect();
    clusters.extend(
        rows.iter()
            .flat_map(|r| r.split.iter().map(|p| p.cluster.as_str())),
    );
    let choices = FilterChoices {
        namespaces: set(|r| &r.namespace),
        teams: set(|r| &r.team),
        clusters: clusters.into_iter().map(str::to_string).collect(),
    };
    let palette = Palette::new(members.iter().map(String::as_str));
    let page = super::model::page_of(rows, filter);
    workloads(&page, filter, &choices, &palette, flash, now)
}

/// One row of the workloads table.
struct WorkloadsRow<'a> {
    row: &'a WorkloadRow,
    /// The group it opens, when it is the first of its group.
    group: Option<String>,
    kind: &'a str,
    href: String,
    split: Split<'a>,
    age: String,
}

#[derive(Template)]
#[template(path = "ui/workloads.html")]
struct Workloads<'a> {
    flash: Option<&'a str>,
    selects: Vec<Select>,
    name: &'a str,
    /// What the rows are grouped by ("" for nothing).
    group: &'static str,
    rows: Vec<WorkloadsRow<'a>>,
    headers: &'static [&'static str],
    page: &'a Page,
    /// The positions of the page's first and last row in the list (1-based).
    first: usize,
    last: usize,
    /// The query of the previous and the next page, when there are.
    prev: Option<String>,
    next: Option<String>,
}

pub fn workloads(
    page: &Page,
    f: &Filter,
    choices: &FilterChoices,
    palette: &Palette,
    flash: Option<&str>,
    now: Timestamp,
) -> String {
    let mut group: Option<String> = None;
    let rows = page
        .rows
        .iter()
        .map(|r| {
            let mut opens = None;
            if f.group != Grouping::None {
                let key = f.group.key(r);
                if group.as_ref() != Some(&key) {
                    group = Some(key.clone());
                    opens = Some(key);
                }
            }
            WorkloadsRow {
                row: r,
                group: opens,
                kind: r.kind.as_str().trim_start_matches("Pinterest"),
                href: workload_href(r.kind, &r.namespace, &r.name),
                split: Split::of(r, palette),
                age: ago(now, r.created),
            }
        })
        .collect();
    let first = if page.total == 0 {
        0
    } else {
        (page.page - 1) * super::model::PAGE_SIZE + 1
    };
    render(&Workloads {
        flash,
        selects: filter_selects(f, choices),
        name: f.name.as_deref().unwrap_or(""),
        group: f.group.as_str(),
        rows,
        headers: &[
            "Kind",
            "Namespace / name",
            "Team",
            "State",
            "Split (ready / placed per cluster)",
            "Age",
        ],
        page,
        first,
        last: first + page.rows.len().saturating_sub(1),
        prev: (page.page > 1).then(|| filter_query(f, page.page - 1)),
        next: (page.page < page.pages).then(|| filter_query(f, page.page + 1)),
    })
}

// ---------------------------------------------------------------------------------------

/// Everything the workload page shows.
pub struct Detail<'a> {
    pub row: &'a WorkloadRow,
    pub contact: String,
    pub submitted_by: Option<String>,
    pub artifact: Option<String>,
    /// The trace of its last submission through the JSS, when the JSS exports spans
    /// (docs/observability.md).
    pub trace_id: Option<String>,
    pub generation: Option<i64>,
    pub requested: Resources,
    /// `spec.priorityClassName`.
    pub priority_class: Option<String>,
    /// With its queue standing and the preemptions it suffered.
    pub decision: Option<&'a PlacementDecision>,
    pub reasons: Vec<MemberReason>,
    pub slices: &'a [MemberWorkloadStatus],
    pub conditions: &'a [Condition],
    pub failover: Vec<(String, String)>,
    pub shards: Option<(u32, Vec<ShardCell>)>,
    pub events: Result<Vec<Event>, String>,
    pub yaml: String,
    /// `Ok` when the viewer may delete it, else why not.
    pub may_delete: Result<(), String>,
    pub csrf: &'a str,
    pub palette: &'a Palette,
    pub now: Timestamp,
    pub rollout: RolloutPanel<'a>,
    /// What the viewer's last action on this page said.
    pub flash: Option<&'a Flash>,
}

/// The workload's rollout, as `GET .../rollout` gives it.
pub struct RolloutPanel<'a> {
    pub view: &'a RolloutView,
    /// Why the recorded revisions could not be read, when they could not.
    pub history_error: Option<String>,
    /// The hub's `RolledOut` condition.
    pub rolled_out: Option<&'a Condition>,
}

fn amounts_line(r: &Resources) -> String {
    format!(
        "cpu {} · memory {} · GPUs {} · pods {}",
        Resource::Cpu.format(r.cpu),
        Resource::Memory.format(r.memory),
        r.gpu,
        r.pods
    )
}

/// The rollout section of the workload page (`templates/ui/workload/rollout.html`).
struct RolloutSection<'a> {
    /// A change rolling out (not complete): the section comes first.
    rolling: bool,
    status: Option<&'a RolloutStatus>,
    stable: String,
    phase_tone: &'static str,
    message: Option<&'a str>,
    rolled_out: Option<RolledOut<'a>>,
    started: String,
    paused: bool,
    approved: Option<&'a str>,
    policy: String,
    stages: Vec<StageCell>,
    /// Complete: the members, what runs where and the history fold away.
    quiet: bool,
    members: Vec<GateRow>,
    member_headers: &'static [&'static str],
    running: Vec<RunningRow<'a>>,
    running_headers: &'static [&'static str],
    history_error: Option<&'a str>,
    history: Vec<HistoryRow>,
    history_headers: &'static [&'static str],
    /// The rollout's address (`…/rollout`), for its buttons.
    base: String,
    /// The stage waiting for approval and the revision, when one waits.
    approve: Option<(String, i64)>,
    /// The revisions Undo offers: revision, whether stable, its images.
    undo: Vec<(i64, bool, String)>,
}

/// The hub's `RolledOut` condition.
struct RolledOut<'a> {
    status: String,
    tone: &'static str,
    reason: &'a str,
    message: &'a str,
}

/// One member's gate in the rollout.
struct GateRow {
    gate: MemberGate,
    class: String,
    /// Its revision, and the one it comes from when they differ.
    revision: String,
    tone: &'static str,
    since: String,
}

/// One revision and where it runs.
struct RunningRow<'a> {
    revision: i64,
    /// Each member's colour class and name.
    clusters: Vec<(String, &'a str)>,
    replicas: String,
}

/// One recorded revision.
struct HistoryRow {
    revision: i64,
    /// Its badges (current, stable): text and tone.
    marks: Vec<(&'static str, &'static str)>,
    images: String,
    runtime: String,
    recorded: String,
}

impl<'a> RolloutSection<'a> {
    fn of(d: &'a Detail<'a>) -> RolloutSection<'a> {
        let v = d.rollout.view;
        let policy = v.policy.as_ref();
        let r = d.row;
        let status = v.status.as_ref();
        let current = status.map(|s| s.revision);
        RolloutSection {
            rolling: status.is_some_and(|s| s.phase != rollout_phase::COMPLETE),
            status,
            stable: status
                .and_then(|s| s.stable_revision)
                .map_or("none yet".into(), |r| r.to_string()),
            phase_tone: status.map_or("", |s| super::model::phase_tone(&s.phase)),
            message: status
                .and_then(|s| s.message.as_deref())
                .filter(|m| !m.is_empty()),
            rolled_out: d.rollout.rolled_out.map(|c| RolledOut {
                status: format!("{:?}", c.status),
                tone: match c.status {
                    crate::api::common::ConditionStatus::True => "ok",
                    _ => "muted",
                },
                reason: &c.reason,
                message: &c.message,
            }),
            started: status
                .and_then(|s| s.started_time.as_ref())
                .map_or("-".into(), |t| format!("{} ago", age(d.now, t.0))),
            paused: v.paused,
            approved: v.approved.as_deref(),
            policy: match policy {
                Some(p) => format!(
                    "{} stage(s) · deadline {} s per member · failure budget {} · on failure {:?}",
                    p.stages.len().max(1),
                    p.deadline_secs(),
                    p.budget(),
                    p.on_failure.unwrap_or_default()
                ),
                None => "the federation's default (pinfed hub --default-rollout)".into(),
            },
            stages: status.map_or(vec![], |s| super::model::stage_strip(s, policy)),
            quiet: status.is_some_and(|s| s.phase == rollout_phase::COMPLETE),
            members: status.map_or(vec![], |s| {
                super::model::member_gates(s, policy, d.now)
                    .into_iter()
                    .map(|m| GateRow {
                        class: d.palette.class(&m.cluster),
                        revision: if m.from_revision != m.revision {
                            format!("{} (from {})", m.revision, m.from_revision)
                        } else {
                            m.revision.to_string()
                        },
                        tone: super::model::gate_tone(&m.state),
                        since: ago(d.now, m.since),
                        gate: m,
                    })
                    .collect()
            }),
            member_headers: &["Cluster", "Stage", "Revision", "Gate", "Since", "Why"],
            running: status.map_or(vec![], |s| {
                s.running
                    .iter()
                    .map(|run| RunningRow {
                        revision: run.revision,
                        clusters: run
                            .clusters
                            .iter()
                            .map(|c| (d.palette.class(c), c.as_str()))
                            .collect(),
                        replicas: run.replicas.map_or("-".into(), |n| n.to_string()),
                    })
                    .collect()
            }),
            running_headers: &["Revision", "Members", "Replicas / shards"],
            history_error: d.rollout.history_error.as_deref(),
            history: v
                .history
                .iter()
                .rev()
                .map(|e| HistoryRow {
                    revision: e.revision,
                    marks: [
                        e.current.then_some(("current", "info")),
                        e.stable.then_some(("stable", "ok")),
                    ]
                    .into_iter()
                    .flatten()
                    .collect(),
                    images: e.images.join(", "),
                    runtime: e.runtime_version.clone().unwrap_or_else(|| "-".into()),
                    recorded: ago(d.now, e.created.as_ref().map(|t| t.0)),
                })
                .collect(),
            history_headers: &["Revision", "Images", "Runtime", "Recorded"],
            base: format!("{}/rollout", workload_href(r.kind, &r.namespace, &r.name)),
            approve: status
                .filter(|s| s.phase == rollout_phase::WAITING_FOR_APPROVAL)
                .map(|s| {
                    let stage = s.stage.unwrap_or(0);
                    let name = usize::try_from(stage)
                        .ok()
                        .and_then(|i| s.stages.get(i))
                        .cloned()
                        .unwrap_or_else(|| stage.to_string());
                    (name, s.revision)
                }),
            undo: v
                .history
                .iter()
                .rev()
                .filter(|e| Some(e.revision) != current)
                .map(|e| (e.revision, e.stable, e.images.join(", ")))
                .collect(),
        }
    }
}

/// The placement section (`templates/ui/workload/placement.html`).
struct PlacementSection<'a> {
    strategy: String,
    rows: Vec<ReasonRow<'a>>,
    headers: &'static [&'static str],
}

/// One member's reason, with its slice when it has one.
struct ReasonRow<'a> {
    reason: &'a MemberReason,
    class: String,
    slice: Option<&'a MemberWorkloadStatus>,
    /// Its pods or shards.
    counts: String,
    observed: String,
}

fn slice_counts(s: &MemberWorkloadStatus) -> String {
    match (
        s.replicas,
        s.ready_replicas,
        s.shards_running,
        s.shards_succeeded,
    ) {
        (Some(want), ready, _, _) => format!("{}/{want} ready", ready.unwrap_or(0)),
        (None, _, run, done) if run.is_some() || done.is_some() => format!(
            "{} running · {} succeeded · {} failed",
            run.unwrap_or(0),
            done.unwrap_or(0),
            s.shards_failed.unwrap_or(0)
        ),
        _ => String::new(),
    }
}

/// The queue section (`templates/ui/workload/queue.html`): shown when the workload waits
/// or was preempted.
struct QueueSection<'a> {
    decision: Option<&'a PlacementDecision>,
    priority: String,
    since: String,
    preemptions: Vec<PreemptionRow<'a>>,
    headers: &'static [&'static str],
}

struct PreemptionRow<'a> {
    record: &'a PreemptionRecord,
    ago: String,
    class: String,
    /// What it took: pods, and which replicas or shards.
    taken: String,
}

/// One member application failover moved the workload off.
struct AppFailoverRow<'a> {
    record: &'a ApplicationFailoverRecord,
    ago: String,
    class: String,
}

/// The shard map (`templates/ui/workload/shards.html`).
struct ShardsSection<'a> {
    total: u32,
    succeeded: usize,
    failed: usize,
    unready: usize,
    unplaced: usize,
    /// How many cells are shown (the first of the shards).
    shown: u32,
    cells: Vec<ShardView<'a>>,
}

struct ShardView<'a> {
    cell: &'a ShardCell,
    cluster: &'a str,
    class: String,
}

/// One condition of the hub resource.
struct ConditionRow<'a> {
    condition: &'a Condition,
    status: String,
    tone: &'static str,
    since: String,
}

/// One hub Event.
struct EventRow<'a> {
    type_: &'a str,
    reason: &'a str,
    message: &'a str,
    count: i32,
    last: String,
}

/// The workload page (`templates/ui/workload.html` and its sections in
/// `templates/ui/workload/`).
#[derive(Template)]
#[template(path = "ui/workload.html")]
struct WorkloadPage<'a> {
    d: &'a Detail<'a>,
    r: &'a WorkloadRow,
    /// The workload's page, the base of its actions.
    href: String,
    generation: String,
    requested: String,
    age: String,
    split: Split<'a>,
    rollout: RolloutSection<'a>,
    placement: PlacementSection<'a>,
    queue: QueueSection<'a>,
    app_failovers: Vec<AppFailoverRow<'a>>,
    app_failover_headers: &'static [&'static str],
    shards: Option<ShardsSection<'a>>,
    conditions: Vec<ConditionRow<'a>>,
    condition_headers: &'static [&'static str],
    events: Result<Vec<EventRow<'a>>, &'a str>,
    event_headers: &'static [&'static str],
}

pub fn workload(d: &Detail<'_>) -> String {
    let r = d.row;
    let count = |cells: &[ShardCell], state| cells.iter().filter(|c| c.state == state).count();
    render(&WorkloadPage {
        d,
        r,
        href: workload_href(r.kind, &r.namespace, &r.name),
        generation: d.generation.map_or("-".into(), |g| g.to_string()),
        requested: amounts_line(&d.requested),
        age: ago(d.now, r.created),
        split: Split::of(r, d.palette),
        rollout: RolloutSection::of(d),
        placement: PlacementSection {
            strategy: d
                .decision
                .and_then(|p| p.strategy)
                .map_or("-".into(), |s| format!("{s:?}")),
            rows: d
                .reasons
                .iter()
                .map(|m| {
                    let slice = d.slices.iter().find(|s| s.cluster == m.cluster);
                    ReasonRow {
                        reason: m,
                        class: d.palette.class(&m.cluster),
                        counts: slice.map(slice_counts).unwrap_or_default(),
                        observed: slice.map_or(String::new(), |s| age(d.now, s.observed_time.0)),
                        slice,
                    }
                })
                .collect(),
            headers: &[
                "Cluster",
                "Share",
                "Why",
                "Slice state",
                "Pods / shards",
                "Observed",
                "Message",
            ],
        },
        queue: {
            let decision = d
                .decision
                .filter(|p| p.queue.is_some() || !p.preemptions.is_empty());
            let q = decision.and_then(|p| p.queue.as_ref());
            QueueSection {
                decision,
                priority: q.map_or(String::new(), |q| {
                    priority_text(
                        q.priority,
                        q.effective_priority,
                        q.priority_class_name.as_deref(),
                    )
                }),
                since: q.map_or(String::new(), |q| age(d.now, q.since.0)),
                preemptions: decision.map_or(vec![], |p| {
                    p.preemptions
                        .iter()
                        .map(|e| PreemptionRow {
                            record: e,
                            ago: age(d.now, e.time.0),
                            class: d.palette.class(&e.cluster),
                            taken: match (e.replicas, &e.shards) {
                                (Some(r), _) => format!("{} pods ({r} replicas)", e.pods),
                                (None, Some(sh)) => format!("{} pods (shards {sh})", e.pods),
                                (None, None) => format!("{} pods", e.pods),
                            },
                        })
                        .collect()
                }),
                headers: &["Ago", "Cluster", "Taken", "By", "Its priority", "Reason"],
            }
        },
        app_failovers: d.decision.map_or(vec![], |p| {
            p.application_failovers
                .iter()
                .map(|f| AppFailoverRow {
                    record: f,
                    ago: age(d.now, f.time.0),
                    class: d.palette.class(&f.cluster),
                })
                .collect()
        }),
        app_failover_headers: &["Ago", "Cluster", "Avoided for generation", "Reason"],
        shards: d.shards.as_ref().map(|(total, cells)| ShardsSection {
            total: *total,
            succeeded: count(cells, ShardState::Succeeded),
            failed: count(cells, ShardState::Failed),
            unready: count(cells, ShardState::Unready),
            unplaced: count(cells, ShardState::Unplaced),
            shown: cells.len() as u32,
            cells: cells
                .iter()
                .map(|c| {
                    let cluster = c.cluster.as_deref().unwrap_or("");
                    ShardView {
                        cell: c,
                        cluster,
                        class: d.palette.class(cluster),
                    }
                })
                .collect(),
        }),
        conditions: d
            .conditions
            .iter()
            .map(|c| ConditionRow {
                condition: c,
                status: format!("{:?}", c.status),
                tone: match c.status {
                    crate::api::common::ConditionStatus::True => "ok",
                    crate::api::common::ConditionStatus::False => "muted",
                    crate::api::common::ConditionStatus::Unknown => "warn",
                },
                since: age(d.now, c.last_transition_time.0),
            })
            .collect(),
        condition_headers: &["Type", "Status", "Reason", "Message", "Since"],
        events: match &d.events {
            Ok(events) => Ok(events
                .iter()
                .map(|e| EventRow {
                    type_: e.type_.as_deref().unwrap_or(""),
                    reason: e.reason.as_deref().unwrap_or(""),
                    message: e.message.as_deref().unwrap_or(""),
                    count: e.count.unwrap_or(1),
                    last: ago(
                        d.now,
                        e.last_timestamp
                            .as_ref()
                            .map(|t| t.0)
                            .or(e.event_time.as_ref().map(|t| t.0))
                            .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0)),
                    ),
                })
                .collect()),
            Err(e) => Err(e.as_str()),
        },
        event_headers: &["Type", "Reason", "Message", "Count", "Last"],
    })
}

// ---------------------------------------------------------------------------------------

/// One FederatedQuota as the quotas page shows it.
pub struct QuotaView {
    pub namespace: String,
    pub name: String,
    pub hard: ResourceAmounts,
    pub used: ResourceAmounts,
    pub requested: Option<Resources>,
    pub per_cluster: BTreeMap<String, (ResourceAmounts, ResourceAmounts)>,
}

fn amount(a: &ResourceAmounts, r: Resource) -> Option<Milli> {
    let q = match r {
        Resource::Cpu => &a.cpu,
        Resource::Memory => &a.memory,
        Resource::Gpus => &a.gpus,
        Resource::Pods => &a.pods,
    };
    q.as_ref().and_then(|q| Milli::parse(&q.0).ok())
}

/// One resource's cell of a quota row.
struct QuotaCell {
    resource: &'static str,
    /// Used out of hard.
    bar: Option<Bar>,
    /// What is used where there is no limit.
    used: Option<String>,
}

fn quota_cells(hard: &ResourceAmounts, used: &ResourceAmounts) -> Vec<QuotaCell> {
    Resource::ALL
        .into_iter()
        .map(|r| match amount(hard, r) {
            Some(total) => {
                let u = amount(used, r).unwrap_or(Milli(0));
                QuotaCell {
                    resource: r.as_str(),
                    bar: Some(Bar::new(
                        milli_f(Some(u)),
                        milli_f(Some(total)),
                        format!("{} / {}", r.format(u), r.format(total)),
                    )),
                    used: None,
                }
            }
            None => QuotaCell {
                resource: r.as_str(),
                bar: None,
                used: amount(used, r).map(|u| r.format(u)),
            },
        })
        .collect()
}

/// One quota's rows: all clusters, then each cluster's.
struct QuotaRow<'a> {
    namespace: &'a str,
    name: &'a str,
    cells: Vec<QuotaCell>,
    requested: String,
    per_cluster: Vec<(&'a str, Vec<QuotaCell>)>,
}

#[derive(Template)]
#[template(path = "ui/quotas.html")]
struct Quotas<'a> {
    rows: Vec<QuotaRow<'a>>,
    headers: &'static [&'static str],
}

pub fn quotas(items: &[QuotaView]) -> String {
    render(&Quotas {
        rows: items
            .iter()
            .map(|q| QuotaRow {
                namespace: &q.namespace,
                name: &q.name,
                cells: quota_cells(&q.hard, &q.used),
                requested: q.requested.as_ref().map_or("-".into(), amounts_line),
                per_cluster: q
                    .per_cluster
                    .iter()
                    .map(|(cluster, (hard, used))| (cluster.as_str(), quota_cells(hard, used)))
                    .collect(),
            })
            .collect(),
        headers: &["Quota", "CPU", "Memory", "GPUs", "Pods", "Requested"],
    })
}

// ---------------------------------------------------------------------------------------

/// One waiting workload's row of the queue page.
struct QueueRow<'a> {
    entry: &'a QueueEntry,
    /// Effective priority, and the base one when raised.
    priority: String,
    href: String,
    kind: &'static str,
    since: String,
    age: String,
}

#[derive(Template)]
#[template(path = "ui/queue.html")]
struct Queue<'a> {
    rows: Vec<QueueRow<'a>>,
    headers: &'static [&'static str],
}

/// The hub's queue: the waiting workloads the viewer may see, first in line first.
pub fn queue(items: &[QueueEntry], now: Timestamp) -> String {
    render(&Queue {
        rows: items
            .iter()
            .map(|e| QueueRow {
                entry: e,
                priority: if e.effective_priority == e.priority {
                    e.priority.to_string()
                } else {
                    format!("{} ({})", e.effective_priority, e.priority)
                },
                href: workload_href(e.kind, &e.namespace, &e.name),
                kind: e.kind.as_str().trim_start_matches("Pinterest"),
                since: e.since.0.to_string(),
                age: age(now, e.since.0),
            })
            .collect(),
        headers: &[
            "Position",
            "Priority",
            "Class",
            "Workload",
            "Team",
            "Unplaced",
            "Waiting",
            "Waiting for",
        ],
    })
}

// ---------------------------------------------------------------------------------------

/// One team's part of the owners report.
pub struct TeamView {
    pub team: String,
    pub contacts: Vec<String>,
    pub clusters: Vec<String>,
    pub requested: Resources,
    pub workloads: Vec<OwnedRow>,
}

/// One workload of a team in the owners report.
pub struct OwnedRow {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    pub clusters: Vec<String>,
    pub requested: Resources,
    /// When it may be garbage collected (its RuntimeProfile's `expiryDays` after creation).
    pub expires_at: Option<k8s_openapi::jiff::Timestamp>,
    pub expired: bool,
}

/// One team's section of the owners page.
struct OwnersTeam<'a> {
    team: &'a str,
    contacts: String,
    clusters: String,
    requested: String,
    /// How many of its workloads are past their expiry.
    expired: usize,
    expired_text: String,
    workloads: Vec<OwnersRow<'a>>,
}

/// One workload's row in its team's table.
struct OwnersRow<'a> {
    kind: &'static str,
    namespace: &'a str,
    name: &'a str,
    /// Each cluster's colour class and name.
    clusters: Vec<(String, &'a str)>,
    requested: String,
    expires_at: Option<String>,
    expired: bool,
}

#[derive(Template)]
#[template(path = "ui/owners.html")]
struct Owners<'a> {
    teams: Vec<OwnersTeam<'a>>,
    headers: &'static [&'static str],
}

pub fn owners(teams: &[TeamView], palette: &Palette) -> String {
    let teams = teams
        .iter()
        .map(|t| {
            let expired = t.workloads.iter().filter(|w| w.expired).count();
            OwnersTeam {
                team: &t.team,
                contacts: t.contacts.join(", "),
                clusters: if t.clusters.is_empty() {
                    "no cluster".into()
                } else {
                    t.clusters.join(", ")
                },
                requested: amounts_line(&t.requested),
                expired,
                expired_text: format!("{expired} past expiry"),
                workloads: t
                    .workloads
                    .iter()
                    .map(|w| OwnersRow {
                        kind: w.kind.as_str().trim_start_matches("Pinterest"),
                        namespace: &w.namespace,
                        name: &w.name,
                        clusters: w
                            .clusters
                            .iter()
                            .map(|c| (palette.class(c), c.as_str()))
                            .collect(),
                        requested: amounts_line(&w.requested),
                        expires_at: w.expires_at.map(|t| t.to_string()),
                        expired: w.expired,
                    })
                    .collect(),
            }
        })
        .collect();
    render(&Owners {
        teams,
        headers: &[
            "Kind",
            "Namespace / name",
            "Clusters",
            "Requested",
            "Expires",
        ],
    })
}

#[cfg(test)]
mod golden;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_show_when_each_workload_expires_and_count_what_is_past() {
        let row = |name: &str, at: Option<&str>, expired: bool| OwnedRow {
            kind: WorkloadKind::Service,
            namespace: "ads".into(),
            name: name.into(),
            clusters: vec!["use1a".into()],
            requested: Resources::ZERO,
            expires_at: at.map(|t| t.parse().unwrap()),
            expired,
        };
        let teams = [TeamView {
            team: "ads".into(),
            contacts: vec!["ads@pinterest.com".into()],
            clusters: vec!["use1a".into()],
            requested: Resources::ZERO,
            workloads: vec![
                row("old", Some("2026-01-01T00:00:00Z"), true),
                row("new", Some("2027-01-01T00:00:00Z"), false),
                row("unknown", None, false),
            ],
        }];
        let h = owners(&teams, &Palette::new(["use1a"]));
        assert!(h.contains("1 past expiry"), "{h}");
        assert!(h.contains("<th>Expires</th>"), "{h}");
        assert!(
            h.contains("data-expired=\"true\"")
                && h.contains("Expired</span> 2026-01-01T00:00:00Z"),
            "{h}"
        );
        assert!(
            h.contains("<td class=\"expires\">2027-01-01T00:00:00Z</td>"),
            "{h}"
        );
        assert!(h.contains("<td class=\"expires\">-</td>"), "{h}");
    }

    #[test]
    fn the_split_cell_colours_each_cluster_and_says_what_is_unplaced() {
        let row = WorkloadRow {
            kind: WorkloadKind::Service,
            namespace: "ads".into(),
            name: "web".into(),
            team: "ads".into(),
            state: WorkloadState::Ready,
            split: vec![
                SplitPart {
                    cluster: "use1a".into(),
                    done: Some(4),
                    want: Some(4),
                    state: None,
                },
                SplitPart {
                    cluster: "use1b".into(),
                    done: Some(3),
                    want: Some(3),
                    state: None,
                },
            ],
            unplaced: 2,
            created: None,
        };
        let p = Palette::new(["use1a", "use1b"]);
        let cell = split_cell(&row, &p);
        assert!(cell.contains("<span class=\"part cl0\">use1a 4/4</span> · <span class=\"part cl1\">use1b 3/3</span>"), "{cell}");
        assert!(cell.contains("2 unplaced"));
    }

    pub(super) fn member_row(name: &str, health: Health) -> MemberRow {
        MemberRow {
            name: name.into(),
            mode: "Push",
            region: String::new(),
            zone: String::new(),
            health,
            since: None,
            message: String::new(),
            version: String::new(),
            nodes: None,
            last_heartbeat: None,
            resources: vec![],
            workloads: 0,
            taints: vec![],
            weight: 1,
        }
    }

    #[test]
    fn only_admins_get_drain_forms_and_a_draining_member_offers_undrain() {
        let rows = [
            member_row("use1a", Health::Ready),
            member_row("use1b", Health::Draining),
        ];
        let leader = Leader::NoLease {
            lease: "pinfed-system/pinfed-hub".into(),
        };
        let now = Timestamp::UNIX_EPOCH;
        let plain = fleet(&rows, &leader, now, None, None);
        assert!(!plain.contains("/drain"), "{plain}");
        assert!(!plain.contains("<th>Actions</th>"));
        let admin = fleet(&rows, &leader, now, Some("use1b is draining"), Some("tok<"));
        assert!(admin.contains("<th>Actions</th>"));
        assert!(admin.contains("id=\"flash\">use1b is draining</p>"));
        assert!(admin.contains(
            "<td id=\"drain-cell-use1a\"><details><summary id=\"drain-open-use1a\">Drain…</summary>\
             <form method=\"post\" action=\"/ui/members/use1a/drain\"><input type=\"hidden\" name=\"csrf\" value=\"tok&lt;\">\
             <input type=\"hidden\" name=\"drain\" value=\"true\">"
        ), "{admin}");
        assert!(admin.contains(
            "<input type=\"hidden\" name=\"drain\" value=\"false\">\
             <button type=\"submit\" id=\"undrain-use1b\">Undrain</button>"
        ));
        assert!(!admin.contains("id=\"drain-use1b\""));
    }

    pub(super) fn rollout_view(phase: &str, paused: bool) -> RolloutView {
        serde_json::from_value(serde_json::json!({
            "workload": {"kind": "PinterestService", "namespace": "ads", "name": "web"},
            "status": {"revision": 2, "revisionHash": "h", "stableRevision": 1, "phase": phase,
                "stage": 0, "stages": ["<first>", "rest"], "startedTime": "2026-11-23T11:59:00Z",
                "message": "stage <first> waits for approval",
                "members": [
                    {"cluster": "use1a", "stage": 0, "revision": 1, "fromRevision": 1, "state": "Waiting",
                     "since": "2026-11-23T11:59:00Z"},
                    {"cluster": "use1b", "stage": 1, "revision": 1, "fromRevision": 1, "state": "Waiting",
                     "message": "<script>x</script>"}],
                "running": [{"revision": 1, "clusters": ["use1a", "use1b"], "replicas": 4}]},
            "policy": {"stages": [{"name": "<first>", "approval": true, "clusters": ["use1a"]}, {"name": "rest"}],
                "progressDeadlineSeconds": 60},
            "paused": paused,
            "history": [
                {"revision": 1, "images": ["app:1"], "stable": true},
                {"revision": 2, "images": ["app:<2>"], "current": true}]
        }))
        .unwrap()
    }

    fn rollout_page(view: &RolloutView, may: Result<(), String>, flash: Option<&Flash>) -> String {
        let row = WorkloadRow {
            kind: WorkloadKind::Service,
            namespace: "ads".into(),
            name: "web".into(),
            team: "ads".into(),
            state: WorkloadState::Ready,
            split: vec![],
            unplaced: 0,
            created: None,
        };
        let palette = Palette::new(["use1a", "use1b"]);
        let d = Detail {
            row: &row,
            contact: "c".into(),
            submitted_by: None,
            artifact: None,
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
            generation: None,
            requested: Resources::ZERO,
            priority_class: None,
            decision: None,
            reasons: vec![],
            slices: &[],
            conditions: &[],
            failover: vec![],
            shards: None,
            events: Ok(vec![]),
            yaml: String::new(),
            may_delete: may,
            csrf: "tok\"",
            palette: &palette,
            now: "2026-11-23T12:00:00Z".parse().unwrap(),
            rollout: RolloutPanel {
                view,
                history_error: None,
                rolled_out: None,
            },
            flash,
        };
        workload(&d)
    }

    #[test]
    fn the_queue_page_lists_entries_first_in_line_first_and_escapes_what_the_hub_wrote() {
        use crate::jss::views::tests::waiting;
        let objects = [
            (
                WorkloadKind::JobSet,
                waiting(
                    "PinterestJobSet",
                    "ads",
                    "later",
                    "ads",
                    3,
                    "2026-11-23T11:00:00Z",
                ),
            ),
            (
                WorkloadKind::TrainingJob,
                waiting(
                    "PinterestTrainingJob",
                    "ml",
                    "next",
                    "ml",
                    1,
                    "2026-11-23T11:57:00Z",
                ),
            ),
        ];
        let mut items =
            crate::jss::views::queue(objects.iter().map(|(k, o)| (*k, o)), None, |_, _| true);
        items[0].waiting_for = "room in <script>alert(1)</script> & more".into();
        items[1].effective_priority = items[1].priority;
        items[1].priority_class_name = None;
        let h = queue(&items, "2026-11-23T12:00:00Z".parse().unwrap());
        let (next, later) = (
            h.find("data-name=\"next\"").unwrap(),
            h.find("data-name=\"later\"").unwrap(),
        );
        assert!(next < later, "{h}");
        assert!(
            h.contains(
                "<tr data-position=\"1\" data-kind=\"PinterestTrainingJob\" data-namespace=\"ml\" data-name=\"next\">\
                 <td class=\"position\">1 of 4</td><td>1010 (1000)</td><td>high</td>\
                 <td><a href=\"/ui/workloads/ml/trainingjob/next\"><span class=\"muted\">TrainingJob</span> ml/next</a></td>\
                 <td>ml</td><td>3</td><td title=\"2026-11-23T11:57:00Z\">3m</td>"
            ),
            "{h}"
        );
        assert!(
            h.contains("<td class=\"waiting-for\">room in &lt;script&gt;alert(1)&lt;/script&gt; &amp; more</td>"),
            "{h}"
        );
        assert!(!h.contains("<script>"), "{h}");
        assert!(
            h.contains("<td class=\"position\">3 of 4</td><td>1000</td><td>-</td>"),
            "{h}"
        );
        assert!(
            h.contains("<td title=\"2026-11-23T11:00:00Z\">1h</td>"),
            "{h}"
        );
        let empty = queue(&[], Timestamp::UNIX_EPOCH);
        assert!(
            empty.contains("<tr class=\"empty\"><td colspan=\"8\">Nothing waits.</td></tr>"),
            "{empty}"
        );
    }

    #[test]
    fn the_workload_page_shows_its_queue_standing_preemptions_and_priority_class_escaped() {
        let decision: PlacementDecision = serde_json::from_value(serde_json::json!({
            "placements": [{"cluster": "use1a", "shards": "0-3"}], "unplaced": 3,
            "queue": {"position": 2, "waiting": 5, "priority": 1000, "effectivePriority": 1010,
                "priorityClassName": "high", "since": "2026-11-23T11:57:00Z",
                "waitingFor": "room in use1b <script>alert(1)</script>"},
            "preemptions": [{"by": "PinterestTrainingJob/ml/<big>", "byPriority": 2000,
                "cluster": "use1a", "pods": 3, "shards": "4-6", "time": "2026-11-23T11:58:00Z",
                "reason": "room for <big>"}]
        }))
        .unwrap();
        let view = rollout_view("Complete", false);
        let page = |decision: Option<&PlacementDecision>, class: Option<&str>| {
            let row = WorkloadRow {
                kind: WorkloadKind::JobSet,
                namespace: "ml".into(),
                name: "small".into(),
                team: "ml".into(),
                state: WorkloadState::Unplaced,
                split: vec![],
                unplaced: 3,
                created: None,
            };
            let palette = Palette::new(["use1a", "use1b"]);
            workload(&Detail {
                row: &row,
                contact: "c".into(),
                submitted_by: None,
                artifact: None,
                trace_id: None,
                generation: None,
                requested: Resources::ZERO,
                priority_class: class.map(String::from),
                decision,
                reasons: vec![],
                slices: &[],
                conditions: &[],
                failover: vec![],
                shards: None,
                events: Ok(vec![]),
                yaml: String::new(),
                may_delete: Ok(()),
                csrf: "tok",
                palette: &palette,
                now: "2026-11-23T12:00:00Z".parse().unwrap(),
                rollout: RolloutPanel {
                    view: &view,
                    history_error: None,
                    rolled_out: None,
                },
                flash: None,
            })
        };
        let h = page(Some(&decision), Some("<high>"));
        assert!(
            h.contains("<dt>Priority class</dt><dd id=\"priority-class\">&lt;high&gt;</dd>"),
            "{h}"
        );
        assert!(
            h.contains(
                "<p id=\"queue-standing\" data-position=\"2\">Waits at position <strong>2</strong> of 5 \
                 in <a href=\"/ui/queue\">the hub's queue</a> · priority 1000 (effective 1010, class high) · waiting 3m: \
                 <span class=\"waiting-for\">room in use1b &lt;script&gt;alert(1)&lt;/script&gt;</span></p>"
            ),
            "{h}"
        );
        assert!(
            h.contains(
                "<tr class=\"preemption\" data-cluster=\"use1a\"><td>2m</td><td><span class=\"part cl0\">use1a</span></td>\
                 <td>3 pods (shards 4-6)</td><td>PinterestTrainingJob/ml/&lt;big&gt;</td><td>2000</td><td>room for &lt;big&gt;</td></tr>"
            ),
            "{h}"
        );
        assert!(!h.contains("<script>") && !h.contains("<big>"), "{h}");
        // After the placement, before the rollout of a finished change.
        let (placement, q, rollout) = (
            h.find("id=\"placement\"").unwrap(),
            h.find("id=\"queue\"").unwrap(),
            h.find("id=\"rollout\"").unwrap(),
        );
        assert!(placement < q && q < rollout, "{h}");
        // Placed since, a preemption remembered: no standing, the preemption still shown.
        let mut placed = decision.clone();
        placed.queue = None;
        let h = page(Some(&placed), None);
        assert!(
            h.contains("Not waiting: everything is placed.") && h.contains("class=\"preemption\""),
            "{h}"
        );
        assert!(h.contains("<dd id=\"priority-class\">-</dd>"), "{h}");
        // Neither: no section.
        placed.preemptions.clear();
        assert!(!page(Some(&placed), None).contains("id=\"queue\""));
        assert!(!page(None, None).contains("id=\"queue\""));
        assert!(!page(Some(&placed), None).contains("id=\"app-failovers\""));
        // A member application failover moved it off: shown, escaped.
        placed.application_failovers = vec![crate::api::common::ApplicationFailoverRecord {
            cluster: "use1b".into(),
            generation: 4,
            time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-23T11:59:00Z".parse().unwrap(),
            ),
            reason: "0 of 2 replicas available in use1b <b>".into(),
        }];
        let h = page(Some(&placed), None);
        assert!(
            h.contains(
                "<tr class=\"app-failover\" data-cluster=\"use1b\"><td>1m</td><td><span class=\"part cl1\">use1b</span></td>\
                 <td>4</td><td>0 of 2 replicas available in use1b &lt;b&gt;</td></tr>"
            ),
            "{h}"
        );
    }

    #[test]
    fn the_workload_page_shows_the_trace_of_its_last_submission() {
        let h = rollout_page(&rollout_view("Complete", false), Ok(()), None);
        assert!(
            h.contains("<dt>Trace</dt><dd><code id=\"trace\">4bf92f3577b34da6a3ce929d0e0e4736</code></dd></dl>"),
            "{h}"
        );
    }

    #[test]
    fn the_rollout_section_shows_the_strip_members_and_history_escaped() {
        let v = rollout_view("WaitingForApproval", false);
        let h = rollout_page(&v, Ok(()), None);
        assert!(
            h.contains("id=\"rollout\" data-phase=\"WaitingForApproval\" data-revision=\"2\""),
            "{h}"
        );
        assert!(h.contains("<dd id=\"rollout-stable\">1</dd>"), "{h}");
        assert!(
            h.contains("<li class=\"stage warn current\" data-stage=\"&lt;first&gt;\" data-index=\"0\" data-state=\"waiting-for-approval\">"),
            "{h}"
        );
        assert!(h.contains("data-state=\"not-started\""), "{h}");
        assert!(
            h.contains("approval needed: stage &quot;&lt;first&gt;&quot;"),
            "{h}"
        );
        assert!(h.contains("&lt;script&gt;x&lt;/script&gt;"), "{h}");
        assert!(!h.contains("<script>x") && !h.contains("<first>") && !h.contains("app:<2>"));
        assert!(
            h.contains("<tr data-revision=\"1\"><td>1</td>"),
            "what runs where: {h}"
        );
        assert!(h.contains("app:&lt;2&gt;"), "{h}");
        // The owner's buttons, each with the CSRF token.
        assert!(h.contains(
            "<form method=\"post\" action=\"/ui/workloads/ads/service/web/rollout/approve\"><input type=\"hidden\" name=\"csrf\" value=\"tok&quot;\">\
             <input type=\"hidden\" name=\"stage\" value=\"&lt;first&gt;\"><input type=\"hidden\" name=\"revision\" value=\"2\">"
        ), "{h}");
        assert!(h.contains("id=\"rollout-pause\"") && !h.contains("id=\"rollout-resume\""));
        assert!(
            h.contains("<option value=\"1\">1 (stable) · app:1</option>")
                && !h.contains("<option value=\"2\">"),
            "undo offers the revisions other than the current: {h}"
        );
        // Not waiting: no Approve; paused: Resume.
        let h = rollout_page(&rollout_view("Progressing", true), Ok(()), None);
        assert!(!h.contains("rollout-approve") && h.contains("id=\"rollout-resume\""));
        assert!(h.contains("data-state=\"in-progress\""));
        // Nothing rolling out: the detail folds away; nothing to undo to: no Undo.
        assert!(!h.contains("id=\"rollout-detail\""));
        let mut done = rollout_view("Complete", false);
        let h = rollout_page(&done, Ok(()), None);
        assert!(h.contains("<div id=\"rollout-detail\"><details>"), "{h}");
        assert!(h.contains("id=\"rollout-undo\""));
        done.history.retain(|e| e.current);
        let h = rollout_page(&done, Ok(()), None);
        assert!(!h.contains("id=\"rollout-undo\"") && h.contains("id=\"rollout-pause\""));
        // Another team: no buttons, and why.
        let h = rollout_page(&v, Err("owned by team <ads>".into()), None);
        assert!(!h.contains("/rollout/"), "{h}");
        assert!(h.contains(
            "id=\"rollout-refused\">You may not act on this rollout: owned by team &lt;ads&gt;"
        ));
        // A refusal said on the page.
        let f = Flash {
            key: "k".into(),
            ok: false,
            text: "422 (Invalid): <no>".into(),
        };
        let h = rollout_page(&v, Ok(()), Some(&f));
        assert!(h.contains("<p class=\"flash refused\" id=\"flash\" data-ok=\"false\">422 (Invalid): &lt;no&gt;</p>"), "{h}");
    }
}

//! The JSS client commands: `pinfed submit | get | describe | delete | clusters | quota |
//! queue | owners`. They talk to the Job Submission Service with a token, never to a cluster.
//! Human tables by default, `-o json|yaml` for scripts; a JSS error is printed with its
//! field paths (or quota numbers) and the command exits non-zero.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::table::Table;
use crate::api::common::MemberWorkloadStatus;
use crate::api::federation::ResourceAmounts;
use crate::api::quantity::Milli;
use crate::api::workload::Counted;
use crate::jss::artifacts::ArtifactRef;
use crate::jss::client::JssClient;
use crate::jss::request::{kind_path, parse_kind};
use crate::jss::ui::model::{age, priority_text};
use crate::jss::wire::{
    Amounts, ClusterView, Deleted, DryRun, DryRunShare, HubStatusView, List, OwnersReport,
    QueueEntry, QuotaView, SubmitRequest, Submitted, WorkloadView,
};
use k8s_openapi::jiff::Timestamp;

#[derive(Debug, Clone, Copy, ValueEnum, Default)]
pub enum Output {
    #[default]
    Table,
    Json,
    Yaml,
}

/// How to reach the JSS.
#[derive(Clone, Args)]
pub struct ServerArgs {
    /// The JSS URL (`https://jss.example:8443`; `http://` only for loopback).
    #[arg(
        long,
        env = "PINFED_SERVER",
        default_value = "http://127.0.0.1:8443",
        global = true
    )]
    pub server: String,
    /// Bearer token.
    #[arg(long, env = "PINFED_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// File holding the bearer token (when --token is not given).
    #[arg(long, env = "PINFED_TOKEN_FILE", global = true)]
    pub token_file: Option<PathBuf>,
    /// PEM CA certificate to trust for an https server.
    #[arg(long, env = "PINFED_CA_CERT", global = true)]
    pub ca_cert: Option<PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
}

/// Never prints the token.
impl std::fmt::Debug for ServerArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerArgs")
            .field("server", &self.server)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_file", &self.token_file)
            .field("ca_cert", &self.ca_cert)
            .field("output", &self.output)
            .finish()
    }
}

impl ServerArgs {
    pub(super) fn client(&self) -> anyhow::Result<JssClient> {
        let token = match (&self.token, &self.token_file) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(f)) => Some(
                std::fs::read_to_string(f)
                    .with_context(|| format!("reading token file {}", f.display()))?
                    .trim()
                    .to_string(),
            ),
            (None, None) => None,
        };
        JssClient::new(&self.server, token, self.ca_cert.as_deref())
    }
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Artifact name (with --version), from the JSS's artifact store.
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    pub name: Option<String>,
    /// Artifact version.
    #[arg(long, requires = "name")]
    pub version: Option<String>,
    /// Submit a resource file inline instead (if your team may).
    #[arg(short = 'f', long)]
    pub file: Option<PathBuf>,
    /// Namespace (when the resource does not name one).
    #[arg(short, long, env = "PINFED_NAMESPACE")]
    pub namespace: Option<String>,
    /// Submit nothing: answer what the submission would do on the live federation (the
    /// split with reasons, excluded members, quota effect, and for an existing workload
    /// the moves and a diff per member). Refusals are the submission's.
    #[arg(long)]
    pub dry_run: bool,
    /// With --dry-run: also print each member's objects (YAML) after overrides and
    /// runtime injection.
    #[arg(long, requires = "dry_run")]
    pub show_objects: bool,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Kind: service, jobset, cronjob, daemon, trainingjob, statefulset.
    pub kind: Option<String>,
    /// Name (with a kind and --namespace).
    pub name: Option<String>,
    /// Namespace (all you may read when absent).
    #[arg(short, long, env = "PINFED_NAMESPACE")]
    pub namespace: Option<String>,
}

#[derive(Debug, Args)]
pub struct ObjectArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    pub kind: String,
    pub name: String,
    #[arg(short, long, env = "PINFED_NAMESPACE")]
    pub namespace: String,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(Debug, Args)]
pub struct QueueArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Only this namespace (every namespace you may see when absent).
    #[arg(short, long, env = "PINFED_NAMESPACE")]
    pub namespace: Option<String>,
}

#[derive(Debug, Args)]
pub struct OwnersArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Only workloads past their expiry (`pinterest.com/expires-at`, else creation plus the
    /// RuntimeProfile's `expiryDays`), with where they run.
    #[arg(long)]
    pub expired: bool,
}

pub(super) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

pub(super) fn print<T: serde::Serialize>(
    output: Output,
    v: &T,
    table: impl FnOnce(&T) -> String,
) -> anyhow::Result<()> {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(v)?),
        Output::Yaml => print!(
            "{}",
            crate::api::yaml::to_string(&serde_json::to_value(v)?)?
        ),
        Output::Table => print!("{}", table(v)),
    }
    Ok(())
}

pub(super) fn kind_segment(kind: &str) -> anyhow::Result<String> {
    parse_kind(kind).map(kind_path).with_context(|| {
        format!(
            "unknown kind {kind:?} (service, jobset, cronjob, daemon, trainingjob, statefulset)"
        )
    })
}

pub fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    let client = args.server.client()?;
    let body = match (&args.file, &args.name) {
        (Some(f), _) => {
            let text =
                std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            SubmitRequest {
                resource: Some(text.into()),
                ..Default::default()
            }
        }
        (None, Some(name)) => {
            let version = args
                .version
                .clone()
                .context("--version is required with an artifact name")?;
            SubmitRequest {
                artifact: Some(ArtifactRef {
                    name: name.clone(),
                    version,
                }),
                ..Default::default()
            }
        }
        (None, None) => anyhow::bail!("give an artifact NAME --version V, or -f FILE"),
    };
    let body = SubmitRequest {
        namespace: args.namespace.clone(),
        ..body
    };
    if args.dry_run {
        let v: DryRun = runtime()?
            .block_on(
                client.post_json("/v1/submissions?dryRun=true", &serde_json::to_value(&body)?),
            )?
            .decode()?;
        return print(args.server.output, &v, |v| {
            dry_run_text(v, args.show_objects)
        });
    }
    let v: Submitted = runtime()?
        .block_on(client.post_json("/v1/submissions", &serde_json::to_value(&body)?))?
        .decode()?;
    print(args.server.output, &v, |v| {
        let mut text = format!(
            "{} {}/{} {} by {} for team {}{}\n",
            v.kind.as_str(),
            v.namespace,
            v.name,
            if v.created { "created" } else { "updated" },
            v.submitted_by,
            v.team,
            v.artifact
                .as_ref()
                .map(|a| format!(" (artifact {a})"))
                .unwrap_or_default()
        );
        if let Some(p) = &v.priority {
            text.push_str(&format!(
                "priority: {} ({}{})\n",
                p.class,
                p.value,
                if p.preempts { ", may preempt" } else { "" }
            ));
        }
        if let Some(f) = &v.forecast {
            text.push_str(&format!("forecast: {f}\n"));
        }
        if let Some(t) = &v.trace_id {
            text.push_str(&format!("trace: {t}\n"));
        }
        text
    })
}

/// A share in a dry run as people read it: `3 replicas`, `shards 0-4`, `whole`.
fn dry_share(p: &DryRunShare) -> String {
    match (p.replicas, &p.shards) {
        (Some(n), _) => format!("{n} replicas"),
        (None, Some(s)) => format!("shards {s}"),
        (None, None) => "whole".into(),
    }
}

/// `pinfed submit --dry-run`: the split with each member's reason, the members left out
/// and why, what is unplaced, the quota effect, for an existing workload the moves and a
/// diff per member, and with `objects` each member's objects.
pub fn dry_run_text(v: &DryRun, objects: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "DRY RUN: nothing was submitted. {} {}/{} for team {} ({}, {})",
        v.kind.as_str(),
        v.namespace,
        v.name,
        v.team,
        if v.exists {
            "an update of the workload on the hub"
        } else {
            "a new workload"
        },
        v.strategy
    );
    let r = &v.requested;
    let _ = writeln!(
        out,
        "Requested: cpu {} memory {} gpus {} pods {}",
        r.cpu, r.memory, r.gpus, r.pods
    );
    if let Some(current) = &v.current {
        let now: Vec<String> = current
            .iter()
            .map(|p| format!("{}:{}", p.cluster, dry_share(p)))
            .collect();
        let _ = writeln!(
            out,
            "Split now:  {}",
            if now.is_empty() {
                "-".into()
            } else {
                now.join(", ")
            }
        );
    }
    let _ = writeln!(out, "Split:");
    let mut t = Table::headless().indent("  ");
    for p in &v.placements {
        t.row([
            p.cluster.clone(),
            dry_share(p),
            format!(
                "{} pods, cpu {} memory {}",
                p.pods, p.requests.cpu, p.requests.memory
            ),
            format!("— {}", p.reason),
        ]);
    }
    out.push_str(&t.render());
    if v.placements.is_empty() {
        let _ = writeln!(out, "  (no member)");
    }
    if v.unplaced > 0 {
        let _ = writeln!(
            out,
            "Unplaced:   {} ({}): {}",
            v.unplaced,
            v.cause.as_deref().unwrap_or("-"),
            v.reason.as_deref().unwrap_or("-")
        );
    }
    for w in &v.warnings {
        let _ = writeln!(out, "Warning:    {w}");
    }
    if !v.excluded.is_empty() {
        let _ = writeln!(out, "Excluded:");
        let mut t = Table::headless().indent("  ");
        for e in &v.excluded {
            t.row([e.cluster.as_str(), e.why.as_str()]);
        }
        out.push_str(&t.render());
    }
    if !v.quotas.is_empty() {
        let _ = writeln!(out, "Quota:");
        let mut t = Table::new([
            "QUOTA", "SCOPE", "RESOURCE", "NOW", "ADDS", "USED", "HARD", "",
        ])
        .right(&[3, 4, 5, 6])
        .indent("  ");
        for q in &v.quotas {
            for row in &q.rows {
                t.row([
                    q.quota.as_str(),
                    row.scope.as_str(),
                    row.resource.as_str(),
                    row.now.as_deref().unwrap_or("-"),
                    row.adds.as_str(),
                    row.used.as_str(),
                    row.hard.as_str(),
                    if row.fits { "" } else { "(exceeded)" },
                ]);
            }
        }
        out.push_str(&t.render());
    }
    if v.exists {
        if v.moves.is_empty() {
            let _ = writeln!(out, "Moves:      none (every member keeps its share)");
        } else {
            let _ = writeln!(out, "Moves:");
            let mut t = Table::headless().indent("  ");
            for m in &v.moves {
                t.row([m.cluster.clone(), format!("{} → {}", m.before, m.after)]);
            }
            out.push_str(&t.render());
        }
    }
    for m in &v.members {
        let rules = if m.overrides.is_empty() {
            String::new()
        } else {
            format!(", overrides: {}", m.overrides.join(", "))
        };
        let _ = writeln!(
            out,
            "Member {}: {} objects{rules}",
            m.cluster, m.object_count
        );
        if let Some(e) = &m.error {
            let _ = writeln!(out, "  error: {e}");
        }
        let runs_now = v
            .current
            .as_ref()
            .is_some_and(|c| c.iter().any(|p| p.cluster == m.cluster));
        let placed = v.placements.iter().any(|p| p.cluster == m.cluster);
        match m.diff.as_deref() {
            Some(_) if !runs_now => {
                let _ = writeln!(out, "  (new on this member: every object is added)");
            }
            Some(_) if !placed => {
                let _ = writeln!(out, "  (it leaves this member: every object is removed)");
            }
            Some("") => {
                let _ = writeln!(out, "  (its objects do not change)");
            }
            Some(diff) => {
                for l in diff.lines() {
                    let _ = writeln!(out, "  {l}");
                }
            }
            None => {}
        }
        if objects && !m.objects.is_empty() {
            out.push_str(&m.objects);
            if m.object_count > m.objects.lines().filter(|l| *l == "---").count() {
                let _ = writeln!(out, "# ... {} objects in all", m.object_count);
            }
        }
    }
    let _ = writeln!(out, "Note: {}", v.note);
    out
}

fn cond(s: &HubStatusView, t: &str) -> String {
    s.condition(t)
        .map(|c| c.status.as_str())
        .unwrap_or("-")
        .to_string()
}

fn progress(w: &WorkloadView) -> String {
    let s = w.hub_status();
    let t = &s.totals;
    let desired = |n: Option<i64>| n.unwrap_or(0);
    match w.kind.counted() {
        Counted::Replicas => format!(
            "{}/{} avail",
            t.available_replicas,
            desired(w.desired.replicas)
        ),
        Counted::Shards => {
            format!("{}/{} done", t.shards_succeeded, desired(w.desired.shards))
        }
        Counted::Nodes => format!("{}/{} ready", t.ready_replicas, t.replicas),
        // A training job's counts are its members' (it has no totals of its own).
        Counted::Gang => format!(
            "{}/{} ready, complete={}",
            s.part
                .clusters
                .iter()
                .filter_map(|c| c.ready_replicas)
                .sum::<i32>(),
            desired(w.desired.replicas),
            cond(&s, "Complete")
        ),
        Counted::Runs => format!("complete={}", cond(&s, "Complete")),
    }
}

/// One member's part of a workload, one line each, aligned among them.
fn member_lines(clusters: &[MemberWorkloadStatus], indent: &'static str) -> String {
    let mut t = Table::headless().indent(indent);
    for c in clusters {
        t.row(member_cells(c));
    }
    t.render()
}

fn member_cells(c: &MemberWorkloadStatus) -> [String; 3] {
    let n = |v: Option<i32>| v.unwrap_or(0);
    let share = match c.replicas {
        Some(r) => format!(
            "replicas {r} ready {} available {}",
            n(c.ready_replicas),
            n(c.available_replicas)
        ),
        None if c.shards_running.is_none()
            && c.shards_succeeded.is_none()
            && c.shards_failed.is_none() =>
        {
            String::new()
        }
        None => format!(
            "shards running {} succeeded {} failed {}{}",
            n(c.shards_running),
            n(c.shards_succeeded),
            n(c.shards_failed),
            c.unready_shards
                .as_deref()
                .map(|u| format!(" unready {u}"))
                .unwrap_or_default()
        ),
    };
    [
        c.cluster.clone(),
        c.state.as_deref().unwrap_or("-").to_string(),
        format!(
            "{share}{}",
            c.message
                .as_ref()
                .map(|m| format!("  ({m})"))
                .unwrap_or_default()
        ),
    ]
}

fn split(s: &HubStatusView) -> String {
    let Some(p) = &s.part.placement else {
        return "-".into();
    };
    let parts: Vec<String> = p
        .placements
        .iter()
        .map(|p| match (p.replicas, &p.shards) {
            (Some(r), _) => format!("{}:{r}", p.cluster),
            (None, Some(sh)) => format!("{}:[{sh}]", p.cluster),
            _ => p.cluster.clone(),
        })
        .collect();
    let mut out = if parts.is_empty() {
        "-".into()
    } else {
        parts.join(" ")
    };
    if p.unplaced > 0 {
        out.push_str(&format!(" (+{} unplaced)", p.unplaced));
    }
    out
}

/// The `get` table: one line per workload, then one indented line per member cluster.
pub fn workloads_table(items: &[WorkloadView]) -> String {
    let mut t = Table::new([
        "KIND",
        "NAMESPACE/NAME",
        "TEAM",
        "SPLIT",
        "PROGRESS",
        "READY",
    ]);
    for w in items {
        let s = w.hub_status();
        t.row_with(
            [
                w.kind.as_str().to_string(),
                format!("{}/{}", w.namespace.as_deref().unwrap_or("-"), w.name),
                w.team.as_deref().unwrap_or("-").to_string(),
                split(&s),
                progress(w),
                cond(&s, "Ready").to_string(),
            ],
            member_lines(&s.part.clusters, "  └ ")
                .lines()
                .map(str::to_string)
                .collect(),
        );
    }
    let mut out = t.render();
    if items.is_empty() {
        out.push_str("(no workloads)\n");
    }
    out
}

fn describe_text(w: &WorkloadView) -> String {
    describe_text_at(w, Timestamp::now())
}

/// One preemption as `describe` prints it: `3 pods in use1a (shards 4-6) by
/// PinterestTrainingJob/ml/big (priority 1000) at <time>: <reason>`.
fn preemption_text(p: &crate::api::common::PreemptionRecord) -> String {
    let what = match (p.replicas, &p.shards) {
        (Some(r), _) => format!(" ({r} replica{})", if r == 1 { "" } else { "s" }),
        (None, Some(sh)) => format!(" (shards {sh})"),
        (None, None) => String::new(),
    };
    format!(
        "{} pod{} in {}{what} by {} (priority {}) at {}: {}",
        p.pods,
        if p.pods == 1 { "" } else { "s" },
        p.cluster,
        p.by,
        p.by_priority,
        p.time.0,
        p.reason
    )
}

fn describe_text_at(w: &WorkloadView, now: Timestamp) -> String {
    let mut out = String::new();
    let s = w.hub_status();
    let line = |out: &mut String, k: &str, v: String| {
        let _ = writeln!(out, "{k:<14} {v}");
    };
    let or_dash = |v: Option<&str>| v.unwrap_or("-").to_string();
    line(&mut out, "Kind:", w.kind.as_str().to_string());
    line(&mut out, "Namespace:", or_dash(w.namespace.as_deref()));
    line(&mut out, "Name:", w.name.clone());
    line(
        &mut out,
        "Owner:",
        format!(
            "{} ({})",
            or_dash(w.team.as_deref()),
            or_dash(w.contact.as_deref())
        ),
    );
    line(
        &mut out,
        "Submitted by:",
        or_dash(w.submitted_by.as_deref()),
    );
    line(&mut out, "Artifact:", or_dash(w.artifact.as_deref()));
    let r = &w.requested;
    line(
        &mut out,
        "Requested:",
        format!(
            "cpu {} memory {} gpus {} pods {}",
            r.cpu, r.memory, r.gpus, r.pods
        ),
    );
    line(
        &mut out,
        "PriorityClass:",
        or_dash(w.priority_class_name.as_deref()),
    );
    let placement = s.part.placement.as_ref();
    line(
        &mut out,
        "Strategy:",
        placement
            .and_then(|p| p.strategy)
            .map(|st| format!("{st:?}"))
            .unwrap_or_else(|| "-".into()),
    );
    line(&mut out, "Split:", split(&s));
    if let Some(reason) = placement.and_then(|p| p.reason.as_ref()) {
        line(&mut out, "Reason:", reason.clone());
    }
    // Why each member got its share or none, as recorded when the hub decided.
    if let Some(p) = placement.filter(|p| !p.members.is_empty()) {
        let _ = writeln!(out, "Decision:");
        let mut t = Table::headless().right(&[1]).indent("  ");
        for m in &p.members {
            t.row([m.cluster.clone(), m.share.to_string(), m.reason.clone()]);
        }
        out.push_str(&t.render());
    }
    // Its place in the hub's queue while part of it waits, and what was taken from it.
    if let Some(q) = placement.and_then(|p| p.queue.as_ref()) {
        line(
            &mut out,
            "Queue:",
            format!(
                "position {} of {}, priority {}, waiting {}: {}",
                q.position,
                q.waiting,
                priority_text(
                    q.priority,
                    q.effective_priority,
                    q.priority_class_name.as_deref()
                ),
                age(now, q.since.0),
                q.waiting_for
            ),
        );
    }
    for p in placement
        .map(|p| p.preemptions.as_slice())
        .unwrap_or_default()
    {
        line(&mut out, "Preempted:", preemption_text(p));
    }
    // Members application failover moved it off (avoided for this generation).
    for r in placement
        .map(|p| p.application_failovers.as_slice())
        .unwrap_or_default()
    {
        line(
            &mut out,
            "Moved off:",
            format!(
                "{} {} ago, avoided for generation {}: {}",
                r.cluster,
                age(now, r.time.0),
                r.generation,
                r.reason
            ),
        );
    }
    line(&mut out, "Progress:", progress(w));
    let num = |n: Option<i64>| n.map(|n| n.to_string()).unwrap_or_else(|| "null".into());
    line(
        &mut out,
        "Generation:",
        format!(
            "{} (observed {})",
            num(w.generation),
            num(s.part.observed_generation)
        ),
    );
    if let Some(r) = &s.part.rollout {
        line(&mut out, "Rollout:", super::rollout::summary(r));
    }
    let _ = writeln!(out, "Clusters:");
    out.push_str(&member_lines(&s.part.clusters, "  "));
    let _ = writeln!(out, "Conditions:");
    let mut t = Table::headless().indent("  ");
    for c in &s.part.conditions {
        t.row([
            c.type_.as_str(),
            c.status.as_str(),
            c.reason.as_str(),
            c.message.as_str(),
        ]);
    }
    out.push_str(&t.render());
    out
}

pub fn get(args: GetArgs) -> anyhow::Result<()> {
    let client = args.server.client()?;
    let path = match (&args.kind, &args.name, &args.namespace) {
        (Some(k), Some(n), Some(ns)) => {
            let path = format!("/v1/workloads/{ns}/{}/{n}", kind_segment(k)?);
            let w: WorkloadView = runtime()?.block_on(client.get(&path))?.decode()?;
            return print(args.server.output, &w, |w| {
                workloads_table(std::slice::from_ref(w))
            });
        }
        (Some(_), Some(_), None) => anyhow::bail!("give --namespace with a name"),
        (Some(k), None, Some(ns)) => format!("/v1/workloads/{ns}/{}", kind_segment(k)?),
        (Some(k), None, None) => format!("/v1/workloads?kind={}", kind_segment(k)?),
        (None, _, Some(ns)) => format!("/v1/workloads/{ns}"),
        (None, _, None) => "/v1/workloads".to_string(),
    };
    let v = runtime()?.block_on(list_workloads(&client, &path))?;
    print(args.server.output, &v, |v| workloads_table(&v.items))
}

/// Every workload a list path names, read a page at a time (`limit`, then each reply's
/// `continue`), so a fleet of thousands is never one reply.
pub(super) async fn list_workloads(
    client: &JssClient,
    path: &str,
) -> anyhow::Result<List<WorkloadView>> {
    const PAGE: u32 = 500;
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut items = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let page_path = match &next {
            None => format!("{path}{sep}limit={PAGE}"),
            Some(t) => format!("{path}{sep}limit={PAGE}&continue={t}"),
        };
        let page: crate::jss::wire::Page<WorkloadView> = client.get(&page_path).await?.decode()?;
        items.extend(page.items);
        match page.next {
            Some(t) if Some(&t) != next.as_ref() => next = Some(t),
            _ => break,
        }
    }
    Ok(List { items })
}

pub fn describe(args: ObjectArgs) -> anyhow::Result<()> {
    let client = args.server.client()?;
    let path = format!(
        "/v1/workloads/{}/{}/{}",
        args.namespace,
        kind_segment(&args.kind)?,
        args.name
    );
    let w: WorkloadView = runtime()?.block_on(client.get(&path))?.decode()?;
    print(args.server.output, &w, describe_text)
}

pub fn delete(args: ObjectArgs) -> anyhow::Result<()> {
    let client = args.server.client()?;
    let path = format!(
        "/v1/workloads/{}/{}/{}",
        args.namespace,
        kind_segment(&args.kind)?,
        args.name
    );
    let v: Deleted = runtime()?.block_on(client.delete(&path))?.decode()?;
    print(args.server.output, &v, |v| {
        let d = &v.deleted;
        format!(
            "{} {}/{} deleted (its slices are removed from every member)\n",
            d.kind.as_str(),
            d.namespace,
            d.name
        )
    })
}

/// A quantity as every pinfed surface prints it (`Milli::format_cpu`, `format_memory`);
/// other resources as whole units; what does not parse, as given; none as `-`.
fn quantity(resource: &str, q: Option<&Quantity>) -> String {
    let Some(Quantity(q)) = q else {
        return "-".into();
    };
    match (resource, Milli::parse(q)) {
        ("cpu", Ok(m)) => m.format_cpu(),
        ("memory", Ok(m)) => m.format_memory(),
        (_, Ok(m)) => m.units().to_string(),
        _ => q.clone(),
    }
}

/// One resource of a set of amounts, by name.
fn amount<'a>(a: Option<&'a ResourceAmounts>, resource: &str) -> Option<&'a Quantity> {
    let a = a?;
    match resource {
        "cpu" => a.cpu.as_ref(),
        "memory" => a.memory.as_ref(),
        "gpus" => a.gpus.as_ref(),
        "pods" => a.pods.as_ref(),
        _ => None,
    }
}

/// What a workload or team requests, by name (the JSS's own amounts).
fn requested(a: Option<&Amounts>, resource: &str) -> String {
    match (a, resource) {
        (None, _) => "-".into(),
        (Some(a), "cpu") => a.cpu.clone(),
        (Some(a), "memory") => a.memory.clone(),
        (Some(a), "gpus") => a.gpus.to_string(),
        (Some(a), _) => a.pods.to_string(),
    }
}

pub fn clusters_table(items: &[ClusterView]) -> String {
    let mut t = Table::new([
        "NAME",
        "REGION",
        "ZONE",
        "READY",
        "VERSION",
        "NODES",
        "CPU FREE/ALL",
        "MEM FREE/ALL",
        "GPU FREE",
        "PODS",
    ])
    .right(&[5, 6, 7, 8, 9]);
    for c in items {
        let (avail, alloc) = (c.available.as_ref(), c.allocatable.as_ref());
        t.row([
            c.name.clone(),
            c.region.as_deref().unwrap_or("-").to_string(),
            c.zone.as_deref().unwrap_or("-").to_string(),
            c.ready.to_string(),
            c.kubernetes_version.as_deref().unwrap_or("-").to_string(),
            c.nodes.map(|n| n.to_string()).unwrap_or("-".into()),
            format!(
                "{}/{}",
                quantity("cpu", amount(avail, "cpu")),
                quantity("cpu", amount(alloc, "cpu"))
            ),
            format!(
                "{}/{}",
                quantity("memory", amount(avail, "memory")),
                quantity("memory", amount(alloc, "memory"))
            ),
            quantity("gpus", amount(avail, "gpus")),
            format!(
                "{}/{}",
                quantity("pods", amount(c.allocated.as_ref(), "pods")),
                quantity("pods", amount(alloc, "pods"))
            ),
        ]);
    }
    let mut out = t.render();
    if items.is_empty() {
        out.push_str("(no member clusters)\n");
    }
    out
}

pub fn clusters(args: ListArgs) -> anyhow::Result<()> {
    let client = args.server.client()?;
    let v: List<ClusterView> = runtime()?.block_on(client.get("/v1/clusters"))?.decode()?;
    print(args.server.output, &v, |v| clusters_table(&v.items))
}

const RESOURCES: [&str; 4] = ["cpu", "memory", "gpus", "pods"];

pub fn quotas_table(items: &[QuotaView]) -> String {
    let mut t = Table::new([
        "NAMESPACE/QUOTA",
        "SCOPE",
        "RESOURCE",
        "HARD",
        "USED",
        "REQUESTED",
    ])
    .right(&[3, 4, 5]);
    for q in items {
        let name = format!("{}/{}", q.namespace.as_deref().unwrap_or("-"), q.name);
        for r in RESOURCES {
            let Some(hard) = amount(Some(&q.hard), r) else {
                continue;
            };
            t.row([
                name.clone(),
                "total".into(),
                r.into(),
                quantity(r, Some(hard)),
                quantity(r, amount(q.used.as_ref(), r)),
                requested(q.requested.as_ref(), r),
            ]);
        }
        let clusters: std::collections::BTreeSet<&String> = q
            .per_cluster
            .keys()
            .chain(q.used_per_cluster.keys())
            .collect();
        for c in clusters {
            for r in RESOURCES {
                let hard = amount(q.per_cluster.get(c), r);
                let used = amount(q.used_per_cluster.get(c), r);
                if hard.is_none() && (used.is_none() || amount(Some(&q.hard), r).is_none()) {
                    continue;
                }
                t.row([
                    name.clone(),
                    c.clone(),
                    r.into(),
                    quantity(r, hard),
                    quantity(r, used),
                    String::new(),
                ]);
            }
        }
    }
    let mut out = t.render();
    if items.is_empty() {
        out.push_str("(no quotas in your namespaces)\n");
    }
    out
}

pub fn quota(args: ListArgs) -> anyhow::Result<()> {
    let client = args.server.client()?;
    let v: List<QuotaView> = runtime()?.block_on(client.get("/v1/quotas"))?.decode()?;
    print(args.server.output, &v, |v| quotas_table(&v.items))
}

/// The `queue` table: first in line first; the priority the queue orders by, with the
/// workload's own in parentheses when waiting has raised it.
pub fn queue_table(items: &[QueueEntry], now: Timestamp) -> String {
    let mut t = Table::new([
        "POSITION",
        "PRIORITY",
        "CLASS",
        "KIND/NAMESPACE/NAME",
        "WAITING",
        "WAITING FOR",
    ]);
    for e in items {
        let priority = if e.effective_priority == e.priority {
            e.priority.to_string()
        } else {
            format!("{} ({})", e.effective_priority, e.priority)
        };
        t.row([
            format!("{}/{}", e.position, e.waiting),
            priority,
            e.priority_class_name.as_deref().unwrap_or("-").to_string(),
            format!("{}/{}/{}", e.kind.as_str(), e.namespace, e.name),
            age(now, e.since.0),
            e.waiting_for.clone(),
        ]);
    }
    let mut out = t.render();
    if items.is_empty() {
        out.push_str("(nothing waits)\n");
    }
    out
}

pub fn queue(args: QueueArgs) -> anyhow::Result<()> {
    let client = args.server.client()?;
    let path = match &args.namespace {
        Some(ns) => format!("/v1/queue?namespace={}", crate::jss::ui::html::url_part(ns)),
        None => "/v1/queue".to_string(),
    };
    let v: List<QueueEntry> = runtime()?.block_on(client.get(&path))?.decode()?;
    print(args.server.output, &v, |v| {
        queue_table(&v.items, Timestamp::now())
    })
}

pub fn owners_table(v: &OwnersReport) -> String {
    let mut table = Table::new([
        "TEAM",
        "KIND",
        "NAMESPACE/NAME",
        "CLUSTERS",
        "CPU",
        "MEMORY",
        "GPUS",
        "EXPIRES",
    ])
    .right(&[4, 5, 6]);
    for t in &v.teams {
        for w in &t.workloads {
            let expires = match (&w.expires_at, w.expired) {
                (Some(t), true) => format!("{t} (expired)"),
                (Some(t), false) => t.clone(),
                (None, _) => "-".into(),
            };
            table.row([
                t.team.clone(),
                w.kind.as_str().to_string(),
                format!("{}/{}", w.namespace, w.name),
                if w.clusters.is_empty() {
                    "-".into()
                } else {
                    w.clusters.join(",")
                },
                w.requested.cpu.clone(),
                w.requested.memory.clone(),
                w.requested.gpus.to_string(),
                expires,
            ]);
        }
        table.row([
            t.team.clone(),
            "TOTAL".into(),
            format!("contacts: {}", t.contacts.join(",")),
            String::new(),
            t.requested.cpu.clone(),
            t.requested.memory.clone(),
            t.requested.gpus.to_string(),
            String::new(),
        ]);
    }
    table.render()
}

pub fn owners(args: OwnersArgs) -> anyhow::Result<()> {
    let client = args.server.client()?;
    let path = if args.expired {
        "/v1/owners?expired=true"
    } else {
        "/v1/owners"
    };
    let v: OwnersReport = runtime()?.block_on(client.get(path))?.decode()?;
    print(args.server.output, &v, owners_table)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jss::client::Reply;
    use serde_json::json;

    fn from<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_members_line_names_its_unready_shards() {
        let mut c = MemberWorkloadStatus::observed(
            "use1b",
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
        );
        c.state = Some("Progressing".into());
        c.shards_running = Some(4);
        c.shards_succeeded = Some(0);
        c.shards_failed = Some(0);
        let line = |c: &MemberWorkloadStatus| member_lines(std::slice::from_ref(c), "");
        assert!(!line(&c).contains("unready"), "{}", line(&c));
        c.unready_shards = Some("4-7".into());
        assert!(
            line(&c).ends_with("shards running 4 succeeded 0 failed 0 unready 4-7\n"),
            "{}",
            line(&c)
        );
    }

    #[test]
    fn owners_table_says_when_each_workload_expires() {
        let amounts = json!({"cpu": "1", "memory": "1Gi", "gpus": 0, "pods": 1});
        let v: OwnersReport = from(json!({"teams": [{
            "team": "ads", "contacts": ["a@x"], "clusters": ["a", "b"], "requested": amounts,
            "expired": 1,
            "workloads": [
                {"kind": "PinterestJobSet", "namespace": "ads", "name": "old", "clusters": ["a", "b"],
                 "requested": amounts, "expiresAt": "2026-01-01T00:00:00Z", "expired": true},
                {"kind": "PinterestService", "namespace": "ads", "name": "web", "clusters": [],
                 "requested": {"cpu": "0", "memory": "0", "gpus": 0, "pods": 0},
                 "expiresAt": null, "expired": false}
            ]
        }]}));
        let t = owners_table(&v);
        let old = t.lines().find(|l| l.contains("ads/old")).unwrap();
        assert!(
            old.contains("a,b") && old.ends_with("2026-01-01T00:00:00Z (expired)"),
            "{t}"
        );
        let web = t.lines().find(|l| l.contains("ads/web")).unwrap();
        assert!(web.ends_with(" -"), "{t}");
    }

    #[test]
    fn clusters_and_quotas_show_exact_quantities() {
        let c: ClusterView = from(
            json!({"name": "use1a", "labels": {}, "ready": "True", "nodes": 2,
            "allocatable": {"cpu": "32", "memory": "1536Mi", "pods": "220"},
            "allocated": {"pods": "12"},
            "available": {"cpu": "24500m", "memory": "1610612736", "gpus": "0"}}),
        );
        let t = clusters_table(&[c]);
        assert!(t.contains(" 24500m/32 "), "{t}");
        assert!(t.contains(" 1536Mi/1536Mi "), "not 1Gi/1Gi: {t}");
        assert!(t.contains(" 12/220"), "{t}");
        let q: QuotaView = from(json!({"namespace": "ads", "name": "team",
            "hard": {"cpu": "4", "memory": "2Gi"}, "perCluster": {}, "usedPerCluster": {},
            "used": {"cpu": "2500m", "memory": "1610612736"},
            "requested": {"cpu": "1", "memory": "512Mi", "gpus": 0, "pods": 1},
            "conditions": []}));
        let t = quotas_table(&[q]);
        let mem = t.lines().find(|l| l.contains("memory")).unwrap();
        assert!(mem.ends_with("  2Gi  1536Mi      512Mi"), "{t}");
        assert!(t.contains(" 2500m "), "{t}");
    }

    #[test]
    fn describe_shows_why_each_member_got_its_share_as_recorded() {
        let w: WorkloadView = from(json!({
            "kind": "PinterestService", "namespace": "ads", "name": "web", "team": "ads",
            "deleting": false, "desired": {"replicas": 2},
            "requested": {"cpu": "1", "memory": "1Gi", "gpus": 0, "pods": 2},
            "status": {"placement": {
                "placements": [{"cluster": "use1a", "replicas": 2}],
                "members": [
                    {"cluster": "use1a", "share": 2, "reason": "weight 1, room 40 pods of cpu 150m → 2 replicas"},
                    {"cluster": "use1b", "share": 0, "reason": "weight 1, room 40 pods of cpu 150m, quota room 0 pods (cpu 0 of 0 left) → none: its quota room is 0"},
                    {"cluster": "use1c", "share": 0, "reason": "excluded: cluster taint maintenance=true:NoSchedule is not tolerated"}
                ]}}
        }));
        let t = describe_text(&w);
        assert!(t.contains("Decision:"), "{t}");
        assert!(
            t.contains("  use1b  0  weight 1, room 40 pods of cpu 150m, quota room 0 pods"),
            "{t}"
        );
        assert!(
            t.contains("  use1c  0  excluded: cluster taint maintenance"),
            "{t}"
        );
        assert!(t.contains("  use1a  2  weight 1"), "{t}");
    }

    fn queued(
        name: &str,
        position: i32,
        priority: i32,
        effective: i32,
        class: Option<&str>,
    ) -> QueueEntry {
        from(
            json!({"kind": "PinterestJobSet", "namespace": "ml", "name": name, "team": "ml",
            "position": position, "waiting": 5, "priority": priority,
            "effectivePriority": effective, "priorityClassName": class,
            "since": "2026-01-01T00:00:00Z", "waitingFor": format!("room in use1a for {name}"),
            "unplaced": 2}),
        )
    }

    #[test]
    fn the_queue_table_shows_position_priorities_class_and_age() {
        let now: Timestamp = "2026-01-01T00:03:10Z".parse().unwrap();
        let t = queue_table(
            &[
                queued("big", 1, 1000, 1000, Some("high")),
                queued("old", 2, 0, 10, None),
            ],
            now,
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        // Columns as wide as their widest cell, two spaces apart.
        assert_eq!(
            lines[0], "POSITION  PRIORITY  CLASS  KIND/NAMESPACE/NAME     WAITING  WAITING FOR",
            "{t}"
        );
        assert_eq!(
            lines[1],
            "1/5       1000      high   PinterestJobSet/ml/big  3m       room in use1a for big",
            "{t}"
        );
        // Aging raised it: the effective priority, its own in parentheses.
        assert!(
            lines[2].starts_with("2/5       10 (0)    -      PinterestJobSet/ml/old "),
            "{t}"
        );
        assert_eq!(
            queue_table(&[], now),
            "POSITION  PRIORITY  CLASS  KIND/NAMESPACE/NAME  WAITING  WAITING FOR\n(nothing waits)\n"
        );
    }

    #[test]
    fn describe_shows_the_queue_standing_preemptions_and_priority_class() {
        let w: WorkloadView = from(json!({
            "kind": "PinterestJobSet", "namespace": "ml", "name": "small", "team": "ml",
            "deleting": false, "desired": {"shards": 10}, "priorityClassName": "high",
            "requested": {"cpu": "1", "memory": "1Gi", "gpus": 0, "pods": 2},
            "status": {"placement": {
                "placements": [{"cluster": "use1a", "shards": "0-3"}], "unplaced": 6,
                "members": [{"cluster": "use1a", "share": 4, "reason": "room 4 pods"}],
                "queue": {"position": 2, "waiting": 5, "priority": 1000, "effectivePriority": 1010,
                    "priorityClassName": "high", "since": "2026-01-01T00:00:00Z",
                    "waitingFor": "room in use1a (6 shards)"},
                "preemptions": [
                    {"by": "PinterestTrainingJob/ml/big", "byPriority": 1000, "cluster": "use1a",
                     "pods": 3, "shards": "4-6", "time": "2026-01-01T00:01:00Z", "reason": "room for big"},
                    {"by": "PinterestService/ml/web", "byPriority": 2000, "cluster": "use1b",
                     "pods": 1, "replicas": 1, "time": "2026-01-01T00:02:00Z", "reason": "room for web"}
                ]}}
        }));
        let now: Timestamp = "2026-01-01T00:03:00Z".parse().unwrap();
        let t = describe_text_at(&w, now);
        assert!(t.contains("PriorityClass: high\n"), "{t}");
        assert!(
            t.contains("Queue:         position 2 of 5, priority 1000 (effective 1010, class high), waiting 3m: room in use1a (6 shards)\n"),
            "{t}"
        );
        assert!(
            t.contains("Preempted:     3 pods in use1a (shards 4-6) by PinterestTrainingJob/ml/big (priority 1000) at 2026-01-01T00:01:00Z: room for big\n"),
            "{t}"
        );
        assert!(
            t.contains("Preempted:     1 pod in use1b (1 replica) by PinterestService/ml/web (priority 2000) at 2026-01-01T00:02:00Z: room for web\n"),
            "{t}"
        );
        // After the decision, before the progress.
        let (d, q, p) = (
            t.find("Decision:").unwrap(),
            t.find("Queue:").unwrap(),
            t.find("Progress:").unwrap(),
        );
        assert!(d < q && q < p, "{t}");
        assert_eq!(priority_text(0, 0, None), "0");
        assert_eq!(priority_text(5, 5, Some("low")), "5 (class low)");
        // Nothing waits, nothing taken, no class: no lines, a dash.
        let plain: WorkloadView = from(json!({
            "kind": "PinterestService", "namespace": "ads", "name": "web", "deleting": false,
            "desired": {}, "requested": {"cpu": "0", "memory": "0", "gpus": 0, "pods": 0},
            "status": {"placement": {"placements": [{"cluster": "a", "replicas": 1}]}}}));
        let t = describe_text_at(&plain, now);
        assert!(
            t.contains("PriorityClass: -\n") && !t.contains("Queue:") && !t.contains("Preempted:"),
            "{t}"
        );
    }

    #[test]
    fn get_table_shows_the_per_cluster_breakdown() {
        let w: WorkloadView = from(json!({
            "kind": "PinterestService", "namespace": "ads", "name": "web", "team": "ads",
            "deleting": false, "desired": {"replicas": 4},
            "requested": {"cpu": "1", "memory": "1Gi", "gpus": 0, "pods": 4},
            "status": {
                "availableReplicas": 4,
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Available", "message": ""}],
                "placement": {"placements": [{"cluster": "a", "replicas": 3}, {"cluster": "b", "replicas": 1}]},
                "clusters": [
                    {"cluster": "a", "observedTime": "2026-01-01T00:00:00Z", "state": "Ready", "replicas": 3, "readyReplicas": 3, "availableReplicas": 3},
                    {"cluster": "b", "observedTime": "2026-01-01T00:00:00Z", "state": "Ready", "replicas": 1, "readyReplicas": 1, "availableReplicas": 1}
                ]
            }
        }));
        let t = workloads_table(&[w]);
        assert!(t.contains("ads/web"), "{t}");
        assert!(t.contains("a:3 b:1"), "{t}");
        assert!(t.contains("4/4 avail"), "{t}");
        assert!(t.contains("True"), "{t}");
        assert!(
            t.contains("  └ a  Ready  replicas 3 ready 3 available 3\n"),
            "{t}"
        );
    }

    #[test]
    fn a_dry_run_prints_the_split_exclusions_quota_moves_and_diffs() {
        let v: DryRun =
            from(serde_json::to_value(crate::jss::dry_run::tests::sample_reply()).unwrap());
        let t = dry_run_text(&v, false);
        assert!(
            t.starts_with("DRY RUN: nothing was submitted. PinterestService ads/web"),
            "{t}"
        );
        assert!(t.contains("an update of the workload on the hub"), "{t}");
        assert!(t.contains("Split now:  use1b:4 replicas"), "{t}");
        let a = t.lines().find(|l| l.starts_with("  use1a ")).unwrap();
        assert!(a.contains("replicas") && a.contains("weight"), "{t}");
        assert!(
            t.lines()
                .any(|l| l.starts_with("  use1c ") && l.contains("taint")),
            "{t}"
        );
        assert!(t.contains("ads/team"), "{t}");
        assert!(t.contains("Moves:\n  use1a  - → 2 replicas\n"), "{t}");
        assert!(
            t.contains("Member use1a: 2 objects, overrides: mirror\n  (new on this member"),
            "{t}"
        );
        assert!(!t.contains("-600m") && !t.contains(" -0"), "{t}");
        assert!(
            t.lines()
                .any(|l| l.starts_with("  +") && l.contains("app:2")),
            "{t}"
        );
        assert!(
            !t.contains("kind: Deployment"),
            "objects only when asked: {t}"
        );
        let t = dry_run_text(&v, true);
        assert!(t.contains("kind: Deployment"), "{t}");
    }

    #[test]
    fn error_replies_show_field_paths_and_quota_numbers() {
        let r = Reply {
            status: 422,
            text: String::new(),
            body: json!({"error": "invalid", "reason": "Invalid", "details": [
                {"field": "spec.replicas", "message": "must be at least 0"},
                {"field": "resource", "message": "bad", "line": 3, "column": 4}]}),
        };
        let t = r.error_text();
        assert!(t.starts_with("422 (Invalid): invalid"), "{t}");
        assert!(t.contains("\n  spec.replicas: must be at least 0"), "{t}");
        assert!(t.contains("(line 3, column 4)"), "{t}");
        let r = Reply {
            status: 409,
            text: String::new(),
            body: json!({"error": "quota", "reason": "QuotaExceeded", "details": [
                {"quota": "ads/q", "resource": "cpu", "requested": "2", "used": "3", "hard": "4"}]}),
        };
        assert!(
            r.error_text()
                .contains("ads/q: cpu: requested 2 + used 3 > hard 4")
        );
        // Not the JSS's error shape (a proxy's page): shown as text.
        let r = Reply {
            status: 502,
            text: "Bad Gateway\n".into(),
            body: serde_json::Value::Null,
        };
        assert_eq!(r.error_text(), "502 (error): Bad Gateway");
    }
}

//! `pinfed rollout status | history | approve | pause | resume | undo`: a workload's
//! staged rollout through the JSS (`GET .../rollout`, `POST .../rollout/{action}`), with
//! the rights of `pinfed get` to look and of `pinfed delete` to act.

use std::fmt::Write as _;

use clap::{Args, Subcommand};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::client::{ObjectArgs, kind_segment, print, runtime};
use super::table::Table;
use crate::api::rollout::{RolloutStatus, gate, phase};
use crate::jss::wire::{RolloutAction, RolloutActionReply, RolloutActionRequest, RolloutView};

#[derive(Debug, Args)]
pub struct RolloutArgs {
    #[command(subcommand)]
    pub command: RolloutCommand,
}

#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Where the workload's change stands: its phase, its stages, each member's gate.
    Status(ObjectArgs),
    /// The revisions the hub keeps: images, runtime version, which is current and stable.
    History(ObjectArgs),
    /// Approve the stage that waits for approval (--stage: name or index, to be sure).
    Approve(ApproveArgs),
    /// Hold the rollout where it is: members changing finish, no new member starts.
    Pause(ObjectArgs),
    /// Let a paused rollout go on.
    Resume(ObjectArgs),
    /// Run an older revision again (default: the stable one, else the one before the
    /// current): submitted like any change, rolled out as a new revision.
    Undo(UndoArgs),
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    #[command(flatten)]
    pub object: ObjectArgs,
    /// The stage approved, by name or index (default: the stage that waits).
    #[arg(long)]
    pub stage: Option<String>,
}

#[derive(Debug, Args)]
pub struct UndoArgs {
    #[command(flatten)]
    pub object: ObjectArgs,
    /// The revision to run again (`pinfed rollout history` lists them).
    #[arg(long)]
    pub to_revision: Option<i64>,
}

fn rollout_path(o: &ObjectArgs) -> anyhow::Result<String> {
    Ok(format!(
        "/v1/workloads/{}/{}/{}/rollout",
        o.namespace,
        kind_segment(&o.kind)?,
        o.name
    ))
}

pub fn run(args: RolloutArgs) -> anyhow::Result<()> {
    match args.command {
        RolloutCommand::Status(o) => show(&o, status_text),
        RolloutCommand::History(o) => show(&o, history_text),
        RolloutCommand::Approve(a) => act(
            &a.object,
            RolloutAction::Approve,
            RolloutActionRequest {
                stage: a.stage,
                ..Default::default()
            },
        ),
        RolloutCommand::Pause(o) => act(&o, RolloutAction::Pause, Default::default()),
        RolloutCommand::Resume(o) => act(&o, RolloutAction::Resume, Default::default()),
        RolloutCommand::Undo(a) => act(
            &a.object,
            RolloutAction::Undo,
            RolloutActionRequest {
                to_revision: a.to_revision,
                ..Default::default()
            },
        ),
    }
}

fn show(o: &ObjectArgs, table: fn(&RolloutView) -> String) -> anyhow::Result<()> {
    let client = o.server.client()?;
    let v: RolloutView = runtime()?
        .block_on(client.get(&rollout_path(o)?))?
        .decode()?;
    print(o.server.output, &v, table)
}

fn act(o: &ObjectArgs, action: RolloutAction, req: RolloutActionRequest) -> anyhow::Result<()> {
    let client = o.server.client()?;
    let path = format!("{}/{}", rollout_path(o)?, action.as_str());
    let v: RolloutActionReply = runtime()?
        .block_on(client.post_json(&path, &serde_json::to_value(&req)?))?
        .decode()?;
    print(o.server.output, &v, |v| format!("{}\n", v.message))
}

/// How long ago `t` was, short (`45s`, `3m12s`, `2h5m`, `3d4h`).
fn age(t: Option<&Time>, now: k8s_openapi::jiff::Timestamp) -> String {
    let Some(t) = t else {
        return "-".into();
    };
    let s = (now.as_second() - t.0.as_second()).max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..86400 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86400, s % 86400 / 3600),
    }
}

/// The stages in a line: `canary ✓ | second ⏸ approval | rest ·` (done, where the
/// rollout stands, still to come; `approval` marks a stage that waits for a person).
pub fn stage_strip(s: &RolloutStatus, approval: &[bool]) -> String {
    let names: Vec<String> = if s.stages.is_empty() {
        vec!["all".into()]
    } else {
        s.stages.clone()
    };
    let current = s.stage.unwrap_or(0);
    let complete = s.phase == phase::COMPLETE;
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let i32_i = i32::try_from(i).unwrap_or(i32::MAX);
            let failed = s
                .members
                .iter()
                .any(|m| m.stage == i32_i && m.state == gate::FAILED);
            let asks = approval.get(i).copied().unwrap_or(false);
            let mark = if complete || i32_i < current {
                if failed { "✗" } else { "✓" }
            } else if i32_i == current {
                match s.phase.as_str() {
                    phase::WAITING_FOR_APPROVAL => "⏸ approval",
                    phase::PAUSED => "⏸ paused",
                    phase::ROLLING_BACK => "↩ rolling back",
                    phase::ROLLED_BACK => "↩ rolled back",
                    phase::HALTED => "✗ halted",
                    phase::INVALID => "✗ invalid",
                    _ => "▶",
                }
            } else if asks {
                "· approval"
            } else {
                "·"
            };
            format!("{name} {mark}")
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// One line for `pinfed describe`: `revision 2 (stable 1) WaitingForApproval: why`.
pub fn summary(s: &RolloutStatus) -> String {
    let stable = match s.stable_revision {
        Some(st) if st != s.revision => format!(" (stable {st})"),
        _ => String::new(),
    };
    format!(
        "revision {}{stable} {}{}",
        s.revision,
        s.phase,
        s.message
            .as_ref()
            .map(|m| format!(": {m}"))
            .unwrap_or_default()
    )
}

pub fn status_text(v: &RolloutView) -> String {
    let mut out = String::new();
    let w = &v.workload;
    let line = |out: &mut String, k: &str, val: String| {
        let _ = writeln!(out, "{k:<10} {val}");
    };
    line(
        &mut out,
        "Workload:",
        format!("{} {}/{}", w.kind.as_str(), w.namespace, w.name),
    );
    let Some(s) = &v.status else {
        line(
            &mut out,
            "Rollout:",
            "none yet (the hub has not looked at this workload)".into(),
        );
        return out;
    };
    line(&mut out, "Revision:", {
        let stable = s
            .stable_revision
            .map(|st| format!(" (stable {st})"))
            .unwrap_or_default();
        format!("{}{stable}", s.revision)
    });
    line(&mut out, "Phase:", s.phase.clone());
    let approval: Vec<bool> = v
        .policy
        .as_ref()
        .map(|p| p.stages.iter().map(|st| st.approval).collect())
        .unwrap_or_default();
    line(&mut out, "Stages:", stage_strip(s, &approval));
    if let Some(m) = &s.message {
        line(&mut out, "Message:", m.clone());
    }
    if v.paused {
        line(
            &mut out,
            "Paused:",
            "yes (`pinfed rollout resume` lets it go on)".into(),
        );
    }
    if let Some(a) = &v.approved {
        line(&mut out, "Approved:", a.clone());
    }
    if s.failed > 0 {
        line(&mut out, "Failed:", s.failed.to_string());
    }
    if s.phase == phase::WAITING_FOR_APPROVAL {
        line(
            &mut out,
            "Next:",
            format!(
                "pinfed rollout approve {} {} -n {}",
                crate::jss::request::kind_path(w.kind),
                w.name,
                w.namespace
            ),
        );
    }
    let now = k8s_openapi::jiff::Timestamp::now();
    out.push('\n');
    let mut t = Table::new(["CLUSTER", "STAGE", "REVISION", "STATE", "SINCE", "MESSAGE"]);
    for m in &s.members {
        let stage = usize::try_from(m.stage)
            .ok()
            .and_then(|i| s.stages.get(i))
            .cloned()
            .unwrap_or_else(|| m.stage.to_string());
        let revision = if m.from_revision != m.revision {
            format!("{} (from {})", m.revision, m.from_revision)
        } else {
            m.revision.to_string()
        };
        t.row([
            m.cluster.clone(),
            stage,
            revision,
            m.state.clone(),
            age(m.since.as_ref(), now),
            m.message.clone().unwrap_or_default(),
        ]);
    }
    out.push_str(&t.render());
    if s.members.is_empty() {
        out.push_str("(no members listed: every member runs the revision)\n");
    }
    out
}

pub fn history_text(v: &RolloutView) -> String {
    let mut t = Table::new(["REVISION", "", "CREATED", "RUNTIME", "IMAGES"]);
    for e in &v.history {
        let marks: Vec<&str> = [(e.current, "current"), (e.stable, "stable")]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, m)| *m)
            .collect();
        t.row([
            e.revision.to_string(),
            marks.join(","),
            e.created
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_else(|| "-".into()),
            e.runtime_version.clone().unwrap_or_else(|| "-".into()),
            if e.images.is_empty() {
                "-".into()
            } else {
                e.images.join(", ")
            },
        ]);
    }
    let mut out = t.render();
    if v.history.is_empty() {
        out.push_str("(no revisions recorded)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jss::client::Reply;
    use serde_json::json;

    fn view() -> RolloutView {
        serde_json::from_value(json!({
            "workload": {"kind": "PinterestService", "namespace": "ads", "name": "web"},
            "status": {
                "revision": 2, "revisionHash": "h", "stableRevision": 1,
                "phase": "WaitingForApproval", "stage": 1,
                "stages": ["canary", "second", "rest"],
                "members": [
                    {"cluster": "use1a", "stage": 0, "revision": 2, "fromRevision": 1, "state": "Passed",
                     "since": "2026-01-01T00:00:00Z"},
                    {"cluster": "use1b", "stage": 1, "revision": 1, "fromRevision": 1, "state": "Waiting"}
                ],
                "failed": 0, "message": "stage second waits for approval"
            },
            "policy": {"stages": [{"name": "canary", "count": 1}, {"name": "second", "approval": true, "count": 1},
                {"name": "rest", "approval": true}]},
            "paused": false,
            "history": [
                {"revision": 1, "images": ["app:1"], "runtimeVersion": "v1", "created": "2026-01-01T00:00:00Z",
                 "current": false, "stable": true},
                {"revision": 2, "images": ["app:2", "side:1"], "runtimeVersion": "v1", "current": true, "stable": false}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn status_shows_the_stage_strip_and_each_members_gate() {
        let t = status_text(&view());
        assert!(
            t.contains("canary ✓ | second ⏸ approval | rest · approval"),
            "{t}"
        );
        assert!(t.contains("WaitingForApproval"), "{t}");
        assert!(
            t.contains("pinfed rollout approve service web -n ads"),
            "{t}"
        );
        let a = t.lines().find(|l| l.starts_with("use1a")).unwrap();
        assert!(
            a.contains("canary") && a.contains("2 (from 1)") && a.contains("Passed"),
            "{t}"
        );
        let b = t.lines().find(|l| l.starts_with("use1b")).unwrap();
        assert!(b.contains("second") && b.contains("Waiting"), "{t}");
        let mut done = view();
        let s = done.status.as_mut().unwrap();
        s.phase = phase::COMPLETE.into();
        s.stage = None;
        assert_eq!(stage_strip(s, &[]), "canary ✓ | second ✓ | rest ✓");
        assert_eq!(
            summary(s),
            "revision 2 (stable 1) Complete: stage second waits for approval"
        );
    }

    #[test]
    fn history_marks_current_and_stable() {
        let t = history_text(&view());
        let one = t.lines().find(|l| l.starts_with("1 ")).unwrap();
        assert!(
            one.contains("stable") && one.contains("app:1") && one.contains("v1"),
            "{t}"
        );
        let two = t.lines().find(|l| l.starts_with("2 ")).unwrap();
        assert!(
            two.contains("current") && two.ends_with("app:2, side:1"),
            "{t}"
        );
    }

    #[test]
    fn the_reply_decodes_and_an_error_names_the_stage() {
        let r = Reply {
            status: 422,
            text: String::new(),
            body: json!({"error": "stage \"rest\" (2) of revision 2 is not waiting for approval; stage \"second\" (1) is",
                "reason": "Invalid", "details": [{"field": "stage", "message": "\"rest\" is not the stage that waits"}]}),
        };
        let e = r.decode::<RolloutActionReply>().unwrap_err().to_string();
        assert!(
            e.contains("422 (Invalid)") && e.contains("\n  stage: \"rest\""),
            "{e}"
        );
    }
}

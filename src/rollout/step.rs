//! One look at a rollout: from what was recorded, the revision the spec asks for and what
//! each member reports, where the rollout stands now and which revision each member is
//! told to run. Pure: the hub records the result in status and writes the slices.
//!
//! The rules (`docs/rollouts.md`):
//! - a new revision begins a rollout over the members placed then, in the policy's
//!   stages; a change while one runs begins another from its first stage;
//! - a stage starts once the stage before it is done (and a person approved it, when it
//!   asks); at most `maxConcurrent` of its members change at once;
//! - a member passes when its slice runs the new revision, processed, fully updated and
//!   available, its report fresh — and stays so for the soak; it fails on its slice's
//!   failure or its deadline. Stale or missing reports never pass;
//! - more failures than the budget stop the rollout: the members it touched go back to the
//!   revision they ran before (or stay, with `onFailure: Pause`);
//! - members that leave are skipped; members that join run the stable revision.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::plan::stage_members;
use crate::api::rollout::{OnFailure, RolloutMember, RolloutPolicy, RolloutStatus, gate, phase};

/// What the hub knows of one placed member for the gate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberFacts {
    pub labels: BTreeMap<String, String>,
    /// The revision its slice carries, once its agent processed that slice.
    pub running: Option<i64>,
    /// The member is Ready and its agent's report is fresh.
    pub fresh: bool,
    /// Its slice reports every replica (shard, node) of its revision updated and available.
    pub healthy: bool,
    /// Why its slice fails (Failed, refused, failed shards), if it does.
    pub failing: Option<String>,
    /// A job set's failed shards as its slice reports them (all revisions), recorded
    /// when the member is told to run a new revision.
    pub failed_shards: Option<String>,
    /// Why it is not healthy yet, for messages.
    pub detail: Option<String>,
}

/// Everything one look decides from.
pub struct Input<'a> {
    pub policy: &'a RolloutPolicy,
    pub stored: Option<&'a RolloutStatus>,
    /// A digest of the revision the spec asks for ([`super::revision::hash`]).
    pub revision_hash: &'a str,
    /// Members in the placement decision.
    pub placed: &'a BTreeMap<String, MemberFacts>,
    /// The latest approval: (revision, stage), from the workload's annotation.
    pub approved: Option<(i64, i32)>,
    pub paused: bool,
    pub now: &'a Time,
}

/// An Event the look asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// Where the rollout stands and what each member runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub status: RolloutStatus,
    /// The revision each placed member is told to run.
    pub assign: BTreeMap<String, i64>,
    /// Whether `status.revision` is new this look (its revision record must be written
    /// before any slice carries it).
    pub new_revision: bool,
    pub notes: Vec<Note>,
    /// When the next time-based transition is due (a soak ends, a deadline passes).
    pub recheck: Option<Duration>,
}

fn secs_between(from: &Time, to: &Time) -> i64 {
    to.0.as_second() - from.0.as_second()
}

/// One look at the rollout.
pub fn step(input: &Input<'_>) -> Outcome {
    let Some(stored) = input.stored else {
        // The first revision: nothing ran before, every member runs it at once.
        let status = RolloutStatus {
            revision: 1,
            revision_hash: input.revision_hash.to_string(),
            stable_revision: Some(1),
            phase: phase::COMPLETE.into(),
            ..Default::default()
        };
        return Outcome {
            assign: input.placed.keys().map(|m| (m.clone(), 1)).collect(),
            status,
            new_revision: true,
            notes: Vec::new(),
            recheck: None,
        };
    };
    if stored.revision_hash != input.revision_hash {
        let status = begin(input, stored, stored.revision + 1);
        let mut out = advance(input, status);
        out.new_revision = true;
        out.notes.insert(
            0,
            Note {
                warning: false,
                reason: "RolloutStarted",
                message: format!(
                    "revision {} rolls out in {} stage(s) over {} member(s)",
                    out.status.revision,
                    out.status.stages.len().max(1),
                    out.status.members.len()
                ),
            },
        );
        return out;
    }
    if stored.phase == phase::INVALID {
        // The policy could not be applied: try again (a policy change, a member change).
        let status = begin(input, stored, stored.revision);
        return advance(input, status);
    }
    advance(input, stored.clone())
}

/// The last revision that ran healthily on `member` as `s` records it: where a new
/// rollout starts it from (a member half-way to a superseded revision goes back to it
/// until its stage comes, so no member runs an unproven revision in the meantime).
fn current_of(s: &RolloutStatus, member: &str) -> i64 {
    if s.phase == phase::COMPLETE {
        return s.revision;
    }
    match s.members.iter().find(|m| m.cluster == member) {
        Some(m) if m.state == gate::PASSED || m.state == gate::ROLLED_BACK => m.revision,
        Some(m) => m.from_revision,
        None => s.stable_revision.unwrap_or(s.revision),
    }
}

/// A rollout of `revision` beginning over the members placed now.
fn begin(input: &Input<'_>, stored: &RolloutStatus, revision: i64) -> RolloutStatus {
    let now = input.now;
    let stable = if stored.phase == phase::COMPLETE {
        Some(stored.revision)
    } else {
        stored.stable_revision
    };
    let labels: BTreeMap<String, BTreeMap<String, String>> = input
        .placed
        .iter()
        .map(|(m, f)| (m.clone(), f.labels.clone()))
        .collect();
    let stage_names: Vec<String> = input
        .policy
        .stages
        .iter()
        .enumerate()
        .map(|(i, s)| s.display_name(i))
        .collect();
    let base = RolloutStatus {
        revision,
        revision_hash: input.revision_hash.to_string(),
        stable_revision: stable,
        stages: stage_names,
        started_time: Some(now.clone()),
        ..Default::default()
    };
    match stage_members(&input.policy.stages, &labels) {
        Err(why) => RolloutStatus {
            phase: phase::INVALID.into(),
            message: Some(why),
            // Nobody moves: each member stays on what it ran.
            members: input
                .placed
                .keys()
                .map(|m| {
                    let r = current_of(stored, m);
                    RolloutMember {
                        cluster: m.clone(),
                        stage: 0,
                        revision: r,
                        from_revision: r,
                        state: gate::WAITING.into(),
                        since: Some(now.clone()),
                        ..Default::default()
                    }
                })
                .collect(),
            ..base
        },
        Ok(stages) => {
            let mut members = Vec::new();
            for (i, names) in stages.iter().enumerate() {
                for m in names {
                    let r = current_of(stored, m);
                    members.push(RolloutMember {
                        cluster: m.clone(),
                        stage: i32::try_from(i).unwrap_or(i32::MAX),
                        revision: r,
                        from_revision: r,
                        state: gate::WAITING.into(),
                        since: Some(now.clone()),
                        ..Default::default()
                    });
                }
            }
            RolloutStatus {
                phase: phase::PROGRESSING.into(),
                stage: Some(0),
                members,
                ..base
            }
        }
    }
}

fn set_state(m: &mut RolloutMember, state: &str, now: &Time, message: Option<String>) {
    if m.state != state {
        m.state = state.to_string();
        m.since = Some(now.clone());
    }
    m.message = message;
}

/// Moves the rollout `s` forward as far as the members' reports allow.
fn advance(input: &Input<'_>, mut s: RolloutStatus) -> Outcome {
    let now = input.now;
    let policy = input.policy;
    let target = s.revision;
    let deadline = policy.deadline_secs();
    let mut notes = Vec::new();
    let mut recheck: Option<i64> = None;
    let mut due = |secs: i64| {
        let secs = secs.max(1);
        recheck = Some(recheck.map_or(secs, |r| r.min(secs)));
    };
    let soak_of = |stage: i32| -> i64 {
        usize::try_from(stage)
            .ok()
            .and_then(|i| policy.stages.get(i))
            .and_then(|st| st.soak_seconds)
            .unwrap_or(0)
            .max(0)
    };
    let active = matches!(
        s.phase.as_str(),
        phase::PROGRESSING | phase::WAITING_FOR_APPROVAL | phase::PAUSED | phase::ROLLING_BACK
    );
    if active {
        // Members that left the placement are skipped (a member lost mid-rollout leaves
        // once its work fails over; until then it cannot pass: its report is not fresh).
        for m in s.members.iter_mut() {
            let open = !matches!(
                m.state.as_str(),
                gate::SKIPPED | gate::ROLLED_BACK | gate::FAILED
            );
            if open && !input.placed.contains_key(&m.cluster) {
                set_state(m, gate::SKIPPED, now, Some("left the placement".into()));
            }
        }
    }
    if matches!(
        s.phase.as_str(),
        phase::PROGRESSING | phase::WAITING_FOR_APPROVAL | phase::PAUSED
    ) {
        // The gates of the members changing.
        for m in s.members.iter_mut() {
            let Some(f) = input.placed.get(&m.cluster) else {
                continue;
            };
            let state = m.state.clone();
            if state != gate::UPDATING && state != gate::SOAKING {
                continue;
            }
            let on_target = f.fresh && f.running == Some(target);
            let since_update = m
                .updated_time
                .as_ref()
                .map(|t| secs_between(t, now))
                .unwrap_or(0);
            if let Some(why) = f.failing.as_ref().filter(|_| f.running == Some(target)) {
                set_state(m, gate::FAILED, now, Some(why.clone()));
                notes.push(Note {
                    warning: true,
                    reason: "RolloutMemberFailed",
                    message: format!("{} failed revision {target}: {why}", m.cluster),
                });
                continue;
            }
            let healthy = on_target && f.healthy;
            if state == gate::UPDATING {
                if healthy {
                    set_state(m, gate::SOAKING, now, None);
                } else if since_update >= deadline {
                    let why = if !f.fresh {
                        "its report is not fresh (member or agent lost)".to_string()
                    } else if f.running != Some(target) {
                        "its agent has not taken the new revision".to_string()
                    } else {
                        f.detail.clone().unwrap_or_else(|| "not available".into())
                    };
                    let msg =
                        format!("not healthy on revision {target} within {deadline} s: {why}");
                    set_state(m, gate::FAILED, now, Some(msg.clone()));
                    notes.push(Note {
                        warning: true,
                        reason: "RolloutMemberFailed",
                        message: format!("{} {msg}", m.cluster),
                    });
                    continue;
                } else {
                    m.message = f
                        .detail
                        .clone()
                        .or_else(|| (!f.fresh).then(|| "report not fresh".to_string()));
                    due(deadline - since_update);
                    continue;
                }
            }
            // Soaking.
            if !healthy {
                set_state(
                    m,
                    gate::UPDATING,
                    now,
                    Some("was healthy, then not: the soak starts again".into()),
                );
                due(deadline - since_update);
                continue;
            }
            let soak = soak_of(m.stage);
            let soaked = m.since.as_ref().map(|t| secs_between(t, now)).unwrap_or(0);
            if soaked >= soak {
                set_state(m, gate::PASSED, now, None);
            } else {
                m.message = Some(format!("soaking: {} s left", soak - soaked));
                due(soak - soaked);
            }
        }
        s.failed = i32::try_from(s.members.iter().filter(|m| m.state == gate::FAILED).count())
            .unwrap_or(i32::MAX);
        if u32::try_from(s.failed).unwrap_or(0) > policy.budget() {
            match policy.on_failure.unwrap_or_default() {
                OnFailure::Rollback => {
                    let mut back: Vec<&mut RolloutMember> = s
                        .members
                        .iter_mut()
                        .filter(|m| {
                            m.revision == target
                                && m.from_revision != target
                                && m.state != gate::SKIPPED
                        })
                        .collect();
                    // Newest first: the member told last goes back first.
                    back.sort_by(|a, b| {
                        b.updated_time
                            .as_ref()
                            .map(|t| t.0)
                            .cmp(&a.updated_time.as_ref().map(|t| t.0))
                    });
                    let names: Vec<String> = back.iter().map(|m| m.cluster.clone()).collect();
                    for m in back {
                        m.revision = m.from_revision;
                        set_state(
                            m,
                            gate::ROLLING_BACK,
                            now,
                            Some(format!("back to revision {}", m.from_revision)),
                        );
                    }
                    s.phase = phase::ROLLING_BACK.into();
                    s.message = Some(format!(
                        "{} member(s) failed revision {target} (budget {}): rolling back {}",
                        s.failed,
                        policy.budget(),
                        names.join(", ")
                    ));
                    notes.push(Note {
                        warning: true,
                        reason: "RollingBack",
                        message: s.message.clone().unwrap_or_default(),
                    });
                }
                OnFailure::Pause => {
                    s.phase = phase::HALTED.into();
                    s.message = Some(format!(
                        "{} member(s) failed revision {target} (budget {}): halted, members stay as they are",
                        s.failed,
                        policy.budget()
                    ));
                    notes.push(Note {
                        warning: true,
                        reason: "RolloutHalted",
                        message: s.message.clone().unwrap_or_default(),
                    });
                }
            }
        } else {
            progress_stages(input, &mut s, &mut notes);
        }
    }
    if s.phase == phase::ROLLING_BACK {
        for m in s
            .members
            .iter_mut()
            .filter(|m| m.state == gate::ROLLING_BACK)
        {
            let back = input
                .placed
                .get(&m.cluster)
                .is_some_and(|f| f.fresh && f.running == Some(m.revision));
            if back {
                set_state(
                    m,
                    gate::ROLLED_BACK,
                    now,
                    Some(format!("runs revision {}", m.revision)),
                );
            }
        }
        if s.members.iter().all(|m| m.state != gate::ROLLING_BACK) {
            s.phase = phase::ROLLED_BACK.into();
            let msg = format!(
                "revision {target} failed and was rolled back; its members run the revision they ran before (change the spec, or `pinfed rollout undo`)"
            );
            s.message = Some(msg.clone());
            notes.push(Note {
                warning: true,
                reason: "RolledBack",
                message: msg,
            });
        } else {
            due(5);
        }
    }
    // What each placed member runs: as listed; a member that joined runs the stable
    // revision (the target once it is rolled out).
    let fallback = if s.phase == phase::COMPLETE {
        target
    } else {
        s.stable_revision.unwrap_or(target)
    };
    let assign = input
        .placed
        .keys()
        .map(|c| {
            let listed = s
                .members
                .iter()
                .find(|m| &m.cluster == c && m.state != gate::SKIPPED)
                .map(|m| m.revision);
            (c.clone(), listed.unwrap_or(fallback))
        })
        .collect();
    Outcome {
        status: s,
        assign,
        new_revision: false,
        notes,
        recheck: recheck.map(|r| Duration::from_secs(u64::try_from(r).unwrap_or(1))),
    }
}

/// Starts the next members once the gates allow: the lowest stage not done; its
/// approval; its concurrency.
fn progress_stages(input: &Input<'_>, s: &mut RolloutStatus, notes: &mut Vec<Note>) {
    let now = input.now;
    let target = s.revision;
    let done = |st: &str| matches!(st, gate::PASSED | gate::SKIPPED | gate::FAILED);
    let stages: BTreeSet<i32> = s.members.iter().map(|m| m.stage).collect();
    let Some(stage) = stages
        .iter()
        .copied()
        .find(|k| s.members.iter().any(|m| m.stage == *k && !done(&m.state)))
    else {
        if s.phase != phase::COMPLETE {
            s.phase = phase::COMPLETE.into();
            s.stage = None;
            s.stable_revision = Some(target);
            let passed = s.members.iter().filter(|m| m.state == gate::PASSED).count();
            let msg =
                format!("revision {target} runs on every member ({passed} passed their gate)");
            s.message = Some(msg.clone());
            // Listed members keep their record; all run the target.
            notes.push(Note {
                warning: false,
                reason: "RolloutComplete",
                message: msg,
            });
        }
        return;
    };
    let index = usize::try_from(stage).unwrap_or(0);
    let spec = input.policy.stages.get(index);
    let name = spec
        .map(|st| st.display_name(index))
        .unwrap_or_else(|| "all".into());
    let in_stage = |st: &str| {
        s.members
            .iter()
            .filter(|m| m.stage == stage && m.state == st)
            .count()
    };
    let started = s
        .members
        .iter()
        .any(|m| m.stage == stage && m.state != gate::WAITING);
    let waiting = in_stage(gate::WAITING);
    s.stage = Some(stage);
    if waiting == 0 {
        s.phase = phase::PROGRESSING.into();
        s.message = Some(format!("stage {name}: members changing"));
        return;
    }
    let approved = input
        .approved
        .is_some_and(|(rev, st)| rev == target && st >= stage);
    if !started && spec.is_some_and(|st| st.approval) && !approved {
        if s.phase != phase::WAITING_FOR_APPROVAL {
            notes.push(Note {
                warning: false,
                reason: "WaitingForApproval",
                message: format!(
                    "revision {target}: stage {name} waits for approval (`pinfed rollout approve`)"
                ),
            });
        }
        s.phase = phase::WAITING_FOR_APPROVAL.into();
        s.message = Some(format!("stage {name} waits for approval"));
        return;
    }
    if input.paused {
        s.phase = phase::PAUSED.into();
        s.message = Some(format!(
            "paused in stage {name}: members changing finish, no new member starts"
        ));
        return;
    }
    let in_flight = in_stage(gate::UPDATING) + in_stage(gate::SOAKING);
    let limit = spec
        .and_then(|st| st.max_concurrent)
        .map(|c| usize::try_from(c.max(1)).unwrap_or(1))
        .unwrap_or(usize::MAX);
    let room = limit.saturating_sub(in_flight);
    let mut starting = Vec::new();
    for m in s
        .members
        .iter_mut()
        .filter(|m| m.stage == stage && m.state == gate::WAITING)
        .take(room)
    {
        m.revision = target;
        m.updated_time = Some(now.clone());
        m.failed_shards_before = input
            .placed
            .get(&m.cluster)
            .and_then(|f| f.failed_shards.clone());
        set_state(m, gate::UPDATING, now, None);
        starting.push(m.cluster.clone());
    }
    if !started && !starting.is_empty() {
        notes.push(Note {
            warning: false,
            reason: "StageStarted",
            message: format!(
                "revision {target}: stage {name} starts on {}",
                starting.join(", ")
            ),
        });
    }
    s.phase = phase::PROGRESSING.into();
    s.message = Some(format!("stage {name}: members changing"));
}

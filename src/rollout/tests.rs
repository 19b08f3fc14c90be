//! Scenes of a rollout, look by look.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::step::{Input, MemberFacts, Outcome, step};
use crate::api::rollout::{
    OnFailure, RolloutMember, RolloutPolicy, RolloutStage, RolloutStatus, gate, phase,
};

fn t(s: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + s).unwrap())
}

/// Members all fresh, each running `rev` healthily.
fn members(names: &[&str], rev: i64) -> BTreeMap<String, MemberFacts> {
    names
        .iter()
        .map(|n| {
            (
                n.to_string(),
                MemberFacts {
                    running: Some(rev),
                    fresh: true,
                    healthy: true,
                    ..Default::default()
                },
            )
        })
        .collect()
}

/// A world that follows the hub: each member runs what it is told, healthy unless its
/// revision is in `broken`.
struct World {
    policy: RolloutPolicy,
    facts: BTreeMap<String, MemberFacts>,
    status: Option<RolloutStatus>,
    hash: String,
    broken: Vec<i64>,
    approved: Option<(i64, i32)>,
    paused: bool,
    /// Every revision each member was told to run, in order.
    told: BTreeMap<String, Vec<i64>>,
}

impl World {
    fn new(policy: RolloutPolicy, names: &[&str]) -> World {
        let mut w = World {
            policy,
            facts: members(names, 1),
            status: None,
            hash: "h1".into(),
            broken: Vec::new(),
            approved: None,
            paused: false,
            told: BTreeMap::new(),
        };
        w.look(0);
        w
    }

    fn look(&mut self, at: i64) -> Outcome {
        let now = t(at);
        let out = step(&Input {
            policy: &self.policy,
            stored: self.status.as_ref(),
            revision_hash: &self.hash,
            placed: &self.facts,
            approved: self.approved,
            paused: self.paused,
            now: &now,
        });
        for (m, rev) in &out.assign {
            let told = self.told.entry(m.clone()).or_default();
            if told.last() != Some(rev) {
                told.push(*rev);
            }
            if let Some(f) = self.facts.get_mut(m) {
                f.running = Some(*rev);
                f.healthy = !self.broken.contains(rev);
            }
        }
        self.status = Some(out.status.clone());
        out
    }

    fn phase(&self) -> &str {
        &self.status.as_ref().unwrap().phase
    }

    fn state(&self, m: &str) -> &str {
        &self.member(m).state
    }

    /// The rollout's record of member `m`.
    fn member(&self, m: &str) -> &RolloutMember {
        member_of(self.status.as_ref().unwrap(), m)
    }
}

/// `status`'s record of member `m`.
fn member_of<'a>(status: &'a RolloutStatus, m: &str) -> &'a RolloutMember {
    status.members.iter().find(|x| x.cluster == m).unwrap()
}

fn canary(soak: i64, approval: bool) -> RolloutPolicy {
    RolloutPolicy {
        stages: vec![
            RolloutStage {
                name: Some("canary".into()),
                count: Some(1),
                soak_seconds: Some(soak),
                ..Default::default()
            },
            RolloutStage {
                name: Some("rest".into()),
                approval,
                ..Default::default()
            },
        ],
        progress_deadline_seconds: Some(60),
        ..Default::default()
    }
}

#[test]
fn the_first_revision_runs_everywhere_at_once() {
    let w = World::new(canary(10, false), &["a", "b", "c"]);
    let s = w.status.as_ref().unwrap();
    assert_eq!((s.revision, s.phase.as_str()), (1, phase::COMPLETE));
    assert_eq!(s.stable_revision, Some(1));
    assert!(w.told.values().all(|v| v == &vec![1]));
}

#[test]
fn a_good_change_rolls_stage_by_stage_with_soak_and_approval() {
    let mut w = World::new(canary(10, true), &["a", "b", "c"]);
    w.hash = "h2".into();
    let out = w.look(1);
    assert!(out.new_revision);
    assert_eq!(out.assign["a"], 2);
    assert_eq!((out.assign["b"], out.assign["c"]), (1, 1));
    assert_eq!(w.state("a"), gate::UPDATING);
    assert_eq!(out.notes[0].reason, "RolloutStarted");
    // a runs 2 healthily: it soaks for 10 s.
    w.look(2);
    assert_eq!(w.state("a"), gate::SOAKING);
    let out = w.look(5);
    assert_eq!(out.recheck, Some(std::time::Duration::from_secs(7)));
    assert_eq!(w.state("a"), gate::SOAKING);
    w.look(12);
    assert_eq!(w.state("a"), gate::PASSED);
    // The rest waits for a person.
    assert_eq!(w.phase(), phase::WAITING_FOR_APPROVAL);
    assert_eq!(w.told["b"], vec![1]);
    // An approval of another revision approves nothing.
    w.approved = Some((1, 5));
    w.look(13);
    assert_eq!(w.phase(), phase::WAITING_FOR_APPROVAL);
    w.approved = Some((2, 1));
    let out = w.look(14);
    assert_eq!((out.assign["b"], out.assign["c"]), (2, 2));
    // No soak in the last stage: healthy is passed, in the same look.
    let out = w.look(15);
    assert_eq!(w.phase(), phase::COMPLETE);
    assert_eq!(w.status.as_ref().unwrap().stable_revision, Some(2));
    assert!(out.notes.iter().any(|n| n.reason == "RolloutComplete"));
    assert!(
        w.look(16).notes.is_empty(),
        "a complete rollout says nothing more"
    );
    assert!(w.told.values().all(|v| v == &vec![1, 2]));
}

#[test]
fn a_broken_change_fails_in_the_first_member_and_is_rolled_back_there_only() {
    let mut w = World::new(canary(10, false), &["a", "b", "c"]);
    w.hash = "h2".into();
    w.broken = vec![2];
    w.look(1);
    // Not healthy: a stays Updating until its deadline (60 s).
    let out = w.look(30);
    assert_eq!(w.state("a"), gate::UPDATING);
    assert_eq!(out.recheck, Some(std::time::Duration::from_secs(31)));
    let out = w.look(61);
    assert_eq!(w.state("a"), gate::ROLLING_BACK);
    assert_eq!(w.phase(), phase::ROLLING_BACK);
    assert_eq!(out.assign["a"], 1);
    assert!(out.notes.iter().any(|n| n.reason == "RolloutMemberFailed"));
    w.look(62);
    assert_eq!(w.phase(), phase::ROLLED_BACK);
    assert_eq!(w.state("a"), gate::ROLLED_BACK);
    // b and c never saw revision 2; a went 1 → 2 → 1.
    assert_eq!(w.told["b"], vec![1]);
    assert_eq!(w.told["c"], vec![1]);
    assert_eq!(w.told["a"], vec![1, 2, 1]);
    // It stays rolled back.
    let out = w.look(500);
    assert_eq!(w.phase(), phase::ROLLED_BACK);
    assert!(out.assign.values().all(|r| *r == 1));
}

#[test]
fn a_reported_failure_fails_at_once_and_pause_leaves_members_where_they_are() {
    let mut p = canary(0, false);
    p.on_failure = Some(OnFailure::Pause);
    let mut w = World::new(p, &["a", "b"]);
    w.hash = "h2".into();
    w.look(1);
    w.facts.get_mut("a").unwrap().failing = Some("Failed: shards 0-1 failed".into());
    // The facts of the look after the write: a runs 2 and fails.
    w.facts.get_mut("a").unwrap().healthy = false;
    let out = w.look(2);
    assert_eq!(w.state("a"), gate::FAILED);
    assert_eq!(w.phase(), phase::HALTED);
    assert_eq!((out.assign["a"], out.assign["b"]), (2, 1));
}

#[test]
fn a_stale_report_never_passes() {
    let mut w = World::new(canary(0, false), &["a", "b"]);
    w.hash = "h2".into();
    w.look(1);
    let a = w.facts.get_mut("a").unwrap();
    a.fresh = false;
    // The member's last report said healthy on revision 2, but it is not fresh.
    let now = t(2);
    let out = step(&Input {
        policy: &w.policy,
        stored: w.status.as_ref(),
        revision_hash: "h2",
        placed: &w.facts,
        approved: None,
        paused: false,
        now: &now,
    });
    let a = member_of(&out.status, "a");
    assert_eq!(a.state, gate::UPDATING);
    assert_eq!(out.assign["b"], 1);
}

#[test]
fn a_failure_budget_lets_the_rollout_go_on() {
    let mut p = canary(0, false);
    p.failure_budget = Some(1);
    let mut w = World::new(p, &["a", "b", "c"]);
    w.hash = "h2".into();
    w.look(1);
    w.facts.get_mut("a").unwrap().failing = Some("Degraded".into());
    w.look(2);
    assert_eq!(w.state("a"), gate::FAILED);
    assert_eq!(w.phase(), phase::PROGRESSING);
    w.facts.get_mut("a").unwrap().failing = None;
    w.look(3);
    w.look(4);
    assert_eq!(w.phase(), phase::COMPLETE);
    assert_eq!(w.told["b"], vec![1, 2]);
}

#[test]
fn members_leaving_are_skipped_and_members_joining_run_the_stable_revision() {
    let mut w = World::new(canary(100, false), &["a", "b"]);
    w.hash = "h2".into();
    w.look(1);
    w.look(2);
    assert_eq!(w.state("a"), gate::SOAKING);
    // b leaves, d joins mid-rollout.
    w.facts.remove("b");
    w.facts.insert(
        "d".into(),
        MemberFacts {
            fresh: true,
            ..Default::default()
        },
    );
    let out = w.look(3);
    assert_eq!(w.state("b"), gate::SKIPPED);
    assert_eq!(
        out.assign["d"], 1,
        "a joining member gets the stable revision"
    );
    w.look(200);
    assert_eq!(w.phase(), phase::COMPLETE);
    let out = w.look(201);
    assert_eq!(out.assign["d"], 2);
}

#[test]
fn a_change_during_a_rollout_starts_over_from_the_last_healthy_revision() {
    let mut w = World::new(canary(100, false), &["a", "b"]);
    w.hash = "h2".into();
    w.broken = vec![2];
    w.look(1);
    w.look(2);
    // Revision 3 arrives while a is still trying 2: a goes back to 1 until... it is in
    // stage 0 again, so it gets 3 at once; b never sees 2.
    w.hash = "h3".into();
    w.broken = vec![];
    let out = w.look(3);
    assert_eq!(out.status.revision, 3);
    assert_eq!(out.assign["a"], 3);
    assert_eq!(out.assign["b"], 1);
    let a = member_of(&out.status, "a");
    assert_eq!(
        a.from_revision, 1,
        "rolling 3 back returns a to 1, not to unproven 2"
    );
    assert!(!w.told["b"].contains(&2));
}

#[test]
fn pause_holds_new_members_and_max_concurrent_limits_a_stage() {
    let p = RolloutPolicy {
        stages: vec![RolloutStage {
            max_concurrent: Some(1),
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut w = World::new(p, &["a", "b", "c"]);
    w.hash = "h2".into();
    let out = w.look(1);
    assert_eq!(out.assign.values().filter(|r| **r == 2).count(), 1);
    w.paused = true;
    w.look(2);
    w.look(3);
    assert_eq!(w.phase(), phase::PAUSED);
    assert_eq!(w.told["b"], vec![1]);
    w.paused = false;
    for at in 4..12 {
        w.look(at);
    }
    assert_eq!(w.phase(), phase::COMPLETE);
    // Never two members changing at once.
    assert!(w.told.values().all(|v| v == &vec![1, 2]));
}

#[test]
fn a_policy_that_leaves_members_out_holds_everyone_with_a_reason() {
    let p = RolloutPolicy {
        stages: vec![RolloutStage {
            clusters: vec!["a".into()],
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut w = World::new(p, &["a", "b"]);
    w.hash = "h2".into();
    let out = w.look(1);
    assert_eq!(w.phase(), phase::INVALID);
    assert!(
        out.status
            .message
            .unwrap()
            .contains("members b are in no stage")
    );
    assert!(out.assign.values().all(|r| *r == 1));
    // Fixed (a stage for the rest): it starts.
    w.policy.stages.push(RolloutStage::default());
    let out = w.look(2);
    assert_eq!(out.assign["a"], 2);
    assert_eq!(out.status.revision, 2);
}

#[test]
fn policy_checks_name_their_fields() {
    let p = RolloutPolicy {
        stages: vec![
            RolloutStage::default(),
            RolloutStage {
                clusters: vec!["a".into()],
                percent: Some(150),
                soak_seconds: Some(900),
                ..Default::default()
            },
            RolloutStage {
                clusters: vec!["a".into()],
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let mut errors = Vec::new();
    crate::api::rollout::check_policy(&p, &mut errors);
    let fields: Vec<&str> = errors.iter().map(|(f, _)| f.as_str()).collect();
    assert!(fields.contains(&"spec.rollout.stages[0]"), "{errors:?}");
    assert!(fields.contains(&"spec.rollout.stages[1]"), "{errors:?}");
    assert!(fields.contains(&"spec.rollout.stages[1].percent"));
    assert!(fields.contains(&"spec.rollout.stages[1].soakSeconds"));
    assert!(fields.contains(&"spec.rollout.stages[2].clusters"));
}

#[test]
fn a_member_told_to_run_a_revision_records_the_shards_that_had_failed_before() {
    let mut w = World::new(canary(0, false), &["a", "b"]);
    w.facts.get_mut("a").unwrap().failed_shards = Some("2-3".into());
    w.hash = "h2".into();
    w.look(1);
    let a = w.member("a");
    assert_eq!((a.state.as_str(), a.revision), (gate::UPDATING, 2));
    assert_eq!(a.failed_shards_before.as_deref(), Some("2-3"));
    // b waits for its stage: nothing recorded yet.
    assert_eq!(w.member("b").failed_shards_before, None);
}

//! How a workload's changes reach its members (`spec.rollout`) and where a change stands
//! (`status.rollout`). A change to what a workload runs is a numbered revision; a
//! rollout moves the members to it stage by stage, each member gated on its own health,
//! and rolls the members it touched back when too many fail. The engine is
//! [`crate::rollout`]; this module holds the API and its static checks.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{LabelSelector, optional_date_time_schema};

/// Annotation on a hub workload: the stage a person approved, `<revision>/<stage>`
/// (stages counted from 0). Approving stage N approves every stage before it too.
pub const ANNOTATION_APPROVED: &str = "rollout.pinterest.com/approved";
/// Annotation on a hub workload: `"true"` holds the rollout where it is (members that
/// are changing still finish; no new member starts).
pub const ANNOTATION_PAUSED: &str = "rollout.pinterest.com/paused";
/// Annotation on a slice: the revision of the workload it carries.
pub const ANNOTATION_REVISION: &str = "rollout.pinterest.com/revision";
/// Label on the hub's ControllerRevisions: the uid of the workload they belong to.
pub const LABEL_REVISION_OF: &str = "rollout.pinterest.com/revision-of";

/// How changes roll out. Absent: the federation's default (see `docs/rollouts.md`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPolicy {
    /// Ordered stages. Each takes members from those not taken by an earlier stage; a
    /// stage choosing none (`clusters`, `clusterSelector`, `count`, `percent` all unset)
    /// takes the rest, and only the last may. Empty: every member at once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<RolloutStage>,
    /// How long one member may take to run the new revision healthily before it fails.
    /// Default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub progress_deadline_seconds: Option<i64>,
    /// Members that may fail before the rollout stops. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub failure_budget: Option<i32>,
    /// What a spent failure budget does: `Rollback` (default) returns the members this
    /// rollout touched to the last revision that was healthy there; `Pause` leaves them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<OnFailure>,
    /// A CEL expression a member must also satisfy to pass, over `member`: its
    /// `clusters[]` entry (state, replicas, readyReplicas, availableReplicas,
    /// updatedReplicas, shardsRunning, shardsSucceeded, shardsFailed, completedShards,
    /// failedShards, active, revision, message), e.g.
    /// `member.readyReplicas >= 2 && member.state == 'Ready'`. A field the entry lacks, or
    /// a result that is not `true`, is not healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<String>,
    /// Revisions kept on the hub (at least the one running). Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub revision_history_limit: Option<i32>,
}

/// What a spent failure budget does.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OnFailure {
    #[default]
    Rollback,
    Pause,
}

/// One stage of a rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStage {
    /// A name for status, Events and `pinfed rollout approve --stage`. Default `stage-<n>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Members by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    /// Members whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// This many members (in name order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub count: Option<i32>,
    /// This percentage of the workload's members, rounded up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub percent: Option<i32>,
    /// Members of the stage changing at once. Default: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_concurrent: Option<i32>,
    /// How long each member must stay healthy on the new revision to pass. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub soak_seconds: Option<i64>,
    /// A person approves (`pinfed rollout approve`) before the stage starts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approval: bool,
}

impl RolloutStage {
    /// Whether the stage chooses no members of its own (it takes the rest).
    pub fn takes_rest(&self) -> bool {
        self.clusters.is_empty()
            && self.cluster_selector.is_none()
            && self.count.is_none()
            && self.percent.is_none()
    }

    pub fn display_name(&self, index: usize) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("stage-{index}"))
    }
}

impl RolloutPolicy {
    pub fn deadline_secs(&self) -> i64 {
        self.progress_deadline_seconds.unwrap_or(600).max(1)
    }
    pub fn budget(&self) -> u32 {
        u32::try_from(self.failure_budget.unwrap_or(0)).unwrap_or(0)
    }
    pub fn history_limit(&self) -> usize {
        usize::try_from(self.revision_history_limit.unwrap_or(10))
            .unwrap_or(10)
            .max(1)
    }
}

/// Where a workload's change stands (hub only).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The revision the spec asks for.
    pub revision: i64,
    /// A digest of what that revision runs (a change of spec with the same digest is no
    /// new revision: a scale or placement change).
    pub revision_hash: String,
    /// The last revision every member ran healthily; what a rollback returns to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_revision: Option<i64>,
    /// Progressing, WaitingForApproval, Paused, Complete, RollingBack, RolledBack, Halted.
    pub phase: String,
    /// The stage in progress (from 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<i32>,
    /// The stage names, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<String>,
    /// When this revision's rollout began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_date_time_schema")]
    pub started_time: Option<Time>,
    /// Members of this rollout (fixed when it began; members joining later get the
    /// stable revision and are not listed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["cluster"]))]
    pub members: Vec<RolloutMember>,
    /// What runs where, by revision, as the members report it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running: Vec<RevisionCount>,
    /// Members that failed their gate.
    #[serde(default)]
    pub failed: i32,
    /// Why the rollout is where it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// How much of a workload runs one revision.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionCount {
    pub revision: i64,
    /// The members whose slice runs it (processed by their agent).
    pub clusters: Vec<String>,
    /// Their replicas (services, stateful sets) or shards (job sets), summed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
}

/// One member's gate in a rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutMember {
    pub cluster: String,
    /// The stage the member is in (from 0).
    pub stage: i32,
    /// The revision the member is told to run now.
    pub revision: i64,
    /// The revision it ran when the rollout began (what a rollback returns it to).
    pub from_revision: i64,
    /// Waiting, Updating, Soaking, Passed, Failed, RollingBack, RolledBack, Skipped.
    pub state: String,
    /// When the member entered its state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_date_time_schema")]
    pub since: Option<Time>,
    /// When the member was told to run the new revision (its deadline counts from here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_date_time_schema")]
    pub updated_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A job set's shards that had already failed in this member when it was told to run
    /// this revision: not charged to the revision (a fix rolled out over earlier failures
    /// is judged by what fails after it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_shards_before: Option<String>,
}

/// Rollout phases.
pub mod phase {
    pub const PROGRESSING: &str = "Progressing";
    pub const WAITING_FOR_APPROVAL: &str = "WaitingForApproval";
    pub const PAUSED: &str = "Paused";
    pub const COMPLETE: &str = "Complete";
    pub const ROLLING_BACK: &str = "RollingBack";
    pub const ROLLED_BACK: &str = "RolledBack";
    /// The failure budget is spent and the policy says Pause.
    pub const HALTED: &str = "Halted";
    /// The policy cannot be applied to the workload's members (a hub condition says why).
    pub const INVALID: &str = "Invalid";
}

/// A member's gate states.
pub mod gate {
    pub const WAITING: &str = "Waiting";
    pub const UPDATING: &str = "Updating";
    pub const SOAKING: &str = "Soaking";
    pub const PASSED: &str = "Passed";
    pub const FAILED: &str = "Failed";
    pub const ROLLING_BACK: &str = "RollingBack";
    pub const ROLLED_BACK: &str = "RolledBack";
    pub const SKIPPED: &str = "Skipped";
}

/// Stages that name members the federation does not have (each naming its field): a
/// policy whose named stages take no member is refused where the member list is known
/// (the JSS), rather than left to hold the rollout on the hub.
pub fn unknown_members(
    p: &RolloutPolicy,
    known: &std::collections::BTreeSet<String>,
) -> Vec<(String, String)> {
    p.stages
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let unknown: Vec<&str> = s
                .clusters
                .iter()
                .filter(|c| !known.contains(*c))
                .map(String::as_str)
                .collect();
            (!unknown.is_empty()).then(|| {
                let mut have: Vec<&str> = known.iter().map(String::as_str).collect();
                have.truncate(20);
                (
                    format!("spec.rollout.stages[{i}].clusters"),
                    format!(
                        "no member named {} (members: {})",
                        unknown.join(", "),
                        have.join(", ")
                    ),
                )
            })
        })
        .collect()
}

/// The static checks of a policy (what needs no member list), each naming its field.
pub fn check_policy(p: &RolloutPolicy, errors: &mut Vec<(String, String)>) {
    let mut add = |f: String, m: String| errors.push((f, m));
    let deadline = p.deadline_secs();
    let mut names = std::collections::BTreeSet::new();
    let mut named = std::collections::BTreeMap::<&str, usize>::new();
    let last = p.stages.len().saturating_sub(1);
    for (i, s) in p.stages.iter().enumerate() {
        let f = format!("spec.rollout.stages[{i}]");
        let choices = [
            !s.clusters.is_empty(),
            s.cluster_selector.is_some(),
            s.count.is_some(),
            s.percent.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if choices > 1 {
            add(
                f.clone(),
                "choose members one way: clusters, clusterSelector, count or percent".into(),
            );
        }
        if s.takes_rest() && i != last {
            add(
                f.clone(),
                "only the last stage may leave its members unchosen (it takes the rest)".into(),
            );
        }
        if let Some(pc) = s.percent
            && !(1..=100).contains(&pc)
        {
            add(format!("{f}.percent"), format!("{pc} is not within 1..100"));
        }
        if let Some(c) = s.count
            && c < 1
        {
            add(format!("{f}.count"), format!("{c} must be at least 1"));
        }
        if let Some(c) = s.max_concurrent
            && c < 1
        {
            add(
                format!("{f}.maxConcurrent"),
                format!("{c} must be at least 1"),
            );
        }
        if let Some(soak) = s.soak_seconds {
            if soak < 0 {
                add(format!("{f}.soakSeconds"), "must not be negative".into());
            } else if soak >= deadline {
                add(
                    format!("{f}.soakSeconds"),
                    format!(
                        "{soak} s is not shorter than the progress deadline ({deadline} s): no member could pass"
                    ),
                );
            }
        }
        for c in &s.clusters {
            if let Some(prev) = named.insert(c.as_str(), i) {
                add(
                    format!("{f}.clusters"),
                    format!("{c:?} is already in stage {prev}: stages must not overlap"),
                );
            }
        }
        let name = s.display_name(i);
        if !names.insert(name.clone()) {
            add(format!("{f}.name"), format!("{name:?} names two stages"));
        }
    }
    if let Some(expr) = &p.health_check
        && let Err(e) = crate::rollout::health::compile(expr)
    {
        add("spec.rollout.healthCheck".into(), e);
    }
    if let Some(d) = p.progress_deadline_seconds
        && d < 1
    {
        add(
            "spec.rollout.progressDeadlineSeconds".into(),
            format!("{d} must be at least 1"),
        );
    }
    if let Some(b) = p.failure_budget
        && b < 0
    {
        add(
            "spec.rollout.failureBudget".into(),
            format!("{b} must not be negative"),
        );
    }
    if let Some(l) = p.revision_history_limit
        && l < 1
    {
        add(
            "spec.rollout.revisionHistoryLimit".into(),
            format!("{l} must be at least 1"),
        );
    }
}

//! The JSS's HTTP API as types: one definition per request and reply, serialized by the
//! server and decoded by the client (the CLI), so the two cannot drift apart. Field names
//! are the JSON's (camelCase).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use super::artifacts::ArtifactRef;
use crate::api::common::Condition;
use crate::api::federation::ResourceAmounts;
use crate::api::kind::{HubPart, PinterestKind, Totals};
use crate::api::rollout::{RolloutPolicy, RolloutStatus};
use crate::api::workload::WorkloadKind;
use crate::placement::model::Resources;

/// `POST /v1/submissions` (JSON form): an artifact from the store, or the resource itself
/// (an object, or YAML text) for teams allowed to submit inline.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<ArtifactRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A list reply: `{"items": [...]}`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct List<T> {
    pub items: Vec<T>,
}

/// One page of a list asked for with `?limit=N`: `{"items": [...], "continue": "..."}`;
/// ask again with `&continue=` for the next page; none means the last page. Without a
/// limit it is the whole list (no `continue`), as a [`List`] reads it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    #[serde(default, rename = "continue", skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// Amounts as quantities people read (`1500m`, `1536Mi`), as every pinfed surface prints
/// them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Amounts {
    pub cpu: String,
    pub memory: String,
    pub gpus: i64,
    pub pods: i64,
}

impl From<&Resources> for Amounts {
    fn from(r: &Resources) -> Amounts {
        Amounts {
            cpu: r.cpu.format_cpu(),
            memory: r.memory.format_memory(),
            gpus: r.gpu,
            pods: r.pods,
        }
    }
}

/// The reply to a submission (201 created, 200 updated).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Submitted {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub generation: Option<i64>,
    pub team: String,
    pub submitted_by: String,
    /// `name@version` of the artifact submitted, if it was one.
    pub artifact: Option<String>,
    pub sha256: Option<String>,
    pub requested: Amounts,
    pub created: bool,
    /// The priority its class gives it (absent: no class and no global default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<SubmittedPriority>,
    /// What the hub is likely to do, from the members as their status shows them: where it
    /// fits now, or what it would wait for (its place in the queue shows in `pinfed queue`
    /// once the hub has decided).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<String>,
    /// The trace of this submission (32 hex digits) when the JSS exports spans: the hub's
    /// and the members' work on it join the same trace (docs/observability.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// A submission's resolved priority.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SubmittedPriority {
    pub class: String,
    pub value: i32,
    /// Whether it may preempt lower-priority work (its class's `preemptionPolicy`).
    pub preempts: bool,
}

/// The reply to a dry run (`POST /v1/submissions?dryRun=true`, `pinfed submit
/// --dry-run`): what the hub would do with the submission on the live federation, with
/// nothing written anywhere.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DryRun {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    pub team: String,
    /// Who asked.
    pub submitted_by: String,
    /// `name@version` of the artifact, if it was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<String>,
    /// The workload exists on the hub: the submission would update it.
    pub exists: bool,
    /// `Divided`, `Duplicated` or `Single`, as the engine ran it.
    pub strategy: String,
    /// What it requests of the federation in total (as the quota check counts it).
    pub requested: Amounts,
    /// Each member with a share, in name order, with the reason it got it.
    pub placements: Vec<DryRunShare>,
    /// Each member without a share, and why.
    pub excluded: Vec<DryRunExclusion>,
    /// Replicas, shards or copies that would find no place.
    pub unplaced: u32,
    /// `NoEligibleCluster`, `InsufficientCapacity` or `QuotaExceeded` when something is
    /// unplaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// Why something is unplaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Soft problems that left nothing unplaced (a spread met only partly).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The effect on each FederatedQuota of the namespace, in total and per member.
    #[serde(default)]
    pub quotas: Vec<QuotaEffect>,
    /// An existing workload: the split the hub records now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<Vec<DryRunShare>>,
    /// An existing workload: the members whose share would change.
    #[serde(default)]
    pub moves: Vec<DryRunMove>,
    /// What each member would run (and, for an existing workload, each member that runs
    /// it now), in name order.
    pub members: Vec<MemberPreview>,
    /// How far the answer is from the hub's own decision (the approximation of node room).
    pub note: String,
}

/// One member's share in a dry run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DryRunShare {
    pub cluster: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    /// Shard indices (a range list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<String>,
    /// The pods it runs there.
    pub pods: u64,
    /// What those pods request there (overrides included).
    pub requests: Amounts,
    /// Why it got this share, with the numbers.
    pub reason: String,
}

/// A member without a share in a dry run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct DryRunExclusion {
    pub cluster: String,
    pub why: String,
}

/// A member whose share would change.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct DryRunMove {
    pub cluster: String,
    /// Its share now (`3 replicas`, `shards 0-4`, `whole`, `-` for none).
    pub before: String,
    /// Its share after.
    pub after: String,
}

/// What a submission would do to one FederatedQuota.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct QuotaEffect {
    /// `namespace/name`.
    pub quota: String,
    pub rows: Vec<QuotaEffectRow>,
}

/// One dimension of a quota, in total (`scope: total`) or on one member.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct QuotaEffectRow {
    /// `total` or a member's name.
    pub scope: String,
    /// `cpu`, `memory`, `gpus`, `pods`.
    pub resource: String,
    /// What the workload would count.
    pub adds: String,
    /// What it counts now (an existing workload; replaced by `adds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now: Option<String>,
    /// What the namespace's other workloads use.
    pub used: String,
    /// The limit (`-`: none on this member).
    pub hard: String,
    /// `used + adds <= hard`.
    pub fits: bool,
}

/// What one member would run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MemberPreview {
    pub cluster: String,
    /// The override rules that select it (their names, or `spec.overrides[i]`).
    #[serde(default)]
    pub overrides: Vec<String>,
    /// Its objects after runtime injection and overrides, as a YAML stream (empty: it
    /// would run nothing).
    pub objects: String,
    /// How many objects; more than the stream holds when it was cut.
    pub object_count: usize,
    /// An existing workload: a unified diff of its objects now against after (`None`
    /// for a new workload; empty when nothing changes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// Why its objects could not be built, if they could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a workload asks for, by kind (services and stateful sets: replicas; job sets:
/// shards; training jobs: replicas over every role; cron jobs: the schedule).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Desired {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
}

/// One workload with its hub status (`GET /v1/workloads...`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadView {
    pub kind: WorkloadKind,
    pub namespace: Option<String>,
    pub name: String,
    pub uid: Option<String>,
    pub generation: Option<i64>,
    pub deleting: bool,
    pub team: Option<String>,
    pub contact: Option<String>,
    pub submitted_by: Option<String>,
    pub artifact: Option<String>,
    pub desired: Desired,
    pub requested: Amounts,
    /// `spec.priorityClassName`: the hub's PriorityClass its place in the queue comes
    /// from (none: the hub's global default, or 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// The hub status as stored: the kind's own status type ([`Self::hub_status`] reads
    /// it typed).
    pub status: serde_json::Value,
}

/// A workload's hub status read through its kind: the shared part and the totals.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HubStatusView {
    pub part: HubPart,
    pub totals: Totals,
}

impl HubStatusView {
    /// A hub status held as JSON, read as its kind's type. A field that does not decode
    /// (a status written by another version) is left out and the others are read; none
    /// yet reads as empty.
    pub fn read(kind: WorkloadKind, status: &serde_json::Value) -> HubStatusView {
        fn read<K: PinterestKind>(v: &serde_json::Value) -> HubStatusView {
            let s: K::Status = serde_json::from_value(v.clone()).unwrap_or_else(|_| {
                let fields = v.as_object().into_iter().flatten().filter(|(k, x)| {
                    let one = serde_json::json!({ k.as_str(): x });
                    serde_json::from_value::<K::Status>(one).is_ok()
                });
                let fine: serde_json::Map<_, _> =
                    fields.map(|(k, x)| (k.clone(), x.clone())).collect();
                serde_json::from_value(fine.into()).unwrap_or_default()
            });
            HubStatusView {
                part: K::hub_part(&s),
                totals: K::totals(&s),
            }
        }
        crate::with_kind!(kind, K => read::<K>(status))
    }

    /// The status of a condition type (`True`, `False`, `Unknown`), if set.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        crate::api::common::find_condition(&self.part.conditions, type_)
    }
}

impl WorkloadView {
    /// The status as the kind's type says it ([`HubStatusView::read`]).
    pub fn hub_status(&self) -> HubStatusView {
        HubStatusView::read(self.kind, &self.status)
    }
}

/// One member cluster: where it is, whether it is Ready, and its capacity.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterView {
    pub name: String,
    pub region: Option<String>,
    pub zone: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// The Ready condition's status (`Unknown` before the first heartbeat).
    pub ready: String,
    pub ready_reason: Option<String>,
    pub ready_message: Option<String>,
    pub kubernetes_version: Option<String>,
    pub last_heartbeat_time: Option<Time>,
    pub nodes: Option<i32>,
    pub capacity: Option<ResourceAmounts>,
    pub allocatable: Option<ResourceAmounts>,
    pub allocated: Option<ResourceAmounts>,
    pub available: Option<ResourceAmounts>,
}

/// One quota: hard totals and caps, what the hub placed under it, and what the
/// namespace's submitted workloads request (computed by the JSS).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct QuotaView {
    pub namespace: Option<String>,
    pub name: String,
    pub hard: ResourceAmounts,
    pub per_cluster: BTreeMap<String, ResourceAmounts>,
    pub used: Option<ResourceAmounts>,
    pub used_per_cluster: BTreeMap<String, ResourceAmounts>,
    pub requested: Option<Amounts>,
    pub conditions: Vec<Condition>,
}

/// The governance report (`GET /v1/owners`): what each team runs where.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct OwnersReport {
    pub teams: Vec<TeamView>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TeamView {
    pub team: String,
    pub contacts: Vec<String>,
    pub clusters: Vec<String>,
    pub requested: Amounts,
    /// How many of its workloads are past their expiry.
    pub expired: usize,
    pub workloads: Vec<OwnedView>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OwnedView {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    pub clusters: Vec<String>,
    pub requested: Amounts,
    /// When it may be garbage collected (RFC 3339), if known.
    pub expires_at: Option<String>,
    pub expired: bool,
}

/// One workload waiting in the hub's queue (`GET /v1/queue`): its standing as the hub last
/// wrote it in `status.placement.queue`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct QueueEntry {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    /// `spec.owner.team`.
    pub team: Option<String>,
    /// 1 is next (among every waiting workload on the hub, not only those listed).
    pub position: i32,
    /// Workloads waiting on the hub in all.
    pub waiting: i32,
    /// The priority of its class.
    pub priority: i32,
    /// What the queue orders by: its priority plus what waiting has added.
    pub effective_priority: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Waiting since.
    pub since: Time,
    /// Room in which members, quota in which namespace, or the workload ahead of it.
    pub waiting_for: String,
    /// Replicas, shards or copies not placed yet.
    pub unplaced: i32,
}

/// The reply to a delete.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Deleted {
    pub deleted: ObjectName,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ObjectName {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
}

/// A workload's rollout (`GET /v1/workloads/{namespace}/{kind}/{name}/rollout`): where the
/// change stands as the hub wrote it, what a person asked (approval, pause) and the
/// revisions the hub keeps.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutView {
    pub workload: ObjectName,
    /// `status.rollout`; `None` before the hub's first look at the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RolloutStatus>,
    /// `spec.rollout` as written; `None`: the federation's default rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<RolloutPolicy>,
    /// The approval annotation (`<revision>/<stage>`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved: Option<String>,
    /// The pause annotation is `"true"`.
    #[serde(default)]
    pub paused: bool,
    /// The revisions the hub keeps, oldest first.
    #[serde(default)]
    pub history: Vec<RevisionEntry>,
}

/// One recorded revision of a workload (a ControllerRevision on the hub).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RevisionEntry {
    pub revision: i64,
    /// The container images it runs (init containers included), in the order written.
    #[serde(default)]
    pub images: Vec<String>,
    /// The RuntimeProfile version it resolved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<Time>,
    /// The revision the spec asks for (`status.rollout.revision`).
    #[serde(default)]
    pub current: bool,
    /// The last revision every member ran healthily (`status.rollout.stableRevision`).
    #[serde(default)]
    pub stable: bool,
}

/// A person's action on a rollout (`POST .../rollout/{action}`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RolloutAction {
    Approve,
    Pause,
    Resume,
    Undo,
}

impl RolloutAction {
    pub const ALL: [RolloutAction; 4] = [
        RolloutAction::Approve,
        RolloutAction::Pause,
        RolloutAction::Resume,
        RolloutAction::Undo,
    ];

    /// As in the URL and the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutAction::Approve => "approve",
            RolloutAction::Pause => "pause",
            RolloutAction::Resume => "resume",
            RolloutAction::Undo => "undo",
        }
    }

    pub fn parse(s: &str) -> Option<RolloutAction> {
        RolloutAction::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

/// The body of `POST .../rollout/{action}` (may be empty: every field is optional).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutActionRequest {
    /// approve: the stage approved, by name or index (default: the stage that waits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// undo: the revision to run again (default: the stable revision when it is not the
    /// current one, else the newest recorded revision before the current one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_revision: Option<i64>,
}

/// What `POST .../rebalance` did or, with `dryRun=true`, would do: the workload placed
/// again from scratch on the members as their status shows them (`plan`, with the moves
/// from the current split).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RebalanceReply {
    pub workload: ObjectName,
    /// The request was handed to the hub (false: a dry run).
    pub requested: bool,
    /// The request's id (`federation.pinterest.com/rebalance`); the hub records it in
    /// `status.placement.rebalanced` once it acted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    pub plan: DryRun,
    pub message: String,
}

/// What a rollout action did.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutActionReply {
    pub workload: ObjectName,
    pub action: RolloutAction,
    /// approve: the revision approved; undo: the revision whose content the spec runs now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// approve: the stage approved (from 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_name: Option<String>,
    /// Whether the hub object changed (pausing what is paused changes nothing).
    pub changed: bool,
    /// What was done, as people read it.
    pub message: String,
}

/// Every error reply: the message, a stable reason, and details (field errors with
/// their paths, or quota rows with their numbers).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ErrorReply {
    pub error: String,
    pub reason: String,
    #[serde(default)]
    pub details: Vec<Detail>,
}

/// One line of an error's `details`: a field error, or a quota row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Detail {
    Field {
        field: String,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<usize>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        column: Option<usize>,
    },
    Quota {
        quota: String,
        resource: String,
        requested: String,
        used: String,
        hard: String,
    },
}

impl Detail {
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Detail {
        Detail::Field {
            field: field.into(),
            message: message.into(),
            line: None,
            column: None,
        }
    }
}

impl ErrorReply {
    /// As people read it: `422 (Invalid): message`, then one line per detail
    /// (`  spec.replicas: must be at least 0`, quota rows with their numbers).
    pub fn describe(&self, status: u16) -> String {
        use std::fmt::Write as _;
        let mut f = format!("{status} ({}): {}", self.reason, self.error);
        for d in &self.details {
            match d {
                Detail::Field {
                    field,
                    message,
                    line,
                    column,
                } => {
                    let _ = write!(f, "\n  {field}: {message}");
                    if let (Some(l), Some(c)) = (line, column) {
                        let _ = write!(f, " (line {l}, column {c})");
                    }
                }
                Detail::Quota {
                    quota,
                    resource,
                    requested,
                    used,
                    hard,
                } => {
                    let _ = write!(
                        f,
                        "\n  {quota}: {resource}: requested {requested} + used {used} > hard {hard}"
                    );
                }
            }
        }
        f
    }
}

/// The client decodes every reply the server builds: each is built by the server's own
/// code (views, rejections), sent through JSON, and read back with [`Reply::decode`] as
/// the CLI does (the CLI's own tests render what it decodes; `jss` may not reach `cli`).
///
/// [`Reply::decode`]: super::client::Reply::decode
#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::federation::{FederatedQuota, MemberCluster};
    use crate::jss::client::Reply;
    use crate::jss::error::Rejection;
    use crate::jss::views;
    use kube::api::DynamicObject;

    /// The server's reply as the client receives it.
    fn sent<T: Serialize>(status: u16, reply: &T) -> Reply {
        let text = serde_json::to_string(reply).unwrap();
        Reply {
            status,
            body: serde_json::from_str(&text).unwrap(),
            text,
        }
    }

    fn workload(kind: WorkloadKind) -> WorkloadView {
        // The hub status each kind writes (the golden files of `status::hub_status`).
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden/hub-status")
            .join(format!("{}.json", kind.as_str()));
        let status: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let o: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": kind.as_str(),
            "metadata": {"name": "w", "namespace": "ads", "generation": 2},
            "spec": {"owner": {"team": "ads", "contact": "c"}, "replicas": 5, "shards": 10,
                     "schedule": "*/5 * * * *", "priorityClassName": "high"},
            "status": status,
        }))
        .unwrap();
        views::workload(kind, &o, &Resources::ZERO)
    }

    #[test]
    fn every_workload_reply_decodes_with_its_kinds_status() {
        let mut items: Vec<WorkloadView> = WorkloadKind::ALL.iter().map(|k| workload(*k)).collect();
        // The hub's queue standing and preemptions, in every kind's status.
        for w in &mut items {
            w.status["placement"]["queue"] = serde_json::json!({"position": 2, "waiting": 5,
                "priority": 1000, "effectivePriority": 1010, "priorityClassName": "high",
                "since": "2026-01-01T00:00:00Z", "waitingFor": "room in use1a"});
            w.status["placement"]["preemptions"] = serde_json::json!([{"by": "PinterestTrainingJob/ml/big",
                "byPriority": 2000, "cluster": "use1a", "pods": 3, "shards": "4-6",
                "time": "2026-01-01T00:00:00Z", "reason": "room for a higher priority"}]);
        }
        let list: List<WorkloadView> = sent(
            200,
            &List {
                items: items.clone(),
            },
        )
        .decode()
        .unwrap();
        assert_eq!(list.items, items);
        // A page is a list with the token of the next one.
        let page: Page<WorkloadView> = sent(
            200,
            &Page {
                items: items[..2].to_vec(),
                next: Some("tok".into()),
            },
        )
        .decode()
        .unwrap();
        assert_eq!((page.items.len(), page.next.as_deref()), (2, Some("tok")));
        let last: Page<WorkloadView> = sent(200, &List::<WorkloadView> { items: vec![] })
            .decode()
            .unwrap();
        assert_eq!(last.next, None);
        for w in &list.items {
            let s = w.hub_status();
            let placed = s.part.placement.as_ref().map(|p| p.placements.len());
            assert!(placed.unwrap_or(0) > 0, "{:?}: no placement read", w.kind);
            assert!(!s.part.clusters.is_empty(), "{:?}: no members read", w.kind);
            assert!(s.condition("Ready").is_some(), "{:?}: no Ready", w.kind);
            let p = s.part.placement.as_ref().unwrap();
            assert_eq!(
                p.queue.as_ref().map(|q| q.position),
                Some(2),
                "{:?}",
                w.kind
            );
            assert_eq!(p.preemptions.len(), 1, "{:?}", w.kind);
        }
        let s = list.items[0].hub_status();
        assert_eq!((s.totals.replicas, s.totals.updated_replicas), (5, 4));
        assert_eq!(list.items[1].hub_status().totals.completed_shards.len(), 8);
        let one: WorkloadView = sent(200, &items[0]).decode().unwrap();
        assert_eq!(one, items[0]);
        assert_eq!(one.priority_class_name.as_deref(), Some("high"));
    }

    #[test]
    fn every_other_reply_decodes() {
        let m: MemberCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": "use1a", "labels": {"tier": "gold"}},
            "spec": {"region": "us-east-1", "zone": "us-east-1a", "mode": "Push"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Heartbeat",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "nodes": 3, "allocatable": {"cpu": "32", "memory": "1536Mi"}},
        }))
        .unwrap();
        let c: List<ClusterView> = sent(
            200,
            &List {
                items: vec![views::cluster(&m)],
            },
        )
        .decode()
        .unwrap();
        assert_eq!(c.items[0].ready, "True");
        assert_eq!(c.items[0].labels["tier"], "gold");
        let q: FederatedQuota = serde_json::from_value(serde_json::json!({
            "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "FederatedQuota",
            "metadata": {"name": "team", "namespace": "ads"},
            "spec": {"hard": {"cpu": "4"}, "perCluster": {"use1a": {"cpu": "2"}}},
            "status": {"used": {"cpu": "1"}, "usedPerCluster": {"use1a": {"cpu": "1"}}},
        }))
        .unwrap();
        let quota = views::quota(&q, Some(&Resources::ZERO));
        let qs: List<QuotaView> = sent(
            200,
            &List {
                items: vec![quota.clone()],
            },
        )
        .decode()
        .unwrap();
        assert_eq!(qs.items, vec![quota]);
        let rows = [views::OwnedWorkload {
            team: "ads".into(),
            contact: "c".into(),
            kind: WorkloadKind::JobSet,
            namespace: "ads".into(),
            name: "j".into(),
            clusters: vec!["use1a".into()],
            requested: Resources::ZERO,
            expires_at: Some("2026-01-01T00:00:00Z".parse().unwrap()),
        }];
        let report = views::owners(&rows, k8s_openapi::jiff::Timestamp::now(), false);
        let got: OwnersReport = sent(200, &report).decode().unwrap();
        assert_eq!(got, report);
        assert!(got.teams[0].workloads[0].expired);
        let submitted = Submitted {
            kind: WorkloadKind::Service,
            namespace: "ads".into(),
            name: "web".into(),
            uid: Some("u".into()),
            generation: Some(1),
            team: "ads".into(),
            submitted_by: "alice".into(),
            artifact: Some("web@1".into()),
            sha256: None,
            requested: (&Resources::ZERO).into(),
            created: true,
            priority: Some(SubmittedPriority {
                class: "urgent".into(),
                value: 1000,
                preempts: true,
            }),
            forecast: Some("would wait: no room (it may preempt lower-priority work)".into()),
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
        };
        assert_eq!(
            sent(201, &submitted).decode::<Submitted>().unwrap(),
            submitted
        );
        let deleted = Deleted {
            deleted: ObjectName {
                kind: WorkloadKind::Daemon,
                namespace: "ads".into(),
                name: "d".into(),
            },
        };
        assert_eq!(sent(200, &deleted).decode::<Deleted>().unwrap(), deleted);
        let artifacts = List {
            items: vec![ArtifactRef {
                name: "web".into(),
                version: "1".into(),
            }],
        };
        assert_eq!(
            sent(200, &artifacts).decode::<List<ArtifactRef>>().unwrap(),
            artifacts
        );
        let waiting = [
            (
                WorkloadKind::JobSet,
                views::tests::waiting(
                    "PinterestJobSet",
                    "ads",
                    "j",
                    "ads",
                    2,
                    "2026-01-01T00:00:00Z",
                ),
            ),
            (
                WorkloadKind::Service,
                views::tests::waiting(
                    "PinterestService",
                    "ads",
                    "s",
                    "ads",
                    1,
                    "2026-01-01T00:00:00Z",
                ),
            ),
        ];
        let queue = List {
            items: views::queue(waiting.iter().map(|(k, o)| (*k, o)), None, |_, _| true),
        };
        assert_eq!(queue.items.len(), 2);
        let got: List<QueueEntry> = sent(200, &queue).decode().unwrap();
        assert_eq!(got, queue);
        assert_eq!(got.items[0].name, "s");
        let empty: List<QueueEntry> = List { items: vec![] };
        assert_eq!(
            sent(200, &empty).decode::<List<QueueEntry>>().unwrap(),
            empty
        );
    }

    #[test]
    fn a_dry_run_reply_decodes() {
        let reply = crate::jss::dry_run::tests::sample_reply();
        assert!(reply.exists && !reply.members.is_empty() && !reply.quotas.is_empty());
        assert!(reply.current.is_some() && !reply.excluded.is_empty());
        assert!(reply.members.iter().any(|m| m.diff.is_some()));
        assert_eq!(sent(200, &reply).decode::<DryRun>().unwrap(), reply);
    }

    #[test]
    fn rollout_replies_and_requests_decode() {
        use k8s_openapi::api::apps::v1::ControllerRevision;
        use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
        let o: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
            "metadata": {"name": "web", "namespace": "ads", "uid": "u",
                "annotations": {"rollout.pinterest.com/approved": "2/0",
                    "rollout.pinterest.com/paused": "true"}},
            "spec": {"owner": {"team": "ads", "contact": "c"},
                "rollout": {"stages": [{"name": "first", "approval": true, "clusters": ["a"]},
                    {"name": "rest"}], "progressDeadlineSeconds": 60}},
            "status": {"rollout": {"revision": 2, "revisionHash": "h", "stableRevision": 1,
                "phase": "WaitingForApproval", "stage": 0, "stages": ["first", "rest"],
                "startedTime": "2026-01-01T00:00:00Z",
                "members": [{"cluster": "a", "stage": 0, "revision": 1, "fromRevision": 1,
                    "state": "Waiting", "since": "2026-01-01T00:00:00Z"}],
                "failed": 0, "message": "stage first waits for approval"}},
        }))
        .unwrap();
        let cr = |revision: i64, image: &str| ControllerRevision {
            metadata: kube::api::ObjectMeta {
                name: Some(format!("pinterestservice-web-{revision}")),
                creation_timestamp: Some(Time("2026-01-01T00:00:00Z".parse().unwrap())),
                ..Default::default()
            },
            data: Some(RawExtension(serde_json::json!({"runtimeVersion": "v1",
                "template": {"spec": {"containers": [{"name": "app", "image": image}]}}}))),
            revision,
        };
        let view =
            crate::jss::rollout::view(WorkloadKind::Service, &o, &[cr(1, "app:1"), cr(2, "app:2")]);
        let got: RolloutView = sent(200, &view).decode().unwrap();
        assert_eq!(got, view);
        let s = got.status.as_ref().unwrap();
        assert_eq!((s.revision, s.stage, s.members.len()), (2, Some(0), 1));
        assert_eq!((got.approved.as_deref(), got.paused), (Some("2/0"), true));
        assert_eq!(got.policy.unwrap().deadline_secs(), 60);
        assert_eq!(got.history.len(), 2);
        assert!(got.history[1].current && got.history[0].stable);
        assert_eq!(got.history[1].images, vec!["app:2".to_string()]);
        // Before the hub's first look: no status, no history.
        let bare: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
            "metadata": {"name": "web", "namespace": "ads"}, "spec": {}}))
        .unwrap();
        let empty = crate::jss::rollout::view(WorkloadKind::Service, &bare, &[]);
        assert_eq!(sent(200, &empty).decode::<RolloutView>().unwrap(), empty);
        for action in RolloutAction::ALL {
            let reply = RolloutActionReply {
                workload: view.workload.clone(),
                action,
                revision: Some(2),
                stage: Some(0),
                stage_name: Some("first".into()),
                changed: true,
                message: "m".into(),
            };
            assert_eq!(
                sent(200, &reply).decode::<RolloutActionReply>().unwrap(),
                reply
            );
            assert_eq!(RolloutAction::parse(action.as_str()), Some(action));
        }
        // The requests the CLI sends are the ones the server reads.
        for req in [
            RolloutActionRequest::default(),
            RolloutActionRequest {
                stage: Some("rest".into()),
                to_revision: None,
            },
            RolloutActionRequest {
                stage: None,
                to_revision: Some(1),
            },
        ] {
            let action = if req.stage.is_some() {
                RolloutAction::Approve
            } else {
                RolloutAction::Undo
            };
            let body = serde_json::to_vec(&req).unwrap();
            assert_eq!(
                crate::jss::rollout::parse_request(action, &body).unwrap(),
                req
            );
        }
    }

    #[test]
    fn every_rejection_decodes_as_an_error_with_its_details() {
        let quota = crate::jss::quota::QuotaExceeded {
            quota: "ads/q".into(),
            rows: vec![crate::jss::quota::QuotaRow {
                resource: "cpu",
                requested: "2".into(),
                used: "3".into(),
                hard: "4".into(),
            }],
        };
        let all = [
            Rejection::Unauthenticated(crate::jss::auth::AuthError::Missing),
            Rejection::TooLarge { limit: 1 },
            Rejection::BadRequest("b".into()),
            Rejection::invalid("bad", vec![Detail::field("spec.replicas", "must be >= 0")]),
            Rejection::QuotaExceeded(quota),
            Rejection::ArtifactNotFound("a".into()),
            Rejection::ArtifactMismatch("a".into()),
            Rejection::NotFound("n".into()),
            Rejection::NoRoute("/x".into()),
            Rejection::MethodNotAllowed("PUT".into()),
            Rejection::Timeout(30),
            Rejection::Hub("h".into()),
            Rejection::NotReady,
            Rejection::TooManyFailedAuths {
                client: "127.0.0.1".into(),
                retry_after_secs: 5,
            },
            Rejection::TooManyRequests {
                principal: "alice".into(),
                retry_after_secs: 2,
            },
            Rejection::Busy("b".into()),
            Rejection::Internal("i".into()),
        ];
        for r in all {
            let reply = sent(r.status(), &r.reply());
            let text = reply.error_text();
            assert!(
                text.starts_with(&format!("{} ({}): ", r.status(), r.reason())),
                "{text}"
            );
            let e = reply.decode::<WorkloadView>().unwrap_err().to_string();
            assert_eq!(e, text, "a failed reply is its error, not a decode error");
            match r.reason() {
                "Invalid" => assert!(text.contains("\n  spec.replicas: must be >= 0"), "{text}"),
                "QuotaExceeded" => assert!(text.contains("requested 2 + used 3 > hard 4")),
                _ => {}
            }
        }
    }
}

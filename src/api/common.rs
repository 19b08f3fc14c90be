//! Types every Pinterest kind shares: ownership, placement policy, conditions and the hub's
//! view of placement and per-cluster status. Also the label and annotation keys the
//! platform writes, and the schema helpers for fields whose type comes from k8s-openapi.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Declares a kind's status type: the fields every kind's status has around the kind's
/// own, in the order they are written. First `observedGeneration` and `conditions` (the
/// kind names its condition types in the doc string, which keeps its leading space as a
/// `///` line would), then the kind's fields, then `runtimeVersion` and the hub's
/// `placement`, `rollout` and `clusters`.
macro_rules! workload_status {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            conditions: $conditions:literal,
            $(
                $(#[$fmeta:meta])*
                pub $field:ident : $ty:ty,
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(
            ::serde::Serialize,
            ::serde::Deserialize,
            Clone,
            Debug,
            Default,
            PartialEq,
            ::schemars::JsonSchema,
        )]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            /// The generation this status describes.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub observed_generation: Option<i64>,
            #[doc = $conditions]
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
            pub conditions: Vec<$crate::api::common::Condition>,
            $(
                $(#[$fmeta])*
                pub $field: $ty,
            )*
            /// The RuntimeProfile version injected.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub runtime_version: Option<String>,
            /// Hub only: the placement decision.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub placement: Option<$crate::api::common::PlacementDecision>,
            /// Hub only: the revision the spec asks for and how far its rollout is.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub rollout: Option<$crate::api::rollout::RolloutStatus>,
            /// Hub only: per-cluster status, with the time each was observed.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["cluster"]))]
            pub clusters: Vec<$crate::api::common::MemberWorkloadStatus>,
        }
    };
}
pub(crate) use workload_status;

/// Declares a kind's custom resource and spec type. The CRD attributes every kind shares
/// are written here (group, version, namespaced, category, `PartialEq`, and the Team and
/// Age columns last); the kind gives its name, status type, short name, doc and its own
/// columns (and `scale`). The spec starts with the fields every kind's spec has, `owner`,
/// `runtimeVersion`, `placement` (the kind says its default strategy in the doc string,
/// which keeps its leading space as a `///` line would), `rollout`, `overrides` and
/// `priorityClassName`, then the kind's own.
macro_rules! workload_spec {
    (
        $(#[$meta:meta])*
        crd $kind:literal, status $status:literal, short $short:literal {
            $($attrs:tt)*
        }
        pub struct $name:ident {
            placement: $placement:literal,
            $(
                $(#[$fmeta:meta])*
                pub $field:ident : $ty:ty,
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(
            ::kube::CustomResource,
            ::serde::Serialize,
            ::serde::Deserialize,
            Clone,
            Debug,
            PartialEq,
            ::schemars::JsonSchema,
        )]
        #[kube(
            group = "compute.pinterest.com",
            version = "v1alpha1",
            kind = $kind,
            namespaced,
            status = $status,
            shortname = $short,
            category = "pinterest",
            derive = "PartialEq",
            $($attrs)*,
            printcolumn(name = "Team", type_ = "string", json_path = ".spec.owner.team"),
            printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
        )]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            /// Owning team and contact.
            pub owner: $crate::api::common::Owner,
            /// Pins a RuntimeProfile version; absent means the profile marked default.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub runtime_version: Option<String>,
            #[doc = $placement]
            #[serde(default)]
            pub placement: $crate::api::common::Placement,
            /// How changes to what it runs reach its members: stages, gates, rollback.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub rollout: Option<$crate::api::rollout::RolloutPolicy>,
            /// Per-member changes to what the member runs (see `docs/overrides.md`).
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub overrides: Vec<$crate::api::overrides::Override>,
            /// A PriorityClass on the hub: orders the hub's queue, may preempt lower-priority
            /// work (its `preemptionPolicy`), and is set on the pods where the member has the
            /// class (see `docs/priority.md`). Absent: the hub's global default class, or 0.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub priority_class_name: Option<String>,
            $(
                $(#[$fmeta])*
                pub $field: $ty,
            )*
        }
    };
}
pub(crate) use workload_spec;

/// Label: who manages a generated object (always `pinfed`).
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`LABEL_MANAGED_BY`].
pub const MANAGED_BY: &str = "pinfed";
/// Label: the Pinterest resource a generated object belongs to (sanitized name).
pub const LABEL_WORKLOAD: &str = "pinterest.com/workload";
/// Label: the kind of that resource, e.g. `PinterestService`.
pub const LABEL_KIND: &str = "pinterest.com/kind";
/// Label: the owning team (sanitized label value).
pub const LABEL_TEAM: &str = "pinterest.com/team";
/// Label: the owner, for resource tracking; carries the team name (sanitized).
pub const LABEL_OWNER: &str = "pinterest.com/owner";
/// Label on JobSet shard objects: the global shard index.
pub const LABEL_SHARD: &str = "pinterest.com/shard";
/// Label on training-job objects: the replica role (`master`, `worker`, `ps`, ...).
pub const LABEL_REPLICA_TYPE: &str = "pinterest.com/replica-type";
/// Label on training-job objects: the index of the replica within its role.
pub const LABEL_REPLICA_INDEX: &str = "pinterest.com/replica-index";
/// Annotation: the owner's contact (often an e-mail, which is not a valid label value).
pub const ANNOTATION_CONTACT: &str = "pinterest.com/contact";
/// Annotation: hash of a generated object's desired content, for cheap change detection.
pub const ANNOTATION_SPEC_HASH: &str = "pinterest.com/spec-hash";
/// Annotation: the runtime profile version injected into a generated object.
pub const ANNOTATION_RUNTIME_VERSION: &str = "pinterest.com/runtime-version";
/// Annotation on pod templates: hash of the service config, so a config change rolls pods.
pub const ANNOTATION_CONFIG_HASH: &str = "pinterest.com/config-hash";
/// Annotation a user may put on a workload: when it may be garbage collected (RFC 3339).
pub const ANNOTATION_EXPIRES_AT: &str = "pinterest.com/expires-at";

/// Condition types written by the hub and the agent.
pub mod condition_types {
    pub const SCHEDULED: &str = "Scheduled";
    pub const READY: &str = "Ready";
    pub const PROGRESSING: &str = "Progressing";
    pub const DEGRADED: &str = "Degraded";
    pub const QUOTA_EXCEEDED: &str = "QuotaExceeded";
    pub const INVALID: &str = "Invalid";
    /// Run-to-completion kinds only.
    pub const COMPLETE: &str = "Complete";
    /// Run-to-completion kinds only.
    pub const FAILED: &str = "Failed";
    /// MemberClusters in pull mode: whether the hub uses its agent's capacity report.
    pub const REPORT_ACCEPTED: &str = "ReportAccepted";
}

/// Who owns a workload. Every generated object carries the team as labels and the contact
/// as an annotation, so "who owns this, can it be recycled" always has an answer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Owner {
    /// Owning team, e.g. `ads-ranking`. Written (sanitized) into the `pinterest.com/team`
    /// and `pinterest.com/owner` labels of every generated object.
    #[schemars(length(min = 1))]
    pub team: String,
    /// How to reach the owner (e-mail, chat channel, pager alias). Written into the
    /// `pinterest.com/contact` annotation of every generated object.
    #[schemars(length(min = 1))]
    pub contact: String,
}

/// How the hub spreads a workload over member clusters.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum PlacementStrategy {
    /// Replicas (or shard indices) are split over the selected clusters.
    Divided,
    /// Every selected cluster runs the whole workload.
    Duplicated,
    /// Exactly one cluster runs the whole workload.
    Single,
}

/// Placement policy of a workload. Every field is optional; the kind decides the default
/// strategy (Divided for services and job sets, Duplicated for daemons, Single otherwise).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Divided, Duplicated or Single. Defaults by kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<PlacementStrategy>,
    /// Only member clusters whose labels match are eligible. A MemberCluster's labels are
    /// its `spec.labels` plus `topology.kubernetes.io/region` and `topology.kubernetes.io/zone`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// Restricts eligible clusters to these names and/or zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_affinity: Option<ClusterAffinity>,
    /// Cluster taints this workload tolerates. A cluster with an untolerated taint is not
    /// eligible.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<ClusterToleration>,
    /// Per-cluster weights (cluster name → weight) overriding the MemberCluster's weight.
    /// A weight of 0 makes a cluster ineligible.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub weights: BTreeMap<String, i32>,
    /// Lower bound of replicas (or shards) for every cluster given a share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_per_cluster: Option<i32>,
    /// Upper bound of replicas (or shards) for every cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_per_cluster: Option<i32>,
    /// Per-cluster bounds (cluster name → min/max), overriding minPerCluster/maxPerCluster.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cluster_limits: BTreeMap<String, ClusterLimits>,
    /// Spread over at least this many clusters and zones (Divided and Duplicated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<Spread>,
    /// Whether and when the hub moves the workload off a failed cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<Failover>,
}

/// A Kubernetes label selector over MemberCluster labels.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must all be present with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements; all must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One set-based label requirement.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    /// The label key.
    pub key: String,
    /// In, NotIn, Exists or DoesNotExist.
    pub operator: SelectorOperator,
    /// Values for In and NotIn; must be empty for Exists and DoesNotExist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// Operator of a set-based label requirement.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl LabelSelector {
    /// Whether a set of labels satisfies every requirement (an empty selector matches all).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator {
                    SelectorOperator::In => value.is_some_and(|v| r.values.contains(v)),
                    SelectorOperator::NotIn => value.is_none_or(|v| !r.values.contains(v)),
                    SelectorOperator::Exists => value.is_some(),
                    SelectorOperator::DoesNotExist => value.is_none(),
                }
            })
    }
}

/// Restricts placement to named clusters and/or zones. Both empty means no restriction.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAffinity {
    /// Eligible member cluster names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
    /// Eligible zones (`topology.kubernetes.io/zone` of the MemberCluster).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
}

impl ClusterAffinity {
    /// Whether a cluster with this name and zone is allowed.
    pub fn allows(&self, cluster: &str, zone: Option<&str>) -> bool {
        (self.cluster_names.is_empty() || self.cluster_names.iter().any(|c| c == cluster))
            && (self.zones.is_empty() || zone.is_some_and(|z| self.zones.iter().any(|x| x == z)))
    }
}

/// Effect of a cluster taint.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum TaintEffect {
    /// New placements avoid the cluster unless they tolerate the taint.
    NoSchedule,
    /// Placement prefers other clusters.
    PreferNoSchedule,
    /// Like NoSchedule, and workloads already there fail over unless they tolerate it.
    NoExecute,
}

/// A taint on a member cluster (as in Karmada): placement skips the cluster unless the
/// workload tolerates it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTaint {
    /// Taint key (a qualified name).
    pub key: String,
    /// Taint value (a label value), may be empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// NoSchedule, PreferNoSchedule or NoExecute.
    pub effect: TaintEffect,
}

/// Operator of a toleration.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum TolerationOperator {
    /// Key and value must match.
    #[default]
    Equal,
    /// Key must match (any value); an empty key with Exists tolerates every taint.
    Exists,
}

/// A toleration of a cluster taint.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterToleration {
    /// Taint key to tolerate; empty with operator Exists tolerates everything.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// Equal (default) or Exists.
    #[serde(default)]
    pub operator: TolerationOperator,
    /// Value to match with operator Equal.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// Effect to tolerate; absent tolerates every effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
}

impl ClusterToleration {
    /// Kubernetes toleration semantics applied to a cluster taint.
    pub fn tolerates(&self, taint: &ClusterTaint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => self.key.is_empty() || self.key == taint.key,
            TolerationOperator::Equal => self.key == taint.key && self.value == taint.value,
        }
    }
}

/// Whether `tolerations` tolerate every taint whose effect keeps new placements away
/// (NoSchedule and NoExecute; PreferNoSchedule only lowers preference).
pub fn tolerates_all(tolerations: &[ClusterToleration], taints: &[ClusterTaint]) -> bool {
    taints
        .iter()
        .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
        .all(|t| tolerations.iter().any(|tol| tol.tolerates(t)))
}

/// Bounds of one cluster's share.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterLimits {
    /// At least this many replicas (or shards) when the cluster is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min: Option<i32>,
    /// At most this many replicas (or shards).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max: Option<i32>,
}

/// Minimum spread of a workload.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Spread {
    /// Use at least this many clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_clusters: Option<i32>,
    /// Use clusters in at least this many zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_zones: Option<i32>,
}

/// Failover policy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Failover {
    /// Move the workload (or its share) off a cluster that is NotReady or unreachable.
    /// Defaults to true for every kind except PinterestStatefulSet and
    /// PinterestTrainingJob (moving those loses state or restarts the whole gang).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// How long a cluster may be NotReady before its share moves. Default 20 (with the
    /// hub's default member grace, work moves 40 s after a member's last heartbeat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub grace_period_seconds: Option<i32>,
    /// Application failover (opt-in; PinterestService, PinterestStatefulSet and
    /// PinterestJobSet): a member's share that stays unavailable while the workload is
    /// available in another member is moved off it, grown elsewhere first; a job set's
    /// shards whose Job has no pod Ready there for the toleration move (the shards that
    /// run or finished there stay). The member is then avoided by this workload until its
    /// spec changes or a rebalance is asked for (`status.placement.applicationFailovers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<ApplicationFailover>,
}

/// When a share that does not become available in its member moves.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationFailover {
    /// How long a member's share may stay unavailable (its slice not Ready, fewer
    /// replicas available there than placed; a job set's shard: its Job with no pod
    /// Ready) before it moves. Default 300, at least 10.
    /// Not counted while a rollout of the workload is in progress (its health gates
    /// judge a new revision; a rollback is theirs to make).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10))]
    pub toleration_seconds: Option<i32>,
}

impl ApplicationFailover {
    pub const DEFAULT_TOLERATION_SECONDS: i32 = 300;

    pub fn toleration_seconds(&self) -> i64 {
        i64::from(
            self.toleration_seconds
                .unwrap_or(Self::DEFAULT_TOLERATION_SECONDS),
        )
    }
}

/// A condition in the Kubernetes `metav1.Condition` shape.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type, e.g. Ready, Scheduled, Complete.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: ConditionStatus,
    /// The resource generation this condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the status last changed.
    #[schemars(schema_with = "date_time_schema")]
    pub last_transition_time: Time,
    /// Machine-readable CamelCase reason.
    pub reason: String,
    /// Human-readable detail.
    #[serde(default)]
    pub message: String,
}

/// Status of a condition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl From<bool> for ConditionStatus {
    fn from(b: bool) -> Self {
        if b {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

impl Condition {
    /// A condition observed now.
    pub fn new(
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: impl Into<String>,
        observed_generation: Option<i64>,
        now: &Time,
    ) -> Condition {
        Condition {
            type_: type_.to_string(),
            status,
            observed_generation,
            last_transition_time: now.clone(),
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

/// Inserts or replaces the condition of the same type, keeping the old
/// `lastTransitionTime` when the status did not change (Kubernetes convention). Returns
/// whether anything changed. Conditions stay sorted by type so status is deterministic.
pub fn set_condition(conditions: &mut Vec<Condition>, new: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            let mut new = new;
            if old.status == new.status {
                new.last_transition_time = old.last_transition_time.clone();
            }
            if *old == new {
                return false;
            }
            *old = new;
            true
        }
        None => {
            conditions.push(new);
            conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
            true
        }
    }
}

/// Finds a condition by type.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// The hub's placement decision, as written into hub status (the shape of `pinfed plan`,
/// plus each daemon share's `pods`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementDecision {
    /// The workload generation this decision was made for: kept while the generation
    /// is the same (and nothing else asks for a new plan). Recorded with the status, so a
    /// first placement costs no metadata write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The strategy that was applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<PlacementStrategy>,
    /// One entry per cluster with a share, sorted by cluster name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<ClusterPlacement>,
    /// Replicas or shards that found no room.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub unplaced: i32,
    /// Why something is unplaced, if it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Each member the decision considered: its share and why it got that or none, with
    /// the numbers the decision was made with (at most 100 members, each reason at most
    /// 300 characters). Recorded when the hub plans; kept with the decision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberDecision>,
    /// Where the workload stands in the hub's queue while part of it waits for room or
    /// quota (absent once everything is placed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueStanding>,
    /// The latest preemptions that took part of this workload to make room for a
    /// higher-priority one (newest last, at most 5).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preemptions: Vec<PreemptionRecord>,
    /// The last rebalance request (`federation.pinterest.com/rebalance`) this decision
    /// acted on: the workload was placed again from scratch for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalanced: Option<String>,
    /// Members this workload's share was moved off by application failover
    /// (`spec.placement.failover.application`): avoided while the workload's generation
    /// is the one recorded and no rebalance is asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub application_failovers: Vec<ApplicationFailoverRecord>,
}

/// A member a share was moved off because it did not become available there.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationFailoverRecord {
    pub cluster: String,
    /// The workload generation it was moved for: a new spec may run there again.
    pub generation: i64,
    #[schemars(schema_with = "date_time_schema")]
    pub time: Time,
    pub reason: String,
}

/// A waiting workload's place in the hub's queue: highest priority first (aged while it
/// waits), then oldest; see `docs/priority.md`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStanding {
    /// 1 is next.
    pub position: i32,
    /// Workloads waiting in all.
    pub waiting: i32,
    /// The priority of its class (0 without one).
    pub priority: i32,
    /// The priority the queue orders by: its own plus what waiting has added (aging).
    pub effective_priority: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Waiting since.
    #[schemars(schema_with = "date_time_schema")]
    pub since: Time,
    /// What it waits for: room in which members, quota in which namespace, or a
    /// higher-ranked workload the room goes to first.
    pub waiting_for: String,
}

/// Part of a workload taken in one member to make room for a higher-priority one.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionRecord {
    /// The workload room was made for (`Kind/namespace/name`).
    pub by: String,
    /// Its priority.
    pub by_priority: i32,
    pub cluster: String,
    /// Pods taken.
    pub pods: i32,
    /// Replicas taken (services, stateful sets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Shards taken back to pending (job sets): they run again later, once each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<String>,
    #[schemars(schema_with = "date_time_schema")]
    pub time: Time,
    pub reason: String,
    /// The preemptor's owed-eviction annotation this applied (its name after the prefix):
    /// an eviction recorded here is never applied again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// One member in a placement decision, and why.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberDecision {
    pub cluster: String,
    /// Replicas, shards or pods it got (0: none).
    #[serde(default)]
    pub share: i32,
    /// Why: excluded (selector, taint, room, not ready …) or its weight, room, quota room
    /// and bounds and what it got of them.
    pub reason: String,
}

/// One cluster's share of a workload.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPlacement {
    /// Member cluster name.
    pub cluster: String,
    /// Pods for this cluster (services, stateful sets, training jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// Shard indices for this cluster (job sets), as a range list such as `0-3,7`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(RANGE_LIST_PATTERN))]
    pub shards: Option<String>,
    /// Daemons: the pods placed in this cluster, one per matching node with room for
    /// one; what the namespace's quota is charged here (absent: one pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pods: Option<i32>,
}

/// What the hub last observed of a workload in one member cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberWorkloadStatus {
    /// Member cluster name.
    pub cluster: String,
    /// When the hub first read this status from the member as it is (an unchanged entry
    /// keeps its time, so the hub does not rewrite its status for nothing).
    #[schemars(schema_with = "date_time_schema")]
    pub observed_time: Time,
    /// The member resource's generation that the member agent has processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready (or Complete), Progressing, Degraded, Failed, Unknown — a one-word summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Pods desired in this cluster (services, stateful sets, daemons, training jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Pods ready in this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Pods available in this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Pods (daemons: nodes) running this cluster's current template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    /// Job sets: shards running in this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards_running: Option<i32>,
    /// Job sets: shards that succeeded in this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards_succeeded: Option<i32>,
    /// Job sets: shards that failed in this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards_failed: Option<i32>,
    /// Job sets: completed shard indices in this cluster (range list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(RANGE_LIST_PATTERN))]
    pub completed_shards: Option<String>,
    /// Job sets: shard indices whose Job failed for good in this cluster (range list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(RANGE_LIST_PATTERN))]
    pub failed_shards: Option<String>,
    /// Job sets: unfinished shard indices whose Job has no pod Ready in this cluster
    /// (range list; reported with application failover on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(RANGE_LIST_PATTERN))]
    pub unready_shards: Option<String>,
    /// Cron jobs: runs in progress in this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<i32>,
    /// Cron jobs: when this cluster last scheduled a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_date_time_schema")]
    pub last_schedule_time: Option<Time>,
    /// Cron jobs: when a run last succeeded in this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_date_time_schema")]
    pub last_successful_time: Option<Time>,
    /// Human-readable detail (e.g. why the cluster's share is not ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The workload revision this cluster's slice carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// The override rules (`spec.overrides[].name`) this cluster's slice carries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<String>,
}

impl MemberWorkloadStatus {
    /// An entry for `cluster` observed at `time`, with nothing reported yet.
    pub fn observed(cluster: &str, time: Time) -> MemberWorkloadStatus {
        MemberWorkloadStatus {
            cluster: cluster.to_string(),
            observed_time: time,
            observed_generation: None,
            state: None,
            replicas: None,
            ready_replicas: None,
            available_replicas: None,
            updated_replicas: None,
            shards_running: None,
            shards_succeeded: None,
            shards_failed: None,
            completed_shards: None,
            failed_shards: None,
            unready_shards: None,
            active: None,
            last_schedule_time: None,
            last_successful_time: None,
            message: None,
            revision: None,
            overrides: Vec::new(),
        }
    }
}

/// Schema for a Kubernetes timestamp field (`metav1.Time`).
pub fn date_time_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "format": "date-time"})
}

/// Schema for an optional Kubernetes timestamp field.
pub fn optional_date_time_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "format": "date-time", "nullable": true})
}

/// Schema for an int-or-string field (e.g. `maxUnavailable: 1` or `"25%"`).
pub fn int_or_string_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"x-kubernetes-int-or-string": true, "nullable": true})
}

/// Schema for a field holding a Kubernetes PodTemplateSpec: the Kubernetes type's own
/// schema (k8s-openapi's, from the Kubernetes OpenAPI document), inlined, so the API server
/// checks every field's type and `kubectl explain` describes it. Its `metadata` is cut to
/// [`template_metadata_schema`].
pub fn pod_template_schema(generator: &mut SchemaGenerator) -> Schema {
    kubernetes_schema::<PodTemplateSpec>(generator)
}

/// Like [`pod_template_schema`], but immutable once set (JobSet templates). The rule
/// compares whole objects, which CEL's cost estimator prices by the object's top-level
/// size, not its depth, so the typed template stays within the CRD's cost budget.
pub fn immutable_pod_template_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = pod_template_schema(generator);
    schema.insert(
        "x-kubernetes-validations".into(),
        json!([{
            "rule": "self == oldSelf",
            "message": TEMPLATE_IMMUTABLE_MESSAGE
        }]),
    );
    schema
}

/// What the API server answers to an edit of a JobSet's template.
pub const TEMPLATE_IMMUTABLE_MESSAGE: &str =
    "template is immutable once the JobSet exists; create a new JobSet instead";

/// Schema for a list of PersistentVolumeClaim templates: the Kubernetes type's schema, with
/// each claim's `metadata` cut to [`template_metadata_schema`].
pub fn claim_templates_schema(generator: &mut SchemaGenerator) -> Schema {
    kubernetes_schema::<Vec<PersistentVolumeClaim>>(generator)
}

/// The schema k8s-openapi generates for `T`, with every ObjectMeta in it (a template's, an
/// ephemeral volume's claim template's) cut to [`template_metadata_schema`].
fn kubernetes_schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = generator.subschema_for::<T>().to_value();
    cut_object_metas(&mut schema);
    Schema::try_from(schema).expect("a schema stays a schema")
}

/// Replaces every property `metadata` that holds a full ObjectMeta schema.
fn cut_object_metas(schema: &mut serde_json::Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if let Some(properties) = object.get_mut("properties").and_then(|p| p.as_object_mut()) {
        for (name, property) in properties.iter_mut() {
            if name == "metadata" && is_object_meta(property) {
                let description = property.get("description").cloned();
                *property = template_metadata_schema(description);
            } else {
                cut_object_metas(property);
            }
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = object.get_mut(key) {
            cut_object_metas(sub);
        }
    }
}

fn is_object_meta(schema: &serde_json::Value) -> bool {
    ["managedFields", "ownerReferences", "resourceVersion"]
        .iter()
        .all(|f| schema.pointer(&format!("/properties/{f}")).is_some())
}

/// `metadata` of an object inside a spec (a pod template, a claim template): its name,
/// labels and annotations. The rest of an ObjectMeta (uid, resourceVersion, ownerReferences,
/// managedFields...) is the API server's to write on the objects made from the template;
/// Kubernetes ignores it in templates, and the API server prunes it here.
fn template_metadata_schema(description: Option<serde_json::Value>) -> serde_json::Value {
    let string_map = json!({"type": "object", "additionalProperties": {"type": "string"}});
    let mut schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "Name of the object made from the template, where the kind uses one (claim templates)."},
            "labels": string_map.clone(),
            "annotations": string_map,
        }
    });
    if let Some(d) = description {
        schema["description"] = d;
    }
    schema["properties"]["labels"]["description"] =
        "Labels of the objects made from the template.".into();
    schema["properties"]["annotations"]["description"] =
        "Annotations of the objects made from the template.".into();
    schema
}

/// Schema for a required Kubernetes object kept as given (a RuntimeProfile's sidecar
/// container, a MemberSlice's slice).
pub fn embedded_object_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// Schema for a list of Kubernetes objects kept as given (a RuntimeProfile's containers,
/// env, volumes and mounts).
pub fn preserved_object_list_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
    })
}

/// Schema for a single optional Kubernetes object kept as given.
pub fn preserved_object_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "nullable": true,
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// Schema for a Kubernetes quantity (`"500m"`, `8`, `"32Gi"`).
pub fn quantity_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"x-kubernetes-int-or-string": true, "nullable": true})
}

/// Schema for a map of resource name to quantity.
pub fn quantity_map_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {"x-kubernetes-int-or-string": true}
    })
}

/// Regex of the range-list grammar (`0-3,7,9-10`, or empty).
pub const RANGE_LIST_PATTERN: &str =
    r"^$|^(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?(,(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?)*$";

/// Whether `conditions` already say Invalid with `message` for `generation`: a refusal
/// is written once per generation and message, never again on each look (no hot loop).
pub fn says_invalid(conditions: &[Condition], message: &str, generation: Option<i64>) -> bool {
    find_condition(conditions, condition_types::INVALID).is_some_and(|c| {
        c.status == ConditionStatus::True
            && c.message == message
            && c.observed_generation == generation
    })
}

/// [`set_invalid_conditions`] with `reason` on the Invalid condition (what made it so:
/// `Undecodable`, a member policy's rule) in place of `InvalidSpec`.
pub fn set_refused_conditions(
    conditions: &mut Vec<Condition>,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) {
    set_invalid_conditions(conditions, message, generation, now);
    if let Some(c) = conditions
        .iter_mut()
        .find(|c| c.type_ == condition_types::INVALID)
    {
        c.reason = reason.to_string();
    }
}

/// Marks a workload Invalid (and not Ready) with the validation message.
pub fn set_invalid_conditions(
    conditions: &mut Vec<Condition>,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) {
    set_condition(
        conditions,
        Condition::new(
            condition_types::INVALID,
            ConditionStatus::True,
            "InvalidSpec",
            message,
            generation,
            now,
        ),
    );
    set_condition(
        conditions,
        Condition::new(
            condition_types::READY,
            ConditionStatus::False,
            "InvalidSpec",
            message,
            generation,
            now,
        ),
    );
    set_condition(
        conditions,
        Condition::new(
            condition_types::PROGRESSING,
            ConditionStatus::False,
            "InvalidSpec",
            "",
            generation,
            now,
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selector_matching() {
        let l = labels(&[("tier", "prod"), ("zone", "a")]);
        assert!(LabelSelector::default().matches(&l));
        let s = LabelSelector {
            match_labels: labels(&[("tier", "prod")]),
            match_expressions: vec![LabelSelectorRequirement {
                key: "zone".into(),
                operator: SelectorOperator::In,
                values: vec!["a".into(), "b".into()],
            }],
        };
        assert!(s.matches(&l));
        let s = LabelSelector {
            match_expressions: vec![LabelSelectorRequirement {
                key: "gpu".into(),
                operator: SelectorOperator::Exists,
                values: vec![],
            }],
            ..Default::default()
        };
        assert!(!s.matches(&l));
    }

    #[test]
    fn toleration_semantics() {
        let taint = ClusterTaint {
            key: "dedicated".into(),
            value: "gpu".into(),
            effect: TaintEffect::NoSchedule,
        };
        let equal = ClusterToleration {
            key: "dedicated".into(),
            value: "gpu".into(),
            ..Default::default()
        };
        assert!(equal.tolerates(&taint));
        let wrong_effect = ClusterToleration {
            effect: Some(TaintEffect::NoExecute),
            ..equal.clone()
        };
        assert!(!wrong_effect.tolerates(&taint));
        let all = ClusterToleration {
            operator: TolerationOperator::Exists,
            ..Default::default()
        };
        assert!(all.tolerates(&taint));
        assert!(!tolerates_all(&[], std::slice::from_ref(&taint)));
        let prefer = ClusterTaint {
            effect: TaintEffect::PreferNoSchedule,
            ..taint
        };
        assert!(tolerates_all(&[], &[prefer]));
    }

    #[test]
    fn set_condition_keeps_transition_time_when_status_is_unchanged() {
        let t0 = Time("2024-01-01T00:00:00Z".parse().unwrap());
        let t1 = Time("2024-01-01T00:01:00Z".parse().unwrap());
        let mut cs = vec![];
        assert!(set_condition(
            &mut cs,
            Condition::new("Ready", ConditionStatus::True, "Ok", "", Some(1), &t0)
        ));
        assert!(!set_condition(
            &mut cs,
            Condition::new("Ready", ConditionStatus::True, "Ok", "", Some(1), &t1)
        ));
        assert_eq!(cs[0].last_transition_time, t0);
        assert!(set_condition(
            &mut cs,
            Condition::new("Ready", ConditionStatus::False, "Down", "x", Some(1), &t1)
        ));
        assert_eq!(cs[0].last_transition_time, t1);
        set_condition(
            &mut cs,
            Condition::new("Invalid", ConditionStatus::False, "Ok", "", None, &t1),
        );
        assert_eq!(cs[0].type_, "Invalid", "sorted by type");
    }

    #[test]
    fn affinity() {
        let a = ClusterAffinity {
            cluster_names: vec![],
            zones: vec!["z1".into()],
        };
        assert!(a.allows("c", Some("z1")));
        assert!(!a.allows("c", Some("z2")));
        assert!(!a.allows("c", None));
        assert!(ClusterAffinity::default().allows("c", None));
    }
}

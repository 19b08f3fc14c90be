//! The federation group: member clusters and federation-wide quota.

// kube's `printcolumn(...)` repeats the same keys by design.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::*;
use super::quantity::{Milli, QuantityError};

/// What the hub records on its resources and members, read by the hub (a new leader
/// continues from it), the JSS and its UI.
/// The hub generation the current placement decision was made for.
pub const ANNOTATION_PLACEMENT_GENERATION: &str = "federation.pinterest.com/placement-generation";
/// Members the workload moved off after they were lost (comma-separated), for failback.
pub const ANNOTATION_FAILED_OVER_FROM: &str = "federation.pinterest.com/failed-over-from";
/// What the last failover moved, shown in the FailedOver condition.
pub const ANNOTATION_FAILOVER_MESSAGE: &str = "federation.pinterest.com/failover-message";
/// Prefix of the annotations a preemptor writes on a victim before its own decision is
/// recorded: one per preemption (`owed.federation.pinterest.com/<preemptor uid>.<its
/// resourceVersion>`), JSON of what the victim gives up in which member. The victim's
/// reconcile applies it, records it (`status.placement.preemptions[].id`) and removes it,
/// so a preemption outlives a hub restart between the two.
pub const ANNOTATION_OWED_EVICTION_PREFIX: &str = "owed.federation.pinterest.com/";
/// On a workload: a request to place it again from scratch (`pinfed rebalance`), its value
/// the request's id. The hub acts on each id once and records it in
/// `status.placement.rebalanced`; moves follow the never-below-target rules of any move.
/// The MemberCluster condition saying how long a pull agent's credential on the hub lasts
/// (`hub::pull_credential`): Valid, EndsSoon, Ended, Missing.
pub const CONDITION_CREDENTIAL_VALID: &str = "CredentialValid";
pub const ANNOTATION_REBALANCE: &str = "federation.pinterest.com/rebalance";
/// On a MemberCluster: `pinfed unjoin` is moving every workload off it.
pub const ANNOTATION_DRAINING: &str = "federation.pinterest.com/draining";
/// Label key of a member's region in placement selectors.
pub const LABEL_REGION: &str = "topology.kubernetes.io/region";
/// Label key of a member's zone in placement selectors.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// A member cluster of the federation: how the hub reaches it, where it is, and what it
/// has room for.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "federation.pinterest.com",
    version = "v1alpha1",
    kind = "MemberCluster",
    status = "MemberClusterStatus",
    shortname = "mc",
    category = "pinterest",
    derive = "PartialEq",
    doc = "A member cluster of the federation: how the hub reaches it (a kubeconfig Secret), its region, zone, labels, taints, weight and mode; status shows readiness, heartbeat and capacity.",
    printcolumn(name = "Region", type_ = "string", json_path = ".spec.region"),
    printcolumn(name = "Zone", type_ = "string", json_path = ".spec.zone"),
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".status.kubernetesVersion"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MemberClusterSpec {
    /// Secret holding a kubeconfig (key `kubeconfig`) for the least-privilege
    /// ServiceAccount `pinfed join` created in the member. Required in Push mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    /// Region, e.g. `us-east-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Zone, e.g. `us-east-1a`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Labels placement selectors match (in addition to region and zone).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Cluster taints: placement skips this cluster unless the workload tolerates them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<ClusterTaint>,
    /// Relative weight when dividing replicas. Default 1; 0 takes no new shares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub weight: Option<i32>,
    /// Push (default): the hub writes slices into the member. Pull: the member's agent
    /// fetches its slices from the hub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ClusterMode>,
}

/// How slices reach a member.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ClusterMode {
    #[default]
    Push,
    Pull,
}

/// A reference to a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// Secret name.
    pub name: String,
    /// Secret namespace on the hub. Default: the hub's namespace (`pinfed-system`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl MemberClusterSpec {
    /// The labels placement selectors see: `labels` plus region and zone.
    pub fn selector_labels(&self) -> BTreeMap<String, String> {
        let mut l = self.labels.clone();
        if let Some(r) = &self.region {
            l.insert(LABEL_REGION.to_string(), r.clone());
        }
        if let Some(z) = &self.zone {
            l.insert(LABEL_ZONE.to_string(), z.clone());
        }
        l
    }

    pub fn weight_or_default(&self) -> i32 {
        self.weight.unwrap_or(1)
    }
}

/// Amounts of the resources the federation tracks. Quantities use the Kubernetes syntax.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceAmounts {
    /// CPU, e.g. `"8"` or `"500m"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub cpu: Option<Quantity>,
    /// Memory, e.g. `"32Gi"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub memory: Option<Quantity>,
    /// Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub pods: Option<Quantity>,
    /// GPUs (`nvidia.com/gpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub gpus: Option<Quantity>,
}

/// Parsed form of [`ResourceAmounts`]; absent amounts are `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Amounts {
    pub cpu: Option<Milli>,
    pub memory: Option<Milli>,
    pub pods: Option<Milli>,
    pub gpus: Option<Milli>,
}

impl ResourceAmounts {
    /// Parses every present quantity exactly.
    pub fn parse(&self) -> Result<Amounts, QuantityError> {
        let p = |q: &Option<Quantity>| q.as_ref().map(|q| Milli::parse(&q.0)).transpose();
        Ok(Amounts {
            cpu: p(&self.cpu)?,
            memory: p(&self.memory)?,
            pods: p(&self.pods)?,
            gpus: p(&self.gpus)?,
        })
    }

    /// Formats parsed amounts back into quantities, memory as `Milli::format_memory` (what
    /// `kubectl get fq` and `pinfed` show: `1536Mi`, not `1610612736`).
    pub fn from_amounts(a: &Amounts) -> ResourceAmounts {
        let q = |m: Option<Milli>| m.map(|m| Quantity(m.to_string()));
        ResourceAmounts {
            cpu: a.cpu.map(|m| Quantity(m.format_cpu())),
            memory: a.memory.map(|m| Quantity(m.format_memory())),
            pods: q(a.pods),
            gpus: q(a.gpus),
        }
    }
}

/// Status of a member cluster, written by the hub.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberClusterStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready: the hub reached the member's API server recently.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Last successful contact with the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_date_time_schema")]
    pub last_heartbeat_time: Option<Time>,
    /// The member's Kubernetes version (e.g. `v1.36.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// Ready nodes in the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<i32>,
    /// Sum of node capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<ResourceAmounts>,
    /// Sum of node allocatable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocatable: Option<ResourceAmounts>,
    /// Sum of requests of pods bound to nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated: Option<ResourceAmounts>,
    /// Allocatable minus allocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available: Option<ResourceAmounts>,
    /// When the member last went from Ready to NotReady (kept while it stays NotReady):
    /// workloads move off it once their failover grace has passed since then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_date_time_schema")]
    pub lost_time: Option<Time>,
    /// When the member last came back after being lost. Until the failback window has
    /// passed since then, it gets no new shares and its stale slices are left alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_date_time_schema")]
    pub returned_time: Option<Time>,
    /// Slices of hub resources deleted while the member was unreachable; the hub removes
    /// them when the member is back (`pinfed unjoin --force` drops them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["kind", "namespace", "name"]))]
    pub pending_cleanups: Vec<PendingCleanup>,
    /// When the member's agent last renewed its Lease, as the hub last read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_date_time_schema")]
    pub agent_renew_time: Option<Time>,
    /// The member's nodes grouped into pools of one shape (labels but the host name,
    /// taints, capacity, allocatable), each node with what its pods request, as the hub
    /// last read them: what the JSS's dry run places on, the same per-node room the hub
    /// decides on. Written with the heartbeat; left out above 500 nodes (the dry run then
    /// spreads `available` evenly over `nodes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_pools: Vec<NodePoolReport>,
}

/// Most nodes a MemberCluster status lists in `nodePools` (about 120 bytes each).
pub const MAX_STATUS_NODES: usize = 500;

/// A pull member's own report, written by its agent into its `MemberReport` on the hub.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentReport {
    /// When the agent wrote this report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_date_time_schema")]
    pub time: Option<Time>,
    /// The member's Kubernetes version (its API server's `/version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// Whether the agent reaches its own API server.
    #[serde(default)]
    pub healthy: bool,
    /// Why not, when not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The member's nodes, grouped into pools of the same labels, taints and size, each
    /// node with what its pods request: enough for placement's per-node fit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_pools: Vec<NodePoolReport>,
}

/// Nodes of one shape (labels other than the host name, taints, capacity, allocatable).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolReport {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<NodeTaintReport>,
    pub capacity: ResourceAmounts,
    pub allocatable: ResourceAmounts,
    pub nodes: Vec<NodeReport>,
}

/// A taint of a pool's nodes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTaintReport {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub effect: String,
}

/// One node of a pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    pub name: String,
    /// Ready and not cordoned.
    pub schedulable: bool,
    /// Requests of the node's non-terminated pods.
    pub allocated: ResourceAmounts,
    /// The Pinterest workloads' running pods on the node (a pull member reports them so
    /// the hub can choose preemption victims there, as it does from a push member's pods).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<NodeWorkloadReport>,
}

/// Pods of one Pinterest workload on a node, all with the same requests.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeWorkloadReport {
    /// `Kind/namespace/name` of the workload.
    pub workload: String,
    /// How many of its pods run there.
    pub pods: i32,
    /// What each of them requests.
    pub requests: ResourceAmounts,
    /// A job set's shards among them, as a range list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(RANGE_LIST_PATTERN))]
    pub shards: Option<String>,
}

/// A slice left in a member by a hub resource that was deleted while the member was down.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingCleanup {
    /// Kind of the slice (e.g. PinterestService).
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The deleted hub resource's uid (only slices labelled with it are removed).
    pub hub_uid: String,
}

/// Federation-wide quota of a namespace: hard totals across all members and optional
/// per-cluster caps. Enforced at submission and at placement.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "federation.pinterest.com",
    version = "v1alpha1",
    kind = "FederatedQuota",
    namespaced,
    status = "FederatedQuotaStatus",
    shortname = "fq",
    category = "pinterest",
    derive = "PartialEq",
    doc = "Federation-wide quota of a namespace: hard totals across member clusters (cpu, memory, GPUs, pods) and optional per-cluster caps.",
    printcolumn(name = "CPU", type_ = "string", json_path = ".spec.hard.cpu"),
    printcolumn(name = "Used CPU", type_ = "string", json_path = ".status.used.cpu"),
    printcolumn(name = "Memory", type_ = "string", json_path = ".spec.hard.memory"),
    printcolumn(
        name = "Used Memory",
        type_ = "string",
        json_path = ".status.used.memory"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct FederatedQuotaSpec {
    /// Totals across the federation (requests of all pods, including runtime sidecars).
    pub hard: ResourceAmounts,
    /// Caps per member cluster (cluster name → amounts).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub per_cluster: BTreeMap<String, ResourceAmounts>,
}

/// Usage against a FederatedQuota.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedQuotaStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// e.g. QuotaExceeded when placed workloads are held back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Used totals across the federation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<ResourceAmounts>,
    /// Used per member cluster.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub used_per_cluster: BTreeMap<String, ResourceAmounts>,
}

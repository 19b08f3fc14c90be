//! RuntimeProfile: a named, versioned set of runtime support injected into every pod.

// kube's `printcolumn(...)` repeats the same keys by design.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, Volume, VolumeMount};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::*;
use super::workload::WorkloadKind;

/// On the hub's snapshot of a profile's earlier content: the profile it was taken of.
pub const LABEL_SNAPSHOT_OF: &str = "rollout.pinterest.com/snapshot-of";
/// On a profile snapshot (and on the revisions that pin it): the content's digest.
pub const LABEL_PROFILE_DIGEST: &str = "rollout.pinterest.com/profile-digest";

/// Whether `s` has the shape of a profile content digest (16 lowercase hex characters),
/// the part after `@` in a pin `version@digest`.
pub fn is_profile_digest(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Runtime support the platform injects into every Pinterest workload's pods: init
/// containers (config management), sidecars (certificates for mTLS, traffic registration,
/// log shipping, metrics), environment variables, volumes and default resources.
/// Publishing a new profile upgrades runtime support without editing workloads.
///
/// Strings in injected containers and env values may use `{{workload}}`, `{{namespace}}`,
/// `{{kind}}`, `{{team}}`, `{{contact}}`, `{{cluster}}`, `{{runtimeVersion}}` and
/// `{{servicePort}}`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "compute.pinterest.com",
    version = "v1alpha1",
    kind = "RuntimeProfile",
    shortname = "rtp",
    category = "pinterest",
    derive = "PartialEq",
    doc = "A named, versioned set of runtime support (init containers, sidecars, env, volumes, default resources) injected into Pinterest workloads.",
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(name = "Default", type_ = "boolean", json_path = ".spec.default"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeProfileSpec {
    /// The version workloads pin with `spec.runtimeVersion`.
    #[schemars(length(min = 1))]
    pub version: String,
    /// Used by workloads that pin no version. At most one profile should be default.
    #[serde(default)]
    pub default: bool,
    /// What this profile provides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Init containers run before the workload's own (e.g. config management).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "preserved_object_list_schema")]
    pub init_containers: Vec<Container>,
    /// Sidecars. Long-running kinds get them as containers; run-to-completion kinds
    /// (JobSet, CronJob, TrainingJob) as native sidecars (init containers with
    /// restartPolicy Always) so Jobs complete when the user's containers finish.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sidecars: Vec<RuntimeSidecar>,
    /// Extra environment variables for every container (the platform always adds identity,
    /// owner and expiry variables).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "preserved_object_list_schema")]
    pub env: Vec<EnvVar>,
    /// Volumes added to every pod (shared with the runtime containers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "preserved_object_list_schema")]
    pub volumes: Vec<Volume>,
    /// Mounts of those volumes added to every workload container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "preserved_object_list_schema")]
    pub volume_mounts: Vec<VolumeMount>,
    /// Requests and limits given to workload containers that set none for a resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_resources: Option<DefaultResources>,
    /// Default lifetime in days, from the workload's creation, written into
    /// `PINTEREST_EXPIRY` (a workload's `pinterest.com/expires-at` annotation overrides it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub expiry_days: Option<i32>,
}

/// One sidecar and the kinds it applies to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeSidecar {
    /// Kinds that get this sidecar; empty means all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applies_to: Vec<WorkloadKind>,
    /// The container.
    #[schemars(schema_with = "embedded_object_schema")]
    pub container: Container,
}

/// Default requests and limits by resource name (`cpu`, `memory`, ...).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefaultResources {
    /// Default requests.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "quantity_map_schema")]
    pub requests: BTreeMap<String, Quantity>,
    /// Default limits.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "quantity_map_schema")]
    pub limits: BTreeMap<String, Quantity>,
}

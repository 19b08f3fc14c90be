//! PinterestDaemon: an infrastructure daemon on every node of the selected clusters.

// kube's `printcolumn(...)` repeats the same keys by design.
#![allow(clippy::duplicated_attributes)]

use super::common::{workload_spec, workload_status};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::*;

workload_spec! {
    /// An infrastructure daemon. Expanded into a DaemonSet in every selected member cluster.
    crd "PinterestDaemon", status "PinterestDaemonStatus", short "pds" {
        doc = "An infrastructure daemon, duplicated to every selected member cluster as a DaemonSet.",
        printcolumn(name = "Desired", type_ = "integer", json_path = ".status.desired"),
        printcolumn(name = "Ready", type_ = "integer", json_path = ".status.ready")
    }
    pub struct PinterestDaemonSpec {
        placement: " Where the daemon runs. Default strategy: Duplicated (every selected cluster).",
        /// Pod template (the user's containers only).
        #[schemars(schema_with = "pod_template_schema")]
        pub template: PodTemplateSpec,
        /// How pods are replaced on a template change. Default: RollingUpdate.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub update_strategy: Option<DaemonUpdateStrategy>,
    }
}

/// DaemonSet update strategy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DaemonUpdateStrategy {
    /// RollingUpdate (default) or OnDelete.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<DaemonUpdateType>,
    /// Rolling-update parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<DaemonRollingUpdate>,
}

/// Kind of DaemonSet update.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DaemonUpdateType {
    RollingUpdate,
    OnDelete,
}

/// Rolling-update parameters of a DaemonSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DaemonRollingUpdate {
    /// Nodes whose daemon pod may be unavailable during the update (number or percent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_string_schema")]
    pub max_unavailable: Option<IntOrString>,
    /// Nodes that may run an extra (new) pod during the update (number or percent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_string_schema")]
    pub max_surge: Option<IntOrString>,
}

workload_status! {
    /// Status of a PinterestDaemon.
    pub struct PinterestDaemonStatus {
        conditions: " Scheduled, Ready, Progressing, Degraded, QuotaExceeded, Invalid.",
        /// Nodes that should run the daemon.
        #[serde(default)]
        pub desired: i32,
        /// Nodes where the daemon is ready.
        #[serde(default)]
        pub ready: i32,
        /// Nodes where the daemon is available.
        #[serde(default)]
        pub available: i32,
        /// Nodes running the current template.
        #[serde(default)]
        pub updated: i32,
    }
}

//! PinterestJobSet: N independent shards of one container, each taking a fraction of the
//! work.

// kube's `printcolumn(...)` repeats the same keys by design.
#![allow(clippy::duplicated_attributes)]

use super::common::{workload_spec, workload_status};
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::*;

workload_spec! {
    /// N independent shards of one container. Expanded in each member cluster into one Job
    /// per assigned shard (with literal `SHARD_INDEX` and `SHARD_COUNT`), per-shard ConfigMaps
    /// rendered from `configTemplates` and per-shard PVCs from `volumeClaimTemplates`.
    crd "PinterestJobSet", status "PinterestJobSetStatus", short "pjs" {
        doc = "N independent shards of one container, split by shard index over member clusters; each shard runs as one Job with SHARD_INDEX and SHARD_COUNT.",
        printcolumn(name = "Shards", type_ = "integer", json_path = ".spec.shards"),
        printcolumn(
            name = "Running",
            type_ = "integer",
            json_path = ".status.shardsRunning"
        ),
        printcolumn(
            name = "Succeeded",
            type_ = "integer",
            json_path = ".status.shardsSucceeded"
        ),
        printcolumn(name = "Failed", type_ = "integer", json_path = ".status.shardsFailed")
    }
    pub struct PinterestJobSetSpec {
        placement: " Where the shards run. Default strategy: Divided (shard indices split over clusters).",
        /// Total number of shards N (at most 100000); shard indices are 0..N-1. Immutable.
        #[schemars(range(min = 1, max = MAX_SHARDS))]
        #[schemars(extend("x-kubernetes-validations" = [{
            "rule": "self == oldSelf",
            "message": "shards is immutable; create a new JobSet instead"
        }]))]
        pub shards: i32,
        /// Most shards running at once across the federation. Default: all.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1))]
        pub parallelism: Option<i32>,
        /// Retries of one shard before it counts as failed (the Job's backoffLimit).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 0))]
        pub backoff_limit_per_shard: Option<i32>,
        /// Per-shard ConfigMaps. Values may use `{{shard}}` and `{{shardCount}}`. A pod template
        /// volume, envFrom or env reference to a ConfigMap named like a template is pointed at
        /// that shard's ConfigMap; an unreferenced template is mounted at
        /// /etc/pinterest/shard-config/<name>.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub config_templates: Vec<ConfigTemplate>,
        /// PersistentVolumeClaim templates; each shard gets its own claim, mounted where the
        /// pod template's volumeMounts name the template.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(schema_with = "claim_templates_schema")]
        pub volume_claim_templates: Vec<PersistentVolumeClaim>,
        /// Seconds after a shard's Job finishes before Kubernetes deletes it. A completed shard
        /// is recorded in status and never runs again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 0))]
        pub ttl_seconds_after_finished: Option<i32>,
        /// Set by the hub on a member's slice: the shard indices this cluster runs, as a range
        /// list (`0-3,7`). Absent: all shards.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(pattern(RANGE_LIST_PATTERN))]
        pub assigned_shards: Option<String>,
        /// Pod template of one shard (the user's containers only). Immutable.
        #[schemars(schema_with = "immutable_pod_template_schema")]
        pub template: PodTemplateSpec,
    }
}

/// On a member's slice, set by the hub: the shards the slice held before and let go of (a
/// range list). A Job of one may have completed in the member while the move began; the
/// member's report of it counts (the hub gave it that shard), so the shard is neither
/// run again elsewhere nor left counted nowhere.
pub const ANNOTATION_RELEASED_SHARDS: &str = "federation.pinterest.com/released-shards";

/// Most shards one JobSet may have (each shard is a Job).
pub const MAX_SHARDS: i32 = 100_000;

/// A ConfigMap rendered once per shard.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigTemplate {
    /// Template name (a DNS label); the shard's ConfigMap is `<jobset>-<shard>-<name>`.
    pub name: String,
    /// Keys and values; `{{shard}}` and `{{shardCount}}` are replaced per shard.
    #[serde(default)]
    pub data: BTreeMap<String, String>,
}

workload_status! {
    /// Status of a PinterestJobSet.
    pub struct PinterestJobSetStatus {
        conditions: " Scheduled, Ready, Progressing, Degraded, QuotaExceeded, Invalid, Complete, Failed.",
        /// Shards whose Job is running.
        #[serde(default)]
        pub shards_running: i32,
        /// Shards that succeeded.
        #[serde(default)]
        pub shards_succeeded: i32,
        /// Shards that failed (exhausted their backoff limit).
        #[serde(default)]
        pub shards_failed: i32,
        /// Succeeded shard indices as a range list. A shard listed here never gets a Job
        /// again (not after TTL clean-up, drift repair, failover or restarts).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(pattern(RANGE_LIST_PATTERN))]
        pub completed_shards: Option<String>,
        /// Failed shard indices as a range list.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(pattern(RANGE_LIST_PATTERN))]
        pub failed_shards: Option<String>,
        /// Unfinished shards whose Job has no pod Ready (pending, pulling its image, crashing),
        /// as a range list; reported only with application failover on
        /// (`spec.placement.failover.application`), which moves them off a member where they
        /// stay so while the job set runs elsewhere.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(pattern(RANGE_LIST_PATTERN))]
        pub unready_shards: Option<String>,
        /// When the first shard started.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(schema_with = "optional_date_time_schema")]
        pub start_time: Option<Time>,
        /// When the last shard finished.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(schema_with = "optional_date_time_schema")]
        pub completion_time: Option<Time>,
    }
}

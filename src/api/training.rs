//! PinterestTrainingJob: a distributed TensorFlow or PyTorch training job (Kubeflow
//! conventions), gang-placed in one cluster.

// kube's `printcolumn(...)` repeats the same keys by design.
#![allow(clippy::duplicated_attributes)]

use super::common::{workload_spec, workload_status};
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::*;
use super::service::one;

workload_spec! {
    /// A distributed training job. Expanded into a headless Service and one single-pod Job per
    /// replica, with literal `RANK`/`MASTER_ADDR`/`MASTER_PORT`/`WORLD_SIZE` (PyTorch) or
    /// `TF_CONFIG` (TensorFlow). All replicas run in one cluster, or the job waits.
    crd "PinterestTrainingJob", status "PinterestTrainingJobStatus", short "ptj" {
        doc = "A distributed TensorFlow or PyTorch training job, gang-placed in a single member cluster and expanded into a headless Service and one single-pod Job per replica.",
        printcolumn(name = "Framework", type_ = "string", json_path = ".spec.framework"),
        printcolumn(
            name = "Complete",
            type_ = "string",
            json_path = ".status.conditions[?(@.type==\"Complete\")].status"
        )
    }
    pub struct PinterestTrainingJobSpec {
        placement: " Where the job runs. Strategy: Single (gang: the whole job fits in one cluster or waits).",
        /// `pytorch` or `tensorflow`.
        pub framework: Framework,
        /// Replicas by role, as in Kubeflow: PyTorch `Master` (exactly 1) and `Worker`;
        /// TensorFlow `Chief`, `PS`, `Worker`, `Evaluator`.
        pub replica_specs: BTreeMap<String, ReplicaSpec>,
        /// Retries of one replica's pod before the job fails. Default 0.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 0))]
        pub backoff_limit: Option<i32>,
        /// Seconds after a replica's Job finishes before Kubernetes deletes it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 0))]
        pub ttl_seconds_after_finished: Option<i32>,
    }
}

/// ML framework of a training job.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Framework {
    #[serde(rename = "pytorch")]
    PyTorch,
    #[serde(rename = "tensorflow")]
    TensorFlow,
}

impl Framework {
    pub fn as_str(self) -> &'static str {
        match self {
            Framework::PyTorch => "pytorch",
            Framework::TensorFlow => "tensorflow",
        }
    }

    /// The roles this framework knows, in rank order.
    pub fn roles(self) -> &'static [&'static str] {
        match self {
            Framework::PyTorch => &["Master", "Worker"],
            Framework::TensorFlow => &["Chief", "PS", "Worker", "Evaluator"],
        }
    }

    /// Port the replicas talk on unless the template names one.
    pub fn default_port(self) -> i32 {
        match self {
            Framework::PyTorch => 23456,
            Framework::TensorFlow => 2222,
        }
    }
}

/// Most replicas one role may have (each replica is a Job).
pub const MAX_REPLICAS_PER_ROLE: i32 = 10_000;

/// Replicas of one role.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSpec {
    /// Number of replicas of this role (at most 10000). Default 1.
    #[serde(default = "one")]
    #[schemars(range(min = 0, max = MAX_REPLICAS_PER_ROLE))]
    pub replicas: i32,
    /// Pod template of this role (the user's containers only).
    #[schemars(schema_with = "pod_template_schema")]
    pub template: PodTemplateSpec,
}

/// State of the replicas of one role.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    /// Replicas running (or pending).
    #[serde(default)]
    pub active: i32,
    /// Replicas that succeeded.
    #[serde(default)]
    pub succeeded: i32,
    /// Replicas that failed.
    #[serde(default)]
    pub failed: i32,
}

workload_status! {
    /// Status of a PinterestTrainingJob.
    pub struct PinterestTrainingJobStatus {
        conditions: " Scheduled, Ready, Progressing, Degraded, QuotaExceeded, Invalid, Complete, Failed.",
        /// Per-role replica state.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub replica_statuses: BTreeMap<String, ReplicaStatus>,
        /// When the first replica started.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(schema_with = "optional_date_time_schema")]
        pub start_time: Option<Time>,
        /// When the job finished.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(schema_with = "optional_date_time_schema")]
        pub completion_time: Option<Time>,
    }
}

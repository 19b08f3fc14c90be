//! PinterestStatefulSet: a stateful service with stable identities and volumes.

// kube's `printcolumn(...)` repeats the same keys by design.
#![allow(clippy::duplicated_attributes)]

use super::common::{workload_spec, workload_status};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};

use super::common::*;
use super::service::{Disruption, one};

workload_spec! {
    /// A stateful service. Expanded into a StatefulSet with its headless Service, PVC
    /// templates and a PodDisruptionBudget in the single cluster that runs it.
    crd "PinterestStatefulSet", status "PinterestStatefulSetStatus", short "psts" {
        doc = "A stateful service in a single member cluster (no automatic failover unless asked), expanded into a StatefulSet, headless Service and PodDisruptionBudget.",
        scale(
            spec_replicas_path = ".spec.replicas",
            status_replicas_path = ".status.replicas"
        ),
        printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
        printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas")
    }
    pub struct PinterestStatefulSetSpec {
        placement: " Where the stateful set runs. Default strategy: Single; failover off unless enabled.",
        /// Pods (ordinals 0..replicas-1).
        #[serde(default = "one")]
        #[schemars(range(min = 0))]
        pub replicas: i32,
        /// Pod template (the user's containers only).
        #[schemars(schema_with = "pod_template_schema")]
        pub template: PodTemplateSpec,
        /// PersistentVolumeClaim templates; each pod gets its own claims.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(schema_with = "claim_templates_schema")]
        pub volume_claim_templates: Vec<PersistentVolumeClaim>,
        /// Voluntary-disruption budget. Default: maxUnavailable 1.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub disruption: Option<Disruption>,
    }
}

workload_status! {
    /// Status of a PinterestStatefulSet.
    pub struct PinterestStatefulSetStatus {
        conditions: " Scheduled, Ready, Progressing, Degraded, QuotaExceeded, Invalid.",
        /// Pods that exist.
        #[serde(default)]
        pub replicas: i32,
        /// Pods that are ready.
        #[serde(default)]
        pub ready_replicas: i32,
        /// Pods that are available.
        #[serde(default)]
        pub available_replicas: i32,
        /// Pods running the current template.
        #[serde(default)]
        pub updated_replicas: i32,
    }
}

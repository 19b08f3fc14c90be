//! PinterestService: a long-running stateless service.

// kube's `printcolumn(...)` repeats the same keys by design.
#![allow(clippy::duplicated_attributes)]

use super::common::{workload_spec, workload_status};
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::*;

workload_spec! {
    /// A long-running stateless service. Expanded in each member cluster into a Deployment,
    /// a Service, an Ingress (if `ingress` is set), a ConfigMap (if `config` is set) and a
    /// PodDisruptionBudget, with the platform's runtime support injected into the pods.
    crd "PinterestService", status "PinterestServiceStatus", short "psvc" {
        doc = "A long-running stateless service, placed over member clusters and expanded into a Deployment, Service, Ingress, ConfigMap and PodDisruptionBudget in each.",
        scale(
            spec_replicas_path = ".spec.replicas",
            status_replicas_path = ".status.replicas"
        ),
        printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
        printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
        printcolumn(
            name = "Available",
            type_ = "integer",
            json_path = ".status.availableReplicas"
        )
    }
    pub struct PinterestServiceSpec {
        placement: " Where the service runs. Default strategy: Divided (replicas split over clusters).",
        /// Total replicas across the federation (in a member: this cluster's share).
        #[serde(default = "one")]
        #[schemars(range(min = 0))]
        pub replicas: i32,
        /// Pod template with the application's containers only; the platform adds its runtime
        /// support.
        #[schemars(schema_with = "pod_template_schema")]
        pub template: PodTemplateSpec,
        /// Ports the Service exposes. Absent: the containers' declared ports.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub service: Option<ServiceExposure>,
        /// HTTP ingress. Absent: no Ingress.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub ingress: Option<IngressRoute>,
        /// Configuration files (file name → content), written into a ConfigMap and mounted
        /// into every application container at /etc/pinterest/config.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub config: BTreeMap<String, String>,
        /// Voluntary-disruption budget. Default: maxUnavailable 1.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub disruption: Option<Disruption>,
    }
}

pub(crate) fn one() -> i32 {
    1
}

/// Ports of the generated Service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExposure {
    /// The ports.
    #[serde(default)]
    pub ports: Vec<ServicePortSpec>,
}

/// One Service port.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServicePortSpec {
    /// Port name (a DNS label); required when there is more than one port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Port the Service listens on.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Container port number or name. Default: same as `port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_string_schema")]
    pub target_port: Option<IntOrString>,
    /// TCP (default), UDP or SCTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
}

/// HTTP route into the service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressRoute {
    /// Host name. Default: `<name>.<namespace>.<cluster>.pinterest.internal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Path prefix. Default `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// Disruption budget.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// Pods that may be down at once during voluntary disruptions (number or percent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_string_schema")]
    pub max_unavailable: Option<IntOrString>,
}

workload_status! {
    /// Status of a PinterestService (hub: aggregated over clusters; member: this cluster).
    pub struct PinterestServiceStatus {
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

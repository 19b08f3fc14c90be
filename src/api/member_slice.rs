//! Pull mode: the hub never connects to a pull member. It writes each slice for that
//! member into the member's namespace on the hub, wrapped in a `MemberSlice`; the
//! member's agent applies the wrapped slice into its cluster (the slice contract is
//! unchanged, so expansion is too) and writes the slice's status back into the
//! MemberSlice. Types only; the builders are in `hub::slices`.

// kube's `printcolumn(...)` repeats the same keys by design.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{embedded_object_schema, optional_date_time_schema, preserved_object_schema};
use super::workload::WorkloadKind;

/// The slice contract: labels and annotations that tie a slice to its hub resource
/// (owner references cannot cross clusters).
pub const LABEL_HUB_NAME: &str = "federation.pinterest.com/hub-name";
pub const LABEL_HUB_NAMESPACE: &str = "federation.pinterest.com/hub-namespace";
pub const LABEL_HUB_UID: &str = "federation.pinterest.com/hub-uid";
pub const LABEL_SLICE_OF: &str = "federation.pinterest.com/slice-of";
pub const ANNOTATION_HUB_GENERATION: &str = "federation.pinterest.com/hub-generation";
/// The trace context (W3C `traceparent`) of the change a workload or slice carries: the
/// JSS's submission on a hub resource, the hub's reconcile that wrote it on a slice. Never
/// a reason to write a slice (`hub::slices::slice_is_current` leaves it out).
pub const ANNOTATION_TRACEPARENT: &str = "federation.pinterest.com/traceparent";

/// The trace id (32 lowercase hex digits) of a W3C `traceparent`
/// (`00-<trace id>-<span id>-<flags>`), if it is one.
pub fn trace_id_of(traceparent: &str) -> Option<&str> {
    let mut parts = traceparent.split('-');
    let (version, id, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    (version == "00"
        && parts.next().is_none()
        && hex(id, 32)
        && hex(span, 16)
        && hex(flags, 2)
        && id.bytes().any(|b| b != b'0'))
    .then_some(id)
}

/// The name of the MemberSlice carrying the slice `namespace/name` of `kind` for a pull
/// member: `kind.namespace.name` in lower case, shortened with a hash past 253.
pub fn member_slice_name(kind: WorkloadKind, namespace: &str, name: &str) -> String {
    let full = format!("{}.{namespace}.{name}", kind.as_str().to_lowercase());
    if full.len() <= 253 {
        return full;
    }
    let hash = crate::expand::names::short_hash(&full);
    let head: String = full.chars().take(253 - 1 - hash.len()).collect();
    format!("{}-{hash}", head.trim_end_matches(['.', '-']))
}

/// The Secret in a pull member's namespace on the hub every token of its agent is bound
/// to: the chain of renewals ends with it (`hub::join_pull`, `hub::pull_credential`).
pub const AGENT_CREDENTIAL: &str = "pinfed-agent-credential";

/// The hub namespace of a pull member's slices, Lease and bundles.
pub fn pull_namespace(member: &str) -> String {
    format!("pinfed-member-{member}")
}

/// The Lease a member's agent renews (in the member's pull namespace on the hub, or in
/// `pinfed-system` of a push member): the hub's evidence that the agent runs.
pub fn agent_lease_name(member: &str) -> String {
    format!("pinfed-agent-{member}")
}

/// A pull member's own report, in the member's namespace on the hub, named like its
/// agent's Lease ([`agent_lease_name`]). `pinfed join --mode pull` creates it; the agent's
/// hub identity may write this object and no other report, so a member can describe only
/// itself, and the hub bounds what it says (`placement::report_guard`) before placement
/// uses it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "federation.pinterest.com",
    version = "v1alpha1",
    kind = "MemberReport",
    namespaced,
    status = "MemberReportStatus",
    shortname = "mreport",
    category = "pinterest",
    derive = "PartialEq",
    doc = "A pull member's report of itself (capacity, version, health), written by its agent alone, in the member's namespace on the hub.",
    printcolumn(name = "Member", type_ = "string", json_path = ".spec.member"),
    printcolumn(
        name = "Healthy",
        type_ = "boolean",
        json_path = ".status.report.healthy"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".status.report.kubernetesVersion"
    ),
    printcolumn(name = "Reported", type_ = "date", json_path = ".status.report.time")
)]
#[serde(rename_all = "camelCase")]
pub struct MemberReportSpec {
    /// The member this report describes (set by `pinfed join`).
    pub member: String,
}

/// What the member's agent reports (its status subresource is all it may write).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberReportStatus {
    /// The agent's last report; absent until its first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<super::federation::AgentReport>,
}

/// A slice addressed to a pull member, held on the hub.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "federation.pinterest.com",
    version = "v1alpha1",
    kind = "MemberSlice",
    namespaced,
    status = "MemberSliceStatus",
    shortname = "mslice",
    category = "pinterest",
    derive = "PartialEq",
    doc = "A slice of a hub workload for a member in Pull mode, in that member's namespace on the hub: the member's agent applies spec.slice in its cluster and reports the slice's status here.",
    printcolumn(name = "Kind", type_ = "string", json_path = ".spec.slice.kind"),
    printcolumn(
        name = "Namespace",
        type_ = "string",
        json_path = ".spec.slice.metadata.namespace"
    ),
    printcolumn(name = "Reported", type_ = "date", json_path = ".status.reportedTime"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MemberSliceSpec {
    /// The slice as the hub would write it into a push member: apiVersion, kind,
    /// metadata (name, namespace, labels, annotations) and spec.
    #[schemars(schema_with = "embedded_object_schema")]
    pub slice: serde_json::Value,
}

/// What the member's agent last saw of the slice in its cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberSliceStatus {
    /// The slice's status in the member, as its agent wrote it there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object_schema")]
    pub slice: Option<serde_json::Value>,
    /// The slice's `metadata.generation` in the member (its status's observedGeneration
    /// refers to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice_generation: Option<i64>,
    /// The hub generation the slice in the member was written from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub_generation: Option<i64>,
    /// When the agent wrote this status (staleness is judged by it, never by when the hub
    /// read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_date_time_schema")]
    pub reported_time: Option<Time>,
    /// Why the agent could not apply the slice, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_id_is_read_only_from_a_well_formed_traceparent() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(trace_id_of(good), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-<script>77b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        ] {
            assert_eq!(trace_id_of(bad), None, "{bad}");
        }
    }
}

//! Per-member overrides (`spec.overrides`): what one member's objects run differently
//! from the rest — an image registry mirror, env values, resources, tolerations, labels,
//! replica bounds, and a JSON patch for anything else. The hub resolves which rules
//! select each member and fills in the member's variables; the agent applies the
//! resolved rules to the expanded objects, before the member's pod policy judges them.
//! The pure engine is [`crate::overrides`]; this module holds the API.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use super::common::LabelSelector;

/// Annotation on a slice: the names of the override rules it carries (comma-separated);
/// the hub shows them as the member's `clusters[].overrides`.
pub const ANNOTATION_APPLIED: &str = "overrides.pinterest.com/applied";

/// One override rule. It selects members by name (`clusters`) and/or labels
/// (`clusterSelector`, over the MemberCluster's labels plus its region and zone); a rule
/// with neither selects every member. String values may use the member's variables:
/// `{{cluster}}`, `{{region}}`, `{{zone}}` and `{{label:<key>}}`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Override {
    /// The rule's name, unique in the list (shown in status and errors).
    pub name: String,
    /// Members selected by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    /// Members selected by labels (the MemberCluster's labels, and
    /// `topology.kubernetes.io/region` and `/zone` from its spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// The application containers the container changes below apply to (names from the
    /// pod template). Empty: every application container. Runtime sidecars and init
    /// containers injected by the platform are never changed by a typed override.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<String>,
    /// A new image registry, or a new tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageOverride>,
    /// Environment variables set (added, or replacing one of the same name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvValue>,
    /// Replaces the containers' args.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// Requests and limits set, resource by resource (the others stay). The hub charges
    /// quota and checks room with the overridden requests in the members selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resources_schema")]
    pub resources: Option<ResourceRequirements>,
    /// Labels set on every generated object and its pods (not pinfed's own keys).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations set on every generated object and its pods (not pinfed's own keys).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Tolerations added to the pods (of node taints inside the member).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "tolerations_schema")]
    pub tolerations: Vec<Toleration>,
    /// Bounds of the member's share of replicas (services and stateful sets), as
    /// `placement.clusterLimits` would set them; a bound here wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<ReplicaBounds>,
    /// JSON patches (RFC 6902 `add`, `replace`, `remove`) of generated objects, applied
    /// after the typed changes. A path must exist (for `add`: its parent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<ObjectPatch>,
}

/// A new registry or tag for the selected containers' images.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageOverride {
    /// Replaces the registry host (`registry.example/app:1` with `mirror.example` becomes
    /// `mirror.example/app:1`); an image without one gets it in front.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    /// Replaces the tag (or digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// One environment variable with a literal value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvValue {
    pub name: String,
    #[serde(default)]
    pub value: String,
}

/// Bounds of one member's replicas.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaBounds {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max: Option<i32>,
}

/// A JSON patch operation on generated objects of one kind.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectPatch {
    /// The generated objects' kind (`Deployment`, `Service`, `ConfigMap`, ...).
    pub kind: String,
    /// One object of that kind by name; absent: every object of the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `add`, `replace` or `remove`.
    pub op: PatchOp,
    /// A JSON pointer, e.g. `/spec/template/spec/priorityClassName`.
    pub path: String,
    /// The value (`add` and `replace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value_schema")]
    pub value: Option<serde_json::Value>,
}

/// A JSON patch operation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PatchOp {
    #[default]
    Add,
    Replace,
    Remove,
}

impl PatchOp {
    pub fn as_str(self) -> &'static str {
        match self {
            PatchOp::Add => "add",
            PatchOp::Replace => "replace",
            PatchOp::Remove => "remove",
        }
    }
}

fn resources_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "description": "Requests and limits (resource name → quantity).",
        "properties": {
            "requests": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": true}},
            "limits": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": true}}
        }
    })
}

fn tolerations_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "key": {"type": "string"},
                "operator": {"type": "string"},
                "value": {"type": "string"},
                "effect": {"type": "string"},
                "tolerationSeconds": {"type": "integer", "format": "int64"}
            }
        }
    })
}

fn any_value_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Any JSON value.",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

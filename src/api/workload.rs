//! The six Pinterest workload kinds seen uniformly: what they share (owner, placement,
//! runtime version), their kind-level defaults, and every CRD of the product.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{CustomResourceExt, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Owner, Placement, PlacementStrategy};
use super::cronjob::PinterestCronJob;
use super::daemon::PinterestDaemon;
use super::federation::{FederatedQuota, MemberCluster};
use super::jobset::PinterestJobSet;
use super::runtime_profile::RuntimeProfile;
use super::service::PinterestService;
use super::statefulset::PinterestStatefulSet;
use super::training::PinterestTrainingJob;

/// API group of the workload kinds and RuntimeProfile.
pub const COMPUTE_GROUP: &str = "compute.pinterest.com";
/// API group of MemberCluster and FederatedQuota.
pub const FEDERATION_GROUP: &str = "federation.pinterest.com";
/// The one version of both groups.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of the workload kinds.
pub const COMPUTE_API_VERSION: &str = "compute.pinterest.com/v1alpha1";
/// `apiVersion` of the federation kinds.
pub const FEDERATION_API_VERSION: &str = "federation.pinterest.com/v1alpha1";

/// One of the six workload kinds. Serialized as the Kubernetes kind name.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum WorkloadKind {
    #[serde(rename = "PinterestService")]
    Service,
    #[serde(rename = "PinterestJobSet")]
    JobSet,
    #[serde(rename = "PinterestCronJob")]
    CronJob,
    #[serde(rename = "PinterestDaemon")]
    Daemon,
    #[serde(rename = "PinterestTrainingJob")]
    TrainingJob,
    #[serde(rename = "PinterestStatefulSet")]
    StatefulSet,
}

/// What a kind's progress counts, as a reader sees it (the CLI's and the UI's columns;
/// what the JSS reports as desired).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// Replicas against `spec.replicas` (services, stateful sets).
    Replicas,
    /// Shards done against `spec.shards` (job sets).
    Shards,
    /// Nodes ready against nodes eligible: its size is its members' (daemons).
    Nodes,
    /// A gang's replicas against the sum of its roles' (training jobs), then complete.
    Gang,
    /// Runs on a schedule, each complete or not (cron jobs).
    Runs,
}

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 6] = [
        WorkloadKind::Service,
        WorkloadKind::JobSet,
        WorkloadKind::CronJob,
        WorkloadKind::Daemon,
        WorkloadKind::TrainingJob,
        WorkloadKind::StatefulSet,
    ];

    /// What its progress counts.
    pub fn counted(self) -> Counted {
        match self {
            WorkloadKind::Service | WorkloadKind::StatefulSet => Counted::Replicas,
            WorkloadKind::JobSet => Counted::Shards,
            WorkloadKind::Daemon => Counted::Nodes,
            WorkloadKind::TrainingJob => Counted::Gang,
            WorkloadKind::CronJob => Counted::Runs,
        }
    }

    /// The Kubernetes kind, e.g. `PinterestService`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Service => "PinterestService",
            WorkloadKind::JobSet => "PinterestJobSet",
            WorkloadKind::CronJob => "PinterestCronJob",
            WorkloadKind::Daemon => "PinterestDaemon",
            WorkloadKind::TrainingJob => "PinterestTrainingJob",
            WorkloadKind::StatefulSet => "PinterestStatefulSet",
        }
    }

    pub fn from_kind(kind: &str) -> Option<WorkloadKind> {
        WorkloadKind::ALL.into_iter().find(|k| k.as_str() == kind)
    }

    /// Placement strategy when `spec.placement.strategy` is absent.
    pub fn default_strategy(self) -> PlacementStrategy {
        match self {
            WorkloadKind::Service | WorkloadKind::JobSet => PlacementStrategy::Divided,
            WorkloadKind::Daemon => PlacementStrategy::Duplicated,
            WorkloadKind::CronJob | WorkloadKind::TrainingJob | WorkloadKind::StatefulSet => {
                PlacementStrategy::Single
            }
        }
    }

    /// Strategies this kind accepts.
    pub fn allowed_strategies(self) -> &'static [PlacementStrategy] {
        use PlacementStrategy::*;
        match self {
            WorkloadKind::Service => &[Divided, Duplicated, Single],
            WorkloadKind::JobSet => &[Divided, Single],
            WorkloadKind::Daemon => &[Duplicated, Single],
            // A cron job duplicated would run N times per schedule; a training job is a gang;
            // a stateful set's identities must stay unique.
            WorkloadKind::CronJob | WorkloadKind::TrainingJob | WorkloadKind::StatefulSet => {
                &[Single]
            }
        }
    }

    /// Pods of these kinds run to completion (their sidecars become native sidecars).
    pub fn runs_to_completion(self) -> bool {
        matches!(
            self,
            WorkloadKind::JobSet | WorkloadKind::CronJob | WorkloadKind::TrainingJob
        )
    }

    /// Whether failover is on when `spec.placement.failover.enabled` is absent.
    pub fn failover_by_default(self) -> bool {
        !matches!(self, WorkloadKind::StatefulSet | WorkloadKind::TrainingJob)
    }

    /// Kinds whose replicas the hub divides among members (a share per member).
    pub fn divides_replicas(self) -> bool {
        matches!(self, WorkloadKind::Service | WorkloadKind::StatefulSet)
    }

    /// Kinds that may name an ingress host of their own (`spec.ingress.host`): services.
    pub fn claims_ingress_hosts(self) -> bool {
        self == WorkloadKind::Service
    }

    /// Kinds whose pods run on every eligible node of a member (daemons): a member's
    /// policy allows them apart, and node-level privileges are theirs to ask.
    pub fn runs_on_every_node(self) -> bool {
        self == WorkloadKind::Daemon
    }

    /// Kinds that run indexed shards, each once (the job set).
    pub fn runs_shards(self) -> bool {
        self == WorkloadKind::JobSet
    }

    /// Kinds part of which can move on its own (a share of replicas, a job set's
    /// unfinished shards): those application failover applies to. A cron job's runs, a
    /// daemon (every member) and a training gang (all or nothing) cannot move in part.
    pub fn moves_in_part(self) -> bool {
        self.divides_replicas() || self.runs_shards()
    }
}

impl std::fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Access to what every workload kind shares.
pub trait Workload: Resource<DynamicType = ()> {
    const KIND: WorkloadKind;
    fn owner(&self) -> &Owner;
    fn runtime_version(&self) -> Option<&str>;
    fn placement(&self) -> &Placement;
    fn rollout(&self) -> Option<&super::rollout::RolloutPolicy>;
    fn overrides(&self) -> &[super::overrides::Override];
    fn priority_class_name(&self) -> Option<&str>;
    fn set_priority_class_name(&mut self, class: Option<String>);
    /// Replaces the overrides (the hub writes each slice the rules its member resolved).
    fn set_overrides(&mut self, overrides: Vec<super::overrides::Override>);
    /// Pins the RuntimeProfile version (the hub pins what a slice's revision resolved to).
    fn set_runtime_version(&mut self, version: Option<String>);
}

macro_rules! impl_workload {
    ($t:ty, $k:expr) => {
        impl Workload for $t {
            const KIND: WorkloadKind = $k;
            fn owner(&self) -> &Owner {
                &self.spec.owner
            }
            fn runtime_version(&self) -> Option<&str> {
                self.spec.runtime_version.as_deref()
            }
            fn placement(&self) -> &Placement {
                &self.spec.placement
            }
            fn rollout(&self) -> Option<&super::rollout::RolloutPolicy> {
                self.spec.rollout.as_ref()
            }
            fn set_runtime_version(&mut self, version: Option<String>) {
                self.spec.runtime_version = version;
            }
            fn overrides(&self) -> &[super::overrides::Override] {
                &self.spec.overrides
            }
            fn priority_class_name(&self) -> Option<&str> {
                self.spec.priority_class_name.as_deref()
            }
            fn set_priority_class_name(&mut self, class: Option<String>) {
                self.spec.priority_class_name = class;
            }
            fn set_overrides(&mut self, overrides: Vec<super::overrides::Override>) {
                self.spec.overrides = overrides;
            }
        }
    };
}

impl_workload!(PinterestService, WorkloadKind::Service);
impl_workload!(PinterestJobSet, WorkloadKind::JobSet);
impl_workload!(PinterestCronJob, WorkloadKind::CronJob);
impl_workload!(PinterestDaemon, WorkloadKind::Daemon);
impl_workload!(PinterestTrainingJob, WorkloadKind::TrainingJob);
impl_workload!(PinterestStatefulSet, WorkloadKind::StatefulSet);

/// A borrowed workload of any kind.
#[derive(Clone, Copy, Debug)]
pub enum WorkloadRef<'a> {
    Service(&'a PinterestService),
    JobSet(&'a PinterestJobSet),
    CronJob(&'a PinterestCronJob),
    Daemon(&'a PinterestDaemon),
    TrainingJob(&'a PinterestTrainingJob),
    StatefulSet(&'a PinterestStatefulSet),
}

/// An owned workload of any kind (e.g. parsed from a file).
#[derive(Clone, Debug, PartialEq)]
pub enum AnyWorkload {
    Service(PinterestService),
    JobSet(PinterestJobSet),
    CronJob(PinterestCronJob),
    Daemon(PinterestDaemon),
    TrainingJob(PinterestTrainingJob),
    StatefulSet(PinterestStatefulSet),
}

/// Evaluates `$body` with `$w` bound to the workload a [`WorkloadRef`] holds, as its own
/// type: the one place a borrowed workload is matched by kind. The body is compiled once
/// per kind, so it may call anything every kind's type has (e.g. [`PinterestKind`]).
///
/// [`PinterestKind`]: crate::api::kind::PinterestKind
#[macro_export]
macro_rules! on_workload {
    ($w:expr, $x:ident => $body:expr) => {
        match $w {
            $crate::api::workload::WorkloadRef::Service($x) => $body,
            $crate::api::workload::WorkloadRef::JobSet($x) => $body,
            $crate::api::workload::WorkloadRef::CronJob($x) => $body,
            $crate::api::workload::WorkloadRef::Daemon($x) => $body,
            $crate::api::workload::WorkloadRef::TrainingJob($x) => $body,
            $crate::api::workload::WorkloadRef::StatefulSet($x) => $body,
        }
    };
}

/// [`on_workload!`] for an [`AnyWorkload`] (owned, borrowed or borrowed mutably).
#[macro_export]
macro_rules! on_any_workload {
    ($w:expr, $x:ident => $body:expr) => {
        match $w {
            $crate::api::workload::AnyWorkload::Service($x) => $body,
            $crate::api::workload::AnyWorkload::JobSet($x) => $body,
            $crate::api::workload::AnyWorkload::CronJob($x) => $body,
            $crate::api::workload::AnyWorkload::Daemon($x) => $body,
            $crate::api::workload::AnyWorkload::TrainingJob($x) => $body,
            $crate::api::workload::AnyWorkload::StatefulSet($x) => $body,
        }
    };
}

pub use crate::on_any_workload;
pub use crate::on_workload;

impl<'a> WorkloadRef<'a> {
    pub fn kind(self) -> WorkloadKind {
        fn of<W: Workload>(_: &W) -> WorkloadKind {
            W::KIND
        }
        on_workload!(self, w => of(w))
    }

    pub fn metadata(self) -> &'a ObjectMeta {
        on_workload!(self, w => &w.metadata)
    }

    pub fn owner(self) -> &'a Owner {
        on_workload!(self, w => &w.spec.owner)
    }

    pub fn runtime_version(self) -> Option<&'a str> {
        on_workload!(self, w => w.spec.runtime_version.as_deref())
    }

    pub fn placement(self) -> &'a Placement {
        on_workload!(self, w => &w.spec.placement)
    }

    /// An owned copy.
    pub fn to_owned(self) -> AnyWorkload {
        on_workload!(self, w => AnyWorkload::from(w.clone()))
    }

    /// The spec as JSON (overrides find a workload's application containers in it).
    pub fn spec_value(self) -> serde_json::Value {
        on_workload!(self, w => serde_json::to_value(&w.spec)).unwrap_or_default()
    }

    pub fn overrides(self) -> &'a [super::overrides::Override] {
        on_workload!(self, w => &w.spec.overrides)
    }

    pub fn priority_class_name(self) -> Option<&'a str> {
        on_workload!(self, w => w.spec.priority_class_name.as_deref())
    }

    pub fn rollout(self) -> Option<&'a super::rollout::RolloutPolicy> {
        on_workload!(self, w => w.spec.rollout.as_ref())
    }

    /// The effective placement strategy (the kind's default when unset).
    pub fn strategy(self) -> PlacementStrategy {
        self.placement()
            .strategy
            .unwrap_or_else(|| self.kind().default_strategy())
    }

    pub fn name(self) -> &'a str {
        self.metadata().name.as_deref().unwrap_or("")
    }

    pub fn namespace(self) -> Option<&'a str> {
        self.metadata().namespace.as_deref()
    }
}

impl AnyWorkload {
    pub fn as_ref(&self) -> WorkloadRef<'_> {
        on_any_workload!(self, w => WorkloadRef::from(w))
    }

    pub fn kind(&self) -> WorkloadKind {
        self.as_ref().kind()
    }

    /// A workload of `kind` from its JSON (`None` when it does not deserialize).
    pub fn from_value(kind: WorkloadKind, v: serde_json::Value) -> Option<AnyWorkload> {
        Some(crate::with_kind!(kind, K => AnyWorkload::from(serde_json::from_value::<K>(v).ok()?)))
    }

    /// A workload of `kind` from a dynamic client's object (`None` when it does not
    /// deserialize).
    pub fn from_dynamic(kind: WorkloadKind, o: &kube::api::DynamicObject) -> Option<AnyWorkload> {
        let mut v = o.data.clone();
        v["apiVersion"] = COMPUTE_API_VERSION.into();
        v["kind"] = kind.as_str().into();
        v["metadata"] = serde_json::to_value(&o.metadata).ok()?;
        AnyWorkload::from_value(kind, v)
    }

    /// Replaces the overrides (a member's slice carries the rules resolved for it).
    pub fn set_overrides(&mut self, overrides: Vec<super::overrides::Override>) {
        on_any_workload!(self, w => w.set_overrides(overrides))
    }

    /// The workload's metadata, to change (e.g. labels the JSS stamps on admission).
    pub fn metadata_mut(&mut self) -> &mut ObjectMeta {
        on_any_workload!(self, w => &mut w.metadata)
    }

    /// The whole object as JSON.
    pub fn to_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        on_any_workload!(self, w => serde_json::to_value(w))
    }
}

macro_rules! impl_from {
    ($t:ty, $v:ident) => {
        impl<'a> From<&'a $t> for WorkloadRef<'a> {
            fn from(w: &'a $t) -> Self {
                WorkloadRef::$v(w)
            }
        }
        impl From<$t> for AnyWorkload {
            fn from(w: $t) -> Self {
                AnyWorkload::$v(w)
            }
        }
    };
}

impl_from!(PinterestService, Service);
impl_from!(PinterestJobSet, JobSet);
impl_from!(PinterestCronJob, CronJob);
impl_from!(PinterestDaemon, Daemon);
impl_from!(PinterestTrainingJob, TrainingJob);
impl_from!(PinterestStatefulSet, StatefulSet);

/// Every CRD of the product, in a stable order (compute group, then federation).
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut all = vec![
        PinterestService::crd(),
        PinterestJobSet::crd(),
        PinterestCronJob::crd(),
        PinterestDaemon::crd(),
        PinterestTrainingJob::crd(),
        PinterestStatefulSet::crd(),
        RuntimeProfile::crd(),
        MemberCluster::crd(),
        FederatedQuota::crd(),
        super::member_slice::MemberSlice::crd(),
        super::member_slice::MemberReport::crd(),
    ];
    for schema in all.iter_mut().flat_map(schemas_mut) {
        tidy_descriptions(schema);
    }
    all
}

/// Each served version's OpenAPI schema of a CRD.
fn schemas_mut(crd: &mut CustomResourceDefinition) -> impl Iterator<Item = &mut JSONSchemaProps> {
    crd.spec
        .versions
        .iter_mut()
        .filter_map(|v| v.schema.as_mut()?.open_api_v3_schema.as_mut())
}

/// Every CRD of the product with the six workload kinds' `spec` schema left open
/// (`x-kubernetes-preserve-unknown-fields`; the status schema whole): what a member holds
/// when joined with `--member-schemas open`. The hub validates every spec before it writes
/// a slice, so the member's API server need not check it again, and the pod-template
/// schemas are most of a member API server's memory (docs/benchmarks.md). A slice made in
/// such a member directly is checked by the agent instead, which refuses one its kind
/// cannot take (`Invalid`, reason `Undecodable`).
pub fn crds_with_open_workload_specs() -> Vec<CustomResourceDefinition> {
    let mut all = crds();
    for schema in all
        .iter_mut()
        .filter(|c| is_workload_crd(c))
        .flat_map(schemas_mut)
    {
        if let Some(props) = schema.properties.as_mut() {
            props.insert(
                "spec".into(),
                JSONSchemaProps {
                    type_: Some("object".into()),
                    x_kubernetes_preserve_unknown_fields: Some(true),
                    ..Default::default()
                },
            );
        }
    }
    all
}

/// The six workload CRDs of [`crds_with_open_workload_specs`] (`pinfed crds --open-spec`).
pub fn crds_with_open_spec() -> Vec<CustomResourceDefinition> {
    crds_with_open_workload_specs()
        .into_iter()
        .filter(is_workload_crd)
        .collect()
}

/// Whether `crd` is one of the six workload kinds'.
fn is_workload_crd(crd: &CustomResourceDefinition) -> bool {
    WorkloadKind::ALL
        .iter()
        .any(|k| k.as_str() == crd.spec.names.kind)
}

/// Doc comments are wrapped at 90 columns; `kubectl explain` wraps by itself. Joins
/// single line breaks into spaces (blank lines stay paragraph breaks).
fn tidy_descriptions(schema: &mut JSONSchemaProps) {
    if let Some(d) = schema.description.as_mut() {
        *d = d
            .split("\n\n")
            .map(|p| p.split('\n').map(str::trim).collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
            .join("\n\n");
    }
    for p in schema.properties.iter_mut().flat_map(|m| m.values_mut()) {
        tidy_descriptions(p);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = schema.items.as_mut() {
        tidy_descriptions(items);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(a)) = schema.additional_properties.as_mut() {
        tidy_descriptions(a);
    }
}

/// File name of a CRD in `crds/`: `<plural>.<group>.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}

/// One CRD as a YAML document (no leading `---`).
pub fn crd_yaml(crd: &CustomResourceDefinition) -> String {
    // Serializing a CRD built from our own types cannot fail.
    super::yaml::to_string(crd).expect("CRD serializes to YAML")
}

/// Every CRD as a multi-document YAML stream, the output of `pinfed crds`.
pub fn crds_yaml() -> String {
    yaml_stream(&crds())
}

/// CRDs as a multi-document YAML stream.
pub fn yaml_stream(crds: &[CustomResourceDefinition]) -> String {
    crds.iter()
        .map(|c| format!("---\n{}", crd_yaml(c)))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn the_open_spec_crds_are_the_six_workloads_with_their_spec_left_open() {
        let open = crds_with_open_spec();
        let kinds: Vec<&str> = open.iter().map(|c| c.spec.names.kind.as_str()).collect();
        assert_eq!(kinds, WorkloadKind::ALL.map(WorkloadKind::as_str).to_vec());
        let full = crds();
        for crd in &open {
            let whole = full
                .iter()
                .find(|c| c.spec.names.kind == crd.spec.names.kind)
                .unwrap();
            let props = |c: &CustomResourceDefinition| {
                serde_json::to_value(&c.spec.versions[0].schema).unwrap()["openAPIV3Schema"]
                    ["properties"]
                    .clone()
            };
            let (open_props, whole_props) = (props(crd), props(whole));
            assert_eq!(
                open_props["spec"]["x-kubernetes-preserve-unknown-fields"],
                true
            );
            assert!(open_props["spec"].get("properties").is_none());
            // The status schema stays whole.
            assert_eq!(open_props["status"], whole_props["status"]);
            assert!(crd_yaml(crd).len() * 10 < crd_yaml(whole).len());
        }
    }

    fn schema(kind: &str) -> Value {
        let crd = crds()
            .into_iter()
            .find(|c| c.spec.names.kind == kind)
            .unwrap();
        let v = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        v["openAPIV3Schema"]["properties"].clone()
    }

    #[test]
    fn schema_validation_where_it_is_simple() {
        let js = schema("PinterestJobSet");
        let spec = &js["spec"]["properties"];
        assert_eq!(spec["shards"]["minimum"], 1.0);
        assert_eq!(
            spec["shards"]["x-kubernetes-validations"][0]["rule"],
            "self == oldSelf"
        );
        assert_eq!(
            spec["template"]["x-kubernetes-validations"][0]["rule"],
            "self == oldSelf"
        );
        assert_eq!(
            spec["template"]["x-kubernetes-validations"][0]["message"],
            super::super::common::TEMPLATE_IMMUTABLE_MESSAGE
        );
        assert!(
            spec["assignedShards"]["pattern"]
                .as_str()
                .unwrap()
                .starts_with("^$|")
        );
        let svc = schema("PinterestService");
        assert_eq!(svc["spec"]["properties"]["replicas"]["minimum"], 0.0);
        let tj = schema("PinterestTrainingJob");
        assert_eq!(
            tj["spec"]["properties"]["framework"]["enum"],
            serde_json::json!(["pytorch", "tensorflow"])
        );
    }

    /// The pod template of `kind` (a training job's: of a role).
    fn pod_template(kind: &str) -> Value {
        let spec = schema(kind)["spec"]["properties"].clone();
        match kind {
            "PinterestTrainingJob" => {
                spec["replicaSpecs"]["additionalProperties"]["properties"]["template"].clone()
            }
            _ => spec["template"].clone(),
        }
    }

    #[test]
    fn every_workload_kind_has_the_kubernetes_pod_template_schema() {
        for kind in WorkloadKind::ALL {
            let t = pod_template(kind.as_str());
            assert_eq!(t["type"], "object", "{kind}");
            assert!(
                t.get("x-kubernetes-preserve-unknown-fields").is_none(),
                "{kind}: the template is typed, not kept as given"
            );
            let pod = &t["properties"]["spec"];
            assert_eq!(pod["required"], serde_json::json!(["containers"]), "{kind}");
            let container = &pod["properties"]["containers"]["items"];
            assert_eq!(container["required"], serde_json::json!(["name"]), "{kind}");
            assert_eq!(container["properties"]["image"]["type"], "string", "{kind}");
            assert_eq!(
                container["properties"]["ports"]["items"]["properties"]["containerPort"]["type"],
                "integer",
                "{kind}"
            );
            assert_eq!(
                container["properties"]["resources"]["properties"]["limits"]["additionalProperties"]
                    ["x-kubernetes-int-or-string"],
                true,
                "{kind}: quantities are numbers or strings"
            );
            assert!(
                container["properties"]["resources"]["properties"]["limits"]["description"]
                    .is_string(),
                "{kind}: kubectl explain describes the fields"
            );
            // The template's metadata is a name, labels and annotations, not a whole
            // ObjectMeta.
            let meta = &t["properties"]["metadata"]["properties"];
            let mut fields: Vec<_> = meta.as_object().unwrap().keys().cloned().collect();
            fields.sort();
            assert_eq!(fields, ["annotations", "labels", "name"], "{kind}");
            assert_eq!(meta["labels"]["additionalProperties"]["type"], "string");
        }
    }

    #[test]
    fn claim_templates_are_typed_with_a_cut_metadata() {
        for kind in ["PinterestJobSet", "PinterestStatefulSet"] {
            let claim = &schema(kind)["spec"]["properties"]["volumeClaimTemplates"]["items"];
            assert!(claim.get("x-kubernetes-preserve-unknown-fields").is_none());
            assert_eq!(
                claim["properties"]["metadata"]["properties"]["name"]["type"],
                "string"
            );
            assert!(claim["properties"]["metadata"]["properties"]["uid"].is_null());
            assert_eq!(
                claim["properties"]["spec"]["properties"]["accessModes"]["items"]["type"],
                "string"
            );
        }
    }

    /// Every CRD is one object in etcd (at most about 1.5 MB) and one request (3 MiB). The
    /// sizes are in docs/expansion.md ("What the API server checks").
    #[test]
    fn every_crd_is_self_contained_and_far_below_the_api_servers_object_limit() {
        for crd in crds() {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let json = serde_json::to_string(&crd).unwrap();
            assert!(
                !json.contains("\"$ref\""),
                "{name}: every subschema is inlined"
            );
            assert!(
                json.len() < 800 * 1024,
                "{name} is {} bytes of JSON; the API server stores at most ~1.5 MB",
                json.len()
            );
        }
    }

    #[test]
    fn kinds_round_trip() {
        for k in WorkloadKind::ALL {
            assert_eq!(WorkloadKind::from_kind(k.as_str()), Some(k));
            assert!(k.allowed_strategies().contains(&k.default_strategy()));
        }
        assert_eq!(WorkloadKind::from_kind("Deployment"), None);
    }
}

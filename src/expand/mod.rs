//! The expansion engine: a Pinterest resource in, the native objects one member cluster
//! runs out, with the platform's runtime support injected. Pure — no client, no I/O, no
//! clock — so the agent, `pinfed expand` and `pinfed plan` (sizing) agree exactly.
//!
//! One file per kind; `runtime` injects a RuntimeProfile into pod templates; `names` makes
//! valid, deterministic names. Every generated object carries the labels
//! `app.kubernetes.io/managed-by=pinfed`, `pinterest.com/workload`, `pinterest.com/kind`,
//! `pinterest.com/team`, `pinterest.com/owner`, the annotations `pinterest.com/contact` and
//! `pinterest.com/spec-hash`, and an owner reference to the workload when it has a uid.

use crate::overrides;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DynamicObject, TypeMeta};
use kube::core::Resource;
use serde::Serialize;

use crate::api::common::*;
use crate::api::ranges::RangeSet;
use crate::api::runtime_profile::RuntimeProfile;
use crate::api::validate::{self, Invalid};
use crate::api::workload::{COMPUTE_API_VERSION, WorkloadKind, WorkloadRef};

mod budget;
pub mod bundle;
pub(crate) mod cronjob;
pub(crate) mod daemon;
pub(crate) mod hash;
pub mod jobset;
pub mod names;
pub mod runtime;
pub(crate) mod service;
pub(crate) mod statefulset;
pub(crate) mod training;

#[cfg(test)]
mod tests;

pub use jobset::{admit_shards, pending_shards};
pub use runtime::{
    ProfileError, builtin_profile, expires_at, is_snapshot, pin_of, profile_digest, select_profile,
    snapshot_of,
};

/// What to expand.
#[derive(Clone, Copy, Debug)]
pub struct ExpandInput<'a> {
    /// The Pinterest resource (in a member: the hub's slice of it).
    pub workload: WorkloadRef<'a>,
    /// The runtime profile to inject; `None` means the built-in default profile. Choose it
    /// with [`select_profile`].
    pub profile: Option<&'a RuntimeProfile>,
    /// The member cluster the objects are for (identity env vars, default ingress host).
    pub cluster: Option<&'a str>,
    /// JobSets only: the shards that may have Jobs now (from [`admit_shards`]). `None`
    /// means every pending shard (assigned and not completed).
    pub admitted_shards: Option<&'a RangeSet>,
}

impl<'a> ExpandInput<'a> {
    pub fn new(workload: impl Into<WorkloadRef<'a>>) -> ExpandInput<'a> {
        ExpandInput {
            workload: workload.into(),
            profile: None,
            cluster: None,
            admitted_shards: None,
        }
    }
}

/// Why a resource could not be expanded. Both are permanent: wait for a change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    /// The resource itself is invalid.
    #[error("invalid {kind} {name:?}: {invalid}")]
    Invalid {
        kind: WorkloadKind,
        name: String,
        invalid: Invalid,
    },
    /// The runtime profile is invalid or conflicts with the resource (e.g. a container
    /// name the profile reserves).
    #[error("runtime profile {profile:?} cannot be injected into {kind} {name:?}: {invalid}")]
    Runtime {
        kind: WorkloadKind,
        name: String,
        profile: String,
        invalid: Invalid,
    },
}

impl ExpandError {
    /// Short CamelCase reason for conditions, Events and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            ExpandError::Invalid { .. } => "InvalidSpec",
            ExpandError::Runtime { .. } => "RuntimeConflict",
        }
    }

    /// The field errors.
    pub fn invalid(&self) -> &Invalid {
        match self {
            ExpandError::Invalid { invalid, .. } | ExpandError::Runtime { invalid, .. } => invalid,
        }
    }
}

/// Expands one resource into native objects, in apply order (config and claims first, then
/// Services, workloads, Ingress, PDB; JobSet shards ascending). Deterministic: the same
/// input always gives byte-identical output.
pub fn expand(input: &ExpandInput<'_>) -> Result<Vec<DynamicObject>, ExpandError> {
    let w = input.workload;
    let invalid = |invalid: Invalid| ExpandError::Invalid {
        kind: w.kind(),
        name: w.name().to_string(),
        invalid,
    };
    validate::workload(w).map_err(invalid)?;
    let profile = input.profile.unwrap_or_else(|| builtin_profile());
    // The built-in profile is checked by a unit test; published ones on every use.
    let checked = if std::ptr::eq(profile, builtin_profile()) {
        Ok(())
    } else {
        validate::runtime_profile(profile)
    };
    checked.map_err(|invalid| ExpandError::Runtime {
        kind: w.kind(),
        name: w.name().to_string(),
        profile: profile.metadata.name.clone().unwrap_or_default(),
        invalid,
    })?;
    let ctx = Ctx::new(input, profile);
    let mut out = Out::default();
    w.build(&ctx, &mut out).map_err(|e| match e {
        BuildError::Spec(i) => invalid(i),
        BuildError::Runtime(i) => ExpandError::Runtime {
            kind: w.kind(),
            name: w.name().to_string(),
            profile: profile.metadata.name.clone().unwrap_or_default(),
            invalid: i,
        },
    })?;
    let mut objects = out.objects;
    // Per-member overrides, after runtime injection: the member's objects are what the
    // rules its slice carries say (the member's pod policy judges the result).
    if input.cluster.is_some() && !w.overrides().is_empty() {
        let app = overrides::application_containers(&w.spec_value());
        let applied =
            overrides::apply(w.overrides(), input.cluster, &app, &mut objects).map_err(invalid)?;
        if !applied.rules.is_empty() {
            let mut buf = Vec::new();
            for o in &mut objects {
                rehash(o, &mut buf);
            }
        }
    }
    Ok(objects)
}

/// Stamps the spec hash again over an object an override changed (the hash covers the
/// object as applied).
fn rehash(o: &mut DynamicObject, buf: &mut Vec<u8>) {
    if let Some(a) = o.metadata.annotations.as_mut() {
        a.remove(ANNOTATION_SPEC_HASH);
    }
    let hash = hash::spec_hash(&*o, buf);
    o.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION_SPEC_HASH.to_string(), hash);
}

/// The kinds of native objects the engine generates, for watching and label-based pruning.
pub fn generated_api_resources() -> Vec<ApiResource> {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
    use k8s_openapi::api::batch::v1::{CronJob, Job};
    use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Service};
    use k8s_openapi::api::networking::v1::Ingress;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    vec![
        ApiResource::erase::<ConfigMap>(&()),
        ApiResource::erase::<PersistentVolumeClaim>(&()),
        ApiResource::erase::<Service>(&()),
        ApiResource::erase::<Deployment>(&()),
        ApiResource::erase::<StatefulSet>(&()),
        ApiResource::erase::<DaemonSet>(&()),
        ApiResource::erase::<Job>(&()),
        ApiResource::erase::<CronJob>(&()),
        ApiResource::erase::<Ingress>(&()),
        ApiResource::erase::<PodDisruptionBudget>(&()),
    ]
}

/// Label selector (`key=value,...`) matching every object generated for one workload.
pub fn workload_selector(kind: WorkloadKind, workload_name: &str) -> String {
    format!(
        "{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_KIND}={},{LABEL_WORKLOAD}={}",
        kind.as_str(),
        names::label_value(workload_name)
    )
}

/// Failure inside a kind builder: the spec or the profile is at fault.
pub enum BuildError {
    Spec(Invalid),
    Runtime(Invalid),
}

/// Shared per-expansion facts, what a kind's builder ([`PinterestKind::expand`]) reads.
///
/// [`PinterestKind::expand`]: crate::api::kind::PinterestKind::expand
pub struct Ctx<'a> {
    pub kind: WorkloadKind,
    pub name: &'a str,
    pub namespace: Option<&'a str>,
    pub cluster: Option<&'a str>,
    pub profile: &'a RuntimeProfile,
    pub owner: &'a Owner,
    /// Labels on every object.
    pub labels: BTreeMap<String, String>,
    /// Stable labels selecting the workload's pods.
    pub selector: BTreeMap<String, String>,
    /// Annotations on every object.
    pub annotations: BTreeMap<String, String>,
    pub owner_refs: Option<Vec<OwnerReference>>,
    pub workload_meta: &'a ObjectMeta,
    /// `spec.priorityClassName`, set on every pod (the agent clears it in a member that
    /// has no such class).
    pub priority_class: Option<&'a str>,
    /// Job sets: the shards the agent admitted (`None`: every pending one).
    pub admitted_shards: Option<&'a RangeSet>,
}

impl<'a> Ctx<'a> {
    fn new(input: &ExpandInput<'a>, profile: &'a RuntimeProfile) -> Ctx<'a> {
        let w = input.workload;
        let kind = w.kind();
        let name = w.name();
        let owner = w.owner();
        let team = names::label_value(&owner.team);
        let selector: BTreeMap<String, String> = [
            (LABEL_WORKLOAD, names::label_value(name)),
            (LABEL_KIND, kind.as_str().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut labels = selector.clone();
        labels.insert(LABEL_MANAGED_BY.into(), MANAGED_BY.into());
        labels.insert(LABEL_TEAM.into(), team.clone());
        labels.insert(LABEL_OWNER.into(), team);
        let mut annotations = BTreeMap::new();
        annotations.insert(ANNOTATION_CONTACT.to_string(), owner.contact.clone());
        annotations.insert(
            ANNOTATION_RUNTIME_VERSION.to_string(),
            profile.spec.version.clone(),
        );
        let meta = w.metadata();
        let owner_refs = meta.uid.as_ref().map(|uid| {
            vec![OwnerReference {
                api_version: COMPUTE_API_VERSION.to_string(),
                kind: kind.as_str().to_string(),
                name: name.to_string(),
                uid: uid.clone(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]
        });
        Ctx {
            kind,
            name,
            namespace: w.namespace(),
            cluster: input.cluster,
            profile,
            owner,
            labels,
            selector,
            annotations,
            owner_refs,
            workload_meta: meta,
            priority_class: w.priority_class_name(),
            admitted_shards: input.admitted_shards,
        }
    }

    /// The selector of a generated controller: this workload's pods, by [`Ctx::selector`].
    pub fn label_selector(&self) -> LabelSelector {
        LabelSelector {
            match_labels: Some(self.selector.clone()),
            match_expressions: None,
        }
    }

    /// Metadata of a generated object: common labels plus `extra`, common annotations.
    pub fn meta(&self, name: String, extra: &[(&str, String)]) -> ObjectMeta {
        let mut labels = self.labels.clone();
        for (k, v) in extra {
            labels.insert(k.to_string(), v.clone());
        }
        ObjectMeta {
            name: Some(name),
            namespace: self.namespace.map(str::to_string),
            labels: Some(labels),
            annotations: Some(self.annotations.clone()),
            owner_references: self.owner_refs.clone(),
            ..Default::default()
        }
    }

    /// Starts a pod template from the user's: our labels (common plus `extra`) win over the
    /// user's, the user's annotations are kept, and `restartPolicy` gets `default_restart`
    /// when unset.
    pub fn pod_template(
        &self,
        user: &PodTemplateSpec,
        extra: &[(&str, String)],
        default_restart: Option<&str>,
    ) -> PodTemplateSpec {
        let mut t = user.clone();
        let meta = t.metadata.get_or_insert_with(Default::default);
        let labels = meta.labels.get_or_insert_with(Default::default);
        for (k, v) in &self.labels {
            labels.insert(k.clone(), v.clone());
        }
        for (k, v) in extra {
            labels.insert(k.to_string(), v.clone());
        }
        let annotations = meta.annotations.get_or_insert_with(Default::default);
        for (k, v) in &self.annotations {
            annotations.insert(k.clone(), v.clone());
        }
        // Pod templates never carry a name or namespace of their own.
        meta.name = None;
        meta.namespace = None;
        if let (Some(spec), Some(r)) = (t.spec.as_mut(), default_restart)
            && spec.restart_policy.is_none()
        {
            spec.restart_policy = Some(r.to_string());
        }
        if let (Some(spec), Some(class)) = (t.spec.as_mut(), self.priority_class) {
            spec.priority_class_name = Some(class.to_string());
        }
        t
    }
}

/// Collected objects.
#[derive(Default)]
pub struct Out {
    pub objects: Vec<DynamicObject>,
    /// Scratch space for spec hashes, reused across objects.
    hash_buf: Vec<u8>,
}

impl Out {
    /// Adds a typed object, stamping the spec-hash annotation.
    pub fn push<K>(&mut self, obj: K)
    where
        K: Resource<DynamicType = ()> + Serialize,
    {
        let obj = to_dynamic(obj, &mut self.hash_buf);
        self.objects.push(obj);
    }
}

/// Converts a typed object into a DynamicObject with a `pinterest.com/spec-hash`
/// annotation over its whole typed content — apiVersion, kind, metadata and the rest —
/// computed before the annotation is added (see [`hash`]).
fn to_dynamic<K>(mut obj: K, hash_buf: &mut Vec<u8>) -> DynamicObject
where
    K: Resource<DynamicType = ()> + Serialize,
{
    let hash = hash::spec_hash(&obj, hash_buf);
    // Metadata stays typed; only the rest becomes JSON.
    let mut metadata = std::mem::take(obj.meta_mut());
    // k8s-openapi types always serialize: their maps have string keys.
    let mut value = serde_json::to_value(&obj).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
        map.remove("metadata");
    }
    metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION_SPEC_HASH.to_string(), hash);
    DynamicObject {
        types: Some(TypeMeta {
            api_version: K::api_version(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
        }),
        metadata,
        data: value,
    }
}

/// Renders objects as a multi-document YAML stream (`---` before each), the output of
/// `pinfed expand`.
pub fn to_yaml_stream(objects: &[DynamicObject]) -> String {
    let mut s = String::new();
    for o in objects {
        s.push_str("---\n");
        // DynamicObject is plain JSON data; YAML serialization cannot fail.
        s.push_str(&crate::api::yaml::to_string(o).unwrap_or_default());
    }
    s
}

//! Materializes the hub's config bundles (`expand::bundle`) next to the workloads that
//! reference them. Each slice applies its copies with a field manager of its own, so each
//! holds exactly its owner reference: a copy goes when the last slice that uses it is
//! deleted (garbage collector) or stops using it (released here). The agent reads no
//! Secret outside the drop namespace: copies are written, never listed.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};

use futures::StreamExt;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};

use crate::api::workload::WorkloadKind;
use crate::controller::watch;
use crate::expand::bundle::{
    self, ANNOTATION_SOURCE, ConfigKind, ConfigRef, ConfigSource, ConfigUsers, DROP_NAMESPACE,
    LABEL_BUNDLE, LABEL_PROPAGATED,
};

/// A slice, as the bundle index knows it.
pub type SliceKey = (WorkloadKind, String, String);

/// Which slices reference which bundle (by the hub object it copies), and the reconciles
/// a change to a bundle sends them: the hub updates a bundle when its source changes, and
/// the copies follow within seconds instead of at the next resync.
pub struct BundleUsers {
    users: Mutex<ConfigUsers<SliceKey>>,
    triggers: tokio::sync::broadcast::Sender<SliceKey>,
}

impl Default for BundleUsers {
    fn default() -> Self {
        BundleUsers {
            users: Default::default(),
            triggers: tokio::sync::broadcast::channel(4096).0,
        }
    }
}

impl BundleUsers {
    fn record(&self, slice: SliceKey, wanted: &BTreeSet<ConfigRef>) {
        let sources = wanted
            .iter()
            .map(|r| ConfigSource::of(&slice.1, r))
            .collect();
        if let Ok(mut u) = self.users.lock() {
            u.set(slice, sources);
        }
    }

    pub fn forget(&self, kind: WorkloadKind, ns: &str, name: &str) {
        if let Ok(mut u) = self.users.lock() {
            u.forget(&(kind, ns.to_string(), name.to_string()));
        }
    }

    /// `(namespace, name)` of the slices of `kind` whose bundles changed.
    pub fn triggers(
        &self,
        kind: WorkloadKind,
    ) -> impl futures::Stream<Item = (String, String)> + Send + 'static {
        watch::broadcast_stream(self.triggers.subscribe()).filter_map(move |(k, ns, name)| {
            futures::future::ready((k == kind).then_some((ns, name)))
        })
    }

    fn saw<K: Resource>(&self, kind: ConfigKind, ev: watcher::Event<PartialObjectMeta<K>>) {
        let (m, version, relisted) = match ev {
            watcher::Event::Apply(m) => {
                let v = m.resource_version();
                (m, v, false)
            }
            watcher::Event::InitApply(m) => {
                let v = m.resource_version();
                (m, v, true)
            }
            watcher::Event::Delete(m) => (m, None, false),
            watcher::Event::Init | watcher::Event::InitDone => return,
        };
        let Some(source) = m
            .annotations()
            .get(ANNOTATION_SOURCE)
            .and_then(|s| ConfigSource::of_annotation(kind, s))
        else {
            return;
        };
        let users = match self.users.lock() {
            Ok(mut u) => u.saw(&source, version.as_deref(), relisted),
            Err(_) => return,
        };
        for slice in users {
            let _ = self.triggers.send(slice);
        }
    }
}

/// Watches the bundles in the drop namespace (metadata only) until the term ends, and
/// reconciles the slices that use one that changed.
pub async fn follow(client: &Client, users: &BundleUsers) {
    let config = watcher::Config::default()
        .labels(&format!("{LABEL_BUNDLE}=true"))
        .any_semantic();
    let config_maps = watch::skip_errors(
        "bundles (ConfigMaps)".into(),
        watcher(
            Api::<PartialObjectMeta<ConfigMap>>::namespaced(client.clone(), DROP_NAMESPACE),
            config.clone(),
        )
        .backoff(watch::backoff()),
    )
    .for_each(|ev| {
        if let Ok(ev) = ev {
            users.saw(ConfigKind::ConfigMap, ev);
        }
        futures::future::ready(())
    });
    let secrets = watch::skip_errors(
        "bundles (Secrets)".into(),
        watcher(
            Api::<PartialObjectMeta<Secret>>::namespaced(client.clone(), DROP_NAMESPACE),
            config,
        )
        .backoff(watch::backoff()),
    )
    .for_each(|ev| {
        if let Ok(ev) = ev {
            users.saw(ConfigKind::Secret, ev);
        }
        futures::future::ready(())
    });
    tokio::join!(config_maps, secrets);
}

/// Per slice uid: the copies it holds a claim on (this process's knowledge; after a
/// restart, a copy a slice stopped using while the agent was down goes with the slice).
#[derive(Default)]
pub struct Claims(Mutex<HashMap<String, BTreeSet<ConfigRef>>>);

impl Claims {
    fn get(&self, uid: &str) -> BTreeSet<ConfigRef> {
        self.0
            .lock()
            .ok()
            .and_then(|m| m.get(uid).cloned())
            .unwrap_or_default()
    }

    fn set(&self, uid: &str, refs: BTreeSet<ConfigRef>) {
        if let Ok(mut m) = self.0.lock() {
            if refs.is_empty() {
                m.remove(uid);
            } else {
                m.insert(uid.to_string(), refs);
            }
        }
    }

    pub fn forget(&self, uid: &str) {
        self.set(uid, BTreeSet::new());
    }
}

#[derive(Debug, thiserror::Error)]
#[error("materializing {kind} {name}: {source}")]
pub struct MaterializeError {
    pub kind: &'static str,
    pub name: String,
    #[source]
    pub source: kube::Error,
}

fn manager(uid: &str) -> String {
    format!("pinfed-agent-{uid}")
}

fn resource(kind: ConfigKind) -> kube::core::ApiResource {
    match kind {
        ConfigKind::ConfigMap => kube::core::ApiResource::erase::<ConfigMap>(&()),
        ConfigKind::Secret => kube::core::ApiResource::erase::<Secret>(&()),
    }
}

/// What [`materialize`] did.
#[derive(Debug, Default)]
pub struct Materialized {
    /// References whose bundle is not in the drop namespace yet (the hub writes bundles
    /// before slices; pods wait for them as they would anywhere).
    pub missing: Vec<ConfigRef>,
    /// A ConfigMap or Secret of a referenced name that someone else made: nothing was
    /// written (the message says what and how to hand it over).
    pub clash: Option<String>,
}

/// Brings the copies of what `obj` references up to date and releases those it no
/// longer references. A copy never replaces an object pinfed did not make: every copy
/// not yet claimed is checked first, and one clash writes nothing.
pub async fn materialize<K>(
    client: &Client,
    claims: &Claims,
    users: &BundleUsers,
    kind: WorkloadKind,
    obj: &K,
) -> Result<Materialized, MaterializeError>
where
    K: Resource<DynamicType = ()> + serde::Serialize,
{
    let uid = obj.uid().unwrap_or_default();
    let wanted = serde_json::to_value(obj)
        .map(|v| bundle::workload_config(&v))
        .unwrap_or_default();
    // Wanted, not only found: a bundle that arrives later brings the slice back too.
    users.record(
        (kind, obj.namespace().unwrap_or_default(), obj.name_any()),
        &wanted,
    );
    let held = claims.get(&uid);
    let mut done = Materialized::default();
    if wanted.is_empty() && held.is_empty() {
        return Ok(done);
    }
    let ns = obj.namespace().unwrap_or_default();
    let workload = format!("{}/{}", kind.as_str(), obj.name_any());
    let owner = OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: obj.name_any(),
        uid: uid.clone(),
        ..OwnerReference::default()
    };
    let params = PatchParams::apply(&manager(&uid)).force();
    let mut copies = Vec::new();
    for r in &wanted {
        let ar = resource(r.kind);
        let err = |source| MaterializeError {
            kind: r.kind.as_str(),
            name: r.name.clone(),
            source,
        };
        let drop: Api<DynamicObject> = Api::namespaced_with(client.clone(), DROP_NAMESPACE, &ar);
        let Some(b) = drop
            .get_opt(&bundle::bundle_name(&ns, &r.name))
            .await
            .map_err(err)?
        else {
            done.missing.push(r.clone());
            continue;
        };
        let target: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
        let b = serde_json::to_value(&b).unwrap_or_default();
        let copy = bundle::materialize(r.kind, &b, &ns, &r.name, &owner);
        if !held.contains(r) {
            // The agent may not read Secrets outside the drop namespace; a dry run of the
            // apply shows what is there: fields someone other than pinfed manages mean
            // the object is not a copy of ours.
            let probe = target
                .patch(&r.name, &params.clone().dry_run(), &Patch::Apply(&copy))
                .await
                .map_err(err)?;
            let foreign = probe.metadata.managed_fields.iter().flatten().any(|m| {
                !m.manager
                    .as_deref()
                    .is_some_and(|n| n.starts_with("pinfed"))
            });
            let handed_over = probe
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::api::member_policy::ADOPT_ANNOTATION))
                .is_some_and(|a| *a == workload);
            if foreign && !handed_over {
                done.clash = Some(format!(
                    "{kind} {name} in namespace {ns} was not made by pinfed: the copy of the hub's {kind} {name} \
                     that {workload} references does not replace it (nothing was written). Rename one of them, or \
                     let a member admin hand it over: `pinfed adopt {kind}/{name} -n {ns} --to {workload}`",
                    kind = r.kind.as_str(),
                    name = r.name,
                ));
                return Ok(done);
            }
        }
        copies.push((r, target, copy));
    }
    let mut claimed = BTreeSet::new();
    for (r, target, copy) in copies {
        target
            .patch(&r.name, &params, &Patch::Apply(&copy))
            .await
            .map_err(|source| MaterializeError {
                kind: r.kind.as_str(),
                name: r.name.clone(),
                source,
            })?;
        claimed.insert(r.clone());
    }
    for r in held.difference(&wanted) {
        release(client, &ns, r, &uid).await?;
    }
    claims.set(&uid, claimed);
    if !done.missing.is_empty() {
        let names: Vec<String> = done
            .missing
            .iter()
            .map(|r| format!("{} {}", r.kind.as_str(), r.name))
            .collect();
        tracing::debug!(namespace = %ns, workload = %obj.name_any(), missing = ?names, "referenced config not in the drop namespace yet");
    }
    Ok(done)
}

/// Gives up this slice's claim on a copy; deletes the copy when no slice holds one (on
/// the version just seen, so a claim made meanwhile by another slice keeps it).
async fn release(
    client: &Client,
    ns: &str,
    r: &ConfigRef,
    owner_uid: &str,
) -> Result<(), MaterializeError> {
    let ar = resource(r.kind);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let err = |source| MaterializeError {
        kind: r.kind.as_str(),
        name: r.name.clone(),
        source,
    };
    let left = match api
        .patch(
            &r.name,
            &PatchParams::default(),
            &Patch::Strategic(bundle::release_patch(owner_uid)),
        )
        .await
    {
        Ok(o) => o,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(err(e)),
    };
    let ours = left.labels().get(LABEL_PROPAGATED).map(String::as_str) == Some("true");
    if ours && left.owner_references().is_empty() {
        let params = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                resource_version: left.resource_version(),
                uid: left.uid(),
            }),
            ..DeleteParams::background()
        };
        match api.delete(&r.name, &params).await {
            Ok(_) => {}
            // Gone, or claimed again since: either way not ours to delete now.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(err(e)),
        }
    }
    Ok(())
}

//! Config bundles: how the ConfigMaps and Secrets a workload references reach a member
//! without the hub holding a right to write Secrets where a privileged ServiceAccount
//! lives. The hub writes a copy (a *bundle*) into one drop namespace of the member, where
//! no ServiceAccount has rights; the member's agent materializes it in the workload's
//! namespace under its original name, owned by the slices that reference it, and the
//! garbage collector removes it with the last of them. Pure: builders and names only.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::{Value, json};

use super::names::{label_value, short_hash};

/// The member namespace the hub drops bundles into. Nothing runs there.
pub const DROP_NAMESPACE: &str = "pinfed-drop";
/// Marks a bundle in the drop namespace.
pub const LABEL_BUNDLE: &str = "federation.pinterest.com/bundle";
/// The namespace a bundle is for (a label, so the agent can select by it).
pub const LABEL_SOURCE_NAMESPACE: &str = "federation.pinterest.com/source-namespace";
/// `namespace/name` of the hub object a bundle copies (names may exceed label values).
pub const ANNOTATION_SOURCE: &str = "federation.pinterest.com/source";
/// Marks a materialized copy in a workload namespace.
pub const LABEL_PROPAGATED: &str = "federation.pinterest.com/propagated";
/// Marks pinfed's own credentials on the hub (member kubeconfig Secrets): never copied.
pub const LABEL_CREDENTIAL: &str = "federation.pinterest.com/member";

/// The two kinds a pod template can reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigKind {
    ConfigMap,
    Secret,
}

impl ConfigKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigKind::ConfigMap => "ConfigMap",
            ConfigKind::Secret => "Secret",
        }
    }
}

/// A referenced ConfigMap or Secret (in the workload's own namespace).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConfigRef {
    pub kind: ConfigKind,
    pub name: String,
}

/// Why a hub object is not bundled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotBundled {
    #[error("Secret {0} is a ServiceAccount token")]
    ServiceAccountToken(String),
    #[error("Secret {0} is one of pinfed's credentials")]
    Credential(String),
    #[error("{0} is in a reserved namespace")]
    ReservedNamespace(String),
    #[error("object has no name or namespace")]
    Unnamed,
}

/// The ConfigMaps and Secrets a pod spec references: volumes (also projected), env,
/// envFrom (containers and init containers) and imagePullSecrets.
pub fn referenced_config(spec: &PodSpec) -> BTreeSet<ConfigRef> {
    let mut out = BTreeSet::new();
    let mut add = |kind, name: &str| {
        if !name.is_empty() {
            out.insert(ConfigRef {
                kind,
                name: name.to_string(),
            });
        }
    };
    for v in spec.volumes.iter().flatten() {
        if let Some(c) = &v.config_map {
            add(ConfigKind::ConfigMap, &c.name);
        }
        if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) {
            add(ConfigKind::Secret, s);
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(c) = &src.config_map {
                add(ConfigKind::ConfigMap, &c.name);
            }
            if let Some(s) = &src.secret {
                add(ConfigKind::Secret, &s.name);
            }
        }
    }
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        for e in c.env_from.iter().flatten() {
            if let Some(r) = &e.config_map_ref {
                add(ConfigKind::ConfigMap, &r.name);
            }
            if let Some(r) = &e.secret_ref {
                add(ConfigKind::Secret, &r.name);
            }
        }
        for e in c.env.iter().flatten() {
            let from = e.value_from.as_ref();
            if let Some(r) = from.and_then(|v| v.config_map_key_ref.as_ref()) {
                add(ConfigKind::ConfigMap, &r.name);
            }
            if let Some(r) = from.and_then(|v| v.secret_key_ref.as_ref()) {
                add(ConfigKind::Secret, &r.name);
            }
        }
    }
    for s in spec.image_pull_secrets.iter().flatten() {
        add(ConfigKind::Secret, &s.name);
    }
    out
}

/// Every pod spec in a workload's `spec`, wherever the kind keeps it (`template.spec`,
/// a training job's roles, a cron job's job template): any object with `containers`.
pub fn pod_specs(workload_spec: &Value) -> Vec<PodSpec> {
    fn walk(v: &Value, depth: usize, out: &mut Vec<PodSpec>) {
        // Pod specs sit a few levels down; the bound keeps a hostile document cheap.
        if depth > 8 {
            return;
        }
        match v {
            Value::Object(m) => {
                if m.get("containers").is_some_and(Value::is_array) {
                    if let Ok(spec) = serde_json::from_value::<PodSpec>(v.clone()) {
                        out.push(spec);
                    }
                    return;
                }
                for child in m.values() {
                    walk(child, depth + 1, out);
                }
            }
            Value::Array(items) => {
                for child in items {
                    walk(child, depth + 1, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(workload_spec, 0, &mut out);
    out
}

/// Everything a workload (as JSON) references, over all its pod specs.
pub fn workload_config(workload: &Value) -> BTreeSet<ConfigRef> {
    pod_specs(&workload["spec"])
        .iter()
        .flat_map(referenced_config)
        .collect()
}

/// A ConfigMap or Secret of a namespace, as a change to it is seen.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConfigSource {
    pub namespace: String,
    pub kind: ConfigKind,
    pub name: String,
}

impl ConfigSource {
    pub fn of(namespace: &str, r: &ConfigRef) -> ConfigSource {
        ConfigSource {
            namespace: namespace.to_string(),
            kind: r.kind,
            name: r.name.clone(),
        }
    }

    /// Where a bundle in the drop namespace came from: its `ANNOTATION_SOURCE` value.
    pub fn of_annotation(kind: ConfigKind, source: &str) -> Option<ConfigSource> {
        let (namespace, name) = source.split_once('/')?;
        Some(ConfigSource {
            namespace: namespace.to_string(),
            kind,
            name: name.to_string(),
        })
    }
}

/// Who references which ConfigMap or Secret, kept both ways, so a change to one reaches
/// exactly the workloads (on the hub) or slices (in a member) that use it.
#[derive(Debug)]
pub struct ConfigUsers<U> {
    by_source: BTreeMap<ConfigSource, BTreeSet<U>>,
    by_user: BTreeMap<U, BTreeSet<ConfigSource>>,
    /// Resource version last seen per used source: a relist after a broken watch brings
    /// only what changed meanwhile.
    versions: BTreeMap<ConfigSource, String>,
}

impl<U> Default for ConfigUsers<U> {
    fn default() -> Self {
        ConfigUsers {
            by_source: BTreeMap::new(),
            by_user: BTreeMap::new(),
            versions: BTreeMap::new(),
        }
    }
}

impl<U: Ord + Clone> ConfigUsers<U> {
    /// Records what `user` references now. Returns the sources nobody used before and
    /// those nobody uses any more (to start and stop following them).
    pub fn set(
        &mut self,
        user: U,
        sources: BTreeSet<ConfigSource>,
    ) -> (Vec<ConfigSource>, Vec<ConfigSource>) {
        let old = self.by_user.remove(&user).unwrap_or_default();
        let mut unused = Vec::new();
        for s in old.difference(&sources) {
            if let Some(users) = self.by_source.get_mut(s) {
                users.remove(&user);
                if users.is_empty() {
                    self.by_source.remove(s);
                    self.versions.remove(s);
                    unused.push(s.clone());
                }
            }
        }
        let mut new = Vec::new();
        for s in sources.difference(&old) {
            let users = self.by_source.entry(s.clone()).or_default();
            if users.is_empty() {
                new.push(s.clone());
            }
            users.insert(user.clone());
        }
        if !sources.is_empty() {
            self.by_user.insert(user, sources);
        }
        (new, unused)
    }

    /// Forgets `user` (deleted); returns the sources nobody uses any more.
    pub fn forget(&mut self, user: &U) -> Vec<ConfigSource> {
        self.set(user.clone(), BTreeSet::new()).1
    }

    /// Who uses `source`.
    pub fn users(&self, source: &ConfigSource) -> Vec<U> {
        self.by_source
            .get(source)
            .map(|u| u.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn is_used(&self, source: &ConfigSource) -> bool {
        self.by_source.contains_key(source)
    }

    /// A watch saw `source` at `version` (`None`: deleted); `relisted` for the objects of
    /// a (re)list. Returns who to reconcile: the users of a change, and after a relist
    /// only those of a source whose version differs from the one last seen (a term's
    /// first list is no change: each user's own reconcile reads the source).
    pub fn saw(&mut self, source: &ConfigSource, version: Option<&str>, relisted: bool) -> Vec<U> {
        if !self.is_used(source) {
            return Vec::new();
        }
        let before = match version {
            Some(v) => self.versions.insert(source.clone(), v.to_string()),
            None => self.versions.remove(source),
        };
        let changed = !relisted || before.is_some_and(|b| Some(b.as_str()) != version);
        if changed {
            self.users(source)
        } else {
            Vec::new()
        }
    }
}

/// The name of the bundle of `namespace/name` in the drop namespace: `namespace.name`,
/// shortened with a hash when that exceeds a Kubernetes object name (253).
pub fn bundle_name(namespace: &str, name: &str) -> String {
    let full = format!("{namespace}.{name}");
    if full.len() <= 253 {
        return full;
    }
    let hash = short_hash(&full);
    // namespace ≤ 63, so the name keeps at least 180 characters.
    let keep = 253 - namespace.len() - 2 - hash.len();
    let head: String = name.chars().take(keep).collect();
    format!("{namespace}.{}-{hash}", head.trim_end_matches(['.', '-']))
}

fn reserved(ns: &str) -> bool {
    crate::api::validate::is_reserved_namespace(ns)
}

/// The bundle of a hub ConfigMap or Secret (as JSON) for the drop namespace: its data
/// and type only, labelled with where it came from. ServiceAccount tokens, pinfed's
/// credentials and anything in a reserved namespace are refused.
pub fn bundle(kind: ConfigKind, source: &Value) -> Result<Value, NotBundled> {
    let meta = &source["metadata"];
    let (Some(ns), Some(name)) = (meta["namespace"].as_str(), meta["name"].as_str()) else {
        return Err(NotBundled::Unnamed);
    };
    let key = format!("{ns}/{name}");
    if reserved(ns) {
        return Err(NotBundled::ReservedNamespace(key));
    }
    if kind == ConfigKind::Secret {
        if source["type"] == "kubernetes.io/service-account-token" {
            return Err(NotBundled::ServiceAccountToken(key));
        }
        if meta["labels"].get(LABEL_CREDENTIAL).is_some() {
            return Err(NotBundled::Credential(key));
        }
    }
    let mut out = json!({
        "apiVersion": "v1",
        "kind": kind.as_str(),
        "metadata": {
            "name": bundle_name(ns, name),
            "namespace": DROP_NAMESPACE,
            "labels": {LABEL_BUNDLE: "true", LABEL_SOURCE_NAMESPACE: label_value(ns)},
            "annotations": {ANNOTATION_SOURCE: key},
        },
    });
    for field in ["data", "binaryData", "type", "immutable"] {
        if let Some(v) = source.get(field).filter(|v| !v.is_null()) {
            out[field] = v.clone();
        }
    }
    // A bundle never sets `immutable`: the hub must be able to update it.
    if let Some(o) = out.as_object_mut() {
        o.remove("immutable");
    }
    Ok(out)
}

/// The clusters a hub workload (as JSON) is on: its placement, and any cluster that still
/// reports a slice (a share moving away keeps its bundles until it is gone).
pub fn placed_clusters(workload: &Value) -> BTreeSet<String> {
    let status = &workload["status"];
    status["placement"]["placements"]
        .as_array()
        .into_iter()
        .chain(status["clusters"].as_array())
        .flatten()
        .filter_map(|p| p["cluster"].as_str().map(str::to_string))
        .collect()
}

/// The bundles each member needs: `(member, kind) → bundle names`, for every workload
/// placed there and every ConfigMap or Secret it references.
pub fn wanted_bundles(workloads: &[Value]) -> BTreeSet<(String, ConfigKind, String)> {
    let mut out = BTreeSet::new();
    for w in workloads {
        add_wanted(&mut out, w);
    }
    out
}

/// Adds the bundles one workload wants, as [`wanted_bundles`].
pub fn add_wanted(out: &mut BTreeSet<(String, ConfigKind, String)>, w: &Value) {
    let Some(ns) = w["metadata"]["namespace"].as_str() else {
        return;
    };
    let refs = workload_config(w);
    if refs.is_empty() {
        return;
    }
    for member in placed_clusters(w) {
        for r in &refs {
            out.insert((member.clone(), r.kind, bundle_name(ns, &r.name)));
        }
    }
}

/// Bundles nobody wants are removed on the second sweep that finds them unwanted: a
/// workload placed between the hub's read of the workloads and its list of bundles must
/// not lose the bundle it was just given.
#[derive(Debug, Default)]
pub struct BundleSweep {
    suspects: BTreeSet<(String, ConfigKind, String)>,
}

impl BundleSweep {
    /// Given what is dropped in `member` now and what is wanted, the bundles to remove now.
    pub fn sweep(
        &mut self,
        member: &str,
        dropped: &[(ConfigKind, String)],
        wanted: &BTreeSet<(String, ConfigKind, String)>,
    ) -> Vec<(ConfigKind, String)> {
        let mut remove = Vec::new();
        let mut suspects = BTreeSet::new();
        for (kind, name) in dropped {
            let key = (member.to_string(), *kind, name.clone());
            if wanted.contains(&key) {
                continue;
            }
            if self.suspects.contains(&key) {
                remove.push((*kind, name.clone()));
            } else {
                suspects.insert(key);
            }
        }
        self.suspects.retain(|(m, _, _)| m != member);
        self.suspects.extend(suspects);
        remove
    }

    /// Forgets a member (it left).
    pub fn forget_others(&mut self, members: &BTreeSet<String>) {
        self.suspects.retain(|(m, _, _)| members.contains(m));
    }
}

/// The copy of a bundle in the workload's namespace, under the name the pod template
/// uses, owned by `owner` (a slice). Applied with one field manager per owner, so each
/// slice holds its own owner reference and the copy goes with the last of them.
pub fn materialize(
    kind: ConfigKind,
    bundle: &Value,
    namespace: &str,
    name: &str,
    owner: &OwnerReference,
) -> Value {
    let mut out = json!({
        "apiVersion": "v1",
        "kind": kind.as_str(),
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL_PROPAGATED: "true"},
            "annotations": {ANNOTATION_SOURCE: bundle["metadata"]["annotations"][ANNOTATION_SOURCE].clone()},
            "ownerReferences": [owner],
        },
    });
    for field in ["data", "binaryData", "type"] {
        if let Some(v) = bundle.get(field).filter(|v| !v.is_null()) {
            out[field] = v.clone();
        }
    }
    out
}

/// The strategic merge patch that takes one slice's owner reference off a copy (owner
/// references merge by uid), leaving those of other slices.
pub fn release_patch(owner_uid: &str) -> Value {
    json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": owner_uid}]}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_member_wants_the_bundles_of_the_workloads_placed_there_and_unwanted_go_on_the_second_sweep()
     {
        let svc = |name: &str, clusters: &[&str], moving: &[&str]| {
            json!({
                "metadata": {"name": name, "namespace": "ads"},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i",
                    "envFrom": [{"configMapRef": {"name": format!("{name}-cm")}}],
                    "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "p"}}}]}]}}},
                "status": {
                    "placement": {"placements": clusters.iter().map(|c| json!({"cluster": c})).collect::<Vec<_>>()},
                    "clusters": moving.iter().map(|c| json!({"cluster": c})).collect::<Vec<_>>()
                }
            })
        };
        let wanted = wanted_bundles(&[svc("web", &["a"], &["b"]), svc("api", &["c"], &[])]);
        let has =
            |m: &str, k: ConfigKind, n: &str| wanted.contains(&(m.to_string(), k, n.to_string()));
        assert!(has("a", ConfigKind::ConfigMap, "ads.web-cm"));
        assert!(has("a", ConfigKind::Secret, "ads.db"));
        assert!(
            has("b", ConfigKind::ConfigMap, "ads.web-cm"),
            "a share moving away keeps it"
        );
        assert!(has("c", ConfigKind::ConfigMap, "ads.api-cm"));
        assert!(!has("a", ConfigKind::ConfigMap, "ads.api-cm"));

        let mut sweep = BundleSweep::default();
        let dropped = vec![
            (ConfigKind::ConfigMap, "ads.web-cm".to_string()),
            (ConfigKind::ConfigMap, "ads.old".to_string()),
            (ConfigKind::Secret, "ads.db".to_string()),
        ];
        assert!(
            sweep.sweep("a", &dropped, &wanted).is_empty(),
            "suspected first"
        );
        assert_eq!(
            sweep.sweep("a", &dropped, &wanted),
            [(ConfigKind::ConfigMap, "ads.old".to_string())]
        );
        // Wanted again before the second sweep: not removed.
        let mut sweep = BundleSweep::default();
        sweep.sweep("c", &[(ConfigKind::Secret, "ads.db".into())], &wanted);
        let now_wanted: BTreeSet<_> =
            [("c".to_string(), ConfigKind::Secret, "ads.db".to_string())].into();
        assert!(
            sweep
                .sweep("c", &[(ConfigKind::Secret, "ads.db".into())], &now_wanted)
                .is_empty()
        );
        assert!(
            sweep
                .sweep("c", &[(ConfigKind::Secret, "ads.db".into())], &wanted)
                .is_empty(),
            "suspected afresh"
        );
    }

    #[test]
    fn every_kind_of_reference_is_found() {
        let spec: PodSpec = serde_json::from_value(json!({
            "containers": [{"name": "a", "image": "a",
                "envFrom": [{"configMapRef": {"name": "cm-envfrom"}}, {"secretRef": {"name": "s-envfrom"}}],
                "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s-env", "key": "k"}}},
                        {"name": "Y", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}}}]}],
            "initContainers": [{"name": "i", "image": "i", "envFrom": [{"configMapRef": {"name": "cm-init"}}]}],
            "volumes": [{"name": "v", "configMap": {"name": "cm-vol"}}, {"name": "w", "secret": {"secretName": "s-vol"}},
                        {"name": "p", "projected": {"sources": [{"configMap": {"name": "cm-proj"}}, {"secret": {"name": "s-proj"}}]}}],
            "imagePullSecrets": [{"name": "pull"}]
        }))
        .unwrap();
        let got: Vec<String> = referenced_config(&spec)
            .into_iter()
            .map(|r| format!("{}/{}", r.kind.as_str(), r.name))
            .collect();
        assert_eq!(
            got,
            [
                "ConfigMap/cm-env",
                "ConfigMap/cm-envfrom",
                "ConfigMap/cm-init",
                "ConfigMap/cm-proj",
                "ConfigMap/cm-vol",
                "Secret/pull",
                "Secret/s-env",
                "Secret/s-envfrom",
                "Secret/s-proj",
                "Secret/s-vol",
            ]
        );
    }

    #[test]
    fn pod_specs_are_found_in_every_kind_shape() {
        let pod = |cm: &str| json!({"containers": [{"name": "c", "image": "i", "envFrom": [{"configMapRef": {"name": cm}}]}]});
        // A service's template, a training job's roles, a cron job's job template.
        let service = json!({"spec": {"template": {"spec": pod("svc")}}});
        let training = json!({"spec": {"framework": "TensorFlow", "replicaSpecs": {
            "Worker": {"replicas": 2, "template": {"spec": pod("worker")}},
            "PS": {"replicas": 1, "template": {"spec": pod("ps")}}}}});
        let cron = json!({"spec": {"jobTemplate": {"template": {"spec": pod("cron")}}}});
        let names = |w: &Value| {
            workload_config(w)
                .into_iter()
                .map(|r| r.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&service), ["svc"]);
        assert_eq!(names(&training), ["ps", "worker"]);
        assert_eq!(names(&cron), ["cron"]);
        assert!(names(&json!({"spec": {}})).is_empty());
    }

    #[test]
    fn bundle_names_fit_an_object_name() {
        assert_eq!(bundle_name("team-a", "db-creds"), "team-a.db-creds");
        let long = "x".repeat(253);
        let n = bundle_name("team-a", &long);
        assert!(n.len() <= 253, "{} characters", n.len());
        assert!(n.starts_with("team-a.xxx"));
        assert_ne!(n, bundle_name("team-a", &"x".repeat(252)));
    }

    #[test]
    fn bundles_carry_data_and_origin_only() {
        let s = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "db", "namespace": "team-a", "uid": "u", "resourceVersion": "9",
                         "labels": {"app": "x"}, "ownerReferences": [{"uid": "o"}]},
            "data": {"password": "cA=="}, "immutable": true});
        let b = bundle(ConfigKind::Secret, &s).unwrap();
        assert_eq!(b["metadata"]["namespace"], DROP_NAMESPACE);
        assert_eq!(b["metadata"]["name"], "team-a.db");
        assert_eq!(b["metadata"]["labels"][LABEL_SOURCE_NAMESPACE], "team-a");
        assert_eq!(b["metadata"]["annotations"][ANNOTATION_SOURCE], "team-a/db");
        assert_eq!(b["data"]["password"], "cA==");
        assert_eq!(b["type"], "Opaque");
        assert!(b["metadata"].get("uid").is_none());
        assert!(b["metadata"].get("ownerReferences").is_none());
        assert!(b.get("immutable").is_none());
    }

    #[test]
    fn credentials_tokens_and_reserved_namespaces_are_never_bundled() {
        let token = json!({"type": "kubernetes.io/service-account-token",
            "metadata": {"name": "t", "namespace": "team-a"}});
        assert!(matches!(
            bundle(ConfigKind::Secret, &token),
            Err(NotBundled::ServiceAccountToken(_))
        ));
        let cred = json!({"type": "Opaque",
            "metadata": {"name": "member-x", "namespace": "team-a", "labels": {LABEL_CREDENTIAL: "x"}}});
        assert!(matches!(
            bundle(ConfigKind::Secret, &cred),
            Err(NotBundled::Credential(_))
        ));
        for ns in ["pinfed-system", "kube-system"] {
            let cm = json!({"metadata": {"name": "c", "namespace": ns}});
            assert!(matches!(
                bundle(ConfigKind::ConfigMap, &cm),
                Err(NotBundled::ReservedNamespace(_))
            ));
        }
        // A ConfigMap with the label is data, not a credential.
        let cm = json!({"metadata": {"name": "c", "namespace": "team-a", "labels": {LABEL_CREDENTIAL: "x"}}});
        assert!(bundle(ConfigKind::ConfigMap, &cm).is_ok());
    }

    #[test]
    fn a_copy_is_owned_by_its_slice_under_the_original_name() {
        let b = json!({"kind": "ConfigMap", "metadata": {"name": "team-a.cfg", "namespace": DROP_NAMESPACE,
            "annotations": {ANNOTATION_SOURCE: "team-a/cfg"}}, "data": {"k": "v"}});
        let owner = OwnerReference {
            api_version: "compute.pinterest.com/v1alpha1".into(),
            kind: "PinterestService".into(),
            name: "web".into(),
            uid: "uid-1".into(),
            ..OwnerReference::default()
        };
        let c = materialize(ConfigKind::ConfigMap, &b, "team-a", "cfg", &owner);
        assert_eq!(c["metadata"]["name"], "cfg");
        assert_eq!(c["metadata"]["namespace"], "team-a");
        assert_eq!(c["metadata"]["labels"][LABEL_PROPAGATED], "true");
        assert_eq!(c["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(c["data"]["k"], "v");
    }

    #[test]
    fn config_users_are_kept_both_ways_and_say_what_to_start_and_stop_following() {
        let src = |ns: &str, kind, name: &str| ConfigSource {
            namespace: ns.into(),
            kind,
            name: name.into(),
        };
        let cm = src("a", ConfigKind::ConfigMap, "cfg");
        let sec = src("a", ConfigKind::Secret, "db");
        let mut users = ConfigUsers::<&str>::default();
        let (new, unused) = users.set("web", [cm.clone(), sec.clone()].into());
        assert_eq!((new.len(), unused.len()), (2, 0));
        // A second user of the same ConfigMap starts nothing new.
        let (new, unused) = users.set("api", [cm.clone()].into());
        assert!(new.is_empty() && unused.is_empty());
        assert_eq!(users.users(&cm), vec!["api", "web"]);
        // web drops the Secret: nobody follows it any more; the ConfigMap still has api.
        let (new, unused) = users.set("web", [cm.clone()].into());
        assert!(new.is_empty());
        assert_eq!(unused, vec![sec.clone()]);
        assert!(!users.is_used(&sec));
        assert!(
            users.forget(&"web").is_empty(),
            "api still uses the ConfigMap"
        );
        assert_eq!(users.forget(&"api"), vec![cm.clone()]);
        assert!(users.users(&cm).is_empty());
        assert!(users.forget(&"nobody").is_empty());
    }

    #[test]
    fn a_change_reaches_its_users_and_a_relist_only_what_changed_meanwhile() {
        let cm = ConfigSource {
            namespace: "a".into(),
            kind: ConfigKind::ConfigMap,
            name: "cfg".into(),
        };
        let other = ConfigSource {
            name: "unused".into(),
            ..cm.clone()
        };
        let mut users = ConfigUsers::<&str>::default();
        users.set("web", [cm.clone()].into());
        // The first list: nothing remembered, no change.
        assert!(users.saw(&cm, Some("1"), true).is_empty());
        assert!(
            users.saw(&other, Some("1"), false).is_empty(),
            "nobody uses it"
        );
        assert_eq!(users.saw(&cm, Some("2"), false), vec!["web"]);
        // A relist at the same version is quiet; at a newer one it is a change.
        assert!(users.saw(&cm, Some("2"), true).is_empty());
        assert_eq!(users.saw(&cm, Some("5"), true), vec!["web"]);
        assert_eq!(users.saw(&cm, None, false), vec!["web"], "deleted");
    }

    #[test]
    fn a_bundle_names_its_source() {
        let b = bundle(
            ConfigKind::ConfigMap,
            &json!({"metadata": {"name": "cfg", "namespace": "team-a"}, "data": {"k": "v"}}),
        )
        .unwrap();
        let source = b["metadata"]["annotations"][ANNOTATION_SOURCE]
            .as_str()
            .unwrap();
        assert_eq!(
            ConfigSource::of_annotation(ConfigKind::ConfigMap, source),
            Some(ConfigSource {
                namespace: "team-a".into(),
                kind: ConfigKind::ConfigMap,
                name: "cfg".into()
            })
        );
        assert_eq!(
            ConfigSource::of_annotation(ConfigKind::Secret, "no-slash"),
            None
        );
    }
}

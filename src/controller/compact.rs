//! A watch cache that keeps each object as its JSON and only its metadata typed.
//!
//! A typed Pinterest resource costs about ten times its JSON in memory: the pod template's
//! k8s-openapi structs carry dozens of optional fields each, and the hub caches every
//! workload of the federation. The controller runs over the metadata (what scheduling and
//! triggers need); a reconcile decodes the one object it works on from its JSON, a few
//! tens of microseconds.
//!
//! The watch itself may be untyped (`DynamicObject`): one object the type cannot decode
//! then fails only its own reconcile (with the field that failed, [`Undecodable`]), not
//! the list of its whole kind.

use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::{Arc, RwLock};

use kube::Resource;
use kube::core::{PartialObjectMeta, TypeMeta};
use kube::runtime::watcher;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// (namespace, name).
type Key = (String, String);

#[derive(Default)]
struct Bodies {
    by_key: HashMap<Key, Arc<[u8]>>,
    /// Keys listed since the watch (re)started; the rest are dropped when the list ends.
    relisting: Option<HashSet<Key>>,
    /// A first list has completed: the cache holds every object.
    listed: bool,
}

/// A cache's objects without their type: for readers that take every kind as JSON.
#[derive(Clone)]
pub struct UntypedBodies(Arc<RwLock<Bodies>>);

impl UntypedBodies {
    /// Every object's JSON as last seen (managed fields left out); `None` until the
    /// first list completed.
    pub fn all(&self) -> Option<Vec<Arc<[u8]>>> {
        let bodies = self.0.read().unwrap_or_else(|e| e.into_inner());
        bodies
            .listed
            .then(|| bodies.by_key.values().cloned().collect())
    }
}

/// The JSON of every object of one kind, as its watch last delivered it.
pub struct CompactCache<K> {
    bodies: Arc<RwLock<Bodies>>,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for CompactCache<K> {
    fn clone(&self) -> Self {
        CompactCache {
            bodies: self.bodies.clone(),
            _kind: PhantomData,
        }
    }
}

impl<K> Default for CompactCache<K> {
    fn default() -> Self {
        CompactCache {
            bodies: Default::default(),
            _kind: PhantomData,
        }
    }
}

fn key_of(meta: &kube::api::ObjectMeta) -> Key {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

impl<K> CompactCache<K>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
{
    /// Stores (or drops) the event's object and passes its metadata on, for a reflector of
    /// `PartialObjectMeta<K>` and the controller. Managed fields are dropped: nothing reads
    /// them. The event's object is `K` itself or any representation of it (`DynamicObject`).
    pub fn ingest<O>(&self, event: watcher::Event<O>) -> watcher::Event<PartialObjectMeta<K>>
    where
        O: Resource + Serialize,
    {
        let mut bodies = self.bodies.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Init => {
                bodies.relisting = Some(HashSet::new());
                watcher::Event::Init
            }
            watcher::Event::InitApply(o) => {
                let (key, meta) = store::<K, O>(&mut bodies, o);
                if let Some(seen) = bodies.relisting.as_mut() {
                    seen.insert(key);
                }
                watcher::Event::InitApply(meta)
            }
            watcher::Event::InitDone => {
                if let Some(seen) = bodies.relisting.take() {
                    bodies.by_key.retain(|k, _| seen.contains(k));
                }
                bodies.listed = true;
                watcher::Event::InitDone
            }
            watcher::Event::Apply(o) => watcher::Event::Apply(store::<K, O>(&mut bodies, o).1),
            watcher::Event::Delete(mut o) => {
                o.meta_mut().managed_fields = None;
                bodies.by_key.remove(&key_of(o.meta()));
                watcher::Event::Delete(meta_of::<K, O>(o))
            }
        }
    }

    /// The object as last seen, decoded; `None` when it is gone (deleted meanwhile).
    pub fn get(&self, meta: &PartialObjectMeta<K>) -> Option<Result<K, Undecodable>> {
        self.body(meta).map(|body| decode(&body))
    }

    /// The object's JSON as last seen; `None` when it is gone.
    pub fn body(&self, meta: &PartialObjectMeta<K>) -> Option<Arc<[u8]>> {
        let bodies = self.bodies.read().unwrap_or_else(|e| e.into_inner());
        bodies.by_key.get(&key_of(&meta.metadata)).cloned()
    }

    /// The same cache, untyped.
    pub fn untyped(&self) -> UntypedBodies {
        UntypedBodies(self.bodies.clone())
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.bodies
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .by_key
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An object its type cannot take: the field that failed (`spec.replicas`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct Undecodable {
    pub path: String,
    pub reason: String,
}

impl From<Undecodable> for serde_json::Error {
    fn from(e: Undecodable) -> Self {
        <serde_json::Error as serde::de::Error>::custom(e)
    }
}

/// Decodes `body` as `T`, naming the field that does not fit.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, Undecodable> {
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        // serde_json appends where in the text it was; the path says it better.
        let reason = match inner.rfind(" at line ") {
            Some(i) => inner[..i].to_string(),
            None => inner,
        };
        Undecodable {
            path: if path == "." {
                "(the object)".into()
            } else {
                path
            },
            reason,
        }
    })
}

/// What [`decode_salvaging_status`] made of an object: the object, and the status fields it
/// had to leave out (`status.nodePools[2].nodes`), none when it decoded whole.
#[derive(Debug)]
pub struct Salvaged<T> {
    pub object: T,
    pub dropped: Vec<String>,
}

/// Most status fields one object may lose before it counts as undecodable.
const MOST_DROPPED: usize = 32;

/// Decodes `value` as `T`; a field of its `status` that `T` cannot take (another pinfed
/// version wrote it in another shape) is left out, and the rest of the status kept. A
/// status is a controller's report, written again by the next round, while what a
/// controller would make of a spec it half read cannot be known: a spec field that does
/// not fit is an [`Undecodable`] as with [`decode`].
pub fn decode_salvaging_status<T: DeserializeOwned>(
    mut value: serde_json::Value,
) -> Result<Salvaged<T>, Undecodable> {
    let mut dropped = Vec::new();
    loop {
        let err = match serde_path_to_error::deserialize::<_, T>(&value) {
            Ok(object) => return Ok(Salvaged { object, dropped }),
            Err(e) => e,
        };
        let segments: Vec<_> = err.path().iter().cloned().collect();
        let in_status = matches!(
            segments.first(),
            Some(serde_path_to_error::Segment::Map { key }) if key == "status"
        );
        if in_status && dropped.len() < MOST_DROPPED && remove_at(&mut value, &segments) {
            dropped.push(err.path().to_string());
            continue;
        }
        return Err(Undecodable {
            path: match err.path().to_string().as_str() {
                "." => "(the object)".into(),
                p => p.to_string(),
            },
            reason: err.into_inner().to_string(),
        });
    }
}

/// Removes the field or list item `path` leads to; `false` when there is none.
fn remove_at(value: &mut serde_json::Value, path: &[serde_path_to_error::Segment]) -> bool {
    use serde_path_to_error::Segment;
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut at = value;
    for segment in parents {
        let next = match (segment, at) {
            (Segment::Map { key }, serde_json::Value::Object(m)) => m.get_mut(key),
            (Segment::Seq { index }, serde_json::Value::Array(a)) => a.get_mut(*index),
            _ => None,
        };
        match next {
            Some(n) => at = n,
            None => return false,
        }
    }
    match (last, at) {
        (Segment::Map { key }, serde_json::Value::Object(m)) => m.remove(key).is_some(),
        (Segment::Seq { index }, serde_json::Value::Array(a)) if *index < a.len() => {
            a.remove(*index);
            true
        }
        _ => false,
    }
}

fn store<K: Resource<DynamicType = ()>, O: Resource + Serialize>(
    bodies: &mut Bodies,
    mut o: O,
) -> (Key, PartialObjectMeta<K>) {
    o.meta_mut().managed_fields = None;
    let key = key_of(o.meta());
    // An object that cannot be serialized again cannot happen for a type that was just
    // deserialized; keep the metadata flowing either way.
    if let Ok(json) = serde_json::to_vec(&o) {
        bodies.by_key.insert(key.clone(), json.into());
    }
    (key, meta_of::<K, O>(o))
}

fn meta_of<K: Resource<DynamicType = ()>, O: Resource>(o: O) -> PartialObjectMeta<K> {
    let types = TypeMeta {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
    };
    let mut o = o;
    PartialObjectMeta {
        types: Some(types),
        metadata: std::mem::take(o.meta_mut()),
        _phantom: PhantomData,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(name: &str, value: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                managed_fields: Some(vec![Default::default()]),
                ..Default::default()
            },
            data: Some([("k".to_string(), value.to_string())].into()),
            ..Default::default()
        }
    }

    fn meta(name: &str) -> PartialObjectMeta<ConfigMap> {
        meta_of::<ConfigMap, ConfigMap>(cm(name, ""))
    }

    #[test]
    fn objects_come_back_as_stored_without_managed_fields() {
        let cache = CompactCache::<ConfigMap>::default();
        let out = cache.ingest(watcher::Event::Apply(cm("a", "1")));
        let watcher::Event::Apply(m) = out else {
            panic!("an Apply passes on as an Apply")
        };
        assert_eq!(m.metadata.name.as_deref(), Some("a"));
        assert_eq!(m.types.as_ref().map(|t| t.kind.as_str()), Some("ConfigMap"));
        let back = cache.get(&meta("a")).expect("cached").expect("decodes");
        assert_eq!(back.data.unwrap()["k"], "1");
        assert_eq!(back.metadata.managed_fields, None);
        cache.ingest(watcher::Event::Apply(cm("a", "2")));
        assert_eq!(
            cache.get(&meta("a")).unwrap().unwrap().data.unwrap()["k"],
            "2"
        );
        cache.ingest(watcher::Event::Delete(cm("a", "2")));
        assert!(cache.get(&meta("a")).is_none());
    }

    #[test]
    fn a_relist_drops_what_it_no_longer_lists() {
        let cache = CompactCache::<ConfigMap>::default();
        cache.ingest(watcher::Event::Apply(cm("a", "1")));
        cache.ingest(watcher::Event::Apply(cm("b", "1")));
        cache.ingest(watcher::Event::<ConfigMap>::Init);
        cache.ingest(watcher::Event::InitApply(cm("b", "2")));
        // Until the list ends, what it has not listed yet stays readable.
        assert!(cache.get(&meta("a")).is_some());
        cache.ingest(watcher::Event::<ConfigMap>::InitDone);
        assert!(
            cache.get(&meta("a")).is_none(),
            "deleted while not watching"
        );
        assert_eq!(cache.len(), 1);
        assert_eq!(
            cache.get(&meta("b")).unwrap().unwrap().data.unwrap()["k"],
            "2"
        );
    }

    #[test]
    fn an_untyped_watch_caches_what_its_type_cannot_take_and_names_the_field() {
        use kube::api::DynamicObject;
        let cache = CompactCache::<ConfigMap>::default();
        let bad: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "bad", "namespace": "ns"},
            "data": {"k": 7}
        }))
        .unwrap();
        let good: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "good", "namespace": "ns"},
            "data": {"k": "v"}
        }))
        .unwrap();
        cache.ingest(watcher::Event::<DynamicObject>::Init);
        cache.ingest(watcher::Event::InitApply(bad));
        cache.ingest(watcher::Event::InitApply(good));
        cache.ingest(watcher::Event::<DynamicObject>::InitDone);
        assert_eq!(cache.len(), 2, "both listed, the bad one too");
        let err = cache.get(&meta("bad")).unwrap().unwrap_err();
        assert_eq!(err.path, "data.k");
        assert!(err.reason.contains("expected a string"), "{err}");
        assert!(!err.reason.contains("line"), "{err}");
        assert_eq!(
            cache.get(&meta("good")).unwrap().unwrap().data.unwrap()["k"],
            "v"
        );
    }

    fn member(status: serde_json::Value, mode: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": "use1a"},
            "spec": {"mode": mode, "region": "us-east-1"},
            "status": status
        })
    }

    #[test]
    fn a_status_field_of_another_shape_is_left_out_and_the_rest_kept() {
        use crate::api::federation::MemberCluster;
        let value = member(
            serde_json::json!({
                "nodes": 3,
                "kubernetesVersion": {"major": 1},
                "pendingCleanups": [
                    {"kind": "PinterestService", "namespace": "a", "name": "x", "hubUid": "1"},
                    {"kind": "PinterestService", "namespace": "a", "name": 7, "hubUid": "2"},
                    {"kind": "PinterestService", "namespace": "a", "name": "z", "hubUid": "3"}
                ]
            }),
            "Pull",
        );
        let s = decode_salvaging_status::<MemberCluster>(value).unwrap();
        // A required field that goes takes its item with it.
        assert_eq!(
            s.dropped,
            [
                "status.kubernetesVersion",
                "status.pendingCleanups[1].name",
                "status.pendingCleanups[1]"
            ]
        );
        let status = s.object.status.unwrap();
        assert_eq!(status.nodes, Some(3));
        assert_eq!(status.kubernetes_version, None);
        let kept: Vec<_> = status.pending_cleanups.iter().map(|c| &c.name).collect();
        assert_eq!(kept, ["x", "z"], "only the item that does not fit goes");
        assert_eq!(
            s.object.spec.mode,
            Some(crate::api::federation::ClusterMode::Pull)
        );
    }

    #[test]
    fn a_whole_decodable_object_loses_nothing_and_a_status_of_another_type_goes_whole() {
        use crate::api::federation::MemberCluster;
        let s = decode_salvaging_status::<MemberCluster>(member(
            serde_json::json!({"nodes": 3}),
            "Push",
        ))
        .unwrap();
        assert!(s.dropped.is_empty());
        let s =
            decode_salvaging_status::<MemberCluster>(member(serde_json::json!("ready"), "Push"))
                .unwrap();
        assert_eq!(s.dropped, ["status"]);
        assert_eq!(s.object.status, None);
    }

    #[test]
    fn a_spec_field_that_does_not_fit_is_undecodable_and_named() {
        use crate::api::federation::MemberCluster;
        let err = decode_salvaging_status::<MemberCluster>(member(
            serde_json::json!({"kubernetesVersion": 1}),
            "Hybrid",
        ))
        .unwrap_err();
        assert_eq!(err.path, "spec.mode");
        assert!(err.reason.contains("Hybrid"), "{err}");
    }
}

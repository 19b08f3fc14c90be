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
}

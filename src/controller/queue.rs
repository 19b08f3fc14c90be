//! Queue depth of a kube-runtime `Controller`, measured from the outside.
//!
//! kube-runtime does not expose its scheduler, so a [`QueueDepth`] tracks the same thing
//! honestly: the set of objects that were *triggered* — by the main watch, by a watch of
//! objects they own, or by a bulk re-reconcile — and whose reconcile has not *started*
//! yet. It is a set, not a counter, because the scheduler deduplicates: ten events for one
//! object before it is picked up are one queued reconcile. Requeues an `Action` or the
//! error policy schedules are delays, not queue, and are not counted.
//!
//! Wiring (see `agent::run_kind` for a complete example):
//!
//! ```ignore
//! let queues = QueueMetrics::register(&mut registry);       // once per process
//! let queue = queues.tracker("PinterestService");          // once per controller run
//! let (reader, writer) = reflector::store();
//! let main = watcher(api, cfg).reflect(writer).applied_objects();
//! Controller::for_stream(queue.track_objects(main), reader)
//!     .owns_stream(queue.track_owners::<PinterestService, _, _, _>(
//!         watcher(Api::<PartialObjectMeta<Deployment>>::all(c), cfg).touched_objects()))
//!     .reconcile_all_on(queue.track_all(store, bulk_trigger))
//!     .run(reconcile, error_policy, ctx)   // reconcile calls `queue.picked(&*obj)` first
//!     .for_each(|r| { queue.settle(&r); ready(()) })
//! ```

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::controller::{Action, Error as ControllerError};
use kube::runtime::reflector::{ObjectRef, Store};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::metrics::KindLabels;

const HELP: &str = "Objects waiting for a reconcile, by kind: triggered (a watch event of the \
object or of an object it owns, or a bulk re-reconcile) and not yet picked up by a \
reconcile; an object triggered many times counts once, as the scheduler deduplicates. \
Scheduled requeues (Action::requeue, error backoff) are delays and are not counted";

/// The `queue_depth` gauge family, one gauge per controller (label `kind`).
#[derive(Clone)]
pub struct QueueMetrics {
    depth: Family<KindLabels, Gauge>,
}

impl QueueMetrics {
    /// Registers `queue_depth` (with the registry's prefix, e.g. `pinfed_agent_queue_depth`).
    pub fn register(registry: &mut Registry) -> QueueMetrics {
        let m = QueueMetrics {
            depth: Family::default(),
        };
        registry.register("queue_depth", HELP, m.depth.clone());
        m
    }

    /// A fresh, empty tracker for one controller run, reporting as `kind`. Call it when the
    /// controller (re)starts — e.g. on every leader term — so a stopped run's leftovers do
    /// not stay counted.
    pub fn tracker(&self, kind: &str) -> QueueDepth {
        let gauge = self
            .depth
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .clone();
        QueueDepth::with_gauge(gauge)
    }
}

/// Objects triggered and not yet picked up by one controller. Cheap to clone (shared).
#[derive(Clone)]
pub struct QueueDepth {
    inner: Arc<Inner>,
}

struct Inner {
    keys: Mutex<HashSet<String>>,
    gauge: Gauge,
}

fn key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

impl QueueDepth {
    /// A tracker whose gauge is not registered anywhere (tests, tools).
    pub fn unregistered() -> QueueDepth {
        QueueDepth::with_gauge(Gauge::default())
    }

    fn with_gauge(gauge: Gauge) -> QueueDepth {
        gauge.set(0);
        QueueDepth {
            inner: Arc::new(Inner {
                keys: Mutex::default(),
                gauge,
            }),
        }
    }

    fn update(&self, f: impl FnOnce(&mut HashSet<String>)) {
        // A poisoned lock only means another thread panicked mid-update; the set is
        // still a set.
        let mut keys = self.inner.keys.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut keys);
        self.inner
            .gauge
            .set(i64::try_from(keys.len()).unwrap_or(i64::MAX));
    }

    /// The object `namespace/name` was triggered.
    pub fn triggered(&self, namespace: Option<&str>, name: &str) {
        let k = key(namespace, name);
        self.update(|keys| {
            keys.insert(k);
        });
    }

    /// A reconcile of `namespace/name` starts (or the scheduler dropped it).
    pub fn picked_up(&self, namespace: Option<&str>, name: &str) {
        let k = key(namespace, name);
        self.update(|keys| {
            keys.remove(&k);
        });
    }

    /// A reconcile of `obj` starts: call this first thing in the reconciler. A trigger that
    /// arrives while it runs is queued again, as the scheduler does.
    pub fn picked<K: Resource>(&self, obj: &K) {
        let meta = obj.meta();
        self.picked_up(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or(""),
        );
    }

    /// How many objects wait.
    pub fn len(&self) -> usize {
        self.inner
            .keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Passes the main watch's objects through (for `Controller::for_stream`), counting
    /// each as triggered.
    pub fn track_objects<K, E, S>(
        &self,
        stream: S,
    ) -> impl Stream<Item = Result<K, E>> + use<K, E, S>
    where
        K: Resource,
        S: Stream<Item = Result<K, E>>,
    {
        let q = self.clone();
        stream.inspect(move |r| {
            if let Ok(obj) = r {
                let meta = obj.meta();
                q.triggered(
                    meta.namespace.as_deref(),
                    meta.name.as_deref().unwrap_or(""),
                );
            }
        })
    }

    /// Passes an owned-object watch through (for `Controller::owns_stream`), counting every
    /// owner of kind `Owner` named in a child's owner references as triggered — the same
    /// owners kube-runtime's `owns` triggers.
    pub fn track_owners<Owner, Child, E, S>(
        &self,
        stream: S,
    ) -> impl Stream<Item = Result<Child, E>> + use<Owner, Child, E, S>
    where
        Owner: Resource<DynamicType = ()>,
        Child: Resource,
        S: Stream<Item = Result<Child, E>>,
    {
        let q = self.clone();
        stream.inspect(move |r| {
            let Ok(child) = r else { return };
            let meta = child.meta();
            for owner in meta.owner_references.iter().flatten() {
                if let Some(o) =
                    ObjectRef::<Owner>::from_owner_ref(meta.namespace.as_deref(), owner, ())
                {
                    q.triggered(o.namespace.as_deref(), &o.name);
                }
            }
        })
    }

    /// Passes a bulk trigger through (for `Controller::reconcile_all_on`), counting every
    /// object in the controller's `store` (`Controller::store()`) as triggered.
    pub fn track_all<K, S>(&self, store: Store<K>, stream: S) -> impl Stream<Item = ()> + use<K, S>
    where
        K: Resource + Clone + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone,
        S: Stream<Item = ()>,
    {
        let q = self.clone();
        stream.inspect(move |()| {
            for obj in store.state() {
                let meta = obj.meta();
                q.triggered(
                    meta.namespace.as_deref(),
                    meta.name.as_deref().unwrap_or(""),
                );
            }
        })
    }

    /// Looks at one item of `Controller::run`'s output: a scheduled object that is gone
    /// from the store (`ObjectNotFound`) was dropped without a reconcile, so it no longer
    /// waits.
    pub fn settle<K, R, Q>(&self, item: &Result<(ObjectRef<K>, Action), ControllerError<R, Q>>)
    where
        K: Resource,
        R: std::error::Error,
        Q: std::error::Error,
    {
        if let Err(ControllerError::ObjectNotFound(r)) = item {
            self.picked_up(r.namespace.as_deref(), &r.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
    use kube::runtime::watcher;

    fn cm(ns: &str, name: &str) -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns}
        }))
        .unwrap()
    }

    fn deployment(ns: &str, name: &str, owners: serde_json::Value) -> Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "ownerReferences": owners}
        }))
        .unwrap()
    }

    fn encoded(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn a_set_not_a_counter_and_the_gauge_follows_it() {
        let mut registry = Registry::with_prefix("pinfed_test");
        let metrics = QueueMetrics::register(&mut registry);
        let q = metrics.tracker("PinterestService");
        q.triggered(Some("a"), "web");
        q.triggered(Some("a"), "web");
        q.triggered(Some("b"), "web");
        q.triggered(None, "cluster-scoped");
        assert_eq!(q.len(), 3, "two triggers of a/web queue one reconcile");
        let out = encoded(&registry);
        assert!(
            out.contains(r#"pinfed_test_queue_depth{kind="PinterestService"} 3"#),
            "{out}"
        );
        assert!(out.contains("# HELP pinfed_test_queue_depth"), "{out}");
        q.picked(&cm("a", "web"));
        q.picked_up(None, "cluster-scoped");
        q.picked_up(Some("a"), "never-triggered");
        assert_eq!(q.len(), 1);
        assert!(
            encoded(&registry).contains(r#"pinfed_test_queue_depth{kind="PinterestService"} 1"#)
        );
        // A new run starts from zero, in the same gauge.
        let q2 = metrics.tracker("PinterestService");
        assert!(q2.is_empty());
        assert!(
            encoded(&registry).contains(r#"pinfed_test_queue_depth{kind="PinterestService"} 0"#)
        );
    }

    #[tokio::test]
    async fn stream_adapters_count_what_the_controller_would_trigger() {
        let q = QueueDepth::unregistered();
        // Main watch: every object it yields; errors pass through uncounted.
        let main = stream::iter(vec![
            Ok(cm("ns", "a")),
            Err(watcher::Error::NoResourceVersion),
            Ok(cm("ns", "b")),
        ]);
        let out: Vec<_> = q.track_objects(main).collect().await;
        assert_eq!(out.len(), 3, "items pass through unchanged");
        assert_eq!(q.len(), 2);

        // Owned objects: only owners of the controller's kind count.
        let q = QueueDepth::unregistered();
        let owners = serde_json::json!([
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "1"},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "other", "uid": "2"},
        ]);
        let children = stream::iter(vec![
            Ok::<_, watcher::Error>(deployment("ns", "d1", owners.clone())),
            Ok(deployment("ns", "d2", owners)),
            Ok(deployment("ns", "orphan", serde_json::json!([]))),
        ]);
        let _: Vec<_> = q
            .track_owners::<ConfigMap, _, _, _>(children)
            .collect()
            .await;
        assert_eq!(q.len(), 1, "ns/owner, once");
        q.picked_up(Some("ns"), "owner");
        assert!(q.is_empty());

        // Bulk re-reconcile: everything in the store.
        let q = QueueDepth::unregistered();
        let (reader, mut writer) = reflector::store::<ConfigMap>();
        for name in ["x", "y", "z"] {
            writer.apply_watcher_event(&watcher::Event::Apply(cm("ns", name)));
        }
        let _: Vec<_> = q.track_all(reader, stream::iter([()])).collect().await;
        assert_eq!(q.len(), 3);

        // A scheduled object that vanished from the store is no longer waiting.
        let gone: Result<
            (ObjectRef<ConfigMap>, Action),
            ControllerError<std::io::Error, watcher::Error>,
        > = Err(ControllerError::ObjectNotFound(Box::new(
            ObjectRef::<ConfigMap>::new("y").within("ns").erase(),
        )));
        q.settle(&gone);
        assert_eq!(q.len(), 2);
        let ok: Result<
            (ObjectRef<ConfigMap>, Action),
            ControllerError<std::io::Error, watcher::Error>,
        > = Ok((ObjectRef::new("x").within("ns"), Action::await_change()));
        q.settle(&ok);
        assert_eq!(
            q.len(),
            2,
            "a finished reconcile says nothing about new triggers"
        );
    }
}

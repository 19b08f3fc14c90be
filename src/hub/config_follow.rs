//! The hub's ConfigMaps and Secrets that workloads reference, followed by watch: a change
//! reconciles every workload that references it, which drops the new bundle into each of
//! its members (their agents materialize it from there, `agent::bundles`). Without this a
//! change reached the members only at the next resync.
//!
//! ConfigMaps: one metadata-only watch over the hub (the hub may read any ConfigMap).
//! Secrets: the hub reads only those a team granted it by name (`pinfed grant-secrets`),
//! so each granted Secret a workload references gets a watch of its own, by name, started
//! when the hub first reads it for a bundle and stopped when no workload references it.
//! Everything here lives in the leader's term.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use futures::StreamExt;
use futures::stream::{AbortHandle, Abortable, SelectAll};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use super::members::SliceEvent;
use crate::api::workload::WorkloadKind;
use crate::controller::watch;
use crate::expand::bundle::{ConfigKind, ConfigRef, ConfigSource, ConfigUsers};

/// A workload, as the config index knows it.
type User = (WorkloadKind, String, String);

enum SecretWatch {
    Start(ConfigSource),
    Stop(ConfigSource),
}

/// The index of who references what, the triggers it sends, and the Secret watches.
pub struct ConfigFollow {
    users: Mutex<ConfigUsers<User>>,
    /// Secrets with a watch running (or asked for).
    watched: Mutex<BTreeSet<ConfigSource>>,
    triggers: tokio::sync::broadcast::Sender<SliceEvent>,
    secret_tx: tokio::sync::mpsc::UnboundedSender<SecretWatch>,
    secret_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<SecretWatch>>>,
}

impl Default for ConfigFollow {
    fn default() -> Self {
        let (secret_tx, secret_rx) = tokio::sync::mpsc::unbounded_channel();
        ConfigFollow {
            users: Default::default(),
            watched: Default::default(),
            triggers: tokio::sync::broadcast::channel(4096).0,
            secret_tx,
            secret_rx: Mutex::new(Some(secret_rx)),
        }
    }
}

impl ConfigFollow {
    /// Records what a workload references now (each reconcile that rolls it out).
    pub fn record(&self, kind: WorkloadKind, ns: &str, name: &str, refs: &BTreeSet<ConfigRef>) {
        let sources = refs.iter().map(|r| ConfigSource::of(ns, r)).collect();
        let unused = match self.users.lock() {
            Ok(mut u) => u.set((kind, ns.to_string(), name.to_string()), sources).1,
            Err(_) => return,
        };
        self.stop_following(unused);
    }

    /// Forgets a workload that is gone.
    pub fn forget(&self, kind: WorkloadKind, ns: &str, name: &str) {
        let unused = match self.users.lock() {
            Ok(mut u) => u.forget(&(kind, ns.to_string(), name.to_string())),
            Err(_) => return,
        };
        self.stop_following(unused);
    }

    fn stop_following(&self, unused: Vec<ConfigSource>) {
        for s in unused {
            if s.kind == ConfigKind::Secret && self.watched.lock().is_ok_and(|mut w| w.remove(&s)) {
                let _ = self.secret_tx.send(SecretWatch::Stop(s));
            }
        }
    }

    /// The hub has just read this Secret for a bundle (so it is granted): follow it.
    pub fn secret_read(&self, ns: &str, name: &str) {
        let s = ConfigSource {
            namespace: ns.to_string(),
            kind: ConfigKind::Secret,
            name: name.to_string(),
        };
        let used = self.users.lock().is_ok_and(|u| u.is_used(&s));
        if used && self.watched.lock().is_ok_and(|mut w| w.insert(s.clone())) {
            let _ = self.secret_tx.send(SecretWatch::Start(s));
        }
    }

    /// Workloads to reconcile because config they reference changed.
    pub fn triggers(&self) -> impl futures::Stream<Item = SliceEvent> + Send + 'static {
        watch::broadcast_stream(self.triggers.subscribe())
    }

    /// A watch event for `source`: its users are reconciled when it changed.
    fn saw(&self, source: ConfigSource, version: Option<String>, relisted: bool) {
        let users = match self.users.lock() {
            Ok(mut u) => u.saw(&source, version.as_deref(), relisted),
            Err(_) => return,
        };
        if users.is_empty() {
            return;
        }
        tracing::debug!(namespace = %source.namespace, kind = source.kind.as_str(), name = %source.name, workloads = users.len(), "referenced config changed; reconciling its workloads");
        for (kind, namespace, name) in users {
            let _ = self.triggers.send(SliceEvent {
                kind,
                namespace,
                name,
            });
        }
    }
}

fn source_of<K: kube::Resource>(kind: ConfigKind, m: &PartialObjectMeta<K>) -> ConfigSource {
    ConfigSource {
        namespace: m.namespace().unwrap_or_default(),
        kind,
        name: m.name_any(),
    }
}

/// Follows the hub's ConfigMaps and the referenced Secrets until the term ends.
pub async fn run(hub: &Client, follow: &ConfigFollow) {
    let Some(rx) = follow.secret_rx.lock().ok().and_then(|mut r| r.take()) else {
        return;
    };
    tokio::join!(config_maps(hub, follow), secrets(hub, follow, rx));
}

async fn config_maps(hub: &Client, follow: &ConfigFollow) {
    let events = watcher(
        Api::<PartialObjectMeta<ConfigMap>>::all(hub.clone()),
        watcher::Config::default().any_semantic(),
    )
    .backoff(watch::backoff());
    let events = watch::skip_errors("ConfigMaps (referenced by workloads)".into(), events);
    tokio::pin!(events);
    while let Some(Ok(ev)) = events.next().await {
        observe(follow, ConfigKind::ConfigMap, ev);
    }
}

fn observe<K: kube::Resource>(
    follow: &ConfigFollow,
    kind: ConfigKind,
    ev: watcher::Event<PartialObjectMeta<K>>,
) {
    match ev {
        watcher::Event::Apply(m) => follow.saw(source_of(kind, &m), m.resource_version(), false),
        watcher::Event::InitApply(m) => follow.saw(source_of(kind, &m), m.resource_version(), true),
        watcher::Event::Delete(m) => follow.saw(source_of(kind, &m), None, false),
        watcher::Event::Init | watcher::Event::InitDone => {}
    }
}

/// One watch per followed Secret, by name (a list or watch narrowed to one name is what
/// a by-name grant allows).
async fn secrets(
    hub: &Client,
    follow: &ConfigFollow,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<SecretWatch>,
) {
    let mut running: HashMap<ConfigSource, AbortHandle> = HashMap::new();
    let mut events = SelectAll::new();
    loop {
        tokio::select! {
            cmd = rx.recv() => match cmd {
                Some(SecretWatch::Start(s)) => {
                    if running.contains_key(&s) {
                        continue;
                    }
                    let stream = watcher(
                        Api::<PartialObjectMeta<Secret>>::namespaced(hub.clone(), &s.namespace),
                        watcher::Config::default().fields(&format!("metadata.name={}", s.name)),
                    )
                    .backoff(watch::backoff());
                    let stream = watch::skip_errors(format!("Secret {}/{}", s.namespace, s.name), stream);
                    let (handle, reg) = AbortHandle::new_pair();
                    running.insert(s, handle);
                    events.push(Box::pin(Abortable::new(stream, reg)));
                }
                Some(SecretWatch::Stop(s)) => {
                    if let Some(h) = running.remove(&s) {
                        h.abort();
                    }
                }
                None => return,
            },
            Some(Ok(ev)) = events.next(), if !events.is_empty() => {
                observe(follow, ConfigKind::Secret, ev);
            }
        }
    }
}

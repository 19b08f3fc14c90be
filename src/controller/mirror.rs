//! Watch-backed caches of whole kinds, whose watch task is owned: it stops when the
//! owner drops its [`Watching`] handle, so a cache opened in a leadership term never
//! outlives the term.

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::task::JoinHandle;

/// A background task that is aborted when this handle is dropped.
#[derive(Debug)]
pub struct Watching(JoinHandle<()>);

impl Watching {
    pub fn spawn(fut: impl Future<Output = ()> + Send + 'static) -> Watching {
        Watching(tokio::spawn(fut))
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A cache of every object of a kind (all namespaces), kept current by a watch, loaded
/// before it is returned. Managed fields are dropped: nothing reads them.
pub async fn mirror<K>(client: &kube::Client) -> anyhow::Result<(Store<K>, Watching)>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = watcher(
        kube::Api::<K>::all(client.clone()),
        watcher::Config::default(),
    )
    .backoff(super::watch::backoff())
    .modify(|o| o.meta_mut().managed_fields = None)
    .reflect(writer)
    .for_each(|_| futures::future::ready(()));
    let task = Watching::spawn(stream);
    store.wait_until_ready().await?;
    Ok((store, task))
}

/// [`mirror`] for a kind whose objects another version of pinfed may have stored in a
/// shape this one cannot decode (RuntimeProfiles): the watch reads them untyped and the
/// cache holds those that decode. One that does not is left out (a profile nobody can
/// expand with is as good as absent) and said once per version in a warning, and the
/// cache keeps its last decodable version if it had one. A typed watch failed its whole
/// list on it, and [`mirror`] then never returned: a hub or agent that waited for its
/// profiles never started.
pub async fn mirror_decodable<K>(client: &kube::Client) -> anyhow::Result<(Store<K>, Watching)>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = decodable_watch::<K>(client, watcher::Config::default())
        .modify(|o| o.meta_mut().managed_fields = None)
        .reflect(writer)
        .for_each(|_| futures::future::ready(()));
    let task = Watching::spawn(stream);
    store.wait_until_ready().await?;
    Ok((store, task))
}

/// A watch of every object of `K` (with backoff) that reads them untyped and passes on
/// as `K` those that decode ([`mirror_decodable`]).
pub fn decodable_watch<K>(
    client: &kube::Client,
    config: watcher::Config,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let api = kube::Api::<kube::api::DynamicObject>::all_with(
        client.clone(),
        &kube::api::ApiResource::erase::<K>(&()),
    );
    let mut decoder = Decoder::<K>::default();
    watcher(api, config)
        .backoff(super::watch::backoff())
        .filter_map(move |ev| futures::future::ready(ev.map(|e| decoder.event(e)).transpose()))
}

/// Turns untyped watch events into events of `K`, leaving out objects that do not decode.
/// Keeps the last decodable version of each object: a Delete of one whose last version
/// does not decode still removes it from the cache.
struct Decoder<K> {
    last: std::collections::HashMap<ObjectKey, K>,
    /// Objects listed since a relist began (`None`: no relist under way).
    relisting: Option<std::collections::HashSet<ObjectKey>>,
    /// `namespace/name@resourceVersion` of the undecodable versions already said.
    said: std::collections::HashSet<String>,
}

/// Namespace and name.
type ObjectKey = (Option<String>, String);

fn key_of(o: &kube::api::DynamicObject) -> ObjectKey {
    (
        o.metadata.namespace.clone(),
        o.metadata.name.clone().unwrap_or_default(),
    )
}

impl<K> Default for Decoder<K> {
    fn default() -> Self {
        Decoder {
            last: Default::default(),
            relisting: None,
            said: Default::default(),
        }
    }
}

impl<K> Decoder<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned,
{
    fn event(&mut self, ev: watcher::Event<kube::api::DynamicObject>) -> Option<watcher::Event<K>> {
        use watcher::Event;
        match ev {
            Event::Init => {
                self.relisting = Some(Default::default());
                Some(Event::Init)
            }
            Event::InitDone => {
                // Gone while the watch was down: forgotten.
                if let Some(seen) = self.relisting.take() {
                    self.last.retain(|k, _| seen.contains(k));
                }
                Some(Event::InitDone)
            }
            Event::InitApply(o) => {
                if let Some(seen) = self.relisting.as_mut() {
                    seen.insert(key_of(&o));
                }
                self.decode(o).map(Event::InitApply)
            }
            Event::Apply(o) => self.decode(o).map(Event::Apply),
            Event::Delete(o) => self.last.remove(&key_of(&o)).map(Event::Delete),
        }
    }

    fn decode(&mut self, o: kube::api::DynamicObject) -> Option<K> {
        let key = key_of(&o);
        let version = o.metadata.resource_version.clone().unwrap_or_default();
        let decoded = serde_json::to_vec(&o)
            .map_err(|e| super::compact::Undecodable {
                path: String::new(),
                reason: e.to_string(),
            })
            .and_then(|body| super::compact::decode::<K>(&body));
        match decoded {
            Ok(k) => {
                self.last.insert(key, k.clone());
                Some(k)
            }
            Err(why) => {
                let id = format!(
                    "{}/{}@{version}",
                    key.0.as_deref().unwrap_or_default(),
                    key.1
                );
                if self.said.insert(id.clone()) {
                    tracing::warn!(kind = %K::kind(&()), object = %id, error = %why, "cannot decode; left out until it changes");
                }
                // As good as absent while it does not decode, unless an earlier version did.
                self.last.get(&key).cloned()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::runtime_profile::RuntimeProfile;
    use kube::ResourceExt;
    use kube::api::DynamicObject;
    use watcher::Event;

    fn profile(name: &str, version: serde_json::Value, rv: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "RuntimeProfile",
            "metadata": {"name": name, "resourceVersion": rv},
            "spec": {"version": version}
        }))
        .unwrap()
    }

    fn names(events: &[Option<Event<RuntimeProfile>>]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                None => "-".to_string(),
                Some(Event::Init) => "init".into(),
                Some(Event::InitDone) => "done".into(),
                Some(Event::InitApply(p)) => format!("list {}={}", p.name_any(), p.spec.version),
                Some(Event::Apply(p)) => format!("apply {}={}", p.name_any(), p.spec.version),
                Some(Event::Delete(p)) => format!("delete {}", p.name_any()),
            })
            .collect()
    }

    #[test]
    fn an_undecodable_object_is_left_out_and_an_earlier_decodable_version_kept() {
        let mut d = Decoder::<RuntimeProfile>::default();
        let events = [
            Event::Init,
            Event::InitApply(profile("good", "v1".into(), "1")),
            Event::InitApply(profile("bad", serde_json::json!({"x": 1}), "2")),
            Event::InitDone,
            // A decodable one turns undecodable: its last good version stays.
            Event::Apply(profile("good", "v2".into(), "3")),
            Event::Apply(profile("good", serde_json::json!(7), "4")),
            // Deleted while undecodable: still removed from the cache.
            Event::Delete(profile("good", serde_json::json!(7), "5")),
            // Never decodable, deleted: nothing to remove.
            Event::Delete(profile("bad", serde_json::json!({"x": 1}), "6")),
        ]
        .into_iter()
        .map(|e| d.event(e))
        .collect::<Vec<_>>();
        assert_eq!(
            names(&events),
            [
                "init",
                "list good=v1",
                "-",
                "done",
                "apply good=v2",
                "apply good=v2",
                "delete good",
                "-"
            ]
        );
    }

    #[test]
    fn a_relist_forgets_what_went_while_the_watch_was_down() {
        let mut d = Decoder::<RuntimeProfile>::default();
        d.event(Event::Apply(profile("gone", "v1".into(), "1")));
        d.event(Event::Init);
        d.event(Event::InitApply(profile("kept", "v1".into(), "2")));
        d.event(Event::InitDone);
        // Its last decodable version was forgotten: an undecodable copy is not made good.
        assert!(
            d.event(Event::Apply(profile("gone", serde_json::json!(1), "3")))
                .is_none()
        );
        assert!(
            d.event(Event::Apply(profile("kept", serde_json::json!(1), "4")))
                .is_some()
        );
    }
}

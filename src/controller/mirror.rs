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
    let events = watcher(
        kube::Api::<K>::all(client.clone()),
        watcher::Config::default(),
    )
    .backoff(super::watch::backoff());
    loaded_cache(events).await
}

/// A cache kept by `events` (managed fields dropped: nothing reads them), its watch owned,
/// returned once loaded.
async fn loaded_cache<K>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) -> anyhow::Result<(Store<K>, Watching)>
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let stream = events
        .modify(|o| o.meta_mut().managed_fields = None)
        .reflect(writer)
        .for_each(|_| futures::future::ready(()));
    let task = Watching::spawn(stream);
    store.wait_until_ready().await?;
    Ok((store, task))
}

/// What a watch read untyped does with an object this version cannot decode, even with
/// its status's misfit fields left out, and of which it had no decodable version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Undecodables {
    /// Left out, as good as absent: a RuntimeProfile nobody can expand with.
    LeaveOut,
    /// The cache is not ready while one that was listed does not decode and is not
    /// deleted: a MemberCluster or FederatedQuota the hub cannot read must be neither
    /// placed on nor forgotten — a member left out would be one whose slices nobody
    /// removes, a quota left out a limit lifted. A typed watch stopped there too, but
    /// without a word; this one names the object and field in an error each time.
    Wait,
}

/// Whether a watch puts back in place, with a JSON merge patch of the status, the status
/// fields it had to leave out: the API server's server-side apply refuses every write to an
/// object its schema no longer fits ("failed to create manager for existing fields"), so
/// the status would never be written again. Only a writer of that status repairs (the
/// hub's leader, for its MemberClusters and FederatedQuotas).
#[derive(Clone)]
pub enum StatusRepair {
    None,
    InPlace(kube::Client),
}

/// [`mirror`] for a kind whose objects another version of pinfed may have stored in a
/// shape this one cannot decode: the watch reads them untyped and the cache holds them as
/// `K`. A field of a status that does not fit is left out, the rest kept (a status is a
/// controller's report, written again by the next round: a hub rolled back to an older
/// version reads its members' statuses the newer one wrote); an object whose spec does not
/// fit goes as `undecodables` says, said once per version, and the cache keeps its last
/// decodable version if it had one. A typed watch failed its whole list on either, and
/// [`mirror`] then never returned: a hub or agent that waited for its cache never started.
pub async fn mirror_decodable<K>(
    client: &kube::Client,
    undecodables: Undecodables,
    repair: StatusRepair,
) -> anyhow::Result<(Store<K>, Watching)>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Send
        + Sync
        + 'static,
{
    loaded_cache(decodable_watch::<K>(
        client,
        watcher::Config::default(),
        undecodables,
        repair,
    ))
    .await
}

/// A watch of every object of `K` (with backoff) that reads them untyped and passes them
/// on as `K` ([`mirror_decodable`]).
pub fn decodable_watch<K>(
    client: &kube::Client,
    config: watcher::Config,
    undecodables: Undecodables,
    repair: StatusRepair,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Send
        + Sync
        + 'static,
{
    let api = kube::Api::<kube::api::DynamicObject>::all_with(
        client.clone(),
        &kube::api::ApiResource::erase::<K>(&()),
    );
    let mut decoder = Decoder::<K>::new(undecodables);
    decoder.repair = repair;
    watcher(api, config)
        .backoff(super::watch::backoff())
        .flat_map(move |ev| {
            let events = match ev {
                Ok(e) => decoder.event(e).into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e)],
            };
            futures::stream::iter(events)
        })
}

/// Every object of `K` that decodes, read untyped and decoded as [`mirror_decodable`]
/// does, for a look that may miss one (connecting members ahead of time): one whose spec
/// does not fit is left out (the watches say why).
pub async fn list_decodable<K>(api: &kube::Api<kube::api::DynamicObject>) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    let list = api.list(&Default::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|o| match decode_object::<K>(o) {
            Ok((k, _)) => Some(k),
            Err(e) => {
                tracing::debug!(error = %format!("{e:#}"), "left out of a list");
                None
            }
        })
        .collect())
}

/// One object read untyped, as `K`, with the status fields left out that do not fit.
pub fn decode_object<K>(o: kube::api::DynamicObject) -> anyhow::Result<(K, Vec<String>)>
where
    K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    let id = object_id(&o);
    let value = serde_json::to_value(&o)?;
    let s = super::compact::decode_salvaging_status::<K>(value)
        .map_err(|why| anyhow::anyhow!("{} {id} cannot be read: {why}", K::kind(&())))?;
    Ok((s.object, s.dropped))
}

fn object_id(o: &kube::api::DynamicObject) -> String {
    let (ns, name) = key_of(o);
    let version = o.metadata.resource_version.as_deref().unwrap_or_default();
    match ns {
        Some(ns) => format!("{ns}/{name}@{version}"),
        None => format!("{name}@{version}"),
    }
}

/// The status fields `dropped` (paths under `status`) as `object` holds them now, or null
/// where it holds none: a merge patch that makes the stored status what was read.
pub fn status_repair_patch<K: serde::Serialize>(
    object: &K,
    dropped: &[String],
) -> serde_json::Value {
    let status = serde_json::to_value(object)
        .ok()
        .and_then(|v| v.get("status").cloned());
    let mut patch = serde_json::Map::new();
    for path in dropped {
        let Some(rest) = path.strip_prefix("status") else {
            continue;
        };
        let field: String = rest
            .trim_start_matches('.')
            .chars()
            .take_while(|c| *c != '.' && *c != '[')
            .collect();
        if field.is_empty() {
            // The whole status was of another type.
            return serde_json::json!({"status": status});
        }
        let value = status
            .as_ref()
            .and_then(|s| s.get(&field))
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        patch.insert(field, value);
    }
    serde_json::json!({"status": patch})
}

fn spawn_status_repair<K>(client: &kube::Client, object: &K, dropped: &[String], id: String)
where
    K: kube::Resource<DynamicType = ()> + serde::Serialize,
{
    let ar = kube::api::ApiResource::erase::<K>(&());
    let api: kube::Api<kube::api::DynamicObject> = match object.meta().namespace.as_deref() {
        Some(ns) => kube::Api::namespaced_with(client.clone(), ns, &ar),
        None => kube::Api::all_with(client.clone(), &ar),
    };
    let name = object.meta().name.clone().unwrap_or_default();
    let patch = status_repair_patch(object, dropped);
    let kind = K::kind(&()).into_owned();
    tokio::spawn(async move {
        let params = kube::api::PatchParams::default();
        match api
            .patch_status(&name, &params, &kube::api::Patch::Merge(&patch))
            .await
        {
            Ok(_) => tracing::info!(%kind, object = %id, "status put back in this version's shape"),
            Err(e) => {
                tracing::warn!(%kind, object = %id, error = %e, "status not put back; its writes fail until it is")
            }
        }
    });
}

/// Turns untyped watch events into events of `K` ([`mirror_decodable`]). Keeps the last
/// decodable version of each object: a Delete of one whose last version does not decode
/// still removes it from the cache.
struct Decoder<K> {
    undecodables: Undecodables,
    repair: StatusRepair,
    last: std::collections::HashMap<ObjectKey, K>,
    /// Objects listed since a relist began (`None`: no relist under way).
    relisting: Option<std::collections::HashSet<ObjectKey>>,
    /// Listed objects the cache waits for ([`Undecodables::Wait`]).
    waiting_for: std::collections::HashSet<ObjectKey>,
    /// A list's end is held back until `waiting_for` is empty.
    list_held: bool,
    /// `namespace/name@resourceVersion` of the versions already said.
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

impl<K> Decoder<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + serde::Serialize,
{
    fn new(undecodables: Undecodables) -> Self {
        Decoder {
            undecodables,
            repair: StatusRepair::None,
            last: Default::default(),
            relisting: None,
            waiting_for: Default::default(),
            list_held: false,
            said: Default::default(),
        }
    }

    fn event(&mut self, ev: watcher::Event<kube::api::DynamicObject>) -> Vec<watcher::Event<K>> {
        use watcher::Event;
        match ev {
            Event::Init => {
                self.relisting = Some(Default::default());
                self.waiting_for.clear();
                self.list_held = false;
                vec![Event::Init]
            }
            Event::InitDone => {
                // Gone while the watch was down: forgotten.
                if let Some(seen) = self.relisting.take() {
                    self.last.retain(|k, _| seen.contains(k));
                }
                if self.waiting_for.is_empty() {
                    vec![Event::InitDone]
                } else {
                    self.list_held = true;
                    vec![]
                }
            }
            Event::InitApply(o) => {
                if let Some(seen) = self.relisting.as_mut() {
                    seen.insert(key_of(&o));
                }
                let listing = true;
                self.decode(o, listing)
                    .map(Event::InitApply)
                    .into_iter()
                    .collect()
            }
            Event::Apply(o) => {
                let decoded = self.decode(o, self.list_held);
                if self.list_held {
                    self.release_list()
                } else {
                    decoded.map(Event::Apply).into_iter().collect()
                }
            }
            Event::Delete(o) => {
                let key = key_of(&o);
                self.waiting_for.remove(&key);
                let removed = self.last.remove(&key);
                if self.list_held {
                    self.release_list()
                } else {
                    removed.map(Event::Delete).into_iter().collect()
                }
            }
        }
    }

    /// The held list, as the cache should hold it, once nothing is waited for.
    fn release_list(&mut self) -> Vec<watcher::Event<K>> {
        if !self.waiting_for.is_empty() {
            return vec![];
        }
        self.list_held = false;
        tracing::info!(kind = %K::kind(&()), "every listed object decodes or is gone; the cache is ready");
        std::iter::once(watcher::Event::Init)
            .chain(self.last.values().cloned().map(watcher::Event::InitApply))
            .chain(std::iter::once(watcher::Event::InitDone))
            .collect()
    }

    /// `o` as `K`, or its last decodable version; `listing`: part of a list the cache is
    /// not ready without.
    fn decode(&mut self, o: kube::api::DynamicObject, listing: bool) -> Option<K> {
        let key = key_of(&o);
        let id = object_id(&o);
        let kind = K::kind(&());
        match decode_object::<K>(o) {
            Ok((k, dropped)) => {
                self.waiting_for.remove(&key);
                if !dropped.is_empty() && self.said.insert(id.clone()) {
                    tracing::warn!(%kind, object = %id, ?dropped, "status fields of another shape left out; the rest is read");
                    if let StatusRepair::InPlace(client) = &self.repair {
                        spawn_status_repair(client, &k, &dropped, id.clone());
                    }
                }
                self.last.insert(key, k.clone());
                Some(k)
            }
            Err(why) => {
                let last = self.last.get(&key).cloned();
                let wait = listing && last.is_none() && self.undecodables == Undecodables::Wait;
                if wait {
                    self.waiting_for.insert(key);
                    // Said every time: nothing of this kind is read meanwhile.
                    tracing::error!(%kind, error = %format!("{why:#}"), "not ready until it decodes or is deleted");
                } else if self.said.insert(id) {
                    let what = if last.is_some() {
                        "its last decodable version is kept"
                    } else {
                        "left out until it changes"
                    };
                    tracing::warn!(%kind, error = %format!("{why:#}"), "{what}");
                }
                last
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

    fn names(events: &[Vec<Event<RuntimeProfile>>]) -> Vec<String> {
        events
            .iter()
            .map(|batch| {
                if batch.is_empty() {
                    return "-".to_string();
                }
                let names: Vec<String> = batch
                    .iter()
                    .map(|e| match e {
                        Event::Init => "init".into(),
                        Event::InitDone => "done".into(),
                        Event::InitApply(p) => format!("list {}={}", p.name_any(), p.spec.version),
                        Event::Apply(p) => format!("apply {}={}", p.name_any(), p.spec.version),
                        Event::Delete(p) => format!("delete {}", p.name_any()),
                    })
                    .collect();
                names.join(", ")
            })
            .collect()
    }

    #[test]
    fn an_undecodable_object_is_left_out_and_an_earlier_decodable_version_kept() {
        let mut d = Decoder::<RuntimeProfile>::new(Undecodables::LeaveOut);
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
        let mut d = Decoder::<RuntimeProfile>::new(Undecodables::LeaveOut);
        d.event(Event::Apply(profile("gone", "v1".into(), "1")));
        d.event(Event::Init);
        d.event(Event::InitApply(profile("kept", "v1".into(), "2")));
        d.event(Event::InitDone);
        // Its last decodable version was forgotten: an undecodable copy is not made good.
        assert!(
            d.event(Event::Apply(profile("gone", serde_json::json!(1), "3")))
                .is_empty()
        );
        assert!(
            !d.event(Event::Apply(profile("kept", serde_json::json!(1), "4")))
                .is_empty()
        );
    }

    #[test]
    fn a_kind_that_waits_is_not_ready_until_what_it_listed_decodes_or_goes() {
        let mut d = Decoder::<RuntimeProfile>::new(Undecodables::Wait);
        let run = |d: &mut Decoder<RuntimeProfile>, events: Vec<Event<DynamicObject>>| {
            let out: Vec<_> = events.into_iter().map(|e| d.event(e)).collect();
            names(&out)
        };
        assert_eq!(
            run(
                &mut d,
                vec![
                    Event::Init,
                    Event::InitApply(profile("good", "v1".into(), "1")),
                    Event::InitApply(profile("bad", serde_json::json!({"x": 1}), "2")),
                    Event::InitApply(profile("worse", serde_json::json!(2), "3")),
                    Event::InitDone,
                ]
            ),
            ["init", "list good=v1", "-", "-", "-"],
            "the list's end is held back"
        );
        assert_eq!(
            run(
                &mut d,
                vec![
                    // Changes meanwhile are kept, not passed on.
                    Event::Apply(profile("good", "v2".into(), "4")),
                    Event::Apply(profile("bad", "v1".into(), "5")),
                ]
            ),
            ["-", "-"],
            "one still does not decode"
        );
        let out = d.event(Event::Delete(profile("worse", serde_json::json!(2), "6")));
        let mut got = names(&[out])[0]
            .split(", ")
            .map(String::from)
            .collect::<Vec<_>>();
        got[1..3].sort();
        assert_eq!(
            got,
            ["init", "list bad=v1", "list good=v2", "done"],
            "the whole list once the last one goes"
        );
        // From then on as usual; a later undecodable version keeps its last good one.
        assert_eq!(
            run(
                &mut d,
                vec![Event::Apply(profile("good", serde_json::json!(3), "7"))]
            ),
            ["apply good=v2"]
        );
    }

    #[test]
    fn a_status_that_does_not_fit_loses_only_its_misfit_fields() {
        use crate::api::federation::MemberCluster;
        let mut d = Decoder::<MemberCluster>::new(Undecodables::Wait);
        let mc: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": "use1a", "resourceVersion": "1"},
            "spec": {"region": "us-east-1"},
            "status": {"nodes": {"ready": 3}, "kubernetesVersion": "v1.36.0"}
        }))
        .unwrap();
        let out = [Event::Init, Event::InitApply(mc), Event::InitDone]
            .into_iter()
            .flat_map(|e| d.event(e))
            .collect::<Vec<_>>();
        assert_eq!(out.len(), 3, "listed and ready");
        let Event::InitApply(mc) = &out[1] else {
            panic!("{out:?}")
        };
        let status = mc.status.as_ref().unwrap();
        assert_eq!(status.nodes, None);
        assert_eq!(status.kubernetes_version.as_deref(), Some("v1.36.0"));
    }

    #[test]
    fn a_repair_puts_back_what_was_read_of_each_field_that_lost_a_part() {
        use crate::api::federation::MemberCluster;
        let value = serde_json::json!({
            "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": "use1a"},
            "spec": {},
            "status": {
                "nodes": 3,
                "kubernetesVersion": {"major": 1},
                "pendingCleanups": [
                    {"kind": "PinterestService", "namespace": "a", "name": "x", "hubUid": "1"},
                    {"kind": "PinterestService", "namespace": "a", "name": 7, "hubUid": "2"}
                ]
            }
        });
        let s =
            crate::controller::compact::decode_salvaging_status::<MemberCluster>(value).unwrap();
        assert_eq!(
            status_repair_patch(&s.object, &s.dropped),
            serde_json::json!({"status": {
                "kubernetesVersion": null,
                "pendingCleanups": [
                    {"kind": "PinterestService", "namespace": "a", "name": "x", "hubUid": "1"}
                ]
            }})
        );
        assert_eq!(
            status_repair_patch(&s.object, &["status".to_string()])["status"]["nodes"],
            3
        );
    }
}

//! What the agent's owned-object watches show: per workload uid, the generated objects of
//! each kind that exist in the member. A prune is answered from it — the workload's
//! objects that the reconcile did not keep — instead of listing ten kinds in the
//! workload's namespace: the API server answers such a LIST by scanning the namespace, so
//! pruning every workload once (each agent start) cost the square of the workloads in a
//! namespace, and the hourly refresh the same again.
//!
//! The index holds what the prune's label selector and owner check would find: objects
//! with our `managed-by` label, the owning kind's `kind` label, and an owner reference
//! to the workload's uid, not being deleted. It knows only the kinds the owning kind's
//! controller watches — the kinds its expansion generates. A watch that starts over keeps
//! its entries until the new listing is complete, then drops what that listing lacked.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::runtime::watcher;

use super::applied::Kept;
use crate::api::common::{LABEL_KIND, LABEL_MANAGED_BY, LABEL_WORKLOAD, MANAGED_BY};
use crate::api::workload::WorkloadKind;

/// (namespace, name) of an object of one kind.
type ObjectKey = (String, String);

/// What the index keeps of one object.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    owners: Vec<String>,
    /// Its `pinterest.com/workload` label.
    workload: String,
}

/// One watch: objects of one kind generated for one owning kind.
#[derive(Default)]
struct Watched {
    /// Its first listing is complete.
    listed: bool,
    /// During a listing: the objects listed so far.
    listing: Option<HashSet<ObjectKey>>,
    objects: HashMap<ObjectKey, Entry>,
    /// Owner uid → its objects' names (the namespace is the owner's) and workload labels.
    by_owner: HashMap<String, BTreeMap<String, String>>,
}

impl Watched {
    fn remove(&mut self, key: &ObjectKey) {
        let Some(old) = self.objects.remove(key) else {
            return;
        };
        for uid in old.owners {
            if let Some(names) = self.by_owner.get_mut(&uid) {
                names.remove(&key.1);
                if names.is_empty() {
                    self.by_owner.remove(&uid);
                }
            }
        }
    }

    fn put(&mut self, key: ObjectKey, entry: Option<Entry>) {
        if self.objects.get(&key) == entry.as_ref() {
            return;
        }
        self.remove(&key);
        if let Some(entry) = entry {
            for uid in &entry.owners {
                self.by_owner
                    .entry(uid.clone())
                    .or_default()
                    .insert(key.1.clone(), entry.workload.clone());
            }
            self.objects.insert(key, entry);
        }
    }
}

/// Per (owning kind, generated kind): the objects its watch shows.
pub struct OwnedIndex {
    streams: Mutex<HashMap<(WorkloadKind, String), Watched>>,
    made: Instant,
}

impl Default for OwnedIndex {
    fn default() -> Self {
        OwnedIndex {
            streams: Mutex::default(),
            made: Instant::now(),
        }
    }
}

impl OwnedIndex {
    /// Time since the index was made (with its agent's controllers).
    pub fn age(&self) -> Duration {
        self.made.elapsed()
    }

    /// Announces a watch of `child` objects generated for `owner` before it runs: the
    /// owner's prunes wait until it has listed.
    pub fn register(&self, owner: WorkloadKind, child: &str) {
        if let Ok(mut s) = self.streams.lock() {
            s.entry((owner, child.to_string())).or_default();
        }
    }

    /// Takes in one event of the watch of `child` objects generated for `owner`.
    pub fn saw<O: kube::Resource>(
        &self,
        owner: WorkloadKind,
        child: &str,
        event: &watcher::Event<O>,
    ) {
        let Ok(mut streams) = self.streams.lock() else {
            return;
        };
        let stream = streams.entry((owner, child.to_string())).or_default();
        match event {
            watcher::Event::Init => stream.listing = Some(HashSet::new()),
            watcher::Event::InitDone => {
                if let Some(listed) = stream.listing.take() {
                    let gone: Vec<ObjectKey> = stream
                        .objects
                        .keys()
                        .filter(|k| !listed.contains(*k))
                        .cloned()
                        .collect();
                    for k in gone {
                        stream.remove(&k);
                    }
                }
                stream.listed = true;
            }
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                let key = object_key(o);
                if let (watcher::Event::InitApply(_), Some(listing)) = (event, &mut stream.listing)
                {
                    listing.insert(key.clone());
                }
                stream.put(key, entry(owner, o));
            }
            watcher::Event::Delete(o) => stream.remove(&object_key(o)),
        }
    }

    /// Whether every watch of objects generated for `owner` has listed.
    pub fn listed(&self, owner: WorkloadKind) -> bool {
        let Ok(streams) = self.streams.lock() else {
            return false;
        };
        streams
            .iter()
            .filter(|((o, _), _)| *o == owner)
            .all(|(_, s)| s.listed)
    }

    /// Whether the watch of `child` objects of `owner` shows `name` owned by workload
    /// `uid` (false when it does not, or has not listed).
    pub fn holds(&self, owner: WorkloadKind, child: &str, uid: &str, name: &str) -> bool {
        let Ok(streams) = self.streams.lock() else {
            return false;
        };
        streams
            .get(&(owner, child.to_string()))
            .and_then(|s| s.by_owner.get(uid))
            .is_some_and(|names| names.contains_key(name))
    }

    /// The objects of workload `uid` (of kind `owner`, whose objects carry the workload
    /// label `workload`) not in `keep`, as (kind, name).
    pub fn unwanted(&self, owner: WorkloadKind, uid: &str, workload: &str, keep: &Kept) -> Answer {
        let Ok(streams) = self.streams.lock() else {
            return Answer::NotWatched("(poisoned)".into());
        };
        // A kind the reconcile applies that no watch of the owning kind covers: the index
        // cannot vouch for it.
        if let Some((kind, _)) = keep
            .iter()
            .find(|(kind, _)| !streams.contains_key(&(owner, kind.clone())))
        {
            return Answer::NotWatched(kind.clone());
        }
        let mut registered = false;
        let mut out = Vec::new();
        for ((o, child), stream) in streams.iter() {
            if *o != owner {
                continue;
            }
            registered = true;
            if !stream.listed {
                return Answer::NotListedYet;
            }
            let Some(names) = stream.by_owner.get(uid) else {
                continue;
            };
            for (name, label) in names {
                if label == workload && !keep.contains(&(child.clone(), name.clone())) {
                    out.push((child.clone(), name.clone()));
                }
            }
        }
        out.sort();
        if registered {
            Answer::Unwanted(out)
        } else {
            Answer::NotWatched(format!("{} (no watch at all)", owner.as_str()))
        }
    }
}

/// What the index can say of a workload's unwanted objects.
#[derive(Debug, PartialEq)]
pub enum Answer {
    /// These, as (kind, name).
    Unwanted(Vec<(String, String)>),
    /// A watch of the owning kind has not completed its first listing.
    NotListedYet,
    /// No watch of the owning kind covers this generated kind.
    NotWatched(String),
}

fn object_key<O: kube::Resource>(o: &O) -> ObjectKey {
    (
        o.meta().namespace.clone().unwrap_or_default(),
        o.meta().name.clone().unwrap_or_default(),
    )
}

/// What the index keeps of `o`, or None when a prune of an `owner` workload would not
/// touch it (not ours, not that kind's, or being deleted).
fn entry<O: kube::Resource>(owner: WorkloadKind, o: &O) -> Option<Entry> {
    let meta = o.meta();
    if meta.deletion_timestamp.is_some() {
        return None;
    }
    let labels = meta.labels.as_ref()?;
    if labels.get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGED_BY)
        || labels.get(LABEL_KIND).map(String::as_str) != Some(owner.as_str())
    {
        return None;
    }
    let owners: Vec<String> = meta
        .owner_references
        .iter()
        .flatten()
        .map(|r| r.uid.clone())
        .collect();
    (!owners.is_empty()).then(|| Entry {
        owners,
        workload: labels.get(LABEL_WORKLOAD).cloned().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use kube::api::ObjectMeta;
    use kube::core::PartialObjectMeta;

    const SVC: WorkloadKind = WorkloadKind::Service;

    fn obj(name: &str, owner: &str, workload: &str, kind: &str) -> PartialObjectMeta<Deployment> {
        PartialObjectMeta {
            types: None,
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                labels: Some(
                    [
                        (LABEL_MANAGED_BY, MANAGED_BY),
                        (LABEL_KIND, kind),
                        (LABEL_WORKLOAD, workload),
                    ]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ),
                owner_references: Some(vec![OwnerReference {
                    uid: owner.into(),
                    controller: Some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            _phantom: Default::default(),
        }
    }

    fn web(name: &str) -> PartialObjectMeta<Deployment> {
        obj(name, "u1", "web", SVC.as_str())
    }

    fn listed(objects: Vec<PartialObjectMeta<Deployment>>) -> OwnedIndex {
        let i = OwnedIndex::default();
        i.register(SVC, "Deployment");
        i.saw(
            SVC,
            "Deployment",
            &watcher::Event::<PartialObjectMeta<Deployment>>::Init,
        );
        for o in objects {
            i.saw(SVC, "Deployment", &watcher::Event::InitApply(o));
        }
        i.saw(
            SVC,
            "Deployment",
            &watcher::Event::<PartialObjectMeta<Deployment>>::InitDone,
        );
        i
    }

    fn kept(names: &[&str]) -> Kept {
        names
            .iter()
            .map(|n| ("Deployment".to_string(), n.to_string()))
            .collect()
    }

    fn unwanted(i: &OwnedIndex, keep: &[&str]) -> Option<Vec<String>> {
        match i.unwanted(SVC, "u1", "web", &kept(keep)) {
            Answer::Unwanted(v) => Some(v.into_iter().map(|(_, n)| n).collect()),
            _ => None,
        }
    }

    #[test]
    fn a_workloads_objects_it_did_not_keep_are_unwanted() {
        let mut going = web("web-going");
        going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let mut foreign = web("web-foreign");
        foreign
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .remove(LABEL_MANAGED_BY);
        let i = listed(vec![
            web("web"),
            web("web-old"),
            going,
            foreign,
            obj("other", "u2", "other", SVC.as_str()),
            obj("web-relabelled", "u1", "another", SVC.as_str()),
            obj(
                "web-trainer",
                "u1",
                "web",
                WorkloadKind::TrainingJob.as_str(),
            ),
        ]);
        assert_eq!(unwanted(&i, &["web"]), Some(vec!["web-old".to_string()]));
        assert_eq!(
            unwanted(&i, &[]),
            Some(vec!["web".to_string(), "web-old".to_string()])
        );
        assert_eq!(
            i.unwanted(SVC, "u9", "web", &kept(&[])),
            Answer::Unwanted(vec![]),
            "a workload without objects has nothing to prune"
        );
        // The reconcile applied a kind no watch of services covers: no answer.
        let mut keep = kept(&["web"]);
        keep.insert(("ConfigMap".into(), "web".into()));
        assert_eq!(
            i.unwanted(SVC, "u1", "web", &keep),
            Answer::NotWatched("ConfigMap".into())
        );
    }

    #[test]
    fn nothing_is_answered_until_every_watch_of_the_kind_has_listed() {
        let i = OwnedIndex::default();
        assert_eq!(
            i.unwanted(SVC, "u1", "web", &Kept::new()),
            Answer::NotWatched("PinterestService (no watch at all)".into())
        );
        i.register(SVC, "Deployment");
        i.register(SVC, "ConfigMap");
        i.saw(
            SVC,
            "Deployment",
            &watcher::Event::<PartialObjectMeta<Deployment>>::Init,
        );
        i.saw(
            SVC,
            "Deployment",
            &watcher::Event::InitApply(web("web-old")),
        );
        assert_eq!(
            i.unwanted(SVC, "u1", "web", &Kept::new()),
            Answer::NotListedYet,
            "Deployments still listing"
        );
        i.saw(
            SVC,
            "Deployment",
            &watcher::Event::<PartialObjectMeta<Deployment>>::InitDone,
        );
        assert_eq!(unwanted(&i, &[]), None, "ConfigMaps not listed yet");
        i.saw(
            SVC,
            "ConfigMap",
            &watcher::Event::<PartialObjectMeta<Deployment>>::Init,
        );
        i.saw(
            SVC,
            "ConfigMap",
            &watcher::Event::<PartialObjectMeta<Deployment>>::InitDone,
        );
        assert_eq!(unwanted(&i, &[]), Some(vec!["web-old".to_string()]));
        assert_eq!(
            i.unwanted(WorkloadKind::CronJob, "u1", "web", &Kept::new()),
            Answer::NotWatched("PinterestCronJob (no watch at all)".into()),
            "another kind's watches are not this kind's"
        );
    }

    #[test]
    fn events_after_the_listing_and_a_new_listing_keep_it_current() {
        let i = listed(vec![web("web"), web("web-a")]);
        i.saw(SVC, "Deployment", &watcher::Event::Apply(web("web-b")));
        i.saw(SVC, "Deployment", &watcher::Event::Delete(web("web-a")));
        assert_eq!(unwanted(&i, &["web"]), Some(vec!["web-b".to_string()]));
        // Marked for deletion: on its way out.
        let mut going = web("web-b");
        going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        i.saw(SVC, "Deployment", &watcher::Event::Apply(going));
        assert_eq!(unwanted(&i, &["web"]), Some(vec![]));
        // The watch starts over: old entries stand until the listing is done, new ones
        // count at once, and what the new listing lacks is dropped at its end.
        i.saw(SVC, "Deployment", &watcher::Event::Apply(web("web-c")));
        i.saw(
            SVC,
            "Deployment",
            &watcher::Event::<PartialObjectMeta<Deployment>>::Init,
        );
        i.saw(SVC, "Deployment", &watcher::Event::InitApply(web("web-d")));
        assert_eq!(
            unwanted(&i, &["web"]),
            Some(vec!["web-c".to_string(), "web-d".to_string()])
        );
        i.saw(SVC, "Deployment", &watcher::Event::InitApply(web("web")));
        i.saw(
            SVC,
            "Deployment",
            &watcher::Event::<PartialObjectMeta<Deployment>>::InitDone,
        );
        assert_eq!(unwanted(&i, &["web"]), Some(vec!["web-d".to_string()]));
        assert_eq!(
            unwanted(&i, &[]),
            Some(vec!["web".to_string(), "web-d".to_string()])
        );
    }
}

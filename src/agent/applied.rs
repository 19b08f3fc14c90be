//! What this agent last applied for each workload. A reconcile whose expansion is the same
//! as the last complete apply, recently, skips the server-side applies: every status change
//! of a Deployment (each pod that turns Ready) triggers its workload, and re-applying four
//! or five unchanged objects each time was most of the agent's writes, allocations and
//! member API server load during a rollout.
//!
//! The record is dropped — so the next reconcile applies again — when an object it covers
//! is deleted, when its `metadata.generation` moves past what our apply returned (someone
//! else changed its spec), when the workload goes away, and after [`APPLY_AT_LEAST_EVERY`]
//! (drift that changes no generation, e.g. a label edited on a Service, is repaired then),
//! and for every workload when a watch of owned objects starts over (it may have missed a
//! deletion).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::watcher;

/// Objects are applied again at least this often, changed or not.
pub const APPLY_AT_LEAST_EVERY: Duration = Duration::from_secs(300);

/// (kind, name) of a generated object; the namespace is the workload's.
type Generated = (String, String);

struct Record {
    digest: u64,
    at: Instant,
    /// Each applied object and the generation the API server returned for it (objects
    /// without a generation, such as ConfigMaps, have none).
    generations: Vec<(Generated, Option<i64>)>,
}

/// Per workload uid, its last complete apply.
#[derive(Default)]
pub struct AppliedBook {
    by_owner: Mutex<HashMap<String, Record>>,
}

/// A digest of the objects an expansion produced, in order.
pub fn digest(objects: &[DynamicObject]) -> Result<u64, serde_json::Error> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for o in objects {
        serde_json::to_vec(o)?.hash(&mut h);
    }
    Ok(h.finish())
}

impl AppliedBook {
    /// Whether `objects` (with this digest) were completely applied for `uid` recently.
    pub fn unchanged(&self, uid: &str, digest: u64) -> bool {
        self.by_owner.lock().is_ok_and(|m| {
            m.get(uid)
                .is_some_and(|r| r.digest == digest && r.at.elapsed() < APPLY_AT_LEAST_EVERY)
        })
    }

    /// Records a complete apply for `uid`.
    pub fn record(&self, uid: &str, digest: u64, generations: Vec<(Generated, Option<i64>)>) {
        if let Ok(mut m) = self.by_owner.lock() {
            // Records of workloads deleted while this agent was not looking expire.
            if m.len() % 1024 == 1023 {
                m.retain(|_, r| r.at.elapsed() < APPLY_AT_LEAST_EVERY);
            }
            m.insert(
                uid.to_string(),
                Record {
                    digest,
                    at: Instant::now(),
                    generations,
                },
            );
        }
    }

    pub fn forget(&self, uid: &str) {
        if let Ok(mut m) = self.by_owner.lock() {
            m.remove(uid);
        }
    }

    /// Takes note of an owned-object watch event: a deletion, or a spec generation this
    /// agent did not write, drops the owner's record.
    pub fn saw<Child: kube::Resource<DynamicType = ()>>(&self, event: &watcher::Event<Child>) {
        let (object, deleted) = match event {
            watcher::Event::Delete(o) => (o, true),
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => (o, false),
            // A re-list: deletions during the gap are not reported; start over.
            watcher::Event::Init => {
                if let Ok(mut m) = self.by_owner.lock() {
                    m.clear();
                }
                return;
            }
            watcher::Event::InitDone => return,
        };
        let Some(owner) = object
            .owner_references()
            .iter()
            .find(|r| r.controller == Some(true))
        else {
            return;
        };
        let Ok(mut m) = self.by_owner.lock() else {
            return;
        };
        let stale = m.get(&owner.uid).is_some_and(|r| {
            deleted || {
                let kind = Child::kind(&()).to_string();
                let name = object.name_any();
                r.generations
                    .iter()
                    .find(|((k, n), _)| *k == kind && *n == name)
                    .is_some_and(|(_, g)| g.is_some() && object.meta().generation > *g)
            }
        });
        if stale {
            m.remove(&owner.uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::ObjectMeta;
    use kube::core::PartialObjectMeta;

    fn owned(name: &str, generation: Option<i64>) -> PartialObjectMeta<Deployment> {
        PartialObjectMeta {
            types: None,
            metadata: ObjectMeta {
                name: Some(name.into()),
                generation,
                owner_references: Some(vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                        uid: "u1".into(),
                        controller: Some(true),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            },
            _phantom: Default::default(),
        }
    }

    fn book() -> AppliedBook {
        let b = AppliedBook::default();
        b.record(
            "u1",
            7,
            vec![
                (("Deployment".into(), "web".into()), Some(3)),
                (("ConfigMap".into(), "web".into()), None),
            ],
        );
        b
    }

    #[test]
    fn the_same_objects_are_not_applied_again_until_something_changes() {
        let b = book();
        assert!(b.unchanged("u1", 7));
        assert!(!b.unchanged("u1", 8), "another expansion applies");
        assert!(!b.unchanged("u2", 7), "another workload applies");
        // Our own write, seen through the watch: same generation, the record stays.
        b.saw(&watcher::Event::Apply(owned("web", Some(3))));
        assert!(b.unchanged("u1", 7));
        // Someone else changed the spec: apply again.
        b.saw(&watcher::Event::Apply(owned("web", Some(4))));
        assert!(!b.unchanged("u1", 7));
    }

    #[test]
    fn a_deleted_object_or_workload_is_applied_again() {
        let b = book();
        b.saw(&watcher::Event::Delete(owned("web", Some(3))));
        assert!(!b.unchanged("u1", 7));
        let b = book();
        b.forget("u1");
        assert!(!b.unchanged("u1", 7));
        let b = book();
        b.saw::<Deployment>(&watcher::Event::Init);
        assert!(!b.unchanged("u1", 7), "a re-list may have missed deletions");
    }
}

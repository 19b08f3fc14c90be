//! What this agent last applied and pruned for each workload. A reconcile whose expansion
//! is the same as the last complete apply skips the server-side applies: every status
//! change of a Deployment (each pod that turns Ready) triggers its workload, and
//! re-applying four or five unchanged objects each time was most of the agent's writes,
//! allocations and member API server load during a rollout.
//!
//! The apply record is dropped — so the next reconcile applies again — when an object it
//! covers is deleted, when its `metadata.generation` moves past what our apply returned
//! (someone else changed its spec), when the workload goes away, after [`REFRESH_EVERY`]
//! (drift that changes no generation, e.g. a label edited on a Service, is repaired then),
//! and for every workload when a watch of owned objects starts over (it may have missed a
//! deletion). Prunes need no record: they are answered from the owned-object watches
//! (`owned`).

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::watcher;

/// Objects are applied again at least this often per workload, changed or not — plus up
/// to a quarter more, set by the workload's uid, so that workloads created together do not
/// all come due together. It was 5 minutes, with a listing prune: with 10,000 services in
/// a member that was 67 applies and 330 namespace LISTs a second for nothing, and a first
/// sync of 10,000 slowed from ~50 to ~7 services a second once its first slices came due.
pub const REFRESH_EVERY: Duration = Duration::from_secs(3600);

/// When a record made now for `uid` comes due.
fn due(uid: &str) -> Instant {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    uid.hash(&mut h);
    let spread = REFRESH_EVERY / 4 * u32::try_from(h.finish() % 1024).unwrap_or(0) / 1024;
    Instant::now() + REFRESH_EVERY + spread
}

/// (kind, name) of a generated object; the namespace is the workload's.
type Generated = (String, String);

/// (kind, name) of the generated objects a reconcile keeps.
pub type Kept = BTreeSet<Generated>;

/// The uid of the workload that controls `object`, if any.
fn controller_uid<Child: kube::Resource>(object: &Child) -> Option<&str> {
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

struct Record {
    digest: u64,
    due: Instant,
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
                .is_some_and(|r| r.digest == digest && Instant::now() < r.due)
        })
    }

    /// Records a complete apply for `uid`.
    pub fn record(&self, uid: &str, digest: u64, generations: Vec<(Generated, Option<i64>)>) {
        if let Ok(mut m) = self.by_owner.lock() {
            // Records of workloads deleted while this agent was not looking expire.
            if m.len() % 1024 == 1023 {
                let now = Instant::now();
                m.retain(|_, r| now < r.due);
            }
            m.insert(
                uid.to_string(),
                Record {
                    digest,
                    due: due(uid),
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
        let Some(owner) = controller_uid(object) else {
            return;
        };
        let Ok(mut m) = self.by_owner.lock() else {
            return;
        };
        let stale = m.get(owner).is_some_and(|r| {
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
            m.remove(owner);
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

    #[test]
    fn records_come_due_after_the_refresh_period_spread_by_uid() {
        let now = Instant::now();
        let dues: Vec<Duration> = (0..64)
            .map(|i| due(&format!("uid-{i}")).duration_since(now))
            .collect();
        for d in &dues {
            assert!(
                *d >= REFRESH_EVERY
                    && *d < REFRESH_EVERY + REFRESH_EVERY / 4 + Duration::from_secs(1),
                "{d:?}"
            );
        }
        let spread = dues
            .iter()
            .max()
            .unwrap()
            .saturating_sub(*dues.iter().min().unwrap());
        assert!(
            spread > REFRESH_EVERY / 8,
            "64 uids spread over {spread:?} only"
        );
        let again = due("uid-3").duration_since(now);
        assert!(
            again.abs_diff(dues[3]) < Duration::from_secs(1),
            "the same uid, the same spread"
        );
    }
}

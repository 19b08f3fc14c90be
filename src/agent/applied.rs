//! What this agent last applied and pruned for each workload. A reconcile whose expansion
//! is the same as the last complete apply skips the server-side applies: every status
//! change of a Deployment (each pod that turns Ready) triggers its workload, and
//! re-applying four or five unchanged objects each time was most of the agent's writes,
//! allocations and member API server load during a rollout.
//!
//! The apply record is dropped — so the next reconcile applies again, within seconds of
//! the edit — when an owned-object watch shows that an object it covers changed under us
//! ([`Fingerprint`]): deleted; for kinds whose status moves all the time (Deployments,
//! StatefulSets, DaemonSets, Jobs, CronJobs, PDBs) a `metadata.generation` past what our
//! apply returned or a label or annotation we set with another value; for every other
//! kind (Services, Ingresses, ConfigMaps, ...) any other `resourceVersion` than our
//! apply's. It is also dropped when the workload goes away and after [`REFRESH_EVERY`] (a
//! net under the watches). When a watch of owned objects starts over, its re-list is
//! checked object by object like any event, and a record covering an object of that kind
//! the re-list no longer shows (deleted during the gap) is dropped at its end. (Every
//! record was dropped at each re-list before: on a loaded member API server, where
//! watches start over often, every workload re-applied everything each time, and the
//! re-applies loaded it more: a 20-member first sync went from ~25 to ~3 services a
//! second.) Prunes need no record: they are answered from the owned-object watches
//! (`owned`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
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

/// Kinds whose status changes all the time (every pod that turns Ready): a new
/// `resourceVersion` says nothing about their spec, so their generation and our labels
/// and annotations are compared instead.
const STATUS_HEAVY: [&str; 6] = [
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "CronJob",
    "PodDisruptionBudget",
];

/// What an applied object looked like right after our apply, enough to tell from a
/// metadata-only watch event whether someone else changed it since.
#[derive(Clone, Debug, PartialEq)]
pub struct Fingerprint {
    /// `metadata.generation` as our apply returned it.
    pub generation: Option<i64>,
    /// `metadata.resourceVersion` as our apply returned it.
    pub resource_version: Option<String>,
    /// The label and annotation keys we set (shared between objects that set the same),
    /// and a hash of their values as our apply returned them.
    pub metadata: (Arc<[String]>, u64),
}

/// A hash of the values of `keys` (`l:` labels, `a:` annotations) in `meta`; a missing
/// key hashes differently from any value.
fn metadata_hash(keys: &[String], meta: &kube::api::ObjectMeta) -> u64 {
    let empty = BTreeMap::new();
    let labels = meta.labels.as_ref().unwrap_or(&empty);
    let annotations = meta.annotations.as_ref().unwrap_or(&empty);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for k in keys {
        let value = match k.split_at(2) {
            ("l:", key) => labels.get(key),
            (_, key) => annotations.get(key),
        };
        value.hash(&mut h);
    }
    h.finish()
}

impl Fingerprint {
    /// Whether `object` (as a watch shows it) is no longer what our apply left.
    fn changed_by_others(&self, kind: &str, object: &kube::api::ObjectMeta) -> bool {
        if STATUS_HEAVY.contains(&kind) {
            object.generation > self.generation
                || metadata_hash(&self.metadata.0, object) != self.metadata.1
        } else {
            object.resource_version != self.resource_version
        }
    }
}

struct Record {
    digest: u64,
    due: Instant,
    /// Each applied object as our apply left it.
    objects: Vec<(Generated, Fingerprint)>,
}

/// An apply under way: the objects applied so far, and whether someone changed one of
/// them since (then the apply is not recorded, and the reconcile that change triggered
/// applies again).
#[derive(Default)]
struct Applying {
    objects: Vec<(Generated, Fingerprint)>,
    changed: bool,
}

/// Per workload uid, its last complete apply.
#[derive(Default)]
pub struct AppliedBook {
    by_owner: Mutex<HashMap<String, Record>>,
    /// Per workload uid, its apply under way: a change seen between an object's apply and
    /// the record of the whole would otherwise find no record to drop and be lost.
    applying: Mutex<HashMap<String, Applying>>,
    /// The distinct sets of label and annotation keys objects were applied with (a few
    /// per kind): each record points at one instead of holding its own.
    key_sets: Mutex<HashSet<Arc<[String]>>>,
    /// Per generated kind being re-listed, the (owner uid, name) of the objects listed so
    /// far. (Two watches of one kind, for two workload kinds, list the same objects: if
    /// their re-lists overlap, one may find fewer and drop records that were still good,
    /// which costs an apply, never a missed change.)
    listing: Mutex<HashMap<String, HashSet<(String, String)>>>,
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

    /// The fingerprint of `applied` (as our apply returned it) of the object `desired`.
    pub fn fingerprint(
        &self,
        desired: &kube::api::ObjectMeta,
        applied: &kube::api::ObjectMeta,
    ) -> Fingerprint {
        let keys: Vec<String> = desired
            .labels
            .iter()
            .flatten()
            .map(|(k, _)| format!("l:{k}"))
            .chain(
                desired
                    .annotations
                    .iter()
                    .flatten()
                    .map(|(k, _)| format!("a:{k}")),
            )
            .collect();
        let keys: Arc<[String]> = match self.key_sets.lock() {
            Ok(mut sets) => match sets.get(keys.as_slice()) {
                Some(shared) => shared.clone(),
                None => {
                    let shared: Arc<[String]> = keys.into();
                    sets.insert(shared.clone());
                    shared
                }
            },
            Err(_) => keys.into(),
        };
        let hash = metadata_hash(&keys, applied);
        Fingerprint {
            generation: applied.generation,
            resource_version: applied.resource_version.clone(),
            metadata: (keys, hash),
        }
    }

    /// Starts an apply for `uid`; [`Self::applied`] notes each object, [`Self::record`]
    /// the whole.
    pub fn begin(&self, uid: &str) {
        if let Ok(mut m) = self.applying.lock() {
            m.insert(uid.to_string(), Applying::default());
        }
    }

    /// Notes one object of the apply under way for `uid`.
    pub fn applied(&self, uid: &str, object: Generated, fingerprint: Fingerprint) {
        if let Ok(mut m) = self.applying.lock()
            && let Some(a) = m.get_mut(uid)
        {
            a.objects.push((object, fingerprint));
        }
    }

    /// Records the apply under way for `uid` as complete, unless one of its objects was
    /// changed by someone else since it was applied. Returns whether it was recorded.
    pub fn record(&self, uid: &str, digest: u64) -> bool {
        let Some(done) = self.applying.lock().ok().and_then(|mut m| m.remove(uid)) else {
            return false;
        };
        let Ok(mut m) = self.by_owner.lock() else {
            return false;
        };
        if done.changed {
            m.remove(uid);
            return false;
        }
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
                objects: done.objects,
            },
        );
        true
    }

    /// The generation our last complete apply for `uid` gave the object `kind`/`name`.
    pub fn generation(&self, uid: &str, kind: &str, name: &str) -> Option<i64> {
        let m = self.by_owner.lock().ok()?;
        m.get(uid)?
            .objects
            .iter()
            .find(|((k, n), _)| k == kind && n == name)
            .and_then(|(_, f)| f.generation)
    }

    pub fn forget(&self, uid: &str) {
        if let Ok(mut m) = self.by_owner.lock() {
            m.remove(uid);
        }
        if let Ok(mut m) = self.applying.lock() {
            m.remove(uid);
        }
    }

    /// Takes note of an owned-object watch event: a deletion, or a change this agent did
    /// not make ([`Fingerprint`]), drops the owner's record. Returns whether it did (the
    /// object drifted from what was applied).
    pub fn saw<Child: kube::Resource<DynamicType = ()>>(
        &self,
        event: &watcher::Event<Child>,
    ) -> bool {
        let kind = Child::kind(&());
        let (object, deleted) = match event {
            watcher::Event::Delete(o) => (o, true),
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => (o, false),
            // A re-list: what it shows is checked as it comes; deletions during the gap are
            // not reported, so what it did not show is found at its end.
            watcher::Event::Init => {
                if let Ok(mut l) = self.listing.lock() {
                    l.insert(kind.to_string(), HashSet::new());
                }
                return false;
            }
            watcher::Event::InitDone => return self.listed(&kind),
        };
        let Some(owner) = controller_uid(object) else {
            return false;
        };
        let name = object.name_any();
        if let watcher::Event::InitApply(_) = event
            && let Ok(mut l) = self.listing.lock()
            && let Some(listed) = l.get_mut(kind.as_ref())
        {
            listed.insert((owner.to_string(), name.clone()));
        }
        let drifted = |objects: &[(Generated, Fingerprint)]| {
            objects
                .iter()
                .find(|((k, n), _)| *k == kind && *n == name)
                .is_some_and(|(_, f)| deleted || f.changed_by_others(&kind, object.meta()))
        };
        // An apply under way: an object it applied already and someone changed since.
        // (One it has not applied yet is set right by that apply.)
        let mut changed = false;
        if let Ok(mut m) = self.applying.lock()
            && let Some(a) = m.get_mut(owner)
            && drifted(&a.objects)
        {
            a.changed = true;
            changed = true;
        }
        let Ok(mut m) = self.by_owner.lock() else {
            return changed;
        };
        let stale = m.get(owner).is_some_and(|r| deleted || drifted(&r.objects));
        if stale {
            m.remove(owner);
        }
        stale || changed
    }

    /// The end of a re-list of `kind`: a record or an apply under way that covers an
    /// object of that kind the re-list did not show is stale (the object was deleted
    /// while the watch was down, or applied after the list was taken). Returns whether
    /// one was.
    fn listed(&self, kind: &str) -> bool {
        let Some(listed) = self.listing.lock().ok().and_then(|mut l| l.remove(kind)) else {
            return false;
        };
        let missing = |owner: &str, objects: &[(Generated, Fingerprint)]| {
            objects
                .iter()
                .any(|((k, n), _)| k == kind && !listed.contains(&(owner.to_string(), n.clone())))
        };
        let mut any = false;
        if let Ok(mut m) = self.applying.lock() {
            for (owner, a) in m.iter_mut() {
                if missing(owner, &a.objects) {
                    a.changed = true;
                    any = true;
                }
            }
        }
        if let Ok(mut m) = self.by_owner.lock() {
            let before = m.len();
            m.retain(|owner, r| !missing(owner, &r.objects));
            any |= m.len() < before;
        }
        any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::ObjectMeta;
    use kube::core::PartialObjectMeta;

    /// An owned object's metadata as a watch shows it.
    fn meta(name: &str, generation: Option<i64>, version: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            generation,
            resource_version: Some(version.into()),
            labels: Some([("pinterest.com/team".to_string(), "ads".to_string())].into()),
            annotations: Some([("pinterest.com/contact".to_string(), "c".to_string())].into()),
            owner_references: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    uid: "u1".into(),
                    controller: Some(true),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }
    }

    fn owned<K>(metadata: ObjectMeta) -> PartialObjectMeta<K> {
        PartialObjectMeta {
            types: None,
            metadata,
            _phantom: Default::default(),
        }
    }

    fn owned_deployment(name: &str, generation: Option<i64>) -> PartialObjectMeta<Deployment> {
        owned(meta(name, generation, "10"))
    }

    /// A book with one apply of u1: Deployment web at generation 3, Service web at
    /// version 20.
    fn book() -> AppliedBook {
        let b = AppliedBook::default();
        b.begin("u1");
        apply_both(&b);
        assert!(b.record("u1", 7));
        b
    }

    fn apply_both(b: &AppliedBook) {
        let deployment = b.fingerprint(&meta("web", None, ""), &meta("web", Some(3), "10"));
        b.applied("u1", ("Deployment".into(), "web".into()), deployment);
        let service = b.fingerprint(&meta("web", None, ""), &meta("web", None, "20"));
        b.applied("u1", ("Service".into(), "web".into()), service);
    }

    #[test]
    fn a_change_seen_while_the_apply_is_under_way_is_not_lost() {
        use k8s_openapi::api::core::v1::Service;
        let b = AppliedBook::default();
        b.begin("u1");
        apply_both(&b);
        // Our own writes come back through the watch: nothing changed.
        b.saw(&watcher::Event::Apply(owned_deployment("web", Some(3))));
        b.saw(&watcher::Event::Apply(owned::<Service>(meta(
            "web", None, "20",
        ))));
        assert!(b.record("u1", 7));
        assert!(b.unchanged("u1", 7));
        // A label edited after the Deployment's apply, before the whole is recorded.
        b.begin("u1");
        apply_both(&b);
        let mut edited = meta("web", Some(3), "11");
        edited.labels = None;
        assert!(b.saw(&watcher::Event::Apply(owned::<Deployment>(edited))));
        assert!(!b.record("u1", 7), "not recorded");
        assert!(!b.unchanged("u1", 7), "the next reconcile applies again");
        // An object the apply has not reached yet is set right by that apply.
        b.begin("u1");
        assert!(!b.saw(&watcher::Event::Apply(owned::<Service>(meta(
            "web", None, "25"
        )))));
        apply_both(&b);
        assert!(b.record("u1", 7));
    }

    #[test]
    fn the_same_objects_are_not_applied_again_until_something_changes() {
        let b = book();
        assert!(b.unchanged("u1", 7));
        assert!(!b.unchanged("u1", 8), "another expansion applies");
        assert!(!b.unchanged("u2", 7), "another workload applies");
        // Our own write, seen through the watch: same generation, the record stays.
        b.saw(&watcher::Event::Apply(owned_deployment("web", Some(3))));
        assert!(b.unchanged("u1", 7));
        // Someone else changed the spec: apply again.
        assert!(b.saw(&watcher::Event::Apply(owned_deployment("web", Some(4)))));
        assert!(!b.unchanged("u1", 7));
    }

    #[test]
    fn a_deployments_status_is_not_a_change_but_an_edited_label_is() {
        let b = book();
        // A status write: new version, same generation and metadata.
        let mut status = meta("web", Some(3), "11");
        b.saw(&watcher::Event::Apply(owned::<Deployment>(status.clone())));
        // Another controller's annotation (the Deployment's revision) is not ours.
        status
            .annotations
            .as_mut()
            .unwrap()
            .insert("deployment.kubernetes.io/revision".into(), "2".into());
        b.saw(&watcher::Event::Apply(owned::<Deployment>(status.clone())));
        assert!(b.unchanged("u1", 7), "status and others' annotations");
        // A label we set, edited: apply again.
        let mut edited = status;
        edited
            .labels
            .as_mut()
            .unwrap()
            .insert("pinterest.com/team".into(), "other".into());
        b.saw(&watcher::Event::Apply(owned::<Deployment>(edited)));
        assert!(!b.unchanged("u1", 7));
        // An annotation we set, removed: apply again.
        let b = book();
        let mut removed = meta("web", Some(3), "12");
        removed.annotations = None;
        b.saw(&watcher::Event::Apply(owned::<Deployment>(removed)));
        assert!(!b.unchanged("u1", 7));
    }

    #[test]
    fn any_other_version_of_a_service_is_a_change() {
        use k8s_openapi::api::core::v1::Service;
        let b = book();
        // Our apply, seen through the watch.
        b.saw(&watcher::Event::Apply(owned::<Service>(meta(
            "web", None, "20",
        ))));
        assert!(b.unchanged("u1", 7));
        // Its port edited by hand (a Service has no generation to show it).
        b.saw(&watcher::Event::Apply(owned::<Service>(meta(
            "web", None, "21",
        ))));
        assert!(!b.unchanged("u1", 7));
    }

    #[test]
    fn objects_applied_with_the_same_keys_share_them() {
        let b = AppliedBook::default();
        let one = b.fingerprint(&meta("a", None, ""), &meta("a", None, "1"));
        let two = b.fingerprint(&meta("b", None, ""), &meta("b", None, "2"));
        assert!(Arc::ptr_eq(&one.metadata.0, &two.metadata.0));
        assert_eq!(one.metadata.1, two.metadata.1, "the same values");
    }

    #[test]
    fn a_deleted_object_or_workload_is_applied_again() {
        let b = book();
        b.saw(&watcher::Event::Delete(owned_deployment("web", Some(3))));
        assert!(!b.unchanged("u1", 7));
        let b = book();
        b.forget("u1");
        assert!(!b.unchanged("u1", 7));
    }

    #[test]
    fn a_relist_drops_only_the_records_of_what_changed_or_went_missing() {
        use k8s_openapi::api::core::v1::Service;
        let relist = |b: &AppliedBook, deployments: Vec<PartialObjectMeta<Deployment>>| {
            b.saw::<Deployment>(&watcher::Event::Init);
            for d in deployments {
                b.saw(&watcher::Event::InitApply(d));
            }
            b.saw::<Deployment>(&watcher::Event::InitDone)
        };
        // Everything as applied: the record stays, and nothing counts as drift.
        let b = book();
        assert!(!relist(&b, vec![owned_deployment("web", Some(3))]));
        assert!(b.unchanged("u1", 7), "an unchanged re-list applies nothing");
        // Changed while the watch was down: shown changed, dropped at once.
        let b = book();
        b.saw::<Deployment>(&watcher::Event::Init);
        assert!(b.saw(&watcher::Event::InitApply(owned_deployment("web", Some(4)))));
        assert!(!b.unchanged("u1", 7));
        // Deleted while the watch was down: not shown, dropped at the end of the re-list.
        let b = book();
        assert!(relist(&b, vec![]), "a deletion in the gap is drift");
        assert!(
            !b.unchanged("u1", 7),
            "a re-list that misses an object re-applies it"
        );
        // A re-list of another kind says nothing about Deployments.
        let b = book();
        b.saw::<Service>(&watcher::Event::Init);
        b.saw(&watcher::Event::InitApply(owned::<Service>(meta(
            "web", None, "20",
        ))));
        assert!(!b.saw::<Service>(&watcher::Event::InitDone));
        assert!(b.unchanged("u1", 7));
        // An apply under way whose object the re-list missed is not recorded.
        let b = AppliedBook::default();
        b.begin("u1");
        apply_both(&b);
        relist(&b, vec![]);
        assert!(
            !b.record("u1", 7),
            "applied after the list was taken, or deleted"
        );
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

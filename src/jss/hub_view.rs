//! The JSS's side of the hub: caches of members, profiles and quotas; live reads of
//! workloads; server-side apply and delete as `pinfed-jss`. The only module of the JSS
//! that holds a client.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};

use super::admission::{Admitted, FIELD_MANAGER};
use crate::controller::retry::repeatable;

/// The field manager of the annotations `pinfed rollout approve|pause|resume` write.
pub const ROLLOUT_FIELD_MANAGER: &str = "pinfed-jss-rollout";
use super::error::{Detail, Rejection};
use super::quota::{requested, whole_pods};
use crate::api::federation::{FederatedQuota, MemberCluster};
use crate::api::kind::api_resource;
use crate::api::rollout::LABEL_REVISION_OF;
use crate::api::runtime_profile::RuntimeProfile;
use crate::api::workload::{AnyWorkload, WorkloadKind};
use crate::placement::from_workload::{demand_for, policy_for};
use crate::placement::model::{ClusterView, Count, Demand, PlacementPolicy, Resources};
use crate::placement::recorded;
use crate::status::hub_status::stored_decision;

/// The prefix of the JSS's admission locks, Leases in its own namespace
/// (`deploy/jss/rbac.yaml`: an admission policy holds its Lease writes to it).
pub const LOCK_PREFIX: &str = "pinfed-jss-admission-";
/// How long a lock holds without its holder (a replica that died holding one).
const LOCK_SECS: i32 = 10;

/// A namespace's admission lock across JSS replicas: a Lease on the hub, which the API
/// server arbitrates (one create wins; an expired one is taken over with its
/// resourceVersion). Given back (deleted) when dropped.
pub struct AdmissionLock {
    api: Api<k8s_openapi::api::coordination::v1::Lease>,
    name: String,
    uid: Option<String>,
}

impl AdmissionLock {
    /// Gives the lock back now (deletes its Lease, if it is still this one).
    pub async fn release(mut self) {
        if let Some(uid) = self.uid.take() {
            delete_lock(&self.api, &self.name, uid).await;
        }
    }
}

/// Deletes the lock's Lease if it is still the one taken (its uid: a lock taken over
/// after it expired is not ours); one that is not deleted expires.
async fn delete_lock(
    api: &Api<k8s_openapi::api::coordination::v1::Lease>,
    name: &str,
    uid: String,
) {
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    if let Err(e) = api.delete(name, &dp).await {
        tracing::debug!(lease = %name, error = %e, "admission lock not released (it expires)");
    }
}

impl Drop for AdmissionLock {
    /// A lock not given back with [`AdmissionLock::release`] (an admission that failed
    /// half-way) is deleted in the background.
    fn drop(&mut self) {
        let Some(uid) = self.uid.take() else {
            return;
        };
        let (api, name) = (self.api.clone(), self.name.clone());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { delete_lock(&api, &name, uid).await });
        }
    }
}

/// A kube error as the JSS's answer: the API server's own validation errors keep their
/// field paths (422), a missing object or namespace is 404, the rest is a hub error.
pub fn rejection(e: kube::Error) -> Rejection {
    match e {
        kube::Error::Api(s) if s.code == 422 || s.code == 400 => Rejection::invalid(
            format!("the hub refused the resource: {}", s.message),
            s.details
                .iter()
                .flat_map(|d| d.causes.iter())
                .map(|c| Detail::field(&c.field, &c.message))
                .collect(),
        ),
        kube::Error::Api(s) if s.code == 404 => Rejection::NotFound(s.message.clone()),
        kube::Error::Api(s) if s.code == 409 => {
            Rejection::Hub(format!("conflict on the hub: {}", s.message))
        }
        e => Rejection::Hub(e.to_string()),
    }
}

/// Each hub workload's sizing, by uid and generation (and the runtime profiles it was
/// sized with): sizing means expanding the workload, and a quota check sizes every
/// workload of the namespace. Shared, as a job set's demand holds its completed shards.
type SizingCache = HashMap<(String, i64, u64), Option<Arc<Sizing>>>;

/// The hub as the JSS sees it.
#[derive(Clone)]
pub struct Hub {
    pub client: Client,
    pub members: Store<MemberCluster>,
    pub profiles: Store<RuntimeProfile>,
    pub quotas: Store<FederatedQuota>,
    pub priority_classes: Store<k8s_openapi::api::scheduling::v1::PriorityClass>,
    sizings: Arc<Mutex<SizingCache>>,
    /// The caches' watches, stopped when the last clone goes.
    _watches: Arc<[crate::controller::mirror::Watching; 4]>,
}

impl Hub {
    /// Connects and waits until the caches of members, profiles and quotas are loaded.
    pub async fn connect(client: Client) -> anyhow::Result<Hub> {
        use crate::controller::mirror::{StatusRepair, Undecodables, mirror, mirror_decodable};
        let ((members, w1), (profiles, w2), (quotas, w3), (priority_classes, w4)) = tokio::try_join!(
            // What this version cannot read is left out here, not a JSS that never
            // serves: the hub, which places and enforces quota, waits for it instead.
            mirror_decodable::<MemberCluster>(&client, Undecodables::LeaveOut, StatusRepair::None),
            mirror_decodable::<RuntimeProfile>(&client, Undecodables::LeaveOut, StatusRepair::None),
            mirror_decodable::<FederatedQuota>(&client, Undecodables::LeaveOut, StatusRepair::None),
            mirror::<k8s_openapi::api::scheduling::v1::PriorityClass>(&client),
        )?;
        Ok(Hub {
            client,
            members,
            profiles,
            quotas,
            priority_classes,
            sizings: Arc::default(),
            _watches: Arc::new([w1, w2, w3, w4]),
        })
    }

    /// The hub's PriorityClasses as the queue reads them.
    pub fn priority_classes(&self) -> Vec<crate::placement::priority::PriorityClassView> {
        self.priority_classes
            .state()
            .iter()
            .map(|c| crate::placement::priority::PriorityClassView::from_class(c))
            .collect()
    }

    pub fn profiles(&self) -> Vec<RuntimeProfile> {
        self.profiles
            .state()
            .iter()
            .map(|p| (**p).clone())
            .collect()
    }

    pub fn members(&self) -> Vec<Arc<MemberCluster>> {
        let mut m = self.members.state();
        m.sort_by_key(|a| a.name_any());
        m
    }

    pub fn quotas_in(&self, namespace: &str) -> Vec<FederatedQuota> {
        let mut q: Vec<FederatedQuota> = self
            .quotas
            .state()
            .iter()
            .filter(|q| q.namespace().as_deref() == Some(namespace))
            .map(|q| (**q).clone())
            .collect();
        q.sort_by_key(|q| q.name_any());
        q
    }

    pub fn all_quotas(&self) -> Vec<FederatedQuota> {
        let mut q: Vec<FederatedQuota> =
            self.quotas.state().iter().map(|q| (**q).clone()).collect();
        q.sort_by_key(|q| (q.namespace(), q.name_any()));
        q
    }

    /// The members as placement sees them, each with as many nodes as its status counts,
    /// every node with room for anything: what quota alone allows
    /// ([`super::quota::check_placeable`]) and how many pods a daemon runs
    /// ([`super::quota::whole_pods`]).
    pub fn quota_clusters(&self) -> Vec<crate::placement::ClusterView> {
        use crate::placement::from_member::{cluster_view, unbounded_nodes};
        let mut views: Vec<_> = self
            .members
            .state()
            .iter()
            .map(|m| cluster_view(m, is_ready(m), unbounded_nodes(m)))
            .collect();
        views.sort_by(|a, b| a.name.cmp(&b.name));
        views
    }

    /// Workloads of the given kinds (all when `None`) in a namespace (all when `None`),
    /// read live from the hub, sorted by kind, namespace and name.
    pub async fn list_workloads(
        &self,
        namespace: Option<&str>,
        kind: Option<WorkloadKind>,
    ) -> Result<Vec<(WorkloadKind, DynamicObject)>, Rejection> {
        let kinds: Vec<WorkloadKind> = match kind {
            Some(k) => vec![k],
            None => WorkloadKind::ALL.to_vec(),
        };
        let lists = futures::future::join_all(kinds.iter().map(|k| {
            let ar = api_resource(*k);
            let api: Api<DynamicObject> = match namespace {
                Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
                None => Api::all_with(self.client.clone(), &ar),
            };
            async move {
                let lp = ListParams::default();
                repeatable(|| api.list(&lp)).await
            }
        }))
        .await;
        let mut out = Vec::new();
        for (k, list) in kinds.iter().zip(lists) {
            for o in list.map_err(rejection)?.items {
                out.push((*k, o));
            }
        }
        out.sort_by_key(|(k, o)| (*k, o.namespace(), o.name_any()));
        Ok(out)
    }

    /// One page of at most `limit` workloads from `cursor` on (the hub lists each kind in
    /// pages of its own; its continue token goes into the cursor of the next page), and
    /// the cursor of the next page, if there is one.
    pub async fn list_workloads_page(
        &self,
        namespace: Option<&str>,
        kind: Option<WorkloadKind>,
        limit: u32,
        cursor: Option<&super::paging::Cursor>,
    ) -> Result<
        (
            Vec<(WorkloadKind, DynamicObject)>,
            Option<super::paging::Cursor>,
        ),
        Rejection,
    > {
        use super::paging::{Cursor, kinds_from};
        let asked: Vec<WorkloadKind> = match kind {
            Some(k) => vec![k],
            None => WorkloadKind::ALL.to_vec(),
        };
        let kinds = kinds_from(&asked, cursor);
        let mut out = Vec::new();
        let mut hub_token = cursor.and_then(|c| c.hub.clone());
        for (i, k) in kinds.iter().enumerate() {
            let left = limit.saturating_sub(u32::try_from(out.len()).unwrap_or(u32::MAX));
            if left == 0 {
                return Ok((
                    out,
                    Some(Cursor {
                        kind: *k,
                        hub: None,
                    }),
                ));
            }
            let ar = api_resource(*k);
            let api: Api<DynamicObject> = match namespace {
                Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
                None => Api::all_with(self.client.clone(), &ar),
            };
            let mut lp = ListParams::default().limit(left);
            if let Some(t) = hub_token.take() {
                lp = lp.continue_token(&t);
            }
            let list = repeatable(|| api.list(&lp)).await.map_err(|e| match e {
                kube::Error::Api(s) if s.code == 410 => Rejection::BadRequest(format!(
                    "the continue token expired ({}): list again from the start",
                    s.message
                )),
                e => rejection(e),
            })?;
            let next = list.metadata.continue_.clone().filter(|t| !t.is_empty());
            out.extend(list.items.into_iter().map(|o| (*k, o)));
            if let Some(t) = next {
                return Ok((
                    out,
                    Some(Cursor {
                        kind: *k,
                        hub: Some(t),
                    }),
                ));
            }
            // The last kind listed to its end: no next page.
            if i + 1 == kinds.len() {
                break;
            }
        }
        Ok((out, None))
    }

    /// Takes `namespace`'s admission lock as `holder`, waiting for another replica's
    /// for at most `wait`.
    pub async fn lock_namespace(
        &self,
        namespace: &str,
        (locks, holder): (&str, &str),
        wait: std::time::Duration,
    ) -> Result<AdmissionLock, Rejection> {
        use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let api: Api<Lease> = Api::namespaced(self.client.clone(), locks);
        let name = format!("{LOCK_PREFIX}{namespace}");
        let deadline = tokio::time::Instant::now() + wait;
        let mut pause = std::time::Duration::from_millis(20);
        loop {
            let now = k8s_openapi::jiff::Timestamp::now();
            let spec = LeaseSpec {
                holder_identity: Some(holder.to_string()),
                lease_duration_seconds: Some(LOCK_SECS),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                ..Default::default()
            };
            let mut lease = Lease {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                spec: Some(spec.clone()),
            };
            let taken = match api.create(&Default::default(), &lease).await {
                Ok(l) => Some(l),
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    // Held: taken over only once it expired (its holder died holding it).
                    match api.get_opt(&name).await.map_err(rejection)? {
                        None => None,
                        Some(held) => {
                            let expired = held.spec.as_ref().is_some_and(|s| {
                                let renewed = s.renew_time.as_ref().map_or(0, |t| t.0.as_second());
                                let secs = i64::from(s.lease_duration_seconds.unwrap_or(LOCK_SECS));
                                renewed + secs < now.as_second()
                            });
                            if expired {
                                lease.metadata.resource_version = held.metadata.resource_version;
                                match api.replace(&name, &Default::default(), &lease).await {
                                    Ok(l) => Some(l),
                                    Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
                                        None
                                    }
                                    Err(e) => return Err(rejection(e)),
                                }
                            } else {
                                None
                            }
                        }
                    }
                }
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 403 => {
                    return Err(Rejection::Hub(format!(
                        "the admission lock of {namespace} cannot be taken in {locks} ({}): does the JSS have its Role there (deploy/jss/rbac.yaml, --lock-namespace)?",
                        e.message
                    )));
                }
                Err(e) => return Err(rejection(e)),
            };
            if let Some(l) = taken {
                return Ok(AdmissionLock {
                    api,
                    name,
                    uid: l.metadata.uid,
                });
            }
            if tokio::time::Instant::now() + pause > deadline {
                return Err(Rejection::Hub(format!(
                    "another JSS replica held the admission lock of {namespace} for over {} s",
                    wait.as_secs()
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(250));
        }
    }

    /// Which other workload holds `host` (`Kind namespace/name`), read live: the hub
    /// holds back any later claimant, so a submission another one holds is refused now.
    pub async fn host_holder(
        &self,
        host: &str,
        admitted: &Admitted,
    ) -> Result<Option<String>, Rejection> {
        use crate::api::ingress_host::{Claim, holder};
        let mut claimants = Vec::new();
        for kind in WorkloadKind::ALL
            .into_iter()
            .filter(|k| k.claims_ingress_hosts())
        {
            claimants.extend(self.list_workloads(None, Some(kind)).await?);
        }
        let claims: Vec<Claim> = claimants
            .iter()
            .filter_map(|(kind, o)| {
                let mut v = o.data.clone();
                v["metadata"] = serde_json::to_value(&o.metadata).ok()?;
                Claim::from_json(*kind, &v)
            })
            .filter(|(h, c)| {
                h == host && !(c.namespace == admitted.namespace && c.name == admitted.name)
            })
            .map(|(_, c)| c)
            .collect();
        Ok(holder(&claims).map(|c| format!("{} {}/{}", c.kind, c.namespace, c.name)))
    }

    pub async fn get_workload(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<DynamicObject>, Rejection> {
        let api = Api::<DynamicObject>::namespaced_with(
            self.client.clone(),
            namespace,
            &api_resource(kind),
        );
        repeatable(|| api.get_opt(name)).await.map_err(rejection)
    }

    /// What the namespace's workloads request (those being deleted no longer count).
    pub async fn namespace_usage(&self, namespace: &str) -> Result<Resources, Rejection> {
        Ok(self.namespace_usage_except(namespace, None).await?.0)
    }

    /// What the namespace's workloads request except `(kind, name)` (the one a submission
    /// replaces, returned as it is now), from one live read of the namespace.
    pub async fn namespace_usage_except(
        &self,
        namespace: &str,
        except: Option<(WorkloadKind, &str)>,
    ) -> Result<(Resources, Option<DynamicObject>), Rejection> {
        let mut used = Resources::ZERO;
        let mut replaced = None;
        for (k, o) in self.list_workloads(Some(namespace), None).await? {
            if except == Some((k, o.name_any().as_str())) {
                replaced = Some(o);
                continue;
            }
            if o.metadata.deletion_timestamp.is_none() {
                used = used.saturating_add(&self.requested_by(k, &o));
            }
        }
        Ok((used, replaced))
    }

    /// What a hub workload requests ([`requested_of`]), its sizing cached by uid and
    /// generation (the profiles' versions are part of the key). The members are read only
    /// for a whole workload the hub has not placed yet.
    pub fn requested_by(&self, kind: WorkloadKind, o: &DynamicObject) -> Resources {
        let profiles = self.profiles();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let mut versions: Vec<(Option<&str>, Option<&str>)> = profiles
            .iter()
            .map(|p| {
                (
                    p.metadata.name.as_deref(),
                    p.metadata.resource_version.as_deref(),
                )
            })
            .collect();
        versions.sort_unstable();
        versions.hash(&mut h);
        let key = o
            .metadata
            .uid
            .clone()
            .zip(o.metadata.generation)
            .map(|(uid, generation)| (uid, generation, h.finish()));
        let cached = key
            .as_ref()
            .and_then(|k| self.sizings.lock().expect("lock").get(k).cloned());
        let sized = cached.unwrap_or_else(|| {
            let s = sizing(&profiles, kind, o, || self.quota_clusters()).map(Arc::new);
            if let Some(key) = key {
                let mut cache = self.sizings.lock().expect("lock");
                if cache.len() > 100_000 {
                    cache.clear();
                }
                cache.insert(key, s.clone());
            }
            s
        });
        match sized {
            Some(s) => requested_of(&s, o, || self.quota_clusters()),
            // The hub does not place what cannot be read or sized either.
            None => Resources::ZERO,
        }
    }

    /// Server-side apply of an admitted workload as `pinfed-jss` (forced: the JSS owns
    /// what users submit through it).
    pub async fn apply(&self, a: &Admitted) -> Result<DynamicObject, Rejection> {
        let api = Api::<DynamicObject>::namespaced_with(
            self.client.clone(),
            &a.namespace,
            &api_resource(a.kind),
        );
        let params = PatchParams::apply(FIELD_MANAGER).force();
        // The submission's trace context goes with it (`controller::trace`).
        let traced;
        let body = match crate::controller::trace::traceparent(&tracing::Span::current()) {
            Some(t) => {
                let mut o = a.object.clone();
                o["metadata"]["annotations"][crate::controller::trace::ANNOTATION_TRACEPARENT] =
                    t.into();
                traced = o;
                &traced
            }
            None => &a.object,
        };
        let patch = Patch::Apply(body);
        repeatable(|| api.patch(&a.name, &params, &patch))
            .await
            .map_err(rejection)
    }

    pub async fn delete(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
    ) -> Result<(), Rejection> {
        let api = Api::<DynamicObject>::namespaced_with(
            self.client.clone(),
            namespace,
            &api_resource(kind),
        );
        let params = DeleteParams::background();
        repeatable(|| api.delete(name, &params))
            .await
            .map(|_| ())
            .map_err(rejection)
    }

    /// The revisions the hub recorded for the workload of uid `uid` (its
    /// ControllerRevisions, labelled with that uid).
    pub async fn revisions(
        &self,
        namespace: &str,
        uid: &str,
    ) -> Result<Vec<ControllerRevision>, Rejection> {
        let lp = ListParams::default().labels(&format!("{LABEL_REVISION_OF}={uid}"));
        let api = Api::<ControllerRevision>::namespaced(self.client.clone(), namespace);
        repeatable(|| api.list(&lp))
            .await
            .map(|l| l.items)
            .map_err(rejection)
    }

    /// Sets (`Some`) or removes (`None`) annotations of a workload, by merge patch as
    /// [`ROLLOUT_FIELD_MANAGER`]: a person's rollout actions are not part of what the JSS
    /// applies for submissions, so a later submission keeps them.
    pub async fn annotate(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
        annotations: &[(&str, Option<&str>)],
    ) -> Result<DynamicObject, Rejection> {
        let set: serde_json::Map<String, serde_json::Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.map_or(serde_json::Value::Null, Into::into)))
            .collect();
        let patch = serde_json::json!({"metadata": {"annotations": set}});
        let params = PatchParams {
            field_manager: Some(ROLLOUT_FIELD_MANAGER.into()),
            ..Default::default()
        };
        let api = Api::<DynamicObject>::namespaced_with(
            self.client.clone(),
            namespace,
            &api_resource(kind),
        );
        let patch = Patch::Merge(&patch);
        repeatable(|| api.patch(name, &params, &patch))
            .await
            .map_err(rejection)
    }

    /// Marks a member draining (the hub moves every workload off it and places nothing
    /// new there) or clears the mark. Only the annotation changes: the JSS's patch right
    /// on MemberClusters is held to that by the admission policy `deploy/jss` ships.
    pub async fn set_draining(&self, member: &str, draining: bool) -> Result<(), Rejection> {
        let value = draining.then_some("true");
        let patch = serde_json::json!({
            "metadata": {"annotations": {crate::api::federation::ANNOTATION_DRAINING: value}}
        });
        let api: Api<kube::api::DynamicObject> = Api::all_with(
            self.client.clone(),
            &kube::api::ApiResource::erase::<MemberCluster>(&()),
        );
        let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
        repeatable(|| api.patch(member, &params, &patch))
            .await
            .map(|_| ())
            .map_err(rejection)
    }
}

/// What placement is asked for a hub workload: its pods (with the runtime profile it runs
/// with) and its placement policy.
#[derive(Clone, Debug)]
pub struct Sizing {
    pub demand: Demand,
    pub policy: PlacementPolicy,
}

/// The sizing of a hub workload; `None` when it cannot be read or sized.
pub fn sizing(
    profiles: &[RuntimeProfile],
    kind: WorkloadKind,
    o: &DynamicObject,
    members: impl FnOnce() -> Vec<ClusterView>,
) -> Option<Sizing> {
    let w = AnyWorkload::from_dynamic(kind, o)?;
    let profile = crate::expand::select_profile(profiles, w.as_ref().runtime_version()).ok();
    if w.as_ref().overrides().is_empty() {
        return Some(Sizing {
            demand: demand_for(w.as_ref(), profile).ok()?,
            policy: policy_for(w.as_ref()),
        });
    }
    // Its overrides as the hub charges them (the members' names and labels matter).
    let (demand, policy) = crate::placement::from_workload::sized(&w, profile, &members())?;
    Some(Sizing { demand, policy })
}

/// What a sized hub workload requests ([`requested`]). A whole workload the hub placed
/// counts the pods its recorded decision charges (a daemon's pods on each member, as the
/// hub charged them); not placed yet, the pods the engine gives it on `clusters` (asked
/// for only then).
pub fn requested_of(
    s: &Sizing,
    o: &DynamicObject,
    clusters: impl FnOnce() -> Vec<ClusterView>,
) -> Resources {
    let pods = match s.demand.count {
        Count::Whole => match stored_decision(&o.data["status"]) {
            Some(d) if !d.placements.is_empty() => recorded::from_status(&d).whole_pods(),
            _ => whole_pods(&clusters(), &s.policy, &s.demand),
        },
        _ => 1,
    };
    requested(&s.demand, pods)
}

pub(super) fn is_ready(m: &MemberCluster) -> bool {
    m.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == crate::api::common::ConditionStatus::True)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::quantity::Milli;
    use crate::placement::from_member::{cluster_view, unbounded_nodes};
    use crate::placement::model::PodShape;

    fn daemon_with_status(status: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestDaemon",
            "metadata": {"name": "d", "namespace": "ads"},
            "spec": {},
            "status": status,
        }))
        .unwrap()
    }

    fn member(name: &str, nodes: i32) -> ClusterView {
        let mc: MemberCluster = serde_json::from_value(json!({
            "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": name}, "spec": {}, "status": {"nodes": nodes}
        }))
        .unwrap();
        cluster_view(&mc, true, unbounded_nodes(&mc))
    }

    #[test]
    fn a_placed_daemon_counts_the_pods_the_hub_recorded_else_the_engines() {
        let daemon = Sizing {
            demand: Demand {
                member_pods: Default::default(),
                member_roles: Default::default(),
                pod: PodShape {
                    resources: Resources::pod(Milli(100), Milli(0), 0),
                    ..Default::default()
                },
                count: Count::Whole,
            },
            policy: PlacementPolicy::default(),
        };
        let placed = daemon_with_status(json!({"placement": {
            "strategy": "Duplicated", "unplaced": 0,
            "placements": [{"cluster": "a", "pods": 3}, {"cluster": "b", "pods": 5}],
        }}));
        // The members are not asked: the record says 8 pods (with none, the engine says 1).
        let r = requested_of(&daemon, &placed, Vec::new);
        assert_eq!((r.pods, r.cpu), (8, Milli(800)));
        // Not placed yet: a pod per node of each member, as the engine places it.
        let unplaced = daemon_with_status(json!({}));
        let members = || vec![member("a", 2), member("b", 4)];
        assert_eq!(requested_of(&daemon, &unplaced, members).pods, 6);
        // Recorded before the hub recorded pods: one per member, as the hub charges it.
        let recorded_before = daemon_with_status(json!({"placement": {
            "placements": [{"cluster": "a"}, {"cluster": "b"}], "unplaced": 0,
        }}));
        assert_eq!(requested_of(&daemon, &recorded_before, members).pods, 2);
    }
}

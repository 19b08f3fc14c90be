//! The JSS's side of the hub: caches of members, profiles and quotas; live reads of
//! workloads; server-side apply and delete as `pinfed-jss`. The only module of the JSS
//! that holds a client.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};

use super::admission::{Admitted, FIELD_MANAGER};
use super::error::{Detail, Rejection};
use super::quota::requested;
use crate::api::cronjob::PinterestCronJob;
use crate::api::daemon::PinterestDaemon;
use crate::api::federation::{FederatedQuota, MemberCluster};
use crate::api::jobset::PinterestJobSet;
use crate::api::runtime_profile::RuntimeProfile;
use crate::api::service::PinterestService;
use crate::api::statefulset::PinterestStatefulSet;
use crate::api::training::PinterestTrainingJob;
use crate::api::workload::{AnyWorkload, COMPUTE_API_VERSION, WorkloadKind};
use crate::placement::from_workload::demand_for;
use crate::placement::model::Resources;

/// The API resource of a workload kind on the hub.
pub fn resource(kind: WorkloadKind) -> ApiResource {
    match kind {
        WorkloadKind::Service => ApiResource::erase::<PinterestService>(&()),
        WorkloadKind::JobSet => ApiResource::erase::<PinterestJobSet>(&()),
        WorkloadKind::CronJob => ApiResource::erase::<PinterestCronJob>(&()),
        WorkloadKind::Daemon => ApiResource::erase::<PinterestDaemon>(&()),
        WorkloadKind::TrainingJob => ApiResource::erase::<PinterestTrainingJob>(&()),
        WorkloadKind::StatefulSet => ApiResource::erase::<PinterestStatefulSet>(&()),
    }
}

/// A hub object as a typed workload (`None` when it does not deserialize).
pub fn typed(kind: WorkloadKind, o: &DynamicObject) -> Option<AnyWorkload> {
    let mut v = o.data.clone();
    v["apiVersion"] = COMPUTE_API_VERSION.into();
    v["kind"] = kind.as_str().into();
    v["metadata"] = serde_json::to_value(&o.metadata).ok()?;
    Some(match kind {
        WorkloadKind::Service => AnyWorkload::Service(serde_json::from_value(v).ok()?),
        WorkloadKind::JobSet => AnyWorkload::JobSet(serde_json::from_value(v).ok()?),
        WorkloadKind::CronJob => AnyWorkload::CronJob(serde_json::from_value(v).ok()?),
        WorkloadKind::Daemon => AnyWorkload::Daemon(serde_json::from_value(v).ok()?),
        WorkloadKind::TrainingJob => AnyWorkload::TrainingJob(serde_json::from_value(v).ok()?),
        WorkloadKind::StatefulSet => AnyWorkload::StatefulSet(serde_json::from_value(v).ok()?),
    })
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

/// What each hub workload requests, by uid and generation (and the runtime profiles it
/// was sized with): sizing means expanding the workload, and a quota check sizes every
/// workload of the namespace.
type RequestedCache = HashMap<(String, i64, u64), Resources>;

/// The hub as the JSS sees it.
#[derive(Clone)]
pub struct Hub {
    pub client: Client,
    pub members: Store<MemberCluster>,
    pub profiles: Store<RuntimeProfile>,
    pub quotas: Store<FederatedQuota>,
    requested: Arc<Mutex<RequestedCache>>,
    /// The caches' watches, stopped when the last clone goes.
    _watches: Arc<[crate::controller::mirror::Watching; 3]>,
}

impl Hub {
    /// Connects and waits until the caches of members, profiles and quotas are loaded.
    pub async fn connect(client: Client) -> anyhow::Result<Hub> {
        use crate::controller::mirror::mirror;
        let ((members, w1), (profiles, w2), (quotas, w3)) = tokio::try_join!(
            mirror::<MemberCluster>(&client),
            mirror::<RuntimeProfile>(&client),
            mirror::<FederatedQuota>(&client),
        )?;
        Ok(Hub {
            client,
            members,
            profiles,
            quotas,
            requested: Arc::default(),
            _watches: Arc::new([w1, w2, w3]),
        })
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

    /// Members a daemon could run in (for its quota count): the Ready ones, at least one.
    pub fn daemon_clusters(&self) -> u32 {
        let ready = self.members.state().iter().filter(|m| is_ready(m)).count();
        u32::try_from(ready).unwrap_or(u32::MAX).max(1)
    }

    /// The members as placement sees them, each with room for anything: what quota alone
    /// allows ([`super::quota::check_placeable`]).
    pub fn quota_clusters(&self) -> Vec<crate::placement::ClusterView> {
        use crate::placement::from_member::{cluster_view, unbounded_node};
        let mut views: Vec<_> = self
            .members
            .state()
            .iter()
            .map(|m| cluster_view(m, is_ready(m), vec![unbounded_node()]))
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
            let ar = resource(*k);
            let api: Api<DynamicObject> = match namespace {
                Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
                None => Api::all_with(self.client.clone(), &ar),
            };
            async move { api.list(&ListParams::default()).await }
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

    pub async fn get_workload(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<DynamicObject>, Rejection> {
        Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, &resource(kind))
            .get_opt(name)
            .await
            .map_err(rejection)
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

    /// [`requested_by`] with the hub's profiles and Ready members, cached by uid and
    /// generation (the profiles' versions and the Ready member count are part of the key).
    pub fn requested_by(&self, kind: WorkloadKind, o: &DynamicObject) -> Resources {
        let profiles = self.profiles();
        let daemon_clusters = self.daemon_clusters();
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
        daemon_clusters.hash(&mut h);
        let key = o
            .metadata
            .uid
            .clone()
            .zip(o.metadata.generation)
            .map(|(uid, generation)| (uid, generation, h.finish()));
        if let Some(key) = &key
            && let Some(r) = self.requested.lock().expect("lock").get(key)
        {
            return *r;
        }
        let r = requested_by(&profiles, daemon_clusters, kind, o);
        if let Some(key) = key {
            let mut cache = self.requested.lock().expect("lock");
            if cache.len() > 100_000 {
                cache.clear();
            }
            cache.insert(key, r);
        }
        r
    }

    /// Server-side apply of an admitted workload as `pinfed-jss` (forced: the JSS owns
    /// what users submit through it).
    pub async fn apply(&self, a: &Admitted) -> Result<DynamicObject, Rejection> {
        Api::<DynamicObject>::namespaced_with(self.client.clone(), &a.namespace, &resource(a.kind))
            .patch(
                &a.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&a.object),
            )
            .await
            .map_err(rejection)
    }

    pub async fn delete(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
    ) -> Result<(), Rejection> {
        Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, &resource(kind))
            .delete(name, &DeleteParams::background())
            .await
            .map(|_| ())
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
        Api::<MemberCluster>::all(self.client.clone())
            .patch(member, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(rejection)
    }
}

/// What one hub workload requests (zero when it cannot be read or sized: the hub does
/// not place such a workload either).
pub fn requested_by(
    profiles: &[RuntimeProfile],
    daemon_clusters: u32,
    kind: WorkloadKind,
    o: &DynamicObject,
) -> Resources {
    let Some(w) = typed(kind, o) else {
        return Resources::ZERO;
    };
    let profile = crate::expand::select_profile(profiles, w.as_ref().runtime_version()).ok();
    // A placed daemon costs a pod in each cluster it was placed on, as the hub charges it.
    let placed = super::views::placed_clusters(o).len();
    let clusters = match u32::try_from(placed) {
        Ok(n) if n > 0 => n,
        _ => daemon_clusters,
    };
    match demand_for(w.as_ref(), profile) {
        Ok(d) => requested(&d, clusters),
        Err(_) => Resources::ZERO,
    }
}

fn is_ready(m: &MemberCluster) -> bool {
    m.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == crate::api::common::ConditionStatus::True)
    })
}

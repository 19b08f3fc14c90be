//! The UI's view of the hub: watch caches of the MemberClusters and of the six workload
//! kinds (managed fields dropped), a change counter the live pages follow, and the reads
//! made per page (the hub's leader Lease, a workload's Events). The only client of the UI.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::reflector::{Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use crate::api::federation::MemberCluster;
use crate::api::kind::api_resource as resource;
use crate::api::workload::WorkloadKind;

/// How many times each watched collection has changed since start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub members: u64,
    pub workloads: u64,
}

pub struct Feed {
    client: Client,
    members: Store<MemberCluster>,
    workloads: Vec<(WorkloadKind, Store<DynamicObject>)>,
    changes: watch::Sender<Changes>,
}

impl Feed {
    /// Starts the watches (they retry with backoff while the hub or a CRD is missing).
    pub fn start(client: Client) -> Arc<Feed> {
        let (changes, _) = watch::channel(Changes::default());
        let members = {
            let writer: Writer<MemberCluster> = Writer::default();
            let store = writer.as_reader();
            let changes = changes.clone();
            // One another pinfed version wrote that this one cannot read is left out of
            // the page (and said), not a page that never shows a member.
            let stream = crate::controller::mirror::decodable_watch::<MemberCluster>(
                &client,
                watcher::Config::default(),
                crate::controller::mirror::Undecodables::LeaveOut,
                crate::controller::mirror::StatusRepair::None,
            )
            .modify(|o| o.managed_fields_mut().clear())
            .reflect(writer)
            .for_each(move |e| {
                if e.is_ok() {
                    changes.send_modify(|c| c.members += 1);
                }
                futures::future::ready(())
            });
            tokio::spawn(stream);
            store
        };
        let workloads = WorkloadKind::ALL
            .into_iter()
            .map(|kind| {
                let ar = resource(kind);
                let writer: Writer<DynamicObject> = Writer::new(ar.clone());
                let store = writer.as_reader();
                let changes = changes.clone();
                let stream = watcher(
                    Api::<DynamicObject>::all_with(client.clone(), &ar),
                    watcher::Config::default(),
                )
                .backoff(crate::controller::watch::backoff())
                .modify(|o| o.managed_fields_mut().clear())
                .reflect(writer)
                .for_each(move |e| {
                    if e.is_ok() {
                        changes.send_modify(|c| c.workloads += 1);
                    }
                    futures::future::ready(())
                });
                tokio::spawn(stream);
                (kind, store)
            })
            .collect();
        Arc::new(Feed {
            client,
            members,
            workloads,
            changes,
        })
    }

    /// Waits until every cache has its first list, at most `limit`.
    pub async fn ready(&self, limit: Duration) -> bool {
        let all = async {
            self.members.wait_until_ready().await.is_ok()
                && futures::future::join_all(
                    self.workloads.iter().map(|(_, s)| s.wait_until_ready()),
                )
                .await
                .iter()
                .all(Result::is_ok)
        };
        tokio::time::timeout(limit, all).await.unwrap_or(false)
    }

    pub fn subscribe(&self) -> watch::Receiver<Changes> {
        self.changes.subscribe()
    }

    /// Members sorted by name.
    pub fn members(&self) -> Vec<MemberCluster> {
        let mut m: Vec<MemberCluster> =
            self.members.state().iter().map(|m| (**m).clone()).collect();
        m.sort_by_key(|m| m.name_any());
        m
    }

    /// Every workload of every kind (unsorted).
    pub fn workloads(&self) -> Vec<(WorkloadKind, Arc<DynamicObject>)> {
        self.workloads
            .iter()
            .flat_map(|(k, s)| s.state().into_iter().map(move |o| (*k, o)))
            .collect()
    }

    pub fn workload(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<DynamicObject>> {
        let (_, store) = self.workloads.iter().find(|(k, _)| *k == kind)?;
        store.get(
            &kube::runtime::reflector::ObjectRef::new_with(name, resource(kind)).within(namespace),
        )
    }

    /// The Lease `namespace/name` on the hub (`None` when there is none).
    pub async fn lease(&self, namespace: &str, name: &str) -> Result<Option<Lease>, kube::Error> {
        Api::<Lease>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
    }

    /// The hub's Events about one workload, newest first.
    pub async fn events(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<Event>, kube::Error> {
        let lp = ListParams::default().fields(&format!(
            "involvedObject.kind={},involvedObject.name={name}",
            kind.as_str()
        ));
        let mut items = Api::<Event>::namespaced(self.client.clone(), namespace)
            .list(&lp)
            .await?
            .items;
        items.sort_by_key(|e| {
            std::cmp::Reverse(
                e.last_timestamp
                    .as_ref()
                    .map(|t| t.0)
                    .or(e.event_time.as_ref().map(|t| t.0))
                    .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0)),
            )
        });
        Ok(items)
    }
}

//! Where a member's slices are written: into the member (push), or into the member's
//! namespace on the hub as MemberSlices its agent pulls (pull). The workload loops write
//! through this and never ask which; only here do the two differ.

use std::sync::Arc;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::core::ApiResource;
use kube::{Client, ResourceExt};

use crate::api::kind::PinterestKind;
use crate::api::member_slice::MemberSlice;
use crate::api::workload::WorkloadKind;
use crate::controller::apply::{ApplyError, HUB_FIELD_MANAGER, apply_json};
use crate::expand::bundle::{ConfigKind, DROP_NAMESPACE, LABEL_BUNDLE};
use crate::hub::cleanups::Removal;
use crate::hub::slices::{self, LABEL_HUB_UID, SliceSummary};

#[derive(Clone)]
pub enum SliceTarget {
    /// The hub's client for the member.
    Push(Client),
    /// The hub's own client and the member's namespace on the hub.
    Pull { hub: Client, namespace: String },
}

impl SliceTarget {
    /// A pull member's: written on the hub, where its agent reads it.
    pub fn is_pull(&self) -> bool {
        matches!(self, SliceTarget::Pull { .. })
    }

    fn member_slices(hub: &Client, namespace: &str) -> Api<MemberSlice> {
        Api::namespaced(hub.clone(), namespace)
    }

    /// The slice `namespace/name` as stored there now.
    pub async fn get(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<SliceSummary>>, kube::Error> {
        Ok(match self {
            SliceTarget::Push(client) => Api::<DynamicObject>::namespaced_with(
                client.clone(),
                namespace,
                &crate::api::kind::api_resource(kind),
            )
            .get_opt(name)
            .await?
            .map(|o| Arc::new(slices::summarize_dynamic(kind, &o))),
            SliceTarget::Pull {
                hub,
                namespace: pull,
            } => Self::member_slices(hub, pull)
                .get_opt(&slices::member_slice_name(kind, namespace, name))
                .await?
                .map(|ms| Arc::new(slices::summarize_member_slice(kind, &ms))),
        })
    }

    /// Writes `slice` (forced over our own; not forced when none of ours was seen, so
    /// an object someone else wrote there is a conflict) and returns it as stored.
    pub async fn apply<K: PinterestKind>(
        &self,
        slice: &K,
        force: bool,
    ) -> Result<Arc<SliceSummary>, kube::Error> {
        let params = if force {
            PatchParams::apply(HUB_FIELD_MANAGER).force()
        } else {
            PatchParams::apply(HUB_FIELD_MANAGER)
        };
        let ns = slice.namespace().unwrap_or_default();
        let name = slice.name_any();
        Ok(match self {
            SliceTarget::Push(client) => {
                let stored = Api::<K>::namespaced(client.clone(), &ns)
                    .patch(&name, &params, &Patch::Apply(slice))
                    .await?;
                Arc::new(slices::summarize(&stored))
            }
            SliceTarget::Pull { hub, namespace } => {
                let value = serde_json::to_value(slice).map_err(kube::Error::SerdeError)?;
                let wrapped = slices::wrap_slice(K::KIND, &value, namespace);
                let stored = Self::member_slices(hub, namespace)
                    .patch(
                        &slices::member_slice_name(K::KIND, &ns, &name),
                        &params,
                        &Patch::Apply(&wrapped),
                    )
                    .await?;
                Arc::new(slices::summarize_member_slice(K::KIND, &stored))
            }
        })
    }

    /// Deletes the slice `namespace/name` only when it carries `hub_uid` (the hub
    /// resource it was written for), and only that object (uid precondition). Only "not
    /// found" means gone; every other error is returned.
    pub async fn delete_own(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
        hub_uid: &str,
    ) -> Result<Removal, kube::Error> {
        let (api, name) = match self {
            SliceTarget::Push(client) => (
                Api::<DynamicObject>::namespaced_with(
                    client.clone(),
                    namespace,
                    &crate::api::kind::api_resource(kind),
                ),
                name.to_string(),
            ),
            SliceTarget::Pull {
                hub,
                namespace: pull,
            } => (
                Api::<DynamicObject>::namespaced_with(
                    hub.clone(),
                    pull,
                    &ApiResource::erase::<MemberSlice>(&()),
                ),
                slices::member_slice_name(kind, namespace, name),
            ),
        };
        let Some(found) = api.get_metadata_opt(&name).await? else {
            return Ok(Removal::Gone);
        };
        let owner = found.labels().get(LABEL_HUB_UID).cloned();
        if owner.as_deref() != Some(hub_uid) {
            return Ok(Removal::NotOurs(owner));
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: found.uid(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match api.delete(&name, &params).await {
            Ok(_) => Ok(Removal::Gone),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Removal::Gone),
            Err(e) => Err(e),
        }
    }

    /// Makes the workload's namespace in a push member (a pull member's agent makes its
    /// own).
    pub async fn ensure_namespace(&self, namespace: &str) -> Result<(), ApplyError> {
        match self {
            SliceTarget::Push(client) => {
                crate::controller::apply::ensure_namespace_labelled(
                    client,
                    namespace,
                    HUB_FIELD_MANAGER,
                    crate::controller::apply::WORKLOAD_NAMESPACE_LABELS,
                )
                .await
            }
            SliceTarget::Pull { .. } => Ok(()),
        }
    }

    fn bundle_api(&self, kind: ConfigKind) -> Api<DynamicObject> {
        let ar = match kind {
            ConfigKind::ConfigMap => {
                ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
            }
            ConfigKind::Secret => ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
        };
        match self {
            SliceTarget::Push(client) => Api::namespaced_with(client.clone(), DROP_NAMESPACE, &ar),
            SliceTarget::Pull { hub, namespace } => {
                Api::namespaced_with(hub.clone(), namespace, &ar)
            }
        }
    }

    /// The names of the bundles of `kind` dropped for this member (metadata only: a
    /// Secret's data is not read to be listed).
    pub async fn list_bundles(&self, kind: ConfigKind) -> Result<Vec<String>, kube::Error> {
        let lp = kube::api::ListParams::default().labels(LABEL_BUNDLE);
        Ok(self
            .bundle_api(kind)
            .list_metadata(&lp)
            .await?
            .items
            .into_iter()
            .map(|m| m.name_any())
            .collect())
    }

    /// Removes one bundle; only a 404 counts as already gone.
    pub async fn delete_bundle(&self, kind: ConfigKind, name: &str) -> Result<(), kube::Error> {
        match self
            .bundle_api(kind)
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Drops a bundle (a ConfigMap or Secret built by `expand::bundle::bundle`) where the
    /// member's agent picks it up: the member's drop namespace, or the pull namespace.
    pub async fn drop_bundle(&self, bundle: &serde_json::Value) -> Result<(), ApplyError> {
        match self {
            SliceTarget::Push(client) => apply_json(client, bundle, HUB_FIELD_MANAGER)
                .await
                .map(drop),
            SliceTarget::Pull { hub, namespace } => {
                let mut b = bundle.clone();
                b["metadata"]["namespace"] = namespace.as_str().into();
                apply_json(hub, &b, HUB_FIELD_MANAGER).await.map(drop)
            }
        }
    }
}

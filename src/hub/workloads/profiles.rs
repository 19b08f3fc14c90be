//! RuntimeProfiles are cluster-scoped and small: every hub profile is applied into every
//! Ready member, where the agent injects the same runtime support from it; a profile
//! deleted on the hub is deleted from the members the hub applied it to (profiles a
//! member's own admins made are left alone).

use std::collections::BTreeSet;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;

use super::HubContext;
use crate::api::runtime_profile::RuntimeProfile;
use crate::controller::apply::{HUB_FIELD_MANAGER, applied_by_and_not_in};

/// Applies every hub RuntimeProfile into every Ready member (they are cluster-scoped and
/// small; the agent in each member needs them to inject the same runtime support).
pub async fn propagate_profiles(ctx: &HubContext) {
    let now = Timestamp::now();
    let ar = ApiResource::erase::<RuntimeProfile>(&());
    for m in ctx
        .registry
        .all()
        .into_iter()
        .filter(|m| m.is_ready(now, ctx.member_grace))
    {
        for p in ctx.profiles.state() {
            let mut v = match serde_json::to_value(p.as_ref()) {
                Ok(v) => v,
                Err(_) => continue,
            };
            if let Some(meta) = v["metadata"].as_object_mut() {
                meta.retain(|k, _| matches!(k.as_str(), "name" | "labels" | "annotations"));
            }
            v.as_object_mut().map(|o| o.remove("status"));
            // A pull member's agent reads the hub's profiles itself.
            let Some(client) = m.push_client() else {
                continue;
            };
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            if let Err(e) = api
                .patch(
                    &p.name_any(),
                    &PatchParams::apply(HUB_FIELD_MANAGER).force(),
                    &Patch::Apply(&v),
                )
                .await
            {
                tracing::debug!(member = %m.name, error = %e, "runtime profile not propagated yet");
            }
        }
        let Some(client) = m.push_client() else {
            continue;
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        // The hub's profiles are a cache loaded before the leadership term began (an
        // empty list here means the hub has none, not that it was not read).
        let on_hub: BTreeSet<String> = ctx.profiles.state().iter().map(|p| p.name_any()).collect();
        match api.list(&ListParams::default()).await {
            Ok(list) => {
                for name in applied_by_and_not_in(&list.items, HUB_FIELD_MANAGER, &on_hub) {
                    match api.delete(&name, &DeleteParams::default()).await {
                        Ok(_) => {
                            tracing::info!(member = %m.name, profile = %name, "runtime profile deleted on the hub: removed from the member");
                        }
                        Err(kube::Error::Api(e)) if e.code == 404 => {}
                        Err(e) => {
                            tracing::warn!(member = %m.name, profile = %name, error = %e, "could not remove a runtime profile deleted on the hub");
                        }
                    }
                }
            }
            Err(e) => {
                tracing::debug!(member = %m.name, error = %e, "member runtime profiles not listed")
            }
        }
    }
}

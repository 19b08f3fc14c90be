//! Removes bundles (the ConfigMaps and Secrets the hub dropped for a member's slices)
//! that no workload placed on that member references any more. Runs in the leader's term
//! every `--bundle-gc-secs`; a bundle goes on the second sweep that finds it unwanted
//! (`expand::bundle::BundleSweep`), and only a 404 counts as gone — a refused delete is
//! retried on the next sweep and counted in `pinfed_hub_bundle_removal_failures`.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DynamicObject, ListParams};

use super::member_loop::MemberLabels;
use super::workloads::HubContext;
use crate::api::workload::WorkloadKind;
use crate::expand::bundle::{BundleSweep, ConfigKind, wanted_bundles};

/// Every hub workload as JSON, or `None` when one kind could not be listed (a sweep on
/// a partial list would remove what the missing kind references).
async fn all_workloads(ctx: &HubContext) -> Option<Vec<serde_json::Value>> {
    let mut out = Vec::new();
    for kind in WorkloadKind::ALL {
        let api: Api<DynamicObject> =
            Api::all_with(ctx.hub.clone(), &crate::api::kind::api_resource(kind));
        match api.list(&ListParams::default()).await {
            Ok(list) => out.extend(
                list.items
                    .into_iter()
                    .filter_map(|o| serde_json::to_value(o).ok()),
            ),
            Err(e) => {
                tracing::warn!(kind = kind.as_str(), error = %e, "bundle sweep skipped: workloads not listed");
                return None;
            }
        }
    }
    Some(out)
}

/// One sweep over every writable member.
pub async fn sweep_once(ctx: &HubContext, sweep: &mut BundleSweep) {
    let Some(workloads) = all_workloads(ctx).await else {
        return;
    };
    let wanted = wanted_bundles(&workloads);
    let now = Timestamp::now();
    let members = ctx.registry.all();
    sweep.forget_others(
        &members
            .iter()
            .map(|m| m.name.clone())
            .collect::<BTreeSet<_>>(),
    );
    for m in members {
        if !m.is_writable(now, ctx.member_grace) {
            continue;
        }
        let mut dropped = Vec::new();
        for kind in [ConfigKind::ConfigMap, ConfigKind::Secret] {
            match m.target.list_bundles(kind).await {
                Ok(names) => dropped.extend(names.into_iter().map(|n| (kind, n))),
                Err(e) => {
                    tracing::debug!(member = %m.name, error = %e, "bundles not listed");
                    dropped.clear();
                    break;
                }
            }
        }
        for (kind, name) in sweep.sweep(&m.name, &dropped, &wanted) {
            match m.target.delete_bundle(kind, &name).await {
                Ok(()) => {
                    tracing::info!(member = %m.name, kind = kind.as_str(), bundle = %name, "bundle no workload there references removed");
                    ctx.hub_metrics
                        .bundles_removed
                        .get_or_create(&MemberLabels {
                            member: m.name.clone(),
                        })
                        .inc();
                }
                Err(e) => {
                    tracing::warn!(member = %m.name, kind = kind.as_str(), bundle = %name, error = %e, "bundle removal refused (retried next sweep)");
                    ctx.hub_metrics
                        .bundle_removal_failures
                        .get_or_create(&MemberLabels {
                            member: m.name.clone(),
                        })
                        .inc();
                }
            }
        }
    }
}

/// Sweeps every `every` for as long as the leadership term lasts.
pub async fn run(ctx: &HubContext, every: Duration) {
    let mut sweep = BundleSweep::default();
    loop {
        tokio::time::sleep(every).await;
        sweep_once(ctx, &mut sweep).await;
    }
}

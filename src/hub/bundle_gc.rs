//! Removes bundles (the ConfigMaps and Secrets the hub dropped for a member's slices)
//! that no workload placed on that member references any more. Runs in the leader's term
//! every `--bundle-gc-secs`; a bundle goes on the second sweep that finds it unwanted
//! (`expand::bundle::BundleSweep`), and only a 404 counts as gone — a refused delete is
//! retried on the next sweep and counted in `pinfed_hub_bundle_removal_failures`.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::member_loop::MemberLabels;
use super::workloads::HubContext;
use crate::api::workload::WorkloadKind;
use crate::expand::bundle::{BundleSweep, ConfigKind, add_wanted};

/// Every hub workload as JSON, or `None` when one kind could not be listed (a sweep on
/// a partial list would remove what the missing kind references).
/// The bundles every workload wants, from the hub's own caches of them (one object
/// decoded at a time: listing them all from the API server every sweep cost a list of
/// every workload and, at 10,000 of them, 300 MiB for a moment). `None` while a kind's
/// cache has not listed yet.
fn wanted_now(ctx: &HubContext) -> Option<BTreeSet<(String, ConfigKind, String)>> {
    let caches = ctx.workload_caches.lock().ok()?.clone();
    let mut wanted = BTreeSet::new();
    for kind in WorkloadKind::ALL {
        let Some(bodies) = caches.get(&kind).and_then(|c| c.all()) else {
            tracing::debug!(
                kind = kind.as_str(),
                "bundle sweep skipped: workloads not listed yet"
            );
            return None;
        };
        for body in bodies {
            if let Ok(w) = serde_json::from_slice::<serde_json::Value>(&body) {
                add_wanted(&mut wanted, &w);
            }
        }
    }
    Some(wanted)
}

pub async fn sweep_once(ctx: &HubContext, sweep: &mut BundleSweep) {
    let Some(wanted) = wanted_now(ctx) else {
        return;
    };
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

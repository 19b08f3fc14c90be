//! The loop that keeps every MemberCluster connected and its status current.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::api::federation::MemberCluster;
use crate::hub::members::{self, MemberRegistry};

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct MemberLabels {
    pub member: String,
}

pub struct MemberLoop {
    pub hub: Client,
    pub registry: MemberRegistry,
    /// A member without a successful heartbeat for this long is NotReady.
    pub grace: Duration,
    pub interval: Duration,
    /// How often a status whose only news is the liveness times is written.
    pub record_every: Duration,
    /// 1 when the member is Ready, else 0.
    pub health: Family<MemberLabels, Gauge>,
    /// Shared with the workload loops: serializes pending clean-up writes.
    pub cleanup_lock: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// Events on MemberClusters (a pull agent's credential ending).
    pub recorder: crate::controller::events::EventSink,
    /// What was last read of each pull member's agent credential.
    pub credentials: crate::hub::pull_credential::Seen,
}

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct LoopError(#[from] kube::Error);

async fn reconcile(mc: Arc<MemberCluster>, ctx: Arc<MemberLoop>) -> Result<Action, LoopError> {
    let name = mc.name_any();
    let (member, connect_error) = match members::ensure_member(&ctx.hub, &ctx.registry, &mc).await {
        Ok(m) => {
            members::heartbeat(&ctx.hub, &m).await;
            // The token ages whether or not workloads change; a failed renewal is tried
            // again next round (a third of the token's life is left for it). A pull
            // member's agent renews its own token for the hub.
            if let (Some(client), Some(kubeconfig)) = (m.push_client(), m.kubeconfig())
                && let Err(e) =
                    crate::hub::member_token::renew_if_due(&ctx.hub, client, &mc, kubeconfig).await
            {
                tracing::warn!(member = %name, error = %format!("{e:#}"), "could not renew the hub's token for the member");
            }
            (Some(m), None)
        }
        Err(e) => {
            tracing::warn!(member = %name, error = %e, "cannot connect to member");
            ctx.registry.remove(&name);
            (None, Some(e.to_string()))
        }
    };
    let now = Timestamp::now();
    let mut status = members::member_status(
        mc.status.as_ref(),
        member.as_deref(),
        connect_error.as_deref(),
        mc.metadata.generation,
        now,
        ctx.grace,
    );
    // A pull member's agent credential: how long it lasts, deleted at its end.
    if mc.spec.mode == Some(crate::api::federation::ClusterMode::Pull) {
        let c = crate::hub::pull_credential::check(&ctx.hub, &ctx.credentials, &ctx.recorder, &mc)
            .await;
        crate::api::common::set_condition(&mut status.conditions, c);
    }
    let status = members::hold_liveness_times(mc.status.as_ref(), status, now, ctx.record_every);
    let ready = member.as_ref().is_some_and(|m| m.is_ready(now, ctx.grace));
    ctx.health
        .get_or_create(&MemberLabels {
            member: name.clone(),
        })
        .set(i64::from(ready));
    let unchanged = mc.status.as_ref().is_some_and(|old| {
        let mut old = old.clone();
        old.pending_cleanups.clear();
        old == status
    });
    if !unchanged {
        members::write_status(&ctx.hub, &name, &status).await?;
    }
    ctx.registry.mark_tried(&name);
    // Vouch for the member's job-set slices (`controller::fence`) — after the status
    // write, so the epoch is the one the workload loops will stamp.
    if let (true, Some(m)) = (ready, member.as_ref()) {
        members::renew_fence(m, &status, ctx.grace, ctx.interval).await;
    }
    // Slices of hub resources deleted while the member was down go now.
    let pending = mc
        .status
        .as_ref()
        .map(|s| s.pending_cleanups.clone())
        .unwrap_or_default();
    if let (true, false, Some(m)) = (ready, pending.is_empty(), member.as_ref()) {
        match crate::hub::cleanups::process(&ctx.hub, &ctx.cleanup_lock, &name, &m.target, &pending)
            .await
        {
            Ok(n) => {
                tracing::info!(member = %name, done = n, left = pending.len() - n, "pending clean-ups processed")
            }
            Err(e) => tracing::warn!(member = %name, error = %e, "pending clean-ups not done yet"),
        }
    }
    Ok(Action::requeue(ctx.interval))
}

fn error_policy(_mc: Arc<MemberCluster>, e: &LoopError, ctx: Arc<MemberLoop>) -> Action {
    if crate::controller::write_gate::refused(e) {
        // The hub's lease renewal is late (controller/leader.rs): the next heartbeat
        // writes it, no failure of the member's.
        tracing::debug!(error = %e, "member status held back until the lease is renewed");
    } else {
        tracing::warn!(error = %e, "member status update failed");
    }
    Action::requeue(ctx.interval)
}

/// Waits (at most `limit`) until every MemberCluster has been tried once, so the first
/// placements after a hub start see every member that is up — a member the status still
/// records as lost (by an earlier hub) included: it may be back.
pub async fn wait_first_pass(hub: &Client, registry: &MemberRegistry, limit: Duration) {
    let api = members::member_clusters(hub);
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        let Ok(list) = crate::controller::mirror::list_decodable::<MemberCluster>(&api).await
        else {
            break;
        };
        let now = Timestamp::now();
        // Connected: pending until Ready, unless its API server failed a heartbeat (down).
        // Not connected: pending until the loop has tried it (a broken kubeconfig).
        let pending = list.iter().filter(|mc| {
            let name = mc.name_any();
            match registry.get(&name) {
                Some(m) => !m.is_ready(now, Duration::from_secs(3600)) && m.answered_last(),
                None => !registry.was_tried(&name),
            }
        });
        if pending.count() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs until the stream ends (it does not, unless the hub API goes away for good).
pub async fn run(ctx: MemberLoop) {
    use kube::runtime::WatchStreamExt;
    use kube::runtime::reflector;
    let ctx = Arc::new(ctx);
    let registry = ctx.registry.clone();
    // Read untyped: a status another pinfed version wrote in another shape loses only its
    // misfit fields, and a member this version cannot read holds the loop back, named in
    // an error, instead of failing every list without a word (controller/mirror.rs).
    let (store, writer) = reflector::store();
    let members = crate::controller::mirror::decodable_watch::<MemberCluster>(
        &ctx.hub,
        watcher::Config::default().any_semantic(),
        crate::controller::mirror::Undecodables::Wait,
        // The lead's cache of MemberClusters puts misfit status fields back.
        crate::controller::mirror::StatusRepair::None,
    )
    .modify(|o| o.meta_mut().managed_fields = None)
    .reflect(writer)
    .applied_objects();
    let controller = Controller::for_stream(members, store.clone());
    // Forget members whose MemberCluster is gone.
    let janitor = {
        let store = store.clone();
        async move {
            // An empty cache before its first list is no member gone.
            if store.wait_until_ready().await.is_err() {
                return;
            }
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let names: Vec<String> = store.state().iter().map(|m| m.name_any()).collect();
                for m in registry.all() {
                    if !names.contains(&m.name) {
                        tracing::info!(member = %m.name, "MemberCluster removed; disconnecting");
                        registry.remove(&m.name);
                    }
                }
            }
        }
    };
    let run = controller
        .run(reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(()));
    tokio::select! {
        () = run => {},
        () = janitor => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_held_back_at_the_gate_is_told_apart_from_a_failure() {
        let held = LoopError(kube::Error::Service(Box::new(
            crate::controller::write_gate::NotLeading,
        )));
        assert!(crate::controller::write_gate::refused(&held));
        let failed = LoopError(kube::Error::Service("connection refused".into()));
        assert!(!crate::controller::write_gate::refused(&failed));
    }
}

//! Leader election with a Lease (kube-lease-manager): the work runs only while this
//! process holds the lease, stops when it is lost, and the lease is released on shutdown
//! so a standby takes over at once instead of waiting for it to expire.

use std::future::Future;

use anyhow::bail;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube_lease_manager::LeaseManagerBuilder;
use tokio::task::JoinHandle;

#[derive(Debug, Clone)]
pub struct LeaderConfig {
    pub namespace: String,
    pub lease_name: String,
    pub identity: String,
    /// How long a holder keeps the lease without renewing it.
    pub duration_secs: u64,
    /// Extra time before a standby may take an unrenewed lease.
    pub grace_secs: u64,
}

/// A default identity: host name and pid, unique per process.
pub fn default_identity() -> String {
    let host =
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_else(|_| "localhost".into());
    format!("{}-{}", host.trim(), std::process::id())
}

/// Runs `work()` whenever this process becomes leader, until `shutdown` resolves or the
/// work itself returns. `work` is started anew after each re-acquisition.
pub async fn run_as_leader<W, Fut>(
    client: Client,
    cfg: LeaderConfig,
    shutdown: impl Future<Output = ()>,
    mut work: W,
) -> anyhow::Result<()>
where
    W: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let manager = LeaseManagerBuilder::new(client.clone(), &cfg.lease_name)
        .with_namespace(&cfg.namespace)
        .with_identity(&cfg.identity)
        .with_duration(cfg.duration_secs)
        .with_grace(cfg.grace_secs)
        .with_field_manager(format!("{}-lease", cfg.lease_name))
        .build()
        .await?;
    // Standing by: no write passes until this process holds the lease.
    let gate = super::write_gate::gate();
    gate.close();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
    // Each renewal reaches the gate as a watch event, as soon as the API server stores it:
    // polling with GETs added a read's latency (seconds on a loaded API server) to every
    // renewal and shut the gate of a leader that renewed in time.
    let lease_events = watcher(
        leases.clone(),
        watcher::Config::default().fields(&format!("metadata.name={}", cfg.lease_name)),
    )
    .default_backoff();
    tokio::pin!(lease_events);
    // A fallback read when the watch has not extended the gate for half a lease (a stalled
    // watch): the gate then stays open as long as the lease really is ours.
    let mut refresh = tokio::time::interval(std::time::Duration::from_millis(500));
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let half_lease = std::time::Duration::from_secs(cfg.duration_secs) / 2;
    let (mut leading, lease_task) = manager.watch().await;
    let mut running: Option<JoinHandle<anyhow::Result<()>>> = None;
    tokio::pin!(shutdown);
    let outcome = loop {
        let is_leader = *leading.borrow_and_update();
        match (is_leader, running.is_some()) {
            (true, false) => {
                tracing::info!(lease = %cfg.lease_name, identity = %cfg.identity, "acquired the lease; starting");
                refresh_gate(&leases, &cfg).await;
                running = Some(tokio::spawn(work()));
            }
            (false, true) => {
                gate.close();
                tracing::warn!(lease = %cfg.lease_name, "lost the lease; stopping");
                if let Some(task) = running.take() {
                    task.abort();
                }
            }
            _ => {}
        }
        tokio::select! {
            _ = refresh.tick() => {
                if !is_leader {
                    gate.close();
                } else if gate.open_for().is_none_or(|left| left < half_lease) {
                    refresh_gate(&leases, &cfg).await;
                }
            }
            event = lease_events.next() => match event {
                Some(Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease))) => {
                    if *leading.borrow() {
                        gate_from_lease(&lease, &cfg);
                    }
                }
                Some(Ok(watcher::Event::Delete(_))) => gate.close(),
                // Errors are retried with backoff by the stream; the gate keeps its deadline.
                Some(Ok(_)) | Some(Err(_)) => {}
                None => break Err(anyhow::anyhow!("the Lease watch ended")),
            },
            changed = leading.changed() => {
                if changed.is_err() {
                    break Err(anyhow::anyhow!("the lease manager stopped"));
                }
            }
            result = async { running.as_mut().expect("guarded by the branch condition").await }, if running.is_some() => {
                running = None;
                break match result {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(e),
                    Err(e) => Err(anyhow::anyhow!("controller task failed: {e}")),
                };
            }
            () = &mut shutdown => break Ok(()),
        }
    };
    gate.close();
    if let Some(task) = running.take() {
        task.abort();
    }
    // Closing the channel ends the lease task and hands the manager back for release.
    drop(leading);
    match lease_task.await {
        Ok(Ok(manager)) => {
            if let Err(e) = manager.release().await {
                tracing::warn!(error = %e, "could not release the lease");
            } else {
                tracing::info!(lease = %cfg.lease_name, "released the lease");
            }
        }
        Ok(Err(e)) => tracing::warn!(error = %e, "lease manager ended with an error"),
        Err(e) => tracing::warn!(error = %e, "lease manager task failed"),
    }
    if let Err(e) = &outcome {
        bail!("{e:#}");
    }
    outcome
}

/// Opens the write gate until the end of the lease as the API server holds it now, when
/// this process holds it; closes it otherwise (or when the Lease cannot be read: the gate
/// then closes by itself at the last deadline).
async fn refresh_gate(leases: &Api<Lease>, cfg: &LeaderConfig) {
    match leases.get_opt(&cfg.lease_name).await {
        Ok(Some(lease)) => gate_from_lease(&lease, cfg),
        Ok(None) => super::write_gate::gate().close(),
        Err(e) => tracing::debug!(error = %e, "lease not read; the write gate keeps its deadline"),
    }
}

/// Opens the write gate until the end of `lease` when this process holds it; closes it
/// otherwise.
fn gate_from_lease(lease: &Lease, cfg: &LeaderConfig) {
    let gate = super::write_gate::gate();
    let Some(spec) = lease.spec.as_ref() else {
        return gate.close();
    };
    let ours = spec.holder_identity.as_deref() == Some(cfg.identity.as_str());
    match (
        ours,
        spec.renew_time.as_ref().or(spec.acquire_time.as_ref()),
    ) {
        (true, Some(t)) => gate.open_for_lease(
            t.0.as_millisecond(),
            std::time::Duration::from_secs(cfg.duration_secs),
        ),
        _ => gate.close(),
    }
}

/// Runs `work` until SIGTERM/Ctrl-C: under a Lease when `cfg` is given (HA), else
/// directly (a single instance).
pub async fn run_until_shutdown<W, Fut>(
    client: Client,
    cfg: Option<LeaderConfig>,
    mut work: W,
) -> anyhow::Result<()>
where
    W: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    match cfg {
        Some(cfg) => run_as_leader(client, cfg, shutdown_signal(), work).await,
        None => {
            tokio::select! {
                r = tokio::spawn(work()) => r?,
                () = shutdown_signal() => Ok(()),
            }
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term => {},
    }
}

/// The server-side apply body that renews Lease `namespace/name` for `identity` now.
pub fn lease_renewal(
    name: &str,
    namespace: &str,
    identity: &str,
    duration_secs: i32,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "holderIdentity": identity,
            "leaseDurationSeconds": duration_secs,
            "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                k8s_openapi::jiff::Timestamp::now()
            ),
        },
    })
}

/// Renews the Lease `namespace/name` for `identity` every third of `duration_secs`, for
/// a process without leader election whose Lease others read as its sign of life (the
/// hub reads the agent's). Failures are logged and retried.
pub async fn renew_forever(
    client: Client,
    namespace: String,
    name: String,
    identity: String,
    duration_secs: i32,
) {
    let api: Api<Lease> = Api::namespaced(client, &namespace);
    let every =
        std::time::Duration::from_secs(u64::try_from(duration_secs / 3).unwrap_or(1).max(1));
    let mut failures = 0u32;
    loop {
        let lease = lease_renewal(&name, &namespace, &identity, duration_secs);
        let params = kube::api::PatchParams::apply(&format!("{name}-lease")).force();
        match api
            .patch(&name, &params, &kube::api::Patch::Apply(&lease))
            .await
        {
            Ok(_) => failures = 0,
            Err(e) => {
                failures += 1;
                if failures == 1 || failures.is_multiple_of(12) {
                    tracing::warn!(lease = %name, error = %e, "could not renew the Lease");
                }
            }
        }
        tokio::time::sleep(every).await;
    }
}

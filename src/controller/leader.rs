//! Leader election with a Lease (kube-lease-manager): the work runs only while this
//! process holds the lease, stops when it is lost, and the lease is released on shutdown
//! so a standby takes over at once instead of waiting for it to expire.

use std::future::Future;

use anyhow::bail;
use kube::Client;
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
    let manager = LeaseManagerBuilder::new(client, &cfg.lease_name)
        .with_namespace(&cfg.namespace)
        .with_identity(&cfg.identity)
        .with_duration(cfg.duration_secs)
        .with_grace(cfg.grace_secs)
        .with_field_manager(format!("{}-lease", cfg.lease_name))
        .build()
        .await?;
    let (mut leading, lease_task) = manager.watch().await;
    let mut running: Option<JoinHandle<anyhow::Result<()>>> = None;
    tokio::pin!(shutdown);
    let outcome = loop {
        let is_leader = *leading.borrow_and_update();
        match (is_leader, running.is_some()) {
            (true, false) => {
                tracing::info!(lease = %cfg.lease_name, identity = %cfg.identity, "acquired the lease; starting");
                running = Some(tokio::spawn(work()));
            }
            (false, true) => {
                tracing::warn!(lease = %cfg.lease_name, "lost the lease; stopping");
                if let Some(task) = running.take() {
                    task.abort();
                }
            }
            _ => {}
        }
        tokio::select! {
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

//! Leader election with a Lease ([`super::election`]): the work runs only while this
//! process holds the lease, stops when it is lost, and the lease is released on shutdown
//! so a standby takes over at once instead of waiting for it to expire.
//!
//! A renewal that lands late (a loaded API server) shuts the write gate but does not stop
//! the work: if the next renewal lands in the same term nobody else led meanwhile, and
//! the work goes on with its caches and queues instead of listing everything again (at 50
//! members a restart of the hub's controllers costs minutes). Only a term that ends (the
//! Lease someone else's) or a new one stops or restarts it.

use std::future::Future;
use std::time::Duration;

use anyhow::bail;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use tokio::task::JoinHandle;

use super::election::{self, Leadership, Timing};

#[derive(Debug, Clone)]
pub struct LeaderConfig {
    pub namespace: String,
    pub lease_name: String,
    pub identity: String,
    /// How long a holder keeps the lease without renewing it.
    pub duration_secs: u64,
    /// How often the holder renews it.
    pub renew_every: Duration,
}

/// A default identity: host name and pid, unique per process.
pub fn default_identity() -> String {
    let host =
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_else(|_| "localhost".into());
    format!("{}-{}", host.trim(), std::process::id())
}

/// Runs `work()` whenever this process becomes leader, until `shutdown` resolves or the
/// work itself returns. `work` is started anew for each term; a lapse within a term (writes
/// held back until a renewal lands) keeps it running.
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
    // Standing by: no write passes until this process holds the lease (but the lease's).
    let gate = super::write_gate::gate();
    gate.set_election_lease(&cfg.namespace, &cfg.lease_name);
    gate.close();
    let leases: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let (mut leading, election) = election::spawn(
        leases,
        &cfg.lease_name,
        &cfg.identity,
        Timing {
            duration: Duration::from_secs(cfg.duration_secs),
            renew_every: cfg.renew_every,
        },
    );
    // The work of the current term, and its term.
    let mut running: Option<(u64, JoinHandle<anyhow::Result<()>>)> = None;
    let mut lapsed_at: Option<std::time::Instant> = None;
    tokio::pin!(shutdown);
    let outcome = loop {
        let state = *leading.borrow_and_update();
        match state {
            Leadership::Leading { term } => {
                if let Some((t, task)) = running.take_if(|(t, _)| *t != term) {
                    tracing::warn!(lease = %cfg.lease_name, old = t, new = term, "a new term; restarting");
                    task.abort();
                }
                if running.is_none() {
                    tracing::info!(lease = %cfg.lease_name, identity = %cfg.identity, term, "acquired the lease; starting");
                    running = Some((term, tokio::spawn(work())));
                } else if let Some(since) = lapsed_at {
                    tracing::info!(lease = %cfg.lease_name, term, lapse = ?since.elapsed(), "the lease renewal landed in the same term; writes resume, the controllers kept");
                }
                lapsed_at = None;
            }
            Leadership::Lapsed { term } => {
                if lapsed_at.is_none() && running.is_some() {
                    tracing::warn!(lease = %cfg.lease_name, term, "the lease renewal is late; writes held back until it lands (the controllers keep running)");
                }
                lapsed_at.get_or_insert_with(std::time::Instant::now);
            }
            Leadership::Standby => {
                gate.close();
                lapsed_at = None;
                if let Some((_, task)) = running.take() {
                    tracing::warn!(lease = %cfg.lease_name, "lost the lease; stopping");
                    task.abort();
                }
            }
        }
        tokio::select! {
            changed = leading.changed() => {
                if changed.is_err() {
                    break Err(anyhow::anyhow!("the election stopped"));
                }
            }
            result = async { (&mut running.as_mut().expect("guarded by the branch condition").1).await }, if running.is_some() => {
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
    if let Some((_, task)) = running.take() {
        task.abort();
        // The work's writes end before the lease is handed over.
        let _ = task.await;
    }
    election.release().await;
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

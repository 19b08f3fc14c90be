use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use prometheus_client::registry::Registry;

use super::kube_args::{KubeArgs, init_tracing};
use crate::controller::http::{self, Readiness};
use crate::controller::leader::{self, LeaderConfig};
use crate::hub::member_loop::{self, MemberLoop};
use crate::hub::members::MemberRegistry;

#[derive(Debug, Args)]
pub struct HubArgs {
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Address for /metrics, /healthz and /readyz.
    #[arg(
        long,
        env = "PINFED_HUB_METRICS_ADDR",
        default_value = "127.0.0.1:9090"
    )]
    pub metrics_addr: SocketAddr,
    /// A member without a successful heartbeat for this long is NotReady.
    #[arg(long, env = "PINFED_MEMBER_GRACE_SECS", default_value = "40")]
    pub member_grace_secs: u64,
    /// How often each member is probed and its status written.
    #[arg(long, env = "PINFED_HEARTBEAT_SECS", default_value = "5")]
    pub heartbeat_secs: u64,
    /// Member workload status older than this is stale (the hub then says Unknown).
    #[arg(long, env = "PINFED_STALE_AFTER_SECS", default_value = "60")]
    pub stale_after_secs: i64,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "PINFED_LEASE_NAMESPACE", default_value = "pinfed-system")]
    pub lease_namespace: String,
    /// Identity in the Lease (default: host name and pid).
    #[arg(long, env = "PINFED_IDENTITY")]
    pub identity: Option<String>,
    /// Run without leader election (a single hub).
    #[arg(long, env = "PINFED_NO_LEADER_ELECTION")]
    pub no_leader_election: bool,
}

pub fn run(args: HubArgs) -> anyhow::Result<()> {
    init_tracing();
    tokio::runtime::Runtime::new()?.block_on(async move {
        let client = args.kube.client().await?;
        let mut registry = Registry::with_prefix("pinfed_hub");
        let health = prometheus_client::metrics::family::Family::default();
        registry.register(
            "member_ready",
            "1 when a member cluster is Ready",
            health.clone(),
        );
        let ready = Readiness::default();
        let registry = Arc::new(registry);
        tokio::spawn(http::serve(
            args.metrics_addr,
            registry.clone(),
            ready.clone(),
        ));
        crate::hub::ensure_namespace(&client, &args.lease_namespace).await?;
        let members = MemberRegistry::default();
        let work = {
            let client = client.clone();
            let ready = ready.clone();
            move || {
                let ctx = MemberLoop {
                    hub: client.clone(),
                    registry: members.clone(),
                    grace: Duration::from_secs(args.member_grace_secs),
                    interval: Duration::from_secs(args.heartbeat_secs),
                    health: health.clone(),
                };
                ready.set(true);
                async move {
                    member_loop::run(ctx).await;
                    Ok(())
                }
            }
        };
        if args.no_leader_election {
            tokio::select! {
                r = tokio::spawn(work()) => r??,
                () = leader::shutdown_signal() => {},
            }
            Ok(())
        } else {
            let cfg = LeaderConfig {
                namespace: args.lease_namespace.clone(),
                lease_name: "pinfed-hub".into(),
                identity: args
                    .identity
                    .clone()
                    .unwrap_or_else(leader::default_identity),
                duration_secs: 10,
                grace_secs: 2,
            };
            leader::run_as_leader(client, cfg, leader::shutdown_signal(), work).await
        }
    })
}

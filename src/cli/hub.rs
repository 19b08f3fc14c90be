use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use prometheus_client::registry::Registry;

use super::kube_args::{KubeArgs, init_tracing};
use crate::api::cronjob::PinterestCronJob;
use crate::api::daemon::PinterestDaemon;
use crate::api::federation::{FederatedQuota, MemberCluster};
use crate::api::jobset::PinterestJobSet;
use crate::api::runtime_profile::RuntimeProfile;
use crate::api::service::PinterestService;
use crate::api::statefulset::PinterestStatefulSet;
use crate::api::training::PinterestTrainingJob;
use crate::controller::http::{self, Readiness};
use crate::controller::leader::{self, LeaderConfig};
use crate::controller::metrics::ReconcileMetrics;
use crate::hub::member_loop::{self, MemberLoop};
use crate::hub::members::MemberRegistry;
use crate::hub::workloads::{self, HubContext};

/// A cache of every object of a cluster-scoped kind, kept current by a watch.
async fn mirror<K>(client: &kube::Client) -> anyhow::Result<kube::runtime::reflector::Store<K>>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let (store, writer) = reflector::store();
    let stream = watcher(
        kube::Api::<K>::all(client.clone()),
        watcher::Config::default(),
    )
    .backoff(crate::controller::watch::backoff())
    .reflect(writer)
    .for_each(|_| futures::future::ready(()));
    tokio::spawn(stream);
    store.wait_until_ready().await?;
    Ok(store)
}

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
    /// Reconcile every workload at least this often (seconds). A safety net: slice
    /// changes in members, member health changes and the end of a failover grace or
    /// failback window each trigger the workloads concerned at once.
    #[arg(long, env = "PINFED_RESYNC_SECS", default_value = "20")]
    pub resync_secs: u64,
    /// Reconciles in flight per workload kind. Each holds a connection to every member
    /// it reads or writes; more in flight than the API servers serve only queues there.
    #[arg(long, env = "PINFED_HUB_CONCURRENCY", default_value = "64", value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// How long a member that came back must stay Ready before workloads fail back to
    /// it and its stale slices are resized or removed (seconds).
    #[arg(long, env = "PINFED_FAILBACK_WINDOW_SECS", default_value = "120")]
    pub failback_window_secs: u64,
    /// Leader-election Lease duration (seconds): a standby takes over this long after the
    /// leader's last renewal at most.
    #[arg(long, env = "PINFED_LEASE_DURATION_SECS", default_value = "8")]
    pub lease_duration_secs: u64,
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
        let metrics = ReconcileMetrics::register(&mut registry);
        let hub_metrics = workloads::HubMetrics::register(&mut registry);
        let queue_metrics = crate::controller::queue::QueueMetrics::register(&mut registry);
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
        let cleanup_lock = Arc::new(tokio::sync::Mutex::new(()));
        // Standby or leader, keep a connection and node/pod caches for every member, so a
        // standby that takes over places at once instead of re-listing every member.
        tokio::spawn(warm_members(client.clone(), members.clone()));
        let work = {
            let client = client.clone();
            let ready = ready.clone();
            let metrics = metrics.clone();
            let hub_metrics = hub_metrics.clone();
            let queue_metrics = queue_metrics.clone();
            move || {
                let ctx = MemberLoop {
                    hub: client.clone(),
                    registry: members.clone(),
                    grace: Duration::from_secs(args.member_grace_secs),
                    interval: Duration::from_secs(args.heartbeat_secs),
                    health: health.clone(),
                    cleanup_lock: cleanup_lock.clone(),
                };
                let cleanup_lock = cleanup_lock.clone();
                let client = client.clone();
                let members = members.clone();
                let ready = ready.clone();
                let metrics = metrics.clone();
                let hub_metrics = hub_metrics.clone();
                let queue_metrics = queue_metrics.clone();
                async move {
                    let member_store = mirror::<MemberCluster>(&client).await?;
                    let profiles = mirror::<RuntimeProfile>(&client).await?;
                    let quotas = mirror::<FederatedQuota>(&client).await?;
                    let wctx = Arc::new(HubContext {
                        hub_metrics: hub_metrics.clone(),
                        hub: client.clone(),
                        registry: members,
                        members: member_store,
                        profiles,
                        quotas,
                        ledger: Default::default(),
                        quota_book: Default::default(),
                        held_back: Default::default(),
                        cleanup_lock,
                        metrics,
                        member_grace: Duration::from_secs(args.member_grace_secs),
                        failback_window: Duration::from_secs(args.failback_window_secs),
                        // Fresh trackers per leader term: a lost term's leftovers do not count.
                        decisions: Default::default(),
                        queues: crate::api::workload::WorkloadKind::ALL
                            .into_iter()
                            .map(|k| (k, queue_metrics.tracker(k.as_str())))
                            .collect(),
                        stale_after_secs: args.stale_after_secs,
                        resync: Duration::from_secs(args.resync_secs),
                        namespaces: Default::default(),
                        member_health: tokio::sync::watch::channel(0).0,
                        concurrency: args.concurrency,
                    });
                    let member_task = tokio::spawn(member_loop::run(ctx));
                    member_loop::wait_first_pass(&client, &wctx.registry, Duration::from_secs(10))
                        .await;
                    ready.set(true);
                    let profiles_loop = {
                        let wctx = wctx.clone();
                        async move {
                            loop {
                                workloads::propagate_profiles(&wctx).await;
                                tokio::time::sleep(Duration::from_secs(10)).await;
                            }
                        }
                    };
                    let quota_loop = {
                        let wctx = wctx.clone();
                        async move {
                            loop {
                                tokio::time::sleep(Duration::from_secs(2)).await;
                                let held: std::collections::BTreeMap<String, String> = wctx
                                    .held_back
                                    .lock()
                                    .map(|h| h.values().cloned().collect())
                                    .unwrap_or_default();
                                crate::hub::quota::write_quota_status(
                                    &wctx.hub,
                                    &wctx.quota_book,
                                    &wctx.quotas.state(),
                                    &held,
                                )
                                .await;
                            }
                        }
                    };
                    tokio::join!(
                        async {
                            let _ = member_task.await;
                        },
                        profiles_loop,
                        quota_loop,
                        workloads::watch_member_health(wctx.clone()),
                        workloads::run_kind::<PinterestService>(wctx.clone()),
                        workloads::run_kind::<PinterestJobSet>(wctx.clone()),
                        workloads::run_kind::<PinterestCronJob>(wctx.clone()),
                        workloads::run_kind::<PinterestDaemon>(wctx.clone()),
                        workloads::run_kind::<PinterestTrainingJob>(wctx.clone()),
                        workloads::run_kind::<PinterestStatefulSet>(wctx.clone()),
                    );
                    Ok(())
                }
            }
        };
        let cfg = (!args.no_leader_election).then(|| LeaderConfig {
            namespace: args.lease_namespace.clone(),
            lease_name: "pinfed-hub".into(),
            identity: args
                .identity
                .clone()
                .unwrap_or_else(leader::default_identity),
            duration_secs: args.lease_duration_secs,
            grace_secs: 1,
        });
        leader::run_until_shutdown(client, cfg, work).await
    })
}

/// Connects every MemberCluster (client, node and pod caches) and keeps the set current,
/// whether this process leads or stands by. Only the leader's member loop heartbeats
/// and writes status.
async fn warm_members(client: kube::Client, registry: MemberRegistry) {
    use kube::ResourceExt;
    let api: kube::Api<MemberCluster> = kube::Api::all(client.clone());
    loop {
        if let Ok(list) = api.list(&Default::default()).await {
            for mc in &list.items {
                if let Err(e) = crate::hub::members::ensure_member(&client, &registry, mc).await {
                    tracing::debug!(member = %mc.name_any(), error = %e, "member not connected yet");
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

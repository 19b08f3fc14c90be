//! The hub process: metrics and health endpoints, member connections (leader or
//! standby), and, under the Lease, the member loop, the workload loops per kind and the
//! profile and quota loops. Every loop of a term lives in the term's future and stops
//! with it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use prometheus_client::registry::Registry;

use crate::api::cronjob::PinterestCronJob;
use crate::api::daemon::PinterestDaemon;
use crate::api::federation::{FederatedQuota, MemberCluster};
use crate::api::jobset::PinterestJobSet;
use crate::api::runtime_profile::RuntimeProfile;
use crate::api::service::PinterestService;
use crate::api::statefulset::PinterestStatefulSet;
use crate::api::training::PinterestTrainingJob;
use crate::controller::http::{self, Readiness};
use crate::controller::kube_args::KubeArgs;
use crate::controller::leader::{self, LeaderConfig};
use crate::controller::metrics::ReconcileMetrics;
use crate::controller::mirror::{StatusRepair, Undecodables, Watching, mirror, mirror_decodable};
use crate::controller::trace::{TraceArgs, init_tracing};
use crate::hub::member_loop::{self, MemberLoop};
use crate::hub::members::MemberRegistry;
use crate::hub::workloads::{self, HubContext};

/// The federation's rollout for workloads that name none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DefaultRollout {
    /// One member first; once it runs the change healthily, the rest.
    Canary,
    /// Every member at once (still gated: a change that fails is rolled back).
    AllAtOnce,
}

impl DefaultRollout {
    pub fn policy(self, deadline_secs: i64) -> crate::api::rollout::RolloutPolicy {
        use crate::api::rollout::{RolloutPolicy, RolloutStage};
        let stages = match self {
            DefaultRollout::Canary => vec![
                RolloutStage {
                    name: Some("canary".into()),
                    count: Some(1),
                    ..Default::default()
                },
                RolloutStage {
                    name: Some("rest".into()),
                    ..Default::default()
                },
            ],
            DefaultRollout::AllAtOnce => Vec::new(),
        };
        RolloutPolicy {
            stages,
            progress_deadline_seconds: Some(deadline_secs),
            ..Default::default()
        }
    }
}

#[derive(Debug, Args)]
pub struct HubArgs {
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Address for /metrics, /healthz and /readyz.
    #[arg(
        long,
        env = "PINFED_HUB_METRICS_ADDR",
        default_value = "127.0.0.1:9090"
    )]
    pub metrics_addr: SocketAddr,
    /// A member without a successful heartbeat for this long is NotReady (four missed
    /// heartbeats at the default interval). With a workload's default failover grace
    /// (20 s) a lost member's work starts moving 40 s after its last heartbeat.
    #[arg(long, env = "PINFED_MEMBER_GRACE_SECS", default_value = "20")]
    pub member_grace_secs: u64,
    /// How often each member is probed (at most a quarter of `--member-grace-secs`).
    #[arg(long, env = "PINFED_HEARTBEAT_SECS", default_value = "5")]
    pub heartbeat_secs: u64,
    /// How often a MemberCluster's status records the last heartbeat and the agent's last
    /// renewal when nothing else in it changed (seconds). Readiness is judged on every
    /// heartbeat either way and written when it changes; this bounds the writes a member at
    /// rest costs the hub's API server.
    #[arg(long, env = "PINFED_HEARTBEAT_RECORD_SECS", default_value = "60")]
    pub heartbeat_record_secs: u64,
    /// Member workload status older than this is stale (the hub then says Unknown).
    #[arg(long, env = "PINFED_STALE_AFTER_SECS", default_value = "60")]
    pub stale_after_secs: i64,
    /// Reconcile every workload at least this often (seconds). A safety net only: slice
    /// changes in members, member health, drain, labels and taints, the end of a
    /// failover grace or failback window, an application failover's toleration, a soak
    /// or rollout deadline each trigger the workloads concerned at once (the e2e suite
    /// passes with it at an hour).
    #[arg(long, env = "PINFED_RESYNC_SECS", default_value = "600")]
    pub resync_secs: u64,
    /// How often bundles no workload on their member references any more are looked for
    /// (seconds); one found unwanted twice in a row is removed.
    #[arg(long, env = "PINFED_BUNDLE_GC_SECS", default_value = "120", value_parser = clap::value_parser!(u64).range(1..))]
    pub bundle_gc_secs: u64,
    /// Reconciles in flight per workload kind. Each holds a connection to every member
    /// it reads or writes; more in flight than the API servers serve only queues there.
    #[arg(long, env = "PINFED_HUB_CONCURRENCY", default_value = "64", value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// While other workloads wait for a reconcile, a status write that carries a new
    /// placement waits for them, this long at most (milliseconds; 0: never): under a
    /// burst, slices reach the members first. Member reports are written at once.
    #[arg(long, env = "PINFED_HUB_STATUS_DEFER_MS", default_value = "2000")]
    pub status_defer_ms: u64,
    /// A service's, stateful set's or daemon's status change that only updates what its
    /// members report (counts, messages; its conditions, generation, placement and
    /// rollout position as they were) is written at most once in this long
    /// (milliseconds; 0: every report at once). One after a quiet spell goes at once, the
    /// ones close behind it fold into one write; a condition's change goes at once.
    #[arg(long, env = "PINFED_HUB_REPORT_PACE_MS", default_value = "5000")]
    pub report_pace_ms: u64,
    /// How long a member that came back must stay Ready before workloads fail back to
    /// it and its stale slices are resized or removed (seconds).
    #[arg(long, env = "PINFED_FAILBACK_WINDOW_SECS", default_value = "120")]
    pub failback_window_secs: u64,
    /// Leader-election Lease duration (seconds): a standby takes over this long after the
    /// leader's last renewal at most.
    #[arg(long, env = "PINFED_LEASE_DURATION_SECS", default_value = "8", value_parser = clap::value_parser!(u64).range(2..))]
    pub lease_duration_secs: u64,
    /// How changes roll out for workloads whose `spec.rollout` says nothing: `canary`
    /// (one member first, healthy, then the rest) or `all-at-once`.
    #[arg(long, env = "PINFED_DEFAULT_ROLLOUT", default_value = "canary")]
    pub default_rollout: DefaultRollout,
    /// The default rollout's progress deadline per member (seconds).
    #[arg(long, env = "PINFED_DEFAULT_ROLLOUT_DEADLINE_SECS", default_value = "600", value_parser = clap::value_parser!(i64).range(1..))]
    pub default_rollout_deadline_secs: i64,
    /// Queue aging: a waiting workload's priority grows by `--queue-aging-step` every this
    /// many seconds (up to `--queue-aging-max`), so low priorities are not starved.
    #[arg(long, env = "PINFED_QUEUE_AGING_SECS", default_value = "60", value_parser = clap::value_parser!(i64).range(1..))]
    pub queue_aging_secs: i64,
    #[arg(long, env = "PINFED_QUEUE_AGING_STEP", default_value = "10", value_parser = clap::value_parser!(i32).range(0..))]
    pub queue_aging_step: i32,
    #[arg(long, env = "PINFED_QUEUE_AGING_MAX", default_value = "1000", value_parser = clap::value_parser!(i32).range(0..))]
    pub queue_aging_max: i32,
    /// Never preempt: waiting workloads only queue, whatever their class says.
    #[arg(long, env = "PINFED_NO_PREEMPTION")]
    pub no_preemption: bool,
    /// Workloads moved off members tainted `NoExecute`, per second across the fleet once
    /// the burst is spent: a member tainted under many workloads does not surge them all
    /// onto the other members at once (the others wait their turn where they run).
    #[arg(long, env = "PINFED_TAINT_MOVES_PER_SECOND", default_value = "2", value_parser = positive_rate)]
    pub taint_moves_per_second: f64,
    /// Moves off tainted members admitted at once after a quiet time.
    #[arg(long, env = "PINFED_TAINT_MOVES_BURST", default_value = "20", value_parser = clap::value_parser!(u32).range(1..))]
    pub taint_moves_burst: u32,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "PINFED_LEASE_NAMESPACE", default_value = "pinfed-system")]
    pub lease_namespace: String,
    /// Name of the leader-election Lease: hubs that share it elect one leader.
    #[arg(long, env = "PINFED_LEASE_NAME", default_value = "pinfed-hub")]
    pub lease_name: String,
    /// Identity in the Lease (default: host name and pid).
    #[arg(long, env = "PINFED_IDENTITY")]
    pub identity: Option<String>,
    /// Run without leader election (a single hub).
    #[arg(long, env = "PINFED_NO_LEADER_ELECTION")]
    pub no_leader_election: bool,
}

/// What a hub process keeps across leadership terms.
#[derive(Clone)]
struct Process {
    client: kube::Client,
    identity: String,
    members: MemberRegistry,
    cleanup_lock: Arc<tokio::sync::Mutex<()>>,
    ready: Readiness,
    health: prometheus_client::metrics::family::Family<
        crate::hub::member_loop::MemberLabels,
        prometheus_client::metrics::gauge::Gauge,
    >,
    metrics: ReconcileMetrics,
    hub_metrics: workloads::HubMetrics,
    queue_metrics: crate::controller::queue::QueueMetrics,
}

pub fn run(args: HubArgs) -> anyhow::Result<()> {
    let _traces = init_tracing("pinfed-hub", &args.trace)?;
    tokio::runtime::Runtime::new()?.block_on(async move {
        let client = args.kube.client().await?;
        let side = crate::controller::cluster_side::read(&client)
            .await
            .context("reading which side of a federation this cluster is on")?;
        crate::controller::cluster_side::check_hub(&side).map_err(anyhow::Error::msg)?;
        let mut registry = Registry::with_prefix("pinfed_hub");
        let health = prometheus_client::metrics::family::Family::default();
        registry.register(
            "member_ready",
            "1 when a member cluster is Ready",
            health.clone(),
        );
        let process = Process {
            identity: args
                .identity
                .clone()
                .unwrap_or_else(leader::default_identity),
            members: MemberRegistry::default(),
            cleanup_lock: Arc::new(tokio::sync::Mutex::new(())),
            ready: Readiness::default(),
            health,
            metrics: ReconcileMetrics::register(&mut registry),
            hub_metrics: workloads::HubMetrics::register(&mut registry),
            queue_metrics: crate::controller::queue::QueueMetrics::register(&mut registry),
            client: client.clone(),
        };
        let serve = http::serve(args.metrics_addr, Arc::new(registry), process.ready.clone());
        let _http = Watching::spawn(async move {
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "metrics and health endpoints stopped");
            }
        });
        crate::controller::apply::ensure_namespace(
            &client,
            &args.lease_namespace,
            crate::controller::apply::HUB_FIELD_MANAGER,
        )
        .await?;
        // Standby or leader, keep a connection and node/pod caches for every member, so a
        // standby that takes over places at once instead of re-listing every member.
        let _warm = Watching::spawn(warm_members(client.clone(), process.members.clone()));
        let cfg = (!args.no_leader_election).then(|| LeaderConfig {
            namespace: args.lease_namespace.clone(),
            lease_name: args.lease_name.clone(),
            identity: process.identity.clone(),
            duration_secs: args.lease_duration_secs,
            // Renewed four times a lease: the write gate (controller/write_gate.rs) shuts a
            // quarter second before the end, and a renewal that takes seconds on a loaded
            // API server must still land before.
            renew_every: Duration::from_secs(args.lease_duration_secs) / 4,
        });
        let args = Arc::new(args);
        leader::run_until_shutdown(client, cfg, move || lead(process.clone(), args.clone())).await
    })
}

/// One leadership term. Nothing is spawned: the caches' watches, the member loop and the
/// workload loops live in this future and stop when the term ends.
async fn lead(p: Process, args: Arc<HubArgs>) -> anyhow::Result<()> {
    let client = &p.client;
    // Objects another pinfed version wrote: a status field of another shape is left out
    // (the hub writes its own); a profile this version cannot decode is left out, not a
    // term that never starts; a member or quota it cannot read holds the term back,
    // named in an error, rather than being taken as gone (controller/mirror.rs).
    // The leader puts a status it had to read in part back in its own shape: the API
    // server refuses its server-side applies to an object its schema no longer fits.
    let repair = || StatusRepair::InPlace(client.clone());
    let (member_store, _w1) =
        mirror_decodable::<MemberCluster>(client, Undecodables::Wait, repair()).await?;
    let (profiles, _w2) =
        mirror_decodable::<RuntimeProfile>(client, Undecodables::LeaveOut, StatusRepair::None)
            .await?;
    let (quotas, _w3) =
        mirror_decodable::<FederatedQuota>(client, Undecodables::Wait, repair()).await?;
    let (classes, _w4) = mirror::<k8s_openapi::api::scheduling::v1::PriorityClass>(client).await?;
    let wctx = Arc::new(HubContext {
        hub_metrics: p.hub_metrics.clone(),
        hub: client.clone(),
        registry: p.members.clone(),
        members: member_store,
        profiles,
        quotas,
        ledger: Default::default(),
        quota_book: Default::default(),
        held_back: Default::default(),
        cleanup_lock: p.cleanup_lock.clone(),
        metrics: p.metrics.clone(),
        member_grace: Duration::from_secs(args.member_grace_secs),
        revisions: Default::default(),
        default_rollout: args
            .default_rollout
            .policy(args.default_rollout_deadline_secs),
        failback_window: Duration::from_secs(args.failback_window_secs),
        // Fresh trackers per leader term: a lost term's leftovers do not count.
        decisions: Default::default(),
        own_writes: Default::default(),
        status_deferrals: workloads::status_defer::StatusDeferrals::new(Duration::from_millis(
            args.status_defer_ms,
        )),
        report_pace: workloads::report_pace::ReportPace::new(Duration::from_millis(
            args.report_pace_ms,
        )),
        workload_caches: Default::default(),
        queues: crate::api::workload::WorkloadKind::ALL
            .into_iter()
            .map(|k| (k, p.queue_metrics.tracker(k.as_str())))
            .collect(),
        stale_after_secs: args.stale_after_secs,
        resync: Duration::from_secs(args.resync_secs),
        namespaces: Default::default(),
        member_health: tokio::sync::watch::channel(0).0,
        concurrency: args.concurrency,
        recorder: crate::controller::events::EventSink::new(
            client.clone(),
            kube::runtime::events::Reporter {
                controller: "pinfed-hub".into(),
                instance: Some(p.identity.clone()),
            },
        ),
        retries: crate::controller::retry::RetryPolicy::new(
            Duration::from_secs(1),
            Duration::from_secs(60),
        ),
        config: Default::default(),
        priority: workloads::priority::PriorityState::new(
            classes,
            crate::placement::priority::Aging {
                every_secs: args.queue_aging_secs,
                step: args.queue_aging_step,
                max: args.queue_aging_max,
            },
            !args.no_preemption,
        ),
        hosts: Default::default(),
        taint_moves: workloads::TaintMoves::new(crate::placement::move_budget::MoveRate {
            per_second: args.taint_moves_per_second,
            burst: args.taint_moves_burst,
        }),
        unready_clocks: Default::default(),
    });
    let member_loop = member_loop::run(MemberLoop {
        hub: client.clone(),
        registry: p.members.clone(),
        grace: Duration::from_secs(args.member_grace_secs),
        interval: heartbeat_interval(args.heartbeat_secs, args.member_grace_secs),
        record_every: Duration::from_secs(args.heartbeat_record_secs),
        health: p.health.clone(),
        cleanup_lock: p.cleanup_lock.clone(),
        recorder: crate::controller::events::EventSink::new(
            client.clone(),
            kube::runtime::events::Reporter {
                controller: "pinfed-hub".into(),
                instance: Some(p.identity.clone()),
            },
        ),
        credentials: Default::default(),
    });
    // The workload loops start after the member loop's first pass (member health known).
    let workload_loops = async {
        member_loop::wait_first_pass(client, &wctx.registry, Duration::from_secs(10)).await;
        p.ready.set(true);
        tokio::join!(
            profiles_loop(&wctx),
            quota_status_loop(&wctx),
            crate::hub::bundle_gc::run(&wctx, Duration::from_secs(args.bundle_gc_secs)),
            crate::hub::config_follow::run(&wctx.hub, &wctx.config),
            workloads::watch_member_health(wctx.clone()),
            workloads::run_kind::<PinterestService>(wctx.clone()),
            workloads::run_kind::<PinterestJobSet>(wctx.clone()),
            workloads::run_kind::<PinterestCronJob>(wctx.clone()),
            workloads::run_kind::<PinterestDaemon>(wctx.clone()),
            workloads::run_kind::<PinterestTrainingJob>(wctx.clone()),
            workloads::run_kind::<PinterestStatefulSet>(wctx.clone()),
        );
    };
    tokio::join!(member_loop, workload_loops);
    Ok(())
}

/// How often each member is heartbeated: `--heartbeat-secs`, but never fewer than four
/// heartbeats within the member grace (a grace of 5 s with 5 s heartbeats would call a
/// healthy member NotReady at the end of every interval). Heartbeats used to come every
/// ~2 s whatever the flag, because each status write woke the member loop again; the
/// status is no longer written with every heartbeat.
fn heartbeat_interval(heartbeat_secs: u64, grace_secs: u64) -> Duration {
    let quarter = Duration::from_millis(grace_secs.saturating_mul(1000) / 4);
    Duration::from_secs(heartbeat_secs)
        .min(quarter)
        .max(Duration::from_millis(500))
}

/// Every hub RuntimeProfile into every Ready member: within a second of a change on the
/// hub (a profile upgrade's first stage waits for it), within 10 s for members that joined,
/// came back or missed one, and every 5 minutes to each member regardless
/// (`workloads::ProfileSync`).
async fn profiles_loop(ctx: &HubContext) {
    let mut last = None;
    let mut since = std::time::Instant::now();
    let mut pruned = std::time::Instant::now();
    let mut given = workloads::ProfileSync::default();
    // Each profile's version and content as first seen: an edit in place (same version,
    // other content) is a new revision of every workload that resolves to the profile,
    // rolled out stage by stage (revisions pin the exact content, which the hub
    // snapshots) — said with an Event on the profile, as a version changed in place.
    let mut contents: std::collections::BTreeMap<String, (String, String)> = Default::default();
    loop {
        for p in ctx.profiles.state() {
            if crate::expand::is_snapshot(&p) {
                continue;
            }
            let name = kube::ResourceExt::name_any(p.as_ref());
            // Marking a profile default or not is how upgrades are published: not an edit.
            let now = (p.spec.version.clone(), crate::expand::profile_digest(&p));
            match contents.insert(name.clone(), now.clone()) {
                Some(before) if before.1 != now.1 => {
                    let (type_, what) = if before.0 == now.0 {
                        (
                            kube::runtime::events::EventType::Normal,
                            format!(
                                "changed in place (still version {}): workloads that resolve to it roll the new content out as a new revision, stage by stage; members not yet there keep the old content (snapshot {})",
                                now.0, before.1
                            ),
                        )
                    } else {
                        (
                            kube::runtime::events::EventType::Warning,
                            format!(
                                "changed its version in place ({} → {}): workloads pinned to {} no longer resolve to it, and members running a revision pinned to it keep its old content (snapshot {})",
                                before.0, now.0, before.0, before.1
                            ),
                        )
                    };
                    let ev = kube::runtime::events::Event {
                        type_,
                        reason: "EditedInPlace".into(),
                        note: Some(format!("RuntimeProfile {name} {what}")),
                        action: "EditedInPlace".into(),
                        secondary: None,
                    };
                    let _ = ctx
                        .recorder
                        .publish(&ev, &kube::Resource::object_ref(p.as_ref(), &()))
                        .await;
                    tracing::info!(profile = %name, version = %now.0, digest = %now.1, "runtime profile edited in place: a new revision of the workloads on it");
                }
                _ => {}
            }
        }
        if pruned.elapsed() >= Duration::from_secs(300) {
            workloads::prune_snapshots(ctx).await;
            pruned = std::time::Instant::now();
        }
        let now = workloads::profile_versions(ctx);
        if last.as_ref() != Some(&now) || since.elapsed() >= Duration::from_secs(10) {
            workloads::propagate_profiles(ctx, &mut given).await;
            last = Some(now);
            since = std::time::Instant::now();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// FederatedQuota status (used, per cluster, held-back workloads), every 2 s.
async fn quota_status_loop(ctx: &HubContext) {
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let held: std::collections::BTreeMap<String, String> = ctx
            .held_back
            .lock()
            .map(|h| h.values().cloned().collect())
            .unwrap_or_default();
        crate::hub::quota_book::write_quota_status(
            &ctx.hub,
            &ctx.quota_book,
            &ctx.quotas.state(),
            &held,
        )
        .await;
    }
}

/// Connects every MemberCluster (client, node and pod caches) and keeps the set current,
/// whether this process leads or stands by. Only the leader's member loop heartbeats
/// and writes status.
async fn warm_members(client: kube::Client, registry: MemberRegistry) {
    use kube::ResourceExt;
    let api = crate::hub::members::member_clusters(&client);
    loop {
        if let Ok(list) = crate::controller::mirror::list_decodable::<MemberCluster>(&api).await {
            for mc in &list {
                if let Err(e) = crate::hub::members::ensure_member(&client, &registry, mc).await {
                    tracing::debug!(member = %mc.name_any(), error = %e, "member not connected yet");
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// A rate above zero (moves per second).
fn positive_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!("{s:?} is not a rate above zero (moves per second)")),
    }
}

#[cfg(test)]
mod heartbeat_tests {
    use super::*;

    #[test]
    fn four_heartbeats_fit_in_the_member_grace() {
        // The defaults: 5 s heartbeats, 20 s grace.
        assert_eq!(heartbeat_interval(5, 20), Duration::from_secs(5));
        // A short grace gets faster heartbeats, never below half a second.
        assert_eq!(heartbeat_interval(5, 5), Duration::from_millis(1250));
        assert_eq!(heartbeat_interval(5, 1), Duration::from_millis(500));
        // A longer grace does not slow the heartbeat asked for.
        assert_eq!(heartbeat_interval(1, 60), Duration::from_secs(1));
    }
}

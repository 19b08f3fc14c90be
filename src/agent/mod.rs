//! The per-cluster agent: watches the Pinterest kinds in its cluster, expands them into
//! native objects with the expansion engine, applies and prunes them, and reports status.

pub mod applied;
pub mod bundles;
pub mod kinds;
pub mod owned;
pub mod policy;
pub mod pull;
pub mod reconcile;
pub mod status;
pub mod status_hold;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use std::fmt::Debug;

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Service};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use kube::runtime::events::Reporter;
use kube::runtime::{Controller, WatchStreamExt, reflector, watcher};
use kube::{Client, Resource, ResourceExt};
use prometheus_client::registry::Registry;
use serde::de::DeserializeOwned;

use self::kinds::AgentKind;
use self::reconcile::{AgentError, Context, error_policy, reconcile};
use crate::api::cronjob::PinterestCronJob;
use crate::api::daemon::PinterestDaemon;
use crate::api::jobset::PinterestJobSet;
use crate::api::kind::NativeKind;
use crate::api::runtime_profile::RuntimeProfile;
use crate::api::service::PinterestService;
use crate::api::statefulset::PinterestStatefulSet;
use crate::api::training::PinterestTrainingJob;
use crate::controller::compact::CompactCache;
use crate::controller::http::{self, Readiness};
use crate::controller::kube_args::KubeArgs;
use crate::controller::leader::{self, LeaderConfig};
use crate::controller::metrics::ReconcileMetrics;
use crate::controller::queue::{QueueDepth, QueueMetrics};
use crate::controller::trace::{TraceArgs, init_tracing};
use crate::controller::watch;

#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Name of the member cluster this agent runs in (identity env vars, ingress hosts).
    #[arg(long, env = "PINFED_CLUSTER_NAME")]
    pub cluster_name: String,
    /// Address for /metrics, /healthz and /readyz.
    #[arg(
        long,
        env = "PINFED_AGENT_METRICS_ADDR",
        default_value = "127.0.0.1:8080"
    )]
    pub metrics_addr: SocketAddr,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "PINFED_LEASE_NAMESPACE", default_value = "pinfed-system")]
    pub lease_namespace: String,
    /// Identity in the Lease (default: host name and pid).
    #[arg(long, env = "PINFED_IDENTITY")]
    pub identity: Option<String>,
    /// Run without leader election (a single agent).
    #[arg(long, env = "PINFED_NO_LEADER_ELECTION")]
    pub no_leader_election: bool,
    /// Reconciles in flight per kind. Each holds its expanded objects and requests; more
    /// in flight than the member API server serves only queues there and costs memory.
    #[arg(long, env = "PINFED_AGENT_CONCURRENCY", default_value = "16", value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// How long a slice's status that only says its pods are still coming up may wait
    /// before it is written; a later one replaces it meanwhile, and Ready, Degraded or a
    /// failure is written at once. Fewer writes on the member's API server (0: every
    /// change written as it is seen).
    #[arg(long, env = "PINFED_AGENT_STATUS_HOLD_MS", default_value = "20000")]
    pub status_hold_ms: u64,
    /// push: the hub writes this member's slices. pull: the agent fetches them from the
    /// hub with the kubeconfig in the Secret pinfed-system/pinfed-hub-kubeconfig (left
    /// by `pinfed join NAME --mode pull`), reports status and capacity there.
    #[arg(long, env = "PINFED_AGENT_MODE", value_enum, default_value = "push")]
    pub mode: AgentMode,
    /// Pull mode only: mirror slices and report, but expand nothing (the aggregation
    /// benchmark writes slice status itself, to time the pull path alone).
    #[arg(long)]
    pub pull_only: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentMode {
    Push,
    Pull,
}

fn labels() -> watcher::Config {
    watcher::Config::default().labels(&format!(
        "{}={}",
        crate::api::common::LABEL_MANAGED_BY,
        crate::api::common::MANAGED_BY
    ))
}

fn kind_label(kind: &str) -> crate::controller::metrics::KindLabels {
    crate::controller::metrics::KindLabels {
        kind: kind.to_string(),
    }
}

/// An owned-object watch (metadata only, our label) whose events trigger the owning `K`,
/// counted in `queue` on the way in; deletions and foreign spec changes also reach the
/// book of applied objects, so the next reconcile applies again.
fn owned<K, Child>(
    ctx: &Arc<Context>,
    queue: &QueueDepth,
) -> impl Stream<Item = Result<PartialObjectMeta<Child>, watcher::Error>> + Send + 'static
where
    K: AgentKind,
    Child: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let book = ctx.clone();
    let child = Child::kind(&()).to_string();
    ctx.owned.register(K::KIND, &child);
    queue.track_owners::<K, _, _, _>(watch::skip_errors(
        format!("{child} (owned by {})", K::KIND.as_str()),
        watcher(
            Api::<PartialObjectMeta<Child>>::all(ctx.client.clone()),
            labels(),
        )
        .backoff(watch::backoff())
        .inspect(move |event| {
            if let Ok(event) = event {
                if book.applied.saw(event) {
                    book.metrics.drift.get_or_create(&kind_label(&child)).inc();
                }
                book.owned.saw(K::KIND, &child, event);
            }
        })
        .touched_objects(),
    ))
}

/// The services' Deployments, whole but for their pod template and managed fields (a
/// reconcile reads their status and generation from this store instead of listing,
/// `reconcile::observe`): stored, then passed on as triggers like [`owned`]'s.
fn owned_deployments<K: AgentKind>(
    ctx: &Arc<Context>,
    queue: &QueueDepth,
) -> impl Stream<Item = Result<Deployment, watcher::Error>> + Send + 'static {
    let writer = ctx
        .deployments_writer
        .lock()
        .ok()
        .and_then(|mut w| w.take())
        .expect("one services controller per agent run");
    let book = ctx.clone();
    ctx.owned.register(K::KIND, "Deployment");
    queue.track_owners::<K, _, _, _>(watch::skip_errors(
        format!("Deployment (owned by {})", K::KIND.as_str()),
        watcher(Api::<Deployment>::all(ctx.client.clone()), labels())
            .backoff(watch::backoff())
            .modify(|d| {
                d.managed_fields_mut().clear();
                if let Some(spec) = d.spec.as_mut() {
                    spec.template = Default::default();
                }
            })
            .inspect(move |event| {
                if let Ok(event) = event {
                    if book.applied.saw(event) {
                        book.metrics
                            .drift
                            .get_or_create(&kind_label("Deployment"))
                            .inc();
                    }
                    book.owned.saw(K::KIND, "Deployment", event);
                }
            })
            .reflect(writer)
            .touched_objects(),
    ))
}

/// One controller for one kind, re-run for every object when RuntimeProfiles change. Its
/// trigger streams are built here (not by `Controller::new` / `owns`) so every trigger is
/// counted in the kind's queue-depth tracker before it reaches the scheduler.
async fn run_kind<K: AgentKind>(
    ctx: Arc<Context>,
    profile_changes: futures::channel::mpsc::UnboundedReceiver<()>,
) {
    let c = ctx.client.clone();
    let queue = ctx.queue(K::KIND).clone();
    let concurrency = ctx.concurrency;
    // Slices are cached as JSON, only their metadata typed (controller::compact); managed
    // fields are dropped.
    let cache = CompactCache::<K>::default();
    let (reader, writer) = reflector::store::<PartialObjectMeta<K>>();
    // Back off on watch errors, briefly: a member API server that restarts must not be
    // hammered, and the watch must come back by itself and soon (controller::watch).
    // Untyped: a slice the kind cannot decode (possible where the member's CRDs leave the
    // spec open) fails its own reconcile, refused as Invalid, not the list of every slice.
    let main = watcher(
        Api::<DynamicObject>::all_with(c.clone(), &ApiResource::erase::<K>(&())),
        watcher::Config::default().any_semantic(),
    )
    .backoff(watch::backoff())
    .map_ok({
        let cache = cache.clone();
        let ctx = ctx.clone();
        move |event| {
            // Own status writes the watch has now delivered need no record any more.
            ctx.own_writes
                .seen_in(&event, reconcile::untyped_slice_key::<K>);
            cache.ingest(event)
        }
    })
    .reflect(writer)
    .applied_objects();
    let mut controller = Controller::for_stream(
        queue.track_objects(watch::skip_errors(K::KIND.as_str().into(), main)),
        reader,
    )
    .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
    // Trigger errors are dropped above; this only bounds a pause if one slips through.
    .trigger_backoff(watch::backoff());
    // Generated objects carry an owner reference: a change or deletion brings us back.
    // What the kind's expansion generates (its home says; a kind that generates a native
    // kind the agent does not watch would miss that object's drift and deletion).
    for native in K::GENERATES {
        controller = match native {
            NativeKind::Deployment => controller.owns_stream(owned_deployments::<K>(&ctx, &queue)),
            NativeKind::Service => controller.owns_stream(owned::<K, Service>(&ctx, &queue)),
            NativeKind::ConfigMap => controller.owns_stream(owned::<K, ConfigMap>(&ctx, &queue)),
            NativeKind::Ingress => controller.owns_stream(owned::<K, Ingress>(&ctx, &queue)),
            NativeKind::PodDisruptionBudget => {
                controller.owns_stream(owned::<K, PodDisruptionBudget>(&ctx, &queue))
            }
            NativeKind::Job => controller.owns_stream(owned::<K, Job>(&ctx, &queue)),
            NativeKind::PersistentVolumeClaim => {
                controller.owns_stream(owned::<K, PersistentVolumeClaim>(&ctx, &queue))
            }
            NativeKind::CronJob => controller.owns_stream(owned::<K, CronJob>(&ctx, &queue)),
            NativeKind::DaemonSet => controller.owns_stream(owned::<K, DaemonSet>(&ctx, &queue)),
            NativeKind::StatefulSet => {
                controller.owns_stream(owned::<K, StatefulSet>(&ctx, &queue))
            }
        };
    }
    let all = queue.track_all(controller.store(), profile_changes);
    // A bundle this kind's slices use changed in the drop namespace.
    let bundle_changes = {
        let queue = queue.clone();
        ctx.bundle_users.triggers(K::KIND).map(move |(ns, name)| {
            queue.triggered(Some(&ns), &name);
            reflector::ObjectRef::<PartialObjectMeta<K>>::new(&name).within(&ns)
        })
    };
    controller
        .reconcile_all_on(all)
        .reconcile_on(bundle_changes)
        .run(
            reconcile_cached::<K>,
            error_policy_cached::<K>,
            Arc::new(KindContext { ctx, cache }),
        )
        .for_each(|r| {
            queue.settle(&r);
            futures::future::ready(())
        })
        .await;
}

/// A kind's controller context: the agent's, and the kind's cache of whole slices.
struct KindContext<K> {
    ctx: Arc<Context>,
    cache: CompactCache<K>,
}

/// Decodes the slice from the cache and reconciles it.
async fn reconcile_cached<K: AgentKind>(
    meta: Arc<PartialObjectMeta<K>>,
    kc: Arc<KindContext<K>>,
) -> Result<Action, AgentError> {
    let Some(body) = kc.cache.body(&meta) else {
        // Deleted since it was queued: nothing left to do (and nothing waits).
        kc.ctx.queue(K::KIND).picked(meta.as_ref());
        return Ok(Action::await_change());
    };
    match crate::controller::compact::decode::<K>(&body) {
        Ok(obj) => reconcile(Arc::new(obj), kc.ctx.clone()).await,
        Err(why) => {
            kc.ctx.queue(K::KIND).picked(meta.as_ref());
            reconcile::undecodable(&kc.ctx, &meta, &body, why).await
        }
    }
}

fn error_policy_cached<K: AgentKind>(
    meta: Arc<PartialObjectMeta<K>>,
    err: &AgentError,
    kc: Arc<KindContext<K>>,
) -> Action {
    let object = format!(
        "{}/{}",
        meta.namespace().unwrap_or_default(),
        meta.name_any()
    );
    error_policy::<K>(&object, err, &kc.ctx)
}

/// Runs all controllers until the watches end.
pub async fn run_controllers(
    client: Client,
    cluster: String,
    metrics: ReconcileMetrics,
    queues: QueueMetrics,
    ready: Readiness,
    concurrency: u16,
    status_hold: Duration,
) -> anyhow::Result<()> {
    let (profiles, writer) = reflector::store::<RuntimeProfile>();
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..6 {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        senders.push(tx);
        receivers.push(rx);
    }
    // A changed RuntimeProfile or member policy reconciles every workload.
    let reconcile_all = move || {
        for tx in &senders {
            let _ = tx.unbounded_send(());
        }
    };
    let (policy, _policy_watches) = policy::follow(&client, reconcile_all.clone());
    // A profile this version cannot decode is left out (slices naming it wait Invalid),
    // not a watch that never lists and an agent that never starts.
    let profile_watch = crate::controller::mirror::decodable_watch::<RuntimeProfile>(
        &client,
        watcher::Config::default(),
        crate::controller::mirror::Undecodables::LeaveOut,
        crate::controller::mirror::StatusRepair::None,
    )
    .reflect(writer)
    .applied_objects()
    .for_each(move |_| {
        reconcile_all();
        futures::future::ready(())
    });
    // Owned by this term: dropped (and stopped) with it, even when the term is aborted.
    let _profile_watch = crate::controller::mirror::Watching::spawn(profile_watch);
    profiles.wait_until_ready().await?;
    policy::ready(&policy).await?;
    // The member's PriorityClasses: a slice's class goes on its pods only where it exists.
    let (priority_classes, _classes_watch) = crate::controller::mirror::mirror::<
        k8s_openapi::api::scheduling::v1::PriorityClass,
    >(&client)
    .await?;
    let reporter = Reporter {
        controller: "pinfed-agent".into(),
        instance: Some(cluster.clone()),
    };
    let ctx = Arc::new(Context::new(
        client.clone(),
        cluster,
        profiles,
        priority_classes,
        policy,
        crate::controller::events::EventSink::new(client, reporter),
        metrics,
        &queues,
        concurrency,
        status_hold,
    ));
    ready.set(true);
    let mut rx = receivers.into_iter();
    let mut next = || rx.next().expect("one receiver per kind");
    tokio::join!(
        bundles::follow(&ctx.client, &ctx.bundle_users),
        run_kind::<PinterestService>(ctx.clone(), next()),
        run_kind::<PinterestJobSet>(ctx.clone(), next()),
        run_kind::<PinterestCronJob>(ctx.clone(), next()),
        run_kind::<PinterestDaemon>(ctx.clone(), next()),
        run_kind::<PinterestTrainingJob>(ctx.clone(), next()),
        run_kind::<PinterestStatefulSet>(ctx.clone(), next()),
    );
    Ok(())
}

pub fn run(args: AgentArgs) -> anyhow::Result<()> {
    let _traces = init_tracing("pinfed-agent", &args.trace)?;
    anyhow::ensure!(
        crate::api::validation::is_dns_label(&args.cluster_name),
        "--cluster-name (PINFED_CLUSTER_NAME) {:?} is not a member name (a DNS label): set \
         it to the name the member was joined with (in deploy/overlays/member-cluster/\
         member-name.yaml, or `pinfed join NAME --install-agent`)",
        args.cluster_name
    );
    anyhow::ensure!(
        !args.pull_only || args.mode == AgentMode::Pull,
        "--pull-only needs --mode pull"
    );
    tokio::runtime::Runtime::new()?.block_on(async move {
        let client = args.kube.client().await?;
        let side = crate::controller::cluster_side::read(&client)
            .await
            .context("reading which side of a federation this cluster is on")?;
        crate::controller::cluster_side::check_agent(&side, &args.cluster_name)
            .map_err(anyhow::Error::msg)?;
        let mut registry = Registry::with_prefix("pinfed_agent");
        let metrics = ReconcileMetrics::register(&mut registry);
        let queues = QueueMetrics::register(&mut registry);
        let ready = Readiness::default();
        tokio::spawn(http::serve(
            args.metrics_addr,
            Arc::new(registry),
            ready.clone(),
        ));
        let cluster = args.cluster_name.clone();
        let identity = args
            .identity
            .clone()
            .unwrap_or_else(leader::default_identity);
        let work = {
            let client = client.clone();
            let identity = identity.clone();
            let mode = args.mode;
            let pull_only = args.pull_only;
            let ready_now = ready.clone();
            move || {
                let controllers = run_controllers(
                    client.clone(),
                    cluster.clone(),
                    metrics.clone(),
                    queues.clone(),
                    ready.clone(),
                    args.concurrency,
                    Duration::from_millis(args.status_hold_ms),
                );
                let pull = pull::run(client.clone(), cluster.clone(), identity.clone());
                let ready_now = ready_now.clone();
                async move {
                    match mode {
                        AgentMode::Push => controllers.await,
                        AgentMode::Pull if pull_only => {
                            drop(controllers);
                            ready_now.set(true);
                            pull.await;
                            Ok(())
                        }
                        // Only the leading agent talks to the hub.
                        AgentMode::Pull => tokio::select! {
                            r = controllers => r,
                            () = pull => Ok(()),
                        },
                    }
                }
            }
        };
        let cfg = (!args.no_leader_election).then(|| LeaderConfig {
            namespace: args.lease_namespace.clone(),
            lease_name: format!("pinfed-agent-{}", args.cluster_name),
            identity: identity.clone(),
            duration_secs: 10,
            // Renewed when 7 of its 10 s are left, well before the write gate shuts even
            // when the renewal is slow to land.
            renew_every: std::time::Duration::from_secs(3),
        });
        crate::controller::apply::ensure_namespace(
            &client,
            &args.lease_namespace,
            crate::controller::apply::AGENT_FIELD_MANAGER,
        )
        .await?;
        // The Lease is also the hub's evidence that this agent runs: a single agent
        // without leader election renews it all the same.
        let _heartbeat = cfg.is_none().then(|| {
            crate::controller::mirror::Watching::spawn(leader::renew_forever(
                client.clone(),
                args.lease_namespace.clone(),
                crate::api::member_slice::agent_lease_name(&args.cluster_name),
                identity.clone(),
                10,
            ))
        });
        leader::run_until_shutdown(client, cfg, work).await
    })
}

//! The hub's workload loop, per kind: place → write slices → aggregate status.
//! Reads: the hub resource, MemberClusters, member capacity (from [`MemberRegistry`]).
//! Pure parts: placement, slice building, aggregation. Writes: slices in members
//! (server-side apply, field manager `pinfed-hub`), the hub status, a finalizer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use crate::agent::kinds::AgentKind;
use crate::api::common::{
    ClusterPlacement, MemberWorkloadStatus, PlacementDecision, PlacementStrategy,
    condition_types as ct,
};
use crate::api::federation::{FederatedQuota, MemberCluster, PendingCleanup};
use crate::api::ranges::RangeSet;
use crate::api::runtime_profile::RuntimeProfile;
use crate::api::workload::{WorkloadKind, WorkloadRef};
use crate::controller::apply::{HUB_FIELD_MANAGER, apply_json};
use crate::controller::metrics::ReconcileMetrics;
use crate::hub::cleanups;
use crate::hub::members::MemberRegistry;
use crate::hub::quota::{self, QuotaBook};
use crate::hub::slices::{self, FINALIZER};
use crate::placement::failover::{
    self, FailoverPolicy, MemberHealth, Share, SliceSeen, SliceStep, Standing, TransitionInput,
};
use crate::placement::from_quota;
use crate::placement::model::{ClusterView, NodeRoom, Resources, Taint, TaintEffect};
use crate::placement::{self, Decision, Ledger, Placement, PlanInput};

/// The hub generation the current placement decision was made for.
pub const ANNOTATION_PLACEMENT_GENERATION: &str = "federation.pinterest.com/placement-generation";
/// Members the workload moved off after they were lost (comma-separated), for failback.
pub const ANNOTATION_FAILED_OVER_FROM: &str = "federation.pinterest.com/failed-over-from";
/// What the last failover moved, shown in the FailedOver condition.
pub const ANNOTATION_FAILOVER_MESSAGE: &str = "federation.pinterest.com/failover-message";
/// On a MemberCluster: `pinfed unjoin` is moving every workload off it.
pub const ANNOTATION_DRAINING: &str = "federation.pinterest.com/draining";
/// Condition: the workload runs off a member it failed over from.
pub const FAILED_OVER: &str = "FailedOver";
use crate::status::{self, MemberObservation, Progress};

/// What the hub's workload loops report beyond the reconcile counters.
#[derive(Clone)]
pub struct HubMetrics {
    pub placements: prometheus_client::metrics::family::Family<
        crate::controller::metrics::KindLabels,
        prometheus_client::metrics::counter::Counter,
    >,
    pub placement_seconds: prometheus_client::metrics::histogram::Histogram,
    pub slice_writes: prometheus_client::metrics::family::Family<
        crate::hub::member_loop::MemberLabels,
        prometheus_client::metrics::counter::Counter,
    >,
    pub aggregation_seconds: prometheus_client::metrics::histogram::Histogram,
}

impl HubMetrics {
    pub fn register(registry: &mut prometheus_client::registry::Registry) -> HubMetrics {
        use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
        let m = HubMetrics {
            placements: Default::default(),
            placement_seconds: Histogram::new(exponential_buckets(0.00001, 2.0, 18)),
            slice_writes: Default::default(),
            aggregation_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
        };
        registry.register(
            "placement_decisions",
            "Placement decisions made, by kind",
            m.placements.clone(),
        );
        registry.register(
            "placement_duration_seconds",
            "Time to compute one placement decision",
            m.placement_seconds.clone(),
        );
        registry.register(
            "slice_writes",
            "Slices applied into members",
            m.slice_writes.clone(),
        );
        registry.register(
            "aggregation_duration_seconds",
            "Time to read a workload's slices and aggregate them into hub status",
            m.aggregation_seconds.clone(),
        );
        m
    }
}

pub struct HubContext {
    pub hub_metrics: HubMetrics,
    pub hub: Client,
    pub registry: MemberRegistry,
    pub members: Store<MemberCluster>,
    pub profiles: Store<RuntimeProfile>,
    pub quotas: Store<FederatedQuota>,
    pub ledger: Mutex<Ledger>,
    pub quota_book: QuotaBook,
    /// Workload key → (namespace, why) for workloads their quota holds back.
    pub held_back: Mutex<BTreeMap<String, (String, String)>>,
    /// Serializes writes of MemberCluster `status.pendingCleanups`.
    pub cleanup_lock: Arc<tokio::sync::Mutex<()>>,
    pub metrics: ReconcileMetrics,
    pub member_grace: Duration,
    /// How long a returned member must stay Ready before workloads fail back to it.
    pub failback_window: Duration,
    /// Objects triggered and not yet picked up, per kind.
    pub queues: BTreeMap<WorkloadKind, crate::controller::queue::QueueDepth>,
    /// The last decision this process made per workload. The watch cache may still hold
    /// the object from before our own annotation and status writes; deciding again from
    /// that would flip-flop (notably on failback).
    pub decisions: Mutex<BTreeMap<String, Decided>>,
    pub stale_after_secs: i64,
    /// The longest a workload goes without a reconcile (its slices re-read).
    pub resync: Duration,
    /// (member, namespace) pairs known to exist, so slices skip the namespace apply.
    pub namespaces: Mutex<BTreeSet<(String, String)>>,
    /// Bumped when any member's readiness, loss or return changes: every workload is
    /// reconciled then (`watch_member_health`).
    pub member_health: tokio::sync::watch::Sender<u64>,
    /// Reconciles in flight per kind (each holds a connection to every member it writes).
    pub concurrency: u16,
}

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("hub API: {0}")]
    Hub(#[source] kube::Error),
    #[error("member {cluster}: {source}")]
    Member {
        cluster: String,
        #[source]
        source: kube::Error,
    },
    #[error("propagating to {cluster}: {source}")]
    Propagate {
        cluster: String,
        #[source]
        source: crate::controller::apply::ApplyError,
    },
    #[error("serializing: {0}")]
    Serialize(#[from] serde_json::Error),
}

impl HubError {
    pub fn reason(&self) -> &'static str {
        match self {
            HubError::Hub(_) => "HubApi",
            HubError::Member { .. } => "MemberApi",
            HubError::Propagate { .. } => "Propagate",
            HubError::Serialize(_) => "Serialize",
        }
    }
}

/// What the hub recorded with a decision (also in annotations and status, which a new
/// leader reads).
#[derive(Clone, Debug)]
pub struct Decided {
    pub placement_generation: i64,
    pub failed_over_from: BTreeSet<String>,
    pub failover_message: Option<String>,
    pub decision: PlacementDecision,
}

impl HubContext {
    fn queue(&self, kind: WorkloadKind) -> crate::controller::queue::QueueDepth {
        self.queues
            .get(&kind)
            .cloned()
            .unwrap_or_else(crate::controller::queue::QueueDepth::unregistered)
    }
}

fn api_resource<K: AgentKind>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

fn workload_key<K: AgentKind>(obj: &K) -> String {
    format!(
        "{}/{}/{}",
        K::KIND,
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

/// Cluster views for placement: MemberCluster spec plus live node room, not counting
/// the pods of `own` (namespace, kind, name); only members standing Ready are eligible.
///
/// Node room costs a pass over every pod the member runs, so it is computed only with
/// `with_nodes` (when a workload is placed again), not on every reconcile.
fn cluster_views(
    ctx: &HubContext,
    now: Timestamp,
    own: Option<(&str, &str, &str)>,
    standings: &BTreeMap<String, Standing>,
    with_nodes: bool,
) -> Vec<ClusterView> {
    let mut views: Vec<ClusterView> = ctx
        .members
        .state()
        .iter()
        .map(|mc| {
            let name = mc.name_any();
            let member = ctx.registry.get(&name);
            let ready = member
                .as_ref()
                .is_some_and(|m| m.is_ready(now, ctx.member_grace))
                && standings.get(&name) == Some(&Standing::Ready);
            let nodes = member
                .filter(|_| ready && with_nodes)
                .map(|m| {
                    m.node_usage_without(own)
                        .into_iter()
                        .filter(|n| n.schedulable)
                        .map(|n| {
                            let free = n.free();
                            NodeRoom {
                                name: n.name,
                                labels: n.labels,
                                taints: n
                                    .taints
                                    .into_iter()
                                    .map(|t| Taint {
                                        key: t.key,
                                        value: t.value.unwrap_or_default(),
                                        effect: TaintEffect::parse(&t.effect),
                                    })
                                    .collect(),
                                free: Resources {
                                    cpu: free.cpu,
                                    memory: free.memory,
                                    gpu: i64::try_from(free.gpus.units()).unwrap_or(0),
                                    pods: i64::try_from(free.pods.units()).unwrap_or(0),
                                },
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            ClusterView {
                name,
                zone: mc.spec.zone.clone(),
                region: mc.spec.region.clone(),
                labels: mc.spec.labels.clone(),
                taints: mc
                    .spec
                    .taints
                    .iter()
                    .map(|t| Taint {
                        key: t.key.clone(),
                        value: t.value.clone(),
                        effect: TaintEffect::parse(&format!("{:?}", t.effect)),
                    })
                    .collect(),
                weight: u32::try_from(mc.spec.weight_or_default()).unwrap_or(0),
                ready,
                nodes,
            }
        })
        .collect();
    views.sort_by(|a, b| a.name.cmp(&b.name));
    views
}

fn to_api_decision(d: &Decision) -> PlacementDecision {
    PlacementDecision {
        strategy: Some(match d.strategy {
            placement::model::Strategy::Divided => PlacementStrategy::Divided,
            placement::model::Strategy::Duplicated => PlacementStrategy::Duplicated,
            placement::model::Strategy::Single => PlacementStrategy::Single,
        }),
        placements: d
            .placements
            .iter()
            .map(|p| ClusterPlacement {
                cluster: p.cluster.clone(),
                replicas: p.replicas.map(|r| i32::try_from(r).unwrap_or(i32::MAX)),
                shards: p.shards.clone(),
            })
            .collect(),
        unplaced: i32::try_from(d.unplaced).unwrap_or(i32::MAX),
        reason: d.reason.clone(),
    }
}

fn from_api_decision(d: &PlacementDecision) -> Decision {
    Decision {
        strategy: match d.strategy {
            Some(PlacementStrategy::Duplicated) => placement::model::Strategy::Duplicated,
            Some(PlacementStrategy::Single) => placement::model::Strategy::Single,
            _ => placement::model::Strategy::Divided,
        },
        placements: d
            .placements
            .iter()
            .map(|p| Placement {
                cluster: p.cluster.clone(),
                replicas: p.replicas.map(|r| u32::try_from(r).unwrap_or(0)),
                shards: p.shards.clone(),
            })
            .collect(),
        unplaced: u32::try_from(d.unplaced).unwrap_or(0),
        reason: d.reason.clone(),
    }
}

/// Current hub-side decision and completed shards, read from the status JSON.
fn current_decision(status: &serde_json::Value) -> Option<PlacementDecision> {
    serde_json::from_value(status.get("placement")?.clone()).ok()
}

pub async fn reconcile<K: AgentKind>(
    obj: Arc<K>,
    ctx: Arc<HubContext>,
) -> Result<Action, HubError> {
    ctx.queue(K::KIND).picked(obj.as_ref());
    let timer = ctx.metrics.start(K::KIND.as_str());
    let result = reconcile_inner(obj.as_ref(), &ctx).await;
    timer.finish(result.as_ref().err().map(HubError::reason));
    result
}

pub fn error_policy<K: AgentKind>(obj: Arc<K>, err: &HubError, _ctx: Arc<HubContext>) -> Action {
    tracing::warn!(workload = %workload_key(obj.as_ref()), error = %crate::controller::Chain(err), "hub reconcile failed");
    Action::requeue(Duration::from_secs(2))
}

async fn slice_api<K: AgentKind>(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &api_resource::<K>())
}

async fn reconcile_inner<K: AgentKind>(obj: &K, ctx: &HubContext) -> Result<Action, HubError> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let key = workload_key(obj);
    let hub_api: Api<K> = Api::namespaced(ctx.hub.clone(), &ns);
    let now = Timestamp::now();

    // Deletion: remove every slice (a member that is down gets a record and loses the
    // slice when it is back), then the finalizer.
    if obj.meta().deletion_timestamp.is_some() {
        let mut retry = false;
        for mc in ctx.members.state() {
            let member_name = mc.name_any();
            let member = ctx
                .registry
                .get(&member_name)
                .filter(|m| m.is_ready(now, ctx.member_grace));
            match member {
                Some(m) => match slice_api::<K>(&m.client, &ns)
                    .await
                    .delete(&name, &DeleteParams::background())
                    .await
                {
                    Ok(_) | Err(kube::Error::Api(_)) => {}
                    Err(e) => {
                        tracing::warn!(member = %m.name, error = %e, "slice not removed yet; will retry");
                        retry = true;
                    }
                },
                None => {
                    let record = PendingCleanup {
                        kind: K::KIND.as_str().into(),
                        namespace: ns.clone(),
                        name: name.clone(),
                        hub_uid: obj.uid().unwrap_or_default(),
                    };
                    tracing::info!(workload = %key, member = %member_name, "member unreachable; its slice is removed when it is back");
                    cleanups::record(&ctx.hub, &ctx.cleanup_lock, &member_name, record)
                        .await
                        .map_err(HubError::Hub)?;
                }
            }
        }
        if retry {
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        if let Ok(mut l) = ctx.ledger.lock() {
            l.release(&key);
        }
        ctx.quota_book.remove(&key);
        if let Ok(mut h) = ctx.held_back.lock() {
            h.remove(&key);
        }
        if let Ok(mut d) = ctx.decisions.lock() {
            d.remove(&key);
        }
        let finalizers: Vec<String> = obj
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        let patch = serde_json::json!({"metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()}});
        match hub_api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => return Err(HubError::Hub(e)),
        }
        return Ok(Action::await_change());
    }
    // The finalizer goes on with the placement annotations (one write, one watch event,
    // before any slice exists); a workload kept as placed gets it on its own.
    let finalizers = (!obj.finalizers().iter().any(|f| f == FINALIZER)).then(|| {
        let mut f = obj.finalizers().to_vec();
        f.push(FINALIZER.to_string());
        f
    });

    let now_time = Time(now);
    let generation = obj.meta().generation.unwrap_or(0);
    let hub_json = serde_json::to_value(obj)?;
    let status_json = hub_json.get("status").cloned().unwrap_or_default();
    let remembered = ctx.decisions.lock().ok().and_then(|d| d.get(&key).cloned());
    let previous = match &remembered {
        Some(r) => Some(r.decision.clone()),
        None => current_decision(&status_json),
    };

    // Validate and size the workload (the profile it will run with counts).
    let profiles: Vec<RuntimeProfile> =
        ctx.profiles.state().iter().map(|p| (**p).clone()).collect();
    let profile = crate::expand::select_profile(&profiles, obj.runtime_version())
        .ok()
        .cloned();
    let w: WorkloadRef<'_> = obj.as_workload();
    let demand = match placement::from_workload::demand_for(w, profile.as_ref()) {
        Ok(d) => d,
        Err(e) => {
            let mut conds: Vec<crate::api::common::Condition> =
                serde_json::from_value(status_json.get("conditions").cloned().unwrap_or_default())
                    .unwrap_or_default();
            crate::agent::status::set_invalid_conditions(
                &mut conds,
                &e.invalid().to_string(),
                Some(generation),
                &now_time,
            );
            write_hub_status::<K>(&ctx.hub, obj, serde_json::json!({"conditions": conds})).await?;
            return Ok(Action::await_change());
        }
    };
    let policy = placement::from_workload::policy_for(w);

    // Member health as this workload sees it (its failover grace, the failback window).
    let fpolicy = failover_policy::<K>(w, ctx.failback_window);
    let health = member_health(ctx, now);
    let standings: BTreeMap<String, Standing> = health
        .iter()
        .map(|(n, h)| (n.clone(), failover::standing(h, &fpolicy, now.as_second())))
        .collect();
    // Look again when a member's standing changes by the clock (end of a failover grace
    // or of the failback window); heartbeat changes trigger every workload anyway.
    let requeue = health
        .values()
        .filter_map(|h| failover::secs_until_standing_changes(h, &fpolicy, now.as_second()))
        .min()
        .map(|s| Duration::from_secs(s.unsigned_abs() + 1).min(ctx.resync))
        .unwrap_or(ctx.resync);
    // A cluster that is no member any more is gone for good.
    let standing_of = |c: &str| standings.get(c).copied().unwrap_or(Standing::Lost);
    let reachable: BTreeSet<String> = standings
        .iter()
        .filter(|(n, s)| {
            matches!(s, Standing::Ready | Standing::Settling | Standing::Draining)
                && ctx.registry.get(n).is_some()
        })
        .map(|(n, _)| n.clone())
        .collect();
    let settling: BTreeSet<String> = standings
        .iter()
        .filter(|(_, s)| **s == Standing::Settling)
        .map(|(n, _)| n.clone())
        .collect();
    let failed_over_from: BTreeSet<String> = match &remembered {
        Some(r) => r.failed_over_from.clone(),
        None => obj
            .annotations()
            .get(ANNOTATION_FAILED_OVER_FROM)
            .map(|s| {
                s.split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
    };
    let failover_message = match &remembered {
        Some(r) => r.failover_message.clone(),
        None => obj.annotations().get(ANNOTATION_FAILOVER_MESSAGE).cloned(),
    };
    let lost_placed: BTreeSet<String> = previous
        .iter()
        .flat_map(|p| p.placements.iter())
        .filter(|c| matches!(standing_of(&c.cluster), Standing::Lost | Standing::Draining))
        .map(|c| c.cluster.clone())
        .collect();
    let failback: BTreeSet<String> = failed_over_from
        .iter()
        .filter(|c| standing_of(c) == Standing::Ready)
        .cloned()
        .collect();

    // Place: keep the decision while it was made for this generation and no placed
    // cluster is lost; otherwise plan again, moving as little as possible — except on
    // failback, where replicas go back toward the ideal split.
    let own = Some((ns.as_str(), K::KIND.as_str(), name.as_str()));
    let eligible = cluster_views(ctx, now, own, &standings, false)
        .iter()
        .filter(|v| v.ready)
        .count() as u32;
    let decided_for = match &remembered {
        Some(r) => Some(r.placement_generation),
        None => obj
            .annotations()
            .get(ANNOTATION_PLACEMENT_GENERATION)
            .and_then(|g| g.parse::<i64>().ok()),
    };
    // A decision made while fewer clusters were Ready than the spread asks for is redone
    // once more are.
    let spread_short = |p: &PlacementDecision| {
        // Nothing left to place (a finished job set) is never short.
        !p.placements.is_empty()
            && (p.placements.len() as u32) < policy.spread.min_clusters.min(eligible)
    };
    let keep = previous.as_ref().is_some_and(|p| {
        decided_for == Some(generation)
            && p.unplaced == 0
            && !spread_short(p)
            && lost_placed.is_empty()
            && failback.is_empty()
    });
    let quota = quota_of(ctx, &ns, &profiles).await?;
    let mut quota_exceeded = false;
    let decision = if keep {
        if let Some(f) = &finalizers {
            let patch = serde_json::json!({"metadata": {"finalizers": f}});
            hub_api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(HubError::Hub)?;
        }
        from_api_decision(previous.as_ref().expect("checked by keep"))
    } else {
        let started = std::time::Instant::now();
        let before = previous.as_ref().map(from_api_decision);
        let ideal = !failback.is_empty()
            && matches!(
                demand.count,
                placement::Count::Replicas(_) | placement::Count::Whole
            );
        let mut views = cluster_views(ctx, now, own, &standings, true);
        let outcome = {
            let mut ledger = ctx.ledger.lock().expect("ledger lock");
            ledger.expire(SystemTime::now() - Duration::from_secs(30));
            ledger.apply(&mut views, Some(&key));
            // Quota usage is read and charged under the same lock as capacity.
            let quota_view = match &quota {
                Some(q) => {
                    let used = ctx.quota_book.usage(&ns, Some(&key));
                    match from_quota::quota_view(q, Some(&used)) {
                        Ok(v) => Some(v),
                        Err(e) => {
                            tracing::warn!(quota = %q.name_any(), error = %e, "quota ignored: it does not parse");
                            None
                        }
                    }
                }
                None => None,
            };
            let outcome = placement::plan(&PlanInput {
                clusters: &views,
                policy: &policy,
                demand: &demand,
                quota: quota_view.as_ref(),
                current: if ideal { None } else { before.as_ref() },
            });
            ledger.reserve(&key, &outcome, SystemTime::now());
            ctx.quota_book
                .set(&key, &ns, from_quota::usage_of(&outcome.decision, &demand));
            outcome
        };
        let mut outcome = outcome;
        if let (Some(b), placement::Count::Shards { completed, .. }) = (&before, &demand.count) {
            let completed = RangeSet::from_indices(completed.iter().copied());
            failover::keep_completed_shards(&mut outcome.decision, b, &completed, &lost_placed);
        }
        quota_exceeded = outcome.cause == Some(placement::Cause::QuotaExceeded);
        if let Ok(mut h) = ctx.held_back.lock() {
            if quota_exceeded {
                h.insert(
                    key.clone(),
                    (
                        ns.clone(),
                        format!(
                            "{key}: {}",
                            outcome.decision.reason.clone().unwrap_or_default()
                        ),
                    ),
                );
            } else {
                h.remove(&key);
            }
        }
        ctx.hub_metrics
            .placement_seconds
            .observe(started.elapsed().as_secs_f64());
        ctx.hub_metrics
            .placements
            .get_or_create(&crate::controller::metrics::KindLabels {
                kind: K::KIND.as_str().into(),
            })
            .inc();
        // Fail back later to members that were lost; not to members being unjoined or gone.
        let mut failed_over = failed_over_from.clone();
        failed_over.extend(lost_placed.iter().cloned());
        failed_over.retain(|c| {
            !failback.contains(c)
                && standings.contains_key(c)
                && standing_of(c) != Standing::Draining
        });
        let mut annotations = serde_json::json!({
            ANNOTATION_PLACEMENT_GENERATION: generation.to_string(),
            ANNOTATION_FAILED_OVER_FROM: if failed_over.is_empty() {
                serde_json::Value::Null
            } else {
                failed_over.iter().cloned().collect::<Vec<_>>().join(",").into()
            },
        });
        if let (Some(b), false) = (&before, lost_placed.is_empty()) {
            let moved = failover::moved_text(b, &outcome.decision, &lost_placed);
            tracing::warn!(workload = %key, %moved, "failover");
            annotations[ANNOTATION_FAILOVER_MESSAGE] = moved.into();
        }
        if failed_over.is_empty() {
            annotations[ANNOTATION_FAILOVER_MESSAGE] = serde_json::Value::Null;
        } else if annotations.get(ANNOTATION_FAILOVER_MESSAGE).is_none()
            && let Some(m) = &failover_message
        {
            annotations[ANNOTATION_FAILOVER_MESSAGE] = m.clone().into();
        }
        if !failback.is_empty() {
            tracing::info!(workload = %key, members = ?failback, decision = %outcome.decision.to_json(), "failback");
        }
        tracing::info!(workload = %key, decision = %outcome.decision.to_json(), took = ?started.elapsed(), "placed");
        let mut patch = serde_json::json!({"metadata": {"annotations": annotations}});
        if let Some(f) = &finalizers {
            patch["metadata"]["finalizers"] = serde_json::json!(f);
        }
        hub_api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(HubError::Hub)?;
        if let Ok(mut d) = ctx.decisions.lock() {
            d.insert(
                key.clone(),
                Decided {
                    placement_generation: generation,
                    failed_over_from: failed_over.clone(),
                    failover_message: annotations[ANNOTATION_FAILOVER_MESSAGE]
                        .as_str()
                        .map(str::to_string),
                    decision: to_api_decision(&outcome.decision),
                },
            );
        }
        outcome.decision
    };
    let api_decision = to_api_decision(&decision);
    // Something found no room or quota: try again soon (room frees up without an event
    // this workload hears).
    // Spread over fewer clusters than asked while more members exist (one still
    // connecting or settling): look again soon, whatever triggers arrive.
    let spread_wanted = policy
        .spread
        .min_clusters
        .min(u32::try_from(ctx.members.state().len()).unwrap_or(u32::MAX));
    let requeue = if decision.unplaced > 0 {
        requeue.min(Duration::from_secs(5))
    } else if !decision.placements.is_empty() && (decision.placements.len() as u32) < spread_wanted
    {
        requeue.min(Duration::from_secs(2))
    } else {
        requeue
    };

    // The slices of every reachable member, from the hub's watch of them (a write of ours
    // not seen there yet is written again, which changes nothing); asked directly, all
    // at once, while a watch has not listed yet.
    let reads = ctx
        .registry
        .all()
        .into_iter()
        .filter(|m| reachable.contains(&m.name))
        .map(|m| {
            let (ns, name) = (&ns, &name);
            async move {
                let got = match m.cached_slice(K::KIND, ns, name) {
                    Ok(cached) => Ok(cached.map(|o| (*o).clone())),
                    Err(()) => slice_api::<K>(&m.client, ns).await.get_opt(name).await,
                };
                (m.name.clone(), got)
            }
        });
    let mut found: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for (cluster, got) in futures::future::join_all(reads).await {
        match got {
            Ok(Some(s)) => {
                found.insert(cluster, serde_json::to_value(s)?);
            }
            Ok(None) => {}
            Err(source) => return Err(HubError::Member { cluster, source }),
        }
    }
    let mut observed: BTreeMap<String, MemberWorkloadStatus> = found
        .iter()
        .map(|(c, v)| {
            (
                c.clone(),
                slices::member_workload_status(c, K::KIND, v, &now_time),
            )
        })
        .collect();
    let seen: BTreeMap<String, SliceSeen> = observed
        .iter()
        .map(|(c, st)| {
            let v = &found[c];
            let spec_replicas = v["spec"]["replicas"].as_u64().unwrap_or(0);
            (
                c.clone(),
                SliceSeen {
                    replicas: u32::try_from(spec_replicas).unwrap_or(0),
                    available: u32::try_from(st.available_replicas.unwrap_or(0).max(0))
                        .unwrap_or(0),
                    ready: matches!(st.state.as_deref(), Some("Ready" | "Complete")),
                },
            )
        })
        .collect();

    // Move the slices toward the decision: grow first, shrink and drop once the new
    // shares are available; job sets, cron and training jobs are fenced at once.
    let target = Share::of(&decision);
    let steps = failover::transition(&TransitionInput {
        target: &target,
        seen: &seen,
        reachable: &reachable,
        settling: &settling,
        run_to_completion: K::KIND.runs_to_completion(),
    });
    let shard_counts: Vec<(String, u64)> = decision
        .placements
        .iter()
        .map(|p| {
            (
                p.cluster.clone(),
                p.shards
                    .as_deref()
                    .and_then(|s| RangeSet::parse(s).ok())
                    .map(|s| s.len())
                    .unwrap_or(0),
            )
        })
        .collect();
    let parallelism: BTreeMap<String, Option<i32>> = match w {
        WorkloadRef::JobSet(j) => slices::divide_parallelism(j.spec.parallelism, &shard_counts)
            .into_iter()
            .collect(),
        _ => BTreeMap::new(),
    };
    let pod_spec = hub_json
        .pointer("/spec/template/spec")
        .cloned()
        .and_then(|s| serde_json::from_value(s).ok());
    // Every member at once (each step touches only its own member).
    let writes = steps.iter().map(|(cluster, step)| {
        let (ns, name, key, found, parallelism, pod_spec, hub_json) =
            (&ns, &name, &key, &found, &parallelism, &pod_spec, &hub_json);
        async move {
            // The slice as the member stored it, for the aggregation below.
            let mut written = None;
            let Some(member) = ctx.registry.get(cluster) else {
                return Ok(None);
            };
            match step {
                SliceStep::Keep => {}
                SliceStep::Delete => {
                    tracing::info!(workload = %key, member = %cluster, "removing the slice of a cluster that left the placement");
                    match slice_api::<K>(&member.client, ns)
                        .await
                        .delete(name, &DeleteParams::background())
                        .await
                    {
                        Ok(_) | Err(kube::Error::Api(_)) => {}
                        Err(source) => {
                            return Err(HubError::Member {
                                cluster: cluster.clone(),
                                source,
                            });
                        }
                    }
                    if K::KIND == WorkloadKind::JobSet {
                        fence_jobs(&member.client, ns, name, None).await;
                    }
                }
                SliceStep::Apply(share) => {
                    let p = Placement {
                        cluster: cluster.clone(),
                        replicas: match share {
                            Share::Replicas(n) => Some(*n),
                            _ => None,
                        },
                        shards: match share {
                            Share::Shards(s) => Some(s.clone()),
                            _ => None,
                        },
                    };
                    let slice = slices::build_slice(
                        K::KIND,
                        hub_json,
                        &p,
                        parallelism.get(cluster).copied().map(Some).unwrap_or(None),
                    );
                    // Most reconciles find the slice as they would write it: skip the namespace
                    // and slice writes then (each reconcile used to cost every member two
                    // server-side applies). A slice edited in the member differs and is written.
                    // (A slice found means its namespace is there for the config below.)
                    let current = found
                        .get(cluster)
                        .is_some_and(|f| slices::slice_is_current(f, &slice));
                    // A namespace this process made (or found) in the member is not
                    // applied again; a slice write that finds it gone forgets it.
                    let ns_key = (cluster.clone(), ns.clone());
                    let ns_known = ctx.namespaces.lock().is_ok_and(|n| n.contains(&ns_key));
                    if !current && !ns_known {
                        crate::hub::ensure_namespace(&member.client, ns)
                            .await
                            .map_err(|source| HubError::Propagate {
                                cluster: cluster.clone(),
                                source,
                            })?;
                        if let Ok(mut n) = ctx.namespaces.lock() {
                            n.insert(ns_key.clone());
                        }
                    }
                    if let Some(spec) = &pod_spec {
                        propagate_config(ctx, &member.client, cluster, ns, spec).await?;
                    }
                    if !current {
                        let stored = slice_api::<K>(&member.client, ns)
                            .await
                            .patch(
                                name,
                                &PatchParams::apply(HUB_FIELD_MANAGER).force(),
                                &Patch::Apply(&slice),
                            )
                            .await
                            .map_err(|source| {
                                if matches!(&source, kube::Error::Api(s) if s.code == 404)
                                    && let Ok(mut n) = ctx.namespaces.lock() {
                                        n.remove(&ns_key);
                                    }
                                HubError::Member {
                                    cluster: cluster.clone(),
                                    source,
                                }
                            })?;
                        written = Some((cluster.clone(), serde_json::to_value(stored)?));
                        ctx.hub_metrics
                            .slice_writes
                            .get_or_create(&crate::hub::member_loop::MemberLabels {
                                member: cluster.clone(),
                            })
                            .inc();
                    }
                    // Shards that left this member (it was lost meanwhile): stop their Jobs
                    // now rather than when its agent catches up.
                    if let (Share::Shards(s), Some(old)) = (share, found.get(cluster)) {
                        let keep = RangeSet::parse(s).unwrap_or_default();
                        let had = old["spec"]["assignedShards"]
                            .as_str()
                            .and_then(|r| RangeSet::parse(r).ok())
                            .unwrap_or_default();
                        if had.iter().any(|i| !keep.contains(i)) {
                            fence_jobs(&member.client, ns, name, Some(&keep)).await;
                        }
                    }
                }
            }
            Ok::<_, HubError>(written)
        }
    });
    // Aggregate from the slices just written, not from the watch caches that have not
    // seen them yet: else the status written now says "slice not observed yet" and is
    // rewritten a moment later.
    let results = futures::future::join_all(writes).await;
    for r in results {
        if let Some((cluster, v)) = r? {
            observed.insert(
                cluster.clone(),
                slices::member_workload_status(&cluster, K::KIND, &v, &now_time),
            );
            found.insert(cluster, v);
        }
    }

    // Aggregate what the placed clusters report.
    let aggregation_started = std::time::Instant::now();
    let mut observations = Vec::new();
    for p in &decision.placements {
        let member_ready = reachable.contains(&p.cluster);
        let previous_member = status_json["clusters"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["cluster"] == p.cluster.as_str()))
            .cloned();
        let (status, hub_gen, processed) = match found.get(&p.cluster) {
            Some(v) => {
                let hub_gen = v["metadata"]["annotations"][slices::ANNOTATION_HUB_GENERATION]
                    .as_str()
                    .and_then(|g| g.parse().ok());
                let processed = v["status"]["observedGeneration"].as_i64()
                    == v["metadata"]["generation"].as_i64();
                (observed.get(&p.cluster).cloned(), hub_gen, processed)
            }
            // A lost member: keep showing its last known status (aggregation marks it).
            None if !member_ready => (
                previous_member.and_then(|p| serde_json::from_value(p).ok()),
                None,
                false,
            ),
            None => (None, None, false),
        };
        observations.push(MemberObservation {
            cluster: p.cluster.clone(),
            member_ready,
            status,
            slice_hub_generation: hub_gen,
            slice_processed: processed,
        });
    }
    let progress = match w {
        WorkloadRef::Service(s) => Progress::Replicas {
            desired: s.spec.replicas,
        },
        WorkloadRef::StatefulSet(s) => Progress::Replicas {
            desired: s.spec.replicas,
        },
        WorkloadRef::Daemon(_) => Progress::Replicas { desired: 0 },
        WorkloadRef::JobSet(j) => Progress::Shards {
            total: u32::try_from(j.spec.shards).unwrap_or(0),
        },
        WorkloadRef::CronJob(_) | WorkloadRef::TrainingJob(_) => Progress::RunToCompletion,
    };
    let previous_completed = status_json["completedShards"]
        .as_str()
        .and_then(|r| RangeSet::parse(r).ok())
        .unwrap_or_default();
    let agg = status::aggregate(&status::AggregateInput {
        hub_generation: generation,
        previous_observed_generation: status_json["observedGeneration"].as_i64(),
        previous_completed: &previous_completed,
        progress,
        decision: &api_decision,
        quota_exceeded,
        members: &observations,
        now: &now_time,
        stale_after_secs: ctx.stale_after_secs,
    });

    // Hub status: placement, per-cluster, totals, conditions, observedGeneration.
    let mut conditions = agg.conditions;
    let counts_for_failback =
        |c: &&String| standings.contains_key(c.as_str()) && standing_of(c) != Standing::Draining;
    conditions.push(failed_over_condition(
        failover_message.as_deref(),
        &failed_over_from
            .iter()
            .filter(counts_for_failback)
            .cloned()
            .collect(),
        &lost_placed
            .iter()
            .filter(counts_for_failback)
            .cloned()
            .collect(),
        &failback,
        generation,
        &now_time,
    ));
    let mut st = serde_json::json!({
        "placement": api_decision,
        "clusters": agg.clusters,
        "conditions": merge_conditions(&status_json, conditions),
    });
    if let Some(g) = agg.observed_generation {
        st["observedGeneration"] = g.into();
    }
    match K::KIND {
        WorkloadKind::Service | WorkloadKind::StatefulSet => {
            st["replicas"] = agg.replicas.into();
            st["readyReplicas"] = agg.ready_replicas.into();
            st["availableReplicas"] = agg.available_replicas.into();
        }
        WorkloadKind::Daemon => {
            st["desired"] = agg.replicas.into();
            st["ready"] = agg.ready_replicas.into();
            st["available"] = agg.available_replicas.into();
        }
        WorkloadKind::JobSet => {
            st["shardsRunning"] = agg.shards_running.into();
            st["shardsSucceeded"] = agg.shards_succeeded.into();
            st["shardsFailed"] = agg.shards_failed.into();
            st["completedShards"] = agg.completed_shards.to_string().into();
        }
        _ => {}
    }
    if !slices::settle_status(&status_json, &mut st) {
        write_hub_status::<K>(&ctx.hub, obj, st).await?;
    }
    ctx.hub_metrics
        .aggregation_seconds
        .observe(aggregation_started.elapsed().as_secs_f64());
    Ok(Action::requeue(requeue))
}

/// FailedOver: True while the workload runs off a member it failed over from.
fn failed_over_condition(
    message: Option<&str>,
    failed_over_from: &BTreeSet<String>,
    lost_now: &BTreeSet<String>,
    failing_back: &BTreeSet<String>,
    generation: i64,
    now: &Time,
) -> crate::api::common::Condition {
    use crate::api::common::{Condition, ConditionStatus};
    let mut from: BTreeSet<String> = failed_over_from.clone();
    from.extend(lost_now.iter().cloned());
    from.retain(|c| !failing_back.contains(c));
    if from.is_empty() {
        return Condition::new(
            FAILED_OVER,
            ConditionStatus::False,
            if failing_back.is_empty() {
                "NoMemberLost"
            } else {
                "FailedBack"
            },
            "",
            Some(generation),
            now,
        );
    }
    let moved = message.map(str::to_string).unwrap_or_else(|| {
        format!(
            "{} lost",
            from.iter().cloned().collect::<Vec<_>>().join(", ")
        )
    });
    Condition::new(
        FAILED_OVER,
        ConditionStatus::True,
        "MemberLost",
        format!("{moved}; fails back once the member is Ready past the failback window"),
        Some(generation),
        now,
    )
}

/// Deletes a job set's Jobs in a member, except those of `keep` shards (all when `None`):
/// shards that moved elsewhere while the member was unreachable must not finish here too.
async fn fence_jobs(member: &Client, ns: &str, name: &str, keep: Option<&RangeSet>) {
    use crate::api::common::{LABEL_KIND, LABEL_SHARD, LABEL_WORKLOAD};
    let api: Api<Job> = Api::namespaced(member.clone(), ns);
    let selector = format!(
        "{LABEL_WORKLOAD}={},{LABEL_KIND}={}",
        crate::expand::names::label_value(name),
        WorkloadKind::JobSet.as_str()
    );
    let jobs = match api.list(&ListParams::default().labels(&selector)).await {
        Ok(l) => l.items,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list Jobs to fence");
            return;
        }
    };
    for j in jobs {
        // A finished Job cannot run again, and it carries the completion the member's
        // agent has yet to record: deleting it would make the shard look unstarted there.
        let finished = j.status.as_ref().is_some_and(|s| {
            s.succeeded.unwrap_or(0) > 0 || s.failed.unwrap_or(0) > 0 || s.completion_time.is_some()
        });
        if finished {
            continue;
        }
        let shard = j
            .labels()
            .get(LABEL_SHARD)
            .and_then(|s| s.parse::<u32>().ok());
        if let (Some(keep), Some(i)) = (keep, shard)
            && keep.contains(i)
        {
            continue;
        }
        let _ = api.delete(&j.name_any(), &DeleteParams::background()).await;
    }
}

/// A member's health as recorded: live readiness (heartbeat within the grace), drain,
/// and the loss and return times the member loop wrote into its MemberCluster status.
#[derive(Clone, Debug, PartialEq, Eq)]
struct RecordedHealth {
    name: String,
    ready: bool,
    draining: bool,
    lost_time: Option<i64>,
    returned_time: Option<i64>,
}

fn recorded_health(ctx: &HubContext, now: Timestamp) -> Vec<RecordedHealth> {
    ctx.members
        .state()
        .iter()
        .map(|mc| {
            let name = mc.name_any();
            let ready = ctx
                .registry
                .get(&name)
                .is_some_and(|m| m.is_ready(now, ctx.member_grace));
            let status = mc.status.as_ref();
            let secs = |t: Option<&Time>| t.map(|t| t.0.as_second());
            RecordedHealth {
                ready,
                draining: mc.annotations().contains_key(ANNOTATION_DRAINING),
                lost_time: secs(status.and_then(|s| s.lost_time.as_ref())),
                returned_time: secs(status.and_then(|s| s.returned_time.as_ref())),
                name,
            }
        })
        .collect()
}

/// Member health from MemberCluster status (loss and return times) and live heartbeats.
fn member_health(ctx: &HubContext, now: Timestamp) -> BTreeMap<String, MemberHealth> {
    recorded_health(ctx, now)
        .into_iter()
        .map(|r| {
            let health = MemberHealth {
                ready: r.ready,
                // Not recorded yet (the member loop writes it): the loss starts now.
                lost_since: (!r.ready).then(|| r.lost_time.unwrap_or(now.as_second())),
                // Back, but the member loop has not recorded the return yet.
                returned_at: if r.ready && r.lost_time.is_some() {
                    Some(now.as_second())
                } else {
                    r.returned_time
                },
                draining: r.draining,
            };
            (r.name, health)
        })
        .collect()
}

fn failover_policy<K: AgentKind>(w: WorkloadRef<'_>, window: Duration) -> FailoverPolicy {
    let f = w.placement().failover.unwrap_or_default();
    FailoverPolicy {
        enabled: f.enabled.unwrap_or(K::KIND.failover_by_default()),
        grace_secs: i64::from(f.grace_period_seconds.unwrap_or(60)),
        window_secs: window.as_secs() as i64,
    }
}

/// The FederatedQuota of a namespace (the first by name when there are several), with
/// the namespace's usage book seeded.
async fn quota_of(
    ctx: &HubContext,
    ns: &str,
    profiles: &[RuntimeProfile],
) -> Result<Option<Arc<FederatedQuota>>, HubError> {
    let mut quotas: Vec<Arc<FederatedQuota>> = ctx
        .quotas
        .state()
        .into_iter()
        .filter(|q| q.namespace().as_deref() == Some(ns))
        .collect();
    quotas.sort_by_key(|q| q.name_any());
    let Some(q) = quotas.into_iter().next() else {
        return Ok(None);
    };
    quota::seed_namespace(&ctx.hub, &ctx.quota_book, profiles, ns)
        .await
        .map_err(HubError::Hub)?;
    Ok(Some(q))
}

/// Keeps lastTransitionTime of conditions whose status did not change.
fn merge_conditions(
    status: &serde_json::Value,
    new: Vec<crate::api::common::Condition>,
) -> Vec<crate::api::common::Condition> {
    let mut old: Vec<crate::api::common::Condition> =
        serde_json::from_value(status.get("conditions").cloned().unwrap_or_default())
            .unwrap_or_default();
    // Invalid is cleared once the workload expands again.
    old.retain(|c| c.type_ != ct::INVALID);
    for c in new {
        crate::api::common::set_condition(&mut old, c);
    }
    old
}

async fn write_hub_status<K: AgentKind>(
    hub: &Client,
    obj: &K,
    status: serde_json::Value,
) -> Result<(), HubError> {
    let api: Api<K> = Api::namespaced(hub.clone(), &obj.namespace().unwrap_or_default());
    let patch = serde_json::json!({"apiVersion": K::api_version(&()), "kind": K::kind(&()), "status": status});
    api.patch_status(
        &obj.name_any(),
        &PatchParams::apply(HUB_FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(HubError::Hub)?;
    Ok(())
}

/// Copies the ConfigMaps and Secrets the pod template references (same namespace only)
/// into the member.
async fn propagate_config(
    ctx: &HubContext,
    member: &Client,
    cluster: &str,
    ns: &str,
    spec: &k8s_openapi::api::core::v1::PodSpec,
) -> Result<(), HubError> {
    let (cms, secrets) = slices::referenced_config(spec);
    let strip = |v: &mut serde_json::Value| {
        if let Some(m) = v["metadata"].as_object_mut() {
            m.retain(|k, _| matches!(k.as_str(), "name" | "namespace" | "labels" | "annotations"));
        }
        v["metadata"]["labels"]["federation.pinterest.com/propagated"] = "true".into();
    };
    for name in cms {
        if let Some(cm) = Api::<ConfigMap>::namespaced(ctx.hub.clone(), ns)
            .get_opt(&name)
            .await
            .map_err(HubError::Hub)?
        {
            let mut v = serde_json::to_value(cm)?;
            v["apiVersion"] = "v1".into();
            v["kind"] = "ConfigMap".into();
            strip(&mut v);
            apply_json(member, &v, HUB_FIELD_MANAGER)
                .await
                .map_err(|source| HubError::Propagate {
                    cluster: cluster.into(),
                    source,
                })?;
        }
    }
    for name in secrets {
        if let Some(s) = Api::<Secret>::namespaced(ctx.hub.clone(), ns)
            .get_opt(&name)
            .await
            .map_err(HubError::Hub)?
        {
            // Never the hub's own credentials.
            if s.type_.as_deref() == Some("kubernetes.io/service-account-token") {
                continue;
            }
            let mut v = serde_json::to_value(s)?;
            v["apiVersion"] = "v1".into();
            v["kind"] = "Secret".into();
            strip(&mut v);
            apply_json(member, &v, HUB_FIELD_MANAGER)
                .await
                .map_err(|source| HubError::Propagate {
                    cluster: cluster.into(),
                    source,
                })?;
        }
    }
    Ok(())
}

/// Watches the members' health once a second and, when it changes, has every workload of
/// every kind reconciled — so failover starts within a second of a member turning
/// NotReady, without every workload polling on a short timer.
pub async fn watch_member_health(ctx: Arc<HubContext>) {
    // What makes workloads re-plan: readiness, drain, and the recorded loss and return
    // times (these change once per transition, not per heartbeat).
    let mut last = recorded_health(&ctx, Timestamp::now());
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let current = recorded_health(&ctx, Timestamp::now());
        if current != last {
            tracing::debug!(members = ?current, "member health changed; reconciling every workload");
            ctx.member_health.send_modify(|g| *g += 1);
            last = current;
        }
    }
}

/// Runs the loop for one kind.
pub async fn run_kind<K: AgentKind>(ctx: Arc<HubContext>) {
    use kube::runtime::{WatchStreamExt, reflector};
    let queue = ctx.queue(K::KIND);
    let slice_changes = {
        let queue = queue.clone();
        ctx.registry.slice_events().filter_map(move |ev| {
            let r = (ev.kind == K::KIND).then(|| {
                queue.triggered(Some(&ev.namespace), &ev.name);
                reflector::ObjectRef::<K>::new(&ev.name).within(&ev.namespace)
            });
            futures::future::ready(r)
        })
    };
    let (reader, writer) = reflector::store();
    let main = watcher(
        Api::<K>::all(ctx.hub.clone()),
        watcher::Config::default().any_semantic(),
    )
    .backoff(crate::controller::watch::backoff())
    .reflect(writer)
    .applied_objects();
    // Errors stop at the stream's own backoff (controller::watch), so a hub API server
    // hiccup never pauses the slice-change triggers too.
    let main = crate::controller::watch::skip_errors(K::KIND.as_str().into(), main);
    let health_changes =
        futures::stream::unfold(ctx.member_health.subscribe(), |mut rx| async move {
            rx.changed().await.ok()?;
            Some(((), rx))
        });
    Controller::for_stream(queue.track_objects(main), reader)
        .with_config(kube::runtime::controller::Config::default().concurrency(ctx.concurrency))
        .trigger_backoff(crate::controller::watch::backoff())
        .reconcile_on(slice_changes)
        .reconcile_all_on(health_changes)
        .run(reconcile::<K>, error_policy::<K>, ctx)
        .for_each(|r| {
            queue.settle(&r);
            futures::future::ready(())
        })
        .await;
}

/// Applies every hub RuntimeProfile into every Ready member (they are cluster-scoped and
/// small; the agent in each member needs them to inject the same runtime support).
pub async fn propagate_profiles(ctx: &HubContext) {
    let now = Timestamp::now();
    let ar = ApiResource::erase::<RuntimeProfile>(&());
    for m in ctx
        .registry
        .all()
        .into_iter()
        .filter(|m| m.is_ready(now, ctx.member_grace))
    {
        for p in ctx.profiles.state() {
            let mut v = match serde_json::to_value(p.as_ref()) {
                Ok(v) => v,
                Err(_) => continue,
            };
            if let Some(meta) = v["metadata"].as_object_mut() {
                meta.retain(|k, _| matches!(k.as_str(), "name" | "labels" | "annotations"));
            }
            v.as_object_mut().map(|o| o.remove("status"));
            let api: Api<DynamicObject> = Api::all_with(m.client.clone(), &ar);
            if let Err(e) = api
                .patch(
                    &p.name_any(),
                    &PatchParams::apply(HUB_FIELD_MANAGER).force(),
                    &Patch::Apply(&v),
                )
                .await
            {
                tracing::debug!(member = %m.name, error = %e, "runtime profile not propagated yet");
            }
        }
    }
}

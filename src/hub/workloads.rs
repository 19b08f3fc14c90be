//! The hub's workload loop, per kind: place → write slices → aggregate status.
//! Reads: the hub resource, MemberClusters, member capacity (from [`MemberRegistry`]).
//! Pure parts: placement, slice building, aggregation. Writes: slices in members
//! (server-side apply, field manager `pinfed-hub`), the hub status, a finalizer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use crate::agent::kinds::AgentKind;
use crate::api::common::{
    ClusterPlacement, PlacementDecision, PlacementStrategy, condition_types as ct,
};
use crate::api::federation::MemberCluster;
use crate::api::ranges::RangeSet;
use crate::api::runtime_profile::RuntimeProfile;
use crate::api::workload::{WorkloadKind, WorkloadRef};
use crate::controller::apply::{HUB_FIELD_MANAGER, apply_json};
use crate::controller::metrics::ReconcileMetrics;
use crate::hub::members::MemberRegistry;
use crate::hub::slices::{self, FINALIZER};
use crate::placement::model::{ClusterView, NodeRoom, Resources, Taint, TaintEffect};
use crate::placement::{self, Decision, Ledger, Placement, PlanInput};
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
    pub ledger: Mutex<Ledger>,
    pub metrics: ReconcileMetrics,
    pub member_grace: Duration,
    pub stale_after_secs: i64,
    pub resync: Duration,
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

/// Cluster views for placement: MemberCluster spec plus live node room.
fn cluster_views(ctx: &HubContext, now: Timestamp) -> Vec<ClusterView> {
    let mut views: Vec<ClusterView> = ctx
        .members
        .state()
        .iter()
        .map(|mc| {
            let name = mc.name_any();
            let member = ctx.registry.get(&name);
            let ready = member
                .as_ref()
                .is_some_and(|m| m.is_ready(now, ctx.member_grace));
            let nodes = member
                .filter(|_| ready)
                .map(|m| {
                    m.node_usage()
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
    let timer = ctx.metrics.start(K::KIND.as_str());
    let result = reconcile_inner(obj.as_ref(), &ctx).await;
    timer.finish(result.as_ref().err().map(HubError::reason));
    result
}

pub fn error_policy<K: AgentKind>(obj: Arc<K>, err: &HubError, _ctx: Arc<HubContext>) -> Action {
    tracing::warn!(workload = %workload_key(obj.as_ref()), error = %err, "hub reconcile failed");
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

    // Deletion: remove every slice, then the finalizer.
    if obj.meta().deletion_timestamp.is_some() {
        let mut pending = Vec::new();
        for m in ctx.registry.all() {
            match slice_api::<K>(&m.client, &ns)
                .await
                .delete(&name, &DeleteParams::background())
                .await
            {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => {
                    tracing::warn!(member = %m.name, error = %e, "slice not removed yet; will retry");
                    pending.push(m.name.clone());
                }
            }
        }
        if !pending.is_empty() {
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        if let Ok(mut l) = ctx.ledger.lock() {
            l.release(&key);
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
    if !obj.finalizers().iter().any(|f| f == FINALIZER) {
        let mut finalizers = obj.finalizers().to_vec();
        finalizers.push(FINALIZER.to_string());
        let patch = serde_json::json!({"metadata": {"finalizers": finalizers}});
        hub_api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(HubError::Hub)?;
    }

    let now = Timestamp::now();
    let now_time = Time(now);
    let generation = obj.meta().generation.unwrap_or(0);
    let hub_json = serde_json::to_value(obj)?;
    let status_json = hub_json.get("status").cloned().unwrap_or_default();
    let previous = current_decision(&status_json);

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

    // Place: keep the decision while it was made for this generation and every placed
    // cluster is still Ready; otherwise plan again, moving as little as possible.
    let mut views = cluster_views(ctx, now);
    let decided_for = obj
        .annotations()
        .get("federation.pinterest.com/placement-generation")
        .and_then(|g| g.parse::<i64>().ok());
    let ready: BTreeSet<String> = views
        .iter()
        .filter(|v| v.ready)
        .map(|v| v.name.clone())
        .collect();
    // A decision made while fewer clusters were Ready than the spread asks for is redone
    // once more are.
    let spread_short = |p: &PlacementDecision| {
        (p.placements.len() as u32) < policy.spread.min_clusters.min(ready.len() as u32)
    };
    let keep = previous.as_ref().is_some_and(|p| {
        decided_for == Some(generation)
            && p.unplaced == 0
            && !spread_short(p)
            && p.placements.iter().all(|c| ready.contains(&c.cluster))
    });
    let decision = if keep {
        from_api_decision(previous.as_ref().expect("checked by keep"))
    } else {
        let started = std::time::Instant::now();
        let outcome = {
            let mut ledger = ctx.ledger.lock().expect("ledger lock");
            ledger.expire(SystemTime::now() - Duration::from_secs(30));
            ledger.apply(&mut views, Some(&key));
            let current = previous.as_ref().map(from_api_decision);
            let outcome = placement::plan(&PlanInput {
                clusters: &views,
                policy: &policy,
                demand: &demand,
                quota: None,
                current: current.as_ref(),
            });
            ledger.reserve(&key, &outcome, SystemTime::now());
            outcome
        };
        ctx.hub_metrics
            .placement_seconds
            .observe(started.elapsed().as_secs_f64());
        ctx.hub_metrics
            .placements
            .get_or_create(&crate::controller::metrics::KindLabels {
                kind: K::KIND.as_str().into(),
            })
            .inc();
        tracing::info!(workload = %key, decision = %outcome.decision.to_json(), took = ?started.elapsed(), "placed");
        let patch = serde_json::json!({"metadata": {"annotations": {"federation.pinterest.com/placement-generation": generation.to_string()}}});
        hub_api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(HubError::Hub)?;
        outcome.decision
    };

    // Slices.
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
    for p in &decision.placements {
        let Some(member) = ctx.registry.get(&p.cluster) else {
            continue;
        };
        if !ready.contains(&p.cluster) {
            continue;
        }
        crate::hub::ensure_namespace(&member.client, &ns)
            .await
            .map_err(|source| HubError::Propagate {
                cluster: p.cluster.clone(),
                source,
            })?;
        if let Some(spec) = &pod_spec {
            propagate_config(ctx, &member.client, &p.cluster, &ns, spec).await?;
        }
        let slice = slices::build_slice(
            K::KIND,
            &hub_json,
            p,
            parallelism
                .get(&p.cluster)
                .copied()
                .map(Some)
                .unwrap_or(None),
        );
        slice_api::<K>(&member.client, &ns)
            .await
            .patch(
                &name,
                &PatchParams::apply(HUB_FIELD_MANAGER).force(),
                &Patch::Apply(&slice),
            )
            .await
            .map_err(|source| HubError::Member {
                cluster: p.cluster.clone(),
                source,
            })?;
        ctx.hub_metrics
            .slice_writes
            .get_or_create(&crate::hub::member_loop::MemberLabels {
                member: p.cluster.clone(),
            })
            .inc();
    }

    // Observe the slices.
    let aggregation_started = std::time::Instant::now();
    let placed: BTreeSet<&str> = decision
        .placements
        .iter()
        .map(|p| p.cluster.as_str())
        .collect();
    let mut observations = Vec::new();
    let mut stale_slices = Vec::new();
    for m in ctx.registry.all() {
        let member_ready = ready.contains(&m.name);
        let slice = if member_ready {
            slice_api::<K>(&m.client, &ns)
                .await
                .get_opt(&name)
                .await
                .ok()
                .flatten()
        } else {
            None
        };
        if !placed.contains(m.name.as_str()) {
            if slice.is_some() {
                stale_slices.push(m.clone());
            }
            continue;
        }
        let previous_member = status_json["clusters"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["cluster"] == m.name.as_str()))
            .cloned();
        let (status, hub_gen, processed) = match &slice {
            Some(s) => {
                let v = serde_json::to_value(s)?;
                let st = slices::member_workload_status(&m.name, K::KIND, &v, &now_time);
                let hub_gen = v["metadata"]["annotations"][slices::ANNOTATION_HUB_GENERATION]
                    .as_str()
                    .and_then(|g| g.parse().ok());
                let processed = v["status"]["observedGeneration"].as_i64()
                    == v["metadata"]["generation"].as_i64();
                (Some(st), hub_gen, processed)
            }
            // A lost member: keep showing its last known status (aggregation marks it).
            None => (
                previous_member.and_then(|p| serde_json::from_value(p).ok()),
                None,
                false,
            ),
        };
        observations.push(MemberObservation {
            cluster: m.name.clone(),
            member_ready,
            status,
            slice_hub_generation: hub_gen,
            slice_processed: processed,
        });
    }

    // Remove slices of clusters that left the placement once the new ones are available.
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
    let api_decision = to_api_decision(&decision);
    let agg = status::aggregate(&status::AggregateInput {
        hub_generation: generation,
        previous_observed_generation: status_json["observedGeneration"].as_i64(),
        previous_completed: &previous_completed,
        progress,
        decision: &api_decision,
        quota_exceeded: false,
        members: &observations,
        now: &now_time,
        stale_after_secs: ctx.stale_after_secs,
    });
    let replacement_ready = match progress {
        Progress::Replicas { desired } => agg.available_replicas >= desired,
        _ => true,
    };
    if replacement_ready {
        for m in stale_slices {
            tracing::info!(workload = %key, member = %m.name, "removing the slice of a cluster that left the placement");
            let _ = slice_api::<K>(&m.client, &ns)
                .await
                .delete(&name, &DeleteParams::background())
                .await;
        }
    }

    // Hub status: placement, per-cluster, totals, conditions, observedGeneration.
    let mut st = serde_json::json!({
        "placement": api_decision,
        "clusters": agg.clusters,
        "conditions": merge_conditions(&status_json, agg.conditions),
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
    write_hub_status::<K>(&ctx.hub, obj, st).await?;
    ctx.hub_metrics
        .aggregation_seconds
        .observe(aggregation_started.elapsed().as_secs_f64());
    Ok(Action::requeue(ctx.resync))
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

/// Runs the loop for one kind.
pub async fn run_kind<K: AgentKind>(ctx: Arc<HubContext>) {
    Controller::new(
        Api::<K>::all(ctx.hub.clone()),
        watcher::Config::default().any_semantic(),
    )
    .run(reconcile::<K>, error_policy::<K>, ctx)
    .for_each(|_| futures::future::ready(()))
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

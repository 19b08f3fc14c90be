//! The hub's workload loop, per kind, as a pipeline (`reconcile_stages`): each stage in
//! its own file takes what the last produced and hands on its own type, or ends the
//! reconcile with when to look again ([`Step::Done`]):
//!
//! 1. [`deletion`]: a deleted workload's slices are removed (or recorded for a member
//!    that is down), then its finalizer;
//! 2. **read** ([`read`] → `Read`): the status as stored, member standings ([`health`]),
//!    the decision recorded before ([`decide::Remembered`]), the slices in every
//!    reachable member ([`rollout::read_slices`]); a held ingress host or a member still
//!    waited for ends it here;
//! 3. **decide** ([`decide::stage`] → `Placed`): keep the decision or plan again (pure
//!    placement, charged to the capacity ledger and the quota book), recorded before any
//!    slice moves; an invalid spec ends it here;
//! 4. **roll out** ([`rollout::stage`] → `RolledOut`): the revision each member runs
//!    ([`staged`]), then slices grown, shrunk, removed and fenced toward the decision;
//!    referenced config propagated;
//! 5. **aggregate and write** ([`write`]; [`crate::status::hub_status`], pure): the typed
//!    hub status when it changed, then the Events and metrics.
//!
//! Each stage fails with its own [`HubError`] variant (a metric label); a failing
//! workload backs off on its own ([`crate::controller::retry`]). Events on the hub
//! resource record placement, failover, failback, quota holds and fencing.

mod app_failover;
mod decide;
mod deletion;
mod health;
pub mod hosts;
pub mod priority;
mod profiles;
mod read;
pub mod report_pace;
mod revisions;
mod rollout;
mod staged;
pub mod status_defer;
mod undecodable;
mod write;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tracing::Instrument;

use crate::api::common::PlacementDecision;
use crate::api::federation::{FederatedQuota, MemberCluster};
use crate::api::kind::PinterestKind;
use crate::api::runtime_profile::RuntimeProfile;
use crate::api::workload::WorkloadKind;
use crate::controller::apply::HUB_FIELD_MANAGER;
use crate::controller::compact::CompactCache;
use crate::controller::metrics::ReconcileMetrics;
use crate::controller::own_writes;
use crate::controller::retry::RetryPolicy;
use crate::controller::step::{Step, next};
use crate::hub::members::MemberRegistry;
use crate::hub::quota_book::QuotaBook;
use crate::placement::Ledger;

pub use health::watch_member_health;
pub use profiles::{ProfileSync, profile_versions, propagate_profiles, prune_snapshots};

pub use crate::api::federation::{
    ANNOTATION_DRAINING, ANNOTATION_FAILED_OVER_FROM, ANNOTATION_FAILOVER_MESSAGE,
    ANNOTATION_PLACEMENT_GENERATION,
};
pub use crate::status::hub_status::FAILED_OVER;

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
    /// Slice removals a member refused or failed (anything but "not found"): each keeps
    /// the hub resource's finalizer or the pending clean-up.
    pub slice_removal_failures: prometheus_client::metrics::family::Family<
        crate::hub::member_loop::MemberLabels,
        prometheus_client::metrics::counter::Counter,
    >,
    /// Bundles removed because no workload on their member references them any more.
    pub bundles_removed: prometheus_client::metrics::family::Family<
        crate::hub::member_loop::MemberLabels,
        prometheus_client::metrics::counter::Counter,
    >,
    pub bundle_removal_failures: prometheus_client::metrics::family::Family<
        crate::hub::member_loop::MemberLabels,
        prometheus_client::metrics::counter::Counter,
    >,
    /// Rollout transitions (RolloutStarted, StageStarted, RolloutMemberFailed,
    /// RollingBack, RolledBack, RolloutComplete, ...), by reason.
    pub rollout_transitions: prometheus_client::metrics::family::Family<
        RolloutLabels,
        prometheus_client::metrics::counter::Counter,
    >,
    /// Workloads by rollout phase (Complete ones are not counted).
    pub rollouts: prometheus_client::metrics::family::Family<
        RolloutPhaseLabels,
        prometheus_client::metrics::gauge::Gauge,
    >,
    /// Seconds from a member being told to run a new revision to passing its gate
    /// (soak included).
    pub rollout_member_seconds: prometheus_client::metrics::histogram::Histogram,
    /// The phase each workload's rollout is in, for [`Self::rollouts`].
    pub rollout_phases: Arc<Mutex<BTreeMap<String, String>>>,
    /// Victims preempted (one per workload that gave up pods).
    pub preemptions: prometheus_client::metrics::counter::Counter,
    /// Time to choose victims for one preemptor.
    pub preemption_seconds: prometheus_client::metrics::histogram::Histogram,
    /// Workloads waiting in the hub's queue.
    pub queue_waiting: prometheus_client::metrics::gauge::Gauge,
    /// Shares moved off a member by application failover.
    pub application_failovers: prometheus_client::metrics::counter::Counter,
    /// Workloads held because another one holds their ingress host.
    pub host_holds: prometheus_client::metrics::counter::Counter,
    /// Status writes of members' reports held back to fold into one (`--report-pace-ms`).
    pub reports_paced: prometheus_client::metrics::counter::Counter,
    /// Workloads waiting for the fleet's budget of moves off tainted members.
    pub taint_moves_waiting: prometheus_client::metrics::gauge::Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct RolloutLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct RolloutPhaseLabels {
    pub phase: String,
}

impl HubMetrics {
    /// Records the rollout phase of workload `key` (`None`: deleted).
    pub fn rollout_phase(&self, key: &str, phase: Option<&str>) {
        let Ok(mut phases) = self.rollout_phases.lock() else {
            return;
        };
        let gauge = |p: &str| {
            self.rollouts.get_or_create(&RolloutPhaseLabels {
                phase: p.to_string(),
            })
        };
        let before = phases.get(key).cloned();
        if before.as_deref() == phase {
            return;
        }
        if let Some(b) = &before
            && b != crate::api::rollout::phase::COMPLETE
        {
            gauge(b).dec();
        }
        match phase {
            Some(p) => {
                if p != crate::api::rollout::phase::COMPLETE {
                    gauge(p).inc();
                }
                phases.insert(key.to_string(), p.to_string());
            }
            None => {
                phases.remove(key);
            }
        }
    }
}

impl HubMetrics {
    pub fn register(registry: &mut prometheus_client::registry::Registry) -> HubMetrics {
        use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
        let m = HubMetrics {
            placements: Default::default(),
            placement_seconds: Histogram::new(exponential_buckets(0.00001, 2.0, 18)),
            slice_writes: Default::default(),
            aggregation_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            slice_removal_failures: Default::default(),
            bundles_removed: Default::default(),
            bundle_removal_failures: Default::default(),
            rollout_transitions: Default::default(),
            rollouts: Default::default(),
            rollout_member_seconds: Histogram::new(exponential_buckets(1.0, 2.0, 14)),
            rollout_phases: Default::default(),
            preemptions: Default::default(),
            preemption_seconds: Histogram::new(exponential_buckets(0.00001, 2.0, 18)),
            queue_waiting: Default::default(),
            application_failovers: Default::default(),
            host_holds: Default::default(),
            reports_paced: Default::default(),
            taint_moves_waiting: Default::default(),
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
        registry.register(
            "slice_removal_failures",
            "Slice removals a member refused or failed (the finalizer or clean-up stays)",
            m.slice_removal_failures.clone(),
        );
        registry.register(
            "bundles_removed",
            "Bundles removed from a member because no workload there references them",
            m.bundles_removed.clone(),
        );
        registry.register(
            "rollout_transitions",
            "Rollout transitions (started, stage started, member failed, rolling back, rolled back, complete), by reason",
            m.rollout_transitions.clone(),
        );
        registry.register(
            "rollouts",
            "Workloads whose rollout is not complete, by phase",
            m.rollouts.clone(),
        );
        registry.register(
            "rollout_member_seconds",
            "Seconds from a member being told to run a new revision to passing its gate",
            m.rollout_member_seconds.clone(),
        );
        registry.register(
            "application_failovers",
            "Shares moved off a member where they stayed unavailable (application failover)",
            m.application_failovers.clone(),
        );
        registry.register(
            "taint_moves_waiting",
            "Workloads that must leave a member tainted NoExecute, waiting for the fleet's move budget",
            m.taint_moves_waiting.clone(),
        );
        registry.register(
            "ingress_host_holds",
            "Workloads held back because another workload holds the ingress host they name",
            m.host_holds.clone(),
        );
        registry.register(
            "status_reports_paced",
            "Status changes of members' reports held back to be written with the next (--report-pace-ms)",
            m.reports_paced.clone(),
        );
        registry.register(
            "preemptions",
            "Workloads that gave up pods in a member to a higher-priority one",
            m.preemptions.clone(),
        );
        registry.register(
            "preemption_duration_seconds",
            "Time to choose the victims for one preemptor",
            m.preemption_seconds.clone(),
        );
        registry.register(
            "queue_waiting",
            "Workloads waiting in the hub's queue for room or quota",
            m.queue_waiting.clone(),
        );
        registry.register(
            "bundle_removal_failures",
            "Bundle removals a member refused or failed (retried on the next sweep)",
            m.bundle_removal_failures.clone(),
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
    /// Finalizers and statuses written that the hub's watch has not delivered yet.
    pub own_writes: own_writes::OwnWrites,
    /// Status writes held back while other workloads wait for their slices.
    pub status_deferrals: status_defer::StatusDeferrals,
    /// Members' reports folded into fewer status writes.
    pub report_pace: report_pace::ReportPace,
    /// Each kind's cache of its workloads, for readers of every workload (the bundle
    /// sweep) that would otherwise list them all from the API server.
    pub workload_caches: Mutex<BTreeMap<WorkloadKind, crate::controller::compact::UntypedBodies>>,
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
    /// Events on hub resources (placement, failover, failback, quota holds, fencing).
    pub recorder: crate::controller::events::EventSink,
    /// Per-workload backoff of failed reconciles.
    pub retries: RetryPolicy,
    /// Who references which hub ConfigMap or Secret; their changes reconcile the users.
    pub config: crate::hub::config_follow::ConfigFollow,
    /// Revision contents read or written (old revisions are written into members during
    /// a rollout).
    pub revisions: revisions::RevisionCache,
    /// How changes roll out for workloads whose spec says nothing.
    pub default_rollout: crate::api::rollout::RolloutPolicy,
    /// PriorityClasses, the queue of waiting workloads and who may be a victim.
    pub priority: priority::PriorityState,
    /// Which workload holds which ingress host.
    pub hosts: hosts::HostIndex,
    /// The fleet's budget for moves off members tainted `NoExecute`.
    pub taint_moves: TaintMoves,
    /// Job sets with application failover: since when each member's shards are unready.
    pub unready_clocks: app_failover::UnreadyClocks,
}

/// Moves off tainted members, paced across the fleet (`placement::move_budget`), and the
/// workloads waiting their turn (each told once).
pub struct TaintMoves {
    budget: Mutex<crate::placement::move_budget::MoveBudget>,
    waiting: Mutex<BTreeSet<String>>,
}

impl TaintMoves {
    pub fn new(rate: crate::placement::move_budget::MoveRate) -> TaintMoves {
        TaintMoves {
            budget: Mutex::new(crate::placement::move_budget::MoveBudget::new(
                rate,
                Timestamp::now().as_millisecond() as f64 / 1000.0,
            )),
            waiting: Mutex::new(BTreeSet::new()),
        }
    }

    /// Takes a move for `key` at `now` (seconds), or says how long until one is free;
    /// the second value is true the first time `key` is made to wait.
    fn take(&self, key: &str, now: f64) -> (Result<(), f64>, bool) {
        let taken = match self.budget.lock() {
            Ok(mut b) => b.take(now),
            Err(_) => Ok(()),
        };
        let Ok(mut waiting) = self.waiting.lock() else {
            return (taken, false);
        };
        let first = match taken {
            Ok(()) => {
                waiting.remove(key);
                false
            }
            Err(_) => waiting.insert(key.to_string()),
        };
        (taken, first)
    }

    /// A move taken for a workload that stayed where it was (no room elsewhere).
    pub fn give_back(&self) {
        if let Ok(mut b) = self.budget.lock() {
            b.give_back();
        }
    }

    /// `key` has no move off a tainted member to wait for (any more).
    fn forget(&self, key: &str) {
        if let Ok(mut w) = self.waiting.lock() {
            w.remove(key);
        }
    }

    /// How many workloads wait for the budget now.
    pub fn waiting(&self) -> usize {
        self.waiting.lock().map_or(0, |w| w.len())
    }
}

/// A failed reconcile, by the stage that failed.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("removing the slice from {cluster}: {source}")]
    RemoveSlice {
        cluster: String,
        #[source]
        source: kube::Error,
    },
    #[error("recording a pending clean-up: {0}")]
    RecordCleanup(#[source] kube::Error),
    #[error("updating the finalizer: {0}")]
    Finalizer(#[source] kube::Error),
    #[error("reading the namespace's quota usage: {0}")]
    QuotaUsage(#[source] kube::Error),
    #[error("recording the placement decision: {0}")]
    RecordDecision(#[source] kube::Error),
    #[error("recording what a victim owes: {0}")]
    RecordEviction(#[source] kube::Error),
    #[error("reading the slice in {cluster}: {source}")]
    ReadSlice {
        cluster: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing the slice into {cluster}: {source}")]
    WriteSlice {
        cluster: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "a slice of this name in {cluster} was written for another resource (hub uid {other:?}); it is not overwritten until its clean-up removes it"
    )]
    NotOurSlice { cluster: String, other: String },
    #[error("propagating to {cluster}: {source}")]
    Propagate {
        cluster: String,
        #[source]
        source: crate::controller::apply::ApplyError,
    },
    #[error("reading referenced config on the hub: {0}")]
    ReadConfig(#[source] kube::Error),
    #[error("recording the revision: {0}")]
    RecordRevision(#[source] kube::Error),
    #[error("snapshotting RuntimeProfile {profile} before a revision pins it: {source}")]
    SnapshotProfile {
        profile: String,
        #[source]
        source: kube::Error,
    },
    #[error("reading a revision: {0}")]
    ReadRevision(#[source] kube::Error),
    #[error("writing the hub status: {0}")]
    WriteStatus(#[source] kube::Error),
    #[error("serializing: {0}")]
    Serialize(#[from] serde_json::Error),
    #[error("the overrides for {cluster}: {message}")]
    Overrides { cluster: String, message: String },
}

impl HubError {
    pub fn reason(&self) -> &'static str {
        match self {
            HubError::RemoveSlice { .. } => "RemoveSlice",
            HubError::RecordCleanup(_) => "RecordCleanup",
            HubError::Finalizer(_) => "Finalizer",
            HubError::QuotaUsage(_) => "QuotaUsage",
            HubError::RecordDecision(_) => "RecordDecision",
            HubError::RecordEviction(_) => "RecordEviction",
            HubError::ReadSlice { .. } => "ReadSlice",
            HubError::WriteSlice { .. } => "WriteSlice",
            HubError::NotOurSlice { .. } => "NotOurSlice",
            HubError::Propagate { .. } => "Propagate",
            HubError::ReadConfig(_) => "ReadConfig",
            HubError::RecordRevision(_) => "RecordRevision",
            HubError::SnapshotProfile { .. } => "SnapshotProfile",
            HubError::ReadRevision(_) => "ReadRevision",
            HubError::WriteStatus(_) => "WriteStatus",
            HubError::Serialize(_) => "Serialize",
            HubError::Overrides { .. } => "Overrides",
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
    /// Owed evictions applied to `decision` ([`decide::Remembered::applied_evictions`]).
    pub applied_evictions: BTreeSet<String>,
}

impl HubContext {
    /// Records a write of ours to `obj` that returned `stored`, for reconciles that read
    /// an older copy before the watch delivers it. The write was made over `over` (an
    /// earlier write of the same reconcile returned it) or else over the copy read.
    /// Returns the version written.
    fn record_write<K: PinterestKind>(
        &self,
        obj: &K,
        over: Option<&str>,
        stored: &K,
        what: own_writes::Wrote,
    ) -> Option<String> {
        self.record_write_on::<K>(obj.meta(), over, stored.meta(), what)
    }

    /// [`Self::record_write`] by the metadata of the copy read and of the one returned.
    fn record_write_on<K: PinterestKind>(
        &self,
        read: &kube::api::ObjectMeta,
        over: Option<&str>,
        stored: &kube::api::ObjectMeta,
        what: own_writes::Wrote,
    ) -> Option<String> {
        let version = stored.resource_version.clone();
        self.own_writes.wrote(
            &meta_key::<K>(read),
            over.or(read.resource_version.as_deref()),
            version.as_deref(),
            what,
        );
        version
    }

    fn queue(&self, kind: WorkloadKind) -> crate::controller::queue::QueueDepth {
        self.queues
            .get(&kind)
            .cloned()
            .unwrap_or_else(crate::controller::queue::QueueDepth::unregistered)
    }

    /// Records an Event on a hub resource; an Event that cannot be written is logged,
    /// never fails the reconcile.
    async fn event<K: PinterestKind>(&self, obj: &K, type_: EventType, reason: &str, note: String) {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            tracing::debug!(workload = %workload_key(obj), error = %e, "event not recorded");
        }
    }
}

/// [`workload_key`] of a workload read untyped.
fn untyped_workload_key<K: PinterestKind>(obj: &kube::api::DynamicObject) -> String {
    meta_key::<K>(&obj.metadata)
}

fn workload_key<K: PinterestKind>(obj: &K) -> String {
    meta_key::<K>(obj.meta())
}

/// `KIND/NAMESPACE/NAME` of the workload of kind `K` with metadata `meta`.
fn meta_key<K: PinterestKind>(meta: &kube::api::ObjectMeta) -> String {
    format!(
        "{}/{}/{}",
        K::KIND,
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

pub async fn reconcile<K: PinterestKind>(
    obj: Arc<K>,
    ctx: Arc<HubContext>,
) -> Result<Action, HubError> {
    ctx.queue(K::KIND).picked(obj.as_ref());
    let timer = ctx.metrics.start(K::KIND.as_str());
    let span = tracing::trace_span!(target: "pinfed::trace", "hub.reconcile", kind = %K::KIND, workload = %workload_key(obj.as_ref()), generation = obj.meta().generation.unwrap_or(0));
    // Part of the change's trace until every member has caught up with it.
    if !span.is_disabled()
        && obj
            .status()
            .and_then(|s| K::hub_part(s).observed_generation)
            != obj.meta().generation
    {
        crate::controller::trace::follow(&span, obj.meta().annotations.as_ref());
    }
    let result = reconcile_stages(obj.as_ref(), &ctx).instrument(span).await;
    timer.finish(result.as_ref().err().map(HubError::reason));
    if result.is_ok() {
        ctx.retries.succeeded(&workload_key(obj.as_ref()));
    }
    result
}

/// One workload's trip through the stages, each taking what the last produced:
/// read → decide → roll out → aggregate and write.
async fn reconcile_stages<K: PinterestKind>(obj: &K, ctx: &HubContext) -> Result<Action, HubError> {
    if obj.meta().deletion_timestamp.is_some() {
        ctx.unready_clocks.forget(&workload_key(obj));
        let conditions = obj.status().map(K::conditions_of).unwrap_or_default();
        return deletion::remove_slices::<K>(obj.meta(), conditions, ctx).await;
    }
    let mut read = next!(read::read(ctx, obj).await?);
    let decided = next!(decide::stage(ctx, obj, &mut read).await?);
    let rolled = rollout::stage(ctx, obj, &mut read, &decided).await?;
    write::write(ctx, obj, read, &decided, rolled).await
}

/// How soon a workload whose work waits for a hand-off looks again at the latest.
const HAND_OFF_RECHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// An invalid workload: Invalid and not Ready, no placement; it waits for a change.
async fn write_invalid<K: PinterestKind>(
    ctx: &HubContext,
    obj: &K,
    stored_conditions: &[crate::api::common::Condition],
    message: &str,
    now: &Time,
) -> Result<(), HubError> {
    let mut conditions = stored_conditions.to_vec();
    crate::api::common::set_invalid_conditions(
        &mut conditions,
        message,
        obj.meta().generation,
        now,
    );
    let part = crate::api::kind::HubPart {
        conditions,
        ..Default::default()
    };
    let status = K::hub_status(part, &Default::default());
    write_hub_status(ctx, obj, None, &status).await.map(|_| ())
}

/// Sets one condition on the hub resource `meta` whose stored conditions are `stored`
/// (read untyped where the resource does not decode), best effort: the caller retries
/// what the condition reports anyway.
pub(super) async fn write_condition<K: PinterestKind>(
    ctx: &HubContext,
    meta: &kube::api::ObjectMeta,
    stored: &[crate::api::common::Condition],
    type_: &str,
    reason: &str,
    message: &str,
) {
    let mut conds = stored.to_vec();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let changed = crate::api::common::set_condition(
        &mut conds,
        crate::api::common::Condition {
            type_: type_.to_string(),
            status: crate::api::common::ConditionStatus::True,
            observed_generation: meta.generation,
            last_transition_time: now,
            reason: reason.to_string(),
            message: message.to_string(),
        },
    );
    // A merge patch of the conditions alone: the rest of the status (the split) stays.
    let ns = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
        ctx.hub.clone(),
        &ns,
        &kube::api::ApiResource::erase::<K>(&()),
    );
    let patch = serde_json::json!({"status": {"conditions": conds}});
    if changed {
        // Part of the status: the record of own writes cannot stand in for it.
        ctx.own_writes.forget(&meta_key::<K>(meta));
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(error = %e, "condition not written");
        }
    }
}

/// Applies the whole status the hub owns (fields left out are dropped); `over`: the
/// version this reconcile's earlier write returned, if any. Returns the version written.
async fn write_hub_status<K: PinterestKind>(
    ctx: &HubContext,
    obj: &K,
    over: Option<&str>,
    status: &K::Status,
) -> Result<Option<String>, HubError> {
    let api: Api<K> = Api::namespaced(ctx.hub.clone(), &obj.namespace().unwrap_or_default());
    let patch = serde_json::json!({"apiVersion": K::api_version(&()), "kind": K::kind(&()), "status": status});
    let stored = api
        .patch_status(
            &obj.name_any(),
            &PatchParams::apply(HUB_FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(HubError::WriteStatus)?;
    let status = patch.get("status").cloned().unwrap_or_default();
    Ok(ctx.record_write(obj, over, &stored, own_writes::Wrote::Status(status)))
}

/// Runs the loop for one kind.
/// One kind's controller. Its cache keeps each workload as JSON and only the metadata
/// typed (`controller::compact`): at 10,000 workloads the typed objects were most of the
/// hub's memory.
pub async fn run_kind<K: PinterestKind>(ctx: Arc<HubContext>) {
    use kube::runtime::{WatchStreamExt, reflector};
    let queue = ctx.queue(K::KIND);
    // A slice changed in a member, or a ConfigMap or Secret a workload references changed
    // on the hub (its bundles follow).
    let slice_changes = {
        let queue = queue.clone();
        futures::stream::select(
            futures::stream::select(ctx.registry.slice_events(), ctx.config.triggers()),
            ctx.priority.wakes(),
        )
        .filter_map(move |ev| {
            let r = (ev.kind == K::KIND).then(|| {
                queue.triggered(Some(&ev.namespace), &ev.name);
                reflector::ObjectRef::<PartialObjectMeta<K>>::new(&ev.name).within(&ev.namespace)
            });
            futures::future::ready(r)
        })
    };
    let cache = CompactCache::<K>::default();
    if let Ok(mut c) = ctx.workload_caches.lock() {
        c.insert(K::KIND, cache.untyped());
    }
    let (reader, writer) = reflector::store();
    // Listed in pages of 500 from etcd, not whole from the API server's cache: a list
    // of 10,000 workloads decoded at once was most of the hub's peak memory.
    // Untyped: one stored workload its kind cannot decode (written by another version of
    // pinfed, say) would fail a typed list, and the kind's every workload with it. Each is
    // decoded in its own reconcile; one that does not decode is marked there.
    let main = watcher(
        Api::<kube::api::DynamicObject>::all_with(
            ctx.hub.clone(),
            &kube::api::ApiResource::erase::<K>(&()),
        ),
        watcher::Config::default().page_size(500),
    )
    .backoff(crate::controller::watch::backoff())
    .map_ok({
        let cache = cache.clone();
        let ctx = ctx.clone();
        move |event| {
            // Own writes the watch has now delivered need no record any more.
            ctx.own_writes.seen_in(&event, untyped_workload_key::<K>);
            // A host let go: its other claimants look again.
            for key in ctx.hosts.observe::<K>(&event) {
                ctx.priority.wake(&key);
            }
            cache.ingest(event)
        }
    })
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
    let concurrency = ctx.concurrency;
    let kind_ctx = Arc::new(KindContext { hub: ctx, cache });
    Controller::for_stream(queue.track_objects(main), reader)
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .trigger_backoff(crate::controller::watch::backoff())
        .reconcile_on(slice_changes)
        .reconcile_all_on(health_changes)
        .run(reconcile_cached::<K>, error_policy_cached::<K>, kind_ctx)
        .for_each(|r| {
            queue.settle(&r);
            futures::future::ready(())
        })
        .await;
}

/// A kind's controller context: the hub's, and the kind's cache of whole objects.
pub struct KindContext<K> {
    hub: Arc<HubContext>,
    cache: CompactCache<K>,
}

/// Decodes the workload from the cache and reconciles it.
async fn reconcile_cached<K: PinterestKind>(
    meta: Arc<PartialObjectMeta<K>>,
    ctx: Arc<KindContext<K>>,
) -> Result<Action, HubError> {
    let Some(body) = ctx.cache.body(&meta) else {
        // Deleted since it was queued: nothing left to do (and nothing waits).
        ctx.hub.queue(K::KIND).picked(meta.as_ref());
        return Ok(Action::await_change());
    };
    match crate::controller::compact::decode::<K>(&body) {
        Ok(obj) => {
            if let Err(e) = undecodable::clear(&ctx.hub, &obj).await {
                ctx.hub.queue(K::KIND).picked(meta.as_ref());
                return Err(e);
            }
            reconcile(Arc::new(obj), ctx.hub.clone()).await
        }
        Err(why) => {
            ctx.hub.queue(K::KIND).picked(meta.as_ref());
            if meta.metadata.deletion_timestamp.is_some() {
                // Its slices go all the same: removing them needs only its metadata.
                let conditions = undecodable::stored_conditions(&body);
                ctx.hub
                    .unready_clocks
                    .forget(&meta_key::<K>(&meta.metadata));
                return deletion::remove_slices::<K>(&meta.metadata, &conditions, &ctx.hub).await;
            }
            undecodable::refuse(&ctx.hub, meta.as_ref(), &body, why).await
        }
    }
}

/// Per-workload exponential backoff with jitter: about 1 s, 2 s, 4 s … at most 60 s.
/// Member and health triggers still reconcile a backing-off workload at once.
fn error_policy_cached<K: PinterestKind>(
    meta: Arc<PartialObjectMeta<K>>,
    err: &HubError,
    ctx: Arc<KindContext<K>>,
) -> Action {
    let key = format!(
        "{}/{}/{}",
        K::KIND,
        meta.namespace().unwrap_or_default(),
        meta.name_any()
    );
    if crate::controller::write_gate::refused(err) {
        // Not a failure of this workload: the lease's renewal has not reached the write
        // gate yet (or leadership is ending, and this loop with it). No backoff.
        tracing::debug!(workload = %key, "write held back until the lease is renewed");
        return Action::requeue(std::time::Duration::from_secs(1));
    }
    let delay = ctx.hub.retries.failed(&key);
    tracing::warn!(workload = %key, error = %crate::controller::Chain(err), retry_in = ?delay, "hub reconcile failed");
    Action::requeue(delay)
}

/// The hub resource's API in its namespace.
fn hub_api<K: PinterestKind>(ctx: &HubContext, obj: &K) -> Api<K> {
    Api::namespaced(ctx.hub.clone(), &obj.namespace().unwrap_or_default())
}

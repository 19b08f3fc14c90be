//! The agent's reconcile loop, as a pipeline (`reconcile_stages`): each stage in its own
//! file takes what the last produced and hands on its own type, or ends the reconcile
//! with when to look again (`Step::Done`):
//!
//! 1. [`read`]: the slice (fresh for kinds that start runs), its profile and the observed
//!    native objects;
//! 2. [`record`]: job-set completions, before anything can delete a finished Job, and the
//!    shards that may start;
//! 3. [`build`]: the pure expansion engine;
//! 4. [`judge`]: the member's policy, and the referenced config from the hub's bundles;
//! 5. [`apply`]: server-side apply (field manager `pinfed-agent`), then prune by label;
//! 6. [`report`]: the slice's status, written when it changed.
//!
//! Invalid resources get an Invalid condition and an Event and wait for a change;
//! transient errors back off per object.

mod apply;
mod build;
mod judge;
mod read;
mod record;
mod refuse;
mod report;

pub use self::refuse::undecodable;

use self::apply::CONFLICT_RECHECK;
use self::build::Built;
use self::read::Read;
use self::record::{FENCE_RECHECK, Recorded};

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{self, Store};
use kube::{Client, Resource, ResourceExt};
use tracing::Instrument;

use super::applied::Kept;
use super::kinds::{AgentKind, assigned_shards, completed_shard_objects, shard_account};
use super::status::{self, Observed};
use crate::api::common::{ConditionStatus, condition_types as ct, find_condition};
use crate::api::jobset::PinterestJobSet;
use crate::api::kind::NativeKind;
use crate::api::runtime_profile::RuntimeProfile;
use crate::api::workload::WorkloadKind;
use crate::controller::apply::AGENT_FIELD_MANAGER;
use crate::controller::fence;
use crate::controller::metrics::ReconcileMetrics;
use crate::controller::own_writes::Wrote;
use crate::controller::queue::{QueueDepth, QueueMetrics};
use crate::controller::retry::RetryPolicy;
use crate::controller::step::{Step, next};
use crate::expand::{self, ExpandInput};

pub struct Context {
    pub client: Client,
    pub cluster: String,
    pub profiles: Store<RuntimeProfile>,
    /// The member's PriorityClasses (a slice's class is set on its pods where it exists).
    pub priority_classes: Store<k8s_openapi::api::scheduling::v1::PriorityClass>,
    /// What the member's admins let pinfed run here (`policy`).
    pub policy: super::policy::PolicyView,
    pub recorder: crate::controller::events::EventSink,
    pub metrics: ReconcileMetrics,
    /// Queue depth per kind: a reconcile removes its object on start.
    queues: HashMap<WorkloadKind, QueueDepth>,
    /// Per-object backoff of failed reconciles.
    retries: RetryPolicy,
    /// Per workload uid, the generated objects the owned-object watches show: a prune
    /// deletes what it holds beyond the kept set, without listing (see `owned`).
    pub owned: super::owned::OwnedIndex,
    /// Per object uid: its last complete apply (see `applied`).
    pub applied: super::applied::AppliedBook,
    /// Per object uid: the config copies it holds (see `bundles`).
    pub claims: super::bundles::Claims,
    /// Which slices use which bundle: a changed bundle reconciles them.
    pub bundle_users: super::bundles::BundleUsers,
    /// Reconciles in flight per kind.
    pub concurrency: u16,
    /// Slice statuses that only say "in progress", held back a moment (`status_hold`).
    pub status_hold: super::status_hold::StatusHold,
    /// Slice statuses written that the watch has not delivered yet.
    pub own_writes: crate::controller::own_writes::OwnWrites,
    /// The services' Deployments as the watch that triggers their reconciles has them.
    pub deployments: Store<Deployment>,
    /// Its writer, until the services' controller takes it for that watch.
    pub deployments_writer: Mutex<Option<reflector::store::Writer<Deployment>>>,
    /// Slices (uid) waiting for an earlier slice's objects of their name to go, whose wait
    /// has had its Event: one per wait, not one per look.
    pub leftover_waits: Mutex<std::collections::HashSet<String>>,
}

impl Context {
    #[allow(clippy::too_many_arguments)] // each is one of the agent's parts, named at the call
    pub fn new(
        client: Client,
        cluster: String,
        profiles: Store<RuntimeProfile>,
        priority_classes: Store<k8s_openapi::api::scheduling::v1::PriorityClass>,
        policy: super::policy::PolicyView,
        recorder: crate::controller::events::EventSink,
        metrics: ReconcileMetrics,
        queues: &QueueMetrics,
        concurrency: u16,
        status_hold: Duration,
    ) -> Context {
        // Fresh trackers for this run (a new leader term starts from an empty queue).
        let queues = WorkloadKind::ALL
            .iter()
            .map(|k| (*k, queues.tracker(k.as_str())))
            .collect();
        let (deployments, writer) = reflector::store();
        Context {
            client,
            cluster,
            profiles,
            priority_classes,
            policy,
            recorder,
            metrics,
            queues,
            deployments,
            deployments_writer: Mutex::new(Some(writer)),
            leftover_waits: Default::default(),
            retries: RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(300)),
            owned: Default::default(),
            applied: Default::default(),
            claims: Default::default(),
            bundle_users: Default::default(),
            concurrency,
            status_hold: super::status_hold::StatusHold::new(status_hold),
            own_writes: Default::default(),
        }
    }

    /// The queue-depth tracker of one kind's controller.
    pub fn queue(&self, kind: WorkloadKind) -> &QueueDepth {
        &self.queues[&kind]
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("object has no namespace")]
    NoNamespace,
    #[error("listing generated objects: {0}")]
    Observe(#[source] kube::Error),
    #[error("applying {kind} {name}: {source}")]
    Apply {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("pruning: {0}")]
    Prune(#[source] kube::Error),
    #[error("writing status: {0}")]
    Status(#[source] kube::Error),
    #[error(transparent)]
    Materialize(#[from] super::bundles::MaterializeError),
    #[error("serializing: {0}")]
    Serialize(#[from] serde_json::Error),
}

/// How long a workload whose namespace is being deleted waits before it is tried again.
const NAMESPACE_TERMINATING_RETRY: Duration = Duration::from_secs(30);

impl AgentError {
    /// A write refused because the namespace is being deleted (403, cause
    /// `NamespaceTerminating`): not a fault of the agent or the workload.
    pub fn namespace_terminating(&self) -> bool {
        let source = match self {
            AgentError::Apply { source, .. } => source,
            AgentError::Prune(source) | AgentError::Status(source) => source,
            AgentError::Materialize(e) => &e.source,
            _ => return false,
        };
        matches!(source, kube::Error::Api(s) if s.is_forbidden()
            && s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")))
    }

    /// Metric label and Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            AgentError::NoNamespace => "NoNamespace",
            AgentError::Observe(_) => "Observe",
            AgentError::Apply { .. } => "Apply",
            AgentError::Prune(_) => "Prune",
            AgentError::Status(_) => "Status",
            AgentError::Materialize(_) => "Materialize",
            AgentError::Serialize(_) => "Serialize",
        }
    }
}

fn key<K: Resource>(obj: &K) -> String {
    format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}

pub async fn reconcile<K: AgentKind>(obj: Arc<K>, ctx: Arc<Context>) -> Result<Action, AgentError> {
    ctx.queue(K::KIND).picked(obj.as_ref());
    let timer = ctx.metrics.start(K::KIND.as_str());
    let span = tracing::trace_span!(target: "pinfed::trace", "agent.reconcile", member = %ctx.cluster, kind = %K::KIND, workload = %key(obj.as_ref()), generation = obj.meta().generation.unwrap_or(0));
    // Part of the slice's change (the hub reconcile that wrote it) until it is done here.
    if !span.is_disabled() && obj.status().and_then(K::observed_generation) != obj.meta().generation
    {
        crate::controller::trace::follow(&span, obj.meta().annotations.as_ref());
    }
    let result = reconcile_stages(obj.as_ref(), &ctx).instrument(span).await;
    timer.finish(result.as_ref().err().map(AgentError::reason));
    if result.is_ok() {
        ctx.retries.succeeded(&slice_key(obj.as_ref()));
    }
    result
}

/// Per-object exponential backoff with jitter for transient errors: about 1 s, 2 s,
/// 4 s … at most 5 min. `object` is `namespace/name`.
pub fn error_policy<K: AgentKind>(object: &str, err: &AgentError, ctx: &Context) -> Action {
    if err.namespace_terminating() {
        // The workload goes with its namespace: its deletion event ends this, so a slow
        // quiet retry instead of a warning and a backoff per generated object.
        tracing::debug!(kind = %K::KIND, object = %object, "namespace terminating; waiting for the workload's deletion");
        return Action::requeue(NAMESPACE_TERMINATING_RETRY);
    }
    if crate::controller::write_gate::refused(err) {
        // Not this slice's failure: under leader election the lease's renewal is late, and
        // writes wait at the gate until it lands (controller/leader.rs). No backoff, so the
        // slice goes on as soon as the term does.
        tracing::debug!(kind = %K::KIND, object = %object, "write held back until the lease is renewed");
        return Action::requeue(std::time::Duration::from_secs(1));
    }
    let delay = ctx.retries.failed(&format!("{}/{object}", K::KIND));
    tracing::warn!(kind = %K::KIND, object = %object, error = %crate::controller::Chain(err), retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// `Kind/namespace/name`: the key of a slice's backoff and of its own status writes.
pub(super) fn slice_key<K: AgentKind>(obj: &K) -> String {
    format!("{}/{}", K::KIND, key(obj))
}

/// [`slice_key`] of a slice read untyped.
pub(super) fn untyped_slice_key<K: AgentKind>(obj: &DynamicObject) -> String {
    format!("{}/{}", K::KIND, key(obj))
}

/// The slices of kind `K` in `ns`, read untyped: a slice its kind cannot decode is still
/// read, and refused on its own (`refuse.rs`).
fn untyped_slices<K: AgentKind>(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &kube::core::ApiResource::erase::<K>(&()),
    )
}

/// The slice's status as stored, as this reconcile knows it: a cached copy older than
/// this agent's own last status write shows that write's status instead (the write's
/// watch event can come after the events of the objects it applied). Writes only what
/// differs from it.
struct StoredStatus<S> {
    key: String,
    status: Option<S>,
    /// The version of the slice that status is at (its last write's result).
    version: Option<String>,
}

impl<S: serde::Serialize + serde::de::DeserializeOwned + Clone + PartialEq> StoredStatus<S> {
    fn read<K: AgentKind<Status = S>>(ctx: &Context, obj: &K) -> StoredStatus<S> {
        StoredStatus::of(
            ctx,
            slice_key(obj),
            obj.meta().resource_version.clone(),
            obj.status().cloned(),
        )
    }

    /// The status of the slice `key` at `version`, or this agent's own later write.
    fn of(ctx: &Context, key: String, version: Option<String>, status: Option<S>) -> Self {
        let unseen = ctx
            .own_writes
            .unseen(&key, version.as_deref())
            .and_then(|u| u.status)
            .and_then(|s| serde_json::from_value(s).ok());
        StoredStatus {
            key,
            status: unseen.or(status),
            version,
        }
    }

    /// Writes `status` unless it is the one stored; says whether it wrote.
    async fn write<K: AgentKind<Status = S>>(
        &mut self,
        ctx: &Context,
        obj: &K,
        status: &S,
    ) -> Result<bool, AgentError> {
        let ns = obj.namespace().ok_or(AgentError::NoNamespace)?;
        self.write_at::<K>(ctx, &ns, &obj.name_any(), status).await
    }

    /// [`Self::write`] for the slice `ns/name`.
    async fn write_at<K: AgentKind<Status = S>>(
        &mut self,
        ctx: &Context,
        ns: &str,
        name: &str,
        status: &S,
    ) -> Result<bool, AgentError> {
        if self.status.as_ref() == Some(status) {
            return Ok(false);
        }
        let written = write_status::<K>(&ctx.client, ns, name, status).await?;
        let value = serde_json::to_value(status)?;
        ctx.own_writes.wrote(
            &self.key,
            self.version.as_deref(),
            written.as_deref(),
            Wrote::Status(value),
        );
        self.version = written;
        self.status = Some(status.clone());
        Ok(true)
    }
}

/// Applies the slice's status; returns the version written (`None`: the slice is gone).
/// The reply is read untyped: a slice whose spec its kind cannot take still gets its
/// status (the Invalid that says why).
async fn write_status<K: AgentKind>(
    client: &Client,
    ns: &str,
    name: &str,
    status: &K::Status,
) -> Result<Option<String>, AgentError> {
    let api = untyped_slices::<K>(client, ns);
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    match api
        .patch_status(
            name,
            &PatchParams::apply(AGENT_FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        // Deleted meanwhile (the hub removed a slice, a user deleted it): nothing to
        // report, and its deletion reconciles it anyway.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        r => r
            .map(|stored| stored.meta().resource_version.clone())
            .map_err(AgentError::Status),
    }
}

async fn publish<K: AgentKind>(
    ctx: &Context,
    obj: &K,
    type_: EventType,
    reason: &str,
    note: String,
) {
    publish_to(ctx, &obj.object_ref(&()), type_, reason, note).await;
}

async fn publish_to(
    ctx: &Context,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, reference).await {
        tracing::debug!(error = %e, "could not record an Event");
    }
}

/// The slice one reconcile acts on, with its status as stored and as this reconcile will
/// write it.
struct Slice<'a, K: AgentKind> {
    obj: &'a K,
    ns: String,
    name: String,
    now: Time,
    stored: StoredStatus<K::Status>,
    status: K::Status,
}

impl<K: AgentKind> Slice<'_, K> {
    /// Ends the reconcile with the slice Invalid for `reason` until it changes.
    async fn invalid(
        &mut self,
        ctx: &Context,
        reason: &str,
        message: &str,
    ) -> Result<Action, AgentError> {
        let status = std::mem::take(&mut self.status);
        invalid(
            ctx,
            self.obj,
            &mut self.stored,
            status,
            reason,
            message,
            &self.now,
        )
        .await
    }
}

/// One slice's trip through the stages, each taking what the last produced:
/// read → record → build → judge → apply → report.
async fn reconcile_stages<K: AgentKind>(cached: &K, ctx: &Context) -> Result<Action, AgentError> {
    let ns = cached.namespace().ok_or(AgentError::NoNamespace)?;
    let name = cached.name_any();
    let fresh = next!(read::current::<K>(ctx, &ns, &name).await?);
    let obj = fresh.as_ref().unwrap_or(cached);
    if obj.meta().deletion_timestamp.is_some() {
        // Owner references let the garbage collector remove what we made.
        ctx.applied.forget(&obj.uid().unwrap_or_default());
        ctx.claims.forget(&obj.uid().unwrap_or_default());
        ctx.status_hold.forget(&obj.uid().unwrap_or_default());
        ctx.bundle_users.forget(K::KIND, &ns, &name);
        return Ok(Action::await_change());
    }
    let stored = StoredStatus::read(ctx, obj);
    let status = stored.status.clone().unwrap_or_default();
    let mut slice = Slice {
        obj,
        ns,
        name,
        now: Time(Timestamp::now()),
        stored,
        status,
    };
    let read = next!(read::read(ctx, &mut slice).await?);
    let mut recorded = record::record(ctx, &mut slice, &read.observed).await?;
    let built = match build::build(ctx, &mut recorded, &read.profile, &read.observed) {
        Ok(built) => built,
        Err(e) => {
            return slice
                .invalid(ctx, e.reason(), &e.invalid().to_string())
                .await;
        }
    };
    let missing = next!(judge::judge(ctx, &mut slice, &built).await?);
    next!(
        apply::apply(
            ctx,
            &mut slice,
            &read.observed,
            recorded.completed.as_ref(),
            built
        )
        .await?
    );
    report::report(ctx, slice, read, &recorded, &missing).await
}

async fn invalid<K: AgentKind>(
    ctx: &Context,
    obj: &K,
    stored: &mut StoredStatus<K::Status>,
    status: K::Status,
    reason: &str,
    message: &str,
    now: &Time,
) -> Result<Action, AgentError> {
    let generation = obj.meta().generation;
    if let Some(status) = invalid_status::<K>(
        stored.status.clone(),
        status,
        generation,
        reason,
        message,
        now,
    ) {
        stored.write(ctx, obj, &status).await?;
        publish(ctx, obj, EventType::Warning, reason, message.to_string()).await;
        tracing::info!(kind = %K::KIND, object = %key(obj), %message, "invalid; waiting for a change");
    }
    // Permanent: nothing to retry until the object (or a RuntimeProfile) changes.
    Ok(Action::await_change())
}

/// `status` with the slice Invalid for `reason`; `None` when the stored status says so
/// already for this generation (nothing to write: no hot loop).
fn invalid_status<K: AgentKind>(
    stored: Option<K::Status>,
    mut status: K::Status,
    generation: Option<i64>,
    reason: &str,
    message: &str,
    now: &Time,
) -> Option<K::Status> {
    let already = stored.is_some_and(|mut s| {
        crate::api::common::says_invalid(K::conditions(&mut s), message, generation)
    });
    if already {
        return None;
    }
    crate::api::common::set_refused_conditions(
        K::conditions(&mut status),
        reason,
        message,
        generation,
        now,
    );
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::service::PinterestService;

    #[test]
    fn a_refusal_is_written_once_for_a_generation_and_message() {
        let now = Time(Timestamp::UNIX_EPOCH);
        let refuse = |stored: Option<_>, generation, message: &str| {
            invalid_status::<PinterestService>(
                stored,
                Default::default(),
                generation,
                "Undecodable",
                message,
                &now,
            )
        };
        let first = refuse(None, Some(1), "spec.owner: invalid type").expect("written");
        let invalid = <PinterestService as crate::api::kind::PinterestKind>::conditions_of(&first)
            .iter()
            .find(|c| c.type_ == ct::INVALID)
            .expect("an Invalid condition");
        assert_eq!(invalid.status, ConditionStatus::True);
        assert_eq!(invalid.reason, "Undecodable");
        assert_eq!(invalid.message, "spec.owner: invalid type");
        assert_eq!(invalid.observed_generation, Some(1));
        assert!(
            refuse(Some(first.clone()), Some(1), "spec.owner: invalid type").is_none(),
            "the same refusal again writes nothing (no hot loop)"
        );
        assert!(refuse(Some(first.clone()), Some(2), "spec.owner: invalid type").is_some());
        assert!(refuse(Some(first), Some(1), "spec.template: invalid type").is_some());
    }

    fn forbidden(cause: &str) -> AgentError {
        // As the API server sends it (kube::core::response's types have no Default).
        let status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "deployments.apps \"web\" is forbidden: unable to create new content",
            "details": {"name": "web", "group": "apps", "kind": "deployments",
                        "causes": [{"reason": cause, "message": "", "field": "metadata.namespace"}]}
        }))
        .unwrap();
        AgentError::Apply {
            kind: "Deployment".into(),
            name: "web".into(),
            source: kube::Error::Api(Box::new(status)),
        }
    }

    #[test]
    fn only_a_terminating_namespace_is_waited_out_quietly() {
        assert!(forbidden("NamespaceTerminating").namespace_terminating());
        assert!(!forbidden("FieldValueForbidden").namespace_terminating());
        assert!(!AgentError::NoNamespace.namespace_terminating());
    }
}

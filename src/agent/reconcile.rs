//! The agent's reconcile loop, in stages: read (profile, observed objects) → record
//! (job-set completions, before anything can delete a finished Job) → build (the pure
//! expansion engine) → apply (server-side apply, field manager `pinfed-agent`) → prune
//! (by label) → status. Invalid resources get an Invalid condition and an Event and wait
//! for a change; transient errors back off per object.

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
    /// Slice statuses written that the watch has not delivered yet.
    pub own_writes: crate::controller::own_writes::OwnWrites,
    /// The services' Deployments as the watch that triggers their reconciles has them.
    pub deployments: Store<Deployment>,
    /// Its writer, until the services' controller takes it for that watch.
    pub deployments_writer: Mutex<Option<reflector::store::Writer<Deployment>>>,
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
            retries: RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(300)),
            owned: Default::default(),
            applied: Default::default(),
            claims: Default::default(),
            bundle_users: Default::default(),
            concurrency,
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
    let delay = ctx.retries.failed(&format!("{}/{object}", K::KIND));
    tracing::warn!(kind = %K::KIND, object = %object, error = %crate::controller::Chain(err), retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// The generated objects without the Jobs that exist already (returned apart, to keep):
/// those run as they were created.
fn leave_started_jobs(
    objects: Vec<DynamicObject>,
    observed: &Observed,
) -> (Vec<DynamicObject>, Vec<(String, String)>) {
    let existing: std::collections::BTreeSet<&str> = observed
        .jobs
        .iter()
        .filter_map(|j| j.metadata.name.as_deref())
        .collect();
    let mut started = Vec::new();
    let objects = objects
        .into_iter()
        .filter(|o| {
            let is_job = o.types.as_ref().is_some_and(|t| t.kind == "Job");
            let name = o.metadata.name.as_deref().unwrap_or("");
            if is_job && existing.contains(name) {
                started.push(("Job".to_string(), name.to_string()));
                false
            } else {
                true
            }
        })
        .collect();
    (objects, started)
}

/// Gives each workload controller object in `observed` the generation our last apply
/// left it at, when the copy read is older.
fn raise_to_applied(book: &super::applied::AppliedBook, uid: &str, observed: &mut Observed) {
    fn raise(
        book: &super::applied::AppliedBook,
        uid: &str,
        kind: &str,
        meta: &mut kube::api::ObjectMeta,
    ) {
        let name = meta.name.clone().unwrap_or_default();
        if let Some(g) = book.generation(uid, kind, &name)
            && meta.generation < Some(g)
        {
            meta.generation = Some(g);
        }
    }
    for d in &mut observed.deployments {
        raise(book, uid, "Deployment", &mut d.metadata);
    }
    for s in &mut observed.statefulsets {
        raise(book, uid, "StatefulSet", &mut s.metadata);
    }
    for d in &mut observed.daemonsets {
        raise(book, uid, "DaemonSet", &mut d.metadata);
    }
}

/// `Kind/namespace/name`: the key of a slice's backoff and of its own status writes.
pub(super) fn slice_key<K: AgentKind>(obj: &K) -> String {
    format!("{}/{}", K::KIND, key(obj))
}

async fn observe(
    ctx: &Context,
    ns: &str,
    kind: WorkloadKind,
    runs_as: NativeKind,
    name: &str,
) -> Result<Observed, kube::Error> {
    let lp = ListParams::default().labels(&expand::workload_selector(kind, name));
    let c = ctx.client.clone();
    let mut o = Observed::default();
    match runs_as {
        // From the watch whose events reconcile the service (it stores each event before
        // it triggers): a LIST on every reconcile — and every Deployment status change
        // reconciles — was the member API server's main load in a burst of slices. Its
        // one Deployment is named after the service. Until that watch has listed, LIST.
        NativeKind::Deployment => {
            o.deployments = if ctx.deployments.wait_until_ready().now_or_never().is_some() {
                let key = reflector::ObjectRef::new(&expand::names::object_name(name)).within(ns);
                ctx.deployments
                    .get(&key)
                    .map(|d| (*d).clone())
                    .into_iter()
                    .collect()
            } else {
                Api::<Deployment>::namespaced(c, ns).list(&lp).await?.items
            }
        }
        NativeKind::StatefulSet => {
            o.statefulsets = Api::<StatefulSet>::namespaced(c, ns).list(&lp).await?.items
        }
        NativeKind::DaemonSet => {
            o.daemonsets = Api::<DaemonSet>::namespaced(c, ns).list(&lp).await?.items
        }
        NativeKind::CronJob => {
            o.cronjobs = Api::<CronJob>::namespaced(c, ns).list(&lp).await?.items
        }
        NativeKind::Job => o.jobs = Api::<Job>::namespaced(c, ns).list(&lp).await?.items,
        // A kind runs as one of the workload kinds above.
        NativeKind::ConfigMap
        | NativeKind::PersistentVolumeClaim
        | NativeKind::Service
        | NativeKind::Ingress
        | NativeKind::PodDisruptionBudget => {}
    }
    Ok(o)
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
        let key = slice_key(obj);
        let version = obj.meta().resource_version.clone();
        let unseen = ctx
            .own_writes
            .unseen(&key, version.as_deref())
            .and_then(|u| u.status)
            .and_then(|s| serde_json::from_value(s).ok());
        StoredStatus {
            key,
            status: unseen.or_else(|| obj.status().cloned()),
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
        if self.status.as_ref() == Some(status) {
            return Ok(false);
        }
        let written = write_status(&ctx.client, obj, status).await?;
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
async fn write_status<K: AgentKind>(
    client: &Client,
    obj: &K,
    status: &K::Status,
) -> Result<Option<String>, AgentError> {
    let ns = obj.namespace().ok_or(AgentError::NoNamespace)?;
    let api: Api<K> = Api::namespaced(client.clone(), &ns);
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    match api
        .patch_status(
            &obj.name_any(),
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
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &obj.object_ref(&())).await {
        tracing::debug!(error = %e, "could not record an Event");
    }
}

async fn reconcile_stages<K: AgentKind>(cached: &K, ctx: &Context) -> Result<Action, AgentError> {
    let ns = cached.namespace().ok_or(AgentError::NoNamespace)?;
    let name = cached.name_any();
    // Job sets, cron jobs and training jobs start runs, which cannot be taken back: act
    // on the object as the API server has it now, not as the watch cache last saw it.
    // After a member's API server returns, the cache can still hold a slice the hub has
    // since shrunk or deleted (and whose Jobs it fenced) — a CronJob applied from it
    // fires in a member the work has left — or miss a completion this agent recorded.
    let fresh;
    let obj = if K::KIND.runs_to_completion() {
        match Api::<K>::namespaced(ctx.client.clone(), &ns)
            .get_opt(&name)
            .await
            .map_err(AgentError::Observe)?
        {
            Some(o) => {
                fresh = o;
                &fresh
            }
            None => return Ok(Action::await_change()),
        }
    } else {
        cached
    };
    if obj.meta().deletion_timestamp.is_some() {
        // Owner references let the garbage collector remove what we made.
        ctx.applied.forget(&obj.uid().unwrap_or_default());
        ctx.claims.forget(&obj.uid().unwrap_or_default());
        ctx.bundle_users.forget(K::KIND, &ns, &name);
        return Ok(Action::await_change());
    }
    let now = Time(Timestamp::now());
    let generation = obj.meta().generation;
    let mut stored = StoredStatus::read(ctx, obj);
    let mut status = stored.status.clone().unwrap_or_default();

    // Read.
    let profiles: Vec<RuntimeProfile> =
        ctx.profiles.state().iter().map(|p| (**p).clone()).collect();
    let profile = match expand::select_profile(&profiles, obj.runtime_version()) {
        Ok(p) => p.clone(),
        Err(e) => {
            return invalid(
                ctx,
                obj,
                &mut stored,
                status,
                "UnknownRuntimeVersion",
                &format!("spec.runtimeVersion: {e}"),
                &now,
            )
            .await;
        }
    };
    let observed = observe(ctx, &ns, K::KIND, K::RUNS_AS, &name)
        .instrument(tracing::trace_span!(target: "pinfed::trace", "observe"))
        .await
        .map_err(AgentError::Observe)?;

    // Record: fold finished shards into status before any Job can be pruned or cleaned up.
    let mut working = obj.clone();
    let mut held = false;
    let (admitted, completed) = match obj.as_workload().job_set() {
        Some(j) => {
            let (mut admitted, completed, occupied) = record_shards(
                ctx,
                obj,
                j,
                &mut working,
                &mut stored,
                &mut status,
                &observed,
            )
            .await?;
            // The fence: no new shard unless the hub vouches for this slice now.
            if !admitted.difference(&occupied).is_empty()
                && let Err(hold) = may_start_shards(ctx, obj).await?
            {
                let new = admitted.difference(&occupied);
                tracing::info!(workload = %slice_key(obj), shards = %new, reason = %hold, "new shards wait for the hub");
                admitted = admitted.intersection(&occupied);
                held = true;
            }
            (Some(admitted), Some(completed))
        }
        None => (None, None),
    };

    // A priority class the member does not have stays off the pods (they would be
    // refused); the hub orders and preempts by it all the same.
    if let Some(class) = working.priority_class_name().map(str::to_string)
        && ctx
            .priority_classes
            .get(&kube::runtime::reflector::ObjectRef::new(&class))
            .is_none()
    {
        tracing::debug!(workload = %slice_key(obj), %class, "no such PriorityClass in this member: pods run without it");
        working.set_priority_class_name(None);
    }

    // Build.
    let input = ExpandInput {
        workload: working.as_workload(),
        profile: Some(&profile),
        cluster: Some(&ctx.cluster),
        admitted_shards: admitted.as_ref(),
    };
    let expanded =
        tracing::trace_span!(target: "pinfed::trace", "expand").in_scope(|| expand::expand(&input));
    let objects = match expanded {
        Ok(objects) => objects,
        Err(e) => {
            return invalid(
                ctx,
                obj,
                &mut stored,
                status,
                e.reason(),
                &e.invalid().to_string(),
                &now,
            )
            .await;
        }
    };

    // A shard's Job, once created, runs the template it was created with (a Job's
    // template is immutable: an apply of another one is refused, and replacing it would
    // run the shard again). A new revision reaches the shards that start after it.
    let (objects, started) = leave_started_jobs(objects, &observed);

    // Policy: the member's admins decide what pinfed may run here. A refused workload
    // gets nothing created or changed; what already runs of it stays.
    let bodies: Vec<(&str, &str, &serde_json::Value)> = objects
        .iter()
        .map(|o| {
            (
                o.types.as_ref().map(|t| t.kind.as_str()).unwrap_or(""),
                o.metadata.name.as_deref().unwrap_or(""),
                &o.data,
            )
        })
        .collect();
    let verdict = ctx
        .policy
        .judge(&ctx.client, &ns, K::KIND, &bodies)
        .instrument(tracing::trace_span!(target: "pinfed::trace", "policy"))
        .await
        .map_err(AgentError::Observe)?;
    let refusal = match verdict {
        super::policy::Verdict::Admit => None,
        super::policy::Verdict::Refuse(r) => Some((r.reason(), r.to_string())),
        super::policy::Verdict::PolicyBroken(e) => Some((
            "MemberPolicyUnreadable",
            format!(
                "the member policy cannot be read ({e}); nothing new is created until its admins fix it"
            ),
        )),
    };
    if let Some((reason, message)) = refusal {
        ctx.metrics.refused(K::KIND.as_str(), reason);
        return invalid(ctx, obj, &mut stored, status, reason, &message, &now).await;
    }

    // The ConfigMaps and Secrets the pods reference, from the hub's bundles.
    let materialized =
        super::bundles::materialize(&ctx.client, &ctx.claims, &ctx.bundle_users, K::KIND, obj)
            .instrument(tracing::trace_span!(target: "pinfed::trace", "bundles"))
            .await?;
    if let Some(clash) = materialized.clash {
        ctx.metrics.refused(K::KIND.as_str(), "Conflict");
        invalid(ctx, obj, &mut stored, status, "Conflict", &clash, &now).await?;
        return Ok(Action::requeue(CONFLICT_RECHECK));
    }
    let missing = materialized.missing;

    // Apply (unless the same objects were applied moments ago), then prune what this
    // workload no longer wants.
    let digest = super::applied::digest(&objects)?;
    let uid = obj.uid().unwrap_or_default();
    let keep = if ctx.applied.unchanged(&uid, digest) {
        objects
            .iter()
            .map(|o| (api_resource(o).kind, o.name_any()))
            .collect()
    } else {
        // Nothing of someone else's is overwritten: a clash refuses the whole workload
        // before any object is applied.
        let adopted = match claim_objects(ctx, obj, &ns, &objects).await? {
            Ok(adopted) => adopted,
            Err(clash) => {
                ctx.metrics.refused(K::KIND.as_str(), "Conflict");
                invalid(ctx, obj, &mut stored, status, "Conflict", &clash, &now).await?;
                return Ok(Action::requeue(CONFLICT_RECHECK));
            }
        };
        let keep = apply_objects(ctx, &uid, &ns, &objects, &adopted)
            .instrument(tracing::trace_span!(target: "pinfed::trace", "apply"))
            .await?;
        ctx.applied.record(&uid, digest);
        keep
    };
    let mut keep = keep;
    keep.extend(started);
    prune(ctx, obj, &observed, completed.as_ref(), keep)
        .instrument(tracing::trace_span!(target: "pinfed::trace", "prune"))
        .await?;

    // Status. The controllers' objects were read before this apply: one our apply just
    // moved to a new generation counts as that generation, so its status (from before)
    // reports no replica of the new template updated yet.
    let mut observed = observed;
    raise_to_applied(&ctx.applied, &uid, &mut observed);
    let health = working.observe(&observed, &mut status);
    K::set_meta(&mut status, generation, &profile.spec.version);
    status::set_health_conditions(K::conditions(&mut status), &health, generation, &now);
    stored
        .write(ctx, obj, &status)
        .instrument(tracing::trace_span!(target: "pinfed::trace", "write_status"))
        .await?;
    // Owned-object watches bring changes; the timer is a safety net. A bundle not there
    // yet is looked for again soon.
    if held {
        // The hub's renewal or its rewrite of the slice ends the hold; neither is an
        // event of this workload.
        Ok(Action::requeue(FENCE_RECHECK))
    } else if missing.is_empty() {
        Ok(Action::requeue(Duration::from_secs(300)))
    } else {
        Ok(Action::requeue(Duration::from_secs(5)))
    }
}

/// How soon a job set whose new shards wait for the hub looks again.
const FENCE_RECHECK: Duration = Duration::from_secs(2);

/// Whether the hub vouches for `obj`, a job-set slice, now (`controller::fence`): the
/// fence Lease as the member's API server has it.
async fn may_start_shards<K: AgentKind>(
    ctx: &Context,
    obj: &K,
) -> Result<Result<(), fence::Hold>, AgentError> {
    let lease = Api::<Lease>::namespaced(ctx.client.clone(), fence::FENCE_NAMESPACE)
        .get_opt(fence::FENCE_LEASE)
        .await
        .map_err(AgentError::Observe)?;
    Ok(fence::may_start(
        obj.meta(),
        lease.as_ref(),
        Timestamp::now(),
    ))
}

/// Folds a job set's finished shards into its status (written, with an Event for the
/// new ones) and admits the shards that may start now. Returns (admitted, completed,
/// shards that have a Job).
async fn record_shards<K: AgentKind>(
    ctx: &Context,
    obj: &K,
    j: &PinterestJobSet,
    working: &mut K,
    stored: &mut StoredStatus<K::Status>,
    status: &mut K::Status,
    observed: &Observed,
) -> Result<
    (
        crate::api::ranges::RangeSet,
        crate::api::ranges::RangeSet,
        crate::api::ranges::RangeSet,
    ),
    AgentError,
> {
    let account = shard_account(j, observed);
    working.observe(observed, status);
    let newly = account.completed.difference(
        &j.status
            .as_ref()
            .and_then(|s| s.completed_shards.as_deref())
            .and_then(|r| crate::api::ranges::RangeSet::parse(r).ok())
            .unwrap_or_default(),
    );
    // (Written first: an Event only for shards the status now records.)
    if stored.write(ctx, obj, status).await? && !newly.is_empty() {
        publish(
            ctx,
            obj,
            EventType::Normal,
            "ShardsCompleted",
            format!("shards {newly} completed"),
        )
        .await;
    }
    *working.status_mut() = Some(status.clone());
    let admitted = admit(working, &account)?;
    let occupied = account.running.union(&account.failed);
    Ok((admitted, account.completed, occupied))
}

/// How soon a workload whose object names clash with someone else's objects looks again
/// (the other object has none of our labels, so no watch brings its deletion).
const CONFLICT_RECHECK: Duration = Duration::from_secs(10);

/// Checks that every object about to be applied is this workload's, new, or handed over
/// by the member's admin (`ADOPT_ANNOTATION`: adopted, with an Event). Ok: the names of
/// the objects to adopt. Err: the clash, to report; nothing was written.
async fn claim_objects<K: AgentKind>(
    ctx: &Context,
    obj: &K,
    ns: &str,
    objects: &[DynamicObject],
) -> Result<Result<BTreeSet<(String, String)>, String>, AgentError> {
    use crate::api::member_policy::{ADOPT_ANNOTATION, Ownership, ownership};
    let uid = obj.uid().unwrap_or_default();
    let workload = format!("{}/{}", K::KIND.as_str(), obj.name_any());
    // Once the owned-object watches have listed (an agent start), they answer for what
    // is ours, and only new names are looked up.
    while !ctx.owned.listed(K::KIND) && ctx.owned.age() < OWNED_LISTING_WAIT {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut adopted = BTreeSet::new();
    for o in objects {
        let ar = api_resource(o);
        let name = o.name_any();
        if ctx.owned.holds(K::KIND, &ar.kind, &uid, &name) {
            continue;
        }
        let existing = Api::<DynamicObject>::namespaced_with(ctx.client.clone(), ns, &ar)
            .get_metadata_opt(&name)
            .await
            .map_err(AgentError::Observe)?;
        let owners: Vec<String> = existing
            .iter()
            .flat_map(|m| m.metadata.owner_references.iter().flatten())
            .map(|r| r.uid.clone())
            .collect();
        let empty = Default::default();
        let view = existing
            .as_ref()
            .map(|m| crate::api::member_policy::Existing {
                owners: &owners,
                labels: m.metadata.labels.as_ref().unwrap_or(&empty),
                annotations: m.metadata.annotations.as_ref().unwrap_or(&empty),
            });
        match ownership(view, &uid, &workload, None) {
            Ownership::Absent | Ownership::Ours => {}
            Ownership::Adoptable => {
                adopted.insert((ar.kind.clone(), name));
            }
            Ownership::Foreign => {
                return Ok(Err(format!(
                    "{}/{name} already exists in namespace {ns} and was not created by pinfed for {workload}: \
                     pinfed does not take it over (nothing was applied). Rename the workload, delete that object, \
                     or let a member admin hand it over: `pinfed adopt {}/{name} -n {ns} --to {workload}` \
                     (annotation {ADOPT_ANNOTATION}={workload})",
                    ar.kind, ar.kind
                )));
            }
        }
    }
    if !adopted.is_empty() {
        let names: Vec<String> = adopted.iter().map(|(k, n)| format!("{k}/{n}")).collect();
        publish(
            ctx,
            obj,
            EventType::Normal,
            "Adopted",
            format!(
                "took over {} as its member admin allowed ({ADOPT_ANNOTATION})",
                names.join(", ")
            ),
        )
        .await;
    }
    Ok(Ok(adopted))
}

/// Makes an adopted object exactly the generated one: replaced whole (what the API
/// server allocated, such as a Service's cluster IP, it keeps), so none of its former
/// owner's fields linger beside ours; the apply that follows then owns every field.
async fn replace_for_adoption(
    api: &Api<DynamicObject>,
    generated: &DynamicObject,
) -> Result<(), kube::Error> {
    let existing = api.get(&generated.name_any()).await?;
    let mut body = generated.clone();
    body.metadata.resource_version = existing.metadata.resource_version.clone();
    api.replace(
        &generated.name_any(),
        &kube::api::PostParams {
            field_manager: Some(AGENT_FIELD_MANAGER.to_string()),
            ..Default::default()
        },
        &body,
    )
    .await?;
    Ok(())
}

/// After the first apply of an adopted object: only the agent's apply (and status
/// writers) own its fields, so a field the expansion later drops is removed.
async fn drop_other_owners(
    api: &Api<DynamicObject>,
    applied: &DynamicObject,
) -> Result<(), kube::Error> {
    let kept: Vec<_> = applied
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.subresource.is_some()
                || (m.manager.as_deref() == Some(AGENT_FIELD_MANAGER)
                    && m.operation.as_deref() == Some("Apply"))
        })
        .cloned()
        .collect();
    if kept.len() == applied.metadata.managed_fields.as_ref().map_or(0, Vec::len) {
        return Ok(());
    }
    let patch = serde_json::json!({"metadata": {"managedFields": kept,
        "resourceVersion": applied.metadata.resource_version}});
    api.patch(
        &applied.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// Server-side applies every generated object of the workload `uid`; returns (kind, name)
/// of each. The book of applied objects notes each one's fingerprint as the API server
/// returned it (to tell others' changes from ours later).
async fn apply_objects(
    ctx: &Context,
    uid: &str,
    ns: &str,
    objects: &[DynamicObject],
    adopted: &BTreeSet<(String, String)>,
) -> Result<Kept, AgentError> {
    let mut keep = BTreeSet::new();
    ctx.applied.begin(uid);
    for o in objects {
        let ar = api_resource(o);
        let oname = o.name_any();
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
        let apply_err = |source| AgentError::Apply {
            kind: ar.kind.clone(),
            name: oname.clone(),
            source,
        };
        let adopting = adopted.contains(&(ar.kind.clone(), oname.clone()));
        if adopting {
            replace_for_adoption(&api, o).await.map_err(apply_err)?;
        }
        let (params, patch) = (
            PatchParams::apply(AGENT_FIELD_MANAGER).force(),
            Patch::Apply(o),
        );
        let apply = || api.patch(&oname, &params, &patch);
        let (applied, took_back) = match apply().await {
            Ok(applied) => (applied, adopting),
            // Someone changed a key of a list our apply merges into (a Service's port by
            // hand): their entry and ours cannot stand together (two ports named `http`),
            // so no apply ever repairs it. The object is ours: take it back whole, as for
            // an adoption, then apply.
            Err(kube::Error::Api(s)) if s.code == 422 && !adopting => {
                tracing::info!(kind = %ar.kind, name = %oname, namespace = %ns, reason = %s.message,
                    "the object was changed so that an apply cannot merge; replacing it");
                replace_for_adoption(&api, o).await.map_err(apply_err)?;
                (apply().await.map_err(apply_err)?, true)
            }
            Err(e) => return Err(apply_err(e)),
        };
        if took_back {
            drop_other_owners(&api, &applied).await.map_err(apply_err)?;
        }
        ctx.metrics
            .applied_objects
            .get_or_create(&crate::controller::metrics::KindLabels {
                kind: ar.kind.clone(),
            })
            .inc();
        let fingerprint = ctx.applied.fingerprint(&o.metadata, &applied.metadata);
        ctx.applied
            .applied(uid, (ar.kind.clone(), oname.clone()), fingerprint);
        keep.insert((ar.kind.clone(), oname));
    }
    Ok(keep)
}

/// Prunes what the workload no longer wants — except what its completed shards leave
/// behind (finished Jobs wait for their TTL; see `completed_shard_objects`).
async fn prune<K: AgentKind>(
    ctx: &Context,
    obj: &K,
    observed: &Observed,
    completed: Option<&crate::api::ranges::RangeSet>,
    mut keep: Kept,
) -> Result<(), AgentError> {
    let ns = obj.namespace().unwrap_or_default();
    let selector = expand::workload_selector(K::KIND, &obj.name_any());
    if let (Some(j), Some(completed)) = (obj.as_workload().job_set(), completed) {
        let claims = if j.spec.volume_claim_templates.is_empty() || completed.is_empty() {
            Vec::new()
        } else {
            Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &ns)
                .list_metadata(&ListParams::default().labels(&selector))
                .await
                .map_err(AgentError::Observe)?
                .items
                .into_iter()
                .map(|p| p.metadata)
                .collect()
        };
        keep.extend(completed_shard_objects(
            j,
            completed,
            &observed.jobs,
            &claims,
        ));
    }
    let uid = obj.uid().unwrap_or_default();
    let pruned = match unwanted::<K>(ctx, &uid, &obj.name_any(), &keep).await {
        Some(unwanted) => {
            let resources = expand::generated_api_resources();
            let mut deleted = Vec::new();
            for (kind, name) in unwanted {
                let Some(ar) = resources.iter().find(|r| r.kind == kind) else {
                    continue;
                };
                if crate::controller::apply::delete_generated(&ctx.client, &ns, ar, &name)
                    .await
                    .map_err(AgentError::Prune)?
                {
                    deleted.push(format!("{kind}/{name}"));
                }
            }
            deleted
        }
        // The owned watches have not listed yet (or one cannot): list as they would.
        None => crate::controller::apply::prune(
            &ctx.client,
            &ns,
            &expand::generated_api_resources(),
            &selector,
            &uid,
            &keep,
        )
        .await
        .map_err(AgentError::Prune)?,
    };
    if !pruned.is_empty() {
        publish(
            ctx,
            obj,
            EventType::Normal,
            "Pruned",
            format!("removed {}", pruned.join(", ")),
        )
        .await;
    }
    Ok(())
}

/// The workload's objects that `keep` leaves out, from the owned-object watches; waits
/// for their first listing (an agent start) until [`OWNED_LISTING_WAIT`] after the index
/// was made. None when the index cannot answer: the prune lists.
async fn unwanted<K: AgentKind>(
    ctx: &Context,
    uid: &str,
    name: &str,
    keep: &Kept,
) -> Option<Vec<(String, String)>> {
    use super::owned::Answer;
    let workload = expand::names::label_value(name);
    loop {
        match ctx.owned.unwanted(K::KIND, uid, &workload, keep) {
            Answer::Unwanted(u) => return Some(u),
            Answer::NotWatched(kind) => {
                tracing::warn!(kind = K::KIND.as_str(), %name, generated = %kind, "no owned-object watch covers a generated kind: pruning by listing");
                return None;
            }
            Answer::NotListedYet if ctx.owned.age() >= OWNED_LISTING_WAIT => {
                tracing::warn!(kind = K::KIND.as_str(), %name, "the owned-object watches have not listed yet: pruning by listing");
                return None;
            }
            Answer::NotListedYet => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// How long a prune waits for the owned-object watches' first listing before it lists
/// the namespace itself.
const OWNED_LISTING_WAIT: Duration = Duration::from_secs(30);

fn admit<K: AgentKind>(
    working: &K,
    account: &super::status::ShardAccount,
) -> Result<crate::api::ranges::RangeSet, AgentError> {
    let Some(j) = working.as_workload().job_set() else {
        unreachable!("admit is only called for job sets")
    };
    let j: &PinterestJobSet = j;
    let pending = assigned_shards(j).difference(&account.completed);
    // Failed shards keep their Job (it records the failure); running ones keep theirs.
    let occupied = account.running.union(&account.failed);
    let parallelism = j.spec.parallelism.and_then(|p| u32::try_from(p).ok());
    Ok(expand::admit_shards(parallelism, &pending, &occupied))
}

async fn invalid<K: AgentKind>(
    ctx: &Context,
    obj: &K,
    stored: &mut StoredStatus<K::Status>,
    mut status: K::Status,
    reason: &str,
    message: &str,
    now: &Time,
) -> Result<Action, AgentError> {
    let generation = obj.meta().generation;
    let already = stored
        .status
        .clone()
        .map(|mut s| {
            find_condition(K::conditions(&mut s), ct::INVALID).is_some_and(|c| {
                c.status == ConditionStatus::True
                    && c.message == message
                    && c.observed_generation == generation
            })
        })
        .unwrap_or(false);
    if !already {
        crate::api::common::set_invalid_conditions(
            K::conditions(&mut status),
            message,
            generation,
            now,
        );
        if let Some(c) = K::conditions(&mut status)
            .iter_mut()
            .find(|c| c.type_ == ct::INVALID)
        {
            c.reason = reason.to_string();
        }
        stored.write(ctx, obj, &status).await?;
        publish(ctx, obj, EventType::Warning, reason, message.to_string()).await;
        tracing::info!(kind = %K::KIND, object = %key(obj), %message, "invalid; waiting for a change");
    }
    // Permanent: nothing to retry until the object (or a RuntimeProfile) changes.
    Ok(Action::await_change())
}

fn api_resource(o: &DynamicObject) -> kube::core::ApiResource {
    let types = o.types.clone().unwrap_or_default();
    expand::generated_api_resources()
        .into_iter()
        .find(|r| r.api_version == types.api_version && r.kind == types.kind)
        .unwrap_or_else(|| {
            let (g, v) = types
                .api_version
                .split_once('/')
                .unwrap_or(("", &types.api_version));
            kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(g, v, &types.kind))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

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

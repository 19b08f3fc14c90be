//! The HTTP shell of the JSS: routes, authentication, body limits, timeouts, audit lines,
//! metrics, and serving over TLS (or plain HTTP on loopback). Handlers are thin: they call
//! the pure stages in [`super::admission`], [`super::auth`], [`super::quota`] and
//! [`super::request`], and [`super::hub`] for reads and writes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{MatchedPath, Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kube::ResourceExt;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use serde::Deserialize;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_rustls::rustls;
use tracing::Instrument;

use super::admission::{Admitted, Origin, admit_from};
use super::artifacts::ArtifactStore;
use super::auth::{
    self, AuthConfig, AuthError, Principal, authorize_change_of_existing, authorize_namespace,
    may_submit_inline, may_use_namespace,
};
use super::error::Rejection;
use super::hub_view::Hub;
use super::limits;
use super::limits::{ClientAddr, ConnectionLimits, FailedAuths, IpSlot, PrincipalRequests};
use super::quota::{check_all, check_placeable, requested, whole_pods};
use super::request::{Source, parse_kind, parse_submission};
use super::wire::RolloutAction;
use super::{rollout, views, wire};
use crate::api::federation::ANNOTATION_REBALANCE;
use crate::api::rollout::{ANNOTATION_APPROVED, ANNOTATION_PAUSED};
use crate::api::workload::WorkloadKind;
use crate::controller::http::Readiness;
use kube::api::DynamicObject;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabel {
    route: String,
}

/// Submission and request metrics.
#[derive(Clone)]
pub struct JssMetrics {
    /// Requests refused because their address failed authentication too often.
    pub failed_auth_limited: Counter,
    /// Requests refused because their principal used up its request budget.
    pub principal_limited: Counter,
    /// Submissions that waited for the memory budget.
    pub memory_waits: Counter,
    /// Connections closed at once: their address held its maximum.
    pub connections_refused: Counter,
    submissions: Family<OutcomeLabel, Counter>,
    submission_seconds: Histogram,
    requests: Family<RouteLabels, Counter>,
    request_seconds: Family<RouteLabel, Histogram>,
}

impl JssMetrics {
    pub fn register(registry: &mut Registry) -> JssMetrics {
        let m = JssMetrics {
            failed_auth_limited: Counter::default(),
            principal_limited: Counter::default(),
            memory_waits: Counter::default(),
            connections_refused: Counter::default(),
            submissions: Family::default(),
            submission_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            requests: Family::default(),
            request_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            }),
        };
        registry.register(
            "submissions",
            "Submissions by outcome (Accepted or the rejection reason)",
            m.submissions.clone(),
        );
        registry.register(
            "submission_duration_seconds",
            "Time from request to decision for POST /v1/submissions",
            m.submission_seconds.clone(),
        );
        registry.register(
            "requests",
            "HTTP requests by method, route and status code",
            m.requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "HTTP request latency by route",
            m.request_seconds.clone(),
        );
        registry.register(
            "failed_auth_limited",
            "Requests refused (429) because their client address failed authentication too often",
            m.failed_auth_limited.clone(),
        );
        registry.register(
            "principal_limited",
            "Requests refused (429) because their authenticated principal used up its request budget (--principal-burst, --principal-per-sec)",
            m.principal_limited.clone(),
        );
        registry.register(
            "memory_waits",
            "Submissions that waited for the memory budget (--memory-budget-mib) before their body was read",
            m.memory_waits.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed at once because their client address held its maximum",
            m.connections_refused.clone(),
        );
        m
    }
}

/// Everything a request handler needs.
pub struct Jss {
    pub auth: AuthConfig,
    pub token_review: bool,
    pub store: ArtifactStore,
    pub hub: Hub,
    pub metrics: JssMetrics,
    pub body_limit: usize,
    pub timeout: Duration,
    /// Serializes quota check and apply per namespace (within this process).
    ns_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// TokenReview answers, by token digest, for a minute.
    reviewed: Mutex<HashMap<[u8; 32], (Principal, Instant)>>,
    /// Tokens TokenReview refused, by digest, for [`REFUSED_TTL`]: a bogus token costs
    /// the hub one review, not one per request.
    refused: Mutex<HashMap<[u8; 32], Instant>>,
    /// The audience a reviewed token must carry (`--token-audience`).
    token_audience: Option<String>,
    /// Parsing and admission run on blocking threads, this many at once: a slow body
    /// never holds an async worker, and a burst of them waits here.
    admission: Arc<tokio::sync::Semaphore>,
    /// Failed authentications per client address (`--failed-auth-burst`, `-per-sec`).
    failed_auths: Mutex<FailedAuths>,
    /// The memory submissions may hold at once (KiB permits, `--memory-budget-mib`): each
    /// reserves its share before its body is read ([`limits::reservation_kib`]).
    memory: Arc<tokio::sync::Semaphore>,
    memory_kib: u32,
    /// This replica's name in the admission locks it holds on the hub, and where they
    /// are (its own namespace, `--lock-namespace`).
    identity: String,
    lock_namespace: String,
    /// Authenticated requests per principal (`--principal-burst`, `-per-sec`).
    principal_requests: Mutex<PrincipalRequests>,
    /// Proxies whose `X-Forwarded-For` names the client (`--trusted-proxies`).
    trusted_proxies: Vec<limits::Cidr>,
}

/// Submissions parsed and admitted at once, by default.
pub const DEFAULT_ADMISSION_CONCURRENCY: usize = 4;

const REVIEW_TTL: Duration = Duration::from_secs(60);
const REFUSED_TTL: Duration = Duration::from_secs(30);
/// Most tokens remembered per cache (reviewed, refused): beyond it, expired entries go,
/// and if none has expired, all of them (a flood of distinct tokens must not grow memory).
const TOKEN_CACHE_MAX: usize = 10_000;

fn remember<V>(
    map: &mut HashMap<[u8; 32], V>,
    key: [u8; 32],
    value: V,
    fresh: impl Fn(&V) -> bool,
) {
    if map.len() >= TOKEN_CACHE_MAX {
        map.retain(|_, v| fresh(v));
        if map.len() >= TOKEN_CACHE_MAX {
            map.clear();
        }
    }
    map.insert(key, value);
}

/// The audit record of one decision; logged once, on target `audit`.
#[derive(Default)]
pub(crate) struct Audit {
    user: String,
    team: String,
    action: &'static str,
    object: String,
}

impl Audit {
    pub(crate) fn new(action: &'static str) -> Audit {
        Audit {
            user: "-".into(),
            team: "-".into(),
            action,
            object: "-".into(),
        }
    }
    fn log(&self, outcome: &str, reason: &str) {
        tracing::info!(
            target: "audit",
            user = %self.user,
            team = %self.team,
            action = self.action,
            object = %self.object,
            outcome,
            reason,
            "decision"
        );
    }
}

fn reply(result: Result<(StatusCode, Value), Rejection>) -> Response {
    match result {
        Ok((code, v)) => (code, axum::Json(v)).into_response(),
        Err(r) => error_response(&r),
    }
}

fn error_response(r: &Rejection) -> Response {
    let code = StatusCode::from_u16(r.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (code, axum::Json(r.reply())).into_response();
    if code == StatusCode::UNAUTHORIZED {
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, "Bearer".parse().expect("static"));
    }
    if let Some(secs) = r.retry_after_secs()
        && let Ok(v) = header::HeaderValue::from_str(&secs.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

impl Jss {
    pub fn new(
        auth: AuthConfig,
        token_review: bool,
        store: ArtifactStore,
        hub: Hub,
        metrics: JssMetrics,
        body_limit: usize,
        timeout: Duration,
    ) -> Jss {
        Jss {
            auth,
            token_review,
            store,
            hub,
            metrics,
            body_limit,
            timeout,
            ns_locks: Mutex::default(),
            reviewed: Mutex::default(),
            refused: Mutex::default(),
            token_audience: None,
            admission: Arc::new(tokio::sync::Semaphore::new(DEFAULT_ADMISSION_CONCURRENCY)),
            failed_auths: Mutex::new(FailedAuths::new(
                limits::DEFAULT_FAILED_AUTH_BURST,
                limits::DEFAULT_FAILED_AUTH_PER_SEC,
            )),
            memory: Arc::new(tokio::sync::Semaphore::new(
                limits::DEFAULT_MEMORY_BUDGET_MIB as usize * 1024,
            )),
            memory_kib: limits::DEFAULT_MEMORY_BUDGET_MIB * 1024,
            identity: crate::controller::leader::default_identity(),
            lock_namespace: "pinfed-system".into(),
            principal_requests: Mutex::new(PrincipalRequests::new(
                limits::DEFAULT_PRINCIPAL_BURST,
                limits::DEFAULT_PRINCIPAL_PER_SEC,
            )),
            trusted_proxies: Vec::new(),
        }
    }

    /// Proxies whose `X-Forwarded-For` says which client a request is from (for the
    /// per-client limits); any other peer is the client itself, whatever it writes.
    pub fn with_trusted_proxies(mut self, proxies: Vec<limits::Cidr>) -> Jss {
        self.trusted_proxies = proxies;
        self
    }

    /// How many failed authentications a client address may make in a burst, and per
    /// second after it.
    pub fn with_failed_auth_limit(mut self, burst: u32, per_sec: f64) -> Jss {
        self.failed_auths = Mutex::new(FailedAuths::new(burst, per_sec));
        self
    }

    /// Where the admission locks across replicas live (the JSS's own namespace).
    pub fn with_lock_namespace(mut self, ns: String) -> Jss {
        self.lock_namespace = ns;
        self
    }

    /// How much memory (MiB) submissions may hold at once while read, parsed and
    /// admitted.
    pub fn with_memory_budget(mut self, mib: u32) -> Jss {
        let kib = mib.max(1).saturating_mul(1024);
        self.memory = Arc::new(tokio::sync::Semaphore::new(kib as usize));
        self.memory_kib = kib;
        self
    }

    /// Reserves a submission's share of the memory budget before its body is read,
    /// waiting at most half the request timeout; then 503 Busy (with Retry-After).
    async fn reserve_memory(
        &self,
        headers: &HeaderMap,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, Rejection> {
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let kib = limits::reservation_kib(declared, self.body_limit, self.memory_kib);
        let sem = self.memory.clone();
        if let Ok(p) = sem.clone().try_acquire_many_owned(kib) {
            return Ok(p);
        }
        self.metrics.memory_waits.inc();
        match tokio::time::timeout(self.timeout / 2, sem.acquire_many_owned(kib)).await {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(e)) => Err(Rejection::Internal(e.to_string())),
            Err(_) => Err(Rejection::Busy(format!(
                "the JSS's memory budget for submissions ({} MiB, --memory-budget-mib) stayed spent for {} s",
                self.memory_kib / 1024,
                (self.timeout / 2).as_secs()
            ))),
        }
    }

    /// How many requests one authenticated principal may make in a burst, and per
    /// second after it.
    pub fn with_principal_limit(mut self, burst: u32, per_sec: f64) -> Jss {
        self.principal_requests = Mutex::new(PrincipalRequests::new(burst, per_sec));
        self
    }

    /// Charges one request to `who`: `TooManyRequests` once the principal used up its
    /// budget, whatever address it comes from (counted in the metrics).
    pub(super) fn charge_principal(&self, who: &Principal) -> Result<(), Rejection> {
        let taken = self
            .principal_requests
            .lock()
            .expect("lock")
            .take(&who.user, Instant::now());
        taken.map_err(|wait| {
            self.metrics.principal_limited.inc();
            Rejection::TooManyRequests {
                principal: who.user.clone(),
                retry_after_secs: wait.as_secs() + 1,
            }
        })
    }

    /// Whether `headers` carry a token already known good (the token file, or a
    /// TokenReview answer still cached): such a caller is never held back by its address.
    fn known_good(&self, headers: &HeaderMap) -> bool {
        let Ok(token) = auth::bearer(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()))
        else {
            return false;
        };
        if auth::authenticate(&self.auth, token).is_ok() {
            return true;
        }
        self.reviewed
            .lock()
            .expect("lock")
            .get(&auth::digest(token))
            .is_some_and(|(_, at)| at.elapsed() < REVIEW_TTL)
    }

    /// The audience TokenReview asks for and a reviewed token must carry.
    pub fn with_token_audience(mut self, audience: Option<String>) -> Jss {
        self.token_audience = audience.filter(|a| !a.is_empty());
        self
    }

    /// How many submissions are parsed and admitted at once (at least one).
    pub fn with_admission_concurrency(mut self, n: usize) -> Jss {
        self.admission = Arc::new(tokio::sync::Semaphore::new(n.max(1)));
        self
    }

    /// The caller of a request (also the UI's login, with the token it was given).
    pub(super) async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, Rejection> {
        let token = auth::bearer(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()))?;
        let who = match auth::authenticate(&self.auth, token) {
            Ok(p) => p,
            Err(AuthError::Unknown) if self.token_review => self.review(token).await?,
            Err(e) => return Err(e.into()),
        };
        self.charge_principal(&who)?;
        Ok(who)
    }

    /// Whether the token is one of the token file's (not one TokenReview vouches for).
    pub(super) fn in_token_file(&self, token: &str) -> bool {
        auth::authenticate(&self.auth, token).is_ok()
    }

    /// Asks TokenReview again, past the remembered answers: the UI's sessions of reviewed
    /// tokens end when the hub stops vouching for their token.
    pub(super) async fn review_again(&self, token: &str) -> Result<Principal, Rejection> {
        self.review_with(token, true).await
    }

    /// Asks the hub's TokenReview API who the token belongs to.
    async fn review(&self, token: &str) -> Result<Principal, Rejection> {
        self.review_with(token, false).await
    }

    async fn review_with(&self, token: &str, again: bool) -> Result<Principal, Rejection> {
        use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
        let digest = auth::digest(token);
        if !again
            && let Some((p, at)) = self.reviewed.lock().expect("lock").get(&digest)
            && at.elapsed() < REVIEW_TTL
        {
            return Ok(p.clone());
        }
        if !again
            && let Some(at) = self.refused.lock().expect("lock").get(&digest)
            && at.elapsed() < REFUSED_TTL
        {
            return Err(AuthError::Unknown.into());
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: self.token_audience.clone().map(|a| vec![a]),
            },
            ..Default::default()
        };
        let reviews = kube::Api::<TokenReview>::all(self.hub.client.clone());
        let params = kube::api::PostParams::default();
        let out = crate::controller::retry::repeatable(|| reviews.create(&params, &review))
            .await
            .map_err(|e| Rejection::Hub(format!("TokenReview: {e}")))?;
        let status = out.status.unwrap_or_default();
        let audience_ok = self.token_audience.as_ref().is_none_or(|a| {
            status
                .audiences
                .as_ref()
                .is_some_and(|auds| auds.iter().any(|x| x == a))
        });
        if status.authenticated != Some(true) || !audience_ok {
            remember(
                &mut self.refused.lock().expect("lock"),
                digest,
                Instant::now(),
                |at| at.elapsed() < REFUSED_TTL,
            );
            return Err(AuthError::Unknown.into());
        }
        let user = status.user.unwrap_or_default();
        let name = user.username.unwrap_or_default();
        let groups = user.groups.unwrap_or_default();
        let p = Principal {
            teams: self.auth.teams_of_reviewed(&name, &groups),
            user: name,
        };
        remember(
            &mut self.reviewed.lock().expect("lock"),
            digest,
            (p.clone(), Instant::now()),
            |(_, at)| at.elapsed() < REVIEW_TTL,
        );
        Ok(p)
    }

    async fn read_body(&self, headers: &HeaderMap, body: Body) -> Result<Vec<u8>, Rejection> {
        let too_large = Rejection::TooLarge {
            limit: self.body_limit,
        };
        if let Some(len) = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            && len > self.body_limit as u64
        {
            return Err(too_large);
        }
        match axum::body::to_bytes(body, self.body_limit).await {
            Ok(b) => Ok(b.to_vec()),
            Err(e) => {
                let inner = e.into_inner();
                if inner.is::<http_body_util::LengthLimitError>()
                    || inner
                        .source()
                        .is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
                {
                    Err(too_large)
                } else {
                    Err(Rejection::BadRequest(format!("reading the body: {inner}")))
                }
            }
        }
    }

    fn ns_lock(&self, ns: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.ns_locks
            .lock()
            .expect("lock")
            .entry(ns.to_string())
            .or_default()
            .clone()
    }

    /// `POST /v1/submissions`; with `dry_run`, every check of a submission and the
    /// answer of [`Self::dry_run`] instead of the apply.
    async fn submit(
        &self,
        headers: &HeaderMap,
        q: &SubmitQuery,
        dry_run: bool,
        body: Body,
        audit: &mut Audit,
    ) -> Result<(StatusCode, Value), Rejection> {
        let who = self.authenticate(headers).await?;
        audit.user = who.user.clone();
        // Held until the submission is answered: its bytes, parse and admission.
        let _memory = self.reserve_memory(headers).await?;
        let bytes = self.read_body(headers, body).await?;
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        let sub = parse_submission(content_type, &bytes, q.namespace.as_deref())?;
        let (text, artifact) = match sub.source {
            Source::Inline(text) => {
                audit.object = "inline".into();
                may_submit_inline(&self.auth, &who)?;
                (text, None)
            }
            Source::Artifact(r) => {
                audit.object = format!("artifact {r}");
                let store = self.store.clone();
                let a = tokio::task::spawn_blocking(move || store.read(&r))
                    .await
                    .map_err(|e| Rejection::Internal(e.to_string()))??;
                (a.text.clone(), Some(a))
            }
        };
        let origin = match &artifact {
            Some(a) => Owned::Artifact(a.clone()),
            None => Owned::Inline,
        };
        let admitted = self
            .admit_blocking(&who, text, sub.namespace.clone(), origin)
            .await?;
        audit.team = admitted.team.clone();
        audit.object = format!(
            "{}/{}/{}{}",
            admitted.kind.as_str(),
            admitted.namespace,
            admitted.name,
            artifact
                .as_ref()
                .map(|a| format!(" (artifact {})", a.reference))
                .unwrap_or_default()
        );
        if dry_run {
            let artifact = artifact.as_ref().map(|a| a.reference.to_string());
            return self.dry_run(&who, &admitted, artifact).await;
        }
        let written = self.write_admitted(&who, &admitted).await?;
        let priority = crate::placement::priority::resolve(
            admitted.workload.as_ref().priority_class_name(),
            &self.hub.priority_classes(),
        )
        .ok();
        let forecast = self.forecast(&admitted, priority.as_ref()).await;
        let code = if written.existed {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        let reply = wire::Submitted {
            kind: admitted.kind,
            namespace: admitted.namespace.clone(),
            name: admitted.name.clone(),
            uid: written.applied.metadata.uid.clone(),
            generation: written.applied.metadata.generation,
            team: admitted.team.clone(),
            submitted_by: who.user.clone(),
            artifact: artifact.as_ref().map(|a| a.reference.to_string()),
            sha256: artifact.as_ref().map(|a| a.sha256.clone()),
            requested: (&written.want).into(),
            created: !written.existed,
            priority: priority.as_ref().and_then(|p| {
                Some(wire::SubmittedPriority {
                    class: p.class.clone()?,
                    value: p.value,
                    preempts: p.preempts,
                })
            }),
            forecast: Some(forecast),
            trace_id: crate::controller::trace::trace_id(&tracing::Span::current()),
        };
        Ok((code, to_body(&reply)?))
    }

    /// Where the submission fits now on the members as their status shows them (room
    /// spread evenly over each member's nodes, as the dry run reads it), or what it would
    /// wait for and whether it may preempt: the submitter hears at once what the hub is
    /// likely to do.
    async fn forecast(
        &self,
        admitted: &Admitted,
        priority: Option<&crate::placement::priority::Priority>,
    ) -> String {
        let members: Vec<_> = self.hub.members().iter().map(|m| (**m).clone()).collect();
        let views = super::dry_run::member_views(&members, &Default::default());
        let policy = crate::placement::from_workload::policy_for(admitted.workload.as_ref());
        let out = crate::placement::plan(&crate::placement::PlanInput {
            clusters: &views,
            policy: &policy,
            demand: &admitted.demand,
            quota: None,
            current: None,
        });
        if out.decision.unplaced == 0 {
            let parts: Vec<String> = out
                .decision
                .placements
                .iter()
                .map(|p| format!("{} {}", p.cluster, super::dry_run::share_text(Some(p))))
                .collect();
            return format!("fits now: {}", parts.join(" · "));
        }
        let may = if priority.is_some_and(|p| p.preempts) {
            " (its class may preempt lower-priority work)"
        } else {
            ""
        };
        // Where it would stand among those waiting now (best effort: without the list,
        // the forecast says what it waits for only).
        let standing = match self.hub.list_workloads(None, None).await {
            Ok(all) => {
                let waiting: Vec<wire::QueueEntry> = all
                    .iter()
                    .filter(|(k, o)| {
                        !(*k == admitted.kind
                            && o.namespace().as_deref() == Some(admitted.namespace.as_str())
                            && o.name_any() == admitted.name)
                    })
                    .filter_map(|(k, o)| views::queue_entry(*k, o))
                    .collect();
                let (position, of) =
                    views::position_on_arrival(&waiting, priority.map_or(0, |p| p.value));
                format!("; about position {position} of {of} in the queue")
            }
            Err(_) => String::new(),
        };
        format!(
            "would wait for room: {}{may}{standing}; see `pinfed queue`",
            out.decision.reason.unwrap_or_default()
        )
    }

    /// A dry run: the submission's checks ([`Self::check_admitted`]: authorization,
    /// overrides and their privileges, quota), then what the hub would decide on the
    /// members as their status shows them, each member's objects, and for an existing
    /// workload the moves and a diff per member ([`super::dry_run`]). Nothing is written.
    async fn dry_run(
        &self,
        who: &Principal,
        admitted: &Admitted,
        artifact: Option<String>,
    ) -> Result<(StatusCode, Value), Rejection> {
        let reply = self.dry_run_reply(who, admitted, artifact).await?;
        Ok((StatusCode::OK, to_body(&reply)?))
    }

    /// An inline resource admitted as `who` submits it (the UI's dry run: the same
    /// rules as `POST /v1/submissions` with the resource in the body).
    pub(super) async fn admit_inline(
        &self,
        who: &Principal,
        text: String,
        namespace: Option<String>,
    ) -> Result<Admitted, Rejection> {
        may_submit_inline(&self.auth, who)?;
        self.admit_blocking(who, text, namespace, Owned::Inline)
            .await
    }

    /// [`Self::dry_run`]'s answer, typed (the UI renders it).
    pub(super) async fn dry_run_reply(
        &self,
        who: &Principal,
        admitted: &Admitted,
        artifact: Option<String>,
    ) -> Result<wire::DryRun, Rejection> {
        let Checked {
            locks,
            existing,
            want,
            demand,
            policy,
            quotas,
            used,
        } = self.check_admitted(who, admitted, false).await?;
        // Nothing is written: the namespace's lock can go now.
        drop(locks);
        let members: Vec<crate::api::federation::MemberCluster> =
            self.hub.members().iter().map(|m| (**m).clone()).collect();
        let profiles = self.hub.profiles();
        let previous = existing
            .as_ref()
            .and_then(|o| crate::api::workload::AnyWorkload::from_dynamic(admitted.kind, o));
        let current = existing
            .as_ref()
            .and_then(|o| crate::status::hub_status::stored_decision(&o.data["status"]))
            .map(|d| crate::placement::recorded::from_status(&d));
        let (workload, team, user) = (
            admitted.workload.clone(),
            admitted.team.clone(),
            who.user.clone(),
        );
        self.plan_blocking("dry run", move || {
            super::dry_run::build(&super::dry_run::Input {
                workload: &workload,
                team: &team,
                submitted_by: &user,
                artifact,
                profiles: &profiles,
                members: &members,
                demand: &demand,
                policy: &policy,
                requested: &want,
                quotas: &quotas,
                used: used.as_ref(),
                existing: previous.as_ref(),
                current: current.as_ref(),
                from_scratch: false,
            })
        })
        .await
    }

    /// Runs a placement answer (the dry run's engine) on a blocking thread, at most
    /// `--admission-concurrency` at once, as admissions do.
    async fn plan_blocking(
        &self,
        what: &str,
        plan: impl FnOnce() -> wire::DryRun + Send + 'static,
    ) -> Result<wire::DryRun, Rejection> {
        let _permit = self.admission_permit().await?;
        tokio::task::spawn_blocking(plan)
            .await
            .map_err(|e| Rejection::Internal(format!("{what}: {e}")))
    }

    /// One of the `--admission-concurrency` slots for blocking work (parsing, planning).
    async fn admission_permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, Rejection> {
        self.admission
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| Rejection::Internal(e.to_string()))
    }

    /// Parses and admits `text` on a blocking thread, at most `--admission-concurrency`
    /// at once.
    async fn admit_blocking(
        &self,
        who: &Principal,
        text: String,
        namespace: Option<String>,
        origin: Owned,
    ) -> Result<Admitted, Rejection> {
        let profiles = self.hub.profiles();
        let _permit = self.admission_permit().await?;
        let (auth, who) = (self.auth.clone(), who.clone());
        tokio::task::spawn_blocking(move || {
            let origin = match &origin {
                Owned::Artifact(a) => Origin::Artifact(a),
                Owned::Inline => Origin::Inline,
                Owned::Revision(r) => Origin::Revision(*r),
            };
            admit_from(&auth, &who, &text, namespace.as_deref(), origin, &profiles)
        })
        .await
        .map_err(|e| Rejection::Internal(format!("admission: {e}")))?
    }

    /// What every write of a whole workload goes through once admitted (a submission, an
    /// undo): under the namespace's lock, the caller's right to change the workload it
    /// replaces, quota with what it costs ([`Self::check_admitted`]), then the server-side
    /// apply.
    async fn write_admitted(
        &self,
        who: &Principal,
        admitted: &Admitted,
    ) -> Result<Written, Rejection> {
        let mut checked = self.check_admitted(who, admitted, true).await?;
        let applied = self.hub.apply(admitted).await;
        // The lock across replicas goes before this replica's own: the next admission
        // here must not find it still held and back off.
        if let Some(lock) = checked.locks.1.take() {
            lock.release().await;
        }
        let applied = applied?;
        Ok(Written {
            applied,
            existed: checked.existing.is_some(),
            want: checked.want,
        })
    }

    /// Every check of a write before the apply (a submission and its dry run share them):
    /// rollout stages naming members the federation has, overrides against the members
    /// and the privileges they add, then under the namespace's lock (held by the result)
    /// the caller's right to change the workload it replaces and quota with what it costs.
    async fn check_admitted(
        &self,
        who: &Principal,
        admitted: &Admitted,
        write: bool,
    ) -> Result<Checked, Rejection> {
        // Rollout stages naming members the federation does not have.
        if let Some(policy) = admitted.workload.as_ref().rollout() {
            let known = self
                .hub
                .members()
                .iter()
                .map(|m| kube::ResourceExt::name_any(m.as_ref()))
                .collect();
            let unknown = crate::api::rollout::unknown_members(policy, &known);
            if !unknown.is_empty() {
                return Err(Rejection::invalid(
                    "the rollout names members the federation does not have",
                    unknown
                        .into_iter()
                        .map(|(f, m)| super::error::Detail::field(f, m))
                        .collect(),
                ));
            }
        }
        // A priority class the hub has (422 naming the field) and the team may use (403).
        if let Some(class) = admitted.workload.as_ref().priority_class_name() {
            crate::placement::priority::resolve(Some(class), &self.hub.priority_classes())
                .map_err(|e| {
                    Rejection::invalid(
                        "the priority class does not exist",
                        vec![super::error::Detail::field(
                            "spec.priorityClassName",
                            e.trim_start_matches("spec.priorityClassName: "),
                        )],
                    )
                })?;
            super::auth::authorize_priority_class(&self.auth, &admitted.team, class)?;
        }
        // An ingress host the team may claim (403) and no other workload holds (409).
        if let Some(host) = crate::api::ingress_host::explicit_host(admitted.workload.as_ref()) {
            super::auth::authorize_host(&self.auth, &admitted.team, host)?;
            if let Some(holder) = self.hub.host_holder(host, admitted).await? {
                return Err(Rejection::HostHeld {
                    host: host.to_string(),
                    holder,
                });
            }
        }
        let local = self.ns_lock(&admitted.namespace).lock_owned().await;
        // With a quota, one read of the namespace gives both the usage and the workload
        // this submission replaces; without, only the latter is needed.
        // What it costs, as the hub's engine would place it on the members as they are.
        let clusters = self.hub.quota_clusters();
        let mut policy = crate::placement::from_workload::policy_for(admitted.workload.as_ref());
        // Overrides: checked against the members there are, each member's pod and
        // bounds as the hub will count them, and no privilege the team lacks.
        let mut demand = admitted.demand.clone();
        if !admitted.workload.as_ref().overrides().is_empty() {
            let profiles = self.hub.profiles();
            let profile = crate::expand::select_profile(
                &profiles,
                admitted.workload.as_ref().runtime_version(),
            )
            .ok();
            crate::placement::from_workload::apply_overrides(
                &admitted.workload,
                profile,
                &clusters,
                &mut demand,
                &mut policy,
            )?;
            let added =
                super::admission::override_privileges(&admitted.workload, profile, &clusters);
            super::auth::authorize_privileges(&self.auth, &admitted.team, &added)?;
        }
        let want = requested(&demand, whole_pods(&clusters, &policy, &demand));
        let quotas = self.hub.quotas_in(&admitted.namespace);
        // With a quota, the namespace's admissions go one at a time across every replica
        // too (a Lease the hub's API server arbitrates): two replicas must not both find
        // the last room free. (A dry run writes nothing and takes only this process's.)
        let across = if write && !quotas.is_empty() {
            Some(
                self.hub
                    .lock_namespace(
                        &admitted.namespace,
                        (&self.lock_namespace, &self.identity),
                        self.timeout / 2,
                    )
                    .await?,
            )
        } else {
            None
        };
        let held = (local, across);
        let (used, existing) = if quotas.is_empty() {
            let existing = self
                .hub
                .get_workload(admitted.kind, &admitted.namespace, &admitted.name)
                .await?;
            (None, existing)
        } else {
            let (used, existing) = self
                .hub
                .namespace_usage_except(&admitted.namespace, Some((admitted.kind, &admitted.name)))
                .await?;
            (Some(used), existing)
        };
        if let Some(o) = &existing {
            let team = o.data["spec"]["owner"]["team"].as_str().unwrap_or_default();
            authorize_change_of_existing(&self.auth, who, team, &admitted.namespace)?;
        }
        if let Some(used) = &used {
            check_all(&quotas, used, &want).map_err(Rejection::QuotaExceeded)?;
            // Per-cluster caps too: what the hub would hold back for quota is refused now.
            check_placeable(&quotas, used, &clusters, &policy, &demand)
                .map_err(Rejection::QuotaExceeded)?;
        }
        Ok(Checked {
            locks: held,
            existing,
            want,
            demand,
            policy,
            quotas,
            used,
        })
    }

    async fn list(
        &self,
        headers: &HeaderMap,
        namespace: Option<&str>,
        kind: Option<&str>,
        page: &ListQuery,
    ) -> Result<(StatusCode, Value), Rejection> {
        let who = self.authenticate(headers).await?;
        let kind = kind.map(parse_kind_or_404).transpose()?;
        if let Some(ns) = namespace {
            authorize_namespace(&self.auth, &who, ns)?;
        }
        let cursor = page
            .next
            .as_deref()
            .filter(|t| !t.is_empty())
            .map(super::paging::Cursor::parse)
            .transpose()
            .map_err(Rejection::BadRequest)?;
        let (listed, next) = match (page.limit, cursor) {
            (None, None) => (self.hub.list_workloads(namespace, kind).await?, None),
            (limit, cursor) => {
                // (A continue token alone keeps the default page size.)
                let limit = super::paging::check_limit(limit.unwrap_or(500))
                    .map_err(Rejection::BadRequest)?;
                self.hub
                    .list_workloads_page(namespace, kind, limit, cursor.as_ref())
                    .await?
            }
        };
        // (A page may hold fewer items than its limit: the namespaces the caller may not
        // see are left out after the hub's page is cut.)
        let items: Vec<wire::WorkloadView> = listed
            .iter()
            .filter(|(_, o)| {
                may_use_namespace(&self.auth, &who, &o.namespace().unwrap_or_default())
            })
            .map(|(k, o)| views::workload(*k, o, &self.hub.requested_by(*k, o)))
            .collect();
        Ok((
            StatusCode::OK,
            to_body(&wire::Page {
                items,
                next: next.map(|c| c.token()),
            })?,
        ))
    }

    async fn get_one(
        &self,
        headers: &HeaderMap,
        ns: &str,
        kind: &str,
        name: &str,
    ) -> Result<(StatusCode, Value), Rejection> {
        let who = self.authenticate(headers).await?;
        let kind = parse_kind_or_404(kind)?;
        authorize_namespace(&self.auth, &who, ns)?;
        let o = self
            .hub
            .get_workload(kind, ns, name)
            .await?
            .ok_or_else(|| {
                Rejection::NotFound(format!("{} {ns}/{name} not found", kind.as_str()))
            })?;
        let r = self.hub.requested_by(kind, &o);
        Ok((StatusCode::OK, to_body(&views::workload(kind, &o, &r))?))
    }

    async fn delete(
        &self,
        headers: &HeaderMap,
        ns: &str,
        kind: &str,
        name: &str,
        audit: &mut Audit,
    ) -> Result<(StatusCode, Value), Rejection> {
        let who = self.authenticate(headers).await?;
        audit.user = who.user.clone();
        audit.object = format!("{kind}/{ns}/{name}");
        let kind = parse_kind_or_404(kind)?;
        audit.object = format!("{}/{ns}/{name}", kind.as_str());
        authorize_namespace(&self.auth, &who, ns)?;
        let o = self
            .hub
            .get_workload(kind, ns, name)
            .await?
            .ok_or_else(|| {
                Rejection::NotFound(format!("{} {ns}/{name} not found", kind.as_str()))
            })?;
        let team = o.data["spec"]["owner"]["team"].as_str().unwrap_or_default();
        audit.team = team.to_string();
        authorize_change_of_existing(&self.auth, &who, team, ns)?;
        self.hub.delete(kind, ns, name).await?;
        let deleted = wire::Deleted {
            deleted: wire::ObjectName {
                kind,
                namespace: ns.to_string(),
                name: name.to_string(),
            },
        };
        Ok((StatusCode::OK, to_body(&deleted)?))
    }

    /// A workload of the hub, or 404 naming it.
    async fn workload_or_404(
        &self,
        kind: WorkloadKind,
        ns: &str,
        name: &str,
    ) -> Result<DynamicObject, Rejection> {
        self.hub
            .get_workload(kind, ns, name)
            .await?
            .ok_or_else(|| Rejection::NotFound(format!("{} {ns}/{name} not found", kind.as_str())))
    }

    /// `GET .../rollout`: where the workload's change stands, and its recorded revisions
    /// (read rights, as `get`).
    async fn rollout_view(
        &self,
        headers: &HeaderMap,
        ns: &str,
        kind: &str,
        name: &str,
    ) -> Result<(StatusCode, Value), Rejection> {
        let who = self.authenticate(headers).await?;
        let kind = parse_kind_or_404(kind)?;
        authorize_namespace(&self.auth, &who, ns)?;
        let o = self.workload_or_404(kind, ns, name).await?;
        let revisions = self.hub.revisions(ns, &o.uid().unwrap_or_default()).await?;
        Ok((
            StatusCode::OK,
            to_body(&rollout::view(kind, &o, &revisions))?,
        ))
    }

    /// `POST .../rollout/{action}`: a person's approve, pause, resume or undo, with the
    /// rights of a delete (the namespace, and the team owning the workload).
    #[allow(clippy::too_many_arguments)]
    async fn rollout_action(
        &self,
        headers: &HeaderMap,
        ns: &str,
        kind: &str,
        name: &str,
        action: &str,
        body: Body,
        audit: &mut Audit,
    ) -> Result<(StatusCode, Value), Rejection> {
        let who = self.authenticate(headers).await?;
        audit.user = who.user.clone();
        audit.object = format!("{kind}/{ns}/{name}");
        let action = RolloutAction::parse(action).ok_or_else(|| {
            Rejection::NotFound(format!(
                "no rollout action {action:?} (approve, pause, resume, undo)"
            ))
        })?;
        audit.action = audit_action(action);
        let kind = parse_kind_or_404(kind)?;
        let bytes = self.read_body(headers, body).await?;
        let req = rollout::parse_request(action, &bytes)?;
        let w = wire::ObjectName {
            kind,
            namespace: ns.to_string(),
            name: name.to_string(),
        };
        let reply = self
            .rollout_action_as(&who, &w, action, &req, None, audit)
            .await?;
        Ok((StatusCode::OK, to_body(&reply)?))
    }

    /// The workload `kind ns/name`, read live, once `who` may change it with the rights of
    /// a delete: the namespace, and the team owning it (or an admin team). The audit line
    /// names the object and its team.
    async fn workload_for_change(
        &self,
        who: &Principal,
        kind: WorkloadKind,
        ns: &str,
        name: &str,
        audit: &mut Audit,
    ) -> Result<DynamicObject, Rejection> {
        audit.object = format!("{}/{ns}/{name}", kind.as_str());
        authorize_namespace(&self.auth, who, ns)?;
        let o = self.workload_or_404(kind, ns, name).await?;
        let team = o.data["spec"]["owner"]["team"].as_str().unwrap_or_default();
        audit.team = team.to_string();
        authorize_change_of_existing(&self.auth, who, team, ns)?;
        Ok(o)
    }

    /// A rollout action asked by `who` (the API's and the UI's): the rights of a delete
    /// (the namespace, and the team owning the workload, read live), then the action.
    /// `seen`: the revision the asker's page showed; an approval of another is refused.
    pub(crate) async fn rollout_action_as(
        &self,
        who: &Principal,
        w: &wire::ObjectName,
        action: RolloutAction,
        req: &wire::RolloutActionRequest,
        seen: Option<i64>,
        audit: &mut Audit,
    ) -> Result<wire::RolloutActionReply, Rejection> {
        let (kind, ns, name) = (w.kind, w.namespace.as_str(), w.name.as_str());
        let o = self.workload_for_change(who, kind, ns, name, audit).await?;
        let status = rollout::status_of(&o);
        let done = |changed: bool, message: String| wire::RolloutActionReply {
            workload: w.clone(),
            action,
            revision: None,
            stage: None,
            stage_name: None,
            changed,
            message,
        };
        Ok(match action {
            RolloutAction::Approve => {
                rollout::check_seen(w, status.as_ref(), seen)?;
                let (stage, stage_name) =
                    rollout::approval_stage(w, status.as_ref(), req.stage.as_deref())?;
                let revision = status.as_ref().map(|s| s.revision).unwrap_or_default();
                let value = format!("{revision}/{stage}");
                audit.object = format!("{} (revision {revision} stage {stage_name})", audit.object);
                self.hub
                    .annotate(kind, ns, name, &[(ANNOTATION_APPROVED, Some(&value))])
                    .await?;
                wire::RolloutActionReply {
                    revision: Some(revision),
                    stage: Some(stage),
                    stage_name: Some(stage_name.clone()),
                    ..done(
                        true,
                        rollout::approve_message(w, revision, stage, &stage_name),
                    )
                }
            }
            RolloutAction::Pause => {
                let was = rollout::paused(&o);
                if !was {
                    self.hub
                        .annotate(kind, ns, name, &[(ANNOTATION_PAUSED, Some("true"))])
                        .await?;
                }
                done(!was, rollout::pause_message(w, status.as_ref(), was))
            }
            RolloutAction::Resume => {
                let was = o.annotations().contains_key(ANNOTATION_PAUSED);
                if was {
                    self.hub
                        .annotate(kind, ns, name, &[(ANNOTATION_PAUSED, None)])
                        .await?;
                }
                done(was, rollout::resume_message(w, was))
            }
            RolloutAction::Undo => {
                self.undo(who, &o, w, status.as_ref(), req.to_revision, audit)
                    .await?
            }
        })
    }

    /// `POST .../rebalance`: the workload placed again from scratch (`pinfed rebalance`),
    /// with the rights of a delete. The answer is the plan as the JSS sees the members
    /// (the moves from the current split); unless `dry_run`, the request goes to the hub
    /// as an annotation it acts on once (moves surge first, as every move).
    async fn rebalance(
        &self,
        headers: &HeaderMap,
        ns: &str,
        kind: &str,
        name: &str,
        dry_run: bool,
        audit: &mut Audit,
    ) -> Result<(StatusCode, Value), Rejection> {
        let who = self.authenticate(headers).await?;
        audit.user = who.user.clone();
        let kind = parse_kind_or_404(kind)?;
        let reply = self
            .rebalance_as(&who, kind, ns, name, dry_run, audit)
            .await?;
        Ok((StatusCode::OK, to_body(&reply)?))
    }

    /// A rebalance asked by `who` (the API's and the UI's): the rights of a delete, the
    /// plan from scratch, and unless `dry_run` the request handed to the hub.
    pub(crate) async fn rebalance_as(
        &self,
        who: &Principal,
        kind: WorkloadKind,
        ns: &str,
        name: &str,
        dry_run: bool,
        audit: &mut Audit,
    ) -> Result<wire::RebalanceReply, Rejection> {
        let o = self.workload_for_change(who, kind, ns, name, audit).await?;
        let w = wire::ObjectName {
            kind,
            namespace: ns.to_string(),
            name: name.to_string(),
        };
        let plan = self.rebalance_plan(who, kind, ns, name, &o).await?;
        let request = (!dry_run).then(|| k8s_openapi::jiff::Timestamp::now().to_string());
        if let Some(id) = &request {
            self.hub
                .annotate(kind, ns, name, &[(ANNOTATION_REBALANCE, Some(id))])
                .await?;
        }
        let what = if plan.moves.is_empty() {
            "nothing to move".to_string()
        } else {
            let moves: Vec<String> = plan
                .moves
                .iter()
                .map(|m| format!("{}: {} → {}", m.cluster, m.before, m.after))
                .collect();
            moves.join("; ")
        };
        let message = match &request {
            Some(id) => format!(
                "rebalance of {} asked (request {id}): {what}; the hub moves it at its next look, surge first",
                rollout::object_text(&w)
            ),
            None => format!(
                "rebalance of {} would move: {what} (dry run: nothing written)",
                rollout::object_text(&w)
            ),
        };
        Ok(wire::RebalanceReply {
            workload: w,
            requested: request.is_some(),
            request,
            plan,
            message,
        })
    }

    /// The plan a rebalance makes: the stored workload sized as the hub sizes it, planned
    /// from scratch on the members (the dry run's engine and answer).
    async fn rebalance_plan(
        &self,
        who: &Principal,
        kind: crate::api::workload::WorkloadKind,
        ns: &str,
        name: &str,
        o: &kube::api::DynamicObject,
    ) -> Result<wire::DryRun, Rejection> {
        let workload =
            crate::api::workload::AnyWorkload::from_dynamic(kind, o).ok_or_else(|| {
                Rejection::Internal(format!(
                    "{}/{ns}/{name} does not read as its kind",
                    kind.as_str()
                ))
            })?;
        let profiles = self.hub.profiles();
        let sizing = super::hub_view::sizing(&profiles, kind, o, || self.hub.quota_clusters())
            .ok_or_else(|| {
                Rejection::Internal(format!(
                    "{}/{ns}/{name} cannot be sized (its spec or profile does not expand)",
                    kind.as_str()
                ))
            })?;
        let requested = super::hub_view::requested_of(&sizing, o, || self.hub.quota_clusters());
        let quotas = self.hub.quotas_in(ns);
        let used = if quotas.is_empty() {
            None
        } else {
            Some(
                self.hub
                    .namespace_usage_except(ns, Some((kind, name)))
                    .await?
                    .0,
            )
        };
        let current = crate::status::hub_status::stored_decision(&o.data["status"])
            .map(|d| crate::placement::recorded::from_status(&d));
        let members: Vec<crate::api::federation::MemberCluster> =
            self.hub.members().iter().map(|m| (**m).clone()).collect();
        let (team, user) = (
            o.data["spec"]["owner"]["team"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            who.user.clone(),
        );
        self.plan_blocking("rebalance plan", move || {
            super::dry_run::build(&super::dry_run::Input {
                workload: &workload,
                team: &team,
                submitted_by: &user,
                artifact: None,
                profiles: &profiles,
                members: &members,
                demand: &sizing.demand,
                policy: &sizing.policy,
                requested: &requested,
                quotas: &quotas,
                used: used.as_ref(),
                existing: Some(&workload),
                current: current.as_ref(),
                from_scratch: true,
            })
        })
        .await
    }

    /// `undo`: the spec runs a recorded revision's content again, submitted like any
    /// workload (admission, quota, server-side apply as `pinfed-jss`); the hub rolls it
    /// out as a new revision.
    async fn undo(
        &self,
        who: &Principal,
        o: &DynamicObject,
        w: &wire::ObjectName,
        status: Option<&crate::api::rollout::RolloutStatus>,
        asked: Option<i64>,
        audit: &mut Audit,
    ) -> Result<wire::RolloutActionReply, Rejection> {
        let revisions = self
            .hub
            .revisions(&w.namespace, &o.uid().unwrap_or_default())
            .await?;
        let recorded: Vec<i64> = revisions
            .iter()
            .filter(|cr| rollout::content_of(cr).is_some())
            .map(|cr| cr.revision)
            .collect();
        let target = rollout::undo_target(w, status, &recorded, asked)?;
        audit.object = format!("{} (undo to revision {target})", audit.object);
        let content = revisions
            .iter()
            .filter(|cr| cr.revision == target)
            .find_map(rollout::content_of)
            .cloned()
            .ok_or_else(|| {
                Rejection::NotFound(format!(
                    "revision {target} of {} has no record on the hub",
                    rollout::object_text(w)
                ))
            })?;
        let text = rollout::undo_object(w.kind, o, &content).to_string();
        let admitted = self
            .admit_blocking(
                who,
                text,
                Some(w.namespace.clone()),
                Owned::Revision(target),
            )
            .await
            .map_err(|e| match e {
                Rejection::Invalid { message, details } => Rejection::Invalid {
                    message: format!(
                        "revision {target} of {} does not pass admission today: {message}",
                        rollout::object_text(w)
                    ),
                    details,
                },
                e => e,
            })?;
        let written = self.write_admitted(who, &admitted).await?;
        let left = rollout::fields_not_undone(&written.applied.data["spec"], &content);
        let mut message = format!(
            "{} runs revision {target}'s content again ({}); the hub rolls it out as a new revision",
            rollout::object_text(w),
            rollout::images(&content).join(", ")
        );
        if !left.is_empty() {
            message.push_str(&format!(
                "; other writers of the spec keep {} as they are",
                left.join(", ")
            ));
        }
        Ok(wire::RolloutActionReply {
            workload: w.clone(),
            action: RolloutAction::Undo,
            revision: Some(target),
            stage: None,
            stage_name: None,
            changed: true,
            message,
        })
    }

    async fn clusters(&self, headers: &HeaderMap) -> Result<(StatusCode, Value), Rejection> {
        self.authenticate(headers).await?;
        let items: Vec<wire::ClusterView> = self
            .hub
            .members()
            .iter()
            .map(|m| views::cluster(m))
            .collect();
        Ok((StatusCode::OK, to_body(&wire::List { items })?))
    }

    async fn quotas(&self, headers: &HeaderMap) -> Result<(StatusCode, Value), Rejection> {
        let who = self.authenticate(headers).await?;
        let mut items = Vec::new();
        for q in self.hub.all_quotas() {
            let ns = q.namespace().unwrap_or_default();
            if !may_use_namespace(&self.auth, &who, &ns) {
                continue;
            }
            let req = self.hub.namespace_usage(&ns).await?;
            items.push(views::quota(&q, Some(&req)));
        }
        Ok((StatusCode::OK, to_body(&wire::List { items })?))
    }

    async fn owners(
        &self,
        headers: &HeaderMap,
        q: &OwnersQuery,
    ) -> Result<(StatusCode, Value), Rejection> {
        let who = self.authenticate(headers).await?;
        let profiles = self.hub.profiles();
        let rows: Vec<views::OwnedWorkload> = self
            .hub
            .list_workloads(None, None)
            .await?
            .iter()
            // Other teams' workloads only for admin teams (`auth::may_see_workload`).
            .filter(|(_, o)| {
                auth::may_see_workload(
                    &self.auth,
                    &who,
                    o.data["spec"]["owner"]["team"].as_str().unwrap_or("-"),
                    &o.namespace().unwrap_or_default(),
                )
            })
            .map(|(k, o)| views::OwnedWorkload {
                team: o.data["spec"]["owner"]["team"]
                    .as_str()
                    .unwrap_or("-")
                    .to_string(),
                contact: o.data["spec"]["owner"]["contact"]
                    .as_str()
                    .unwrap_or("-")
                    .to_string(),
                kind: *k,
                namespace: o.namespace().unwrap_or_default(),
                name: o.name_any(),
                clusters: views::placed_clusters(o),
                requested: self.hub.requested_by(*k, o),
                expires_at: expires_at(&profiles, o),
            })
            .collect();
        let now = k8s_openapi::jiff::Timestamp::now();
        let report = views::owners(&rows, now, q.expired.unwrap_or(false));
        Ok((StatusCode::OK, to_body(&report)?))
    }

    /// The hub's queue (`GET /v1/queue[?namespace=&kind=]`): the waiting workloads the
    /// caller may see, by the owners report's rule, first in line first. A namespace the
    /// caller sees nothing of lists nothing (no 403: its team's workloads may be anywhere).
    async fn queue(
        &self,
        headers: &HeaderMap,
        q: &ListQuery,
    ) -> Result<(StatusCode, Value), Rejection> {
        let who = self.authenticate(headers).await?;
        let kind = q.kind.as_deref().map(parse_kind_or_404).transpose()?;
        let all = self
            .hub
            .list_workloads(q.namespace.as_deref(), kind)
            .await?;
        let items = views::queue(
            all.iter().map(|(k, o)| (*k, o)),
            q.namespace.as_deref(),
            |team, ns| auth::may_see_workload(&self.auth, &who, team, ns),
        );
        Ok((StatusCode::OK, to_body(&wire::List { items })?))
    }

    /// The artifacts the caller's teams own (`spec.owner.team`), or all for an admin team:
    /// another team's artifact names say what it runs.
    async fn artifacts(&self, headers: &HeaderMap) -> Result<(StatusCode, Value), Rejection> {
        let who = self.authenticate(headers).await?;
        let all = auth::is_admin(&self.auth, &who);
        let store = self.store.clone();
        let list = tokio::task::spawn_blocking(move || {
            store
                .list()
                .into_iter()
                .filter(|r| all || store.owner_team(r).is_some_and(|t| who.teams.contains(&t)))
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| Rejection::Internal(e.to_string()))?;
        Ok((StatusCode::OK, to_body(&wire::List { items: list })?))
    }
}

/// The origin of an admitted text, owned (admission runs on a blocking thread).
enum Owned {
    Artifact(super::artifacts::Artifact),
    Inline,
    Revision(i64),
}

/// What [`Jss::check_admitted`] computed, the namespace's lock still held.
struct Checked {
    /// The namespace's admission locks: this process's, and the one across replicas.
    locks: (
        tokio::sync::OwnedMutexGuard<()>,
        Option<super::hub_view::AdmissionLock>,
    ),
    /// The workload it replaces, as it is on the hub.
    existing: Option<DynamicObject>,
    /// What it requests.
    want: crate::placement::model::Resources,
    /// Its demand and policy with its overrides applied.
    demand: crate::placement::model::Demand,
    policy: crate::placement::model::PlacementPolicy,
    /// The namespace's quotas, and what its other workloads use (read only with quotas).
    quotas: Vec<crate::api::federation::FederatedQuota>,
    used: Option<crate::placement::model::Resources>,
}

/// What [`Jss::write_admitted`] wrote.
struct Written {
    applied: DynamicObject,
    /// The workload existed before (an update, not a creation).
    existed: bool,
    /// What it requests.
    want: crate::placement::model::Resources,
}

/// The audit log's action of a rollout action.
fn audit_action(a: RolloutAction) -> &'static str {
    match a {
        RolloutAction::Approve => "rollout-approve",
        RolloutAction::Pause => "rollout-pause",
        RolloutAction::Resume => "rollout-resume",
        RolloutAction::Undo => "rollout-undo",
    }
}

/// A reply type as the JSON body.
fn to_body<T: serde::Serialize>(reply: &T) -> Result<Value, Rejection> {
    serde_json::to_value(reply).map_err(|e| Rejection::Internal(e.to_string()))
}

fn parse_kind_or_404(kind: &str) -> Result<crate::api::workload::WorkloadKind, Rejection> {
    parse_kind(kind).ok_or_else(|| {
        Rejection::NotFound(format!(
            "unknown kind {kind:?} (service, jobset, cronjob, daemon, trainingjob, statefulset)"
        ))
    })
}

#[derive(Debug, Default, Deserialize)]
pub struct SubmitQuery {
    pub namespace: Option<String>,
    /// `true`: answer what the submission would do, write nothing.
    #[serde(rename = "dryRun")]
    pub dry_run: Option<String>,
}

impl SubmitQuery {
    /// `dryRun` as a flag (absent, empty or `false`: a submission), else 400 naming it.
    pub fn dry_run(&self) -> Result<bool, Rejection> {
        match self.dry_run.as_deref() {
            None | Some("" | "false") => Ok(false),
            Some("true") => Ok(true),
            Some(other) => Err(Rejection::BadRequest(format!(
                "dryRun: must be true or false, not {other:?}"
            ))),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct OwnersQuery {
    /// Only the workloads past their expiry.
    pub expired: Option<bool>,
}

/// When a hub workload expires, by its annotation or its profile's `expiryDays`; `None`
/// when unknown (no rule applies, or the annotation does not parse: the hub's expansion
/// reports that on the workload).
pub(crate) fn expires_at(
    profiles: &[crate::api::runtime_profile::RuntimeProfile],
    o: &kube::api::DynamicObject,
) -> Option<k8s_openapi::jiff::Timestamp> {
    let days = crate::expand::select_profile(profiles, o.data["spec"]["runtimeVersion"].as_str())
        .ok()
        .and_then(|p| p.spec.expiry_days);
    crate::expand::expires_at(&o.metadata, days).ok().flatten()
}

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    pub namespace: Option<String>,
    pub kind: Option<String>,
    /// At most this many items; the reply's `continue` asks for the next page.
    pub limit: Option<u32>,
    #[serde(rename = "continue")]
    pub next: Option<String>,
}

type Shared = State<Arc<Jss>>;

async fn submit_handler(
    State(s): Shared,
    headers: HeaderMap,
    Query(q): Query<SubmitQuery>,
    body: Body,
) -> Response {
    let started = Instant::now();
    let dry_run = q.dry_run();
    let is_dry = dry_run.as_ref().is_ok_and(|d| *d);
    let mut audit = Audit::new(if is_dry { "submit-dry-run" } else { "submit" });
    // One trace from here to the members' pods (`controller::trace`); a caller's own
    // trace context (`traceparent`) is its parent.
    let span = tracing::trace_span!(target: "pinfed::trace", "jss.submit", dry_run = is_dry, user = tracing::field::Empty, workload = tracing::field::Empty, outcome = tracing::field::Empty);
    crate::controller::trace::follow_parent(
        &span,
        headers.get("traceparent").and_then(|v| v.to_str().ok()),
    );
    let result = match dry_run {
        Ok(dry) => {
            s.submit(&headers, &q, dry, body, &mut audit)
                .instrument(span.clone())
                .await
        }
        Err(r) => Err(r),
    };
    let outcome = match &result {
        Ok(_) if is_dry => "DryRun",
        Ok(_) => "Accepted",
        Err(r) => r.reason(),
    };
    span.record("user", audit.user.as_str());
    span.record("workload", audit.object.as_str());
    span.record("outcome", outcome);
    audit.log(
        outcome,
        &result
            .as_ref()
            .err()
            .map(ToString::to_string)
            .unwrap_or_default(),
    );
    // A dry run is no submission (its requests are in `requests_total`).
    if !is_dry {
        s.metrics
            .submissions
            .get_or_create(&OutcomeLabel {
                outcome: outcome.into(),
            })
            .inc();
        s.metrics
            .submission_seconds
            .observe(started.elapsed().as_secs_f64());
    }
    reply(result)
}

async fn list_handler(
    State(s): Shared,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
) -> Response {
    reply(
        s.list(&headers, q.namespace.as_deref(), q.kind.as_deref(), &q)
            .await,
    )
}

async fn list_ns_handler(
    State(s): Shared,
    headers: HeaderMap,
    Path(ns): Path<String>,
    Query(q): Query<ListQuery>,
) -> Response {
    reply(s.list(&headers, Some(&ns), q.kind.as_deref(), &q).await)
}

async fn list_kind_handler(
    State(s): Shared,
    headers: HeaderMap,
    Path((ns, kind)): Path<(String, String)>,
    Query(q): Query<ListQuery>,
) -> Response {
    reply(s.list(&headers, Some(&ns), Some(&kind), &q).await)
}

async fn get_handler(
    State(s): Shared,
    headers: HeaderMap,
    Path((ns, kind, name)): Path<(String, String, String)>,
) -> Response {
    reply(s.get_one(&headers, &ns, &kind, &name).await)
}

async fn rollout_handler(
    State(s): Shared,
    headers: HeaderMap,
    Path((ns, kind, name)): Path<(String, String, String)>,
) -> Response {
    reply(s.rollout_view(&headers, &ns, &kind, &name).await)
}

async fn rollout_action_handler(
    State(s): Shared,
    headers: HeaderMap,
    Path((ns, kind, name, action)): Path<(String, String, String, String)>,
    body: Body,
) -> Response {
    let mut audit = Audit::new("rollout");
    let result = s
        .rollout_action(&headers, &ns, &kind, &name, &action, body, &mut audit)
        .await;
    match &result {
        Ok(_) => audit.log("Done", ""),
        Err(r) => audit.log(r.reason(), &r.to_string()),
    }
    reply(result)
}

async fn rebalance_handler(
    State(s): Shared,
    headers: HeaderMap,
    Path((ns, kind, name)): Path<(String, String, String)>,
    Query(q): Query<SubmitQuery>,
) -> Response {
    let dry_run = q.dry_run();
    let is_dry = dry_run.as_ref().is_ok_and(|d| *d);
    let mut audit = Audit::new(if is_dry {
        "rebalance-dry-run"
    } else {
        "rebalance"
    });
    let result = match dry_run {
        Ok(dry) => {
            s.rebalance(&headers, &ns, &kind, &name, dry, &mut audit)
                .await
        }
        Err(r) => Err(r),
    };
    match &result {
        Ok(_) => audit.log("Done", ""),
        Err(r) => audit.log(r.reason(), &r.to_string()),
    }
    reply(result)
}

async fn delete_handler(
    State(s): Shared,
    headers: HeaderMap,
    Path((ns, kind, name)): Path<(String, String, String)>,
) -> Response {
    let mut audit = Audit::new("delete");
    let result = s.delete(&headers, &ns, &kind, &name, &mut audit).await;
    match &result {
        Ok(_) => audit.log("Deleted", ""),
        Err(r) => audit.log(r.reason(), &r.to_string()),
    }
    reply(result)
}

/// Applies the request timeout and records request metrics.
async fn observe(State(s): Shared, req: Request, next: Next) -> Response {
    observed(&s, req, next).await
}

/// [`observe`] for a router whose state is not the JSS's (the UI's).
pub(crate) async fn observed(s: &Jss, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let method = req.method().to_string();
    let resp = match tokio::time::timeout(s.timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => error_response(&Rejection::Timeout(s.timeout.as_secs())),
    };
    s.metrics
        .requests
        .get_or_create(&RouteLabels {
            method,
            route: route.clone(),
            code: resp.status().as_u16().to_string(),
        })
        .inc();
    s.metrics
        .request_seconds
        .get_or_create(&RouteLabel { route })
        .observe(started.elapsed().as_secs_f64());
    resp
}

/// Failed authentications per client address: an address that used up its failures
/// gets 429 for anything that would authenticate anew (a known-good token still passes,
/// so users behind the same address are not locked out by a guesser); every 401 answered
/// spends one failure. Wraps the API and the UI (the UI's failed login is a 401 too).
pub async fn failed_auth_guard(State(s): Shared, req: Request, next: Next) -> Response {
    let Some(peer) = req.extensions().get::<ClientAddr>().map(|c| c.0.ip()) else {
        return next.run(req).await;
    };
    let forwarded = req
        .headers()
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok());
    let ip = limits::client_ip(peer, forwarded, &s.trusted_proxies);
    let blocked = s
        .failed_auths
        .lock()
        .expect("lock")
        .check(&ip, Instant::now());
    // Only what brings a credential to check is held back: health checks, assets and
    // requests without a token cost nothing to answer.
    let authenticates = (req.headers().contains_key(header::AUTHORIZATION)
        && !s.known_good(req.headers()))
        || (req.method() == Method::POST && req.uri().path() == "/ui/login");
    if let Err(wait) = blocked
        && authenticates
    {
        s.metrics.failed_auth_limited.inc();
        let secs = wait.as_secs() + 1;
        return error_response(&Rejection::TooManyFailedAuths {
            client: ip.to_string(),
            retry_after_secs: secs,
        });
    }
    let resp = next.run(req).await;
    if resp.status() == StatusCode::UNAUTHORIZED {
        s.failed_auths
            .lock()
            .expect("lock")
            .charge(&ip, Instant::now());
    }
    resp
}

/// The JSS's routes.
pub fn router(jss: Arc<Jss>, ready: Readiness) -> Router {
    Router::new()
        .route("/v1/submissions", post(submit_handler))
        .route("/v1/workloads", get(list_handler))
        .route("/v1/workloads/{namespace}", get(list_ns_handler))
        .route("/v1/workloads/{namespace}/{kind}", get(list_kind_handler))
        .route(
            "/v1/workloads/{namespace}/{kind}/{name}",
            get(get_handler).delete(delete_handler),
        )
        .route(
            "/v1/workloads/{namespace}/{kind}/{name}/rollout",
            get(rollout_handler),
        )
        .route(
            "/v1/workloads/{namespace}/{kind}/{name}/rollout/{action}",
            post(rollout_action_handler),
        )
        .route(
            "/v1/workloads/{namespace}/{kind}/{name}/rebalance",
            post(rebalance_handler),
        )
        .route(
            "/v1/clusters",
            get(|State(s): Shared, h: HeaderMap| async move { reply(s.clusters(&h).await) }),
        )
        .route(
            "/v1/quotas",
            get(|State(s): Shared, h: HeaderMap| async move { reply(s.quotas(&h).await) }),
        )
        .route(
            "/v1/owners",
            get(
                |State(s): Shared, h: HeaderMap, Query(q): Query<OwnersQuery>| async move {
                    reply(s.owners(&h, &q).await)
                },
            ),
        )
        .route(
            "/v1/queue",
            get(
                |State(s): Shared, h: HeaderMap, Query(q): Query<ListQuery>| async move {
                    reply(s.queue(&h, &q).await)
                },
            ),
        )
        .route(
            "/v1/artifacts",
            get(|State(s): Shared, h: HeaderMap| async move { reply(s.artifacts(&h).await) }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    if ready.get() {
                        (StatusCode::OK, "ok")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                    }
                }
            }),
        )
        .fallback(|m: Method, uri: axum::http::Uri| async move {
            error_response(&Rejection::NoRoute(format!("{m} {}", uri.path())))
        })
        .method_not_allowed_fallback(|m: Method| async move {
            error_response(&Rejection::MethodNotAllowed(m.to_string()))
        })
        .layer(middleware::from_fn_with_state(jss.clone(), observe))
        .with_state(jss)
}

/// Loads a PEM certificate chain and private key into a rustls server configuration.
pub fn tls_config(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> anyhow::Result<rustls::ServerConfig> {
    use anyhow::Context;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading certificate {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("parsing certificate {}", cert.display()))?;
    anyhow::ensure!(!certs.is_empty(), "{} holds no certificate", cert.display());
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("reading private key {}", key.display()))?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .context("the certificate and key do not form a usable pair")?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// Serves `app` on `listener` until the process ends, over TLS when `tls` is given. At
/// most `limits.total` connections are served at once (the rest wait in the backlog) and
/// at most `limits.per_ip` per client address (more are closed at once, counted in
/// `refused`). Each request carries its [`ClientAddr`].
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: ConnectionLimits,
    refused: Counter,
) -> anyhow::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
    use tower::ServiceExt;
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    loop {
        let permit = limits.total.clone().acquire_owned().await?;
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(slot) = IpSlot::take(&limits, peer.ip()) else {
            refused.inc();
            tracing::debug!(%peer, max = limits.per_ip, "connection refused: its address holds its maximum");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let svc = TowerToHyperService::new(app.clone().map_request(
            move |mut r: axum::http::Request<hyper::body::Incoming>| {
                r.extensions_mut().insert(ClientAddr(peer));
                r
            },
        ));
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let _held = (permit, slot);
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10));
            let served = match acceptor {
                Some(acceptor) => {
                    match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream))
                        .await
                    {
                        Ok(Ok(tls)) => http.serve_connection(TokioIo::new(tls), svc).await,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    }
                }
                None => http.serve_connection(TokioIo::new(stream), svc).await,
            };
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}

/// Plain HTTP is only for loopback; anything else needs a certificate and key.
pub fn check_listen(addr: SocketAddr, tls: bool) -> anyhow::Result<()> {
    if !tls && !addr.ip().is_loopback() {
        anyhow::bail!(
            "refusing to serve plain HTTP on {addr}, which is not a loopback address: give \
             --tls-cert and --tls-key (or listen on 127.0.0.1)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_only_on_loopback() {
        assert!(check_listen("127.0.0.1:8443".parse().unwrap(), false).is_ok());
        assert!(check_listen("[::1]:8443".parse().unwrap(), false).is_ok());
        let e = check_listen("0.0.0.0:8443".parse().unwrap(), false).unwrap_err();
        assert!(e.to_string().contains("--tls-cert"), "{e}");
        assert!(check_listen("0.0.0.0:8443".parse().unwrap(), true).is_ok());
    }
}

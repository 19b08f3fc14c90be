//! The web UI of the JSS, under `/ui`: the fleet, every workload with its per-cluster
//! split and the reasons for it, quotas and owners, with live updates. Server-rendered
//! HTML with one small script, both compiled into the binary.
//!
//! Authentication and team scoping are the API's: a login takes the same bearer token (or
//! one TokenReview accepts), and every page shows only the namespaces the caller's teams
//! may read. A login makes an HttpOnly, SameSite=Strict session cookie; every POST carries
//! the session's CSRF token and is refused from another origin.
//!
//! Pure: [`model`] (what to show), [`pages`] and [`html`] (how), [`session`] (the session
//! table). The shell: this module's handlers, [`actions`] (the rollout buttons) and
//! [`feed`] (the hub's watches and reads).

pub mod actions;
pub mod feed;
pub mod html;
pub mod model;
pub mod pages;
pub mod plan;
pub mod session;

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, OriginalUri, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde::Deserialize;

use self::feed::{Changes, Feed};
use self::html::Viewer;
use self::model::{Filter, Grouping, HubStatus, WorkloadRow, WorkloadState};
use self::pages::{Leader, Palette};
use self::session::{Session, Sessions};
use super::admission::{ANNOTATION_ARTIFACT, ANNOTATION_SUBMITTED_BY};
use super::auth::{authorize_change_of_existing, authorize_namespace, is_admin, may_use_namespace};
use super::request::parse_kind;
use super::server::Jss;
use crate::api::common::find_condition;
use crate::api::federation::{ANNOTATION_FAILED_OVER_FROM, ANNOTATION_FAILOVER_MESSAGE};
use crate::status::hub_status::FAILED_OVER;

/// How long a session lasts by default (seconds).
pub const DEFAULT_SESSION_SECS: u64 = 8 * 3600;
/// The hub's leader-election Lease by default (`pinfed hub`'s defaults).
pub const DEFAULT_HUB_LEASE: &str = "pinfed-system/pinfed-hub";
/// Longest wait for the UI's hub caches before a page says the JSS is not ready.
const READY_WAIT: Duration = Duration::from_secs(10);
/// Live updates are sent at most this often per page.
const LIVE_DEBOUNCE: Duration = Duration::from_millis(700);
/// Shards drawn in a shard map at most.
const SHARD_MAP_LIMIT: u32 = 5_000;

/// The UI's settings.
#[derive(Clone, Debug)]
pub struct UiConfig {
    /// Mark the session cookie `Secure` (the JSS serves TLS).
    pub secure_cookies: bool,
    pub session_ttl: Duration,
    /// How often a session of a reviewed token asks TokenReview again.
    pub session_review: Duration,
    /// The hub's leader Lease, `namespace/name`.
    pub hub_lease: String,
}

pub struct Ui {
    jss: Arc<Jss>,
    feed: Arc<Feed>,
    /// The workloads table's rows, rebuilt per object change only.
    rows: std::sync::Mutex<model::RowCache>,
    sessions: Sessions,
    cfg: UiConfig,
}

impl Ui {
    /// Starts the UI's hub watches.
    pub fn start(jss: Arc<Jss>, cfg: UiConfig, key: session::SessionKey) -> Arc<Ui> {
        let feed = Feed::start(jss.hub.client.clone());
        let ui = Arc::new(Ui {
            jss,
            feed,
            rows: Default::default(),
            sessions: Sessions::new(cfg.session_ttl, key),
            cfg,
        });
        tokio::spawn(review_sessions(Arc::downgrade(&ui)));
        ui
    }

    fn session(&self, headers: &HeaderMap) -> Option<(String, Session)> {
        let cookie = headers.get(header::COOKIE).and_then(|v| v.to_str().ok());
        let id = session::cookie_value(cookie)?;
        let s = self.sessions.get(id, Instant::now(), SystemTime::now())?;
        Some((id.to_string(), s))
    }

    fn lease(&self) -> (&str, &str) {
        self.cfg
            .hub_lease
            .split_once('/')
            .unwrap_or(("pinfed-system", self.cfg.hub_lease.as_str()))
    }
}

/// Asks TokenReview again for each session of a reviewed token when it is due
/// (`--ui-session-review-secs`): a token the hub no longer vouches for (its ServiceAccount
/// deleted, the token revoked) ends its sessions, and their live pages with them. A hub
/// that does not answer ends nothing; the session is asked again at the next look.
async fn review_sessions(ui: std::sync::Weak<Ui>) {
    loop {
        let Some(u) = ui.upgrade() else { return };
        let every = u.cfg.session_review;
        let look = (every / 2).clamp(Duration::from_secs(1), Duration::from_secs(30));
        for (key, token) in u.sessions.due_reviews(Instant::now(), every) {
            let answer = match u.jss.review_again(&token).await {
                Ok(p) => Some(p),
                Err(r) if r.reason() == "Unauthenticated" => None,
                Err(r) => {
                    tracing::warn!(error = %r, "a session's token could not be reviewed again");
                    continue;
                }
            };
            if let Some(user) = u.sessions.reviewed_again(&key, answer, Instant::now()) {
                audit(
                    &user,
                    "session",
                    "-",
                    "Ended",
                    "TokenReview no longer vouches for the token",
                );
            }
        }
        drop(u);
        tokio::time::sleep(look).await;
    }
}

type Shared = State<Arc<Ui>>;

/// What every GET page takes besides its own parameters.
#[derive(Debug, Default, Deserialize)]
pub struct PageQuery {
    /// Only the body (`<main>`), for live updates.
    pub fragment: Option<String>,
    /// The session's flash message to show (an action's outcome).
    pub flash: Option<String>,
}

fn viewer(s: &Session) -> Viewer<'_> {
    Viewer {
        user: &s.principal.user,
        teams: s.principal.teams.iter().map(String::as_str).collect(),
        csrf: &s.csrf,
    }
}

fn html_response(code: StatusCode, body: String) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}

/// A page, or only its body when the script asks for a live update.
fn render(
    code: StatusCode,
    title: &str,
    active: &str,
    s: Option<&Session>,
    live: Option<&str>,
    fragment: bool,
    main: String,
) -> Response {
    if fragment {
        return html_response(code, main);
    }
    let v = s.map(viewer);
    html_response(code, html::page(title, active, v.as_ref(), live, &main))
}

fn problem(code: StatusCode, s: Option<&Session>, fragment: bool, message: &str) -> Response {
    let title = code.canonical_reason().unwrap_or("Error");
    render(
        code,
        title,
        "",
        s,
        None,
        fragment,
        pages::problem(code.as_u16(), title, message),
    )
}

/// Not logged in (or the session expired): the login page, coming back here after it;
/// a live update or an event stream gets 401 and its script goes to the login.
fn to_login(uri: &Uri, fragment: bool) -> Response {
    if fragment || uri.path() == "/ui/live" {
        return (StatusCode::UNAUTHORIZED, "session expired: log in again").into_response();
    }
    let next = uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/ui/fleet");
    Redirect::to(&format!("/ui/login?next={}", html::url_part(next))).into_response()
}

/// Where a login may send the browser: a page of the UI, nothing else.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with("/ui/")
                && !n.starts_with("/ui/login")
                && !n.contains("//")
                && !n.contains('\\')
                && n.chars().all(|c| !c.is_control()) =>
        {
            n.to_string()
        }
        _ => "/ui/fleet".into(),
    }
}

/// Refuses a POST from another site: a browser sends `Origin` (and `Sec-Fetch-Site`)
/// with every POST; they must name this server.
fn same_origin(headers: &HeaderMap) -> bool {
    if headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == "cross-site" || v == "same-site")
    {
        return false;
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let origin = origin.to_str().unwrap_or("null");
    let origin_host = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"));
    matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
}

/// The checks of every action: same origin and the session's CSRF token.
fn check_action(headers: &HeaderMap, s: &Session, csrf: Option<&str>) -> Result<(), &'static str> {
    if !same_origin(headers) {
        return Err("the request came from another site");
    }
    match csrf {
        Some(t) if session::same_secret(t, &s.csrf) => Ok(()),
        Some(_) => Err("the form's CSRF token does not match your session (reload the page)"),
        None => Err("the form carries no CSRF token"),
    }
}

fn audit(user: &str, action: &str, object: &str, outcome: &str, reason: &str) {
    tracing::info!(
        target: "audit",
        user = %user,
        team = "-",
        action,
        object = %object,
        outcome,
        reason,
        via = "ui",
        "decision"
    );
}

// ---------------------------------------------------------------------------------------
// Pages

/// The session of a page request, or the response that sends the browser to log in.
macro_rules! session_or_login {
    ($ui:expr, $headers:expr, $uri:expr, $fragment:expr) => {
        match $ui.session(&$headers) {
            Some((_, s)) => s,
            None => return to_login(&$uri, $fragment),
        }
    };
}

/// Waits for the caches, or answers 503.
macro_rules! ready_or_503 {
    ($ui:expr, $s:expr, $fragment:expr) => {
        if !$ui.feed.ready(READY_WAIT).await {
            return problem(
                StatusCode::SERVICE_UNAVAILABLE,
                Some(&$s),
                $fragment,
                "the JSS is still loading the hub's workloads and members; try again shortly",
            );
        }
    };
}

fn palette(members: &[crate::api::federation::MemberCluster]) -> Palette {
    let names: Vec<String> = members.iter().map(|m| m.name_any()).collect();
    Palette::new(names.iter().map(String::as_str))
}

/// The handlers, one file per page (the macros above are theirs).
mod handlers;

use self::handlers::{
    fleet::*, login::*, owners::*, queue::*, quotas::*, workload::*, workloads::*,
};

// ---------------------------------------------------------------------------------------
// Live updates

#[derive(Debug, Default, Deserialize)]
pub struct LiveQuery {
    pub topic: Option<String>,
}

/// Which changes a page follows.
fn follows(topic: &str, before: Changes, now: Changes) -> bool {
    let members = before.members != now.members;
    let workloads = before.workloads != now.workloads;
    match topic {
        "workloads" | "owners" | "queue" => workloads,
        "quotas" => workloads || members,
        _ => members || workloads,
    }
}

/// Server-sent events: `change` when what the page shows may have changed (at most every
/// [`LIVE_DEBOUNCE`]); the stream ends when the session does.
async fn live(
    State(ui): Shared,
    headers: HeaderMap,
    OriginalUri(uri): OriginalUri,
    Query(q): Query<LiveQuery>,
) -> Response {
    let Some((id, s)) = ui.session(&headers) else {
        return to_login(&uri, true);
    };
    let topic = q.topic.unwrap_or_else(|| "fleet".into());
    let mut rx = ui.feed.subscribe();
    let last = *rx.borrow_and_update();
    let expires = s.expires;
    let stream = futures::stream::unfold(
        (rx, last, ui.clone(), id, topic),
        move |(mut rx, last, ui, id, topic)| async move {
            loop {
                let wait = expires.saturating_duration_since(Instant::now());
                match tokio::time::timeout(wait, rx.changed()).await {
                    Ok(Ok(())) => {}
                    _ => return None,
                }
                tokio::time::sleep(LIVE_DEBOUNCE).await;
                let now = *rx.borrow_and_update();
                ui.sessions.get(&id, Instant::now(), SystemTime::now())?;
                if follows(&topic, last, now) {
                    let n = now.members + now.workloads;
                    let ev = SseEvent::default().event("change").data(n.to_string());
                    return Some((Ok::<_, Infallible>(ev), (rx, now, ui, id, topic)));
                }
            }
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

// ---------------------------------------------------------------------------------------

async fn asset_css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        html::CSS,
    )
        .into_response()
}

async fn asset_js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        html::JS,
    )
        .into_response()
}

async fn not_found(
    State(ui): Shared,
    headers: HeaderMap,
    OriginalUri(uri): OriginalUri,
) -> Response {
    let s = ui.session(&headers).map(|(_, s)| s);
    problem(
        StatusCode::NOT_FOUND,
        s.as_ref(),
        false,
        &format!("There is no page {}.", uri.path()),
    )
}

/// Headers of every UI response: the CSP (no inline script or style, nothing from other
/// origins), no framing, no sniffing, and pages are not cached.
async fn secure_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(html::CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}

/// The UI's routes, to be nested under `/ui`.
pub fn router(ui: Arc<Ui>) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/fleet") }))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/fleet", get(fleet))
        .route("/workloads", get(workloads))
        .route("/workloads/{namespace}/{kind}/{name}", get(workload))
        .route(
            "/workloads/{namespace}/{kind}/{name}/delete",
            post(delete_workload),
        )
        .route(
            "/workloads/{namespace}/{kind}/{name}/rollout/{action}",
            post(actions::rollout_action),
        )
        .route(
            "/workloads/{namespace}/{kind}/{name}/rebalance",
            post(actions::rebalance),
        )
        .route("/members/{name}/drain", post(drain_member))
        .route("/quotas", get(quotas))
        .route("/queue", get(queue))
        .route("/owners", get(owners))
        .route("/plan", get(plan::plan_page).post(plan::plan_run))
        .route("/live", get(live))
        .route("/assets/ui.css", get(asset_css))
        .route("/assets/ui.js", get(asset_js))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(ui.clone(), principal_budget))
        .layer(middleware::from_fn_with_state(ui.clone(), under_timeout))
        .layer(middleware::from_fn(secure_headers))
        .with_state(ui)
}

/// A logged-in user's actions (deletes, rollout actions, rebalances, drains, dry runs)
/// count against the same per-principal budget as their API requests (the login counts
/// through `authenticate`); a user past it gets 429 with Retry-After and nothing is done.
/// Pages and the live stream are read from caches and cost no budget.
async fn principal_budget(State(ui): Shared, req: Request, next: Next) -> Response {
    if req.method() != axum::http::Method::POST {
        return next.run(req).await;
    }
    let Some((_, s)) = ui.session(req.headers()) else {
        return next.run(req).await;
    };
    match ui.jss.charge_principal(&s.principal) {
        Ok(()) => next.run(req).await,
        Err(r) => {
            let mut resp = problem(
                StatusCode::TOO_MANY_REQUESTS,
                Some(&s),
                false,
                &r.to_string(),
            );
            if let Some(secs) = r.retry_after_secs()
                && let Ok(v) = HeaderValue::from_str(&secs.to_string())
            {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
            audit(
                &s.principal.user,
                "ui-action",
                req.uri().path(),
                r.reason(),
                &r.to_string(),
            );
            resp
        }
    }
}

/// The JSS's request timeout and request metrics, for every UI route but the live
/// stream (open for as long as its page is; it ends with the session).
async fn under_timeout(State(ui): Shared, req: Request, next: Next) -> Response {
    if req.uri().path() == "/live" || req.uri().path().ends_with("/ui/live") {
        return next.run(req).await;
    }
    crate::jss::server::observed(&ui.jss, req, next).await
}

/// Mounts the UI under `/ui` of the JSS's router.
pub fn mount(app: Router, ui: Arc<Ui>) -> Router {
    let home = || async { Redirect::to("/ui/fleet") };
    app.nest("/ui", router(ui))
        .route("/", get(home))
        .route("/ui/", get(home))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_login_only_sends_the_browser_to_pages_of_the_ui() {
        assert_eq!(
            safe_next(Some("/ui/workloads?kind=service")),
            "/ui/workloads?kind=service"
        );
        assert_eq!(safe_next(Some("https://evil.example/")), "/ui/fleet");
        assert_eq!(safe_next(Some("//evil.example/ui/")), "/ui/fleet");
        assert_eq!(safe_next(Some("/ui//evil.example")), "/ui/fleet");
        assert_eq!(safe_next(Some("/ui/login")), "/ui/fleet");
        assert_eq!(safe_next(None), "/ui/fleet");
    }

    #[test]
    fn actions_from_another_site_are_refused() {
        assert!(same_origin(&headers(&[
            ("host", "127.0.0.1:8443"),
            ("origin", "http://127.0.0.1:8443")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:8443"),
            ("origin", "http://evil.example")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:8443"),
            ("origin", "null")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "a"),
            ("sec-fetch-site", "cross-site")
        ])));
        assert!(
            same_origin(&headers(&[("host", "a")])),
            "no Origin: not a browser's cross-site POST"
        );
    }

    #[test]
    fn an_action_needs_the_sessions_csrf_token() {
        let s = Session {
            principal: crate::jss::auth::Principal {
                user: "a".into(),
                teams: BTreeSet::new(),
            },
            id: "i".into(),
            csrf: "right".into(),
            expires: Instant::now(),
            reviewed: None,
        };
        let h = headers(&[("host", "a")]);
        assert!(check_action(&h, &s, Some("right")).is_ok());
        assert!(check_action(&h, &s, Some("wrong")).is_err());
        assert!(check_action(&h, &s, None).unwrap_err().contains("no CSRF"));
    }

    #[test]
    fn bad_filters_are_named() {
        let q = |k: &str, v: &str| {
            let mut q = WorkloadsQuery::default();
            match k {
                "kind" => q.kind = Some(v.into()),
                "state" => q.state = Some(v.into()),
                "group" => q.group = Some(v.into()),
                _ => q.page = Some(v.into()),
            }
            parse_filter(&q)
        };
        assert!(q("kind", "pods").unwrap_err().contains("unknown kind"));
        assert!(q("state", "sleepy").unwrap_err().contains("unknown state"));
        assert!(
            q("group", "color")
                .unwrap_err()
                .contains("unknown grouping")
        );
        assert!(q("page", "0").unwrap_err().contains("not a page number"));
        assert!(q("page", "x").is_err());
        let f = q("kind", "jobsets").unwrap();
        assert_eq!(f.kind, Some(crate::api::workload::WorkloadKind::JobSet));
        assert_eq!(f.page, 1);
        let blank = WorkloadsQuery {
            namespace: Some("  ".into()),
            ..WorkloadsQuery::default()
        };
        assert_eq!(
            parse_filter(&blank).unwrap().namespace,
            None,
            "an empty select is no filter"
        );
    }

    #[test]
    fn live_topics_follow_what_they_show() {
        let a = Changes {
            members: 1,
            workloads: 1,
        };
        let m = Changes {
            members: 2,
            workloads: 1,
        };
        let w = Changes {
            members: 1,
            workloads: 2,
        };
        assert!(follows("fleet", a, m) && follows("fleet", a, w));
        assert!(!follows("workloads", a, m) && follows("workloads", a, w));
        assert!(!follows("queue", a, m) && follows("queue", a, w));
        assert!(follows("workload:ns/PinterestService/web", a, m));
        assert!(!follows("fleet", a, a));
    }
}

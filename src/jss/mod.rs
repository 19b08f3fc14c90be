//! The Job Submission Service (`pinfed jss`): the gateway in front of the hub. It
//! authenticates bearer tokens (a token file, optionally the hub's TokenReview),
//! authorizes team → namespaces, reads reviewed artifacts from a checksummed store (or an
//! inline resource where the team may), validates, checks FederatedQuota with the
//! numbers, and server-side applies to the hub as `pinfed-jss`, recording the submitter.
//! It also answers the CLI's reads: workloads with their per-cluster status, clusters,
//! quotas and the owners report; and a workload's rollout, with a person's approve,
//! pause, resume and undo.
//!
//! Pure stages: [`auth`], [`request`], [`admission`], [`quota`], [`artifacts`] (its
//! verification), [`views`], [`rollout`] (the rules of `pinfed rollout`). The shell:
//! [`hub_view`] (the only client) and [`server`]. The web
//! UI under `/ui` is [`ui`].

pub mod admission;
pub mod artifacts;
pub mod auth;
pub mod client;
pub mod dry_run;
pub mod error;
pub mod hub_view;
pub mod limits;
pub mod paging;
pub mod quota;
pub mod request;
pub mod rollout;
pub mod server;
pub mod ui;
pub mod views;
pub mod wire;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use prometheus_client::registry::Registry;

use crate::controller::http::{self, Readiness};
use crate::controller::kube_args::KubeArgs;
use crate::controller::trace::{TraceArgs, init_tracing};

/// The default limit of a request body (and of an artifact).
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

#[derive(Debug, Args)]
pub struct JssArgs {
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Address to serve the API on. Plain HTTP is allowed only on a loopback address.
    #[arg(long, env = "PINFED_JSS_LISTEN", default_value = "127.0.0.1:8443")]
    pub listen: SocketAddr,
    /// PEM certificate chain for TLS (with --tls-key).
    #[arg(long, env = "PINFED_JSS_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for TLS (with --tls-cert).
    #[arg(long, env = "PINFED_JSS_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Token file: `tokens: [{user, token | tokenSha256, teams: [...]}]`, and optionally
    /// `teams:` (YAML or JSON). See docs/jss.md.
    #[arg(long, env = "PINFED_JSS_TOKENS")]
    pub tokens: PathBuf,
    /// Team file: `teams: {NAME: {namespaces: [...], inline: BOOL, users: [...],
    /// groups: [...]}}` (when not in the token file).
    #[arg(long, env = "PINFED_JSS_TEAMS")]
    pub teams: Option<PathBuf>,
    /// Also accept tokens the hub's TokenReview API authenticates (their teams come from
    /// the team file's `users` and `groups`).
    #[arg(long, env = "PINFED_JSS_TOKEN_REVIEW")]
    pub token_review: bool,
    /// The artifact store: ARTIFACTS/<name>/<version>/{workload.yaml,sha256}.
    #[arg(long, env = "PINFED_JSS_ARTIFACTS")]
    pub artifacts: PathBuf,
    /// Address for /metrics, /healthz and /readyz.
    #[arg(
        long,
        env = "PINFED_JSS_METRICS_ADDR",
        default_value = "127.0.0.1:9092"
    )]
    pub metrics_addr: SocketAddr,
    /// Largest request body accepted (bytes); larger ones get 413.
    #[arg(long, env = "PINFED_JSS_BODY_LIMIT", default_value_t = DEFAULT_BODY_LIMIT)]
    pub body_limit: usize,
    /// Time limit of one request (seconds); slower ones get 503.
    #[arg(long, env = "PINFED_JSS_REQUEST_TIMEOUT_SECS", default_value = "30")]
    pub request_timeout_secs: u64,
    /// How long a web UI session lasts after its login (seconds).
    #[arg(long, env = "PINFED_JSS_UI_SESSION_SECS", default_value_t = ui::DEFAULT_SESSION_SECS)]
    pub ui_session_secs: u64,
    /// How often a UI session of a token TokenReview vouched for asks it again (seconds):
    /// once the hub no longer vouches for the token, the session ends.
    #[arg(long, env = "PINFED_JSS_UI_SESSION_REVIEW_SECS", default_value = "300", value_parser = clap::value_parser!(u64).range(1..))]
    pub ui_session_review_secs: u64,
    /// A file of at least 32 secret bytes the UI's session key is derived from. Every
    /// replica given the same file serves every session (each session is sealed in its
    /// cookie). Without it the key is derived from the TLS key (replicas sharing a
    /// certificate share sessions), and without TLS it is this process's own.
    #[arg(long, env = "PINFED_JSS_UI_SESSION_KEY_FILE")]
    pub ui_session_key_file: Option<PathBuf>,
    /// The hub's leader-election Lease the UI's fleet page shows (`namespace/name`).
    #[arg(long, env = "PINFED_JSS_HUB_LEASE", default_value = ui::DEFAULT_HUB_LEASE)]
    pub hub_lease: String,
    /// Submissions parsed and admitted at once, on blocking threads (the rest wait; at
    /// least 1).
    #[arg(
        long,
        env = "PINFED_JSS_ADMISSION_CONCURRENCY",
        default_value_t = server::DEFAULT_ADMISSION_CONCURRENCY
    )]
    pub admission_concurrency: usize,
    /// With --token-review: the audience TokenReview asks for; a token not issued for it
    /// is refused (e.g. `pinfed-jss`, as in `kubectl create token SA --audience pinfed-jss`).
    #[arg(long, env = "PINFED_JSS_TOKEN_AUDIENCE")]
    pub token_audience: Option<String>,
    /// Connections served at once; more wait in the listen backlog.
    #[arg(long, env = "PINFED_JSS_MAX_CONNECTIONS", default_value_t = limits::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Connections one client address may hold at once; more are closed at once.
    #[arg(
        long,
        env = "PINFED_JSS_MAX_CONNECTIONS_PER_IP",
        default_value_t = limits::DEFAULT_MAX_CONNECTIONS_PER_IP
    )]
    pub max_connections_per_ip: usize,
    /// Failed authentications a client address may make in a burst before it gets 429
    /// (a token already known good still passes).
    #[arg(long, env = "PINFED_JSS_FAILED_AUTH_BURST", default_value_t = limits::DEFAULT_FAILED_AUTH_BURST)]
    pub failed_auth_burst: u32,
    /// Failed authentications per second a client address regains after its burst.
    #[arg(
        long,
        env = "PINFED_JSS_FAILED_AUTH_PER_SEC",
        default_value_t = limits::DEFAULT_FAILED_AUTH_PER_SEC
    )]
    pub failed_auth_per_sec: f64,
    /// Requests one authenticated principal (user) may make in a burst before it gets 429
    /// with Retry-After, whatever address it comes from (the API, the UI's login and
    /// actions).
    #[arg(long, env = "PINFED_JSS_PRINCIPAL_BURST", default_value_t = limits::DEFAULT_PRINCIPAL_BURST)]
    pub principal_burst: u32,
    /// Requests per second a principal regains after its burst.
    #[arg(
        long,
        env = "PINFED_JSS_PRINCIPAL_PER_SEC",
        default_value_t = limits::DEFAULT_PRINCIPAL_PER_SEC
    )]
    pub principal_per_sec: f64,
    /// Memory (MiB) submissions may hold at once while their bodies are read, parsed and
    /// admitted: each reserves 12× its declared length (the body limit when undeclared)
    /// before reading it; one that finds no room waits up to half the request timeout,
    /// then gets 503 Busy with Retry-After.
    #[arg(
        long,
        env = "PINFED_JSS_MEMORY_BUDGET_MIB",
        default_value_t = limits::DEFAULT_MEMORY_BUDGET_MIB
    )]
    pub memory_budget_mib: u32,
    /// The namespace of the admission locks replicas share on the hub (Leases
    /// `pinfed-jss-admission-NAMESPACE`): the JSS's own, where its Role allows them.
    #[arg(
        long,
        env = "PINFED_JSS_LOCK_NAMESPACE",
        default_value = "pinfed-system"
    )]
    pub lock_namespace: String,
    /// Proxies (addresses or ranges, comma-separated: `10.0.0.0/8,fd00::/8`) in front of
    /// the JSS: their `X-Forwarded-For` names the client the per-client limits count, and
    /// their connections are capped only by `--max-connections`. Any other peer is the
    /// client itself, whatever it writes in that header. None by default.
    #[arg(long, env = "PINFED_JSS_TRUSTED_PROXIES", value_delimiter = ',', value_parser = parse_cidr)]
    pub trusted_proxies: Vec<limits::Cidr>,
}

fn read_auth(args: &JssArgs) -> anyhow::Result<auth::AuthConfig> {
    let mut files = Vec::new();
    for path in std::iter::once(&args.tokens).chain(args.teams.as_ref()) {
        let meta =
            std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        check_private(path, &meta, effective_gid())?;
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let name = path.display().to_string();
        files.push((name.clone(), auth::AuthFile::parse(&name, &text)?));
    }
    Ok(auth::AuthConfig::merge(&files)?)
}

/// The UI's session key: from `--ui-session-key-file`, else derived from the TLS key
/// (every replica serving the same certificate shares sessions), else this process's own.
fn ui_session_key(args: &JssArgs) -> anyhow::Result<ui::session::SessionKey> {
    use ui::session::SessionKey;
    let from = |path: &Path| -> anyhow::Result<SessionKey> {
        let meta =
            std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        check_private(path, &meta, effective_gid())?;
        let secret = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        SessionKey::derive(&secret).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    };
    if let Some(path) = &args.ui_session_key_file {
        return from(path).context("--ui-session-key-file");
    }
    if let Some(path) = &args.tls_key {
        let secret = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        return SessionKey::derive(&secret)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
            .context("the UI's session key, derived from --tls-key");
    }
    tracing::info!(
        "UI sessions are sealed with this process's own key (no --ui-session-key-file, no TLS): another replica will not serve them"
    );
    SessionKey::random().map_err(|e| anyhow::anyhow!("no randomness for the UI's session key: {e}"))
}

/// The process's effective group (from /proc: the standard library does not say).
fn effective_gid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Gid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A token file holds credentials: nobody but its owner (and the process's own group,
/// as a Kubernetes Secret mounted with fsGroup gives) may read it.
fn check_private(path: &Path, meta: &std::fs::Metadata, egid: Option<u32>) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let mode = meta.mode() & 0o777;
    let others = mode & 0o007 != 0;
    let foreign_group = mode & 0o070 != 0 && Some(meta.gid()) != egid;
    anyhow::ensure!(
        !others && !foreign_group,
        "{} holds secrets but is readable by others (mode {mode:03o}{}): chmod 600 it (or 640 \
         with the JSS's group; a Secret volume: defaultMode 0440 with fsGroup)",
        path.display(),
        if foreign_group && !others {
            format!(", group {} is not the JSS's", meta.gid())
        } else {
            String::new()
        }
    );
    Ok(())
}

pub fn run(args: JssArgs) -> anyhow::Result<()> {
    let _traces = init_tracing("pinfed-jss", &args.trace)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => Some(Arc::new(server::tls_config(c, k)?)),
        _ => None,
    };
    server::check_listen(args.listen, tls.is_some())?;
    let auth = read_auth(&args)?;
    anyhow::ensure!(
        auth.token_count() > 0 || args.token_review,
        "{} lists no tokens and --token-review is off: nobody could authenticate",
        args.tokens.display()
    );
    anyhow::ensure!(
        args.artifacts.is_dir(),
        "the artifact store {} is not a directory",
        args.artifacts.display()
    );
    tokio::runtime::Runtime::new()?.block_on(async move {
        let mut registry = Registry::with_prefix("pinfed_jss");
        let metrics = server::JssMetrics::register(&mut registry);
        let ready = Readiness::default();
        let registry = Arc::new(registry);
        let metrics_server = tokio::spawn(http::serve(args.metrics_addr, registry, ready.clone()));
        let client = args.kube.client().await?;
        // The API listens only once the hub's caches are loaded; until then /readyz says
        // so, and a warning names what is missing.
        let connect = hub_view::Hub::connect(client);
        tokio::pin!(connect);
        let hub = loop {
            tokio::select! {
                h = &mut connect => break h.context("loading members, runtime profiles and quotas from the hub")?,
                _ = tokio::time::sleep(Duration::from_secs(10)) => tracing::warn!(
                    "still waiting for the hub's MemberCluster, RuntimeProfile and FederatedQuota \
                     lists (are the CRDs installed? `pinfed crds | kubectl apply --server-side -f -`)"
                ),
            }
        };
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        let jss = Arc::new(server::Jss::new(
            auth,
            args.token_review,
            artifacts::ArtifactStore::new(&args.artifacts),
            hub,
            metrics,
            args.body_limit,
            Duration::from_secs(args.request_timeout_secs),
        )
        .with_admission_concurrency(args.admission_concurrency)
        .with_token_audience(args.token_audience.clone())
        .with_failed_auth_limit(args.failed_auth_burst, args.failed_auth_per_sec)
        .with_principal_limit(args.principal_burst, args.principal_per_sec)
        .with_memory_budget(args.memory_budget_mib)
        .with_lock_namespace(args.lock_namespace.clone())
        .with_trusted_proxies(args.trusted_proxies.clone()));
        ready.set(true);
        tracing::info!(
            listen = %args.listen,
            tls = tls.is_some(),
            artifacts = %args.artifacts.display(),
            ui = %format!("{}://{}/ui/", if tls.is_some() { "https" } else { "http" }, args.listen),
            "job submission service ready"
        );
        let session_key = ui_session_key(&args)?;
        let ui = ui::Ui::start(
            jss.clone(),
            ui::UiConfig {
                secure_cookies: tls.is_some(),
                session_ttl: Duration::from_secs(args.ui_session_secs),
                session_review: Duration::from_secs(args.ui_session_review_secs),
                hub_lease: args.hub_lease.clone(),
            },
            session_key,
        );
        let refused = jss.metrics.connections_refused.clone();
        let app = ui::mount(server::router(jss.clone(), ready), ui).layer(
            axum::middleware::from_fn_with_state(jss, server::failed_auth_guard),
        );
        let limits =
            limits::ConnectionLimits::new(args.max_connections, args.max_connections_per_ip)
                .with_proxies(args.trusted_proxies.clone());
        tokio::select! {
            r = server::serve(listener, app, tls, limits, refused) => r,
            r = metrics_server => r?,
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}

/// One `--trusted-proxies` entry.
fn parse_cidr(s: &str) -> Result<limits::Cidr, String> {
    s.trim().parse()
}

#[cfg(test)]
mod token_file_tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn token_files_readable_by_others_are_refused() {
        let path = std::env::temp_dir().join(format!("pinfed-tokens-{}", std::process::id()));
        std::fs::write(&path, "tokens: []\n").unwrap();
        let check = |mode: u32, egid: Option<u32>| {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            check_private(&path, &std::fs::metadata(&path).unwrap(), egid)
        };
        use std::os::unix::fs::MetadataExt;
        let own_gid = std::fs::metadata(&path).unwrap().gid();
        assert!(check(0o600, Some(own_gid)).is_ok());
        assert!(
            check(0o440, Some(own_gid)).is_ok(),
            "the process's own group"
        );
        let err = check(0o644, Some(own_gid)).unwrap_err().to_string();
        assert!(
            err.contains("mode 644") && err.contains("pinfed-tokens"),
            "{err}"
        );
        assert!(check(0o640, Some(own_gid + 1)).is_err(), "a foreign group");
        let _ = std::fs::remove_file(&path);
    }
}

//! A kube-apiserver per cluster (TLS and RBAC on 127.0.0.1), the kubeconfig that reaches
//! them, and their readiness.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::pki::Pki;
use crate::state::Component;
use crate::wait_until;

/// What the hub's API server audits (topologies with `hub.audit: true`): every write, at
/// Metadata level — enough to tell which process (user agent) wrote what, and
/// when. (The e2e daemons run as the admin impersonating pinfed's ServiceAccounts, and a
/// policy matches the user before impersonation, so it cannot select them by group.)
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    verbs: [get, list, watch]
  - level: Metadata
";

/// Writes the audit policy into `dir`; the arguments that turn auditing on for one API
/// server, its log at `logs/NAME-audit.log`.
pub fn audit_args(dir: &Path, logs: &Path, name: &str) -> anyhow::Result<Vec<String>> {
    let policy = dir.join("audit-policy.yaml");
    std::fs::write(&policy, AUDIT_POLICY)?;
    Ok(vec![
        format!("--audit-policy-file={}", policy.display()),
        format!(
            "--audit-log-path={}",
            logs.join(format!("{name}-audit.log")).display()
        ),
        "--audit-log-format=json".into(),
        "--audit-log-mode=batch".into(),
    ])
}

/// A light member's API server (a fleet of them on one machine): only the hub and the
/// harness use it, so it keeps no watch cache and no priority-and-fairness state, serves
/// only the API groups a member of pinfed uses, and runs Go's collector against a memory
/// limit. `e2e/member-memory` measured one at 273 MiB with pinfed's CRDs, against 964 MiB
/// with the suite's `GOGC=400` (docs/benchmarks.md).
pub fn lean_args() -> Vec<String> {
    let groups = [
        "api/all=false",
        "api/v1=true",
        "apiregistration.k8s.io/v1=true",
        "apiextensions.k8s.io/v1=true",
        "apps/v1=true",
        "batch/v1=true",
        "policy/v1=true",
        "networking.k8s.io/v1=true",
        "rbac.authorization.k8s.io/v1=true",
        "authentication.k8s.io/v1=true",
        "authorization.k8s.io/v1=true",
        "coordination.k8s.io/v1=true",
        "events.k8s.io/v1=true",
        "discovery.k8s.io/v1=true",
        "admissionregistration.k8s.io/v1=true",
        "scheduling.k8s.io/v1=true",
        "storage.k8s.io/v1=true",
        "node.k8s.io/v1=true",
    ];
    vec![
        "--watch-cache=false".into(),
        "--enable-priority-and-fairness=false".into(),
        format!("--runtime-config={}", groups.join(",")),
    ]
}

/// The environment of a light member's API server (see [`lean_args`]): Go's collector
/// against a memory limit, `PINFED_MEMBER_GOMEMLIMIT` (200MiB unless set). Not much lower:
/// with pinfed's CRDs a member holds ~136 MiB of heap in use, and at 150MiB its collector
/// never stopped under a fleet's load (docs/benchmarks.md).
pub fn lean_env() -> Vec<(String, String)> {
    let limit = std::env::var("PINFED_MEMBER_GOMEMLIMIT").unwrap_or_else(|_| "200MiB".to_string());
    vec![("GOGC".into(), "100".into()), ("GOMEMLIMIT".into(), limit)]
}

/// The API server of cluster `name` on 127.0.0.1:`api`, storing under `/pinfed-e2e/NAME`.
pub fn component(
    bin: &Path,
    pki: &Pki,
    logs: &Path,
    name: &str,
    etcd_port: u16,
    api: u16,
    extra: Vec<String>,
) -> Component {
    Component {
        name: "kube-apiserver".into(),
        argv: vec![
            bin.join("kube-apiserver").display().to_string(),
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            format!("--etcd-prefix=/pinfed-e2e/{name}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={api}"),
            format!("--tls-cert-file={}", pki.serving_crt().display()),
            format!("--tls-private-key-file={}", pki.serving_key().display()),
            format!("--client-ca-file={}", pki.ca_crt().display()),
            format!("--service-account-key-file={}", pki.sa_pub().display()),
            format!(
                "--service-account-signing-key-file={}",
                pki.sa_key().display()
            ),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            "--authorization-mode=RBAC".into(),
            "--endpoint-reconciler-type=none".into(),
            "--allow-privileged=true".into(),
            // PINFED_E2E_PROFILING=1: /debug/pprof for profiling a benchmark's API server.
            format!(
                "--profiling={}",
                std::env::var("PINFED_E2E_PROFILING").is_ok_and(|v| v == "1")
            ),
            "--max-requests-inflight=1000".into(),
            "--max-mutating-requests-inflight=500".into(),
        ]
        .into_iter()
        .chain(extra)
        .collect(),
        port: api,
        pid: None,
        log: logs.join(format!("{name}-kube-apiserver.log")),
        env: Vec::new(),
    }
}

pub fn kubeconfig_yaml(pki: &Pki, clusters: &[(String, u16)]) -> anyhow::Result<String> {
    use base64::Engine;
    let b64 = |p: PathBuf| -> anyhow::Result<String> {
        Ok(base64::engine::general_purpose::STANDARD.encode(std::fs::read(p)?))
    };
    let (ca, crt, key) = (
        b64(pki.ca_crt())?,
        b64(pki.admin_crt())?,
        b64(pki.admin_key())?,
    );
    let mut y = String::from("apiVersion: v1\nkind: Config\nclusters:\n");
    for (name, port) in clusters {
        y += &format!(
            "- name: {name}\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority-data: {ca}\n"
        );
    }
    y += "users:\n- name: pinfed-e2e-admin\n  user:\n";
    y += &format!("    client-certificate-data: {crt}\n    client-key-data: {key}\n");
    y += "contexts:\n";
    for (name, _) in clusters {
        y += &format!(
            "- name: {name}\n  context:\n    cluster: {name}\n    user: pinfed-e2e-admin\n"
        );
    }
    y += &format!("current-context: {}\n", clusters[0].0);
    Ok(y)
}

pub async fn clients(
    kubeconfig: &Path,
    names: &[&str],
) -> anyhow::Result<BTreeMap<String, kube::Client>> {
    let kc = Kubeconfig::read_from(kubeconfig)?;
    let mut out = BTreeMap::new();
    for n in names {
        let opts = KubeConfigOptions {
            context: Some(n.to_string()),
            ..Default::default()
        };
        let mut cfg = kube::Config::from_custom_kubeconfig(kc.clone(), &opts).await?;
        cfg.connect_timeout = Some(Duration::from_secs(2));
        cfg.read_timeout = Some(Duration::from_secs(10));
        out.insert(n.to_string(), kube::Client::try_from(cfg)?);
    }
    Ok(out)
}

async fn readyz(client: &kube::Client) -> bool {
    let Ok(req) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    matches!(client.request_text(req).await, Ok(body) if body.trim() == "ok")
}

pub async fn wait_ready(client: &kube::Client, timeout: Duration) -> anyhow::Result<()> {
    let waited = wait_until(timeout, "/readyz", || readyz(client)).await;
    if waited.is_ok() {
        return waited;
    }
    // Say which checks still fail (e.g. an informer that has not synced, a post-start hook).
    let failing = match http::Request::get("/readyz?verbose").body(Vec::new()) {
        Ok(req) => {
            match tokio::time::timeout(Duration::from_secs(10), client.request_text(req)).await {
                Ok(Ok(body)) => body
                    .lines()
                    .filter(|l| l.starts_with("[-]"))
                    .collect::<Vec<_>>()
                    .join("; "),
                Ok(Err(e)) => format!("/readyz?verbose: {e}"),
                Err(_) => "/readyz?verbose did not answer in 10 s".into(),
            }
        }
        Err(e) => e.to_string(),
    };
    waited.with_context(|| format!("failing: {failing}"))
}

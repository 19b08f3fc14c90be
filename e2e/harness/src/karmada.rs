//! A Karmada control plane beside the hub (`peers: {karmada: true}` in the topology), for
//! the side-by-side benchmark (`e2e/bench compare`). Karmada v1.18.2 is built from its
//! source by `e2e/peers/karmada/build` into the cache; nothing of it is in this repository.
//!
//! What runs, as a cluster of the state named `karmada` (role `karmada`), in start order:
//!
//! - its own kube-apiserver from our toolchain, on the shared etcd under its own prefix,
//!   with the front-proxy flags an aggregated API server needs;
//! - a kube-controller-manager limited to the controllers Karmada's own installation runs
//!   there (namespaces, garbage collection, tokens, role aggregation) — never the
//!   Deployment controller: Deployments on Karmada are templates, not workloads;
//! - karmada-aggregated-apiserver (the `cluster.karmada.io` API: Cluster objects), on the
//!   shared etcd under its own prefix, registered as an APIService through an
//!   ExternalName Service, its certificate from the harness PKI;
//! - karmada-webhook (defaulting and validation of policies, permanent ids of bindings and
//!   works, conversion of bindings), called by URL on 127.0.0.1 with the stock
//!   webhook configuration of the source tree;
//! - karmada-scheduler and karmada-controller-manager, without leader election.
//!
//! Members join in push mode as `karmadactl join` would join them, written directly: a
//! ServiceAccount bound to `cluster-admin` in the member, its token (TokenRequest, which
//! needs no token controller, so light members can join), the Secrets and the Cluster
//! object on Karmada.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use testkit::detached;

use crate::pki::{FRONT_PROXY_CLIENT, Pki};
use crate::state::{ClusterState, Component, State};
use crate::{Progress, apiserver, controllers, wait_until};

pub const VERSION: &str = "v1.18.2";
/// The cluster name (and kubeconfig context) of the Karmada control plane.
pub use pinfed::topology::KARMADA_PEER as NAME;
pub const ROLE: &str = "karmada";
const FIELD_MANAGER: &str = "pinfed-e2e";
/// Where `karmadactl join` keeps the members' credentials on Karmada and in the members.
const CLUSTER_NAMESPACE: &str = "karmada-cluster";
const SYSTEM_NAMESPACE: &str = "karmada-system";
const AGGREGATED_SERVICE: &str = "karmada-aggregated-apiserver";
/// The controllers of Karmada's own kube-controller-manager (its local-up script).
const KCM_CONTROLLERS: &str =
    "namespace,garbagecollector,serviceaccount-token,clusterrole-aggregation";
/// The binaries `e2e/peers/karmada/build` makes.
const BINARIES: [&str; 4] = [
    "karmada-aggregated-apiserver",
    "karmada-webhook",
    "karmada-scheduler",
    "karmada-controller-manager",
];
/// Client rate limits of the Karmada components (their default is 40 QPS, burst 60): as
/// generous as the harness gives kube-controller-manager; pinfed's clients have none.
const QPS: [&str; 2] = ["--kube-api-qps=500", "--kube-api-burst=1000"];

/// Where the Karmada binaries and the unpacked source are.
pub struct Dirs {
    pub bin: PathBuf,
    pub src: PathBuf,
}

fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"))
        .join(format!("pinfed/karmada-{VERSION}"))
}

impl Dirs {
    /// `PINFED_KARMADA_BIN_DIR` and `PINFED_KARMADA_SRC_DIR`, by default the cache dirs
    /// `e2e/peers/karmada/build` fills; an error says how to build them when absent.
    pub fn find() -> anyhow::Result<Dirs> {
        let bin = std::env::var_os("PINFED_KARMADA_BIN_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| cache_dir().join("bin"));
        let src = std::env::var_os("PINFED_KARMADA_SRC_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| cache_dir().join("src"));
        let build = format!(
            "run e2e/peers/karmada/build KARMADA_SRC (a Karmada checkout or bare git dir \
             with tag {VERSION}, e.g. `git clone --depth 1 --branch {VERSION} \
             https://github.com/karmada-io/karmada ~/src/karmada`) or set \
             PINFED_KARMADA_BIN_DIR and PINFED_KARMADA_SRC_DIR"
        );
        for b in BINARIES {
            if !bin.join(b).is_file() {
                bail!(
                    "the topology has a Karmada peer but {} is missing; {build}",
                    bin.join(b).display()
                );
            }
        }
        for d in [crds_dir(&src), webhook_configuration(&src)] {
            if !d.exists() {
                bail!(
                    "the topology has a Karmada peer but {} (Karmada's source) is missing; {build}",
                    d.display()
                );
            }
        }
        Ok(Dirs { bin, src })
    }
}

fn crds_dir(src: &Path) -> PathBuf {
    src.join("charts/karmada/_crds/bases")
}

fn webhook_configuration(src: &Path) -> PathBuf {
    src.join("artifacts/deploy/webhook-configuration.yaml")
}

/// The loopback ports of the Karmada control plane.
pub struct Ports {
    pub api: u16,
    pub kcm: u16,
    pub aggregated: u16,
    pub webhook: u16,
    pub webhook_health: u16,
    pub webhook_metrics: u16,
    pub scheduler_health: u16,
    pub scheduler_metrics: u16,
    pub manager_health: u16,
    pub manager_metrics: u16,
}

impl Ports {
    pub const COUNT: usize = 10;
    pub fn take(mut next: impl FnMut() -> u16) -> Ports {
        Ports {
            api: next(),
            kcm: next(),
            aggregated: next(),
            webhook: next(),
            webhook_health: next(),
            webhook_metrics: next(),
            scheduler_health: next(),
            scheduler_metrics: next(),
            manager_health: next(),
            manager_metrics: next(),
        }
    }
}

/// The value of `--NAME=` in a component's argv: [`bring_up`] reads the addresses back
/// from the state, which is all `e2e/start karmada` has too.
fn flag(c: &Component, name: &str) -> Option<String> {
    c.argv
        .iter()
        .find_map(|a| a.strip_prefix(&format!("--{name}=")).map(String::from))
}

/// The Karmada control plane as a cluster of the state; nothing started.
pub fn cluster_state(
    toolchain: &Path,
    dirs: &Dirs,
    pki: &Pki,
    logs: &Path,
    kubeconfig: &Path,
    etcd_port: u16,
    ports: &Ports,
) -> ClusterState {
    let kc = kubeconfig.display().to_string();
    let log = |c: &str| logs.join(format!("{NAME}-{c}.log"));
    let front_proxy = vec![
        format!(
            "--proxy-client-cert-file={}",
            pki.front_proxy_crt().display()
        ),
        format!(
            "--proxy-client-key-file={}",
            pki.front_proxy_key().display()
        ),
        format!("--requestheader-client-ca-file={}", pki.ca_crt().display()),
        format!("--requestheader-allowed-names={FRONT_PROXY_CLIENT}"),
        "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
        "--requestheader-group-headers=X-Remote-Group".into(),
        "--requestheader-username-headers=X-Remote-User".into(),
        // As Karmada's own deployment of its API server.
        "--disable-admission-plugins=StorageObjectInUseProtection,ServiceAccount".into(),
    ];
    let api = apiserver::component(
        toolchain,
        pki,
        logs,
        NAME,
        etcd_port,
        ports.api,
        front_proxy,
    );
    let mut kcm = controllers::controller_manager(toolchain, pki, logs, NAME, &kc, ports.kcm);
    kcm.argv.push(format!("--controllers={KCM_CONTROLLERS}"));
    let bin = |b: &str| dirs.bin.join(b).display().to_string();
    let common = |b: &str| -> Vec<String> {
        let mut v = vec![bin(b), format!("--kubeconfig={kc}")];
        v.extend(QPS.iter().map(|s| s.to_string()));
        v
    };
    let mut aggregated = common("karmada-aggregated-apiserver");
    aggregated.extend([
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
        format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
        format!("--etcd-prefix=/pinfed-e2e/{NAME}-aggregated"),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={}", ports.aggregated),
        format!("--tls-cert-file={}", pki.karmada_crt().display()),
        format!("--tls-private-key-file={}", pki.karmada_key().display()),
    ]);
    let mut webhook = common("karmada-webhook");
    webhook.extend([
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={}", ports.webhook),
        format!("--cert-dir={}", pki.dir.display()),
        format!("--tls-cert-file-name={}", file_name(&pki.karmada_crt())),
        format!(
            "--tls-private-key-file-name={}",
            file_name(&pki.karmada_key())
        ),
        format!("--metrics-bind-address=127.0.0.1:{}", ports.webhook_metrics),
        format!(
            "--health-probe-bind-address=127.0.0.1:{}",
            ports.webhook_health
        ),
    ]);
    let mut scheduler = common("karmada-scheduler");
    scheduler.extend([
        "--leader-elect=false".into(),
        format!(
            "--metrics-bind-address=127.0.0.1:{}",
            ports.scheduler_metrics
        ),
        format!(
            "--health-probe-bind-address=127.0.0.1:{}",
            ports.scheduler_health
        ),
    ]);
    let mut manager = common("karmada-controller-manager");
    manager.extend([
        "--leader-elect=false".into(),
        "--cluster-api-qps=500".into(),
        "--cluster-api-burst=1000".into(),
        format!("--metrics-bind-address=127.0.0.1:{}", ports.manager_metrics),
        format!(
            "--health-probe-bind-address=127.0.0.1:{}",
            ports.manager_health
        ),
    ]);
    let component = |name: &str, argv: Vec<String>, port: u16| Component {
        name: name.into(),
        argv,
        port,
        pid: None,
        log: log(name),
        env: Vec::new(),
    };
    ClusterState {
        name: NAME.into(),
        role: ROLE.into(),
        apiserver_port: ports.api,
        components: vec![
            api,
            kcm,
            component("karmada-aggregated-apiserver", aggregated, ports.aggregated),
            component("karmada-webhook", webhook, ports.webhook),
            component("karmada-scheduler", scheduler, ports.scheduler_health),
            component("karmada-controller-manager", manager, ports.manager_health),
        ],
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn cluster_resource() -> ApiResource {
    resource("cluster.karmada.io", "v1alpha1", "Cluster", "clusters")
}

/// Server-side applies `obj` (forced, one field manager).
async fn apply(
    client: &kube::Client,
    ar: &ApiResource,
    namespace: Option<&str>,
    obj: serde_json::Value,
) -> anyhow::Result<()> {
    let name = obj["metadata"]["name"]
        .as_str()
        .context("object without metadata.name")?
        .to_string();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&obj),
    )
    .await
    .with_context(|| format!("applying {} {name}", ar.kind))?;
    Ok(())
}

async fn ensure_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    apply(
        client,
        &resource("", "v1", "Namespace", "namespaces"),
        None,
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": name, "labels": {"karmada.io/system": "true"}}}),
    )
    .await
}

fn ca_b64(pki: &Pki) -> anyhow::Result<String> {
    Ok(base64::engine::general_purpose::STANDARD.encode(std::fs::read(pki.ca_crt())?))
}

/// Starts component `name` of the Karmada cluster of `state` (if it does not run).
fn start(state: &mut State, dir: &Path, name: &str) -> anyhow::Result<()> {
    let marker = crate::marker(dir);
    let c = state
        .clusters
        .get_mut(NAME)
        .and_then(|c| c.components.iter_mut().find(|c| c.name == name))
        .with_context(|| format!("no {name} in the Karmada peer"))?;
    if !c.pid.is_some_and(|p| detached::is_ours(p, &marker)) {
        c.pid = Some(detached::spawn(&c.argv, &c.log)?);
    }
    state.save(dir)
}

fn component<'a>(state: &'a State, name: &str) -> anyhow::Result<&'a Component> {
    state
        .clusters
        .get(NAME)
        .and_then(|c| c.components.iter().find(|c| c.name == name))
        .with_context(|| format!("no {name} in the Karmada peer"))
}

async fn http_ok(addr: &str, path: &str) -> bool {
    testkit::http::status(&format!("http://{addr}{path}"), Duration::from_secs(2)).await
        == Some(200)
}

/// Brings the Karmada control plane up once its API server runs (started with the other
/// API servers): CRDs, the aggregated API server and its APIService, the webhook and its
/// configuration, the members joined, then the scheduler and the controller-manager,
/// until every member's Cluster is Ready.
#[allow(clippy::too_many_arguments)]
pub async fn bring_up(
    p: &Progress,
    state: &mut State,
    dir: &Path,
    pki: &Pki,
    dirs: &Dirs,
    clients: &BTreeMap<String, kube::Client>,
    members: &[&str],
    timeout: Duration,
) -> anyhow::Result<()> {
    let karmada = clients[NAME].clone();
    let api_log = component(state, "kube-apiserver")?.log.clone();
    apiserver::wait_ready(&karmada, timeout)
        .await
        .with_context(|| format!("Karmada's kube-apiserver; see {}", api_log.display()))?;
    p.say("kube-apiserver of karmada is ready");
    start(state, dir, "kube-controller-manager")?;

    let webhook_port = component(state, "karmada-webhook")?.port;
    let ca = ca_b64(pki)?;

    install_crds(&karmada, &dirs.src, webhook_port, &ca, timeout).await?;
    p.say("installed Karmada's CRDs");

    // The aggregated API server (Cluster objects), reached through an ExternalName
    // Service: the aggregator dials localhost:<port> and verifies the Service's DNS name.
    ensure_namespace(&karmada, SYSTEM_NAMESPACE).await?;
    let aggregated_port = component(state, "karmada-aggregated-apiserver")?.port;
    apply(
        &karmada,
        &resource("", "v1", "Service", "services"),
        Some(SYSTEM_NAMESPACE),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": AGGREGATED_SERVICE, "namespace": SYSTEM_NAMESPACE},
               "spec": {"type": "ExternalName", "externalName": "localhost"}}),
    )
    .await?;
    apply(
        &karmada,
        &resource("apiregistration.k8s.io", "v1", "APIService", "apiservices"),
        None,
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
               "metadata": {"name": "v1alpha1.cluster.karmada.io"},
               "spec": {"group": "cluster.karmada.io", "version": "v1alpha1",
                        "groupPriorityMinimum": 2000, "versionPriority": 10,
                        "caBundle": ca,
                        "service": {"name": AGGREGATED_SERVICE, "namespace": SYSTEM_NAMESPACE,
                                    "port": aggregated_port}}}),
    )
    .await?;
    start(state, dir, "karmada-aggregated-apiserver")?;
    start(state, dir, "karmada-webhook")?;
    p.say(format!(
        "started karmada-aggregated-apiserver:{aggregated_port}, karmada-webhook:{webhook_port}"
    ));

    let webhook_log = component(state, "karmada-webhook")?.log.clone();
    // It registers no health checks (its probe port answers 404): ready once it serves.
    wait_until(timeout, "karmada-webhook to serve", || async {
        testkit::port_open(webhook_port)
    })
    .await
    .with_context(|| format!("see {}", webhook_log.display()))?;
    apply_webhook_configuration(&karmada, &dirs.src, webhook_port, &ca).await?;
    p.say("karmada-webhook is ready; its webhook configuration is applied");

    let aggregated_log = component(state, "karmada-aggregated-apiserver")?
        .log
        .clone();
    let clusters: Api<DynamicObject> = Api::all_with(karmada.clone(), &cluster_resource());
    wait_until(
        timeout,
        "the cluster.karmada.io API (aggregated API server)",
        || {
            let clusters = clusters.clone();
            async move { clusters.list(&ListParams::default().limit(1)).await.is_ok() }
        },
    )
    .await
    .with_context(|| format!("see {}", aggregated_log.display()))?;
    p.say("karmada-aggregated-apiserver serves cluster.karmada.io");

    for m in members {
        let port = state.clusters[*m].apiserver_port;
        join(&karmada, &clients[*m], m, port, pki)
            .await
            .with_context(|| format!("joining {m} to Karmada"))?;
    }
    p.say(format!(
        "joined {} to Karmada in push mode",
        members.join(", ")
    ));

    start(state, dir, "karmada-scheduler")?;
    start(state, dir, "karmada-controller-manager")?;
    for name in ["karmada-scheduler", "karmada-controller-manager"] {
        let c = component(state, name)?;
        let health = flag(c, "health-probe-bind-address").context("health address")?;
        let log = c.log.clone();
        wait_until(timeout, &format!("{name} to be healthy"), || {
            http_ok(&health, "/healthz")
        })
        .await
        .with_context(|| format!("see {}", log.display()))?;
    }
    p.say("started karmada-scheduler and karmada-controller-manager");

    let manager_log = component(state, "karmada-controller-manager")?.log.clone();
    wait_until(timeout, "every member's Cluster Ready on Karmada", || {
        let clusters = clusters.clone();
        async move {
            let Ok(list) = clusters.list(&ListParams::default()).await else {
                return false;
            };
            members.iter().all(|m| {
                list.items.iter().any(|c| {
                    c.metadata.name.as_deref() == Some(*m)
                        && c.data["status"]["conditions"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|x| x["type"] == "Ready" && x["status"] == "True")
                })
            })
        }
    })
    .await
    .with_context(|| format!("see {}", manager_log.display()))?;
    p.say(format!(
        "Karmada {VERSION} is up: every member's Cluster is Ready"
    ));
    Ok(())
}

/// Every CRD of the source tree's chart, with the chart's conversion webhook for the
/// bindings (v1alpha1 ↔ v1alpha2), then waits until each is established.
async fn install_crds(
    client: &kube::Client,
    src: &Path,
    webhook_port: u16,
    ca: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let mut files = Vec::new();
    let mut dirs = vec![crds_dir(src)];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = e?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "yaml") {
                files.push(path);
            }
        }
    }
    files.sort();
    let ar = resource(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    );
    let mut names = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f)?;
        let mut crd: serde_json::Value = pinfed::api::yaml::from_str(&text)
            .with_context(|| format!("reading {}", f.display()))?;
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if matches!(
            name.as_str(),
            "resourcebindings.work.karmada.io" | "clusterresourcebindings.work.karmada.io"
        ) {
            crd["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": format!("https://127.0.0.1:{webhook_port}/convert"),
                                 "caBundle": ca},
                "conversionReviewVersions": ["v1"]}});
        }
        apply(client, &ar, None, crd)
            .await
            .with_context(|| format!("{}", f.display()))?;
        names.push(name);
    }
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait_until(timeout, "Karmada's CRDs to be established", || {
        let api = api.clone();
        let names = names.clone();
        async move {
            for n in &names {
                let Ok(crd) = api.get(n).await else {
                    return false;
                };
                let established = crd
                    .status
                    .and_then(|s| s.conditions)
                    .into_iter()
                    .flatten()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                if !established {
                    return false;
                }
            }
            true
        }
    })
    .await
}

/// The stock webhook configuration of the source tree (every mutating and validating
/// webhook Karmada installs), its Service URL replaced by the webhook's loopback port.
async fn apply_webhook_configuration(
    client: &kube::Client,
    src: &Path,
    port: u16,
    ca: &str,
) -> anyhow::Result<()> {
    let path = webhook_configuration(src);
    let text = std::fs::read_to_string(&path)?
        .replace(
            "https://karmada-webhook.karmada-system.svc:443/",
            &format!("https://127.0.0.1:{port}/"),
        )
        .replace("{{caBundle}}", ca);
    let docs: Vec<serde_json::Value> = pinfed::api::yaml::documents(&text)
        .with_context(|| format!("reading {}", path.display()))?;
    for d in docs {
        let kind = d["kind"].as_str().unwrap_or_default().to_string();
        let plural = match kind.as_str() {
            "MutatingWebhookConfiguration" => "mutatingwebhookconfigurations",
            "ValidatingWebhookConfiguration" => "validatingwebhookconfigurations",
            other => bail!("{}: unexpected kind {other:?}", path.display()),
        };
        let ar = resource("admissionregistration.k8s.io", "v1", &kind, plural);
        apply(client, &ar, None, d).await?;
    }
    Ok(())
}

/// Joins `member` (API server on 127.0.0.1:`port`) to Karmada in push mode.
async fn join(
    karmada: &kube::Client,
    member: &kube::Client,
    name: &str,
    port: u16,
    pki: &Pki,
) -> anyhow::Result<()> {
    // In the member: an identity for Karmada with every permission, and a token for it.
    ensure_namespace(member, CLUSTER_NAMESPACE).await?;
    let sa_name = format!("karmada-{name}");
    apply(
        member,
        &resource("", "v1", "ServiceAccount", "serviceaccounts"),
        Some(CLUSTER_NAMESPACE),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": sa_name, "namespace": CLUSTER_NAMESPACE}}),
    )
    .await?;
    apply(
        member,
        &resource(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
        ),
        None,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": sa_name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "cluster-admin"},
               "subjects": [{"kind": "ServiceAccount", "name": sa_name,
                             "namespace": CLUSTER_NAMESPACE}]}),
    )
    .await?;
    let sas: Api<ServiceAccount> = Api::namespaced(member.clone(), CLUSTER_NAMESPACE);
    let token = sas
        .create_token_request(
            &sa_name,
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec {
                    audiences: None,
                    // A year: the topology lives for a test or benchmark run.
                    expiration_seconds: Some(365 * 24 * 3600),
                    bound_object_ref: None,
                }),
                ..Default::default()
            },
        )
        .await
        .context("requesting a token for Karmada in the member")?
        .status
        .and_then(|s| s.token)
        .context("TokenRequest without a token")?;
    let id = Api::<Namespace>::all(member.clone())
        .get("kube-system")
        .await?
        .metadata
        .uid
        .unwrap_or_default();

    // On Karmada: the member's credentials and its Cluster object.
    ensure_namespace(karmada, CLUSTER_NAMESPACE).await?;
    let b64 = |s: &[u8]| base64::engine::general_purpose::STANDARD.encode(s);
    let ca_pem = std::fs::read(pki.ca_crt())?;
    let secrets = resource("", "v1", "Secret", "secrets");
    apply(
        karmada,
        &secrets,
        Some(CLUSTER_NAMESPACE),
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": name, "namespace": CLUSTER_NAMESPACE},
               "data": {"caBundle": b64(&ca_pem), "token": b64(token.as_bytes())}}),
    )
    .await?;
    let impersonator = format!("{name}-impersonator");
    apply(
        karmada,
        &secrets,
        Some(CLUSTER_NAMESPACE),
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": impersonator, "namespace": CLUSTER_NAMESPACE},
               "data": {"token": b64(token.as_bytes())}}),
    )
    .await?;
    // Created, not applied: the aggregated API server's own API.
    let cluster: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
               "metadata": {"name": name},
               "spec": {"id": id, "syncMode": "Push",
                        "apiEndpoint": format!("https://127.0.0.1:{port}"),
                        "secretRef": {"namespace": CLUSTER_NAMESPACE, "name": name},
                        "impersonatorSecretRef": {"namespace": CLUSTER_NAMESPACE,
                                                  "name": impersonator}}}),
    )?;
    let clusters: Api<DynamicObject> = Api::all_with(karmada.clone(), &cluster_resource());
    match clusters.create(&PostParams::default(), &cluster).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).context("creating the Cluster object"),
    }
}

//! The Karmada peer of a topology with `peers: {karmada: true}` (`clusters/compare.yaml`),
//! as the `compare` scenario sees it: a client of its API server (context `karmada` of the
//! topology's kubeconfig), its objects, and its controllers, which the e2e harness runs
//! (stopped and started through `pinfed-e2e stop|start karmada`, sampled by pid from the
//! harness's `state.json`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use testkit::Sample;

use crate::fed::{Fed, condition};
use crate::helpers::wait_for;

pub const VERSION: &str = "v1.18.2";
/// The context, and the harness's cluster name, of the Karmada control plane.
pub const CONTEXT: &str = pinfed::topology::KARMADA_PEER;
/// The controllers whose start is timed and whose memory and CPU are sampled: what
/// `pinfed hub` does on the other side (placement, the writes into members, status).
pub const CONTROLLERS: [&str; 2] = ["karmada-controller-manager", "karmada-scheduler"];

pub struct Karmada {
    pub client: Client,
    state_dir: PathBuf,
    harness: PathBuf,
}

pub fn deployment_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apps", "v1", "Deployment"),
        "deployments",
    )
}

fn policy_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("policy.karmada.io", "v1alpha1", "PropagationPolicy"),
        "propagationpolicies",
    )
}

fn cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.karmada.io", "v1alpha1", "Cluster"),
        "clusters",
    )
}

/// The Deployment the Karmada side creates for workload `name`: the container of
/// [`crate::fed::service`], `replicas` of it.
pub fn deployment(name: &str, replicas: i64) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"pinfed.dev/bench": "true"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "app", "image": "registry.example/bench:1",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}},
        }
    })
}

impl Karmada {
    pub async fn connect(fed: &Fed) -> anyhow::Result<Karmada> {
        let mut cfg = fed
            .config(CONTEXT)
            .await
            .context("the topology needs `peers: {karmada: true}` (clusters/compare.yaml)")?;
        cfg.connect_timeout = Some(Duration::from_secs(5));
        let client = Client::try_from(cfg)?;
        client
            .apiserver_version()
            .await
            .context("Karmada's API server does not answer")?;
        let state_dir = fed
            .kubeconfig
            .parent()
            .context("the kubeconfig has no directory")?
            .to_path_buf();
        let harness = std::env::var_os("PINFED_E2E_HARNESS")
            .map(PathBuf::from)
            .context(
                "PINFED_E2E_HARNESS (the pinfed-e2e binary, which stops and starts Karmada's \
                 controllers) is not set; e2e/bench compare sets it",
            )?;
        Ok(Karmada {
            client,
            state_dir,
            harness,
        })
    }

    pub fn deployments(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &deployment_resource())
    }

    /// Waits until every member's Cluster is Ready on Karmada.
    pub async fn clusters_ready(
        &self,
        members: &[String],
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &cluster_resource());
        wait_for(timeout, "every Cluster Ready on Karmada", || {
            let api = api.clone();
            async move {
                let Ok(list) = api.list(&ListParams::default()).await else {
                    return false;
                };
                members.iter().all(|m| {
                    list.items.iter().any(|c| {
                        c.name_any() == *m && condition(&c.data["status"], "Ready") == Some("True")
                    })
                })
            }
        })
        .await
    }

    /// One PropagationPolicy in `ns` for every bench Deployment there: replicas divided
    /// over all `members`, weighted 1:1 (as pinfed divides a service spread over all
    /// members of equal weight).
    pub async fn apply_policy(&self, ns: &str, members: &[String]) -> anyhow::Result<()> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), ns, &policy_resource());
        let weights: Vec<serde_json::Value> = members
            .iter()
            .map(|m| serde_json::json!({"targetCluster": {"clusterNames": [m]}, "weight": 1}))
            .collect();
        let policy = serde_json::json!({
            "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": "bench", "namespace": ns},
            "spec": {
                "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                       "labelSelector": {"matchLabels": {"pinfed.dev/bench": "true"}}}],
                "placement": {
                    "clusterAffinity": {"clusterNames": members},
                    "replicaScheduling": {
                        "replicaSchedulingType": "Divided",
                        "replicaDivisionPreference": "Weighted",
                        "weightPreference": {"staticWeightList": weights}}}}
        });
        api.patch(
            "bench",
            &PatchParams::apply("pinfed-bench").force(),
            &Patch::Apply(&policy),
        )
        .await
        .context("applying the PropagationPolicy")?;
        Ok(())
    }

    fn harness(&self, args: &[&str]) -> anyhow::Result<()> {
        let out = std::process::Command::new(&self.harness)
            .arg("--state-dir")
            .arg(&self.state_dir)
            .args(args)
            .output()
            .with_context(|| format!("running {}", self.harness.display()))?;
        if !out.status.success() {
            bail!(
                "pinfed-e2e {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Stops karmada-controller-manager and karmada-scheduler (SIGTERM).
    pub fn stop_controllers(&self) -> anyhow::Result<()> {
        let mut args = vec!["stop", CONTEXT];
        for c in CONTROLLERS {
            args.extend(["--component", c]);
        }
        self.harness(&args)
    }

    /// Starts what of Karmada does not run (the controllers stopped above); returns once
    /// their health ports answer.
    pub fn start_controllers(&self) -> anyhow::Result<()> {
        self.harness(&["start", CONTEXT])
    }

    /// The pids of the controllers, from the harness's state.
    pub fn controller_pids(&self) -> anyhow::Result<Vec<u32>> {
        let path = self.state_dir.join("state.json");
        let state: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?,
        )?;
        CONTROLLERS
            .iter()
            .map(|name| {
                state["clusters"][CONTEXT]["components"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["name"] == *name)
                    .and_then(|c| c["pid"].as_u64())
                    .map(|p| p as u32)
                    .with_context(|| format!("no running {name} in {}", path.display()))
            })
            .collect()
    }

    /// RSS and CPU of the controllers together.
    pub fn controllers_sample(&self) -> Option<Sample> {
        let pids = self.controller_pids().ok()?;
        let mut total = Sample {
            rss_bytes: 0,
            peak_rss_bytes: 0,
            cpu_secs: 0.0,
        };
        for pid in pids {
            let s = Sample::of(pid)?;
            total.rss_bytes += s.rss_bytes;
            total.peak_rss_bytes += s.peak_rss_bytes;
            total.cpu_secs += s.cpu_secs;
        }
        Some(total)
    }
}

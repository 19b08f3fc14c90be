//! The clusters of the running topology and the `pinfed` processes of a scenario.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};

use crate::daemon::Daemon;
use crate::helpers::{progress, wait_for};
use crate::settings::Settings;

pub struct Fed {
    pub s: Settings,
    pub clients: BTreeMap<String, Client>,
}

pub fn service_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("compute.pinterest.com", "v1alpha1", "PinterestService"),
        "pinterestservices",
    )
}

pub fn member_cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("federation.pinterest.com", "v1alpha1", "MemberCluster"),
        "memberclusters",
    )
}

impl Fed {
    pub async fn connect(s: Settings) -> anyhow::Result<Fed> {
        let kc = Kubeconfig::read_from(&s.kubeconfig)
            .with_context(|| format!("reading kubeconfig {}", s.kubeconfig.display()))?;
        let mut clients = BTreeMap::new();
        for name in s.topology.cluster_names() {
            let opts = KubeConfigOptions {
                context: Some(name.to_string()),
                ..Default::default()
            };
            let mut cfg = kube::Config::from_custom_kubeconfig(kc.clone(), &opts)
                .await
                .with_context(|| format!("context {name} in {}", s.kubeconfig.display()))?;
            cfg.connect_timeout = Some(Duration::from_secs(5));
            let client = Client::try_from(cfg)?;
            client
                .apiserver_version()
                .await
                .with_context(|| format!("cluster {name} does not answer"))?;
            clients.insert(name.to_string(), client);
        }
        Ok(Fed { s, clients })
    }

    pub fn client(&self, cluster: &str) -> Client {
        self.clients[cluster].clone()
    }

    pub fn hub(&self) -> Client {
        self.client(self.s.hub_name())
    }

    pub fn services(&self, cluster: &str, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client(cluster), ns, &service_resource())
    }

    /// `pinfed join` of every member (idempotent), as tests/support does.
    pub fn join_all(&self) -> anyhow::Result<()> {
        for m in &self.s.topology.members {
            let mut args: Vec<String> = vec![
                "join".into(),
                m.name.clone(),
                "--member-context".into(),
                m.name.clone(),
                "--hub-context".into(),
                self.s.hub_name().into(),
            ];
            if let Some(r) = &m.region {
                args.extend(["--region".into(), r.clone()]);
            }
            if let Some(z) = &m.zone {
                args.extend(["--zone".into(), z.clone()]);
            }
            for (k, v) in &m.labels {
                args.extend(["--label".into(), format!("{k}={v}")]);
            }
            if self.s.is_pull(&m.name) {
                args.extend(["--mode".into(), "pull".into()]);
            }
            // The member policy the e2e topologies use (its namespaces include the
            // agent benchmark's).
            args.extend([
                "--member-policy".into(),
                format!("{}/e2e/member-policy.yaml", env!("CARGO_MANIFEST_DIR")),
            ]);
            let out = std::process::Command::new(&self.s.pinfed)
                .args(&args)
                .env("KUBECONFIG", &self.s.kubeconfig)
                .env_remove("PINFED_CONTEXT")
                .output()
                .with_context(|| format!("running {}", self.s.pinfed.display()))?;
            if !out.status.success() {
                bail!(
                    "pinfed join {} failed: {}",
                    m.name,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        Ok(())
    }

    pub fn spawn(&self, name: &str, args: &[String]) -> anyhow::Result<Daemon> {
        Daemon::spawn(&self.s, name, args)
    }

    /// A hub with leader election (the default), on a free loopback port.
    pub fn spawn_hub(&self, identity: &str) -> anyhow::Result<Daemon> {
        self.spawn_hub_with(identity, &[])
    }

    /// A hub as [`Fed::spawn_hub`], with `extra` arguments after the scenario's own.
    pub fn spawn_hub_with(&self, identity: &str, extra: &[String]) -> anyhow::Result<Daemon> {
        let mut args: Vec<String> = [
            "hub",
            "--context",
            self.s.hub_name(),
            "--identity",
            identity,
            "--metrics-addr",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(format!("127.0.0.1:{}", testkit::free_port()?));
        args.extend(self.s.hub_args.iter().cloned());
        args.extend(extra.iter().cloned());
        self.spawn(identity, &args)
    }

    pub fn spawn_agents(&self) -> anyhow::Result<Vec<Daemon>> {
        self.s
            .members()
            .iter()
            .map(|m| self.spawn_agent(m))
            .collect()
    }

    /// An agent for `member` without leader election, on a free loopback port (in pull
    /// mode for a pull member).
    pub fn spawn_agent(&self, member: &str) -> anyhow::Result<Daemon> {
        self.spawn_agent_with(member, &[])
    }

    /// For the scenarios that time the hub alone (no agent expands anything): a push
    /// member's agent Lease left by an earlier scenario is deleted (a member without one
    /// is judged by its API server alone; a stale one would make it AgentLost), and a
    /// pull member gets an agent that only mirrors (`--pull-only`), its only link to the
    /// hub. Returns those agents, ready.
    pub async fn hub_only_agents(&self) -> anyhow::Result<Vec<Daemon>> {
        let mut agents = Vec::new();
        for m in self.s.members() {
            if self.s.is_pull(&m) {
                agents.push(self.spawn_agent_with(&m, &["--pull-only"])?);
                continue;
            }
            let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
                Api::namespaced(self.client(&m), "pinfed-system");
            match leases
                .delete(&format!("pinfed-agent-{m}"), &Default::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e).context(format!("deleting the agent Lease in {m}")),
            }
        }
        for a in &agents {
            a.wait_http("/readyz", self.s.timeout).await?;
        }
        Ok(agents)
    }

    /// [`Fed::spawn_agent`] with extra flags.
    pub fn spawn_agent_with(&self, member: &str, extra: &[&str]) -> anyhow::Result<Daemon> {
        let mut args: Vec<String> = vec![
            "agent".into(),
            "--context".into(),
            member.into(),
            "--cluster-name".into(),
            member.into(),
            "--no-leader-election".into(),
            "--metrics-addr".into(),
            format!("127.0.0.1:{}", testkit::free_port()?),
        ];
        if self.s.is_pull(member) {
            args.extend(["--mode".into(), "pull".into()]);
        }
        args.extend(extra.iter().map(|a| a.to_string()));
        self.spawn(&format!("agent-{member}"), &args)
    }

    /// Waits until every member's MemberCluster says Ready.
    pub async fn members_ready(&self) -> anyhow::Result<()> {
        let api: Api<DynamicObject> = Api::all_with(self.hub(), &member_cluster_resource());
        let want: BTreeSet<String> = self.s.members().into_iter().collect();
        wait_for(self.s.timeout, "every MemberCluster Ready", || {
            let api = api.clone();
            let want = want.clone();
            async move {
                let Ok(list) = api.list(&ListParams::default()).await else {
                    return false;
                };
                let ready: BTreeSet<String> = list
                    .items
                    .iter()
                    .filter(|m| condition(&m.data["status"], "Ready") == Some("True"))
                    .map(|m| m.name_any())
                    .collect();
                want.is_subset(&ready)
            }
        })
        .await
    }

    pub async fn create_namespace(&self, prefix: &str) -> anyhow::Result<String> {
        self.create_namespace_in(self.s.hub_name(), prefix).await
    }

    pub async fn create_namespace_in(&self, cluster: &str, prefix: &str) -> anyhow::Result<String> {
        let name = testkit::unique_name(prefix);
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"pinfed.dev/bench": "true"}}
        }))?;
        Api::<Namespace>::all(self.client(cluster))
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name} in {cluster}"))?;
        Ok(name)
    }

    /// Deletes every PinterestService of `ns` on the hub (a hub must run to remove the
    /// slices and finalizers), waits until they are gone, then deletes the namespace.
    pub async fn clean_up(&self, ns: &str) {
        let api = self.services(self.s.hub_name(), ns);
        let _ = api
            .delete_collection(&DeleteParams::background(), &ListParams::default())
            .await;
        let gone = wait_for(
            Duration::from_secs(180),
            "the workloads to be deleted",
            || {
                let api = api.clone();
                async move {
                    api.list_metadata(&ListParams::default())
                        .await
                        .is_ok_and(|l| l.items.is_empty())
                }
            },
        )
        .await;
        if let Err(e) = gone {
            progress(&format!("clean-up of {ns}: {e:#}"));
        }
        let _ = Api::<Namespace>::all(self.hub())
            .delete(ns, &DeleteParams::default())
            .await;
    }
}

pub fn condition<'a>(status: &'a serde_json::Value, type_: &str) -> Option<&'a str> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str())
}

pub fn service(name: &str, replicas: i64, spread: Option<i64>) -> serde_json::Value {
    let mut v = serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
        "metadata": {"name": name, "labels": {"pinfed.dev/bench": "true"}},
        "spec": {
            "owner": {"team": "bench", "contact": "bench@example.com"},
            "replicas": replicas,
            "template": {"spec": {"containers": [{
                "name": "app", "image": "registry.example/bench:1",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}},
        }
    });
    if let Some(n) = spread {
        v["spec"]["placement"] = serde_json::json!({"spread": {"minClusters": n}});
    }
    v
}

pub async fn create_service(
    api: &Api<DynamicObject>,
    obj: &serde_json::Value,
) -> anyhow::Result<()> {
    let obj: DynamicObject = serde_json::from_value(obj.clone())?;
    let mut delay = Duration::from_millis(100);
    for attempt in 0.. {
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => return Ok(()),
            // Overload or a dropped connection on a busy machine: retry a few times.
            Err(e)
                if attempt < 5
                    && !matches!(&e, kube::Error::Api(s) if s.code == 409 || s.code == 422) =>
            {
                progress(&format!("create {}: {e}; retrying", obj.name_any()));
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Err(e) => return Err(e).with_context(|| format!("creating {}", obj.name_any())),
        }
    }
    unreachable!()
}

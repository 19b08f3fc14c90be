//! The clusters of the running topology and the `pinfed` processes of a scenario.

use std::ops::Deref;
use std::time::Duration;

use anyhow::{Context, bail};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use testkit::OnDrop;
pub use testkit::federation::condition;
use testkit::federation::{self as kit, ClientTimeouts, DaemonStyle};

use crate::daemon::Daemon;
use crate::helpers::{progress, wait_for};
use crate::settings::Settings;

/// The running topology (testkit's, which this derefs to) and the benchmarks' settings.
pub struct Fed {
    kit: kit::Federation,
    pub s: Settings,
    /// Every member joined by an earlier scenario of this run.
    joined: std::sync::OnceLock<()>,
}

impl Deref for Fed {
    type Target = kit::Federation;
    fn deref(&self) -> &kit::Federation {
        &self.kit
    }
}

pub fn service_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("compute.pinterest.com", "v1alpha1", "PinterestService"),
        "pinterestservices",
    )
}

impl Fed {
    /// Connects to every cluster of the topology and checks that each answers.
    pub async fn connect(s: Settings) -> anyhow::Result<Fed> {
        let kit = kit::Federation::from_env(
            env!("CARGO_BIN_EXE_pinfed"),
            // kube's read timeout: a watch lasts minutes.
            ClientTimeouts {
                connect: Duration::from_secs(5),
                read: None,
            },
            DaemonStyle {
                log_dir: s.log_dir.clone(),
                // PINFED_BENCH_RUST_LOG: the daemons' log filter, e.g. to read why the
                // hub writes each status (`pinfed::hub::workloads::write=debug`).
                rust_log: std::env::var("PINFED_BENCH_RUST_LOG")
                    .unwrap_or_else(|_| "info,kube=warn".into()),
                // Plain text: `report_logs` counts warnings by message.
                no_color: true,
                // A hub stopped gracefully releases its Lease for the next scenario.
                on_drop: OnDrop::Stop(Duration::from_secs(10)),
            },
        )
        .await?;
        if !kit.pinfed.is_file() {
            bail!(
                "no pinfed binary at {} (build it with `cargo build --release --bin pinfed` \
                 and set PINFED_BIN)",
                kit.pinfed.display()
            );
        }
        for (name, client) in kit.clients() {
            client
                .apiserver_version()
                .await
                .with_context(|| format!("cluster {name} does not answer"))?;
        }
        Ok(Fed {
            kit,
            s,
            joined: std::sync::OnceLock::new(),
        })
    }

    /// Joins every member, once a run: a join is idempotent but costs seconds of round
    /// trips a member (3 to 4 minutes at 50), no scenario unjoins, and a scenario's own
    /// hub finds the members as the last one left them.
    pub fn join_all(&self) -> anyhow::Result<()> {
        if self.joined.get().is_none() {
            self.kit.join_all()?;
            let _ = self.joined.set(());
        }
        Ok(())
    }

    /// "push" or "pull", for figures split by mode.
    pub fn mode_of(&self, m: &str) -> &'static str {
        if self.is_pull(m) { "pull" } else { "push" }
    }

    pub fn describe(&self) -> String {
        let kind = if self.pinfed.components().any(|c| c.as_os_str() == "release") {
            "release"
        } else {
            "NOT a release build"
        };
        format!(
            "topology {} ({} members), pinfed {} ({kind}), hub flags: defaults{}",
            self.topology_path.display(),
            self.members().len(),
            self.pinfed.display(),
            if self.s.hub_args.is_empty() {
                String::new()
            } else {
                format!(" + {}", self.s.hub_args.join(" "))
            }
        )
    }

    pub fn services(&self, cluster: &str, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client(cluster), ns, &service_resource())
    }

    pub fn spawn(&self, name: &str, args: &[String]) -> anyhow::Result<Daemon> {
        let inner = self.spawn_pinfed(name, args, &self.kubeconfig)?;
        Ok(Daemon::new(inner))
    }

    /// A hub with leader election (the default), on a free loopback port.
    pub fn spawn_hub(&self, identity: &str) -> anyhow::Result<Daemon> {
        self.spawn_hub_with(identity, &[])
    }

    /// A hub as [`Fed::spawn_hub`], with `extra` arguments after the scenario's own.
    pub fn spawn_hub_with(&self, identity: &str, extra: &[String]) -> anyhow::Result<Daemon> {
        let flags: Vec<&str> = ["--identity", identity]
            .into_iter()
            .chain(self.s.hub_args.iter().chain(extra).map(String::as_str))
            .collect();
        self.spawn(identity, &self.hub_args(&flags)?)
    }

    pub fn spawn_agents(&self) -> anyhow::Result<Vec<Daemon>> {
        self.member_names()
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
        for m in self.member_names() {
            if self.is_pull(&m) {
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
        self.spawn(&format!("agent-{member}"), &self.agent_args(member, extra)?)
    }

    /// Waits until every member's MemberCluster says Ready.
    pub async fn members_ready(&self) -> anyhow::Result<()> {
        Ok(self.kit.members_ready(self.s.timeout).await?)
    }

    pub async fn create_namespace(&self, prefix: &str) -> anyhow::Result<String> {
        self.create_namespace_in(self.hub_name(), prefix).await
    }

    pub async fn create_namespace_in(&self, cluster: &str, prefix: &str) -> anyhow::Result<String> {
        kit::create_namespace(&self.client(cluster), prefix, "pinfed.dev/bench")
            .await
            .with_context(|| format!("in {cluster}"))
    }

    /// Deletes every PinterestService of `ns` on the hub (a hub must run to remove the
    /// slices and finalizers), waits until they are gone, then deletes the namespace.
    pub async fn clean_up(&self, ns: &str) {
        let api = self.services(self.hub_name(), ns);
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
        kit::delete_namespace(&self.hub(), ns).await;
    }
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

//! The member's policy as the agent holds it: the member admins' ConfigMap
//! (`api::member_policy`, read from a watch of that one object) and which namespaces
//! pinfed created (a metadata watch of namespaces). Every reconcile asks it before it
//! creates anything; a change of the policy reconciles every workload again.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::api::member_policy::{
    self, CREATED_LABEL, MemberPolicy, POLICY_CONFIG_MAP, POLICY_KEY, POLICY_NAMESPACE, Refusal,
};
use crate::api::workload::WorkloadKind;
use crate::controller::watch;

/// A policy as read: the policy, or why it cannot be used.
pub type Parsed = Arc<Result<MemberPolicy, String>>;

/// What the agent reads the policy from.
#[derive(Clone)]
pub struct PolicyView {
    config: Store<ConfigMap>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    /// The last policy parsed, by the ConfigMap's resourceVersion ("" when there is none).
    parsed: Arc<Mutex<Option<(String, Parsed)>>>,
}

/// The answer for one workload.
pub enum Verdict {
    Admit,
    Refuse(Refusal),
    /// The policy ConfigMap cannot be read: nothing new is admitted until it is fixed.
    PolicyBroken(String),
}

impl PolicyView {
    /// The policy now: the default when the ConfigMap does not exist.
    pub fn policy(&self) -> Parsed {
        let cm = self
            .config
            .get(&ObjectRef::new(POLICY_CONFIG_MAP).within(POLICY_NAMESPACE));
        let version = cm
            .as_ref()
            .and_then(|c| c.resource_version())
            .unwrap_or_default();
        let mut parsed = self.parsed.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((v, p)) = parsed.as_ref()
            && *v == version
        {
            return p.clone();
        }
        let p = Arc::new(match cm.as_ref() {
            None => Ok(MemberPolicy::default()),
            Some(cm) => match cm.data.as_ref().and_then(|d| d.get(POLICY_KEY)) {
                Some(text) => MemberPolicy::parse(text).map_err(|e| e.to_string()),
                None => Err(format!(
                    "{POLICY_NAMESPACE}/{POLICY_CONFIG_MAP} has no key {POLICY_KEY}"
                )),
            },
        });
        if let Err(e) = p.as_ref() {
            tracing::warn!(error = %e, "the member policy cannot be read: nothing new is admitted until it is fixed");
        }
        *parsed = Some((version, p.clone()));
        p
    }

    /// Whether pinfed created `namespace` (its label), from the watch, or from the API
    /// server when the watch has not seen it yet (a slice can arrive before its
    /// namespace's event).
    async fn created(&self, client: &Client, namespace: &str) -> Result<bool, kube::Error> {
        let labelled = |labels: Option<&std::collections::BTreeMap<String, String>>| {
            labels
                .and_then(|l| l.get(CREATED_LABEL.0))
                .is_some_and(|v| v == CREATED_LABEL.1)
        };
        if let Some(ns) = self.namespaces.get(&ObjectRef::new(namespace)) {
            return Ok(labelled(ns.metadata.labels.as_ref()));
        }
        Ok(Api::<Namespace>::all(client.clone())
            .get_metadata_opt(namespace)
            .await?
            .is_some_and(|ns| labelled(ns.metadata.labels.as_ref())))
    }

    /// The verdict on a workload's generated objects, as (kind, name, body).
    pub async fn judge(
        &self,
        client: &Client,
        namespace: &str,
        kind: WorkloadKind,
        objects: &[(&str, &str, &serde_json::Value)],
    ) -> Result<Verdict, kube::Error> {
        let policy = self.policy();
        let policy = match policy.as_ref() {
            Ok(p) => p,
            Err(e) => return Ok(Verdict::PolicyBroken(e.clone())),
        };
        let created = self.created(client, namespace).await?;
        Ok(
            match member_policy::admit(policy, namespace, created, kind, objects) {
                Ok(()) => Verdict::Admit,
                Err(r) => Verdict::Refuse(r),
            },
        )
    }
}

/// Starts following the policy and the namespaces (each watch lives as long as the
/// returned handles); `changed` is called on every change of the policy ConfigMap.
pub fn follow(
    client: &Client,
    changed: impl Fn() + Send + 'static,
) -> (PolicyView, [crate::controller::mirror::Watching; 2]) {
    use crate::controller::mirror::Watching;
    let (config, config_writer) = reflector::store::<ConfigMap>();
    let (namespaces, ns_writer) = reflector::store::<PartialObjectMeta<Namespace>>();
    let config_stream = watcher(
        Api::<ConfigMap>::namespaced(client.clone(), POLICY_NAMESPACE),
        watcher::Config::default().fields(&format!("metadata.name={POLICY_CONFIG_MAP}")),
    )
    .backoff(watch::backoff())
    .reflect(config_writer)
    .touched_objects();
    let config_task =
        watch::skip_errors("member policy".into(), config_stream).for_each(move |_| {
            changed();
            futures::future::ready(())
        });
    let ns_stream = watcher(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        watcher::Config::default(),
    )
    .backoff(watch::backoff())
    .modify(|n| n.managed_fields_mut().clear())
    .reflect(ns_writer)
    .touched_objects();
    let ns_task =
        watch::skip_errors("namespaces".into(), ns_stream).for_each(|_| futures::future::ready(()));
    let view = PolicyView {
        config,
        namespaces,
        parsed: Default::default(),
    };
    (
        view,
        [Watching::spawn(config_task), Watching::spawn(ns_task)],
    )
}

/// Waits until both watches have listed (each reconcile needs them).
pub async fn ready(view: &PolicyView) -> anyhow::Result<()> {
    view.config.wait_until_ready().await?;
    view.namespaces.wait_until_ready().await?;
    Ok(())
}

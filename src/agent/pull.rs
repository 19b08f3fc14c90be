//! Pull mode: the hub cannot reach this member (NAT, firewall) or holds no credential for
//! it. The agent connects to the hub instead, with a ServiceAccount of the member's own
//! namespace there (`pinfed join NAME --mode pull` makes it and leaves a kubeconfig for
//! it in the member's Secret `pinfed-system/pinfed-hub-kubeconfig`), and:
//!
//! - mirrors the MemberSlices of its namespace into the member as slices (the slice
//!   contract is unchanged, so expansion is too), with the bundles they reference and
//!   the hub's RuntimeProfiles; removes what the hub removed;
//! - writes each slice's status back into its MemberSlice;
//! - renews its Lease there (the hub's evidence that it runs) and reports the member's
//!   capacity, version and health into the MemberCluster status;
//! - renews its own token before it expires.
//!
//! The hub being out of reach stops none of the member's workloads: the agent keeps
//! reconciling them and catches up (a relist) when the hub is back.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use base64::Engine;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};

use crate::api::federation::{AgentReport, MemberCluster};
use crate::api::member_slice::{
    MemberReport, MemberSlice, MemberSliceStatus, agent_lease_name, pull_namespace,
};
use crate::api::runtime_profile::RuntimeProfile;
use crate::api::workload::WorkloadKind;
use crate::controller::tokens;
use crate::expand::bundle::{DROP_NAMESPACE, LABEL_BUNDLE};
use crate::placement::capacity;

/// The member Secret holding the agent's kubeconfig for the hub (key `kubeconfig`).
pub const HUB_KUBECONFIG_SECRET: &str = "pinfed-hub-kubeconfig";
/// Where that Secret lives in the member.
pub const AGENT_NAMESPACE: &str = "pinfed-system";
/// The agent's ServiceAccount on the hub, in the member's pull namespace.
pub const PULL_SERVICE_ACCOUNT: &str = "pinfed-agent";
/// Field manager of everything the agent mirrors from the hub into the member, and of
/// what it writes on the hub (MemberSlice status, its Lease).
pub const PULL_FIELD_MANAGER: &str = "pinfed-agent-pull";
/// Field manager of the agent's report in the MemberCluster status.
pub const REPORT_FIELD_MANAGER: &str = "pinfed-agent-report";
/// How long the agent's token for the hub lives (renewed at two thirds).
pub const HUB_TOKEN_SECS: i64 = 3 * 24 * 3600;
const KUBECONFIG_KEY: &str = "kubeconfig";
/// The Lease is renewed this often; the hub judges the agent lost after its grace.
const LEASE_EVERY: Duration = Duration::from_secs(5);
const LEASE_DURATION_SECS: i32 = 15;
/// The member report is written this often (and at once on a change of nodes).
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// Why the agent cannot use its hub credential: each says which.
#[derive(Debug, thiserror::Error)]
pub enum HubCredentialError {
    #[error(
        "the member has no Secret {AGENT_NAMESPACE}/{HUB_KUBECONFIG_SECRET} with a `kubeconfig` \
         key: join this member in pull mode (`pinfed join NAME --mode pull`)"
    )]
    Missing,
    #[error("the kubeconfig in {AGENT_NAMESPACE}/{HUB_KUBECONFIG_SECRET} is invalid: {0}")]
    Invalid(String),
    #[error(
        "the hub refused the credential in {AGENT_NAMESPACE}/{HUB_KUBECONFIG_SECRET} \
         (expired or revoked): {0}; join this member again with `pinfed join NAME --mode pull`"
    )]
    Refused(String),
    #[error(
        "the credential in {AGENT_NAMESPACE}/{HUB_KUBECONFIG_SECRET} is {found:?} on the hub, \
         not member {member:?}'s agent ({expected:?}): it belongs to another member's namespace"
    )]
    OtherMember {
        member: String,
        found: String,
        expected: String,
    },
    #[error("the hub cannot be reached: {0}")]
    Unreachable(String),
}

/// The hub identity a member's agent must have.
pub fn expected_identity(member: &str) -> String {
    format!(
        "system:serviceaccount:{}:{PULL_SERVICE_ACCOUNT}",
        pull_namespace(member)
    )
}

/// Checks who the hub says a credential is against the member it is for.
pub fn check_identity(member: &str, found: &str) -> Result<(), HubCredentialError> {
    let expected = expected_identity(member);
    if found == expected {
        return Ok(());
    }
    Err(HubCredentialError::OtherMember {
        member: member.to_string(),
        found: found.to_string(),
        expected,
    })
}

/// The hub kubeconfig from the member's Secret.
async fn read_hub_kubeconfig(member: &Client) -> Result<String, HubCredentialError> {
    let secret = Api::<Secret>::namespaced(member.clone(), AGENT_NAMESPACE)
        .get_opt(HUB_KUBECONFIG_SECRET)
        .await
        .map_err(|e| HubCredentialError::Invalid(format!("reading it: {e}")))?
        .ok_or(HubCredentialError::Missing)?;
    let bytes = secret
        .data
        .and_then(|mut d| d.remove(KUBECONFIG_KEY))
        .ok_or(HubCredentialError::Missing)?;
    String::from_utf8(bytes.0).map_err(|e| HubCredentialError::Invalid(e.to_string()))
}

/// A client for the hub, checked to be this member's agent there.
pub async fn connect(
    member: &Client,
    cluster: &str,
) -> Result<(Client, String), HubCredentialError> {
    let text = read_hub_kubeconfig(member).await?;
    let hub = tokens::client_from_kubeconfig(&text)
        .await
        .map_err(HubCredentialError::Invalid)?;
    let who = tokens::who_am_i(&hub).await.map_err(|e| match &e {
        kube::Error::Api(s) if s.code == 401 => HubCredentialError::Refused(s.message.clone()),
        _ => HubCredentialError::Unreachable(crate::controller::Chain(&e).to_string()),
    })?;
    check_identity(cluster, &who)?;
    Ok((hub, text))
}

/// Runs the pull side until the process ends: connects, mirrors, reports; on a refused
/// or broken credential it says which and tries again (the member's workloads keep
/// running meanwhile).
pub async fn run(member: Client, cluster: String, identity: String) {
    let mut wait = Duration::from_secs(1);
    loop {
        match connect(&member, &cluster).await {
            Ok((hub, kubeconfig)) => {
                tracing::info!(hub_namespace = %pull_namespace(&cluster), "connected to the hub (pull mode)");
                wait = Duration::from_secs(1);
                let why = run_connected(&hub, &member, &cluster, &identity, &kubeconfig).await;
                tracing::warn!(reason = %format!("{why:#}"), "pull connection ended; connecting again");
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot use the hub credential");
                wait = (wait * 2).min(Duration::from_secs(30));
            }
        }
        tokio::time::sleep(wait).await;
    }
}

/// Everything the agent does while connected; returns why it stopped (a renewed token or
/// a changed kubeconfig: connect again).
async fn run_connected(
    hub: &Client,
    member: &Client,
    cluster: &str,
    identity: &str,
    kubeconfig: &str,
) -> anyhow::Error {
    let ns = pull_namespace(cluster);
    // The hub's watches get a client of their own whose read timeout outlasts a watch.
    let watching = match tokens::watch_client_from_kubeconfig(kubeconfig).await {
        Ok(c) => c,
        Err(e) => return anyhow::anyhow!("a watch client for the hub: {e}"),
    };
    // Whether the mirror has slices to write: their status reports wait for them.
    let (mirroring, mirror_busy) = tokio::sync::watch::channel(false);
    // MemberSlices the hub (re)wrote without a report: their last report is sent again.
    let (unreported, unreported_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::select! {
        e = renew_lease(hub, member, &ns, cluster, identity) => e,
        e = report(hub, member, cluster) => e,
        e = mirror_slices(hub, &watching, member, &ns, &mirroring, &unreported) => e,
        e = report_slice_status(hub, member, &ns, mirror_busy, unreported_rx) => e,
        e = mirror_bundles::<Secret>(&watching, member, &ns) => e,
        e = mirror_bundles::<ConfigMap>(&watching, member, &ns) => e,
        e = mirror_profiles(&watching, member) => e,
        e = renew_token(hub, member, &ns, kubeconfig) => e,
    }
}

/// Renews the agent's Lease in its namespace on the hub — only while the member's API
/// server answers: to the hub, a member that is down and an agent that is down are both
/// lost (it cannot reach the member to tell them apart).
async fn renew_lease(
    hub: &Client,
    member: &Client,
    ns: &str,
    cluster: &str,
    identity: &str,
) -> anyhow::Error {
    let api: Api<Lease> = Api::namespaced(hub.clone(), ns);
    let name = agent_lease_name(cluster);
    let mut failures = 0u32;
    loop {
        let answers = tokio::time::timeout(Duration::from_secs(3), member.apiserver_version())
            .await
            .is_ok_and(|r| r.is_ok());
        if !answers {
            tracing::warn!(
                "the member's API server does not answer; the agent's Lease on the hub is not renewed"
            );
            tokio::time::sleep(LEASE_EVERY).await;
            continue;
        }
        let lease =
            crate::controller::leader::lease_renewal(&name, ns, identity, LEASE_DURATION_SECS);
        let renewing_at = Timestamp::now();
        match api
            .patch(
                &name,
                &PatchParams::apply(PULL_FIELD_MANAGER).force(),
                &Patch::Apply(&lease),
            )
            .await
        {
            Ok(_) => {
                failures = 0;
                vouch(hub, member, cluster, renewing_at).await;
            }
            Err(kube::Error::Api(s)) if s.code == 401 => {
                return anyhow::anyhow!("the hub refused the agent's credential: {}", s.message);
            }
            Err(e) => {
                failures += 1;
                if failures == 1 || failures.is_multiple_of(12) {
                    tracing::warn!(error = %crate::controller::Chain(&e), "could not renew the agent's Lease on the hub");
                }
            }
        }
        tokio::time::sleep(LEASE_EVERY).await;
    }
}

/// How long the fence Lease this agent renews vouches: a little over its renewal period,
/// under the hub's member grace (its default 40 s; at least 8 s in our tests).
const PULL_VOUCH_SECS: i32 = 7;

/// The hub's word for a pull member (`controller::fence`): the hub cannot write into
/// the member, so the agent renews the fence Lease there while the hub takes its own
/// Lease renewals — only while the hub counts the member Ready and not lost (a member the
/// hub recorded as lost has its epoch changed on return, and the hub rewrites the slices
/// first), with the epoch the MemberCluster records. Failures only delay new shards.
async fn vouch(hub: &Client, member: &Client, cluster: &str, renewed: Timestamp) {
    use crate::controller::fence;
    let read = Api::<kube::api::DynamicObject>::all_with(
        hub.clone(),
        &kube::api::ApiResource::erase::<MemberCluster>(&()),
    )
    .get(cluster)
    .await
    .map_err(anyhow::Error::from)
    .and_then(crate::controller::mirror::decode_object::<MemberCluster>);
    let mc = match read {
        Ok((mc, _)) => mc,
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "could not read this member's MemberCluster: its job sets start no new shard meanwhile");
            return;
        }
    };
    let status = mc.status.unwrap_or_default();
    let ready = crate::api::common::find_condition(
        &status.conditions,
        crate::api::common::condition_types::READY,
    )
    .is_some_and(|c| c.status == crate::api::common::ConditionStatus::True);
    if !ready || status.lost_time.is_some() {
        tracing::info!(
            "the hub does not count this member Ready yet: its job sets start no new shard"
        );
        return;
    }
    let epoch = fence::member_epoch(status.returned_time.as_ref().map(|t| t.0));
    let body = fence::renewal(fence::FENCE_NAMESPACE, &epoch, PULL_VOUCH_SECS, renewed);
    if let Err(e) = Api::<Lease>::namespaced(member.clone(), fence::FENCE_NAMESPACE)
        .patch(
            fence::FENCE_LEASE,
            &PatchParams::apply(PULL_FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
    {
        tracing::warn!(error = %crate::controller::Chain(&e), "could not renew the fence Lease in the member");
    }
}

/// The member's capacity, version and health, into its MemberReport on the hub (the one
/// object of its kind this agent may write; `pinfed join` created it).
async fn report(hub: &Client, member: &Client, cluster: &str) -> anyhow::Error {
    let (nodes, node_writer) = reflector::store::<Node>();
    let (pods, pod_writer) = reflector::store::<Pod>();
    let node_changes = Arc::new(tokio::sync::Notify::new());
    let nodes_watch = {
        let changed = node_changes.clone();
        watcher(Api::<Node>::all(member.clone()), watcher::Config::default())
            .backoff(crate::controller::watch::backoff())
            .modify(capacity::trim_node)
            .reflect(node_writer)
            .for_each(move |_| {
                changed.notify_one();
                futures::future::ready(())
            })
    };
    let pods_watch = watcher(Api::<Pod>::all(member.clone()), watcher::Config::default())
        .backoff(crate::controller::watch::backoff())
        .modify(capacity::trim_pod)
        .reflect(pod_writer)
        .for_each(|_| futures::future::ready(()));
    let _watches = (
        crate::controller::mirror::Watching::spawn(nodes_watch),
        crate::controller::mirror::Watching::spawn(pods_watch),
    );
    let _ = tokio::time::timeout(Duration::from_secs(15), async {
        let _ = nodes.wait_until_ready().await;
        let _ = pods.wait_until_ready().await;
    })
    .await;
    let api: Api<MemberReport> = Api::namespaced(hub.clone(), &pull_namespace(cluster));
    let name = agent_lease_name(cluster);
    loop {
        let report = member_report(member, &nodes, &pods).await;
        let patch = serde_json::json!({
            "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "MemberReport",
            "status": {"report": report},
        });
        match api
            .patch_status(
                &name,
                &PatchParams::apply(REPORT_FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 401 => {
                return anyhow::anyhow!("the hub refused the agent's credential: {}", s.message);
            }
            Err(e) => {
                tracing::warn!(error = %crate::controller::Chain(&e), "could not write the member report on the hub")
            }
        }
        // At once when nodes change (a pool added or cordoned), else on the timer.
        let _ = tokio::time::timeout(REPORT_EVERY, node_changes.notified()).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn member_report(member: &Client, nodes: &Store<Node>, pods: &Store<Pod>) -> AgentReport {
    let version = tokio::time::timeout(Duration::from_secs(5), member.apiserver_version()).await;
    let (version, message) = match version {
        Ok(Ok(v)) => (Some(v.git_version), None),
        Ok(Err(e)) => (None, Some(format!("the member's API server: {e}"))),
        Err(_) => (
            None,
            Some("the member's API server did not answer within 5s".into()),
        ),
    };
    let nodes = nodes.state();
    let pods = pods.state();
    let usage = capacity::node_usage(
        nodes.iter().map(|n| n.as_ref()),
        pods.iter().map(|p| p.as_ref()),
    );
    // The workloads' pods per node: the hub chooses preemption victims from them.
    let running: Vec<capacity::WorkloadPod> = pods
        .iter()
        .filter_map(|p| capacity::workload_pod(p))
        .collect();
    let mut on_nodes = capacity::workload_reports(&running);
    let mut node_pools = capacity::to_pools(&usage);
    for n in node_pools.iter_mut().flat_map(|p| p.nodes.iter_mut()) {
        n.workloads = on_nodes.remove(&n.name).unwrap_or_default();
    }
    AgentReport {
        time: Some(Time(Timestamp::now())),
        healthy: version.is_some(),
        kubernetes_version: version,
        message,
        node_pools,
    }
}

/// The kind and (namespace, name) of the slice a MemberSlice carries.
fn carried(ms: &MemberSlice) -> Option<(WorkloadKind, String, String)> {
    let s = &ms.spec.slice;
    Some((
        WorkloadKind::from_kind(s["kind"].as_str()?)?,
        s["metadata"]["namespace"].as_str()?.to_string(),
        s["metadata"]["name"].as_str()?.to_string(),
    ))
}

/// Applies a MemberSlice's slice into the member (its namespace made first); a failure is
/// written into the MemberSlice's status for the hub to show.
async fn apply_slice(
    hub: &Client,
    member: &Client,
    ns: &str,
    ms: &MemberSlice,
    namespaces: &std::sync::Mutex<BTreeSet<String>>,
) -> bool {
    let Some((kind, namespace, name)) = carried(ms) else {
        tracing::warn!(member_slice = %ms.name_any(), "a MemberSlice without a slice of a known kind; ignored");
        return false;
    };
    let known = namespaces.lock().is_ok_and(|n| n.contains(&namespace));
    let result = async {
        if !known {
            crate::controller::apply::ensure_namespace_labelled(
                member,
                &namespace,
                PULL_FIELD_MANAGER,
                crate::controller::apply::WORKLOAD_NAMESPACE_LABELS,
            )
            .await
            .map_err(|e| e.to_string())?;
        }
        Api::<DynamicObject>::namespaced_with(
            member.clone(),
            &namespace,
            &crate::api::kind::api_resource(kind),
        )
        .patch(
            &name,
            &PatchParams::apply(PULL_FIELD_MANAGER).force(),
            &Patch::Apply(&ms.spec.slice),
        )
        .await
        .map_err(|e| crate::controller::Chain(&e).to_string())
    }
    .await;
    let error = result.err();
    if let Ok(mut n) = namespaces.lock() {
        if error.is_none() {
            n.insert(namespace.clone());
        } else {
            // A namespace deleted meanwhile is made again next time.
            n.remove(&namespace);
        }
    }
    if let Some(e) = &error {
        tracing::warn!(kind = %kind, namespace = %namespace, name = %name, error = %e, "could not apply the slice in the member");
    }
    let had = ms.status.as_ref().and_then(|s| s.error.clone());
    if had != error {
        let patch = serde_json::json!({
            "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "MemberSlice",
            "status": {"error": error},
        });
        let _ = Api::<MemberSlice>::namespaced(hub.clone(), ns)
            .patch_status(
                &ms.name_any(),
                &PatchParams::apply(&format!("{PULL_FIELD_MANAGER}-errors")).force(),
                &Patch::Apply(&patch),
            )
            .await;
    }
    error.is_none()
}

/// Deletes the member's slice `namespace/name` of `kind` when the hub wrote it for
/// `hub_uid` (or for any hub resource, when `hub_uid` is `None`); only that object.
/// Whether it is done (gone, or not the hub's to remove); `false` when the member did not
/// answer, to be retried.
async fn delete_slice(
    member: &Client,
    kind: WorkloadKind,
    namespace: &str,
    name: &str,
    hub_uid: Option<&str>,
) -> bool {
    let api = Api::<DynamicObject>::namespaced_with(
        member.clone(),
        namespace,
        &crate::api::kind::api_resource(kind),
    );
    let found = match api.get_metadata_opt(name).await {
        Ok(Some(found)) => found,
        Ok(None) => return true,
        Err(_) => return false,
    };
    let owner = found
        .labels()
        .get(crate::api::member_slice::LABEL_HUB_UID)
        .cloned();
    if owner.is_none() || hub_uid.is_some_and(|u| owner.as_deref() != Some(u)) {
        return true;
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: found.uid(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(name, &params).await {
        Ok(_) => {
            tracing::info!(kind = %kind, namespace, name, "removed a slice the hub removed");
            true
        }
        Err(kube::Error::Api(s)) if s.code == 404 => true,
        Err(e) => {
            tracing::warn!(kind = %kind, namespace, name, error = %e, "could not remove a slice the hub removed (retried)");
            false
        }
    }
}

/// How often applies and removals the member refused (or did not answer) are retried.
const RETRY_EVERY: Duration = Duration::from_secs(3);

/// MemberSlices mirrored into the member at once (each slice's own changes in order).
const MIRROR_CONCURRENCY: usize = 16;

/// The longest slice status reports wait for the mirror's slices.
const REPORTS_WAIT_FOR_SLICES: Duration = Duration::from_secs(2);

/// What the mirror does for one MemberSlice.
enum MirrorOp {
    Apply(Box<MemberSlice>),
    /// The slice (kind, namespace, name) of a removed MemberSlice, and its hub uid.
    Remove(WorkloadKind, String, String, Option<String>),
}

async fn mirror_one(
    hub: &Client,
    member: &Client,
    ns: &str,
    namespaces: &std::sync::Mutex<BTreeSet<String>>,
    name: String,
    op: MirrorOp,
) -> (String, Option<MirrorOp>) {
    let done = match &op {
        MirrorOp::Apply(ms) => apply_slice(hub, member, ns, ms, namespaces).await,
        MirrorOp::Remove(kind, namespace, name, uid) => {
            delete_slice(member, *kind, namespace, name, uid.as_deref()).await
        }
    };
    // Not done: returned, to be retried.
    (name, (!done).then_some(op))
}

/// Mirrors the MemberSlices of the agent's hub namespace into the member; after every
/// (re)list, removes the member's slices the hub no longer has (the hub removed them
/// while this agent was away). Up to [`MIRROR_CONCURRENCY`] slices are written at once,
/// each MemberSlice's changes in the order the watch brings them.
async fn mirror_slices(
    hub: &Client,
    watching: &Client,
    member: &Client,
    ns: &str,
    mirroring: &tokio::sync::watch::Sender<bool>,
    unreported: &tokio::sync::mpsc::UnboundedSender<String>,
) -> anyhow::Error {
    use crate::controller::keyed_work::KeyedWork;
    use futures::stream::FuturesUnordered;

    let api: Api<MemberSlice> = Api::namespaced(watching.clone(), ns);
    let mut stream = watcher(api, crate::controller::watch::config())
        .backoff(crate::controller::watch::backoff())
        .boxed();
    let mut listing: Option<BTreeSet<(WorkloadKind, String, String)>> = None;
    let namespaces = std::sync::Mutex::new(BTreeSet::new());
    // MemberSlice → the generation last offered to apply (a failed apply is retried from
    // `failed`): an event at that generation (our own status write) needs nothing.
    let mut offered: HashMap<String, i64> = HashMap::new();
    // What the member refused or did not answer (its API server restarting): the latest
    // MemberSlice to apply, the slice to remove, and whether the orphan sweep is owed.
    // Retried on a timer: no further event may come for them.
    let mut failed: HashMap<String, MemberSlice> = HashMap::new();
    let mut removals: HashMap<String, (WorkloadKind, String, String, Option<String>)> =
        HashMap::new();
    let mut sweep_owed: Option<BTreeSet<(WorkloadKind, String, String)>> = None;
    let mut work: KeyedWork<String, MirrorOp> = KeyedWork::new(MIRROR_CONCURRENCY);
    let mut running = FuturesUnordered::new();
    let mut retry = tokio::time::interval(RETRY_EVERY);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut offers: Vec<(String, MirrorOp)> = Vec::new();
    loop {
        for (name, op) in offers.drain(..) {
            if let Some((name, op)) = work.offer(name, op) {
                running.push(mirror_one(hub, member, ns, &namespaces, name, op));
            }
        }
        let busy_now = !work.is_idle();
        mirroring.send_if_modified(|busy| std::mem::replace(busy, busy_now) != busy_now);
        let ev = tokio::select! {
            Some((name, undone)) = running.next(), if !running.is_empty() => {
                // A newer change of the same MemberSlice supersedes the retry.
                match undone {
                    Some(_) if work.waits(&name) => {}
                    Some(MirrorOp::Apply(ms)) => {
                        failed.insert(name.clone(), *ms);
                    }
                    Some(MirrorOp::Remove(kind, namespace, slice, uid)) => {
                        removals.insert(name.clone(), (kind, namespace, slice, uid));
                    }
                    None => {}
                }
                for (name, op) in work.finished(&name) {
                    running.push(mirror_one(hub, member, ns, &namespaces, name, op));
                }
                continue;
            }
            ev = stream.next() => match ev {
                Some(ev) => ev,
                None => break,
            },
            _ = retry.tick() => {
                for (name, ms) in std::mem::take(&mut failed) {
                    offers.push((name, MirrorOp::Apply(Box::new(ms))));
                }
                for (name, (kind, namespace, slice, uid)) in std::mem::take(&mut removals) {
                    offers.push((name, MirrorOp::Remove(kind, namespace, slice, uid)));
                }
                if let Some(wanted) = sweep_owed.take()
                    && !remove_unwanted(member, &wanted).await
                {
                    sweep_owed = Some(wanted);
                }
                continue;
            }
        };
        // A MemberSlice without a report (the hub made it again after removing it, or its
        // status was cleared) gets the last one again: a slice in the member that did not
        // change since brings no event of its own to report.
        if let Ok(watcher::Event::Apply(ms) | watcher::Event::InitApply(ms)) = &ev
            && ms
                .status
                .as_ref()
                .and_then(|s| s.slice_generation)
                .is_none()
        {
            let _ = unreported.send(ms.name_any());
        }
        match ev {
            Ok(watcher::Event::Init) => listing = Some(BTreeSet::new()),
            Ok(watcher::Event::InitApply(ms)) => {
                if let (Some(l), Some(key)) = (listing.as_mut(), carried(&ms)) {
                    l.insert(key);
                }
                failed.remove(&ms.name_any());
                removals.remove(&ms.name_any());
                offered.insert(ms.name_any(), ms.metadata.generation.unwrap_or(0));
                offers.push((ms.name_any(), MirrorOp::Apply(Box::new(ms))));
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(wanted) = listing.take()
                    && !remove_unwanted(member, &wanted).await
                {
                    sweep_owed = Some(wanted);
                }
            }
            // A MemberSlice's own status write (ours) comes back as an event too: its spec
            // (generation) is unchanged, so there is nothing to apply again.
            Ok(watcher::Event::Apply(ms))
                if offered.get(&ms.name_any()) == ms.metadata.generation.as_ref() => {}
            Ok(watcher::Event::Apply(ms)) => {
                // An owed orphan sweep must not take what arrived since its list.
                if let (Some(w), Some(key)) = (sweep_owed.as_mut(), carried(&ms)) {
                    w.insert(key);
                }
                failed.remove(&ms.name_any());
                removals.remove(&ms.name_any());
                offered.insert(ms.name_any(), ms.metadata.generation.unwrap_or(0));
                offers.push((ms.name_any(), MirrorOp::Apply(Box::new(ms))));
            }
            Ok(watcher::Event::Delete(ms)) => {
                offered.remove(&ms.name_any());
                failed.remove(&ms.name_any());
                if let Some((kind, namespace, name)) = carried(&ms) {
                    if let Some(w) = sweep_owed.as_mut() {
                        w.remove(&(kind, namespace.clone(), name.clone()));
                    }
                    let uid = ms
                        .labels()
                        .get(crate::api::member_slice::LABEL_HUB_UID)
                        .cloned();
                    offers.push((ms.name_any(), MirrorOp::Remove(kind, namespace, name, uid)));
                }
            }
            Err(kube::runtime::watcher::Error::InitialListFailed(kube::Error::Api(s)))
            | Err(kube::runtime::watcher::Error::WatchStartFailed(kube::Error::Api(s)))
                if s.code == 401 =>
            {
                return anyhow::anyhow!("the hub refused the agent's credential: {}", s.message);
            }
            Err(e) => tracing::debug!(error = %e, "MemberSlice watch error (retrying)"),
        }
    }
    anyhow::anyhow!("the MemberSlice watch ended")
}

/// Removes the member's hub-written slices that are not in `wanted`.
/// Whether every kind was listed and every removal done (else the sweep is owed again).
async fn remove_unwanted(
    member: &Client,
    wanted: &BTreeSet<(WorkloadKind, String, String)>,
) -> bool {
    let mut done = true;
    for kind in WorkloadKind::ALL {
        let api =
            Api::<DynamicObject>::all_with(member.clone(), &crate::api::kind::api_resource(kind));
        let Ok(list) = api
            .list_metadata(&ListParams::default().labels(crate::api::member_slice::LABEL_HUB_NAME))
            .await
        else {
            done = false;
            continue;
        };
        for o in list.items {
            let (namespace, name) = (o.namespace().unwrap_or_default(), o.name_any());
            if !wanted.contains(&(kind, namespace.clone(), name.clone())) {
                done &= delete_slice(member, kind, &namespace, &name, None).await;
            }
        }
    }
    done
}

/// The MemberSlice status for a slice as the member stores it.
pub fn slice_report(o: &DynamicObject, now: Timestamp) -> MemberSliceStatus {
    MemberSliceStatus {
        slice: o.data.get("status").cloned().filter(|s| !s.is_null()),
        slice_generation: o.metadata.generation,
        hub_generation: o
            .annotations()
            .get(crate::api::member_slice::ANNOTATION_HUB_GENERATION)
            .and_then(|g| g.parse().ok()),
        reported_time: Some(Time(now)),
        error: None,
    }
}

/// Of the latest report per MemberSlice, those to write: what changed since the last
/// write. A slice the agent has not reported on yet (no status) is not news for the hub:
/// its first report comes with the slice's first status (one write per slice in a first
/// sync, not two).
fn due_reports(
    latest: HashMap<String, MemberSliceStatus>,
    written: &HashMap<String, MemberSliceStatus>,
) -> Vec<(String, MemberSliceStatus)> {
    latest
        .into_iter()
        .filter(|(name, status)| match written.get(name) {
            None => status.slice.is_some(),
            Some(old) => {
                old.slice != status.slice
                    || old.slice_generation != status.slice_generation
                    || old.hub_generation != status.hub_generation
            }
        })
        .collect()
}

/// What the member's slice watches say, per MemberSlice name.
#[derive(Debug)]
enum SliceEvent {
    /// A slice as it is now; `relisting`: one of a watch's (re)list.
    Seen {
        kind: WorkloadKind,
        name: String,
        report: MemberSliceStatus,
        relisting: bool,
    },
    /// A slice deleted in the member.
    Deleted(String),
    /// The watch of `kind`'s slices (re)lists them: after a watch gap, a slice deleted
    /// meanwhile brings no event, only its absence from the list.
    Relist(WorkloadKind),
    /// That (re)list is complete.
    Relisted(WorkloadKind),
}

/// The slices each watch has (re)listed so far, while it (re)lists.
type Relisting = HashMap<WorkloadKind, std::collections::HashSet<String>>;

/// Folds the slices' events into the latest reports to write. A deleted slice's last
/// report is forgotten too (a long-lived agent would otherwise keep one for every slice it
/// ever held), and so is that of a slice a watch's re-list no longer shows (deleted while
/// the watch was away).
fn fold_changes(
    latest: &mut HashMap<String, MemberSliceStatus>,
    written: &mut HashMap<String, MemberSliceStatus>,
    relisting: &mut Relisting,
    events: impl IntoIterator<Item = SliceEvent>,
) {
    for event in events {
        match event {
            SliceEvent::Seen {
                kind,
                name,
                report,
                relisting: in_list,
            } => {
                if in_list && let Some(seen) = relisting.get_mut(&kind) {
                    seen.insert(name.clone());
                }
                latest.insert(name, report);
            }
            SliceEvent::Deleted(name) => {
                latest.remove(&name);
                written.remove(&name);
            }
            SliceEvent::Relist(kind) => {
                relisting.insert(kind, Default::default());
            }
            SliceEvent::Relisted(kind) => {
                let Some(seen) = relisting.remove(&kind) else {
                    continue;
                };
                // MemberSlice names start with their kind (`member_slice_name`).
                let prefix = format!("{}.", kind.as_str().to_lowercase());
                let listed = |name: &String| !name.starts_with(&prefix) || seen.contains(name);
                latest.retain(|name, _| listed(name));
                written.retain(|name, _| listed(name));
            }
        }
    }
}

/// A MemberSlice that has no report while one was made for its name (the hub removed it
/// and made it again, or its status was cleared): the last report is due again, as of
/// `now` (the slice has not changed since, or an event would have brought a newer one).
/// The last report is the last one written, or the last one the hub answered with
/// "no such MemberSlice" (a shard completed while its MemberSlice was away).
fn report_again(
    name: String,
    written: &mut HashMap<String, MemberSliceStatus>,
    due: &mut HashMap<String, MemberSliceStatus>,
    now: Timestamp,
) {
    if let Some(mut last) = written.remove(&name) {
        last.reported_time = Some(Time(now));
        due.entry(name).or_insert(last);
    }
}

/// Writes the status of every hub-written slice in the member into its MemberSlice, when
/// it changed (the agent's Lease, not a rewrite, says the report is current). Changes are
/// taken in batches, the latest per slice, and written 16 at a time: one by one, a burst
/// of status changes queued for seconds behind the hub's round trips. A failed write is
/// tried again with the next batch (or after 2 s). While the mirror still has slices to
/// write, a batch waits for it (2 s at most) and folds in what arrives meanwhile: the
/// slices are what a burst waits for, and the hub API server writes one or the other.
async fn report_slice_status(
    hub: &Client,
    member: &Client,
    ns: &str,
    mut mirror_busy: tokio::sync::watch::Receiver<bool>,
    mut unreported: tokio::sync::mpsc::UnboundedReceiver<String>,
) -> anyhow::Error {
    use futures::FutureExt as _;
    // Per MemberSlice, the last report written (or refused for want of the MemberSlice).
    let mut written: HashMap<String, MemberSliceStatus> = HashMap::new();
    let streams = WorkloadKind::ALL.into_iter().map(|kind| {
        watcher(
            Api::<DynamicObject>::all_with(member.clone(), &crate::api::kind::api_resource(kind)),
            watcher::Config::default().labels(crate::api::member_slice::LABEL_HUB_NAME),
        )
        .backoff(crate::controller::watch::backoff())
        .filter_map(move |ev| {
            let name = |o: &DynamicObject| {
                crate::api::member_slice::member_slice_name(
                    kind,
                    &o.namespace().unwrap_or_default(),
                    &o.name_any(),
                )
            };
            let seen = |o: DynamicObject, relisting| SliceEvent::Seen {
                kind,
                name: name(&o),
                report: slice_report(&o, Timestamp::now()),
                relisting,
            };
            futures::future::ready(match ev {
                Ok(watcher::Event::Apply(o)) => Some(seen(o, false)),
                Ok(watcher::Event::InitApply(o)) => Some(seen(o, true)),
                Ok(watcher::Event::Delete(o)) => Some(SliceEvent::Deleted(name(&o))),
                Ok(watcher::Event::Init) => Some(SliceEvent::Relist(kind)),
                Ok(watcher::Event::InitDone) => Some(SliceEvent::Relisted(kind)),
                Err(_) => None,
            })
        })
        .boxed()
    });
    let mut batches = futures::stream::select_all(streams).ready_chunks(256);
    let api: Api<MemberSlice> = Api::namespaced(hub.clone(), ns);
    let mut retry: HashMap<String, MemberSliceStatus> = HashMap::new();
    let mut relisting = Relisting::new();
    loop {
        let batch = tokio::select! {
            b = batches.next() => b,
            Some(name) = unreported.recv() => {
                report_again(name, &mut written, &mut retry, Timestamp::now());
                while let Ok(name) = unreported.try_recv() {
                    report_again(name, &mut written, &mut retry, Timestamp::now());
                }
                Some(Vec::new())
            }
            () = tokio::time::sleep(Duration::from_secs(2)), if !retry.is_empty() => Some(Vec::new()),
        };
        let Some(mut batch) = batch else { break };
        let deadline = tokio::time::Instant::now() + REPORTS_WAIT_FOR_SLICES;
        while *mirror_busy.borrow_and_update() && tokio::time::Instant::now() < deadline {
            match tokio::time::timeout_at(deadline, mirror_busy.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => break,
            }
        }
        while let Some(Some(more)) = batches.next().now_or_never() {
            batch.extend(more);
        }
        let mut latest = std::mem::take(&mut retry);
        fold_changes(&mut latest, &mut written, &mut relisting, batch);
        let due = due_reports(latest, &written);
        let results: Vec<_> = futures::stream::iter(due.into_iter().map(|(name, status)| {
            let api = api.clone();
            async move {
                let patch = serde_json::json!({
                    "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "MemberSlice",
                    "status": {
                        "slice": status.slice,
                        "sliceGeneration": status.slice_generation,
                        "hubGeneration": status.hub_generation,
                        "reportedTime": status.reported_time,
                    },
                });
                let result = api
                    .patch_status(
                        &name,
                        &PatchParams::apply(PULL_FIELD_MANAGER).force(),
                        &Patch::Apply(&patch),
                    )
                    .await;
                (name, status, result)
            }
        }))
        .buffer_unordered(16)
        .collect()
        .await;
        for (name, status, result) in results {
            match result {
                Ok(_) => {
                    written.insert(name, status);
                }
                // The hub removed the MemberSlice: the slice goes too (mirror_slices), or
                // the hub makes it again (a failback) and gets this report then
                // (`report_again`): kept as the last report of the slice.
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    written.insert(name, status);
                }
                Err(kube::Error::Api(s)) if s.code == 401 => {
                    return anyhow::anyhow!(
                        "the hub refused the agent's credential: {}",
                        s.message
                    );
                }
                Err(e) => {
                    tracing::warn!(member_slice = %name, error = %crate::controller::Chain(&e), "could not report a slice's status to the hub; trying again");
                    retry.insert(name, status);
                }
            }
        }
    }
    anyhow::anyhow!("the slice watches ended")
}

/// Mirrors the bundles (ConfigMaps or Secrets the hub dropped for this member's slices)
/// from the agent's hub namespace into the member's drop namespace, where the agent
/// materializes them next to the workloads as in push mode.
async fn mirror_bundles<K>(hub: &Client, member: &Client, ns: &str) -> anyhow::Error
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Send
        + Sync
        + 'static,
{
    let api: Api<K> = Api::namespaced(hub.clone(), ns);
    let into: Api<K> = Api::namespaced(member.clone(), DROP_NAMESPACE);
    let mut stream = watcher(api, crate::controller::watch::config().labels(LABEL_BUNDLE))
        .backoff(crate::controller::watch::backoff())
        .boxed();
    while let Some(ev) = stream.next().await {
        let (obj, deleted) = match ev {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => (o, false),
            Ok(watcher::Event::Delete(o)) => (o, true),
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "bundle watch error (retrying)");
                continue;
            }
        };
        let name = obj.name_any();
        if deleted {
            let _ = into.delete(&name, &DeleteParams::default()).await;
            continue;
        }
        let mut v = match serde_json::to_value(&obj) {
            Ok(v) => v,
            Err(_) => continue,
        };
        if let Some(meta) = v["metadata"].as_object_mut() {
            meta.retain(|k, _| matches!(k.as_str(), "name" | "labels" | "annotations"));
            meta.insert("namespace".into(), DROP_NAMESPACE.into());
        }
        if let Err(e) = into
            .patch(
                &name,
                &PatchParams::apply(PULL_FIELD_MANAGER).force(),
                &Patch::Apply(&v),
            )
            .await
        {
            tracing::warn!(bundle = %name, error = %crate::controller::Chain(&e), "could not copy a bundle into the member");
        }
    }
    anyhow::anyhow!("the bundle watch ended")
}

/// Mirrors the hub's RuntimeProfiles into the member (and removes those the hub removed).
async fn mirror_profiles(hub: &Client, member: &Client) -> anyhow::Error {
    let into: Api<RuntimeProfile> = Api::all(member.clone());
    let mut stream = watcher(
        Api::<RuntimeProfile>::all(hub.clone()),
        crate::controller::watch::config(),
    )
    .backoff(crate::controller::watch::backoff())
    .boxed();
    // The hub's profiles seen in a (re)list: at its end, copies of any other are removed
    // (deleted on the hub while this agent was away).
    let mut listed = std::collections::BTreeSet::new();
    while let Some(ev) = stream.next().await {
        if let Ok(watcher::Event::InitApply(p)) = &ev {
            listed.insert(p.name_any());
        }
        match ev {
            Ok(watcher::Event::Init) => listed.clear(),
            Ok(watcher::Event::InitDone) => {
                if let Ok(list) = into.list(&kube::api::ListParams::default()).await {
                    for name in crate::controller::apply::applied_by_and_not_in(
                        &list.items,
                        PULL_FIELD_MANAGER,
                        &listed,
                    ) {
                        let _ = into.delete(&name, &DeleteParams::default()).await;
                    }
                }
            }
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                let mut v = match serde_json::to_value(&p) {
                    Ok(v) => v,
                    Err(_) => continue,
                };
                if let Some(meta) = v["metadata"].as_object_mut() {
                    meta.retain(|k, _| matches!(k.as_str(), "name" | "labels" | "annotations"));
                }
                v.as_object_mut().map(|o| o.remove("status"));
                if let Err(e) = into
                    .patch(
                        &p.name_any(),
                        &PatchParams::apply(PULL_FIELD_MANAGER).force(),
                        &Patch::Apply(&v),
                    )
                    .await
                {
                    tracing::warn!(profile = %p.name_any(), error = %e, "could not copy a RuntimeProfile into the member");
                }
            }
            Ok(watcher::Event::Delete(p)) => {
                let _ = into.delete(&p.name_any(), &DeleteParams::default()).await;
            }
            Err(e) => tracing::debug!(error = %e, "RuntimeProfile watch error (retrying)"),
        }
    }
    anyhow::anyhow!("the RuntimeProfile watch ended")
}

/// Renews the agent's token for the hub at two thirds of its life (asked of the hub with
/// the current token), stores the new kubeconfig in the member's Secret and ends, so the
/// agent connects again with it. Also ends when someone else changed that Secret.
async fn renew_token(hub: &Client, member: &Client, ns: &str, kubeconfig: &str) -> anyhow::Error {
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        match read_hub_kubeconfig(member).await {
            Ok(now) if now != kubeconfig => {
                return anyhow::anyhow!("the hub kubeconfig Secret changed");
            }
            _ => {}
        }
        let Some(token) = tokens::kubeconfig_token(kubeconfig) else {
            continue;
        };
        if !tokens::renewal_due(&token, Timestamp::now().as_second()) {
            continue;
        }
        // Bound to the member's credential on the hub, like every token of this agent:
        // the chain of renewals ends with it.
        let credential = match Api::<Secret>::namespaced(hub.clone(), ns)
            .get_opt(crate::api::member_slice::AGENT_CREDENTIAL)
            .await
        {
            Ok(Some(s)) => match s.metadata.uid {
                Some(uid) => tokens::BoundSecret {
                    name: crate::api::member_slice::AGENT_CREDENTIAL.into(),
                    uid,
                },
                None => continue,
            },
            Ok(None) => {
                tracing::error!(
                    "the agent's credential on the hub is gone (expired or revoked): the member must be joined again (pinfed join --mode pull)"
                );
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not read the agent's credential on the hub; trying again");
                continue;
            }
        };
        let fresh = match tokens::request_bound_token(
            hub,
            ns,
            PULL_SERVICE_ACCOUNT,
            HUB_TOKEN_SECS,
            Some(&credential),
        )
        .await
        {
            Ok(t) if !t.is_empty() => t,
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "could not renew the agent's token for the hub; trying again");
                continue;
            }
        };
        let Some(text) = tokens::with_token(kubeconfig, &fresh) else {
            continue;
        };
        let patch = serde_json::json!({
            "data": {KUBECONFIG_KEY: base64::engine::general_purpose::STANDARD.encode(&text)}
        });
        match Api::<Secret>::namespaced(member.clone(), AGENT_NAMESPACE)
            .patch(
                HUB_KUBECONFIG_SECRET,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .context("storing the renewed hub kubeconfig")
        {
            Ok(_) => {
                tracing::info!("renewed the agent's token for the hub");
                return anyhow::anyhow!("the agent's token for the hub was renewed");
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "could not store the renewed token; trying again")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_of_another_member_is_refused_naming_both() {
        check_identity(
            "use1c",
            "system:serviceaccount:pinfed-member-use1c:pinfed-agent",
        )
        .unwrap();
        let e = check_identity(
            "use1c",
            "system:serviceaccount:pinfed-member-use1a:pinfed-agent",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("pinfed-member-use1a") && e.contains("\"use1c\""),
            "{e}"
        );
        assert!(check_identity("use1c", "kubernetes-admin").is_err());
    }

    #[test]
    fn a_report_is_written_once_the_slice_has_a_status_and_again_only_when_it_changes() {
        let report = |status: Option<serde_json::Value>, generation| MemberSliceStatus {
            slice: status,
            slice_generation: Some(generation),
            hub_generation: Some(1),
            reported_time: None,
            error: None,
        };
        let due = |latest: Vec<(&str, MemberSliceStatus)>,
                   written: &HashMap<String, MemberSliceStatus>| {
            let mut names: Vec<String> = due_reports(
                latest
                    .into_iter()
                    .map(|(n, s)| (n.to_string(), s))
                    .collect(),
                written,
            )
            .into_iter()
            .map(|(n, _)| n)
            .collect();
            names.sort();
            names
        };
        let ready = serde_json::json!({"readyReplicas": 2});
        let mut written = HashMap::new();
        assert!(
            due(vec![("new", report(None, 1))], &written).is_empty(),
            "copied, no status yet"
        );
        assert_eq!(
            due(vec![("new", report(Some(ready.clone()), 1))], &written),
            ["new"]
        );
        written.insert("new".to_string(), report(Some(ready.clone()), 1));
        assert!(
            due(vec![("new", report(Some(ready.clone()), 1))], &written).is_empty(),
            "unchanged"
        );
        assert_eq!(
            due(vec![("new", report(Some(ready.clone()), 2))], &written),
            ["new"],
            "a new generation of the slice"
        );
        assert_eq!(
            due(vec![("new", report(None, 1))], &written),
            ["new"],
            "a status gone after one was reported is news"
        );
    }

    #[test]
    fn a_slice_deleted_in_the_member_leaves_no_report_behind() {
        let r = |g| MemberSliceStatus {
            slice_generation: Some(g),
            ..Default::default()
        };
        let mut written = HashMap::from([("gone".to_string(), r(1)), ("kept".to_string(), r(1))]);
        let mut latest = HashMap::from([("gone".to_string(), r(2))]);
        fold_changes(
            &mut latest,
            &mut written,
            &mut Relisting::new(),
            [
                SliceEvent::Deleted("gone".to_string()),
                SliceEvent::Seen {
                    kind: WorkloadKind::Service,
                    name: "kept".to_string(),
                    report: r(2),
                    relisting: false,
                },
            ],
        );
        assert_eq!(latest.keys().collect::<Vec<_>>(), ["kept"]);
        assert_eq!(written.keys().collect::<Vec<_>>(), ["kept"]);
    }

    /// A slice deleted while a watch was away brings no Delete event: the watch's re-list
    /// no longer shows it, and its last report goes then — only that watch's kind.
    #[test]
    fn a_slice_missing_from_a_re_list_leaves_no_report_behind() {
        use crate::api::member_slice::member_slice_name;
        let r = |g| MemberSliceStatus {
            slice_generation: Some(g),
            ..Default::default()
        };
        let svc = |n| member_slice_name(WorkloadKind::Service, "ads", n);
        let jobs = member_slice_name(WorkloadKind::JobSet, "ads", "gone-too");
        let mut written = HashMap::from([
            (svc("listed"), r(1)),
            (svc("deleted-meanwhile"), r(1)),
            (jobs.clone(), r(1)),
        ]);
        let mut latest = HashMap::from([(svc("deleted-meanwhile"), r(2))]);
        let mut relisting = Relisting::new();
        let seen = |name: String| SliceEvent::Seen {
            kind: WorkloadKind::Service,
            name,
            report: r(1),
            relisting: true,
        };
        // Split over two batches, as `ready_chunks` may deliver a re-list.
        fold_changes(
            &mut latest,
            &mut written,
            &mut relisting,
            [
                SliceEvent::Relist(WorkloadKind::Service),
                seen(svc("listed")),
            ],
        );
        assert!(
            written.contains_key(&svc("deleted-meanwhile")),
            "not before the list ends"
        );
        fold_changes(
            &mut latest,
            &mut written,
            &mut relisting,
            [SliceEvent::Relisted(WorkloadKind::Service)],
        );
        let mut kept: Vec<_> = written.keys().cloned().collect();
        kept.sort();
        assert_eq!(
            kept,
            [jobs, svc("listed")],
            "another kind's watch did not re-list"
        );
        assert_eq!(latest.keys().cloned().collect::<Vec<_>>(), [svc("listed")]);
        assert!(relisting.is_empty());
    }

    #[test]
    fn a_member_slice_made_again_without_a_report_gets_the_last_one_again() {
        let last = MemberSliceStatus {
            slice: Some(serde_json::json!({"completedShards": "4-5"})),
            slice_generation: Some(3),
            hub_generation: Some(1),
            reported_time: Some(Time(Timestamp::from_second(100).unwrap())),
            error: None,
        };
        let mut written = HashMap::from([("js".to_string(), last.clone())]);
        let mut retry = HashMap::new();
        // Unchanged in the member: nothing would be due from the slice's own events.
        assert!(
            due_reports(HashMap::from([("js".to_string(), last.clone())]), &written).is_empty()
        );
        let now = Timestamp::from_second(200).unwrap();
        report_again("js".to_string(), &mut written, &mut retry, now);
        report_again("never-reported".to_string(), &mut written, &mut retry, now);
        let due = due_reports(retry, &written);
        assert_eq!(due.len(), 1, "only what was reported before: {due:?}");
        let (name, report) = &due[0];
        assert_eq!(name, "js");
        assert_eq!(report.slice, last.slice);
        assert_eq!(report.slice_generation, Some(3));
        assert_eq!(report.reported_time, Some(Time(now)), "as of now");
    }

    #[test]
    fn a_slice_report_carries_status_generation_and_hub_generation() {
        let o: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
            "metadata": {"name": "web", "namespace": "ads", "generation": 3,
                "annotations": {"federation.pinterest.com/hub-generation": "7"}},
            "spec": {}, "status": {"observedGeneration": 3, "readyReplicas": 2}
        }))
        .unwrap();
        let r = slice_report(&o, Timestamp::from_second(1_800_000_000).unwrap());
        assert_eq!((r.slice_generation, r.hub_generation), (Some(3), Some(7)));
        assert_eq!(r.slice.unwrap()["readyReplicas"], 2);
    }
}

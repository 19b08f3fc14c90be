//! Member registry and health. For every MemberCluster the hub keeps a client built from
//! its kubeconfig Secret, watches the member's nodes (trimmed to what capacity needs) and
//! pods (summed per node as they come, `PodBook`), sends a heartbeat (`/version`) on a timer and writes the MemberCluster status:
//! Ready with a reason, last heartbeat, Kubernetes version, capacity / allocatable /
//! allocated / available. Other hub loops read members through [`MemberRegistry`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::task::JoinHandle;

use crate::api::common::{Condition, ConditionStatus, condition_types as ct, set_condition};
use crate::api::federation::{ClusterMode, MemberCluster, MemberClusterStatus};
use crate::api::member_slice::{MemberSlice, agent_lease_name, pull_namespace};
use crate::api::workload::WorkloadKind;
use crate::controller::apply::HUB_FIELD_MANAGER;
use crate::controller::watch;
use crate::hub::slice_target::SliceTarget;
use crate::hub::slices::{self, LABEL_HUB_NAME, SliceSummary};
use crate::placement::capacity::{self, NodeUsage};
use crate::placement::pod_book::PodBook;
use crate::placement::report_guard::{ReportGuard, ReportLimits, Verdict};

/// Namespace on the hub where member kubeconfig Secrets live by default.
pub const HUB_NAMESPACE: &str = "pinfed-system";
/// Namespace of pinfed's own objects in a member (the agent's Lease).
const MEMBER_SYSTEM_NAMESPACE: &str = "pinfed-system";
/// Key of the kubeconfig in a member Secret.
pub const KUBECONFIG_KEY: &str = "kubeconfig";

#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error("MemberCluster {0} has no spec.secretRef")]
    NoSecretRef(String),
    #[error("reading Secret {namespace}/{name}: {source}")]
    Secret {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "spec.secretRef: Secret {namespace}/{name} is outside {HUB_NAMESPACE}, the only namespace the hub reads member credentials from"
    )]
    SecretElsewhere { namespace: String, name: String },
    #[error("Secret {0} has no `kubeconfig` key")]
    NoKubeconfig(String),
    #[error("kubeconfig of member {member} is invalid: {message}")]
    Kubeconfig { member: String, message: String },
}

/// A member's slice watch has not listed yet: ask the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotListed;

/// The summaries of a member's slices of one kind, by (namespace, name), as a watch
/// reports them.
#[derive(Debug, Default)]
pub struct SliceCache {
    listed: bool,
    slices: HashMap<(String, String), Arc<SliceSummary>>,
    /// A relist in progress: it replaces `slices` when done.
    relisting: Option<HashMap<(String, String), Arc<SliceSummary>>>,
    /// Slices this process wrote that the watch has not reported since, as the member
    /// stored them: a reconcile that runs before the watch catches up reads these instead
    /// of the older copy (which it would write again). Any watch event for the slice ends
    /// one; so does [`WRITTEN_FOR_AT_MOST`] (a slice deleted before the watch delivered
    /// our own write would otherwise look present).
    written: HashMap<(String, String), (Arc<SliceSummary>, std::time::Instant)>,
}

/// The longest a slice written by this process stands in for the watch's copy.
const WRITTEN_FOR_AT_MOST: Duration = Duration::from_secs(30);

impl SliceCache {
    /// Takes in one watch event of a push member's slices; returns the slices whose
    /// workloads it concerns (to reconcile), each once the cache holds what it says.
    pub fn ingest(
        &mut self,
        kind: WorkloadKind,
        event: &watcher::Event<DynamicObject>,
    ) -> Vec<(String, String)> {
        let key = |o: &DynamicObject| {
            (
                o.metadata.namespace.clone().unwrap_or_default(),
                o.metadata.name.clone().unwrap_or_default(),
            )
        };
        let summary = |o: &DynamicObject| Arc::new(slices::summarize_dynamic(kind, o));
        match event {
            watcher::Event::Init => {
                self.begin_relist();
                Vec::new()
            }
            watcher::Event::InitApply(o) => {
                self.relisted(key(o), summary(o));
                Vec::new()
            }
            watcher::Event::InitDone => self.end_relist(),
            watcher::Event::Apply(o) => {
                self.insert(key(o), summary(o));
                vec![key(o)]
            }
            watcher::Event::Delete(o) => {
                self.remove(&key(o));
                vec![key(o)]
            }
        }
    }

    fn begin_relist(&mut self) {
        self.relisting = Some(HashMap::new());
    }
    fn relisted(&mut self, key: (String, String), summary: Arc<SliceSummary>) {
        self.written.remove(&key);
        self.relisting
            .get_or_insert_with(HashMap::new)
            .insert(key, summary);
    }
    /// A (re)list is complete: it replaces what the cache held. Returns the slices it
    /// changed (new, different or gone): after a watch gap, the list is the only news of
    /// what happened meanwhile, and it is in the cache only now — a reconcile triggered by
    /// each listed slice as it came would have read the copy from before the gap, and
    /// nothing would trigger one again (a workload waited for a report it had).
    fn end_relist(&mut self) -> Vec<(String, String)> {
        let Some(fresh) = self.relisting.take() else {
            self.listed = true;
            return Vec::new();
        };
        let mut changed: Vec<(String, String)> = fresh
            .iter()
            .filter(|(k, s)| self.slices.get(*k) != Some(*s))
            .map(|(k, _)| k.clone())
            .collect();
        changed.extend(
            self.slices
                .keys()
                .filter(|k| !fresh.contains_key(*k))
                .cloned(),
        );
        self.slices = fresh;
        self.listed = true;
        changed
    }
    fn insert(&mut self, key: (String, String), summary: Arc<SliceSummary>) {
        self.written.remove(&key);
        self.slices.insert(key, summary);
    }
    fn remove(&mut self, key: &(String, String)) {
        self.written.remove(key);
        self.slices.remove(key);
    }

    /// Records a slice this process just wrote, as the member returned it — unless the
    /// watch has reported that write already (the same generation and spec: a write's
    /// answer can be handled after the watch's events for it and for later status
    /// changes; standing in then would hide those changes for up to
    /// [`WRITTEN_FOR_AT_MOST`], and nothing would bring them back).
    pub fn wrote(&mut self, key: (String, String), stored: Arc<SliceSummary>) {
        let now = std::time::Instant::now();
        self.written
            .retain(|_, (_, at)| now.duration_since(*at) < WRITTEN_FOR_AT_MOST);
        let seen = self.slices.get(&key).is_some_and(|watched| {
            watched.generation == stored.generation && watched.spec_digest == stored.spec_digest
        });
        if seen {
            self.written.remove(&key);
        } else {
            self.written.insert(key, (stored, now));
        }
    }

    /// The slice as this process last knows it: its own write the watch has not reported
    /// yet, else the watch's copy.
    pub fn get(&self, key: &(String, String)) -> Option<Arc<SliceSummary>> {
        match self.written.get(key) {
            Some((s, at)) if at.elapsed() < WRITTEN_FOR_AT_MOST => Some(s.clone()),
            _ => self.slices.get(key).cloned(),
        }
    }

    pub fn len(&self) -> usize {
        self.slices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slices.is_empty()
    }
}

/// What a MemberSlice event does to one kind's cache.
type CacheStep<'a> = &'a dyn Fn(&mut SliceCache, (String, String), Arc<SliceSummary>);

/// A live connection to one member.
pub struct Member {
    pub name: String,
    /// Where its slices are written (the member, or its namespace on the hub).
    pub target: SliceTarget,
    link: Link,
    /// The member's slices per kind (every object labelled with a hub name), summarized,
    /// from the same watches that report slice changes: reconciles read slices here
    /// instead of asking the member each time.
    slices: BTreeMap<WorkloadKind, Arc<Mutex<SliceCache>>>,
    /// When this connection was made (a member is not "lost" before it was ever asked).
    connected_at: Timestamp,
    state: Mutex<Heartbeat>,
    tasks: Vec<JoinHandle<()>>,
}

/// How the hub knows a member.
enum Link {
    /// The hub connects: its client, node and pod caches, and the kubeconfig Secret's
    /// version and text (rebuilt on change; the text for token renewal).
    Push {
        client: Client,
        nodes: Store<Node>,
        pods: Arc<Mutex<PodBook>>,
        secret_version: String,
        kubeconfig: String,
    },
    /// The member's agent reports into the MemberCluster; the hub never connects.
    /// Its report passes a guard (`placement::report_guard`): placement sees only what
    /// the guard accepted.
    Pull { report: Mutex<ReportGuard> },
}

#[derive(Debug, Clone, Default)]
struct Heartbeat {
    last_ok: Option<Timestamp>,
    version: Option<String>,
    last_error: Option<String>,
    /// The agent's Lease: its last renewal, or `None` while none was found.
    agent_renewed: Option<Timestamp>,
    /// Why the agent's Lease could not be read, when it could not.
    agent_error: Option<String>,
}

impl Drop for Member {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Member {
    /// The hub's client for a push member (none for a pull member).
    pub fn push_client(&self) -> Option<&Client> {
        match &self.link {
            Link::Push { client, .. } => Some(client),
            Link::Pull { .. } => None,
        }
    }

    /// The kubeconfig a push member's client was built from.
    pub fn kubeconfig(&self) -> Option<&str> {
        match &self.link {
            Link::Push { kubeconfig, .. } => Some(kubeconfig),
            Link::Pull { .. } => None,
        }
    }

    pub fn is_pull(&self) -> bool {
        matches!(self.link, Link::Pull { .. })
    }

    /// When the member's agent last renewed its Lease (as last read).
    pub fn agent_renewed(&self) -> Option<Timestamp> {
        self.state.lock().ok().and_then(|s| s.agent_renewed)
    }

    /// The agent's Lease was seen and has not been renewed within `grace`: its statuses
    /// are frozen, so the member counts as lost. (No Lease at all: no agent has run yet —
    /// a push member's slices wait for one; a pull member is not Ready without it.)
    ///
    /// Not before this hub has watched the member for `grace`: a hub that starts after
    /// its agent was restarted must give the agent that long to renew, or it would
    /// record a loss (and a return, which takes no new work for the failback window)
    /// that never happened.
    pub fn agent_lost(&self, now: Timestamp, grace: Duration) -> bool {
        self.connected_for(now) >= grace
            && self
                .agent_renewed()
                .is_some_and(|t| now.as_second() - t.as_second() > grace.as_secs() as i64)
    }

    /// The slice `namespace/name` of `kind` as this member's watch last saw it: `Ok(None)`
    /// when there is none, `Err(NotListed)` while the watch has not listed yet (ask the
    /// member).
    pub fn cached_slice(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<SliceSummary>>, NotListed> {
        let cache = self.slices.get(&kind).ok_or(NotListed)?;
        let cache = cache.lock().map_err(|_| NotListed)?;
        if !cache.listed {
            return Err(NotListed);
        }
        Ok(cache.get(&(namespace.to_string(), name.to_string())))
    }

    /// Records a slice the hub just wrote into this member, so reconciles that run before
    /// the member's watch reports it do not write it again.
    pub fn wrote_slice(&self, kind: WorkloadKind, stored: Arc<SliceSummary>, ns: &str, name: &str) {
        if let Some(cache) = self.slices.get(&kind)
            && let Ok(mut cache) = cache.lock()
        {
            cache.wrote((ns.to_string(), name.to_string()), stored);
        }
    }

    /// When this connection was made.
    pub fn connected_at(&self) -> Timestamp {
        self.connected_at
    }

    /// How long ago this connection was made.
    pub fn connected_for(&self, now: Timestamp) -> Duration {
        Duration::from_secs(
            u64::try_from(now.as_second() - self.connected_at.as_second()).unwrap_or(0),
        )
    }

    pub fn last_heartbeat(&self) -> Option<Timestamp> {
        self.state.lock().map(|s| s.last_ok).unwrap_or(None)
    }

    /// Whether the member's API server answered the last heartbeat.
    pub fn answered_last(&self) -> bool {
        self.state.lock().is_ok_and(|s| s.last_error.is_none())
    }

    /// Whether the hub can write the member's slices: a pull member's are on the hub; a
    /// push member's API server answered within `grace` (its agent may be lost).
    pub fn is_writable(&self, now: Timestamp, grace: Duration) -> bool {
        self.is_pull()
            || self
                .last_heartbeat()
                .is_some_and(|t| now.as_second() - t.as_second() <= grace.as_secs() as i64)
    }

    /// Whether the member answered within `grace` and its agent is not lost.
    pub fn is_ready(&self, now: Timestamp, grace: Duration) -> bool {
        self.last_heartbeat()
            .is_some_and(|t| now.as_second() - t.as_second() <= grace.as_secs() as i64)
            && !self.agent_lost(now, grace)
    }

    pub fn node_usage(&self) -> Vec<NodeUsage> {
        self.node_usage_without(None)
    }

    /// Node usage not counting the pods of `workload` (namespace, kind, name): a re-plan
    /// moves those pods, so the room they hold is the workload's own.
    ///
    /// A pull member reports per-node allocation, not pods: its own pods are counted
    /// (a re-plan there is conservative).
    pub fn node_usage_without(&self, workload: Option<(&str, &str, &str)>) -> Vec<NodeUsage> {
        let (nodes, allocated) = match &self.link {
            Link::Push { nodes, pods, .. } => (
                nodes.state(),
                pods.lock()
                    .map(|b| b.allocated_without(workload))
                    .unwrap_or_default(),
            ),
            Link::Pull { report } => {
                return report
                    .lock()
                    .ok()
                    .and_then(|g| g.accepted().map(|r| capacity::from_pools(&r.node_pools)))
                    .unwrap_or_default();
            }
        };
        capacity::node_usage_from(nodes.iter().map(|n| n.as_ref()), &allocated)
    }
}

pub use crate::placement::capacity::WorkloadPod;

impl Member {
    /// The pods of Pinterest workloads bound to a node and not finished: a push member's
    /// from the hub's pod book, a pull member's as its agent last reported them (the
    /// report the guard accepted).
    pub fn workload_pods(&self) -> Vec<WorkloadPod> {
        match &self.link {
            Link::Push { pods, .. } => pods.lock().map(|b| b.workload_pods()).unwrap_or_default(),
            Link::Pull { report } => report
                .lock()
                .ok()
                .and_then(|g| g.accepted().map(|r| capacity::pods_of_pools(&r.node_pools)))
                .unwrap_or_default(),
        }
    }
}

/// A slice changed in a member (its spec or, mostly, its status as the agent writes it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceEvent {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
}

/// Every connected member, by name, and the slice changes they report.
#[derive(Clone)]
pub struct MemberRegistry {
    members: Arc<Mutex<BTreeMap<String, Arc<Member>>>>,
    slice_events: tokio::sync::broadcast::Sender<SliceEvent>,
    /// Members this process has connected to (or failed to) and heartbeated once.
    tried: Arc<Mutex<BTreeSet<String>>>,
}

impl Default for MemberRegistry {
    fn default() -> MemberRegistry {
        MemberRegistry {
            members: Default::default(),
            slice_events: tokio::sync::broadcast::channel(4096).0,
            tried: Default::default(),
        }
    }
}

impl MemberRegistry {
    /// Slice changes in every member, as they happen (a slow reader skips ahead: the
    /// workload loops also resync on a timer).
    pub fn slice_events(&self) -> impl futures::Stream<Item = SliceEvent> + Send + 'static {
        crate::controller::watch::broadcast_stream(self.slice_events.subscribe())
    }

    pub fn get(&self, name: &str) -> Option<Arc<Member>> {
        self.members.lock().ok()?.get(name).cloned()
    }

    /// The member loop has been through `name` once in this process: connected (or
    /// failed to) and heartbeated.
    pub fn mark_tried(&self, name: &str) {
        if let Ok(mut t) = self.tried.lock() {
            t.insert(name.to_string());
        }
    }

    pub fn was_tried(&self, name: &str) -> bool {
        self.tried.lock().is_ok_and(|t| t.contains(name))
    }
    pub fn all(&self) -> Vec<Arc<Member>> {
        self.members
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }
    /// What the current connection to `name` learned of its heartbeats (a new connection
    /// to a member already known keeps it: the member did not go anywhere).
    fn heartbeat_of(&self, name: &str) -> Heartbeat {
        self.get(name)
            .and_then(|old| old.state.lock().ok().map(|h| h.clone()))
            .unwrap_or_default()
    }

    fn insert(&self, m: Member) -> Arc<Member> {
        let m = Arc::new(m);
        if let Ok(mut map) = self.members.lock() {
            map.insert(m.name.clone(), m.clone());
        }
        m
    }
    pub fn remove(&self, name: &str) {
        if let Ok(mut map) = self.members.lock() {
            map.remove(name);
        }
    }
}

/// Builds a client from a kubeconfig text (its current context).
pub async fn client_from_kubeconfig(member: &str, text: &str) -> Result<Client, MemberError> {
    crate::controller::tokens::client_from_kubeconfig(text)
        .await
        .map_err(|message| MemberError::Kubeconfig {
            member: member.to_string(),
            message,
        })
}

async fn read_kubeconfig(
    hub: &Client,
    mc: &MemberCluster,
) -> Result<(String, String), MemberError> {
    let name = mc.name_any();
    let r = mc
        .spec
        .secret_ref
        .as_ref()
        .ok_or_else(|| MemberError::NoSecretRef(name.clone()))?;
    let ns = r
        .namespace
        .clone()
        .unwrap_or_else(|| HUB_NAMESPACE.to_string());
    // The hub reads Secrets of its own namespace only: a MemberCluster naming one elsewhere
    // would make it read (and use) a credential nobody gave it.
    if ns != HUB_NAMESPACE {
        return Err(MemberError::SecretElsewhere {
            namespace: ns,
            name: r.name.clone(),
        });
    }
    let secret = Api::<Secret>::namespaced(hub.clone(), &ns)
        .get(&r.name)
        .await
        .map_err(|source| MemberError::Secret {
            namespace: ns.clone(),
            name: r.name.clone(),
            source,
        })?;
    let data = secret
        .data
        .as_ref()
        .and_then(|d| d.get(KUBECONFIG_KEY))
        .ok_or_else(|| MemberError::NoKubeconfig(format!("{ns}/{}", r.name)))?;
    let text = String::from_utf8(data.0.clone()).map_err(|e| MemberError::Kubeconfig {
        member: name,
        message: e.to_string(),
    })?;
    Ok((text, secret.resource_version().unwrap_or_default()))
}

/// A client for a member from its kubeconfig Secret on the hub.
pub async fn member_client(hub: &Client, mc: &MemberCluster) -> Result<Client, MemberError> {
    let (text, _) = read_kubeconfig(hub, mc).await?;
    client_from_kubeconfig(&mc.name_any(), &text).await
}

/// Connects to a member (or returns the current connection when nothing it was made
/// from changed): a push member through its kubeconfig Secret, a pull member through its
/// namespace on the hub.
pub async fn ensure_member(
    hub: &Client,
    registry: &MemberRegistry,
    mc: &MemberCluster,
) -> Result<Arc<Member>, MemberError> {
    if mc.spec.mode == Some(ClusterMode::Pull) {
        return Ok(ensure_pull_member(hub, registry, mc));
    }
    let name = mc.name_any();
    let (text, version) = read_kubeconfig(hub, mc).await?;
    if let Some(m) = registry.get(&name).filter(
        |m| matches!(&m.link, Link::Push { secret_version, .. } if *secret_version == version),
    ) {
        return Ok(m);
    }
    let client = client_from_kubeconfig(&name, &text).await?;
    // The watches get a client of their own whose read timeout outlasts a watch.
    let watching = crate::controller::tokens::watch_client_from_kubeconfig(&text)
        .await
        .map_err(|message| MemberError::Kubeconfig {
            member: name.clone(),
            message,
        })?;
    let (nodes, node_writer) = reflector::store();
    let pods = Arc::new(Mutex::new(PodBook::default()));
    let node_stream = watcher(Api::<Node>::all(watching.clone()), watch::config())
        .backoff(watch::backoff())
        .modify(capacity::trim_node)
        .reflect(node_writer)
        .for_each(|_| futures::future::ready(()));
    // Pods are summed per node as they come (`PodBook`), not kept.
    let pod_stream = {
        let pods = pods.clone();
        watcher(Api::<Pod>::all(watching.clone()), watch::config())
            .backoff(watch::backoff())
            .for_each(move |ev| {
                if let (Ok(ev), Ok(mut book)) = (ev, pods.lock()) {
                    book.ingest(&ev);
                }
                futures::future::ready(())
            })
    };
    let mut tasks = vec![tokio::spawn(node_stream), tokio::spawn(pod_stream)];
    let mut slices = BTreeMap::new();
    // Slice changes trigger the hub resource's reconcile at once, so aggregated status
    // follows the member within a watch round-trip rather than a resync period.
    for kind in WorkloadKind::ALL {
        let ar = crate::api::kind::api_resource(kind);
        let events = registry.slice_events.clone();
        let cache = Arc::new(Mutex::new(SliceCache::default()));
        slices.insert(kind, cache.clone());
        let stream = watcher(
            Api::<DynamicObject>::all_with(watching.clone(), &ar),
            watch::config().labels(LABEL_HUB_NAME),
        )
        .backoff(watch::backoff())
        .for_each(move |ev| {
            if let Ok(ev) = ev {
                let due = cache
                    .lock()
                    .map(|mut c| c.ingest(kind, &ev))
                    .unwrap_or_default();
                // A slice has its hub resource's name and namespace (the hub-name label
                // may be shortened to fit a label value).
                for (namespace, name) in due {
                    let _ = events.send(SliceEvent {
                        kind,
                        namespace,
                        name,
                    });
                }
            }
            futures::future::ready(())
        });
        tasks.push(tokio::spawn(stream));
    }
    let member = Member {
        name: name.clone(),
        target: SliceTarget::Push(client.clone()),
        link: Link::Push {
            client,
            nodes,
            pods,
            secret_version: version,
            kubeconfig: text,
        },
        slices,
        // A new connection to a member already known (its Secret changed) keeps what the
        // old one learned: the member did not go anywhere.
        connected_at: Timestamp::now(),
        state: Mutex::new(registry.heartbeat_of(&name)),
        tasks,
    };
    // Placement must not see a member whose node and pod caches are still filling: it
    // would look empty (all room) or full (no room).
    let synced = tokio::time::timeout(Duration::from_secs(15), async {
        if let Link::Push { nodes, pods, .. } = &member.link {
            let _ = nodes.wait_until_ready().await;
            while !pods.lock().is_ok_and(|b| b.listed()) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    })
    .await
    .is_ok();
    if !synced {
        tracing::warn!(member = %name, "node and pod caches not synced within 15s");
    }
    tracing::info!(member = %name, synced, "connected to member");
    Ok(registry.insert(member))
}

/// The key of the slice a MemberSlice carries, and its kind.
fn carried(ms: &MemberSlice) -> Option<(WorkloadKind, (String, String))> {
    let s = &ms.spec.slice;
    let kind = WorkloadKind::from_kind(s["kind"].as_str()?)?;
    let meta = &s["metadata"];
    Some((
        kind,
        (
            meta["namespace"].as_str()?.to_string(),
            meta["name"].as_str()?.to_string(),
        ),
    ))
}

/// A pull member: its slices are the MemberSlices in its namespace on the hub, watched
/// there; what it has room for is what its agent reports.
/// Its report is read from its MemberReport at each heartbeat ([`heartbeat`]).
fn ensure_pull_member(hub: &Client, registry: &MemberRegistry, mc: &MemberCluster) -> Arc<Member> {
    let name = mc.name_any();
    if let Some(m) = registry.get(&name).filter(|m| m.is_pull()) {
        return m;
    }
    let guard = ReportGuard::default();
    let namespace = pull_namespace(&name);
    let caches: BTreeMap<WorkloadKind, Arc<Mutex<SliceCache>>> = WorkloadKind::ALL
        .into_iter()
        .map(|k| (k, Arc::new(Mutex::new(SliceCache::default()))))
        .collect();
    let events = registry.slice_events.clone();
    let stream = {
        let caches = caches.clone();
        watcher(
            Api::<MemberSlice>::namespaced(hub.clone(), &namespace),
            watcher::Config::default(),
        )
        .backoff(watch::backoff())
        .for_each(move |ev| {
            let Ok(ev) = ev else {
                return futures::future::ready(());
            };
            let trigger = |kind, (namespace, name)| {
                let _ = events.send(SliceEvent {
                    kind,
                    namespace,
                    name,
                });
            };
            let one = |ms: &MemberSlice, f: CacheStep<'_>, now: bool| {
                if let Some((kind, key)) = carried(ms) {
                    let summary = Arc::new(slices::summarize_member_slice(kind, ms));
                    if let Some(Ok(mut c)) = caches.get(&kind).map(|c| c.lock()) {
                        f(&mut c, key.clone(), summary);
                    }
                    if now {
                        trigger(kind, key);
                    }
                }
            };
            match &ev {
                watcher::Event::Init => {
                    for c in caches.values() {
                        if let Ok(mut c) = c.lock() {
                            c.begin_relist();
                        }
                    }
                }
                // A (re)list's slices trigger their workloads once all are in the caches,
                // and only those it changed (`end_relist`).
                watcher::Event::InitApply(ms) => one(ms, &|c, k, s| c.relisted(k, s), false),
                watcher::Event::InitDone => {
                    for (kind, c) in &caches {
                        let due = c.lock().map(|mut c| c.end_relist()).unwrap_or_default();
                        for key in due {
                            trigger(*kind, key);
                        }
                    }
                }
                watcher::Event::Apply(ms) => one(ms, &|c, k, s| c.insert(k, s), true),
                watcher::Event::Delete(ms) => one(ms, &|c, k, _| c.remove(&k), true),
            }
            futures::future::ready(())
        })
    };
    let member = Member {
        name: name.clone(),
        target: SliceTarget::Pull {
            hub: hub.clone(),
            namespace,
        },
        link: Link::Pull {
            report: Mutex::new(guard),
        },
        slices: caches,
        connected_at: Timestamp::now(),
        state: Mutex::new(registry.heartbeat_of(&name)),
        tasks: vec![tokio::spawn(stream)],
    };
    tracing::info!(member = %name, "pull member: watching its slices on the hub");
    registry.insert(member)
}

/// A pull member's report as its agent last wrote it (`None`: none yet).
async fn read_report(
    hub: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<crate::api::federation::AgentReport>, String> {
    let got = tokio::time::timeout(
        Duration::from_secs(5),
        Api::<crate::api::member_slice::MemberReport>::namespaced(hub.clone(), namespace)
            .get_opt(name),
    )
    .await;
    match got {
        Ok(Ok(r)) => Ok(r.and_then(|r| r.status?.report)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 5s".into()),
    }
}

/// When a Lease was last renewed; `Ok(None)` when there is none.
async fn lease_renewed(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<Timestamp>, String> {
    let got = tokio::time::timeout(
        Duration::from_secs(5),
        Api::<Lease>::namespaced(client.clone(), namespace).get_opt(name),
    )
    .await;
    match got {
        Ok(Ok(lease)) => Ok(lease.and_then(|l| {
            let spec = l.spec?;
            spec.renew_time.or(spec.acquire_time).map(|t| t.0)
        })),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 5s".into()),
    }
}

/// One heartbeat. Push: `/version` within a short timeout, and the agent's Lease in the
/// member. Pull: the agent's Lease in the member's namespace on the hub is the heartbeat,
/// and the version is what the agent reported.
pub async fn heartbeat(hub: &Client, member: &Member) {
    let lease = agent_lease_name(&member.name);
    match &member.link {
        Link::Push { client, .. } => {
            let version =
                tokio::time::timeout(Duration::from_secs(5), client.apiserver_version()).await;
            let agent = lease_renewed(client, MEMBER_SYSTEM_NAMESPACE, &lease).await;
            let Ok(mut s) = member.state.lock() else {
                return;
            };
            match version {
                Ok(Ok(info)) => {
                    s.last_ok = Some(Timestamp::now());
                    s.version = Some(info.git_version);
                    s.last_error = None;
                }
                Ok(Err(e)) => s.last_error = Some(e.to_string()),
                Err(_) => s.last_error = Some("no answer within 5s".into()),
            }
            record_agent(&mut s, agent);
        }
        Link::Pull { report } => {
            let ns = pull_namespace(&member.name);
            let agent = lease_renewed(hub, &ns, &lease).await;
            // Its report, from the one object its agent may write; bounded before use.
            match read_report(hub, &ns, &lease).await {
                Ok(r) => {
                    if let Ok(mut guard) = report.lock() {
                        let before = guard.verdict.clone();
                        let verdict = guard.offer(
                            r.as_ref(),
                            Timestamp::now().as_second(),
                            &ReportLimits::default(),
                        );
                        if let (Verdict::Held(why) | Verdict::Refused(why), true) =
                            (&verdict, before.as_ref() != Some(&verdict))
                        {
                            tracing::warn!(member = %member.name, %why, "pull member's capacity report not used");
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(member = %member.name, error = %e, "reading the pull member's report")
                }
            }
            let version = report
                .lock()
                .ok()
                .and_then(|g| g.accepted().and_then(|r| r.kubernetes_version.clone()));
            let Ok(mut s) = member.state.lock() else {
                return;
            };
            record_agent(&mut s, agent);
            s.last_ok = s.agent_renewed;
            if version.is_some() {
                s.version = version;
            }
            s.last_error = Some(match &s.agent_error {
                Some(e) => format!("reading the agent's Lease: {e}"),
                None if s.agent_renewed.is_none() => "its agent has not connected yet".into(),
                None => "its agent stopped renewing its Lease".into(),
            });
        }
    }
}

fn record_agent(s: &mut Heartbeat, agent: Result<Option<Timestamp>, String>) {
    match agent {
        Ok(t) => {
            // A Lease deleted after it was seen keeps the last renewal: the agent is gone.
            if t.is_some() {
                s.agent_renewed = t;
            }
            s.agent_error = None;
        }
        Err(e) => s.agent_error = Some(e),
    }
}

/// The MemberCluster status for what the hub currently knows of the member.
pub fn member_status(
    previous: Option<&MemberClusterStatus>,
    member: Option<&Member>,
    connect_error: Option<&str>,
    generation: Option<i64>,
    now: Timestamp,
    grace: Duration,
) -> MemberClusterStatus {
    let mut s = previous.cloned().unwrap_or_default();
    s.observed_generation = generation;
    // What the hub made of a pull member's report, whatever its readiness.
    if let Some(Link::Pull { report }) = member.map(|m| &m.link)
        && let Some(verdict) = report.lock().ok().and_then(|g| g.verdict.clone())
    {
        let (status, reason, message) = match verdict {
            Verdict::Accepted => (ConditionStatus::True, "Accepted", String::new()),
            Verdict::Held(why) => (ConditionStatus::False, "GrowthHeld", why),
            Verdict::Refused(why) => (ConditionStatus::False, "Refused", why),
        };
        set_condition(
            &mut s.conditions,
            Condition::new(
                ct::REPORT_ACCEPTED,
                status,
                reason,
                message,
                generation,
                &Time(now),
            ),
        );
    }
    // Connected moments ago (this hub just started, or the member's Secret changed) and
    // not asked yet: say nothing new. Recording it as lost here would make its first
    // answer a "return", and a returned member takes no new work for the failback window.
    // Likewise while a heartbeat or the agent's Lease is not current yet within the grace
    // after connecting (a stale Lease left by an agent since restarted).
    if connect_error.is_none()
        && member.is_some_and(|m| !m.is_ready(now, grace) && m.connected_for(now) < grace)
    {
        return s;
    }
    let t = Time(now);
    let ready_cond = match (member, connect_error) {
        (_, Some(e)) => Condition::new(
            ct::READY,
            ConditionStatus::False,
            "KubeconfigInvalid",
            e,
            generation,
            &t,
        ),
        (None, None) => Condition::new(
            ct::READY,
            ConditionStatus::Unknown,
            "Connecting",
            "",
            generation,
            &t,
        ),
        (Some(m), None) => {
            let hb = m.state.lock().map(|h| h.clone()).unwrap_or_default();
            if let Some(v) = &hb.version {
                s.kubernetes_version = Some(v.clone());
            }
            if let Some(last) = hb.last_ok {
                s.last_heartbeat_time = Some(Time(last));
            }
            s.agent_renew_time = hb.agent_renewed.map(Time);
            if m.is_ready(now, grace) {
                Condition::new(
                    ct::READY,
                    ConditionStatus::True,
                    if m.is_pull() {
                        "AgentHeartbeatOK"
                    } else {
                        "HeartbeatOK"
                    },
                    "",
                    generation,
                    &t,
                )
            } else if m.is_pull() || (m.is_writable(now, grace) && m.agent_lost(now, grace)) {
                let why = match (hb.agent_renewed, &hb.agent_error) {
                    (_, Some(e)) => format!("its agent's Lease cannot be read: {e}"),
                    (None, None) => "its agent has not connected yet".to_string(),
                    (Some(t), None) => format!(
                        "its agent has not renewed its Lease for over {}s (last at {t})",
                        grace.as_secs()
                    ),
                };
                Condition::new(
                    ct::READY,
                    ConditionStatus::False,
                    "AgentLost",
                    why,
                    generation,
                    &t,
                )
            } else {
                let why = hb.last_error.unwrap_or_else(|| "no heartbeat yet".into());
                Condition::new(
                    ct::READY,
                    ConditionStatus::False,
                    "HeartbeatFailed",
                    format!("no heartbeat for over {}s: {why}", grace.as_secs()),
                    generation,
                    &t,
                )
            }
        }
    };
    let was_ready = s
        .conditions
        .iter()
        .any(|c| c.type_ == ct::READY && c.status == ConditionStatus::True);
    let ready_now = member.is_some_and(|m| m.is_ready(now, grace));
    if ready_now {
        if s.lost_time.take().is_some() {
            s.returned_time = Some(t.clone());
        }
    } else if was_ready || s.lost_time.is_some() {
        s.lost_time.get_or_insert_with(|| t.clone());
    }
    // Pending clean-ups have their own writer (field manager); this loop never applies them.
    s.pending_cleanups.clear();
    set_condition(&mut s.conditions, ready_cond);
    if let Some(m) = member.filter(|m| m.is_ready(now, grace)) {
        let usage = m.node_usage();
        let totals = capacity::totals(&usage);
        s.nodes = Some(usage.len() as i32);
        s.capacity = Some(totals.capacity.to_resource_amounts());
        s.allocatable = Some(totals.allocatable.to_resource_amounts());
        s.allocated = Some(totals.allocated.to_resource_amounts());
        s.available = Some(totals.available.to_resource_amounts());
        // Per-node room for the JSS's dry run (a pull member's report carries its pods
        // per node; the status does not).
        s.node_pools = if usage.len() <= crate::api::federation::MAX_STATUS_NODES {
            capacity::to_pools(&usage)
        } else {
            Vec::new()
        };
    }
    s
}

/// `status` as it should be written over `previous`: a status that differs only in the
/// times of the last heartbeat and of the agent's last renewal keeps the recorded times
/// until they are `record_every` old. Liveness is judged in memory on every heartbeat;
/// moving these two times in the status cost the hub's API server one write per member per
/// heartbeat (issue 40), which grows with the fleet. Any other change (readiness, capacity,
/// a condition, a time appearing) is written at once, with the fresh times.
pub fn hold_liveness_times(
    previous: Option<&MemberClusterStatus>,
    status: MemberClusterStatus,
    now: Timestamp,
    record_every: Duration,
) -> MemberClusterStatus {
    let Some(prev) = previous else {
        return status;
    };
    let age_ms = |t: &Option<Time>| {
        t.as_ref()
            .map(|t| now.as_millisecond() - t.0.as_millisecond())
    };
    let recent = age_ms(&prev.last_heartbeat_time)
        .is_some_and(|ms| ms < i64::try_from(record_every.as_millis()).unwrap_or(i64::MAX));
    let same_presence = prev.last_heartbeat_time.is_some() == status.last_heartbeat_time.is_some()
        && prev.agent_renew_time.is_some() == status.agent_renew_time.is_some();
    if !recent || !same_presence {
        return status;
    }
    let held = MemberClusterStatus {
        last_heartbeat_time: prev.last_heartbeat_time.clone(),
        agent_renew_time: prev.agent_renew_time.clone(),
        ..status.clone()
    };
    let stored = MemberClusterStatus {
        pending_cleanups: Vec::new(),
        ..prev.clone()
    };
    if held == stored { held } else { status }
}

/// Renews the hub's fence Lease in a push member (`controller::fence`) with the epoch
/// `status` records, as of the member's last heartbeat (the hub counts its grace from
/// it). A failure only delays the member's new shards; the next heartbeat tries again.
pub async fn renew_fence(
    member: &Member,
    status: &MemberClusterStatus,
    grace: Duration,
    heartbeat: Duration,
) {
    use crate::controller::fence;
    let (Some(client), Some(last_ok)) = (member.push_client(), member.last_heartbeat()) else {
        return;
    };
    // Its API server did not answer the heartbeat (down, within the grace): the renewal
    // would fail the same way; the MemberCluster status says why.
    if !member.answered_last() {
        return;
    }
    let epoch = fence::member_epoch(status.returned_time.as_ref().map(|t| t.0));
    let body = fence::renewal(
        MEMBER_SYSTEM_NAMESPACE,
        &epoch,
        fence::vouch_secs(grace.as_secs(), heartbeat.as_secs()),
        last_ok,
    );
    let api: Api<Lease> = Api::namespaced(client.clone(), MEMBER_SYSTEM_NAMESPACE);
    let renewed = tokio::time::timeout(
        Duration::from_secs(5),
        api.patch(
            fence::FENCE_LEASE,
            &PatchParams::apply(HUB_FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        ),
    )
    .await;
    match renewed {
        Ok(Ok(_)) => {}
        // Its job sets start no new shard until it is: worth a warning each time.
        Ok(Err(kube::Error::Api(e))) if e.code == 403 || e.code == 404 => {
            tracing::warn!(member = %member.name, error = %e.message, "the fence Lease was not renewed: the hub's identity in the member lacks the Lease or its rights, which `pinfed join` makes (join it again)")
        }
        // Held back at the write gate: the hub's own lease renewal is late.
        Ok(Err(e)) if crate::controller::write_gate::refused(&e) => {
            tracing::debug!(member = %member.name, "the fence Lease renewal waits for the hub's lease")
        }
        Ok(Err(e)) => {
            tracing::warn!(member = %member.name, error = %crate::controller::Chain(&e), "the fence Lease was not renewed")
        }
        Err(_) => {
            tracing::warn!(member = %member.name, "the fence Lease was not renewed within 5s")
        }
    }
}

/// MemberClusters, read untyped: another pinfed version may have stored one this version
/// decodes only with its status's misfit fields left out
/// ([`crate::controller::mirror::decode_object`]).
pub fn member_clusters(hub: &Client) -> Api<kube::api::DynamicObject> {
    Api::all_with(
        hub.clone(),
        &kube::api::ApiResource::erase::<MemberCluster>(&()),
    )
}

/// Writes a MemberCluster status with server-side apply.
pub async fn write_status(
    hub: &Client,
    name: &str,
    status: &MemberClusterStatus,
) -> Result<(), kube::Error> {
    // Untyped: the answer is not read, and a status field another version wrote that
    // this write does not replace would fail its decoding after the write succeeded.
    let api = member_clusters(hub);
    let patch = serde_json::json!({
        "apiVersion": "federation.pinterest.com/v1alpha1",
        "kind": "MemberCluster",
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(HUB_FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(generation: i64) -> Arc<SliceSummary> {
        Arc::new(SliceSummary {
            hub_uid: None,
            generation: Some(generation),
            hub_generation: None,
            spec_digest: 0,
            labels: Default::default(),
            annotations: Default::default(),
            share: Default::default(),
            report: Default::default(),
        })
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn live(heartbeat: i64, agent: Option<i64>) -> MemberClusterStatus {
        MemberClusterStatus {
            last_heartbeat_time: Some(Time(at(heartbeat))),
            agent_renew_time: agent.map(|a| Time(at(a))),
            nodes: Some(4),
            ..Default::default()
        }
    }

    #[test]
    fn liveness_times_alone_are_recorded_once_a_minute() {
        let every = Duration::from_secs(60);
        let stored = live(1_000, Some(999));
        // Five seconds on, only the times moved: the stored ones stay, nothing to write.
        let held = hold_liveness_times(Some(&stored), live(1_005, Some(1_004)), at(1_005), every);
        assert_eq!(held, stored);
        // A minute after the recorded heartbeat they are written.
        let fresh = hold_liveness_times(Some(&stored), live(1_060, Some(1_059)), at(1_060), every);
        assert_eq!(fresh, live(1_060, Some(1_059)));
    }

    #[test]
    fn any_other_change_is_written_at_once_with_fresh_times() {
        let every = Duration::from_secs(60);
        let stored = live(1_000, Some(999));
        let mut changed = live(1_005, Some(1_004));
        changed.nodes = Some(5);
        assert_eq!(
            hold_liveness_times(Some(&stored), changed.clone(), at(1_005), every),
            changed
        );
        // The agent's first renewal appears at once.
        let first = live(1_005, Some(1_004));
        assert_eq!(
            hold_liveness_times(Some(&live(1_000, None)), first.clone(), at(1_005), every),
            first
        );
        // Pending clean-ups have their own writer and do not count as a change.
        let mut with_cleanups = stored.clone();
        with_cleanups.pending_cleanups = vec![crate::api::federation::PendingCleanup {
            kind: "PinterestService".into(),
            namespace: "ns".into(),
            name: "web".into(),
            hub_uid: "u".into(),
        }];
        assert_eq!(
            hold_liveness_times(
                Some(&with_cleanups),
                live(1_005, Some(1_004)),
                at(1_005),
                every
            ),
            stored
        );
        // No status yet: written as is.
        assert_eq!(
            hold_liveness_times(None, first.clone(), at(1_005), every),
            first
        );
    }

    /// After a watch gap the re-list is the only news: its slices trigger their
    /// workloads once the cache holds the list (not as each comes, when a reconcile would
    /// read the copy from before the gap), and only those it changed.
    #[test]
    fn a_relist_triggers_what_it_changed_once_the_cache_has_it() {
        let slice = |name: &str, generation: i64| -> DynamicObject {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
                "metadata": {"name": name, "namespace": "ns", "generation": generation},
                "spec": {"replicas": 1},
            }))
            .unwrap()
        };
        let kind = WorkloadKind::Service;
        let key = |n: &str| ("ns".to_string(), n.to_string());
        let generation = |c: &SliceCache, n: &str| c.get(&key(n)).and_then(|s| s.generation);
        let mut cache = SliceCache::default();
        assert!(cache.ingest(kind, &watcher::Event::Init).is_empty());
        for o in [slice("same", 1), slice("changed", 1), slice("gone", 1)] {
            assert!(cache.ingest(kind, &watcher::Event::InitApply(o)).is_empty());
        }
        let mut first = cache.ingest(kind, &watcher::Event::InitDone);
        first.sort();
        assert_eq!(
            first,
            [key("changed"), key("gone"), key("same")],
            "the first list: all new"
        );
        // A gap: `changed` moved on, `gone` was deleted, `new` was made.
        assert!(cache.ingest(kind, &watcher::Event::Init).is_empty());
        for o in [slice("same", 1), slice("changed", 2), slice("new", 1)] {
            assert!(cache.ingest(kind, &watcher::Event::InitApply(o)).is_empty());
        }
        assert_eq!(
            generation(&cache, "changed"),
            Some(1),
            "not before the list is done"
        );
        let mut due = cache.ingest(kind, &watcher::Event::InitDone);
        due.sort();
        assert_eq!(due, [key("changed"), key("gone"), key("new")]);
        assert_eq!(generation(&cache, "changed"), Some(2));
        assert!(cache.get(&key("gone")).is_none());
        // Events between lists trigger at once.
        assert_eq!(
            cache.ingest(kind, &watcher::Event::Apply(slice("same", 2))),
            [key("same")]
        );
    }

    /// The answer to a write handled after the watch reported that write (and what the
    /// agent wrote since): no stand-in, or it would hide the agent's report.
    #[test]
    fn a_write_the_watch_reported_first_does_not_stand_in() {
        let key = ("ns".to_string(), "web".to_string());
        let mut cache = SliceCache::default();
        let reported = Arc::new(SliceSummary {
            report: slices::SliceReport {
                state: "Ready",
                ..Default::default()
            },
            ..(*summary(1)).clone()
        });
        cache.insert(key.clone(), reported.clone());
        cache.wrote(key.clone(), summary(1));
        assert_eq!(cache.get(&key), Some(reported));
    }

    /// A slice this process wrote is read in place of the watch's older copy until the
    /// watch reports anything for it.
    #[test]
    fn a_written_slice_stands_in_until_the_watch_reports_it() {
        let key = ("ns".to_string(), "web".to_string());
        let mut cache = SliceCache::default();
        cache.insert(key.clone(), summary(1));
        cache.wrote(key.clone(), summary(2));
        assert_eq!(cache.get(&key).and_then(|s| s.generation), Some(2));
        // The watch's event (here: still the older copy) ends the stand-in.
        cache.insert(key.clone(), summary(1));
        assert_eq!(cache.get(&key).and_then(|s| s.generation), Some(1));
        // A write then a delete reported by the watch: gone.
        cache.wrote(key.clone(), summary(3));
        cache.remove(&key);
        assert!(cache.get(&key).is_none());
    }
}

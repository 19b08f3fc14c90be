//! Member capacity from its nodes and pods: per node what is allocatable and what the
//! requests of non-terminated pods take (what placement packs replicas against), and the
//! totals the MemberCluster status shows; and the scheduler's view of one pod's requests,
//! which sizes a replica. Pure: the hub feeds it the objects it mirrors.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Node, Pod};

use crate::api::common::{LABEL_KIND, LABEL_SHARD, LABEL_WORKLOAD};
use crate::api::federation::{
    Amounts, NodePoolReport, NodeReport, NodeTaintReport, NodeWorkloadReport, ResourceAmounts,
};
use crate::api::quantity::Milli;
use crate::api::ranges::RangeSet;

pub const GPU: &str = "nvidia.com/gpu";

/// cpu and memory in milli-units; pods and GPUs in milli-units too, for one arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Res {
    pub cpu: Milli,
    pub memory: Milli,
    pub pods: Milli,
    pub gpus: Milli,
}

impl Res {
    pub fn plus(self, o: Res) -> Res {
        Res {
            cpu: self.cpu + o.cpu,
            memory: self.memory + o.memory,
            pods: self.pods + o.pods,
            gpus: self.gpus + o.gpus,
        }
    }
    /// Saturating at zero: an overcommitted node has no room, not negative room.
    pub fn minus(self, o: Res) -> Res {
        let s = |a: Milli, b: Milli| Milli((a.0 - b.0).max(0));
        Res {
            cpu: s(self.cpu, o.cpu),
            memory: s(self.memory, o.memory),
            pods: s(self.pods, o.pods),
            gpus: s(self.gpus, o.gpus),
        }
    }
    /// `self - o` exactly (a running sum goes back to zero when what it added goes).
    pub fn less(self, o: Res) -> Res {
        Res {
            cpu: self.cpu - o.cpu,
            memory: self.memory - o.memory,
            pods: self.pods - o.pods,
            gpus: self.gpus - o.gpus,
        }
    }
    fn max(self, o: Res) -> Res {
        Res {
            cpu: self.cpu.max(o.cpu),
            memory: self.memory.max(o.memory),
            pods: self.pods.max(o.pods),
            gpus: self.gpus.max(o.gpus),
        }
    }
    pub fn to_amounts(self) -> Amounts {
        Amounts {
            cpu: Some(self.cpu),
            memory: Some(self.memory),
            pods: Some(self.pods),
            gpus: Some(self.gpus),
        }
    }
    pub fn to_resource_amounts(self) -> ResourceAmounts {
        ResourceAmounts::from_amounts(&self.to_amounts())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodeTaint {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

/// One node as placement sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeUsage {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<NodeTaint>,
    /// Ready and not cordoned: only such nodes count as room.
    pub schedulable: bool,
    pub capacity: Res,
    pub allocatable: Res,
    pub allocated: Res,
}

impl NodeUsage {
    pub fn free(&self) -> Res {
        if self.schedulable {
            self.allocatable.minus(self.allocated)
        } else {
            Res::default()
        }
    }
}

fn quantity_map(
    map: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Res {
    let get = |k: &str| {
        map.and_then(|m| m.get(k))
            .and_then(|q| Milli::parse(&q.0).ok())
            .unwrap_or_default()
    };
    Res {
        cpu: get("cpu"),
        memory: get("memory"),
        pods: get("pods"),
        gpus: get(GPU),
    }
}

fn container_requests(c: &Container) -> Res {
    let r = c.resources.as_ref();
    let mut req = quantity_map(r.and_then(|r| r.requests.as_ref()));
    // Extended resources such as GPUs may be given as limits only; limits stand in.
    if req.gpus == Milli::ZERO {
        req.gpus = quantity_map(r.and_then(|r| r.limits.as_ref())).gpus;
    }
    req
}

/// The scheduler's view of a pod's requests: app containers plus native sidecars, or the
/// largest one-shot init container if that is bigger; plus one pod slot.
pub fn pod_requests(pod: &Pod) -> Res {
    let Some(spec) = &pod.spec else {
        return Res::default();
    };
    let mut sidecars = Res::default();
    let mut init_peak = Res::default();
    for c in spec.init_containers.iter().flatten() {
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars = sidecars.plus(container_requests(c));
        } else {
            init_peak = init_peak.max(sidecars.plus(container_requests(c)));
        }
    }
    let apps = spec
        .containers
        .iter()
        .fold(Res::default(), |a, c| a.plus(container_requests(c)));
    let mut total = apps.plus(sidecars).max(init_peak);
    total = total.plus(quantity_map(spec.overhead.as_ref()));
    total.pods = Milli::from_units(1);
    total
}

/// Whether a pod still holds its node's room (not Succeeded or Failed).
pub fn pod_is_active(p: &Pod) -> bool {
    !matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

/// A running pod of a Pinterest workload on a node, for choosing preemption victims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadPod {
    /// `Kind/namespace/name` of its workload.
    pub key: String,
    pub node: String,
    pub resources: super::Resources,
    /// A job set's shard index.
    pub shard: Option<u32>,
}

/// A pod of a Pinterest workload bound to a node and not finished (nor being deleted).
pub fn workload_pod(p: &Pod) -> Option<WorkloadPod> {
    let labels = p.metadata.labels.as_ref()?;
    let name = labels.get(LABEL_WORKLOAD)?;
    let kind = labels.get(LABEL_KIND)?;
    let node = p.spec.as_ref()?.node_name.clone()?;
    if !pod_is_active(p) || p.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let r = pod_requests(p);
    Some(WorkloadPod {
        key: format!(
            "{kind}/{}/{name}",
            p.metadata.namespace.as_deref().unwrap_or_default()
        ),
        node,
        resources: resources_of(r),
        shard: labels.get(LABEL_SHARD).and_then(|s| s.parse().ok()),
    })
}

fn resources_of(r: Res) -> super::Resources {
    super::Resources {
        cpu: r.cpu,
        memory: r.memory,
        gpu: i64::try_from(r.gpus.units()).unwrap_or(0),
        pods: 1,
    }
}

/// A pull member's report of its workloads' pods: per node, one entry per workload and
/// request size (a job set's shards as one range list), so a member with thousands of
/// pods reports a few lines per workload. [`pods_of_pools`] gives the pods back.
pub fn workload_reports(pods: &[WorkloadPod]) -> BTreeMap<String, Vec<NodeWorkloadReport>> {
    type Group = (u32, Vec<u32>);
    let mut groups: BTreeMap<(&str, &str, Milli, Milli, i64), Group> = BTreeMap::new();
    for p in pods {
        let r = &p.resources;
        let g = groups
            .entry((p.node.as_str(), p.key.as_str(), r.cpu, r.memory, r.gpu))
            .or_default();
        g.0 += 1;
        g.1.extend(p.shard);
    }
    let mut out: BTreeMap<String, Vec<NodeWorkloadReport>> = BTreeMap::new();
    for ((node, key, cpu, memory, gpu), (n, shards)) in groups {
        let requests = Res {
            cpu,
            memory,
            pods: Milli(1_000),
            gpus: Milli(i128::from(gpu) * 1_000),
        };
        out.entry(node.to_string())
            .or_default()
            .push(NodeWorkloadReport {
                workload: key.to_string(),
                pods: i32::try_from(n).unwrap_or(i32::MAX),
                requests: requests.to_resource_amounts(),
                shards: (!shards.is_empty()).then(|| RangeSet::from_indices(shards).to_string()),
            });
    }
    out
}

/// The workloads' pods a pull member reported ([`workload_reports`]), one per pod: a
/// job set's shards each on its own pod, the rest without a shard.
pub fn pods_of_pools(pools: &[NodePoolReport]) -> Vec<WorkloadPod> {
    let mut out = Vec::new();
    for n in pools.iter().flat_map(|p| &p.nodes) {
        for w in &n.workloads {
            let resources = resources_of(res_of(&w.requests));
            let shards: Vec<u32> = w
                .shards
                .as_deref()
                .and_then(|s| RangeSet::parse(s).ok())
                .map(|s| {
                    s.iter()
                        .take(usize::try_from(w.pods.max(0)).unwrap_or(0))
                        .collect()
                })
                .unwrap_or_default();
            let count = usize::try_from(w.pods.max(0)).unwrap_or(0);
            for i in 0..count {
                out.push(WorkloadPod {
                    key: w.workload.clone(),
                    node: n.name.clone(),
                    resources,
                    shard: shards.get(i).copied(),
                });
            }
        }
    }
    out
}

/// Per-node usage from the nodes and pods of a member, sorted by node name.
pub fn node_usage<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    pods: impl IntoIterator<Item = &'a Pod>,
) -> Vec<NodeUsage> {
    let mut allocated: BTreeMap<String, Res> = BTreeMap::new();
    for p in pods.into_iter().filter(|p| pod_is_active(p)) {
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            let e = allocated.entry(node.to_string()).or_default();
            *e = e.plus(pod_requests(p));
        }
    }
    node_usage_from(nodes, &allocated)
}

/// Per-node usage from the nodes of a member and what its pods request on each
/// (`allocated`, by node name), sorted by node name.
pub fn node_usage_from<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    allocated: &BTreeMap<String, Res>,
) -> Vec<NodeUsage> {
    let mut out: Vec<NodeUsage> = nodes
        .into_iter()
        .map(|n| {
            let name = n.metadata.name.clone().unwrap_or_default();
            let status = n.status.as_ref();
            let ready = status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let cordoned = n
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false);
            NodeUsage {
                labels: n.metadata.labels.clone().unwrap_or_default(),
                taints: n
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .map(|ts| {
                        ts.iter()
                            .map(|t| NodeTaint {
                                key: t.key.clone(),
                                value: t.value.clone(),
                                effect: t.effect.clone(),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                schedulable: ready && !cordoned,
                capacity: quantity_map(status.and_then(|s| s.capacity.as_ref())),
                allocatable: quantity_map(status.and_then(|s| s.allocatable.as_ref())),
                allocated: allocated.get(name.as_str()).copied().unwrap_or_default(),
                name,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Totals for MemberCluster status: capacity, allocatable, allocated, available.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Totals {
    pub capacity: Res,
    pub allocatable: Res,
    pub allocated: Res,
    pub available: Res,
}

pub fn totals(nodes: &[NodeUsage]) -> Totals {
    nodes.iter().fold(Totals::default(), |t, n| Totals {
        capacity: t.capacity.plus(n.capacity),
        allocatable: t.allocatable.plus(n.allocatable),
        allocated: t.allocated.plus(n.allocated),
        available: t.available.plus(n.free()),
    })
}

/// Keeps only what capacity needs, so a member with 100k pods stays cheap to mirror: its
/// namespace, name and workload labels, node, phase and deletion mark, and its requests
/// as the scheduler counts them ([`pod_requests`]) folded into one container. (A
/// `Container` alone is 2 KiB before any of its strings: the five of a Pinterest pod with
/// its sidecars were most of a hub's memory with 10,000 pods in its members.)
pub fn trim_pod(p: &mut Pod) {
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let requests = pod_requests(p);
    let m = &mut p.metadata;
    m.managed_fields = None;
    m.annotations = None;
    m.owner_references = None;
    m.generate_name = None;
    // Which workload a pod belongs to is kept: re-plans do not count a workload's own pods;
    // and a job set's shard, which preemption takes back one by one.
    if let Some(l) = m.labels.as_mut() {
        l.retain(|k, _| k == LABEL_WORKLOAD || k == LABEL_KIND || k == LABEL_SHARD);
    }
    p.spec = p.spec.take().map(|spec| {
        let quantity = |v: Milli| Quantity(format!("{}m", v.0));
        let mut amounts = BTreeMap::from([
            ("cpu".to_string(), quantity(requests.cpu)),
            ("memory".to_string(), quantity(requests.memory)),
        ]);
        if requests.gpus != Milli::ZERO {
            amounts.insert(GPU.to_string(), quantity(requests.gpus));
        }
        PodSpec {
            node_name: spec.node_name,
            containers: vec![Container {
                name: "requests".to_string(),
                resources: Some(ResourceRequirements {
                    requests: Some(amounts),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }
    });
    p.status = p.status.take().map(|s| PodStatus {
        phase: s.phase,
        ..Default::default()
    });
}

pub fn trim_node(n: &mut Node) {
    n.metadata.managed_fields = None;
    n.metadata.annotations = None;
    if let Some(s) = n.status.as_mut() {
        s.images = None;
        s.volumes_attached = None;
        s.volumes_in_use = None;
    }
}

/// The node label that names one node: left out of a pool's shape, put back per node.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

fn res_of(a: &ResourceAmounts) -> Res {
    let a = a.parse().unwrap_or_default();
    Res {
        cpu: a.cpu.unwrap_or_default(),
        memory: a.memory.unwrap_or_default(),
        pods: a.pods.unwrap_or_default(),
        gpus: a.gpus.unwrap_or_default(),
    }
}

/// Groups nodes into pools of one shape (labels but the host name, taints, capacity,
/// allocatable), each node with its allocation: a pull member's agent reports this, and
/// [`from_pools`] gives placement the same nodes back.
pub fn to_pools(nodes: &[NodeUsage]) -> Vec<NodePoolReport> {
    let mut pools: Vec<NodePoolReport> = Vec::new();
    for n in nodes {
        let mut labels = n.labels.clone();
        labels.remove(HOSTNAME_LABEL);
        let taints: Vec<NodeTaintReport> = n
            .taints
            .iter()
            .map(|t| NodeTaintReport {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
            })
            .collect();
        let capacity = n.capacity.to_resource_amounts();
        let allocatable = n.allocatable.to_resource_amounts();
        let node = NodeReport {
            name: n.name.clone(),
            schedulable: n.schedulable,
            allocated: n.allocated.to_resource_amounts(),
            workloads: Vec::new(),
        };
        match pools.iter_mut().find(|p| {
            p.labels == labels
                && p.taints == taints
                && p.capacity == capacity
                && p.allocatable == allocatable
        }) {
            Some(p) => p.nodes.push(node),
            None => pools.push(NodePoolReport {
                labels,
                taints,
                capacity,
                allocatable,
                nodes: vec![node],
            }),
        }
    }
    pools
}

/// The nodes of pool reports, as placement sees nodes (see [`to_pools`]).
pub fn from_pools(pools: &[NodePoolReport]) -> Vec<NodeUsage> {
    pools
        .iter()
        .flat_map(|p| {
            p.nodes.iter().map(move |n| {
                let mut labels = p.labels.clone();
                labels.insert(HOSTNAME_LABEL.to_string(), n.name.clone());
                NodeUsage {
                    name: n.name.clone(),
                    labels,
                    taints: p
                        .taints
                        .iter()
                        .map(|t| NodeTaint {
                            key: t.key.clone(),
                            value: t.value.clone(),
                            effect: t.effect.clone(),
                        })
                        .collect(),
                    schedulable: n.schedulable,
                    capacity: res_of(&p.capacity),
                    allocatable: res_of(&p.allocatable),
                    allocated: res_of(&n.allocated),
                }
            })
        })
        .collect()
}

/// The room placement sees on a member's nodes: its schedulable nodes, each with what is
/// free, in name order (first-fit packs in this order, so the hub and the JSS's dry run,
/// reading the same nodes, pack the same).
pub fn node_rooms(usage: Vec<NodeUsage>) -> Vec<super::model::NodeRoom> {
    use super::model::{NodeRoom, Resources, Taint, TaintEffect};
    let mut rooms: Vec<NodeRoom> = usage
        .into_iter()
        .filter(|n| n.schedulable)
        .map(|n| {
            let free = n.free();
            NodeRoom {
                name: n.name,
                labels: n.labels,
                taints: n
                    .taints
                    .into_iter()
                    .map(|t| Taint {
                        key: t.key,
                        value: t.value.unwrap_or_default(),
                        effect: TaintEffect::parse(&t.effect),
                    })
                    .collect(),
                free: Resources {
                    cpu: free.cpu,
                    memory: free.memory,
                    gpu: i64::try_from(free.gpus.units()).unwrap_or(0),
                    pods: i64::try_from(free.pods.units()).unwrap_or(0),
                },
            }
        })
        .collect();
    rooms.sort_by(|a, b| a.name.cmp(&b.name));
    rooms
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cpu: &str, gpu: Option<&str>, ready: bool) -> Node {
        let mut alloc = serde_json::json!({"cpu": cpu, "memory": "32Gi", "pods": "110"});
        if let Some(g) = gpu {
            alloc[GPU] = serde_json::json!(g);
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"pool": "general"}},
            "spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]},
            "status": {"capacity": alloc, "allocatable": alloc,
                       "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .unwrap()
    }

    fn pod(
        node: &str,
        phase: &str,
        cpu: &str,
        sidecar_cpu: Option<&str>,
        gpu_limit: Option<&str>,
    ) -> Pod {
        let mut app = serde_json::json!({"name": "app", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}});
        if let Some(g) = gpu_limit {
            app["resources"]["limits"] = serde_json::json!({GPU: g});
        }
        let init: Vec<serde_json::Value> = sidecar_cpu
            .map(|c| vec![serde_json::json!({"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": c}}})])
            .unwrap_or_default();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"nodeName": node, "containers": [app], "initContainers": init},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    fn labelled(mut p: Pod, ns: &str, workload: &str, shard: Option<u32>) -> Pod {
        p.metadata.namespace = Some(ns.into());
        let mut l = BTreeMap::from([
            (LABEL_WORKLOAD.to_string(), workload.to_string()),
            (LABEL_KIND.to_string(), "PinterestJobSet".to_string()),
        ]);
        if let Some(s) = shard {
            l.insert(LABEL_SHARD.to_string(), s.to_string());
        }
        p.metadata.labels = Some(l);
        p
    }

    #[test]
    fn a_pull_members_workload_pods_survive_its_report_grouped_per_node_and_size() {
        let pods = [
            labelled(
                pod("n1", "Running", "3", None, None),
                "ml",
                "batch",
                Some(0),
            ),
            labelled(
                pod("n1", "Running", "3", None, None),
                "ml",
                "batch",
                Some(1),
            ),
            labelled(
                pod("n2", "Running", "3", None, None),
                "ml",
                "batch",
                Some(5),
            ),
            labelled(
                pod("n2", "Pending", "500m", Some("100m"), Some("1")),
                "ml",
                "web",
                None,
            ),
            // Finished, unlabelled or unbound: not a victim.
            labelled(
                pod("n2", "Succeeded", "3", None, None),
                "ml",
                "batch",
                Some(7),
            ),
            pod("n2", "Running", "1", None, None),
        ];
        let running: Vec<WorkloadPod> = pods.iter().filter_map(workload_pod).collect();
        assert_eq!(running.len(), 4);
        let reports = workload_reports(&running);
        assert_eq!(reports["n1"].len(), 1, "two shards of one size: one line");
        assert_eq!(reports["n1"][0].pods, 2);
        assert_eq!(reports["n1"][0].shards.as_deref(), Some("0-1"));
        assert_eq!(reports["n2"].len(), 2);
        let mut usage = node_usage(
            &[
                node("n1", "8", None, true),
                node("n2", "8", Some("4"), true),
            ],
            &pods,
        );
        usage.sort_by(|a, b| a.name.cmp(&b.name));
        let mut pools = to_pools(&usage);
        for n in pools.iter_mut().flat_map(|p| p.nodes.iter_mut()) {
            n.workloads = reports.get(&n.name).cloned().unwrap_or_default();
        }
        // Through the MemberCluster status and back: the same pods.
        let pools: Vec<NodePoolReport> =
            serde_json::from_value(serde_json::to_value(&pools).unwrap()).unwrap();
        let mut back = pods_of_pools(&pools);
        let mut want = running.clone();
        let order = |p: &WorkloadPod| (p.node.clone(), p.key.clone(), p.shard);
        back.sort_by_key(order);
        want.sort_by_key(order);
        assert_eq!(back, want);
    }

    #[test]
    fn requests_of_active_pods_count_including_native_sidecars_and_gpu_limits() {
        let nodes = [
            node("n1", "8", Some("4"), true),
            node("n2", "8", None, true),
        ];
        let pods = [
            pod("n1", "Running", "1", Some("500m"), Some("2")),
            pod("n1", "Succeeded", "4", None, None),
            pod("n2", "Pending", "2", None, None),
        ];
        let usage = node_usage(&nodes, &pods);
        assert_eq!(usage[0].allocated.cpu, Milli(1500));
        assert_eq!(usage[0].allocated.gpus, Milli::from_units(2));
        assert_eq!(
            usage[0].allocated.pods,
            Milli::from_units(1),
            "the Succeeded pod is not counted"
        );
        assert_eq!(usage[0].free().cpu, Milli(6500));
        assert_eq!(usage[1].allocated.cpu, Milli(2000));
        assert_eq!(usage[0].taints[0].key, "dedicated");
        let t = totals(&usage);
        assert_eq!(t.allocatable.cpu, Milli(16000));
        assert_eq!(t.available.cpu, Milli(12500));
        assert_eq!(t.available.gpus, Milli::from_units(2));
    }

    #[test]
    fn unready_nodes_offer_no_room_and_overcommit_is_not_negative() {
        let nodes = [node("n1", "1", None, false), node("n2", "1", None, true)];
        let pods = [pod("n2", "Running", "3", None, None)];
        let usage = node_usage(&nodes, &pods);
        assert_eq!(usage[0].free(), Res::default());
        assert_eq!(usage[1].free().cpu, Milli::ZERO);
    }

    /// A trimmed pod counts as the whole one did: its requests (apps, native sidecars, the
    /// peak of one-shot init containers, overhead, GPUs given as limits), its node, phase,
    /// workload and shard — and keeps one container, none of the rest.
    #[test]
    fn a_trimmed_pod_counts_as_the_whole_one() {
        let whole = |phase: &str, init_cpu: &str| {
            let mut p = labelled(
                pod("n1", phase, "1500m", Some("250m"), Some("2")),
                "ml",
                "train",
                Some(7),
            );
            let spec = p.spec.as_mut().unwrap();
            spec.init_containers.get_or_insert_with(Vec::new).push(
                serde_json::from_value(serde_json::json!({"name": "init",
                    "resources": {"requests": {"cpu": init_cpu, "memory": "3Gi"}}}))
                .unwrap(),
            );
            spec.overhead = Some(BTreeMap::from([(
                "memory".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("64Mi".into()),
            )]));
            p.metadata.annotations = Some(BTreeMap::from([("a".into(), "b".into())]));
            p
        };
        for (phase, init_cpu) in [("Running", "100m"), ("Running", "4"), ("Succeeded", "1")] {
            let original = whole(phase, init_cpu);
            let mut trimmed = original.clone();
            trim_pod(&mut trimmed);
            assert_eq!(
                pod_requests(&trimmed),
                pod_requests(&original),
                "{phase} {init_cpu}"
            );
            assert_eq!(
                workload_pod(&trimmed),
                workload_pod(&original),
                "{phase} {init_cpu}"
            );
            assert_eq!(pod_is_active(&trimmed), pod_is_active(&original));
            let spec = trimmed.spec.as_ref().unwrap();
            assert_eq!(spec.containers.len(), 1);
            assert!(spec.init_containers.is_none() && spec.overhead.is_none());
            assert!(trimmed.metadata.annotations.is_none());
        }
        assert_eq!(
            pod_requests(&whole("Running", "4")).cpu,
            Milli(4250),
            "the peak"
        );
        assert_eq!(pod_requests(&whole("Running", "4")).gpus, Milli(2000));
    }

    #[test]
    fn a_big_init_container_sets_the_peak() {
        let mut p = pod("n1", "Running", "1", None, None);
        p.spec.as_mut().unwrap().init_containers = Some(vec![
            serde_json::from_value(
                serde_json::json!({"name": "init", "resources": {"requests": {"cpu": "3"}}}),
            )
            .unwrap(),
        ]);
        assert_eq!(pod_requests(&p).cpu, Milli(3000));
    }

    #[test]
    fn pools_give_back_the_nodes_they_were_made_of() {
        let node = |name: &str, pool: &str, cpu: i128, used: i128, tainted: bool| NodeUsage {
            name: name.into(),
            labels: [
                ("pool".to_string(), pool.to_string()),
                (HOSTNAME_LABEL.to_string(), name.to_string()),
            ]
            .into(),
            taints: if tainted {
                vec![NodeTaint {
                    key: "dedicated".into(),
                    value: Some("gpu".into()),
                    effect: "NoSchedule".into(),
                }]
            } else {
                vec![]
            },
            schedulable: name != "c",
            capacity: Res {
                cpu: Milli(cpu * 1000),
                pods: Milli(110_000),
                ..Default::default()
            },
            allocatable: Res {
                cpu: Milli(cpu * 1000),
                pods: Milli(110_000),
                ..Default::default()
            },
            allocated: Res {
                cpu: Milli(used),
                pods: Milli(1000),
                ..Default::default()
            },
        };
        let nodes = vec![
            node("a", "general", 8, 500, false),
            node("b", "general", 8, 7500, false),
            node("c", "general", 8, 0, false),
            node("g", "gpu", 32, 0, true),
        ];
        let pools = to_pools(&nodes);
        assert_eq!(pools.len(), 2, "{pools:?}");
        assert_eq!(pools[0].nodes.len(), 3);
        assert!(!pools[0].labels.contains_key(HOSTNAME_LABEL));
        assert_eq!(from_pools(&pools), nodes);
    }
}

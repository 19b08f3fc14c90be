//! A push member's pods as placement counts them, kept up to date from the hub's pod
//! watch: per pod only its node, requests and workload, and per node the sum of what its
//! active pods request. A decision then reads the sums (one entry per node) instead of
//! walking every pod of the member and parsing its containers' quantities again — which,
//! with 10,000 pods in three members, was 400 s of the hub's CPU in one first sync and
//! set its pace (`docs/benchmarks.md`, scale10k-agents).

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::Pod;

use super::capacity::{Res, WorkloadPod, pod_is_active, pod_requests, workload_pod};
use crate::api::common::{LABEL_KIND, LABEL_WORKLOAD};

/// A pod by namespace and name.
type PodKey = (String, String);
/// A workload by namespace, kind and name (its pods' labels).
type WorkloadKey = (String, String, String);

/// What one pod counts for.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    /// Its node, if it is bound and not finished: only then does it take room there.
    counted_on: Option<String>,
    requests: Res,
    workload: Option<WorkloadKey>,
    /// For preemption: a Pinterest workload's pod, bound, not finished nor deleting.
    victim: Option<WorkloadPod>,
}

impl Entry {
    fn of(p: &Pod) -> Entry {
        let active = pod_is_active(p);
        let labels = p.metadata.labels.as_ref();
        let label = |k: &str| labels.and_then(|l| l.get(k)).cloned();
        Entry {
            counted_on: p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|_| active),
            requests: pod_requests(p),
            workload: label(LABEL_KIND)
                .zip(label(LABEL_WORKLOAD))
                .map(|(kind, name)| (p.metadata.namespace.clone().unwrap_or_default(), kind, name)),
            victim: workload_pod(p),
        }
    }
}

/// A member's pods, summed per node.
#[derive(Debug, Default)]
pub struct PodBook {
    pods: HashMap<PodKey, Entry>,
    /// What the active pods bound to each node request.
    by_node: HashMap<String, Res>,
    /// Each workload's pods.
    by_workload: HashMap<WorkloadKey, HashSet<PodKey>>,
    /// A (re)list in progress: it replaces `pods` when done.
    relisting: Option<HashMap<PodKey, Entry>>,
    listed: bool,
}

fn key(p: &Pod) -> PodKey {
    (
        p.metadata.namespace.clone().unwrap_or_default(),
        p.metadata.name.clone().unwrap_or_default(),
    )
}

impl PodBook {
    /// Takes in one event of the member's pod watch.
    pub fn ingest(&mut self, event: &kube::runtime::watcher::Event<Pod>) {
        use kube::runtime::watcher::Event;
        match event {
            Event::Init => self.relisting = Some(HashMap::new()),
            Event::InitApply(p) => {
                self.relisting
                    .get_or_insert_with(HashMap::new)
                    .insert(key(p), Entry::of(p));
            }
            Event::InitDone => {
                if let Some(fresh) = self.relisting.take() {
                    self.replace(fresh);
                }
                self.listed = true;
            }
            Event::Apply(p) => {
                self.forget(&key(p));
                self.add(key(p), Entry::of(p));
            }
            Event::Delete(p) => self.forget(&key(p)),
        }
    }

    /// Whether the watch has listed the member's pods once.
    pub fn listed(&self) -> bool {
        self.listed
    }

    fn add(&mut self, k: PodKey, e: Entry) {
        if let Some(node) = &e.counted_on {
            let sum = self.by_node.entry(node.clone()).or_default();
            *sum = sum.plus(e.requests);
        }
        if let Some(w) = &e.workload {
            self.by_workload
                .entry(w.clone())
                .or_default()
                .insert(k.clone());
        }
        self.pods.insert(k, e);
    }

    fn forget(&mut self, k: &PodKey) {
        let Some(e) = self.pods.remove(k) else {
            return;
        };
        if let Some(node) = &e.counted_on
            && let Some(sum) = self.by_node.get_mut(node)
        {
            *sum = sum.less(e.requests);
            if *sum == Res::default() {
                self.by_node.remove(node);
            }
        }
        if let Some(w) = &e.workload
            && let Some(pods) = self.by_workload.get_mut(w)
        {
            pods.remove(k);
            if pods.is_empty() {
                self.by_workload.remove(w);
            }
        }
    }

    fn replace(&mut self, fresh: HashMap<PodKey, Entry>) {
        self.pods.clear();
        self.by_node.clear();
        self.by_workload.clear();
        for (k, e) in fresh {
            self.add(k, e);
        }
    }

    /// What the active pods bound to each node request, less the pods of `workload`
    /// (namespace, kind, name): a re-plan moves those, so their room is the workload's own.
    pub fn allocated_without(&self, workload: Option<(&str, &str, &str)>) -> BTreeMap<String, Res> {
        let mut out: BTreeMap<String, Res> =
            self.by_node.iter().map(|(n, r)| (n.clone(), *r)).collect();
        let own = workload.and_then(|(ns, kind, name)| {
            self.by_workload
                .get(&(ns.to_string(), kind.to_string(), name.to_string()))
        });
        for k in own.into_iter().flatten() {
            if let Some(e) = self.pods.get(k)
                && let Some(node) = &e.counted_on
                && let Some(sum) = out.get_mut(node)
            {
                *sum = sum.less(e.requests);
            }
        }
        out
    }

    /// The pods of Pinterest workloads bound to a node and not finished (nor deleting).
    pub fn workload_pods(&self) -> Vec<WorkloadPod> {
        self.pods
            .values()
            .filter_map(|e| e.victim.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::quantity::Milli;
    use crate::placement::capacity::node_usage;
    use k8s_openapi::api::core::v1::Node;
    use kube::runtime::watcher::Event;

    fn pod(name: &str, node: Option<&str>, phase: &str, cpu: &str, workload: Option<&str>) -> Pod {
        let mut labels = serde_json::json!({});
        if let Some(w) = workload {
            labels = serde_json::json!({LABEL_WORKLOAD: w, LABEL_KIND: "PinterestService"});
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"nodeName": node, "containers": [
                {"name": "app", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}},
                {"name": "side", "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    fn node(name: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap()
    }

    /// What the book says per node, as `node_usage` computes it from the pods themselves.
    fn from_pods(pods: Vec<Pod>) -> BTreeMap<String, Res> {
        let nodes = [node("n1"), node("n2")];
        node_usage(&nodes, &pods)
            .into_iter()
            .filter(|u| u.allocated != Res::default())
            .map(|u| (u.name, u.allocated))
            .collect()
    }

    /// Through creates, updates (bound, finished), deletes and a re-list that missed a
    /// delete, the book's sums are what counting every pod again gives.
    #[test]
    fn the_sums_follow_the_pods_as_counting_them_all_would() {
        let mut book = PodBook::default();
        let mut live: BTreeMap<String, Pod> = BTreeMap::new();
        let step = |book: &mut PodBook, ev: Event<Pod>, live: &mut BTreeMap<String, Pod>| {
            match &ev {
                Event::Apply(p) | Event::InitApply(p) => {
                    live.insert(p.metadata.name.clone().unwrap(), p.clone());
                }
                Event::Delete(p) => {
                    live.remove(p.metadata.name.as_ref().unwrap());
                }
                _ => {}
            }
            book.ingest(&ev);
            if book.listed() && book.relisting.is_none() {
                assert_eq!(
                    book.allocated_without(None),
                    from_pods(live.values().cloned().collect()),
                    "{ev:?}"
                );
            }
        };
        step(&mut book, Event::Init, &mut live);
        step(
            &mut book,
            Event::InitApply(pod("a", Some("n1"), "Running", "1", Some("web"))),
            &mut live,
        );
        assert!(!book.listed());
        step(&mut book, Event::InitDone, &mut live);
        assert!(book.listed());
        step(
            &mut book,
            Event::Apply(pod("b", None, "Pending", "2", Some("web"))),
            &mut live,
        );
        step(
            &mut book,
            Event::Apply(pod("b", Some("n2"), "Running", "2", Some("web"))),
            &mut live,
        );
        step(
            &mut book,
            Event::Apply(pod("c", Some("n1"), "Running", "500m", None)),
            &mut live,
        );
        step(
            &mut book,
            Event::Apply(pod("a", Some("n1"), "Succeeded", "1", Some("web"))),
            &mut live,
        );
        step(
            &mut book,
            Event::Delete(pod("c", Some("n1"), "Running", "500m", None)),
            &mut live,
        );
        // A watch gap: `b` was deleted meanwhile; the re-list no longer has it.
        live.clear();
        step(&mut book, Event::Init, &mut live);
        step(
            &mut book,
            Event::InitApply(pod("d", Some("n1"), "Running", "3", Some("api"))),
            &mut live,
        );
        step(&mut book, Event::InitDone, &mut live);
        assert_eq!(
            book.allocated_without(None).keys().collect::<Vec<_>>(),
            ["n1"]
        );
        assert!(
            book.by_workload.keys().all(|w| w.2 == "api"),
            "{:?}",
            book.by_workload
        );
    }

    /// A re-plan does not count the workload's own pods; preemption sees only bound,
    /// running workload pods.
    #[test]
    fn a_workloads_own_pods_are_left_out_on_request() {
        let mut book = PodBook::default();
        for p in [
            pod("w1", Some("n1"), "Running", "1", Some("web")),
            pod("w2", Some("n2"), "Running", "1", Some("web")),
            pod("o1", Some("n1"), "Running", "2", Some("other")),
            pod("pending", None, "Pending", "4", Some("other")),
        ] {
            book.ingest(&Event::Apply(p));
        }
        let without = book.allocated_without(Some(("ns", "PinterestService", "web")));
        assert_eq!(without["n1"].cpu, Milli(2100));
        assert_eq!(without["n2"].cpu, Milli::ZERO);
        let with = book.allocated_without(None);
        assert_eq!(with["n1"].cpu, Milli(3200));
        let mut victims: Vec<_> = book.workload_pods().into_iter().map(|p| p.node).collect();
        victims.sort();
        assert_eq!(victims, ["n1", "n1", "n2"]);
    }
}

//! Topology files (`clusters/*.yaml`): a hub and member clusters with kwok node pools.
//! Read by the e2e harness to build a local federation and by `pinfed plan --topology`
//! as the capacity model. Pure: parsing and validation only.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::api::quantity::Milli;
use crate::api::validation::{is_dns_label, is_label_value, is_qualified_name};

/// Node label carrying the pool a kwok node belongs to.
pub const POOL_LABEL: &str = "pinterest.com/node-pool";
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Topology {
    pub hub: Hub,
    pub members: Vec<Member>,
    /// Other federation control planes the e2e harness brings up beside the hub, on the
    /// same members, for side-by-side benchmarks (`clusters/compare.yaml`).
    #[serde(default, skip_serializing_if = "Peers::is_empty")]
    pub peers: Peers,
}

/// The name of the Karmada control plane's context in the harness's kubeconfig, so no
/// cluster of a topology with a Karmada peer may take it.
pub const KARMADA_PEER: &str = "karmada";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Peers {
    /// A Karmada control plane (its own API server, aggregated API server, webhook,
    /// scheduler and controller-manager) with every member joined in push mode.
    #[serde(default)]
    pub karmada: bool,
}

impl Peers {
    pub fn is_empty(&self) -> bool {
        !self.karmada
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Hub {
    pub name: String,
    /// Audit pinfed's writes on the hub's API server (`logs/NAME-audit.log`): the
    /// one-writer e2e test reads them. Off in benchmark topologies, where it would cost.
    #[serde(default)]
    pub audit: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Member {
    pub name: String,
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub zone: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Cluster taints: placement skips this member unless the workload tolerates them.
    #[serde(default)]
    pub taints: Vec<Taint>,
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Push (default): the hub connects to the member. Pull: the member's agent connects
    /// to the hub (`pinfed join --mode pull`).
    #[serde(default)]
    pub mode: crate::api::federation::ClusterMode,
    /// A light member: an API server only (no controller-manager, scheduler or kwok), its
    /// nodes registered Ready once. Room for large fleets on one machine where nothing
    /// needs to run pods (distribution and status benchmarks).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub light: bool,
    pub node_pools: Vec<NodePool>,
}

fn default_weight() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodePool {
    pub name: String,
    pub count: u32,
    pub cpu: String,
    pub memory: String,
    #[serde(default = "default_pods")]
    pub pods: u32,
    /// `nvidia.com/gpu` per node.
    #[serde(default)]
    pub gpu: u32,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Node taints.
    #[serde(default)]
    pub taints: Vec<Taint>,
}

fn default_pods() -> u32 {
    110
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Taint {
    pub key: String,
    #[serde(default)]
    pub value: Option<String>,
    pub effect: String,
}

/// One problem in a topology file, with the path of the field it is about (the API's
/// field error: the same path and message, printed the same way).
pub use crate::api::validate::FieldError;

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("{source_name}: {message}")]
    Syntax {
        source_name: String,
        message: String,
    },
    #[error("{source_name}: invalid topology:\n{}", .errors.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n"))]
    Invalid {
        source_name: String,
        errors: Vec<FieldError>,
    },
}

/// A node of a pool, as the harness creates it and placement sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpec {
    pub name: String,
    pub pool: String,
    pub cpu: Milli,
    pub memory: Milli,
    pub pods: u32,
    pub gpu: u32,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
}

impl Topology {
    /// Parses and validates; `source_name` (usually the path) prefixes every error.
    pub fn from_yaml(source_name: &str, text: &str) -> Result<Topology, TopologyError> {
        let topology: Topology =
            crate::api::yaml::from_str(text).map_err(|e| TopologyError::Syntax {
                source_name: source_name.to_string(),
                message: e.to_string(),
            })?;
        let errors = topology.validate();
        if errors.is_empty() {
            Ok(topology)
        } else {
            Err(TopologyError::Invalid {
                source_name: source_name.to_string(),
                errors,
            })
        }
    }

    pub fn member(&self, name: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.name == name)
    }

    /// All cluster names, hub first.
    pub fn cluster_names(&self) -> Vec<&str> {
        std::iter::once(self.hub.name.as_str())
            .chain(self.members.iter().map(|m| m.name.as_str()))
            .collect()
    }

    /// Every problem in the file, each with its field path.
    pub fn validate(&self) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let mut push = |field: String, message: String| errors.push(FieldError { field, message });
        if !is_dns_label(&self.hub.name) {
            push(
                "hub.name".into(),
                format!(
                    "{:?} is not a DNS label (lower-case a-z, 0-9, '-', at most 63)",
                    self.hub.name
                ),
            );
        }
        if self.members.is_empty() {
            push(
                "members".into(),
                "at least one member cluster is needed".into(),
            );
        }
        let mut seen = BTreeSet::from([self.hub.name.clone()]);
        if self.peers.karmada && self.cluster_names().contains(&KARMADA_PEER) {
            push(
                "peers.karmada".into(),
                format!("{KARMADA_PEER:?} names the Karmada peer; no cluster may be called so"),
            );
        }
        for (i, m) in self.members.iter().enumerate() {
            let at = format!("members[{i}]");
            if !is_dns_label(&m.name) {
                push(
                    format!("{at}.name"),
                    format!(
                        "{:?} is not a DNS label (lower-case a-z, 0-9, '-', at most 63)",
                        m.name
                    ),
                );
            } else if !seen.insert(m.name.clone()) {
                push(
                    format!("{at}.name"),
                    format!(
                        "{:?} is used twice (cluster names are unique, the hub included)",
                        m.name
                    ),
                );
            }
            for (field, v) in [("region", &m.region), ("zone", &m.zone)] {
                if let Some(v) = v
                    && (v.is_empty() || !is_label_value(v))
                {
                    push(
                        format!("{at}.{field}"),
                        format!("{v:?} is not a valid label value"),
                    );
                }
            }
            validate_labels(&format!("{at}.labels"), &m.labels, &mut push);
            validate_taints(&format!("{at}.taints"), &m.taints, &mut push);
            if m.weight == 0 {
                push(format!("{at}.weight"), "must be at least 1".into());
            }
            if m.node_pools.is_empty() {
                push(
                    format!("{at}.nodePools"),
                    "at least one node pool is needed".into(),
                );
            }
            let mut pools = BTreeSet::new();
            for (j, p) in m.node_pools.iter().enumerate() {
                let at = format!("{at}.nodePools[{j}]");
                if !is_dns_label(&p.name) {
                    push(
                        format!("{at}.name"),
                        format!("{:?} is not a DNS label", p.name),
                    );
                } else if !pools.insert(p.name.clone()) {
                    push(
                        format!("{at}.name"),
                        format!("pool {:?} is defined twice in member {:?}", p.name, m.name),
                    );
                } else if !is_dns_label(&format!(
                    "{}-{}-{}",
                    m.name,
                    p.name,
                    p.count.saturating_sub(1)
                )) {
                    push(
                        format!("{at}.name"),
                        "node names <member>-<pool>-<i> would exceed 63 characters".into(),
                    );
                }
                if p.count == 0 {
                    push(format!("{at}.count"), "must be at least 1".into());
                }
                for (field, v) in [("cpu", &p.cpu), ("memory", &p.memory)] {
                    match Milli::parse(v) {
                        Ok(q) if q > Milli::ZERO => {}
                        Ok(_) => push(format!("{at}.{field}"), "must be positive".into()),
                        Err(e) => push(format!("{at}.{field}"), e.to_string()),
                    }
                }
                if p.pods == 0 {
                    push(format!("{at}.pods"), "must be at least 1".into());
                }
                validate_labels(&format!("{at}.labels"), &p.labels, &mut push);
                validate_taints(&format!("{at}.taints"), &p.taints, &mut push);
            }
        }
        errors
    }

    /// The kwok nodes of a member, named `<member>-<pool>-<i>`.
    pub fn nodes(member: &Member) -> Vec<NodeSpec> {
        let mut out = Vec::new();
        for p in &member.node_pools {
            for i in 0..p.count {
                let name = format!("{}-{}-{}", member.name, p.name, i);
                let mut labels = BTreeMap::from([
                    ("kubernetes.io/hostname".to_string(), name.clone()),
                    ("kubernetes.io/os".to_string(), "linux".to_string()),
                    ("kubernetes.io/arch".to_string(), "amd64".to_string()),
                    ("type".to_string(), "kwok".to_string()),
                    (POOL_LABEL.to_string(), p.name.clone()),
                ]);
                if let Some(z) = &member.zone {
                    labels.insert(ZONE_LABEL.into(), z.clone());
                }
                if let Some(r) = &member.region {
                    labels.insert(REGION_LABEL.into(), r.clone());
                }
                labels.extend(p.labels.clone());
                out.push(NodeSpec {
                    name,
                    pool: p.name.clone(),
                    // Validated on load; a zero here would only mean an unvalidated topology.
                    cpu: Milli::parse(&p.cpu).unwrap_or_default(),
                    memory: Milli::parse(&p.memory).unwrap_or_default(),
                    pods: p.pods,
                    gpu: p.gpu,
                    labels,
                    taints: p.taints.clone(),
                });
            }
        }
        out
    }
}

fn validate_labels(
    at: &str,
    labels: &BTreeMap<String, String>,
    push: &mut impl FnMut(String, String),
) {
    for (k, v) in labels {
        if !is_qualified_name(k) {
            push(
                format!("{at}.{k}"),
                format!("{k:?} is not a valid label key"),
            );
        }
        if !is_label_value(v) {
            push(
                format!("{at}.{k}"),
                format!("{v:?} is not a valid label value"),
            );
        }
    }
}

fn validate_taints(at: &str, taints: &[Taint], push: &mut impl FnMut(String, String)) {
    for (i, t) in taints.iter().enumerate() {
        if !is_qualified_name(&t.key) {
            push(
                format!("{at}[{i}].key"),
                format!("{:?} is not a valid taint key", t.key),
            );
        }
        if let Some(v) = &t.value
            && !is_label_value(v)
        {
            push(
                format!("{at}[{i}].value"),
                format!("{v:?} is not a valid taint value"),
            );
        }
        if !matches!(
            t.effect.as_str(),
            "NoSchedule" | "PreferNoSchedule" | "NoExecute"
        ) {
            push(
                format!("{at}[{i}].effect"),
                format!(
                    "{:?} is not one of NoSchedule, PreferNoSchedule, NoExecute",
                    t.effect
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
hub: {name: hub}
members:
  - name: use1a
    region: us-east-1
    zone: us-east-1a
    labels: {tier: prod}
    weight: 2
    nodePools:
      - {name: general, count: 2, cpu: "8", memory: 32Gi, pods: 110}
      - name: gpu
        count: 1
        cpu: "32"
        memory: 256Gi
        gpu: 8
        labels: {pinterest.com/pool: gpu}
        taints: [{key: dedicated, value: gpu, effect: NoSchedule}]
"#;

    #[test]
    fn loads_a_good_file_and_names_nodes() {
        let t = Topology::from_yaml("good.yaml", GOOD).unwrap();
        assert_eq!(t.cluster_names(), ["hub", "use1a"]);
        let nodes = Topology::nodes(&t.members[0]);
        let names: Vec<_> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["use1a-general-0", "use1a-general-1", "use1a-gpu-0"]);
        assert_eq!(nodes[2].gpu, 8);
        assert_eq!(nodes[2].labels[ZONE_LABEL], "us-east-1a");
        assert_eq!(nodes[2].labels["pinterest.com/pool"], "gpu");
        assert_eq!(nodes[0].cpu, Milli(8000));
        assert_eq!(nodes[2].taints[0].effect, "NoSchedule");
    }

    #[test]
    fn unknown_keys_are_named_with_their_path() {
        let bad = GOOD.replace("pods: 110}", "podz: 110}");
        let e = Topology::from_yaml("t.yaml", &bad).unwrap_err().to_string();
        assert!(
            e.contains("members[0].nodePools[0]") && e.contains("podz"),
            "{e}"
        );
    }

    #[test]
    fn semantic_errors_name_every_field() {
        let bad = GOOD
            .replace("cpu: \"8\"", "cpu: 8x")
            .replace("name: use1a", "name: Use1a")
            .replace("effect: NoSchedule", "effect: Never");
        let e = Topology::from_yaml("t.yaml", &bad).unwrap_err().to_string();
        assert!(e.contains("members[0].nodePools[0].cpu: \"8x\""), "{e}");
        assert!(e.contains("members[0].name"), "{e}");
        assert!(
            e.contains("members[0].nodePools[1].taints[0].effect"),
            "{e}"
        );
    }

    #[test]
    fn duplicate_names_and_empty_members_are_rejected() {
        let e = Topology::from_yaml("t.yaml", "hub: {name: a}\nmembers: []\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("members: at least one"), "{e}");
        let dup = GOOD.replace("name: use1a", "name: hub");
        let e = Topology::from_yaml("t.yaml", &dup).unwrap_err().to_string();
        assert!(e.contains("used twice"), "{e}");
    }

    #[test]
    fn a_karmada_peer_is_opt_in_and_reserves_its_name() {
        assert!(!Topology::from_yaml("t.yaml", GOOD).unwrap().peers.karmada);
        let with = format!("{GOOD}peers: {{karmada: true}}\n");
        assert!(Topology::from_yaml("t.yaml", &with).unwrap().peers.karmada);
        let taken = with.replace("name: use1a", "name: karmada");
        let e = Topology::from_yaml("t.yaml", &taken)
            .unwrap_err()
            .to_string();
        assert!(e.contains("peers.karmada"), "{e}");
        // Without the peer the name is free.
        Topology::from_yaml("t.yaml", &GOOD.replace("name: use1a", "name: karmada")).unwrap();
    }

    #[test]
    fn broken_yaml_reports_a_line() {
        let e = Topology::from_yaml("t.yaml", "hub: {name: hub\nmembers: [")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line"), "{e}");
    }

    #[test]
    fn the_shipped_topologies_are_valid() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/clusters");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                let text = std::fs::read_to_string(&path).unwrap();
                Topology::from_yaml(&path.display().to_string(), &text).unwrap();
                seen += 1;
            }
        }
        assert!(seen >= 3, "expected local-1, local-3 and bench in {dir}");
    }
}

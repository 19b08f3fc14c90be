//! From a MemberCluster to the engine's [`ClusterView`]. Pure: the caller says whether
//! the member stands Ready and what room its nodes have.

use super::model::{ClusterView, NodeRoom, Resources, Taint, TaintEffect};
use crate::api::federation::MemberCluster;
use crate::api::quantity::Milli;

/// The member as placement sees it: its spec (zone, region, labels, taints, weight), its
/// standing and its nodes' room.
pub fn cluster_view(mc: &MemberCluster, ready: bool, nodes: Vec<NodeRoom>) -> ClusterView {
    ClusterView {
        name: mc.metadata.name.clone().unwrap_or_default(),
        zone: mc.spec.zone.clone(),
        region: mc.spec.region.clone(),
        labels: mc.spec.labels.clone(),
        taints: taints(mc),
        weight: u32::try_from(mc.spec.weight_or_default()).unwrap_or(0),
        ready,
        nodes,
    }
}

/// The member's cluster taints as placement matches them.
pub fn taints(mc: &MemberCluster) -> Vec<Taint> {
    mc.spec
        .taints
        .iter()
        .map(|t| Taint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: TaintEffect::parse(&format!("{:?}", t.effect)),
        })
        .collect()
}

/// One node with room for anything: for asking what quota alone allows (capacity aside).
pub fn unbounded_node() -> NodeRoom {
    NodeRoom {
        name: "any".into(),
        labels: Default::default(),
        taints: Vec::new(),
        free: Resources {
            cpu: Milli(i128::from(i64::MAX)),
            memory: Milli(i128::from(i64::MAX)),
            gpu: i64::MAX,
            pods: i64::MAX,
        },
    }
}

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

/// Nodes counted per member at most (a member's status is read, not trusted, for a
/// count to allocate).
pub const MAX_NODES_COUNTED: usize = 100_000;

/// The member's nodes, as many as its status counts (`status.nodes`; one while it counts
/// none yet), each with room for anything and no labels or taints: for asking what quota
/// alone allows, and how many pods a daemon runs there, from what the member's status
/// says (capacity aside).
pub fn unbounded_nodes(mc: &MemberCluster) -> Vec<NodeRoom> {
    let counted = mc.status.as_ref().and_then(|s| s.nodes).unwrap_or(1);
    let count = usize::try_from(counted).unwrap_or(0).min(MAX_NODES_COUNTED);
    (0..count)
        .map(|i| NodeRoom {
            name: format!("node-{i}"),
            ..unbounded_node()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn member(nodes: Option<i32>) -> MemberCluster {
        let mut mc: MemberCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": "a"},
            "spec": {}
        }))
        .unwrap();
        mc.status = Some(crate::api::federation::MemberClusterStatus {
            nodes,
            ..Default::default()
        });
        mc
    }

    #[test]
    fn a_member_has_as_many_unbounded_nodes_as_its_status_counts() {
        let nodes = unbounded_nodes(&member(Some(3)));
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[2].name, "node-2");
        assert_eq!(nodes[0].free, unbounded_node().free);
        assert_eq!(unbounded_nodes(&member(None)).len(), 1, "not counted yet");
        assert_eq!(unbounded_nodes(&member(Some(0))).len(), 0);
        assert_eq!(unbounded_nodes(&member(Some(-4))).len(), 0);
        assert_eq!(
            unbounded_nodes(&member(Some(i32::MAX))).len(),
            MAX_NODES_COUNTED
        );
    }
}

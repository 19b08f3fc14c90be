//! kwok, the nodes of every member: one process per member runs the kubelets of all its
//! fake nodes (the stock "fast" stages), and the Node objects it manages.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use pinfed::topology::GPU_RESOURCE;

use crate::state::Component;
use crate::wait_until;

/// The kwok of member `name`, its server on 127.0.0.1:`kwok`.
pub fn component(
    bin: &Path,
    logs: &Path,
    name: &str,
    kc: &str,
    kwok_config: &Path,
    kwok: u16,
) -> Component {
    Component {
        name: "kwok".into(),
        argv: vec![
            bin.join("kwok").display().to_string(),
            format!("--kubeconfig={kc}"),
            format!("--config={}", kwok_config.display()),
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".into(),
            format!("--server-address=127.0.0.1:{kwok}"),
            "--cidr=10.0.0.0/16".into(),
            "--node-ip=10.1.0.1".into(),
            "--node-lease-duration-seconds=40".into(),
        ],
        port: kwok,
        pid: None,
        log: logs.join(format!("{name}-kwok.log")),
    }
}

pub fn write_config(dir: &Path, bin: &Path) -> anyhow::Result<PathBuf> {
    // The stock "fast" stages: nodes become Ready and keep a Lease; pods run at once,
    // pods owned by Jobs succeed, deleted pods go away.
    let stages = [
        "node/fast/node-initialize.yaml",
        "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
        "pod/fast/pod-ready.yaml",
        "pod/general/pod-complete.yaml",
        "pod/fast/pod-delete.yaml",
        // PVCs of the `kwok-volume` class (the default) get a PV and bind at once.
        "volume/fast/pvc-provision.yaml",
        "volume/fast/pv-bind.yaml",
        "volume/fast/pv-delete.yaml",
        "volume/fast/pvc-delete.yaml",
    ];
    let mut docs = Vec::new();
    for s in stages {
        let path = bin.join("kwok-stages").join(s);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading kwok stage {}", path.display()))?;
        docs.push(if s == "pod/general/pod-complete.yaml" {
            // Job pods succeed at once unless the pod asks for a run time with the
            // `pod-complete.stage.kwok.x-k8s.io/delay` annotation (e.g. "20s"): failover
            // tests need shards that are still running when a member goes away.
            immediate_unless_delayed(&text)?
        } else {
            text
        });
    }
    let path = dir.join("kwok.yaml");
    std::fs::write(&path, docs.join("\n---\n"))?;
    Ok(path)
}

/// The general pod-complete stage with no default delay and no default jitter.
///
/// The jitter default is dropped, not zeroed: kwok takes a jitter at or below the delay
/// as the whole delay, so a zero jitter would make every pod complete at once whatever
/// its delay annotation asks. Without a default, a pod without the jitter annotation
/// waits exactly its delay.
fn immediate_unless_delayed(stage: &str) -> anyhow::Result<String> {
    let mut out = String::with_capacity(stage.len());
    let (mut delay, mut jitter) = (0, 0);
    for line in stage.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        if trimmed.starts_with("durationMilliseconds:") {
            out.push_str(&format!("{indent}durationMilliseconds: 0\n"));
            delay += 1;
        } else if trimmed.starts_with("jitterDurationMilliseconds:") {
            jitter += 1;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    anyhow::ensure!(
        (delay, jitter) == (1, 1),
        "kwok's general pod-complete stage changed shape (expected a delay and a jitter)"
    );
    Ok(out)
}

/// The default StorageClass whose claims kwok's volume stages provision and bind.
pub async fn create_storage_class(client: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::api::storage::v1::StorageClass;
    let sc: StorageClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kwok-volume", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "kwok.x-k8s.io/volume",
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }))?;
    match Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &sc)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub fn node_object(n: &pinfed::topology::NodeSpec) -> serde_json::Value {
    let mut capacity = serde_json::json!({
        "cpu": n.cpu.to_string(),
        "memory": binary_quantity(n.memory.units()),
        "pods": n.pods.to_string(),
        "ephemeral-storage": "1Ti",
    });
    if n.gpu > 0 {
        capacity[GPU_RESOURCE] = serde_json::json!(n.gpu.to_string());
    }
    let taints: Vec<_> = n
        .taints
        .iter()
        .map(|t| serde_json::json!({"key": t.key, "value": t.value.clone().unwrap_or_default(), "effect": t.effect}))
        .collect();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": n.name,
            "labels": n.labels,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": taints},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "nodeInfo": {"kubeletVersion": "kwok", "architecture": "amd64", "operatingSystem": "linux"},
            "phase": "Running",
        },
    })
}

/// Bytes as the largest exact binary unit ("32Gi"), as people write node memory.
fn binary_quantity(bytes: i128) -> String {
    for (shift, unit) in [(40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
        if bytes > 0 && bytes % (1 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

pub async fn wait_nodes_ready(
    client: &kube::Client,
    expected: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    wait_until(timeout, &format!("{expected} Ready nodes"), || {
        let api = api.clone();
        async move {
            let Ok(list) = api.list(&Default::default()).await else {
                return false;
            };
            let ready = list
                .items
                .iter()
                .filter(|n| {
                    n.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                })
                .count();
            ready >= expected
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::immediate_unless_delayed;

    const STAGE: &str = "spec:\n  delay:\n    durationMilliseconds: 1000\n    durationFrom:\n      expressionFrom: '.metadata.annotations[\"d\"]'\n    jitterDurationMilliseconds: 5000\n    jitterDurationFrom:\n      expressionFrom: '.metadata.annotations[\"j\"]'\n";

    #[test]
    fn the_delay_defaults_to_zero_and_the_jitter_has_no_default() {
        let out = immediate_unless_delayed(STAGE).unwrap();
        assert!(out.contains("    durationMilliseconds: 0\n"), "{out}");
        assert!(!out.contains("jitterDurationMilliseconds"), "{out}");
        // What a pod asks for still reaches kwok.
        assert!(
            out.contains("annotations[\"d\"]") && out.contains("annotations[\"j\"]"),
            "{out}"
        );
    }

    #[test]
    fn a_stage_of_another_shape_is_refused() {
        let without_jitter = STAGE.replace("    jitterDurationMilliseconds: 5000\n", "");
        let err = immediate_unless_delayed(&without_jitter).unwrap_err();
        assert!(err.to_string().contains("changed shape"), "{err}");
    }
}

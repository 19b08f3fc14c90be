//! Slices: the per-cluster copy of a hub resource. Pure builders: what a member gets for
//! its share, which ConfigMaps and Secrets the pod template references, and the
//! member-side status a slice reports, in the hub's terms.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::common::{ConditionStatus, MemberWorkloadStatus, condition_types as ct};
use crate::api::ranges::RangeSet;
use crate::api::workload::WorkloadKind;
use crate::placement::Placement;
use crate::status::member_state;

/// Labels and annotations that tie a slice to its hub resource (owner references cannot
/// cross clusters).
pub const LABEL_HUB_NAME: &str = "federation.pinterest.com/hub-name";
pub const LABEL_HUB_NAMESPACE: &str = "federation.pinterest.com/hub-namespace";
pub const LABEL_HUB_UID: &str = "federation.pinterest.com/hub-uid";
pub const LABEL_SLICE_OF: &str = "federation.pinterest.com/slice-of";
pub const ANNOTATION_HUB_GENERATION: &str = "federation.pinterest.com/hub-generation";
/// Finalizer on hub resources: their slices are removed before the resource goes.
pub const FINALIZER: &str = "federation.pinterest.com/slices";

/// Each slice's share of a job set's global parallelism: proportional to its shard count,
/// at least 1 for a slice with shards, never more than its shards. Deterministic.
pub fn divide_parallelism(
    parallelism: Option<i32>,
    shard_counts: &[(String, u64)],
) -> Vec<(String, Option<i32>)> {
    let Some(p) = parallelism else {
        return shard_counts
            .iter()
            .map(|(c, _)| (c.clone(), None))
            .collect();
    };
    let total: u64 = shard_counts.iter().map(|(_, n)| *n).sum();
    shard_counts
        .iter()
        .map(|(c, n)| {
            if *n == 0 || total == 0 {
                return (c.clone(), Some(0));
            }
            let share = (u64::try_from(p.max(0)).unwrap_or(0) * n) / total;
            (
                c.clone(),
                Some(i32::try_from(share.clamp(1, *n)).unwrap_or(i32::MAX)),
            )
        })
        .collect()
}

/// The slice of `hub` (the hub resource as JSON) for one placement.
pub fn build_slice(
    kind: WorkloadKind,
    hub: &serde_json::Value,
    placement: &Placement,
    parallelism: Option<Option<i32>>,
) -> serde_json::Value {
    let meta = &hub["metadata"];
    let name = meta["name"].as_str().unwrap_or_default();
    let mut labels = meta["labels"].as_object().cloned().unwrap_or_default();
    labels.insert(LABEL_HUB_NAME.into(), name.into());
    labels.insert(LABEL_HUB_NAMESPACE.into(), meta["namespace"].clone());
    labels.insert(LABEL_HUB_UID.into(), meta["uid"].clone());
    labels.insert(LABEL_SLICE_OF.into(), kind.as_str().into());
    let mut annotations = meta["annotations"].as_object().cloned().unwrap_or_default();
    annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    annotations.insert(
        ANNOTATION_HUB_GENERATION.into(),
        meta["generation"].as_i64().unwrap_or(0).to_string().into(),
    );
    let mut spec = hub["spec"].clone();
    match kind {
        WorkloadKind::Service | WorkloadKind::StatefulSet => {
            spec["replicas"] = placement.replicas.unwrap_or(0).into();
        }
        WorkloadKind::JobSet => {
            spec["assignedShards"] = placement.shards.clone().unwrap_or_default().into();
            if let Some(p) = parallelism {
                spec["parallelism"] = p
                    .map(serde_json::Value::from)
                    .unwrap_or(serde_json::Value::Null);
            }
        }
        _ => {}
    }
    serde_json::json!({
        "apiVersion": hub["apiVersion"],
        "kind": hub["kind"],
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    })
}

/// ConfigMaps and Secrets a pod spec references in its own namespace.
pub fn referenced_config(spec: &PodSpec) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut cms = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    for v in spec.volumes.iter().flatten() {
        if let Some(c) = &v.config_map {
            cms.insert(c.name.clone());
        }
        if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            secrets.insert(s);
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(c) = &src.config_map {
                cms.insert(c.name.clone());
            }
            if let Some(s) = &src.secret {
                secrets.insert(s.name.clone());
            }
        }
    }
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        for e in c.env_from.iter().flatten() {
            if let Some(r) = &e.config_map_ref {
                cms.insert(r.name.clone());
            }
            if let Some(r) = &e.secret_ref {
                secrets.insert(r.name.clone());
            }
        }
        for e in c.env.iter().flatten() {
            if let Some(r) = e
                .value_from
                .as_ref()
                .and_then(|v| v.config_map_key_ref.as_ref())
            {
                cms.insert(r.name.clone());
            }
            if let Some(r) = e
                .value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
            {
                secrets.insert(r.name.clone());
            }
        }
    }
    for s in spec.image_pull_secrets.iter().flatten() {
        secrets.insert(s.name.clone());
    }
    (cms, secrets)
}

/// A slice's member status (the slice object as JSON) in the hub's terms.
pub fn member_workload_status(
    cluster: &str,
    kind: WorkloadKind,
    slice: &serde_json::Value,
    observed: &Time,
) -> MemberWorkloadStatus {
    let s = &slice["status"];
    let int = |k: &str| s[k].as_i64().and_then(|v| i32::try_from(v).ok());
    let cond = |t: &str| {
        s["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == t))
            .and_then(|c| c["status"].as_str())
            .map(|v| v == "True")
    };
    let generation = slice["metadata"]["generation"].as_i64();
    let processed = s["observedGeneration"].as_i64();
    let state = if cond(ct::INVALID) == Some(true) || cond(ct::FAILED) == Some(true) {
        member_state::FAILED
    } else if cond(ct::COMPLETE) == Some(true) {
        member_state::COMPLETE
    } else if cond(ct::DEGRADED) == Some(true) {
        member_state::DEGRADED
    } else if cond(ct::READY) == Some(true) && processed == generation {
        member_state::READY
    } else {
        member_state::PROGRESSING
    };
    let message = s["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == ct::READY))
        .and_then(|c| c["message"].as_str())
        .filter(|m| !m.is_empty())
        .map(String::from);
    let mut out = MemberWorkloadStatus {
        cluster: cluster.to_string(),
        observed_time: observed.clone(),
        observed_generation: processed,
        state: Some(state.to_string()),
        replicas: None,
        ready_replicas: None,
        available_replicas: None,
        shards_running: None,
        shards_succeeded: None,
        shards_failed: None,
        completed_shards: None,
        message,
    };
    match kind {
        WorkloadKind::Service | WorkloadKind::StatefulSet => {
            out.replicas = int("replicas");
            out.ready_replicas = int("readyReplicas");
            out.available_replicas = int("availableReplicas");
        }
        WorkloadKind::Daemon => {
            out.replicas = int("desired");
            out.ready_replicas = int("ready");
            out.available_replicas = int("available");
        }
        WorkloadKind::JobSet => {
            out.shards_running = int("shardsRunning");
            out.shards_succeeded = int("shardsSucceeded");
            out.shards_failed = int("shardsFailed");
            out.completed_shards = s["completedShards"].as_str().map(|r| {
                RangeSet::parse(r)
                    .map(|r| r.to_string())
                    .unwrap_or_default()
            });
        }
        WorkloadKind::CronJob | WorkloadKind::TrainingJob => {}
    }
    out
}

/// Whether a slice reports the given condition True.
pub fn condition_true(slice: &serde_json::Value, type_: &str) -> bool {
    slice["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

pub fn ready_status(status: ConditionStatus) -> &'static str {
    match status {
        ConditionStatus::True => "True",
        ConditionStatus::False => "False",
        ConditionStatus::Unknown => "Unknown",
    }
}

/// Whether `found` (a slice as read from a member) already is `slice` as the hub would
/// write it: the same spec, and every label and annotation of `slice` with the same value.
/// Fields others own (status, the agent's annotations) do not matter.
pub fn slice_is_current(found: &serde_json::Value, slice: &serde_json::Value) -> bool {
    let subset = |field: &str| {
        slice["metadata"][field].as_object().is_none_or(|want| {
            want.iter()
                .all(|(k, v)| found["metadata"][field].get(k) == Some(v))
        })
    };
    found.get("spec") == slice.get("spec") && subset("labels") && subset("annotations")
}

/// Readies a hub status for writing: each `clusters[]` entry that is unchanged since the
/// `old` status keeps its `observedTime`. Then says whether `new` matches `old` in every
/// field it sets, so the write can be skipped: rewriting an unchanged status costs an
/// API write and wakes every watcher of the hub resource (the hub itself included) for
/// nothing — with 10,000 workloads, refreshing the times alone kept the hub's API server
/// busy. `observedTime` thus means "seen as it is since"; a reachable member's entry is
/// read afresh on every reconcile, and a NotReady member's is marked as such whatever its age.
pub fn settle_status(old: &serde_json::Value, new: &mut serde_json::Value) -> bool {
    let without_time = |v: &serde_json::Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("observedTime");
        }
        v
    };
    if let Some(entries) = new.get_mut("clusters").and_then(|c| c.as_array_mut()) {
        for entry in entries {
            let Some(prev) = old["clusters"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["cluster"] == entry["cluster"]))
            else {
                continue;
            };
            if prev.get("observedTime").is_some() && without_time(prev) == without_time(entry) {
                entry["observedTime"] = prev["observedTime"].clone();
            }
        }
    }
    new.as_object()
        .is_some_and(|o| o.iter().all(|(k, v)| old.get(k) == Some(v)))
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_unchanged_status_is_not_rewritten() {
        let old = serde_json::json!({
            "availableReplicas": 3,
            "clusters": [{"cluster": "a", "observedTime": "2026-01-01T00:00:00Z", "availableReplicas": 3}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "setByOthers": 1,
        });
        let fresh = |avail: i64| {
            serde_json::json!({
                "availableReplicas": avail,
                "clusters": [{"cluster": "a", "observedTime": "2026-01-01T00:10:00Z", "availableReplicas": avail}],
                "conditions": [{"type": "Ready", "status": "True"}],
            })
        };
        // Same content later: keeps the old time and is skipped.
        let mut new = fresh(3);
        assert!(settle_status(&old, &mut new));
        assert_eq!(new["clusters"][0]["observedTime"], "2026-01-01T00:00:00Z");
        // Changed content is written with the new time.
        let mut new = fresh(2);
        assert!(!settle_status(&old, &mut new));
        assert_eq!(new["clusters"][0]["observedTime"], "2026-01-01T00:10:00Z");
        // A new field is a change; a cluster entry missing before is a change.
        let mut new = fresh(3);
        new["observedGeneration"] = 2.into();
        assert!(!settle_status(&old, &mut new));
        let mut new = fresh(3);
        new["clusters"][0]["cluster"] = "b".into();
        assert!(!settle_status(&old, &mut new));
        assert_eq!(new["clusters"][0]["observedTime"], "2026-01-01T00:10:00Z");
    }

    #[test]
    fn a_slice_is_current_only_with_the_same_spec_labels_and_annotations() {
        let slice = serde_json::json!({
            "metadata": {"name": "web", "labels": {"a": "1"}, "annotations": {"g": "2"}},
            "spec": {"replicas": 3}
        });
        let mut found = serde_json::json!({
            "metadata": {"name": "web", "labels": {"a": "1", "other": "x"},
                "annotations": {"g": "2", "agent": "y"}, "resourceVersion": "7"},
            "spec": {"replicas": 3},
            "status": {"readyReplicas": 1}
        });
        assert!(slice_is_current(&found, &slice));
        found["spec"]["replicas"] = 2.into();
        assert!(!slice_is_current(&found, &slice), "spec differs");
        found["spec"]["replicas"] = 3.into();
        found["metadata"]["annotations"]["g"] = "1".into();
        assert!(
            !slice_is_current(&found, &slice),
            "an annotation of ours differs"
        );
        found["metadata"]["annotations"]["g"] = "2".into();
        found["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("a");
        assert!(
            !slice_is_current(&found, &slice),
            "a label of ours is missing"
        );
    }
    use super::*;

    #[test]
    fn parallelism_is_split_in_proportion_with_at_least_one() {
        let shards = [
            ("a".to_string(), 60),
            ("b".to_string(), 30),
            ("c".to_string(), 1),
        ];
        let p = divide_parallelism(Some(10), &shards);
        assert_eq!(
            p,
            vec![
                ("a".into(), Some(6)),
                ("b".into(), Some(3)),
                ("c".into(), Some(1))
            ]
        );
        assert_eq!(divide_parallelism(None, &shards)[0].1, None);
        assert_eq!(
            divide_parallelism(Some(100), &[("a".into(), 2)])[0].1,
            Some(2),
            "never more than its shards"
        );
    }

    #[test]
    fn a_slice_carries_its_share_and_its_hub_identity() {
        let hub = serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestJobSet",
            "metadata": {"name": "emb", "namespace": "ml", "uid": "u-1", "generation": 3, "labels": {"app": "emb"},
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}, "resourceVersion": "9"},
            "spec": {"shards": 10, "parallelism": 4, "template": {}},
            "status": {"completedShards": "0-1"}
        });
        let p = Placement {
            cluster: "use1a".into(),
            replicas: None,
            shards: Some("2-5".into()),
        };
        let s = build_slice(WorkloadKind::JobSet, &hub, &p, Some(Some(2)));
        assert_eq!(s["spec"]["assignedShards"], "2-5");
        assert_eq!(s["spec"]["parallelism"], 2);
        assert_eq!(s["spec"]["shards"], 10, "SHARD_COUNT stays global");
        assert_eq!(s["metadata"]["labels"][LABEL_HUB_UID], "u-1");
        assert_eq!(s["metadata"]["labels"]["app"], "emb");
        assert_eq!(s["metadata"]["annotations"][ANNOTATION_HUB_GENERATION], "3");
        assert!(
            s["metadata"]["annotations"]
                .get("kubectl.kubernetes.io/last-applied-configuration")
                .is_none()
        );
        assert!(s.get("status").is_none() && s["metadata"].get("resourceVersion").is_none());
    }

    #[test]
    fn referenced_config_finds_every_kind_of_reference() {
        let spec: PodSpec = serde_json::from_value(serde_json::json!({
            "containers": [{"name": "a", "image": "a",
                "envFrom": [{"configMapRef": {"name": "cm-envfrom"}}, {"secretRef": {"name": "s-envfrom"}}],
                "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s-env", "key": "k"}}}]}],
            "volumes": [{"name": "v", "configMap": {"name": "cm-vol"}}, {"name": "w", "secret": {"secretName": "s-vol"}}],
            "imagePullSecrets": [{"name": "pull"}]
        }))
        .unwrap();
        let (cms, secrets) = referenced_config(&spec);
        assert_eq!(
            cms.into_iter().collect::<Vec<_>>(),
            ["cm-envfrom", "cm-vol"]
        );
        assert_eq!(
            secrets.into_iter().collect::<Vec<_>>(),
            ["pull", "s-env", "s-envfrom", "s-vol"]
        );
    }

    #[test]
    fn member_status_summarizes_a_slice() {
        let t = Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap());
        let slice = serde_json::json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 2, "availableReplicas": 3,
            "readyReplicas": 3, "replicas": 3, "conditions": [{"type": "Ready", "status": "True", "message": "3/3 available"}]}});
        let m = member_workload_status("a", WorkloadKind::Service, &slice, &t);
        assert_eq!(
            (m.state.as_deref(), m.available_replicas),
            (Some("Ready"), Some(3))
        );
        let behind =
            serde_json::json!({"metadata": {"generation": 3}, "status": slice["status"].clone()});
        assert_eq!(
            member_workload_status("a", WorkloadKind::Service, &behind, &t)
                .state
                .as_deref(),
            Some("Progressing")
        );
    }
}

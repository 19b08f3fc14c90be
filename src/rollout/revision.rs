//! What a revision is: the part of a workload's spec that decides what its pods run —
//! everything but where it runs and how many (`placement`, `replicas`, the job set's
//! shard bookkeeping) and how changes roll out (`rollout`) — with the RuntimeProfile it
//! resolves to written in as `runtimeVersion`. Two specs with the same content are the
//! same revision: scaling or re-placing a workload starts no rollout. Per-member
//! `overrides` are part of it: an override edit rolls out stage by stage like an image.

use serde_json::{Map, Value};

/// Spec fields that are not part of a revision.
const NOT_RUN: &[&str] = &[
    "placement",
    "replicas",
    "rollout",
    "shards",
    "parallelism",
    "assignedShards",
];

/// The revision content of `spec` (a workload's spec as JSON) when it resolves to the
/// RuntimeProfile version `runtime`.
pub fn content(spec: &Value, runtime: &str) -> Value {
    let mut out = Map::new();
    if let Some(o) = spec.as_object() {
        for (k, v) in o {
            if !NOT_RUN.contains(&k.as_str()) {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out.insert("runtimeVersion".into(), Value::String(runtime.to_string()));
    Value::Object(out)
}

/// A digest of a revision's content (16 hex characters).
pub fn hash(content: &Value) -> String {
    crate::expand::hash::spec_hash(content, &mut Vec::new())
}

/// `spec` running `content` instead of its own: every field a revision holds is taken
/// from `content` (one `content` lacks is removed); where and how many stay `spec`'s.
pub fn overlay(spec: &mut Value, content: &Value) {
    let (Some(spec), Some(content)) = (spec.as_object_mut(), content.as_object()) else {
        return;
    };
    spec.retain(|k, _| NOT_RUN.contains(&k.as_str()) || content.contains_key(k));
    for (k, v) in content {
        if !NOT_RUN.contains(&k.as_str()) {
            spec.insert(k.clone(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scaling_or_moving_is_no_new_revision_and_an_image_or_profile_is() {
        let spec = json!({"owner": {"team": "t"}, "replicas": 3, "placement": {"clusters": ["a"]},
            "template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}});
        let base = hash(&content(&spec, "v1"));
        let mut scaled = spec.clone();
        scaled["replicas"] = json!(9);
        scaled["placement"] = json!({});
        scaled["rollout"] = json!({"stages": [{"count": 1}]});
        assert_eq!(hash(&content(&scaled, "v1")), base);
        let mut image = spec.clone();
        image["template"]["spec"]["containers"][0]["image"] = json!("x:2");
        assert_ne!(hash(&content(&image, "v1")), base);
        assert_ne!(
            hash(&content(&spec, "v2")),
            base,
            "a new runtime profile is a new revision"
        );
    }

    #[test]
    fn an_override_edit_is_a_new_revision_and_an_old_one_runs_its_own_overrides() {
        let spec = json!({"owner": {"team": "t"}, "replicas": 3,
            "template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}},
            "overrides": [{"name": "m", "clusters": ["a"], "image": {"registry": "m1.example"}}]});
        let first = content(&spec, "v1");
        let mut edited = spec.clone();
        edited["overrides"][0]["image"]["registry"] = json!("m2.example");
        assert_ne!(hash(&content(&edited, "v1")), hash(&first));
        // A member still on the first revision runs the first revision's rules.
        let mut slice = edited.clone();
        overlay(&mut slice, &first);
        assert_eq!(
            slice["overrides"][0]["image"]["registry"],
            json!("m1.example")
        );
        // Dropping every rule is a revision too, and its members run none.
        let mut none = spec.clone();
        none.as_object_mut().unwrap().remove("overrides");
        let dropped = content(&none, "v1");
        assert_ne!(hash(&dropped), hash(&first));
        let mut slice = spec.clone();
        overlay(&mut slice, &dropped);
        assert!(slice.get("overrides").is_none());
    }

    #[test]
    fn an_overlay_runs_the_old_content_with_todays_share() {
        let old = json!({"owner": {"team": "t"}, "replicas": 3, "config": {"a": "1"},
            "template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}});
        let old_content = content(&old, "v1");
        // Today: scaled to 5, a new image, the config gone, an ingress added.
        let mut spec = json!({"owner": {"team": "t"}, "replicas": 5, "ingress": {"host": "h"},
            "template": {"spec": {"containers": [{"name": "c", "image": "x:2"}]}}});
        overlay(&mut spec, &old_content);
        assert_eq!(spec["replicas"], json!(5));
        assert_eq!(
            spec["template"]["spec"]["containers"][0]["image"],
            json!("x:1")
        );
        assert_eq!(spec["config"], json!({"a": "1"}));
        assert!(spec.get("ingress").is_none());
        assert_eq!(spec["runtimeVersion"], json!("v1"));
        assert_eq!(hash(&content(&spec, "v1")), hash(&old_content));
    }
}

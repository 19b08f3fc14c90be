//! What a member's resolved rules do to its expanded objects.

use std::collections::BTreeSet;

use kube::api::DynamicObject;
use serde_json::{Map, Value};

use crate::api::overrides::{ObjectPatch, Override, PatchOp};
use crate::api::validate::Invalid;

/// What applying the rules did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// The rules that applied, by name, in order.
    pub rules: Vec<String>,
    /// Patches that found no generated object of their kind (and name), as
    /// `spec.overrides[i].patches[j]`: refused at admission, skipped in a member (a
    /// finished job set has no Jobs left to patch).
    pub unmatched_patches: Vec<String>,
}

/// The names of the application containers (and init containers) in a workload's spec:
/// those of every pod spec in it. A typed override changes only these.
pub fn application_containers(spec: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    collect_containers(spec, 0, &mut out);
    out
}

fn collect_containers(v: &Value, depth: usize, out: &mut BTreeSet<String>) {
    if depth > 10 {
        return;
    }
    match v {
        Value::Object(m) => {
            if let Some(Value::Array(cs)) = m.get("containers") {
                for c in cs {
                    if let Some(n) = c.get("name").and_then(Value::as_str) {
                        out.insert(n.to_string());
                    }
                }
            }
            for child in m.values() {
                collect_containers(child, depth + 1, out);
            }
        }
        Value::Array(items) => {
            for i in items {
                collect_containers(i, depth + 1, out);
            }
        }
        _ => {}
    }
}

/// Applies the rules meant for `cluster` to `objects`, in order. Without a cluster (an
/// expansion on the hub, or offline) nothing is applied. A rule still carrying a cluster
/// selector was not resolved by the hub and is refused; a rule naming other clusters is
/// skipped. Returns which rules applied; an error names the rule's field.
pub fn apply(
    rules: &[Override],
    cluster: Option<&str>,
    app: &BTreeSet<String>,
    objects: &mut [DynamicObject],
) -> Result<Applied, Invalid> {
    let mut applied = Applied::default();
    let Some(cluster) = cluster else {
        return Ok(applied);
    };
    for (i, rule) in rules.iter().enumerate() {
        let field = format!("spec.overrides[{i}]");
        if rule.cluster_selector.is_some() {
            return Err(Invalid::one(
                format!("{field}.clusterSelector"),
                "a member runs the rules the hub resolved for it; a selector here was not resolved",
            ));
        }
        if !rule.clusters.is_empty() && !rule.clusters.iter().any(|c| c == cluster) {
            continue;
        }
        for (j, c) in rule.containers.iter().enumerate() {
            if !app.contains(c) {
                return Err(Invalid::one(
                    format!("{field}.containers[{j}]"),
                    format!("no application container is named {c:?}"),
                ));
            }
        }
        let targets: BTreeSet<&str> = if rule.containers.is_empty() {
            app.iter().map(String::as_str).collect()
        } else {
            rule.containers.iter().map(String::as_str).collect()
        };
        for (j, p) in rule.patches.iter().enumerate() {
            let matched = objects.iter().any(|o| patch_targets(p, o));
            if !matched {
                applied
                    .unmatched_patches
                    .push(format!("{field}.patches[{j}]"));
            }
        }
        for obj in objects.iter_mut() {
            let before = obj.clone();
            apply_typed(rule, &targets, obj);
            let kind = kind_of(obj).to_string();
            if rule.patches.iter().any(|p| patch_targets(p, obj)) {
                let mut body = serde_json::to_value(&*obj).map_err(|e| {
                    Invalid::one(&field, format!("{kind} cannot be serialized: {e}"))
                })?;
                for (j, p) in rule.patches.iter().enumerate() {
                    if patch_targets(p, obj) {
                        patch(&mut body, p).map_err(|m| {
                            Invalid::one(
                                format!("{field}.patches[{j}].path"),
                                format!(
                                    "{} {}: {m}",
                                    kind,
                                    obj.metadata.name.as_deref().unwrap_or("")
                                ),
                            )
                        })?;
                    }
                }
                *obj = serde_json::from_value(body).map_err(|e| {
                    Invalid::one(
                        format!("{field}.patches"),
                        format!("the patched {kind} is no object: {e}"),
                    )
                })?;
            }
            if *obj != before {
                typed_check(obj).map_err(|m| Invalid::one(&field, m))?;
            }
        }
        applied.rules.push(rule.name.clone());
    }
    Ok(applied)
}

fn kind_of(o: &DynamicObject) -> &str {
    o.types.as_ref().map(|t| t.kind.as_str()).unwrap_or("")
}

fn patch_targets(p: &ObjectPatch, o: &DynamicObject) -> bool {
    kind_of(o) == p.kind
        && p.name
            .as_deref()
            .is_none_or(|n| o.metadata.name.as_deref() == Some(n))
}

/// The pod template of a generated object, by kind.
fn template_mut<'a>(kind: &str, data: &'a mut Value) -> Option<&'a mut Value> {
    match kind {
        "Deployment" | "StatefulSet" | "DaemonSet" | "Job" => data.pointer_mut("/spec/template"),
        "CronJob" => data.pointer_mut("/spec/jobTemplate/spec/template"),
        _ => None,
    }
}

fn apply_typed(rule: &Override, targets: &BTreeSet<&str>, obj: &mut DynamicObject) {
    if !rule.labels.is_empty() {
        let l = obj.metadata.labels.get_or_insert_with(Default::default);
        l.extend(rule.labels.clone());
    }
    if !rule.annotations.is_empty() {
        let a = obj
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        a.extend(rule.annotations.clone());
    }
    let kind = kind_of(obj).to_string();
    let Some(template) = template_mut(&kind, &mut obj.data) else {
        return;
    };
    let Some(t) = template.as_object_mut() else {
        return;
    };
    if !rule.labels.is_empty() || !rule.annotations.is_empty() {
        let meta = object_at(t, "metadata");
        for (key, map) in [("labels", &rule.labels), ("annotations", &rule.annotations)] {
            if map.is_empty() {
                continue;
            }
            let m = object_at(meta, key);
            for (k, v) in map {
                m.insert(k.clone(), Value::String(v.clone()));
            }
        }
    }
    let spec = object_at(t, "spec");
    if !rule.tolerations.is_empty() {
        let list = spec
            .entry("tolerations")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(items) = list {
            for tol in &rule.tolerations {
                let v = serde_json::to_value(tol).unwrap_or(Value::Null);
                if !items.contains(&v) {
                    items.push(v);
                }
            }
        }
    }
    for key in ["containers", "initContainers"] {
        let Some(Value::Array(cs)) = spec.get_mut(key) else {
            continue;
        };
        for c in cs {
            let Some(c) = c.as_object_mut() else { continue };
            let named = c.get("name").and_then(Value::as_str).unwrap_or("");
            if !targets.contains(named) {
                continue;
            }
            container(rule, c);
        }
    }
}

fn object_at<'a>(m: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let v = m.entry(key).or_insert_with(|| Value::Object(Map::new()));
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    v.as_object_mut().expect("an object was just put there")
}

fn container(rule: &Override, c: &mut Map<String, Value>) {
    if let Some(image) = &rule.image
        && let Some(Value::String(current)) = c.get_mut("image")
    {
        *current = retag(current, image.registry.as_deref(), image.tag.as_deref());
    }
    if !rule.env.is_empty() {
        let env = c.entry("env").or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(items) = env {
            for e in &rule.env {
                let new = serde_json::json!({"name": e.name, "value": e.value});
                match items
                    .iter_mut()
                    .find(|x| x.get("name").and_then(Value::as_str) == Some(e.name.as_str()))
                {
                    Some(x) => *x = new,
                    None => items.push(new),
                }
            }
        }
    }
    if let Some(args) = &rule.args {
        c.insert(
            "args".into(),
            Value::Array(args.iter().cloned().map(Value::String).collect()),
        );
    }
    if let Some(res) = &rule.resources {
        let r = object_at(c, "resources");
        for (key, set) in [("requests", &res.requests), ("limits", &res.limits)] {
            let Some(set) = set else { continue };
            let m = object_at(r, key);
            for (k, q) in set {
                m.insert(k.clone(), Value::String(q.0.clone()));
            }
        }
    }
}

/// `image` with a new registry and/or tag. The registry is the first path segment when
/// it looks like a host (has a `.` or a `:`, or is `localhost`).
pub(super) fn retag(image: &str, registry: Option<&str>, tag: Option<&str>) -> String {
    let (host, path) = match image.split_once('/') {
        Some((h, rest)) if h.contains('.') || h.contains(':') || h == "localhost" => {
            (Some(h), rest)
        }
        _ => (None, image),
    };
    // The tag or digest ends the last segment.
    let (repo, suffix) = match path.find('@') {
        Some(at) => (&path[..at], &path[at..]),
        None => {
            let last = path.rfind('/').map_or(0, |i| i + 1);
            match path[last..].rfind(':') {
                Some(at) => (&path[..last + at], &path[last + at..]),
                None => (path, ""),
            }
        }
    };
    let suffix = match tag {
        Some(t) if t.contains(':') => format!("@{t}"),
        Some(t) => format!(":{t}"),
        None => suffix.to_string(),
    };
    let host = registry.or(host);
    match host {
        Some(h) => format!("{}/{repo}{suffix}", h.trim_end_matches('/')),
        None => format!("{repo}{suffix}"),
    }
}

/// One RFC 6902 operation on `doc`. The path must exist (`add`: its parent; the last
/// token may be `-` to append to an array).
pub(super) fn patch(doc: &mut Value, p: &ObjectPatch) -> Result<(), String> {
    let tokens = pointer_tokens(&p.path)?;
    let Some((last, parents)) = tokens.split_last() else {
        return Err("the whole object cannot be patched".into());
    };
    let mut at = &mut *doc;
    for (depth, t) in parents.iter().enumerate() {
        at = step(at, t).ok_or_else(|| format!("{} does not exist", join(&tokens[..=depth])))?;
    }
    let missing = || format!("{} does not exist", p.path);
    let value = || {
        p.value
            .clone()
            .ok_or_else(|| format!("{} needs a value", p.op.as_str()))
    };
    match (p.op, at) {
        (PatchOp::Add, Value::Object(m)) => {
            m.insert(last.clone(), value()?);
        }
        (PatchOp::Add, Value::Array(items)) => {
            let v = value()?;
            if last == "-" {
                items.push(v);
            } else {
                let i = index(last, items.len() + 1).ok_or_else(missing)?;
                items.insert(i, v);
            }
        }
        (PatchOp::Replace, Value::Object(m)) => {
            let slot = m.get_mut(last.as_str()).ok_or_else(missing)?;
            *slot = value()?;
        }
        (PatchOp::Replace, Value::Array(items)) => {
            let n = items.len();
            let i = index(last, n).ok_or_else(missing)?;
            items[i] = value()?;
        }
        (PatchOp::Remove, Value::Object(m)) => {
            m.remove(last.as_str()).ok_or_else(missing)?;
        }
        (PatchOp::Remove, Value::Array(items)) => {
            let i = index(last, items.len()).ok_or_else(missing)?;
            items.remove(i);
        }
        _ => {
            return Err(format!(
                "the parent of {} is not an object or array",
                p.path
            ));
        }
    }
    Ok(())
}

fn step<'a>(v: &'a mut Value, t: &str) -> Option<&'a mut Value> {
    match v {
        Value::Object(m) => m.get_mut(t),
        Value::Array(items) => {
            let n = items.len();
            items.get_mut(index(t, n)?)
        }
        _ => None,
    }
}

fn index(t: &str, len: usize) -> Option<usize> {
    if t.len() > 1 && t.starts_with('0') {
        return None;
    }
    t.parse::<usize>().ok().filter(|i| *i < len)
}

fn join(tokens: &[String]) -> String {
    tokens
        .iter()
        .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// The tokens of a JSON pointer (`~1` is `/`, `~0` is `~`).
pub(super) fn pointer_tokens(path: &str) -> Result<Vec<String>, String> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err(format!("{path:?} is not a JSON pointer (it starts with /)"));
    };
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

/// An overridden object must still be one of its kind.
fn typed_check(obj: &DynamicObject) -> Result<(), String> {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
    use k8s_openapi::api::batch::v1::{CronJob, Job};
    use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Service};
    use k8s_openapi::api::networking::v1::Ingress;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let kind = kind_of(obj);
    let body = serde_json::to_value(obj).map_err(|e| e.to_string())?;
    fn as_<T: serde::de::DeserializeOwned>(v: Value) -> Result<(), serde_json::Error> {
        serde_json::from_value::<T>(v).map(|_| ())
    }
    let r = match kind {
        "Deployment" => as_::<Deployment>(body),
        "StatefulSet" => as_::<StatefulSet>(body),
        "DaemonSet" => as_::<DaemonSet>(body),
        "Job" => as_::<Job>(body),
        "CronJob" => as_::<CronJob>(body),
        "ConfigMap" => as_::<ConfigMap>(body),
        "PersistentVolumeClaim" => as_::<PersistentVolumeClaim>(body),
        "Service" => as_::<Service>(body),
        "Ingress" => as_::<Ingress>(body),
        "PodDisruptionBudget" => as_::<PodDisruptionBudget>(body),
        _ => Ok(()),
    };
    r.map_err(|e| {
        format!(
            "the overridden {kind} {} is not a valid {kind}: {e}",
            obj.metadata.name.as_deref().unwrap_or("")
        )
    })
}

//! What is refused before an override is stored or used: a rule that changes nothing or
//! touches what pinfed owns, an unknown variable, a rule that selects no member, two
//! rules setting the same thing for one member.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::overrides::{Override, PatchOp};
use crate::api::quantity::Milli;
use crate::api::validate::{FieldError, Invalid};
use crate::api::validation::{is_dns_label, is_label_value, is_qualified_name};
use crate::api::workload::WorkloadKind;

use super::apply::pointer_tokens;
use super::select::{Member, known_variable, resolve, selects, variables};

/// Kinds a patch may name: those the expansion generates.
const PATCHABLE: &[&str] = &[
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "CronJob",
    "ConfigMap",
    "PersistentVolumeClaim",
    "Service",
    "Ingress",
    "PodDisruptionBudget",
];

/// Whether a label or annotation key is pinfed's own (it selects, owns or hashes the
/// generated objects; an override may not set it).
pub(crate) fn reserved_key(k: &str) -> bool {
    let prefix = k.split_once('/').map(|(p, _)| p).unwrap_or("");
    prefix == "pinterest.com"
        || prefix.ends_with(".pinterest.com")
        || k == crate::api::common::LABEL_MANAGED_BY
}

/// Checks that need no member: every error names its field.
pub fn check_static(rules: &[Override], kind: WorkloadKind) -> Result<(), Invalid> {
    let mut errors = Vec::new();
    let mut err = |field: String, message: String| errors.push(FieldError { field, message });
    let mut names = BTreeSet::new();
    for (i, r) in rules.iter().enumerate() {
        let f = format!("spec.overrides[{i}]");
        if !is_dns_label(&r.name) {
            err(
                format!("{f}.name"),
                format!("{:?} is not a DNS label", r.name),
            );
        } else if !names.insert(r.name.as_str()) {
            err(
                format!("{f}.name"),
                format!("{:?} is used by another rule", r.name),
            );
        }
        let changes = r.image.is_some()
            || !r.env.is_empty()
            || r.args.is_some()
            || r.resources.is_some()
            || !r.labels.is_empty()
            || !r.annotations.is_empty()
            || !r.tolerations.is_empty()
            || r.replicas.is_some()
            || !r.patches.is_empty();
        if !changes {
            err(f.clone(), "changes nothing".into());
        }
        for (j, c) in r.clusters.iter().enumerate() {
            if !is_dns_label(c) {
                err(
                    format!("{f}.clusters[{j}]"),
                    format!("{c:?} is not a member name"),
                );
            }
        }
        if let Some(img) = &r.image {
            if img.registry.is_none() && img.tag.is_none() {
                err(format!("{f}.image"), "sets neither registry nor tag".into());
            }
            if let Some(reg) = &img.registry
                && (reg.is_empty() || reg.contains(char::is_whitespace) || reg.contains('@'))
            {
                err(
                    format!("{f}.image.registry"),
                    format!("{reg:?} is not a registry host"),
                );
            }
            if let Some(tag) = &img.tag
                && (tag.is_empty() || tag.contains(char::is_whitespace) || tag.contains('/'))
            {
                err(
                    format!("{f}.image.tag"),
                    format!("{tag:?} is not a tag or digest"),
                );
            }
        }
        for (j, e) in r.env.iter().enumerate() {
            if e.name.is_empty() || e.name.contains('=') {
                err(
                    format!("{f}.env[{j}].name"),
                    format!("{:?} is not a variable name", e.name),
                );
            }
        }
        if let Some(res) = &r.resources {
            for (key, set) in [("requests", &res.requests), ("limits", &res.limits)] {
                for (k, q) in set.iter().flatten() {
                    if Milli::parse(&q.0).is_err() {
                        err(
                            format!("{f}.resources.{key}.{k}"),
                            format!("{:?} is not a quantity", q.0),
                        );
                    }
                }
            }
            if res.claims.as_ref().is_some_and(|c| !c.is_empty()) {
                err(
                    format!("{f}.resources.claims"),
                    "resource claims cannot be overridden".into(),
                );
            }
        }
        for (key, map) in [("labels", &r.labels), ("annotations", &r.annotations)] {
            for (k, v) in map {
                if reserved_key(k) {
                    err(format!("{f}.{key}.{k}"), "is pinfed's own key".into());
                } else if !is_qualified_name(k) {
                    err(format!("{f}.{key}.{k}"), "is not a qualified name".into());
                } else if key == "labels" && !v.contains("{{") && !is_label_value(v) {
                    err(
                        format!("{f}.{key}.{k}"),
                        format!("{v:?} is not a label value"),
                    );
                }
            }
        }
        if let Some(b) = r.replicas {
            if !kind.divides_replicas() {
                err(
                    format!("{f}.replicas"),
                    format!("only services and stateful sets divide replicas, not a {kind}"),
                );
            }
            if b.min.is_some_and(|m| m < 0) || b.max.is_some_and(|m| m < 0) {
                err(format!("{f}.replicas"), "bounds are never negative".into());
            }
            if let (Some(lo), Some(hi)) = (b.min, b.max)
                && lo > hi
            {
                err(
                    format!("{f}.replicas"),
                    format!("min {lo} is above max {hi}"),
                );
            }
        }
        for (j, p) in r.patches.iter().enumerate() {
            let pf = format!("{f}.patches[{j}]");
            if !PATCHABLE.contains(&p.kind.as_str()) {
                err(
                    format!("{pf}.kind"),
                    format!(
                        "{:?} is not a kind pinfed generates ({})",
                        p.kind,
                        PATCHABLE.join(", ")
                    ),
                );
            }
            match pointer_tokens(&p.path) {
                Err(m) => err(format!("{pf}.path"), m),
                Ok(tokens) => {
                    if let Some(why) = reserved_path(&tokens) {
                        err(format!("{pf}.path"), why);
                    } else if p.kind == "Ingress"
                        && let Some(why) = ingress_hosts_path(&tokens)
                    {
                        err(format!("{pf}.path"), why);
                    }
                }
            }
            if p.op != PatchOp::Remove && p.value.is_none() {
                err(
                    format!("{pf}.value"),
                    format!("{} needs a value", p.op.as_str()),
                );
            }
        }
        // Variables: every `{{...}}` must be one overrides know.
        for (field, s) in strings(r) {
            for v in variables(s) {
                if !known_variable(v) {
                    err(
                        format!("{f}.{field}"),
                        format!(
                            "unknown variable {{{{{v}}}}} (known: cluster, region, zone, label:<key>)"
                        ),
                    );
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Invalid { errors })
    }
}

/// Why a patch may not touch `tokens`: what ties the object to its workload and to pinfed
/// (name, namespace, owner, pinfed's labels and annotations, selectors).
fn reserved_path(tokens: &[String]) -> Option<String> {
    let t: Vec<&str> = tokens.iter().map(String::as_str).collect();
    match t.as_slice() {
        ["apiVersion" | "kind", ..] => Some("the object's type is pinfed's".into()),
        ["metadata"] => Some("the object's metadata is pinfed's; patch a key in it".into()),
        [
            "metadata",
            "name" | "namespace" | "ownerReferences" | "uid" | "generateName" | "finalizers"
            | "managedFields",
            ..,
        ] => Some(format!("metadata.{} is pinfed's", t[1])),
        ["spec", "selector", ..] => {
            Some("the selector ties the object to its pods; it is pinfed's".into())
        }
        _ => {
            // `.../labels` or `.../annotations` as a whole, or one of pinfed's keys in them.
            let n = t.len();
            if matches!(t[n - 1], "labels" | "annotations") {
                return Some(format!(
                    "{} as a whole holds pinfed's keys; patch one key, or use the typed `{}`",
                    t[n - 1],
                    t[n - 1]
                ));
            }
            if n >= 2 && matches!(t[n - 2], "labels" | "annotations") && reserved_key(t[n - 1]) {
                return Some(format!("{} is pinfed's own key", t[n - 1]));
            }
            None
        }
    }
}

/// An Ingress's hosts and routes are `spec.ingress`'s, owned across the fleet
/// (`api::ingress_host`): a member's override may not answer for another name.
fn ingress_hosts_path(tokens: &[String]) -> Option<String> {
    let t: Vec<&str> = tokens.iter().map(String::as_str).collect();
    match t.as_slice() {
        ["spec"] | ["spec", "rules" | "tls" | "defaultBackend", ..] => Some(
            "an Ingress's hosts and routes are spec.ingress's (hosts are owned across the fleet); an override may not change them".into(),
        ),
        _ => None,
    }
}

/// Every string of a rule that variables may appear in, with its field.
fn strings(r: &Override) -> Vec<(String, &str)> {
    let mut out: Vec<(String, &str)> = Vec::new();
    if let Some(img) = &r.image {
        out.extend(
            img.registry
                .as_deref()
                .map(|s| ("image.registry".to_string(), s)),
        );
        out.extend(img.tag.as_deref().map(|s| ("image.tag".to_string(), s)));
    }
    for (j, e) in r.env.iter().enumerate() {
        out.push((format!("env[{j}].value"), e.value.as_str()));
    }
    for (j, a) in r.args.iter().flatten().enumerate() {
        out.push((format!("args[{j}]"), a.as_str()));
    }
    for (k, v) in &r.labels {
        out.push((format!("labels.{k}"), v.as_str()));
    }
    for (k, v) in &r.annotations {
        out.push((format!("annotations.{k}"), v.as_str()));
    }
    for (j, p) in r.patches.iter().enumerate() {
        if let Some(v) = &p.value {
            let mut found = Vec::new();
            json_strings(v, &mut found);
            out.extend(
                found
                    .into_iter()
                    .map(|s| (format!("patches[{j}].value"), s)),
            );
        }
    }
    out
}

fn json_strings<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a str>) {
    match v {
        serde_json::Value::String(s) => out.push(s),
        serde_json::Value::Array(a) => a.iter().for_each(|x| json_strings(x, out)),
        serde_json::Value::Object(m) => m.values().for_each(|x| json_strings(x, out)),
        _ => {}
    }
}

/// What a rule sets, as keys two rules must not share for one member. Tolerations add up
/// and are no conflict. `*` stands for every application container.
fn touched(r: &Override) -> Vec<String> {
    let containers: Vec<&str> = if r.containers.is_empty() {
        vec!["*"]
    } else {
        r.containers.iter().map(String::as_str).collect()
    };
    let mut out = Vec::new();
    for c in &containers {
        if let Some(img) = &r.image {
            if img.registry.is_some() {
                out.push(format!("container {c}: image registry"));
            }
            if img.tag.is_some() {
                out.push(format!("container {c}: image tag"));
            }
        }
        for e in &r.env {
            out.push(format!("container {c}: env {}", e.name));
        }
        if r.args.is_some() {
            out.push(format!("container {c}: args"));
        }
        if let Some(res) = &r.resources {
            for (key, set) in [("requests", &res.requests), ("limits", &res.limits)] {
                for k in set.iter().flat_map(|s| s.keys()) {
                    out.push(format!("container {c}: resources.{key}.{k}"));
                }
            }
        }
    }
    out.extend(r.labels.keys().map(|k| format!("label {k}")));
    out.extend(r.annotations.keys().map(|k| format!("annotation {k}")));
    if let Some(b) = r.replicas {
        out.extend(b.min.map(|_| "replicas.min".to_string()));
        out.extend(b.max.map(|_| "replicas.max".to_string()));
    }
    for p in &r.patches {
        out.push(format!(
            "{} {}: {}",
            p.kind,
            p.name.as_deref().unwrap_or("*"),
            p.path
        ));
    }
    out
}

/// Whether two touched keys collide (`*` matches any container or object name).
fn collide(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let star = |s: &str| -> Option<(String, String)> {
        // "container X: rest" or "Kind X: rest"
        let (head, rest) = s.split_once(": ")?;
        let (what, name) = head.rsplit_once(' ')?;
        Some((format!("{what}|{rest}"), name.to_string()))
    };
    match (star(a), star(b)) {
        (Some((ka, na)), Some((kb, nb))) => ka == kb && (na == "*" || nb == "*"),
        _ => false,
    }
}

/// Checks against the members there are: each rule selects at least one; each member's
/// variables resolve; no two rules set the same thing for one member.
pub fn check_against_members(rules: &[Override], members: &[Member<'_>]) -> Result<(), Invalid> {
    let mut errors = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        if !members.iter().any(|m| selects(r, m)) {
            let names: Vec<&str> = members.iter().map(|m| m.name).collect();
            errors.push(FieldError {
                field: format!("spec.overrides[{i}]"),
                message: format!(
                    "rule {:?} selects no member cluster (members: {})",
                    r.name,
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                ),
            });
        }
    }
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for m in members {
        if let Err(e) = resolve(rules, m) {
            for fe in e.errors {
                if seen.insert(fe.to_string()) {
                    errors.push(fe);
                }
            }
        }
        let mut owners: BTreeMap<String, usize> = BTreeMap::new();
        for (i, r) in rules.iter().enumerate().filter(|(_, r)| selects(r, m)) {
            for key in touched(r) {
                if let Some((other_key, j)) = owners
                    .iter()
                    .find(|(k, _)| collide(k, &key))
                    .map(|(k, j)| (k.clone(), *j))
                {
                    let fe = FieldError {
                        field: format!("spec.overrides[{i}]"),
                        message: format!(
                            "rule {:?} sets {key} for member {}, as rule {:?} (spec.overrides[{j}]) does ({other_key})",
                            r.name, m.name, rules[j].name
                        ),
                    };
                    if seen.insert(format!("{i}/{j}/{key}")) {
                        errors.push(fe);
                    }
                } else {
                    owners.insert(key, i);
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Invalid { errors })
    }
}

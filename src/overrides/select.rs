//! Which rules select a member, and the rules as that member runs them: its variables
//! filled in, its name as the only selector.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::api::overrides::{Override, ReplicaBounds};
use crate::api::validate::Invalid;

/// A member as overrides see it.
#[derive(Clone, Copy, Debug)]
pub struct Member<'a> {
    pub name: &'a str,
    pub region: Option<&'a str>,
    pub zone: Option<&'a str>,
    /// The MemberCluster's labels plus `topology.kubernetes.io/region` and `/zone`.
    pub labels: &'a BTreeMap<String, String>,
}

/// Whether `rule` selects `member`: by name and by labels (both, when both are set;
/// neither set selects every member).
pub fn selects(rule: &Override, member: &Member<'_>) -> bool {
    (rule.clusters.is_empty() || rule.clusters.iter().any(|c| c == member.name))
        && rule
            .cluster_selector
            .as_ref()
            .is_none_or(|s| s.matches(member.labels))
}

/// The rules selecting `member`, as its slice carries them: `clusters` is the member
/// alone, no selector, and every `{{cluster}}`, `{{region}}`, `{{zone}}` and
/// `{{label:<key>}}` replaced with the member's value. A variable the member has no value
/// for is an error naming the rule.
pub fn resolve(rules: &[Override], member: &Member<'_>) -> Result<Vec<Override>, Invalid> {
    let mut out = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        if !selects(rule, member) {
            continue;
        }
        let field = format!("spec.overrides[{i}]");
        let mut r = rule.clone();
        r.clusters = vec![member.name.to_string()];
        r.cluster_selector = None;
        let fill = |s: &str| fill(s, member).map_err(|m| Invalid::one(field.clone(), m));
        if let Some(image) = r.image.as_mut() {
            if let Some(reg) = image.registry.as_mut() {
                *reg = fill(reg)?;
            }
            if let Some(tag) = image.tag.as_mut() {
                *tag = fill(tag)?;
            }
        }
        for e in &mut r.env {
            e.value = fill(&e.value)?;
        }
        if let Some(args) = r.args.as_mut() {
            for a in args {
                *a = fill(a)?;
            }
        }
        for v in r.labels.values_mut().chain(r.annotations.values_mut()) {
            *v = fill(v)?;
        }
        for p in &mut r.patches {
            if let Some(v) = p.value.as_mut() {
                fill_value(v, &|s| fill(s))?;
            }
        }
        out.push(r);
    }
    Ok(out)
}

fn fill_value(v: &mut Value, f: &dyn Fn(&str) -> Result<String, Invalid>) -> Result<(), Invalid> {
    match v {
        Value::String(s) => *s = f(s)?,
        Value::Array(items) => {
            for i in items {
                fill_value(i, f)?;
            }
        }
        Value::Object(m) => {
            for i in m.values_mut() {
                fill_value(i, f)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The variables a string uses, in order (`cluster`, `region`, `zone`, `label:<key>`, or
/// anything else written between `{{` and `}}`).
pub(super) fn variables(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(at) = rest.find("{{") {
        let after = &rest[at + 2..];
        match after.find("}}") {
            Some(end) => {
                out.push(after[..end].trim());
                rest = &after[end + 2..];
            }
            None => break,
        }
    }
    out
}

/// Whether `v` is a variable overrides know.
pub(super) fn known_variable(v: &str) -> bool {
    matches!(v, "cluster" | "region" | "zone")
        || v.strip_prefix("label:")
            .is_some_and(|k| !k.trim().is_empty())
}

fn fill(s: &str, m: &Member<'_>) -> Result<String, String> {
    if !s.contains("{{") {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find("{{") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[at..]);
            rest = "";
            break;
        };
        let var = after[..end].trim();
        let value = match var {
            "cluster" => Some(m.name),
            "region" => m.region,
            "zone" => m.zone,
            _ => match var.strip_prefix("label:") {
                Some(k) => m.labels.get(k.trim()).map(String::as_str),
                None => return Err(format!("unknown variable {{{{{var}}}}}")),
            },
        };
        let Some(value) = value else {
            return Err(format!("member {} has no value for {{{{{var}}}}}", m.name));
        };
        out.push_str(value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The replica bounds the rules selecting `member` set (a later rule's bound wins over
/// an earlier one's; `check_static` refuses two rules setting the same bound for one
/// member).
pub fn replica_bounds(rules: &[Override], member: &Member<'_>) -> Option<ReplicaBounds> {
    let mut out: Option<ReplicaBounds> = None;
    for r in rules.iter().filter(|r| selects(r, member)) {
        if let Some(b) = r.replicas {
            let o = out.get_or_insert_with(ReplicaBounds::default);
            o.min = b.min.or(o.min);
            o.max = b.max.or(o.max);
        }
    }
    out
}

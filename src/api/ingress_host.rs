//! Ingress hosts are owned across the fleet. One workload holds a host name at a time (the
//! first created; later claimants wait), a team claims only names its policy allows, and
//! the platform's default domain is never claimed by hand. Pure rules: the JSS refuses
//! at submission (403, 409), the hub holds a workload that does not hold its host.

use k8s_openapi::jiff::Timestamp;

use super::workload::{WorkloadKind, WorkloadRef};

/// The domain of the default hosts (`<name>.<namespace>.<cluster>.pinterest.internal`):
/// unique by construction, so nobody may name one by hand.
pub const DEFAULT_DOMAIN: &str = "pinterest.internal";

/// The host a workload names itself (`spec.ingress.host`); a default host is not a claim.
pub fn explicit_host(w: WorkloadRef<'_>) -> Option<&str> {
    w.ingress_host()
}

/// The same, read from a workload's JSON (a cache body, a live list).
pub fn explicit_host_json(obj: &serde_json::Value) -> Option<&str> {
    obj.pointer("/spec/ingress/host")?.as_str()
}

/// Whether `host` lies in the platform's default domain.
pub fn in_default_domain(host: &str) -> bool {
    host == DEFAULT_DOMAIN || host.ends_with(&format!(".{DEFAULT_DOMAIN}"))
}

/// Whether a team policy's pattern covers `host`: an exact name, or `*.suffix` for any
/// name under `suffix` (not `suffix` itself).
pub fn pattern_covers(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => host
            .strip_suffix(suffix)
            .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        None => pattern == host,
    }
}

/// Checks one pattern of a team policy: a host name, or `*.` and a host name with a dot.
pub fn check_pattern(pattern: &str) -> Result<(), String> {
    let name = pattern.strip_prefix("*.").unwrap_or(pattern);
    if !super::validation::is_dns_subdomain(name) || name.contains('*') {
        return Err(format!(
            "{pattern:?} is not a host name or `*.` followed by one"
        ));
    }
    if pattern.starts_with("*.") && !name.contains('.') {
        // `*.com` would hand a team every name under a public suffix.
        return Err(format!("{pattern:?} covers a whole top-level domain"));
    }
    if in_default_domain(name) {
        return Err(format!(
            "{pattern:?} is in the platform's default domain ({DEFAULT_DOMAIN}), which nobody claims"
        ));
    }
    Ok(())
}

/// A workload that names a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    /// When the workload was created; `None` for one not created yet (a submission).
    pub created: Option<Timestamp>,
}

impl Claim {
    /// `Kind/namespace/name`, as the hub keys its workloads.
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.kind, self.namespace, self.name)
    }

    /// The claim of a workload, read from its JSON (`None`: it names no host).
    pub fn from_json(kind: WorkloadKind, obj: &serde_json::Value) -> Option<(String, Claim)> {
        let host = explicit_host_json(obj)?;
        let meta = obj.get("metadata")?;
        Some((
            host.to_string(),
            Claim {
                kind,
                namespace: meta.get("namespace")?.as_str()?.to_string(),
                name: meta.get("name")?.as_str()?.to_string(),
                created: meta
                    .get("creationTimestamp")
                    .and_then(|t| t.as_str())
                    .and_then(|t| t.parse().ok()),
            },
        ))
    }

    fn order(&self) -> (bool, Option<Timestamp>, &str, &str) {
        // Not created yet comes last.
        (
            self.created.is_none(),
            self.created,
            &self.namespace,
            &self.name,
        )
    }
}

/// Which claimant holds a host: the first created; at the same second, the first by
/// namespace, then name (every reader agrees, whatever order it saw them in).
pub fn holder<'a>(claims: impl IntoIterator<Item = &'a Claim>) -> Option<&'a Claim> {
    claims.into_iter().min_by(|a, b| a.order().cmp(&b.order()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(ns: &str, name: &str, created: Option<i64>) -> Claim {
        Claim {
            kind: WorkloadKind::Service,
            namespace: ns.into(),
            name: name.into(),
            created: created.map(|s| Timestamp::from_second(s).unwrap()),
        }
    }

    #[test]
    fn the_first_created_holds_and_ties_go_by_namespace_then_name() {
        let old = claim("b", "web", Some(100));
        let new = claim("a", "web", Some(200));
        let pending = claim("a", "a", None);
        assert_eq!(holder([&new, &pending, &old]), Some(&old));
        let same_a = claim("a", "z", Some(100));
        assert_eq!(holder([&old, &same_a]), Some(&same_a));
        assert_eq!(holder([&pending]), Some(&pending));
        assert_eq!(holder(std::iter::empty()), None);
    }

    #[test]
    fn patterns_cover_exact_names_and_names_under_a_suffix_only() {
        assert!(pattern_covers("web.ads.example", "web.ads.example"));
        assert!(!pattern_covers("web.ads.example", "api.ads.example"));
        assert!(pattern_covers("*.ads.example", "web.ads.example"));
        assert!(pattern_covers("*.ads.example", "a.b.ads.example"));
        assert!(!pattern_covers("*.ads.example", "ads.example"));
        assert!(!pattern_covers("*.ads.example", "badads.example"));
        assert!(!pattern_covers("*.ads.example", "web.search.example"));
    }

    #[test]
    fn a_pattern_is_a_host_name_never_a_public_suffix_or_the_default_domain() {
        for ok in ["web.ads.example", "*.ads.example", "*.example.com"] {
            assert_eq!(check_pattern(ok), Ok(()), "{ok}");
        }
        for bad in [
            "*",
            "*.com",
            "a.*.example",
            "Web.example",
            "*.pinterest.internal",
            "x.pinterest.internal",
            "",
        ] {
            assert!(check_pattern(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_claim_reads_from_json_and_a_workload_without_a_host_claims_nothing() {
        let v = serde_json::json!({
            "metadata": {"namespace": "ads", "name": "web",
                         "creationTimestamp": "2026-11-29T03:00:00Z"},
            "spec": {"ingress": {"host": "web.ads.example"}}
        });
        let (host, c) = Claim::from_json(WorkloadKind::Service, &v).unwrap();
        assert_eq!(host, "web.ads.example");
        assert_eq!(c.key(), "PinterestService/ads/web");
        assert_eq!(c.created.unwrap().as_second(), 1_795_921_200);
        let none = serde_json::json!({"metadata": {"namespace": "ads", "name": "w"},
                                      "spec": {"ingress": {"path": "/"}}});
        assert_eq!(Claim::from_json(WorkloadKind::Service, &none), None);
        assert!(in_default_domain("web.ads.use1a.pinterest.internal"));
        assert!(!in_default_domain("notpinterest.internal.example"));
    }
}

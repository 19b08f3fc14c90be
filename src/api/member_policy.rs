//! What a member's admins let pinfed run in their cluster. The hub, and anyone holding the
//! credential it stores for a member, may write slices and RuntimeProfiles there; the
//! agent turns them into pods. So the member decides, in an object only its admins write
//! (the ConfigMap `pinfed-system/pinfed-member-policy`, key `policy.yaml`), which
//! namespaces pinfed may act in and at which Pod Security level, and the agent checks
//! every pod it is about to make — RuntimeProfile injections included — before it
//! creates anything. Pure.
//!
//! ```yaml
//! created:                 # namespaces pinfed created (label app.kubernetes.io/managed-by=pinfed)
//!   level: baseline        # Pod Security level (privileged | baseline | restricted)
//! namespaces:              # namespaces the member's admins enable, by name or prefix*
//!   - names: [infra, "logging-*"]
//!     level: privileged
//!     daemons: true        # PinterestDaemons (a pod on every node) may run there
//!     serviceAccounts: [log-shipper]   # besides `default`; "*" for any
//! ```
//! Without the ConfigMap: pinfed's own namespaces at `baseline`, no daemons, no other
//! namespace.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::pod_security::{self, Finding, Level};
use super::workload::WorkloadKind;

/// Where the policy lives in a member.
pub const POLICY_NAMESPACE: &str = "pinfed-system";
pub const POLICY_CONFIG_MAP: &str = "pinfed-member-policy";
pub const POLICY_KEY: &str = "policy.yaml";

/// The label of a namespace pinfed created (the hub, a pull agent).
pub const CREATED_LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "pinfed");

/// The annotation by which a member's admin hands an existing object to a workload
/// (`KIND/NAME` of the workload, e.g. `PinterestService/web`): the agent never takes over
/// an object it did not create without it (`pinfed adopt` sets it).
pub const ADOPT_ANNOTATION: &str = "federation.pinterest.com/adopt";

/// Who an existing object of a workload's name belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// Nothing of that name: the agent creates it.
    Absent,
    /// Made by pinfed for this workload (its owner reference), or a shared config copy
    /// pinfed made (`shared`: the copy's label).
    Ours,
    /// Someone else's, handed over with [`ADOPT_ANNOTATION`] naming this workload.
    Adoptable,
    /// Made by pinfed for a workload of this kind and name (its labels) but owned by
    /// another object: an earlier slice of that name, removed and made again (a failover
    /// and a failback), whose objects the member's garbage collector has not removed yet.
    /// Not a conflict: the agent waits for them to go, and takes none over.
    Leftover,
    /// Someone else's: the agent leaves it alone and reports a conflict.
    Foreign,
}

/// What [`ownership`] reads of an existing object.
pub struct Existing<'a> {
    /// Its owner references.
    pub owners: &'a [OwnerReference],
    pub labels: &'a std::collections::BTreeMap<String, String>,
    pub annotations: &'a std::collections::BTreeMap<String, String>,
}

/// Decides [`Ownership`] of an existing object (None: there is none). `workload` is
/// `KIND/NAME`; `shared` a label pinfed puts on copies several workloads may hold.
pub fn ownership(
    existing: Option<Existing<'_>>,
    uid: &str,
    workload: &str,
    shared: Option<(&str, &str)>,
) -> Ownership {
    let Some(Existing {
        owners,
        labels,
        annotations,
    }) = existing
    else {
        return Ownership::Absent;
    };
    if owners.iter().any(|o| o.uid == uid)
        || shared.is_some_and(|(k, v)| labels.get(k).is_some_and(|l| l == v))
    {
        Ownership::Ours
    } else if annotations
        .get(ADOPT_ANNOTATION)
        .is_some_and(|a| a == workload)
    {
        Ownership::Adoptable
    } else if !owners.is_empty()
        && owners.iter().all(|o| earlier_slice(o, uid, workload))
        && made_by_pinfed_for(labels, workload)
    {
        Ownership::Leftover
    } else {
        Ownership::Foreign
    }
}

/// Whether `owner` is a slice of `workload` (`KIND/NAME`) other than the one of `uid`:
/// an earlier one of that name, gone (names are unique), so the garbage collector owes
/// the removal of what it owned.
fn earlier_slice(owner: &OwnerReference, uid: &str, workload: &str) -> bool {
    owner.uid != uid && workload.split_once('/') == Some((&owner.kind, &owner.name))
}

/// Whether an object's labels say pinfed generated it for `workload` (`KIND/NAME`).
fn made_by_pinfed_for(labels: &std::collections::BTreeMap<String, String>, workload: &str) -> bool {
    use crate::api::common::{LABEL_KIND, LABEL_MANAGED_BY, LABEL_WORKLOAD, MANAGED_BY};
    let label = |k: &str| labels.get(k).map(String::as_str);
    label(LABEL_MANAGED_BY) == Some(MANAGED_BY)
        && workload.split_once('/') == label(LABEL_KIND).zip(label(LABEL_WORKLOAD))
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemberPolicy {
    /// The rule for namespaces pinfed created.
    #[serde(default)]
    pub created: NamespaceRule,
    /// Namespaces the member's admins enabled, first match wins (before `created`).
    #[serde(default)]
    pub namespaces: Vec<NamespaceEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceRule {
    #[serde(default)]
    pub level: Level,
    #[serde(default)]
    pub daemons: bool,
    /// ServiceAccounts pods may run as, besides `default` (`"*"`: any).
    #[serde(default)]
    pub service_accounts: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceEntry {
    /// Names, or prefixes ending in `*`.
    pub names: Vec<String>,
    #[serde(default)]
    pub level: Level,
    #[serde(default)]
    pub daemons: bool,
    #[serde(default)]
    pub service_accounts: Vec<String>,
}

impl NamespaceEntry {
    fn matches(&self, namespace: &str) -> bool {
        self.names.iter().any(|n| match n.strip_suffix('*') {
            Some(prefix) => namespace.starts_with(prefix),
            None => n == namespace,
        })
    }

    fn rule(&self) -> NamespaceRule {
        NamespaceRule {
            level: self.level,
            daemons: self.daemons,
            service_accounts: self.service_accounts.clone(),
        }
    }
}

/// A policy text that cannot be used: the line or field it fails at.
#[derive(Debug, thiserror::Error)]
#[error("{POLICY_NAMESPACE}/{POLICY_CONFIG_MAP} {POLICY_KEY}: {0}")]
pub struct PolicyError(pub String);

impl MemberPolicy {
    /// Reads `policy.yaml`. An empty text is the default policy.
    pub fn parse(text: &str) -> Result<MemberPolicy, PolicyError> {
        let policy: Option<MemberPolicy> =
            super::yaml::from_str(text).map_err(|e| PolicyError(e.to_string()))?;
        let policy = policy.unwrap_or_default();
        for (i, e) in policy.namespaces.iter().enumerate() {
            if e.names.is_empty() {
                return Err(PolicyError(format!("namespaces[{i}].names: empty")));
            }
            for (j, n) in e.names.iter().enumerate() {
                let bare = n.strip_suffix('*').unwrap_or(n);
                if bare.is_empty()
                    || bare.contains('*')
                    || super::validate::is_reserved_namespace(bare)
                {
                    return Err(PolicyError(format!(
                        "namespaces[{i}].names[{j}]: {n:?} is not a namespace name or a prefix ending in * (reserved namespaces cannot be enabled)"
                    )));
                }
            }
        }
        Ok(policy)
    }

    /// The rule for `namespace`, or None when pinfed may not act there. `created`: the
    /// namespace carries [`CREATED_LABEL`].
    pub fn rule_for(&self, namespace: &str, created: bool) -> Option<NamespaceRule> {
        if super::validate::is_reserved_namespace(namespace) {
            return None;
        }
        if let Some(e) = self.namespaces.iter().find(|e| e.matches(namespace)) {
            return Some(e.rule());
        }
        created.then(|| self.created.clone())
    }
}

/// Why a workload may not run in this member: each reason names the object and field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The namespace is neither pinfed's nor enabled by the member's admins.
    NamespaceNotEnabled { namespace: String },
    /// A PinterestDaemon where daemons are not allowed.
    Daemon { namespace: String },
    /// Pods that break the namespace's rules.
    Pods {
        namespace: String,
        level: Level,
        findings: Vec<(String, Finding)>,
    },
}

impl Refusal {
    /// Condition reason and Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::NamespaceNotEnabled { .. } => "NamespaceNotEnabled",
            Refusal::Daemon { .. } => "DaemonNotAllowed",
            Refusal::Pods { .. } => "PodPolicyDenied",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NamespaceNotEnabled { namespace } => write!(
                f,
                "namespace {namespace} is not enabled for pinfed in this member (its admins enable it in {POLICY_NAMESPACE}/{POLICY_CONFIG_MAP}); nothing was created"
            ),
            Refusal::Daemon { namespace } => write!(
                f,
                "kind: PinterestDaemons are not allowed in namespace {namespace} of this member (the member policy's `daemons`); nothing was created"
            ),
            Refusal::Pods {
                namespace,
                level,
                findings,
            } => {
                write!(
                    f,
                    "the pods would break namespace {namespace}'s policy (Pod Security {level}) in this member: "
                )?;
                const SHOWN: usize = 5;
                for (i, (object, finding)) in findings.iter().take(SHOWN).enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{object} {finding}")?;
                }
                if findings.len() > SHOWN {
                    write!(f, "; and {} more", findings.len() - SHOWN)?;
                }
                f.write_str("; nothing was created")
            }
        }
    }
}

/// Checks a workload's generated objects (after RuntimeProfile injection) against the
/// member's policy for their namespace. `objects` are native objects as (kind, name,
/// body as JSON).
pub fn admit(
    policy: &MemberPolicy,
    namespace: &str,
    created: bool,
    kind: WorkloadKind,
    objects: &[(&str, &str, &Value)],
) -> Result<(), Refusal> {
    let Some(rule) = policy.rule_for(namespace, created) else {
        return Err(Refusal::NamespaceNotEnabled {
            namespace: namespace.to_string(),
        });
    };
    if kind.runs_on_every_node() && !rule.daemons {
        return Err(Refusal::Daemon {
            namespace: namespace.to_string(),
        });
    }
    let mut findings = Vec::new();
    for (object_kind, name, body) in objects {
        let object = format!("{object_kind}/{name}");
        for (path, template) in pod_security::pod_templates(object_kind, body) {
            for f in pod_security::check_template(template, path, rule.level) {
                findings.push((object.clone(), f));
            }
            for f in pinfed_rules(&template["spec"], &format!("{path}.spec"), &rule) {
                findings.push((object.clone(), f));
            }
        }
        if let Some(f) = service_rules(object_kind, body) {
            findings.push((object, f));
        }
    }
    if findings.is_empty() {
        Ok(())
    } else {
        Err(Refusal::Pods {
            namespace: namespace.to_string(),
            level: rule.level,
            findings,
        })
    }
}

/// pinfed's own rules beside the standard: which ServiceAccount a pod runs as, and no
/// pinning to a node (which bypasses the scheduler and the nodes' taints) below
/// `privileged`.
fn pinfed_rules(spec: &Value, path: &str, rule: &NamespaceRule) -> Vec<Finding> {
    let mut out = Vec::new();
    for key in ["serviceAccountName", "serviceAccount"] {
        if let Some(sa) = spec.get(key).and_then(Value::as_str)
            && !sa.is_empty()
            && sa != "default"
            && !rule
                .service_accounts
                .iter()
                .any(|allowed| allowed == "*" || allowed == sa)
        {
            out.push(Finding {
                field: format!("{path}.{key}"),
                rule: "serviceAccountName",
                level: Level::Privileged,
            });
        }
    }
    if rule.level != Level::Privileged
        && spec
            .get("nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty())
    {
        out.push(Finding {
            field: format!("{path}.nodeName"),
            rule: "nodeName",
            level: Level::Baseline,
        });
    }
    out
}

/// A Service's `externalIPs` let it intercept traffic for any address (CVE-2020-8554).
fn service_rules(kind: &str, body: &Value) -> Option<Finding> {
    (kind == "Service"
        && body
            .pointer("/spec/externalIPs")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty()))
    .then(|| Finding {
        field: "spec.externalIPs".into(),
        rule: "externalIPs",
        level: Level::Privileged,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(pod: Value) -> Value {
        json!({"spec": {"template": {"metadata": {}, "spec": pod}}})
    }

    /// `admit` over Deployments named `web`.
    fn admit_deployments(
        p: &MemberPolicy,
        ns: &str,
        created: bool,
        kind: WorkloadKind,
        bodies: &[Value],
    ) -> Result<(), Refusal> {
        let objects: Vec<(&str, &str, &Value)> =
            bodies.iter().map(|b| ("Deployment", "web", b)).collect();
        admit(p, ns, created, kind, &objects)
    }

    fn plain() -> Value {
        deployment(json!({"containers": [{"name": "app", "image": "app:1"}]}))
    }

    #[test]
    fn without_a_policy_only_pinfeds_namespaces_at_baseline() {
        let p = MemberPolicy::default();
        assert_eq!(
            admit_deployments(&p, "team-a", true, WorkloadKind::Service, &[plain()]),
            Ok(())
        );
        let r =
            admit_deployments(&p, "default", false, WorkloadKind::Service, &[plain()]).unwrap_err();
        assert_eq!(r.reason(), "NamespaceNotEnabled");
        assert!(r.to_string().contains("namespace default is not enabled"));
        let r =
            admit_deployments(&p, "team-a", true, WorkloadKind::Daemon, &[plain()]).unwrap_err();
        assert_eq!(r.reason(), "DaemonNotAllowed");
    }

    #[test]
    fn reserved_namespaces_are_never_enabled() {
        assert!(MemberPolicy::parse("namespaces: [{names: [kube-system]}]").is_err());
        assert!(MemberPolicy::parse("namespaces: [{names: [\"kube-*\"]}]").is_err());
        let p = MemberPolicy::default();
        assert!(p.rule_for("kube-system", true).is_none());
        assert!(p.rule_for("pinfed-system", true).is_none());
    }

    #[test]
    fn a_privileged_sidecar_or_host_access_is_refused_naming_the_field() {
        let p = MemberPolicy::default();
        let pod = deployment(json!({"hostPID": true,
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
            "containers": [{"name": "app", "image": "app:1"},
                {"name": "sidecar", "image": "evil:1", "securityContext": {"privileged": true}}]}));
        let r = admit_deployments(&p, "team-a", true, WorkloadKind::Service, &[pod]).unwrap_err();
        let Refusal::Pods {
            findings, level, ..
        } = &r
        else {
            panic!("{r:?}")
        };
        assert_eq!(*level, Level::Baseline);
        let fields: Vec<&str> = findings.iter().map(|(_, f)| f.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.template.spec.hostPID",
                "spec.template.spec.volumes[0].hostPath",
                "spec.template.spec.containers[1].securityContext.privileged"
            ]
        );
        let msg = r.to_string();
        assert!(msg.contains("Deployment/web spec.template.spec.containers[1].securityContext.privileged (privileged, not allowed at baseline)"), "{msg}");
    }

    #[test]
    fn service_accounts_and_node_pinning_need_the_policy() {
        let p = MemberPolicy::parse(
            "namespaces: [{names: [\"infra-*\"], level: privileged, daemons: true, serviceAccounts: [shipper]}]",
        )
        .unwrap();
        let as_sa = |sa: &str| {
            deployment(
                json!({"serviceAccountName": sa, "containers": [{"name": "a", "image": "a"}]}),
            )
        };
        assert!(
            admit_deployments(
                &p,
                "infra-logs",
                false,
                WorkloadKind::Daemon,
                &[as_sa("shipper")]
            )
            .is_ok()
        );
        // An account the rule does not list, and a listed one where no rule lists it.
        for (ns, created, sa) in [("infra-logs", false, "admin"), ("team-a", true, "shipper")] {
            let r = admit_deployments(&p, ns, created, WorkloadKind::Service, &[as_sa(sa)])
                .unwrap_err();
            assert!(
                r.to_string().contains("serviceAccountName"),
                "{ns} {sa}: {r}"
            );
        }
        let pinned =
            deployment(json!({"nodeName": "node-1", "containers": [{"name": "a", "image": "a"}]}));
        assert!(
            admit_deployments(
                &p,
                "team-a",
                true,
                WorkloadKind::Service,
                std::slice::from_ref(&pinned)
            )
            .is_err()
        );
        assert!(admit_deployments(&p, "infra-x", false, WorkloadKind::Service, &[pinned]).is_ok());
    }

    #[test]
    fn an_enabled_namespace_takes_its_entry_before_the_created_rule() {
        let p = MemberPolicy::parse(
            "created: {level: restricted}\nnamespaces: [{names: [team-a], level: baseline}]",
        )
        .unwrap();
        assert_eq!(p.rule_for("team-a", true).unwrap().level, Level::Baseline);
        assert_eq!(p.rule_for("team-b", true).unwrap().level, Level::Restricted);
        assert!(p.rule_for("team-b", false).is_none());
        // Restricted refuses an ordinary pod.
        assert!(admit_deployments(&p, "team-b", true, WorkloadKind::Service, &[plain()]).is_err());
    }

    #[test]
    fn a_service_with_external_ips_is_refused() {
        let svc = json!({"spec": {"externalIPs": ["1.2.3.4"]}});
        let objects = [("Service", "s", &svc)];
        assert!(
            admit(
                &MemberPolicy::default(),
                "a",
                true,
                WorkloadKind::Service,
                &objects
            )
            .is_err()
        );
    }

    #[test]
    fn only_our_own_or_handed_over_objects_are_written() {
        use std::collections::BTreeMap;
        let none = BTreeMap::new();
        let adopt: BTreeMap<String, String> =
            [(ADOPT_ANNOTATION.into(), "PinterestService/web".into())].into();
        let shared: BTreeMap<String, String> = [("p".into(), "true".into())].into();
        let owner = |kind: &str, name: &str, uid: &str| OwnerReference {
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            ..Default::default()
        };
        let ours = [owner("PinterestService", "web", "u1")];
        let at = |owners: &'static [OwnerReference], labels, annotations| {
            Some(Existing {
                owners,
                labels,
                annotations,
            })
        };
        let w = "PinterestService/web";
        assert_eq!(ownership(None, "u1", w, None), Ownership::Absent);
        let owned = Some(Existing {
            owners: &ours,
            labels: &none,
            annotations: &none,
        });
        assert_eq!(ownership(owned, "u1", w, None), Ownership::Ours);
        assert_eq!(
            ownership(at(&[], &none, &none), "u1", w, None),
            Ownership::Foreign
        );
        assert_eq!(
            ownership(at(&[], &none, &adopt), "u1", w, None),
            Ownership::Adoptable
        );
        // Handed to another workload: still foreign to this one.
        assert_eq!(
            ownership(at(&[], &none, &adopt), "u1", "PinterestService/api", None),
            Ownership::Foreign
        );
        assert_eq!(
            ownership(at(&[], &shared, &none), "u1", w, Some(("p", "true"))),
            Ownership::Ours
        );
        // Generated for web by pinfed, owned by an earlier slice of web: left over.
        let generated: BTreeMap<String, String> = [
            ("app.kubernetes.io/managed-by".into(), "pinfed".into()),
            ("pinterest.com/kind".into(), "PinterestService".into()),
            ("pinterest.com/workload".into(), "web".into()),
        ]
        .into();
        let earlier = [owner("PinterestService", "web", "u0")];
        let owned_by = |owners| {
            Some(Existing {
                owners,
                labels: &generated,
                annotations: &none,
            })
        };
        assert_eq!(
            ownership(owned_by(&earlier), "u1", w, None),
            Ownership::Leftover
        );
        // The same labels on an object of another workload, owned by anything but an
        // earlier slice of this one, or by nothing (someone made it, labels and all):
        // foreign.
        assert_eq!(
            ownership(owned_by(&earlier), "u1", "PinterestService/api", None),
            Ownership::Foreign
        );
        assert_eq!(
            ownership(owned_by(&earlier), "u1", "PinterestJobSet/web", None),
            Ownership::Foreign
        );
        let other = [owner("ConfigMap", "web", "u0")];
        assert_eq!(
            ownership(owned_by(&other), "u1", w, None),
            Ownership::Foreign
        );
        let also_other = [earlier[0].clone(), owner("ConfigMap", "keep", "u2")];
        assert_eq!(
            ownership(owned_by(&also_other), "u1", w, None),
            Ownership::Foreign
        );
        assert_eq!(ownership(owned_by(&[]), "u1", w, None), Ownership::Foreign);
    }

    #[test]
    fn bad_policy_text_names_the_field() {
        let e = MemberPolicy::parse("created: {level: root}").unwrap_err();
        assert!(
            e.to_string().contains("level") || e.to_string().contains("root"),
            "{e}"
        );
        let e = MemberPolicy::parse("namespaces: [{names: []}]").unwrap_err();
        assert!(e.to_string().contains("namespaces[0].names"), "{e}");
        assert!(MemberPolicy::parse("extra: 1").is_err());
        assert_eq!(MemberPolicy::parse("").unwrap(), MemberPolicy::default());
    }
}

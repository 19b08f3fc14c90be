//! What a workload asks for beyond an ordinary pod: the host (hostPath volumes, host
//! network/PID/IPC), privileged containers, pinfed's own ServiceAccounts, or being a
//! Daemon (one pod per node: infrastructure). The JSS admits such a workload only for a
//! team the team file grants it (`privileges:`); every finding names its field. Pure.

use serde_json::Value;

use super::workload::WorkloadKind;

/// A privilege a team must be granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Privilege {
    HostPath,
    Privileged,
    HostNetwork,
    HostPid,
    HostIpc,
    /// A ServiceAccount named `pinfed-*` (the hub's, the agent's, the JSS's identities).
    PinfedServiceAccount,
    /// Submitting a PinterestDaemon.
    Daemon,
    /// Any other setting Pod Security `baseline` forbids (extra capabilities, host ports,
    /// Unconfined seccomp or AppArmor, `procMount`, unsafe sysctls, SELinux types,
    /// `hostProcess`), or pinning pods to a node (`nodeName`).
    BeyondBaseline,
}

impl Privilege {
    pub const ALL: [Privilege; 8] = [
        Privilege::HostPath,
        Privilege::Privileged,
        Privilege::HostNetwork,
        Privilege::HostPid,
        Privilege::HostIpc,
        Privilege::PinfedServiceAccount,
        Privilege::Daemon,
        Privilege::BeyondBaseline,
    ];

    /// The name a team file grants it by.
    pub fn as_str(self) -> &'static str {
        match self {
            Privilege::HostPath => "hostPath",
            Privilege::Privileged => "privileged",
            Privilege::HostNetwork => "hostNetwork",
            Privilege::HostPid => "hostPID",
            Privilege::HostIpc => "hostIPC",
            Privilege::PinfedServiceAccount => "pinfedServiceAccount",
            Privilege::Daemon => "daemon",
            Privilege::BeyondBaseline => "beyondBaseline",
        }
    }

    pub fn parse(s: &str) -> Option<Privilege> {
        Privilege::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// One use of a privilege: which, and where (a field path of the workload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Use {
    pub privilege: Privilege,
    pub field: String,
}

/// Every privilege the workload (as JSON) uses, in field order.
pub fn uses(kind: WorkloadKind, workload: &Value) -> Vec<Use> {
    let mut out = Vec::new();
    if kind.runs_on_every_node() {
        out.push(Use {
            privilege: Privilege::Daemon,
            field: "kind".into(),
        });
    }
    walk(&workload["spec"], "spec", 0, &mut out);
    out
}

fn walk(v: &Value, path: &str, depth: usize, out: &mut Vec<Use>) {
    // Pod specs sit a few levels down; the bound keeps a hostile document cheap.
    if depth > 8 {
        return;
    }
    match v {
        Value::Object(m) if m.get("containers").is_some_and(Value::is_array) => {
            pod_spec(m, path, out);
        }
        Value::Object(m) => {
            for (k, child) in m {
                walk(child, &format!("{path}.{k}"), depth + 1, out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                walk(child, &format!("{path}[{i}]"), depth + 1, out);
            }
        }
        _ => {}
    }
}

fn pod_spec(spec: &serde_json::Map<String, Value>, path: &str, out: &mut Vec<Use>) {
    let mut add = |privilege, field: String| out.push(Use { privilege, field });
    for (key, privilege) in [
        ("hostNetwork", Privilege::HostNetwork),
        ("hostPID", Privilege::HostPid),
        ("hostIPC", Privilege::HostIpc),
    ] {
        if spec.get(key) == Some(&Value::Bool(true)) {
            add(privilege, format!("{path}.{key}"));
        }
    }
    for key in ["serviceAccountName", "serviceAccount"] {
        if let Some(sa) = spec.get(key).and_then(Value::as_str)
            && sa.starts_with("pinfed-")
        {
            add(Privilege::PinfedServiceAccount, format!("{path}.{key}"));
        }
    }
    for (i, v) in spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        if v.get("hostPath").is_some_and(|h| !h.is_null()) {
            add(Privilege::HostPath, format!("{path}.volumes[{i}].hostPath"));
        }
    }
    // What Pod Security baseline forbids beyond the named privileges above.
    let named = ["hostNamespaces", "hostPathVolumes", "privileged"];
    for f in super::pod_security::check(
        &Value::Object(spec.clone()),
        path,
        super::pod_security::Level::Baseline,
    ) {
        if !named.contains(&f.rule) {
            add(Privilege::BeyondBaseline, f.field);
        }
    }
    if spec
        .get("nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty())
    {
        add(Privilege::BeyondBaseline, format!("{path}.nodeName"));
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, c) in spec
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if c["securityContext"]["privileged"] == Value::Bool(true) {
                add(
                    Privilege::Privileged,
                    format!("{path}.{list}[{i}].securityContext.privileged"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_ordinary_pod_uses_no_privilege() {
        let w = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "a",
            "securityContext": {"privileged": false}}],
            "volumes": [{"name": "c", "configMap": {"name": "c"}}], "serviceAccountName": "app"}}}});
        assert!(uses(WorkloadKind::Service, &w).is_empty());
    }

    #[test]
    fn every_privilege_is_found_with_its_field() {
        let w = json!({"spec": {"template": {"spec": {
            "hostNetwork": true, "hostPID": true, "hostIPC": true,
            "serviceAccountName": "pinfed-agent",
            "volumes": [{"name": "ok", "emptyDir": {}}, {"name": "root", "hostPath": {"path": "/"}}],
            "initContainers": [{"name": "i", "image": "i", "securityContext": {"privileged": true}}],
            "containers": [{"name": "a", "image": "a"}]}}}});
        let found: Vec<(String, String)> = uses(WorkloadKind::Daemon, &w)
            .into_iter()
            .map(|u| (u.privilege.as_str().to_string(), u.field))
            .collect();
        let want = [
            ("daemon", "kind"),
            ("hostNetwork", "spec.template.spec.hostNetwork"),
            ("hostPID", "spec.template.spec.hostPID"),
            ("hostIPC", "spec.template.spec.hostIPC"),
            (
                "pinfedServiceAccount",
                "spec.template.spec.serviceAccountName",
            ),
            ("hostPath", "spec.template.spec.volumes[1].hostPath"),
            (
                "privileged",
                "spec.template.spec.initContainers[0].securityContext.privileged",
            ),
        ];
        assert_eq!(
            found,
            want.map(|(a, b)| (a.to_string(), b.to_string())).to_vec()
        );
    }

    #[test]
    fn training_roles_are_checked_too() {
        let w = json!({"spec": {"replicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {
            "containers": [{"name": "w", "image": "w", "securityContext": {"privileged": true}}]}}}}}});
        let u = uses(WorkloadKind::TrainingJob, &w);
        assert_eq!(u.len(), 1);
        assert_eq!(
            u[0].field,
            "spec.replicaSpecs.Worker.template.spec.containers[0].securityContext.privileged"
        );
    }

    #[test]
    fn what_baseline_forbids_beyond_the_named_privileges_needs_a_grant() {
        let w = json!({"spec": {"template": {"spec": {"nodeName": "n1",
            "containers": [{"name": "a", "image": "a", "ports": [{"containerPort": 80, "hostPort": 80}],
                "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]},
                    "seccompProfile": {"type": "Unconfined"}}}]}}}});
        let found: Vec<(Privilege, String)> = uses(WorkloadKind::Service, &w)
            .into_iter()
            .map(|u| (u.privilege, u.field))
            .collect();
        let f = |s: &str| (Privilege::BeyondBaseline, s.to_string());
        assert_eq!(
            found,
            vec![
                f("spec.template.spec.containers[0].ports[0].hostPort"),
                f("spec.template.spec.containers[0].securityContext.capabilities.add[0]"),
                f("spec.template.spec.containers[0].securityContext.seccompProfile.type"),
                f("spec.template.spec.nodeName"),
            ]
        );
    }

    #[test]
    fn grants_are_named() {
        for p in Privilege::ALL {
            assert_eq!(Privilege::parse(p.as_str()), Some(p));
        }
        assert_eq!(Privilege::parse("root"), None);
    }
}

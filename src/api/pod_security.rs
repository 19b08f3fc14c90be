//! The Pod Security Standards (`privileged`, `baseline`, `restricted`) as a pure check of
//! pod specs in JSON: the vocabulary a member's admins use to say what pinfed may run in
//! their cluster (`member_policy`). The rules follow the Kubernetes document of the same
//! name (the "latest" version); every finding names its field and the rule it breaks.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A Pod Security Standards level, from the most open to the most closed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Privileged,
    #[default]
    Baseline,
    Restricted,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One rule a pod spec breaks: the field (a path under the spec given) and the rule's
/// name as the standard calls it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub field: String,
    pub rule: &'static str,
    /// The lowest level that forbids it.
    pub level: Level,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}, not allowed at {})",
            self.field, self.rule, self.level
        )
    }
}

/// Capabilities `baseline` lets a container add (the runtime's default set).
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Sysctls `baseline` allows (namespaced and isolated from the node).
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// SELinux types `baseline` allows.
const SELINUX_TYPES: &[&str] = &[
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// Volume sources `restricted` allows.
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
    "image",
];

const CONTAINER_LISTS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];

/// Every rule of `level` that the pod template (`metadata` and `spec`) at `path` breaks,
/// in field order. `privileged` finds nothing.
pub fn check_template(template: &Value, path: &str, level: Level) -> Vec<Finding> {
    let mut out = Vec::new();
    if level == Level::Privileged {
        return out;
    }
    let prefix = if path.is_empty() {
        String::new()
    } else {
        format!("{path}.")
    };
    apparmor_annotations(template, &prefix, &mut out);
    out.extend(check(&template["spec"], &format!("{prefix}spec"), level));
    out
}

/// Every rule of `level` that the pod spec at `path` breaks, in field order. `privileged`
/// finds nothing.
pub fn check(spec: &Value, path: &str, level: Level) -> Vec<Finding> {
    let mut out = Vec::new();
    if level == Level::Privileged {
        return out;
    }
    let Some(spec) = spec.as_object() else {
        return out;
    };
    baseline(spec, path, &mut out);
    if level == Level::Restricted {
        restricted(spec, path, &mut out);
    }
    out
}

/// The AppArmor annotations of a template's metadata (the older form of the profile).
fn apparmor_annotations(template: &Value, prefix: &str, out: &mut Vec<Finding>) {
    let Some(annotations) = template
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
    else {
        return;
    };
    for (k, v) in annotations {
        let v = v.as_str().unwrap_or("");
        if k.starts_with("container.apparmor.security.beta.kubernetes.io/")
            && v != "runtime/default"
            && !v.starts_with("localhost/")
        {
            out.push(Finding {
                field: format!("{prefix}metadata.annotations[{k}]"),
                rule: "appArmorProfile",
                level: Level::Baseline,
            });
        }
    }
}

fn containers<'a>(
    spec: &'a Map<String, Value>,
    path: &'a str,
) -> impl Iterator<Item = (String, &'a Map<String, Value>)> + 'a {
    CONTAINER_LISTS.iter().flat_map(move |list| {
        spec.get(*list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .filter_map(move |(i, c)| c.as_object().map(|c| (format!("{path}.{list}[{i}]"), c)))
    })
}

fn is_true(v: Option<&Value>) -> bool {
    v == Some(&Value::Bool(true))
}

fn baseline(spec: &Map<String, Value>, path: &str, out: &mut Vec<Finding>) {
    let mut add = |field: String, rule: &'static str| {
        out.push(Finding {
            field,
            rule,
            level: Level::Baseline,
        })
    };
    let psc = spec.get("securityContext").and_then(Value::as_object);
    if psc.is_some_and(|s| is_true(s.pointer_get("windowsOptions", "hostProcess"))) {
        add(
            format!("{path}.securityContext.windowsOptions.hostProcess"),
            "hostProcess",
        );
    }
    for key in ["hostNetwork", "hostPID", "hostIPC"] {
        if is_true(spec.get(key)) {
            add(format!("{path}.{key}"), "hostNamespaces");
        }
    }
    for (i, v) in volumes(spec) {
        if v.get("hostPath").is_some_and(|h| !h.is_null()) {
            add(format!("{path}.volumes[{i}].hostPath"), "hostPathVolumes");
        }
    }
    if let Some(s) = psc {
        security_context_baseline(s, &format!("{path}.securityContext"), &mut add);
        for (i, sysctl) in s
            .get("sysctls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let name = sysctl.get("name").and_then(Value::as_str).unwrap_or("");
            if !SAFE_SYSCTLS.contains(&name) {
                add(
                    format!("{path}.securityContext.sysctls[{i}].name"),
                    "sysctls",
                );
            }
        }
    }
    for (cpath, c) in containers(spec, path) {
        if let Some(ports) = c.get("ports").and_then(Value::as_array) {
            for (i, p) in ports.iter().enumerate() {
                if p.get("hostPort").and_then(Value::as_i64).unwrap_or(0) != 0 {
                    add(format!("{cpath}.ports[{i}].hostPort"), "hostPorts");
                }
            }
        }
        let Some(s) = c.get("securityContext").and_then(Value::as_object) else {
            continue;
        };
        let spath = format!("{cpath}.securityContext");
        if is_true(s.get("privileged")) {
            add(format!("{spath}.privileged"), "privileged");
        }
        if is_true(s.pointer_get("windowsOptions", "hostProcess")) {
            add(format!("{spath}.windowsOptions.hostProcess"), "hostProcess");
        }
        for (i, cap) in s
            .get("capabilities")
            .and_then(|c| c.get("add"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let cap = cap.as_str().unwrap_or("");
            if !BASELINE_CAPABILITIES.contains(&cap.trim_start_matches("CAP_")) {
                add(format!("{spath}.capabilities.add[{i}]"), "capabilities");
            }
        }
        if s.get("procMount")
            .and_then(Value::as_str)
            .is_some_and(|m| m != "Default")
        {
            add(format!("{spath}.procMount"), "procMount");
        }
        security_context_baseline(s, &spath, &mut add);
    }
}

/// The rules a pod's and a container's security context share: seccomp, AppArmor,
/// SELinux.
fn security_context_baseline(
    s: &Map<String, Value>,
    spath: &str,
    add: &mut impl FnMut(String, &'static str),
) {
    if s.pointer_get("seccompProfile", "type")
        .and_then(Value::as_str)
        == Some("Unconfined")
    {
        add(format!("{spath}.seccompProfile.type"), "seccompProfile");
    }
    if s.pointer_get("appArmorProfile", "type")
        .and_then(Value::as_str)
        == Some("Unconfined")
    {
        add(format!("{spath}.appArmorProfile.type"), "appArmorProfile");
    }
    if let Some(se) = s.get("seLinuxOptions").and_then(Value::as_object) {
        if let Some(t) = se.get("type").and_then(Value::as_str)
            && !t.is_empty()
            && !SELINUX_TYPES.contains(&t)
        {
            add(format!("{spath}.seLinuxOptions.type"), "seLinuxOptions");
        }
        for key in ["user", "role"] {
            if se
                .get(key)
                .and_then(Value::as_str)
                .is_some_and(|v| !v.is_empty())
            {
                add(format!("{spath}.seLinuxOptions.{key}"), "seLinuxOptions");
            }
        }
    }
}

fn restricted(spec: &Map<String, Value>, path: &str, out: &mut Vec<Finding>) {
    let mut add = |field: String, rule: &'static str| {
        out.push(Finding {
            field,
            rule,
            level: Level::Restricted,
        })
    };
    for (i, v) in volumes(spec) {
        let allowed = v
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| *k != "name")
                    .all(|(k, _)| RESTRICTED_VOLUMES.contains(&k.as_str()))
            })
            .unwrap_or(true);
        if !allowed {
            add(format!("{path}.volumes[{i}]"), "volumeTypes");
        }
    }
    let psc = spec.get("securityContext").and_then(Value::as_object);
    let pod_non_root = psc.is_some_and(|s| is_true(s.get("runAsNonRoot")));
    let pod_seccomp = psc
        .and_then(|s| s.pointer_get("seccompProfile", "type"))
        .and_then(Value::as_str);
    if psc.and_then(|s| s.get("runAsUser")).and_then(Value::as_i64) == Some(0) {
        add(format!("{path}.securityContext.runAsUser"), "runAsUser");
    }
    // Ephemeral containers are exempt from none of these, but are never in a template.
    for (cpath, c) in containers(spec, path) {
        let s = c.get("securityContext").and_then(Value::as_object);
        let spath = format!("{cpath}.securityContext");
        if s.and_then(|s| s.get("allowPrivilegeEscalation")) != Some(&Value::Bool(false)) {
            add(
                format!("{spath}.allowPrivilegeEscalation"),
                "allowPrivilegeEscalation",
            );
        }
        let non_root = match s.and_then(|s| s.get("runAsNonRoot")) {
            Some(Value::Bool(b)) => *b,
            _ => pod_non_root,
        };
        if !non_root {
            add(format!("{spath}.runAsNonRoot"), "runAsNonRoot");
        }
        if s.and_then(|s| s.get("runAsUser")).and_then(Value::as_i64) == Some(0) {
            add(format!("{spath}.runAsUser"), "runAsUser");
        }
        let seccomp = s
            .and_then(|s| s.pointer_get("seccompProfile", "type"))
            .and_then(Value::as_str)
            .or(pod_seccomp);
        if !matches!(seccomp, Some("RuntimeDefault" | "Localhost")) {
            add(format!("{spath}.seccompProfile.type"), "seccompProfile");
        }
        let caps = s.and_then(|s| s.get("capabilities"));
        let drops_all = caps
            .and_then(|c| c.get("drop"))
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|c| c.as_str() == Some("ALL")));
        if !drops_all {
            add(format!("{spath}.capabilities.drop"), "capabilities");
        }
        for (i, cap) in caps
            .and_then(|c| c.get("add"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if cap.as_str().map(|c| c.trim_start_matches("CAP_")) != Some("NET_BIND_SERVICE") {
                add(format!("{spath}.capabilities.add[{i}]"), "capabilities");
            }
        }
    }
}

fn volumes(spec: &Map<String, Value>) -> impl Iterator<Item = (usize, &Value)> {
    spec.get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

/// `m[a][b]`, for the two-level lookups of security contexts.
trait PointerGet {
    fn pointer_get(&self, a: &str, b: &str) -> Option<&Value>;
}

impl PointerGet for Map<String, Value> {
    fn pointer_get(&self, a: &str, b: &str) -> Option<&Value> {
        self.get(a).and_then(|v| v.get(b))
    }
}

/// The pod templates in a generated native object of `kind` (its body as JSON, with or
/// without `apiVersion`, `kind` and `metadata`), each with its field path: Deployments,
/// StatefulSets, DaemonSets and Jobs at `spec.template`, CronJobs at
/// `spec.jobTemplate.spec.template`, a bare Pod at the top. Other kinds hold none.
pub fn pod_templates<'a>(kind: &str, body: &'a Value) -> Vec<(&'static str, &'a Value)> {
    let at = |p: &'static str, pointer: &str| body.pointer(pointer).map(|v| (p, v));
    match kind {
        "Deployment" | "StatefulSet" | "DaemonSet" | "Job" | "ReplicaSet" => {
            at("spec.template", "/spec/template").into_iter().collect()
        }
        "CronJob" => at(
            "spec.jobTemplate.spec.template",
            "/spec/jobTemplate/spec/template",
        )
        .into_iter()
        .collect(),
        "Pod" => vec![("", body)],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(spec: Value, level: Level) -> Vec<(String, &'static str)> {
        check(&spec, "spec", level)
            .into_iter()
            .map(|f| (f.field, f.rule))
            .collect()
    }

    /// `found` is `want`, in order: (field, rule) pairs.
    fn assert_rules(found: Vec<(String, &'static str)>, want: &[(&str, &'static str)]) {
        let want: Vec<_> = want.iter().map(|(f, r)| (f.to_string(), *r)).collect();
        assert_eq!(found, want);
    }

    fn restricted_pod() -> Value {
        json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [{"name": "c", "configMap": {"name": "c"}}],
            "containers": [{"name": "a", "image": "a", "securityContext": {
                "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}]})
    }

    #[test]
    fn an_ordinary_pod_meets_baseline_and_a_hardened_one_restricted() {
        let ordinary = json!({"containers": [{"name": "a", "image": "a",
            "ports": [{"containerPort": 80}],
            "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE", "CAP_CHOWN"]}}}],
            "volumes": [{"name": "e", "emptyDir": {}}]});
        assert_eq!(rules(ordinary.clone(), Level::Baseline), vec![]);
        assert!(!rules(ordinary, Level::Restricted).is_empty());
        assert_eq!(rules(restricted_pod(), Level::Restricted), vec![]);
    }

    #[test]
    fn every_baseline_rule_is_found_with_its_field() {
        let spec = json!({
            "hostNetwork": true, "hostPID": true, "hostIPC": true,
            "securityContext": {"seccompProfile": {"type": "Unconfined"},
                "sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}, {"name": "kernel.msgmax", "value": "1"}],
                "windowsOptions": {"hostProcess": true}},
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
            "containers": [{"name": "a", "image": "a", "ports": [{"containerPort": 80, "hostPort": 80}],
                "securityContext": {"privileged": true, "capabilities": {"add": ["SYS_ADMIN"]},
                    "procMount": "Unmasked", "appArmorProfile": {"type": "Unconfined"},
                    "seLinuxOptions": {"type": "spc_t", "user": "root"}}}]});
        let found = rules(spec, Level::Baseline);
        let want = [
            (
                "spec.securityContext.windowsOptions.hostProcess",
                "hostProcess",
            ),
            ("spec.hostNetwork", "hostNamespaces"),
            ("spec.hostPID", "hostNamespaces"),
            ("spec.hostIPC", "hostNamespaces"),
            ("spec.volumes[0].hostPath", "hostPathVolumes"),
            ("spec.securityContext.seccompProfile.type", "seccompProfile"),
            ("spec.securityContext.sysctls[1].name", "sysctls"),
            ("spec.containers[0].ports[0].hostPort", "hostPorts"),
            (
                "spec.containers[0].securityContext.privileged",
                "privileged",
            ),
            (
                "spec.containers[0].securityContext.capabilities.add[0]",
                "capabilities",
            ),
            ("spec.containers[0].securityContext.procMount", "procMount"),
            (
                "spec.containers[0].securityContext.appArmorProfile.type",
                "appArmorProfile",
            ),
            (
                "spec.containers[0].securityContext.seLinuxOptions.type",
                "seLinuxOptions",
            ),
            (
                "spec.containers[0].securityContext.seLinuxOptions.user",
                "seLinuxOptions",
            ),
        ];
        assert_rules(found, &want);
    }

    #[test]
    fn init_and_sidecar_containers_are_checked_like_the_rest() {
        let spec = json!({"initContainers": [{"name": "i", "image": "i", "securityContext": {"privileged": true}}],
            "containers": [{"name": "a", "image": "a"}]});
        assert_eq!(
            rules(spec, Level::Baseline),
            vec![(
                "spec.initContainers[0].securityContext.privileged".to_string(),
                "privileged"
            )]
        );
    }

    #[test]
    fn restricted_finds_what_baseline_allows() {
        let mut spec = restricted_pod();
        spec["securityContext"]["runAsNonRoot"] = json!(false);
        spec["volumes"][0] = json!({"name": "n", "nfs": {"server": "s", "path": "/"}});
        spec["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = json!(true);
        spec["containers"][0]["securityContext"]["capabilities"] = json!({"add": ["CHOWN"]});
        assert_eq!(rules(spec.clone(), Level::Baseline), vec![]);
        let found = rules(spec, Level::Restricted);
        let want = [
            ("spec.volumes[0]", "volumeTypes"),
            (
                "spec.containers[0].securityContext.allowPrivilegeEscalation",
                "allowPrivilegeEscalation",
            ),
            (
                "spec.containers[0].securityContext.runAsNonRoot",
                "runAsNonRoot",
            ),
            (
                "spec.containers[0].securityContext.capabilities.drop",
                "capabilities",
            ),
            (
                "spec.containers[0].securityContext.capabilities.add[0]",
                "capabilities",
            ),
        ];
        assert_rules(found, &want);
    }

    #[test]
    fn a_templates_apparmor_annotation_is_checked() {
        let t = json!({"metadata": {"annotations": {
            "container.apparmor.security.beta.kubernetes.io/a": "unconfined",
            "container.apparmor.security.beta.kubernetes.io/b": "runtime/default"}},
            "spec": {"containers": [{"name": "a", "image": "a"}]}});
        let found: Vec<String> = check_template(&t, "spec.template", Level::Baseline)
            .into_iter()
            .map(|f| f.field)
            .collect();
        assert_eq!(
            found,
            [
                "spec.template.metadata.annotations[container.apparmor.security.beta.kubernetes.io/a]"
            ]
        );
    }

    #[test]
    fn privileged_level_allows_everything() {
        let spec = json!({"hostPID": true, "containers": [{"name": "a", "image": "a",
            "securityContext": {"privileged": true}}]});
        assert!(check(&spec, "spec", Level::Privileged).is_empty());
    }

    #[test]
    fn templates_are_found_in_each_workload_kind() {
        let deploy = json!({"spec": {"template": {"spec": {"containers": []}}}});
        let cron = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}}});
        let cm = json!({"data": {}});
        assert_eq!(pod_templates("Deployment", &deploy)[0].0, "spec.template");
        assert_eq!(
            pod_templates("CronJob", &cron)[0].0,
            "spec.jobTemplate.spec.template"
        );
        assert!(pod_templates("ConfigMap", &cm).is_empty());
    }
}

//! Semantic validation of whole resources: what the schema cannot say. Pure; every error
//! names the field it is about (`spec.replicaSpecs.Worker.replicas`).

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, PersistentVolumeClaim, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::common::{
    ClusterToleration, LabelSelector, Owner, Placement, SelectorOperator, TolerationOperator,
};
use super::cronjob::PinterestCronJob;
use super::daemon::{DaemonUpdateType, PinterestDaemon};
use super::federation::{FederatedQuota, MemberCluster, ResourceAmounts};
use super::jobset::PinterestJobSet;
use super::quantity::Milli;
use super::ranges::RangeSet;
use super::runtime_profile::RuntimeProfile;
use super::service::PinterestService;
use super::statefulset::PinterestStatefulSet;
use super::training::{Framework, PinterestTrainingJob};
use super::validation::{is_dns_label, is_dns_subdomain, is_label_value, is_qualified_name};
use super::workload::{WorkloadKind, WorkloadRef};

/// One problem with one field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the field, e.g. `spec.template.spec.containers[0].image`.
    pub field: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Every problem found in a resource (never empty).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct Invalid {
    pub errors: Vec<FieldError>,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl Invalid {
    pub fn one(field: impl Into<String>, message: impl Into<String>) -> Invalid {
        Invalid {
            errors: vec![FieldError {
                field: field.into(),
                message: message.into(),
            }],
        }
    }

    /// The first error's field, e.g. for an Event or condition message.
    pub fn first_field(&self) -> &str {
        self.errors.first().map(|e| e.field.as_str()).unwrap_or("")
    }
}

/// `check!(errors, condition, field, message)`: records an error when the condition is
/// false. A macro so the field path and message are only formatted on failure (validation
/// runs on every expansion).
macro_rules! check {
    ($e:expr, $ok:expr, $field:expr, $msg:expr $(,)?) => {
        if !$ok {
            $e.add($field, $msg);
        }
    };
}

/// Collects field errors.
#[derive(Default)]
pub(crate) struct Errors(Vec<FieldError>);

impl Errors {
    pub(crate) fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            message: message.into(),
        });
    }

    pub(crate) fn finish(self) -> Result<(), Invalid> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(Invalid { errors: self.0 })
        }
    }
}

/// Validates a workload of any kind.
pub fn workload(w: WorkloadRef<'_>) -> Result<(), Invalid> {
    let own = w.validate_kind();
    let overrides = if w.overrides().is_empty() {
        Ok(())
    } else {
        crate::overrides::check_static(w.overrides(), w.kind())
    };
    match (own, overrides) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
        (Err(mut a), Err(b)) => {
            a.errors.extend(b.errors);
            Err(a)
        }
    }
}

/// Namespaces no workload may run in: pinfed's own (member credentials live in
/// `pinfed-system`, config copies in `pinfed-drop`, a pull member's slices and bundles in
/// `pinfed-member-*` on the hub) and Kubernetes' (`kube-*`).
pub fn is_reserved_namespace(ns: &str) -> bool {
    ns == "pinfed-system"
        || ns == "pinfed-drop"
        || ns.starts_with("pinfed-member-")
        || ns.starts_with("kube-")
}

fn common(e: &mut Errors, w: WorkloadRef<'_>) {
    metadata(e, w.metadata(), true);
    if let Some(ns) = w.metadata().namespace.as_deref() {
        check!(
            e,
            !is_reserved_namespace(ns),
            "metadata.namespace",
            format!(
                "{ns:?} is reserved (pinfed-system, pinfed-drop, pinfed-member-* and kube-* run no workloads)"
            ),
        );
    }
    owner(e, w.owner());
    if let Some(v) = w.runtime_version() {
        check!(
            e,
            !v.trim().is_empty(),
            "spec.runtimeVersion",
            "must not be empty when set",
        );
        if let Some((version, digest)) = v.split_once('@') {
            check!(
                e,
                !version.trim().is_empty()
                    && crate::api::runtime_profile::is_profile_digest(digest),
                "spec.runtimeVersion",
                "a pin of a profile's exact content is VERSION@DIGEST, the digest 16 lowercase hex characters (as `pinfed rollout history` shows it)",
            );
        }
    }
    placement(e, w.placement(), w.kind());
    if let Some(r) = w.rollout() {
        let mut found = Vec::new();
        super::rollout::check_policy(r, &mut found);
        for (f, m) in found {
            e.add(f, m);
        }
        for (i, stage) in r.stages.iter().enumerate() {
            if let Some(sel) = &stage.cluster_selector {
                selector(e, sel, &format!("spec.rollout.stages[{i}].clusterSelector"));
            }
        }
    }
}

fn metadata(e: &mut Errors, m: &ObjectMeta, namespaced: bool) {
    match m.name.as_deref() {
        None | Some("") => e.add("metadata.name", "is required"),
        Some(n) => check!(
            e,
            is_dns_subdomain(n),
            "metadata.name",
            format!(
                "{n:?} is not a valid name (lower-case alphanumerics, '-' and '.', at most 253 characters)"
            ),
        ),
    }
    if let Some(ns) = m.namespace.as_deref() {
        check!(
            e,
            namespaced && is_dns_label(ns),
            "metadata.namespace",
            if namespaced {
                format!("{ns:?} is not a valid namespace name")
            } else {
                "must not be set on a cluster-scoped resource".to_string()
            },
        );
    }
}

fn owner(e: &mut Errors, o: &Owner) {
    check!(
        e,
        o.team.chars().any(|c| c.is_ascii_alphanumeric()),
        "spec.owner.team",
        "must contain at least one letter or digit (it becomes a label value)",
    );
    check!(
        e,
        !o.contact.trim().is_empty(),
        "spec.owner.contact",
        "is required",
    );
}

fn placement(e: &mut Errors, p: &Placement, kind: WorkloadKind) {
    if let Some(s) = p.strategy {
        check!(
            e,
            kind.allowed_strategies().contains(&s),
            "spec.placement.strategy",
            format!(
                "{s:?} is not supported for {kind}; use {}",
                kind.allowed_strategies()
                    .iter()
                    .map(|s| format!("{s:?}"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
        );
    }
    if let Some(sel) = &p.cluster_selector {
        selector(e, sel, "spec.placement.clusterSelector");
    }
    if let Some(a) = &p.cluster_affinity {
        for (i, c) in a.cluster_names.iter().enumerate() {
            check!(
                e,
                is_dns_label(c),
                format!("spec.placement.clusterAffinity.clusterNames[{i}]"),
                format!("{c:?} is not a valid cluster name"),
            );
        }
        for (i, z) in a.zones.iter().enumerate() {
            check!(
                e,
                is_label_value(z) && !z.is_empty(),
                format!("spec.placement.clusterAffinity.zones[{i}]"),
                format!("{z:?} is not a valid zone"),
            );
        }
    }
    for (i, t) in p.tolerations.iter().enumerate() {
        toleration(e, t, &format!("spec.placement.tolerations[{i}]"));
    }
    for (c, w) in &p.weights {
        let f = format!("spec.placement.weights.{c}");
        check!(
            e,
            is_dns_label(c),
            &f,
            format!("{c:?} is not a valid cluster name"),
        );
        check!(e, *w >= 0, &f, "must be at least 0");
    }
    if let (Some(min), Some(max)) = (p.min_per_cluster, p.max_per_cluster) {
        check!(
            e,
            min <= max,
            "spec.placement.minPerCluster",
            format!("{min} is greater than maxPerCluster {max}"),
        );
    }
    for (f, v) in [
        ("spec.placement.minPerCluster", p.min_per_cluster),
        ("spec.placement.maxPerCluster", p.max_per_cluster),
    ] {
        if let Some(v) = v {
            check!(e, v >= 0, f, "must be at least 0");
        }
    }
    for (c, l) in &p.cluster_limits {
        let f = format!("spec.placement.clusterLimits.{c}");
        check!(
            e,
            is_dns_label(c),
            &f,
            format!("{c:?} is not a valid cluster name"),
        );
        if let Some(min) = l.min {
            check!(e, min >= 0, format!("{f}.min"), "must be at least 0");
        }
        if let Some(max) = l.max {
            check!(e, max >= 0, format!("{f}.max"), "must be at least 0");
        }
        if let (Some(min), Some(max)) = (l.min, l.max) {
            check!(
                e,
                min <= max,
                format!("{f}.min"),
                format!("{min} is greater than max {max}"),
            );
        }
    }
    if let Some(s) = &p.spread {
        for (f, v) in [
            ("spec.placement.spread.minClusters", s.min_clusters),
            ("spec.placement.spread.minZones", s.min_zones),
        ] {
            if let Some(v) = v {
                check!(e, v >= 1, f, "must be at least 1");
            }
        }
    }
    if let Some(f) = &p.failover
        && let Some(g) = f.grace_period_seconds
    {
        check!(
            e,
            g >= 0,
            "spec.placement.failover.gracePeriodSeconds",
            "must be at least 0",
        );
    }
    if let Some(a) = p.failover.as_ref().and_then(|f| f.application.as_ref()) {
        // A share of replicas, or a job set's unfinished shards, can move; a cron job's
        // runs, a daemon (every member) and a training gang (all or nothing) cannot be
        // partly moved.
        check!(
            e,
            kind.moves_in_part(),
            "spec.placement.failover.application",
            format!(
                "application failover moves a share of replicas or a job set's unfinished shards: PinterestService, PinterestStatefulSet and PinterestJobSet only, not {kind}"
            ),
        );
        if let Some(t) = a.toleration_seconds {
            check!(
                e,
                t >= 10,
                "spec.placement.failover.application.tolerationSeconds",
                "must be at least 10",
            );
        }
    }
}

pub(crate) fn selector(e: &mut Errors, s: &LabelSelector, path: &str) {
    for (k, v) in &s.match_labels {
        check!(
            e,
            is_qualified_name(k),
            format!("{path}.matchLabels"),
            format!("{k:?} is not a valid label key"),
        );
        check!(
            e,
            is_label_value(v),
            format!("{path}.matchLabels.{k}"),
            format!("{v:?} is not a valid label value"),
        );
    }
    for (i, r) in s.match_expressions.iter().enumerate() {
        let f = format!("{path}.matchExpressions[{i}]");
        check!(
            e,
            is_qualified_name(&r.key),
            format!("{f}.key"),
            format!("{:?} is not a valid label key", r.key),
        );
        match r.operator {
            SelectorOperator::In | SelectorOperator::NotIn => check!(
                e,
                !r.values.is_empty(),
                format!("{f}.values"),
                "must not be empty for In and NotIn",
            ),
            SelectorOperator::Exists | SelectorOperator::DoesNotExist => check!(
                e,
                r.values.is_empty(),
                format!("{f}.values"),
                "must be empty for Exists and DoesNotExist",
            ),
        }
    }
}

fn toleration(e: &mut Errors, t: &ClusterToleration, f: &str) {
    if !t.key.is_empty() {
        check!(
            e,
            is_qualified_name(&t.key),
            format!("{f}.key"),
            format!("{:?} is not a valid taint key", t.key),
        );
    }
    match t.operator {
        TolerationOperator::Exists => check!(
            e,
            t.value.is_empty(),
            format!("{f}.value"),
            "must be empty with operator Exists",
        ),
        TolerationOperator::Equal => check!(
            e,
            !t.key.is_empty(),
            format!("{f}.key"),
            "is required with operator Equal",
        ),
    }
}

/// Checks a pod template: containers present, names valid and unique, images set, ports
/// in range. `restart_policies` lists the pod restartPolicy values the kind accepts.
pub(crate) fn pod_template(
    e: &mut Errors,
    t: &PodTemplateSpec,
    path: &str,
    restart_policies: &[&str],
) {
    let Some(spec) = &t.spec else {
        e.add(
            format!("{path}.spec"),
            "is required (with at least one container)",
        );
        return;
    };
    check!(
        e,
        !spec.containers.is_empty(),
        format!("{path}.spec.containers"),
        "must have at least one container",
    );
    let mut names = BTreeSet::new();
    let init = spec.init_containers.as_deref().unwrap_or_default();
    for (list, containers) in [
        ("initContainers", init),
        ("containers", &spec.containers[..]),
    ] {
        for (i, c) in containers.iter().enumerate() {
            container(e, c, &format!("{path}.spec.{list}[{i}]"), &mut names);
        }
    }
    if let Some(p) = spec.restart_policy.as_deref() {
        check!(
            e,
            restart_policies.contains(&p),
            format!("{path}.spec.restartPolicy"),
            format!(
                "{p:?} is not allowed here; use {}",
                restart_policies.join(" or ")
            ),
        );
    }
    volume_names(
        e,
        spec.volumes.iter().flatten().map(|v| &v.name),
        &format!("{path}.spec.volumes"),
    );
}

/// Checks each volume's name (a DNS label, and once only) and returns the names.
fn volume_names<'a>(
    e: &mut Errors,
    names: impl Iterator<Item = &'a String>,
    path: &str,
) -> BTreeSet<String> {
    let mut volumes = BTreeSet::new();
    for (i, name) in names.enumerate() {
        let f = format!("{path}[{i}].name");
        check!(
            e,
            is_dns_label(name),
            &f,
            format!("{name:?} is not a valid volume name"),
        );
        check!(
            e,
            volumes.insert(name.clone()),
            &f,
            format!("duplicate volume {name:?}"),
        );
    }
    volumes
}

fn container(e: &mut Errors, c: &Container, f: &str, names: &mut BTreeSet<String>) {
    check!(
        e,
        is_dns_label(&c.name),
        format!("{f}.name"),
        format!("{:?} is not a valid container name (a DNS label)", c.name),
    );
    check!(
        e,
        names.insert(c.name.clone()),
        format!("{f}.name"),
        format!("duplicate container name {:?}", c.name),
    );
    check!(
        e,
        c.image.as_deref().is_some_and(|i| !i.trim().is_empty()),
        format!("{f}.image"),
        "is required",
    );
    for (i, p) in c.ports.iter().flatten().enumerate() {
        check!(
            e,
            (1..=65535).contains(&p.container_port),
            format!("{f}.ports[{i}].containerPort"),
            format!("{} is not a port number (1-65535)", p.container_port),
        );
    }
    for (i, v) in c.env.iter().flatten().enumerate() {
        check!(
            e,
            !v.name.is_empty(),
            format!("{f}.env[{i}].name"),
            "is required",
        );
    }
}

fn claim_templates(e: &mut Errors, claims: &[PersistentVolumeClaim], path: &str) {
    let mut seen = BTreeSet::new();
    for (i, c) in claims.iter().enumerate() {
        let f = format!("{path}[{i}].metadata.name");
        match c.metadata.name.as_deref() {
            Some(n) if is_dns_label(n) => check!(
                e,
                seen.insert(n.to_string()),
                &f,
                format!("duplicate claim template {n:?}"),
            ),
            Some(n) => e.add(&f, format!("{n:?} is not a valid name (a DNS label)")),
            None => e.add(&f, "is required"),
        }
    }
}

fn int_or_percent(e: &mut Errors, v: &IntOrString, f: &str) {
    match v {
        IntOrString::Int(i) => check!(e, *i >= 0, f, "must be at least 0"),
        IntOrString::String(s) => {
            let ok = s
                .strip_suffix('%')
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|n| n <= 100);
            check!(
                e,
                ok,
                f,
                format!("{s:?} is neither a number nor a percentage like \"25%\""),
            );
        }
    }
}

fn config_key_ok(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 253
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && k != "."
        && k != ".."
}

/// Ports a PinterestService exposes: `spec.service.ports`, or else the containers' ports.
pub fn service_has_ports(s: &PinterestService) -> bool {
    s.spec.service.as_ref().is_some_and(|x| !x.ports.is_empty())
        || s.spec
            .template
            .spec
            .iter()
            .flat_map(|p| &p.containers)
            .any(|c| c.ports.as_ref().is_some_and(|p| !p.is_empty()))
}

pub fn service(s: &PinterestService) -> Result<(), Invalid> {
    let mut e = Errors::default();
    common(&mut e, (s).into());
    let spec = &s.spec;
    check!(e, spec.replicas >= 0, "spec.replicas", "must be at least 0");
    pod_template(&mut e, &spec.template, "spec.template", &["Always"]);
    if let Some(svc) = &spec.service {
        let mut names = BTreeSet::new();
        for (i, p) in svc.ports.iter().enumerate() {
            let f = format!("spec.service.ports[{i}]");
            check!(
                e,
                (1..=65535).contains(&p.port),
                format!("{f}.port"),
                format!("{} is not a port number (1-65535)", p.port),
            );
            match &p.name {
                Some(n) => {
                    check!(
                        e,
                        is_dns_label(n),
                        format!("{f}.name"),
                        format!("{n:?} is not a valid port name"),
                    );
                    check!(
                        e,
                        names.insert(n.clone()),
                        format!("{f}.name"),
                        format!("duplicate port name {n:?}"),
                    );
                }
                None => check!(
                    e,
                    svc.ports.len() == 1,
                    format!("{f}.name"),
                    "is required when there is more than one port",
                ),
            }
            if let Some(proto) = p.protocol.as_deref() {
                check!(
                    e,
                    matches!(proto, "TCP" | "UDP" | "SCTP"),
                    format!("{f}.protocol"),
                    format!("{proto:?} is not TCP, UDP or SCTP"),
                );
            }
            match &p.target_port {
                Some(IntOrString::Int(t)) => check!(
                    e,
                    (1..=65535).contains(t),
                    format!("{f}.targetPort"),
                    format!("{t} is not a port number (1-65535)"),
                ),
                Some(IntOrString::String(t)) => check!(
                    e,
                    is_dns_label(t) && t.len() <= 15,
                    format!("{f}.targetPort"),
                    format!("{t:?} is not a container port name"),
                ),
                None => {}
            }
        }
    }
    if let Some(ing) = &spec.ingress {
        if let Some(h) = ing.host.as_deref() {
            // A wildcard would answer for every other team's host under it.
            check!(
                e,
                is_dns_subdomain(h) && h.contains('.'),
                "spec.ingress.host",
                format!("{h:?} is not a host name (one fully qualified name, no wildcard)"),
            );
            // The default hosts are unique by construction; naming one would take it.
            check!(
                e,
                !super::ingress_host::in_default_domain(h),
                "spec.ingress.host",
                format!(
                    "{h:?} is in the platform's default domain ({}); leave the host unset for the default name",
                    super::ingress_host::DEFAULT_DOMAIN
                ),
            );
        }
        if let Some(p) = ing.path.as_deref() {
            check!(
                e,
                p.starts_with('/'),
                "spec.ingress.path",
                format!("{p:?} must start with '/'"),
            );
        }
        check!(
            e,
            service_has_ports(s),
            "spec.ingress",
            "needs a port: set spec.service.ports or declare a containerPort",
        );
    }
    for k in spec.config.keys() {
        check!(
            e,
            config_key_ok(k),
            format!("spec.config.{k}"),
            "is not a valid file name (alphanumerics, '-', '_' and '.')",
        );
    }
    if let Some(v) = spec
        .disruption
        .as_ref()
        .and_then(|d| d.max_unavailable.as_ref())
    {
        int_or_percent(&mut e, v, "spec.disruption.maxUnavailable");
    }
    e.finish()
}

/// Parses `spec.assignedShards` (absent = all) and `status.completedShards` of a JobSet.
pub fn jobset_shards(j: &PinterestJobSet) -> Result<(RangeSet, RangeSet), Invalid> {
    let mut e = Errors::default();
    let n = u32::try_from(j.spec.shards).unwrap_or(0);
    let assigned = match j.spec.assigned_shards.as_deref() {
        None => RangeSet::full(n),
        Some(s) => RangeSet::parse_within(s, n).unwrap_or_else(|err| {
            e.add("spec.assignedShards", err.to_string());
            RangeSet::new()
        }),
    };
    let completed = match j
        .status
        .as_ref()
        .and_then(|s| s.completed_shards.as_deref())
    {
        None => RangeSet::new(),
        Some(s) => RangeSet::parse_within(s, n).unwrap_or_else(|err| {
            e.add("status.completedShards", err.to_string());
            RangeSet::new()
        }),
    };
    e.finish().map(|()| (assigned, completed))
}

pub fn jobset(j: &PinterestJobSet) -> Result<(), Invalid> {
    let mut e = Errors::default();
    common(&mut e, j.into());
    let spec = &j.spec;
    check!(e, spec.shards >= 1, "spec.shards", "must be at least 1");
    check!(
        e,
        spec.shards <= super::jobset::MAX_SHARDS,
        "spec.shards",
        format!("must be at most {}", super::jobset::MAX_SHARDS),
    );
    if let Some(p) = spec.parallelism {
        check!(e, p >= 1, "spec.parallelism", "must be at least 1");
    }
    if let Some(b) = spec.backoff_limit_per_shard {
        check!(e, b >= 0, "spec.backoffLimitPerShard", "must be at least 0");
    }
    if let Some(t) = spec.ttl_seconds_after_finished {
        check!(
            e,
            t >= 0,
            "spec.ttlSecondsAfterFinished",
            "must be at least 0"
        );
    }
    if (1..=super::jobset::MAX_SHARDS).contains(&spec.shards)
        && let Err(inv) = jobset_shards(j)
    {
        e.0.extend(inv.errors);
    }
    pod_template(
        &mut e,
        &spec.template,
        "spec.template",
        &["Never", "OnFailure"],
    );
    let mut names = BTreeSet::new();
    for (i, t) in spec.config_templates.iter().enumerate() {
        let f = format!("spec.configTemplates[{i}]");
        check!(
            e,
            is_dns_label(&t.name),
            format!("{f}.name"),
            format!("{:?} is not a valid name (a DNS label)", t.name),
        );
        check!(
            e,
            names.insert(t.name.clone()),
            format!("{f}.name"),
            format!("duplicate config template {:?}", t.name),
        );
        for k in t.data.keys() {
            check!(
                e,
                config_key_ok(k),
                format!("{f}.data.{k}"),
                "is not a valid ConfigMap key",
            );
        }
    }
    claim_templates(
        &mut e,
        &spec.volume_claim_templates,
        "spec.volumeClaimTemplates",
    );
    e.finish()
}

pub fn cronjob(c: &PinterestCronJob) -> Result<(), Invalid> {
    let mut e = Errors::default();
    common(&mut e, c.into());
    let spec = &c.spec;
    if let Err(why) = check_schedule(&spec.schedule) {
        e.add("spec.schedule", why);
    }
    if let Some(tz) = spec.time_zone.as_deref() {
        let ok = !tz.is_empty()
            && tz.split('/').all(|p| {
                !p.is_empty()
                    && p.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'+'))
            });
        check!(
            e,
            ok,
            "spec.timeZone",
            format!("{tz:?} is not an IANA time zone name"),
        );
    }
    for (f, v) in [
        (
            "spec.startingDeadlineSeconds",
            spec.starting_deadline_seconds,
        ),
        (
            "spec.successfulJobsHistoryLimit",
            spec.successful_jobs_history_limit.map(i64::from),
        ),
        (
            "spec.failedJobsHistoryLimit",
            spec.failed_jobs_history_limit.map(i64::from),
        ),
        ("spec.backoffLimit", spec.backoff_limit.map(i64::from)),
    ] {
        if let Some(v) = v {
            check!(e, v >= 0, f, "must be at least 0");
        }
    }
    pod_template(
        &mut e,
        &spec.template,
        "spec.template",
        &["Never", "OnFailure"],
    );
    e.finish()
}

/// Checks a cron schedule: five fields or a descriptor (`@hourly`, `@every 5m`).
fn check_schedule(s: &str) -> Result<(), String> {
    if s.starts_with("TZ=") || s.starts_with("CRON_TZ=") {
        return Err("time zones in the schedule are not supported; use spec.timeZone".into());
    }
    if let Some(d) = s.strip_prefix('@') {
        return match d {
            "yearly" | "annually" | "monthly" | "weekly" | "daily" | "midnight" | "hourly" => {
                Ok(())
            }
            d if d.starts_with("every ") => Ok(()),
            _ => Err(format!(
                "{s:?} is not a known descriptor (@hourly, @daily, ...)"
            )),
        };
    }
    let fields: Vec<&str> = s.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "{s:?} has {} fields; a schedule has 5 (minute hour day-of-month month day-of-week)",
            fields.len()
        ));
    }
    for f in fields {
        if !f
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'*' | b',' | b'-' | b'/' | b'?'))
        {
            return Err(format!(
                "field {f:?} has characters a cron field cannot have"
            ));
        }
    }
    Ok(())
}

pub fn daemon(d: &PinterestDaemon) -> Result<(), Invalid> {
    let mut e = Errors::default();
    common(&mut e, d.into());
    pod_template(&mut e, &d.spec.template, "spec.template", &["Always"]);
    if let Some(u) = &d.spec.update_strategy
        && let Some(r) = &u.rolling_update
    {
        check!(
            e,
            u.type_ != Some(DaemonUpdateType::OnDelete),
            "spec.updateStrategy.rollingUpdate",
            "may only be set with type RollingUpdate",
        );
        if let Some(v) = &r.max_unavailable {
            int_or_percent(
                &mut e,
                v,
                "spec.updateStrategy.rollingUpdate.maxUnavailable",
            );
        }
        if let Some(v) = &r.max_surge {
            int_or_percent(&mut e, v, "spec.updateStrategy.rollingUpdate.maxSurge");
        }
    }
    e.finish()
}

pub fn training_job(t: &PinterestTrainingJob) -> Result<(), Invalid> {
    let mut e = Errors::default();
    common(&mut e, t.into());
    let spec = &t.spec;
    let roles = spec.framework.roles();
    check!(
        e,
        !spec.replica_specs.is_empty(),
        "spec.replicaSpecs",
        "must name at least one role",
    );
    for (role, r) in &spec.replica_specs {
        let f = format!("spec.replicaSpecs.{role}");
        if !roles.contains(&role.as_str()) {
            e.add(
                &f,
                format!(
                    "unknown role for {}; expected {}",
                    spec.framework.as_str(),
                    roles.join(", ")
                ),
            );
            continue;
        }
        check!(
            e,
            r.replicas >= 0,
            format!("{f}.replicas"),
            "must be at least 0",
        );
        // The CRD's maximum, enforced here too: the JSS and `pinfed expand` read
        // resources the API server has not seen.
        check!(
            e,
            r.replicas <= super::training::MAX_REPLICAS_PER_ROLE,
            format!("{f}.replicas"),
            format!("must be at most {}", super::training::MAX_REPLICAS_PER_ROLE),
        );
        pod_template(
            &mut e,
            &r.template,
            &format!("{f}.template"),
            &["Never", "OnFailure"],
        );
    }
    let replicas = |role: &str| spec.replica_specs.get(role).map(|r| r.replicas);
    match spec.framework {
        Framework::PyTorch => match replicas("Master") {
            Some(1) => {}
            Some(n) => e.add(
                "spec.replicaSpecs.Master.replicas",
                format!("must be 1 (there is one master, rank 0), not {n}"),
            ),
            None => e.add(
                "spec.replicaSpecs.Master",
                "is required for pytorch (rank 0)",
            ),
        },
        Framework::TensorFlow => {
            for role in ["Chief", "Evaluator"] {
                if let Some(n) = replicas(role) {
                    check!(
                        e,
                        n <= 1,
                        format!("spec.replicaSpecs.{role}.replicas"),
                        format!("must be 0 or 1, not {n}"),
                    );
                }
            }
        }
    }
    let total: i64 = spec
        .replica_specs
        .values()
        .map(|r| i64::from(r.replicas.max(0)))
        .sum();
    check!(
        e,
        total >= 1,
        "spec.replicaSpecs",
        "must have at least one replica in total",
    );
    for (f, v) in [
        ("spec.backoffLimit", spec.backoff_limit),
        (
            "spec.ttlSecondsAfterFinished",
            spec.ttl_seconds_after_finished,
        ),
    ] {
        if let Some(v) = v {
            check!(e, v >= 0, f, "must be at least 0");
        }
    }
    e.finish()
}

pub fn statefulset(s: &PinterestStatefulSet) -> Result<(), Invalid> {
    let mut e = Errors::default();
    common(&mut e, s.into());
    check!(
        e,
        s.spec.replicas >= 0,
        "spec.replicas",
        "must be at least 0"
    );
    pod_template(&mut e, &s.spec.template, "spec.template", &["Always"]);
    claim_templates(
        &mut e,
        &s.spec.volume_claim_templates,
        "spec.volumeClaimTemplates",
    );
    if let Some(v) = s
        .spec
        .disruption
        .as_ref()
        .and_then(|d| d.max_unavailable.as_ref())
    {
        int_or_percent(&mut e, v, "spec.disruption.maxUnavailable");
    }
    e.finish()
}

pub fn runtime_profile(p: &RuntimeProfile) -> Result<(), Invalid> {
    let mut e = Errors::default();
    metadata(&mut e, &p.metadata, false);
    let spec = &p.spec;
    check!(
        e,
        !spec.version.trim().is_empty(),
        "spec.version",
        "is required",
    );
    let mut names = BTreeSet::new();
    for (i, c) in spec.init_containers.iter().enumerate() {
        container(&mut e, c, &format!("spec.initContainers[{i}]"), &mut names);
    }
    for (i, s) in spec.sidecars.iter().enumerate() {
        container(
            &mut e,
            &s.container,
            &format!("spec.sidecars[{i}].container"),
            &mut names,
        );
    }
    let volumes = volume_names(&mut e, spec.volumes.iter().map(|v| &v.name), "spec.volumes");
    for (i, m) in spec.volume_mounts.iter().enumerate() {
        check!(
            e,
            volumes.contains(&m.name),
            format!("spec.volumeMounts[{i}].name"),
            format!("{:?} is not one of spec.volumes", m.name),
        );
        check!(
            e,
            m.mount_path.starts_with('/'),
            format!("spec.volumeMounts[{i}].mountPath"),
            "must be an absolute path",
        );
    }
    for (i, v) in spec.env.iter().enumerate() {
        check!(
            e,
            !v.name.is_empty(),
            format!("spec.env[{i}].name"),
            "is required",
        );
    }
    if let Some(d) = &spec.default_resources {
        for (kind, map) in [("requests", &d.requests), ("limits", &d.limits)] {
            for (k, q) in map {
                if let Err(err) = Milli::parse(&q.0) {
                    e.add(format!("spec.defaultResources.{kind}.{k}"), err.to_string());
                }
            }
        }
    }
    e.finish()
}

fn amounts(e: &mut Errors, a: &ResourceAmounts, path: &str) {
    for (k, q) in [
        ("cpu", &a.cpu),
        ("memory", &a.memory),
        ("pods", &a.pods),
        ("gpus", &a.gpus),
    ] {
        if let Some(q) = q {
            match Milli::parse(&q.0) {
                Ok(m) => check!(e, m.0 >= 0, format!("{path}.{k}"), "must not be negative"),
                Err(err) => e.add(format!("{path}.{k}"), err.to_string()),
            }
        }
    }
}

pub fn member_cluster(m: &MemberCluster) -> Result<(), Invalid> {
    let mut e = Errors::default();
    metadata(&mut e, &m.metadata, false);
    if let Some(n) = m.metadata.name.as_deref() {
        check!(
            e,
            is_dns_label(n),
            "metadata.name",
            format!("{n:?} is not a valid cluster name (a DNS label)"),
        );
    }
    let spec = &m.spec;
    if spec.mode.unwrap_or_default() == super::federation::ClusterMode::Push {
        check!(
            e,
            spec.secret_ref.is_some(),
            "spec.secretRef",
            "is required in Push mode",
        );
    }
    for (k, v) in &spec.labels {
        check!(
            e,
            is_qualified_name(k),
            "spec.labels",
            format!("{k:?} is not a valid label key"),
        );
        check!(
            e,
            is_label_value(v),
            format!("spec.labels.{k}"),
            format!("{v:?} is not a valid label value"),
        );
    }
    for (i, t) in spec.taints.iter().enumerate() {
        check!(
            e,
            is_qualified_name(&t.key),
            format!("spec.taints[{i}].key"),
            format!("{:?} is not a valid taint key", t.key),
        );
        check!(
            e,
            is_label_value(&t.value),
            format!("spec.taints[{i}].value"),
            format!("{:?} is not a valid taint value", t.value),
        );
    }
    if let Some(w) = spec.weight {
        check!(e, w >= 0, "spec.weight", "must be at least 0");
    }
    e.finish()
}

pub fn federated_quota(q: &FederatedQuota) -> Result<(), Invalid> {
    let mut e = Errors::default();
    metadata(&mut e, &q.metadata, true);
    amounts(&mut e, &q.spec.hard, "spec.hard");
    for (c, a) in &q.spec.per_cluster {
        check!(
            e,
            is_dns_label(c),
            "spec.perCluster",
            format!("{c:?} is not a valid cluster name"),
        );
        amounts(&mut e, a, &format!("spec.perCluster.{c}"));
    }
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules() {
        for ok in [
            "*/5 * * * *",
            "0 3 * * MON-FRI",
            "@hourly",
            "@every 5m",
            "0 0 1 1 ?",
        ] {
            assert!(check_schedule(ok).is_ok(), "{ok}");
        }
        for bad in [
            "* * * *",
            "TZ=UTC 0 * * * *",
            "@sometimes",
            "0 0 * * * *",
            "0 0 * * ;",
        ] {
            assert!(check_schedule(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn percentages() {
        let mut e = Errors::default();
        int_or_percent(&mut e, &IntOrString::String("25%".into()), "a");
        int_or_percent(&mut e, &IntOrString::Int(2), "b");
        assert!(e.0.is_empty());
        int_or_percent(&mut e, &IntOrString::String("x".into()), "c");
        int_or_percent(&mut e, &IntOrString::String("120%".into()), "d");
        int_or_percent(&mut e, &IntOrString::Int(-1), "e");
        assert_eq!(e.0.len(), 3);
    }

    #[test]
    fn a_runtime_pin_of_exact_content_names_a_version_and_a_digest() {
        let pinned = |v: &str| -> crate::api::service::PinterestService {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
                "metadata": {"name": "web", "namespace": "ads"},
                "spec": {"owner": {"team": "ads", "contact": "ads@x"}, "replicas": 1,
                         "runtimeVersion": v,
                         "template": {"spec": {"containers": [{"name": "w", "image": "w:1"}]}}}
            }))
            .unwrap()
        };
        for ok in ["2024.1", "2024.1@0123456789abcdef"] {
            let r = workload(WorkloadRef::from(&pinned(ok)));
            assert!(r.is_ok(), "{ok}: {r:?}");
        }
        for bad in [
            "2024.1@",
            "@0123456789abcdef",
            "2024.1@0123456789ABCDEF",
            "v@x y",
        ] {
            let e = workload(WorkloadRef::from(&pinned(bad))).unwrap_err();
            assert!(e.to_string().contains("spec.runtimeVersion"), "{bad}: {e}");
        }
    }

    #[test]
    fn an_ingress_host_is_one_name_never_a_wildcard() {
        let with_host = |h: &str| -> crate::api::service::PinterestService {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
                "metadata": {"name": "web", "namespace": "ads"},
                "spec": {"owner": {"team": "ads", "contact": "ads@x"}, "replicas": 1,
                         "template": {"spec": {"containers": [{"name": "w", "image": "w:1",
                             "ports": [{"containerPort": 8080}]}]}},
                         "ingress": {"host": h, "path": "/"}}
            }))
            .unwrap()
        };
        let ok = workload(WorkloadRef::from(&with_host("web.ads.example")));
        assert!(ok.is_ok(), "{ok:?}");
        for bad in [
            "*.example",
            "*.ads.example",
            "localhost",
            "web..example",
            "Web.example",
            "web.ads.use1a.pinterest.internal",
        ] {
            let err = workload(WorkloadRef::from(&with_host(bad))).unwrap_err();
            assert_eq!(err.first_field(), "spec.ingress.host", "{bad}");
        }
    }

    #[test]
    fn workloads_in_reserved_namespaces_are_refused_with_the_field() {
        let service = |ns: &str| -> crate::api::service::PinterestService {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
                "metadata": {"name": "web", "namespace": ns},
                "spec": {"owner": {"team": "ads", "contact": "ads@x"}, "replicas": 1,
                         "template": {"spec": {"containers": [{"name": "w", "image": "w:1"}]}}}
            }))
            .unwrap()
        };
        for ns in [
            "pinfed-system",
            "pinfed-drop",
            "pinfed-member-use1c",
            "kube-system",
            "kube-public",
        ] {
            let err = workload(WorkloadRef::from(&service(ns))).unwrap_err();
            assert_eq!(err.first_field(), "metadata.namespace", "{ns}");
            assert!(err.to_string().contains("reserved"), "{err}");
        }
        assert!(workload(WorkloadRef::from(&service("ads"))).is_ok());
        assert!(workload(WorkloadRef::from(&service("kubeflow"))).is_ok());
    }

    #[test]
    fn training_roles_over_the_crd_maximum_are_refused_with_the_field() {
        let job = |workers: i32| -> PinterestTrainingJob {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestTrainingJob",
                "metadata": {"name": "tf", "namespace": "ml"},
                "spec": {"owner": {"team": "ml", "contact": "ml@x"}, "framework": "tensorflow",
                         "replicaSpecs": {"Worker": {"replicas": workers, "template": {"spec": {
                             "restartPolicy": "Never",
                             "containers": [{"name": "w", "image": "w:1"}]}}}}}
            }))
            .unwrap()
        };
        assert!(training_job(&job(super::super::training::MAX_REPLICAS_PER_ROLE)).is_ok());
        let err =
            training_job(&job(super::super::training::MAX_REPLICAS_PER_ROLE + 1)).unwrap_err();
        assert_eq!(err.first_field(), "spec.replicaSpecs.Worker.replicas");
        assert!(err.to_string().contains("at most 10000"), "{err}");
    }

    #[test]
    fn application_failover_is_for_replicas_and_shards_and_its_toleration_has_a_floor() {
        let failover = serde_json::json!({"application": {"tolerationSeconds": 5}});
        let service: crate::api::service::PinterestService =
            serde_json::from_value(serde_json::json!({
                "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
                "metadata": {"name": "web", "namespace": "ads"},
                "spec": {"owner": {"team": "ads", "contact": "ads@x"}, "replicas": 1,
                         "placement": {"failover": failover},
                         "template": {"spec": {"containers": [{"name": "w", "image": "w:1"}]}}}
            }))
            .unwrap();
        let err = workload(WorkloadRef::from(&service)).unwrap_err();
        assert_eq!(
            err.first_field(),
            "spec.placement.failover.application.tolerationSeconds"
        );
        let jobs: crate::api::jobset::PinterestJobSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestJobSet",
            "metadata": {"name": "batch", "namespace": "ads"},
            "spec": {"owner": {"team": "ads", "contact": "ads@x"}, "shards": 2,
                     "placement": {"failover": {"application": {}}},
                     "template": {"spec": {"restartPolicy": "Never",
                         "containers": [{"name": "w", "image": "w:1"}]}}}
        }))
        .unwrap();
        assert!(workload(WorkloadRef::from(&jobs)).is_ok());
        let cron: crate::api::cronjob::PinterestCronJob =
            serde_json::from_value(serde_json::json!({
                "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestCronJob",
                "metadata": {"name": "nightly", "namespace": "ads"},
                "spec": {"owner": {"team": "ads", "contact": "ads@x"}, "schedule": "0 1 * * *",
                         "placement": {"failover": {"application": {}}},
                         "template": {"spec": {"restartPolicy": "Never",
                             "containers": [{"name": "w", "image": "w:1"}]}}}
            }))
            .unwrap();
        let err = workload(WorkloadRef::from(&cron)).unwrap_err();
        assert_eq!(err.first_field(), "spec.placement.failover.application");
        assert!(err.to_string().contains("PinterestCronJob"), "{err}");
        let mut ok = service.clone();
        ok.spec.placement.failover = Some(crate::api::common::Failover {
            application: Some(crate::api::common::ApplicationFailover {
                toleration_seconds: Some(10),
            }),
            ..Default::default()
        });
        assert!(workload(WorkloadRef::from(&ok)).is_ok());
    }
}

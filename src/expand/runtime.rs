//! Runtime support: choosing a RuntimeProfile and injecting it into a pod template.
//!
//! Injection adds, in this order: the profile's init containers (config management); its
//! sidecars — as native sidecars (init containers with `restartPolicy: Always`) for
//! run-to-completion kinds, as ordinary containers otherwise; identity / owner / expiry
//! env vars (user containers) and the profile's env (every container), placed before the
//! user's own, which win on a name clash, so the user's `$(VAR)` references can use them;
//! the profile's volumes and their mounts in every user container; and default
//! requests/limits for resources the user left unset.

use std::sync::LazyLock;

use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, ObjectFieldSelector, PodTemplateSpec, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::{BuildError, Ctx};
use crate::api::common::ANNOTATION_EXPIRES_AT;
use crate::api::quantity::Milli;
use crate::api::runtime_profile::{
    DefaultResources, LABEL_PROFILE_DIGEST, LABEL_SNAPSHOT_OF, RuntimeProfile,
};
use crate::api::validate::Invalid;

static BUILTIN: LazyLock<RuntimeProfile> = LazyLock::new(|| {
    crate::api::yaml::from_str(include_str!("builtin-runtime-profile.yaml"))
        .expect("the built-in runtime profile is valid YAML (a unit test checks it)")
});

/// The profile used when none is published: config init, certificate, traffic
/// registration (services only), log and metrics sidecars. Its YAML is
/// `src/expand/builtin-runtime-profile.yaml`.
pub fn builtin_profile() -> &'static RuntimeProfile {
    &BUILTIN
}

/// No profile matches a workload's pinned `spec.runtimeVersion`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("spec.runtimeVersion: no RuntimeProfile has version {version:?} (available: {available})")]
pub struct ProfileError {
    pub version: String,
    pub available: String,
}

/// Chooses the profile for a workload: the one whose `spec.version` (or name) equals the
/// pinned version; without a pin, the profile marked default (the greatest name when
/// several are, so every agent picks the same), else the built-in profile. The built-in
/// profile can also be pinned by its version.
///
/// A pin `version@digest` (what the hub writes into slices, [`pin_of`]) names a profile's
/// exact content: the live profile of that version while its content is unchanged, else
/// the hub's snapshot of that content ([`snapshot_of`]). Snapshots are chosen only so.
pub fn select_profile<'a>(
    profiles: &'a [RuntimeProfile],
    pinned: Option<&str>,
) -> Result<&'a RuntimeProfile, ProfileError> {
    let builtin = builtin_profile();
    let live = || profiles.iter().filter(|p| !is_snapshot(p));
    match pinned {
        Some(pin) => {
            let (v, digest) = match pin.split_once('@') {
                Some((v, d)) => (v, Some(d)),
                None => (pin, None),
            };
            let found = match digest {
                Some(d) => live()
                    .chain(profiles.iter().filter(|p| is_snapshot(p)))
                    .find(|p| p.spec.version == v && profile_digest(p) == d),
                None => live()
                    .find(|p| p.spec.version == v)
                    .or_else(|| live().find(|p| p.metadata.name.as_deref() == Some(v))),
            };
            found
                .or_else(|| (builtin.spec.version == pin).then_some(builtin))
                .ok_or_else(|| {
                    let mut available: Vec<&str> = live()
                        .map(|p| p.spec.version.as_str())
                        .chain([builtin.spec.version.as_str()])
                        .collect();
                    available.sort_unstable();
                    available.dedup();
                    ProfileError {
                        version: pin.to_string(),
                        available: available.join(", "),
                    }
                })
        }
        None => Ok(live()
            .filter(|p| p.spec.default)
            .max_by(|a, b| a.metadata.name.cmp(&b.metadata.name))
            .unwrap_or(builtin)),
    }
}

/// A digest of what a profile injects (16 hex characters): its spec with the default
/// mark left out, since marking a profile default is how upgrades are published, not a
/// change to what it injects. Computed from the typed spec, so the hub and every agent
/// agree on it.
pub fn profile_digest(p: &RuntimeProfile) -> String {
    let mut spec = p.spec.clone();
    spec.default = false;
    super::hash::spec_hash(&spec, &mut Vec::new())
}

/// The pin of `p`'s exact content, `version@digest` (the built-in profile, which has no
/// object to change in place, is pinned by its version alone).
pub fn pin_of(p: &RuntimeProfile) -> String {
    if std::ptr::eq(p, builtin_profile()) {
        return p.spec.version.clone();
    }
    format!("{}@{}", p.spec.version, profile_digest(p))
}

/// Whether `p` is a snapshot the hub keeps of a profile's earlier content.
pub fn is_snapshot(p: &RuntimeProfile) -> bool {
    p.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(LABEL_SNAPSHOT_OF))
}

/// The hub's snapshot of `p`'s present content: an immutable copy named after the
/// profile and the digest, never default, labelled with the profile's name and the
/// digest. Slices pinned to this content keep running it after `p` is edited in place.
pub fn snapshot_of(p: &RuntimeProfile) -> RuntimeProfile {
    let digest = profile_digest(p);
    let name = p.metadata.name.clone().unwrap_or_default();
    let mut spec = p.spec.clone();
    spec.default = false;
    let mut snap = RuntimeProfile::new(&super::names::child_name(&name, &digest, 253, false), spec);
    snap.metadata.labels = Some(
        [
            (LABEL_SNAPSHOT_OF.to_string(), name),
            (LABEL_PROFILE_DIGEST.to_string(), digest),
        ]
        .into(),
    );
    snap
}

/// Values for `{{...}}` placeholders in injected containers and env (keys with braces).
struct Vars<'a> {
    pairs: [(&'static str, &'a str); 8],
}

impl Vars<'_> {
    /// Replaces every known `{{key}}` in one pass; unknown `{{...}}` stay as they are.
    /// Inserted values are not rescanned (one `replace` per key would rescan them; the two
    /// differ only if a team or contact itself contains a placeholder).
    fn render(&self, s: &str) -> String {
        let mut out = String::with_capacity(s.len() + 32);
        let mut rest = s;
        while let Some(at) = rest.find("{{") {
            out.push_str(&rest[..at]);
            let tail = &rest[at..];
            match self.pairs.iter().find(|(key, _)| tail.starts_with(key)) {
                Some((key, v)) => {
                    out.push_str(v);
                    rest = &tail[key.len()..];
                }
                None => {
                    out.push('{');
                    rest = &tail[1..];
                }
            }
        }
        out.push_str(rest);
        out
    }

    /// Renders `s` in place; no allocation when it has no placeholder.
    fn render_in_place(&self, s: &mut String) {
        if s.contains("{{") {
            *s = self.render(s);
        }
    }

    fn render_container(&self, c: &mut Container) {
        if let Some(i) = c.image.as_mut() {
            self.render_in_place(i);
        }
        for s in c
            .command
            .iter_mut()
            .flatten()
            .chain(c.args.iter_mut().flatten())
        {
            self.render_in_place(s);
        }
        if let Some(w) = c.working_dir.as_mut() {
            self.render_in_place(w);
        }
        for e in c.env.iter_mut().flatten() {
            if let Some(v) = e.value.as_mut() {
                self.render_in_place(v);
            }
        }
    }
}

fn literal(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.into()),
        value_from: None,
    }
}

fn field_ref(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: path.to_string(),
            }),
            ..Default::default()
        }),
    }
}

/// When the workload may be garbage collected: its `pinterest.com/expires-at` annotation,
/// else creation time plus the profile's `expiryDays`, else `None` (unknown). The one rule
/// behind `PINTEREST_EXPIRY` and the expired-workloads report.
pub fn expires_at(
    meta: &ObjectMeta,
    expiry_days: Option<i32>,
) -> Result<Option<Timestamp>, Invalid> {
    if let Some(v) = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_EXPIRES_AT))
    {
        return v.parse::<Timestamp>().map(Some).map_err(|e| {
            Invalid::one(
                format!("metadata.annotations[{ANNOTATION_EXPIRES_AT}]"),
                format!("{v:?} is not an RFC 3339 time: {e}"),
            )
        });
    }
    Ok(match (expiry_days, &meta.creation_timestamp) {
        (Some(days), Some(created)) => created
            .0
            .checked_add(SignedDuration::from_hours(i64::from(days) * 24))
            .ok(),
        _ => None,
    })
}

fn expiry(ctx: &Ctx<'_>) -> Result<String, Invalid> {
    Ok(expires_at(ctx.workload_meta, ctx.profile.spec.expiry_days)?
        .map(|t| t.to_string())
        .unwrap_or_default())
}

/// Env vars the platform gives the workload's own containers: identity, owner and expiry,
/// then the profile's own. (Runtime containers get only the profile's; they learn the
/// identity through `{{...}}` placeholders.)
fn platform_env(ctx: &Ctx<'_>, vars: &Vars<'_>) -> Result<Vec<EnvVar>, Invalid> {
    let mut env = vec![
        literal("PINTEREST_WORKLOAD", ctx.name),
        match ctx.namespace {
            Some(ns) => literal("PINTEREST_NAMESPACE", ns),
            None => field_ref("PINTEREST_NAMESPACE", "metadata.namespace"),
        },
        literal("PINTEREST_KIND", ctx.kind.as_str()),
        literal("PINTEREST_TEAM", ctx.owner.team.as_str()),
        literal("PINTEREST_OWNER", ctx.owner.team.as_str()),
        literal("PINTEREST_CONTACT", ctx.owner.contact.as_str()),
    ];
    if let Some(c) = ctx.cluster {
        env.push(literal("PINTEREST_CLUSTER", c));
    }
    env.push(literal(
        "PINTEREST_RUNTIME_VERSION",
        ctx.profile.spec.version.as_str(),
    ));
    env.push(literal("PINTEREST_EXPIRY", expiry(ctx)?));
    env.push(field_ref("POD_NAME", "metadata.name"));
    env.push(field_ref("NODE_NAME", "spec.nodeName"));
    for e in &ctx.profile.spec.env {
        let mut e = e.clone();
        if let Some(v) = e.value.as_mut() {
            vars.render_in_place(v);
        }
        env.push(e);
    }
    Ok(env)
}

/// Puts `platform` before the container's env, dropping platform vars the container sets
/// itself (the user's value wins).
fn prepend_env(c: &mut Container, platform: &[EnvVar]) {
    let own = c.env.take().unwrap_or_default();
    let mut env: Vec<EnvVar> = Vec::with_capacity(platform.len() + own.len());
    // Env lists are short: a linear scan beats building a set.
    env.extend(
        platform
            .iter()
            .filter(|e| !own.iter().any(|o| o.name == e.name))
            .cloned(),
    );
    env.extend(own);
    c.env = Some(env);
}

/// Sets literal env vars that must win over the user's (e.g. `SHARD_INDEX`), placing them
/// first.
pub(crate) fn force_env(c: &mut Container, vars: &[EnvVar]) {
    let own = c.env.take().unwrap_or_default();
    let mut env = Vec::with_capacity(vars.len() + own.len());
    env.extend_from_slice(vars);
    env.extend(
        own.into_iter()
            .filter(|e| !vars.iter().any(|v| v.name == e.name)),
    );
    c.env = Some(env);
}

pub(crate) fn env_literal(name: &str, value: impl Into<String>) -> EnvVar {
    literal(name, value)
}

/// Fills requests and limits the user left unset. A default request is skipped when the
/// user set a limit for that resource (Kubernetes then defaults the request to the
/// limit), and a default limit is skipped when it would be below the user's request.
fn default_resources(c: &mut Container, d: &DefaultResources) {
    let r = c
        .resources
        .get_or_insert_with(ResourceRequirements::default);
    let has_limit =
        |r: &ResourceRequirements, k: &str| r.limits.as_ref().is_some_and(|l| l.contains_key(k));
    // Decide both against the user's own values before adding anything.
    let add_limit = |r: &ResourceRequirements, k: &str, q: &Quantity| {
        if has_limit(r, k) {
            return false;
        }
        match r.requests.as_ref().and_then(|m| m.get(k)) {
            Some(req) => matches!(
                (Milli::parse(&req.0), Milli::parse(&q.0)),
                (Ok(req), Ok(lim)) if lim >= req
            ),
            None => true,
        }
    };
    let limits: Vec<bool> = d.limits.iter().map(|(k, q)| add_limit(r, k, q)).collect();
    for (k, q) in &d.requests {
        if r.requests.as_ref().is_some_and(|m| m.contains_key(k)) || has_limit(r, k) {
            continue;
        }
        r.requests
            .get_or_insert_with(Default::default)
            .insert(k.clone(), q.clone());
    }
    for ((k, q), add) in d.limits.iter().zip(limits) {
        if add {
            r.limits
                .get_or_insert_with(Default::default)
                .insert(k.clone(), q.clone());
        }
    }
}

/// Injects the context's runtime profile into a pod template whose user containers are
/// complete (kind-specific env and volumes already added). `path` is the template's field
/// path for error messages; `service_port` fills `{{servicePort}}`.
pub(crate) fn inject(
    ctx: &Ctx<'_>,
    pod: &mut PodTemplateSpec,
    path: &str,
    service_port: Option<i32>,
) -> Result<(), BuildError> {
    let profile = ctx.profile;
    let profile_name = profile.metadata.name.as_deref().unwrap_or("(unnamed)");
    let port = service_port.map(|p| p.to_string()).unwrap_or_default();
    let vars = Vars {
        pairs: [
            ("{{workload}}", ctx.name),
            ("{{namespace}}", ctx.namespace.unwrap_or("")),
            ("{{kind}}", ctx.kind.as_str()),
            ("{{team}}", ctx.owner.team.as_str()),
            ("{{contact}}", ctx.owner.contact.as_str()),
            ("{{cluster}}", ctx.cluster.unwrap_or("")),
            ("{{runtimeVersion}}", profile.spec.version.as_str()),
            ("{{servicePort}}", port.as_str()),
        ],
    };
    let env = platform_env(ctx, &vars).map_err(BuildError::Spec)?;
    let profile_env = &env[env.len() - profile.spec.env.len()..];
    let Some(spec) = pod.spec.as_mut() else {
        return Err(BuildError::Spec(Invalid::one(
            format!("{path}.spec"),
            "is required",
        )));
    };
    let mut errors = Vec::new();
    let conflict = |field: String, what: String| crate::api::validate::FieldError {
        field,
        message: format!("{what} is reserved by runtime profile {profile_name:?}"),
    };

    // Names the profile reserves (short lists: linear scans).
    let reserved_name = |n: &str| {
        profile.spec.init_containers.iter().any(|c| c.name == n)
            || profile.spec.sidecars.iter().any(|s| s.container.name == n)
    };
    let reserved_volume = |n: &str| profile.spec.volumes.iter().any(|v| v.name == n);
    let reserved_mount = |p: &str| profile.spec.volume_mounts.iter().any(|m| m.mount_path == p);

    let first_user_container = spec.containers.first().map(|c| c.name.clone());
    let mut user_init = spec.init_containers.take().unwrap_or_default();
    for (list, containers) in [
        ("initContainers", &mut user_init),
        ("containers", &mut spec.containers),
    ] {
        for (i, c) in containers.iter_mut().enumerate() {
            let f = || format!("{path}.spec.{list}[{i}]");
            if reserved_name(c.name.as_str()) {
                errors.push(conflict(
                    format!("{}.name", f()),
                    format!("container name {:?}", c.name),
                ));
            }
            for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
                if reserved_mount(m.mount_path.as_str()) {
                    errors.push(conflict(
                        format!("{}.volumeMounts[{j}].mountPath", f()),
                        format!("mount path {:?}", m.mount_path),
                    ));
                }
            }
            prepend_env(c, &env);
            if !profile.spec.volume_mounts.is_empty() {
                c.volume_mounts
                    .get_or_insert_with(Default::default)
                    .extend(profile.spec.volume_mounts.iter().cloned());
            }
            if let Some(d) = &profile.spec.default_resources {
                default_resources(c, d);
            }
        }
    }
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        if reserved_volume(v.name.as_str()) {
            errors.push(conflict(
                format!("{path}.spec.volumes[{i}].name"),
                format!("volume name {:?}", v.name),
            ));
        }
    }
    if !errors.is_empty() {
        return Err(BuildError::Runtime(Invalid { errors }));
    }
    if !profile.spec.volumes.is_empty() {
        spec.volumes
            .get_or_insert_with(Default::default)
            .extend(profile.spec.volumes.iter().cloned());
    }

    add_runtime_containers(ctx, &vars, profile_env, spec, user_init);

    if let Some(first) = first_user_container {
        pod.metadata
            .get_or_insert_with(Default::default)
            .annotations
            .get_or_insert_with(Default::default)
            .insert("kubectl.kubernetes.io/default-container".to_string(), first);
    }
    Ok(())
}

/// Adds the profile's init containers and sidecars around the user's init containers:
/// for run-to-completion kinds the sidecars are native (restartPolicy Always init
/// containers, stopped once the user's containers finish); otherwise plain containers.
fn add_runtime_containers(
    ctx: &Ctx<'_>,
    vars: &Vars<'_>,
    profile_env: &[EnvVar],
    spec: &mut k8s_openapi::api::core::v1::PodSpec,
    user_init: Vec<Container>,
) {
    let profile = ctx.profile;
    let runtime_container = |c: &Container| {
        let mut c = c.clone();
        vars.render_container(&mut c);
        prepend_env(&mut c, profile_env);
        c
    };
    let sidecars = profile
        .spec
        .sidecars
        .iter()
        .filter(|s| s.applies_to.is_empty() || s.applies_to.contains(&ctx.kind));
    let n_sidecars = sidecars.clone().count();
    let mut init: Vec<Container> =
        Vec::with_capacity(profile.spec.init_containers.len() + user_init.len() + n_sidecars);
    init.extend(profile.spec.init_containers.iter().map(|c| {
        let mut c = runtime_container(c);
        c.restart_policy = None;
        c
    }));
    if ctx.kind.runs_to_completion() {
        // Native sidecars: started before the user's init containers, stopped by the
        // kubelet once the user's containers finish, so the Job completes.
        for s in sidecars {
            let mut c = runtime_container(&s.container);
            c.restart_policy = Some("Always".to_string());
            init.push(c);
        }
        init.extend(user_init);
    } else {
        init.extend(user_init);
        spec.containers.reserve(n_sidecars);
        for s in sidecars {
            let mut c = runtime_container(&s.container);
            c.restart_policy = None;
            spec.containers.push(c);
        }
    }
    spec.init_containers = if init.is_empty() { None } else { Some(init) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::validate;

    #[test]
    fn builtin_profile_is_valid() {
        let p = builtin_profile();
        assert_eq!(p.metadata.name.as_deref(), Some("builtin"));
        validate::runtime_profile(p).unwrap();
        assert!(p.spec.sidecars.len() >= 4);
    }

    fn profile(name: &str, version: &str, default: bool) -> RuntimeProfile {
        let mut p = builtin_profile().clone();
        p.metadata.name = Some(name.into());
        p.spec.version = version.into();
        p.spec.default = default;
        p
    }

    #[test]
    fn selection() {
        let ps = vec![
            profile("a", "2024.1", false),
            profile("b", "2024.2", true),
            profile("c", "2024.3", true),
        ];
        assert_eq!(
            select_profile(&ps, Some("2024.1")).unwrap().spec.version,
            "2024.1"
        );
        assert_eq!(
            select_profile(&ps, Some("a")).unwrap().spec.version,
            "2024.1"
        );
        assert_eq!(select_profile(&ps, None).unwrap().spec.version, "2024.3");
        assert_eq!(select_profile(&[], None).unwrap().spec.version, "builtin-1");
        assert_eq!(
            select_profile(&ps, Some("builtin-1")).unwrap().spec.version,
            "builtin-1"
        );
        let e = select_profile(&ps, Some("1999")).unwrap_err();
        assert!(e.to_string().contains("2024.2"), "{e}");
    }

    #[test]
    fn a_content_pin_finds_the_live_profile_then_its_snapshot_and_nothing_else() {
        let mut live = profile("mesh", "2024.1", true);
        let pin = pin_of(&live);
        let (version, digest) = pin.split_once('@').unwrap();
        assert_eq!(version, "2024.1");
        assert!(
            crate::api::runtime_profile::is_profile_digest(digest),
            "{pin}"
        );
        // Marking a profile default is no change of content.
        let mut undefaulted = live.clone();
        undefaulted.spec.default = false;
        assert_eq!(pin_of(&undefaulted), pin);
        assert_eq!(pin_of(builtin_profile()), builtin_profile().spec.version);

        let snap = snapshot_of(&live);
        assert!(is_snapshot(&snap) && !is_snapshot(&live));
        assert!(!snap.spec.default);
        assert_eq!(pin_of(&snap), pin, "a snapshot pins the same content");
        assert_eq!(
            snap.metadata.name.as_deref(),
            Some(format!("mesh-{digest}").as_str())
        );

        // Edited in place: the pin of the old content finds the snapshot, a plain pin
        // and the default find the live profile, never the snapshot.
        let old_env = live.spec.env.clone();
        live.spec.env.push(EnvVar {
            name: "NEW".into(),
            value: Some("1".into()),
            value_from: None,
        });
        let ps = vec![snap.clone(), live.clone()];
        let got = select_profile(&ps, Some(&pin)).unwrap();
        assert!(is_snapshot(got) && got.spec.env == old_env);
        let got = select_profile(&ps, Some(&pin_of(&live))).unwrap();
        assert!(!is_snapshot(got) && got.spec.env == live.spec.env);
        assert!(!is_snapshot(select_profile(&ps, Some("2024.1")).unwrap()));
        assert!(!is_snapshot(select_profile(&ps, None).unwrap()));
        // Without its snapshot the old content is not there: an error naming the pin.
        let e = select_profile(&ps[1..], Some(&pin)).unwrap_err();
        assert!(e.to_string().contains(&pin), "{e}");
        // A snapshot whose content does not match its digest is never chosen.
        let mut forged = snap.clone();
        forged.spec.env = live.spec.env.clone();
        assert!(select_profile(&[forged, live.clone()], Some(&pin)).is_err());
        // Nor is a snapshot by a plain pin, even when no live profile has the version.
        assert!(select_profile(&[snap], Some("2024.1")).is_err());
    }

    #[test]
    fn default_resources_respect_the_user() {
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let d = builtin_profile().spec.default_resources.clone().unwrap();
        let mut c = Container::default();
        default_resources(&mut c, &d);
        let r = c.resources.as_ref().unwrap();
        assert_eq!(r.requests.as_ref().unwrap()["cpu"], Quantity("100m".into()));
        assert_eq!(
            r.limits.as_ref().unwrap()["memory"],
            Quantity("512Mi".into())
        );

        // A user request above the default limit keeps the limit away; a user limit keeps
        // the default request away.
        let mut c = Container {
            resources: Some(ResourceRequirements {
                requests: Some([("memory".to_string(), Quantity("2Gi".into()))].into()),
                limits: Some([("cpu".to_string(), Quantity("2".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        default_resources(&mut c, &d);
        let r = c.resources.as_ref().unwrap();
        assert_eq!(r.requests.as_ref().unwrap().get("cpu"), None);
        assert_eq!(
            r.requests.as_ref().unwrap()["memory"],
            Quantity("2Gi".into())
        );
        assert_eq!(r.limits.as_ref().unwrap().get("memory"), None);
    }
}

//! The admission pipeline of one submission, minus the hub: read the resource, settle its
//! namespace, authorize the caller for its owner team and namespace, validate it (schema
//! and semantics, every error with its field path), size it with the runtime profile it
//! will run with, and build the object to apply. Pure: the shell reads the artifact before
//! and checks quota and applies after.

use serde_json::Value;

use super::artifacts::Artifact;
use super::auth::{AuthConfig, Principal, authorize_submission};
use super::error::{Detail, Rejection};
use crate::api::parse::{Document, parse_one};
use crate::api::runtime_profile::RuntimeProfile;
use crate::api::validate;
use crate::api::workload::{AnyWorkload, WorkloadKind};
use crate::placement::from_workload::demand_for;
use crate::placement::model::Demand;

/// Annotation with the user who submitted the workload through the JSS.
pub const ANNOTATION_SUBMITTED_BY: &str = "pinterest.com/submitted-by";
/// Annotation with the team the submission was made for.
pub const ANNOTATION_SUBMITTED_FOR: &str = "pinterest.com/submitted-for-team";
/// Annotation with the artifact (`name@version`), `inline`, or `revision N (rollout undo)`.
pub const ANNOTATION_ARTIFACT: &str = "pinterest.com/artifact";
/// Annotation with the artifact's SHA-256.
pub const ANNOTATION_ARTIFACT_SHA256: &str = "pinterest.com/artifact-sha256";
/// The JSS's field manager on the hub.
pub const FIELD_MANAGER: &str = "pinfed-jss";

/// A submission that passed every check the JSS can make without the hub.
#[derive(Clone, Debug)]
pub struct Admitted {
    pub workload: AnyWorkload,
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    /// The team the submission is for (the workload's owner team).
    pub team: String,
    /// What it asks of the federation (pod shape with sidecars, and count).
    pub demand: Demand,
    /// The object to server-side apply on the hub.
    pub object: Value,
}

fn set_namespace(w: &mut AnyWorkload, ns: &str) {
    w.metadata_mut().namespace = Some(ns.to_string());
}

/// Where the text of a submission comes from.
#[derive(Clone, Copy, Debug)]
pub enum Origin<'a> {
    /// A verified artifact of the store.
    Artifact(&'a Artifact),
    /// The resource itself, for teams that may submit inline.
    Inline,
    /// `pinfed rollout undo`: the workload running a revision the hub recorded (content
    /// that was admitted before; it is checked again like any submission, but is not an
    /// inline submission).
    Revision(i64),
}

/// Runs the pure stages. `artifact` is the verified artifact the text came from (`None`
/// for an inline resource); `profiles` are the hub's RuntimeProfiles.
pub fn admit(
    cfg: &AuthConfig,
    who: &Principal,
    text: &str,
    namespace: Option<&str>,
    artifact: Option<&Artifact>,
    profiles: &[RuntimeProfile],
) -> Result<Admitted, Rejection> {
    let origin = artifact.map_or(Origin::Inline, Origin::Artifact);
    admit_from(cfg, who, text, namespace, origin, profiles)
}

/// [`admit`], for text from any [`Origin`].
pub fn admit_from(
    cfg: &AuthConfig,
    who: &Principal,
    text: &str,
    namespace: Option<&str>,
    origin: Origin<'_>,
    profiles: &[RuntimeProfile],
) -> Result<Admitted, Rejection> {
    let mut workload = match parse_one(text)? {
        Document::Workload(w) => w,
        other => {
            return Err(Rejection::invalid(
                format!("only workloads may be submitted, not a {}", other.kind()),
                vec![Detail::field(
                    "kind",
                    format!("{} is not a workload kind", other.kind()),
                )],
            ));
        }
    };
    let ns = match (workload.as_ref().namespace(), namespace) {
        (Some(own), Some(asked)) if own != asked => {
            return Err(Rejection::invalid(
                "the resource names another namespace than the submission",
                vec![Detail::field(
                    "metadata.namespace",
                    format!("{own:?} does not match the requested namespace {asked:?}"),
                )],
            ));
        }
        (Some(own), _) => own.to_string(),
        (None, Some(asked)) => asked.to_string(),
        (None, None) => {
            return Err(Rejection::invalid(
                "no namespace",
                vec![Detail::field(
                    "metadata.namespace",
                    "is required (in the resource or as the submission's namespace)",
                )],
            ));
        }
    };
    set_namespace(&mut workload, &ns);
    let w = workload.as_ref();
    let inline = matches!(origin, Origin::Inline);
    let team = authorize_submission(cfg, who, &w.owner().team, &ns, inline)?.to_string();
    validate::workload(w)?;
    let profile = crate::expand::select_profile(profiles, w.runtime_version()).map_err(|e| {
        Rejection::invalid(
            "unknown runtime version",
            vec![Detail::field("spec.runtimeVersion", e.to_string())],
        )
    })?;
    let demand = demand_for(w, Some(profile)).map_err(|e| Rejection::from(e.invalid().clone()))?;

    let mut object = workload
        .to_value()
        .map_err(|e| Rejection::Internal(format!("serializing the workload: {e}")))?;
    // Host access, privileged containers, pinfed's identities and Daemons need the
    // team's grant.
    let uses = crate::api::pod_policy::uses(w.kind(), &object);
    super::auth::authorize_privileges(cfg, &team, &uses)?;
    if let Some(o) = object.as_object_mut() {
        o.remove("status");
    }
    let meta = &mut object["metadata"];
    if let Some(m) = meta.as_object_mut() {
        // Fields the API server owns; a copy of a live object must not carry them.
        for k in [
            "resourceVersion",
            "uid",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "ownerReferences",
            "finalizers",
            "selfLink",
            "generateName",
        ] {
            m.remove(k);
        }
    }
    let ann = &mut meta["annotations"];
    if !ann.is_object() {
        *ann = Value::Object(Default::default());
    }
    ann[ANNOTATION_SUBMITTED_BY] = who.user.clone().into();
    ann[ANNOTATION_SUBMITTED_FOR] = team.clone().into();
    match origin {
        Origin::Artifact(a) => {
            ann[ANNOTATION_ARTIFACT] = a.reference.to_string().into();
            ann[ANNOTATION_ARTIFACT_SHA256] = a.sha256.clone().into();
        }
        Origin::Inline | Origin::Revision(_) => {
            ann[ANNOTATION_ARTIFACT] = match origin {
                Origin::Revision(r) => format!("revision {r} (rollout undo)").into(),
                _ => "inline".into(),
            };
            if let Some(m) = ann.as_object_mut() {
                m.remove(ANNOTATION_ARTIFACT_SHA256);
            }
        }
    }
    Ok(Admitted {
        kind: workload.kind(),
        name: w.name().to_string(),
        namespace: ns,
        team,
        demand,
        object,
        workload: workload.clone(),
    })
}

/// The privileges a workload's overrides add in some member: those its expansion there
/// uses with the member's rules and not without (the runtime profile's own stay the
/// platform's). Each names the member and the object.
pub fn override_privileges(
    w: &AnyWorkload,
    profile: Option<&RuntimeProfile>,
    members: &[crate::placement::model::ClusterView],
) -> Vec<crate::api::pod_policy::Use> {
    use crate::expand::{ExpandInput, expand};
    let mut out = Vec::new();
    let rules = w.as_ref().overrides();
    let uses_in = |workload: &AnyWorkload,
                   cluster: &str|
     -> Vec<(String, crate::api::pod_policy::Privilege)> {
        let input = ExpandInput {
            profile,
            cluster: Some(cluster),
            ..ExpandInput::new(workload.as_ref())
        };
        expand(&input)
            .map(|objects| {
                objects
                    .iter()
                    .flat_map(|o| {
                        let name = format!(
                            "{} {}",
                            o.types.as_ref().map(|t| t.kind.as_str()).unwrap_or(""),
                            o.metadata.name.as_deref().unwrap_or("")
                        );
                        crate::api::pod_policy::uses(workload.kind(), &o.data)
                            .into_iter()
                            .map(move |u| (format!("{name}: {}", u.field), u.privilege))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut plain = w.clone();
    plain.set_overrides(Vec::new());
    for m in members {
        let labels = m.selector_labels();
        let member = crate::overrides::Member {
            name: &m.name,
            region: m.region.as_deref(),
            zone: m.zone.as_deref(),
            labels: &labels,
        };
        let Ok(resolved) = crate::overrides::resolve(rules, &member) else {
            continue;
        };
        if resolved.is_empty() {
            continue;
        }
        let mut there = w.clone();
        there.set_overrides(resolved);
        let base: Vec<_> = uses_in(&plain, &m.name)
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        for (field, privilege) in uses_in(&there, &m.name) {
            if !base.contains(&privilege) {
                out.push(crate::api::pod_policy::Use {
                    privilege,
                    field: format!("spec.overrides (in member {}, {field})", m.name),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jss::artifacts::{ArtifactRef, sha256_hex};
    use crate::jss::auth::{AuthFile, authenticate};

    fn cfg() -> AuthConfig {
        let f = AuthFile::parse(
            "t",
            "tokens:\n  - {user: alice, token: a, teams: [ads]}\n  - {user: rev, token: r, teams: [ads-reviewed]}\n\
             teams:\n  ads: {namespaces: [ads], inline: true}\n  ads-reviewed: {namespaces: [ads]}\n",
        )
        .unwrap();
        AuthConfig::merge(&[("t".into(), f)]).unwrap()
    }

    const SVC: &str = r#"apiVersion: compute.pinterest.com/v1alpha1
kind: PinterestService
metadata: {name: web}
spec:
  owner: {team: ads, contact: a@b}
  replicas: 3
  template:
    spec:
      containers: [{name: app, image: x, resources: {requests: {cpu: 100m}}}]
"#;

    #[test]
    fn a_good_inline_service_is_admitted_with_the_submitter_recorded() {
        let c = cfg();
        let alice = authenticate(&c, "a").unwrap();
        let a = admit(&c, &alice, SVC, Some("ads"), None, &[]).unwrap();
        assert_eq!(
            (a.kind, a.namespace.as_str(), a.name.as_str()),
            (WorkloadKind::Service, "ads", "web")
        );
        assert_eq!(a.object["metadata"]["namespace"], "ads");
        assert_eq!(
            a.object["metadata"]["annotations"][ANNOTATION_SUBMITTED_BY],
            "alice"
        );
        assert_eq!(
            a.object["metadata"]["annotations"][ANNOTATION_ARTIFACT],
            "inline"
        );
        assert_eq!(a.object["kind"], "PinterestService");
        assert!(a.object.get("status").is_none());
        let r = crate::jss::quota::requested(&a.demand, 3);
        assert_eq!(r.pods, 3);
        assert!(r.cpu.0 > 300, "sidecars count: {:?}", r.cpu);
    }

    #[test]
    fn each_stage_rejects_with_its_status() {
        let c = cfg();
        let alice = authenticate(&c, "a").unwrap();
        let rev = authenticate(&c, "r").unwrap();
        // No namespace anywhere.
        let e = admit(&c, &alice, SVC, None, None, &[]).unwrap_err();
        assert_eq!(e.body()["details"][0]["field"], "metadata.namespace");
        // Wrong team.
        assert_eq!(
            admit(&c, &rev, SVC, Some("ads"), None, &[])
                .unwrap_err()
                .status(),
            403
        );
        // Wrong namespace.
        assert_eq!(
            admit(&c, &alice, SVC, Some("search"), None, &[])
                .unwrap_err()
                .status(),
            403
        );
        // Invalid: every error with its path.
        let bad = SVC
            .replace("replicas: 3", "replicas: -1")
            .replace("name: app", "name: App_1");
        let e = admit(&c, &alice, &bad, Some("ads"), None, &[]).unwrap_err();
        assert_eq!(e.status(), 422);
        let fields: Vec<String> = e
            .details()
            .iter()
            .map(|d| match d {
                Detail::Field { field, .. } => field.clone(),
                _ => String::new(),
            })
            .collect();
        assert!(fields.iter().any(|f| f == "spec.replicas"), "{fields:?}");
        assert!(
            fields
                .iter()
                .any(|f| f.starts_with("spec.template.spec.containers[0]")),
            "{fields:?}"
        );
        // Not a workload.
        let q = "apiVersion: federation.pinterest.com/v1alpha1\nkind: FederatedQuota\nmetadata: {name: q}\nspec: {hard: {}}\n";
        assert_eq!(
            admit(&c, &alice, q, Some("ads"), None, &[])
                .unwrap_err()
                .body()["details"][0]["field"],
            "kind"
        );
        // Unknown runtime version.
        let pinned = SVC.replace("  replicas: 3", "  replicas: 3\n  runtimeVersion: nope");
        let e = admit(&c, &alice, &pinned, Some("ads"), None, &[]).unwrap_err();
        assert_eq!(e.body()["details"][0]["field"], "spec.runtimeVersion");
    }

    #[test]
    fn a_recorded_revision_is_checked_again_but_is_no_inline_submission() {
        let c = cfg();
        let rev = authenticate(&c, "r").unwrap();
        let text = SVC.replace("team: ads,", "team: ads-reviewed,");
        let a = admit_from(&c, &rev, &text, Some("ads"), Origin::Revision(3), &[]).unwrap();
        let ann = &a.object["metadata"]["annotations"];
        assert_eq!(ann[ANNOTATION_ARTIFACT], "revision 3 (rollout undo)");
        assert!(ann.get(ANNOTATION_ARTIFACT_SHA256).is_none());
        assert_eq!(ann[ANNOTATION_SUBMITTED_BY], "rev");
        // Still validated, and still only for the content's owner team.
        let bad = text.replace("replicas: 3", "replicas: -1");
        let e = admit_from(&c, &rev, &bad, Some("ads"), Origin::Revision(3), &[]).unwrap_err();
        assert_eq!(e.status(), 422);
        let alice = authenticate(&c, "a").unwrap();
        let e = admit_from(&c, &alice, &text, Some("ads"), Origin::Revision(3), &[]).unwrap_err();
        assert_eq!(e.status(), 403);
    }

    #[test]
    fn artifacts_are_recorded_and_bypass_the_inline_rule() {
        let c = cfg();
        let rev = authenticate(&c, "r").unwrap();
        let text = SVC.replace("team: ads,", "team: ads-reviewed,");
        let art = Artifact {
            reference: ArtifactRef {
                name: "web".into(),
                version: "1".into(),
            },
            sha256: sha256_hex(text.as_bytes()),
            text: text.clone(),
        };
        assert_eq!(
            admit(&c, &rev, &text, Some("ads"), None, &[])
                .unwrap_err()
                .status(),
            403
        );
        let a = admit(&c, &rev, &text, Some("ads"), Some(&art), &[]).unwrap();
        assert_eq!(
            a.object["metadata"]["annotations"][ANNOTATION_ARTIFACT],
            "web@1"
        );
        assert_eq!(a.team, "ads-reviewed");
    }
}

#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;
    use crate::jss::auth::{AuthFile, authenticate};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Whatever text arrives inline, admission answers Ok or a 4xx — never a panic.
        #[test]
        fn any_inline_text_is_admitted_or_rejected_without_panicking(
            text in prop_oneof![
                ".{0,300}",
                "(apiVersion: compute.pinterest.com/v1alpha1\nkind: Pinterest(Service|JobSet|Daemon)\n)(metadata: \\{name: [a-z]{1,5}\\}\n)?(spec: .{0,80}\n)?",
            ],
            ns in proptest::option::of("[a-z]{1,4}"),
        ) {
            let f = AuthFile::parse("t", "tokens: [{user: a, token: a, teams: [ads]}]\nteams: {ads: {namespaces: ['*'], inline: true}}").unwrap();
            let c = AuthConfig::merge(&[("t".into(), f)]).unwrap();
            let who = authenticate(&c, "a").unwrap();
            if let Err(e) = admit(&c, &who, &text, ns.as_deref(), None, &[]) {
                prop_assert!((400..500).contains(&e.status()), "{e}");
            }
        }
    }
}

//! Reading requests: the submission body and the kind in a URL. Pure; any bytes in, a
//! typed request or a [`Rejection`] out (never a panic — a property test feeds it noise).

use serde_json::Value;

use super::artifacts::ArtifactRef;
use super::error::{Detail, Rejection};
use crate::api::workload::WorkloadKind;

/// Where the resource of a submission comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A reviewed artifact from the store.
    Artifact(ArtifactRef),
    /// The resource itself (YAML or JSON text), for teams allowed to submit inline.
    Inline(String),
}

/// A parsed `POST /v1/submissions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submission {
    pub source: Source,
    /// Namespace to submit into; fills in a resource without one (a conflict is invalid).
    pub namespace: Option<String>,
}

fn is_yaml(content_type: &str) -> bool {
    let ct = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    matches!(
        ct.as_str(),
        "application/yaml" | "application/x-yaml" | "text/yaml" | "text/x-yaml"
    )
}

/// Reads a submission body: JSON `{"artifact": {"name", "version"}, "namespace"?}` or
/// `{"resource": OBJECT-or-YAML-STRING, "namespace"?}`; with a YAML content type the body
/// is the inline resource itself.
pub fn parse_submission(
    content_type: Option<&str>,
    body: &[u8],
    namespace_param: Option<&str>,
) -> Result<Submission, Rejection> {
    let namespace_param = namespace_param.map(str::to_string);
    if content_type.is_some_and(is_yaml) {
        let text = std::str::from_utf8(body)
            .map_err(|_| Rejection::BadRequest("the YAML body is not UTF-8".into()))?;
        return Ok(Submission {
            source: Source::Inline(text.to_string()),
            namespace: namespace_param,
        });
    }
    let b: super::wire::SubmitRequest = serde_json::from_slice(body).map_err(|e| {
        if e.is_data() {
            Rejection::invalid(
                format!("the submission body is not a submission: {e}"),
                vec![Detail::field("body", e.to_string())],
            )
        } else {
            Rejection::BadRequest(format!("the body is not JSON: {e}"))
        }
    })?;
    let namespace = match (b.namespace, namespace_param) {
        (Some(a), Some(q)) if a != q => {
            return Err(Rejection::invalid(
                "the namespace is given twice, differently",
                vec![Detail::field(
                    "namespace",
                    format!("{a:?} in the body, {q:?} in the query"),
                )],
            ));
        }
        (a, q) => a.or(q),
    };
    let source = match (b.artifact, b.resource) {
        (Some(a), None) => Source::Artifact(a),
        (None, Some(Value::String(text))) => Source::Inline(text),
        (None, Some(v @ Value::Object(_))) => Source::Inline(v.to_string()),
        (None, Some(_)) => {
            return Err(Rejection::invalid(
                "the inline resource must be an object or YAML text",
                vec![Detail::field("resource", "must be an object or a string")],
            ));
        }
        (Some(_), Some(_)) | (None, None) => {
            return Err(Rejection::invalid(
                "a submission names exactly one of artifact and resource",
                vec![Detail::field(
                    "artifact",
                    "exactly one of artifact and resource is required",
                )],
            ));
        }
    };
    Ok(Submission { source, namespace })
}

/// A kind as users write it in URLs and on the command line: `PinterestService`,
/// `service`, `services`, `svc`-style short names are not guessed.
pub fn parse_kind(s: &str) -> Option<WorkloadKind> {
    let lower = s.to_ascii_lowercase();
    let bare = lower.strip_prefix("pinterest").unwrap_or(&lower);
    let bare = bare
        .strip_suffix('s')
        .filter(|b| !b.is_empty())
        .unwrap_or(bare);
    WorkloadKind::ALL.into_iter().find(|k| {
        let full = k.as_str().to_ascii_lowercase();
        let short = full.strip_prefix("pinterest").unwrap_or(&full);
        bare == short || lower == full
    })
}

/// The URL form of a kind (`service`, `jobset`, ...), as the CLI prints and sends it.
pub fn kind_path(k: WorkloadKind) -> String {
    k.as_str()
        .strip_prefix("Pinterest")
        .unwrap_or(k.as_str())
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_and_inline_bodies() {
        let s = parse_submission(
            Some("application/json"),
            br#"{"artifact": {"name": "web", "version": "1.0.0"}, "namespace": "ads"}"#,
            None,
        )
        .unwrap();
        assert_eq!(
            s.source,
            Source::Artifact(ArtifactRef {
                name: "web".into(),
                version: "1.0.0".into()
            })
        );
        assert_eq!(s.namespace.as_deref(), Some("ads"));
        let s = parse_submission(None, br#"{"resource": {"kind": "X"}}"#, Some("q")).unwrap();
        assert_eq!(s.source, Source::Inline(r#"{"kind":"X"}"#.into()));
        assert_eq!(s.namespace.as_deref(), Some("q"));
        let s =
            parse_submission(Some("application/yaml; charset=utf-8"), b"kind: X\n", None).unwrap();
        assert_eq!(s.source, Source::Inline("kind: X\n".into()));
    }

    #[test]
    fn malformed_bodies_are_told_apart() {
        let e = parse_submission(None, b"{", None).unwrap_err();
        assert_eq!(e.status(), 400);
        let e = parse_submission(None, b"{}", None).unwrap_err();
        assert_eq!(e.status(), 422);
        let e = parse_submission(None, br#"{"artifact": {"name": 1}}"#, None).unwrap_err();
        assert_eq!(e.status(), 422);
        let e = parse_submission(None, br#"{"bogus": 1}"#, None).unwrap_err();
        assert_eq!(e.status(), 422);
        let e = parse_submission(None, br#"{"resource": 3}"#, None).unwrap_err();
        assert_eq!(e.body()["details"][0]["field"], "resource");
        let e = parse_submission(
            None,
            br#"{"resource": "a: 1", "namespace": "x"}"#,
            Some("y"),
        )
        .unwrap_err();
        assert_eq!(e.body()["details"][0]["field"], "namespace");
        let e = parse_submission(Some("text/yaml"), &[0xff, 0xfe], None).unwrap_err();
        assert_eq!(e.status(), 400);
    }

    #[test]
    fn kinds_in_urls() {
        assert_eq!(parse_kind("service"), Some(WorkloadKind::Service));
        assert_eq!(parse_kind("Services"), Some(WorkloadKind::Service));
        assert_eq!(parse_kind("PinterestJobSet"), Some(WorkloadKind::JobSet));
        assert_eq!(parse_kind("trainingjobs"), Some(WorkloadKind::TrainingJob));
        assert_eq!(parse_kind("statefulset"), Some(WorkloadKind::StatefulSet));
        assert_eq!(parse_kind("deployment"), None);
        assert_eq!(parse_kind(""), None);
        assert_eq!(parse_kind("s"), None);
        for k in WorkloadKind::ALL {
            assert_eq!(parse_kind(&kind_path(k)), Some(k));
        }
    }
}

#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn any_bytes_parse_or_are_rejected_without_panicking(
            body in proptest::collection::vec(any::<u8>(), 0..512),
            yaml in any::<bool>(),
            ns in proptest::option::of("[a-z-]{0,8}"),
        ) {
            let ct = if yaml { Some("application/yaml") } else { Some("application/json") };
            match parse_submission(ct, &body, ns.as_deref()) {
                Ok(_) => {}
                Err(e) => prop_assert!((400..500).contains(&e.status())),
            }
        }

        #[test]
        fn json_shaped_noise_is_rejected_with_a_4xx(
            name in ".{0,20}", version in ".{0,20}", extra in proptest::option::of(".{0,10}"),
        ) {
            let mut v = serde_json::json!({"artifact": {"name": name, "version": version}});
            if let Some(x) = extra {
                v["resource"] = serde_json::Value::String(x);
            }
            let body = v.to_string();
            if let Err(e) = parse_submission(None, body.as_bytes(), None) {
                prop_assert!((400..500).contains(&e.status()));
            }
        }

        #[test]
        fn kinds_never_panic(s in ".{0,30}") {
            let _ = parse_kind(&s);
        }
    }
}

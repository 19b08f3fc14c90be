//! Reading Pinterest resources from YAML or JSON text (files given to the CLI, fixtures).
//! Pure: text in, typed resources or an error naming the document, field, line and
//! column out. Unknown fields are errors here (the API server would silently prune them).
//! The text is read once, under the budgets, by `api::yaml`.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::federation::{FederatedQuota, MemberCluster};
use super::runtime_profile::RuntimeProfile;
use super::workload::{AnyWorkload, COMPUTE_API_VERSION, FEDERATION_API_VERSION};
use super::yaml::{self, Node, ReadError};

/// A resource read from text.
#[allow(clippy::large_enum_variant)] // read once from a file; boxing buys nothing
#[derive(Clone, Debug, PartialEq)]
pub enum Document {
    Workload(AnyWorkload),
    RuntimeProfile(RuntimeProfile),
    MemberCluster(MemberCluster),
    FederatedQuota(FederatedQuota),
}

impl Document {
    pub fn kind(&self) -> &'static str {
        match self {
            Document::Workload(w) => w.kind().as_str(),
            Document::RuntimeProfile(_) => "RuntimeProfile",
            Document::MemberCluster(_) => "MemberCluster",
            Document::FederatedQuota(_) => "FederatedQuota",
        }
    }
}

/// Why text could not be read as Pinterest resources. Documents are numbered from 1,
/// counting those that are not empty.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not well-formed YAML (the whole stream is refused: no document is read).
    #[error("broken YAML at line {line}, column {column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    /// No document at all.
    #[error("no resource found (the input is empty)")]
    Empty,
    /// Larger, deeper or more aliased than any resource needs (`api::yaml_budget`).
    #[error(transparent)]
    OverBudget(#[from] super::yaml_budget::OverBudget),
    /// A document that is not a mapping with `apiVersion` and `kind`.
    #[error("document {document}: {message}")]
    NotAResource { document: usize, message: String },
    /// A kind this product does not know.
    #[error(
        "document {document}: unknown kind {kind:?} (apiVersion {api_version:?}); expected one of {expected}"
    )]
    UnknownKind {
        document: usize,
        kind: String,
        api_version: String,
        expected: String,
    },
    /// A known kind under the wrong apiVersion.
    #[error("document {document}: apiVersion: kind {kind} belongs to {expected:?}, not {found:?}")]
    WrongApiVersion {
        document: usize,
        kind: String,
        expected: String,
        found: String,
    },
    /// A field with the wrong type or value: `spec.replicas: invalid type ... at line L
    /// column C`.
    #[error("document {document} ({kind}): {error}")]
    Field {
        document: usize,
        kind: String,
        error: yaml::FieldError,
    },
    /// A field the kind does not have (often a typo).
    #[error("document {document} ({kind}): {field}: unknown field")]
    UnknownField {
        document: usize,
        kind: String,
        field: String,
    },
}

impl From<ReadError> for ParseError {
    fn from(e: ReadError) -> ParseError {
        match e {
            ReadError::OverBudget(b) => ParseError::OverBudget(b),
            ReadError::Syntax {
                line,
                column,
                message,
            } => ParseError::Syntax {
                line,
                column,
                message,
            },
        }
    }
}

const KNOWN_KINDS: &[(&str, &str)] = &[
    ("PinterestService", COMPUTE_API_VERSION),
    ("PinterestJobSet", COMPUTE_API_VERSION),
    ("PinterestCronJob", COMPUTE_API_VERSION),
    ("PinterestDaemon", COMPUTE_API_VERSION),
    ("PinterestTrainingJob", COMPUTE_API_VERSION),
    ("PinterestStatefulSet", COMPUTE_API_VERSION),
    ("RuntimeProfile", COMPUTE_API_VERSION),
    ("MemberCluster", FEDERATION_API_VERSION),
    ("FederatedQuota", FEDERATION_API_VERSION),
];

/// Reads every document of a YAML (or JSON) stream. Empty documents are skipped.
pub fn parse_documents(text: &str) -> Result<Vec<Document>, ParseError> {
    let nodes = yaml::read_documents(text)?;
    if nodes.is_empty() {
        return Err(ParseError::Empty);
    }
    // Kinds of every document first, then the typed reads.
    let mut kinds = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let document = i + 1;
        let json = node.to_json().map_err(|e| ParseError::NotAResource {
            document,
            message: format!("cannot be represented as JSON: {e}"),
        })?;
        let Some(obj) = json.as_object() else {
            return Err(ParseError::NotAResource {
                document,
                message: "is not a mapping (expected a Kubernetes resource)".into(),
            });
        };
        let field = |k: &str| obj.get(k).and_then(Value::as_str).map(str::to_string);
        let kind = field("kind").ok_or_else(|| ParseError::NotAResource {
            document,
            message: "kind: is required".into(),
        })?;
        let api_version = field("apiVersion").ok_or_else(|| ParseError::NotAResource {
            document,
            message: "apiVersion: is required".into(),
        })?;
        let Some((_, expected)) = KNOWN_KINDS.iter().find(|(k, _)| *k == kind) else {
            return Err(ParseError::UnknownKind {
                document,
                kind,
                api_version,
                expected: KNOWN_KINDS
                    .iter()
                    .map(|(k, _)| *k)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        if api_version != *expected {
            return Err(ParseError::WrongApiVersion {
                document,
                kind,
                expected: expected.to_string(),
                found: api_version,
            });
        }
        kinds.push((kind, json));
    }
    let mut docs = Vec::new();
    for (i, (node, (kind, json))) in nodes.iter().zip(&kinds).enumerate() {
        let document = i + 1;
        use super::{cronjob::*, daemon::*, jobset::*, service::*, statefulset::*, training::*};
        let doc = match kind.as_str() {
            "RuntimeProfile" => Document::RuntimeProfile(typed(node, document, kind, json)?),
            "MemberCluster" => Document::MemberCluster(typed(node, document, kind, json)?),
            "FederatedQuota" => Document::FederatedQuota(typed(node, document, kind, json)?),
            "PinterestService" => w(typed::<PinterestService>(node, document, kind, json)?),
            "PinterestJobSet" => w(typed::<PinterestJobSet>(node, document, kind, json)?),
            "PinterestCronJob" => w(typed::<PinterestCronJob>(node, document, kind, json)?),
            "PinterestDaemon" => w(typed::<PinterestDaemon>(node, document, kind, json)?),
            "PinterestTrainingJob" => w(typed::<PinterestTrainingJob>(node, document, kind, json)?),
            "PinterestStatefulSet" => w(typed::<PinterestStatefulSet>(node, document, kind, json)?),
            other => {
                return Err(ParseError::NotAResource {
                    document,
                    message: format!("kind {other} cannot be read"),
                });
            }
        };
        docs.push(doc);
    }
    Ok(docs)
}

fn w(x: impl Into<AnyWorkload>) -> Document {
    Document::Workload(x.into())
}

/// Reads exactly one document.
pub fn parse_one(text: &str) -> Result<Document, ParseError> {
    let mut docs = parse_documents(text)?;
    if docs.len() > 1 {
        return Err(ParseError::NotAResource {
            document: 2,
            message: format!("expected one resource, found {}", docs.len()),
        });
    }
    Ok(docs.remove(0))
}

/// `node` as a `T`: type errors with their field, line and column; then any field of
/// `input` the type dropped, as unknown.
fn typed<T: DeserializeOwned + serde::Serialize>(
    node: &Node,
    document: usize,
    kind: &str,
    input: &Value,
) -> Result<T, ParseError> {
    let t: T = node.to().map_err(|error| ParseError::Field {
        document,
        kind: kind.to_string(),
        error,
    })?;
    let back = serde_json::to_value(&t).map_err(|e| ParseError::Field {
        document,
        kind: kind.to_string(),
        error: yaml::FieldError {
            field: None,
            message: e.to_string(),
            line: None,
            column: None,
        },
    })?;
    if let Some(field) = unknown_field(input, &back, "") {
        return Err(ParseError::UnknownField {
            document,
            kind: kind.to_string(),
            field,
        });
    }
    Ok(t)
}

/// The first key present (and non-empty) in `input` that did not survive a round trip
/// through the typed form: a field the type does not have.
fn unknown_field(input: &Value, back: &Value, path: &str) -> Option<String> {
    match (input, back) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match b.get(k) {
                    Some(bv) => {
                        if let Some(f) = unknown_field(v, bv, &p) {
                            return Some(f);
                        }
                    }
                    None if is_empty(v) => {}
                    None => return Some(p),
                }
            }
            None
        }
        (Value::Array(a), Value::Array(b)) => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| unknown_field(x, y, &format!("{path}[{i}]"))),
        _ => None,
    }
}

/// Values that a typed round trip may legitimately drop (defaults are not serialized).
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(is_empty),
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_over_budget_is_refused_before_it_is_read() {
        let mut text =
            String::from("apiVersion: compute.pinterest.com/v1alpha1\nkind: PinterestService\n");
        text.push_str("x0: &x0 [a, a, a, a, a, a, a, a, a, a]\n");
        for i in 1..8 {
            let p = i - 1;
            text.push_str(&format!(
                "x{i}: &x{i} [*x{p}, *x{p}, *x{p}, *x{p}, *x{p}, *x{p}, *x{p}, *x{p}]\n"
            ));
        }
        let err = parse_documents(&text).unwrap_err();
        assert!(matches!(err, ParseError::OverBudget(_)), "{err}");
        let deep = format!("{}1{}", "[".repeat(30_000), "]".repeat(30_000));
        assert!(matches!(
            parse_documents(&deep),
            Err(ParseError::OverBudget(_))
        ));
    }

    const SVC: &str = r#"
apiVersion: compute.pinterest.com/v1alpha1
kind: PinterestService
metadata: {name: web, namespace: ads}
spec:
  owner: {team: ads, contact: ads@pinterest.com}
  replicas: 3
  template:
    spec:
      containers: [{name: app, image: nginx}]
"#;

    #[test]
    fn reads_a_service() {
        let d = parse_one(SVC).unwrap();
        assert_eq!(d.kind(), "PinterestService");
    }

    #[test]
    fn broken_yaml_has_line_and_column() {
        let e = parse_documents("apiVersion: x\nkind: [unclosed\n").unwrap_err();
        match e {
            ParseError::Syntax { line, column, .. } => assert!(line >= 2 && column > 0, "{e}"),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn unknown_kind_is_named() {
        let e =
            parse_documents("apiVersion: compute.pinterest.com/v1alpha1\nkind: PinterestThing\n")
                .unwrap_err();
        assert!(
            e.to_string().contains("unknown kind \"PinterestThing\""),
            "{e}"
        );
    }

    #[test]
    fn wrong_type_names_the_field_and_line() {
        let e = parse_documents(&SVC.replace("replicas: 3", "replicas: three")).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("spec.replicas"), "{s}");
        assert!(s.contains("line 7"), "{s}");
    }

    #[test]
    fn unknown_fields_are_named() {
        let e = parse_documents(&SVC.replace("replicas: 3", "replicaz: 3")).unwrap_err();
        assert!(
            e.to_string().contains("spec.replicaz: unknown field"),
            "{e}"
        );
        let e =
            parse_documents(&SVC.replace("image: nginx", "image: nginx, imagee: x")).unwrap_err();
        assert!(
            e.to_string()
                .contains("spec.template.spec.containers[0].imagee"),
            "{e}"
        );
    }

    #[test]
    fn wrong_types_carry_field_line_and_column_apart() {
        let e = parse_documents(&SVC.replace("replicas: 3", "replicas: three")).unwrap_err();
        let ParseError::Field {
            document, error, ..
        } = &e
        else {
            panic!("{e}")
        };
        assert_eq!(*document, 1);
        assert_eq!(error.field.as_deref(), Some("spec.replicas"));
        assert_eq!((error.line, error.column), (Some(7), Some(13)));
        assert_eq!(
            e.to_string(),
            "document 1 (PinterestService): spec.replicas: invalid type: string \"three\", \
             expected i32 at line 7 column 13"
        );
        // Quantities as numbers or text, booleans as YAML 1.2 has them.
        let q = SVC.replace(
            "containers: [{name: app, image: nginx}]",
            "containers: [{name: app, image: nginx, resources: {limits: {cpu: 1, memory: 1Gi}}}]",
        );
        assert!(parse_one(&q).is_ok());
        let e = parse_one(&SVC.replace("image: nginx}", "image: nginx, tty: yes}")).unwrap_err();
        assert!(
            e.to_string()
                .contains("spec.template.spec.containers[0].tty: invalid type: string \"yes\""),
            "{e}"
        );
    }

    #[test]
    fn several_documents_and_empty_ones() {
        let text = format!("---\n{SVC}\n---\n---\n{SVC}");
        assert_eq!(parse_documents(&text).unwrap().len(), 2);
        assert_eq!(parse_documents("").unwrap_err(), ParseError::Empty);
        assert!(matches!(
            parse_documents("just a string").unwrap_err(),
            ParseError::NotAResource { .. }
        ));
    }
}

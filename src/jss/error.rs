//! Every way the JSS turns a request down, with its HTTP status, its JSON body
//! (`{"error": "...", "reason": "...", "details": [...]}`) and a stable reason name that
//! is also the `outcome` label of the submission metrics and the audit log.

use serde_json::Value;

use super::artifacts::ArtifactError;
use super::auth::{AuthError, Forbidden};
use super::quota::QuotaExceeded;
use crate::api::parse::ParseError;
use crate::api::validate::Invalid;

pub use super::wire::Detail;

#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    #[error("{0}")]
    Unauthenticated(#[from] AuthError),
    #[error("{0}")]
    Forbidden(#[from] Forbidden),
    #[error("request body is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("{0}")]
    BadRequest(String),
    #[error("{message}")]
    Invalid {
        message: String,
        details: Vec<Detail>,
    },
    #[error("{0}")]
    QuotaExceeded(QuotaExceeded),
    /// Another workload holds the ingress host the submission names.
    #[error("spec.ingress.host: {host:?} is held by {holder}")]
    HostHeld { host: String, holder: String },
    #[error("{0}")]
    ArtifactNotFound(String),
    #[error("{0}")]
    ArtifactMismatch(String),
    #[error("{0}")]
    NotFound(String),
    #[error("no route {0}")]
    NoRoute(String),
    #[error("method {0} is not allowed here")]
    MethodNotAllowed(String),
    #[error("request timed out after {0} seconds")]
    Timeout(u64),
    #[error("the hub is not reachable or refused the request: {0}")]
    Hub(String),
    #[error("the JSS is not ready (hub caches are still loading)")]
    NotReady,
    /// Too many failed authentications from the caller's address.
    #[error("too many failed authentications from {client}: retry in {retry_after_secs} s")]
    TooManyFailedAuths {
        client: String,
        retry_after_secs: u64,
    },
    /// The JSS is busy: its memory budget for submissions stayed spent.
    #[error("busy: {0}; retry shortly")]
    Busy(String),
    /// An authenticated principal past its request budget.
    #[error("too many requests from {principal}: retry in {retry_after_secs} s")]
    TooManyRequests {
        principal: String,
        retry_after_secs: u64,
    },
    #[error("internal error: {0}")]
    Internal(String),
}

impl Rejection {
    pub fn status(&self) -> u16 {
        match self {
            Rejection::Unauthenticated(_) => 401,
            Rejection::Forbidden(_) => 403,
            Rejection::TooLarge { .. } => 413,
            Rejection::BadRequest(_) => 400,
            Rejection::Invalid { .. } => 422,
            // The request is fine; the namespace's current usage leaves no room for it.
            Rejection::QuotaExceeded(_) => 409,
            // Held by another workload: free once that one goes or names another host.
            Rejection::HostHeld { .. } => 409,
            Rejection::ArtifactNotFound(_) | Rejection::NotFound(_) | Rejection::NoRoute(_) => 404,
            Rejection::ArtifactMismatch(_) => 422,
            Rejection::MethodNotAllowed(_) => 405,
            Rejection::Timeout(_) => 503,
            Rejection::Hub(_) => 502,
            Rejection::NotReady => 503,
            Rejection::TooManyFailedAuths { .. } | Rejection::TooManyRequests { .. } => 429,
            Rejection::Busy(_) => 503,
            Rejection::Internal(_) => 500,
        }
    }

    /// Stable name: the JSON body's `reason`, the metrics' `outcome`, the audit outcome.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::Unauthenticated(_) => "Unauthenticated",
            Rejection::Forbidden(_) => "Forbidden",
            Rejection::TooLarge { .. } => "TooLarge",
            Rejection::BadRequest(_) => "BadRequest",
            Rejection::Invalid { .. } => "Invalid",
            Rejection::QuotaExceeded(_) => "QuotaExceeded",
            Rejection::HostHeld { .. } => "HostHeld",
            Rejection::ArtifactNotFound(_) => "ArtifactNotFound",
            Rejection::ArtifactMismatch(_) => "ArtifactChecksumMismatch",
            Rejection::NotFound(_) => "NotFound",
            Rejection::NoRoute(_) => "NoRoute",
            Rejection::MethodNotAllowed(_) => "MethodNotAllowed",
            Rejection::Timeout(_) => "Timeout",
            Rejection::Hub(_) => "HubError",
            Rejection::NotReady => "NotReady",
            Rejection::TooManyFailedAuths { .. } => "TooManyFailedAuthentications",
            Rejection::TooManyRequests { .. } => "TooManyRequests",
            Rejection::Busy(_) => "Busy",
            Rejection::Internal(_) => "Internal",
        }
    }

    /// Seconds the caller should wait before asking again (the `Retry-After` header).
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Rejection::TooManyFailedAuths {
                retry_after_secs, ..
            }
            | Rejection::TooManyRequests {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            Rejection::Busy(_) => Some(1),
            _ => None,
        }
    }

    pub fn details(&self) -> Vec<Detail> {
        match self {
            Rejection::Invalid { details, .. } => details.clone(),
            Rejection::HostHeld { host, holder } => vec![Detail::field(
                "spec.ingress.host",
                format!("{host:?} is held by {holder}"),
            )],
            Rejection::QuotaExceeded(q) => q
                .rows
                .iter()
                .map(|r| Detail::Quota {
                    quota: q.quota.clone(),
                    resource: r.resource.to_string(),
                    requested: r.requested.clone(),
                    used: r.used.clone(),
                    hard: r.hard.clone(),
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    pub fn reply(&self) -> super::wire::ErrorReply {
        super::wire::ErrorReply {
            error: self.to_string(),
            reason: self.reason().to_string(),
            details: self.details(),
        }
    }

    /// The reply as JSON.
    pub fn body(&self) -> Value {
        serde_json::to_value(self.reply()).unwrap_or_default()
    }

    pub fn invalid(message: impl Into<String>, details: Vec<Detail>) -> Rejection {
        Rejection::Invalid {
            message: message.into(),
            details,
        }
    }
}

impl From<Invalid> for Rejection {
    fn from(e: Invalid) -> Rejection {
        Rejection::Invalid {
            message: format!(
                "the resource is invalid ({} error{})",
                e.errors.len(),
                if e.errors.len() == 1 { "" } else { "s" }
            ),
            details: e
                .errors
                .iter()
                .map(|f| Detail::field(&f.field, &f.message))
                .collect(),
        }
    }
}

impl From<ParseError> for Rejection {
    fn from(e: ParseError) -> Rejection {
        let detail = match &e {
            ParseError::Syntax {
                line,
                column,
                message,
            } => Detail::Field {
                field: "resource".into(),
                message: message.clone(),
                line: Some(*line),
                column: Some(*column),
            },
            ParseError::Empty => Detail::field("resource", "is empty"),
            ParseError::OverBudget(b) => Detail::field("resource", b.to_string()),
            ParseError::NotAResource { message, .. } => Detail::field("resource", message),
            ParseError::UnknownKind { kind, expected, .. } => Detail::field(
                "kind",
                format!("unknown kind {kind:?}; expected one of {expected}"),
            ),
            ParseError::WrongApiVersion {
                expected, found, ..
            } => Detail::field("apiVersion", format!("must be {expected:?}, not {found:?}")),
            ParseError::Field { error, .. } => Detail::Field {
                field: error.field.clone().unwrap_or_else(|| "resource".into()),
                message: error.message.clone(),
                line: error.line,
                column: error.column,
            },
            ParseError::UnknownField { field, .. } => Detail::field(field, "unknown field"),
        };
        Rejection::Invalid {
            message: format!("the resource cannot be read: {e}"),
            details: vec![detail],
        }
    }
}

impl From<ArtifactError> for Rejection {
    fn from(e: ArtifactError) -> Rejection {
        match &e {
            ArtifactError::BadReference { field, message } => Rejection::Invalid {
                message: e.to_string(),
                details: vec![Detail::field(*field, message)],
            },
            ArtifactError::NotFound(_) => Rejection::ArtifactNotFound(e.to_string()),
            ArtifactError::NoChecksum { .. } | ArtifactError::ChecksumMismatch { .. } => {
                Rejection::ArtifactMismatch(e.to_string())
            }
            ArtifactError::TooLarge { .. } | ArtifactError::NotText { .. } => Rejection::invalid(
                e.to_string(),
                vec![Detail::field("artifact", e.to_string())],
            ),
            ArtifactError::Exists { .. } | ArtifactError::Io { .. } => {
                Rejection::Internal(e.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_rejection_has_a_json_body_with_error_reason_and_details() {
        let r = Rejection::from(Invalid::one("spec.replicas", "must be at least 0"));
        assert_eq!(r.status(), 422);
        let b = r.body();
        assert_eq!(b["reason"], "Invalid");
        assert_eq!(b["details"][0]["field"], "spec.replicas");
        assert_eq!(b["details"][0]["message"], "must be at least 0");
        assert!(b["details"][0].get("line").is_none());
        let r = Rejection::from(AuthError::Missing);
        assert_eq!((r.status(), r.body()["details"].clone()), (401, json!([])));
        assert_eq!(Rejection::TooLarge { limit: 10 }.status(), 413);
    }

    #[test]
    fn parse_errors_keep_the_field_path() {
        let e = crate::api::parse::parse_one(
            "apiVersion: compute.pinterest.com/v1alpha1\nkind: PinterestService\nmetadata: {name: a}\nspec: {replicas: many}\n",
        )
        .unwrap_err();
        let r = Rejection::from(e);
        assert_eq!(r.status(), 422);
        let d = &r.body()["details"][0];
        assert_eq!(d["field"], "spec.replicas", "{d}");
        assert_eq!(
            (d["line"].as_u64(), d["column"].as_u64()),
            (Some(4), Some(18)),
            "{d}"
        );
        assert!(
            d["message"]
                .as_str()
                .unwrap()
                .starts_with("invalid type: string \"many\""),
            "{d}"
        );
        let e =
            crate::api::parse::parse_one("kind: Deployment\napiVersion: apps/v1\n").unwrap_err();
        assert_eq!(Rejection::from(e).body()["details"][0]["field"], "kind");
    }
}

//! Bound ServiceAccount tokens and the kubeconfigs that carry them, shared by the hub
//! (its token for each push member) and a pull member's agent (its token for the hub):
//! both renew their own token before it expires.

use base64::Engine;
use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The `iat` and `exp` claims (seconds) of a JWT, without checking its signature (the
/// member's API server does that); `None` when it is not a JWT with both.
pub fn token_lifetime(token: &str) -> Option<(i64, i64)> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    Some((claims["iat"].as_i64()?, claims["exp"].as_i64()?))
}

/// Whether a token is due for renewal at `now`: two thirds of its life gone. Tokens that
/// do not expire (the legacy Secret kind, or a user's own) are due at once, so a member
/// joined by an older pinfed moves to an expiring token.
pub fn renewal_due(token: &str, now: i64) -> bool {
    match token_lifetime(token) {
        Some((iat, exp)) if exp > iat => now >= iat + (exp - iat) * 2 / 3,
        _ => true,
    }
}

/// The bearer token of a kubeconfig's first user, if it has one.
pub fn kubeconfig_token(text: &str) -> Option<String> {
    let kc = kube::config::Kubeconfig::from_yaml(text).ok()?;
    kc.auth_infos
        .iter()
        .find_map(|a| a.auth_info.as_ref()?.token.as_ref())
        .map(|t| {
            use secrecy::ExposeSecret;
            t.expose_secret().to_string()
        })
}

/// The same kubeconfig with every user's token replaced.
pub fn with_token(text: &str, token: &str) -> Option<String> {
    let old = kubeconfig_token(text)?;
    Some(text.replace(&old, token))
}

/// A fresh token of the ServiceAccount `namespace/name`, valid for `seconds` (as whoever
/// `client` authenticates: an admin, or the ServiceAccount itself with its current token).
pub async fn request_service_account_token(
    client: &Client,
    namespace: &str,
    name: &str,
    seconds: i64,
) -> Result<String, kube::Error> {
    request_bound_token(client, namespace, name, seconds, None).await
}

/// A Secret a token is bound to: the token is refused once the Secret is gone (or was
/// made again: the uid differs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundSecret {
    pub name: String,
    pub uid: String,
}

/// A token for ServiceAccount `namespace/name` lasting `seconds`, bound to `bound` (in
/// the same namespace) when given.
pub async fn request_bound_token(
    client: &Client,
    namespace: &str,
    name: &str,
    seconds: i64,
    bound: Option<&BoundSecret>,
) -> Result<String, kube::Error> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let req = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(seconds),
            bound_object_ref: bound.map(|b| {
                k8s_openapi::api::authentication::v1::BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Secret".into()),
                    name: Some(b.name.clone()),
                    uid: Some(b.uid.clone()),
                }
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let got = api
        .create_token_request(name, &PostParams::default(), &req)
        .await?;
    Ok(got.status.and_then(|s| s.token).unwrap_or_default())
}

/// Who the API server says `client` is (SelfSubjectReview).
pub async fn who_am_i(client: &Client) -> Result<String, kube::Error> {
    let who = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    Ok(who
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default())
}

/// A client from a kubeconfig text (its current context), behind the write gate, with
/// timeouts that fail fast on a cluster out of reach.
pub async fn client_from_kubeconfig(text: &str) -> Result<Client, String> {
    client_with_read_timeout(text, std::time::Duration::from_secs(20)).await
}

/// A client from a kubeconfig text for watches only: its read timeout outlasts the watch's
/// own server-side timeout (`controller::watch::config`), so an idle watch ends cleanly
/// and resumes, where the 20 s of [`client_from_kubeconfig`] cut it with an error two or
/// three times a minute on every watch of every member.
pub async fn watch_client_from_kubeconfig(text: &str) -> Result<Client, String> {
    client_with_read_timeout(text, crate::controller::watch::READ_TIMEOUT).await
}

async fn client_with_read_timeout(
    text: &str,
    read_timeout: std::time::Duration,
) -> Result<Client, String> {
    let kc = Kubeconfig::from_yaml(text).map_err(|e| e.to_string())?;
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    // A lost cluster must fail fast, not hang the loops that talk to it; but a loaded
    // one takes seconds to accept a TLS connection (3 s failed bursts of requests).
    cfg.connect_timeout = Some(std::time::Duration::from_secs(10));
    cfg.read_timeout = Some(read_timeout);
    crate::controller::write_gate::client(cfg).map_err(|e| e.to_string())
}

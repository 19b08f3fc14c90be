//! The hub's token for a member expires. `pinfed join` asks the member for a bound
//! ServiceAccount token (TokenRequest, no `service-account-token` Secret); the hub's
//! member loop asks for a fresh one once two thirds of its life are gone and stores it in
//! the member's kubeconfig Secret on the hub, which reconnects to the member with it.
//! A member out of reach for longer than a token's life needs `pinfed join` again.

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};

use crate::api::federation::MemberCluster;
use crate::controller::cluster_side::MEMBER_NAMESPACE;
pub use crate::controller::tokens::{
    kubeconfig_token, renewal_due, request_service_account_token, token_lifetime, who_am_i,
    with_token,
};
use crate::hub::join::HUB_SERVICE_ACCOUNT;
use crate::hub::members::{HUB_NAMESPACE, KUBECONFIG_KEY};

/// How long a member token lives. The API server may cap it
/// (`--service-account-max-token-expiration`); renewal goes by the token's own claims.
pub const MEMBER_TOKEN_SECS: i64 = 3 * 24 * 3600;
const FIELD_MANAGER: &str = "pinfed-hub-token";

/// Asks a member for a fresh token of the hub's ServiceAccount (as whoever `member`
/// authenticates: the joining admin, or the hub with its current token).
pub async fn request_token(member: &Client) -> Result<String, kube::Error> {
    request_service_account_token(
        member,
        MEMBER_NAMESPACE,
        HUB_SERVICE_ACCOUNT,
        MEMBER_TOKEN_SECS,
    )
    .await
}

/// The token of the member's kubeconfig Secret on the hub when it is for the same API
/// server, not due for renewal, and still accepted there as the hub's identity.
pub async fn reusable_token(hub: &Client, req: &crate::hub::join::JoinRequest) -> Option<String> {
    let secret = Api::<Secret>::namespaced(hub.clone(), HUB_NAMESPACE)
        .get_opt(&crate::hub::join::member_secret_name(&req.name))
        .await
        .ok()??;
    let text = String::from_utf8(secret.data?.get(KUBECONFIG_KEY)?.0.clone()).ok()?;
    let token = kubeconfig_token(&text)?;
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    if renewal_due(&token, now) || text != crate::hub::join::member_kubeconfig(req, &token) {
        return None;
    }
    // Bound tokens die with their ServiceAccount: ask the member who this token is.
    let client = crate::hub::members::client_from_kubeconfig(&req.name, &text)
        .await
        .ok()?;
    let user = who_am_i(&client).await.ok()?;
    (user == format!("system:serviceaccount:{MEMBER_NAMESPACE}:{HUB_SERVICE_ACCOUNT}"))
        .then_some(token)
}

/// Renews the hub's token for `mc` when due: a new token from the member, written into
/// the kubeconfig Secret on the hub. Returns whether it renewed.
pub async fn renew_if_due(
    hub: &Client,
    member: &Client,
    mc: &MemberCluster,
    kubeconfig: &str,
) -> anyhow::Result<bool> {
    let Some(token) = kubeconfig_token(kubeconfig) else {
        return Ok(false);
    };
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    if !renewal_due(&token, now) {
        return Ok(false);
    }
    let fresh = request_token(member).await?;
    anyhow::ensure!(!fresh.is_empty(), "the member returned an empty token");
    let text = with_token(kubeconfig, &fresh)
        .ok_or_else(|| anyhow::anyhow!("the kubeconfig has no token to replace"))?;
    let Some(r) = mc.spec.secret_ref.as_ref() else {
        return Ok(false);
    };
    let ns = r.namespace.as_deref().unwrap_or(HUB_NAMESPACE);
    let patch = serde_json::json!({
        "data": {KUBECONFIG_KEY: base64::engine::general_purpose::STANDARD.encode(text)}
    });
    Api::<Secret>::namespaced(hub.clone(), ns)
        .patch(
            &r.name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Merge(&patch),
        )
        .await?;
    tracing::info!(member = %mc.name_any(), "renewed the hub's token for the member");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(iat: i64, exp: i64) -> String {
        let enc = |v: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        format!(
            "{}.{}.sig",
            enc(serde_json::json!({"alg": "RS256"})),
            enc(serde_json::json!({"iat": iat, "exp": exp, "sub": "x"}))
        )
    }

    #[test]
    fn tokens_are_renewed_after_two_thirds_of_their_life() {
        let t = jwt(1_000, 4_000);
        assert_eq!(token_lifetime(&t), Some((1_000, 4_000)));
        assert!(!renewal_due(&t, 1_000));
        assert!(!renewal_due(&t, 2_999));
        assert!(renewal_due(&t, 3_000));
        assert!(renewal_due(&t, 5_000), "an expired token is due too");
    }

    #[test]
    fn tokens_without_an_expiry_are_due_at_once() {
        assert!(renewal_due("not-a-jwt", 0));
        let enc = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::json!({"sub": "legacy"}).to_string());
        assert!(renewal_due(&format!("h.{enc}.s"), 0));
    }

    #[test]
    fn the_kubeconfig_token_is_found_and_replaced() {
        let req = crate::hub::join::JoinRequest {
            name: "use1a".into(),
            region: None,
            zone: None,
            labels: Default::default(),
            weight: None,
            server: "https://127.0.0.1:6443".into(),
            ca_pem: b"ca".to_vec(),
            schemas: Default::default(),
        };
        let text = crate::hub::join::member_kubeconfig(&req, "old-token");
        assert_eq!(kubeconfig_token(&text).as_deref(), Some("old-token"));
        let renewed = with_token(&text, "new-token").unwrap();
        assert_eq!(kubeconfig_token(&renewed).as_deref(), Some("new-token"));
        assert!(!renewed.contains("old-token"));
    }
}

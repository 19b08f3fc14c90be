//! A slice its kind cannot take (a field of the wrong type, say, in a member whose CRDs
//! leave the spec open to the API server): refused with `Invalid` (reason
//! `Undecodable`, the field that failed in the message) and a Warning Event, and left
//! alone until it changes. The watch is untyped, so the kind's other slices go on.
use super::*;
use crate::controller::compact::Undecodable;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::PartialObjectMeta;

pub const UNDECODABLE: &str = "Undecodable";

/// Refuses the slice `meta` whose cached JSON is `body`.
pub async fn undecodable<K: AgentKind>(
    ctx: &Context,
    meta: &PartialObjectMeta<K>,
    body: &[u8],
    why: Undecodable,
) -> Result<Action, AgentError> {
    let ns = meta
        .metadata
        .namespace
        .clone()
        .ok_or(AgentError::NoNamespace)?;
    let name = meta.metadata.name.clone().unwrap_or_default();
    let message = why.to_string();
    // The status may be the part that does not decode: then it starts afresh.
    let status: Option<K::Status> = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("status").cloned())
        .and_then(|s| serde_json::from_value(s).ok());
    let mut stored = StoredStatus::of(
        ctx,
        format!("{}/{ns}/{name}", K::KIND), // slice_key's form
        meta.metadata.resource_version.clone(),
        status,
    );
    let now = Time(Timestamp::now());
    if let Some(status) = invalid_status::<K>(
        stored.status.clone(),
        stored.status.clone().unwrap_or_default(),
        meta.metadata.generation,
        UNDECODABLE,
        &message,
        &now,
    ) {
        stored.write_at::<K>(ctx, &ns, &name, &status).await?;
        let reference = ObjectReference {
            api_version: Some(K::api_version(&()).into_owned()),
            kind: Some(K::kind(&()).into_owned()),
            namespace: Some(ns.clone()),
            name: Some(name.clone()),
            uid: meta.metadata.uid.clone(),
            resource_version: meta.metadata.resource_version.clone(),
            ..Default::default()
        };
        publish_to(
            ctx,
            &reference,
            EventType::Warning,
            UNDECODABLE,
            message.clone(),
        )
        .await;
        ctx.metrics.refused(K::KIND.as_str(), UNDECODABLE);
        tracing::info!(kind = %K::KIND, object = %format!("{ns}/{name}"), %message, "cannot decode; waiting for a change");
    }
    Ok(Action::await_change())
}

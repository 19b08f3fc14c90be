//! A hub workload its kind cannot decode — stored by an older or newer pinfed, or let in
//! by a schema looser than the type: marked Invalid (reason `Undecodable`, the field that
//! failed in the message) with a Warning Event, and left as it is until it changes. The
//! watch is untyped, so the kind's other workloads go on; nothing is decided from what
//! cannot be read, so its recorded placement and its slices in the members stay as they
//! are (the status write changes only the conditions).
use kube::Resource;
use kube::api::{ApiResource, DynamicObject};

use super::*;
use crate::api::common::Condition;
use crate::controller::compact::Undecodable;

pub const UNDECODABLE: &str = "Undecodable";

/// The hub resource `meta`, whose cached JSON is `body`, cannot be decoded for `why`.
pub(super) async fn refuse<K: PinterestKind>(
    ctx: &HubContext,
    meta: &PartialObjectMeta<K>,
    body: &[u8],
    why: Undecodable,
) -> Result<Action, HubError> {
    let ns = meta.metadata.namespace.clone().unwrap_or_default();
    let name = meta.metadata.name.clone().unwrap_or_default();
    let message = why.to_string();
    let now = Time(Timestamp::now());
    let Some(conditions) = conditions(body, meta.metadata.generation, &message, &now) else {
        return Ok(Action::await_change());
    };
    // A merge patch of the conditions alone (the recorded placement stays: the next
    // decodable generation decides from it). Not an apply: server-side apply cannot
    // take an object whose stored spec its schema does not match.
    write_conditions::<K>(ctx, &meta.metadata, &conditions).await?;
    let ev = Event {
        type_: EventType::Warning,
        reason: UNDECODABLE.into(),
        note: Some(message.clone()),
        action: UNDECODABLE.into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &meta.object_ref(&())).await {
        tracing::debug!(workload = %format!("{}/{ns}/{name}", K::KIND), error = %e, "event not recorded");
    }
    ctx.metrics.refused(K::KIND.as_str(), UNDECODABLE);
    tracing::warn!(kind = %K::KIND, workload = %format!("{ns}/{name}"), %message, "cannot decode; waiting for a change");
    Ok(Action::await_change())
}

/// Once `obj` decodes again: drops the Invalid condition [`refuse`] wrote, if it is
/// there. The hub's status apply would not: a merge patch wrote it, not the apply's
/// field manager, so the apply that leaves it out leaves it in place.
pub(super) async fn clear<K: PinterestKind>(ctx: &HubContext, obj: &K) -> Result<(), HubError> {
    let Some(stored) = obj.status().map(K::conditions_of) else {
        return Ok(());
    };
    let marked = |c: &Condition| {
        c.type_ == crate::api::common::condition_types::INVALID && c.reason == UNDECODABLE
    };
    if !stored.iter().any(marked) {
        return Ok(());
    }
    let left: Vec<Condition> = stored.iter().filter(|c| !marked(c)).cloned().collect();
    write_conditions::<K>(ctx, obj.meta(), &left).await
}

/// Writes the conditions of the hub resource `meta`, the rest of its status as it is.
async fn write_conditions<K: PinterestKind>(
    ctx: &HubContext,
    meta: &kube::api::ObjectMeta,
    conditions: &[Condition],
) -> Result<(), HubError> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        ctx.hub.clone(),
        meta.namespace.as_deref().unwrap_or_default(),
        &ApiResource::erase::<K>(&()),
    );
    let params = PatchParams {
        field_manager: Some(HUB_FIELD_MANAGER.into()),
        ..Default::default()
    };
    // Part of the status: the record of own writes cannot stand in for it.
    ctx.own_writes.forget(&meta_key::<K>(meta));
    api.patch_status(
        meta.name.as_deref().unwrap_or_default(),
        &params,
        &Patch::Merge(serde_json::json!({"status": {"conditions": conditions}})),
    )
    .await
    .map_err(HubError::WriteStatus)?;
    Ok(())
}

/// The stored conditions (read from `body` as far as they decode) marked Invalid for
/// `message`; `None` when they say so already for this generation.
fn conditions(
    body: &[u8],
    generation: Option<i64>,
    message: &str,
    now: &Time,
) -> Option<Vec<Condition>> {
    let mut conditions = stored_conditions(body);
    if crate::api::common::says_invalid(&conditions, message, generation) {
        return None;
    }
    crate::api::common::set_refused_conditions(
        &mut conditions,
        UNDECODABLE,
        message,
        generation,
        now,
    );
    Some(conditions)
}

/// The conditions stored in `body`'s status, as far as they decode (else none).
pub(super) fn stored_conditions(body: &[u8]) -> Vec<Condition> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.pointer("/status/conditions").cloned())
        .and_then(|c| serde_json::from_value(c).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::{ConditionStatus, condition_types as ct, find_condition};

    #[test]
    fn an_undecodable_workload_is_marked_once_per_generation_and_message_keeping_other_conditions()
    {
        let now = Time(Timestamp::UNIX_EPOCH);
        let body = serde_json::json!({
            "spec": {"owner": "ads"},
            "status": {"placement": {"clusters": []}, "conditions": [
                {"type": "Placed", "status": "True", "reason": "Placed", "message": "",
                 "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}
            ]}
        })
        .to_string();
        let marked = conditions(body.as_bytes(), Some(2), "spec.owner: no", &now)
            .expect("not said yet: marked");
        let invalid = find_condition(&marked, ct::INVALID).unwrap();
        assert_eq!(
            (invalid.status, invalid.reason.as_str()),
            (ConditionStatus::True, UNDECODABLE)
        );
        assert_eq!(invalid.observed_generation, Some(2));
        assert!(
            find_condition(&marked, "Placed").is_some(),
            "other conditions kept"
        );
        let stored = serde_json::json!({"status": {"conditions": marked}}).to_string();
        assert_eq!(
            conditions(stored.as_bytes(), Some(2), "spec.owner: no", &now),
            None,
            "said already for this generation and message"
        );
        assert!(conditions(stored.as_bytes(), Some(3), "spec.owner: no", &now).is_some());
        assert!(conditions(stored.as_bytes(), Some(2), "spec.other: no", &now).is_some());
        // A status that does not decode either starts afresh.
        let broken = serde_json::json!({"status": {"conditions": "x"}}).to_string();
        assert!(conditions(broken.as_bytes(), Some(1), "m", &now).is_some());
    }
}

//! The hub: member registry and health, placement, slices and status aggregation.

pub mod cleanups;
pub mod join;
pub mod member_loop;
pub mod members;
pub mod quota;
pub mod slices;
pub mod unjoin;
pub mod workloads;

/// Creates a namespace if it does not exist (server-side apply, idempotent).
pub async fn ensure_namespace(
    client: &kube::Client,
    name: &str,
) -> Result<(), crate::controller::apply::ApplyError> {
    let ns =
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    crate::controller::apply::apply_json(client, &ns, crate::controller::apply::HUB_FIELD_MANAGER)
        .await?;
    Ok(())
}

//! Stage 4, **judge**: the member's admins decide what pinfed may run here (a refused
//! workload gets nothing created or changed; what already runs of it stays), and the
//! ConfigMaps and Secrets the pods reference are materialized from the hub's bundles.
use super::*;

/// Ends the reconcile on a refusal or a clash; else the bundles not there yet.
pub(super) async fn judge<K: AgentKind>(
    ctx: &Context,
    slice: &mut Slice<'_, K>,
    built: &Built,
) -> Result<Step<Vec<crate::expand::bundle::ConfigRef>>, AgentError> {
    let bodies: Vec<(&str, &str, &serde_json::Value)> = built
        .objects
        .iter()
        .map(|o| {
            (
                o.types.as_ref().map(|t| t.kind.as_str()).unwrap_or(""),
                o.metadata.name.as_deref().unwrap_or(""),
                &o.data,
            )
        })
        .collect();
    let verdict = ctx
        .policy
        .judge(&ctx.client, &slice.ns, K::KIND, &bodies)
        .instrument(tracing::trace_span!(target: "pinfed::trace", "policy"))
        .await
        .map_err(AgentError::Observe)?;
    let refusal = match verdict {
        crate::agent::policy::Verdict::Admit => None,
        crate::agent::policy::Verdict::Refuse(r) => Some((r.reason(), r.to_string())),
        crate::agent::policy::Verdict::PolicyBroken(e) => Some((
            "MemberPolicyUnreadable",
            format!(
                "the member policy cannot be read ({e}); nothing new is created until its admins fix it"
            ),
        )),
    };
    if let Some((reason, message)) = refusal {
        ctx.metrics.refused(K::KIND.as_str(), reason);
        return Ok(Step::Done(slice.invalid(ctx, reason, &message).await?));
    }
    let materialized = crate::agent::bundles::materialize(
        &ctx.client,
        &ctx.claims,
        &ctx.bundle_users,
        K::KIND,
        slice.obj,
    )
    .instrument(tracing::trace_span!(target: "pinfed::trace", "bundles"))
    .await?;
    if let Some(clash) = materialized.clash {
        ctx.metrics.refused(K::KIND.as_str(), "Conflict");
        slice.invalid(ctx, "Conflict", &clash).await?;
        return Ok(Step::Done(Action::requeue(CONFLICT_RECHECK)));
    }
    Ok(Step::Next(materialized.missing))
}

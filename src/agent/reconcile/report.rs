//! Stage 6, **report**: the slice's status from the native objects (as this apply left
//! them), written when it changed, and when to look again.
use super::*;
use crate::agent::status_hold::Hold;
use std::time::Instant;

pub(super) async fn report<K: AgentKind>(
    ctx: &Context,
    mut slice: Slice<'_, K>,
    read: Read,
    recorded: &Recorded<K>,
    missing: &[crate::expand::bundle::ConfigRef],
) -> Result<Action, AgentError> {
    let obj = slice.obj;
    let uid = obj.uid().unwrap_or_default();
    // The controllers' objects were read before this apply: one our apply just moved to
    // a new generation counts as that generation, so its status (from before) reports no
    // replica of the new template updated yet.
    let Read {
        profile,
        mut observed,
    } = read;
    raise_to_applied(&ctx.applied, &uid, &mut observed);
    let generation = obj.meta().generation;
    let health = recorded.working.observe(&observed, &mut slice.status);
    K::set_meta(&mut slice.status, generation, &profile.spec.version);
    status::set_health_conditions(
        K::conditions(&mut slice.status),
        &health,
        generation,
        &slice.now,
    );
    // A changed status that only says the pods are still coming up may wait a moment: a
    // later one replaces it, and the end of the progress is written at once.
    if slice.stored.status.as_ref() != Some(&slice.status)
        && let Hold::Wait(after) = ctx
            .status_hold
            .decide(&uid, K::KIND, &health, Instant::now())
    {
        let kind = crate::controller::metrics::KindLabels {
            kind: K::KIND.as_str().to_string(),
        };
        ctx.metrics.statuses_held.get_or_create(&kind).inc();
        return Ok(Action::requeue(after));
    }
    slice
        .stored
        .write(ctx, obj, &slice.status)
        .instrument(tracing::trace_span!(target: "pinfed::trace", "write_status"))
        .await?;
    // Owned-object watches bring changes; the timer is a safety net. A bundle not there
    // yet is looked for again soon.
    if recorded.held {
        // The hub's renewal or its rewrite of the slice ends the hold; neither is an
        // event of this workload.
        Ok(Action::requeue(FENCE_RECHECK))
    } else if missing.is_empty() {
        Ok(Action::requeue(Duration::from_secs(300)))
    } else {
        Ok(Action::requeue(Duration::from_secs(5)))
    }
}

/// Gives each workload controller object in `observed` the generation our last apply
/// left it at, when the copy read is older.
fn raise_to_applied(book: &crate::agent::applied::AppliedBook, uid: &str, observed: &mut Observed) {
    fn raise(
        book: &crate::agent::applied::AppliedBook,
        uid: &str,
        kind: &str,
        meta: &mut kube::api::ObjectMeta,
    ) {
        let name = meta.name.clone().unwrap_or_default();
        if let Some(g) = book.generation(uid, kind, &name)
            && meta.generation < Some(g)
        {
            meta.generation = Some(g);
        }
    }
    for d in &mut observed.deployments {
        raise(book, uid, "Deployment", &mut d.metadata);
    }
    for s in &mut observed.statefulsets {
        raise(book, uid, "StatefulSet", &mut s.metadata);
    }
    for d in &mut observed.daemonsets {
        raise(book, uid, "DaemonSet", &mut d.metadata);
    }
}

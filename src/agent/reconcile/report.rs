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
    // later one replaces it, and the end of the progress is written at once — and so is
    // a slice that was Ready and is no longer (the hub's failovers act on that).
    let was_ready = slice.stored.status.as_ref().is_some_and(|s| {
        find_condition(K::conditions_of(s), ct::READY)
            .is_some_and(|c| c.status == ConditionStatus::True)
    });
    // An application failover that tolerates less than the hold needs the report sooner:
    // at half its toleration at the latest.
    let cap = obj
        .placement()
        .failover
        .as_ref()
        .and_then(|f| f.application.as_ref())
        .map(|a| Duration::from_secs(u64::try_from(a.toleration_seconds() / 2).unwrap_or(0)));
    let held_since = ctx.status_hold.since(&uid);
    if slice.stored.status.as_ref() != Some(&slice.status)
        && let Hold::Wait(after) =
            ctx.status_hold
                .decide(&uid, K::KIND, &health, was_ready, cap, Instant::now())
    {
        let kind = crate::controller::metrics::KindLabels {
            kind: K::KIND.as_str().to_string(),
        };
        ctx.metrics.statuses_held.get_or_create(&kind).inc();
        return Ok(Action::requeue(after));
    }
    // Written when its hold ran out, still in progress: its conditions turned when the
    // progress was first seen, not now (an application failover's toleration counts
    // from there).
    if let Some(first) = held_since
        && !crate::agent::status_hold::settles(&health)
    {
        let ago = Instant::now().saturating_duration_since(first);
        backdate(K::conditions(&mut slice.status), &slice.now, ago);
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

/// Moves the transition time of each condition that turned at `now` back by `ago`.
fn backdate(conditions: &mut [crate::api::common::Condition], now: &Time, ago: Duration) {
    let Ok(ago) = k8s_openapi::jiff::SignedDuration::try_from(ago) else {
        return;
    };
    let Ok(then) = now.0.checked_sub(ago) else {
        return;
    };
    for c in conditions {
        if c.last_transition_time == *now {
            c.last_transition_time = Time(then);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::Condition;

    #[test]
    fn a_held_status_keeps_when_its_conditions_turned_not_when_it_was_written() {
        let t = |s: i64| Time(Timestamp::from_second(s).unwrap());
        let now = t(1_000);
        let mut conditions = vec![
            Condition::new(
                "Ready",
                ConditionStatus::False,
                "Progressing",
                "",
                None,
                &now,
            ),
            Condition::new(
                "Degraded",
                ConditionStatus::False,
                "Healthy",
                "",
                None,
                &t(500),
            ),
        ];
        backdate(&mut conditions, &now, Duration::from_secs(20));
        assert_eq!(
            conditions[0].last_transition_time,
            t(980),
            "turned in the hold"
        );
        assert_eq!(
            conditions[1].last_transition_time,
            t(500),
            "turned before: as it was"
        );
    }
}

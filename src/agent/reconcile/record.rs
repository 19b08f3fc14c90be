//! Stage 2, **record**: a job set's finished shards folded into its status before any Job
//! can be pruned or cleaned up, and which shards may start (the fence: none new unless
//! the hub vouches for the slice now).
use super::*;

/// What the record stage hands on.
pub(super) struct Recorded<K> {
    /// The slice as it is built: a job set's admitted shards written in, a priority
    /// class the member lacks taken off.
    pub working: K,
    /// Job sets: the shards that may run now.
    pub admitted: Option<crate::api::ranges::RangeSet>,
    /// Job sets: the shards done.
    pub completed: Option<crate::api::ranges::RangeSet>,
    /// New shards wait for the hub.
    pub held: bool,
}

pub(super) async fn record<K: AgentKind>(
    ctx: &Context,
    slice: &mut Slice<'_, K>,
    observed: &Observed,
) -> Result<Recorded<K>, AgentError> {
    let obj = slice.obj;
    let mut working = obj.clone();
    let mut held = false;
    let (admitted, completed) = match obj.as_workload().job_set() {
        Some(j) => {
            let (mut admitted, completed, occupied) = record_shards(
                ctx,
                obj,
                j,
                &mut working,
                &mut slice.stored,
                &mut slice.status,
                observed,
            )
            .await?;
            // The fence: no new shard unless the hub vouches for this slice now.
            if !admitted.difference(&occupied).is_empty()
                && let Err(hold) = may_start_shards(ctx, obj).await?
            {
                let new = admitted.difference(&occupied);
                tracing::info!(workload = %slice_key(obj), shards = %new, reason = %hold, "new shards wait for the hub");
                admitted = admitted.intersection(&occupied);
                held = true;
            }
            (Some(admitted), Some(completed))
        }
        None => (None, None),
    };
    Ok(Recorded {
        working,
        admitted,
        completed,
        held,
    })
}

/// How soon a job set whose new shards wait for the hub looks again.
pub(super) const FENCE_RECHECK: Duration = Duration::from_secs(2);

/// Whether the hub vouches for `obj`, a job-set slice, now (`controller::fence`): the
/// fence Lease as the member's API server has it.
async fn may_start_shards<K: AgentKind>(
    ctx: &Context,
    obj: &K,
) -> Result<Result<(), fence::Hold>, AgentError> {
    let lease = Api::<Lease>::namespaced(ctx.client.clone(), fence::FENCE_NAMESPACE)
        .get_opt(fence::FENCE_LEASE)
        .await
        .map_err(AgentError::Observe)?;
    Ok(fence::may_start(
        obj.meta(),
        lease.as_ref(),
        Timestamp::now(),
    ))
}

/// Folds a job set's finished shards into its status (written, with an Event for the
/// new ones) and admits the shards that may start now. Returns (admitted, completed,
/// shards that have a Job).
async fn record_shards<K: AgentKind>(
    ctx: &Context,
    obj: &K,
    j: &PinterestJobSet,
    working: &mut K,
    stored: &mut StoredStatus<K::Status>,
    status: &mut K::Status,
    observed: &Observed,
) -> Result<
    (
        crate::api::ranges::RangeSet,
        crate::api::ranges::RangeSet,
        crate::api::ranges::RangeSet,
    ),
    AgentError,
> {
    let account = shard_account(j, observed);
    working.observe(observed, status);
    let newly = account.completed.difference(
        &j.status
            .as_ref()
            .and_then(|s| s.completed_shards.as_deref())
            .and_then(|r| crate::api::ranges::RangeSet::parse(r).ok())
            .unwrap_or_default(),
    );
    // (Written first: an Event only for shards the status now records.)
    if stored.write(ctx, obj, status).await? && !newly.is_empty() {
        publish(
            ctx,
            obj,
            EventType::Normal,
            "ShardsCompleted",
            format!("shards {newly} completed"),
        )
        .await;
    }
    *working.status_mut() = Some(status.clone());
    let admitted = admit(working, &account)?;
    let occupied = account.running.union(&account.failed);
    Ok((admitted, account.completed, occupied))
}

fn admit<K: AgentKind>(
    working: &K,
    account: &crate::agent::status::ShardAccount,
) -> Result<crate::api::ranges::RangeSet, AgentError> {
    let Some(j) = working.as_workload().job_set() else {
        unreachable!("admit is only called for job sets")
    };
    let j: &PinterestJobSet = j;
    let pending = assigned_shards(j).difference(&account.completed);
    // Failed shards keep their Job (it records the failure); running ones keep theirs.
    let occupied = account.running.union(&account.failed);
    let parallelism = j.spec.parallelism.and_then(|p| u32::try_from(p).ok());
    Ok(expand::admit_shards(parallelism, &pending, &occupied))
}

//! Stage 3, **build**: the slice's native objects from the pure expansion engine, for
//! this member (its overrides, its PriorityClasses), without the Jobs already started.
use super::*;

/// What the build stage hands on.
pub(super) struct Built {
    pub objects: Vec<DynamicObject>,
    /// Jobs that exist already: kept as they run.
    pub started: Vec<(String, String)>,
}

pub(super) fn build<K: AgentKind>(
    ctx: &Context,
    recorded: &mut Recorded<K>,
    profile: &RuntimeProfile,
    observed: &Observed,
) -> Result<Built, expand::ExpandError> {
    let working = &mut recorded.working;
    // A priority class the member does not have stays off the pods (they would be
    // refused); the hub orders and preempts by it all the same.
    if let Some(class) = working.priority_class_name().map(|c| c.to_string())
        && ctx
            .priority_classes
            .get(&kube::runtime::reflector::ObjectRef::new(&class))
            .is_none()
    {
        tracing::debug!(workload = %slice_key(&*working), %class, "no such PriorityClass in this member: pods run without it");
        working.set_priority_class_name(None);
    }
    let input = ExpandInput {
        workload: working.as_workload(),
        profile: Some(profile),
        cluster: Some(&ctx.cluster),
        admitted_shards: recorded.admitted.as_ref(),
    };
    let objects = tracing::trace_span!(target: "pinfed::trace", "expand")
        .in_scope(|| expand::expand(&input))?;
    // A shard's Job, once created, runs the template it was created with (a Job's
    // template is immutable: an apply of another one is refused, and replacing it would
    // run the shard again). A new revision reaches the shards that start after it.
    let (objects, started) = leave_started_jobs(objects, observed);
    Ok(Built { objects, started })
}

/// The generated objects without the Jobs that exist already (returned apart, to keep):
/// those run as they were created.
fn leave_started_jobs(
    objects: Vec<DynamicObject>,
    observed: &Observed,
) -> (Vec<DynamicObject>, Vec<(String, String)>) {
    let existing: std::collections::BTreeSet<&str> = observed
        .jobs
        .iter()
        .filter_map(|j| j.metadata.name.as_deref())
        .collect();
    let mut started = Vec::new();
    let objects = objects
        .into_iter()
        .filter(|o| {
            let is_job = o.types.as_ref().is_some_and(|t| t.kind == "Job");
            let name = o.metadata.name.as_deref().unwrap_or("");
            if is_job && existing.contains(name) {
                started.push(("Job".to_string(), name.to_string()));
                false
            } else {
                true
            }
        })
        .collect();
    (objects, started)
}

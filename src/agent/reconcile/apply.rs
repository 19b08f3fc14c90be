//! Stage 5, **apply**: every generated object server-side applied (field manager
//! `pinfed-agent`; nothing of someone else's overwritten), unless the same objects were
//! applied moments ago, then what the workload no longer wants pruned.
use super::*;

pub(super) async fn apply<K: AgentKind>(
    ctx: &Context,
    slice: &mut Slice<'_, K>,
    observed: &Observed,
    completed: Option<&crate::api::ranges::RangeSet>,
    built: Built,
) -> Result<Step<()>, AgentError> {
    let obj = slice.obj;
    let Built { objects, started } = built;
    let digest = crate::agent::applied::digest(&objects)?;
    let uid = obj.uid().unwrap_or_default();
    let keep = if ctx.applied.unchanged(&uid, digest) {
        objects
            .iter()
            .map(|o| (api_resource(o).kind, o.name_any()))
            .collect()
    } else {
        // Nothing of someone else's is overwritten: a clash refuses the whole workload
        // before any object is applied.
        let claim = claim_objects(ctx, obj, &slice.ns, &objects).await?;
        if !matches!(claim, Claim::Leftover(_))
            && let Ok(mut waits) = ctx.leftover_waits.lock()
        {
            waits.remove(&uid);
        }
        let adopted = match claim {
            Claim::Adopt(adopted) => adopted,
            Claim::Clash(clash) => {
                ctx.metrics.refused(K::KIND.as_str(), "Conflict");
                slice.invalid(ctx, "Conflict", &clash).await?;
                return Ok(Step::Done(Action::requeue(CONFLICT_RECHECK)));
            }
            // Not the workload's fault, and gone in moments: no Invalid status for the
            // hub to act on, only a short wait (no watch brings the old objects' end).
            Claim::Leftover(what) => {
                tracing::info!(kind = %K::KIND, object = %key(obj), %what, "waiting for the objects of an earlier slice of this name to be garbage-collected");
                ctx.metrics
                    .leftover_waits
                    .get_or_create(&crate::controller::metrics::KindLabels {
                        kind: K::KIND.as_str().to_string(),
                    })
                    .inc();
                let first_look = ctx
                    .leftover_waits
                    .lock()
                    .is_ok_and(|mut waits| waits.insert(uid.clone()));
                if first_look {
                    publish(
                        ctx,
                        obj,
                        EventType::Normal,
                        "WaitingForLeftovers",
                        format!(
                            "{what} was made by pinfed for an earlier slice of this name, now gone; waiting for the \
                             member's garbage collector to remove it before applying (a Conflict if it is still \
                             there {} s after this slice was made)",
                            LEFTOVER_PATIENCE.as_secs()
                        ),
                    )
                    .await;
                }
                return Ok(Step::Done(Action::requeue(LEFTOVER_RECHECK)));
            }
        };
        let keep = apply_objects(ctx, &uid, &slice.ns, &objects, &adopted)
            .instrument(tracing::trace_span!(target: "pinfed::trace", "apply"))
            .await?;
        ctx.applied.record(&uid, digest);
        keep
    };
    let mut keep = keep;
    keep.extend(started);
    prune(ctx, obj, observed, completed, keep)
        .instrument(tracing::trace_span!(target: "pinfed::trace", "prune"))
        .await?;
    Ok(Step::Next(()))
}

/// How soon a workload whose object names clash with someone else's objects looks again
/// (the other object has none of our labels, so no watch brings its deletion).
pub(super) const CONFLICT_RECHECK: Duration = Duration::from_secs(10);

/// How soon a workload whose objects of an earlier slice of its name are still there (the
/// member's garbage collector removes them) looks again.
const LEFTOVER_RECHECK: Duration = Duration::from_secs(2);

/// How long after a slice was made the objects of an earlier slice of its name are waited
/// for; past it they are a conflict.
const LEFTOVER_PATIENCE: Duration = Duration::from_secs(300);

/// Whether slice `obj` was made longer than [`LEFTOVER_PATIENCE`] before `now`.
fn leftover_outlasted<K: AgentKind>(obj: &K, now: Timestamp) -> bool {
    obj.meta().creation_timestamp.as_ref().is_some_and(|t| {
        now.as_millisecond() - t.0.as_millisecond()
            > i64::try_from(LEFTOVER_PATIENCE.as_millis()).unwrap_or(i64::MAX)
    })
}

/// Whether a workload may apply its objects.
enum Claim {
    /// Yes; these (kind, name) are adopted first.
    Adopt(BTreeSet<(String, String)>),
    /// No: an object of one of its names is someone else's (to report; nothing written).
    Clash(String),
    /// Not yet: an object of one of its names is left from an earlier slice of this
    /// workload, removed and made again, and its garbage collection is pending.
    Leftover(String),
}

/// Checks that every object about to be applied is this workload's, new, or handed over
/// by the member's admin (`ADOPT_ANNOTATION`: adopted, with an Event).
async fn claim_objects<K: AgentKind>(
    ctx: &Context,
    obj: &K,
    ns: &str,
    objects: &[DynamicObject],
) -> Result<Claim, AgentError> {
    use crate::api::member_policy::{ADOPT_ANNOTATION, Ownership, ownership};
    let uid = obj.uid().unwrap_or_default();
    let workload = format!("{}/{}", K::KIND.as_str(), obj.name_any());
    // Once the owned-object watches have listed (an agent start), they answer for what
    // is ours, and only new names are looked up.
    while !ctx.owned.listed(K::KIND) && ctx.owned.age() < OWNED_LISTING_WAIT {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut adopted = BTreeSet::new();
    for o in objects {
        let ar = api_resource(o);
        let name = o.name_any();
        if ctx.owned.holds(K::KIND, &ar.kind, &uid, &name) {
            continue;
        }
        let existing = Api::<DynamicObject>::namespaced_with(ctx.client.clone(), ns, &ar)
            .get_metadata_opt(&name)
            .await
            .map_err(AgentError::Observe)?;
        let owners: Vec<_> = existing
            .iter()
            .flat_map(|m| m.metadata.owner_references.iter().flatten())
            .cloned()
            .collect();
        let empty = Default::default();
        let view = existing
            .as_ref()
            .map(|m| crate::api::member_policy::Existing {
                owners: &owners,
                labels: m.metadata.labels.as_ref().unwrap_or(&empty),
                annotations: m.metadata.annotations.as_ref().unwrap_or(&empty),
            });
        match ownership(view, &uid, &workload, None) {
            Ownership::Absent | Ownership::Ours => {}
            Ownership::Adoptable => {
                adopted.insert((ar.kind.clone(), name));
            }
            // Past the patience the collector is not coming (a finalizer holds it): a
            // conflict the member's admin must see.
            Ownership::Leftover if leftover_outlasted(obj, Timestamp::now()) => {
                return Ok(Claim::Clash(format!(
                    "{}/{name} in namespace {ns}, made by pinfed for an earlier {workload}, is still there \
                     {} s after this one was made: the member's garbage collector has not removed it \
                     (a finalizer may hold it). Nothing was applied.",
                    ar.kind,
                    LEFTOVER_PATIENCE.as_secs()
                )));
            }
            Ownership::Leftover => {
                return Ok(Claim::Leftover(format!("{}/{name}", ar.kind)));
            }
            Ownership::Foreign => {
                return Ok(Claim::Clash(format!(
                    "{}/{name} already exists in namespace {ns} and was not created by pinfed for {workload}: \
                     pinfed does not take it over (nothing was applied). Rename the workload, delete that object, \
                     or let a member admin hand it over: `pinfed adopt {}/{name} -n {ns} --to {workload}` \
                     (annotation {ADOPT_ANNOTATION}={workload})",
                    ar.kind, ar.kind
                )));
            }
        }
    }
    if !adopted.is_empty() {
        let names: Vec<String> = adopted.iter().map(|(k, n)| format!("{k}/{n}")).collect();
        publish(
            ctx,
            obj,
            EventType::Normal,
            "Adopted",
            format!(
                "took over {} as its member admin allowed ({ADOPT_ANNOTATION})",
                names.join(", ")
            ),
        )
        .await;
    }
    Ok(Claim::Adopt(adopted))
}

/// Makes an adopted object exactly the generated one: replaced whole (what the API
/// server allocated, such as a Service's cluster IP, it keeps), so none of its former
/// owner's fields linger beside ours; the apply that follows then owns every field.
async fn replace_for_adoption(
    api: &Api<DynamicObject>,
    generated: &DynamicObject,
) -> Result<(), kube::Error> {
    let existing = api.get(&generated.name_any()).await?;
    let mut body = generated.clone();
    body.metadata.resource_version = existing.metadata.resource_version.clone();
    api.replace(
        &generated.name_any(),
        &kube::api::PostParams {
            field_manager: Some(AGENT_FIELD_MANAGER.to_string()),
            ..Default::default()
        },
        &body,
    )
    .await?;
    Ok(())
}

/// After the first apply of an adopted object: only the agent's apply (and status
/// writers) own its fields, so a field the expansion later drops is removed.
async fn drop_other_owners(
    api: &Api<DynamicObject>,
    applied: &DynamicObject,
) -> Result<(), kube::Error> {
    let kept: Vec<_> = applied
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.subresource.is_some()
                || (m.manager.as_deref() == Some(AGENT_FIELD_MANAGER)
                    && m.operation.as_deref() == Some("Apply"))
        })
        .cloned()
        .collect();
    if kept.len() == applied.metadata.managed_fields.as_ref().map_or(0, Vec::len) {
        return Ok(());
    }
    let patch = serde_json::json!({"metadata": {"managedFields": kept,
        "resourceVersion": applied.metadata.resource_version}});
    api.patch(
        &applied.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// Server-side applies every generated object of the workload `uid`; returns (kind, name)
/// of each. The book of applied objects notes each one's fingerprint as the API server
/// returned it (to tell others' changes from ours later).
async fn apply_objects(
    ctx: &Context,
    uid: &str,
    ns: &str,
    objects: &[DynamicObject],
    adopted: &BTreeSet<(String, String)>,
) -> Result<Kept, AgentError> {
    let mut keep = BTreeSet::new();
    ctx.applied.begin(uid);
    for o in objects {
        let ar = api_resource(o);
        let oname = o.name_any();
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
        let apply_err = |source| AgentError::Apply {
            kind: ar.kind.clone(),
            name: oname.clone(),
            source,
        };
        let adopting = adopted.contains(&(ar.kind.clone(), oname.clone()));
        if adopting {
            replace_for_adoption(&api, o).await.map_err(apply_err)?;
        }
        let (params, patch) = (
            PatchParams::apply(AGENT_FIELD_MANAGER).force(),
            Patch::Apply(o),
        );
        let apply = || api.patch(&oname, &params, &patch);
        let (applied, took_back) = match apply().await {
            Ok(applied) => (applied, adopting),
            // Someone changed a key of a list our apply merges into (a Service's port by
            // hand): their entry and ours cannot stand together (two ports named `http`),
            // so no apply ever repairs it. The object is ours: take it back whole, as for
            // an adoption, then apply.
            Err(kube::Error::Api(s)) if s.code == 422 && !adopting => {
                tracing::info!(kind = %ar.kind, name = %oname, namespace = %ns, reason = %s.message,
                    "the object was changed so that an apply cannot merge; replacing it");
                replace_for_adoption(&api, o).await.map_err(apply_err)?;
                (apply().await.map_err(apply_err)?, true)
            }
            Err(e) => return Err(apply_err(e)),
        };
        if took_back {
            drop_other_owners(&api, &applied).await.map_err(apply_err)?;
        }
        ctx.metrics
            .applied_objects
            .get_or_create(&crate::controller::metrics::KindLabels {
                kind: ar.kind.clone(),
            })
            .inc();
        let fingerprint = ctx.applied.fingerprint(&o.metadata, &applied.metadata);
        ctx.applied
            .applied(uid, (ar.kind.clone(), oname.clone()), fingerprint);
        keep.insert((ar.kind.clone(), oname));
    }
    Ok(keep)
}

/// Prunes what the workload no longer wants — except what its completed shards leave
/// behind (finished Jobs wait for their TTL; see `completed_shard_objects`).
async fn prune<K: AgentKind>(
    ctx: &Context,
    obj: &K,
    observed: &Observed,
    completed: Option<&crate::api::ranges::RangeSet>,
    mut keep: Kept,
) -> Result<(), AgentError> {
    let ns = obj.namespace().unwrap_or_default();
    let selector = expand::workload_selector(K::KIND, &obj.name_any());
    if let (Some(j), Some(completed)) = (obj.as_workload().job_set(), completed) {
        let claims = if j.spec.volume_claim_templates.is_empty() || completed.is_empty() {
            Vec::new()
        } else {
            Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &ns)
                .list_metadata(&ListParams::default().labels(&selector))
                .await
                .map_err(AgentError::Observe)?
                .items
                .into_iter()
                .map(|p| p.metadata)
                .collect()
        };
        keep.extend(completed_shard_objects(
            j,
            completed,
            &observed.jobs,
            &claims,
        ));
    }
    let uid = obj.uid().unwrap_or_default();
    let pruned = match unwanted::<K>(ctx, &uid, &obj.name_any(), &keep).await {
        Some(unwanted) => {
            let resources = expand::generated_api_resources();
            let mut deleted = Vec::new();
            for (kind, name) in unwanted {
                let Some(ar) = resources.iter().find(|r| r.kind == kind) else {
                    continue;
                };
                if crate::controller::apply::delete_generated(&ctx.client, &ns, ar, &name)
                    .await
                    .map_err(AgentError::Prune)?
                {
                    deleted.push(format!("{kind}/{name}"));
                }
            }
            deleted
        }
        // The owned watches have not listed yet (or one cannot): list as they would.
        None => crate::controller::apply::prune(
            &ctx.client,
            &ns,
            &expand::generated_api_resources(),
            &selector,
            &uid,
            &keep,
        )
        .await
        .map_err(AgentError::Prune)?,
    };
    if !pruned.is_empty() {
        publish(
            ctx,
            obj,
            EventType::Normal,
            "Pruned",
            format!("removed {}", pruned.join(", ")),
        )
        .await;
    }
    Ok(())
}

/// The workload's objects that `keep` leaves out, from the owned-object watches; waits
/// for their first listing (an agent start) until [`OWNED_LISTING_WAIT`] after the index
/// was made. None when the index cannot answer: the prune lists.
async fn unwanted<K: AgentKind>(
    ctx: &Context,
    uid: &str,
    name: &str,
    keep: &Kept,
) -> Option<Vec<(String, String)>> {
    use crate::agent::owned::Answer;
    let workload = expand::names::label_value(name);
    loop {
        match ctx.owned.unwanted(K::KIND, uid, &workload, keep) {
            Answer::Unwanted(u) => return Some(u),
            Answer::NotWatched(kind) => {
                tracing::warn!(kind = K::KIND.as_str(), %name, generated = %kind, "no owned-object watch covers a generated kind: pruning by listing");
                return None;
            }
            Answer::NotListedYet if ctx.owned.age() >= OWNED_LISTING_WAIT => {
                tracing::warn!(kind = K::KIND.as_str(), %name, "the owned-object watches have not listed yet: pruning by listing");
                return None;
            }
            Answer::NotListedYet => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// How long a prune waits for the owned-object watches' first listing before it lists
/// the namespace itself.
const OWNED_LISTING_WAIT: Duration = Duration::from_secs(30);

fn api_resource(o: &DynamicObject) -> kube::core::ApiResource {
    let types = o.types.clone().unwrap_or_default();
    expand::generated_api_resources()
        .into_iter()
        .find(|r| r.api_version == types.api_version && r.kind == types.kind)
        .unwrap_or_else(|| {
            let (g, v) = types
                .api_version
                .split_once('/')
                .unwrap_or(("", &types.api_version));
            kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(g, v, &types.kind))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::service::PinterestService;

    #[test]
    fn leftovers_are_waited_for_five_minutes_after_the_slice_was_made() {
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        let mut slice: PinterestService = serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
            "metadata": {"name": "web", "creationTimestamp": "2026-11-30T10:00:00Z"},
            "spec": {"owner": {"team": "t", "contact": "c"},
                     "template": {"spec": {"containers": [{"name": "a", "image": "a:1"}]}}}
        }))
        .unwrap();
        let made = slice
            .metadata
            .creation_timestamp
            .as_ref()
            .unwrap()
            .0
            .as_second();
        assert!(!leftover_outlasted(&slice, at(made + 10)));
        assert!(!leftover_outlasted(&slice, at(made + 300)));
        assert!(leftover_outlasted(&slice, at(made + 301)));
        slice.metadata.creation_timestamp = None;
        assert!(
            !leftover_outlasted(&slice, at(made + 3_000)),
            "no age: waited for"
        );
    }
}

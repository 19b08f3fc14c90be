//! Stage 1, **read**: the slice as the API server has it now (kinds that start runs), its
//! runtime profile and the native objects that run it.
use super::*;

/// The slice to act on: a fresh read for kinds that start runs (`Some`), or the cached
/// copy (`None`). Ends the reconcile when the slice is gone.
pub(super) async fn current<K: AgentKind>(
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<Step<Option<K>>, AgentError> {
    // Job sets, cron jobs and training jobs start runs, which cannot be taken back: act
    // on the object as the API server has it now, not as the watch cache last saw it.
    // After a member's API server returns, the cache can still hold a slice the hub has
    // since shrunk or deleted (and whose Jobs it fenced) — a CronJob applied from it
    // fires in a member the work has left — or miss a completion this agent recorded.
    if !K::KIND.runs_to_completion() {
        return Ok(Step::Next(None));
    }
    // Read untyped, like the watch: a slice changed since into one its kind cannot take
    // is refused when that change's event arrives, not retried here.
    let fresh = untyped_slices::<K>(&ctx.client, ns)
        .get_opt(name)
        .await
        .map_err(AgentError::Observe)?;
    match fresh
        .map(|o| serde_json::to_vec(&o).map(|body| crate::controller::compact::decode::<K>(&body)))
    {
        Some(Ok(Ok(o))) => Ok(Step::Next(Some(o))),
        Some(Ok(Err(_)) | Err(_)) | None => Ok(Step::Done(Action::await_change())),
    }
}

/// What the read stage hands on.
pub(super) struct Read {
    pub profile: RuntimeProfile,
    pub observed: Observed,
}

/// The profile the slice's runtime version names (none: Invalid) and the observed
/// native objects.
pub(super) async fn read<K: AgentKind>(
    ctx: &Context,
    slice: &mut Slice<'_, K>,
) -> Result<Step<Read>, AgentError> {
    let profiles: Vec<RuntimeProfile> =
        ctx.profiles.state().iter().map(|p| (**p).clone()).collect();
    let profile = match expand::select_profile(&profiles, slice.obj.runtime_version()) {
        Ok(p) => p.clone(),
        Err(e) => {
            let message = format!("spec.runtimeVersion: {e}");
            return Ok(Step::Done(
                slice
                    .invalid(ctx, "UnknownRuntimeVersion", &message)
                    .await?,
            ));
        }
    };
    let observed = observe(ctx, &slice.ns, K::KIND, K::RUNS_AS, &slice.name)
        .instrument(tracing::trace_span!(target: "pinfed::trace", "observe"))
        .await
        .map_err(AgentError::Observe)?;
    Ok(Step::Next(Read { profile, observed }))
}

async fn observe(
    ctx: &Context,
    ns: &str,
    kind: WorkloadKind,
    runs_as: NativeKind,
    name: &str,
) -> Result<Observed, kube::Error> {
    let lp = ListParams::default().labels(&expand::workload_selector(kind, name));
    let c = ctx.client.clone();
    let mut o = Observed::default();
    match runs_as {
        // From the watch whose events reconcile the service (it stores each event before
        // it triggers): a LIST on every reconcile — and every Deployment status change
        // reconciles — was the member API server's main load in a burst of slices. Its
        // one Deployment is named after the service. Until that watch has listed, LIST.
        NativeKind::Deployment => {
            o.deployments = if ctx.deployments.wait_until_ready().now_or_never().is_some() {
                let key = reflector::ObjectRef::new(&expand::names::object_name(name)).within(ns);
                ctx.deployments
                    .get(&key)
                    .map(|d| (*d).clone())
                    .into_iter()
                    .collect()
            } else {
                Api::<Deployment>::namespaced(c, ns).list(&lp).await?.items
            }
        }
        NativeKind::StatefulSet => {
            o.statefulsets = Api::<StatefulSet>::namespaced(c, ns).list(&lp).await?.items
        }
        NativeKind::DaemonSet => {
            o.daemonsets = Api::<DaemonSet>::namespaced(c, ns).list(&lp).await?.items
        }
        NativeKind::CronJob => {
            o.cronjobs = Api::<CronJob>::namespaced(c, ns).list(&lp).await?.items
        }
        NativeKind::Job => o.jobs = Api::<Job>::namespaced(c, ns).list(&lp).await?.items,
        // A kind runs as one of the workload kinds above.
        NativeKind::ConfigMap
        | NativeKind::PersistentVolumeClaim
        | NativeKind::Service
        | NativeKind::Ingress
        | NativeKind::PodDisruptionBudget => {}
    }
    Ok(o)
}

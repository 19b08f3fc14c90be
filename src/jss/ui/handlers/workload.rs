//! A workload's page (`/ui/workloads/{namespace}/{kind}/{name}`) and its deletion.

use crate::jss::ui::*;

/// The 404 page of a kind that does not exist.
pub(crate) fn unknown_kind(kind: &str, s: &Session, fragment: bool) -> Response {
    problem(
        StatusCode::NOT_FOUND,
        Some(s),
        fragment,
        &format!(
            "unknown kind {kind:?} (service, jobset, cronjob, daemon, trainingjob, statefulset)"
        ),
    )
}

pub(crate) fn failover_history(
    o: &DynamicObject,
    st: &HubStatus,
    now: Timestamp,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(c) = find_condition(&st.conditions, FAILED_OVER) {
        out.push((
            format!("{} ({:?})", FAILED_OVER, c.status),
            format!(
                "{}: {} · {} ago",
                c.reason,
                c.message,
                model::age(now, c.last_transition_time.0)
            ),
        ));
    }
    let ann = o.annotations();
    if let Some(v) = ann
        .get(ANNOTATION_FAILED_OVER_FROM)
        .filter(|v| !v.is_empty())
    {
        out.push(("Moved off (fails back when it returns)".into(), v.clone()));
    }
    if let Some(v) = ann
        .get(ANNOTATION_FAILOVER_MESSAGE)
        .filter(|v| !v.is_empty())
    {
        out.push(("Last failover".into(), v.clone()));
    }
    out
}

pub(crate) async fn workload(
    State(ui): Shared,
    headers: HeaderMap,
    OriginalUri(uri): OriginalUri,
    Path((ns, kind, name)): Path<(String, String, String)>,
    Query(q): Query<PageQuery>,
) -> Response {
    let fragment = q.fragment.is_some();
    let s = session_or_login!(ui, headers, uri, fragment);
    let Some(kind) = parse_kind(&kind) else {
        return unknown_kind(&kind, &s, fragment);
    };
    if let Err(e) = authorize_namespace(&ui.jss.auth, &s.principal, &ns) {
        return problem(StatusCode::FORBIDDEN, Some(&s), fragment, &e.to_string());
    }
    ready_or_503!(ui, s, fragment);
    let Some(o) = ui.feed.workload(kind, &ns, &name) else {
        return problem(
            StatusCode::NOT_FOUND,
            Some(&s),
            fragment,
            &format!("{} {ns}/{name} not found on the hub", kind.as_str()),
        );
    };
    let now = Timestamp::now();
    let members = ui.feed.members();
    let st = HubStatus::of(&o);
    let row = WorkloadRow::of(kind, &o);
    let typed = crate::api::workload::AnyWorkload::from_dynamic(kind, &o);
    let team = o.data["spec"]["owner"]["team"].as_str().unwrap_or_default();
    let may_delete = authorize_change_of_existing(&ui.jss.auth, &s.principal, team, &ns)
        .map_err(|e| e.to_string());
    let shards = kind.runs_shards().then(|| {
        let total = o.data["spec"]["shards"]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0);
        (total, model::shard_map(total, &st, SHARD_MAP_LIMIT))
    });
    let events = ui
        .feed
        .events(kind, &ns, &name)
        .await
        .map_err(|e| e.to_string());
    let palette = palette(&members);
    // The rollout as `GET .../rollout` gives it: the hub's status and the recorded
    // revisions (read live: they are not watched).
    let (revisions, history_error) = match ui
        .jss
        .hub
        .revisions(&ns, &o.uid().unwrap_or_default())
        .await
    {
        Ok(r) => (r, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let rollout_view = crate::jss::rollout::view(kind, &o, &revisions);
    let flash = ui.sessions.flash(&s, q.flash.as_deref());
    let detail = pages::Detail {
        row: &row,
        contact: o.data["spec"]["owner"]["contact"]
            .as_str()
            .unwrap_or("-")
            .to_string(),
        submitted_by: o.annotations().get(ANNOTATION_SUBMITTED_BY).cloned(),
        artifact: o.annotations().get(ANNOTATION_ARTIFACT).cloned(),
        trace_id: o
            .annotations()
            .get(crate::api::member_slice::ANNOTATION_TRACEPARENT)
            .and_then(|t| crate::api::member_slice::trace_id_of(t))
            .map(String::from),
        generation: o.metadata.generation,
        requested: ui.jss.hub.requested_by(kind, &o),
        priority_class: o.data["spec"]["priorityClassName"]
            .as_str()
            .map(String::from),
        decision: st.placement.as_ref(),
        reasons: model::member_reasons(typed.as_ref(), &members, &st, now),
        slices: &st.clusters,
        conditions: &st.conditions,
        failover: failover_history(&o, &st, now),
        shards,
        events,
        yaml: crate::api::yaml::to_string(&*o).unwrap_or_else(|e| format!("# not shown: {e}")),
        may_delete,
        csrf: &s.csrf,
        palette: &palette,
        now,
        rollout: pages::RolloutPanel {
            view: &rollout_view,
            history_error,
            rolled_out: find_condition(&st.conditions, crate::status::hub_status::ROLLED_OUT),
        },
        flash: flash.as_ref(),
    };
    let topic = format!("workload:{ns}/{}/{name}", kind.as_str());
    render(
        StatusCode::OK,
        &format!("{ns}/{name}"),
        "/ui/workloads",
        Some(&s),
        Some(&topic),
        fragment,
        pages::workload(&detail),
    )
}

pub(crate) async fn delete_workload(
    State(ui): Shared,
    headers: HeaderMap,
    OriginalUri(uri): OriginalUri,
    Path((ns, kind, name)): Path<(String, String, String)>,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Response {
    let s = session_or_login!(ui, headers, uri, false);
    let csrf = form.ok().and_then(|Form(f)| f.csrf);
    let object = format!("{kind}/{ns}/{name}");
    if let Err(why) = check_action(&headers, &s, csrf.as_deref()) {
        audit(&s.principal.user, "delete", &object, "Forbidden", why);
        return problem(StatusCode::FORBIDDEN, Some(&s), false, why);
    }
    let Some(kind) = parse_kind(&kind) else {
        return unknown_kind(&kind, &s, false);
    };
    let object = format!("{}/{ns}/{name}", kind.as_str());
    let refuse = |code: StatusCode, reason: &str, msg: String| {
        audit(&s.principal.user, "delete", &object, reason, &msg);
        problem(code, Some(&s), false, &msg)
    };
    if let Err((code, reason, msg)) =
        crate::jss::ui::actions::live_for_change(&ui, &s.principal, kind, &ns, &name).await
    {
        return refuse(code, reason, msg);
    }
    if let Err(r) = ui.jss.hub.delete(kind, &ns, &name).await {
        return refuse(StatusCode::BAD_GATEWAY, r.reason(), r.to_string());
    }
    audit(&s.principal.user, "delete", &object, "Deleted", "");
    Redirect::to(&format!(
        "/ui/workloads?deleted={}",
        html::url_part(&format!(
            "{ns}/{}/{name}",
            crate::jss::request::kind_path(kind)
        ))
    ))
    .into_response()
}

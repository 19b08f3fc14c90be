//! The fleet page (`/ui/fleet`): the members and the hub's leader; an admin drains and
//! undrains members.

use crate::jss::ui::*;

pub(crate) async fn leader(ui: &Ui) -> Leader {
    let (ns, name) = ui.lease();
    let lease = format!("{ns}/{name}");
    match ui.feed.lease(ns, name).await {
        Ok(Some(l)) => {
            let spec = l.spec.unwrap_or_default();
            match spec.holder_identity {
                Some(holder) if !holder.is_empty() => Leader::Held {
                    holder,
                    renewed: spec.renew_time.map(|t| t.0),
                    acquired: spec.acquire_time.map(|t| t.0),
                    duration_secs: spec.lease_duration_seconds,
                    transitions: spec.lease_transitions,
                },
                _ => Leader::NoLease { lease },
            }
        }
        Ok(None) => Leader::NoLease { lease },
        Err(e) => Leader::Unreadable {
            lease,
            error: e.to_string(),
        },
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct FleetQuery {
    pub fragment: Option<String>,
    /// A member just marked draining, or cleared (`undrained`).
    pub drained: Option<String>,
    pub undrained: Option<String>,
}

pub(crate) async fn fleet(
    State(ui): Shared,
    headers: HeaderMap,
    OriginalUri(uri): OriginalUri,
    Query(q): Query<FleetQuery>,
) -> Response {
    let fragment = q.fragment.is_some();
    let s = session_or_login!(ui, headers, uri, fragment);
    ready_or_503!(ui, s, fragment);
    let now = Timestamp::now();
    let members = ui.feed.members();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (_, o) in ui.feed.workloads() {
        let clusters: BTreeSet<String> =
            crate::jss::views::placed_clusters(&o).into_iter().collect();
        for c in clusters {
            *counts.entry(c).or_default() += 1;
        }
    }
    let rows: Vec<model::MemberRow> = members
        .iter()
        .map(|m| model::member_row(m, counts.get(&m.name_any()).copied().unwrap_or(0), now))
        .collect();
    let leader = leader(&ui).await;
    let flash = match (non_empty(&q.drained), non_empty(&q.undrained)) {
        (Some(m), _) => Some(format!(
            "{m} is draining: the hub moves its workloads to other members and places nothing new there."
        )),
        (None, Some(m)) => Some(format!("{m} takes new work again.")),
        (None, None) => None,
    };
    let admin = is_admin(&ui.jss.auth, &s.principal);
    render(
        StatusCode::OK,
        "Fleet",
        "/ui/fleet",
        Some(&s),
        Some("fleet"),
        fragment,
        pages::fleet(
            &rows,
            &leader,
            now,
            flash.as_deref(),
            admin.then_some(s.csrf.as_str()),
        ),
    )
}

#[derive(Debug, Default, Deserialize)]
pub struct DrainForm {
    pub csrf: Option<String>,
    /// `true` drains, `false` clears the mark.
    pub drain: Option<String>,
}

/// Drains a member (or clears the mark): for admin teams only. The hub does the moving;
/// the rest of an unjoin (the member's RBAC, the hub's Secret) stays with `pinfed unjoin`,
/// which holds the member's credential the JSS must not.
pub(crate) async fn drain_member(
    State(ui): Shared,
    headers: HeaderMap,
    OriginalUri(uri): OriginalUri,
    Path(member): Path<String>,
    form: Result<Form<DrainForm>, FormRejection>,
) -> Response {
    let s = session_or_login!(ui, headers, uri, false);
    let form = form.map(|Form(f)| f).unwrap_or_default();
    let drain = match form.drain.as_deref() {
        Some("true") => true,
        Some("false") => false,
        _ => {
            return problem(
                StatusCode::BAD_REQUEST,
                Some(&s),
                false,
                "drain: expected true or false",
            );
        }
    };
    let action = if drain { "drain" } else { "undrain" };
    let object = format!("MemberCluster/{member}");
    let refuse = |code: StatusCode, reason: &str, msg: &str| {
        audit(&s.principal.user, action, &object, reason, msg);
        problem(code, Some(&s), false, msg)
    };
    if let Err(why) = check_action(&headers, &s, form.csrf.as_deref()) {
        return refuse(StatusCode::FORBIDDEN, "Forbidden", why);
    }
    if !is_admin(&ui.jss.auth, &s.principal) {
        return refuse(
            StatusCode::FORBIDDEN,
            "Forbidden",
            "draining a member is for admin teams (admin: true in the JSS team file)",
        );
    }
    if !ui.feed.members().iter().any(|m| m.name_any() == member) {
        return refuse(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("member {member} has not joined the hub"),
        );
    }
    if let Err(r) = ui.jss.hub.set_draining(&member, drain).await {
        return refuse(StatusCode::BAD_GATEWAY, r.reason(), &r.to_string());
    }
    audit(&s.principal.user, action, &object, "Done", "");
    let key = if drain { "drained" } else { "undrained" };
    Redirect::to(&format!("/ui/fleet?{key}={}", html::url_part(&member))).into_response()
}

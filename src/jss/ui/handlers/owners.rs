//! The owners page (`/ui/owners`).

use crate::jss::ui::*;

pub(crate) async fn owners(
    State(ui): Shared,
    headers: HeaderMap,
    OriginalUri(uri): OriginalUri,
    Query(q): Query<PageQuery>,
) -> Response {
    let fragment = q.fragment.is_some();
    let s = session_or_login!(ui, headers, uri, fragment);
    ready_or_503!(ui, s, fragment);
    let members = ui.feed.members();
    let profiles = ui.jss.hub.profiles();
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut teams: BTreeMap<String, pages::TeamView> = BTreeMap::new();
    let mut all = ui.feed.workloads();
    all.sort_by_key(|(k, o)| (o.namespace(), *k, o.name_any()));
    for (k, o) in all {
        let team = o.data["spec"]["owner"]["team"]
            .as_str()
            .unwrap_or("-")
            .to_string();
        // Other teams' workloads only for admin teams, as in the API.
        if !crate::jss::auth::may_see_workload(
            &ui.jss.auth,
            &s.principal,
            &team,
            &o.namespace().unwrap_or_default(),
        ) {
            continue;
        }
        let contact = o.data["spec"]["owner"]["contact"]
            .as_str()
            .unwrap_or("-")
            .to_string();
        let clusters = crate::jss::views::placed_clusters(&o);
        let req = ui.jss.hub.requested_by(k, &o);
        let t = teams
            .entry(team.clone())
            .or_insert_with(|| pages::TeamView {
                team,
                contacts: Vec::new(),
                clusters: Vec::new(),
                requested: crate::placement::model::Resources::ZERO,
                workloads: Vec::new(),
            });
        if !t.contacts.contains(&contact) {
            t.contacts.push(contact);
        }
        for c in &clusters {
            if !t.clusters.contains(c) {
                t.clusters.push(c.clone());
            }
        }
        t.clusters.sort();
        t.requested = t.requested.saturating_add(&req);
        let expires_at = crate::jss::server::expires_at(&profiles, &o);
        t.workloads.push(pages::OwnedRow {
            kind: k,
            namespace: o.namespace().unwrap_or_default(),
            name: o.name_any(),
            clusters,
            requested: req,
            expired: expires_at.is_some_and(|t| t <= now),
            expires_at,
        });
    }
    let teams: Vec<pages::TeamView> = teams.into_values().collect();
    render(
        StatusCode::OK,
        "Owners",
        "/ui/owners",
        Some(&s),
        Some("owners"),
        fragment,
        pages::owners(&teams, &palette(&members)),
    )
}

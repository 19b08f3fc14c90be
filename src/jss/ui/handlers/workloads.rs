//! The workloads page (`/ui/workloads`): the filters and one page of the table.

use crate::jss::ui::*;

#[derive(Debug, Default, Deserialize)]
pub struct WorkloadsQuery {
    pub namespace: Option<String>,
    pub kind: Option<String>,
    pub team: Option<String>,
    pub state: Option<String>,
    pub cluster: Option<String>,
    pub name: Option<String>,
    pub group: Option<String>,
    pub page: Option<String>,
    pub deleted: Option<String>,
    pub fragment: Option<String>,
}

pub(crate) fn non_empty(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(String::from)
}

/// The filter of a workloads query, or what is wrong with it.
pub(crate) fn parse_filter(q: &WorkloadsQuery) -> Result<Filter, String> {
    let kind = match non_empty(&q.kind) {
        Some(k) => Some(parse_kind(&k).ok_or_else(|| {
            format!(
                "unknown kind {k:?} (service, jobset, cronjob, daemon, trainingjob, statefulset)"
            )
        })?),
        None => None,
    };
    let state = match non_empty(&q.state) {
        Some(s) => Some(WorkloadState::parse(&s).ok_or_else(|| {
            let all: Vec<&str> = WorkloadState::ALL.iter().map(|s| s.as_str()).collect();
            format!("unknown state {s:?} (one of {})", all.join(", "))
        })?),
        None => None,
    };
    let group = match non_empty(&q.group) {
        Some(g) => Grouping::parse(&g)
            .ok_or_else(|| format!("unknown grouping {g:?} (namespace, team, kind or state)"))?,
        None => Grouping::None,
    };
    let page = match non_empty(&q.page) {
        Some(p) => p
            .parse::<usize>()
            .ok()
            .filter(|p| *p >= 1)
            .ok_or_else(|| format!("page {p:?} is not a page number (1, 2, ...)"))?,
        None => 1,
    };
    Ok(Filter {
        namespace: non_empty(&q.namespace),
        kind,
        team: non_empty(&q.team),
        state,
        cluster: non_empty(&q.cluster),
        name: non_empty(&q.name),
        group,
        page,
    })
}

pub(crate) async fn workloads(
    State(ui): Shared,
    headers: HeaderMap,
    OriginalUri(uri): OriginalUri,
    Query(q): Query<WorkloadsQuery>,
) -> Response {
    let fragment = q.fragment.is_some();
    let s = session_or_login!(ui, headers, uri, fragment);
    let filter = match parse_filter(&q) {
        Ok(f) => f,
        Err(e) => return problem(StatusCode::BAD_REQUEST, Some(&s), fragment, &e),
    };
    ready_or_503!(ui, s, fragment);
    let now = Timestamp::now();
    let members = ui.feed.members();
    let names: Vec<String> = members.iter().map(|m| m.name_any()).collect();
    let flash = non_empty(&q.deleted)
        .map(|d| format!("Deleted {d}: the hub removes its slices from every member."));
    let rows = ui.rows.lock().expect("lock").rows(&ui.feed.workloads());
    let visible = rows
        .into_iter()
        .filter(|r| may_use_namespace(&ui.jss.auth, &s.principal, &r.namespace))
        .collect();
    let body = pages::workloads_page(visible, &names, &filter, flash.as_deref(), now);
    render(
        StatusCode::OK,
        "Workloads",
        "/ui/workloads",
        Some(&s),
        Some("workloads"),
        fragment,
        body,
    )
}

//! The queue page (`/ui/queue`).

use crate::jss::ui::*;

/// The hub's queue: the waiting workloads the viewer may see (the owners report's rule, as
/// `GET /v1/queue`), from the UI's watch cache.
pub(crate) async fn queue(
    State(ui): Shared,
    headers: HeaderMap,
    OriginalUri(uri): OriginalUri,
    Query(q): Query<PageQuery>,
) -> Response {
    let fragment = q.fragment.is_some();
    let s = session_or_login!(ui, headers, uri, fragment);
    ready_or_503!(ui, s, fragment);
    let all = ui.feed.workloads();
    let items = crate::jss::views::queue(all.iter().map(|(k, o)| (*k, &**o)), None, |team, ns| {
        crate::jss::auth::may_see_workload(&ui.jss.auth, &s.principal, team, ns)
    });
    render(
        StatusCode::OK,
        "Queue",
        "/ui/queue",
        Some(&s),
        Some("queue"),
        fragment,
        pages::queue(&items, Timestamp::now()),
    )
}

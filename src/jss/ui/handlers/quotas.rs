//! The quotas page (`/ui/quotas`).

use crate::jss::ui::*;

pub(crate) async fn quotas(
    State(ui): Shared,
    headers: HeaderMap,
    OriginalUri(uri): OriginalUri,
    Query(q): Query<PageQuery>,
) -> Response {
    let fragment = q.fragment.is_some();
    let s = session_or_login!(ui, headers, uri, fragment);
    let mut items = Vec::new();
    for fq in ui.jss.hub.all_quotas() {
        let ns = fq.namespace().unwrap_or_default();
        if !may_use_namespace(&ui.jss.auth, &s.principal, &ns) {
            continue;
        }
        let status = fq.status.clone().unwrap_or_default();
        let per_cluster = fq
            .spec
            .per_cluster
            .iter()
            .map(|(c, hard)| {
                let used = status.used_per_cluster.get(c).cloned().unwrap_or_default();
                (c.clone(), (hard.clone(), used))
            })
            .collect();
        items.push(pages::QuotaView {
            requested: ui.jss.hub.namespace_usage(&ns).await.ok(),
            name: fq.name_any(),
            namespace: ns,
            hard: fq.spec.hard.clone(),
            used: status.used.unwrap_or_default(),
            per_cluster,
        });
    }
    render(
        StatusCode::OK,
        "Quotas",
        "/ui/quotas",
        Some(&s),
        Some("quotas"),
        fragment,
        pages::quotas(&items),
    )
}

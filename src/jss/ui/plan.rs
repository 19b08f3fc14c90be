//! The dry-run page (`/ui/plan`): paste a workload, see what the federation would do with
//! it — the split with each member's reason, the members left out and why, the quota
//! effect, what would move and change for a workload that exists, and each member's
//! objects after its overrides and runtime injection. The same answer as
//! `POST /v1/submissions?dryRun=true` (`Jss::dry_run_reply`); nothing is written. The
//! POST carries the session's CSRF token and is audited (`via=ui`).

use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, OriginalUri, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use askama::Template;

use super::html;
use super::{Ui, audit, check_action, problem, render, to_login};
use crate::jss::wire::{DryRun, DryRunShare};

/// The form's fields.
#[derive(Debug, Default, Deserialize)]
pub struct PlanForm {
    pub csrf: Option<String>,
    /// The namespace when the resource names none.
    pub namespace: Option<String>,
    /// The resource, YAML or JSON.
    pub resource: Option<String>,
}

/// `GET /ui/plan`: the empty form.
pub async fn plan_page(
    State(ui): State<Arc<Ui>>,
    headers: HeaderMap,
    OriginalUri(uri): OriginalUri,
) -> Response {
    let Some((_, s)) = ui.session(&headers) else {
        return to_login(&uri, false);
    };
    let body = page(&s.csrf, &PlanForm::default(), None, None);
    render(
        StatusCode::OK,
        "Dry run",
        "/ui/plan",
        Some(&s),
        None,
        false,
        body,
    )
}

/// `POST /ui/plan`: the dry run of the pasted resource.
pub async fn plan_run(
    State(ui): State<Arc<Ui>>,
    headers: HeaderMap,
    OriginalUri(uri): OriginalUri,
    form: Result<Form<PlanForm>, FormRejection>,
) -> Response {
    let Some((_, s)) = ui.session(&headers) else {
        return to_login(&uri, false);
    };
    let form = form.map(|Form(f)| f).unwrap_or_default();
    let user = s.principal.user.clone();
    if let Err(why) = check_action(&headers, &s, form.csrf.as_deref()) {
        audit(&user, "submit-dry-run", "inline", "Forbidden", why);
        return problem(StatusCode::FORBIDDEN, Some(&s), false, why);
    }
    let text = form.resource.clone().unwrap_or_default();
    let namespace = form
        .namespace
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from);
    let result = match ui.jss.admit_inline(&s.principal, text, namespace).await {
        Ok(admitted) => {
            let object = format!(
                "{}/{}/{}",
                admitted.kind.as_str(),
                admitted.namespace,
                admitted.name
            );
            match ui.jss.dry_run_reply(&s.principal, &admitted, None).await {
                Ok(reply) => {
                    audit(&user, "submit-dry-run", &object, "DryRun", "");
                    Ok(reply)
                }
                Err(r) => {
                    audit(&user, "submit-dry-run", &object, r.reason(), &r.to_string());
                    Err(r)
                }
            }
        }
        Err(r) => {
            audit(
                &user,
                "submit-dry-run",
                "inline",
                r.reason(),
                &r.to_string(),
            );
            Err(r)
        }
    };
    let (code, body) = match result {
        Ok(reply) => (StatusCode::OK, page(&s.csrf, &form, Some(&reply), None)),
        Err(r) => {
            let code = StatusCode::from_u16(r.status()).unwrap_or(StatusCode::BAD_REQUEST);
            let text = r.reply().describe(r.status());
            (code, page(&s.csrf, &form, None, Some(&text)))
        }
    };
    render(code, "Dry run", "/ui/plan", Some(&s), None, false, body)
}

/// The dry-run page (`templates/ui/plan.html`).
#[derive(Template)]
#[template(path = "ui/plan.html")]
struct PlanPage<'a> {
    csrf: &'a str,
    namespace: &'a str,
    resource: &'a str,
    refused: Option<&'a str>,
    reply: Option<&'a DryRun>,
    /// Each member's share of the split, with what it gets in words.
    shares: Vec<(&'a DryRunShare, String)>,
    split_headers: &'static [&'static str],
    move_headers: &'static [&'static str],
    quota_headers: &'static [&'static str],
}

/// The page: the form (kept as submitted), then the answer or the refusal.
pub(super) fn page(
    csrf: &str,
    form: &PlanForm,
    reply: Option<&DryRun>,
    refused: Option<&str>,
) -> String {
    html::render(&PlanPage {
        csrf,
        namespace: form.namespace.as_deref().unwrap_or_default(),
        resource: form.resource.as_deref().unwrap_or_default(),
        refused,
        reply,
        shares: reply.map_or(vec![], |r| {
            r.placements
                .iter()
                .map(|p| {
                    let share = match (&p.replicas, &p.shards) {
                        (Some(1), _) => "1 replica".to_string(),
                        (Some(n), _) => format!("{n} replicas"),
                        (None, Some(s)) => format!("shards {s}"),
                        (None, None) => format!("{} pods", p.pods),
                    };
                    (p, share)
                })
                .collect()
        }),
        split_headers: &["Member", "Share", "Why"],
        move_headers: &["Member", "Now", "After"],
        quota_headers: &["Quota", "Scope", "Resource", "Adds", "Used after", "Hard"],
    })
}

//! The dry-run page (`/ui/plan`): paste a workload, see what the federation would do with
//! it — the split with each member's reason, the members left out and why, the quota
//! effect, what would move and change for a workload that exists, and each member's
//! objects after its overrides and runtime injection. The same answer as
//! `POST /v1/submissions?dryRun=true` (`Jss::dry_run_reply`); nothing is written. The
//! POST carries the session's CSRF token and is audited (`via=ui`).

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, OriginalUri, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use super::html::{esc, table};
use super::session::Session;
use super::{Ui, audit, check_action, problem, render, to_login};
use crate::jss::wire::DryRun;

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
    let body = page(&s, &PlanForm::default(), None, None);
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
        Ok(reply) => (StatusCode::OK, page(&s, &form, Some(&reply), None)),
        Err(r) => {
            let code = StatusCode::from_u16(r.status()).unwrap_or(StatusCode::BAD_REQUEST);
            let text = r.reply().describe(r.status());
            (code, page(&s, &form, None, Some(&text)))
        }
    };
    render(code, "Dry run", "/ui/plan", Some(&s), None, false, body)
}

/// The page: the form (kept as submitted), then the answer or the refusal.
fn page(s: &Session, form: &PlanForm, reply: Option<&DryRun>, refused: Option<&str>) -> String {
    let mut h = String::new();
    h.push_str("<h1>Dry run</h1><p class=\"muted\">What the federation would do with a workload: nothing is submitted, nothing is written on any cluster.</p>");
    let _ = write!(
        h,
        "<form id=\"plan-form\" method=\"post\" action=\"/ui/plan\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <label>Namespace (when the resource names none) <input name=\"namespace\" value=\"{}\"></label>\
         <label>Resource (YAML or JSON)<textarea name=\"resource\" rows=\"18\" cols=\"100\" spellcheck=\"false\">{}</textarea></label>\
         <button type=\"submit\">Dry run</button></form>",
        esc(&s.csrf),
        esc(form.namespace.as_deref().unwrap_or_default()),
        esc(form.resource.as_deref().unwrap_or_default())
    );
    if let Some(why) = refused {
        let _ = write!(
            h,
            "<section id=\"refused\" class=\"flash error\"><h2>Refused</h2><pre>{}</pre></section>",
            esc(why)
        );
    }
    if let Some(r) = reply {
        answer(&mut h, r);
    }
    h
}

fn answer(h: &mut String, r: &DryRun) {
    let _ = write!(
        h,
        "<section id=\"answer\" data-unplaced=\"{}\"><h2>{} {}/{}{}</h2><p>Strategy {}; requests cpu {}, memory {}, gpus {}, pods {}.</p>",
        r.unplaced,
        esc(r.kind.as_str()),
        esc(&r.namespace),
        esc(&r.name),
        if r.exists {
            " (exists: a change)"
        } else {
            " (new)"
        },
        esc(&r.strategy),
        esc(&r.requested.cpu),
        esc(&r.requested.memory),
        r.requested.gpus,
        r.requested.pods
    );
    if r.unplaced > 0 {
        let _ = write!(
            h,
            "<p class=\"flash error\" id=\"unplaced\">{} unplaced: {}</p>",
            r.unplaced,
            esc(r.reason.as_deref().unwrap_or_default())
        );
    }
    let mut rows = String::new();
    for p in &r.placements {
        let share = match (&p.replicas, &p.shards) {
            (Some(1), _) => "1 replica".to_string(),
            (Some(n), _) => format!("{n} replicas"),
            (None, Some(s)) => format!("shards {s}"),
            (None, None) => format!("{} pods", p.pods),
        };
        let _ = write!(
            rows,
            "<tr data-cluster=\"{}\"><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&p.cluster),
            esc(&p.cluster),
            esc(&share),
            esc(&p.reason)
        );
    }
    for e in &r.excluded {
        let _ = write!(
            rows,
            "<tr data-cluster=\"{}\" class=\"excluded\"><td>{}</td><td>none</td><td>{}</td></tr>",
            esc(&e.cluster),
            esc(&e.cluster),
            esc(&e.why)
        );
    }
    h.push_str("<h3>Split</h3><div id=\"split\">");
    h.push_str(&table(
        "plain",
        &["Member", "Share", "Why"],
        &rows,
        "no member",
    ));
    h.push_str("</div>");
    if !r.moves.is_empty() {
        let mut rows = String::new();
        for m in &r.moves {
            let _ = write!(
                rows,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&m.cluster),
                esc(&m.before),
                esc(&m.after)
            );
        }
        h.push_str("<h3>Moves</h3><div id=\"moves\">");
        h.push_str(&table("plain", &["Member", "Now", "After"], &rows, ""));
        h.push_str("</div>");
    }
    if !r.quotas.is_empty() {
        let mut rows = String::new();
        for q in &r.quotas {
            for row in &q.rows {
                let _ = write!(
                    rows,
                    "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    if row.fits { "" } else { "over" },
                    esc(&q.quota),
                    esc(&row.scope),
                    esc(&row.resource),
                    esc(&row.adds),
                    esc(&row.used),
                    esc(&row.hard)
                );
            }
        }
        h.push_str("<h3>Quota</h3><div id=\"quota\">");
        h.push_str(&table(
            "plain",
            &["Quota", "Scope", "Resource", "Adds", "Used after", "Hard"],
            &rows,
            "",
        ));
        h.push_str("</div>");
    }
    h.push_str("<h3>Per member</h3><div id=\"members\">");
    for m in &r.members {
        let _ = write!(
            h,
            "<details class=\"member\" data-cluster=\"{}\"><summary>{} · {} objects{}</summary>",
            esc(&m.cluster),
            esc(&m.cluster),
            m.object_count,
            if m.overrides.is_empty() {
                String::new()
            } else {
                format!(" · overrides: {}", esc(&m.overrides.join(", ")))
            }
        );
        if let Some(e) = &m.error {
            let _ = write!(h, "<p class=\"flash error\">{}</p>", esc(e));
        }
        if let Some(d) = &m.diff {
            let _ = write!(h, "<h4>Change</h4><pre class=\"diff\">{}</pre>", esc(d));
        }
        let _ = write!(
            h,
            "<h4>Objects</h4><pre class=\"objects\">{}</pre></details>",
            esc(&m.objects)
        );
    }
    h.push_str("</div>");
    if !r.note.is_empty() {
        let _ = write!(h, "<p class=\"muted\" id=\"note\">{}</p>", esc(&r.note));
    }
    h.push_str("</section>");
}

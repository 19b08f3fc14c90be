//! The rollout buttons of the workload page — approve, pause, resume and undo — and its
//! rebalance buttons (preview, ask; the API's `POST .../rebalance[?dryRun=true]`). Each
//! acts through the API's own code (`Jss::rollout_action_as`, `Jss::rebalance_as`): the
//! same rights (the namespace, and the team owning the workload or an admin team), the
//! same checks and, for an undo, the same admission, quota and write under the
//! namespace's lock. A UI approval also names the revision its page showed. Each POST
//! carries the session's CSRF token, is audited (`via=ui`), and returns to the page with
//! what the action said, or why it was refused, as a flash message.

use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, OriginalUri, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use kube::api::DynamicObject;
use serde::Deserialize;

use super::{Ui, audit, check_action, html, pages, problem, to_login, unknown_kind};
use crate::jss::auth::{Principal, authorize_change_of_existing, authorize_namespace};
use crate::jss::error::{Detail, Rejection};
use crate::jss::request::parse_kind;
use crate::jss::wire::{ObjectName, RolloutAction, RolloutActionRequest};

/// The fields of the rollout forms (each form sends only its own).
#[derive(Debug, Default, Deserialize)]
pub struct RolloutForm {
    pub csrf: Option<String>,
    /// approve: the stage the page showed waiting (name or index).
    pub stage: Option<String>,
    /// approve: the revision the page showed; a newer one is not approved unseen.
    pub revision: Option<String>,
    /// undo: the revision to run again; empty: the API's default.
    pub to_revision: Option<String>,
}

/// As the API's audit log names the actions.
fn audit_name(a: RolloutAction) -> &'static str {
    match a {
        RolloutAction::Approve => "rollout-approve",
        RolloutAction::Pause => "rollout-pause",
        RolloutAction::Resume => "rollout-resume",
        RolloutAction::Undo => "rollout-undo",
    }
}

fn number(field: &str, v: Option<&str>) -> Result<Option<i64>, Rejection> {
    match v.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
            Rejection::invalid(
                format!("{field} {v:?} is not a revision number"),
                vec![Detail::field(field, "a revision number (1, 2, ...)")],
            )
        }),
    }
}

/// The request an action's form makes, as the API would take it.
fn request_of(action: RolloutAction, f: &RolloutForm) -> Result<RolloutActionRequest, Rejection> {
    let text = |v: &Option<String>| {
        v.as_deref()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(String::from)
    };
    Ok(RolloutActionRequest {
        stage: (action == RolloutAction::Approve)
            .then(|| text(&f.stage))
            .flatten(),
        to_revision: match action {
            RolloutAction::Undo => number("toRevision", f.to_revision.as_deref())?,
            _ => None,
        },
    })
}

/// `POST /ui/workloads/{ns}/{kind}/{name}/rollout/{action}`.
pub async fn rollout_action(
    State(ui): State<Arc<Ui>>,
    headers: HeaderMap,
    OriginalUri(uri): OriginalUri,
    Path((ns, kind, name, action)): Path<(String, String, String, String)>,
    form: Result<Form<RolloutForm>, FormRejection>,
) -> Response {
    let Some((_, s)) = ui.session(&headers) else {
        return to_login(&uri, false);
    };
    let form = form.map(|Form(f)| f).unwrap_or_default();
    let Some(action) = RolloutAction::parse(&action) else {
        return problem(
            StatusCode::NOT_FOUND,
            Some(&s),
            false,
            &format!("no rollout action {action:?} (approve, pause, resume, undo)"),
        );
    };
    let verb = audit_name(action);
    let user = s.principal.user.clone();
    let kind = match checked(
        &headers,
        &s,
        form.csrf.as_deref(),
        verb,
        (&ns, &kind, &name),
    ) {
        Ok(kind) => kind,
        Err(r) => return *r,
    };
    let object = format!("{}/{ns}/{name}", kind.as_str());
    let w = ObjectName {
        kind,
        namespace: ns.clone(),
        name: name.clone(),
    };
    let seen = match action {
        RolloutAction::Approve => number("revision", form.revision.as_deref()),
        _ => Ok(None),
    };
    let mut api_audit = crate::jss::server::Audit::new(verb);
    let result = match (request_of(action, &form), seen) {
        (Ok(req), Ok(seen)) => {
            ui.jss
                .rollout_action_as(&s.principal, &w, action, &req, seen, &mut api_audit)
                .await
        }
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    let result = result.map(|reply| reply.message);
    match flash_of(&s, &user, verb, &object, result) {
        Ok((ok, text)) => back_with_flash(&ui, &s, kind, &ns, &name, ok, text),
        Err(page) => *page,
    }
}

/// An action's answer, audited (`via=ui`), as the flash message the page shows (whether it
/// went, and what was said), or the problem page of a refusal (403, 404).
fn flash_of(
    s: &super::session::Session,
    user: &str,
    verb: &str,
    object: &str,
    result: Result<String, Rejection>,
) -> Result<(bool, String), Box<Response>> {
    match result {
        Ok(message) => {
            audit(user, verb, object, "Done", "");
            Ok((true, message))
        }
        Err(r) if r.status() == 403 || r.status() == 404 => {
            audit(user, verb, object, r.reason(), &r.to_string());
            Err(Box::new(problem(
                StatusCode::from_u16(r.status()).unwrap_or(StatusCode::FORBIDDEN),
                Some(s),
                false,
                &r.to_string(),
            )))
        }
        Err(r) => {
            audit(user, verb, object, r.reason(), &r.to_string());
            Ok((false, r.reply().describe(r.status())))
        }
    }
}

/// The workload `kind ns/name` read live, once `who` may use the namespace and change
/// the workload — as the API does: the owner team decides, not a cache that may lag.
/// Else the status, reason and message to refuse with.
pub(crate) async fn live_for_change(
    ui: &Ui,
    who: &Principal,
    kind: crate::api::workload::WorkloadKind,
    ns: &str,
    name: &str,
) -> Result<DynamicObject, (StatusCode, &'static str, String)> {
    authorize_namespace(&ui.jss.auth, who, ns)
        .map_err(|e| (StatusCode::FORBIDDEN, "Forbidden", e.to_string()))?;
    let o = match ui.jss.hub.get_workload(kind, ns, name).await {
        Ok(Some(o)) => o,
        Ok(None) => {
            return Err((
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("{} {ns}/{name} not found", kind.as_str()),
            ));
        }
        Err(r) => return Err((StatusCode::BAD_GATEWAY, r.reason(), r.to_string())),
    };
    let team = o.data["spec"]["owner"]["team"].as_str().unwrap_or_default();
    authorize_change_of_existing(&ui.jss.auth, who, team, ns)
        .map_err(|e| (StatusCode::FORBIDDEN, "Forbidden", e.to_string()))?;
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::rollout::RolloutStatus;
    use crate::api::workload::WorkloadKind;
    use crate::jss::rollout;

    fn w() -> ObjectName {
        ObjectName {
            kind: WorkloadKind::Service,
            namespace: "ads".into(),
            name: "web".into(),
        }
    }

    #[test]
    fn each_form_makes_only_its_actions_request() {
        let f = RolloutForm {
            csrf: Some("t".into()),
            stage: Some(" first ".into()),
            revision: Some("2".into()),
            to_revision: Some("1".into()),
        };
        let r = request_of(RolloutAction::Approve, &f).unwrap();
        assert_eq!((r.stage.as_deref(), r.to_revision), (Some("first"), None));
        let r = request_of(RolloutAction::Undo, &f).unwrap();
        assert_eq!((r.stage, r.to_revision), (None, Some(1)));
        assert_eq!(
            request_of(RolloutAction::Pause, &f).unwrap(),
            RolloutActionRequest::default()
        );
        let blank = RolloutForm {
            to_revision: Some(" ".into()),
            ..RolloutForm::default()
        };
        assert_eq!(
            request_of(RolloutAction::Undo, &blank).unwrap().to_revision,
            None,
            "the select's default: the API's default revision"
        );
        let bad = RolloutForm {
            to_revision: Some("two".into()),
            ..RolloutForm::default()
        };
        let e = request_of(RolloutAction::Undo, &bad).unwrap_err();
        assert_eq!(e.status(), 422);
        assert!(e.to_string().contains("\"two\""), "{e}");
    }

    #[test]
    fn an_approval_from_a_page_showing_another_revision_is_refused() {
        let s = RolloutStatus {
            revision: 3,
            ..Default::default()
        };
        assert!(rollout::check_seen(&w(), Some(&s), Some(3)).is_ok());
        assert!(rollout::check_seen(&w(), Some(&s), None).is_ok());
        let e = rollout::check_seen(&w(), Some(&s), Some(2)).unwrap_err();
        assert_eq!(e.status(), 422);
        assert!(
            e.to_string().contains("revision 2") && e.to_string().contains("revision 3 now"),
            "{e}"
        );
    }
}

/// An action's CSRF token and origin checked, and its kind parsed: the kind, or the
/// refusal (audited as `verb` on `kind/ns/name`).
fn checked(
    headers: &HeaderMap,
    s: &super::session::Session,
    csrf: Option<&str>,
    verb: &str,
    (ns, kind, name): (&str, &str, &str),
) -> Result<crate::api::workload::WorkloadKind, Box<Response>> {
    if let Err(why) = check_action(headers, s, csrf) {
        audit(
            &s.principal.user,
            verb,
            &format!("{kind}/{ns}/{name}"),
            "Forbidden",
            why,
        );
        return Err(Box::new(problem(
            StatusCode::FORBIDDEN,
            Some(s),
            false,
            why,
        )));
    }
    parse_kind(kind).ok_or_else(|| Box::new(unknown_kind(kind, s, false)))
}

/// Back to the workload's page with what the action said as its flash message.
fn back_with_flash(
    ui: &Ui,
    s: &super::session::Session,
    kind: crate::api::workload::WorkloadKind,
    ns: &str,
    name: &str,
    ok: bool,
    text: String,
) -> Response {
    let page = pages::workload_href(kind, ns, name);
    match ui.sessions.seal_flash(s, ok, text) {
        Some(key) => Redirect::to(&format!("{page}?flash={}", html::url_part(&key))),
        None => Redirect::to(&page),
    }
    .into_response()
}

/// The fields of the rebalance forms.
#[derive(Debug, Default, Deserialize)]
pub struct RebalanceForm {
    pub csrf: Option<String>,
    /// "true": a preview, nothing written.
    pub dry_run: Option<String>,
}

/// `POST /ui/workloads/{ns}/{kind}/{name}/rebalance`: a preview (`dry_run=true`) or the
/// request, with the API's rights (those of a delete) and answer, as a flash message.
pub async fn rebalance(
    State(ui): State<Arc<Ui>>,
    headers: HeaderMap,
    OriginalUri(uri): OriginalUri,
    Path((ns, kind, name)): Path<(String, String, String)>,
    form: Result<Form<RebalanceForm>, FormRejection>,
) -> Response {
    let Some((_, s)) = ui.session(&headers) else {
        return to_login(&uri, false);
    };
    let form = form.map(|Form(f)| f).unwrap_or_default();
    let dry_run = form.dry_run.as_deref() == Some("true");
    let verb = if dry_run {
        "rebalance-dry-run"
    } else {
        "rebalance"
    };
    let user = s.principal.user.clone();
    let kind = match checked(
        &headers,
        &s,
        form.csrf.as_deref(),
        verb,
        (&ns, &kind, &name),
    ) {
        Ok(kind) => kind,
        Err(r) => return *r,
    };
    let object = format!("{}/{ns}/{name}", kind.as_str());
    let mut api_audit = crate::jss::server::Audit::new(verb);
    let result = ui
        .jss
        .rebalance_as(&s.principal, kind, &ns, &name, dry_run, &mut api_audit)
        .await
        .map(|reply| reply.message);
    match flash_of(&s, &user, verb, &object, result) {
        Ok((ok, text)) => back_with_flash(&ui, &s, kind, &ns, &name, ok, text),
        Err(page) => *page,
    }
}

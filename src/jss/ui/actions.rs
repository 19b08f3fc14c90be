//! The rollout buttons of the workload page — approve, pause, resume and undo — and its
//! rebalance buttons (preview, ask; the API's `POST .../rebalance[?dryRun=true]`). The
//! rollout ones with the
//! rights and rules of `POST /v1/workloads/{ns}/{kind}/{name}/rollout/{action}` (the
//! namespace, and the team owning the workload or an admin team; the stage that waits,
//! the revision an undo returns to, from [`crate::jss::rollout`]). Each POST carries the
//! session's CSRF token, is audited (`via=ui`), and returns to the page with what the
//! action said, or why it was refused, as a flash message.

use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, OriginalUri, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde::Deserialize;

use super::{Ui, audit, check_action, html, pages, problem, to_login, unknown_kind};
use crate::api::rollout::{ANNOTATION_APPROVED, ANNOTATION_PAUSED, RolloutStatus};
use crate::jss::admission::{Origin, admit_from};
use crate::jss::auth::{Principal, authorize_change_of_existing, authorize_namespace};
use crate::jss::error::{Detail, Rejection};
use crate::jss::quota::{check_all, check_placeable, requested, whole_pods};
use crate::jss::request::parse_kind;
use crate::jss::rollout;
use crate::jss::wire::{ObjectName, RolloutAction, RolloutActionReply, RolloutActionRequest};

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

/// An approval from a page that showed another revision than the workload's now: refused,
/// so that nobody approves a change they did not see.
fn check_seen(
    w: &ObjectName,
    status: Option<&RolloutStatus>,
    seen: Option<i64>,
) -> Result<(), Rejection> {
    match (seen, status) {
        (Some(seen), Some(s)) if s.revision != seen => Err(Rejection::invalid(
            format!(
                "the page showed revision {seen} of {}, which is at revision {} now: nothing approved (look at the page again)",
                rollout::object_text(w),
                s.revision
            ),
            vec![Detail::field(
                "revision",
                format!("{seen} is not the current revision ({})", s.revision),
            )],
        )),
        _ => Ok(()),
    }
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
    let refuse = |code: StatusCode, reason: &str, msg: String| {
        audit(&user, verb, &object, reason, &msg);
        problem(code, Some(&s), false, &msg)
    };
    let o = match live_for_change(&ui, &s.principal, kind, &ns, &name).await {
        Ok(o) => o,
        Err((code, reason, msg)) => return refuse(code, reason, msg),
    };
    let w = ObjectName {
        kind,
        namespace: ns.clone(),
        name: name.clone(),
    };
    let result = match request_of(action, &form) {
        Ok(req) => {
            let seen = if action == RolloutAction::Approve {
                number("revision", form.revision.as_deref())
            } else {
                Ok(None)
            };
            match seen {
                Ok(seen) => act(&ui, &s.principal, &o, &w, action, &req, seen).await,
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    };
    let (ok, text) = match result {
        Ok(reply) => {
            audit(&user, verb, &object, "Done", "");
            (true, reply.message)
        }
        Err(r) if r.status() == 403 => {
            return refuse(StatusCode::FORBIDDEN, r.reason(), r.to_string());
        }
        Err(r) => {
            audit(&user, verb, &object, r.reason(), &r.to_string());
            (false, r.reply().describe(r.status()))
        }
    };
    back_with_flash(&ui, &s, kind, &ns, &name, ok, text)
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

/// One action, as the API's handler does it once the caller may act on the workload `o`
/// (read live).
async fn act(
    ui: &Ui,
    who: &Principal,
    o: &DynamicObject,
    w: &ObjectName,
    action: RolloutAction,
    req: &RolloutActionRequest,
    seen: Option<i64>,
) -> Result<RolloutActionReply, Rejection> {
    let status = rollout::status_of(o);
    let hub = &ui.jss.hub;
    let done = |changed: bool, message: String| RolloutActionReply {
        workload: w.clone(),
        action,
        revision: None,
        stage: None,
        stage_name: None,
        changed,
        message,
    };
    Ok(match action {
        RolloutAction::Approve => {
            check_seen(w, status.as_ref(), seen)?;
            let (stage, stage_name) =
                rollout::approval_stage(w, status.as_ref(), req.stage.as_deref())?;
            let revision = status.as_ref().map(|s| s.revision).unwrap_or_default();
            let value = format!("{revision}/{stage}");
            hub.annotate(
                w.kind,
                &w.namespace,
                &w.name,
                &[(ANNOTATION_APPROVED, Some(&value))],
            )
            .await?;
            RolloutActionReply {
                revision: Some(revision),
                stage: Some(stage),
                stage_name: Some(stage_name.clone()),
                ..done(
                    true,
                    rollout::approve_message(w, revision, stage, &stage_name),
                )
            }
        }
        RolloutAction::Pause => {
            let was = rollout::paused(o);
            if !was {
                hub.annotate(
                    w.kind,
                    &w.namespace,
                    &w.name,
                    &[(ANNOTATION_PAUSED, Some("true"))],
                )
                .await?;
            }
            done(!was, rollout::pause_message(w, status.as_ref(), was))
        }
        RolloutAction::Resume => {
            let was = o.annotations().contains_key(ANNOTATION_PAUSED);
            if was {
                hub.annotate(w.kind, &w.namespace, &w.name, &[(ANNOTATION_PAUSED, None)])
                    .await?;
            }
            done(was, rollout::resume_message(w, was))
        }
        RolloutAction::Undo => undo(ui, who, o, w, status.as_ref(), req.to_revision).await?,
    })
}

/// `undo`: the spec runs a recorded revision's content again, admitted and written as a
/// submission is (admission, the caller's right to the workload it replaces, quota, the
/// server-side apply as `pinfed-jss`); the hub rolls it out as a new revision.
///
/// The write follows the API's (`Jss::write_admitted`, private to the server module)
/// step for step, but without its per-namespace lock (private too): an undo racing a
/// submission in the same namespace could pass the JSS's quota check with it (the hub
/// still holds back what exceeds a quota). Keep the two in step until the server module
/// offers the action to the UI.
async fn undo(
    ui: &Ui,
    who: &Principal,
    o: &DynamicObject,
    w: &ObjectName,
    status: Option<&RolloutStatus>,
    asked: Option<i64>,
) -> Result<RolloutActionReply, Rejection> {
    let hub = &ui.jss.hub;
    let revisions = hub
        .revisions(&w.namespace, &o.uid().unwrap_or_default())
        .await?;
    let recorded: Vec<i64> = revisions
        .iter()
        .filter(|cr| rollout::content_of(cr).is_some())
        .map(|cr| cr.revision)
        .collect();
    let target = rollout::undo_target(w, status, &recorded, asked)?;
    let content = revisions
        .iter()
        .filter(|cr| cr.revision == target)
        .find_map(rollout::content_of)
        .cloned()
        .ok_or_else(|| {
            Rejection::NotFound(format!(
                "revision {target} of {} has no record on the hub",
                rollout::object_text(w)
            ))
        })?;
    let text = rollout::undo_object(w.kind, o, &content).to_string();
    let (auth, caller, profiles, ns) = (
        ui.jss.auth.clone(),
        who.clone(),
        hub.profiles(),
        w.namespace.clone(),
    );
    let admitted = tokio::task::spawn_blocking(move || {
        admit_from(
            &auth,
            &caller,
            &text,
            Some(&ns),
            Origin::Revision(target),
            &profiles,
        )
    })
    .await
    .map_err(|e| Rejection::Internal(format!("admission: {e}")))?
    .map_err(|e| match e {
        Rejection::Invalid { message, details } => Rejection::Invalid {
            message: format!(
                "revision {target} of {} does not pass admission today: {message}",
                rollout::object_text(w)
            ),
            details,
        },
        e => e,
    })?;
    // Rollout stages naming members the federation does not have.
    if let Some(policy) = admitted.workload.as_ref().rollout() {
        let known = hub.members().iter().map(|m| m.name_any()).collect();
        let unknown = crate::api::rollout::unknown_members(policy, &known);
        if !unknown.is_empty() {
            return Err(Rejection::invalid(
                "the rollout names members the federation does not have",
                unknown
                    .into_iter()
                    .map(|(f, m)| Detail::field(f, m))
                    .collect(),
            ));
        }
    }
    // What it costs, as the hub's engine would place it on the members as they are.
    let clusters = hub.quota_clusters();
    let policy = crate::placement::from_workload::policy_for(admitted.workload.as_ref());
    let want = requested(
        &admitted.demand,
        whole_pods(&clusters, &policy, &admitted.demand),
    );
    let quotas = hub.quotas_in(&admitted.namespace);
    let (used, existing) = if quotas.is_empty() {
        let existing = hub
            .get_workload(admitted.kind, &admitted.namespace, &admitted.name)
            .await?;
        (None, existing)
    } else {
        let (used, existing) = hub
            .namespace_usage_except(&admitted.namespace, Some((admitted.kind, &admitted.name)))
            .await?;
        (Some(used), existing)
    };
    if let Some(o) = &existing {
        let team = o.data["spec"]["owner"]["team"].as_str().unwrap_or_default();
        authorize_change_of_existing(&ui.jss.auth, who, team, &admitted.namespace)?;
    }
    if let Some(used) = used {
        check_all(&quotas, &used, &want).map_err(Rejection::QuotaExceeded)?;
        check_placeable(&quotas, &used, &clusters, &policy, &admitted.demand)
            .map_err(Rejection::QuotaExceeded)?;
    }
    let applied = hub.apply(&admitted).await?;
    let left = rollout::fields_not_undone(&applied.data["spec"], &content);
    let mut message = format!(
        "{} runs revision {target}'s content again ({}); the hub rolls it out as a new revision",
        rollout::object_text(w),
        rollout::images(&content).join(", ")
    );
    if !left.is_empty() {
        message.push_str(&format!(
            "; other writers of the spec keep {} as they are",
            left.join(", ")
        ));
    }
    Ok(RolloutActionReply {
        workload: w.clone(),
        action: RolloutAction::Undo,
        revision: Some(target),
        stage: None,
        stage_name: None,
        changed: true,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::workload::WorkloadKind;

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
        assert!(check_seen(&w(), Some(&s), Some(3)).is_ok());
        assert!(check_seen(&w(), Some(&s), None).is_ok());
        let e = check_seen(&w(), Some(&s), Some(2)).unwrap_err();
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
    s: &super::Session,
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
    let (ok, text) = match ui
        .jss
        .rebalance_as(&s.principal, kind, &ns, &name, dry_run, &mut api_audit)
        .await
    {
        Ok(reply) => {
            audit(&user, verb, &object, "Done", "");
            (true, reply.message)
        }
        Err(r) if r.status() == 403 || r.status() == 404 => {
            audit(&user, verb, &object, r.reason(), &r.to_string());
            return problem(
                StatusCode::from_u16(r.status()).unwrap_or(StatusCode::FORBIDDEN),
                Some(&s),
                false,
                &r.to_string(),
            );
        }
        Err(r) => {
            audit(&user, verb, &object, r.reason(), &r.to_string());
            (false, r.reply().describe(r.status()))
        }
    };
    back_with_flash(&ui, &s, kind, &ns, &name, ok, text)
}

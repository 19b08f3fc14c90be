//! The rollout endpoints' rules, pure: the view of a workload's rollout and its recorded
//! revisions, which stage an approval names, which revision an undo returns to, and the
//! object an undo submits (the current spec running an older revision's content, with
//! only the metadata the JSS applied before). The shell ([`super::server`]) reads the hub
//! object and its ControllerRevisions, and writes what these decide.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Map, Value};

use super::admission::FIELD_MANAGER;
use super::error::{Detail, Rejection};
use super::wire::{ObjectName, RevisionEntry, RolloutAction, RolloutActionRequest, RolloutView};
use crate::api::rollout::{
    ANNOTATION_APPROVED, ANNOTATION_PAUSED, RolloutPolicy, RolloutStatus, phase,
};
use crate::api::workload::{COMPUTE_API_VERSION, WorkloadKind};

/// `status.rollout` of a hub object, if the hub wrote one that reads.
pub fn status_of(o: &DynamicObject) -> Option<RolloutStatus> {
    serde_json::from_value(o.data["status"]["rollout"].clone()).ok()
}

/// `spec.rollout` of a hub object, if set.
pub fn policy_of(o: &DynamicObject) -> Option<RolloutPolicy> {
    serde_json::from_value(o.data["spec"]["rollout"].clone()).ok()
}

/// Whether the workload is paused by its annotation.
pub fn paused(o: &DynamicObject) -> bool {
    o.annotations()
        .get(ANNOTATION_PAUSED)
        .is_some_and(|v| v == "true")
}

/// `kind namespace/name`, as messages name a workload.
pub fn object_text(w: &ObjectName) -> String {
    format!("{} {}/{}", w.kind.as_str(), w.namespace, w.name)
}

/// The container images of a revision's content: every container and init container of
/// every pod template in it (a template's containers before its init containers), each
/// once.
pub fn images(content: &Value) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for list in ["containers", "initContainers"] {
                    for c in m.get(list).and_then(Value::as_array).into_iter().flatten() {
                        if let Some(i) = c["image"].as_str()
                            && !out.iter().any(|o| o == i)
                        {
                            out.push(i.to_string());
                        }
                    }
                }
                for (k, x) in m {
                    if !matches!(k.as_str(), "containers" | "initContainers") {
                        walk(x, out);
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(content, &mut out);
    out
}

/// The content a ControllerRevision holds.
pub fn content_of(cr: &ControllerRevision) -> Option<&Value> {
    cr.data.as_ref().map(|RawExtension(v)| v)
}

/// The recorded revisions of a workload, oldest first, against where its rollout stands.
pub fn history(
    revisions: &[ControllerRevision],
    status: Option<&RolloutStatus>,
) -> Vec<RevisionEntry> {
    let mut out: Vec<RevisionEntry> = revisions
        .iter()
        .map(|cr| {
            let content = content_of(cr);
            RevisionEntry {
                revision: cr.revision,
                images: content.map(images).unwrap_or_default(),
                runtime_version: content
                    .and_then(|c| c["runtimeVersion"].as_str())
                    .map(str::to_string),
                created: cr.metadata.creation_timestamp.clone(),
                current: status.is_some_and(|s| s.revision == cr.revision),
                stable: status.is_some_and(|s| s.stable_revision == Some(cr.revision)),
            }
        })
        .collect();
    out.sort_by_key(|e| e.revision);
    out.dedup_by_key(|e| e.revision);
    out
}

/// The rollout view of a hub object with its recorded revisions.
pub fn view(
    kind: WorkloadKind,
    o: &DynamicObject,
    revisions: &[ControllerRevision],
) -> RolloutView {
    let status = status_of(o);
    RolloutView {
        workload: ObjectName {
            kind,
            namespace: o.namespace().unwrap_or_default(),
            name: o.name_any(),
        },
        history: history(revisions, status.as_ref()),
        status,
        policy: policy_of(o),
        approved: o.annotations().get(ANNOTATION_APPROVED).cloned(),
        paused: paused(o),
    }
}

/// The body of `POST .../rollout/{action}`: empty, or a [`RolloutActionRequest`] whose
/// fields fit the action (a stage only to approve, a revision only to undo).
pub fn parse_request(
    action: RolloutAction,
    body: &[u8],
) -> Result<RolloutActionRequest, Rejection> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(RolloutActionRequest::default());
    }
    let req: RolloutActionRequest = serde_json::from_slice(body).map_err(|e| {
        if e.is_data() {
            Rejection::invalid(
                format!("the body is not a rollout request: {e}"),
                vec![Detail::field("body", e.to_string())],
            )
        } else {
            Rejection::BadRequest(format!("the body is not JSON: {e}"))
        }
    })?;
    let misplaced = |field: &str, only: &str| {
        Rejection::invalid(
            format!("{field} is not an argument of {}", action.as_str()),
            vec![Detail::field(field, format!("only {only} takes it"))],
        )
    };
    if req.stage.is_some() && action != RolloutAction::Approve {
        return Err(misplaced("stage", "approve"));
    }
    if req.to_revision.is_some() && action != RolloutAction::Undo {
        return Err(misplaced("toRevision", "undo"));
    }
    Ok(req)
}

/// What a pause did, as people read it (`was`: it was paused already).
pub fn pause_message(w: &ObjectName, status: Option<&RolloutStatus>, was: bool) -> String {
    let what = object_text(w);
    if was {
        return format!("{what} is paused already: nothing changed");
    }
    match status {
        Some(s) if s.phase == phase::COMPLETE => format!(
            "{what} paused; revision {} is Complete, so nothing is rolling out now: the pause holds the next change at its first stage until `pinfed rollout resume`",
            s.revision
        ),
        Some(s) => format!(
            "{what} paused in revision {} ({}): members changing finish, no new member starts until `pinfed rollout resume`",
            s.revision, s.phase
        ),
        None => {
            format!("{what} paused: no member starts a new revision until `pinfed rollout resume`")
        }
    }
}

/// What an approval did, as people read it.
pub fn approve_message(w: &ObjectName, revision: i64, stage: i32, stage_name: &str) -> String {
    format!(
        "approved stage {stage_name:?} ({stage}) of revision {revision} of {}: the hub starts it at its next look",
        object_text(w)
    )
}

/// What a resume did, as people read it (`was`: it was paused).
pub fn resume_message(w: &ObjectName, was: bool) -> String {
    if was {
        format!(
            "{} resumed: its rollout goes on at the hub's next look",
            object_text(w)
        )
    } else {
        format!("{} was not paused: nothing changed", object_text(w))
    }
}

/// An approval from a page that showed another revision than the workload's now: refused,
/// so that nobody approves a change they did not see.
pub fn check_seen(
    w: &ObjectName,
    status: Option<&RolloutStatus>,
    seen: Option<i64>,
) -> Result<(), Rejection> {
    match (seen, status) {
        (Some(seen), Some(s)) if s.revision != seen => Err(Rejection::invalid(
            format!(
                "the page showed revision {seen} of {}, which is at revision {} now: nothing approved (look at the page again)",
                object_text(w),
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

/// The stage an approval names (`--stage`, a name or an index; default the stage that
/// waits): `(index, name)` of the waiting stage, or why it cannot be approved (422,
/// naming the field: `status.rollout.phase` when nothing waits, `stage` when another
/// stage is named).
pub fn approval_stage(
    w: &ObjectName,
    status: Option<&RolloutStatus>,
    asked: Option<&str>,
) -> Result<(i32, String), Rejection> {
    let Some(s) = status else {
        return Err(Rejection::invalid(
            format!(
                "{} has no rollout yet (the hub has not looked at it): nothing waits for approval",
                object_text(w)
            ),
            vec![Detail::field("status.rollout", "not written yet")],
        ));
    };
    let name_of = |i: i32| {
        usize::try_from(i)
            .ok()
            .and_then(|i| s.stages.get(i))
            .cloned()
            .unwrap_or_else(|| format!("stage-{i}"))
    };
    if s.phase != phase::WAITING_FOR_APPROVAL {
        return Err(Rejection::invalid(
            format!(
                "revision {} of {} is {}, not waiting for approval{}",
                s.revision,
                object_text(w),
                s.phase,
                s.message
                    .as_ref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default()
            ),
            vec![Detail::field(
                "status.rollout.phase",
                format!(
                    "{} (approve only a rollout that is WaitingForApproval)",
                    s.phase
                ),
            )],
        ));
    }
    let waiting = s.stage.unwrap_or(0);
    let Some(asked) = asked.map(str::trim) else {
        return Ok((waiting, name_of(waiting)));
    };
    let by_name = s
        .stages
        .iter()
        .position(|n| n == asked)
        .and_then(|i| i32::try_from(i).ok());
    let by_index = asked
        .parse::<i32>()
        .ok()
        .filter(|i| usize::try_from(*i).is_ok_and(|i| i < s.stages.len().max(1)));
    let Some(index) = by_name.or(by_index) else {
        let known = if s.stages.is_empty() {
            "one stage, 0".to_string()
        } else {
            s.stages
                .iter()
                .enumerate()
                .map(|(i, n)| format!("{n} ({i})"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(Rejection::invalid(
            format!("{} has no stage {asked:?}", object_text(w)),
            vec![Detail::field(
                "stage",
                format!("no stage {asked:?}; its stages: {known}"),
            )],
        ));
    };
    if index != waiting {
        return Err(Rejection::invalid(
            format!(
                "stage {:?} ({index}) of revision {} is not waiting for approval; stage {:?} ({waiting}) is",
                name_of(index),
                s.revision,
                name_of(waiting)
            ),
            vec![Detail::field(
                "stage",
                format!(
                    "{:?} is not the stage that waits for approval ({:?})",
                    name_of(index),
                    name_of(waiting)
                ),
            )],
        ));
    }
    Ok((index, name_of(index)))
}

/// The revision an undo returns to: `asked`, else the stable revision when it is not the
/// current one, else the newest recorded revision before the current one. A revision
/// without a record is 404 naming it; the current revision, or none to go back to, 422.
pub fn undo_target(
    w: &ObjectName,
    status: Option<&RolloutStatus>,
    recorded: &[i64],
    asked: Option<i64>,
) -> Result<i64, Rejection> {
    let list = |r: &[i64]| {
        if r.is_empty() {
            "none".to_string()
        } else {
            r.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
        }
    };
    let current = status
        .map(|s| s.revision)
        .or_else(|| recorded.iter().copied().max());
    if let Some(t) = asked {
        if Some(t) == current {
            return Err(Rejection::invalid(
                format!("revision {t} is what {} runs now", object_text(w)),
                vec![Detail::field(
                    "toRevision",
                    format!("{t} is the current revision"),
                )],
            ));
        }
        if !recorded.contains(&t) {
            return Err(Rejection::NotFound(format!(
                "revision {t} of {} has no record on the hub (recorded revisions: {})",
                object_text(w),
                list(recorded)
            )));
        }
        return Ok(t);
    }
    let Some(current) = current else {
        return Err(Rejection::invalid(
            format!("{} has no recorded revision yet", object_text(w)),
            vec![Detail::field("toRevision", "no revision is recorded")],
        ));
    };
    let stable = status
        .and_then(|s| s.stable_revision)
        .filter(|s| *s != current && recorded.contains(s));
    let before = recorded.iter().copied().filter(|r| *r < current).max();
    stable.or(before).ok_or_else(|| {
        Rejection::invalid(
            format!(
                "{} has no recorded revision before {current} to return to (recorded revisions: {})",
                object_text(w),
                list(recorded)
            ),
            vec![Detail::field(
                "toRevision",
                format!("no revision before {current} is recorded"),
            )],
        )
    })
}

/// The label and annotation keys `manager` set with server-side apply (its `Apply` entry
/// in `managedFields`).
fn applied_keys(o: &DynamicObject, manager: &str) -> (Vec<String>, Vec<String>) {
    let mut labels = Vec::new();
    let mut annotations = Vec::new();
    for entry in o.managed_fields() {
        if entry.manager.as_deref() != Some(manager) || entry.operation.as_deref() != Some("Apply")
        {
            continue;
        }
        let Some(fields) = entry.fields_v1.as_ref() else {
            continue;
        };
        let meta = &fields.0["f:metadata"];
        for (set, out) in [
            ("f:labels", &mut labels),
            ("f:annotations", &mut annotations),
        ] {
            for k in meta[set].as_object().into_iter().flatten().map(|(k, _)| k) {
                if let Some(name) = k.strip_prefix("f:") {
                    out.push(name.to_string());
                }
            }
        }
    }
    (labels, annotations)
}

/// What an undo submits: the workload as the JSS applied it (its labels and annotations
/// the JSS set, with their values now; none that the hub or anyone else set) with the
/// current spec running `content` ([`crate::rollout::revision::overlay`]: where and how
/// many stay today's). The admission path then checks it as any submission.
pub fn undo_object(kind: WorkloadKind, o: &DynamicObject, content: &Value) -> Value {
    let mut spec = o.data["spec"].clone();
    crate::rollout::revision::overlay(&mut spec, content);
    let (label_keys, annotation_keys) = applied_keys(o, FIELD_MANAGER);
    let pick = |all: &BTreeMap<String, String>, keys: &[String]| -> Map<String, Value> {
        keys.iter()
            .filter_map(|k| all.get(k).map(|v| (k.clone(), Value::String(v.clone()))))
            .collect()
    };
    let mut metadata = Map::new();
    metadata.insert("name".into(), o.name_any().into());
    if let Some(ns) = o.namespace() {
        metadata.insert("namespace".into(), ns.into());
    }
    let labels = pick(o.labels(), &label_keys);
    if !labels.is_empty() {
        metadata.insert("labels".into(), Value::Object(labels));
    }
    let annotations = pick(o.annotations(), &annotation_keys);
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    serde_json::json!({
        "apiVersion": COMPUTE_API_VERSION,
        "kind": kind.as_str(),
        "metadata": metadata,
        "spec": spec,
    })
}

/// The top-level fields of a revision's content the applied spec does not run as the
/// content says (another field manager keeps them): empty when the undo took whole.
pub fn fields_not_undone(applied_spec: &Value, content: &Value) -> Vec<String> {
    let runtime = content["runtimeVersion"].as_str().unwrap_or_default();
    let now = crate::rollout::revision::content(applied_spec, runtime);
    let (Some(now), Some(want)) = (now.as_object(), content.as_object()) else {
        return Vec::new();
    };
    let mut keys: Vec<String> = now
        .keys()
        .chain(want.keys())
        .filter(|k| now.get(*k) != want.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::rollout::RolloutMember;
    use serde_json::json;

    fn name() -> ObjectName {
        ObjectName {
            kind: WorkloadKind::Service,
            namespace: "ads".into(),
            name: "web".into(),
        }
    }

    fn waiting(stage: i32) -> RolloutStatus {
        RolloutStatus {
            revision: 2,
            revision_hash: "h".into(),
            stable_revision: Some(1),
            phase: phase::WAITING_FOR_APPROVAL.into(),
            stage: Some(stage),
            stages: vec!["canary".into(), "second".into(), "rest".into()],
            members: vec![RolloutMember {
                cluster: "a".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn field_of(e: &Rejection) -> String {
        match e.details().first() {
            Some(Detail::Field { field, .. }) => field.clone(),
            _ => String::new(),
        }
    }

    #[test]
    fn approval_names_the_stage_that_waits_by_name_or_index() {
        let s = waiting(1);
        assert_eq!(
            approval_stage(&name(), Some(&s), None).unwrap(),
            (1, "second".into())
        );
        assert_eq!(
            approval_stage(&name(), Some(&s), Some("second")).unwrap(),
            (1, "second".into())
        );
        assert_eq!(
            approval_stage(&name(), Some(&s), Some("1")).unwrap(),
            (1, "second".into())
        );
        // Another stage: refused, naming both.
        let e = approval_stage(&name(), Some(&s), Some("rest")).unwrap_err();
        assert_eq!((e.status(), field_of(&e)), (422, "stage".into()));
        assert!(
            e.to_string().contains("\"rest\" (2)") && e.to_string().contains("\"second\" (1)"),
            "{e}"
        );
        // No such stage: the stages are listed.
        let e = approval_stage(&name(), Some(&s), Some("nope")).unwrap_err();
        let text = e.reply().describe(e.status());
        assert!(text.contains("canary (0), second (1), rest (2)"), "{text}");
        let e = approval_stage(&name(), Some(&s), Some("7")).unwrap_err();
        assert_eq!(field_of(&e), "stage");
        // Nothing waits: the phase is named.
        let mut p = waiting(1);
        p.phase = phase::PROGRESSING.into();
        let e = approval_stage(&name(), Some(&p), None).unwrap_err();
        assert_eq!(
            (e.status(), field_of(&e)),
            (422, "status.rollout.phase".into())
        );
        assert!(e.to_string().contains("is Progressing"), "{e}");
        assert_eq!(
            field_of(&approval_stage(&name(), None, None).unwrap_err()),
            "status.rollout"
        );
    }

    #[test]
    fn undo_returns_to_the_stable_revision_else_the_one_before() {
        let w = name();
        let mut s = waiting(0);
        // Stable 1, current 2.
        assert_eq!(undo_target(&w, Some(&s), &[1, 2], None).unwrap(), 1);
        // Complete at 3 (stable 3): the newest before it.
        s.revision = 3;
        s.stable_revision = Some(3);
        assert_eq!(undo_target(&w, Some(&s), &[1, 2, 3], None).unwrap(), 2);
        // Stable pruned: the newest before the current one.
        s.stable_revision = Some(1);
        assert_eq!(undo_target(&w, Some(&s), &[2, 3], None).unwrap(), 2);
        // Asked for.
        assert_eq!(undo_target(&w, Some(&s), &[1, 2, 3], Some(1)).unwrap(), 1);
        let e = undo_target(&w, Some(&s), &[1, 2, 3], Some(99)).unwrap_err();
        assert_eq!(e.status(), 404);
        assert!(
            e.to_string().contains("revision 99") && e.to_string().contains("1, 2, 3"),
            "{e}"
        );
        let e = undo_target(&w, Some(&s), &[1, 2, 3], Some(3)).unwrap_err();
        assert_eq!((e.status(), field_of(&e)), (422, "toRevision".into()));
        // Nothing before.
        s.revision = 1;
        s.stable_revision = Some(1);
        let e = undo_target(&w, Some(&s), &[1], None).unwrap_err();
        assert_eq!((e.status(), field_of(&e)), (422, "toRevision".into()));
        // No status yet: the newest recorded is current.
        assert_eq!(undo_target(&w, None, &[1, 2], None).unwrap(), 1);
    }

    #[test]
    fn a_request_carries_only_what_its_action_takes() {
        assert_eq!(
            parse_request(RolloutAction::Pause, b"").unwrap(),
            RolloutActionRequest::default()
        );
        let r = parse_request(RolloutAction::Approve, br#"{"stage": "rest"}"#).unwrap();
        assert_eq!(r.stage.as_deref(), Some("rest"));
        let r = parse_request(RolloutAction::Undo, br#"{"toRevision": 3}"#).unwrap();
        assert_eq!(r.to_revision, Some(3));
        let e = parse_request(RolloutAction::Pause, br#"{"stage": "rest"}"#).unwrap_err();
        assert_eq!((e.status(), field_of(&e)), (422, "stage".into()));
        let e = parse_request(RolloutAction::Approve, br#"{"toRevision": 1}"#).unwrap_err();
        assert_eq!(field_of(&e), "toRevision");
        let e = parse_request(RolloutAction::Undo, br#"{"bogus": 1}"#).unwrap_err();
        assert_eq!((e.status(), field_of(&e)), (422, "body".into()));
        assert_eq!(
            parse_request(RolloutAction::Undo, b"{")
                .unwrap_err()
                .status(),
            400
        );
    }

    #[test]
    fn pausing_a_complete_rollout_says_so() {
        let mut s = waiting(0);
        s.phase = phase::COMPLETE.into();
        let m = pause_message(&name(), Some(&s), false);
        assert!(m.contains("Complete") && m.contains("next change"), "{m}");
        assert!(pause_message(&name(), Some(&s), true).contains("paused already"));
    }

    fn hub_object() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
            "metadata": {"name": "web", "namespace": "ads", "uid": "u", "resourceVersion": "9",
                "labels": {"app": "web", "hub-set": "x"},
                "annotations": {"pinterest.com/submitted-by": "alice", "pinterest.com/artifact": "inline",
                    "federation.pinterest.com/decision": "d", ANNOTATION_PAUSED: "true"},
                "finalizers": ["f"],
                "managedFields": [
                    {"manager": "pinfed-jss", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}},
                        "f:annotations": {"f:pinterest.com/submitted-by": {}, "f:pinterest.com/artifact": {}}},
                        "f:spec": {"f:replicas": {}}}},
                    {"manager": "pinfed", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:metadata": {"f:annotations": {"f:federation.pinterest.com/decision": {}}}}}
                ]},
            "spec": {"owner": {"team": "ads", "contact": "c"}, "replicas": 5,
                "rollout": {"stages": [{"name": "canary", "approval": true, "count": 1}, {"name": "rest"}]},
                "ingress": {"host": "h"},
                "template": {"spec": {"containers": [{"name": "app", "image": "app:2"}]}}},
            "status": {"rollout": serde_json::to_value(waiting(0)).unwrap()},
        }))
        .unwrap()
    }

    #[test]
    fn an_undo_object_runs_the_old_content_with_only_what_the_jss_applied() {
        let o = hub_object();
        let old = json!({"owner": {"team": "ads", "contact": "c"}, "runtimeVersion": "v1",
            "template": {"spec": {"initContainers": [{"name": "i", "image": "init:1"}],
                "containers": [{"name": "app", "image": "app:1"}, {"name": "b", "image": "init:1"}]}}});
        let u = undo_object(WorkloadKind::Service, &o, &old);
        assert_eq!(u["kind"], "PinterestService");
        assert_eq!(
            u["spec"]["template"]["spec"]["containers"][0]["image"],
            "app:1"
        );
        assert_eq!(u["spec"]["replicas"], 5, "how many stays today's");
        assert!(
            u["spec"]["rollout"].is_object(),
            "how it rolls out stays today's"
        );
        assert!(
            u["spec"].get("ingress").is_none(),
            "what the old revision lacked goes"
        );
        assert_eq!(u["spec"]["runtimeVersion"], "v1");
        let meta = u["metadata"].as_object().unwrap();
        assert_eq!(meta["labels"], json!({"app": "web"}));
        assert_eq!(
            meta["annotations"],
            json!({"pinterest.com/submitted-by": "alice", "pinterest.com/artifact": "inline"}),
            "neither the hub's decision nor the pause become the JSS's"
        );
        for k in ["resourceVersion", "uid", "finalizers", "managedFields"] {
            assert!(!meta.contains_key(k), "{k}");
        }
        assert!(fields_not_undone(&u["spec"], &old).is_empty());
        let mut kept = u["spec"].clone();
        kept["ingress"] = json!({"host": "h"});
        assert_eq!(fields_not_undone(&kept, &old), vec!["ingress".to_string()]);
        assert_eq!(
            images(&old),
            vec!["app:1".to_string(), "init:1".to_string()]
        );
    }

    #[test]
    fn the_view_lists_revisions_oldest_first_with_current_and_stable() {
        let o = hub_object();
        let cr = |rev: i64, image: &str| ControllerRevision {
            metadata: kube::api::ObjectMeta {
                name: Some(format!("pinterestservice-web-{rev}")),
                creation_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    "2026-01-01T00:00:00Z".parse().unwrap(),
                )),
                ..Default::default()
            },
            data: Some(RawExtension(json!({"runtimeVersion": "v1",
                "template": {"spec": {"containers": [{"name": "app", "image": image}]}}}))),
            revision: rev,
        };
        let v = view(WorkloadKind::Service, &o, &[cr(2, "app:2"), cr(1, "app:1")]);
        assert!(v.paused);
        assert_eq!(v.policy.as_ref().unwrap().stages.len(), 2);
        let revs: Vec<(i64, bool, bool)> = v
            .history
            .iter()
            .map(|e| (e.revision, e.current, e.stable))
            .collect();
        assert_eq!(revs, vec![(1, false, true), (2, true, false)]);
        assert_eq!(v.history[0].images, vec!["app:1".to_string()]);
        assert_eq!(v.history[0].runtime_version.as_deref(), Some("v1"));
        assert_eq!(v.status.unwrap().phase, phase::WAITING_FOR_APPROVAL);
    }
}

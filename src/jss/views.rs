//! What the read endpoints answer, built from hub objects. Pure.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::DynamicObject;

use super::admission::{ANNOTATION_ARTIFACT, ANNOTATION_SUBMITTED_BY};
use super::wire::{
    Amounts, ClusterView, Desired, OwnedView, OwnersReport, QueueEntry, QuotaView, TeamView,
    WorkloadView,
};
use crate::api::common::QueueStanding;
use crate::api::federation::{FederatedQuota, MemberCluster};
use crate::api::workload::{Counted, WorkloadKind};
use crate::placement::model::Resources;

fn annotation(o: &DynamicObject, key: &str) -> Option<String> {
    o.annotations().get(key).cloned()
}

/// One workload with its aggregated per-cluster status.
pub fn workload(kind: WorkloadKind, o: &DynamicObject, requested: &Resources) -> WorkloadView {
    let spec = &o.data["spec"];
    // Read from the JSON the list holds: a typed parse of every workload's whole spec
    // (pod templates and all) would cost a listing of thousands far more.
    let desired = match kind.counted() {
        Counted::Replicas => Desired {
            replicas: spec["replicas"].as_i64(),
            ..Default::default()
        },
        Counted::Shards => Desired {
            shards: spec["shards"].as_i64(),
            ..Default::default()
        },
        Counted::Gang => Desired {
            replicas: Some(
                spec["replicaSpecs"]
                    .as_object()
                    .map(|m| m.values().filter_map(|r| r["replicas"].as_i64()).sum())
                    .unwrap_or(0),
            ),
            ..Default::default()
        },
        Counted::Runs => Desired {
            schedule: spec["schedule"].as_str().map(str::to_string),
            ..Default::default()
        },
        Counted::Nodes => Desired::default(),
    };
    let owner = |k: &str| spec["owner"][k].as_str().map(str::to_string);
    WorkloadView {
        kind,
        namespace: o.namespace(),
        name: o.name_any(),
        uid: o.metadata.uid.clone(),
        generation: o.metadata.generation,
        deleting: o.metadata.deletion_timestamp.is_some(),
        team: owner("team"),
        contact: owner("contact"),
        submitted_by: annotation(o, ANNOTATION_SUBMITTED_BY),
        artifact: annotation(o, ANNOTATION_ARTIFACT),
        desired,
        requested: requested.into(),
        priority_class_name: spec["priorityClassName"].as_str().map(str::to_string),
        status: o.data.get("status").cloned().unwrap_or_default(),
    }
}

/// One member cluster: where it is, whether it is Ready, and its capacity.
pub fn cluster(m: &MemberCluster) -> ClusterView {
    let status = m.status.clone().unwrap_or_default();
    let ready = crate::api::common::find_condition(&status.conditions, "Ready");
    ClusterView {
        name: m.name_any(),
        region: m.spec.region.clone(),
        zone: m.spec.zone.clone(),
        labels: m.labels().clone(),
        ready: ready
            .map(|c| c.status.as_str().to_string())
            .unwrap_or_else(|| "Unknown".into()),
        ready_reason: ready.map(|c| c.reason.clone()),
        ready_message: ready.map(|c| c.message.clone()),
        kubernetes_version: status.kubernetes_version,
        last_heartbeat_time: status.last_heartbeat_time,
        nodes: status.nodes,
        capacity: status.capacity,
        allocatable: status.allocatable,
        allocated: status.allocated,
        available: status.available,
    }
}

/// One quota: hard totals and caps, what the hub has placed under it (its status), and
/// what the namespace's submitted workloads request (computed by the JSS).
pub fn quota(q: &FederatedQuota, requested: Option<&Resources>) -> QuotaView {
    let status = q.status.clone().unwrap_or_default();
    QuotaView {
        namespace: q.namespace(),
        name: q.name_any(),
        hard: q.spec.hard.clone(),
        per_cluster: q.spec.per_cluster.clone(),
        used: status.used,
        used_per_cluster: status.used_per_cluster,
        requested: requested.map(Amounts::from),
        conditions: status.conditions,
    }
}

/// One row of the governance report.
#[derive(Clone, Debug)]
pub struct OwnedWorkload {
    pub team: String,
    pub contact: String,
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    pub clusters: Vec<String>,
    pub requested: Resources,
    /// When it may be garbage collected (`expand::expires_at`); `None` when unknown.
    pub expires_at: Option<Timestamp>,
}

impl OwnedWorkload {
    pub fn expired(&self, now: Timestamp) -> bool {
        self.expires_at.is_some_and(|t| t <= now)
    }
}

/// What each team runs where, with what it requests and when it expires: teams sorted by
/// name, each with its workloads and totals. `only_expired` keeps the workloads past
/// their expiry at `now` (and the teams that have some).
pub fn owners(rows: &[OwnedWorkload], now: Timestamp, only_expired: bool) -> OwnersReport {
    let mut by_team: BTreeMap<&str, Vec<&OwnedWorkload>> = BTreeMap::new();
    for r in rows.iter().filter(|r| !only_expired || r.expired(now)) {
        by_team.entry(r.team.as_str()).or_default().push(r);
    }
    let sorted = |mut v: Vec<String>| {
        v.sort_unstable();
        v.dedup();
        v
    };
    let teams = by_team
        .into_iter()
        .map(|(team, ws)| {
            let total = ws
                .iter()
                .fold(Resources::ZERO, |acc, w| acc.saturating_add(&w.requested));
            TeamView {
                team: team.to_string(),
                contacts: sorted(ws.iter().map(|w| w.contact.clone()).collect()),
                clusters: sorted(ws.iter().flat_map(|w| w.clusters.clone()).collect()),
                requested: (&total).into(),
                expired: ws.iter().filter(|w| w.expired(now)).count(),
                workloads: ws
                    .iter()
                    .map(|w| OwnedView {
                        kind: w.kind,
                        namespace: w.namespace.clone(),
                        name: w.name.clone(),
                        clusters: w.clusters.clone(),
                        requested: (&w.requested).into(),
                        expires_at: w.expires_at.map(|t| t.to_string()),
                        expired: w.expired(now),
                    })
                    .collect(),
            }
        })
        .collect();
    OwnersReport { teams }
}

/// A workload's standing in the hub's queue, from `status.placement.queue` as the hub last
/// wrote it; `None` when it waits for nothing (or is being deleted: the hub has taken it
/// out of the queue, whatever its status still says).
pub fn queue_entry(kind: WorkloadKind, o: &DynamicObject) -> Option<QueueEntry> {
    if o.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let placement = &o.data["status"]["placement"];
    let q: QueueStanding = serde_json::from_value(placement.get("queue")?.clone()).ok()?;
    Some(QueueEntry {
        kind,
        namespace: o.namespace().unwrap_or_default(),
        name: o.name_any(),
        team: o.data["spec"]["owner"]["team"].as_str().map(str::to_string),
        position: q.position,
        waiting: q.waiting,
        priority: q.priority,
        effective_priority: q.effective_priority,
        priority_class_name: q.priority_class_name,
        since: q.since,
        waiting_for: q.waiting_for,
        unplaced: placement["unplaced"]
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .unwrap_or(0),
    })
}

/// The hub's queue as one caller sees it (`GET /v1/queue`, the UI's Queue page): every
/// waiting workload that `visible(team, namespace)` lets through — the owners report's
/// rule, [`super::auth::may_see_workload`] — in `namespace` only when given, first in line
/// first (by position, then the longest waiting; positions are each workload's as the hub
/// last wrote it, so two may briefly share one).
pub fn queue<'a>(
    workloads: impl IntoIterator<Item = (WorkloadKind, &'a DynamicObject)>,
    namespace: Option<&str>,
    visible: impl Fn(&str, &str) -> bool,
) -> Vec<QueueEntry> {
    let mut out: Vec<QueueEntry> = workloads
        .into_iter()
        .filter(|(_, o)| namespace.is_none_or(|ns| o.namespace().as_deref() == Some(ns)))
        .filter_map(|(k, o)| queue_entry(k, o))
        .filter(|e| visible(e.team.as_deref().unwrap_or("-"), &e.namespace))
        .collect();
    out.sort_by(|a, b| {
        (a.position, a.since.0, a.kind, &a.namespace, &a.name).cmp(&(
            b.position,
            b.since.0,
            b.kind,
            &b.namespace,
            &b.name,
        ))
    });
    out
}

/// Where a workload arriving now with `priority` would stand in the hub's queue, from the
/// standings the hub last wrote (`waiting`: every waiting workload, whoever may see it,
/// the arriving one left out): behind each one whose effective priority is as high or
/// higher (equal ones have waited longer), ahead of the rest — its position and how many
/// would wait in all. An estimate: the hub ranks again as it decides, and aging moves
/// everyone.
pub fn position_on_arrival(waiting: &[QueueEntry], priority: i32) -> (i32, i32) {
    let ahead = waiting
        .iter()
        .filter(|e| e.effective_priority >= priority)
        .count();
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    (count(ahead + 1), count(waiting.len() + 1))
}

/// The clusters a workload was placed on, from its hub status.
pub fn placed_clusters(o: &DynamicObject) -> Vec<String> {
    o.data["status"]["placement"]["placements"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| p["cluster"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::quantity::Milli;
    use serde_json::{Value, json};

    #[test]
    fn owners_groups_by_team_with_totals() {
        let row = |team: &str, name: &str, clusters: &[&str], cpu: i128| OwnedWorkload {
            team: team.into(),
            contact: format!("{team}@x"),
            kind: WorkloadKind::Service,
            namespace: "ns".into(),
            name: name.into(),
            clusters: clusters.iter().map(|c| c.to_string()).collect(),
            requested: Resources::pod(Milli(cpu), Milli(1000 << 30), 1),
            expires_at: None,
        };
        let v = serde_json::to_value(owners(
            &[
                row("search", "s", &["b"], 1000),
                row("ads", "a1", &["a", "b"], 500),
                row("ads", "a2", &["c", "a"], 1500),
            ],
            Timestamp::now(),
            false,
        ))
        .unwrap();
        let teams = v["teams"].as_array().unwrap();
        assert_eq!(teams[0]["team"], "ads");
        assert_eq!(teams[0]["requested"]["cpu"], "2");
        assert_eq!(teams[0]["requested"]["memory"], "2Gi");
        assert_eq!(teams[0]["requested"]["gpus"], 2);
        assert_eq!(teams[0]["clusters"], json!(["a", "b", "c"]));
        assert_eq!(teams[0]["workloads"].as_array().unwrap().len(), 2);
        assert_eq!(teams[1]["team"], "search");
        assert_eq!(teams[0]["expired"], 0);
    }

    #[test]
    fn owners_of_expired_lists_only_workloads_past_their_expiry_with_where_they_run() {
        let now: Timestamp = "2026-11-25T12:00:00Z".parse().unwrap();
        let row = |team: &str, name: &str, expires: Option<&str>| OwnedWorkload {
            team: team.into(),
            contact: "c".into(),
            kind: WorkloadKind::JobSet,
            namespace: "ns".into(),
            name: name.into(),
            clusters: vec!["a".into(), "b".into()],
            requested: Resources::ZERO,
            expires_at: expires.map(|t| t.parse().unwrap()),
        };
        let rows = [
            row("ads", "past", Some("2026-11-01T00:00:00Z")),
            row("ads", "exactly-now", Some("2026-11-25T12:00:00Z")),
            row("ads", "future", Some("2026-12-01T00:00:00Z")),
            row("ads", "unknown", None),
            row("search", "later", Some("2027-01-01T00:00:00Z")),
        ];
        let all = serde_json::to_value(owners(&rows, now, false)).unwrap();
        assert_eq!(all["teams"][0]["expired"], 2);
        assert_eq!(all["teams"][0]["workloads"][2]["expired"], false);
        assert_eq!(all["teams"][0]["workloads"][3]["expiresAt"], Value::Null);
        let expired = serde_json::to_value(owners(&rows, now, true)).unwrap();
        let teams = expired["teams"].as_array().unwrap();
        assert_eq!(teams.len(), 1, "search has nothing expired: {expired}");
        let names: Vec<&str> = teams[0]["workloads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["past", "exactly-now"]);
        assert_eq!(teams[0]["workloads"][0]["clusters"], json!(["a", "b"]));
        assert_eq!(
            teams[0]["workloads"][0]["expiresAt"],
            "2026-11-01T00:00:00Z"
        );
    }

    /// A hub workload waiting at `position` since `since`, for `team` in `ns`.
    pub(crate) fn waiting(
        kind: &str,
        ns: &str,
        name: &str,
        team: &str,
        position: i32,
        since: &str,
    ) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": kind,
            "metadata": {"name": name, "namespace": ns},
            "spec": {"owner": {"team": team, "contact": "c"}, "priorityClassName": "high"},
            "status": {"placement": {"unplaced": 3, "reason": "no room",
                "queue": {"position": position, "waiting": 4, "priority": 1000,
                    "effectivePriority": 1010, "priorityClassName": "high", "since": since,
                    "waitingFor": format!("room in use1a for {name}")}}}
        }))
        .unwrap()
    }

    #[test]
    fn the_queue_lists_waiting_workloads_by_position_and_only_those_the_caller_may_see() {
        let placed: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
            "metadata": {"name": "placed", "namespace": "ads"},
            "spec": {"owner": {"team": "ads"}},
            "status": {"placement": {"unplaced": 0, "placements": [{"cluster": "a"}]}}
        }))
        .unwrap();
        let mut deleting = waiting(
            "PinterestService",
            "ads",
            "going",
            "ads",
            1,
            "2026-01-01T00:00:00Z",
        );
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-01-01T00:01:00Z".parse().unwrap(),
            ));
        let objects = [
            (
                WorkloadKind::JobSet,
                waiting(
                    "PinterestJobSet",
                    "ads",
                    "third",
                    "ads",
                    3,
                    "2026-01-01T00:00:00Z",
                ),
            ),
            (WorkloadKind::Service, placed),
            (WorkloadKind::Service, deleting),
            (
                WorkloadKind::TrainingJob,
                waiting(
                    "PinterestTrainingJob",
                    "ml",
                    "first",
                    "ml",
                    1,
                    "2026-01-01T00:00:00Z",
                ),
            ),
            // Two at one position (each as the hub last wrote it): the longer waiting first.
            (
                WorkloadKind::Service,
                waiting(
                    "PinterestService",
                    "ads",
                    "second-b",
                    "ads",
                    2,
                    "2026-01-01T00:05:00Z",
                ),
            ),
            (
                WorkloadKind::Service,
                waiting(
                    "PinterestService",
                    "shared",
                    "second-a",
                    "search",
                    2,
                    "2026-01-01T00:01:00Z",
                ),
            ),
            // Its own team's workload in a namespace it may not use is still its own.
            (
                WorkloadKind::CronJob,
                waiting(
                    "PinterestCronJob",
                    "elsewhere",
                    "fourth",
                    "ads",
                    4,
                    "2026-01-01T00:00:00Z",
                ),
            ),
        ];
        let all = || objects.iter().map(|(k, o)| (*k, o));
        let names = |v: &[QueueEntry]| v.iter().map(|e| e.name.clone()).collect::<Vec<_>>();
        let everyone = queue(all(), None, |_, _| true);
        assert_eq!(
            names(&everyone),
            ["first", "second-a", "second-b", "third", "fourth"]
        );
        let e = &everyone[3];
        assert_eq!(
            (e.kind, e.namespace.as_str(), e.team.as_deref()),
            (WorkloadKind::JobSet, "ads", Some("ads"))
        );
        assert_eq!(
            (e.position, e.waiting, e.priority, e.effective_priority),
            (3, 4, 1000, 1010)
        );
        assert_eq!(
            (e.priority_class_name.as_deref(), e.unplaced),
            (Some("high"), 3)
        );
        assert_eq!(e.waiting_for, "room in use1a for third");
        assert_eq!(e.since.0.to_string(), "2026-01-01T00:00:00Z");
        // Team ads in namespaces ads and shared (the owners report's rule).
        let ads = |team: &str, ns: &str| team == "ads" || ns == "ads" || ns == "shared";
        assert_eq!(
            names(&queue(all(), None, ads)),
            ["second-a", "second-b", "third", "fourth"]
        );
        assert_eq!(
            names(&queue(all(), Some("ads"), ads)),
            ["second-b", "third"]
        );
        assert!(queue(all(), Some("ml"), ads).is_empty(), "not visible");
        assert!(queue(all(), Some("nowhere"), |_, _| true).is_empty());
    }

    #[test]
    fn workload_view_carries_status_and_submitter() {
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
            "metadata": {"name": "web", "namespace": "ads",
                "annotations": {ANNOTATION_SUBMITTED_BY: "alice"}},
            "spec": {"owner": {"team": "ads", "contact": "c"}, "replicas": 3},
            "status": {"placement": {"placements": [{"cluster": "a", "replicas": 3}]}}
        }))
        .unwrap();
        let v =
            serde_json::to_value(workload(WorkloadKind::Service, &o, &Resources::ZERO)).unwrap();
        assert_eq!(v["submittedBy"], "alice");
        assert_eq!(v["desired"]["replicas"], 3);
        assert_eq!(v["team"], "ads");
        assert!(v.get("priorityClassName").is_none(), "{v}");
        assert_eq!(placed_clusters(&o), vec!["a".to_string()]);
    }

    #[test]
    fn an_arrival_stands_behind_every_one_as_high_and_ahead_of_the_rest() {
        let entry = |name: &str, effective: i32| QueueEntry {
            kind: WorkloadKind::JobSet,
            namespace: "ns".into(),
            name: name.into(),
            team: None,
            position: 0,
            waiting: 0,
            priority: effective,
            effective_priority: effective,
            priority_class_name: None,
            since: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
            waiting_for: String::new(),
            unplaced: 1,
        };
        assert_eq!(position_on_arrival(&[], 0), (1, 1), "nobody waits");
        let waiting = [entry("urgent", 5000), entry("batch", 10), entry("aged", 0)];
        // Equal effective priority: the one already waiting goes first.
        assert_eq!(position_on_arrival(&waiting, 10), (3, 4));
        assert_eq!(position_on_arrival(&waiting, 11), (2, 4));
        assert_eq!(position_on_arrival(&waiting, 10_000), (1, 4));
        assert_eq!(position_on_arrival(&waiting, -1), (4, 4));
    }
}

//! Slices: the per-cluster copy of a hub resource. Pure builders: what a member gets for
//! its share, which ConfigMaps and Secrets the pod template references, and the
//! member-side status a slice reports, in the hub's terms.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::api::common::{Condition, ConditionStatus, MemberWorkloadStatus, condition_types as ct};
use crate::api::federation::{
    ANNOTATION_FAILED_OVER_FROM, ANNOTATION_FAILOVER_MESSAGE, ANNOTATION_PLACEMENT_GENERATION,
};
use crate::api::kind::{PinterestKind, SliceCounts, SliceShare};
use crate::api::workload::WorkloadKind;
use crate::status::member_state;

pub use crate::api::member_slice::{
    ANNOTATION_HUB_GENERATION, ANNOTATION_TRACEPARENT, LABEL_HUB_NAME, LABEL_HUB_NAMESPACE,
    LABEL_HUB_UID, LABEL_SLICE_OF, member_slice_name,
};
/// Finalizer on hub resources: their slices are removed before the resource goes.
pub const FINALIZER: &str = "federation.pinterest.com/slices";

/// Each slice's share of a job set's global parallelism, as placement charges quota for
/// it ([`crate::placement::parallelism_shares`]): one each, the rest in proportion to its
/// shard count, never more than its shards. Deterministic.
pub fn divide_parallelism(
    parallelism: Option<i32>,
    shard_counts: &[(String, u64)],
) -> Vec<(String, Option<i32>)> {
    let Some(p) = parallelism else {
        return shard_counts
            .iter()
            .map(|(c, _)| (c.clone(), None))
            .collect();
    };
    let held: Vec<u64> = shard_counts.iter().map(|(_, n)| *n).collect();
    let shares = crate::placement::parallelism_shares(u32::try_from(p.max(0)).unwrap_or(0), &held);
    shard_counts
        .iter()
        .zip(shares)
        .map(|((c, _), s)| (c.clone(), Some(i32::try_from(s).unwrap_or(i32::MAX))))
        .collect()
}

/// The slice of the hub resource `hub` for one member's share: the hub's spec with the
/// share written in, the hub's labels and annotations plus those tying it to the hub
/// resource, no status.
pub fn build_slice<K: PinterestKind>(hub: &K, share: &SliceShare) -> K {
    let mut slice = hub.clone();
    let meta = hub.meta();
    let mut labels = meta.labels.clone().unwrap_or_default();
    // A label value holds 63 characters; names hold 253. The label marks and selects
    // slices; which hub resource a slice belongs to is read from its own name and
    // namespace (the same as the hub resource's).
    labels.insert(
        LABEL_HUB_NAME.into(),
        crate::expand::names::label_value(meta.name.as_deref().unwrap_or_default()),
    );
    labels.insert(
        LABEL_HUB_NAMESPACE.into(),
        meta.namespace.clone().unwrap_or_default(),
    );
    labels.insert(LABEL_HUB_UID.into(), meta.uid.clone().unwrap_or_default());
    labels.insert(LABEL_SLICE_OF.into(), K::KIND.as_str().into());
    let mut annotations = meta.annotations.clone().unwrap_or_default();
    annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    // The hub's records of its decision are the hub's: copied, each decision it records
    // (written just after the slices of a new workload) would make every slice due again,
    // one more write per member for nothing.
    for hub_only in [
        ANNOTATION_PLACEMENT_GENERATION,
        ANNOTATION_FAILED_OVER_FROM,
        ANNOTATION_FAILOVER_MESSAGE,
        crate::api::rollout::ANNOTATION_APPROVED,
        crate::api::rollout::ANNOTATION_PAUSED,
    ] {
        annotations.remove(hub_only);
    }
    annotations.insert(
        ANNOTATION_HUB_GENERATION.into(),
        meta.generation.unwrap_or(0).to_string(),
    );
    *slice.meta_mut() = ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        labels: Some(labels),
        annotations: Some(annotations),
        ..Default::default()
    };
    *slice.status_mut() = None;
    slice.assign_share(share);
    slice
}

/// `slice` running the revision `content` instead of the spec's own (its share stays).
pub fn run_revision<K: PinterestKind>(
    slice: K,
    content: &serde_json::Value,
) -> Result<K, serde_json::Error> {
    let mut v = serde_json::to_value(&slice)?;
    if let Some(spec) = v.get_mut("spec") {
        crate::rollout::revision::overlay(spec, content);
    }
    serde_json::from_value(v)
}

/// What the hub keeps of a slice it watches in a member: enough to tell whether a write
/// is due and to aggregate, never the pod template (with 10,000 workloads on three
/// members, whole slices were most of the hub's memory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceSummary {
    /// The hub resource's uid the slice was written for.
    pub hub_uid: Option<String>,
    pub generation: Option<i64>,
    /// The hub generation the slice was written from.
    pub hub_generation: Option<i64>,
    /// A digest of the spec as stored (see [`spec_digest`]).
    pub spec_digest: u64,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub share: SliceShare,
    pub report: SliceReport,
}

/// What a slice's status says, in the hub's terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SliceReport {
    /// The slice generation the agent last processed.
    pub observed_generation: Option<i64>,
    /// One word: Ready, Progressing, Degraded, Complete, Failed.
    pub state: &'static str,
    /// The Ready condition's message.
    pub message: Option<String>,
    /// Since when (seconds) the slice's Ready condition is not True (application
    /// failover counts from it).
    pub not_ready_since: Option<i64>,
    pub counts: SliceCounts,
}

impl SliceSummary {
    /// Whether the agent has processed the slice's current generation.
    pub fn processed(&self) -> bool {
        self.report.observed_generation == self.generation
    }

    /// The workload revision the slice carries (none: written before revisions).
    pub fn revision(&self) -> Option<i64> {
        self.annotations
            .get(crate::api::rollout::ANNOTATION_REVISION)
            .and_then(|r| r.parse().ok())
    }
}

/// A digest of a spec (its JSON, keys sorted), to compare a stored slice with the one the
/// hub would write without keeping either.
pub fn spec_digest(spec: Option<&serde_json::Value>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    spec.map(|s| s.to_string()).unwrap_or_default().hash(&mut h);
    h.finish()
}

/// What the hub says of a slice it wrote whose agent has not reported it yet.
pub const NOT_REPORTED_YET: &str =
    "written; its agent reports it once its pods settle or its status hold ends";

/// The summary of a slice as a member stores it.
pub fn summarize<K: PinterestKind>(slice: &K) -> SliceSummary {
    let spec = serde_json::to_value(slice).ok();
    let meta = slice.meta();
    let labels = meta.labels.clone().unwrap_or_default();
    let annotations = meta.annotations.clone().unwrap_or_default();
    let generation = meta.generation;
    let report = match slice.status() {
        Some(st) => {
            let processed = K::observed_generation(st);
            SliceReport {
                observed_generation: processed,
                state: slice_state(K::conditions_of(st), processed == generation),
                message: report_message(K::conditions_of(st)),
                not_ready_since: not_ready_since(K::conditions_of(st)),
                counts: slice.slice_counts(st),
            }
        }
        // Written, but its agent has not reported it: it reports a new slice once its pods
        // settle (`--status-hold-ms`), so this can last a while without anything wrong.
        None => SliceReport {
            state: member_state::PROGRESSING,
            message: Some(NOT_REPORTED_YET.into()),
            ..Default::default()
        },
    };
    SliceSummary {
        hub_uid: labels.get(LABEL_HUB_UID).cloned(),
        hub_generation: annotations
            .get(ANNOTATION_HUB_GENERATION)
            .and_then(|g| g.parse().ok()),
        spec_digest: spec_digest(spec.as_ref().and_then(|s| s.get("spec"))),
        generation,
        share: slice.share_of(),
        labels,
        annotations,
        report,
    }
}

/// The summary of a slice read as a dynamic object (a member's watch tolerates slices
/// that do not parse: such a one has no digest and is written again).
pub fn summarize_dynamic(kind: WorkloadKind, o: &kube::api::DynamicObject) -> SliceSummary {
    let parsed = serde_json::to_value(o).ok();
    crate::api::kind::with_kind!(kind, K => {
        match parsed.and_then(|v| serde_json::from_value::<K>(v).ok()) {
            Some(k) => summarize(&k),
            None => {
                let labels = o.metadata.labels.clone().unwrap_or_default();
                SliceSummary {
                    hub_uid: labels.get(LABEL_HUB_UID).cloned(),
                    generation: o.metadata.generation,
                    hub_generation: None,
                    spec_digest: 0,
                    labels,
                    annotations: o.metadata.annotations.clone().unwrap_or_default(),
                    share: SliceShare::default(),
                    report: SliceReport {
                        state: member_state::PROGRESSING,
                        ..Default::default()
                    },
                }
            }
        }
    })
}

/// What a slice's status says in words: why its agent refused it (the Invalid
/// condition's reason and message), else its Ready condition's message.
fn report_message(conditions: &[Condition]) -> Option<String> {
    let find = |t: &str| conditions.iter().find(|c| c.type_ == t);
    match find(ct::INVALID).filter(|c| c.status == ConditionStatus::True) {
        Some(c) => Some(format!("{}: {}", c.reason, c.message)),
        None => find(ct::READY)
            .map(|c| c.message.clone())
            .filter(|m| !m.is_empty()),
    }
}

/// When the Ready condition turned to what it is, if that is not True.
fn not_ready_since(conditions: &[Condition]) -> Option<i64> {
    conditions
        .iter()
        .find(|c| c.type_ == ct::READY && c.status != ConditionStatus::True)
        .map(|c| c.last_transition_time.0.as_second())
}

/// A slice's one-word state from its conditions; Ready counts only once the agent has
/// processed the current generation.
fn slice_state(conditions: &[Condition], processed: bool) -> &'static str {
    let is = |t: &str| {
        conditions
            .iter()
            .any(|c| c.type_ == t && c.status == ConditionStatus::True)
    };
    if is(ct::INVALID) {
        member_state::REFUSED
    } else if is(ct::FAILED) {
        member_state::FAILED
    } else if is(ct::COMPLETE) {
        member_state::COMPLETE
    } else if is(ct::DEGRADED) {
        member_state::DEGRADED
    } else if is(ct::READY) && processed {
        member_state::READY
    } else {
        member_state::PROGRESSING
    }
}

/// A slice's `clusters[]` entry: its report, read at `observed`.
pub fn member_workload_status(
    cluster: &str,
    slice: &SliceSummary,
    observed: &Time,
) -> MemberWorkloadStatus {
    let r = &slice.report;
    let c = r.counts.clone();
    MemberWorkloadStatus {
        cluster: cluster.to_string(),
        observed_time: observed.clone(),
        observed_generation: r.observed_generation,
        state: Some(r.state.to_string()),
        replicas: c.replicas,
        ready_replicas: c.ready_replicas,
        available_replicas: c.available_replicas,
        updated_replicas: c.updated_replicas,
        shards_running: c.shards_running,
        shards_succeeded: c.shards_succeeded,
        shards_failed: c.shards_failed,
        completed_shards: c.completed_shards,
        failed_shards: c.failed_shards,
        unready_shards: c.unready_shards,
        active: c.active,
        last_schedule_time: c.last_schedule_time,
        last_successful_time: c.last_successful_time,
        message: r.message.clone(),
        revision: slice.revision(),
        overrides: slice
            .annotations
            .get(crate::api::overrides::ANNOTATION_APPLIED)
            .map(|v| {
                v.split(',')
                    .filter(|n| !n.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// Whether `found` (a slice as a member stores it) already is `slice` as the hub would
/// write it: the same spec, and every label and annotation of `slice` with the same value.
/// Fields others own (status, the agent's annotations) do not matter.
pub fn slice_is_current<K: PinterestKind>(found: &SliceSummary, slice: &K) -> bool {
    let want = summarize(slice);
    // A trace context is never a reason to write.
    let subset = |want: &BTreeMap<String, String>, found: &BTreeMap<String, String>| {
        want.iter()
            .filter(|(k, _)| *k != ANNOTATION_TRACEPARENT)
            .all(|(k, v)| found.get(k) == Some(v))
    };
    found.spec_digest == want.spec_digest
        && subset(&want.labels, &found.labels)
        && subset(&want.annotations, &found.annotations)
}

/// The MemberSlice for a pull member's namespace on the hub that carries `slice` (as the
/// hub would write it into a push member). It has the slice's labels, so the hub selects
/// and checks ownership of MemberSlices as it does slices.
pub fn wrap_slice(
    kind: WorkloadKind,
    slice: &serde_json::Value,
    pull_namespace: &str,
) -> serde_json::Value {
    let meta = &slice["metadata"];
    let name = member_slice_name(
        kind,
        meta["namespace"].as_str().unwrap_or_default(),
        meta["name"].as_str().unwrap_or_default(),
    );
    serde_json::json!({
        "apiVersion": "federation.pinterest.com/v1alpha1",
        "kind": "MemberSlice",
        "metadata": {"name": name, "namespace": pull_namespace, "labels": meta["labels"].clone()},
        "spec": {"slice": slice},
    })
}

/// The summary of a pull member's slice from its MemberSlice: what the hub wrote (spec,
/// labels, annotations: whether a write is due) and what the agent last reported of the
/// slice in the member (generation, the hub generation it was written from, status).
pub fn summarize_member_slice(
    kind: WorkloadKind,
    ms: &crate::api::member_slice::MemberSlice,
) -> SliceSummary {
    let mut object = ms.spec.slice.clone();
    let reported = ms.status.as_ref().filter(|s| s.slice_generation.is_some());
    // Not reported yet: the MemberSlice's own generation, which no status has observed.
    object["metadata"]["generation"] = serde_json::json!(
        reported
            .and_then(|s| s.slice_generation)
            .or(ms.metadata.generation)
            .unwrap_or(1)
    );
    if let Some(st) = reported.and_then(|s| s.slice.clone()) {
        object["status"] = st;
    }
    let mut summary = match serde_json::from_value::<kube::api::DynamicObject>(object) {
        Ok(o) => summarize_dynamic(kind, &o),
        Err(_) => SliceSummary {
            hub_uid: None,
            generation: None,
            hub_generation: None,
            spec_digest: 0,
            labels: Default::default(),
            annotations: Default::default(),
            share: SliceShare::default(),
            report: SliceReport {
                state: member_state::PROGRESSING,
                ..Default::default()
            },
        },
    };
    summary.hub_generation = reported.and_then(|s| s.hub_generation);
    summary
}

#[cfg(test)]
mod tests {

    fn service(replicas: i32) -> crate::api::service::PinterestService {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
            "metadata": {"name": "web", "namespace": "ads", "uid": "u-9", "generation": 4,
                         "labels": {"a": "1"}, "annotations": {"g": "2"}},
            "spec": {"owner": {"team": "ads", "contact": "ads@x"}, "replicas": replicas,
                     "template": {"spec": {"containers": [{"name": "w", "image": "w:1"}]}}}
        }))
        .unwrap()
    }

    #[test]
    fn a_slice_is_current_only_with_the_same_spec_labels_and_annotations() {
        let share = SliceShare {
            replicas: Some(3),
            ..Default::default()
        };
        let slice = build_slice(&service(10), &share);
        // As stored: the agent's annotation and status added, a resourceVersion.
        let mut stored = slice.clone();
        stored.metadata.resource_version = Some("7".into());
        stored.annotations_mut().insert("agent".into(), "y".into());
        stored.status = Some(Default::default());
        assert!(slice_is_current(&summarize(&stored), &slice));
        let mut other = stored.clone();
        other.spec.replicas = 2;
        assert!(
            !slice_is_current(&summarize(&other), &slice),
            "spec differs"
        );
        let mut other = stored.clone();
        other.annotations_mut().insert("g".into(), "1".into());
        assert!(
            !slice_is_current(&summarize(&other), &slice),
            "an annotation of ours differs"
        );
        let mut other = stored.clone();
        other.labels_mut().remove("a");
        assert!(
            !slice_is_current(&summarize(&other), &slice),
            "a label of ours is missing"
        );
        // Another reconcile's trace context is no reason to write.
        let mut traced = slice.clone();
        traced.annotations_mut().insert(
            ANNOTATION_TRACEPARENT.into(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
        );
        assert!(slice_is_current(&summarize(&stored), &traced));
    }

    use super::*;
    use kube::ResourceExt;

    #[test]
    fn parallelism_is_split_in_proportion_with_at_least_one() {
        let shards = [
            ("a".to_string(), 60),
            ("b".to_string(), 30),
            ("c".to_string(), 1),
        ];
        let p = divide_parallelism(Some(10), &shards);
        assert_eq!(
            p,
            vec![
                ("a".into(), Some(6)),
                ("b".into(), Some(3)),
                ("c".into(), Some(1))
            ]
        );
        assert_eq!(divide_parallelism(None, &shards)[0].1, None);
        assert_eq!(
            divide_parallelism(Some(100), &[("a".into(), 2)])[0].1,
            Some(2),
            "never more than its shards"
        );
    }

    #[test]
    fn a_slice_carries_its_share_and_its_hub_identity() {
        let mut hub = service(10);
        hub.annotations_mut().insert(
            "kubectl.kubernetes.io/last-applied-configuration".into(),
            "{}".into(),
        );
        hub.metadata.resource_version = Some("9".into());
        hub.status = Some(Default::default());
        let share = SliceShare {
            replicas: Some(4),
            ..Default::default()
        };
        let s = build_slice(&hub, &share);
        assert_eq!(s.spec.replicas, 4);
        assert_eq!(s.labels()[LABEL_HUB_UID], "u-9");
        assert_eq!(s.labels()[LABEL_SLICE_OF], "PinterestService");
        assert_eq!(s.labels()["a"], "1");
        assert_eq!(s.annotations()[ANNOTATION_HUB_GENERATION], "4");
        assert!(
            !s.annotations()
                .contains_key("kubectl.kubernetes.io/last-applied-configuration")
        );
        // Recording a decision on the hub resource leaves its slices current.
        let mut decided = hub.clone();
        decided.annotations_mut().extend([
            (ANNOTATION_PLACEMENT_GENERATION.to_string(), "4".to_string()),
            (ANNOTATION_FAILED_OVER_FROM.to_string(), "use1a".to_string()),
            (ANNOTATION_FAILOVER_MESSAGE.to_string(), "moved".to_string()),
        ]);
        let again = build_slice(&decided, &share);
        assert_eq!(again.annotations(), s.annotations());
        assert!(slice_is_current(&summarize(&s), &again));
        assert!(s.status.is_none() && s.metadata.resource_version.is_none());
        assert!(
            s.metadata.uid.is_none(),
            "a slice has its own uid in the member"
        );
        let summary = summarize(&s);
        assert_eq!(summary.hub_uid.as_deref(), Some("u-9"));
        assert_eq!(summary.hub_generation, Some(4));
        assert_eq!(summary.share, share);
    }

    #[test]
    fn a_long_name_fits_the_hub_name_label() {
        let mut hub = service(1);
        let name = "n".repeat(200);
        hub.metadata.name = Some(name.clone());
        let s = build_slice(&hub, &SliceShare::default());
        let label = &s.labels()[LABEL_HUB_NAME];
        assert!(label.len() <= 63, "{} characters", label.len());
        assert_eq!(
            s.metadata.name.as_deref(),
            Some(name.as_str()),
            "the slice keeps the name"
        );
    }

    #[test]
    fn member_status_summarizes_a_slice() {
        use crate::api::common::Condition;
        let t = Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap());
        let mut slice = service(3);
        slice.metadata.generation = Some(2);
        slice.status = Some(crate::api::service::PinterestServiceStatus {
            observed_generation: Some(2),
            available_replicas: 3,
            ready_replicas: 3,
            replicas: 3,
            conditions: vec![Condition::new(
                ct::READY,
                ConditionStatus::True,
                "Available",
                "3/3 available",
                Some(2),
                &t,
            )],
            ..Default::default()
        });
        let m = member_workload_status("a", &summarize(&slice), &t);
        assert_eq!(
            (
                m.state.as_deref(),
                m.available_replicas,
                m.message.as_deref()
            ),
            (Some("Ready"), Some(3), Some("3/3 available"))
        );
        let unreported = member_workload_status("a", &summarize(&service(3)), &t);
        assert_eq!(
            (unreported.state.as_deref(), unreported.message.as_deref()),
            (Some("Progressing"), Some(NOT_REPORTED_YET)),
            "a slice with no status yet"
        );
        slice.metadata.generation = Some(3);
        let behind = summarize(&slice);
        assert!(!behind.processed());
        assert_eq!(
            member_workload_status("a", &behind, &t).state.as_deref(),
            Some("Progressing")
        );
    }

    #[test]
    fn a_member_slice_wraps_the_slice_and_reports_what_the_agent_saw() {
        use crate::api::member_slice::{MemberSlice, MemberSliceStatus};
        let share = SliceShare {
            replicas: Some(3),
            ..Default::default()
        };
        let slice = build_slice(&service(10), &share);
        let v = serde_json::to_value(&slice).unwrap();
        let wrapped = wrap_slice(WorkloadKind::Service, &v, "pinfed-member-x");
        assert_eq!(wrapped["metadata"]["name"], "pinterestservice.ads.web");
        assert_eq!(wrapped["metadata"]["labels"][LABEL_HUB_UID], "u-9");
        let mut ms: MemberSlice = serde_json::from_value(wrapped).unwrap();
        ms.metadata.generation = Some(1);
        let s = summarize_member_slice(WorkloadKind::Service, &ms);
        assert!(
            slice_is_current(&s, &slice),
            "what the hub wrote is current"
        );
        assert!(!s.processed(), "nothing reported yet");
        assert_eq!(s.hub_generation, None);
        ms.status = Some(MemberSliceStatus {
            slice: Some(serde_json::json!({"observedGeneration": 2, "replicas": 3,
                "readyReplicas": 3, "availableReplicas": 3,
                "conditions": [{"type": "Ready", "status": "True", "reason": "Available",
                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})),
            slice_generation: Some(2),
            hub_generation: Some(4),
            ..Default::default()
        });
        let s = summarize_member_slice(WorkloadKind::Service, &ms);
        assert!(s.processed());
        assert_eq!((s.report.state, s.hub_generation), ("Ready", Some(4)));
        assert_eq!(s.report.counts.available_replicas, Some(3));
        let long = member_slice_name(WorkloadKind::JobSet, &"n".repeat(63), &"x".repeat(253));
        assert!(
            long.len() <= 253 && long.starts_with("pinterestjobset.nnn"),
            "{long}"
        );
    }
}

#[cfg(test)]
mod report_tests {
    use super::*;
    use crate::api::common::set_invalid_conditions;

    fn t() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap(),
        )
    }

    #[test]
    fn a_slice_its_agent_refused_says_so_and_why() {
        let mut conditions = Vec::new();
        set_invalid_conditions(&mut conditions, "privileged is not allowed", Some(2), &t());
        // The agent names the refusal in the Invalid condition's reason.
        conditions
            .iter_mut()
            .find(|c| c.type_ == ct::INVALID)
            .unwrap()
            .reason = "PodPolicyDenied".into();
        assert_eq!(slice_state(&conditions, true), member_state::REFUSED);
        assert_eq!(
            report_message(&conditions).as_deref(),
            Some("PodPolicyDenied: privileged is not allowed")
        );
        let ready = vec![Condition::new(
            ct::READY,
            ConditionStatus::False,
            "Unavailable",
            "1/3 available",
            Some(2),
            &t(),
        )];
        assert_eq!(slice_state(&ready, true), member_state::PROGRESSING);
        assert_eq!(report_message(&ready).as_deref(), Some("1/3 available"));
    }
}

//! Priority on the hub: each workload's class resolved against the hub's PriorityClasses,
//! the queue of waiting workloads (`placement::priority`), the victims a preemptor may
//! take (`placement::preempt` chooses them) and the evictions the victims owe.
//!
//! A preemptor never writes a victim's spec, decision or status: before its own decision is
//! recorded it writes what the victim must give up ([`Eviction`]) as an annotation on the
//! victim (`owed.federation.pinterest.com/…`). That write wakes the victim; its own
//! reconcile plans again without that part, records the preemption in its status (with the
//! annotation's name, so it is applied once) and says so in an Event, then removes the
//! annotation. The debt is in the hub API server, not in this process: a hub restart
//! between the two decisions loses nothing.

use std::collections::BTreeMap;
use std::sync::Mutex;

use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::reflector::Store;

use crate::api::common::PreemptionRecord;
use crate::api::federation::ANNOTATION_OWED_EVICTION_PREFIX;
use crate::api::ranges::RangeSet;
use crate::api::workload::{WorkloadKind, WorkloadRef};
use crate::hub::members::SliceEvent;
use crate::placement::preempt::{Candidate, MemberCandidates, VictimKind, VictimPod};
use crate::placement::priority::{Aging, PriorityClassView, WaitQueue};
use crate::placement::{self, Bounds, ClusterView, Decision, PlacementPolicy};

/// What the hub keeps of priority between reconciles.
pub struct PriorityState {
    pub classes: Store<PriorityClass>,
    pub queue: Mutex<WaitQueue>,
    /// Every workload reconciled by this process: its priority and how it may be
    /// preempted (workloads not seen yet are never victims).
    pub placed: Mutex<BTreeMap<String, VictimInfo>>,
    wake: tokio::sync::broadcast::Sender<SliceEvent>,
    /// Whether preemption is on (`--no-preemption` turns it off: the queue still orders).
    pub preemption: bool,
}

/// A placed workload as a victim: its priority and what of it may go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VictimInfo {
    pub priority: i32,
    pub kind: VictimKind,
    /// Creation time (unix seconds).
    pub created: i64,
}

/// Part of a workload it must give up in one member for a preemptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eviction {
    /// The annotation's name after the prefix: the preemptor's uid and the
    /// resourceVersion it decided from (a reconcile of the same copy writes the same one).
    pub id: String,
    pub by: String,
    pub by_priority: i32,
    pub member: String,
    /// Shards taken back to pending (job sets).
    pub shards: RangeSet,
    /// Replicas taken (services, stateful sets).
    pub replicas: u32,
    /// The whole share in the member (a gang).
    pub whole: bool,
    pub pods: u32,
    pub reason: String,
}

impl PriorityState {
    pub fn new(classes: Store<PriorityClass>, aging: Aging, preemption: bool) -> PriorityState {
        PriorityState {
            classes,
            queue: Mutex::new(WaitQueue::new(aging)),
            placed: Default::default(),
            wake: tokio::sync::broadcast::channel(1024).0,
            preemption,
        }
    }

    /// The hub's classes as the queue reads them.
    pub fn class_views(&self) -> Vec<PriorityClassView> {
        self.classes
            .state()
            .iter()
            .map(|c| PriorityClassView::from_class(c))
            .collect()
    }

    /// Workloads to reconcile now: room may be theirs, or they owe an eviction.
    pub fn wakes(&self) -> impl futures::Stream<Item = SliceEvent> + Send + 'static {
        crate::controller::watch::broadcast_stream(self.wake.subscribe())
    }

    /// Reconciles the workload with this key (`Kind/namespace/name`) soon.
    pub fn wake(&self, key: &str) {
        if let Some(ev) = event_of(key) {
            let _ = self.wake.send(ev);
        }
    }

    /// Room freed (a workload shrank or went): the first waiting workloads look again.
    pub fn wake_first(&self, now: i64, how_many: usize) {
        let keys: Vec<String> = match self.queue.lock() {
            Ok(q) => q
                .ordered(now)
                .into_iter()
                .take(how_many)
                .map(|w| w.key.clone())
                .collect(),
            Err(_) => return,
        };
        for k in keys {
            self.wake(&k);
        }
    }

    /// A workload that is gone: out of the queue and never a victim.
    pub fn forget(&self, key: &str) {
        if let Ok(mut q) = self.queue.lock() {
            q.remove(key);
        }
        if let Ok(mut p) = self.placed.lock() {
            p.remove(key);
        }
    }
}

/// An [`Eviction`] as its annotation's value.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct OwedAnnotation {
    by: String,
    by_priority: i32,
    member: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    shards: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    replicas: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    whole: bool,
    pods: u32,
    reason: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Eviction {
    /// The annotation the preemptor writes on the victim: its name and value.
    pub fn annotation(&self) -> (String, String) {
        let value = OwedAnnotation {
            by: self.by.clone(),
            by_priority: self.by_priority,
            member: self.member.clone(),
            shards: self.shards.to_string(),
            replicas: self.replicas,
            whole: self.whole,
            pods: self.pods,
            reason: self.reason.clone(),
        };
        (
            format!("{ANNOTATION_OWED_EVICTION_PREFIX}{}", self.id),
            serde_json::to_string(&value).unwrap_or_default(),
        )
    }
}

/// The id of the evictions a preemptor decides from one copy of itself: its uid and that
/// copy's resourceVersion (at most 63 characters, an annotation name's limit).
pub fn eviction_id(uid: &str, resource_version: &str) -> String {
    let id = format!("{uid}.{resource_version}");
    id.chars().take(63).collect()
}

/// What a workload owes, from its annotations and what its status has recorded.
#[derive(Debug, Default, PartialEq)]
pub struct Owed {
    /// Evictions to apply now (not recorded yet).
    pub apply: Vec<Eviction>,
    /// Every owed annotation read (applied now or before): removed once the status
    /// records them.
    pub annotations: Vec<String>,
    /// Annotations that do not read as an eviction, with why (left alone: not ours).
    pub unreadable: Vec<(String, String)>,
}

/// The evictions `annotations` hold that `recorded` (the status's preemptions) does not.
pub fn owed(annotations: &BTreeMap<String, String>, recorded: &[PreemptionRecord]) -> Owed {
    let mut out = Owed::default();
    for (name, value) in annotations {
        let Some(id) = name.strip_prefix(ANNOTATION_OWED_EVICTION_PREFIX) else {
            continue;
        };
        let parsed = serde_json::from_str::<OwedAnnotation>(value)
            .map_err(|e| e.to_string())
            .and_then(|a| {
                let shards = RangeSet::parse(&a.shards).map_err(|e| format!("shards: {e}"))?;
                Ok(Eviction {
                    id: id.to_string(),
                    by: a.by,
                    by_priority: a.by_priority,
                    member: a.member,
                    shards,
                    replicas: a.replicas,
                    whole: a.whole,
                    pods: a.pods,
                    reason: a.reason,
                })
            });
        match parsed {
            Ok(e) => {
                out.annotations.push(name.clone());
                if !recorded.iter().any(|r| r.id.as_deref() == Some(id)) {
                    out.apply.push(e);
                }
            }
            Err(why) => out.unreadable.push((name.clone(), why)),
        }
    }
    out
}

/// `Kind/namespace/name` back into a trigger.
pub fn event_of(key: &str) -> Option<SliceEvent> {
    let mut parts = key.splitn(3, '/');
    let kind = WorkloadKind::from_kind(parts.next()?)?;
    Some(SliceEvent {
        kind,
        namespace: parts.next()?.to_string(),
        name: parts.next()?.to_string(),
    })
}

/// How a workload may be preempted: a job set's unfinished shards one by one, a service's
/// or stateful set's replicas down to what its disruption budget allows, a training gang
/// whole; daemons and cron jobs never. `unplaced` replicas already count against the
/// budget.
pub fn victim_kind(w: WorkloadRef<'_>, unplaced: u32) -> Option<VictimKind> {
    use crate::api::workload::WorkloadRef as W;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let budget = |replicas: i32, d: Option<&crate::api::service::Disruption>| -> u32 {
        let total = u32::try_from(replicas).unwrap_or(0);
        let allowed = match d.and_then(|d| d.max_unavailable.as_ref()) {
            None => 1,
            Some(IntOrString::Int(n)) => u32::try_from(*n).unwrap_or(0),
            Some(IntOrString::String(s)) => {
                // A percent of the replicas, rounded down: never more than it says.
                let pct: u64 = s.trim_end_matches('%').parse().unwrap_or(0);
                u32::try_from(u64::from(total) * pct.min(100) / 100).unwrap_or(0)
            }
        };
        allowed.min(total).saturating_sub(unplaced)
    };
    match w {
        W::JobSet(_) => Some(VictimKind::Shards),
        W::TrainingJob(_) => Some(VictimKind::Gang),
        W::Service(s) => Some(VictimKind::Replicas {
            can_lose: budget(s.spec.replicas, s.spec.disruption.as_ref()),
        }),
        W::StatefulSet(s) => Some(VictimKind::Replicas {
            can_lose: budget(s.spec.replicas, s.spec.disruption.as_ref()),
        }),
        W::Daemon(_) | W::CronJob(_) => None,
    }
}

/// The candidates of every member for a preemptor of `priority`: the pods (bound to a
/// node, not finished) of each workload of lower priority this process knows, by member.
pub fn candidates(
    members: &[(String, Vec<crate::hub::members::WorkloadPod>)],
    placed: &BTreeMap<String, VictimInfo>,
    priority: i32,
    preemptor: &str,
) -> Vec<MemberCandidates> {
    members
        .iter()
        .map(|(member, pods)| {
            let mut by_workload: BTreeMap<&str, Vec<VictimPod>> = BTreeMap::new();
            for p in pods {
                by_workload.entry(&p.key).or_default().push(VictimPod {
                    node: p.node.clone(),
                    resources: p.resources,
                    shard: p.shard,
                });
            }
            let candidates = by_workload
                .into_iter()
                .filter(|(key, _)| *key != preemptor)
                .filter_map(|(key, pods)| {
                    let info = placed.get(key)?;
                    (info.priority < priority).then(|| Candidate {
                        key: key.to_string(),
                        priority: info.priority,
                        kind: info.kind,
                        created: info.created,
                        pods: match info.kind {
                            // Only shards with an index are taken one by one.
                            VictimKind::Shards => {
                                pods.into_iter().filter(|p| p.shard.is_some()).collect()
                            }
                            _ => pods,
                        },
                    })
                })
                .filter(|c| !c.pods.is_empty())
                .collect();
            MemberCandidates {
                member: member.clone(),
                candidates,
            }
        })
        .collect()
}

/// The decision a victim is planned from and the bounds it is planned under, with what it
/// owes taken out: the evicted shards leave the member's share (and the member keeps no
/// more than the rest), replicas are capped at what remains, a gang leaves the member.
pub fn apply_evictions(current: &mut Decision, policy: &mut PlacementPolicy, owed: &[Eviction]) {
    for e in owed {
        let Some(p) = current
            .placements
            .iter_mut()
            .find(|p| p.cluster == e.member)
        else {
            continue;
        };
        let keep: u32 = if e.whole {
            0
        } else if let Some(s) = &p.shards {
            let have = RangeSet::parse(s).unwrap_or_default();
            let rest = have.difference(&e.shards);
            let n = u32::try_from(rest.len()).unwrap_or(u32::MAX);
            p.shards = Some(rest.to_string());
            n
        } else {
            let n = p.replicas.unwrap_or(0).saturating_sub(e.replicas);
            p.replicas = Some(n);
            n
        };
        let bound = policy.cluster_limits.entry(e.member.clone()).or_default();
        *bound = Bounds {
            min: None,
            max: Some(bound.max.map_or(keep, |m| m.min(keep))),
        };
    }
    current.placements.retain(|p| {
        p.replicas != Some(0)
            && p.shards.as_deref() != Some("")
            && !owed.iter().any(|e| e.whole && e.member == p.cluster)
    });
}

/// What the victim's status records of the evictions it applied (newest last, at most 5).
/// One the status records already is not recorded again (a decision recorded before its
/// slices move is recorded twice: before, and with the status that follows).
pub fn records(
    stored: &[PreemptionRecord],
    applied: &[Eviction],
    now: &Time,
) -> Vec<PreemptionRecord> {
    let mut all: Vec<PreemptionRecord> = stored.to_vec();
    let mut new: Vec<&Eviction> = Vec::new();
    for e in applied {
        let known = |id: &str| {
            all.iter().any(|r| r.id.as_deref() == Some(id)) || new.iter().any(|n| n.id == id)
        };
        if !known(&e.id) {
            new.push(e);
        }
    }
    all.extend(new.into_iter().map(|e| PreemptionRecord {
        by: e.by.clone(),
        by_priority: e.by_priority,
        cluster: e.member.clone(),
        pods: i32::try_from(e.pods).unwrap_or(i32::MAX),
        replicas: (e.replicas > 0).then(|| i32::try_from(e.replicas).unwrap_or(i32::MAX)),
        shards: (!e.shards.is_empty()).then(|| e.shards.to_string()),
        time: now.clone(),
        reason: e.reason.clone(),
        id: Some(e.id.clone()),
    }));
    let extra = all.len().saturating_sub(5);
    all.drain(..extra);
    all
}

/// Whether `w`'s one unit would place on `views` under its policy and `quota`: could it
/// use the room there is now?
pub fn could_use(
    views: &[ClusterView],
    w: &placement::priority::Waiting,
    quota: Option<&placement::QuotaView>,
) -> bool {
    let out = placement::plan(&placement::PlanInput {
        clusters: views,
        policy: &w.policy,
        demand: &w.unit,
        quota,
        current: None,
    });
    !out.decision.placements.is_empty()
}

/// Adds `units` placed in `member` to a decision: replicas to its share, the lowest
/// shards neither placed nor completed, or the whole gang or copy there.
pub fn add_units(d: &mut Decision, member: &str, units: u32, count: &placement::Count) {
    use placement::Count;
    if units == 0 {
        return;
    }
    match count {
        Count::Gang(_) | Count::Whole => {
            d.placements = vec![placement::Placement {
                cluster: member.to_string(),
                ..Default::default()
            }];
            d.unplaced = 0;
        }
        Count::Replicas(_) => {
            match d.placements.iter_mut().find(|p| p.cluster == member) {
                Some(p) => p.replicas = Some(p.replicas.unwrap_or(0).saturating_add(units)),
                None => d.placements.push(placement::Placement {
                    cluster: member.to_string(),
                    replicas: Some(units),
                    ..Default::default()
                }),
            }
            d.unplaced = d.unplaced.saturating_sub(units);
        }
        Count::Shards {
            total, completed, ..
        } => {
            let placed = d
                .shard_sets()
                .unwrap_or_default()
                .values()
                .fold(RangeSet::new(), |acc, s| acc.union(s));
            let open = RangeSet::full(*total)
                .difference(&RangeSet::from_indices(completed.iter().copied()))
                .difference(&placed)
                .take_lowest(u64::from(units));
            let n = u32::try_from(open.len()).unwrap_or(u32::MAX);
            match d.placements.iter_mut().find(|p| p.cluster == member) {
                Some(p) => {
                    let have = p
                        .shards
                        .as_deref()
                        .and_then(|s| RangeSet::parse(s).ok())
                        .unwrap_or_default();
                    p.shards = Some(have.union(&open).to_string());
                }
                None => d.placements.push(placement::Placement {
                    cluster: member.to_string(),
                    shards: Some(open.to_string()),
                    ..Default::default()
                }),
            }
            d.unplaced = d.unplaced.saturating_sub(n);
        }
    }
    d.placements.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    if d.unplaced == 0 {
        d.reason = None;
    }
}

/// Units a decision places (replicas, shards, whole copies).
pub fn units(d: &Decision) -> u64 {
    d.shares().values().map(|n| u64::from(*n)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::Placement;
    use crate::placement::model::Strategy;

    fn decision(parts: &[(&str, Option<u32>, Option<&str>)]) -> Decision {
        Decision {
            strategy: Strategy::Divided,
            placements: parts
                .iter()
                .map(|(c, r, s)| Placement {
                    cluster: c.to_string(),
                    replicas: *r,
                    shards: s.map(str::to_string),
                    pods: None,
                })
                .collect(),
            unplaced: 0,
            reason: None,
        }
    }

    fn eviction(member: &str, shards: &str, replicas: u32, whole: bool) -> Eviction {
        Eviction {
            id: "uid.1".into(),
            by: "PinterestTrainingJob/ml/big".into(),
            by_priority: 1000,
            member: member.into(),
            shards: RangeSet::parse(shards).unwrap(),
            replicas,
            whole,
            pods: 3,
            reason: "room for a gang".into(),
        }
    }

    #[test]
    fn an_owed_annotation_is_applied_until_the_status_records_it_and_read_back_whole() {
        let e = Eviction {
            id: eviction_id("9f0c", "4711"),
            ..eviction("use1a", "2,4-6", 0, false)
        };
        let (name, value) = e.annotation();
        assert_eq!(name, "owed.federation.pinterest.com/9f0c.4711");
        let mut annotations = BTreeMap::from([
            (name.clone(), value),
            ("team.example.com/note".to_string(), "{}".to_string()),
            (
                format!("{ANNOTATION_OWED_EVICTION_PREFIX}x"),
                "not json".to_string(),
            ),
        ]);
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let o = owed(&annotations, &[]);
        assert_eq!(o.apply, vec![e.clone()], "read back as written");
        assert_eq!(o.annotations, vec![name.clone()]);
        assert_eq!(o.unreadable.len(), 1, "{o:?}");
        // Recorded (its id in the status): never applied again, still removed.
        let recorded = records(&[], &o.apply, &now);
        assert_eq!(recorded[0].id.as_deref(), Some("9f0c.4711"));
        let again = owed(&annotations, &recorded);
        assert!(again.apply.is_empty());
        assert_eq!(again.annotations, vec![name.clone()]);
        // A gang's whole share and a service's replicas read back too.
        annotations.clear();
        for e in [
            Eviction {
                id: "a.1".into(),
                ..eviction("use1b", "", 0, true)
            },
            Eviction {
                id: "b.2".into(),
                ..eviction("use1b", "", 3, false)
            },
        ] {
            let (n, v) = e.annotation();
            annotations.insert(n, v);
            assert!(owed(&annotations, &[]).apply.contains(&e));
        }
        assert!(
            eviction_id(&"u".repeat(60), "123456").len() <= 63,
            "an annotation name's limit"
        );
    }

    #[test]
    fn evicted_shards_leave_the_member_and_cap_what_it_keeps() {
        let mut d = decision(&[("a", None, Some("0-9")), ("b", None, Some("10-19"))]);
        let mut p = PlacementPolicy::default();
        apply_evictions(&mut d, &mut p, &[eviction("a", "3-5", 0, false)]);
        assert_eq!(d.placements[0].shards.as_deref(), Some("0-2,6-9"));
        assert_eq!(p.cluster_limits["a"].max, Some(7));
        assert!(!p.cluster_limits.contains_key("b"));
    }

    #[test]
    fn evicted_replicas_cap_the_member_and_a_gang_leaves_it() {
        let mut d = decision(&[("a", Some(4), None), ("b", Some(3), None)]);
        let mut p = PlacementPolicy::default();
        apply_evictions(&mut d, &mut p, &[eviction("b", "", 2, false)]);
        assert_eq!(d.placements[1].replicas, Some(1));
        assert_eq!(p.cluster_limits["b"].max, Some(1));
        let mut g = decision(&[("a", None, None)]);
        let mut p = PlacementPolicy::default();
        apply_evictions(&mut g, &mut p, &[eviction("a", "", 0, true)]);
        assert!(g.placements.is_empty());
        assert_eq!(p.cluster_limits["a"].max, Some(0));
    }

    #[test]
    fn a_service_may_lose_what_its_budget_allows_less_what_already_waits() {
        let svc: crate::api::service::PinterestService =
            serde_json::from_value(serde_json::json!({
                "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
                "metadata": {"name": "web", "namespace": "a"},
                "spec": {"owner": {"team": "t", "contact": "t@x"}, "replicas": 10,
                         "disruption": {"maxUnavailable": "25%"},
                         "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}
            }))
            .unwrap();
        let r = WorkloadRef::Service(&svc);
        assert_eq!(
            victim_kind(r, 0),
            Some(VictimKind::Replicas { can_lose: 2 })
        );
        assert_eq!(
            victim_kind(r, 1),
            Some(VictimKind::Replicas { can_lose: 1 })
        );
        assert_eq!(
            victim_kind(r, 5),
            Some(VictimKind::Replicas { can_lose: 0 })
        );
    }

    #[test]
    fn units_a_preemption_frees_join_the_decision() {
        use crate::placement::Count;
        let mut d = decision(&[("a", None, Some("0-3"))]);
        d.unplaced = 6;
        d.reason = Some("room".into());
        let count = Count::Shards {
            total: 10,
            completed: [4].into(),
            parallelism: None,
        };
        add_units(&mut d, "b", 3, &count);
        assert_eq!(d.placements[1].shards.as_deref(), Some("5-7"));
        assert_eq!(d.unplaced, 3);
        add_units(&mut d, "a", 3, &count);
        assert_eq!(d.placements[0].shards.as_deref(), Some("0-3,8-9"));
        assert_eq!((d.unplaced, d.reason.is_none()), (1, false));
        let mut r = decision(&[("a", Some(2), None)]);
        r.unplaced = 2;
        r.reason = Some("room".into());
        add_units(&mut r, "a", 2, &Count::Replicas(4));
        assert_eq!(
            (r.placements[0].replicas, r.unplaced, r.reason),
            (Some(4), 0, None)
        );
        let mut g = decision(&[]);
        g.unplaced = 1;
        add_units(&mut g, "c", 1, &Count::Gang(Vec::new()));
        assert_eq!((g.clusters(), g.unplaced), (vec!["c"], 0));
    }

    #[test]
    fn records_keep_the_latest_five() {
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let applied: Vec<Eviction> = (0..7)
            .map(|i| Eviction {
                id: format!("uid.{i}"),
                ..eviction(&format!("m{i}"), "1", 0, false)
            })
            .collect();
        let r = records(&[], &applied, &now);
        assert_eq!(r.len(), 5);
        assert_eq!(r[0].cluster, "m2");
        assert_eq!(r[4].shards.as_deref(), Some("1"));
        // Recorded already (with the decision, before its slices moved): not again.
        let again = records(&r, &applied[5..], &now);
        assert_eq!(again, r);
        let twice = records(&[], &[applied[0].clone(), applied[0].clone()], &now);
        assert_eq!(twice.len(), 1);
    }

    #[test]
    fn a_key_wakes_its_workload() {
        let ev = event_of("PinterestJobSet/team-a/batch").unwrap();
        assert_eq!(
            (ev.kind, ev.namespace.as_str(), ev.name.as_str()),
            (WorkloadKind::JobSet, "team-a", "batch")
        );
        assert!(event_of("Nope/a/b").is_none());
    }
}

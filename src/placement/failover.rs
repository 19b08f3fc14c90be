//! Failover and failback, pure: how a member's health decides whether a workload's share
//! stays, moves or comes back, and how slices go from what runs to a new decision without
//! the workload dropping below its target on the way.
//!
//! Times are unix seconds passed in; nothing here reads a clock or a client.

use std::collections::{BTreeMap, BTreeSet};

use super::decision::Decision;
use crate::api::ranges::RangeSet;

/// What the hub knows of one member's health.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberHealth {
    /// Heartbeat within the member grace.
    pub ready: bool,
    /// When it went NotReady (while it is NotReady).
    pub lost_since: Option<i64>,
    /// When it came back after being lost.
    pub returned_at: Option<i64>,
    /// Being unjoined: everything moves off it, whatever the failover settings.
    pub draining: bool,
}

/// A workload's failover settings, with the hub's failback window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailoverPolicy {
    pub enabled: bool,
    /// How long a member may be NotReady before the workload's share moves off it.
    pub grace_secs: i64,
    /// How long a returned member must stay Ready before it gets shares again and its
    /// stale slices are resized or removed.
    pub window_secs: i64,
}

/// A member as one workload sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Ready and settled: may take new shares.
    Ready,
    /// Back from a loss less than the failback window ago: keeps what runs there, takes
    /// nothing new, and its stale slices are left alone (a flapping member causes no churn).
    Settling,
    /// NotReady, and the share stays: within the failover grace, or failover is off.
    Waiting,
    /// NotReady past the failover grace (or gone): the share moves elsewhere.
    Lost,
    /// Ready but being unjoined: takes nothing new, its slices go once replaced.
    Draining,
}

pub fn standing(h: &MemberHealth, p: &FailoverPolicy, now: i64) -> Standing {
    if h.draining {
        return if h.ready {
            Standing::Draining
        } else {
            Standing::Lost
        };
    }
    if h.ready {
        match h.returned_at {
            Some(t) if now - t < p.window_secs => Standing::Settling,
            _ => Standing::Ready,
        }
    } else if p.enabled && h.lost_since.is_none_or(|t| now - t >= p.grace_secs) {
        Standing::Lost
    } else {
        Standing::Waiting
    }
}

/// Seconds until `standing` changes by the clock alone (Waiting → Lost at the end of
/// the failover grace, Settling → Ready at the end of the failback window), or `None`
/// when only a heartbeat can change it. The hub requeues a workload for that moment
/// instead of polling.
pub fn secs_until_standing_changes(h: &MemberHealth, p: &FailoverPolicy, now: i64) -> Option<i64> {
    match standing(h, p, now) {
        Standing::Settling => h.returned_at.map(|t| t + p.window_secs - now),
        Standing::Waiting if p.enabled => h.lost_since.map(|t| t + p.grace_secs - now),
        _ => None,
    }
    .map(|s| s.max(0))
}

/// One cluster's share of a decision, as a slice carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Share {
    Replicas(u32),
    Shards(String),
    Whole,
}

impl Share {
    pub fn of(decision: &Decision) -> BTreeMap<String, Share> {
        decision
            .placements
            .iter()
            .map(|p| {
                let share = match (&p.shards, p.replicas) {
                    (Some(s), _) => Share::Shards(s.clone()),
                    (None, Some(r)) => Share::Replicas(r),
                    (None, None) => Share::Whole,
                };
                (p.cluster.clone(), share)
            })
            .collect()
    }
}

/// A slice as read from a reachable member.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SliceSeen {
    /// `spec.replicas` of the slice (services, stateful sets).
    pub replicas: u32,
    /// Available pods the member reports for it.
    pub available: u32,
    /// The member reports the slice Ready or Complete.
    pub ready: bool,
}

/// What to do with one cluster's slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SliceStep {
    /// Write the slice with this share.
    Apply(Share),
    /// Remove the slice (and, for run-to-completion kinds, what it started).
    Delete,
    /// Leave it as it is for now.
    Keep,
}

/// Everything [`transition`] decides from.
#[derive(Clone, Copy, Debug)]
pub struct TransitionInput<'a> {
    pub target: &'a BTreeMap<String, Share>,
    /// Slices found in reachable members (absent: none there, or unreachable).
    pub seen: &'a BTreeMap<String, SliceSeen>,
    /// Members that can be written now (Ready, Settling or Draining).
    pub reachable: &'a BTreeSet<String>,
    /// Members back from a loss within the failback window.
    pub settling: &'a BTreeSet<String>,
    /// Job sets, cron and training jobs: a slice that left the placement is fenced at
    /// once — running it anywhere else too would run work twice.
    pub run_to_completion: bool,
}

/// The steps from the slices that exist to `target`. Services grow before they shrink:
/// a cluster whose share goes up gets it at once, a cluster whose share goes down keeps
/// its pods, and a slice that left the placement stays, until every target share is
/// available — so available replicas never dip below target on the way.
pub fn transition(input: &TransitionInput<'_>) -> BTreeMap<String, SliceStep> {
    let target_available = input.target.iter().all(|(c, share)| {
        let seen = input.seen.get(c);
        match share {
            Share::Replicas(t) => seen.is_some_and(|s| s.available >= *t && s.replicas >= *t),
            Share::Shards(_) => true,
            Share::Whole => seen.is_some_and(|s| s.ready),
        }
    });
    let mut steps = BTreeMap::new();
    for (c, share) in input.target {
        if !input.reachable.contains(c) {
            continue;
        }
        let step = match (share, input.seen.get(c)) {
            (Share::Replicas(t), Some(s)) if *t < s.replicas && !target_available => {
                SliceStep::Apply(Share::Replicas(s.replicas))
            }
            _ => SliceStep::Apply(share.clone()),
        };
        steps.insert(c.clone(), step);
    }
    for c in input.seen.keys() {
        if input.target.contains_key(c) || !input.reachable.contains(c) {
            continue;
        }
        let step = if input.run_to_completion {
            SliceStep::Delete
        } else if input.settling.contains(c) || !target_available {
            SliceStep::Keep
        } else {
            SliceStep::Delete
        };
        steps.insert(c.clone(), step);
    }
    steps
}

/// A run-to-completion slice as read from a member, for [`hand_off`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkSeen {
    /// The shards its spec assigns (a job set), empty for a whole workload.
    pub shards: RangeSet,
    /// Its agent has acted on its current spec (status observedGeneration = generation).
    pub processed: bool,
    /// Shards its status reports completed.
    pub completed: RangeSet,
    /// Shards it held before and let go of ([`released_shards`]).
    pub released: RangeSet,
}

impl WorkSeen {
    /// The completions its report may claim: of shards it holds or let go of. One member
    /// cannot mark another's shards done (nor keep them from running elsewhere).
    pub fn completed_own(&self) -> RangeSet {
        self.completed
            .intersection(&self.shards.union(&self.released))
    }
}

/// The shards a job set's slice is written with as let go of: those it held, or had let go
/// of before, that its new share `keeps` not. A Job of one may complete in the member as
/// the move begins; its report of it then still counts ([`WorkSeen::completed_own`],
/// `status::aggregate`), so the shard is neither run again elsewhere nor counted nowhere.
/// A share that does not change keeps the record as it is (no write for it).
pub fn released_shards(had: &RangeSet, released_before: &RangeSet, keeps: &RangeSet) -> RangeSet {
    if had == keeps {
        return released_before.difference(keeps);
    }
    had.union(released_before).difference(keeps)
}

/// What [`hand_off`] held back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeldBack {
    /// Shards not given to their new cluster yet (not those finished elsewhere).
    pub shards: RangeSet,
    /// Whole workloads (cron, training) not started in their new cluster yet.
    pub whole: bool,
}

impl HeldBack {
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty() && !self.whole
    }
}

/// Work that moves between two live members (their agents alive, their slices readable)
/// goes in two steps, so it never runs in both: the member it leaves gets its slice
/// without it (or loses the slice) first, and the member it goes to gets it only once
/// the first has acted on that (its agent stopped the Jobs, or recorded them finished).
/// A lost member is not waited for: the fence stops it (`controller::fence`).
///
/// `steps` is [`transition`]'s output for a run-to-completion kind; a shard new to a
/// cluster is held while another live member's slice still lists it or has not been
/// processed since the hub last wrote it (its agent may still run what an older spec
/// gave it), and not given at all when any slice reports it completed. A whole workload new to a
/// cluster is held (the step becomes `Keep`) while another live member still has its
/// slice. Returns what was held; the caller looks again soon.
pub fn hand_off(
    steps: &mut BTreeMap<String, SliceStep>,
    seen: &BTreeMap<String, WorkSeen>,
    live: &BTreeSet<String>,
) -> HeldBack {
    let mut held = HeldBack::default();
    let completed = seen
        .values()
        .fold(RangeSet::new(), |acc, w| acc.union(&w.completed_own()));
    for (cluster, step) in steps.iter_mut() {
        let others = || {
            seen.iter()
                .filter(move |(c, _)| *c != cluster && live.contains(*c))
                .map(|(_, w)| w)
        };
        match step {
            SliceStep::Apply(Share::Shards(s)) => {
                let Ok(target) = RangeSet::parse(s) else {
                    continue;
                };
                let had = seen
                    .get(cluster)
                    .map(|w| w.shards.clone())
                    .unwrap_or_default();
                let new = target.difference(&had);
                if new.is_empty() {
                    continue;
                }
                // Finished elsewhere: never handed out (the next plan drops it).
                let done = new.intersection(&completed);
                let new = new.difference(&done);
                let mut hold = RangeSet::new();
                for w in others() {
                    hold = if w.processed {
                        hold.union(&new.intersection(&w.shards))
                    } else {
                        new.clone()
                    };
                    if hold == new {
                        break;
                    }
                }
                if !hold.is_empty() || !done.is_empty() {
                    *s = target.difference(&hold).difference(&done).to_string();
                    held.shards = held.shards.union(&hold);
                }
            }
            SliceStep::Apply(Share::Whole)
                if !seen.contains_key(cluster) && others().next().is_some() =>
            {
                *step = SliceStep::Keep;
                held.whole = true;
            }
            _ => {}
        }
    }
    held
}

/// Completed shards stay assigned to the cluster that held them (unless it is lost), so
/// a re-plan — which only places unfinished shards — does not take them out of that
/// cluster's slice and fence or prune their finished Jobs before their TTL.
pub fn keep_completed_shards(
    decision: &mut Decision,
    previous: &Decision,
    completed: &RangeSet,
    lost: &BTreeSet<String>,
) {
    for p in &previous.placements {
        if lost.contains(&p.cluster) {
            continue;
        }
        let Some(held) = shards_of(p)
            .map(|s| s.intersection(completed))
            .filter(|s| !s.is_empty())
        else {
            continue;
        };
        add_shards(decision, &p.cluster, &held);
    }
    decision
        .placements
        .sort_by(|a, b| a.cluster.cmp(&b.cluster));
}

/// A placement's shard indices, when it has a readable range.
fn shards_of(p: &super::Placement) -> Option<RangeSet> {
    p.shards.as_deref().and_then(|s| RangeSet::parse(s).ok())
}

/// Adds `held` to `cluster`'s shards in `decision`, placing it there if it was not.
fn add_shards(decision: &mut Decision, cluster: &str, held: &RangeSet) {
    match decision
        .placements
        .iter_mut()
        .find(|n| n.cluster == cluster)
    {
        Some(n) => {
            let now = shards_of(n).unwrap_or_default();
            n.shards = Some(now.union(held).to_string());
        }
        None => decision.placements.push(super::Placement {
            cluster: cluster.to_string(),
            replicas: None,
            shards: Some(held.to_string()),
            pods: None,
        }),
    }
}

/// A member that keeps the workload keeps the unfinished shards it holds through a
/// re-plan, taking them from whichever cluster the plan gave them to. `staying`: the
/// members a job set's shards may stay in — live ones it may still run in, and ones back
/// from a loss while they settle (the engine places only on Ready members). Moving a shard
/// between live members restarts it, and one whose Job completes while it moves runs
/// twice; so only shards of a lost member, of a member the workload must leave, or given
/// up to a preemptor move. `unfinished`: the job set's shards not completed (within its
/// count); the decision's `unplaced` is counted again from them.
pub fn keep_held_shards(
    decision: &mut Decision,
    previous: &Decision,
    unfinished: &RangeSet,
    staying: &BTreeSet<String>,
) {
    let mut changed = false;
    for p in previous
        .placements
        .iter()
        .filter(|p| staying.contains(&p.cluster))
    {
        let Some(held) = shards_of(p)
            .map(|s| s.intersection(unfinished))
            .filter(|s| !s.is_empty())
        else {
            continue;
        };
        if decision
            .placements
            .iter()
            .find(|n| n.cluster == p.cluster)
            .and_then(shards_of)
            .is_some_and(|now| held.difference(&now).is_empty())
        {
            continue;
        }
        changed = true;
        // Taken from the others (one left with nothing drops out), then given back.
        decision.placements.retain_mut(|n| {
            let Some(now) = shards_of(n) else {
                return true;
            };
            if n.cluster == p.cluster {
                return true;
            }
            let left = now.difference(&held);
            n.shards = Some(left.to_string());
            !left.is_empty() || now.is_empty()
        });
        add_shards(decision, &p.cluster, &held);
    }
    if changed {
        let placed = decision
            .placements
            .iter()
            .filter_map(shards_of)
            .fold(RangeSet::new(), |a, s| a.union(&s));
        let left = unfinished.difference(&placed).len();
        decision.unplaced = u32::try_from(left).unwrap_or(u32::MAX);
        if left == 0 {
            decision.reason = None;
        }
    }
    decision
        .placements
        .sort_by(|a, b| a.cluster.cmp(&b.cluster));
}

/// A line for status: what moved off `lost` between two decisions.
pub fn moved_text(before: &Decision, after: &Decision, lost: &BTreeSet<String>) -> String {
    let share = |d: &Decision, c: &str| -> (u64, Option<String>) {
        d.placements
            .iter()
            .find(|p| p.cluster == c)
            .map(|p| {
                let n = match (&p.shards, p.replicas) {
                    (Some(s), _) => RangeSet::parse(s).map(|r| r.len()).unwrap_or(0),
                    (None, Some(r)) => u64::from(r),
                    (None, None) => 1,
                };
                (n, p.shards.clone())
            })
            .unwrap_or((0, None))
    };
    let unit = |d: &Decision| {
        if d.placements.iter().any(|p| p.shards.is_some()) {
            "shards"
        } else if d.placements.iter().any(|p| p.replicas.is_some()) {
            "replicas"
        } else {
            "workload"
        }
    };
    let from: u64 = lost.iter().map(|c| share(before, c).0).sum();
    let mut gains = Vec::new();
    for p in &after.placements {
        let (was, _) = share(before, &p.cluster);
        let (now, _) = share(after, &p.cluster);
        if now > was {
            gains.push(format!("{} +{}", p.cluster, now - was));
        }
    }
    let lost_list = lost.iter().cloned().collect::<Vec<_>>().join(", ");
    if gains.is_empty() {
        format!(
            "{lost_list} lost: its {from} {} found no other room",
            unit(before)
        )
    } else {
        format!(
            "{lost_list} lost: its {from} {} moved to {}",
            unit(before),
            gains.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn standing_changes_by_the_clock_only_while_waiting_or_settling() {
        let p = FailoverPolicy {
            enabled: true,
            grace_secs: 60,
            window_secs: 120,
        };
        let lost = MemberHealth {
            ready: false,
            lost_since: Some(1_000),
            ..Default::default()
        };
        assert_eq!(secs_until_standing_changes(&lost, &p, 1_010), Some(50));
        // Past the grace it is Lost: only a heartbeat changes that.
        assert_eq!(secs_until_standing_changes(&lost, &p, 1_060), None);
        let off = FailoverPolicy {
            enabled: false,
            ..p
        };
        assert_eq!(secs_until_standing_changes(&lost, &off, 1_010), None);
        let back = MemberHealth {
            ready: true,
            returned_at: Some(2_000),
            ..Default::default()
        };
        assert_eq!(secs_until_standing_changes(&back, &p, 2_100), Some(20));
        assert_eq!(secs_until_standing_changes(&back, &p, 2_120), None);
        let ready = MemberHealth {
            ready: true,
            ..Default::default()
        };
        assert_eq!(secs_until_standing_changes(&ready, &p, 5), None);
    }

    use super::*;
    use crate::placement::Placement;

    const WINDOW: i64 = 120;

    fn policy(enabled: bool) -> FailoverPolicy {
        FailoverPolicy {
            enabled,
            grace_secs: 60,
            window_secs: WINDOW,
        }
    }

    #[test]
    fn a_member_is_waited_for_during_the_grace_then_lost_and_settles_after_return() {
        let p = policy(true);
        let down = MemberHealth {
            ready: false,
            lost_since: Some(1000),
            ..MemberHealth::default()
        };
        assert_eq!(standing(&down, &p, 1030), Standing::Waiting);
        assert_eq!(standing(&down, &p, 1060), Standing::Lost);
        // Failover off: never moved.
        assert_eq!(standing(&down, &policy(false), 5000), Standing::Waiting);
        let back = MemberHealth {
            ready: true,
            returned_at: Some(2000),
            ..MemberHealth::default()
        };
        assert_eq!(standing(&back, &p, 2000 + WINDOW - 1), Standing::Settling);
        assert_eq!(standing(&back, &p, 2000 + WINDOW), Standing::Ready);
        assert_eq!(standing(&MemberHealth::default(), &p, 0), Standing::Lost);
        let draining = MemberHealth {
            ready: true,
            draining: true,
            ..MemberHealth::default()
        };
        assert_eq!(standing(&draining, &policy(false), 0), Standing::Draining);
    }

    fn reps(v: &[(&str, u32)]) -> BTreeMap<String, Share> {
        v.iter()
            .map(|(c, n)| (c.to_string(), Share::Replicas(*n)))
            .collect()
    }

    fn seen(v: &[(&str, u32, u32)]) -> BTreeMap<String, SliceSeen> {
        v.iter()
            .map(|(c, r, a)| {
                (
                    c.to_string(),
                    SliceSeen {
                        replicas: *r,
                        available: *a,
                        ready: r == a,
                    },
                )
            })
            .collect()
    }

    /// A decision of shard ranges by cluster.
    fn shards(v: &[(&str, &str)]) -> Decision {
        Decision::of_shards(v)
    }

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn work(shards: &str, processed: bool, completed: &str) -> WorkSeen {
        WorkSeen {
            shards: RangeSet::parse(shards).unwrap(),
            processed,
            completed: RangeSet::parse(completed).unwrap(),
            released: RangeSet::new(),
        }
    }

    fn shard_steps(v: &[(&str, &str)]) -> BTreeMap<String, SliceStep> {
        v.iter()
            .map(|(c, s)| {
                (
                    c.to_string(),
                    SliceStep::Apply(Share::Shards(s.to_string())),
                )
            })
            .collect()
    }

    #[test]
    fn a_shard_moves_between_live_members_only_after_the_first_let_it_go() {
        let live = set(&["a", "b"]);
        // The plan moves shard 2 from a to b: a's slice still lists it, so b waits.
        let mut steps = shard_steps(&[("a", "0-1"), ("b", "2-5")]);
        let seen: BTreeMap<String, WorkSeen> = [
            ("a".to_string(), work("0-2", true, "")),
            ("b".to_string(), work("3-5", true, "")),
        ]
        .into();
        let held = hand_off(&mut steps, &seen, &live);
        assert_eq!(held.shards.to_string(), "2");
        assert_eq!(steps["b"], SliceStep::Apply(Share::Shards("3-5".into())));
        assert_eq!(steps["a"], SliceStep::Apply(Share::Shards("0-1".into())));
        // a's slice without it, not yet acted on: b still waits (for all it is new to).
        let mut steps = shard_steps(&[("a", "0-1"), ("b", "2-5")]);
        let seen: BTreeMap<String, WorkSeen> = [
            ("a".to_string(), work("0-1", false, "")),
            ("b".to_string(), work("3-5", true, "")),
        ]
        .into();
        assert_eq!(hand_off(&mut steps, &seen, &live).shards.to_string(), "2");
        // Acted on: b gets it.
        let mut steps = shard_steps(&[("a", "0-1"), ("b", "2-5")]);
        let seen: BTreeMap<String, WorkSeen> = [
            ("a".to_string(), work("0-1", true, "")),
            ("b".to_string(), work("3-5", true, "")),
        ]
        .into();
        assert!(hand_off(&mut steps, &seen, &live).is_empty());
        assert_eq!(steps["b"], SliceStep::Apply(Share::Shards("2-5".into())));
    }

    #[test]
    fn a_lost_member_is_not_waited_for_and_a_finished_shard_is_not_handed_out() {
        // a is lost (not live): its shards go to b at once (the fence stops a).
        let mut steps = shard_steps(&[("b", "0-5")]);
        let seen: BTreeMap<String, WorkSeen> = [
            ("a".to_string(), work("0-2", false, "")),
            ("b".to_string(), work("3-5", true, "")),
        ]
        .into();
        assert!(hand_off(&mut steps, &seen, &set(&["b"])).is_empty());
        assert_eq!(steps["b"], SliceStep::Apply(Share::Shards("0-5".into())));
        // a finished shard 2 as it let it go (its slice records it released): b never
        // gets it, and nothing waits.
        let mut steps = shard_steps(&[("a", "0-1"), ("b", "2-5")]);
        let released = WorkSeen {
            released: RangeSet::parse("2").unwrap(),
            ..work("0-1", true, "2")
        };
        let seen: BTreeMap<String, WorkSeen> = [
            ("a".to_string(), released),
            ("b".to_string(), work("3-5", true, "")),
        ]
        .into();
        assert!(hand_off(&mut steps, &seen, &set(&["a", "b"])).is_empty());
        assert_eq!(steps["b"], SliceStep::Apply(Share::Shards("3-5".into())));
        // A report of a shard a never held (nor let go of) does not keep it from b.
        let mut steps = shard_steps(&[("a", "0-1"), ("b", "2-5")]);
        let seen: BTreeMap<String, WorkSeen> = [
            ("a".to_string(), work("0-1", true, "0-5")),
            ("b".to_string(), work("3-5", true, "")),
        ]
        .into();
        assert!(hand_off(&mut steps, &seen, &set(&["a", "b"])).is_empty());
        assert_eq!(steps["b"], SliceStep::Apply(Share::Shards("2-5".into())));
        // A first placement (no slice anywhere) holds nothing back.
        let mut steps = shard_steps(&[("a", "0-2"), ("b", "3-5")]);
        assert!(hand_off(&mut steps, &BTreeMap::new(), &set(&["a", "b"])).is_empty());
        assert_eq!(steps["a"], SliceStep::Apply(Share::Shards("0-2".into())));
    }

    #[test]
    fn a_slice_records_the_shards_it_let_go_of_until_they_come_back() {
        let r = |s: &str| RangeSet::parse(s).unwrap();
        // Shard 4 leaves a: recorded.
        assert_eq!(released_shards(&r("0-1,4"), &r(""), &r("0-1")), r("4"));
        // Unchanged share: the record stays as written (no write for it).
        assert_eq!(released_shards(&r("0-1"), &r("4"), &r("0-1")), r("4"));
        // Another move adds to it; a shard given back leaves it.
        assert_eq!(released_shards(&r("0-1"), &r("4"), &r("0")), r("1,4"));
        assert_eq!(released_shards(&r("0"), &r("1,4"), &r("0,4")), r("1"));
        // What a report may claim: held or let go of.
        let w = WorkSeen {
            released: r("4"),
            ..work("0-1", true, "0,2,4")
        };
        assert_eq!(w.completed_own(), r("0,4"));
    }

    #[test]
    fn a_whole_job_starts_in_its_new_member_once_the_old_slice_is_gone() {
        let live = set(&["a", "b"]);
        let mut steps: BTreeMap<String, SliceStep> = [
            ("a".to_string(), SliceStep::Delete),
            ("b".to_string(), SliceStep::Apply(Share::Whole)),
        ]
        .into();
        let seen: BTreeMap<String, WorkSeen> = [("a".to_string(), WorkSeen::default())].into();
        let held = hand_off(&mut steps, &seen, &live);
        assert!(held.whole);
        assert_eq!(steps["b"], SliceStep::Keep);
        assert_eq!(steps["a"], SliceStep::Delete);
        // Gone from a (or a lost): b starts it.
        let mut steps: BTreeMap<String, SliceStep> =
            [("b".to_string(), SliceStep::Apply(Share::Whole))].into();
        assert!(hand_off(&mut steps, &BTreeMap::new(), &live).is_empty());
        let mut steps: BTreeMap<String, SliceStep> =
            [("b".to_string(), SliceStep::Apply(Share::Whole))].into();
        assert!(hand_off(&mut steps, &seen, &set(&["b"])).is_empty());
        assert_eq!(steps["b"], SliceStep::Apply(Share::Whole));
    }

    #[test]
    fn a_staying_member_keeps_its_unfinished_shards_through_a_re_plan() {
        let previous = shards(&[("a", "0-1"), ("b", "2-3"), ("c", "4-5")]);
        // The plan (c not Ready) gave c's shards to a and b; shard 4 is done.
        let mut d = shards(&[("a", "0-1,4"), ("b", "2-3,5")]);
        let unfinished = RangeSet::parse("0-3,5").unwrap();
        keep_held_shards(&mut d, &previous, &unfinished, &set(&["c"]));
        let got: Vec<(&str, Option<&str>)> = d
            .placements
            .iter()
            .map(|p| (p.cluster.as_str(), p.shards.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![("a", Some("0-1,4")), ("b", Some("2-3")), ("c", Some("5"))]
        );
        // A cluster left with nothing drops out; nothing changes without a settling member.
        let mut d = shards(&[("a", "0-3"), ("b", "4-5")]);
        keep_held_shards(&mut d, &previous, &RangeSet::full(6), &set(&["c"]));
        assert_eq!(d.placements.len(), 2);
        assert_eq!(d.placements[1].cluster, "c");
        assert_eq!(d.placements[1].shards.as_deref(), Some("4-5"));
        let mut same = shards(&[("a", "0-2"), ("b", "3-5")]);
        keep_held_shards(&mut same, &previous, &RangeSet::full(6), &BTreeSet::new());
        assert_eq!(same, shards(&[("a", "0-2"), ("b", "3-5")]));
    }

    #[test]
    fn a_re_plan_never_moves_running_shards_between_live_members_only_the_unplaced() {
        // b ran all six after a failed over; a is back: the plan splits 3/3, but b keeps
        // what it holds (restarting them in a would run a shard whose Job completes in
        // the move twice).
        let previous = shards(&[("b", "0-5")]);
        let mut d = shards(&[("a", "0-2"), ("b", "3-5")]);
        keep_held_shards(&mut d, &previous, &RangeSet::full(6), &set(&["a", "b"]));
        assert_eq!(d, shards(&[("b", "0-5")]));
        // Shards the previous decision left unplaced go where the plan put them; unplaced
        // is counted again from what is placed.
        let mut previous = shards(&[("b", "0-3")]);
        previous.unplaced = 4;
        let mut d = shards(&[("a", "0-2,6-7"), ("b", "3-5")]);
        d.unplaced = 0;
        keep_held_shards(&mut d, &previous, &RangeSet::full(8), &set(&["a", "b"]));
        assert_eq!(d, shards(&[("a", "6-7"), ("b", "0-5")]));
        // A smaller plan (less room now) keeps them and owes the rest.
        let mut d = shards(&[("a", "4-5")]);
        d.unplaced = 6;
        d.reason = Some("InsufficientCapacity".into());
        keep_held_shards(&mut d, &previous, &RangeSet::full(8), &set(&["a", "b"]));
        assert_eq!(d.unplaced, 2, "{d:?}");
        // A member not staying (lost, left, out of the policy) keeps nothing.
        let mut d = shards(&[("a", "0-3")]);
        keep_held_shards(&mut d, &previous, &RangeSet::full(4), &set(&["a"]));
        assert_eq!(d, shards(&[("a", "0-3")]));
    }

    #[test]
    fn services_grow_first_and_shrink_or_drop_only_when_the_target_is_available() {
        // Failback: b returns (settled) and should get 10 back from a and c.
        let target = reps(&[("a", 10), ("b", 10), ("c", 10)]);
        let now = seen(&[("a", 15, 15), ("b", 0, 0), ("c", 15, 15)]);
        let reachable = set(&["a", "b", "c"]);
        let input = TransitionInput {
            target: &target,
            seen: &now,
            reachable: &reachable,
            settling: &BTreeSet::new(),
            run_to_completion: false,
        };
        let steps = transition(&input);
        assert_eq!(steps["b"], SliceStep::Apply(Share::Replicas(10)));
        assert_eq!(
            steps["a"],
            SliceStep::Apply(Share::Replicas(15)),
            "a keeps 15"
        );
        assert_eq!(steps["c"], SliceStep::Apply(Share::Replicas(15)));
        // b's 10 are available: a and c shrink.
        let now = seen(&[("a", 15, 15), ("b", 10, 10), ("c", 15, 15)]);
        let steps = transition(&TransitionInput {
            seen: &now,
            ..input
        });
        assert_eq!(steps["a"], SliceStep::Apply(Share::Replicas(10)));
        assert_eq!(steps["c"], SliceStep::Apply(Share::Replicas(10)));
    }

    #[test]
    fn a_stale_slice_waits_for_the_window_and_the_replacement_but_jobs_are_fenced_at_once() {
        let target = reps(&[("a", 15), ("c", 15)]);
        let now = seen(&[("a", 15, 15), ("b", 10, 10), ("c", 15, 15)]);
        let reachable = set(&["a", "b", "c"]);
        let settling = set(&["b"]);
        let input = TransitionInput {
            target: &target,
            seen: &now,
            reachable: &reachable,
            settling: &settling,
            run_to_completion: false,
        };
        assert_eq!(transition(&input)["b"], SliceStep::Keep);
        let settled = BTreeSet::new();
        assert_eq!(
            transition(&TransitionInput {
                settling: &settled,
                ..input
            })["b"],
            SliceStep::Delete
        );
        let short = seen(&[("a", 15, 12), ("b", 10, 10), ("c", 15, 15)]);
        assert_eq!(
            transition(&TransitionInput {
                settling: &settled,
                seen: &short,
                ..input
            })["b"],
            SliceStep::Keep,
            "the replacement is not available yet"
        );
        assert_eq!(
            transition(&TransitionInput {
                run_to_completion: true,
                ..input
            })["b"],
            SliceStep::Delete
        );
        // Unreachable members get no step at all.
        let reachable = set(&["a", "c"]);
        let steps = transition(&TransitionInput {
            reachable: &reachable,
            ..input
        });
        assert!(!steps.contains_key("b"));
    }

    #[test]
    fn completed_shards_stay_with_their_cluster_unless_it_is_lost() {
        let previous = shards(&[("a", "0-9"), ("b", "10-19"), ("c", "20-29")]);
        // 0-4 and 10-19 done; b's unfinished shards none; c lost with 20-29 unfinished.
        let mut next = shards(&[("a", "5-9,20-24"), ("d", "25-29")]);
        let completed = RangeSet::parse("0-4,10-19").unwrap();
        keep_completed_shards(&mut next, &previous, &completed, &set(&["c"]));
        assert_eq!(
            next,
            shards(&[("a", "0-9,20-24"), ("b", "10-19"), ("d", "25-29")])
        );
    }

    #[test]
    fn moved_text_names_the_lost_member_and_the_gains() {
        let d = |v: &[(&str, u32)]| Decision {
            placements: v
                .iter()
                .map(|(c, n)| Placement {
                    cluster: c.to_string(),
                    replicas: Some(*n),
                    shards: None,
                    pods: None,
                })
                .collect(),
            strategy: crate::placement::Strategy::Divided,
            unplaced: 0,
            reason: None,
        };
        let text = moved_text(
            &d(&[("a", 10), ("b", 10), ("c", 10)]),
            &d(&[("a", 15), ("c", 15)]),
            &set(&["b"]),
        );
        assert_eq!(text, "b lost: its 10 replicas moved to a +5, c +5");
    }
}

//! Priority and the hub's queue of waiting workloads. Pure: the hub maps its
//! PriorityClasses into [`PriorityClassView`]s, keeps one [`WaitQueue`] and passes the
//! time in.
//!
//! The queue orders workloads that wait for room or quota: highest priority first — a
//! waiting workload's priority grows with its wait ([`Aging`]), so a low one is not
//! starved for ever — then the longest waiting, then the name. Room that frees goes to
//! the first one that can use it: a workload ranked lower that could take it now yields
//! ([`WaitQueue::first_ahead`]) for a bounded time ([`YIELD_LIMIT_SECS`]), so a
//! workload ahead that cannot use the room after all never blocks the rest.

use std::collections::BTreeMap;

use super::model::{Count, Demand, PlacementPolicy};

/// A PriorityClass as the queue reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriorityClassView {
    pub name: String,
    pub value: i32,
    pub global_default: bool,
    /// `preemptionPolicy` is `PreemptLowerPriority` (Kubernetes' default when the class
    /// says nothing); `Never` only queues.
    pub preempts: bool,
}

impl PriorityClassView {
    /// A Kubernetes PriorityClass as the queue reads it (`preemptionPolicy` absent is
    /// Kubernetes' default, `PreemptLowerPriority`).
    pub fn from_class(c: &k8s_openapi::api::scheduling::v1::PriorityClass) -> PriorityClassView {
        PriorityClassView {
            name: c.metadata.name.clone().unwrap_or_default(),
            value: c.value.unwrap_or(0),
            global_default: c.global_default.unwrap_or(false),
            preempts: c.preemption_policy.as_deref() != Some("Never"),
        }
    }
}

/// A workload's resolved priority.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Priority {
    /// The class it came from (`None`: no class and no global default).
    pub class: Option<String>,
    pub value: i32,
    /// Whether it may preempt lower-priority work. A workload without a class never does:
    /// preemption is opted into by naming a class.
    pub preempts: bool,
}

/// Resolves `spec.priorityClassName` against the hub's classes: the named class, else
/// the global default (the highest, should there be several), else 0. An unknown name is
/// an error naming the field.
pub fn resolve(name: Option<&str>, classes: &[PriorityClassView]) -> Result<Priority, String> {
    match name {
        Some(n) => classes
            .iter()
            .find(|c| c.name == n)
            .map(|c| Priority {
                class: Some(c.name.clone()),
                value: c.value,
                preempts: c.preempts,
            })
            .ok_or_else(|| {
                format!("spec.priorityClassName: there is no PriorityClass {n:?} on the hub")
            }),
        None => Ok(classes
            .iter()
            .filter(|c| c.global_default)
            .max_by_key(|c| (c.value, std::cmp::Reverse(c.name.clone())))
            .map(|c| Priority {
                class: Some(c.name.clone()),
                value: c.value,
                // (Not named by the workload: the default class orders, it does not evict.)
                preempts: false,
            })
            .unwrap_or_default()),
    }
}

/// How waiting raises a workload's place in the queue: `step` every `every_secs`, at most
/// `max` in all. Preemption never uses it: only a workload's own priority evicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aging {
    pub every_secs: i64,
    pub step: i32,
    pub max: i32,
}

impl Default for Aging {
    fn default() -> Aging {
        Aging {
            every_secs: 60,
            step: 10,
            max: 1000,
        }
    }
}

impl Aging {
    /// The priority the queue orders by after waiting `waited_secs`.
    pub fn effective(&self, value: i32, waited_secs: i64) -> i32 {
        if self.every_secs <= 0 || self.step <= 0 || waited_secs <= 0 {
            return value;
        }
        let steps = waited_secs / self.every_secs;
        let boost = steps
            .saturating_mul(i64::from(self.step))
            .min(i64::from(self.max.max(0)));
        i32::try_from(i64::from(value).saturating_add(boost)).unwrap_or(i32::MAX)
    }
}

/// What a waiting workload waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitingFor {
    /// Room in members (the decision's reason says which and how much).
    Room(String),
    /// Its namespace's quota.
    Quota(String),
}

impl WaitingFor {
    pub fn text(&self) -> &str {
        match self {
            WaitingFor::Room(s) | WaitingFor::Quota(s) => s,
        }
    }
}

/// How long a workload yields room to the same workload ahead of it that does not take
/// it: after this it goes ahead (the one ahead could not use the room after all — its
/// spread, its quota or its gang).
pub const YIELD_LIMIT_SECS: i64 = 60;

/// One waiting workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Waiting {
    /// `Kind/namespace/name`.
    pub key: String,
    pub namespace: String,
    pub priority: Priority,
    /// Waiting since (unix seconds).
    pub since: i64,
    pub waiting_for: WaitingFor,
    /// One unit of it (a replica, a shard, the whole gang) and its policy: what a
    /// workload behind it asks before taking room ("could this one use it?").
    pub unit: Demand,
    pub policy: PlacementPolicy,
    /// The workload ahead it yields to, and since when (unix seconds).
    pub yielding: Option<(String, i64)>,
}

/// The hub's queue: every workload part of which waits.
#[derive(Clone, Debug, Default)]
pub struct WaitQueue {
    entries: BTreeMap<String, Waiting>,
    pub aging: Aging,
}

/// A workload's place in the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standing {
    /// 1 is next.
    pub position: usize,
    pub waiting: usize,
    pub effective_priority: i32,
    pub since: i64,
}

impl WaitQueue {
    pub fn new(aging: Aging) -> WaitQueue {
        WaitQueue {
            entries: BTreeMap::new(),
            aging,
        }
    }

    /// Adds or updates a waiting workload; one already waiting keeps its `since` (and
    /// what it yields to).
    pub fn upsert(&mut self, mut w: Waiting) {
        if let Some(old) = self.entries.get(&w.key) {
            w.since = old.since.min(w.since);
            if w.yielding.is_none() {
                w.yielding = old.yielding.clone();
            }
        }
        self.entries.insert(w.key.clone(), w);
    }

    /// A workload placed whole (or deleted) leaves the queue.
    pub fn remove(&mut self, key: &str) -> Option<Waiting> {
        self.entries.remove(key)
    }

    pub fn get(&self, key: &str) -> Option<&Waiting> {
        self.entries.get(key)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The order key: higher effective priority, then longer waiting, then the name.
    fn rank(&self, priority: i32, since: i64, key: &str, now: i64) -> (i32, i64, String) {
        let effective = self.aging.effective(priority, now - since);
        (-effective.max(i32::MIN + 1), since, key.to_string())
    }

    /// Every waiting workload, first to last.
    pub fn ordered(&self, now: i64) -> Vec<&Waiting> {
        let mut all: Vec<&Waiting> = self.entries.values().collect();
        all.sort_by_cached_key(|w| self.rank(w.priority.value, w.since, &w.key, now));
        all
    }

    /// Where `key` stands, if it waits.
    pub fn standing(&self, key: &str, now: i64) -> Option<Standing> {
        let w = self.entries.get(key)?;
        let mine = self.rank(w.priority.value, w.since, key, now);
        let ahead = self
            .entries
            .values()
            .filter(|o| self.rank(o.priority.value, o.since, &o.key, now) < mine)
            .count();
        Some(Standing {
            position: ahead + 1,
            waiting: self.entries.len(),
            effective_priority: self.aging.effective(w.priority.value, now - w.since),
            since: w.since,
        })
    }

    /// The first workload ranked ahead of one with this priority, wait and key (the
    /// workload itself, whether it waits yet or not, is never ahead of itself) for which
    /// `could_use` says the room there is now would place part of it. `limit` bounds how
    /// many are asked (each ask is one placement run).
    pub fn first_ahead(
        &self,
        priority: i32,
        since: i64,
        key: &str,
        now: i64,
        limit: usize,
        mut could_use: impl FnMut(&Waiting) -> bool,
    ) -> Option<&Waiting> {
        let mine = self.rank(priority, since, key, now);
        let mut ahead: Vec<(&Waiting, (i32, i64, String))> = self
            .entries
            .values()
            .filter(|o| o.key != key)
            .map(|o| (o, self.rank(o.priority.value, o.since, &o.key, now)))
            .filter(|(_, r)| *r < mine)
            .collect();
        ahead.sort_by(|a, b| a.1.cmp(&b.1));
        ahead
            .into_iter()
            .take(limit)
            .map(|(o, _)| o)
            .find(|o| could_use(o))
    }

    /// Records that `key` yields to `to` at `now`; says whether it still should (it has
    /// yielded to that one for less than [`YIELD_LIMIT_SECS`]).
    pub fn note_yield(&mut self, key: &str, to: &str, now: i64) -> bool {
        let Some(w) = self.entries.get_mut(key) else {
            return true;
        };
        match &w.yielding {
            Some((t, since)) if t == to => now - since < YIELD_LIMIT_SECS,
            _ => {
                w.yielding = Some((to.to_string(), now));
                true
            }
        }
    }
}

impl Demand {
    /// One unit of what it asks for: a replica or a shard (on its own pod), or the whole
    /// gang or workload — the least room it could use.
    pub fn one_unit(&self) -> Demand {
        let count = match &self.count {
            Count::Replicas(_) => Count::Replicas(1),
            Count::Shards { .. } => Count::Shards {
                total: 1,
                completed: Default::default(),
                parallelism: None,
            },
            c => c.clone(),
        };
        Demand {
            count,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::model::PodShape;

    fn class(name: &str, value: i32, default: bool, preempts: bool) -> PriorityClassView {
        PriorityClassView {
            name: name.into(),
            value,
            global_default: default,
            preempts,
        }
    }

    fn waiting(key: &str, value: i32, since: i64) -> Waiting {
        Waiting {
            key: key.into(),
            namespace: "ns".into(),
            priority: Priority {
                class: None,
                value,
                preempts: false,
            },
            since,
            waiting_for: WaitingFor::Room("room".into()),
            unit: Demand {
                pod: PodShape::default(),
                count: Count::Replicas(1),
                member_pods: Default::default(),
                member_roles: Default::default(),
            },
            policy: PlacementPolicy::default(),
            yielding: None,
        }
    }

    #[test]
    fn a_named_class_resolves_and_an_unknown_one_names_the_field() {
        let classes = [
            class("high", 1000, false, true),
            class("batch", 10, true, true),
            class("polite", 500, false, false),
        ];
        let p = resolve(Some("high"), &classes).unwrap();
        assert_eq!((p.value, p.preempts), (1000, true));
        assert!(!resolve(Some("polite"), &classes).unwrap().preempts);
        let d = resolve(None, &classes).unwrap();
        assert_eq!(
            (d.class.as_deref(), d.value, d.preempts),
            (Some("batch"), 10, false)
        );
        assert_eq!(resolve(None, &[]).unwrap(), Priority::default());
        let e = resolve(Some("nope"), &classes).unwrap_err();
        assert!(
            e.contains("spec.priorityClassName") && e.contains("nope"),
            "{e}"
        );
    }

    #[test]
    fn aging_raises_by_steps_up_to_its_cap() {
        let a = Aging {
            every_secs: 60,
            step: 10,
            max: 25,
        };
        assert_eq!(a.effective(100, 0), 100);
        assert_eq!(a.effective(100, 59), 100);
        assert_eq!(a.effective(100, 60), 110);
        assert_eq!(a.effective(100, 150), 120);
        assert_eq!(a.effective(100, 10_000), 125);
        assert_eq!(a.effective(i32::MAX, 10_000), i32::MAX);
        assert_eq!(a.effective(100, -5), 100);
    }

    #[test]
    fn the_queue_orders_by_priority_then_age_and_aging_bounds_starvation() {
        let mut q = WaitQueue::new(Aging {
            every_secs: 60,
            step: 10,
            max: 1000,
        });
        q.upsert(waiting("low-old", 10, 0));
        q.upsert(waiting("high", 100, 500));
        q.upsert(waiting("high-older", 100, 400));
        q.upsert(waiting("low-new", 10, 550));
        let order: Vec<&str> = q.ordered(600).iter().map(|w| w.key.as_str()).collect();
        // Everyone ages: high-older 100+20, low-old 10+100 (ten minutes) level with high
        // (100+10) and older than it, low-new 10+0.
        assert_eq!(order, ["high-older", "low-old", "high", "low-new"]);
        let s = q.standing("high", 600).unwrap();
        assert_eq!((s.position, s.waiting, s.effective_priority), (3, 4, 110));
        // An update keeps the first wait.
        q.upsert(waiting("high", 100, 590));
        assert_eq!(q.get("high").unwrap().since, 500);
        assert!(q.remove("high").is_some());
        assert_eq!(q.standing("low-new", 600).unwrap().position, 3);
        assert_eq!(q.standing("high", 600), None);
    }

    #[test]
    fn room_goes_to_the_first_ahead_that_can_use_it_and_yielding_is_bounded() {
        let mut q = WaitQueue::new(Aging::default());
        q.upsert(waiting("a", 300, 0));
        q.upsert(waiting("b", 200, 0));
        q.upsert(waiting("c", 100, 0));
        // c asks: a cannot use the room, b can.
        let got = q.first_ahead(100, 0, "c", 0, 10, |w| w.key == "b");
        assert_eq!(got.map(|w| w.key.as_str()), Some("b"));
        // Nothing ahead of a.
        assert!(q.first_ahead(300, 0, "a", 0, 10, |_| true).is_none());
        // A newcomer of equal priority waits behind those already waiting.
        let got = q.first_ahead(200, 5, "new", 5, 10, |_| true);
        assert_eq!(got.map(|w| w.key.as_str()), Some("a"));
        // The limit bounds the asks.
        let mut asked = 0;
        let got = q.first_ahead(100, 0, "c", 0, 1, |w| {
            asked += 1;
            w.key == "b"
        });
        assert!(got.is_none());
        assert_eq!(asked, 1);
        // Yielding to the same one is bounded.
        assert!(q.note_yield("c", "b", 100));
        assert!(q.note_yield("c", "b", 100 + YIELD_LIMIT_SECS - 1));
        assert!(!q.note_yield("c", "b", 100 + YIELD_LIMIT_SECS));
        // ... and starts over for another one.
        assert!(q.note_yield("c", "a", 100 + YIELD_LIMIT_SECS));
    }

    #[test]
    fn one_unit_is_a_replica_a_shard_or_the_whole_gang() {
        let mut d = waiting("x", 0, 0).unit;
        d.count = Count::Replicas(7);
        assert_eq!(d.one_unit().count, Count::Replicas(1));
        d.count = Count::Shards {
            total: 9,
            completed: [1, 2].into(),
            parallelism: Some(3),
        };
        assert_eq!(
            d.one_unit().count,
            Count::Shards {
                total: 1,
                completed: Default::default(),
                parallelism: None
            }
        );
        d.count = Count::Gang(Vec::new());
        assert_eq!(d.one_unit().count, Count::Gang(Vec::new()));
    }
}

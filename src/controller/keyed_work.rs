//! Work on many keys at once, one operation per key at a time.
//!
//! The pull agent mirrors a burst of MemberSlices into its member: one apply after the
//! other made the pull member's slices the burst's slowest (each waits for every apply
//! before it). [`KeyedWork`] lets up to `limit` keys be worked on together while keeping
//! each key's operations in order: an operation offered for a key already in flight waits
//! for it, and only the latest waiting one is kept (it carries the newest state, so an
//! older one would only be undone). Pure bookkeeping: the caller runs the operations.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;

#[derive(Debug)]
pub struct KeyedWork<K, Op> {
    limit: usize,
    in_flight: HashSet<K>,
    /// The latest operation offered per waiting key, and the keys in the order they came.
    waiting: HashMap<K, Op>,
    order: VecDeque<K>,
}

impl<K: Clone + Eq + Hash, Op> KeyedWork<K, Op> {
    pub fn new(limit: usize) -> KeyedWork<K, Op> {
        KeyedWork {
            limit: limit.max(1),
            in_flight: HashSet::new(),
            waiting: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Offers `op` for `key`: returned when it may start now (the caller runs it and calls
    /// [`finished`](Self::finished) after), else kept until then, replacing an operation
    /// that waited for the same key.
    pub fn offer(&mut self, key: K, op: Op) -> Option<(K, Op)> {
        if !self.in_flight.contains(&key)
            && !self.waiting.contains_key(&key)
            && self.in_flight.len() < self.limit
        {
            self.in_flight.insert(key.clone());
            return Some((key, op));
        }
        if self.waiting.insert(key.clone(), op).is_none() {
            self.order.push_back(key);
        }
        None
    }

    /// `key`'s operation ended: the operations that may start now, oldest first.
    pub fn finished(&mut self, key: &K) -> Vec<(K, Op)> {
        self.in_flight.remove(key);
        let mut start = Vec::new();
        let mut skipped = VecDeque::new();
        while self.in_flight.len() < self.limit {
            let Some(next) = self.order.pop_front() else {
                break;
            };
            if self.in_flight.contains(&next) {
                skipped.push_back(next);
                continue;
            }
            if let Some(op) = self.waiting.remove(&next) {
                self.in_flight.insert(next.clone());
                start.push((next, op));
            }
        }
        // Keys still in flight keep their place in the line.
        while let Some(k) = skipped.pop_back() {
            self.order.push_front(k);
        }
        start
    }

    /// Whether an operation for `key` waits (a newer one than any in flight).
    pub fn waits(&self, key: &K) -> bool {
        self.waiting.contains_key(key)
    }

    /// Whether nothing is in flight or waiting.
    pub fn is_idle(&self) -> bool {
        self.in_flight.is_empty() && self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_run_together_up_to_the_limit_and_the_rest_start_in_order() {
        let mut w = KeyedWork::new(2);
        assert_eq!(w.offer("a", 1), Some(("a", 1)));
        assert_eq!(w.offer("b", 1), Some(("b", 1)));
        assert_eq!(w.offer("c", 1), None, "at the limit");
        assert_eq!(w.offer("d", 1), None);
        assert_eq!(w.finished(&"a"), vec![("c", 1)]);
        assert_eq!(w.finished(&"b"), vec![("d", 1)]);
        assert!(w.finished(&"c").is_empty());
        assert!(w.finished(&"d").is_empty());
        assert!(w.is_idle());
    }

    #[test]
    fn a_key_in_flight_waits_and_only_its_latest_operation_is_kept() {
        let mut w = KeyedWork::new(4);
        assert_eq!(w.offer("a", 1), Some(("a", 1)));
        assert_eq!(w.offer("a", 2), None, "one at a time per key");
        assert_eq!(w.offer("a", 3), None);
        assert!(w.waits(&"a"));
        assert_eq!(w.offer("b", 1), Some(("b", 1)), "other keys go on");
        assert_eq!(w.finished(&"a"), vec![("a", 3)], "the latest only");
        assert!(w.finished(&"a").is_empty());
        assert!(!w.waits(&"a"));
    }

    #[test]
    fn a_waiting_key_whose_earlier_operation_is_still_running_keeps_its_place() {
        let mut w = KeyedWork::new(2);
        assert_eq!(w.offer("a", 1), Some(("a", 1)));
        assert_eq!(w.offer("b", 1), Some(("b", 1)));
        assert_eq!(w.offer("a", 2), None);
        assert_eq!(w.offer("c", 1), None);
        // b ends while a still runs: c starts, a's second operation keeps waiting.
        assert_eq!(w.finished(&"b"), vec![("c", 1)]);
        assert_eq!(w.finished(&"a"), vec![("a", 2)]);
        assert!(w.finished(&"c").is_empty());
        assert!(w.finished(&"a").is_empty());
        assert!(w.is_idle());
    }

    #[test]
    fn a_key_offered_while_others_wait_does_not_jump_the_line() {
        let mut w = KeyedWork::new(1);
        assert_eq!(w.offer("a", 1), Some(("a", 1)));
        assert_eq!(w.offer("b", 1), None);
        assert_eq!(w.finished(&"a"), vec![("b", 1)]);
        assert_eq!(w.offer("c", 1), None, "at the limit again");
        assert_eq!(w.finished(&"b"), vec![("c", 1)]);
    }
}

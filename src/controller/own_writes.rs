//! A controller's own writes to an object that its watch has not delivered yet (the hub's
//! to its workloads, an agent's to its slices' status).
//!
//! A reconcile runs again as soon as one of its own writes comes back through the watch
//! (and on other triggers meanwhile: slices, generated objects). The copy it then reads
//! can predate the writes of the run before: without this record it would add the
//! finalizer again and write the same status again (its conditions with new transition
//! times, so not even equal). Versions are only compared for equality, as the API asks.

use std::collections::HashMap;
use std::sync::Mutex;

/// What the last writes changed, while the watch lags behind them.
#[derive(Debug, Clone, Default)]
struct Pending {
    /// The versions the writes were made over: a copy at one of these predates them.
    before: Vec<String>,
    /// The version the last write returned: a copy at it (or any other version not in
    /// `before`) has every write.
    last: String,
    finalizer: bool,
    /// Our finalizer was removed (the object is on its way out).
    released: bool,
    /// The status as last written (the whole part the hub owns).
    status: Option<serde_json::Value>,
}

/// What a reconcile reading an older copy should take as stored instead.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Unseen {
    /// The finalizer was added.
    pub finalizer: bool,
    /// The finalizer was removed: a deleted object's clean-up is done.
    pub released: bool,
    /// The status written.
    pub status: Option<serde_json::Value>,
}

/// One write, for [`OwnWrites::wrote`].
pub enum Wrote {
    /// Annotations (and the finalizer when `finalizer`).
    Metadata { finalizer: bool },
    /// The finalizer removed, after a deleted object's clean-up.
    Released,
    /// The status the hub owns, whole.
    Status(serde_json::Value),
}

/// Workload key → its writes the watch has not delivered.
#[derive(Debug, Default)]
pub struct OwnWrites {
    pending: Mutex<HashMap<String, Pending>>,
}

impl OwnWrites {
    /// What a copy at `version` does not show yet; `None` when it shows every write.
    pub fn unseen(&self, key: &str, version: Option<&str>) -> Option<Unseen> {
        let pending = self.pending.lock().ok()?;
        let p = pending.get(key)?;
        let version = version?;
        p.before.iter().any(|b| b == version).then(|| Unseen {
            finalizer: p.finalizer,
            released: p.released,
            status: p.status.clone(),
        })
    }

    /// Records a write made over the copy at `read` (or over the previous write's result)
    /// that returned `version`.
    pub fn wrote(&self, key: &str, read: Option<&str>, version: Option<&str>, what: Wrote) {
        let Ok(mut pending) = self.pending.lock() else {
            return;
        };
        let Some(version) = version else {
            // No version returned: nothing to tell copies apart by.
            pending.remove(key);
            return;
        };
        let p = pending.entry(key.to_string()).or_default();
        // Copies at the version read and at the previous write's result both predate it.
        let last = std::mem::take(&mut p.last);
        for over in [
            read.map(str::to_string),
            Some(last).filter(|l| !l.is_empty()),
        ] {
            if let Some(over) = over
                && !p.before.contains(&over)
            {
                p.before.push(over);
            }
        }
        p.last = version.to_string();
        match what {
            Wrote::Metadata { finalizer } => p.finalizer |= finalizer,
            Wrote::Released => p.released = true,
            Wrote::Status(s) => p.status = Some(s),
        }
    }

    /// A write this record cannot describe (a partial status): forget the workload's.
    pub fn forget(&self, key: &str) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.remove(key);
        }
    }

    /// The watch delivered `key` at `version` (`None`: deleted): a copy that is not one
    /// of the versions written over has every write, so nothing is kept for it.
    pub fn seen(&self, key: &str, version: Option<&str>) {
        let Ok(mut pending) = self.pending.lock() else {
            return;
        };
        let caught_up = match (pending.get(key), version) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(p), Some(v)) => !p.before.iter().any(|b| b == v),
        };
        if caught_up {
            pending.remove(key);
        }
    }

    /// Passes a watch event on: an object it delivers (or deletes) is `seen`, under the
    /// key `key_of` gives it.
    pub fn seen_in<K: kube::Resource>(
        &self,
        event: &kube::runtime::watcher::Event<K>,
        key_of: impl Fn(&K) -> String,
    ) {
        use kube::runtime::watcher::Event;
        match event {
            Event::Apply(o) | Event::InitApply(o) => {
                self.seen(&key_of(o), o.meta().resource_version.as_deref())
            }
            Event::Delete(o) => self.seen(&key_of(o), None),
            _ => {}
        }
    }

    /// Workloads with writes the watch has not delivered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.pending.lock().map(|p| p.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finalizer_added(w: &OwnWrites, read: &str, version: Option<&str>) {
        w.wrote(
            "k",
            Some(read),
            version,
            Wrote::Metadata { finalizer: true },
        );
    }

    #[test]
    fn an_older_copy_sees_the_finalizer_and_status_written_since() {
        let w = OwnWrites::default();
        let st = serde_json::json!({"placement": [{"cluster": "a"}]});
        finalizer_added(&w, "10", Some("11"));
        w.wrote("k", Some("10"), Some("12"), Wrote::Status(st.clone()));
        let at_10 = w.unseen("k", Some("10")).expect("10 predates both writes");
        assert!(at_10.finalizer);
        assert_eq!(at_10.status.as_ref(), Some(&st));
        // 11 has the metadata write, not the status.
        assert_eq!(w.unseen("k", Some("11")).and_then(|u| u.status), Some(st));
        // 12 has both.
        assert_eq!(w.unseen("k", Some("12")), None);
        assert_eq!(w.unseen("other", Some("10")), None);
    }

    #[test]
    fn the_watch_catching_up_or_a_delete_ends_the_record() {
        let w = OwnWrites::default();
        finalizer_added(&w, "1", Some("2"));
        w.seen("k", Some("1"));
        assert_eq!(w.len(), 1, "an event of the older copy keeps it");
        w.seen("k", Some("2"));
        assert_eq!(w.len(), 0);
        w.wrote(
            "k",
            Some("2"),
            Some("3"),
            Wrote::Metadata { finalizer: false },
        );
        w.seen("k", None);
        assert_eq!(w.len(), 0);
        assert_eq!(w.unseen("k", Some("2")), None);
    }

    #[test]
    fn a_write_without_a_version_or_a_partial_one_forgets() {
        let w = OwnWrites::default();
        finalizer_added(&w, "1", Some("2"));
        finalizer_added(&w, "2", None);
        assert_eq!(w.unseen("k", Some("1")), None);
        finalizer_added(&w, "1", Some("2"));
        w.forget("k");
        assert_eq!(w.unseen("k", Some("1")), None);
    }

    #[test]
    fn a_status_written_after_the_watch_caught_up_with_the_metadata_write() {
        // One reconcile: the finalizer patch over 10 returns 11; the watch delivers 11
        // (the record ends); the status apply is made over 11 and returns 12. A copy at
        // 11 (the cache's, which queued the next reconcile) lacks that status.
        let w = OwnWrites::default();
        let st = serde_json::json!({"placement": [{"cluster": "a"}]});
        finalizer_added(&w, "10", Some("11"));
        w.seen("k", Some("11"));
        w.wrote("k", Some("11"), Some("12"), Wrote::Status(st.clone()));
        assert_eq!(w.unseen("k", Some("11")).and_then(|u| u.status), Some(st));
        assert_eq!(w.unseen("k", Some("12")), None);
    }

    #[test]
    fn a_copy_from_before_the_finalizer_was_removed_says_so() {
        let w = OwnWrites::default();
        w.wrote("k", Some("20"), Some("21"), Wrote::Released);
        assert!(w.unseen("k", Some("20")).is_some_and(|u| u.released));
        w.seen("k", None);
        assert_eq!(w.unseen("k", Some("20")), None, "deleted: nothing kept");
    }
}

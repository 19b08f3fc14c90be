//! Shards are seats with identity. Given each cluster's new shard count, choose *which*
//! global indices it runs: a cluster keeps the unfinished indices it already has (up to its
//! new count), clusters that need more take the lowest free indices — so a fresh split is
//! contiguous ranges in cluster-name order — and completed shards are never handed out.
//!
//! Also a small range-list helper (`0-3,7`, `""` = none; ascending, non-overlapping, no
//! spaces), kept private to placement and working on ranges so a huge shard count never
//! has to be expanded index by index.

use std::collections::{BTreeMap, BTreeSet};

/// A set of indices as sorted, disjoint, non-adjacent inclusive ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct IndexSet(Vec<(u32, u32)>);

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a valid range list: {why}")]
pub struct RangeListError {
    pub input: String,
    pub why: String,
}

/// Parses a range list into inclusive ranges (ascending, non-overlapping).
pub fn parse_ranges(input: &str) -> Result<Vec<(u32, u32)>, RangeListError> {
    let err = |why: String| RangeListError {
        input: input.to_string(),
        why,
    };
    let mut out: Vec<(u32, u32)> = Vec::new();
    if input.is_empty() {
        return Ok(out);
    }
    for item in input.split(',') {
        let number = |s: &str| -> Result<u32, RangeListError> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err(format!("{item:?} is not `a` or `a-b`")));
            }
            if s.len() > 1 && s.starts_with('0') {
                return Err(err(format!("{s:?} has a leading zero")));
            }
            s.parse::<u32>()
                .map_err(|_| err(format!("{s:?} is too large")))
        };
        let (a, b) = match item.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => {
                let a = number(item)?;
                (a, a)
            }
        };
        if a > b {
            return Err(err(format!("{item:?} runs backwards")));
        }
        if let Some(&(_, prev)) = out.last()
            && a <= prev
        {
            return Err(err(format!("{item:?} is not above the previous item")));
        }
        out.push((a, b));
    }
    Ok(out)
}

impl IndexSet {
    pub(crate) fn new() -> IndexSet {
        IndexSet(Vec::new())
    }

    /// `0..total`.
    pub(crate) fn below(total: u32) -> IndexSet {
        if total == 0 {
            IndexSet::new()
        } else {
            IndexSet(vec![(0, total - 1)])
        }
    }

    pub(crate) fn from_ranges(ranges: &[(u32, u32)]) -> IndexSet {
        let mut sorted: Vec<(u32, u32)> = ranges.iter().copied().filter(|(a, b)| a <= b).collect();
        sorted.sort_unstable();
        let mut set = IndexSet::new();
        for (a, b) in sorted {
            set.push(a, b);
        }
        set
    }

    pub(crate) fn from_set(indices: &BTreeSet<u32>) -> IndexSet {
        let mut set = IndexSet::new();
        for &i in indices {
            set.push(i, i);
        }
        set
    }

    /// Appends `[a, b]`; `a` must not be below the start of the last range.
    fn push(&mut self, a: u32, b: u32) {
        if let Some(last) = self.0.last_mut()
            && (a <= last.1 || a - last.1 == 1)
        {
            last.1 = last.1.max(b);
            return;
        }
        self.0.push((a, b));
    }

    pub(crate) fn len(&self) -> u64 {
        self.0
            .iter()
            .map(|(a, b)| u64::from(*b) - u64::from(*a) + 1)
            .sum()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn union(&self, o: &IndexSet) -> IndexSet {
        let mut all: Vec<(u32, u32)> = self.0.iter().chain(&o.0).copied().collect();
        all.sort_unstable();
        let mut set = IndexSet::new();
        for (a, b) in all {
            set.push(a, b);
        }
        set
    }

    pub(crate) fn intersection(&self, o: &IndexSet) -> IndexSet {
        let mut set = IndexSet::new();
        let (mut i, mut j) = (0, 0);
        while i < self.0.len() && j < o.0.len() {
            let (a1, b1) = self.0[i];
            let (a2, b2) = o.0[j];
            let (a, b) = (a1.max(a2), b1.min(b2));
            if a <= b {
                set.push(a, b);
            }
            if b1 < b2 {
                i += 1;
            } else {
                j += 1;
            }
        }
        set
    }

    pub(crate) fn difference(&self, o: &IndexSet) -> IndexSet {
        // self ∩ complement(o), the complement built from the gaps of `o`.
        let mut gaps = Vec::new();
        let mut start: u64 = 0;
        for &(a, b) in &o.0 {
            if u64::from(a) > start {
                gaps.push((start as u32, a - 1));
            }
            start = u64::from(b) + 1;
        }
        if start <= u64::from(u32::MAX) {
            gaps.push((start as u32, u32::MAX));
        }
        self.intersection(&IndexSet(gaps))
    }

    /// The `n` lowest indices.
    pub(crate) fn take_lowest(&self, n: u64) -> IndexSet {
        let mut set = IndexSet::new();
        let mut left = n;
        for &(a, b) in &self.0 {
            if left == 0 {
                break;
            }
            let size = u64::from(b) - u64::from(a) + 1;
            if size <= left {
                set.push(a, b);
                left -= size;
            } else {
                // left < size ≤ 2^32, so a + left - 1 ≤ b fits.
                set.push(a, a + (left as u32) - 1);
                left = 0;
            }
        }
        set
    }
}

impl std::fmt::Display for IndexSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (a, b)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if a == b {
                write!(f, "{a}")?;
            } else {
                write!(f, "{a}-{b}")?;
            }
        }
        Ok(())
    }
}

/// Chooses the indices of every cluster.
///
/// `remaining` is the set of unfinished shards; `current` the indices each cluster had
/// (anything outside `remaining` is dropped, an index listed by two clusters stays with the
/// first by name); `counts` each cluster's new share, whose sum must not exceed
/// `remaining.len()` (a larger sum is cut short, never invented).
pub(crate) fn assign_shards(
    remaining: &IndexSet,
    current: &BTreeMap<String, IndexSet>,
    counts: &BTreeMap<String, u32>,
) -> BTreeMap<String, IndexSet> {
    let mut out: BTreeMap<String, IndexSet> = BTreeMap::new();
    let mut taken = IndexSet::new();
    // Keep what each cluster already runs, lowest indices first when it shrinks.
    for (cluster, &count) in counts {
        let Some(had) = current.get(cluster) else {
            continue;
        };
        let keep = had
            .intersection(remaining)
            .difference(&taken)
            .take_lowest(u64::from(count));
        taken = taken.union(&keep);
        out.insert(cluster.clone(), keep);
    }
    // Top up from the lowest free indices, in cluster-name order.
    let mut pool = remaining.difference(&taken);
    for (cluster, &count) in counts {
        let have = out.get(cluster).map_or(0, IndexSet::len);
        let need = u64::from(count).saturating_sub(have);
        if need == 0 {
            continue;
        }
        let more = pool.take_lowest(need);
        pool = pool.difference(&more);
        let entry = out.entry(cluster.clone()).or_default();
        *entry = entry.union(&more);
    }
    out.retain(|_, s| !s.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> IndexSet {
        IndexSet::from_ranges(&parse_ranges(s).unwrap())
    }

    #[test]
    fn range_lists_parse_and_format() {
        assert_eq!(parse_ranges("").unwrap(), vec![]);
        assert_eq!(parse_ranges("0-3,7").unwrap(), vec![(0, 3), (7, 7)]);
        assert_eq!(set("0-3,4,9").to_string(), "0-4,9");
        for bad in [
            "1,1",
            "3-1",
            " 1",
            "1,",
            "01",
            "a",
            "5,2",
            "1-2-3",
            "99999999999",
        ] {
            assert!(parse_ranges(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn set_operations() {
        let a = set("0-9");
        let b = set("2-3,7");
        assert_eq!(a.difference(&b).to_string(), "0-1,4-6,8-9");
        assert_eq!(a.intersection(&b).to_string(), "2-3,7");
        assert_eq!(b.union(&set("4-5")).to_string(), "2-5,7");
        assert_eq!(a.take_lowest(3).to_string(), "0-2");
        assert_eq!(set("0-4294967295").len(), 1 << 32);
        assert_eq!(
            set("0-4294967295").difference(&set("5")).to_string(),
            "0-4,6-4294967295"
        );
    }

    fn counts(v: &[(&str, u32)]) -> BTreeMap<String, u32> {
        v.iter().map(|(c, n)| (c.to_string(), *n)).collect()
    }

    fn current(v: &[(&str, &str)]) -> BTreeMap<String, IndexSet> {
        v.iter().map(|(c, s)| (c.to_string(), set(s))).collect()
    }

    fn show(m: &BTreeMap<String, IndexSet>) -> Vec<String> {
        m.iter().map(|(c, s)| format!("{c}:{s}")).collect()
    }

    #[test]
    fn fresh_split_is_contiguous_in_name_order() {
        let out = assign_shards(
            &IndexSet::below(10),
            &BTreeMap::new(),
            &counts(&[("b", 3), ("a", 4), ("c", 3)]),
        );
        assert_eq!(show(&out), ["a:0-3", "b:4-6", "c:7-9"]);
    }

    #[test]
    fn clusters_keep_their_indices_and_new_ones_get_freed_ranges() {
        // c left; its shards 7-9 go to the new cluster d; a and b keep theirs.
        let out = assign_shards(
            &IndexSet::below(10),
            &current(&[("a", "0-3"), ("b", "4-6"), ("c", "7-9")]),
            &counts(&[("a", 4), ("b", 3), ("d", 3)]),
        );
        assert_eq!(show(&out), ["a:0-3", "b:4-6", "d:7-9"]);
        // a grows by 2, b shrinks by 2: b keeps its lowest, a gets the freed ones.
        let out = assign_shards(
            &IndexSet::below(10),
            &current(&[("a", "0-3"), ("b", "4-9")]),
            &counts(&[("a", 6), ("b", 4)]),
        );
        assert_eq!(show(&out), ["a:0-3,8-9", "b:4-7"]);
    }

    #[test]
    fn completed_shards_are_never_assigned() {
        let remaining = IndexSet::below(10).difference(&set("0-2,8"));
        let out = assign_shards(
            &remaining,
            &current(&[("a", "0-4"), ("b", "5-9")]),
            &counts(&[("a", 2), ("b", 4)]),
        );
        assert_eq!(show(&out), ["a:3-4", "b:5-7,9"]);
    }

    #[test]
    fn duplicate_claims_stay_with_the_first_cluster() {
        let out = assign_shards(
            &IndexSet::below(4),
            &current(&[("a", "0-2"), ("b", "2-3")]),
            &counts(&[("a", 3), ("b", 1)]),
        );
        assert_eq!(show(&out), ["a:0-2", "b:3"]);
    }
}

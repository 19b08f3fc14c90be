//! Range lists of shard indices: `0-3,7,9-10`, `""` for none.
//!
//! Grammar (SPEC.md): comma-separated items `a` or `a-b` (inclusive, 0-based), ascending
//! and non-overlapping, no spaces, no leading zeros. Used wherever shards are listed:
//! `assignedShards`, `completedShards`, plan output. [`RangeSet`] is the parsed,
//! normalized form; its `Display` is the canonical text (adjacent ranges merged).

use std::fmt;

/// A set of shard indices kept as sorted, disjoint, non-adjacent inclusive ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct RangeSet {
    ranges: Vec<(u32, u32)>,
}

/// Why a range list was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a valid range list: {why}")]
pub struct RangeError {
    pub input: String,
    pub why: String,
}

impl RangeSet {
    /// The empty set.
    pub fn new() -> RangeSet {
        RangeSet::default()
    }

    /// `0..count` — every shard of a JobSet with `count` shards.
    pub fn full(count: u32) -> RangeSet {
        if count == 0 {
            RangeSet::new()
        } else {
            RangeSet {
                ranges: vec![(0, count - 1)],
            }
        }
    }

    /// A recorded range list (a status's, a slice's): absent or malformed is empty.
    pub fn recorded(r: Option<&str>) -> RangeSet {
        r.and_then(|r| RangeSet::parse(r).ok()).unwrap_or_default()
    }

    /// Parses the strict grammar. Does not check an upper bound; see [`RangeSet::parse_within`].
    pub fn parse(input: &str) -> Result<RangeSet, RangeError> {
        let err = |why: String| RangeError {
            input: input.to_string(),
            why,
        };
        let mut set = RangeSet::new();
        if input.is_empty() {
            return Ok(set);
        }
        let mut previous_end: Option<u32> = None;
        for (i, item) in input.split(',').enumerate() {
            let n = i + 1;
            if item.is_empty() {
                return Err(err(format!("item {n} is empty")));
            }
            let (a, b) = match item.split_once('-') {
                Some((a, b)) => (
                    parse_index(a).map_err(|why| err(format!("item {n} ({item:?}): {why}")))?,
                    parse_index(b).map_err(|why| err(format!("item {n} ({item:?}): {why}")))?,
                ),
                None => {
                    let a = parse_index(item)
                        .map_err(|why| err(format!("item {n} ({item:?}): {why}")))?;
                    (a, a)
                }
            };
            if a > b {
                return Err(err(format!(
                    "item {n} ({item:?}): start {a} is greater than end {b}"
                )));
            }
            if let Some(prev) = previous_end
                && a <= prev
            {
                return Err(err(format!(
                    "item {n} ({item:?}) is not ascending or overlaps the previous item (which ends at {prev})"
                )));
            }
            previous_end = Some(b);
            set.push(a, b);
        }
        Ok(set)
    }

    /// Parses and checks that every index is below `shards`.
    pub fn parse_within(input: &str, shards: u32) -> Result<RangeSet, RangeError> {
        let set = RangeSet::parse(input)?;
        if let Some(max) = set.max()
            && max >= shards
        {
            return Err(RangeError {
                input: input.to_string(),
                why: format!(
                    "index {max} is out of range (shards = {shards}, so indices are 0-{})",
                    shards.saturating_sub(1)
                ),
            });
        }
        Ok(set)
    }

    /// Builds a set from arbitrary indices (any order, duplicates allowed).
    pub fn from_indices(indices: impl IntoIterator<Item = u32>) -> RangeSet {
        let mut v: Vec<u32> = indices.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        let mut set = RangeSet::new();
        for i in v {
            set.push(i, i);
        }
        set
    }

    /// Appends `[a, b]`, which must not start before the last range's start.
    fn push(&mut self, a: u32, b: u32) {
        if let Some(last) = self.ranges.last_mut()
            && (a <= last.1 || a - last.1 == 1)
        {
            last.1 = last.1.max(b);
            return;
        }
        self.ranges.push((a, b));
    }

    /// The inclusive ranges, sorted and disjoint.
    pub fn ranges(&self) -> &[(u32, u32)] {
        &self.ranges
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Number of indices.
    pub fn len(&self) -> u64 {
        self.ranges
            .iter()
            .map(|(a, b)| u64::from(*b) - u64::from(*a) + 1)
            .sum()
    }

    pub fn contains(&self, index: u32) -> bool {
        // Ranges are sorted: binary search on the start.
        let pos = self.ranges.partition_point(|(a, _)| *a <= index);
        pos > 0 && self.ranges[pos - 1].1 >= index
    }

    /// Largest index, if any.
    pub fn max(&self) -> Option<u32> {
        self.ranges.last().map(|r| r.1)
    }

    /// Smallest index, if any.
    pub fn min(&self) -> Option<u32> {
        self.ranges.first().map(|r| r.0)
    }

    /// Indices in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.ranges.iter().flat_map(|(a, b)| *a..=*b)
    }

    pub fn union(&self, other: &RangeSet) -> RangeSet {
        let mut all: Vec<(u32, u32)> = self.ranges.iter().chain(&other.ranges).copied().collect();
        all.sort_unstable();
        let mut set = RangeSet::new();
        for (a, b) in all {
            set.push(a, b);
        }
        set
    }

    pub fn intersection(&self, other: &RangeSet) -> RangeSet {
        let mut set = RangeSet::new();
        let (mut i, mut j) = (0, 0);
        while i < self.ranges.len() && j < other.ranges.len() {
            let (a1, b1) = self.ranges[i];
            let (a2, b2) = other.ranges[j];
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

    /// Indices in `self` but not in `other`.
    pub fn difference(&self, other: &RangeSet) -> RangeSet {
        let mut set = RangeSet::new();
        let mut j = 0;
        for &(a, b) in &self.ranges {
            let mut start = a;
            let mut done = false;
            while j < other.ranges.len() && other.ranges[j].1 < start {
                j += 1;
            }
            let mut k = j;
            while k < other.ranges.len() && other.ranges[k].0 <= b {
                let (oa, ob) = other.ranges[k];
                if oa > start {
                    set.push(start, oa - 1);
                }
                if ob >= b {
                    done = true;
                    break;
                }
                start = ob + 1;
                k += 1;
            }
            if !done {
                set.push(start, b);
            }
        }
        set
    }

    /// The first `n` indices in ascending order.
    pub fn take_lowest(&self, n: u64) -> RangeSet {
        let mut set = RangeSet::new();
        let mut left = n;
        for &(a, b) in &self.ranges {
            if left == 0 {
                break;
            }
            let size = u64::from(b) - u64::from(a) + 1;
            if size <= left {
                set.push(a, b);
                left -= size;
            } else {
                set.push(a, a + (left as u32) - 1);
                left = 0;
            }
        }
        set
    }
}

fn parse_index(s: &str) -> Result<u32, String> {
    if s.is_empty() {
        return Err("missing number".into());
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{s:?} is not a non-negative integer (no spaces or signs allowed)"
        ));
    }
    if s.len() > 1 && s.starts_with('0') {
        return Err(format!("{s:?} has a leading zero"));
    }
    s.parse::<u32>().map_err(|_| format!("{s:?} is too large"))
}

impl fmt::Display for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (a, b)) in self.ranges.iter().enumerate() {
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

impl std::str::FromStr for RangeSet {
    type Err = RangeError;
    fn from_str(s: &str) -> Result<RangeSet, RangeError> {
        RangeSet::parse(s)
    }
}

impl FromIterator<u32> for RangeSet {
    fn from_iter<T: IntoIterator<Item = u32>>(iter: T) -> Self {
        RangeSet::from_indices(iter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> RangeSet {
        RangeSet::parse(s).unwrap()
    }

    #[test]
    fn parses_and_formats_canonically() {
        assert!(set("").is_empty());
        assert_eq!(set("0-3,7,9-10").to_string(), "0-3,7,9-10");
        assert_eq!(set("0-3,7,9-10").len(), 7);
        assert_eq!(set("5").to_string(), "5");
        assert_eq!(set("0-1,2-3").to_string(), "0-3", "adjacent items merge");
        assert_eq!(set("4-4").to_string(), "4");
        assert_eq!(
            set("0-3,7,9-10").iter().collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 7, 9, 10]
        );
    }

    #[test]
    fn rejects_bad_syntax_with_a_reason() {
        for (bad, why) in [
            ("3-1", "greater than end"),
            ("1,1", "not ascending"),
            ("0-5,3", "not ascending"),
            ("5,2", "not ascending"),
            ("1, 2", "not a non-negative integer"),
            (" 1", "not a non-negative integer"),
            ("1,", "item 2 is empty"),
            (",1", "item 1 is empty"),
            ("-1", "missing number"),
            ("1-", "missing number"),
            ("1-2-3", "not a non-negative integer"),
            ("a", "not a non-negative integer"),
            ("01", "leading zero"),
            ("99999999999", "too large"),
        ] {
            let e = RangeSet::parse(bad).expect_err(bad);
            assert!(e.to_string().contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn bound_check() {
        assert!(RangeSet::parse_within("0-9", 10).is_ok());
        let e = RangeSet::parse_within("0-10", 10).unwrap_err();
        assert!(e.to_string().contains("index 10 is out of range"), "{e}");
        assert!(RangeSet::parse_within("", 0).is_ok());
    }

    #[test]
    fn set_operations() {
        let a = set("0-9");
        let b = set("2-3,7,20");
        assert_eq!(a.union(&b).to_string(), "0-9,20");
        assert_eq!(a.intersection(&b).to_string(), "2-3,7");
        assert_eq!(a.difference(&b).to_string(), "0-1,4-6,8-9");
        assert_eq!(b.difference(&a).to_string(), "20");
        assert_eq!(a.difference(&a).to_string(), "");
        assert_eq!(a.difference(&RangeSet::new()), a);
        assert_eq!(
            set("0-3,5-9").difference(&set("2-6")).to_string(),
            "0-1,7-9"
        );
        assert_eq!(a.take_lowest(3).to_string(), "0-2");
        assert_eq!(set("1,4-8").take_lowest(3).to_string(), "1,4-5");
        assert_eq!(set("1").take_lowest(0).to_string(), "");
        assert!(b.contains(7) && b.contains(20) && !b.contains(6) && !b.contains(21));
        assert_eq!(RangeSet::full(4).to_string(), "0-3");
        assert_eq!(RangeSet::from_indices([5, 1, 2, 2, 3]).to_string(), "1-3,5");
        assert_eq!(set("0-4294967295").len(), 4_294_967_296);
    }

    #[test]
    fn operations_agree_with_a_naive_model() {
        // Exhaustive over small sets: every subset of 0..8 as a bitmask.
        let to_set = |m: u32| RangeSet::from_indices((0..8).filter(|i| m & (1 << i) != 0));
        for x in 0u32..256 {
            let sx = to_set(x);
            assert_eq!(RangeSet::parse(&sx.to_string()).unwrap(), sx);
            for y in (0u32..256).step_by(7) {
                let sy = to_set(y);
                assert_eq!(sx.union(&sy), to_set(x | y));
                assert_eq!(sx.intersection(&sy), to_set(x & y));
                assert_eq!(sx.difference(&sy), to_set(x & !y));
            }
        }
    }
}

//! Shards are seats with identity. Given each cluster's new shard count, choose *which*
//! global indices it runs: a cluster keeps the unfinished indices it already has (up to its
//! new count), clusters that need more take the lowest free indices — so a fresh split is
//! contiguous ranges in cluster-name order — and completed shards are never handed out.
//! Index sets are [`RangeSet`]s, so a huge shard count is never expanded index by index.

use std::collections::BTreeMap;

use crate::api::ranges::RangeSet;

/// Chooses the indices of every cluster.
///
/// `remaining` is the set of unfinished shards; `current` the indices each cluster had
/// (anything outside `remaining` is dropped, an index listed by two clusters stays with the
/// first by name); `counts` each cluster's new share, whose sum must not exceed
/// `remaining.len()` (a larger sum is cut short, never invented).
pub(crate) fn assign_shards(
    remaining: &RangeSet,
    current: &BTreeMap<String, RangeSet>,
    counts: &BTreeMap<String, u32>,
) -> BTreeMap<String, RangeSet> {
    let mut out: BTreeMap<String, RangeSet> = BTreeMap::new();
    let mut taken = RangeSet::new();
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
        let have = out.get(cluster).map_or(0, RangeSet::len);
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

    fn set(s: &str) -> RangeSet {
        RangeSet::parse(s).unwrap()
    }

    fn counts(v: &[(&str, u32)]) -> BTreeMap<String, u32> {
        v.iter().map(|(c, n)| (c.to_string(), *n)).collect()
    }

    fn current(v: &[(&str, &str)]) -> BTreeMap<String, RangeSet> {
        v.iter().map(|(c, s)| (c.to_string(), set(s))).collect()
    }

    fn show(m: &BTreeMap<String, RangeSet>) -> Vec<String> {
        m.iter().map(|(c, s)| format!("{c}:{s}")).collect()
    }

    #[test]
    fn fresh_split_is_contiguous_in_name_order() {
        let out = assign_shards(
            &RangeSet::full(10),
            &BTreeMap::new(),
            &counts(&[("b", 3), ("a", 4), ("c", 3)]),
        );
        assert_eq!(show(&out), ["a:0-3", "b:4-6", "c:7-9"]);
    }

    #[test]
    fn clusters_keep_their_indices_and_new_ones_get_freed_ranges() {
        // c left; its shards 7-9 go to the new cluster d; a and b keep theirs.
        let out = assign_shards(
            &RangeSet::full(10),
            &current(&[("a", "0-3"), ("b", "4-6"), ("c", "7-9")]),
            &counts(&[("a", 4), ("b", 3), ("d", 3)]),
        );
        assert_eq!(show(&out), ["a:0-3", "b:4-6", "d:7-9"]);
        // a grows by 2, b shrinks by 2: b keeps its lowest, a gets the freed ones.
        let out = assign_shards(
            &RangeSet::full(10),
            &current(&[("a", "0-3"), ("b", "4-9")]),
            &counts(&[("a", 6), ("b", 4)]),
        );
        assert_eq!(show(&out), ["a:0-3,8-9", "b:4-7"]);
    }

    #[test]
    fn completed_shards_are_never_assigned() {
        let remaining = RangeSet::full(10).difference(&set("0-2,8"));
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
            &RangeSet::full(4),
            &current(&[("a", "0-2"), ("b", "2-3")]),
            &counts(&[("a", 3), ("b", 1)]),
        );
        assert_eq!(show(&out), ["a:0-2", "b:3"]);
    }
}

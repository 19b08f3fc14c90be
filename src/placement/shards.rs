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

/// Each cluster's part of a job set's parallelism `p`, given how many unfinished shards it
/// holds (`held`, in cluster order): every cluster with shards gets one (it must make
/// progress), the rest of `p` goes in proportion to the shards beyond that one (largest
/// remainders, ties to the earlier cluster), and no cluster gets more than it holds. The sum
/// is exactly `min(p, Σ held)` whenever `p` covers one per cluster with shards (placement
/// never makes more clusters than that); otherwise each still gets one.
///
/// The slice of each cluster runs at most its part at once, and quota charges that part:
/// the hub, the JSS and the agent all read it from here.
pub fn parallelism_shares(p: u32, held: &[u64]) -> Vec<u64> {
    let p = u64::from(p);
    let total: u64 = held.iter().sum();
    if p >= total {
        return held.to_vec();
    }
    let with_shards = held.iter().filter(|&&n| n > 0).count() as u64;
    let mut shares: Vec<u64> = held.iter().map(|&n| u64::from(n > 0)).collect();
    if p <= with_shards {
        return shares;
    }
    // p < total, so the rest is below Σ(held - 1) and every share stays within its shards.
    let rest = p - with_shards;
    let beyond: Vec<u64> = held.iter().map(|&n| n.saturating_sub(1)).collect();
    let pool = u128::from(total - with_shards);
    let mut remainders = Vec::with_capacity(held.len());
    let mut given = 0u64;
    for (i, &b) in beyond.iter().enumerate() {
        let q = u128::from(rest) * u128::from(b);
        let floor = u64::try_from(q / pool).unwrap_or(u64::MAX);
        shares[i] += floor;
        given += floor;
        remainders.push((q % pool, i));
    }
    // Largest remainder first, then the earlier cluster.
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in remainders
        .iter()
        .take(usize::try_from(rest - given).unwrap_or(0))
    {
        shares[i] += 1;
    }
    shares
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

    #[test]
    fn parallelism_is_shared_in_proportion_one_each_and_sums_to_it() {
        assert_eq!(parallelism_shares(10, &[60, 30, 1]), [6, 3, 1]);
        assert_eq!(parallelism_shares(10, &[5, 5]), [5, 5]);
        assert_eq!(
            parallelism_shares(100, &[2, 0]),
            [2, 0],
            "never more than held"
        );
        assert_eq!(
            parallelism_shares(2, &[100, 100, 100]),
            [1, 1, 1],
            "one each"
        );
        assert_eq!(parallelism_shares(3, &[0, 7, 0, 2]), [0, 2, 0, 1]);
        assert_eq!(parallelism_shares(5, &[]), Vec::<u64>::new());
        for p in 1..40u32 {
            for held in [[9u64, 4, 1], [13, 13, 13], [1, 1, 30], [0, 50, 3]] {
                let s = parallelism_shares(p, &held);
                let total: u64 = held.iter().sum();
                let k = held.iter().filter(|&&n| n > 0).count() as u64;
                assert_eq!(
                    s.iter().sum::<u64>(),
                    u64::from(p).min(total).max(k),
                    "{p} {held:?}"
                );
                for (sh, n) in s.iter().zip(&held) {
                    assert!(sh <= n && (*n == 0 || *sh >= 1), "{p} {held:?} {s:?}");
                }
            }
        }
    }
}

//! Apportionment: how many seats (replicas or shards) each eligible cluster gets.
//!
//! Webster / Sainte-Laguë, one seat at a time: the next seat goes to the cluster with the
//! highest `base / (share + 0.5)` (`base` = weight × room) among those below their cap,
//! ties to the cluster name that sorts first. Divisor methods are house-monotone — raising
//! the total never lowers a cluster's share — which largest-remainder rounding is not.
//! All comparisons are exact integer cross-multiplications, so the result is deterministic.
//!
//! Order of work:
//! 1. start from the current shares (none for a fresh plan), clipped to each cluster's cap;
//!    a share below the cluster's min is raised to it;
//! 2. spread: give one seat (or the min) to the best cluster of each missing zone, then to
//!    the best unused clusters, until `min_zones` / `min_clusters` are met;
//! 3. floors: every other cluster gets its min while the total allows, best first;
//! 4. add seats by priority until the total is reached, or remove seats from the clusters
//!    whose last seat has the lowest priority (never below a min, never breaking spread)
//!    until it is no longer exceeded.
//!
//! With unchanged inputs the current shares are a fixed point, so a re-plan moves nothing.

use std::cmp::Ordering;
use std::collections::{BTreeSet, BinaryHeap};

use super::model::Spread;

/// One eligible cluster as apportionment sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seat<'a> {
    /// Borrowed from the cluster view: no copy per cluster per decision.
    pub name: &'a str,
    pub zone: Option<&'a str>,
    /// Webster numerator: weight × room.
    pub base: u128,
    /// Most seats it may take: min(room, max, quota cap).
    pub cap: u32,
    /// Per-cluster min (0 = none).
    pub floor: u32,
    /// Share in the current decision (0 for a fresh plan).
    pub current: u32,
}

/// The shares, in the order of the seats given, and any part of the spread that could not
/// be met.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Apportionment {
    pub shares: Vec<u32>,
    pub spread_shortfall: Option<String>,
}

/// Heap entry: the priority of a cluster's next seat.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Next {
    base: u128,
    share: u32,
    /// Position of the cluster in name order (lower wins ties).
    name_rank: usize,
    index: usize,
}

impl Ord for Next {
    fn cmp(&self, o: &Next) -> Ordering {
        // base/(s+0.5) vs o.base/(o.s+0.5)  ⇔  base·(2·o.s+1) vs o.base·(2·s+1).
        let lhs = self.base * (2 * u128::from(o.share) + 1);
        let rhs = o.base * (2 * u128::from(self.share) + 1);
        lhs.cmp(&rhs).then(o.name_rank.cmp(&self.name_rank))
    }
}

impl PartialOrd for Next {
    fn partial_cmp(&self, o: &Next) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

struct State<'a> {
    seats: &'a [Seat<'a>],
    floors: Vec<u32>,
    name_rank: Vec<usize>,
    shares: Vec<u32>,
    sum: u64,
    /// Clusters dropped while removing seats; they take no seats again in this run.
    blocked: Vec<bool>,
    want_clusters: usize,
    want_zones: usize,
}

impl State<'_> {
    /// Seats a cluster takes when it starts from zero.
    fn opening(&self, i: usize) -> u32 {
        self.floors[i].max(1)
    }

    /// Adds seats by priority until `total` is reached or nobody can take one.
    fn fill(&mut self, total: u64) {
        let mut heap: BinaryHeap<Next> = (0..self.seats.len())
            .filter(|&i| !self.blocked[i] && self.shares[i] < self.seats[i].cap)
            .map(|i| self.next(i))
            .collect();
        while self.sum < total {
            let Some(top) = heap.pop() else { break };
            let i = top.index;
            let add = if self.shares[i] == 0 {
                self.opening(i)
            } else {
                1
            };
            // A cluster that must open with its min does not fit in what is left; the rest
            // only shrinks, so it never will in this run.
            if self.sum + u64::from(add) > total || self.shares[i] + add > self.seats[i].cap {
                continue;
            }
            self.shares[i] += add;
            self.sum += u64::from(add);
            if self.shares[i] < self.seats[i].cap {
                heap.push(self.next(i));
            }
        }
    }

    fn next(&self, i: usize) -> Next {
        Next {
            base: self.seats[i].base,
            share: self.shares[i],
            name_rank: self.name_rank[i],
            index: i,
        }
    }

    /// Whether taking cluster `i` down to zero would break the spread.
    fn needed_for_spread(&self, i: usize) -> bool {
        let used = self.shares.iter().filter(|&&s| s > 0).count();
        if used <= self.want_clusters {
            return true;
        }
        let Some(zone) = &self.seats[i].zone else {
            return false;
        };
        let zones: BTreeSet<&str> = (0..self.seats.len())
            .filter(|&j| self.shares[j] > 0)
            .filter_map(|j| self.seats[j].zone)
            .collect();
        let same_zone = (0..self.seats.len())
            .filter(|&j| self.shares[j] > 0 && self.seats[j].zone.as_ref() == Some(zone))
            .count();
        same_zone == 1 && zones.len() <= self.want_zones
    }

    /// Removes seats until the sum is at most `total`.
    fn trim(&mut self, total: u64) {
        while self.sum > total {
            // The seat that was (or would have been) given last: lowest base/(s-0.5).
            let mut victim: Option<usize> = None;
            for i in 0..self.seats.len() {
                let s = self.shares[i];
                if s == 0 || s <= self.floors[i] || (s == 1 && self.needed_for_spread(i)) {
                    continue;
                }
                victim = match victim {
                    None => Some(i),
                    Some(j) => {
                        let (si, sj) = (u128::from(s), u128::from(self.shares[j]));
                        let lhs = self.seats[i].base * (2 * sj - 1);
                        let rhs = self.seats[j].base * (2 * si - 1);
                        let lower = lhs
                            .cmp(&rhs)
                            .then(self.name_rank[j].cmp(&self.name_rank[i]));
                        if lower == Ordering::Less {
                            Some(i)
                        } else {
                            Some(j)
                        }
                    }
                };
            }
            if let Some(i) = victim {
                self.shares[i] -= 1;
                self.sum -= 1;
                continue;
            }
            // Every cluster sits at its min: drop a whole cluster, the weakest one that
            // the spread can spare, or the weakest of all if it cannot spare any.
            let weakest = |state: &State, spare_only: bool| {
                (0..state.seats.len())
                    .filter(|&i| state.shares[i] > 0)
                    .filter(|&i| !spare_only || !state.needed_for_spread(i))
                    .min_by(|&a, &b| {
                        state.seats[a]
                            .base
                            .cmp(&state.seats[b].base)
                            .then(state.name_rank[b].cmp(&state.name_rank[a]))
                    })
            };
            let Some(i) = weakest(self, true).or_else(|| weakest(self, false)) else {
                break;
            };
            self.sum -= u64::from(self.shares[i]);
            self.shares[i] = 0;
            self.blocked[i] = true;
            self.fill(total);
        }
    }
}

impl State<'_> {
    /// Spread: the best cluster of each missing zone, then the best unused clusters. A
    /// cluster is opened only while every used cluster can still keep its opening seats
    /// within the total; otherwise trimming would have to close one again, and a re-plan
    /// of the result would not be a fixed point. Returns the zones and clusters in use.
    fn open_for_spread(&mut self, rank: &[usize], total: u64) -> (usize, usize) {
        let n = self.seats.len();
        let seats = self.seats;
        let mut committed: u64 = (0..n)
            .filter(|&i| self.shares[i] > 0)
            .map(|i| u64::from(self.opening(i)))
            .sum();
        let mut zones_used: BTreeSet<&str> = (0..n)
            .filter(|&i| self.shares[i] > 0)
            .filter_map(|i| seats[i].zone)
            .collect();
        for &i in rank {
            if zones_used.len() >= self.want_zones {
                break;
            }
            let open = u64::from(self.opening(i));
            if let Some(z) = seats[i].zone
                && !zones_used.contains(z)
                && committed + open <= total
            {
                self.shares[i] = self.opening(i);
                self.sum += open;
                committed += open;
                zones_used.insert(z);
            }
        }
        let mut used = self.shares.iter().filter(|&&s| s > 0).count();
        for &i in rank {
            if used >= self.want_clusters {
                break;
            }
            let open = u64::from(self.opening(i));
            if self.shares[i] == 0 && committed + open <= total {
                self.shares[i] = self.opening(i);
                self.sum += open;
                committed += open;
                used += 1;
            }
        }
        (zones_used.len(), used)
    }
}

/// What the spread asks that the eligible clusters or the total cannot give.
fn spread_shortfall(spread: Spread, eligible: usize, zones: usize, total: u64) -> Vec<String> {
    let mut shortfall = Vec::new();
    if spread.min_zones as usize > zones {
        shortfall.push(format!(
            "spread wants {} zones but eligible clusters cover {zones}",
            spread.min_zones
        ));
    }
    if spread.min_clusters as usize > eligible {
        shortfall.push(format!(
            "spread wants {} clusters but {eligible} are eligible",
            spread.min_clusters
        ));
    }
    let total_usize = usize::try_from(total).unwrap_or(usize::MAX);
    if (spread.min_clusters.max(spread.min_zones) as usize) > total_usize && total > 0 {
        shortfall.push(format!(
            "only {total} to place, so spread is limited to {total}"
        ));
    }
    shortfall
}

/// Divides `total` seats over `seats`. The sum of shares is `min(total, Σ caps)` unless
/// per-cluster mins make that impossible (then it is the largest sum found below it).
pub(crate) fn apportion(seats: &[Seat<'_>], total: u64, spread: Spread) -> Apportionment {
    let n = seats.len();
    let cap_sum: u64 = seats.iter().map(|s| u64::from(s.cap)).sum();
    let total = total.min(cap_sum);
    let total_u32 = u32::try_from(total).unwrap_or(u32::MAX);
    let floors: Vec<u32> = seats
        .iter()
        .map(|s| s.floor.min(s.cap).min(total_u32))
        .collect();
    let mut by_name: Vec<usize> = (0..n).collect();
    by_name.sort_by(|&a, &b| seats[a].name.cmp(seats[b].name));
    let mut name_rank = vec![0; n];
    for (r, &i) in by_name.iter().enumerate() {
        name_rank[i] = r;
    }
    // Best first: highest base, then name.
    let mut rank: Vec<usize> = (0..n).filter(|&i| seats[i].cap > 0).collect();
    rank.sort_by(|&a, &b| {
        seats[b]
            .base
            .cmp(&seats[a].base)
            .then(name_rank[a].cmp(&name_rank[b]))
    });
    let usable_zones: BTreeSet<&str> = rank.iter().filter_map(|&i| seats[i].zone).collect();
    let total_usize = usize::try_from(total).unwrap_or(usize::MAX);
    let want_clusters = (spread.min_clusters as usize)
        .min(rank.len())
        .min(total_usize);
    let want_zones = (spread.min_zones as usize)
        .min(usable_zones.len())
        .min(total_usize);

    let mut shortfall = spread_shortfall(spread, rank.len(), usable_zones.len(), total);
    let shares: Vec<u32> = (0..n)
        .map(|i| {
            let c = seats[i].current.min(seats[i].cap);
            if c > 0 && c < floors[i] { floors[i] } else { c }
        })
        .collect();
    let mut st = State {
        seats,
        floors,
        name_rank,
        sum: shares.iter().map(|&s| u64::from(s)).sum(),
        shares,
        blocked: vec![false; n],
        want_clusters,
        want_zones,
    };

    let (zones_used, used) = st.open_for_spread(&rank, total);
    if zones_used < want_zones || used < want_clusters {
        shortfall.push(format!(
            "per-cluster mins leave room for {used} clusters in {zones_used} zones"
        ));
    }
    // Floors: every cluster gets its min while the total allows, best first.
    for &i in &rank {
        let f = st.floors[i];
        if st.shares[i] == 0 && f > 0 && st.sum + u64::from(f) <= total {
            st.shares[i] = f;
            st.sum += u64::from(f);
        }
    }
    if st.sum < total {
        st.fill(total);
    } else {
        st.trim(total);
    }
    Apportionment {
        shares: st.shares,
        spread_shortfall: if shortfall.is_empty() {
            None
        } else {
            Some(shortfall.join("; "))
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seat<'a>(name: &'a str, zone: &'a str, weight: u128, room: u32) -> Seat<'a> {
        Seat {
            name,
            zone: Some(zone),
            base: weight * u128::from(room),
            cap: room,
            floor: 0,
            current: 0,
        }
    }

    fn run(seats: &[Seat], total: u64) -> Vec<u32> {
        apportion(seats, total, Spread::default()).shares
    }

    #[test]
    fn splits_in_proportion_to_weight_times_room() {
        let s = [
            seat("a", "z1", 1, 100),
            seat("b", "z2", 1, 100),
            seat("c", "z3", 1, 100),
        ];
        assert_eq!(run(&s, 30), [10, 10, 10]);
        let s = [
            seat("a", "z1", 1, 200),
            seat("b", "z2", 1, 100),
            seat("c", "z3", 1, 100),
        ];
        assert_eq!(run(&s, 40), [20, 10, 10]);
        let s = [seat("a", "z1", 3, 100), seat("b", "z2", 1, 100)];
        assert_eq!(run(&s, 8), [6, 2]);
    }

    #[test]
    fn remainders_and_ties_go_by_name() {
        let s = [
            seat("c", "z3", 1, 100),
            seat("a", "z1", 1, 100),
            seat("b", "z2", 1, 100),
        ];
        assert_eq!(run(&s, 31), [10, 11, 10]);
        assert_eq!(run(&s, 32), [10, 11, 11]);
    }

    #[test]
    fn webster_gives_low_weight_clusters_a_share_where_dhondt_would_not() {
        // Priorities 10/0.5 = 20 for the small one beat 100/9.5 ≈ 10.5 after 9 seats.
        let s = [seat("big", "z1", 1, 100), seat("small", "z2", 1, 10)];
        assert_eq!(run(&s, 10), [9, 1]);
    }

    #[test]
    fn caps_are_never_exceeded_and_excess_goes_elsewhere() {
        // Room alone is proportional: 3 of 103 gets about half a seat of 20.
        let mut s = [seat("a", "z1", 1, 3), seat("b", "z2", 1, 100)];
        assert_eq!(run(&s, 20), [1, 19]);
        // A max caps a cluster that room alone would give 10.
        s[0] = seat("a", "z1", 1, 100);
        s[0].cap = 3;
        assert_eq!(run(&s, 20), [3, 17]);
        assert_eq!(
            run(&s, 500),
            [3, 100],
            "total above every cap is cut to the caps"
        );
    }

    #[test]
    fn mins_are_granted_best_first_and_never_undercut() {
        let mut s = [
            seat("a", "z1", 10, 100),
            seat("b", "z2", 1, 100),
            seat("c", "z3", 1, 100),
        ];
        for x in &mut s {
            x.floor = 3;
        }
        // Plain Webster would give b and c 1 each of 12; the min lifts them to 3.
        assert_eq!(run(&s, 12), [6, 3, 3]);
        // 5 does not allow three mins of 3: a takes its min, the rest goes to a too.
        assert_eq!(run(&s, 5), [5, 0, 0]);
        // A min above the total is clipped to the total.
        assert_eq!(run(&s, 2), [2, 0, 0]);
    }

    #[test]
    fn spread_guarantees_zones_then_clusters() {
        let mut s = [
            seat("a", "z1", 1, 1000),
            seat("b", "z1", 1, 900),
            seat("c", "z2", 1, 10),
        ];
        assert_eq!(run(&s, 4), [2, 2, 0]);
        let zones = Spread {
            min_clusters: 0,
            min_zones: 2,
        };
        assert_eq!(apportion(&s, 4, zones).shares, [2, 1, 1]);
        let clusters = Spread {
            min_clusters: 3,
            min_zones: 0,
        };
        assert_eq!(apportion(&s, 3, clusters).shares, [1, 1, 1]);
        s[2].cap = 0;
        let a = apportion(&s, 4, zones);
        assert_eq!(a.shares, [2, 2, 0]);
        assert!(a.spread_shortfall.unwrap().contains("cover 1"));
    }

    #[test]
    fn current_shares_are_a_fixed_point() {
        let mut s = [
            seat("a", "z1", 1, 100),
            seat("b", "z2", 1, 50),
            seat("c", "z3", 2, 10),
        ];
        // A current split that Webster would not produce by itself is kept as is.
        for (x, c) in s.iter_mut().zip([5, 20, 5]) {
            x.current = c;
        }
        assert_eq!(run(&s, 30), [5, 20, 5]);
        // Scaling up adds by priority on top of it; scaling down removes the weakest seats.
        assert_eq!(run(&s, 34), [9, 20, 5]);
        assert_eq!(run(&s, 26), [5, 16, 5]);
    }

    #[test]
    fn trimming_respects_mins_and_spread() {
        let mut s = [seat("a", "z1", 1, 100), seat("b", "z2", 1, 100)];
        s[0].current = 10;
        s[1].current = 2;
        s[1].floor = 2;
        assert_eq!(run(&s, 6), [4, 2]);
        let two = Spread {
            min_clusters: 2,
            min_zones: 0,
        };
        s[1].floor = 0;
        assert_eq!(apportion(&s, 2, two).shares, [1, 1]);
        // Without spread the weak cluster's single seat goes before the strong one's.
        s[1].current = 1;
        s[0].current = 1;
        s[0].base = 1000;
        assert_eq!(run(&s, 1), [1, 0]);
    }

    #[test]
    fn cluster_at_its_min_is_dropped_whole_when_the_total_shrinks() {
        let mut s = [seat("a", "z1", 2, 100), seat("b", "z2", 1, 100)];
        for (x, c) in s.iter_mut().zip([4, 4]) {
            x.current = c;
            x.floor = 4;
        }
        assert_eq!(run(&s, 6), [6, 0]);
    }
}

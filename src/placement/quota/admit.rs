//! How much of a workload a quota admits. Quota is a hard limit: placement never exceeds
//! it, and what does not fit stays unplaced with `QuotaExceeded`.

use super::super::model::{Limits, QuotaUse, Resources};
use crate::api::quantity::Milli;

/// What a quota admits of one size of pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Admits {
    /// How many pods fit (`u64::MAX` = unlimited).
    pub pods: u64,
    /// The dimension that limits it, described with numbers.
    pub limited_by: Option<String>,
}

impl QuotaUse {
    /// How many more pods of size `per` this quota admits.
    pub(crate) fn admits(&self, per: &Resources) -> Admits {
        let per = per.as_pod_request();
        let mut best = Admits {
            pods: u64::MAX,
            limited_by: None,
        };
        for d in dims(&self.hard, &self.used, &per) {
            let n = if d.need <= 0 {
                u64::MAX
            } else if d.left <= 0 {
                0
            } else {
                u64::try_from(d.left / d.need).unwrap_or(u64::MAX)
            };
            if n < best.pods {
                best = Admits {
                    pods: n,
                    limited_by: Some(format!(
                        "{} {} of {} left, {} per pod",
                        d.name,
                        (d.show)(d.left.max(0)),
                        (d.show)(d.hard),
                        (d.show)(d.need)
                    )),
                };
            }
        }
        best
    }

    /// `Err` with numbers when `total` does not fit in what is left.
    pub(crate) fn admits_total(&self, total: &Resources) -> Result<(), String> {
        for d in dims(&self.hard, &self.used, total) {
            if d.need > d.left {
                return Err(format!(
                    "needs {} {}, {} of {} left",
                    d.name,
                    (d.show)(d.need),
                    (d.show)(d.left.max(0)),
                    (d.show)(d.hard)
                ));
            }
        }
        Ok(())
    }
}

struct Dim {
    name: &'static str,
    hard: i128,
    left: i128,
    need: i128,
    show: fn(i128) -> String,
}

/// The limited dimensions: hard, what is left of it and what `need` asks.
fn dims(hard: &Limits, used: &Resources, need: &Resources) -> Vec<Dim> {
    fn plain(v: i128) -> String {
        v.to_string()
    }
    fn cpu(v: i128) -> String {
        Milli(v).format_cpu()
    }
    fn memory(v: i128) -> String {
        Milli(v).format_memory()
    }
    // Hard (if limited), used and needed, in one unit.
    type Amounts = (Option<i128>, i128, i128);
    let milli = |h: Option<Milli>, u: Milli, n: Milli| -> Amounts { (h.map(|m| m.0), u.0, n.0) };
    let count =
        |h: Option<i64>, u: i64, n: i64| -> Amounts { (h.map(i128::from), u.into(), n.into()) };
    type Show = fn(i128) -> String;
    let table: [(&str, Amounts, Show); 4] = [
        ("cpu", milli(hard.cpu, used.cpu, need.cpu), cpu),
        (
            "memory",
            milli(hard.memory, used.memory, need.memory),
            memory,
        ),
        ("gpu", count(hard.gpu, used.gpu, need.gpu), plain),
        ("pods", count(hard.pods, used.pods, need.pods), plain),
    ];
    table
        .into_iter()
        .filter_map(|(name, (hard, used, need), show)| {
            hard.map(|h| Dim {
                name,
                hard: h,
                left: h.saturating_sub(used),
                need,
                show,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::quantity::Milli;

    fn q(cpu: &str, pods: i64, used_cpu: &str) -> QuotaUse {
        QuotaUse {
            hard: Limits {
                cpu: Some(Milli::parse(cpu).unwrap()),
                pods: Some(pods),
                ..Limits::default()
            },
            used: Resources {
                cpu: Milli::parse(used_cpu).unwrap(),
                ..Resources::ZERO
            },
        }
    }

    #[test]
    fn admits_the_tightest_dimension() {
        let per = Resources::pod(Milli(2000), Milli(0), 0);
        let a = q("100", 1000, "60").admits(&per);
        assert_eq!(a.pods, 20);
        assert_eq!(a.limited_by.unwrap(), "cpu 40 of 100 left, 2 per pod");
        let a = q("100", 5, "0").admits(&per);
        assert_eq!(a.pods, 5);
        assert!(a.limited_by.unwrap().starts_with("pods 5 of 5"));
        assert_eq!(
            q("1", 5, "3").admits(&per).pods,
            0,
            "overused quota admits nothing"
        );
        assert_eq!(QuotaUse::default().admits(&per).pods, u64::MAX);
    }

    #[test]
    fn totals_fit_or_say_why() {
        let total = Resources {
            cpu: Milli(50_000),
            pods: 9,
            ..Resources::ZERO
        };
        assert!(q("100", 10, "50").admits_total(&total).is_ok());
        assert_eq!(
            q("100", 10, "60").admits_total(&total).unwrap_err(),
            "needs cpu 50, 40 of 100 left"
        );
    }
}

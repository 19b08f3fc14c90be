//! A fleet-wide budget for moves nobody asked for one by one: a member tainted
//! `NoExecute` under hundreds of workloads must not surge them all onto the other members
//! in the same second. A token bucket: `burst` moves at once, then `per_second`. Pure: the
//! caller passes the time.

/// The budget's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoveRate {
    /// Moves admitted per second once the burst is spent (> 0).
    pub per_second: f64,
    /// Moves admitted at once after a quiet time (≥ 1).
    pub burst: u32,
}

/// The bucket.
#[derive(Clone, Debug)]
pub struct MoveBudget {
    rate: MoveRate,
    tokens: f64,
    /// When `tokens` was last brought up to date (seconds, any epoch).
    at: f64,
}

impl MoveBudget {
    /// A full bucket at `now`.
    pub fn new(rate: MoveRate, now: f64) -> MoveBudget {
        MoveBudget {
            rate,
            tokens: f64::from(rate.burst.max(1)),
            at: now,
        }
    }

    /// Takes one move at `now`, or says how many seconds until one is free.
    pub fn take(&mut self, now: f64) -> Result<(), f64> {
        let burst = f64::from(self.rate.burst.max(1));
        // (A clock that went back refills nothing.)
        let elapsed = (now - self.at).max(0.0);
        self.tokens = (self.tokens + elapsed * self.rate.per_second).min(burst);
        self.at = now.max(self.at);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err((1.0 - self.tokens) / self.rate.per_second.max(f64::MIN_POSITIVE))
        }
    }

    /// Returns a move taken for one that did not happen (nowhere to go): a workload kept
    /// where it is must not spend the fleet's budget at every look.
    pub fn give_back(&mut self) {
        let burst = f64::from(self.rate.burst.max(1));
        self.tokens = (self.tokens + 1.0).min(burst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_given_back_is_free_again_and_never_past_the_burst() {
        let rate = MoveRate {
            per_second: 0.1,
            burst: 2,
        };
        let mut b = MoveBudget::new(rate, 0.0);
        assert_eq!(b.take(0.0), Ok(()));
        assert_eq!(b.take(0.0), Ok(()));
        assert!(b.take(0.0).is_err());
        // A blocked move returns its token: the next workload moves at once.
        b.give_back();
        assert_eq!(b.take(0.0), Ok(()));
        assert!(b.take(0.0).is_err());
        // Giving back to a full bucket adds nothing.
        let mut full = MoveBudget::new(rate, 0.0);
        full.give_back();
        assert_eq!(full.take(0.0), Ok(()));
        assert_eq!(full.take(0.0), Ok(()));
        assert!(full.take(0.0).is_err());
    }

    #[test]
    fn a_burst_passes_at_once_then_moves_come_at_the_rate() {
        let mut b = MoveBudget::new(
            MoveRate {
                per_second: 0.5,
                burst: 3,
            },
            100.0,
        );
        for _ in 0..3 {
            assert_eq!(b.take(100.0), Ok(()));
        }
        let wait = b.take(100.0).unwrap_err();
        assert!((wait - 2.0).abs() < 1e-9, "{wait}");
        // Half a token back after a second: still a second to go.
        let wait = b.take(101.0).unwrap_err();
        assert!((wait - 1.0).abs() < 1e-9, "{wait}");
        assert_eq!(b.take(102.0), Ok(()));
        assert!(b.take(102.0).is_err());
        // A long quiet time refills no more than the burst.
        for _ in 0..3 {
            assert_eq!(b.take(10_000.0), Ok(()));
        }
        assert!(b.take(10_000.0).is_err());
    }

    #[test]
    fn a_clock_that_goes_back_refills_nothing() {
        let mut b = MoveBudget::new(
            MoveRate {
                per_second: 1.0,
                burst: 1,
            },
            50.0,
        );
        assert_eq!(b.take(50.0), Ok(()));
        assert!(b.take(40.0).is_err());
        assert!(b.take(50.5).is_err());
        assert_eq!(b.take(51.0), Ok(()));
    }
}

//! What keeps one client from taking the JSS down: a cap on connections (in all and per
//! client address) and a rate limit on failed authentications per client address, so
//! guessing tokens or flooding TokenReview costs the guesser, not the hub.
//!
//! Pure: [`FailedAuths`] (token buckets) and [`ConnectionCounts`]. The shell (accepting,
//! the middleware) is in [`super::server`].

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Connections served at once by default; more wait in the listen backlog.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Connections one client address may hold at once by default; more are closed at once.
/// An open UI page holds one (its live updates) plus short requests.
pub const DEFAULT_MAX_CONNECTIONS_PER_IP: usize = 64;
/// Failed authentications a client address may make in a burst by default…
pub const DEFAULT_FAILED_AUTH_BURST: u32 = 20;
/// …and per second after it.
pub const DEFAULT_FAILED_AUTH_PER_SEC: f64 = 1.0;
/// Client addresses remembered at most; beyond it the ones back at a full bucket go
/// (a flood from many addresses must not grow memory).
const MAX_TRACKED: usize = 10_000;

/// The peer of a request's connection (a request extension the server sets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr(pub SocketAddr);

/// Failed authentications per client address, as token buckets: each failure takes a
/// token; an address without one is refused until it refills.
#[derive(Debug)]
pub struct FailedAuths {
    burst: f64,
    per_sec: f64,
    buckets: HashMap<IpAddr, Bucket>,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl FailedAuths {
    pub fn new(burst: u32, per_sec: f64) -> FailedAuths {
        FailedAuths {
            burst: f64::from(burst.max(1)),
            per_sec: if per_sec.is_finite() && per_sec > 0.0 {
                per_sec
            } else {
                DEFAULT_FAILED_AUTH_PER_SEC
            },
            buckets: HashMap::new(),
        }
    }

    fn level(&self, b: &Bucket, now: Instant) -> f64 {
        let refill = now.saturating_duration_since(b.at).as_secs_f64() * self.per_sec;
        (b.tokens + refill).min(self.burst)
    }

    /// `Err(retry_after)` when `ip` has used up its failures.
    pub fn check(&self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        let Some(b) = self.buckets.get(&ip) else {
            return Ok(());
        };
        let level = self.level(b, now);
        if level >= 1.0 {
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - level) / self.per_sec))
        }
    }

    /// Records one failed authentication from `ip`.
    pub fn charge(&mut self, ip: IpAddr, now: Instant) {
        if self.buckets.len() >= MAX_TRACKED && !self.buckets.contains_key(&ip) {
            let full: Vec<IpAddr> = self
                .buckets
                .iter()
                .filter(|(_, b)| self.level(b, now) >= self.burst)
                .map(|(ip, _)| *ip)
                .collect();
            for ip in full {
                self.buckets.remove(&ip);
            }
            if self.buckets.len() >= MAX_TRACKED {
                // Every tracked address is still limited: forget the oldest half.
                let mut by_age: Vec<(Instant, IpAddr)> =
                    self.buckets.iter().map(|(ip, b)| (b.at, *ip)).collect();
                by_age.sort();
                for (_, ip) in by_age.into_iter().take(MAX_TRACKED / 2) {
                    self.buckets.remove(&ip);
                }
            }
        }
        let level = self
            .buckets
            .get(&ip)
            .map_or(self.burst, |b| self.level(b, now));
        self.buckets.insert(
            ip,
            Bucket {
                tokens: (level - 1.0).max(0.0),
                at: now,
            },
        );
    }

    pub fn tracked(&self) -> usize {
        self.buckets.len()
    }
}

/// Open connections per client address.
#[derive(Debug, Default)]
pub struct ConnectionCounts {
    by_ip: HashMap<IpAddr, usize>,
}

impl ConnectionCounts {
    /// Takes a slot for `ip` when it holds fewer than `max`.
    pub fn try_open(&mut self, ip: IpAddr, max: usize) -> bool {
        let n = self.by_ip.entry(ip).or_default();
        if *n >= max {
            return false;
        }
        *n += 1;
        true
    }

    pub fn close(&mut self, ip: IpAddr) {
        if let Some(n) = self.by_ip.get_mut(&ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_ip.remove(&ip);
            }
        }
    }

    pub fn open(&self, ip: IpAddr) -> usize {
        self.by_ip.get(&ip).copied().unwrap_or(0)
    }
}

/// The server's connection limits.
#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    pub total: Arc<tokio::sync::Semaphore>,
    pub per_ip: usize,
    pub counts: Arc<Mutex<ConnectionCounts>>,
}

impl ConnectionLimits {
    pub fn new(total: usize, per_ip: usize) -> ConnectionLimits {
        ConnectionLimits {
            total: Arc::new(tokio::sync::Semaphore::new(total.max(1))),
            per_ip: per_ip.max(1),
            counts: Arc::default(),
        }
    }
}

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits::new(DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_IP)
    }
}

/// A connection's slot of its address; given back when dropped.
pub struct IpSlot {
    ip: IpAddr,
    counts: Arc<Mutex<ConnectionCounts>>,
}

impl IpSlot {
    pub fn take(limits: &ConnectionLimits, ip: IpAddr) -> Option<IpSlot> {
        let ok = limits
            .counts
            .lock()
            .expect("lock")
            .try_open(ip, limits.per_ip);
        ok.then(|| IpSlot {
            ip,
            counts: limits.counts.clone(),
        })
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        if let Ok(mut c) = self.counts.lock() {
            c.close(self.ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_address_is_refused_after_its_burst_and_let_in_again_as_it_refills() {
        let mut f = FailedAuths::new(3, 0.5);
        let t0 = Instant::now();
        let a = ip("10.0.0.1");
        for _ in 0..3 {
            assert!(f.check(a, t0).is_ok());
            f.charge(a, t0);
        }
        let wait = f.check(a, t0).unwrap_err();
        assert_eq!(wait, Duration::from_secs(2), "one token at 0.5/s");
        assert!(
            f.check(ip("10.0.0.2"), t0).is_ok(),
            "other addresses unaffected"
        );
        assert!(f.check(a, t0 + Duration::from_millis(1900)).is_err());
        assert!(f.check(a, t0 + Duration::from_secs(2)).is_ok());
        // One failure spends the refilled token again.
        f.charge(a, t0 + Duration::from_secs(2));
        assert!(f.check(a, t0 + Duration::from_secs(2)).is_err());
        // Never more than the burst saved up.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..3 {
            f.charge(a, later);
        }
        assert!(f.check(a, later).is_err());
    }

    #[test]
    fn a_flood_of_addresses_stays_bounded() {
        let mut f = FailedAuths::new(2, 1.0);
        let t0 = Instant::now();
        for i in 0..(MAX_TRACKED as u32 + 500) {
            f.charge(IpAddr::from(i.to_be_bytes()), t0);
        }
        assert!(f.tracked() <= MAX_TRACKED, "{}", f.tracked());
    }

    #[test]
    fn connections_per_address_are_capped_and_given_back() {
        let limits = ConnectionLimits::new(10, 2);
        let a = ip("127.0.0.1");
        let s1 = IpSlot::take(&limits, a).unwrap();
        let _s2 = IpSlot::take(&limits, a).unwrap();
        assert!(IpSlot::take(&limits, a).is_none());
        assert!(IpSlot::take(&limits, ip("127.0.0.2")).is_some());
        drop(s1);
        assert!(IpSlot::take(&limits, a).is_some());
        assert_eq!(limits.counts.lock().unwrap().open(ip("127.0.0.2")), 0);
    }
}

//! What keeps one client from taking the JSS down: a cap on connections (in all and per
//! client address), a rate limit on failed authentications per client address, so
//! guessing tokens or flooding TokenReview costs the guesser, not the hub, and a rate
//! limit on each authenticated principal's requests.
//!
//! Pure: [`Buckets`] (token buckets) and [`ConnectionCounts`]. The shell (accepting,
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
/// Authenticated requests one principal may make in a burst by default…
pub const DEFAULT_PRINCIPAL_BURST: u32 = 100;
/// …and per second after it.
pub const DEFAULT_PRINCIPAL_PER_SEC: f64 = 20.0;
/// Memory the JSS may hold at once for submissions' bodies and their parsing, by default
/// (MiB): half the shipped container limit (512Mi), the rest for its caches.
pub const DEFAULT_MEMORY_BUDGET_MIB: u32 = 256;
/// What a submission holds while it is read, parsed and admitted, as a multiple of its
/// body: the bytes, the parser's values, the typed workload and its expansion. Measured by
/// `benches/jss.rs` `large-bodies`: 32 dry runs of ~1 MiB at once took a replica from 38 to
/// 420 MiB resident, ~12 MiB each.
pub const PARSE_FACTOR: u64 = 12;

/// The share of the memory budget a submission reserves before its body is read (KiB):
/// its declared length (the body limit when it declares none) times [`PARSE_FACTOR`],
/// at least 64 KiB, at most the whole budget (one submission can always go alone).
pub fn reservation_kib(content_length: Option<u64>, body_limit: usize, budget_kib: u32) -> u32 {
    let limit = body_limit as u64;
    let body = content_length.unwrap_or(limit).min(limit);
    let kib = (body * PARSE_FACTOR).div_ceil(1024).max(64);
    u32::try_from(kib)
        .unwrap_or(u32::MAX)
        .min(budget_kib.max(1))
}

/// Keys (client addresses, principals) remembered at most; beyond it the ones back at a
/// full bucket go (a flood from many addresses must not grow memory).
const MAX_TRACKED: usize = 10_000;

/// The peer of a request's connection (a request extension the server sets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr(pub SocketAddr);

/// A range of addresses: `10.0.0.0/8`, `fd00::/8`, or one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Cidr, String> {
        let bad = || format!("{s:?} is not an address or address/prefix (e.g. 10.0.0.0/8)");
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let net: IpAddr = addr.trim().parse().map_err(|_| bad())?;
        let net = net.to_canonical();
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(bad)?,
            None => max,
        };
        Ok(Cidr { net, prefix })
    }
}

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        // The top `prefix` bits of addresses `width` bits wide (a shift by the whole width
        // is /0: everything matches).
        let same = |a: u128, b: u128, width: u32| {
            let shift = width - u32::from(self.prefix);
            a.checked_shr(shift).unwrap_or(0) == b.checked_shr(shift).unwrap_or(0)
        };
        match (self.net, ip.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                same(u128::from(u32::from(n)), u128::from(u32::from(a)), 32)
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => same(u128::from(n), u128::from(a), 128),
            _ => false,
        }
    }
}

/// Whether `ip` is in any of `ranges`.
pub fn is_trusted(ranges: &[Cidr], ip: IpAddr) -> bool {
    ranges.iter().any(|r| r.contains(ip))
}

/// The client a request comes from, for the limits: the connection's peer — unless the
/// peer is a trusted proxy; then the right-most address of `X-Forwarded-For` that is not
/// a trusted proxy (the one the outermost trusted proxy saw: what a client writes into
/// the header itself stands left of it and is never taken). Without a readable header,
/// the peer.
pub fn client_ip(peer: IpAddr, forwarded_for: Option<&str>, trusted: &[Cidr]) -> IpAddr {
    let peer = peer.to_canonical();
    if !is_trusted(trusted, peer) {
        return peer;
    }
    let Some(header) = forwarded_for else {
        return peer;
    };
    let mut hops = Vec::new();
    for part in header.split(',') {
        match part.trim().parse::<IpAddr>() {
            Ok(ip) => hops.push(ip.to_canonical()),
            // An unreadable hop: nothing left of it can be trusted either.
            Err(_) => hops.clear(),
        }
    }
    hops.iter()
        .rev()
        .find(|ip| !is_trusted(trusted, **ip))
        .or(hops.first())
        .copied()
        .unwrap_or(peer)
}

/// Token buckets per key (a client address, a principal): each charge takes a token; a
/// key without one is refused until it refills. Bounded: past [`MAX_TRACKED`] keys, those
/// back at a full bucket go, then the oldest half.
#[derive(Debug)]
pub struct Buckets<K> {
    burst: f64,
    per_sec: f64,
    buckets: HashMap<K, Bucket>,
}

/// Failed authentications per client address.
pub type FailedAuths = Buckets<IpAddr>;

/// Authenticated requests per principal (user name): one user's script cannot take the
/// JSS's admissions, TokenReviews or hub reads from everyone else, whatever address it
/// comes from.
pub type PrincipalRequests = Buckets<String>;

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl<K: std::hash::Hash + Eq + Clone> Buckets<K> {
    /// `burst` charges at once, then `per_sec` (a rate that is not a positive number
    /// means the failed-authentication default).
    pub fn new(burst: u32, per_sec: f64) -> Buckets<K> {
        Buckets {
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

    /// `Err(retry_after)` when `key` has used up its tokens.
    pub fn check(&self, key: &K, now: Instant) -> Result<(), Duration> {
        let Some(b) = self.buckets.get(key) else {
            return Ok(());
        };
        let level = self.level(b, now);
        if level >= 1.0 {
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - level) / self.per_sec))
        }
    }

    /// Charges one to `key`.
    pub fn charge(&mut self, key: &K, now: Instant) {
        if self.buckets.len() >= MAX_TRACKED && !self.buckets.contains_key(key) {
            let full: Vec<K> = self
                .buckets
                .iter()
                .filter(|(_, b)| self.level(b, now) >= self.burst)
                .map(|(k, _)| k.clone())
                .collect();
            for k in full {
                self.buckets.remove(&k);
            }
            if self.buckets.len() >= MAX_TRACKED {
                // Every tracked key is still limited: forget the oldest half.
                let mut by_age: Vec<(Instant, K)> = self
                    .buckets
                    .iter()
                    .map(|(k, b)| (b.at, k.clone()))
                    .collect();
                by_age.sort_by_key(|(at, _)| *at);
                for (_, k) in by_age.into_iter().take(MAX_TRACKED / 2) {
                    self.buckets.remove(&k);
                }
            }
        }
        let level = self
            .buckets
            .get(key)
            .map_or(self.burst, |b| self.level(b, now));
        self.buckets.insert(
            key.clone(),
            Bucket {
                tokens: (level - 1.0).max(0.0),
                at: now,
            },
        );
    }

    /// Charges one to `key` if it has a token, else says when it will.
    pub fn take(&mut self, key: &K, now: Instant) -> Result<(), Duration> {
        self.check(key, now)?;
        self.charge(key, now);
        Ok(())
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
    /// Trusted proxies: their connections carry many clients, so only the total caps them.
    pub proxies: Vec<Cidr>,
}

impl ConnectionLimits {
    pub fn new(total: usize, per_ip: usize) -> ConnectionLimits {
        ConnectionLimits {
            total: Arc::new(tokio::sync::Semaphore::new(total.max(1))),
            per_ip: per_ip.max(1),
            counts: Arc::default(),
            proxies: Vec::new(),
        }
    }

    /// Connections from these addresses are not capped per address.
    pub fn with_proxies(mut self, proxies: Vec<Cidr>) -> ConnectionLimits {
        self.proxies = proxies;
        self
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
        let per_ip = if is_trusted(&limits.proxies, ip) {
            usize::MAX
        } else {
            limits.per_ip
        };
        let ok = limits.counts.lock().expect("lock").try_open(ip, per_ip);
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

    #[test]
    fn address_ranges_parse_and_contain_what_they_say() {
        let r: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(r.contains("10.1.2.3".parse().unwrap()));
        assert!(!r.contains("11.0.0.1".parse().unwrap()));
        assert!(
            r.contains("::ffff:10.9.9.9".parse().unwrap()),
            "an IPv4-mapped address"
        );
        let one: Cidr = "127.0.0.1".parse().unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("10.0.0.1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("203.0.113.1".parse().unwrap()));
        for bad in ["10.0.0.0/33", "x", "10.0.0/8", "::/129", ""] {
            let e = bad.parse::<Cidr>().unwrap_err();
            assert!(e.contains("not an address"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_client_is_the_peer_unless_a_trusted_proxy_says_who_it_forwards() {
        let trusted: Vec<Cidr> = vec!["10.0.0.0/8".parse().unwrap()];
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // An untrusted peer's header is ignored: it cannot pick its own bucket.
        assert_eq!(
            client_ip(ip("203.0.113.5"), Some("198.51.100.1"), &trusted),
            ip("203.0.113.5")
        );
        // Through a trusted proxy: the address it saw.
        assert_eq!(
            client_ip(ip("10.0.0.2"), Some("198.51.100.1"), &trusted),
            ip("198.51.100.1")
        );
        // A client that writes its own header gets the proxy's view of it, not its claim.
        assert_eq!(
            client_ip(
                ip("10.0.0.2"),
                Some("1.2.3.4, 198.51.100.1, 10.0.0.9"),
                &trusted
            ),
            ip("198.51.100.1")
        );
        // Without a header, or one past reading, the peer (or what stands right of it).
        assert_eq!(client_ip(ip("10.0.0.2"), None, &trusted), ip("10.0.0.2"));
        assert_eq!(
            client_ip(ip("10.0.0.2"), Some("nonsense"), &trusted),
            ip("10.0.0.2")
        );
        assert_eq!(
            client_ip(
                ip("10.0.0.2"),
                Some("1.2.3.4, junk, 198.51.100.7"),
                &trusted
            ),
            ip("198.51.100.7")
        );
        // Every hop trusted: the first.
        assert_eq!(
            client_ip(ip("10.0.0.2"), Some("10.0.0.7, 10.0.0.8"), &trusted),
            ip("10.0.0.7")
        );
    }

    #[test]
    fn a_trusted_proxy_is_capped_only_by_the_total() {
        let limits =
            ConnectionLimits::new(100, 1).with_proxies(vec!["10.0.0.0/8".parse().unwrap()]);
        let proxy: IpAddr = "10.0.0.2".parse().unwrap();
        let other: IpAddr = "203.0.113.5".parse().unwrap();
        let held: Vec<IpSlot> = (0..5)
            .map(|_| IpSlot::take(&limits, proxy).unwrap())
            .collect();
        assert_eq!(held.len(), 5);
        let one = IpSlot::take(&limits, other).unwrap();
        assert!(IpSlot::take(&limits, other).is_none());
        drop(one);
    }
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
            assert!(f.check(&a, t0).is_ok());
            f.charge(&a, t0);
        }
        let wait = f.check(&a, t0).unwrap_err();
        assert_eq!(wait, Duration::from_secs(2), "one token at 0.5/s");
        assert!(
            f.check(&ip("10.0.0.2"), t0).is_ok(),
            "other addresses unaffected"
        );
        assert!(f.check(&a, t0 + Duration::from_millis(1900)).is_err());
        assert!(f.check(&a, t0 + Duration::from_secs(2)).is_ok());
        // One failure spends the refilled token again.
        f.charge(&a, t0 + Duration::from_secs(2));
        assert!(f.check(&a, t0 + Duration::from_secs(2)).is_err());
        // Never more than the burst saved up.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..3 {
            f.charge(&a, later);
        }
        assert!(f.check(&a, later).is_err());
    }

    #[test]
    fn a_principal_takes_its_burst_then_its_rate_and_others_are_unaffected() {
        let mut p = PrincipalRequests::new(2, 4.0);
        let t0 = Instant::now();
        let (alice, bob) = ("alice".to_string(), "bob".to_string());
        assert!(p.take(&alice, t0).is_ok());
        assert!(p.take(&alice, t0).is_ok());
        let wait = p.take(&alice, t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(250), "one token at 4/s");
        // A refused request spends nothing: alice is let in as soon as the token is back.
        assert!(p.take(&alice, t0 + Duration::from_millis(250)).is_ok());
        assert!(p.take(&alice, t0 + Duration::from_millis(250)).is_err());
        assert!(p.take(&bob, t0).is_ok(), "bob has his own budget");
    }

    #[test]
    fn a_submission_reserves_its_body_times_the_parse_factor_within_the_budget() {
        let budget = 256 * 1024;
        // A 1 MiB body: 12 MiB; 21 of them fit a 256 MiB budget.
        assert_eq!(reservation_kib(Some(1 << 20), 1 << 20, budget), 12 * 1024);
        assert_eq!(budget / reservation_kib(Some(1 << 20), 1 << 20, budget), 21);
        // No length declared: as much as the body limit allows.
        assert_eq!(reservation_kib(None, 1 << 20, budget), 12 * 1024);
        // A declared length past the limit is refused elsewhere; never more than the limit.
        assert_eq!(reservation_kib(Some(50 << 20), 1 << 20, budget), 12 * 1024);
        // A small one: the floor.
        assert_eq!(reservation_kib(Some(2_000), 1 << 20, budget), 64);
        // A budget smaller than one submission: that one still goes, alone.
        assert_eq!(reservation_kib(Some(1 << 20), 1 << 20, 1024), 1024);
    }

    #[test]
    fn a_flood_of_addresses_stays_bounded() {
        let mut f = FailedAuths::new(2, 1.0);
        let t0 = Instant::now();
        for i in 0..(MAX_TRACKED as u32 + 500) {
            f.charge(&IpAddr::from(i.to_be_bytes()), t0);
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

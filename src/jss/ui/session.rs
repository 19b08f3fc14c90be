//! Browser sessions of the UI: a login with a token makes a session, sealed into an
//! HttpOnly, SameSite=Strict cookie; the session holds the caller (user and teams, as the
//! token said at login) and a CSRF token that every form posts back.
//!
//! The cookie is the session, encrypted and authenticated (AES-256-GCM) with the UI's
//! session key, so every JSS replica holding that key serves it: a replica that has not
//! seen a cookie opens it and keeps it in its table (the replicas of one deployment share
//! the key through `--ui-session-key-file`, or the TLS key it is derived from). What a
//! replica learns later stays its own: a logout ends the session in the browser and on
//! that replica (a copy of the cookie still opens on another until it expires), and a
//! TokenReview that no longer vouches for a token ends it on each replica that reviews it
//! (a replica reviews a session it opened at once). Flash messages are sealed too, bound
//! to their session, and carried in the address of the page they are for.
//!
//! The table is kept by the SHA-256 of the cookie, so it never holds a cookie value. The
//! clock is passed in.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use serde::{Deserialize, Serialize};

use crate::jss::auth::{Principal, digest};

/// The session cookie's name.
pub const COOKIE: &str = "pinfed_session";

/// Sessions kept at most; past it, expired ones are dropped, then the oldest.
const MAX_SESSIONS: usize = 10_000;

/// A cookie larger than this may be dropped by browsers (4096 bytes with its name and
/// attributes): a login whose session would not fit is refused.
const MAX_COOKIE: usize = 3_800;

/// A flash message's text is cut to this many characters (it travels in an address).
const MAX_FLASH_TEXT: usize = 600;

/// What each sealed value is: a session cannot be passed off as a flash, nor one
/// version's format as another's.
const AAD_SESSION: &[u8] = b"pinfed-ui-session-v1";
const AAD_FLASH: &[u8] = b"pinfed-ui-flash-v1";

/// One logged-in browser. Its Debug output leaves the CSRF token and the token out.
#[derive(Clone, PartialEq, Eq)]
pub struct Session {
    /// Random; flash messages are bound to it.
    pub id: String,
    pub principal: Principal,
    /// Posted back by every form and sent by every script request.
    pub csrf: String,
    pub expires: Instant,
    /// A session of a token TokenReview vouched for: asked again every so often, and
    /// ended once the hub no longer vouches for it (the token file's tokens are not).
    pub reviewed: Option<Reviewed>,
}

/// The token a session was made with, kept to ask TokenReview again.
#[derive(Clone, PartialEq, Eq)]
pub struct Reviewed {
    token: String,
    /// When TokenReview last vouched for it here (`None`: a session this replica opened
    /// from its cookie, asked at once).
    pub checked: Option<Instant>,
}

/// What an action said, shown on the page it returns to. Sealed and bound to the session
/// that made it, so that no link can make a page say something the JSS did not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flash {
    /// The sealed value (the page's `?flash=`; it stays in the address, so live updates
    /// keep it).
    pub key: String,
    /// Done, or refused.
    pub ok: bool,
    pub text: String,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("principal", &self.principal)
            .field("csrf", &"<redacted>")
            .field("expires", &self.expires)
            .field("reviewed", &self.reviewed.as_ref().map(|r| r.checked))
            .finish()
    }
}

/// 32 random bytes, URL-safe base64.
pub fn random_token() -> Result<String, getrandom::Error> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b)?;
    Ok(URL_SAFE_NO_PAD.encode(b))
}

/// Compares two secrets in time independent of where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (digest(a), digest(b));
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// Why no session could be made.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("no randomness for a session: {0}")]
    Random(getrandom::Error),
    #[error("the session does not fit in a cookie ({0} bytes; too many teams?)")]
    TooLarge(usize),
    #[error("the session could not be sealed")]
    Seal,
}

impl From<getrandom::Error> for SessionError {
    fn from(e: getrandom::Error) -> SessionError {
        SessionError::Random(e)
    }
}

/// The key sessions and flash messages are sealed with.
pub struct SessionKey(LessSafeKey);

impl SessionKey {
    /// Derived from a secret every replica shares (at least 32 bytes: a key file, or the
    /// TLS key), so that each derives the same key and nothing else is ever keyed by it.
    pub fn derive(secret: &[u8]) -> Result<SessionKey, String> {
        if secret.len() < 32 {
            return Err(format!(
                "a session key needs at least 32 bytes of secret, got {}",
                secret.len()
            ));
        }
        let prk = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"pinfed-jss").extract(secret);
        let okm = prk
            .expand(&[b"ui session key v1"], &AES_256_GCM)
            .map_err(|_| "the session key could not be derived".to_string())?;
        Ok(SessionKey(LessSafeKey::new(UnboundKey::from(okm))))
    }

    /// A key of this process alone (no key file, no TLS): its sessions open only here.
    pub fn random() -> Result<SessionKey, getrandom::Error> {
        let mut b = [0u8; 32];
        getrandom::fill(&mut b)?;
        Ok(SessionKey::derive(&b).expect("32 bytes"))
    }

    fn seal(&self, aad: &'static [u8], plain: &[u8]) -> Result<String, SessionError> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce)?;
        let mut buf = plain.to_vec();
        self.0
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut buf,
            )
            .map_err(|_| SessionError::Seal)?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&buf);
        Ok(URL_SAFE_NO_PAD.encode(out))
    }

    fn open(&self, aad: &'static [u8], sealed: &str) -> Option<Vec<u8>> {
        let mut raw = URL_SAFE_NO_PAD.decode(sealed).ok()?;
        if raw.len() < NONCE_LEN {
            return None;
        }
        let mut body = raw.split_off(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(&raw).ok()?;
        let plain = self
            .0
            .open_in_place(nonce, Aad::from(aad), &mut body)
            .ok()?;
        Some(plain.to_vec())
    }
}

/// A session as its cookie carries it.
#[derive(Serialize, Deserialize)]
struct Sealed {
    id: String,
    user: String,
    teams: BTreeSet<String>,
    csrf: String,
    /// Unix seconds.
    expires: u64,
    /// The token, when TokenReview vouched for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    token: Option<String>,
}

/// A flash message as its address carries it.
#[derive(Serialize, Deserialize)]
struct SealedFlash {
    /// The session it was made for.
    session: String,
    ok: bool,
    text: String,
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

pub struct Sessions {
    ttl: Duration,
    key: SessionKey,
    by_digest: Mutex<HashMap<[u8; 32], Session>>,
    /// Ids of sessions logged out here, until they expire.
    ended: Mutex<HashMap<String, Instant>>,
}

impl Sessions {
    pub fn new(ttl: Duration, key: SessionKey) -> Sessions {
        Sessions {
            ttl,
            key,
            by_digest: Mutex::default(),
            ended: Mutex::default(),
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A new session for `principal`: its cookie value and the session.
    /// `reviewed`: the token, when TokenReview vouched for it (asked again later).
    pub fn create(
        &self,
        principal: Principal,
        reviewed: Option<String>,
        now: Instant,
        wall: SystemTime,
    ) -> Result<(String, Session), SessionError> {
        let session = Session {
            id: random_token()?,
            principal,
            csrf: random_token()?,
            expires: now + self.ttl,
            reviewed: reviewed.map(|token| Reviewed {
                token,
                checked: Some(now),
            }),
        };
        let sealed = Sealed {
            id: session.id.clone(),
            user: session.principal.user.clone(),
            teams: session.principal.teams.clone(),
            csrf: session.csrf.clone(),
            expires: unix(wall + self.ttl),
            token: session.reviewed.as_ref().map(|r| r.token.clone()),
        };
        let plain = serde_json::to_vec(&sealed).map_err(|_| SessionError::Seal)?;
        let cookie = self.key.seal(AAD_SESSION, &plain)?;
        if cookie.len() > MAX_COOKIE {
            return Err(SessionError::TooLarge(cookie.len()));
        }
        self.keep(&cookie, session.clone(), now);
        Ok((cookie, session))
    }

    fn keep(&self, cookie: &str, session: Session, now: Instant) {
        let mut map = self.by_digest.lock().expect("lock");
        if map.len() >= MAX_SESSIONS {
            map.retain(|_, s| s.expires > now);
            if map.len() >= MAX_SESSIONS
                && let Some(oldest) = map.iter().min_by_key(|(_, s)| s.expires).map(|(k, _)| *k)
            {
                map.remove(&oldest);
            }
        }
        map.insert(digest(cookie), session);
    }

    /// The live session of a cookie value: one this replica knows, else the one the
    /// cookie seals (made by any replica with the same key), unless it expired or was
    /// logged out here. An expired one is removed and not returned.
    pub fn get(&self, cookie: &str, now: Instant, wall: SystemTime) -> Option<Session> {
        let key = digest(cookie);
        {
            let mut map = self.by_digest.lock().expect("lock");
            match map.get(&key) {
                Some(s) if s.expires > now => return Some(s.clone()),
                Some(_) => {
                    map.remove(&key);
                    return None;
                }
                None => {}
            }
        }
        let sealed: Sealed = serde_json::from_slice(&self.key.open(AAD_SESSION, cookie)?).ok()?;
        let left = sealed.expires.checked_sub(unix(wall)).filter(|l| *l > 0)?;
        if self.ended.lock().expect("lock").contains_key(&sealed.id) {
            return None;
        }
        let session = Session {
            id: sealed.id,
            principal: Principal {
                user: sealed.user,
                teams: sealed.teams,
            },
            csrf: sealed.csrf,
            // (Never past this replica's own ttl, whatever the cookie says.)
            expires: now + Duration::from_secs(left).min(self.ttl),
            reviewed: sealed.token.map(|token| Reviewed {
                token,
                checked: None,
            }),
        };
        self.keep(cookie, session.clone(), now);
        Some(session)
    }

    /// A flash message for the session `s`: the value its page's `?flash=` carries, or
    /// `None` when it cannot be sealed.
    pub fn seal_flash(&self, s: &Session, ok: bool, text: String) -> Option<String> {
        let text: String = text.chars().take(MAX_FLASH_TEXT).collect();
        let f = SealedFlash {
            session: s.id.clone(),
            ok,
            text,
        };
        self.key.seal(AAD_FLASH, &serde_json::to_vec(&f).ok()?).ok()
    }

    /// The flash message `key` names, if it was sealed for the session `s`.
    pub fn flash(&self, s: &Session, key: Option<&str>) -> Option<Flash> {
        let key = key?;
        let f: SealedFlash = serde_json::from_slice(&self.key.open(AAD_FLASH, key)?).ok()?;
        (f.session == s.id).then(|| Flash {
            key: key.to_string(),
            ok: f.ok,
            text: f.text,
        })
    }

    /// Live sessions of reviewed tokens last vouched for `every` ago or longer (or never
    /// here): their keys and tokens, to ask TokenReview again. Expired sessions go
    /// meanwhile.
    pub fn due_reviews(&self, now: Instant, every: Duration) -> Vec<([u8; 32], String)> {
        let mut map = self.by_digest.lock().expect("lock");
        map.retain(|_, s| s.expires > now);
        self.ended.lock().expect("lock").retain(|_, e| *e > now);
        map.iter()
            .filter_map(|(k, s)| {
                let r = s.reviewed.as_ref()?;
                r.checked
                    .is_none_or(|c| now.saturating_duration_since(c) >= every)
                    .then(|| (*k, r.token.clone()))
            })
            .collect()
    }

    /// What TokenReview said again for the session `key`: still vouched for (as whom; the
    /// teams follow the token's groups now), or not (the session ends here, and its
    /// cookie opens here no more). Returns the user of a session that ended.
    pub fn reviewed_again(
        &self,
        key: &[u8; 32],
        answer: Option<Principal>,
        now: Instant,
    ) -> Option<String> {
        let mut map = self.by_digest.lock().expect("lock");
        match answer {
            Some(p) => {
                if let Some(s) = map.get_mut(key) {
                    s.principal = p;
                    if let Some(r) = s.reviewed.as_mut() {
                        r.checked = Some(now);
                    }
                }
                None
            }
            None => {
                let s = map.remove(key)?;
                self.ended
                    .lock()
                    .expect("lock")
                    .insert(s.id.clone(), s.expires);
                Some(s.principal.user)
            }
        }
    }

    /// Logged out: the session ends here (its cookie opens here no more).
    pub fn remove(&self, cookie: &str) {
        if let Some(s) = self.by_digest.lock().expect("lock").remove(&digest(cookie)) {
            self.ended.lock().expect("lock").insert(s.id, s.expires);
        }
    }

    pub fn len(&self) -> usize {
        self.by_digest.lock().expect("lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The session cookie's value in a `Cookie` header, if any.
pub fn cookie_value(header: Option<&str>) -> Option<&str> {
    header?
        .split(';')
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.trim())
        .filter(|v| !v.is_empty())
}

/// The `Set-Cookie` value of a new session (`Secure` when served over TLS).
pub fn set_cookie(id: &str, ttl: Duration, secure: bool) -> String {
    format!(
        "{COOKIE}={id}; Path=/ui; Max-Age={}; HttpOnly; SameSite=Strict{}",
        ttl.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn clear_cookie(secure: bool) -> String {
    format!(
        "{COOKIE}=; Path=/ui; Max-Age=0; HttpOnly; SameSite=Strict{}",
        if secure { "; Secure" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SessionKey {
        SessionKey::derive(&[7u8; 32]).unwrap()
    }

    fn sessions(ttl: u64) -> Sessions {
        Sessions::new(Duration::from_secs(ttl), key())
    }

    fn alice() -> Principal {
        Principal {
            user: "alice".into(),
            teams: ["ads".to_string()].into(),
        }
    }

    #[test]
    fn a_session_debug_never_shows_its_csrf_token() {
        let s = Session {
            id: "i".into(),
            principal: alice(),
            csrf: "csrf-secret-value".into(),
            expires: Instant::now(),
            reviewed: None,
        };
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("csrf-secret-value") && shown.contains("alice"),
            "{shown}"
        );
    }

    #[test]
    fn a_session_lives_until_its_ttl_then_is_gone() {
        let s = sessions(60);
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let (id, made) = s.create(alice(), None, t0, w0).unwrap();
        let later = |secs| {
            (
                t0 + Duration::from_secs(secs),
                w0 + Duration::from_secs(secs),
            )
        };
        let (t, w) = later(59);
        assert_eq!(s.get(&id, t, w), Some(made.clone()));
        let (t, w) = later(60);
        assert_eq!(s.get(&id, t, w), None, "expired");
        assert!(s.is_empty(), "an expired session is dropped when seen");
        assert_eq!(s.get("forged", t0, w0), None);
    }

    #[test]
    fn another_replica_with_the_same_key_opens_the_cookie_and_no_other_does() {
        let (a, b) = (sessions(600), sessions(600));
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let (cookie, made) = a.create(alice(), None, t0, w0).unwrap();
        let opened = b.get(&cookie, t0, w0).expect("opened by the other replica");
        assert_eq!(
            (&opened.id, &opened.principal, &opened.csrf),
            (&made.id, &made.principal, &made.csrf)
        );
        assert_eq!(b.len(), 1, "kept once opened");
        // Its expiry is the cookie's, not a new ttl.
        let w = w0 + Duration::from_secs(600);
        assert_eq!(
            b.get(&cookie, t0, w).map(|s| s.id),
            Some(made.id.clone()),
            "known"
        );
        let c = sessions(600);
        assert_eq!(
            c.get(&cookie, t0, w),
            None,
            "expired by the cookie's own time"
        );
        // Another key, a changed byte, a flash passed off as a session: nothing.
        let other = Sessions::new(
            Duration::from_secs(600),
            SessionKey::derive(&[8u8; 32]).unwrap(),
        );
        assert_eq!(other.get(&cookie, t0, w0), None);
        let mut raw = URL_SAFE_NO_PAD.decode(&cookie).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 1;
        assert_eq!(
            sessions(600).get(&URL_SAFE_NO_PAD.encode(raw), t0, w0),
            None
        );
        let flash = a.seal_flash(&made, true, "x".into()).unwrap();
        assert_eq!(sessions(600).get(&flash, t0, w0), None);
        assert!(SessionKey::derive(&[1u8; 31]).is_err(), "a short secret");
    }

    #[test]
    fn a_logout_or_a_refused_review_ends_the_cookie_on_that_replica() {
        let s = sessions(600);
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let (cookie, _) = s.create(alice(), None, t0, w0).unwrap();
        s.remove(&cookie);
        assert_eq!(
            s.get(&cookie, t0, w0),
            None,
            "not opened again after a logout"
        );
        let (cookie, _) = s.create(alice(), Some("tok".into()), t0, w0).unwrap();
        let every = Duration::from_secs(60);
        let due = s.due_reviews(t0 + every, every);
        assert_eq!(
            s.reviewed_again(&due[0].0, None, t0 + every),
            Some("alice".into())
        );
        assert_eq!(s.get(&cookie, t0 + every, w0 + every), None);
    }

    #[test]
    fn ids_and_csrf_tokens_are_random_and_distinct() {
        let s = sessions(60);
        let (now, wall) = (Instant::now(), SystemTime::now());
        let (a, sa) = s.create(alice(), None, now, wall).unwrap();
        let (b, sb) = s.create(alice(), None, now, wall).unwrap();
        assert_ne!(a, b);
        assert_ne!(sa.csrf, sb.csrf);
        assert_ne!(sa.id, sb.id);
        assert!(!a.contains(&sa.csrf), "sealed, not in clear");
        s.remove(&a);
        assert_eq!(s.get(&a, now, wall), None, "logged out");
        assert!(s.get(&b, now, wall).is_some());
    }

    #[test]
    fn flash_messages_are_sealed_for_their_session_only() {
        let s = sessions(60);
        let (now, wall) = (Instant::now(), SystemTime::now());
        let (_, a) = s.create(alice(), None, now, wall).unwrap();
        let (_, b) = s.create(alice(), None, now, wall).unwrap();
        let key = s.seal_flash(&a, false, "refused".into()).unwrap();
        assert_eq!(
            s.flash(&a, Some(&key)).map(|f| (f.ok, f.text)),
            Some((false, "refused".to_string()))
        );
        assert_eq!(
            sessions(60).flash(&a, Some(&key)).map(|f| f.ok),
            Some(false),
            "any replica"
        );
        assert_eq!(s.flash(&a, Some("forged")), None);
        assert_eq!(s.flash(&a, None), None);
        assert_eq!(
            s.flash(&b, Some(&key)),
            None,
            "another session does not see it"
        );
        let long = s.seal_flash(&a, true, "x".repeat(5000)).unwrap();
        assert_eq!(s.flash(&a, Some(&long)).unwrap().text.len(), MAX_FLASH_TEXT);
    }

    #[test]
    fn a_reviewed_session_is_asked_again_when_due_and_ends_when_refused() {
        let s = sessions(600);
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let every = Duration::from_secs(60);
        let (file, _) = s.create(alice(), None, t0, w0).unwrap();
        let (sa, made) = s.create(alice(), Some("sa-token".into()), t0, w0).unwrap();
        assert!(
            !format!("{made:?}").contains("sa-token"),
            "the token is never printed"
        );
        assert!(!sa.contains("sa-token"), "nor in clear in the cookie");
        assert!(
            s.due_reviews(t0 + Duration::from_secs(59), every)
                .is_empty()
        );
        let due = s.due_reviews(t0 + every, every);
        assert_eq!(due.len(), 1, "only the reviewed session");
        assert_eq!(due[0].1, "sa-token");
        // Still vouched for, now in another team: due again a period later.
        let mut moved = alice();
        moved.teams = ["search".to_string()].into();
        assert_eq!(
            s.reviewed_again(&due[0].0, Some(moved.clone()), t0 + every),
            None
        );
        assert_eq!(s.get(&sa, t0 + every, w0).unwrap().principal, moved);
        assert!(
            s.due_reviews(t0 + every + Duration::from_secs(30), every)
                .is_empty()
        );
        // Opened by another replica: asked there at once.
        let other = sessions(600);
        other.get(&sa, t0, w0).unwrap();
        assert_eq!(other.due_reviews(t0, every).len(), 1);
        // Refused: the session ends; the token file's session stays.
        let due = s.due_reviews(t0 + 2 * every, every);
        assert_eq!(
            s.reviewed_again(&due[0].0, None, t0 + 2 * every),
            Some("alice".to_string())
        );
        assert_eq!(s.get(&sa, t0 + 2 * every, w0), None);
        assert!(s.get(&file, t0 + 2 * every, w0).is_some());
    }

    #[test]
    fn the_table_stays_bounded_and_a_session_too_big_for_a_cookie_is_refused() {
        let s = sessions(60);
        let (now, wall) = (Instant::now(), SystemTime::now());
        for _ in 0..MAX_SESSIONS + 5 {
            s.create(alice(), None, now, wall).unwrap();
        }
        assert_eq!(s.len(), MAX_SESSIONS);
        let mut many = alice();
        many.teams = (0..400).map(|i| format!("team-{i}")).collect();
        assert!(matches!(
            s.create(many, None, now, wall),
            Err(SessionError::TooLarge(_))
        ));
    }

    #[test]
    fn cookies_are_http_only_strict_and_found_among_others() {
        let c = set_cookie("abc", Duration::from_secs(3600), true);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Secure"));
        assert!(c.starts_with("pinfed_session=abc;"));
        assert!(!set_cookie("abc", Duration::from_secs(1), false).contains("Secure"));
        assert_eq!(
            cookie_value(Some("a=1; pinfed_session=xyz; b=2")),
            Some("xyz")
        );
        assert_eq!(cookie_value(Some("pinfed_session=")), None);
        assert_eq!(cookie_value(Some("other=1")), None);
        assert_eq!(cookie_value(None), None);
        assert!(same_secret("x", "x") && !same_secret("x", "y"));
    }
}

//! Browser sessions of the UI: a login with a token makes a session whose random id goes
//! into an HttpOnly, SameSite=Strict cookie; the session holds the caller (user and
//! teams, as the token said at login) and a CSRF token that every form posts back.
//!
//! Sessions live in memory (a JSS restart logs everyone out) and are kept by the SHA-256
//! of their id, so the table never holds a cookie value. The clock is passed in.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::jss::auth::{Principal, digest};

/// The session cookie's name.
pub const COOKIE: &str = "pinfed_session";

/// Sessions kept at most; past it, expired ones are dropped, then the oldest.
const MAX_SESSIONS: usize = 10_000;

/// Flash messages a session keeps at most (the newest).
const MAX_FLASHES: usize = 8;

/// One logged-in browser. Its Debug output leaves the CSRF token and the token out.
#[derive(Clone, PartialEq, Eq)]
pub struct Session {
    pub principal: Principal,
    /// Posted back by every form and sent by every script request.
    pub csrf: String,
    pub expires: Instant,
    /// What the last actions said, newest last: a page shows the one its `?flash=` names.
    pub flashes: Vec<Flash>,
    /// A session of a token TokenReview vouched for: asked again every so often, and
    /// ended once the hub no longer vouches for it (the token file's tokens are not).
    pub reviewed: Option<Reviewed>,
}

/// The token a session was made with, kept in memory to ask TokenReview again.
#[derive(Clone, PartialEq, Eq)]
pub struct Reviewed {
    token: String,
    /// When TokenReview last vouched for it.
    pub checked: Instant,
}

/// What an action said, shown on the page it returns to. Kept in the session (not in the
/// address) so that no link can make a page say something the JSS did not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flash {
    /// Random: the page's `?flash=` (it stays in the address, so live updates keep it).
    pub key: String,
    /// Done, or refused.
    pub ok: bool,
    pub text: String,
}

impl Session {
    /// The flash message `key` names, if this session has it.
    pub fn flash(&self, key: Option<&str>) -> Option<&Flash> {
        let key = key?;
        self.flashes.iter().find(|f| f.key == key)
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("principal", &self.principal)
            .field("csrf", &"<redacted>")
            .field("expires", &self.expires)
            .field("flashes", &self.flashes.len())
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

pub struct Sessions {
    ttl: Duration,
    by_digest: Mutex<HashMap<[u8; 32], Session>>,
}

impl Sessions {
    pub fn new(ttl: Duration) -> Sessions {
        Sessions {
            ttl,
            by_digest: Mutex::default(),
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A new session for `principal`: its id (the cookie value) and the session.
    /// `reviewed`: the token, when TokenReview vouched for it (asked again later).
    pub fn create(
        &self,
        principal: Principal,
        reviewed: Option<String>,
        now: Instant,
    ) -> Result<(String, Session), getrandom::Error> {
        let id = random_token()?;
        let session = Session {
            principal,
            csrf: random_token()?,
            expires: now + self.ttl,
            flashes: Vec::new(),
            reviewed: reviewed.map(|token| Reviewed {
                token,
                checked: now,
            }),
        };
        let mut map = self.by_digest.lock().expect("lock");
        if map.len() >= MAX_SESSIONS {
            map.retain(|_, s| s.expires > now);
            if map.len() >= MAX_SESSIONS
                && let Some(oldest) = map.iter().min_by_key(|(_, s)| s.expires).map(|(k, _)| *k)
            {
                map.remove(&oldest);
            }
        }
        map.insert(digest(&id), session.clone());
        Ok((id, session))
    }

    /// The live session of a cookie value; an expired one is removed and not returned.
    pub fn get(&self, id: &str, now: Instant) -> Option<Session> {
        let key = digest(id);
        let mut map = self.by_digest.lock().expect("lock");
        match map.get(&key) {
            Some(s) if s.expires > now => Some(s.clone()),
            Some(_) => {
                map.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Keeps a flash message in the session of cookie value `id`: its key, or `None` when
    /// the session is gone (or no randomness is to be had).
    pub fn add_flash(&self, id: &str, ok: bool, text: String) -> Option<String> {
        let key = random_token().ok()?;
        let mut map = self.by_digest.lock().expect("lock");
        let s = map.get_mut(&digest(id))?;
        if s.flashes.len() >= MAX_FLASHES {
            s.flashes.remove(0);
        }
        s.flashes.push(Flash {
            key: key.clone(),
            ok,
            text,
        });
        Some(key)
    }

    /// Live sessions of reviewed tokens last vouched for `every` ago or longer: their
    /// keys and tokens, to ask TokenReview again. Expired sessions go meanwhile.
    pub fn due_reviews(&self, now: Instant, every: Duration) -> Vec<([u8; 32], String)> {
        let mut map = self.by_digest.lock().expect("lock");
        map.retain(|_, s| s.expires > now);
        map.iter()
            .filter_map(|(k, s)| {
                let r = s.reviewed.as_ref()?;
                (now.saturating_duration_since(r.checked) >= every).then(|| (*k, r.token.clone()))
            })
            .collect()
    }

    /// What TokenReview said again for the session `key`: still vouched for (as whom; the
    /// teams follow the token's groups now), or not (the session ends). Returns the user
    /// of a session that ended.
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
                        r.checked = now;
                    }
                }
                None
            }
            None => map.remove(key).map(|s| s.principal.user),
        }
    }

    pub fn remove(&self, id: &str) {
        self.by_digest.lock().expect("lock").remove(&digest(id));
    }

    pub fn len(&self) -> usize {
        self.by_digest.lock().expect("lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The session id in a `Cookie` header, if any.
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

    #[test]
    fn a_session_debug_never_shows_its_csrf_token() {
        let s = Session {
            principal: Principal {
                user: "alice".into(),
                teams: Default::default(),
            },
            csrf: "csrf-secret-value".into(),
            expires: Instant::now(),
            flashes: Vec::new(),
            reviewed: None,
        };
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("csrf-secret-value") && shown.contains("alice"),
            "{shown}"
        );
    }

    fn alice() -> Principal {
        Principal {
            user: "alice".into(),
            teams: ["ads".to_string()].into(),
        }
    }

    #[test]
    fn a_session_lives_until_its_ttl_then_is_gone() {
        let s = Sessions::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let (id, made) = s.create(alice(), None, t0).unwrap();
        assert_eq!(s.get(&id, t0 + Duration::from_secs(59)), Some(made.clone()));
        assert_eq!(s.get(&id, t0 + Duration::from_secs(60)), None, "expired");
        assert!(s.is_empty(), "an expired session is dropped when seen");
        assert_eq!(s.get("forged", t0), None);
    }

    #[test]
    fn ids_and_csrf_tokens_are_random_and_distinct() {
        let s = Sessions::new(Duration::from_secs(60));
        let now = Instant::now();
        let (a, sa) = s.create(alice(), None, now).unwrap();
        let (b, sb) = s.create(alice(), None, now).unwrap();
        assert_ne!(a, b);
        assert_ne!(sa.csrf, sb.csrf);
        assert_ne!(a, sa.csrf);
        assert_eq!(a.len(), 43, "32 bytes in base64url");
        s.remove(&a);
        assert_eq!(s.get(&a, now), None, "logged out");
        assert!(s.get(&b, now).is_some());
    }

    #[test]
    fn flash_messages_are_kept_per_session_and_bounded() {
        let s = Sessions::new(Duration::from_secs(60));
        let now = Instant::now();
        let (a, _) = s.create(alice(), None, now).unwrap();
        let (b, _) = s.create(alice(), None, now).unwrap();
        let key = s.add_flash(&a, false, "refused".into()).unwrap();
        let got = s.get(&a, now).unwrap();
        assert_eq!(
            got.flash(Some(&key)).map(|f| (f.ok, f.text.as_str())),
            Some((false, "refused"))
        );
        assert_eq!(got.flash(Some("forged")), None);
        assert_eq!(got.flash(None), None);
        assert_eq!(
            s.get(&b, now).unwrap().flash(Some(&key)),
            None,
            "another session does not see it"
        );
        for i in 0..MAX_FLASHES {
            s.add_flash(&a, true, format!("done {i}")).unwrap();
        }
        let got = s.get(&a, now).unwrap();
        assert_eq!(got.flashes.len(), MAX_FLASHES);
        assert_eq!(got.flash(Some(&key)), None, "the oldest went");
        assert_eq!(s.add_flash("gone", true, "x".into()), None);
    }

    #[test]
    fn a_reviewed_session_is_asked_again_when_due_and_ends_when_refused() {
        let s = Sessions::new(Duration::from_secs(600));
        let t0 = Instant::now();
        let every = Duration::from_secs(60);
        let (file, _) = s.create(alice(), None, t0).unwrap();
        let (sa, made) = s.create(alice(), Some("sa-token".into()), t0).unwrap();
        assert!(
            !format!("{made:?}").contains("sa-token"),
            "the token is never printed"
        );
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
        assert_eq!(s.get(&sa, t0 + every).unwrap().principal, moved);
        assert!(
            s.due_reviews(t0 + every + Duration::from_secs(30), every)
                .is_empty()
        );
        // Refused: the session ends; the token file's session stays.
        let due = s.due_reviews(t0 + 2 * every, every);
        assert_eq!(
            s.reviewed_again(&due[0].0, None, t0 + 2 * every),
            Some("alice".to_string())
        );
        assert_eq!(s.get(&sa, t0 + 2 * every), None);
        assert!(s.get(&file, t0 + 2 * every).is_some());
    }

    #[test]
    fn the_table_stays_bounded() {
        let s = Sessions::new(Duration::from_secs(60));
        let now = Instant::now();
        for _ in 0..MAX_SESSIONS + 5 {
            s.create(alice(), None, now).unwrap();
        }
        assert_eq!(s.len(), MAX_SESSIONS);
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

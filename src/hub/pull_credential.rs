//! The end of a pull member's agent credential: every token the agent holds on the hub
//! is bound to the Secret `pinfed-agent-credential` in its namespace (`pinfed join`
//! makes it, with its end in an annotation). The hub says how long it has left (the
//! MemberCluster's `CredentialValid` condition, a Warning Event when a week or less is
//! left) and deletes it at its end: every token of the chain is refused from then on,
//! and the member is joined again to go on. Pure standing here; [`check`] reads, deletes
//! and says.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::events::{Event, EventType};

use crate::api::common::{Condition, ConditionStatus};
use crate::api::federation::MemberCluster;
use crate::api::member_slice::pull_namespace;
use crate::hub::join_pull::{AGENT_CREDENTIAL, credential_expires};

/// The MemberCluster condition type.
pub const CONDITION: &str = crate::api::federation::CONDITION_CREDENTIAL_VALID;
/// Warned this long before the end.
pub const WARN_BEFORE: SignedDuration = SignedDuration::from_hours(7 * 24);
/// How often a credential that lasts is read again (its end is known in between; one that
/// is missing or ended is read at every look, to see a new join at once).
const READ_EVERY: Duration = Duration::from_secs(60);

/// Where a pull member's credential stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Lasts past the warning.
    Valid(Timestamp),
    /// Ends within [`WARN_BEFORE`].
    EndsSoon(Timestamp),
    /// Its end has passed (the hub deletes it).
    Ended(Timestamp),
    /// No credential Secret (deleted, or a member joined before credentials).
    Missing,
}

pub fn standing(expires: Option<Timestamp>, exists: bool, now: Timestamp) -> Standing {
    match (exists, expires) {
        (false, _) => Standing::Missing,
        // A credential that does not say when it ends: treated as ending now (only pinfed
        // join makes it, with its end).
        (true, None) => Standing::Ended(now),
        (true, Some(e)) if e <= now => Standing::Ended(e),
        (true, Some(e)) if e.duration_since(now) <= WARN_BEFORE => Standing::EndsSoon(e),
        (true, Some(e)) => Standing::Valid(e),
    }
}

/// The condition a standing shows (its message is stable while the standing is).
pub fn condition(s: Standing, member: &str, generation: Option<i64>, now: Timestamp) -> Condition {
    let join = format!("pinfed join {member} --mode pull --renew-credential");
    let (status, reason, message) = match s {
        Standing::Valid(e) => (
            ConditionStatus::True,
            "Valid",
            format!("the agent's credential on the hub lasts until {e}"),
        ),
        Standing::EndsSoon(e) => (
            ConditionStatus::True,
            "EndsSoon",
            format!("the agent's credential on the hub ends at {e}: renew it with `{join}`"),
        ),
        Standing::Ended(e) => (
            ConditionStatus::False,
            "Ended",
            format!(
                "the agent's credential on the hub ended at {e} and was deleted: its tokens are refused; join it again with `{join}`"
            ),
        ),
        Standing::Missing => (
            ConditionStatus::False,
            "Missing",
            format!(
                "the agent has no credential on the hub (deleted, or joined before credentials): join it again with `{join}`"
            ),
        ),
    };
    Condition {
        type_: CONDITION.into(),
        status,
        observed_generation: generation,
        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
        reason: reason.into(),
        message,
    }
}

/// What the hub last read of each pull member's credential.
#[derive(Default)]
pub struct Seen(Mutex<HashMap<String, Read>>);

#[derive(Clone)]
struct Read {
    at: Instant,
    expires: Option<Timestamp>,
    exists: bool,
    /// The Secret's uid, so the delete at its end takes this one only.
    uid: Option<String>,
    /// Warned of its end (once per process).
    warned: bool,
    /// Deleted by this hub at its end (until a new one is read).
    ended: Option<Timestamp>,
}

impl Read {
    fn standing(&self, now: Timestamp) -> Standing {
        match (self.exists, self.ended) {
            (false, Some(e)) => Standing::Ended(e),
            _ => standing(self.expires, self.exists, now),
        }
    }
}

/// Looks at `mc`'s credential (read again every minute, and at its end), deletes it when
/// it ended, and returns its condition; Warning Events when it ends soon or ended.
pub async fn check(
    hub: &kube::Client,
    seen: &Seen,
    recorder: &crate::controller::events::EventSink,
    mc: &MemberCluster,
) -> Condition {
    let name = kube::ResourceExt::name_any(mc);
    let now = Timestamp::now();
    let api: Api<Secret> = Api::namespaced(hub.clone(), &pull_namespace(&name));
    let known = seen.0.lock().expect("lock").get(&name).cloned();
    let due = known.as_ref().is_none_or(|r| {
        r.at.elapsed() >= READ_EVERY || !r.exists || r.expires.is_none_or(|e| e <= now)
    });
    let mut read = match (due, &known) {
        (false, Some(r)) => r.clone(),
        _ => match api.get_opt(AGENT_CREDENTIAL).await {
            Ok(s) => Read {
                at: Instant::now(),
                expires: s.as_ref().and_then(credential_expires),
                exists: s.is_some(),
                uid: s.as_ref().and_then(|s| s.metadata.uid.clone()),
                warned: known.as_ref().is_some_and(|r| r.warned),
                // (A new credential ends what this hub ended.)
                ended: known.as_ref().and_then(|r| r.ended).filter(|_| s.is_none()),
            },
            // Unread: what was known stands (or nothing is said yet).
            Err(e) => {
                tracing::warn!(member = %name, error = %e, "could not read the pull member's credential");
                return condition(
                    known.map_or(Standing::Missing, |r| r.standing(now)),
                    &name,
                    mc.metadata.generation,
                    now,
                );
            }
        },
    };
    let st = read.standing(now);
    let event = |type_, reason: &str, note: String| Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: reason.into(),
        secondary: None,
    };
    let reference = kube::Resource::object_ref(mc, &());
    match st {
        Standing::Ended(e) => {
            // (An ended credential is read at every look: `read` is this look's.)
            let gone = !read.exists || {
                let dp = DeleteParams {
                    preconditions: read.uid.clone().map(|uid| Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                match api.delete(AGENT_CREDENTIAL, &dp).await {
                    Ok(_) => true,
                    Err(kube::Error::Api(s)) => s.code == 404,
                    Err(_) => false,
                }
            };
            if gone && read.ended.is_none() {
                read.exists = false;
                read.ended = Some(e);
                tracing::warn!(member = %name, ended = %e, "the pull member's agent credential ended: deleted, its tokens are refused");
                let c = condition(st, &name, None, now);
                let _ = recorder
                    .publish(
                        &event(EventType::Warning, "CredentialEnded", c.message),
                        &reference,
                    )
                    .await;
            }
        }
        Standing::EndsSoon(e) if !read.warned => {
            read.warned = true;
            let left = e.duration_since(now).as_secs() / 3600;
            let _ = recorder
                .publish(
                    &event(
                        EventType::Warning,
                        "CredentialEndsSoon",
                        format!(
                            "the agent's credential on the hub ends at {e} (in {left} h): renew it with `pinfed join {name} --mode pull --renew-credential`"
                        ),
                    ),
                    &reference,
                )
                .await;
        }
        _ => {}
    }
    seen.0.lock().expect("lock").insert(name.clone(), read);
    condition(st, &name, mc.metadata.generation, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_is_valid_then_ends_soon_then_ended() {
        let now: Timestamp = "2026-11-29T12:00:00Z".parse().unwrap();
        let at = |h: i64| now + SignedDuration::from_hours(h);
        assert_eq!(
            standing(Some(at(24 * 30)), true, now),
            Standing::Valid(at(24 * 30))
        );
        assert_eq!(
            standing(Some(at(24 * 7)), true, now),
            Standing::EndsSoon(at(24 * 7))
        );
        assert_eq!(standing(Some(at(1)), true, now), Standing::EndsSoon(at(1)));
        assert_eq!(standing(Some(now), true, now), Standing::Ended(now));
        assert_eq!(
            standing(None, true, now),
            Standing::Ended(now),
            "no end said"
        );
        assert_eq!(standing(Some(at(1)), false, now), Standing::Missing);
        let c = condition(standing(Some(at(-1)), true, now), "use1c", Some(2), now);
        assert_eq!(
            (c.status, c.reason.as_str(), c.observed_generation),
            (ConditionStatus::False, "Ended", Some(2))
        );
        assert!(
            c.message
                .contains("pinfed join use1c --mode pull --renew-credential"),
            "{}",
            c.message
        );
        // Stable while the standing is: a status write only when it changes.
        let later = now + SignedDuration::from_secs(30);
        assert_eq!(
            condition(Standing::Valid(at(999)), "m", None, now).message,
            condition(Standing::Valid(at(999)), "m", None, later).message
        );
    }
}

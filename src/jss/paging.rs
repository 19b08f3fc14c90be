//! Pages of the workload lists (`GET /v1/workloads...?limit=N&continue=T`), pure: where a
//! page stops is a cursor — the kind it is in and the hub's own continue token for that
//! kind's list — written as an opaque token the client hands back. The kinds are listed
//! one after another in [`WorkloadKind::ALL`]'s order, each in the hub's order
//! (namespace, name): the order of an unpaged list.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::api::workload::WorkloadKind;

/// Most items one page may ask for.
pub const MAX_LIMIT: u32 = 5000;

/// Where the next page starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    /// The kind the page starts in.
    pub kind: WorkloadKind,
    /// The hub's continue token within that kind's list (none: from its start).
    pub hub: Option<String>,
}

impl Cursor {
    /// The token a client hands back.
    pub fn token(&self) -> String {
        let text = format!(
            "{}:{}",
            self.kind.as_str(),
            self.hub.as_deref().unwrap_or("")
        );
        URL_SAFE_NO_PAD.encode(text)
    }

    /// The cursor a token names, or why it names none.
    pub fn parse(token: &str) -> Result<Cursor, String> {
        let bad = || {
            "the continue token is not one this service issued: list again from the start"
                .to_string()
        };
        let bytes = URL_SAFE_NO_PAD.decode(token.trim()).map_err(|_| bad())?;
        let text = String::from_utf8(bytes).map_err(|_| bad())?;
        let (kind, hub) = text.split_once(':').ok_or_else(bad)?;
        let kind = WorkloadKind::from_kind(kind).ok_or_else(bad)?;
        Ok(Cursor {
            kind,
            hub: (!hub.is_empty()).then(|| hub.to_string()),
        })
    }
}

/// A page's size, checked.
pub fn check_limit(limit: u32) -> Result<u32, String> {
    if (1..=MAX_LIMIT).contains(&limit) {
        Ok(limit)
    } else {
        Err(format!(
            "limit must be between 1 and {MAX_LIMIT}, not {limit}"
        ))
    }
}

/// The kinds a page lists from, in order, starting at the cursor's (all of `kinds` when
/// there is none; none when the cursor's kind is not among them).
pub fn kinds_from(kinds: &[WorkloadKind], cursor: Option<&Cursor>) -> Vec<WorkloadKind> {
    match cursor {
        None => kinds.to_vec(),
        Some(c) => kinds
            .iter()
            .skip_while(|k| **k != c.kind)
            .copied()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_through_its_token() {
        for c in [
            Cursor {
                kind: WorkloadKind::JobSet,
                hub: Some("eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzfQ".into()),
            },
            Cursor {
                kind: WorkloadKind::StatefulSet,
                hub: None,
            },
        ] {
            let t = c.token();
            assert!(
                t.chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_'),
                "{t}"
            );
            assert_eq!(Cursor::parse(&t), Ok(c));
        }
    }

    #[test]
    fn a_token_this_service_did_not_issue_is_refused_with_the_way_out() {
        for t in [
            "",
            "!!",
            &URL_SAFE_NO_PAD.encode("Nope:x"),
            &URL_SAFE_NO_PAD.encode("no colon"),
        ] {
            let e = Cursor::parse(t).unwrap_err();
            assert!(e.contains("list again from the start"), "{t}: {e}");
        }
    }

    #[test]
    fn limits_are_bounded() {
        assert_eq!(check_limit(1), Ok(1));
        assert_eq!(check_limit(MAX_LIMIT), Ok(MAX_LIMIT));
        assert!(check_limit(0).unwrap_err().contains("between 1 and 5000"));
        assert!(check_limit(MAX_LIMIT + 1).is_err());
    }

    #[test]
    fn a_page_starts_at_its_cursors_kind() {
        let all = WorkloadKind::ALL;
        assert_eq!(kinds_from(&all, None), all.to_vec());
        let c = Cursor {
            kind: WorkloadKind::Daemon,
            hub: None,
        };
        assert_eq!(
            kinds_from(&all, Some(&c)),
            [
                WorkloadKind::Daemon,
                WorkloadKind::TrainingJob,
                WorkloadKind::StatefulSet
            ]
        );
        // A cursor of another kind than the one asked for lists nothing.
        assert!(kinds_from(&[WorkloadKind::Service], Some(&c)).is_empty());
    }
}

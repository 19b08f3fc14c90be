//! Names of generated objects and sanitized label values.
//!
//! A generated name is `<workload>-<suffix>` when that is valid and short enough. Otherwise
//! the workload part is sanitized and truncated and an 8-character hash of the full intended
//! name is inserted before the suffix, so names stay unique, deterministic and readable
//! (`a-very-long-name-...-3f9a12bc-worker-3`).

use sha2::{Digest, Sha256};

use crate::api::validation::{is_dns_label, is_label_value};

/// Longest name of most objects (a DNS label).
pub const MAX_NAME: usize = 63;
/// Longest StatefulSet name: its pods carry the label `controller-revision-hash =
/// <name>-<10-char hash>`, which must stay a valid label value.
pub const MAX_STATEFULSET_NAME: usize = 52;
/// Longest CronJob name (Kubernetes validates it: Job names append 11 characters).
pub const MAX_CRONJOB_NAME: usize = 52;

/// First 8 hex characters of SHA-256.
pub fn short_hash(s: &str) -> String {
    let d = Sha256::digest(s.as_bytes());
    d.iter().take(4).map(|b| format!("{b:02x}")).collect()
}

fn is_dns1035_label(s: &str) -> bool {
    is_dns_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// Lower-cases and replaces every character that may not appear in a DNS label with '-',
/// collapsing runs and trimming '-' at both ends.
fn sanitize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// A name for a child object of `base`: a DNS label of at most `max` characters.
/// `dns1035` additionally requires a leading letter (Service names).
pub fn child_name(base: &str, suffix: &str, max: usize, dns1035: bool) -> String {
    let candidate = if suffix.is_empty() {
        base.to_string()
    } else {
        format!("{base}-{suffix}")
    };
    let valid = if dns1035 {
        is_dns1035_label(&candidate)
    } else {
        is_dns_label(&candidate)
    };
    if valid && candidate.len() <= max {
        return candidate;
    }
    let hash = short_hash(&candidate);
    let suffix = sanitize(suffix);
    // Keep the suffix readable unless it alone is too long.
    let tail = if !suffix.is_empty() && suffix.len() + hash.len() + 2 < max {
        format!("-{hash}-{suffix}")
    } else {
        format!("-{hash}")
    };
    let mut head = sanitize(base);
    if dns1035 && !head.starts_with(|c: char| c.is_ascii_lowercase()) {
        head.insert(0, 'x');
    }
    let room = max.saturating_sub(tail.len());
    head.truncate(room);
    let head = head.trim_end_matches('-');
    if head.is_empty() {
        // Only a hash (and suffix) left; a DNS-1035 name must still start with a letter.
        let t = tail.trim_start_matches('-');
        return if dns1035 {
            format!("x{tail}")
        } else {
            t.to_string()
        };
    }
    format!("{head}{tail}")
}

/// The name of the workload's main object(s) (`<workload>`), made a valid DNS label.
pub fn object_name(workload: &str) -> String {
    child_name(workload, "", MAX_NAME, false)
}

/// A valid label value for `s`: unchanged when valid; otherwise invalid characters become
/// '-', ends are trimmed to alphanumerics, and an over-long value is truncated with a hash.
pub fn label_value(s: &str) -> String {
    if is_label_value(s) {
        return s.to_string();
    }
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trim = |x: &str| {
        x.trim_matches(|c: char| !c.is_ascii_alphanumeric())
            .to_string()
    };
    out = trim(&out);
    if out.len() > 63 {
        let hash = short_hash(s);
        out.truncate(63 - hash.len() - 1);
        out = format!("{}-{hash}", trim(&out));
    }
    if out.is_empty() {
        // Nothing usable survived (validation rejects such teams; be total anyway).
        out = format!("x{}", short_hash(s));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_kept() {
        assert_eq!(child_name("web", "config", MAX_NAME, false), "web-config");
        assert_eq!(child_name("web", "", MAX_NAME, true), "web");
        assert_eq!(object_name("web"), "web");
    }

    #[test]
    fn long_names_are_shortened_with_a_hash() {
        let base = "a".repeat(70);
        let n = child_name(&base, "worker-3", MAX_NAME, false);
        assert_eq!(n.len(), MAX_NAME);
        assert!(is_dns_label(&n));
        assert!(n.ends_with("-worker-3"), "{n}");
        // Deterministic, and distinct for distinct inputs.
        assert_eq!(n, child_name(&base, "worker-3", MAX_NAME, false));
        assert_ne!(n, child_name(&base, "worker-4", MAX_NAME, false));
        let other = format!("{}b", "a".repeat(69));
        assert_ne!(
            child_name(&base, "0", MAX_NAME, false),
            child_name(&other, "0", MAX_NAME, false)
        );
        let s = child_name(&base, "", MAX_STATEFULSET_NAME, false);
        assert!(s.len() <= MAX_STATEFULSET_NAME && is_dns_label(&s), "{s}");
    }

    #[test]
    fn invalid_names_are_sanitized() {
        let n = child_name("my.app", "0", MAX_NAME, false);
        assert!(is_dns_label(&n), "{n}");
        assert!(n.starts_with("my-app-") && n.ends_with("-0"), "{n}");
        let svc = child_name("1st", "", MAX_NAME, true);
        assert!(is_dns1035_label(&svc), "{svc}");
        let weird = child_name("...", "", MAX_NAME, true);
        assert!(is_dns1035_label(&weird), "{weird}");
        let weird = child_name("...", "", MAX_NAME, false);
        assert!(is_dns_label(&weird), "{weird}");
        let long_suffix = child_name("x", &"s".repeat(80), MAX_NAME, false);
        assert!(is_dns_label(&long_suffix), "{long_suffix}");
    }

    #[test]
    fn label_values() {
        assert_eq!(label_value("ads-ranking"), "ads-ranking");
        assert_eq!(label_value("Ads Ranking"), "Ads-Ranking");
        assert_eq!(label_value("ads@pinterest.com"), "ads-pinterest.com");
        assert_eq!(label_value("-team-"), "team");
        let long = label_value(&"t".repeat(100));
        assert!(long.len() <= 63 && is_label_value(&long), "{long}");
        let empty = label_value("@@@");
        assert!(is_label_value(&empty) && !empty.is_empty());
    }
}

//! Kubernetes name and label syntax, shared by the topology loader and the API validators.

/// RFC 1123 DNS label: lower-case alphanumerics and '-', starting and ending alphanumeric,
/// at most 63 characters.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 DNS subdomain: dot-separated DNS labels, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A label value: empty, or at most 63 characters of alphanumerics, '-', '_' and '.',
/// starting and ending alphanumeric.
pub fn is_label_value(s: &str) -> bool {
    if s.is_empty() {
        return true;
    }
    let ends_ok = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && ends_ok(s.bytes().next())
        && ends_ok(s.bytes().last())
}

/// A qualified name (label key, taint key): optional DNS-subdomain prefix and '/', then a
/// name part that follows the label-value rules but may not be empty.
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(is_dns_subdomain) && !name.is_empty() && is_label_value(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        assert!(is_dns_label("use1a"));
        assert!(is_dns_label("a-b-1"));
        for bad in ["", "A", "-a", "a-", "a_b", "a.b", &"x".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad:?}");
        }
    }

    #[test]
    fn label_values_and_keys() {
        assert!(is_label_value(""));
        assert!(is_label_value("ads-team_1.x"));
        assert!(!is_label_value("a@b.com"));
        assert!(!is_label_value("-a"));
        assert!(is_qualified_name("pinterest.com/pool"));
        assert!(is_qualified_name("tier"));
        assert!(!is_qualified_name("pinterest.com/"));
        assert!(!is_qualified_name("Bad_Prefix/x"));
    }
}

//! Unique names.

/// `prefix-<hex>`: unique enough for one machine (pid and sub-second clock), short enough
/// for a Kubernetes name.
pub fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!(
        "{prefix}-{:x}{:x}",
        std::process::id() % 0xfff,
        nanos % 0xfffff
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_unique_name_is_a_dns_label_with_the_prefix() {
        let n = super::unique_name("ns");
        assert!(n.starts_with("ns-") && n.len() <= 63, "{n}");
        assert!(
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{n}"
        );
    }
}

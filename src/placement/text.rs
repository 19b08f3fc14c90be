//! Quantities as people read them in reasons: `2`, `500m`, `4Gi`.

use super::model::Resources;

/// CPU in milli-cores: `2`, `500m`.
pub(crate) fn cpu(milli: i128) -> String {
    if milli % 1000 == 0 {
        format!("{}", milli / 1000)
    } else {
        format!("{milli}m")
    }
}

/// Memory in milli-bytes: the largest binary suffix that divides it exactly.
pub(crate) fn memory(milli: i128) -> String {
    if milli % 1000 != 0 {
        return format!("{milli}m");
    }
    let bytes = milli / 1000;
    for (suffix, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        let unit = 1i128 << shift;
        if bytes != 0 && bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// A pod request: `cpu 2, memory 4Gi, gpu 1` (zero dimensions left out).
pub(crate) fn request(r: &Resources) -> String {
    let mut parts = Vec::new();
    if r.cpu.0 != 0 {
        parts.push(format!("cpu {}", cpu(r.cpu.0)));
    }
    if r.memory.0 != 0 {
        parts.push(format!("memory {}", memory(r.memory.0)));
    }
    if r.gpu != 0 {
        parts.push(format!("gpu {}", r.gpu));
    }
    if parts.is_empty() {
        parts.push("no resources".to_string());
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::quantity::Milli;

    #[test]
    fn formats_like_kubernetes() {
        assert_eq!(cpu(2000), "2");
        assert_eq!(cpu(500), "500m");
        assert_eq!(memory(Milli::parse("4Gi").unwrap().0), "4Gi");
        assert_eq!(memory(Milli::parse("1536Mi").unwrap().0), "1536Mi");
        assert_eq!(memory(Milli::parse("1000").unwrap().0), "1000");
        assert_eq!(
            request(&Resources::pod(Milli(250), Milli::parse("1Gi").unwrap(), 1)),
            "cpu 250m, memory 1Gi, gpu 1"
        );
    }
}

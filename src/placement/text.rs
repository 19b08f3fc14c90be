//! Requests as reasons show them, in the quantities of `Milli::format_cpu`/`format_memory`.

use super::model::Resources;

/// A pod request: `cpu 2, memory 4Gi, gpu 1` (zero dimensions left out).
pub(crate) fn request(r: &Resources) -> String {
    let mut parts = Vec::new();
    if r.cpu.0 != 0 {
        parts.push(format!("cpu {}", r.cpu.format_cpu()));
    }
    if r.memory.0 != 0 {
        parts.push(format!("memory {}", r.memory.format_memory()));
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
        assert_eq!(
            request(&Resources::pod(
                Milli(2500),
                Milli::parse("1536Mi").unwrap(),
                0
            )),
            "cpu 2500m, memory 1536Mi"
        );
        assert_eq!(
            request(&Resources::pod(Milli(250), Milli::parse("1Gi").unwrap(), 1)),
            "cpu 250m, memory 1Gi, gpu 1"
        );
    }
}

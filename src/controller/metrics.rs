//! Reconcile metrics in the shape every pinfed controller reports: counts by kind and
//! outcome, duration histograms, errors by reason (the error enum's variant), queue depth.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub kind: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: String,
    pub reason: String,
}

#[derive(Clone)]
pub struct ReconcileMetrics {
    pub reconciles: Family<OutcomeLabels, Counter>,
    pub errors: Family<ErrorLabels, Counter>,
    pub duration: Family<KindLabels, Histogram>,
    pub applied_objects: Family<KindLabels, Counter<u64, AtomicU64>>,
    /// Workloads refused (member policy, a name clash), by kind and reason.
    pub refusals: Family<ErrorLabels, Counter>,
    /// Generated objects someone else changed or deleted, as the watches saw it (each
    /// brings its workload's objects back), by the object's kind.
    pub drift: Family<KindLabels, Counter>,
    /// Agent: slice status writes held back while the pods come up (`--status-hold-ms`),
    /// by kind; each is a write that a later status replaced or that waited.
    pub statuses_held: Family<KindLabels, Counter>,
    /// Agent: reconciles that waited for an earlier slice's objects of the same name to
    /// be garbage-collected, by kind.
    pub leftover_waits: Family<KindLabels, Counter>,
}

impl ReconcileMetrics {
    /// Registers the metrics under `prefix` (e.g. `pinfed_agent`).
    pub fn register(registry: &mut Registry) -> ReconcileMetrics {
        let m = ReconcileMetrics {
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            }),
            applied_objects: Family::default(),
            refusals: Family::default(),
            drift: Family::default(),
            statuses_held: Family::default(),
            leftover_waits: Family::default(),
        };
        registry.register(
            "reconciles",
            "Reconciliations by kind and outcome",
            m.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconcile errors by kind and reason",
            m.errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconciliation",
            m.duration.clone(),
        );
        registry.register(
            "applied_objects",
            "Objects server-side applied",
            m.applied_objects.clone(),
        );
        registry.register(
            "refusals",
            "Workloads refused (member policy, objects of the same name someone else owns), by kind and reason",
            m.refusals.clone(),
        );
        registry.register(
            "drift_detected",
            "Generated objects someone else changed or deleted (each is repaired), by kind",
            m.drift.clone(),
        );
        registry.register(
            "status_writes_held",
            "Agent: slice status writes held back while the pods come up (--status-hold-ms), by kind",
            m.statuses_held.clone(),
        );
        registry.register(
            "leftover_waits",
            "Agent: reconciles that waited for an earlier slice's objects of the same name to be garbage-collected, by kind",
            m.leftover_waits.clone(),
        );
        m
    }

    /// Counts one refusal of a workload of `kind`.
    pub fn refused(&self, kind: &str, reason: &str) {
        self.refusals
            .get_or_create(&ErrorLabels {
                kind: kind.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Starts timing one reconciliation; call [`ReconcileTimer::finish`] with the outcome.
    pub fn start(&self, kind: &str) -> ReconcileTimer {
        ReconcileTimer {
            metrics: self.clone(),
            kind: kind.to_string(),
            started: Instant::now(),
        }
    }
}

pub struct ReconcileTimer {
    metrics: ReconcileMetrics,
    kind: String,
    started: Instant,
}

impl ReconcileTimer {
    /// Records the outcome; `error_reason` is the error variant's name, if it failed.
    pub fn finish(self, error_reason: Option<&str>) {
        let kind = self.kind.clone();
        self.metrics
            .duration
            .get_or_create(&KindLabels { kind: kind.clone() })
            .observe(self.started.elapsed().as_secs_f64());
        let outcome = if error_reason.is_some() {
            "error"
        } else {
            "ok"
        };
        self.metrics
            .reconciles
            .get_or_create(&OutcomeLabels {
                kind: kind.clone(),
                outcome: outcome.into(),
            })
            .inc();
        if let Some(reason) = error_reason {
            self.metrics
                .errors
                .get_or_create(&ErrorLabels {
                    kind,
                    reason: reason.into(),
                })
                .inc();
        }
    }
}

/// A registry shared with the HTTP server.
pub type SharedRegistry = Arc<Registry>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconcile_outcomes_are_encoded_with_their_labels() {
        let mut registry = Registry::with_prefix("pinfed_test");
        let m = ReconcileMetrics::register(&mut registry);
        m.start("PinterestService").finish(None);
        m.start("PinterestService").finish(Some("Apply"));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        assert!(
            out.contains(r#"pinfed_test_reconciles_total{kind="PinterestService",outcome="ok"} 1"#),
            "{out}"
        );
        assert!(
            out.contains(
                r#"pinfed_test_reconcile_errors_total{kind="PinterestService",reason="Apply"} 1"#
            ),
            "{out}"
        );
        assert!(
            out.contains("pinfed_test_reconcile_duration_seconds_count"),
            "{out}"
        );
    }
}

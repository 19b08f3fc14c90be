//! Events on the objects pinfed reconciles.
//!
//! kube's `Recorder` keeps every Event it wrote for 6 minutes, to count repeats as a
//! series, and scans that cache on every publish. A hub placing 10,000 workloads writes one
//! Normal Event each: 11.8 MB of cached Events at 4,300 placed and a quadratic scan (heap
//! profile of scale10k, docs/benchmarks.md). Normal Events (placed, expanded) are one-offs,
//! so they go out without the cache; Warnings, which do repeat, keep their series.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

pub struct EventSink {
    client: Client,
    reporter: Reporter,
    warnings: Recorder,
}

impl EventSink {
    pub fn new(client: Client, reporter: Reporter) -> EventSink {
        EventSink {
            warnings: Recorder::new(client.clone(), reporter.clone()),
            client,
            reporter,
        }
    }

    pub async fn publish(
        &self,
        ev: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        match ev.type_ {
            EventType::Warning => self.warnings.publish(ev, reference).await,
            // A recorder per Event: nothing cached, nothing to scan.
            EventType::Normal => {
                Recorder::new(self.client.clone(), self.reporter.clone())
                    .publish(ev, reference)
                    .await
            }
        }
    }
}

//! Logs, and traces of one change across the federation.
//!
//! Spans mark the stages of a JSS submission, a hub reconcile and an agent reconcile.
//! They are declared at TRACE level under their own target ([`TARGET`]), so with no
//! exporter configured no subscriber enables them and they cost a disabled callsite's
//! check. With `--otlp-endpoint` they are exported over OTLP/HTTP (protobuf or JSON) in
//! batches. One trace follows a change: the JSS writes its submission's context into the
//! workload ([`ANNOTATION_TRACEPARENT`], W3C `traceparent`), the hub continues it while
//! the members have not caught up with the change and writes its own context into the
//! slices it writes, and each agent continues that while its slice's change is not done.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

pub use crate::api::member_slice::ANNOTATION_TRACEPARENT;

/// The target of pinfed's trace spans (`tracing::trace_span!(target: "pinfed::trace", ..)`).
pub const TARGET: &str = "pinfed::trace";

/// Where spans go (clap, with the OpenTelemetry SDK's environment variables as fallbacks).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TraceArgs {
    /// OTLP/HTTP collector to export spans to, e.g. `http://127.0.0.1:4318` (spans go to
    /// `/v1/traces` under it). Unset: no span is recorded.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// `http/protobuf` or `http/json`.
    #[arg(
        long,
        env = "OTEL_EXPORTER_OTLP_PROTOCOL",
        default_value = "http/protobuf"
    )]
    pub otlp_protocol: String,
}

/// Keeps the span exporter; dropped, it sends what is left.
#[must_use = "spans are exported while this lives"]
pub struct TraceGuard(Option<SdkTracerProvider>);

impl Drop for TraceGuard {
    fn drop(&mut self) {
        if let Some(p) = self.0.take()
            && let Err(e) = p.shutdown()
        {
            tracing::warn!(error = %e, "the span exporter did not shut down cleanly");
        }
    }
}

/// Logs to stderr (`RUST_LOG` filters, default `info`); exports spans as `service` when
/// `args` names an endpoint.
pub fn init_tracing(service: &str, args: &TraceArgs) -> anyhow::Result<TraceGuard> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,kube=warn".into());
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let provider = match args.otlp_endpoint.as_deref().filter(|e| !e.is_empty()) {
        Some(endpoint) => Some(provider(service, endpoint, &args.otlp_protocol)?),
        None => None,
    };
    let spans = provider.as_ref().map(|p| {
        // The trace spans, and what pinfed logs inside them (as span events).
        let only = tracing_subscriber::filter::Targets::new()
            .with_target(TARGET, tracing::Level::TRACE)
            .with_target("pinfed", tracing::Level::INFO);
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("pinfed"))
            .with_filter(only)
    });
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(spans)
        .try_init();
    if let Some(endpoint) = &args.otlp_endpoint {
        tracing::info!(%endpoint, protocol = %args.otlp_protocol, service, "exporting spans over OTLP");
    }
    Ok(TraceGuard(provider))
}

fn provider(service: &str, endpoint: &str, protocol: &str) -> anyhow::Result<SdkTracerProvider> {
    let protocol = match protocol {
        "http/protobuf" => Protocol::HttpBinary,
        "http/json" => Protocol::HttpJson,
        other => anyhow::bail!(
            "--otlp-protocol (OTEL_EXPORTER_OTLP_PROTOCOL) {other:?}: pinfed exports over \
             OTLP/HTTP, use http/protobuf or http/json"
        ),
    };
    let url: http::Uri = endpoint.parse().map_err(|e| {
        anyhow::anyhow!("--otlp-endpoint (OTEL_EXPORTER_OTLP_ENDPOINT) {endpoint:?}: {e}")
    })?;
    anyhow::ensure!(
        url.scheme_str() == Some("http") && url.host().is_some(),
        "--otlp-endpoint (OTEL_EXPORTER_OTLP_ENDPOINT) {endpoint:?}: an http:// address of an \
         OTLP/HTTP collector (a node-local or sidecar collector; TLS is the collector's)"
    );
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
        .with_http_client(OnOwnRuntime::new()?)
        .build()?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(service.to_string())
                .build(),
        )
        .build())
}

/// The OTLP client on a runtime of its own: the batch exporter sends from its own thread,
/// outside the daemon's runtime, and hyper needs one.
#[derive(Debug, Clone)]
struct OnOwnRuntime {
    client: opentelemetry_http::hyper::HyperClient,
    runtime: Arc<tokio::runtime::Runtime>,
}

impl OnOwnRuntime {
    fn new() -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("otlp-export")
            .enable_all()
            .build()?;
        Ok(Self {
            client: opentelemetry_http::hyper::HyperClient::with_default_connector(
                std::time::Duration::from_secs(10),
                None,
            ),
            runtime: Arc::new(runtime),
        })
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OnOwnRuntime {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { client.send_bytes(request).await })
            .await?
    }
}

/// `span` continues the trace whose context `annotations` carry (a valid W3C
/// `traceparent` in [`ANNOTATION_TRACEPARENT`]); anything else leaves it a root.
pub fn follow(span: &tracing::Span, annotations: Option<&BTreeMap<String, String>>) {
    follow_parent(
        span,
        annotations.and_then(|a| a.get(ANNOTATION_TRACEPARENT).map(String::as_str)),
    );
}

/// `span` continues the trace of `traceparent` (W3C, e.g. an HTTP request's header) when
/// it is valid; else it stays a root.
pub fn follow_parent(span: &tracing::Span, traceparent: Option<&str>) {
    if span.is_disabled() {
        return;
    }
    let Some(value) = traceparent else {
        return;
    };
    let carrier = HashMap::from([("traceparent".to_string(), value.to_string())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    if cx.span().span_context().is_remote() {
        let _ = span.set_parent(cx);
    }
}

/// `span`'s context as a W3C `traceparent`, when it is recorded.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    if span.is_disabled() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&span.context(), &mut carrier);
    carrier.remove("traceparent")
}

/// The trace id of `span` (32 hex digits), when it is recorded: what a user looks up in
/// the tracing backend.
pub fn trace_id(span: &tracing::Span) -> Option<String> {
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| sc.trace_id().to_string())
}

/// Sets [`ANNOTATION_TRACEPARENT`] of `annotations` to the current span's context when one
/// is recorded (else leaves them as they are).
pub fn mark(annotations: &mut BTreeMap<String, String>) {
    if let Some(t) = traceparent(&tracing::Span::current()) {
        annotations.insert(ANNOTATION_TRACEPARENT.to_string(), t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_endpoints_and_protocols_are_refused_by_name() {
        let e = provider("t", "http://127.0.0.1:4318", "grpc").expect_err("grpc refused");
        assert!(e.to_string().contains("--otlp-protocol"), "{e}");
        let e = provider("t", "https://collector:4318", "http/json").expect_err("https refused");
        assert!(e.to_string().contains("--otlp-endpoint"), "{e}");
        let e = provider("t", "not a url", "http/json").expect_err("garbage refused");
        assert!(e.to_string().contains("--otlp-endpoint"), "{e}");
    }

    #[test]
    fn with_no_exporter_spans_are_off_and_carry_nothing() {
        let span = tracing::trace_span!(target: "pinfed::trace", "t");
        assert!(traceparent(&span).is_none());
        let mut a = BTreeMap::new();
        let _in = span.enter();
        mark(&mut a);
        assert!(a.is_empty());
        follow(&span, Some(&a));
    }

    #[test]
    fn a_context_goes_out_and_comes_back_the_same() {
        // A subscriber with the OpenTelemetry layer, for this thread only.
        let provider = SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("t")));
        tracing::subscriber::with_default(subscriber, || {
            let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
            let annotations =
                BTreeMap::from([(ANNOTATION_TRACEPARENT.to_string(), parent.to_string())]);
            let span = tracing::trace_span!(target: "pinfed::trace", "child");
            follow(&span, Some(&annotations));
            let mine = traceparent(&span).expect("recorded");
            assert!(
                mine.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
                "same trace: {mine}"
            );
            assert!(
                !mine.contains("00f067aa0ba902b7"),
                "its own span id: {mine}"
            );
            // Garbage is no parent: a new root.
            let bad = BTreeMap::from([(ANNOTATION_TRACEPARENT.to_string(), "00-zz".into())]);
            let root = tracing::trace_span!(target: "pinfed::trace", "root");
            follow(&root, Some(&bad));
            let t = traceparent(&root).expect("recorded");
            assert!(!t.contains("4bf92f3577b34da6a3ce929d0e0e4736"), "{t}");
        });
    }
}

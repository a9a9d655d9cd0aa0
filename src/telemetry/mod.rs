//! OpenTelemetry traces of runs: with `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set, every run segment the engine drives is exported
//! over OTLP/HTTP as one trace per run (the trace id is derived from the run id, so a resumed
//! segment joins its run's trace), with a span per phase, branch, step, agent call, turn and
//! tool call (`spans.rs` turns the run's events into spans).
//!
//! Export never slows or fails a run: finished spans go to the SDK's batch processor (a
//! bounded queue drained by its own thread; a full queue drops spans), every export has a
//! timeout, and [`Telemetry::shutdown`] waits for the last batch at most a bounded time.

mod spans;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SpanProcessor};

use tokio::task::JoinHandle;

use crate::engine::{EventStream, RunObserver};
use crate::store::RunId;

/// The variable that says whether prompts and answers are exported.
pub const CAPTURE_CONTENT_VAR: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// How long an export may take when `OTEL_EXPORTER_OTLP_TIMEOUT` does not say.
const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long [`Telemetry::shutdown`] waits for the last spans by default.
#[cfg_attr(not(feature = "cli"), allow(dead_code))] // read by the CLI
pub(crate) const DEFAULT_FLUSH_DEADLINE: Duration = Duration::from_secs(2);

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` names a protocol this build does not export.
    #[error("OTEL_EXPORTER_OTLP_PROTOCOL={0:?} is not supported: use http/protobuf or http/json")]
    UnsupportedProtocol(String),
    /// The exporter could not be built (an invalid endpoint, say).
    #[error("the OTLP exporter could not be built: {0}")]
    Exporter(String),
}

/// What the environment asks of telemetry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// The wire protocol.
    pub json: bool,
    /// Whether prompts and answers are exported.
    pub capture_content: bool,
}

impl TelemetryConfig {
    /// The configuration the standard variables describe, or `None` when no OTLP endpoint is
    /// set (then nothing is exported).
    ///
    /// # Errors
    /// [`TelemetryError::UnsupportedProtocol`] for a protocol other than `http/protobuf`
    /// (the default) or `http/json`.
    pub fn from_env() -> Result<Option<TelemetryConfig>, TelemetryError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none() && var("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
        {
            return Ok(None);
        }
        let protocol =
            var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"));
        let json = match protocol.as_deref().map(str::trim) {
            None | Some("http/protobuf") => false,
            Some("http/json") => true,
            Some(other) => return Err(TelemetryError::UnsupportedProtocol(other.to_owned())),
        };
        let capture_content = var(CAPTURE_CONTENT_VAR).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        Ok(Some(TelemetryConfig { json, capture_content }))
    }
}

/// The OTLP trace exporter of an engine's runs: register it with
/// [`EngineBuilder::observer`](crate::EngineBuilder::observer), and call
/// [`Telemetry::shutdown`] before the process exits.
pub struct Telemetry {
    processor: Arc<BatchSpanProcessor>,
    capture_content: bool,
    /// The tasks turning segments' events into spans, still running or not yet joined.
    trackers: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").field("capture_content", &self.capture_content).finish_non_exhaustive()
    }
}

impl Telemetry {
    /// The exporter the environment asks for, or `None` without an OTLP endpoint.
    ///
    /// # Errors
    /// As for [`TelemetryConfig::from_env`], and [`TelemetryError::Exporter`].
    pub fn from_env() -> Result<Option<Arc<Telemetry>>, TelemetryError> {
        match TelemetryConfig::from_env()? {
            Some(config) => Telemetry::new(&config).map(Some),
            None => Ok(None),
        }
    }

    /// An exporter to the endpoint the standard variables name, configured by `config`.
    ///
    /// # Errors
    /// [`TelemetryError::Exporter`] when the exporter cannot be built.
    pub fn new(config: &TelemetryConfig) -> Result<Arc<Telemetry>, TelemetryError> {
        let timeout_set = ["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"]
            .iter()
            .any(|name| std::env::var(name).is_ok_and(|v| v.trim().parse::<u64>().is_ok()));
        // The exporter's reqwest 0.13 is built without a default TLS provider (as for the MCP
        // client): the process-wide one is ring's (a no-op when one is installed already).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let protocol = if config.json { Protocol::HttpJson } else { Protocol::HttpBinary };
        let mut builder = opentelemetry_otlp::SpanExporter::builder().with_http().with_protocol(protocol);
        if !timeout_set {
            builder = builder.with_timeout(DEFAULT_EXPORT_TIMEOUT);
        }
        let exporter = builder.build().map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let batch = BatchConfigBuilder::default().build();
        let mut processor = BatchSpanProcessor::builder(exporter).with_batch_config(batch).build();
        // The default detectors read `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`.
        let mut resource = Resource::builder();
        if std::env::var("OTEL_SERVICE_NAME").is_err() {
            resource = resource.with_service_name("cairn");
        }
        let resource =
            resource.with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))).build();
        processor.set_resource(&resource);
        Ok(Arc::new(Telemetry {
            processor: Arc::new(processor),
            capture_content: config.capture_content,
            trackers: Mutex::new(Vec::new()),
        }))
    }

    /// Waits (at most `deadline` in all) for the spans of the segments that settled to be
    /// built, then sends what is still queued and stops the exporter: a collector that is
    /// down or hangs costs the caller no more than `deadline`. Call it on the runtime the
    /// runs were driven on, before the process exits.
    pub async fn shutdown(&self, deadline: Duration) {
        let start = tokio::time::Instant::now();
        let trackers = std::mem::take(&mut *self.lock_trackers());
        let joined = tokio::time::timeout(deadline, futures::future::join_all(trackers)).await;
        if joined.is_err() {
            tracing::debug!("telemetry: spans of a segment still open at shutdown were not built");
        }
        let left = deadline.saturating_sub(start.elapsed()).max(Duration::from_millis(50));
        let processor = self.processor.clone();
        let flushed = tokio::task::spawn_blocking(move || processor.shutdown_with_timeout(left)).await;
        if let Ok(Err(error)) = flushed {
            tracing::debug!(%error, "telemetry: the last spans were not all exported");
        }
    }

    fn lock_trackers(&self) -> MutexGuard<'_, Vec<JoinHandle<()>>> {
        self.trackers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl RunObserver for Telemetry {
    fn segment_started(&self, run_id: &RunId, events: EventStream) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!("telemetry: no tokio runtime; run {run_id} is not traced");
            return;
        };
        let processor = self.processor.clone();
        let mut tracker = spans::Tracker::new(run_id, self.capture_content);
        let mut events = events;
        let task = runtime.spawn(async move {
            while let Some(event) = events.next().await {
                for span in tracker.observe(&event) {
                    processor.on_end(span);
                }
            }
            for span in tracker.finish() {
                processor.on_end(span);
            }
        });
        let mut trackers = self.lock_trackers();
        trackers.retain(|t| !t.is_finished());
        trackers.push(task);
    }

    fn wants_content(&self) -> bool {
        self.capture_content
    }
}

//! The CLI's OpenTelemetry exporter: set up once per process from the standard `OTEL_*`
//! variables for the commands that drive runs (`run`, `resume`, `orchestrate`, `worker`,
//! `serve`), registered on every engine the command builds, and shut down (bounded) before
//! the command's runtime ends.

use std::sync::{Arc, OnceLock};

use crate::telemetry::{DEFAULT_FLUSH_DEADLINE, Telemetry};

static TELEMETRY: OnceLock<Arc<Telemetry>> = OnceLock::new();

/// Sets the exporter up when `OTEL_EXPORTER_OTLP_ENDPOINT` (or its traces twin) is set.
///
/// # Errors
/// The message of an unsupported protocol or an exporter that cannot be built.
pub(super) fn install() -> Result<(), String> {
    if let Some(telemetry) = Telemetry::from_env().map_err(|e| e.to_string())? {
        let _ = TELEMETRY.set(telemetry);
    }
    Ok(())
}

/// The process's exporter, if installed.
pub(super) fn current() -> Option<Arc<Telemetry>> {
    TELEMETRY.get().cloned()
}

/// Exports what is left, within the flush deadline.
pub(super) async fn shutdown() {
    if let Some(telemetry) = current() {
        telemetry.shutdown(DEFAULT_FLUSH_DEADLINE).await;
    }
}

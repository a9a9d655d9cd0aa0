//! Diagnostics on stderr: the `tracing` subscriber. `cairn serve` and `cairn worker` always
//! log (`warn` and up from every crate, `info` and up from cairn's own), so a run that could
//! not be driven or a failed claim is never silent; other commands log only when asked, with
//! `RUST_LOG` or `--log-level`. `--log-format json` writes one JSON object a line
//! (`{ts_ms, level, target, message, fields}`), for a log collector.

use std::fmt;

use clap::ValueEnum;
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(super) enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object a line.
    Json,
}

/// The filter a long-running command logs with when neither `RUST_LOG` nor `--log-level` says.
const SERVICE_DEFAULT: &str = "warn,cairn=info";

/// Installs the subscriber. `level` (`--log-level`, any `RUST_LOG` directive) wins over
/// `RUST_LOG`; without either, only a service command (`always`) logs, at its default.
/// An invalid directive is refused with a usage error message.
pub(super) fn install(level: Option<&str>, format: LogFormat, always: bool) -> Result<(), String> {
    let from_env = std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty());
    let directives = match (level, from_env) {
        (Some(level), _) => level.to_owned(),
        (None, Some(env)) => env,
        (None, None) if always => SERVICE_DEFAULT.to_owned(),
        (None, None) => return Ok(()),
    };
    let filter = EnvFilter::builder()
        .parse(&directives)
        .map_err(|e| format!("--log-level / RUST_LOG {directives:?} is not a log filter: {e}"))?;
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder =
        tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(ansi).with_env_filter(filter);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.event_format(JsonLines).try_init(),
    };
    // Already installed (a test harness, a host application): keep theirs.
    let _ = installed;
    Ok(())
}

/// One JSON object a line.
struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        let mut fields = Map::new();
        event.record(&mut Fields(&mut fields));
        let meta = event.metadata();
        let ts_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let message = fields.remove("message").unwrap_or(Value::Null);
        let line = serde_json::json!({
            "ts_ms": ts_ms,
            "level": meta.level().as_str(),
            "target": meta.target(),
            "message": message,
            "fields": fields,
        });
        writeln!(writer, "{line}")
    }
}

/// Collects an event's fields as JSON values.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), Value::from(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0.insert(field.name().to_owned(), Value::from(value.to_string()));
    }
}

//! Cassettes: record a provider's exchanges once, replay them forever with zero network.
//!
//! [`RecordingProvider`] wraps a live provider and appends one JSON line per completed
//! exchange: the request in canonical form (its telemetry `meta` left out), the key (sha256 of
//! the request's RFC 8785 canonical JSON) and the events the stream yielded. A request never
//! holds a credential (adapters keep keys to themselves), so a cassette cannot leak one.
//! Cancelled or dropped streams record nothing: a row is always a whole exchange.
//!
//! [`ReplayProvider`] serves a cassette: each request is answered by the rows recorded under
//! its key, in recording order (the last one repeating), and a request the cassette does not
//! hold fails with a `config` error that says "cassette miss" instead of going live.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::stream::cancelled;
use super::{Capabilities, ChatEvent, ChatRequest, Provider};
use crate::{Error, ErrorCode};

/// One recorded exchange, one line of a cassette file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CassetteRow {
    /// The provider's name when recorded.
    pub provider: String,
    /// sha256 (hex) of the canonical request JSON.
    pub key: String,
    /// The request, `meta` removed.
    pub request: Value,
    /// What the provider declared for the request's model.
    pub capabilities: Capabilities,
    /// The model's context window, when the provider knew it (replayed, so a planner picks
    /// the same card offline as it did when recording).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// The events, ending in the terminal one.
    pub events: Vec<ChatEvent>,
}

/// The key of a request: sha256 (hex) of its RFC 8785 canonical JSON, telemetry left out, and
/// the canonical request itself.
///
/// # Errors
/// `internal` if the request cannot be serialized (it always can).
pub fn request_key(request: &ChatRequest) -> Result<(String, Value), Error> {
    let mut value =
        serde_json::to_value(request).map_err(|e| Error::internal(format!("request to json: {e}")))?;
    if let Some(object) = value.as_object_mut() {
        object.remove("meta");
    }
    let canonical = serde_json_canonicalizer::to_string(&value)
        .map_err(|e| Error::internal(format!("canonical request json: {e}")))?;
    Ok((hex::encode(Sha256::digest(canonical.as_bytes())), value))
}

/// Records every completed exchange of the wrapped provider to a JSONL cassette.
#[derive(Clone)]
pub struct RecordingProvider {
    inner: Arc<dyn Provider>,
    path: PathBuf,
    /// Serializes appends from concurrent streams, so lines never interleave.
    file_lock: Arc<Mutex<()>>,
}

impl RecordingProvider {
    /// Records `inner`'s exchanges, appending to the cassette at `path` (created if missing).
    pub fn new(inner: Arc<dyn Provider>, path: &Path) -> RecordingProvider {
        RecordingProvider { inner, path: path.to_owned(), file_lock: Arc::new(Mutex::new(())) }
    }
}

/// Opens (creating if missing) the cassette at `path` for appending, before anything runs:
/// a tape that cannot be written is a `config` error naming the path, not a run that
/// records nothing.
///
/// # Errors
/// `config` when the file cannot be opened for appending.
pub fn create_tape(path: &Path) -> Result<(), Error> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map(drop)
        .map_err(|e| Error::config(format!("cannot write the cassette {}: {e}", path.display())))
}

impl std::fmt::Debug for RecordingProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingProvider").field("inner", &self.inner).field("path", &self.path).finish()
    }
}

impl Provider for RecordingProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self, model: &str) -> Capabilities {
        self.inner.capabilities(model)
    }

    fn context_window(&self, model: &str) -> Option<u64> {
        self.inner.context_window(model)
    }

    fn stream(&self, request: ChatRequest, cancel: CancellationToken) -> BoxStream<'static, ChatEvent> {
        let row = request_key(&request).map(|(key, request_json)| CassetteRow {
            provider: self.inner.name().to_owned(),
            key,
            request: request_json,
            capabilities: self.inner.capabilities(&request.model),
            context_window: self.inner.context_window(&request.model),
            events: Vec::new(),
        });
        let inner = self.inner.stream(request, cancel);
        let mut row = match row {
            Ok(row) => row,
            Err(error) => return futures::stream::iter([ChatEvent::Error(error)]).boxed(),
        };
        let path = self.path.clone();
        let lock = self.file_lock.clone();
        inner
            .map(move |event| {
                row.events.push(event.clone());
                let cancelled = matches!(&event, ChatEvent::Error(e) if e.code == ErrorCode::Cancelled);
                if event.is_terminal()
                    && !cancelled
                    && let Err(err) = append(&path, &lock, &row)
                {
                    tracing::error!(path = %path.display(), error = %err, "cannot record the exchange to the cassette");
                }
                event
            })
            .boxed()
    }
}

fn append(path: &Path, lock: &Mutex<()>, row: &CassetteRow) -> std::io::Result<()> {
    let mut line = serde_json::to_string(row)?;
    line.push('\n');
    let _guard = lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut file = OpenOptions::new().create(true).append(true).open(path)?;
    file.write_all(line.as_bytes())
}

/// Serves recorded exchanges with no network at all.
#[derive(Debug, Clone)]
pub struct ReplayProvider {
    name: String,
    /// Recorded rows by request key, in recording order.
    rows: Arc<HashMap<String, Vec<CassetteRow>>>,
    /// How many times each key was served.
    served: Arc<Mutex<HashMap<String, usize>>>,
}

impl ReplayProvider {
    /// Loads the rows recorded for provider `name` from the cassette at `path`.
    ///
    /// # Errors
    /// `config` if the file cannot be read or a line is not a cassette row.
    pub fn open(path: &Path, name: &str) -> Result<ReplayProvider, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::config(format!("cannot read cassette {}: {e}", path.display())))?;
        let mut rows: HashMap<String, Vec<CassetteRow>> = HashMap::new();
        for (number, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let value: Value = serde_json::from_str(line).map_err(|e| {
                Error::config(format!("cassette {} line {}: not JSON: {e}", path.display(), number + 1))
            })?;
            if value.get("host_function").is_some() {
                // A host-function exchange, served by `HostTape`.
                continue;
            }
            let row: CassetteRow = serde_json::from_value(value).map_err(|e| {
                Error::config(format!(
                    "cassette {} line {}: not a cassette row: {e}",
                    path.display(),
                    number + 1
                ))
            })?;
            if row.provider == name {
                rows.entry(row.key.clone()).or_default().push(row);
            }
        }
        Ok(ReplayProvider { name: name.to_owned(), rows: Arc::new(rows), served: Arc::default() })
    }

    /// How many exchanges the cassette holds for this provider.
    pub fn len(&self) -> usize {
        self.rows.values().map(Vec::len).sum()
    }

    /// Whether the cassette holds no exchange for this provider.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

impl Provider for ReplayProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self, model: &str) -> Capabilities {
        self.rows
            .values()
            .flatten()
            .find(|row| row.request.get("model").and_then(Value::as_str) == Some(model))
            .map_or(Capabilities::ALL, |row| row.capabilities)
    }

    fn context_window(&self, model: &str) -> Option<u64> {
        self.rows
            .values()
            .flatten()
            .find(|row| row.request.get("model").and_then(Value::as_str) == Some(model))
            .and_then(|row| row.context_window)
    }

    fn stream(&self, request: ChatRequest, cancel: CancellationToken) -> BoxStream<'static, ChatEvent> {
        if cancel.is_cancelled() {
            return futures::stream::iter([ChatEvent::Error(cancelled())]).boxed();
        }
        let events = match request_key(&request) {
            Err(error) => vec![ChatEvent::Error(error)],
            Ok((key, _)) => match self.rows.get(&key) {
                None => vec![ChatEvent::Error(Error::config(format!(
                    "cassette miss: no recorded exchange for this request to {}:{} (key {})",
                    self.name,
                    request.model,
                    &key[..12]
                )))],
                Some(rows) => {
                    let mut served = self.served.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    let count = served.entry(key).or_insert(0);
                    let row = rows.get(*count).or(rows.last());
                    *count += 1;
                    row.map(|row| row.events.clone()).unwrap_or_default()
                }
            },
        };
        futures::stream::iter(events).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::echo::EchoProvider;
    use crate::provider::{CallMeta, Message};

    #[tokio::test]
    async fn records_then_replays_with_no_live_provider() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cassette.jsonl");
        let recorder = RecordingProvider::new(Arc::new(EchoProvider::new()), &path);
        let mut request = ChatRequest::new("default", vec![Message::user("hello")]);
        request.meta = CallMeta { label: Some("first".into()), agent_type: None };
        let live: Vec<ChatEvent> = recorder.stream(request.clone(), CancellationToken::new()).collect().await;
        let other = ChatRequest::new("default", vec![Message::user("other")]);
        let _: Vec<ChatEvent> = recorder.stream(other, CancellationToken::new()).collect().await;

        let replay = ReplayProvider::open(&path, "echo").unwrap();
        assert_eq!(replay.len(), 2);
        // The label is telemetry: a different label still hits.
        request.meta.label = Some("second".into());
        let replayed: Vec<ChatEvent> = replay.stream(request, CancellationToken::new()).collect().await;
        assert_eq!(replayed, live);
        let miss: Vec<ChatEvent> = replay
            .stream(ChatRequest::new("default", vec![Message::user("new")]), CancellationToken::new())
            .collect()
            .await;
        let [ChatEvent::Error(error)] = miss.as_slice() else { panic!("{miss:?}") };
        assert_eq!(error.code, ErrorCode::Config);
        assert!(error.message.contains("cassette miss"), "{}", error.message);
        assert!(ReplayProvider::open(&path, "anthropic").unwrap().is_empty());
    }

    #[tokio::test]
    async fn cancelled_streams_record_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cassette.jsonl");
        let recorder = RecordingProvider::new(Arc::new(EchoProvider::new()), &path);
        let cancel = CancellationToken::new();
        cancel.cancel();
        let events: Vec<ChatEvent> =
            recorder.stream(ChatRequest::new("default", vec![Message::user("x")]), cancel).collect().await;
        assert!(matches!(events.as_slice(), [ChatEvent::Error(e)] if e.code == ErrorCode::Cancelled));
        assert!(!path.exists());
    }
}

/// One recorded host-function exchange, a line of the same cassette as provider exchanges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostRow {
    /// The host function's name.
    pub host_function: String,
    /// sha256 (hex) of the canonical `{"name", "args"}` JSON.
    pub key: String,
    /// The call's arguments.
    pub args: Value,
    /// What the call returned.
    pub result: HostResult,
}

/// A host function's recorded answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostResult {
    /// Its JSON result.
    Ok(Value),
    /// Its typed failure.
    Error(Error),
}

/// Host-function exchanges on a cassette: recorded beside provider exchanges with `--record`,
/// served from it with `--replay` so a replay never touches the outside world (a call the
/// tape does not hold is a `config` error that says "cassette miss", as for a provider).
#[derive(Debug)]
pub enum HostTape {
    /// Appends every exchange to the cassette at this path.
    Record {
        /// The cassette.
        path: PathBuf,
        /// Serializes appends.
        lock: Mutex<()>,
    },
    /// Serves recorded exchanges by key, in recording order (the last one repeating).
    Replay {
        /// Rows by key.
        rows: HashMap<String, Vec<HostResult>>,
        /// How many times each key was served.
        served: Mutex<HashMap<String, usize>>,
    },
}

impl HostTape {
    /// Records to the cassette at `path`.
    pub fn record(path: &Path) -> HostTape {
        HostTape::Record { path: path.to_owned(), lock: Mutex::new(()) }
    }

    /// Loads the host-function exchanges of the cassette at `path`.
    ///
    /// # Errors
    /// `config` if the file cannot be read or a host row is malformed.
    pub fn replay(path: &Path) -> Result<HostTape, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::config(format!("cannot read cassette {}: {e}", path.display())))?;
        let mut rows: HashMap<String, Vec<HostResult>> = HashMap::new();
        for (number, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let Ok(value) = serde_json::from_str::<Value>(line) else { continue };
            if value.get("host_function").is_none() {
                continue;
            }
            let row: HostRow = serde_json::from_value(value).map_err(|e| {
                Error::config(format!("cassette {} line {}: not a host row: {e}", path.display(), number + 1))
            })?;
            rows.entry(row.key).or_default().push(row.result);
        }
        Ok(HostTape::Replay { rows, served: Mutex::default() })
    }

    /// The key of a call: sha256 (hex) of its canonical `{"name", "args"}` JSON.
    ///
    /// # Errors
    /// `internal` if the arguments cannot be canonicalized.
    pub fn key(name: &str, args: &Value) -> Result<String, Error> {
        let canonical =
            serde_json_canonicalizer::to_string(&serde_json::json!({ "name": name, "args": args }))
                .map_err(|e| Error::internal(format!("canonical host call json: {e}")))?;
        Ok(hex::encode(Sha256::digest(canonical.as_bytes())))
    }

    /// On replay, the recorded answer to `name(args)` (or a cassette miss); `None` when
    /// recording (the call runs live).
    pub fn serve(&self, name: &str, args: &Value) -> Option<Result<Value, Error>> {
        let HostTape::Replay { rows, served } = self else { return None };
        let key = match HostTape::key(name, args) {
            Ok(key) => key,
            Err(e) => return Some(Err(e)),
        };
        let Some(answers) = rows.get(&key).filter(|a| !a.is_empty()) else {
            return Some(Err(Error::config(format!(
                "cassette miss: no recorded call of host function {name} with these arguments (key {})",
                &key[..12]
            ))));
        };
        let mut served = served.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = served.entry(key).or_default();
        let answer = &answers[(*count).min(answers.len() - 1)];
        *count += 1;
        Some(match answer {
            HostResult::Ok(value) => Ok(value.clone()),
            HostResult::Error(error) => Err(error.clone()),
        })
    }

    /// When recording, appends the exchange `name(args) -> result` to the cassette.
    pub fn keep(&self, name: &str, args: &Value, result: &Result<Value, Error>) {
        let HostTape::Record { path, lock } = self else { return };
        let Ok(key) = HostTape::key(name, args) else { return };
        let row = HostRow {
            host_function: name.to_owned(),
            key,
            args: args.clone(),
            result: match result {
                Ok(value) => HostResult::Ok(value.clone()),
                Err(error) => HostResult::Error(error.clone()),
            },
        };
        let written = serde_json::to_string(&row).map_err(std::io::Error::from).and_then(|mut line| {
            line.push('\n');
            let _guard = lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            OpenOptions::new().create(true).append(true).open(path)?.write_all(line.as_bytes())
        });
        if let Err(err) = written {
            tracing::error!(path = %path.display(), error = %err, "cannot record the host call to the cassette");
        }
    }
}

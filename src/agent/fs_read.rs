//! The built-in `fs-read` toolset: `read_file`, `list_dir` and `search_text`, confined to one
//! root directory so an agent can look at a workspace without seeing anything beyond it.
//!
//! Confinement is the point of this module, so it is checked at every step rather than once:
//!
//! - A path argument is relative to the root. Absolute paths and `..` that climbs above the
//!   root are refused lexically, before the file system is touched, so the refusal says why.
//! - The joined path is then resolved with [`std::fs::canonicalize`] and must still lie under
//!   the canonical root: that is what catches a symbolic link, anywhere along the path, whose
//!   target is outside. Links whose targets stay inside the root are followed.
//! - When a path does not exist, the part of it that does exist is checked the same way
//!   before "not found" is answered, so a link that leaves the root cannot be used to probe
//!   which names exist beyond it.
//! - Walks (`search_text`) never follow symbolic links, whether they stay inside or not: files
//!   reachable through an inside link are found under their real path anyway, and skipping
//!   links rules out cycles and double-reported matches. `list_dir` names every entry but
//!   says which links leave the root, without following them.
//! - Every open goes through a directory handle of the root (`cap-std`'s `Dir`: `openat2`
//!   with `RESOLVE_BENEATH` on Linux, a careful component walk elsewhere), which refuses to
//!   leave the root whatever the path's links do at that instant. The checks above only word
//!   the refusal; the handle is what enforces it, so a link swapped in between a check and an
//!   open (check-then-use) still cannot reach outside. On Linux every opened file is also
//!   re-checked through `/proc/self/fd`.
//! - `search_text` is bounded three ways: the compiled regex (and its lazy DFA) in size, the
//!   bytes one call scans (default 64 MiB, `max_scan_bytes` per toolset), and the time one
//!   call may take (default 30 s, `timeout_ms`); it stops at once when the call is abandoned
//!   (the run was cancelled), checking between files and between lines.
//!
//! Every answer is bounded (bytes, lines, entries, matches, files scanned) and says so in a
//! bracketed note when it was cut, so the model knows to narrow or page. All file I/O runs
//! on tokio's blocking pool.

mod read;
mod root;
mod search;
#[cfg(all(test, unix))]
mod tests;

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use futures::future::BoxFuture;
use regex::Regex;
use serde_json::{Map, Value, json};

use super::tools::{Tool, Toolset};
use crate::error::Error;
use read::{READ_LINE_LIMIT, list_dir, read_file};
use root::Root;
pub(crate) use search::SearchBounds;
use search::{Limits, SEARCH_DEFAULT_RESULTS, SEARCH_MAX_RESULTS, search_text};

/// Compiled-regex size limit, so a pathological pattern fails fast instead of eating memory
/// (and a huge program cannot make every line slow to match).
const REGEX_SIZE_LIMIT: usize = 256 * 1024;
/// The lazy DFA's cache bound per regex.
const REGEX_DFA_SIZE_LIMIT: usize = 8 * 1024 * 1024;

/// The `fs-read` toolset over `root`: `read_file`, `list_dir` and `search_text`, each
/// confined to `root` (see the module docs for the rules).
///
/// `root` must exist and be a directory; it is canonicalized once here, so later moves of
/// a link that named it do not move the confinement.
pub fn fs_read_toolset(root: &Path) -> Result<Toolset, Error> {
    fs_read_toolset_bounded(root, SearchBounds::default())
}

/// [`fs_read_toolset`] with its search bounds set.
pub(crate) fn fs_read_toolset_bounded(root: &Path, bounds: SearchBounds) -> Result<Toolset, Error> {
    let canonical = fs::canonicalize(root)
        .map_err(|e| Error::config(format!("the fs-read root {} cannot be resolved: {e}", root.display())))?;
    let meta = fs::metadata(&canonical).map_err(|e| {
        Error::config(format!("the fs-read root {} cannot be inspected: {e}", root.display()))
    })?;
    if !meta.is_dir() {
        return Err(Error::config(format!("the fs-read root {} is not a directory", root.display())));
    }
    let dir = cap_std::fs::Dir::open_ambient_dir(&canonical, cap_std::ambient_authority())
        .map_err(|e| Error::config(format!("the fs-read root {} cannot be opened: {e}", root.display())))?;
    let root = Arc::new(Root { path: canonical, dir });
    let tools: Vec<Arc<dyn Tool>> = [Kind::ReadFile, Kind::ListDir, Kind::SearchText]
        .into_iter()
        .map(|kind| Arc::new(FsTool { kind, root: root.clone(), parameters: kind.parameters(), bounds }) as _)
        .collect();
    Ok(Toolset::new("fs-read", tools))
}

/// Which of the three tools a [`FsTool`] is.
#[derive(Debug, Clone, Copy)]
enum Kind {
    ReadFile,
    ListDir,
    SearchText,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::ReadFile => "read_file",
            Kind::ListDir => "list_dir",
            Kind::SearchText => "search_text",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Kind::ReadFile => {
                "Read a text file in the workspace. `path` is relative to the workspace root. \
                 Skips `offset` lines (default 0) and returns at most `limit` lines (default and \
                 maximum 2000), and at most 256 KiB, as raw text without line numbers. When the \
                 output is cut, a final bracketed note says so and gives the `offset` that \
                 continues it. Binary files are refused."
            }
            Kind::ListDir => {
                "List a directory in the workspace. `path` is relative to the workspace root \
                 (default \".\"). Returns one entry per line, sorted by name; directories end \
                 in `/`. Shows at most 1000 entries, with a note when more exist."
            }
            Kind::SearchText => {
                "Search the workspace's text files line by line for a regular expression (Rust \
                 `regex` syntax). `path` (relative to the workspace root, default \".\") limits \
                 the search to one file or directory. Returns `path:line: text` lines, paths \
                 relative to the root and line numbers from 1, in path order, at most \
                 `max_results` (default 100, maximum 500). Skips hidden directories, symbolic \
                 links, binary files and files over 1 MiB."
            }
        }
    }

    fn parameters(self) -> Value {
        match self {
            Kind::ReadFile => json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace root."},
                    "offset": {"type": "integer", "minimum": 0, "description": "Lines to skip before the first line returned (0-based). Default 0."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": READ_LINE_LIMIT, "description": "Most lines to return. Default 2000."},
                },
                "required": ["path"],
                "additionalProperties": false,
            }),
            Kind::ListDir => json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Directory path, relative to the workspace root. Default \".\"."},
                },
                "additionalProperties": false,
            }),
            Kind::SearchText => json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "minLength": 1, "description": "Regular expression (Rust regex syntax) matched against each line."},
                    "path": {"type": "string", "description": "File or directory to search, relative to the workspace root. Default \".\"."},
                    "max_results": {"type": "integer", "minimum": 1, "maximum": SEARCH_MAX_RESULTS, "description": "Most matching lines to return. Default 100."},
                },
                "required": ["pattern"],
                "additionalProperties": false,
            }),
        }
    }

    /// The argument names the tool accepts, so unknown ones can be refused.
    fn fields(self) -> &'static [&'static str] {
        match self {
            Kind::ReadFile => &["path", "offset", "limit"],
            Kind::ListDir => &["path"],
            Kind::SearchText => &["pattern", "path", "max_results"],
        }
    }
}

/// One tool of the set; the three share the root.
#[derive(Debug)]
struct FsTool {
    kind: Kind,
    root: Arc<Root>,
    parameters: Value,
    bounds: SearchBounds,
}

impl Tool for FsTool {
    fn name(&self) -> &str {
        self.kind.name()
    }

    fn description(&self) -> &str {
        self.kind.description()
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    fn version(&self) -> &str {
        "1"
    }

    fn journaling(&self) -> crate::agent::ToolJournaling {
        crate::agent::ToolJournaling::Read
    }

    fn call(&self, args: Value) -> BoxFuture<'static, Result<String, Error>> {
        // Arguments are checked here too: the engine validates against `parameters()`, but a
        // tool must not trust that every caller went through the engine.
        let request = Request::parse(self.kind, &args);
        let root = self.root.clone();
        let bounds = self.bounds;
        Box::pin(async move {
            let request = request?;
            // Dropping this future (the run was cancelled, the agent gave up) stops the
            // blocking work too: it checks the flag between files and lines.
            let abandoned = Arc::new(AtomicBool::new(false));
            let _stop = StopOnDrop(abandoned.clone());
            let limits =
                Limits { deadline: Instant::now() + bounds.timeout, bounds, abandoned: abandoned.clone() };
            tokio::task::spawn_blocking(move || request.run(&root, &limits))
                .await
                .map_err(|e| Error::internal(format!("the fs-read task did not finish: {e}")))?
        })
    }
}

/// Sets the flag when the call's future is dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A call's arguments, checked and typed.
enum Request {
    Read { path: String, offset: u64, limit: u64 },
    List { path: String },
    Search { pattern: Regex, path: String, max_results: u64 },
}

impl Request {
    fn parse(kind: Kind, args: &Value) -> Result<Request, Error> {
        let empty = Map::new();
        let map = match args {
            Value::Object(map) => map,
            // A tool whose arguments are all optional may be called with none at all.
            Value::Null => &empty,
            other => {
                return Err(Error::validation(format!(
                    "{}: arguments must be a JSON object, got {}",
                    kind.name(),
                    json_type(other)
                )));
            }
        };
        if let Some(unknown) = map.keys().find(|k| !kind.fields().contains(&k.as_str())) {
            return Err(Error::validation(format!(
                "{}: unknown argument {unknown:?}; expected {}",
                kind.name(),
                kind.fields().join(", ")
            )));
        }
        let name = kind.name();
        Ok(match kind {
            Kind::ReadFile => Request::Read {
                path: string_arg(name, map, "path")?
                    .ok_or_else(|| Error::validation(format!("{name}: `path` is required")))?,
                offset: int_arg(name, map, "offset", 0, u64::MAX)?.unwrap_or(0),
                limit: int_arg(name, map, "limit", 1, READ_LINE_LIMIT)?.unwrap_or(READ_LINE_LIMIT),
            },
            Kind::ListDir => {
                Request::List { path: string_arg(name, map, "path")?.unwrap_or_else(|| ".".to_owned()) }
            }
            Kind::SearchText => {
                let source = string_arg(name, map, "pattern")?
                    .ok_or_else(|| Error::validation(format!("{name}: `pattern` is required")))?;
                if source.is_empty() {
                    return Err(Error::validation(format!("{name}: `pattern` must not be empty")));
                }
                let pattern = regex::RegexBuilder::new(&source)
                    .size_limit(REGEX_SIZE_LIMIT)
                    .dfa_size_limit(REGEX_DFA_SIZE_LIMIT)
                    .build()
                    .map_err(|e| Error::validation(format!("{name}: `pattern` is not a valid regex: {e}")))?;
                Request::Search {
                    pattern,
                    path: string_arg(name, map, "path")?.unwrap_or_else(|| ".".to_owned()),
                    max_results: int_arg(name, map, "max_results", 1, SEARCH_MAX_RESULTS)?
                        .unwrap_or(SEARCH_DEFAULT_RESULTS),
                }
            }
        })
    }

    /// Runs the request; blocking, so it is called on the blocking pool.
    fn run(self, root: &Root, limits: &Limits) -> Result<String, Error> {
        match self {
            Request::Read { path, offset, limit } => read_file(root, &path, offset, limit),
            Request::List { path } => list_dir(root, &path),
            Request::Search { pattern, path, max_results } => {
                search_text(root, &pattern, &path, max_results, limits)
            }
        }
    }
}

fn string_arg(tool: &str, map: &Map<String, Value>, key: &str) -> Result<Option<String>, Error> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => {
            Err(Error::validation(format!("{tool}: `{key}` must be a string, got {}", json_type(other))))
        }
    }
}

fn int_arg(
    tool: &str,
    map: &Map<String, Value>,
    key: &str,
    min: u64,
    max: u64,
) -> Result<Option<u64>, Error> {
    let value = match map.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(value) => value,
    };
    // JSON Schema counts 3.0 as an integer, so accept it here as well.
    let n = value.as_u64().or_else(|| {
        value.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64).map(|f| f as u64)
    });
    match n {
        Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ if max == u64::MAX => {
            Err(Error::validation(format!("{tool}: `{key}` must be an integer ≥ {min}, got {value}")))
        }
        _ => Err(Error::validation(format!(
            "{tool}: `{key}` must be an integer from {min} to {max}, got {value}"
        ))),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

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

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use regex::Regex;
use serde_json::{Map, Value, json};

use super::tools::{Tool, Toolset};
use crate::error::{Error, ErrorCode};

#[cfg(all(test, unix))]
mod tests;

/// Bytes of file text `read_file` returns at most, so one call cannot flood the context.
const READ_BYTE_CAP: usize = 256 * 1024;
/// Lines `read_file` returns when no `limit` is given, and the largest `limit` allowed.
const READ_LINE_LIMIT: u64 = 2000;
/// How much of a file's head is sniffed for NUL bytes to call it binary (as git does).
const BINARY_SNIFF: usize = 8 * 1024;
/// Entries `list_dir` shows at most.
const LIST_CAP: usize = 1000;
/// Matches `search_text` returns when no `max_results` is given.
const SEARCH_DEFAULT_RESULTS: u64 = 100;
/// The largest `max_results` allowed.
const SEARCH_MAX_RESULTS: u64 = 500;
/// Files larger than this are skipped by `search_text`: they are rarely source text, and
/// reading them would make one search slow.
const SEARCH_FILE_CAP: u64 = 1024 * 1024;
/// Files one search scans at most, to bound its time on a huge tree.
const SEARCH_MAX_FILES: usize = 20_000;
/// Bytes one search reads at most, for the same reason.
const SEARCH_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Bytes of a matching line shown in a search result; longer lines are cut.
const SEARCH_LINE_CAP: usize = 500;
/// Compiled-regex size limit, so a pathological pattern fails fast instead of eating memory
/// (and a huge program cannot make every line slow to match).
const REGEX_SIZE_LIMIT: usize = 256 * 1024;
/// The lazy DFA's cache bound per regex.
const REGEX_DFA_SIZE_LIMIT: usize = 8 * 1024 * 1024;
/// The default bound on one `search_text` call's time.
pub(crate) const SEARCH_DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The bounds of one toolset's searches (`max_scan_bytes`, `timeout_ms` in its config).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SearchBounds {
    /// Bytes one call reads at most.
    pub(crate) max_scan_bytes: u64,
    /// Time one call may take.
    pub(crate) timeout: Duration,
}

impl Default for SearchBounds {
    fn default() -> SearchBounds {
        SearchBounds { max_scan_bytes: SEARCH_MAX_BYTES, timeout: SEARCH_DEFAULT_TIMEOUT }
    }
}

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

/// One call's bounds: its deadline, its scan budget, and whether it was abandoned.
struct Limits {
    deadline: Instant,
    bounds: SearchBounds,
    abandoned: Arc<AtomicBool>,
}

impl Limits {
    /// Why the call must stop now, if it must.
    fn stop(&self) -> Option<Stop> {
        if self.abandoned.load(Ordering::Relaxed) {
            Some(Stop::Abandoned)
        } else if Instant::now() >= self.deadline {
            Some(Stop::Deadline)
        } else {
            None
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Stop {
    Abandoned,
    Deadline,
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

fn denied(message: String) -> Error {
    Error::new(ErrorCode::ToolDenied, message)
}

fn failed(message: String) -> Error {
    Error::new(ErrorCode::ToolFailed, message)
}

/// An I/O failure on a path the model named, worded for the model; the root's absolute
/// location never appears in messages.
fn io_failed(arg: &str, e: &io::Error) -> Error {
    match e.kind() {
        io::ErrorKind::NotFound => failed(format!("{arg:?} does not exist")),
        io::ErrorKind::PermissionDenied => failed(format!("{arg:?} cannot be read: permission denied")),
        _ => failed(format!("{arg:?} cannot be read: {e}")),
    }
}

/// The canonical root every path is confined to, and a handle of it every open goes through.
#[derive(Debug)]
struct Root {
    path: PathBuf,
    dir: cap_std::fs::Dir,
}

impl Root {
    /// Resolves a model-supplied path to a canonical path under the root, or refuses it.
    fn resolve(&self, arg: &str) -> Result<PathBuf, Error> {
        Root::lexical(arg)?;
        let rel = Path::new(arg);
        let joined = self.path.join(rel);
        self.resolve_joined(arg, &joined)
    }

    /// Refuses absolute paths and `..` that climbs above the root, before any file system
    /// access, so the refusal says why.
    fn lexical(arg: &str) -> Result<(), Error> {
        let rel = Path::new(arg);
        let mut depth: usize = 0;
        for component in rel.components() {
            match component {
                Component::Prefix(_) | Component::RootDir => {
                    return Err(denied(format!(
                        "{arg:?} is an absolute path; paths must be relative to the workspace root"
                    )));
                }
                Component::CurDir => {}
                Component::ParentDir => {
                    depth = depth.checked_sub(1).ok_or_else(|| {
                        denied(format!("{arg:?} uses `..` to climb out of the workspace root"))
                    })?;
                }
                Component::Normal(_) => depth += 1,
            }
        }
        Ok(())
    }

    fn resolve_joined(&self, arg: &str, joined: &Path) -> Result<PathBuf, Error> {
        let joined = joined.to_owned();
        match fs::canonicalize(&joined) {
            Ok(canonical) => {
                self.confine(arg, &canonical)?;
                Ok(canonical)
            }
            Err(e) => {
                // Check what does exist before answering: "not found" behind a link that
                // leaves the root would tell the model which names exist out there.
                let mut probe = joined.as_path();
                while let Some(parent) = probe.parent() {
                    if let Ok(canonical) = fs::canonicalize(parent) {
                        self.confine(arg, &canonical)?;
                        break;
                    }
                    probe = parent;
                }
                if e.kind() == io::ErrorKind::NotFound
                    && fs::symlink_metadata(&joined).is_ok_and(|m| m.file_type().is_symlink())
                {
                    return Err(failed(format!("{arg:?} is a symbolic link whose target does not exist")));
                }
                Err(io_failed(arg, &e))
            }
        }
    }

    /// Refuses a canonical path outside the root. A lexically clean path can only get
    /// there through a symbolic link, so that is what the message blames.
    fn confine(&self, arg: &str, canonical: &Path) -> Result<(), Error> {
        if canonical.starts_with(&self.path) {
            Ok(())
        } else {
            Err(denied(format!(
                "{arg:?} leads outside the workspace root through a symbolic link; \
                 only files under the root may be read"
            )))
        }
    }

    /// Confirms that what was actually opened lies under the root, closing the gap between
    /// resolving a path and opening it (a link swapped in meanwhile).
    #[cfg(target_os = "linux")]
    fn verify_opened(&self, arg: &str, file: &File) -> Result<(), Error> {
        use std::os::fd::AsRawFd;
        // Without /proc there is nothing more to learn; the resolve-time check stands.
        match fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
            Ok(actual) if actual.is_absolute() => self.confine(arg, &actual),
            _ => Ok(()),
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn verify_opened(&self, _arg: &str, _file: &File) -> Result<(), Error> {
        Ok(())
    }

    /// Runs `op` on the model's path `arg` beneath the root handle, which refuses to leave
    /// the root whatever links the path crosses at that instant. A refusal or failure is
    /// worded by [`Root::resolve`]'s checks; a link inside the root with an absolute target
    /// (which the handle will not follow) is retried along its canonical path, again beneath
    /// the handle.
    fn beneath<T>(&self, arg: &str, op: impl Fn(&Path) -> io::Result<T>) -> Result<T, Error> {
        Root::lexical(arg)?;
        let rel = if arg.is_empty() { Path::new(".") } else { Path::new(arg) };
        let error = match op(rel) {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        let canonical = self.resolve(arg)?;
        if error.kind() == io::ErrorKind::PermissionDenied
            && let Ok(inside) = canonical.strip_prefix(&self.path)
        {
            let inside = if inside.as_os_str().is_empty() { Path::new(".") } else { inside };
            return op(inside).map_err(|e| self.refusal(arg, &e));
        }
        Err(io_failed(arg, &error))
    }

    /// A failure of an open beneath the root, after the path looked inside: a link that was
    /// swapped meanwhile shows up here as a refusal.
    fn refusal(&self, arg: &str, error: &io::Error) -> Error {
        match self.resolve(arg) {
            Err(worded) => worded,
            Ok(_) if error.kind() == io::ErrorKind::PermissionDenied => {
                denied(format!("{arg:?} cannot be opened beneath the workspace root"))
            }
            Ok(_) => io_failed(arg, error),
        }
    }

    /// Opens a regular file at `arg` beneath the root.
    fn open_file(&self, arg: &str) -> Result<File, Error> {
        // Checked before opening as well as after: opening a FIFO would block (it is also
        // opened non-blocking, should one be swapped in between).
        let meta = self.beneath(arg, |rel| self.dir.metadata(rel))?;
        if meta.is_dir() {
            return Err(failed(format!("{arg:?} is a directory; use list_dir")));
        }
        if !meta.is_file() {
            return Err(failed(format!("{arg:?} is not a regular file")));
        }
        let mut options = cap_std::fs::OpenOptions::new();
        options.read(true);
        #[cfg(unix)]
        {
            use cap_std::fs::OpenOptionsExt;
            options.custom_flags(libc::O_NONBLOCK);
        }
        let file = self.beneath(arg, |rel| self.dir.open_with(rel, &options))?.into_std();
        self.verify_opened(arg, &file)?;
        if !file.metadata().map_err(|e| io_failed(arg, &e))?.is_file() {
            return Err(failed(format!("{arg:?} is not a regular file")));
        }
        Ok(file)
    }
}

fn read_file(root: &Root, arg: &str, offset: u64, limit: u64) -> Result<String, Error> {
    let file = root.open_file(arg)?;
    let window = read_window(BufReader::with_capacity(64 * 1024, file), offset, limit, READ_BYTE_CAP)
        .map_err(|e| io_failed(arg, &e))?;
    let Some(window) = window else {
        return Err(failed(format!(
            "{arg:?} is a binary file (it contains NUL bytes); only text can be read"
        )));
    };
    Ok(window.render(offset, limit))
}

/// Why a read window ended before the end of the file.
#[derive(Debug, PartialEq)]
enum Cut {
    /// The line limit was reached and more lines follow.
    Lines,
    /// The byte cap was reached and more text follows.
    Bytes,
}

/// The text `read_file` shows and how it ended.
#[derive(Debug)]
struct Window {
    text: Vec<u8>,
    cut: Option<Cut>,
    /// Lines in the file, counted only when the whole file was read.
    total_lines: u64,
}

/// Reads lines `offset..offset + limit` of `reader`, at most `cap` bytes of them, without
/// ever holding more than that in memory. `None` when the text is binary.
fn read_window(mut reader: impl BufRead, offset: u64, limit: u64, cap: usize) -> io::Result<Option<Window>> {
    let head = reader.fill_buf()?;
    if head[..head.len().min(BINARY_SNIFF)].contains(&0) {
        return Ok(None);
    }
    let end = offset.saturating_add(limit);
    let mut line: u64 = 0;
    let mut mid_line = false;
    let mut text = Vec::new();
    let mut cut = None;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        if line >= end {
            cut = Some(Cut::Lines);
            break;
        }
        let (len, newline) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let chunk = &buf[..len];
        if chunk.contains(&0) {
            return Ok(None);
        }
        if line >= offset {
            let room = cap - text.len();
            if len > room {
                text.extend_from_slice(&chunk[..room]);
                cut = Some(Cut::Bytes);
                break;
            }
            text.extend_from_slice(chunk);
        }
        reader.consume(len);
        if newline {
            line += 1;
        }
        mid_line = !newline;
    }
    let total_lines = line + u64::from(mid_line);
    Ok(Some(Window { text, cut, total_lines }))
}

impl Window {
    fn render(mut self, offset: u64, limit: u64) -> String {
        // Saturating: `offset` is any u64 the model sent.
        let first = offset.saturating_add(1);
        let end = offset.saturating_add(limit);
        let note = match self.cut {
            None if self.text.is_empty() && self.total_lines == 0 => return "[the file is empty]".to_owned(),
            None if self.text.is_empty() => {
                return format!("[offset {offset} is past the end: the file has {} lines]", self.total_lines);
            }
            None => None,
            Some(Cut::Lines) => Some(format!(
                "[truncated: showed lines {first}-{end} (limit {limit}); more follow — continue with offset={end}]"
            )),
            Some(Cut::Bytes) => match self.text.iter().rposition(|&b| b == b'\n') {
                // End on a whole line, so continuing at the next offset loses nothing.
                Some(last) => {
                    self.text.truncate(last + 1);
                    let shown = self.text.iter().filter(|&&b| b == b'\n').count() as u64;
                    let next = offset.saturating_add(shown);
                    Some(format!(
                        "[truncated: showed lines {first}-{next} (the 256 KiB output cap); more follow — \
                         continue with offset={next}]"
                    ))
                }
                None => {
                    // One line longer than the cap: show its start, cut on a char boundary.
                    if let Err(e) = std::str::from_utf8(&self.text)
                        && e.error_len().is_none()
                    {
                        self.text.truncate(e.valid_up_to());
                    }
                    Some(format!(
                        "[truncated: line {first} is longer than the 256 KiB output cap and only its \
                         start is shown; the next line is at offset={first}]"
                    ))
                }
            },
        };
        let mut out = String::from_utf8_lossy(&self.text).into_owned();
        if let Some(note) = note {
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&note);
        }
        out
    }
}

fn list_dir(root: &Root, arg: &str) -> Result<String, Error> {
    let meta = root.beneath(arg, |rel| root.dir.metadata(rel))?;
    if !meta.is_dir() {
        return Err(failed(format!("{arg:?} is not a directory; use read_file")));
    }
    // The listing is read through a handle opened beneath the root: whatever the path's
    // links do meanwhile, these are entries of a directory inside it.
    let dir = root.beneath(arg, |rel| root.dir.open_dir(rel))?;
    let mut entries: Vec<(OsString, Option<cap_std::fs::FileType>)> = dir
        .entries()
        .map_err(|e| io_failed(arg, &e))?
        .filter_map(|entry| entry.ok())
        .map(|entry| (entry.file_name(), entry.file_type().ok()))
        .collect();
    if entries.is_empty() {
        return Ok("[the directory is empty]".to_owned());
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut lines: Vec<String> = entries
        .iter()
        .take(LIST_CAP)
        .map(|(name, file_type)| {
            let shown = name.to_string_lossy();
            match file_type {
                Some(t) if t.is_dir() => format!("{shown}/"),
                Some(t) if t.is_symlink() => {
                    // Followed beneath the directory's handle, or along its canonical path
                    // beneath the root: a link that leaves is refused either way.
                    let target = dir.metadata(name).or_else(|_| {
                        let joined = dir_join(arg, &shown);
                        match root.beneath(&joined, |rel| root.dir.metadata(rel)) {
                            Ok(meta) => Ok(meta),
                            Err(e) if e.code == ErrorCode::ToolDenied => Err(true),
                            Err(_) => Err(false),
                        }
                    });
                    match target {
                        // A link that stays inside is shown as what it points at.
                        Ok(meta) if meta.is_dir() => format!("{shown}/"),
                        Ok(_) => shown.into_owned(),
                        Err(true) => {
                            format!("{shown}  [symbolic link leading outside the workspace root; refused]")
                        }
                        Err(false) => format!("{shown}  [broken symbolic link]"),
                    }
                }
                _ => shown.into_owned(),
            }
        })
        .collect();
    if entries.len() > LIST_CAP {
        lines.push(format!("[truncated: showed the first {LIST_CAP} of {} entries, by name]", entries.len()));
    }
    Ok(lines.join("\n"))
}

/// The model's path with `.` dropped and `..` applied (it was checked not to climb above the
/// root), `/`-separated, `.` for the root itself: how results name files.
fn normalized(arg: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    for component in Path::new(arg).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    if parts.is_empty() { ".".to_owned() } else { parts.join("/") }
}

/// `name` under the model's directory argument, as a root-relative path.
fn dir_join(dir: &str, name: &str) -> String {
    let dir = dir.trim_end_matches('/');
    if dir.is_empty() || dir == "." { name.to_owned() } else { format!("{dir}/{name}") }
}

/// What a search walk still has to visit, as root-relative paths (opened beneath the root
/// handle when their turn comes): real directories and regular files, never links.
enum Item {
    Dir(String),
    File(String),
}

/// What a search skipped or where it stopped, for the closing note.
#[derive(Default)]
struct SearchStats {
    files: usize,
    bytes: u64,
    binary: usize,
    large: usize,
    links: usize,
    unreadable: usize,
    more_matches: bool,
    scan_cap: bool,
    deadline: bool,
}

fn search_text(
    root: &Root,
    pattern: &Regex,
    arg: &str,
    max_results: u64,
    limits: &Limits,
) -> Result<String, Error> {
    let meta = root.beneath(arg, |rel| root.dir.metadata(rel))?;
    // Results name files by their real path under the root (a start through an inside link
    // reports where the files are); every open below still goes through the root handle.
    let start = match root.resolve(arg) {
        Ok(canonical) => match canonical.strip_prefix(&root.path) {
            Ok(inside) => normalized(&inside.to_string_lossy()),
            Err(_) => normalized(arg),
        },
        Err(e) => return Err(e),
    };
    let mut stack = vec![if meta.is_dir() { Item::Dir(start) } else { Item::File(start) }];
    let mut results: Vec<String> = Vec::new();
    let mut stats = SearchStats::default();
    'walk: while let Some(item) = stack.pop() {
        match limits.stop() {
            Some(Stop::Abandoned) => {
                return Err(Error::new(ErrorCode::Cancelled, "search_text was abandoned"));
            }
            Some(Stop::Deadline) => {
                stats.deadline = true;
                break 'walk;
            }
            None => {}
        }
        match item {
            Item::Dir(rel) => {
                // Opened beneath the root: a directory swapped for a link since it was
                // listed is refused, never followed out.
                let Ok(dir) = root.dir.open_dir(Path::new(&rel)) else {
                    stats.unreadable += 1;
                    continue;
                };
                let Ok(read) = dir.entries() else {
                    stats.unreadable += 1;
                    continue;
                };
                let mut entries: Vec<_> = read.filter_map(|e| e.ok()).collect();
                entries.sort_by_key(|e| e.file_name());
                // Reversed onto the stack so they come off in name order.
                for entry in entries.into_iter().rev() {
                    let Ok(file_type) = entry.file_type() else {
                        stats.unreadable += 1;
                        continue;
                    };
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if file_type.is_symlink() {
                        stats.links += 1;
                    } else if file_type.is_dir() {
                        if !name.starts_with('.') {
                            stack.push(Item::Dir(dir_join(&rel, &name)));
                        }
                    } else if file_type.is_file() {
                        stack.push(Item::File(dir_join(&rel, &name)));
                    }
                }
            }
            Item::File(rel) => {
                if stats.files >= SEARCH_MAX_FILES || stats.bytes >= limits.bounds.max_scan_bytes {
                    stats.scan_cap = true;
                    break 'walk;
                }
                let Some(text) = read_searchable(root, &rel, &mut stats, limits)? else {
                    continue;
                };
                for (index, line) in text.lines().enumerate() {
                    if index % 256 == 0 {
                        match limits.stop() {
                            Some(Stop::Abandoned) => {
                                return Err(Error::new(ErrorCode::Cancelled, "search_text was abandoned"));
                            }
                            Some(Stop::Deadline) => {
                                stats.deadline = true;
                                break 'walk;
                            }
                            None => {}
                        }
                    }
                    if !pattern.is_match(line) {
                        continue;
                    }
                    if results.len() as u64 >= max_results {
                        stats.more_matches = true;
                        break 'walk;
                    }
                    results.push(format!("{rel}:{}: {}", index + 1, clip(line, SEARCH_LINE_CAP)));
                }
            }
        }
    }
    let mut notes = Vec::new();
    if stats.more_matches {
        notes.push(format!(
            "[stopped at max_results={max_results}; more matches exist — narrow the pattern or path{}]",
            if max_results < SEARCH_MAX_RESULTS { ", or raise max_results (at most 500)" } else { "" }
        ));
    }
    if stats.scan_cap {
        notes.push(format!(
            "[stopped early after scanning {} files ({} bytes), the most one search reads; narrow the path]",
            stats.files, stats.bytes
        ));
    }
    if stats.deadline {
        notes.push(format!(
            "[stopped early at the {} s time limit of one search after {} files; narrow the pattern or path]",
            limits.bounds.timeout.as_secs_f64(),
            stats.files
        ));
    }
    let skipped: Vec<String> = [
        (stats.binary, "binary"),
        (stats.large, "over 1 MiB"),
        (stats.links, "symbolic links, not followed"),
        (stats.unreadable, "unreadable"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    if !skipped.is_empty() {
        notes.push(format!("[skipped: {}]", skipped.join(", ")));
    }
    if results.is_empty() {
        results.push(format!("no matches in {} files", stats.files));
    }
    results.extend(notes);
    Ok(results.join("\n"))
}

/// A file's text for searching, or `None` when it is skipped (too large, binary,
/// unreadable). Only a confinement refusal is an error: that must never be skipped quietly.
fn read_searchable(
    root: &Root,
    rel: &str,
    stats: &mut SearchStats,
    limits: &Limits,
) -> Result<Option<String>, Error> {
    let file = match root.open_file(rel) {
        Ok(file) => file,
        Err(e) if e.code == ErrorCode::ToolDenied => return Err(e),
        Err(_) => {
            stats.unreadable += 1;
            return Ok(None);
        }
    };
    if file.metadata().map(|m| m.len()).unwrap_or(u64::MAX) > SEARCH_FILE_CAP {
        stats.large += 1;
        return Ok(None);
    }
    // Bounded even if the file grew since its size was read, and by what the call may
    // still scan.
    let budget = limits.bounds.max_scan_bytes.saturating_sub(stats.bytes);
    let mut bytes = Vec::new();
    if file.take((SEARCH_FILE_CAP + 1).min(budget.saturating_add(1))).read_to_end(&mut bytes).is_err() {
        stats.unreadable += 1;
        return Ok(None);
    }
    stats.files += 1;
    stats.bytes += bytes.len() as u64;
    if bytes.len() as u64 > SEARCH_FILE_CAP {
        stats.large += 1;
        return Ok(None);
    }
    if bytes.len() as u64 > budget {
        // Past the call's scan budget: the walk stops at the next file.
        bytes.truncate(budget as usize);
    }
    if bytes.contains(&0) {
        stats.binary += 1;
        return Ok(None);
    }
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// `line` cut to at most `cap` bytes on a char boundary, marked when cut.
fn clip(line: &str, cap: usize) -> String {
    if line.len() <= cap {
        return line.to_owned();
    }
    let mut end = cap;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}

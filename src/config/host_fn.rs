//! Host functions backed by a command: the call's JSON arguments on stdin, its JSON result on
//! stdout; a non-zero exit is a `tool_failed` error.
//!
//! The exchange cannot hang or leak: stdin is written while stdout and stderr are read (a
//! command that prints before it reads, or never reads, cannot deadlock it; a closed stdin is
//! the command's own choice); `timeout_ms` bounds the whole exchange and kills the command's
//! process group, children included; the bytes read back are capped; and the command starts
//! with a clean environment holding only the variables its config allows (default `PATH`), so
//! API keys are never inherited, in the directory of the `cairn.toml` that declares it, so
//! `command = ["python3", "tool.py"]` beside the config works from any directory.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::error::{Error, ErrorCode};

/// The default cap on the bytes read back from a command's stdout (and, apart, its stderr).
pub(super) const DEFAULT_MAX_OUTPUT_BYTES: u64 = 16 * 1024 * 1024;
/// The default bound on one exchange.
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// A host function backed by a command: the call's JSON arguments on stdin, its JSON
/// result on stdout; a non-zero exit is a `tool_failed` error.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HostFunctionConfig {
    pub(super) command: Vec<String>,
    pub(super) timeout_ms: Option<u64>,
    /// The environment variables the command inherits (default `["PATH"]`); nothing else of
    /// cairn's environment (API keys included) reaches it.
    pub(super) env: Option<Vec<String>>,
    /// The most bytes read back from its stdout or stderr (default 16 MiB).
    pub(super) max_output_bytes: Option<u64>,
    /// What it does, for the planner's profile card (and the model, when a toolset offers it).
    pub(crate) description: Option<String>,
    /// A JSON Schema of the arguments it accepts (a TOML table, or a JSON file beside the
    /// config), for the profile card and the model.
    pub(crate) accepts: Option<toml::Value>,
    /// The version of its tool contract (default "1"): bump it when its meaning changes.
    pub(crate) version: Option<String>,
}

impl HostFunctionConfig {
    /// The command this table configures, with its defaults filled in.
    pub(crate) fn command(&self, name: &str, dir: Option<&Path>) -> HostCommand {
        HostCommand {
            name: name.to_owned(),
            cwd: dir.map(Path::to_path_buf),
            command: self.command.clone(),
            timeout: self.timeout_ms.map_or(DEFAULT_TIMEOUT, Duration::from_millis),
            env: self.env.clone().unwrap_or_else(|| vec!["PATH".to_owned()]),
            max_output: self.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT_BYTES),
            tape: None,
        }
    }
}

/// One configured command.
#[derive(Debug, Clone)]
pub(crate) struct HostCommand {
    /// The function's name, for errors.
    pub(super) name: String,
    /// The program and its arguments.
    pub(super) command: Vec<String>,
    /// Its working directory: the directory of the `cairn.toml` that declares it.
    pub(super) cwd: Option<std::path::PathBuf>,
    /// Bounds the whole exchange: start, stdin, stdout, exit.
    pub(super) timeout: Duration,
    /// The environment variables passed through from cairn's own environment.
    pub(super) env: Vec<String>,
    /// The most bytes read back from stdout or stderr.
    pub(super) max_output: u64,
    /// `--record`/`--replay`: exchanges kept on, or served from, the cassette.
    pub(super) tape: Option<std::sync::Arc<crate::provider::cassette::HostTape>>,
}

impl HostCommand {
    fn failed(&self, message: impl std::fmt::Display) -> Error {
        Error::new(ErrorCode::ToolFailed, format!("host function {}: {message}", self.name))
    }

    /// Runs the command once with `args` on its stdin; on replay, answers from the tape.
    pub(super) async fn call(&self, args: Value) -> Result<Value, Error> {
        let Some(tape) = &self.tape else { return self.run(&args).await };
        if let Some(answer) = tape.serve(&self.name, &args) {
            return answer;
        }
        let result = self.run(&args).await;
        tape.keep(&self.name, &args, &result);
        result
    }

    async fn run(&self, args: &Value) -> Result<Value, Error> {
        let Some(program) = self.command.first() else {
            return Err(self.failed("command is empty"));
        };
        let input = serde_json::to_vec(args).map_err(|e| self.failed(e))?;
        let mut command = tokio::process::Command::new(program);
        command
            .args(&self.command[1..])
            .env_clear()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        for var in &self.env {
            if let Some(value) = std::env::var_os(var) {
                command.env(var, value);
            }
        }
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        #[cfg(unix)]
        command.process_group(0);
        let mut child = command.spawn().map_err(|e| self.failed(format!("cannot start {program:?}: {e}")))?;
        // Kills the whole group when the exchange ends early: timeout, cap, or the run's
        // cancellation dropping this future.
        let _group = GroupGuard(child.id());
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(self.failed("cannot open its pipes"));
        };
        let write = async move {
            // A command that exits or closes stdin without reading it chose to: not an error.
            let _ = stdin.write_all(&input).await;
            let _ = stdin.shutdown().await;
            drop(stdin);
        };
        let exchange = async {
            let ((), out, err) = tokio::join!(
                write,
                read_capped(stdout, self.max_output),
                read_capped(stderr, self.max_output)
            );
            let status = child.wait().await;
            (out, err, status)
        };
        let (out, err, status) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| self.failed(format!("timed out after {} ms; killed", self.timeout.as_millis())))?;
        let status = status.map_err(|e| self.failed(e))?;
        let out = out.map_err(|e| self.output_error(e, "stdout"))?;
        let err = err.map_err(|e| self.output_error(e, "stderr"))?;
        if !status.success() {
            let stderr = String::from_utf8_lossy(&err);
            return Err(self.failed(format!("exited with {status}: {}", stderr.trim())));
        }
        let stdout = String::from_utf8_lossy(&out);
        if stdout.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(stdout.trim()).map_err(|e| self.failed(format!("stdout is not JSON: {e}")))
    }

    fn output_error(&self, error: ReadError, stream: &str) -> Error {
        match error {
            ReadError::TooLarge => self
                .failed(format!("its {stream} exceeds max_output_bytes ({} bytes); killed", self.max_output)),
            ReadError::Io(e) => self.failed(format!("cannot read its {stream}: {e}")),
        }
    }
}

enum ReadError {
    TooLarge,
    Io(std::io::Error),
}

/// Reads `from` to its end, failing once more than `max` bytes arrive.
async fn read_capped(mut from: impl AsyncRead + Unpin, max: u64) -> Result<Vec<u8>, ReadError> {
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut chunk).await.map_err(ReadError::Io)?;
        if n == 0 {
            return Ok(out);
        }
        if (out.len() + n) as u64 > max {
            return Err(ReadError::TooLarge);
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// Kills a process group on drop (the command leads its own group). Harmless when the group
/// has already exited.
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = self.0.and_then(|pid| i32::try_from(pid).ok())
            && pid > 0
        {
            // SAFETY: kill(2) on the group this command leads; no memory is touched.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
    }
}

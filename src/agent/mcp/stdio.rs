//! An MCP server over stdio: the child process, started with a clean environment in its own
//! process group and killed with that group when the session ends, and its stdout read through
//! a guard that ends the connection at the first line that is too long or is not a JSON-RPC
//! message (a server that floods or speaks garbage fails its calls at once, never hangs them).

use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// What the guard saw end the stream, or the last of the server's stderr: text for errors.
#[derive(Debug, Default)]
pub(super) struct Diagnostics {
    /// Why the stdout guard ended the connection, if it did.
    pub(super) violation: Option<String>,
    /// The last bytes the server wrote to stderr.
    pub(super) stderr_tail: Vec<u8>,
}

/// The bytes of stderr kept for errors.
const STDERR_TAIL: usize = 2048;

/// A started server: its pipes, and the process (its group killed on drop).
pub(super) struct Spawned {
    pub(super) stdout: GuardedStdout,
    pub(super) stdin: ChildStdin,
    pub(super) process: ServerProcess,
}

/// The server's process; dropping it kills the process group.
#[derive(Debug)]
pub(super) struct ServerProcess {
    child: Mutex<Child>,
    pid: Option<u32>,
    pub(super) diagnostics: Arc<Mutex<Diagnostics>>,
}

impl ServerProcess {
    /// How the process ended, if it has; `None` while it runs.
    pub(super) fn exit_status(&self) -> Option<std::process::ExitStatus> {
        self.child.lock().unwrap_or_else(|p| p.into_inner()).try_wait().ok().flatten()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = self.pid.and_then(|pid| i32::try_from(pid).ok())
            && pid > 0
        {
            // SAFETY: kill(2) on the group this server leads; no memory is touched.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let _ = self.child.lock().unwrap_or_else(|p| p.into_inner()).start_kill();
    }
}

/// Starts `command` in `cwd` with only the variables named in `env` from cairn's own.
pub(super) fn spawn(
    command: &[String],
    env: &[String],
    cwd: Option<&PathBuf>,
    max_line: usize,
) -> io::Result<Spawned> {
    let Some(program) = command.first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "the command is empty"));
    };
    let mut process = tokio::process::Command::new(program);
    process
        .args(&command[1..])
        .env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for var in env {
        if let Some(value) = std::env::var_os(var) {
            process.env(var, value);
        }
    }
    if let Some(dir) = cwd {
        process.current_dir(dir);
    }
    #[cfg(unix)]
    process.process_group(0);
    let mut child = process.spawn()?;
    let pid = child.id();
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(io::Error::other("cannot open its pipes"));
    };
    let diagnostics = Arc::new(Mutex::new(Diagnostics::default()));
    tokio::spawn(drain_stderr(stderr, diagnostics.clone()));
    Ok(Spawned {
        stdout: GuardedStdout {
            inner: stdout,
            line: 0,
            first: None,
            max_line,
            diagnostics: diagnostics.clone(),
        },
        stdin,
        process: ServerProcess { child: Mutex::new(child), pid, diagnostics },
    })
}

/// Reads stderr to its end (a server that writes a lot there cannot block on a full pipe),
/// keeping the last [`STDERR_TAIL`] bytes.
async fn drain_stderr(mut stderr: tokio::process::ChildStderr, diagnostics: Arc<Mutex<Diagnostics>>) {
    let mut chunk = vec![0u8; 8192];
    while let Ok(n) = stderr.read(&mut chunk).await {
        if n == 0 {
            return;
        }
        let mut diagnostics = diagnostics.lock().unwrap_or_else(|p| p.into_inner());
        let tail = &mut diagnostics.stderr_tail;
        tail.extend_from_slice(&chunk[..n]);
        if tail.len() > STDERR_TAIL {
            let cut = tail.len() - STDERR_TAIL;
            tail.drain(..cut);
        }
    }
}

/// The server's stdout, failing the read at a line longer than `max_line` bytes or one whose
/// first non-blank byte does not open a JSON object or array.
pub(super) struct GuardedStdout {
    inner: ChildStdout,
    /// Bytes of the current line so far.
    line: usize,
    /// The first non-blank byte of the current line.
    first: Option<u8>,
    max_line: usize,
    diagnostics: Arc<Mutex<Diagnostics>>,
}

impl GuardedStdout {
    fn violate(&self, why: String) -> io::Error {
        self.diagnostics.lock().unwrap_or_else(|p| p.into_inner()).violation = Some(why.clone());
        io::Error::new(io::ErrorKind::InvalidData, why)
    }

    /// Checks the bytes just read; the first violation ends the stream.
    fn check(&mut self, bytes: &[u8]) -> io::Result<()> {
        for &byte in bytes {
            if byte == b'\n' {
                self.line = 0;
                self.first = None;
                continue;
            }
            self.line += 1;
            if self.line > self.max_line {
                return Err(self.violate(format!("it sent a message of more than {} bytes", self.max_line)));
            }
            if self.first.is_none() && !byte.is_ascii_whitespace() {
                self.first = Some(byte);
                if byte != b'{' && byte != b'[' {
                    return Err(self.violate(format!(
                        "it wrote a line to stdout that is not JSON-RPC (it starts with {:?})",
                        char::from(byte)
                    )));
                }
            }
        }
        Ok(())
    }
}

impl AsyncRead for GuardedStdout {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => Poll::Ready(this.check(&buf.filled()[before..])),
            other => other,
        }
    }
}

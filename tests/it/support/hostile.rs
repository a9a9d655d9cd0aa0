//! Running a hostile script through the `cairn` binary under a time and memory bound: the one
//! copy of the corpus runner that the sandbox corpus (`hostile`) and the host-work corpus
//! (`hostile_host`) share.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The child's high-water resident memory (VmHWM), in bytes, while it runs.
fn high_water(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `cairn --store memory run -q SCRIPT` in `work` (its `cairn.toml`), with no provider keys.
pub(crate) fn cairn_run(work: &Path, script: &Path) -> Command {
    let mut command = Command::new(assert_cmd::cargo::cargo_bin("cairn"));
    command
        .current_dir(work)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("RUST_BACKTRACE", "0")
        .args(["--store", "memory", "run", "-q"])
        .arg(script);
    command
}

/// How a bounded run of the binary ended.
pub(crate) struct Ended {
    /// The child's peak resident memory (VmHWM), in bytes.
    pub(crate) peak: u64,
    /// Its exit code; `None` when it was killed at a bound (or died of a signal: -1).
    pub(crate) code: Option<i32>,
    pub(crate) stderr: String,
    /// The processor time it used (user and system), from `wait4`: on a loaded machine the
    /// script's work, unlike the wall-clock time, does not stretch with the other processes.
    pub(crate) cpu: Duration,
}

impl Ended {
    /// How a generated hostile script must end: exit 0 with its value, or exit 1 with a typed
    /// error (or exit 6, refused by lint, when `lint_may_refuse`); no panic on stderr; within
    /// `memory` bytes and 20 s of processor time (not wall clock: the machine's other work does
    /// not stretch it; unbounded, such loops ran to the 300 s script-time limit). `Err` says
    /// which bound it broke.
    pub(crate) fn typed_within(&self, memory: u64, lint_may_refuse: bool) -> Result<(), String> {
        let stderr = &self.stderr;
        let typed = match self.code {
            Some(0) => true,
            Some(1) => stderr.contains("sandbox_limit") || stderr.contains("script_error"),
            Some(6) => lint_may_refuse && stderr.contains("rejected by lint"),
            _ => false,
        };
        if !typed {
            return Err(format!("exit {:?}: {stderr}", self.code));
        }
        if stderr.contains("panicked at") {
            return Err(stderr.clone());
        }
        if self.peak > memory {
            return Err(format!("peak {} MiB", self.peak >> 20));
        }
        if self.cpu >= Duration::from_secs(20) {
            return Err(format!("{:?} of processor", self.cpu));
        }
        Ok(())
    }
}

/// Runs `command`, polling the child's VmHWM every few milliseconds (rusage's ru_maxrss would
/// include this test process's memory at the fork); kills it, and returns `None` for the exit
/// code, once it passes `time` (wall clock) or `memory`.
pub(crate) fn run_bounded(mut command: Command, time: Duration, memory: u64) -> Ended {
    use std::io::Read;
    #[allow(
        clippy::zombie_processes,
        reason = "reaped by the wait4 below, which also gives its processor time"
    )]
    let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    let started = Instant::now();
    let mut peak = 0;
    loop {
        if let Some(bytes) = high_water(child.id()) {
            peak = peak.max(bytes);
        }
        let killed = started.elapsed() > time || peak > memory;
        if killed {
            let _ = child.kill();
        }
        let flags = if killed { 0 } else { libc::WNOHANG };
        let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
        // SAFETY: `pid` is our child, not yet reaped (std's `Child` is never waited on here);
        // `status` and `usage` are valid for writes.
        let reaped = unsafe { libc::wait4(pid, &mut status, flags, &mut usage) };
        if reaped == pid {
            let code = if killed {
                None
            } else if libc::WIFEXITED(status) {
                Some(libc::WEXITSTATUS(status))
            } else {
                Some(-1)
            };
            let seconds = |t: libc::timeval| {
                Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
                    + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
            };
            let cpu = seconds(usage.ru_utime) + seconds(usage.ru_stime);
            return Ended { peak, code, stderr: reader.join().unwrap(), cpu };
        }
        assert!(reaped == 0, "wait4 failed for the child {pid}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

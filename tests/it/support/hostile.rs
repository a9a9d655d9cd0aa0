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

/// Runs `command`, polling the child's VmHWM every few milliseconds (rusage's ru_maxrss would
/// include this test process's memory at the fork); kills it, and returns `None` for the exit
/// code, once it passes `time` or `memory`. Returns the peak, the exit code and stderr.
pub(crate) fn run_bounded(mut command: Command, time: Duration, memory: u64) -> (u64, Option<i32>, String) {
    use std::io::Read;
    let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let mut peak = 0;
    loop {
        if let Some(bytes) = high_water(child.id()) {
            peak = peak.max(bytes);
        }
        if let Some(status) = child.try_wait().unwrap() {
            return (peak, Some(status.code().unwrap_or(-1)), reader.join().unwrap());
        }
        if started.elapsed() > time || peak > memory {
            let _ = child.kill();
            let _ = child.wait();
            return (peak, None, reader.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

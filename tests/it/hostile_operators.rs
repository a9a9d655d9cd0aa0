//! The interpreters' own operators and indexers on long strings (`tests/hostile/operators/`):
//! `a == b`, `a < b`, `s[i]`, `m[k]`, a `switch` in Rhai; `==`, `<` and a table key in Lua.
//! Each walks a whole string in one operation, work the operation budget cannot see (neither
//! interpreter lets the host hook its built-in operators), so a loop of them used to run to a
//! 300 s script-time limit. The script-time limit is the backstop sized for that: through
//! the `cairn` binary each ends `sandbox_limit` by that limit, in bounded processor time and
//! within the run's memory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::support::hostile::{cairn_run, run_bounded};

/// The run's memory limit here and the fixed overhead allowed above it.
const MEMORY_LIMIT_MB: u64 = 64;
const OVERHEAD_MB: u64 = 128;

/// Every script of `tests/hostile/operators/`.
fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile/operators");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rhai" || ext == "lua"))
        .collect();
    files.sort();
    files
}

/// Runs `script` with `config` as the work directory's `cairn.toml`; `Err` says how it did
/// not end at the script-time limit within `cpu` of processor time and the memory bound.
fn ends_at_the_script_time_limit(script: &Path, config: &str, cpu: Duration) -> Result<(), String> {
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("cairn.toml"), config).unwrap();
    let name = script.file_name().unwrap().to_string_lossy().into_owned();
    let memory = (MEMORY_LIMIT_MB + OVERHEAD_MB) << 20;
    let ended = run_bounded(cairn_run(work.path(), script), Duration::from_secs(90), memory);
    let stderr = &ended.stderr;
    if ended.code != Some(1) || !stderr.contains("sandbox_limit") || !stderr.contains("script-time limit") {
        return Err(format!("{name}: exit {:?}: {stderr}", ended.code));
    }
    if stderr.contains("panicked at") || ended.peak > memory || ended.cpu >= cpu {
        return Err(format!("{name}: peak {} MiB, {:?} of processor: {stderr}", ended.peak >> 20, ended.cpu));
    }
    Ok(())
}

/// Each case under a 2 s limit, two at a time (each is one busy thread).
#[test]
fn operators_on_long_strings_end_at_the_script_time_limit() {
    let files = corpus();
    assert!(files.len() >= 8, "{files:?}");
    let config = format!("[sandbox]\nmemory_mb = {MEMORY_LIMIT_MB}\nwall_time_s = 2\n");
    let mut failures = Vec::new();
    for pair in files.chunks(2) {
        let ended: Vec<Result<(), String>> = std::thread::scope(|scope| {
            let runs: Vec<_> = pair
                .iter()
                .map(|file| {
                    scope.spawn(|| ends_at_the_script_time_limit(file, &config, Duration::from_secs(10)))
                })
                .collect();
            runs.into_iter().map(|run| run.join().unwrap()).collect()
        });
        failures.extend(ended.into_iter().filter_map(Result::err));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// With no `[sandbox]` settings at all, the default limit ends one in seconds, not minutes.
#[test]
fn the_default_script_time_limit_ends_an_operator_loop_in_seconds() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile/operators/equal_strings.rhai");
    let ended = ends_at_the_script_time_limit(&script, "", Duration::from_secs(20));
    assert_eq!(ended, Ok(()));
}

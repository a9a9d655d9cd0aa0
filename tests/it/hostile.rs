//! The hostile-script corpus (`tests/hostile/*.rhai`): every script is rejected by lint or
//! ends its run with `sandbox_limit` in bounded time and bounded memory; the host never
//! crashes, hangs or overflows its stack.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::RhaiDialect;
use cairn::SandboxLimits;
use cairn::{Engine, ErrorCode, MemoryStore, RunHandle, RunOptions, RunStatus, Script};
use serde_json::json;

use super::support::hostile::{cairn_run, run_bounded};

/// How each corpus script must end.
enum Expect {
    /// Refused before running, by this lint rule.
    Rejected(&'static str),
    /// Ended by the sandbox.
    SandboxLimit,
}

const CORPUS: [(&str, Expect); 21] = [
    ("fork_bomb", Expect::SandboxLimit),
    ("parallel_memory_bomb", Expect::SandboxLimit),
    ("infinite_loop", Expect::SandboxLimit),
    ("loop_in_branch", Expect::SandboxLimit),
    ("string_bomb", Expect::SandboxLimit),
    ("array_bomb", Expect::SandboxLimit),
    ("nested_array_bomb", Expect::SandboxLimit),
    ("map_bomb", Expect::SandboxLimit),
    ("deep_recursion", Expect::SandboxLimit),
    ("catch_own_limit", Expect::SandboxLimit),
    ("recursion_in_branch", Expect::SandboxLimit),
    ("memory_many_strings", Expect::SandboxLimit),
    ("memory_copies_in_variables", Expect::SandboxLimit),
    ("memory_in_branches", Expect::SandboxLimit),
    ("memory_recursion_holding_strings", Expect::SandboxLimit),
    ("slow_operations", Expect::SandboxLimit),
    ("deep_step_result", Expect::SandboxLimit),
    ("forbidden_eval", Expect::Rejected("forbidden")),
    ("forbidden_time", Expect::Rejected("forbidden")),
    ("forbidden_print", Expect::Rejected("forbidden")),
    ("forbidden_import", Expect::Rejected("forbidden")),
];

#[test]
fn every_hostile_script_is_rejected_or_stopped_in_bounded_time() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
    let files = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "rhai"))
        .count();
    assert_eq!(files, CORPUS.len(), "every corpus file has an expectation");
    // A smaller operation budget keeps the loops short in debug builds; every other limit
    // is the standard one.
    let limits = SandboxLimits {
        max_operations: 2_000_000,
        max_wall_time: Duration::from_secs(5),
        ..SandboxLimits::STANDARD
    };
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::builder(store).dialect(Arc::new(RhaiDialect::with_limits(limits))).build().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for (name, expect) in CORPUS {
        let source = std::fs::read_to_string(dir.join(format!("{name}.rhai"))).unwrap();
        let started = Instant::now();
        let _guard = runtime.enter();
        let result = engine.run_script(&Script::rhai(name, &source), json!({}), RunOptions::default());
        match expect {
            Expect::Rejected(rule) => {
                let err = result.err().unwrap_or_else(|| panic!("{name} was not rejected"));
                assert_eq!(err.code, ErrorCode::Validation, "{name}");
                assert!(err.message.contains(rule), "{name}: {}", err.message);
            }
            Expect::SandboxLimit => {
                let handle = result.unwrap_or_else(|e| panic!("{name} was rejected: {e}"));
                ends_with_sandbox_limit(&runtime, handle, name);
            }
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{name} took {:?}", started.elapsed());
    }
}

/// Waits (at most a minute) for the in-process run of the corpus script `name` and checks that
/// the sandbox ended it.
fn ends_with_sandbox_limit(runtime: &tokio::runtime::Runtime, handle: RunHandle, name: &str) {
    let outcome = runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), handle.result()).await })
        .unwrap_or_else(|_| panic!("{name} hung"))
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Error, "{name}: {outcome:?}");
    assert_eq!(outcome.error.as_ref().unwrap().code, ErrorCode::SandboxLimit, "{name}: {outcome:?}");
}

/// Every corpus script the sandbox must stop, through the `cairn` binary: it ends with
/// `sandbox_limit` within the time bound, and the process's peak memory stays near the
/// configured limit (64 MiB of script memory), however much the script tries to take.
#[test]
fn hostile_scripts_end_in_bounded_time_and_memory_through_the_binary() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        work.path().join("cairn.toml"),
        "[sandbox]\nmemory_mb = 64\nwall_time_s = 5\nmax_operations = 2000000\n",
    )
    .unwrap();
    for (name, expect) in CORPUS {
        if !matches!(expect, Expect::SandboxLimit) {
            continue;
        }
        let command = cairn_run(work.path(), &dir.join(format!("{name}.rhai")));
        let started = Instant::now();
        let ended = run_bounded(command, Duration::from_secs(60), u64::MAX);
        let (peak, code, stderr) = (ended.peak, ended.code, ended.stderr);
        assert_eq!(code, Some(1), "{name}: {stderr}");
        assert!(stderr.contains("sandbox_limit"), "{name}: {stderr}");
        assert!(started.elapsed() < Duration::from_secs(60), "{name} took {:?}", started.elapsed());
        assert!(peak < 192 << 20, "{name} peaked at {} MiB (limit 64 MiB)", peak >> 20);
    }
}

/// The script-time limit counts the time the script computes, not the time it waits for model
/// calls: six 100 ms calls pass under a 0.3 s limit, while a loop of expensive operations is
/// stopped near it.
#[test]
fn the_wall_clock_limit_counts_script_time_not_model_waits() {
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        work.path().join("cairn.toml"),
        "[sandbox]\nwall_time_s = 0.3\n[providers.echo]\nkind = \"echo\"\nlatency_ms = 100\n",
    )
    .unwrap();
    std::fs::write(
        work.path().join("waits.rhai"),
        "let out = []; for i in 0..6 { out.push(agent(`q ${i}`)); } out.len()",
    )
    .unwrap();
    let binary = assert_cmd::cargo::cargo_bin("cairn");
    let run = |script: &str| {
        std::process::Command::new(&binary)
            .current_dir(work.path())
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .args(["--store", "memory", "run", "-q", script])
            .output()
            .unwrap()
    };
    let waits = run("waits.rhai");
    assert!(waits.status.success(), "{}", String::from_utf8_lossy(&waits.stderr));
    let started = Instant::now();
    let slow = run(std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/hostile/slow_operations.rhai")
        .to_str()
        .unwrap());
    let stderr = String::from_utf8_lossy(&slow.stderr);
    assert!(stderr.contains("sandbox_limit") && stderr.contains("script-time limit"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
}

/// The Lua corpus (`tests/hostile/*.lua`): every script is rejected by lint or ends its run
/// with `sandbox_limit`, in process and through the binary, in bounded time and memory.
fn lua_corpus() -> Vec<(String, std::path::PathBuf)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|path| path.extension().is_some_and(|x| x == "lua"))
        .map(|path| (path.file_stem().unwrap().to_string_lossy().into_owned(), path))
        .collect();
    files.sort();
    assert!(files.len() >= 24, "the Lua corpus shrank: {}", files.len());
    files
}

#[test]
fn every_hostile_lua_script_is_rejected_or_stopped_in_bounded_time() {
    let limits = SandboxLimits {
        max_operations: 2_000_000,
        max_wall_time: Duration::from_secs(5),
        max_memory: 64 << 20,
        ..SandboxLimits::STANDARD
    };
    let store = Arc::new(MemoryStore::new());
    let engine =
        Engine::builder(store).dialect(Arc::new(cairn::LuaDialect::with_limits(limits))).build().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for (name, path) in lua_corpus() {
        let source = std::fs::read_to_string(&path).unwrap();
        let started = Instant::now();
        let _guard = runtime.enter();
        match engine.run_script(&Script::new("lua", &name, &source), json!({}), RunOptions::default()) {
            // Lint may refuse what the sandbox would stop.
            Err(err) => {
                assert_eq!(err.code, ErrorCode::Validation, "{name}: {err}");
                assert!(err.message.contains("script rejected"), "{name}: {}", err.message);
            }
            Ok(handle) => ends_with_sandbox_limit(&runtime, handle, &name),
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{name} took {:?}", started.elapsed());
    }
}

#[test]
fn hostile_lua_scripts_end_in_bounded_time_and_memory_through_the_binary() {
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        work.path().join("cairn.toml"),
        "[sandbox]\nmemory_mb = 64\nwall_time_s = 5\nmax_operations = 2000000\n",
    )
    .unwrap();
    for (name, path) in lua_corpus() {
        let command = cairn_run(work.path(), &path);
        let started = Instant::now();
        let ended = run_bounded(command, Duration::from_secs(60), u64::MAX);
        let (peak, code, stderr) = (ended.peak, ended.code, ended.stderr);
        let stopped = code == Some(1) && stderr.contains("sandbox_limit");
        let rejected = stderr.contains("rejected by lint");
        assert!(stopped || rejected, "{name}: exit {code:?}: {stderr}");
        assert!(started.elapsed() < Duration::from_secs(60), "{name} took {:?}", started.elapsed());
        assert!(peak < 192 << 20, "{name} peaked at {} MiB (limit 64 MiB)", peak >> 20);
    }
}

//! The host-work corpus (`tests/hostile/host/`, plus three large sources generated here): each
//! script makes the *host* do work its interpreter does not see (journal entries, hashing,
//! copies, builtins, the echo model's output, the parsers). Through the `cairn` binary, each
//! must end with a typed error or a lint refusal within 20 s, its peak resident memory within
//! the run's limit (64 MiB) plus a fixed overhead, and never crash, hang or succeed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How a corpus script must end.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// `sandbox_limit`: a bound of the run ended it.
    Limit,
    /// `script_error`: a typed error of the script's own making (never a panic).
    ScriptError,
    /// Refused by lint or compile before it ran.
    Rejected,
}

/// Every file of `tests/hostile/host/` and how it must end.
const CORPUS: &[(&str, Expect)] = &[
    ("closure_chain.rhai", Expect::Limit),
    ("echo_min_items.lua", Expect::Limit),
    ("echo_min_items.rhai", Expect::Limit),
    ("echo_min_length.lua", Expect::Limit),
    ("echo_min_length.rhai", Expect::Limit),
    ("echo_nested_arrays.lua", Expect::Limit),
    ("echo_nested_arrays.rhai", Expect::Limit),
    ("gmatch_copies.lua", Expect::Limit),
    ("index_of_slow.rhai", Expect::Limit),
    ("log_flood.lua", Expect::Limit),
    ("log_flood.rhai", Expect::Limit),
    ("non_total_sort.rhai", Expect::ScriptError),
    ("now_flood.lua", Expect::Limit),
    ("now_flood.rhai", Expect::Limit),
    ("parallel_many_items.lua", Expect::Limit),
    ("parallel_many_items.rhai", Expect::Limit),
    ("random_huge_key.lua", Expect::Limit),
    ("random_huge_key.rhai", Expect::Limit),
    ("replace_bomb.rhai", Expect::Limit),
    ("sparse_json.lua", Expect::Limit),
    ("step_result_flood.lua", Expect::Limit),
    ("upper_slow.lua", Expect::Limit),
];

/// The sources too large to keep in the repository, written where the test runs: the parsers'
/// superlinear cases at 1 MB (over the size limit) and just under the size limit (over the
/// token budget).
fn generated(dir: &Path) -> Vec<(PathBuf, Expect)> {
    let let_bindings = |bytes: usize| {
        let mut source = String::new();
        let mut i = 0;
        while source.len() < bytes {
            source.push_str(&format!("let a{i}=0;\n"));
            i += 1;
        }
        source
    };
    let or_chain = |bytes: usize| format!("return a{}\n", " or a".repeat(bytes / 5));
    let assignments = |bytes: usize| "a=1\n".repeat(bytes / 4);
    let cases: [(&str, String); 6] = [
        ("let_bindings_1mb.rhai", let_bindings(1_000_000)),
        ("let_bindings_250kb.rhai", let_bindings(250_000)),
        ("or_chain_1mb.lua", or_chain(1_000_000)),
        ("or_chain_250kb.lua", or_chain(250_000)),
        ("assignments_1mib.lua", assignments((1 << 20) - 64)),
        ("assignments_250kb.lua", assignments(250_000)),
    ];
    cases
        .into_iter()
        .map(|(name, source)| {
            let path = dir.join(name);
            std::fs::write(&path, source).unwrap();
            (path, Expect::Rejected)
        })
        .collect()
}

/// The child's high-water resident memory (VmHWM), in bytes.
fn high_water(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Runs `command`, polling the child's VmHWM every few milliseconds; kills it (and returns
/// `None` for the exit code) once it passes `time` or `memory`.
fn run_bounded(
    mut command: std::process::Command,
    time: Duration,
    memory: u64,
) -> (u64, Option<i32>, String) {
    use std::io::Read;
    let mut child =
        command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
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
            return (peak, status.code(), reader.join().unwrap());
        }
        if started.elapsed() > time || peak > memory {
            let _ = child.kill();
            let _ = child.wait();
            return (peak, None, reader.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The run's memory limit in this test and the fixed overhead allowed above it (the binary,
/// its runtime, the allocator's slack).
const MEMORY_LIMIT_MB: u64 = 64;
const OVERHEAD_MB: u64 = 128;

#[test]
fn every_host_work_script_ends_typed_within_20_s_and_its_memory_limit() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile/host");
    let mut files: Vec<String> = std::fs::read_dir(&corpus)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let listed: Vec<String> = CORPUS.iter().map(|(name, _)| (*name).to_owned()).collect();
    assert_eq!(files, listed, "every corpus file has an expectation, and every expectation a file");

    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("cairn.toml"), format!("[sandbox]\nmemory_mb = {MEMORY_LIMIT_MB}\n"))
        .unwrap();
    let mut cases: Vec<(PathBuf, Expect)> =
        CORPUS.iter().map(|(name, expect)| (corpus.join(name), *expect)).collect();
    cases.extend(generated(work.path()));
    cases.push((
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile/slow_operations.rhai"),
        Expect::Limit,
    ));

    let binary = assert_cmd::cargo::cargo_bin("cairn");
    let mut failures = Vec::new();
    for (path, expect) in cases {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut command = std::process::Command::new(&binary);
        command
            .current_dir(work.path())
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env("RUST_BACKTRACE", "0")
            .args(["--store", "memory", "run", "-q"])
            .arg(&path);
        let started = Instant::now();
        let budget = (MEMORY_LIMIT_MB + OVERHEAD_MB) << 20;
        let (peak, code, stderr) = run_bounded(command, Duration::from_secs(20), budget);
        let took = started.elapsed();
        let typed = match expect {
            Expect::Limit => stderr.contains("sandbox_limit"),
            Expect::ScriptError => stderr.contains("script_error"),
            Expect::Rejected => stderr.contains("rejected by lint"),
        };
        let ok = code.is_some_and(|c| c != 0)
            && typed
            && !stderr.contains("panicked at")
            && peak <= budget
            && took < Duration::from_secs(20);
        if !ok {
            let tail: String = stderr.chars().take(400).collect();
            failures.push(format!("{name}: exit {code:?} after {took:?}, peak {} MiB: {tail}", peak >> 20));
        }
    }
    assert!(failures.is_empty(), "{} scripts got through:\n{}", failures.len(), failures.join("\n"));
}

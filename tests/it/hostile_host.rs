//! The host-work corpus (`tests/hostile/host/`, plus three large sources generated here): each
//! script makes the *host* do work its interpreter does not see (journal entries, hashing,
//! copies, builtins, the echo model's output, the parsers). Through the `cairn` binary, each
//! must end with a typed error or a lint refusal within 20 s of processor time (and a minute of
//! wall clock), its peak resident memory within the run's limit (64 MiB) plus a fixed
//! overhead, and never crash, hang or succeed. `docs/sandbox.md` maps the classes to
//! these files.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::support::hostile::{cairn_run, run_bounded};

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
    ("array_eq_refs.rhai", Expect::Limit),
    ("byte_many.lua", Expect::Limit),
    ("chars_from_slow.rhai", Expect::Limit),
    ("chars_iterators.rhai", Expect::Limit),
    ("closure_chain.lua", Expect::Limit),
    ("closure_chain.rhai", Expect::Limit),
    ("closure_chain_in_block.rhai", Expect::Limit),
    ("closure_chain_in_function.rhai", Expect::Limit),
    ("closure_chain_mutated.rhai", Expect::Limit),
    ("closure_chain_reassigned.rhai", Expect::Limit),
    ("closure_chain_to_the_limit.lua", Expect::Limit),
    ("closure_chain_to_the_limit.rhai", Expect::Limit),
    ("concat_bomb.lua", Expect::Limit),
    ("echo_const.lua", Expect::Limit),
    ("echo_const.rhai", Expect::Limit),
    ("echo_enum.lua", Expect::Limit),
    ("echo_enum.rhai", Expect::Limit),
    ("echo_min_items.lua", Expect::Limit),
    ("echo_min_items.rhai", Expect::Limit),
    ("echo_min_length.lua", Expect::Limit),
    ("echo_min_length.rhai", Expect::Limit),
    ("echo_nested_arrays.lua", Expect::Limit),
    ("echo_nested_arrays.rhai", Expect::Limit),
    ("echo_pattern.lua", Expect::Limit),
    ("echo_pattern.rhai", Expect::Limit),
    ("find_slow.lua", Expect::Limit),
    ("get_slow.rhai", Expect::Limit),
    ("gmatch_copies.lua", Expect::Limit),
    ("gsub_bomb.lua", Expect::Limit),
    ("huge_step_result.lua", Expect::Limit),
    ("huge_step_result.rhai", Expect::Limit),
    ("in_array_refs.rhai", Expect::Limit),
    ("index_of_slow.rhai", Expect::Limit),
    ("json_map_refs.rhai", Expect::Limit),
    ("len_slow.rhai", Expect::Limit),
    ("log_flood.lua", Expect::Limit),
    ("log_flood.rhai", Expect::Limit),
    ("log_map_refs.rhai", Expect::Limit),
    ("map_eq_refs.rhai", Expect::Limit),
    ("map_key_slow.rhai", Expect::Limit),
    ("map_to_json_refs.rhai", Expect::Limit),
    ("non_total_sort.lua", Expect::ScriptError),
    ("non_total_sort.rhai", Expect::ScriptError),
    ("now_flood.lua", Expect::Limit),
    ("now_flood.rhai", Expect::Limit),
    ("pad_bomb.rhai", Expect::Limit),
    ("parallel_many_items.lua", Expect::Limit),
    ("parallel_many_items.rhai", Expect::Limit),
    ("parse_float_slow.rhai", Expect::Limit),
    ("parse_int_slow.rhai", Expect::Limit),
    ("print_array_refs.rhai", Expect::Limit),
    ("print_map_refs.rhai", Expect::Limit),
    ("prompt_flood.lua", Expect::Limit),
    ("prompt_flood.rhai", Expect::Limit),
    ("random_huge_key.lua", Expect::Limit),
    ("random_huge_key.rhai", Expect::Limit),
    ("replace_bomb.rhai", Expect::Limit),
    ("sort_refs.rhai", Expect::Limit),
    ("sparse_json.lua", Expect::Limit),
    ("sparse_json.rhai", Expect::Limit),
    ("split_pieces.rhai", Expect::Limit),
    ("starts_with_slow.rhai", Expect::Limit),
    ("step_map_refs.rhai", Expect::Limit),
    ("step_result_flood.lua", Expect::Limit),
    ("step_result_flood.rhai", Expect::Limit),
    ("string_arith_slow.lua", Expect::Limit),
    ("throw_map_refs.rhai", Expect::ScriptError),
    ("to_chars.rhai", Expect::Limit),
    ("tonumber_slow.lua", Expect::Limit),
    ("trim_slow.rhai", Expect::Limit),
    ("unpack_many.lua", Expect::Limit),
    ("upper_slow.lua", Expect::Limit),
    ("upper_slow.rhai", Expect::Limit),
    ("utf8_len_slow.lua", Expect::Limit),
    ("utf8_offset_slow.lua", Expect::Limit),
];

/// The sources too large to keep in the repository, written where the test runs: the parsers'
/// superlinear cases at 1 MB (over the size limit) and just under the size limit (over the
/// token budget).
fn generated(dir: &Path) -> Vec<(PathBuf, Expect)> {
    // `bytes` of numbered bindings, `binding(i)` each (a Rhai `let`, a Lua `local`).
    let bindings = |bytes: usize, binding: &dyn Fn(usize) -> String| {
        let mut source = String::new();
        let mut i = 0;
        while source.len() < bytes {
            source.push_str(&binding(i));
            i += 1;
        }
        source
    };
    let let_bindings = |bytes: usize| bindings(bytes, &|i| format!("let a{i}=0;\n"));
    let or_chain = |bytes: usize| format!("return a{}\n", " or a".repeat(bytes / 5));
    let assignments = |bytes: usize| "a=1\n".repeat(bytes / 4);
    // Each dialect's twin of the other's: locals in Lua, a `||` chain and assignments in Rhai.
    let locals = |bytes: usize| bindings(bytes, &|i| format!("local a{i}=0\n"));
    let rhai_or_chain = |bytes: usize| format!("let a = true;\na{}\n", " || a".repeat(bytes / 5));
    let rhai_assignments = |bytes: usize| format!("let a = 0;\n{}", "a=1;\n".repeat(bytes / 5));
    let cases: [(&str, String); 12] = [
        ("let_bindings_1mb.rhai", let_bindings(1_000_000)),
        ("let_bindings_250kb.rhai", let_bindings(250_000)),
        ("locals_1mb.lua", locals(1_000_000)),
        ("locals_250kb.lua", locals(250_000)),
        ("or_chain_1mb.lua", or_chain(1_000_000)),
        ("or_chain_250kb.lua", or_chain(250_000)),
        ("or_chain_1mb.rhai", rhai_or_chain(1_000_000)),
        ("or_chain_250kb.rhai", rhai_or_chain(250_000)),
        ("assignments_1mib.lua", assignments((1 << 20) - 64)),
        ("assignments_250kb.lua", assignments(250_000)),
        ("assignments_1mib.rhai", rhai_assignments((1 << 20) - 64)),
        ("assignments_250kb.rhai", rhai_assignments(250_000)),
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

/// The run's memory limit in this test and the fixed overhead allowed above it (the binary,
/// its runtime, the allocator's slack).
const MEMORY_LIMIT_MB: u64 = 64;
const OVERHEAD_MB: u64 = 128;

/// The processor time a case may take (user and system, the binary's own), and the wall-clock
/// time after which it is killed as hung. The work a script can make is bounded by its budgets
/// (the default 50 M operations is about 2.5 s of a debug build's processor); the wall clock
/// also counts the time the machine's other processes take, so it is only the hang guard.
const WORK: Duration = Duration::from_secs(20);
const HANG: Duration = Duration::from_secs(60);

#[test]
fn every_host_work_script_ends_typed_within_20_s_of_work_and_its_memory_limit() {
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

    let mut failures = Vec::new();
    for (path, expect) in cases {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let command = cairn_run(work.path(), &path);
        let started = Instant::now();
        let budget = (MEMORY_LIMIT_MB + OVERHEAD_MB) << 20;
        let ended = run_bounded(command, HANG, budget);
        let took = started.elapsed();
        let (peak, code, stderr, cpu) = (ended.peak, ended.code, ended.stderr, ended.cpu);
        let typed = match expect {
            Expect::Limit => stderr.contains("sandbox_limit"),
            Expect::ScriptError => stderr.contains("script_error"),
            Expect::Rejected => stderr.contains("rejected by lint"),
        };
        let ok = code.is_some_and(|c| c != 0)
            && typed
            && !stderr.contains("panicked at")
            && peak <= budget
            && cpu < WORK
            && took < HANG;
        if !ok {
            let tail: String = stderr.chars().take(400).collect();
            failures.push(format!(
                "{name}: exit {code:?} after {took:?} ({cpu:?} of processor), peak {} MiB: {tail}",
                peak >> 20
            ));
        }
    }
    assert!(failures.is_empty(), "{} scripts got through:\n{}", failures.len(), failures.join("\n"));
}

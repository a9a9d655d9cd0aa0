//! Benchmarks through the `cairn` binary, as a user meets the engine: `cairn run` of a Rhai
//! script on the SQLite store with the echo provider, each run a fresh process and a fresh
//! database. Process start is subtracted: every workload also runs with zero calls (the same
//! script, the same config), and a figure is `(t(n) - t(0)) / n`.
//!
//! ```sh
//! cargo bench --bench binary
//! CAIRN_BENCH_ROUNDS=11 cargo bench --bench binary agent_seq   # one workload, more rounds
//! ```
//!
//! Workloads:
//! - `agent_seq`: 2,000 sequential `agent` calls, echo latency 0 (per call);
//! - `step_seq`: 10,000 sequential `step`s (per step);
//! - `parallel_500`: `parallel` over 500 items, each a 50 ms echo call, concurrency 500 (total,
//!   process start subtracted); each branch is one `agent` call, so it runs as an engine future
//!   on the fan-out's thread (no thread per branch);
//! - `parallel_500_threaded`: the same fan-out with branches that do more than one call
//!   (`{ let r = agent(..); r }`), so each still runs on a branch thread of its own;
//! - `trivial`: `cairn run` of a script with no effects, process start to exit (total);
//! - `lua_agent_seq`, `lua_step_seq`, `lua_parallel_500`, `lua_trivial`: the same workloads
//!   written in Lua (targets: ≤ 40 µs per sequential agent call, ≤ 150 ms for the 500-way
//!   fan-out of 50 ms calls).
//!
//! Each round runs the zero-call baseline and the workload back to back; the figure printed is
//! the median over the rounds, with the range.
//!
//! Wall time needs a quiet machine. On a loaded one, count instructions instead (repeatable):
//! run the release binary under `valgrind --tool=callgrind` (add `--max-threads=1200` for
//! `parallel_500`) on the same script and config with `n` and with 0, and divide the
//! difference by `n`. Instructions miss the kernel's share (thread starts, SQLite's file locks
//! and writes) and the exit-time WAL checkpoint, which `t(n) - t(0)` includes: a writer that
//! never pauses (echo latency 0) never lets the checkpoint thread run, so the log grows by
//! about 5.5 KB per call and the close copies and fsyncs all of it.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const AGENT_CALLS: u64 = 2_000;
const STEPS: u64 = 10_000;
const PARALLEL: u64 = 500;

const AGENT_SEQ: &str = r#"
let n = args.n;
let done = 0;
for i in 0..n {
    agent(`summarize item ${i}`);
    done += 1;
}
done
"#;

const STEP_SEQ: &str = r#"
let n = args.n;
let total = 0;
for i in 0..n {
    total += step(`step ${i}`, || 1);
}
total
"#;

const PARALLEL_N: &str = r#"
let items = [];
for i in 0..args.n { items.push(i); }
let out = parallel(items, |i| agent(`question ${i}`));
out.len()
"#;

// The same fan-out, with branches that keep their thread (a statement before the value).
const PARALLEL_N_THREADED: &str = r#"
let items = [];
for i in 0..args.n { items.push(i); }
let out = parallel(items, |i| { let answer = agent(`question ${i}`); answer });
out.len()
"#;

const TRIVIAL: &str = "let x = 40 + 2; x";

// The same workloads in the Lua dialect.
const LUA_AGENT_SEQ: &str = r#"
local done = 0
for i = 0, args.n - 1 do
  agent("summarize item " .. i)
  done = done + 1
end
return done
"#;

const LUA_STEP_SEQ: &str = r#"
local total = 0
for i = 0, args.n - 1 do
  total = total + step("step " .. i, function() return 1 end)
end
return total
"#;

const LUA_PARALLEL_N: &str = r#"
local items = {}
for i = 0, args.n - 1 do items[#items + 1] = i end
local out = parallel(items, function(i) return agent("question " .. i) end)
return #out
"#;

const LUA_TRIVIAL: &str = "local x = 40 + 2 return x";

struct Workload {
    name: &'static str,
    script: &'static str,
    n: u64,
    latency_ms: u64,
    /// Divide by `n` (a per-call figure) or report the total.
    per_call: bool,
    /// The script's file extension, which picks its dialect.
    ext: &'static str,
}

const WORKLOADS: &[Workload] = &[
    Workload {
        name: "agent_seq",
        script: AGENT_SEQ,
        n: AGENT_CALLS,
        latency_ms: 0,
        per_call: true,
        ext: "rhai",
    },
    Workload { name: "step_seq", script: STEP_SEQ, n: STEPS, latency_ms: 0, per_call: true, ext: "rhai" },
    Workload {
        name: "parallel_500",
        script: PARALLEL_N,
        n: PARALLEL,
        latency_ms: 50,
        per_call: false,
        ext: "rhai",
    },
    Workload {
        name: "parallel_500_threaded",
        script: PARALLEL_N_THREADED,
        n: PARALLEL,
        latency_ms: 50,
        per_call: false,
        ext: "rhai",
    },
    Workload { name: "trivial", script: TRIVIAL, n: 0, latency_ms: 0, per_call: false, ext: "rhai" },
    Workload {
        name: "lua_agent_seq",
        script: LUA_AGENT_SEQ,
        n: AGENT_CALLS,
        latency_ms: 0,
        per_call: true,
        ext: "lua",
    },
    Workload {
        name: "lua_step_seq",
        script: LUA_STEP_SEQ,
        n: STEPS,
        latency_ms: 0,
        per_call: true,
        ext: "lua",
    },
    Workload {
        name: "lua_parallel_500",
        script: LUA_PARALLEL_N,
        n: PARALLEL,
        latency_ms: 50,
        per_call: false,
        ext: "lua",
    },
    Workload { name: "lua_trivial", script: LUA_TRIVIAL, n: 0, latency_ms: 0, per_call: false, ext: "lua" },
];

fn config(latency_ms: u64) -> String {
    format!(
        "concurrency = 1000\nmax_spawns = 100000\n\n[routing]\ndefault = \"echo:default\"\n\n[providers.echo]\nkind = \"echo\"\nlatency_ms = {latency_ms}\n"
    )
}

/// One `cairn run` in a fresh directory; the wall time from spawn to exit.
fn run_once(dir: &Path, workload: &Workload, n: u64) -> Duration {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("bench dir");
    std::fs::write(dir.join("cairn.toml"), config(workload.latency_ms)).expect("write config");
    let file = format!("w.{}", workload.ext);
    std::fs::write(dir.join(&file), workload.script).expect("write script");
    let start = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .current_dir(dir)
        .args(["--store", "sqlite:bench.db", "run", "-q", &file, "--args"])
        .arg(format!("{{\"n\": {n}}}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("spawn cairn");
    let elapsed = start.elapsed();
    assert!(
        output.status.success(),
        "{} (n = {n}) failed: {}\n{}",
        workload.name,
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    elapsed
}

fn main() {
    let filter = support::names();
    let rounds = support::rounds(7);
    let root = tempfile::tempdir().expect("tempdir");
    for workload in WORKLOADS {
        if !filter.is_empty() && !filter.iter().any(|f| workload.name.contains(f.as_str())) {
            continue;
        }
        let dir = root.path().join(workload.name);
        // One warm-up round: the page cache, the binary, the dynamic loader.
        run_once(&dir, workload, 0);
        let mut figures = Vec::with_capacity(rounds);
        let mut starts = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let base = run_once(&dir, workload, 0).as_secs_f64();
            starts.push(base * 1e3);
            if workload.n == 0 {
                figures.push(base * 1e3);
                continue;
            }
            let full = run_once(&dir, workload, workload.n).as_secs_f64();
            let net = (full - base).max(0.0);
            figures.push(if workload.per_call { net / workload.n as f64 * 1e6 } else { net * 1e3 });
        }
        let (lo, hi) = figures.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let unit = if workload.per_call { "µs per call" } else { "ms" };
        let med = support::median(&mut figures);
        let start = support::median(&mut starts);
        println!(
            "{:<22} median {med:>9.2} {unit} (range {lo:.2}–{hi:.2}; process start {start:.1} ms, {rounds} rounds)",
            workload.name
        );
    }
}

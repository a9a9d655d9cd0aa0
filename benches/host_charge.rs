//! What charging host work to the sandbox costs an agent call (issue 25: "an agent call stays
//! within 5 % of today").
//!
//! Every engine call charges its run for the bytes it hashes, copies and keeps, and every
//! operation for the bytes its builtins built (`src/script/host.rs`). Built with the
//! `bench-seams` feature, this bench switches that charging off and on between runs
//! (`cairn::__internal::set_host_charging`; off, the guards skip it, so the figure is charging's own cost)
//! and runs the same scripts in both modes, alternating round by round, in process on the
//! SQLite store with the echo provider, as `benches/alloc_cost.rs` does for the counting
//! allocator.
//!
//! ```sh
//! cargo bench --features bench-seams --bench host_charge
//! CAIRN_BENCH_ROUNDS=15 cargo bench --features bench-seams --bench host_charge agent_seq
//! cargo bench --features bench-seams --bench host_charge --no-run   # then, instruction counts:
//! valgrind --tool=callgrind target/release/deps/host_charge-* --count on agent_seq
//! valgrind --tool=callgrind target/release/deps/host_charge-* --count off agent_seq
//! ```
//!
//! With `--count on|off` the binary runs each named workload once, outside the timing loop:
//! the difference of the two callgrind totals is what charging adds, in instructions, which a
//! loaded machine cannot skew (everything else the two runs do is the same). Divide by the
//! workload's calls.
//!
//! Workloads (echo latency 0, per call):
//! - `agent_seq`: a Rhai script making 2,000 sequential agent calls;
//! - `lua_agent_seq`: the same in Lua.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::provider::echo::EchoProvider;
use cairn::store::{SqliteOptions, SqliteStore};
use cairn::{CountingAlloc, Engine, RunOptions, Script};
use serde_json::json;

/// Counted allocations, as in the `cairn` binary, so runs have their memory account.
#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

struct Workload {
    name: &'static str,
    dialect: &'static str,
    source: &'static str,
    calls: u32,
}

const WORKLOADS: &[Workload] = &[
    Workload {
        name: "agent_seq",
        dialect: "rhai",
        source: "let n = 0; for i in 0..2000 { agent(`summarize item ${i}`); n += 1; } n",
        calls: 2_000,
    },
    Workload {
        name: "lua_agent_seq",
        dialect: "lua",
        source: "local n = 0 for i = 0, 1999 do agent(\"summarize item \" .. i) n = n + 1 end return n",
        calls: 2_000,
    },
];

/// CPU time of the whole process so far (every thread: the runtime's workers, the script
/// thread, the store's writer), user plus system: steadier than wall time on a shared machine,
/// where a run's wall time also counts the other processes' turns.
fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let of = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    of(usage.ru_utime) + of(usage.ru_stime)
}

/// One run of `workload`: its wall time and the process's CPU time.
fn run_once(runtime: &tokio::runtime::Runtime, workload: &Workload, charging: bool) -> (Duration, Duration) {
    cairn::__internal::set_host_charging(charging);
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        Arc::new(SqliteStore::open(&dir.path().join("bench.db"), SqliteOptions::new()).expect("sqlite"));
    let engine = Engine::builder(store)
        .provider(Arc::new(EchoProvider::new()))
        .max_spawns(u32::MAX)
        .build()
        .expect("engine");
    let script = Script::new(workload.dialect, workload.name, workload.source);
    let (start, cpu_start) = (Instant::now(), cpu_time());
    let outcome = runtime.block_on(async {
        let handle = engine.run_script(&script, json!({}), RunOptions::default()).expect("run");
        handle.result().await.expect("settle")
    });
    let elapsed = (start.elapsed(), cpu_time().saturating_sub(cpu_start));
    assert_eq!(outcome.status, cairn::RunStatus::Ok, "{:?}", outcome.error);
    drop(engine);
    cairn::__internal::set_host_charging(true);
    elapsed
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let count = args.iter().position(|a| a == "--count").map(|at| args.get(at + 1).map(String::as_str));
    let filter: Vec<String> =
        args.iter().filter(|a| !a.starts_with('-') && !matches!(a.as_str(), "on" | "off")).cloned().collect();
    let rounds = support::rounds(9);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    if let Some(mode) = count {
        let charging = mode != Some("off");
        for workload in WORKLOADS {
            if filter.is_empty() || filter.iter().any(|f| workload.name == f.as_str()) {
                let (wall, cpu) = run_once(&runtime, workload, charging);
                println!(
                    "{} charging {}: {wall:?} ({cpu:?} of CPU)",
                    workload.name,
                    if charging { "on" } else { "off" }
                );
            }
        }
        return;
    }
    for workload in WORKLOADS {
        if !filter.is_empty() && !filter.iter().any(|f| workload.name == f.as_str()) {
            continue;
        }
        // A warm-up run in each mode.
        run_once(&runtime, workload, true);
        run_once(&runtime, workload, false);
        // Per call, in µs: wall time and CPU time, charging on and off.
        let (mut on, mut off) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
        for round in 0..rounds {
            // Alternate which mode goes first, so drift favours neither.
            let order = if round % 2 == 0 { [true, false] } else { [false, true] };
            for charging in order {
                let (wall, cpu) = run_once(&runtime, workload, charging);
                let per_call = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(workload.calls);
                let figures = if charging { &mut on } else { &mut off };
                figures.0.push(per_call(wall));
                figures.1.push(per_call(cpu));
            }
        }
        let (wall_on, wall_off) = (support::median(&mut on.0), support::median(&mut off.0));
        let (cpu_on, cpu_off) = (support::median(&mut on.1), support::median(&mut off.1));
        println!(
            "{:<14} wall: on {wall_on:>7.2} µs per call, off {wall_off:>7.2}: {:+.1} %; CPU: on {cpu_on:>7.2}, off {cpu_off:>7.2}: {:+.1} % ({rounds} rounds)",
            workload.name,
            (wall_on / wall_off - 1.0) * 100.0,
            (cpu_on / cpu_off - 1.0) * 100.0
        );
    }
}

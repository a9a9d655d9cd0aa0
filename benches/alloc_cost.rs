//! What memory accounting costs (issue 10: "memory accounting may cost ≤ 5 %").
//!
//! The bench binary's global allocator is a switch in front of [`cairn::CountingAlloc`]: with
//! the switch on, every allocation goes through the counting allocator (as in the `cairn`
//! binary); off, straight to the system allocator, and a run's account stays empty (its checks
//! still run, so the figure is the counting's own cost). The same Rhai workloads run in both
//! modes, alternating round by round, in process on the SQLite store with the echo provider.
//!
//! ```sh
//! cargo bench --bench alloc_cost                 # both workloads, 7 rounds each
//! CAIRN_BENCH_ROUNDS=15 cargo bench --bench alloc_cost agent_seq
//! ```
//!
//! For instruction counts instead of wall time (repeatable on a loaded machine), run one mode
//! under callgrind: `valgrind --tool=callgrind target/release/deps/alloc_cost-* agent_seq
//! --only on` (or `--only off`), and compare the totals.
//!
//! Workloads:
//! - `agent_seq`: a script making 2,000 sequential agent calls, echo latency 0 (per call);
//! - `parallel_500`: a script's `parallel` over 500 items, each a 50 ms call (total).

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cairn::provider::echo::EchoProvider;
use cairn::store::{SqliteOptions, SqliteStore};
use cairn::{CountingAlloc, Engine, RunOptions, Script};
use serde_json::json;

/// Whether allocations go through the counting allocator. Switched only between runs: a run
/// whose allocations were counted in one mode and freed in the other would skew its account.
static COUNTING: AtomicBool = AtomicBool::new(true);

struct Switch;

// SAFETY: both allocators hand out and take back `System` memory; `CountingAlloc` only counts
// on top of it, so memory allocated in one mode may be freed in the other.
unsafe impl GlobalAlloc for Switch {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            unsafe { CountingAlloc.alloc(layout) }
        } else {
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            unsafe { CountingAlloc.alloc_zeroed(layout) }
        } else {
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            unsafe { CountingAlloc.dealloc(ptr, layout) }
        } else {
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            unsafe { CountingAlloc.realloc(ptr, layout, new_size) }
        } else {
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }
}

#[global_allocator]
static ALLOCATOR: Switch = Switch;

struct Workload {
    name: &'static str,
    source: &'static str,
    latency: Duration,
    /// Divide by this many calls (a per-call figure), or 1 for a total.
    per: u32,
}

const WORKLOADS: &[Workload] = &[
    Workload {
        name: "agent_seq",
        source: "let n = 0; for i in 0..2000 { agent(`summarize item ${i}`); n += 1; } n",
        latency: Duration::ZERO,
        per: 2_000,
    },
    Workload {
        name: "parallel_500",
        source: "let items = []; for i in 0..500 { items.push(i); } parallel(items, |i| agent(`item ${i}`)).len()",
        latency: Duration::from_millis(50),
        per: 1,
    },
];

fn run_once(runtime: &tokio::runtime::Runtime, workload: &Workload, counting: bool) -> Duration {
    COUNTING.store(counting, Ordering::Relaxed);
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        Arc::new(SqliteStore::open(&dir.path().join("bench.db"), SqliteOptions::new()).expect("sqlite"));
    let echo = if workload.latency.is_zero() {
        EchoProvider::new()
    } else {
        EchoProvider::new().with_latency(workload.latency)
    };
    let engine = Engine::builder(store)
        .provider(Arc::new(echo))
        .max_concurrency(1_000)
        .max_spawns(u32::MAX)
        .build()
        .expect("engine");
    let start = Instant::now();
    let outcome = runtime.block_on(async {
        let handle = engine
            .run_script(&Script::rhai(workload.name, workload.source), json!({}), RunOptions::default())
            .expect("run");
        handle.result().await.expect("settle")
    });
    let elapsed = start.elapsed();
    assert_eq!(outcome.status, cairn::RunStatus::Ok, "{:?}", outcome.error);
    drop(engine);
    COUNTING.store(true, Ordering::Relaxed);
    elapsed
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).map(String::as_str);
    let filter: Vec<&String> =
        args.iter().filter(|a| !a.starts_with('-') && !matches!(a.as_str(), "on" | "off")).collect();
    let rounds = support::rounds(7);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    for workload in WORKLOADS {
        if !filter.is_empty() && !filter.iter().any(|f| workload.name.contains(f.as_str())) {
            continue;
        }
        if let Some(mode) = only {
            // One mode, one run: for callgrind.
            let elapsed = run_once(&runtime, workload, mode != "off");
            println!("{:<14} counting {mode:<3} {:>10.2} ms", workload.name, elapsed.as_secs_f64() * 1e3);
            continue;
        }
        let (on, off) = support::on_and_off(rounds, |counting| {
            run_once(&runtime, workload, counting).as_secs_f64() * 1e6 / f64::from(workload.per)
        });
        let unit = if workload.per > 1 { "µs per call" } else { "µs" };
        println!(
            "{:<14} counting on {on:>10.2} {unit}, off {off:>10.2} {unit}: {:+.1} % ({rounds} rounds)",
            workload.name,
            (on / off - 1.0) * 100.0
        );
    }
}

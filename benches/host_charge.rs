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
//! ```
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

fn run_once(runtime: &tokio::runtime::Runtime, workload: &Workload, charging: bool) -> Duration {
    cairn::__internal::set_host_charging(charging);
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        Arc::new(SqliteStore::open(&dir.path().join("bench.db"), SqliteOptions::new()).expect("sqlite"));
    let engine = Engine::builder(store.clone(), store)
        .provider(Arc::new(EchoProvider::new()))
        .build()
        .expect("engine");
    let script = Script::new(workload.dialect, workload.name, workload.source);
    let start = Instant::now();
    let outcome = runtime.block_on(async {
        let handle = engine.run_script(&script, json!({}), RunOptions::default()).expect("run");
        handle.result().await.expect("settle")
    });
    let elapsed = start.elapsed();
    assert_eq!(outcome.status, cairn::RunStatus::Ok, "{:?}", outcome.error);
    drop(engine);
    cairn::__internal::set_host_charging(true);
    elapsed
}

fn main() {
    let names = support::names();
    let rounds = support::rounds(9);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    for workload in WORKLOADS {
        if !names.is_empty() && !names.iter().any(|name| workload.name == name.as_str()) {
            continue;
        }
        let (on, off) = support::on_and_off(rounds, |charging| {
            run_once(&runtime, workload, charging).as_secs_f64() * 1e6 / f64::from(workload.calls)
        });
        println!(
            "{:<14} charging on {on:>8.2} µs per call, off {off:>8.2} µs per call: {:+.1} % ({rounds} rounds)",
            workload.name,
            (on / off - 1.0) * 100.0
        );
    }
}

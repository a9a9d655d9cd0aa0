//! Engine benchmarks (issue: the engine). Plain harness: each workload runs a few times and
//! the median is printed; `--rss` re-runs every workload once in its own process and prints
//! its peak resident set (VmHWM), since RSS is a per-process figure.
//!
//! ```sh
//! cargo bench --bench engine            # timings and peak RSS
//! ```
//!
//! Workloads, all on the SQLite store (synchronous=NORMAL) with the echo provider:
//! - `agent_seq`: 2,000 sequential agent calls (per call);
//! - `agent_seq_long`: 20,000 of them, a writer that never pauses long enough for the
//!   store's checkpoint thread, so its log reaches the inline cap (per call);
//! - `agent_replay`: resuming that run, every call served from the journal (per call);
//! - `step_seq`: 10,000 sequential steps (per step);
//! - `parallel_500`: 500 parallel agent calls of 50 ms each at concurrency 500 (total);
//! - `script_agent_seq`: a Rhai script making 2,000 sequential agent calls (per call);
//! - `script_parallel_500`: a Rhai `parallel` over 500 closures, each a 50 ms call (total);
//! - `cli_trivial`: `cairn run` of a trivial script, process start to exit (total).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::provider::echo::EchoProvider;
use cairn::store::{SqliteOptions, SqliteStore};
use cairn::{
    AgentOptions, Engine, ParallelOptions, ResumeOptions, RunId, RunOptions, Script, StepOptions, Workflow,
};
use serde_json::json;

const AGENT_CALLS: usize = 2_000;
const LONG_AGENT_CALLS: usize = 20_000;
const STEPS: usize = 10_000;
const PARALLEL: usize = 500;

fn engine(dir: &Path, latency: Option<Duration>, concurrency: usize) -> Engine {
    // CAIRN_BENCH_STORE=memory isolates the engine's own cost from the store's.
    let (journal, transcripts): (Arc<dyn cairn::JournalStore>, Arc<dyn cairn::TranscriptStore>) =
        if std::env::var("CAIRN_BENCH_STORE").as_deref() == Ok("memory") {
            let store = Arc::new(cairn::MemoryStore::new());
            (store.clone(), store)
        } else {
            let store = Arc::new(
                SqliteStore::open(&dir.join("bench.db"), SqliteOptions::new()).expect("open sqlite"),
            );
            (store.clone(), store)
        };
    let echo = match latency {
        Some(latency) => EchoProvider::new().with_latency(latency),
        None => EchoProvider::new(),
    };
    Engine::builder_with_stores(journal, transcripts)
        .provider(Arc::new(echo))
        .max_concurrency(concurrency)
        .max_spawns(u32::MAX)
        .workflow(agent_seq())
        .build()
        .expect("engine")
}

fn agent_seq() -> Workflow {
    agent_calls("agent_seq", AGENT_CALLS)
}

fn agent_calls(name: &str, calls: usize) -> Workflow {
    Workflow::new(name, move |ctx, _| async move {
        for i in 0..calls {
            ctx.agent(&format!("summarize item {i}"), AgentOptions::default()).await?;
        }
        Ok(json!(calls))
    })
}

fn step_seq() -> Workflow {
    Workflow::new("step_seq", |ctx, _| async move {
        for i in 0..STEPS {
            ctx.step(&format!("step {i}"), StepOptions::default(), |_| async move { Ok(json!(i)) }).await?;
        }
        Ok(json!(STEPS))
    })
}

fn parallel_500() -> Workflow {
    Workflow::new("parallel_500", |ctx, _| async move {
        let items = (0..PARALLEL).map(|i| json!(i)).collect();
        let out = ctx
            .parallel_map(
                items,
                |ctx, item| async move { ctx.agent(&format!("item {item}"), AgentOptions::default()).await },
                ParallelOptions::default(),
            )
            .await?;
        Ok(json!(out.len()))
    })
}

/// Runs one workload once; returns (elapsed, unit count).
async fn run_once(name: &str) -> (Duration, usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    match name {
        "agent_seq" => {
            let engine = engine(dir.path(), None, 12);
            let start = Instant::now();
            settle_ok(engine.run(&agent_seq(), json!({}), RunOptions::default()).expect("run")).await;
            (start.elapsed(), AGENT_CALLS)
        }
        "agent_seq_long" => {
            let engine = engine(dir.path(), None, 12);
            let start = Instant::now();
            let workflow = agent_calls("agent_seq_long", LONG_AGENT_CALLS);
            settle_ok(engine.run(&workflow, json!({}), RunOptions::default()).expect("run")).await;
            (start.elapsed(), LONG_AGENT_CALLS)
        }
        "agent_replay" => {
            let engine = engine(dir.path(), None, 12);
            let run_id = RunId::parse("replay").expect("id");
            let options = RunOptions { run_id: Some(run_id.clone()), ..RunOptions::default() };
            settle_ok(engine.run(&agent_seq(), json!({}), options).expect("run")).await;
            let start = Instant::now();
            settle_ok(engine.resume(&run_id, ResumeOptions::default()).expect("resume")).await;
            (start.elapsed(), AGENT_CALLS)
        }
        "step_seq" => {
            let engine = engine(dir.path(), None, 12);
            let start = Instant::now();
            settle_ok(engine.run(&step_seq(), json!({}), RunOptions::default()).expect("run")).await;
            (start.elapsed(), STEPS)
        }
        "parallel_500" => {
            let engine = engine(dir.path(), Some(Duration::from_millis(50)), PARALLEL);
            let start = Instant::now();
            settle_ok(engine.run(&parallel_500(), json!({}), RunOptions::default()).expect("run")).await;
            (start.elapsed(), 1)
        }
        "script_agent_seq" => {
            let engine = engine(dir.path(), None, 12);
            let source = format!(
                "let n = 0; for i in 0..{AGENT_CALLS} {{ agent(`summarize item ${{i}}`); n += 1; }} n"
            );
            let start = Instant::now();
            let handle = engine
                .run_script(&Script::rhai("seq", &source), json!({}), RunOptions::default())
                .expect("run");
            settle_ok(handle).await;
            (start.elapsed(), AGENT_CALLS)
        }
        "script_parallel_500" => {
            let engine = engine(dir.path(), Some(Duration::from_millis(50)), PARALLEL);
            let source = format!(
                "let items = []; for i in 0..{PARALLEL} {{ items.push(i); }} parallel(items, |i| agent(`item ${{i}}`)).len()"
            );
            let start = Instant::now();
            let handle = engine
                .run_script(&Script::rhai("par", &source), json!({}), RunOptions::default())
                .expect("run");
            settle_ok(handle).await;
            (start.elapsed(), 1)
        }
        "cli_trivial" => {
            let script = dir.path().join("trivial.rhai");
            std::fs::write(&script, "let x = 40 + 2; x").expect("write script");
            let start = Instant::now();
            let status = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
                .current_dir(dir.path())
                .args(["--store", "sqlite:bench.db", "run", "-q"])
                .arg(&script)
                .stdout(std::process::Stdio::null())
                .status()
                .expect("spawn cairn");
            assert!(status.success());
            (start.elapsed(), 1)
        }
        other => panic!("unknown workload {other}"),
    }
}

async fn settle_ok(handle: cairn::RunHandle) {
    let outcome = handle.result().await.expect("settle");
    assert_eq!(outcome.status, cairn::RunStatus::Ok, "{:?}", outcome.error);
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

const WORKLOADS: [&str; 8] = [
    "agent_seq",
    "agent_seq_long",
    "agent_replay",
    "step_seq",
    "parallel_500",
    "script_agent_seq",
    "script_parallel_500",
    "cli_trivial",
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    if let Some(position) = args.iter().position(|a| a == "--rss-child") {
        let name = &args[position + 1];
        runtime.block_on(run_once(name));
        println!("{}", peak_rss_kib());
        return;
    }
    let filter = args.iter().skip(1).find(|a| !a.starts_with("--"));
    println!("{:<14} {:>14} {:>12}", "workload", "median", "peak RSS");
    for name in WORKLOADS {
        if filter.is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        let mut samples: Vec<Duration> = Vec::new();
        let mut units = 1;
        for _ in 0..5 {
            let (elapsed, n) = runtime.block_on(run_once(name));
            samples.push(elapsed);
            units = n;
        }
        samples.sort();
        let median = samples[samples.len() / 2];
        let figure = if units > 1 {
            format!("{:.1} µs/op", median.as_secs_f64() * 1e6 / units as f64)
        } else {
            format!("{:.1} ms", median.as_secs_f64() * 1e3)
        };
        let rss = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args(["--rss-child", name])
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().lines().last().and_then(|l| l.parse::<u64>().ok()))
            .map_or("?".to_owned(), |kib| format!("{:.1} MB", kib as f64 / 1024.0));
        println!("{name:<14} {figure:>14} {rss:>12}");
    }
}

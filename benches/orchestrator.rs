//! Orchestrator benchmark (issue #13): what the orchestration machinery (admission, the
//! decision entry, the digest) adds per spawned child beyond the child's own agent call.
//! Plain harness: each workload runs a few times and the median is printed.
//!
//! ```sh
//! cargo bench --bench orchestrator
//! CAIRN_BENCH_STORE=memory cargo bench --bench orchestrator   # the engine alone
//! ```
//!
//! Workloads, on the SQLite store (synchronous=NORMAL, what `cairn` opens) unless
//! `CAIRN_BENCH_STORE=memory`, children on a zero-latency echo model at concurrency 12, the
//! orchestrator on a scripted model that only answers its next tool call:
//! - `orchestrate_500`: a scripted orchestrator spawns 500 children (`parallel_agents` in
//!   batches of 32), awaits them all and finishes (total, and per child);
//! - `parallel_500`: the same 500 child agent calls as one `ctx.parallel` (total, per child);
//! - the difference per child is the orchestration machinery's cost (target ≤ 50 µs), in
//!   median wall time and in mean CPU time of the whole process (steadier when the machine
//!   is shared; the target is the wall figure on a quiet machine).
//!
//! `CAIRN_BENCH_ONLY=orchestrate|parallel` runs one workload, `CAIRN_BENCH_RUNS=N` sets the
//! runs per workload (e.g. `CAIRN_BENCH_RUNS=1` under `valgrind --tool=callgrind`).
//! `CAIRN_BENCH_SCALE=1` spawns 10,000 children instead of 500 (issue #31: their peak RSS,
//! at most 500 MB, and their per-child overhead, as at 500); each workload also prints the
//! process's peak RSS over its runs (VmHWM, reset before each workload).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::ModelRef;
use cairn::provider::echo::EchoProvider;
use cairn::provider::{Capabilities, ChatEvent, ChatRequest, FinishReason, Provider, Role};
use cairn::store::{SqliteOptions, SqliteStore};
use cairn::{AgentOptions, AgentProfile, Engine, ParallelOptions, RunOptions, Usage, Workflow, branch};
use cairn::{OrchestrateOptions, orchestrate};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// How many children: 500, or 10,000 with `CAIRN_BENCH_SCALE=1`.
fn children() -> usize {
    if std::env::var("CAIRN_BENCH_SCALE").is_ok_and(|s| !s.is_empty() && s != "0") { 10_000 } else { 500 }
}
const BATCH: usize = 32;
/// `parallel_agents` calls per orchestrator turn at 10,000 children.
const CALLS_PER_TURN: usize = 16;
const RUNS: usize = 5;

/// The orchestrator's model: its scripted tool calls, picked by how many turns the
/// conversation holds, with nothing else done per turn (`FakeProvider` also logs a clone of
/// every request, which is test bookkeeping, not the orchestration's cost).
#[derive(Debug)]
struct Scripted {
    turns: Vec<Vec<(String, Value)>>,
}

impl Provider for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }
    fn capabilities(&self, _model: &str) -> Capabilities {
        Capabilities { native_schema: true, tools: true, reasoning: false }
    }
    fn stream(&self, request: ChatRequest, _cancel: CancellationToken) -> BoxStream<'static, ChatEvent> {
        let done = request.messages.iter().filter(|m| m.role == Role::Assistant).count();
        let calls = self.turns.get(done).or(self.turns.last()).cloned().expect("turns");
        let usage = Usage { input_tokens: 1, output_tokens: 1, ..Usage::default() };
        let ends = calls.into_iter().enumerate().map(move |(i, (name, arguments))| ChatEvent::ToolCallEnd {
            wire_id: format!("w{done}_{i}"),
            name,
            arguments,
        });
        futures::stream::iter(ends.chain([ChatEvent::Finish { reason: FinishReason::ToolUse, usage }]))
            .boxed()
    }
}

/// One `parallel_agents` call: children `range` of the echo profile.
fn spawn_call(range: std::ops::Range<usize>) -> (String, Value) {
    let children: Vec<Value> =
        range.map(|i| json!({"profile": "echoer", "prompt": format!("item {i}")})).collect();
    ("parallel_agents".to_owned(), json!({ "children": children }))
}

fn await_call(range: std::ops::Range<usize>) -> (String, Value) {
    let handles: Vec<String> = range.map(|i| format!("c{i}")).collect();
    ("await_all".to_owned(), json!({ "handles": handles }))
}

/// The orchestrator's turns. At 500 children, as this bench has always measured them: one
/// batch of 32 per turn, then one `await_all` of every child, then `finish`. At 10,000 that
/// conversation is past the orchestrator's context bound (200,000 tokens) and turn limit, so
/// each turn spawns 16 batches and awaits the previous turn's children, as a model steering
/// that many children would (`benches/fanout_scale.rs` scripts the same turns over HTTP).
fn orchestrator_turns() -> Vec<Vec<(String, Value)>> {
    let total = children();
    let batches = |range: std::ops::Range<usize>| {
        let end = range.end;
        range.step_by(BATCH).map(move |from| spawn_call(from..(from + BATCH).min(end)))
    };
    let mut turns: Vec<Vec<(String, Value)>> = Vec::new();
    if total <= 500 {
        turns.extend(batches(0..total).map(|call| vec![call]));
        turns.push(vec![await_call(0..total)]);
    } else {
        let per_turn = BATCH * CALLS_PER_TURN;
        let range = |t: usize| (t * per_turn)..((t + 1) * per_turn).min(total);
        let spawn_turns = total.div_ceil(per_turn);
        for turn in 0..=spawn_turns {
            let mut calls: Vec<(String, Value)> =
                if turn < spawn_turns { batches(range(turn)).collect() } else { Vec::new() };
            if turn >= 1 {
                calls.push(await_call(range(turn - 1)));
            }
            turns.push(calls);
        }
    }
    turns.push(vec![("finish".to_owned(), json!({"result": "done"}))]);
    turns
}

fn engine(dir: &Path) -> Engine {
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
    Engine::builder_with_stores(journal, transcripts)
        .provider(Arc::new(Scripted { turns: orchestrator_turns() }))
        .provider(Arc::new(EchoProvider::new()))
        .default_model(ModelRef::parse("scripted:m").expect("model"))
        .profile(
            "echoer",
            AgentProfile {
                description: "echoes".into(),
                model: Some(ModelRef::parse("echo:default").expect("model")),
                ..AgentProfile::default()
            },
        )
        .max_concurrency(12)
        .max_spawns(u32::MAX)
        .build()
        .expect("engine")
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// CPU time of the whole process so far (every thread: the runtime's workers, the store's
/// writer and checkpointer), user plus system. Steadier than wall time on a shared machine.
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

/// A workload's median wall time, mean CPU time per run, and the process's peak RSS in MB.
#[derive(Clone, Copy, Default)]
struct Figures {
    wall: Duration,
    cpu: Duration,
    peak_mb: f64,
}

/// Resets the process's peak RSS (VmHWM) to its current RSS (Linux `clear_refs` 5).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The process's peak RSS since the last reset, in MB.
fn peak_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

fn time(runtime: &tokio::runtime::Runtime, wanted: bool, mut once: impl FnMut(&Path)) -> Figures {
    if !wanted {
        return Figures::default();
    }
    // `CAIRN_BENCH_RUNS=N`: the runs per workload (default 5; 1 under callgrind).
    let runs = std::env::var("CAIRN_BENCH_RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(RUNS).max(1);
    let mut cpu = Duration::ZERO;
    reset_peak();
    let samples = (0..runs)
        .map(|_| {
            let dir = tempfile::tempdir().expect("tempdir");
            let _ = runtime; // every run gets a fresh store
            let (started, cpu_started) = (Instant::now(), cpu_time());
            once(dir.path());
            cpu += cpu_time().saturating_sub(cpu_started);
            started.elapsed()
        })
        .collect();
    Figures { wall: median(samples), cpu: cpu / runs as u32, peak_mb: peak_mb() }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("orchestrate: bench\nparallel: bench");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    // `CAIRN_BENCH_ONLY=orchestrate|parallel` runs one workload alone (for strace, callgrind).
    let only = std::env::var("CAIRN_BENCH_ONLY").ok();
    let wanted = |name: &str| only.as_deref().is_none_or(|o| o == name);
    let orchestrated = time(&runtime, wanted("orchestrate"), |dir| {
        let engine = engine(dir);
        let turns = orchestrator_turns().len() as u32;
        let opts = OrchestrateOptions {
            max_spawns: children() as u32,
            max_turns: turns.max(OrchestrateOptions::default().max_turns),
            ..OrchestrateOptions::default()
        };
        let outcome = runtime.block_on(async {
            orchestrate(&engine, "echo", opts, RunOptions::default())
                .expect("start")
                .result()
                .await
                .expect("outcome")
        });
        assert_eq!(outcome.value, Some(json!("done")), "{:?}", outcome.error);
    });
    let parallel = time(&runtime, wanted("parallel"), |dir| {
        let engine = engine(dir);
        let wf = Workflow::new("parallel", |ctx, _| async move {
            let branches = (0..children())
                .map(|i| {
                    branch(move |ctx| async move {
                        let opts = AgentOptions {
                            profile: Some("echoer".into()),
                            label: Some(format!("c{i}")),
                            full: true,
                            ..AgentOptions::default()
                        };
                        ctx.agent(&format!("item {i}"), opts).await
                    })
                })
                .collect();
            ctx.parallel(branches, ParallelOptions { concurrency: Some(12), ..ParallelOptions::default() })
                .await?;
            Ok(json!("done"))
        });
        let outcome = runtime.block_on(async {
            engine
                .run(&wf, Value::Null, RunOptions::default())
                .expect("start")
                .result()
                .await
                .expect("outcome")
        });
        assert_eq!(outcome.value, Some(json!("done")), "{:?}", outcome.error);
    });
    let n = children();
    let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    for (name, figures) in [(format!("orchestrate_{n}"), orchestrated), (format!("parallel_{n}"), parallel)] {
        println!(
            "{name:<17} {:>8.1} ms wall {:>7.1} µs/child | cpu {:>8.1} ms {:>7.1} µs/child | peak {:>5.0} MB",
            figures.wall.as_secs_f64() * 1e3,
            per(figures.wall),
            figures.cpu.as_secs_f64() * 1e3,
            per(figures.cpu),
            figures.peak_mb,
        );
    }
    println!(
        "machinery         {:>7.1} µs/child wall, {:>7.1} µs/child cpu (target ≤ 50)",
        per(orchestrated.wall) - per(parallel.wall),
        per(orchestrated.cpu) - per(parallel.cpu),
    );
}

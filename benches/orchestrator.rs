//! Orchestrator benchmark (issue #13): what the orchestration machinery (admission, the
//! decision entry, the digest) adds per spawned child beyond the child's own agent call.
//! Plain harness: each workload runs a few times and the median is printed.
//!
//! ```sh
//! cargo bench --bench orchestrator
//! CAIRN_BENCH_STORE=memory cargo bench --bench orchestrator   # the engine alone
//! ```
//!
//! Workloads, on the SQLite store (synchronous=NORMAL) unless `CAIRN_BENCH_STORE=memory`,
//! children on a zero-latency echo model at concurrency 12:
//! - `orchestrate_500`: a scripted orchestrator spawns 500 children (`parallel_agents` in
//!   batches of 32), awaits them all and finishes (total, and per child);
//! - `parallel_500`: the same 500 child agent calls as one `ctx.parallel` (total, per child);
//! - the difference per child is the orchestration machinery's cost (target ≤ 50 µs).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::model::ModelRef;
use cairn::orchestrator::{OrchestrateOptions, orchestrate};
use cairn::provider::echo::EchoProvider;
use cairn::provider::{ChatRequest, Role};
use cairn::store::{SqliteOptions, SqliteStore};
use cairn::testing::{FakeProvider, FakeReply, FakeScript, FakeToolCall, FakeTurn};
use cairn::{AgentOptions, AgentProfile, Engine, ParallelOptions, RunOptions, Workflow, branch};
use serde_json::{Value, json};

const CHILDREN: usize = 500;
const BATCH: usize = 32;
const RUNS: usize = 5;

fn tool(name: &str, arguments: Value) -> FakeTurn {
    FakeTurn::new(FakeReply::ToolCalls(vec![FakeToolCall { name: name.into(), arguments }]))
}

fn orchestrator_turns() -> Vec<FakeTurn> {
    let mut turns = Vec::new();
    for start in (0..CHILDREN).step_by(BATCH) {
        let children: Vec<Value> = (start..(start + BATCH).min(CHILDREN))
            .map(|i| json!({"profile": "echoer", "prompt": format!("item {i}")}))
            .collect();
        turns.push(tool("parallel_agents", json!({ "children": children })));
    }
    let handles: Vec<String> = (0..CHILDREN).map(|i| format!("c{i}")).collect();
    turns.push(tool("await_all", json!({ "handles": handles })));
    turns.push(tool("finish", json!({"result": "done"})));
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
    let turns = orchestrator_turns();
    let fake = FakeProvider::named("fake").on_label(
        "orchestrator",
        FakeScript::respond_with(move |request: &ChatRequest| {
            let done = request.messages.iter().filter(|m| m.role == Role::Assistant).count();
            turns.get(done).or(turns.last()).cloned().expect("turns")
        }),
    );
    Engine::builder(journal, transcripts)
        .provider(Arc::new(fake))
        .provider(Arc::new(EchoProvider::new()))
        .default_model(ModelRef::parse("fake:m").expect("model"))
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

fn time(runtime: &tokio::runtime::Runtime, mut once: impl FnMut(&Path)) -> Duration {
    let samples = (0..RUNS)
        .map(|_| {
            let dir = tempfile::tempdir().expect("tempdir");
            let _ = runtime; // every run gets a fresh store
            let started = Instant::now();
            once(dir.path());
            started.elapsed()
        })
        .collect();
    median(samples)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("orchestrate_500: bench\nparallel_500: bench");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let orchestrated = time(&runtime, |dir| {
        let engine = engine(dir);
        let opts = OrchestrateOptions { max_spawns: CHILDREN as u32, ..OrchestrateOptions::default() };
        let outcome = runtime.block_on(async {
            orchestrate(&engine, "echo", opts, RunOptions::default())
                .expect("start")
                .result()
                .await
                .expect("outcome")
        });
        assert_eq!(outcome.value, Some(json!("done")), "{:?}", outcome.error);
    });
    let parallel = time(&runtime, |dir| {
        let engine = engine(dir);
        let wf = Workflow::new("parallel", |ctx, _| async move {
            let branches = (0..CHILDREN)
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
    let per = |d: Duration| d.as_secs_f64() * 1e6 / CHILDREN as f64;
    println!(
        "orchestrate_500   {:>10.1} ms total {:>8.1} µs/child",
        orchestrated.as_secs_f64() * 1e3,
        per(orchestrated)
    );
    println!(
        "parallel_500      {:>10.1} ms total {:>8.1} µs/child",
        parallel.as_secs_f64() * 1e3,
        per(parallel)
    );
    println!("machinery         {:>8.1} µs/child (target ≤ 50)", per(orchestrated) - per(parallel));
}

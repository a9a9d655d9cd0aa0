//! `parallel` branches that are one agent call run without a thread each (their calls run as
//! the engine's futures on the fan-out's thread), and such a branch behaves exactly as it does
//! on a thread: the same journal, the same results, the same errors.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use cairn::provider::echo::EchoProvider;
use cairn::provider::{Capabilities, ChatEvent, ChatRequest, Provider};
use cairn::{Engine, MemoryStore, RunOptions, RunStatus, Script};
use futures::stream::BoxStream;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The echo model, noting the thread each call is made from.
#[derive(Debug)]
struct Threads {
    inner: EchoProvider,
    seen: Arc<Mutex<Vec<ThreadId>>>,
}

impl Provider for Threads {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self, model: &str) -> Capabilities {
        self.inner.capabilities(model)
    }

    fn stream(&self, request: ChatRequest, cancel: CancellationToken) -> BoxStream<'static, ChatEvent> {
        self.seen.lock().unwrap().push(std::thread::current().id());
        self.inner.stream(request, cancel)
    }
}

fn echo_engine(latency: Duration) -> (Arc<MemoryStore>, Engine, Arc<Mutex<Vec<ThreadId>>>) {
    let store = Arc::new(MemoryStore::new());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let provider = Threads { inner: EchoProvider::new().with_latency(latency), seen: seen.clone() };
    let engine =
        Engine::builder(store.clone()).provider(Arc::new(provider)).max_spawns(100_000).build().unwrap();
    (store, engine, seen)
}

fn run(engine: &Engine, source: &str) -> cairn::RunOutcome {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let handle =
            engine.run_script(&Script::rhai("fan", source), Value::Null, RunOptions::default()).unwrap();
        tokio::time::timeout(Duration::from_secs(30), handle.result()).await.expect("the run hung").unwrap()
    })
}

#[test]
fn one_call_branches_share_the_fan_out_thread() {
    let items = "let xs = []; for i in 0..32 { xs.push(i); }";
    // Deferred: each branch is one agent call.
    let (_store, engine, seen) = echo_engine(Duration::from_millis(20));
    let outcome = run(&engine, &format!("{items} parallel(xs, |i| agent(`q ${{i}}`)).len()"));
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    assert_eq!(outcome.value, Some(json!(32)));
    let threads: HashSet<_> = seen.lock().unwrap().iter().copied().collect();
    assert_eq!(seen.lock().unwrap().len(), 32);
    assert_eq!(threads.len(), 1, "every call made from the fan-out's thread");

    // The list form too, and a branch that does more than call keeps its thread.
    let (_store, engine, seen) = echo_engine(Duration::from_millis(20));
    let outcome = run(
        &engine,
        &format!(
            "{items} parallel([|| agent(\"a\"), || agent(\"b\", #{{label: \"b\"}})]) + parallel(xs, |i| {{ let r = agent(`q ${{i}}`); r }})"
        ),
    );
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 34);
    assert_eq!(seen[0], seen[1], "the list form's one-call branches on one thread");
    let threaded: HashSet<_> = seen[2..].iter().copied().collect();
    assert!(threaded.len() > 1, "branches that do more than one call run on threads: {threaded:?}");
}

/// The journal as a multiset of entries, without what timing decides (seqs, timestamps, the
/// order in which concurrent branches were written).
fn journal(store: &MemoryStore, outcome: &cairn::RunOutcome) -> Vec<String> {
    use cairn::store::JournalStore;
    let mut entries: Vec<String> = store
        .load(&outcome.run_id)
        .unwrap()
        .iter()
        .map(|raw| {
            let mut entry: Value = serde_json::from_str(raw.json()).unwrap();
            let map = entry.as_object_mut().unwrap();
            for timing in ["seq", "ts", "target", "ref"] {
                map.remove(timing);
            }
            entry.to_string()
        })
        .collect();
    entries.sort();
    entries
}

/// What a run ended with, for comparison.
fn ending(outcome: &cairn::RunOutcome) -> (RunStatus, Option<Value>, Option<(cairn::ErrorCode, String)>) {
    (outcome.status, outcome.value.clone(), outcome.error.as_ref().map(|e| (e.code, e.message.clone())))
}

#[test]
fn a_deferred_branch_journals_returns_and_fails_as_a_threaded_one() {
    // Each case's branch body is one agent call; the threaded twin binds it to a variable
    // first, which keeps it on a thread.
    let cases: &[(&str, &str)] = &[
        ("", "agent(`q ${i}`)"),
        ("", r#"agent(`q ${i}`, #{label: "l", result: "full", max_output_tokens: 50})"#),
        // A failing call: strict (the fail-fast decision; which siblings it cancels is timing's
        // choice, so only the outcome compares), settled, and turned into null.
        ("fail-fast", r#"agent(`q ${i}`, #{model: if i == 2 { "nope:m" } else { "echo:default" }})"#),
        ("settle", r#"agent(`q ${i}`, #{model: if i == 2 { "nope:m" } else { "echo:default" }})"#),
        (
            "",
            r#"agent(`q ${i}`, #{model: if i == 2 { "nope:m" } else { "echo:default" }, on_error: "null"})"#,
        ),
        // Options the call refuses, a prompt that is not a string: the error the thread raises.
        ("fail-fast", "agent(`q ${i}`, bad_options())"),
        ("fail-fast", "agent(i)"),
        // An effect in the arguments: the branch runs on its thread after all.
        ("", "agent(`q ${i} ${budget.spent()}`)"),
        ("", "agent(`${step(`s${i}`, || i * 2)}`)"),
        // Captured values are read-only in both.
        ("capture", "agent(`q ${base[0]} ${i}`)"),
        ("capture", "agent(`q ${base.len()} ${i}`, #{label: `l${base[0]}`})"),
    ];
    for (mode, call) in cases {
        let prelude =
            r#"fn bad_options() { #{max_turns: "many"} } let base = [7]; let xs = [0, 1, 2, 3, 4];"#;
        let opts = if *mode == "settle" { ", #{settle: true}" } else { "" };
        // The call at the same column in both, so errors name the same position.
        let deferred = format!("{prelude} parallel(xs, |i|           {call}{opts})");
        let threaded = format!("{prelude} parallel(xs, |i| {{ let r = {call}; r }}{opts})");
        let (store_a, engine_a, _) = echo_engine(Duration::ZERO);
        let a = run(&engine_a, &deferred);
        let (store_b, engine_b, _) = echo_engine(Duration::ZERO);
        let b = run(&engine_b, &threaded);
        assert_eq!(ending(&a), ending(&b), "{call} {mode}");
        if *mode != "fail-fast" {
            assert_eq!(journal(&store_a, &a), journal(&store_b, &b), "{call} {mode}");
        }
    }
}

#[test]
fn a_deferred_fan_out_still_counts_against_its_threads_share() {
    // Three levels of 256: the innermost fan-outs hold no share of the run's threads, whether
    // or not their branches need a thread (the outcome depends on the script's shape alone).
    let (_store, engine, _) = echo_engine(Duration::ZERO);
    let outcome = run(
        &engine,
        "let xs = []; for i in 0..256 { xs.push(i); }
         parallel(xs, |i| parallel(xs, |j| parallel([1, 2], |k| agent(`${i}/${j}/${k}`)).len()).len())",
    );
    assert_eq!(outcome.status, RunStatus::Error, "{outcome:?}");
    assert_eq!(outcome.error.map(|e| e.code), Some(cairn::ErrorCode::SandboxLimit));
}

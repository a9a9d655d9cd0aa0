//! Crash tests with real processes: a child process runs a workflow against a SQLite store
//! on disk and is killed with SIGKILL at a named point; a second process resumes it. Every
//! provider call is logged to a file outside the killed process, so the test can assert
//! exact payment counts: completed calls are never re-paid, the in-flight call is paid at
//! most once more, and the final value equals an uninterrupted run's.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use cairn::provider::{Capabilities, ChatEvent, ChatRequest, FinishReason, Part, Provider};
use cairn::store::{SqliteOptions, SqliteStore};
use cairn::{
    AgentOptions, Engine, JournalStore, Lease, ParallelOptions, RawEntry, ResumeOptions, RunFilter, RunId,
    RunMeta, RunOptions, RunStatus, Usage, Workflow, branch,
};
use futures::stream::BoxStream;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const CHILD_ENV: &str = "CAIRN_CRASH_CHILD";

/// Logs every call's prompt to a file (append + fsync: it survives the kill) and answers,
/// after a latency for the parallel branches (50 ms fast, 400 ms slow), so the slow branch
/// is in flight when the fast one completes.
#[derive(Debug)]
struct LoggingProvider {
    log: PathBuf,
}

fn kill_self() -> ! {
    let pid = std::process::id().to_string();
    let _ = Command::new("kill").args(["-9", &pid]).status();
    // SIGKILL cannot be caught; if it did not land, fail loudly rather than carry on.
    std::process::abort();
}

impl Provider for LoggingProvider {
    fn name(&self) -> &str {
        "log"
    }
    fn capabilities(&self, _model: &str) -> Capabilities {
        Capabilities { native_schema: false, tools: false, reasoning: false }
    }
    fn stream(&self, request: ChatRequest, _cancel: CancellationToken) -> BoxStream<'static, ChatEvent> {
        let prompt = request
            .messages
            .iter()
            .flat_map(|m| m.parts.iter())
            .find_map(|p| if let Part::Text(t) = p { Some(t.clone()) } else { None })
            .unwrap_or_default();
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        writeln!(file, "{prompt}").unwrap();
        file.sync_all().unwrap();
        let latency = match prompt.as_str() {
            p if p.contains("slow") => 400,
            p if p.contains("fast") => 50,
            _ => 0,
        };
        Box::pin(
            futures::stream::once(async move {
                tokio::time::sleep(Duration::from_millis(latency)).await;
                ChatEvent::TextDelta(format!("re: {prompt}"))
            })
            .chain(futures::stream::once(async {
                ChatEvent::Finish {
                    reason: FinishReason::Stop,
                    usage: Usage { input_tokens: 10, output_tokens: 5, ..Usage::default() },
                }
            })),
        )
    }
}

use futures::StreamExt;

fn workflow() -> Workflow {
    Workflow::new("crashy", |ctx, _args| async move {
        let one = ctx.agent("one", AgentOptions::default()).await?;
        let two = ctx.agent("two", AgentOptions::default()).await?;
        let fan = ctx
            .parallel(
                vec![
                    branch(|ctx| async move { ctx.agent("fast branch", AgentOptions::default()).await }),
                    branch(|ctx| async move { ctx.agent("slow branch", AgentOptions::default()).await }),
                ],
                ParallelOptions::default(),
            )
            .await?;
        let three = ctx.agent("three", AgentOptions::default()).await?;
        Ok(json!([one, two, fan, three]))
    })
}

/// A journal store that SIGKILLs the process right after a chosen append is durable: the
/// `n`-th entry whose JSON contains every one of `needles`.
#[derive(Debug)]
struct KillingStore {
    inner: Arc<SqliteStore>,
    needles: Vec<&'static str>,
    nth: usize,
    seen: std::sync::atomic::AtomicUsize,
}

impl JournalStore for KillingStore {
    fn append_tallied(
        &self,
        run: &RunId,
        entries: &[RawEntry],
        lease: Option<&Lease>,
        tally: cairn::Tally,
    ) -> cairn::store::Result<()> {
        self.inner.append_tallied(run, entries, lease, tally)?;
        for entry in entries {
            if !self.needles.is_empty() && self.needles.iter().all(|n| entry.json().contains(n)) {
                let count = self.seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                if count == self.nth {
                    kill_self();
                }
            }
        }
        Ok(())
    }
    fn load(&self, run: &RunId) -> cairn::store::Result<Vec<RawEntry>> {
        self.inner.load(run)
    }
    fn put_meta(&self, meta: &RunMeta, lease: Option<&Lease>) -> cairn::store::Result<()> {
        self.inner.put_meta(meta, lease)
    }
    fn get_meta(&self, run: &RunId) -> cairn::store::Result<Option<RunMeta>> {
        self.inner.get_meta(run)
    }
    fn list_runs(&self, filter: &RunFilter) -> cairn::store::Result<Vec<RunMeta>> {
        self.inner.list_runs(filter)
    }
    fn delete(&self, run: &RunId, lease: Option<&Lease>) -> cairn::store::Result<()> {
        self.inner.delete(run, lease)
    }
}

/// Where the first process dies: after the journal holds the entry these needles pick.
fn kill_point(point: &str) -> (Vec<&'static str>, usize) {
    match point {
        // The dispatch of call "two" is durable; its provider call may or may not have
        // happened (a dispatch does not wait for its `running` entry to be written).
        "after-running" => (vec![r#""kind":"agent""#, r#""status":"running""#], 2),
        // Call "two" completed and its ok entry is durable; nothing else was dispatched.
        "after-ok" => (vec![r#""kind":"agent""#, r#""status":"ok""#], 2),
        // The fast branch is journaled ok while the slow branch is still in flight.
        "mid-parallel" => (vec![r#""kind":"agent""#, r#""status":"ok""#, r#""scope":"par:0:0""#], 1),
        _ => (Vec::new(), 0),
    }
}

/// A model that asks for the `boom` tool on its first turn and answers once it has the
/// tool's result; every turn is logged (fsynced) so the test can count them.
#[derive(Debug)]
struct ToolModel {
    log: PathBuf,
}

impl Provider for ToolModel {
    fn name(&self) -> &str {
        "tm"
    }
    fn capabilities(&self, _model: &str) -> Capabilities {
        Capabilities { native_schema: false, tools: true, reasoning: false }
    }
    fn stream(&self, request: ChatRequest, _cancel: CancellationToken) -> BoxStream<'static, ChatEvent> {
        let answered = request
            .messages
            .iter()
            .flat_map(|m| m.parts.iter())
            .any(|p| matches!(p, Part::ToolResult { .. }));
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        writeln!(file, "{}", if answered { "model turn 2" } else { "model turn 1" }).unwrap();
        file.sync_all().unwrap();
        let usage = Usage { input_tokens: 10, output_tokens: 5, ..Usage::default() };
        let events = if answered {
            vec![
                ChatEvent::TextDelta("finished".into()),
                ChatEvent::Finish { reason: FinishReason::Stop, usage },
            ]
        } else {
            vec![
                ChatEvent::ToolCallStart { wire_id: "w1".into(), name: "boom".into() },
                ChatEvent::ToolCallEnd { wire_id: "w1".into(), name: "boom".into(), arguments: json!({}) },
                ChatEvent::Finish { reason: FinishReason::ToolUse, usage },
            ]
        };
        Box::pin(futures::stream::iter(events))
    }
}

/// A tool that kills the process the first time it runs (after the turn that requested it
/// was checkpointed), and answers on later runs.
#[derive(Debug)]
struct Boom {
    marker: PathBuf,
    parameters: Value,
}

impl cairn::Tool for Boom {
    fn name(&self) -> &str {
        "boom"
    }
    fn description(&self) -> &str {
        "a tool that dies once"
    }
    fn parameters(&self) -> &Value {
        &self.parameters
    }
    fn version(&self) -> &str {
        "1"
    }
    fn call(&self, _args: Value) -> futures::future::BoxFuture<'static, Result<String, cairn::Error>> {
        if !self.marker.exists() {
            std::fs::write(&self.marker, "ran").unwrap();
            kill_self();
        }
        Box::pin(async { Ok("tool result".to_owned()) })
    }
}

fn tool_workflow() -> Workflow {
    Workflow::new("tooly", |ctx, _| async move {
        ctx.agent("use the tool", AgentOptions { tools: vec!["boom".into()], ..Default::default() }).await
    })
}

fn tool_engine(db: &Path, dir: &Path) -> Engine {
    let store = Arc::new(SqliteStore::open(db, SqliteOptions::new()).unwrap());
    let tool: Arc<dyn cairn::Tool> =
        Arc::new(Boom { marker: dir.join("boom.marker"), parameters: json!({"type": "object"}) });
    Engine::builder(store)
        .provider(Arc::new(ToolModel { log: dir.join("calls.log") }))
        .default_model(cairn::ModelRef::parse("tm:m").unwrap())
        .toolset(cairn::Toolset::new("boom", vec![tool]))
        .workflow(tool_workflow())
        .build()
        .unwrap()
}

fn engine(db: &Path, log: &Path, point: Option<&str>) -> Engine {
    let store = Arc::new(SqliteStore::open(db, SqliteOptions::new()).unwrap());
    let (needles, nth) = point.map(kill_point).unwrap_or_default();
    let journal = Arc::new(KillingStore { inner: store.clone(), needles, nth, seen: Default::default() });
    let provider = Arc::new(LoggingProvider { log: log.to_owned() });
    Engine::builder_with_stores(journal, store)
        .provider(provider)
        .default_model(cairn::ModelRef::parse("log:m").unwrap())
        .workflow(workflow())
        .build()
        .unwrap()
}

/// The child side: runs (or resumes) the workflow and kills itself at the named point.
#[test]
fn crash_child() {
    let Ok(mode) = std::env::var(CHILD_ENV) else { return };
    let dir = PathBuf::from(std::env::var("CAIRN_CRASH_DIR").unwrap());
    let point = std::env::var("CAIRN_CRASH_POINT").unwrap();
    let run_id = RunId::parse("crash-run").unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let mid_agent = point == "mid-agent";
        let engine = if mid_agent {
            tool_engine(&dir.join("cairn.db"), &dir)
        } else {
            engine(&dir.join("cairn.db"), &dir.join("calls.log"), (mode == "run").then_some(point.as_str()))
        };
        let handle = if mode == "run" {
            let options = RunOptions { run_id: Some(run_id), ..RunOptions::default() };
            let wf = if mid_agent { tool_workflow() } else { workflow() };
            engine.run(&wf, json!({}), options).unwrap()
        } else {
            engine.resume(&run_id, ResumeOptions::default()).unwrap()
        };
        let outcome = handle.result().await.unwrap();
        std::fs::write(dir.join(format!("{mode}.outcome.json")), serde_json::to_vec(&outcome).unwrap())
            .unwrap();
    });
}

fn spawn_child(dir: &Path, mode: &str, point: &str) -> std::process::ExitStatus {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash::crash_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, mode)
        .env("CAIRN_CRASH_DIR", dir)
        .env("CAIRN_CRASH_POINT", point)
        .status()
        .unwrap()
}

fn calls(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("calls.log")).unwrap_or_default().lines().map(str::to_owned).collect()
}

fn count(calls: &[String], prompt: &str) -> usize {
    calls.iter().filter(|c| *c == prompt).count()
}

#[test]
fn killed_mid_agent_resumes_from_the_last_completed_turn() {
    let dir = tempfile::tempdir().unwrap();
    let status = spawn_child(dir.path(), "run", "mid-agent");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "the child was not killed mid-agent: {status:?}");
    let status = spawn_child(dir.path(), "resume", "mid-agent");
    assert!(status.success(), "resume failed: {status:?}");
    let outcome: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("resume.outcome.json")).unwrap()).unwrap();
    assert_eq!(outcome["status"], json!(RunStatus::Ok));
    assert_eq!(outcome["value"], json!("finished"));
    let calls = calls(dir.path());
    // The turn that requested the tool was checkpointed before the tool ran: it is never paid
    // again; the resumed agent re-answers the pending tool call and takes the next turn.
    assert_eq!(calls, ["model turn 1", "model turn 2"], "{calls:?}");
    // Its usage reached the ledger even though the killed attempt never journaled it.
    assert_eq!(outcome["usage"]["input_tokens"], 20);
    // The inspector's record of the call holds both turns: the killed attempt's, carried in
    // its checkpoint, and the resumed one's.
    let store = SqliteStore::open(&dir.path().join("cairn.db"), SqliteOptions::new()).unwrap();
    let run = RunId::parse("crash-run").unwrap();
    let running: Vec<u64> = store
        .load(&run)
        .unwrap()
        .iter()
        .map(|raw| serde_json::from_str::<Value>(raw.json()).unwrap())
        .filter(|e| e["kind"] == "agent" && e["status"] == "running")
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(running.len(), 2, "{running:?}");
    let records: Vec<Value> = cairn::TranscriptStore::list(&store, &run)
        .unwrap()
        .iter()
        .filter(|r| r.starts_with("crash-run/calls/"))
        .flat_map(|r| {
            let batch: Value =
                serde_json::from_slice(&cairn::TranscriptStore::get(&store, r).unwrap().unwrap()).unwrap();
            batch["calls"].as_array().unwrap().clone()
        })
        .collect();
    let record = records.iter().find(|c| c["seq"] == running[1]).unwrap_or_else(|| panic!("{records:?}"));
    let turns: Vec<(u64, u64, u64)> = record["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["turn"].as_u64().unwrap(),
                t["call_seq"].as_u64().unwrap(),
                t["usage"]["input_tokens"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(turns, [(1, running[0], 10), (2, running[1], 10)], "{record}");
    assert!(record.get("prompt").is_none(), "the conversation is in the checkpoint: {record}");
}

fn uninterrupted_value() -> Value {
    json!(["re: one", "re: two", ["re: fast branch", "re: slow branch"], "re: three"])
}

fn crash_and_resume(point: &str) -> (Vec<String>, Value) {
    let dir = tempfile::tempdir().unwrap();
    let status = spawn_child(dir.path(), "run", point);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "the child was not killed at {point}: {status:?}");
    assert!(!dir.path().join("run.outcome.json").exists());
    let status = spawn_child(dir.path(), "resume", point);
    assert!(status.success(), "resume failed: {status:?}");
    let outcome: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("resume.outcome.json")).unwrap()).unwrap();
    assert_eq!(outcome["status"], json!(RunStatus::Ok));
    (calls(dir.path()), outcome["value"].clone())
}

#[test]
fn killed_after_a_running_entry_repays_only_the_in_flight_call() {
    let (calls, value) = crash_and_resume("after-running");
    assert_eq!(value, uninterrupted_value());
    assert_eq!(count(&calls, "one"), 1, "{calls:?}");
    // The process died with "two" in flight: the resume pays for it once more at most (the
    // dead process may or may not have reached the provider before it died).
    let two = count(&calls, "two");
    assert!((1..=2).contains(&two), "{calls:?}");
    for prompt in ["fast branch", "slow branch", "three"] {
        assert_eq!(count(&calls, prompt), 1, "{prompt}: {calls:?}");
    }
}

#[test]
fn killed_after_an_ok_entry_repays_nothing() {
    let (calls, value) = crash_and_resume("after-ok");
    assert_eq!(value, uninterrupted_value());
    for prompt in ["one", "two", "fast branch", "slow branch", "three"] {
        assert_eq!(count(&calls, prompt), 1, "{prompt}: {calls:?}");
    }
}

#[test]
fn killed_mid_parallel_repays_only_the_unfinished_branch() {
    let (calls, value) = crash_and_resume("mid-parallel");
    assert_eq!(value, uninterrupted_value());
    assert_eq!(count(&calls, "fast branch"), 1, "{calls:?}");
    assert_eq!(count(&calls, "slow branch"), 2, "{calls:?}");
    assert_eq!(count(&calls, "one") + count(&calls, "two") + count(&calls, "three"), 3);
}

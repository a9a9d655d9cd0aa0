//! Engine tests of the agent loop's tools: results fed back, denials, an approval that
//! suspends the run, tool versions in the key, failover to declared fallbacks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::tests::{entries, rebuild_with_workflow, setup, three_calls};
use crate::model::ModelRef;
use crate::store::{MemoryStore, RunStatus};
use crate::*;

#[derive(Debug)]
struct AddTool {
    calls: Arc<AtomicU32>,
    version: &'static str,
    parameters: Value,
}

impl AddTool {
    fn new(calls: Arc<AtomicU32>, version: &'static str) -> AddTool {
        AddTool {
            calls,
            version,
            parameters: json!({
                "type": "object",
                "required": ["a", "b"],
                "properties": { "a": { "type": "integer" }, "b": { "type": "integer" } }
            }),
        }
    }
}

impl crate::agent::Tool for AddTool {
    fn name(&self) -> &str {
        "add"
    }
    fn description(&self) -> &str {
        "adds two integers"
    }
    fn parameters(&self) -> &Value {
        &self.parameters
    }
    fn version(&self) -> &str {
        self.version
    }
    fn call(&self, args: Value) -> futures::future::BoxFuture<'static, Result<String, Error>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let sum = args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0);
        Box::pin(async move { Ok(sum.to_string()) })
    }
}

fn tool_engine(
    store: &Arc<MemoryStore>,
    fake: &crate::testing::FakeProvider,
    calls: &Arc<AtomicU32>,
    permissions: crate::agent::Permissions,
    version: &'static str,
) -> Engine {
    let tool: Arc<dyn crate::agent::Tool> = Arc::new(AddTool::new(calls.clone(), version));
    Engine::builder(store.clone())
        .provider(Arc::new(fake.clone()))
        .default_model(ModelRef::parse("fake:m").unwrap())
        .toolset(crate::agent::Toolset::new("math", vec![tool]))
        .permissions(permissions)
        .retries(0, Duration::from_millis(1))
        .build()
        .unwrap()
}

fn adder() -> Workflow {
    Workflow::new("adder", |ctx, _| async move {
        ctx.agent("what is 2 + 3?", AgentOptions { tools: vec!["math".into()], ..Default::default() }).await
    })
}

fn turn(reply: crate::testing::FakeReply) -> crate::testing::FakeTurn {
    crate::testing::FakeTurn { reply, usage: None, latency: None }
}

#[tokio::test]
async fn the_agent_loop_runs_tools_and_feeds_results_back() {
    use crate::testing::{FakeProvider, FakeReply, FakeScript};
    let store = Arc::new(MemoryStore::new());
    let fake = FakeProvider::new().on_any(
        FakeScript::tool_call("add", json!({"a": "two", "b": 3}))
            .then(turn(FakeReply::ToolCalls(vec![crate::testing::FakeToolCall {
                name: "add".into(),
                arguments: json!({"a": 2, "b": 3}),
            }])))
            .then(turn(FakeReply::Text("the sum is 5".into()))),
    );
    let calls = Arc::new(AtomicU32::new(0));
    let engine = tool_engine(&store, &fake, &calls, crate::agent::Permissions::allow_all(), "1");
    let handle = engine.run(&adder(), json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.value, Some(json!("the sum is 5")), "{:?}", outcome.error);
    // The invalid call was answered with its validation errors, not executed.
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(fake.call_count(), 3);
    let journal = entries(&store, &run);
    use crate::journal::{Kind, Status};
    let terminal = journal.iter().find(|e| e.kind == Kind::Agent && e.status != Status::Running);
    assert!(terminal.is_some_and(|e| e.transcript_ref.is_some()), "the turn checkpoints are referenced");
    // The executed call is a `tool` entry of its own (dispatch and result) in the agent's scope.
    let tools: Vec<_> = journal.iter().filter(|e| e.kind == Kind::Tool).collect();
    assert_eq!(tools.len(), 2, "{journal:?}");
    assert_eq!(tools[1].value(), Some(json!("5")));
}

#[tokio::test]
async fn denied_tools_are_refused_and_the_model_is_told() {
    use crate::testing::{FakeProvider, FakeReply, FakeScript};
    let store = Arc::new(MemoryStore::new());
    let fake = FakeProvider::new().on_any(
        FakeScript::tool_call("add", json!({"a": 2, "b": 3}))
            .then(turn(FakeReply::Text("could not add".into()))),
    );
    let calls = Arc::new(AtomicU32::new(0));
    let permissions =
        crate::agent::Permissions { deny: vec!["ad*".into()], ..crate::agent::Permissions::allow_all() };
    let engine = tool_engine(&store, &fake, &calls, permissions, "1");
    let outcome = engine.run(&adder(), json!({}), RunOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(outcome.value, Some(json!("could not add")));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_ask_rule_suspends_the_run_until_a_person_approves() {
    use crate::testing::{FakeProvider, FakeReply, FakeScript};
    let store = Arc::new(MemoryStore::new());
    let fake = FakeProvider::new().on_any(
        FakeScript::tool_call("add", json!({"a": 2, "b": 3})).then(turn(FakeReply::Text("5".into()))),
    );
    let calls = Arc::new(AtomicU32::new(0));
    let permissions =
        crate::agent::Permissions { ask: vec!["add".into()], ..crate::agent::Permissions::allow_all() };
    let engine = tool_engine(&store, &fake, &calls, permissions, "1");
    let engine = Engine { inner: Arc::new(rebuild_with_workflow(&engine, adder())) };
    let handle = engine.run(&adder(), json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Suspended);
    let key = outcome.pending[0].key.clone();
    assert!(key.starts_with("approve:"), "{key}");
    assert!(outcome.pending[0].prompt.as_deref().unwrap().contains("add"));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert!(engine.resolve_external(&run, &key, json!({"approved": true})).unwrap());
    let resumed = engine.resume(&run, ResumeOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(resumed.status, RunStatus::Ok, "{:?}", resumed.error);
    assert_eq!(resumed.value, Some(json!("5")));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // The turn that asked for the tool was checkpointed: the resume did not pay for it again.
    assert_eq!(fake.call_count(), 2);
}

#[tokio::test]
async fn a_tool_version_bump_rekeys_the_call_and_an_implementation_change_does_not() {
    use crate::testing::{FakeProvider, FakeScript};
    let store = Arc::new(MemoryStore::new());
    let fake = FakeProvider::new().on_any(FakeScript::text("no tools needed"));
    let calls = Arc::new(AtomicU32::new(0));
    let engine = tool_engine(&store, &fake, &calls, crate::agent::Permissions::allow_all(), "1");
    let handle = engine.run(&adder(), json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    handle.result().await.unwrap();
    // Same contract (a new tool object, same version): replays.
    let same = tool_engine(&store, &fake, &calls, crate::agent::Permissions::allow_all(), "1");
    let again = same.resume(&run, ResumeOptions { workflow: Some(adder()), ..Default::default() }).unwrap();
    assert_eq!(again.result().await.unwrap().preview.hits, 1);
    // A new contract version re-keys the call: refused unless the resume accepts re-keys.
    let bumped = tool_engine(&store, &fake, &calls, crate::agent::Permissions::allow_all(), "2");
    let again = bumped.resume(&run, ResumeOptions { workflow: Some(adder()), ..Default::default() }).unwrap();
    let refused = again.result().await.unwrap();
    assert_eq!(refused.error.map(|e| e.code), Some(crate::error::ErrorCode::RekeyRefused));
    let options = ResumeOptions { workflow: Some(adder()), accept_rekey: true, ..Default::default() };
    let outcome = bumped.resume(&run, options).unwrap().result().await.unwrap();
    assert_eq!((outcome.preview.hits, outcome.preview.misses), (0, 1));
    let unknown = Workflow::new("u", |ctx, _| async move {
        ctx.agent("x", AgentOptions { tools: vec!["nope".into()], ..Default::default() }).await
    });
    let outcome = same.run(&unknown, json!({}), RunOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(outcome.error.unwrap().code, ErrorCode::Config);
}

#[tokio::test]
async fn retryable_failures_fail_over_to_declared_fallbacks_keeping_the_key() {
    use crate::testing::{FakeProvider, FakeScript};
    let store = Arc::new(MemoryStore::new());
    let primary = FakeProvider::named("primary")
        .on_any(FakeScript::error(Error::new(ErrorCode::ProviderUnavailable, "overloaded")));
    let backup = FakeProvider::named("backup").on_any(FakeScript::text("from the backup"));
    let engine = Engine::builder(store.clone())
        .provider(Arc::new(primary.clone()))
        .provider(Arc::new(backup.clone()))
        .default_model(ModelRef::parse("primary:big").unwrap())
        .fallbacks(ModelRef::parse("primary:big").unwrap(), vec![ModelRef::parse("backup:small").unwrap()])
        .retries(1, Duration::from_millis(1))
        .build()
        .unwrap();
    let wf = Workflow::new("fo", |ctx, _| async move { ctx.agent("hello", AgentOptions::default()).await });
    let handle = engine.run(&wf, json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.value, Some(json!("from the backup")), "{:?}", outcome.error);
    assert_eq!(primary.call_count(), 2, "one try and one retry before failing over");
    let journal = entries(&store, &run);
    assert_eq!(journal[1].served_by.as_deref(), Some("backup:small"));
    assert_eq!(journal[1].model.as_deref(), Some("primary:big"));
    // The key is the requested model's: an engine without fallbacks still replays it.
    let plain = Engine::builder(store.clone())
        .provider(Arc::new(primary.clone()))
        .default_model(ModelRef::parse("primary:big").unwrap())
        .build()
        .unwrap();
    let again = plain.resume(&run, ResumeOptions { workflow: Some(wf), ..Default::default() }).unwrap();
    assert_eq!(again.result().await.unwrap().preview.hits, 1);
    // A non-retryable failure does not fail over.
    let filtered =
        FakeProvider::named("primary").on_any(FakeScript::error(Error::new(ErrorCode::ContentFilter, "no")));
    let engine = Engine::builder(store.clone())
        .provider(Arc::new(filtered))
        .provider(Arc::new(backup.clone()))
        .default_model(ModelRef::parse("primary:big").unwrap())
        .fallbacks(ModelRef::parse("primary:big").unwrap(), vec![ModelRef::parse("backup:small").unwrap()])
        .build()
        .unwrap();
    let wf = Workflow::new("fo2", |ctx, _| async move { ctx.agent("other", AgentOptions::default()).await });
    let outcome = engine.run(&wf, json!({}), RunOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(outcome.error.unwrap().code, ErrorCode::ContentFilter);
    assert_eq!(backup.call_count(), 1);
}

#[tokio::test]
async fn the_replay_strict_helper_fails_on_the_first_live_call() {
    let (_store, provider, engine) = setup();
    let handle = engine.run(&three_calls(), json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    handle.result().await.unwrap();
    let clean = crate::testing::replay_strict(&engine, &run, Some(three_calls())).await.unwrap();
    assert_eq!(clean.preview.hits, 3);
    let edited =
        Workflow::new("three", |ctx, _| async move { ctx.agent("rewritten", AgentOptions::default()).await });
    let err = crate::testing::replay_strict(&engine, &run, Some(edited)).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::JournalMiss);
    assert_eq!(provider.calls.load(Ordering::SeqCst), 3);
}

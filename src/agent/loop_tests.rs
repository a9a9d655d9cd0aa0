//! The loop's state across a rerun: what a checkpoint carries is honoured when it resumes.

use std::sync::Arc;
use std::sync::Mutex;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::error::ErrorCode;
use crate::provider::ChatRequest;
use crate::testing::{FakeProvider, FakeScript};

#[derive(Debug)]
struct Add {
    parameters: Value,
}

impl Tool for Add {
    fn name(&self) -> &str {
        "add"
    }
    fn description(&self) -> &str {
        "adds"
    }
    fn parameters(&self) -> &Value {
        &self.parameters
    }
    fn version(&self) -> &str {
        "1"
    }
    fn call(&self, _args: Value) -> BoxFuture<'static, Result<String, Error>> {
        Box::pin(async { Ok("3".to_owned()) })
    }
}

#[derive(Default)]
struct Recorder(Mutex<Vec<Checkpoint>>);

impl BudgetHooks for Recorder {
    fn can_start_turn(&self) -> bool {
        true
    }
    fn would_cross(&self, _cost: Money) -> bool {
        false
    }
    fn checkpoint(&self, state: &Checkpoint) {
        self.0.lock().unwrap().push(state.clone());
    }
}

fn spec(provider: Arc<FakeProvider>, resume_from: Option<Checkpoint>) -> AgentSpec {
    AgentSpec {
        provider,
        served_by: "fake:m".into(),
        request: ChatRequest::new("m", vec![crate::provider::Message::user("add")]),
        schema: None,
        max_turns: 10,
        max_tool_calls: None,
        max_retries: 0,
        retry_base: Duration::from_millis(1),
        backoff: Backoff::default(),
        price: None,
        fallbacks: Vec::new(),
        tools: vec![Arc::new(Add { parameters: json!({"type": "object", "required": ["x"]}) })],
        permissions: Permissions::allow_all(),
        call_key: crate::journal::ContentKey::from_bytes([3; 32]),
        resume_from,
        max_context_tokens: DEFAULT_MAX_CONTEXT_TOKENS,
    }
}

#[tokio::test]
async fn the_correction_count_survives_a_rerun() {
    // Three invalid calls in a row, checkpointed; a rerun from the last checkpoint gets one
    // more invalid call and fails at once instead of granting three fresh corrections.
    let provider = Arc::new(
        FakeProvider::new().on_any(
            FakeScript::tool_call("add", json!({}))
                .then_tool_call("add", json!({}))
                .then_tool_call("add", json!({})),
        ),
    );
    let hooks = Recorder::default();
    let _ = run(spec(provider, None), &hooks, &CancellationToken::new(), &|_| {}).await;
    let saved = hooks.0.lock().unwrap().iter().rev().find(|c| c.pending.is_empty()).cloned().unwrap();
    assert_eq!(saved.corrections, 3, "{saved:?}");

    let rerun = Arc::new(FakeProvider::new().on_any(FakeScript::tool_call("add", json!({}))));
    let outcome =
        run(spec(rerun, Some(saved)), &Recorder::default(), &CancellationToken::new(), &|_| {}).await;
    assert!(
        matches!(&outcome.end, AgentEnd::Error(e) if e.code == ErrorCode::ToolFailed),
        "{:?}",
        outcome.end
    );
}

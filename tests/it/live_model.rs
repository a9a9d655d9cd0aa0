//! Opt-in tests against a real OpenAI-compatible server (the tiny llama.cpp model of
//! `shared/fixtures/README.md`). Skipped unless `CAIRN_TEST_OPENAI_BASE_URL` names the
//! server (e.g. `http://127.0.0.1:8765/v1`); `CAIRN_TEST_OPENAI_MODEL` names the model
//! (default `smollm2`). Each test prints that it was skipped when the variable is unset.
//!
//! All three pass against llama-cpp-python 0.3.36 serving SmolLM2-135M (built with
//! `CMAKE_ARGS="-DGGML_NATIVE=OFF"` on this VM: a native build traps on an unsupported
//! instruction). The endpoint is declared with native structured output, which the
//! compatible adapter sends as `{"type": "json_object", "schema": ...}`, the form llama.cpp
//! servers constrain decoding with.

use std::sync::Arc;

use cairn::provider::openai_compatible::OpenAiCompatibleProvider;
use cairn::provider::{ChatEvent, ChatRequest, Message, Provider, ToolChoice, ToolSpec};
use cairn::{AgentOptions, Engine, MemoryStore, RunOptions, RunStatus, Workflow};
use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn server() -> Option<(String, String)> {
    let url = std::env::var("CAIRN_TEST_OPENAI_BASE_URL").ok().filter(|u| !u.is_empty())?;
    let model = std::env::var("CAIRN_TEST_OPENAI_MODEL").unwrap_or_else(|_| "smollm2".into());
    Some((url, model))
}

fn engine(url: &str, model: &str) -> Engine {
    // llama.cpp constrains output to a JSON Schema given as `response_format`, so this
    // endpoint is declared as supporting native structured output.
    let provider = OpenAiCompatibleProvider::new("local", url).unwrap().with_capabilities(
        cairn::provider::Capabilities { native_schema: true, tools: true, reasoning: false },
    );
    let store = Arc::new(MemoryStore::new());
    Engine::builder(store)
        .provider(Arc::new(provider))
        .default_model(cairn::ModelRef::parse(&format!("local:{model}")).unwrap())
        // A llama.cpp server busy with another test's request answers an incomplete stream
        // (a role chunk, then `[DONE]`): a retryable error, so give the busy server time.
        .retries(8, std::time::Duration::from_millis(250))
        .build()
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap()
}

#[test]
fn live_streamed_answer() {
    let Some((url, model)) = server() else {
        eprintln!("skipped: set CAIRN_TEST_OPENAI_BASE_URL to run against a real server");
        return;
    };
    let engine = engine(&url, &model);
    let wf = Workflow::new("hello", |ctx, _| async move {
        ctx.agent(
            "Say hello in five words.",
            AgentOptions { max_output_tokens: Some(32), ..Default::default() },
        )
        .await
    });
    let outcome = runtime().block_on(async {
        engine.run(&wf, json!({}), RunOptions::default()).unwrap().result().await.unwrap()
    });
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    assert!(!outcome.value.unwrap().as_str().unwrap().is_empty());
    // llama.cpp reports no usage in streams: cairn estimates it and says so.
    assert!(outcome.usage.total_tokens() > 0);
}

#[test]
fn live_forced_tool_call() {
    let Some((url, model)) = server() else {
        eprintln!("skipped: set CAIRN_TEST_OPENAI_BASE_URL to run against a real server");
        return;
    };
    let provider = OpenAiCompatibleProvider::new("local", &url).unwrap();
    let mut request = ChatRequest::new(model, vec![Message::user("What is the weather in Paris?")]);
    request.tools = vec![ToolSpec {
        name: "get_weather".into(),
        description: "the weather in a city".into(),
        parameters: json!({"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}),
    }];
    request.tool_choice = ToolChoice::Tool("get_weather".into());
    request.max_output_tokens = Some(64);
    // Adapters never retry; the caller does, as the agent loop would, while the server is busy
    // with another test's request and answers an incomplete (retryable) stream.
    let events: Vec<ChatEvent> = runtime().block_on(async {
        let mut attempt = 0;
        loop {
            let events: Vec<ChatEvent> =
                provider.stream(request.clone(), CancellationToken::new()).collect().await;
            let retry = matches!(events.last(), Some(ChatEvent::Error(e)) if e.retryable);
            if !retry || attempt == 8 {
                return events;
            }
            attempt += 1;
            tokio::time::sleep(std::time::Duration::from_millis(250 << attempt.min(4))).await;
        }
    });
    let call = events.iter().find_map(|e| match e {
        ChatEvent::ToolCallEnd { name, arguments, .. } => Some((name.clone(), arguments.clone())),
        _ => None,
    });
    let (name, arguments) = call.unwrap_or_else(|| panic!("no tool call in {events:?}"));
    assert_eq!(name, "get_weather");
    assert!(arguments["city"].is_string(), "{arguments}");
    assert_eq!(events.iter().filter(|e| e.is_terminal()).count(), 1);
}

#[test]
fn live_schema_validated_answer() {
    let Some((url, model)) = server() else {
        eprintln!("skipped: set CAIRN_TEST_OPENAI_BASE_URL to run against a real server");
        return;
    };
    let engine = engine(&url, &model);
    let wf = Workflow::new("schema", |ctx, _| async move {
        let schema =
            json!({"type": "object", "required": ["answer"], "properties": {"answer": {"type": "string"}}});
        ctx.agent(
            "Reply with a JSON object {\"answer\": ...} naming the capital of France.",
            AgentOptions { schema: Some(schema), max_output_tokens: Some(64), ..Default::default() },
        )
        .await
    });
    let outcome = runtime().block_on(async {
        engine.run(&wf, json!({}), RunOptions::default()).unwrap().result().await.unwrap()
    });
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    assert!(outcome.value.unwrap()["answer"].is_string());
}

/// Two concurrent agent calls through the `cairn` binary. A llama.cpp server serves one
/// request at a time and interrupts the one in flight when another arrives, so two calls
/// fanned out at once kept cutting each other's retries short (`provider_unavailable`); the
/// provider table's `concurrency = 1` keeps the run's calls to it one at a time.
#[test]
fn live_parallel_calls_through_the_binary() {
    let Some((url, model)) = server() else {
        eprintln!("skipped: set CAIRN_TEST_OPENAI_BASE_URL to run against a real server");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[routing]\ndefault = \"local:{model}\"\n\n[providers.local]\nkind = \"openai-compatible\"\nbase_url = \"{url}\"\nconcurrency = 1\nprices = {{ {model} = [1.0, 2.0] }}\n"
    );
    std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
    let script = "parallel([\n  || agent(\"Write a paragraph about rivers.\", #{max_output_tokens: 64}),\n  || agent(\"Write a paragraph about mountains.\", #{max_output_tokens: 64}),\n])";
    std::fs::write(dir.path().join("p.rhai"), script).unwrap();
    let out = assert_cmd::Command::cargo_bin("cairn")
        .unwrap()
        .current_dir(dir.path())
        .args(["run", "p.rhai", "--json", "-q"])
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    let outcome: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["status"], "ok", "{outcome}");
    for answer in outcome["value"].as_array().unwrap() {
        assert!(!answer.as_str().unwrap().is_empty(), "{outcome}");
    }
}

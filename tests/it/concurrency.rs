//! Many live streams through one engine: 200 concurrent agent calls over HTTP (a local
//! OpenAI-compatible server) at concurrency 200, all succeeding and all journaled.

use std::sync::Arc;
use std::time::Duration;

use cairn::provider::openai_compatible::OpenAiCompatibleProvider;
use cairn::{AgentOptions, Engine, MemoryStore, ParallelOptions, RunOptions, RunStatus, Workflow};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const STREAMS: usize = 200;

fn chat_stream() -> String {
    let chunk = |delta: Value, finish: Value| json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    let mut body = String::new();
    for c in [
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": "hello "}), Value::Null),
        chunk(json!({"content": "there"}), Value::Null),
        chunk(json!({}), json!("stop")),
        json!({"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}}),
    ] {
        body.push_str(&format!("data: {c}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_streams_through_one_engine() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(chat_stream().into_bytes(), "text/event-stream")
                .set_delay(Duration::from_millis(50)),
        )
        .mount(&server)
        .await;
    let provider = OpenAiCompatibleProvider::new("local", &format!("{}/v1", server.uri())).unwrap();
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::builder(store)
        .provider(Arc::new(provider))
        .default_model(cairn::ModelRef::parse("local:m").unwrap())
        .max_concurrency(STREAMS)
        .max_spawns(1_000)
        .build()
        .unwrap();
    let wf = Workflow::new("fan", |ctx, _| async move {
        let items = (0..STREAMS).map(|i| json!(i)).collect();
        let out = ctx
            .parallel_map(
                items,
                |ctx, i| async move { ctx.agent(&format!("stream {i}"), AgentOptions::default()).await },
                ParallelOptions::default(),
            )
            .await?;
        Ok(json!(out))
    });
    let outcome = engine.run(&wf, json!({}), RunOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    let values = outcome.value.unwrap();
    assert_eq!(values.as_array().unwrap().len(), STREAMS);
    assert!(values.as_array().unwrap().iter().all(|v| v == "hello there"));
    assert_eq!(outcome.usage.input_tokens, 9 * STREAMS as u64);
    assert_eq!(server.received_requests().await.unwrap().len(), STREAMS);
}

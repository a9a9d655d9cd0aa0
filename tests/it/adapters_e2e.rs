//! Each real adapter, end to end through the engine over HTTP: a closure workflow and a Rhai
//! script call an agent with a tool and a schema; the local server first streams a tool call,
//! then (once the tool result is sent back) a JSON answer that matches the schema.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use cairn::provider::anthropic::AnthropicProvider;
use cairn::provider::openai_chat::OpenAiChatProvider;
use cairn::provider::openai_compatible::OpenAiCompatibleProvider;
use cairn::provider::openai_responses::OpenAiResponsesProvider;
use cairn::provider::{ApiKey, Provider};
use cairn::{AgentOptions, Engine, MemoryStore, RunOptions, RunStatus, Script, Tool, Toolset, Workflow};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

#[derive(Debug)]
struct Weather {
    calls: Arc<AtomicU32>,
    parameters: Value,
}

impl Tool for Weather {
    fn name(&self) -> &str {
        "get_weather"
    }
    fn description(&self) -> &str {
        "the weather in a city"
    }
    fn parameters(&self) -> &Value {
        &self.parameters
    }
    fn version(&self) -> &str {
        "1"
    }
    fn call(&self, args: Value) -> BoxFuture<'static, Result<String, cairn::Error>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let city = args["city"].as_str().unwrap_or("?").to_owned();
        Box::pin(async move { Ok(format!("sunny in {city}")) })
    }
}

fn sse(events: &[Value]) -> String {
    events.iter().map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or(""))).collect()
}

fn data_lines(chunks: &[Value]) -> String {
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    body
}

const ANSWER: &str = r#"{"forecast":"sunny"}"#;

fn anthropic_bodies() -> (String, String) {
    let start = json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "model": "claude-x", "stop_reason": null, "usage": {"input_tokens": 20, "output_tokens": 1}}});
    let tool = sse(&[
        start.clone(),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"city\":\"Paris\"}"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}}),
        json!({"type": "message_stop"}),
    ]);
    let text = sse(&[
        start,
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ANSWER}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 8}}),
        json!({"type": "message_stop"}),
    ]);
    (tool, text)
}

fn chat_bodies() -> (String, String) {
    let chunk = |delta: Value, finish: Value| json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    let usage = json!({"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}});
    let tool = data_lines(&[
        chunk(json!({"role": "assistant", "content": null}), Value::Null),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}),
            Value::Null,
        ),
        chunk(json!({}), json!("tool_calls")),
        usage.clone(),
    ]);
    let text = data_lines(&[
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": ANSWER}), Value::Null),
        chunk(json!({}), json!("stop")),
        usage,
    ]);
    (tool, text)
}

fn responses_bodies() -> (String, String) {
    let completed = json!({"type": "response.completed", "response": {"id": "r", "status": "completed", "usage": {"input_tokens": 20, "output_tokens": 8, "total_tokens": 28}}});
    let tool = sse(&[
        json!({"type": "response.created", "response": {"id": "r", "status": "in_progress", "usage": null}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": "{\"city\":\"Paris\"}"}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}),
        completed.clone(),
    ]);
    let text = sse(&[
        json!({"type": "response.created", "response": {"id": "r", "status": "in_progress", "usage": null}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "delta": ANSWER}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
        completed,
    ]);
    (tool, text)
}

struct Adapter {
    name: &'static str,
    path: &'static str,
    bodies: fn() -> (String, String),
    make: fn(&str) -> Arc<dyn Provider>,
}

fn adapters() -> Vec<Adapter> {
    vec![
        Adapter {
            name: "anthropic",
            path: "/v1/messages",
            bodies: anthropic_bodies,
            make: |url| Arc::new(AnthropicProvider::new(ApiKey::new("sk-test")).unwrap().with_base_url(url)),
        },
        Adapter {
            name: "openai",
            path: "/v1/chat/completions",
            bodies: chat_bodies,
            make: |url| {
                Arc::new(
                    OpenAiChatProvider::new(ApiKey::new("sk-test"))
                        .unwrap()
                        .with_base_url(format!("{url}/v1")),
                )
            },
        },
        Adapter {
            name: "openai-responses",
            path: "/v1/responses",
            bodies: responses_bodies,
            make: |url| {
                Arc::new(
                    OpenAiResponsesProvider::new(ApiKey::new("sk-test"))
                        .unwrap()
                        .with_name("openai-responses")
                        .with_base_url(format!("{url}/v1")),
                )
            },
        },
        Adapter {
            name: "local",
            path: "/v1/chat/completions",
            bodies: chat_bodies,
            make: |url| Arc::new(OpenAiCompatibleProvider::new("local", &format!("{url}/v1")).unwrap()),
        },
    ]
}

/// A server answering the first request with the tool call and every later one with the text.
async fn serve(adapter: &Adapter) -> MockServer {
    let server = MockServer::start().await;
    let (tool, text) = (adapter.bodies)();
    Mock::given(method("POST"))
        .and(path(adapter.path))
        .respond_with(ResponseTemplate::new(200).set_body_raw(tool.into_bytes(), "text/event-stream"))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(adapter.path))
        .respond_with(ResponseTemplate::new(200).set_body_raw(text.into_bytes(), "text/event-stream"))
        .with_priority(2)
        .mount(&server)
        .await;
    server
}

fn engine_for(adapter: &Adapter, url: &str, calls: &Arc<AtomicU32>) -> Engine {
    let store = Arc::new(MemoryStore::new());
    let tool: Arc<dyn Tool> = Arc::new(Weather {
        calls: calls.clone(),
        parameters: json!({"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}),
    });
    Engine::builder(store)
        .provider((adapter.make)(url))
        .toolset(Toolset::new("weather", vec![tool]))
        .build()
        .unwrap()
}

fn schema() -> Value {
    json!({"type": "object", "required": ["forecast"], "properties": {"forecast": {"type": "string"}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_adapter_runs_tools_and_a_schema_from_a_closure_and_a_script() {
    for adapter in adapters() {
        // From a Rust closure.
        let server = serve(&adapter).await;
        let calls = Arc::new(AtomicU32::new(0));
        let engine = engine_for(&adapter, &server.uri(), &calls);
        let model = format!("{}:model-x", adapter.name);
        let wf_model = model.clone();
        let wf = Workflow::new("weather", move |ctx, _| {
            let model = wf_model.clone();
            async move {
                let opts = AgentOptions {
                    model: Some(model),
                    tools: vec!["weather".into()],
                    schema: Some(schema()),
                    ..Default::default()
                };
                ctx.agent("what is the weather in Paris?", opts).await
            }
        });
        let outcome = engine.run(&wf, json!({}), RunOptions::default()).unwrap().result().await.unwrap();
        assert_eq!(outcome.status, RunStatus::Ok, "{}: {:?}", adapter.name, outcome.error);
        assert_eq!(outcome.value, Some(json!({"forecast": "sunny"})), "{}", adapter.name);
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{}", adapter.name);
        let requests = server.received_requests().await.unwrap();
        assert_eq!(requests.len(), 2, "{}", adapter.name);
        let second = String::from_utf8_lossy(&requests[1].body);
        assert!(
            second.contains("sunny in Paris"),
            "{}: the tool result reached the model: {second}",
            adapter.name
        );

        // From a Rhai script.
        let server = serve(&adapter).await;
        let calls = Arc::new(AtomicU32::new(0));
        let engine = engine_for(&adapter, &server.uri(), &calls);
        let source = format!(
            r#"agent("what is the weather in Paris?", #{{model: "{model}", tools: ["weather"],
                schema: #{{type: "object", required: ["forecast"], properties: #{{forecast: #{{type: "string"}}}}}}}})"#
        );
        let handle =
            engine.run_script(&Script::rhai("weather", &source), json!({}), RunOptions::default()).unwrap();
        let outcome = handle.result().await.unwrap();
        assert_eq!(outcome.status, RunStatus::Ok, "{} (script): {:?}", adapter.name, outcome.error);
        assert_eq!(outcome.value, Some(json!({"forecast": "sunny"})), "{} (script)", adapter.name);
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{} (script)", adapter.name);
    }
}

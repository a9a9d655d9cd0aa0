//! Every HTTP adapter end to end against local servers: a streamed answer with a tool call,
//! 429 with Retry-After, 529, 401, a stream cut mid-event, a stall past the idle timeout,
//! malformed JSON in a delta, and cancellation or drop severing the connection. Every case
//! asserts exactly one terminal event.
//!
//! wiremock serves whole bodies; stalls and severing need a server that holds a connection
//! open, so a few cases use a tiny raw HTTP/1.1 responder on a tokio `TcpListener`.

use std::sync::Arc;
use std::time::Duration;

use cairn::provider::anthropic::AnthropicProvider;
use cairn::provider::openai_chat::OpenAiChatProvider;
use cairn::provider::openai_compatible::OpenAiCompatibleProvider;
use cairn::provider::openai_responses::OpenAiResponsesProvider;
use cairn::provider::{ApiKey, ChatEvent, ChatRequest, FinishReason, Message, Provider, ToolSpec};
use cairn::{Error, ErrorCode, Usage};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const KEY: &str = "sk-test-secret-0123456789";
const IDLE: Duration = Duration::from_millis(200);

/// One adapter under test and the wire it speaks.
struct Case {
    name: &'static str,
    path: &'static str,
    make: fn(&str) -> Arc<dyn Provider>,
    ok_body: String,
    /// The usage the ok body reports, normalized.
    ok_usage: Usage,
    /// A data line of the ok body to replace with broken JSON.
    break_at: &'static str,
}

fn anthropic(url: &str) -> Arc<dyn Provider> {
    Arc::new(AnthropicProvider::new(ApiKey::new(KEY)).unwrap().with_base_url(url).with_idle_timeout(IDLE))
}

fn chat(url: &str) -> Arc<dyn Provider> {
    Arc::new(
        OpenAiChatProvider::new(ApiKey::new(KEY))
            .unwrap()
            .with_base_url(format!("{url}/v1"))
            .with_idle_timeout(IDLE),
    )
}

fn responses(url: &str) -> Arc<dyn Provider> {
    Arc::new(
        OpenAiResponsesProvider::new(ApiKey::new(KEY))
            .unwrap()
            .with_base_url(format!("{url}/v1"))
            .with_idle_timeout(IDLE),
    )
}

fn compatible(url: &str) -> Arc<dyn Provider> {
    Arc::new(OpenAiCompatibleProvider::new("local", &format!("{url}/v1")).unwrap().with_idle_timeout(IDLE))
}

fn sse(events: &[(&str, Value)]) -> String {
    events.iter().map(|(event, data)| format!("event: {event}\ndata: {data}\n\n")).collect()
}

fn data_lines(chunks: &[Value], done: bool) -> String {
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    if done {
        body.push_str("data: [DONE]\n\n");
    }
    body
}

fn chat_chunks(with_usage: bool) -> Vec<Value> {
    let chunk = |delta: Value, finish: Value| json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    let mut chunks = vec![
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": "Let me check."}), Value::Null),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}),
            Value::Null,
        ),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}), Value::Null),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}), Value::Null),
        chunk(json!({}), json!("tool_calls")),
    ];
    if with_usage {
        chunks.push(json!({"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 25, "completion_tokens": 30, "total_tokens": 55, "prompt_tokens_details": {"cached_tokens": 5}}}));
    }
    chunks
}

fn cases() -> Vec<Case> {
    let anthropic_body = sse(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-x", "stop_reason": null, "usage": {"input_tokens": 20, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 0, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me check."}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"city\":"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"Paris\"}"}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 1})),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]);
    let responses_body = sse(&[
        (
            "response.created",
            json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "usage": null}}),
        ),
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
        ),
        (
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "delta": "Let me check."}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
        ),
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 1, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": ""}}),
        ),
        (
            "response.function_call_arguments.delta",
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 1, "delta": "{\"city\":"}),
        ),
        (
            "response.function_call_arguments.delta",
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 1, "delta": "\"Paris\"}"}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 1, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "usage": {"input_tokens": 25, "input_tokens_details": {"cached_tokens": 5}, "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 55}}}),
        ),
    ]);
    let exact = Usage { input_tokens: 25, output_tokens: 30, cache_read_tokens: 5, ..Usage::default() };
    vec![
        Case {
            name: "anthropic",
            path: "/v1/messages",
            make: anthropic,
            ok_body: anthropic_body,
            ok_usage: exact,
            break_at: "\"Paris\\\"}",
        },
        Case {
            name: "openai-chat",
            path: "/v1/chat/completions",
            make: chat,
            ok_body: data_lines(&chat_chunks(true), true),
            ok_usage: exact,
            break_at: "\"Paris\\\"}",
        },
        Case {
            name: "openai-responses",
            path: "/v1/responses",
            make: responses,
            ok_body: responses_body,
            ok_usage: exact,
            break_at: "\"Paris\\\"}",
        },
        Case {
            name: "openai-compatible",
            path: "/v1/chat/completions",
            make: compatible,
            ok_body: data_lines(&chat_chunks(false), true),
            // No usage on the wire: estimated from the request and the generated text, flagged.
            // Prompt: 17 + 11 + 1 characters and a 56-character JSON schema, counted by their
            // pieces (the schema's quotes and braces a token each, about) -> 38; output: 13 + 11
            // + 16 characters -> 10.
            ok_usage: Usage { input_tokens: 38, output_tokens: 10, approximate: true, ..Usage::default() },
            break_at: "\"Paris\\\"}",
        },
    ]
}

fn request() -> ChatRequest {
    let mut request = ChatRequest::new("model-x", vec![Message::user("weather in paris?")]);
    request.tools = vec![ToolSpec {
        name: "get_weather".into(),
        description: "w".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    }];
    request
}

/// Collects a stream, asserting the one-terminal-event contract.
async fn collect(provider: &dyn Provider) -> Vec<ChatEvent> {
    collect_request(provider, request(), Duration::from_secs(10)).await
}

/// Collects the stream of `request` within `within`, asserting the one-terminal-event contract.
async fn collect_request(provider: &dyn Provider, request: ChatRequest, within: Duration) -> Vec<ChatEvent> {
    let events: Vec<ChatEvent> =
        tokio::time::timeout(within, provider.stream(request, CancellationToken::new()).collect())
            .await
            .expect("the stream ended");
    assert_eq!(events.iter().filter(|e| e.is_terminal()).count(), 1, "{events:?}");
    assert!(events.last().is_some_and(ChatEvent::is_terminal), "{events:?}");
    events
}

fn error_of(events: &[ChatEvent]) -> &Error {
    match events.last() {
        Some(ChatEvent::Error(error)) => error,
        other => panic!("expected an error, got {other:?}"),
    }
}

async fn serve(case: &Case, template: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST")).and(path(case.path)).respond_with(template).mount(&server).await;
    server
}

fn stream_template(body: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body.as_bytes().to_vec(), "text/event-stream")
}

#[tokio::test]
async fn streamed_answer_with_a_tool_call() {
    for case in cases() {
        let server = serve(&case, stream_template(&case.ok_body)).await;
        let provider = (case.make)(&server.uri());
        let events = collect(&*provider).await;
        let text: String = events
            .iter()
            .filter_map(|e| if let ChatEvent::TextDelta(t) = e { Some(t.as_str()) } else { None })
            .collect();
        assert_eq!(text, "Let me check.", "{}", case.name);
        let calls: Vec<&ChatEvent> = events
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    ChatEvent::ToolCallStart { .. }
                        | ChatEvent::ToolCallDelta { .. }
                        | ChatEvent::ToolCallEnd { .. }
                )
            })
            .collect();
        assert_eq!(
            calls.first(),
            Some(&&ChatEvent::ToolCallStart { wire_id: "call_1".into(), name: "get_weather".into() }),
            "{}",
            case.name
        );
        assert_eq!(
            calls.last(),
            Some(&&ChatEvent::ToolCallEnd {
                wire_id: "call_1".into(),
                name: "get_weather".into(),
                arguments: json!({"city": "Paris"})
            }),
            "{}",
            case.name
        );
        assert_eq!(
            events.last(),
            Some(&ChatEvent::Finish { reason: FinishReason::ToolUse, usage: case.ok_usage }),
            "{}",
            case.name
        );

        // The wire request: the compiled body, streaming, credentials in the right header only.
        let received = server.received_requests().await.unwrap();
        assert_eq!(received.len(), 1);
        let body: Value = serde_json::from_slice(&received[0].body).unwrap();
        assert_eq!(body["stream"], true, "{}", case.name);
        assert_eq!(body["model"], "model-x");
        let headers = &received[0].headers;
        match case.name {
            "anthropic" => {
                assert_eq!(headers.get("x-api-key").unwrap(), KEY);
                assert_eq!(headers.get("anthropic-version").unwrap(), "2023-06-01");
                assert!(headers.get("authorization").is_none());
            }
            "openai-compatible" => assert!(headers.get("authorization").is_none(), "keyless by default"),
            _ => assert_eq!(headers.get("authorization").unwrap(), &format!("Bearer {KEY}")),
        }
        assert!(!format!("{provider:?}").contains(KEY), "Debug shows the key: {provider:?}");
    }
}

#[tokio::test]
async fn http_faults_are_typed() {
    for case in cases() {
        let rate_limited = ResponseTemplate::new(429)
            .insert_header("retry-after", "2")
            .set_body_json(json!({"error": {"type": "rate_limit_error", "message": "slow down"}}));
        let events = collect(&*(case.make)(&serve(&case, rate_limited).await.uri())).await;
        let error = error_of(&events);
        assert_eq!(
            (error.code, error.retryable, error.retry_after_ms),
            (ErrorCode::ProviderRateLimit, true, Some(2000)),
            "{}",
            case.name
        );
        assert_eq!(events.len(), 1);

        let overloaded = ResponseTemplate::new(529).set_body_json(
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        );
        let error = error_of(&collect(&*(case.make)(&serve(&case, overloaded).await.uri())).await).clone();
        assert_eq!((error.code, error.retryable), (ErrorCode::ProviderUnavailable, true), "{}", case.name);

        let unauthorized = ResponseTemplate::new(401).set_body_json(
            json!({"error": {"type": "invalid_request_error", "code": "invalid_api_key", "message": format!("Incorrect API key provided: {KEY}")}}),
        );
        let error = error_of(&collect(&*(case.make)(&serve(&case, unauthorized).await.uri())).await).clone();
        assert_eq!((error.code, error.retryable), (ErrorCode::ProviderAuth, false), "{}", case.name);
        assert!(!error.message.contains(KEY), "{}: credential in {:?}", case.name, error.message);
        assert!(!serde_json::to_string(&error).unwrap().contains(KEY));

        let context = ResponseTemplate::new(400).set_body_json(
            json!({"error": {"type": "invalid_request_error", "code": "context_length_exceeded", "message": "maximum context length"}}),
        );
        let error = error_of(&collect(&*(case.make)(&serve(&case, context).await.uri())).await).clone();
        assert_eq!((error.code, error.retryable), (ErrorCode::ContextOverflow, false), "{}", case.name);
    }
}

#[tokio::test]
async fn a_stream_cut_mid_event_is_a_retryable_transport_error() {
    for case in cases() {
        let cut = case.ok_body.find(case.break_at).unwrap();
        let server = serve(&case, stream_template(&case.ok_body[..cut])).await;
        let events = collect(&*(case.make)(&server.uri())).await;
        let error = error_of(&events);
        assert_eq!((error.code, error.retryable), (ErrorCode::Transport, true), "{}: {error:?}", case.name);
        assert!(
            events.iter().any(|e| matches!(e, ChatEvent::TextDelta(_))),
            "{}: deltas before the cut arrive",
            case.name
        );
    }
}

#[tokio::test]
async fn malformed_json_in_a_delta_is_a_retryable_transport_error() {
    for case in cases() {
        let at = case.ok_body.find(case.break_at).unwrap();
        let line_start = case.ok_body[..at].rfind('\n').unwrap() + 1;
        let line_end = at + case.ok_body[at..].find('\n').unwrap();
        let body =
            format!("{}data: {{\"type\": \"broken{}", &case.ok_body[..line_start], &case.ok_body[line_end..]);
        let server = serve(&case, stream_template(&body)).await;
        let events = collect(&*(case.make)(&server.uri())).await;
        let error = error_of(&events);
        assert_eq!((error.code, error.retryable), (ErrorCode::Transport, true), "{}: {error:?}", case.name);
        assert!(error.message.contains("json"), "{}", error.message);
    }
}

#[tokio::test]
async fn an_unreachable_server_is_a_transport_error() {
    // Bind then drop a listener: the port is closed.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    for case in cases() {
        let error = error_of(&collect(&*(case.make)(&url)).await).clone();
        assert_eq!((error.code, error.retryable), (ErrorCode::Transport, true), "{}", case.name);
        assert!(!error.message.contains(KEY));
    }
}

/// A raw HTTP/1.1 server for one connection: it answers 200 with `prefix` (chunked), then holds
/// the connection open and reports when the client closes it.
async fn holding_server(prefix: String) -> (String, tokio::sync::oneshot::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        read_request(&mut socket).await;
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        socket.write_all(head.as_bytes()).await.unwrap();
        socket.write_all(format!("{:x}\r\n{prefix}\r\n", prefix.len()).as_bytes()).await.unwrap();
        socket.flush().await.unwrap();
        let mut buf = [0u8; 1024];
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let _ = closed_tx.send(());
    });
    (url, closed_rx)
}

/// Reads one request: headers, then `content-length` bytes of body.
async fn read_request(socket: &mut tokio::net::TcpStream) {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = socket.read(&mut buf).await.unwrap();
        data.extend_from_slice(&buf[..n]);
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse::<usize>().unwrap());
            while data.len() < end + 4 + length {
                let n = socket.read(&mut buf).await.unwrap();
                data.extend_from_slice(&buf[..n]);
            }
            return;
        }
    }
}

/// The ok body up to (not including) its first tool-call event: some text, then silence.
fn first_part(case: &Case) -> String {
    let cut = case.ok_body.find("get_weather").unwrap();
    let start_of_event = case.ok_body[..cut].rfind("\n\n").unwrap() + 2;
    case.ok_body[..start_of_event].to_owned()
}

#[tokio::test]
async fn a_stall_past_the_idle_timeout_is_a_retryable_transport_error() {
    for case in cases() {
        let (url, closed) = holding_server(first_part(&case)).await;
        let started = std::time::Instant::now();
        let events = collect(&*(case.make)(&url)).await;
        let error = error_of(&events);
        assert_eq!((error.code, error.retryable), (ErrorCode::Transport, true), "{}: {error:?}", case.name);
        assert!(error.message.contains("stalled"), "{}", error.message);
        assert!(started.elapsed() >= IDLE, "{:?}", started.elapsed());
        assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
        assert!(events.iter().any(|e| matches!(e, ChatEvent::TextDelta(_))), "{}", case.name);
        // The stalled connection is closed, not leaked.
        tokio::time::timeout(Duration::from_secs(2), closed).await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn cancellation_severs_the_stream_at_once() {
    for case in cases() {
        let (url, closed) = holding_server(first_part(&case)).await;
        let provider = (case.make)(&url);
        let cancel = CancellationToken::new();
        let mut stream = provider.stream(request(), cancel.clone());
        // Read until the text arrives, then cancel while the server holds the connection.
        loop {
            match tokio::time::timeout(Duration::from_secs(5), stream.next()).await.unwrap() {
                Some(ChatEvent::TextDelta(_)) => break,
                Some(event) => assert!(!event.is_terminal(), "{}: {event:?}", case.name),
                None => panic!("{}: ended early", case.name),
            }
        }
        let started = std::time::Instant::now();
        cancel.cancel();
        let next = stream.next().await;
        assert!(
            matches!(next, Some(ChatEvent::Error(ref e)) if e.code == ErrorCode::Cancelled && !e.retryable),
            "{next:?}"
        );
        assert!(stream.next().await.is_none(), "{}: events after the terminal one", case.name);
        assert!(started.elapsed() < IDLE, "cancellation waited for the idle timeout");
        tokio::time::timeout(Duration::from_secs(2), closed).await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn dropping_the_stream_severs_the_connection() {
    let case = cases().remove(0);
    let (url, closed) = holding_server(first_part(&case)).await;
    let provider = (case.make)(&url);
    let mut stream = provider.stream(request(), CancellationToken::new());
    let first = tokio::time::timeout(Duration::from_secs(5), stream.next()).await.unwrap();
    assert!(first.is_some());
    drop(stream);
    tokio::time::timeout(Duration::from_secs(2), closed).await.unwrap().unwrap();
}

#[tokio::test]
async fn an_anthropic_error_event_mid_stream_is_typed() {
    let case = cases().remove(0);
    let body = format!(
        "{}event: error\ndata: {}\n\n",
        first_part(&case),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );
    let events = collect(&*(case.make)(&serve(&case, stream_template(&body)).await.uri())).await;
    let error = error_of(&events);
    assert_eq!((error.code, error.retryable), (ErrorCode::ProviderUnavailable, true));
}

#[tokio::test]
async fn a_compatible_server_answering_json_is_understood() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("content-type", "application/json"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            super::fixtures::read("llama-cpp-python-recorded/nonstream.json"),
            "application/json",
        ))
        .mount(&server)
        .await;
    let events = collect(&*compatible(&server.uri())).await;
    let Some(ChatEvent::Finish { reason, usage }) = events.last() else { panic!("{events:?}") };
    assert_eq!((reason, usage.input_tokens, usage.output_tokens), (&FinishReason::Stop, 37, 19));
}

/// Opt-in: a real llama.cpp OpenAI-compatible server (see `shared/fixtures/README.md` for the
/// recipe), named by `CAIRN_TEST_LLAMA_URL` (e.g. `http://127.0.0.1:8765/v1`). Without the
/// variable there is nothing to test and the test passes at once.
#[tokio::test]
async fn live_llama_cpp_server_when_configured() {
    let Ok(url) = std::env::var("CAIRN_TEST_LLAMA_URL") else { return };
    let provider =
        OpenAiCompatibleProvider::new("llama", &url).unwrap().with_idle_timeout(Duration::from_secs(60));
    let mut plain = ChatRequest::new("smollm2", vec![Message::user("Count from 1 to 3.")]);
    plain.temperature = Some(0.0);
    plain.max_output_tokens = Some(32);
    let events = collect_request(&provider, plain, Duration::from_secs(120)).await;
    let Some(ChatEvent::Finish { usage, .. }) = events.last() else { panic!("{events:?}") };
    assert!(usage.approximate && usage.output_tokens > 0, "llama.cpp reports no usage: {usage:?}");
    assert!(events.iter().any(|e| matches!(e, ChatEvent::TextDelta(_))));

    let mut forced = request();
    forced.model = "smollm2".into();
    forced.tool_choice = cairn::provider::ToolChoice::Tool("get_weather".into());
    forced.max_output_tokens = Some(64);
    let events = collect_request(&provider, forced, Duration::from_secs(120)).await;
    let end = events.iter().find_map(|e| match e {
        ChatEvent::ToolCallEnd { name, arguments, .. } => Some((name.clone(), arguments.clone())),
        _ => None,
    });
    let (name, arguments) = end.unwrap_or_else(|| panic!("no tool call: {events:?}"));
    assert_eq!(name, "get_weather");
    assert!(arguments.is_object());
}

#[test]
fn a_stream_can_be_created_outside_a_runtime() {
    // Connection, timers and all IO start on first poll, inside whatever runtime polls.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    for case in cases() {
        let stream = (case.make)(&url).stream(request(), CancellationToken::new());
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let events: Vec<ChatEvent> = runtime.block_on(stream.collect());
        assert!(
            matches!(events.as_slice(), [ChatEvent::Error(e)] if e.code == ErrorCode::Transport),
            "{events:?}"
        );
    }
}

#[tokio::test]
async fn cancelling_drops_events_not_yet_handed_out() {
    // The whole answer arrives in one read; cancelling after the first event still ends the
    // stream at the next poll instead of handing out the rest.
    let case = cases().remove(1);
    let server = serve(&case, stream_template(&case.ok_body)).await;
    let provider = (case.make)(&server.uri());
    let cancel = CancellationToken::new();
    let mut stream = provider.stream(request(), cancel.clone());
    assert!(stream.next().await.is_some_and(|e| !e.is_terminal()));
    cancel.cancel();
    let rest: Vec<ChatEvent> = stream.collect().await;
    assert!(matches!(rest.as_slice(), [ChatEvent::Error(e)] if e.code == ErrorCode::Cancelled), "{rest:?}");
}

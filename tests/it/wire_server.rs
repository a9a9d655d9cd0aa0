//! A fake provider on the wire for the money tests: the scripted server
//! ([`crate::scripted_server`]) answering in the Anthropic Messages or the OpenAI Chat
//! Completions streaming format with exactly chosen usage, and keeping the bill of what it
//! served (by the provider's rules: a finished turn bills its reported usage, a dropped stream
//! what it generated before the drop, a refused request nothing).

#![allow(dead_code)] // a shared helper: each test uses part of it

use serde_json::{Value, json};

use crate::scripted_server::{Reply, ScriptedServer, data_lines};

/// Characters of each streamed text delta: 25 tokens at four characters a token.
pub const DELTA_CHARS: usize = 100;

/// One scripted answer with what the provider bills for it (input, output tokens).
#[derive(Debug, Clone)]
pub struct Served {
    pub reply: Reply,
    pub bill: (u64, u64),
}

/// The running fake provider.
pub struct WireServer {
    pub server: ScriptedServer,
    bills: Vec<(u64, u64)>,
}

impl WireServer {
    /// Serves `script` in order (past its end, a non-retryable 400 billed nothing).
    pub fn start(script: Vec<Served>) -> WireServer {
        let bills = script.iter().map(|s| s.bill).collect();
        let server = ScriptedServer::start(script.into_iter().map(|s| s.reply).collect());
        WireServer { server, bills }
    }

    /// The OpenAI-style base URL (`http://HOST/v1`).
    pub fn url(&self) -> &str {
        &self.server.url
    }

    /// The base URL without the `/v1` suffix (for an Anthropic provider table).
    pub fn root_url(&self) -> String {
        self.server.url.trim_end_matches("/v1").to_owned()
    }

    /// The request bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.server.requests()
    }

    /// The bill of the requests served so far, at `input`/`output` USD per million tokens.
    pub fn billed_usd(&self, input: f64, output: f64) -> f64 {
        let served = self.server.requests().len().min(self.bills.len());
        self.bills[..served].iter().map(|&(i, o)| (i as f64 * input + o as f64 * output) / 1e6).sum()
    }
}

fn sse(events: &[(&str, Value)]) -> String {
    events.iter().map(|(name, data)| format!("event: {name}\ndata: {data}\n\n")).collect()
}

fn text_deltas(tokens: u64) -> Vec<String> {
    let chars = tokens as usize * 4;
    (0..chars).step_by(DELTA_CHARS).map(|at| "x".repeat(DELTA_CHARS.min(chars - at))).collect()
}

fn anthropic_start(input: u64) -> (&'static str, Value) {
    (
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": null, "usage": {"input_tokens": input, "output_tokens": 1}}}),
    )
}

fn anthropic_end(stop: &str, output: u64) -> Vec<(&'static str, Value)> {
    vec![
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": output}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]
}

/// An Anthropic text answer: `text`, then `end_turn` with the given usage.
pub fn anthropic_text(text: &str, input: u64, output: u64) -> Served {
    Served { reply: Reply::Sse(anthropic_text_body(text, input, output)), bill: (input, output) }
}

fn anthropic_text_body(text: &str, input: u64, output: u64) -> String {
    let mut events = vec![
        anthropic_start(input),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
    ];
    events.extend(anthropic_end("end_turn", output));
    sse(&events)
}

/// An Anthropic tool call with `arguments` (JSON text), then `tool_use` with the given usage.
pub fn anthropic_tool_call(id: &str, name: &str, arguments: &str, input: u64, output: u64) -> Served {
    Served {
        reply: Reply::Sse(anthropic_tool_body(id, name, arguments, input, output)),
        bill: (input, output),
    }
}

fn anthropic_tool_body(id: &str, name: &str, arguments: &str, input: u64, output: u64) -> String {
    let mut events = vec![
        anthropic_start(input),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": arguments}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
    ];
    events.extend(anthropic_end("tool_use", output));
    sse(&events)
}

/// An Anthropic stream that reports `input` tokens, streams `tokens` output tokens of text in
/// deltas of [`DELTA_CHARS`] characters, and then the connection drops (no `message_stop`).
/// Billed what it generated.
pub fn anthropic_drop(input: u64, tokens: u64) -> Served {
    let mut events = vec![
        anthropic_start(input),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
    ];
    for delta in text_deltas(tokens) {
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": delta}}),
        ));
    }
    Served { reply: Reply::Sse(sse(&events)), bill: (input, tokens) }
}

/// An Anthropic HTTP error before any stream byte (529 overloaded, 429, 500): billed nothing.
pub fn anthropic_status(code: u16) -> Served {
    let kind = match code {
        529 => "overloaded_error",
        429 => "rate_limit_error",
        _ => "api_error",
    };
    let body = json!({"type": "error", "error": {"type": kind, "message": "try again"}}).to_string();
    Served { reply: Reply::Status(code, body), bill: (0, 0) }
}

fn chunk(delta: Value, finish: Value) -> Value {
    json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

fn usage_chunk(input: u64, output: u64) -> Value {
    json!({"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}})
}

/// An OpenAI text answer with the given usage.
pub fn openai_text(text: &str, input: u64, output: u64) -> Served {
    Served { reply: crate::scripted_server::text(text, input, output), bill: (input, output) }
}

/// An OpenAI tool call with `arguments` (JSON text) and the given usage.
pub fn openai_tool_call(id: &str, name: &str, arguments: &str, input: u64, output: u64) -> Served {
    Served {
        reply: crate::scripted_server::tool_call(id, name, arguments, input, output),
        bill: (input, output),
    }
}

/// An OpenAI stream of `tokens` output tokens in deltas of [`DELTA_CHARS`] characters that
/// then drops (no finish reason, no usage, no `[DONE]`). Billed `input` and what it generated.
pub fn openai_drop(input: u64, tokens: u64) -> Served {
    let mut body = format!("data: {}\n\n", chunk(json!({"role": "assistant", "content": ""}), Value::Null));
    for delta in text_deltas(tokens) {
        body.push_str(&format!("data: {}\n\n", chunk(json!({"content": delta}), Value::Null)));
    }
    Served { reply: Reply::Sse(body), bill: (input, tokens) }
}

/// An OpenAI HTTP error before any stream byte (429, 500, 503): billed nothing.
pub fn openai_status(code: u16) -> Served {
    let body = json!({"error": {"message": "try again", "type": "server_error"}}).to_string();
    Served { reply: Reply::Status(code, body), bill: (0, 0) }
}

/// A finished OpenAI stream built from `chunks` (for shapes the helpers above do not cover).
pub fn openai_chunks(chunks: &[Value], bill: (u64, u64)) -> Served {
    Served { reply: Reply::Sse(data_lines(chunks)), bill }
}

/// OpenAI usage at the end of a stream, for [`openai_chunks`].
pub fn openai_usage(input: u64, output: u64) -> Value {
    usage_chunk(input, output)
}

/// A fake provider that answers each request with `answer(body)` (an SSE body), for
/// conversations whose order is not fixed (an orchestrator and its children).
pub struct DynamicServer {
    pub url: String,
}

impl DynamicServer {
    pub fn start(answer: fn(&Value) -> String) -> DynamicServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                std::thread::spawn(move || {
                    use std::io::Write;
                    let Some(body) = crate::scripted_server::read_request(&stream) else { return };
                    let sse = answer(&serde_json::from_slice(&body).unwrap_or(Value::Null));
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        sse.len()
                    );
                    let _ = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(sse.as_bytes()));
                });
            }
        });
        DynamicServer { url }
    }

    /// The base URL without the `/v1` suffix (for an Anthropic provider table).
    pub fn root_url(&self) -> String {
        self.url.trim_end_matches("/v1").to_owned()
    }
}

/// An Anthropic tool-call stream body (one `tool_use` block) with 50 input and 10 output tokens.
pub fn anthropic_tool_sse(name: &str, arguments: &Value) -> String {
    anthropic_tool_body("t1", name, &arguments.to_string(), 50, 10)
}

/// An Anthropic text stream body with 50 input and 10 output tokens.
pub fn anthropic_text_sse(text: &str) -> String {
    anthropic_text_body(text, 50, 10)
}

/// An OpenAI tool-call stream body (one call) with 50 input and 10 output tokens.
pub fn openai_tool_sse(name: &str, arguments: &Value) -> String {
    data_lines(&[
        chunk(json!({"role": "assistant", "content": null}), Value::Null),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "t1", "type": "function", "function": {"name": name, "arguments": arguments.to_string()}}]}),
            Value::Null,
        ),
        chunk(json!({}), json!("tool_calls")),
        usage_chunk(50, 10),
    ])
}

/// An OpenAI text stream body with 50 input and 10 output tokens.
pub fn openai_text_sse(text: &str) -> String {
    data_lines(&[
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": text}), Value::Null),
        chunk(json!({}), json!("stop")),
        usage_chunk(50, 10),
    ])
}

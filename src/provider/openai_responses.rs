//! The OpenAI Responses API adapter (`POST /responses`, streamed).
//!
//! Requests are stateless (`store: false`): the history is replayed item by item, and reasoning
//! items come back with their `encrypted_content` as `ProviderRaw` parts tagged `openai`, echoed
//! verbatim on the next turn so reasoning survives tool calls without server-side state.
//! Function calls stream as `output_item.added`, argument deltas and `output_item.done`; the
//! call's `call_id` is the wire id. Usage arrives only with `response.completed` (or
//! `response.incomplete`); `response.failed` and `error` events end the stream as typed errors
//! (a failed response's usage is reported first, as a `Usage` event).

use std::collections::HashMap;
use std::fmt;

use futures::stream::BoxStream;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::estimate;
use super::http::{self, ApiKey, Endpoint, ErrorContext, classify_stream_error, endpoint_builders};
use super::openai_chat::{openai_capabilities, strict_compatible};
use super::sse::SseEvent;
use super::stream::{StreamDecoder, WireCall, drive, truncated};
use super::{Capabilities, ChatEvent, ChatRequest, FinishReason, Message, Part, Provider, Role, ToolChoice};
use crate::{Error, Usage};

/// The provider family tag on OpenAI's `ProviderRaw` items.
pub const FAMILY: &str = "openai";

/// The adapter for OpenAI's Responses API.
#[derive(Clone)]
pub struct OpenAiResponsesProvider {
    endpoint: Endpoint,
    api_key: ApiKey,
}

impl OpenAiResponsesProvider {
    /// The public endpoint (the `/responses` path is appended).
    pub const DEFAULT_BASE_URL: &'static str = "https://api.openai.com/v1";

    /// An adapter named "openai" at the public endpoint, with `api_key`.
    ///
    /// # Errors
    /// `internal` if the HTTP client cannot be built.
    pub fn new(api_key: ApiKey) -> Result<OpenAiResponsesProvider, Error> {
        Ok(OpenAiResponsesProvider {
            endpoint: Endpoint::new(FAMILY, OpenAiResponsesProvider::DEFAULT_BASE_URL)?,
            api_key,
        })
    }

    /// An adapter keyed from `OPENAI_API_KEY`, at `OPENAI_BASE_URL` when that is set.
    ///
    /// # Errors
    /// `config` when the key is missing.
    pub fn from_env() -> Result<OpenAiResponsesProvider, Error> {
        let provider = OpenAiResponsesProvider::new(ApiKey::from_env("OPENAI_API_KEY")?)?;
        Ok(match http::base_url_from_env("OPENAI_BASE_URL") {
            Some(url) => provider.with_base_url(url),
            None => provider,
        })
    }

    endpoint_builders!(
        OpenAiResponsesProvider,
        "Sends requests to `base_url` (up to and including `/v1`) instead."
    );

    /// The request body for `request`: a pure function of it.
    pub fn compile(&self, request: &ChatRequest) -> Value {
        compile(request)
    }

    /// A fresh decoder for one response stream; `input_estimate` stands in for prompt tokens
    /// only if the completed response carries no usage.
    pub fn decoder(&self, input_estimate: u64) -> ResponsesDecoder {
        ResponsesDecoder::new(&self.endpoint.name, input_estimate)
    }
}

impl fmt::Debug for OpenAiResponsesProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("OpenAiResponsesProvider");
        self.endpoint.debug_fields(&mut s, &self.api_key);
        s.finish_non_exhaustive()
    }
}

impl Provider for OpenAiResponsesProvider {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    fn capabilities(&self, model: &str) -> Capabilities {
        openai_capabilities(model)
    }

    fn stream(&self, request: ChatRequest, cancel: CancellationToken) -> BoxStream<'static, ChatEvent> {
        let body = self.compile(&request);
        let http_request = self
            .endpoint
            .client
            .post(self.endpoint.url("responses"))
            .bearer_auth(self.api_key.expose())
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(&body);
        drive(
            WireCall {
                request: http_request,
                decoder: Box::new(self.decoder(estimate::request_tokens(&request))),
                idle_timeout: self.endpoint.idle_timeout,
                probe: self.endpoint.probe.clone(),
                context: ErrorContext {
                    provider: self.endpoint.name.clone(),
                    secret: Some(self.api_key.clone()),
                },
            },
            cancel,
        )
    }
}

fn compile(request: &ChatRequest) -> Value {
    let capabilities = openai_capabilities(&request.model);
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        body.insert("instructions".into(), json!(system));
    }
    let mut input = Vec::new();
    for message in &request.messages {
        compile_message(message, &mut input);
    }
    body.insert("input".into(), Value::Array(input));
    body.insert("stream".into(), json!(true));
    // History lives in the caller's journal, never on the server.
    body.insert("store".into(), json!(false));
    if capabilities.reasoning {
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                    "strict": false,
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &request.tool_choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Tool(name) => json!({"type": "function", "name": name}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(max) = request.max_output_tokens {
        body.insert("max_output_tokens".into(), json!(max));
    }
    if let Some(temperature) = request.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    if let Some(schema) = request.response_schema.as_ref().filter(|_| capabilities.native_schema) {
        body.insert(
            "text".into(),
            json!({"format": {
                "type": "json_schema",
                "name": "response",
                "schema": schema,
                "strict": strict_compatible(schema),
            }}),
        );
    }
    if let Some(effort) = request.effort.as_ref().filter(|_| capabilities.reasoning) {
        body.insert("reasoning".into(), json!({"effort": effort}));
    }
    Value::Object(body)
}

fn compile_message(message: &Message, out: &mut Vec<Value>) {
    match message.role {
        Role::User => {
            for part in &message.parts {
                if let Part::ToolResult { content, .. } = part {
                    out.push(json!({"type": "function_call_output", "call_id": part.wire_tool_id(), "output": content}));
                }
            }
            let text = message.text();
            if !text.is_empty() {
                out.push(json!({"role": "user", "content": text}));
            }
        }
        Role::Assistant => {
            let mut text = String::new();
            let flush = |text: &mut String, out: &mut Vec<Value>| {
                if !text.is_empty() {
                    out.push(json!({"role": "assistant", "content": std::mem::take(text)}));
                }
            };
            for part in &message.parts {
                match part {
                    Part::Text(more) => text.push_str(more),
                    Part::ToolCall { name, arguments, .. } => {
                        flush(&mut text, out);
                        out.push(json!({
                            "type": "function_call",
                            "call_id": part.wire_tool_id(),
                            "name": name,
                            "arguments": arguments.to_string(),
                        }));
                    }
                    Part::ProviderRaw { provider, data }
                        if provider == FAMILY
                            && data.get("type").and_then(Value::as_str) != Some("refusal") =>
                    {
                        flush(&mut text, out);
                        out.push(data.clone());
                    }
                    _ => {}
                }
            }
            flush(&mut text, out);
        }
    }
}

/// Decodes one Responses API event stream into canonical events.
#[derive(Debug)]
pub struct ResponsesDecoder {
    context: ErrorContext,
    input_estimate: u64,
    output_chars: usize,
    /// Function calls by item id.
    calls: HashMap<String, Call>,
    /// Item ids by output index, for events that carry only the index.
    item_ids: HashMap<u64, String>,
    saw_tool_call: bool,
    refusal: String,
}

#[derive(Debug)]
struct Call {
    wire_id: String,
    name: String,
    arguments: String,
    ended: bool,
}

impl ResponsesDecoder {
    /// A decoder whose errors name `provider`.
    pub fn new(provider: &str, input_estimate: u64) -> ResponsesDecoder {
        ResponsesDecoder {
            context: ErrorContext { provider: provider.to_owned(), secret: None },
            input_estimate,
            output_chars: 0,
            calls: HashMap::new(),
            item_ids: HashMap::new(),
            saw_tool_call: false,
            refusal: String::new(),
        }
    }

    fn item_id(&self, value: &Value) -> Option<String> {
        if let Some(id) = value.get("item_id").and_then(Value::as_str) {
            return Some(id.to_owned());
        }
        value.get("output_index").and_then(Value::as_u64).and_then(|i| self.item_ids.get(&i).cloned())
    }

    fn item_added(&mut self, value: &Value, out: &mut Vec<ChatEvent>) {
        let item = value.get("item").unwrap_or(&Value::Null);
        if item.get("type").and_then(Value::as_str) != Some("function_call") {
            return;
        }
        let id = item_key(item, value);
        let call = Call {
            wire_id: item.get("call_id").and_then(Value::as_str).unwrap_or(&id).to_owned(),
            name: item.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
            arguments: item.get("arguments").and_then(Value::as_str).unwrap_or_default().to_owned(),
            ended: false,
        };
        self.output_chars += call.name.chars().count() + call.arguments.chars().count();
        out.push(ChatEvent::ToolCallStart { wire_id: call.wire_id.clone(), name: call.name.clone() });
        if let Some(index) = value.get("output_index").and_then(Value::as_u64) {
            self.item_ids.insert(index, id.clone());
        }
        self.calls.insert(id, call);
    }

    fn item_done(&mut self, value: &Value, out: &mut Vec<ChatEvent>) {
        let item = value.get("item").unwrap_or(&Value::Null);
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                let id = item_key(item, value);
                if !self.calls.contains_key(&id) {
                    self.item_added(value, out);
                }
                let Some(call) = self.calls.get_mut(&id) else { return };
                if call.ended {
                    return;
                }
                call.ended = true;
                if let Some(arguments) = item.get("arguments").and_then(Value::as_str) {
                    call.arguments = arguments.to_owned();
                }
                let arguments = if call.arguments.trim().is_empty() {
                    json!({})
                } else {
                    match serde_json::from_str::<Value>(&call.arguments) {
                        Ok(arguments) => arguments,
                        // A model mistake, not a transport fault (see `ToolCallInvalid`).
                        Err(err) => {
                            self.saw_tool_call = true;
                            out.push(ChatEvent::ToolCallInvalid {
                                wire_id: call.wire_id.clone(),
                                name: call.name.clone(),
                                raw_arguments: call.arguments.clone(),
                                error: err.to_string(),
                            });
                            return;
                        }
                    }
                };
                self.saw_tool_call = true;
                out.push(ChatEvent::ToolCallEnd {
                    wire_id: call.wire_id.clone(),
                    name: call.name.clone(),
                    arguments,
                });
            }
            // Text arrived as deltas; a message item adds nothing.
            Some("message") | None => {}
            // Reasoning (with encrypted content) and server-side tool items: kept for replay.
            Some(_) => out.push(ChatEvent::ProviderRaw { provider: FAMILY.into(), data: item.clone() }),
        }
    }

    fn finish(&mut self, response: &Value, incomplete: bool, out: &mut Vec<ChatEvent>) {
        let reason = if incomplete {
            match response.pointer("/incomplete_details/reason").and_then(Value::as_str) {
                Some("max_output_tokens") => FinishReason::Length,
                Some("content_filter") => FinishReason::ContentFilter,
                Some(other) => FinishReason::Other(other.to_owned()),
                None => FinishReason::Other("incomplete".to_owned()),
            }
        } else if !self.refusal.is_empty() {
            out.push(ChatEvent::ProviderRaw {
                provider: FAMILY.into(),
                data: json!({"type": "refusal", "refusal": self.refusal}),
            });
            FinishReason::Refusal
        } else if self.saw_tool_call {
            FinishReason::ToolUse
        } else {
            FinishReason::Stop
        };
        let usage = match response.get("usage").filter(|u| u.is_object()) {
            Some(usage) => parse_usage(usage),
            None => Usage {
                input_tokens: self.input_estimate,
                output_tokens: estimate::tokens_for_chars(self.output_chars),
                approximate: true,
                ..Usage::default()
            },
        };
        out.push(ChatEvent::Finish { reason, usage });
    }
}

/// The key of an item: its id, else its output index.
fn item_key(item: &Value, event: &Value) -> String {
    match item.get("id").and_then(Value::as_str) {
        Some(id) => id.to_owned(),
        None => format!("#{}", event.get("output_index").and_then(Value::as_u64).unwrap_or_default()),
    }
}

/// Normalizes a Responses usage object: `input_tokens` is already the full prompt (cached
/// reads and writes are subsets), `output_tokens` includes reasoning.
fn parse_usage(usage: &Value) -> Usage {
    let field = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input_tokens: field("/input_tokens"),
        output_tokens: field("/output_tokens"),
        cache_read_tokens: field("/input_tokens_details/cached_tokens"),
        cache_write_tokens: field("/input_tokens_details/cache_write_tokens"),
        reasoning_tokens: field("/output_tokens_details/reasoning_tokens"),
        approximate: false,
    }
}

impl StreamDecoder for ResponsesDecoder {
    fn on_event(&mut self, event: &SseEvent, out: &mut Vec<ChatEvent>) {
        let value: Value = match serde_json::from_str(&event.data) {
            Ok(value) => value,
            Err(err) => {
                out.push(ChatEvent::Error(truncated(&format!(
                    "{}: malformed json in event {:?}: {err}",
                    self.context.provider, event.event
                ))));
                return;
            }
        };
        let kind = value.get("type").and_then(Value::as_str).unwrap_or(event.event.as_str());
        let delta = || value.get("delta").and_then(Value::as_str).unwrap_or_default();
        match kind {
            "response.output_item.added" => self.item_added(&value, out),
            "response.output_item.done" => self.item_done(&value, out),
            "response.function_call_arguments.delta" => {
                let fragment = delta();
                let Some(call) = self.item_id(&value).and_then(|id| self.calls.get_mut(&id)) else { return };
                if !fragment.is_empty() && !call.ended {
                    self.output_chars += fragment.chars().count();
                    call.arguments.push_str(fragment);
                    out.push(ChatEvent::ToolCallDelta {
                        wire_id: call.wire_id.clone(),
                        arguments_delta: fragment.to_owned(),
                    });
                }
            }
            "response.function_call_arguments.done" => {
                let arguments = value.get("arguments").and_then(Value::as_str).map(str::to_owned);
                if let (Some(call), Some(arguments)) =
                    (self.item_id(&value).and_then(|id| self.calls.get_mut(&id)), arguments)
                {
                    call.arguments = arguments;
                }
            }
            "response.output_text.delta" => {
                let text = delta();
                if !text.is_empty() {
                    self.output_chars += text.chars().count();
                    out.push(ChatEvent::TextDelta(text.to_owned()));
                }
            }
            "response.refusal.delta" => {
                self.output_chars += delta().chars().count();
                self.refusal.push_str(delta());
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let text = delta();
                if !text.is_empty() {
                    self.output_chars += text.chars().count();
                    out.push(ChatEvent::ReasoningDelta(text.to_owned()));
                }
            }
            "response.completed" => self.finish(value.get("response").unwrap_or(&Value::Null), false, out),
            "response.incomplete" => self.finish(value.get("response").unwrap_or(&Value::Null), true, out),
            "response.failed" => {
                // A failed response still bills what it used, and says so: report it before
                // the error, so the turn is charged the provider's figure, not an estimate.
                if let Some(usage) = value.pointer("/response/usage").filter(|u| u.is_object()) {
                    out.push(ChatEvent::Usage(parse_usage(usage)));
                }
                let error = value.pointer("/response/error").cloned().unwrap_or(Value::Null);
                out.push(ChatEvent::Error(classify_stream_error(&self.context, &error)));
            }
            "error" => out.push(ChatEvent::Error(classify_stream_error(&self.context, &value))),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolSpec;

    #[test]
    fn broken_tool_json_is_a_model_mistake_with_its_raw_text() {
        let events: Vec<Value> = vec![
            json!({"type": "response.created", "response": {"id": "r", "status": "in_progress", "usage": null}}),
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": ""}}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": "{\"a\":"}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{\"a\":"}}),
            json!({"type": "response.completed", "response": {"id": "r", "status": "completed", "usage": {"input_tokens": 9, "output_tokens": 5, "total_tokens": 14}}}),
        ];
        let body: String =
            events.iter().map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap())).collect();
        let events = crate::provider::decode_sse(&mut ResponsesDecoder::new("openai", 0), body.as_bytes());
        assert!(
            events.iter().any(|e| matches!(e, ChatEvent::ToolCallInvalid { wire_id, raw_arguments, .. }
                if wire_id == "call_1" && raw_arguments == "{\"a\":")),
            "{events:?}"
        );
        assert!(!events.iter().any(|e| matches!(e, ChatEvent::Error(_))), "{events:?}");
        assert!(
            matches!(events.last(), Some(ChatEvent::Finish { reason: FinishReason::ToolUse, usage }) if usage.output_tokens == 5),
            "{events:?}"
        );
    }

    #[test]
    fn compiles_stateless_history() {
        let reasoning = json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "abc", "summary": []});
        let mut request = ChatRequest::new(
            "gpt-5",
            vec![
                Message::user("q"),
                Message {
                    role: Role::Assistant,
                    parts: vec![
                        Part::ProviderRaw { provider: "openai".into(), data: reasoning.clone() },
                        Part::ProviderRaw { provider: "anthropic".into(), data: json!({"type": "thinking"}) },
                        Part::text("let me look"),
                        Part::ToolCall {
                            id: "c1".into(),
                            wire_id: Some("call_9".into()),
                            name: "f".into(),
                            arguments: json!({}),
                        },
                    ],
                },
                Message {
                    role: Role::User,
                    parts: vec![Part::ToolResult {
                        id: "c1".into(),
                        wire_id: Some("call_9".into()),
                        content: "42".into(),
                        is_error: false,
                    }],
                },
            ],
        );
        request.system = Some("sys".into());
        request.tools = vec![ToolSpec {
            name: "f".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        }];
        request.effort = Some("high".into());
        request.max_output_tokens = Some(64);
        let body = compile(&request);
        assert_eq!(body["store"], false);
        assert_eq!(body["instructions"], "sys");
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(body["reasoning"], json!({"effort": "high"}));
        assert_eq!(body["max_output_tokens"], 64);
        let input = body["input"].as_array().unwrap();
        assert_eq!(input[0], json!({"role": "user", "content": "q"}));
        assert_eq!(input[1], reasoning);
        assert_eq!(input[2], json!({"role": "assistant", "content": "let me look"}));
        assert_eq!(
            input[3],
            json!({"type": "function_call", "call_id": "call_9", "name": "f", "arguments": "{}"})
        );
        assert_eq!(input[4], json!({"type": "function_call_output", "call_id": "call_9", "output": "42"}));
        assert_eq!(input.len(), 5);
    }
}

//! The Anthropic Messages API adapter (`POST /v1/messages`, streamed).
//!
//! Request compilation maps canonical parts to content blocks (tool results first in a user
//! turn, as the API requires), replays `ProviderRaw` blocks tagged `anthropic` verbatim (thinking
//! blocks keep their signatures) and drops other providers' blocks, and puts `cache_control`
//! breakpoints on the system prompt and the last tool so a long agent loop pays for its fixed
//! prefix once.
//!
//! Stream decoding follows the wire's own accounting: `message_start` opens a message (a second
//! `message_start` with the same id is a duplicate and ignored; one with another id means two
//! responses were spliced, a transport fault), `message_delta.usage` is cumulative and replaces
//! every field it carries (it may replace `input_tokens` too), and the normalized input counts
//! cache reads and writes.

use std::collections::BTreeMap;
use std::fmt;

use futures::stream::BoxStream;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::http::{self, ApiKey, Endpoint, ErrorContext, classify_stream_error, endpoint_builders};
use super::sse::SseEvent;
use super::stream::{StreamDecoder, WireCall, drive, truncated};
use super::{Capabilities, ChatEvent, ChatRequest, FinishReason, Part, Provider, Role, ToolChoice};
use crate::{Error, Usage};

/// The provider family tag on Anthropic's `ProviderRaw` blocks.
pub const FAMILY: &str = "anthropic";

/// The adapter for Anthropic's Messages API.
#[derive(Clone)]
pub struct AnthropicProvider {
    endpoint: Endpoint,
    api_key: ApiKey,
    default_max_tokens: u32,
}

impl AnthropicProvider {
    /// The public endpoint.
    pub const DEFAULT_BASE_URL: &'static str = "https://api.anthropic.com";
    /// The `anthropic-version` header sent with every request.
    pub const API_VERSION: &'static str = "2023-06-01";
    /// The output cap sent when a request sets none (the API requires one).
    pub const DEFAULT_MAX_TOKENS: u32 = 8192;

    /// An adapter named "anthropic" at the public endpoint, with `api_key`.
    ///
    /// # Errors
    /// `internal` if the HTTP client cannot be built.
    pub fn new(api_key: ApiKey) -> Result<AnthropicProvider, Error> {
        Ok(AnthropicProvider {
            endpoint: Endpoint::new(FAMILY, AnthropicProvider::DEFAULT_BASE_URL)?,
            api_key,
            default_max_tokens: AnthropicProvider::DEFAULT_MAX_TOKENS,
        })
    }

    /// An adapter keyed from `ANTHROPIC_API_KEY`, at `ANTHROPIC_BASE_URL` when that is set.
    ///
    /// # Errors
    /// `config` when the key is missing.
    pub fn from_env() -> Result<AnthropicProvider, Error> {
        let provider = AnthropicProvider::new(ApiKey::from_env("ANTHROPIC_API_KEY")?)?;
        Ok(match http::base_url_from_env("ANTHROPIC_BASE_URL") {
            Some(url) => provider.with_base_url(url),
            None => provider,
        })
    }

    endpoint_builders!(
        AnthropicProvider,
        "Sends requests to `base_url` (without the `/v1/messages` path) instead."
    );

    /// Sets the output cap sent when a request sets none.
    pub fn with_default_max_tokens(mut self, max_tokens: u32) -> AnthropicProvider {
        self.default_max_tokens = max_tokens;
        self
    }

    /// The request body for `request`: a pure function of it (no ids, no clock), so identical
    /// requests compile to identical bytes.
    pub fn compile(&self, request: &ChatRequest) -> Value {
        compile(request, self.default_max_tokens)
    }

    /// A fresh decoder for one response stream.
    pub fn decoder(&self) -> AnthropicDecoder {
        AnthropicDecoder::new(&self.endpoint.name)
    }

    fn error_context(&self) -> ErrorContext {
        ErrorContext { provider: self.endpoint.name.clone(), secret: Some(self.api_key.clone()) }
    }
}

impl fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("AnthropicProvider");
        self.endpoint.debug_fields(&mut s, &self.api_key);
        s.finish_non_exhaustive()
    }
}

impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    fn capabilities(&self, model: &str) -> Capabilities {
        capabilities(model)
    }

    fn stream(&self, request: ChatRequest, cancel: CancellationToken) -> BoxStream<'static, ChatEvent> {
        let body = self.compile(&request);
        let http_request = self
            .endpoint
            .client
            .post(self.endpoint.url("v1/messages"))
            .header("x-api-key", self.api_key.expose())
            .header("anthropic-version", AnthropicProvider::API_VERSION)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(&body);
        drive(
            WireCall {
                request: http_request,
                decoder: Box::new(self.decoder()),
                idle_timeout: self.endpoint.idle_timeout,
                probe: self.endpoint.probe.clone(),
                context: self.error_context(),
            },
            cancel,
        )
    }
}

/// What a Claude model supports, by name. Unknown (newer) names get everything: declaring
/// less would silently cost a capability tier on every future model.
fn capabilities(model: &str) -> Capabilities {
    let old = model.starts_with("claude-2") || model.starts_with("claude-instant");
    let claude3 = model.starts_with("claude-3");
    // Native structured output arrived with the 4.5 generation (and Opus 4.1).
    let pre_schema = claude3
        || model.starts_with("claude-sonnet-4-0")
        || model.starts_with("claude-sonnet-4-2025")
        || model.starts_with("claude-opus-4-0")
        || model.starts_with("claude-opus-4-2025");
    Capabilities {
        native_schema: !old && !pre_schema,
        tools: !old,
        reasoning: !old && (!claude3 || model.starts_with("claude-3-7")),
    }
}

fn compile(request: &ChatRequest, default_max_tokens: u32) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("max_tokens".into(), json!(request.max_output_tokens.unwrap_or(default_max_tokens)));
    body.insert("stream".into(), json!(true));
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        body.insert(
            "system".into(),
            json!([{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]),
        );
    }
    let messages: Vec<Value> = request.messages.iter().filter_map(compile_message).collect();
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let last = request.tools.len() - 1;
        let tools: Vec<Value> = request
            .tools
            .iter()
            .enumerate()
            .map(|(i, tool)| {
                let mut spec = json!({
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.parameters,
                });
                if i == last {
                    spec["cache_control"] = json!({"type": "ephemeral"});
                }
                spec
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &request.tool_choice {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(temperature) = request.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    let mut output_config = Map::new();
    if let Some(effort) = &request.effort {
        output_config.insert("effort".into(), json!(effort));
    }
    if let Some(schema) = &request.response_schema {
        output_config.insert("format".into(), json!({"type": "json_schema", "schema": schema}));
    }
    if !output_config.is_empty() {
        body.insert("output_config".into(), Value::Object(output_config));
    }
    Value::Object(body)
}

fn compile_message(message: &super::Message) -> Option<Value> {
    let mut content = Vec::new();
    match message.role {
        Role::User => {
            // The API requires tool results to lead a user turn.
            for part in &message.parts {
                if let Part::ToolResult { content: text, is_error, .. } = part {
                    let mut block = json!({
                        "type": "tool_result",
                        "tool_use_id": part.wire_tool_id(),
                        "content": text,
                    });
                    if *is_error {
                        block["is_error"] = json!(true);
                    }
                    content.push(block);
                }
            }
            for part in &message.parts {
                match part {
                    Part::Text(text) if !text.is_empty() => {
                        content.push(json!({"type": "text", "text": text}))
                    }
                    Part::ProviderRaw { provider, data } if provider == FAMILY => content.push(data.clone()),
                    _ => {}
                }
            }
        }
        Role::Assistant => {
            for part in &message.parts {
                match part {
                    Part::Text(text) if !text.is_empty() => {
                        content.push(json!({"type": "text", "text": text}))
                    }
                    Part::ToolCall { name, arguments, .. } => content.push(json!({
                        "type": "tool_use",
                        "id": part.wire_tool_id(),
                        "name": name,
                        "input": arguments,
                    })),
                    Part::ProviderRaw { provider, data } if provider == FAMILY => content.push(data.clone()),
                    _ => {}
                }
            }
        }
    }
    if content.is_empty() {
        return None;
    }
    let role = match message.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    Some(json!({"role": role, "content": content}))
}

/// Decodes one Anthropic Messages event stream into canonical events.
#[derive(Debug)]
pub struct AnthropicDecoder {
    context: ErrorContext,
    /// The id of the open message, between `message_start` and `message_stop`.
    message_id: Option<String>,
    usage: WireUsage,
    stop_reason: Option<String>,
    /// Content blocks being streamed, by index.
    blocks: BTreeMap<u64, Block>,
}

#[derive(Debug)]
enum Block {
    Text,
    /// A thinking block: its text and signature accumulate, and the whole block is kept for replay.
    Thinking {
        block: Value,
        thinking: String,
        signature: String,
    },
    /// A client tool call.
    Tool {
        wire_id: String,
        name: String,
        json: String,
        initial: Value,
    },
    /// Anything else (server tool use and results, redacted thinking, compaction, fallback):
    /// kept whole for replay, its deltas merged in.
    Raw {
        block: Value,
        json: String,
    },
}

/// Anthropic's usage fields, each replaced by the latest value seen.
#[derive(Debug, Default, Clone, Copy)]
struct WireUsage {
    input: u64,
    cache_write: u64,
    cache_read: u64,
    output: u64,
    thinking: u64,
}

impl WireUsage {
    fn apply(&mut self, usage: &Value) {
        let field = |key: &str| usage.get(key).and_then(Value::as_u64);
        if let Some(n) = field("input_tokens") {
            self.input = n;
        }
        if let Some(n) = field("cache_creation_input_tokens") {
            self.cache_write = n;
        }
        if let Some(n) = field("cache_read_input_tokens") {
            self.cache_read = n;
        }
        if let Some(n) = field("output_tokens") {
            self.output = n;
        }
        if let Some(n) = usage.pointer("/output_tokens_details/thinking_tokens").and_then(Value::as_u64) {
            self.thinking = n;
        }
    }

    fn normalized(&self) -> Usage {
        Usage {
            input_tokens: self.input.saturating_add(self.cache_write).saturating_add(self.cache_read),
            output_tokens: self.output,
            cache_read_tokens: self.cache_read,
            cache_write_tokens: self.cache_write,
            reasoning_tokens: self.thinking,
            approximate: false,
        }
    }
}

impl AnthropicDecoder {
    /// A decoder whose errors name the provider `provider`.
    pub fn new(provider: &str) -> AnthropicDecoder {
        AnthropicDecoder {
            context: ErrorContext { provider: provider.to_owned(), secret: None },
            message_id: None,
            usage: WireUsage::default(),
            stop_reason: None,
            blocks: BTreeMap::new(),
        }
    }

    fn message_start(&mut self, value: &Value, out: &mut Vec<ChatEvent>) {
        let message = value.get("message").unwrap_or(&Value::Null);
        let id = message.get("id").and_then(Value::as_str).unwrap_or_default().to_owned();
        if let Some(open) = &self.message_id {
            if *open == id {
                return;
            }
            out.push(ChatEvent::Error(truncated(&format!(
                "{}: message {id} started while message {open} was still open",
                self.context.provider
            ))));
            return;
        }
        self.message_id = Some(id);
        if let Some(usage) = message.get("usage") {
            self.usage.apply(usage);
        }
        if let Some(reason) = message.get("stop_reason").and_then(Value::as_str) {
            self.stop_reason = Some(reason.to_owned());
        }
        // A message may arrive already complete (a server-side tool loop handing back a call).
        if let Some(content) = message.get("content").and_then(Value::as_array) {
            for block in content {
                self.whole_block(block, out);
            }
        }
        out.push(ChatEvent::Usage(self.usage.normalized()));
    }

    /// Emits a block that arrived complete.
    fn whole_block(&mut self, block: &Value, out: &mut Vec<ChatEvent>) {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(text) = block.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                    out.push(ChatEvent::TextDelta(text.to_owned()));
                }
            }
            Some("thinking") => {
                if let Some(text) = block.get("thinking").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                    out.push(ChatEvent::ReasoningDelta(text.to_owned()));
                }
                out.push(ChatEvent::ProviderRaw { provider: FAMILY.into(), data: block.clone() });
            }
            Some("tool_use") => {
                let wire_id = block.get("id").and_then(Value::as_str).unwrap_or_default().to_owned();
                let name = block.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
                let arguments = block.get("input").cloned().unwrap_or_else(|| json!({}));
                out.push(ChatEvent::ToolCallStart { wire_id: wire_id.clone(), name: name.clone() });
                out.push(ChatEvent::ToolCallEnd { wire_id, name, arguments });
            }
            _ => out.push(ChatEvent::ProviderRaw { provider: FAMILY.into(), data: block.clone() }),
        }
    }

    fn block_start(&mut self, value: &Value, out: &mut Vec<ChatEvent>) {
        let index = value.get("index").and_then(Value::as_u64).unwrap_or_default();
        let block = value.get("content_block").cloned().unwrap_or(Value::Null);
        let state = match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(text) = block.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                    out.push(ChatEvent::TextDelta(text.to_owned()));
                }
                Block::Text
            }
            Some("thinking") => {
                let thinking = block.get("thinking").and_then(Value::as_str).unwrap_or_default().to_owned();
                if !thinking.is_empty() {
                    out.push(ChatEvent::ReasoningDelta(thinking.clone()));
                }
                let signature = block.get("signature").and_then(Value::as_str).unwrap_or_default().to_owned();
                Block::Thinking { block, thinking, signature }
            }
            Some("tool_use") => {
                let wire_id = block.get("id").and_then(Value::as_str).unwrap_or_default().to_owned();
                let name = block.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
                out.push(ChatEvent::ToolCallStart { wire_id: wire_id.clone(), name: name.clone() });
                let initial = block.get("input").cloned().unwrap_or_else(|| json!({}));
                Block::Tool { wire_id, name, json: String::new(), initial }
            }
            _ => Block::Raw { block, json: String::new() },
        };
        self.blocks.insert(index, state);
    }

    fn block_delta(&mut self, value: &Value, out: &mut Vec<ChatEvent>) {
        let index = value.get("index").and_then(Value::as_u64).unwrap_or_default();
        let delta = value.get("delta").unwrap_or(&Value::Null);
        let text_field = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or_default();
        let kind = delta.get("type").and_then(Value::as_str).unwrap_or_default();
        let block = self.blocks.entry(index).or_insert(Block::Text);
        match (kind, block) {
            ("text_delta", _) => {
                let text = text_field("text");
                if !text.is_empty() {
                    out.push(ChatEvent::TextDelta(text.to_owned()));
                }
            }
            ("thinking_delta", Block::Thinking { thinking, .. }) => {
                let text = text_field("thinking");
                if !text.is_empty() {
                    thinking.push_str(text);
                    out.push(ChatEvent::ReasoningDelta(text.to_owned()));
                }
            }
            ("signature_delta", Block::Thinking { signature, .. }) => {
                signature.push_str(text_field("signature"))
            }
            ("input_json_delta", Block::Tool { wire_id, json, .. }) => {
                let fragment = text_field("partial_json");
                if !fragment.is_empty() {
                    json.push_str(fragment);
                    out.push(ChatEvent::ToolCallDelta {
                        wire_id: wire_id.clone(),
                        arguments_delta: fragment.to_owned(),
                    });
                }
            }
            ("input_json_delta", Block::Raw { json, .. }) => json.push_str(text_field("partial_json")),
            (_, Block::Raw { block, .. }) => merge_delta(block, delta),
            // Citations on text and anything unknown carry nothing canonical.
            _ => {}
        }
    }

    fn block_stop(&mut self, value: &Value, out: &mut Vec<ChatEvent>) {
        let index = value.get("index").and_then(Value::as_u64).unwrap_or_default();
        match self.blocks.remove(&index) {
            None | Some(Block::Text) => {}
            Some(Block::Thinking { mut block, thinking, signature }) => {
                block["thinking"] = json!(thinking);
                block["signature"] = json!(signature);
                out.push(ChatEvent::ProviderRaw { provider: FAMILY.into(), data: block });
            }
            Some(Block::Tool { wire_id, name, json, initial }) => {
                let arguments = if json.trim().is_empty() {
                    initial
                } else {
                    match serde_json::from_str::<Value>(&json) {
                        Ok(arguments) => arguments,
                        // A model mistake, not a transport fault (see `ToolCallInvalid`).
                        Err(err) => {
                            out.push(ChatEvent::ToolCallInvalid {
                                wire_id,
                                name,
                                raw_arguments: json,
                                error: err.to_string(),
                            });
                            return;
                        }
                    }
                };
                out.push(ChatEvent::ToolCallEnd { wire_id, name, arguments });
            }
            Some(Block::Raw { mut block, json }) => {
                if !json.trim().is_empty()
                    && let Ok(input) = serde_json::from_str::<Value>(&json)
                {
                    block["input"] = input;
                }
                out.push(ChatEvent::ProviderRaw { provider: FAMILY.into(), data: block });
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<ChatEvent>) {
        if self.stop_reason.is_none() {
            out.push(ChatEvent::Error(super::stream::incomplete(&self.context.provider)));
            return;
        }
        let reason = match self.stop_reason.as_deref() {
            Some("end_turn" | "stop_sequence") => FinishReason::Stop,
            Some("max_tokens") => FinishReason::Length,
            Some("tool_use") => FinishReason::ToolUse,
            Some("refusal") => FinishReason::Refusal,
            Some("pause_turn") => FinishReason::PauseTurn,
            Some(other) => FinishReason::Other(other.to_owned()),
            None => FinishReason::Other("unknown".to_owned()),
        };
        self.message_id = None;
        out.push(ChatEvent::Finish { reason, usage: self.usage.normalized() });
    }
}

/// Merges a delta into a raw block: string fields append, others replace.
fn merge_delta(block: &mut Value, delta: &Value) {
    let (Some(block), Some(delta)) = (block.as_object_mut(), delta.as_object()) else { return };
    for (key, value) in delta {
        if key == "type" {
            continue;
        }
        match (block.get_mut(key), value) {
            (Some(Value::String(existing)), Value::String(more)) => existing.push_str(more),
            _ => {
                block.insert(key.clone(), value.clone());
            }
        }
    }
}

impl StreamDecoder for AnthropicDecoder {
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
        match kind {
            "message_start" => self.message_start(&value, out),
            "content_block_start" => self.block_start(&value, out),
            "content_block_delta" => self.block_delta(&value, out),
            "content_block_stop" => self.block_stop(&value, out),
            "message_delta" => {
                if let Some(reason) = value.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(usage) = value.get("usage") {
                    self.usage.apply(usage);
                    out.push(ChatEvent::Usage(self.usage.normalized()));
                }
            }
            "message_stop" => self.finish(out),
            "error" => out.push(ChatEvent::Error(classify_stream_error(&self.context, &value))),
            // ping and event types added later carry nothing canonical.
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{Message, ToolSpec};

    #[test]
    fn compiles_history_with_tools_cache_and_raw_blocks() {
        let thinking = json!({"type": "thinking", "thinking": "hmm", "signature": "sig"});
        let mut request = ChatRequest::new(
            "claude-sonnet-4-5",
            vec![
                Message::user("weather in paris?"),
                Message {
                    role: Role::Assistant,
                    parts: vec![
                        Part::ProviderRaw { provider: "anthropic".into(), data: thinking.clone() },
                        Part::ProviderRaw { provider: "openai".into(), data: json!({"type": "reasoning"}) },
                        Part::text("checking"),
                        Part::ToolCall {
                            id: "c1".into(),
                            wire_id: Some("toolu_1".into()),
                            name: "get_weather".into(),
                            arguments: json!({"city": "Paris"}),
                        },
                        Part::ToolCall {
                            id: "c2".into(),
                            wire_id: None,
                            name: "noop".into(),
                            arguments: json!({}),
                        },
                    ],
                },
                Message {
                    role: Role::User,
                    parts: vec![
                        Part::text("and then?"),
                        Part::ToolResult {
                            id: "c1".into(),
                            wire_id: Some("toolu_1".into()),
                            content: "sunny".into(),
                            is_error: false,
                        },
                        Part::ToolResult {
                            id: "c2".into(),
                            wire_id: None,
                            content: "boom".into(),
                            is_error: true,
                        },
                    ],
                },
            ],
        );
        request.system = Some("be brief".into());
        request.tools = vec![
            ToolSpec {
                name: "get_weather".into(),
                description: "weather".into(),
                parameters: json!({"type": "object"}),
            },
            ToolSpec {
                name: "noop".into(),
                description: "nothing".into(),
                parameters: json!({"type": "object"}),
            },
        ];
        request.tool_choice = ToolChoice::Required;
        request.effort = Some("high".into());
        request.response_schema = Some(json!({"type": "object"}));
        let body = compile(&request, 1024);
        assert_eq!(body["max_tokens"], 1024);
        assert_eq!(body["stream"], true);
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        assert!(body["tools"][0].get("cache_control").is_none());
        assert_eq!(body["tools"][1]["cache_control"]["type"], "ephemeral");
        assert_eq!(body["tool_choice"], json!({"type": "any"}));
        assert_eq!(
            body["output_config"],
            json!({"effort": "high", "format": {"type": "json_schema", "schema": {"type": "object"}}})
        );
        let assistant = &body["messages"][1]["content"];
        assert_eq!(assistant[0], thinking);
        assert_eq!(assistant[1], json!({"type": "text", "text": "checking"}));
        assert_eq!(assistant[2]["id"], "toolu_1");
        assert_eq!(assistant[3]["id"], "c2");
        assert_eq!(assistant.as_array().unwrap().len(), 4);
        let user = &body["messages"][2]["content"];
        assert_eq!(user[0], json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}));
        assert_eq!(
            user[1],
            json!({"type": "tool_result", "tool_use_id": "c2", "content": "boom", "is_error": true})
        );
        assert_eq!(user[2], json!({"type": "text", "text": "and then?"}));
        assert!(body.get("temperature").is_none());
    }

    fn decode(events: &[Value]) -> Vec<ChatEvent> {
        let body: String =
            events.iter().map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap())).collect();
        crate::provider::decode_sse(&mut AnthropicDecoder::new("anthropic"), body.as_bytes())
    }

    fn start(usage: Value) -> Value {
        json!({"type": "message_start", "message": {"id": "m1", "content": [], "usage": usage}})
    }

    #[test]
    fn pause_turn_redacted_thinking_and_running_usage() {
        let events = decode(&[
            start(json!({"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 1})),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "redacted_thinking", "data": "opaque"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"query\":\"x\"}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "pause_turn"}, "usage": {"output_tokens": 7}}),
            json!({"type": "message_stop"}),
        ]);
        let raws: Vec<&Value> = events
            .iter()
            .filter_map(|e| if let ChatEvent::ProviderRaw { data, .. } = e { Some(data) } else { None })
            .collect();
        assert_eq!(raws[0], &json!({"type": "redacted_thinking", "data": "opaque"}));
        assert_eq!(
            raws[1],
            &json!({"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "x"}})
        );
        // Server tools are the provider's to run: no canonical tool call.
        assert!(!events.iter().any(|e| matches!(e, ChatEvent::ToolCallStart { .. })));
        let usages: Vec<u64> = events
            .iter()
            .filter_map(|e| if let ChatEvent::Usage(u) = e { Some(u.output_tokens) } else { None })
            .collect();
        assert_eq!(usages, [1, 7]);
        let usage = Usage { input_tokens: 100, output_tokens: 7, cache_read_tokens: 90, ..Usage::default() };
        assert_eq!(events.last(), Some(&ChatEvent::Finish { reason: FinishReason::PauseTurn, usage }));
    }

    #[test]
    fn error_events_and_broken_tool_json_are_typed() {
        let events = decode(&[
            start(json!({"input_tokens": 1})),
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
        ]);
        assert!(
            matches!(events.last(), Some(ChatEvent::Error(e)) if e.code == crate::ErrorCode::ProviderRateLimit && e.retryable)
        );
        let events = decode(&[
            start(json!({"input_tokens": 1})),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"a\":"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 6}}),
            json!({"type": "message_stop"}),
        ]);
        // Broken tool JSON is the model's mistake, carried with its raw text, and the turn ends
        // normally with its usage.
        assert!(
            events.iter().any(|e| matches!(e, ChatEvent::ToolCallInvalid { wire_id, raw_arguments, .. }
                if wire_id == "t1" && raw_arguments == "{\"a\":")),
            "{events:?}"
        );
        assert!(!events.iter().any(|e| matches!(e, ChatEvent::Error(_))), "{events:?}");
        assert!(
            matches!(events.last(), Some(ChatEvent::Finish { reason: FinishReason::ToolUse, usage }) if usage.output_tokens == 6),
            "{events:?}"
        );
    }

    #[test]
    fn a_message_stop_without_a_stop_reason_is_an_incomplete_stream() {
        let events = decode(&[
            start(json!({"input_tokens": 1})),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_stop"}),
        ]);
        let Some(ChatEvent::Error(error)) = events.last() else { panic!("{events:?}") };
        assert_eq!((error.code, error.retryable), (crate::ErrorCode::ProviderUnavailable, true));
        assert!(error.message.contains("incomplete stream"), "{error:?}");
    }

    #[test]
    fn capabilities_by_model() {
        assert!(capabilities("claude-sonnet-4-5-20250929").native_schema);
        assert!(!capabilities("claude-3-5-haiku-latest").native_schema);
        assert!(!capabilities("claude-3-5-haiku-latest").reasoning);
        assert!(capabilities("claude-3-7-sonnet-latest").reasoning);
        assert!(capabilities("claude-3-haiku-20240307").tools);
    }
}

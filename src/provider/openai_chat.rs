//! The OpenAI Chat Completions adapter (`POST /chat/completions`, streamed), also the engine of
//! the OpenAI-compatible adapter.
//!
//! Tool calls arrive as indexed deltas (several in parallel, the id and name usually only in
//! the first one, though some servers repeat them); they are assembled per index and ended when
//! the choice's `finish_reason` arrives. A refusal streams in its own `refusal` field and ends
//! as [`FinishReason::Refusal`], not as an error. Usage comes from the chunk with `choices: []`
//! that `stream_options.include_usage` adds; `prompt_tokens` already includes cached tokens, and
//! reasoning tokens are counted inside `completion_tokens` by OpenAI but outside it by some
//! compatible servers (xAI), which the total shows. When a server reports no usage at all
//! (llama.cpp never does), usage is estimated from text lengths and marked approximate.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use futures::stream::BoxStream;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::estimate;
use super::http::{self, ApiKey, Endpoint, ErrorContext, classify_stream_error, endpoint_builders};
use super::sse::SseEvent;
use super::stream::{StreamDecoder, WireCall, drive, truncated};
use super::{Capabilities, ChatEvent, ChatRequest, FinishReason, Message, Part, Provider, Role, ToolChoice};
use crate::{Error, Usage};

/// The adapter for OpenAI's Chat Completions API.
#[derive(Clone)]
pub struct OpenAiChatProvider {
    endpoint: Endpoint,
    api_key: Option<ApiKey>,
    dialect: Dialect,
    capabilities: Option<Capabilities>,
}

/// The wire differences between OpenAI itself and compatible servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dialect {
    /// OpenAI renamed `max_tokens` to `max_completion_tokens`; most compatible servers know only the old name.
    pub(crate) max_tokens_field: &'static str,
    /// Whether to ask for the final usage chunk.
    pub(crate) include_usage: bool,
    /// Whether structured output is asked for as `{"type": "json_object", "schema": ...}`, the
    /// form llama.cpp servers constrain decoding with (llama-cpp-python accepts no other),
    /// rather than OpenAI's `json_schema`.
    pub(crate) schema_as_json_object: bool,
}

impl Dialect {
    pub(crate) const OPENAI: Dialect = Dialect {
        max_tokens_field: "max_completion_tokens",
        include_usage: true,
        schema_as_json_object: false,
    };
    pub(crate) const COMPATIBLE: Dialect =
        Dialect { max_tokens_field: "max_tokens", include_usage: true, schema_as_json_object: true };
}

impl OpenAiChatProvider {
    /// The public endpoint (the `/chat/completions` path is appended).
    pub const DEFAULT_BASE_URL: &'static str = "https://api.openai.com/v1";

    /// An adapter named "openai" at the public endpoint, with `api_key`.
    ///
    /// # Errors
    /// `internal` if the HTTP client cannot be built.
    pub fn new(api_key: ApiKey) -> Result<OpenAiChatProvider, Error> {
        OpenAiChatProvider::build(
            "openai",
            OpenAiChatProvider::DEFAULT_BASE_URL,
            Some(api_key),
            Dialect::OPENAI,
        )
    }

    /// An adapter keyed from `OPENAI_API_KEY`, at `OPENAI_BASE_URL` when that is set.
    ///
    /// # Errors
    /// `config` when the key is missing.
    pub fn from_env() -> Result<OpenAiChatProvider, Error> {
        let provider = OpenAiChatProvider::new(ApiKey::from_env("OPENAI_API_KEY")?)?;
        Ok(match http::base_url_from_env("OPENAI_BASE_URL") {
            Some(url) => provider.with_base_url(url),
            None => provider,
        })
    }

    pub(crate) fn build(
        name: &str,
        base_url: &str,
        api_key: Option<ApiKey>,
        dialect: Dialect,
    ) -> Result<OpenAiChatProvider, Error> {
        Ok(OpenAiChatProvider {
            endpoint: Endpoint::new(name, base_url)?,
            api_key,
            dialect,
            capabilities: None,
        })
    }

    endpoint_builders!(
        OpenAiChatProvider,
        "Sends requests to `base_url` (up to and including `/v1`) instead."
    );

    /// Declares the capabilities of every model behind this adapter, instead of the built-in table.
    pub fn with_capabilities(mut self, capabilities: Capabilities) -> OpenAiChatProvider {
        self.capabilities = Some(capabilities);
        self
    }

    pub(crate) fn with_key(mut self, key: ApiKey) -> OpenAiChatProvider {
        self.api_key = Some(key);
        self
    }

    pub(crate) fn with_include_usage(mut self, include_usage: bool) -> OpenAiChatProvider {
        self.dialect.include_usage = include_usage;
        self
    }

    /// The request body for `request`: a pure function of it.
    pub fn compile(&self, request: &ChatRequest) -> Value {
        compile(request, self.dialect, self.model_capabilities(&request.model))
    }

    /// A fresh decoder for one response stream; `input_estimate` is the prompt-token estimate
    /// used only if the server reports no usage.
    pub fn decoder(&self, input_estimate: u64) -> ChatDecoder {
        ChatDecoder::new(&self.endpoint.name, input_estimate)
    }

    fn model_capabilities(&self, model: &str) -> Capabilities {
        self.capabilities.unwrap_or_else(|| openai_capabilities(model))
    }

    pub(crate) fn debug_fields(&self, f: &mut fmt::DebugStruct<'_, '_>) {
        self.endpoint.debug_fields(f, &self.api_key);
    }
}

impl fmt::Debug for OpenAiChatProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("OpenAiChatProvider");
        self.debug_fields(&mut s);
        s.finish_non_exhaustive()
    }
}

impl Provider for OpenAiChatProvider {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    fn capabilities(&self, model: &str) -> Capabilities {
        self.model_capabilities(model)
    }

    fn stream(&self, request: ChatRequest, cancel: CancellationToken) -> BoxStream<'static, ChatEvent> {
        let body = self.compile(&request);
        let mut http_request = self
            .endpoint
            .client
            .post(self.endpoint.url("chat/completions"))
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(&body);
        if let Some(key) = &self.api_key {
            http_request = http_request.bearer_auth(key.expose());
        }
        drive(
            WireCall {
                request: http_request,
                decoder: Box::new(self.decoder(estimate::request_tokens(&request))),
                idle_timeout: self.endpoint.idle_timeout,
                probe: self.endpoint.probe.clone(),
                context: ErrorContext { provider: self.endpoint.name.clone(), secret: self.api_key.clone() },
            },
            cancel,
        )
    }
}

/// What an OpenAI model supports, by name.
pub(crate) fn openai_capabilities(model: &str) -> Capabilities {
    let reasoning = ["o1", "o3", "o4", "gpt-5"].iter().any(|prefix| model.starts_with(prefix));
    let legacy = model.starts_with("gpt-3.5") || model == "gpt-4" || model.starts_with("gpt-4-");
    Capabilities { native_schema: !legacy && model != "o1-mini", tools: true, reasoning }
}

/// Whether a schema satisfies OpenAI's strict mode: every object closes its properties and
/// requires all of them. Strict mode is asked for only then, so a schema outside it is still
/// sent (best effort) instead of being rejected with a 400.
pub(crate) fn strict_compatible(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            let is_object =
                map.get("type").and_then(Value::as_str) == Some("object") || map.contains_key("properties");
            if is_object && map.get("additionalProperties") != Some(&Value::Bool(false)) {
                return false;
            }
            if let Some(Value::Object(properties)) = map.get("properties") {
                let required: Vec<&str> = map
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if properties.keys().any(|key| !required.contains(&key.as_str())) {
                    return false;
                }
            }
            map.values().all(strict_compatible)
        }
        Value::Array(items) => items.iter().all(strict_compatible),
        _ => true,
    }
}

fn compile(request: &ChatRequest, dialect: Dialect, capabilities: Capabilities) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    let mut messages = Vec::new();
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in &request.messages {
        compile_message(message, &mut messages);
    }
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), json!(true));
    if dialect.include_usage {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({"type": "function", "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                }})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &request.tool_choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(max) = request.max_output_tokens {
        body.insert(dialect.max_tokens_field.into(), json!(max));
    }
    if let Some(temperature) = request.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    if let Some(schema) = request.response_schema.as_ref().filter(|_| capabilities.native_schema) {
        let format = if dialect.schema_as_json_object {
            json!({"type": "json_object", "schema": schema})
        } else {
            json!({"type": "json_schema", "json_schema": {
                "name": "response",
                "schema": schema,
                "strict": strict_compatible(schema),
            }})
        };
        body.insert("response_format".into(), format);
    }
    if let Some(effort) = request.effort.as_ref().filter(|_| capabilities.reasoning) {
        body.insert("reasoning_effort".into(), json!(effort));
    }
    Value::Object(body)
}

fn compile_message(message: &Message, out: &mut Vec<Value>) {
    match message.role {
        Role::User => {
            // Tool results answer the previous assistant turn, so they come first.
            for part in &message.parts {
                if let Part::ToolResult { content, .. } = part {
                    out.push(
                        json!({"role": "tool", "tool_call_id": part.wire_tool_id(), "content": content}),
                    );
                }
            }
            let text = message.text();
            if !text.is_empty() {
                out.push(json!({"role": "user", "content": text}));
            }
        }
        Role::Assistant => {
            let text = message.text();
            let calls: Vec<Value> = message
                .parts
                .iter()
                .filter_map(|part| match part {
                    Part::ToolCall { name, arguments, .. } => Some(json!({
                        "id": part.wire_tool_id(),
                        "type": "function",
                        "function": {"name": name, "arguments": arguments.to_string()},
                    })),
                    _ => None,
                })
                .collect();
            if text.is_empty() && calls.is_empty() {
                return;
            }
            let mut assistant = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
            if !calls.is_empty() {
                assistant["tool_calls"] = Value::Array(calls);
            }
            out.push(assistant);
        }
    }
}

/// Decodes one Chat Completions event stream into canonical events.
#[derive(Debug)]
pub struct ChatDecoder {
    context: ErrorContext,
    /// The prompt-token estimate, used only if the server reports no usage.
    input_estimate: u64,
    /// Characters generated so far (text, reasoning, refusal, tool calls), for the estimate.
    output_chars: usize,
    calls: BTreeMap<u64, Call>,
    finish_reason: Option<String>,
    refusal: String,
    usage: Option<Usage>,
    /// Whether any tool call ended (a `stop` with tool calls is a tool-use turn).
    saw_tool_call: bool,
}

#[derive(Debug, Default)]
struct Call {
    wire_id: Option<String>,
    name: String,
    arguments: String,
    started: bool,
}

impl ChatDecoder {
    /// A decoder whose errors name `provider`; `input_estimate` stands in for prompt tokens if
    /// the server reports no usage.
    pub fn new(provider: &str, input_estimate: u64) -> ChatDecoder {
        ChatDecoder {
            context: ErrorContext { provider: provider.to_owned(), secret: None },
            input_estimate,
            output_chars: 0,
            calls: BTreeMap::new(),
            finish_reason: None,
            refusal: String::new(),
            usage: None,
            saw_tool_call: false,
        }
    }

    fn chunk(&mut self, value: &Value, out: &mut Vec<ChatEvent>) {
        if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
            out.push(ChatEvent::Error(classify_stream_error(&self.context, error)));
            return;
        }
        if let Some(choices) = value.get("choices").and_then(Value::as_array) {
            for choice in choices {
                // Only the first choice is the turn; a request never asks for more.
                if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                    continue;
                }
                if let Some(delta) = choice.get("delta") {
                    self.delta(delta, out);
                }
                if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                    self.end_calls(reason, out);
                    if out.last().is_some_and(ChatEvent::is_terminal) {
                        return;
                    }
                    self.finish_reason = Some(reason.to_owned());
                }
            }
        }
        if let Some(usage) = value.get("usage").filter(|u| u.is_object()) {
            let usage = parse_usage(usage);
            self.usage = Some(usage);
            out.push(ChatEvent::Usage(usage));
        }
    }

    fn delta(&mut self, delta: &Value, out: &mut Vec<ChatEvent>) {
        if let Some(text) = delta.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            self.output_chars += text.chars().count();
            out.push(ChatEvent::TextDelta(text.to_owned()));
        }
        for key in ["reasoning_content", "reasoning"] {
            if let Some(text) = delta.get(key).and_then(Value::as_str).filter(|t| !t.is_empty()) {
                self.output_chars += text.chars().count();
                out.push(ChatEvent::ReasoningDelta(text.to_owned()));
            }
        }
        if let Some(text) = delta.get("refusal").and_then(Value::as_str) {
            self.output_chars += text.chars().count();
            self.refusal.push_str(text);
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for (position, call) in calls.iter().enumerate() {
                let index = call.get("index").and_then(Value::as_u64).unwrap_or(position as u64);
                self.call_delta(index, call, out);
            }
        }
    }

    fn call_delta(&mut self, index: u64, delta: &Value, out: &mut Vec<ChatEvent>) {
        let call = self.calls.entry(index).or_default();
        if call.wire_id.is_none()
            && let Some(id) = delta.get("id").and_then(Value::as_str).filter(|id| !id.is_empty())
        {
            call.wire_id = Some(id.to_owned());
        }
        // Some servers repeat the name in every delta: it is set once, never appended.
        if call.name.is_empty()
            && let Some(name) = delta.pointer("/function/name").and_then(Value::as_str)
        {
            call.name = name.to_owned();
            self.output_chars += name.chars().count();
        }
        let fragment = delta.pointer("/function/arguments").and_then(Value::as_str).unwrap_or_default();
        self.output_chars += fragment.chars().count();
        call.arguments.push_str(fragment);
        if !call.started && !call.name.is_empty() {
            call.started = true;
            let wire_id = call.wire_id.get_or_insert_with(|| format!("call_{index}")).clone();
            out.push(ChatEvent::ToolCallStart { wire_id: wire_id.clone(), name: call.name.clone() });
            if !call.arguments.is_empty() {
                out.push(ChatEvent::ToolCallDelta { wire_id, arguments_delta: call.arguments.clone() });
            }
        } else if call.started && !fragment.is_empty() {
            let wire_id = call.wire_id.clone().unwrap_or_default();
            out.push(ChatEvent::ToolCallDelta { wire_id, arguments_delta: fragment.to_owned() });
        }
    }

    /// Ends every open tool call: the choice finished, so their arguments are complete.
    fn end_calls(&mut self, reason: &str, out: &mut Vec<ChatEvent>) {
        for (index, call) in std::mem::take(&mut self.calls) {
            let wire_id = call.wire_id.unwrap_or_else(|| format!("call_{index}"));
            if !call.started {
                if call.name.is_empty() {
                    continue;
                }
                out.push(ChatEvent::ToolCallStart { wire_id: wire_id.clone(), name: call.name.clone() });
            }
            let arguments = if call.arguments.trim().is_empty() {
                json!({})
            } else {
                match serde_json::from_str::<Value>(&call.arguments) {
                    Ok(arguments) => arguments,
                    // Cut off by the output cap: the call never completed; the finish says why.
                    Err(_) if reason == "length" => continue,
                    // A model mistake, not a transport fault: the agent answers it with an
                    // error tool result naming the parse error.
                    Err(err) => {
                        self.saw_tool_call = true;
                        out.push(ChatEvent::ToolCallInvalid {
                            wire_id,
                            name: call.name,
                            raw_arguments: call.arguments,
                            error: err.to_string(),
                        });
                        continue;
                    }
                }
            };
            self.saw_tool_call = true;
            out.push(ChatEvent::ToolCallEnd { wire_id, name: call.name, arguments });
        }
    }

    fn finish(&mut self, out: &mut Vec<ChatEvent>) {
        if self.finish_reason.is_none() {
            out.push(ChatEvent::Error(super::stream::incomplete(&self.context.provider)));
            return;
        }
        let reason = self.finish_reason.clone().unwrap_or_default();
        self.end_calls(&reason, out);
        if out.last().is_some_and(ChatEvent::is_terminal) {
            return;
        }
        let reason = match reason.as_str() {
            _ if !self.refusal.is_empty() => {
                out.push(ChatEvent::ProviderRaw {
                    provider: self.context.provider.clone(),
                    data: json!({"type": "refusal", "refusal": self.refusal}),
                });
                FinishReason::Refusal
            }
            "stop" | "eos" if self.saw_tool_call => FinishReason::ToolUse,
            "stop" | "eos" => FinishReason::Stop,
            "length" => FinishReason::Length,
            "tool_calls" | "function_call" => FinishReason::ToolUse,
            "content_filter" => FinishReason::ContentFilter,
            "" => FinishReason::Other("unknown".to_owned()),
            other => FinishReason::Other(other.to_owned()),
        };
        let usage = self.usage.unwrap_or_else(|| Usage {
            input_tokens: self.input_estimate,
            output_tokens: estimate::tokens_for_chars(self.output_chars),
            approximate: true,
            ..Usage::default()
        });
        out.push(ChatEvent::Finish { reason, usage });
    }
}

/// The common chunk shape: text or reasoning deltas and nothing else. Fields that would need the
/// general path (tool calls, refusals, a finish, usage, an error) are only checked for presence.
#[derive(Deserialize)]
struct TextChunk<'a> {
    #[serde(borrow, default)]
    choices: Vec<TextChoice<'a>>,
    #[serde(default)]
    usage: Option<IgnoredAny>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct TextChoice<'a> {
    #[serde(default)]
    index: u64,
    #[serde(borrow, default)]
    delta: Option<TextDeltaWire<'a>>,
    #[serde(default)]
    finish_reason: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct TextDeltaWire<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default)]
    refusal: Option<IgnoredAny>,
    #[serde(default)]
    tool_calls: Option<IgnoredAny>,
}

impl TextChunk<'_> {
    fn is_plain_text(&self) -> bool {
        self.usage.is_none()
            && self.error.is_none()
            && self.choices.iter().all(|choice| {
                choice.finish_reason.is_none()
                    && choice.delta.as_ref().is_none_or(|d| d.refusal.is_none() && d.tool_calls.is_none())
            })
    }
}

impl ChatDecoder {
    /// The fast path: the same events [`ChatDecoder::chunk`] yields for a plain text chunk.
    fn text_chunk(&mut self, chunk: &TextChunk<'_>, out: &mut Vec<ChatEvent>) {
        for choice in chunk.choices.iter().filter(|c| c.index == 0) {
            let Some(delta) = &choice.delta else { continue };
            if let Some(text) = delta.content.as_deref().filter(|t| !t.is_empty()) {
                self.output_chars += text.chars().count();
                out.push(ChatEvent::TextDelta(text.to_owned()));
            }
            for text in [&delta.reasoning_content, &delta.reasoning].into_iter().flatten() {
                if !text.is_empty() {
                    self.output_chars += text.chars().count();
                    out.push(ChatEvent::ReasoningDelta(text.clone().into_owned()));
                }
            }
        }
    }
}

/// Normalizes a Chat Completions usage object.
///
/// `prompt_tokens` includes cached tokens (`prompt_tokens_details.cached_tokens` is a subset).
/// OpenAI counts reasoning inside `completion_tokens`; xAI counts it outside, which its
/// `total_tokens` (prompt + completion + reasoning) reveals. The total is never assumed to be
/// prompt + completion.
pub(crate) fn parse_usage(usage: &Value) -> Usage {
    let field = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
    let prompt = field("/prompt_tokens");
    let completion = field("/completion_tokens");
    let reasoning = field("/completion_tokens_details/reasoning_tokens");
    let total = usage.get("total_tokens").and_then(Value::as_u64);
    let reasoning_outside = reasoning > 0
        && (total == Some(prompt + completion + reasoning) || (total.is_none() && reasoning > completion));
    Usage {
        input_tokens: prompt,
        output_tokens: if reasoning_outside { completion + reasoning } else { completion },
        cache_read_tokens: field("/prompt_tokens_details/cached_tokens"),
        cache_write_tokens: 0,
        reasoning_tokens: reasoning,
        approximate: false,
    }
}

impl StreamDecoder for ChatDecoder {
    fn on_event(&mut self, event: &SseEvent, out: &mut Vec<ChatEvent>) {
        let data = event.data.trim();
        if data == "[DONE]" {
            return self.finish(out);
        }
        if data.is_empty() {
            return;
        }
        // Most chunks carry one text delta: decode those without building a `Value`.
        if let Ok(chunk) = serde_json::from_str::<TextChunk<'_>>(data)
            && chunk.is_plain_text()
        {
            return self.text_chunk(&chunk, out);
        }
        match serde_json::from_str::<Value>(data) {
            Ok(value) => self.chunk(&value, out),
            Err(err) => out.push(ChatEvent::Error(truncated(&format!(
                "{}: malformed json in a stream chunk: {err}",
                self.context.provider
            )))),
        }
    }

    fn on_end(&mut self, out: &mut Vec<ChatEvent>) {
        // The choice finished but `[DONE]` never came: the answer is complete, so keep it
        // (with estimated usage if the usage chunk was lost too) rather than pay for it twice.
        if self.finish_reason.is_some() {
            self.finish(out);
        }
    }

    fn on_json_body(&mut self, body: &[u8], out: &mut Vec<ChatEvent>) {
        let value: Value = match serde_json::from_slice(body) {
            Ok(value) => value,
            Err(err) => {
                out.push(ChatEvent::Error(truncated(&format!(
                    "{}: malformed json response: {err}",
                    self.context.provider
                ))));
                return;
            }
        };
        if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
            out.push(ChatEvent::Error(classify_stream_error(&self.context, error)));
            return;
        }
        // A whole completion: replay it as one big delta.
        let choice = value.pointer("/choices/0").cloned().unwrap_or(Value::Null);
        if let Some(message) = choice.get("message") {
            let mut delta = message.clone();
            if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for (index, call) in calls.iter_mut().enumerate() {
                    call["index"] = json!(index);
                }
            }
            self.delta(&delta, out);
        }
        let reason = choice.get("finish_reason").and_then(Value::as_str).unwrap_or("stop").to_owned();
        self.finish_reason = Some(reason);
        if let Some(usage) = value.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(parse_usage(usage));
        }
        self.finish(out);
    }
}

#[cfg(test)]
mod tests;

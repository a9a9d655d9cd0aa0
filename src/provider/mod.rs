//! The provider layer: the canonical request and event vocabulary every model call speaks, the
//! [`Provider`] trait, and the adapters that translate it to real wire dialects.
//!
//! The engine and the agent loop only ever see [`ChatRequest`] going in and a stream of
//! [`ChatEvent`] coming out. Each adapter absorbs its provider's quirks (wire ids, streamed JSON
//! tool arguments, usage conventions, error shapes) so nothing above this layer knows who served
//! the tokens. Adapters are split in two halves: a pure request compiler and a [`StreamDecoder`]
//! that turns server-sent events into canonical events. The decoder runs on bytes without HTTP,
//! which is how recorded real streams test it.
//!
//! Shipped adapters: [`anthropic::AnthropicProvider`] (Messages API),
//! [`openai_chat::OpenAiChatProvider`] (Chat Completions), [`openai_responses::OpenAiResponsesProvider`]
//! (Responses API), [`openai_compatible::OpenAiCompatibleProvider`] (Chat Completions at any base
//! URL: Ollama, vLLM, llama.cpp) and the offline [`echo::EchoProvider`]. [`cassette`] records a
//! provider's exchanges and replays them with no network.

pub mod anthropic;
pub mod cassette;
pub mod echo;
mod estimate;
mod http;
pub mod openai_chat;
pub mod openai_compatible;
pub mod openai_responses;
mod probe;
pub mod sse;
mod stream;
mod window;

use std::fmt;

use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::{Error, Usage};

pub(crate) use echo::split_deltas as split_text_deltas;
pub(crate) use estimate::plain_request_tokens as estimate_plain_request_tokens;
pub(crate) use estimate::request_tokens as estimate_request_tokens;
pub(crate) use estimate::text_tokens as estimate_text_tokens;
pub(crate) use estimate::tokens_for_chars as estimate_tokens_for_chars;
pub(crate) use estimate::weight as estimate_weight;
pub use http::ApiKey;
pub(crate) use http::parse_base_url;
pub(crate) use probe::AttemptProbe;
pub(crate) use stream::cancelled as cancelled_error;
pub use stream::{StreamDecoder, decode_sse};
pub use window::WithContextWindow;

/// A model provider: turns one [`ChatRequest`] into a stream of [`ChatEvent`]s.
///
/// Implementations are cheap to share (`Arc<dyn Provider>`); credentials and the endpoint are
/// fixed at construction. Adapters never retry: the core owns retries, backoff and failover, so
/// every attempt is visible to the journal and the budget.
pub trait Provider: Send + Sync + fmt::Debug {
    /// The provider's name, the part before ':' in a model ref ("anthropic", "openai", "echo", ...).
    fn name(&self) -> &str;

    /// What a model of this provider supports (native structured output, tools, ...).
    fn capabilities(&self, model: &str) -> Capabilities;

    /// The context window of `model` in tokens (prompt and output together), when known: as
    /// declared for the provider (`context_window` in cairn.toml, [`WithContextWindow`]) or
    /// reported by it. `None` when unknown. The planner writes for a small window with a
    /// compact card.
    fn context_window(&self, _model: &str) -> Option<u64> {
        None
    }

    /// Starts one model turn. Connection happens inside the stream; the stream yields
    /// exactly one terminal event (Finish or Error) and then ends. Dropping the stream or
    /// cancelling `cancel` severs the HTTP stream at once. Adapters never retry.
    ///
    /// # Cancel safety
    /// Cancelling `cancel` ends the stream with `Error` of code [`crate::ErrorCode::Cancelled`]
    /// as its terminal event; dropping the stream ends it with nothing further.
    fn stream(&self, request: ChatRequest, cancel: CancellationToken) -> BoxStream<'static, ChatEvent>;
}

/// One model turn's input, in the canonical, provider-neutral form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The provider-local model name (the part after ':' in a model ref).
    pub model: String,
    /// The system prompt: authored text only, never untrusted input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The conversation so far, oldest first.
    pub messages: Vec<Message>,
    /// Tools the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Whether and which tool the model must call.
    #[serde(default)]
    pub tool_choice: ToolChoice,
    /// The output cap for this turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// Sampling temperature, where the model accepts one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Requests native structured output (a JSON Schema) where the provider supports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<serde_json::Value>,
    /// Reasoning effort (`low`, `medium`, `high`, ...), passed to providers that take one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// Telemetry about the call; adapters ignore it, the fake provider matches on it.
    #[serde(default)]
    pub meta: CallMeta,
}

/// Who is making a call, for telemetry and test matching; never sent on the wire.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallMeta {
    /// The call's label, if the workflow gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The agent type (profile name) making the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_type: Option<String>,
}

/// One message of a conversation: a role and ordered parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote the message.
    pub role: Role,
    /// The content, in order; order is preserved on the wire in both directions.
    pub parts: Vec<Part>,
}

/// The author of a [`Message`]. Tool results travel in user messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The caller (prompts, tool results).
    User,
    /// The model.
    Assistant,
}

/// One piece of a [`Message`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// Plain text.
    Text(String),
    /// A tool call the model made.
    ToolCall {
        /// The engine-minted id; stable across providers.
        id: String,
        /// The id the provider used on the wire, when the call came from a provider.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wire_id: Option<String>,
        /// The tool's name.
        name: String,
        /// The parsed arguments.
        arguments: serde_json::Value,
    },
    /// The result of a tool call, sent back to the model.
    ToolResult {
        /// The engine-minted id of the call this answers.
        id: String,
        /// The wire id of the call this answers, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wire_id: Option<String>,
        /// The result text.
        content: String,
        /// Whether the tool failed.
        #[serde(default)]
        is_error: bool,
    },
    /// An opaque provider block (e.g. an Anthropic thinking block with its signature): replayed
    /// byte-exact only to the provider that produced it, dropped for others.
    ProviderRaw {
        /// The provider family that produced the block ("anthropic", "openai").
        provider: String,
        /// The block, exactly as the provider sent it.
        data: serde_json::Value,
    },
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// The JSON Schema of the tool's arguments.
    pub parameters: serde_json::Value,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// The model must not call tools.
    None,
    /// The model must call some tool.
    Required,
    /// The model must call this tool.
    Tool(String),
}

/// One event of a model turn's stream.
///
/// A stream carries any number of non-terminal events and then exactly one terminal event,
/// [`ChatEvent::Finish`] or [`ChatEvent::Error`]. Tool-call events carry the provider's wire id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatEvent {
    /// The provider accepted the request: its response began (a success status arrived).
    /// From here it bills the prompt whatever happens to the stream, so the call's ledger
    /// counts the attempt as begun even when no content follows (an OpenAI stream's role
    /// chunk decodes to nothing). Carries nothing for the workflow.
    Opened,
    /// The request was sent (or may have been) and no response status came back: a stall
    /// waiting for the headers past the idle timeout, or a transport error after the
    /// connection was made. The provider may have run the request and billed it in full, so the
    /// call's ledger charges the attempt its whole grant. Always followed by the terminal
    /// [`ChatEvent::Error`]; a refused request (an HTTP error status, a failed connect) never
    /// carries it. Carries nothing for the workflow.
    Unanswered,
    /// A piece of the answer text.
    TextDelta(String),
    /// A piece of visible reasoning (thinking, a reasoning summary).
    ReasoningDelta(String),
    /// A tool call begins.
    ToolCallStart {
        /// The provider's id of the call.
        wire_id: String,
        /// The tool's name.
        name: String,
    },
    /// A fragment of a tool call's JSON arguments.
    ToolCallDelta {
        /// The provider's id of the call.
        wire_id: String,
        /// The next fragment of the JSON text.
        arguments_delta: String,
    },
    /// A tool call is complete, with its parsed arguments.
    ToolCallEnd {
        /// The provider's id of the call.
        wire_id: String,
        /// The tool's name.
        name: String,
        /// The parsed arguments.
        arguments: serde_json::Value,
    },
    /// A tool call is complete but its arguments are not valid JSON: a model mistake (not a
    /// transport fault), answered with an error tool result so the model can correct itself.
    ToolCallInvalid {
        /// The provider's id of the call.
        wire_id: String,
        /// The tool's name.
        name: String,
        /// The argument text exactly as the model wrote it.
        raw_arguments: String,
        /// Why it does not parse.
        error: String,
    },
    /// An opaque provider block to keep in the history (see [`Part::ProviderRaw`]).
    ProviderRaw {
        /// The provider family ("anthropic", "openai").
        provider: String,
        /// The block, exactly as received.
        data: serde_json::Value,
    },
    /// Usage so far, for live budget cuts; the terminal event carries the authoritative totals.
    Usage(Usage),
    /// The turn ended normally.
    Finish {
        /// Why the model stopped.
        reason: FinishReason,
        /// The turn's usage.
        usage: Usage,
    },
    /// The turn failed.
    Error(Error),
}

/// Why a model turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end or a stop sequence.
    Stop,
    /// The output cap was reached.
    Length,
    /// The model called tools and waits for their results.
    ToolUse,
    /// A content filter cut the output.
    ContentFilter,
    /// The model refused; the refusal is an outcome, not an error.
    Refusal,
    /// The provider paused a long server-side turn; send the turn back to continue it.
    PauseTurn,
    /// A reason cairn does not model, as the provider named it.
    Other(String),
}

/// Why an agent call's last model turn ended, as its provider said: the closed set an agent
/// result and its journal entry carry (`finish_reason`), mapped from OpenAI's
/// `finish_reason`, Anthropic's `stop_reason` and the Responses API's status by the adapters'
/// [`FinishReason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// A natural end or a stop sequence (`stop`, `end_turn`, `stop_sequence`, `completed`).
    Stop,
    /// The output cap was reached (`length`, `max_tokens`, `incomplete` for
    /// `max_output_tokens`): the answer was cut off.
    Length,
    /// The model called tools (`tool_calls`, `tool_use`).
    ToolUse,
    /// A content filter cut the output.
    ContentFilter,
    /// The model refused.
    Refusal,
    /// The provider paused a long server-side turn.
    PauseTurn,
    /// The stream ended or broke off without a finish reason (llama.cpp's answer to a request
    /// that arrives while it is busy: a role chunk, then `[DONE]`): an incomplete answer, never
    /// an empty one.
    Incomplete,
    /// A reason cairn does not model.
    Other,
}

impl From<&FinishReason> for StopReason {
    fn from(reason: &FinishReason) -> StopReason {
        match reason {
            FinishReason::Stop => StopReason::Stop,
            FinishReason::Length => StopReason::Length,
            FinishReason::ToolUse => StopReason::ToolUse,
            FinishReason::ContentFilter => StopReason::ContentFilter,
            FinishReason::Refusal => StopReason::Refusal,
            FinishReason::PauseTurn => StopReason::PauseTurn,
            FinishReason::Other(_) => StopReason::Other,
        }
    }
}

impl StopReason {
    /// The wire name (`stop`, `length`, `incomplete`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Stop => "stop",
            StopReason::Length => "length",
            StopReason::ToolUse => "tool_use",
            StopReason::ContentFilter => "content_filter",
            StopReason::Refusal => "refusal",
            StopReason::PauseTurn => "pause_turn",
            StopReason::Incomplete => "incomplete",
            StopReason::Other => "other",
        }
    }
}

/// What a model of a provider supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Capabilities {
    /// The provider can be asked for output matching a JSON Schema.
    pub native_schema: bool,
    /// The model can call tools.
    pub tools: bool,
    /// The model reasons before answering (and may take an effort).
    pub reasoning: bool,
}

impl ChatRequest {
    /// A request for `model` over `messages`, with every option at its neutral value.
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> ChatRequest {
        ChatRequest {
            model: model.into(),
            system: None,
            messages,
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            max_output_tokens: None,
            temperature: None,
            response_schema: None,
            effort: None,
            meta: CallMeta::default(),
        }
    }

    /// The text of the last user message that has any, or `None`.
    pub fn last_user_text(&self) -> Option<String> {
        self.messages.iter().rev().filter(|m| m.role == Role::User).find_map(|m| {
            let text = m.text();
            (!text.is_empty()).then_some(text)
        })
    }
}

impl Message {
    /// A user message holding one text part.
    pub fn user(text: impl Into<String>) -> Message {
        Message { role: Role::User, parts: vec![Part::text(text)] }
    }

    /// An assistant message holding one text part.
    pub fn assistant(text: impl Into<String>) -> Message {
        Message { role: Role::Assistant, parts: vec![Part::text(text)] }
    }

    /// The message's text parts, joined with newlines.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::Text(text) => Some(text.as_str()),
                _ => None,
            })
            .collect();
        texts.join("\n")
    }
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Part {
        Part::Text(text.into())
    }

    /// The id to put on the wire for a tool call or result: the wire id if the call came from
    /// a provider, else the engine's id.
    pub fn wire_tool_id(&self) -> Option<&str> {
        match self {
            Part::ToolCall { id, wire_id, .. } | Part::ToolResult { id, wire_id, .. } => {
                Some(wire_id.as_deref().unwrap_or(id))
            }
            _ => None,
        }
    }
}

impl ChatEvent {
    /// A text delta.
    pub fn text(text: impl Into<String>) -> ChatEvent {
        ChatEvent::TextDelta(text.into())
    }

    /// Whether this event ends the stream.
    pub fn is_terminal(&self) -> bool {
        matches!(self, ChatEvent::Finish { .. } | ChatEvent::Error(_))
    }
}

impl FinishReason {
    /// The snake_case name, for logs and cassettes.
    pub fn as_str(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolUse => "tool_use",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::Refusal => "refusal",
            FinishReason::PauseTurn => "pause_turn",
            FinishReason::Other(other) => other,
        }
    }
}

impl Capabilities {
    /// Everything supported.
    pub const ALL: Capabilities = Capabilities { native_schema: true, tools: true, reasoning: true };
    /// What an unknown OpenAI-compatible endpoint is assumed to support: tools, nothing else.
    pub const CONSERVATIVE: Capabilities =
        Capabilities { native_schema: false, tools: true, reasoning: false };
}

#[cfg(test)]
mod tests;

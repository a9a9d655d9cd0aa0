//! L1: the provider seam. PROVISIONAL copy of the contract; replaced by the provider work.

use futures::stream::BoxStream;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::Usage;

/// A model provider.
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// The provider's name.
    fn name(&self) -> &str;
    /// What a model supports.
    fn capabilities(&self, model: &str) -> Capabilities;
    /// Starts one model turn.
    fn stream(&self, request: ChatRequest, cancel: CancellationToken) -> BoxStream<'static, ChatEvent>;
}

/// One model turn's request.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    /// Provider-local model name.
    pub model: String,
    /// Authored system text.
    pub system: Option<String>,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Tools offered.
    pub tools: Vec<ToolSpec>,
    /// Tool choice.
    pub tool_choice: ToolChoice,
    /// Output cap.
    pub max_output_tokens: Option<u32>,
    /// Temperature.
    pub temperature: Option<f32>,
    /// Native structured output schema.
    pub response_schema: Option<Value>,
    /// Reasoning effort.
    pub effort: Option<String>,
    /// Metadata adapters ignore.
    pub meta: CallMeta,
}

/// Metadata for fakes and logs.
#[derive(Debug, Clone, Default)]
pub struct CallMeta {
    /// Label.
    pub label: Option<String>,
    /// Agent type.
    pub agent_type: Option<String>,
}

/// A message.
#[derive(Debug, Clone)]
pub struct Message {
    /// Role.
    pub role: Role,
    /// Parts.
    pub parts: Vec<Part>,
}

/// A role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// User.
    User,
    /// Assistant.
    Assistant,
}

/// A message part.
#[derive(Debug, Clone)]
pub enum Part {
    /// Text.
    Text(String),
    /// A tool call.
    ToolCall {
        /// Engine id.
        id: String,
        /// Wire id.
        wire_id: Option<String>,
        /// Name.
        name: String,
        /// Arguments.
        arguments: Value,
    },
    /// A tool result.
    ToolResult {
        /// Engine id.
        id: String,
        /// Wire id.
        wire_id: Option<String>,
        /// Content.
        content: String,
        /// Error flag.
        is_error: bool,
    },
    /// Provider-specific raw data.
    ProviderRaw {
        /// Provider.
        provider: String,
        /// Data.
        data: Value,
    },
}

/// A tool offered to the model.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

/// Tool choice.
#[derive(Debug, Clone, Default)]
pub enum ToolChoice {
    /// Auto.
    #[default]
    Auto,
    /// None.
    None,
    /// Required.
    Required,
    /// A named tool.
    Tool(String),
}

/// One stream event.
#[derive(Debug, Clone)]
pub enum ChatEvent {
    /// Text delta.
    TextDelta(String),
    /// Reasoning delta.
    ReasoningDelta(String),
    /// Tool call start.
    ToolCallStart {
        /// Wire id.
        wire_id: String,
        /// Name.
        name: String,
    },
    /// Tool call arguments delta.
    ToolCallDelta {
        /// Wire id.
        wire_id: String,
        /// Delta.
        arguments_delta: String,
    },
    /// Tool call end.
    ToolCallEnd {
        /// Wire id.
        wire_id: String,
        /// Name.
        name: String,
        /// Arguments.
        arguments: Value,
    },
    /// Raw provider data.
    ProviderRaw {
        /// Provider.
        provider: String,
        /// Data.
        data: Value,
    },
    /// Running usage.
    Usage(Usage),
    /// Terminal: finished.
    Finish {
        /// Reason.
        reason: FinishReason,
        /// Usage.
        usage: Usage,
    },
    /// Terminal: failed.
    Error(crate::Error),
}

/// Why a turn finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// Stop.
    Stop,
    /// Length.
    Length,
    /// Tool use.
    ToolUse,
    /// Content filter.
    ContentFilter,
    /// Refusal.
    Refusal,
    /// Pause turn.
    PauseTurn,
    /// Other.
    Other(String),
}

/// Model capabilities.
#[derive(Debug, Clone, Copy, Default)]
pub struct Capabilities {
    /// Native structured output.
    pub native_schema: bool,
    /// Tools.
    pub tools: bool,
    /// Reasoning.
    pub reasoning: bool,
}

/// PROVISIONAL echo provider (replaced by the provider work).
#[derive(Debug, Default)]
pub struct EchoProvider;

impl EchoProvider {
    /// A new echo provider.
    pub fn new() -> EchoProvider {
        EchoProvider
    }
}

impl Provider for EchoProvider {
    fn name(&self) -> &str {
        "echo"
    }
    fn capabilities(&self, _model: &str) -> Capabilities {
        Capabilities { native_schema: true, tools: false, reasoning: false }
    }
    fn stream(&self, request: ChatRequest, _cancel: CancellationToken) -> BoxStream<'static, ChatEvent> {
        let last = request
            .messages
            .iter()
            .rev()
            .find_map(|m| {
                m.parts.iter().find_map(|p| if let Part::Text(t) = p { Some(t.clone()) } else { None })
            })
            .unwrap_or_default();
        let text = if request.response_schema.is_some() { "{}".to_owned() } else { format!("echo: {last}") };
        let usage = Usage {
            input_tokens: (last.len() as u64).div_ceil(4).max(1),
            output_tokens: (text.len() as u64).div_ceil(4).max(1),
            ..Usage::default()
        };
        Box::pin(futures::stream::iter(vec![
            ChatEvent::TextDelta(text),
            ChatEvent::Finish { reason: FinishReason::Stop, usage },
        ]))
    }
}

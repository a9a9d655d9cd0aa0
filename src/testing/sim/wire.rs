//! Renders a planned answer as each dialect's event stream, shaped like the recorded streams
//! in the fixtures (Anthropic `message_start` … `message_stop`; OpenAI Chat chunks, a usage
//! chunk with `choices: []`, then `[DONE]`; OpenAI Responses `response.*` events).

use serde_json::{Value, json};

use super::request::WireDialect;

/// What the model produces in one attempt, before any fault cuts it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Output {
    /// Answer text.
    Text(String),
    /// One tool call with these arguments (compact JSON text).
    ToolCall { name: String, arguments: String },
    /// A refusal, with the refusal text OpenAI streams (Anthropic streams none).
    Refusal(String),
}

impl Output {
    /// The characters billed as output.
    pub(crate) fn chars(&self) -> usize {
        match self {
            Output::Text(text) | Output::Refusal(text) => text.chars().count(),
            Output::ToolCall { arguments, .. } => arguments.chars().count(),
        }
    }

    /// The first `chars` billed characters of the output.
    pub(crate) fn truncated(&self, chars: usize) -> Output {
        let cut = |s: &str| s.chars().take(chars).collect::<String>();
        match self {
            Output::Text(text) => Output::Text(cut(text)),
            Output::Refusal(text) => Output::Refusal(cut(text)),
            Output::ToolCall { name, arguments } => {
                Output::ToolCall { name: name.clone(), arguments: cut(arguments) }
            }
        }
    }
}

/// How the stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The turn finished normally (`stop`, `tool_use`), with usage unless `usage` is false.
    Finished { usage: bool },
    /// The turn ran into `max_tokens`.
    Length,
    /// The turn was refused by the model (a complete stream).
    Refused,
    /// The body breaks off (no terminal event): the connection drops.
    Broken,
    /// A chunk that is not JSON, then the body ends.
    Malformed,
    /// An error event inside the stream.
    StreamError,
    /// Nothing more is sent, ever.
    Stall,
}

/// One attempt's stream: the head, the output's deltas, the tail.
#[derive(Debug)]
pub(crate) struct Rendered {
    /// SSE chunks in order (each a complete event, except a malformed one).
    pub(crate) chunks: Vec<String>,
}

/// The chunk size of text deltas, in characters (eight simulator tokens).
const DELTA_CHARS: usize = 32;

pub(crate) struct Render<'a> {
    pub(crate) dialect: WireDialect,
    pub(crate) model: &'a str,
    pub(crate) id: u64,
    pub(crate) output: &'a Output,
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) ending: Ending,
}

impl Render<'_> {
    pub(crate) fn render(&self) -> Rendered {
        let chunks = match self.dialect {
            WireDialect::Anthropic => self.anthropic(),
            WireDialect::OpenAiChat => self.chat(),
            WireDialect::OpenAiResponses => self.responses(),
        };
        Rendered { chunks }
    }

    fn pieces(text: &str) -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        chars.chunks(DELTA_CHARS).map(|c| c.iter().collect()).collect()
    }

    fn anthropic(&self) -> Vec<String> {
        let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
        let usage_at_end = self.ending == Ending::Finished { usage: false };
        let start_input = if usage_at_end { 0 } else { self.input_tokens };
        let mut out = vec![event(
            "message_start",
            json!({"type": "message_start", "message": {"id": format!("msg_sim{}", self.id), "type": "message",
                "role": "assistant", "content": [], "model": self.model, "stop_reason": null,
                "stop_sequence": null, "usage": {"input_tokens": start_input, "output_tokens": 1}}}),
        )];
        let (block, pieces, delta): (Value, Vec<String>, &str) = match self.output {
            Output::Text(text) => (json!({"type": "text", "text": ""}), Self::pieces(text), "text_delta"),
            Output::Refusal(_) => (json!({"type": "text", "text": ""}), Vec::new(), "text_delta"),
            Output::ToolCall { name, arguments } => (
                json!({"type": "tool_use", "id": format!("toolu_sim{}", self.id), "name": name, "input": {}}),
                Self::pieces(arguments),
                "input_json_delta",
            ),
        };
        out.push(event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": block}),
        ));
        out.push(event("ping", json!({"type": "ping"})));
        for piece in pieces {
            let delta = if delta == "text_delta" {
                json!({"type": "text_delta", "text": piece})
            } else {
                json!({"type": "input_json_delta", "partial_json": piece})
            };
            out.push(event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": delta}),
            ));
        }
        if self.tail_is_cut(&mut out, |error| {
            event("error", json!({"type": "error", "error": {"type": error, "message": "Overloaded"}}))
        }) {
            return out;
        }
        out.push(event("content_block_stop", json!({"type": "content_block_stop", "index": 0})));
        let stop_reason = match (self.ending, self.output) {
            (Ending::Length, _) => "max_tokens",
            (Ending::Refused, _) => "refusal",
            (_, Output::ToolCall { .. }) => "tool_use",
            _ => "end_turn",
        };
        let mut usage = json!({"output_tokens": self.output_tokens});
        if usage_at_end {
            usage["input_tokens"] = json!(self.input_tokens);
        }
        out.push(event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": usage}),
        ));
        out.push(event("message_stop", json!({"type": "message_stop"})));
        out
    }

    /// Appends the cut tail (error event, malformed chunk) when the ending is one; says
    /// whether the stream ends here.
    fn tail_is_cut(&self, out: &mut Vec<String>, error_event: impl Fn(&str) -> String) -> bool {
        match self.ending {
            Ending::Broken | Ending::Stall => true,
            Ending::Malformed => {
                out.push(
                    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"ty\n\n".to_owned(),
                );
                true
            }
            Ending::StreamError => {
                out.push(error_event("overloaded_error"));
                true
            }
            _ => false,
        }
    }

    fn chat(&self) -> Vec<String> {
        let id = format!("chatcmpl-sim{}", self.id);
        let chunk = |choices: Value| {
            format!(
                "data: {}\n\n",
                json!({"id": id, "object": "chat.completion.chunk", "created": 1_727_346_176u64, "model": self.model,
                    "choices": choices})
            )
        };
        let choice = |delta: Value, finish: Value| json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]);
        let mut out =
            vec![chunk(choice(json!({"role": "assistant", "content": "", "refusal": null}), Value::Null))];
        match self.output {
            Output::Text(text) => {
                for piece in Self::pieces(text) {
                    out.push(chunk(choice(json!({"content": piece}), Value::Null)));
                }
            }
            Output::Refusal(text) => {
                for piece in Self::pieces(text) {
                    out.push(chunk(choice(json!({"refusal": piece}), Value::Null)));
                }
            }
            Output::ToolCall { name, arguments } => {
                out.push(chunk(choice(
                    json!({"tool_calls": [{"index": 0, "id": format!("call_sim{}", self.id), "type": "function",
                        "function": {"name": name, "arguments": ""}}]}),
                    Value::Null,
                )));
                for piece in Self::pieces(arguments) {
                    out.push(chunk(choice(
                        json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                        Value::Null,
                    )));
                }
            }
        }
        if self.tail_is_cut(&mut out, |_| {
            format!(
                "data: {}\n\n",
                json!({"error": {"message": "The server had an error", "type": "server_error", "code": null}})
            )
        }) {
            return out;
        }
        let finish = match (self.ending, self.output) {
            (Ending::Length, _) => "length",
            (_, Output::ToolCall { .. }) => "tool_calls",
            _ => "stop",
        };
        out.push(chunk(choice(json!({}), json!(finish))));
        if self.ending != (Ending::Finished { usage: false }) {
            out.push(format!(
                "data: {}\n\n",
                json!({"id": id, "object": "chat.completion.chunk", "created": 1_727_346_176u64, "model": self.model,
                    "choices": [], "usage": {"prompt_tokens": self.input_tokens, "completion_tokens": self.output_tokens,
                    "total_tokens": self.input_tokens + self.output_tokens}})
            ));
        }
        out.push("data: [DONE]\n\n".to_owned());
        out
    }

    fn responses(&self) -> Vec<String> {
        let event = |data: Value| {
            let name = data.get("type").and_then(Value::as_str).unwrap_or("message").to_owned();
            format!("event: {name}\ndata: {data}\n\n")
        };
        let response_id = format!("resp_sim{}", self.id);
        let usage = json!({"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
            "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}});
        let mut out = vec![event(json!({"type": "response.created", "sequence_number": 0,
            "response": {"id": response_id, "object": "response", "status": "in_progress", "model": self.model, "output": []}}))];
        let item_id = format!("item_sim{}", self.id);
        match self.output {
            Output::Text(text) | Output::Refusal(text) => {
                let refusal = matches!(self.output, Output::Refusal(_));
                out.push(event(json!({"type": "response.output_item.added", "output_index": 0,
                    "item": {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}})));
                let kind = if refusal { "response.refusal.delta" } else { "response.output_text.delta" };
                for piece in Self::pieces(text) {
                    out.push(event(json!({"type": kind, "item_id": item_id, "output_index": 0, "content_index": 0, "delta": piece})));
                }
                if self.tail_is_cut(&mut out, |_| String::new()) {
                    return self.responses_cut(out, &response_id, &usage, event);
                }
                out.push(event(json!({"type": "response.output_item.done", "output_index": 0,
                    "item": {"id": item_id, "type": "message", "status": "completed", "role": "assistant", "content": []}})));
            }
            Output::ToolCall { name, arguments } => {
                let call_id = format!("call_sim{}", self.id);
                out.push(event(json!({"type": "response.output_item.added", "output_index": 0,
                    "item": {"id": item_id, "type": "function_call", "status": "in_progress", "call_id": call_id,
                        "name": name, "arguments": ""}})));
                for piece in Self::pieces(arguments) {
                    out.push(event(
                        json!({"type": "response.function_call_arguments.delta", "item_id": item_id,
                        "output_index": 0, "delta": piece}),
                    ));
                }
                if self.tail_is_cut(&mut out, |_| String::new()) {
                    return self.responses_cut(out, &response_id, &usage, event);
                }
                out.push(event(json!({"type": "response.function_call_arguments.done", "item_id": item_id,
                    "output_index": 0, "arguments": arguments})));
                out.push(event(json!({"type": "response.output_item.done", "output_index": 0,
                    "item": {"id": item_id, "type": "function_call", "status": "completed", "call_id": call_id,
                        "name": name, "arguments": arguments}})));
            }
        }
        let mut response =
            json!({"id": response_id, "object": "response", "model": self.model, "output": []});
        let kind = if self.ending == Ending::Length {
            response["status"] = json!("incomplete");
            response["incomplete_details"] = json!({"reason": "max_output_tokens"});
            "response.incomplete"
        } else {
            response["status"] = json!("completed");
            "response.completed"
        };
        if self.ending != (Ending::Finished { usage: false }) {
            response["usage"] = usage;
        }
        out.push(event(json!({"type": kind, "response": response})));
        out
    }

    /// The end of a Responses stream that a fault cut: `tail_is_cut` pushed an empty string
    /// for the error event, replaced here by `response.failed` (which reports its usage).
    fn responses_cut(
        &self,
        mut out: Vec<String>,
        response_id: &str,
        usage: &Value,
        event: impl Fn(Value) -> String,
    ) -> Vec<String> {
        if self.ending == Ending::StreamError {
            out.pop();
            out.push(event(
                json!({"type": "response.failed", "response": {"id": response_id, "object": "response",
                "status": "failed", "model": self.model, "output": [],
                "error": {"code": "server_error", "message": "The server had an error"}, "usage": usage}}),
            ));
        } else if self.ending == Ending::Malformed {
            out.pop();
            out.push(
                "event: response.output_text.delta\ndata: {\"type\":\"response.output_te\n\n".to_owned(),
            );
        }
        out
    }
}

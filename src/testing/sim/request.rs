//! What the simulator reads from a request body: which wire dialect, the call's directive, how
//! many model turns the conversation already holds, the output cap, the tools offered, and the
//! prompt's size in the simulator's own tokens.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

/// The three wire dialects the simulator speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WireDialect {
    /// Anthropic Messages (`POST /v1/messages`).
    Anthropic,
    /// OpenAI Chat Completions (`POST /v1/chat/completions`).
    OpenAiChat,
    /// OpenAI Responses (`POST /v1/responses`).
    OpenAiResponses,
}

/// What a call asks of the simulator, written into its prompt as `<<sim tag=c3 tools=2 json=1
/// repair=1 out=40>>`: the simulator answers the conversation the directive describes, so a
/// script decides its calls' shape and the simulator only decides the faults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    /// The call's tag: every attempt of every turn of the call is billed under it.
    pub tag: String,
    /// Model turns that call a tool before the answer.
    pub tools: u32,
    /// The answer is a JSON object `{"answer": "..."}`.
    pub json: bool,
    /// With `json`: the first answer breaks the schema (`{"answer": 0}`), so the call repairs it.
    pub repair: bool,
    /// Output tokens of the answer's text.
    pub out: u32,
    /// An orchestration (a request that offers `parallel_agents`): the model spawns this many
    /// children in one `parallel_agents` call, awaits the admitted ones, then calls `finish`.
    /// Child `i` is tagged `c{i}` (the orchestrator's handle, its journal label), with `out`.
    pub children: u32,
    /// The profile the children are spawned with (`worker` when unset).
    pub profile: Option<String>,
}

impl Directive {
    /// The directive text to put in a prompt.
    pub fn render(&self) -> String {
        let mut orchestration = String::new();
        if self.children > 0 {
            orchestration = format!(" children={}", self.children);
            if let Some(profile) = &self.profile {
                orchestration.push_str(&format!(" profile={profile}"));
            }
        }
        format!(
            "<<sim tag={} tools={} json={} repair={} out={}{orchestration}>>",
            self.tag,
            self.tools,
            u8::from(self.json),
            u8::from(self.repair),
            self.out
        )
    }

    /// A plain text call of `out` tokens.
    pub fn text(tag: impl Into<String>, out: u32) -> Directive {
        Directive { tag: tag.into(), tools: 0, json: false, repair: false, out, children: 0, profile: None }
    }

    /// An orchestration that spawns `children` children of `profile`, each answering `out`
    /// tokens (see [`Directive::children`]).
    pub fn orchestration(tag: impl Into<String>, children: u32, profile: &str, out: u32) -> Directive {
        Directive { children, profile: Some(profile.to_owned()), ..Directive::text(tag, out) }
    }

    fn parse(text: &str) -> Option<Directive> {
        static DIRECTIVE: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"<<sim ([^<>]*)>>").ok());
        let captures = DIRECTIVE.as_ref()?.captures(text)?;
        let mut directive = Directive::text("", 20);
        for pair in captures.get(1)?.as_str().split_whitespace() {
            let (key, value) = pair.split_once('=')?;
            match key {
                "tag" => directive.tag = value.to_owned(),
                "tools" => directive.tools = value.parse().ok()?,
                "json" => directive.json = value == "1",
                "repair" => directive.repair = value == "1",
                "out" => directive.out = value.parse().ok()?,
                "children" => directive.children = value.parse().ok()?,
                "profile" => directive.profile = Some(value.to_owned()),
                _ => {}
            }
        }
        (!directive.tag.is_empty()).then_some(directive)
    }
}

/// One request as the simulator sees it.
#[derive(Debug, Clone)]
pub(crate) struct SimRequest {
    pub(crate) dialect: WireDialect,
    pub(crate) model: String,
    pub(crate) directive: Option<Directive>,
    /// Model turns already in the conversation (0 for the first turn of a call).
    pub(crate) turn: u32,
    /// The output cap the request carries.
    pub(crate) max_tokens: Option<u64>,
    /// The first tool offered, if any.
    pub(crate) tool: Option<String>,
    /// The names of every tool offered.
    pub(crate) offered: Vec<String>,
    /// The handles an orchestrator's `parallel_agents` admitted, read from its tool result.
    pub(crate) handles: Option<Vec<String>>,
    /// The prompt in the simulator's tokens (see [`prompt_tokens`]).
    pub(crate) input_tokens: u64,
    /// The client's input estimate of the whole body (the body holds every part the client
    /// estimates, and more, so this bounds its estimate of the prompt).
    pub(crate) body_tokens: u64,
}

impl SimRequest {
    pub(crate) fn parse(dialect: WireDialect, body: &[u8]) -> Result<SimRequest, String> {
        let value: Value = serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
        let text = String::from_utf8_lossy(body);
        let model = value.get("model").and_then(Value::as_str).unwrap_or_default().to_owned();
        let conversation = match dialect {
            WireDialect::OpenAiResponses => value.get("input"),
            _ => value.get("messages"),
        };
        let items = conversation.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let max_tokens = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
            .iter()
            .find_map(|k| value.get(*k).and_then(Value::as_u64));
        let offered: Vec<String> = value
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| t.get("name").or_else(|| t.pointer("/function/name")).and_then(Value::as_str))
            .map(str::to_owned)
            .collect();
        let tool = offered.first().cloned();
        let handles = items.iter().find_map(admitted_handles);
        let mut chars = 0usize;
        for key in ["system", "instructions"] {
            if let Some(system) = value.get(key) {
                chars += content_chars(system);
            }
        }
        for item in items {
            chars += item_chars(item);
        }
        let directive = items.iter().find_map(|item| {
            let role = item.get("role").and_then(Value::as_str);
            (role == Some("user")).then(|| Directive::parse(&item.to_string())).flatten()
        });
        Ok(SimRequest {
            dialect,
            model,
            directive,
            turn: model_turns(items),
            max_tokens,
            tool,
            offered,
            handles,
            input_tokens: prompt_tokens(chars),
            body_tokens: crate::provider::estimate_text_tokens(&text),
        })
    }
}

/// The handles of a `parallel_agents` result anywhere in a conversation item: a string (a
/// tool result, in any dialect's shape) that is a JSON object with a `handles` array.
fn admitted_handles(item: &Value) -> Option<Vec<String>> {
    match item {
        Value::String(text) if text.contains("\"handles\"") => {
            let value: Value = serde_json::from_str(text).ok()?;
            let handles = value.get("handles")?.as_array()?;
            Some(handles.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        }
        Value::Array(items) => items.iter().find_map(admitted_handles),
        Value::Object(map) => map.values().find_map(admitted_handles),
        _ => None,
    }
}

/// The simulator's tokenizer: four characters a token, rounded up, at least one token.
pub fn prompt_tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4).max(1)
}

/// Output tokens of `chars` streamed characters: four a token, rounded up.
pub fn output_tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4)
}

/// Runs of consecutive model-authored items: one per model turn.
fn model_turns(items: &[Value]) -> u32 {
    let mut turns = 0;
    let mut in_model_turn = false;
    for item in items {
        let kind = item.get("type").and_then(Value::as_str);
        let by_model = item.get("role").and_then(Value::as_str) == Some("assistant")
            || matches!(kind, Some("function_call" | "reasoning"));
        if by_model && !in_model_turn {
            turns += 1;
        }
        in_model_turn = by_model;
    }
    turns
}

/// Characters of the text a conversation item puts in the prompt: text, tool calls' names
/// and arguments, tool results.
fn item_chars(item: &Value) -> usize {
    let mut chars = 0;
    if let Some(content) = item.get("content") {
        chars += content_chars(content);
    }
    // OpenAI Chat: an assistant message's tool calls.
    if let Some(calls) = item.get("tool_calls").and_then(Value::as_array) {
        for call in calls {
            chars +=
                str_chars(call.pointer("/function/name")) + str_chars(call.pointer("/function/arguments"));
        }
    }
    // OpenAI Responses: function calls and their outputs are items of their own.
    match item.get("type").and_then(Value::as_str) {
        Some("function_call") => chars += str_chars(item.get("name")) + str_chars(item.get("arguments")),
        Some("function_call_output") => chars += str_chars(item.get("output")),
        _ => {}
    }
    chars
}

/// Characters of a content field: a string, or blocks (text, tool use, tool result).
fn content_chars(content: &Value) -> usize {
    match content {
        Value::String(text) => text.chars().count(),
        Value::Array(blocks) => blocks
            .iter()
            .map(|block| match block.get("type").and_then(Value::as_str) {
                Some("tool_use") => {
                    str_chars(block.get("name"))
                        + block.get("input").map_or(0, |i| i.to_string().chars().count())
                }
                Some("tool_result") => block.get("content").map_or(0, content_chars),
                _ => str_chars(block.get("text")),
            })
            .sum(),
        _ => 0,
    }
}

fn str_chars(value: Option<&Value>) -> usize {
    value.and_then(Value::as_str).map_or(0, |s| s.chars().count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directive_round_trips_through_a_prompt() {
        let directive = Directive { tools: 2, json: true, repair: true, ..Directive::text("c7", 33) };
        let prompt = format!("do the thing {} please", directive.render());
        assert_eq!(Directive::parse(&prompt), Some(directive));
        let orchestration = Directive::orchestration("orchestrator", 3, "worker", 9);
        assert_eq!(
            orchestration.render(),
            "<<sim tag=orchestrator tools=0 json=0 repair=0 out=9 children=3 profile=worker>>"
        );
        assert_eq!(Directive::parse(&orchestration.render()), Some(orchestration));
        assert_eq!(Directive::parse("no directive here"), None);
    }

    #[test]
    fn model_turns_count_runs_of_model_items() {
        let items: Vec<Value> = serde_json::from_str(
            r#"[{"role":"user","content":"x"},{"type":"function_call","name":"a","arguments":"{}"},
                {"type":"function_call","name":"b","arguments":"{}"},{"type":"function_call_output","output":"r"},
                {"role":"assistant","content":"y"},{"role":"user","content":"fix it"}]"#,
        )
        .unwrap();
        assert_eq!(model_turns(&items), 2);
    }
}

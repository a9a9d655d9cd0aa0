//! L3: the agent runtime. One agent invocation is a loop of model turns through a
//! [`Provider`]: each turn is guarded by the budget, streamed with a live cut when the
//! ceiling would be crossed, retried with backoff on retryable provider faults, and — when a
//! schema is asked for — validated, with at most two re-prompts carrying the validation
//! errors before the call fails `schema_mismatch`.
//!
//! The runtime knows nothing about journals: it returns what happened, and the engine
//! journals it.

mod fs_read;
mod tools;

pub use fs_read::fs_read_toolset;
pub use tools::{Permission, PermissionHook, Permissions, Tool, Toolset, toolset_hash};

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, ErrorCode};
use crate::model::Price;
use crate::money::Money;
use crate::provider::{ChatEvent, ChatRequest, FinishReason, Message, Part, Provider, Role};
use crate::usage::Usage;

/// Re-prompts allowed after a structured-output validation failure.
const SCHEMA_REPROMPTS: u32 = 2;

/// Budget checks the loop consults; implemented by the engine over the run's accounts.
pub(crate) trait BudgetHooks: Send + Sync {
    /// The turn guard: may another model turn start?
    fn can_start_turn(&self) -> bool;
    /// The stream cut: would spending `cost` on this call cross a ceiling?
    fn would_cross(&self, cost: Money) -> bool;
}

/// Everything one agent invocation needs.
pub(crate) struct AgentSpec {
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) served_by: String,
    pub(crate) request: ChatRequest,
    pub(crate) schema: Option<Value>,
    pub(crate) max_turns: u32,
    pub(crate) max_retries: u32,
    pub(crate) retry_base: Duration,
    pub(crate) price: Option<Price>,
}

/// How an invocation ended.
#[derive(Debug)]
pub(crate) enum AgentEnd {
    /// A value (text, or schema-valid JSON).
    Ok(Value),
    /// A failure that says something about the task.
    Error(Error),
    /// Stopped by a limit (turns, budget guard or cut).
    Limit(Error),
    /// Cancelled mid-flight.
    Cancelled(Error),
}

/// What an invocation did and cost.
#[derive(Debug)]
pub(crate) struct AgentRun {
    pub(crate) end: AgentEnd,
    pub(crate) usage: Usage,
    /// `None` when the serving model is unpriced.
    pub(crate) cost: Option<Money>,
    pub(crate) served_by: String,
}

/// Runs one agent invocation to its end.
pub(crate) async fn run(
    mut spec: AgentSpec,
    budget: &dyn BudgetHooks,
    cancel: &CancellationToken,
    on_delta: &(dyn Fn(&str) + Send + Sync),
) -> AgentRun {
    let mut usage = Usage::default();
    let mut turns = 0;
    let mut reprompts = 0;
    let validator = match spec.schema.as_ref().map(jsonschema::validator_for).transpose() {
        Ok(v) => v,
        Err(e) => {
            let error = Error::validation(format!("the agent's schema is not a valid JSON Schema: {e}"));
            return finish(&spec, AgentEnd::Error(error), usage, turns);
        }
    };
    loop {
        if turns >= spec.max_turns {
            let error =
                Error::new(ErrorCode::TurnLimit, format!("reached the limit of {} turns", spec.max_turns));
            return finish(&spec, AgentEnd::Limit(error), usage, turns);
        }
        if !budget.can_start_turn() {
            let error =
                Error::new(ErrorCode::BudgetExhausted, "the budget ceiling leaves nothing for another turn");
            return finish(&spec, AgentEnd::Limit(error), usage, turns);
        }
        turns += 1;
        let turn = match turn_with_retries(&spec, &usage, budget, cancel, on_delta).await {
            Ok(turn) => turn,
            Err((end, partial)) => {
                usage += partial;
                return finish(&spec, end, usage, turns);
            }
        };
        usage += turn.usage;
        if turn.reason == FinishReason::ContentFilter {
            let error =
                Error::new(ErrorCode::ContentFilter, "the provider's content filter stopped the output");
            return finish(&spec, AgentEnd::Error(error), usage, turns);
        }
        if let Some(name) = turn.tool_calls.first() {
            let error = Error::new(
                ErrorCode::ToolDenied,
                format!("the model called tool {name:?}, but this agent was given no tools"),
            );
            return finish(&spec, AgentEnd::Error(error), usage, turns);
        }
        let Some(validator) = &validator else {
            return finish(&spec, AgentEnd::Ok(Value::String(turn.text)), usage, turns);
        };
        let problems = match extract_json(&turn.text) {
            Some(value) => {
                let problems: Vec<String> = validator
                    .iter_errors(&value)
                    .map(|e| format!("at '{}': {e}", e.instance_path()))
                    .collect();
                if problems.is_empty() {
                    return finish(&spec, AgentEnd::Ok(value), usage, turns);
                }
                problems
            }
            None => vec!["the reply is not a JSON value".to_owned()],
        };
        if reprompts >= SCHEMA_REPROMPTS {
            let error = Error::new(
                ErrorCode::SchemaMismatch,
                format!(
                    "output did not match the schema after {reprompts} re-prompts: {}",
                    problems.join("; ")
                ),
            );
            return finish(&spec, AgentEnd::Error(error), usage, turns);
        }
        reprompts += 1;
        spec.request.messages.push(Message { role: Role::Assistant, parts: vec![Part::Text(turn.text)] });
        let correction = format!(
            "Your reply did not match the required JSON Schema:\n- {}\nReply again with only a JSON value that matches the schema.",
            problems.join("\n- ")
        );
        spec.request.messages.push(Message { role: Role::User, parts: vec![Part::Text(correction)] });
    }
}

fn finish(spec: &AgentSpec, end: AgentEnd, usage: Usage, turns: u32) -> AgentRun {
    let _ = turns;
    AgentRun { end, usage, cost: spec.price.map(|p| p.cost(&usage)), served_by: spec.served_by.clone() }
}

struct Turn {
    text: String,
    tool_calls: Vec<String>,
    reason: FinishReason,
    usage: Usage,
}

/// One turn, retried on retryable faults with exponential backoff (or the provider's
/// Retry-After). A failure returns the end and the partial usage of the failed attempts.
async fn turn_with_retries(
    spec: &AgentSpec,
    spent_before: &Usage,
    budget: &dyn BudgetHooks,
    cancel: &CancellationToken,
    on_delta: &(dyn Fn(&str) + Send + Sync),
) -> Result<Turn, (AgentEnd, Usage)> {
    let mut attempt = 0;
    let mut wasted = Usage::default();
    loop {
        match one_turn(spec, spent_before, budget, cancel, on_delta).await {
            Ok(turn) => {
                let mut turn = turn;
                turn.usage += wasted;
                return Ok(turn);
            }
            Err((AgentEnd::Error(error), partial)) if error.retryable && attempt < spec.max_retries => {
                wasted += partial;
                let backoff = match error.retry_after_ms {
                    Some(ms) => Duration::from_millis(ms),
                    None => {
                        spec.retry_base.saturating_mul(1 << attempt.min(16))
                            + jitter(spec.retry_base, attempt)
                    }
                };
                attempt += 1;
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = cancel.cancelled() => {
                        let error = Error::new(ErrorCode::Cancelled, "cancelled while waiting to retry");
                        return Err((AgentEnd::Cancelled(error), wasted));
                    }
                }
            }
            Err((end, partial)) => {
                wasted += partial;
                return Err((end, wasted));
            }
        }
    }
}

/// Up to a quarter of `base`, varied per attempt so concurrent retries spread out.
fn jitter(base: Duration, attempt: u32) -> Duration {
    let spread = (base.as_millis() as u64 / 4).max(1);
    let mixed = (u64::from(attempt) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    Duration::from_millis(mixed % spread)
}

async fn one_turn(
    spec: &AgentSpec,
    spent_before: &Usage,
    budget: &dyn BudgetHooks,
    cancel: &CancellationToken,
    on_delta: &(dyn Fn(&str) + Send + Sync),
) -> Result<Turn, (AgentEnd, Usage)> {
    let stream_cancel = cancel.child_token();
    let mut stream = spec.provider.stream(spec.request.clone(), stream_cancel.clone());
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    let mut live = Usage::default();
    loop {
        let event = tokio::select! {
            event = stream.next() => event,
            _ = cancel.cancelled() => {
                stream_cancel.cancel();
                let partial = estimate_partial(&spec.request, &text, live);
                return Err((AgentEnd::Cancelled(Error::new(ErrorCode::Cancelled, "the call was cancelled")), partial));
            }
        };
        let Some(event) = event else {
            let error = Error::new(ErrorCode::Transport, "the stream ended without a terminal event");
            return Err((AgentEnd::Error(error), estimate_partial(&spec.request, &text, live)));
        };
        match event {
            ChatEvent::TextDelta(delta) => {
                on_delta(&delta);
                text.push_str(&delta);
            }
            ChatEvent::Usage(usage) => live = usage,
            ChatEvent::ToolCallEnd { name, .. } => tool_calls.push(name),
            ChatEvent::Finish { reason, usage } => {
                return Ok(Turn { text, tool_calls, reason, usage });
            }
            ChatEvent::Error(error) => {
                let partial = estimate_partial(&spec.request, &text, live);
                return Err((AgentEnd::Error(error), partial));
            }
            ChatEvent::ReasoningDelta(_)
            | ChatEvent::ToolCallStart { .. }
            | ChatEvent::ToolCallDelta { .. }
            | ChatEvent::ProviderRaw { .. } => {}
        }
        // The live cut: price what this call has consumed so far and stop the stream the
        // moment it would cross the ceiling.
        if let Some(price) = spec.price {
            let mut so_far = *spent_before;
            so_far += estimate_partial(&spec.request, &text, live);
            if budget.would_cross(price.cost(&so_far)) {
                stream_cancel.cancel();
                let error =
                    Error::new(ErrorCode::BudgetExhausted, "the stream was cut at the budget ceiling");
                return Err((AgentEnd::Limit(error), estimate_partial(&spec.request, &text, live)));
            }
        }
    }
}

/// Usage of an unfinished turn: the provider's running figure when it sent one, else an
/// estimate from lengths (about four characters a token), marked approximate.
fn estimate_partial(request: &ChatRequest, text: &str, live: Usage) -> Usage {
    if live.total_tokens() > 0 && live.output_tokens >= estimate_tokens(text) {
        return Usage { approximate: true, ..live };
    }
    let input = live.input_tokens.max(estimate_request_tokens(request));
    Usage { input_tokens: input, output_tokens: estimate_tokens(text), approximate: true, ..Usage::default() }
}

/// About four characters a token, at least one for any text.
pub(crate) fn estimate_tokens(text: &str) -> u64 {
    if text.is_empty() { 0 } else { (text.chars().count() as u64).div_ceil(4) }
}

/// Estimated input tokens of a request.
pub(crate) fn estimate_request_tokens(request: &ChatRequest) -> u64 {
    let mut total = request.system.as_deref().map_or(0, estimate_tokens);
    for message in &request.messages {
        for part in &message.parts {
            total += match part {
                Part::Text(text) => estimate_tokens(text),
                Part::ToolResult { content, .. } => estimate_tokens(content),
                Part::ToolCall { arguments, .. } => estimate_tokens(&arguments.to_string()),
                Part::ProviderRaw { .. } => 0,
            };
        }
    }
    total
}

/// The JSON value in a reply: the whole text, or the first fenced block, or the span from
/// the first `{`/`[` to the last `}`/`]`.
pub(crate) fn extract_json(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if let Ok(value) = serde_json::from_str(trimmed) {
        return Some(value);
    }
    if let Some(start) = trimmed.find("```") {
        let after = &trimmed[start + 3..];
        let body_start = after.find('\n').map_or(0, |i| i + 1);
        if let Some(end) = after[body_start..].find("```")
            && let Ok(value) = serde_json::from_str(after[body_start..body_start + end].trim())
        {
            return Some(value);
        }
    }
    let open = trimmed.find(['{', '['])?;
    let close = trimmed.rfind(['}', ']'])?;
    (close > open).then(|| serde_json::from_str(&trimmed[open..=close]).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_found_in_fences_and_prose() {
        assert_eq!(extract_json(r#" {"a":1} "#), Some(serde_json::json!({"a":1})));
        assert_eq!(extract_json("here:\n```json\n[1,2]\n```\nthanks"), Some(serde_json::json!([1, 2])));
        assert_eq!(extract_json("the answer is {\"ok\": true}."), Some(serde_json::json!({"ok": true})));
        assert_eq!(extract_json("no json here"), None);
    }

    #[test]
    fn token_estimates_round_up() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abc"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
    }
}

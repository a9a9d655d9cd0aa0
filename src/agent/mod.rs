//! L3: the agent runtime. One agent invocation is a loop of model turns through a
//! [`Provider`]: each turn is guarded by the budget, streamed with a live cut when the
//! ceiling would be crossed, retried with backoff on retryable provider faults, and — when a
//! schema is asked for — validated, with at most two re-prompts carrying the validation
//! errors before the call fails `schema_mismatch`.
//!
//! The runtime knows nothing about journals: it returns what happened, and the engine
//! journals it.

mod attempt;
mod context_bound;
pub(crate) mod cost;
mod ending;
mod fn_tool;
mod fs_read;
mod host_tool;
pub(crate) mod ledger;
#[cfg(test)]
mod loop_tests;
pub(crate) mod mcp;
mod permissions;
mod retry;
mod schema;
mod spec;
mod spend;
mod tools;
mod turn;

pub(crate) use context_bound::DEFAULT_MAX_CONTEXT_TOKENS;
pub use fn_tool::FnTool;
pub use fs_read::fs_read_toolset;
pub(crate) use fs_read::{SearchBounds, fs_read_toolset_bounded};
pub(crate) use host_tool::{HostFunction, HostFunctionTool};
pub(crate) use permissions::{PermissionsConfig, permissions_for_call};
pub(crate) use retry::Backoff;
pub(crate) use spec::{AgentEnd, AgentRun, AgentSpec, Fallback};
pub(crate) use spend::Spend;
pub use tools::{
    Permission, PermissionHook, Permissions, Tool, ToolJournaling, ToolSource, Toolset, toolset_hash,
};
pub(crate) use turn::run;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Error;
use crate::money::Money;
use crate::provider::Message;
use crate::usage::Usage;

/// Re-prompts allowed after a structured-output validation failure.
const SCHEMA_REPROMPTS: u32 = 2;

/// Tool calls with invalid arguments the model may make (each answered with the validation
/// errors as the tool result) before the call fails `tool_failed`.
const TOOL_CORRECTIONS: u32 = 3;

/// What the loop asks of the engine: budget checks, checkpoints, approvals.
pub(crate) trait BudgetHooks: Send + Sync {
    /// The turn guard: may another model turn start?
    fn can_start_turn(&self) -> bool;
    /// Resolves once a wire attempt may be sent (retries and failovers included): the run's
    /// driver still holds the run. An error ends the call before anything is sent.
    fn dispatchable(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }
    /// A wire attempt was granted and is about to be sent (retries and failovers included).
    fn attempt_started(&self) {}
    /// The stream cut: records that this call has consumed `cost` so far (in flight, seen by
    /// its siblings at once) and says whether settled plus in-flight spend crosses a ceiling.
    fn would_cross(&self, cost: Money) -> bool;
    /// The turn guard of a priced call: records `used` so far and grants the next turn up to
    /// `want`; `Ok(None)` when unbounded, `Err(available)` when less than `floor` is left.
    fn grant_turn(&self, _used: Money, _want: Money, _floor: Money) -> Result<Option<Money>, Money> {
        Ok(None)
    }
    /// A model turn (number `turn`, from 1) is about to be sent with `request`.
    fn turn_started(&self, _turn: u32, _request: &crate::provider::ChatRequest) {}
    /// The model turn `turn` ended (answered, or failed after its retries).
    fn turn_ended(&self, _turn: u32, _report: &TurnReport<'_>) {}
    /// Persists the loop's state at a turn boundary, so a rerun continues from here.
    fn checkpoint(&self, _state: &Checkpoint) {}
    /// Waits for the model slots of one turn, for a call that takes them per turn instead of
    /// for its whole life (the orchestrator, whose tools wait for other model calls); `None`
    /// when the run stops while waiting. The turn holds what it returns until it ends.
    fn turn_slot(&self) -> BoxFuture<'_, Option<TurnSlot>> {
        Box::pin(async { Some(TurnSlot::default()) })
    }
    /// Asks a person to approve a tool call (the permission chain said `ask`). Resolves to
    /// whether it was approved; fails when the run stops while waiting.
    fn approve<'a>(&'a self, _request: &'a ApprovalRequest) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(async { Ok(false) })
    }
    /// Runs one permitted tool call (`id` as the loop minted it). The engine journals it and
    /// announces it with start and end events; the default just runs it.
    fn run_tool<'a>(
        &'a self,
        tool: &'a Arc<dyn Tool>,
        id: &'a str,
        args: Value,
    ) -> BoxFuture<'a, Result<String, Error>> {
        tool.call_with_id(id, args)
    }
}

/// How a model turn ended, for [`BudgetHooks::turn_ended`].
#[derive(Debug)]
pub(crate) struct TurnReport<'a> {
    /// Whether the model answered.
    pub(crate) ok: bool,
    /// The model that answered (or was last tried), as `provider:model`.
    pub(crate) served_by: &'a str,
    /// What the turn used: every attempt it made, a failed turn's included.
    pub(crate) usage: Usage,
    /// What the turn cost, each attempt priced at the model that served it; `None` when one
    /// was unpriced.
    pub(crate) cost: Option<Money>,
    /// Why the model stopped, when it answered.
    pub(crate) finish_reason: Option<&'a str>,
    /// The answer's text, when it answered.
    pub(crate) text: Option<&'a str>,
}

/// The model slots one turn holds (none for a call that holds its slots for its whole life).
pub(crate) type TurnSlot = Vec<tokio::sync::OwnedSemaphorePermit>;

/// A tool call waiting for approval.
#[derive(Debug, Clone)]
pub(crate) struct ApprovalRequest {
    /// The key `cairn resolve` answers it with.
    pub(crate) key: String,
    /// The tool.
    pub(crate) tool: String,
    /// Its arguments.
    pub(crate) arguments: Value,
    /// How long to wait for an answer before the call counts as denied.
    pub(crate) timeout: Option<Duration>,
}

/// The loop's state at a turn boundary, as checkpointed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Checkpoint {
    /// The conversation so far.
    pub(crate) messages: Vec<Message>,
    /// Completed model turns.
    pub(crate) turns: u32,
    /// Tool calls made.
    pub(crate) tool_calls: u32,
    /// Usage of the completed turns.
    pub(crate) usage: Usage,
    /// What `usage` cost, by the model that served each attempt (empty in checkpoints written
    /// before it was kept: those are priced at the requested model).
    #[serde(default, skip_serializing_if = "Spend::is_empty")]
    pub(crate) spend: Spend,
    /// Tool calls the last turn requested that have not all produced results yet.
    #[serde(default)]
    pub(crate) pending: Vec<PendingCall>,
    /// Structured-output re-prompts made so far.
    #[serde(default)]
    pub(crate) reprompts: u32,
    /// Tool calls with invalid arguments answered so far (toward the correction limit).
    #[serde(default)]
    pub(crate) corrections: u32,
    /// Set once the agent reached its tool-call or turn limit: the limit it reached. The one
    /// turn left is the final answer turn, with tools withheld.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) finishing: Option<String>,
    /// Whether the answering turn of a call with tools and native structured output has begun
    /// (its tool turns go out without the schema; the answering turn carries it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) answering: bool,
}

impl Checkpoint {
    /// Hands `hooks` the checkpoint at a turn boundary: the conversation as it stands, this
    /// state's counters and usage, and the loop's re-prompt and correction counts. The
    /// conversation moves into the checkpoint for the call and back, never copied (an
    /// orchestrator's grows with every child, and is checkpointed twice a turn).
    fn save(
        &self,
        hooks: &dyn BudgetHooks,
        messages: &mut Vec<Message>,
        pending: Vec<PendingCall>,
        reprompts: u32,
        corrections: u32,
    ) {
        let spent = (self.turns, self.usage, self.spend.clone());
        self.write(hooks, messages, spent, pending, (reprompts, corrections));
    }

    /// Checkpoints the turn in flight (number `self.turns`) once its failed attempts have been
    /// charged `charged` (by the model that served each): the conversation and counters as the
    /// turn began, the usage and spend with the charge. A failed attempt was paid whatever happens next; this way a process killed
    /// before the turn ends leaves it durable, so the resume counts it spent and the call's
    /// terminal entry carries it (the dead process's ledger held it alone, and the resume
    /// handed the ceiling out again).
    fn save_charged(
        &self,
        hooks: &dyn BudgetHooks,
        messages: &mut Vec<Message>,
        charged: &Spend,
        reprompts: u32,
        corrections: u32,
    ) {
        let mut usage = self.usage;
        usage += charged.usage();
        let mut spend = self.spend.clone();
        spend.merge(charged);
        let completed = self.turns.saturating_sub(1);
        self.write(hooks, messages, (completed, usage, spend), Vec::new(), (reprompts, corrections));
    }

    fn write(
        &self,
        hooks: &dyn BudgetHooks,
        messages: &mut Vec<Message>,
        (turns, usage, spend): (u32, Usage, Spend),
        pending: Vec<PendingCall>,
        (reprompts, corrections): (u32, u32),
    ) {
        let mut checkpoint = Checkpoint {
            messages: std::mem::take(messages),
            turns,
            tool_calls: self.tool_calls,
            usage,
            spend,
            pending,
            reprompts,
            corrections,
            finishing: self.finishing.clone(),
            answering: self.answering,
        };
        hooks.checkpoint(&checkpoint);
        *messages = std::mem::take(&mut checkpoint.messages);
    }
}

/// A requested tool call not yet answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PendingCall {
    id: String,
    wire_id: Option<String>,
    name: String,
    arguments: Value,
    /// The parse error when the model's argument text was not valid JSON, with that text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    malformed: Option<String>,
}

/// Estimated tokens of `text` sent as input (the request estimate's rule: at least four
/// characters a token for ASCII, more for code, JSON and numbers; a token per byte of other text).
fn estimate_tokens(text: &str) -> u64 {
    crate::provider::estimate_text_tokens(text)
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
        assert_eq!(estimate_tokens("the"), 1);
        assert_eq!(estimate_tokens("house"), 2);
        // Letters that make no word: three quarters of a token each.
        assert_eq!(estimate_tokens("xqzvk"), 4);
    }
}

//! What one agent invocation is given ([`AgentSpec`], its [`Fallback`]s) and what it
//! returns ([`AgentRun`], ending in an [`AgentEnd`]).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{Backoff, Checkpoint, Permissions, Tool};
use crate::error::{Error, ErrorCode};
use crate::model::Price;
use crate::money::Money;
use crate::provider::{ChatRequest, Provider, StopReason};
use crate::usage::{AttemptRecord, Usage};

/// Everything one agent invocation needs.
pub(crate) struct AgentSpec {
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) served_by: String,
    pub(crate) request: ChatRequest,
    pub(crate) schema: Option<Value>,
    pub(crate) max_turns: u32,
    pub(crate) max_tool_calls: Option<u32>,
    pub(crate) max_retries: u32,
    pub(crate) retry_base: Duration,
    /// The backoff's cap and the `Retry-After` clamp (`retry_base` is the base).
    pub(crate) backoff: Backoff,
    pub(crate) price: Option<Price>,
    /// Models to fail over to, in order, when the serving one keeps failing retryably.
    pub(crate) fallbacks: Vec<Fallback>,
    pub(crate) tools: Vec<Arc<dyn Tool>>,
    pub(crate) permissions: Permissions,
    /// The call's content key, whose first 12 hex digits make approval keys unique to it.
    pub(crate) call_key: crate::journal::ContentKey,
    /// Where a previous attempt stopped, to continue from.
    pub(crate) resume_from: Option<Checkpoint>,
    /// The bound on a turn's estimated input tokens; older tool results are elided past it.
    pub(crate) max_context_tokens: u64,
}

/// A declared fallback model.
pub(crate) struct Fallback {
    pub(crate) provider: Arc<dyn Provider>,
    /// Its `provider:model` ref.
    pub(crate) served_by: String,
    /// Its provider-local model name.
    pub(crate) model: String,
    pub(crate) price: Option<Price>,
}

/// Faults that move a call to the next fallback once retries are spent. Budget, task and
/// content failures never fail over.
pub(super) fn fails_over(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::ProviderUnavailable
            | ErrorCode::ProviderRateLimit
            | ErrorCode::Transport
            | ErrorCode::ProviderAuth
    )
}

/// How an invocation ended.
#[derive(Debug)]
pub(crate) enum AgentEnd {
    /// A value (text, or schema-valid JSON).
    Ok(Value),
    /// A failure that says something about the task.
    Error(Error),
    /// Stopped by a limit (turns, tool calls, budget guard or cut).
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
    /// What its priced attempts cost (all of `cost` when every model was priced): spent on the
    /// run's budget whatever an unpriced model added.
    pub(crate) priced: Money,
    pub(crate) served_by: String,
    /// Why the last model turn ended, as the provider said; [`StopReason::Incomplete`] when
    /// the call failed because its stream broke off or ended without a finish reason; `None`
    /// when no turn was answered.
    pub(crate) finish_reason: Option<StopReason>,
    /// Every wire attempt, when more than one model served them (see
    /// [`super::ledger::Ledger::journaled_attempts`]).
    pub(crate) attempts: Vec<AttemptRecord>,
    /// Attempts the provider refused before any stream byte (charged nothing).
    pub(crate) refused_attempts: u32,
    /// Attempts sent and never answered (no response status), each charged its grant.
    pub(crate) unanswered_attempts: u32,
    /// The text of an answer that did not make it to `ok`: cut off at the output-token limit,
    /// or a final answer turn's reply that did not match the schema. Journaled with the
    /// `limit` entry and shown as the full record's `partial`.
    pub(crate) partial: Option<String>,
}

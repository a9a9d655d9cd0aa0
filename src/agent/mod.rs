//! L3: the agent runtime. One agent invocation is a loop of model turns through a
//! [`Provider`]: each turn is guarded by the budget, streamed with a live cut when the
//! ceiling would be crossed, retried with backoff on retryable provider faults, and — when a
//! schema is asked for — validated, with at most two re-prompts carrying the validation
//! errors before the call fails `schema_mismatch`.
//!
//! The runtime knows nothing about journals: it returns what happened, and the engine
//! journals it.

mod context_bound;
pub(crate) mod cost;
mod fs_read;
mod host_tool;
#[cfg(test)]
mod loop_tests;
pub(crate) mod mcp;
mod permissions;
mod retry;
mod schema;
mod tools;

pub(crate) use context_bound::DEFAULT_MAX_CONTEXT_TOKENS;
pub use fs_read::fs_read_toolset;
pub(crate) use fs_read::{SearchBounds, fs_read_toolset_bounded};
pub(crate) use host_tool::{HostFunction, HostFunctionTool};
pub(crate) use permissions::{PermissionsConfig, permissions_for_call};
pub(crate) use retry::Backoff;
pub use tools::{
    Permission, PermissionHook, Permissions, Tool, ToolJournaling, ToolSource, Toolset, toolset_hash,
};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, ErrorCode};
use crate::model::Price;
use crate::money::Money;
use crate::provider::{
    ChatEvent, ChatRequest, FinishReason, Message, Part, Provider, Role, StopReason, ToolSpec,
};
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
    /// The stream cut: records that this call has consumed `cost` so far (in flight, seen by
    /// its siblings at once) and says whether settled plus in-flight spend crosses a ceiling.
    fn would_cross(&self, cost: Money) -> bool;
    /// The turn guard of a priced call: records `used` so far and grants the next turn up to
    /// `want`; `Ok(None)` when unbounded, `Err(available)` when less than `floor` is left.
    fn grant_turn(&self, _used: Money, _want: Money, _floor: Money) -> Result<Option<Money>, Money> {
        Ok(None)
    }
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
    /// Tool calls the last turn requested that have not all produced results yet.
    #[serde(default)]
    pub(crate) pending: Vec<PendingCall>,
    /// Structured-output re-prompts made so far.
    #[serde(default)]
    pub(crate) reprompts: u32,
    /// Tool calls with invalid arguments answered so far (toward the correction limit).
    #[serde(default)]
    pub(crate) corrections: u32,
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
        let mut checkpoint = Checkpoint {
            messages: std::mem::take(messages),
            turns: self.turns,
            tool_calls: self.tool_calls,
            usage: self.usage,
            pending,
            reprompts,
            corrections,
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
fn fails_over(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::ProviderUnavailable
            | ErrorCode::ProviderRateLimit
            | ErrorCode::Transport
            | ErrorCode::ProviderAuth
    )
}

/// Cost so far (`None` once any usage was served by an unpriced model), and the usage of
/// attempts abandoned by a failover, which the loop's own usage does not count.
#[derive(Debug, Clone, Copy)]
struct Spend {
    cost: Option<Money>,
    carried: Usage,
}

impl Spend {
    fn new() -> Spend {
        Spend { cost: Some(Money::ZERO), carried: Usage::default() }
    }

    fn add(&mut self, price: Option<Price>, usage: &Usage) {
        self.cost = match (self.cost, price) {
            (Some(total), Some(price)) => Some(total + price.cost(usage)),
            _ => None,
        };
    }

    /// Charges the usage of an attempt abandoned for a fallback, at the abandoned model's
    /// price, and keeps it for the journaled usage.
    fn carry(&mut self, price: Option<Price>, usage: &Usage) {
        self.add(price, usage);
        self.carried += *usage;
    }
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
    pub(crate) served_by: String,
    /// Why the last model turn ended, as the provider said; [`StopReason::Incomplete`] when
    /// the call failed because its stream broke off or ended without a finish reason; `None`
    /// when no turn was answered.
    pub(crate) finish_reason: Option<StopReason>,
}

/// Runs one agent invocation to its end.
pub(crate) async fn run(
    spec: AgentSpec,
    hooks: &dyn BudgetHooks,
    cancel: &CancellationToken,
    on_delta: &(dyn Fn(&str) + Send + Sync),
) -> AgentRun {
    let mut last = None;
    let mut outcome = run_turns(spec, hooks, cancel, on_delta, &mut last).await;
    outcome.finish_reason = match &outcome.end {
        // The stream broke off or ended without a finish reason (or the server failed it) and
        // the retries are spent: the turn was never completed.
        AgentEnd::Error(error)
            if matches!(error.code, ErrorCode::Transport | ErrorCode::ProviderUnavailable) =>
        {
            Some(StopReason::Incomplete)
        }
        _ => last,
    };
    outcome
}

/// The turns of one invocation; `last` holds the finish reason of the last answered turn
/// (`None` while a turn is in flight).
async fn run_turns(
    mut spec: AgentSpec,
    hooks: &dyn BudgetHooks,
    cancel: &CancellationToken,
    on_delta: &(dyn Fn(&str) + Send + Sync),
    last: &mut Option<StopReason>,
) -> AgentRun {
    let mut usage = Usage::default();
    let mut spend = Spend::new();
    let mut state = spec.resume_from.take().unwrap_or_default();
    if !state.messages.is_empty() {
        spec.request.messages = std::mem::take(&mut state.messages);
    }
    let mut reprompts = state.reprompts;
    let mut invalid_calls = state.corrections;
    if !spec.tools.is_empty() {
        spec.request.tools = spec
            .tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                parameters: t.parameters().clone(),
            })
            .collect();
    }
    if let Some(schema) = &spec.schema {
        schema::show_schema(&mut spec.request, schema);
    }
    let validator = match spec.schema.as_ref().map(jsonschema::validator_for).transpose() {
        Ok(v) => v,
        Err(e) => {
            let error = Error::validation(format!("the agent's schema is not a valid JSON Schema: {e}"));
            return finish(&spec, AgentEnd::Error(error), usage, spend);
        }
    };
    // Whether the conversation was bounded since it last changed.
    let mut bounded = false;
    let mut validators = HashMap::new();
    loop {
        // Answer the tool calls of the last turn (or of a checkpoint taken before them).
        if !state.pending.is_empty() {
            let pending = std::mem::take(&mut state.pending);
            let mut results = Vec::with_capacity(pending.len());
            let mut ended = None;
            for call in &pending {
                state.tool_calls += 1;
                if spec.max_tool_calls.is_some_and(|max| state.tool_calls > max) {
                    let max = spec.max_tool_calls.unwrap_or_default();
                    let error =
                        Error::new(ErrorCode::TurnLimit, format!("reached the limit of {max} tool calls"));
                    return finish(&spec, AgentEnd::Limit(error), usage, spend);
                }
                let (content, is_error) =
                    match answer_tool_call(&spec, hooks, call, &mut invalid_calls, &mut validators).await {
                        Ok(answer) => answer,
                        Err(end) => return finish(&spec, end, usage, spend),
                    };
                if !is_error
                    && ended.is_none()
                    && spec.tools.iter().any(|t| t.name() == call.name && t.ends_agent())
                {
                    ended = Some(
                        serde_json::from_str(&content).unwrap_or_else(|_| Value::String(content.clone())),
                    );
                }
                results.push(Part::ToolResult {
                    id: call.id.clone(),
                    wire_id: call.wire_id.clone(),
                    content,
                    is_error,
                });
                if ended.is_some() {
                    break;
                }
            }
            if let Some(value) = ended {
                // A tool that ends the agent (the orchestrator's `finish`) answered: its
                // result is the agent's value; no further turn is paid for.
                return finish(&spec, AgentEnd::Ok(value), usage, spend);
            }
            spec.request.messages.push(Message { role: Role::User, parts: results });
            context_bound::bound_context(&mut spec.request, spec.max_context_tokens);
            bounded = true;
            state.save(hooks, &mut spec.request.messages, Vec::new(), reprompts, invalid_calls);
        }
        if state.turns >= spec.max_turns {
            let error =
                Error::new(ErrorCode::TurnLimit, format!("reached the limit of {} turns", spec.max_turns));
            return finish(&spec, AgentEnd::Limit(error), usage, spend);
        }
        if !hooks.can_start_turn() {
            let error =
                Error::new(ErrorCode::BudgetExhausted, "the budget ceiling leaves nothing for another turn");
            return finish(&spec, AgentEnd::Limit(error), usage, spend);
        }
        let Some(slot) = hooks.turn_slot().await else {
            let error =
                Error::new(ErrorCode::Cancelled, "the call was cancelled while waiting for a model slot");
            return finish(&spec, AgentEnd::Cancelled(error), usage, spend);
        };
        state.turns += 1;
        // Idempotent: a conversation bounded since it last changed needs no second pass.
        if !bounded {
            context_bound::bound_context(&mut spec.request, spec.max_context_tokens);
        }
        bounded = false;
        *last = None;
        let turn = turn_with_retries(&mut spec, &usage, hooks, cancel, on_delta, &mut spend).await;
        drop(slot);
        let turn = match turn {
            Ok(turn) => turn,
            Err((end, partial)) => {
                usage += partial;
                spend.add(spec.price, &partial);
                return finish(&spec, end, usage, spend);
            }
        };
        usage += turn.usage;
        spend.add(spec.price, &turn.usage);
        state.usage += turn.usage;
        *last = Some(StopReason::from(&turn.reason));
        if turn.reason == FinishReason::ContentFilter {
            let error =
                Error::new(ErrorCode::ContentFilter, "the provider's content filter stopped the output");
            return finish(&spec, AgentEnd::Error(error), usage, spend);
        }
        if !turn.tool_calls.is_empty() {
            if spec.tools.is_empty() {
                let error = Error::new(
                    ErrorCode::ToolDenied,
                    format!(
                        "the model called tool {:?}, but this agent was given no tools",
                        turn.tool_calls[0].name
                    ),
                );
                return finish(&spec, AgentEnd::Error(error), usage, spend);
            }
            let mut parts = Vec::new();
            if !turn.text.is_empty() {
                parts.push(Part::Text(turn.text.clone()));
            }
            for (index, call) in turn.tool_calls.into_iter().enumerate() {
                // The engine mints call ids; the wire id maps them back for the provider.
                let id = format!("call_{}_{index}", state.turns);
                parts.push(Part::ToolCall {
                    id: id.clone(),
                    wire_id: Some(call.wire_id.clone()),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                });
                state.pending.push(PendingCall {
                    id,
                    wire_id: Some(call.wire_id),
                    name: call.name,
                    arguments: call.arguments,
                    malformed: call.malformed,
                });
            }
            spec.request.messages.push(Message { role: Role::Assistant, parts });
            // Checkpoint before running tools: a rerun re-answers these calls instead of
            // paying for the model turn again.
            let pending = state.pending.clone();
            state.save(hooks, &mut spec.request.messages, pending, reprompts, invalid_calls);
            continue;
        }
        let Some(validator) = &validator else {
            return finish(&spec, AgentEnd::Ok(Value::String(turn.text)), usage, spend);
        };
        let problems = match extract_json(&turn.text) {
            Some(value) => {
                let problems: Vec<String> = validator
                    .iter_errors(&value)
                    .map(|e| format!("at '{}': {e}", e.instance_path()))
                    .collect();
                if problems.is_empty() {
                    return finish(&spec, AgentEnd::Ok(value), usage, spend);
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
            return finish(&spec, AgentEnd::Error(error), usage, spend);
        }
        reprompts += 1;
        spec.request.messages.push(Message { role: Role::Assistant, parts: vec![Part::Text(turn.text)] });
        let correction = schema::correction(&problems, spec.schema.as_ref().unwrap_or(&Value::Null));
        spec.request.messages.push(Message { role: Role::User, parts: vec![Part::Text(correction)] });
        // A repair turn is a turn boundary like any other: a rerun sends this correction
        // instead of paying for the invalid turn again.
        state.save(hooks, &mut spec.request.messages, Vec::new(), reprompts, invalid_calls);
    }
}

/// Runs one requested tool call through validation, the permission chain and the tool.
/// Returns the result text and whether it is an error result; a hard stop returns the end.
async fn answer_tool_call(
    spec: &AgentSpec,
    hooks: &dyn BudgetHooks,
    call: &PendingCall,
    invalid_calls: &mut u32,
    validators: &mut HashMap<String, Result<jsonschema::Validator, String>>,
) -> Result<(String, bool), AgentEnd> {
    let Some(tool) = spec.tools.iter().find(|t| t.name() == call.name) else {
        let names: Vec<&str> = spec.tools.iter().map(|t| t.name()).collect();
        return Ok((
            format!("error: there is no tool {:?}; the tools are: {}", call.name, names.join(", ")),
            true,
        ));
    };
    let problems: Vec<String> = match &call.malformed {
        Some(parse_error) => vec![parse_error.clone()],
        // Each tool's parameter schema is compiled once per call of the agent, not per use.
        None => match validators
            .entry(call.name.clone())
            .or_insert_with(|| jsonschema::validator_for(tool.parameters()).map_err(|e| e.to_string()))
        {
            Ok(validator) => validator
                .iter_errors(&call.arguments)
                .map(|e| format!("at '{}': {e}", e.instance_path()))
                .collect(),
            Err(e) => vec![format!("the tool's parameter schema is invalid: {e}")],
        },
    };
    if !problems.is_empty() {
        *invalid_calls += 1;
        if *invalid_calls > TOOL_CORRECTIONS {
            return Err(AgentEnd::Error(Error::new(
                ErrorCode::ToolFailed,
                format!("the model made more than {TOOL_CORRECTIONS} tool calls with invalid arguments"),
            )));
        }
        return Ok((format!("error: invalid arguments for {}: {}", call.name, problems.join("; ")), true));
    }
    match spec.permissions.decide_tool(tool.as_ref(), &call.arguments) {
        Permission::Allow => {}
        Permission::Deny(reason) => return Ok((format!("error: denied: {reason}"), true)),
        Permission::Ask => {
            let request = ApprovalRequest {
                key: format!("approve:{}:{}", &spec.call_key.to_hex()[..12], call.id),
                tool: call.name.clone(),
                arguments: call.arguments.clone(),
                timeout: spec.permissions.ask_timeout,
            };
            match hooks.approve(&request).await {
                Ok(true) => {}
                Ok(false) => return Ok((format!("error: a person denied the call to {}", call.name), true)),
                Err(error) => return Err(AgentEnd::Cancelled(error)),
            }
        }
    }
    match hooks.run_tool(tool, &call.id, call.arguments.clone()).await {
        Ok(text) => Ok((text, false)),
        Err(error) => Ok((format!("error: {}", error.message), true)),
    }
}

fn finish(spec: &AgentSpec, end: AgentEnd, usage: Usage, spend: Spend) -> AgentRun {
    let mut usage = usage;
    usage += spend.carried;
    AgentRun { end, usage, cost: spend.cost, served_by: spec.served_by.clone(), finish_reason: None }
}

struct Turn {
    text: String,
    tool_calls: Vec<RequestedCall>,
    reason: FinishReason,
    usage: Usage,
}

/// A tool call as the model requested it.
struct RequestedCall {
    wire_id: String,
    name: String,
    arguments: Value,
    /// Set when the arguments were not valid JSON: the parse error and the raw text.
    malformed: Option<String>,
}

/// One turn, retried on retryable faults with exponential backoff (or the provider's
/// Retry-After). A failure returns the end and the partial usage of the failed attempts.
async fn turn_with_retries(
    spec: &mut AgentSpec,
    spent_before: &Usage,
    budget: &dyn BudgetHooks,
    cancel: &CancellationToken,
    on_delta: &(dyn Fn(&str) + Send + Sync),
    spend: &mut Spend,
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
                let timing = Backoff { base: spec.retry_base, ..spec.backoff };
                let backoff = timing.delay(spec.call_key.as_bytes(), attempt, error.retry_after_ms);
                attempt += 1;
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = cancel.cancelled() => {
                        let error = Error::new(ErrorCode::Cancelled, "cancelled while waiting to retry");
                        return Err((AgentEnd::Cancelled(error), wasted));
                    }
                }
            }
            Err((AgentEnd::Error(error), partial))
                if fails_over(error.code) && !spec.fallbacks.is_empty() =>
            {
                // Retries are spent: move to the next declared fallback. The call keeps its
                // identity (the requested model); only `served_by` changes.
                wasted += partial;
                spend.carry(spec.price, &wasted);
                wasted = Usage::default();
                let next = spec.fallbacks.remove(0);
                tracing::warn!(from = %spec.served_by, to = %next.served_by, code = %error.code, "failing over");
                spec.provider = next.provider;
                spec.served_by = next.served_by;
                spec.request.model = next.model;
                spec.price = next.price;
                attempt = 0;
            }
            Err((end, partial)) => {
                wasted += partial;
                return Err((end, wasted));
            }
        }
    }
}

async fn one_turn(
    spec: &AgentSpec,
    spent_before: &Usage,
    budget: &dyn BudgetHooks,
    cancel: &CancellationToken,
    on_delta: &(dyn Fn(&str) + Send + Sync),
) -> Result<Turn, (AgentEnd, Usage)> {
    if cancel.is_cancelled() {
        // Stopped before this turn was sent: it costs nothing.
        let error = Error::new(ErrorCode::Cancelled, "the call was cancelled");
        return Err((AgentEnd::Cancelled(error), Usage::default()));
    }
    let request = match cost::turn_request(spec, spent_before, budget) {
        Ok(request) => request,
        Err(error) => return Err((AgentEnd::Limit(error), Usage::default())),
    };
    let stream_cancel = cancel.child_token();
    let mut stream = spec.provider.stream(request, stream_cancel.clone());
    let mut text = String::new();
    // Characters streamed so far of every kind the provider bills as output: text,
    // reasoning and tool-call arguments.
    let mut streamed = 0usize;
    let mut tool_calls = Vec::new();
    let mut live = Usage::default();
    // One registration for the whole turn, not one per event.
    let cancelled = cancel.cancelled();
    tokio::pin!(cancelled);
    loop {
        let event = tokio::select! {
            biased;
            _ = &mut cancelled => {
                stream_cancel.cancel();
                let partial = estimate_partial(&spec.request, streamed, live);
                return Err((AgentEnd::Cancelled(Error::new(ErrorCode::Cancelled, "the call was cancelled")), partial));
            }
            event = stream.next() => event,
        };
        let Some(event) = event else {
            let error = Error::new(ErrorCode::Transport, "the stream ended without a terminal event");
            return Err((AgentEnd::Error(error), estimate_partial(&spec.request, streamed, live)));
        };
        match event {
            ChatEvent::TextDelta(delta) => {
                on_delta(&delta);
                streamed += delta.chars().count();
                text.push_str(&delta);
            }
            ChatEvent::Usage(usage) => live = usage,
            ChatEvent::ToolCallEnd { wire_id, name, arguments } => {
                tool_calls.push(RequestedCall { wire_id, name, arguments, malformed: None })
            }
            ChatEvent::ToolCallInvalid { wire_id, name, raw_arguments, error } => {
                tool_calls.push(tools::malformed_call(wire_id, name, &raw_arguments, &error))
            }
            ChatEvent::Finish { reason, usage } => {
                return Ok(Turn { text, tool_calls, reason, usage });
            }
            ChatEvent::Error(error) => {
                let partial = estimate_partial(&spec.request, streamed, live);
                return Err((AgentEnd::Error(error), partial));
            }
            ChatEvent::ReasoningDelta(delta) => streamed += delta.chars().count(),
            ChatEvent::ToolCallDelta { arguments_delta, .. } => streamed += arguments_delta.chars().count(),
            ChatEvent::ToolCallStart { .. } | ChatEvent::ProviderRaw { .. } => {}
        }
        // The live cut: price what this call has consumed so far and stop the stream the
        // moment it would cross the ceiling.
        if let Some(price) = spec.price {
            let mut so_far = *spent_before;
            so_far += estimate_partial(&spec.request, streamed, live);
            if budget.would_cross(price.cost(&so_far)) {
                stream_cancel.cancel();
                let error =
                    Error::new(ErrorCode::BudgetExhausted, "the stream was cut at the budget ceiling");
                return Err((AgentEnd::Limit(error), estimate_partial(&spec.request, streamed, live)));
            }
        }
    }
}

/// Usage of an unfinished turn, marked approximate: see [`cost::partial_usage`].
fn estimate_partial(request: &ChatRequest, streamed_chars: usize, live: Usage) -> Usage {
    cost::partial_usage(request, streamed_chars, live)
}

/// About four characters a token, at least one for any text.
fn estimate_tokens(text: &str) -> u64 {
    crate::provider::estimate_tokens_for_chars(text.chars().count())
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

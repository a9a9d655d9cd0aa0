//! The turns of one agent invocation: the loop that answers tool calls, checks the turn and
//! tool-call limits and the budget guard, runs each turn through [`super::attempt`], validates
//! structured output with at most two re-prompts, and checkpoints at every turn boundary.

use std::collections::HashMap;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::attempt::turn_with_retries;
use super::ledger::Ledger;
use super::{
    AgentEnd, AgentRun, AgentSpec, ApprovalRequest, BudgetHooks, PendingCall, Permission, SCHEMA_REPROMPTS,
    Spend, TOOL_CORRECTIONS, TurnReport, context_bound, ending, extract_json, schema,
};
use crate::error::{Error, ErrorCode};
use crate::provider::{FinishReason, Message, Part, Role, StopReason, ToolChoice, ToolSpec};

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
    let mut ledger = Ledger::new();
    let mut state = spec.resume_from.take().unwrap_or_default();
    if !state.messages.is_empty() {
        spec.request.messages = std::mem::take(&mut state.messages);
    }
    if state.spend.is_empty() && state.usage.total_tokens() > 0 {
        // A checkpoint written before spend was kept: its turns at the requested model.
        let cost = spec.price.map(|p| p.cost(&state.usage));
        state.spend = Spend::of(&spec.served_by, state.usage, cost);
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
    // With native structured output and tools, the schema goes on the answering turn only:
    // tool turns go out without it (it biases models away from calling their tools).
    let native_schema = if spec.tools.is_empty() { None } else { spec.request.response_schema.take() };
    // A call held to tool calls (the orchestrator, which ends through its `finish` tool) has
    // no answer turn to give: its limits end it at once.
    let may_answer = spec.request.tool_choice == ToolChoice::Auto;
    if state.finishing.is_some() || state.answering {
        ending::answering_turn(&mut spec.request, native_schema.as_ref());
    }
    let validator = match spec.schema.as_ref().map(jsonschema::validator_for).transpose() {
        Ok(v) => v,
        Err(e) => {
            let error = Error::validation(format!("the agent's schema is not a valid JSON Schema: {e}"));
            return finish(&spec, AgentEnd::Error(error), &ledger);
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
            let mut skipped = 0;
            for call in &pending {
                if let Some(max) = spec.max_tool_calls.filter(|&max| state.tool_calls >= max) {
                    if !may_answer {
                        let error = Error::new(
                            ErrorCode::TurnLimit,
                            format!("reached the limit of {max} tool calls"),
                        );
                        return finish(&spec, AgentEnd::Limit(error), &ledger);
                    }
                    // Past the limit: the call is answered as skipped, and the agent gets one
                    // final turn without tools to answer from what it has.
                    state.finishing.get_or_insert_with(|| format!("reached the limit of {max} tool calls"));
                    skipped += 1;
                    results.push(Part::ToolResult {
                        id: call.id.clone(),
                        wire_id: call.wire_id.clone(),
                        content: ending::skipped_result(max),
                        is_error: true,
                    });
                    continue;
                }
                state.tool_calls += 1;
                let (content, is_error) =
                    match answer_tool_call(&spec, hooks, call, &mut invalid_calls, &mut validators).await {
                        Ok(answer) => answer,
                        Err(end) => return finish(&spec, end, &ledger),
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
                return finish(&spec, AgentEnd::Ok(value), &ledger);
            }
            if let Some(limit) = &state.finishing {
                results.push(Part::Text(ending::final_instruction(limit, skipped)));
                ending::answering_turn(&mut spec.request, native_schema.as_ref());
            }
            spec.request.messages.push(Message { role: Role::User, parts: results });
            if let Err(overflow) = context_bound::bound_context(&mut spec.request, spec.max_context_tokens) {
                let error = overflow.error(spec.max_context_tokens);
                return finish(&spec, AgentEnd::Error(error), &ledger);
            }
            bounded = true;
            state.save(hooks, &mut spec.request.messages, Vec::new(), reprompts, invalid_calls);
        }
        if state.turns >= spec.max_turns && state.finishing.is_none() {
            let limit = format!("reached the limit of {} turns", spec.max_turns);
            let worked = spec.request.messages.last().is_some_and(|m| {
                m.role == Role::User && m.parts.iter().any(|p| matches!(p, Part::ToolResult { .. }))
            });
            if !worked || !may_answer {
                return finish(&spec, AgentEnd::Limit(Error::new(ErrorCode::TurnLimit, limit)), &ledger);
            }
            // The last turn's tool results are in: one final turn without tools answers from
            // them, so the paid tool work is not lost.
            if let Some(last) = spec.request.messages.last_mut() {
                last.parts.push(Part::Text(ending::final_instruction(&limit, 0)));
            }
            state.finishing = Some(limit);
            ending::answering_turn(&mut spec.request, native_schema.as_ref());
            state.save(hooks, &mut spec.request.messages, Vec::new(), reprompts, invalid_calls);
        }
        if !hooks.can_start_turn() {
            let error =
                Error::new(ErrorCode::BudgetExhausted, "the budget ceiling leaves nothing for another turn");
            return finish(&spec, AgentEnd::Limit(error), &ledger);
        }
        let Some(slot) = hooks.turn_slot().await else {
            let error =
                Error::new(ErrorCode::Cancelled, "the call was cancelled while waiting for a model slot");
            return finish(&spec, AgentEnd::Cancelled(error), &ledger);
        };
        state.turns += 1;
        // Idempotent: a conversation bounded since it last changed needs no second pass.
        if !bounded
            && let Err(overflow) = context_bound::bound_context(&mut spec.request, spec.max_context_tokens)
        {
            let error = overflow.error(spec.max_context_tokens);
            return finish(&spec, AgentEnd::Error(error), &ledger);
        }
        bounded = false;
        *last = None;
        hooks.turn_started(state.turns, &spec.request);
        let mark = ledger.mark();
        let mut on_charged = |messages: &mut Vec<Message>, charged: &Spend| {
            state.save_charged(hooks, messages, charged, reprompts, invalid_calls)
        };
        let turn = turn_with_retries(&mut spec, &mut ledger, hooks, cancel, on_delta, &mut on_charged).await;
        drop(slot);
        let (charged, cost) = ledger.since(mark);
        let turn = match turn {
            Ok(turn) => {
                let report = TurnReport {
                    ok: true,
                    served_by: &spec.served_by,
                    usage: turn.usage,
                    cost,
                    finish_reason: Some(turn.reason.as_str()),
                    text: Some(&turn.text),
                };
                hooks.turn_ended(state.turns, &report);
                turn
            }
            Err(end) => {
                let report = TurnReport {
                    ok: false,
                    served_by: &spec.served_by,
                    usage: charged,
                    cost,
                    finish_reason: None,
                    text: None,
                };
                hooks.turn_ended(state.turns, &report);
                return match (end, &state.finishing) {
                    // A final answer turn that failed keeps the limit the call earned.
                    (AgentEnd::Error(_), Some(limit)) => {
                        let error = Error::new(ErrorCode::TurnLimit, limit.clone());
                        finish(&spec, AgentEnd::Limit(error), &ledger)
                    }
                    (end, _) => finish(&spec, end, &ledger),
                };
            }
        };
        state.usage += turn.usage;
        state.spend.merge(&ledger.spend_since(mark));
        *last = Some(StopReason::from(&turn.reason));
        if turn.reason == FinishReason::ContentFilter {
            let error =
                Error::new(ErrorCode::ContentFilter, "the provider's content filter stopped the output");
            return finish(&spec, AgentEnd::Error(error), &ledger);
        }
        if turn.reason == FinishReason::Refusal {
            let message = match turn.text.trim() {
                "" => "the model refused to answer".to_owned(),
                said => format!("the model refused to answer: {said}"),
            };
            return finish(&spec, AgentEnd::Error(Error::new(ErrorCode::Refused, message)), &ledger);
        }
        if turn.tool_calls.is_empty() && turn.reason == FinishReason::Length {
            // Cut off at the output limit: never an `ok` answer, the cut text is kept.
            let error = Error::new(ErrorCode::TurnLimit, "the answer was cut off at the output-token limit");
            return finish_partial(&spec, AgentEnd::Limit(error), &ledger, turn.text);
        }
        if let Some(limit) = &state.finishing {
            // The final answer turn: its answer ends the call `ok`, anything else `limit`.
            let error = Error::new(ErrorCode::TurnLimit, limit.clone());
            if !turn.tool_calls.is_empty() || turn.text.trim().is_empty() {
                return finish_partial(&spec, AgentEnd::Limit(error), &ledger, turn.text);
            }
            let Some(validator) = &validator else {
                return finish(&spec, AgentEnd::Ok(Value::String(turn.text)), &ledger);
            };
            return match extract_json(&turn.text) {
                Some(value) if validator.is_valid(&value) => finish(&spec, AgentEnd::Ok(value), &ledger),
                _ => finish_partial(&spec, AgentEnd::Limit(error), &ledger, turn.text),
            };
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
                return finish(&spec, AgentEnd::Error(error), &ledger);
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
            return finish(&spec, AgentEnd::Ok(Value::String(turn.text)), &ledger);
        };
        let problems = match extract_json(&turn.text) {
            Some(value) => {
                let problems: Vec<String> = validator
                    .iter_errors(&value)
                    .map(|e| format!("at '{}': {e}", e.instance_path()))
                    .collect();
                if problems.is_empty() {
                    return finish(&spec, AgentEnd::Ok(value), &ledger);
                }
                problems
            }
            None => vec!["the reply is not a JSON value".to_owned()],
        };
        if native_schema.is_some() && !state.answering {
            // The model stopped calling tools with an answer that does not match: the
            // answering turn asks for it again, now with the native schema and tools withheld.
            state.answering = true;
            spec.request.messages.push(Message { role: Role::Assistant, parts: vec![Part::Text(turn.text)] });
            spec.request.messages.push(Message {
                role: Role::User,
                parts: vec![Part::Text(ending::ANSWER_INSTRUCTION.to_owned())],
            });
            ending::answering_turn(&mut spec.request, native_schema.as_ref());
            state.save(hooks, &mut spec.request.messages, Vec::new(), reprompts, invalid_calls);
            continue;
        }
        if reprompts >= SCHEMA_REPROMPTS {
            let error = Error::new(
                ErrorCode::SchemaMismatch,
                format!(
                    "output did not match the schema after {reprompts} re-prompts: {}",
                    problems.join("; ")
                ),
            );
            return finish(&spec, AgentEnd::Error(error), &ledger);
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

fn finish(spec: &AgentSpec, end: AgentEnd, ledger: &Ledger) -> AgentRun {
    finish_with(spec, end, ledger, None)
}

/// [`finish`] of a call whose answer did not make it: `text` is kept as the partial answer.
fn finish_partial(spec: &AgentSpec, end: AgentEnd, ledger: &Ledger, text: String) -> AgentRun {
    finish_with(spec, end, ledger, Some(text).filter(|t| !t.is_empty()))
}

fn finish_with(spec: &AgentSpec, end: AgentEnd, ledger: &Ledger, partial: Option<String>) -> AgentRun {
    AgentRun {
        partial,
        end,
        usage: ledger.usage(),
        cost: ledger.cost(),
        priced: ledger.spent(),
        served_by: spec.served_by.clone(),
        finish_reason: None,
        attempts: ledger.journaled_attempts(),
        refused_attempts: ledger.refused(),
        unanswered_attempts: ledger.unanswered(),
    }
}

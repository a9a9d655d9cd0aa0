//! One model turn on the wire: its attempts, retried with backoff (or the provider's
//! `Retry-After`) on retryable faults and moved to the next declared fallback once retries are
//! spent. Every attempt goes through the call's [`Ledger`]: reserved by the turn guard against
//! what the call has already spent (failed attempts included), observed as it streams (the
//! live cut reads the running total), and settled or abandoned when it ends.

use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::ledger::Ledger;
use super::spec::fails_over;
use super::{AgentEnd, AgentSpec, Backoff, BudgetHooks, Spend, cost};
use crate::error::{Error, ErrorCode};
use crate::provider::{ChatEvent, FinishReason, Message};
use crate::usage::Usage;

/// A model turn that finished.
pub(super) struct Turn {
    pub(super) text: String,
    pub(super) tool_calls: Vec<RequestedCall>,
    pub(super) reason: FinishReason,
    /// What the turn used: the finished attempt's billed usage plus what its failed attempts
    /// were charged.
    pub(super) usage: Usage,
}

/// A tool call as the model requested it.
pub(super) struct RequestedCall {
    pub(super) wire_id: String,
    pub(super) name: String,
    pub(super) arguments: Value,
    /// Set when the arguments were not valid JSON: the parse error and the raw text.
    pub(super) malformed: Option<String>,
}

/// A tool call whose argument text is not valid JSON: kept in the conversation with empty
/// arguments (every wire accepts an object) and answered with the parse error, which names the
/// text the model sent (cut to a few hundred characters).
fn malformed_call(wire_id: String, name: String, raw: &str, error: &str) -> RequestedCall {
    const SHOWN: usize = 300;
    let shown: String = raw.chars().take(SHOWN).collect();
    let cut = if raw.chars().count() > SHOWN { "..." } else { "" };
    RequestedCall {
        wire_id,
        name,
        arguments: Value::Object(Default::default()),
        malformed: Some(format!("the arguments are not valid JSON ({error}): {shown:?}{cut}")),
    }
}

/// What the turn's failed attempts were charged so far, by the model that served each, is
/// handed to this (with the conversation), to be made durable before the next attempt goes out.
pub(super) type OnCharged<'a> = &'a mut (dyn FnMut(&mut Vec<Message>, &Spend) + Send);

/// One turn, retried on retryable faults and failed over to the declared fallbacks. Each
/// failed attempt is charged in `ledger` when it ends, so the next attempt's guard grants only
/// what the ceiling still leaves, and what the turn's failed attempts were charged so far goes
/// to `on_charged` before the retry, so a process killed mid-turn has not lost it.
pub(super) async fn turn_with_retries(
    spec: &mut AgentSpec,
    ledger: &mut Ledger,
    budget: &dyn BudgetHooks,
    cancel: &CancellationToken,
    on_delta: &(dyn Fn(&str) + Send + Sync),
    on_charged: OnCharged<'_>,
) -> Result<Turn, AgentEnd> {
    let mut attempt = 0;
    let mut wasted = Usage::default();
    let mark = ledger.mark();
    loop {
        match one_attempt(spec, ledger, budget, cancel, on_delta).await {
            Ok(mut turn) => {
                turn.usage += wasted;
                return Ok(turn);
            }
            Err((AgentEnd::Error(error), charged)) if error.retryable && attempt < spec.max_retries => {
                wasted += charged;
                if charged.total_tokens() > 0 {
                    on_charged(&mut spec.request.messages, &ledger.spend_since(mark));
                }
                let timing = Backoff { base: spec.retry_base, ..spec.backoff };
                let backoff = timing.delay(spec.call_key.as_bytes(), attempt, error.retry_after_ms);
                attempt += 1;
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = cancel.cancelled() => {
                        let error = Error::new(ErrorCode::Cancelled, "cancelled while waiting to retry");
                        return Err(AgentEnd::Cancelled(error));
                    }
                }
            }
            Err((AgentEnd::Error(error), charged))
                if fails_over(error.code) && !spec.fallbacks.is_empty() =>
            {
                // Retries are spent: move to the next declared fallback. The call keeps its
                // identity (the requested model); only `served_by` changes. What the abandoned
                // model's attempts cost stays in the ledger at that model's price.
                wasted += charged;
                if charged.total_tokens() > 0 {
                    on_charged(&mut spec.request.messages, &ledger.spend_since(mark));
                }
                let next = spec.fallbacks.remove(0);
                tracing::warn!(from = %spec.served_by, to = %next.served_by, code = %error.code, "failing over");
                spec.provider = next.provider;
                spec.served_by = next.served_by;
                spec.request.model = next.model;
                spec.price = next.price;
                attempt = 0;
            }
            Err((end, _)) => return Err(end),
        }
    }
}

/// One attempt: the turn guard, the request, the stream with its live cut. A failure returns
/// the end and what the ledger charged for the attempt.
async fn one_attempt(
    spec: &AgentSpec,
    ledger: &mut Ledger,
    budget: &dyn BudgetHooks,
    cancel: &CancellationToken,
    on_delta: &(dyn Fn(&str) + Send + Sync),
) -> Result<Turn, (AgentEnd, Usage)> {
    if cancel.is_cancelled() {
        // Stopped before this attempt was sent: it costs nothing.
        let error = Error::new(ErrorCode::Cancelled, "the call was cancelled");
        return Err((AgentEnd::Cancelled(error), Usage::default()));
    }
    let request = match cost::turn_request(spec, ledger.spent(), budget) {
        Ok(request) => request,
        Err(error) => return Err((AgentEnd::Limit(error), Usage::default())),
    };
    // The output cap the attempt is sent with: an attempt sent and never answered is charged
    // its whole grant, this cap included.
    let output_cap = match &spec.price {
        Some(price) => cost::output_cap(&request, price),
        None => request.max_output_tokens.unwrap_or(cost::DEFAULT_MAX_OUTPUT_TOKENS),
    };
    // Last before the request leaves: a driver that lost the run (its lease lapsed, and
    // another driver may be asking this very call) sends nothing.
    let dispatchable = tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(Error::new(ErrorCode::Cancelled, "the call was cancelled")),
        ready = budget.dispatchable() => ready,
    };
    if let Err(error) = dispatchable {
        return Err((AgentEnd::Cancelled(error), Usage::default()));
    }
    ledger.open(&spec.served_by, spec.price, output_cap);
    budget.attempt_started();
    let stream_cancel = cancel.child_token();
    let mut stream = spec.provider.stream(request, stream_cancel.clone());
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    // One registration for the whole attempt, not one per event.
    let cancelled = cancel.cancelled();
    tokio::pin!(cancelled);
    loop {
        let event = tokio::select! {
            biased;
            _ = &mut cancelled => {
                stream_cancel.cancel();
                // The provider ran the request: its input counts even before a byte arrived.
                let charged = ledger.abandon_observed(&spec.request);
                let error = Error::new(ErrorCode::Cancelled, "the call was cancelled");
                return Err((AgentEnd::Cancelled(error), charged));
            }
            event = stream.next() => event,
        };
        let event = match event {
            Some(ChatEvent::Finish { reason, usage }) => {
                let usage = ledger.settle(usage);
                return Ok(Turn { text, tool_calls, reason, usage });
            }
            Some(ChatEvent::Error(error)) => {
                return Err((AgentEnd::Error(error), failed(ledger, spec, budget)));
            }
            None => {
                let error = Error::new(ErrorCode::Transport, "the stream ended without a terminal event");
                return Err((AgentEnd::Error(error), failed(ledger, spec, budget)));
            }
            Some(event) => event,
        };
        let so_far = ledger.observe(&event, &spec.request);
        match event {
            ChatEvent::TextDelta(delta) => {
                on_delta(&delta);
                text.push_str(&delta);
            }
            ChatEvent::ToolCallEnd { wire_id, name, arguments } => {
                tool_calls.push(RequestedCall { wire_id, name, arguments, malformed: None })
            }
            ChatEvent::ToolCallInvalid { wire_id, name, raw_arguments, error } => {
                tool_calls.push(malformed_call(wire_id, name, &raw_arguments, &error))
            }
            _ => {}
        }
        // The live cut: what the call has spent so far, this attempt's running estimate
        // included, put on its reservation; the stream stops the moment it would cross.
        if let Some(so_far) = so_far
            && budget.would_cross(so_far)
        {
            stream_cancel.cancel();
            let charged = ledger.abandon_observed(&spec.request);
            let error = Error::new(ErrorCode::BudgetExhausted, "the stream was cut at the budget ceiling");
            return Err((AgentEnd::Limit(error), charged));
        }
    }
}

/// Abandons a failed attempt in the ledger (its observed usage is spent now, one sent and never
/// answered its whole grant, a refusal before any stream byte nothing) and puts the call's spend on its reservation at once, where
/// siblings and the next attempt's guard see it.
fn failed(ledger: &mut Ledger, spec: &AgentSpec, budget: &dyn BudgetHooks) -> Usage {
    let charged = ledger.abandon(&spec.request);
    if spec.price.is_some() && charged.total_tokens() > 0 {
        budget.would_cross(ledger.spent());
    }
    charged
}

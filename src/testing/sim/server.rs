//! The HTTP side: one axum server on a thread and runtime of its own (so it outlives any
//! runtime a test drops to simulate a crash), three routes, and the attempt log.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use serde_json::json;

use super::bill::{Attempt, AttemptEnd, price};
use super::config::SimConfig;
use super::faults::{Fault, RetryAfter};
use super::request::{SimRequest, WireDialect, output_tokens};
use super::wire::{Ending, Output, Render};
use crate::usage::Usage;

/// The log the routes write and the simulator reads.
#[derive(Default)]
pub(crate) struct Log {
    pub(crate) attempts: Vec<(Attempt, Arc<AtomicBool>)>,
    /// Attempts seen per (tag, turn): the next attempt's number.
    counters: HashMap<(String, u32), u32>,
    pub(crate) segment: u32,
}

pub(crate) struct Shared {
    pub(crate) config: SimConfig,
    pub(crate) log: Mutex<Log>,
    /// The client side of every attempt the simulator's adapters sent: which went unanswered.
    pub(crate) probe: Arc<crate::provider::AttemptProbe>,
}

impl Shared {
    pub(crate) fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let route = |dialect: WireDialect| {
        post(move |State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes| async move {
            let segment = shared.log().segment;
            serve(&shared, dialect, segment, &headers, &body)
        })
    };
    let in_segment = |dialect: WireDialect| {
        post(
            move |State(shared): State<Arc<Shared>>,
                  Path(segment): Path<u32>,
                  headers: HeaderMap,
                  body: Bytes| async move { serve(&shared, dialect, segment, &headers, &body) },
        )
    };
    Router::new()
        .route("/v1/messages", route(WireDialect::Anthropic))
        .route("/v1/chat/completions", route(WireDialect::OpenAiChat))
        .route("/v1/responses", route(WireDialect::OpenAiResponses))
        .route("/segment/{segment}/v1/messages", in_segment(WireDialect::Anthropic))
        .route("/segment/{segment}/v1/chat/completions", in_segment(WireDialect::OpenAiChat))
        .route("/segment/{segment}/v1/responses", in_segment(WireDialect::OpenAiResponses))
        .layer(axum::extract::DefaultBodyLimit::max(64 << 20))
        .with_state(shared)
}

/// The answer to one request.
fn serve(shared: &Shared, dialect: WireDialect, segment: u32, headers: &HeaderMap, body: &[u8]) -> Response {
    let client_id = headers
        .get(crate::provider::AttemptProbe::HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let request = match SimRequest::parse(dialect, body) {
        Ok(request) => request,
        Err(message) => {
            let body =
                json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}});
            return (StatusCode::BAD_REQUEST, body.to_string()).into_response();
        }
    };
    let tag = request.directive.as_ref().map(|d| d.tag.clone());
    let mut log = shared.log();
    let counter = log.counters.entry((tag.clone().unwrap_or_default(), request.turn)).or_insert(0);
    let attempt_no = *counter;
    *counter += 1;
    let call_attempt = log.attempts.iter().filter(|(a, _)| a.tag == tag).count();
    let scripted = tag.as_ref().and_then(|t| shared.config.scripted.get(t)).and_then(|f| f.get(call_attempt));
    let fault = match (&tag, scripted) {
        (_, Some(fault)) => *fault,
        (Some(tag), None) => {
            shared.config.faults.draw(shared.config.seed, tag, request.turn, attempt_no, dialect)
        }
        (None, None) => Fault::None,
    };
    let plan = plan(&request, fault);
    let price_of = shared.config.prices.get(&request.model);
    let billed = match plan.end {
        AttemptEnd::Refused => Usage::default(),
        _ => Usage {
            input_tokens: request.input_tokens,
            output_tokens: plan.output_tokens,
            ..Usage::default()
        },
    };
    let slack = Usage { input_tokens: request.body_tokens + 1, output_tokens: 4, ..Usage::default() };
    let drop_tolerance = price(price_of, &slack);
    let unanswered_tolerance = grant(price_of, &request).sub_or_zero(price(price_of, &billed));
    let tolerance = if matches!(plan.end, AttemptEnd::Unreported | AttemptEnd::Broken) {
        drop_tolerance
    } else {
        crate::money::Money::ZERO
    };
    let seq = log.attempts.len() as u64;
    let delivered = Arc::new(AtomicBool::new(false));
    let attempt = Attempt {
        seq,
        segment,
        dialect,
        model: request.model.clone(),
        tag,
        turn: request.turn,
        attempt: attempt_no,
        fault,
        end: plan.end,
        usage: billed,
        cost: price(price_of, &billed),
        tolerance,
        drop_tolerance,
        unanswered_tolerance,
        client_id,
        unanswered: false,
        delivered: false,
        answered: plan.answered,
    };
    log.attempts.push((attempt, delivered.clone()));
    drop(log);
    if let Fault::Status { status, retry_after } = fault {
        return refusal(dialect, status, retry_after, &delivered);
    }
    let rendered = Render {
        dialect,
        model: &request.model,
        id: seq,
        output: &plan.output,
        input_tokens: request.input_tokens,
        output_tokens: plan.output_tokens,
        ending: plan.ending,
    }
    .render();
    let chunks =
        futures::stream::iter(rendered.chunks.into_iter().map(|c| Ok::<_, std::io::Error>(Bytes::from(c))));
    let done = futures::stream::once(async move {
        delivered.store(true, Ordering::SeqCst);
        Ok(Bytes::new())
    });
    // A broken stream ends mid-message, without its terminal event: what a client sees when a
    // proxy or the provider drops the stream (a reset mid-body would also discard what the
    // client had not read yet, which no provider bills as undelivered).
    let body = match plan.ending {
        Ending::Stall => Body::from_stream(chunks.chain(done).chain(futures::stream::pending())),
        _ => Body::from_stream(chunks.chain(done)),
    };
    let mut response = Response::new(body);
    response.headers_mut().insert("content-type", HeaderValue::from_static("text/event-stream"));
    response
}

/// What a client that never saw the response to `request` charges at most: its whole grant,
/// the body's input estimate (which bounds the client's) plus the output cap it sent, or the
/// default cap (`DEFAULT_MAX_OUTPUT_TOKENS`) when it sent none.
pub(crate) fn grant(price_of: Option<&crate::model::Price>, request: &SimRequest) -> crate::money::Money {
    let grant = Usage {
        input_tokens: request.body_tokens + 1,
        output_tokens: request.max_tokens.unwrap_or(8192),
        ..Usage::default()
    };
    price(price_of, &grant)
}

/// An attempt the client sent and recorded unanswered but the server never saw arrive (a
/// request lost on the way, or one a killed client never finished writing): billed nothing,
/// and the client may have charged it up to its grant. `None` for a body it cannot read.
pub(crate) fn unseen(shared: &Shared, seq: u64, client_id: u64, path: &str, body: &[u8]) -> Option<Attempt> {
    let dialect = if path.ends_with("/messages") {
        WireDialect::Anthropic
    } else if path.ends_with("/chat/completions") {
        WireDialect::OpenAiChat
    } else {
        WireDialect::OpenAiResponses
    };
    let request = SimRequest::parse(dialect, body).ok()?;
    let segment = path
        .strip_prefix("/segment/")
        .and_then(|rest| rest.split('/').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| shared.log().segment);
    let unanswered_tolerance = grant(shared.config.prices.get(&request.model), &request);
    Some(Attempt {
        seq,
        segment,
        dialect,
        model: request.model.clone(),
        tag: request.directive.as_ref().map(|d| d.tag.clone()),
        turn: request.turn,
        attempt: 0,
        fault: Fault::None,
        end: AttemptEnd::Refused,
        usage: Usage::default(),
        cost: crate::money::Money::ZERO,
        tolerance: unanswered_tolerance,
        drop_tolerance: crate::money::Money::ZERO,
        unanswered_tolerance,
        client_id: Some(client_id),
        unanswered: true,
        delivered: false,
        answered: false,
    })
}

fn refusal(dialect: WireDialect, status: u16, retry_after: RetryAfter, delivered: &AtomicBool) -> Response {
    let (kind, message) = match status {
        429 => ("rate_limit_error", "rate limited"),
        529 => ("overloaded_error", "Overloaded"),
        _ => ("api_error", "internal server error"),
    };
    let body = match dialect {
        WireDialect::Anthropic => json!({"type": "error", "error": {"type": kind, "message": message}}),
        _ => {
            let kind = if status == 429 { "rate_limit_exceeded" } else { "server_error" };
            json!({"error": {"message": message, "type": kind, "code": null}})
        }
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, body.to_string()).into_response();
    let header = match retry_after {
        RetryAfter::None => None,
        RetryAfter::Seconds(s) => Some(("retry-after", s)),
        RetryAfter::Millis(ms) => Some(("retry-after-ms", ms)),
    };
    if let Some((name, value)) = header
        && let Ok(value) = HeaderValue::from_str(&value.to_string())
    {
        response.headers_mut().insert(name, value);
    }
    delivered.store(true, Ordering::SeqCst);
    response
}

/// What an attempt streams and how it ends.
struct Plan {
    output: Output,
    ending: Ending,
    end: AttemptEnd,
    output_tokens: u64,
    answered: bool,
}

/// An orchestrator's turn of an orchestration directive ([`Directive::children`]): spawn
/// every child in one `parallel_agents` call, then await the admitted ones, then `finish`; a
/// turn that offers only `finish` (the finalization at the budget cap) finishes.
fn orchestration_turn(request: &SimRequest, directive: &super::request::Directive) -> Option<Output> {
    let offers = |name: &str| request.offered.iter().any(|t| t == name);
    if directive.children == 0 || !offers("finish") {
        return None;
    }
    let call = |name: &str, arguments: serde_json::Value| {
        Some(Output::ToolCall { name: name.to_owned(), arguments: arguments.to_string() })
    };
    let handles = request.handles.clone().unwrap_or_default();
    if request.turn == 0 && offers("parallel_agents") {
        let profile = directive.profile.as_deref().unwrap_or("worker");
        let children: Vec<serde_json::Value> = (0..directive.children)
            .map(|i| {
                let child = super::request::Directive::text(format!("c{i}"), directive.out);
                json!({"profile": profile, "prompt": format!("Do task {i}. {}", child.render())})
            })
            .collect();
        call("parallel_agents", json!({ "children": children }))
    } else if request.turn == 1 && !handles.is_empty() && offers("await_all") {
        call("await_all", json!({ "handles": handles }))
    } else {
        call("finish", json!({ "result": words(directive.out).trim_end() }))
    }
}

/// The text of `tokens` simulator tokens: four characters each.
fn words(tokens: u32) -> String {
    (0..tokens).map(|i| format!("t{:02} ", i % 100)).collect()
}

fn plan(request: &SimRequest, fault: Fault) -> Plan {
    let directive = request.directive.clone().unwrap_or_else(|| super::request::Directive::text("", 5));
    let cap = request.max_tokens.unwrap_or(4096);
    let orchestration = orchestration_turn(request, &directive);
    let tool_turn = orchestration.is_some() || request.turn < directive.tools;
    let mut output = if let Some(output) = orchestration {
        output
    } else if tool_turn {
        let name = request.tool.clone().unwrap_or_else(|| "list_dir".to_owned());
        Output::ToolCall { name, arguments: json!({"path": "."}).to_string() }
    } else if directive.json {
        let first_answer = request.turn == directive.tools;
        if directive.repair && first_answer {
            Output::Text(json!({"answer": 0}).to_string())
        } else {
            Output::Text(json!({"answer": words(directive.out).trim_end()}).to_string())
        }
    } else {
        Output::Text(words(directive.out))
    };
    let mut ending = Ending::Finished { usage: true };
    let mut cut_at = None;
    match fault {
        Fault::None | Fault::Status { .. } => {}
        Fault::Drop { after } => (ending, cut_at) = (Ending::Broken, Some(after)),
        Fault::Stall { after } => (ending, cut_at) = (Ending::Stall, Some(after)),
        Fault::Malformed { after } => (ending, cut_at) = (Ending::Malformed, Some(after)),
        Fault::StreamError { after } => (ending, cut_at) = (Ending::StreamError, Some(after)),
        Fault::UsageMissing => ending = Ending::Finished { usage: false },
        Fault::Refusal => {
            ending = Ending::Refused;
            output = match request.dialect {
                WireDialect::Anthropic => Output::Refusal(String::new()),
                _ => Output::Refusal("I can't help with that request.".to_owned()),
            };
        }
        Fault::MaxTokens => {
            output =
                Output::Text(words(u32::try_from(cap.min(1 << 20)).unwrap_or(u32::MAX).saturating_add(8)));
        }
    }
    // A provider never generates past the request's cap.
    if output_tokens(output.chars()) > cap {
        output = output.truncated(usize::try_from(cap.saturating_mul(4)).unwrap_or(usize::MAX));
        if matches!(ending, Ending::Finished { .. }) {
            ending = Ending::Length;
        }
    }
    if let Some(after) = cut_at {
        output = output.truncated(after as usize * 4);
    }
    let end = match ending {
        _ if fault.is_refusal_before_stream() => AttemptEnd::Refused,
        Ending::Finished { usage: true } | Ending::Length | Ending::Refused => AttemptEnd::Reported,
        // Anthropic reports it all at the end; OpenAI dialects report nothing.
        Ending::Finished { usage: false } if request.dialect == WireDialect::Anthropic => {
            AttemptEnd::Reported
        }
        Ending::Finished { usage: false } => AttemptEnd::Unreported,
        // A failed Responses stream reports its usage in `response.failed`.
        Ending::StreamError if request.dialect == WireDialect::OpenAiResponses => AttemptEnd::Reported,
        Ending::Broken | Ending::Stall | Ending::Malformed | Ending::StreamError => AttemptEnd::Broken,
    };
    let answered = !tool_turn && matches!(ending, Ending::Finished { .. });
    Plan { output_tokens: output_tokens(output.chars()), output, ending, end, answered }
}

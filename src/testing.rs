//! `cairn::testing`: a scripted [`FakeProvider`] for provider-free tests of everything above the
//! provider seam (the agent loop, retries, budgets, resume).
//!
//! Responders are tried in the order they were added, each matching a call by label, agent
//! type or a regex over the user text; the first match answers, the fallback answers the rest.
//! A responder plays a [`FakeScript`]: a sequence of turns (text, JSON, tool calls, wire
//! errors), one per call it answers, repeating the last turn once the script runs out, so
//! "fail twice then succeed" is `FakeScript::fail_times(2, err).then_text("ok")`. Every call is
//! logged; the provider is an `Arc` inside, so a test keeps a clone to inspect the log after
//! handing the provider to the engine.
//!
//! ```
//! use cairn::testing::{FakeProvider, FakeScript};
//! use serde_json::json;
//!
//! let fake = FakeProvider::new()
//!     .on_agent_type("researcher", FakeScript::tool_call("search", json!({"q": "cairn"})).then_text("found it"))
//!     .on_label("extract", FakeScript::json(json!({"verdict": "pass"})))
//!     .otherwise(FakeScript::text("stub text"));
//! let handle = fake.clone(); // give `fake` to the engine, keep `handle` for assertions
//! assert_eq!(handle.call_count(), 0);
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use regex::Regex;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::provider::{Capabilities, ChatEvent, ChatRequest, FinishReason, Provider, Role};
use crate::{Error, Usage};

#[cfg(feature = "sim")]
pub mod sim;

/// A scripted provider. Cheap to clone: clones share responders and the call log.
#[derive(Clone)]
pub struct FakeProvider {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    capabilities: Mutex<Capabilities>,
    state: Mutex<State>,
    /// Mints wire ids for scripted tool calls: `fake_call_1`, `fake_call_2`, ...
    next_wire_id: AtomicU64,
}

#[derive(Default)]
struct State {
    responders: Vec<Responder>,
    fallback: Option<Responder>,
    calls: Vec<LoggedCall>,
}

struct Responder {
    matcher: Matcher,
    script: FakeScript,
    /// How many calls this responder has answered.
    served: usize,
}

enum Matcher {
    Label(String),
    AgentType(String),
    Prompt(Regex),
    Any,
}

/// One call the fake served, as the test sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedCall {
    /// The call's label.
    pub label: Option<String>,
    /// The calling agent's type.
    pub agent_type: Option<String>,
    /// The provider-local model name.
    pub model: String,
    /// The text of the last user message that had any.
    pub last_user_text: Option<String>,
    /// Which responder answered: its position in the order added, `None` for the fallback
    /// (or for a call nothing matched).
    pub responder: Option<usize>,
    /// The whole request.
    pub request: ChatRequest,
}

/// A sequence of scripted turns, one per call; the last repeats once the script runs out. Or,
/// built with [`FakeScript::respond_with`], a function of each call.
#[derive(Clone)]
pub struct FakeScript {
    turns: Vec<FakeTurn>,
    /// Computes each turn from the request instead of `turns`.
    respond: Option<Arc<RespondFn>>,
}

/// A turn computed from the call.
type RespondFn = dyn Fn(&ChatRequest) -> FakeTurn + Send + Sync;

impl std::fmt::Debug for FakeScript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeScript")
            .field("turns", &self.turns)
            .field("respond_with", &self.respond.as_ref().map(|_| "fn"))
            .finish()
    }
}

/// One scripted model turn.
#[derive(Debug, Clone)]
pub struct FakeTurn {
    /// What the turn answers.
    pub reply: FakeReply,
    /// The usage to report; estimated from lengths (about four characters per token) when `None`.
    pub usage: Option<Usage>,
    /// How long to wait before answering (`tokio::time::sleep`, so paused test time skips it).
    pub latency: Option<Duration>,
}

/// What a scripted turn answers.
#[derive(Debug, Clone)]
pub enum FakeReply {
    /// A text answer, streamed as a few deltas.
    Text(String),
    /// A JSON answer (structured output), streamed as its text.
    Json(Value),
    /// Tool calls; the turn finishes with [`FinishReason::ToolUse`].
    ToolCalls(Vec<FakeToolCall>),
    /// The stream's terminal event is this error (e.g. a 429 with a retry delay).
    Error(Error),
    /// These exact events, for tests of contract edge cases.
    Events(Vec<ChatEvent>),
}

/// A scripted tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeToolCall {
    /// The tool's name.
    pub name: String,
    /// The call's arguments.
    pub arguments: Value,
}

impl FakeProvider {
    /// A fake named "fake" with no responders; every model supports everything.
    pub fn new() -> FakeProvider {
        FakeProvider::named("fake")
    }

    /// A fake registered under `name` (the model-ref prefix).
    pub fn named(name: &str) -> FakeProvider {
        FakeProvider {
            inner: Arc::new(Inner {
                name: name.to_owned(),
                capabilities: Mutex::new(Capabilities::ALL),
                state: Mutex::new(State::default()),
                next_wire_id: AtomicU64::new(1),
            }),
        }
    }

    /// Declares the capabilities every model of the fake reports.
    pub fn with_capabilities(self, capabilities: Capabilities) -> FakeProvider {
        *lock(&self.inner.capabilities) = capabilities;
        self
    }

    /// Answers calls labelled `label` with `script`.
    pub fn on_label(self, label: &str, script: FakeScript) -> FakeProvider {
        self.push(Matcher::Label(label.to_owned()), script)
    }

    /// Answers calls from agents of type `agent_type` with `script`.
    pub fn on_agent_type(self, agent_type: &str, script: FakeScript) -> FakeProvider {
        self.push(Matcher::AgentType(agent_type.to_owned()), script)
    }

    /// Answers calls whose user text (any user message) matches `prompt` with `script`.
    pub fn on_prompt(self, prompt: Regex, script: FakeScript) -> FakeProvider {
        self.push(Matcher::Prompt(prompt), script)
    }

    /// Answers every call that reaches it (useful to order a catch-all among specific responders).
    pub fn on_any(self, script: FakeScript) -> FakeProvider {
        self.push(Matcher::Any, script)
    }

    /// Answers calls no responder matched. Without one, such calls fail with a `config` error.
    pub fn otherwise(self, script: FakeScript) -> FakeProvider {
        lock(&self.inner.state).fallback = Some(Responder { matcher: Matcher::Any, script, served: 0 });
        self
    }

    /// Every call served so far, in order.
    pub fn calls(&self) -> Vec<LoggedCall> {
        lock(&self.inner.state).calls.clone()
    }

    /// How many calls were served so far.
    pub fn call_count(&self) -> usize {
        lock(&self.inner.state).calls.len()
    }

    fn push(self, matcher: Matcher, script: FakeScript) -> FakeProvider {
        lock(&self.inner.state).responders.push(Responder { matcher, script, served: 0 });
        self
    }

    /// Picks the turn for `request` and logs the call.
    fn next_turn(&self, request: &ChatRequest) -> FakeTurn {
        let mut state = lock(&self.inner.state);
        let state = &mut *state;
        let position = state.responders.iter().position(|r| r.matcher.matches(request));
        let responder = match position {
            Some(i) => state.responders.get_mut(i),
            None => state.fallback.as_mut(),
        };
        let turn = match responder {
            Some(responder) => {
                let turn = responder.script.turn(responder.served, request);
                responder.served += 1;
                turn
            }
            None => FakeTurn::new(FakeReply::Error(Error::config(format!(
                "no fake responder matches the call (label {:?}, agent type {:?})",
                request.meta.label, request.meta.agent_type
            )))),
        };
        state.calls.push(LoggedCall {
            label: request.meta.label.clone(),
            agent_type: request.meta.agent_type.clone(),
            model: request.model.clone(),
            last_user_text: request.last_user_text(),
            responder: position,
            request: request.clone(),
        });
        turn
    }

    fn events(&self, turn: FakeTurn, request: &ChatRequest) -> Vec<ChatEvent> {
        let estimate = |output: &str| Usage {
            input_tokens: crate::provider::estimate_plain_request_tokens(request),
            output_tokens: (output.chars().count() as u64).div_ceil(4).max(1),
            ..Usage::default()
        };
        match turn.reply {
            FakeReply::Text(text) => text_events(text.clone(), turn.usage.unwrap_or_else(|| estimate(&text))),
            FakeReply::Json(value) => {
                let text = value.to_string();
                text_events(text.clone(), turn.usage.unwrap_or_else(|| estimate(&text)))
            }
            FakeReply::ToolCalls(calls) => {
                let mut events = Vec::new();
                let mut written = String::new();
                for call in calls {
                    let wire_id =
                        format!("fake_call_{}", self.inner.next_wire_id.fetch_add(1, Ordering::Relaxed));
                    let arguments = call.arguments.to_string();
                    written.push_str(&call.name);
                    written.push_str(&arguments);
                    events
                        .push(ChatEvent::ToolCallStart { wire_id: wire_id.clone(), name: call.name.clone() });
                    events.push(ChatEvent::ToolCallDelta {
                        wire_id: wire_id.clone(),
                        arguments_delta: arguments,
                    });
                    events.push(ChatEvent::ToolCallEnd {
                        wire_id,
                        name: call.name,
                        arguments: call.arguments,
                    });
                }
                events.push(ChatEvent::Finish {
                    reason: FinishReason::ToolUse,
                    usage: turn.usage.unwrap_or_else(|| estimate(&written)),
                });
                events
            }
            FakeReply::Error(error) => vec![ChatEvent::Error(error)],
            FakeReply::Events(events) => events,
        }
    }
}

fn text_events(text: String, usage: Usage) -> Vec<ChatEvent> {
    let mut events: Vec<ChatEvent> =
        crate::provider::split_text_deltas(&text, 3).into_iter().map(ChatEvent::TextDelta).collect();
    events.push(ChatEvent::Finish { reason: FinishReason::Stop, usage });
    events
}

/// Locks a mutex, recovering from poisoning: a panicking test thread must not hide the log.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Default for FakeProvider {
    fn default() -> FakeProvider {
        FakeProvider::new()
    }
}

impl std::fmt::Debug for FakeProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = lock(&self.inner.state);
        f.debug_struct("FakeProvider")
            .field("name", &self.inner.name)
            .field("responders", &state.responders.len())
            .field("calls", &state.calls.len())
            .finish_non_exhaustive()
    }
}

impl Matcher {
    fn matches(&self, request: &ChatRequest) -> bool {
        match self {
            Matcher::Label(label) => request.meta.label.as_deref() == Some(label),
            Matcher::AgentType(agent_type) => request.meta.agent_type.as_deref() == Some(agent_type),
            Matcher::Prompt(regex) => {
                request.messages.iter().filter(|m| m.role == Role::User).any(|m| regex.is_match(&m.text()))
            }
            Matcher::Any => true,
        }
    }
}

impl Provider for FakeProvider {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn capabilities(&self, _model: &str) -> Capabilities {
        *lock(&self.inner.capabilities)
    }

    fn stream(&self, request: ChatRequest, cancel: CancellationToken) -> BoxStream<'static, ChatEvent> {
        let turn = self.next_turn(&request);
        let latency = turn.latency;
        let events = self.events(turn, &request);
        let answer = async move {
            if let Some(latency) = latency {
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return vec![ChatEvent::Error(crate::provider::cancelled_error())],
                    _ = tokio::time::sleep(latency) => {}
                }
            }
            if cancel.is_cancelled() {
                return vec![ChatEvent::Error(crate::provider::cancelled_error())];
            }
            events
        };
        futures::stream::once(answer).flat_map(futures::stream::iter).boxed()
    }
}

impl FakeScript {
    /// A script of one turn.
    pub fn new(turn: FakeTurn) -> FakeScript {
        FakeScript { turns: vec![turn], respond: None }
    }

    /// Answers every call with `respond(request)`: for turns that depend on the conversation,
    /// e.g. call a tool first and answer once the transcript holds its result.
    pub fn respond_with(respond: impl Fn(&ChatRequest) -> FakeTurn + Send + Sync + 'static) -> FakeScript {
        FakeScript { turns: Vec::new(), respond: Some(Arc::new(respond)) }
    }

    /// Answers `text`.
    pub fn text(text: impl Into<String>) -> FakeScript {
        FakeScript::new(FakeTurn::new(FakeReply::Text(text.into())))
    }

    /// Answers `value` as JSON text.
    pub fn json(value: Value) -> FakeScript {
        FakeScript::new(FakeTurn::new(FakeReply::Json(value)))
    }

    /// Calls tool `name` with `arguments`.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> FakeScript {
        FakeScript::tool_calls(vec![FakeToolCall { name: name.into(), arguments }])
    }

    /// Calls several tools in one turn.
    pub fn tool_calls(calls: Vec<FakeToolCall>) -> FakeScript {
        FakeScript::new(FakeTurn::new(FakeReply::ToolCalls(calls)))
    }

    /// Fails with `error` as the stream's terminal event.
    pub fn error(error: Error) -> FakeScript {
        FakeScript::new(FakeTurn::new(FakeReply::Error(error)))
    }

    /// Fails `times` calls with `error`; chain what comes next (`.then_text("ok")`).
    pub fn fail_times(times: usize, error: Error) -> FakeScript {
        FakeScript { turns: vec![FakeTurn::new(FakeReply::Error(error)); times], respond: None }
    }

    /// Appends a turn.
    pub fn then(mut self, turn: FakeTurn) -> FakeScript {
        self.turns.push(turn);
        self
    }

    /// Appends a text turn.
    pub fn then_text(self, text: impl Into<String>) -> FakeScript {
        self.then(FakeTurn::new(FakeReply::Text(text.into())))
    }

    /// Appends a JSON turn.
    pub fn then_json(self, value: Value) -> FakeScript {
        self.then(FakeTurn::new(FakeReply::Json(value)))
    }

    /// Appends a tool-call turn.
    pub fn then_tool_call(self, name: impl Into<String>, arguments: Value) -> FakeScript {
        self.then(FakeTurn::new(FakeReply::ToolCalls(vec![FakeToolCall { name: name.into(), arguments }])))
    }

    /// Appends a failing turn.
    pub fn then_error(self, error: Error) -> FakeScript {
        self.then(FakeTurn::new(FakeReply::Error(error)))
    }

    /// Sets the usage the last turn reports.
    pub fn with_usage(mut self, usage: Usage) -> FakeScript {
        if let Some(turn) = self.turns.last_mut() {
            turn.usage = Some(usage);
        }
        self
    }

    /// Sets how long the last turn takes.
    pub fn with_latency(mut self, latency: Duration) -> FakeScript {
        if let Some(turn) = self.turns.last_mut() {
            turn.latency = Some(latency);
        }
        self
    }

    /// The turn answering the `served`-th call (0-based), or the function's answer to `request`.
    fn turn(&self, served: usize, request: &ChatRequest) -> FakeTurn {
        if let Some(respond) = &self.respond {
            return respond(request);
        }
        match self.turns.get(served).or(self.turns.last()) {
            Some(turn) => turn.clone(),
            None => FakeTurn::new(FakeReply::Error(Error::config("an empty fake script"))),
        }
    }
}

impl FakeTurn {
    /// A turn answering `reply` at once, with estimated usage.
    pub fn new(reply: FakeReply) -> FakeTurn {
        FakeTurn { reply, usage: None, latency: None }
    }
}

#[cfg(test)]
mod tests;

/// Replays a run strictly: every call must be served from the journal. The first call that
/// would run live fails the replay with `journal_miss`, and nothing is written — the check to
/// put in a test after changing a workflow that must not re-key any paid call.
///
/// # Errors
/// `journal_miss` (with the replay's own error message) when a call would run live; the
/// run's error when the replay settled `error` for another reason; `config` for an unknown
/// run or workflow.
pub async fn replay_strict(
    engine: &crate::Engine,
    run_id: &crate::RunId,
    workflow: Option<crate::Workflow>,
) -> Result<crate::RunOutcome, Error> {
    let options = crate::ResumeOptions { dry_run: true, workflow, ..crate::ResumeOptions::default() };
    let outcome = engine.resume(run_id, options)?.result().await?;
    match &outcome.error {
        Some(error) if outcome.status == crate::RunStatus::Error => Err(error.clone()),
        _ => Ok(outcome),
    }
}

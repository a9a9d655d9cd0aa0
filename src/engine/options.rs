//! The options of `Ctx`'s verbs and of a run's error policy: passive data, validated where
//! they are used. Only the fields a call's identity names (see `identity.rs`) re-key it; the
//! rest can change between runs without re-keying a paid call.

use serde_json::Value;

use crate::model::InvocationRole;
use crate::money::Money;

/// How failed calls surface in a workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorPolicy {
    /// A failed call raises an error the workflow may catch (hand-written workflows).
    #[default]
    Strict,
    /// A failed call returns null and the loss is recorded in `dropped` (planner-written).
    Lenient,
}

/// What a failed call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Raise the error to the workflow.
    Throw,
    /// Return null; the loss is recorded in the outcome's `dropped`.
    Null,
}

/// Options of [`Ctx::agent`](crate::Ctx::agent). Only `profile`, `model`, `effort`, `key` (or the prompt) and
/// `schema` enter the call's identity; everything else can change between runs without
/// re-keying a paid call.
#[derive(Debug, Clone, Default)]
pub struct AgentOptions {
    /// A cosmetic label for events and reports.
    pub label: Option<String>,
    /// Replaces the prompt in the call's identity.
    pub key: Option<String>,
    /// The agent profile (agent type).
    pub profile: Option<String>,
    /// A `provider:model` ref, overriding the profile and the defaults.
    pub model: Option<String>,
    /// Reasoning effort, passed to the provider.
    pub effort: Option<String>,
    /// A JSON Schema the result must match.
    pub schema: Option<Value>,
    /// Authored system text, overriding the profile's.
    pub system: Option<String>,
    /// Maximum model turns (default 32).
    pub max_turns: Option<u32>,
    /// Output cap per turn.
    pub max_output_tokens: Option<u32>,
    /// What a failure does; the run's error policy decides when `None`.
    pub on_error: Option<OnError>,
    /// Return the full record (`{status, value, error, usage, cost_usd, cost_nano_usd, served_by,
    /// finish_reason, partial?}`) instead of the value.
    pub full: bool,
    /// Journal a task-class failure as final: it replays instead of rerunning.
    pub memoize_outcome: bool,
    /// The reserve admission holds for this call.
    pub est_cost: Option<Money>,
    /// The invocation role the model is resolved for (default `loop`).
    pub role: Option<InvocationRole>,
    /// A wall-clock limit for the whole agent; reaching it ends the call `limit`.
    pub timeout: Option<std::time::Duration>,
    /// Retries of retryable provider faults, overriding the engine's.
    pub retry: Option<RetryPolicy>,
    /// Toolsets the agent may use (replacing the profile's).
    pub tools: Vec<String>,
    /// Most tool calls over the agent's life.
    pub max_tool_calls: Option<u32>,
    /// The bound on a turn's estimated input tokens (the profile's, else 200,000): past it the
    /// oldest tool results are elided.
    pub max_context_tokens: Option<u64>,
}

/// Options of [`Ctx::step`](crate::Ctx::step).
#[derive(Debug, Clone, Default)]
pub struct StepOptions {
    /// Replaces the label in the step's identity.
    pub key: Option<String>,
    /// Values the step depends on: a change re-keys (reruns) the step.
    pub deps: Vec<Value>,
    /// What a failure does.
    pub on_error: Option<OnError>,
    /// The identity of the body's source (a script's runner sets it): part of the step's
    /// identity, so an edited or inserted body re-keys the step and two steps that share a
    /// label never serve each other's values. `None` for a Rust closure.
    pub body: Option<String>,
}

/// Options of [`Ctx::call`](crate::Ctx::call).
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// Replaces the arguments in the call's identity.
    pub key: Option<String>,
    /// What a failure does.
    pub on_error: Option<OnError>,
}

/// Options of [`Ctx::workflow`](crate::Ctx::workflow).
#[derive(Debug, Clone, Default)]
pub struct WorkflowOptions {
    /// Replaces the arguments in the call's identity.
    pub key: Option<String>,
    /// Caps the child's sub-account (it gets at most 30 % of the parent's remainder).
    pub budget: Option<Money>,
    /// What a failure does.
    pub on_error: Option<OnError>,
    /// Pins the call's scope to the label (`at:LABEL:n/wf:name:0`) instead of the count of
    /// earlier calls of the same workflow here, so inserting another call before it does not
    /// re-key the child's calls. No `/` or `:`, at most 64 characters.
    pub label: Option<String>,
}

/// Options of [`Ctx::await_external`](crate::Ctx::await_external).
#[derive(Debug, Clone, Default)]
pub struct ExternalOptions {
    /// What whoever resolves the wait is asked.
    pub prompt: Option<String>,
    /// A JSON Schema the resolution must satisfy; an invalid resolution is refused and the
    /// wait stays open.
    pub schema: Option<Value>,
    /// Give up after this long (from when the wait was first journaled): the wait then
    /// returns `{"timed_out": true, "key", "deadline_ms"}`, journaled as its resolution so
    /// every replay returns it. A run that suspended on the wait delivers it on the first
    /// resume after the deadline.
    pub timeout: Option<std::time::Duration>,
}

/// Retries of retryable provider faults for one agent call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (the first included).
    pub max_attempts: u32,
    /// The first backoff; doubled per attempt.
    pub initial_backoff: std::time::Duration,
    /// No backoff is longer (the engine's cap, 30 s by default, when `None`).
    pub max_backoff: Option<std::time::Duration>,
}

/// Options of [`Ctx::parallel`](crate::Ctx::parallel).
#[derive(Debug, Clone, Default)]
pub struct ParallelOptions {
    /// Return every branch's outcome (`{status, value}` / `{status, error}`) instead of
    /// aborting the siblings on the first failure.
    pub settle: bool,
    /// At most this many branches in flight (all by default).
    pub concurrency: Option<usize>,
    /// `Null`: a failed branch leaves null in its slot (itemized in `dropped`) instead of
    /// aborting its siblings. Ignored with `settle`.
    pub on_error: Option<OnError>,
    /// Pins the site to the label (`at:LABEL:n/par:0:i`) instead of the count of `parallel`
    /// sites before it, so inserting another `parallel` before it does not re-key its calls.
    /// No `/` or `:`, at most 64 characters.
    pub label: Option<String>,
    /// The identity of the branches' source (a script's runner sets it): a fail-fast decision
    /// journaled while the branches' code was different does not hold, so a resume of an
    /// edited fan-out runs it (what its branches completed is served) instead of raising
    /// what the old code raised. `None` for Rust closures.
    pub bodies: Option<String>,
}

/// Options of [`Ctx::pipeline`](crate::Ctx::pipeline).
#[derive(Debug, Clone, Default)]
pub struct PipelineOptions {
    /// What a failed item does.
    pub on_item_error: OnItemError,
    /// At most this many items in flight (all by default).
    pub concurrency: Option<usize>,
    /// Pins the site to the label (`at:LABEL:n/pipe:s:i`) instead of its position. No `/` or
    /// `:`, at most 64 characters.
    pub label: Option<String>,
    /// The identity of the stages' source: see [`ParallelOptions::bodies`].
    pub bodies: Option<String>,
}

/// What a failed pipeline item does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnItemError {
    /// Abort the pipeline (cancelling the other items) and raise the error.
    #[default]
    Throw,
    /// Leave the item out of the result; the loss is itemized in `dropped`.
    Drop,
    /// Put `{"error": {...}}` in the item's place.
    Collect,
}

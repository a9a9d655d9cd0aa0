//! `Ctx`: the canonical workflow API. Every effect a workflow has goes through a method
//! here, which derives the call's identity, matches it against the journal, and either
//! replays the journaled result or executes live and journals it (`running` at dispatch, a
//! terminal entry at completion, durable before the result reaches the workflow).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::budget::AccountId;
use super::events::EventKind;
use super::identity::{
    AgentIdentity, CallIdentity, ExternalIdentity, ModelIdentity, StepIdentity, value_key,
};
use super::run::Durability;
use super::{Dropped, ErrorPolicy, RunState};
use crate::agent::{self, AgentEnd, BudgetHooks};
use crate::error::{Error, ErrorCode};
use crate::journal::{self, ContentKey, Entry, Kind, Outcome, ScopePath, Segment, Seq, Status};
use crate::model::{InvocationRole, ModelRef};
use crate::money::Money;
use crate::provider::{CallMeta, ChatRequest, Message, Part, Role, ToolChoice};
use crate::store::RunId;
use crate::usage::Usage;

/// What a failed call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Raise the error to the workflow.
    Throw,
    /// Return null; the loss is recorded in the outcome's `dropped`.
    Null,
}

/// Options of [`Ctx::agent`]. Only `profile`, `model`, `effort`, `key` (or the prompt) and
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
    /// Return `{value, status, usage, cost_nano_usd, served_by, replayed}` instead of the value.
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

/// Options of [`Ctx::step`].
#[derive(Debug, Clone, Default)]
pub struct StepOptions {
    /// Replaces the label in the step's identity.
    pub key: Option<String>,
    /// Values the step depends on: a change re-keys (reruns) the step.
    pub deps: Vec<Value>,
    /// What a failure does.
    pub on_error: Option<OnError>,
}

/// Options of [`Ctx::call`].
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// Replaces the arguments in the call's identity.
    pub key: Option<String>,
    /// What a failure does.
    pub on_error: Option<OnError>,
}

/// Options of [`Ctx::workflow`].
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

/// Options of [`Ctx::await_external`].
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

/// Options of [`Ctx::parallel`].
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
}

/// Options of [`Ctx::pipeline`].
#[derive(Debug, Clone, Default)]
pub struct PipelineOptions {
    /// What a failed item does.
    pub on_item_error: super::OnItemError,
    /// At most this many items in flight (all by default).
    pub concurrency: Option<usize>,
    /// Pins the site to the label (`at:LABEL:n/pipe:s:i`) instead of its position. No `/` or
    /// `:`, at most 64 characters.
    pub label: Option<String>,
}

/// How [`Ctx::begin_two_phase`] left a call.
pub(crate) enum Begun {
    /// Served from the journal (or skipped, or failed before dispatch).
    Done(Result<Value, Error>),
    /// Dispatched: run the body, then [`Ctx::end_two_phase`].
    Live(LiveCall),
}

/// A dispatched two-phase call awaiting its result.
pub(crate) struct LiveCall {
    running: Arc<Entry>,
    span: u64,
    kind_name: String,
    on_error: Option<OnError>,
}

/// Structural counters of one scope: which `parallel` site and which child-workflow call
/// comes next. Shared by every clone of a `Ctx` in that scope.
#[derive(Debug, Default)]
pub(crate) struct ScopeCounters {
    parallel_sites: AtomicU32,
    children: Mutex<HashMap<String, u32>>,
    /// Uses of each site label in this scope.
    labels: Mutex<HashMap<String, u32>>,
    /// Pipelines begun in this scope (they key their fail-fast decisions; their items'
    /// scopes do not depend on it).
    pipelines: AtomicU32,
}

/// The workflow's view of its run: one scope of it, with its phase, budget account and
/// cancellation. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Ctx {
    pub(crate) run: Arc<RunState>,
    pub(crate) scope: ScopePath,
    counters: Arc<ScopeCounters>,
    phase: Option<Arc<str>>,
    pub(crate) account: AccountId,
    span: u64,
    parent_span: Option<u64>,
    pub(crate) cancel: CancellationToken,
    depth: u32,
    /// This context's place in its fan-out's admission order (`None` outside fan-outs).
    pub(crate) admission: Option<super::admission::Ticket>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("run_id", &self.run.run_id)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl Ctx {
    pub(crate) fn root(run: Arc<RunState>) -> Ctx {
        let span = run.root_span();
        let account = run.budget.root();
        let cancel = run.cancel.child_token();
        Ctx {
            run,
            scope: ScopePath::root(),
            counters: Arc::default(),
            phase: None,
            account,
            span,
            parent_span: None,
            cancel,
            depth: 0,
            admission: None,
        }
    }

    /// A context for a nested scope (a branch, a pipeline item, a child workflow).
    pub(crate) fn nested(&self, segment: &Segment, cancel: CancellationToken, account: AccountId) -> Ctx {
        Ctx {
            run: self.run.clone(),
            scope: self.scope.child(segment),
            counters: Arc::default(),
            phase: self.phase.clone(),
            account,
            span: self.run.new_span(),
            parent_span: Some(self.span),
            cancel,
            depth: self.depth,
            admission: self.admission.clone(),
        }
    }

    /// The next `parallel` site index of this scope.
    pub(crate) fn next_parallel_site(&self) -> u32 {
        self.counters.parallel_sites.fetch_add(1, Ordering::Relaxed)
    }

    /// The next pipeline's index in this scope.
    pub(crate) fn next_pipeline(&self) -> u32 {
        self.counters.pipelines.fetch_add(1, Ordering::Relaxed)
    }

    /// The context a labelled site runs in: scope `at:LABEL:n` (the `n`-th use of the label
    /// here) with fresh counters, so the site's identity depends on its label, not on how
    /// many unlabelled sites came before it. `None` without a label.
    ///
    /// # Errors
    /// `config` for a label with `/` or `:`, empty, or longer than 64 characters.
    pub(crate) fn labelled_site(&self, label: Option<&str>) -> Result<Option<Ctx>, Error> {
        let Some(label) = label else { return Ok(None) };
        if !Segment::valid_label(label) {
            return Err(Error::config(format!(
                "site label {label:?} must be 1 to 64 characters without '/' or ':'"
            )));
        }
        let index = {
            let mut labels = self.counters.labels.lock().unwrap_or_else(|p| p.into_inner());
            let slot = labels.entry(label.to_owned()).or_insert(0);
            let index = *slot;
            *slot += 1;
            index
        };
        let segment = Segment::Site { label: label.to_owned(), index };
        let mut site = self.nested(&segment, self.cancel.clone(), self.account);
        site.span = self.span;
        site.parent_span = self.parent_span;
        Ok(Some(site))
    }

    /// The run's id.
    pub fn run_id(&self) -> &RunId {
        &self.run.run_id
    }

    /// This context's scope path.
    pub fn scope(&self) -> &ScopePath {
        &self.scope
    }

    /// Fails fast when the run was cancelled, suspended or ran past its deadline.
    pub(crate) fn check_stopped(&self) -> Result<(), Error> {
        if self.cancel.is_cancelled() { Err(self.run.stopped_error()) } else { Ok(()) }
    }

    /// A permit from `slots`, or `None` once this context is cancelled. A free slot is
    /// taken at once, without setting up the wait.
    async fn slot(&self, slots: &Arc<tokio::sync::Semaphore>) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if let Ok(permit) = slots.clone().try_acquire_owned() {
            return Some(permit);
        }
        tokio::select! {
            permit = slots.clone().acquire_owned() => permit.ok(),
            _ = self.cancel.cancelled() => None,
        }
    }

    pub(super) fn span_pair(&self, span: u64) -> (u64, Option<u64>) {
        (span, Some(self.span))
    }

    fn policy_on_error(&self, explicit: Option<OnError>) -> OnError {
        explicit.unwrap_or(match self.run.policy {
            ErrorPolicy::Strict => OnError::Throw,
            ErrorPolicy::Lenient => OnError::Null,
        })
    }

    /// Applies the error policy to a failure: raise it, or record the drop and return null.
    /// Cancellation and replay-strict misses always raise.
    pub(crate) fn fail(
        &self,
        on_error: Option<OnError>,
        kind: &str,
        label: Option<String>,
        error: Error,
    ) -> Result<Value, Error> {
        let always_raise = matches!(error.code, ErrorCode::Cancelled | ErrorCode::JournalMiss);
        if error.code == ErrorCode::BudgetExhausted {
            self.run.mark_exhausted();
        }
        if !always_raise && self.policy_on_error(on_error) == OnError::Null {
            self.run.record_dropped(Dropped {
                scope: self.scope.to_string(),
                kind: kind.to_owned(),
                label,
                error,
            });
            return Ok(Value::Null);
        }
        // A raised failure is itemized where it is absorbed (a lenient branch, a dropped
        // pipeline item) or, if it ends the run, in the outcome's error.
        Err(error)
    }

    pub(super) fn entry(&self, kind: Kind, status: Status, key: ContentKey, ordinal: u32) -> Entry {
        let mut entry = Entry::new(Seq(0), kind, status, self.scope.clone(), key, ordinal);
        entry.phase = self.phase.clone();
        entry
    }

    /// A terminal entry for a dispatch, carrying its cosmetic fields.
    pub(super) fn terminal_for(running: &Entry, status: Status) -> Entry {
        let mut entry =
            Entry::new(Seq(0), running.kind, status, running.scope.clone(), running.key, running.ordinal);
        entry.target = Some(running.seq);
        entry.label = running.label.clone();
        entry.phase = running.phase.clone();
        entry.agent_type = running.agent_type.clone();
        entry.role = running.role.clone();
        entry.model = running.model.clone();
        entry.name = running.name.clone();
        entry.memoize_outcome = running.memoize_outcome;
        entry
    }

    /// Serves a replayed terminal entry: its value, or its (memoized) failure.
    fn replayed(
        &self,
        entry: &Entry,
        on_error: Option<OnError>,
        kind: &str,
        label: Option<String>,
    ) -> Result<Value, Error> {
        match entry.status {
            Status::Ok => Ok(entry.value().unwrap_or(Value::Null)),
            _ => {
                let error = entry
                    .error
                    .clone()
                    .unwrap_or_else(|| Error::internal("journaled failure carries no error"));
                self.fail(on_error, kind, label, error)
            }
        }
    }

    // ---- agent --------------------------------------------------------------------------

    /// Runs an agent: model turns through the resolved provider, under admission, the turn
    /// guard and the stream cut.
    ///
    /// # Replay
    /// Keyed on `{profile, model + effort, prompt or key, schema hash, toolset hash}` in this
    /// scope. A journaled `ok` replays with zero live calls; see the replay disposition for
    /// failures.
    ///
    /// # Errors
    /// Under the strict policy (or `on_error: Throw`): `config` for an unknown profile, model
    /// or provider; `budget_exhausted` when admission, the guard or the cut stops it;
    /// provider and task failures; `cancelled`. Under the lenient policy failures return
    /// null and are itemized in `dropped`.
    pub async fn agent(&self, prompt: &str, opts: AgentOptions) -> Result<Value, Error> {
        self.agent_with(prompt, opts, &[]).await
    }

    /// [`Ctx::agent`] with tool instances beside the registered toolsets it names (the
    /// orchestrator's base toolset, bound to its roster). Their contracts enter the toolset
    /// hash like any tool's.
    pub(crate) async fn agent_with(
        &self,
        prompt: &str,
        opts: AgentOptions,
        extra_tools: &[Arc<dyn crate::agent::Tool>],
    ) -> Result<Value, Error> {
        self.check_stopped()?;
        let engine = self.run.engine.clone();
        let label = opts.label.clone();
        let profile = match &opts.profile {
            Some(name) => match engine.profiles.get(name) {
                Some(profile) => Some(profile),
                None => {
                    let error = Error::config(format!("unknown agent profile {name:?}"));
                    return self.fail(opts.on_error, "agent", label, error);
                }
            },
            None => None,
        };
        let role = opts.role.unwrap_or(InvocationRole::Loop);
        let model = match &opts.model {
            Some(text) => match ModelRef::parse(text) {
                Ok(model) => model,
                Err(e) => return self.fail(opts.on_error, "agent", label, Error::config(e.to_string())),
            },
            None => profile
                .and_then(|p| p.model.clone())
                .or_else(|| engine.defaults.get(&role).cloned())
                .unwrap_or_else(|| engine.default_model.clone()),
        };
        let toolset_names = if opts.tools.is_empty() {
            profile.map(|p| p.tools.clone()).unwrap_or_default()
        } else {
            opts.tools.clone()
        };
        let tools = match resolve_tools(&engine.toolsets, &toolset_names).await {
            Ok(mut tools) => {
                tools.extend(extra_tools.iter().cloned());
                tools
            }
            Err(error) => return self.fail(opts.on_error, "agent", label, error),
        };
        let Some(provider) = engine.providers.get(model.provider()).cloned() else {
            let error = Error::config(format!("model {model} names an unregistered provider"));
            return self.fail(opts.on_error, "agent", label, error);
        };
        let schema_hash = match opts.schema.as_ref().map(journal::schema_hash).transpose() {
            Ok(hash) => hash,
            Err(e) => return self.fail(opts.on_error, "agent", label, Error::validation(e.to_string())),
        };
        // The model's `provider:name` text, spelled once: the identity, the price lookup, the
        // journal and the events all use it.
        let model_name = model.to_string();
        let toolset_hash = crate::agent::toolset_hash(&tools);
        let mut identity = AgentIdentity::new(
            prompt,
            opts.key.as_deref(),
            ModelIdentity { effort: opts.effort.as_deref(), spec: &model_name },
        );
        identity.agent_type = opts.profile.as_deref();
        identity.schema_hash = schema_hash.as_deref();
        identity.toolset_hash = toolset_hash.as_deref();
        let key = identity.key()?;
        let span = self.run.new_span();
        let matched = self.run.lookup(&self.scope, key);
        if matches!(matched.outcome, Outcome::Replay(_) | Outcome::Skip) {
            // The loop will not run: its approval waits are served by the call's result.
            self.run.cover(&self.scope.child(&approvals_segment(key, matched.ordinal)));
        }
        let start_event = || EventKind::AgentStart {
            label: label.clone(),
            agent_type: opts.profile.clone(),
            model: model_name.clone(),
            scope: self.scope.to_string(),
        };
        let mut matched_previous_terminal = false;
        let live_miss = matches!(matched.outcome, Outcome::Live);
        let supersedes = match matched.outcome {
            Outcome::Replay(entry) => {
                // Its tool approvals are served by its journaled result too.
                self.run.cover_approvals(&self.scope, key);
                self.run.emit(self.span_pair(span), true, start_event);
                self.run.emit(self.span_pair(span), true, || agent_end_event(&entry));
                if opts.full && entry.status != Status::Ok {
                    let error = entry
                        .error
                        .clone()
                        .unwrap_or_else(|| Error::internal("journaled failure carries no error"));
                    return self.agent_failed(&opts, label, error, Some((&entry, true)));
                }
                let value = self.replayed(&entry, opts.on_error, "agent", label)?;
                return Ok(if opts.full { full_result(&entry, value) } else { value });
            }
            Outcome::Skip => {
                self.run.emit(self.span_pair(span), true, start_event);
                self.run.emit(self.span_pair(span), true, || EventKind::AgentEnd {
                    status: "skipped".into(),
                    usage: Usage::default(),
                    cost: None,
                    served_by: None,
                    error: None,
                });
                return Ok(Value::Null);
            }
            Outcome::Wait(_) => return Err(Error::internal("an agent entry is journaled as suspended")),
            Outcome::Live => None,
            Outcome::Rerun { previous: Some(ref terminal), .. } if self.run.reproduce => {
                // Reproducing the run as it settled: the failure it saw, not a new attempt
                // (a call cancelled with its run stops this reproduction the same way).
                if terminal.status == Status::Cancelled {
                    self.run.cancel();
                }
                self.run.emit(self.span_pair(span), true, start_event);
                self.run.emit(self.span_pair(span), true, || agent_end_event(terminal));
                if opts.full && terminal.status != Status::Ok && terminal.status != Status::Cancelled {
                    // The full form's record of the failure, as the settled run saw it.
                    let error = terminal
                        .error
                        .clone()
                        .unwrap_or_else(|| Error::internal("journaled failure carries no error"));
                    return self.agent_failed(&opts, label, error, Some((terminal, true)));
                }
                let value = self.replayed(terminal, opts.on_error, "agent", label)?;
                return Ok(if opts.full { full_result(terminal, value) } else { value });
            }
            Outcome::Rerun { supersedes, ref previous } => {
                matched_previous_terminal = previous.is_some();
                Some(supersedes)
            }
        };
        // What the call is keyed on, compactly, so a resume can explain a re-key.
        let summary = journal::IdentitySummary::of_agent(
            prompt,
            opts.key.as_deref(),
            opts.effort.as_deref(),
            schema_hash.as_deref(),
            toolset_hash.as_deref(),
        );
        let rekeyed = if live_miss {
            let live = super::explain::LiveAgent {
                model: &model_name,
                agent_type: opts.profile.as_deref(),
                summary: &summary,
                label: label.as_deref(),
            };
            super::explain::check(&self.run, &self.scope, &live)?
        } else {
            None
        };
        if self.run.dry_run {
            let rekeyed = rekeyed.map(|line| format!("; it re-keys {line}")).unwrap_or_default();
            let error = Error::new(
                ErrorCode::JournalMiss,
                format!("dry run reached a live agent call in scope '{}'{rekeyed}", self.scope),
            );
            return Err(error);
        }

        // Admission: the spawn cap, then a reserve on this context's account.
        let spawned = self.run.spawns.fetch_add(1, Ordering::SeqCst) + 1;
        if spawned > engine.max_spawns {
            self.run
                .emit(self.span_pair(span), false, || EventKind::BudgetExhausted { what: "spawn".into() });
            let error = Error::new(
                ErrorCode::BudgetExhausted,
                format!("the run reached its lifetime cap of {} agent spawns", engine.max_spawns),
            );
            return self.fail(opts.on_error, "agent", label, error);
        }
        let system = opts.system.clone().or_else(|| profile.and_then(|p| p.system.clone()));
        let max_output_tokens = opts.max_output_tokens.or_else(|| profile.and_then(|p| p.max_output_tokens));
        let request = ChatRequest {
            model: model.model().to_owned(),
            system,
            messages: vec![Message { role: Role::User, parts: vec![Part::Text(prompt.to_owned())] }],
            tools: Vec::new(),
            // The orchestrator acts only through its tools (it ends by calling `finish`), so
            // every turn must call one: a model that would answer in prose is held to a tool
            // call (on llama.cpp, grammar-constrained). Not part of the call's identity.
            tool_choice: if role == InvocationRole::Orchestrate {
                ToolChoice::Required
            } else {
                ToolChoice::Auto
            },
            max_output_tokens,
            temperature: None,
            response_schema: opts
                .schema
                .clone()
                .filter(|_| provider.capabilities(model.model()).native_schema),
            effort: opts.effort.clone(),
            meta: CallMeta { label: label.clone(), agent_type: opts.profile.clone() },
        };
        let price = engine.prices.price(&model_name).copied();
        let est_cost = opts.est_cost.or_else(|| profile.and_then(|p| p.est_cost));
        let bounded = self.run.budget.is_bounded(self.account);
        let unpriced_ok = engine.prices.unpriced_allowed();
        let reserve = match super::admit::reserve_for(
            &model_name,
            price.as_ref(),
            &request,
            &tools,
            est_cost,
            bounded,
            unpriced_ok,
        ) {
            Ok(reserve) => reserve,
            Err(error) => {
                self.run.spawns.fetch_sub(1, Ordering::SeqCst);
                return self.fail(opts.on_error, "agent", label, error);
            }
        };
        let reservation = match self.admit(reserve.amount, key, matched.ordinal).await {
            Ok(reservation) => reservation,
            Err(denied) => {
                self.run.spawns.fetch_sub(1, Ordering::SeqCst);
                self.run.emit(self.span_pair(span), false, || EventKind::BudgetExhausted {
                    what: "agent".into(),
                });
                let error = Error::new(
                    ErrorCode::BudgetExhausted,
                    format!(
                        "admission refused: the call reserves {} ({}) but {} is left",
                        denied.requested, reserve.derivation, denied.available
                    ),
                );
                return self.agent_failed(&opts, label, error, None);
            }
        };

        // The scheduler: a run-wide slot, then a per-provider slot where limited. The
        // orchestrator takes them per turn: its tools wait for its children's model calls, so
        // holding a slot across them would starve the children (and deadlock at one slot).
        let provider_slots = match engine.provider_limits.get(model.provider()) {
            Some(_) => self.run.provider_slots.get(model.provider()).cloned(),
            None => None,
        };
        let turn_slots = (role == InvocationRole::Orchestrate)
            .then(|| (self.run.model_slots.clone(), provider_slots.clone()));
        let (permits, provider_permit) = match turn_slots {
            Some(_) => (None, None),
            None => {
                let permits = self.slot(&self.run.model_slots).await;
                let provider_permit = match &provider_slots {
                    Some(slots) => self.slot(slots).await,
                    None => None,
                };
                (permits, provider_permit)
            }
        };
        if permits.is_none() && turn_slots.is_none() {
            self.run.budget.settle(reservation, Money::ZERO);
            return Err(self.run.stopped_error());
        }

        let mut running = self.entry(Kind::Agent, Status::Running, key, matched.ordinal);
        running.target = supersedes;
        running.memoize_outcome = opts.memoize_outcome;
        running.label = label.clone();
        running.agent_type = opts.profile.as_deref().map(journal::intern);
        running.role = Some(journal::intern(role.as_str()));
        running.model = Some(journal::intern(&model_name));
        running.identity = Some(Box::new(summary));
        // Deferred: a crash before it is written reruns the call, as it would anyway.
        let running = match self.run.append_one(running, Durability::Lazy) {
            Ok(entry) => entry,
            Err(e) => {
                self.run.budget.settle(reservation, Money::ZERO);
                return Err(e);
            }
        };
        self.run.emit(self.span_pair(span), false, start_event);

        // The checkpoint of the call's first attempt: a rerun continues from its last turn.
        let checkpoint_ref = format!("{}/ckpt/{}", self.run.run_id, supersedes.unwrap_or(running.seq).0);
        let resume_from = match supersedes {
            Some(_) => engine
                .transcripts
                .get(&checkpoint_ref)
                .ok()
                .flatten()
                .and_then(|bytes| serde_json::from_slice::<agent::Checkpoint>(&bytes).ok()),
            None => None,
        };
        // Turns a crashed attempt completed were never journaled with a terminal entry: this
        // attempt carries their usage so the ledger stays whole.
        let unjournaled = super::carry::unjournaled(
            engine.transcripts.as_ref(),
            &checkpoint_ref,
            matched_previous_terminal,
            resume_from.as_ref(),
        );
        let resumed_usage = resume_from.as_ref().map(|c| c.usage);
        let spec = agent::AgentSpec {
            provider,
            served_by: model_name,
            request,
            schema: opts.schema.clone(),
            max_turns: opts.max_turns.or_else(|| profile.and_then(|p| p.max_turns)).unwrap_or(32),
            max_tool_calls: opts.max_tool_calls,
            max_retries: opts.retry.map_or(engine.max_retries, |r| r.max_attempts.saturating_sub(1)),
            retry_base: opts.retry.map_or(engine.retry_base, |r| r.initial_backoff),
            backoff: agent::Backoff {
                max: opts.retry.and_then(|r| r.max_backoff).unwrap_or(engine.backoff.max),
                ..engine.backoff
            },
            price,
            fallbacks: declared_fallbacks(&engine, profile, &model),
            tools,
            permissions: agent::permissions_for_call(
                &engine.permissions,
                profile.and_then(|p| p.permissions.as_ref()),
            ),
            call_key: key,
            resume_from,
            max_context_tokens: opts
                .max_context_tokens
                .or_else(|| profile.and_then(|p| p.max_context_tokens))
                .unwrap_or(agent::DEFAULT_MAX_CONTEXT_TOKENS),
        };
        let hooks = AccountHooks {
            ctx: self,
            turn_slots,
            approvals: std::sync::OnceLock::new(),
            approvals_site: (key, matched.ordinal),
            checkpoint_ref,
            wrote_checkpoint: Default::default(),
            reservation: reservation.id(),
            checkpoint_usage: std::sync::Mutex::new(resumed_usage),
        };
        let events_run = self.run.clone();
        let delta_span = self.span_pair(span);
        let on_delta = move |text: &str| {
            events_run.emit(delta_span, false, || EventKind::AgentDelta { text: text.to_owned() })
        };
        // The call's own cancellation: the run's, or its deadline (which keeps the usage).
        let call_cancel = self.cancel.child_token();
        let outcome = super::admit::with_deadline(
            opts.timeout,
            &call_cancel,
            agent::run(spec, &hooks, &call_cancel, &on_delta),
        )
        .await;
        drop(provider_permit);
        drop(permits);

        let mut outcome = outcome;
        if let Some(extra) = unjournaled {
            outcome.usage += extra;
            outcome.cost = outcome.cost.zip(price).map(|(cost, p)| cost + p.cost(&extra));
        }
        let wrote_checkpoint = hooks.wrote_checkpoint.load(Ordering::Relaxed);
        let journaled_ref = hooks.checkpoint_ref.clone();
        let covered = *hooks.checkpoint_usage.lock().unwrap_or_else(|p| p.into_inner());
        let (status, value, error) = match outcome.end {
            AgentEnd::Ok(value) => (Status::Ok, Some(value), None),
            AgentEnd::Error(e) => (Status::Error, None, Some(e)),
            AgentEnd::Limit(e) => (Status::Limit, None, Some(e)),
            AgentEnd::Cancelled(e) => (Status::Cancelled, None, Some(e)),
        };
        let mut terminal = Ctx::terminal_for(&running, status);
        terminal.set_value(value.as_ref());
        terminal.error = error.clone();
        terminal.usage = Some(outcome.usage);
        terminal.cost = outcome.cost;
        terminal.served_by = Some(journal::intern(&outcome.served_by));
        terminal.finish_reason = outcome.finish_reason;
        if wrote_checkpoint {
            terminal.transcript_ref = Some(hooks.checkpoint_ref);
        }
        let cost = outcome.cost.unwrap_or(Money::ZERO);
        // Awaited: a paid result is durable before it reaches the workflow.
        let written = self.run.append_one_async(terminal).await;
        self.run.budget.settle(reservation, cost);
        let terminal = written?;
        if let Some(covered) = covered
            && !self.run.dry_run
        {
            super::carry::mark_journaled(engine.transcripts.as_ref(), &journaled_ref, &covered);
        }
        self.run.emit(self.span_pair(span), false, || agent_end_event(&terminal));
        self.run.emit_budget(self.span_pair(span));
        match (value, error) {
            (Some(value), _) => Ok(if opts.full { full_result(&terminal, value) } else { value }),
            (None, Some(error)) => {
                if status == Status::Cancelled && self.cancel.is_cancelled() {
                    return Err(self.run.stopped_error());
                }
                self.agent_failed(&opts, label, error, Some((&terminal, false)))
            }
            (None, None) => Err(Error::internal("agent ended with neither value nor error")),
        }
    }

    // ---- step and call --------------------------------------------------------------------

    /// Runs `body` once and journals its JSON result; later runs replay it.
    ///
    /// The body gets a context of its own scope (`step:KEY:n`, from the step's content key
    /// and its ordinal among same-key steps here): effects inside it (agents, `parallel`
    /// sites, child workflows, `now`/`random`/`uuid`) count in that scope, so whether the
    /// step ran or replayed never shifts what comes after it.
    ///
    /// # Replay
    /// Keyed on `{label or key, deps}` in this scope.
    ///
    /// # Errors
    /// The body's error (or null under the lenient policy); `cancelled`; `journal_miss` in a
    /// dry run.
    pub async fn step<F, Fut>(&self, label: &str, opts: StepOptions, body: F) -> Result<Value, Error>
    where
        F: FnOnce(Ctx) -> Fut,
        Fut: Future<Output = Result<Value, Error>>,
    {
        let key = Ctx::step_key(label, &opts)?;
        let live = match self.begin_two_phase(Kind::Step, "step", label, key, opts.on_error)? {
            Begun::Done(result) => return result,
            Begun::Live(live) => live,
        };
        let inner = self.step_body(&live);
        let result = tokio::select! {
            result = body(inner) => result,
            _ = self.cancel.cancelled() => Err(self.run.stopped_error()),
        };
        self.end_two_phase(live, result)
    }

    /// The context a live step's body runs in: the scope `step:KEY:n` under this one, with
    /// fresh counters.
    pub(crate) fn step_body(&self, live: &LiveCall) -> Ctx {
        let segment = step_segment(live.running.key, live.running.ordinal);
        self.nested(&segment, self.cancel.clone(), self.account)
    }

    /// Calls a registered host function with JSON arguments, journaled like a step.
    ///
    /// # Replay
    /// Keyed on `{name, args or key}` in this scope.
    ///
    /// # Errors
    /// `config` for an unregistered function; the function's error (or null under the
    /// lenient policy).
    pub async fn call(&self, name: &str, args: Value, opts: CallOptions) -> Result<Value, Error> {
        let Some(function) = self.run.engine.host_functions.get(name).cloned() else {
            let error = Error::config(format!("unknown host function {name:?}"));
            return self.fail(opts.on_error, "call", Some(name.to_owned()), error);
        };
        let key = CallIdentity::new("call", name, opts.key.as_deref(), &args).key()?;
        self.two_phase(Kind::Call, "call", name, key, opts.on_error, move || function(args)).await
    }

    async fn two_phase<F, Fut>(
        &self,
        kind: Kind,
        kind_name: &str,
        label: &str,
        key: ContentKey,
        on_error: Option<OnError>,
        body: F,
    ) -> Result<Value, Error>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Value, Error>>,
    {
        let live = match self.begin_two_phase(kind, kind_name, label, key, on_error)? {
            Begun::Done(result) => return result,
            Begun::Live(live) => live,
        };
        // A host call acts outside the run: everything queued before it (its own dispatch
        // included) is durable first, so a crash cannot remake a value it was given.
        if let Err(e) = self.run.flush_async().await {
            return self.end_two_phase(live, Err(e));
        }
        let result = tokio::select! {
            result = body() => result,
            _ = self.cancel.cancelled() => Err(self.run.stopped_error()),
        };
        let result = self.end_two_phase(live, result);
        // Its result is awaited like a paid one: a side effect is not repeated on resume.
        self.run.flush_async().await?;
        result
    }

    /// The first half of a two-phase call: match it, and either serve it from the journal or
    /// journal its dispatch. Synchronous, so a script runner can run the body on its own
    /// thread between the halves.
    pub(crate) fn begin_two_phase(
        &self,
        kind: Kind,
        kind_name: &str,
        label: &str,
        key: ContentKey,
        on_error: Option<OnError>,
    ) -> Result<Begun, Error> {
        self.check_stopped()?;
        let span = self.run.new_span();
        let matched = self.run.lookup(&self.scope, key);
        let start = || EventKind::StepStart { kind: kind_name.into(), label: label.into() };
        let end = |status: &str| EventKind::StepEnd {
            kind: kind_name.into(),
            label: label.into(),
            status: status.into(),
        };
        let served = match &matched.outcome {
            Outcome::Replay(_) | Outcome::Skip => true,
            Outcome::Rerun { previous: Some(_), .. } => self.run.reproduce,
            _ => false,
        };
        if kind == Kind::Step && served {
            // The body will not run: what it journaled is served by the step's result.
            self.run.cover(&self.scope.child(&step_segment(key, matched.ordinal)));
        }
        let supersedes = match matched.outcome {
            Outcome::Replay(entry) => {
                self.run.emit(self.span_pair(span), true, start);
                self.run.emit(self.span_pair(span), true, || end(entry.status.as_str()));
                return Ok(Begun::Done(self.replayed(&entry, on_error, kind_name, Some(label.to_owned()))));
            }
            Outcome::Skip => {
                self.run.emit(self.span_pair(span), true, || end("skipped"));
                return Ok(Begun::Done(Ok(Value::Null)));
            }
            Outcome::Wait(_) => return Err(Error::internal("a step entry is journaled as suspended")),
            Outcome::Live => None,
            Outcome::Rerun { previous: Some(terminal), .. } if self.run.reproduce => {
                // Reproducing the run as it settled: the failure it saw, not a new attempt
                // (a call cancelled with its run stops this reproduction the same way).
                if terminal.status == Status::Cancelled {
                    self.run.cancel();
                }
                self.run.emit(self.span_pair(span), true, start);
                self.run.emit(self.span_pair(span), true, || end(terminal.status.as_str()));
                return Ok(Begun::Done(self.replayed(
                    &terminal,
                    on_error,
                    kind_name,
                    Some(label.to_owned()),
                )));
            }
            Outcome::Rerun { supersedes, .. } => Some(supersedes),
        };
        let mut running = self.entry(kind, Status::Running, key, matched.ordinal);
        running.target = supersedes;
        running.label = Some(label.to_owned());
        if kind != Kind::Step {
            running.name = Some(label.to_owned());
        }
        let running = self.run.append_one(running, Durability::Lazy)?;
        self.run.emit(self.span_pair(span), false, start);
        Ok(Begun::Live(LiveCall { running, span, kind_name: kind_name.to_owned(), on_error }))
    }

    /// The second half of a two-phase call: journal the body's result and apply the policy.
    pub(crate) fn end_two_phase(&self, live: LiveCall, result: Result<Value, Error>) -> Result<Value, Error> {
        let label = live.running.label.clone().unwrap_or_default();
        let (status, value, error) = match result {
            Ok(value) => (Status::Ok, Some(value), None),
            Err(e) if e.code == ErrorCode::Cancelled => (Status::Cancelled, None, Some(e)),
            Err(e) => (Status::Error, None, Some(e)),
        };
        let mut terminal = Ctx::terminal_for(&live.running, status);
        terminal.set_value(value.as_ref());
        terminal.error = error.clone();
        // Deferred: nothing paid hangs on it (a child's paid calls were awaited inside it);
        // a crash before the write reruns the body, the at-least-once every step has.
        self.run.append_one(terminal, Durability::Deferred)?;
        self.run.emit(self.span_pair(live.span), false, || EventKind::StepEnd {
            kind: live.kind_name.clone(),
            label: label.clone(),
            status: status.as_str().into(),
        });
        match (value, error) {
            (Some(value), _) => Ok(value),
            (None, Some(error)) if error.code == ErrorCode::Cancelled => Err(error),
            (None, Some(error)) => self.fail(live.on_error, &live.kind_name, Some(label), error),
            (None, None) => Err(Error::internal("step ended with neither value nor error")),
        }
    }

    /// The identity of a step, as [`Ctx::step`] derives it.
    pub(crate) fn step_key(label: &str, opts: &StepOptions) -> Result<ContentKey, Error> {
        StepIdentity::new(label, opts.key.as_deref(), &opts.deps).key()
    }

    // ---- child workflows ------------------------------------------------------------------

    /// Runs a registered workflow as a child: its own scope (`wf:name:k`), a budget
    /// sub-account (30 % of this account's remainder, capped by `opts.budget`) whose spend
    /// rolls up, and a depth limit.
    ///
    /// # Replay
    /// Keyed on `{name, args or key}`; a completed child replays without running its body,
    /// and a rerun child replays its own completed calls.
    ///
    /// # Errors
    /// `config` for an unknown workflow or when the depth limit is reached; the child's error.
    pub async fn workflow(&self, name: &str, args: Value, opts: WorkflowOptions) -> Result<Value, Error> {
        let site = match self.labelled_site(opts.label.as_deref()) {
            Ok(site) => site,
            Err(error) => return self.fail(opts.on_error, "child", Some(name.to_owned()), error),
        };
        let this = site.as_ref().unwrap_or(self);
        this.workflow_here(name, args, opts).await
    }

    async fn workflow_here(&self, name: &str, args: Value, opts: WorkflowOptions) -> Result<Value, Error> {
        let engine = self.run.engine.clone();
        let Some(child) = engine.workflows.get(name).cloned() else {
            let error = Error::config(format!("unknown child workflow {name:?}"));
            return self.fail(opts.on_error, "child", Some(name.to_owned()), error);
        };
        if self.depth + 1 > engine.max_depth {
            let error =
                Error::config(format!("child workflow depth limit {} reached at {name:?}", engine.max_depth));
            return self.fail(opts.on_error, "child", Some(name.to_owned()), error);
        }
        let call_index = {
            let mut children = self.counters.children.lock().unwrap_or_else(|p| p.into_inner());
            let slot = children.entry(name.to_owned()).or_insert(0);
            let index = *slot;
            *slot += 1;
            index
        };
        let key = CallIdentity::new("child", name, opts.key.as_deref(), &args).key()?;
        let account = engine_share(self, &opts);
        let mut child_ctx = self.nested(
            &Segment::Wf { name: name.to_owned(), call: call_index },
            self.cancel.child_token(),
            account,
        );
        child_ctx.depth = self.depth + 1;
        let child_scope = child_ctx.scope.clone();
        let live = match self.begin_two_phase(Kind::Child, "child", name, key, opts.on_error)? {
            Begun::Done(result) => {
                // A child that replays whole never runs its body.
                self.run.cover(&child_scope);
                return result;
            }
            Begun::Live(live) => live,
        };
        // What the parent recorded before the child is durable before the child acts on it.
        if let Err(e) = self.run.flush_async().await {
            return self.end_two_phase(live, Err(e));
        }
        let body = child.body.clone();
        let result = tokio::select! {
            result = body(child_ctx, args) => result,
            _ = self.cancel.cancelled() => Err(self.run.stopped_error()),
        };
        self.end_two_phase(live, result)
    }

    // ---- external input --------------------------------------------------------------------

    /// Waits for a value from outside the run (`RunHandle::resolve_external`, `cairn resolve`).
    /// When every live branch of the run is waiting, the run settles `suspended` with the
    /// wait listed in `pending`; resuming delivers the value.
    ///
    /// # Replay
    /// Keyed on `{key}`; a resolved wait replays its value; an open one waits again without
    /// writing anything.
    ///
    /// # Errors
    /// `cancelled` when the run is cancelled or suspends while waiting.
    pub async fn await_external(&self, key: &str, opts: ExternalOptions) -> Result<Value, Error> {
        let prompt = opts.prompt.as_deref();
        self.check_stopped()?;
        let content = ExternalIdentity { key, kind: "external" }.key()?;
        let span = self.run.new_span();
        let matched = self.run.lookup(&self.scope, content);
        let (seq, deadline_ms) = match matched.outcome {
            Outcome::Replay(entry) => {
                self.run.emit(self.span_pair(span), true, || EventKind::ExternalResolved {
                    key: key.into(),
                    applied: true,
                });
                return Ok(entry.value().unwrap_or(Value::Null));
            }
            Outcome::Skip => return Ok(Value::Null),
            // The deadline is the one journaled when the wait began.
            Outcome::Wait(entry) => {
                (entry.seq, entry.value().and_then(|v| v.get("deadline_ms").and_then(Value::as_i64)))
            }
            Outcome::Live | Outcome::Rerun { .. } => {
                let deadline_ms = opts.timeout.map(|t| {
                    self.run.now_ms().saturating_add(i64::try_from(t.as_millis()).unwrap_or(i64::MAX))
                });
                let mut entry = self.entry(Kind::External, Status::Suspended, content, matched.ordinal);
                entry.name = Some(key.to_owned());
                if prompt.is_some() || opts.schema.is_some() || deadline_ms.is_some() {
                    let mut value = json!({ "prompt": prompt, "schema": opts.schema });
                    if let Some(deadline) = deadline_ms {
                        value["deadline_ms"] = json!(deadline);
                    }
                    entry.set_value(Some(&value));
                }
                (self.run.append_one(entry, Durability::Awaited)?.seq, deadline_ms)
            }
        };
        if let Some(deadline) = deadline_ms
            && self.run.now_ms() >= deadline
        {
            // Past its deadline: the timeout is the wait's resolution, unless one came first.
            return self.run.time_out_external(key, seq, deadline);
        }
        // A branch waiting for input does not hold up its siblings' admission.
        self.pass_admission_turn_now();
        self.run.emit(self.span_pair(span), false, || EventKind::ExternalWaiting {
            key: key.into(),
            prompt: prompt.map(str::to_owned),
        });
        let mut receiver = self.run.wait_external(key, seq, prompt.map(str::to_owned));
        let timer = async {
            match deadline_ms {
                Some(deadline) => {
                    let wait = u64::try_from(deadline.saturating_sub(self.run.now_ms())).unwrap_or(0);
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                }
                None => std::future::pending().await,
            }
        };
        let result = tokio::select! {
            value = &mut receiver => value.map_err(|_| self.run.stopped_error()),
            _ = self.cancel.cancelled() => Err(self.run.stopped_error()),
            () = timer => match deadline_ms {
                Some(deadline) => self.run.time_out_external(key, seq, deadline),
                None => Err(Error::internal("a wait without a deadline timed out")),
            },
        };
        self.run.end_wait(key, result.is_ok());
        result
    }

    // ---- phases, logs, budget ----------------------------------------------------------------

    /// A context inside phase `name`, with its start event emitted; pair with [`Ctx::end_phase`].
    pub(crate) fn begin_phase(&self, name: &str) -> Ctx {
        let mut inner = self.clone();
        inner.phase = Some(Arc::from(name));
        inner.span = self.run.new_span();
        inner.parent_span = Some(self.span);
        self.run.emit((inner.span, Some(self.span)), false, || EventKind::PhaseStart { name: name.into() });
        inner
    }

    /// Emits the end of the phase `inner` was begun for.
    pub(crate) fn end_phase(&self, inner: &Ctx) {
        let name = inner.phase.as_deref().unwrap_or_default().to_owned();
        self.run.emit((inner.span, Some(self.span)), false, || EventKind::PhaseEnd { name });
    }

    /// Runs `body` inside a named phase: events and cost are grouped under it; identity is
    /// unaffected.
    ///
    /// # Errors
    /// The body's error.
    pub async fn phase<F, Fut, T>(&self, name: &str, body: F) -> Result<T, Error>
    where
        F: FnOnce(Ctx) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let inner = self.begin_phase(name);
        let result = body(inner.clone()).await;
        self.end_phase(&inner);
        result
    }

    /// Emits a log event (not journaled).
    pub fn log(&self, level: &str, message: &str, data: Option<Value>) {
        self.run.emit((self.span, self.parent_span), false, || EventKind::Log {
            level: level.into(),
            message: message.into(),
            data,
        });
    }

    /// What this context's account has spent (the whole run's, at the root), journaled like
    /// [`Ctx::now`]: the value seen the first time is the one every replay and resume sees,
    /// so whatever is built from it keeps its identity.
    ///
    /// # Errors
    /// As for [`Ctx::now`].
    pub async fn budget_spent(&self) -> Result<Money, Error> {
        let account = self.account;
        let value = self
            .journaled_fact(json!({ "kind": "rand", "fn": "budget.spent" }), move |run| {
                json!(run.budget.spent(account).nano_usd())
            })
            .await?;
        value
            .as_i64()
            .map(Money::from_nano_usd)
            .ok_or_else(|| Error::internal("journaled budget.spent() is not an integer"))
    }

    /// What this context's account has left (`None` when unbounded), journaled like
    /// [`Ctx::budget_spent`].
    ///
    /// # Errors
    /// As for [`Ctx::now`].
    pub async fn budget_remaining(&self) -> Result<Option<Money>, Error> {
        let account = self.account;
        let value = self
            .journaled_fact(json!({ "kind": "rand", "fn": "budget.remaining" }), move |run| {
                json!(run.budget.remaining(account).map(Money::nano_usd))
            })
            .await?;
        match value {
            Value::Null => Ok(None),
            value => value
                .as_i64()
                .map(|n| Some(Money::from_nano_usd(n)))
                .ok_or_else(|| Error::internal("journaled budget.remaining() is not an integer")),
        }
    }

    // ---- journaled nondeterminism --------------------------------------------------------------

    async fn journaled_fact(
        &self,
        identity: Value,
        make: impl FnOnce(&RunState) -> Value,
    ) -> Result<Value, Error> {
        self.check_stopped()?;
        let key = value_key(&identity)?;
        let matched = self.run.lookup(&self.scope, key);
        match matched.outcome {
            Outcome::Replay(entry) => Ok(entry.value().unwrap_or(Value::Null)),
            Outcome::Skip => Ok(Value::Null),
            Outcome::Wait(_) => Err(Error::internal("a journaled value is recorded as suspended")),
            Outcome::Live | Outcome::Rerun { .. } => {
                let mut entry = self.entry(Kind::Rand, Status::Ok, key, matched.ordinal);
                entry.set_value(Some(&make(&self.run)));
                Ok(self.run.append_one(entry, Durability::Deferred)?.value().unwrap_or(Value::Null))
            }
        }
    }

    /// The current time in ms since the epoch, journaled: identical on every replay.
    ///
    /// # Errors
    /// `cancelled`; `journal_miss` in a dry run past the journal.
    pub async fn now(&self) -> Result<i64, Error> {
        let value =
            self.journaled_fact(json!({ "kind": "rand", "fn": "now" }), |run| json!(run.now_ms())).await?;
        value.as_i64().ok_or_else(|| Error::internal("journaled now() is not an integer"))
    }

    /// A float in `[0, 1)`, journaled; with a key it binds by key instead of by position.
    ///
    /// # Errors
    /// As for [`Ctx::now`].
    pub async fn random(&self, key: Option<&str>) -> Result<f64, Error> {
        let identity = json!({ "kind": "rand", "fn": "random", "key": key });
        let value = self
            .journaled_fact(identity, |run| json!((run.next_random_u64() >> 11) as f64 / (1u64 << 53) as f64))
            .await?;
        value.as_f64().ok_or_else(|| Error::internal("journaled random() is not a number"))
    }

    /// A version-4 UUID, journaled.
    ///
    /// # Errors
    /// As for [`Ctx::now`].
    pub async fn uuid(&self) -> Result<String, Error> {
        let value = self
            .journaled_fact(json!({ "kind": "rand", "fn": "uuid" }), |run| {
                let mut bytes = [0u8; 16];
                bytes[..8].copy_from_slice(&run.next_random_u64().to_le_bytes());
                bytes[8..].copy_from_slice(&run.next_random_u64().to_le_bytes());
                bytes[6] = (bytes[6] & 0x0f) | 0x40;
                bytes[8] = (bytes[8] & 0x3f) | 0x80;
                let hex = hex::encode(bytes);
                json!(format!(
                    "{}-{}-{}-{}-{}",
                    &hex[..8],
                    &hex[8..12],
                    &hex[12..16],
                    &hex[16..20],
                    &hex[20..]
                ))
            })
            .await?;
        value.as_str().map(str::to_owned).ok_or_else(|| Error::internal("journaled uuid() is not a string"))
    }
}

/// The scope segment of a step's body: from its content key and its ordinal among same-key
/// steps of its scope, never from a running counter.
/// The scope of an agent call's approval waits: `at:agent-KEY:ordinal`, from the call's
/// identity (KEY: the first 16 hex digits of its content key).
fn approvals_segment(key: ContentKey, ordinal: u32) -> Segment {
    let mut hex = key.to_hex();
    hex.truncate(16);
    Segment::Site { label: format!("agent-{hex}"), index: ordinal }
}

fn step_segment(key: ContentKey, ordinal: u32) -> Segment {
    let mut hex = key.to_hex();
    hex.truncate(16);
    Segment::Step { key: hex, ordinal }
}

fn engine_share(ctx: &Ctx, opts: &WorkflowOptions) -> AccountId {
    ctx.run.budget.open_sub_account(ctx.account, ctx.run.engine.child_share_ppm, opts.budget)
}

fn agent_end_event(entry: &Entry) -> EventKind {
    EventKind::AgentEnd {
        status: entry.status.as_str().into(),
        usage: entry.usage.unwrap_or_default(),
        cost: entry.cost,
        served_by: entry.served_by.as_deref().map(str::to_owned),
        error: entry.error.as_ref().map(|e| e.code),
    }
}

impl Ctx {
    /// A failed agent call: with `result: "full"` its record (status, typed error, usage and
    /// cost of what it consumed) for the workflow to branch on; otherwise the error policy.
    /// A stopped run (cancellation, a dry run's miss) always raises.
    fn agent_failed(
        &self,
        opts: &AgentOptions,
        label: Option<String>,
        error: Error,
        entry: Option<(&Entry, bool)>,
    ) -> Result<Value, Error> {
        if !opts.full || matches!(error.code, ErrorCode::Cancelled | ErrorCode::JournalMiss) {
            return self.fail(opts.on_error, "agent", label, error);
        }
        if error.code == ErrorCode::BudgetExhausted {
            self.run.mark_exhausted();
        }
        let mut record = match entry {
            Some((entry, _)) => full_result(entry, Value::Null),
            None => json!({
                "value": null,
                "status": "limit",
                "usage": Usage::default(),
                "cost_nano_usd": 0,
                "served_by": null,
                "finish_reason": null,
            }),
        };
        record["error"] = json!({ "code": error.code, "message": error.message });
        Ok(record)
    }
}

/// The record `result: "full"` returns. It holds only what the journal holds, so a replay
/// returns the same record: whether the call was served from the journal is not in it (a
/// script could branch on that, and its value would differ on replay).
fn full_result(entry: &Entry, value: Value) -> Value {
    json!({
        "value": value,
        "status": entry.status.as_str(),
        "usage": entry.usage.unwrap_or_default(),
        "cost_nano_usd": entry.cost,
        "served_by": entry.served_by,
        "finish_reason": entry.finish_reason,
    })
}

/// The engine side of one agent call's loop: its account's path in the run's budget tree,
/// its checkpoint, and approvals as waits on external input.
struct AccountHooks<'a> {
    ctx: &'a Ctx,
    /// The run-wide and provider slots the call takes per turn (the orchestrator's).
    turn_slots: Option<(Arc<tokio::sync::Semaphore>, Option<Arc<tokio::sync::Semaphore>>)>,
    /// Where the call's approval waits are journaled: a scope of their own, covered when the
    /// call replays whole. Made at the call's first approval (most calls ask none).
    approvals: std::sync::OnceLock<Ctx>,
    /// The call's key and ordinal, which name that scope.
    approvals_site: (ContentKey, u32),
    checkpoint_ref: String,
    wrote_checkpoint: std::sync::atomic::AtomicBool,
    /// The call's live reservation: the guard raises its hold, the cut records in-flight spend.
    reservation: super::budget::ReservationId,
    /// The usage the latest checkpoint of the call holds (its completed turns, all attempts).
    checkpoint_usage: std::sync::Mutex<Option<Usage>>,
}

impl BudgetHooks for AccountHooks<'_> {
    fn can_start_turn(&self) -> bool {
        let ok = self.ctx.run.budget.can_start_turn(self.ctx.account);
        if !ok {
            self.ctx.run.mark_exhausted();
        }
        ok
    }

    fn would_cross(&self, cost: Money) -> bool {
        let crossing = self.ctx.run.budget.record_in_flight(self.reservation, cost);
        if crossing {
            self.ctx.run.mark_exhausted();
        }
        crossing
    }

    fn grant_turn(&self, used: Money, want: Money, floor: Money) -> Result<Option<Money>, Money> {
        let granted = self.ctx.run.budget.grant_turn(self.reservation, used, want, floor);
        if granted.is_err() {
            self.ctx.run.mark_exhausted();
        }
        granted.map_err(|denied| denied.available)
    }

    fn checkpoint(&self, state: &agent::Checkpoint) {
        if self.ctx.run.dry_run {
            return;
        }
        // A checkpoint is found through the call's `running` entry (written lazily): the
        // first one waits for that entry to be durable, or a crash would orphan it and a
        // resume would pay again for the turns it holds.
        if !self.wrote_checkpoint.load(Ordering::Relaxed) && self.ctx.run.flush().is_err() {
            return;
        }
        // A checkpoint that fails to persist costs at most a repeated turn on rerun.
        if let Ok(bytes) = serde_json::to_vec(state)
            && self.ctx.run.engine.transcripts.put(&self.checkpoint_ref, &bytes).is_ok()
        {
            self.wrote_checkpoint.store(true, Ordering::Relaxed);
            *self.checkpoint_usage.lock().unwrap_or_else(|p| p.into_inner()) = Some(state.usage);
        }
    }

    fn turn_slot(&self) -> futures::future::BoxFuture<'_, Option<agent::TurnSlot>> {
        Box::pin(async move {
            let mut permits = agent::TurnSlot::new();
            if let Some((run_slots, provider_slots)) = &self.turn_slots {
                permits.push(self.ctx.slot(run_slots).await?);
                if let Some(slots) = provider_slots {
                    permits.push(self.ctx.slot(slots).await?);
                }
            }
            Some(permits)
        })
    }

    fn approve<'b>(
        &'b self,
        request: &'b agent::ApprovalRequest,
    ) -> futures::future::BoxFuture<'b, Result<bool, Error>> {
        Box::pin(async move {
            let opts = ExternalOptions {
                prompt: Some(format!(
                    "approve a call to tool {} with arguments {}?",
                    request.tool, request.arguments
                )),
                schema: Some(json!({
                    "type": "object",
                    "required": ["approved"],
                    "properties": { "approved": { "type": "boolean" } }
                })),
                // An unanswered ask past its deadline resolves as timed out: denied.
                timeout: request.timeout,
            };
            let answer = self.own_scope().await_external(&request.key, opts).await?;
            Ok(answer.get("approved").and_then(Value::as_bool).unwrap_or(false))
        })
    }

    fn run_tool<'b>(
        &'b self,
        tool: &'b Arc<dyn crate::agent::Tool>,
        id: &'b str,
        args: Value,
    ) -> futures::future::BoxFuture<'b, Result<String, Error>> {
        Box::pin(super::tool_call::run_tool(self.own_scope(), tool, id, args))
    }
}

impl AccountHooks<'_> {
    /// The context of the call's own scope, where its approval waits and tool calls are
    /// journaled.
    fn own_scope(&self) -> &Ctx {
        self.approvals.get_or_init(|| {
            let (key, ordinal) = self.approvals_site;
            let scope = self.ctx.scope.child(&approvals_segment(key, ordinal));
            Ctx { scope, counters: Arc::default(), ..self.ctx.clone() }
        })
    }
}

/// The fallbacks of a call: its profile's, else the engine's for the requested model; a
/// fallback whose provider is not registered is skipped.
fn declared_fallbacks(
    engine: &super::EngineInner,
    profile: Option<&super::AgentProfile>,
    model: &ModelRef,
) -> Vec<agent::Fallback> {
    let declared = match profile.map(|p| &p.fallbacks).filter(|f| !f.is_empty()) {
        Some(list) => list.clone(),
        None => engine.fallbacks.get(model).cloned().unwrap_or_default(),
    };
    declared
        .into_iter()
        .filter_map(|fallback| {
            let provider = engine.providers.get(fallback.provider())?.clone();
            Some(agent::Fallback {
                provider,
                served_by: fallback.to_string(),
                model: fallback.model().to_owned(),
                price: engine.prices.price(&fallback.to_string()).copied(),
            })
        })
        .collect()
}

/// The tools of the named toolsets (an MCP server's listed on first use), refusing unknown
/// toolsets and duplicate tool names.
async fn resolve_tools(
    toolsets: &HashMap<String, crate::agent::Toolset>,
    names: &[String],
) -> Result<Vec<Arc<dyn crate::agent::Tool>>, Error> {
    let mut tools: Vec<Arc<dyn crate::agent::Tool>> = Vec::new();
    for name in names {
        let Some(toolset) = toolsets.get(name) else {
            let mut known: Vec<&str> = toolsets.keys().map(String::as_str).collect();
            known.sort();
            return Err(Error::config(format!(
                "unknown toolset {name:?} (registered: {})",
                known.join(", ")
            )));
        };
        for tool in toolset.resolve().await? {
            if tools.iter().any(|t| t.name() == tool.name()) {
                return Err(Error::config(format!("tool {:?} is offered by two toolsets", tool.name())));
            }
            tools.push(tool);
        }
    }
    Ok(tools)
}

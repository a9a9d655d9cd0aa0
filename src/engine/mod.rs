//! L4: the engine. `Engine` holds every registry (providers, stores, profiles, host
//! functions, child workflows, prices, defaults); `Engine::run` starts a run and hands back
//! a `RunHandle`; the workflow sees the run through `Ctx`, the one canonical API onto
//! journaled effects, budgets and events.
//!
//! Nothing here is global: two engines in one process share nothing.

mod admission;
mod admit;
mod budget;
mod carry;
mod cost;
mod ctx;
mod events;
mod explain;
mod fanout;
mod identity;
mod lease;
mod queue;
mod run;
mod started;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_journal;
mod tool_call;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;

pub(crate) use admit::FLAT_UNPRICED_RESERVE_NANO_USD;
pub(crate) use budget::{AccountId, Reservation};
pub use cost::{CostLine, CostReport, UnpricedUsage};
pub(crate) use ctx::Begun;
pub use ctx::{
    AgentOptions, CallOptions, Ctx, ExternalOptions, OnError, ParallelOptions, PipelineOptions, RetryPolicy,
    StepOptions, WorkflowOptions,
};
pub use events::{Event, EventKind, EventStream};
pub use fanout::{Branch, OnItemError, Stage, branch, stage};
pub use lease::Resolution;
pub use queue::{CancelOutcome, Worker, WorkerOptions, WorkerReport};
pub(crate) use queue::{RESERVED_FIELD, is_reserved};
pub(crate) use run::Durability;
pub(crate) use run::RunState;

use crate::clock::{SharedClock, SystemClock};
use crate::error::{Error, ErrorCode};
use crate::journal::Preview;
use crate::model::{InvocationRole, ModelRef, PriceTable};
use crate::money::Money;
use crate::provider::Provider;
use crate::store::{JournalStore, RunId, RunStatus, TranscriptStore};
use crate::usage::Usage;

/// The latency of the echo model registered by default.
pub(crate) const ECHO_DEMO_LATENCY: Duration = Duration::from_millis(20);

/// The body of a closure workflow.
pub type WorkflowFn = Arc<dyn Fn(Ctx, Value) -> BoxFuture<'static, Result<Value, Error>> + Send + Sync>;

/// A host function callable from workflows through `ctx.call(name, args)`.
pub type HostFn = Arc<dyn Fn(Value) -> BoxFuture<'static, Result<Value, Error>> + Send + Sync>;

/// A named workflow: a Rust closure `|ctx, args| async { .. }`.
#[derive(Clone)]
pub struct Workflow {
    name: String,
    body: WorkflowFn,
}

impl Workflow {
    /// A closure workflow.
    ///
    /// ```
    /// use cairn::{Workflow, AgentOptions};
    /// let wf = Workflow::new("greet", |ctx, args| async move {
    ///     let name = args["name"].as_str().unwrap_or("world").to_owned();
    ///     ctx.agent(&format!("greet {name}"), AgentOptions::default()).await
    /// });
    /// assert_eq!(wf.name(), "greet");
    /// ```
    pub fn new<F, Fut>(name: &str, body: F) -> Workflow
    where
        F: Fn(Ctx, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, Error>> + Send + 'static,
    {
        Workflow { name: name.to_owned(), body: Arc::new(move |ctx, args| Box::pin(body(ctx, args))) }
    }

    /// The workflow's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for Workflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workflow").field("name", &self.name).finish_non_exhaustive()
    }
}

/// A script language the engine can run and resume: turns stored source into a workflow.
///
/// This is the seam that keeps the engine ignorant of dialects: the engine stores a script
/// run's source (and its hash) with the run and, on resume, hands it back to the dialect
/// named in run meta. The Rhai dialect is registered by default.
pub trait ScriptDialect: Send + Sync + fmt::Debug {
    /// The dialect's name, as run meta records it (`rhai`, `lua`).
    fn name(&self) -> &'static str;

    /// The file extension of the dialect's scripts, without the dot (`rhai`, `lua`); the CLI
    /// picks a script's dialect by it unless `--dialect` says otherwise.
    fn extension(&self) -> &'static str;

    /// The API card that teaches a planner model (and a person) this dialect: byte-stable text
    /// built into the binary.
    fn card(&self) -> &'static str;

    /// Every finding of lint and compile over `source` in one pass, errors and warnings, sorted
    /// by position: what `cairn lint --json` prints and what the planner's repair prompt carries.
    /// Never fails: a malformed or hostile script yields diagnostics.
    fn check(&self, source: &str, ctx: &crate::script::LintContext) -> Vec<crate::script::Diagnostic>;

    /// Compiles (and lints, against the engine's registries) a script into a workflow.
    ///
    /// # Errors
    /// `validation` when the script is rejected, with the diagnostics in the message.
    fn prepare(&self, engine: &Engine, name: &str, source: &str) -> Result<Workflow, Error>;

    /// The static bound on the script's agent calls given its `args`: every agent call site
    /// with how many times it can run at most, or the first construct that makes the count
    /// unbounded. [`crate::script::bound::cost_bound`] prices it. A dialect without an
    /// analysis reports the whole script unbounded.
    fn call_bound(&self, source: &str, args: &Value) -> crate::script::bound::CallBound {
        let _ = (source, args);
        crate::script::bound::CallBound::Unbounded {
            reason: format!("the {} dialect has no static call bound", self.name()),
            line: 1,
            column: 1,
        }
    }
}

/// A workflow script: its dialect, a name (usually the file stem) and its source.
#[derive(Debug, Clone)]
pub struct Script {
    dialect: String,
    name: String,
    source: Arc<str>,
    policy: ErrorPolicy,
}

impl Script {
    /// A hand-written script in the named dialect (strict error policy). The dialect must be
    /// registered with the engine by the time the script runs.
    pub fn new(dialect: &str, name: &str, source: &str) -> Script {
        Script {
            dialect: dialect.to_owned(),
            name: name.to_owned(),
            source: Arc::from(source),
            policy: ErrorPolicy::Strict,
        }
    }

    /// A hand-written Rhai script (strict error policy).
    pub fn rhai(name: &str, source: &str) -> Script {
        Script::new("rhai", name, source)
    }

    /// Marks the script as planner-written: it always runs with the lenient error policy.
    pub fn planner_written(mut self) -> Script {
        self.policy = ErrorPolicy::Lenient;
        self
    }

    /// The script's source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The script's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The script's dialect.
    pub fn dialect(&self) -> &str {
        &self.dialect
    }

    /// The sha256 (hex) of the source, as run meta records it.
    pub fn source_hash(&self) -> String {
        crate::journal::content_key_of_canonical(&self.source).to_hex()
    }
}

/// Names the engine has registered, for a dialect's linter.
#[derive(Debug, Clone, Default)]
pub struct Registered {
    /// Agent profiles.
    pub profiles: Vec<String>,
    /// Toolsets.
    pub toolsets: Vec<String>,
    /// Host functions.
    pub host_functions: Vec<String>,
    /// Workflows callable as children.
    pub workflows: Vec<String>,
}

/// What a host function or child workflow is for and what it accepts: shown to planner models
/// on the profile card (see `EngineBuilder::describe_host_function`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Described {
    /// What it does, in a sentence.
    pub description: String,
    /// A JSON Schema of the arguments it accepts, when known.
    pub accepts: Option<Value>,
}

/// A named agent configuration: model, system prompt, limits and a default cost estimate.
#[derive(Debug, Clone, Default)]
pub struct AgentProfile {
    /// What the profile is for (shown to planners).
    pub description: String,
    /// Its model, overriding the engine default.
    pub model: Option<ModelRef>,
    /// Authored system text.
    pub system: Option<String>,
    /// Per-turn output cap.
    pub max_output_tokens: Option<u32>,
    /// Maximum model turns.
    pub max_turns: Option<u32>,
    /// The reserve admission holds for a call, when the call gives none.
    pub est_cost: Option<Money>,
    /// The toolsets its agents may use.
    pub tools: Vec<String>,
    /// Models to fail over to, in order, when its model keeps failing retryably.
    pub fallbacks: Vec<ModelRef>,
    /// Its permission rules, replacing the engine's (the engine's host hook still applies).
    pub permissions: Option<crate::agent::Permissions>,
    /// The bound on a turn's estimated input tokens (default 200,000).
    pub max_context_tokens: Option<u64>,
}

/// How failed calls surface in a workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorPolicy {
    /// A failed call raises an error the workflow may catch (hand-written workflows).
    #[default]
    Strict,
    /// A failed call returns null and the loss is recorded in `dropped` (planner-written).
    Lenient,
}

/// Options of one run, validated before anything is written.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// The budget ceiling in USD (finite, ≥ 0); the engine default when `None`.
    pub budget_usd: Option<f64>,
    /// The run id; a fresh ULID when `None`.
    pub run_id: Option<RunId>,
    /// An absolute deadline in ms since the epoch; must lie in the future.
    pub deadline_ms: Option<i64>,
    /// Tags recorded in run meta.
    pub tags: Vec<String>,
    /// The error policy.
    pub policy: ErrorPolicy,
}

/// Options of a resume.
#[derive(Debug, Clone, Default)]
pub struct ResumeOptions {
    /// Replay-strict: the first would-be-live call fails the run with `journal_miss`, and
    /// nothing is written.
    pub dry_run: bool,
    /// With `dry_run`: reproduce the run as it settled (what `cairn replay` checks). A call
    /// whose journaled attempt failed, hit a limit or was cancelled is served that outcome, as
    /// the run saw it, instead of counting as a call a resume would run again.
    pub reproduce: bool,
    /// Entries (by seq) to rerun regardless of their status.
    pub invalidate: Vec<u64>,
    /// The workflow to resume with; by default the script stored with the run, or the
    /// registered workflow named in run meta.
    pub workflow: Option<Workflow>,
    /// A script to resume with: an edit of the run's script. Unless it is the stored source,
    /// it replaces it (stored as the run's new source, the old one kept), its unchanged calls
    /// replay, and re-keyed ones are explained (see `accept_rekey`). Must be of the run's
    /// dialect.
    pub script: Option<Script>,
    /// The arguments; by default the arguments stored with the run.
    pub args: Option<Value>,
    /// An absolute deadline in ms since the epoch.
    pub deadline_ms: Option<i64>,
    /// The default model for calls that name none. By default a resume routes calls as the
    /// run started (the default and per-role models stored with the run), whatever the
    /// engine's own defaults are now.
    pub model: Option<ModelRef>,
    /// Let calls whose identity changed since they were paid (model, prompt, tools, schema,
    /// options) run again, paid anew. Without it such a resume stops before dispatching any
    /// of them and reports each, and which identity field changed, as `rekey_refused`.
    pub accept_rekey: bool,
}

/// Work a run did not complete, itemized.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dropped {
    /// Where (scope path).
    pub scope: String,
    /// What (`agent`, `step`, `call`, `child`, `item`).
    pub kind: String,
    /// Its label or name, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Why.
    pub error: Error,
}

/// An unresolved wait of a suspended run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pending {
    /// The key to resolve it with.
    pub key: String,
    /// Its prompt, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The suspended entry's seq.
    pub seq: u64,
}

/// How a run settled. Every status carries dropped work, pending waits, usage and cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunOutcome {
    /// The run.
    pub run_id: RunId,
    /// `ok`, `error`, `cancelled`, `exhausted` or `suspended`.
    pub status: RunStatus,
    /// The workflow's value (partial for `exhausted`).
    pub value: Option<Value>,
    /// The failure, for `error` (and the cause, for `exhausted` and `cancelled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Error>,
    /// Work that did not complete.
    pub dropped: Vec<Dropped>,
    /// Waits that keep the run suspended.
    pub pending: Vec<Pending>,
    /// Token usage of the whole run (all segments).
    pub usage: Usage,
    /// The cost report of the whole run (all segments).
    pub cost: CostReport,
    /// How this segment's calls were served.
    pub preview: Preview,
    /// The first journaled calls (at most 20) this segment left unconsumed, in journal order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub orphans: Vec<crate::journal::Orphan>,
}

/// A running (or settled) run.
#[derive(Debug)]
pub struct RunHandle {
    run_id: RunId,
    state: Arc<RunState>,
    done: tokio::sync::watch::Receiver<Option<Result<RunOutcome, Error>>>,
    /// Keeps every event buffered for a later [`RunHandle::events`]; released when the
    /// handle is dropped or consumed by [`RunHandle::result`].
    claim: Option<EventsClaim>,
}

/// A handle's claim on its run's event buffer.
#[derive(Debug)]
pub(crate) struct EventsClaim(Arc<events::EventLog>);

impl EventsClaim {
    /// Takes over the claim the log was created with.
    pub(crate) fn new(log: Arc<events::EventLog>) -> EventsClaim {
        EventsClaim(log)
    }
}

impl Drop for EventsClaim {
    fn drop(&mut self) {
        self.0.release_claim();
    }
}

impl RunHandle {
    /// The run's id.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The run's events, from the first (gapless from the handle's creation).
    ///
    /// The run buffers its events for this while the handle lives; open streams keep only
    /// what they have not read yet. Read the stream, or drop the handle (or call
    /// [`RunHandle::result`], which consumes it), to let the run release them.
    pub fn events(&self) -> EventStream {
        self.state.events.subscribe()
    }

    /// Cancels the run: live streams are severed, in-flight calls journal as `cancelled`,
    /// and the run settles `cancelled`.
    pub fn cancel(&self) {
        self.state.cancel();
    }

    /// Resolves an `await_external` wait of this run. Returns whether this attempt closed
    /// it (`false` when an earlier attempt already had).
    ///
    /// # Errors
    /// `validation` when the run has no wait with that key; `internal` for a store failure.
    pub fn resolve_external(&self, key: &str, value: Value) -> Result<bool, Error> {
        self.state.resolve_external(key, value)
    }

    /// Gives up the handle's claim on the run's events without consuming it: streams opened
    /// before keep theirs, and from now on no event is built or buffered for a stream that
    /// nobody opened. For a caller that waits with [`RunHandle::wait`] and never reads events.
    pub fn release_events(&mut self) {
        self.claim = None;
    }

    /// Waits for the run to settle. Consuming the handle releases its claim on the run's
    /// events: streams opened before keep theirs, and no event is buffered for anyone else.
    ///
    /// # Errors
    /// `internal` when the run's task panicked (a bug).
    pub async fn result(mut self) -> Result<RunOutcome, Error> {
        self.claim = None;
        self.wait().await
    }

    /// Waits for the run to settle without giving up the handle (so it can still be
    /// cancelled from elsewhere while waiting).
    ///
    /// # Errors
    /// `internal` when the run's task panicked (a bug).
    ///
    /// # Cancel safety
    /// Cancel-safe: the run goes on, and a later call waits again.
    pub async fn wait(&self) -> Result<RunOutcome, Error> {
        let mut done = self.done.clone();
        loop {
            if let Some(outcome) = done.borrow_and_update().clone() {
                return outcome;
            }
            if done.changed().await.is_err() {
                return Err(Error::internal("the run's task ended without an outcome"));
            }
        }
    }
}

/// The engine: registries, stores and defaults. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<EngineInner>,
}

#[derive(Clone)]
pub(crate) struct EngineInner {
    pub(crate) providers: HashMap<String, Arc<dyn Provider>>,
    pub(crate) journal: Arc<dyn JournalStore>,
    pub(crate) transcripts: Arc<dyn TranscriptStore>,
    pub(crate) defaults: HashMap<InvocationRole, ModelRef>,
    pub(crate) default_model: ModelRef,
    pub(crate) profiles: HashMap<String, AgentProfile>,
    pub(crate) host_functions: HashMap<String, HostFn>,
    pub(crate) workflows: HashMap<String, Workflow>,
    pub(crate) prices: PriceTable,
    pub(crate) clock: SharedClock,
    pub(crate) seed: Option<u64>,
    pub(crate) max_concurrency: usize,
    pub(crate) provider_limits: HashMap<String, usize>,
    pub(crate) max_spawns: u32,
    pub(crate) default_budget: Option<Money>,
    pub(crate) child_share_ppm: u32,
    pub(crate) max_depth: u32,
    pub(crate) max_retries: u32,
    pub(crate) retry_base: Duration,
    pub(crate) dialects: HashMap<String, Arc<dyn ScriptDialect>>,
    pub(crate) toolsets: HashMap<String, crate::agent::Toolset>,
    pub(crate) fallbacks: HashMap<ModelRef, Vec<ModelRef>>,
    pub(crate) permissions: crate::agent::Permissions,
    /// How long a run's lease lasts unrenewed (a dead driver holds the run this long).
    pub(crate) lease_ttl: Duration,
    /// The backoff cap and the `Retry-After` clamp of every call.
    pub(crate) backoff: crate::agent::Backoff,
    /// Descriptions of host functions, for the planner's profile card.
    pub(crate) host_docs: HashMap<String, Described>,
    /// Descriptions of child workflows, for the planner's profile card.
    pub(crate) workflow_docs: HashMap<String, Described>,
}

impl fmt::Debug for EngineInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineInner")
            .field("default_model", &self.default_model.to_string())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut providers: Vec<_> = self.inner.providers.keys().collect();
        providers.sort();
        f.debug_struct("Engine")
            .field("providers", &providers)
            .field("journal", &self.inner.journal)
            .field("default_model", &self.inner.default_model.to_string())
            .finish_non_exhaustive()
    }
}

/// Builds an [`Engine`].
pub struct EngineBuilder {
    inner: EngineInner,
}

impl fmt::Debug for EngineBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineBuilder").finish_non_exhaustive()
    }
}

impl Engine {
    /// A builder over the given stores. The echo provider is registered and is the default
    /// model until another default is set.
    pub fn builder(journal: Arc<dyn JournalStore>, transcripts: Arc<dyn TranscriptStore>) -> EngineBuilder {
        // The built-in echo model answers after a short, model-like latency, so offline demos
        // behave like real runs (a fan-out's branches are all in flight at once, and budget
        // admission does not depend on thread timing). Benchmarks register a zero-latency echo.
        let echo: Arc<dyn Provider> =
            Arc::new(crate::provider::echo::EchoProvider::new().with_latency(ECHO_DEMO_LATENCY));
        let mut providers: HashMap<String, Arc<dyn Provider>> = HashMap::new();
        providers.insert(echo.name().to_owned(), echo);
        EngineBuilder {
            inner: EngineInner {
                providers,
                journal,
                transcripts,
                defaults: HashMap::new(),
                default_model: ModelRef::parse("echo:default").unwrap_or_else(|_| unreachable_model()),
                profiles: HashMap::new(),
                host_functions: HashMap::new(),
                workflows: HashMap::new(),
                prices: PriceTable::shipped(),
                clock: Arc::new(SystemClock),
                seed: None,
                max_concurrency: 12,
                provider_limits: HashMap::new(),
                max_spawns: 500,
                default_budget: None,
                child_share_ppm: 300_000,
                max_depth: 8,
                max_retries: 3,
                retry_base: Duration::from_millis(250),
                dialects: HashMap::new(),
                toolsets: HashMap::new(),
                fallbacks: HashMap::new(),
                permissions: crate::agent::Permissions::allow_all(),
                lease_ttl: lease::DEFAULT_LEASE_TTL,
                backoff: crate::agent::Backoff::default(),
                host_docs: HashMap::new(),
                workflow_docs: HashMap::new(),
            },
        }
    }

    /// Starts a run of `workflow` with `args`. Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// `config` for invalid options (a non-finite or negative budget, a deadline in the
    /// past, a run id that already exists); nothing is written then. `internal` for a store
    /// failure.
    pub fn run(&self, workflow: &Workflow, args: Value, options: RunOptions) -> Result<RunHandle, Error> {
        run::start(self.inner.clone(), workflow.clone(), args, options, None)
    }

    /// Starts a run of a script: compiles it (lint errors reject it before anything is
    /// written), stores its source with the run so a resume needs no file, and runs it.
    ///
    /// # Errors
    /// `validation` when the script is rejected (the diagnostics are in the message);
    /// `config` for an unknown dialect or invalid options.
    pub fn run_script(
        &self,
        script: &Script,
        args: Value,
        mut options: RunOptions,
    ) -> Result<RunHandle, Error> {
        let dialect = self.dialect(&script.dialect)?;
        let workflow = dialect.prepare(self, &script.name, &script.source)?;
        if script.policy == ErrorPolicy::Lenient {
            options.policy = ErrorPolicy::Lenient;
        }
        let source = run::ScriptSource {
            dialect: dialect.name(),
            source: script.source.clone(),
            hash: script.source_hash(),
        };
        run::start(self.inner.clone(), workflow, args, options, Some(source))
    }

    /// The registered dialect of that name (`rhai`, `lua`).
    ///
    /// # Errors
    /// `config` when no dialect of that name is registered.
    pub fn dialect(&self, name: &str) -> Result<Arc<dyn ScriptDialect>, Error> {
        self.inner
            .dialects
            .get(name)
            .cloned()
            .ok_or_else(|| Error::config(format!("unknown script dialect {name:?}")))
    }

    /// The registered dialect whose scripts carry that file extension (without the dot).
    pub fn dialect_for_extension(&self, extension: &str) -> Option<Arc<dyn ScriptDialect>> {
        let mut dialects: Vec<_> = self.inner.dialects.values().collect();
        dialects.sort_by_key(|dialect| dialect.name());
        dialects.into_iter().find(|dialect| dialect.extension() == extension).cloned()
    }

    /// The names a script may refer to (profiles, toolsets, host functions, workflows).
    pub fn registered(&self) -> Registered {
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        Registered {
            profiles: sorted(self.inner.profiles.keys().cloned().collect()),
            toolsets: sorted(self.inner.toolsets.keys().cloned().collect()),
            host_functions: sorted(self.inner.host_functions.keys().cloned().collect()),
            workflows: sorted(self.inner.workflows.keys().cloned().collect()),
        }
    }

    /// Resumes a run from its journal: completed calls replay, the rest run live.
    ///
    /// # Errors
    /// `config` for an unknown run, an unknown workflow or bad options; `internal` for a
    /// store failure or an unreadable journal.
    pub fn resume(&self, run_id: &RunId, options: ResumeOptions) -> Result<RunHandle, Error> {
        run::resume(self, run_id, options)
    }

    /// Appends a resolution for a suspended run's `await_external(key)` to its journal, for
    /// a run that is not live in this process (`cairn resolve`). Returns whether it applied
    /// (or, for a run another process is driving, was queued for that driver to apply).
    ///
    /// # Errors
    /// `config` for an unknown run; `validation` when the run never waited on `key`.
    pub fn resolve_external(&self, run_id: &RunId, key: &str, value: Value) -> Result<bool, Error> {
        self.resolve(run_id, key, value).map(|r| r != Resolution::AlreadyResolved)
    }

    /// Resolves an `await_external(key)` wait of a run that is not live in this process.
    /// When nobody drives the run, the resolution is appended under the run's lease; when
    /// another process drives it, the resolution waits in the run's inbox and that driver
    /// applies it (or the next resume does), so it is never lost.
    ///
    /// # Errors
    /// `config` for an unknown run; `validation` when the run never waited on `key` or the
    /// value does not satisfy the wait's schema; `internal` for a store failure.
    pub fn resolve(&self, run_id: &RunId, key: &str, value: Value) -> Result<Resolution, Error> {
        let resolution = lease::resolve(&self.inner, run_id, key, value)?;
        if resolution != Resolution::AlreadyResolved {
            // A parked queued run goes back to the queue for a worker to continue.
            queue::requeue_resolved(&self.inner, run_id)?;
        }
        Ok(resolution)
    }

    /// The journal store.
    pub fn journal_store(&self) -> &Arc<dyn JournalStore> {
        &self.inner.journal
    }

    /// The registries and defaults, for crate modules that analyse or render them (the static
    /// cost bound, the planner's profile card).
    pub(crate) fn inner(&self) -> &EngineInner {
        &self.inner
    }

    /// Lists the tools of every toolset's sources (MCP servers, connecting to each), so the
    /// profile card shows them; returns the failures, each naming its source.
    pub async fn list_tools(&self) -> Vec<Error> {
        let mut names: Vec<&String> = self.inner.toolsets.keys().collect();
        names.sort();
        let mut failures = Vec::new();
        for name in names {
            if let Some(toolset) = self.inner.toolsets.get(name)
                && let Err(error) = toolset.resolve().await
                && !failures.iter().any(|f: &Error| f.message == error.message)
            {
                failures.push(error);
            }
        }
        failures
    }
}

fn unreachable_model() -> ModelRef {
    // "echo:default" always parses; this only satisfies the type checker without a panic.
    ModelRef::parse("echo:default").unwrap_or_else(|_| unreachable_model())
}

impl EngineBuilder {
    /// Registers a provider under its name (replacing one of the same name).
    pub fn provider(mut self, provider: Arc<dyn Provider>) -> EngineBuilder {
        self.inner.providers.insert(provider.name().to_owned(), provider);
        self
    }

    /// Replaces every registered provider by `wrap(provider)`: how a host records or
    /// replays all traffic through cassettes.
    ///
    /// # Errors
    /// The first error `wrap` returns.
    pub fn try_map_providers(
        mut self,
        wrap: impl Fn(Arc<dyn Provider>) -> Result<Arc<dyn Provider>, Error>,
    ) -> Result<EngineBuilder, Error> {
        let mut mapped = HashMap::with_capacity(self.inner.providers.len());
        for (name, provider) in self.inner.providers.drain() {
            mapped.insert(name, wrap(provider)?);
        }
        self.inner.providers = mapped;
        Ok(self)
    }

    /// Sets the model used when neither the call nor its profile names one.
    pub fn default_model(mut self, model: ModelRef) -> EngineBuilder {
        self.inner.default_model = model;
        self
    }

    /// Sets the default model of one invocation role.
    pub fn role_model(mut self, role: InvocationRole, model: ModelRef) -> EngineBuilder {
        self.inner.defaults.insert(role, model);
        self
    }

    /// Registers an agent profile.
    pub fn profile(mut self, name: &str, profile: AgentProfile) -> EngineBuilder {
        self.inner.profiles.insert(name.to_owned(), profile);
        self
    }

    /// Registers a host function.
    pub fn host_function<F, Fut>(mut self, name: &str, f: F) -> EngineBuilder
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, Error>> + Send + 'static,
    {
        self.inner.host_functions.insert(name.to_owned(), Arc::new(move |args| Box::pin(f(args))));
        self
    }

    /// Describes a registered host function for planner models: what it does and, when known,
    /// the JSON Schema of the arguments it accepts (shown on the profile card).
    pub fn describe_host_function(
        mut self,
        name: &str,
        description: &str,
        accepts: Option<Value>,
    ) -> EngineBuilder {
        self.inner
            .host_docs
            .insert(name.to_owned(), Described { description: description.to_owned(), accepts });
        self
    }

    /// Describes a registered child workflow for planner models: what it does and, when known,
    /// the JSON Schema of the arguments it accepts (shown on the profile card).
    pub fn describe_workflow(
        mut self,
        name: &str,
        description: &str,
        accepts: Option<Value>,
    ) -> EngineBuilder {
        self.inner
            .workflow_docs
            .insert(name.to_owned(), Described { description: description.to_owned(), accepts });
        self
    }

    /// Registers a workflow: callable as a child (`ctx.workflow(name, ..)`) and resumable by
    /// name.
    pub fn workflow(mut self, workflow: Workflow) -> EngineBuilder {
        self.inner.workflows.insert(workflow.name.clone(), workflow);
        self
    }

    /// Replaces the price table.
    pub fn prices(mut self, prices: PriceTable) -> EngineBuilder {
        self.inner.prices = prices;
        self
    }

    /// Sets the clock (tests inject a `ManualClock`).
    pub fn clock(mut self, clock: SharedClock) -> EngineBuilder {
        self.inner.clock = clock;
        self
    }

    /// Seeds `random()` and `uuid()` (tests); by default each run seeds from its id and start time.
    pub fn seed(mut self, seed: u64) -> EngineBuilder {
        self.inner.seed = Some(seed);
        self
    }

    /// At most `n` concurrent model calls per run (default 12).
    pub fn max_concurrency(mut self, n: usize) -> EngineBuilder {
        self.inner.max_concurrency = n.max(1);
        self
    }

    /// At most `n` concurrent model calls per run to one provider.
    pub fn provider_limit(mut self, provider: &str, n: usize) -> EngineBuilder {
        self.inner.provider_limits.insert(provider.to_owned(), n.max(1));
        self
    }

    /// The lifetime cap of agent spawns per run (default 500).
    pub fn max_spawns(mut self, n: u32) -> EngineBuilder {
        self.inner.max_spawns = n;
        self
    }

    /// The ceiling of runs that give none (default: unbounded).
    pub fn default_budget(mut self, ceiling: Money) -> EngineBuilder {
        self.inner.default_budget = Some(ceiling);
        self
    }

    /// Retries of a retryable provider failure before failing (default 3), and the base
    /// backoff (doubled per attempt, with jitter, or the provider's Retry-After).
    pub fn retries(mut self, max_retries: u32, base: Duration) -> EngineBuilder {
        self.inner.max_retries = max_retries;
        self.inner.retry_base = base;
        self
    }

    /// Declares fallbacks for a model: when a call to `model` keeps failing retryably (after
    /// its retries), it moves to each fallback in turn. The call's identity stays `model`;
    /// the journal's `served_by` records who answered. Budget failures never fail over.
    pub fn fallbacks(mut self, model: ModelRef, fallbacks: Vec<ModelRef>) -> EngineBuilder {
        self.inner.fallbacks.insert(model, fallbacks);
        self
    }

    /// Caps retry waits: no backoff longer than `max_backoff` (default 30 s), and a provider's
    /// `Retry-After` honoured up to `max_retry_after` (default 60 s).
    pub fn retry_limits(mut self, max_backoff: Duration, max_retry_after: Duration) -> EngineBuilder {
        self.inner.backoff.max = max_backoff;
        self.inner.backoff.max_retry_after = max_retry_after;
        self
    }

    /// Registers a toolset under its name.
    pub fn toolset(mut self, toolset: crate::agent::Toolset) -> EngineBuilder {
        self.inner.toolsets.insert(toolset.name().to_owned(), toolset);
        self
    }

    /// Sets the permission chain every tool call passes (default: allow all).
    pub fn permissions(mut self, permissions: crate::agent::Permissions) -> EngineBuilder {
        self.inner.permissions = permissions;
        self
    }

    /// How long a run's lease lasts without renewal (default 30 s). A driver renews it every
    /// third of this; a driver that dies holds the run until it expires.
    pub fn lease_ttl(mut self, ttl: Duration) -> EngineBuilder {
        self.inner.lease_ttl = ttl.max(Duration::from_millis(30));
        self
    }

    /// Registers a script dialect (Rhai is registered by default).
    pub fn dialect(mut self, dialect: Arc<dyn ScriptDialect>) -> EngineBuilder {
        self.inner.dialects.insert(dialect.name().to_owned(), dialect);
        self
    }

    /// Builds the engine.
    ///
    /// # Errors
    /// `config` when the default model names an unregistered provider.
    pub fn build(mut self) -> Result<Engine, Error> {
        // The composition point: the engine knows dialects only through `ScriptDialect`.
        if !self.inner.dialects.contains_key("rhai") {
            self = self.dialect(Arc::new(crate::script::rhai::RhaiDialect::new()));
        }
        if !self.inner.dialects.contains_key("lua") {
            self = self.dialect(Arc::new(crate::script::lua::LuaDialect::new()));
        }
        let known = |m: &ModelRef| self.inner.providers.contains_key(m.provider());
        if !known(&self.inner.default_model) {
            return Err(Error::new(
                ErrorCode::Config,
                format!("default model {} names an unregistered provider", self.inner.default_model),
            ));
        }
        Ok(Engine { inner: Arc::new(self.inner) })
    }
}

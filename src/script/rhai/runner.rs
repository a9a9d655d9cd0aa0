//! The Rhai runner: executes a compiled script against the engine, bridging every cairn
//! global onto `Ctx`.
//!
//! A script runs on its own OS thread with a 16 MiB stack; each host call blocks that thread
//! on the async engine. `parallel` branches and `pipeline` items run on scoped threads of
//! their own (one per branch or item), each with the `Ctx` of its scope, so a branch's calls
//! keep their identity however the threads interleave; a `parallel` branch that is one agent
//! call needs no thread: it is evaluated up to its call, which runs as an engine future on the
//! fan-out's thread (`defer`). One operation budget is shared by all
//! of a run's threads through `on_progress`, which also stops the script when the run is
//! cancelled. Values cross the boundary as JSON only; a closure where JSON is expected is a
//! `validation` error.
//!
//! The sandbox's own parts live beside this file: `guard` (operations, memory, script time,
//! cancellation, checked in `on_progress`), `isolate` (each branch gets private read-only
//! copies of what it captured), `threads` (the branch-thread budget, divided by structure),
//! `json` (the linear, depth-capped boundary) and `text` (no closure names reach a script).

use std::cell::RefCell;
use std::pin::pin;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::rhai::{
    AST, Array, Dynamic, Engine as Rhai, EvalAltResult, FnPtr, Map, NativeCallContext, Position, Scope,
};
use serde_json::{Value, json};
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

use super::sandbox::{SandboxLimits, sandbox_engine};
use crate::engine::{
    Branch, CallOptions, Ctx, ExternalOptions, OnItemError, ParallelOptions, PipelineOptions, ScriptDialect,
    Stage, StepOptions, Workflow, WorkflowOptions,
};
use crate::error::{Error, ErrorCode};
use crate::journal::Kind;
use crate::money::Money;
use crate::script::LintContext;
use crate::script::options::{
    agent as agent_options, on_error, parallel as parallel_options, str_opt, usd, validate,
};

/// The stack of every script thread.
const SCRIPT_STACK: usize = 16 << 20;

/// The most threads one `parallel` or `pipeline` runs at once (the run's whole budget, so a
/// 500-way fan-out of model calls has every branch in flight); further branches start as
/// earlier ones finish (the engine's fan-out hands their liveness over, so waits still
/// suspend the run correctly).
const MAX_BRANCH_THREADS: usize = 1024;

/// The most JSON one branch (or item) may hand back, and a fan-out in all: the values that
/// cross the sandbox boundary are bounded like the values inside it.
const MAX_BRANCH_RESULT: usize = 16 << 20;
const MAX_FANOUT_RESULT: usize = 64 << 20;

/// Whether `value` serializes to more than `limit` bytes (an estimate that errs large),
/// stopping as soon as it knows.
/// The JSON size of `value`, estimated as [`json_exceeds`] does.
fn json_size(value: &Value) -> usize {
    fn size(value: &Value) -> usize {
        match value {
            Value::Null | Value::Bool(_) => 5,
            Value::Number(_) => 24,
            Value::String(s) => s.len() + 2,
            Value::Array(items) => items.iter().map(size).sum::<usize>() + items.len() + 2,
            Value::Object(map) => map.iter().map(|(k, v)| k.len() + 4 + size(v)).sum::<usize>() + 2,
        }
    }
    size(value)
}

fn json_exceeds(value: &Value, limit: usize) -> bool {
    fn size(value: &Value, budget: &mut isize) {
        if *budget < 0 {
            return;
        }
        *budget -= match value {
            Value::Null | Value::Bool(_) => 5,
            Value::Number(_) => 24,
            Value::String(s) => s.len() as isize + 2,
            Value::Array(items) => {
                for item in items {
                    size(item, budget);
                }
                items.len() as isize + 2
            }
            Value::Object(map) => {
                for (key, item) in map {
                    *budget -= key.len() as isize + 4;
                    size(item, budget);
                }
                2
            }
        };
    }
    let mut budget = limit as isize;
    size(value, &mut budget);
    budget < 0
}

fn bounded(value: Value, limit: usize, what: &str) -> Result<Value, Error> {
    if json_exceeds(&value, limit) {
        return Err(Error::new(
            ErrorCode::SandboxLimit,
            format!("{what} is larger than {} MiB", limit >> 20),
        ));
    }
    Ok(value)
}

/// The Rhai dialect, as the engine sees it, with the sandbox limits its runs get.
#[derive(Debug, Clone, Copy)]
pub struct RhaiDialect {
    limits: SandboxLimits,
    lint: bool,
}

impl RhaiDialect {
    /// The dialect with [`SandboxLimits::STANDARD`].
    pub const fn new() -> RhaiDialect {
        RhaiDialect { limits: SandboxLimits::STANDARD, lint: true }
    }

    /// The dialect with other limits (register it with `EngineBuilder::dialect`).
    pub const fn with_limits(limits: SandboxLimits) -> RhaiDialect {
        RhaiDialect { limits, lint: true }
    }

    /// The dialect without the lint gate: scripts are only parsed before they run. For tests
    /// of the sandbox's own defences against what lint would have refused; never for real runs.
    #[doc(hidden)]
    pub const fn without_lint(self) -> RhaiDialect {
        RhaiDialect { lint: false, ..self }
    }
}

impl Default for RhaiDialect {
    fn default() -> RhaiDialect {
        RhaiDialect::new()
    }
}

impl ScriptDialect for RhaiDialect {
    fn name(&self) -> &'static str {
        "rhai"
    }

    fn extension(&self) -> &'static str {
        "rhai"
    }

    fn card(&self) -> &'static str {
        crate::script::api_card()
    }

    fn check(&self, source: &str, ctx: &LintContext) -> Vec<crate::script::Diagnostic> {
        super::lint(source, ctx)
    }

    fn call_bound(&self, source: &str, args: &Value) -> crate::script::bound::CallBound {
        super::bound::call_bound(source, args)
    }

    fn prepare(&self, engine: &crate::Engine, name: &str, source: &str) -> Result<Workflow, Error> {
        let lint_context = LintContext::from(engine.registered());
        let compiled = if self.lint {
            super::compile_within(source, &lint_context, &self.limits)
        } else {
            super::parse_only(source, &self.limits)
        };
        let compiled = compiled.map_err(|diagnostics| {
            let errors: Vec<_> = diagnostics.into_iter().filter(|d| d.is_error()).collect();
            Error::validation(format!(
                "script rejected: {}",
                serde_json::to_string(&errors).unwrap_or_else(|_| "unprintable diagnostics".into())
            ))
        })?;
        let ast = Arc::new(compiled.into_ast());
        let limits = self.limits;
        Ok(Workflow::new(name, move |ctx, args| {
            let ast = ast.clone();
            async move { run_on_thread(ast, ctx, args, limits).await }
        }))
    }
}

/// Runs the script on its own thread and waits for its value.
async fn run_on_thread(ast: Arc<AST>, ctx: Ctx, args: Value, limits: SandboxLimits) -> Result<Value, Error> {
    let handle = Handle::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let cancel = ctx.cancel.clone();
    std::thread::Builder::new()
        .name("cairn-script".into())
        .stack_size(SCRIPT_STACK)
        .spawn(move || {
            let result = execute(&ast, ctx, args, handle, cancel, limits);
            let _ = tx.send(result);
        })
        .map_err(|e| Error::internal(format!("cannot start the script thread: {e}")))?;
    rx.await.map_err(|_| Error::internal("the script thread ended without a result"))?
}

/// What every thread of one script run shares.
struct Shared {
    handle: Handle,
    limits: SandboxLimits,
    /// Operations, memory, wall-clock time, cancellation and the run's sandbox-error latch.
    guard: super::guard::RunGuard,
    /// The script's closures' parameters, to name what a branch captured.
    closure_params: super::isolate::ClosureParams,
    /// Which closures are one `agent` call (their branches need no thread: see `defer`).
    shapes: super::defer::Shapes,
    /// Each function's source identity, part of a step's identity (see `body`).
    bodies: super::body::BodyHashes,
}

/// The most branch threads one run may have alive at once, nested fan-outs included, divided
/// among nested fan-outs by structure (see `threads`), so whether a script fits never depends
/// on timing.
const MAX_RUN_THREADS: usize = 1024;

thread_local! {
    /// The `Ctx` of the scope the current script thread runs in (innermost last).
    static CURRENT: RefCell<Vec<Ctx>> = const { RefCell::new(Vec::new()) };
}

fn with_ctx<R>(ctx: Ctx, body: impl FnOnce() -> R) -> R {
    CURRENT.with(|stack| stack.borrow_mut().push(ctx));
    let result = body();
    CURRENT.with(|stack| stack.borrow_mut().pop());
    result
}

fn current() -> Result<Ctx, Box<EvalAltResult>> {
    if super::defer::armed() {
        // A branch evaluated up to its agent call reached another effect: it runs on a thread.
        return Err(super::defer::refused());
    }
    CURRENT
        .with(|stack| stack.borrow().last().cloned())
        .ok_or_else(|| to_rhai(Error::internal("a cairn global was called outside a run")))
}

type RhaiResult<T> = Result<T, Box<EvalAltResult>>;

fn execute(
    ast: &AST,
    ctx: Ctx,
    args: Value,
    handle: Handle,
    cancel: CancellationToken,
    limits: SandboxLimits,
) -> Result<Value, Error> {
    let shared = Arc::new(Shared {
        handle,
        guard: super::guard::RunGuard::new(&limits, cancel),
        limits,
        closure_params: super::isolate::ClosureParams::of(ast),
        shapes: super::defer::Shapes::of(ast),
        bodies: super::body::BodyHashes::of(ast),
    });
    let _charged = shared.guard.enter();
    let engine = build_engine(&shared);
    let mut scope = Scope::new();
    scope.push_constant("args", to_dynamic(&args));
    scope.push_constant("budget", BudgetView);
    let result = with_ctx(ctx, || engine.eval_ast_with_scope::<Dynamic>(&mut scope, ast));
    let (output, value) = match result {
        Ok(value) => (
            to_json(&value).map_err(|e| Error::new(e.code, format!("the script's result: {}", e.message))),
            Some(value),
        ),
        Err(err) => (Err(from_rhai(*err)), None),
    };
    // Deeply nested values (a chain of closures capturing closures) dropped without recursion.
    super::teardown::dismantle(scope.into_iter().map(|(_, value, _)| value).chain(value));
    // A sandbox error in a branch whose errors were dropped (a pipeline) still ends the run.
    if let Some(error) = shared.guard.tripped() {
        return Err(error);
    }
    output
}

/// The read-only `budget` object.
#[derive(Debug, Clone, Copy)]
struct BudgetView;

fn build_engine(shared: &Arc<Shared>) -> Rhai {
    let mut engine = sandbox_engine(&shared.limits);
    super::builtins::register(&mut engine, shared.limits.max_string_size);
    // The per-evaluation limit is a backstop; the shared counter is the run's budget.
    engine.set_max_operations(0);
    let progress = shared.clone();
    engine.on_progress(move |_| progress.guard.operation().map(|error| error_token(&error)));
    super::text::register_closure_text(&mut engine);
    register_agent(&mut engine, shared);
    register_fanout(&mut engine, shared);
    register_effects(&mut engine, shared);
    engine
}

// ---- conversions -----------------------------------------------------------------------------

fn to_dynamic(value: &Value) -> Dynamic {
    match value {
        Value::Null => Dynamic::UNIT,
        Value::Bool(b) => Dynamic::from(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Dynamic::from(i),
            None => Dynamic::from(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => Dynamic::from(s.clone()),
        Value::Array(items) => Dynamic::from_array(items.iter().map(to_dynamic).collect()),
        Value::Object(map) => {
            Dynamic::from_map(map.iter().map(|(k, v)| (k.as_str().into(), to_dynamic(v))).collect::<Map>())
        }
    }
}

/// A script value as JSON; closures and other non-JSON values are refused (see `json`).
fn to_json(value: &Dynamic) -> Result<Value, Error> {
    super::json::to_json(value)
}

fn error_token(error: &Error) -> Dynamic {
    to_dynamic(&serde_json::to_value(error).unwrap_or(Value::Null))
}

/// A cairn error as a script error. Budget exhaustion, cancellation, sandbox limits and
/// replay-strict misses are uncatchable (they end the run); the rest are catchable
/// `#{code, message, retryable}` maps.
fn to_rhai(error: Error) -> Box<EvalAltResult> {
    let token = error_token(&error);
    let fatal = matches!(
        error.code,
        ErrorCode::BudgetExhausted
            | ErrorCode::Cancelled
            | ErrorCode::SandboxLimit
            | ErrorCode::SandboxViolation
            | ErrorCode::JournalMiss
            | ErrorCode::Internal
    );
    Box::new(if fatal {
        EvalAltResult::ErrorTerminated(token, Position::NONE)
    } else {
        EvalAltResult::ErrorRuntime(token, Position::NONE)
    })
}

fn error_from_token(token: &Dynamic) -> Option<Error> {
    let value = to_json(token).ok()?;
    serde_json::from_value::<Error>(value).ok()
}

fn at(pos: Position) -> String {
    match (pos.line(), pos.position()) {
        (Some(line), Some(column)) => format!(" at line {line}, column {column}"),
        (Some(line), None) => format!(" at line {line}"),
        _ => String::new(),
    }
}

/// A script error as a cairn error, keeping the code of a cairn error that crossed it.
fn from_rhai(err: EvalAltResult) -> Error {
    if let Some(violation) = super::isolate::violation(&err) {
        return violation;
    }
    match err {
        EvalAltResult::ErrorTerminated(token, pos) => error_from_token(&token).unwrap_or_else(|| {
            Error::new(ErrorCode::SandboxLimit, format!("the script was terminated{}", at(pos)))
        }),
        EvalAltResult::ErrorRuntime(value, pos) => error_from_token(&value).unwrap_or_else(|| {
            let thrown = super::text::scrub(&value.to_string()).into_owned();
            Error::new(ErrorCode::ScriptError, format!("the script threw {thrown}{}", at(pos)))
        }),
        EvalAltResult::ErrorInFunctionCall(name, _, inner, _) => {
            let mut error = from_rhai(*inner);
            // A closure's internal name is process text, never shown (see `text`).
            if error.code == ErrorCode::ScriptError && !super::text::is_closure_name(&name) {
                error.message = format!("in {name}: {}", error.message);
            }
            error
        }
        err @ (EvalAltResult::ErrorTooManyOperations(..)
        | EvalAltResult::ErrorTooManyVariables(..)
        | EvalAltResult::ErrorTooManyModules(..)
        | EvalAltResult::ErrorStackOverflow(..)
        | EvalAltResult::ErrorDataTooLarge(..)) => {
            Error::new(ErrorCode::SandboxLimit, super::text::scrub(&err.to_string()))
        }
        other => Error::new(ErrorCode::ScriptError, super::text::scrub(&other.to_string())),
    }
}

/// Charges host work done for the script to its run (see `script::host`): `bytes` hashed,
/// copied or converted, `kept` of them kept for the rest of the run, `entries` journal
/// entries.
fn host_work(bytes: usize, kept: usize, entries: u64) -> RhaiResult<()> {
    match super::guard::host_work_current(bytes as u64, kept as u64, entries) {
        Some(error) => Err(to_rhai(error)),
        None => Ok(()),
    }
}

fn block<T>(shared: &Shared, future: impl std::future::Future<Output = Result<T, Error>>) -> RhaiResult<T> {
    let _waiting = shared.guard.pause();
    block_host(shared, future)
}

/// [`block`] for a call that waits for nothing but the host's own work for the script (`now`,
/// `random`, `uuid`): its time is the script's.
fn block_host<T>(
    shared: &Shared,
    future: impl std::future::Future<Output = Result<T, Error>>,
) -> RhaiResult<T> {
    // Every engine call writes (or replays) a journal entry the host keeps.
    if let Some(error) = shared.guard.host_work(0, 0, 1) {
        return Err(to_rhai(error));
    }
    // The engine's buffers are not the script's memory (what it keeps is charged above).
    let _engine_work = crate::alloc::MemoryAccount::suspend();
    // Pinned here, so `block_on` moves a pointer: an engine future is kilobytes large, and
    // moving it by value through tokio's layers copied it three times per call. Callers pin
    // it where it is made (`block(shared, pin!(ctx.agent(..)))`), so it is never moved.
    let future = pin!(future);
    shared.handle.block_on(future).map_err(to_rhai)
}

// ---- options -------------------------------------------------------------------------------------

/// Converts an options map to JSON and validates it against the global's schema: the same
/// schema lint checks statically is enforced here at the sandbox boundary.
fn options(global: &str, opts: &Map) -> Result<Value, Error> {
    if opts.is_empty() {
        // Every options schema accepts `{}` (a unit test checks it): skip the conversion and
        // the validation on the common call without options.
        return Ok(Value::Object(serde_json::Map::new()));
    }
    let value = to_json(&Dynamic::from_map(opts.clone()))
        .map_err(|e| Error::validation(format!("{global} options: {}", e.message)))?;
    validate(global, value)
}

fn register_agent(engine: &mut Rhai, shared: &Arc<Shared>) {
    fn agent(shared: &Shared, prompt: &str, opts: &Map) -> RhaiResult<Dynamic> {
        let parse = |opts: &Map| options("agent", opts).and_then(|value| agent_options(&value)).ok();
        if let Some(deferred) = super::defer::offer(prompt, opts, parse) {
            return deferred;
        }
        let ctx = current()?;
        let value = options("agent", opts).map_err(to_rhai)?;
        let options = agent_options(&value).map_err(to_rhai)?;
        let full = options.full;
        let result = block(shared, pin!(ctx.agent(prompt, options)))?;
        Ok(to_dynamic(&agent_value(result, full)))
    }
    let s = shared.clone();
    engine.register_fn("agent", move |prompt: &str| agent(&s, prompt, &Map::new()));
    let s = shared.clone();
    engine.register_fn("agent", move |prompt: &str, opts: Map| agent(&s, prompt, &opts));
}

/// An agent call's value as the script sees it.
fn agent_value(result: Value, full: bool) -> Value {
    if full && let Value::Object(mut map) = result {
        // The card's shape: #{status, value, error, usage, cost_usd}.
        let cost_usd = map.get("cost_nano_usd").and_then(Value::as_i64).map(|n| n as f64 / 1e9);
        map.insert("cost_usd".into(), json!(cost_usd));
        map.entry("error").or_insert(Value::Null);
        return Value::Object(map);
    }
    result
}

/// A deferred branch (see `defer`): its agent call in the branch's scope, its value and error
/// handed back as the branch's thread would have handed them (through a script value).
///
/// It is polled on the fan-out's thread, a script thread: the call is the engine's work, so
/// every poll of it runs with the run's memory account suspended (as `block` does for a call
/// on a thread), and what it returns is freed suspended too; the branch's value is made with
/// the account on, as a branch thread makes it, so the account neither misses it nor is
/// credited for memory it never counted.
async fn deferred_branch(ctx: Ctx, deferred: super::defer::Deferred) -> Result<Value, Error> {
    let full = deferred.options.full;
    let mut call = pin!(ctx.agent(&deferred.prompt, deferred.options));
    let outcome = std::future::poll_fn(|cx| {
        let _engine_work = crate::alloc::MemoryAccount::suspend();
        call.as_mut().poll(cx)
    })
    .await;
    let (branch, engine_made) = match outcome {
        Ok(value) => {
            let value = {
                let _engine_work = crate::alloc::MemoryAccount::suspend();
                agent_value(value, full)
            };
            let branch =
                to_json(&to_dynamic(&value)).and_then(|v| bounded(v, MAX_BRANCH_RESULT, "a branch's result"));
            (branch, Ok(value))
        }
        Err(error) => (Err(from_rhai(*to_rhai(error.clone()))), Err(error)),
    };
    let _engine_work = crate::alloc::MemoryAccount::suspend();
    drop(engine_made);
    branch
}

// ---- parallel and pipeline --------------------------------------------------------------------------

/// A job for a scoped script thread: call closure `index` with `args` in `ctx`'s scope.
struct Job {
    index: usize,
    ctx: Ctx,
    args: Vec<Dynamic>,
    reply: tokio::sync::oneshot::Sender<Result<Value, Error>>,
}

/// Runs `body` with `workers` scoped threads that execute closures of `fns` on demand. The
/// async side submits jobs through the returned sender and awaits each reply, so the engine
/// drives scopes, cancellation and liveness while the closures run on real threads.
fn with_workers<R>(
    shared: &Shared,
    context: &NativeCallContext,
    fns: &[FnPtr],
    workers: usize,
    body: impl FnOnce(mpsc::Sender<Job>, usize) -> R,
) -> Result<R, Error> {
    // The grant depends on the script's fan-outs only, never on which are alive (see `threads`).
    let grant = super::threads::grant(workers, MAX_RUN_THREADS)?;
    // This thread waits for the branches; their threads count their own time.
    let _waiting = shared.guard.pause();
    let granted = grant.workers;
    let (tx, rx) = mpsc::channel::<Job>();
    let rx = Mutex::new(rx);
    let isolation = super::isolate::Isolation::new(&shared.closure_params, &shared.guard);
    let rx = &rx;
    let isolation = &isolation;
    // Every worker runs this (it captures only references, so it is `Copy`).
    let worker = move || {
        let _charged = shared.guard.enter();
        super::threads::hold(grant.nested_budget);
        loop {
            let job = {
                let _waiting = shared.guard.pause();
                rx.lock().unwrap_or_else(|p| p.into_inner()).recv()
            };
            let Ok(job) = job else { break };
            let result = with_ctx(job.ctx, || {
                isolation
                    .call_branch(&fns[job.index], context, job.args)
                    .map_err(|e| from_rhai(*e))
                    .and_then(|v| to_json(&v))
                    .and_then(|v| bounded(v, MAX_BRANCH_RESULT, "a branch's result"))
            });
            let _ = job.reply.send(result);
        }
    };
    std::thread::scope(|scope| {
        let spawn = move || std::thread::Builder::new().stack_size(SCRIPT_STACK).spawn_scoped(scope, worker);
        // One worker before the branches start, so a job always finds a thread; the others
        // start on a thread of their own while the first branches already run (a wide fan-out
        // no longer waits for hundreds of thread starts before its first call). Jobs queue in
        // branch order and a worker takes the oldest, so a branch never waits on one that has
        // no thread.
        if spawn().is_err() {
            // No thread could be started: fail rather than wait for a worker forever.
            return Err(Error::new(ErrorCode::SandboxLimit, "no thread could be started for the branches"));
        }
        let rest = granted - 1;
        if rest > 0 {
            let spawner =
                std::thread::Builder::new().name("cairn-spawner".into()).spawn_scoped(scope, move || {
                    for _ in 0..rest {
                        if spawn().is_err() {
                            // The fan-out was promised `granted` threads; with fewer, a branch
                            // counted as running could sit in the queue behind waiting ones. End
                            // the run instead (every queued job then fails at its first operation).
                            shared.guard.trip(Error::new(
                                ErrorCode::SandboxLimit,
                                format!("only part of a fan-out's {granted} branch threads could be started"),
                            ));
                            break;
                        }
                    }
                });
            if spawner.is_err() {
                // No spawner thread: start the rest here, as many as the system allows.
                let started = 1 + (0..rest).take_while(|_| spawn().is_ok()).count();
                return Ok(body(tx, started));
            }
        }
        Ok(body(tx, granted))
    })
}

/// Submits a job and awaits its result.
async fn submit(
    jobs: &mpsc::Sender<Job>,
    index: usize,
    ctx: Ctx,
    args: Vec<Dynamic>,
) -> Result<Value, Error> {
    let (reply, result) = tokio::sync::oneshot::channel();
    jobs.send(Job { index, ctx, args, reply })
        .map_err(|_| Error::internal("no script thread is left to run the branch"))?;
    result.await.map_err(|_| Error::internal("a script thread ended without a result"))?
}

fn fn_ptrs(items: &Array, what: &str) -> Result<Vec<FnPtr>, Error> {
    items
        .iter()
        .map(|item| {
            item.clone().try_cast::<FnPtr>().ok_or_else(|| {
                Error::validation(format!("{what} must be closures, found a {}", item.type_name()))
            })
        })
        .collect()
}

fn parallel(
    shared: &Shared,
    context: &NativeCallContext,
    fns: Vec<FnPtr>,
    args: Vec<Vec<Dynamic>>,
    opts: &Map,
) -> RhaiResult<Dynamic> {
    let ctx = current()?;
    // Each branch is a journal scope, state and a result the host keeps.
    host_work(0, 0, args.len().max(fns.len()) as u64)?;
    let opts = options("parallel", opts).map_err(to_rhai)?;
    let popts = parallel_options(&opts);
    let single_fn = fns.len() == 1 && args.len() != 1;
    let count = args.len();
    let workers = popts.concurrency.unwrap_or(count).min(count).min(MAX_BRANCH_THREADS);
    // Branches that are one agent call are evaluated here up to their call and need no thread;
    // the others keep their arguments for a thread (see `defer`).
    let fn_of = |i: usize| &fns[if single_fn { 0 } else { i }];
    let isolation = super::isolate::Isolation::new(&shared.closure_params, &shared.guard);
    let mut threaded = 0;
    let branches: Vec<Result<super::defer::Deferred, Vec<Dynamic>>> = args
        .into_iter()
        .enumerate()
        .map(|(i, call_args)| {
            let pointer = fn_of(i);
            if shared.shapes.one_agent_call(pointer)
                && let Some(deferred) =
                    super::defer::evaluate(&isolation, pointer, context, call_args.clone())
            {
                return Ok(deferred);
            }
            threaded += 1;
            Err(call_args)
        })
        .collect();
    let fan_out = |jobs: Option<mpsc::Sender<Job>>, concurrency: usize| {
        let popts = ParallelOptions { concurrency: Some(concurrency), ..popts };
        let jobs = jobs.map(Arc::new);
        let branches: Vec<Branch> = branches
            .into_iter()
            .enumerate()
            .map(|(i, branch)| match branch {
                Ok(deferred) => crate::engine::branch(move |ctx| deferred_branch(ctx, deferred)),
                Err(call_args) => {
                    let jobs = jobs.clone();
                    let index = if single_fn { 0 } else { i };
                    crate::engine::branch(move |ctx| async move {
                        let jobs = jobs.ok_or_else(|| Error::internal("a threaded branch has no thread"))?;
                        submit(&jobs, index, ctx, call_args).await
                    })
                }
            })
            .collect();
        // This thread waits for the branches (the deferred calls run here, but as engine work).
        let _waiting = shared.guard.pause();
        shared.handle.block_on(pin!(ctx.parallel(branches, popts)))
    };
    let result = if threaded == 0 {
        // No thread is started, but the fan-out still counts against its thread's share, so
        // whether nested fan-outs fit stays a matter of the script's structure (see `threads`).
        super::threads::grant(1, MAX_RUN_THREADS).map(|_| fan_out(None, workers))
    } else {
        let wanted = workers.min(threaded);
        with_workers(shared, context, &fns, wanted, |jobs, threads| {
            // As many branches in flight as there are threads to run them, unless every
            // threaded branch in flight has a thread anyway.
            fan_out(Some(jobs), if threads < wanted { threads } else { workers })
        })
    };
    result
        .and_then(|r| r)
        .and_then(|values| bounded(Value::Array(values), MAX_FANOUT_RESULT, "the results of a parallel"))
        .map(|values| to_dynamic(&values))
        .map_err(to_rhai)
}

fn pipeline(
    shared: &Shared,
    context: &NativeCallContext,
    items: Array,
    stages: Array,
    opts: &Map,
) -> RhaiResult<Dynamic> {
    let ctx = current()?;
    host_work(0, 0, items.len().saturating_mul(stages.len()) as u64)?;
    let opts = options("pipeline", opts).map_err(to_rhai)?;
    let fns = fn_ptrs(&stages, "pipeline stages").map_err(to_rhai)?;
    let items: Vec<Value> = items.iter().map(to_json).collect::<Result<_, _>>().map_err(to_rhai)?;
    let mode = match opts.get("on_item_error").and_then(Value::as_str) {
        Some("throw") => OnItemError::Throw,
        Some("collect") => OnItemError::Collect,
        _ => OnItemError::Drop,
    };
    let concurrency = opts.get("concurrency").and_then(Value::as_u64).map(|n| n as usize);
    let workers = concurrency.unwrap_or(items.len()).min(items.len()).min(MAX_BRANCH_THREADS);
    let engine_mode = if mode == OnItemError::Collect { OnItemError::Collect } else { mode };
    let result = with_workers(shared, context, &fns, workers, |jobs, threads| {
        let concurrency = Some(threads);
        let jobs = Arc::new(jobs);
        let stages: Vec<Stage> = (0..fns.len())
            .map(|index| {
                let jobs = jobs.clone();
                crate::engine::stage(move |ctx, value: Value| {
                    let jobs = jobs.clone();
                    async move { submit(&jobs, index, ctx, vec![to_dynamic(&value)]).await }
                })
            })
            .collect();
        let outcome = shared.handle.block_on(pin!(ctx.pipeline(
            items,
            stages,
            PipelineOptions { on_item_error: engine_mode, concurrency, label: str_opt(&opts, "label") },
        )));
        drop(jobs);
        outcome
    });
    let values = result
        .and_then(|r| r)
        .and_then(|values| {
            match bounded(Value::Array(values), MAX_FANOUT_RESULT, "the results of a pipeline")? {
                Value::Array(values) => Ok(values),
                _ => Err(Error::internal("bounded changed the shape of the results")),
            }
        })
        .map_err(to_rhai)?;
    if mode == OnItemError::Collect {
        // The card's shape: #{results, dropped}, dropped as #{index, error}.
        let mut results = Vec::new();
        let mut dropped = Vec::new();
        for (index, value) in values.into_iter().enumerate() {
            match value.get("error") {
                Some(error) if value.as_object().is_some_and(|m| m.len() == 1) => {
                    dropped.push(json!({ "index": index, "error": error }))
                }
                _ => results.push(value),
            }
        }
        return Ok(to_dynamic(&json!({ "results": results, "dropped": dropped })));
    }
    Ok(to_dynamic(&Value::Array(values)))
}

fn register_fanout(engine: &mut Rhai, shared: &Arc<Shared>) {
    fn list_form(
        shared: &Shared,
        context: NativeCallContext,
        branches: Array,
        opts: Map,
    ) -> RhaiResult<Dynamic> {
        let fns = fn_ptrs(&branches, "parallel branches").map_err(to_rhai)?;
        let args = vec![Vec::new(); fns.len()];
        parallel(shared, &context, fns, args, &opts)
    }
    fn map_form(
        shared: &Shared,
        context: NativeCallContext,
        items: Array,
        f: FnPtr,
        opts: Map,
    ) -> RhaiResult<Dynamic> {
        let args: Vec<Vec<Dynamic>> = items.into_iter().map(|item| vec![item]).collect();
        if args.is_empty() {
            return Ok(Dynamic::from_array(Array::new()));
        }
        if args.len() == 1 {
            // One item: keep the single-function indexing unambiguous.
            return parallel(shared, &context, vec![f.clone(), f], vec![args[0].clone()], &opts)
                .map(|d| d.cast::<Array>().into_iter().take(1).collect::<Array>().into());
        }
        parallel(shared, &context, vec![f], args, &opts)
    }
    let s = shared.clone();
    engine.register_fn("parallel", move |c: NativeCallContext, b: Array| list_form(&s, c, b, Map::new()));
    let s = shared.clone();
    engine.register_fn("parallel", move |c: NativeCallContext, b: Array, o: Map| list_form(&s, c, b, o));
    let s = shared.clone();
    engine.register_fn("parallel", move |c: NativeCallContext, i: Array, f: FnPtr| {
        map_form(&s, c, i, f, Map::new())
    });
    let s = shared.clone();
    engine.register_fn("parallel", move |c: NativeCallContext, i: Array, f: FnPtr, o: Map| {
        map_form(&s, c, i, f, o)
    });
    let s = shared.clone();
    engine.register_fn("pipeline", move |c: NativeCallContext, i: Array, st: Array| {
        pipeline(&s, &c, i, st, &Map::new())
    });
    let s = shared.clone();
    engine.register_fn("pipeline", move |c: NativeCallContext, i: Array, st: Array, o: Map| {
        pipeline(&s, &c, i, st, &o)
    });
}

// ---- steps, calls, phases, children, waits, shims ------------------------------------------------------

fn register_effects(engine: &mut Rhai, shared: &Arc<Shared>) {
    fn step(
        shared: &Shared,
        context: &NativeCallContext,
        label: &str,
        body: FnPtr,
        opts: &Map,
    ) -> RhaiResult<Dynamic> {
        let ctx = current()?;
        // Two journal entries (the step's start and its result), the label hashed into its key.
        host_work(label.len(), label.len(), 2)?;
        let opts = options("step", opts).map_err(to_rhai)?;
        let deps = opts.get("deps").and_then(Value::as_array).cloned().unwrap_or_default();
        let step_opts =
            StepOptions { key: str_opt(&opts, "key"), deps, on_error: None, body: shared.bodies.get(&body) };
        let key = Ctx::step_key(label, &step_opts).map_err(to_rhai)?;
        let live = match ctx.begin_two_phase(Kind::Step, "step", label, key, None).map_err(to_rhai)? {
            crate::engine::Begun::Done(result) => return result.map(|v| to_dynamic(&v)).map_err(to_rhai),
            crate::engine::Begun::Live(live) => live,
        };
        // The body runs here, on the script thread, between the two journal entries, in the
        // step's own scope (so its effects never shift what follows the step).
        // What the body captured is read-only inside it (a replay skips the body, so a write
        // there would be lost and what follows would differ).
        let inner = ctx.step_body(&live);
        let isolation = super::isolate::Isolation::step(&shared.closure_params, &shared.guard);
        let result = with_ctx(inner, || isolation.call_branch(&body, context, Vec::new()))
            .map_err(|e| from_rhai(*e))
            .and_then(|v| to_json(&v));
        ctx.end_two_phase(live, result).map(|v| to_dynamic(&v)).map_err(to_rhai)
    }
    let s = shared.clone();
    engine.register_fn("step", move |c: NativeCallContext, label: &str, body: FnPtr| {
        step(&s, &c, label, body, &Map::new())
    });
    let s = shared.clone();
    engine.register_fn("step", move |c: NativeCallContext, label: &str, body: FnPtr, o: Map| {
        step(&s, &c, label, body, &o)
    });

    fn host_call(shared: &Shared, name: &str, args: &Dynamic, opts: &Map) -> RhaiResult<Dynamic> {
        let ctx = current()?;
        let opts = options("call", opts).map_err(to_rhai)?;
        let args = to_json(args)
            .map_err(|e| to_rhai(Error::validation(format!("host_call args: {}", e.message))))?;
        let call_opts = CallOptions { key: str_opt(&opts, "key"), on_error: on_error(&opts) };
        block(shared, pin!(ctx.call(name, args, call_opts))).map(|v| to_dynamic(&v))
    }
    let s = shared.clone();
    engine.register_fn("host_call", move |name: &str, args: Dynamic| host_call(&s, name, &args, &Map::new()));
    let s = shared.clone();
    engine.register_fn("host_call", move |name: &str, args: Dynamic, o: Map| host_call(&s, name, &args, &o));

    fn phase(context: &NativeCallContext, name: &str, body: FnPtr) -> RhaiResult<Dynamic> {
        let ctx = current()?;
        let inner = ctx.begin_phase(name);
        let result = with_ctx(inner.clone(), || body.call_within_context::<Dynamic>(context, ()));
        ctx.end_phase(&inner);
        result
    }
    engine.register_fn("phase", |c: NativeCallContext, name: &str, body: FnPtr| phase(&c, name, body));

    fn log(level: &str, message: &str, data: Option<&Dynamic>) -> RhaiResult<()> {
        let ctx = current()?;
        if !matches!(level, "debug" | "info" | "warn" | "error") {
            return Err(to_rhai(Error::validation(format!(
                "log level {level:?} is not one of debug, info, warn, error"
            ))));
        }
        let data = data.map(to_json).transpose().map_err(to_rhai)?;
        // A log is an event the host keeps (and journals) with its message and data.
        let size = message.len() + data.as_ref().map_or(0, json_size);
        host_work(size, size, 1)?;
        ctx.log(level, message, data);
        Ok(())
    }
    engine.register_fn("log", |level: &str, message: &str| log(level, message, None));
    engine.register_fn("log", |level: &str, message: &str, data: Dynamic| log(level, message, Some(&data)));

    fn child(shared: &Shared, name: &str, args: &Dynamic, opts: &Map) -> RhaiResult<Dynamic> {
        let ctx = current()?;
        let opts = options("workflow", opts).map_err(to_rhai)?;
        let args =
            to_json(args).map_err(|e| to_rhai(Error::validation(format!("workflow args: {}", e.message))))?;
        let wopts = WorkflowOptions {
            key: str_opt(&opts, "key"),
            budget: usd(&opts, "budget").map_err(to_rhai)?,
            on_error: on_error(&opts),
            label: str_opt(&opts, "label"),
        };
        block(shared, pin!(ctx.workflow(name, args, wopts))).map(|v| to_dynamic(&v))
    }
    let s = shared.clone();
    engine.register_fn("workflow", move |name: &str, args: Dynamic| child(&s, name, &args, &Map::new()));
    let s = shared.clone();
    engine.register_fn("workflow", move |name: &str, args: Dynamic, o: Map| child(&s, name, &args, &o));

    fn wait(shared: &Shared, key: &str, opts: &Map) -> RhaiResult<Dynamic> {
        let ctx = current()?;
        let opts = options("await_external", opts).map_err(to_rhai)?;
        let eopts = ExternalOptions {
            prompt: str_opt(&opts, "prompt"),
            schema: opts.get("schema").cloned(),
            timeout: opts.get("timeout_ms").and_then(Value::as_u64).map(Duration::from_millis),
        };
        block(shared, pin!(ctx.await_external(key, eopts))).map(|v| to_dynamic(&v))
    }
    fn orchestrate(shared: &Shared, goal: &str, opts: &Map) -> RhaiResult<Dynamic> {
        let ctx = current()?;
        let opts = options("orchestrate", opts).map_err(to_rhai)?;
        let opts = crate::orchestrator::OrchestrateOptions::from_json(&opts).map_err(to_rhai)?;
        block(shared, ctx.orchestrate(goal, opts)).map(|o| to_dynamic(&o.value()))
    }
    let s = shared.clone();
    engine.register_fn("orchestrate", move |goal: &str| orchestrate(&s, goal, &Map::new()));
    let s = shared.clone();
    engine.register_fn("orchestrate", move |goal: &str, o: Map| orchestrate(&s, goal, &o));

    let s = shared.clone();
    engine.register_fn("await_external", move |key: &str| wait(&s, key, &Map::new()));
    let s = shared.clone();
    engine.register_fn("await_external", move |key: &str, o: Map| wait(&s, key, &o));

    let s = shared.clone();
    engine.register_fn("sleep", move |ms: i64| -> RhaiResult<()> {
        let ms = u64::try_from(ms).map_err(|_| to_rhai(Error::validation("sleep: ms must be >= 0")))?;
        block(&s, pin!(current()?.sleep(ms)))
    });
    let s = shared.clone();
    engine.register_fn("now", move || -> RhaiResult<i64> { block_host(&s, pin!(current()?.now())) });
    let s = shared.clone();
    engine
        .register_fn("random", move || -> RhaiResult<f64> { block_host(&s, pin!(current()?.random(None))) });
    let s = shared.clone();
    engine.register_fn("random", move |key: &str| -> RhaiResult<f64> {
        let ctx = current()?;
        // The key is hashed into the call's identity and kept with its entry.
        host_work(key.len(), key.len(), 0)?;
        block_host(&s, pin!(ctx.random(Some(key))))
    });
    let s = shared.clone();
    engine.register_fn("uuid", move || -> RhaiResult<String> { block_host(&s, pin!(current()?.uuid())) });

    engine.register_type_with_name::<BudgetView>("Budget");
    let s = shared.clone();
    engine.register_fn("spent", move |_: &mut BudgetView| -> RhaiResult<f64> {
        block(&s, pin!(current()?.budget_spent())).map(Money::as_usd)
    });
    let s = shared.clone();
    engine.register_fn("remaining", move |_: &mut BudgetView| -> RhaiResult<Dynamic> {
        let remaining = block(&s, pin!(current()?.budget_remaining()))?;
        Ok(remaining.map_or(Dynamic::UNIT, |m| Dynamic::from(m.as_usd())))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::option_schema;

    /// `options` skips validating an empty options map: that holds only while every options
    /// schema accepts `{}`.
    #[test]
    fn every_options_schema_accepts_no_options() {
        for global in ["agent", "parallel", "pipeline", "step", "host_call", "workflow", "await_external"] {
            let schema = option_schema(global).expect("a schema for every global with options");
            let validator = jsonschema::validator_for(schema).expect("the schema compiles");
            assert!(validator.is_valid(&json!({})), "{global} refuses {{}}");
            assert!(options(global, &Map::new()).is_ok());
        }
    }
}

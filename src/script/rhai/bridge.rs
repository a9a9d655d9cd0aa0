//! What the Rhai runner and its fan-outs share: the run's shared state and the current
//! scope's `Ctx`, the conversions across the sandbox boundary (values and errors), the
//! host-work charge and the blocking bridge onto the async engine, and the boundary's size
//! limits.
//!
//! Lua's counterpart is `lua/shared.rs`. What an engine call's error is to a script and what
//! host work costs are one set of rules for both (`script::host`); the bridge itself is not
//! shared, because the runtimes differ: a Rhai script blocks its own thread on the engine's
//! future ([`block`], the script clock paused) and raises `EvalAltResult`s, where a Lua
//! coroutine yields to it and answers `(ok, ...)`.

use std::cell::RefCell;
use std::pin::pin;

use ::rhai::{Dynamic, EvalAltResult, Map, Position};
use serde_json::Value;
use tokio::runtime::Handle;

use super::sandbox::SandboxLimits;
use crate::engine::Ctx;
use crate::error::{Error, ErrorCode};
use crate::script::options::validate;

/// The most threads one `parallel` or `pipeline` runs at once (the run's whole budget, so a
/// 500-way fan-out of model calls has every branch in flight); further branches start as
/// earlier ones finish (the engine's fan-out hands their liveness over, so waits still
/// suspend the run correctly).
pub(super) const MAX_BRANCH_THREADS: usize = 1024;

/// The most JSON one branch (or item) may hand back, and a fan-out in all: the values that
/// cross the sandbox boundary are bounded like the values inside it.
pub(super) const MAX_BRANCH_RESULT: usize = 16 << 20;
pub(super) const MAX_FANOUT_RESULT: usize = 64 << 20;

/// Whether `value` serializes to more than `limit` bytes (an estimate that errs large),
/// stopping as soon as it knows.
/// The JSON size of `value`, estimated as [`json_exceeds`] does.
pub(super) fn json_size(value: &Value) -> usize {
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

pub(super) fn json_exceeds(value: &Value, limit: usize) -> bool {
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

pub(super) fn bounded(value: Value, limit: usize, what: &str) -> Result<Value, Error> {
    if json_exceeds(&value, limit) {
        return Err(Error::new(
            ErrorCode::SandboxLimit,
            format!("{what} is larger than {} MiB", limit >> 20),
        ));
    }
    Ok(value)
}

/// What every thread of one script run shares.
pub(super) struct Shared {
    pub(super) handle: Handle,
    pub(super) limits: SandboxLimits,
    /// Operations, memory, wall-clock time, cancellation and the run's sandbox-error latch.
    pub(super) guard: super::guard::RunGuard,
    /// The script's closures' parameters, to name what a branch captured.
    pub(super) closure_params: super::isolate::ClosureParams,
    /// Which closures are one `agent` call (their branches need no thread: see `defer`).
    pub(super) shapes: super::defer::Shapes,
    /// Each function's source identity, part of a step's identity (see `body`).
    pub(super) bodies: super::body::BodyHashes,
}

pub(super) use crate::script::run_sandbox::MAX_RUN_THREADS;

thread_local! {
    /// The `Ctx` of the scope the current script thread runs in (innermost last).
    static CURRENT: RefCell<Vec<Ctx>> = const { RefCell::new(Vec::new()) };
}

pub(super) fn with_ctx<R>(ctx: Ctx, body: impl FnOnce() -> R) -> R {
    // Operations count to the step the scope runs inside (if any), as the scope's effects do.
    let previous = super::guard::set_step_ops(ctx.step_ops.clone());
    CURRENT.with(|stack| stack.borrow_mut().push(ctx));
    let result = body();
    CURRENT.with(|stack| stack.borrow_mut().pop());
    super::guard::set_step_ops(previous);
    result
}

pub(super) fn current() -> Result<Ctx, Box<EvalAltResult>> {
    if super::defer::armed() {
        // A branch evaluated up to its agent call reached another effect: it runs on a thread.
        return Err(super::defer::refused());
    }
    CURRENT
        .with(|stack| stack.borrow().last().cloned())
        .ok_or_else(|| to_rhai(crate::script::host::outside_run()))
}

pub(super) type RhaiResult<T> = Result<T, Box<EvalAltResult>>;

// ---- conversions -----------------------------------------------------------------------------

pub(super) fn to_dynamic(value: &Value) -> Dynamic {
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
pub(super) fn to_json(value: &Dynamic) -> Result<Value, Error> {
    super::json::to_json(value)
}

pub(super) fn error_token(error: &Error) -> Dynamic {
    to_dynamic(&crate::script::host::error_record(error))
}

/// A cairn error as a script error. Budget exhaustion, cancellation, sandbox limits and
/// replay-strict misses are uncatchable (they end the run); the rest are catchable
/// `#{code, message, retryable}` maps.
pub(super) fn to_rhai(error: Error) -> Box<EvalAltResult> {
    let token = error_token(&error);
    Box::new(if crate::script::host::uncatchable(&error) {
        EvalAltResult::ErrorTerminated(token, Position::NONE)
    } else {
        EvalAltResult::ErrorRuntime(token, Position::NONE)
    })
}

pub(super) fn error_from_token(token: &Dynamic) -> Option<Error> {
    crate::script::host::error_of_record(to_json(token).ok()?)
}

pub(super) fn at(pos: Position) -> String {
    match (pos.line(), pos.position()) {
        (Some(line), Some(column)) => format!(" at line {line}, column {column}"),
        (Some(line), None) => format!(" at line {line}"),
        _ => String::new(),
    }
}

/// A script error as a cairn error, keeping the code of a cairn error that crossed it.
pub(super) fn from_rhai(err: EvalAltResult) -> Error {
    if let Some(violation) = super::isolate::violation(&err) {
        return violation;
    }
    match err {
        EvalAltResult::ErrorTerminated(token, pos) => error_from_token(&token).unwrap_or_else(|| {
            Error::new(ErrorCode::SandboxLimit, format!("the script was terminated{}", at(pos)))
        }),
        EvalAltResult::ErrorRuntime(value, pos) => error_from_token(&value).unwrap_or_else(|| {
            let thrown =
                super::text::scrub(&super::text::capped(&value, super::text::ERROR_TEXT)).into_owned();
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
        // A global given an argument of the wrong type: the global, the argument and what it
        // expected, instead of the interpreter's missing overload.
        EvalAltResult::ErrorFunctionNotFound(signature, pos)
            if super::arg_error::explain(&signature).is_some() =>
        {
            let message = super::arg_error::explain(&signature).unwrap_or_default();
            Error::validation(format!("{}{}", super::text::scrub(&message), at(pos)))
        }
        err @ (EvalAltResult::ErrorTooManyOperations(..)
        | EvalAltResult::ErrorTooManyVariables(..)
        | EvalAltResult::ErrorTooManyModules(..)
        | EvalAltResult::ErrorStackOverflow(..)
        | EvalAltResult::ErrorDataTooLarge(..)) => {
            Error::new(ErrorCode::SandboxLimit, super::text::scrub(&err.to_string()))
        }
        other => Error::new(
            ErrorCode::ScriptError,
            super::text::scrub(&super::text::capped(&other, super::text::ERROR_TEXT)).into_owned(),
        ),
    }
}

/// Charges host work done for the script to its run (see `script::host`): `bytes` hashed,
/// copied or converted, `kept` of them kept for the rest of the run, `entries` journal
/// entries.
pub(super) fn host_work(bytes: usize, kept: usize, entries: u64) -> RhaiResult<()> {
    match super::guard::host_work_current(bytes as u64, kept as u64, entries) {
        Some(error) => Err(to_rhai(error)),
        None => Ok(()),
    }
}

/// Runs an engine call for the script, blocking its thread. `handed` is the bytes of text the
/// script hands the call (a prompt, a name, a key, args as JSON): the host hashes them into the
/// call's identity, copies them into requests and checkpoints and keeps them with the entry, so
/// they are charged as host work (as Lua charges every engine call's text).
pub(super) fn block<T>(
    shared: &Shared,
    handed: usize,
    future: impl std::future::Future<Output = Result<T, Error>>,
) -> RhaiResult<T> {
    let _waiting = shared.guard.pause();
    block_host(shared, handed, future)
}

/// [`block`] for a call that waits for nothing but the host's own work for the script (`now`,
/// `random`, `uuid`): its time is the script's.
pub(super) fn block_host<T>(
    shared: &Shared,
    handed: usize,
    future: impl std::future::Future<Output = Result<T, Error>>,
) -> RhaiResult<T> {
    // Every engine call writes (or replays) a journal entry the host keeps, with what it was
    // handed.
    if let Some(error) = shared.guard.host_work(handed as u64, handed as u64, 1) {
        return Err(to_rhai(error));
    }
    // The engine's buffers are not the script's memory (what it keeps is charged above).
    let _engine_work = crate::alloc::MemoryAccount::suspend();
    // Pinned here, so `block_on` moves a pointer: an engine future is kilobytes large, and
    // moving it by value through tokio's layers copied it three times per call. Callers pin
    // it where it is made (`block(shared, 0, pin!(ctx.agent(..)))`), so it is never moved.
    let future = pin!(future);
    shared.handle.block_on(future).map_err(to_rhai)
}

// ---- options -------------------------------------------------------------------------------------

/// Converts an options map to JSON and validates it against the global's schema: the same
/// schema lint checks statically is enforced here at the sandbox boundary.
pub(super) fn options(global: &str, opts: &Map) -> Result<Value, Error> {
    if opts.is_empty() {
        // Every options schema accepts `{}` (a unit test checks it): skip the conversion and
        // the validation on the common call without options.
        return Ok(Value::Object(serde_json::Map::new()));
    }
    let value = to_json(&Dynamic::from_map(opts.clone()))
        .map_err(|e| Error::validation(format!("{global} options: {}", e.message)))?;
    validate(global, value)
}

//! What every coroutine of one Lua run shares (the guard, the internal tables, the hidden
//! functions), how a frame's outcome becomes the run's error, and how a global that waits on
//! the engine is registered: the runner, the globals and the fan-outs all use it.
//!
//! Rhai's counterpart is `rhai/bridge.rs`; the rules both follow (which errors a script
//! cannot catch, the record a catchable one is, what host work costs) are `script::host`.
//! The wrapper itself differs with the runtime: here a global is an async function, so the
//! coroutine yields to the engine's future instead of blocking a thread.

use std::future::Future;
use std::rc::Rc;

use mlua::{Function, Lua, MultiValue, Value as Lv};
use serde_json::Value;

use super::frame::{self, Frame, Scoped};
use super::guard::Guard;
use super::internals::{Hidden, Internals};
use super::json::{ToJson, from_json};
use super::sandbox;
use crate::engine::Ctx;
use crate::error::{Error, ErrorCode};

/// What every coroutine of one run shares.
pub(super) struct Shared {
    pub(super) guard: Rc<Guard>,
    pub(super) internals: Rc<Internals>,
    pub(super) hidden: Rc<Hidden>,
}

impl Shared {
    /// A script value as JSON, at most `limit` bytes.
    pub(super) fn to_json(&self, value: &Lv, limit: usize) -> Result<Value, Error> {
        let mut conversion = ToJson::new(&self.internals, &self.guard, limit);
        let value = conversion.convert(value)?;
        // What crossed is the host's now (a step result, a log's data, a branch's value): kept
        // with the journal for the rest of the run. The state's byte limit follows at the next
        // engine call.
        let bytes = conversion.spent() as u64;
        if let Some(error) = self.guard.host_work(bytes, bytes, 0) {
            return Err(error);
        }
        Ok(value)
    }

    /// Charges host work to the run (see [`Guard::host_work`]) and lowers the state's byte
    /// limit by what the host now keeps.
    pub(super) fn host_work(&self, lua: &Lua, bytes: usize, kept: usize, entries: u64) -> Result<(), Error> {
        if let Some(error) = self.guard.host_work(bytes as u64, kept as u64, entries) {
            return Err(error);
        }
        if kept > 0 || entries > 0 {
            let limit = self.guard.state_limit(lua.used_memory() as u64);
            let _ = lua.set_memory_limit(usize::try_from(limit).unwrap_or(usize::MAX));
        }
        Ok(())
    }

    /// A JSON value as a script value.
    pub(super) fn to_lua(&self, lua: &Lua, value: &Value) -> Result<Lv, Error> {
        from_json(lua, &self.internals, value)
    }

    /// Runs `function(args)` as a coroutine in `ctx`'s scope and `frame`, and returns its values
    /// (or the error it ended with, as the run sees it).
    pub(super) async fn run(
        &self,
        ctx: Ctx,
        frame: Rc<Frame>,
        function: Function,
        args: MultiValue,
    ) -> Result<MultiValue, Error> {
        let out = self.run_raw(ctx, frame.clone(), function, args).await;
        self.settle(&frame, out)
    }

    /// As [`Shared::run`], handing back pcall's raw `(ok, ...)`.
    pub(super) async fn run_raw(
        &self,
        ctx: Ctx,
        frame: Rc<Frame>,
        function: Function,
        mut args: MultiValue,
    ) -> mlua::Result<MultiValue> {
        args.push_front(Lv::Function(function));
        Scoped::new(ctx, frame, self.hidden.pcall.call_async::<MultiValue>(args)).await
    }

    /// A frame's pcall outcome: its values, or the error the run sees (a latched one first).
    pub(super) fn settle(&self, frame: &Frame, out: mlua::Result<MultiValue>) -> Result<MultiValue, Error> {
        self.fatal_pending(frame)?;
        let mut values = out.map_err(|e| self.error_of_mlua(&e))?;
        match values.pop_front() {
            Some(Lv::Boolean(true)) => Ok(values),
            _ => Err(self.error_of_value(&values.pop_front().unwrap_or(Lv::Nil))),
        }
    }

    /// The run's or the frame's uncatchable error, if one was raised.
    pub(super) fn fatal_pending(&self, frame: &Frame) -> Result<(), Error> {
        if let Some(error) = self.guard.tripped() {
            return Err(error);
        }
        if let Some(error) = frame.latch.get() {
            return Err(error.clone());
        }
        Ok(())
    }

    /// A raised Lua value as a cairn error.
    pub(super) fn error_of_value(&self, value: &Lv) -> Error {
        if let Some(error) = sandbox::resource_error(&self.guard, value) {
            return error;
        }
        match value {
            Lv::Error(error) => self.error_of_mlua(error),
            Lv::String(text) => Error::new(ErrorCode::ScriptError, text.to_string_lossy()),
            Lv::Table(_) => match self.to_json(value, 1 << 20) {
                Ok(json) => crate::script::host::error_of_record(json.clone()).unwrap_or_else(|| {
                    Error::new(ErrorCode::ScriptError, format!("the script threw {json}"))
                }),
                Err(_) => Error::new(ErrorCode::ScriptError, "the script threw a table"),
            },
            Lv::Nil => Error::new(ErrorCode::ScriptError, "the script threw nil"),
            Lv::Boolean(b) => Error::new(ErrorCode::ScriptError, format!("the script threw {b}")),
            Lv::Integer(i) => Error::new(ErrorCode::ScriptError, format!("the script threw {i}")),
            Lv::Number(n) => Error::new(ErrorCode::ScriptError, format!("the script threw {n}")),
            other => Error::new(ErrorCode::ScriptError, format!("the script threw a {}", other.type_name())),
        }
    }

    /// An mlua error as a cairn error, keeping the code of a cairn error that crossed it.
    pub(super) fn error_of_mlua(&self, error: &mlua::Error) -> Error {
        match error {
            mlua::Error::CallbackError { cause, .. } => self.error_of_mlua(cause),
            mlua::Error::ExternalError(inner) => match inner.downcast_ref::<Error>() {
                Some(error) => error.clone(),
                None => Error::new(ErrorCode::ScriptError, inner.to_string()),
            },
            mlua::Error::MemoryError(_) => self.guard.out_of_memory(),
            mlua::Error::RuntimeError(text) => {
                sandbox::resource_error(&self.guard, &Lv::Error(Box::new(error.clone())))
                    .unwrap_or_else(|| Error::new(ErrorCode::ScriptError, text.clone()))
            }
            other => sandbox::resource_error(&self.guard, &Lv::Error(Box::new(other.clone())))
                .unwrap_or_else(|| Error::new(ErrorCode::ScriptError, other.to_string())),
        }
    }

    /// What a global hands back to its Lua wrapper: `true` and its values, `false` and a
    /// catchable `{code, message, retryable}` table, or an uncatchable error raised at once
    /// (latched in the frame, and run-wide for sandbox limits; a sandbox violation ends its
    /// frame only, see `isolate`).
    pub(super) fn reply(
        &self,
        lua: &Lua,
        frame: Option<&Frame>,
        result: Result<MultiValue, Error>,
    ) -> mlua::Result<MultiValue> {
        match result {
            Ok(mut values) => {
                values.push_front(Lv::Boolean(true));
                Ok(values)
            }
            Err(error) if crate::script::host::uncatchable(&error) => {
                let error =
                    if error.code == ErrorCode::SandboxLimit { self.guard.trip(error) } else { error };
                let error = frame.map_or(error.clone(), |frame| frame.latch(error));
                Err(mlua::Error::external(error))
            }
            Err(error) => {
                let table = self
                    .to_lua(lua, &crate::script::host::error_record(&error))
                    .map_err(mlua::Error::external)?;
                Ok(sandbox::values([Lv::Boolean(false), table]))
            }
        }
    }

    /// The scope and frame of the calling code, refusing a call the sandbox cannot serve.
    pub(super) fn enter(&self, lua: &Lua, waits: bool) -> Result<(Ctx, Rc<Frame>), Error> {
        let Some((ctx, frame)) = frame::current() else {
            return Err(crate::script::host::outside_run());
        };
        self.fatal_pending(&frame)?;
        if let Some(error) = self.guard.check() {
            return Err(error);
        }
        if frame.coroutine_depth.get() > 0 {
            return Err(Error::validation(
                "cairn globals cannot be called inside a coroutine the script created; call them outside it",
            ));
        }
        // SAFETY: reads a flag of the running thread's state; mlua holds the state's lock while
        // a callback runs.
        if waits && unsafe { mlua::ffi::lua_isyieldable(lua.state()) } == 0 {
            return Err(Error::validation(
                "cairn globals cannot be called from a callback Lua runs itself (a string.gsub replacement, \
                 a __tostring or a __gc); call them from the script's own code",
            ));
        }
        if let Some(isolation) = &frame.isolation {
            isolation.check_writes()?;
        }
        Ok((ctx, frame))
    }
}

/// The deepest steps, phases and fan-out branches may nest inside one another (each level is
/// a coroutine polled inside its parent's poll, on the script thread's stack).
pub(super) const MAX_NESTING: usize = 64;

/// Refuses a body that would nest deeper than [`MAX_NESTING`].
pub(super) fn nesting() -> Result<(), Error> {
    if frame::depth() >= MAX_NESTING {
        return Err(Error::new(
            ErrorCode::SandboxLimit,
            format!(
                "steps, phases, parallel branches and pipeline stages nest deeper than {MAX_NESTING} levels \
                 (a function that calls itself through step, phase or parallel?)"
            ),
        ));
    }
    Ok(())
}

/// Registers a global that waits on the engine: `body` gets the calling scope and frame and
/// the arguments, and its result becomes the wrapper's `(ok, ...)` (`raw`: `body` returns that
/// pair itself).
pub(super) fn async_global<F, Fut>(
    lua: &Lua,
    shared: &Rc<Shared>,
    raw: bool,
    body: F,
) -> mlua::Result<Function>
where
    F: Fn(Lua, Rc<Shared>, Ctx, Rc<Frame>, MultiValue) -> Fut + 'static,
    Fut: Future<Output = Result<MultiValue, Error>> + 'static,
{
    let shared = shared.clone();
    let body = Rc::new(body);
    lua.create_async_function(move |lua: Lua, args: MultiValue| {
        let (shared, body) = (shared.clone(), body.clone());
        async move {
            let (ctx, frame) = match shared.enter(&lua, true) {
                Ok(entered) => entered,
                Err(error) => return shared.reply(&lua, frame::current_frame().as_deref(), Err(error)),
            };
            // Every engine call writes (or replays) a journal entry the host keeps, with the
            // text it was handed (a prompt, a key, a message) hashed into it.
            let text: usize =
                args.iter().map(|v| if let Lv::String(s) = v { s.as_bytes().len() } else { 0 }).sum();
            if let Err(error) = shared.host_work(&lua, text, text, 1) {
                return shared.reply(&lua, Some(&frame), Err(error));
            }
            let result = body(lua.clone(), shared.clone(), ctx, frame.clone(), args).await;
            match result {
                Ok(values) if raw => Ok(values),
                result => shared.reply(&lua, Some(&frame), result),
            }
        }
    })
}

//! The cairn globals that are not fan-outs: agent, step, host_call, phase, log, workflow,
//! await_external, now, random, uuid and the budget readers, each onto the `Ctx` call the
//! Rhai runner makes, with the same options and the same reshaping of results.

use std::rc::Rc;
use std::time::Duration;

use mlua::{Function, Lua, MultiValue, Table, Value as Lv};
use serde_json::Value;

use super::frame::Frame;
use super::guard::EngineWork;
use super::isolate::{Isolation, Place};
use super::json::{MAX_JSON, ToJson};
use super::options;
use super::sandbox::values;
use super::shared::{Shared, async_global};
use crate::engine::{CallOptions, Ctx, ExternalOptions, StepOptions, WorkflowOptions};
use crate::error::Error;
use crate::journal::Kind;
use crate::money::Money;

/// Argument `index` (0-based) of a call.
pub(super) fn arg(args: &MultiValue, index: usize) -> Lv {
    args.get(index).cloned().unwrap_or(Lv::Nil)
}

/// A text argument.
pub(super) fn text(args: &MultiValue, index: usize, global: &str, name: &str) -> Result<String, Error> {
    match arg(args, index) {
        Lv::String(s) => s
            .to_str()
            .map(|s| s.to_owned())
            .map_err(|_| Error::validation(format!("{global}: {name} must be UTF-8 text"))),
        other => {
            Err(Error::validation(format!("{global}: {name} must be a string, got {}", other.type_name())))
        }
    }
}

/// A function argument (a body, a branch, a stage).
pub(super) fn function(args: &MultiValue, index: usize, global: &str, name: &str) -> Result<Function, Error> {
    match arg(args, index) {
        Lv::Function(f) => Ok(f),
        other => {
            Err(Error::validation(format!("{global}: {name} must be a function, got {}", other.type_name())))
        }
    }
}

/// An options argument (nil for none), converted and validated against the global's schema.
pub(super) fn opts(shared: &Shared, global: &str, value: Lv) -> Result<Value, Error> {
    let mut value = match value {
        Lv::Nil => Value::Object(serde_json::Map::new()),
        value @ Lv::Table(_) => ToJson::new(&shared.internals, &shared.guard, MAX_JSON)
            .convert_object(&value)
            .map_err(|e| Error::new(e.code, format!("{global} options: {}", e.message)))?,
        other => {
            return Err(Error::validation(format!(
                "{global}: options must be a table, got {}",
                other.type_name()
            )));
        }
    };
    let schema_name = if global == "host_call" { "call" } else { global };
    options::objects_where_expected(schema_name, &mut value);
    options::validate(schema_name, value)
}

/// A JSON argument (args of a host call or child workflow).
fn json_arg(shared: &Shared, value: &Lv, what: &str) -> Result<Value, Error> {
    shared.to_json(value, MAX_JSON).map_err(|e| Error::new(e.code, format!("{what}: {}", e.message)))
}

fn one(value: Lv) -> MultiValue {
    values([value])
}

/// Registers the globals into `table` (by name); returns the raw budget readers.
pub(super) fn register(lua: &Lua, shared: &Rc<Shared>, table: &Table) -> mlua::Result<(Function, Function)> {
    table.raw_set(
        "agent",
        async_global(lua, shared, false, |lua, shared, ctx, _, args| async move {
            let prompt = text(&args, 0, "agent", "prompt")?;
            let value = opts(&shared, "agent", arg(&args, 1))?;
            let options = options::agent(&value)?;
            let result =
                EngineWork::new(&shared.guard, async move { ctx.agent(&prompt, options).await }).await?;
            Ok(one(shared.to_lua(&lua, &result)?))
        })?,
    )?;

    table.raw_set(
        "step",
        async_global(lua, shared, false, |lua, shared, ctx, _frame, args| async move {
            super::shared::nesting()?;
            let label = text(&args, 0, "step", "label")?;
            let body = function(&args, 1, "step", "body")?;
            let value = opts(&shared, "step", arg(&args, 2))?;
            let deps = value.get("deps").and_then(Value::as_array).cloned().unwrap_or_default();
            let step_opts = StepOptions {
                key: options::str_opt(&value, "key"),
                deps,
                on_error: None,
                body: super::body::identity(&body),
            };
            let key = Ctx::step_key(&label, &step_opts)?;
            let live = match ctx.begin_two_phase(Kind::Step, "step", &label, key, None)? {
                crate::engine::Begun::Done(result, ops) => {
                    // The body's operations count as if it had run (they were journaled with it).
                    if let Some(error) = shared.guard.charge(ops) {
                        return Err(error);
                    }
                    return Ok(one(shared.to_lua(&lua, &result?)?));
                }
                crate::engine::Begun::Live(live) => live,
            };
            // The body runs between the two journal entries, in the step's own scope, on a
            // private copy whose captured values are read-only (a replay skips the body, so a
            // write there would be lost and what follows would differ).
            let inner = ctx.step_body(&live);
            let isolation = Isolation::new(&lua, &shared.hidden, &shared.internals, Place::Step);
            let result = async {
                let private = isolation.function(&lua, &body)?;
                let values =
                    shared.run(inner, Frame::branch(isolation.clone()), private, MultiValue::new()).await?;
                isolation.check_writes()?;
                shared.to_json(&values.front().cloned().unwrap_or(Lv::Nil), MAX_JSON)
            }
            .await;
            let value = ctx.end_two_phase(live, result)?;
            Ok(one(shared.to_lua(&lua, &value)?))
        })?,
    )?;

    table.raw_set(
        "host_call",
        async_global(lua, shared, false, |lua, shared, ctx, _, args| async move {
            let name = text(&args, 0, "host_call", "name")?;
            let call_args = json_arg(&shared, &arg(&args, 1), "host_call args")?;
            let value = opts(&shared, "host_call", arg(&args, 2))?;
            let call_opts =
                CallOptions { key: options::str_opt(&value, "key"), on_error: options::on_error(&value) };
            let result =
                EngineWork::new(&shared.guard, async move { ctx.call(&name, call_args, call_opts).await })
                    .await?;
            Ok(one(shared.to_lua(&lua, &result)?))
        })?,
    )?;

    table.raw_set(
        "phase",
        async_global(lua, shared, true, |_, shared, ctx, frame, args| async move {
            super::shared::nesting()?;
            let name = text(&args, 0, "phase", "name")?;
            let body = function(&args, 1, "phase", "body")?;
            let inner = ctx.begin_phase(&name);
            let out = shared.run_raw(inner.clone(), frame.clone(), body, MultiValue::new()).await;
            ctx.end_phase(&inner);
            shared.fatal_pending(&frame)?;
            // The body's own (ok, ...) goes back as it is: its values, or its error value raised
            // again unchanged.
            out.map_err(|e| shared.error_of_mlua(&e))
        })?,
    )?;

    let s = shared.clone();
    table.raw_set(
        "log",
        lua.create_function(move |lua, args: MultiValue| {
            let result = (|| {
                let (ctx, _) = s.enter(lua, false)?;
                let level = text(&args, 0, "log", "level")?;
                if !matches!(level.as_str(), "debug" | "info" | "warn" | "error") {
                    return Err(Error::validation(format!(
                        "log level {level:?} is not one of debug, info, warn, error"
                    )));
                }
                let message = text(&args, 1, "log", "msg")?;
                let data = match arg(&args, 2) {
                    Lv::Nil if args.len() < 3 => None,
                    value => Some(json_arg(&s, &value, "log data")?),
                };
                ctx.log(&level, &message, data);
                Ok(MultiValue::new())
            })();
            s.reply(lua, super::frame::current_frame().as_deref(), result)
        })?,
    )?;

    table.raw_set(
        "workflow",
        async_global(lua, shared, false, |lua, shared, ctx, _, args| async move {
            let name = text(&args, 0, "workflow", "name")?;
            let child_args = json_arg(&shared, &arg(&args, 1), "workflow args")?;
            let value = opts(&shared, "workflow", arg(&args, 2))?;
            let wopts = WorkflowOptions {
                key: options::str_opt(&value, "key"),
                budget: options::usd(&value, "budget")?,
                on_error: options::on_error(&value),
                label: options::str_opt(&value, "label"),
            };
            let result =
                EngineWork::new(&shared.guard, async move { ctx.workflow(&name, child_args, wopts).await })
                    .await?;
            Ok(one(shared.to_lua(&lua, &result)?))
        })?,
    )?;

    table.raw_set(
        "await_external",
        async_global(lua, shared, false, |lua, shared, ctx, _, args| async move {
            let key = text(&args, 0, "await_external", "key")?;
            let value = opts(&shared, "await_external", arg(&args, 1))?;
            let eopts = ExternalOptions {
                prompt: options::str_opt(&value, "prompt"),
                schema: value.get("schema").cloned(),
                timeout: value.get("timeout_ms").and_then(Value::as_u64).map(Duration::from_millis),
            };
            let result =
                EngineWork::new(&shared.guard, async move { ctx.await_external(&key, eopts).await }).await?;
            Ok(one(shared.to_lua(&lua, &result)?))
        })?,
    )?;

    table.raw_set(
        "orchestrate",
        async_global(lua, shared, false, |lua, shared, ctx, _, args| async move {
            let goal = text(&args, 0, "orchestrate", "goal")?;
            let value = opts(&shared, "orchestrate", arg(&args, 1))?;
            let oopts = crate::orchestrator::OrchestrateOptions::from_json(&value)?;
            let outcome =
                EngineWork::new(&shared.guard, async move { ctx.orchestrate(&goal, oopts).await }).await?;
            Ok(one(shared.to_lua(&lua, &outcome.value())?))
        })?,
    )?;

    table.raw_set(
        "sleep",
        async_global(lua, shared, false, |_, shared, ctx, _, args| async move {
            let ms = match arg(&args, 0) {
                Lv::Integer(n) if n >= 0 => n as u64,
                Lv::Number(n) if n.is_finite() && n >= 0.0 => n as u64,
                other => {
                    return Err(Error::validation(format!(
                        "sleep: ms must be a number of milliseconds >= 0, got {}",
                        other.type_name()
                    )));
                }
            };
            EngineWork::new(&shared.guard, async move { ctx.sleep(ms).await }).await?;
            Ok(one(Lv::Nil))
        })?,
    )?;
    table.raw_set(
        "now",
        async_global(lua, shared, false, |_, _shared, ctx, _, _| async move {
            // Host work for the script, waiting for nothing else: its time is script time.
            let now = ctx.now().await?;
            Ok(one(Lv::Integer(now)))
        })?,
    )?;
    table.raw_set(
        "random",
        async_global(lua, shared, false, |_, _shared, ctx, _, args| async move {
            let key = match arg(&args, 0) {
                Lv::Nil => None,
                _ => Some(text(&args, 0, "random", "key")?),
            };
            let value = ctx.random(key.as_deref()).await?;
            Ok(one(Lv::Number(value)))
        })?,
    )?;
    table.raw_set(
        "uuid",
        async_global(lua, shared, false, |lua, shared, ctx, _, _| async move {
            let id = ctx.uuid().await?;
            Ok(one(Lv::String(lua.create_string(id).map_err(|e| shared.error_of_mlua(&e))?)))
        })?,
    )?;
    let spent = async_global(lua, shared, false, |_, shared, ctx, _, _| async move {
        let spent = EngineWork::new(&shared.guard, async move { ctx.budget_spent().await }).await?;
        Ok(one(Lv::Number(Money::as_usd(spent))))
    })?;
    let remaining = async_global(lua, shared, false, |_, shared, ctx, _, _| async move {
        let remaining = EngineWork::new(&shared.guard, async move { ctx.budget_remaining().await }).await?;
        Ok(one(remaining.map_or(Lv::Nil, |m| Lv::Number(m.as_usd()))))
    })?;
    Ok((spent, remaining))
}

//! The Lua state a run executes in: the restricted standard library, the instruction hook, the
//! memory limit, the Lua-side wrappers (`prelude.lua`), and the compile check.
//!
//! The state opens only `string`, `table`, `math`, `utf8` and `coroutine` beside the base
//! library, then removes what reaches outside the run or makes it depend on the process:
//! `load`, `dofile`, `loadfile`, `collectgarbage`, `print`, `warn`, `string.dump`,
//! `math.random`, `math.randomseed` (there is no `io`, `os`, `package`, `require` or `debug`).
//! The debug library is opened only to take the four upvalue functions branch isolation needs,
//! and is then removed; those functions, and the raw `pcall` the runner drives frames with, are
//! held by Rust only. The libraries are read-only to the script.

use std::rc::Rc;

use mlua::{Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value as Lv, VmState};

use super::frame;
use super::guard::Guard;
use super::internals::{Callbacks, Hidden, Internals};
use crate::error::{Error, ErrorCode};
use crate::script::rhai::sandbox::SandboxLimits;
use crate::script::{Diagnostic, Severity};

/// How many VM instructions pass between two runs of the hook (each charges this many
/// operations and checks the bounds).
const HOOK_EVERY: u32 = 1000;

/// A fresh state with the restricted library, before the cairn globals and the prelude.
pub(super) fn open() -> mlua::Result<(Lua, Rc<Internals>, Hidden)> {
    let libs =
        StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8 | StdLib::COROUTINE | StdLib::DEBUG;
    // SAFETY: `unsafe_new_with` only differs from `new_with` in allowing the debug library and
    // binary chunks; the debug library is removed below before any script code runs, and only
    // the runner loads binary chunks (functions it dumped itself).
    let lua = unsafe { Lua::unsafe_new_with(libs, LuaOptions::new().thread_pool_size(256)) };
    let globals = lua.globals();
    let debug: Table = globals.get("debug")?;
    let hidden = Hidden {
        pcall: globals.get("pcall")?,
        load: globals.get("load")?,
        getupvalue: debug.get("getupvalue")?,
        setupvalue: debug.get("setupvalue")?,
        upvalueid: debug.get("upvalueid")?,
        upvaluejoin: debug.get("upvaluejoin")?,
    };
    for name in
        ["debug", "load", "dofile", "loadfile", "collectgarbage", "print", "warn", "require", "package"]
    {
        globals.raw_set(name, Lv::Nil)?;
    }
    let string: Table = globals.get("string")?;
    string.raw_set("dump", Lv::Nil)?;
    let math: Table = globals.get("math")?;
    math.raw_set("random", Lv::Nil)?;
    math.raw_set("randomseed", Lv::Nil)?;
    let private = lua.create_table()?;
    let array_mt = lua.create_table()?;
    array_mt.raw_set(&private, "array")?;
    let object_mt = lua.create_table()?;
    object_mt.raw_set(&private, "object")?;
    let view = lua.create_table()?;
    let callbacks = Callbacks::load(&lua)?;
    Ok((lua, Rc::new(Internals { private, view, array_mt, object_mt, callbacks }), hidden))
}

/// What the prelude needs from the runner.
pub(super) struct Install<'a> {
    pub(super) guard: &'a Rc<Guard>,
    pub(super) internals: &'a Rc<Internals>,
    pub(super) limits: &'a SandboxLimits,
    /// The raw cairn globals, by name.
    pub(super) globals: Table,
    pub(super) spent: Function,
    pub(super) remaining: Function,
    /// The run's input, as a Lua value.
    pub(super) args: Lv,
}

/// Runs the prelude, sets the hook and the memory limit: after this, only script code runs.
pub(super) fn install(lua: &Lua, install: Install<'_>) -> mlua::Result<()> {
    let helpers = lua.create_table()?;
    helpers.raw_set("private", install.internals.private.clone())?;
    helpers.raw_set("globals", install.globals)?;
    helpers.raw_set("spent", install.spent)?;
    helpers.raw_set("remaining", install.remaining)?;
    helpers.raw_set("args", install.args)?;
    helpers.raw_set("max_string", install.limits.max_string_size as i64)?;
    let guard = install.guard.clone();
    helpers.raw_set(
        "fatal",
        lua.create_function(move |_, error: Lv| match uncatchable(&guard, &error) {
            Some(error) => Err(mlua::Error::external(error)),
            None => Ok(()),
        })?,
    )?;
    let guard = install.guard.clone();
    helpers.raw_set(
        "note",
        lua.create_function(move |_, error: Lv| {
            let _ = uncatchable(&guard, &error);
            Ok(())
        })?,
    )?;
    helpers.raw_set(
        "depth",
        lua.create_function(|_, delta: i64| {
            let frame = frame::current_frame();
            Ok(frame.map_or(0, |frame| {
                let depth = (i64::from(frame.coroutine_depth.get()) + delta).clamp(0, i64::from(u32::MAX));
                frame.coroutine_depth.set(depth as u32);
                depth
            }))
        })?,
    )?;
    let guard = install.guard.clone();
    helpers.raw_set(
        "limit",
        lua.create_function(move |_, message: String| -> mlua::Result<()> {
            Err(mlua::Error::external(guard.trip(Error::new(ErrorCode::SandboxLimit, message))))
        })?,
    )?;
    let guard = install.guard.clone();
    helpers.raw_set(
        "scanned",
        lua.create_function(move |_, bytes: f64| -> mlua::Result<()> {
            // Lua's builtins that walk a string without allocating (`utf8.len`, `tonumber`, a
            // string's arithmetic, ...) charge the bytes they walk; the prelude wraps them.
            match guard.host_work(bytes.max(0.0) as u64, 0, 0) {
                Some(error) => Err(mlua::Error::external(error)),
                None => Ok(()),
            }
        })?,
    )?;
    let guard = install.guard.clone();
    helpers.raw_set(
        "collect",
        lua.create_function(move |lua, ()| -> mlua::Result<()> {
            // A full collection before a string buffer is retried (see the prelude's
            // `buffered`): its work is charged like a scan of a sixteenth of the heap.
            if let Some(error) = guard.host_work(lua.used_memory() as u64 / 16, 0, 0) {
                return Err(mlua::Error::external(error));
            }
            lua.gc_collect()
        })?,
    )?;
    let string: Table = lua.globals().get("string")?;
    super::pattern::install(lua, &string, install.guard, &install.internals.callbacks)?;
    let (next, pairs) = super::order::functions(lua, install.internals, install.guard)?;
    helpers.raw_set("next", next)?;
    helpers.raw_set("pairs", pairs)?;
    lua.load(include_str!("prelude.lua")).set_name("=cairn").call::<()>(helpers)?;
    let guard = install.guard.clone();
    lua.set_global_hook(HookTriggers::new().every_nth_instruction(HOOK_EVERY), move |lua, _| {
        if let Some(error) = guard.charge(u64::from(HOOK_EVERY)) {
            return Err(mlua::Error::external(error));
        }
        // What the run's other scripts hold moves: this state's share follows it.
        let limit = guard.state_limit(lua.used_memory() as u64);
        let _ = lua.set_memory_limit(usize::try_from(limit).unwrap_or(usize::MAX));
        if let Some(frame) = frame::current_frame()
            && let Some(error) = frame.latch.get()
        {
            return Err(mlua::Error::external(error.clone()));
        }
        Ok(VmState::Continue)
    })?;
    let limit = install.guard.state_limit(lua.used_memory() as u64).min(install.limits.max_memory);
    lua.set_memory_limit(usize::try_from(limit).unwrap_or(usize::MAX))?;
    Ok(())
}

/// The error a caught error value stands for when it must not be caught: a latched sandbox
/// error, a cancellation, the frame's uncatchable error, a sandbox violation (a write to what
/// a branch or step body captured, raised where it happens: it ends the frame, which is
/// latched here), or one of Lua's own resource errors (out of memory, stack overflow), which
/// end the run like Rhai's limits.
pub(super) fn uncatchable(guard: &Guard, error: &Lv) -> Option<Error> {
    if let Some(error) = guard.check() {
        return Some(error);
    }
    let frame = frame::current_frame();
    if let Some(error) = frame.as_ref().and_then(|frame| frame.latch.get()) {
        return Some(error.clone());
    }
    if let Lv::Error(raised) = error
        && let Some(violation) = violation_of(raised)
    {
        return Some(frame.map_or(violation.clone(), |frame| frame.latch(violation)));
    }
    resource_error(guard, error)
}

/// The sandbox violation an mlua error carries, if it is one.
fn violation_of(error: &mlua::Error) -> Option<Error> {
    match error {
        mlua::Error::CallbackError { cause, .. } => violation_of(cause),
        mlua::Error::ExternalError(inner) => {
            inner.downcast_ref::<Error>().filter(|e| e.code == ErrorCode::SandboxViolation).cloned()
        }
        _ => None,
    }
}

/// Lua's own resource errors, raised by the interpreter (never by cairn) as these texts.
pub(super) fn resource_error(guard: &Guard, error: &Lv) -> Option<Error> {
    let text = match error {
        Lv::String(s) => s.to_string_lossy(),
        Lv::Error(e) => return resource_error_of(guard, e),
        _ => return None,
    };
    resource_text(guard, &text)
}

fn resource_error_of(guard: &Guard, error: &mlua::Error) -> Option<Error> {
    match error {
        mlua::Error::MemoryError(_) => Some(guard.out_of_memory()),
        mlua::Error::StackError => Some(stack(guard)),
        mlua::Error::CallbackError { cause, .. } => resource_error_of(guard, cause),
        mlua::Error::RuntimeError(text) => resource_text(guard, text),
        _ => None,
    }
}

fn resource_text(guard: &Guard, text: &str) -> Option<Error> {
    if text == "not enough memory" {
        return Some(guard.out_of_memory());
    }
    if text.ends_with("stack overflow") || text.ends_with("error in error handling") {
        return Some(stack(guard));
    }
    None
}

fn stack(guard: &Guard) -> Error {
    guard.trip(Error::new(
        ErrorCode::SandboxLimit,
        "the script recursed too deep (Lua stack overflow); use a loop, or split the work into steps",
    ))
}

/// The chunk name scripts are loaded under (`name.lua:LINE: message` in errors).
pub(super) fn chunk_name(name: &str) -> String {
    let name: String = name.chars().filter(|c| !c.is_control()).take(64).collect();
    format!("={name}.lua")
}

/// Parses `source` without running it: the compile check of `check` and `prepare`.
pub(super) fn compile_check(source: &str, limits: &SandboxLimits) -> Vec<Diagnostic> {
    if source.trim().is_empty() {
        return vec![syntax(1, "the script is empty; write statements and return the run's result".into())];
    }
    if let Some(message) =
        crate::script::source::over_limits(source, limits.max_source_size, limits.max_source_tokens)
    {
        return vec![syntax(1, message)];
    }
    if source.as_bytes().starts_with(b"\x1bLua") {
        return vec![syntax(1, "binary chunks are not accepted; give the script's source".into())];
    }
    let lua = Lua::new_with(StdLib::NONE, LuaOptions::new());
    let Ok(lua) = lua else {
        return vec![internal("cannot create a Lua state to compile the script")];
    };
    let _ = lua.set_memory_limit(64 << 20);
    match lua.load(source).set_name("=script").set_mode(mlua::chunk::ChunkMode::Text).into_function() {
        Ok(_) => Vec::new(),
        Err(mlua::Error::SyntaxError { message, .. }) => {
            let (line, text) = split_position(&message);
            vec![syntax(line, text)]
        }
        Err(mlua::Error::MemoryError(_)) => vec![syntax(1, "the script is too large to compile".into())],
        Err(other) => vec![syntax(1, other.to_string())],
    }
}

/// `script:LINE: message` as the line and the message.
fn split_position(message: &str) -> (u32, String) {
    let rest = message.strip_prefix("script:").unwrap_or(message);
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    match (digits.parse::<u32>(), rest[digits.len()..].strip_prefix(": ")) {
        (Ok(line), Some(text)) => (line.max(1), text.trim().to_owned()),
        _ => (1, message.trim().to_owned()),
    }
}

fn syntax(line: u32, message: String) -> Diagnostic {
    Diagnostic {
        rule_id: "syntax".into(),
        message,
        line,
        column: 1,
        end_line: None,
        end_column: None,
        severity: Severity::Error,
    }
}

fn internal(message: &str) -> Diagnostic {
    Diagnostic { rule_id: "internal".into(), ..syntax(1, message.into()) }
}

/// Multiple Lua values.
pub(super) fn values<const N: usize>(items: [Lv; N]) -> MultiValue {
    MultiValue::from_iter(items)
}

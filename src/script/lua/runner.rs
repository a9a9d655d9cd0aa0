//! The Lua runner: executes a script against the engine, bridging every cairn global onto
//! `Ctx` exactly as the Rhai runner does (same scope paths, labels, option schemas and error
//! policy), so one workflow written in either dialect journals the same entries.
//!
//! A run gets one Lua state on its own OS thread. The main chunk runs as a coroutine polled by
//! `Handle::block_on`; every global that waits on the engine is an mlua async function, so a
//! model call suspends only the coroutine that made it. `parallel` and `pipeline` hand the
//! engine one branch per closure or item; the engine's branch future sends a job back to the
//! script thread, where the fan-out's own future runs it as a new coroutine (`fanout`), so
//! the engine drives scopes, admission, cancellation and liveness while Lua stays on one
//! thread. The bridge is futures and channels inside one future tree: the thread never blocks
//! on anything but `block_on` itself.
//!
//! The sandbox's parts live beside this file: `sandbox` (the state, the hook, the memory
//! limit, the prelude), `guard` (operations, script time, cancellation, the latch), `frame`
//! (which scope and branch the running code belongs to), `isolate` (branches cannot write what
//! they share), `order` (deterministic `next`/`pairs`), `json` (the boundary), `internals` (the
//! tables and functions the script never reaches) and `shared` (what every coroutine of a run
//! shares, and how a global that waits on the engine is registered).

use std::rc::Rc;
use std::sync::Arc;

use mlua::{MultiValue, Value as Lv};
use serde_json::Value;
use tokio::runtime::Handle;

use super::frame::Frame;
use super::guard::{Guard, Timed};
use super::json::MAX_JSON;
use super::sandbox::{self, Install};
use super::shared::Shared;
use crate::engine::{Ctx, ScriptDialect, Workflow};
use crate::error::Error;
use crate::script::rhai::sandbox::SandboxLimits;
use crate::script::{Diagnostic, LintContext, sort_diagnostics};

/// The stack of every script thread (Lua's own recursion is bounded by its C-call limit).
const SCRIPT_STACK: usize = 16 << 20;

/// The Lua dialect, as the engine sees it, with the sandbox limits its runs get.
#[derive(Debug, Clone, Copy)]
pub struct LuaDialect {
    limits: SandboxLimits,
    lint: bool,
}

impl LuaDialect {
    /// The dialect with [`SandboxLimits::STANDARD`].
    pub const fn new() -> LuaDialect {
        LuaDialect { limits: SandboxLimits::STANDARD, lint: true }
    }

    /// The dialect with other limits (register it with `EngineBuilder::dialect`). The
    /// operation budget counts Lua VM instructions; memory is the state's byte limit.
    pub const fn with_limits(limits: SandboxLimits) -> LuaDialect {
        LuaDialect { limits, lint: true }
    }

    /// The dialect without the lint gate: scripts are only compiled before they run. For tests
    /// of the sandbox's own defences against what lint would have refused; never for real runs.
    #[doc(hidden)]
    pub const fn without_lint(self) -> LuaDialect {
        LuaDialect { lint: false, ..self }
    }
}

impl Default for LuaDialect {
    fn default() -> LuaDialect {
        LuaDialect::new()
    }
}

impl ScriptDialect for LuaDialect {
    fn name(&self) -> &'static str {
        "lua"
    }

    fn extension(&self) -> &'static str {
        "lua"
    }

    fn card(&self) -> &'static str {
        include_str!("../../../dialect/card.lua.md")
    }

    fn check(&self, source: &str, ctx: &LintContext) -> Vec<Diagnostic> {
        let mut diagnostics = sandbox::compile_check(source, &self.limits);
        if crate::script::source::over_limits(
            source,
            self.limits.max_source_size,
            self.limits.max_source_tokens,
        )
        .is_some()
        {
            // Over the source limits: neither the parser nor the linter runs on it.
            return diagnostics;
        }
        if diagnostics.is_empty() {
            diagnostics = super::lint::lint_within(source, ctx, &self.limits);
        } else {
            // A script that does not compile gets lint's findings too, minus its own syntax
            // report of the same problem.
            diagnostics.extend(
                super::lint::lint_within(source, ctx, &self.limits)
                    .into_iter()
                    .filter(|d| d.rule_id != "syntax"),
            );
        }
        sort_diagnostics(&mut diagnostics);
        diagnostics
    }

    fn call_bound(&self, source: &str, args: &serde_json::Value) -> crate::script::bound::CallBound {
        super::lint::bound::call_bound(source, args)
    }

    fn prepare(&self, engine: &crate::Engine, name: &str, source: &str) -> Result<Workflow, Error> {
        let diagnostics = if self.lint {
            self.check(source, &LintContext::from(engine.registered()))
        } else {
            sandbox::compile_check(source, &self.limits)
        };
        if diagnostics.iter().any(Diagnostic::is_error) {
            return Err(Error::script_rejected(diagnostics));
        }
        let source: Arc<str> = Arc::from(source);
        let chunk: Arc<str> = Arc::from(sandbox::chunk_name(name));
        let limits = self.limits;
        Ok(Workflow::new(name, move |ctx, args| {
            let (source, chunk) = (source.clone(), chunk.clone());
            async move { run_on_thread(source, chunk, ctx, args, limits).await }
        }))
    }
}

/// Runs the script on its own thread and waits for its value.
async fn run_on_thread(
    source: Arc<str>,
    chunk: Arc<str>,
    ctx: Ctx,
    args: Value,
    limits: SandboxLimits,
) -> Result<Value, Error> {
    // The thread is one of the run's: taken from its context's share before it starts (the
    // branches' shares divide what is left: `engine::fanout`).
    let mut ctx = ctx;
    ctx.threads = Some(ctx.script_threads()?);
    let handle = Handle::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("cairn-lua".into())
        .stack_size(SCRIPT_STACK)
        .spawn(move || {
            // The engine's allocations on this thread are not the script's (its memory is the
            // Lua state's own limit).
            let _engine = crate::alloc::MemoryAccount::suspend();
            let result = execute(&source, &chunk, ctx, &args, &handle, limits);
            let _ = tx.send(result);
        })
        .map_err(|e| Error::internal(format!("cannot start the script thread: {e}")))?;
    rx.await.map_err(|_| Error::internal("the script thread ended without a result"))?
}

fn execute(
    source: &str,
    chunk: &str,
    ctx: Ctx,
    args: &Value,
    handle: &Handle,
    limits: SandboxLimits,
) -> Result<Value, Error> {
    let setup = |e: mlua::Error| Error::internal(format!("cannot set up the Lua sandbox: {e}"));
    let (lua, internals, hidden) = sandbox::open().map_err(setup)?;
    let guard = Rc::new(Guard::new(&limits, ctx.cancel.clone(), ctx.run_sandbox(), Some(ctx.script_clock())));
    // What this thread allocates from here on is the script's work (see `Guard::memory`).
    let _allocations = guard.memory.enter();
    let shared =
        Rc::new(Shared { guard: guard.clone(), internals: internals.clone(), hidden: Rc::new(hidden) });
    let globals = lua.create_table().map_err(setup)?;
    let (spent, remaining) = super::globals::register(&lua, &shared, &globals).map_err(setup)?;
    super::fanout::register(&lua, &shared, &globals).map_err(setup)?;
    let args = shared.to_lua(&lua, args)?;
    sandbox::install(
        &lua,
        Install { guard: &guard, internals: &internals, limits: &limits, globals, spent, remaining, args },
    )
    .map_err(setup)?;
    let main = match lua.load(source).set_name(chunk).set_mode(mlua::chunk::ChunkMode::Text).into_function() {
        Ok(main) => main,
        Err(e) => return Err(Error::validation(format!("the script does not compile: {e}"))),
    };
    let frame = Frame::main();
    let run = shared.run(ctx, frame, main, MultiValue::new());
    let values = handle.block_on(Timed { guard: guard.clone(), inner: Box::pin(run) })?;
    let result = values.front().cloned().unwrap_or(Lv::Nil);
    shared
        .to_json(&result, MAX_JSON)
        .map_err(|e| Error::new(e.code, format!("the script's result: {}", e.message)))
}

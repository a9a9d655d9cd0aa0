//! The Rhai runner: executes a compiled script against the engine, bridging every cairn
//! global onto `Ctx`.
//!
//! A script runs on its own OS thread with a stack sized by its memory limit (`teardown`); each host call blocks that thread
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

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use ::rhai::{AST, Dynamic, Engine as Rhai, FnPtr, Map, NativeCallContext, Scope};
use serde_json::Value;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

use super::bridge::{
    RhaiResult, Shared, block, block_host, current, error_token, from_rhai, host_work, json_size, options,
    to_dynamic, to_json, to_rhai, with_ctx,
};
use super::fanout::register_fanout;
use super::sandbox::{SandboxLimits, sandbox_engine};
use crate::engine::{
    CallOptions, Ctx, ExternalOptions, ScriptDialect, StepOptions, Workflow, WorkflowOptions,
};
use crate::error::Error;
use crate::journal::Kind;
use crate::money::Money;
use crate::script::LintContext;
use crate::script::options::{agent as agent_options, on_error, str_opt, usd};

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
        let compiled = compiled.map_err(Error::script_rejected)?;
        let ast = Arc::new(compiled.into_ast());
        let limits = self.limits;
        Ok(Workflow::new(name, move |ctx, args| {
            let ast = ast.clone();
            async move { run_on_thread(ast, ctx, args, limits).await }
        }))
    }
}

/// Runs the script on its own thread and waits for its value.
async fn run_on_thread(
    ast: Arc<AST>,
    mut ctx: Ctx,
    args: Value,
    limits: SandboxLimits,
) -> Result<Value, Error> {
    // The thread is one of the run's: taken from its context's share before it starts.
    ctx.threads = Some(ctx.script_threads()?);
    let handle = Handle::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let cancel = ctx.cancel.clone();
    std::thread::Builder::new()
        .name("cairn-script".into())
        .stack_size(super::teardown::script_stack(&limits))
        .spawn(move || {
            let result = execute(&ast, ctx, args, handle, cancel, limits);
            let _ = tx.send(result);
        })
        .map_err(|e| Error::internal(format!("cannot start the script thread: {e}")))?;
    rx.await.map_err(|_| Error::internal("the script thread ended without a result"))?
}

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
        guard: super::guard::RunGuard::new(&limits, cancel, ctx.run_sandbox(), Some(ctx.script_clock())),
        limits,
        closure_params: super::isolate::ClosureParams::of(ast),
        shapes: super::defer::Shapes::of(ast),
        bodies: super::body::BodyHashes::of(ast),
    });
    let _charged = shared.guard.enter();
    // This script thread holds its share of the run's threads (`run_on_thread` took it).
    super::threads::hold(ctx.threads.unwrap_or(crate::script::run_sandbox::MAX_RUN_THREADS));
    let mut engine = build_engine(&shared);
    let cells = super::resolver::install(&mut engine, ast);
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
    // Deeply nested values (a chain of closures capturing closures) dropped without recursion,
    // with every cell a closure captured.
    super::teardown::dismantle(scope.into_iter().map(|(_, value, _)| value).chain(value).chain(cells.take()));
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
    super::split::register(&mut engine, shared.limits.max_array_size);
    super::scan::register(&mut engine);
    super::compare::register(&mut engine);
    super::print::register(&mut engine, shared.limits.max_string_size);
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

fn register_agent(engine: &mut Rhai, shared: &Arc<Shared>) {
    fn agent(shared: &Shared, prompt: &str, opts: &Map) -> RhaiResult<Dynamic> {
        // The prompt is charged here, before a branch's call is deferred (a deferred call never
        // reaches `block`): hashed into the call's key, copied into its request and checkpoints.
        host_work(prompt.len(), prompt.len(), 0)?;
        let parse = |opts: &Map| options("agent", opts).and_then(|value| agent_options(&value)).ok();
        if let Some(deferred) = super::defer::offer(prompt, opts, parse) {
            return deferred;
        }
        let ctx = current()?;
        let value = options("agent", opts).map_err(to_rhai)?;
        let options = agent_options(&value).map_err(to_rhai)?;
        let result = block(shared, 0, pin!(ctx.agent(prompt, options)))?;
        Ok(to_dynamic(&result))
    }
    let s = shared.clone();
    engine.register_fn("agent", move |prompt: &str| agent(&s, prompt, &Map::new()));
    let s = shared.clone();
    engine.register_fn("agent", move |prompt: &str, opts: Map| agent(&s, prompt, &opts));
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
            crate::engine::Begun::Done(result, ops) => {
                // The body's operations count as if it had run (they were journaled with it).
                if let Some(error) = shared.guard.served_step(ops) {
                    return Err(to_rhai(error));
                }
                return result.map(|v| to_dynamic(&v)).map_err(to_rhai);
            }
            crate::engine::Begun::Live(live) => live,
        };
        // The body runs here, on the script thread, between the two journal entries, in the
        // step's own scope (so its effects never shift what follows the step).
        // What the body captured is read-only inside it (a replay skips the body, so a write
        // there would be lost and what follows would differ).
        let inner = ctx.step_body(&live);
        let isolation = super::isolate::Isolation::step(&shared.closure_params);
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
        block(shared, name.len() + json_size(&args), pin!(ctx.call(name, args, call_opts)))
            .map(|v| to_dynamic(&v))
    }
    let s = shared.clone();
    engine.register_fn("host_call", move |name: &str, args: Dynamic| host_call(&s, name, &args, &Map::new()));
    let s = shared.clone();
    engine.register_fn("host_call", move |name: &str, args: Dynamic, o: Map| host_call(&s, name, &args, &o));

    fn phase(context: &NativeCallContext, name: &str, body: FnPtr) -> RhaiResult<Dynamic> {
        let ctx = current()?;
        // The name goes into the phase's events and the cost report's phases, as in Lua.
        host_work(name.len(), name.len(), 1)?;
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
        let mut ctx = current()?;
        // The child's script thread comes out of this thread's share of the run's threads.
        ctx.threads = Some(super::threads::held(crate::script::run_sandbox::MAX_RUN_THREADS));
        let opts = options("workflow", opts).map_err(to_rhai)?;
        let args =
            to_json(args).map_err(|e| to_rhai(Error::validation(format!("workflow args: {}", e.message))))?;
        let wopts = WorkflowOptions {
            key: str_opt(&opts, "key"),
            budget: usd(&opts, "budget").map_err(to_rhai)?,
            on_error: on_error(&opts),
            label: str_opt(&opts, "label"),
        };
        block(shared, name.len() + json_size(&args), pin!(ctx.workflow(name, args, wopts)))
            .map(|v| to_dynamic(&v))
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
        block(shared, key.len(), pin!(ctx.await_external(key, eopts))).map(|v| to_dynamic(&v))
    }
    fn orchestrate(shared: &Shared, goal: &str, opts: &Map) -> RhaiResult<Dynamic> {
        let ctx = current()?;
        let opts = options("orchestrate", opts).map_err(to_rhai)?;
        let opts = crate::orchestrator::OrchestrateOptions::from_json(&opts).map_err(to_rhai)?;
        block(shared, goal.len(), ctx.orchestrate(goal, opts)).map(|o| to_dynamic(&o.value()))
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
        block(&s, 0, pin!(current()?.sleep(ms)))
    });
    let s = shared.clone();
    engine.register_fn("now", move || -> RhaiResult<i64> { block_host(&s, 0, pin!(current()?.now())) });
    let s = shared.clone();
    engine.register_fn("random", move || -> RhaiResult<f64> {
        block_host(&s, 0, pin!(current()?.random(None)))
    });
    let s = shared.clone();
    engine.register_fn("random", move |key: &str| -> RhaiResult<f64> {
        let ctx = current()?;
        // The key is hashed into the call's identity and kept with its entry.
        block_host(&s, key.len(), pin!(ctx.random(Some(key))))
    });
    let s = shared.clone();
    engine.register_fn("uuid", move || -> RhaiResult<String> { block_host(&s, 0, pin!(current()?.uuid())) });

    engine.register_type_with_name::<BudgetView>("Budget");
    let s = shared.clone();
    engine.register_fn("spent", move |_: &mut BudgetView| -> RhaiResult<f64> {
        block(&s, 0, pin!(current()?.budget_spent())).map(Money::as_usd)
    });
    let s = shared.clone();
    engine.register_fn("remaining", move |_: &mut BudgetView| -> RhaiResult<Dynamic> {
        let remaining = block(&s, 0, pin!(current()?.budget_remaining()))?;
        Ok(remaining.map_or(Dynamic::UNIT, |m| Dynamic::from(m.as_usd())))
    });
}

#[cfg(test)]
mod tests {
    use serde_json::json;

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

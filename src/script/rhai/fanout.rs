//! Rhai's `parallel` and `pipeline`: branches and items on scoped script threads of their
//! own (one per branch or item, within the run's thread budget, see `threads`), each with the
//! `Ctx` of its scope; a branch that is one agent call runs without a thread (`defer`).

use std::pin::pin;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use ::rhai::{Array, Dynamic, Engine as Rhai, FnPtr, Map, NativeCallContext};
use serde_json::{Value, json};

use super::bridge::{
    MAX_BRANCH_RESULT, MAX_BRANCH_THREADS, MAX_FANOUT_RESULT, MAX_RUN_THREADS, RhaiResult, Shared, bounded,
    current, from_rhai, host_work, options, to_dynamic, to_json, to_rhai, with_ctx,
};
use crate::engine::{Branch, Ctx, OnItemError, ParallelOptions, PipelineOptions, Stage};
use crate::error::{Error, ErrorCode};
use crate::script::options::{parallel as parallel_options, str_opt};

/// A deferred branch (see `defer`): its agent call in the branch's scope, its value and error
/// handed back as the branch's thread would have handed them (through a script value).
///
/// It is polled on the fan-out's thread, a script thread: the call is the engine's work, so
/// every poll of it runs with the run's memory account suspended (as `block` does for a call
/// on a thread), and what it returns is freed suspended too; the branch's value is made with
/// the account on, as a branch thread makes it, so the account neither misses it nor is
/// credited for memory it never counted.
pub(super) async fn deferred_branch(ctx: Ctx, deferred: super::defer::Deferred) -> Result<Value, Error> {
    let mut call = pin!(ctx.agent(&deferred.prompt, deferred.options));
    let outcome = std::future::poll_fn(|cx| {
        let _engine_work = crate::alloc::MemoryAccount::suspend();
        call.as_mut().poll(cx)
    })
    .await;
    let (branch, engine_made) = match outcome {
        Ok(value) => {
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
    let isolation = super::isolate::Isolation::new(&shared.closure_params);
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
    let stack = super::teardown::script_stack(&shared.limits);
    std::thread::scope(|scope| {
        let spawn = move || std::thread::Builder::new().stack_size(stack).spawn_scoped(scope, worker);
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
    let mut popts = parallel_options(&opts);
    let single_fn = fns.len() == 1 && args.len() != 1;
    let count = args.len();
    // The map form runs one closure (given twice for a single item); the list form one each.
    let code = if single_fn || fns.len() > count { &fns[..1.min(fns.len())] } else { &fns[..] };
    popts.bodies = crate::script::options::fanout_code(code.iter().map(|f| shared.bodies.get(f)));
    let workers = popts.concurrency.unwrap_or(count).min(count).min(MAX_BRANCH_THREADS);
    // Branches that are one agent call are evaluated here up to their call and need no thread;
    // the others keep their arguments for a thread (see `defer`).
    let fn_of = |i: usize| &fns[if single_fn { 0 } else { i }];
    let isolation = super::isolate::Isolation::new(&shared.closure_params);
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
            PipelineOptions {
                on_item_error: engine_mode,
                concurrency,
                label: str_opt(&opts, "label"),
                bodies: crate::script::options::fanout_code(fns.iter().map(|f| shared.bodies.get(f))),
            },
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

pub(super) fn register_fanout(engine: &mut Rhai, shared: &Arc<Shared>) {
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

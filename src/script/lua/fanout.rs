//! `parallel` and `pipeline`: the engine runs the fan-out (scopes, admission in branch order,
//! fail-fast, settle, liveness); each branch it starts sends a job back to the script thread,
//! where the fan-out's future starts the branch as a coroutine with a private copy of its
//! function (`isolate`) and polls it beside the engine's future until the fan-out ends.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;

use futures::StreamExt;
use futures::channel::mpsc;
use futures::stream::FuturesUnordered;
use mlua::{Function, Lua, MultiValue, Table, Value as Lv};
use serde_json::{Value, json};

use super::frame::Frame;
use super::globals::{arg, opts};
use super::guard::EngineWork;
use super::isolate::{Isolation, Place};
use super::options;
use super::sandbox::values;
use super::shared::{Shared, async_global};
use crate::engine::{Branch, Ctx, OnItemError, PipelineOptions, Stage};
use crate::error::{Error, ErrorCode};

/// The most JSON one branch (or item) may hand back, and a fan-out in all.
const MAX_BRANCH_RESULT: usize = 16 << 20;
const MAX_FANOUT_RESULT: usize = 64 << 20;

/// A branch to run: function `index` with `input` (an item, or the previous stage's value).
struct Job {
    index: usize,
    ctx: Ctx,
    input: Option<Value>,
    reply: tokio::sync::oneshot::Sender<Result<Value, Error>>,
}

async fn submit(
    jobs: &mpsc::UnboundedSender<Job>,
    index: usize,
    ctx: Ctx,
    input: Option<Value>,
) -> Result<Value, Error> {
    let (reply, result) = tokio::sync::oneshot::channel();
    jobs.unbounded_send(Job { index, ctx, input, reply })
        .map_err(|_| Error::internal("the fan-out ended before its branch could start"))?;
    result.await.map_err(|_| Error::internal("a branch ended without a result"))?
}

/// Runs one job as a coroutine: a private copy of its function, its input as a fresh table.
async fn run_job(lua: Lua, shared: Rc<Shared>, function: Function, job: Job) {
    let result = async {
        let isolation = Isolation::new(&lua, &shared.hidden, &shared.internals, Place::Branch);
        let frame = Frame::branch(isolation.clone());
        let private = isolation.function(&lua, &function)?;
        let input = match &job.input {
            Some(value) => values([shared.to_lua(&lua, value)?]),
            None => MultiValue::new(),
        };
        let values = shared.run(job.ctx.clone(), frame.clone(), private, input).await?;
        isolation.check_writes()?;
        shared.to_json(&values.front().cloned().unwrap_or(Lv::Nil), MAX_BRANCH_RESULT)
    }
    .await;
    let _ = job.reply.send(result);
}

/// Polls the engine's fan-out and the branches it starts until the fan-out ends.
async fn drive<F>(
    lua: &Lua,
    shared: &Rc<Shared>,
    fanout: F,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    functions: &[Function],
) -> Result<Vec<Value>, Error>
where
    F: Future<Output = Result<Vec<Value>, Error>>,
{
    let mut fanout = std::pin::pin!(EngineWork::new(&shared.guard, fanout));
    let mut running: FuturesUnordered<Pin<Box<dyn Future<Output = ()>>>> = FuturesUnordered::new();
    std::future::poll_fn(|cx| {
        loop {
            if let Poll::Ready(result) = fanout.as_mut().poll(cx) {
                return Poll::Ready(result);
            }
            let mut progressed = false;
            while let Poll::Ready(Some(job)) = jobs.poll_next_unpin(cx) {
                let function = functions.get(job.index).cloned();
                match function {
                    Some(function) => {
                        running.push(Box::pin(run_job(lua.clone(), shared.clone(), function, job)))
                    }
                    None => {
                        let _ = job.reply.send(Err(Error::internal("a branch names no function")));
                    }
                }
                progressed = true;
            }
            while let Poll::Ready(Some(())) = running.poll_next_unpin(cx) {
                progressed = true;
            }
            if !progressed {
                return Poll::Pending;
            }
        }
    })
    .await
}

fn functions_of(table: &Table, what: &str) -> Result<Vec<Function>, Error> {
    let len = table.raw_len();
    let mut functions = Vec::with_capacity(len);
    for i in 1..=len {
        match table.raw_get::<Lv>(i).map_err(|e| Error::internal(e.to_string()))? {
            Lv::Function(f) => functions.push(f),
            other => {
                return Err(Error::validation(format!(
                    "{what} must be functions, found a {}",
                    other.type_name()
                )));
            }
        }
    }
    Ok(functions)
}

fn items_of(shared: &Shared, value: &Lv, what: &str) -> Result<Vec<Value>, Error> {
    match shared.to_json(value, super::json::MAX_JSON) {
        Ok(Value::Array(items)) => Ok(items),
        Ok(Value::Object(map)) if map.is_empty() => Ok(Vec::new()),
        Ok(other) => Err(Error::validation(format!(
            "{what} must be a list (a sequence table {{...}}), got {}",
            lua_kind(&other)
        ))),
        Err(e) => Err(Error::new(e.code, format!("{what}: {}", e.message))),
    }
}

/// What a JSON value is, in the words of Lua.
fn lua_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "nil",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a table of key = value pairs",
    }
}

/// A fan-out of `count` branches: within the cap (a Rhai array's limit), and each branch's
/// scope, state and result charged to the run as a journal entry.
fn branch_work(lua: &Lua, shared: &Shared, count: usize, global: &str) -> Result<(), Error> {
    if count > shared.guard.max_branches {
        return Err(Error::new(
            ErrorCode::SandboxLimit,
            format!(
                "a {global} of {count} branches is over the limit of {}; batch the items (a branch can \
                 handle many) or use child workflows",
                shared.guard.max_branches
            ),
        ));
    }
    shared.host_work(lua, 0, 0, count as u64)
}

fn table_arg(value: &Lv, global: &str, name: &str) -> Result<Table, Error> {
    match value {
        Lv::Table(t) => Ok(t.clone()),
        other => {
            Err(Error::validation(format!("{global}: {name} must be a table, got {}", other.type_name())))
        }
    }
}

fn bounded(values: Vec<Value>, what: &str) -> Result<Vec<Value>, Error> {
    let size: usize = values.iter().map(|v| v.to_string().len()).sum();
    if size > MAX_FANOUT_RESULT {
        return Err(Error::new(
            ErrorCode::SandboxLimit,
            format!("{what} is larger than {} MiB", MAX_FANOUT_RESULT >> 20),
        ));
    }
    Ok(values)
}

pub(super) fn register(lua: &Lua, shared: &Rc<Shared>, table: &Table) -> mlua::Result<()> {
    table.raw_set(
        "parallel",
        async_global(lua, shared, false, |lua, shared, ctx, _, args| async move {
            super::shared::nesting()?;
            let first = arg(&args, 0);
            let (functions, inputs, options_at) = match arg(&args, 1) {
                Lv::Function(f) => {
                    let items = items_of(&shared, &first, "parallel: items")?;
                    (vec![f], items.into_iter().map(Some).collect::<Vec<_>>(), 2)
                }
                _ => {
                    let branches =
                        functions_of(&table_arg(&first, "parallel", "branches")?, "parallel branches")?;
                    let inputs = vec![None; branches.len()];
                    (branches, inputs, 1)
                }
            };
            branch_work(&lua, &shared, inputs.len().max(functions.len()), "parallel")?;
            let value = opts(&shared, "parallel", arg(&args, options_at))?;
            let mut popts = options::parallel(&value);
            popts.bodies = crate::script::options::fanout_code(functions.iter().map(super::body::identity));
            let single = functions.len() == 1 && matches!(arg(&args, 1), Lv::Function(_));
            let (tx, rx) = mpsc::unbounded::<Job>();
            let tx = Arc::new(tx);
            let branches: Vec<Branch> = inputs
                .into_iter()
                .enumerate()
                .map(|(i, input)| {
                    let tx = tx.clone();
                    let index = if single { 0 } else { i };
                    crate::engine::branch(move |ctx| async move { submit(&tx, index, ctx, input).await })
                })
                .collect();
            drop(tx);
            let fanout = async move { ctx.parallel(branches, popts).await };
            let results = drive(&lua, &shared, fanout, rx, &functions).await?;
            let results = bounded(results, "the results of a parallel")?;
            Ok(values([shared.to_lua(&lua, &Value::Array(results))?]))
        })?,
    )?;

    table.raw_set(
        "pipeline",
        async_global(lua, shared, false, |lua, shared, ctx, _, args| async move {
            super::shared::nesting()?;
            let items = items_of(&shared, &arg(&args, 0), "pipeline: items")?;
            let stages = functions_of(&table_arg(&arg(&args, 1), "pipeline", "stages")?, "pipeline stages")?;
            branch_work(&lua, &shared, items.len(), "pipeline")?;
            let value = opts(&shared, "pipeline", arg(&args, 2))?;
            let mode = match value.get("on_item_error").and_then(Value::as_str) {
                Some("throw") => OnItemError::Throw,
                Some("collect") => OnItemError::Collect,
                _ => OnItemError::Drop,
            };
            let concurrency = value.get("concurrency").and_then(Value::as_u64).map(|n| n as usize);
            let (tx, rx) = mpsc::unbounded::<Job>();
            let tx = Arc::new(tx);
            let engine_stages: Vec<Stage> = (0..stages.len())
                .map(|index| {
                    let tx = tx.clone();
                    crate::engine::stage(move |ctx, value: Value| {
                        let tx = tx.clone();
                        async move { submit(&tx, index, ctx, Some(value)).await }
                    })
                })
                .collect();
            drop(tx);
            let popts = PipelineOptions {
                on_item_error: mode,
                concurrency,
                label: options::str_opt(&value, "label"),
                bodies: crate::script::options::fanout_code(stages.iter().map(super::body::identity)),
            };
            let fanout = async move { ctx.pipeline(items, engine_stages, popts).await };
            let results = drive(&lua, &shared, fanout, rx, &stages).await?;
            let results = bounded(results, "the results of a pipeline")?;
            if mode == OnItemError::Collect {
                // The card's shape: {results, dropped}, dropped as {index, error}.
                let mut kept = Vec::new();
                let mut dropped = Vec::new();
                for (index, value) in results.into_iter().enumerate() {
                    match value.get("error") {
                        Some(error) if value.as_object().is_some_and(|m| m.len() == 1) => {
                            dropped.push(json!({ "index": index, "error": error }))
                        }
                        _ => kept.push(value),
                    }
                }
                return Ok(values([shared.to_lua(&lua, &json!({ "results": kept, "dropped": dropped }))?]));
            }
            Ok(values([shared.to_lua(&lua, &Value::Array(results))?]))
        })?,
    )?;
    Ok(())
}

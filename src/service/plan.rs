//! A planner goal submitted to `POST /v1/runs`: the run id is reserved at once (a queued
//! meta record with no script yet, so `GET` and the event stream work from the first
//! moment), the planner writes the script in the background, and the accepted script is
//! queued under that id like a submitted one (same sandbox, same budget cap; the stored source
//! is what a resume re-executes). A plan that produced no script settles the run `error` with
//! the typed error (`script_rejected` for a rejection) and every draft's diagnostics in its
//! meta, where `GET /v1/runs/{id}` shows them.

use serde_json::{Value, json};

use super::state::{AppState, blocking};
use crate::engine::{RESERVED_FIELD, is_reserved};
use crate::error::Error;
use crate::planner::{PlanError, PlanOptions, PlanResult};
use crate::store::{RunId, RunMeta, RunStatus};
use crate::{Engine, RunOptions, Script};

/// The meta field of a planned run: its goal and planning run, and (when the plan failed)
/// why.
pub(super) const PLANNING_FIELD: &str = "planning";

/// The meta field of a run that settled without running: its `{code, message}`.
pub(super) const ERROR_FIELD: &str = "error";

/// A goal's run, between its acceptance and its script.
#[derive(Debug, Clone)]
pub(crate) struct GoalRun {
    pub run_id: RunId,
    pub goal: String,
    pub plan: PlanOptions,
    pub args: Value,
    pub budget_usd: Option<f64>,
    pub force: bool,
}

/// Writes the reservation of a goal's run: a queued meta record without a script.
pub(crate) fn reserve(
    engine: &Engine,
    run: &GoalRun,
    planning_run_id: &RunId,
    lease: Option<&crate::store::Lease>,
) -> Result<(), Error> {
    let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
    let mut extra = serde_json::Map::new();
    extra.insert(RESERVED_FIELD.into(), Value::Bool(true));
    // Everything needed to plan it again: a server that stops mid-plan leaves the
    // reservation, and the next one to start on the store picks it up (`recover`). Kept as a
    // blob too: the queued run's meta, written when its script is queued, holds no trace of
    // the goal.
    let planning = json!({
            "goal": run.goal,
            "planning_run_id": planning_run_id,
            "dialect": run.plan.dialect,
            "args": run.args,
            "budget_usd": run.budget_usd,
            "planning_budget_usd": run.plan.budget_usd,
            "force": run.force,
    });
    engine.inner().transcripts.put(&planning_ref(&run.run_id), planning.to_string().as_bytes())?;
    extra.insert(PLANNING_FIELD.into(), planning);
    let ceiling = match run.budget_usd {
        Some(usd) => Some(crate::money::Money::from_usd(usd).map_err(|e| Error::config(e.to_string()))?),
        None => None,
    };
    let meta = RunMeta {
        run_id: run.run_id.clone(),
        status: RunStatus::Queued,
        name: Some("planned".into()),
        tags: vec!["planned".into()],
        created_at_ms: now,
        updated_at_ms: now,
        hash_version: crate::journal::HASH_VERSION,
        budget_ceiling: ceiling,
        dialect: Some(run.plan.dialect.clone()),
        source_ref: None,
        source_hash: None,
        args_hash: None,
        segments: 0,
        extra,
    };
    engine.journal_store().put_meta(&meta, lease)?;
    Ok(())
}

/// The blob that keeps a planned run's goal and planning options.
fn planning_ref(run: &RunId) -> String {
    format!("{run}/planning.json")
}

/// A planned run's goal and planning options (`None` for a run that was not planned).
pub(crate) fn planning_of(engine: &Engine, meta: &RunMeta) -> Result<Option<Value>, Error> {
    if let Some(planning) = meta.extra.get(PLANNING_FIELD) {
        return Ok(Some(planning.clone()));
    }
    let Some(bytes) = engine.inner().transcripts.get(&planning_ref(&meta.run_id))? else { return Ok(None) };
    Ok(serde_json::from_slice(&bytes).ok())
}

/// Plans the goal, then queues the accepted script under the reserved id; a plan that
/// produced none settles the reservation `error`.
pub(crate) async fn plan_and_queue(state: AppState, run: GoalRun) {
    let engine = state.engine.clone();
    // The card lists the tools of every toolset, so MCP servers are reached (once per server
    // process: a source keeps its listing) before the planner writes; one that is not reached
    // is named on the card as unlisted.
    for failure in engine.list_tools().await {
        tracing::warn!(run = %run.run_id, "{}", crate::text::for_terminal_line(&failure.message));
    }
    let planned = loop {
        // Never closed, so the permit always comes; held while the planner writes.
        let turn = state.planning.clone().acquire_owned().await;
        let planned = crate::planner::plan(&engine, &run.goal, run.plan.clone()).await;
        drop(turn);
        match planned {
            // Another process holds the planning run (the same goal planned at once, or a
            // stopped server's lease not yet expired): look again once it may be free, as long
            // as the reservation still waits.
            Err(error) if error.code() == crate::error::ErrorCode::RunBusy => {
                tokio::time::sleep(BUSY_RETRY).await;
                let (engine, id) = (engine.clone(), run.run_id.clone());
                match tokio::task::spawn_blocking(move || still_reserved(&engine, &id)).await {
                    Ok(Ok(true)) => continue,
                    _ => return,
                }
            }
            other => break other,
        }
    };
    let settled = tokio::task::spawn_blocking(move || match planned {
        Ok(plan) => queue_planned(&engine, &run, &plan),
        Err(error) => fail(&engine, &run.run_id, &error),
    })
    .await;
    match settled {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(error = %e, "a planned run could not be queued or settled"),
        Err(e) => tracing::error!(error = %e, "planning a run failed"),
    }
}

/// How long a goal whose planning run another process holds waits before trying again.
const BUSY_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Picks up the reservations a stopped server left mid-plan: each is planned again (paid
/// drafts replay from the planning run's journal) and queued. A reservation another live
/// server is planning is left to it (its planning run's lease says so).
pub(crate) async fn recover(state: AppState) {
    let found = blocking(&state, |engine| {
        let filter = crate::store::RunFilter {
            statuses: vec![RunStatus::Queued],
            tags: vec!["planned".into()],
            ..crate::store::RunFilter::default()
        };
        let runs = engine.journal_store().list_runs(&filter)?;
        Ok(runs.into_iter().filter(is_reserved).filter_map(|meta| goal_run_of(&meta)).collect::<Vec<_>>())
    })
    .await;
    match found {
        Ok(runs) => {
            for run in runs {
                tokio::spawn(plan_and_queue(state.clone(), run));
            }
        }
        Err(e) => tracing::warn!(error = ?e, "cannot look for planner goals left mid-plan"),
    }
}

/// The goal run a reservation records.
fn goal_run_of(meta: &RunMeta) -> Option<GoalRun> {
    let planning = meta.extra.get(PLANNING_FIELD)?;
    let number = |key: &str| planning.get(key).and_then(Value::as_f64);
    Some(GoalRun {
        run_id: meta.run_id.clone(),
        goal: planning.get("goal")?.as_str()?.to_owned(),
        plan: PlanOptions {
            dialect: planning.get("dialect")?.as_str()?.to_owned(),
            budget_usd: number("planning_budget_usd"),
            args: planning.get("args").cloned(),
            ..PlanOptions::default()
        },
        args: planning.get("args").cloned().unwrap_or_else(|| json!({})),
        budget_usd: number("budget_usd"),
        force: planning.get("force").and_then(Value::as_bool).unwrap_or(false),
    })
}

/// Queues the accepted plan's script under the run's reserved id (unless its cost bound
/// exceeds the run's ceiling and the run was not forced).
fn queue_planned(engine: &Engine, run: &GoalRun, plan: &PlanResult) -> Result<(), Error> {
    if !run.force {
        let ceiling = match run.budget_usd {
            Some(usd) => Some(crate::money::Money::from_usd(usd).map_err(|e| Error::config(e.to_string()))?),
            None => engine.inner().default_budget,
        };
        if let Some(ceiling) = ceiling
            && plan.cost_bound.exceeds(ceiling)
        {
            let error = PlanError::OverCeiling { bound: plan.cost_bound.clone(), ceiling };
            return fail(engine, &run.run_id, &error);
        }
    }
    let script = Script::new(&plan.dialect, "planned", &plan.source).planner_written();
    let options = RunOptions {
        budget_usd: run.budget_usd,
        run_id: Some(run.run_id.clone()),
        tags: vec!["planned".into()],
        ..RunOptions::default()
    };
    match engine.enqueue_script(&script, run.args.clone(), options) {
        Ok(_) => Ok(()),
        // The reservation was cancelled meanwhile: nothing to queue.
        Err(_) if !still_reserved(engine, &run.run_id)? => Ok(()),
        Err(e) => {
            let error = PlanError::Run(e);
            fail(engine, &run.run_id, &error)
        }
    }
}

fn still_reserved(engine: &Engine, run: &RunId) -> Result<bool, Error> {
    Ok(engine.journal_store().get_meta(run)?.is_some_and(|meta| is_reserved(&meta)))
}

/// Settles a reservation `error` with the plan's failure (and a rejection's drafts).
fn fail(engine: &Engine, run: &RunId, error: &PlanError) -> Result<(), Error> {
    let store = engine.journal_store();
    let Some(mut meta) = store.get_meta(run)? else { return Ok(()) };
    if !is_reserved(&meta) {
        return Ok(()); // cancelled meanwhile
    }
    let wire = error.to_error();
    meta.status = RunStatus::Error;
    meta.updated_at_ms = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
    meta.extra.remove(RESERVED_FIELD);
    meta.extra.insert(ERROR_FIELD.into(), json!({ "code": wire.code, "message": wire.message }));
    if let PlanError::Rejected(rejection) = error
        && let Some(Value::Object(planning)) = meta.extra.get_mut(PLANNING_FIELD)
    {
        planning.insert("rejection".into(), serde_json::to_value(rejection).unwrap_or(Value::Null));
    }
    store.put_meta(&meta, None)?;
    Ok(())
}

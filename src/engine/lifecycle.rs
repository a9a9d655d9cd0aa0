//! A run's lifecycle: a fresh start (options validated, the lease taken, stored inputs and
//! meta written under it) or a resume (the lease taken, the inbox drained, the journal loaded
//! and indexed, an edit stored), then one launch: the segment's `RunState`, its lease kept,
//! its deadline armed, the workflow's body run as a task, and its settlement. Calls go one
//! way: the lifecycle drives `RunState`; nothing below calls back into it.

use std::sync::Arc;

use serde_json::Value;

use super::budget_override;
use super::ctx::Ctx;
use super::events::EventKind;
use super::handle::{EventsClaim, RunHandle};
use super::inputs::{
    Fresh, ResumeOptions, RunOptions, ScriptSource, args_ref, begin_fresh, resume_workflow, store_edit,
    validate_budget, validate_deadline,
};
use super::lease;
use super::options::ErrorPolicy;
use super::registry::{Engine, EngineInner};
use super::run::{RunState, SegmentStart, Stop};
use super::started;
use super::summary::Summary;
use super::workflow::Workflow;
use crate::error::Error;
use crate::journal::{self, Entry, Replay, ReplayOptions, Seq};
use crate::money::Money;
use crate::store::{Lease, RunId, RunMeta, RunStatus};

/// Runs are tasks on the caller's tokio runtime; refuse (before writing anything) when
/// there is none, rather than panic.
fn require_runtime() -> Result<(), Error> {
    tokio::runtime::Handle::try_current()
        .map(|_| ())
        .map_err(|_| Error::config("runs must be started inside a tokio runtime"))
}

/// Starts a fresh run.
pub(super) fn start(
    engine: Arc<EngineInner>,
    workflow: Workflow,
    args: Value,
    options: RunOptions,
    script: Option<ScriptSource>,
) -> Result<RunHandle, Error> {
    require_runtime()?;
    let ceiling = validate_budget(options.budget_usd, engine.default_budget)?;
    let now = engine.clock.now_ms();
    validate_deadline(options.deadline_ms, now)?;
    let run_id = options.run_id.clone().unwrap_or_else(RunId::generate);
    if engine.journal.get_meta(&run_id)?.is_some() {
        return Err(Error::config(format!("run {run_id} already exists; resume it instead")));
    }
    let asked = engine.clock.now_ms();
    let lease = lease::acquire(&engine, &run_id)?;
    let keeper = match lease::Keeper::start(&engine, lease.as_ref(), asked) {
        Ok(keeper) => keeper,
        Err(e) => {
            lease::release(&engine, lease.as_ref());
            return Err(e);
        }
    };
    let fresh =
        Fresh { name: &workflow.name, args: &args, options: &options, script: script.as_ref(), ceiling, now };
    match begin_fresh(&engine, &run_id, &fresh, lease.as_ref()) {
        Ok(meta) => {
            let segment = SegmentStart {
                summary: Summary::default(),
                replay: Replay::empty(),
                ceiling,
                spent: Money::ZERO,
                carried: Vec::new(),
                spawns: 0,
                dry_run: false,
                reproduce: false,
                before: None,
                policy: options.policy,
                deadline_ms: options.deadline_ms,
                resumed: false,
                index: 0,
                lease,
                keeper,
                accept_rekey: false,
                hold_timers: options.hold_timers,
            };
            Ok(launch(engine, run_id, workflow, args, meta, segment, None))
        }
        Err(e) => {
            lease::release(&engine, lease.as_ref());
            Err(e)
        }
    }
}

/// Resumes a run from its journal.
pub(super) fn resume(handle: &Engine, run_id: &RunId, options: ResumeOptions) -> Result<RunHandle, Error> {
    require_runtime()?;
    let engine = handle.inner.clone();
    let meta =
        engine.journal.get_meta(run_id)?.ok_or_else(|| Error::config(format!("unknown run {run_id}")))?;
    validate_deadline(options.deadline_ms, engine.clock.now_ms())?;
    // The script children the run stored are the ones it resumes with.
    let restored = super::child_scripts::restore(&engine, &meta)?;
    let engine = restored.unwrap_or(engine);
    let handle = &Engine { inner: engine.clone() };
    let workflow = resume_workflow(handle, &meta, &options)?;
    // A ceiling below what the run has spent is refused before anything is written.
    if let Some(usd) = options.budget_usd {
        budget_override::judge(
            run_id,
            usd,
            meta.budget_ceiling,
            budget_override::settled_spend(&engine, run_id)?,
        )?;
    }
    // The run's calls are keyed as it started them, unless the resume overrides the model.
    let engine = started::resume_engine(&engine, &meta, options.model.as_ref())?.unwrap_or(engine);
    // A dry run writes nothing, so it needs no lease.
    let asked = engine.clock.now_ms();
    let lease = if options.dry_run { None } else { lease::acquire(&engine, run_id)? };
    // Renewed from now on: reading a long journal back can take longer than the lease's ttl.
    let started = lease::Keeper::start(&engine, lease.as_ref(), asked).and_then(|keeper| {
        resume_leased(engine.clone(), run_id, meta, options, workflow, lease.clone(), keeper)
    });
    match started {
        Ok(handle) => Ok(handle),
        Err(e) => {
            lease::release(&engine, lease.as_ref());
            Err(e)
        }
    }
}

/// The rest of a resume, under the run's lease.
fn resume_leased(
    engine: Arc<EngineInner>,
    run_id: &RunId,
    meta: RunMeta,
    options: ResumeOptions,
    workflow: Workflow,
    lease: Option<Lease>,
    keeper: lease::Keeper,
) -> Result<RunHandle, Error> {
    // Resolutions left for the previous driver join the journal before it is read.
    if lease.is_some() {
        lease::drain_stored(&engine, run_id, lease.as_ref())?;
    }
    let meta = match lease {
        // Re-read under the lease: the previous driver may have settled meanwhile.
        Some(_) => engine.journal.get_meta(run_id)?.unwrap_or(meta),
        None => meta,
    };
    let args = match options.args.clone() {
        Some(args) => args,
        None => match engine.transcripts.get(&args_ref(run_id))? {
            Some(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| Error::internal(format!("stored args of run {run_id} are unreadable: {e}")))?,
            None => Value::Null,
        },
    };
    // The journal is read page by page into the matching index and the folds the segment
    // keeps: no entry stays in memory.
    let reproduce = options.dry_run && options.reproduce;
    let mut builder = Replay::builder(&ReplayOptions { reproduce, ..ReplayOptions::default() });
    let mut summary = Summary::default();
    for entry in journal::entries(engine.journal.as_ref(), run_id, 0) {
        let entry = entry?;
        builder.add(&entry);
        summary.add_read(&entry);
    }
    let mut replay = builder.finish();
    // A ceiling raised by this resume (or left for it by the service) applies from this
    // segment on, journaled before anything else of it; the admissions earlier ceilings
    // refused are asked again.
    // The checkpointed turns of calls a killed segment left unsettled are spent from the start
    // (`carry`), for an override's judgement too: a ceiling below them is refused.
    let carried = super::carry::unsettled(&engine, run_id, &summary.unended_agents());
    let spent_so_far =
        carried.iter().fold(summary.ledger.spent, |total, (_, cost)| total.saturating_add(*cost));
    let raised = match options.budget_usd.or_else(|| budget_override::pending(&meta)) {
        Some(usd) => Some(budget_override::judge(run_id, usd, meta.budget_ceiling, spent_so_far)?),
        None => None,
    };
    let mut invalidate: Vec<Seq> = options.invalidate.iter().map(|&s| Seq(s)).collect();
    if raised.is_some() {
        invalidate.extend(summary.refused_admissions.iter().copied());
    }
    replay.invalidate(invalidate);
    let mut meta = meta;
    // Segments that ran before this one (a dry run counts as the next, and writes nothing).
    let index = meta.segments;
    let before = super::before::Before::of(&meta);
    if let Some(raised) = &raised {
        meta.budget_ceiling = Some(raised.applied);
    }
    let opening = raised.as_ref().map(|raised| budget_override::decision(raised, index));
    if !options.dry_run {
        budget_override::clear_pending(&mut meta);
        if let Some(script) = &options.script {
            store_edit(&engine, &mut meta, script, index)?;
        }
        meta.segments += 1;
        meta.status = RunStatus::Running;
        meta.updated_at_ms = engine.clock.now_ms();
        engine.journal.put_meta(&meta, lease.as_ref())?;
    }
    let policy = if meta.extra.get("policy").and_then(Value::as_str) == Some("lenient") {
        ErrorPolicy::Lenient
    } else {
        ErrorPolicy::Strict
    };
    let (spent, spawns) = (summary.ledger.spent, summary.spawns);
    let segment = SegmentStart {
        summary,
        replay,
        ceiling: meta.budget_ceiling,
        spent,
        carried,
        spawns,
        dry_run: options.dry_run,
        reproduce: options.reproduce,
        before: Some(before),
        policy,
        deadline_ms: options.deadline_ms,
        resumed: true,
        index,
        lease,
        keeper,
        accept_rekey: options.accept_rekey,
        hold_timers: options.hold_timers,
    };
    let opening = if options.dry_run { None } else { opening };
    Ok(launch(engine, run_id.clone(), workflow, args, meta, segment, opening))
}

fn launch(
    engine: Arc<EngineInner>,
    run_id: RunId,
    workflow: Workflow,
    args: Value,
    meta: RunMeta,
    segment: SegmentStart,
    opening: Option<Entry>,
) -> RunHandle {
    let deadline_ms = segment.deadline_ms;
    let resumed = segment.resumed;
    let state = RunState::new(engine, run_id.clone(), segment);
    // Lives as long as the run's task: a task dropped unsettled (its runtime shut down under
    // it, as when its process dies) stops the lease's renewal, so the lease runs out.
    let alive = Arc::new(());
    if state.lease.is_some() {
        state.keep_lease(Arc::downgrade(&alive));
    }
    let ctx = Ctx::root(state.clone());
    state.emit((state.span_base, None), false, || EventKind::RunStart {
        name: workflow.name.clone(),
        resumed,
        ceiling: state.budget.ceiling(state.budget.root()),
    });
    if let Some(deadline) = deadline_ms {
        let timer_state = Arc::downgrade(&state);
        let wait_ms = (deadline - state.now_ms()).max(0) as u64;
        let cancel = state.cancel.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(wait_ms)) => {
                    if let Some(state) = timer_state.upgrade() {
                        state.stop_with(Stop::Deadline);
                    }
                }
                _ = cancel.cancelled() => {}
            }
        });
    }
    let task_state = state.clone();
    let (done_tx, done) = tokio::sync::watch::channel(None);
    let task = tokio::spawn(async move {
        let _alive = alive;
        // A decision of the segment's start (a raised ceiling) is durable before any effect.
        if let Some(entry) = opening
            && let Err(e) = task_state.append_one_async(entry).await
        {
            return task_state.settle(meta, Err(e));
        }
        let body = (workflow.body)(ctx, args);
        let value = body.await;
        task_state.settle(meta, value)
    });
    let events = state.events.clone();
    tokio::spawn(async move {
        let outcome = task.await.map_err(|e| Error::internal(format!("the run's task failed: {e}")));
        // Settling closes the log; a task that panicked never settled, and its streams
        // must end all the same.
        events.close();
        let _ = done_tx.send(Some(outcome));
    });
    let claim = Some(EventsClaim::new(state.events.clone()));
    RunHandle { run_id, state, done, claim }
}

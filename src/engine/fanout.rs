//! Structured concurrency: `parallel` (branches in source order, strict abort or settle)
//! and `pipeline` (items flowing through up to six stages with no barrier between stages).
//!
//! Branch `i` of the `n`-th `parallel` in a scope runs in scope `par:n:i`; stage `s` of item
//! `i` of a pipeline runs in `pipe:s:i`. Scopes come from structure only, so a branch's calls
//! keep their identity however the branches interleave.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::admission::Turns;
use super::ctx::Ctx;
use super::events::EventKind;
use super::options::{OnError, OnItemError, ParallelOptions, PipelineOptions};
use super::outcome::Dropped;
use super::run::RunState;
use super::writer::Durability;
use crate::error::{Error, ErrorCode};
use crate::journal::{ContentKey, Entry, Kind, Segment, Seq, Status};
use tokio_util::sync::CancellationToken;

/// One branch of [`Ctx::parallel`].
pub type Branch = Box<dyn FnOnce(Ctx) -> BoxFuture<'static, Result<Value, Error>> + Send>;

/// One stage of [`Ctx::pipeline`]: takes the item's previous value, returns its next.
pub type Stage = Arc<dyn Fn(Ctx, Value) -> BoxFuture<'static, Result<Value, Error>> + Send + Sync>;

/// Wraps a closure as a [`Branch`].
pub fn branch<F, Fut>(body: F) -> Branch
where
    F: FnOnce(Ctx) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Value, Error>> + Send + 'static,
{
    Box::new(move |ctx| Box::pin(body(ctx)))
}

/// Wraps a closure as a [`Stage`].
pub fn stage<F, Fut>(body: F) -> Stage
where
    F: Fn(Ctx, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, Error>> + Send + 'static,
{
    Arc::new(move |ctx, value| Box::pin(body(ctx, value)))
}

/// The most stages a pipeline may have.
const MAX_STAGES: usize = 6;

/// The fail-fast decision of one `parallel` or `pipeline`: the error of the first branch to
/// fail, journaled as a `decision` entry before the cancellation of its unfinished siblings
/// takes effect (timing chose it; a replay must not).
struct FailFast {
    run: Arc<RunState>,
    scope: crate::journal::ScopePath,
    key: ContentKey,
    ordinal: u32,
    /// The identity of the code the decision is taken for, journaled with it.
    bodies: Option<String>,
    /// The failed branch's index + 1 once decided (0: undecided).
    failed: AtomicUsize,
}

/// The `type` of a fail-fast decision entry.
const FAIL_FAST_DECISION: &str = "fail_fast";

impl FailFast {
    fn key(site: u32) -> Result<ContentKey, Error> {
        crate::journal::content_key(&json!({ "kind": "decision", "type": FAIL_FAST_DECISION, "site": site }))
            .map_err(|e| Error::internal(e.to_string()))
    }

    /// The key of the `n`-th pipeline's decision in a scope.
    fn pipeline_key(n: u32) -> Result<ContentKey, Error> {
        crate::journal::content_key(&json!({ "kind": "decision", "type": FAIL_FAST_DECISION, "pipeline": n }))
            .map_err(|e| Error::internal(e.to_string()))
    }

    fn new(ctx: &Ctx, key: ContentKey, ordinal: u32, bodies: Option<String>) -> FailFast {
        FailFast {
            run: ctx.run.clone(),
            scope: ctx.scope.clone(),
            key,
            ordinal,
            bodies,
            failed: AtomicUsize::new(0),
        }
    }

    /// The error a journaled decision raises again, if the entry is one and was taken for the
    /// same code (`bodies`, the identity of the fan-out's branches or stages): a decision
    /// journaled for code since edited does not say how this code ends. A decision that
    /// recorded no identity (a Rust closure's, or one journaled before identities were) holds.
    fn replayed(entry: &Entry, bodies: Option<&str>) -> Option<Error> {
        let value = entry.value()?;
        if value.get("type")?.as_str()? != FAIL_FAST_DECISION {
            return None;
        }
        if let (Some(recorded), Some(now)) = (value.get("bodies").and_then(Value::as_str), bodies)
            && recorded != now
        {
            return None;
        }
        serde_json::from_value(value.get("error")?.clone()).ok()
    }

    /// Branch `index` finished: the first failure journals the decision, then cancels.
    fn finished(&self, index: usize, result: &Result<Value, Error>, group: &CancellationToken) {
        let Err(error) = result else { return };
        // A branch stopped with the run, a dry run's miss, or a resume's refusal to pay a
        // re-keyed call again (the run stops; a resume that accepts it must run the call, not
        // replay the refusal) decides nothing.
        if matches!(error.code, ErrorCode::Cancelled | ErrorCode::JournalMiss | ErrorCode::RekeyRefused) {
            group.cancel();
            return;
        }
        // A branch that wrote what it shares decides nothing and cancels nobody: how far its
        // siblings got would then depend on timing (see [`first_violation`]).
        if error.code == ErrorCode::SandboxViolation {
            return;
        }
        if self.failed.compare_exchange(0, index + 1, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            // The decision holds what decides the fan-out's outcome: the error it raises.
            // Which branch failed first and which siblings were still unfinished are not
            // written (the branches' own entries say so, and a replay runs none of them), so
            // two runs in which several branches fail alike, or siblings finish at different
            // moments, journal the same decision.
            let mut entry =
                Entry::new(Seq(0), Kind::Decision, Status::Ok, self.scope.clone(), self.key, self.ordinal);
            let mut value = json!({ "type": FAIL_FAST_DECISION, "error": error });
            if let Some(bodies) = &self.bodies {
                value["bodies"] = Value::from(bodies.as_str());
            }
            entry.set_value(Some(&value));
            // Queued before the cancellation: the cancelled siblings' entries follow it in the
            // journal. A write failure latches and fails the run; the cancel happens anyway.
            let _ = self.run.append_one(entry, Durability::Deferred);
        }
        group.cancel();
    }

    /// The branch whose failure was decided, if any.
    fn failed(&self) -> Option<usize> {
        self.failed.load(Ordering::SeqCst).checked_sub(1)
    }
}

/// The error a fan-out raises when a branch wrote a value it shares with its siblings (the
/// script sandbox refuses the write where it happens, ending that branch with
/// `sandbox_violation`): the first such error in branch order, once every branch has ended.
///
/// Each branch's course is fixed by the journaled values it receives (what it captured is
/// read-only), so where a branch violates is fixed too, but when is not. Stopping its siblings
/// at that moment would leave in the journal whatever calls they happened to finish, and a
/// replay, which runs them again, would reach a different set. So a violation cancels nobody:
/// every sibling runs to its own end, as under `settle`, and the fan-out then fails the same
/// way, with the same journal, on every run and on replay. `None` when no branch violated, or
/// when the run is stopping (a cancellation, a dry run's miss, a refused re-key), which
/// explains the fan-out's end first.
fn first_violation(results: &[Result<Value, Error>]) -> Option<Error> {
    let stopping =
        |e: &Error| matches!(e.code, ErrorCode::Cancelled | ErrorCode::JournalMiss | ErrorCode::RekeyRefused);
    if results.iter().any(|r| r.as_ref().is_err_and(stopping)) {
        return None;
    }
    results.iter().find_map(|r| r.as_ref().err().filter(|e| e.code == ErrorCode::SandboxViolation).cloned())
}

/// Picks the error to raise for a failed fan-out: the first failure that is not a sibling's
/// cancellation, so the root cause surfaces.
fn root_cause(errors: impl Iterator<Item = Error>) -> Option<Error> {
    let errors: Vec<Error> = errors.collect();
    errors.iter().find(|e| e.code != ErrorCode::Cancelled).cloned().or_else(|| errors.into_iter().next())
}

impl Ctx {
    /// Runs the fan-out's futures with at most `concurrency` in flight, in source order,
    /// keeping the run's liveness count exact.
    ///
    /// The parent stops counting as live once its first batch of branches has started. A finishing
    /// branch with unstarted siblings hands its liveness to the next one instead of giving it
    /// up, so there is no instant in which the started branches all wait while a sibling is
    /// about to start; and when every started branch waits and no slot is free, the run
    /// correctly counts as blocked.
    async fn run_fanout<F>(&self, runs: Vec<F>, concurrency: Option<usize>) -> Vec<Result<Value, Error>>
    where
        F: Future<Output = Result<Value, Error>>,
    {
        #[derive(Default)]
        struct Handoff {
            started: usize,
            credits: usize,
        }
        let total = runs.len();
        let limit = concurrency.unwrap_or(total).max(1);
        let first_batch = limit.min(total);
        let handoff = std::sync::Mutex::new(Handoff::default());
        let run = &self.run;
        let handoff = &handoff;
        let tracked = runs.into_iter().map(|body| async move {
            let batch_started = {
                let mut h = handoff.lock().unwrap_or_else(|p| p.into_inner());
                h.started += 1;
                if h.credits > 0 {
                    h.credits -= 1;
                } else {
                    run.branch_started();
                }
                h.started == first_batch
            };
            if batch_started {
                run.parent_waits();
            }
            let result = body.await;
            let mut h = handoff.lock().unwrap_or_else(|p| p.into_inner());
            if h.started < total {
                h.credits += 1;
            } else {
                run.branch_done();
            }
            result
        });
        let results = futures::stream::iter(tracked).buffered(limit).collect::<Vec<_>>().await;
        let leftover = handoff.lock().unwrap_or_else(|p| p.into_inner()).credits;
        for _ in 0..leftover {
            self.run.branch_done();
        }
        self.run.join();
        results
    }

    /// The script threads each of `branches` branches running at once (the fan-out's size or
    /// its concurrency) may start: this scope's share divided evenly (for child workflows'
    /// script threads, and nested fan-outs in a dialect whose branches are not threads). A
    /// Rhai branch thread holds what its fan-out's grant gave it instead
    /// (`script::rhai::threads`).
    fn branch_threads(&self, branches: usize) -> usize {
        self.threads.unwrap_or(crate::script::run_sandbox::MAX_RUN_THREADS) / branches.max(1)
    }

    /// Runs branches concurrently and returns their values in source order.
    ///
    /// Without `settle`, the first failure cancels the siblings (their in-flight calls
    /// journal as `cancelled` and rerun on resume) and is raised. With `settle`, every
    /// branch runs to its end and each result is `{"status":"ok","value":..}` or
    /// `{"status":"error","error":{..}}`. A branch that wrote a value it shares
    /// (`sandbox_violation`) cancels nobody: once every branch has ended, the first such error
    /// in branch order is raised, whatever the options.
    ///
    /// # Errors
    /// The first branch failure (strict), a branch's `sandbox_violation`, or `cancelled` when
    /// the run stops.
    pub async fn parallel(&self, branches: Vec<Branch>, opts: ParallelOptions) -> Result<Vec<Value>, Error> {
        self.check_stopped()?;
        let site = self.labelled_site(opts.label.as_deref())?;
        site.as_ref().unwrap_or(self).parallel_here(branches, opts).await
    }

    async fn parallel_here(&self, branches: Vec<Branch>, opts: ParallelOptions) -> Result<Vec<Value>, Error> {
        self.pass_admission_turn().await;
        let site = self.next_parallel_site();
        if branches.is_empty() {
            return Ok(Vec::new());
        }
        let group = self.cancel.child_token();
        let abort_on_error = !opts.settle && opts.on_error != Some(OnError::Null);
        let total = branches.len();
        let fail_fast = if abort_on_error {
            let site_key = FailFast::key(site)?;
            let (ordinal, recorded) = self.run.decision(&self.scope, site_key)?;
            if let Some(entry) = recorded
                && let Some(error) = FailFast::replayed(&entry, opts.bodies.as_deref())
            {
                // The journal says how this fan-out ended: the failure it raised, with the
                // siblings it cancelled. Nothing in it runs again (never live), and what its
                // branches journaled is accounted for by the decision.
                for index in 0..total {
                    self.run.cover(&self.scope.child(&Segment::Par { site, branch: index as u32 }));
                }
                if error.code == ErrorCode::BudgetExhausted {
                    self.run.mark_exhausted();
                }
                return Err(error);
            }
            Some(Arc::new(FailFast::new(self, site_key, ordinal, opts.bodies.clone())))
        } else {
            None
        };
        let turns = Turns::new(total, self.account);
        let share = self.branch_threads(total.min(opts.concurrency.unwrap_or(total)));
        let runs: Vec<_> = branches
            .into_iter()
            .enumerate()
            .map(|(index, body)| {
                let mut ctx = self.nested(
                    &Segment::Par { site, branch: index as u32 },
                    group.child_token(),
                    self.account,
                );
                let ticket = turns.ticket(index);
                ctx.admission = Some(ticket.clone());
                ctx.threads = Some(share);
                let group = group.clone();
                let fail_fast = fail_fast.clone();
                async move {
                    let run = ctx.run.clone();
                    let span = (ctx.span, ctx.parent_span);
                    let at = u32::try_from(index).unwrap_or(u32::MAX);
                    run.emit(span, false, || EventKind::BranchStart {
                        index: at,
                        scope: ctx.scope.to_string(),
                    });
                    let result = body(ctx).await;
                    let status = if result.is_ok() { "ok" } else { "error" };
                    run.emit(span, false, || EventKind::BranchEnd { index: at, status: status.into() });
                    ticket.pass();
                    if let Some(fail_fast) = &fail_fast {
                        fail_fast.finished(index, &result, &group);
                    }
                    result
                }
            })
            .collect();
        let results = self.run_fanout(runs, opts.concurrency).await;
        if let Some(index) = fail_fast.as_ref().and_then(|f| f.failed())
            && let Some(Err(error)) = results.get(index)
        {
            // The failure the journal records is the one raised, whatever finished after it.
            return Err(error.clone());
        }
        if let Some(violation) = first_violation(&results) {
            return Err(violation);
        }
        if opts.settle {
            return Ok(results
                .into_iter()
                .map(|r| match r {
                    Ok(value) => json!({ "status": "ok", "value": value }),
                    Err(error) => json!({ "status": "error", "error": error }),
                })
                .collect());
        }
        if abort_on_error {
            if let Some(error) = root_cause(results.iter().filter_map(|r| r.as_ref().err().cloned())) {
                return Err(error);
            }
            return Ok(results.into_iter().map(|r| r.unwrap_or(Value::Null)).collect());
        }
        // on_error: null — a failed branch leaves null in its slot and is itemized.
        let mut values = Vec::with_capacity(results.len());
        for (index, result) in results.into_iter().enumerate() {
            match result {
                Ok(value) => values.push(value),
                Err(error) if matches!(error.code, ErrorCode::Cancelled | ErrorCode::JournalMiss) => {
                    return Err(error);
                }
                Err(error) => {
                    if error.code == ErrorCode::BudgetExhausted {
                        self.run.mark_exhausted();
                    }
                    self.run.record_dropped(Dropped {
                        scope: self.scope.child(&Segment::Par { site, branch: index as u32 }).to_string(),
                        kind: "branch".into(),
                        label: Some(format!("branch {index}")),
                        error,
                    });
                    values.push(Value::Null);
                }
            }
        }
        Ok(values)
    }

    /// Like [`Ctx::parallel`] over data: one branch per item, each given its item.
    ///
    /// # Errors
    /// As for [`Ctx::parallel`].
    pub async fn parallel_map<F, Fut>(
        &self,
        items: Vec<Value>,
        body: F,
        opts: ParallelOptions,
    ) -> Result<Vec<Value>, Error>
    where
        F: Fn(Ctx, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, Error>> + Send + 'static,
    {
        let body = Arc::new(body);
        let branches = items
            .into_iter()
            .map(|item| {
                let body = body.clone();
                branch(move |ctx| body(ctx, item))
            })
            .collect();
        self.parallel(branches, opts).await
    }

    /// Streams every item through 1–6 stages; each item moves to its next stage as soon as
    /// it finishes the last (no barrier between stages). Returns the final values in source
    /// order.
    ///
    /// # Errors
    /// `config` for 0 or more than 6 stages; with `on_item_error: Throw`, the first item
    /// failure (the other items are cancelled); `cancelled` when the run stops.
    pub async fn pipeline(
        &self,
        items: Vec<Value>,
        stages: Vec<Stage>,
        opts: PipelineOptions,
    ) -> Result<Vec<Value>, Error> {
        self.check_stopped()?;
        let site = self.labelled_site(opts.label.as_deref())?;
        site.as_ref().unwrap_or(self).pipeline_here(items, stages, opts).await
    }

    async fn pipeline_here(
        &self,
        items: Vec<Value>,
        stages: Vec<Stage>,
        opts: PipelineOptions,
    ) -> Result<Vec<Value>, Error> {
        self.pass_admission_turn().await;
        if stages.is_empty() || stages.len() > MAX_STAGES {
            return Err(Error::config(format!(
                "a pipeline takes 1 to {MAX_STAGES} stages, not {}",
                stages.len()
            )));
        }
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let throw = opts.on_item_error == OnItemError::Throw;
        let pipeline = self.next_pipeline();
        let fail_fast = if throw {
            let key = FailFast::pipeline_key(pipeline)?;
            let (ordinal, recorded) = self.run.decision(&self.scope, key)?;
            if let Some(entry) = recorded
                && let Some(error) = FailFast::replayed(&entry, opts.bodies.as_deref())
            {
                // As for `parallel`: the journaled failure is raised again, nothing runs.
                // Pipelines share their `pipe:s:i` scopes with the scope's other pipelines,
                // so the cover is as wide as those scopes.
                for index in 0..items.len() {
                    for stage in 0..stages.len() {
                        let segment = Segment::Pipe { stage: stage as u32, item: index as u32 };
                        self.run.cover(&self.scope.child(&segment));
                    }
                }
                if error.code == ErrorCode::BudgetExhausted {
                    self.run.mark_exhausted();
                }
                return Err(error);
            }
            Some(Arc::new(FailFast::new(self, key, ordinal, opts.bodies.clone())))
        } else {
            None
        };
        let group = self.cancel.child_token();
        let stages = Arc::new(stages);
        let turns = Turns::new(items.len(), self.account);
        let share = self.branch_threads(items.len().min(opts.concurrency.unwrap_or(items.len())));
        let runs: Vec<_> = items
            .into_iter()
            .enumerate()
            .map(|(index, item)| {
                let ticket = turns.ticket(index);
                let stages = stages.clone();
                let group = group.clone();
                let parent = self.clone();
                let fail_fast = fail_fast.clone();
                async move {
                    let mut value = item;
                    let mut result = Ok(());
                    for (stage_index, stage) in stages.iter().enumerate() {
                        let segment = Segment::Pipe { stage: stage_index as u32, item: index as u32 };
                        let mut ctx = parent.nested(&segment, group.child_token(), parent.account);
                        ctx.admission = Some(ticket.clone());
                        ctx.threads = Some(share);
                        match stage(ctx, value.clone()).await {
                            Ok(next) => value = next,
                            Err(error) => {
                                result = Err(error);
                                break;
                            }
                        }
                    }
                    ticket.pass();
                    let result = result.map(|()| value);
                    if let Some(fail_fast) = &fail_fast {
                        fail_fast.finished(index, &result, &group);
                    }
                    result
                }
            })
            .collect();
        let results = self.run_fanout(runs, opts.concurrency).await;
        if let Some(index) = fail_fast.as_ref().and_then(|f| f.failed())
            && let Some(Err(error)) = results.get(index)
        {
            return Err(error.clone());
        }
        if let Some(violation) = first_violation(&results) {
            return Err(violation);
        }
        match opts.on_item_error {
            OnItemError::Throw => {
                if let Some(error) = root_cause(results.iter().filter_map(|r| r.as_ref().err().cloned())) {
                    return Err(error);
                }
                Ok(results.into_iter().map(|r| r.unwrap_or(Value::Null)).collect())
            }
            OnItemError::Drop => Ok(results
                .into_iter()
                .enumerate()
                .filter_map(|(index, r)| match r {
                    Ok(value) => Some(value),
                    Err(error) => {
                        self.run.record_dropped(Dropped {
                            scope: self.scope.to_string(),
                            kind: "item".into(),
                            label: Some(format!("item {index}")),
                            error,
                        });
                        None
                    }
                })
                .collect()),
            OnItemError::Collect => {
                Ok(results.into_iter().map(|r| r.unwrap_or_else(|error| json!({ "error": error }))).collect())
            }
        }
    }
}

//! Queued runs and the workers that drive them.
//!
//! [`Engine::enqueue_script`] stores a run the way a start does (its script, arguments, budget,
//! routing and meta, status `queued`) and puts it in the store's [`RunQueue`]; it does not run
//! it. A [`Worker`] claims queued runs one at a time per free slot, drives each through the
//! engine's resume path (which runs a queued run from the top, and a run another worker left
//! from its journal, replaying what was paid), renews its claim while the run is driven, and
//! takes the run out of the queue when it settles or parks waiting for a person. A resolution
//! of a parked queued run puts it back (see [`requeue_resolved`]).
//!
//! The claim decides which worker drives a run; the run's own lease (taken by the resume)
//! fences every journal write, so a worker that lost its claim can never write over the
//! worker that took the run over.
//!
//! Cancelling from another process ([`Engine::cancel_run`]): a run nobody drives (queued and
//! unclaimed, parked, or left by a driver that died) is settled `cancelled` at once, under its
//! lease, with the settlement journaled. A run a worker claims is marked in the queue (durable);
//! each worker looks for marks on its claims every [`WorkerOptions::cancel_poll`] and cancels
//! the run through the engine's own path (in-flight calls severed and journaled, the run
//! settles `cancelled`), then carries on with other runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::dialect::Script;
use super::inputs::{ResumeOptions, RunOptions};
use super::options::ErrorPolicy;
use super::registry::{Engine, EngineInner};
use crate::error::{Error, ErrorCode};
use crate::journal::{self, Entry, Kind, ScopePath, Seq, Status};
use crate::store::{Claim, Lease, RunId, RunMeta, RunQueue, RunStatus};

/// The run-meta field that marks a run as the queue's: a resolution puts it back.
const QUEUED_FIELD: &str = "queued";

impl Engine {
    /// Queues a run of a script for a worker to drive: compiles it (lint errors reject it
    /// before anything is written), stores its source, arguments, budget and this engine's
    /// model routing with the run (status `queued`), and puts it in the store's queue.
    ///
    /// ```
    /// # fn main() -> Result<(), cairn::Error> {
    /// use cairn::{Engine, RunOptions, Script};
    /// let dir = tempfile::tempdir().unwrap();
    /// let opened = cairn::store::open(&format!("sqlite:{}", dir.path().join("c.db").display()))?;
    /// let engine = Engine::builder(opened.journal, opened.transcripts).build()?;
    /// let run = engine.enqueue_script(&Script::rhai("hello", "agent(\"hi\")"), serde_json::json!({}), RunOptions::default())?;
    /// assert_eq!(engine.journal_store().get_meta(&run)?.unwrap().status, cairn::RunStatus::Queued);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// `config` when the store keeps no queue, for invalid options (a bad budget, a deadline,
    /// a run id that exists) or an unknown dialect; `validation` when the script is rejected;
    /// the store's failure.
    pub fn enqueue_script(&self, script: &Script, args: Value, options: RunOptions) -> Result<RunId, Error> {
        let engine = &self.inner;
        let Some(queue) = engine.journal.queue() else {
            return Err(Error::config("this store keeps no run queue; use a sqlite or postgres store"));
        };
        if options.deadline_ms.is_some() {
            return Err(Error::config("a queued run takes no deadline: it starts when a worker claims it"));
        }
        let dialect = self.dialect(&script.dialect)?;
        dialect.prepare(self, &script.name, &script.source)?;
        let ceiling = super::inputs::validate_budget(options.budget_usd, engine.default_budget)?;
        let run_id = options.run_id.clone().unwrap_or_else(RunId::generate);
        let lease = super::lease::acquire(engine, &run_id)?;
        let stored =
            store_queued(engine, &run_id, script, dialect.name(), &args, &options, ceiling, lease.as_ref());
        super::lease::release(engine, lease.as_ref());
        stored?;
        queue.enqueue(&run_id)?;
        Ok(run_id)
    }
}

/// What [`Engine::cancel_run`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// Nobody was driving the run (queued and unclaimed, parked, or left by a driver that
    /// died): it is settled `cancelled` now, the settlement journaled.
    Cancelled,
    /// A worker claims the run: the request is durable in the queue, and that worker cancels
    /// the run when it next looks (within its `cancel_poll`, half a second by default).
    Requested,
    /// The run had settled already, with this status; nothing changed.
    Settled(RunStatus),
}

impl Engine {
    /// Cancels a stored run from any process sharing its store: at once when nobody drives it,
    /// through the driving worker when a queue worker does (see [`CancelOutcome`]).
    ///
    /// ```
    /// # fn main() -> Result<(), cairn::Error> {
    /// use cairn::{CancelOutcome, Engine, RunOptions, RunStatus, Script};
    /// let dir = tempfile::tempdir().unwrap();
    /// let opened = cairn::store::open(&format!("sqlite:{}", dir.path().join("c.db").display()))?;
    /// let engine = Engine::builder(opened.journal, opened.transcripts).build()?;
    /// let run = engine.enqueue_script(&Script::rhai("hello", "agent(\"hi\")"), serde_json::json!({}), RunOptions::default())?;
    /// assert_eq!(engine.cancel_run(&run)?, CancelOutcome::Cancelled);
    /// assert_eq!(engine.cancel_run(&run)?, CancelOutcome::Settled(RunStatus::Cancelled));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// `config` for an unknown run; `run_busy` when a process outside the run queue drives it
    /// (a `cairn run`: stop it there); the store's failure.
    pub fn cancel_run(&self, run: &RunId) -> Result<CancelOutcome, Error> {
        self.cancel_run_by(run, None)
    }

    /// [`Engine::cancel_run`] on behalf of a named requester (the service's token): its name
    /// is journaled as the `by` of the cancellation's settlement, by this process or by the
    /// worker that cancels the run.
    ///
    /// # Errors
    /// As [`Engine::cancel_run`].
    pub fn cancel_run_by(&self, run: &RunId, by: Option<&str>) -> Result<CancelOutcome, Error> {
        let engine = &self.inner;
        let Some(meta) = engine.journal.get_meta(run)? else {
            return Err(Error::config(format!("unknown run {run}")));
        };
        if is_settled(meta.status) {
            return Ok(CancelOutcome::Settled(meta.status));
        }
        let queue = engine.journal.queue();
        let mut tries = 0;
        loop {
            match super::lease::acquire(engine, run) {
                Ok(lease) => {
                    let outcome = cancel_undriven(engine, queue, run, by, lease.as_ref());
                    super::lease::release(engine, lease.as_ref());
                    return outcome;
                }
                Err(e) if e.code == ErrorCode::RunBusy => {
                    if let Some(queue) = queue
                        && request_cancel(engine, queue, run, by)?
                    {
                        return Ok(CancelOutcome::Requested);
                    }
                    // Not in the queue: its worker may have just taken it out (it parked, or
                    // settled) and not yet let go of its lease; look again, then give up.
                    tries += 1;
                    if tries == 3 {
                        return Err(e);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Cancels a run nobody drives (this process holds its lease), unless a worker's live claim
/// still holds it in the queue: then that worker is asked to.
fn cancel_undriven(
    engine: &EngineInner,
    queue: Option<&dyn RunQueue>,
    run: &RunId,
    by: Option<&str>,
    lease: Option<&Lease>,
) -> Result<CancelOutcome, Error> {
    let Some(mut meta) = engine.journal.get_meta(run)? else {
        return Err(Error::config(format!("unknown run {run}")));
    };
    if is_settled(meta.status) {
        return Ok(CancelOutcome::Settled(meta.status));
    }
    // A worker claimed it and is about to take its lease: it will see the request.
    if let Some(queue) = queue
        && !queue.withdraw(run)?
        && request_cancel(engine, queue, run, by)?
    {
        return Ok(CancelOutcome::Requested);
    }
    // A request left for a driver that parked the run before it saw it names its requester.
    let by = match by {
        Some(name) => Some(journal::intern(name)),
        None => super::actions::take_cancel_requester(engine, run),
    };
    settle_stored(engine, &mut meta, RunStatus::Cancelled, None, by, lease)?;
    Ok(CancelOutcome::Cancelled)
}

/// Asks the worker driving `run` to cancel it, leaving the requester's name for it first.
fn request_cancel(
    engine: &EngineInner,
    queue: &dyn RunQueue,
    run: &RunId,
    by: Option<&str>,
) -> Result<bool, Error> {
    super::actions::leave_cancel_requester(engine, run, by)?;
    Ok(queue.request_cancel(run)?)
}

/// Settles a run nobody drives (this process holds its lease): the settlement decision
/// (with `error`, `{code, message, where}`, when given) is journaled, then the meta follows.
fn settle_stored(
    engine: &EngineInner,
    meta: &mut RunMeta,
    status: RunStatus,
    error: Option<&Error>,
    by: Option<journal::Name>,
    lease: Option<&Lease>,
) -> Result<(), Error> {
    let run = &meta.run_id;
    let entries = journal::decode_all(&engine.journal.load(run)?)?;
    let identity = serde_json::json!({ "kind": "decision", "type": journal::SETTLE_DECISION });
    let key = journal::content_key(&identity).map_err(|e| Error::internal(e.to_string()))?;
    let mut entry = Entry::new(Seq(0), Kind::Decision, Status::Ok, ScopePath::root(), key, 0);
    let mut value = journal::settle_value(status);
    if let (Some(e), Some(map)) = (error, value.as_object_mut()) {
        map.insert(
            "error".into(),
            serde_json::json!({ "code": e.code, "message": e.message, "where": { "kind": "worker" } }),
        );
    }
    entry.set_value(Some(&value));
    entry.by = by;
    entry.seq = Seq(entries.last().map_or(1, |e| e.seq.0 + 1));
    entry.ts = Some(engine.clock.now_ms());
    engine.journal.append(run, &[journal::encode(&entry)?], lease)?;
    meta.status = status;
    meta.updated_at_ms = engine.clock.now_ms();
    engine.journal.put_meta(meta, lease)?;
    Ok(())
}

impl Engine {
    /// Settles `error`, with `error` journaled as the reason, a queued run no worker could
    /// drive (its workers lack a provider it needs, say), unless it settled meanwhile.
    ///
    /// # Errors
    /// `run_busy` when a driver holds it; the store's failure.
    pub(crate) fn settle_undrivable(&self, run: &RunId, error: &Error) -> Result<(), Error> {
        let engine = &self.inner;
        let lease = super::lease::acquire(engine, run)?;
        let outcome = (|| {
            let Some(mut meta) = engine.journal.get_meta(run)? else { return Ok(()) };
            if is_settled(meta.status) {
                return Ok(());
            }
            settle_stored(engine, &mut meta, RunStatus::Error, Some(error), None, lease.as_ref())
        })();
        super::lease::release(engine, lease.as_ref());
        outcome
    }
}

/// Writes a queued run's inputs and meta, under its lease.
#[allow(clippy::too_many_arguments)] // One call site; the parts of a start, spelled out.
fn store_queued(
    engine: &EngineInner,
    run_id: &RunId,
    script: &Script,
    dialect: &str,
    args: &Value,
    options: &RunOptions,
    ceiling: Option<crate::money::Money>,
    lease: Option<&crate::store::Lease>,
) -> Result<(), Error> {
    if let Some(existing) = engine.journal.get_meta(run_id)?
        && !is_reserved(&existing)
    {
        return Err(Error::config(format!("run {run_id} already exists; resume it instead")));
    }
    let args_canonical = journal::canonical_json(args).map_err(|e| Error::validation(e.to_string()))?;
    engine.transcripts.put(&super::inputs::args_ref(run_id), args_canonical.as_bytes())?;
    engine.transcripts.put(&super::inputs::source_ref(run_id), script.source.as_bytes())?;
    let mut extra = serde_json::Map::new();
    if options.policy == ErrorPolicy::Lenient || script.policy == ErrorPolicy::Lenient {
        extra.insert("policy".into(), Value::from("lenient"));
    }
    extra.insert(QUEUED_FIELD.into(), Value::Bool(true));
    let now = engine.clock.now_ms();
    let mut meta = RunMeta {
        run_id: run_id.clone(),
        status: RunStatus::Queued,
        name: Some(script.name.clone()),
        tags: options.tags.clone(),
        created_at_ms: now,
        updated_at_ms: now,
        hash_version: journal::HASH_VERSION,
        budget_ceiling: ceiling,
        dialect: Some(dialect.to_owned()),
        source_ref: Some(super::inputs::source_ref(run_id)),
        source_hash: Some(script.source_hash()),
        args_hash: Some(journal::content_key_of_canonical(&args_canonical).to_hex()),
        segments: 0,
        extra,
    };
    super::started::Routing::of(engine).store(&mut meta);
    if let Some(by) = &options.by {
        // Journaled before the meta makes the run claimable.
        let mut entry = super::actions::action_entry(super::actions::RunAction::Start, 0, by);
        let last = engine.journal.load(run_id)?.last().map(|e| e.seq());
        entry.seq = Seq(last.map_or(1, |seq| seq + 1));
        entry.ts = Some(now);
        engine.journal.append(run_id, &[journal::encode(&entry)?], lease)?;
    }
    engine.journal.put_meta(&meta, lease)?;
    Ok(())
}

/// The meta field that marks a run id reserved before its script exists (`cairn serve`
/// holds a planner goal's run id while the planner writes the script): `enqueue_script`
/// queues the script under a reserved id, replacing the reservation.
pub(crate) const RESERVED_FIELD: &str = "reserved";

/// Whether `meta` is a reservation still waiting for its script (queued, no source yet).
pub(crate) fn is_reserved(meta: &RunMeta) -> bool {
    meta.status == RunStatus::Queued
        && meta.source_ref.is_none()
        && meta.extra.get(RESERVED_FIELD) == Some(&Value::Bool(true))
}

/// Puts a parked queued run back in the queue once a resolution applied to it (or was left in
/// its inbox), so a worker continues it. Nothing for a run that is not the queue's, or not
/// parked (a run being driven applies its inbox itself).
///
/// # Errors
/// The store's failure (the resolution itself is durable by then).
pub(crate) fn requeue_resolved(engine: &EngineInner, run: &RunId) -> Result<(), Error> {
    let Some(queue) = engine.journal.queue() else { return Ok(()) };
    let Some(meta) = engine.journal.get_meta(run)? else { return Ok(()) };
    if meta.status == RunStatus::Suspended && meta.extra.get(QUEUED_FIELD) == Some(&Value::Bool(true)) {
        queue.enqueue(run)?;
    }
    Ok(())
}

/// How a [`Worker`] works.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// How many runs it drives at once.
    pub concurrency: usize,
    /// How long a claim lasts unrenewed: a worker that dies holds its runs this long before
    /// another worker takes them over. Renewed every third of it.
    pub claim_ttl: Duration,
    /// How long it waits before looking again when the queue has nothing ready.
    pub poll: Duration,
    /// How long a run another process still drives waits before it is tried again.
    pub busy_retry: Duration,
    /// Who claims: the owner written into claims (default: `worker pid N on HOST`).
    pub owner: String,
    /// How often it looks for requests (from other processes) to cancel the runs it drives.
    pub cancel_poll: Duration,
    /// How many claims a run that cannot be driven gets (a worker whose `cairn.toml` lacks the
    /// run's provider, say) before it is settled `error` with the reason. Between them the run
    /// waits in the queue, longer each time, for a worker that can drive it.
    pub max_attempts: u32,
}

impl Default for WorkerOptions {
    fn default() -> WorkerOptions {
        WorkerOptions {
            concurrency: 1,
            claim_ttl: Duration::from_secs(30),
            poll: Duration::from_millis(100),
            busy_retry: Duration::from_millis(500),
            owner: format!("worker {}", super::lease::owner()),
            cancel_poll: Duration::from_millis(500),
            max_attempts: 5,
        }
    }
}

/// What a worker did, counted when it stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct WorkerReport {
    /// Runs it drove to a settled status (`ok`, `error`, `cancelled`, `exhausted`).
    pub settled: u64,
    /// Runs it drove until they parked waiting for a person.
    pub suspended: u64,
    /// Claims it took over from a worker whose claim had expired.
    pub takeovers: u64,
    /// Claims it handed back because another process still drove the run.
    pub deferred: u64,
    /// Claims of runs that could not be driven (each logged: the run stays queued for
    /// another try, or after its last attempt is settled `error` with the reason).
    pub failed: u64,
}

/// Claims queued runs from the engine's store and drives them, `concurrency` at a time.
#[derive(Debug, Clone)]
pub struct Worker {
    engine: Engine,
    options: WorkerOptions,
}

/// How one claim ended.
enum Driven {
    Settled,
    Suspended,
    Deferred,
    Failed,
}

impl Worker {
    /// A worker over the engine's store.
    ///
    /// # Errors
    /// `config` when the store keeps no run queue.
    pub fn new(engine: Engine, mut options: WorkerOptions) -> Result<Worker, Error> {
        if engine.inner.journal.queue().is_none() {
            return Err(Error::config("this store keeps no run queue; use a sqlite or postgres store"));
        }
        options.concurrency = options.concurrency.max(1);
        Ok(Worker { engine, options })
    }

    /// Claims and drives runs until `shutdown` fires; then claims nothing more, finishes the
    /// runs in flight and returns what it did. A worker killed instead loses nothing: its
    /// claims expire and other workers resume its runs from their journals.
    pub async fn run_until(&self, shutdown: CancellationToken) -> WorkerReport {
        let slots = Arc::new(tokio::sync::Semaphore::new(self.options.concurrency));
        let mut tasks: JoinSet<Driven> = JoinSet::new();
        let mut report = WorkerReport::default();
        let driving = Driving::default();
        let watcher = tokio::spawn(watch_cancels(self.engine.clone(), self.options.clone(), driving.clone()));
        loop {
            while let Some(done) = tasks.try_join_next() {
                tally(&mut report, done);
            }
            let permit = tokio::select! {
                permit = slots.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
                _ = shutdown.cancelled() => break,
            };
            if shutdown.is_cancelled() {
                break;
            }
            let engine = self.engine.clone();
            let (owner, ttl) = (self.options.owner.clone(), self.options.claim_ttl);
            let claimed = tokio::task::spawn_blocking(move || match engine.inner.journal.queue() {
                Some(queue) => queue.claim(&owner, ttl),
                None => Ok(None),
            })
            .await;
            match claimed {
                Ok(Ok(Some(claim))) => {
                    if claim.takeover {
                        report.takeovers += 1;
                        tracing::info!(run = %claim.run_id, attempts = claim.attempts, "took over a run whose worker's claim expired");
                    }
                    let (engine, options) = (self.engine.clone(), self.options.clone());
                    let cancelled = driving.register(&claim.run_id);
                    let driving = driving.clone();
                    tasks.spawn(async move {
                        let driven = drive(&engine, &options, &claim, &cancelled).await;
                        driving.forget(&claim.run_id);
                        drop(permit);
                        driven
                    });
                }
                other => {
                    drop(permit);
                    if let Ok(Err(e)) | Err(e) =
                        other.map_err(|e| crate::store::Error::Postgres(e.to_string()))
                    {
                        tracing::warn!(error = %e, "claiming from the run queue failed");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(self.options.poll) => {}
                        _ = shutdown.cancelled() => break,
                        Some(done) = tasks.join_next(), if !tasks.is_empty() => tally(&mut report, done),
                    }
                }
            }
        }
        while let Some(done) = tasks.join_next().await {
            tally(&mut report, done);
        }
        watcher.abort();
        report
    }
}

/// The runs a worker drives, each with the token that cancels it.
#[derive(Debug, Clone, Default)]
struct Driving(Arc<Mutex<HashMap<RunId, CancellationToken>>>);

impl Driving {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, CancellationToken>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(&self, run: &RunId) -> CancellationToken {
        let token = CancellationToken::new();
        self.lock().insert(run.clone(), token.clone());
        token
    }

    fn forget(&self, run: &RunId) {
        self.lock().remove(run);
    }
}

/// Looks for cancel requests on the worker's claims every `cancel_poll` (one query for all of
/// them, none while it drives nothing) and fires the tokens of the runs asked to cancel.
async fn watch_cancels(engine: Engine, options: WorkerOptions, driving: Driving) {
    loop {
        tokio::time::sleep(options.cancel_poll).await;
        if driving.lock().is_empty() {
            continue;
        }
        let owner = options.owner.clone();
        match on_queue(&engine, move |queue| queue.cancel_requests(&owner)).await {
            Ok(asked) => {
                let driving = driving.lock();
                for run in asked {
                    if let Some(token) = driving.get(&run) {
                        token.cancel();
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not look for cancel requests"),
        }
    }
}

fn tally(report: &mut WorkerReport, done: Result<Driven, tokio::task::JoinError>) {
    match done {
        Ok(Driven::Settled) => report.settled += 1,
        Ok(Driven::Suspended) => report.suspended += 1,
        Ok(Driven::Deferred) => report.deferred += 1,
        Ok(Driven::Failed) | Err(_) => report.failed += 1,
    }
}

/// Runs a blocking queue operation off the async threads.
async fn on_queue<T: Send + 'static>(
    engine: &Engine,
    op: impl FnOnce(&dyn RunQueue) -> crate::store::Result<T> + Send + 'static,
) -> Result<T, Error> {
    let engine = engine.clone();
    tokio::task::spawn_blocking(move || match engine.inner.journal.queue() {
        Some(queue) => op(queue).map_err(Error::from),
        None => Err(Error::config("this store keeps no run queue")),
    })
    .await
    .map_err(|e| Error::internal(format!("a queue task failed: {e}")))?
}

/// Drives one claimed run to settlement or suspension, renewing the claim meanwhile.
async fn drive(
    engine: &Engine,
    options: &WorkerOptions,
    claim: &Claim,
    cancelled: &CancellationToken,
) -> Driven {
    let run = claim.run_id.clone();
    // Whether someone had asked to cancel the run when it left the queue.
    let finish = |claim: Claim| async move {
        match on_queue(engine, move |queue| queue.finish(&claim)).await {
            Ok(asked) => asked,
            Err(e) => {
                // Lost to a takeover (this worker stalled past its claim): the other worker
                // finishes it.
                tracing::warn!(run = %run, error = %e, "could not take a driven run out of the queue");
                false
            }
        }
    };
    // A run claimed before may have settled under an earlier claim that never finished. A
    // first claim is of a run that waits (and the resume reads its meta anyway).
    if claim.attempts > 1 {
        let meta = {
            let engine = engine.clone();
            let run = claim.run_id.clone();
            tokio::task::spawn_blocking(move || engine.inner.journal.get_meta(&run)).await
        };
        match meta {
            Ok(Ok(Some(meta))) if is_settled(meta.status) => {
                finish(claim.clone()).await;
                return Driven::Settled;
            }
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => {
                tracing::warn!(run = %claim.run_id, "a queued run has no meta record; dropping it from the queue");
                finish(claim.clone()).await;
                return Driven::Failed;
            }
            _ => return defer(engine, options, claim).await,
        }
    }
    let resumed = {
        let engine = engine.clone();
        let run = claim.run_id.clone();
        // Starting a resume reads and writes the store: off the async threads.
        tokio::task::spawn_blocking(move || engine.resume(&run, ResumeOptions::default())).await
    };
    let mut handle = match resumed {
        Ok(Ok(handle)) => handle,
        Ok(Err(e)) if e.code == ErrorCode::RunBusy => return defer(engine, options, claim).await,
        Ok(Err(e)) => return cannot_drive(engine, options, claim, e).await,
        Err(_) => return defer(engine, options, claim).await,
    };
    handle.release_events();
    let renew_every = (options.claim_ttl / 3).max(Duration::from_millis(10));
    let mut cancel_sent = false;
    // The run's agent deltas reach this process's listeners once one asks (none are built
    // before); a relay that lost its listeners ends, and the next listener starts another.
    let live = engine.inner.live.clone();
    let mut relaying: Option<tokio::task::JoinHandle<()>> = None;
    // Listeners in other processes (a `cairn serve` over the same store) get the deltas through
    // the store while one wants them and none listens here (`live_store`).
    let mut storing: Option<tokio::task::JoinHandle<()>> = None;
    let mut look = tokio::time::interval(super::live_store::WANTED_POLL);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + renew_every, renew_every);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let outcome = loop {
        let relay_idle = relaying.as_ref().is_none_or(tokio::task::JoinHandle::is_finished);
        let store_idle = storing.as_ref().is_none_or(tokio::task::JoinHandle::is_finished);
        tokio::select! {
            outcome = handle.wait() => break outcome,
            () = live.wanted(&claim.run_id), if relay_idle => {
                relaying = Some(tokio::spawn(super::live::relay(live.clone(), claim.run_id.clone(), handle.events())));
            }
            _ = look.tick(), if store_idle => {
                if live.listened(&claim.run_id) {
                    continue;
                }
                let (store, run, now) =
                    (engine.inner.transcripts.clone(), claim.run_id.clone(), engine.inner.clock.now_ms());
                let wanted =
                    tokio::task::spawn_blocking(move || super::live_store::wanted(store.as_ref(), &run, now)).await;
                if matches!(wanted, Ok(true)) {
                    storing = Some(tokio::spawn(super::live_store::relay_to_store(
                        engine.inner.transcripts.clone(),
                        engine.inner.clock.clone(),
                        claim.run_id.clone(),
                        handle.events(),
                    )));
                }
            }
            _ = cancelled.cancelled(), if !cancel_sent => {
                tracing::info!(run = %claim.run_id, "cancelling a run at another process's request");
                handle.cancel();
                cancel_sent = true;
            }
            _ = renew.tick() => {
                let (held, ttl) = (claim.clone(), options.claim_ttl);
                if let Err(e) = on_queue(engine, move |queue| queue.renew(&held, ttl)).await {
                    tracing::warn!(run = %claim.run_id, error = %e, "could not renew a claim");
                }
            }
        }
    };
    match outcome {
        // The store failed under the run (an outage, a restart): it is driven again from its
        // journal, which holds everything it paid for, once the store answers.
        Ok(outcome)
            if outcome.status == RunStatus::Error
                && outcome.error.as_ref().is_some_and(is_store_failure)
                && claim.attempts < options.max_attempts.saturating_mul(4) =>
        {
            tracing::warn!(run = %claim.run_id, attempt = claim.attempts, error = ?outcome.error.as_ref().map(|e| &e.message), "the store failed under a run: it is driven again");
            retry_later(engine, options, claim).await
        }
        // The outcome is not durable (the settlement could not be written): the run is
        // driven again, never left `running` out of the queue.
        Ok(outcome)
            if claim.attempts < options.max_attempts.saturating_mul(4)
                && outcome.error.as_ref().is_none_or(|e| e.code != ErrorCode::RekeyRefused)
                && !durably(engine, &claim.run_id, outcome.status).await =>
        {
            tracing::warn!(run = %claim.run_id, status = %outcome.status, "a run's outcome did not reach the store: it is driven again");
            retry_later(engine, options, claim).await
        }

        Ok(outcome)
            if outcome.status == RunStatus::Suspended
                && !cancelled.is_cancelled()
                && outcome.pending.iter().any(|p| p.deadline_ms.is_some()) =>
        {
            // Parked until its earliest deadline: it stays in the queue, unclaimed, ready then
            // (a resolution before it makes it ready at once), across restarts.
            let deadline = outcome.pending.iter().filter_map(|p| p.deadline_ms).min().unwrap_or(0);
            let wait = u64::try_from(deadline.saturating_sub(engine.inner.clock.now_ms())).unwrap_or(0);
            let (held, delay) = (claim.clone(), Duration::from_millis(wait));
            if let Err(e) = on_queue(engine, move |queue| queue.defer(&held, delay)).await {
                tracing::warn!(run = %claim.run_id, error = %e, "could not park a run until its deadline");
            }
            // A resolution left for this driver as it parked waits for nobody: ready it now.
            requeue_if_resolved(engine, &claim.run_id).await;
            Driven::Suspended
        }
        Ok(outcome) if outcome.status == RunStatus::Suspended => {
            let asked = finish(claim.clone()).await || cancelled.is_cancelled();
            if asked {
                // Asked to cancel as it parked: nobody drives it now, so it is cancelled here.
                let (engine, run) = (engine.clone(), claim.run_id.clone());
                let cancelled = tokio::task::spawn_blocking(move || engine.cancel_run(&run)).await;
                if let Ok(Err(e)) = cancelled {
                    tracing::warn!(run = %claim.run_id, error = %e, "could not cancel a parked run as asked");
                }
                return Driven::Settled;
            }
            // A resolution left for this driver as it parked the run would wait for nobody:
            // the resolver saw the run driven. Checked after the run left the queue, so either
            // this sees it or the resolver sees the run parked and puts it back itself.
            requeue_if_resolved(engine, &claim.run_id).await;
            Driven::Suspended
        }
        Ok(outcome) if is_settled(outcome.status) => {
            finish(claim.clone()).await;
            Driven::Settled
        }
        Ok(_) | Err(_) => defer(engine, options, claim).await,
    }
}

/// Hands a claim back for a later try.
async fn defer(engine: &Engine, options: &WorkerOptions, claim: &Claim) -> Driven {
    defer_for(engine, claim, options.busy_retry).await
}

/// Hands a claim back for a try after `delay`. When even that fails (the store is down), the
/// claim lapses at its expiry and the run is claimable again: nothing is lost either way.
async fn defer_for(engine: &Engine, claim: &Claim, delay: Duration) -> Driven {
    let held = claim.clone();
    if let Err(e) = on_queue(engine, move |queue| queue.defer(&held, delay)).await {
        tracing::warn!(run = %claim.run_id, error = %e, "could not hand a claim back; it lapses at its expiry");
    }
    Driven::Deferred
}

/// Hands a claim back for a try later the more claims the run has had (`busy_retry`
/// doubled per claim, at most 30 s).
async fn retry_later(engine: &Engine, options: &WorkerOptions, claim: &Claim) -> Driven {
    let doublings = claim.attempts.saturating_sub(1).min(10);
    let delay = options.busy_retry.saturating_mul(1 << doublings).min(Duration::from_secs(30));
    defer_for(engine, claim, delay).await
}

/// A run this worker could not start: left in the queue for a later claim (this worker's or
/// one configured to drive it) until it has had `max_attempts`, then settled `error` with the
/// reason journaled. A store failure is never the run's fault: it is only retried.
async fn cannot_drive(engine: &Engine, options: &WorkerOptions, claim: &Claim, error: Error) -> Driven {
    let run = &claim.run_id;
    if is_store_failure(&error) || claim.attempts < options.max_attempts {
        tracing::warn!(run = %run, attempt = claim.attempts, max_attempts = options.max_attempts, error = %error, "a queued run could not be driven; it stays queued for another try");
        retry_later(engine, options, claim).await;
        return Driven::Failed;
    }
    tracing::error!(run = %run, attempts = claim.attempts, error = %error, "a queued run could not be driven by any claim: settled error");
    let reason = Error::new(
        error.code,
        format!("no worker could drive the run in {} attempts: {}", claim.attempts, error.message),
    );
    let settled = {
        let (engine, run) = (engine.clone(), run.clone());
        tokio::task::spawn_blocking(move || engine.settle_undrivable(&run, &reason)).await
    };
    match settled {
        Ok(Ok(())) => {
            let held = claim.clone();
            if let Err(e) = on_queue(engine, move |queue| queue.finish(&held).map(drop)).await {
                tracing::warn!(run = %run, error = %e, "could not take a settled run out of the queue");
            }
        }
        Ok(Err(e)) => {
            tracing::warn!(run = %run, error = %e, "could not settle a run no worker can drive; it stays queued");
            retry_later(engine, options, claim).await;
        }
        Err(_) => {
            retry_later(engine, options, claim).await;
        }
    }
    Driven::Failed
}

/// Whether the store holds `status` for the run now (`false` when it cannot be read).
async fn durably(engine: &Engine, run: &RunId, status: RunStatus) -> bool {
    let (engine, run) = (engine.clone(), run.clone());
    matches!(
        tokio::task::spawn_blocking(move || engine.inner.journal.get_meta(&run)).await,
        Ok(Ok(Some(meta))) if meta.status == status
    )
}

/// Whether an error is the store's (unreachable, restarting, out of space), not the run's.
fn is_store_failure(error: &Error) -> bool {
    error.code == ErrorCode::StoreIo
        || (error.code == ErrorCode::Internal
            && ["postgres failed", "sqlite failed", "store i/o failed", "no connection to the store"]
                .iter()
                .any(|m| error.message.contains(m)))
}

fn is_settled(status: RunStatus) -> bool {
    matches!(status, RunStatus::Ok | RunStatus::Error | RunStatus::Cancelled | RunStatus::Exhausted)
}

/// Puts `run` back in the queue when a resolution waits in its inbox: one left for the driver
/// that just parked it would otherwise wait for nobody (the resolver saw the run driven).
async fn requeue_if_resolved(engine: &Engine, run: &RunId) {
    let (engine, run_id) = (engine.clone(), run.clone());
    let requeued = tokio::task::spawn_blocking(move || {
        let prefix = format!("{run_id}/inbox/");
        let waiting = engine.inner.transcripts.list(&run_id)?.iter().any(|r| r.starts_with(&prefix));
        if waiting && let Some(queue) = engine.inner.journal.queue() {
            queue.enqueue(&run_id)?;
        }
        Ok::<_, Error>(())
    })
    .await;
    if let Ok(Err(e)) = requeued {
        tracing::warn!(run = %run, error = %e, "could not put a resolved parked run back in the queue");
    }
}

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

use std::time::Duration;

use serde_json::Value;

use super::dialect::Script;
use super::inputs::RunOptions;
use super::options::ErrorPolicy;
use super::registry::{Engine, EngineInner};
use crate::error::{Error, ErrorCode};
use crate::journal::{self, Entry, Kind, ScopePath, Seq, Status};
use crate::store::{Lease, RunId, RunMeta, RunQueue, RunStatus};

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
    /// let engine = Engine::builder_with_stores(opened.journal, opened.transcripts).build()?;
    /// let run = engine.enqueue_script(&Script::rhai("hello", "agent(\"hi\")"), serde_json::json!({}), RunOptions::default())?;
    /// assert_eq!(engine.journal_store().get_meta(&run)?.unwrap().status, cairn::RunStatus::Queued);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// `config` when the store keeps no queue, for invalid options (a bad budget, a deadline,
    /// a run id that exists) or an unknown dialect; `validation` when the script is rejected;
    /// `run_busy` while another process holds the run id's lease (a submission of the same id);
    /// `store_io` when the store took so long to write the run that its submission's lease
    /// lapsed (nothing queued: submit it again); the store's failure.
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
        // Sized for the submission, not for a driver (whose lease a thread renews): under a
        // short driver lease and a loaded machine, the writes below outlasted it and the fence
        // refused a fresh submission (answered "run already exists" by the service).
        let ttl = engine.lease_ttl.max(super::lease::SUBMISSION_LEASE_TTL);
        let lease = super::lease::acquire_for(engine, &run_id, ttl)?;
        let stored =
            store_queued(engine, &run_id, script, dialect.name(), &args, &options, ceiling, lease.as_ref());
        super::lease::release(engine, lease.as_ref());
        stored.map_err(|e| lapsed_submission(e, &run_id, ttl))?;
        queue.enqueue(&run_id)?;
        Ok(run_id)
    }
}

/// A submission's write the store refused under the submission's own lease: the lease lapsed
/// while the store took longer than its ttl to write the run (its run id was free when the
/// lease was taken). Nothing is queued; that is the store's slowness, `store_io`, to try again,
/// not a run that exists (`run_busy` is kept for a lease another submission holds, refused
/// before anything is written).
fn lapsed_submission(error: Error, run_id: &RunId, ttl: Duration) -> Error {
    if error.code != ErrorCode::RunBusy {
        return error;
    }
    Error::new(
        ErrorCode::StoreIo,
        format!(
            "the store took longer than the submission's lease ({} s) to write run {run_id}, so it \
             was not queued; submit it again ({})",
            ttl.as_secs().max(1),
            error.message
        ),
    )
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
    /// let engine = Engine::builder_with_stores(opened.journal, opened.transcripts).build()?;
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
    let last = crate::store::last_seq(engine.journal.as_ref(), run)?;
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
    entry.seq = Seq(last + 1);
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
        entry.seq = Seq(crate::store::last_seq(engine.journal.as_ref(), run_id)? + 1);
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

pub(super) fn is_settled(status: RunStatus) -> bool {
    matches!(status, RunStatus::Ok | RunStatus::Error | RunStatus::Cancelled | RunStatus::Exhausted)
}

//! `RunState`: the one owner of a run's state in this process, shared by every `Ctx` of the
//! segment: the journal index (what replays), the journal writer, the budget, the scheduler's
//! slots, events, liveness and external waits, why the run stopped, and its lease. Everything
//! else changes run state through this interface: the verbs as they match and journal calls,
//! the lifecycle (`lifecycle.rs`) as it starts the segment, keeps its lease and settles it
//! (`settle.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use serde_json::Value;
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;

use super::budget::Budget;
use super::events::{EventKind, EventLog};
use super::lease;
use super::liveness::{AllBlocked, Liveness};
use super::options::ErrorPolicy;
use super::outcome::{Dropped, Pending};
use super::registry::EngineInner;
use super::rekeys::Rekeys;
use super::resolution::{check_resolution, resolution_entry};
use super::stored::StoredEntries;
use super::summary::Summary;
use super::writer::JournalWriter;
// `admission.rs` names `Durability` here; it moves with the agent call's room (#23).
pub(crate) use super::writer::Durability;
use crate::error::{Error, ErrorCode};
use crate::journal::{self, Candidate, ContentKey, Entry, Match, Replay, ScopePath, Seq};
use crate::money::Money;
use crate::store::{Lease, RunId};

/// The state one run shares across every `Ctx` of it.
#[derive(Debug)]
pub(crate) struct RunState {
    pub(crate) engine: Arc<EngineInner>,
    pub(crate) run_id: RunId,
    pub(crate) events: Arc<EventLog>,
    /// Whether turn events carry message content (an observer asked for it).
    pub(crate) content_events: bool,
    /// The loaded journal as calls match it: cursors, consumed records, resolutions.
    replay: Mutex<Replay>,
    /// The journal's entries, read back when a matched call is served.
    pub(crate) stored: StoredEntries,
    /// The journal's write side: seqs, the group-commit queue, the latch after a failed write.
    pub(super) writer: Arc<JournalWriter>,
    pub(crate) budget: Arc<Budget>,
    /// Concurrent model calls of this run.
    pub(crate) model_slots: Arc<Semaphore>,
    /// Concurrent model calls per provider, where limited.
    pub(crate) provider_slots: HashMap<String, Arc<Semaphore>>,
    /// Agent dispatches so far, over the run's whole life.
    pub(crate) spawns: AtomicU32,
    /// Fired by `cancel()`, the deadline, or a suspension; every call watches it.
    pub(crate) cancel: CancellationToken,
    /// Why `cancel` fired.
    stop: Mutex<Option<Stop>>,
    /// Replay-strict: any would-be-live call fails with `journal_miss`.
    pub(crate) dry_run: bool,
    /// With `dry_run`: a journaled failure, limit or cancellation is served as it was.
    pub(crate) reproduce: bool,
    /// The run as it stood before this segment began (a refused re-key leaves it so).
    pub(super) before: Option<super::before::Before>,
    /// Set once admission, a guard or a cut stops work for lack of budget.
    pub(crate) exhausted: AtomicBool,
    /// Set once the script-time limit stopped the script (`script_clock`).
    pub(super) script_time_tripped: AtomicBool,
    /// The bounds every script of the segment shares, child workflows' included.
    pub(super) sandbox: Arc<crate::script::run_sandbox::RunSandbox>,
    dropped: Mutex<Vec<Dropped>>,
    /// Threads of control that can make progress, and the open external waits.
    liveness: Liveness,
    rng: Mutex<ChaCha8Rng>,
    next_span: AtomicU64,
    /// This segment's base for event seqs and span ids: segment `k` counts from `k << 32`, so
    /// both stay unique and increasing across the run's segments.
    pub(super) span_base: u64,
    pub(crate) policy: ErrorPolicy,
    /// The run's lease, when the store grants leases: every write of this segment is fenced
    /// with it.
    pub(super) lease: Option<Lease>,
    /// Stops the thread that renews the lease and the task that drains the inbox.
    keeper: lease::Keeper,
    /// Whether re-keyed calls may run, and the ones refused.
    pub(crate) rekeys: Rekeys,
    /// How far ahead a wait's deadline may lie for the run to stay live, holding its timer,
    /// when every branch waits (zero: it suspends).
    hold_timers: Duration,
    /// What the inspector shows of the segment's settled agent calls (their turns), on its way
    /// to the store in batches.
    pub(crate) call_records: Arc<super::call_records::CallRecords>,
}

/// Why a run stopped before its workflow returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    Cancelled,
    /// A resume refused to re-key a completed call.
    Refused,
    Deadline,
    Suspended,
    /// The lease lapsed or was taken (`RunState::lease_lost`).
    LeaseLost,
}

/// What one segment of a run starts from.
pub(super) struct SegmentStart {
    /// The folds of the journal so far (empty for a fresh run).
    pub(super) summary: Summary,
    pub(super) replay: Replay,
    pub(super) ceiling: Option<Money>,
    pub(super) spent: Money,
    /// The checkpointed turns of calls a crashed segment left unsettled, by checkpoint ref:
    /// spent before anything runs (`carry::unsettled`).
    pub(super) carried: Vec<(String, Money)>,
    pub(super) spawns: u32,
    pub(super) dry_run: bool,
    pub(super) reproduce: bool,
    pub(super) before: Option<super::before::Before>,
    pub(super) policy: ErrorPolicy,
    pub(super) deadline_ms: Option<i64>,
    pub(super) resumed: bool,
    /// How many segments ran before this one.
    pub(super) index: u32,
    /// The run's lease, held for this segment.
    pub(super) lease: Option<Lease>,
    /// Renews the lease since it was taken (`lease::Keeper::start`).
    pub(super) keeper: lease::Keeper,
    /// Re-keyed calls run live without asking.
    pub(super) accept_rekey: bool,
    /// See `RunState::hold_timers`.
    pub(super) hold_timers: Duration,
}

/// How often a driver with open waits looks for resolutions left in its inbox.
const INBOX_POLL: Duration = Duration::from_millis(200);

/// Where segment `index`'s event seqs and span ids start.
fn segment_base(index: u32) -> u64 {
    u64::from(index) << 32
}

impl RunState {
    /// The state of a segment about to run.
    pub(super) fn new(engine: Arc<EngineInner>, run_id: RunId, segment: SegmentStart) -> Arc<RunState> {
        let seed = engine.seed.unwrap_or_else(|| {
            let digest = journal::content_key(&serde_json::json!([run_id.as_str(), engine.clock.now_ms()]));
            digest.map_or(0, |k| u64::from_le_bytes(k.as_bytes()[..8].try_into().unwrap_or([0; 8])))
        });
        let provider_slots = engine
            .provider_limits
            .iter()
            .map(|(name, &n)| (name.clone(), Arc::new(Semaphore::new(n))))
            .collect();
        let writer = JournalWriter::new(
            run_id.clone(),
            engine.journal.clone(),
            engine.clock.clone(),
            segment.lease.clone(),
            segment.dry_run,
            segment.summary,
        );
        let stored = StoredEntries::new(engine.journal.clone(), run_id.clone());
        let events = EventLog::new(run_id.clone(), segment_base(segment.index));
        // Observers subscribe before the first event: their streams are gapless.
        for observer in &engine.observers {
            observer.segment_started(&run_id, events.subscribe());
        }
        let content_events = engine.observers.iter().any(|o| o.wants_content());
        let call_records = super::call_records::CallRecords::new(
            run_id.clone(),
            engine.transcripts.clone(),
            engine.clock.clone(),
        );
        Arc::new(RunState {
            events,
            content_events,
            run_id,
            replay: Mutex::new(segment.replay),
            stored,
            writer,
            budget: Budget::resumed(segment.ceiling, segment.spent, segment.carried),
            model_slots: Arc::new(Semaphore::new(engine.max_concurrency)),
            provider_slots,
            spawns: AtomicU32::new(segment.spawns),
            cancel: CancellationToken::new(),
            stop: Mutex::new(None),
            dry_run: segment.dry_run,
            reproduce: segment.dry_run && segment.reproduce,
            before: segment.before,
            exhausted: AtomicBool::new(false),
            script_time_tripped: AtomicBool::new(false),
            sandbox: Arc::new(crate::script::run_sandbox::RunSandbox::new()),
            dropped: Mutex::new(Vec::new()),
            liveness: Liveness::new(),
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed)),
            next_span: AtomicU64::new(segment_base(segment.index) + 1),
            span_base: segment_base(segment.index),
            policy: segment.policy,
            lease: segment.lease,
            keeper: segment.keeper,
            rekeys: Rekeys::new(segment.accept_rekey),
            hold_timers: segment.hold_timers,
            call_records,
            engine,
        })
    }

    pub(super) fn lock_replay(&self) -> MutexGuard<'_, Replay> {
        self.replay.lock().unwrap_or_else(|p| p.into_inner())
    }

    // ---- matching ------------------------------------------------------------------------

    /// Matches a live call against the loaded journal; what it serves is read from the store.
    ///
    /// # Errors
    /// `internal` when the store cannot give back the journaled entry.
    pub(crate) fn lookup(&self, scope: &ScopePath, key: ContentKey) -> Result<Match, Error> {
        let matched = {
            let mut replay = self.lock_replay();
            let matched = replay.lookup(scope, key);
            if self.reproduce
                && matches!(matched.outcome, crate::journal::Outcome::Rerun { previous: Some(_), .. })
            {
                // Reproducing the settled run: the journaled outcome is served, not rerun.
                replay.count_rerun_as_replayed();
            }
            matched
        };
        self.stored.serve(matched)
    }

    /// The journaled decision at a site, if it still holds (see [`Replay::decision`]), and
    /// the ordinal a new one takes.
    ///
    /// # Errors
    /// As [`RunState::lookup`].
    pub(crate) fn decision(
        &self,
        scope: &ScopePath,
        key: ContentKey,
    ) -> Result<(u32, Option<Arc<Entry>>), Error> {
        let (ordinal, pointer) = self.lock_replay().decision(scope, key);
        let entry = match pointer {
            Some(pointer) => Some(self.stored.read(pointer)?),
            None => None,
        };
        Ok((ordinal, entry))
    }

    /// A journaled fact at a site, matched like a call: a decision found this way holds
    /// whatever segments settled after it (the orchestrator's, whose checkpointed
    /// conversation names what it decided). Finding nothing is not counted as a miss.
    ///
    /// # Errors
    /// As [`RunState::lookup`].
    pub(crate) fn lookup_fact(&self, scope: &ScopePath, key: ContentKey) -> Result<Match, Error> {
        let matched = {
            let mut replay = self.lock_replay();
            let matched = replay.lookup(scope, key);
            if matches!(matched.outcome, crate::journal::Outcome::Live) {
                replay.uncount_miss();
            }
            matched
        };
        self.stored.serve(matched)
    }

    /// Accounts for the tool approvals of a replayed agent call (see [`Replay::cover_approvals`]).
    pub(crate) fn cover_approvals(&self, scope: &ScopePath, call_key: ContentKey) {
        self.lock_replay().cover_approvals(scope, call_key);
    }

    /// Accounts for the journaled records under `scope` without matching them (the body of a
    /// call that replayed whole).
    pub(crate) fn cover(&self, scope: &ScopePath) {
        self.lock_replay().cover(scope);
    }

    /// The journaled calls of `scope` from its cursor on that no live call has consumed and
    /// `wanted` accepts (see [`Replay::unconsumed_at_cursor`]).
    pub(crate) fn unconsumed_at_cursor(
        &self,
        scope: &ScopePath,
        wanted: impl Fn(&Candidate) -> bool,
    ) -> Vec<Candidate> {
        self.lock_replay().unconsumed_at_cursor(scope, wanted)
    }

    /// Stops the run because a resume refused to re-key a completed call.
    pub(crate) fn refuse_rekey(&self) {
        // The refused call was counted as a miss, but it never ran.
        self.lock_replay().uncount_miss();
        self.stop_with(Stop::Refused);
    }

    // ---- the journal ---------------------------------------------------------------------

    /// Appends entries (seqs and timestamps assigned here): see [`JournalWriter::append`].
    ///
    /// # Errors
    /// `journal_miss` in a dry run (nothing is written); `internal` when the store fails (now
    /// or in an earlier write of this segment).
    pub(crate) fn append(
        &self,
        entries: Vec<Entry>,
        durability: Durability,
    ) -> Result<Vec<Arc<Entry>>, Error> {
        self.writer.append(entries, durability)
    }

    /// An awaited append that waits without holding a thread: while another writer is busy,
    /// the task yields, so concurrent branches keep queueing and share the next write.
    ///
    /// # Errors
    /// As [`RunState::append`].
    pub(crate) async fn append_async(&self, entries: Vec<Entry>) -> Result<Vec<Arc<Entry>>, Error> {
        self.writer.append_async(entries, || self.liveness.live() > 1).await
    }

    /// Blocks until every entry queued so far is durable.
    ///
    /// # Errors
    /// The segment's first failed write, if any.
    pub(crate) fn flush(&self) -> Result<(), Error> {
        self.writer.flush()
    }

    /// Waits, without holding a thread, until every entry queued so far is durable: what an
    /// unpaid effect recorded (a `uuid()`, a step's result) must not be lost once an effect
    /// outside the run (a host call, a child workflow) may have acted on it.
    ///
    /// # Errors
    /// The segment's first failed write, if any.
    pub(crate) async fn flush_async(&self) -> Result<(), Error> {
        self.writer.flush_async(|| self.liveness.live() > 1).await
    }

    /// Appends one entry, awaited without holding a thread.
    pub(crate) async fn append_one_async(&self, entry: Entry) -> Result<Arc<Entry>, Error> {
        let mut written = self.append_async(vec![entry]).await?;
        written.pop().ok_or_else(|| Error::internal("append returned nothing"))
    }

    /// Appends one entry.
    pub(crate) fn append_one(&self, entry: Entry, durability: Durability) -> Result<Arc<Entry>, Error> {
        let mut written = self.append(vec![entry], durability)?;
        written.pop().ok_or_else(|| Error::internal("append returned nothing"))
    }

    /// The span of the run itself in this segment (the root context's).
    pub(crate) fn root_span(&self) -> u64 {
        self.span_base
    }

    pub(crate) fn new_span(&self) -> u64 {
        self.next_span.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.engine.clock.now_ms()
    }

    /// Emits an event, built only when someone can read it.
    pub(crate) fn emit(&self, span: (u64, Option<u64>), replayed: bool, kind: impl FnOnce() -> EventKind) {
        if self.events.observed() {
            self.events.emit(self.now_ms(), span, replayed, kind());
        }
    }

    pub(crate) fn emit_budget(&self, span: (u64, Option<u64>)) {
        let root = self.budget.root();
        self.emit(span, false, || EventKind::BudgetUpdate {
            spent: self.budget.spent(root),
            remaining: self.budget.remaining(root),
        });
    }

    pub(crate) fn record_dropped(&self, dropped: Dropped) {
        self.dropped.lock().unwrap_or_else(|p| p.into_inner()).push(dropped);
    }

    /// The work this segment dropped, taken once it settles.
    pub(super) fn take_dropped(&self) -> Vec<Dropped> {
        std::mem::take(&mut *self.dropped.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub(crate) fn mark_exhausted(&self) {
        self.exhausted.store(true, Ordering::SeqCst);
    }

    pub(crate) fn next_random_u64(&self) -> u64 {
        use rand_core::Rng;
        self.rng.lock().unwrap_or_else(|p| p.into_inner()).next_u64()
    }

    /// Cancels the run at the user's request.
    pub(crate) fn cancel(&self) {
        self.stop_with(Stop::Cancelled);
    }

    pub(super) fn stop_with(&self, stop: Stop) {
        let mut slot = self.stop.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(stop);
        }
        drop(slot);
        self.cancel.cancel();
    }

    pub(super) fn stop_reason(&self) -> Option<Stop> {
        *self.stop.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The error a call observes when the run was stopped under it.
    pub(crate) fn stopped_error(&self) -> Error {
        match self.stop_reason() {
            Some(Stop::Deadline) => Error::new(ErrorCode::Cancelled, "the run's deadline passed"),
            Some(Stop::Suspended) => Error::new(ErrorCode::Cancelled, "the run suspended on external input"),
            Some(Stop::Refused) => Error::new(
                ErrorCode::Cancelled,
                "the resume stopped: a call's identity changed since it was paid",
            ),
            Some(Stop::LeaseLost) => self.keeper.loss().unwrap_or_else(|| {
                Error::new(
                    ErrorCode::RunBusy,
                    format!("run {} lost its lease, so this process stopped driving it", self.run_id),
                )
            }),
            _ => Error::new(ErrorCode::Cancelled, "the run was cancelled"),
        }
    }

    // ---- liveness and external waits ---------------------------------------------------
    // The run suspends when every thread of control that could make progress is parked on
    // external input, instead of hanging.

    fn suspend_if(&self, all_blocked: AllBlocked) {
        if all_blocked.0 && !self.holds_timer() {
            self.stop_with(Stop::Suspended);
        }
    }

    /// Whether the run stays live while every branch waits, because a wait's deadline comes
    /// within the segment's hold (`RunOptions::hold_timers`): its timer then wakes it here.
    fn holds_timer(&self) -> bool {
        let hold = i64::try_from(self.hold_timers.as_millis()).unwrap_or(i64::MAX);
        hold > 0
            && self
                .liveness
                .next_deadline()
                .is_some_and(|deadline| deadline.saturating_sub(self.now_ms()) <= hold)
    }

    /// A branch of a fan-out started.
    pub(crate) fn branch_started(&self) {
        self.suspend_if(self.liveness.branch_started());
    }

    /// Every branch of a fan-out has started; its parent only waits from now on.
    pub(crate) fn parent_waits(&self) {
        self.suspend_if(self.liveness.one_less());
    }

    /// One branch of a fan-out finished.
    pub(crate) fn branch_done(&self) {
        self.suspend_if(self.liveness.one_less());
    }

    /// The fan-out joined; its parent runs again.
    pub(crate) fn join(&self) {
        self.suspend_if(self.liveness.join());
    }

    /// Registers a wait on `key` (journaled at `seq`) and returns the receiver of its value.
    pub(crate) fn wait_external(
        &self,
        key: &str,
        seq: Seq,
        prompt: Option<String>,
        deadline_ms: Option<i64>,
    ) -> oneshot::Receiver<Value> {
        let (receiver, all_blocked) = self.liveness.wait(key, seq, prompt, deadline_ms);
        self.suspend_if(all_blocked);
        receiver
    }

    /// The wait on `key` ended (resolved or stopped).
    pub(crate) fn end_wait(&self, key: &str, resolved: bool) {
        self.suspend_if(self.liveness.end_wait(key, resolved));
    }

    /// Whether some wait of this run is open (its inbox is worth draining).
    pub(crate) fn has_waits(&self) -> bool {
        self.liveness.has_waits()
    }

    /// The open waits, for a suspended outcome.
    pub(super) fn pending(&self) -> Vec<Pending> {
        self.liveness.pending()
    }

    /// Resolves a wait of this live run; appends the attempt whatever its fate.
    pub(crate) fn resolve_external(&self, key: &str, value: Value) -> Result<bool, Error> {
        self.resolve_external_by(key, value, None)
    }

    /// [`Self::resolve_external`], journaling the service token named `by` as the resolver.
    pub(crate) fn resolve_external_by(
        &self,
        key: &str,
        value: Value,
        by: Option<&str>,
    ) -> Result<bool, Error> {
        let target = match self.liveness.seq_of(key) {
            Some(seq) => seq,
            None => self.writer.with_summary(|summary| summary.suspension(key)).ok_or_else(|| {
                Error::validation(format!("run {} has no wait on key {key:?}", self.run_id))
            })?,
        };
        // The wait's entry is durable before anyone waits on it: the store has it.
        let suspended = self.stored.fetch(target)?;
        check_resolution(Some(&suspended), key, &value)?;
        let attempt = resolution_entry(target, key, value.clone(), by);
        let written = self.append_one(attempt, Durability::Awaited)?;
        let applied = self.lock_replay().resolve(target, written.seq, value.clone());
        if applied {
            self.liveness.wake(key, value);
        }
        self.emit((self.span_base, None), false, || EventKind::ExternalResolved {
            key: key.to_owned(),
            applied,
        });
        Ok(applied)
    }

    /// Resolves the wait on `key` (journaled at `seq`) with its timeout value, unless a
    /// resolution closed it first: returns the value the wait delivers either way. The
    /// timeout is journaled like any resolution (bypassing the wait's schema), so every
    /// replay delivers it too.
    pub(crate) fn time_out_external(&self, key: &str, seq: Seq, deadline_ms: i64) -> Result<Value, Error> {
        if let Some(value) = self.lock_replay().resolutions().value_for(seq).cloned() {
            return Ok(value);
        }
        let value = serde_json::json!({ "timed_out": true, "key": key, "deadline_ms": deadline_ms });
        let written =
            self.append_one(resolution_entry(seq, key, value.clone(), None), Durability::Awaited)?;
        let mut replay = self.lock_replay();
        let applied = replay.resolve(seq, written.seq, value.clone());
        let delivered =
            if applied { value } else { replay.resolutions().value_for(seq).cloned().unwrap_or(value) };
        drop(replay);
        self.emit((self.span_base, None), false, || EventKind::ExternalResolved {
            key: key.to_owned(),
            applied,
        });
        Ok(delivered)
    }

    // ---- the lease -----------------------------------------------------------------------

    /// The run's lease is gone (it expired and another driver may hold the run): nothing this
    /// segment writes from now on can land, so every later append fails with why (`error`,
    /// the renewal thread's account of it).
    fn lease_lost(&self, error: Error) {
        self.writer.latch(error);
        self.stop_with(Stop::LeaseLost);
    }

    /// Hears of a lost lease (the keeper renews it from the moment it was taken, on a thread
    /// of its own: `lease::Keeper::start`), hands the keeper the run's task to watch (`alive` is
    /// dropped with it), and drains the run's inbox while it has open waits, until the run
    /// settles or is gone, or its task is.
    pub(super) fn keep_lease(self: &Arc<Self>, alive: Weak<()>) {
        if self.lease.is_some() {
            self.keeper.follow(alive);
            let weak: Weak<RunState> = Arc::downgrade(self);
            self.keeper.on_loss(move |e| {
                if let Some(state) = weak.upgrade() {
                    // Every later write is fenced off anyway: stop dispatching now.
                    state.lease_lost(e);
                }
            });
        }
        let weak: Weak<RunState> = Arc::downgrade(self);
        let stop = self.keeper.token();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(INBOX_POLL) => {}
                    _ = stop.cancelled() => return,
                }
                let Some(state) = weak.upgrade() else { return };
                if state.has_waits() && !stop.is_cancelled() {
                    let drained = state.clone();
                    let _ = tokio::task::spawn_blocking(move || drained.drain_inbox()).await;
                }
            }
        });
    }

    /// Applies the inbox through this run's own journal writer.
    fn drain_inbox(&self) {
        let Ok(items) = lease::inbox(&self.engine, &self.run_id) else { return };
        for (blob_ref, item) in items {
            match self.resolve_external_by(&item.key, item.value, item.by.as_deref()) {
                // Durable (applied or recorded as not applied), or refused for good: done with it.
                Ok(_) => {}
                Err(e) if e.code == ErrorCode::Validation => {}
                Err(_) => return,
            }
            let _ = self.engine.transcripts.delete(&blob_ref);
        }
    }

    /// Resolves once this segment may send a model request: its lease is surely still its
    /// own (`lease::Keeper::dispatchable`). A driver whose lease lapsed sends nothing more.
    ///
    /// # Errors
    /// `run_busy` once the lease is lost or no longer kept.
    pub(crate) async fn dispatchable(&self) -> Result<(), Error> {
        self.keeper.dispatchable(&self.engine.clock).await
    }

    /// Stops keeping the lease and gives it up: the run is free for the next driver.
    pub(super) fn release_lease(&self) {
        self.keeper.stop();
        lease::release(&self.engine, self.lease.as_ref());
    }
}

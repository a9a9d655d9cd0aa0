//! The run lifecycle: starting and resuming runs, the per-run state every `Ctx` shares (the
//! journal writer, budget, scheduler, events, liveness), and settling the outcome.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use serde_json::Value;
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;

use super::budget::Budget;
use super::ctx::Ctx;
use super::events::{EventKind, EventLog};
use super::{
    CostReport, Dropped, EngineInner, ErrorPolicy, Pending, ResumeOptions, RunHandle, RunOptions, RunOutcome,
    Workflow,
};
use crate::error::{Error, ErrorCode};
use crate::journal::{
    self, ContentKey, Entry, Kind, Ledger, Match, Replay, ReplayOptions, Resolutions, ScopePath, Seq, Status,
};
use crate::money::Money;
use crate::store::{Lease, RawEntry, RunId, RunMeta, RunStatus};

/// The state one run shares across every `Ctx` of it.
#[derive(Debug)]
pub(crate) struct RunState {
    pub(crate) engine: Arc<EngineInner>,
    pub(crate) run_id: RunId,
    pub(crate) events: Arc<EventLog>,
    journal: Mutex<JournalState>,
    group: Mutex<Group>,
    /// Signalled after every write, for threads blocked in [`RunState::append`].
    written: std::sync::Condvar,
    /// This state, for the background flushes it spawns.
    me: std::sync::Weak<RunState>,
    /// Where background flushes run.
    runtime: tokio::runtime::Handle,
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
    /// The run's status before this segment began (a refused re-key leaves it so).
    status_before: Option<RunStatus>,
    /// Set once admission, a guard or a cut stops work for lack of budget.
    pub(crate) exhausted: AtomicBool,
    dropped: Mutex<Vec<Dropped>>,
    liveness: Mutex<Liveness>,
    externals: Mutex<HashMap<String, Waiting>>,
    rng: Mutex<ChaCha8Rng>,
    next_span: AtomicU64,
    /// This segment's base for event seqs and span ids: segment `k` counts from `k << 32`, so
    /// both stay unique and increasing across the run's segments.
    span_base: u64,
    pub(crate) policy: ErrorPolicy,
    /// The run's lease, when the store grants leases: every write of this segment is fenced
    /// with it.
    lease: Option<Lease>,
    /// Stops the task that renews the lease and drains the inbox.
    keeper: CancellationToken,
    /// Whether re-keyed calls may run, and the ones refused.
    pub(crate) rekeys: super::explain::Rekeys,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Cancelled,
    /// A resume refused to re-key a completed call.
    Refused,
    Deadline,
    Suspended,
}

/// The journal's write queue: batches waiting for the group commit.
#[derive(Debug, Default)]
struct Group {
    queue: Vec<Queued>,
    /// Someone is writing a batch taken from the queue. Whoever it is writes or hands off
    /// what queued meanwhile (see [`RunState::hand_off`]), so nobody else needs to wait for it.
    flushing: bool,
    /// A background flush is spawned and has not started: at once, or delayed.
    flush_pending: bool,
    lazy_flush_pending: bool,
    /// Threads blocked on `written` (a notification is a syscall even when nobody waits).
    blocked: usize,
    /// The first failed write of this segment. Latched: every later append fails with it,
    /// and the run cannot settle `ok` over a journal with a hole in it.
    lost: Option<Error>,
}

#[derive(Debug)]
struct Queued {
    raw: Vec<RawEntry>,
    /// Whoever awaits this batch; `None` for a deferred one.
    waiter: Option<oneshot::Sender<Result<(), Error>>>,
    /// A deferred batch that may wait for the delayed flush.
    lazy: bool,
}

/// Where an awaited batch's outcome arrives.
type Written = oneshot::Receiver<Result<(), Error>>;

/// A writer dropped an awaited batch unanswered (it panicked mid-write).
fn dropped_append() -> Error {
    Error::internal("the journal writer dropped an append")
}

/// How long a deferred entry may wait for an awaited append to carry it before a background
/// flush writes it.
const DEFERRED_FLUSH_DELAY: std::time::Duration = std::time::Duration::from_millis(1);

/// When an append resolves. See [`RunState::append`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// Once the entries are durable (they, and every entry queued before them).
    Awaited,
    /// At once: the entries are queued, in order, and a background flush writes them now
    /// (or the next awaited append, whichever comes first).
    Deferred,
    /// At once, like `Deferred`, but the background flush waits a moment first, so that a
    /// quick call's terminal carries its `running` entry in the same write.
    Lazy,
}

#[derive(Debug)]
struct JournalState {
    replay: Replay,
    next_seq: u64,
    /// Every entry of the run: loaded, then appended by this segment.
    all: Vec<Arc<Entry>>,
}

/// Threads of control that can still make progress, and those parked on external input.
#[derive(Debug, Default)]
struct Liveness {
    active: usize,
    blocked: usize,
}

#[derive(Debug)]
struct Waiting {
    seq: Seq,
    prompt: Option<String>,
    wake: Option<oneshot::Sender<Value>>,
}

impl RunState {
    fn lock_journal(&self) -> MutexGuard<'_, JournalState> {
        self.journal.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Matches a live call against the loaded journal.
    pub(crate) fn lookup(&self, scope: &ScopePath, key: ContentKey) -> Match {
        let mut journal = self.lock_journal();
        let matched = journal.replay.lookup(scope, key);
        if self.reproduce
            && matches!(matched.outcome, crate::journal::Outcome::Rerun { previous: Some(_), .. })
        {
            // Reproducing the settled run: the journaled outcome is served, not rerun.
            journal.replay.count_rerun_as_replayed();
        }
        matched
    }

    /// The journaled decision at a site, if it still holds (see [`Replay::decision`]), and
    /// the ordinal a new one takes.
    pub(crate) fn decision(&self, scope: &ScopePath, key: ContentKey) -> (u32, Option<Arc<Entry>>) {
        self.lock_journal().replay.decision(scope, key)
    }

    /// A journaled fact at a site, matched like a call: a decision found this way holds
    /// whatever segments settled after it (the orchestrator's, whose checkpointed
    /// conversation names what it decided). Finding nothing is not counted as a miss.
    pub(crate) fn lookup_fact(&self, scope: &ScopePath, key: ContentKey) -> Match {
        let mut journal = self.lock_journal();
        let matched = journal.replay.lookup(scope, key);
        if matches!(matched.outcome, crate::journal::Outcome::Live) {
            journal.replay.uncount_miss();
        }
        matched
    }

    /// Accounts for the tool approvals of a replayed agent call (see [`Replay::cover_approvals`]).
    pub(crate) fn cover_approvals(&self, scope: &ScopePath, call_key: ContentKey) {
        self.lock_journal().replay.cover_approvals(scope, call_key);
    }

    /// Accounts for the journaled records under `scope` without matching them (the body of a
    /// call that replayed whole).
    pub(crate) fn cover(&self, scope: &ScopePath) {
        self.lock_journal().replay.cover(scope);
    }

    /// Appends entries (seqs and timestamps assigned here).
    ///
    /// The journal is one ordered queue: entries are written in seq order, and an
    /// [`Durability::Awaited`] append returns only once it and everything queued before it is
    /// durable. [`Durability::Deferred`] and [`Durability::Lazy`] appends return at once;
    /// they are for entries whose loss in a crash costs no money (a `running` entry, a step's
    /// result): a crash before they are written reruns the work they record, which is what an
    /// unfinished two-phase call does anyway. Every paid result is awaited, so a crash never
    /// loses a paid result nor, with it, anything queued before it.
    ///
    /// Blocks the calling thread while an awaited batch is written; async callers with many
    /// concurrent branches use [`RunState::append_async`].
    ///
    /// # Errors
    /// `journal_miss` in a dry run (nothing is written); `internal` when the store fails (now
    /// or in an earlier write of this segment).
    pub(crate) fn append(
        &self,
        entries: Vec<Entry>,
        durability: Durability,
    ) -> Result<Vec<Arc<Entry>>, Error> {
        let (shared, written) = self.enqueue(entries, durability)?;
        match written {
            Some(written) => self.wait_written(written).map(|()| shared),
            None => Ok(shared),
        }
    }

    /// An awaited append that waits without holding a thread: while another writer is busy,
    /// the task yields, so concurrent branches keep queueing and share the next write.
    ///
    /// # Errors
    /// As [`RunState::append`].
    pub(crate) async fn append_async(&self, entries: Vec<Entry>) -> Result<Vec<Arc<Entry>>, Error> {
        let (shared, written) = self.enqueue(entries, Durability::Awaited)?;
        let written = written.ok_or_else(|| Error::internal("an awaited append has no waiter"))?;
        // Sibling branches polled by the same task (a fan-out's) get to queue their results
        // first, and share this write instead of each waiting for one of their own. A run
        // with one live thread of control has nobody to wait for, and a yield costs a trip
        // through the scheduler.
        if self.live_branches() > 1 {
            tokio::task::yield_now().await;
        }
        self.write_if_idle();
        written.await.unwrap_or_else(|_| Err(dropped_append())).map(|()| shared)
    }

    /// Blocks until every entry queued so far is durable.
    ///
    /// # Errors
    /// The segment's first failed write, if any.
    pub(crate) fn flush(&self) -> Result<(), Error> {
        if self.dry_run {
            return Ok(());
        }
        self.append(Vec::new(), Durability::Awaited).map(drop)
    }

    /// Waits, without holding a thread, until every entry queued so far is durable: what an
    /// unpaid effect recorded (a `uuid()`, a step's result) must not be lost once an effect
    /// outside the run (a host call, a child workflow) may have acted on it.
    ///
    /// # Errors
    /// The segment's first failed write, if any.
    pub(crate) async fn flush_async(&self) -> Result<(), Error> {
        if self.dry_run {
            return Ok(());
        }
        self.append_async(Vec::new()).await.map(drop)
    }

    /// Assigns seqs and timestamps, encodes, and queues a batch; returns its entries and,
    /// for an awaited batch, where its outcome arrives.
    fn enqueue(
        &self,
        mut entries: Vec<Entry>,
        durability: Durability,
    ) -> Result<(Vec<Arc<Entry>>, Option<Written>), Error> {
        if self.dry_run {
            return Err(Error::new(
                ErrorCode::JournalMiss,
                "dry run reached a call the journal does not hold",
            ));
        }
        let ts = self.engine.clock.now_ms();
        // Seqs are assigned and the batch queued under the journal lock, so the queue is
        // always in seq order.
        let mut journal = self.lock_journal();
        let mut raw = Vec::with_capacity(entries.len());
        for (offset, entry) in entries.iter_mut().enumerate() {
            entry.seq = Seq(journal.next_seq + offset as u64);
            entry.ts = Some(ts);
            raw.push(journal::encode(entry)?);
        }
        let shared: Vec<Arc<Entry>> = entries.into_iter().map(Arc::new).collect();
        let mut group = self.lock_group();
        if let Some(lost) = &group.lost {
            return Err(lost.clone());
        }
        journal.next_seq += shared.len() as u64;
        journal.all.extend(shared.iter().cloned());
        let (waiter, written) = match durability {
            Durability::Awaited => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            }
            Durability::Deferred | Durability::Lazy => (None, None),
        };
        let lazy = durability == Durability::Lazy;
        group.queue.push(Queued { raw, waiter, lazy });
        if written.is_none() {
            self.schedule_flush(&mut group, lazy);
        }
        Ok((shared, written))
    }

    fn lock_group(&self) -> MutexGuard<'_, Group> {
        self.group.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Spawns a background flush of the queue, unless a writer is active (it hands off what
    /// is queued when it stops). A delayed flush waits a moment first, so a quick call's
    /// terminal (awaited) can carry its `running` entry in the same write: one commit per
    /// call instead of two; at most one delayed flush is pending at a time.
    fn schedule_flush(&self, group: &mut Group, delayed: bool) {
        // A pending flush will write whatever is queued when it starts.
        if group.flushing || group.flush_pending || (delayed && group.lazy_flush_pending) {
            return;
        }
        let Some(state) = self.me.upgrade() else { return };
        if delayed {
            group.lazy_flush_pending = true;
            self.runtime.spawn(async move {
                tokio::time::sleep(DEFERRED_FLUSH_DELAY).await;
                {
                    // Usually an awaited write has carried the entries meanwhile: then there
                    // is nothing to hand a blocking thread.
                    let mut group = state.lock_group();
                    if group.queue.is_empty() {
                        group.lazy_flush_pending = false;
                        return;
                    }
                }
                let _ = tokio::task::spawn_blocking(move || state.drain(true)).await;
            });
        } else {
            group.flush_pending = true;
            self.runtime.spawn_blocking(move || state.drain(false));
        }
    }

    /// Writes the queue on this thread when nobody is writing (the quickest path for a call
    /// made alone); otherwise the active writer will.
    fn write_if_idle(&self) {
        let group = self.lock_group();
        if !group.flushing {
            let group = self.write_batch(group);
            self.hand_off(group);
        }
    }

    /// Blocks until an awaited batch is written, writing the queue itself whenever nobody
    /// else is (so a blocked thread never depends on a background flush being spawned).
    fn wait_written(&self, mut written: Written) -> Result<(), Error> {
        let mut group = self.lock_group();
        loop {
            match written.try_recv() {
                Ok(outcome) => return outcome,
                Err(oneshot::error::TryRecvError::Closed) => return Err(dropped_append()),
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            group = if group.flushing {
                group.blocked += 1;
                let mut woken = self.written.wait(group).unwrap_or_else(|p| p.into_inner());
                woken.blocked -= 1;
                woken
            } else {
                self.hand_off(self.write_batch(group));
                self.lock_group()
            };
        }
    }

    /// After writing on a caller's thread: whatever queued meanwhile goes to a background
    /// flush, at once unless every queued batch may wait for the delayed one.
    fn hand_off(&self, mut group: MutexGuard<'_, Group>) {
        if !group.queue.is_empty() {
            let lazy = group.queue.iter().all(|q| q.lazy);
            self.schedule_flush(&mut group, lazy);
        }
    }

    /// The background flush: writes until the queue is empty, or leaves it to a writer that
    /// is already active.
    fn drain(&self, delayed: bool) {
        let mut group = self.lock_group();
        if delayed {
            group.lazy_flush_pending = false;
        } else {
            group.flush_pending = false;
        }
        while !group.queue.is_empty() && !group.flushing {
            group = self.write_batch(group);
        }
    }

    /// Group commit: takes every queued batch and writes them in one store append, then
    /// tells each waiter. Concurrent branches share one durable write instead of queueing
    /// for one each.
    fn write_batch<'g>(&'g self, mut group: MutexGuard<'g, Group>) -> MutexGuard<'g, Group> {
        group.flushing = true;
        let mut batch = std::mem::take(&mut group.queue);
        // Batches queued before an earlier one failed are never written after it: the
        // journal would have a hole.
        let lost = group.lost.clone();
        drop(group);
        let written = match lost {
            Some(lost) => Err(lost),
            None => {
                let raw: Vec<RawEntry> = batch.iter_mut().flat_map(|q| std::mem::take(&mut q.raw)).collect();
                if raw.is_empty() {
                    Ok(())
                } else {
                    // A store is the embedder's code: one that panics fails this write (and,
                    // latched, the run) instead of leaving `flushing` set and its waiters
                    // blocked for good.
                    let append = || self.engine.journal.append(&self.run_id, &raw, self.lease.as_ref());
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(append)) {
                        Ok(result) => result.map_err(Error::from),
                        Err(_) => Err(Error::internal("the journal store panicked during an append")),
                    }
                }
            }
        };
        let mut group = self.lock_group();
        if let Err(e) = &written {
            group.lost.get_or_insert_with(|| e.clone());
        }
        group.flushing = false;
        for waiter in batch.into_iter().filter_map(|q| q.waiter) {
            let _ = waiter.send(written.clone());
        }
        if group.blocked > 0 {
            self.written.notify_all();
        }
        group
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

    fn stop_with(&self, stop: Stop) {
        let mut slot = self.stop.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(stop);
        }
        drop(slot);
        self.cancel.cancel();
    }

    fn stop_reason(&self) -> Option<Stop> {
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
            _ => Error::new(ErrorCode::Cancelled, "the run was cancelled"),
        }
    }

    // Liveness: the run suspends when every thread of control that could make progress is
    // parked on external input, instead of hanging.

    fn with_liveness(&self, f: impl FnOnce(&mut Liveness)) {
        let mut live = self.liveness.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut live);
        let all_blocked = live.active > 0 && live.blocked >= live.active;
        drop(live);
        if all_blocked {
            self.stop_with(Stop::Suspended);
        }
    }

    /// A branch of a fan-out started.
    pub(crate) fn branch_started(&self) {
        self.with_liveness(|l| l.active += 1);
    }

    /// Every branch of a fan-out has started; its parent only waits from now on.
    pub(crate) fn parent_waits(&self) {
        self.with_liveness(|l| l.active = l.active.saturating_sub(1));
    }

    /// Threads of control that can make progress now.
    fn live_branches(&self) -> usize {
        self.liveness.lock().unwrap_or_else(|p| p.into_inner()).active
    }

    /// One branch of a fan-out finished.
    pub(crate) fn branch_done(&self) {
        self.with_liveness(|l| l.active = l.active.saturating_sub(1));
    }

    /// The fan-out joined; its parent runs again.
    pub(crate) fn join(&self) {
        self.with_liveness(|l| l.active += 1);
    }

    /// Registers a wait on `key` (journaled at `seq`) and returns the receiver of its value.
    pub(crate) fn wait_external(
        &self,
        key: &str,
        seq: Seq,
        prompt: Option<String>,
    ) -> oneshot::Receiver<Value> {
        let (tx, rx) = oneshot::channel();
        self.externals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_owned(), Waiting { seq, prompt, wake: Some(tx) });
        self.with_liveness(|l| l.blocked += 1);
        rx
    }

    /// The wait on `key` ended (resolved or stopped).
    pub(crate) fn end_wait(&self, key: &str, resolved: bool) {
        if resolved {
            self.externals.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
        }
        self.with_liveness(|l| l.blocked = l.blocked.saturating_sub(1));
    }

    /// Resolves a wait of this live run; appends the attempt whatever its fate.
    pub(crate) fn resolve_external(&self, key: &str, value: Value) -> Result<bool, Error> {
        let target = {
            let externals = self.externals.lock().unwrap_or_else(|p| p.into_inner());
            externals.get(key).map(|w| w.seq)
        };
        let target = match target {
            Some(seq) => seq,
            None => {
                let journal = self.lock_journal();
                find_suspension(journal.all.iter().map(|e| &**e), key).ok_or_else(|| {
                    Error::validation(format!("run {} has no wait on key {key:?}", self.run_id))
                })?
            }
        };
        {
            let journal = self.lock_journal();
            let suspended = journal.all.iter().find(|e| e.seq == target);
            check_resolution(suspended.map(|e| &**e), key, &value)?;
        }
        let attempt = resolution_entry(target, key, value.clone());
        let written = self.append_one(attempt, Durability::Awaited)?;
        let applied = self.lock_journal().replay.resolve(target, written.seq, value.clone());
        if applied {
            let mut externals = self.externals.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(wake) = externals.get_mut(key).and_then(|w| w.wake.take()) {
                let _ = wake.send(value);
            }
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
        if let Some(value) = self.lock_journal().replay.resolutions().value_for(seq).cloned() {
            return Ok(value);
        }
        let value = serde_json::json!({ "timed_out": true, "key": key, "deadline_ms": deadline_ms });
        let written = self.append_one(resolution_entry(seq, key, value.clone()), Durability::Awaited)?;
        let mut journal = self.lock_journal();
        let applied = journal.replay.resolve(seq, written.seq, value.clone());
        let delivered = if applied {
            value
        } else {
            journal.replay.resolutions().value_for(seq).cloned().unwrap_or(value)
        };
        drop(journal);
        self.emit((self.span_base, None), false, || EventKind::ExternalResolved {
            key: key.to_owned(),
            applied,
        });
        Ok(delivered)
    }

    /// The journaled calls of `scope` from its cursor on that no live call has consumed.
    pub(crate) fn unconsumed_at_cursor(&self, scope: &ScopePath) -> Vec<(Arc<Entry>, Option<Arc<Entry>>)> {
        self.lock_journal().replay.unconsumed_at_cursor(scope)
    }

    /// Stops the run because a resume refused to re-key a completed call.
    pub(crate) fn refuse_rekey(&self) {
        // The refused call was counted as a miss, but it never ran.
        self.lock_journal().replay.uncount_miss();
        self.stop_with(Stop::Refused);
    }

    /// Whether some wait of this run is open (its inbox is worth draining).
    pub(crate) fn has_waits(&self) -> bool {
        !self.externals.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// The run's lease is gone (it expired and another driver may hold the run): nothing this
    /// segment writes from now on can land, so every later append fails with why.
    pub(crate) fn lease_lost(&self, error: Error) {
        let error = Error::new(
            ErrorCode::RunBusy,
            format!(
                "run {} lost its lease, so this process stopped driving it: {}",
                self.run_id, error.message
            ),
        );
        self.lock_group().lost.get_or_insert(error);
        self.cancel.cancel();
    }

    fn pending(&self) -> Vec<Pending> {
        let externals = self.externals.lock().unwrap_or_else(|p| p.into_inner());
        let mut pending: Vec<Pending> = externals
            .iter()
            .map(|(key, w)| Pending { key: key.clone(), prompt: w.prompt.clone(), seq: w.seq.0 })
            .collect();
        pending.sort_by_key(|p| p.seq);
        pending
    }
}

/// The newest suspended `external` entry for `key`.
fn find_suspension<'a>(entries: impl DoubleEndedIterator<Item = &'a Entry>, key: &str) -> Option<Seq> {
    entries
        .rev()
        .find(|e| e.kind == Kind::External && e.status == Status::Suspended && e.name.as_deref() == Some(key))
        .map(|e| e.seq)
}

/// Refuses a resolution that does not satisfy the wait's schema; the wait stays open.
fn check_resolution(suspended: Option<&Entry>, key: &str, value: &Value) -> Result<(), Error> {
    let Some(schema) =
        suspended.and_then(|e| e.value()).and_then(|v| v.get("schema").cloned()).filter(|s| !s.is_null())
    else {
        return Ok(());
    };
    let validator = jsonschema::validator_for(&schema)
        .map_err(|e| Error::validation(format!("the wait on {key:?} has an invalid schema: {e}")))?;
    let problems: Vec<String> =
        validator.iter_errors(value).map(|e| format!("at '{}': {e}", e.instance_path())).collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::validation(format!(
            "the resolution of {key:?} does not match its schema: {}",
            problems.join("; ")
        )))
    }
}

fn resolution_entry(target: Seq, key: &str, value: Value) -> Entry {
    let identity = serde_json::json!({ "kind": "resolution", "key": key });
    let content = journal::content_key(&identity).unwrap_or(ContentKey::from_bytes([0; 32]));
    let mut entry = Entry::new(Seq(0), Kind::Resolution, Status::Ok, ScopePath::root(), content, 0);
    entry.target = Some(target);
    entry.set_value(Some(&value));
    entry.name = Some(key.to_owned());
    entry
}

/// Runs are tasks on the caller's tokio runtime; refuse (before writing anything) when
/// there is none, rather than panic.
fn require_runtime() -> Result<(), Error> {
    tokio::runtime::Handle::try_current()
        .map(|_| ())
        .map_err(|_| Error::config("runs must be started inside a tokio runtime"))
}

pub(super) fn validate_budget(
    budget_usd: Option<f64>,
    default: Option<Money>,
) -> Result<Option<Money>, Error> {
    match budget_usd {
        None => Ok(default),
        Some(usd) => {
            Money::from_usd(usd).map(Some).map_err(|e| Error::config(format!("invalid budget: {e}")))
        }
    }
}

fn validate_deadline(deadline_ms: Option<i64>, now: i64) -> Result<(), Error> {
    match deadline_ms {
        Some(ms) if ms <= now => {
            Err(Error::config(format!("deadline {ms} is not in the future (now {now})")))
        }
        _ => Ok(()),
    }
}

pub(super) fn args_ref(run_id: &RunId) -> String {
    format!("{run_id}/args.json")
}

struct Segment {
    entries: Vec<Arc<Entry>>,
    replay: Replay,
    ceiling: Option<Money>,
    spent: Money,
    spawns: u32,
    dry_run: bool,
    reproduce: bool,
    status_before: Option<RunStatus>,
    policy: ErrorPolicy,
    deadline_ms: Option<i64>,
    resumed: bool,
    /// How many segments ran before this one.
    index: u32,
    /// The run's lease, held for this segment.
    lease: Option<Lease>,
    /// Re-keyed calls run live without asking.
    accept_rekey: bool,
}

/// Where segment `index`'s event seqs and span ids start.
fn segment_base(index: u32) -> u64 {
    u64::from(index) << 32
}

fn new_state(engine: Arc<EngineInner>, run_id: RunId, segment: Segment) -> Arc<RunState> {
    let next_seq = segment.entries.last().map_or(1, |e| e.seq.0 + 1);
    let seed = engine.seed.unwrap_or_else(|| {
        let digest = journal::content_key(&serde_json::json!([run_id.as_str(), engine.clock.now_ms()]));
        digest.map_or(0, |k| u64::from_le_bytes(k.as_bytes()[..8].try_into().unwrap_or([0; 8])))
    });
    let provider_slots =
        engine.provider_limits.iter().map(|(name, &n)| (name.clone(), Arc::new(Semaphore::new(n)))).collect();
    Arc::new_cyclic(|me| RunState {
        me: me.clone(),
        runtime: tokio::runtime::Handle::current(),
        events: EventLog::new(run_id.clone(), segment_base(segment.index)),
        run_id,
        journal: Mutex::new(JournalState { replay: segment.replay, next_seq, all: segment.entries }),
        group: Mutex::new(Group::default()),
        written: std::sync::Condvar::new(),
        budget: Budget::new(segment.ceiling, segment.spent),
        model_slots: Arc::new(Semaphore::new(engine.max_concurrency)),
        provider_slots,
        spawns: AtomicU32::new(segment.spawns),
        cancel: CancellationToken::new(),
        stop: Mutex::new(None),
        dry_run: segment.dry_run,
        reproduce: segment.dry_run && segment.reproduce,
        status_before: segment.status_before,
        exhausted: AtomicBool::new(false),
        dropped: Mutex::new(Vec::new()),
        liveness: Mutex::new(Liveness { active: 1, blocked: 0 }),
        externals: Mutex::new(HashMap::new()),
        rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed)),
        next_span: AtomicU64::new(segment_base(segment.index) + 1),
        span_base: segment_base(segment.index),
        policy: segment.policy,
        lease: segment.lease,
        keeper: CancellationToken::new(),
        rekeys: super::explain::Rekeys::new(segment.accept_rekey),
        engine,
    })
}

/// The source of a script run, stored with the run so a resume needs no file.
pub(super) struct ScriptSource {
    pub(super) dialect: &'static str,
    pub(super) source: Arc<str>,
    pub(super) hash: String,
}

pub(super) fn source_ref(run_id: &RunId) -> String {
    format!("{run_id}/source")
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
    let lease = super::lease::acquire(&engine, &run_id)?;
    let fresh =
        Fresh { name: &workflow.name, args: &args, options: &options, script: script.as_ref(), ceiling, now };
    match begin_fresh(&engine, &run_id, &fresh, lease.as_ref()) {
        Ok(meta) => {
            let segment = Segment {
                entries: Vec::new(),
                replay: Replay::empty(),
                ceiling,
                spent: Money::ZERO,
                spawns: 0,
                dry_run: false,
                reproduce: false,
                status_before: None,
                policy: options.policy,
                deadline_ms: options.deadline_ms,
                resumed: false,
                index: 0,
                lease,
                accept_rekey: false,
            };
            Ok(launch(engine, run_id, workflow, args, meta, segment))
        }
        Err(e) => {
            super::lease::release(&engine, lease.as_ref());
            Err(e)
        }
    }
}

/// What a fresh run starts with.
struct Fresh<'a> {
    name: &'a str,
    args: &'a Value,
    options: &'a RunOptions,
    script: Option<&'a ScriptSource>,
    ceiling: Option<Money>,
    now: i64,
}

/// Writes a fresh run's stored inputs and meta, under its lease.
fn begin_fresh(
    engine: &EngineInner,
    run_id: &RunId,
    fresh: &Fresh<'_>,
    lease: Option<&Lease>,
) -> Result<RunMeta, Error> {
    let Fresh { name, args, options, script, ceiling, now } = *fresh;
    // Under the lease: nobody created the run between the check above and the lease.
    if engine.journal.get_meta(run_id)?.is_some() {
        return Err(Error::config(format!("run {run_id} already exists; resume it instead")));
    }
    let run_id = run_id.clone();
    let args_canonical = journal::canonical_json(args).map_err(|e| Error::validation(e.to_string()))?;
    engine.transcripts.put(&args_ref(&run_id), args_canonical.as_bytes())?;
    if let Some(script) = &script {
        engine.transcripts.put(&source_ref(&run_id), script.source.as_bytes())?;
    }
    let mut extra = serde_json::Map::new();
    if options.policy == ErrorPolicy::Lenient {
        extra.insert("policy".into(), Value::from("lenient"));
    }
    let mut meta = RunMeta {
        run_id: run_id.clone(),
        status: RunStatus::Running,
        name: Some(name.to_owned()),
        tags: options.tags.clone(),
        created_at_ms: now,
        updated_at_ms: now,
        hash_version: journal::HASH_VERSION,
        budget_ceiling: ceiling,
        dialect: script.as_ref().map(|s| s.dialect.to_owned()),
        source_ref: script.as_ref().map(|_| source_ref(&run_id)),
        source_hash: script.as_ref().map(|s| s.hash.clone()),
        args_hash: Some(journal::content_key_of_canonical(&args_canonical).to_hex()),
        segments: 1,
        extra,
    };
    // How calls are routed is part of their identity: a resume reuses it.
    super::started::Routing::of(engine).store(&mut meta);
    engine.journal.put_meta(&meta, lease)?;
    Ok(meta)
}

/// Resumes a run from its journal.
/// The workflow a resume runs: the given one, the stored script (hash-checked), or the
/// registered workflow named in run meta.
fn resume_workflow(
    handle: &super::Engine,
    meta: &RunMeta,
    options: &ResumeOptions,
) -> Result<Workflow, Error> {
    let engine = &handle.inner;
    let run_id = &meta.run_id;
    if let Some(workflow) = &options.workflow {
        return Ok(workflow.clone());
    }
    let name = meta.name.clone().unwrap_or_else(|| "script".into());
    if let (Some(dialect), Some(stored_ref)) = (&meta.dialect, &meta.source_ref) {
        let dialect = engine.dialects.get(dialect).cloned().ok_or_else(|| {
            Error::config(format!("run {run_id} is a {dialect} script, a dialect this engine lacks"))
        })?;
        if let Some(script) = &options.script {
            if script.dialect() != dialect.name() {
                return Err(Error::config(format!(
                    "run {run_id} is a {} script; an edit must be one too, not {}",
                    dialect.name(),
                    script.dialect()
                )));
            }
            // A different source is an edit: it replaces the stored one when the resume
            // starts (see `store_edit`); unchanged calls replay.
            return dialect.prepare(handle, &name, script.source());
        }
        let bytes = engine
            .transcripts
            .get(stored_ref)?
            .ok_or_else(|| Error::internal(format!("the stored source of run {run_id} is missing")))?;
        let source = String::from_utf8(bytes)
            .map_err(|_| Error::internal(format!("the stored source of run {run_id} is not UTF-8")))?;
        if Some(journal::content_key_of_canonical(&source).to_hex()) != meta.source_hash {
            return Err(Error::internal(format!(
                "the stored source of run {run_id} does not match its hash"
            )));
        }
        return dialect.prepare(handle, &name, &source);
    }
    match &meta.name {
        Some(name) => engine.workflows.get(name).cloned().ok_or_else(|| {
            Error::config(format!("run {run_id} ran workflow {name:?}, which this engine has not registered"))
        }),
        None => Err(Error::config(format!("run {run_id} names no workflow; pass one to resume"))),
    }
}

/// Stores an edited script as the run's source from now on (a new blob, its ref and hash in
/// meta), keeping the earlier source and listing it in meta's `previous_sources`.
fn store_edit(
    engine: &EngineInner,
    meta: &mut RunMeta,
    script: &super::Script,
    index: u32,
) -> Result<(), Error> {
    let hash = script.source_hash();
    if meta.source_hash.as_deref() == Some(hash.as_str()) {
        return Ok(());
    }
    let new_ref = format!("{}.{index}", source_ref(&meta.run_id));
    engine.transcripts.put(&new_ref, script.source().as_bytes())?;
    let previous = serde_json::json!({ "source_ref": meta.source_ref, "source_hash": meta.source_hash });
    match meta.extra.get_mut("previous_sources").and_then(Value::as_array_mut) {
        Some(list) => list.push(previous),
        None => {
            meta.extra.insert("previous_sources".into(), Value::Array(vec![previous]));
        }
    }
    meta.source_ref = Some(new_ref);
    meta.source_hash = Some(hash);
    Ok(())
}

/// Resumes a run from its journal.
pub(super) fn resume(
    handle: &super::Engine,
    run_id: &RunId,
    options: ResumeOptions,
) -> Result<RunHandle, Error> {
    require_runtime()?;
    let engine = handle.inner.clone();
    let meta =
        engine.journal.get_meta(run_id)?.ok_or_else(|| Error::config(format!("unknown run {run_id}")))?;
    validate_deadline(options.deadline_ms, engine.clock.now_ms())?;
    let workflow = resume_workflow(handle, &meta, &options)?;
    // The run's calls are keyed as it started them, unless the resume overrides the model.
    let engine = super::started::resume_engine(&engine, &meta, options.model.as_ref())?.unwrap_or(engine);
    // A dry run writes nothing, so it needs no lease.
    let lease = if options.dry_run { None } else { super::lease::acquire(&engine, run_id)? };
    match resume_leased(engine.clone(), run_id, meta, options, workflow, lease.clone()) {
        Ok(handle) => Ok(handle),
        Err(e) => {
            super::lease::release(&engine, lease.as_ref());
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
) -> Result<RunHandle, Error> {
    // Resolutions left for the previous driver join the journal before it is read.
    if lease.is_some() {
        super::lease::drain_stored(&engine, run_id, lease.as_ref())?;
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
    let raw = engine.journal.load(run_id)?;
    let entries: Vec<Arc<Entry>> = journal::decode_owned(raw)?.into_iter().map(Arc::new).collect();
    let ledger = Ledger::fold(entries.iter().map(|e| &**e));
    let spawns =
        entries.iter().filter(|e| e.kind == Kind::Agent && e.status == Status::Running).count() as u32;
    let replay_options = ReplayOptions { invalidate: options.invalidate.iter().map(|&s| Seq(s)).collect() };
    let replay = Replay::from_shared(entries.clone(), &replay_options);
    let mut meta = meta;
    // Segments that ran before this one (a dry run counts as the next, and writes nothing).
    let index = meta.segments;
    let status_before = meta.status;
    if !options.dry_run {
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
    let segment = Segment {
        entries,
        replay,
        ceiling: meta.budget_ceiling,
        spent: ledger.spent,
        spawns,
        dry_run: options.dry_run,
        reproduce: options.reproduce,
        status_before: Some(status_before),
        policy,
        deadline_ms: options.deadline_ms,
        resumed: true,
        index,
        lease,
        accept_rekey: options.accept_rekey,
    };
    Ok(launch(engine, run_id.clone(), workflow, args, meta, segment))
}

fn launch(
    engine: Arc<EngineInner>,
    run_id: RunId,
    workflow: Workflow,
    args: Value,
    meta: RunMeta,
    segment: Segment,
) -> RunHandle {
    let deadline_ms = segment.deadline_ms;
    let resumed = segment.resumed;
    let state = new_state(engine, run_id.clone(), segment);
    if state.lease.is_some() {
        super::lease::spawn_keeper(&state, state.lease.clone(), state.keeper.clone());
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
        let body = (workflow.body)(ctx, args);
        let value = body.await;
        settle(&task_state, meta, value)
    });
    let events = state.events.clone();
    tokio::spawn(async move {
        let outcome = task.await.map_err(|e| Error::internal(format!("the run's task failed: {e}")));
        // Settling closes the log; a task that panicked never settled, and its streams
        // must end all the same.
        events.close();
        let _ = done_tx.send(Some(outcome));
    });
    let claim = Some(super::EventsClaim::new(state.events.clone()));
    RunHandle { run_id, state, done, claim }
}

/// Decides the outcome, journals the settlement and updates run meta.
fn settle(state: &Arc<RunState>, mut meta: RunMeta, value: Result<Value, Error>) -> RunOutcome {
    let stop = state.stop_reason();
    let exhausted = state.exhausted.load(Ordering::SeqCst);
    let (status, value, error) = match (stop, value) {
        (Some(Stop::Suspended), Err(_)) => (RunStatus::Suspended, None, None),
        (Some(Stop::Cancelled), Err(e)) | (Some(Stop::Deadline), Err(e)) => {
            (RunStatus::Cancelled, None, Some(e))
        }
        (_, Ok(value)) if exhausted => (RunStatus::Exhausted, Some(value), None),
        (_, Err(e)) if exhausted || e.code == ErrorCode::BudgetExhausted => {
            (RunStatus::Exhausted, None, Some(e))
        }
        (_, Ok(value)) => (RunStatus::Ok, Some(value), None),
        (_, Err(e)) => (RunStatus::Error, None, Some(e)),
    };
    let (mut status, mut value, mut error) = (status, value, error);
    let refused = state.rekeys.refusal();
    let rekey_refused = refused.is_some();
    if let Some(refusal) = refused {
        (status, value, error) = (RunStatus::Error, None, Some(refusal));
    }
    // A refused re-key stopped this segment before it paid for what re-keys: the run keeps the
    // status it had (suspended, error, ...), and nothing settles it.
    if rekey_refused
        && !state.dry_run
        && let Some(before) = state.status_before
    {
        meta.status = before;
        meta.updated_at_ms = state.now_ms();
        if let Err(e) = state.engine.journal.put_meta(&meta, state.lease.as_ref()) {
            error.get_or_insert(e.into());
        }
    }
    if !state.dry_run && !rekey_refused {
        let identity = serde_json::json!({ "kind": "decision", "type": journal::SETTLE_DECISION });
        let key = journal::content_key(&identity).unwrap_or(ContentKey::from_bytes([0; 32]));
        let mut entry = Entry::new(Seq(0), Kind::Decision, Status::Ok, ScopePath::root(), key, 0);
        let mut settled = journal::settle_value(status);
        // The value's key, so a strict replay can tell a different outcome from the same one.
        if let (Some(v), Some(map)) = (&value, settled.as_object_mut())
            && let Ok(key) = journal::content_key(v)
        {
            map.insert("value_key".into(), Value::from(key.to_hex()));
        }
        entry.set_value(Some(&settled));
        let written = state.append_one(entry, Durability::Awaited);
        meta.status = status;
        meta.updated_at_ms = state.now_ms();
        match written {
            // The journal holds the settlement (and, before it, everything this segment
            // queued): the meta row may follow.
            Ok(_) => {
                if let Err(e) = state.engine.journal.put_meta(&meta, state.lease.as_ref()) {
                    error.get_or_insert(e.into());
                }
            }
            // A journal with a hole in it would replay differently than the run executed:
            // nothing durable records this outcome, so it cannot be reported as one.
            Err(e) => {
                if matches!(status, RunStatus::Ok | RunStatus::Suspended) {
                    status = RunStatus::Error;
                    value = None;
                }
                error.get_or_insert(e);
            }
        }
    }
    // Settled: the run is free for the next driver.
    state.keeper.cancel();
    super::lease::release(&state.engine, state.lease.as_ref());
    let (cost, preview, orphans) = {
        let journal = state.lock_journal();
        let preview = journal.replay.preview();
        let orphans = if preview.orphaned > 0 { journal.replay.first_orphans(20) } else { Vec::new() };
        (CostReport::fold(journal.all.iter().map(|e| &**e)), preview, orphans)
    };
    let pending = if status == RunStatus::Suspended { state.pending() } else { Vec::new() };
    let mut dropped = std::mem::take(&mut *state.dropped.lock().unwrap_or_else(|p| p.into_inner()));
    if let Some(e) =
        error.as_ref().filter(|e| status == RunStatus::Exhausted && e.code == ErrorCode::BudgetExhausted)
    {
        // The refusal that ended the run is itself dropped work.
        dropped.push(Dropped { scope: String::new(), kind: "run".into(), label: None, error: e.clone() });
    }
    state.emit((state.span_base, None), false, || EventKind::RunEnd { status, preview });
    state.events.close();
    RunOutcome {
        run_id: state.run_id.clone(),
        status,
        value,
        error,
        dropped,
        pending,
        usage: cost.total.usage,
        cost,
        preview,
        orphans,
    }
}

/// Appends a resolution to a run that is not live here (under its lease, when given).
pub(super) fn resolve_stored(
    engine: &EngineInner,
    run_id: &RunId,
    key: &str,
    value: Value,
    lease: Option<&Lease>,
) -> Result<bool, Error> {
    let (entries, target) = stored_wait(engine, run_id, key, &value)?;
    let applied = !Resolutions::fold(entries.iter()).is_closed(target);
    let mut entry = resolution_entry(target, key, value);
    entry.seq = Seq(entries.last().map_or(1, |e| e.seq.0 + 1));
    entry.ts = Some(engine.clock.now_ms());
    engine.journal.append(run_id, &[journal::encode(&entry)?], lease)?;
    Ok(applied)
}

/// Checks that a stored run waits on `key` and that `value` satisfies the wait.
///
/// # Errors
/// `config` for an unknown run; `validation` for no such wait or a value its schema refuses.
pub(super) fn check_stored_resolution(
    engine: &EngineInner,
    run_id: &RunId,
    key: &str,
    value: &Value,
) -> Result<(), Error> {
    stored_wait(engine, run_id, key, value).map(drop)
}

/// The stored journal and the seq of the wait on `key` a resolution with `value` targets.
fn stored_wait(
    engine: &EngineInner,
    run_id: &RunId,
    key: &str,
    value: &Value,
) -> Result<(Vec<Entry>, Seq), Error> {
    if engine.journal.get_meta(run_id)?.is_none() {
        return Err(Error::config(format!("unknown run {run_id}")));
    }
    let raw = engine.journal.load(run_id)?;
    let entries = journal::decode_all(&raw)?;
    let target = find_suspension(entries.iter(), key)
        .ok_or_else(|| Error::validation(format!("run {run_id} has no wait on key {key:?}")))?;
    check_resolution(entries.iter().find(|e| e.seq == target), key, value)?;
    Ok((entries, target))
}

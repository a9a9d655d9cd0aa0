//! The run's journal writer: one ordered group-commit queue per segment. Entries get their
//! seqs and timestamps here, in queue order; concurrent branches' batches share one store
//! append; every write is fenced with the segment's lease; and the first failed write latches,
//! failing every later append, since a journal with a hole in it would replay differently
//! than the run executed.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};

use tokio::sync::oneshot;

use super::summary::Summary;
use crate::clock::SharedClock;
use crate::error::{Error, ErrorCode};
use crate::journal::{self, Entry, Seq};
use crate::store::{JournalStore, Lease, RawEntry, RunId, Tally};

/// The journal's write side for one segment of a run.
#[derive(Debug)]
pub(super) struct JournalWriter {
    run_id: RunId,
    store: Arc<dyn JournalStore>,
    clock: SharedClock,
    /// The lease every write of this segment is fenced with, when the store grants leases.
    lease: Option<Lease>,
    /// Replay-strict: nothing is written, and an append fails with `journal_miss`.
    dry_run: bool,
    log: Mutex<Log>,
    group: Mutex<Group>,
    /// Signalled after every write, for threads blocked in [`JournalWriter::append`].
    written: Condvar,
    /// This writer, for the background flushes it spawns.
    me: Weak<JournalWriter>,
    /// Where background flushes run.
    runtime: tokio::runtime::Handle,
}

/// The next seq, and the folds of every entry of the run (read, then appended by this
/// segment): the entries themselves are not kept.
#[derive(Debug)]
struct Log {
    next_seq: u64,
    summary: Summary,
}

/// The journal's write queue: batches waiting for the group commit.
#[derive(Debug, Default)]
struct Group {
    queue: Vec<Queued>,
    /// Someone is writing a batch taken from the queue. Whoever it is writes or hands off
    /// what queued meanwhile (see [`JournalWriter::hand_off`]), so nobody else needs to wait for it.
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
    /// What the batch adds to the store's counters (its model calls and their spend).
    tally: Tally,
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

/// When an append resolves. See [`JournalWriter::append`].
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

impl JournalWriter {
    /// The writer of a segment that continues the journal `summary` folds (the run's so far).
    pub(super) fn new(
        run_id: RunId,
        store: Arc<dyn JournalStore>,
        clock: SharedClock,
        lease: Option<Lease>,
        dry_run: bool,
        summary: Summary,
    ) -> Arc<JournalWriter> {
        let next_seq = summary.tail.0 + 1;
        Arc::new_cyclic(|me| JournalWriter {
            run_id,
            store,
            clock,
            lease,
            dry_run,
            log: Mutex::new(Log { next_seq, summary }),
            group: Mutex::new(Group::default()),
            written: Condvar::new(),
            me: me.clone(),
            runtime: tokio::runtime::Handle::current(),
        })
    }

    fn lock_log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the folds of every entry of the run so far (read and appended).
    pub(super) fn with_summary<R>(&self, read: impl FnOnce(&Summary) -> R) -> R {
        read(&self.lock_log().summary)
    }

    /// Fails every later append with `error` (the lease is gone: nothing more can land).
    pub(super) fn latch(&self, error: Error) {
        self.lock_group().lost.get_or_insert(error);
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
    /// concurrent branches use [`JournalWriter::append_async`].
    ///
    /// # Errors
    /// `journal_miss` in a dry run (nothing is written); `internal` when the store fails (now
    /// or in an earlier write of this segment).
    pub(super) fn append(
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
    /// As [`JournalWriter::append`].
    ///
    /// `concurrent` says, once the batch is queued, whether other threads of control of the
    /// run can make progress (then they get a chance to queue into the same write).
    pub(super) async fn append_async(
        &self,
        entries: Vec<Entry>,
        concurrent: impl FnOnce() -> bool,
    ) -> Result<Vec<Arc<Entry>>, Error> {
        let (shared, written) = self.enqueue(entries, Durability::Awaited)?;
        let written = written.ok_or_else(|| Error::internal("an awaited append has no waiter"))?;
        // Sibling branches polled by the same task (a fan-out's) get to queue their results
        // first, and share this write instead of each waiting for one of their own. A run
        // with one live thread of control has nobody to wait for, and a yield costs a trip
        // through the scheduler.
        if concurrent() {
            tokio::task::yield_now().await;
        }
        self.write_if_idle();
        written.await.unwrap_or_else(|_| Err(dropped_append())).map(|()| shared)
    }

    /// Blocks until every entry queued so far is durable.
    ///
    /// # Errors
    /// The segment's first failed write, if any.
    pub(super) fn flush(&self) -> Result<(), Error> {
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
    pub(super) async fn flush_async(&self, concurrent: impl FnOnce() -> bool) -> Result<(), Error> {
        if self.dry_run {
            return Ok(());
        }
        self.append_async(Vec::new(), concurrent).await.map(drop)
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
        let ts = self.clock.now_ms();
        // Seqs are assigned and the batch queued under the log's lock, so the queue is
        // always in seq order.
        let mut journal = self.lock_log();
        let mut raw = Vec::with_capacity(entries.len());
        let mut tally = Tally::default();
        for (offset, entry) in entries.iter_mut().enumerate() {
            entry.seq = Seq(journal.next_seq + offset as u64);
            entry.ts = Some(ts);
            raw.push(journal::encode(entry)?);
            tally = tally.plus(journal::tally(entry));
        }
        let shared: Vec<Arc<Entry>> = entries.into_iter().map(Arc::new).collect();
        let mut group = self.lock_group();
        if let Some(lost) = &group.lost {
            return Err(lost.clone());
        }
        journal.next_seq += shared.len() as u64;
        for entry in &shared {
            journal.summary.add_appended(entry);
        }
        let (waiter, written) = match durability {
            Durability::Awaited => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            }
            Durability::Deferred | Durability::Lazy => (None, None),
        };
        let lazy = durability == Durability::Lazy;
        group.queue.push(Queued { raw, tally, waiter, lazy });
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
                let tally = batch.iter().fold(Tally::default(), |sum, q| sum.plus(q.tally));
                if raw.is_empty() {
                    Ok(())
                } else {
                    // A store is the embedder's code: one that panics fails this write (and,
                    // latched, the run) instead of leaving `flushing` set and its waiters
                    // blocked for good.
                    let append = || self.store.append_tallied(&self.run_id, &raw, self.lease.as_ref(), tally);
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
}

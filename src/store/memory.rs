//! The in-memory store: journals, metas, leases and blobs in one mutex'd map set, for tests
//! and throwaway runs. Nothing survives the process.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::common::{self, HeldLease};
use super::{
    JournalStore, LeasableStore, Lease, RawEntry, Result, RunFilter, RunId, RunMeta, TranscriptStore,
};
use crate::clock::{SharedClock, SystemClock};

/// A [`JournalStore`], [`LeasableStore`] and [`TranscriptStore`] held in memory.
///
/// Every operation is one step under one mutex, so batches are atomic and the lease check
/// and the write it guards can never be separated. Entries and blobs are stored as owned
/// copies, so a caller can never reach stored history through a value it passed in or got
/// back. Each instance logs a loud warning when it is created, because a durable-looking
/// run on this store cannot be resumed by another process.
pub struct MemoryStore {
    /// Everything, behind one lock: operations are short and never do I/O.
    state: Mutex<State>,
    /// Reads lease expiry; injectable so tests move time by hand.
    clock: SharedClock,
}

#[derive(Default)]
struct State {
    journals: HashMap<RunId, Vec<RawEntry>>,
    metas: HashMap<RunId, RunMeta>,
    leases: HashMap<RunId, HeldLease>,
    /// The highest epoch ever granted per run; survives release, expiry and delete.
    epochs: HashMap<RunId, u64>,
    /// The tallies of every batch appended.
    appended: super::Tally,
    /// Blobs by ref; ordered so a run's refs are one sorted range.
    blobs: BTreeMap<String, Vec<u8>>,
}

impl MemoryStore {
    /// An empty store on the system clock.
    #[allow(clippy::new_without_default)] // A store is a deliberate choice, not a default.
    pub fn new() -> MemoryStore {
        MemoryStore::with_clock(std::sync::Arc::new(SystemClock))
    }

    /// An empty store reading lease expiry from `clock`.
    pub fn with_clock(clock: SharedClock) -> MemoryStore {
        tracing::warn!(
            "cairn is using the in-memory store: no journal, meta or transcript survives this \
             process, and no run can be resumed after it exits; use a sqlite or jsonl store \
             for durable runs"
        );
        MemoryStore { state: Mutex::new(State::default()), clock }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every mutation completes or leaves the maps untouched before it can panic, so the
        // data behind a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("MemoryStore")
            .field("runs", &state.metas.len())
            .field("journals", &state.journals.len())
            .field("blobs", &state.blobs.len())
            .finish_non_exhaustive()
    }
}

impl State {
    fn fence(&self, run: &RunId, lease: Option<&Lease>, now_ms: i64) -> Result<()> {
        match lease {
            Some(lease) => common::check_lease(run, lease, self.leases.get(run), now_ms),
            None => Ok(()),
        }
    }
}

impl JournalStore for MemoryStore {
    fn append_tallied(
        &self,
        run: &RunId,
        entries: &[RawEntry],
        lease: Option<&Lease>,
        tally: super::Tally,
    ) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        common::check_batch(run, entries)?;
        let mut state = self.state();
        state.fence(run, lease, self.clock.now_ms())?;
        let tail = state.journals.get(run).and_then(|journal| journal.last()).map(RawEntry::seq);
        common::check_tail(run, tail, entries)?;
        state.journals.entry(run.clone()).or_default().extend_from_slice(entries);
        state.appended = state.appended.plus(tally);
        Ok(())
    }

    fn counters(&self) -> Result<Option<super::StoreCounters>> {
        let state = self.state();
        let statuses = state.metas.values().map(|meta| (meta.status, 1));
        Ok(Some(common::fold_counters(statuses, state.appended)))
    }

    fn load(&self, run: &RunId) -> Result<Vec<RawEntry>> {
        Ok(self.state().journals.get(run).cloned().unwrap_or_default())
    }

    fn load_since(&self, run: &RunId, after: u64) -> Result<Vec<RawEntry>> {
        self.load_page(run, after, usize::MAX)
    }

    fn load_page(&self, run: &RunId, after: u64, limit: usize) -> Result<Vec<RawEntry>> {
        let state = self.state();
        let Some(journal) = state.journals.get(run) else { return Ok(Vec::new()) };
        let start = journal.partition_point(|entry| entry.seq() <= after);
        Ok(journal[start..].iter().take(limit).cloned().collect())
    }

    fn put_meta(&self, meta: &RunMeta, lease: Option<&Lease>) -> Result<()> {
        let mut state = self.state();
        state.fence(&meta.run_id, lease, self.clock.now_ms())?;
        state.metas.insert(meta.run_id.clone(), meta.clone());
        Ok(())
    }

    fn get_meta(&self, run: &RunId) -> Result<Option<RunMeta>> {
        Ok(self.state().metas.get(run).cloned())
    }

    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunMeta>> {
        let metas = self.state().metas.values().filter(|meta| filter.matches(meta)).cloned().collect();
        Ok(common::select_runs(metas, filter))
    }

    fn leases(&self) -> Option<&dyn LeasableStore> {
        Some(self)
    }

    fn delete(&self, run: &RunId, lease: Option<&Lease>) -> Result<()> {
        let mut state = self.state();
        state.fence(run, lease, self.clock.now_ms())?;
        state.journals.remove(run);
        state.metas.remove(run);
        state.leases.remove(run);
        Ok(())
    }
}

impl MemoryStore {
    /// Grants the run's lease when no live lease holds it, or when the live one is `stale`.
    fn grant(&self, run: &RunId, owner: &str, ttl: Duration, stale: Option<&Lease>) -> Result<Lease> {
        let now_ms = self.clock.now_ms();
        let mut state = self.state();
        if let Some(held) = state.leases.get(run).filter(|held| held.is_live(now_ms)) {
            let taken_from = stale.is_some_and(|s| s.owner == held.owner && s.epoch == held.epoch);
            if !taken_from {
                return Err(common::held_by(run, held));
            }
        }
        let high_water = state.epochs.entry(run.clone()).or_insert(0);
        *high_water += 1;
        let epoch = *high_water;
        let held = HeldLease { owner: owner.to_owned(), epoch, expires_at_ms: common::expiry(now_ms, ttl) };
        state.leases.insert(run.clone(), held);
        Ok(Lease { run_id: run.clone(), owner: owner.to_owned(), epoch })
    }
}

impl LeasableStore for MemoryStore {
    fn acquire(&self, run: &RunId, owner: &str, ttl: Duration) -> Result<Lease> {
        self.grant(run, owner, ttl, None)
    }

    fn holder(&self, run: &RunId) -> Result<Option<Lease>> {
        let now_ms = self.clock.now_ms();
        let state = self.state();
        Ok(state.leases.get(run).filter(|held| held.is_live(now_ms)).map(|held| Lease {
            run_id: run.clone(),
            owner: held.owner.clone(),
            epoch: held.epoch,
        }))
    }

    fn take_over(&self, stale: &Lease, owner: &str, ttl: Duration) -> Result<Lease> {
        self.grant(&stale.run_id, owner, ttl, Some(stale))
    }

    fn renew(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        let now_ms = self.clock.now_ms();
        let mut state = self.state();
        let run = &lease.run_id;
        common::check_lease(run, lease, state.leases.get(run), now_ms)?;
        if let Some(held) = state.leases.get_mut(run) {
            held.expires_at_ms = common::expiry(now_ms, ttl);
        }
        Ok(())
    }

    fn release(&self, lease: &Lease) -> Result<()> {
        let mut state = self.state();
        let run = &lease.run_id;
        common::check_lease(run, lease, state.leases.get(run), self.clock.now_ms())?;
        state.leases.remove(run);
        Ok(())
    }
}

impl TranscriptStore for MemoryStore {
    fn put_new(&self, blob_ref: &str, blob: &[u8]) -> Result<bool> {
        common::parse_blob_ref(blob_ref)?;
        let mut state = self.state();
        if state.blobs.contains_key(blob_ref) {
            return Ok(false);
        }
        state.blobs.insert(blob_ref.to_owned(), blob.to_vec());
        Ok(true)
    }

    fn put(&self, blob_ref: &str, blob: &[u8]) -> Result<()> {
        common::parse_blob_ref(blob_ref)?;
        self.state().blobs.insert(blob_ref.to_owned(), blob.to_vec());
        Ok(())
    }

    fn get(&self, blob_ref: &str) -> Result<Option<Vec<u8>>> {
        common::parse_blob_ref(blob_ref)?;
        Ok(self.state().blobs.get(blob_ref).cloned())
    }

    fn list(&self, run: &RunId) -> Result<Vec<String>> {
        let prefix = format!("{run}/");
        let state = self.state();
        let refs = state
            .blobs
            .range(prefix.clone()..)
            .map(|(key, _)| key)
            .take_while(|key| key.starts_with(&prefix));
        Ok(refs.cloned().collect())
    }

    fn delete(&self, blob_ref: &str) -> Result<()> {
        common::parse_blob_ref(blob_ref)?;
        self.state().blobs.remove(blob_ref);
        Ok(())
    }
}

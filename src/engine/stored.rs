//! Journaled entries read back on demand: the resident index ([`crate::journal::Replay`])
//! points a matched call at a seq, and the entry (its value, its answer) is read from the
//! store when the call is served, then dropped. A replay usually goes forward through the
//! journal, so each read takes a page ahead and keeps it in a small cache, bounded in bytes,
//! from which the next served calls are taken (and removed).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::error::Error;
use crate::journal::{self, Entry, Match, Pointer, Seq};
use crate::store::{JournalStore, RawEntry, RunId};

/// How many entries one read takes ahead of the one asked for.
const READ_AHEAD: usize = 64;

/// At most this many bytes of stored text wait in the cache.
const CACHE_BYTES: usize = 4 << 20;

/// A run's stored entries, read by seq.
#[derive(Debug)]
pub(crate) struct StoredEntries {
    store: Arc<dyn JournalStore>,
    run_id: RunId,
    cache: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    entries: BTreeMap<u64, RawEntry>,
    bytes: usize,
}

impl StoredEntries {
    pub(crate) fn new(store: Arc<dyn JournalStore>, run_id: RunId) -> StoredEntries {
        StoredEntries { store, run_id, cache: Mutex::new(Cache::default()) }
    }

    /// The stored entry at `seq`.
    ///
    /// # Errors
    /// `internal` when the store fails, holds no entry there, or holds one that does not decode.
    pub(crate) fn fetch(&self, seq: Seq) -> Result<Arc<Entry>, Error> {
        let cached = {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            let taken = cache.entries.remove(&seq.0);
            if let Some(raw) = &taken {
                cache.bytes -= raw.json().len();
            }
            taken
        };
        let raw = match cached {
            Some(raw) => raw,
            None => self.read_ahead(seq)?,
        };
        Ok(Arc::new(journal::decode(&raw)?))
    }

    /// A match with what it serves read from the store.
    ///
    /// # Errors
    /// As [`StoredEntries::fetch`].
    pub(crate) fn serve(&self, matched: Match<Pointer>) -> Result<Match, Error> {
        matched.try_map(|pointer| self.read(pointer))
    }

    /// The entry `pointer` names, read from the store.
    ///
    /// # Errors
    /// As [`StoredEntries::fetch`].
    pub(crate) fn read(&self, pointer: Pointer) -> Result<Arc<Entry>, Error> {
        let stored = self.fetch(pointer.seq())?;
        Ok(pointer.serve(stored))
    }

    /// Reads the page from `seq` on, keeps the rest of it in the cache and returns `seq`'s.
    fn read_ahead(&self, seq: Seq) -> Result<RawEntry, Error> {
        let missing =
            || Error::internal(format!("journal entry {seq} of run {} is not in the store", self.run_id));
        let after = seq.0.checked_sub(1).ok_or_else(missing)?;
        let page = self.store.load_page(&self.run_id, after, READ_AHEAD)?;
        let mut found = None;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        for raw in page {
            if raw.seq() == seq.0 {
                found = Some(raw);
            } else if !cache.entries.contains_key(&raw.seq()) {
                cache.bytes += raw.json().len();
                cache.entries.insert(raw.seq(), raw);
            }
        }
        // The earliest entries go first: a replay moves forward.
        while cache.bytes > CACHE_BYTES {
            let Some((_, evicted)) = cache.entries.pop_first() else { break };
            cache.bytes -= evicted.json().len();
        }
        found.ok_or_else(missing)
    }
}

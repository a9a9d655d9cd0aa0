//! L2: the journal kernel. Pure functions and data over journal entries: canonical identity,
//! scope paths, the replay disposition, scoped forward-matching, the folds (resolutions,
//! abandons, ledger) and the resume preview.
//!
//! Public for reading a run's journal: [`decode_all`] turns a store's [`RawEntry`]s into
//! typed [`Entry`]s, and [`content_key`] computes the key a call's identity input hashes to.
//! Replay, the disposition and the folds are the engine's.
//!
//! **Architecture invariant:** the kernel does no I/O and knows nothing about stores,
//! providers or scripts. It turns entries into decisions and decisions into entries; the
//! engine carries them to and from a store.

mod canon;
mod disposition;
mod entry;
mod fold;
mod index;
mod replay;
#[cfg(test)]
mod tests;

pub use canon::{
    CanonError, canonical_json, content_key, content_key_of, content_key_of_canonical, schema_hash,
};
pub(crate) use entry::intern;
pub use entry::{
    ContentKey, Entry, HASH_VERSION, IdentitySummary, InvalidScopePath, Kind, MIN_HASH_VERSION, Name,
    Payload, ScopePath, Segment, Seq, Status,
};
pub(crate) use fold::{
    ACTION_DECISION, BUDGET_OVERRIDE_DECISION, Ledger, Resolutions, SETTLE_DECISION, STOPPED_BY_SCRIPT_TIME,
    action_value, pending_waits, rekey_value, settle_value,
};
#[cfg(feature = "cli")]
pub(crate) use fold::{Settled, last_settlement_outcome};
#[cfg(any(feature = "cli", feature = "serve"))]
pub(crate) use fold::{actions, last_settlement_error};
// What the kernel's own tests reach through `super::*`.
#[cfg(test)]
use disposition::{Disposition, DispositionInput, Effective, disposition};
#[cfg(test)]
use fold::{ResolutionClass, settled_ok};
pub use index::Preview;
pub(crate) use index::{Replay, ReplayOptions, recognition};
pub use replay::Orphan;
pub(crate) use replay::{Candidate, Match, Outcome, Pointer};

use crate::store::{JournalPages, JournalStore, RawEntry, RunId};

/// A journal that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A stored entry is not a valid entry of any known shape.
    #[error("journal entry {seq} cannot be decoded: {detail}")]
    Decode {
        /// The entry's stored seq.
        seq: u64,
        /// What is wrong.
        detail: String,
    },
    /// An entry was keyed under a hash version outside this build's window.
    #[error(
        "journal entry {seq} has hash_version {found}, outside the supported window \
         {MIN_HASH_VERSION}..={HASH_VERSION}; use a cairn release that supports it"
    )]
    UnsupportedHashVersion {
        /// The entry's seq.
        seq: u64,
        /// Its hash version.
        found: u32,
    },
    /// An entry could not be encoded.
    #[error("journal entry {seq} cannot be encoded: {detail}")]
    Encode {
        /// The entry's seq.
        seq: u64,
        /// What is wrong.
        detail: String,
    },
}

impl From<Error> for crate::error::Error {
    fn from(err: Error) -> crate::error::Error {
        crate::error::Error::internal(err.to_string())
    }
}

/// Encodes an entry as its stored form: compact, single-line JSON.
///
/// # Errors
/// [`Error::Encode`] when serialization fails (it cannot for values built from JSON).
pub fn encode(entry: &Entry) -> Result<RawEntry, Error> {
    let failed = |detail: String| Error::Encode { seq: entry.seq.0, detail };
    // Sized for the envelope plus the payload up front: growing from serde_json's default
    // 128 bytes reallocated two or three times per entry.
    let payload = entry.raw_value.as_ref().map_or(0, |value| value.0.get().len());
    let mut json = Vec::with_capacity(ENVELOPE_BYTES + payload);
    serde_json::to_writer(&mut json, entry).map_err(|e| failed(e.to_string()))?;
    let json = String::from_utf8(json).map_err(|e| failed(e.to_string()))?;
    RawEntry::new(entry.seq.0, json).map_err(|e| failed(e.to_string()))
}

/// What an entry adds to a store's counters: one model call with its spend when it carries
/// cost or usage (as the cost report counts calls), nothing otherwise.
pub(crate) fn tally(entry: &Entry) -> crate::store::Tally {
    if entry.cost.is_none() && entry.usage.is_none() {
        return crate::store::Tally::default();
    }
    crate::store::Tally { calls: 1, spend: entry.cost.unwrap_or(crate::money::Money::ZERO) }
}

/// About what an entry takes besides its payload: key, scope, kind, status, usage, names.
const ENVELOPE_BYTES: usize = 384;

/// Decodes stored entries, refusing any outside the hash-version window before anything
/// else looks at them (so an incompatible journal causes no side effect).
///
/// # Errors
/// [`Error::Decode`] for an undecodable entry (or one whose text disagrees with its stored
/// seq), [`Error::UnsupportedHashVersion`] for one outside the window.
pub fn decode_all(raw: &[RawEntry]) -> Result<Vec<Entry>, Error> {
    raw.iter().map(decode_one).collect()
}

/// Like [`decode_all`], consuming the stored entries so each one's text is freed as soon as it
/// is decoded: loading a large journal never holds both forms in full.
///
/// # Errors
/// As for [`decode_all`].
pub fn decode_owned(raw: Vec<RawEntry>) -> Result<Vec<Entry>, Error> {
    let mut entries = Vec::with_capacity(raw.len());
    for item in raw {
        entries.push(decode_one(&item)?);
    }
    Ok(entries)
}

/// Decodes one stored entry (see [`decode_all`]).
///
/// # Errors
/// As for [`decode_all`].
pub fn decode(item: &RawEntry) -> Result<Entry, Error> {
    decode_one(item)
}

fn decode_one(item: &RawEntry) -> Result<Entry, Error> {
    let entry: Entry = serde_json::from_str(item.json())
        .map_err(|e| Error::Decode { seq: item.seq(), detail: e.to_string() })?;
    if entry.seq.0 != item.seq() {
        return Err(Error::Decode { seq: item.seq(), detail: format!("text says seq {}", entry.seq.0) });
    }
    check_hash_version(&entry)?;
    Ok(entry)
}

/// A journal's entries after seq `after`, decoded one at a time as they are read page by page
/// from the store: a reader holds one page, never the journal. Ends after the first failed
/// read or undecodable entry, which it yields.
pub fn entries<'s>(store: &'s dyn JournalStore, run: &RunId, after: u64) -> Entries<'s> {
    let pages = JournalPages::new(store, run, after, crate::store::PAGE_ENTRIES);
    Entries { pages, page: Vec::new().into_iter(), failed: false }
}

/// The iterator [`entries`] returns.
#[derive(Debug)]
pub struct Entries<'s> {
    pages: JournalPages<'s>,
    page: std::vec::IntoIter<RawEntry>,
    /// An entry failed to decode: nothing more is read.
    failed: bool,
}

impl Iterator for Entries<'_> {
    type Item = Result<Entry, crate::error::Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.failed {
                return None;
            }
            if let Some(raw) = self.page.next() {
                let decoded = decode_one(&raw).map_err(crate::error::Error::from);
                self.failed = decoded.is_err();
                return Some(decoded);
            }
            match self.pages.next()? {
                Ok(page) => self.page = page.into_iter(),
                Err(err) => return Some(Err(err.into())),
            }
        }
    }
}

/// Refuses an entry keyed outside the supported hash-version window.
///
/// # Errors
/// [`Error::UnsupportedHashVersion`].
pub(crate) fn check_hash_version(entry: &Entry) -> Result<(), Error> {
    if (MIN_HASH_VERSION..=HASH_VERSION).contains(&entry.hash_version) {
        Ok(())
    } else {
        Err(Error::UnsupportedHashVersion { seq: entry.seq.0, found: entry.hash_version })
    }
}

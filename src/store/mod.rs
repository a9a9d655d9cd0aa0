//! L1 storage: the traits every journal, lease and transcript backend implements, and the
//! record types that cross them.
//!
//! A store is a dumb byte mover. It keeps each journal entry as the exact JSON text it was
//! given ([`RawEntry`]) and reads exactly one envelope field, `seq`, to refuse an append that
//! is not strictly after the stored tail. It never parses, normalizes or validates a
//! payload: every fact (replay decisions, ledgers, previews) is derived above it by the
//! journal kernel. Run metadata ([`RunMeta`]) is a separate record so listing runs never
//! touches a journal.
//!
//! The traits are synchronous. Every operation is a few microseconds on a local backend, so
//! the engine calls them directly (or from its group-commit writer) instead of paying for an
//! async hop per append.
//!
//! **Architecture invariant:** `store/` knows nothing about entry kinds, statuses, scopes or
//! keys; it depends on no other cairn module but `money`, `clock` and `error`.

mod common;
pub mod conformance;
mod error;
mod jsonl;
mod memory;
mod pages;
#[cfg(feature = "postgres")]
mod postgres;
mod queue;
mod run_id;
mod sqlite;
mod url;
mod watch;

pub use error::{Error, Result};
pub use jsonl::JsonlStore;
pub use memory::MemoryStore;
pub use pages::{JournalPages, PAGE_ENTRIES, last_seq};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresOptions, PostgresStore};
pub use queue::{Claim, RunQueue};
pub use run_id::{InvalidRunId, RunId};
pub use sqlite::{DEFAULT_SQLITE_PATH, SqliteOptions, SqliteStore};
pub use url::{OpenedStore, open, open_read_only};
pub use watch::{RunChanges, RunWatch};

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::money::Money;

/// One journal entry as stored: its sequence number and its exact JSON text.
///
/// The text is one line of compact JSON (no raw `\n` or `\r`), so the JSONL store can hold
/// it verbatim; stores hand it back byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEntry {
    seq: u64,
    json: Box<str>,
}

/// Why a [`RawEntry`] could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRawEntry {
    /// The text spans lines.
    #[error("entry {seq} is not single-line JSON")]
    MultiLine {
        /// The entry's seq.
        seq: u64,
    },
    /// The text is empty.
    #[error("entry {seq} is empty")]
    Empty {
        /// The entry's seq.
        seq: u64,
    },
}

impl RawEntry {
    /// Wraps an entry's JSON text. The caller guarantees `seq` equals the text's `seq` field;
    /// the journal kernel is the only producer.
    ///
    /// # Errors
    /// [`InvalidRawEntry`] when the text is empty or spans lines.
    pub fn new(seq: u64, json: impl Into<Box<str>>) -> Result<RawEntry, InvalidRawEntry> {
        let json = json.into();
        if json.is_empty() {
            return Err(InvalidRawEntry::Empty { seq });
        }
        if memchr::memchr2(b'\n', b'\r', json.as_bytes()).is_some() {
            return Err(InvalidRawEntry::MultiLine { seq });
        }
        Ok(RawEntry { seq, json })
    }

    /// The entry's sequence number.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The entry's JSON text.
    pub fn json(&self) -> &str {
        &self.json
    }
}

/// The lifecycle status of a run, as run meta records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Started and not settled (or crashed before settling).
    Running,
    /// Settled with a value.
    Ok,
    /// Settled with an error.
    Error,
    /// Settled because it was cancelled.
    Cancelled,
    /// Settled because the budget ran out.
    Exhausted,
    /// Parked on unresolved external input.
    Suspended,
    /// Waiting in the store's run queue for a worker to claim and drive it.
    Queued,
}

impl RunStatus {
    /// The snake_case name, as persisted.
    pub const fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Ok => "ok",
            RunStatus::Error => "error",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Exhausted => "exhausted",
            RunStatus::Suspended => "suspended",
            RunStatus::Queued => "queued",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The metadata record of one run, kept apart from its journal.
///
/// Stores persist the whole record as one JSON document and hand it back field for field,
/// unknown fields included (`extra`), so a newer cairn's fields survive an older store
/// round-trip. `status`, `name`, `tags` and `created_at_ms` are also the listing keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// The run.
    pub run_id: RunId,
    /// Its lifecycle status.
    pub status: RunStatus,
    /// The workflow's name (a script's file stem, a closure workflow's registered name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Free-form labels for listing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// When the run started, in ms since the epoch.
    pub created_at_ms: i64,
    /// When the record was last written, in ms since the epoch.
    pub updated_at_ms: i64,
    /// The hash version the run's new entries are written at.
    pub hash_version: u32,
    /// The budget ceiling, fixed at run start; `None` means unbounded. Stored as
    /// `budget_ceiling_nano_usd`; records written before 0.1 named it `budget_ceiling` (read
    /// still).
    #[serde(
        default,
        rename = "budget_ceiling_nano_usd",
        alias = "budget_ceiling",
        skip_serializing_if = "Option::is_none"
    )]
    pub budget_ceiling: Option<Money>,
    /// The script dialect (`rhai`, `lua`), for script runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dialect: Option<String>,
    /// The transcript-store ref of the script source, for script runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_ref: Option<String>,
    /// The sha256 (hex) of the script source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_hash: Option<String>,
    /// The sha256 (hex) of the canonical JSON of the run's arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_hash: Option<String>,
    /// How many times the run has been started or resumed.
    #[serde(default)]
    pub segments: u32,
    /// Fields this version does not know, kept for the round trip.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl RunMeta {
    /// The record as the CLI's `--json` and the service show it: the stored fields, with the
    /// ceiling in USD beside its exact nano-USD (`budget_ceiling_usd`).
    pub fn to_output_json(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or_else(|_| serde_json::json!({}));
        if let (Some(ceiling), Some(fields)) = (self.budget_ceiling, value.as_object_mut()) {
            fields.insert("budget_ceiling_usd".into(), serde_json::json!(ceiling.as_usd()));
        }
        value
    }
}

/// Which runs [`JournalStore::list_runs`] returns. Every set field must match.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    /// Only runs in one of these statuses (any status when empty).
    pub statuses: Vec<RunStatus>,
    /// Only runs with this name.
    pub name: Option<String>,
    /// Only runs carrying every one of these tags.
    pub tags: Vec<String>,
    /// At most this many runs, newest first.
    pub limit: Option<usize>,
    /// Only runs listed after this cursor (the position of the last run of the previous
    /// page): strictly older, or as old with a smaller run id. Stable under concurrent
    /// creation and deletion, so paging never repeats or skips a run that stays put.
    pub after: Option<RunCursor>,
}

/// A position in the newest-first run listing: the `(created_at_ms, run_id)` of a listed
/// run. Written `<created_at_ms>.<run id>` so it can travel in a URL or a flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCursor {
    /// The run's creation time.
    pub created_at_ms: i64,
    /// The run.
    pub run_id: RunId,
}

impl RunCursor {
    /// The cursor just past `meta` in the listing.
    pub fn of(meta: &RunMeta) -> RunCursor {
        RunCursor { created_at_ms: meta.created_at_ms, run_id: meta.run_id.clone() }
    }

    /// Whether `meta` lists strictly after this cursor (newest first).
    pub fn precedes(&self, meta: &RunMeta) -> bool {
        (meta.created_at_ms, &meta.run_id) < (self.created_at_ms, &self.run_id)
    }
}

impl fmt::Display for RunCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.created_at_ms, self.run_id)
    }
}

/// Why a string is not a [`RunCursor`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid run cursor {0:?}: expected <created_at_ms>.<run id>")]
pub struct InvalidRunCursor(pub String);

impl FromStr for RunCursor {
    type Err = InvalidRunCursor;
    fn from_str(text: &str) -> Result<RunCursor, InvalidRunCursor> {
        let invalid = || InvalidRunCursor(text.to_owned());
        let (ms, run) = text.split_once('.').ok_or_else(invalid)?;
        let created_at_ms = ms.parse().map_err(|_| invalid())?;
        let run_id = RunId::parse(run).map_err(|_| invalid())?;
        Ok(RunCursor { created_at_ms, run_id })
    }
}

impl RunFilter {
    /// Whether `meta` passes the filter (ignoring `limit`).
    pub fn matches(&self, meta: &RunMeta) -> bool {
        self.after.as_ref().is_none_or(|cursor| cursor.precedes(meta))
            && (self.statuses.is_empty() || self.statuses.contains(&meta.status))
            && self.name.as_ref().is_none_or(|n| meta.name.as_ref() == Some(n))
            && self.tags.iter().all(|t| meta.tags.contains(t))
    }
}

/// What one appended batch adds to the store's counters. A store never parses a payload, so
/// the journal's writer says what the batch holds: its model calls (entries that carry cost
/// or usage) and their spend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Model calls settled in the batch.
    pub calls: u64,
    /// Their spend.
    pub spend: Money,
}

impl Tally {
    /// Both tallies together.
    pub fn plus(self, other: Tally) -> Tally {
        Tally { calls: self.calls.saturating_add(other.calls), spend: self.spend.saturating_add(other.spend) }
    }
}

/// The counters a store maintains as it is written, read by `/metrics` in one short query
/// instead of a fold over every journal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreCounters {
    /// Runs by status, every status with at least one run.
    pub runs: Vec<(RunStatus, u64)>,
    /// The tallies of every batch appended through [`JournalStore::append_tallied`] (deleting
    /// a run does not take its calls back: these are totals).
    pub appended: Tally,
}

impl StoreCounters {
    /// How many runs are in `status`.
    pub fn runs_in(&self, status: RunStatus) -> u64 {
        self.runs.iter().filter(|(s, _)| *s == status).map(|(_, n)| n).sum()
    }
}

/// Proof of ownership of a run, handed out by [`LeasableStore::acquire`].
///
/// `epoch` is a fencing token: strictly increasing per run across releases, expiries and
/// deletions, so a writer that lost its lease can never write again.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Lease {
    /// The leased run.
    pub run_id: RunId,
    /// Who holds it.
    pub owner: String,
    /// The fencing epoch.
    pub epoch: u64,
}

/// How hard a store works before it acknowledges a write.
///
/// Both levels make an acknowledged write survive a crash of the process; they differ on a
/// crash of the machine. `Normal` is the default because an fsync per append costs more
/// than the rest of the engine's bookkeeping together, and a power loss re-pays at most
/// the calls whose entries had not reached the disk yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Durability {
    /// Written to the operating system before an append returns: survives a process
    /// crash, and may lose the latest writes on power loss (SQLite `synchronous=NORMAL` in
    /// WAL mode; JSONL without fsync).
    Normal,
    /// Synced to stable storage before an append returns: survives power loss (SQLite
    /// `synchronous=FULL`; JSONL fsyncs every append).
    Full,
}

/// A durable, append-only journal per run, plus a run-meta record per run.
pub trait JournalStore: Send + Sync + fmt::Debug {
    /// Appends a batch atomically: all of it becomes visible, or none of it.
    ///
    /// The batch's seqs must be strictly increasing and the first strictly greater than the
    /// stored tail, else [`Error::OrderViolation`]. With a lease, the lease must be the run's
    /// current, unexpired holder, checked in the same atomic unit as the write, else
    /// [`Error::LeaseHeld`]. Returns once the batch is durable (to the store's durability
    /// setting). An empty batch is a no-op.
    ///
    /// The default appends with an empty tally ([`JournalStore::append_tallied`]).
    fn append(&self, run: &RunId, entries: &[RawEntry], lease: Option<&Lease>) -> Result<()> {
        self.append_tallied(run, entries, lease, Tally::default())
    }

    /// [`JournalStore::append`], adding `tally` to the store's counters in the same atomic
    /// unit (a store that keeps no counters ignores it). Every store implements this one; a
    /// store wrapping another hands the tally on, so the counters see every batch.
    fn append_tallied(
        &self,
        run: &RunId,
        entries: &[RawEntry],
        lease: Option<&Lease>,
        tally: Tally,
    ) -> Result<()>;

    /// The store's counters, `None` when it keeps none or they do not cover all it holds
    /// (a database written before it counted): the caller folds the journals then.
    fn counters(&self) -> Result<Option<StoreCounters>> {
        Ok(None)
    }

    /// Every entry of the run in append order (empty for an unknown run).
    fn load(&self, run: &RunId) -> Result<Vec<RawEntry>>;

    /// The run's entries after seq `after`, in append order: what a follower reads each time
    /// it looks again. The default filters [`JournalStore::load`]; SQLite and PostgreSQL read
    /// only the new rows.
    fn load_since(&self, run: &RunId, after: u64) -> Result<Vec<RawEntry>> {
        let mut entries = self.load(run)?;
        entries.retain(|entry| entry.seq() > after);
        Ok(entries)
    }

    /// At most `limit` of the run's entries after seq `after`, in append order: one page of
    /// a reader that streams a journal (`cairn replay`, `cairn inspect`, `GET
    /// /v1/runs/{id}/journal`) instead of holding all of it. The next page starts after the
    /// last seq returned; a page shorter than `limit` is the last. The default filters
    /// [`JournalStore::load_since`]; every shipped store reads only the page.
    fn load_page(&self, run: &RunId, after: u64, limit: usize) -> Result<Vec<RawEntry>> {
        let mut entries = self.load_since(run, after)?;
        entries.truncate(limit);
        Ok(entries)
    }

    /// The run's entry at seq `seq`, `None` when the run has none there (an unknown run, a
    /// seq past the tail or in a gap, seq 0): what a resumed run reads when it serves a
    /// journaled call, instead of keeping every value in memory. The default reads the page of
    /// one entry after `seq - 1`; every shipped store reads only that entry's neighbourhood.
    fn load_entry(&self, run: &RunId, seq: u64) -> Result<Option<RawEntry>> {
        let Some(after) = seq.checked_sub(1) else { return Ok(None) };
        Ok(self.load_page(run, after, 1)?.into_iter().next().filter(|entry| entry.seq() == seq))
    }

    /// The store's change notifications, when it has them: a follower of a run waits on them
    /// instead of polling. SQLite notifies the writes made through this store; PostgreSQL the
    /// writes of every process on the database. The default has none.
    fn watch(&self) -> Option<&RunWatch> {
        None
    }

    /// Creates or replaces the run's meta record (fenced like `append` when given a lease).
    fn put_meta(&self, meta: &RunMeta, lease: Option<&Lease>) -> Result<()>;

    /// The run's meta record, `None` for an unknown run.
    fn get_meta(&self, run: &RunId) -> Result<Option<RunMeta>>;

    /// The meta records passing the filter, newest first.
    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunMeta>>;

    /// Removes the run's journal, meta and lease, keeping its epoch high-water mark so a
    /// recreated run's leases still fence the deleted incarnation's. Fenced when given a
    /// lease. Deleting an unknown run is a no-op. Transcript blobs are not touched.
    fn delete(&self, run: &RunId, lease: Option<&Lease>) -> Result<()>;

    /// The store's lease capability, when it grants leases. The engine drives a run only
    /// while it holds the run's lease here, and fences every write with it; a store that
    /// grants none (the default) leaves single-driver to its user.
    fn leases(&self) -> Option<&dyn LeasableStore> {
        None
    }

    /// Who drives the run, as a reader sees it: `Some(Some(lease))` while a live lease holds
    /// it, `Some(None)` when none does (a driver that died without settling the run left it
    /// so), `None` when the store keeps no leases it can read. Writes nothing, so a store
    /// opened read-only answers too.
    ///
    /// # Errors
    /// The store's read failure.
    fn lease_holder(&self, run: &RunId) -> Result<Option<Option<Lease>>> {
        match self.leases() {
            Some(leases) => leases.holder(run).map(Some),
            None => Ok(None),
        }
    }

    /// The store's run queue, when it keeps one (SQLite and PostgreSQL do): runs enqueued
    /// here are claimed and driven by workers (`cairn worker`).
    fn queue(&self) -> Option<&dyn RunQueue> {
        None
    }
}

/// A journal store that can grant one owner at a time the right to write a run.
pub trait LeasableStore: JournalStore {
    /// Takes the run's lease for `ttl`, with an epoch strictly above every earlier one.
    ///
    /// # Errors
    /// [`Error::LeaseHeld`] while another live lease holds the run; an expired lease frees it.
    fn acquire(&self, run: &RunId, owner: &str, ttl: Duration) -> Result<Lease>;

    /// Extends a current lease by `ttl` from now.
    ///
    /// # Errors
    /// [`Error::LeaseHeld`] when the lease is no longer current.
    fn renew(&self, lease: &Lease, ttl: Duration) -> Result<()>;

    /// Gives a current lease up; the epoch counter stays.
    ///
    /// # Errors
    /// [`Error::LeaseHeld`] when the lease is no longer current.
    fn release(&self, lease: &Lease) -> Result<()>;

    /// The run's live lease, if any: who drives the run. A store that cannot tell says `None`
    /// (the default).
    ///
    /// # Errors
    /// The store's read failure.
    fn holder(&self, run: &RunId) -> Result<Option<Lease>> {
        let _ = run;
        Ok(None)
    }

    /// Takes the run's lease from `stale`, a holder the caller knows to be dead (its process
    /// is gone), without waiting for its ttl: granted when `stale` is still the current lease
    /// or no lease is live, at an epoch above every earlier one, so `stale` is fenced off.
    /// The default waits for expiry like [`LeasableStore::acquire`].
    ///
    /// # Errors
    /// [`Error::LeaseHeld`] when another live lease holds the run.
    fn take_over(&self, stale: &Lease, owner: &str, ttl: Duration) -> Result<Lease> {
        self.acquire(&stale.run_id, owner, ttl)
    }
}

/// Blobs by ref: agent transcripts, turn checkpoints, script sources.
///
/// A ref is `<run id>/<name>`, where the name may hold `/`; `list` returns a run's refs in
/// lexicographic order.
pub trait TranscriptStore: Send + Sync + fmt::Debug {
    /// Stores a blob, replacing any blob at the same ref.
    fn put(&self, blob_ref: &str, blob: &[u8]) -> Result<()>;
    /// The blob at the ref, `None` when there is none.
    fn get(&self, blob_ref: &str) -> Result<Option<Vec<u8>>>;
    /// Every ref of the run, sorted.
    fn list(&self, run: &RunId) -> Result<Vec<String>>;
    /// Removes a blob; a missing ref is a no-op.
    fn delete(&self, blob_ref: &str) -> Result<()>;
    /// Stores a blob only when the ref holds none, atomically across every process on the
    /// store: `true` when this call stored it, `false` when a blob was already there (it is
    /// left as it was). The store decides which of two racing writers wins. The default is
    /// a read then a write, atomic only for a store with one writer; cairn's stores override it.
    fn put_new(&self, blob_ref: &str, blob: &[u8]) -> Result<bool> {
        if self.get(blob_ref)?.is_some() {
            return Ok(false);
        }
        self.put(blob_ref, blob)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_file_safe() {
        assert!(RunId::parse("01HZX-run_1.a").is_ok());
        for bad in ["", ".hidden", "a/b", "a b", "..", "é", &"x".repeat(129)] {
            assert!(RunId::parse(bad).is_err(), "{bad:?} accepted");
        }
        let fresh = RunId::generate();
        assert_eq!(RunId::parse(fresh.as_str()).unwrap(), fresh);
    }

    #[test]
    fn raw_entries_are_single_line() {
        assert!(RawEntry::new(1, r#"{"seq":1}"#).is_ok());
        assert_eq!(RawEntry::new(2, "{\n}"), Err(InvalidRawEntry::MultiLine { seq: 2 }));
        assert_eq!(RawEntry::new(3, ""), Err(InvalidRawEntry::Empty { seq: 3 }));
    }

    #[test]
    fn meta_keeps_unknown_fields() {
        let text = r#"{"run_id":"r1","status":"ok","created_at_ms":1,"updated_at_ms":2,"hash_version":1,"segments":3,"future":{"x":[1,2]}}"#;
        let meta: RunMeta = serde_json::from_str(text).unwrap();
        assert_eq!(meta.extra["future"], serde_json::json!({"x":[1,2]}));
        let back: serde_json::Value = serde_json::to_value(&meta).unwrap();
        assert_eq!(back, serde_json::from_str::<serde_json::Value>(text).unwrap());
    }

    /// A record written before the ceiling carried its unit still reads; it is written back,
    /// and shown, with the unit.
    #[test]
    fn meta_ceiling_carries_its_unit_and_old_records_read() {
        let old = r#"{"run_id":"r1","status":"ok","created_at_ms":1,"updated_at_ms":2,"hash_version":1,"budget_ceiling":1500000000}"#;
        let meta: RunMeta = serde_json::from_str(old).unwrap();
        assert_eq!(meta.budget_ceiling, Some(Money::from_nano_usd(1_500_000_000)));
        assert!(meta.extra.is_empty(), "{:?}", meta.extra);
        let stored = serde_json::to_value(&meta).unwrap();
        assert_eq!(stored["budget_ceiling_nano_usd"], 1_500_000_000);
        assert!(stored.get("budget_ceiling").is_none() && stored.get("budget_ceiling_usd").is_none());
        let shown = meta.to_output_json();
        assert_eq!(shown["budget_ceiling_nano_usd"], 1_500_000_000);
        assert_eq!(shown["budget_ceiling_usd"], 1.5);
        let again: RunMeta = serde_json::from_value(stored).unwrap();
        assert_eq!(again, meta);
    }
}

//! The SQLite store, cairn's default: journals, run meta, leases with fencing epochs and
//! blobs in one WAL-mode database file that several processes may share.
//!
//! Every mutation runs in one `BEGIN IMMEDIATE` transaction that takes the database's write
//! lock first, so a lease check and the write it guards commit as one unit: a takeover from
//! another process cannot land between them. Entries are kept as their exact text
//! (`entries.json`), and run meta as its whole JSON document (`runs.meta_json`) with the
//! listing keys copied into indexed columns and a tag table, so a listing never parses a
//! journal and never drops a match.
//!
//! Appends that arrive together share one transaction (group commit): the first appender
//! becomes the leader, takes every queued batch and commits them together, each under its
//! own savepoint so one batch's order or lease violation fails only that batch. With
//! `synchronous=FULL` this turns one fsync per append into one per group.
//!
//! Reads (`load`, `get_meta`, `list_runs`, blob reads) use a small pool of separate
//! connections, which WAL lets run beside the writer; WAL checkpoints run on a thread of
//! their own (see `checkpoint`).
//!
//! Journal rows are keyed by one integer, the run's number (assigned on its first append, and
//! never reused) in the high 32 bits and the seq in the low 32. An append then lands at the
//! right edge of one rowid b-tree, which SQLite extends with a single page write; a composite
//! `(run_id, seq)` key keeps the whole row in every interior page and made each commit
//! rewrite three pages on average.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior, params};

mod checkpoint;
mod follow;
mod queue;

use self::checkpoint::Checkpointer;
use super::common::{self, HeldLease};
use super::{
    Durability, Error, JournalStore, LeasableStore, Lease, RawEntry, Result, RunFilter, RunId, RunMeta,
    TranscriptStore,
};
use crate::clock::{Clock, SharedClock, SystemClock};

/// Where the CLI and `store::open("sqlite")` keep the database, relative to the working
/// directory.
pub const DEFAULT_SQLITE_PATH: &str = ".cairn/cairn.db";

/// The schema this build writes; a database stamped higher was made by a newer cairn, one
/// stamped lower is migrated on open.
const SCHEMA_VERSION: i64 = 2;

/// cairn's `PRAGMA application_id` ("cair"): a database stamped with another id is some other
/// program's, and cairn neither reads nor writes it.
pub(crate) const APPLICATION_ID: i32 = 0x6361_6972;

/// The low bits of a journal row's key that hold the seq; the run's number is above them.
const SEQ_BITS: u32 = 32;

/// The most runs one database can number: the key range of the highest run, up to
/// `(number + 1) << 32`, must stay a positive 64-bit integer.
const MAX_RUN_NUMBER: i64 = (1 << 31) - 2;

/// How long opening keeps retrying a schema bootstrap that collides with another process
/// opening the same fresh file.
const BOOT_RETRY_FOR: Duration = Duration::from_secs(10);

/// How to open a [`SqliteStore`].
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// `synchronous=NORMAL` (the default) or `FULL`.
    pub durability: Durability,
    /// Reads lease expiry; inject a [`ManualClock`](crate::ManualClock) to test expiry
    /// without sleeping.
    pub clock: SharedClock,
    /// How long a write waits for another connection's (or process's) write lock before
    /// failing with [`Error::Sqlite`] (`SQLITE_BUSY`).
    pub busy_timeout: Duration,
    /// Whether concurrent appends share a transaction. On by default; off measures (and
    /// tests) the one-transaction-per-append path.
    pub group_commit: bool,
    /// WAL pages after which the store's checkpoint thread copies the log back into the
    /// database at the writer's next pause (SQLite's own default threshold is 1,000). At four
    /// times this, a commit checkpoints inline, so the log stays bounded however fast the
    /// writer appends.
    pub checkpoint_pages: u32,
}

impl SqliteOptions {
    /// `synchronous=NORMAL`, the system clock, a 5 s busy timeout and group commit.
    #[allow(clippy::new_without_default)] // Options are spelled out where a store is opened.
    pub fn new() -> SqliteOptions {
        SqliteOptions {
            durability: Durability::Normal,
            clock: Arc::new(SystemClock),
            busy_timeout: Duration::from_secs(5),
            group_commit: true,
            checkpoint_pages: 1_000,
        }
    }
}

/// A [`JournalStore`], [`LeasableStore`] and [`TranscriptStore`] over one SQLite file.
pub struct SqliteStore {
    path: PathBuf,
    options: SqliteOptions,
    /// The one connection that writes; every write transaction holds it.
    writer: Mutex<Connection>,
    /// Idle read connections, reused; a reader takes one or opens another.
    readers: Mutex<Vec<Connection>>,
    /// Appends waiting for a group commit, and the outcomes of committed ones.
    group: Mutex<Group>,
    /// Wakes appenders when a group's outcomes are in.
    group_done: Condvar,
    /// Run numbers seen committed; a number, once assigned, never changes.
    numbers: RunNumbers,
    /// Dropped after the writer's last use: it holds the WAL hook's other end. None for a
    /// read-only store.
    _checkpointer: Option<Checkpointer>,
    /// Opened read-only: every write is refused, and nothing ever touches the file.
    read_only: bool,
    /// Wakes the followers of a run this store wrote.
    watch: super::RunWatch,
    /// Starts the thread that notices other processes' writes, once followed.
    follow: std::sync::Once,
    /// Read-only and read as immutable: the database lies where its WAL index cannot be made
    /// (a read-only directory or mount), so no writer can be changing it either.
    immutable: bool,
}

/// Each run's number, the high half of its journal rows' keys: a cache of the
/// `run_numbers` table, which never changes a number once assigned.
#[derive(Default)]
struct RunNumbers(Mutex<HashMap<RunId, i64>>);

/// How many run numbers a store remembers before it starts over (a long-lived process
/// touches ever more runs; a forgotten number costs one indexed read).
const REMEMBERED_RUNS: usize = 4_096;

impl RunNumbers {
    fn get(&self, run: &RunId) -> Option<i64> {
        lock(&self.0).get(run).copied()
    }

    fn remember(&self, run: &RunId, number: i64) {
        let mut numbers = lock(&self.0);
        if numbers.len() >= REMEMBERED_RUNS && !numbers.contains_key(run) {
            numbers.clear();
        }
        numbers.entry(run.clone()).or_insert(number);
    }
}

#[derive(Default)]
struct Group {
    /// Batches no leader has taken yet.
    queue: Vec<Pending>,
    /// Outcomes by ticket, until their appender picks them up.
    done: HashMap<u64, Result<()>>,
    /// Whether a leader is committing right now.
    leading: bool,
    /// How many appenders wait for a leader; a lone appender skips the wake-up syscall.
    waiting: usize,
    next_ticket: u64,
}

/// One append waiting in (or taken from) the group queue.
struct Pending {
    ticket: u64,
    run: RunId,
    entries: Vec<RawEntry>,
    lease: Option<Lease>,
    tally: super::Tally,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS run_numbers (
    run_id TEXT PRIMARY KEY,
    number INTEGER NOT NULL UNIQUE
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS journal (
    key INTEGER PRIMARY KEY,
    json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    name TEXT,
    created_at_ms INTEGER NOT NULL,
    meta_json TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS runs_by_created ON runs (created_at_ms, run_id);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, created_at_ms, run_id);
CREATE INDEX IF NOT EXISTS runs_by_name ON runs (name, created_at_ms, run_id);
CREATE TABLE IF NOT EXISTS run_tags (
    tag TEXT NOT NULL,
    run_id TEXT NOT NULL,
    PRIMARY KEY (tag, run_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS run_tags_by_run ON run_tags (run_id);
CREATE TABLE IF NOT EXISTS leases (
    run_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS epochs (
    run_id TEXT PRIMARY KEY,
    high_water INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS blobs (
    ref TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS blobs_by_run ON blobs (run_id, ref);
";

impl SqliteStore {
    /// Opens (creating) the database at `path`, creating its parent directories.
    ///
    /// Safe to call from several processes at once over one fresh file: the schema
    /// bootstrap is idempotent and retried while another opener holds the lock.
    ///
    /// # Errors
    /// [`Error::Config`] for `:memory:` or a database from a newer cairn; [`Error::Io`] when
    /// the directory cannot be made; [`Error::Sqlite`] when the file cannot be opened.
    pub fn open(path: &Path, options: SqliteOptions) -> Result<SqliteStore> {
        if path.as_os_str().is_empty() || path == Path::new(":memory:") {
            return Err(Error::Config(format!(
                "sqlite store path {path:?} is not a file; use the memory store for a throwaway store"
            )));
        }
        if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let started = Instant::now();
        let mut writer = loop {
            match open_writer(path, &options) {
                Err(Error::Sqlite(err)) if is_busy(&err) && started.elapsed() < BOOT_RETRY_FOR => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => break other?,
            }
        };
        let checkpointer = Checkpointer::start(&mut writer, path, &options)?;
        Ok(SqliteStore {
            path: path.to_path_buf(),
            options,
            writer: Mutex::new(writer),
            readers: Mutex::new(Vec::new()),
            group: Mutex::new(Group::default()),
            group_done: Condvar::new(),
            numbers: RunNumbers::default(),
            _checkpointer: Some(checkpointer),
            read_only: false,
            immutable: false,
            watch: super::RunWatch::new(),
            follow: std::sync::Once::new(),
        })
    }

    /// Opens an existing database for reading only: no WAL switch, no migration, no write of
    /// any kind, so a read leaves the file byte for byte as it was. `Ok(None)` when there is
    /// no file at `path`.
    ///
    /// # Errors
    /// [`Error::Config`] for a file that is not a cairn store (another program's database, or
    /// not SQLite at all), a store from a newer cairn, or a version-1 store (open it once for
    /// writing to migrate it); [`Error::Sqlite`] when the file cannot be read.
    pub fn open_read_only(path: &Path, options: SqliteOptions) -> Result<Option<SqliteStore>> {
        if !path.is_file() {
            return Ok(None);
        }
        let mut conn = open_connection(path, &options, true)?;
        let mut immutable = false;
        let identity = match check_identity(&conn, path) {
            // A reader of a WAL database needs its `-shm` index beside it; where that cannot
            // be made, nobody can write there either, so the file is read as it stands.
            Err(Error::Sqlite(err))
                if matches!(err.sqlite_error_code(), Some(ErrorCode::ReadOnly | ErrorCode::CannotOpen)) =>
            {
                conn = open_immutable(path, &options)?;
                immutable = true;
                check_identity(&conn, path)?
            }
            other => other?,
        };
        match identity {
            Identity::Fresh => {
                return Err(Error::Config(format!(
                    "{} is an empty database, not a cairn store",
                    path.display()
                )));
            }
            Identity::Cairn { version } if version < SCHEMA_VERSION => {
                return Err(Error::Config(format!(
                    "sqlite store {} has schema version {version}; open it once with a writing command \
                     (cairn run or resume) to migrate it",
                    path.display()
                )));
            }
            Identity::Cairn { .. } => {}
        }
        Ok(Some(SqliteStore {
            path: path.to_path_buf(),
            options,
            writer: Mutex::new(conn),
            readers: Mutex::new(Vec::new()),
            group: Mutex::new(Group::default()),
            group_done: Condvar::new(),
            numbers: RunNumbers::default(),
            _checkpointer: None,
            read_only: true,
            immutable,
            watch: super::RunWatch::new(),
            follow: std::sync::Once::new(),
        }))
    }

    /// The refusal of a write to a read-only store.
    fn refuse_write(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::Config(format!("sqlite store {} is open read-only", self.path.display())));
        }
        Ok(())
    }

    /// Opens the database at [`DEFAULT_SQLITE_PATH`].
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    pub fn open_default(options: SqliteOptions) -> Result<SqliteStore> {
        SqliteStore::open(Path::new(DEFAULT_SQLITE_PATH), options)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction on the writer, committing when it
    /// succeeds and rolling back when it fails.
    fn write<T>(&self, f: impl FnOnce(&Connection, i64) -> Result<T>) -> Result<T> {
        self.refuse_write()?;
        let conn = lock(&self.writer);
        let tx = Immediate::begin(&conn)?;
        // Read the clock only once the write lock is held: that is the instant the fence
        // check and the write take effect.
        let value = f(&conn, self.options.clock.now_ms())?;
        tx.commit()?;
        Ok(value)
    }

    /// Runs `f` on an idle read connection.
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let idle = lock(&self.readers).pop();
        let conn = match idle {
            Some(conn) => conn,
            None if self.immutable => open_immutable(&self.path, &self.options)?,
            None => open_connection(&self.path, &self.options, self.read_only)?,
        };
        let value = f(&conn);
        lock(&self.readers).push(conn);
        value
    }

    fn append_grouped(
        &self,
        run: &RunId,
        entries: &[RawEntry],
        lease: Option<&Lease>,
        tally: super::Tally,
    ) -> Result<()> {
        let mut group = lock(&self.group);
        let ticket = group.next_ticket;
        group.next_ticket += 1;
        group.queue.push(Pending {
            ticket,
            run: run.clone(),
            entries: entries.to_vec(),
            lease: lease.cloned(),
            tally,
        });
        loop {
            if let Some(outcome) = group.done.remove(&ticket) {
                return outcome;
            }
            if group.leading {
                group.waiting += 1;
                group = self.group_done.wait(group).unwrap_or_else(PoisonError::into_inner);
                group.waiting -= 1;
                continue;
            }
            group.leading = true;
            let batch = std::mem::take(&mut group.queue);
            drop(group);
            let mut leader = Leader { store: self, batch: &batch, outcomes: None };
            leader.outcomes =
                Some(commit_group(&lock(&self.writer), &*self.options.clock, &self.numbers, &batch));
            drop(leader);
            group = lock(&self.group);
        }
    }
}

/// Hands a leader's outcomes to the waiting appenders and steps down, also when the
/// commit panicked: then every batch of the group fails, and nobody waits forever.
struct Leader<'a> {
    store: &'a SqliteStore,
    batch: &'a [Pending],
    outcomes: Option<Vec<Result<()>>>,
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        let outcomes = self
            .outcomes
            .take()
            .unwrap_or_default()
            .into_iter()
            .map(Some)
            .chain(std::iter::repeat_with(|| None));
        let mut group = lock(&self.store.group);
        for (pending, outcome) in self.batch.iter().zip(outcomes) {
            let outcome =
                outcome.unwrap_or_else(|| Err(Error::Io(io::Error::other("group commit leader panicked"))));
            group.done.insert(pending.ticket, outcome);
        }
        group.leading = false;
        if group.waiting > 0 {
            self.store.group_done.notify_all();
        }
    }
}

/// Commits a group of appends in one transaction, each batch under its own savepoint.
/// Returns one outcome per batch, in order.
fn commit_group(
    conn: &Connection,
    clock: &dyn Clock,
    numbers: &RunNumbers,
    batch: &[Pending],
) -> Vec<Result<()>> {
    let tx = match Immediate::begin(conn) {
        Ok(tx) => tx,
        Err(err) => return batch.iter().map(|_| Err(duplicate(&err))).collect(),
    };
    let now_ms = clock.now_ms();
    let mut outcomes = Vec::with_capacity(batch.len());
    if let [single] = batch {
        // One batch needs no savepoint: the transaction is the unit.
        outcomes.push(append_in(conn, numbers, single, now_ms));
    } else {
        for pending in batch {
            match in_savepoint(conn, || append_in(conn, numbers, pending, now_ms)) {
                Ok(outcome) => outcomes.push(outcome),
                // A savepoint that cannot be taken, released or rolled back may leave part of
                // a failed batch in the transaction: give the whole group up.
                Err(err) => return batch.iter().map(|_| Err(duplicate(&err))).collect(),
            }
        }
    }
    if outcomes.iter().all(Result::is_err) {
        // Nothing to commit; dropping the transaction rolls it back.
        return outcomes.into_iter().map(|outcome| outcome.map(drop)).collect();
    }
    match tx.commit() {
        Ok(()) => {
            // Only now are numbers assigned in this transaction settled.
            for (pending, outcome) in batch.iter().zip(&outcomes) {
                if let Ok(number) = outcome {
                    numbers.remember(&pending.run, *number);
                }
            }
            outcomes.into_iter().map(|outcome| outcome.map(drop)).collect()
        }
        Err(err) => outcomes.into_iter().map(|outcome| outcome.and(Err(duplicate(&err)))).collect(),
    }
}

/// Runs `f` under a savepoint, rolled back (and released) when `f` fails. The outer error
/// is the savepoint's own failure; the inner result is `f`'s.
fn in_savepoint<T>(conn: &Connection, f: impl FnOnce() -> Result<T>) -> Result<Result<T>> {
    run_cached(conn, "SAVEPOINT batch")?;
    match f() {
        Ok(value) => run_cached(conn, "RELEASE batch").map(|()| Ok(value)),
        Err(err) => {
            run_cached(conn, "ROLLBACK TO batch")?;
            run_cached(conn, "RELEASE batch")?;
            Ok(Err(err))
        }
    }
}

/// Runs a parameterless statement through the statement cache.
fn run_cached(conn: &Connection, sql: &str) -> Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

/// A `BEGIN IMMEDIATE` transaction that rolls back unless committed.
///
/// rusqlite's own transaction re-parses `BEGIN` and `COMMIT` on every use, a measurable
/// share of a one-entry append; these go through the statement cache.
struct Immediate<'c> {
    conn: &'c Connection,
    committed: bool,
}

impl<'c> Immediate<'c> {
    fn begin(conn: &'c Connection) -> Result<Immediate<'c>> {
        run_cached(conn, "BEGIN IMMEDIATE")?;
        Ok(Immediate { conn, committed: false })
    }

    fn commit(mut self) -> Result<()> {
        run_cached(self.conn, "COMMIT")?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Immediate<'_> {
    fn drop(&mut self) {
        if !self.committed && !self.conn.is_autocommit() {
            // Nothing to report to: the caller is already returning the error that brought
            // it here, and a failed rollback leaves SQLite to roll back on the next BEGIN.
            let _ = run_cached(self.conn, "ROLLBACK");
        }
    }
}

/// One batch's fence check, order check and inserts, inside the caller's transaction.
/// Returns the run's number (assigned here if this is the run's first append).
fn append_in(conn: &Connection, numbers: &RunNumbers, pending: &Pending, now_ms: i64) -> Result<i64> {
    let run = &pending.run;
    fence(conn, run, pending.lease.as_ref(), now_ms)?;
    let number = match numbers.get(run) {
        Some(number) => number,
        None => assign_number(conn, run)?,
    };
    let keys = key_range(number);
    let tail: Option<i64> = conn
        .prepare_cached("SELECT key FROM journal WHERE key >= ?1 AND key < ?2 ORDER BY key DESC LIMIT 1")?
        .query_row([keys.start, keys.end], |row| row.get(0))
        .optional()?;
    common::check_tail(run, tail.map(seq_of).transpose()?, &pending.entries)?;
    let mut insert = conn.prepare_cached("INSERT INTO journal (key, json) VALUES (?1, ?2)")?;
    for entry in &pending.entries {
        insert.execute(params![row_key(run, number, entry.seq())?, entry.json()])?;
    }
    let tally = pending.tally;
    if tally != super::Tally::default() {
        let mut add = conn.prepare_cached(
            "INSERT INTO counters (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
        )?;
        add.execute(params!["calls", i64::try_from(tally.calls).unwrap_or(i64::MAX)])?;
        add.execute(params!["spend_nano_usd", tally.spend.nano_usd()])?;
    }
    Ok(number)
}

/// The run's number, if it has one (in the caller's snapshot).
fn find_number(conn: &Connection, run: &RunId) -> Result<Option<i64>> {
    Ok(conn
        .prepare_cached("SELECT number FROM run_numbers WHERE run_id = ?1")?
        .query_row([run.as_str()], |row| row.get(0))
        .optional()?)
}

/// The run's number, assigned (one above the highest so far) inside the caller's write
/// transaction when the run has none.
fn assign_number(conn: &Connection, run: &RunId) -> Result<i64> {
    if let Some(number) = find_number(conn, run)? {
        return Ok(number);
    }
    let highest: i64 = conn
        .prepare_cached("SELECT COALESCE(MAX(number), 0) FROM run_numbers")?
        .query_row([], |row| row.get(0))?;
    if highest >= MAX_RUN_NUMBER {
        return Err(Error::Config(format!(
            "the sqlite store holds its limit of {MAX_RUN_NUMBER} runs; start a new database"
        )));
    }
    conn.prepare_cached("INSERT INTO run_numbers (run_id, number) VALUES (?1, ?2)")?
        .execute(params![run.as_str(), highest + 1])?;
    Ok(highest + 1)
}

/// The keys of a run's journal rows.
fn key_range(number: i64) -> std::ops::Range<i64> {
    debug_assert!((1..=MAX_RUN_NUMBER).contains(&number));
    (number << SEQ_BITS)..((number + 1) << SEQ_BITS)
}

/// The key of one journal row.
fn row_key(run: &RunId, number: i64, seq: u64) -> Result<i64> {
    if seq >= 1 << SEQ_BITS {
        return Err(Error::Config(format!(
            "seq {seq} of run {run} exceeds the sqlite store's limit of {}",
            (1u64 << SEQ_BITS) - 1
        )));
    }
    Ok((number << SEQ_BITS) | seq as i64)
}

/// The seq a stored key holds; a key outside every run's range means a damaged database.
fn seq_of(key: i64) -> Result<u64> {
    if key < 0 {
        return Err(Error::Corrupt {
            what: "sqlite store".into(),
            detail: format!("negative journal key {key}"),
        });
    }
    Ok((key & ((1 << SEQ_BITS) - 1)) as u64)
}

/// Checks a given lease against the run's lease row, inside the caller's transaction.
fn fence(conn: &Connection, run: &RunId, lease: Option<&Lease>, now_ms: i64) -> Result<()> {
    match lease {
        Some(lease) => common::check_lease(run, lease, held_lease(conn, run)?.as_ref(), now_ms),
        None => Ok(()),
    }
}

fn held_lease(conn: &Connection, run: &RunId) -> Result<Option<HeldLease>> {
    let row = conn
        .prepare_cached("SELECT owner, epoch, expires_at_ms FROM leases WHERE run_id = ?1")?
        .query_row([run.as_str()], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?, row.get(2)?)))
        .optional()?;
    row.map(|(owner, epoch, expires_at_ms)| {
        Ok(HeldLease { owner, epoch: stored_epoch(epoch)?, expires_at_ms })
    })
    .transpose()
}

/// A stored epoch read back; negative only in a damaged database.
fn stored_epoch(value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| Error::Corrupt {
        what: "sqlite store".into(),
        detail: format!("negative lease epoch {value}"),
    })
}

fn configure(conn: &Connection, options: &SqliteOptions) -> Result<()> {
    conn.busy_timeout(options.busy_timeout)?;
    conn.set_prepared_statement_cache_capacity(64);
    // Without the query planner stability guarantee, SQLite marks statements whose plan
    // could depend on a bound value as expired whenever their bindings are cleared (which
    // the statement cache does on every return), so every cached statement was re-parsed
    // and re-planned per use. Our statements have one sensible plan each.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    let synchronous = match options.durability {
        Durability::Normal => "NORMAL",
        Durability::Full => "FULL",
    };
    conn.execute_batch(&format!("PRAGMA synchronous = {synchronous}; PRAGMA foreign_keys = OFF;"))?;
    Ok(())
}

fn open_flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

/// Opens the writing connection: WAL mode, then the schema, idempotently.
fn open_writer(path: &Path, options: &SqliteOptions) -> Result<Connection> {
    let mut conn = Connection::open_with_flags(path, open_flags())?;
    configure(&conn, options)?;
    // Before anything writes: another program's database is left exactly as it is.
    check_identity(&conn, path)?;
    // A new database gets 2 KiB pages (an existing one keeps its own): a quick call's commit
    // rewrites the journal's right-edge leaf, so the log grows by a page per call, and each
    // byte of it is written, fsynced and copied back at a checkpoint. Half the page, half
    // the log: 2.7 µs less per sequential call through the binary (`benches/binary.rs`).
    conn.execute_batch("PRAGMA page_size = 2048")?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::Config(format!(
            "sqlite store {} cannot use WAL mode (got {mode}); put it on a local file system",
            path.display()
        )));
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(Error::Config(format!(
            "sqlite store {} has schema version {version}, newer than this cairn's {SCHEMA_VERSION}; \
             use a newer cairn",
            path.display()
        )));
    }
    if version < SCHEMA_VERSION {
        tx.execute_batch(SCHEMA)?;
        if version == 1 {
            migrate_v1(&tx)?;
        }
        tx.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}"))?;
    }
    // The run queue's tables are additive: created on every write open of a store without
    // them, so older stores gain a queue without a version change (and older cairns ignore it).
    tx.execute_batch(queue::SCHEMA)?;
    queue::upgrade(&tx)?;
    // The append counters cover the journal only when they started with it: a database
    // that already held journal rows is marked uncounted, and `/metrics` folds it.
    tx.execute(
        "INSERT OR IGNORE INTO counters (name, value) VALUES ('counted', (SELECT NOT EXISTS (SELECT 1 FROM journal)))",
        [],
    )?;
    // Stores made before cairn stamped its id get it on their first write open.
    let id: i32 = tx.query_row("PRAGMA application_id", [], |row| row.get(0))?;
    if id != APPLICATION_ID {
        tx.execute_batch(&format!("PRAGMA application_id = {APPLICATION_ID}"))?;
    }
    tx.commit()?;
    Ok(conn)
}

/// Moves a version-1 journal (rows keyed by `(run_id, seq)`) into the numbered `journal`
/// table, inside the opening transaction: a crash mid-way leaves the version-1 database as it
/// was.
fn migrate_v1(tx: &Connection) -> Result<()> {
    let out_of_range: i64 =
        tx.query_row("SELECT COUNT(*) FROM entries WHERE seq < 0 OR seq >= ?1", [1i64 << SEQ_BITS], |row| {
            row.get(0)
        })?;
    if out_of_range > 0 {
        return Err(Error::Corrupt {
            what: "sqlite store".into(),
            detail: format!("{out_of_range} journal entries have a seq outside 0..2^{SEQ_BITS}"),
        });
    }
    tx.execute_batch(&format!(
        "INSERT INTO run_numbers (run_id, number)
             SELECT run_id, ROW_NUMBER() OVER (ORDER BY run_id) FROM (SELECT DISTINCT run_id FROM entries);
         INSERT INTO journal (key, json)
             SELECT (numbers.number << {SEQ_BITS}) | entries.seq, entries.json
             FROM entries JOIN run_numbers AS numbers USING (run_id) ORDER BY numbers.number, entries.seq;
         DROP TABLE entries;"
    ))?;
    Ok(())
}

/// What a database file is, as far as cairn is concerned.
enum Identity {
    /// No tables yet: a new store.
    Fresh,
    /// A cairn store at this schema version.
    Cairn { version: i64 },
}

/// Tells a cairn store from anything else, reading only: the application id, else (for stores
/// made before cairn stamped it) the schema version and cairn's tables.
///
/// # Errors
/// [`Error::Config`] for another program's database, a file that is not SQLite, or a store
/// from a newer cairn.
fn check_identity(conn: &Connection, path: &Path) -> Result<Identity> {
    // One read transaction, so the header and the table list come from one snapshot: read
    // apart, a store another process is creating at this instant shows its tables without
    // their schema version, and would be refused as someone else's database.
    conn.execute_batch("BEGIN DEFERRED")?;
    let identity = read_identity(conn, path);
    let end = conn.execute_batch(if identity.is_ok() { "COMMIT" } else { "ROLLBACK" });
    let identity = identity?;
    end?;
    Ok(identity)
}

fn read_identity(conn: &Connection, path: &Path) -> Result<Identity> {
    let not_ours = |why: String| {
        Error::Config(format!(
            "{} is not a cairn store ({why}); it was left untouched: point --store at a cairn database",
            path.display()
        ))
    };
    let id: i32 = match conn.query_row("PRAGMA application_id", [], |row| row.get(0)) {
        Ok(id) => id,
        Err(err) if err.sqlite_error_code() == Some(ErrorCode::NotADatabase) => {
            return Err(not_ours("it is not a SQLite database".into()));
        }
        Err(err) => return Err(err.into()),
    };
    let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if id != APPLICATION_ID && id != 0 {
        return Err(not_ours(format!("its application_id is {id:#x}, another program's")));
    }
    if version > SCHEMA_VERSION {
        return Err(Error::Config(format!(
            "sqlite store {} has schema version {version}, newer than this cairn's {SCHEMA_VERSION}; \
             use a newer cairn",
            path.display()
        )));
    }
    let mut tables: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
        )?
        .query_map([], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    if id == APPLICATION_ID {
        return Ok(Identity::Cairn { version });
    }
    if tables.is_empty() && version == 0 {
        return Ok(Identity::Fresh);
    }
    let has = |name: &str| tables.iter().any(|t| t == name);
    let cairn_v1 = version == 1 && has("runs") && has("entries");
    let cairn_v2 = version == 2 && has("runs") && has("journal") && has("run_numbers");
    if cairn_v1 || cairn_v2 {
        return Ok(Identity::Cairn { version });
    }
    tables.truncate(5);
    Err(not_ours(format!("schema version {version}, tables: {}", tables.join(", "))))
}

/// A connection for reading: read-only to SQLite too when the store is (then it cannot
/// create or change anything), else read-write but `query_only`.
fn open_connection(path: &Path, options: &SqliteOptions, read_only: bool) -> Result<Connection> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        open_flags()
    };
    let conn = Connection::open_with_flags(path, flags)?;
    if read_only {
        conn.busy_timeout(options.busy_timeout)?;
        conn.set_prepared_statement_cache_capacity(64);
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    } else {
        configure(&conn, options)?;
    }
    conn.execute_batch("PRAGMA query_only = ON")?;
    Ok(conn)
}

/// A read-only connection to a database nobody can be writing (see `SqliteStore::immutable`):
/// SQLite reads it without its WAL index and creates nothing beside it.
fn open_immutable(path: &Path, options: &SqliteOptions) -> Result<Connection> {
    let mut uri = String::from("file:");
    for byte in path.to_string_lossy().bytes() {
        match byte {
            b'?' | b'#' | b'%' => uri.push_str(&format!("%{byte:02X}")),
            _ => uri.push(char::from(byte)),
        }
    }
    uri.push_str("?immutable=1");
    let flags =
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(&uri, flags)?;
    conn.busy_timeout(options.busy_timeout)?;
    conn.execute_batch("PRAGMA query_only = ON")?;
    Ok(conn)
}

fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(err.sqlite_error_code(), Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
}

/// A copy of an error for every batch of a failed group (the error is not `Clone`).
fn duplicate(err: &Error) -> Error {
    match err {
        Error::Sqlite(rusqlite::Error::SqliteFailure(code, message)) => {
            Error::Sqlite(rusqlite::Error::SqliteFailure(*code, message.clone()))
        }
        other => Error::Io(io::Error::other(other.to_string())),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A transaction rolls back when a panic unwinds through it, so the connection behind a
    // poisoned lock is idle and sound.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn parse_meta(run: &str, json: &str) -> Result<RunMeta> {
    serde_json::from_str(json)
        .map_err(|err| Error::Corrupt { what: format!("meta of run {run}"), detail: err.to_string() })
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("durability", &self.options.durability)
            .field("group_commit", &self.options.group_commit)
            .finish_non_exhaustive()
    }
}

impl JournalStore for SqliteStore {
    fn append(&self, run: &RunId, entries: &[RawEntry], lease: Option<&Lease>) -> Result<()> {
        self.append_tallied(run, entries, lease, super::Tally::default())
    }

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
        self.refuse_write()?;
        common::check_batch(run, entries)?;
        if let Some(last) = entries.last() {
            row_key(run, 0, last.seq())?;
        }
        if self.options.group_commit {
            return self.append_grouped(run, entries, lease, tally).inspect(|()| self.watch.notify(run));
        }
        let pending =
            Pending { ticket: 0, run: run.clone(), entries: entries.to_vec(), lease: lease.cloned(), tally };
        let number = self.write(|conn, now_ms| append_in(conn, &self.numbers, &pending, now_ms))?;
        self.numbers.remember(run, number);
        self.watch.notify(run);
        Ok(())
    }

    fn load(&self, run: &RunId) -> Result<Vec<RawEntry>> {
        self.load_since(run, 0)
    }

    fn load_since(&self, run: &RunId, after: u64) -> Result<Vec<RawEntry>> {
        self.load_page(run, after, usize::MAX)
    }

    fn load_page(&self, run: &RunId, after: u64, limit: usize) -> Result<Vec<RawEntry>> {
        // Seqs past the last one a key can hold: nothing is after them.
        let Some(first) = after.checked_add(1).filter(|first| *first < 1 << SEQ_BITS) else {
            return Ok(Vec::new());
        };
        self.read(|conn| {
            let number = match self.numbers.get(run) {
                Some(number) => number,
                None => match find_number(conn, run)? {
                    Some(number) => {
                        self.numbers.remember(run, number);
                        number
                    }
                    None => return Ok(Vec::new()),
                },
            };
            let keys = key_range(number);
            let mut select = conn.prepare_cached(
                "SELECT key, json FROM journal WHERE key >= ?1 AND key < ?2 ORDER BY key LIMIT ?3",
            )?;
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let mut rows = select.query([keys.start | first as i64, keys.end, limit])?;
            let mut entries = Vec::new();
            while let Some(row) = rows.next()? {
                let seq = seq_of(row.get(0)?)?;
                let json = row.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?;
                let entry = RawEntry::new(seq, json).map_err(|err| Error::Corrupt {
                    what: format!("journal of run {run}"),
                    detail: err.to_string(),
                })?;
                entries.push(entry);
            }
            Ok(entries)
        })
    }

    fn put_meta(&self, meta: &RunMeta, lease: Option<&Lease>) -> Result<()> {
        let run = &meta.run_id;
        let json = serde_json::to_string(meta)
            .map_err(|err| Error::Corrupt { what: format!("meta of run {run}"), detail: err.to_string() })?;
        self.write(|conn, now_ms| {
            fence(conn, run, lease, now_ms)?;
            conn.prepare_cached(
                "INSERT INTO runs (run_id, status, name, created_at_ms, meta_json) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (run_id) DO UPDATE SET status = excluded.status, name = excluded.name,
                 created_at_ms = excluded.created_at_ms, meta_json = excluded.meta_json",
            )?
            .execute(params![run.as_str(), meta.status.as_str(), meta.name, meta.created_at_ms, json])?;
            conn.prepare_cached("DELETE FROM run_tags WHERE run_id = ?1")?.execute([run.as_str()])?;
            let mut insert_tag =
                conn.prepare_cached("INSERT OR IGNORE INTO run_tags (tag, run_id) VALUES (?1, ?2)")?;
            for tag in &meta.tags {
                insert_tag.execute(params![tag, run.as_str()])?;
            }
            Ok(())
        })
        .inspect(|()| self.watch.notify(run))
    }

    fn counters(&self) -> Result<Option<super::StoreCounters>> {
        self.read(|conn| {
            let mut value = conn.prepare_cached("SELECT value FROM counters WHERE name = ?1")?;
            let mut get = |name: &str| -> Result<Option<i64>> {
                Ok(value.query_row([name], |row| row.get(0)).optional()?)
            };
            // A database that held journal rows before it counted has no `counted` mark.
            if get("counted")? != Some(1) {
                return Ok(None);
            }
            let calls = u64::try_from(get("calls")?.unwrap_or(0)).unwrap_or(0);
            let spend = crate::money::Money::from_nano_usd(get("spend_nano_usd")?.unwrap_or(0));
            let mut by_status = conn.prepare_cached("SELECT status, COUNT(*) FROM runs GROUP BY status")?;
            let mut rows = by_status.query([])?;
            let mut runs = Vec::new();
            while let Some(row) = rows.next()? {
                let status = row.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?;
                let status = serde_json::from_value(serde_json::Value::from(status)).map_err(|err| {
                    Error::Corrupt { what: "sqlite store runs".into(), detail: err.to_string() }
                })?;
                runs.push((status, u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0)));
            }
            Ok(Some(super::StoreCounters { runs, appended: super::Tally { calls, spend } }))
        })
    }

    fn get_meta(&self, run: &RunId) -> Result<Option<RunMeta>> {
        self.read(|conn| {
            let json: Option<String> = conn
                .prepare_cached("SELECT meta_json FROM runs WHERE run_id = ?1")?
                .query_row([run.as_str()], |row| row.get(0))
                .optional()?;
            json.map(|json| parse_meta(run.as_str(), &json)).transpose()
        })
    }

    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunMeta>> {
        // Every filter field becomes SQL, so the limit can apply in SQL too; the shapes are
        // few, so the statements stay cached.
        let mut sql = String::from("SELECT run_id, meta_json FROM runs WHERE 1");
        let mut args: Vec<&dyn rusqlite::ToSql> = Vec::new();
        if !filter.statuses.is_empty() {
            let marks = vec!["?"; filter.statuses.len()].join(", ");
            sql.push_str(&format!(" AND status IN ({marks})"));
        }
        let statuses: Vec<&str> = filter.statuses.iter().map(|status| status.as_str()).collect();
        args.extend(statuses.iter().map(|status| status as &dyn rusqlite::ToSql));
        if let Some(name) = &filter.name {
            sql.push_str(" AND name = ?");
            args.push(name);
        }
        for tag in &filter.tags {
            sql.push_str(" AND EXISTS (SELECT 1 FROM run_tags WHERE run_tags.tag = ? AND run_tags.run_id = runs.run_id)");
            args.push(tag);
        }
        let cursor = filter.after.as_ref().map(|cursor| (cursor.created_at_ms, cursor.run_id.as_str()));
        if let Some((created, run)) = &cursor {
            sql.push_str(" AND (created_at_ms < ? OR (created_at_ms = ? AND run_id < ?))");
            args.extend([created as &dyn rusqlite::ToSql, created, run]);
        }
        sql.push_str(" ORDER BY created_at_ms DESC, run_id DESC");
        let limit = filter.limit.map(|limit| i64::try_from(limit).unwrap_or(i64::MAX));
        if let Some(limit) = &limit {
            sql.push_str(" LIMIT ?");
            args.push(limit);
        }
        self.read(|conn| {
            let mut select = conn.prepare_cached(&sql)?;
            let mut rows = select.query(args.as_slice())?;
            let mut metas = Vec::new();
            while let Some(row) = rows.next()? {
                let run = row.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?;
                let json = row.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?;
                metas.push(parse_meta(run, json)?);
            }
            Ok(metas)
        })
    }

    fn leases(&self) -> Option<&dyn LeasableStore> {
        if self.read_only { None } else { Some(self) }
    }

    fn queue(&self) -> Option<&dyn super::RunQueue> {
        if self.read_only { None } else { Some(self) }
    }

    fn watch(&self) -> Option<&super::RunWatch> {
        if self.read_only {
            return None;
        }
        self.follow.call_once(|| follow::start(self.path.clone(), self.options.clone(), &self.watch));
        Some(&self.watch)
    }

    fn delete(&self, run: &RunId, lease: Option<&Lease>) -> Result<()> {
        self.write(|conn, now_ms| {
            fence(conn, run, lease, now_ms)?;
            // The epochs row stays: it is the tombstone that keeps a recreated run's
            // epochs above every lease of this incarnation. The run's number stays too: other
            // connections may hold it, and a recreated run reuses it.
            if let Some(number) = find_number(conn, run)? {
                let keys = key_range(number);
                conn.prepare_cached("DELETE FROM journal WHERE key >= ?1 AND key < ?2")?
                    .execute([keys.start, keys.end])?;
            }
            for sql in [
                "DELETE FROM runs WHERE run_id = ?1",
                "DELETE FROM run_tags WHERE run_id = ?1",
                "DELETE FROM leases WHERE run_id = ?1",
                "DELETE FROM queue WHERE run_id = ?1",
            ] {
                conn.prepare_cached(sql)?.execute([run.as_str()])?;
            }
            Ok(())
        })
    }
}

impl SqliteStore {
    /// Grants the run's lease when no live lease holds it, or when the live one is `stale`.
    fn grant(&self, run: &RunId, owner: &str, ttl: Duration, stale: Option<&Lease>) -> Result<Lease> {
        self.write(|conn, now_ms| {
            if let Some(held) = held_lease(conn, run)?.filter(|held| held.is_live(now_ms)) {
                let taken_from = stale.is_some_and(|s| s.owner == held.owner && s.epoch == held.epoch);
                if !taken_from {
                    return Err(common::held_by(run, &held));
                }
            }
            let high_water: Option<i64> = conn
                .prepare_cached("SELECT high_water FROM epochs WHERE run_id = ?1")?
                .query_row([run.as_str()], |row| row.get(0))
                .optional()?;
            let epoch = high_water.unwrap_or(0).checked_add(1).ok_or_else(|| Error::Corrupt {
                what: format!("epochs of run {run}"),
                detail: "the epoch counter is exhausted".into(),
            })?;
            conn.prepare_cached(
                "INSERT INTO epochs (run_id, high_water) VALUES (?1, ?2)
                 ON CONFLICT (run_id) DO UPDATE SET high_water = excluded.high_water",
            )?
            .execute(params![run.as_str(), epoch])?;
            conn.prepare_cached(
                "INSERT INTO leases (run_id, owner, epoch, expires_at_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (run_id) DO UPDATE SET owner = excluded.owner, epoch = excluded.epoch,
                 expires_at_ms = excluded.expires_at_ms",
            )?
            .execute(params![run.as_str(), owner, epoch, common::expiry(now_ms, ttl)])?;
            Ok(Lease { run_id: run.clone(), owner: owner.to_owned(), epoch: stored_epoch(epoch)? })
        })
    }
}

impl LeasableStore for SqliteStore {
    fn acquire(&self, run: &RunId, owner: &str, ttl: Duration) -> Result<Lease> {
        self.grant(run, owner, ttl, None)
    }

    fn holder(&self, run: &RunId) -> Result<Option<Lease>> {
        let now_ms = self.options.clock.now_ms();
        self.read(|conn| {
            Ok(held_lease(conn, run)?.filter(|held| held.is_live(now_ms)).map(|held| Lease {
                run_id: run.clone(),
                owner: held.owner,
                epoch: held.epoch,
            }))
        })
    }

    fn take_over(&self, stale: &Lease, owner: &str, ttl: Duration) -> Result<Lease> {
        self.grant(&stale.run_id, owner, ttl, Some(stale))
    }

    fn renew(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        let run = &lease.run_id;
        self.write(|conn, now_ms| {
            fence(conn, run, Some(lease), now_ms)?;
            conn.prepare_cached("UPDATE leases SET expires_at_ms = ?2 WHERE run_id = ?1")?
                .execute(params![run.as_str(), common::expiry(now_ms, ttl)])?;
            Ok(())
        })
    }

    fn release(&self, lease: &Lease) -> Result<()> {
        let run = &lease.run_id;
        self.write(|conn, now_ms| {
            fence(conn, run, Some(lease), now_ms)?;
            conn.prepare_cached("DELETE FROM leases WHERE run_id = ?1")?.execute([run.as_str()])?;
            Ok(())
        })
    }
}

impl TranscriptStore for SqliteStore {
    fn put_new(&self, blob_ref: &str, blob: &[u8]) -> Result<bool> {
        let parsed = common::parse_blob_ref(blob_ref)?;
        self.write(|conn, _| {
            let stored = conn
                .prepare_cached(
                    "INSERT INTO blobs (ref, run_id, data) VALUES (?1, ?2, ?3) ON CONFLICT (ref) DO NOTHING",
                )?
                .execute(params![blob_ref, parsed.run.as_str(), blob])?;
            Ok(stored == 1)
        })
    }

    fn put(&self, blob_ref: &str, blob: &[u8]) -> Result<()> {
        let parsed = common::parse_blob_ref(blob_ref)?;
        self.write(|conn, _| {
            conn.prepare_cached(
                "INSERT INTO blobs (ref, run_id, data) VALUES (?1, ?2, ?3)
                 ON CONFLICT (ref) DO UPDATE SET data = excluded.data",
            )?
            .execute(params![blob_ref, parsed.run.as_str(), blob])?;
            Ok(())
        })
    }

    fn get(&self, blob_ref: &str) -> Result<Option<Vec<u8>>> {
        common::parse_blob_ref(blob_ref)?;
        self.read(|conn| {
            Ok(conn
                .prepare_cached("SELECT data FROM blobs WHERE ref = ?1")?
                .query_row([blob_ref], |row| row.get(0))
                .optional()?)
        })
    }

    fn list(&self, run: &RunId) -> Result<Vec<String>> {
        self.read(|conn| {
            let mut select = conn.prepare_cached("SELECT ref FROM blobs WHERE run_id = ?1 ORDER BY ref")?;
            let refs = select.query_map([run.as_str()], |row| row.get(0))?;
            Ok(refs.collect::<rusqlite::Result<Vec<String>>>()?)
        })
    }

    fn delete(&self, blob_ref: &str) -> Result<()> {
        common::parse_blob_ref(blob_ref)?;
        self.write(|conn, _| {
            conn.prepare_cached("DELETE FROM blobs WHERE ref = ?1")?.execute([blob_ref])?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn pending(ticket: u64, run: &str, seqs: &[u64], lease: Option<Lease>) -> Pending {
        let entries =
            seqs.iter().map(|seq| RawEntry::new(*seq, format!(r#"{{"seq":{seq}}}"#)).unwrap()).collect();
        Pending {
            ticket,
            run: RunId::parse(run).unwrap(),
            entries,
            lease,
            tally: crate::store::Tally::default(),
        }
    }

    fn application_id(path: &Path) -> i32 {
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        conn.query_row("PRAGMA application_id", [], |row| row.get(0)).unwrap()
    }

    #[test]
    fn stores_are_stamped_and_unstamped_ones_of_ours_still_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        drop(SqliteStore::open(&path, SqliteOptions::new()).unwrap());
        assert_eq!(application_id(&path), APPLICATION_ID);
        // A store from before the stamp: opened for writing, stamped then.
        Connection::open(&path).unwrap().execute_batch("PRAGMA application_id = 0").unwrap();
        assert_eq!(application_id(&path), 0);
        let store = SqliteStore::open_read_only(&path, SqliteOptions::new()).unwrap().unwrap();
        assert!(store.list_runs(&RunFilter::default()).unwrap().is_empty());
        drop(store);
        assert_eq!(application_id(&path), 0, "a read-only open never stamps");
        drop(SqliteStore::open(&path, SqliteOptions::new()).unwrap());
        assert_eq!(application_id(&path), APPLICATION_ID);
        // Another program's id is refused, for reading and for writing.
        Connection::open(&path).unwrap().execute_batch("PRAGMA application_id = 42").unwrap();
        assert!(matches!(SqliteStore::open(&path, SqliteOptions::new()), Err(Error::Config(_))));
        assert!(matches!(SqliteStore::open_read_only(&path, SqliteOptions::new()), Err(Error::Config(_))));
    }

    #[test]
    fn the_run_number_cache_stays_bounded() {
        let numbers = RunNumbers::default();
        for n in 0..(REMEMBERED_RUNS as i64 + 10) {
            numbers.remember(&RunId::parse(&format!("r{n}")).unwrap(), n + 1);
        }
        assert!(lock(&numbers.0).len() <= REMEMBERED_RUNS);
        let last = RunId::parse(&format!("r{}", REMEMBERED_RUNS + 9)).unwrap();
        assert_eq!(numbers.get(&last), Some(REMEMBERED_RUNS as i64 + 10));
    }

    #[test]
    fn the_highest_run_number_has_a_whole_key_range() {
        let keys = key_range(MAX_RUN_NUMBER);
        assert!(keys.start > 0 && keys.end > keys.start);
        assert_eq!(keys.end - keys.start, 1 << SEQ_BITS);
        let run = RunId::parse("last").unwrap();
        assert_eq!(row_key(&run, MAX_RUN_NUMBER, (1 << SEQ_BITS) - 1).unwrap(), keys.end - 1);
    }

    #[test]
    fn a_failing_batch_fails_alone_in_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_000);
        let options = SqliteOptions { clock: Arc::new(clock.clone()), ..SqliteOptions::new() };
        let store = SqliteStore::open(&dir.path().join("db"), options).unwrap();
        let a = RunId::parse("a").unwrap();
        let lease = store.acquire(&a, "w", Duration::from_secs(1)).unwrap();
        let stale = Lease { epoch: lease.epoch + 1, ..lease.clone() };
        let group = [
            pending(0, "a", &[1, 2], Some(lease)),
            pending(1, "a", &[2, 3], None), // at the tail the first batch just wrote
            pending(2, "b", &[5], None),
            pending(3, "a", &[3], Some(stale)),
            pending(4, "a", &[3], None),
        ];
        let outcomes = commit_group(&lock(&store.writer), &clock, &store.numbers, &group);
        assert!(outcomes[0].is_ok() && outcomes[2].is_ok() && outcomes[4].is_ok(), "{outcomes:?}");
        assert!(matches!(outcomes[1], Err(Error::OrderViolation { seq: 2, tail: 2, .. })));
        assert!(matches!(outcomes[3], Err(Error::LeaseHeld { .. })));
        let seqs: Vec<u64> = store.load(&a).unwrap().iter().map(RawEntry::seq).collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert_eq!(store.load(&RunId::parse("b").unwrap()).unwrap().len(), 1);
    }

    #[test]
    fn concurrent_appends_all_land_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("db"), SqliteOptions::new()).unwrap();
        std::thread::scope(|scope| {
            for thread in 0..4 {
                let store = &store;
                scope.spawn(move || {
                    let run = RunId::parse(&format!("r{thread}")).unwrap();
                    for seq in 1..=50u64 {
                        let entry = RawEntry::new(seq, format!(r#"{{"seq":{seq}}}"#)).unwrap();
                        store.append(&run, &[entry], None).unwrap();
                    }
                });
            }
        });
        for thread in 0..4 {
            let loaded = store.load(&RunId::parse(&format!("r{thread}")).unwrap()).unwrap();
            assert_eq!(loaded.iter().map(RawEntry::seq).collect::<Vec<_>>(), (1..=50).collect::<Vec<_>>());
        }
    }
}

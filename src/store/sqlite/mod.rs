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

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode, OptionalExtension, params};

mod append;
mod checkpoint;
mod counters;
mod follow;
mod group;
mod keys;
mod open;
mod options;
mod queue;

pub use self::options::SqliteOptions;

use self::append::{Immediate, append_in, fence, held_lease, stored_epoch};
use self::checkpoint::Checkpointer;
use self::group::{GroupCommit, Pending};
use self::keys::{RunNumbers, SEQ_BITS, find_number, key_range, lock, row_key, seq_of};
use self::open::{
    Identity, SCHEMA_VERSION, check_identity, is_busy, open_connection, open_immutable, open_writer,
};
use super::common;
use super::{
    Error, JournalStore, LeasableStore, Lease, RawEntry, Result, RunFilter, RunId, RunMeta, TranscriptStore,
};

/// Where the CLI and `store::open("sqlite")` keep the database, relative to the working
/// directory.
pub const DEFAULT_SQLITE_PATH: &str = ".cairn/cairn.db";

/// How long opening keeps retrying a schema bootstrap that collides with another process
/// opening the same fresh file.
const BOOT_RETRY_FOR: Duration = Duration::from_secs(10);

/// A [`JournalStore`], [`LeasableStore`] and [`TranscriptStore`] over one SQLite file.
pub struct SqliteStore {
    path: PathBuf,
    options: SqliteOptions,
    /// The one connection that writes; every write transaction holds it.
    writer: Mutex<Connection>,
    /// Idle read connections, reused; a reader takes one or opens another.
    readers: Mutex<Vec<Connection>>,
    /// Appends waiting for a group commit.
    group: GroupCommit,
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
            group: GroupCommit::default(),
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
            group: GroupCommit::default(),
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
            let commit = |batch: &[Pending]| {
                append::commit_group(&lock(&self.writer), &*self.options.clock, &self.numbers, batch)
            };
            return self
                .group
                .submit(run, entries, lease, tally, commit)
                .inspect(|()| self.watch.notify(run));
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
        self.read(counters::read)
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

    /// Read-only opens answer too: reading the lease table writes nothing.
    fn lease_holder(&self, run: &RunId) -> Result<Option<Option<Lease>>> {
        LeasableStore::holder(self, run).map(Some)
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
    use std::sync::Arc;

    use rusqlite::OpenFlags;

    use super::append::commit_group;
    use super::keys::{MAX_RUN_NUMBER, REMEMBERED_RUNS};
    use super::open::APPLICATION_ID;
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

//! Opening the database: connection settings, the schema and its migration, and telling a
//! cairn store from anyone else's file.

use std::path::Path;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};

use super::keys::SEQ_BITS;
use super::options::SqliteOptions;
use crate::store::{Durability, Error, Result};

/// The schema this build writes; a database stamped higher was made by a newer cairn, one
/// stamped lower is migrated on open.
pub(super) const SCHEMA_VERSION: i64 = 2;

/// cairn's `PRAGMA application_id` ("cair"): a database stamped with another id is some other
/// program's, and cairn neither reads nor writes it.
pub(crate) const APPLICATION_ID: i32 = 0x6361_6972;

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

pub(super) fn configure(conn: &Connection, options: &SqliteOptions) -> Result<()> {
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

pub(super) fn open_flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

/// Opens the writing connection: WAL mode, then the schema, idempotently.
pub(super) fn open_writer(path: &Path, options: &SqliteOptions) -> Result<Connection> {
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
    tx.execute_batch(QUEUE_SCHEMA)?;
    upgrade_queue(&tx)?;
    // The append counters cover the journal only when they started with it: a database
    // that already held journal rows is marked uncounted, and `/metrics` folds it.
    tx.execute(
        "INSERT OR IGNORE INTO counters (name, value) VALUES ('counted', (SELECT NOT EXISTS (SELECT 1 FROM journal)))",
        [],
    )?;
    super::counters::count_runs(&tx)?;
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
pub(super) enum Identity {
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
pub(super) fn check_identity(conn: &Connection, path: &Path) -> Result<Identity> {
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
pub(super) fn open_connection(path: &Path, options: &SqliteOptions, read_only: bool) -> Result<Connection> {
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
pub(super) fn open_immutable(path: &Path, options: &SqliteOptions) -> Result<Connection> {
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

pub(super) fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(err.sqlite_error_code(), Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
}

/// The queue's tables, created on every write open (idempotent).
const QUEUE_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS queue (
    run_id TEXT PRIMARY KEY,
    enqueued_at_ms INTEGER NOT NULL,
    ready_at_ms INTEGER NOT NULL,
    owner TEXT,
    epoch INTEGER NOT NULL DEFAULT 0,
    expires_at_ms INTEGER,
    attempts INTEGER NOT NULL DEFAULT 0,
    cancel_requested_at_ms INTEGER
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS queue_by_age ON queue (enqueued_at_ms, run_id);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
";

/// Adds what later cairns added to a queue table an earlier one created (inside the open's
/// write transaction, after [`QUEUE_SCHEMA`]).
fn upgrade_queue(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    let has_cancel: bool = conn
        .prepare("SELECT COUNT(*) FROM pragma_table_info('queue') WHERE name = 'cancel_requested_at_ms'")?
        .query_row([], |row| row.get::<_, i64>(0))?
        > 0;
    if !has_cancel {
        conn.execute_batch("ALTER TABLE queue ADD COLUMN cancel_requested_at_ms INTEGER")?;
    }
    Ok(())
}

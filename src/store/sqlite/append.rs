//! One group's commit: every batch's fence check, order check and inserts in one
//! transaction, each batch under its own savepoint so one batch's failure fails only it.

use std::io;

use rusqlite::{Connection, OptionalExtension, params};

use super::counters;
use super::group::Pending;
use super::keys::{RunNumbers, assign_number, key_range, row_key, seq_of};
use crate::clock::Clock;
use crate::store::common::{self, HeldLease};
use crate::store::{Error, Lease, Result, RunId};

/// Commits a group of appends in one transaction, each batch under its own savepoint.
/// Returns one outcome per batch, in order.
pub(super) fn commit_group(
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
pub(super) fn run_cached(conn: &Connection, sql: &str) -> Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

/// A `BEGIN IMMEDIATE` transaction that rolls back unless committed.
///
/// rusqlite's own transaction re-parses `BEGIN` and `COMMIT` on every use, a measurable
/// share of a one-entry append; these go through the statement cache.
pub(super) struct Immediate<'c> {
    conn: &'c Connection,
    committed: bool,
}

impl<'c> Immediate<'c> {
    pub(super) fn begin(conn: &'c Connection) -> Result<Immediate<'c>> {
        run_cached(conn, "BEGIN IMMEDIATE")?;
        Ok(Immediate { conn, committed: false })
    }

    pub(super) fn commit(mut self) -> Result<()> {
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
pub(super) fn append_in(
    conn: &Connection,
    numbers: &RunNumbers,
    pending: &Pending,
    now_ms: i64,
) -> Result<i64> {
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
    counters::add(conn, pending.tally)?;
    Ok(number)
}

/// Checks a given lease against the run's lease row, inside the caller's transaction.
pub(super) fn fence(conn: &Connection, run: &RunId, lease: Option<&Lease>, now_ms: i64) -> Result<()> {
    match lease {
        Some(lease) => common::check_lease(run, lease, held_lease(conn, run)?.as_ref(), now_ms),
        None => Ok(()),
    }
}

pub(super) fn held_lease(conn: &Connection, run: &RunId) -> Result<Option<HeldLease>> {
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
pub(super) fn stored_epoch(value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| Error::Corrupt {
        what: "sqlite store".into(),
        detail: format!("negative lease epoch {value}"),
    })
}

/// A copy of an error for every batch of a failed group (the error is not `Clone`).
pub(super) fn duplicate(err: &Error) -> Error {
    match err {
        Error::Sqlite(rusqlite::Error::SqliteFailure(code, message)) => {
            Error::Sqlite(rusqlite::Error::SqliteFailure(*code, message.clone()))
        }
        other => Error::Io(io::Error::other(other.to_string())),
    }
}

//! Journal row keys: each run's number (the high 32 bits, assigned on its first append and
//! never reused) and the seq (the low 32), and the cache of run numbers.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use rusqlite::{Connection, OptionalExtension, params};

use crate::store::{Error, Result, RunId};

/// The low bits of a journal row's key that hold the seq; the run's number is above them.
pub(super) const SEQ_BITS: u32 = 32;

/// The most runs one database can number: the key range of the highest run, up to
/// `(number + 1) << 32`, must stay a positive 64-bit integer.
pub(super) const MAX_RUN_NUMBER: i64 = (1 << 31) - 2;

/// Each run's number, the high half of its journal rows' keys: a cache of the
/// `run_numbers` table, which never changes a number once assigned.
#[derive(Default)]
pub(super) struct RunNumbers(pub(super) Mutex<HashMap<RunId, i64>>);

/// How many run numbers a store remembers before it starts over (a long-lived process
/// touches ever more runs; a forgotten number costs one indexed read).
pub(super) const REMEMBERED_RUNS: usize = 4_096;

impl RunNumbers {
    pub(super) fn get(&self, run: &RunId) -> Option<i64> {
        lock(&self.0).get(run).copied()
    }

    pub(super) fn remember(&self, run: &RunId, number: i64) {
        let mut numbers = lock(&self.0);
        if numbers.len() >= REMEMBERED_RUNS && !numbers.contains_key(run) {
            numbers.clear();
        }
        numbers.entry(run.clone()).or_insert(number);
    }
}

/// The run's number, if it has one (in the caller's snapshot).
pub(super) fn find_number(conn: &Connection, run: &RunId) -> Result<Option<i64>> {
    Ok(conn
        .prepare_cached("SELECT number FROM run_numbers WHERE run_id = ?1")?
        .query_row([run.as_str()], |row| row.get(0))
        .optional()?)
}

/// The run's number, assigned (one above the highest so far) inside the caller's write
/// transaction when the run has none.
pub(super) fn assign_number(conn: &Connection, run: &RunId) -> Result<i64> {
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
pub(super) fn key_range(number: i64) -> std::ops::Range<i64> {
    debug_assert!((1..=MAX_RUN_NUMBER).contains(&number));
    (number << SEQ_BITS)..((number + 1) << SEQ_BITS)
}

/// The key of one journal row.
pub(super) fn row_key(run: &RunId, number: i64, seq: u64) -> Result<i64> {
    if seq >= 1 << SEQ_BITS {
        return Err(Error::Config(format!(
            "seq {seq} of run {run} exceeds the sqlite store's limit of {}",
            (1u64 << SEQ_BITS) - 1
        )));
    }
    Ok((number << SEQ_BITS) | seq as i64)
}

/// The seq a stored key holds; a key outside every run's range means a damaged database.
pub(super) fn seq_of(key: i64) -> Result<u64> {
    if key < 0 {
        return Err(Error::Corrupt {
            what: "sqlite store".into(),
            detail: format!("negative journal key {key}"),
        });
    }
    Ok((key & ((1 << SEQ_BITS) - 1)) as u64)
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A transaction rolls back when a panic unwinds through it, so the connection behind a
    // poisoned lock is idle and sound.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

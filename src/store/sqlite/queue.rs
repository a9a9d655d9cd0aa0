//! The run queue of the SQLite store: one table of queued runs and a counter table (created
//! with the rest of the schema, `open.rs`). Every operation is one `BEGIN IMMEDIATE`
//! transaction, so a claim's choice of run and its write are one unit that no other
//! connection or process can split.

use std::time::Duration;

use rusqlite::{OptionalExtension, params};

use super::SqliteStore;
use super::append::stored_epoch;
use crate::store::common;
use crate::store::{Claim, Error, Result, RunId, RunQueue};

fn parse_run(text: &str) -> Result<RunId> {
    RunId::parse(text)
        .map_err(|err| Error::Corrupt { what: "sqlite store queue".into(), detail: err.to_string() })
}

/// Checks a claim against the queue row, inside the caller's transaction.
fn check_claim(conn: &rusqlite::Connection, claim: &Claim, now_ms: i64) -> Result<()> {
    let row: Option<(Option<String>, i64, Option<i64>)> = conn
        .prepare_cached("SELECT owner, epoch, expires_at_ms FROM queue WHERE run_id = ?1")?
        .query_row([claim.run_id.as_str()], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    let held = match row {
        Some((Some(owner), epoch, Some(expires_at_ms))) => {
            Some(common::HeldLease { owner, epoch: stored_epoch(epoch)?, expires_at_ms })
        }
        _ => None,
    };
    let as_lease =
        crate::store::Lease { run_id: claim.run_id.clone(), owner: claim.owner.clone(), epoch: claim.epoch };
    common::check_lease(&claim.run_id, &as_lease, held.as_ref(), now_ms)
}

impl RunQueue for SqliteStore {
    fn enqueue(&self, run: &RunId) -> Result<()> {
        self.write(|conn, now_ms| {
            conn.prepare_cached(
                "INSERT INTO queue (run_id, enqueued_at_ms, ready_at_ms) VALUES (?1, ?2, ?2)
                 ON CONFLICT (run_id) DO UPDATE SET ready_at_ms = MIN(queue.ready_at_ms, excluded.ready_at_ms)
                 WHERE queue.owner IS NULL",
            )?
            .execute(params![run.as_str(), now_ms])?;
            Ok(())
        })
    }

    fn claim(&self, owner: &str, ttl: Duration) -> Result<Option<Claim>> {
        self.write(|conn, now_ms| {
            let row: Option<(String, i64, Option<i64>, i64)> = conn
                .prepare_cached(
                    "SELECT run_id, epoch, expires_at_ms, attempts FROM queue
                     WHERE (owner IS NULL AND ready_at_ms <= ?1) OR (owner IS NOT NULL AND expires_at_ms <= ?1)
                     ORDER BY enqueued_at_ms, run_id LIMIT 1",
                )?
                .query_row([now_ms], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
                .optional()?;
            let Some((run_id, epoch, expires_at_ms, attempts)) = row else { return Ok(None) };
            let run_id = parse_run(&run_id)?;
            let takeover = expires_at_ms.is_some();
            let epoch = epoch + 1;
            conn.prepare_cached(
                "UPDATE queue SET owner = ?2, epoch = ?3, expires_at_ms = ?4, attempts = attempts + 1
                 WHERE run_id = ?1",
            )?
            .execute(params![run_id.as_str(), owner, epoch, common::expiry(now_ms, ttl)])?;
            if takeover {
                conn.prepare_cached(
                    "INSERT INTO counters (name, value) VALUES ('lease_takeovers', 1)
                     ON CONFLICT (name) DO UPDATE SET value = value + 1",
                )?
                .execute([])?;
            }
            Ok(Some(Claim {
                run_id,
                owner: owner.to_owned(),
                epoch: stored_epoch(epoch)?,
                takeover,
                attempts: u32::try_from(attempts + 1).unwrap_or(u32::MAX),
            }))
        })
    }

    fn renew(&self, claim: &Claim, ttl: Duration) -> Result<()> {
        self.write(|conn, now_ms| {
            check_claim(conn, claim, now_ms)?;
            conn.prepare_cached("UPDATE queue SET expires_at_ms = ?2 WHERE run_id = ?1")?
                .execute(params![claim.run_id.as_str(), common::expiry(now_ms, ttl)])?;
            Ok(())
        })
    }

    fn finish(&self, claim: &Claim) -> Result<bool> {
        self.write(|conn, now_ms| {
            check_claim(conn, claim, now_ms)?;
            let asked: Option<i64> = conn
                .prepare_cached("DELETE FROM queue WHERE run_id = ?1 RETURNING cancel_requested_at_ms")?
                .query_row([claim.run_id.as_str()], |row| row.get(0))?;
            Ok(asked.is_some())
        })
    }

    fn defer(&self, claim: &Claim, delay: Duration) -> Result<()> {
        self.write(|conn, now_ms| {
            check_claim(conn, claim, now_ms)?;
            conn.prepare_cached(
                "UPDATE queue SET owner = NULL, expires_at_ms = NULL, ready_at_ms = ?2 WHERE run_id = ?1",
            )?
            .execute(params![claim.run_id.as_str(), common::expiry(now_ms, delay)])?;
            Ok(())
        })
    }

    fn withdraw(&self, run: &RunId) -> Result<bool> {
        self.write(|conn, now_ms| {
            let removed = conn
                .prepare_cached(
                    "DELETE FROM queue WHERE run_id = ?1 AND (owner IS NULL OR expires_at_ms <= ?2)",
                )?
                .execute(params![run.as_str(), now_ms])?;
            Ok(removed == 1)
        })
    }

    fn request_cancel(&self, run: &RunId) -> Result<bool> {
        self.write(|conn, now_ms| {
            let marked = conn
                .prepare_cached(
                    "UPDATE queue SET cancel_requested_at_ms = COALESCE(cancel_requested_at_ms, ?2)
                     WHERE run_id = ?1",
                )?
                .execute(params![run.as_str(), now_ms])?;
            Ok(marked == 1)
        })
    }

    fn cancel_requests(&self, owner: &str) -> Result<Vec<RunId>> {
        let ids: Vec<String> = self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT run_id FROM queue WHERE owner = ?1 AND cancel_requested_at_ms IS NOT NULL",
            )?;
            let ids =
                stmt.query_map([owner], |row| row.get(0))?.collect::<rusqlite::Result<Vec<String>>>()?;
            Ok(ids)
        })?;
        ids.iter().map(|id| parse_run(id)).collect()
    }

    fn depth(&self) -> Result<u64> {
        self.read(|conn| {
            let n: i64 =
                conn.prepare_cached("SELECT COUNT(*) FROM queue")?.query_row([], |row| row.get(0))?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
    }

    fn retried(&self) -> Result<Vec<(RunId, u32)>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT run_id, attempts FROM queue WHERE attempts > 1 ORDER BY attempts DESC, run_id LIMIT 1000",
            )?;
            let rows = stmt.query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)))?;
            let mut retried = Vec::new();
            for row in rows {
                let (run, attempts) = row?;
                if let Ok(run) = RunId::parse(&run) {
                    retried.push((run, u32::try_from(attempts).unwrap_or(u32::MAX)));
                }
            }
            Ok(retried)
        })
    }

    fn delayed(&self) -> Result<u64> {
        let now_ms = self.options.clock.now_ms();
        self.read(|conn| {
            let n: i64 = conn
                .prepare_cached("SELECT COUNT(*) FROM queue WHERE owner IS NULL AND ready_at_ms > ?1")?
                .query_row([now_ms], |row| row.get(0))?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
    }

    fn takeovers(&self) -> Result<u64> {
        self.read(|conn| {
            let n: Option<i64> = conn
                .prepare_cached("SELECT value FROM counters WHERE name = 'lease_takeovers'")?
                .query_row([], |row| row.get(0))
                .optional()?;
            Ok(n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0))
        })
    }
}

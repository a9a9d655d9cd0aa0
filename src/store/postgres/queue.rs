//! The run queue of the PostgreSQL store. A claim is one statement: the oldest ready row is
//! picked `FOR UPDATE SKIP LOCKED` (so workers claiming at once take different runs instead of
//! waiting on each other), stamped with the claimant, a higher epoch and an expiry, and a
//! takeover of an expired claim is counted in the same statement.

use std::time::Duration;

use super::{PostgresStore, fenced, pg_err, prepared, to_i64, to_u64};
use crate::store::common::{self, HeldLease};
use crate::store::{Claim, Error, Lease, Result, RunId, RunQueue};

const CLAIM_SQL: &str = "
WITH next AS (
    SELECT run_id, owner IS NOT NULL AS takeover FROM queue
    WHERE (owner IS NULL AND ready_at_ms <= $2) OR (owner IS NOT NULL AND expires_at_ms <= $2)
    ORDER BY enqueued_at_ms, run_id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE queue AS q SET owner = $1, epoch = q.epoch + 1, expires_at_ms = $3, attempts = q.attempts + 1
    FROM next WHERE q.run_id = next.run_id
    RETURNING q.run_id, q.epoch, q.attempts, next.takeover
), counted AS (
    INSERT INTO counters (name, value) SELECT 'lease_takeovers', 1 FROM claimed WHERE claimed.takeover
    ON CONFLICT (name) DO UPDATE SET value = counters.value + 1
)
SELECT run_id, epoch, attempts, takeover FROM claimed";

fn parse_run(text: &str) -> Result<RunId> {
    RunId::parse(text)
        .map_err(|err| Error::Corrupt { what: "postgres store queue".into(), detail: err.to_string() })
}

impl PostgresStore {
    /// One statement that changes a claimed queue row only while the claim is current;
    /// when it changed nothing, says why.
    /// When the statement returns a row, its first column (a flag) comes back.
    fn claim_write(
        &self,
        claim: &Claim,
        sql: &'static str,
        extend: Option<Duration>,
    ) -> Result<Option<bool>> {
        self.refuse_write()?;
        let claim = claim.clone();
        let epoch = to_i64(claim.epoch)?;
        self.block(move |pool, clock| async move {
            let (client, stmt) = prepared(&pool, sql).await?;
            let now = clock.now_ms();
            let until = extend.map(|ttl| common::expiry(now, ttl));
            let run = &claim.run_id;
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
                [&run.as_str(), &claim.owner, &epoch, &now, &until];
            if stmt.columns().is_empty() {
                if client.execute(&stmt, &params).await.map_err(pg_err)? == 1 {
                    return Ok(None);
                }
            } else if let Some(row) = client.query_opt(&stmt, &params).await.map_err(pg_err)? {
                return Ok(Some(row.get(0)));
            }
            let row = client
                .query_opt(
                    "SELECT owner, epoch, expires_at_ms FROM queue WHERE run_id = $1",
                    &[&run.as_str()],
                )
                .await
                .map_err(pg_err)?;
            let held = match row {
                Some(row) => match (row.get::<_, Option<String>>(0), row.get::<_, Option<i64>>(2)) {
                    (Some(owner), Some(expires_at_ms)) => {
                        Some(HeldLease { owner, epoch: to_u64(row.get(1))?, expires_at_ms })
                    }
                    _ => None,
                },
                None => None,
            };
            let as_lease = Lease { run_id: run.clone(), owner: claim.owner.clone(), epoch: claim.epoch };
            Err(fenced(run, &as_lease, held, now))
        })
    }
}

impl RunQueue for PostgresStore {
    fn enqueue(&self, run: &RunId) -> Result<()> {
        self.refuse_write()?;
        let run = run.clone();
        self.block(move |pool, clock| async move {
            let (client, stmt) = prepared(
                &pool,
                "INSERT INTO queue (run_id, enqueued_at_ms, ready_at_ms) VALUES ($1, $2, $2)
                     ON CONFLICT (run_id) DO UPDATE SET ready_at_ms = LEAST(queue.ready_at_ms, EXCLUDED.ready_at_ms)
                     WHERE queue.owner IS NULL",
            )
            .await?;
            client.execute(&stmt, &[&run.as_str(), &clock.now_ms()]).await.map_err(pg_err)?;
            Ok(())
        })
    }

    fn claim(&self, owner: &str, ttl: Duration) -> Result<Option<Claim>> {
        self.refuse_write()?;
        let owner = owner.to_owned();
        self.block(move |pool, clock| async move {
            let (client, stmt) = prepared(&pool, CLAIM_SQL).await?;
            let now = clock.now_ms();
            let row =
                client.query_opt(&stmt, &[&owner, &now, &common::expiry(now, ttl)]).await.map_err(pg_err)?;
            let Some(row) = row else { return Ok(None) };
            let run_id = parse_run(row.get(0))?;
            Ok(Some(Claim {
                run_id,
                owner,
                epoch: to_u64(row.get(1))?,
                attempts: u32::try_from(row.get::<_, i32>(2)).unwrap_or(0),
                takeover: row.get(3),
            }))
        })
    }

    fn renew(&self, claim: &Claim, ttl: Duration) -> Result<()> {
        self.claim_write(
            claim,
            "UPDATE queue SET expires_at_ms = $5 WHERE run_id = $1 AND owner = $2 AND epoch = $3 AND expires_at_ms > $4",
            Some(ttl),
        )
        .map(drop)
    }

    fn finish(&self, claim: &Claim) -> Result<bool> {
        self.claim_write(
            claim,
            "DELETE FROM queue WHERE run_id = $1 AND owner = $2 AND epoch = $3 AND expires_at_ms > $4
             AND $5::bigint IS NULL RETURNING cancel_requested_at_ms IS NOT NULL",
            None,
        )
        .map(|asked| asked.unwrap_or(false))
    }

    fn defer(&self, claim: &Claim, delay: Duration) -> Result<()> {
        self.claim_write(
            claim,
            "UPDATE queue SET owner = NULL, expires_at_ms = NULL, ready_at_ms = $5
             WHERE run_id = $1 AND owner = $2 AND epoch = $3 AND expires_at_ms > $4",
            Some(delay),
        )
        .map(drop)
    }

    fn withdraw(&self, run: &RunId) -> Result<bool> {
        self.refuse_write()?;
        let run = run.clone();
        self.block(move |pool, clock| async move {
            let (client, stmt) = prepared(
                &pool,
                "DELETE FROM queue WHERE run_id = $1 AND (owner IS NULL OR expires_at_ms <= $2)",
            )
            .await?;
            let removed = client.execute(&stmt, &[&run.as_str(), &clock.now_ms()]).await.map_err(pg_err)?;
            Ok(removed == 1)
        })
    }

    fn request_cancel(&self, run: &RunId) -> Result<bool> {
        self.refuse_write()?;
        let run = run.clone();
        self.block(move |pool, clock| async move {
            let (client, stmt) = prepared(
                &pool,
                "UPDATE queue SET cancel_requested_at_ms = COALESCE(cancel_requested_at_ms, $2)
                     WHERE run_id = $1",
            )
            .await?;
            let marked = client.execute(&stmt, &[&run.as_str(), &clock.now_ms()]).await.map_err(pg_err)?;
            Ok(marked == 1)
        })
    }

    fn cancel_requests(&self, owner: &str) -> Result<Vec<RunId>> {
        let owner = owner.to_owned();
        self.block(move |pool, _| async move {
            let (client, stmt) = prepared(
                &pool,
                "SELECT run_id FROM queue WHERE owner = $1 AND cancel_requested_at_ms IS NOT NULL",
            )
            .await?;
            let rows = client.query(&stmt, &[&owner]).await.map_err(pg_err)?;
            rows.iter().map(|row| parse_run(row.get(0))).collect()
        })
    }

    fn depth(&self) -> Result<u64> {
        self.block(move |pool, _| async move {
            let (client, stmt) = prepared(&pool, "SELECT count(*) FROM queue").await?;
            let row = client.query_one(&stmt, &[]).await.map_err(pg_err)?;
            to_u64(row.get(0))
        })
    }

    fn retried(&self) -> Result<Vec<(RunId, u32)>> {
        self.block(move |pool, _| async move {
            let (client, stmt) = prepared(
                &pool,
                "SELECT run_id, attempts FROM queue WHERE attempts > 1 ORDER BY attempts DESC, run_id LIMIT 1000",
            )
            .await?;
            let rows = client.query(&stmt, &[]).await.map_err(pg_err)?;
            let mut retried = Vec::new();
            for row in rows {
                let run = parse_run(row.get(0))?;
                retried.push((run, u32::try_from(row.get::<_, i32>(1)).unwrap_or(0)));
            }
            Ok(retried)
        })
    }

    fn delayed(&self) -> Result<u64> {
        self.block(move |pool, clock| async move {
            let (client, stmt) =
                prepared(&pool, "SELECT count(*) FROM queue WHERE owner IS NULL AND ready_at_ms > $1")
                    .await?;
            let row = client.query_one(&stmt, &[&clock.now_ms()]).await.map_err(pg_err)?;
            to_u64(row.get(0))
        })
    }

    fn takeovers(&self) -> Result<u64> {
        self.block(move |pool, _| async move {
            let (client, stmt) =
                prepared(&pool, "SELECT value FROM counters WHERE name = 'lease_takeovers'").await?;
            let row = client.query_opt(&stmt, &[]).await.map_err(pg_err)?;
            row.map(|row| to_u64(row.get(0))).transpose().map(Option::unwrap_or_default)
        })
    }
}

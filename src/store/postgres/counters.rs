//! The append counters: calls and spend added by `cairn_append_counted` in each append's own
//! statement, runs by status counted from the indexed `runs` table, read by `/metrics` in two
//! short queries.

use deadpool_postgres::Pool;

use super::errors::{pg_err, pool_err};
use crate::money::Money;
use crate::store::common;
use crate::store::{Result, StoreCounters, Tally};

/// The counters, `None` for a store that held journal rows before it counted.
pub(super) async fn read(pool: &Pool) -> Result<Option<StoreCounters>> {
    let client = pool.get().await.map_err(pool_err)?;
    let values = client
        .prepare_cached(
            "SELECT name, value FROM counters WHERE name IN ('counted', 'calls', 'spend_nano_usd')",
        )
        .await
        .map_err(pg_err)?;
    let (mut counted, mut calls, mut spend) = (false, 0_i64, 0_i64);
    for row in client.query(&values, &[]).await.map_err(pg_err)? {
        let value: i64 = row.get(1);
        match row.get::<_, &str>(0) {
            "counted" => counted = value == 1,
            "calls" => calls = value,
            _ => spend = value,
        }
    }
    if !counted {
        return Ok(None);
    }
    let by_status =
        client.prepare_cached("SELECT status, COUNT(*) FROM runs GROUP BY status").await.map_err(pg_err)?;
    let mut runs = Vec::new();
    for row in client.query(&by_status, &[]).await.map_err(pg_err)? {
        let status = common::parse_status("postgres store", row.get(0))?;
        runs.push((status, u64::try_from(row.get::<_, i64>(1)).unwrap_or(0)));
    }
    let appended = Tally { calls: u64::try_from(calls).unwrap_or(0), spend: Money::from_nano_usd(spend) };
    Ok(Some(common::fold_counters(runs, appended)))
}

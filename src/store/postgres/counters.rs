//! The append counters: calls and spend added by `cairn_append_counted` in each append's own
//! statement, runs by status kept by a trigger on the `runs` table, read by `/metrics` in one
//! short query.

use deadpool_postgres::Pool;

use super::errors::{pg_err, pool_err};
use crate::money::Money;
use crate::store::common;
use crate::store::{Result, StoreCounters, Tally};

/// The counters, `None` for a store that held journal rows before it counted.
pub(super) async fn read(pool: &Pool) -> Result<Option<StoreCounters>> {
    let client = pool.get().await.map_err(pool_err)?;
    // One short read of a handful of rows, however many runs the store holds: runs by status
    // are counters too, kept by the `runs` table's trigger (schema version 4).
    let values = client
        .prepare_cached(
            "SELECT name, value FROM counters WHERE name IN ('counted', 'calls', 'spend_nano_usd') OR name LIKE 'runs:%'",
        )
        .await
        .map_err(pg_err)?;
    let (mut counted, mut calls, mut spend) = (false, 0_i64, 0_i64);
    let mut runs = Vec::new();
    for row in client.query(&values, &[]).await.map_err(pg_err)? {
        let value: i64 = row.get(1);
        match row.get::<_, &str>(0) {
            "counted" => counted = value == 1,
            "calls" => calls = value,
            "spend_nano_usd" => spend = value,
            name => {
                let status = name.strip_prefix("runs:").unwrap_or(name);
                runs.push((
                    common::parse_status("postgres store", status)?,
                    u64::try_from(value).unwrap_or(0),
                ));
            }
        }
    }
    if !counted {
        return Ok(None);
    }
    let appended = Tally { calls: u64::try_from(calls).unwrap_or(0), spend: Money::from_nano_usd(spend) };
    Ok(Some(common::fold_counters(runs, appended)))
}

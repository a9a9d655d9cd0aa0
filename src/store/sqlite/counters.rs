//! The append counters: calls and spend added in each append's transaction, runs by status
//! kept by triggers on the `runs` table in the transaction of every write of a run's row, read
//! by `/metrics` in one short query.

use rusqlite::{Connection, OptionalExtension, params};

use crate::money::Money;
use crate::store::common;
use crate::store::{Result, StoreCounters, Tally};

/// Adds a batch's tally to the counters, inside the append's transaction.
pub(super) fn add(conn: &Connection, tally: Tally) -> Result<()> {
    if tally == Tally::default() {
        return Ok(());
    }
    let mut add = conn.prepare_cached(
        "INSERT INTO counters (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
    )?;
    add.execute(params!["calls", i64::try_from(tally.calls).unwrap_or(i64::MAX)])?;
    add.execute(params!["spend_nano_usd", tally.spend.nano_usd()])?;
    Ok(())
}

/// The counters, `None` for a database that held journal rows before it counted (it has no
/// `counted` mark).
pub(super) fn read(conn: &Connection) -> Result<Option<StoreCounters>> {
    let mut value = conn.prepare_cached("SELECT value FROM counters WHERE name = ?1")?;
    let mut get =
        |name: &str| -> Result<Option<i64>> { Ok(value.query_row([name], |row| row.get(0)).optional()?) };
    if get("counted")? != Some(1) {
        return Ok(None);
    }
    let calls = u64::try_from(get("calls")?.unwrap_or(0)).unwrap_or(0);
    let spend = Money::from_nano_usd(get("spend_nano_usd")?.unwrap_or(0));
    // A store a read-only open found without the run triggers (never opened for writing by
    // this cairn) counts its runs instead.
    let sql = if get("runs_counted")? == Some(1) {
        "SELECT substr(name, 6), value FROM counters WHERE name LIKE 'runs:%'"
    } else {
        "SELECT status, COUNT(*) FROM runs GROUP BY status"
    };
    let mut by_status = conn.prepare_cached(sql)?;
    let mut rows = by_status.query([])?;
    let mut runs = Vec::new();
    while let Some(row) = rows.next()? {
        let status = row.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?;
        let status = common::parse_status("sqlite store", status)?;
        runs.push((status, u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0)));
    }
    Ok(Some(common::fold_counters(runs, Tally { calls, spend })))
}

/// The triggers that keep runs by status as counters (`runs:STATUS`), created on every write
/// open; the first one counts the runs already there, in the opening transaction.
pub(super) fn count_runs(conn: &Connection) -> Result<()> {
    conn.execute_batch(RUN_TRIGGERS)?;
    if conn
        .query_row("SELECT value FROM counters WHERE name = 'runs_counted'", [], |row| row.get::<_, i64>(0))
        .optional()?
        != Some(1)
    {
        conn.execute_batch(
            "DELETE FROM counters WHERE name LIKE 'runs:%';
             INSERT INTO counters (name, value) SELECT 'runs:' || status, COUNT(*) FROM runs WHERE true GROUP BY status;
             INSERT OR REPLACE INTO counters (name, value) VALUES ('runs_counted', 1);",
        )?;
    }
    Ok(())
}

const RUN_TRIGGERS: &str = "
CREATE TRIGGER IF NOT EXISTS runs_counted_insert AFTER INSERT ON runs BEGIN
    INSERT INTO counters (name, value) VALUES ('runs:' || NEW.status, 1)
        ON CONFLICT (name) DO UPDATE SET value = value + 1;
END;
CREATE TRIGGER IF NOT EXISTS runs_counted_update AFTER UPDATE OF status ON runs
    WHEN OLD.status IS NOT NEW.status BEGIN
    INSERT INTO counters (name, value) VALUES ('runs:' || OLD.status, -1)
        ON CONFLICT (name) DO UPDATE SET value = value - 1;
    INSERT INTO counters (name, value) VALUES ('runs:' || NEW.status, 1)
        ON CONFLICT (name) DO UPDATE SET value = value + 1;
END;
CREATE TRIGGER IF NOT EXISTS runs_counted_delete AFTER DELETE ON runs BEGIN
    INSERT INTO counters (name, value) VALUES ('runs:' || OLD.status, -1)
        ON CONFLICT (name) DO UPDATE SET value = value - 1;
END;
";

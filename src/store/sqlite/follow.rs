//! Followed SQLite stores notice other processes' writes: while a run of the store is
//! followed, a helper thread asks SQLite every few milliseconds whether another connection
//! committed (`PRAGMA data_version`, which reads no table), and wakes every follower when one
//! did. Writes through this store wake their run's followers directly; this catches the
//! writes of `cairn worker` processes on the same file.

use std::path::PathBuf;
use std::time::Duration;

use super::open::open_connection;
use super::options::SqliteOptions;
use crate::store::RunWatch;

/// How often a followed store looks for other processes' commits.
const LOOK_EVERY: Duration = Duration::from_millis(2);

/// How often an unfollowed store looks whether it is followed again.
const IDLE_EVERY: Duration = Duration::from_millis(50);

/// Starts the helper thread of a store at `path`; it ends once the store (its watch) is gone.
pub(super) fn start(path: PathBuf, options: SqliteOptions, watch: &RunWatch) {
    let weak = watch.downgrade();
    let conn = match open_connection(&path, &options, false) {
        Ok(conn) => conn,
        Err(e) => {
            tracing::warn!(error = %e, "cannot open the sqlite store's follower connection; followers poll");
            return;
        }
    };
    // The baseline is read before the first follower subscribes: every later commit shows.
    let version = |conn: &rusqlite::Connection| {
        conn.query_row("PRAGMA data_version", [], |row| row.get::<_, i64>(0)).ok()
    };
    let mut last = version(&conn);
    let spawned = std::thread::Builder::new().name("cairn-sqlite-follow".into()).spawn(move || {
        loop {
            let Some(watch) = weak.upgrade() else { return };
            if watch.followed() == 0 {
                drop(watch);
                // Nobody to wake; a new follower reads the run before it waits anyway.
                last = version(&conn);
                std::thread::sleep(IDLE_EVERY);
                continue;
            }
            let now = version(&conn);
            if let (Some(before), Some(now)) = (last, now)
                && before != now
            {
                watch.notify_all();
            }
            last = now.or(last);
            drop(watch);
            std::thread::sleep(LOOK_EVERY);
        }
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the sqlite store's follower thread; followers poll");
    }
}

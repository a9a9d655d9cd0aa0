//! How a [`SqliteStore`](super::SqliteStore) is opened: durability, clock, busy timeout,
//! group commit and the checkpoint threshold.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{SharedClock, SystemClock};
use crate::store::Durability;

/// How to open a [`SqliteStore`](crate::SqliteStore).
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// `synchronous=NORMAL` (the default) or `FULL`.
    pub durability: Durability,
    /// Reads lease expiry; inject a [`ManualClock`](crate::ManualClock) to test expiry
    /// without sleeping.
    pub clock: SharedClock,
    /// How long a write waits for another connection's (or process's) write lock before
    /// failing with [`Error::Sqlite`](crate::store::Error::Sqlite) (`SQLITE_BUSY`).
    pub busy_timeout: Duration,
    /// Whether concurrent appends share a transaction. On by default; off measures (and
    /// tests) the one-transaction-per-append path.
    pub group_commit: bool,
    /// WAL pages after which the store's checkpoint thread copies the log back into the
    /// database at the writer's next pause (SQLite's own default threshold is 1,000). At four
    /// times this, a commit checkpoints inline, so the log stays bounded however fast the
    /// writer appends.
    pub checkpoint_pages: u32,
}

impl SqliteOptions {
    /// `synchronous=NORMAL`, the system clock, a 5 s busy timeout and group commit.
    #[allow(clippy::new_without_default)] // Options are spelled out where a store is opened.
    pub fn new() -> SqliteOptions {
        SqliteOptions {
            durability: Durability::Normal,
            clock: Arc::new(SystemClock),
            busy_timeout: Duration::from_secs(5),
            group_commit: true,
            checkpoint_pages: 1_000,
        }
    }
}

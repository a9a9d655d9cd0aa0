//! The clock seam: wall-clock time enters the engine only through a [`Clock`].
//!
//! Replay depends on keeping ambient time out of the engine and the stores, so every
//! timestamp (entry `ts`, lease expiry, the journaled `now()`) is read from a `Clock` value
//! the host injects. [`SystemClock`] is the production clock; [`ManualClock`] lets tests
//! move time by hand, so lease expiry and deadlines are tested without sleeping.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The operating system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
    }
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: i64) -> ManualClock {
        ManualClock { now: Arc::new(AtomicI64::new(start_ms)) }
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: i64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `ms`.
    pub fn set(&self, ms: i64) {
        self.now.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }
}

/// A shared clock handle, as the engine and the stores hold it.
pub type SharedClock = Arc<dyn Clock>;

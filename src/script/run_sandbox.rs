//! What all the scripts of one run share: the run's memory (what every script holds, and what
//! the host keeps for them), its journal-entry cap, its script time and the latch of its first
//! sandbox error. A child workflow's script is part of the run that calls it, so its bounds
//! are the run's: before, each child script had limits of its own, and a fan-out of children
//! held a multiple of the run's memory (32 children of 80 MiB: 1.4 GB under a 256 MiB limit;
//! recursive children aborted the process). The operation budget stays each script's own
//! (a child's operations count against its own budget, so a replay that serves a child whole
//! charges nothing it did not charge live); the script time, one clock for the whole run,
//! bounds what the children compute together.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::alloc::MemoryAccount;
use crate::error::Error;

/// The most script threads one run may have alive at once: branch threads, nested fan-outs'
/// and child workflows' script threads included, divided among them by structure
/// (`rhai/threads.rs`: a child workflow's script thread takes one from its caller's share and
/// holds the rest), so whether a script fits never depends on timing. Before, each child
/// script held the whole budget again, and recursive children started threads until the
/// process could map no more stacks and aborted.
pub(crate) const MAX_RUN_THREADS: usize = 1024;

/// The run's script time: wall-clock time during which at least one of its threads executes
/// script. A union of intervals, not a sum over threads, so it never exceeds the real time the
/// run took, and many branches preempted on a busy machine do not add up to a timeout.
#[derive(Debug, Default)]
struct ActiveClock {
    /// Threads executing script now.
    active: usize,
    /// Since when some thread has been executing (while `active > 0`).
    since: Option<Instant>,
    /// Closed intervals.
    total: Duration,
}

/// The bounds every script of one run shares (see the module).
#[derive(Debug, Default)]
pub(crate) struct RunSandbox {
    /// Bytes every script's [`MemoryAccount`] holds, together.
    held: Arc<AtomicI64>,
    /// Host memory the scripts' engine calls keep for the rest of the run (journal entries,
    /// events, step results, JSON conversions), charged by the guards' `host_work`.
    host_bytes: AtomicU64,
    /// Journal entries the scripts' engine calls made.
    entries: AtomicU64,
    clock: Mutex<ActiveClock>,
    tripped: OnceLock<Error>,
    /// Lua states of the run alive now: what the run has free is divided among them, since
    /// one Lua instruction can take a whole state's limit at once (`lua/guard.rs`).
    #[cfg(feature = "lua")]
    lua_states: std::sync::atomic::AtomicUsize,
}

impl RunSandbox {
    pub(crate) fn new() -> RunSandbox {
        RunSandbox::default()
    }

    /// A memory account for one script of the run: its own counts, its bytes held added to
    /// the run's.
    pub(crate) fn account(&self) -> MemoryAccount {
        MemoryAccount::within(self.held.clone())
    }

    /// What every script of the run holds, in bytes.
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed).max(0) as u64
    }

    /// What the host keeps for the run's scripts, in bytes.
    pub(crate) fn host_bytes(&self) -> u64 {
        self.host_bytes.load(Ordering::Relaxed)
    }

    /// Keeps `resident` more bytes and `entries` more journal entries for the run; returns
    /// the totals.
    pub(crate) fn keep(&self, resident: u64, entries: u64) -> (u64, u64) {
        let host = self.host_bytes.fetch_add(resident, Ordering::Relaxed).saturating_add(resident);
        let entries = self.entries.fetch_add(entries, Ordering::Relaxed).saturating_add(entries);
        (host, entries)
    }

    fn lock_clock(&self) -> std::sync::MutexGuard<'_, ActiveClock> {
        self.clock.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One more thread executes script.
    pub(crate) fn begin_active(&self) {
        let mut clock = self.lock_clock();
        clock.active += 1;
        if clock.active == 1 {
            clock.since = Some(Instant::now());
        }
    }

    /// One thread fewer executes script.
    pub(crate) fn end_active(&self) {
        let mut clock = self.lock_clock();
        clock.active = clock.active.saturating_sub(1);
        if clock.active == 0
            && let Some(since) = clock.since.take()
        {
            clock.total += since.elapsed();
        }
    }

    /// The run's script time so far.
    pub(crate) fn script_time(&self) -> Duration {
        let clock = self.lock_clock();
        clock.total + clock.since.map_or(Duration::ZERO, |since| since.elapsed())
    }

    /// One more Lua state lives in the run.
    #[cfg(feature = "lua")]
    pub(crate) fn lua_started(&self) {
        self.lua_states.fetch_add(1, Ordering::Relaxed);
    }

    /// One Lua state fewer.
    #[cfg(feature = "lua")]
    pub(crate) fn lua_ended(&self) {
        let _ = self.lua_states.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// The Lua states alive in the run.
    #[cfg(feature = "lua")]
    pub(crate) fn lua_states(&self) -> usize {
        self.lua_states.load(Ordering::Relaxed)
    }

    /// Latches the run's first sandbox error: every script and thread of the run stops with
    /// it. Returns the latched error and whether it is `error` (this call latched it).
    pub(crate) fn trip(&self, error: Error) -> (Error, bool) {
        let mut ours = false;
        let latched = self.tripped.get_or_init(|| {
            ours = true;
            error
        });
        (latched.clone(), ours)
    }

    /// The latched error, if any script of the run hit one.
    pub(crate) fn tripped(&self) -> Option<Error> {
        self.tripped.get().cloned()
    }
}

//! The run's bounds, checked on every Rhai operation of every thread of a run: the operation
//! budget, the memory limit, the wall-clock limit and cancellation, plus a latch that ends the
//! whole run once any thread hits a sandbox error (so a violation inside a pipeline stage whose
//! errors are dropped still ends the run).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::sandbox::SandboxLimits;
use crate::alloc::{CountingAlloc, MemoryAccount};
use crate::error::{Error, ErrorCode};

/// How many operations pass between reads of the clock and the cancellation token.
const SLOW_CHECK_EVERY: u64 = 64;

thread_local! {
    /// The guard of the run this thread executes a script for, or null.
    static CURRENT: std::cell::Cell<*const RunGuard> = const { std::cell::Cell::new(std::ptr::null()) };
}

/// The current thread's run, entered; restores the previous one when dropped.
#[derive(Debug)]
pub(crate) struct Entered<'g> {
    _account: crate::alloc::AccountGuard<'g>,
    previous: *const RunGuard,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let previous = self.previous;
        CURRENT.with(|slot| slot.set(previous));
    }
}

/// Checks the bounds of the run the current thread works for (memory, the clock,
/// cancellation, the latch); `None` on a thread that runs no script.
pub(crate) fn check_current() -> Option<Error> {
    let guard = CURRENT.with(std::cell::Cell::get);
    if guard.is_null() {
        return None;
    }
    // SAFETY: set only by `RunGuard::enter`, whose `Entered` borrows the guard and clears the
    // pointer when dropped.
    let guard = unsafe { &*guard };
    guard.memory_check().or_else(|| guard.slow_check())
}

/// What every thread of one run checks.
#[derive(Debug)]
pub(crate) struct RunGuard {
    operations: AtomicU64,
    max_operations: u64,
    memory: MemoryAccount,
    max_memory: u64,
    /// Whether memory is measured (the counting allocator is installed).
    measured: bool,
    started: Instant,
    max_wall_time: Duration,
    cancel: CancellationToken,
    tripped: OnceLock<Error>,
}

impl RunGuard {
    pub(crate) fn new(limits: &SandboxLimits, cancel: CancellationToken) -> RunGuard {
        RunGuard {
            operations: AtomicU64::new(0),
            max_operations: limits.max_operations,
            memory: MemoryAccount::new(),
            max_memory: limits.max_memory,
            measured: CountingAlloc::is_installed(),
            started: Instant::now(),
            max_wall_time: limits.max_wall_time,
            cancel,
            tripped: OnceLock::new(),
        }
    }

    /// Makes this the current thread's run until the returned guard is dropped: its
    /// allocations are charged to the run, and [`check_current`] checks this guard.
    pub(crate) fn enter(&self) -> Entered<'_> {
        let previous = CURRENT.with(|slot| slot.replace(self as *const RunGuard));
        Entered { _account: self.memory.enter(), previous }
    }

    /// One operation: counts it and returns the error that ends the run, if any bound is
    /// crossed.
    pub(crate) fn operation(&self) -> Option<Error> {
        let n = self.operations.fetch_add(1, Ordering::Relaxed) + 1;
        if n > self.max_operations {
            return Some(self.trip(Error::new(
                ErrorCode::SandboxLimit,
                format!("the script exceeded its budget of {} operations", self.max_operations),
            )));
        }
        if let Some(error) = self.memory_check() {
            return Some(error);
        }
        if let Some(error) = self.tripped.get() {
            return Some(error.clone());
        }
        if n.is_multiple_of(SLOW_CHECK_EVERY) {
            return self.slow_check();
        }
        None
    }

    /// The memory bound alone (also checked at the JSON boundary).
    pub(crate) fn memory_check(&self) -> Option<Error> {
        if self.measured && self.memory.bytes() > self.max_memory {
            return Some(self.trip(Error::new(
                ErrorCode::SandboxLimit,
                format!(
                    "the script holds more than its memory limit of {} MiB; keep fewer or smaller values \
                     (process large data in child workflows or host functions)",
                    self.max_memory >> 20
                ),
            )));
        }
        None
    }

    /// The clock and cancellation, every few hundred operations and at the JSON boundary.
    pub(crate) fn slow_check(&self) -> Option<Error> {
        if self.cancel.is_cancelled() {
            return Some(Error::new(ErrorCode::Cancelled, "the run was stopped"));
        }
        if self.started.elapsed() > self.max_wall_time {
            return Some(self.trip(Error::new(
                ErrorCode::SandboxLimit,
                format!(
                    "the script ran longer than its wall-clock limit of {:.1} s",
                    self.max_wall_time.as_secs_f64()
                ),
            )));
        }
        self.tripped.get().cloned()
    }

    /// Latches the first sandbox error of the run; every thread of the run stops with it.
    pub(crate) fn trip(&self, error: Error) -> Error {
        self.tripped.get_or_init(|| error).clone()
    }

    /// The latched error, if any thread hit one.
    pub(crate) fn tripped(&self) -> Option<Error> {
        self.tripped.get().cloned()
    }
}

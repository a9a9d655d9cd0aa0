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

thread_local! {
    /// When this thread's uncounted script time began, or `None` while it waits for the engine.
    static SINCE: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// The current thread's run, entered; restores the previous one when dropped.
#[derive(Debug)]
pub(crate) struct Entered<'g> {
    _account: crate::alloc::AccountGuard<'g>,
    previous: *const RunGuard,
    previous_start: Option<Instant>,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let previous = self.previous;
        CURRENT.with(|slot| slot.set(previous));
        let start = self.previous_start;
        SINCE.with(|slot| slot.set(start));
    }
}

/// A thread's time not counted as script time; counting resumes when dropped.
#[derive(Debug)]
pub(crate) struct Paused<'g> {
    _guard: std::marker::PhantomData<&'g RunGuard>,
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        SINCE.with(|slot| slot.set(Some(Instant::now())));
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
    /// Nanoseconds the run's threads have spent running script code (waits for the engine
    /// excluded), all threads together.
    script_nanos: AtomicU64,
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
            script_nanos: AtomicU64::new(0),
            max_wall_time: limits.max_wall_time,
            cancel,
            tripped: OnceLock::new(),
        }
    }

    /// Makes this the current thread's run until the returned guard is dropped: its
    /// allocations are charged to the run, and [`check_current`] checks this guard.
    pub(crate) fn enter(&self) -> Entered<'_> {
        let previous = CURRENT.with(|slot| slot.replace(self as *const RunGuard));
        let previous_start = SINCE.with(|slot| slot.replace(Some(Instant::now())));
        Entered { _account: self.memory.enter(), previous, previous_start }
    }

    /// Stops counting this thread's time until the returned guard is dropped: the thread waits
    /// for the engine (a model call, a fan-out's branches, the next branch to run).
    pub(crate) fn pause(&self) -> Paused<'_> {
        self.count_time();
        SINCE.with(|slot| slot.set(None));
        Paused { _guard: std::marker::PhantomData }
    }

    /// Adds this thread's time since it was last counted to the run's script time.
    fn count_time(&self) {
        // A paused thread (no start) stays paused.
        let Some(since) = SINCE.with(std::cell::Cell::get) else { return };
        let now = Instant::now();
        SINCE.with(|slot| slot.set(Some(now)));
        let nanos = u64::try_from(now.duration_since(since).as_nanos()).unwrap_or(u64::MAX);
        self.script_nanos.fetch_add(nanos, Ordering::Relaxed);
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
        self.count_time();
        if Duration::from_nanos(self.script_nanos.load(Ordering::Relaxed)) > self.max_wall_time {
            return Some(self.trip(Error::new(
                ErrorCode::SandboxLimit,
                format!(
                    "the script ran longer than its wall-clock limit of {:.1} s (time spent waiting for \
                     model calls and other engine work is not counted); do less work in the script",
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

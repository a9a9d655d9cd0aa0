//! The run's bounds, checked on every Rhai operation of every thread of a run: the operation
//! budget, the memory limit, the script-time limit and cancellation, plus a latch that ends the
//! whole run once any thread hits a sandbox error (so a violation inside a pipeline stage whose
//! errors are dropped still ends the run).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::sandbox::SandboxLimits;
use crate::alloc::{CountingAlloc, MemoryAccount};
use crate::engine::{ScriptClock, StepOps};
use crate::error::{Error, ErrorCode};
use crate::script::run_sandbox::RunSandbox;
use crate::script::time_limit::TimeLimit;

/// How many operations pass between reads of the clock and the cancellation token.
const SLOW_CHECK_EVERY: u64 = 64;

thread_local! {
    /// The guard of the run this thread executes a script for, or null.
    static CURRENT: std::cell::Cell<*const RunGuard> = const { std::cell::Cell::new(std::ptr::null()) };
}

thread_local! {
    /// The operation tally of the live step the scope this thread runs in belongs to (see
    /// [`crate::engine::Ctx`]'s `step_ops`), set with the scope by the bridge's `with_ctx`.
    static STEP_OPS: std::cell::RefCell<Option<Arc<StepOps>>> = const { std::cell::RefCell::new(None) };
}

/// Makes `ops` the tally this thread's operations count into; returns the previous one.
pub(crate) fn set_step_ops(ops: Option<Arc<StepOps>>) -> Option<Arc<StepOps>> {
    STEP_OPS.with(|slot| slot.replace(ops))
}

/// Counts `n` operations to the step this thread runs inside, if any.
fn count_to_step(n: u64) {
    STEP_OPS.with(|slot| {
        if let Some(ops) = &*slot.borrow() {
            ops.add(n);
        }
    });
}

thread_local! {
    /// Whether this thread counts as executing script for its run (not waiting for the engine).
    static ACTIVE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The current thread's run, entered; restores the previous one when dropped.
#[derive(Debug)]
pub(crate) struct Entered<'g> {
    _account: crate::alloc::AccountGuard<'g>,
    guard: &'g RunGuard,
    previous: *const RunGuard,
    previous_active: bool,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        if ACTIVE.with(|slot| slot.replace(self.previous_active)) {
            self.guard.end_active();
        }
        let previous = self.previous;
        CURRENT.with(|slot| slot.set(previous));
    }
}

/// A thread's time not counted as script time; counting resumes when dropped.
#[derive(Debug)]
pub(crate) struct Paused<'g> {
    guard: &'g RunGuard,
    /// Whether this pause stopped the thread's count (a nested pause changes nothing).
    stopped: bool,
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        if self.stopped {
            ACTIVE.with(|slot| slot.set(true));
            self.guard.begin_active();
        }
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

/// Charges host work done for the current thread's run (see [`RunGuard::host_work`]); `None`
/// on a thread that runs no script or when no bound is crossed.
pub(crate) fn host_work_current(bytes: u64, kept: u64, entries: u64) -> Option<Error> {
    let guard = CURRENT.with(std::cell::Cell::get);
    if guard.is_null() {
        return None;
    }
    // SAFETY: as in `check_current`.
    unsafe { &*guard }.host_work(bytes, kept, entries)
}

/// The memory the current thread's run has room for (its limit less what its script threads
/// and the host hold for it) and its limit; `None` on a thread that runs no script.
pub(crate) fn memory_room_current() -> Option<(u64, u64)> {
    let guard = CURRENT.with(std::cell::Cell::get);
    if guard.is_null() {
        return None;
    }
    // SAFETY: as in `check_current`.
    let guard = unsafe { &*guard };
    Some((guard.memory_room(), guard.max_memory))
}

/// Latches `error` on the current thread's run (its next operation ends with it); nothing on a
/// thread that runs no script.
pub(crate) fn trip_current(error: Error) {
    let guard = CURRENT.with(std::cell::Cell::get);
    if !guard.is_null() {
        // SAFETY: as in `check_current`.
        unsafe { &*guard }.trip(error);
    }
}

/// What every thread of one run checks.
#[derive(Debug)]
pub(crate) struct RunGuard {
    operations: AtomicU64,
    max_operations: u64,
    memory: MemoryAccount,
    max_memory: u64,
    max_allocations: u64,
    /// Whether memory is measured (the counting allocator is installed).
    measured: bool,
    /// The bounds all the scripts of the run share: memory held and kept, journal entries,
    /// script time (all threads together, waits for the engine excluded) and the latch.
    run: Arc<RunSandbox>,
    time: TimeLimit,
    cancel: CancellationToken,
    max_entries: u64,
}

impl RunGuard {
    /// The guard of one script of a run: `run` is what all the run's scripts share, `clock`
    /// the run's handle for the script-time limit (`None` where no run stands behind the
    /// script).
    pub(crate) fn new(
        limits: &SandboxLimits,
        cancel: CancellationToken,
        run: Arc<RunSandbox>,
        clock: Option<ScriptClock>,
    ) -> RunGuard {
        RunGuard {
            operations: AtomicU64::new(0),
            max_operations: limits.max_operations,
            memory: run.account(),
            max_memory: limits.max_memory,
            max_allocations: limits.max_allocations,
            measured: CountingAlloc::is_installed(),
            run,
            time: TimeLimit::new(limits.max_wall_time, clock),
            cancel,
            max_entries: limits.max_journal_entries,
        }
    }

    /// Makes this the current thread's run until the returned guard is dropped: its
    /// allocations are charged to the run, and [`check_current`] checks this guard.
    pub(crate) fn enter(&self) -> Entered<'_> {
        let previous = CURRENT.with(|slot| slot.replace(self as *const RunGuard));
        let previous_active = ACTIVE.with(|slot| slot.replace(true));
        self.begin_active();
        Entered { _account: self.memory.enter(), guard: self, previous, previous_active }
    }

    /// Stops counting this thread's time until the returned guard is dropped: the thread waits
    /// for the engine (a model call, a fan-out's branches, the next branch to run).
    pub(crate) fn pause(&self) -> Paused<'_> {
        let stopped = ACTIVE.with(|slot| slot.replace(false));
        if stopped {
            self.end_active();
        }
        Paused { guard: self, stopped }
    }

    /// One more thread executes script.
    fn begin_active(&self) {
        self.run.begin_active();
    }

    /// One thread fewer executes script.
    fn end_active(&self) {
        self.run.end_active();
    }

    /// The run's script time so far.
    fn script_time(&self) -> Duration {
        self.run.script_time()
    }

    /// One operation: counts it and returns the error that ends the run, if any bound is
    /// crossed.
    pub(crate) fn operation(&self) -> Option<Error> {
        let n = self.operations.fetch_add(1, Ordering::Relaxed) + 1;
        count_to_step(1);
        // The memory bounds first: a copying loop is told about its allocations, the clearer
        // message, when it crosses both.
        if let Some(error) = self.memory_check() {
            return Some(error);
        }
        // Bytes allocated are work too: a builtin that copies or builds megabytes in one
        // operation (`replace`, `to_upper`, a copy-on-write) is charged by what it built.
        let built = if crate::script::host::charging() {
            crate::script::host::operations_for(self.memory.allocated())
        } else {
            0
        };
        if n.saturating_add(built) > self.max_operations {
            return Some(self.trip(self.over_budget()));
        }
        if let Some(error) = self.run.tripped() {
            return Some(error);
        }
        if n.is_multiple_of(SLOW_CHECK_EVERY) {
            return self.slow_check();
        }
        None
    }

    /// Work the host does for the script (see [`crate::script::host`]): `bytes` hashed, copied
    /// or converted, `kept` of them kept for the rest of the run, `entries` journal entries
    /// written. Charges the operation budget by the bytes, the memory account by what is kept,
    /// and the entry cap; the error ends the run.
    pub(crate) fn host_work(&self, bytes: u64, kept: u64, entries: u64) -> Option<Error> {
        if !crate::script::host::charging() {
            return None;
        }
        let operations = crate::script::host::operations_for(bytes);
        let n = self.operations.fetch_add(operations, Ordering::Relaxed).saturating_add(operations);
        count_to_step(operations);
        if n > self.max_operations {
            return Some(self.trip(Error::new(
                ErrorCode::SandboxLimit,
                format!(
                    "the script exceeded its budget of {} operations (engine calls are charged by the bytes \
                     they hash, copy and keep)",
                    self.max_operations
                ),
            )));
        }
        let (_, entries) = self.run.keep(crate::script::host::resident(kept, entries), entries);
        if entries > self.max_entries {
            return Some(self.trip(crate::script::host::too_many_entries(self.max_entries)));
        }
        self.memory_check().or_else(|| self.run.tripped())
    }

    /// What the run may still hold: its limit less what all its scripts hold (when measured)
    /// and what the host keeps for them.
    fn memory_room(&self) -> u64 {
        let held = if self.measured { self.run.held() } else { 0 };
        self.max_memory.saturating_sub(held.saturating_add(self.run.host_bytes()))
    }

    /// The operations of a step body a replay served instead of running it, as its journal
    /// entry counted them live: charged as if the body had run, so the budget ends a run at
    /// the same point whether the step ran or replayed.
    pub(crate) fn served_step(&self, ops: u64) -> Option<Error> {
        let n = self.operations.fetch_add(ops, Ordering::Relaxed).saturating_add(ops);
        count_to_step(ops);
        if n > self.max_operations {
            // As the body's own operation would have said, had it run.
            return Some(self.trip(self.over_budget()));
        }
        self.run.tripped()
    }

    /// The error of a run past its operation budget.
    fn over_budget(&self) -> Error {
        Error::new(
            ErrorCode::SandboxLimit,
            format!(
                "the script exceeded its budget of {} operations (the bytes its allocations, copies and \
                 engine calls handle count too, 4 to an operation)",
                self.max_operations
            ),
        )
    }

    /// The memory bounds alone, held and allocated (also checked at the JSON boundary).
    pub(crate) fn memory_check(&self) -> Option<Error> {
        let host = self.run.host_bytes();
        if host > self.max_memory {
            return Some(self.trip(crate::script::host::out_of_memory(self.max_memory)));
        }
        if !self.measured {
            return None;
        }
        if self.memory.allocations() > self.max_allocations {
            return Some(self.trip(Error::new(
                ErrorCode::SandboxLimit,
                format!(
                    "the script made more than {} allocations; copying a large or deeply nested value \
                     allocates once per element, so avoid copying big values in loops",
                    self.max_allocations
                ),
            )));
        }
        // What every script of the run holds: a child workflow's script is the run's.
        if self.run.held().saturating_add(host) > self.max_memory {
            return Some(self.trip(Error::new(
                ErrorCode::SandboxLimit,
                format!(
                    "the script holds more than its memory limit of {} MiB; keep fewer or smaller values \
                     (process large data in host functions)",
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
        if let Some(error) = self.time.check(self.script_time()) {
            let (latched, ours) = self.run.trip(error);
            if ours {
                self.time.stopped();
            }
            return Some(latched);
        }
        self.run.tripped()
    }

    /// Latches the first sandbox error of the run; every thread of the run stops with it.
    pub(crate) fn trip(&self, error: Error) -> Error {
        self.run.trip(error).0
    }

    /// The latched error, if any thread hit one.
    pub(crate) fn tripped(&self) -> Option<Error> {
        self.run.tripped()
    }
}

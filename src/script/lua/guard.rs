//! The run's bounds for the Lua dialect, checked from the instruction hook on every thread
//! (coroutine) of a run: the operation budget (one VM instruction is one operation), the
//! script-time limit, cancellation, and a latch that ends the whole run once any branch hits a
//! sandbox error. Memory is bounded by the state's own byte limit (`set_memory_limit`), lowered
//! by what the run's host and other scripts hold, and by the run's total in the hook.
//!
//! A run's Lua state lives on one OS thread, so the guard's own counts are plain cells; what
//! all the scripts of the run share (`script::run_sandbox`) is atomic.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::{Error, ErrorCode};
use crate::script::rhai::sandbox::SandboxLimits;
use crate::script::run_sandbox::RunSandbox;

/// What every coroutine of one run checks.
#[derive(Debug)]
pub(super) struct Guard {
    operations: Cell<u64>,
    max_operations: u64,
    /// Whether this script's thread counts in the run's script time now (it runs Lua or the
    /// runner's own work, not waiting for the engine).
    counting: Cell<bool>,
    /// The bounds all the scripts of the run share: memory held and kept, journal entries,
    /// script time and the latch.
    run: Arc<RunSandbox>,
    time: crate::script::time_limit::TimeLimit,
    pub(super) max_memory: u64,
    cancel: CancellationToken,
    /// The cap on the run's journal entries.
    max_entries: u64,
    /// The most branches (items) one fan-out may have, as a Rhai array may hold.
    pub(super) max_branches: usize,
    /// What the run's script thread allocates, as [`crate::CountingAlloc`] counts it: the bytes
    /// a builtin or a concatenation builds in one instruction (`upper` of 4 MB, `s .. s`) are
    /// charged to the operation budget. The state's byte limit bounds what is held, lowered by
    /// what the run's other scripts hold.
    pub(super) memory: crate::alloc::MemoryAccount,
}

impl Guard {
    /// The guard of one script of a run: `run` is what all the run's scripts share, `clock`
    /// the run's handle for the script-time limit (`None` where no run stands behind the
    /// script).
    pub(super) fn new(
        limits: &SandboxLimits,
        cancel: CancellationToken,
        run: Arc<RunSandbox>,
        clock: Option<crate::engine::ScriptClock>,
    ) -> Guard {
        Guard {
            operations: Cell::new(0),
            max_operations: limits.max_operations,
            counting: Cell::new(false),
            memory: run.account(),
            run: {
                run.lua_started();
                run
            },
            time: crate::script::time_limit::TimeLimit::new(limits.max_wall_time, clock),
            max_memory: limits.max_memory,
            cancel,
            max_entries: limits.max_journal_entries,
            max_branches: limits.max_array_size,
        }
    }

    /// Starts counting script time (the script thread runs Lua or the runner's own work).
    pub(super) fn resume_clock(&self) {
        if !self.counting.replace(true) {
            self.run.begin_active();
        }
    }

    /// Stops counting script time (the thread waits for the engine); returns whether it was
    /// counting, so a nested pause restores exactly what it found.
    pub(super) fn pause_clock(&self) -> bool {
        let was = self.counting.replace(false);
        if was {
            self.run.end_active();
        }
        was
    }

    fn script_time(&self) -> Duration {
        self.run.script_time()
    }

    /// Counts `n` operations and checks every bound; the error ends the run.
    pub(super) fn charge(&self, n: u64) -> Option<Error> {
        let total = self.operations.get().saturating_add(n);
        self.operations.set(total);
        super::step_tally::count(n);
        let built = if crate::script::host::charging() {
            crate::script::host::operations_for(self.memory.allocated())
        } else {
            0
        };
        if total.saturating_add(built) > self.max_operations {
            return Some(self.trip(Error::new(
                ErrorCode::SandboxLimit,
                format!(
                    "the script exceeded its budget of {} operations (the bytes its allocations, copies and \
                     engine calls handle count too, 4 to an operation)",
                    self.max_operations
                ),
            )));
        }
        self.check()
    }

    /// Work the host does for the script: `bytes` hashed, copied or converted (charged to the
    /// operation budget), `kept` of them kept for the rest of the run (charged to memory with the entries),
    /// `entries` journal entries written (capped). The error ends the run; the caller lowers
    /// the state's byte limit to [`Guard::memory_room`].
    pub(super) fn host_work(&self, bytes: u64, kept: u64, entries: u64) -> Option<Error> {
        if !crate::script::host::charging() {
            return None;
        }
        let (host, entries) = self.run.keep(crate::script::host::resident(kept, entries), entries);
        if entries > self.max_entries {
            return Some(self.trip(crate::script::host::too_many_entries(self.max_entries)));
        }
        if host > self.max_memory {
            return Some(self.out_of_memory());
        }
        self.charge(crate::script::host::operations_for(bytes))
    }

    /// The bytes the host may still keep for the script: the run's limit less what the host
    /// keeps for the run and what its other scripts (child workflows, or the caller of this
    /// one) hold.
    pub(super) fn memory_room(&self) -> u64 {
        let others = self.run.held().saturating_sub(self.memory.bytes());
        self.max_memory.saturating_sub(self.run.host_bytes()).saturating_sub(others)
    }

    /// The byte limit of this script's Lua state, which holds `used` now: what it holds plus
    /// its share of what the run has free. One instruction (`string.rep`, a concatenation)
    /// can take a state's whole limit at once, before any hook runs, so several Lua states
    /// of one run (child workflows) divide the free memory among them rather than each
    /// counting on all of it; a run's only state gets all of it. Set again every
    /// `HOOK_EVERY` instructions and after each engine call.
    pub(super) fn state_limit(&self, used: u64) -> u64 {
        let free = self.max_memory.saturating_sub(self.run.host_bytes()).saturating_sub(self.run.held());
        let states = self.run.lua_states().max(1) as u64;
        used.saturating_add(free / states).min(self.memory_room().max(used))
    }

    /// The bounds that do not count anything: the latch, cancellation and the clock.
    pub(super) fn check(&self) -> Option<Error> {
        if let Some(error) = self.run.tripped() {
            return Some(error);
        }
        // What every script of the run holds (this state's own limit bounds its part).
        if self.run.held().saturating_add(self.run.host_bytes()) > self.max_memory {
            return Some(self.out_of_memory());
        }
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
        None
    }

    /// The error a memory allocation failure ends the run with.
    pub(super) fn out_of_memory(&self) -> Error {
        self.trip(Error::new(
            ErrorCode::SandboxLimit,
            format!(
                "the script holds more than its memory limit of {} MiB; keep fewer or smaller values \
                 (process large data in host functions)",
                self.max_memory >> 20
            ),
        ))
    }

    /// Latches the first sandbox error of the run; every coroutine of the run stops with it.
    pub(super) fn trip(&self, error: Error) -> Error {
        self.run.trip(error).0
    }

    /// The latched error, if any coroutine (or script) of the run hit one.
    pub(super) fn tripped(&self) -> Option<Error> {
        self.run.tripped()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.run.lua_ended();
    }
}

/// A future whose polls are script time (the top of a run: every Lua instruction runs inside
/// one of its polls).
pub(super) struct Timed<F> {
    pub(super) guard: Rc<Guard>,
    pub(super) inner: Pin<Box<F>>,
}

impl<F: Future> Future for Timed<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.guard.resume_clock();
        let result = self.inner.as_mut().poll(cx);
        self.guard.pause_clock();
        result
    }
}

/// A future of engine work done for the script (a model call, a journal write, a fan-out's
/// bookkeeping): its polls are not script time, and what they allocate is not the script's
/// (the host work a call does for the script is charged by `host_work`, by its bytes). Before,
/// a `parallel` of 10,000 one-call branches spent about 10,000 operations a branch on the
/// engine's own allocations, so it could not finish within the default budget.
pub(super) struct EngineWork<F> {
    pub(super) guard: Rc<Guard>,
    pub(super) inner: Pin<Box<F>>,
}

impl<F> EngineWork<F> {
    pub(super) fn new(guard: &Rc<Guard>, inner: F) -> EngineWork<F> {
        // The engine's future (an agent call's is about 11 KB) is boxed as engine work too.
        let _engine_work = crate::alloc::MemoryAccount::suspend();
        EngineWork { guard: guard.clone(), inner: Box::pin(inner) }
    }
}

impl<F: Future> Future for EngineWork<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let was_counting = self.guard.pause_clock();
        let result = {
            let _engine_work = crate::alloc::MemoryAccount::suspend();
            self.inner.as_mut().poll(cx)
        };
        if was_counting {
            self.guard.resume_clock();
        }
        result
    }
}

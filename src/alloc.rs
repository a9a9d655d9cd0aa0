//! Memory accounting for script runs: a counting global allocator.
//!
//! Rhai's own limits bound each value (a string's length, an array's length, a map's size) but
//! not their total, so a short script holding many large values can take gigabytes. cairn
//! measures where memory is really allocated instead: [`CountingAlloc`] wraps the system
//! allocator and charges every allocation made on a thread that runs a script (the script's
//! thread and each of its branch threads) to that run's [`MemoryAccount`], and credits every
//! free made there. The runner checks the account from Rhai's progress callback (every
//! operation) and at the JSON boundary, and ends the run with `sandbox_limit` once it is over
//! the run's limit.
//!
//! Install it in the binary that embeds cairn (the `cairn` binary and the test binaries do):
//!
//! ```
//! #[global_allocator]
//! static ALLOCATOR: cairn::CountingAlloc = cairn::CountingAlloc;
//! # fn main() {}
//! ```
//!
//! Without it, [`CountingAlloc::is_installed`] is false and a run's memory is bounded only by
//! Rhai's per-value limits (`SandboxLimits`): the total is not measured.
//!
//! What is counted: the interpreter's allocations on the run's threads while the script
//! computes. Work the engine does for a script (a model call, a journal write) runs with the
//! account suspended, so the engine's own buffers are never charged to the script. Memory
//! allocated on a run's thread and freed on another thread stays charged (the count errs
//! high); memory allocated elsewhere and freed on a run's thread is credited, and the count
//! never reads below zero. Both are small per host call (the options a call hands over).
//! The cost is a few thread-local reads per allocation; a run's threads keep a count of their
//! own and add it to the run's account once it has moved by 64 KiB, so the account reads low by
//! at most 64 KiB per thread.
//!
//! The account also counts the allocations made (`realloc` included): copying a value allocates
//! once per nested array, map and string in it, work that the interpreter's operation count
//! does not see, so the sandbox bounds it too (`SandboxLimits::max_allocations`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// A global allocator that charges allocations on a script run's threads to that run.
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingAlloc;

static INSTALLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The account of the run whose script this thread is running, or null. A `const`
    /// initialiser with no destructor, so the allocator can read it at any time.
    static ACCOUNT: Cell<*const MemoryAccount> = const { Cell::new(std::ptr::null()) };
    /// Bytes charged on this thread and not yet added to the account: the shared counter is
    /// touched once per [`FLUSH_BYTES`] of change, not once per allocation.
    static PENDING: Cell<i64> = const { Cell::new(0) };
    /// Allocations made on this thread and not yet added to the account's count.
    static PENDING_ALLOCS: Cell<u64> = const { Cell::new(0) };
    /// Bytes allocated on this thread (frees not subtracted) and not yet added to the account.
    static PENDING_ALLOCATED: Cell<u64> = const { Cell::new(0) };
}

/// How many allocations a thread counts before adding them to the run's account.
const FLUSH_ALLOCS: u64 = 1024;

/// How far a thread's own count may drift before it is added to the run's account. The
/// account reads low by at most this much per thread of the run.
const FLUSH_BYTES: i64 = 64 << 10;

/// Adds this thread's pending counts to the account they belong to and clears them.
fn flush(account: *const MemoryAccount) {
    let _ = PENDING.try_with(|pending| {
        let bytes = pending.replace(0);
        if bytes != 0 && !account.is_null() {
            // SAFETY: as in `CountingAlloc::charge`.
            unsafe { &*account }.add_bytes(bytes);
        }
    });
    let _ = PENDING_ALLOCS.try_with(|pending| {
        let count = pending.replace(0);
        if count != 0 && !account.is_null() {
            // SAFETY: as in `CountingAlloc::charge`.
            unsafe { &*account }.allocations.fetch_add(count, Ordering::Relaxed);
        }
    });
    let _ = PENDING_ALLOCATED.try_with(|pending| {
        let bytes = pending.replace(0);
        if bytes != 0 && !account.is_null() {
            // SAFETY: as in `CountingAlloc::charge`.
            unsafe { &*account }.allocated.fetch_add(bytes, Ordering::Relaxed);
        }
    });
}

impl CountingAlloc {
    /// Whether the process allocates through [`CountingAlloc`] (it has allocated through it at
    /// least once, which every process does before a script runs).
    pub fn is_installed() -> bool {
        INSTALLED.load(Ordering::Relaxed)
    }

    #[inline]
    fn charge(bytes: usize, sign: i64) {
        // `try_with`: during thread teardown the slot may be gone; then nothing is charged.
        let _ = ACCOUNT.try_with(|account| {
            let account = account.get();
            if !account.is_null() {
                if sign > 0 {
                    let _ = PENDING_ALLOCATED.try_with(|pending| {
                        let total = pending.get() + bytes as u64;
                        if total >= FLUSH_BYTES as u64 {
                            pending.set(0);
                            // SAFETY: as below.
                            unsafe { &*account }.allocated.fetch_add(total, Ordering::Relaxed);
                        } else {
                            pending.set(total);
                        }
                    });
                    let _ = PENDING_ALLOCS.try_with(|pending| {
                        let count = pending.get() + 1;
                        if count >= FLUSH_ALLOCS {
                            pending.set(0);
                            // SAFETY: as below.
                            unsafe { &*account }.allocations.fetch_add(count, Ordering::Relaxed);
                        } else {
                            pending.set(count);
                        }
                    });
                }
                let _ = PENDING.try_with(|pending| {
                    let bytes = pending.get() + sign * bytes as i64;
                    if bytes.abs() >= FLUSH_BYTES {
                        pending.set(0);
                        // SAFETY: a pointer is set only by `MemoryAccount::enter`, whose guard
                        // clears it before the account can be dropped (the guard borrows it).
                        unsafe { &*account }.add_bytes(bytes);
                    } else {
                        pending.set(bytes);
                    }
                });
            }
        });
    }
}

// SAFETY: every method forwards to `System` unchanged; the counting touches only atomics and a
// const thread-local, and never allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !INSTALLED.load(Ordering::Relaxed) {
            INSTALLED.store(true, Ordering::Relaxed);
        }
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            CountingAlloc::charge(layout.size(), 1);
        }
        ptr
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            CountingAlloc::charge(layout.size(), 1);
        }
        ptr
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        CountingAlloc::charge(layout.size(), -1);
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            CountingAlloc::charge(layout.size(), -1);
            CountingAlloc::charge(new_size, 1);
        }
        new
    }
}

/// The memory a run's script threads hold, in bytes, as [`CountingAlloc`] counts it.
#[derive(Debug, Default)]
pub(crate) struct MemoryAccount {
    bytes: AtomicI64,
    /// Allocations made (reallocations included), never decreasing: the work of copying
    /// values, which an interpreter's operation count does not see (one assignment of a
    /// nested value copies every level of it).
    allocations: AtomicU64,
    /// Bytes allocated (reallocations' new sizes included), never decreasing: the copying and
    /// building a builtin does in one operation (`replace`, `to_upper`, a copy-on-write of a
    /// large string), which the runner charges to the operation budget.
    allocated: AtomicU64,
    /// What every script of the run holds together, when this account is one script's of a
    /// run that has others (a child workflow's): changes of `bytes` are added there too.
    run: Option<std::sync::Arc<AtomicI64>>,
}

impl MemoryAccount {
    /// A new account holding nothing whose changes in bytes held are also added to `run`,
    /// the count of what all the scripts of one run hold.
    pub(crate) fn within(run: std::sync::Arc<AtomicI64>) -> MemoryAccount {
        MemoryAccount {
            bytes: AtomicI64::new(0),
            allocations: AtomicU64::new(0),
            allocated: AtomicU64::new(0),
            run: Some(run),
        }
    }

    /// Adds a change of bytes held (never allocates: the allocator calls it).
    #[inline]
    fn add_bytes(&self, bytes: i64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        if let Some(run) = &self.run {
            run.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// The bytes charged and not yet freed (never below zero).
    #[cfg_attr(not(feature = "lua"), allow(dead_code))] // read by the Lua guard
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed).max(0) as u64
    }

    /// The allocations charged so far (low by at most [`FLUSH_ALLOCS`] per thread).
    pub(crate) fn allocations(&self) -> u64 {
        self.allocations.load(Ordering::Relaxed)
    }

    /// The bytes allocated so far, frees not subtracted (low by at most [`FLUSH_BYTES`] per
    /// thread).
    pub(crate) fn allocated(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed)
    }

    /// Charges this thread's allocations to the account until the guard is dropped (the guard
    /// restores whatever the thread charged before).
    pub(crate) fn enter(&self) -> AccountGuard<'_> {
        let previous = ACCOUNT.with(|slot| slot.replace(self as *const MemoryAccount));
        flush(previous);
        AccountGuard { previous, _account: std::marker::PhantomData }
    }

    /// Suspends this thread's charging (for work the engine does on the script's behalf)
    /// until the guard is dropped.
    pub(crate) fn suspend() -> AccountGuard<'static> {
        let previous = ACCOUNT.with(|slot| slot.replace(std::ptr::null()));
        flush(previous);
        AccountGuard { previous, _account: std::marker::PhantomData }
    }
}

impl Drop for MemoryAccount {
    /// A script that ends takes back from its run what it still counted as held (memory it
    /// allocated and the engine frees elsewhere stays charged to it, and must not stay charged
    /// to the run after it).
    fn drop(&mut self) {
        if let Some(run) = &self.run {
            run.fetch_sub(self.bytes.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

/// Restores the thread's previous account when dropped.
#[derive(Debug)]
pub(crate) struct AccountGuard<'a> {
    previous: *const MemoryAccount,
    _account: std::marker::PhantomData<&'a MemoryAccount>,
}

impl Drop for AccountGuard<'_> {
    fn drop(&mut self) {
        let previous = self.previous;
        if let Ok(current) = ACCOUNT.try_with(|slot| slot.replace(previous)) {
            flush(current);
        }
    }
}

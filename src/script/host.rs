//! What the host's work for a script costs the script, in both dialects.
//!
//! An interpreter's limits see the operations it executes and the memory it holds, not the
//! work a script makes the host do: a `now()` is one operation for the script and a journal
//! entry the host keeps for the rest of the run; `random(key)` with a 4 MiB key is one
//! operation and 4 MiB hashed; a step result or a log's data is copied out of the interpreter
//! into journal entries and events. Each engine call therefore charges its run (see each
//! dialect's guard):
//! - the operation budget, one operation per [`BYTES_PER_OPERATION`] bytes it hashes, copies
//!   or converts, on top of the call's own one;
//! - the memory account, [`ENTRY_BYTES`] per journal entry plus the bytes of payload the host
//!   keeps (keys, messages, log data, step results that left the interpreter), for the rest of
//!   the run: the journal is kept for the run's lifetime;
//! - the run's count of journal entries, capped by `SandboxLimits::max_journal_entries`.
//! - script time: `now`, `random` and `uuid` wait for nothing but the host's own work (the key
//!   hashed, the entry journaled), so their time counts as the script's.
//!
//! Builtins that do work in proportion to their input in one operation (`replace`,
//! `index_of`, `upper`, ...) charge the same rate through the same budget.
//!
//! Beside the charge, what an engine call's error is to a script, in both dialects: which
//! errors a script cannot catch ([`uncatchable`]), the record a catchable one is
//! ([`error_record`]) and the error a thrown record stands for again ([`error_of_record`]).
//! How a call reaches the engine is each dialect's own (`rhai/bridge.rs`, `lua/shared.rs`):
//! a Rhai script runs on a thread of its own and blocks it on the engine's future, its script
//! clock paused, and raises an error as Rhai's `EvalAltResult`; a Lua script is a coroutine
//! that yields to the engine's future and answers its wrapper `(ok, ...)`, latching an
//! uncatchable error in its frame. The two share these rules, not that code.

use serde_json::Value;

use crate::error::{Error, ErrorCode};

/// Whether host work is charged: always, except in a build with the `bench-seams` feature,
/// where `benches/host_charge.rs` switches it off between runs to measure what charging costs.
#[cfg(not(feature = "bench-seams"))]
pub(crate) const fn charging() -> bool {
    true
}

#[cfg(feature = "bench-seams")]
static CHARGING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether host work is charged (the `bench-seams` build: as last set by [`set_charging`]).
#[cfg(feature = "bench-seams")]
pub(crate) fn charging() -> bool {
    CHARGING.load(std::sync::atomic::Ordering::Relaxed)
}

/// Switches host-work charging on or off for runs started afterwards (the overhead bench's
/// seam; only in a build with the `bench-seams` feature, never in the binary).
#[cfg(feature = "bench-seams")]
pub fn set_charging(on: bool) {
    CHARGING.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Bytes of host work (hashing, copying, converting, scanning) that cost one operation.
pub(crate) const BYTES_PER_OPERATION: u64 = 4;

/// How many copies of a payload the host keeps while the run lasts: the journal entry's
/// serialized payload and the store's (or the replay state's) copy of it.
pub(crate) const PAYLOAD_COPIES: u64 = 2;

/// The host memory one journal entry is charged while the run lasts, besides its payload: a
/// `now()` flood through the binary grows by about 1 KiB an entry, and like a payload it is
/// charged for both copies ([`PAYLOAD_COPIES`]), the run's and the store's.
pub(crate) const ENTRY_BYTES: u64 = 1024 * PAYLOAD_COPIES;

/// The host memory charged for `entries` journal entries keeping `payload` bytes.
pub(crate) fn resident(payload: u64, entries: u64) -> u64 {
    payload.saturating_mul(PAYLOAD_COPIES).saturating_add(entries.saturating_mul(ENTRY_BYTES))
}

/// The operations `bytes` of host work cost.
pub(crate) fn operations_for(bytes: u64) -> u64 {
    bytes / BYTES_PER_OPERATION
}

/// The error of a run past its journal-entry cap.
pub(crate) fn too_many_entries(max: u64) -> Error {
    Error::new(
        ErrorCode::SandboxLimit,
        format!(
            "the script made more than {max} journal entries (engine calls: now, random, uuid, steps, logs, \
             agent calls); batch the work or split it into child workflows"
        ),
    )
}

/// The error of a run whose script holds more than its memory limit, interpreter and host
/// together.
pub(crate) fn out_of_memory(max: u64) -> Error {
    Error::new(
        ErrorCode::SandboxLimit,
        format!(
            "the script holds more than its memory limit of {} MiB; keep fewer or smaller values \
             (process large data in host functions)",
            max >> 20
        ),
    )
}

/// Whether an engine call's error is beyond the script's reach, in both dialects: budget
/// exhaustion, cancellation, sandbox limits and violations, replay-strict misses and internal
/// faults end the frame (sandbox errors the run) instead of being caught by `try`/`pcall`.
pub(crate) fn uncatchable(error: &Error) -> bool {
    matches!(
        error.code,
        ErrorCode::BudgetExhausted
            | ErrorCode::Cancelled
            | ErrorCode::SandboxLimit
            | ErrorCode::SandboxViolation
            | ErrorCode::JournalMiss
            | ErrorCode::RekeyRefused
            | ErrorCode::Internal
    )
}

/// A catchable engine error as the value a script sees: the record `{code, message,
/// retryable}` (with `diagnostics` when it has some), a Rhai map or a Lua table.
pub(crate) fn error_record(error: &Error) -> Value {
    serde_json::to_value(error).unwrap_or(Value::Null)
}

/// The engine error a value a script threw is the record of, if it is one: an error caught
/// and thrown again keeps its code.
pub(crate) fn error_of_record(value: Value) -> Option<Error> {
    serde_json::from_value(value).ok()
}

/// The error of a cairn global called where no run is.
pub(crate) fn outside_run() -> Error {
    Error::internal("a cairn global was called outside a run")
}

//! How either dialect's analysis runs: a panic in it, or a thread that cannot start, is an
//! unbounded result (a bug in cairn), never a panic in the caller.

use super::CallBound;
use super::reason::Reason;

/// Runs `analyze`, turning a panic into an unbounded result.
pub(crate) fn catching(analyze: impl FnOnce() -> CallBound) -> CallBound {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(analyze)).unwrap_or_else(|_| internal())
}

/// Runs `analyze` on a thread of its own with a `stack`-byte stack, whatever stack the caller
/// runs on, turning a panic into an unbounded result.
pub(crate) fn on_own_stack(stack: usize, analyze: impl FnOnce() -> CallBound + Send) -> CallBound {
    let spawned = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("cairn-bound".into())
            .stack_size(stack)
            .spawn_scoped(scope, || catching(analyze))
            .map(|handle| handle.join())
    });
    match spawned {
        Ok(Ok(bound)) => bound,
        _ => internal(),
    }
}

/// The result of an analysis that failed.
pub(crate) fn internal() -> CallBound {
    Reason::Internal.at(1, 1)
}

//! The live step the Lua code running now counts its operations to: a stack kept beside the
//! frame stack (`frame::Scoped` pushes the polled scope's tally), so the guard that counts
//! operations needs nothing from the frames.

use std::cell::RefCell;
use std::sync::Arc;

use crate::engine::StepOps;

thread_local! {
    static TALLIES: RefCell<Vec<Option<Arc<StepOps>>>> = const { RefCell::new(Vec::new()) };
}

/// Counts `n` operations to the live step the Lua code running now is inside, if any (the
/// scope on top of the stack: a step body's, or a branch's or step's inside it).
pub(super) fn count(n: u64) {
    TALLIES.with(|tallies| {
        if let Some(Some(ops)) = tallies.borrow().last() {
            ops.add(n);
        }
    });
}

/// Makes `tally` the one counted to until the returned guard drops (even on unwind).
pub(super) fn enter(tally: Option<Arc<StepOps>>) -> Entered {
    TALLIES.with(|tallies| tallies.borrow_mut().push(tally));
    Entered
}

/// Pops the tally [`enter`] pushed.
pub(super) struct Entered;

impl Drop for Entered {
    fn drop(&mut self) {
        let _ = TALLIES.try_with(|tallies| tallies.borrow_mut().pop());
    }
}

//! A live step body's operation tally (journaled as the step's `ops`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The sandbox operations a live step body runs, counted by the script runners for the
/// context the operation runs in (the body's, or a branch's or step's inside it) and added to
/// every enclosing step's tally. The step's terminal entry journals its tally (`ops`) and a
/// replay that serves the step charges it again, so the operation budget counts a step the
/// same whether its body ran or was served.
#[derive(Debug, Default)]
pub(crate) struct StepOps {
    count: AtomicU64,
    /// The tally of the live step this one runs inside, if any.
    parent: Option<Arc<StepOps>>,
}

impl StepOps {
    /// A tally for a step body run inside `parent`'s (if any).
    pub(crate) fn inside(parent: Option<Arc<StepOps>>) -> Arc<StepOps> {
        Arc::new(StepOps { count: AtomicU64::new(0), parent })
    }

    /// Counts `n` operations to this step and every step enclosing it.
    pub(crate) fn add(&self, n: u64) {
        let mut at = Some(self);
        while let Some(tally) = at {
            tally.count.fetch_add(n, Ordering::Relaxed);
            at = tally.parent.as_deref();
        }
    }

    /// The operations counted so far.
    pub(crate) fn total(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

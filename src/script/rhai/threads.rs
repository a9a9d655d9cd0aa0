//! How many branch threads a fan-out gets: a function of the script, never of timing.
//!
//! A run may have at most `MAX_RUN_THREADS` branch threads. Counting the threads alive at the
//! moment a fan-out starts would make the outcome depend on how nested fan-outs overlap (the
//! same script ending `ok` once and `sandbox_limit` the next time), so the budget is divided
//! by structure instead: the script thread holds the whole budget; a fan-out with budget `B`
//! that wants `w` workers gets `min(w, B)` threads (its other branches queue behind them), and
//! each of its threads holds `(B - workers) / workers` for fan-outs nested inside its branches.
//! A subtree never uses more threads than its budget, so the run never exceeds the cap, and
//! every grant depends only on the fan-outs' sizes and nesting. A fan-out whose thread holds no
//! budget fails with `sandbox_limit`, the same way on every run.

use std::cell::Cell;

use crate::error::{Error, ErrorCode};

thread_local! {
    /// The branch threads fan-outs started from this thread may use, or `None` for a thread
    /// that has not been given a budget (a script thread: it holds the run's whole budget).
    static BUDGET: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The threads one fan-out runs on, and the budget each of them holds for nested fan-outs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) workers: usize,
    pub(crate) nested_budget: usize,
}

/// The grant of a fan-out started on this thread that wants `wanted` workers (at least one),
/// in a run capped at `run_cap` threads.
pub(crate) fn grant(wanted: usize, run_cap: usize) -> Result<Grant, Error> {
    let budget = BUDGET.with(Cell::get).unwrap_or(run_cap);
    if budget == 0 {
        return Err(Error::new(
            ErrorCode::SandboxLimit,
            format!(
                "fan-outs nest too deep for the run's {run_cap} branch threads: this branch's share is used \
                 up by the fan-outs around it; nest fewer parallel/pipeline calls, or give the outer ones a \
                 smaller concurrency"
            ),
        ));
    }
    let workers = wanted.max(1).min(budget);
    Ok(Grant { workers, nested_budget: (budget - workers) / workers })
}

/// The budget the current thread holds (`run_cap` on a thread given none).
pub(crate) fn held(run_cap: usize) -> usize {
    BUDGET.with(Cell::get).unwrap_or(run_cap)
}

/// Gives the current (branch) thread its budget for nested fan-outs.
pub(crate) fn hold(budget: usize) {
    BUDGET.with(|slot| slot.set(Some(budget)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subtree_never_uses_more_than_its_budget() {
        let cap = 1024;
        // Worst case: every thread of every level fans out as wide as it may.
        fn used(budget: usize, wanted: usize, depth: u32) -> usize {
            if budget == 0 || depth == 0 {
                return 0;
            }
            let workers = wanted.min(budget);
            let nested = (budget - workers) / workers;
            workers + workers * used(nested, wanted, depth - 1)
        }
        for wanted in [1, 2, 3, 7, 100, 256] {
            assert!(used(cap, wanted, 12) <= cap, "{wanted}");
        }
        std::thread::spawn(move || {
            assert_eq!(grant(256, cap).unwrap(), Grant { workers: 256, nested_budget: 3 });
            hold(3);
            assert_eq!(grant(256, cap).unwrap(), Grant { workers: 3, nested_budget: 0 });
            hold(0);
            assert_eq!(grant(1, cap).unwrap_err().code, ErrorCode::SandboxLimit);
        })
        .join()
        .unwrap();
    }
}

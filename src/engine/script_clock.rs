//! The script-time limit's view of the run it bounds. The limit is the one bound of a script
//! that timing decides (how fast the machine ran it), so it follows the rule every timing
//! decision follows: the run journals that the limit stopped it (its settlement's
//! `stopped_by`), and a reproduction (`cairn replay`) does not decide it again:
//! - of a run the limit stopped, the reproduction is stopped by it only once it has served
//!   every journaled call (a slower machine would otherwise stop it short of where the run
//!   went, and the calls it never reached would read as a divergence); the run stopped before
//!   its next call, so the reproduction stops at the latest there (`cli/runs.rs`);
//! - of any other run, which the limit did not stop, the reproduction gets ten times the
//!   limit: the same work, on a machine that may be slower.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::ctx::Ctx;
use super::run::RunState;

/// How many times its limit a reproduction of a run the limit did not stop may take.
pub(crate) const REPRODUCTION_MARGIN: u32 = 10;

/// A script's handle on its run for the script-time limit (see the module).
#[derive(Clone)]
pub(crate) struct ScriptClock {
    run: Arc<RunState>,
}

impl std::fmt::Debug for ScriptClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptClock").field("run_id", &self.run.run_id).finish()
    }
}

/// How a script past its limit is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PastLimit {
    /// Stop it (a live run; a reproduction of a run the limit stopped, with nothing ahead).
    Stop,
    /// Not yet: a reproduction of a run the limit stopped, with journaled calls ahead.
    Behind,
    /// Only past [`REPRODUCTION_MARGIN`] times the limit: a reproduction of a run the limit
    /// did not stop.
    Margin,
}

impl ScriptClock {
    /// The limit stopped the script: the settlement says so.
    pub(crate) fn tripped(&self) {
        self.run.script_time_tripped.store(true, Ordering::SeqCst);
    }

    /// How a script past its limit is judged now. For a reproduction of a run the limit
    /// stopped, walks the loaded journal's records: the guards ask only once the limit has
    /// passed, and then seldom.
    pub(crate) fn past_limit(&self) -> PastLimit {
        if !self.run.reproduce {
            return PastLimit::Stop;
        }
        let replay = self.run.lock_replay();
        if !replay.stopped_by_script_time() {
            PastLimit::Margin
        } else if replay.preview().orphaned > 0 {
            PastLimit::Behind
        } else {
            PastLimit::Stop
        }
    }
}

impl Ctx {
    /// The script-time limit's handle on this context's run.
    pub(crate) fn script_clock(&self) -> ScriptClock {
        ScriptClock { run: self.run.clone() }
    }

    /// The share of the run's script threads a script starting in this context holds: the
    /// run's own script holds its context's (the whole budget); a child workflow's script
    /// thread is one more of the run's threads, so it takes one from the share its caller
    /// held and holds the rest (a workflow written in Rust starts no thread and takes none).
    ///
    /// # Errors
    /// `sandbox_limit` when the caller's share is used up.
    pub(crate) fn script_threads(&self) -> Result<usize, crate::error::Error> {
        let max = crate::script::run_sandbox::MAX_RUN_THREADS;
        let share = self.threads.unwrap_or(max);
        if self.depth == 0 {
            return Ok(share);
        }
        share.checked_sub(1).ok_or_else(|| {
            crate::error::Error::new(
                crate::error::ErrorCode::SandboxLimit,
                format!(
                    "no script thread left for this child workflow: the run's {max} threads are shared by \
                     its fan-outs and child workflows, and the share of the branch that called it is used \
                     up; give the fan-outs around the call a smaller concurrency"
                ),
            )
        })
    }

    /// The bounds every script of this context's run shares (a child workflow's script runs
    /// within its caller's).
    pub(crate) fn run_sandbox(&self) -> Arc<crate::script::run_sandbox::RunSandbox> {
        self.run.sandbox.clone()
    }
}

//! The replay disposition: the one pure function that decides what a matched journal entry
//! means for a live call (replay it, rerun it, skip it, or keep waiting).

use crate::error::ErrorClass;

/// What the engine does with a call that matched a journaled entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Disposition {
    /// Serve the journaled result; zero live calls.
    Replay,
    /// Execute live again and journal the new attempt.
    Rerun,
    /// The call lies in an abandoned subtree: status `skipped`, zero spend.
    Skip,
    /// A suspension with no closing resolution yet: keep waiting, write nothing.
    Wait,
}

/// The effective status of a matched call: its latest attempt's terminal status, `Running`
/// when that attempt has no terminal entry, or the suspension state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Effective {
    /// Completed with a value.
    Ok,
    /// Completed with an error of this class.
    Error(ErrorClass),
    /// Stopped by a limit; the class of the limit's error (a budget cut is transport-class).
    Limit(ErrorClass),
    /// Cancelled.
    Cancelled,
    /// Dispatched, never completed (the process died or lost its lease).
    Running,
    /// Suspended; `resolved` when a resolution closed it.
    Suspended {
        /// Whether a valid resolution closed the suspension.
        resolved: bool,
    },
}

/// Everything the disposition depends on. All of it is read from the journal (and the
/// resume options), never from the current code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DispositionInput {
    /// The call's effective status.
    pub effective: Effective,
    /// `memoize_outcome` as journaled at dispatch.
    pub memoize_outcome: bool,
    /// Whether the loaded journal records the run as having settled `ok`.
    pub run_settled_ok: bool,
    /// Whether an abandon covers the call.
    pub abandoned: bool,
    /// Whether the resume explicitly invalidated the entry.
    pub invalidated: bool,
}

/// Decides what happens to a matched call.
///
/// | effective status | disposition |
/// |---|---|
/// | covered by an abandon | skip |
/// | invalidated at resume | rerun |
/// | `ok` | replay |
/// | `error` | rerun; replay if memoized and task-class |
/// | `limit` | rerun; replay if memoized and task-class, or if the run settled ok |
/// | `cancelled` | rerun (memoization does not apply) |
/// | hanging `running` | rerun |
/// | `suspended`, resolved | replay (the resolution's value) |
/// | `suspended`, open | wait |
pub(super) fn disposition(input: DispositionInput) -> Disposition {
    if input.abandoned {
        return Disposition::Skip;
    }
    if input.invalidated {
        return Disposition::Rerun;
    }
    match input.effective {
        Effective::Ok => Disposition::Replay,
        Effective::Error(class) => {
            if input.memoize_outcome && class == ErrorClass::Task {
                Disposition::Replay
            } else {
                Disposition::Rerun
            }
        }
        Effective::Limit(class) => {
            if input.run_settled_ok || (input.memoize_outcome && class == ErrorClass::Task) {
                Disposition::Replay
            } else {
                Disposition::Rerun
            }
        }
        Effective::Cancelled | Effective::Running => Disposition::Rerun,
        Effective::Suspended { resolved: true } => Disposition::Replay,
        Effective::Suspended { resolved: false } => Disposition::Wait,
    }
}

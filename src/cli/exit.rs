//! The exit codes of the `cairn` binary, and the one-line failure that goes with one.

use std::process::ExitCode;

use crate::store::RunStatus;

/// Exit codes, as DESIGN.md fixes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Exit {
    /// The command succeeded (a run settled `ok`).
    Ok = 0,
    /// The run or command failed.
    Error = 1,
    /// Bad usage, flags, input or configuration.
    Usage = 2,
    /// The run settled `exhausted`.
    Exhausted = 3,
    /// The run settled `suspended`.
    Suspended = 4,
    /// The run was cancelled.
    Cancelled = 5,
    /// The script was rejected by lint or compile.
    Rejected = 6,
    /// A replay-strict check found a live call.
    ReplayMiss = 7,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit as u8)
    }
}

impl Exit {
    /// The exit code of a settled run.
    pub(crate) fn of_status(status: RunStatus) -> Exit {
        match status {
            RunStatus::Ok => Exit::Ok,
            RunStatus::Error | RunStatus::Running | RunStatus::Queued => Exit::Error,
            RunStatus::Exhausted => Exit::Exhausted,
            RunStatus::Suspended => Exit::Suspended,
            RunStatus::Cancelled => Exit::Cancelled,
        }
    }
}

/// Prints a one-line error on stderr and returns `exit`.
pub(super) fn fail(exit: Exit, message: impl std::fmt::Display) -> Exit {
    let text = message.to_string();
    errln!("cairn: {}", crate::text::for_terminal(text.lines().next().unwrap_or_default()));
    exit
}

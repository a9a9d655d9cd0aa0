//! A resume's re-key policy and what it found: whether calls whose identity changed since
//! they were paid may run again, which journaled calls live calls were paired with, and the
//! refusals to report when the run settles. `explain.rs` decides and words each refusal.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::error::{Error, ErrorCode};
use crate::journal::Seq;

/// A resume's re-key policy and what it found.
#[derive(Debug, Default)]
pub(crate) struct Rekeys {
    /// Re-keyed calls run live without asking.
    pub(super) accept: bool,
    /// Journaled calls already paired with a re-keyed live call.
    pub(super) claimed: Mutex<HashSet<Seq>>,
    /// One line per refused call.
    pub(super) refused: Mutex<Vec<String>>,
}

impl Rekeys {
    /// The policy of a run: `accept` lets re-keyed calls run live.
    pub(crate) fn new(accept: bool) -> Rekeys {
        Rekeys { accept, ..Rekeys::default() }
    }

    /// The refusal to report when the run ends, if any call was refused.
    pub(crate) fn refusal(&self) -> Option<Error> {
        let refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if refused.is_empty() {
            return None;
        }
        let n = refused.len();
        let mut message = format!(
            "resuming would run again {n} completed, paid call{} whose identity changed:",
            if n == 1 { "" } else { "s" }
        );
        for line in refused.iter() {
            message.push_str("\n  ");
            message.push_str(line);
        }
        message.push_str(
            "\nnothing was dispatched; resume with --accept-rekey to run them again (each is paid anew), \
             or with the settings the run started with",
        );
        Some(Error::new(ErrorCode::RekeyRefused, message))
    }
}

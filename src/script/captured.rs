//! The error both dialects raise when a `step` body writes what it captured from outside.
//!
//! A replay serves a step's journaled value without running its body, so a write the body
//! made to an enclosing variable or table would happen on the first run and not on the
//! replay: what follows the step would see different values (a prompt re-keys, a live call
//! on replay). So a step body, like a fan-out branch, sees what it captured read-only.

use crate::error::{Error, ErrorCode};

/// The violation for `what` (e.g. "assignment to 'acc'") inside a step body.
pub(crate) fn step_violation(what: &str) -> Error {
    Error::new(
        ErrorCode::SandboxViolation,
        format!(
            "sandbox violation: {what} inside a step body; values captured from outside a step are read-only \
             there, since a replay serves the step's journaled value without running its body: return values \
             from the step instead and change them after it returns"
        ),
    )
}

/// The message of lint's `step-capture-assign`, the same in both dialects.
pub(crate) fn step_write_message(what: &str, name: &str) -> String {
    format!(
        "{what} captured variable '{name}' inside a step body is lost on replay, which serves the step's value \
         without running it; return the value from the step and change '{name}' after it returns"
    )
}

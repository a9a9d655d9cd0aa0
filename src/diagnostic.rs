//! `Diagnostic`: one finding of lint or compile, in the wire shape every dialect reports, the
//! planner's repair prompt carries and a rejected script's [`crate::Error`] holds.

use serde::{Deserialize, Serialize};

/// One finding of lint or compile, in the wire shape the planner's repair prompt and
/// `cairn lint --json` carry.
///
/// Lines and columns are 1-based and count characters; the end, when known, is exclusive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// The rule that fired; each rule has a folder of examples under `lint/`.
    pub rule_id: String,
    /// What is wrong and what to write instead, lowercase, no final period.
    pub message: String,
    /// Line of the start.
    pub line: u32,
    /// Column of the start.
    pub column: u32,
    /// Line of the end, when the finding covers a known span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_line: Option<u32>,
    /// Column just past the end, when the finding covers a known span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_column: Option<u32>,
    /// Whether the finding rejects the script.
    pub severity: Severity,
}

impl Diagnostic {
    /// Whether this finding rejects the script.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// How much a [`Diagnostic`] matters: a script with any error is rejected; warnings are reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The script is rejected.
    Error,
    /// The script runs; the finding is reported beside it.
    Warning,
}

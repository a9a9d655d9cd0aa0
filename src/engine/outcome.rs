//! How a run ended, as its caller sees it: `RunOutcome` with the work it dropped and the
//! waits it left pending. Every status carries both, its usage and its cost report.

use serde::Serialize;
use serde_json::Value;

use super::cost::CostReport;
use crate::error::Error;
use crate::journal::Preview;
use crate::store::{RunId, RunStatus};
use crate::usage::Usage;

/// Work a run did not complete, itemized.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dropped {
    /// Where (scope path).
    pub scope: String,
    /// What (`agent`, `step`, `call`, `child`, `item`).
    pub kind: String,
    /// Its label or name, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Why.
    pub error: Error,
}

/// An unresolved wait of a suspended run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pending {
    /// The key to resolve it with.
    pub key: String,
    /// Its prompt, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The suspended entry's seq.
    pub seq: u64,
    /// When its timeout resolves it (ms since the epoch): a worker claims the run again then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<i64>,
}

/// How a run settled. Every status carries dropped work, pending waits, usage and cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunOutcome {
    /// The run.
    pub run_id: RunId,
    /// `ok`, `error`, `cancelled`, `exhausted` or `suspended`.
    pub status: RunStatus,
    /// The workflow's value (partial for `exhausted`).
    pub value: Option<Value>,
    /// The failure, for `error` (and the cause, for `exhausted` and `cancelled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Error>,
    /// Work that did not complete.
    pub dropped: Vec<Dropped>,
    /// Waits that keep the run suspended.
    pub pending: Vec<Pending>,
    /// Token usage of the whole run (all segments).
    pub usage: Usage,
    /// The cost report of the whole run (all segments).
    pub cost: CostReport,
    /// How this segment's calls were served.
    pub preview: Preview,
    /// The first journaled calls (at most 20) this segment left unconsumed, in journal order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub orphans: Vec<crate::journal::Orphan>,
}

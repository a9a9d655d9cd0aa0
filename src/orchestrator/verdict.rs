//! What the orchestrator journals: each verdict of a decision entry, and the data a verdict
//! carries (a completion, claim findings). Plain data: it names nothing else of the
//! orchestrator, so every part of it can name these.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The `type` of an orchestrator decision entry.
pub(crate) const DECISION_TYPE: &str = "orchestrate";

/// Why an admission was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Refusal {
    /// The profile is not in the allowlist (or not registered).
    UnknownProfile,
    /// `max_spawns` children are already admitted.
    SpawnCap,
    /// The budget left does not cover the child's estimate.
    Budget,
    /// The budget left cannot seat the declared `min_spawned_children`.
    RosterFloor,
}

impl Refusal {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Refusal::UnknownProfile => "unknown_profile",
            Refusal::SpawnCap => "spawn_cap",
            Refusal::Budget => "budget",
            Refusal::RosterFloor => "roster_floor",
        }
    }
}

/// One verdict, as journaled (the entry's value is this plus `type`, `n`, `call`, `item`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub(crate) enum Verdict {
    /// A child admitted as `c{child}`.
    Admit {
        child: u32,
        profile: String,
        prompt: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schema: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        est_cost_nano_usd: Option<i64>,
        /// What the ceiling left free when it was admitted (`None`: unbounded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        available_nano_usd: Option<i64>,
    },
    /// A spawn refused, with its arithmetic; it spends nothing and takes no slot.
    Refuse {
        reason: Refusal,
        message: String,
        profile: String,
        admitted: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requested_nano_usd: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        available_nano_usd: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        floor: Option<u32>,
    },
    /// A child cancelled (by `cancel_agent`, the termination account or the exit barrier).
    Cancel { child: u32 },
    /// A finish validated: `accepted`, `rejected` (a repair is asked for) or `failed`
    /// (repairs spent).
    Finish {
        verdict: String,
        #[serde(default)]
        problems: Vec<String>,
        /// Rejections before this one.
        repair: u32,
        result: Value,
        /// Whether the termination account's finalization turn made it.
        #[serde(default)]
        at_cap: bool,
    },
    /// The acceptance policy's verdict on an accepted finish.
    Acceptance {
        accepted: bool,
        completion: Completion,
        policy: String,
        spawned: u32,
        counts: BTreeMap<String, u32>,
        degraded: Vec<String>,
        message: String,
    },
    /// The orchestrator stopped at the cap: the termination account's turn follows.
    Finalize,
    /// The claim-consistency findings.
    Claims { findings: Vec<ClaimFinding> },
}

/// A verdict with its place.
#[derive(Debug, Clone)]
pub(crate) struct Decision {
    pub(crate) call: String,
    pub(crate) item: u32,
    pub(crate) verdict: Verdict,
}

/// Whether an accepted result is whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Completion {
    /// Every child the policy judged settled `ok`, and no cap was hit.
    Complete,
    /// Accepted with degraded children, or finished by the termination account.
    Partial,
}

impl Completion {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Completion::Complete => "complete",
            Completion::Partial => "partial",
        }
    }
}

/// The judge's ruling on one pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimVerdict {
    /// The excerpt supports the claim.
    Supported,
    /// The excerpt contradicts it.
    Contradicted,
    /// The excerpt says nothing either way.
    Unsupported,
}

/// One judged pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimFinding {
    /// The cited child.
    pub handle: String,
    /// The claim, as written in the result (at most 400 characters).
    pub claim: String,
    /// The child's excerpt it was held against (at most 400 characters).
    pub excerpt: String,
    /// The ruling.
    pub verdict: ClaimVerdict,
}

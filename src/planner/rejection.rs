//! How planning fails: a rejected plan (`script_rejected`) with why and every draft, and
//! [`PlanError`], every way [`super::plan`] and [`super::run_planned`] end without a script or
//! a run.

use serde::Serialize;

use crate::error::{Error, ErrorCode};
use crate::money::Money;
use crate::script::Diagnostic;
use crate::script::bound::CostBound;
use crate::store::{RunId, RunStatus};

/// One rejected draft: its script and the diagnostics `check` gave it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DraftReport {
    /// The extracted script (maybe empty).
    pub source: String,
    /// Every diagnostic of the draft, errors and warnings, in `cairn lint --json`'s shape.
    pub diagnostics: Vec<Diagnostic>,
}

/// Why a plan was rejected.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RejectCause {
    /// Every draft had errors, through the last repair round.
    Diagnostics {
        /// The repair rounds allowed.
        repair_rounds: u32,
    },
    /// A draft was cut off by the output limit (its reply reached the cap), so repairing it
    /// would only be cut off again.
    Truncated {
        /// The draft's output tokens.
        output_tokens: u64,
        /// The cap it reached.
        max_output_tokens: u32,
    },
    /// A draft's request did not fit the planner model's context window (the provider refused
    /// it for its context length, or its estimate left no room for the draft), with the
    /// compact card already: repairing cannot shrink it.
    ContextOverflow {
        /// The draft that did not fit (1-based).
        draft: u32,
        /// The model's context window, when known.
        context_window: Option<u64>,
        /// Why, as the provider or the estimate said.
        message: String,
    },
}

/// A rejected plan: the cause and every draft with its diagnostics.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rejection {
    /// The planning run's id.
    pub planning_run_id: RunId,
    /// The dialect the drafts were written in.
    pub dialect: String,
    /// Why planning gave up.
    pub cause: RejectCause,
    /// Every draft, in order.
    pub drafts: Vec<DraftReport>,
}

impl Rejection {
    /// The last draft's diagnostics.
    pub fn last_diagnostics(&self) -> &[Diagnostic] {
        self.drafts.last().map_or(&[], |d| d.diagnostics.as_slice())
    }

    fn summary(&self) -> String {
        match &self.cause {
            RejectCause::Diagnostics { .. } => {
                let errors = self.last_diagnostics().iter().filter(|d| d.is_error()).count();
                format!(
                    "no draft passed lint and compile in {} draft{}; the last has {errors} error{}",
                    self.drafts.len(),
                    if self.drafts.len() == 1 { "" } else { "s" },
                    if errors == 1 { "" } else { "s" }
                )
            }
            RejectCause::Truncated { output_tokens, max_output_tokens } => format!(
                "draft {} was cut off by the output limit ({output_tokens} of {max_output_tokens} tokens); raise the planner's output cap",
                self.drafts.len()
            ),
            RejectCause::ContextOverflow { draft, context_window, message } => {
                let window = context_window.map(|w| format!(" of {w} tokens")).unwrap_or_default();
                format!(
                    "draft {draft} does not fit the planner model's context window{window} even with the compact card ({}); use a model with a larger context or a shorter goal",
                    crate::text::for_terminal(message)
                )
            }
        }
    }
}

/// Why [`plan`](crate::plan) or [`run_planned`](crate::run_planned) produced no accepted script or no run.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PlanError {
    /// Bad options (an unknown dialect or model, too many repair rounds, a bad ceiling):
    /// refused before any run is written or any provider called.
    #[error("{0}")]
    Invalid(Error),
    /// No draft was accepted (`script_rejected`).
    #[error("script_rejected: {}", .0.summary())]
    Rejected(Box<Rejection>),
    /// The planning run ended another way: its ceiling refused a draft (`exhausted`), it was
    /// cancelled, the provider failed, or another process drives it.
    #[error("planning run {planning_run_id} ended {status}: {error}")]
    Planning {
        /// The planning run.
        planning_run_id: RunId,
        /// How it settled.
        status: RunStatus,
        /// Its failure.
        error: Error,
    },
    /// The accepted script could not be started (`run_planned`).
    #[error("the planned script could not start: {0}")]
    Run(Error),
    /// The accepted script's cost bound exceeds the run's ceiling, and the run was not forced
    /// (`config`: pass `force`; the ceiling still holds when forced).
    #[error(
        "the planned script's cost bound ({bound}) exceeds the run's ceiling {ceiling}; force the run to start it anyway (the ceiling still holds)"
    )]
    OverCeiling {
        /// The script's bound.
        bound: CostBound,
        /// The run's ceiling.
        ceiling: Money,
    },
}

impl PlanError {
    /// The error's code: `script_rejected` for a rejection, else the underlying failure's.
    pub fn code(&self) -> ErrorCode {
        match self {
            PlanError::Invalid(e) | PlanError::Run(e) | PlanError::Planning { error: e, .. } => e.code,
            PlanError::Rejected(_) => ErrorCode::ScriptRejected,
            PlanError::OverCeiling { .. } => ErrorCode::Config,
        }
    }

    /// Whether replaying a settled planning conversation missed: its drafts no longer replay as
    /// they were journaled (the dialect's diagnostics changed a repair prompt). Planning again
    /// with [`Planning::start_live`](crate::Planning::start_live) pays for the changed drafts only.
    pub fn is_replay_miss(&self) -> bool {
        matches!(
            self,
            PlanError::Planning { error, .. }
                if matches!(error.code, ErrorCode::JournalMiss | ErrorCode::RekeyRefused)
        )
    }

    /// The error as a cairn [`Error`] (its wire form).
    pub fn to_error(&self) -> Error {
        match self {
            PlanError::Invalid(e) | PlanError::Run(e) | PlanError::Planning { error: e, .. } => e.clone(),
            PlanError::Rejected(r) => Error::new(ErrorCode::ScriptRejected, r.summary()),
            PlanError::OverCeiling { .. } => Error::config(self.to_string()),
        }
    }
}

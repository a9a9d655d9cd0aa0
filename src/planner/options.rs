//! The options of a plan ([`PlanOptions`]) and which API card the planner model is shown
//! ([`CardChoice`]).

use serde::Serialize;
use serde_json::Value;

use crate::error::Error;

/// The output cap of a draft when the options name none.
pub(crate) const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 8192;

/// The dialect a plan is written in when the options name none.
pub(crate) const DEFAULT_DIALECT: &str = "rhai";

/// Options of [`plan`](super::plan). Every field but `budget_usd`'s effect on admission enters the
/// planning run's id, so changing any of them starts a new planning conversation.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// The dialect to write (a registered one; default `rhai`).
    pub dialect: String,
    /// Repair rounds after the first draft (0 to 10, default 3): at most `1 + repair_rounds`
    /// drafts are paid for.
    pub repair_rounds: u32,
    /// The planning conversation's own ceiling in USD (finite, ≥ 0); the engine's default
    /// ceiling when `None`. Recorded with the planning run at its start.
    pub budget_usd: Option<f64>,
    /// The planner's model (`provider:model`); by default the engine's `plan` role model,
    /// else its default model.
    pub model: Option<String>,
    /// The output cap of each draft (default 8192 tokens). A draft whose output reaches it was
    /// cut off, and planning stops with that cause.
    pub max_output_tokens: u32,
    /// The authored part of the system prompt; cairn's own rules when `None`.
    pub rules: Option<String>,
    /// The arguments the script will run with, for the cost bound (an `args`-sized fan-out is
    /// bounded by them); null when `None`. Not a planning input: drafts never see them.
    pub args: Option<Value>,
    /// Which API card the system prompt carries (default [`CardChoice::Auto`]).
    pub card: CardChoice,
}

/// Which form of the dialect's API card a planner is shown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CardChoice {
    /// The full card, unless the planner model's context window is known to be small (the
    /// full system prompt would take more than half of it): then the compact card. A draft
    /// the provider refuses for its context length (`context_overflow`), or whose stream keeps
    /// breaking off (`transport` once retries are spent: llama.cpp ends an over-long streamed
    /// request with an empty stream), is drafted again once with the compact card.
    #[default]
    Auto,
    /// Always the full card (no fallback).
    Full,
    /// Always the [`compact_card`](super::compact_card).
    Compact,
}

impl std::str::FromStr for CardChoice {
    type Err = Error;

    fn from_str(text: &str) -> Result<CardChoice, Error> {
        match text {
            "auto" => Ok(CardChoice::Auto),
            "full" => Ok(CardChoice::Full),
            "compact" => Ok(CardChoice::Compact),
            other => Err(Error::config(format!("unknown card {other:?}: use auto, full or compact"))),
        }
    }
}

impl Default for PlanOptions {
    fn default() -> PlanOptions {
        PlanOptions {
            dialect: DEFAULT_DIALECT.to_owned(),
            repair_rounds: 3,
            budget_usd: None,
            model: None,
            max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
            rules: None,
            args: None,
            card: CardChoice::Auto,
        }
    }
}

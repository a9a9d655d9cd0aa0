//! `Usage`: token counts of one model call, as every layer (provider, journal, cost report)
//! sees them.

use std::ops::AddAssign;

use serde::{Deserialize, Serialize};

use crate::money::Money;

/// Token usage of one or more model turns.
///
/// `input_tokens` includes cache reads and writes (they are also broken out), and
/// `output_tokens` includes reasoning tokens (also broken out), so pricing never has to know
/// a provider's own accounting convention. `approximate` is set when any part was estimated
/// (an endpoint that reports no usage, a stream cut by the budget): a report shows it, it is
/// never silently treated as exact.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, cache reads and writes included.
    #[serde(default)]
    pub input_tokens: u64,
    /// Completion tokens, reasoning included.
    #[serde(default)]
    pub output_tokens: u64,
    /// Of `input_tokens`, those read from a prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Of `input_tokens`, those written to a prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// Of `output_tokens`, those spent on reasoning.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
    /// Whether any count was estimated rather than reported by the provider.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approximate: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Total tokens, input plus output.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// `self − other`, field by field, never below zero.
    pub(crate) fn minus(&self, other: &Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_sub(other.input_tokens),
            output_tokens: self.output_tokens.saturating_sub(other.output_tokens),
            cache_read_tokens: self.cache_read_tokens.saturating_sub(other.cache_read_tokens),
            cache_write_tokens: self.cache_write_tokens.saturating_sub(other.cache_write_tokens),
            reasoning_tokens: self.reasoning_tokens.saturating_sub(other.reasoning_tokens),
            approximate: self.approximate,
        }
    }
}

impl AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self.cache_read_tokens.saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self.cache_write_tokens.saturating_add(other.cache_write_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
        self.approximate = self.approximate || other.approximate;
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptEnd {
    /// The turn finished; charged the provider's billed usage.
    Settled,
    /// The stream failed, was cut or cancelled after it began; charged its observed usage.
    Abandoned,
    /// The provider refused the request before any stream byte; charged nothing.
    Refused,
    /// The request was sent (or may have been) and no response status came back (a stall
    /// waiting for the headers, a transport error after connecting): the provider may have run
    /// it whole, so it is charged its grant (the input estimate plus the output cap it was
    /// sent with), marked approximate.
    Unanswered,
}

/// One wire attempt as the journal keeps it (on an agent call's terminal entry, when its
/// attempts were served by more than one model): who served it, what it used and cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// The `provider:model` that served the attempt.
    pub model: String,
    /// How it ended.
    pub end: AttemptEnd,
    /// What it used (observed for an abandoned attempt, marked approximate).
    pub usage: Usage,
    /// What it cost at its model's price; `None` for an unpriced model.
    #[serde(default, rename = "cost_nano_usd", skip_serializing_if = "Option::is_none")]
    pub cost: Option<Money>,
}

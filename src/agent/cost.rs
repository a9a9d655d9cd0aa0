//! The money side of one agent turn: what a turn may cost at worst, the guard that grants it
//! before dispatch (clamping the turn's output cap to what the ceiling still buys), and the
//! running estimate of a turn that streams.
//!
//! A priced turn's worst case is its request's input tokens (one estimator for everything,
//! [`crate::provider::estimate_request_tokens`]: system, messages, tool definitions and the
//! response schema) plus its output cap at the output price. The cap is the call's
//! `max_output_tokens`, else the model's table entry, else [`DEFAULT_MAX_OUTPUT_TOKENS`].

use crate::error::{Error, ErrorCode};
use crate::model::Price;
use crate::money::Money;
use crate::provider::{ChatRequest, ToolSpec};
use crate::usage::Usage;

use super::{AgentSpec, BudgetHooks, Tool};

/// The output cap a priced turn is reserved (and sent) with when neither the call nor the
/// model's price-table entry names one.
pub(crate) const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 8192;

/// The fewest output tokens a turn is dispatched with: below this the turn guard refuses
/// the turn instead of clamping it (some providers reject smaller caps).
pub(crate) const MIN_OUTPUT_TOKENS: u32 = 16;

/// The worst case of one turn of `request` at `price`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WorstCase {
    /// Estimated input tokens of the request.
    pub(crate) input_tokens: u64,
    /// The output cap the turn runs with.
    pub(crate) output_tokens: u32,
    /// The input at the input price.
    pub(crate) input_cost: Money,
    /// Everything: input plus the whole output cap at the output price.
    pub(crate) cost: Money,
}

impl WorstCase {
    /// The worst case of `request` (whose `tools` may still be empty: `tools` are counted
    /// as the loop will send them).
    pub(crate) fn of(request: &ChatRequest, tools: &[std::sync::Arc<dyn Tool>], price: &Price) -> WorstCase {
        let input_tokens = if request.tools.is_empty() && !tools.is_empty() {
            let mut with_tools = request.clone();
            with_tools.tools = tool_specs(tools);
            crate::provider::estimate_request_tokens(&with_tools)
        } else {
            crate::provider::estimate_request_tokens(request)
        };
        let output_tokens = output_cap(request, price);
        let input_cost = price.cost(&Usage { input_tokens, ..Usage::default() });
        let output_cost = price.cost(&Usage { output_tokens: u64::from(output_tokens), ..Usage::default() });
        WorstCase { input_tokens, output_tokens, input_cost, cost: input_cost + output_cost }
    }

    /// "N input tokens + M output tokens = $X", for messages.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} input tokens + {} output tokens at most = {}",
            self.input_tokens, self.output_tokens, self.cost
        )
    }
}

/// The output cap a turn of `request` runs with.
pub(crate) fn output_cap(request: &ChatRequest, price: &Price) -> u32 {
    request.max_output_tokens.or(price.max_output_tokens).unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS)
}

/// The tool definitions the loop sends for `tools`.
pub(crate) fn tool_specs(tools: &[std::sync::Arc<dyn Tool>]) -> Vec<ToolSpec> {
    tools
        .iter()
        .map(|t| ToolSpec {
            name: t.name().to_owned(),
            description: t.description().to_owned(),
            parameters: t.parameters().clone(),
        })
        .collect()
}

/// The turn guard of a priced call: grants the next turn its worst case (or what the
/// ceiling still leaves, clamping the turn's output cap to it) and returns the request to
/// send, against `used`, what the call's ledger has spent so far. Every attempt passes it,
/// retries and failovers included. Unpriced calls and
/// unbounded budgets send the request unchanged.
///
/// # Errors
/// `budget_exhausted`, with the arithmetic, when the ceiling leaves less than the input plus
/// [`MIN_OUTPUT_TOKENS`] of output.
pub(crate) fn turn_request(
    spec: &AgentSpec,
    used: Money,
    hooks: &dyn BudgetHooks,
) -> Result<ChatRequest, Error> {
    let mut request = spec.request.clone();
    let Some(price) = spec.price else { return Ok(request) };
    let worst = WorstCase::of(&request, &[], &price);
    let per_token = price.output_per_mtok.nano_usd();
    let floor = worst.input_cost
        + price.cost(&Usage { output_tokens: u64::from(MIN_OUTPUT_TOKENS), ..Usage::default() });
    match hooks.grant_turn(used, worst.cost, floor) {
        Ok(None) => Ok(request),
        Ok(Some(granted)) => {
            let mut cap = worst.output_tokens;
            if granted < worst.cost && per_token > 0 {
                // What the grant buys after the input, rounded down to whole tokens.
                let spare = i128::from(granted.sub_or_zero(worst.input_cost).nano_usd());
                let tokens = spare * 1_000_000 / i128::from(per_token);
                cap = cap.min(tokens.clamp(0, i128::from(u32::MAX)) as u32).max(MIN_OUTPUT_TOKENS);
            }
            request.max_output_tokens = Some(cap);
            Ok(request)
        }
        Err(available) => Err(Error::new(
            ErrorCode::BudgetExhausted,
            format!(
                "the turn guard refused the next turn: its worst case is {} ({} input tokens + {} output tokens), at least {} is needed for {} output tokens, and the ceiling leaves {}",
                worst.cost, worst.input_tokens, worst.output_tokens, floor, MIN_OUTPUT_TOKENS, available
            ),
        )),
    }
}

/// Usage of an unfinished turn (cut, cancelled or dropped), marked approximate: the
/// provider's running figures where it sent them, and at least what was streamed (text,
/// reasoning and tool-call arguments, about four characters a token) as output and the
/// request's estimate as input. Cache counts stay as the provider reported them, since
/// `input_tokens` still includes them: zeroing them priced 400k cache reads at the full
/// input rate.
pub(crate) fn partial_usage(request: &ChatRequest, streamed_chars: usize, live: Usage) -> Usage {
    let streamed = crate::provider::estimate_tokens_for_chars(streamed_chars);
    let input_tokens = if live.input_tokens > 0 {
        live.input_tokens
    } else {
        crate::provider::estimate_request_tokens(request)
    };
    Usage {
        input_tokens: input_tokens.max(live.cache_read_tokens.saturating_add(live.cache_write_tokens)),
        output_tokens: live.output_tokens.max(streamed),
        approximate: true,
        ..live
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Message;

    fn price() -> Price {
        Price::flat(Money::from_usd(1.0).unwrap(), Money::from_usd(10.0).unwrap())
    }

    #[test]
    fn the_worst_case_is_input_plus_the_output_cap_at_the_output_price() {
        let mut request = ChatRequest::new("m", vec![Message::user("x".repeat(4000))]);
        let worst = WorstCase::of(&request, &[], &price());
        assert_eq!(worst.input_tokens, 1000);
        assert_eq!(worst.output_tokens, DEFAULT_MAX_OUTPUT_TOKENS);
        // 1000 × $1/M + 8192 × $10/M
        assert_eq!(worst.cost, Money::from_nano_usd(1_000_000 + 81_920_000));
        request.max_output_tokens = Some(100);
        assert_eq!(WorstCase::of(&request, &[], &price()).cost, Money::from_nano_usd(2_000_000));
        let mut capped = price();
        capped.max_output_tokens = Some(1000);
        request.max_output_tokens = None;
        assert_eq!(WorstCase::of(&request, &[], &capped).output_tokens, 1000);
    }

    #[test]
    fn one_estimator_counts_tool_definitions_and_the_response_schema() {
        let mut request = ChatRequest::new("m", vec![Message::user("hi")]);
        let bare = WorstCase::of(&request, &[], &price()).input_tokens;
        assert_eq!(bare, 1);
        let dir = tempfile::tempdir().unwrap();
        let toolset = crate::agent::fs_read_toolset(dir.path()).unwrap();
        let with_tools = WorstCase::of(&request, toolset.tools(), &price()).input_tokens;
        let specs = serde_json::to_string(&tool_specs(toolset.tools())).unwrap();
        assert!(with_tools * 4 >= specs.len() as u64 / 2, "{with_tools} tokens for {} chars", specs.len());
        request.response_schema = Some(serde_json::json!({ "description": "d".repeat(4000) }));
        assert!(WorstCase::of(&request, &[], &price()).input_tokens >= 1000);
        // The partial estimate of a cut turn uses the same count.
        assert_eq!(
            partial_usage(&request, 0, Usage::default()).input_tokens,
            crate::provider::estimate_request_tokens(&request)
        );
    }

    #[test]
    fn a_partial_turn_keeps_cache_counts_and_counts_everything_streamed() {
        let request = ChatRequest::new("m", vec![Message::user("hi")]);
        let live =
            Usage { input_tokens: 400_100, cache_read_tokens: 400_000, output_tokens: 1, ..Usage::default() };
        let partial = partial_usage(&request, 2000, live);
        assert_eq!(partial.cache_read_tokens, 400_000);
        assert_eq!(partial.input_tokens, 400_100);
        assert_eq!(partial.output_tokens, 500);
        assert!(partial.approximate);
        // Nothing reported yet: the request's estimate and the streamed characters.
        let early = partial_usage(&request, 40, Usage::default());
        assert_eq!((early.input_tokens, early.output_tokens), (1, 10));
    }
}

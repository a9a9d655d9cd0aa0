//! Fitting a planning conversation into the planner model's context window: how many tokens
//! planner text is estimated to take, the output cap a draft can be given, and whether a draft
//! was cut off by that cap.

use serde_json::Value;

use crate::error::{Error, ErrorCode};

/// The diagnostics a repair round shows when the model's window is small but of unknown size.
pub(super) const UNSIZED_SHOWN: usize = 5;

/// The fewest output tokens a draft is sent with: less room than this in the context window
/// and the request counts as not fitting.
pub(super) const MIN_DRAFT_TOKENS: u64 = 256;

/// Estimated tokens of planner text: a third of its characters. Conservative on purpose (the
/// tokenizers of small models take about 3.5 characters a token for code and JSON, more than
/// the 4 the usage estimate assumes), since it decides whether a request fits at all.
pub(super) fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(3)
}

/// A draft's output cap: the options' cap, lowered to the room the context window leaves
/// after the prompt when the window is known. `Err` (`context_overflow`) when that room is
/// under [`MIN_DRAFT_TOKENS`]: the request would not fit, and is not sent.
pub(super) fn draft_cap(
    context_window: Option<u64>,
    max_output_tokens: u32,
    system: &str,
    prompt: &str,
) -> Result<u32, Error> {
    let Some(window) = context_window else { return Ok(max_output_tokens) };
    // The chat template's role markers and the like: a few tokens a message.
    let prompt_tokens = estimate_tokens(system) + estimate_tokens(prompt) + 32;
    let room = window.saturating_sub(prompt_tokens);
    if room < MIN_DRAFT_TOKENS.min(u64::from(max_output_tokens)) {
        return Err(Error::new(
            ErrorCode::ContextOverflow,
            format!(
                "the request takes about {prompt_tokens} tokens of the model's {window}-token context window, leaving no room for the draft"
            ),
        ));
    }
    Ok(u32::try_from(room).unwrap_or(u32::MAX).min(max_output_tokens))
}

/// Whether a draft was cut off by the output limit: the provider said so (`finish_reason`
/// `length`), or, for a draft journaled before finish reasons were, its output reached the cap.
pub(super) fn cut_off(reply: &Value, output_tokens: u64, max_output_tokens: u32) -> bool {
    match reply["finish_reason"].as_str() {
        Some(reason) => reason == "length",
        None => output_tokens >= u64::from(max_output_tokens),
    }
}

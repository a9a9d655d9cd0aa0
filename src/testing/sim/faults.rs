//! The fault schedule: for a seed, what each attempt of each turn of each call meets.
//!
//! The draw is a pure function of `(seed, tag, turn, attempt)`, so a seed reproduces the same
//! faults whatever order concurrent calls arrive in, and a resumed run meets the faults its
//! later attempts would have met.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use sha2::{Digest, Sha256};

use super::request::WireDialect;

/// How a `Retry-After` is sent with a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAfter {
    /// No header.
    None,
    /// `Retry-After: N` (delta-seconds).
    Seconds(u64),
    /// `retry-after-ms: N` (OpenAI and Anthropic send it).
    Millis(u64),
}

/// What one attempt meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A clean answer.
    None,
    /// An HTTP error status before any stream byte: 429, 500, 503 or (Anthropic) 529.
    Status {
        /// The status code.
        status: u16,
        /// The retry hint sent with it.
        retry_after: RetryAfter,
    },
    /// The stream breaks off after `after` output tokens: the body ends mid-message, with no
    /// terminal event.
    Drop {
        /// Output tokens streamed before the break.
        after: u32,
    },
    /// The stream goes silent after `after` output tokens, past the client's idle timeout.
    Stall {
        /// Output tokens streamed before the silence.
        after: u32,
    },
    /// A chunk that is not JSON after `after` output tokens; the body then ends.
    Malformed {
        /// Output tokens streamed before the broken chunk.
        after: u32,
    },
    /// An error event inside the stream after `after` output tokens (Anthropic `overloaded_error`,
    /// an OpenAI `server_error` chunk, a Responses `response.failed` that reports its usage).
    StreamError {
        /// Output tokens streamed before the error.
        after: u32,
    },
    /// The answer completes but the stream carries no usage (an OpenAI-compatible server that
    /// ignores `include_usage`; a Responses `response.completed` without `usage`). For
    /// Anthropic, whose streams always carry usage: `message_start` reports no input and the
    /// final `message_delta` reports all of it (the usage arrives only at the end).
    UsageMissing,
    /// The model refuses (Anthropic `stop_reason: refusal`, an OpenAI `refusal` delta).
    Refusal,
    /// The model runs to the request's `max_tokens` and is cut there.
    MaxTokens,
}

impl Fault {
    /// Whether the provider refused the request before any stream byte.
    pub fn is_refusal_before_stream(&self) -> bool {
        matches!(self, Fault::Status { .. })
    }
}

/// How often each fault is drawn (weights; zero disables one).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultMix {
    /// The chance that an attempt meets any fault at all (0.0 – 1.0).
    pub rate: f64,
    /// Attempts of one turn that may meet a fault; later attempts are clean, so retries end.
    pub max_faulty_attempts: u32,
    /// Weights of: status, drop, stall, malformed, stream error, usage missing, refusal, max tokens.
    pub weights: [u32; 8],
}

impl Default for FaultMix {
    fn default() -> FaultMix {
        FaultMix { rate: 0.3, max_faulty_attempts: 3, weights: [30, 20, 2, 8, 8, 12, 3, 5] }
    }
}

impl FaultMix {
    /// No faults: every attempt answers cleanly.
    pub fn none() -> FaultMix {
        FaultMix { rate: 0.0, ..FaultMix::default() }
    }

    /// Draws the fault attempt `attempt` (0-based) of turn `turn` of call `tag` meets under `seed`.
    pub fn draw(&self, seed: u64, tag: &str, turn: u32, attempt: u32, dialect: WireDialect) -> Fault {
        let mut rng = rng_for(seed, tag, turn, attempt);
        if attempt >= self.max_faulty_attempts || !chance(&mut rng, self.rate) {
            return Fault::None;
        }
        let total: u32 = self.weights.iter().sum();
        if total == 0 {
            return Fault::None;
        }
        let mut pick = rng.next_u32() % total;
        let mut which = 0;
        for (i, weight) in self.weights.iter().enumerate() {
            if pick < *weight {
                which = i;
                break;
            }
            pick -= weight;
        }
        // A break after k output tokens, k = 0 included (an OpenAI stream then carries only
        // its role chunk before the break).
        let after = rng.next_u32() % 24;
        match which {
            0 => {
                let statuses: &[u16] =
                    if dialect == WireDialect::Anthropic { &[429, 500, 503, 529] } else { &[429, 500, 503] };
                let status = statuses[(rng.next_u32() as usize) % statuses.len()];
                let retry_after = match rng.next_u32() % 3 {
                    0 => RetryAfter::None,
                    1 => RetryAfter::Seconds(0),
                    _ => RetryAfter::Millis(u64::from(rng.next_u32() % 20)),
                };
                Fault::Status { status, retry_after }
            }
            1 => Fault::Drop { after },
            2 => Fault::Stall { after },
            3 => Fault::Malformed { after },
            4 => Fault::StreamError { after },
            5 => Fault::UsageMissing,
            6 => Fault::Refusal,
            _ => Fault::MaxTokens,
        }
    }
}

/// The generator for one attempt: seeded by a hash of its coordinates.
fn rng_for(seed: u64, tag: &str, turn: u32, attempt: u32) -> ChaCha8Rng {
    let mut hasher = Sha256::new();
    hasher.update(seed.to_le_bytes());
    hasher.update(tag.as_bytes());
    hasher.update([0]);
    hasher.update(turn.to_le_bytes());
    hasher.update(attempt.to_le_bytes());
    let digest: [u8; 32] = hasher.finalize().into();
    ChaCha8Rng::from_seed(digest)
}

fn chance(rng: &mut ChaCha8Rng, p: f64) -> bool {
    let unit = f64::from(rng.next_u32()) / f64::from(u32::MAX);
    unit < p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_draw_is_a_function_of_its_coordinates_and_retries_end() {
        let mix = FaultMix { rate: 1.0, ..FaultMix::default() };
        for attempt in 0..3 {
            let a = mix.draw(7, "c1", 0, attempt, WireDialect::Anthropic);
            assert_eq!(a, mix.draw(7, "c1", 0, attempt, WireDialect::Anthropic));
            assert_ne!(a, Fault::None);
        }
        assert_eq!(mix.draw(7, "c1", 0, 3, WireDialect::Anthropic), Fault::None);
        assert_eq!(FaultMix::none().draw(7, "c1", 0, 0, WireDialect::OpenAiChat), Fault::None);
        let kinds: std::collections::BTreeSet<String> = (0..400)
            .map(|s| format!("{:?}", mix.draw(s, "c", 0, 0, WireDialect::OpenAiChat)))
            .map(|d| d.split([' ', '{']).next().unwrap_or_default().to_owned())
            .collect();
        assert!(kinds.len() >= 8, "{kinds:?}");
    }
}

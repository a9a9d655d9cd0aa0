//! How long to wait before retrying a model turn: exponential backoff capped at
//! `max_backoff`, spread by jitter that is random per call and attempt (so concurrent calls
//! rejected together do not retry in lockstep), or the provider's `Retry-After`, clamped.

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;
use std::time::Duration;

/// The longest backoff when none is configured.
pub(crate) const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The longest `Retry-After` honoured when none is configured.
pub(crate) const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// A call's retry timing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    /// The first backoff, doubled per attempt.
    pub(crate) base: Duration,
    /// No backoff is longer.
    pub(crate) max: Duration,
    /// A provider's `Retry-After` is honoured up to this.
    pub(crate) max_retry_after: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            base: Duration::from_millis(250),
            max: DEFAULT_MAX_BACKOFF,
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
        }
    }
}

impl Backoff {
    /// The wait before retry number `attempt + 1` of the call keyed `call`: the provider's
    /// `retry_after_ms` clamped to `max_retry_after`, else `base * 2^attempt` plus up to a
    /// quarter of that in jitter, never more than `max`.
    pub(crate) fn delay(&self, call: &[u8], attempt: u32, retry_after_ms: Option<u64>) -> Duration {
        if let Some(ms) = retry_after_ms {
            return Duration::from_millis(ms).min(self.max_retry_after);
        }
        let exponential = self.base.saturating_mul(1u32 << attempt.min(20));
        let spread = (exponential.as_millis() as u64 / 4).max(1);
        let jitter = Duration::from_millis(random(call, attempt) % spread);
        (exponential + jitter).min(self.max)
    }
}

/// A value random per process, call and attempt: the process's random hasher keys (fixed on
/// first use) over the call key and the attempt.
fn random(call: &[u8], attempt: u32) -> u64 {
    static KEYS: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    let mut hasher = KEYS.get_or_init(std::collections::hash_map::RandomState::new).build_hasher();
    hasher.write(call);
    hasher.write_u32(attempt);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_stops_at_its_cap() {
        let backoff =
            Backoff { base: Duration::from_millis(100), max: Duration::from_secs(1), ..Backoff::default() };
        let first = backoff.delay(b"k", 0, None);
        assert!(first >= Duration::from_millis(100) && first < Duration::from_millis(125), "{first:?}");
        let third = backoff.delay(b"k", 2, None);
        assert!(third >= Duration::from_millis(400) && third < Duration::from_millis(500), "{third:?}");
        for attempt in 4..40 {
            assert!(backoff.delay(b"k", attempt, None) <= Duration::from_secs(1), "attempt {attempt}");
        }
    }

    #[test]
    fn retry_after_is_honoured_up_to_its_clamp() {
        let backoff = Backoff::default();
        assert_eq!(backoff.delay(b"k", 0, Some(2_000)), Duration::from_secs(2));
        assert_eq!(backoff.delay(b"k", 0, Some(86_400_000)), Duration::from_secs(60));
    }

    #[test]
    fn concurrent_calls_do_not_retry_in_lockstep() {
        let backoff = Backoff { base: Duration::from_secs(1), ..Backoff::default() };
        let delays: std::collections::HashSet<Duration> =
            (0..20u32).map(|call| backoff.delay(&call.to_le_bytes(), 3, None)).collect();
        assert!(delays.len() > 10, "the same attempt of different calls waits different times: {delays:?}");
    }

    /// The loop with tokio's paused clock: virtual time shows exactly how long it waited.
    mod through_the_loop {
        use std::sync::Arc;

        use tokio_util::sync::CancellationToken;

        use super::*;
        use crate::agent::{AgentEnd, AgentSpec, BudgetHooks, Permissions, run};
        use crate::error::{Error, ErrorCode};
        use crate::money::Money;
        use crate::provider::{ChatRequest, Message};
        use crate::testing::{FakeProvider, FakeScript};

        struct Open;
        impl BudgetHooks for Open {
            fn can_start_turn(&self) -> bool {
                true
            }
            fn would_cross(&self, _cost: Money) -> bool {
                false
            }
        }

        fn spec(script: FakeScript, retries: u32, base: Duration, backoff: Backoff) -> AgentSpec {
            AgentSpec {
                provider: Arc::new(FakeProvider::new().on_any(script)),
                served_by: "fake:m".into(),
                request: ChatRequest::new("m", vec![Message::user("hi")]),
                schema: None,
                max_turns: 4,
                max_tool_calls: None,
                max_retries: retries,
                retry_base: base,
                backoff,
                price: None,
                fallbacks: Vec::new(),
                tools: Vec::new(),
                permissions: Permissions::allow_all(),
                call_key: crate::journal::ContentKey::from_bytes([7; 32]),
                resume_from: None,
                max_context_tokens: crate::agent::DEFAULT_MAX_CONTEXT_TOKENS,
            }
        }

        async fn waited(spec: AgentSpec) -> Duration {
            let start = tokio::time::Instant::now();
            let outcome = run(spec, &Open, &CancellationToken::new(), &|_| {}).await;
            assert!(matches!(outcome.end, AgentEnd::Ok(_)), "{:?}", outcome.end);
            start.elapsed()
        }

        #[tokio::test(start_paused = true)]
        async fn an_hour_of_retry_after_waits_the_clamp() {
            let error = Error::new(ErrorCode::ProviderRateLimit, "slow down").with_retry_after_ms(3_600_000);
            let script = FakeScript::fail_times(2, error).then_text("ok");
            let waited = waited(spec(script, 3, Duration::from_millis(100), Backoff::default())).await;
            assert!(waited >= Duration::from_secs(120) && waited < Duration::from_secs(121), "{waited:?}");
        }

        #[tokio::test(start_paused = true)]
        async fn max_backoff_caps_every_wait() {
            let error = Error::new(ErrorCode::ProviderUnavailable, "overloaded");
            let script = FakeScript::fail_times(5, error).then_text("ok");
            let capped = Backoff { max: Duration::from_secs(2), ..Backoff::default() };
            // Uncapped: 1 + 2 + 4 + 8 + 16 s and jitter; capped: at most 1.25 + 4 * 2 s.
            let waited = waited(spec(script, 5, Duration::from_secs(1), capped)).await;
            assert!(waited >= Duration::from_secs(9) && waited <= Duration::from_millis(9_250), "{waited:?}");
        }
    }
}

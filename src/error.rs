//! The error taxonomy: one closed set of codes, each with a retryable flag and a class, and
//! a wire-safe projection that is what the journal, events and the CLI's JSON carry.
//!
//! Errors are classified by kind, never by message text: whoever raises an error picks its
//! [`ErrorCode`], and every later decision (retry, failover, replay disposition, exit code)
//! reads the code.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::diagnostic::Diagnostic;

/// Every way a cairn operation can fail, as a closed set.
///
/// The codes are persisted in journals as their snake_case names; a code is never renamed or
/// reused for another meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The run or the call was cancelled.
    Cancelled,
    /// The budget ceiling does not admit the work.
    BudgetExhausted,
    /// A replay-strict run reached a call the journal does not hold.
    JournalMiss,
    /// Bad configuration, options or flags.
    Config,
    /// A value failed validation (arguments, option types, non-JSON values).
    Validation,
    /// A model's structured output did not match the schema after the allowed re-prompts.
    SchemaMismatch,
    /// A tool call was denied by the permission chain.
    ToolDenied,
    /// A tool failed.
    ToolFailed,
    /// An agent reached its turn, tool-call or output-token limit.
    TurnLimit,
    /// The conversation no longer fits the model's context window.
    ContextOverflow,
    /// The provider refused the credentials.
    ProviderAuth,
    /// The provider rate-limited the request.
    ProviderRateLimit,
    /// The provider is overloaded or failing.
    ProviderUnavailable,
    /// The provider's content filter blocked the output.
    ContentFilter,
    /// The model refused to answer (Anthropic's `stop_reason: "refusal"`, OpenAI's `refusal`
    /// field): a typed outcome of the call, never an `ok` answer.
    Refused,
    /// The connection failed, dropped or stalled.
    Transport,
    /// A script hit a sandbox limit (operations, memory, depth, forbidden capability).
    SandboxLimit,
    /// A script raised an error or failed to run.
    ScriptError,
    /// A bug or an unexpected state inside cairn, or a storage failure.
    Internal,
    /// Another process is driving the run (it holds the run's lease).
    RunBusy,
    /// The store could not be written or read: no space left, a file-size limit, a
    /// read-only file or file system, an I/O error. Nothing acknowledged is lost; resume the
    /// run once the store is writable again.
    StoreIo,
    /// A resume would run again completed, paid calls whose identity changed (model,
    /// prompt, tools, schema, options), and re-keying was not accepted.
    RekeyRefused,
    /// A model with no price was asked for under a finite budget ceiling.
    UnpricedModel,
    /// A script broke a sandbox rule that keeps it deterministic: a `parallel` branch or
    /// `pipeline` stage wrote a value captured from outside it.
    SandboxViolation,
    /// A planner-written script was rejected: no draft passed lint and compile within the
    /// repair rounds, or a draft was cut off by the output limit.
    ScriptRejected,
    /// An orchestration's result was refused by its declared contract: its acceptance policy
    /// (child status counts in the message), its finish validators once repairs ran out, or
    /// its claim-consistency pass under policy `fail`.
    AcceptanceFailed,
}

/// Whether a failure says something about the task or only about the path to it.
///
/// Task-class failures may be memoized (`memoize_outcome`); transport-class failures always
/// rerun on resume, so a transient outage is never cached as a final outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// The work itself failed (bad output, denied tool, turn limit).
    Task,
    /// The way to the work failed (network, rate limit, budget, cancellation).
    Transport,
}

impl ErrorCode {
    /// Every code, in declaration order.
    pub const ALL: [ErrorCode; 26] = [
        ErrorCode::Cancelled,
        ErrorCode::BudgetExhausted,
        ErrorCode::JournalMiss,
        ErrorCode::Config,
        ErrorCode::Validation,
        ErrorCode::SchemaMismatch,
        ErrorCode::ToolDenied,
        ErrorCode::ToolFailed,
        ErrorCode::TurnLimit,
        ErrorCode::ContextOverflow,
        ErrorCode::ProviderAuth,
        ErrorCode::ProviderRateLimit,
        ErrorCode::ProviderUnavailable,
        ErrorCode::ContentFilter,
        ErrorCode::Refused,
        ErrorCode::Transport,
        ErrorCode::SandboxLimit,
        ErrorCode::ScriptError,
        ErrorCode::Internal,
        ErrorCode::RunBusy,
        ErrorCode::StoreIo,
        ErrorCode::RekeyRefused,
        ErrorCode::UnpricedModel,
        ErrorCode::SandboxViolation,
        ErrorCode::ScriptRejected,
        ErrorCode::AcceptanceFailed,
    ];

    /// The snake_case name, as persisted.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::BudgetExhausted => "budget_exhausted",
            ErrorCode::JournalMiss => "journal_miss",
            ErrorCode::Config => "config",
            ErrorCode::Validation => "validation",
            ErrorCode::SchemaMismatch => "schema_mismatch",
            ErrorCode::ToolDenied => "tool_denied",
            ErrorCode::ToolFailed => "tool_failed",
            ErrorCode::TurnLimit => "turn_limit",
            ErrorCode::ContextOverflow => "context_overflow",
            ErrorCode::ProviderAuth => "provider_auth",
            ErrorCode::ProviderRateLimit => "provider_rate_limit",
            ErrorCode::ProviderUnavailable => "provider_unavailable",
            ErrorCode::ContentFilter => "content_filter",
            ErrorCode::Refused => "refused",
            ErrorCode::Transport => "transport",
            ErrorCode::SandboxLimit => "sandbox_limit",
            ErrorCode::ScriptError => "script_error",
            ErrorCode::Internal => "internal",
            ErrorCode::RunBusy => "run_busy",
            ErrorCode::StoreIo => "store_io",
            ErrorCode::RekeyRefused => "rekey_refused",
            ErrorCode::UnpricedModel => "unpriced_model",
            ErrorCode::SandboxViolation => "sandbox_violation",
            ErrorCode::ScriptRejected => "script_rejected",
            ErrorCode::AcceptanceFailed => "acceptance_failed",
        }
    }

    /// Whether retrying the same request may succeed (the core's retry loop reads this).
    pub const fn retryable(self) -> bool {
        matches!(self, ErrorCode::ProviderRateLimit | ErrorCode::ProviderUnavailable | ErrorCode::Transport)
    }

    /// The failure's class, for the replay disposition.
    pub const fn class(self) -> ErrorClass {
        match self {
            ErrorCode::Cancelled
            | ErrorCode::BudgetExhausted
            | ErrorCode::ProviderAuth
            | ErrorCode::ProviderRateLimit
            | ErrorCode::ProviderUnavailable
            | ErrorCode::Transport
            | ErrorCode::Internal
            | ErrorCode::RunBusy
            | ErrorCode::StoreIo
            | ErrorCode::RekeyRefused => ErrorClass::Transport,
            ErrorCode::JournalMiss
            | ErrorCode::Config
            | ErrorCode::Validation
            | ErrorCode::SchemaMismatch
            | ErrorCode::ToolDenied
            | ErrorCode::ToolFailed
            | ErrorCode::TurnLimit
            | ErrorCode::ContextOverflow
            | ErrorCode::ContentFilter
            | ErrorCode::Refused
            | ErrorCode::SandboxLimit
            | ErrorCode::ScriptError
            | ErrorCode::UnpricedModel
            | ErrorCode::SandboxViolation
            | ErrorCode::ScriptRejected
            | ErrorCode::AcceptanceFailed => ErrorClass::Task,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A cairn error: a code, a message, and the facts a caller acts on.
///
/// This is the type that crosses API boundaries (run outcomes, script errors, provider
/// failures). Its serialized form is the wire projection: it holds no source chain and no
/// secrets, so it is safe to journal, emit in events and print.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Error {
    /// What kind of failure this is.
    pub code: ErrorCode,
    /// A lowercase, human-readable description.
    pub message: String,
    /// Whether retrying may succeed; defaults to the code's flag.
    pub retryable: bool,
    /// How long the provider asked to wait before a retry, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// A rejected script's findings (`validation`, "script rejected"): each error lint or
    /// compile reported, typed, so a caller need not parse the message. Empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<Diagnostic>,
}

impl Error {
    /// An error with the code's default retryable flag.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
            retryable: code.retryable(),
            retry_after_ms: None,
            diagnostics: Vec::new(),
        }
    }

    /// A script rejected by lint or compile (`validation`): its error findings, typed in
    /// [`Error::diagnostics`] and as JSON in the message.
    pub fn script_rejected(diagnostics: Vec<Diagnostic>) -> Error {
        let errors: Vec<Diagnostic> = diagnostics.into_iter().filter(Diagnostic::is_error).collect();
        let shown = serde_json::to_string(&errors).unwrap_or_else(|_| "unprintable diagnostics".into());
        Error { diagnostics: errors, ..Error::validation(format!("script rejected: {shown}")) }
    }

    /// Sets how long to wait before a retry.
    pub fn with_retry_after_ms(mut self, ms: u64) -> Error {
        self.retry_after_ms = Some(ms);
        self
    }

    /// Shorthand for [`ErrorCode::Config`].
    pub fn config(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::Config, message)
    }

    /// Shorthand for [`ErrorCode::Internal`].
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::Internal, message)
    }

    /// Shorthand for [`ErrorCode::Validation`].
    pub fn validation(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::Validation, message)
    }

    /// The failure's class, for the replay disposition.
    pub fn class(&self) -> ErrorClass {
        self.code.class()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_by_name() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            assert_eq!(serde_json::from_str::<ErrorCode>(&json).unwrap(), code);
        }
    }

    #[test]
    fn only_transient_codes_are_retryable() {
        let retryable: Vec<_> = ErrorCode::ALL.into_iter().filter(|c| c.retryable()).collect();
        assert_eq!(
            retryable,
            [ErrorCode::ProviderRateLimit, ErrorCode::ProviderUnavailable, ErrorCode::Transport]
        );
        for code in retryable {
            assert_eq!(code.class(), ErrorClass::Transport);
        }
        assert_eq!(ErrorCode::BudgetExhausted.class(), ErrorClass::Transport);
        assert_eq!(ErrorCode::SchemaMismatch.class(), ErrorClass::Task);
    }

    #[test]
    fn wire_form_is_stable() {
        let err = Error::new(ErrorCode::ProviderRateLimit, "slow down").with_retry_after_ms(2000);
        assert_eq!(
            serde_json::to_string(&err).unwrap(),
            r#"{"code":"provider_rate_limit","message":"slow down","retryable":true,"retry_after_ms":2000}"#
        );
        assert_eq!(err.to_string(), "provider_rate_limit: slow down");
    }
}

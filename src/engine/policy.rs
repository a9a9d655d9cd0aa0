//! What a failed call does under the run's error policy: raise it to the workflow, or
//! return null and itemize the loss in the outcome's `dropped`; and how a journaled terminal
//! entry is served on replay (its value, or its failure under the same policy).

use serde_json::Value;

use super::ctx::Ctx;
use super::options::{ErrorPolicy, OnError};
use super::outcome::Dropped;
use crate::error::{Error, ErrorCode};
use crate::journal::{Entry, Status};

impl Ctx {
    pub(super) fn policy_on_error(&self, explicit: Option<OnError>) -> OnError {
        explicit.unwrap_or(match self.run.policy {
            ErrorPolicy::Strict => OnError::Throw,
            ErrorPolicy::Lenient => OnError::Null,
        })
    }

    /// Applies the error policy to a failure: raise it, or record the drop and return null.
    /// Cancellation and replay-strict misses always raise.
    pub(crate) fn fail(
        &self,
        on_error: Option<OnError>,
        kind: &str,
        label: Option<String>,
        error: Error,
    ) -> Result<Value, Error> {
        let always_raise = matches!(error.code, ErrorCode::Cancelled | ErrorCode::JournalMiss);
        if error.code == ErrorCode::BudgetExhausted {
            self.run.mark_exhausted();
        }
        if !always_raise && self.policy_on_error(on_error) == OnError::Null {
            self.run.record_dropped(Dropped {
                scope: self.scope.to_string(),
                kind: kind.to_owned(),
                label,
                error,
            });
            return Ok(Value::Null);
        }
        // A raised failure is itemized where it is absorbed (a lenient branch, a dropped
        // pipeline item) or, if it ends the run, in the outcome's error.
        Err(error)
    }

    /// Serves a replayed terminal entry: its value, or its (memoized) failure.
    pub(super) fn replayed(
        &self,
        entry: &Entry,
        on_error: Option<OnError>,
        kind: &str,
        label: Option<String>,
    ) -> Result<Value, Error> {
        match entry.status {
            Status::Ok => Ok(entry.value().unwrap_or(Value::Null)),
            _ => {
                let error = entry
                    .error
                    .clone()
                    .unwrap_or_else(|| Error::internal("journaled failure carries no error"));
                self.fail(on_error, kind, label, error)
            }
        }
    }
}

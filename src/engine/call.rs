//! `call`: a registered host function with JSON arguments. Identity: `{kind: call, name,
//! args or key}`. Journal: the two-phase pair, with everything queued before the call durable
//! before it acts and its result durable before it returns, since a host function acts outside
//! the run: a crash can neither remake a value it was given nor repeat its side effect.

use std::future::Future;

use serde_json::Value;

use super::ctx::Ctx;
use super::identity::CallIdentity;
use super::options::{CallOptions, OnError};
use super::two_phase::Begun;
use crate::error::Error;
use crate::journal::{ContentKey, Kind};

impl Ctx {
    /// Calls a registered host function with JSON arguments, journaled like a step.
    ///
    /// # Replay
    /// Keyed on `{name, args or key}` in this scope.
    ///
    /// # Errors
    /// `config` for an unregistered function; the function's error (or null under the
    /// lenient policy).
    pub async fn call(&self, name: &str, args: Value, opts: CallOptions) -> Result<Value, Error> {
        let Some(function) = self.run.engine.host_functions.get(name).cloned() else {
            let error = Error::config(format!("unknown host function {name:?}"));
            return self.fail(opts.on_error, "call", Some(name.to_owned()), error);
        };
        let key = CallIdentity::new("call", name, opts.key.as_deref(), &args).key()?;
        self.two_phase(Kind::Call, "call", name, key, opts.on_error, move || function(args)).await
    }

    async fn two_phase<F, Fut>(
        &self,
        kind: Kind,
        kind_name: &str,
        label: &str,
        key: ContentKey,
        on_error: Option<OnError>,
        body: F,
    ) -> Result<Value, Error>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Value, Error>>,
    {
        let live = match self.begin_two_phase(kind, kind_name, label, key, on_error)? {
            Begun::Done(result, _) => return result,
            Begun::Live(live) => live,
        };
        // A host call acts outside the run: everything queued before it (its own dispatch
        // included) is durable first, so a crash cannot remake a value it was given.
        if let Err(e) = self.run.flush_async().await {
            return self.end_two_phase(live, Err(e));
        }
        let result = tokio::select! {
            result = body() => result,
            _ = self.cancel.cancelled() => Err(self.run.stopped_error()),
        };
        let result = self.end_two_phase(live, result);
        // Its result is awaited like a paid one: a side effect is not repeated on resume.
        self.run.flush_async().await?;
        result
    }
}

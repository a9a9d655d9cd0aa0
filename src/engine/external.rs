//! `await_external`: a wait for a value from outside the run (`RunHandle::resolve_external`,
//! `cairn resolve`, the inbox of a run another process drives). Identity: `{kind: external,
//! key}`. Journal: one `suspended` entry (with the prompt, schema and deadline when given);
//! each attempt to resolve it appends a `resolution` ref-entry, the first valid one wins, and
//! a wait past its deadline is resolved by its timeout the same way. An open wait waits again
//! on replay without writing anything; when every live branch waits, the run suspends.

use serde_json::{Value, json};

use super::ctx::Ctx;
use super::events::EventKind;
use super::identity::ExternalIdentity;
use super::options::ExternalOptions;
use super::run::Durability;
use crate::error::Error;
use crate::journal::{Kind, Outcome, Status};

impl Ctx {
    /// Waits for a value from outside the run (`RunHandle::resolve_external`, `cairn resolve`).
    /// When every live branch of the run is waiting, the run settles `suspended` with the
    /// wait listed in `pending`; resuming delivers the value.
    ///
    /// # Replay
    /// Keyed on `{key}`; a resolved wait replays its value; an open one waits again without
    /// writing anything.
    ///
    /// # Errors
    /// `cancelled` when the run is cancelled or suspends while waiting.
    pub async fn await_external(&self, key: &str, opts: ExternalOptions) -> Result<Value, Error> {
        self.check_stopped()?;
        let content = ExternalIdentity { key, kind: "external" }.key()?;
        self.wait_for(key, content, None, opts).await
    }

    /// Sleeps `ms` milliseconds, durably: the wake time is journaled when the sleep begins (a
    /// wait only its deadline resolves, named `sleep@SCOPE#n`), so a replay returns at once
    /// and a run killed mid-sleep waits only the remainder on resume. Like any wait, a run
    /// whose every branch sleeps or waits suspends, unless the wake time lies within the
    /// segment's `hold_timers`; a worker claims a suspended run again at its wake time.
    ///
    /// # Replay
    /// Keyed on `{kind: sleep}` and its ordinal among the scope's sleeps.
    ///
    /// # Errors
    /// `cancelled` when the run is cancelled or suspends while sleeping.
    pub async fn sleep(&self, ms: u64) -> Result<(), Error> {
        self.check_stopped()?;
        let content = ExternalIdentity { key: "sleep", kind: "sleep" }.key()?;
        let opts =
            ExternalOptions { timeout: Some(std::time::Duration::from_millis(ms)), ..Default::default() };
        self.wait_for("sleep", content, Some(&self.scope), opts).await.map(|_| ())
    }

    /// A journaled wait on `key` (for a sleep, named by its scope and ordinal, so concurrent
    /// sleeps never share a name).
    async fn wait_for(
        &self,
        key: &str,
        content: crate::journal::ContentKey,
        sleep_scope: Option<&crate::journal::ScopePath>,
        opts: ExternalOptions,
    ) -> Result<Value, Error> {
        let prompt = opts.prompt.as_deref();
        let span = self.run.new_span();
        let matched = self.run.lookup(&self.scope, content)?;
        let named = sleep_scope.map(|scope| format!("sleep@{scope}#{}", matched.ordinal));
        let key = named.as_deref().unwrap_or(key);
        let (seq, deadline_ms) = match matched.outcome {
            Outcome::Replay(entry) => {
                self.run.emit(self.span_pair(span), true, || EventKind::ExternalResolved {
                    key: key.into(),
                    applied: true,
                });
                return Ok(entry.value().unwrap_or(Value::Null));
            }
            Outcome::Skip => return Ok(Value::Null),
            // The deadline is the one journaled when the wait began.
            Outcome::Wait(entry) => {
                (entry.seq, entry.value().and_then(|v| v.get("deadline_ms").and_then(Value::as_i64)))
            }
            Outcome::Live | Outcome::Rerun { .. } => {
                let deadline_ms = opts.timeout.map(|t| {
                    self.run.now_ms().saturating_add(i64::try_from(t.as_millis()).unwrap_or(i64::MAX))
                });
                let mut entry = self.entry(Kind::External, Status::Suspended, content, matched.ordinal);
                entry.name = Some(key.to_owned());
                if prompt.is_some() || opts.schema.is_some() || deadline_ms.is_some() {
                    let mut value = json!({ "prompt": prompt, "schema": opts.schema });
                    if let Some(deadline) = deadline_ms {
                        value["deadline_ms"] = json!(deadline);
                    }
                    entry.set_value(Some(&value));
                }
                (self.run.append_one(entry, Durability::Awaited)?.seq, deadline_ms)
            }
        };
        if let Some(deadline) = deadline_ms
            && self.run.now_ms() >= deadline
        {
            // Past its deadline: the timeout is the wait's resolution, unless one came first.
            return self.run.time_out_external(key, seq, deadline);
        }
        // A branch waiting for input does not hold up its siblings' admission.
        self.pass_admission_turn_now();
        self.run.emit(self.span_pair(span), false, || EventKind::ExternalWaiting {
            key: key.into(),
            prompt: prompt.map(str::to_owned),
        });
        let mut receiver = self.run.wait_external(key, seq, prompt.map(str::to_owned), deadline_ms);
        let timer = async {
            match deadline_ms {
                Some(deadline) => {
                    let wait = u64::try_from(deadline.saturating_sub(self.run.now_ms())).unwrap_or(0);
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                }
                None => std::future::pending().await,
            }
        };
        let result = tokio::select! {
            value = &mut receiver => value.map_err(|_| self.run.stopped_error()),
            _ = self.cancel.cancelled() => Err(self.run.stopped_error()),
            () = timer => match deadline_ms {
                Some(deadline) => self.run.time_out_external(key, seq, deadline),
                None => Err(Error::internal("a wait without a deadline timed out")),
            },
        };
        self.run.end_wait(key, result.is_ok());
        result
    }
}

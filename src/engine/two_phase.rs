//! The two-phase protocol of the dispatched calls other than `agent` (`step`, `call`, a child
//! `workflow`): match the call's identity in its scope, then either serve the journaled result
//! (a replay, a skip, or in reproduce mode the journaled failure) or journal the dispatch
//! (`running`, lazily) and, once the body returns, its terminal entry (deferred) under the
//! error policy. The halves are separate so a script runner can run a step's body on its own
//! thread between them.

use std::sync::Arc;

use serde_json::Value;

use super::ctx::Ctx;
use super::events::EventKind;
use super::options::OnError;
use super::run::Durability;
use super::step_ops::StepOps;
use crate::error::{Error, ErrorCode};
use crate::journal::{ContentKey, Entry, Kind, Outcome, Segment, Status};

/// How [`Ctx::begin_two_phase`] left a call.
pub(crate) enum Begun {
    /// Served from the journal (or skipped, or failed before dispatch), with the operations
    /// a served step's body ran live (0 for anything else): the script runner charges them
    /// to the operation budget, as if the body had run.
    Done(Result<Value, Error>, u64),
    /// Dispatched: run the body, then [`Ctx::end_two_phase`].
    Live(LiveCall),
}

/// A dispatched two-phase call awaiting its result.
pub(crate) struct LiveCall {
    pub(super) running: Arc<Entry>,
    span: u64,
    kind_name: String,
    on_error: Option<OnError>,
    /// A step's operation tally, which its body's context counts into.
    pub(super) ops: Option<Arc<StepOps>>,
}

impl Ctx {
    /// The first half of a two-phase call: match it, and either serve it from the journal or
    /// journal its dispatch. Synchronous, so a script runner can run the body on its own
    /// thread between the halves.
    pub(crate) fn begin_two_phase(
        &self,
        kind: Kind,
        kind_name: &str,
        label: &str,
        key: ContentKey,
        on_error: Option<OnError>,
    ) -> Result<Begun, Error> {
        self.check_stopped()?;
        let span = self.run.new_span();
        let matched = self.run.lookup(&self.scope, key)?;
        let start = || EventKind::StepStart { kind: kind_name.into(), label: label.into() };
        let end = |status: &str| EventKind::StepEnd {
            kind: kind_name.into(),
            label: label.into(),
            status: status.into(),
        };
        let served = match &matched.outcome {
            Outcome::Replay(_) | Outcome::Skip => true,
            Outcome::Rerun { previous: Some(_), .. } => self.run.reproduce,
            _ => false,
        };
        if kind == Kind::Step && served {
            // The body will not run: what it journaled is served by the step's result.
            self.run.cover(&self.scope.child(&step_segment(key, matched.ordinal)));
        }
        let supersedes = match matched.outcome {
            Outcome::Replay(entry) => {
                self.run.emit(self.span_pair(span), true, start);
                self.run.emit(self.span_pair(span), true, || end(entry.status.as_str()));
                let result = self.replayed(&entry, on_error, kind_name, Some(label.to_owned()));
                return Ok(Begun::Done(result, entry.ops));
            }
            Outcome::Skip => {
                self.run.emit(self.span_pair(span), true, || end("skipped"));
                return Ok(Begun::Done(Ok(Value::Null), 0));
            }
            Outcome::Wait(_) => return Err(Error::internal("a step entry is journaled as suspended")),
            Outcome::Live => {
                if kind == Kind::Step {
                    super::explain::check_step(&self.run, &self.scope, label)?;
                }
                None
            }
            Outcome::Rerun { previous: Some(terminal), .. } if self.run.reproduce => {
                // Reproducing the run as it settled: the failure it saw, not a new attempt
                // (a call cancelled with its run stops this reproduction the same way).
                if terminal.status == Status::Cancelled {
                    self.run.cancel();
                }
                self.run.emit(self.span_pair(span), true, start);
                self.run.emit(self.span_pair(span), true, || end(terminal.status.as_str()));
                let result = self.replayed(&terminal, on_error, kind_name, Some(label.to_owned()));
                return Ok(Begun::Done(result, terminal.ops));
            }
            Outcome::Rerun { supersedes, .. } => Some(supersedes),
        };
        let mut running = self.entry(kind, Status::Running, key, matched.ordinal);
        running.target = supersedes;
        running.label = Some(label.to_owned());
        if kind != Kind::Step {
            running.name = Some(label.to_owned());
        }
        let running = self.run.append_one(running, Durability::Lazy)?;
        self.run.emit(self.span_pair(span), false, start);
        let ops = (kind == Kind::Step).then(|| StepOps::inside(self.step_ops.clone()));
        Ok(Begun::Live(LiveCall { running, span, kind_name: kind_name.to_owned(), on_error, ops }))
    }

    /// The second half of a two-phase call: journal the body's result and apply the policy.
    pub(crate) fn end_two_phase(&self, live: LiveCall, result: Result<Value, Error>) -> Result<Value, Error> {
        let label = live.running.label.clone().unwrap_or_default();
        let (status, value, error) = match result {
            Ok(value) => (Status::Ok, Some(value), None),
            Err(e) if e.code == ErrorCode::Cancelled => (Status::Cancelled, None, Some(e)),
            Err(e) => (Status::Error, None, Some(e)),
        };
        let mut terminal = Ctx::terminal_for(&live.running, status);
        terminal.set_value(value.as_ref());
        terminal.error = error.clone();
        terminal.ops = live.ops.as_ref().map_or(0, |ops| ops.total());
        // Deferred: nothing paid hangs on it (a child's paid calls were awaited inside it);
        // a crash before the write reruns the body, the at-least-once every step has.
        self.run.append_one(terminal, Durability::Deferred)?;
        self.run.emit(self.span_pair(live.span), false, || EventKind::StepEnd {
            kind: live.kind_name.clone(),
            label: label.clone(),
            status: status.as_str().into(),
        });
        match (value, error) {
            (Some(value), _) => Ok(value),
            (None, Some(error)) if error.code == ErrorCode::Cancelled => Err(error),
            (None, Some(error)) => self.fail(live.on_error, &live.kind_name, Some(label), error),
            (None, None) => Err(Error::internal("step ended with neither value nor error")),
        }
    }
}

/// The scope segment of a step's body: from its content key and its ordinal among same-key
/// steps of its scope, never from a running counter.
pub(super) fn step_segment(key: ContentKey, ordinal: u32) -> Segment {
    Segment::step_body(key, ordinal)
}

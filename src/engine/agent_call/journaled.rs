//! An agent call served from the journal: a replayed result, a skipped call, a settled run
//! reproduced; or, when the journal cannot serve it, what the live call supersedes.

use serde_json::Value;

use super::record::{agent_end_event, full_result};
use crate::engine::ctx::Ctx;
use crate::engine::events::EventKind;
use crate::engine::options::AgentOptions;
use crate::error::Error;
use crate::journal::{ContentKey, Kind, Outcome, Seq, Status};
use crate::usage::Usage;

/// What the journal does with a call.
pub(super) enum Served {
    /// Served whole: the call's result (or failure) without a live call.
    Done(Result<Value, Error>),
    /// Runs live.
    Live {
        /// The running entry an earlier attempt left, which this one supersedes.
        supersedes: Option<Seq>,
        /// Whether that earlier attempt wrote a terminal entry.
        previous_terminal: bool,
    },
}

impl Ctx {
    /// Serves the call (keyed `key`) from its journal match when it can. `start_event` is its
    /// start event; `span` its span.
    pub(super) fn serve_journaled(
        &self,
        outcome: Outcome,
        key: ContentKey,
        opts: &AgentOptions,
        span: u64,
        start_event: &dyn Fn() -> EventKind,
    ) -> Served {
        let label = opts.label.clone();
        match outcome {
            Outcome::Replay(entry) => {
                // Its tool approvals are served by its journaled result too.
                self.run.cover_approvals(&self.scope, key);
                self.run.emit(self.span_pair(span), true, start_event);
                self.run.emit(self.span_pair(span), true, || agent_end_event(&entry));
                if opts.full && entry.status != Status::Ok {
                    let error = entry
                        .error
                        .clone()
                        .unwrap_or_else(|| Error::internal("journaled failure carries no error"));
                    // An admission refusal in the call's place: the record the refused call
                    // returned live (nothing ran, so nothing of an agent entry's is in it).
                    let refused = entry.kind == Kind::Decision;
                    let record = (!refused).then_some((&*entry, true));
                    return Served::Done(self.agent_failed(opts, label, error, record));
                }
                let served = self
                    .replayed(&entry, opts.on_error, "agent", label)
                    .map(|value| if opts.full { full_result(&entry, value) } else { value });
                Served::Done(served)
            }
            Outcome::Skip => {
                self.run.emit(self.span_pair(span), true, start_event);
                self.run.emit(self.span_pair(span), true, || EventKind::AgentEnd {
                    status: "skipped".into(),
                    usage: Usage::default(),
                    cost: None,
                    served_by: None,
                    error: None,
                });
                Served::Done(Ok(Value::Null))
            }
            Outcome::Wait(_) => {
                Served::Done(Err(Error::internal("an agent entry is journaled as suspended")))
            }
            Outcome::Live => Served::Live { supersedes: None, previous_terminal: false },
            Outcome::Rerun { previous: Some(ref terminal), .. } if self.run.reproduce => {
                // Reproducing the run as it settled: the failure it saw, not a new attempt
                // (a call cancelled with its run stops this reproduction the same way).
                if terminal.status == Status::Cancelled {
                    self.run.cancel();
                }
                self.run.emit(self.span_pair(span), true, start_event);
                self.run.emit(self.span_pair(span), true, || agent_end_event(terminal));
                if opts.full && terminal.status != Status::Ok && terminal.status != Status::Cancelled {
                    // The full form's record of the failure, as the settled run saw it.
                    let error = terminal
                        .error
                        .clone()
                        .unwrap_or_else(|| Error::internal("journaled failure carries no error"));
                    return Served::Done(self.agent_failed(opts, label, error, Some((terminal, true))));
                }
                let served = self
                    .replayed(terminal, opts.on_error, "agent", label)
                    .map(|value| if opts.full { full_result(terminal, value) } else { value });
                Served::Done(served)
            }
            Outcome::Rerun { supersedes, previous } => {
                Served::Live { supersedes: Some(supersedes), previous_terminal: previous.is_some() }
            }
        }
    }
}

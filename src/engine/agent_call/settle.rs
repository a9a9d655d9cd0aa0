//! Settling a live agent call: the usage carried from a crashed attempt joins its outcome,
//! its terminal entry is made durable, its reservation settled less what a resume already
//! counted, and the workflow gets its result.

use serde_json::Value;

use super::live::{Opened, Ran};
use super::record::{agent_end_event, full_result};
use crate::agent::AgentEnd;
use crate::engine::budget::Reservation;
use crate::engine::call_records::{CallRecord, PromptRecord};
use crate::engine::ctx::Ctx;
use crate::engine::options::AgentOptions;
use crate::error::Error;
use crate::journal::{self, Status};
use crate::usage::{AttemptEnd, AttemptRecord};

impl Ctx {
    /// Settles the call: terminal entry, reservation, events, result; `prompt` is recorded
    /// for the inspector when the call kept no conversation in a checkpoint.
    pub(super) async fn settle_call(
        &self,
        opts: &AgentOptions,
        prompt: &str,
        reservation: Reservation,
        opened: Opened,
        ran: Ran,
        span: u64,
    ) -> Result<Value, Error> {
        let Ran { mut outcome, settlement, checkpoint_ref, turns } = ran;
        if let Some(extra) = opened.unjournaled {
            // The carried turns, each model's as an attempt of that model, so the split by
            // model still sums to the entry's cost (also when a failover served them).
            if !(outcome.attempts.is_empty() && extra.models().all(|m| m == outcome.served_by)) {
                if outcome.attempts.is_empty() && outcome.usage.total_tokens() > 0 {
                    outcome.attempts.push(AttemptRecord {
                        model: outcome.served_by.clone(),
                        end: AttemptEnd::Settled,
                        usage: outcome.usage,
                        cost: outcome.cost,
                    });
                }
                let mut attempts = extra.clone().into_records();
                attempts.append(&mut outcome.attempts);
                outcome.attempts = attempts;
            }
            outcome.usage += extra.usage();
            outcome.priced = outcome.priced.saturating_add(extra.priced());
            outcome.cost = outcome.cost.zip(extra.cost()).map(|(cost, carried)| cost + carried);
        }
        let attempts = settlement.attempts;
        tracing::debug!(attempts, refused = outcome.refused_attempts, "agent call settled");
        let (status, value, error) = match outcome.end {
            AgentEnd::Ok(value) => (Status::Ok, Some(value), None),
            AgentEnd::Error(e) => (Status::Error, None, Some(e)),
            AgentEnd::Limit(e) => (Status::Limit, None, Some(e)),
            AgentEnd::Cancelled(e) => (Status::Cancelled, None, Some(e)),
        };
        let mut terminal = Ctx::terminal_for(&opened.running, status);
        // A `limit` entry keeps the answer that did not make it (the full record's `partial`).
        let partial = outcome.partial.map(Value::String);
        terminal.set_value(value.as_ref().or(partial.as_ref()));
        terminal.error = error.clone();
        terminal.usage = Some(outcome.usage);
        terminal.cost = outcome.cost;
        terminal.served_by = Some(journal::intern(&outcome.served_by));
        terminal.finish_reason = outcome.finish_reason;
        terminal.attempts = outcome.attempts;
        terminal.refused_attempts = outcome.refused_attempts;
        terminal.unanswered_attempts = outcome.unanswered_attempts;
        if settlement.wrote_checkpoint {
            terminal.transcript_ref = Some(checkpoint_ref.clone());
        }
        // An unpriced model's part cannot be priced; the priced attempts' part is spent.
        let cost = outcome.cost.unwrap_or(outcome.priced);
        // Awaited: a paid result is durable before it reaches the workflow.
        let written = self.run.append_one_async(terminal).await;
        // Turns carried into this segment were spent when it began: charge only the rest.
        let carried = self.run.budget.take_carried(&checkpoint_ref);
        self.run.budget.settle(reservation, cost.sub_or_zero(carried));
        let terminal = written?;
        // What the inspector shows of its turns (not journaled; batched per run).
        let conversation_kept = settlement.wrote_checkpoint || opened.resumed;
        self.run.call_records.record(CallRecord {
            seq: opened.running.seq.0,
            prompt: (!conversation_kept).then(|| PromptRecord::of(prompt)),
            turns,
        });
        if let Some(covered) = settlement.covered
            && !self.run.dry_run
        {
            crate::engine::carry::mark_journaled(
                self.run.engine.transcripts.as_ref(),
                &checkpoint_ref,
                &covered,
            );
        }
        self.run.emit(self.span_pair(span), false, || agent_end_event(&terminal));
        self.run.emit_budget(self.span_pair(span));
        let label = opts.label.clone();
        match (value, error) {
            (Some(value), _) => Ok(if opts.full { full_result(&terminal, value) } else { value }),
            (None, Some(error)) => {
                if status == Status::Cancelled && self.cancel.is_cancelled() {
                    return Err(self.run.stopped_error());
                }
                self.agent_failed(opts, label, error, Some((&terminal, false)))
            }
            (None, None) => Err(Error::internal("agent ended with neither value nor error")),
        }
    }
}

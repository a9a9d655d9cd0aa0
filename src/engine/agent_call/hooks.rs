//! The engine side of one agent call's loop ([`BudgetHooks`]): the turn guard and the live
//! cut on the call's reservation, checkpoints (each a transition of the call's [`CallLife`]),
//! per-turn model slots, approvals as waits on external input, and tool calls journaled in the
//! call's own scope.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::life::CallLife;
use super::record::approvals_segment;
use crate::agent::{self, BudgetHooks};
use crate::engine::budget::ReservationId;
use crate::engine::call_records::{StoredCheckpoint, TurnRecord};
use crate::engine::ctx::Ctx;
use crate::engine::events::EventKind;
use crate::engine::options::ExternalOptions;
use crate::error::Error;
use crate::journal::ContentKey;
use crate::money::Money;

/// The engine side of one agent call's loop: its account's path in the run's budget tree,
/// its checkpoint, and approvals as waits on external input.
pub(super) struct AccountHooks<'a> {
    pub(super) ctx: &'a Ctx,
    /// The run-wide and provider slots the call takes per turn (the orchestrator's).
    pub(super) turn_slots: Option<(Arc<tokio::sync::Semaphore>, Option<Arc<tokio::sync::Semaphore>>)>,
    /// Where the call's approval waits are journaled: a scope of their own, covered when the
    /// call replays whole. Made at the call's first approval (most calls ask none).
    pub(super) approvals: std::sync::OnceLock<Ctx>,
    /// The call's key and ordinal, which name that scope.
    pub(super) approvals_site: (ContentKey, u32),
    pub(super) checkpoint_ref: String,
    /// The call's live reservation: the guard raises its hold, the cut records in-flight spend.
    pub(super) reservation: ReservationId,
    /// Where the call is in its life (attempts, checkpoints).
    pub(super) life: Mutex<CallLife>,
    /// The call's span (the parent of its turns' spans).
    pub(super) span: u64,
    /// The span of the turn in flight or last answered (0 before the first): the parent of
    /// the tool calls that turn requested.
    pub(super) turn_span: AtomicU64,
    /// The records of the call's turns (the checkpoint's it continues from first), kept in
    /// its checkpoints and, once it settles, in the run's call records.
    pub(super) turns: Mutex<TurnLog>,
}

/// A call's turn records, and when the turn in flight started.
#[derive(Debug, Default)]
pub(super) struct TurnLog {
    pub(super) records: Vec<TurnRecord>,
    started_ms: i64,
    /// The `running` entry of this attempt of the call.
    pub(super) call_seq: u64,
}

impl TurnLog {
    pub(super) fn new(records: Vec<TurnRecord>, call_seq: u64) -> TurnLog {
        TurnLog { records, started_ms: 0, call_seq }
    }
}

impl BudgetHooks for AccountHooks<'_> {
    fn dispatchable(&self) -> futures::future::BoxFuture<'_, Result<(), Error>> {
        Box::pin(self.ctx.run.dispatchable())
    }

    fn attempt_started(&self) {
        self.life().attempt();
    }

    fn can_start_turn(&self) -> bool {
        let ok = self.ctx.run.budget.can_start_turn(self.ctx.account);
        if !ok {
            self.ctx.run.mark_exhausted();
        }
        ok
    }

    fn would_cross(&self, cost: Money) -> bool {
        let crossing = self.ctx.run.budget.record_in_flight(self.reservation, cost);
        if crossing {
            self.ctx.run.mark_exhausted();
        }
        crossing
    }

    fn grant_turn(&self, used: Money, want: Money, floor: Money) -> Result<Option<Money>, Money> {
        let granted = self.ctx.run.budget.grant_turn(self.reservation, used, want, floor);
        if granted.is_err() {
            self.ctx.run.mark_exhausted();
        }
        granted.map_err(|denied| denied.available)
    }

    fn turn_started(&self, turn: u32, request: &crate::provider::ChatRequest) {
        let run = &self.ctx.run;
        self.turns().started_ms = run.engine.clock.now_ms();
        let span = run.new_span();
        self.turn_span.store(span, Ordering::Relaxed);
        run.emit((span, Some(self.span)), false, || EventKind::TurnStart {
            turn,
            model: request.model.clone(),
            max_tokens: request.max_output_tokens,
            input: run.content_events.then(|| turn_input(request)),
        });
    }

    fn turn_ended(&self, turn: u32, report: &agent::TurnReport<'_>) {
        let run = &self.ctx.run;
        {
            let mut log = self.turns();
            let record = TurnRecord {
                turn,
                status: if report.ok { "ok" } else { "error" }.into(),
                served_by: report.served_by.to_owned(),
                usage: report.usage,
                cost: report.cost,
                started_ms: log.started_ms,
                ended_ms: run.engine.clock.now_ms(),
                finish_reason: report.finish_reason.map(str::to_owned),
                call_seq: log.call_seq,
            };
            log.records.push(record);
        }
        let span = self.turn_span.load(Ordering::Relaxed);
        run.emit((span, Some(self.span)), false, || EventKind::TurnEnd {
            turn,
            status: if report.ok { "ok" } else { "error" }.into(),
            model: report.served_by.to_owned(),
            usage: report.usage,
            finish_reason: report.finish_reason.map(str::to_owned),
            output: if run.content_events { report.text.map(str::to_owned) } else { None },
        });
    }

    fn checkpoint(&self, state: &agent::Checkpoint) {
        if self.ctx.run.dry_run {
            return;
        }
        // A checkpoint is found through the call's `running` entry (written lazily): the
        // first one waits for that entry to be durable, or a crash would orphan it and a
        // resume would pay again for the turns it holds.
        if !self.life().wrote_checkpoint() && self.ctx.run.flush().is_err() {
            return;
        }
        // A checkpoint that fails to persist costs at most a repeated turn on rerun. Its turns'
        // records go beside the conversation (no key reads them).
        let bytes = {
            let log = self.turns();
            serde_json::to_vec(&StoredCheckpoint { state, turn_log: &log.records })
        };
        if let Ok(bytes) = bytes
            && self.ctx.run.engine.transcripts.put(&self.checkpoint_ref, &bytes).is_ok()
        {
            self.life().checkpointed(crate::engine::carry::Covered::of(state));
        }
    }

    fn turn_slot(&self) -> futures::future::BoxFuture<'_, Option<agent::TurnSlot>> {
        Box::pin(async move {
            let mut permits = agent::TurnSlot::new();
            if let Some((run_slots, provider_slots)) = &self.turn_slots {
                permits.push(self.ctx.slot(run_slots).await?);
                if let Some(slots) = provider_slots {
                    permits.push(self.ctx.slot(slots).await?);
                }
            }
            Some(permits)
        })
    }

    fn approve<'b>(
        &'b self,
        request: &'b agent::ApprovalRequest,
    ) -> futures::future::BoxFuture<'b, Result<bool, Error>> {
        Box::pin(async move {
            let opts = ExternalOptions {
                prompt: Some(format!(
                    "approve a call to tool {} with arguments {}?",
                    request.tool, request.arguments
                )),
                schema: Some(json!({
                    "type": "object",
                    "required": ["approved"],
                    "properties": { "approved": { "type": "boolean" } }
                })),
                // An unanswered ask past its deadline resolves as timed out: denied.
                timeout: request.timeout,
            };
            let answer = self.own_scope().await_external(&request.key, opts).await?;
            Ok(answer.get("approved").and_then(Value::as_bool).unwrap_or(false))
        })
    }

    fn run_tool<'b>(
        &'b self,
        tool: &'b Arc<dyn crate::agent::Tool>,
        id: &'b str,
        args: Value,
    ) -> futures::future::BoxFuture<'b, Result<String, Error>> {
        // Journaled in the call's own scope, with its events (`tool_call.rs`), each a child
        // of the span of the turn that requested it (of the call's, before any turn).
        let mut ctx = self.own_scope().clone();
        ctx.span = match self.turn_span.load(Ordering::Relaxed) {
            0 => self.span,
            turn => turn,
        };
        Box::pin(async move { ctx.run_tool(tool, id, args).await })
    }
}

/// A turn's conversation as telemetry shows it: the system text and the messages.
fn turn_input(request: &crate::provider::ChatRequest) -> Value {
    json!({ "system": request.system, "messages": request.messages })
}

impl AccountHooks<'_> {
    /// The call's life, locked for one transition.
    pub(super) fn life(&self) -> std::sync::MutexGuard<'_, CallLife> {
        self.life.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The call's turn records, locked.
    pub(super) fn turns(&self) -> std::sync::MutexGuard<'_, TurnLog> {
        self.turns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The context of the call's own scope, where its approval waits and tool calls are
    /// journaled.
    fn own_scope(&self) -> &Ctx {
        self.approvals.get_or_init(|| {
            let (key, ordinal) = self.approvals_site;
            let scope = self.ctx.scope.child(&approvals_segment(key, ordinal));
            Ctx { scope, counters: Arc::default(), ..self.ctx.clone() }
        })
    }
}

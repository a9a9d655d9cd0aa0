//! The live part of an agent call: its scheduler slots, its durable `running` entry, its
//! spec (resumed from the checkpoint of an earlier attempt when there is one), and the loop.

use std::sync::Arc;

use super::hooks::AccountHooks;
use super::life::{CallLife, Settlement};
use super::prepare::Resolved;
use super::resolve::declared_fallbacks;
use crate::agent;
use crate::engine::budget::Reservation;
use crate::engine::call_records::{TurnRecord, checkpoint_turns};
use crate::engine::ctx::Ctx;
use crate::engine::events::EventKind;
use crate::engine::options::AgentOptions;
use crate::engine::run::Durability;
use crate::error::Error;
use crate::journal::{self, ContentKey, Entry, Kind, Seq, Status};
use crate::model::{InvocationRole, Price};
use crate::money::Money;
use crate::provider::ChatRequest;

type Slots = Arc<tokio::sync::Semaphore>;
type Permit = Option<tokio::sync::OwnedSemaphorePermit>;

/// The scheduler slots of a call: taken for the whole call, or per turn (the orchestrator's).
pub(super) struct CallSlots {
    /// The run-wide and provider slots the call takes per turn.
    turn_slots: Option<(Slots, Option<Slots>)>,
    permits: Permit,
    provider_permit: Permit,
}

/// A live call's `running` entry, with what its loop continues from.
pub(super) struct Opened {
    pub(super) running: Arc<Entry>,
    pub(super) checkpoint_ref: String,
    pub(super) resume_from: Option<agent::Checkpoint>,
    /// The records of the turns that checkpoint holds.
    pub(super) resumed_turns: Vec<TurnRecord>,
    /// Whether the call has a checkpoint from an earlier attempt.
    pub(super) resumed: bool,
    /// Turns a crashed attempt completed that no terminal entry covers.
    pub(super) unjournaled: Option<crate::agent::Spend>,
}

/// What a call's loop is given beside its resolved parts: its first request, the requested
/// model's price, its slots.
pub(super) struct LoopInput {
    pub(super) request: ChatRequest,
    pub(super) price: Option<Price>,
    pub(super) slots: CallSlots,
}

/// What a call's loop left: its outcome and what its life settles.
pub(super) struct Ran {
    pub(super) outcome: agent::AgentRun,
    pub(super) settlement: Settlement,
    pub(super) checkpoint_ref: String,
    /// The records of its turns.
    pub(super) turns: Vec<TurnRecord>,
}

impl Ctx {
    /// The scheduler: a run-wide slot, then a per-provider slot where limited. The
    /// orchestrator takes them per turn: its tools wait for its children's model calls, so
    /// holding a slot across them would starve the children (and deadlock at one slot).
    /// `None` when the run stopped while the call waited.
    pub(super) async fn take_slots(&self, call: &Resolved<'_>) -> Option<CallSlots> {
        let engine = &self.run.engine;
        let provider_slots = match engine.provider_limits.get(call.model.provider()) {
            Some(_) => self.run.provider_slots.get(call.model.provider()).cloned(),
            None => None,
        };
        let turn_slots = (call.role == InvocationRole::Orchestrate)
            .then(|| (self.run.model_slots.clone(), provider_slots.clone()));
        let (permits, provider_permit) = match turn_slots {
            Some(_) => (None, None),
            None => {
                let permits = self.slot(&self.run.model_slots).await;
                let provider_permit = match &provider_slots {
                    Some(slots) => self.slot(slots).await,
                    None => None,
                };
                (permits, provider_permit)
            }
        };
        if permits.is_none() && turn_slots.is_none() {
            return None;
        }
        Some(CallSlots { turn_slots, permits, provider_permit })
    }

    /// Writes the call's `running` entry (deferred: a crash before it is written reruns the
    /// call, as it would anyway) and finds the checkpoint it continues from.
    pub(super) fn open_running(
        &self,
        call: &Resolved<'_>,
        opts: &AgentOptions,
        site: (ContentKey, u32),
        supersedes: Option<Seq>,
        previous_terminal: bool,
        summary: journal::IdentitySummary,
    ) -> Result<Opened, Error> {
        let mut running = self.entry(Kind::Agent, Status::Running, site.0, site.1);
        running.target = supersedes;
        running.memoize_outcome = opts.memoize_outcome;
        running.label = opts.label.clone();
        running.agent_type = opts.profile.as_deref().map(journal::intern);
        running.role = Some(journal::intern(call.role.as_str()));
        running.model = Some(journal::intern(&call.model_name));
        running.identity = Some(Box::new(summary));
        let running = self.run.append_one(running, Durability::Lazy)?;
        let engine = &self.run.engine;
        // The checkpoint of the call's first attempt: a rerun continues from its last turn.
        let checkpoint_ref = format!("{}/ckpt/{}", self.run.run_id, supersedes.unwrap_or(running.seq).0);
        let stored = match supersedes {
            Some(_) => engine.transcripts.get(&checkpoint_ref).ok().flatten(),
            None => None,
        };
        let resume_from =
            stored.as_deref().and_then(|bytes| serde_json::from_slice::<agent::Checkpoint>(bytes).ok());
        let resumed_turns = match (&resume_from, stored.as_deref()) {
            (Some(_), Some(bytes)) => checkpoint_turns(bytes),
            _ => Vec::new(),
        };
        // Turns a crashed attempt completed were never journaled with a terminal entry: this
        // attempt carries their usage so the ledger stays whole.
        let unjournaled = crate::engine::carry::unjournaled(
            engine.transcripts.as_ref(),
            &checkpoint_ref,
            previous_terminal,
            resume_from.as_ref(),
            (&call.model_name, engine.prices.price(&call.model_name).copied()),
        );
        let resumed = resume_from.is_some();
        Ok(Opened { running, checkpoint_ref, resume_from, resumed_turns, resumed, unjournaled })
    }

    /// Runs the call's loop under its deadline and the run's cancellation, then frees its
    /// slots and settles its life.
    pub(super) async fn run_loop(
        &self,
        call: Resolved<'_>,
        opts: &AgentOptions,
        input: LoopInput,
        reservation: &Reservation,
        opened: &mut Opened,
        span: u64,
    ) -> Ran {
        let LoopInput { request, price, slots } = input;
        let engine = &self.run.engine;
        let profile = call.profile;
        let site = (opened.running.key, opened.running.ordinal);
        let resume_from = opened.resume_from.take();
        let resumed_usage = resume_from.as_ref().map(crate::engine::carry::Covered::of);
        let spec = agent::AgentSpec {
            provider: call.provider,
            served_by: call.model_name.clone(),
            request,
            schema: opts.schema.clone(),
            max_turns: opts.max_turns.or_else(|| profile.and_then(|p| p.max_turns)).unwrap_or(32),
            max_tool_calls: opts.max_tool_calls,
            max_retries: opts.retry.map_or(engine.max_retries, |r| r.max_attempts.saturating_sub(1)),
            retry_base: opts.retry.map_or(engine.retry_base, |r| r.initial_backoff),
            backoff: agent::Backoff {
                max: opts.retry.and_then(|r| r.max_backoff).unwrap_or(engine.backoff.max),
                ..engine.backoff
            },
            price,
            fallbacks: declared_fallbacks(
                engine,
                profile,
                &call.model,
                self.run.budget.is_bounded(self.account) && !engine.prices.unpriced_allowed(),
            ),
            tools: call.tools,
            permissions: agent::permissions_for_call(
                &engine.permissions,
                profile.and_then(|p| p.permissions.as_ref()),
            ),
            call_key: site.0,
            resume_from,
            max_context_tokens: opts
                .max_context_tokens
                .or_else(|| profile.and_then(|p| p.max_context_tokens))
                .unwrap_or(agent::DEFAULT_MAX_CONTEXT_TOKENS),
        };
        let CallSlots { turn_slots, permits, provider_permit } = slots;
        let hooks = AccountHooks {
            ctx: self,
            turn_slots,
            approvals: std::sync::OnceLock::new(),
            approvals_site: site,
            checkpoint_ref: opened.checkpoint_ref.clone(),
            reservation: reservation.id(),
            life: std::sync::Mutex::new(CallLife::admitted(resumed_usage)),
            span,
            turn_span: std::sync::atomic::AtomicU64::new(0),
            turns: std::sync::Mutex::new(super::hooks::TurnLog::new(
                std::mem::take(&mut opened.resumed_turns),
                opened.running.seq.0,
            )),
        };
        let events_run = self.run.clone();
        let delta_span = self.span_pair(span);
        let on_delta = move |text: &str| {
            events_run.emit(delta_span, false, || EventKind::AgentDelta { text: text.to_owned() })
        };
        // The call's own cancellation: the run's, or its deadline (which keeps the usage).
        let call_cancel = self.cancel.child_token();
        let outcome = crate::engine::admit::with_deadline(
            opts.timeout,
            &call_cancel,
            agent::run(spec, &hooks, &call_cancel, &on_delta),
        )
        .await;
        drop(provider_permit);
        drop(permits);
        let settlement = hooks.life().settle();
        let turns = std::mem::take(&mut hooks.turns().records);
        Ran { outcome, settlement, checkpoint_ref: hooks.checkpoint_ref, turns }
    }

    /// Settles a reservation the call never used (it stopped before its loop).
    pub(super) fn release(&self, reservation: Reservation) {
        self.run.budget.settle(reservation, Money::ZERO);
    }
}

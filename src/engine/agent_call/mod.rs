//! The agent call: one `agent` of a workflow, from its identity to its terminal entry.
//!
//! Its life is a small state machine (`life.rs`): *admitted* (a reservation held by
//! admission), then *attempt n* for every wire attempt (each through the call's money ledger,
//! `agent::ledger`: reserved by the turn guard, observed as it streams, settled or abandoned),
//! *turn checkpointed* at each turn boundary (the checkpoint holds the completed turns' usage,
//! so a resume counts them spent), and *settled* (the terminal entry durable, the reservation
//! settled less what a resume already counted). This file walks that life: resolve and key
//! the call, serve it from the journal when it can, admit it, run the loop, settle. Beside
//! it: `admission.rs` (admission in branch order), `hooks.rs` (the engine side of the loop),
//! `record.rs` (what its entries say), `resolve.rs` (fallbacks and tools).

mod admission;
mod hooks;
mod life;
mod record;
mod resolve;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::Value;

use self::hooks::AccountHooks;
use self::life::{CallLife, Settlement};
use self::record::{agent_end_event, approvals_segment, full_result};
use self::resolve::{declared_fallbacks, resolve_tools};
use super::ctx::Ctx;
use super::events::EventKind;
use super::identity::{AgentIdentity, ModelIdentity};
use super::options::AgentOptions;
use super::run::Durability;
use crate::agent::{self, AgentEnd};
use crate::error::{Error, ErrorCode};
use crate::journal::{self, Kind, Outcome, Status};
use crate::model::{InvocationRole, ModelRef};
use crate::money::Money;
use crate::provider::{CallMeta, ChatRequest, Message, Part, Role, ToolChoice};
use crate::usage::Usage;

impl Ctx {
    /// Runs an agent: model turns through the resolved provider, under admission, the turn
    /// guard and the stream cut.
    ///
    /// # Replay
    /// Keyed on `{profile, model + effort, prompt or key, schema hash, toolset hash}` in this
    /// scope. A journaled `ok` replays with zero live calls; see the replay disposition for
    /// failures.
    ///
    /// # Errors
    /// Under the strict policy (or `on_error: Throw`): `config` for an unknown profile, model
    /// or provider; `budget_exhausted` when admission, the guard or the cut stops it;
    /// provider and task failures; `cancelled`. Under the lenient policy failures return
    /// null and are itemized in `dropped`.
    pub async fn agent(&self, prompt: &str, opts: AgentOptions) -> Result<Value, Error> {
        self.agent_with(prompt, opts, &[]).await
    }

    /// [`Ctx::agent`] with tool instances beside the registered toolsets it names (the
    /// orchestrator's base toolset, bound to its roster). Their contracts enter the toolset
    /// hash like any tool's.
    pub(crate) async fn agent_with(
        &self,
        prompt: &str,
        opts: AgentOptions,
        extra_tools: &[Arc<dyn crate::agent::Tool>],
    ) -> Result<Value, Error> {
        self.check_stopped()?;
        let engine = self.run.engine.clone();
        let label = opts.label.clone();
        let profile = match &opts.profile {
            Some(name) => match engine.profiles.get(name) {
                Some(profile) => Some(profile),
                None => {
                    let error = Error::config(format!("unknown agent profile {name:?}"));
                    return self.fail(opts.on_error, "agent", label, error);
                }
            },
            None => None,
        };
        let role = opts.role.unwrap_or(InvocationRole::Loop);
        let model = match &opts.model {
            Some(text) => match ModelRef::parse(text) {
                Ok(model) => model,
                Err(e) => return self.fail(opts.on_error, "agent", label, Error::config(e.to_string())),
            },
            None => profile
                .and_then(|p| p.model.clone())
                .or_else(|| engine.defaults.get(&role).cloned())
                .unwrap_or_else(|| engine.default_model.clone()),
        };
        let toolset_names = if opts.tools.is_empty() {
            profile.map(|p| p.tools.clone()).unwrap_or_default()
        } else {
            opts.tools.clone()
        };
        let tools = match resolve_tools(&engine.toolsets, &toolset_names).await {
            Ok(mut tools) => {
                tools.extend(extra_tools.iter().cloned());
                tools
            }
            Err(error) => return self.fail(opts.on_error, "agent", label, error),
        };
        let Some(provider) = engine.providers.get(model.provider()).cloned() else {
            let error = Error::config(format!("model {model} names an unregistered provider"));
            return self.fail(opts.on_error, "agent", label, error);
        };
        let schema_hash = match opts.schema.as_ref().map(journal::schema_hash).transpose() {
            Ok(hash) => hash,
            Err(e) => return self.fail(opts.on_error, "agent", label, Error::validation(e.to_string())),
        };
        // The model's `provider:name` text, spelled once: the identity, the price lookup, the
        // journal and the events all use it.
        let model_name = model.to_string();
        let toolset_hash = crate::agent::toolset_hash(&tools);
        let mut identity = AgentIdentity::new(
            prompt,
            opts.key.as_deref(),
            ModelIdentity { effort: opts.effort.as_deref(), spec: &model_name },
        );
        identity.agent_type = opts.profile.as_deref();
        identity.schema_hash = schema_hash.as_deref();
        identity.toolset_hash = toolset_hash.as_deref();
        let key = identity.key()?;
        let span = self.run.new_span();
        let matched = self.run.lookup(&self.scope, key);
        if matches!(matched.outcome, Outcome::Replay(_) | Outcome::Skip) {
            // The loop will not run: its approval waits are served by the call's result.
            self.run.cover(&self.scope.child(&approvals_segment(key, matched.ordinal)));
        }
        let start_event = || EventKind::AgentStart {
            label: label.clone(),
            agent_type: opts.profile.clone(),
            model: model_name.clone(),
            scope: self.scope.to_string(),
        };
        let mut matched_previous_terminal = false;
        let live_miss = matches!(matched.outcome, Outcome::Live);
        let supersedes = match matched.outcome {
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
                    return self.agent_failed(&opts, label, error, Some((&entry, true)));
                }
                let value = self.replayed(&entry, opts.on_error, "agent", label)?;
                return Ok(if opts.full { full_result(&entry, value) } else { value });
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
                return Ok(Value::Null);
            }
            Outcome::Wait(_) => return Err(Error::internal("an agent entry is journaled as suspended")),
            Outcome::Live => None,
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
                    return self.agent_failed(&opts, label, error, Some((terminal, true)));
                }
                let value = self.replayed(terminal, opts.on_error, "agent", label)?;
                return Ok(if opts.full { full_result(terminal, value) } else { value });
            }
            Outcome::Rerun { supersedes, ref previous } => {
                matched_previous_terminal = previous.is_some();
                Some(supersedes)
            }
        };
        // What the call is keyed on, compactly, so a resume can explain a re-key.
        let summary = journal::IdentitySummary::of_agent(
            prompt,
            opts.key.as_deref(),
            opts.effort.as_deref(),
            schema_hash.as_deref(),
            toolset_hash.as_deref(),
        );
        let rekeyed = if live_miss {
            let live = super::explain::LiveAgent {
                model: &model_name,
                agent_type: opts.profile.as_deref(),
                summary: &summary,
                label: label.as_deref(),
            };
            super::explain::check(&self.run, &self.scope, &live)?
        } else {
            None
        };
        if self.run.dry_run {
            let rekeyed = rekeyed.map(|line| format!("; it re-keys {line}")).unwrap_or_default();
            let error = Error::new(
                ErrorCode::JournalMiss,
                format!("dry run reached a live agent call in scope '{}'{rekeyed}", self.scope),
            );
            return Err(error);
        }

        // Admission: the spawn cap, then a reserve on this context's account.
        let spawned = self.run.spawns.fetch_add(1, Ordering::SeqCst) + 1;
        if spawned > engine.max_spawns {
            self.run
                .emit(self.span_pair(span), false, || EventKind::BudgetExhausted { what: "spawn".into() });
            let error = Error::new(
                ErrorCode::BudgetExhausted,
                format!("the run reached its lifetime cap of {} agent spawns", engine.max_spawns),
            );
            return self.fail(opts.on_error, "agent", label, error);
        }
        let system = opts.system.clone().or_else(|| profile.and_then(|p| p.system.clone()));
        let max_output_tokens = opts.max_output_tokens.or_else(|| profile.and_then(|p| p.max_output_tokens));
        let request = ChatRequest {
            model: model.model().to_owned(),
            system,
            messages: vec![Message { role: Role::User, parts: vec![Part::Text(prompt.to_owned())] }],
            tools: Vec::new(),
            // The orchestrator acts only through its tools (it ends by calling `finish`), so
            // every turn must call one: a model that would answer in prose is held to a tool
            // call (on llama.cpp, grammar-constrained). Not part of the call's identity.
            tool_choice: if role == InvocationRole::Orchestrate {
                ToolChoice::Required
            } else {
                ToolChoice::Auto
            },
            max_output_tokens,
            temperature: None,
            response_schema: opts
                .schema
                .clone()
                .filter(|_| provider.capabilities(model.model()).native_schema),
            effort: opts.effort.clone(),
            meta: CallMeta { label: label.clone(), agent_type: opts.profile.clone() },
        };
        let price = engine.prices.price(&model_name).copied();
        let est_cost = opts.est_cost.or_else(|| profile.and_then(|p| p.est_cost));
        let bounded = self.run.budget.is_bounded(self.account);
        let unpriced_ok = engine.prices.unpriced_allowed();
        let reserve = match super::admit::reserve_for(
            &model_name,
            price.as_ref(),
            &request,
            &tools,
            est_cost,
            bounded,
            unpriced_ok,
        ) {
            Ok(reserve) => reserve,
            Err(error) => {
                self.run.spawns.fetch_sub(1, Ordering::SeqCst);
                return self.fail(opts.on_error, "agent", label, error);
            }
        };
        let reservation = match self.admit(reserve.amount, key, matched.ordinal).await {
            Ok(reservation) => reservation,
            Err(denied) => {
                self.run.spawns.fetch_sub(1, Ordering::SeqCst);
                self.run.emit(self.span_pair(span), false, || EventKind::BudgetExhausted {
                    what: "agent".into(),
                });
                let error = Error::new(
                    ErrorCode::BudgetExhausted,
                    format!(
                        "admission refused: the call reserves {} ({}) but {} is left",
                        denied.requested, reserve.derivation, denied.available
                    ),
                );
                return self.agent_failed(&opts, label, error, None);
            }
        };

        // The scheduler: a run-wide slot, then a per-provider slot where limited. The
        // orchestrator takes them per turn: its tools wait for its children's model calls, so
        // holding a slot across them would starve the children (and deadlock at one slot).
        let provider_slots = match engine.provider_limits.get(model.provider()) {
            Some(_) => self.run.provider_slots.get(model.provider()).cloned(),
            None => None,
        };
        let turn_slots = (role == InvocationRole::Orchestrate)
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
            self.run.budget.settle(reservation, Money::ZERO);
            return Err(self.run.stopped_error());
        }

        let mut running = self.entry(Kind::Agent, Status::Running, key, matched.ordinal);
        running.target = supersedes;
        running.memoize_outcome = opts.memoize_outcome;
        running.label = label.clone();
        running.agent_type = opts.profile.as_deref().map(journal::intern);
        running.role = Some(journal::intern(role.as_str()));
        running.model = Some(journal::intern(&model_name));
        running.identity = Some(Box::new(summary));
        // Deferred: a crash before it is written reruns the call, as it would anyway.
        let running = match self.run.append_one(running, Durability::Lazy) {
            Ok(entry) => entry,
            Err(e) => {
                self.run.budget.settle(reservation, Money::ZERO);
                return Err(e);
            }
        };
        self.run.emit(self.span_pair(span), false, start_event);

        // The checkpoint of the call's first attempt: a rerun continues from its last turn.
        let checkpoint_ref = format!("{}/ckpt/{}", self.run.run_id, supersedes.unwrap_or(running.seq).0);
        let resume_from = match supersedes {
            Some(_) => engine
                .transcripts
                .get(&checkpoint_ref)
                .ok()
                .flatten()
                .and_then(|bytes| serde_json::from_slice::<agent::Checkpoint>(&bytes).ok()),
            None => None,
        };
        // Turns a crashed attempt completed were never journaled with a terminal entry: this
        // attempt carries their usage so the ledger stays whole.
        let unjournaled = super::carry::unjournaled(
            engine.transcripts.as_ref(),
            &checkpoint_ref,
            matched_previous_terminal,
            resume_from.as_ref(),
        );
        let resumed_usage = resume_from.as_ref().map(|c| c.usage);
        let spec = agent::AgentSpec {
            provider,
            served_by: model_name.clone(),
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
            fallbacks: declared_fallbacks(&engine, profile, &model),
            tools,
            permissions: agent::permissions_for_call(
                &engine.permissions,
                profile.and_then(|p| p.permissions.as_ref()),
            ),
            call_key: key,
            resume_from,
            max_context_tokens: opts
                .max_context_tokens
                .or_else(|| profile.and_then(|p| p.max_context_tokens))
                .unwrap_or(agent::DEFAULT_MAX_CONTEXT_TOKENS),
        };
        let hooks = AccountHooks {
            ctx: self,
            turn_slots,
            approvals: std::sync::OnceLock::new(),
            approvals_site: (key, matched.ordinal),
            checkpoint_ref,
            reservation: reservation.id(),
            life: std::sync::Mutex::new(CallLife::admitted(resumed_usage)),
        };
        let events_run = self.run.clone();
        let delta_span = self.span_pair(span);
        let on_delta = move |text: &str| {
            events_run.emit(delta_span, false, || EventKind::AgentDelta { text: text.to_owned() })
        };
        // The call's own cancellation: the run's, or its deadline (which keeps the usage).
        let call_cancel = self.cancel.child_token();
        let outcome = super::admit::with_deadline(
            opts.timeout,
            &call_cancel,
            agent::run(spec, &hooks, &call_cancel, &on_delta),
        )
        .await;
        drop(provider_permit);
        drop(permits);

        let mut outcome = outcome;
        if let Some(extra) = unjournaled {
            outcome.usage += extra;
            outcome.cost = outcome.cost.zip(price).map(|(cost, p)| cost + p.cost(&extra));
            if !outcome.attempts.is_empty() {
                // The carried turns, as an attempt of the requested model, so the split by
                // model still sums to the entry's cost.
                outcome.attempts.insert(
                    0,
                    crate::usage::AttemptRecord {
                        model: model_name.clone(),
                        end: crate::usage::AttemptEnd::Settled,
                        usage: extra,
                        cost: price.map(|p| p.cost(&extra)),
                    },
                );
            }
        }
        let Settlement { wrote_checkpoint, covered, attempts } = hooks.life().settle();
        tracing::debug!(attempts, refused = outcome.refused_attempts, "agent call settled");
        let journaled_ref = hooks.checkpoint_ref.clone();
        let (status, value, error) = match outcome.end {
            AgentEnd::Ok(value) => (Status::Ok, Some(value), None),
            AgentEnd::Error(e) => (Status::Error, None, Some(e)),
            AgentEnd::Limit(e) => (Status::Limit, None, Some(e)),
            AgentEnd::Cancelled(e) => (Status::Cancelled, None, Some(e)),
        };
        let mut terminal = Ctx::terminal_for(&running, status);
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
        if wrote_checkpoint {
            terminal.transcript_ref = Some(hooks.checkpoint_ref);
        }
        let cost = outcome.cost.unwrap_or(Money::ZERO);
        // Awaited: a paid result is durable before it reaches the workflow.
        let written = self.run.append_one_async(terminal).await;
        // Turns carried into this segment were spent when it began: charge only the rest.
        let carried = self.run.budget.take_carried(&journaled_ref);
        self.run.budget.settle(reservation, cost.sub_or_zero(carried));
        let terminal = written?;
        if let Some(covered) = covered
            && !self.run.dry_run
        {
            super::carry::mark_journaled(engine.transcripts.as_ref(), &journaled_ref, &covered);
        }
        self.run.emit(self.span_pair(span), false, || agent_end_event(&terminal));
        self.run.emit_budget(self.span_pair(span));
        match (value, error) {
            (Some(value), _) => Ok(if opts.full { full_result(&terminal, value) } else { value }),
            (None, Some(error)) => {
                if status == Status::Cancelled && self.cancel.is_cancelled() {
                    return Err(self.run.stopped_error());
                }
                self.agent_failed(&opts, label, error, Some((&terminal, false)))
            }
            (None, None) => Err(Error::internal("agent ended with neither value nor error")),
        }
    }
}

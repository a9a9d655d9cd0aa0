//! `Ctx`: the canonical workflow API, a cheap handle on one scope of a run (its scope path,
//! phase, budget account, cancellation and admission ticket). This file holds the handle and
//! its scopes; each verb lives in a room of its own that owns its identity input, its journal
//! records and its replay rules, as an `impl Ctx` block there: `step.rs`, `call.rs`,
//! `child.rs` (`workflow`), `external.rs` (`await_external`), `fanout.rs` (`parallel`,
//! `pipeline`), `budget_reads.rs`, `facts.rs` (`now`, `random`, `uuid`), `phase.rs` (`phase`,
//! `log`), over the shared protocol of `two_phase.rs` and the error policy of `policy.rs`.
//! (The verbs' rooms name `Ctx`; this file names none of them, so the handle sits below its
//! verbs in the import graph.) The agent call is still here: it moves to a room of its own
//! with the money ledger (#23).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::budget::AccountId;
use super::events::EventKind;
use super::identity::{AgentIdentity, ModelIdentity};
use super::options::{AgentOptions, ExternalOptions};
use super::run::{Durability, RunState};
use crate::agent::{self, AgentEnd, BudgetHooks};
use crate::error::{Error, ErrorCode};
use crate::journal::{self, ContentKey, Entry, Kind, Outcome, ScopePath, Segment, Seq, Status};
use crate::model::{InvocationRole, ModelRef};
use crate::money::Money;
use crate::provider::{CallMeta, ChatRequest, Message, Part, Role, ToolChoice};
use crate::store::RunId;
use crate::usage::Usage;

/// Structural counters of one scope: which `parallel` site and which child-workflow call
/// comes next. Shared by every clone of a `Ctx` in that scope.
#[derive(Debug, Default)]
pub(crate) struct ScopeCounters {
    parallel_sites: AtomicU32,
    pub(super) children: Mutex<HashMap<String, u32>>,
    /// Uses of each site label in this scope.
    labels: Mutex<HashMap<String, u32>>,
    /// Pipelines begun in this scope (they key their fail-fast decisions; their items'
    /// scopes do not depend on it).
    pipelines: AtomicU32,
}

/// The workflow's view of its run: one scope of it, with its phase, budget account and
/// cancellation. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Ctx {
    pub(crate) run: Arc<RunState>,
    pub(crate) scope: ScopePath,
    pub(super) counters: Arc<ScopeCounters>,
    pub(super) phase: Option<Arc<str>>,
    pub(crate) account: AccountId,
    pub(super) span: u64,
    pub(super) parent_span: Option<u64>,
    pub(crate) cancel: CancellationToken,
    pub(super) depth: u32,
    /// This context's place in its fan-out's admission order (`None` outside fan-outs).
    pub(crate) admission: Option<super::admission::Ticket>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("run_id", &self.run.run_id)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl Ctx {
    pub(crate) fn root(run: Arc<RunState>) -> Ctx {
        let span = run.root_span();
        let account = run.budget.root();
        let cancel = run.cancel.child_token();
        Ctx {
            run,
            scope: ScopePath::root(),
            counters: Arc::default(),
            phase: None,
            account,
            span,
            parent_span: None,
            cancel,
            depth: 0,
            admission: None,
        }
    }

    /// A context for a nested scope (a branch, a pipeline item, a child workflow).
    pub(crate) fn nested(&self, segment: &Segment, cancel: CancellationToken, account: AccountId) -> Ctx {
        Ctx {
            run: self.run.clone(),
            scope: self.scope.child(segment),
            counters: Arc::default(),
            phase: self.phase.clone(),
            account,
            span: self.run.new_span(),
            parent_span: Some(self.span),
            cancel,
            depth: self.depth,
            admission: self.admission.clone(),
        }
    }

    /// The next `parallel` site index of this scope.
    pub(crate) fn next_parallel_site(&self) -> u32 {
        self.counters.parallel_sites.fetch_add(1, Ordering::Relaxed)
    }

    /// The next pipeline's index in this scope.
    pub(crate) fn next_pipeline(&self) -> u32 {
        self.counters.pipelines.fetch_add(1, Ordering::Relaxed)
    }

    /// The context a labelled site runs in: scope `at:LABEL:n` (the `n`-th use of the label
    /// here) with fresh counters, so the site's identity depends on its label, not on how
    /// many unlabelled sites came before it. `None` without a label.
    ///
    /// # Errors
    /// `config` for a label with `/` or `:`, empty, or longer than 64 characters.
    pub(crate) fn labelled_site(&self, label: Option<&str>) -> Result<Option<Ctx>, Error> {
        let Some(label) = label else { return Ok(None) };
        if !Segment::valid_label(label) {
            return Err(Error::config(format!(
                "site label {label:?} must be 1 to 64 characters without '/' or ':'"
            )));
        }
        let index = {
            let mut labels = self.counters.labels.lock().unwrap_or_else(|p| p.into_inner());
            let slot = labels.entry(label.to_owned()).or_insert(0);
            let index = *slot;
            *slot += 1;
            index
        };
        let segment = Segment::Site { label: label.to_owned(), index };
        let mut site = self.nested(&segment, self.cancel.clone(), self.account);
        site.span = self.span;
        site.parent_span = self.parent_span;
        Ok(Some(site))
    }

    /// The run's id.
    pub fn run_id(&self) -> &RunId {
        &self.run.run_id
    }

    /// This context's scope path.
    pub fn scope(&self) -> &ScopePath {
        &self.scope
    }

    /// Fails fast when the run was cancelled, suspended or ran past its deadline.
    pub(crate) fn check_stopped(&self) -> Result<(), Error> {
        if self.cancel.is_cancelled() { Err(self.run.stopped_error()) } else { Ok(()) }
    }

    /// A permit from `slots`, or `None` once this context is cancelled. A free slot is
    /// taken at once, without setting up the wait.
    pub(super) async fn slot(
        &self,
        slots: &Arc<tokio::sync::Semaphore>,
    ) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if let Ok(permit) = slots.clone().try_acquire_owned() {
            return Some(permit);
        }
        tokio::select! {
            permit = slots.clone().acquire_owned() => permit.ok(),
            _ = self.cancel.cancelled() => None,
        }
    }

    pub(super) fn span_pair(&self, span: u64) -> (u64, Option<u64>) {
        (span, Some(self.span))
    }

    pub(super) fn entry(&self, kind: Kind, status: Status, key: ContentKey, ordinal: u32) -> Entry {
        let mut entry = Entry::new(Seq(0), kind, status, self.scope.clone(), key, ordinal);
        entry.phase = self.phase.clone();
        entry
    }

    /// A terminal entry for a dispatch, carrying its cosmetic fields.
    pub(super) fn terminal_for(running: &Entry, status: Status) -> Entry {
        let mut entry =
            Entry::new(Seq(0), running.kind, status, running.scope.clone(), running.key, running.ordinal);
        entry.target = Some(running.seq);
        entry.label = running.label.clone();
        entry.phase = running.phase.clone();
        entry.agent_type = running.agent_type.clone();
        entry.role = running.role.clone();
        entry.model = running.model.clone();
        entry.name = running.name.clone();
        entry.memoize_outcome = running.memoize_outcome;
        entry
    }

    // ---- agent --------------------------------------------------------------------------

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
            wrote_checkpoint: Default::default(),
            reservation: reservation.id(),
            checkpoint_usage: std::sync::Mutex::new(resumed_usage),
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
        let wrote_checkpoint = hooks.wrote_checkpoint.load(Ordering::Relaxed);
        let journaled_ref = hooks.checkpoint_ref.clone();
        let covered = *hooks.checkpoint_usage.lock().unwrap_or_else(|p| p.into_inner());
        let (status, value, error) = match outcome.end {
            AgentEnd::Ok(value) => (Status::Ok, Some(value), None),
            AgentEnd::Error(e) => (Status::Error, None, Some(e)),
            AgentEnd::Limit(e) => (Status::Limit, None, Some(e)),
            AgentEnd::Cancelled(e) => (Status::Cancelled, None, Some(e)),
        };
        let mut terminal = Ctx::terminal_for(&running, status);
        terminal.set_value(value.as_ref());
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

/// The scope of an agent call's approval waits: `at:agent-KEY:ordinal`, from the call's
/// identity (KEY: the first 16 hex digits of its content key).
fn approvals_segment(key: ContentKey, ordinal: u32) -> Segment {
    let mut hex = key.to_hex();
    hex.truncate(16);
    Segment::Site { label: format!("agent-{hex}"), index: ordinal }
}

fn agent_end_event(entry: &Entry) -> EventKind {
    EventKind::AgentEnd {
        status: entry.status.as_str().into(),
        usage: entry.usage.unwrap_or_default(),
        cost: entry.cost,
        served_by: entry.served_by.as_deref().map(str::to_owned),
        error: entry.error.as_ref().map(|e| e.code),
    }
}

impl Ctx {
    /// A failed agent call: with `result: "full"` its record (status, typed error, usage and
    /// cost of what it consumed) for the workflow to branch on; otherwise the error policy.
    /// A stopped run (cancellation, a dry run's miss) always raises.
    fn agent_failed(
        &self,
        opts: &AgentOptions,
        label: Option<String>,
        error: Error,
        entry: Option<(&Entry, bool)>,
    ) -> Result<Value, Error> {
        if !opts.full || matches!(error.code, ErrorCode::Cancelled | ErrorCode::JournalMiss) {
            return self.fail(opts.on_error, "agent", label, error);
        }
        if error.code == ErrorCode::BudgetExhausted {
            self.run.mark_exhausted();
        }
        let mut record = match entry {
            Some((entry, _)) => full_result(entry, Value::Null),
            None => json!({
                "value": null,
                "status": "limit",
                "usage": Usage::default(),
                "cost_nano_usd": 0,
                "served_by": null,
                "finish_reason": null,
            }),
        };
        record["error"] = json!({ "code": error.code, "message": error.message });
        Ok(record)
    }
}

/// The record `result: "full"` returns. It holds only what the journal holds, so a replay
/// returns the same record: whether the call was served from the journal is not in it (a
/// script could branch on that, and its value would differ on replay).
fn full_result(entry: &Entry, value: Value) -> Value {
    json!({
        "value": value,
        "status": entry.status.as_str(),
        "usage": entry.usage.unwrap_or_default(),
        "cost_nano_usd": entry.cost,
        "served_by": entry.served_by,
        "finish_reason": entry.finish_reason,
    })
}

/// The engine side of one agent call's loop: its account's path in the run's budget tree,
/// its checkpoint, and approvals as waits on external input.
struct AccountHooks<'a> {
    ctx: &'a Ctx,
    /// The run-wide and provider slots the call takes per turn (the orchestrator's).
    turn_slots: Option<(Arc<tokio::sync::Semaphore>, Option<Arc<tokio::sync::Semaphore>>)>,
    /// Where the call's approval waits are journaled: a scope of their own, covered when the
    /// call replays whole. Made at the call's first approval (most calls ask none).
    approvals: std::sync::OnceLock<Ctx>,
    /// The call's key and ordinal, which name that scope.
    approvals_site: (ContentKey, u32),
    checkpoint_ref: String,
    wrote_checkpoint: std::sync::atomic::AtomicBool,
    /// The call's live reservation: the guard raises its hold, the cut records in-flight spend.
    reservation: super::budget::ReservationId,
    /// The usage the latest checkpoint of the call holds (its completed turns, all attempts).
    checkpoint_usage: std::sync::Mutex<Option<Usage>>,
}

impl BudgetHooks for AccountHooks<'_> {
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

    fn checkpoint(&self, state: &agent::Checkpoint) {
        if self.ctx.run.dry_run {
            return;
        }
        // A checkpoint is found through the call's `running` entry (written lazily): the
        // first one waits for that entry to be durable, or a crash would orphan it and a
        // resume would pay again for the turns it holds.
        if !self.wrote_checkpoint.load(Ordering::Relaxed) && self.ctx.run.flush().is_err() {
            return;
        }
        // A checkpoint that fails to persist costs at most a repeated turn on rerun.
        if let Ok(bytes) = serde_json::to_vec(state)
            && self.ctx.run.engine.transcripts.put(&self.checkpoint_ref, &bytes).is_ok()
        {
            self.wrote_checkpoint.store(true, Ordering::Relaxed);
            *self.checkpoint_usage.lock().unwrap_or_else(|p| p.into_inner()) = Some(state.usage);
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
        // Journaled in the call's own scope, with its events (`tool_call.rs`).
        Box::pin(self.own_scope().run_tool(tool, id, args))
    }
}

impl AccountHooks<'_> {
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

/// The fallbacks of a call: its profile's, else the engine's for the requested model; a
/// fallback whose provider is not registered is skipped.
fn declared_fallbacks(
    engine: &super::EngineInner,
    profile: Option<&super::AgentProfile>,
    model: &ModelRef,
) -> Vec<agent::Fallback> {
    let declared = match profile.map(|p| &p.fallbacks).filter(|f| !f.is_empty()) {
        Some(list) => list.clone(),
        None => engine.fallbacks.get(model).cloned().unwrap_or_default(),
    };
    declared
        .into_iter()
        .filter_map(|fallback| {
            let provider = engine.providers.get(fallback.provider())?.clone();
            Some(agent::Fallback {
                provider,
                served_by: fallback.to_string(),
                model: fallback.model().to_owned(),
                price: engine.prices.price(&fallback.to_string()).copied(),
            })
        })
        .collect()
}

/// The tools of the named toolsets (an MCP server's listed on first use), refusing unknown
/// toolsets and duplicate tool names.
async fn resolve_tools(
    toolsets: &HashMap<String, crate::agent::Toolset>,
    names: &[String],
) -> Result<Vec<Arc<dyn crate::agent::Tool>>, Error> {
    let mut tools: Vec<Arc<dyn crate::agent::Tool>> = Vec::new();
    for name in names {
        let Some(toolset) = toolsets.get(name) else {
            let mut known: Vec<&str> = toolsets.keys().map(String::as_str).collect();
            known.sort();
            return Err(Error::config(format!(
                "unknown toolset {name:?} (registered: {})",
                known.join(", ")
            )));
        };
        for tool in toolset.resolve().await? {
            if tools.iter().any(|t| t.name() == tool.name()) {
                return Err(Error::config(format!("tool {:?} is offered by two toolsets", tool.name())));
            }
            tools.push(tool);
        }
    }
    Ok(tools)
}

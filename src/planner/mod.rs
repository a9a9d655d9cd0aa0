//! The planner: a model writes a whole workflow script once, before anything executes; each
//! draft is linted and compiled by its dialect, error diagnostics go back to the model as JSON
//! for repair, and the accepted script (frozen source a person can read, diff and re-run) runs
//! in the sandbox under its own budget.
//!
//! - [`plan`] runs the planning conversation: the `plan` role writes a draft against the
//!   dialect's API card and the [`profile_card`]; the first fenced code block is extracted
//!   ([`extract_script`]); `ScriptDialect::check` lints and compiles it; errors go back in a
//!   repair prompt, up to `repair_rounds` times. A draft cut off by the output limit stops at
//!   once. The result is the accepted source, or a typed [`PlanError::Rejected`]
//!   (`script_rejected`) carrying every draft's diagnostics.
//! - The planning conversation is an ordinary journaled run (a Rust closure workflow) whose id
//!   is [`planning_run_id`]: `plan-` plus a hash prefix of the goal and every planning input.
//!   Planning the same goal again replays the paid drafts: a settled planning run is served
//!   from its journal with no provider call.
//! - [`run_planned`] plans, then runs the accepted script under its own ceiling, with the
//!   lenient error policy of planner-written scripts; the source is stored with the run, so a
//!   resume needs no file.
//!
//! The planner knows dialects only through [`ScriptDialect`]: any registered dialect plugs in.

mod card;
mod compact;
mod extract;
mod fit;
mod options;
mod rejection;
mod repair;
mod stored;

use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::{Value, json};

pub use card::profile_card;
pub use compact::compact_card;
pub use extract::extract_script;
use fit::{UNSIZED_SHOWN, cut_off, draft_cap, estimate_tokens};
pub use options::{CardChoice, PlanOptions};
#[cfg(feature = "cli")]
pub(crate) use options::{DEFAULT_DIALECT, DEFAULT_MAX_OUTPUT_TOKENS};
pub use rejection::{DraftReport, PlanError, RejectCause, Rejection};
pub use repair::repair_prompt;
pub(crate) use repair::{PLANNER_RULES, first_prompt, repair_prompt_shown, system_prompt};
#[cfg(any(test, feature = "cli"))]
pub(crate) use stored::stored_planning;
use stored::stored_ref;
pub(crate) use stored::{StoredOptions, StoredPlanning};

use crate::engine::{
    AgentOptions, Ctx, Engine, OnError, ResumeOptions, RunHandle, RunOptions, RunOutcome, Script,
    ScriptDialect, Workflow,
};
use crate::error::{Error, ErrorCode};
use crate::model::{InvocationRole, ModelRef};
use crate::money::Money;
use crate::script::bound::{CostBound, cost_bound};
use crate::script::{Diagnostic, LintContext, Severity};
use crate::store::{RunId, RunStatus};

/// The most repair rounds a plan may ask for: each round is a paid model call.
pub(crate) const MAX_REPAIR_ROUNDS: u32 = 10;

/// An accepted plan.
#[derive(Debug, Clone, Serialize)]
pub struct PlanResult {
    /// The accepted script's source.
    pub source: String,
    /// Its dialect.
    pub dialect: String,
    /// The accepted draft's warnings (it has no errors).
    pub warnings: Vec<Diagnostic>,
    /// How many drafts the conversation took (1 when the first was accepted).
    pub drafts: u32,
    /// The script's static cost bound with the options' `args`: the most agent calls and their
    /// worst-case cost, or why there is no bound.
    pub cost_bound: CostBound,
    /// The planning run's id.
    pub planning_run_id: RunId,
    /// The planning run's outcome: its cost, usage, and how its calls were served (a
    /// re-plan is all replays).
    #[serde(skip)]
    pub planning: RunOutcome,
}

/// Everything a planning conversation depends on, resolved from the engine and the options.
#[derive(Debug)]
struct Inputs {
    goal: String,
    dialect: Arc<dyn ScriptDialect>,
    lint: LintContext,
    system: String,
    /// The system prompt with the compact card, to fall back to once when a draft does not
    /// fit the model's context (only when the full card was chosen automatically).
    fallback: Option<String>,
    /// The planner model's context window, when known.
    context_window: Option<u64>,
    model: String,
    repair_rounds: u32,
    max_output_tokens: u32,
    budget_usd: Option<f64>,
}

impl Inputs {
    fn resolve(engine: &Engine, goal: &str, options: &PlanOptions) -> Result<Inputs, Error> {
        if options.repair_rounds > MAX_REPAIR_ROUNDS {
            return Err(Error::config(format!(
                "repair_rounds {} is more than the {MAX_REPAIR_ROUNDS} allowed (each round is a paid model call)",
                options.repair_rounds
            )));
        }
        if options.max_output_tokens == 0 {
            return Err(Error::config("max_output_tokens must be positive"));
        }
        if let Some(budget) = options.budget_usd {
            crate::money::Money::from_usd(budget)
                .map_err(|e| Error::config(format!("invalid planning budget: {e}")))?;
        }
        if goal.trim().is_empty() {
            return Err(Error::config("the goal is empty"));
        }
        let dialect = engine.dialect(&options.dialect)?;
        let inner = engine.inner();
        let model = planner_model(engine, options)?;
        let rules = options.rules.as_deref().unwrap_or(PLANNER_RULES);
        let profiles = profile_card(engine);
        let full = system_prompt(rules, dialect.name(), dialect.card(), &profiles);
        let compact = || system_prompt(rules, dialect.name(), &compact_card(dialect.card()), &profiles);
        let context_window =
            inner.providers.get(model.provider()).and_then(|provider| provider.context_window(model.model()));
        let (system, fallback) = match options.card {
            CardChoice::Full => (full, None),
            CardChoice::Compact => (compact(), None),
            // The full card would take more than half a small window: leave the room to the
            // goal, a repair round and the draft.
            CardChoice::Auto if context_window.is_some_and(|window| estimate_tokens(&full) > window / 2) => {
                (compact(), None)
            }
            CardChoice::Auto => (full, Some(compact())),
        };
        Ok(Inputs {
            goal: goal.to_owned(),
            lint: LintContext::from(engine.registered()),
            dialect,
            system,
            fallback,
            context_window,
            model: model.to_string(),
            repair_rounds: options.repair_rounds,
            max_output_tokens: options.max_output_tokens,
            budget_usd: options.budget_usd,
        })
    }

    /// `plan-` and the first 20 hex digits of the sha256 of every input, canonically encoded.
    fn run_id(&self) -> Result<RunId, Error> {
        let budget = self.budget_usd.map(|usd| crate::money::Money::from_usd(usd).map(|m| m.to_string()));
        let budget =
            budget.transpose().map_err(|e| Error::config(format!("invalid planning budget: {e}")))?;
        let inputs = json!({
            "planner": 1,
            "goal": self.goal,
            "dialect": self.dialect.name(),
            "model": self.model,
            "repair_rounds": self.repair_rounds,
            "max_output_tokens": self.max_output_tokens,
            "budget": budget,
            "system": self.system,
        });
        let mut inputs = inputs;
        if let Some(window) = self.context_window {
            // Only when known, so the ids of plans for models of unknown window stay as they were.
            inputs["context_window"] = json!(window);
        }
        let canonical =
            crate::journal::canonical_json(&inputs).map_err(|e| Error::internal(e.to_string()))?;
        let hex = crate::journal::content_key_of_canonical(&canonical).to_hex();
        RunId::parse(&format!("plan-{}", &hex[..20])).map_err(|e| Error::internal(e.to_string()))
    }
}

/// The planning run id `plan` would use for `goal` under `options` on `engine`: `plan-` and a
/// hash prefix of the goal and every planning input (dialect, model, repair rounds, output cap,
/// ceiling, and the system prompt with both cards).
///
/// # Errors
/// `config` for options [`plan`] would refuse.
pub fn planning_run_id(engine: &Engine, goal: &str, options: &PlanOptions) -> Result<RunId, Error> {
    Inputs::resolve(engine, goal, options)?.run_id()
}

/// How a planning conversation ended, as the workflow saw it.
#[derive(Debug, Clone)]
enum Verdict {
    Accepted { source: String, warnings: Vec<Diagnostic>, drafts: u32 },
    Rejected { cause: RejectCause, drafts: Vec<DraftReport> },
}

/// A started planning conversation: its run's handle, and how to read its verdict.
#[derive(Debug)]
pub struct Planning {
    handle: RunHandle,
    verdict: PendingVerdict,
    model: String,
}

/// How to read a planning conversation's verdict once its run has settled.
#[derive(Debug)]
pub struct PendingVerdict {
    verdict: Arc<Mutex<Option<Verdict>>>,
    run_id: RunId,
    dialect: Arc<dyn ScriptDialect>,
    engine: Engine,
    args: Value,
}

/// The model a plan with `options` drafts with: `options.model`, else the engine's `plan`
/// role model, else its default model.
///
/// # Errors
/// `config` for a model that does not parse or names an unregistered provider.
pub(crate) fn planner_model(engine: &Engine, options: &PlanOptions) -> Result<ModelRef, Error> {
    let inner = engine.inner();
    let model = match &options.model {
        Some(text) => {
            ModelRef::parse(text).map_err(|e| Error::config(format!("invalid planner model: {e}")))?
        }
        None => {
            inner.defaults.get(&InvocationRole::Plan).cloned().unwrap_or_else(|| inner.default_model.clone())
        }
    };
    if !inner.providers.contains_key(model.provider()) {
        return Err(Error::config(format!("planner model {model} names an unregistered provider")));
    }
    Ok(model)
}

impl Planning {
    /// Starts (or, for a goal planned before, replays) the planning conversation. Options are
    /// validated first: nothing is written or dispatched for a refused one.
    ///
    /// # Errors
    /// [`PlanError::Invalid`] for refused options; [`PlanError::Planning`] when the planning
    /// run cannot start (another process drives it: `run_busy`).
    pub fn start(engine: &Engine, goal: &str, options: &PlanOptions) -> Result<Planning, PlanError> {
        Planning::begin(engine, goal, options, false)
    }

    /// Like [`Planning::start`], but a settled conversation is resumed live: what [`plan`] does
    /// when replaying it missed (a newer cairn whose diagnostics changed a repair prompt), so
    /// the changed drafts are paid for and the rest still replay.
    ///
    /// # Errors
    /// As [`Planning::start`].
    pub fn start_live(engine: &Engine, goal: &str, options: &PlanOptions) -> Result<Planning, PlanError> {
        Planning::begin(engine, goal, options, true)
    }

    fn begin(engine: &Engine, goal: &str, options: &PlanOptions, live: bool) -> Result<Planning, PlanError> {
        let inputs = Inputs::resolve(engine, goal, options).map_err(PlanError::Invalid)?;
        let run_id = inputs.run_id().map_err(PlanError::Invalid)?;
        let dialect = inputs.dialect.clone();
        let model = inputs.model.clone();
        let verdict = Arc::new(Mutex::new(None));
        let workflow = conversation(Arc::new(inputs), verdict.clone());
        let started = |e: Error| {
            if e.code == ErrorCode::Config {
                PlanError::Invalid(e)
            } else {
                PlanError::Planning { planning_run_id: run_id.clone(), status: RunStatus::Error, error: e }
            }
        };
        let existing = engine.journal_store().get_meta(&run_id).map_err(|e| started(e.into()))?;
        let handle = match existing.map(|meta| meta.status) {
            None => {
                // What `cairn resume plan-…` needs to plan again after a kill.
                let stored = StoredPlanning {
                    goal: goal.to_owned(),
                    options: Some(StoredOptions::of(options, &model)),
                };
                let bytes =
                    serde_json::to_vec(&stored).map_err(|e| started(Error::internal(e.to_string())))?;
                engine
                    .inner()
                    .transcripts
                    .put(&stored_ref(&run_id), &bytes)
                    .map_err(|e| started(e.into()))?;
                let options = RunOptions {
                    budget_usd: options.budget_usd,
                    run_id: Some(run_id.clone()),
                    tags: vec!["plan".into()],
                    ..RunOptions::default()
                };
                engine.run(&workflow, json!({ "goal": goal }), options).map_err(started)?
            }
            // A settled conversation is served from its journal: every draft replays, and
            // nothing is written.
            Some(RunStatus::Ok) if !live => engine
                .resume(
                    &run_id,
                    ResumeOptions {
                        workflow: Some(workflow),
                        dry_run: true,
                        reproduce: true,
                        ..Default::default()
                    },
                )
                .map_err(started)?,
            // Rejected, exhausted, failed or cut short: paid drafts replay, the rest run live,
            // under the ceiling recorded when the conversation began.
            // A draft whose prompt changed since it was paid (a newer linter's diagnostics in its
            // repair prompt) is a new draft: it is paid for, and the unchanged ones replay.
            Some(_) => engine
                .resume(
                    &run_id,
                    ResumeOptions { workflow: Some(workflow), accept_rekey: true, ..Default::default() },
                )
                .map_err(started)?,
        };
        let args = options.args.clone().unwrap_or(Value::Null);
        let verdict = PendingVerdict { verdict, run_id, dialect, engine: engine.clone(), args };
        Ok(Planning { handle, verdict, model })
    }

    /// The planning run's handle (its events, cancellation).
    pub fn handle(&self) -> &RunHandle {
        &self.handle
    }

    /// The planning run's id.
    pub fn run_id(&self) -> &RunId {
        &self.verdict.run_id
    }

    /// The planner's model, as `provider:model`.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The run's handle, to follow the run yourself, and the verdict to read once it settles.
    pub fn into_parts(self) -> (RunHandle, PendingVerdict) {
        (self.handle, self.verdict)
    }

    /// Waits for the conversation to end and reads its verdict.
    ///
    /// # Errors
    /// See [`plan`].
    pub async fn finish(self) -> Result<PlanResult, PlanError> {
        let outcome = self.handle.result().await;
        self.verdict.read(outcome)
    }
}

impl PendingVerdict {
    /// The planning run's id.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The verdict of the conversation whose run settled with `outcome`.
    ///
    /// # Errors
    /// See [`plan`].
    pub fn read(self, outcome: Result<RunOutcome, Error>) -> Result<PlanResult, PlanError> {
        let run_id = self.run_id;
        let outcome = outcome.map_err(|error| PlanError::Planning {
            planning_run_id: run_id.clone(),
            status: RunStatus::Error,
            error,
        })?;
        let verdict = self.verdict.lock().map(|mut v| v.take()).unwrap_or(None);
        match (verdict, outcome.status) {
            (Some(Verdict::Accepted { source, warnings, drafts }), RunStatus::Ok) => Ok(PlanResult {
                cost_bound: cost_bound(&self.engine, self.dialect.as_ref(), &source, &self.args, None),
                source,
                dialect: self.dialect.name().to_owned(),
                warnings,
                drafts,
                planning_run_id: run_id,
                planning: outcome,
            }),
            (Some(Verdict::Rejected { cause, drafts }), _)
                if outcome.error.as_ref().is_some_and(|e| e.code == ErrorCode::ScriptRejected) =>
            {
                Err(PlanError::Rejected(Box::new(Rejection {
                    planning_run_id: run_id,
                    dialect: self.dialect.name().to_owned(),
                    cause,
                    drafts,
                })))
            }
            (_, status) => Err(PlanError::Planning {
                planning_run_id: run_id,
                status,
                error: outcome.error.clone().unwrap_or_else(|| {
                    Error::internal(format!("the planning run settled {status} without a verdict"))
                }),
            }),
        }
    }
}

/// Plans a workflow for `goal`: the `plan` role writes drafts until one passes the dialect's
/// lint and compile, or the repair rounds run out.
///
/// Planning the same goal with the same inputs again replays the journaled conversation: no
/// draft is paid for twice, and a settled conversation makes no provider call at all.
///
/// ```
/// use std::sync::Arc;
/// use cairn::testing::{FakeProvider, FakeScript};
/// use cairn::{Engine, MemoryStore, ModelRef, PlanOptions, plan};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// // A scripted planner: a JavaScript draft first, then Rhai after reading the diagnostics.
/// let planner = FakeProvider::new()
///     .on_any(FakeScript::text("```js\nconst x = await agent('hi');\n```").then_text("```rhai\nagent(\"hi\")\n```"));
/// let store = Arc::new(MemoryStore::new());
/// let engine = Engine::builder(store)
///     .provider(Arc::new(planner.clone()))
///     .default_model(ModelRef::parse("fake:planner").unwrap())
///     .build()
///     .unwrap();
/// let planned = plan(&engine, "Say hi", PlanOptions::default()).await.unwrap();
/// assert_eq!((planned.source.as_str(), planned.drafts), ("agent(\"hi\")\n", 2));
///
/// // The same goal again replays the journaled conversation: no provider call.
/// let again = plan(&engine, "Say hi", PlanOptions::default()).await.unwrap();
/// assert_eq!((again.source, planner.call_count()), (planned.source, 2));
/// # });
/// ```
///
/// # Errors
/// - [`PlanError::Invalid`] (`config`) for refused options, before anything is dispatched;
/// - [`PlanError::Rejected`] (`script_rejected`) when no draft was accepted after
///   `1 + repair_rounds` drafts, or a draft was cut off by the output limit;
/// - [`PlanError::Planning`] when the planning run ended otherwise (its ceiling, a provider
///   failure, cancellation, another process driving it).
pub async fn plan(engine: &Engine, goal: &str, options: PlanOptions) -> Result<PlanResult, PlanError> {
    match Planning::start(engine, goal, &options)?.finish().await {
        Err(error) if error.is_replay_miss() => Planning::start_live(engine, goal, &options)?.finish().await,
        other => other,
    }
}

/// Options of [`run_planned`]: each leg under its own ceiling.
#[derive(Debug, Clone, Default)]
pub struct RunPlannedOptions {
    /// The planning conversation's options (its ceiling is `plan.budget_usd`).
    pub plan: PlanOptions,
    /// The run of the accepted script (its ceiling is `run.budget_usd`); it always runs under
    /// the lenient error policy.
    pub run: RunOptions,
    /// Run the script even when its cost bound exceeds the run's ceiling (the ceiling still
    /// holds: the run settles `exhausted` when it is reached).
    pub force: bool,
}

/// A planned and executed workflow.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The accepted plan.
    pub plan: PlanResult,
    /// How its run settled.
    pub outcome: RunOutcome,
}

/// Starts the run of an accepted plan: a planner-written script (lenient error policy) whose
/// source is stored with the run, so `Engine::resume` re-executes exactly that source.
///
/// Unless `force`, a script whose cost bound with `args` exceeds the run's ceiling (the
/// options', else the engine's default) is refused before anything is written.
///
/// # Errors
/// [`PlanError::OverCeiling`] as above; [`PlanError::Run`] for invalid run options or a
/// source the dialect refuses.
pub fn start_planned(
    engine: &Engine,
    plan: &PlanResult,
    args: Value,
    options: RunOptions,
    force: bool,
) -> Result<RunHandle, PlanError> {
    if !force {
        let ceiling = match options.budget_usd {
            Some(usd) => Some(
                Money::from_usd(usd)
                    .map_err(|e| PlanError::Run(Error::config(format!("invalid budget: {e}"))))?,
            ),
            None => engine.inner().default_budget,
        };
        if let Some(ceiling) = ceiling {
            let dialect = engine.dialect(&plan.dialect).map_err(PlanError::Run)?;
            let bound = cost_bound(engine, dialect.as_ref(), &plan.source, &args, Some(ceiling));
            if bound.exceeds(ceiling) {
                return Err(PlanError::OverCeiling { bound, ceiling });
            }
        }
    }
    let script = Script::new(&plan.dialect, "planned", &plan.source).planner_written();
    engine.run_script(&script, args, options).map_err(PlanError::Run)
}

/// Plans `goal`, then runs the accepted script with `args`: each leg under its own ceiling.
///
/// # Errors
/// Whatever [`plan`] returns; [`PlanError::Run`] when the accepted script cannot start.
pub async fn run_planned(
    engine: &Engine,
    goal: &str,
    args: Value,
    options: RunPlannedOptions,
) -> Result<Planned, PlanError> {
    let plan_options = PlanOptions { args: Some(args.clone()), ..options.plan };
    let plan = plan(engine, goal, plan_options).await?;
    let handle = start_planned(engine, &plan, args, options.run, options.force)?;
    let outcome = handle.result().await.map_err(PlanError::Run)?;
    Ok(Planned { plan, outcome })
}

/// The planning conversation as a closure workflow.
fn conversation(inputs: Arc<Inputs>, verdict: Arc<Mutex<Option<Verdict>>>) -> Workflow {
    Workflow::new("plan", move |ctx, _args| {
        let inputs = inputs.clone();
        let verdict = verdict.clone();
        async move {
            let (result, reached) = converse(&ctx, &inputs).await?;
            if let Ok(mut slot) = verdict.lock() {
                *slot = Some(reached);
            }
            result
        }
    })
}

/// The drafting loop. Returns the workflow's result and the verdict; an `Err` from a draft
/// call (the ceiling, the provider, cancellation) ends the run with no verdict.
async fn converse(ctx: &Ctx, inputs: &Inputs) -> Result<(Result<Value, Error>, Verdict), Error> {
    let dialect = inputs.dialect.name();
    let mut prompt = first_prompt(&inputs.goal, dialect);
    let mut drafts: Vec<DraftReport> = Vec::new();
    let mut system = inputs.system.as_str();
    let mut fallback = inputs.fallback.as_deref();
    // Whether the compact card came in because the full card's stream broke off.
    let mut broke_off = false;
    let mut round = 0;
    while round <= inputs.repair_rounds {
        let number = round + 1;
        let reply = match draft_cap(inputs.context_window, inputs.max_output_tokens, system, &prompt) {
            Ok(max_output_tokens) => {
                ctx.agent(
                    &prompt,
                    AgentOptions {
                        label: Some(format!("draft {number}")),
                        model: Some(inputs.model.clone()),
                        system: Some(system.to_owned()),
                        role: Some(InvocationRole::Plan),
                        max_output_tokens: Some(max_output_tokens),
                        max_turns: Some(1),
                        on_error: Some(OnError::Throw),
                        full: true,
                        // A draft cut off at the output limit ends `limit`: re-planning serves
                        // that verdict from the journal instead of paying for the draft again.
                        memoize_outcome: true,
                        ..AgentOptions::default()
                    },
                )
                .await?
            }
            Err(overflow) => json!({ "status": "error", "error": overflow }),
        };
        // A draft cut off at the output limit ends the call `limit` with its partial text: a
        // draft like any other, judged truncated below.
        let cut = reply["status"] == "limit" && reply["finish_reason"] == "length";
        if reply["status"] != "ok" && !cut {
            let overflow = reply["error"]["code"] == json!(ErrorCode::ContextOverflow);
            // A server that cannot say "too long" in a stream ends it early instead (llama.cpp
            // answers an over-long streamed request with an empty event stream): a `transport`
            // failure, its retries spent, is treated as a possible overflow too.
            let maybe_overflow = reply["error"]["code"] == json!(ErrorCode::Transport);
            if overflow || maybe_overflow {
                // Once, the same draft again with the compact card.
                if let Some(compact) = fallback.take() {
                    system = compact;
                    broke_off = maybe_overflow;
                    continue;
                }
            }
            // The full card's stream broke off and the compact card's did not: this server
            // ends an over-long stream early, so a later draft's broken stream is one too.
            if overflow || (maybe_overflow && broke_off) {
                let mut message = reply["error"]["message"].as_str().unwrap_or_default().to_owned();
                if !overflow {
                    message = format!(
                        "its stream broke off, as the full card's did ({message}): the server seems to end a request longer than its context window early; declare the provider's context_window to size the requests"
                    );
                }
                let cause = RejectCause::ContextOverflow {
                    draft: number,
                    context_window: inputs.context_window,
                    message,
                };
                let error = Error::new(
                    ErrorCode::ScriptRejected,
                    format!("draft {number} does not fit the planner model's context window"),
                );
                return Ok((Err(error), Verdict::Rejected { cause, drafts }));
            }
            // The full form returns a failure instead of raising it: raise it, so the run
            // settles as the draft call did (exhausted, failed, cancelled).
            return Err(failure_of(&reply, number));
        }
        let text = reply["value"].as_str().or_else(|| reply["partial"].as_str()).unwrap_or_default();
        let output_tokens = reply["usage"]["output_tokens"].as_u64().unwrap_or(0);
        let max_output_tokens = draft_cap(inputs.context_window, inputs.max_output_tokens, system, &prompt)
            .unwrap_or(inputs.max_output_tokens);
        let source = extract_script(text).to_owned();
        let diagnostics = if source.trim().is_empty() {
            vec![empty_draft(text)]
        } else {
            inputs.dialect.check(&source, &inputs.lint)
        };
        if cut_off(&reply, output_tokens, max_output_tokens) {
            drafts.push(DraftReport { source, diagnostics });
            let cause = RejectCause::Truncated { output_tokens, max_output_tokens };
            let error = Error::new(
                ErrorCode::ScriptRejected,
                format!("draft {number} was cut off by the output limit ({output_tokens} tokens)"),
            );
            return Ok((Err(error), Verdict::Rejected { cause, drafts }));
        }
        let errors: Vec<Diagnostic> = diagnostics.iter().filter(|d| d.is_error()).cloned().collect();
        if errors.is_empty() {
            let value = json!({ "source": source, "dialect": dialect, "drafts": number });
            return Ok((Ok(value), Verdict::Accepted { source, warnings: diagnostics, drafts: number }));
        }
        prompt = repair_prompt(&inputs.goal, dialect, &source, &errors);
        // A small window that cannot hold every diagnostic gets the first ones that fit; a
        // window known only to be small (the full card broke off) the first few.
        let mut shown = errors.len();
        if broke_off && inputs.context_window.is_none() && shown > UNSIZED_SHOWN {
            shown = UNSIZED_SHOWN;
            prompt = repair_prompt_shown(&inputs.goal, dialect, &source, &errors, shown);
        }
        while shown > 1
            && draft_cap(inputs.context_window, inputs.max_output_tokens, system, &prompt).is_err()
        {
            shown /= 2;
            prompt = repair_prompt_shown(&inputs.goal, dialect, &source, &errors, shown);
        }
        drafts.push(DraftReport { source, diagnostics });
        round += 1;
    }
    let error = Error::new(
        ErrorCode::ScriptRejected,
        format!("no draft passed lint and compile in {} drafts", drafts.len()),
    );
    let cause = RejectCause::Diagnostics { repair_rounds: inputs.repair_rounds };
    Ok((Err(error), Verdict::Rejected { cause, drafts }))
}

/// The error of a draft call that did not end `ok`, from its full-form record.
fn failure_of(reply: &Value, number: u32) -> Error {
    let error = &reply["error"];
    let code = serde_json::from_value::<ErrorCode>(error["code"].clone()).unwrap_or(ErrorCode::Internal);
    let message = error["message"].as_str().unwrap_or("the draft call failed");
    Error::new(code, format!("draft {number}: {message}"))
}

/// The diagnostic of a reply that holds no script.
fn empty_draft(reply: &str) -> Diagnostic {
    let message = if reply.trim().is_empty() {
        "the reply is empty: write the whole script in one fenced code block"
    } else {
        "the reply's code block is empty: write the whole script in one fenced code block"
    };
    Diagnostic {
        rule_id: "syntax".into(),
        message: message.into(),
        line: 1,
        column: 1,
        end_line: None,
        end_column: None,
        severity: Severity::Error,
    }
}

#[cfg(test)]
mod tests;

//! `cairn plan "GOAL"`: a planner model writes the workflow, lint repairs it, and (with
//! `--run`) the sandbox runs it; `cairn card`: the API card of a dialect and the profile card.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use serde_json::{Value, json};

use super::exit::{Exit, fail};
use super::follow;
use super::setup::{self, CassetteArgs, Globals};
use crate::engine::{Engine, RunOptions, RunOutcome};
use crate::error::{Error, ErrorCode};
use crate::planner::{PlanError, PlanOptions, PlanResult, Planning, Rejection};
use crate::store::RunId;
use crate::store::RunStatus;

#[derive(Debug, Args)]
pub(super) struct PlanArgs {
    /// The goal, in words: what the workflow should achieve.
    goal: String,
    /// Run the accepted script (shown first), with the progress and exit codes of `cairn run`.
    #[arg(long)]
    run: bool,
    /// Print one JSON object on stdout: source, dialect, warnings, drafts, cost_bound,
    /// planning_run_id (and the run's outcome under `run`); a rejection prints its drafts.
    #[arg(long)]
    json: bool,
    /// Write the accepted script to this file.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// The dialect to write (default rhai).
    #[arg(long, value_name = "DIALECT")]
    dialect: Option<String>,
    /// Repair rounds after the first draft (0 to 10).
    #[arg(long, value_name = "N", default_value_t = 3)]
    repair_rounds: u32,
    /// The planner's model, as provider:model (default: [routing] plan, else the default model).
    #[arg(long, value_name = "MODEL")]
    planner_model: Option<String>,
    /// The planning conversation's own ceiling in USD.
    #[arg(long, value_name = "USD", allow_negative_numbers = true)]
    planning_budget: Option<f64>,
    /// The API card the planner is shown: auto (the compact card when the planner model's
    /// context_window is small, or once after a draft is refused for its length), full or
    /// compact.
    #[arg(long, value_name = "CARD", default_value = "auto", value_parser = ["auto", "full", "compact"])]
    card: String,
    /// The output cap of each draft, in tokens.
    #[arg(long, value_name = "TOKENS", default_value_t = crate::planner::DEFAULT_MAX_OUTPUT_TOKENS)]
    max_output_tokens: u32,
    /// The run's ceiling in USD (with --run; without, the cost bound is compared with it).
    #[arg(long, value_name = "USD", allow_negative_numbers = true)]
    budget: Option<f64>,
    /// The run's arguments, JSON or @FILE (the cost bound sizes args-driven fan-outs by them).
    #[arg(long)]
    args: Option<String>,
    /// With --run: run even when the script's cost bound exceeds the run's ceiling.
    #[arg(long, requires = "run")]
    force: bool,
    /// The default model of the run's calls, as provider:model.
    #[arg(long)]
    model: Option<String>,
    /// No progress on stderr.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    cassette: CassetteArgs,
}

#[derive(Debug, Args)]
pub(super) struct CardArgs {
    /// Print this dialect's API card (default rhai).
    #[arg(long, value_name = "DIALECT")]
    dialect: Option<String>,
    /// Print the profile card of what cairn.toml registers (profiles, toolsets, host functions).
    #[arg(long)]
    profiles: bool,
    /// Print the compact form of the API card (what a planner with a small context window is shown).
    #[arg(long)]
    compact: bool,
}

/// `cairn card`.
pub(super) async fn card(globals: &Globals, args: &CardArgs) -> Exit {
    let shown = |card: &str| if args.compact { crate::planner::compact_card(card) } else { card.to_owned() };
    if args.dialect.is_none() && !args.profiles {
        print!("{}", shown(crate::script::api_card()));
        return Exit::Ok;
    }
    let engine = match card_engine(globals) {
        Ok(engine) => engine,
        Err(e) => return fail(setup::exit_of(&e), e),
    };
    if let Some(name) = &args.dialect {
        match engine.dialect(name) {
            Ok(dialect) => print!("{}", shown(dialect.card())),
            Err(e) => return fail(Exit::Usage, e),
        }
    }
    if args.profiles {
        if args.dialect.is_some() {
            println!();
        }
        // MCP servers are reached to list their tools; one that is not is named on the card.
        for failure in engine.list_tools().await {
            eprintln!("{}", crate::text::for_terminal_line(&format!("warning: {}", failure.message)));
        }
        print!("{}", crate::planner::profile_card(&engine));
    }
    Exit::Ok
}

/// An engine over a memory store with what cairn.toml registers: the cards need no store.
fn card_engine(globals: &Globals) -> Result<Engine, Error> {
    // The cards call no model: a provider's API key need not be set.
    let config = setup::load_config(globals)?.keyless();
    let store = Arc::new(crate::store::MemoryStore::new());
    let builder = Engine::builder(store);
    let (builder, _) = config.apply(builder, None).map_err(|e| config.locate(e))?;
    builder.build()
}

/// `cairn plan`.
pub(super) async fn plan(globals: &Globals, args: &PlanArgs) -> Exit {
    for (flag, value) in [("--planning-budget", args.planning_budget), ("--budget", args.budget)] {
        if let Some(Err(e)) = value.map(crate::money::Money::from_usd) {
            return fail(Exit::Usage, format!("invalid {flag}: {e}"));
        }
    }
    let run_args = match setup::parse_args(args.args.as_deref()) {
        Ok(value) => value,
        Err(exit) => return exit,
    };
    let setup = match setup::setup_with(globals, args.model.as_deref(), Some(&args.cassette)) {
        Ok(setup) => setup,
        Err(e) => return fail(setup::exit_of(&e), e),
    };
    // The card the planner reads lists MCP servers' tools: reach them first.
    for failure in setup.engine.list_tools().await {
        eprintln!("{}", crate::text::for_terminal_line(&format!("warning: {}", failure.message)));
    }
    let options = PlanOptions {
        dialect: args.dialect.clone().unwrap_or_else(|| crate::planner::DEFAULT_DIALECT.to_owned()),
        repair_rounds: args.repair_rounds,
        budget_usd: args.planning_budget,
        model: args.planner_model.clone(),
        max_output_tokens: args.max_output_tokens,
        rules: None,
        args: Some(run_args.clone()),
        card: args.card.parse().unwrap_or_default(),
    };
    // The echo model repeats its prompt: every draft would be rejected, each one paid for.
    match crate::planner::planner_model(&setup.engine, &options) {
        Ok(model) if model.provider() == "echo" && args.cassette.replay.is_none() => {
            return fail(
                Exit::Usage,
                format!(
                    "the planner is the offline echo model ({model}), which repeats its prompt and cannot write a \
                     script; set [routing] plan in cairn.toml or pass --planner-model (nothing was paid)"
                ),
            );
        }
        Ok(_) => {}
        Err(e) => return plan_failed(&PlanError::Invalid(e), args.json),
    }
    let planning = match Planning::start(&setup.engine, &args.goal, &options) {
        Ok(planning) => planning,
        Err(e) => return plan_failed(&e, args.json),
    };
    if !args.quiet {
        errln!("planning run {}", planning.run_id());
    }
    let (handle, pending) = planning.into_parts();
    let outcome = follow::follow(handle, args.quiet).await;
    let plan = match pending.read(outcome) {
        Ok(plan) => plan,
        Err(e) if e.is_replay_miss() => {
            // The settled conversation no longer replays as journaled (a newer cairn's
            // diagnostics changed a repair prompt): resume it live, paying only what changed.
            if !args.quiet {
                errln!("the planning run no longer replays as journaled; resuming it live");
            }
            let planning = match Planning::start_live(&setup.engine, &args.goal, &options) {
                Ok(planning) => planning,
                Err(e) => return plan_failed(&e, args.json),
            };
            let (handle, pending) = planning.into_parts();
            match pending.read(follow::follow(handle, args.quiet).await) {
                Ok(plan) => plan,
                Err(e) => return plan_failed(&e, args.json),
            }
        }
        Err(e) => return plan_failed(&e, args.json),
    };
    if let Some(path) = &args.out
        && let Err(e) = std::fs::write(path, &plan.source)
    {
        return fail(Exit::Error, format!("cannot write {}: {e}", path.display()));
    }
    let shown = Path::new("plan");
    setup::print_diagnostics(args.out.as_deref().unwrap_or(shown), &plan.warnings, false);
    if !args.quiet {
        let replayed = if plan.planning.preview.misses == 0 { ", replayed from its journal" } else { "" };
        errln!(
            "accepted after {} draft{} (planning run {}{replayed}, cost {})",
            plan.drafts,
            if plan.drafts == 1 { "" } else { "s" },
            plan.planning_run_id,
            plan.planning.cost.total.cost
        );
        errln!("cost bound: {}", crate::text::for_terminal(&plan.cost_bound.to_string()));
        if let Some(budget) = args.budget.and_then(|usd| crate::money::Money::from_usd(usd).ok())
            && plan.cost_bound.exceeds(budget)
        {
            errln!(
                "note: the cost bound exceeds --budget {budget}; running it needs --force (the ceiling still holds)"
            );
        }
    }
    if !args.run {
        if args.json {
            out!("{}", serde_json::to_string_pretty(&plan_json(&plan)).unwrap_or_default());
        } else if args.out.is_none() {
            out!("{}", plan.source.trim_end());
        } else if !args.quiet {
            errln!("wrote {}", args.out.as_deref().unwrap_or(shown).display());
        }
        return Exit::Ok;
    }
    if !args.json && !args.quiet {
        // Shown before anything is paid: the run's own result goes to stdout.
        errln!("--- planned {} script ---", plan.dialect);
        errln!("{}", crate::text::for_terminal(plan.source.trim_end()));
        errln!("---");
    }
    let options = RunOptions { budget_usd: args.budget, ..RunOptions::default() };
    let handle = match crate::planner::start_planned(&setup.engine, &plan, run_args, options, args.force) {
        Ok(handle) => handle,
        Err(e) => return plan_failed(&e, false),
    };
    let outcome = match follow::follow(handle, args.quiet).await {
        Ok(outcome) => outcome,
        Err(e) => return fail(Exit::Error, e),
    };
    if args.json {
        let mut object = plan_json(&plan);
        object["run"] = serde_json::to_value(&outcome).unwrap_or(Value::Null);
        out!("{}", serde_json::to_string_pretty(&object).unwrap_or_default());
        return Exit::of_status(outcome.status);
    }
    report_run(&outcome)
}

fn report_run(outcome: &RunOutcome) -> Exit {
    let exit = follow::report(outcome, false);
    if outcome.status != RunStatus::Ok {
        errln!("resume it with: cairn resume {}", outcome.run_id);
    }
    exit
}

/// The plan as `--json` prints it.
fn plan_json(plan: &PlanResult) -> Value {
    json!({
        "source": plan.source,
        "dialect": plan.dialect,
        "warnings": plan.warnings,
        "drafts": plan.drafts,
        "cost_bound": plan.cost_bound,
        "planning_run_id": plan.planning_run_id,
    })
}

/// Reports a plan that produced no script, with its exit code: 6 for a rejection (after the
/// last draft's diagnostics), 2 for bad options, 3 for an exhausted planning ceiling.
fn plan_failed(error: &PlanError, as_json: bool) -> Exit {
    match error {
        PlanError::Rejected(rejection) => {
            if as_json {
                out!(
                    "{}",
                    serde_json::to_string_pretty(&rejection_json(rejection, error)).unwrap_or_default()
                );
            } else if let Some(last) = rejection.drafts.last() {
                let name = format!("draft {}", rejection.drafts.len());
                setup::print_diagnostics(Path::new(&name), &last.diagnostics, false);
            }
            fail(Exit::Rejected, error)
        }
        PlanError::Invalid(e) | PlanError::Run(e) => fail(setup::exit_of(e), e),
        PlanError::OverCeiling { .. } => {
            let exit = fail(Exit::Usage, error);
            errln!(
                "pass --force to run it anyway: the ceiling still holds, and the run settles exhausted when it is reached"
            );
            exit
        }
        PlanError::Planning { status, error: e, .. } => {
            let exit = match (status, e.code) {
                (RunStatus::Exhausted, _) | (_, ErrorCode::BudgetExhausted) => Exit::Exhausted,
                (RunStatus::Cancelled, _) | (_, ErrorCode::Cancelled) => Exit::Cancelled,
                _ => setup::exit_of(e),
            };
            fail(exit, error)
        }
    }
}

fn rejection_json(rejection: &Rejection, error: &PlanError) -> Value {
    let mut object = serde_json::to_value(rejection).unwrap_or(Value::Null);
    object["error"] = serde_json::to_value(error.to_error()).unwrap_or(Value::Null);
    object
}

/// `cairn resume plan-…`: a planning run is resumed by planning its goal again with the options
/// it recorded. Its paid drafts replay from its journal; the rest are drafted live. `None` when
/// `run_id` is not a planning run (the ordinary resume goes on). `other_flags`: the resume was
/// given flags that mean nothing to a planning run (`--dry-run`, `--invalidate`, `--script`,
/// `--accept-rekey`).
pub(super) async fn resume_planning(
    globals: &Globals,
    run_id: &RunId,
    json: bool,
    quiet: bool,
    other_flags: bool,
) -> Option<Exit> {
    if !run_id.as_str().starts_with("plan-") {
        return None;
    }
    let stored = {
        let setup = match setup::setup_with(globals, None, None) {
            Ok(setup) => setup,
            Err(e) => return Some(fail(setup::exit_of(&e), e)),
        };
        let stored = match crate::planner::stored_planning(&setup.engine, run_id) {
            Ok(Some(stored)) => stored,
            Ok(None) => return None,
            Err(e) => return Some(fail(setup::exit_of(&e), e)),
        };
        let goal = crate::text::for_terminal(&stored.goal).into_owned();
        let again =
            format!("plan the goal again with `cairn plan \"{goal}\"` and the flags it was planned with");
        if other_flags {
            return Some(fail(
                Exit::Usage,
                format!(
                    "run {run_id} is a planning run: resume it without --dry-run, --invalidate, --script, --accept-rekey or --budget, or {again}"
                ),
            ));
        }
        let Some(options) = stored.options.as_ref().filter(|o| !o.custom_rules) else {
            return Some(fail(
                Exit::Usage,
                format!(
                    "run {run_id} is a planning run that did not record its options: {again}; its paid drafts replay for free"
                ),
            ));
        };
        match crate::planner::planning_run_id(&setup.engine, &stored.goal, &options.to_options()) {
            Ok(id) if &id == run_id => {}
            Ok(_) | Err(_) => {
                return Some(fail(
                    Exit::Usage,
                    format!(
                        "the planning inputs of run {run_id} changed since it began (cairn.toml's profiles, host functions or workflows, the planner model or its context window, or the API card): {again}, which starts a new planning run"
                    ),
                ));
            }
        }
        stored
    };
    let Some(options) = stored.options else { return Some(Exit::Usage) };
    if !quiet {
        errln!("resuming planning run {run_id}: its paid drafts replay");
    }
    let args = PlanArgs {
        goal: stored.goal,
        run: false,
        json,
        out: None,
        dialect: Some(options.dialect),
        repair_rounds: options.repair_rounds,
        planner_model: Some(options.model),
        planning_budget: options.budget_usd,
        card: match options.card {
            crate::planner::CardChoice::Auto => "auto",
            crate::planner::CardChoice::Full => "full",
            crate::planner::CardChoice::Compact => "compact",
        }
        .to_owned(),
        max_output_tokens: options.max_output_tokens,
        budget: None,
        args: options.args.map(|a| a.to_string()),
        force: false,
        model: None,
        quiet,
        cassette: CassetteArgs { record: None, replay: None },
    };
    Some(plan(globals, &args).await)
}

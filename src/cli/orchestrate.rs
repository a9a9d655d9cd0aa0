//! `cairn orchestrate "GOAL"`: a run whose workflow is one dynamic orchestration, with the
//! profiles of `cairn.toml`. It is a script run like any other (the stored script is
//! `orchestrate(args.goal, args.options)` and the goal and options are the run's arguments),
//! so `cairn resume`, `replay` and `inspect` work on it unchanged. The live roster (each
//! child's spawn, settle, status and spend) streams on stderr as run events.

use clap::Args;
use serde_json::{Value, json};

use super::exit::{Exit, fail};
use super::follow;
use super::setup::{self, Globals};
use crate::engine::{RunOptions, Script};

/// The stored script of an orchestration run.
const SOURCE: &str = "orchestrate(args.goal, args.options)\n";

#[derive(Debug, Args)]
pub(super) struct OrchestrateArgs {
    /// The goal to hand to the orchestrator.
    goal: String,
    /// The profiles children may be spawned with, comma-separated (default: every profile
    /// in cairn.toml).
    #[arg(long, value_delimiter = ',')]
    profiles: Vec<String>,
    /// The budget ceiling in USD.
    #[arg(long, allow_negative_numbers = true)]
    budget: Option<f64>,
    /// Most children admitted (default 24).
    #[arg(long)]
    max_spawns: Option<u32>,
    /// The run id (default: a fresh ULID).
    #[arg(long)]
    run_id: Option<String>,
    /// The default model, as provider:model.
    #[arg(long)]
    model: Option<String>,
    /// Print the whole outcome as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// No progress on stderr.
    #[arg(long, short)]
    quiet: bool,
}

pub(super) async fn run(globals: &Globals, args: &OrchestrateArgs) -> Exit {
    if args.goal.trim().is_empty() {
        return fail(Exit::Usage, "the goal is empty");
    }
    let run_id = match args.run_id.as_deref().map(setup::parse_run_id).transpose() {
        Ok(id) => id,
        Err(exit) => return exit,
    };
    if let Some(Err(e)) = args.budget.map(crate::money::Money::from_usd) {
        return fail(Exit::Usage, format!("invalid --budget: {e}"));
    }
    let setup = match setup::setup_with(globals, args.model.as_deref(), None) {
        Ok(setup) => setup,
        Err(e) => return fail(setup::exit_of(&e), e),
    };
    let mut options = json!({});
    if !args.profiles.is_empty() {
        options["profiles"] = json!(args.profiles);
    }
    if let Some(n) = args.max_spawns {
        options["max_spawns"] = json!(n);
    }
    // Checked before the run starts, so a bad flag is a usage error, not a failed run.
    if let Err(e) = crate::orchestrator::OrchestrateOptions::from_json(&options) {
        return fail(Exit::Usage, e);
    }
    let registered = setup.engine.registered().profiles;
    if let Some(unknown) = args.profiles.iter().find(|p| !registered.contains(p)) {
        return fail(
            Exit::Usage,
            format!("unknown profile {unknown:?} (cairn.toml [profiles] has {})", registered.join(", ")),
        );
    }
    if registered.is_empty() {
        return fail(
            Exit::Usage,
            "cairn.toml declares no [profiles] for the orchestrator to spawn children with",
        );
    }
    let run_args = json!({ "goal": args.goal, "options": options });
    let options = RunOptions { budget_usd: args.budget, run_id, ..RunOptions::default() };
    let handle = match setup.engine.run_script(&Script::rhai("orchestrate", SOURCE), run_args, options) {
        Ok(handle) => handle,
        Err(e) => return fail(setup::exit_of(&e), e),
    };
    match follow::follow(handle, args.quiet).await {
        Ok(outcome) => {
            if !args.quiet
                && !args.json
                && let Some(children) = outcome.value.as_ref().and_then(|v| v.get("children"))
            {
                print_children(children);
            }
            follow::report(&outcome, args.json)
        }
        Err(e) => fail(Exit::Error, e),
    }
}

fn print_children(children: &Value) {
    for child in children.as_array().into_iter().flatten() {
        errln!(
            "{}",
            crate::text::for_terminal(&format!(
                "  {:<5} {:<16} {:<10} ${:.6}",
                child["handle"].as_str().unwrap_or("?"),
                child["profile"].as_str().unwrap_or("?"),
                child["status"].as_str().unwrap_or("?"),
                child["cost_usd"].as_f64().unwrap_or(0.0)
            ))
        );
    }
}

/// The roster and decisions of each orchestration of a run (`cairn inspect`).
pub(super) fn print_report(orchestrations: &[Value]) {
    for orchestration in orchestrations {
        let line = |text: String| println!("{}", crate::text::for_terminal(&text));
        line(format!("orchestration {}", orchestration["scope"].as_str().unwrap_or("")));
        for child in orchestration["children"].as_array().into_iter().flatten() {
            line(format!(
                "  child   {:<5} {:<16} {:<10} ${:.6}",
                child["handle"].as_str().unwrap_or("?"),
                child["profile"].as_str().unwrap_or("?"),
                child["status"].as_str().unwrap_or("?"),
                child["cost_usd"].as_f64().unwrap_or(0.0)
            ));
        }
        for decision in orchestration["decisions"].as_array().into_iter().flatten() {
            line(format!("  decided {}", describe(decision)));
        }
    }
}

fn describe(d: &Value) -> String {
    let seq = d["seq"].as_u64().unwrap_or(0);
    let what = d["decision"].as_str().unwrap_or("?");
    let detail = match what {
        "admit" => format!("c{} ({})", d["child"], d["profile"].as_str().unwrap_or("?")),
        "refuse" => format!(
            "{} ({}): {}",
            d["profile"].as_str().unwrap_or("?"),
            d["reason"].as_str().unwrap_or("?"),
            d["message"].as_str().unwrap_or("")
        ),
        "cancel" => format!("c{}", d["child"]),
        "finish" => {
            let problems: Vec<&str> =
                d["problems"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            format!("{} {}", d["verdict"].as_str().unwrap_or("?"), problems.join("; "))
        }
        "acceptance" => d["message"].as_str().unwrap_or("").to_owned(),
        "claims" => {
            let findings = d["findings"].as_array().cloned().unwrap_or_default();
            let contradicted = findings.iter().filter(|f| f["verdict"] == "contradicted").count();
            format!("{} pairs, {contradicted} contradicted", findings.len())
        }
        _ => String::new(),
    };
    format!("seq {seq:<5} {what:<10} {detail}")
}

//! The commands that drive or change a run: run, resume, replay, resolve.

use std::path::PathBuf;

use clap::Args;
use serde_json::Value;

use super::exit::{Exit, fail};
use super::follow::{escaped, follow, report};
use super::setup::{
    CassetteArgs, Globals, Setup, dialect_of, exit_of, lint_context, parse_args, parse_run_id,
    print_diagnostics, read_script, setup, setup_read_only, setup_with,
};
use crate::engine::{Engine, Resolution, ResumeOptions, RunHandle, RunOptions, RunOutcome, Script};
use crate::error::{Error, ErrorCode};
use crate::journal;
use crate::script::Diagnostic;
use crate::store::{self, RunId};
#[derive(Debug, Args)]
pub(super) struct RunArgs {
    /// The workflow script (.rhai, .lua).
    file: PathBuf,
    /// The script's dialect (rhai, lua); default: from the file's extension.
    #[arg(long)]
    dialect: Option<String>,
    /// The run's arguments: JSON, or @FILE to read JSON from a file.
    #[arg(long)]
    args: Option<String>,
    /// The budget ceiling in USD.
    #[arg(long, allow_negative_numbers = true)]
    budget: Option<f64>,
    /// The run id (default: a fresh ULID).
    #[arg(long)]
    run_id: Option<String>,
    #[command(flatten)]
    live: LiveArgs,
}

/// The flags of the commands that run a workflow live (`run`, `resume`).
#[derive(Debug, Args)]
pub(super) struct LiveArgs {
    /// The default model, as provider:model.
    #[arg(long)]
    model: Option<String>,
    /// Print the whole outcome as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// No progress on stderr.
    #[arg(long, short)]
    quiet: bool,
    /// When every branch waits and a wait's deadline (await_external's timeout_ms) comes
    /// within this many seconds, keep the run live and wake it here at that time; a later
    /// deadline suspends the run (a worker claims it again then). 0: always suspend.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    hold_timers: u64,
    #[command(flatten)]
    cassette: CassetteArgs,
}

#[derive(Debug, Args)]
pub(super) struct ResumeArgs {
    /// The run to resume.
    run: String,
    /// Replay-strict: fail at the first call the journal does not hold; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Rerun the call journaled at this seq (repeatable).
    #[arg(long)]
    invalidate: Vec<u64>,
    /// When another process is driving the run, wait for it to let go instead of failing.
    #[arg(long)]
    wait: bool,
    /// Run again (paying anew) completed calls whose identity changed since they were paid;
    /// without it such a resume lists them, and what changed, and stops before paying.
    #[arg(long)]
    accept_rekey: bool,
    /// An edited script: it replaces the run's stored source (kept as an earlier version);
    /// unchanged calls replay, and re-keyed paid calls are explained first.
    #[arg(long, value_name = "FILE")]
    script: Option<PathBuf>,
    /// The dialect of --script (rhai, lua); default: from its extension.
    #[arg(long, requires = "script")]
    dialect: Option<String>,
    /// A new ceiling in USD from this resume on: refused (exit 2, nothing written) below what
    /// the run has spent; journaled as a run_budget_override decision. Default: the run's.
    #[arg(long, value_name = "USD")]
    budget: Option<f64>,
    #[command(flatten)]
    live: LiveArgs,
}

#[derive(Debug, Args)]
pub(super) struct ReplayArgs {
    /// The run to replay strictly.
    run: String,
}

#[derive(Debug, Args)]
pub(super) struct ResolveArgs {
    /// The suspended run.
    run: String,
    /// The key its await_external waits on.
    key: String,
    /// The value, as JSON.
    value: String,
}

/// Resumes, waiting while another process drives the run when asked to.
async fn resume_waiting(
    engine: &Engine,
    run_id: &RunId,
    options: &ResumeOptions,
    wait: bool,
    quiet: bool,
) -> Result<RunHandle, Error> {
    let mut told = false;
    loop {
        match engine.resume(run_id, options.clone()) {
            Err(e) if wait && e.code == ErrorCode::RunBusy => {
                if !told && !quiet {
                    eprintln!("cairn: run {run_id} is being driven by another process; waiting for it");
                    told = true;
                }
                tokio::select! {
                    _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
                    _ = tokio::signal::ctrl_c() => {
                        return Err(Error::new(ErrorCode::Cancelled, "interrupted while waiting for the run"));
                    }
                }
            }
            other => return other,
        }
    }
}

pub(super) async fn run(globals: &Globals, args: &RunArgs) -> Exit {
    let (name, source) = match read_script(&args.file) {
        Ok(found) => found,
        Err(exit) => return exit,
    };
    let run_args = match parse_args(args.args.as_deref()) {
        Ok(value) => value,
        Err(exit) => return exit,
    };
    let run_id = match args.run_id.as_deref().map(parse_run_id).transpose() {
        Ok(id) => id,
        Err(exit) => return exit,
    };
    if let Some(Err(e)) = args.budget.map(crate::money::Money::from_usd) {
        return fail(Exit::Usage, format!("invalid --budget: {e}"));
    }
    let setup = match setup_with(globals, args.live.model.as_deref(), Some(&args.live.cassette)) {
        Ok(setup) => setup,
        Err(e) => return fail(exit_of(&e), e),
    };
    let dialect = match dialect_of(&setup.engine, &args.file, args.dialect.as_deref()) {
        Ok(dialect) => dialect,
        Err(exit) => return exit,
    };
    let diagnostics = dialect.check(&source, &lint_context(&setup));
    if diagnostics.iter().any(Diagnostic::is_error) {
        print_diagnostics(&args.file, &diagnostics, args.live.json);
        return fail(Exit::Rejected, format!("{} was rejected by lint", args.file.display()));
    }
    print_diagnostics(&args.file, &diagnostics, false);
    if setup.uses_echo && !args.live.quiet && args.live.cassette.replay.is_none() {
        if setup.config.providers.keys().any(|name| name != "echo") {
            errln!(
                "note: routing.default is not set; calls that name no model use the offline echo model (echo:default)"
            );
        } else {
            errln!("note: no model provider is configured; using the offline echo model (echo:default)");
        }
    }
    let options = RunOptions {
        budget_usd: args.budget,
        run_id,
        hold_timers: std::time::Duration::from_secs(args.live.hold_timers),
        ..RunOptions::default()
    };
    let handle =
        match setup.engine.run_script(&Script::new(dialect.name(), &name, &source), run_args, options) {
            Ok(handle) => handle,
            Err(e) => return fail(exit_of(&e), e),
        };
    match follow(handle, args.live.quiet).await {
        Ok(outcome) => report(&outcome, args.live.json),
        Err(e) => fail(Exit::Error, e),
    }
}

pub(super) async fn resume(globals: &Globals, args: &ResumeArgs) -> Exit {
    let run_id = match parse_run_id(&args.run) {
        Ok(id) => id,
        Err(exit) => return exit,
    };
    let other = args.dry_run
        || !args.invalidate.is_empty()
        || args.script.is_some()
        || args.accept_rekey
        || args.budget.is_some();
    if let Some(exit) =
        super::plan::resume_planning(globals, &run_id, args.live.json, args.live.quiet, other).await
    {
        return exit;
    }
    let setup = match setup_with(globals, args.live.model.as_deref(), Some(&args.live.cassette)) {
        Ok(setup) => setup,
        Err(e) => return fail(exit_of(&e), e),
    };
    let model = match args.live.model.as_deref().map(crate::model::ModelRef::parse).transpose() {
        Ok(model) => model,
        Err(e) => return fail(Exit::Usage, format!("invalid --model: {e}")),
    };
    let script = match &args.script {
        Some(file) => match read_script(file) {
            Ok((name, source)) => match dialect_of(&setup.engine, file, args.dialect.as_deref()) {
                Ok(dialect) => Some(Script::new(dialect.name(), &name, &source)),
                Err(exit) => return exit,
            },
            Err(exit) => return exit,
        },
        None => None,
    };
    if let Err(exit) = check_invalidate(&setup, &run_id, &args.invalidate) {
        return exit;
    }
    let options = ResumeOptions {
        dry_run: args.dry_run,
        invalidate: args.invalidate.clone(),
        model,
        accept_rekey: args.accept_rekey,
        script,
        budget_usd: args.budget,
        hold_timers: std::time::Duration::from_secs(args.live.hold_timers),
        ..Default::default()
    };
    let handle = match resume_waiting(&setup.engine, &run_id, &options, args.wait, args.live.quiet).await {
        Ok(handle) => handle,
        Err(e) if e.code == ErrorCode::Cancelled => return fail(Exit::Cancelled, e),
        Err(e) => return fail(exit_of(&e), e),
    };
    match follow(handle, args.live.quiet).await {
        Ok(outcome)
            if args.dry_run && outcome.error.as_ref().is_some_and(|e| e.code == ErrorCode::JournalMiss) =>
        {
            report(&outcome, args.live.json);
            Exit::ReplayMiss
        }
        Ok(outcome) => report(&outcome, args.live.json),
        Err(e) => fail(Exit::Error, e),
    }
}

/// Each `--invalidate SEQ` names a journaled call of the run (an agent, step, host call or
/// child workflow: its dispatch or its result); anything else would be silently ignored, so
/// it is a usage error that names what the seq holds.
fn check_invalidate(setup: &Setup, run_id: &RunId, seqs: &[u64]) -> Result<(), Exit> {
    if seqs.is_empty() {
        return Ok(());
    }
    let journal_store = setup.engine.journal_store().as_ref();
    for &seq in seqs {
        // Read by seq: the journal is never loaded whole.
        let entry = match journal_store.load_entry(run_id, seq) {
            Ok(Some(raw)) => journal::decode(&raw).map_err(|e| fail(Exit::Error, e))?,
            Ok(None) => {
                // Its last seq, for the message (read page by page).
                let mut last = 0;
                for page in store::JournalPages::new(journal_store, run_id, 0, store::PAGE_ENTRIES) {
                    match page {
                        Ok(page) => last = page.last().map_or(last, |e| e.seq()),
                        Err(_) => break,
                    }
                }
                if last == 0 {
                    // An unknown run (or an empty journal): the resume itself says so.
                    return Ok(());
                }
                return Err(fail(
                    Exit::Usage,
                    format!(
                        "--invalidate {seq}: run {run_id} has no journal entry at seq {seq} (its seqs run 1 to {last}; `cairn inspect {run_id} --json` lists them)"
                    ),
                ));
            }
            // An unknown run: the resume itself says so.
            Err(_) => return Ok(()),
        };
        if !matches!(
            entry.kind,
            journal::Kind::Agent | journal::Kind::Step | journal::Kind::Call | journal::Kind::Child
        ) {
            return Err(fail(
                Exit::Usage,
                format!(
                    "--invalidate {seq}: seq {seq} of run {run_id} is not a call (kind `{}`); invalidate an agent, step, host call or child workflow",
                    entry.kind.as_str()
                ),
            ));
        }
    }
    Ok(())
}

pub(super) async fn replay(globals: &Globals, args: &ReplayArgs) -> Exit {
    let run_id = match parse_run_id(&args.run) {
        Ok(id) => id,
        Err(exit) => return exit,
    };
    let setup = match setup_read_only(globals) {
        Ok(Some(setup)) => setup,
        Ok(None) => return fail(Exit::Usage, format!("unknown run {run_id}")),
        Err(e) => return fail(exit_of(&e), e),
    };
    // How the run last settled, read before the replay (which writes nothing), page by page.
    let mut settled = None;
    for entry in journal::entries(setup.engine.journal_store().as_ref(), &run_id, 0) {
        let Ok(entry) = entry else {
            settled = None;
            break;
        };
        if let Some(outcome) = journal::last_settlement_outcome(std::slice::from_ref(&entry)) {
            settled = Some(outcome);
        }
    }
    let options = ResumeOptions { dry_run: true, reproduce: true, ..Default::default() };
    let handle = match setup.engine.resume(&run_id, options) {
        Ok(handle) => handle,
        Err(e) => return fail(exit_of(&e), e),
    };
    match follow(handle, true).await {
        Ok(outcome) => match replay_divergence(&outcome, settled.as_ref()) {
            Some(difference) => {
                errln!("{}", escaped(&format!("replay of {run_id} diverges: {difference}")));
                Exit::ReplayMiss
            }
            None => {
                let p = outcome.preview;
                let superseded = match p.superseded {
                    0 => String::new(),
                    n => format!(", {n} superseded by an accepted re-key"),
                };
                out!(
                    "replay of {run_id}: {} calls replayed, 0 live, 0 orphaned{superseded}, same outcome",
                    p.hits
                );
                Exit::Ok
            }
        },
        Err(e) => fail(Exit::Error, e),
    }
}

/// The first way a strict replay differs from the journaled run: a call that would run
/// live, a journaled call nothing reached, or a different outcome than the journaled
/// settlement. `None` when it is identical.
fn replay_divergence(outcome: &RunOutcome, settled: Option<&journal::Settled>) -> Option<String> {
    let p = outcome.preview;
    if stopped_where_it_was_cancelled(outcome, settled)
        || stopped_where_its_clock_stopped_it(outcome, settled)
    {
        return None;
    }
    if let Some(e) = outcome.error.as_ref().filter(|e| e.code == ErrorCode::JournalMiss) {
        return Some(format!("a call would run live ({e}); {} replayed before it", p.hits));
    }
    if p.misses + p.reruns > 0 {
        return Some(format!("{} calls would run live; {} replayed", p.misses + p.reruns, p.hits));
    }
    if p.orphaned > 0 {
        let first = outcome.orphans.first().map_or_else(String::new, |o| format!("; the first is {o}"));
        return Some(format!("{} journaled calls were not reached by the replay{first}", p.orphaned));
    }
    let journal::Settled { status, value_key, .. } = settled?;
    if *status != outcome.status {
        return Some(format!("the run settled {status}, its replay settles {}", outcome.status));
    }
    let replayed_key = outcome.value.as_ref().and_then(|v| journal::content_key(v).ok()).map(|k| k.to_hex());
    if value_key.is_some() && *value_key != replayed_key {
        return Some(format!("the run settled {status} with a different value than its replay returns"));
    }
    None
}

/// A run cancelled mid-flight journals every call it finished and, at most, the one it was
/// in when the cancellation came (as `cancelled`) or none (cancelled between two calls): its
/// strict replay serves every journaled call and then stops at that same point, reaching
/// either the cancelled call or the first call the run never made. That is the run's own
/// outcome, not a divergence; stopping anywhere earlier leaves journaled calls orphaned.
fn stopped_where_it_was_cancelled(outcome: &RunOutcome, settled: Option<&journal::Settled>) -> bool {
    let p = outcome.preview;
    settled.is_some_and(|s| s.status == store::RunStatus::Cancelled)
        && p.orphaned == 0
        && p.misses + p.reruns <= 1
        && (outcome.status == store::RunStatus::Cancelled
            || outcome
                .error
                .as_ref()
                .is_some_and(|e| matches!(e.code, ErrorCode::JournalMiss | ErrorCode::Cancelled)))
}

/// A run its script-time limit stopped (timing decided where) journals every call it made:
/// its strict replay is not stopped by the limit before it has served them all
/// (`engine::script_clock`), and then stops as the run did, by the limit, or at the first call
/// the run never made (the replay ran faster there). Either is the run's own outcome.
fn stopped_where_its_clock_stopped_it(outcome: &RunOutcome, settled: Option<&journal::Settled>) -> bool {
    let p = outcome.preview;
    settled.is_some_and(|s| s.by_script_time && s.status == store::RunStatus::Error)
        && p.orphaned == 0
        && p.misses + p.reruns <= 1
        && outcome.error.as_ref().is_some_and(|e| match e.code {
            ErrorCode::JournalMiss => true,
            ErrorCode::SandboxLimit => p.misses + p.reruns == 0,
            _ => false,
        })
}

pub(super) fn resolve(globals: &Globals, args: &ResolveArgs) -> Exit {
    let run_id = match parse_run_id(&args.run) {
        Ok(id) => id,
        Err(exit) => return exit,
    };
    let value: Value = match serde_json::from_str(&args.value) {
        Ok(value) => value,
        Err(e) => return fail(Exit::Usage, format!("the value is not valid JSON: {e}")),
    };
    let setup = match setup(globals, None) {
        Ok(setup) => setup,
        Err(e) => return fail(exit_of(&e), e),
    };
    match setup.engine.resolve(&run_id, &args.key, value) {
        Ok(Resolution::Applied) => {
            println!("resolved {} of run {run_id}; continue it with: cairn resume {run_id}", args.key);
            Exit::Ok
        }
        Ok(Resolution::Queued) => {
            println!(
                "run {run_id} is being driven by another process; {} was handed to it (the driver applies it, \
                 or the next `cairn resume {run_id}` does)",
                args.key
            );
            Exit::Ok
        }
        // Nothing changed for the run: a script or an operator must not take it as resolved.
        Ok(Resolution::AlreadyResolved) => fail(
            Exit::Error,
            format!(
                "{} of run {run_id} was already resolved; this attempt was recorded and not applied",
                args.key
            ),
        ),
        Err(e) => fail(exit_of(&e), e),
    }
}

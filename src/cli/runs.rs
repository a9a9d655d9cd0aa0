//! The commands that open a store and an engine: run, resume, replay, runs, inspect, lint,
//! resolve.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use serde_json::{Value, json};

use super::config::Config;
use super::{Exit, fail, progress};
use crate::engine::{
    CostReport, Engine, Resolution, ResumeOptions, RunHandle, RunOptions, RunOutcome, Script,
};
use crate::error::{Error, ErrorCode};
use crate::journal;
use crate::script::{Diagnostic, LintContext};
use crate::store::{self, OpenedStore, RunFilter, RunId, RunStatus};

/// Flags every command shares.
#[derive(Debug)]
pub(super) struct Globals {
    pub(super) store: Option<String>,
    pub(super) config: Option<PathBuf>,
}

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

/// Recording or replaying provider traffic.
#[derive(Debug, Args)]
pub(super) struct CassetteArgs {
    /// Record every provider exchange to this cassette (JSONL; no credentials are ever in it).
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    pub(super) record: Option<PathBuf>,
    /// Serve every provider exchange from this cassette, with zero network; a request it does
    /// not hold fails with a cassette miss.
    #[arg(long, value_name = "FILE")]
    pub(super) replay: Option<PathBuf>,
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
pub(super) struct ListArgs {
    /// Only runs in this status.
    #[arg(long)]
    status: Option<String>,
    /// At most this many runs, newest first.
    #[arg(long)]
    limit: Option<usize>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct InspectArgs {
    /// The run.
    run: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct LintArgs {
    /// The script.
    file: PathBuf,
    /// The script's dialect (rhai, lua); default: from the file's extension.
    #[arg(long)]
    dialect: Option<String>,
    /// Print the diagnostics as a JSON array (with `--bound`, an object with `diagnostics` and
    /// `cost_bound`).
    #[arg(long)]
    json: bool,
    /// Also print the static cost bound: the most agent calls the script can make and their
    /// worst-case cost, or why it has none.
    #[arg(long)]
    bound: bool,
    /// The run's args for the bound (JSON, or @FILE): they size loops and fan-outs over `args`.
    #[arg(long, requires = "bound")]
    args: Option<String>,
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

/// Runs an async command on a fresh multi-threaded runtime.
pub(super) fn with_runtime<F, Fut>(command: F) -> Exit
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Exit>,
{
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(command()),
        Err(e) => fail(Exit::Error, format!("cannot start the async runtime: {e}")),
    }
}

/// A failure with the exit code it maps to.
pub(super) fn exit_of(error: &Error) -> Exit {
    match error.code {
        ErrorCode::Config | ErrorCode::Validation => Exit::Usage,
        ErrorCode::JournalMiss => Exit::ReplayMiss,
        _ => Exit::Error,
    }
}

pub(super) fn load_config(globals: &Globals) -> Result<Config, Error> {
    match &globals.config {
        Some(path) => Config::load(path, true),
        None => Config::load(Path::new("cairn.toml"), false),
    }
}

fn open_store(globals: &Globals, config: &Config) -> Result<OpenedStore, Error> {
    let url = globals.store.clone().or_else(|| config.store.clone()).unwrap_or_else(|| "sqlite".into());
    store::open(&url).map_err(|e| match e {
        store::Error::Config(message) => Error::config(message),
        other => Error::internal(format!("cannot open store {url}: {other}")),
    })
}

/// Opens the store for reading only (`runs`, `inspect`, `replay`): nothing is created or
/// changed. `None` when nothing exists at the store's location yet.
fn open_store_read_only(globals: &Globals, config: &Config) -> Result<Option<OpenedStore>, Error> {
    let url = globals.store.clone().or_else(|| config.store.clone()).unwrap_or_else(|| "sqlite".into());
    store::open_read_only(&url).map_err(|e| match e {
        store::Error::Config(message) => Error::config(message),
        other => Error::from(other),
    })
}

pub(super) struct Setup {
    pub(super) engine: Engine,
    pub(super) config: Config,
    pub(super) uses_echo: bool,
}

pub(super) fn setup(globals: &Globals, model: Option<&str>) -> Result<Setup, Error> {
    setup_with(globals, model, None)
}

/// An engine over the store opened read-only; `None` when there is no store yet.
fn setup_read_only(globals: &Globals) -> Result<Option<Setup>, Error> {
    let config = load_config(globals)?;
    match open_store_read_only(globals, &config)? {
        Some(opened) => setup_over(globals, config, opened, None, None).map(Some),
        None => Ok(None),
    }
}

pub(super) fn setup_with(
    globals: &Globals,
    model: Option<&str>,
    cassette: Option<&CassetteArgs>,
) -> Result<Setup, Error> {
    let mut config = load_config(globals)?;
    if let Some(path) = cassette.and_then(|c| c.record.as_deref()) {
        crate::provider::cassette::create_tape(path)?;
        config.host_tape = Some(Arc::new(crate::provider::cassette::HostTape::record(path)));
    }
    if let Some(path) = cassette.and_then(|c| c.replay.as_deref()) {
        config.host_tape = Some(Arc::new(crate::provider::cassette::HostTape::replay(path)?));
    }
    let opened = open_store(globals, &config)?;
    setup_over(globals, config, opened, model, cassette)
}

fn setup_over(
    _globals: &Globals,
    config: Config,
    opened: OpenedStore,
    model: Option<&str>,
    cassette: Option<&CassetteArgs>,
) -> Result<Setup, Error> {
    let builder = Engine::builder(opened.journal, opened.transcripts);
    let builder = match config.default_budget().map_err(|e| config.locate(e))? {
        Some(ceiling) => builder.default_budget(ceiling),
        None => builder,
    };
    let (mut builder, uses_echo) = config.apply(builder, model).map_err(|e| config.locate(e))?;
    if let Some(path) = cassette.and_then(|c| c.record.as_deref()) {
        let path = path.to_owned();
        builder = builder.try_map_providers(|p| {
            Ok(Arc::new(crate::provider::cassette::RecordingProvider::new(p, &path))
                as Arc<dyn crate::provider::Provider>)
        })?;
    }
    if let Some(path) = cassette.and_then(|c| c.replay.as_deref()) {
        let path = path.to_owned();
        builder = builder.try_map_providers(|p| {
            let replay = crate::provider::cassette::ReplayProvider::open(&path, p.name())?;
            Ok(Arc::new(replay) as Arc<dyn crate::provider::Provider>)
        })?;
    }
    if let Some(ttl) = lease_ttl_from_env()? {
        builder = builder.lease_ttl(ttl);
    }
    let engine = builder.build()?;
    Ok(Setup { engine, config, uses_echo })
}

/// The run lease's ttl from `CAIRN_LEASE_TTL_MS`, when set (tests shorten it).
fn lease_ttl_from_env() -> Result<Option<std::time::Duration>, Error> {
    match std::env::var("CAIRN_LEASE_TTL_MS") {
        Err(_) => Ok(None),
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Some(std::time::Duration::from_millis(ms))),
            _ => Err(Error::config(format!("CAIRN_LEASE_TTL_MS must be a positive integer, not {text:?}"))),
        },
    }
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

fn lint_context(setup: &Setup) -> LintContext {
    let registered = setup.engine.registered();
    let (_, toolsets, _) = setup.config.names();
    LintContext {
        profiles: registered.profiles.into_iter().collect(),
        toolsets: toolsets.into_iter().collect(),
        host_functions: registered.host_functions.into_iter().collect(),
        child_workflows: registered.workflows.into_iter().collect(),
        models: None,
    }
}

/// The dialect a script is written in: `--dialect` when given, else the one registered for
/// the file's extension, else Rhai.
fn dialect_of(
    engine: &crate::Engine,
    file: &Path,
    flag: Option<&str>,
) -> Result<Arc<dyn crate::engine::ScriptDialect>, Exit> {
    if let Some(name) = flag {
        return engine.dialect(name).map_err(|e| fail(Exit::Usage, e));
    }
    // A file whose extension names no dialect is Rhai, the primary dialect.
    let extension = file.extension().and_then(|e| e.to_str()).unwrap_or("");
    match engine.dialect_for_extension(extension) {
        Some(dialect) => Ok(dialect),
        None => engine.dialect("rhai").map_err(|e| fail(Exit::Usage, e)),
    }
}

pub(super) fn read_script(file: &Path) -> Result<(String, String), Exit> {
    let source = std::fs::read_to_string(file)
        .map_err(|e| fail(Exit::Usage, format!("cannot read {}: {e}", file.display())))?;
    let name = file.file_stem().and_then(|s| s.to_str()).unwrap_or("script").to_owned();
    Ok((name, source))
}

pub(super) fn print_diagnostics(file: &Path, diagnostics: &[Diagnostic], as_json: bool) {
    if as_json {
        println!("{}", serde_json::to_string_pretty(diagnostics).unwrap_or_else(|_| "[]".into()));
        return;
    }
    for d in diagnostics {
        let severity = if d.is_error() { "error" } else { "warning" };
        let message = crate::text::for_terminal(&d.message);
        eprintln!("{}:{}:{}: {severity} [{}] {message}", file.display(), d.line, d.column, d.rule_id);
    }
}

pub(super) fn parse_args(text: Option<&str>) -> Result<Value, Exit> {
    let Some(text) = text else { return Ok(json!({})) };
    let body = match text.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| fail(Exit::Usage, format!("cannot read --args file {path}: {e}")))?,
        None => text.to_owned(),
    };
    serde_json::from_str(&body).map_err(|e| fail(Exit::Usage, format!("--args is not valid JSON: {e}")))
}

pub(super) fn parse_run_id(text: &str) -> Result<RunId, Exit> {
    RunId::parse(text).map_err(|e| fail(Exit::Usage, e))
}

/// Waits for a run with progress on stderr, cancelling it on Ctrl-C.
pub(super) async fn follow(mut handle: RunHandle, quiet: bool) -> Result<RunOutcome, Error> {
    // Listening before anything is printed: once "running" shows, a signal is handled.
    let mut interrupts = super::Interrupts::listen();
    // Quiet: nobody reads the events, so the run builds none.
    let renderer = if quiet {
        handle.release_events();
        None
    } else {
        Some(tokio::spawn(progress::render(handle.events(), quiet)))
    };
    let outcome = tokio::select! {
        outcome = handle_result(&handle) => outcome,
        why = interrupts.next() => {
            // Stop dispatching, let what is in flight finish writing, settle `cancelled`.
            errln!("cairn: {why}; cancelling the run (interrupt again to exit at once)");
            handle.cancel();
            tokio::select! {
                // A second interrupt wins even over a run that settles at the same moment.
                biased;
                _ = interrupts.next() => {
                    errln!("cairn: interrupted again; exiting now (resume the run later)");
                    std::process::exit(130);
                }
                outcome = handle_result(&handle) => outcome,
            }
        }
    };
    if let Some(renderer) = renderer {
        let _ = renderer.await;
    }
    drop(handle);
    outcome
}

async fn handle_result(handle: &RunHandle) -> Result<RunOutcome, Error> {
    handle.wait().await
}

pub(super) fn report(outcome: &RunOutcome, as_json: bool) -> Exit {
    if as_json {
        out!("{}", serde_json::to_string_pretty(outcome).unwrap_or_default());
    } else {
        if let Some(value) = &outcome.value {
            out!("{}", serde_json::to_string_pretty(value).unwrap_or_default());
        }
        for dropped in &outcome.dropped {
            errln!("{}", escaped(&dropped_line(dropped)));
        }
        if let Some(error) = &outcome.error {
            errln!("{}", escaped(&format!("cairn: run {} {}: {error}", outcome.run_id, outcome.status)));
            if error.code == ErrorCode::StoreIo {
                errln!(
                    "nothing acknowledged was lost; once the store can be written again, continue with: cairn resume {} --wait",
                    outcome.run_id
                );
            }
        }
        for pending in &outcome.pending {
            errln!(
                "{}",
                escaped(&format!(
                    "run {} is suspended; resolve it with: cairn resolve {} {} '<json>'  then: cairn resume {}",
                    outcome.run_id, outcome.run_id, pending.key, outcome.run_id
                ))
            );
        }
        if !outcome.cost.unpriced.is_empty() {
            errln!(
                "note: {} calls used unpriced models (usage listed, cost unknown)",
                outcome.cost.unpriced.len()
            );
        }
    }
    Exit::of_status(outcome.status)
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
    let entries = match setup.engine.journal_store().load(run_id) {
        Ok(raw) => journal::decode_all(&raw).map_err(|e| fail(Exit::Error, e))?,
        // An unknown run: the resume itself says so.
        Err(_) => return Ok(()),
    };
    for &seq in seqs {
        match entries.iter().find(|e| e.seq.0 == seq) {
            None => {
                let last = entries.last().map_or(0, |e| e.seq.0);
                return Err(fail(
                    Exit::Usage,
                    format!(
                        "--invalidate {seq}: run {run_id} has no journal entry at seq {seq} (its seqs run 1 to {last}; `cairn inspect {run_id} --json` lists them)"
                    ),
                ));
            }
            Some(entry)
                if !matches!(
                    entry.kind,
                    journal::Kind::Agent | journal::Kind::Step | journal::Kind::Call | journal::Kind::Child
                ) =>
            {
                return Err(fail(
                    Exit::Usage,
                    format!(
                        "--invalidate {seq}: seq {seq} of run {run_id} is not a call (kind `{}`); invalidate an agent, step, host call or child workflow",
                        entry.kind.as_str()
                    ),
                ));
            }
            Some(_) => {}
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
    // How the run last settled, read before the replay (which writes nothing).
    let settled = match setup.engine.journal_store().load(&run_id) {
        Ok(raw) => {
            journal::decode_all(&raw).ok().and_then(|entries| journal::last_settlement_outcome(&entries))
        }
        Err(_) => None,
    };
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
                out!("replay of {run_id}: {} calls replayed, 0 live, 0 orphaned, same outcome", p.hits);
                Exit::Ok
            }
        },
        Err(e) => fail(Exit::Error, e),
    }
}

/// The first way a strict replay differs from the journaled run: a call that would run
/// live, a journaled call nothing reached, or a different outcome than the journaled
/// settlement. `None` when it is identical.
fn replay_divergence(
    outcome: &RunOutcome,
    settled: Option<&(store::RunStatus, Option<String>)>,
) -> Option<String> {
    let p = outcome.preview;
    if stopped_where_it_was_cancelled(outcome, settled) {
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
    let (status, value_key) = settled?;
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
fn stopped_where_it_was_cancelled(
    outcome: &RunOutcome,
    settled: Option<&(store::RunStatus, Option<String>)>,
) -> bool {
    let p = outcome.preview;
    matches!(settled, Some((store::RunStatus::Cancelled, _)))
        && p.orphaned == 0
        && p.misses + p.reruns <= 1
        && (outcome.status == store::RunStatus::Cancelled
            || outcome
                .error
                .as_ref()
                .is_some_and(|e| matches!(e.code, ErrorCode::JournalMiss | ErrorCode::Cancelled)))
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
        Ok(Resolution::AlreadyResolved) => {
            println!(
                "{} of run {run_id} was already resolved; this attempt was recorded and not applied",
                args.key
            );
            Exit::Ok
        }
        Err(e) => fail(exit_of(&e), e),
    }
}

pub(super) fn list(globals: &Globals, args: &ListArgs) -> Exit {
    let statuses = match args.status.as_deref() {
        None => Vec::new(),
        Some(text) => match serde_json::from_value::<RunStatus>(json!(text)) {
            Ok(status) => vec![status],
            Err(_) => {
                return fail(
                    Exit::Usage,
                    format!(
                        "unknown status {text:?} (use running, ok, error, cancelled, exhausted, suspended or queued)"
                    ),
                );
            }
        },
    };
    let config = match load_config(globals) {
        Ok(config) => config,
        Err(e) => return fail(exit_of(&e), e),
    };
    let opened = match open_store_read_only(globals, &config) {
        Ok(Some(opened)) => opened,
        Ok(None) => {
            if args.json {
                println!("[]");
            } else {
                eprintln!("no runs");
            }
            return Exit::Ok;
        }
        Err(e) => return fail(exit_of(&e), e),
    };
    let filter = RunFilter { statuses, limit: args.limit, ..RunFilter::default() };
    let runs = match opened.journal.list_runs(&filter) {
        Ok(runs) => runs,
        Err(e) => return fail(Exit::Error, e),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&runs).unwrap_or_default());
        return Exit::Ok;
    }
    if runs.is_empty() {
        eprintln!("no runs");
    }
    for meta in runs {
        println!(
            "{:<28} {:<10} {:<20} {}  segments {}",
            meta.run_id.as_str(),
            meta.status.as_str(),
            crate::text::for_terminal_line(meta.name.as_deref().unwrap_or("-")),
            utc(meta.created_at_ms),
            meta.segments
        );
    }
    Exit::Ok
}

pub(super) fn inspect(globals: &Globals, args: &InspectArgs) -> Exit {
    let run_id = match parse_run_id(&args.run) {
        Ok(id) => id,
        Err(exit) => return exit,
    };
    let config = match load_config(globals) {
        Ok(config) => config,
        Err(e) => return fail(exit_of(&e), e),
    };
    let opened = match open_store_read_only(globals, &config) {
        Ok(Some(opened)) => opened,
        Ok(None) => return fail(Exit::Usage, format!("unknown run {run_id}")),
        Err(e) => return fail(exit_of(&e), e),
    };
    let meta = match opened.journal.get_meta(&run_id) {
        Ok(Some(meta)) => meta,
        Ok(None) => return fail(Exit::Usage, format!("unknown run {run_id}")),
        Err(e) => return fail(Exit::Error, e),
    };
    let entries = match opened
        .journal
        .load(&run_id)
        .map_err(Error::from)
        .and_then(|raw| journal::decode_all(&raw).map_err(Error::from))
    {
        Ok(entries) => entries,
        Err(e) => return fail(Exit::Error, e),
    };
    let cost = CostReport::fold(entries.iter());
    let resolutions = journal::Resolutions::fold(entries.iter());
    let pending: Vec<Value> = entries
        .iter()
        .filter(|e| e.kind == journal::Kind::External && e.status == journal::Status::Suspended)
        .filter(|e| !resolutions.is_closed(e.seq))
        .map(|e| json!({ "key": e.name, "seq": e.seq, "prompt": e.value().and_then(|v| v.get("prompt").cloned()) }))
        .collect();
    let orchestrations = crate::orchestrator::journal_report(&entries);
    let tools = super::tool_report::tool_report(&entries);
    let segments = crate::engine::segment_ceilings(&entries, meta.segments, meta.budget_ceiling);
    if args.json {
        let listed: Vec<Value> = segments
            .iter()
            .map(|s| {
                json!({
                    "index": s.index,
                    "ceiling_usd": s.ceiling.map(|c| c.as_usd()),
                    "ceiling_nano_usd": s.ceiling.map(|c| c.nano_usd()),
                    "overridden": s.overridden,
                })
            })
            .collect();
        let mut out = json!({
            "meta": meta, "entries": entries, "pending": pending, "cost": cost, "segments": listed,
        });
        if !orchestrations.is_empty() {
            out["orchestrations"] = json!(orchestrations);
        }
        if !tools.is_empty() {
            out["tools"] = json!(tools);
        }
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Exit::Ok;
    }
    println!("run       {}", meta.run_id);
    println!("workflow  {}", crate::text::for_terminal_line(meta.name.as_deref().unwrap_or("-")));
    println!("status    {}", meta.status);
    println!("created   {}", utc(meta.created_at_ms));
    println!("segments  {}", meta.segments);
    for segment in &segments {
        let ceiling = segment.ceiling.map_or("none".into(), |c| c.to_string());
        let how = if segment.overridden { " (raised on resume)" } else { "" };
        println!("  {:>6}  ceiling {ceiling}{how}", segment.index);
    }
    println!("ceiling   {}", meta.budget_ceiling.map_or("none".into(), |c| c.to_string()));
    println!("spent     {} ({} tokens)", cost.total.cost, cost.total.usage.total_tokens());
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for entry in &entries {
        *counts.entry(format!("{} {}", entry.kind.as_str(), entry.status.as_str())).or_default() += 1;
    }
    println!("journal   {} entries", entries.len());
    for (what, n) in counts {
        println!("  {n:>6}  {what}");
    }
    for (model, line) in &cost.by_model {
        let model = crate::text::for_terminal_line(model);
        println!(
            "model     {model}: {} in {} calls, {} tokens",
            line.cost,
            line.entries,
            line.usage.total_tokens()
        );
    }
    if !cost.unpriced.is_empty() {
        println!("unpriced  {} entries (usage known, cost not)", cost.unpriced.len());
    }
    super::orchestrate::print_report(&orchestrations);
    super::tool_report::print_tool_report(&tools);
    for p in &pending {
        let prompt = p["prompt"].as_str().map_or(String::new(), |p| format!(" — {p}"));
        println!(
            "{}",
            escaped(&format!(
                "pending   {} (seq {}): cairn resolve {run_id} {} '<json>'{prompt}",
                p["key"],
                p["seq"],
                p["key"].as_str().unwrap_or("")
            ))
        );
    }
    Exit::Ok
}

pub(super) fn lint(globals: &Globals, args: &LintArgs) -> Exit {
    let (_, source) = match read_script(&args.file) {
        Ok(found) => found,
        Err(exit) => return exit,
    };
    // Linting needs the configured names, not the store: nothing is opened or created.
    let in_memory = load_config(globals).and_then(|config| {
        let opened = store::open("memory").map_err(Error::from)?;
        setup_over(globals, config, opened, None, None)
    });
    let (setup, dialect) = match in_memory {
        Ok(setup) => match dialect_of(&setup.engine, &args.file, args.dialect.as_deref()) {
            Ok(dialect) => (setup, dialect),
            Err(exit) => return exit,
        },
        Err(e) => return fail(exit_of(&e), e),
    };
    let context = lint_context(&setup);
    let diagnostics = dialect.check(&source, &context);
    if args.bound {
        let run_args = match parse_args(args.args.as_deref()) {
            Ok(value) => value,
            Err(exit) => return exit,
        };
        let bound =
            crate::script::bound::cost_bound(&setup.engine, dialect.as_ref(), &source, &run_args, None);
        if args.json {
            let both = json!({"diagnostics": diagnostics, "cost_bound": bound});
            println!("{}", serde_json::to_string_pretty(&both).unwrap_or_else(|_| "{}".into()));
        } else {
            print_diagnostics(&args.file, &diagnostics, false);
            println!("cost bound: {}", escaped(&bound.to_string()));
        }
    } else {
        print_diagnostics(&args.file, &diagnostics, args.json);
    }
    if diagnostics.iter().any(Diagnostic::is_error) { Exit::Rejected } else { Exit::Ok }
}

/// Text for a person, escaped for the terminal (see [`crate::text::for_terminal`]).
fn escaped(text: &str) -> std::borrow::Cow<'_, str> {
    crate::text::for_terminal(text)
}

/// `dropped branch 0: why`, without repeating the kind its label already names.
fn dropped_line(dropped: &crate::engine::Dropped) -> String {
    let what = match dropped.label.as_deref() {
        Some(label) if label.starts_with(dropped.kind.as_str()) => label.to_owned(),
        Some(label) => format!("{} {label}", dropped.kind),
        None if dropped.scope.is_empty() => dropped.kind.clone(),
        None => format!("{} at {}", dropped.kind, dropped.scope),
    };
    format!("dropped {what}: {}", dropped.error)
}

/// `YYYY-MM-DD HH:MM:SS` UTC for epoch milliseconds.
fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_formats_epoch_millis() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00");
        assert_eq!(super::utc(1_764_456_000_000), "2025-11-29 22:40:00");
    }
}

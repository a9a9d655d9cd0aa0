//! L6: the `cairn` command line. Parses flags with clap, runs one command, maps the outcome
//! to an exit code. Everything here is a thin shell over the library: results go to stdout,
//! progress and errors to stderr, one line per error.

/// Writes one line to stdout; a reader that went away (`| head`) is not an error.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// Writes one line to stderr; a closed stderr is not an error.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

mod calls;
mod cancel;
mod canon;
mod completions;
mod exit;
mod follow;
mod help;
mod init;
mod inspect;
mod inspect_read;
mod interrupts;
mod listing;
mod logging;
mod orchestrate;
mod plan;
mod progress;
mod runs;
mod serve;
mod setup;
mod table;
mod telemetry;
mod tool_report;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use exit::{Exit, fail};

#[derive(Debug, Parser)]
#[command(name = "cairn", version, about = "Durable, budget-bounded multi-agent LLM workflows")]
struct Cli {
    /// The store: sqlite:PATH (default sqlite:.cairn/cairn.db), jsonl:DIR or memory.
    #[arg(long, global = true)]
    store: Option<String>,
    /// The config file (default ./cairn.toml, optional).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Log diagnostics on stderr at this level (error, warn, info, debug, trace, or any
    /// RUST_LOG filter); overrides RUST_LOG. `serve` and `worker` log warnings by default.
    #[arg(long, global = true)]
    log_level: Option<String>,
    /// How diagnostics are written: text lines, or one JSON object a line.
    #[arg(long, global = true, value_enum, default_value_t = logging::LogFormat::Text)]
    log_format: logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a workflow script.
    #[command(after_help = help::RUN)]
    Run(runs::RunArgs),
    /// Hand a goal to a dynamic orchestrator that spawns agents with the configured profiles.
    #[command(after_help = help::ORCHESTRATE)]
    Orchestrate(orchestrate::OrchestrateArgs),
    /// Resume a run from its journal: completed calls replay, the rest run live.
    #[command(after_help = help::RESUME)]
    Resume(runs::ResumeArgs),
    /// List runs.
    #[command(after_help = help::RUNS)]
    Runs(inspect::ListArgs),
    /// Show a run: meta, journal summary and cost report.
    #[command(after_help = help::INSPECT)]
    Inspect(inspect::InspectArgs),
    /// Lint a script; exit 6 when it has errors.
    #[command(after_help = help::LINT)]
    Lint(inspect::LintArgs),
    /// Replay a run strictly (for CI): exit 7 if any call would run live.
    #[command(after_help = help::REPLAY)]
    Replay(runs::ReplayArgs),
    /// Resolve a suspended run's await_external(KEY) with a JSON value.
    #[command(after_help = help::RESOLVE)]
    Resolve(runs::ResolveArgs),
    /// Print the API card of a script dialect, and with --profiles the profile card.
    #[command(after_help = help::CARD)]
    Card(plan::CardArgs),
    /// Have a planner model write a workflow script for a goal; with --run, run it.
    #[command(after_help = help::PLAN)]
    Plan(plan::PlanArgs),
    /// Claim and drive queued runs until stopped (SIGTERM drains: in-flight runs finish).
    #[command(after_help = help::WORKER)]
    Worker(worker::WorkerArgs),
    /// Queue a script's run for `cairn worker` to drive; prints its run id.
    #[command(after_help = help::ENQUEUE)]
    Enqueue(worker::EnqueueArgs),
    /// Cancel a run from any process: at once when nobody drives it, through its worker when one does.
    #[command(after_help = help::CANCEL)]
    Cancel(cancel::CancelArgs),
    /// Serve the HTTP API: queue scripts, follow runs live (SSE), resolve, cancel, resume.
    #[command(after_help = help::SERVE)]
    Serve(serve::ServeArgs),
    /// Print the canonical JSON (RFC 8785) and content key of the JSON on stdin.
    #[command(after_help = help::CANON)]
    Canon,
    /// Write a commented cairn.toml and a sample script; never overwrites a file.
    #[command(after_help = help::INIT)]
    Init(init::InitArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_help = help::COMPLETIONS)]
    Completions(completions::CompletionsArgs),
}

/// Runs the CLI with the process's arguments.
pub(crate) fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() { Exit::Usage } else { Exit::Ok };
            let _ = err.print();
            return code.into();
        }
    };
    if !matches!(
        cli.command,
        Command::Run(_)
            | Command::Resume(_)
            | Command::Replay(_)
            | Command::Plan(_)
            | Command::Worker(_)
            | Command::Orchestrate(_)
            | Command::Serve(_)
    ) {
        // A command that only prints ends quietly when its reader goes away (`| head`), as
        // Unix tools do. The commands that drive a run keep the signal ignored and write with
        // `out!`/`errln!`, so a closed pipe never interrupts a run.
        restore_sigpipe();
    }
    // A write past the process's file-size limit (`ulimit -f`) fails with EFBIG, which the
    // store reports as a typed `store_io` error with the resume command, instead of the
    // default SIGXFSZ killing the process mid-write.
    ignore_sigxfsz();
    let service = matches!(cli.command, Command::Worker(_) | Command::Serve(_));
    if let Err(e) = logging::install(cli.log_level.as_deref(), cli.log_format, service) {
        return fail(Exit::Usage, e).into();
    }
    let traced = matches!(
        cli.command,
        Command::Run(_)
            | Command::Resume(_)
            | Command::Orchestrate(_)
            | Command::Worker(_)
            | Command::Serve(_)
    );
    if traced && let Err(e) = telemetry::install() {
        return fail(Exit::Usage, e).into();
    }
    let globals = setup::Globals { store: cli.store, config: cli.config };
    let exit = match cli.command {
        Command::Init(args) => init::init(&args),
        Command::Completions(args) => {
            completions::completions(&args, <Cli as clap::CommandFactory>::command())
        }
        Command::Canon => canon::run(&mut std::io::stdin().lock(), &mut std::io::stdout().lock()),
        Command::Card(args) => setup::with_runtime(|| plan::card(&globals, &args)),
        Command::Plan(args) => setup::with_runtime(|| plan::plan(&globals, &args)),
        Command::Lint(args) => inspect::lint(&globals, &args),
        Command::Runs(args) => inspect::list(&globals, &args),
        Command::Inspect(args) => inspect::inspect(&globals, &args),
        Command::Resolve(args) => runs::resolve(&globals, &args),
        Command::Cancel(args) => cancel::cancel(&globals, &args),
        Command::Run(args) => setup::with_runtime(|| runs::run(&globals, &args)),
        Command::Orchestrate(args) => setup::with_runtime(|| orchestrate::run(&globals, &args)),
        Command::Resume(args) => setup::with_runtime(|| runs::resume(&globals, &args)),
        Command::Replay(args) => setup::with_runtime(|| runs::replay(&globals, &args)),
        Command::Worker(args) => setup::with_runtime(|| worker::worker(&globals, &args)),
        Command::Enqueue(args) => setup::with_runtime(|| worker::enqueue(&globals, &args)),
        Command::Serve(args) => setup::with_runtime(|| serve::serve(&globals, &args)),
    };
    exit.into()
}

#[cfg(unix)]
fn restore_sigpipe() {
    // SAFETY: resetting a signal's disposition to its default before any thread is started;
    // no handler runs Rust code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn restore_sigpipe() {}

#[cfg(unix)]
fn ignore_sigxfsz() {
    // SAFETY: setting a signal's disposition to ignore before any thread is started; no
    // handler runs Rust code.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

#[cfg(not(unix))]
fn ignore_sigxfsz() {}

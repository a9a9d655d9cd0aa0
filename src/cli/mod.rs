//! L6: the `cairn` command line. Parses flags with clap, runs one command, maps the outcome
//! to an exit code. Everything here is a thin shell over the library: results go to stdout,
//! progress and errors to stderr, one line per error.

mod canon;
mod config;
mod price_config;
mod progress;
mod runs;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::store::RunStatus;

/// Exit codes, as DESIGN.md fixes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// The command succeeded (a run settled `ok`).
    Ok = 0,
    /// The run or command failed.
    Error = 1,
    /// Bad usage, flags, input or configuration.
    Usage = 2,
    /// The run settled `exhausted`.
    Exhausted = 3,
    /// The run settled `suspended`.
    Suspended = 4,
    /// The run was cancelled.
    Cancelled = 5,
    /// The script was rejected by lint or compile.
    Rejected = 6,
    /// A replay-strict check found a live call.
    ReplayMiss = 7,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit as u8)
    }
}

impl Exit {
    /// The exit code of a settled run.
    pub fn of_status(status: RunStatus) -> Exit {
        match status {
            RunStatus::Ok => Exit::Ok,
            RunStatus::Error | RunStatus::Running => Exit::Error,
            RunStatus::Exhausted => Exit::Exhausted,
            RunStatus::Suspended => Exit::Suspended,
            RunStatus::Cancelled => Exit::Cancelled,
        }
    }
}

#[derive(Debug, Parser)]
#[command(name = "cairn", version, about = "Durable, budget-bounded multi-agent LLM workflows")]
struct Cli {
    /// The store: sqlite:PATH (default sqlite:.cairn/cairn.db), jsonl:DIR or memory.
    #[arg(long, global = true)]
    store: Option<String>,
    /// The config file (default ./cairn.toml, optional).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a workflow script.
    Run(runs::RunArgs),
    /// Resume a run from its journal: completed calls replay, the rest run live.
    Resume(runs::ResumeArgs),
    /// List runs.
    Runs(runs::ListArgs),
    /// Show a run: meta, journal summary and cost report.
    Inspect(runs::InspectArgs),
    /// Lint a script; exit 6 when it has errors.
    Lint(runs::LintArgs),
    /// Replay a run strictly (for CI): exit 7 if any call would run live.
    Replay(runs::ReplayArgs),
    /// Resolve a suspended run's await_external(KEY) with a JSON value.
    Resolve(runs::ResolveArgs),
    /// Print the API card of the script dialect.
    Card,
    /// Print the canonical JSON (RFC 8785) and content key of the JSON on stdin.
    Canon,
}

/// Runs the CLI with the process's arguments.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() { Exit::Usage } else { Exit::Ok };
            let _ = err.print();
            return code.into();
        }
    };
    let globals = runs::Globals { store: cli.store, config: cli.config };
    let exit = match cli.command {
        Command::Canon => canon::run(&mut std::io::stdin().lock(), &mut std::io::stdout().lock()),
        Command::Card => {
            print!("{}", crate::script::api_card());
            Exit::Ok
        }
        Command::Lint(args) => runs::lint(&globals, &args),
        Command::Runs(args) => runs::list(&globals, &args),
        Command::Inspect(args) => runs::inspect(&globals, &args),
        Command::Resolve(args) => runs::resolve(&globals, &args),
        Command::Run(args) => runs::with_runtime(|| runs::run(&globals, &args)),
        Command::Resume(args) => runs::with_runtime(|| runs::resume(&globals, &args)),
        Command::Replay(args) => runs::with_runtime(|| runs::replay(&globals, &args)),
    };
    exit.into()
}

/// Prints a one-line error on stderr and returns `exit`.
fn fail(exit: Exit, message: impl std::fmt::Display) -> Exit {
    let text = message.to_string();
    eprintln!("cairn: {}", text.lines().next().unwrap_or_default());
    exit
}

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

mod cancel;
mod canon;
mod completions;
mod config;
mod help;
mod host_fn;
mod init;
mod orchestrate;
mod plan;
mod price_config;
mod progress;
mod runs;
mod serve;
mod tool_report;
mod tools_config;
mod worker;
mod workflows_config;

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
            RunStatus::Error | RunStatus::Running | RunStatus::Queued => Exit::Error,
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
    Runs(runs::ListArgs),
    /// Show a run: meta, journal summary and cost report.
    #[command(after_help = help::INSPECT)]
    Inspect(runs::InspectArgs),
    /// Lint a script; exit 6 when it has errors.
    #[command(after_help = help::LINT)]
    Lint(runs::LintArgs),
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
pub fn main() -> ExitCode {
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
    let globals = runs::Globals { store: cli.store, config: cli.config };
    let exit = match cli.command {
        Command::Init(args) => init::init(&args),
        Command::Completions(args) => completions::completions(&args),
        Command::Canon => canon::run(&mut std::io::stdin().lock(), &mut std::io::stdout().lock()),
        Command::Card(args) => runs::with_runtime(|| plan::card(&globals, &args)),
        Command::Plan(args) => runs::with_runtime(|| plan::plan(&globals, &args)),
        Command::Lint(args) => runs::lint(&globals, &args),
        Command::Runs(args) => runs::list(&globals, &args),
        Command::Inspect(args) => runs::inspect(&globals, &args),
        Command::Resolve(args) => runs::resolve(&globals, &args),
        Command::Cancel(args) => cancel::cancel(&globals, &args),
        Command::Run(args) => runs::with_runtime(|| runs::run(&globals, &args)),
        Command::Orchestrate(args) => runs::with_runtime(|| orchestrate::run(&globals, &args)),
        Command::Resume(args) => runs::with_runtime(|| runs::resume(&globals, &args)),
        Command::Replay(args) => runs::with_runtime(|| runs::replay(&globals, &args)),
        Command::Worker(args) => runs::with_runtime(|| worker::worker(&globals, &args)),
        Command::Enqueue(args) => runs::with_runtime(|| worker::enqueue(&globals, &args)),
        Command::Serve(args) => runs::with_runtime(|| serve::serve(&globals, &args)),
    };
    exit.into()
}

/// Prints a one-line error on stderr and returns `exit`.
fn fail(exit: Exit, message: impl std::fmt::Display) -> Exit {
    let text = message.to_string();
    errln!("cairn: {}", crate::text::for_terminal(text.lines().next().unwrap_or_default()));
    exit
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

/// The signals that interrupt a live run: Ctrl-C (SIGINT) and SIGTERM (what `timeout`,
/// systemd, Docker and Kubernetes send). The first stops the run; a second ends the process.
pub(super) struct Interrupts {
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl std::fmt::Debug for Interrupts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Interrupts")
    }
}

impl Interrupts {
    /// Starts listening (on the current tokio runtime).
    pub(super) fn listen() -> Interrupts {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Interrupts {
                int: signal(SignalKind::interrupt()).ok(),
                term: signal(SignalKind::terminate()).ok(),
            }
        }
        #[cfg(not(unix))]
        Interrupts {}
    }

    /// Waits for the next interrupt and names it.
    pub(super) async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
                match signal {
                    Some(signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                _ = recv(&mut self.int) => "interrupted",
                _ = recv(&mut self.term) => "terminated",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "interrupted"
        }
    }
}

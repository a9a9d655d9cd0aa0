//! L6: the `cairn` command line. Parses flags with clap, runs one command, maps the outcome
//! to an exit code. Everything here is a thin shell over the library.

mod canon;
mod config;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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

#[derive(Debug, Parser)]
#[command(name = "cairn", version, about = "Durable, budget-bounded multi-agent LLM workflows")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
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
    let exit = match cli.command {
        Command::Canon => canon::run(&mut std::io::stdin().lock(), &mut std::io::stdout().lock()),
    };
    exit.into()
}

/// Prints a one-line error on stderr and returns `exit`.
fn fail(exit: Exit, message: impl std::fmt::Display) -> Exit {
    eprintln!("cairn: {message}");
    exit
}

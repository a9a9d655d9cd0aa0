//! `cairn worker` (claim and drive queued runs until stopped) and `cairn enqueue` (queue a
//! script's run for the workers, without running it).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::exit::{Exit, fail};
use super::interrupts::Interrupts;
use super::setup::{self, Globals};
use crate::engine::{RunOptions, Script, Worker, WorkerOptions};

#[derive(Debug, Args)]
pub(super) struct WorkerArgs {
    /// How many runs this worker drives at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// How long a claim lasts unrenewed, in ms: a worker that dies holds its runs this long
    /// before another worker takes them over. Keep it near the run lease's ttl
    /// (`CAIRN_LEASE_TTL_MS`, 30 s by default).
    #[arg(long, default_value_t = 30_000)]
    claim_ttl_ms: u64,
    /// No per-run lines on stderr.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Debug, Args)]
pub(super) struct EnqueueArgs {
    /// The workflow script (.rhai).
    file: PathBuf,
    /// The run's arguments: JSON, or @FILE to read JSON from a file.
    #[arg(long)]
    args: Option<String>,
    /// The budget ceiling in USD.
    #[arg(long, allow_negative_numbers = true)]
    budget: Option<f64>,
    /// The run id (default: a fresh ULID).
    #[arg(long)]
    run_id: Option<String>,
    /// The default model of its calls, as provider:model (stored with the run).
    #[arg(long)]
    model: Option<String>,
}

/// `cairn worker`: claims and drives queued runs until SIGTERM or SIGINT, then finishes the
/// runs in flight and exits.
pub(super) async fn worker(globals: &Globals, args: &WorkerArgs) -> Exit {
    let setup = match setup::setup(globals, None) {
        Ok(setup) => setup,
        Err(e) => return fail(setup::exit_of(&e), e),
    };
    if args.claim_ttl_ms == 0 {
        return fail(Exit::Usage, "--claim-ttl-ms must be positive");
    }
    let options = WorkerOptions {
        concurrency: args.concurrency.max(1),
        claim_ttl: Duration::from_millis(args.claim_ttl_ms),
        ..WorkerOptions::default()
    };
    let worker = match Worker::new(setup.engine.clone(), options) {
        Ok(worker) => worker,
        Err(e) => return fail(setup::exit_of(&e), e),
    };
    if !args.quiet {
        errln!(
            "cairn worker: driving queued runs, {} at a time (SIGTERM drains and exits)",
            args.concurrency.max(1)
        );
    }
    let shutdown = CancellationToken::new();
    let mut interrupts = Interrupts::listen();
    let stop = shutdown.clone();
    let quiet = args.quiet;
    tokio::spawn(async move {
        let why = interrupts.next().await;
        if !quiet {
            errln!("cairn worker: {why}; finishing the runs in flight, claiming nothing new");
        }
        stop.cancel();
        // A second signal does not wait for the runs: their claims expire and other workers
        // resume them from their journals.
        interrupts.next().await;
        std::process::exit(Exit::Cancelled as i32);
    });
    let report = worker.run_until(shutdown).await;
    if !args.quiet {
        errln!(
            "cairn worker: stopped: {} settled, {} suspended, {} taken over, {} deferred, {} failed",
            report.settled,
            report.suspended,
            report.takeovers,
            report.deferred,
            report.failed
        );
    }
    Exit::Ok
}

/// `cairn enqueue FILE`: stores the run (status `queued`) and prints its id.
pub(super) async fn enqueue(globals: &Globals, args: &EnqueueArgs) -> Exit {
    let (name, source) = match setup::read_script(&args.file) {
        Ok(found) => found,
        Err(exit) => return exit,
    };
    let run_args = match setup::parse_args(args.args.as_deref()) {
        Ok(value) => value,
        Err(exit) => return exit,
    };
    let run_id = match args.run_id.as_deref().map(setup::parse_run_id).transpose() {
        Ok(id) => id,
        Err(exit) => return exit,
    };
    let setup = match setup::setup(globals, args.model.as_deref()) {
        Ok(setup) => setup,
        Err(e) => return fail(setup::exit_of(&e), e),
    };
    let extension = args.file.extension().and_then(|e| e.to_str()).unwrap_or("rhai");
    let dialect = setup.engine.dialect_for_extension(extension).map(|d| d.name()).unwrap_or("rhai");
    let options = RunOptions { budget_usd: args.budget, run_id, ..RunOptions::default() };
    match setup.engine.enqueue_script(&Script::new(dialect, &name, &source), run_args, options) {
        Ok(run_id) => {
            out!("{run_id}");
            Exit::Ok
        }
        Err(e) => {
            let exit = if e.code == crate::error::ErrorCode::Validation {
                Exit::Rejected
            } else {
                setup::exit_of(&e)
            };
            fail(exit, e)
        }
    }
}

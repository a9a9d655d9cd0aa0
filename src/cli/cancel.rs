//! `cairn cancel RUN`: cancels a run from any process sharing its store. A run nobody drives
//! is cancelled at once; a run a `cairn worker` (or `cairn serve`) drives is asked to cancel
//! through the store, and its worker cancels it within half a second.

use std::time::{Duration, Instant};

use clap::Args;

use super::exit::{Exit, fail};
use super::setup::{self, Globals};
use crate::engine::CancelOutcome;
use crate::store::RunStatus;

#[derive(Debug, Args)]
pub(super) struct CancelArgs {
    /// The run to cancel.
    run: String,
    /// Wait until the run has settled (at most this many seconds), and exit with its status's
    /// code (5 for `cancelled`).
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "30")]
    wait: Option<u64>,
}

/// `cairn cancel RUN [--wait [SECONDS]]`.
pub(super) fn cancel(globals: &Globals, args: &CancelArgs) -> Exit {
    let run_id = match setup::parse_run_id(&args.run) {
        Ok(id) => id,
        Err(exit) => return exit,
    };
    let setup = match setup::setup(globals, None) {
        Ok(setup) => setup,
        Err(e) => return fail(setup::exit_of(&e), e),
    };
    match setup.engine.cancel_run(&run_id) {
        Ok(CancelOutcome::Cancelled) => {
            out!("cancelled run {run_id}");
            if args.wait.is_some() { Exit::Cancelled } else { Exit::Ok }
        }
        Ok(CancelOutcome::Requested) => {
            out!("asked the worker driving run {run_id} to cancel it");
            let Some(seconds) = args.wait else { return Exit::Ok };
            let deadline = Instant::now() + Duration::from_secs(seconds);
            loop {
                match setup.engine.journal_store().get_meta(&run_id) {
                    Ok(Some(meta)) if settled(meta.status) => {
                        out!("run {run_id} settled {}", meta.status);
                        return Exit::of_status(meta.status);
                    }
                    Ok(_) => {}
                    Err(e) => return fail(Exit::Error, e),
                }
                if Instant::now() >= deadline {
                    return fail(Exit::Error, format!("run {run_id} has not settled within {seconds} s"));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(CancelOutcome::Settled(status)) => {
            fail(Exit::Error, format!("run {run_id} is {status}; a settled run cannot be cancelled"))
        }
        Err(e) => fail(setup::exit_of(&e), e),
    }
}

fn settled(status: RunStatus) -> bool {
    matches!(status, RunStatus::Ok | RunStatus::Error | RunStatus::Cancelled | RunStatus::Exhausted)
}

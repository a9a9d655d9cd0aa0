//! Following a live run: progress on stderr, cancellation on an interrupt, and the outcome
//! reported on stdout and stderr with its exit code.

use super::exit::Exit;
use super::progress;
use crate::engine::{RunHandle, RunOutcome};
use crate::error::{Error, ErrorCode};
/// Waits for a run with progress on stderr, cancelling it on Ctrl-C.
pub(super) async fn follow(mut handle: RunHandle, quiet: bool) -> Result<RunOutcome, Error> {
    // Listening before anything is printed: once "running" shows, a signal is handled.
    let mut interrupts = super::interrupts::Interrupts::listen();
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

pub(super) async fn handle_result(handle: &RunHandle) -> Result<RunOutcome, Error> {
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

/// Text for a person, escaped for the terminal (see [`crate::text::for_terminal`]).
pub(super) fn escaped(text: &str) -> std::borrow::Cow<'_, str> {
    crate::text::for_terminal(text)
}

/// `dropped branch 0: why`, without repeating the kind its label already names.
pub(super) fn dropped_line(dropped: &crate::engine::Dropped) -> String {
    let what = match dropped.label.as_deref() {
        Some(label) if label.starts_with(dropped.kind.as_str()) => label.to_owned(),
        Some(label) => format!("{} {label}", dropped.kind),
        None if dropped.scope.is_empty() => dropped.kind.clone(),
        None => format!("{} at {}", dropped.kind, dropped.scope),
    };
    format!("dropped {what}: {}", dropped.error)
}

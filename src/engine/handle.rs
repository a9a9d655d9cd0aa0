//! `RunHandle`: a caller's handle on a running (or settled) run: its events, cancellation,
//! resolving its waits, and its outcome.

use std::sync::Arc;

use serde_json::Value;

use super::events::{self, EventStream};
use super::outcome::RunOutcome;
use super::run::RunState;
use crate::error::Error;
use crate::store::RunId;

/// A running (or settled) run.
#[derive(Debug)]
pub struct RunHandle {
    pub(super) run_id: RunId,
    pub(super) state: Arc<RunState>,
    pub(super) done: tokio::sync::watch::Receiver<Option<Result<RunOutcome, Error>>>,
    /// Keeps every event buffered for a later [`RunHandle::events`]; released when the
    /// handle is dropped or consumed by [`RunHandle::result`].
    pub(super) claim: Option<EventsClaim>,
}

/// A handle's claim on its run's event buffer.
#[derive(Debug)]
pub(crate) struct EventsClaim(Arc<events::EventLog>);

impl EventsClaim {
    /// Takes over the claim the log was created with.
    pub(crate) fn new(log: Arc<events::EventLog>) -> EventsClaim {
        EventsClaim(log)
    }
}

impl Drop for EventsClaim {
    fn drop(&mut self) {
        self.0.release_claim();
    }
}

impl RunHandle {
    /// The run's id.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The run's events, from the first (gapless from the handle's creation).
    ///
    /// The run buffers its events for this while the handle lives; open streams keep only
    /// what they have not read yet. Read the stream, or drop the handle (or call
    /// [`RunHandle::result`], which consumes it), to let the run release them.
    pub fn events(&self) -> EventStream {
        self.state.events.subscribe()
    }

    /// Cancels the run: live streams are severed, in-flight calls journal as `cancelled`,
    /// and the run settles `cancelled`.
    pub fn cancel(&self) {
        self.state.cancel();
    }

    /// Resolves an `await_external` wait of this run. Returns whether this attempt closed
    /// it (`false` when an earlier attempt already had).
    ///
    /// # Errors
    /// `validation` when the run has no wait with that key; `internal` for a store failure.
    pub fn resolve_external(&self, key: &str, value: Value) -> Result<bool, Error> {
        self.state.resolve_external(key, value)
    }

    /// Gives up the handle's claim on the run's events without consuming it: streams opened
    /// before keep theirs, and from now on no event is built or buffered for a stream that
    /// nobody opened. For a caller that waits with [`RunHandle::wait`] and never reads events.
    pub fn release_events(&mut self) {
        self.claim = None;
    }

    /// Waits for the run to settle. Consuming the handle releases its claim on the run's
    /// events: streams opened before keep theirs, and no event is buffered for anyone else.
    ///
    /// # Errors
    /// `internal` when the run's task panicked (a bug).
    pub async fn result(mut self) -> Result<RunOutcome, Error> {
        self.claim = None;
        self.wait().await
    }

    /// Waits for the run to settle without giving up the handle (so it can still be
    /// cancelled from elsewhere while waiting).
    ///
    /// # Errors
    /// `internal` when the run's task panicked (a bug).
    ///
    /// # Cancel safety
    /// Cancel-safe: the run goes on, and a later call waits again.
    pub async fn wait(&self) -> Result<RunOutcome, Error> {
        let mut done = self.done.clone();
        loop {
            if let Some(outcome) = done.borrow_and_update().clone() {
                return outcome;
            }
            if done.changed().await.is_err() {
                return Err(Error::internal("the run's task ended without an outcome"));
            }
        }
    }
}

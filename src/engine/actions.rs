//! Who asked: the name of the service token that started, resumed, resolved or cancelled a run,
//! journaled as the `by` of the entry that records it (never part of a key, so it changes no
//! call's identity and a journal without it reads as before).
//!
//! - start and resume: a `run_action` decision (a segment fact no call matches), appended under
//!   the run's lease by the process that queues the run, before any worker drives the segment;
//! - resolve: the `resolution` entry (through the run's inbox when another process drives it);
//! - cancel: the cancellation's settlement decision. When a worker drives the run, the request
//!   goes through the queue's cancel mark, so the requester's name waits in the transcript store
//!   (`<run>/cancel_by`) for the driver that settles the run `cancelled`, which journals it and
//!   deletes it.
//!
//! The CLI and the embedding API name nobody: their entries have no `by`.

use super::registry::{Engine, EngineInner};
use crate::error::Error;
use crate::journal::{self, ACTION_DECISION, ContentKey, Entry, Kind, ScopePath, Seq, Status};
use crate::store::{Lease, RunId};

/// What a `run_action` decision records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunAction {
    /// The run was queued.
    Start,
    /// The run was put back in the queue to resume.
    Resume,
}

impl RunAction {
    /// Its name in the journal.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunAction::Start => "start",
            RunAction::Resume => "resume",
        }
    }
}

/// The `run_action` decision of `action` at segment `segment`, by `by`.
pub(super) fn action_entry(action: RunAction, segment: u32, by: &str) -> Entry {
    let identity = serde_json::json!({ "kind": "decision", "type": ACTION_DECISION, "segment": segment });
    let key = journal::content_key(&identity).unwrap_or(ContentKey::from_bytes([0; 32]));
    let mut entry = Entry::new(Seq(0), Kind::Decision, Status::Ok, ScopePath::root(), key, 0);
    entry.set_value(Some(&journal::action_value(action.as_str(), segment)));
    entry.by = Some(journal::intern(by));
    entry
}

/// Appends the `run_action` decision to a run nobody drives (this process holds its lease).
pub(super) fn append_action(
    engine: &EngineInner,
    run: &RunId,
    action: RunAction,
    segment: u32,
    by: &str,
    lease: Option<&Lease>,
) -> Result<(), Error> {
    let last = crate::store::last_seq(engine.journal.as_ref(), run)?;
    let mut entry = action_entry(action, segment, by);
    entry.seq = Seq(last + 1);
    entry.ts = Some(engine.clock.now_ms());
    engine.journal.append(run, &[journal::encode(&entry)?], lease)?;
    Ok(())
}

fn cancel_ref(run: &RunId) -> String {
    format!("{run}/cancel_by")
}

/// Leaves the name of who asked a driven run to cancel for its driver. A request naming nobody
/// (the CLI, or a worker cancelling a run it parked as it was asked to) leaves an earlier
/// name in place: that request is still the one being carried out.
pub(super) fn leave_cancel_requester(
    engine: &EngineInner,
    run: &RunId,
    by: Option<&str>,
) -> Result<(), Error> {
    if let Some(name) = by {
        engine.transcripts.put(&cancel_ref(run), name.as_bytes())?;
    }
    Ok(())
}

/// Takes the name a cancel request left for the driver settling the run `cancelled`.
pub(super) fn take_cancel_requester(engine: &EngineInner, run: &RunId) -> Option<journal::Name> {
    let bytes = engine.transcripts.get(&cancel_ref(run)).ok()??;
    let _ = engine.transcripts.delete(&cancel_ref(run));
    std::str::from_utf8(&bytes).ok().filter(|n| !n.is_empty()).map(journal::intern)
}

impl Engine {
    /// Journals that the service token named `by` put a run nobody drives back in the queue to
    /// resume (a `run_action` decision before the segment), under the run's lease.
    ///
    /// # Errors
    /// `config` for an unknown run; `run_busy` when another process drives it; the store's
    /// failure.
    pub fn record_resume(&self, run: &RunId, by: &str) -> Result<(), Error> {
        let engine = &self.inner;
        let held = super::lease::acquire(engine, run)?;
        let written = (|| {
            let meta =
                engine.journal.get_meta(run)?.ok_or_else(|| Error::config(format!("unknown run {run}")))?;
            append_action(engine, run, RunAction::Resume, meta.segments, by, held.as_ref())
        })();
        super::lease::release(engine, held.as_ref());
        written
    }
}

//! What a killed segment left `running` and the run never reached again: when the run
//! settles, each such entry ends with a terminal entry of its own (`cancelled`, its error
//! saying it was abandoned), so no entry of a settled run stays `running`. An abandoned agent
//! call's entry holds the turns its checkpoint kept that no terminal entry holds (priced at its
//! model), so the run's cost report counts what it may have paid; the checkpoint is then
//! marked journaled, so nothing counts those turns twice.
//!
//! Only entries the segment read back are considered: a call of this segment ends itself.
//! An entry is still open when no later entry names it as its target (neither a rerun's
//! `running` entry nor a terminal entry): the segment's journal summary keeps those.

use std::sync::Arc;

use super::EngineInner;
use super::carry;
use super::ctx::Ctx;
use crate::error::{Error, ErrorCode};
use crate::journal::{Entry, Kind, Status};
use crate::money::Money;
use crate::store::RunId;

/// A terminal entry for an abandoned `running` entry, and the checkpoint usage it covers.
pub(super) struct Abandoned {
    pub(super) entry: Entry,
    /// The checkpoint whose turns terminal entries now hold, with its whole usage (what
    /// [`carry::mark_journaled`] records).
    pub(super) covered: Option<(String, carry::Covered)>,
}

/// The terminal entries for `open`, the `running` entries read back that nothing ended.
pub(super) fn abandoned(engine: &EngineInner, run_id: &RunId, open: &[Arc<Entry>]) -> Vec<Abandoned> {
    let mut out = Vec::new();
    for running in open {
        if running.status != Status::Running {
            continue;
        }
        let mut entry = Ctx::terminal_for(running, Status::Cancelled);
        entry.error = Some(Error::new(
            ErrorCode::Cancelled,
            "abandoned: the segment that ran this call was killed, and the run settled without reaching it again",
        ));
        let mut covered = None;
        if running.kind == Kind::Agent {
            let reference = carry::checkpoint_ref(run_id, running);
            let checkpoint = carry::checkpoint_at(engine, &reference);
            let requested = carry::requested(engine, running);
            let spend = checkpoint
                .as_ref()
                .and_then(|c| {
                    carry::unjournaled(engine.transcripts.as_ref(), &reference, false, Some(c), requested)
                })
                .unwrap_or_default();
            entry.usage = Some(spend.usage());
            // What its turns cost, each at the model that served it (a failover's included).
            entry.cost = if spend.is_empty() { requested.1.map(|_| Money::ZERO) } else { spend.cost() };
            let models: Vec<&str> = spend.models().collect();
            entry.served_by = match models.as_slice() {
                [one] => Some(crate::journal::intern(one)),
                _ => running.model.clone(),
            };
            if models.len() > 1 {
                entry.attempts = spend.into_records();
            }
            covered = checkpoint.map(|c| (reference, carry::Covered::of(&c)));
        }
        out.push(Abandoned { entry, covered });
    }
    out
}

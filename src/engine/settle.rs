//! Settling a segment: the outcome decided from how the workflow ended and why the run
//! stopped, the settlement journaled (a `decision` entry) before run meta follows it, the
//! lease given up, and the outcome itemized (dropped work, pending waits, the cost report as
//! a fold over the whole journal).

use std::sync::atomic::Ordering;

use serde_json::Value;

use super::events::EventKind;
use super::outcome::{Dropped, RunOutcome};
use super::run::{RunState, Stop};
use super::writer::Durability;
use crate::error::{Error, ErrorCode};
use crate::journal::{self, ContentKey, Entry, Kind, Orphan, ScopePath, Seq, Status};
use crate::store::{RunMeta, RunStatus};

impl RunState {
    /// Decides the outcome, journals the settlement and updates run meta.
    pub(super) fn settle(&self, mut meta: RunMeta, value: Result<Value, Error>) -> RunOutcome {
        // The segment's call records reach the store before its outcome is told.
        self.call_records.flush();
        let stop = self.stop_reason();
        let exhausted = self.exhausted.load(Ordering::SeqCst);
        let (status, value, error) = match (stop, value) {
            (Some(Stop::Suspended), Err(_)) => (RunStatus::Suspended, None, None),
            (Some(Stop::Cancelled), Err(e)) | (Some(Stop::Deadline), Err(e)) => {
                (RunStatus::Cancelled, None, Some(e))
            }
            (_, Ok(value)) if exhausted => (RunStatus::Exhausted, Some(value), None),
            (_, Err(e)) if exhausted || e.code == ErrorCode::BudgetExhausted => {
                (RunStatus::Exhausted, None, Some(e))
            }
            (_, Ok(value)) => (RunStatus::Ok, Some(value), None),
            (_, Err(e)) => (RunStatus::Error, None, Some(e)),
        };
        let (mut status, mut value, mut error) = (status, value, error);
        let refused = self.rekeys.refusal();
        let rekey_refused = refused.is_some();
        if let Some(refusal) = refused {
            (status, value, error) = (RunStatus::Error, None, Some(refusal));
        }
        // A refused re-key stopped this segment before it paid for what re-keys: the run keeps the
        // status it had (suspended, error, ...) and the script it had (an edit a refused resume
        // brought is not stored), and nothing settles it.
        if rekey_refused
            && !self.dry_run
            && let Some(before) = &self.before
        {
            before.restore(&mut meta);
            meta.updated_at_ms = self.now_ms();
            if let Err(e) = self.engine.journal.put_meta(&meta, self.lease.as_ref()) {
                error.get_or_insert(e.into());
            }
        }
        if !self.dry_run && !rekey_refused && status != RunStatus::Suspended {
            self.end_abandoned(&mut error);
        }
        if !self.dry_run && !rekey_refused {
            let identity = serde_json::json!({ "kind": "decision", "type": journal::SETTLE_DECISION });
            let key = journal::content_key(&identity).unwrap_or(ContentKey::from_bytes([0; 32]));
            let mut entry = Entry::new(Seq(0), Kind::Decision, Status::Ok, ScopePath::root(), key, 0);
            let mut settled = journal::settle_value(status);
            // The value's key, so a strict replay can tell a different outcome from the same one.
            if let (Some(v), Some(map)) = (&value, settled.as_object_mut())
                && let Ok(key) = journal::content_key(v)
            {
                map.insert("value_key".into(), Value::from(key.to_hex()));
            }
            // Why it failed, journaled with the decision: what `GET /v1/runs/{id}`, the
            // `outcome` event and `cairn inspect` show.
            if let (Some(e), Some(map)) = (&error, settled.as_object_mut())
                && status != RunStatus::Ok
            {
                let at = self.writer.with_summary(|summary| summary.failed_at(e));
                map.insert(
                    "error".into(),
                    serde_json::json!({ "code": e.code, "message": e.message, "where": at }),
                );
                // Stopped by a bound timing decided: a reproduction judges it by this.
                if status == RunStatus::Error && self.script_time_tripped.load(Ordering::SeqCst) {
                    map.insert("stopped_by".into(), Value::from(journal::STOPPED_BY_SCRIPT_TIME));
                }
            }
            entry.set_value(Some(&settled));
            // A cancel the service asked for names its token (left for this driver).
            if status == RunStatus::Cancelled && stop == Some(Stop::Cancelled) {
                entry.by = super::actions::take_cancel_requester(&self.engine, &self.run_id);
            }
            let written = self.append_one(entry, Durability::Awaited);
            meta.status = status;
            meta.updated_at_ms = self.now_ms();
            match written {
                // The journal holds the settlement (and, before it, everything this segment
                // queued): the meta row may follow.
                Ok(_) => {
                    if let Err(e) = self.engine.journal.put_meta(&meta, self.lease.as_ref()) {
                        error.get_or_insert(e.into());
                    }
                }
                // A journal with a hole in it would replay differently than the run executed:
                // nothing durable records this outcome, so it cannot be reported as one.
                Err(e) => {
                    if matches!(status, RunStatus::Ok | RunStatus::Suspended) {
                        status = RunStatus::Error;
                        value = None;
                    }
                    error.get_or_insert(e);
                }
            }
        }
        // Settled: the run is free for the next driver.
        self.release_lease();
        let (preview, orphans) = {
            let replay = self.lock_replay();
            let preview = replay.preview();
            let orphans = if preview.orphaned > 0 { replay.orphans(20) } else { Vec::new() };
            (preview, orphans)
        };
        // Named from their entries, read back (a report that cannot be read names fewer).
        let orphans = orphans
            .into_iter()
            .filter_map(|seq| self.stored.fetch(seq).ok())
            .map(|e| Orphan::of(&e))
            .collect();
        let cost = self.writer.with_summary(|summary| summary.cost.clone());
        let pending = if status == RunStatus::Suspended { self.pending() } else { Vec::new() };
        let mut dropped = self.take_dropped();
        if let Some(e) =
            error.as_ref().filter(|e| status == RunStatus::Exhausted && e.code == ErrorCode::BudgetExhausted)
        {
            // The refusal that ended the run is itself dropped work.
            dropped.push(Dropped { scope: String::new(), kind: "run".into(), label: None, error: e.clone() });
        }
        self.emit((self.span_base, None), false, || EventKind::RunEnd { status, preview });
        self.events.close();
        RunOutcome {
            run_id: self.run_id.clone(),
            status,
            value,
            error,
            dropped,
            pending,
            usage: cost.total.usage,
            cost,
            preview,
            orphans,
        }
    }
}

impl RunState {
    /// Ends what a killed segment left `running` and this one never reached
    /// ([`super::abandon`]): the terminal entries durable, then their checkpoints marked
    /// journaled.
    fn end_abandoned(&self, error: &mut Option<Error>) {
        let open = self.writer.with_summary(|summary| summary.open());
        if open.is_empty() {
            return;
        }
        let running = match open.into_iter().map(|seq| self.stored.fetch(seq)).collect::<Result<Vec<_>, _>>()
        {
            Ok(running) => running,
            Err(e) => {
                error.get_or_insert(e);
                return;
            }
        };
        let open = super::abandon::abandoned(&self.engine, &self.run_id, &running);
        let (entries, covered): (Vec<Entry>, Vec<_>) = open.into_iter().map(|a| (a.entry, a.covered)).unzip();
        match self.append(entries, Durability::Awaited) {
            Ok(_) => {
                for (reference, usage) in covered.into_iter().flatten() {
                    super::carry::mark_journaled(self.engine.transcripts.as_ref(), &reference, &usage);
                }
            }
            Err(e) => {
                error.get_or_insert(e);
            }
        }
    }
}

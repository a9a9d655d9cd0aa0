//! What the readers of a run show of its journal (`cairn inspect`, the service's run route and
//! its event stream's outcome), folded one entry at a time as the journal is read page by
//! page: a reader holds this digest and one page, never the journal.

use std::collections::BTreeMap;

use serde_json::Value;

use super::budget_override::{SegmentCeiling, segment_ceilings};
use super::cost::CostReport;
use crate::journal::{self, Entry, Kind, Resolutions, Seq, Status};
use crate::money::Money;
use crate::store::{JournalStore, RunId};

/// A run's journal, digested.
#[derive(Debug, Default)]
pub(crate) struct RunDigest {
    /// How many entries it holds.
    pub(crate) entries: u64,
    /// How many of each `kind status`.
    pub(crate) counts: BTreeMap<String, usize>,
    /// What it cost (the fold of every entry).
    pub(crate) cost: CostReport,
    /// Who asked for what (see [`journal::actions`]).
    pub(crate) actions: Vec<Value>,
    /// The error its last settlement journaled (see [`journal::last_settlement_error`]).
    pub(crate) error: Option<Value>,
    resolutions: Resolutions,
    /// Every suspended `await_external`: its seq, key and prompt.
    waits: Vec<(Seq, Option<String>, Option<Value>)>,
    /// The ceiling overrides its resumes journaled.
    overrides: Vec<Entry>,
}

impl RunDigest {
    /// Digests the journal of `run`, reading it page by page; `each` sees every entry first.
    ///
    /// # Errors
    /// A store failure, or an entry that does not decode.
    pub(crate) fn read(
        store: &dyn JournalStore,
        run: &RunId,
        mut each: impl FnMut(&Entry),
    ) -> Result<RunDigest, crate::Error> {
        let mut digest = RunDigest::default();
        for entry in journal::entries(store, run, 0) {
            let entry = entry?;
            each(&entry);
            digest.add(&entry);
        }
        Ok(digest)
    }

    /// Folds one more entry (the next in journal order).
    pub(crate) fn add(&mut self, entry: &Entry) {
        self.entries += 1;
        *self.counts.entry(format!("{} {}", entry.kind.as_str(), entry.status.as_str())).or_default() += 1;
        self.cost.add(entry);
        self.actions.extend(journal::actions(std::slice::from_ref(entry)));
        self.resolutions.add(entry);
        if entry.kind == Kind::External && entry.status == Status::Suspended {
            let prompt = entry.value().and_then(|v| v.get("prompt").cloned());
            self.waits.push((entry.seq, entry.name.clone(), prompt));
        }
        if entry.kind == Kind::Decision {
            let value = entry.value();
            let kind = value.as_ref().and_then(|v| v.get("type")).and_then(Value::as_str);
            if kind == Some(journal::SETTLE_DECISION) {
                self.error = journal::last_settlement_error(std::slice::from_ref(entry));
            } else if kind == Some(journal::BUDGET_OVERRIDE_DECISION) {
                self.overrides.push(entry.clone());
            }
        }
    }

    /// The waits still open at the journal's end (see [`journal::pending_waits`]).
    pub(crate) fn pending(&self) -> Vec<Value> {
        self.waits
            .iter()
            .filter(|(seq, _, _)| !self.resolutions.is_closed(*seq))
            .map(|(seq, key, prompt)| serde_json::json!({ "key": key, "seq": seq, "prompt": prompt }))
            .collect()
    }

    /// Each segment of the run with its ceiling (see [`segment_ceilings`]).
    pub(crate) fn segments(&self, segments: u32, ceiling: Option<Money>) -> Vec<SegmentCeiling> {
        segment_ceilings(&self.overrides, segments, ceiling)
    }
}

//! A ceiling raised on resume: the one explicit door through a run's immutable ceiling. A
//! resume may give a new ceiling (`ResumeOptions::budget_usd`, `cairn resume --budget`, or one
//! the service left in run meta for the worker that resumes the run); it is validated like a
//! run's `--budget`, judged against the spend the journal has settled and the checkpointed
//! turns of calls a killed segment left unsettled (refused below it, typed `config`, before
//! anything is written), journaled as a `run_budget_override` decision (the
//! recorded and applied ceilings and the spend it was judged against) before anything else of
//! the segment, and applies from that segment on: never mid-segment. A bare resume keeps the
//! recorded ceiling.

use serde::Serialize;
use serde_json::{Value, json};

use super::inputs::validate_budget;
use super::lease;
use super::registry::EngineInner;
use crate::error::Error;
use crate::journal::{
    self, BUDGET_OVERRIDE_DECISION, ContentKey, Entry, Kind, Ledger, ScopePath, Seq, Status,
};
use crate::money::Money;
use crate::store::{RunId, RunMeta};

/// The run-meta field in which the service leaves a ceiling for the run's next resume.
const PENDING_FIELD: &str = "budget_override_usd";

/// An override judged against the run's settled spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Override {
    /// The ceiling the run had (none: unbounded).
    pub(super) recorded: Option<Money>,
    /// The ceiling from this segment on.
    pub(super) applied: Money,
    /// The spend it was judged against: settled, and the checkpointed turns carried.
    pub(super) spent: Money,
}

/// Validates `usd` like a run's budget and judges it against `spent`.
///
/// # Errors
/// `config` for a non-finite or negative value, or one below the settled spend.
pub(super) fn judge(
    run_id: &RunId,
    usd: f64,
    recorded: Option<Money>,
    spent: Money,
) -> Result<Override, Error> {
    let applied =
        validate_budget(Some(usd), None)?.ok_or_else(|| Error::config("invalid budget: none given"))?;
    if applied < spent {
        return Err(Error::config(format!(
            "budget {applied} is below the {spent} run {run_id} has already spent; give at least {spent}"
        )));
    }
    Ok(Override { recorded, applied, spent })
}

/// The settled spend of a run, folded from its journal.
///
/// # Errors
/// `internal` for a store failure or an unreadable journal.
pub(super) fn settled_spend(engine: &EngineInner, run_id: &RunId) -> Result<Money, Error> {
    let mut ledger = Ledger::default();
    for entry in journal::entries(engine.journal.as_ref(), run_id, 0) {
        ledger.add(&entry?);
    }
    Ok(ledger.spent)
}

/// The ceiling the service left for the run's next resume, if any.
pub(super) fn pending(meta: &RunMeta) -> Option<f64> {
    meta.extra.get(PENDING_FIELD).and_then(Value::as_f64)
}

/// Clears the ceiling the service left, once a resume applies it.
pub(super) fn clear_pending(meta: &mut RunMeta) {
    meta.extra.remove(PENDING_FIELD);
}

/// The decision entry of an override applied at segment `segment`.
pub(super) fn decision(applied: &Override, segment: u32) -> Entry {
    let identity = json!({ "kind": "decision", "type": BUDGET_OVERRIDE_DECISION, "segment": segment });
    let key = journal::content_key(&identity).unwrap_or(ContentKey::from_bytes([0; 32]));
    let mut entry = Entry::new(Seq(0), Kind::Decision, Status::Ok, ScopePath::root(), key, 0);
    entry.set_value(Some(&json!({
        "type": BUDGET_OVERRIDE_DECISION,
        "segment": segment,
        "recorded_nano_usd": applied.recorded.map(Money::nano_usd),
        "applied_nano_usd": applied.applied.nano_usd(),
        "spent_nano_usd": applied.spent.nano_usd(),
    })));
    entry
}

/// Leaves a ceiling for the next resume of a settled run (the service's resume route, whose
/// worker resumes the run): judged now against the settled spend, written under the run's
/// lease, applied (and journaled) by the resume.
///
/// # Errors
/// `config` for an unknown run or a value refused by [`judge`]; `run_busy` when another
/// process drives the run; `internal` for a store failure.
pub(super) fn leave_for_resume(engine: &EngineInner, run_id: &RunId, usd: f64) -> Result<(), Error> {
    let meta =
        engine.journal.get_meta(run_id)?.ok_or_else(|| Error::config(format!("unknown run {run_id}")))?;
    judge(run_id, usd, meta.budget_ceiling, settled_spend(engine, run_id)?)?;
    let held = lease::acquire(engine, run_id)?;
    let written = (|| -> Result<(), Error> {
        let mut meta =
            engine.journal.get_meta(run_id)?.ok_or_else(|| Error::config(format!("unknown run {run_id}")))?;
        judge(run_id, usd, meta.budget_ceiling, settled_spend(engine, run_id)?)?;
        meta.extra.insert(PENDING_FIELD.into(), Value::from(usd));
        engine.journal.put_meta(&meta, held.as_ref())?;
        Ok(())
    })();
    lease::release(engine, held.as_ref());
    written
}

/// One segment of a run and the ceiling it ran under, as `cairn inspect` shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentCeiling {
    /// The segment (0 is the start).
    pub index: u32,
    /// Its ceiling (`None`: unbounded); in JSON `ceiling_nano_usd` and `ceiling_usd`.
    #[serde(flatten, with = "crate::money::json::ceiling")]
    pub ceiling: Option<Money>,
    /// Whether a resume's override set it.
    pub overridden: bool,
}

/// Each segment of a run with its ceiling: the start's ceiling (the first override's recorded
/// one, else the run's), then each override from its segment on.
pub fn segment_ceilings(entries: &[Entry], segments: u32, ceiling: Option<Money>) -> Vec<SegmentCeiling> {
    let overrides: Vec<(u32, Option<Money>, Money)> = entries
        .iter()
        .filter(|e| e.kind == Kind::Decision)
        .filter_map(|e| {
            let value = e.value()?;
            if value.get("type")?.as_str()? != BUDGET_OVERRIDE_DECISION {
                return None;
            }
            let segment = u32::try_from(value.get("segment")?.as_u64()?).ok()?;
            let recorded = value.get("recorded_nano_usd").and_then(Value::as_i64).map(Money::from_nano_usd);
            let applied = Money::from_nano_usd(value.get("applied_nano_usd")?.as_i64()?);
            Some((segment, recorded, applied))
        })
        .collect();
    let mut current = match overrides.first() {
        Some((_, recorded, _)) => *recorded,
        None => ceiling,
    };
    (0..segments.max(1))
        .map(|index| {
            let set = overrides.iter().rev().find(|(segment, _, _)| *segment == index);
            if let Some((_, _, applied)) = set {
                current = Some(*applied);
            }
            SegmentCeiling { index, ceiling: current, overridden: set.is_some() }
        })
        .collect()
}

//! The folds: pure functions from a journal to derived state. Resolutions (first closing
//! wins), abandons (subtrees skipped), the budget ledger, and the run's recorded settlement.
//!
//! Derived state is never stored: every reader recomputes it from the entries, so two
//! readers of one journal always agree, and a replay derives exactly what the first run did.

use std::collections::hash_map::Entry as Slot;
use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::{Entry, Kind, ScopePath, Seq, Status};
use crate::money::Money;
use crate::store::RunStatus;
use crate::usage::Usage;

/// How the resolution fold classified one closing attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ResolutionClass {
    /// The first valid attempt: it closed the suspension.
    Applied,
    /// A valid attempt after the suspension was already closed: no effect.
    Noop,
    /// An attempt whose target is not an earlier suspended entry.
    Invalid,
}

/// The resolution fold: which attempt closed each suspension, and how every attempt was
/// classified.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Resolutions {
    /// Target seq → the seq and value of the attempt that closed it.
    closed: HashMap<Seq, (Seq, Value)>,
    /// Every attempt in journal order with its classification.
    pub attempts: Vec<(Seq, ResolutionClass)>,
    /// The suspended entries folded so far (a resolution's target must be one of them).
    suspended: HashSet<Seq>,
}

impl Resolutions {
    /// Folds every `resolution` entry of a journal (in journal order: first closing wins).
    pub(crate) fn fold<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Resolutions {
        let mut out = Resolutions::default();
        for entry in entries {
            out.add(entry);
        }
        out
    }

    /// Folds one more entry (the next in journal order).
    pub(crate) fn add(&mut self, entry: &Entry) {
        if entry.kind == Kind::Resolution {
            match entry.target {
                Some(target) if self.suspended.contains(&target) => {
                    self.apply(target, entry.seq, entry.value().unwrap_or(Value::Null));
                }
                _ => self.attempts.push((entry.seq, ResolutionClass::Invalid)),
            }
        } else if entry.status == Status::Suspended && !entry.kind.is_ref_entry() {
            self.suspended.insert(entry.seq);
        }
    }

    /// The value that closed the suspension at `target`, if any.
    pub(crate) fn value_for(&self, target: Seq) -> Option<&Value> {
        self.closed.get(&target).map(|(_, value)| value)
    }

    /// Whether the suspension at `target` is closed.
    pub(crate) fn is_closed(&self, target: Seq) -> bool {
        self.closed.contains_key(&target)
    }

    /// Records a new valid attempt appended after the fold; returns whether it applied.
    pub(crate) fn apply(&mut self, target: Seq, attempt: Seq, value: Value) -> ResolutionClass {
        let class = match self.closed.entry(target) {
            Slot::Occupied(_) => ResolutionClass::Noop,
            Slot::Vacant(slot) => {
                slot.insert((attempt, value));
                ResolutionClass::Applied
            }
        };
        self.attempts.push((attempt, class));
        class
    }
}

/// The abandon fold: the subtrees the run decided to stop pursuing.
///
/// An `abandon` entry covers its target entry and every entry whose scope lies at or under
/// the abandon entry's own scope. Covered calls derive the status `skipped`: they are not
/// dispatched on resume and add nothing to the spend.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Abandons {
    roots: Vec<ScopePath>,
    targets: Vec<Seq>,
}

impl Abandons {
    /// Folds one more entry.
    pub(super) fn add(&mut self, entry: &Entry) {
        if entry.kind != Kind::Abandon {
            return;
        }
        self.roots.push(entry.scope.clone());
        if let Some(target) = entry.target {
            self.targets.push(target);
        }
    }

    /// Whether a call at `scope` (journaled at `seq`, if it was) is covered.
    pub(super) fn covers(&self, scope: &ScopePath, seq: Option<Seq>) -> bool {
        seq.is_some_and(|s| self.targets.contains(&s)) || self.roots.iter().any(|root| scope.is_within(root))
    }
}

/// The budget ledger: what the run has paid, summed from its entries.
///
/// Every cost ever journaled counts, including calls later orphaned or abandoned: money
/// paid stays paid, so a resumed run's remaining budget is the ceiling minus all of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Ledger {
    /// Total cost journaled.
    pub spent: Money,
    /// Total usage journaled.
    pub usage: Usage,
    /// How many entries carried a cost or usage.
    pub paid_entries: u64,
}

impl Ledger {
    /// Folds the cost and usage of every entry.
    #[cfg(test)]
    pub(crate) fn fold<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Ledger {
        let mut ledger = Ledger::default();
        for entry in entries {
            ledger.add(entry);
        }
        ledger
    }

    /// Adds one entry's cost and usage.
    pub(crate) fn add(&mut self, entry: &Entry) {
        if entry.cost.is_none() && entry.usage.is_none() {
            return;
        }
        // A call an unpriced model served part of: its priced attempts were still paid.
        self.spent += entry.priced_cost();
        if let Some(usage) = entry.usage {
            self.usage += usage;
        }
        self.paid_entries += 1;
    }
}

/// The `type` of the decision entry that records a ceiling raised (or set) at a resume:
/// `{"type": "run_budget_override", "segment", "recorded_nano_usd", "applied_nano_usd",
/// "spent_nano_usd"}`, written before anything else of the segment it applies to.
pub(crate) const BUDGET_OVERRIDE_DECISION: &str = "run_budget_override";

/// The `type` of the decision entry that records a re-key a resume accepted:
/// `{"type": "rekey_accepted", "supersedes": SEQ}`, where `SEQ` is the first entry of the
/// completed call the re-keyed live call replaced. The superseded call is history, not an
/// orphan.
pub(super) const REKEY_DECISION: &str = "rekey_accepted";

/// The value of a re-key decision entry.
pub(crate) fn rekey_value(supersedes: super::Seq) -> Value {
    serde_json::json!({ "type": REKEY_DECISION, "supersedes": supersedes.0 })
}

/// The `type` of the decision entry that records who asked a run to start or resume, when a
/// service token did: `{"type": "run_action", "action": "start"|"resume", "segment": N}` with
/// the token's name in the entry's `by`. Written by the service before a worker drives the
/// segment; like a ceiling override, no call ever matches it.
pub(crate) const ACTION_DECISION: &str = "run_action";

/// The value of an action decision entry.
pub(crate) fn action_value(action: &str, segment: u32) -> Value {
    serde_json::json!({ "type": ACTION_DECISION, "action": action, "segment": segment })
}

/// Who asked for what, in journal order: every entry that names its requester (`by`), as
/// `{seq, action, by}` with `action` one of `start`, `resume`, `resolve` (with its `key`) and
/// `cancel`; what `cairn inspect` and `GET /v1/runs/{id}` show as `actions`.
#[cfg_attr(not(feature = "serve"), allow(dead_code))] // read by the CLI and the service
pub(crate) fn actions(entries: &[Entry]) -> Vec<Value> {
    entries
        .iter()
        .filter_map(|e| {
            let by = e.by.as_deref()?;
            let mut action = match e.kind {
                Kind::Resolution => serde_json::json!({ "action": "resolve", "key": e.name }),
                Kind::Decision => {
                    let value = e.value()?;
                    match value.get("type")?.as_str()? {
                        ACTION_DECISION => serde_json::json!({ "action": value.get("action")? }),
                        SETTLE_DECISION => serde_json::json!({ "action": "cancel" }),
                        _ => return None,
                    }
                }
                _ => return None,
            };
            let map = action.as_object_mut()?;
            map.insert("seq".into(), Value::from(e.seq.0));
            map.insert("by".into(), Value::from(by));
            Some(action)
        })
        .collect()
}

/// The `type` of the decision entry that records a run's settlement.
pub(crate) const SETTLE_DECISION: &str = "run_settled";

/// A settlement's `stopped_by` when the script-time limit stopped the run: the one bound of a
/// script that timing decides (`engine::script_clock`).
pub(crate) const STOPPED_BY_SCRIPT_TIME: &str = "script_time";

/// The value of a settlement decision entry: `{"type":"run_settled","status":...}`.
pub(crate) fn settle_value(status: RunStatus) -> Value {
    serde_json::json!({ "type": SETTLE_DECISION, "status": status.as_str() })
}

/// The last settlement the journal records, if any.
#[cfg(test)]
pub(crate) fn last_settlement(entries: &[Entry]) -> Option<RunStatus> {
    entries.iter().rev().filter(|e| e.kind == Kind::Decision).find_map(|e| {
        let value = e.value()?;
        if value.get("type")?.as_str()? != SETTLE_DECISION {
            return None;
        }
        serde_json::from_value(value.get("status")?.clone()).ok()
    })
}

/// The waits still open at the journal's end, as `{key, seq, prompt}`: every suspended
/// `await_external` that no resolution closed (what `cairn inspect` and the service show).
pub(crate) fn pending_waits(entries: &[Entry]) -> Vec<Value> {
    let resolutions = Resolutions::fold(entries.iter());
    entries
        .iter()
        .filter(|e| e.kind == Kind::External && e.status == Status::Suspended)
        .filter(|e| !resolutions.is_closed(e.seq))
        .map(|e| {
            serde_json::json!({ "key": e.name, "seq": e.seq, "prompt": e.value().and_then(|v| v.get("prompt").cloned()) })
        })
        .collect()
}

/// The error the last settlement journaled with its decision (`{code, message, where}`),
/// when the run settled failed and the settlement records why.
#[cfg_attr(not(feature = "serve"), allow(dead_code))] // read by the CLI and the service
pub(crate) fn last_settlement_error(entries: &[Entry]) -> Option<Value> {
    entries.iter().rev().filter(|e| e.kind == Kind::Decision).find_map(|e| {
        let value = e.value()?;
        if value.get("type")?.as_str()? != SETTLE_DECISION {
            return None;
        }
        Some(value.get("error").cloned().filter(|v| !v.is_null()))
    })?
}

/// How a run last settled, as a strict replay compares it.
#[cfg_attr(not(feature = "cli"), allow(dead_code))] // read by the CLI
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settled {
    pub(crate) status: RunStatus,
    /// The content key (hex) of the value the run settled with, if it settled with one.
    pub(crate) value_key: Option<String>,
    /// Whether the script-time limit stopped it ([`STOPPED_BY_SCRIPT_TIME`]).
    pub(crate) by_script_time: bool,
}

/// The last settlement the journal records: its status and, when the run settled with a
/// value, the content key of that value (hex), for a strict replay to compare with.
#[cfg_attr(not(feature = "cli"), allow(dead_code))] // read by the CLI
pub(crate) fn last_settlement_outcome(entries: &[Entry]) -> Option<Settled> {
    entries.iter().rev().filter(|e| e.kind == Kind::Decision).find_map(|e| {
        let value = e.value()?;
        if value.get("type")?.as_str()? != SETTLE_DECISION {
            return None;
        }
        Some(Settled {
            status: serde_json::from_value(value.get("status")?.clone()).ok()?,
            value_key: value.get("value_key").and_then(Value::as_str).map(str::to_owned),
            by_script_time: value.get("stopped_by").and_then(Value::as_str) == Some(STOPPED_BY_SCRIPT_TIME),
        })
    })
}

/// Whether the journal records a settlement with status `ok` anywhere: a finished run is
/// history, so its unmemoized `limit` entries replay instead of re-paying.
#[cfg(test)]
pub(crate) fn settled_ok<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> bool {
    entries.into_iter().any(is_ok_settlement)
}

/// Whether the entry is a settlement with status `ok`.
pub(crate) fn is_ok_settlement(entry: &Entry) -> bool {
    entry.kind == Kind::Decision
        && entry.value().is_some_and(|v| {
            v.get("type").and_then(Value::as_str) == Some(SETTLE_DECISION)
                && v.get("status").and_then(Value::as_str) == Some("ok")
        })
}

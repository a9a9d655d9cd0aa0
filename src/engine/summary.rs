//! What a segment keeps of its run's journal besides the matching index: folds kept current as
//! the journal is read back page by page and as the segment appends, so that no part of the
//! engine holds the entries themselves (a run of a million calls keeps neither their values
//! nor their envelopes in memory). Each fold is what a reader of the whole journal used to
//! compute from it: the cost report, what earlier segments spent and dispatched, the calls a
//! killed segment left running, where the run last failed, and which waits are open.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;

use super::cost::CostReport;
use crate::error::{Error, ErrorCode};
use crate::journal::{Entry, Kind, Ledger, Name, Seq, Status};

/// The folds of a run's journal one segment keeps.
#[derive(Debug)]
pub(super) struct Summary {
    /// The last seq read or appended.
    pub(super) tail: Seq,
    /// The cost report of every entry read or appended (what the outcome carries).
    pub(super) cost: CostReport,
    /// What the entries read spent (earlier segments).
    pub(super) ledger: Ledger,
    /// Agent dispatches read.
    pub(super) spawns: u32,
    /// Admission refusals read: a raised ceiling asks them again.
    pub(super) refused_admissions: Vec<Seq>,
    /// `running` entries read that no later entry names as its target: what a killed
    /// segment left in flight (the segment's own calls end themselves).
    open: BTreeSet<Seq>,
    /// Agent `running` entries read that no ended agent entry names: the seq their checkpoint
    /// is kept under (the call's first attempt) and their model.
    unended_agents: BTreeMap<Seq, (Seq, Option<Name>)>,
    /// Where each error code last failed an entry, and where the last failure was: as
    /// `{seq, kind, name, scope}`.
    failed_by_code: HashMap<ErrorCode, Value>,
    last_failed: Option<Value>,
    /// The entries that failed with each exact error (its code and a hash of its message):
    /// where a run that raised that very error failed (see [`Summary::failed_at`]).
    failed_exactly: HashMap<(ErrorCode, u64), ExactFailure>,
    /// The newest suspended `external` entry per wait key.
    suspensions: HashMap<String, Seq>,
}

impl Default for Summary {
    fn default() -> Summary {
        Summary {
            tail: Seq(0),
            cost: CostReport::default(),
            ledger: Ledger::default(),
            spawns: 0,
            refused_admissions: Vec::new(),
            open: BTreeSet::new(),
            unended_agents: BTreeMap::new(),
            failed_by_code: HashMap::new(),
            last_failed: None,
            failed_exactly: HashMap::new(),
            suspensions: HashMap::new(),
        }
    }
}

impl Summary {
    /// Folds an entry read back from the store (in journal order).
    pub(super) fn add_read(&mut self, entry: &Entry) {
        self.add(entry);
        self.ledger.add(entry);
        if entry.kind == Kind::Agent && entry.status == Status::Running {
            self.spawns += 1;
            let checkpoint = entry.target.unwrap_or(entry.seq);
            self.unended_agents.insert(entry.seq, (checkpoint, entry.model.clone()));
        }
        if entry.kind == Kind::Agent
            && entry.status != Status::Running
            && let Some(target) = entry.target
        {
            self.unended_agents.remove(&target);
        }
        if entry.status == Status::Running {
            self.open.insert(entry.seq);
        }
        if entry.kind == Kind::Decision
            && entry.status == Status::Error
            && entry.value().is_some_and(|v| v.get("type").and_then(Value::as_str) == Some("admission"))
        {
            self.refused_admissions.push(entry.seq);
        }
    }

    /// Folds an entry this segment appends (its own calls end themselves: they are never
    /// left open).
    pub(super) fn add_appended(&mut self, entry: &Entry) {
        self.add(entry);
    }

    fn add(&mut self, entry: &Entry) {
        self.tail = self.tail.max(entry.seq);
        self.cost.add(entry);
        if let Some(target) = entry.target {
            self.open.remove(&target);
        }
        if matches!(entry.status, Status::Error | Status::Limit) {
            let place = serde_json::json!({
                "seq": entry.seq.0,
                "kind": entry.kind,
                "name": entry.name,
                "scope": entry.scope,
            });
            if let Some(error) = entry.error.as_ref() {
                self.failed_by_code.insert(error.code, place.clone());
                let identity = (entry.scope.as_str().into(), entry.key.to_hex(), entry.ordinal);
                self.failed_exactly
                    .entry((error.code, message_hash(&error.message)))
                    .and_modify(|exact| exact.add(&entry.scope, identity.clone(), &place))
                    .or_insert_with(|| ExactFailure {
                        scope: entry.scope.as_str().into(),
                        one_scope: true,
                        last: place.clone(),
                        first_by_identity: (identity, place.clone()),
                    });
            }
            self.last_failed = Some(place);
        }
        if entry.kind == Kind::External
            && entry.status == Status::Suspended
            && let Some(name) = &entry.name
        {
            self.suspensions.insert(name.clone(), entry.seq);
        }
    }

    /// Where a run's failure happened, as `{seq, kind, name, scope}`: the journal entry that
    /// failed with the run's error itself (code and message), else the last that failed with
    /// its code, else the last that failed at all; `{kind: "script"}` when no call failed (the
    /// script itself raised it, or a limit stopped it).
    ///
    /// Several entries can carry the very error the run raised when sibling branches failed
    /// alike (every branch of a fan-out writing what it captured, say): their seqs follow the
    /// order in which the branches happened to finish, so the last of them would name a
    /// different entry from run to run. Within one scope entries come one after another, and
    /// the last is named; across scopes the first by identity (scope, key, ordinal) is, the
    /// same on every run.
    pub(super) fn failed_at(&self, error: &Error) -> Value {
        let exact = self
            .failed_exactly
            .get(&(error.code, message_hash(&error.message)))
            .map(|exact| if exact.one_scope { &exact.last } else { &exact.first_by_identity.1 });
        exact
            .or_else(|| self.failed_by_code.get(&error.code))
            .or(self.last_failed.as_ref())
            .cloned()
            .unwrap_or_else(|| serde_json::json!({ "kind": "script" }))
    }

    /// The `running` entries read that nothing has ended yet, in journal order.
    pub(super) fn open(&self) -> Vec<Seq> {
        self.open.iter().copied().collect()
    }

    /// The agent calls read whose latest attempt never ended: the seq each one's checkpoint
    /// is kept under, and its model (one item per checkpoint, in journal order).
    pub(super) fn unended_agents(&self) -> Vec<(Seq, Option<Name>)> {
        let mut seen = BTreeSet::new();
        self.unended_agents.values().filter(|(checkpoint, _)| seen.insert(*checkpoint)).cloned().collect()
    }

    /// The newest suspended `external` entry waiting on `key`.
    pub(super) fn suspension(&self, key: &str) -> Option<Seq> {
        self.suspensions.get(key).copied()
    }
}

/// The entries that failed with one exact error.
#[derive(Debug)]
struct ExactFailure {
    /// The scope of the first of them.
    scope: Box<str>,
    /// Whether all of them are in that scope.
    one_scope: bool,
    /// The last of them.
    last: Value,
    /// The first of them by identity (scope, key, ordinal).
    first_by_identity: (Identity, Value),
}

/// A journal entry's identity, in the order failures are compared by: scope, key, ordinal.
type Identity = (Box<str>, String, u32);

impl ExactFailure {
    fn add(&mut self, scope: &crate::journal::ScopePath, identity: Identity, place: &Value) {
        self.one_scope &= *self.scope == *scope.as_str();
        self.last = place.clone();
        if identity < self.first_by_identity.0 {
            self.first_by_identity = (identity, place.clone());
        }
    }
}

/// A hash of an error message: which failures carry the same error (a collision only picks
/// another failed entry to name).
fn message_hash(message: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    message.hash(&mut hasher);
    hasher.finish()
}

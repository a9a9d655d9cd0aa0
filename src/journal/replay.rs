//! Scoped forward-matching: how a live call finds its journaled counterpart on resume, and
//! the resume preview it counts as it goes.
//!
//! The loaded journal is indexed into *call records*: one per dispatch (`running` entry) or
//! single-phase fact, with the terminal entry of its latest attempt attached. A `running`
//! entry that carries a `ref` is a re-dispatch of the call it names and joins that record
//! instead of starting a new one, so a call rerun in one resume is matched once, by its
//! latest attempt, in the next. Ref-entries (resolutions, abandons) never become records.
//!
//! Each scope keeps a cursor over its records. A call searches forward from the cursor for
//! the first unconsumed record with its key; a hit moves the cursor past it, a miss moves
//! nothing. So inserting a call costs exactly one live call and every neighbour still
//! replays; a deleted call's record is never consumed and is reported as orphaned.

use std::collections::VecDeque;

// Fast hashing: these indexes are built for every entry of a journal at every resume.
use foldhash::{HashMap, HashMapExt, HashSet};
use std::sync::Arc;

use serde::Serialize;

use super::disposition::{Disposition, DispositionInput, Effective, disposition};
use super::fold::{Abandons, Resolutions, settled_ok};
use super::{ContentKey, Entry, IdentitySummary, ScopePath, Segment, Seq, Status};
use crate::error::ErrorClass;

/// The resume preview: how the calls of a resumed run were (or would be) served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Preview {
    /// Calls served from the journal.
    pub hits: u64,
    /// Calls with no journaled counterpart (executed live).
    pub misses: u64,
    /// Journaled calls executed again (failed, cancelled, limited or hanging).
    pub reruns: u64,
    /// Calls skipped because an abandon covers them.
    pub skipped: u64,
    /// Journaled calls no live call consumed (deleted or reordered away).
    pub orphaned: u64,
    /// Completed calls a resume re-keyed on purpose (`--accept-rekey`): replaced by the
    /// live call that re-keyed them, kept as history, never orphaned.
    pub superseded: u64,
}

/// A journaled call no live call consumed: what a strict replay names when it fails.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Orphan {
    /// The seq of its first entry.
    pub seq: Seq,
    /// What kind of call it was.
    pub kind: super::Kind,
    /// Where it sat.
    pub scope: ScopePath,
    /// Its content key.
    pub key: ContentKey,
    /// Its label or name, if it had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl Orphan {
    fn of(entry: &Entry) -> Orphan {
        Orphan {
            seq: entry.seq,
            kind: entry.kind,
            scope: entry.scope.clone(),
            key: entry.key,
            label: entry.label.clone().or_else(|| entry.name.clone()),
        }
    }
}

impl std::fmt::Display for Orphan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scope = if self.scope.is_root() {
            "the root scope".to_owned()
        } else {
            format!("scope '{}'", self.scope)
        };
        write!(
            f,
            "the {} at seq {} in {scope} (key {})",
            self.kind.as_str(),
            self.seq,
            &self.key.to_hex()[..16]
        )?;
        if let Some(label) = &self.label {
            write!(f, ", {label:?}")?;
        }
        Ok(())
    }
}

/// The result of matching one live call.
#[derive(Debug, Clone)]
pub(crate) struct Match {
    /// The ordinal the call's entries carry: earlier same-key calls in its scope.
    pub ordinal: u32,
    /// What to do.
    pub outcome: Outcome,
}

/// What the engine does for a matched (or unmatched) call.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// No journaled counterpart: execute live.
    Live,
    /// Serve this journaled result: the terminal (or fact) entry. For a resolved suspension,
    /// the value is the resolution's.
    Replay(Arc<Entry>),
    /// Execute live again; the new `running` entry refs `supersedes`.
    Rerun {
        /// The dispatch entry of the call's first attempt.
        supersedes: Seq,
        /// The terminal entry of the latest attempt, if it had one.
        previous: Option<Arc<Entry>>,
    },
    /// Covered by an abandon: status `skipped`, zero spend, nothing written.
    Skip,
    /// An open suspension: keep waiting on the journaled entry, write nothing.
    Wait(Arc<Entry>),
}

/// Options fixed at resume.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReplayOptions {
    /// Entries (by seq) whose calls must rerun regardless of their status.
    pub invalidate: Vec<Seq>,
    /// Reproduce the run as it last settled (a strict replay): a decision that settlement
    /// followed still holds, since it is how that segment ended (see [`Replay::decision`]).
    pub reproduce: bool,
}

#[derive(Debug)]
struct Record {
    /// The first dispatch (or the fact) entry.
    first: Arc<Entry>,
    /// The latest attempt's dispatch entry.
    latest: Arc<Entry>,
    /// The latest attempt's terminal entry.
    terminal: Option<Arc<Entry>>,
    consumed: bool,
    /// A re-key decision names it: a call an accepted re-key replaced.
    superseded: bool,
}

#[derive(Debug, Default)]
struct Scope {
    /// Record indices in journal order.
    records: Vec<usize>,
    /// Position in `records` before which nothing can match.
    cursor: usize,
    /// Per key: positions in `records` not yet passed, in order.
    by_key: HashMap<ContentKey, VecDeque<usize>>,
    /// Per key: positions the cursor passed while they were still unconsumed, in order. A
    /// call an edit inserted is journaled after every record of its first segment, so once it
    /// replays the cursor lies past its neighbours; they are still theirs to claim.
    passed: HashMap<ContentKey, VecDeque<usize>>,
    /// Per key: how many live calls this execution has made (for ordinals).
    seen: HashMap<ContentKey, u32>,
}

/// A loaded journal indexed for matching, plus the preview counters of this execution.
#[derive(Debug)]
pub(crate) struct Replay {
    records: Vec<Record>,
    scopes: HashMap<ScopePath, Scope>,
    resolutions: Resolutions,
    abandons: Abandons,
    invalidated: HashSet<Seq>,
    /// Scopes whose records are accounted for without being matched one by one: the body
    /// of a step or child workflow that replayed whole (its body never ran).
    covered: HashSet<Box<str>>,
    /// The body scopes of steps an accepted re-key replaced: what the old body journaled is
    /// history with its step, not orphaned.
    superseded_scopes: HashSet<Box<str>>,
    /// Every settlement decision: its seq and whether it ended the segment in failure
    /// (`error` or `cancelled`), after which a resume retries what failed.
    settlements: Vec<(Seq, bool)>,
    /// Whether the run is reproduced as it last settled ([`ReplayOptions::reproduce`]).
    reproduce: bool,
    /// Tool approvals (`external` entries named `approve:<12 hex of the call's key>:<id>`)
    /// by scope and call-key prefix: an agent that replays whole accounts for its own.
    approvals: HashMap<(ScopePath, Box<str>), Vec<usize>>,
    run_settled_ok: bool,
    preview: Preview,
    /// Agent calls' records by what identifies their call besides scope (the caller's key,
    /// else the prompt's hash), in journal order: where [`Replay::moved`] looks.
    agents: HashMap<Box<str>, Vec<usize>>,
}

impl Replay {
    /// Indexes a decoded journal.
    pub(crate) fn new(entries: Vec<Entry>, options: &ReplayOptions) -> Replay {
        Replay::from_shared(entries.into_iter().map(Arc::new).collect(), options)
    }

    /// Indexes a decoded journal whose entries the caller also keeps.
    pub(crate) fn from_shared(entries: Vec<Arc<Entry>>, options: &ReplayOptions) -> Replay {
        let resolutions = Resolutions::fold(entries.iter().map(|e| &**e));
        let abandons = Abandons::fold(entries.iter().map(|e| &**e));
        let run_settled_ok = settled_ok(entries.iter().map(|e| &**e));
        let mut replay = Replay {
            records: Vec::new(),
            scopes: HashMap::new(),
            resolutions,
            abandons,
            invalidated: options.invalidate.iter().copied().collect(),
            covered: HashSet::default(),
            superseded_scopes: HashSet::default(),
            settlements: Vec::new(),
            reproduce: options.reproduce,
            approvals: HashMap::new(),
            run_settled_ok,
            preview: Preview::default(),
            agents: HashMap::new(),
        };
        let mut by_seq: HashMap<Seq, usize> = HashMap::new();
        for entry in entries {
            if is_settlement(&entry) {
                let status =
                    entry.value().and_then(|v| v.get("status").and_then(|s| s.as_str().map(str::to_owned)));
                let failed = matches!(status.as_deref(), Some("error" | "cancelled"));
                replay.settlements.push((entry.seq, failed));
                continue;
            }
            if let Some(target) = rekey_target(&entry) {
                if let Some(&index) = by_seq.get(&target) {
                    replay.supersede_record(index);
                }
                continue;
            }
            if entry.kind.is_ref_entry() || is_segment_fact(&entry) {
                continue;
            }
            match (entry.status, entry.target) {
                (Status::Running, Some(target)) => {
                    // A re-dispatch: the record of the call it supersedes moves on to this
                    // attempt.
                    if let Some(&index) = by_seq.get(&target) {
                        let record = &mut replay.records[index];
                        record.latest = entry.clone();
                        record.terminal = None;
                        by_seq.insert(entry.seq, index);
                        continue;
                    }
                }
                (status, Some(target)) if status.is_terminal() => {
                    if let Some(&index) = by_seq.get(&target) {
                        let record = &mut replay.records[index];
                        if record.latest.seq == target {
                            record.terminal = Some(entry.clone());
                        }
                        continue;
                    }
                }
                _ => {}
            }
            let index = replay.records.len();
            by_seq.insert(entry.seq, index);
            let scope = replay.scopes.entry(entry.scope.clone()).or_default();
            scope.by_key.entry(entry.key).or_default().push_back(scope.records.len());
            scope.records.push(index);
            if entry.kind == super::Kind::External
                && let Some(prefix) = entry.name.as_deref().and_then(approval_prefix)
            {
                replay.approvals.entry((entry.scope.clone(), Box::from(prefix))).or_default().push(index);
            }
            if entry.kind == super::Kind::Agent
                && let Some(ident) = entry.identity.as_deref().and_then(IdentitySummary::call_id)
            {
                replay.agents.entry(Box::from(ident)).or_default().push(index);
            }
            replay.records.push(Record {
                first: entry.clone(),
                latest: entry,
                terminal: None,
                consumed: false,
                superseded: false,
            });
        }
        replay
    }

    /// An index over an empty journal (a fresh run).
    pub(crate) fn empty() -> Replay {
        Replay::new(Vec::new(), &ReplayOptions::default())
    }

    /// Whether the loaded journal records the run as settled `ok`.
    #[cfg(test)]
    pub(crate) fn run_settled_ok(&self) -> bool {
        self.run_settled_ok
    }

    /// The resolution fold of the loaded journal (kept current by [`Replay::resolve`]).
    pub(crate) fn resolutions(&self) -> &Resolutions {
        &self.resolutions
    }

    /// Records a resolution appended during this execution; returns whether it applied.
    pub(crate) fn resolve(&mut self, target: Seq, attempt: Seq, value: serde_json::Value) -> bool {
        self.resolutions.apply(target, attempt, value) == super::fold::ResolutionClass::Applied
    }

    /// Matches one live call at `scope` with content `key`, consuming the record it binds.
    pub(crate) fn lookup(&mut self, scope: &ScopePath, key: ContentKey) -> Match {
        let state = self.scopes.entry(scope.clone()).or_default();
        let seen = state.seen.entry(key).or_insert(0);
        let ordinal = *seen;
        *seen += 1;

        let mut found = None;
        if let Some(positions) = state.by_key.get_mut(&key) {
            while let Some(position) = positions.pop_front() {
                if self.records[state.records[position]].consumed {
                    continue;
                }
                if position >= state.cursor {
                    found = Some(position);
                    break;
                }
                state.passed.entry(key).or_default().push_back(position);
            }
        }
        // Nothing ahead of the cursor: the earliest record the cursor passed unconsumed.
        if found.is_none()
            && let Some(passed) = state.passed.get_mut(&key)
        {
            while let Some(position) = passed.pop_front() {
                if !self.records[state.records[position]].consumed {
                    found = Some(position);
                    break;
                }
            }
        }
        let Some(position) = found else {
            if self.abandons.covers(scope, None) {
                self.preview.skipped += 1;
                return Match { ordinal, outcome: Outcome::Skip };
            }
            self.preview.misses += 1;
            return Match { ordinal, outcome: Outcome::Live };
        };
        state.cursor = state.cursor.max(position + 1);
        let index = state.records[position];
        let record = &mut self.records[index];
        record.consumed = true;

        let effective = effective_status(record, &self.resolutions);
        let input = DispositionInput {
            effective,
            memoize_outcome: record.first.memoize_outcome,
            run_settled_ok: self.run_settled_ok,
            abandoned: self.abandons.covers(scope, Some(record.first.seq)),
            invalidated: self.invalidated.contains(&record.first.seq)
                || self.invalidated.contains(&record.latest.seq)
                || record.terminal.as_ref().is_some_and(|t| self.invalidated.contains(&t.seq)),
        };
        // A decision in a call's place (an admission refusal) is final: timing made it, and
        // a replay must not make it again. Invalidating it reruns the call.
        let decided = record.first.kind == super::Kind::Decision && !input.invalidated && !input.abandoned;
        let outcome = match if decided { Disposition::Replay } else { disposition(input) } {
            Disposition::Replay => {
                self.preview.hits += 1;
                match (&record.terminal, effective) {
                    (_, Effective::Suspended { .. }) => {
                        let mut resolved = (*record.latest).clone();
                        resolved.status = Status::Ok;
                        resolved.set_value(self.resolutions.value_for(record.latest.seq));
                        Outcome::Replay(Arc::new(resolved))
                    }
                    (Some(terminal), _) => Outcome::Replay(terminal.clone()),
                    (None, _) => Outcome::Replay(record.latest.clone()),
                }
            }
            Disposition::Rerun => {
                self.preview.reruns += 1;
                Outcome::Rerun { supersedes: record.first.seq, previous: record.terminal.clone() }
            }
            Disposition::Skip => {
                self.preview.skipped += 1;
                Outcome::Skip
            }
            Disposition::Wait => {
                self.preview.hits += 1;
                Outcome::Wait(record.latest.clone())
            }
        };
        Match { ordinal, outcome }
    }

    /// The decision the engine journaled at a site (identified by `key` in `scope`), if it
    /// still holds, and the ordinal a new decision there takes.
    ///
    /// Decisions record choices whose outcome timing made (which branch of a fail-fast
    /// fan-out failed first and which siblings it cancelled, an admission refused). Every
    /// journaled decision with the key is accounted for (never orphaned) and never counts
    /// as a call. The latest holds unless it was invalidated at resume or a segment after it
    /// settled `error` or `cancelled` (a resume then retries what failed, and a new decision
    /// is journaled if it fails again). Reproducing the run as it last settled, the last
    /// settlement does not count: a fail-fast decision it followed is how the run ended, and
    /// a strict replay raises it again instead of running the fan-out, whose siblings got as
    /// far as timing let them.
    pub(crate) fn decision(&mut self, scope: &ScopePath, key: ContentKey) -> (u32, Option<Arc<Entry>>) {
        let Some(state) = self.scopes.get(scope) else { return (0, None) };
        let mut positions: Vec<usize> =
            state.by_key.get(&key).into_iter().chain(state.passed.get(&key)).flatten().copied().collect();
        if positions.is_empty() {
            return (0, None);
        }
        positions.sort_unstable();
        let indices: Vec<usize> = positions.iter().map(|&p| state.records[p]).collect();
        let mut latest = None;
        for &index in &indices {
            self.records[index].consumed = true;
            latest = Some(self.records[index].latest.clone());
        }
        let ordinal = indices.len() as u32;
        let last = if self.reproduce { self.settlements.last().map(|&(seq, _)| seq) } else { None };
        let holds = latest.filter(|entry| {
            !self.invalidated.contains(&entry.seq)
                && !self
                    .settlements
                    .iter()
                    .any(|&(seq, failed)| failed && seq > entry.seq && Some(seq) != last)
        });
        (ordinal, holds)
    }

    /// Accounts for every record in `scope` and below without matching them: the body of a
    /// call that replayed whole (a step, a child workflow) never runs, so its records are
    /// served by the call's own result, not orphaned.
    pub(crate) fn cover(&mut self, scope: &ScopePath) {
        if !scope.is_root() && !self.covered.contains(scope.as_str()) {
            self.covered.insert(Box::from(scope.as_str()));
        }
    }

    /// Accounts for the tool approvals of the agent call keyed `call_key` in `scope` (its
    /// approval waits and the journaled moments they were asked), which an agent that
    /// replays whole never reaches again.
    pub(crate) fn cover_approvals(&mut self, scope: &ScopePath, call_key: ContentKey) {
        if self.approvals.is_empty() {
            return;
        }
        let hex = call_key.to_hex();
        let Some(indices) = self.approvals.get(&(scope.clone(), Box::from(&hex[..12]))) else { return };
        let mut asked = Vec::new();
        for &index in indices {
            let record = &mut self.records[index];
            record.consumed = true;
            if let Some(name) = record.first.name.as_deref() {
                let identity = serde_json::json!({ "kind": "rand", "fn": "approval_asked", "key": name });
                if let Ok(key) = super::content_key(&identity) {
                    asked.push(key);
                }
            }
        }
        if let Some(state) = self.scopes.get(scope) {
            for key in asked {
                for &position in state.by_key.get(&key).into_iter().chain(state.passed.get(&key)).flatten() {
                    self.records[state.records[position]].consumed = true;
                }
            }
        }
    }

    /// Whether a record in `scope` lies in a covered scope.
    fn is_covered(&self, scope: &ScopePath) -> bool {
        within(&self.covered, scope)
    }

    /// Whether a record is history: a call an accepted re-key replaced, or one journaled
    /// inside the body of a step it replaced.
    fn is_superseded(&self, record: &Record) -> bool {
        record.superseded || within(&self.superseded_scopes, &record.first.scope)
    }

    fn is_orphan(&self, record: &Record) -> bool {
        !record.consumed && !self.is_superseded(record) && !self.is_covered(&record.first.scope)
    }

    /// Marks the call whose first entry is `first` as replaced by an accepted re-key (a
    /// decision this execution journals): history, not an orphan. A replaced step takes its
    /// old body with it.
    pub(crate) fn supersede(&mut self, first: Seq) {
        if let Some(index) = self.records.iter().position(|r| r.first.seq == first) {
            self.supersede_record(index);
        }
    }

    fn supersede_record(&mut self, index: usize) {
        let record = &mut self.records[index];
        record.superseded = true;
        if record.first.kind == super::Kind::Step {
            let body = record.first.scope.child(&Segment::step_body(record.first.key, record.first.ordinal));
            self.superseded_scopes.insert(Box::from(body.as_str()));
        }
    }

    /// Takes back the count of a miss that was never dispatched (a refused re-key).
    pub(crate) fn uncount_miss(&mut self) {
        self.preview.misses = self.preview.misses.saturating_sub(1);
    }

    /// Counts the last rerun as served from the journal instead (a reproduction of the
    /// settled run serves a journaled failure as it was).
    pub(crate) fn count_rerun_as_replayed(&mut self) {
        if self.preview.reruns > 0 {
            self.preview.reruns -= 1;
            self.preview.hits += 1;
        }
    }

    /// The preview so far, with `orphaned` counting every record not yet consumed (nor
    /// covered by a call that replayed whole).
    pub(crate) fn preview(&self) -> Preview {
        let orphaned = self.records.iter().filter(|r| self.is_orphan(r)).count() as u64;
        let superseded = self.records.iter().filter(|r| self.is_superseded(r) && !r.consumed).count() as u64;
        Preview { orphaned, superseded, ..self.preview }
    }

    /// The journaled calls of `scope` at or after its cursor that no live call has consumed,
    /// in journal order, each as its first dispatch entry and its latest attempt's terminal:
    /// what a live call that just missed most likely replaced, when its identity changed.
    pub(crate) fn unconsumed_at_cursor(&self, scope: &ScopePath) -> Vec<(Arc<Entry>, Option<Arc<Entry>>)> {
        let Some(state) = self.scopes.get(scope) else { return Vec::new() };
        state.records[state.cursor.min(state.records.len())..]
            .iter()
            .map(|&index| &self.records[index])
            .filter(|record| !record.consumed)
            .map(|record| (record.first.clone(), record.terminal.clone()))
            .collect()
    }

    /// A completed agent call no live call consumed whose identity is `live`'s (the same model,
    /// agent type and identity summary) but which was journaled at another scope of the same
    /// shape, differing only in `parallel` site or workflow call numbers: an unlabelled
    /// `parallel` or `workflow` call inserted or removed before it moved it. As its first
    /// dispatch entry and its terminal.
    pub(crate) fn moved(
        &self,
        scope: &ScopePath,
        model: &str,
        agent_type: Option<&str>,
        live: &IdentitySummary,
    ) -> Option<(Arc<Entry>, Arc<Entry>)> {
        let indices = self.agents.get(live.call_id()?)?;
        let segments = scope.segments();
        indices.iter().map(|&index| &self.records[index]).find_map(|record| {
            let first = &record.first;
            let terminal = record.terminal.as_ref().filter(|t| t.status == Status::Ok)?;
            let same = !record.consumed
                && !self.is_superseded(record)
                && first.scope != *scope
                && first.model.as_deref() == Some(model)
                && first.agent_type.as_deref() == agent_type
                && first.identity.as_deref() == Some(live)
                && super::entry::shifted(&first.scope.segments(), &segments);
            same.then(|| (first.clone(), terminal.clone()))
        })
    }

    /// The first entries of the records no live call consumed, in journal order.
    #[cfg(test)]
    pub(crate) fn orphans(&self) -> Vec<Arc<Entry>> {
        self.records.iter().filter(|r| self.is_orphan(r)).map(|r| r.first.clone()).collect()
    }

    /// The first `limit` orphans, in journal order, as a report names them.
    pub(crate) fn first_orphans(&self, limit: usize) -> Vec<Orphan> {
        self.records.iter().filter(|r| self.is_orphan(r)).take(limit).map(|r| Orphan::of(&r.first)).collect()
    }
}

/// Whether `scope` is one of `scopes` or lies beneath one.
fn within(scopes: &HashSet<Box<str>>, scope: &ScopePath) -> bool {
    if scopes.is_empty() {
        return false;
    }
    let text = scope.as_str();
    text.match_indices('/')
        .map(|(at, _)| &text[..at])
        .chain(std::iter::once(text))
        .any(|p| scopes.contains(p))
}

/// The call-key prefix of a tool approval's wait name (`approve:<12 hex>:<tool call id>`).
fn approval_prefix(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("approve:")?;
    rest.get(..12).filter(|_| rest.as_bytes().get(12) == Some(&b':'))
}

/// Facts about a segment (a ceiling raised at its start, who asked for it) that no call ever
/// matches.
fn is_segment_fact(entry: &Entry) -> bool {
    entry.kind == super::Kind::Decision
        && matches!(
            entry.value().as_ref().and_then(|v| v.get("type")).and_then(|t| t.as_str()),
            Some(super::fold::BUDGET_OVERRIDE_DECISION | super::fold::ACTION_DECISION)
        )
}

/// The call an accepted re-key decision names as superseded.
fn rekey_target(entry: &Entry) -> Option<Seq> {
    if entry.kind != super::Kind::Decision {
        return None;
    }
    let value = entry.value()?;
    if value.get("type")?.as_str()? != super::fold::REKEY_DECISION {
        return None;
    }
    value.get("supersedes")?.as_u64().map(Seq)
}

/// Settlement decisions record how a segment ended; no call ever matches them.
fn is_settlement(entry: &Entry) -> bool {
    entry.kind == super::Kind::Decision
        && entry.value().as_ref().and_then(|v| v.get("type")).and_then(|t| t.as_str())
            == Some(super::fold::SETTLE_DECISION)
}

fn effective_status(record: &Record, resolutions: &Resolutions) -> Effective {
    if record.latest.status == Status::Suspended {
        return Effective::Suspended { resolved: resolutions.is_closed(record.latest.seq) };
    }
    let entry = match &record.terminal {
        Some(terminal) => terminal,
        // A single-phase fact is its own terminal.
        None if record.latest.status != Status::Running => &record.latest,
        None => return Effective::Running,
    };
    let class = entry.error.as_ref().map_or(ErrorClass::Transport, |e| e.class());
    match entry.status {
        Status::Ok => Effective::Ok,
        Status::Error => Effective::Error(class),
        Status::Limit => Effective::Limit(class),
        Status::Cancelled => Effective::Cancelled,
        Status::Running => Effective::Running,
        Status::Suspended => Effective::Suspended { resolved: resolutions.is_closed(entry.seq) },
    }
}

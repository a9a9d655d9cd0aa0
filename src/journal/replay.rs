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

use std::sync::Arc;

use foldhash::{HashMap, HashSet};
use serde::Serialize;
use serde_json::Value;

use super::disposition::{Disposition, DispositionInput, Effective, disposition};
use super::fold::Resolutions;
use super::index::{CONSUMED, KeyState, NONE, Preview, Record, Replay, short};
use super::{ContentKey, Entry, ScopePath, Seq, Status};
use crate::error::ErrorClass;

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
    /// The orphan a call's first entry describes.
    pub fn of(entry: &Entry) -> Orphan {
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

/// The result of matching one live call. The kernel's index hands out [`Pointer`]s (what to
/// serve lies in the store); the engine reads them into entries.
#[derive(Debug, Clone)]
pub(crate) struct Match<E = Arc<Entry>> {
    /// The ordinal the call's entries carry: earlier same-key calls in its scope.
    pub ordinal: u32,
    /// What to do.
    pub outcome: Outcome<E>,
}

/// What the engine does for a matched (or unmatched) call.
#[derive(Debug, Clone)]
pub(crate) enum Outcome<E = Arc<Entry>> {
    /// No journaled counterpart: execute live.
    Live,
    /// Serve this journaled result: the terminal (or fact) entry. For a resolved suspension,
    /// the value is the resolution's.
    Replay(E),
    /// Execute live again; the new `running` entry refs `supersedes`.
    Rerun {
        /// The dispatch entry of the call's first attempt.
        supersedes: Seq,
        /// The terminal entry of the latest attempt, if it had one.
        previous: Option<E>,
    },
    /// Covered by an abandon: status `skipped`, zero spend, nothing written.
    Skip,
    /// An open suspension: keep waiting on the journaled entry, write nothing.
    Wait(E),
}

/// Where the entry a matched call is served from lies.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Pointer {
    /// The stored entry at this seq.
    Entry(Seq),
    /// A suspension a resolution closed: the suspended entry, served as `ok` with the
    /// resolution's value.
    Resolved {
        /// The suspended entry.
        wait: Seq,
        /// The value that closed it.
        value: Option<Value>,
    },
}

impl Pointer {
    /// The seq of the stored entry it names.
    pub(crate) fn seq(&self) -> Seq {
        match self {
            Pointer::Entry(seq) | Pointer::Resolved { wait: seq, .. } => *seq,
        }
    }

    /// The entry to serve, given the stored entry at [`Pointer::seq`].
    pub(crate) fn serve(self, stored: Arc<Entry>) -> Arc<Entry> {
        match self {
            Pointer::Entry(_) => stored,
            Pointer::Resolved { value, .. } => {
                let mut resolved = Arc::unwrap_or_clone(stored);
                resolved.status = Status::Ok;
                resolved.set_value(value.as_ref());
                Arc::new(resolved)
            }
        }
    }
}

impl<P> Outcome<P> {
    /// The same outcome with what it serves mapped through `read`, failing with its first error.
    ///
    /// # Errors
    /// The first error `read` returns.
    pub(crate) fn try_map<E, X>(self, mut read: impl FnMut(P) -> Result<E, X>) -> Result<Outcome<E>, X> {
        Ok(match self {
            Outcome::Live => Outcome::Live,
            Outcome::Skip => Outcome::Skip,
            Outcome::Replay(served) => Outcome::Replay(read(served)?),
            Outcome::Wait(served) => Outcome::Wait(read(served)?),
            Outcome::Rerun { supersedes, previous } => {
                Outcome::Rerun { supersedes, previous: previous.map(read).transpose()? }
            }
        })
    }
}

impl<P> Match<P> {
    /// The same match with what it serves mapped through `read` (see [`Outcome::try_map`]).
    ///
    /// # Errors
    /// The first error `read` returns.
    pub(crate) fn try_map<E, X>(self, read: impl FnMut(P) -> Result<E, X>) -> Result<Match<E>, X> {
        Ok(Match { ordinal: self.ordinal, outcome: self.outcome.try_map(read)? })
    }
}

/// A journaled call of a scope that a live call has not taken: what a call that just missed
/// may have replaced (its entries are read only when its hashes say it may be the one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Its first dispatch entry.
    pub first: Seq,
    /// Its latest attempt's terminal entry.
    pub terminal: Option<Seq>,
    /// That terminal's status.
    pub terminal_status: Option<Status>,
    /// Its kind.
    pub kind: super::Kind,
    /// [`super::recognition`] of its label (0: none).
    pub label: u32,
    /// [`super::recognition`] of an agent call's caller key or prompt hash (0: none).
    pub ident: u32,
}

impl Replay {
    /// Whether the loaded journal's last settlement says the script-time limit stopped the
    /// run (`engine::script_clock`).
    pub(crate) fn stopped_by_script_time(&self) -> bool {
        self.stopped_by_script_time
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

    /// Makes the calls whose entries include one of `seqs` rerun, whatever their status (see
    /// [`ReplayOptions::invalidate`]).
    pub(crate) fn invalidate(&mut self, seqs: impl IntoIterator<Item = Seq>) {
        self.invalidated.extend(seqs);
    }

    /// Records a resolution appended during this execution; returns whether it applied.
    pub(crate) fn resolve(&mut self, target: Seq, attempt: Seq, value: Value) -> bool {
        self.resolutions.apply(target, attempt, value) == super::fold::ResolutionClass::Applied
    }

    /// Matches one live call at `scope` with content `key`, consuming the record it binds.
    pub(crate) fn lookup(&mut self, scope: &ScopePath, key: ContentKey) -> Match<Pointer> {
        let scope_id = self.scope_id(scope);
        let cursor = self.scopes[scope_id as usize].cursor;
        let records = &self.records;
        let state = self.keys.entry((scope_id, short(&key))).or_insert(KeyState::EMPTY);
        let ordinal = state.seen;
        state.seen += 1;

        // The first unconsumed record at or after the cursor; those before it stay claimable.
        let mut found = None;
        while state.head != NONE {
            let index = state.head;
            let record = &records[index as usize];
            state.head = record.next_key;
            if !record.consumed() && index >= cursor {
                found = Some(index);
                break;
            }
        }
        // Nothing ahead of the cursor: the earliest record the cursor passed unconsumed.
        if found.is_none() {
            while state.passed != NONE && state.passed != state.head {
                let index = state.passed;
                if !records[index as usize].consumed() {
                    found = Some(index);
                    break;
                }
                state.passed = records[index as usize].next_key;
            }
        }
        let Some(index) = found else {
            if self.abandons.covers(scope, None) {
                self.preview.skipped += 1;
                return Match { ordinal, outcome: Outcome::Skip };
            }
            self.preview.misses += 1;
            return Match { ordinal, outcome: Outcome::Live };
        };
        let scope_state = &mut self.scopes[scope_id as usize];
        scope_state.cursor = scope_state.cursor.max(index + 1);
        let record = &mut self.records[index as usize];
        record.flags |= CONSUMED;
        let record = &self.records[index as usize];

        let effective = effective_status(record, &self.resolutions);
        let terminal = record.terminal();
        let input = DispositionInput {
            effective,
            memoize_outcome: record.flags & super::index::MEMOIZED != 0,
            run_settled_ok: self.run_settled_ok,
            abandoned: self.abandons.covers(scope, Some(record.first)),
            invalidated: self.invalidated.contains(&record.first)
                || self.invalidated.contains(&record.latest)
                || terminal.is_some_and(|t| self.invalidated.contains(&t)),
        };
        // A decision in a call's place (an admission refusal) is final: timing made it, and
        // a replay must not make it again. Invalidating it reruns the call.
        let decided = record.kind == super::Kind::Decision && !input.invalidated && !input.abandoned;
        let outcome = match if decided { Disposition::Replay } else { disposition(input) } {
            Disposition::Replay => {
                self.preview.hits += 1;
                match (terminal, effective) {
                    (_, Effective::Suspended { .. }) => Outcome::Replay(Pointer::Resolved {
                        wait: record.latest,
                        value: self.resolutions.value_for(record.latest).cloned(),
                    }),
                    (Some(terminal), _) => Outcome::Replay(Pointer::Entry(terminal)),
                    (None, _) => Outcome::Replay(Pointer::Entry(record.latest)),
                }
            }
            Disposition::Rerun => {
                self.preview.reruns += 1;
                Outcome::Rerun { supersedes: record.first, previous: terminal.map(Pointer::Entry) }
            }
            Disposition::Skip => {
                self.preview.skipped += 1;
                Outcome::Skip
            }
            Disposition::Wait => {
                self.preview.hits += 1;
                Outcome::Wait(Pointer::Entry(record.latest))
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
    /// is journaled if it fails again).
    pub(crate) fn decision(&mut self, scope: &ScopePath, key: ContentKey) -> (u32, Option<Pointer>) {
        let Some(&scope_id) = self.scope_ids.get(scope) else { return (0, None) };
        let Some(state) = self.keys.get(&(scope_id, short(&key))) else { return (0, None) };
        let mut index = state.passed;
        let mut count = 0u32;
        let mut latest = None;
        while index != NONE {
            let record = &mut self.records[index as usize];
            record.flags |= CONSUMED;
            latest = Some(record.latest);
            count += 1;
            index = record.next_key;
        }
        // Reproducing the run as it last settled, the last settlement does not count: a
        // fail-fast decision it followed is how the run ended, and a strict replay raises it
        // again instead of running the fan-out, whose siblings got as far as timing let them.
        let last = if self.reproduce { self.settlements.last().map(|&(seq, _)| seq) } else { None };
        let holds = latest.filter(|seq| {
            !self.invalidated.contains(seq)
                && !self
                    .settlements
                    .iter()
                    .any(|&(settled, failed)| failed && settled > *seq && Some(settled) != last)
        });
        (count, holds.map(Pointer::Entry))
    }

    /// Accounts for every record in `scope` and below without matching them: the body of a
    /// call that replayed whole (a step, a child workflow) never runs, so its records are
    /// served by the call's own result, not orphaned.
    pub(crate) fn cover(&mut self, scope: &ScopePath) {
        if !scope.is_root() && !self.covered.contains(scope.as_str()) && self.journals_within(scope) {
            self.covered.insert(Box::from(scope.as_str()));
        }
    }

    /// Whether the loaded journal holds a record in `scope` or in a scope below it.
    fn journals_within(&self, scope: &ScopePath) -> bool {
        let journaled = self.journaled_scopes.len();
        if self.scope_ids.get(scope).is_some_and(|&id| (id as usize) < journaled) {
            return true;
        }
        // Paths below `scope` start with it and a `/`: in sorted order they follow one
        // another from the first path at or after that prefix.
        let prefix = format!("{}/", scope.as_str());
        let path = |id: u32| self.scopes[id as usize].path.as_str();
        let at = self.journaled_scopes.partition_point(|&id| path(id) < prefix.as_str());
        self.journaled_scopes.get(at).is_some_and(|&id| path(id).starts_with(&prefix))
    }

    /// Accounts for the tool approvals of the agent call keyed `call_key` in `scope` (its
    /// approval waits and the journaled moments they were asked), which an agent that
    /// replays whole never reaches again.
    pub(crate) fn cover_approvals(&mut self, scope: &ScopePath, call_key: ContentKey) {
        if self.approvals.is_empty() {
            return;
        }
        let Some(&scope_id) = self.scope_ids.get(scope) else { return };
        let hex = call_key.to_hex();
        let mut prefix = [0u8; 12];
        prefix.copy_from_slice(&hex.as_bytes()[..12]);
        let Some(approvals) = self.approvals.get(&(scope_id, prefix)) else { return };
        let mut asked = Vec::new();
        for &(index, asked_key) in approvals {
            self.records[index as usize].flags |= CONSUMED;
            asked.extend(asked_key);
        }
        for key in asked {
            let Some(state) = self.keys.get(&(scope_id, key)) else { continue };
            let mut index = state.passed;
            while index != NONE {
                let record = &mut self.records[index as usize];
                record.flags |= CONSUMED;
                index = record.next_key;
            }
        }
    }

    /// The scopes that hold journaled records (a live call interns its scope too, after
    /// them): all a record can name.
    fn journaled(&self) -> &[super::index::ScopeState] {
        &self.scopes[..self.journaled_scopes.len()]
    }

    /// Whether each journaled scope lies in a covered scope, by scope id.
    fn covered_scopes(&self) -> Vec<bool> {
        self.journaled().iter().map(|scope| within(&self.covered, &scope.path)).collect()
    }

    /// Whether each journaled scope lies in the body of a step an accepted re-key replaced,
    /// by scope id.
    fn superseded_bodies(&self) -> Vec<bool> {
        self.journaled().iter().map(|scope| within(&self.superseded_scopes, &scope.path)).collect()
    }

    /// Whether a record is history: a call an accepted re-key replaced, or one journaled
    /// inside the body of a step it replaced (`bodies` from [`Replay::superseded_bodies`]).
    fn is_superseded(record: &Record, bodies: &[bool]) -> bool {
        record.superseded() || bodies[record.scope as usize]
    }

    fn is_orphan(record: &Record, covered: &[bool], bodies: &[bool]) -> bool {
        !record.consumed() && !Replay::is_superseded(record, bodies) && !covered[record.scope as usize]
    }

    /// Marks the call whose first entry is `first` as replaced by an accepted re-key (a
    /// decision this execution journals): history, not an orphan. A replaced step takes its
    /// old body with it.
    pub(crate) fn supersede(&mut self, first: Seq) {
        if let Some(index) = self.record_by_first(first) {
            self.supersede_record(index);
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
        let (covered, bodies) = (self.covered_scopes(), self.superseded_bodies());
        let orphaned = self.records.iter().filter(|r| Replay::is_orphan(r, &covered, &bodies)).count() as u64;
        let superseded =
            self.records.iter().filter(|r| Replay::is_superseded(r, &bodies) && !r.consumed()).count() as u64;
        Preview { orphaned, superseded, ..self.preview }
    }

    /// The journaled calls of `scope` at or after its cursor that no live call has consumed
    /// and that `wanted` accepts, in journal order: what a live call that just missed most
    /// likely replaced, when its identity changed.
    pub(crate) fn unconsumed_at_cursor(
        &mut self,
        scope: &ScopePath,
        wanted: impl Fn(&Candidate) -> bool,
    ) -> Vec<Candidate> {
        let Some(&scope_id) = self.scope_ids.get(scope) else { return Vec::new() };
        let state = &mut self.scopes[scope_id as usize];
        while state.at_cursor != NONE && state.at_cursor < state.cursor {
            state.at_cursor = self.records[state.at_cursor as usize].next_scope;
        }
        let mut index = state.at_cursor;
        let mut out = Vec::new();
        while index != NONE {
            let record = &self.records[index as usize];
            if !record.consumed() {
                let candidate = Candidate::of(record);
                if wanted(&candidate) {
                    out.push(candidate);
                }
            }
            index = record.next_scope;
        }
        out
    }

    /// The completed agent calls no live call consumed whose caller key or prompt hash has
    /// [`super::recognition`] `ident`, journaled at another scope of the same shape as
    /// `scope`, differing only in `parallel` site or workflow call numbers (an unlabelled
    /// `parallel` or `workflow` call inserted or removed before it moved them), in journal
    /// order, as their first dispatch entry and their terminal: where a caller looks for the
    /// call a live one is (it compares model, agent type and identity on the entries).
    pub(crate) fn moved(&self, scope: &ScopePath, ident: u32) -> Vec<(Seq, Seq)> {
        let segments = scope.segments();
        let mut shapes: HashMap<u32, bool> = HashMap::default();
        // Found once a record is worth it: a fresh run's live calls (thousands of children,
        // each in its own scope) ask with no record at all.
        let mut bodies: Option<Vec<bool>> = None;
        let mut out = Vec::new();
        for record in &self.records {
            if record.kind != super::Kind::Agent
                || record.ident != ident
                || record.consumed()
                || record.terminal_status() != Some(Status::Ok)
                || Replay::is_superseded(record, bodies.get_or_insert_with(|| self.superseded_bodies()))
            {
                continue;
            }
            let path = &self.scopes[record.scope as usize].path;
            let shifted = *shapes
                .entry(record.scope)
                .or_insert_with(|| path != scope && super::entry::shifted(&path.segments(), &segments));
            if let (true, Some(terminal)) = (shifted, record.terminal()) {
                out.push((record.first, terminal));
            }
        }
        out
    }

    /// The first entries of the records no live call consumed, in journal order (at most `limit`).
    pub(crate) fn orphans(&self, limit: usize) -> Vec<Seq> {
        let (covered, bodies) = (self.covered_scopes(), self.superseded_bodies());
        self.records
            .iter()
            .filter(|r| Replay::is_orphan(r, &covered, &bodies))
            .take(limit)
            .map(|r| r.first)
            .collect()
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
        .any(|prefix| scopes.contains(prefix))
}

impl Candidate {
    fn of(record: &Record) -> Candidate {
        Candidate {
            first: record.first,
            terminal: record.terminal(),
            terminal_status: record.terminal_status(),
            kind: record.kind,
            label: record.label,
            ident: record.ident,
        }
    }
}

fn effective_status(record: &Record, resolutions: &Resolutions) -> Effective {
    if record.latest_status == Status::Suspended {
        return Effective::Suspended { resolved: resolutions.is_closed(record.latest) };
    }
    let Some(end) = record.end else { return Effective::Running };
    let class: ErrorClass = record.class;
    match end {
        Status::Ok => Effective::Ok,
        Status::Error => Effective::Error(class),
        Status::Limit => Effective::Limit(class),
        Status::Cancelled => Effective::Cancelled,
        Status::Running => Effective::Running,
        Status::Suspended => {
            let at = record.terminal().unwrap_or(record.latest);
            Effective::Suspended { resolved: resolutions.is_closed(at) }
        }
    }
}

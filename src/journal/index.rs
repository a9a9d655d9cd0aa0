//! The resident index of a loaded journal: what matching needs of each call, and nothing else.
//!
//! A run at scale holds millions of entries; their values, prompts and answers stay in the
//! store. The index keeps one compact [`Record`] per call (its seqs, scope, status, the class
//! of its failure, a few flags and two short hashes that let a miss find the call it most
//! likely replaced), scope paths interned once, and per scope and content key (shortened to
//! its first 16 bytes: a collision needs 2^64 keys) the chain of its records and the live
//! calls made so far. A matched call is served by seq ([`super::Pointer`]): the engine reads
//! that one entry from the store when it needs it.
//!
//! Records are linked into chains instead of kept in per-key queues: each record names the
//! next record of its scope and the next record with its key in its scope, so a scope or a
//! key costs a few integers, not a collection.
//!
//! The index is built from a journal read page by page ([`ReplayBuilder::add`]): an entry is
//! folded in and dropped.

use foldhash::{HashMap, HashMapExt, HashSet};

use serde::Serialize;
use serde_json::Value;

use super::fold::{Abandons, Resolutions};
use super::{ContentKey, Entry, IdentitySummary, Kind, ScopePath, Segment, Seq, Status};
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

/// Options fixed at resume.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReplayOptions {
    /// Entries (by seq) whose calls must rerun regardless of their status.
    pub invalidate: Vec<Seq>,
    /// Reproduce the run as it last settled (a strict replay): a decision that settlement
    /// followed still holds, since it is how that segment ended (see [`Replay::decision`]).
    pub reproduce: bool,
}

/// A loaded journal indexed for matching (see `index.rs`), plus the preview counters of this
/// execution.
#[derive(Debug)]
pub(crate) struct Replay {
    pub(super) records: Vec<Record>,
    pub(super) scopes: Vec<ScopeState>,
    pub(super) scope_ids: HashMap<ScopePath, u32>,
    /// Per scope and key: its chain of records and the live calls made with it.
    pub(super) keys: HashMap<(u32, Short), KeyState>,
    pub(super) resolutions: Resolutions,
    pub(super) abandons: Abandons,
    pub(super) invalidated: HashSet<Seq>,
    /// Scopes whose records are accounted for without being matched one by one: the body
    /// of a step or child workflow that replayed whole (its body never ran). Only scopes
    /// that hold journaled records are kept: a replayed agent call covers its approvals
    /// scope, which almost never holds any, and a million replayed calls would otherwise keep
    /// a million paths.
    pub(super) covered: HashSet<Box<str>>,
    /// The ids of the scopes that hold journaled records (every scope interned while the
    /// index was built), sorted by path: what finds whether a scope has records below it.
    pub(super) journaled_scopes: Vec<u32>,
    /// The body scopes of steps an accepted re-key replaced: what the old body journaled is
    /// history with its step, not orphaned.
    pub(super) superseded_scopes: HashSet<Box<str>>,
    /// Step records by index, with their first entry's ordinal and the first 8 bytes of
    /// their key: what names a step's body scope when a re-key supersedes the step.
    pub(super) steps: HashMap<u32, (u32, [u8; 8])>,
    /// Whether the run is reproduced as it last settled ([`ReplayOptions::reproduce`]).
    pub(super) reproduce: bool,
    /// Every settlement decision: its seq and whether it ended the segment in failure
    /// (`error` or `cancelled`), after which a resume retries what failed.
    pub(super) settlements: Vec<(Seq, bool)>,
    /// Whether the last settlement says the script-time limit stopped the run
    /// (`engine::script_clock`).
    pub(super) stopped_by_script_time: bool,
    /// Tool approvals (`external` entries named `approve:<12 hex of the call's key>:<id>`)
    /// by scope and call-key prefix, each with the key of its journaled asking moment: an
    /// agent that replays whole accounts for its own.
    pub(super) approvals: HashMap<(u32, [u8; 12]), Vec<Approval>>,
    pub(super) run_settled_ok: bool,
    pub(super) tail: Seq,
    pub(super) preview: Preview,
}

/// A tool approval's record, and the key its journaled asking moment is matched by.
pub(super) type Approval = (u32, Option<Short>);

/// No record: the end of a chain.
pub(super) const NONE: u32 = u32::MAX;

/// A content key shortened to its first 16 bytes.
pub(super) type Short = [u8; 16];

/// The first 16 bytes of a content key.
pub(super) fn short(key: &ContentKey) -> Short {
    let mut out = [0u8; 16];
    out.copy_from_slice(&key.as_bytes()[..16]);
    out
}

/// A short hash of a text (a label, a call's caller key or prompt hash) that a missed call
/// compares with the records ahead of it before reading any of them: never 0, which means
/// "none". Equal texts hash equal; unequal ones rarely do, and a reader confirms on the entry.
pub(crate) fn recognition(text: &str) -> u32 {
    // FNV-1a: stable within a process, which is all an in-memory index needs.
    let mut hash: u32 = 0x811c_9dc5;
    for byte in text.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash.max(1)
}

/// One call as matching sees it: its dispatch (or fact) entry, its latest attempt and that
/// attempt's terminal entry, by seq, with what the disposition reads of them.
#[derive(Debug, Clone)]
pub(super) struct Record {
    /// The first dispatch (or the fact) entry.
    pub(super) first: Seq,
    /// The latest attempt's dispatch entry.
    pub(super) latest: Seq,
    /// The latest attempt's terminal entry; 0 when it has none.
    pub(super) terminal: u64,
    pub(super) scope: u32,
    /// The next record of this scope with this key.
    pub(super) next_key: u32,
    /// The next record of this scope.
    pub(super) next_scope: u32,
    /// [`recognition`] of the first entry's label (0: none).
    pub(super) label: u32,
    /// [`recognition`] of an agent call's caller key or prompt hash (0: none).
    pub(super) ident: u32,
    /// The first entry's kind.
    pub(super) kind: Kind,
    /// The latest attempt's dispatch status.
    pub(super) latest_status: Status,
    /// How the latest attempt ended: its terminal's status, or a fact's own; `None` while
    /// it runs.
    pub(super) end: Option<Status>,
    /// The class of the failure `end` records (transport when none is journaled).
    pub(super) class: ErrorClass,
    pub(super) flags: u8,
}

/// A live call took the record.
pub(super) const CONSUMED: u8 = 1;
/// A re-key decision names it: a call an accepted re-key replaced.
pub(super) const SUPERSEDED: u8 = 2;
/// A task-class failure of it replays instead of rerunning.
pub(super) const MEMOIZED: u8 = 4;

impl Record {
    pub(super) fn consumed(&self) -> bool {
        self.flags & CONSUMED != 0
    }

    pub(super) fn superseded(&self) -> bool {
        self.flags & SUPERSEDED != 0
    }

    /// The latest attempt's terminal entry.
    pub(super) fn terminal(&self) -> Option<Seq> {
        (self.terminal != 0).then_some(Seq(self.terminal))
    }

    /// The status of the latest attempt's terminal entry, when it has one.
    pub(super) fn terminal_status(&self) -> Option<Status> {
        self.terminal().and(self.end)
    }
}

/// A scope: its records as a chain, and how far matching has moved through them.
#[derive(Debug, Clone)]
pub(super) struct ScopeState {
    pub(super) path: ScopePath,
    /// Its first and last record.
    pub(super) head: u32,
    pub(super) last: u32,
    /// Records before this index (records are in journal order) cannot match ahead.
    pub(super) cursor: u32,
    /// The first record of the chain at or after `cursor`, found lazily (the cursor only
    /// moves forward, so this walk is paid once per scope).
    pub(super) at_cursor: u32,
}

/// A key in a scope: the chain of its records and the live calls made with it.
#[derive(Debug, Clone, Copy)]
pub(super) struct KeyState {
    /// The last record of the chain (where the next one is linked while building).
    pub(super) last: u32,
    /// The first record the cursor has not passed (records before it were taken, or passed
    /// by the cursor while unconsumed: the call an edit inserted is journaled after every
    /// record of the first segment, so once it replays the cursor lies past its neighbours,
    /// which are still theirs to claim).
    pub(super) head: u32,
    /// The first record that may still be claimed after the cursor passed it.
    pub(super) passed: u32,
    /// Live calls made with the key in this scope (for ordinals).
    pub(super) seen: u32,
}

impl KeyState {
    pub(super) const EMPTY: KeyState = KeyState { last: NONE, head: NONE, passed: NONE, seen: 0 };
}

/// Builds a [`Replay`] from a journal's entries in order.
#[derive(Debug)]
pub(crate) struct ReplayBuilder {
    replay: Replay,
    /// Re-dispatched attempts' seqs, by the record they joined (first seqs are found by
    /// search: records are in journal order).
    redispatched: HashMap<Seq, u32>,
}

impl Replay {
    /// Starts an index; feed it the journal's entries in order.
    pub(crate) fn builder(options: &ReplayOptions) -> ReplayBuilder {
        let replay = Replay {
            records: Vec::new(),
            scopes: Vec::new(),
            scope_ids: HashMap::new(),
            keys: HashMap::new(),
            resolutions: Resolutions::default(),
            abandons: Abandons::default(),
            invalidated: options.invalidate.iter().copied().collect(),
            covered: HashSet::default(),
            journaled_scopes: Vec::new(),
            superseded_scopes: HashSet::default(),
            steps: HashMap::new(),
            reproduce: options.reproduce,
            settlements: Vec::new(),
            stopped_by_script_time: false,
            approvals: HashMap::new(),
            run_settled_ok: false,
            tail: Seq(0),
            preview: Preview::default(),
        };
        ReplayBuilder { replay, redispatched: HashMap::new() }
    }

    /// Indexes a decoded journal.
    #[cfg(test)]
    pub(crate) fn new(entries: Vec<Entry>, options: &ReplayOptions) -> Replay {
        let mut builder = Replay::builder(options);
        for entry in &entries {
            builder.add(entry);
        }
        builder.finish()
    }

    /// An index over an empty journal (a fresh run).
    pub(crate) fn empty() -> Replay {
        Replay::builder(&ReplayOptions::default()).finish()
    }

    /// The id of `scope`, interned on first use.
    pub(super) fn scope_id(&mut self, scope: &ScopePath) -> u32 {
        if let Some(&id) = self.scope_ids.get(scope) {
            return id;
        }
        let id = self.scopes.len() as u32;
        self.scopes.push(ScopeState {
            path: scope.clone(),
            head: NONE,
            last: NONE,
            cursor: 0,
            at_cursor: NONE,
        });
        self.scope_ids.insert(scope.clone(), id);
        id
    }

    /// Marks record `index` as replaced by an accepted re-key; a replaced step takes its old
    /// body scope with it.
    pub(super) fn supersede_record(&mut self, index: u32) {
        let Some(record) = self.records.get_mut(index as usize) else { return };
        record.flags |= SUPERSEDED;
        if let Some(&(ordinal, key)) = self.steps.get(&index) {
            let hex: String = key.iter().map(|byte| format!("{byte:02x}")).collect();
            let body = self.scopes[record.scope as usize].path.child(&Segment::Step { key: hex, ordinal });
            self.superseded_scopes.insert(Box::from(body.as_str()));
        }
    }

    /// The record whose first entry is `seq`.
    pub(super) fn record_by_first(&self, seq: Seq) -> Option<u32> {
        self.records.binary_search_by_key(&seq, |record| record.first).ok().map(|i| i as u32)
    }
}

impl ReplayBuilder {
    /// Folds one entry (the next in journal order) into the index.
    pub(crate) fn add(&mut self, entry: &Entry) {
        let replay = &mut self.replay;
        replay.tail = entry.seq;
        replay.resolutions.add(entry);
        replay.abandons.add(entry);
        replay.run_settled_ok |= super::fold::is_ok_settlement(entry);
        if let Some(failed) = settlement_failed(entry) {
            replay.settlements.push((entry.seq, failed));
            replay.stopped_by_script_time =
                stopped_by(entry).as_deref() == Some(super::fold::STOPPED_BY_SCRIPT_TIME);
            return;
        }
        if let Some(target) = rekey_target(entry) {
            if let Some(index) = self.record_of(target) {
                self.replay.supersede_record(index);
            }
            return;
        }
        if entry.kind.is_ref_entry() || is_segment_fact(entry) {
            return;
        }
        match (entry.status, entry.target) {
            (Status::Running, Some(target)) => {
                // A re-dispatch: the record of the call it supersedes moves on to this attempt.
                if let Some(index) = self.record_of(target) {
                    let record = &mut self.replay.records[index as usize];
                    record.latest = entry.seq;
                    record.latest_status = entry.status;
                    record.terminal = 0;
                    record.end = None;
                    record.class = ErrorClass::Transport;
                    self.redispatched.insert(entry.seq, index);
                    return;
                }
            }
            (status, Some(target)) if status.is_terminal() => {
                if let Some(index) = self.record_of(target) {
                    let record = &mut self.replay.records[index as usize];
                    if record.latest == target {
                        record.terminal = entry.seq.0;
                        record.end = Some(entry.status);
                        record.class = class_of(entry);
                    }
                    return;
                }
            }
            _ => {}
        }
        self.push_record(entry);
    }

    /// The index, built.
    pub(crate) fn finish(mut self) -> Replay {
        let replay = &mut self.replay;
        let mut journaled: Vec<u32> = (0..replay.scopes.len() as u32).collect();
        journaled
            .sort_unstable_by(|&a, &b| replay.scopes[a as usize].path.cmp(&replay.scopes[b as usize].path));
        replay.journaled_scopes = journaled;
        self.replay.records.shrink_to_fit();
        self.replay.keys.shrink_to_fit();
        self.replay
    }

    fn record_of(&self, seq: Seq) -> Option<u32> {
        self.replay.record_by_first(seq).or_else(|| self.redispatched.get(&seq).copied())
    }

    fn push_record(&mut self, entry: &Entry) {
        let replay = &mut self.replay;
        let index = replay.records.len() as u32;
        let scope = replay.scope_id(&entry.scope);
        let state = &mut replay.scopes[scope as usize];
        if state.last == NONE {
            state.head = index;
            state.at_cursor = index;
        } else {
            replay.records[state.last as usize].next_scope = index;
        }
        state.last = index;
        let slot = replay.keys.entry((scope, short(&entry.key))).or_insert(KeyState::EMPTY);
        if slot.last == NONE {
            slot.head = index;
            slot.passed = index;
        } else {
            replay.records[slot.last as usize].next_key = index;
        }
        slot.last = index;
        if entry.kind == Kind::External
            && let Some(prefix) = entry.name.as_deref().and_then(approval_prefix)
        {
            let identity = serde_json::json!({ "kind": "rand", "fn": "approval_asked", "key": entry.name });
            let asked = super::content_key(&identity).ok().map(|key| short(&key));
            let mut key = [0u8; 12];
            key.copy_from_slice(prefix.as_bytes());
            replay.approvals.entry((scope, key)).or_default().push((index, asked));
        }
        let ident = match entry.identity.as_deref() {
            Some(summary) if entry.kind == Kind::Agent => {
                IdentitySummary::call_id(summary).map_or(0, recognition)
            }
            _ => 0,
        };
        if entry.kind == Kind::Step {
            let mut key = [0u8; 8];
            key.copy_from_slice(&entry.key.as_bytes()[..8]);
            replay.steps.insert(index, (entry.ordinal, key));
        }
        let fact = entry.status != Status::Running;
        replay.records.push(Record {
            first: entry.seq,
            latest: entry.seq,
            terminal: 0,
            scope,
            next_key: NONE,
            next_scope: NONE,
            label: entry.label.as_deref().map_or(0, recognition),
            ident,
            kind: entry.kind,
            latest_status: entry.status,
            end: fact.then_some(entry.status),
            class: if fact { class_of(entry) } else { ErrorClass::Transport },
            flags: if entry.memoize_outcome { MEMOIZED } else { 0 },
        });
    }
}

/// The class of the failure an entry records (transport when it records none).
fn class_of(entry: &Entry) -> ErrorClass {
    entry.error.as_ref().map_or(ErrorClass::Transport, |error| error.class())
}

/// The call-key prefix of a tool approval's wait name (`approve:<12 hex>:<tool call id>`).
pub(super) fn approval_prefix(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("approve:")?;
    rest.get(..12).filter(|_| rest.as_bytes().get(12) == Some(&b':'))
}

/// The `type` of a decision entry's value.
fn decision_type(entry: &Entry) -> Option<String> {
    if entry.kind != super::Kind::Decision {
        return None;
    }
    let value = entry.value()?;
    value.get("type")?.as_str().map(str::to_owned)
}

/// Facts about a segment (a ceiling raised at its start, who asked for it) that no call ever
/// matches.
pub(super) fn is_segment_fact(entry: &Entry) -> bool {
    matches!(
        decision_type(entry).as_deref(),
        Some(super::fold::BUDGET_OVERRIDE_DECISION | super::fold::ACTION_DECISION)
    )
}

/// The call an accepted re-key decision names as superseded.
pub(super) fn rekey_target(entry: &Entry) -> Option<Seq> {
    if entry.kind != super::Kind::Decision {
        return None;
    }
    let value = entry.value()?;
    if value.get("type")?.as_str()? != super::fold::REKEY_DECISION {
        return None;
    }
    value.get("supersedes")?.as_u64().map(Seq)
}

/// A settlement's `stopped_by`: the bound timing decided that stopped the run, if one did.
fn stopped_by(entry: &Entry) -> Option<String> {
    entry.value()?.get("stopped_by")?.as_str().map(str::to_owned)
}

/// For a settlement decision (how a segment ended; no call ever matches one): whether it
/// ended the segment in failure (`error` or `cancelled`).
pub(super) fn settlement_failed(entry: &Entry) -> Option<bool> {
    if entry.kind != super::Kind::Decision {
        return None;
    }
    let value = entry.value()?;
    if value.get("type").and_then(Value::as_str) != Some(super::fold::SETTLE_DECISION) {
        return None;
    }
    Some(matches!(value.get("status").and_then(Value::as_str), Some("error" | "cancelled")))
}

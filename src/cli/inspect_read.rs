//! What `cairn inspect` reads of a run's journal, page by page: the digest every reader of a
//! run shares (counts, cost, waits, actions, the settlement's error, ceilings), and the two
//! reports that read a few kinds of entries whole (an orchestration's decisions and children,
//! an agent call's tool calls), kept as those entries pass. `--json` then writes the entries
//! themselves as it reads them a second time. Nothing here holds the journal: a long run is
//! inspected in the memory of a page and its reports.

use std::cell::RefCell;
use std::collections::HashSet;
use std::io::Write;

use serde::ser::{Error as _, SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::engine::RunDigest;
use crate::error::Error;
use crate::journal::{self, Entry, Kind, Segment, Status};
use crate::store::{JournalStore, RunId};

/// A run's journal as `cairn inspect` shows it.
pub(super) struct Inspected {
    pub(super) digest: RunDigest,
    pub(super) orchestrations: Vec<Value>,
    pub(super) tools: Vec<Value>,
}

/// Reads `run`'s journal once, page by page, into what `cairn inspect` shows.
///
/// # Errors
/// A store failure, or an entry that does not decode.
pub(super) fn inspect(store: &dyn JournalStore, run: &RunId) -> Result<Inspected, Error> {
    // What the orchestration report reads: decisions, and the ends of orchestrated children
    // (without their answers).
    let mut orchestrated: Vec<Entry> = Vec::new();
    // What the tool report reads: tool entries, and (found by a second read, when there are
    // any) the agent calls they belong to.
    let mut tool_entries: Vec<Entry> = Vec::new();
    let digest = RunDigest::read(store, run, |entry| match (entry.kind, entry.status) {
        (Kind::Decision, _) => orchestrated.push(entry.clone()),
        (Kind::Agent, status) if status.is_terminal() && in_child(entry) => {
            let mut slim = Entry::new(entry.seq, entry.kind, entry.status, entry.scope.clone(), entry.key, 0);
            slim.cost = entry.cost;
            orchestrated.push(slim);
        }
        (Kind::Tool, _) => tool_entries.push(entry.clone()),
        _ => {}
    })?;
    let orchestrations = crate::orchestrator::journal_report(&orchestrated);
    drop(orchestrated);
    let tools = if tool_entries.is_empty() {
        Vec::new()
    } else {
        let scopes: HashSet<String> = tool_entries.iter().map(|e| e.scope.to_string()).collect();
        let mut read = Vec::new();
        for entry in journal::entries(store, run, 0) {
            let entry = entry?;
            if entry.kind == Kind::Agent
                && entry.status == Status::Running
                && scopes.contains(own_scope(&entry).as_str())
            {
                read.push(entry);
            }
        }
        read.extend(tool_entries);
        read.sort_by_key(|e| e.seq);
        super::tool_report::tool_report(&read)
    };
    Ok(Inspected { digest, orchestrations, tools })
}

/// Whether an entry lies in an orchestrated child's scope.
fn in_child(entry: &Entry) -> bool {
    entry.scope.as_str().split('/').any(|segment| segment.starts_with("at:child:"))
}

/// The scope an agent call's tool calls are journaled in.
fn own_scope(agent: &Entry) -> journal::ScopePath {
    let mut hex = agent.key.to_hex();
    hex.truncate(16);
    agent.scope.child(&Segment::Site { label: format!("agent-{hex}"), index: agent.ordinal })
}

/// Writes `cairn inspect --json`'s document: `fields` (each already a JSON value, the keys
/// sorted, as one JSON object prints) with the run's entries under `entries`, read a second
/// time page by page and written as they are read.
///
/// # Errors
/// A store failure, an entry that does not decode, or a failed write (the document is then
/// cut short).
pub(super) fn write_json(
    out: &mut dyn Write,
    store: &dyn JournalStore,
    run: &RunId,
    fields: serde_json::Map<String, Value>,
) -> Result<(), Error> {
    let entries = Streamed(RefCell::new(Some(journal::entries(store, run, 0))));
    let document = Document { fields, entries: &entries };
    let mut serializer = serde_json::Serializer::pretty(&mut *out);
    document.serialize(&mut serializer).map_err(|e| Error::internal(format!("writing the journal: {e}")))?;
    writeln!(out).map_err(|e| Error::internal(format!("writing the journal: {e}")))
}

/// The document: its fields and, in key order among them, `entries`.
struct Document<'a, 's> {
    fields: serde_json::Map<String, Value>,
    entries: &'a Streamed<'s>,
}

impl Serialize for Document<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.fields.len() + 1))?;
        let mut written = false;
        for (key, value) in &self.fields {
            if !written && key.as_str() > "entries" {
                map.serialize_entry("entries", self.entries)?;
                written = true;
            }
            map.serialize_entry(key, value)?;
        }
        if !written {
            map.serialize_entry("entries", self.entries)?;
        }
        map.end()
    }
}

/// The entries, serialized as they are read (once).
struct Streamed<'s>(RefCell<Option<journal::Entries<'s>>>);

impl Serialize for Streamed<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        for entry in self.0.borrow_mut().take().into_iter().flatten() {
            let entry = entry.map_err(S::Error::custom)?;
            // As a JSON value: its keys sorted, as the document's other fields print.
            seq.serialize_element(&serde_json::to_value(&entry).map_err(S::Error::custom)?)?;
        }
        seq.end()
    }
}

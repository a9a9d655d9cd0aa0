//! Resolutions of external waits, the journal side: finding the wait a key names, checking a
//! value against the wait's schema, the `resolution` ref-entry, and resolving a run that is
//! not live in this process (appended to its stored journal).

use serde_json::Value;

use super::registry::EngineInner;
use crate::error::Error;
use crate::journal::{self, ContentKey, Entry, Kind, Resolutions, ScopePath, Seq, Status};
use crate::store::{Lease, RunId};

/// The newest suspended `external` entry for `key`.
pub(super) fn find_suspension<'a>(
    entries: impl DoubleEndedIterator<Item = &'a Entry>,
    key: &str,
) -> Option<Seq> {
    entries
        .rev()
        .find(|e| e.kind == Kind::External && e.status == Status::Suspended && e.name.as_deref() == Some(key))
        .map(|e| e.seq)
}

/// Refuses a resolution that does not satisfy the wait's schema; the wait stays open.
pub(super) fn check_resolution(suspended: Option<&Entry>, key: &str, value: &Value) -> Result<(), Error> {
    let Some(schema) =
        suspended.and_then(|e| e.value()).and_then(|v| v.get("schema").cloned()).filter(|s| !s.is_null())
    else {
        return Ok(());
    };
    let validator = jsonschema::validator_for(&schema)
        .map_err(|e| Error::validation(format!("the wait on {key:?} has an invalid schema: {e}")))?;
    let problems: Vec<String> =
        validator.iter_errors(value).map(|e| format!("at '{}': {e}", e.instance_path())).collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::validation(format!(
            "the resolution of {key:?} does not match its schema: {}",
            problems.join("; ")
        )))
    }
}

/// The `resolution` ref-entry of an attempt to close the wait journaled at `target`, by the
/// service token named `by` when one asked.
pub(super) fn resolution_entry(target: Seq, key: &str, value: Value, by: Option<&str>) -> Entry {
    let identity = serde_json::json!({ "kind": "resolution", "key": key });
    let content = journal::content_key(&identity).unwrap_or(ContentKey::from_bytes([0; 32]));
    let mut entry = Entry::new(Seq(0), Kind::Resolution, Status::Ok, ScopePath::root(), content, 0);
    entry.target = Some(target);
    entry.set_value(Some(&value));
    entry.name = Some(key.to_owned());
    entry.by = by.map(journal::intern);
    entry
}

/// Appends a resolution to a run that is not live here (under its lease, when given).
pub(super) fn resolve_stored(
    engine: &EngineInner,
    run_id: &RunId,
    key: &str,
    value: Value,
    by: Option<&str>,
    lease: Option<&Lease>,
) -> Result<bool, Error> {
    let (entries, target) = stored_wait(engine, run_id, key, &value)?;
    let applied = !Resolutions::fold(entries.iter()).is_closed(target);
    let mut entry = resolution_entry(target, key, value, by);
    entry.seq = Seq(entries.last().map_or(1, |e| e.seq.0 + 1));
    entry.ts = Some(engine.clock.now_ms());
    engine.journal.append(run_id, &[journal::encode(&entry)?], lease)?;
    Ok(applied)
}

/// Checks that a stored run waits on `key` and that `value` satisfies the wait.
///
/// # Errors
/// `config` for an unknown run; `validation` for no such wait or a value its schema refuses.
pub(super) fn check_stored_resolution(
    engine: &EngineInner,
    run_id: &RunId,
    key: &str,
    value: &Value,
) -> Result<(), Error> {
    stored_wait(engine, run_id, key, value).map(drop)
}

/// The keys a run's open waits are on, as a wrong key's error lists them.
fn open_waits(entries: &[Entry]) -> String {
    let keys: Vec<String> = journal::pending_waits(entries)
        .iter()
        .filter_map(|w| w.get("key").and_then(Value::as_str).map(|k| format!("{k:?}")))
        .collect();
    if keys.is_empty() {
        "it waits on nothing".to_owned()
    } else {
        format!("it waits on {}", keys.join(", "))
    }
}

/// Claims the first resolution of the wait on `key` journaled at `target`, in the store: of
/// any number of resolvers, in this process or others on the same store (two `cairn serve` on
/// one PostgreSQL database or one SQLite file), exactly one claim succeeds. The claim is
/// never removed, so a resolver that comes after the winner's resolution was applied loses
/// too. `false` for a loser.
pub(super) fn claim_first(
    engine: &EngineInner,
    run_id: &RunId,
    key: &str,
    target: Seq,
    value: &Value,
) -> Result<bool, Error> {
    let bytes = serde_json::to_vec(&serde_json::json!({ "key": key, "value": value }))
        .map_err(|e| Error::validation(e.to_string()))?;
    Ok(engine.transcripts.put_new(&claim_ref(run_id, key, target), &bytes)?)
}

fn claim_ref(run_id: &RunId, key: &str, target: Seq) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(key.as_bytes());
    format!("{run_id}/claims/{:012}-{}", target.0, hex::encode(&digest[..16]))
}

/// The value that claimed the newest wait on `key`, when one did (it may not be journaled
/// or queued yet: its resolver is still writing it).
pub(super) fn claimed(engine: &EngineInner, run_id: &RunId, key: &str) -> Result<Option<Value>, Error> {
    let raw = engine.journal.load(run_id)?;
    let entries = journal::decode_all(&raw)?;
    let Some(target) = find_suspension(entries.iter(), key) else { return Ok(None) };
    let Some(bytes) = engine.transcripts.get(&claim_ref(run_id, key, target))? else { return Ok(None) };
    Ok(serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|mut claim| claim.get_mut("value").map(Value::take)))
}

/// The seq of the open wait on `key` a resolution with `value` targets (checked against the
/// wait's schema), and whether the journal already holds its resolution.
pub(super) fn target_of(
    engine: &EngineInner,
    run_id: &RunId,
    key: &str,
    value: &Value,
) -> Result<(Seq, bool), Error> {
    let (entries, target) = stored_wait(engine, run_id, key, value)?;
    Ok((target, Resolutions::fold(entries.iter()).is_closed(target)))
}

/// The stored journal and the seq of the wait on `key` a resolution with `value` targets.
fn stored_wait(
    engine: &EngineInner,
    run_id: &RunId,
    key: &str,
    value: &Value,
) -> Result<(Vec<Entry>, Seq), Error> {
    if engine.journal.get_meta(run_id)?.is_none() {
        return Err(Error::config(format!("unknown run {run_id}")));
    }
    let raw = engine.journal.load(run_id)?;
    let entries = journal::decode_all(&raw)?;
    let Some(target) = find_suspension(entries.iter(), key) else {
        return Err(Error::validation(format!(
            "run {run_id} has no wait on key {key:?}; {}",
            open_waits(&entries)
        )));
    };
    check_resolution(entries.iter().find(|e| e.seq == target), key, value)?;
    Ok((entries, target))
}

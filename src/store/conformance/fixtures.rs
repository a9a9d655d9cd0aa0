//! The suite's fixtures: what a check returns, how it words a failure, and the runs,
//! entries and meta records the checks write.

use std::fmt;

use crate::money::Money;
use crate::store::{Error, JournalStore, RawEntry, Result, RunId, RunMeta, RunStatus};

/// What a failed check says.
pub(super) type Outcome = std::result::Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($message:tt)+) => {
        if !$cond {
            return Err(format!($($message)+));
        }
    };
}
pub(super) use ensure;

pub(super) fn ok<T>(what: &str, result: Result<T>) -> std::result::Result<T, String> {
    result.map_err(|err| format!("{what} failed: {err}"))
}

/// Expects a typed refusal.
pub(super) fn refused<T: fmt::Debug>(
    what: &str,
    result: Result<T>,
    expected: &str,
    is_expected: fn(&Error) -> bool,
) -> Outcome {
    match result {
        Err(err) if is_expected(&err) => Ok(()),
        Err(err) => Err(format!("{what}: expected {expected}, got error {err:?}")),
        Ok(value) => Err(format!("{what}: expected {expected}, but it succeeded ({value:?})")),
    }
}

pub(super) fn lease_held(err: &Error) -> bool {
    matches!(err, Error::LeaseHeld { .. })
}

pub(crate) fn run_id(id: &str) -> RunId {
    RunId::parse(id).unwrap_or_else(|err| panic!("conformance suite bug: {err}"))
}

pub(super) fn raw(seq: u64, json: &str) -> RawEntry {
    RawEntry::new(seq, json).unwrap_or_else(|err| panic!("conformance suite bug: {err}"))
}

/// A plain entry: a small envelope and payload, `seq` first as the kernel writes it.
pub(super) fn entry(seq: u64) -> RawEntry {
    raw(
        seq,
        &format!(r#"{{"seq":{seq},"hash_version":1,"kind":"step","status":"ok","value":{{"n":{seq}}}}}"#),
    )
}

pub(super) fn entries(seqs: &[u64]) -> Vec<RawEntry> {
    seqs.iter().map(|seq| entry(*seq)).collect()
}

pub(super) fn seqs(entries: &[RawEntry]) -> Vec<u64> {
    entries.iter().map(RawEntry::seq).collect()
}

pub(super) fn load_seqs(store: &dyn JournalStore, run: &RunId) -> std::result::Result<Vec<u64>, String> {
    Ok(seqs(&ok(&format!("load of run {run}"), store.load(run))?))
}

/// A meta record with the listing keys set and nothing else (the lib's other tests use it too).
pub(crate) fn meta(run: &str, status: RunStatus, created_at_ms: i64) -> RunMeta {
    RunMeta {
        run_id: run_id(run),
        status,
        name: None,
        tags: Vec::new(),
        created_at_ms,
        updated_at_ms: created_at_ms,
        hash_version: 1,
        budget_ceiling: None,
        dialect: None,
        source_ref: None,
        source_hash: None,
        args_hash: None,
        segments: 1,
        extra: serde_json::Map::new(),
    }
}

/// A meta record with every field set, unknown ones included.
pub(super) fn full_meta(run: &str) -> RunMeta {
    let mut extra = serde_json::Map::new();
    extra.insert("genesis".into(), serde_json::json!("01J0000000000000000000GEN"));
    extra.insert("future_field".into(), serde_json::json!({"nested": [1, "two", null, true, 2.5]}));
    RunMeta {
        run_id: run_id(run),
        status: RunStatus::Suspended,
        name: Some("review-pipeline".into()),
        tags: vec!["nightly".into(), "team:search".into(), "é".into()],
        created_at_ms: 1_700_000_000_123,
        updated_at_ms: 1_700_000_555_000,
        hash_version: 1,
        budget_ceiling: Some(Money::from_nano_usd(2_500_000_000)),
        dialect: Some("rhai".into()),
        source_ref: Some(format!("{run}/source.rhai")),
        source_hash: Some("ab".repeat(32)),
        args_hash: Some("cd".repeat(32)),
        segments: 3,
        extra,
    }
}

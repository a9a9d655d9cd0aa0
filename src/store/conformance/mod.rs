//! The store conformance suite: the executable definition of the storage contract.
//!
//! A store that passes these checks is a cairn store; every shipped store runs them, and a
//! third-party store certifies itself by calling them from its own tests:
//!
//! ```
//! use cairn::store::{MemoryStore, conformance};
//!
//! conformance::journal_store_conformance(&|| Box::new(MemoryStore::new()));
//! conformance::leasable_store_conformance(&|clock| Box::new(MemoryStore::with_clock(clock)));
//! conformance::transcript_store_conformance(&|| Box::new(MemoryStore::new()));
//! ```
//!
//! Each suite runs its checks in order, each against a fresh store from the factory (so a
//! file-backed factory must hand out a fresh location per call), and panics on the first
//! violation with the check's name and what went wrong. Lease checks take their time from
//! a [`ManualClock`] the suite passes to the factory, so expiry is checked without sleeping.

mod paging;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{
    Error, JournalStore, LeasableStore, Lease, RawEntry, Result, RunFilter, RunId, RunMeta, RunStatus,
    TranscriptStore,
};
use crate::clock::{ManualClock, SharedClock};
use crate::money::Money;

/// A durable store and the way to open it again over the same data, for the checks that
/// what was acknowledged survives a reopen.
pub struct Reopenable {
    /// A fresh, empty store.
    pub store: Box<dyn JournalStore>,
    /// Opens another instance over the same location (after `store` has been dropped).
    pub reopen: Box<dyn Fn() -> Box<dyn JournalStore>>,
}

impl fmt::Debug for Reopenable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reopenable").field("store", &self.store).finish_non_exhaustive()
    }
}

/// What a failed check says.
type Outcome = std::result::Result<(), String>;

/// A named check over a fresh store.
type JournalCheck = (&'static str, fn(&dyn JournalStore) -> Outcome);

/// A named check over a fresh reopenable store.
type DurableCheck = (&'static str, fn(Reopenable) -> Outcome);

/// A named check over a fresh blob store.
type TranscriptCheck = (&'static str, fn(&dyn TranscriptStore) -> Outcome);

/// A named lease check over a store and the clock it reads.
type LeaseCheck = (&'static str, fn(&dyn LeasableStore, &ManualClock) -> Outcome);

/// Runs the journal checks: atomic batches, total and stable order, the monotonic-seq
/// guard (and nothing stricter), read-your-writes, opaque payloads, meta round-trips,
/// listing filters, deletion and per-run isolation.
///
/// # Panics
/// On the first violation, naming the check.
pub fn journal_store_conformance(make: &dyn Fn() -> Box<dyn JournalStore>) {
    let checks: &[JournalCheck] = &[
        ("unknown-run-is-empty", unknown_run_is_empty),
        ("read-your-writes", read_your_writes),
        ("empty-batch-is-a-no-op", empty_batch_is_a_no_op),
        ("atomic-batches", atomic_batches),
        ("monotonic-seq", monotonic_seq),
        ("gaps-allowed", gaps_allowed),
        ("total-order-stable", total_order_stable),
        ("opaque-payloads", opaque_payloads),
        ("runs-are-isolated", runs_are_isolated),
        ("meta-round-trip", meta_round_trip),
        ("meta-separate-from-journal", meta_separate_from_journal),
        ("list-filters-never-drop", list_filters_never_drop),
        ("delete-removes-run", delete_removes_run),
        ("load-since-reads-only-later-entries", load_since_reads_only_later_entries),
        ("watch-wakes-on-writes", watch_wakes_on_writes),
        ("load-page-reads-bounded-pages", paging::load_page_reads_bounded_pages),
        ("list-runs-pages", paging::list_runs_pages),
        ("counters-follow-writes", paging::counters_follow_writes),
    ];
    for (name, check) in checks {
        let store = make();
        report("journal store", name, check(&*store));
    }
}

/// Runs the durability checks: everything acknowledged (journal, order guard, meta) is
/// there, byte for byte, in a second instance opened over the same location.
///
/// # Panics
/// On the first violation, naming the check.
pub fn durable_store_conformance(make: &dyn Fn() -> Reopenable) {
    let checks: &[DurableCheck] =
        &[("reopen-keeps-everything", reopen_keeps_everything), ("reopen-after-delete", reopen_after_delete)];
    for (name, check) in checks {
        report("durable store", name, check(make()));
    }
}

/// Runs the lease checks: exclusivity, epochs that only grow (across release, expiry and
/// delete), fencing of stale, foreign, expired and wrong-run leases on every fenced write,
/// expiry, renew and release. `make` must build a fresh store reading lease time from the
/// clock it is given.
///
/// # Panics
/// On the first violation, naming the check.
pub fn leasable_store_conformance(make: &dyn Fn(SharedClock) -> Box<dyn LeasableStore>) {
    let checks: &[LeaseCheck] = &[
        ("lease-exclusive", lease_exclusive),
        ("epochs-only-grow", epochs_only_grow),
        ("stale-lease-fenced", stale_lease_fenced),
        ("forged-lease-fenced", forged_lease_fenced),
        ("expiry-frees-the-run", expiry_frees_the_run),
        ("renew-keeps-held", renew_keeps_held),
        ("release-frees-the-run", release_frees_the_run),
        ("lease-guards-only-its-run", lease_guards_only_its_run),
        ("unleased-writes-unfenced", unleased_writes_unfenced),
        ("take-over-from-a-dead-holder", take_over_from_a_dead_holder),
    ];
    for (name, check) in checks {
        let clock = ManualClock::new(1_700_000_000_000);
        let store = make(Arc::new(clock.clone()));
        report("leasable store", name, check(&*store, &clock));
    }
}

/// Runs the lease checks that need no clock: exclusivity (also against a second instance over
/// the same location, as another process would open it), epochs that grow across release and
/// delete, fencing of forged, released and wrong-run leases, release, and unfenced unleased
/// writes. Every shipped store passes these, including the JSONL store, whose leases are OS file
/// locks that hold until released (or the holder exits) whatever the ttl. `make` must build
/// a fresh location per call; `reopen` a second instance over the location of the last one.
///
/// # Panics
/// On the first violation, naming the check.
pub fn exclusive_lease_conformance(
    make: &dyn Fn() -> Box<dyn LeasableStore>,
    reopen: &dyn Fn() -> Box<dyn LeasableStore>,
) {
    let checks: &[LeaseCheck] = &[
        ("lease-exclusive", lease_exclusive),
        ("forged-lease-fenced", forged_lease_fenced),
        ("release-frees-the-run", release_frees_the_run),
        ("lease-guards-only-its-run", lease_guards_only_its_run),
        ("unleased-writes-unfenced", unleased_writes_unfenced),
    ];
    let clock = ManualClock::new(1_700_000_000_000);
    for (name, check) in checks {
        let store = make();
        report("exclusive lease", name, check(&*store, &clock));
    }
    let store = make();
    let other = reopen();
    report("exclusive lease", "exclusive-across-instances", exclusive_across_instances(&*store, &*other));
}

/// Runs the blob checks: exact bytes, replacement, missing refs, sorted per-run listing
/// and refusal of refs that could escape their run.
///
/// # Panics
/// On the first violation, naming the check.
pub fn transcript_store_conformance(make: &dyn Fn() -> Box<dyn TranscriptStore>) {
    let checks: &[TranscriptCheck] = &[
        ("blob-round-trip", blob_round_trip),
        ("missing-blobs", missing_blobs),
        ("list-sorted-and-scoped", list_sorted_and_scoped),
        ("unsafe-refs-refused", unsafe_refs_refused),
        ("put-new-stores-once", put_new_stores_once),
    ];
    for (name, check) in checks {
        let store = make();
        report("transcript store", name, check(&*store));
    }
}

fn report(suite: &str, name: &str, outcome: Outcome) {
    if let Err(message) = outcome {
        panic!("{suite} conformance check `{name}` failed: {message}");
    }
}

macro_rules! ensure {
    ($cond:expr, $($message:tt)+) => {
        if !$cond {
            return Err(format!($($message)+));
        }
    };
}

fn ok<T>(what: &str, result: Result<T>) -> std::result::Result<T, String> {
    result.map_err(|err| format!("{what} failed: {err}"))
}

/// Expects a typed refusal.
fn refused<T: fmt::Debug>(
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

fn lease_held(err: &Error) -> bool {
    matches!(err, Error::LeaseHeld { .. })
}

fn run_id(id: &str) -> RunId {
    RunId::parse(id).unwrap_or_else(|err| panic!("conformance suite bug: {err}"))
}

fn raw(seq: u64, json: &str) -> RawEntry {
    RawEntry::new(seq, json).unwrap_or_else(|err| panic!("conformance suite bug: {err}"))
}

/// A plain entry: a small envelope and payload, `seq` first as the kernel writes it.
fn entry(seq: u64) -> RawEntry {
    raw(
        seq,
        &format!(r#"{{"seq":{seq},"hash_version":1,"kind":"step","status":"ok","value":{{"n":{seq}}}}}"#),
    )
}

fn entries(seqs: &[u64]) -> Vec<RawEntry> {
    seqs.iter().map(|seq| entry(*seq)).collect()
}

fn seqs(entries: &[RawEntry]) -> Vec<u64> {
    entries.iter().map(RawEntry::seq).collect()
}

fn load_seqs(store: &dyn JournalStore, run: &RunId) -> std::result::Result<Vec<u64>, String> {
    Ok(seqs(&ok(&format!("load of run {run}"), store.load(run))?))
}

fn meta(run: &str, status: RunStatus, created_at_ms: i64) -> RunMeta {
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
fn full_meta(run: &str) -> RunMeta {
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

// ---- journal checks ----

fn unknown_run_is_empty(store: &dyn JournalStore) -> Outcome {
    let run = run_id("never-written");
    ensure!(load_seqs(store, &run)?.is_empty(), "load of an unknown run is not empty");
    ensure!(ok("get_meta", store.get_meta(&run))?.is_none(), "get_meta of an unknown run is not None");
    ok("delete of an unknown run", store.delete(&run, None))?;
    ensure!(ok("list_runs", store.list_runs(&RunFilter::default()))?.is_empty(), "a fresh store lists runs");
    Ok(())
}

fn read_your_writes(store: &dyn JournalStore) -> Outcome {
    let run = run_id("ryw");
    for seq in 1..=5 {
        ok("append", store.append(&run, &[entry(seq)], None))?;
        let loaded = ok("load", store.load(&run))?;
        ensure!(
            loaded == entries(&(1..=seq).collect::<Vec<_>>()),
            "after appending seq {seq}, load returned {loaded:?}"
        );
    }
    Ok(())
}

fn empty_batch_is_a_no_op(store: &dyn JournalStore) -> Outcome {
    let run = run_id("empty-batch");
    ok("empty append to an unknown run", store.append(&run, &[], None))?;
    ensure!(load_seqs(store, &run)?.is_empty(), "an empty append made entries");
    ensure!(ok("get_meta", store.get_meta(&run))?.is_none(), "an empty append made a meta record");
    ok("append", store.append(&run, &entries(&[1, 2]), None))?;
    ok("empty append", store.append(&run, &[], None))?;
    ensure!(load_seqs(store, &run)? == [1, 2], "an empty append changed the journal");
    Ok(())
}

fn atomic_batches(store: &dyn JournalStore) -> Outcome {
    let run = run_id("atomic");
    ok("append [1, 2]", store.append(&run, &entries(&[1, 2]), None))?;
    let bad_batches: [(&[u64], &str); 4] = [
        (&[3, 4, 4], "a repeated seq at its end"),
        (&[3, 5, 4], "a backwards seq in its middle"),
        (&[2, 3, 4], "a first seq at the tail"),
        (&[1, 7, 8], "a first seq below the tail"),
    ];
    for (bad, why) in bad_batches {
        let result = store.append(&run, &entries(bad), None);
        ensure!(result.is_err(), "a batch {bad:?} with {why} was accepted");
        let now = load_seqs(store, &run)?;
        ensure!(now == [1, 2], "a refused batch {bad:?} ({why}) left entries visible: {now:?}");
    }
    refused("batch [3, 5, 4]", store.append(&run, &entries(&[3, 5, 4]), None), "UnorderedBatch", |err| {
        matches!(err, Error::UnorderedBatch { .. })
    })?;
    ok("append [3, 4, 5]", store.append(&run, &entries(&[3, 4, 5]), None))?;
    ensure!(load_seqs(store, &run)? == [1, 2, 3, 4, 5], "a good batch after refused ones did not land whole");
    Ok(())
}

fn monotonic_seq(store: &dyn JournalStore) -> Outcome {
    let run = run_id("monotonic");
    ok("append [1..3]", store.append(&run, &entries(&[1, 2, 3]), None))?;
    for seq in [3, 2, 0] {
        match store.append(&run, &[entry(seq)], None) {
            Err(Error::OrderViolation { run: violated, seq: got, tail }) => {
                ensure!(
                    violated == run && got == seq && tail == 3,
                    "OrderViolation for seq {seq} carries run {violated}, seq {got}, tail {tail}"
                );
            }
            other => {
                return Err(format!("append of seq {seq} at tail 3: expected OrderViolation, got {other:?}"));
            }
        }
    }
    // A same-seq entry with other content must not replace or join the stored one.
    let rival = raw(3, r#"{"seq":3,"kind":"step","writer":"rival"}"#);
    ensure!(store.append(&run, &[rival], None).is_err(), "a rival entry at the tail seq was accepted");
    let loaded = ok("load", store.load(&run))?;
    ensure!(loaded == entries(&[1, 2, 3]), "refused appends changed the journal: {loaded:?}");
    Ok(())
}

fn load_since_reads_only_later_entries(store: &dyn JournalStore) -> Outcome {
    let (run, other) = (run_id("since"), run_id("since-other"));
    ok("append", store.append(&run, &entries(&[1, 2, 3]), None))?;
    ok("append", store.append(&other, &entries(&[1, 2, 3, 4, 5, 6, 7, 8]), None))?;
    ok("append", store.append(&run, &entries(&[7, 9]), None))?;
    for (after, want) in [
        (0, &[1, 2, 3, 7, 9][..]),
        (2, &[3, 7, 9]),
        (3, &[7, 9]),
        (5, &[7, 9]),
        (8, &[9]),
        (9, &[]),
        (u64::MAX, &[]),
    ] {
        let loaded = ok("load_since", store.load_since(&run, after))?;
        ensure!(
            loaded == entries(want),
            "load_since(after {after}) returned {:?}, not {want:?}",
            seqs(&loaded)
        );
    }
    ensure!(
        ok("load_since", store.load_since(&run_id("since-unknown"), 0))?.is_empty(),
        "load_since of an unknown run is not empty"
    );
    Ok(())
}

fn watch_wakes_on_writes(store: &dyn JournalStore) -> Outcome {
    use futures::FutureExt as _;
    let Some(watch) = store.watch() else { return Ok(()) };
    let (run, other) = (run_id("watched"), run_id("unwatched"));
    // Checked at once after each write: a store's notification of its own writes is
    // synchronous (notifications from other processes come later).
    let mut changes = watch.subscribe(&run);
    changes.mark_seen();
    ok("append", store.append(&run, &[entry(1)], None))?;
    ensure!(changes.changed().now_or_never().is_some(), "an append did not wake the run's follower");
    changes.mark_seen();
    ok("put_meta", store.put_meta(&meta("watched", RunStatus::Running, 1), None))?;
    ensure!(changes.changed().now_or_never().is_some(), "a meta write did not wake the run's follower");
    // A follower may be woken spuriously (it re-reads and finds nothing), so another run's
    // write waking it is no violation; the watch's own tests keep that rare.
    ok("append", store.append(&other, &[entry(1)], None))?;
    Ok(())
}

fn gaps_allowed(store: &dyn JournalStore) -> Outcome {
    let run = run_id("gaps");
    ok("append [5]", store.append(&run, &[entry(5)], None))?;
    ok("append [9, 100]", store.append(&run, &entries(&[9, 100]), None))?;
    ok("append [1000000007]", store.append(&run, &[entry(1_000_000_007)], None))?;
    ensure!(
        load_seqs(store, &run)? == [5, 9, 100, 1_000_000_007],
        "a journal with gaps did not load back whole"
    );
    Ok(())
}

fn total_order_stable(store: &dyn JournalStore) -> Outcome {
    let run = run_id("order");
    let mut expected = Vec::new();
    let mut seq = 0;
    for size in [1, 3, 1, 7, 2, 1, 13, 4] {
        let batch: Vec<RawEntry> = (0..size)
            .map(|_| {
                seq += 1 + seq % 3;
                entry(seq)
            })
            .collect();
        ok("append", store.append(&run, &batch, None))?;
        expected.extend(batch);
    }
    for attempt in 1..=3 {
        let loaded = ok("load", store.load(&run))?;
        ensure!(loaded == expected, "load #{attempt} differs from the append order");
    }
    Ok(())
}

/// Odd but valid JSON texts, each of which must come back byte for byte.
fn odd_entries() -> Vec<RawEntry> {
    vec![
        raw(1, r#"{"seq":1,"kind":"telepathy","status":"dreaming","from_the_future":{"x":[]}}"#),
        raw(2, r#"{"seq":2,"z":1,"a":[1.50,"\u00e9"]}"#),
        raw(3, r#"{"z":0,"seq":3,"é":"é","emoji":"🦀","esc":"\"\\\/\b\f\n\r\t"}"#),
        raw(4, r#"{ "seq" : 4 , "spaced" : [ 1 , 2 ] }"#),
        raw(5, r#"{"seq":5,"big":123456789012345678901234567890,"exp":1E+2,"neg":-0.0,"tiny":5e-324}"#),
        raw(6, r#"{"seq":6,"dup":1,"dup":2}"#),
        raw(7, r#"{"seq":7,"deep":[[[[[[[[[[{"k":null}]]]]]]]]]],"t":true,"f":false}"#),
        raw(8, &format!(r#"{{"seq":8,"long":"{}"}}"#, "x".repeat(100_000))),
    ]
}

fn opaque_payloads(store: &dyn JournalStore) -> Outcome {
    let run = run_id("opaque");
    let odd = odd_entries();
    ok("append of odd entries", store.append(&run, &odd[..4], None))?;
    for item in &odd[4..] {
        ok("append of an odd entry", store.append(&run, std::slice::from_ref(item), None))?;
    }
    let loaded = ok("load", store.load(&run))?;
    ensure!(loaded.len() == odd.len(), "{} odd entries appended, {} loaded", odd.len(), loaded.len());
    for (want, got) in odd.iter().zip(&loaded) {
        ensure!(
            want.seq() == got.seq() && want.json() == got.json(),
            "entry {} came back altered:\n  stored {:?}\n  loaded {:?}",
            want.seq(),
            want.json(),
            got.json()
        );
    }
    Ok(())
}

fn runs_are_isolated(store: &dyn JournalStore) -> Outcome {
    let (a, b) = (run_id("iso-a"), run_id("iso-b"));
    ok("append to a", store.append(&a, &entries(&[1, 2, 3]), None))?;
    ok("append to b below a's tail", store.append(&b, &entries(&[1]), None))?;
    ok("append to a", store.append(&a, &entries(&[4]), None))?;
    ensure!(load_seqs(store, &a)? == [1, 2, 3, 4], "run a was disturbed by run b");
    ensure!(load_seqs(store, &b)? == [1], "run b was disturbed by run a");
    Ok(())
}

fn meta_round_trip(store: &dyn JournalStore) -> Outcome {
    let full = full_meta("meta-full");
    ok("put_meta", store.put_meta(&full, None))?;
    let got = ok("get_meta", store.get_meta(&full.run_id))?;
    ensure!(got.as_ref() == Some(&full), "meta came back altered:\n  put {full:?}\n  got {got:?}");
    let minimal = meta("meta-min", RunStatus::Running, 5);
    ok("put_meta", store.put_meta(&minimal, None))?;
    let got = ok("get_meta", store.get_meta(&minimal.run_id))?;
    ensure!(got.as_ref() == Some(&minimal), "minimal meta came back altered: {got:?}");
    let mut replaced = full.clone();
    replaced.status = RunStatus::Ok;
    replaced.tags = vec!["done".into()];
    replaced.name = None;
    replaced.segments = 4;
    replaced.extra.remove("future_field");
    ok("put_meta replacing", store.put_meta(&replaced, None))?;
    let got = ok("get_meta", store.get_meta(&full.run_id))?;
    ensure!(got.as_ref() == Some(&replaced), "a replaced meta came back as {got:?}");
    let listed = ok("list_runs", store.list_runs(&RunFilter::default()))?;
    ensure!(listed.len() == 2, "two metas put, {} listed", listed.len());
    ensure!(listed.contains(&replaced), "list_runs returned a stale or altered meta: {listed:?}");
    Ok(())
}

fn meta_separate_from_journal(store: &dyn JournalStore) -> Outcome {
    let run = run_id("journal-only");
    ok("append", store.append(&run, &entries(&[1]), None))?;
    ensure!(ok("get_meta", store.get_meta(&run))?.is_none(), "an append created a meta record");
    ensure!(
        ok("list_runs", store.list_runs(&RunFilter::default()))?.is_empty(),
        "a run without meta was listed"
    );
    let other = meta("meta-only", RunStatus::Running, 1);
    ok("put_meta", store.put_meta(&other, None))?;
    ensure!(load_seqs(store, &other.run_id)?.is_empty(), "put_meta created journal entries");
    Ok(())
}

fn list_filters_never_drop(store: &dyn JournalStore) -> Outcome {
    type Spec = (&'static str, RunStatus, Option<&'static str>, &'static [&'static str], i64);
    let specs: [Spec; 8] = [
        ("l1", RunStatus::Running, Some("alpha"), &["a", "b"], 100),
        ("l2", RunStatus::Ok, Some("alpha"), &["a"], 200),
        ("l3", RunStatus::Error, Some("beta"), &["b"], 300),
        ("l4", RunStatus::Suspended, None, &[], 400),
        ("l5", RunStatus::Running, Some("beta"), &["a", "b", "c"], 500),
        ("l6", RunStatus::Cancelled, Some("alpha"), &["c"], 600),
        ("l7", RunStatus::Exhausted, Some("gamma"), &["a"], 700),
        ("l8", RunStatus::Ok, Some("alpha"), &["b", "a"], 700), // ties l7 on time
    ];
    let mut all = Vec::new();
    for (id, status, name, tags, created) in specs {
        let mut record = meta(id, status, created);
        record.name = name.map(str::to_owned);
        record.tags = tags.iter().map(|tag| (*tag).to_owned()).collect();
        ok("put_meta", store.put_meta(&record, None))?;
        all.push(record);
    }
    // Newest first, ties broken by run id, descending.
    all.sort_by(|a, b| b.created_at_ms.cmp(&a.created_at_ms).then_with(|| b.run_id.cmp(&a.run_id)));
    let filters = [
        RunFilter::default(),
        RunFilter { statuses: vec![RunStatus::Running], ..RunFilter::default() },
        RunFilter {
            statuses: vec![RunStatus::Running, RunStatus::Suspended, RunStatus::Ok],
            ..RunFilter::default()
        },
        RunFilter { name: Some("alpha".into()), ..RunFilter::default() },
        RunFilter { tags: vec!["a".into()], ..RunFilter::default() },
        RunFilter { tags: vec!["b".into(), "a".into()], ..RunFilter::default() },
        RunFilter { tags: vec!["a".into(), "zzz".into()], ..RunFilter::default() },
        RunFilter {
            statuses: vec![RunStatus::Ok, RunStatus::Running],
            name: Some("alpha".into()),
            tags: vec!["a".into()],
            limit: None,
            after: None,
        },
        RunFilter { name: Some("nobody".into()), ..RunFilter::default() },
        RunFilter { limit: Some(3), ..RunFilter::default() },
        RunFilter { limit: Some(0), ..RunFilter::default() },
        RunFilter {
            statuses: vec![RunStatus::Ok, RunStatus::Exhausted],
            limit: Some(2),
            ..RunFilter::default()
        },
        RunFilter { tags: vec!["b".into()], limit: Some(100), ..RunFilter::default() },
    ];
    for filter in &filters {
        let mut expected: Vec<&RunMeta> = all.iter().filter(|record| filter.matches(record)).collect();
        if let Some(limit) = filter.limit {
            expected.truncate(limit);
        }
        let got = ok("list_runs", store.list_runs(filter))?;
        let got_ids: Vec<&str> = got.iter().map(|record| record.run_id.as_str()).collect();
        let want_ids: Vec<&str> = expected.iter().map(|record| record.run_id.as_str()).collect();
        ensure!(
            got_ids == want_ids,
            "list_runs({filter:?}) returned {got_ids:?}, expected {want_ids:?} (newest first)"
        );
        ensure!(got.iter().zip(&expected).all(|(a, b)| a == *b), "list_runs({filter:?}) altered a meta");
    }
    Ok(())
}

fn delete_removes_run(store: &dyn JournalStore) -> Outcome {
    let (gone, kept) = (run_id("doomed"), run_id("kept"));
    for run in [&gone, &kept] {
        ok("append", store.append(run, &entries(&[1, 2, 3]), None))?;
        ok("put_meta", store.put_meta(&meta(run.as_str(), RunStatus::Ok, 1), None))?;
    }
    ok("delete", store.delete(&gone, None))?;
    ensure!(load_seqs(store, &gone)?.is_empty(), "a deleted run's journal still loads");
    ensure!(ok("get_meta", store.get_meta(&gone))?.is_none(), "a deleted run's meta is still there");
    let listed = ok("list_runs", store.list_runs(&RunFilter::default()))?;
    ensure!(listed.iter().all(|record| record.run_id != gone), "a deleted run is still listed");
    ensure!(load_seqs(store, &kept)? == [1, 2, 3], "deleting one run disturbed another");
    ensure!(ok("get_meta", store.get_meta(&kept))?.is_some(), "deleting one run removed another's meta");
    ok("delete again", store.delete(&gone, None))?;
    ok("append to a recreated run from seq 1", store.append(&gone, &entries(&[1]), None))?;
    ensure!(load_seqs(store, &gone)? == [1], "a recreated run inherited its deleted journal");
    Ok(())
}

// ---- durability checks ----

fn reopen_keeps_everything(fixture: Reopenable) -> Outcome {
    let run = run_id("durable");
    let odd = odd_entries();
    let full = full_meta("durable");
    ok("append", fixture.store.append(&run, &odd[..3], None))?;
    ok("append", fixture.store.append(&run, &odd[3..], None))?;
    ok("put_meta", fixture.store.put_meta(&full, None))?;
    drop(fixture.store);
    let store = (fixture.reopen)();
    let loaded = ok("load after reopen", store.load(&run))?;
    ensure!(
        loaded == odd,
        "the journal changed across a reopen: {} of {} entries back",
        loaded.len(),
        odd.len()
    );
    let got = ok("get_meta after reopen", store.get_meta(&run))?;
    ensure!(got.as_ref() == Some(&full), "meta changed across a reopen: {got:?}");
    refused(
        "append at the tail after reopen",
        store.append(&run, &[entry(8)], None),
        "OrderViolation",
        |err| matches!(err, Error::OrderViolation { seq: 8, tail: 8, .. }),
    )?;
    ok("append after reopen", store.append(&run, &[entry(9)], None))?;
    drop(store);
    let store = (fixture.reopen)();
    ensure!(
        load_seqs(&*store, &run)? == [1, 2, 3, 4, 5, 6, 7, 8, 9],
        "an append after a reopen did not survive another"
    );
    Ok(())
}

fn reopen_after_delete(fixture: Reopenable) -> Outcome {
    let run = run_id("deleted");
    ok("append", fixture.store.append(&run, &entries(&[1, 2]), None))?;
    ok("put_meta", fixture.store.put_meta(&meta("deleted", RunStatus::Ok, 1), None))?;
    ok("delete", fixture.store.delete(&run, None))?;
    drop(fixture.store);
    let store = (fixture.reopen)();
    ensure!(load_seqs(&*store, &run)?.is_empty(), "a deleted journal came back after a reopen");
    ensure!(ok("get_meta", store.get_meta(&run))?.is_none(), "a deleted meta came back after a reopen");
    Ok(())
}

// ---- lease checks ----

const TTL: Duration = Duration::from_secs(10);
const TTL_MS: i64 = 10_000;

fn lease_exclusive(store: &dyn LeasableStore, _: &ManualClock) -> Outcome {
    let run = run_id("exclusive");
    let lease = ok("acquire", store.acquire(&run, "w1", TTL))?;
    ensure!(lease.run_id == run && lease.owner == "w1", "acquire returned {lease:?}");
    refused("acquire by another owner", store.acquire(&run, "w2", TTL), "LeaseHeld", lease_held)?;
    refused("acquire again by the holder", store.acquire(&run, "w1", TTL), "LeaseHeld", lease_held)?;
    ok("append with the lease", store.append(&run, &entries(&[1]), Some(&lease)))?;
    let other = ok("acquire of another run", store.acquire(&run_id("exclusive-2"), "w2", TTL))?;
    ensure!(other.owner == "w2", "acquire returned {other:?}");
    Ok(())
}

fn epochs_only_grow(store: &dyn LeasableStore, clock: &ManualClock) -> Outcome {
    let run = run_id("epochs");
    let grew = |how: &str, before: &Lease, after: &Lease| -> Outcome {
        ensure!(
            after.epoch > before.epoch,
            "epoch after {how} is {}, not above {}",
            after.epoch,
            before.epoch
        );
        Ok(())
    };
    let first = ok("acquire", store.acquire(&run, "w", TTL))?;
    // Another run's leases do not advance this run's epochs backwards (or at all).
    let other = ok("acquire of another run", store.acquire(&run_id("epochs-other"), "w", TTL))?;
    ok("release of another run", store.release(&other))?;
    ok("release", store.release(&first))?;
    let released = ok("acquire after release", store.acquire(&run, "w", TTL))?;
    grew("release", &first, &released)?;
    clock.advance(TTL_MS);
    let expired = ok("acquire after expiry", store.acquire(&run, "w2", TTL))?;
    grew("expiry", &released, &expired)?;
    ok("append", store.append(&run, &entries(&[1]), Some(&expired)))?;
    ok("delete", store.delete(&run, Some(&expired)))?;
    let recreated = ok("acquire after delete", store.acquire(&run, "w", TTL))?;
    grew("delete", &expired, &recreated)?;
    let stale = store.append(&run, &entries(&[1]), Some(&expired));
    refused("append with the deleted incarnation's lease", stale, "LeaseHeld", lease_held)?;
    ok("append with the new lease", store.append(&run, &entries(&[1]), Some(&recreated)))?;
    Ok(())
}

/// Checks every fenced surface refuses `stale` and changes nothing.
fn all_writes_refused(store: &dyn LeasableStore, run: &RunId, stale: &Lease, why: &str) -> Outcome {
    let before = ok("load", store.load(run))?;
    let meta_before = ok("get_meta", store.get_meta(run))?;
    let next_seq = before.last().map_or(1, |entry| entry.seq() + 1);
    refused(
        &format!("append with {why}"),
        store.append(run, &[entry(next_seq)], Some(stale)),
        "LeaseHeld",
        lease_held,
    )?;
    let mut changed = meta(run.as_str(), RunStatus::Error, 42);
    changed.name = Some("overwritten".into());
    refused(&format!("put_meta with {why}"), store.put_meta(&changed, Some(stale)), "LeaseHeld", lease_held)?;
    refused(&format!("delete with {why}"), store.delete(run, Some(stale)), "LeaseHeld", lease_held)?;
    refused(&format!("renew with {why}"), store.renew(stale, TTL), "LeaseHeld", lease_held)?;
    refused(&format!("release with {why}"), store.release(stale), "LeaseHeld", lease_held)?;
    ensure!(ok("load", store.load(run))? == before, "a write with {why} became visible in the journal");
    ensure!(ok("get_meta", store.get_meta(run))? == meta_before, "a write with {why} changed the meta");
    Ok(())
}

fn stale_lease_fenced(store: &dyn LeasableStore, clock: &ManualClock) -> Outcome {
    let run = run_id("stale");
    let old = ok("acquire", store.acquire(&run, "w1", TTL))?;
    ok("append with the lease", store.append(&run, &entries(&[1, 2]), Some(&old)))?;
    ok("put_meta with the lease", store.put_meta(&meta("stale", RunStatus::Running, 1), Some(&old)))?;
    clock.advance(TTL_MS + 1);
    let new = ok("acquire after expiry", store.acquire(&run, "w2", TTL))?;
    all_writes_refused(store, &run, &old, "a superseded lease")?;
    // The same owner coming back with its old epoch is still stale.
    ok("release", store.release(&new))?;
    let mine = ok("acquire", store.acquire(&run, "w1", TTL))?;
    all_writes_refused(store, &run, &old, "an old epoch of the current owner")?;
    ok("append with the current lease", store.append(&run, &entries(&[3]), Some(&mine)))?;
    ensure!(load_seqs(store, &run)? == [1, 2, 3], "the current holder's append did not land");
    Ok(())
}

fn forged_lease_fenced(store: &dyn LeasableStore, _: &ManualClock) -> Outcome {
    let run = run_id("forged");
    let lease = ok("acquire", store.acquire(&run, "w1", TTL))?;
    ok("append", store.append(&run, &entries(&[1]), Some(&lease)))?;
    let foreign_owner = Lease { owner: "w2".into(), ..lease.clone() };
    all_writes_refused(store, &run, &foreign_owner, "the current epoch but another owner")?;
    let future_epoch = Lease { epoch: lease.epoch + 1, ..lease.clone() };
    all_writes_refused(store, &run, &future_epoch, "an epoch never granted")?;
    let never = run_id("forged-never-leased");
    ok("append unleased", store.append(&never, &entries(&[1]), None))?;
    let invented = Lease { run_id: never.clone(), owner: "w1".into(), epoch: 1 };
    all_writes_refused(store, &never, &invented, "a lease on a run never leased")?;
    Ok(())
}

fn expiry_frees_the_run(store: &dyn LeasableStore, clock: &ManualClock) -> Outcome {
    let run = run_id("expiry");
    let lease = ok("acquire", store.acquire(&run, "w1", Duration::from_millis(1_000)))?;
    clock.advance(999);
    refused("acquire 1 ms before expiry", store.acquire(&run, "w2", TTL), "LeaseHeld", lease_held)?;
    ok("append 1 ms before expiry", store.append(&run, &entries(&[1]), Some(&lease)))?;
    clock.advance(1);
    // Expired, and nobody has taken the run yet: the lease is still not current.
    all_writes_refused(store, &run, &lease, "an expired lease")?;
    let next = ok("acquire at expiry", store.acquire(&run, "w2", TTL))?;
    ensure!(next.epoch > lease.epoch, "the epoch after expiry did not grow");
    Ok(())
}

fn renew_keeps_held(store: &dyn LeasableStore, clock: &ManualClock) -> Outcome {
    let run = run_id("renew");
    let lease = ok("acquire", store.acquire(&run, "w1", Duration::from_millis(1_000)))?;
    for round in 1..=3 {
        clock.advance(800);
        ok(&format!("renew #{round}"), store.renew(&lease, Duration::from_millis(1_000)))?;
    }
    clock.advance(999);
    refused("acquire of a renewed lease", store.acquire(&run, "w2", TTL), "LeaseHeld", lease_held)?;
    ok("append with a renewed lease", store.append(&run, &entries(&[1]), Some(&lease)))?;
    clock.advance(1);
    refused("renew after expiry", store.renew(&lease, TTL), "LeaseHeld", lease_held)?;
    Ok(())
}

fn release_frees_the_run(store: &dyn LeasableStore, _: &ManualClock) -> Outcome {
    let run = run_id("release");
    let lease = ok("acquire", store.acquire(&run, "w1", TTL))?;
    ok("append", store.append(&run, &entries(&[1]), Some(&lease)))?;
    ok("release", store.release(&lease))?;
    all_writes_refused(store, &run, &lease, "a released lease")?;
    let next = ok("acquire after release", store.acquire(&run, "w2", TTL))?;
    ensure!(next.epoch > lease.epoch, "the epoch after release did not grow");
    ensure!(load_seqs(store, &run)? == [1], "release changed the journal");
    Ok(())
}

fn lease_guards_only_its_run(store: &dyn LeasableStore, _: &ManualClock) -> Outcome {
    let (a, b, c) = (run_id("scope-a"), run_id("scope-b"), run_id("scope-c"));
    let lease_a = ok("acquire a", store.acquire(&a, "w", TTL))?;
    let lease_b = ok("acquire b", store.acquire(&b, "w", TTL))?;
    ok("append to b", store.append(&b, &entries(&[1]), Some(&lease_b)))?;
    ok("put_meta of b", store.put_meta(&meta("scope-b", RunStatus::Running, 1), Some(&lease_b)))?;
    // b is leased (to the same owner, even at the same epoch number perhaps); c is not.
    for target in [&b, &c] {
        let before = ok("load", store.load(target))?;
        let meta_before = ok("get_meta", store.get_meta(target))?;
        refused(
            "append with another run's lease",
            store.append(target, &entries(&[2]), Some(&lease_a)),
            "LeaseHeld",
            lease_held,
        )?;
        refused(
            "put_meta with another run's lease",
            store.put_meta(&meta(target.as_str(), RunStatus::Error, 9), Some(&lease_a)),
            "LeaseHeld",
            lease_held,
        )?;
        refused(
            "delete with another run's lease",
            store.delete(target, Some(&lease_a)),
            "LeaseHeld",
            lease_held,
        )?;
        ensure!(ok("load", store.load(target))? == before, "a write with another run's lease became visible");
        ensure!(
            ok("get_meta", store.get_meta(target))? == meta_before,
            "another run's lease changed the meta"
        );
    }
    Ok(())
}

fn unleased_writes_unfenced(store: &dyn LeasableStore, _: &ManualClock) -> Outcome {
    // No lease asserts the single-writer precondition: it is not checked against holders.
    let run = run_id("unleased");
    let _lease = ok("acquire", store.acquire(&run, "w1", TTL))?;
    ok("append without a lease", store.append(&run, &entries(&[1]), None))?;
    ok("put_meta without a lease", store.put_meta(&meta("unleased", RunStatus::Running, 1), None))?;
    ensure!(load_seqs(store, &run)? == [1], "an unleased append did not land");
    Ok(())
}

// ---- transcript checks ----

fn blob_round_trip(store: &dyn TranscriptStore) -> Outcome {
    let binary: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    let blobs: [(&str, &[u8]); 4] = [
        ("blobs/transcript.json", br#"{"turns":[1,2]}"#),
        ("blobs/empty", b""),
        ("blobs/binary/odd name %2F ü", b"\0\xff\xfe"),
        ("blobs/checkpoints/agent-1/turn-3", &binary),
    ];
    for (blob_ref, bytes) in blobs {
        ok(&format!("put {blob_ref}"), store.put(blob_ref, bytes))?;
        let got = ok(&format!("get {blob_ref}"), store.get(blob_ref))?;
        ensure!(
            got.as_deref() == Some(bytes),
            "blob {blob_ref} came back altered ({:?} bytes)",
            got.map(|b| b.len())
        );
    }
    ok("put replacing", store.put("blobs/transcript.json", b"v2"))?;
    let got = ok("get", store.get("blobs/transcript.json"))?;
    ensure!(got.as_deref() == Some(&b"v2"[..]), "a replaced blob came back as {got:?}");
    ok("delete", store.delete("blobs/transcript.json"))?;
    ensure!(ok("get", store.get("blobs/transcript.json"))?.is_none(), "a deleted blob is still there");
    ensure!(
        ok("get", store.get("blobs/empty"))?.as_deref() == Some(&b""[..]),
        "deleting one blob removed another"
    );
    Ok(())
}

fn put_new_stores_once(store: &dyn TranscriptStore) -> Outcome {
    ensure!(ok("first put_new", store.put_new("claims/w", b"first"))?, "a first put_new stored nothing");
    ensure!(!ok("second put_new", store.put_new("claims/w", b"second"))?, "a second put_new won too");
    let got = ok("get", store.get("claims/w"))?;
    ensure!(got.as_deref() == Some(&b"first"[..]), "a losing put_new replaced the blob: {got:?}");
    ok("put", store.put("claims/v", b"there"))?;
    ensure!(!ok("put_new over put", store.put_new("claims/v", b"late"))?, "put_new replaced a put blob");
    // Racing writers: exactly one wins.
    let wins = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for i in 0..8u8 {
            let wins = &wins;
            scope.spawn(move || {
                if store.put_new("claims/raced", &[i]).unwrap_or(false) {
                    wins.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
        }
    });
    let wins = wins.into_inner();
    ensure!(wins == 1, "{wins} racing put_new calls won");
    Ok(())
}

fn missing_blobs(store: &dyn TranscriptStore) -> Outcome {
    ensure!(
        ok("get of a missing blob", store.get("nobody/nothing"))?.is_none(),
        "a missing blob is not None"
    );
    ok("delete of a missing blob", store.delete("nobody/nothing"))?;
    ensure!(
        ok("list of an unknown run", store.list(&run_id("nobody")))?.is_empty(),
        "an unknown run lists blobs"
    );
    Ok(())
}

fn list_sorted_and_scoped(store: &dyn TranscriptStore) -> Outcome {
    // Byte order puts '-' < '.' < '/' < 'a'; a naive prefix match on "a" also finds "ab".
    let refs = ["a/x/1", "a/x.1", "a/x-1", "a/w", "a/é", "a/Z", "ab/x", "a.b/y", "b/a/x"];
    for blob_ref in refs {
        ok(&format!("put {blob_ref}"), store.put(blob_ref, blob_ref.as_bytes()))?;
    }
    let listed = ok("list a", store.list(&run_id("a")))?;
    let expected = ["a/Z", "a/w", "a/x-1", "a/x.1", "a/x/1", "a/é"];
    ensure!(listed == expected, "list(a) returned {listed:?}, expected {expected:?}");
    ensure!(ok("list ab", store.list(&run_id("ab")))? == ["ab/x"], "list(ab) is not just ab's blobs");
    ensure!(ok("list a.b", store.list(&run_id("a.b")))? == ["a.b/y"], "list(a.b) is not just a.b's blobs");
    ok("delete", store.delete("a/x.1"))?;
    let listed = ok("list a", store.list(&run_id("a")))?;
    ensure!(listed == ["a/Z", "a/w", "a/x-1", "a/x/1", "a/é"], "list after delete returned {listed:?}");
    Ok(())
}

fn unsafe_refs_refused(store: &dyn TranscriptStore) -> Outcome {
    let config = |err: &Error| matches!(err, Error::Config(_));
    for bad in [
        "",
        "no-slash",
        "run/",
        "/etc/passwd",
        "run/../../x",
        "run/a//b",
        "run/./x",
        "../run/x",
        "bad id/x",
        "run/nul\0",
    ] {
        refused(&format!("put {bad:?}"), store.put(bad, b"x"), "Config", config)?;
        refused(&format!("get {bad:?}"), store.get(bad), "Config", config)?;
        refused(&format!("delete {bad:?}"), store.delete(bad), "Config", config)?;
    }
    Ok(())
}

fn exclusive_across_instances(store: &dyn LeasableStore, other: &dyn LeasableStore) -> Outcome {
    let run = run_id("across");
    let lease = ok("acquire", store.acquire(&run, "w1", TTL))?;
    refused("acquire from another instance", other.acquire(&run, "w2", TTL), "LeaseHeld", lease_held)?;
    ok("append with the lease", store.append(&run, &entries(&[1]), Some(&lease)))?;
    ok("release", store.release(&lease))?;
    let next = ok("acquire from another instance after release", other.acquire(&run, "w2", TTL))?;
    ensure!(next.epoch > lease.epoch, "the epoch did not grow across instances");
    refused(
        "acquire back while the other holds it",
        store.acquire(&run, "w1", TTL),
        "LeaseHeld",
        lease_held,
    )?;
    ok("append with the other instance's lease", other.append(&run, &entries(&[2]), Some(&next)))?;
    ok("delete with the lease", other.delete(&run, Some(&next)))?;
    let after = ok("acquire after delete", store.acquire(&run, "w1", TTL))?;
    ensure!(after.epoch > next.epoch, "the epoch did not grow across a delete");
    Ok(())
}

fn take_over_from_a_dead_holder(store: &dyn LeasableStore, _: &ManualClock) -> Outcome {
    let run = run_id("take-over");
    ensure!(ok("holder of an unleased run", store.holder(&run))?.is_none(), "an unleased run has a holder");
    let dead = ok("acquire", store.acquire(&run, "w1", TTL))?;
    ok("append", store.append(&run, &entries(&[1]), Some(&dead)))?;
    if let Some(holder) = ok("holder", store.holder(&run))? {
        ensure!(holder == dead, "holder() says {holder:?}, not {dead:?}");
    }
    let next = ok("take over from the dead holder", store.take_over(&dead, "w2", TTL))?;
    ensure!(next.epoch > dead.epoch && next.owner == "w2", "take_over returned {next:?}");
    all_writes_refused(store, &run, &dead, "a lease taken over")?;
    // Only the named holder can be taken from: a live lease it does not name stays.
    refused(
        "take over naming a superseded lease",
        store.take_over(&dead, "w3", TTL),
        "LeaseHeld",
        lease_held,
    )?;
    ok("append with the new lease", store.append(&run, &entries(&[2]), Some(&next)))?;
    Ok(())
}

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

mod blobs;
mod counters;
pub(crate) mod fixtures;
mod lease;
mod paging;

use std::fmt;
use std::sync::Arc;

use self::blobs::*;
use self::fixtures::*;
use self::lease::*;
use super::{Error, JournalStore, LeasableStore, RawEntry, RunFilter, RunMeta, RunStatus, TranscriptStore};
use crate::clock::{ManualClock, SharedClock};

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
        ("counters-follow-writes", counters::counters_follow_writes),
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

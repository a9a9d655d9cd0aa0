//! Unit tests of the journal kernel: identity, entries, the disposition table, the folds,
//! forward-matching and its properties.

use proptest::prelude::*;
use serde_json::json;

use super::fold::last_settlement;
use super::*;
use crate::error::{Error as CairnError, ErrorClass, ErrorCode};
use crate::money::Money;
use crate::store::RunStatus;

fn key(n: u64) -> ContentKey {
    content_key(&json!({ "kind": "step", "label": n })).unwrap()
}

/// An index over a journal kept in memory, serving what it points at from it (as the engine
/// serves it from the store).
struct Indexed {
    replay: Replay,
    entries: Vec<std::sync::Arc<Entry>>,
}

impl Indexed {
    fn new(entries: Vec<Entry>, options: &ReplayOptions) -> Indexed {
        let replay = Replay::new(entries.clone(), options);
        Indexed { replay, entries: entries.into_iter().map(std::sync::Arc::new).collect() }
    }

    fn lookup(&mut self, scope: &ScopePath, key: ContentKey) -> Match {
        let entries = &self.entries;
        let read = |pointer: Pointer| -> Result<std::sync::Arc<Entry>, ()> {
            let stored = entries.iter().find(|e| e.seq == pointer.seq()).cloned().ok_or(())?;
            Ok(pointer.serve(stored))
        };
        self.replay.lookup(scope, key).try_map(read).expect("the index points at a journaled entry")
    }
}

impl std::ops::Deref for Indexed {
    type Target = Replay;
    fn deref(&self) -> &Replay {
        &self.replay
    }
}

impl std::ops::DerefMut for Indexed {
    fn deref_mut(&mut self) -> &mut Replay {
        &mut self.replay
    }
}

/// A tiny journal builder: appends entries with increasing seqs.
#[derive(Default)]
struct Builder {
    entries: Vec<Entry>,
}

impl Builder {
    fn next(&self) -> Seq {
        Seq(self.entries.len() as u64 + 1)
    }
    fn push(&mut self, entry: Entry) -> Seq {
        let seq = entry.seq;
        self.entries.push(entry);
        seq
    }
    fn running(&mut self, scope: &str, k: ContentKey) -> Seq {
        let e = Entry::new(self.next(), Kind::Step, Status::Running, ScopePath::parse(scope).unwrap(), k, 0);
        self.push(e)
    }
    fn terminal(&mut self, of: Seq, status: Status, error: Option<ErrorCode>) -> Seq {
        let start = self.entries.iter().find(|e| e.seq == of).unwrap().clone();
        let mut e =
            Entry::new(self.next(), start.kind, status, start.scope.clone(), start.key, start.ordinal);
        e.target = Some(of);
        e.set_value((status == Status::Ok).then(|| json!({ "of": of.0 })).as_ref());
        e.error = error.map(|code| CairnError::new(code, "failed"));
        e.cost = Some(Money::from_nano_usd(100));
        self.push(e)
    }
    fn call(&mut self, scope: &str, k: ContentKey) -> Seq {
        let seq = self.running(scope, k);
        self.terminal(seq, Status::Ok, None);
        seq
    }
}

#[test]
fn entries_round_trip_through_their_stored_form() {
    let mut entry =
        Entry::new(Seq(7), Kind::Agent, Status::Ok, ScopePath::parse("par:0:2").unwrap(), key(1), 3);
    entry.target = Some(Seq(6));
    entry.set_value(Some(&json!({"answer": [1, 2.5, "x"]})));
    entry.cost = Some(Money::from_nano_usd(1234));
    entry.usage = Some(crate::Usage { input_tokens: 10, output_tokens: 5, ..Default::default() });
    entry.memoize_outcome = true;
    let raw = encode(&entry).unwrap();
    assert!(raw.json().contains(r#""ref":6"#) && raw.json().contains(r#""cost_nano_usd":1234"#));
    assert_eq!(decode_all(&[raw]).unwrap(), vec![entry]);
}

#[test]
fn decode_refuses_out_of_window_hash_versions_and_seq_mismatch() {
    let mut entry = Entry::new(Seq(1), Kind::Step, Status::Running, ScopePath::root(), key(1), 0);
    entry.hash_version = 2;
    let raw = encode(&entry).unwrap();
    assert!(matches!(decode_all(&[raw]), Err(Error::UnsupportedHashVersion { seq: 1, found: 2 })));
    entry.hash_version = 0;
    assert!(matches!(decode_all(&[encode(&entry).unwrap()]), Err(Error::UnsupportedHashVersion { .. })));
    entry.hash_version = 1;
    let lying = crate::store::RawEntry::new(9, encode(&entry).unwrap().json()).unwrap();
    assert!(matches!(decode_all(&[lying]), Err(Error::Decode { seq: 9, .. })));
    let unknown = crate::store::RawEntry::new(1, r#"{"seq":1,"kind":"teleport"}"#).unwrap();
    assert!(matches!(decode_all(&[unknown]), Err(Error::Decode { .. })));
}

#[test]
fn scope_paths_parse_nest_and_contain() {
    let root = ScopePath::root();
    let branch = root.child(&Segment::Par { site: 0, branch: 2 });
    let item = branch.child(&Segment::Pipe { stage: 1, item: 4 });
    assert_eq!(item.as_str(), "par:0:2/pipe:1:4");
    assert_eq!(ScopePath::parse("par:0:2/pipe:1:4").unwrap(), item);
    assert_eq!(
        item.segments(),
        vec![Segment::Par { site: 0, branch: 2 }, Segment::Pipe { stage: 1, item: 4 }]
    );
    let child = root.child(&Segment::Wf { name: "extract-invoices".into(), call: 1 });
    assert_eq!(child.as_str(), "wf:extract-invoices:1");
    assert!(item.is_within(&branch) && item.is_within(&root) && branch.is_within(&branch));
    assert!(!branch.is_within(&item));
    assert!(!ScopePath::parse("par:0:21").unwrap().is_within(&ScopePath::parse("par:0:2").unwrap()));
    for bad in ["par:0", "par:a:1", "pipe:1:01", "x:1:2", "par:0:1/", "/par:0:1", "wf::1"] {
        assert!(ScopePath::parse(bad).is_err(), "{bad} accepted");
    }
}

#[test]
fn schema_hash_ignores_annotations_only() {
    let plain = json!({"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]});
    let annotated = json!({
        "title": "Verdict", "description": "d", "$comment": "c", "examples": [1],
        "type": "object",
        "properties": {"title": {"type": "string", "description": "the title", "default": "x",
                                  "deprecated": true, "readOnly": true, "writeOnly": false}},
        "required": ["title"]
    });
    assert_eq!(schema_hash(&plain).unwrap(), schema_hash(&annotated).unwrap());
    let changed =
        json!({"type": "object", "properties": {"title": {"type": "integer"}}, "required": ["title"]});
    assert_ne!(schema_hash(&plain).unwrap(), schema_hash(&changed).unwrap());
    // A property named like an annotation keyword is data, not an annotation.
    let without = json!({"type": "object", "properties": {}, "required": ["title"]});
    assert_ne!(schema_hash(&plain).unwrap(), schema_hash(&without).unwrap());
    // enum and const values are literal data.
    assert_ne!(
        schema_hash(&json!({"enum": [{"title": 1}]})).unwrap(),
        schema_hash(&json!({"enum": [{}]})).unwrap()
    );
}

#[test]
fn disposition_table_covers_every_row() {
    use Disposition::*;
    use ErrorClass::{Task, Transport};
    let row = |effective, memoize, settled, abandoned, invalidated| {
        disposition(DispositionInput {
            effective,
            memoize_outcome: memoize,
            run_settled_ok: settled,
            abandoned,
            invalidated,
        })
    };
    let cases = [
        // (effective, memoize, settled_ok, abandoned, invalidated) → expected
        ((Effective::Ok, false, false, false, false), Replay),
        ((Effective::Ok, true, true, false, false), Replay),
        ((Effective::Error(Task), false, false, false, false), Rerun),
        ((Effective::Error(Task), true, false, false, false), Replay),
        ((Effective::Error(Transport), true, false, false, false), Rerun),
        ((Effective::Error(Transport), false, true, false, false), Rerun),
        ((Effective::Limit(Task), false, false, false, false), Rerun),
        ((Effective::Limit(Task), true, false, false, false), Replay),
        ((Effective::Limit(Transport), true, false, false, false), Rerun),
        ((Effective::Limit(Transport), false, true, false, false), Replay),
        ((Effective::Limit(Task), false, true, false, false), Replay),
        ((Effective::Cancelled, false, false, false, false), Rerun),
        ((Effective::Cancelled, true, true, false, false), Rerun),
        ((Effective::Running, false, false, false, false), Rerun),
        ((Effective::Running, true, true, false, false), Rerun),
        ((Effective::Suspended { resolved: true }, false, false, false, false), Replay),
        ((Effective::Suspended { resolved: false }, false, false, false, false), Wait),
        // An abandon outranks everything; an invalidate outranks every status.
        ((Effective::Ok, false, false, true, false), Skip),
        ((Effective::Running, false, false, true, true), Skip),
        ((Effective::Ok, false, false, false, true), Rerun),
        ((Effective::Error(Task), true, false, false, true), Rerun),
        ((Effective::Limit(Task), true, true, false, true), Rerun),
    ];
    for ((effective, memoize, settled, abandoned, invalidated), expected) in cases {
        assert_eq!(
            row(effective, memoize, settled, abandoned, invalidated),
            expected,
            "{effective:?} memoize={memoize} settled={settled} abandoned={abandoned} invalidated={invalidated}"
        );
    }
}

#[test]
fn resolutions_first_closing_wins() {
    let mut b = Builder::default();
    let ext = b.next();
    b.push(Entry::new(ext, Kind::External, Status::Suspended, ScopePath::root(), key(9), 0));
    let attempt = |b: &mut Builder, target: u64, value| {
        let mut e = Entry::new(b.next(), Kind::Resolution, Status::Ok, ScopePath::root(), key(9), 0);
        e.target = Some(Seq(target));
        e.set_value(Some(&value));
        b.push(e)
    };
    let bogus = attempt(&mut b, 99, json!("nope"));
    let first = attempt(&mut b, ext.0, json!({"approved": true}));
    let second = attempt(&mut b, ext.0, json!({"approved": false}));
    let fold = Resolutions::fold(&b.entries);
    assert_eq!(
        fold.attempts,
        vec![
            (bogus, ResolutionClass::Invalid),
            (first, ResolutionClass::Applied),
            (second, ResolutionClass::Noop)
        ]
    );
    assert_eq!(fold.value_for(ext), Some(&json!({"approved": true})));

    // The matched call replays the winning value.
    let mut replay = Indexed::new(b.entries.clone(), &ReplayOptions::default());
    match replay.lookup(&ScopePath::root(), key(9)).outcome {
        Outcome::Replay(entry) => assert_eq!(entry.value(), Some(json!({"approved": true}))),
        other => panic!("expected replay, got {other:?}"),
    }
}

#[test]
fn open_suspension_waits_and_live_resolution_applies_once() {
    let mut b = Builder::default();
    let ext = b.push(Entry::new(Seq(1), Kind::External, Status::Suspended, ScopePath::root(), key(5), 0));
    let mut replay = Indexed::new(b.entries, &ReplayOptions::default());
    assert!(matches!(replay.lookup(&ScopePath::root(), key(5)).outcome, Outcome::Wait(e) if e.seq == ext));
    assert!(replay.resolve(ext, Seq(2), json!(1)));
    assert!(!replay.resolve(ext, Seq(3), json!(2)));
    assert_eq!(replay.resolutions().value_for(ext), Some(&json!(1)));
}

#[test]
fn abandons_skip_a_subtree_and_its_misses() {
    let mut b = Builder::default();
    let inside = b.call("par:0:1", key(1));
    b.call("par:0:1/pipe:0:0", key(2));
    b.call("par:0:0", key(3));
    let mut abandon =
        Entry::new(b.next(), Kind::Abandon, Status::Ok, ScopePath::parse("par:0:1").unwrap(), key(1), 0);
    abandon.target = Some(inside);
    b.push(abandon);
    let ledger = Ledger::fold(&b.entries);
    let mut replay = Indexed::new(b.entries, &ReplayOptions::default());
    let p01 = ScopePath::parse("par:0:1").unwrap();
    assert!(matches!(replay.lookup(&p01, key(1)).outcome, Outcome::Skip));
    assert!(matches!(
        replay.lookup(&ScopePath::parse("par:0:1/pipe:0:0").unwrap(), key(2)).outcome,
        Outcome::Skip
    ));
    assert!(matches!(replay.lookup(&p01, key(77)).outcome, Outcome::Skip), "a miss inside is skipped too");
    assert!(matches!(
        replay.lookup(&ScopePath::parse("par:0:0").unwrap(), key(3)).outcome,
        Outcome::Replay(_)
    ));
    assert_eq!(
        replay.preview(),
        Preview { hits: 1, misses: 0, reruns: 0, skipped: 3, orphaned: 0, superseded: 0 }
    );
    // Paid is paid: the ledger still counts the abandoned work's cost.
    assert_eq!(ledger.spent, Money::from_nano_usd(300));
}

#[test]
fn hanging_and_failed_calls_rerun_then_replay_by_latest_attempt() {
    let mut b = Builder::default();
    let hanging = b.running("", key(1));
    let failed = b.running("", key(2));
    b.terminal(failed, Status::Error, Some(ErrorCode::Transport));
    let memo = b.running("", key(3));
    b.entries.last_mut().unwrap().memoize_outcome = true;
    b.terminal(memo, Status::Error, Some(ErrorCode::SchemaMismatch));

    let mut replay = Indexed::new(b.entries.clone(), &ReplayOptions::default());
    assert!(matches!(replay.lookup(&ScopePath::root(), key(1)).outcome,
        Outcome::Rerun { supersedes, previous: None } if supersedes == hanging));
    assert!(matches!(replay.lookup(&ScopePath::root(), key(2)).outcome,
        Outcome::Rerun { supersedes, previous: Some(_) } if supersedes == failed));
    assert!(matches!(replay.lookup(&ScopePath::root(), key(3)).outcome, Outcome::Replay(_)));
    assert_eq!(
        replay.preview(),
        Preview { hits: 1, misses: 0, reruns: 2, skipped: 0, orphaned: 0, superseded: 0 }
    );

    // The resume re-dispatches both (running entries ref their first attempt) and completes.
    for first in [hanging, failed] {
        let mut again = Entry::new(
            b.next(),
            Kind::Step,
            Status::Running,
            ScopePath::root(),
            b.entries[first.0 as usize - 1].key,
            0,
        );
        again.target = Some(first);
        let again = b.push(again);
        b.terminal(again, Status::Ok, None);
    }
    let mut replay = Indexed::new(b.entries.clone(), &ReplayOptions::default());
    for k in [1, 2, 3] {
        assert!(matches!(replay.lookup(&ScopePath::root(), key(k)).outcome, Outcome::Replay(_)), "key {k}");
    }
    assert_eq!(replay.preview(), Preview { hits: 3, ..Preview::default() });

    // An explicit invalidate forces the memoized failure to rerun.
    let mut replay =
        Indexed::new(b.entries, &ReplayOptions { invalidate: vec![memo], ..ReplayOptions::default() });
    replay.lookup(&ScopePath::root(), key(1));
    replay.lookup(&ScopePath::root(), key(2));
    assert!(matches!(replay.lookup(&ScopePath::root(), key(3)).outcome, Outcome::Rerun { .. }));
}

#[test]
fn limit_replays_once_the_run_settled_ok() {
    let mut b = Builder::default();
    let limited = b.running("", key(1));
    b.terminal(limited, Status::Limit, Some(ErrorCode::TurnLimit));
    let mut replay = Indexed::new(b.entries.clone(), &ReplayOptions::default());
    assert!(matches!(replay.lookup(&ScopePath::root(), key(1)).outcome, Outcome::Rerun { .. }));
    let mut settle = Entry::new(b.next(), Kind::Decision, Status::Ok, ScopePath::root(), key(100), 0);
    settle.set_value(Some(&settle_value(RunStatus::Ok)));
    b.push(settle);
    assert!(settled_ok(&b.entries));
    assert_eq!(last_settlement(&b.entries), Some(RunStatus::Ok));
    let mut replay = Indexed::new(b.entries, &ReplayOptions::default());
    assert!(replay.run_settled_ok());
    assert!(matches!(replay.lookup(&ScopePath::root(), key(1)).outcome, Outcome::Replay(_)));
}

#[test]
fn identical_calls_bind_in_journal_order_with_ordinals() {
    let mut b = Builder::default();
    let first = b.call("", key(1));
    let second = b.call("", key(1));
    let mut replay = Indexed::new(b.entries, &ReplayOptions::default());
    let a = replay.lookup(&ScopePath::root(), key(1));
    let b2 = replay.lookup(&ScopePath::root(), key(1));
    let c = replay.lookup(&ScopePath::root(), key(1));
    assert_eq!((a.ordinal, b2.ordinal, c.ordinal), (0, 1, 2));
    assert!(matches!(a.outcome, Outcome::Replay(e) if e.target == Some(first)));
    assert!(matches!(b2.outcome, Outcome::Replay(e) if e.target == Some(second)));
    assert!(matches!(c.outcome, Outcome::Live));
}

#[test]
fn scopes_match_independently() {
    let mut b = Builder::default();
    b.call("par:0:0", key(1));
    b.call("par:0:1", key(1));
    let mut replay = Indexed::new(b.entries, &ReplayOptions::default());
    // Branch 1 runs first: it must bind its own entry, not branch 0's.
    let one = replay.lookup(&ScopePath::parse("par:0:1").unwrap(), key(1));
    assert!(matches!(one.outcome, Outcome::Replay(e) if e.scope.as_str() == "par:0:1"));
    let zero = replay.lookup(&ScopePath::parse("par:0:0").unwrap(), key(1));
    assert!(matches!(zero.outcome, Outcome::Replay(e) if e.scope.as_str() == "par:0:0"));
}

/// Builds a fully completed journal of calls with the given keys in the root scope.
fn journal_of(keys: &[u64]) -> Vec<Entry> {
    let mut b = Builder::default();
    for &k in keys {
        b.call("", key(k));
    }
    b.entries
}

fn run_calls(replay: &mut Indexed, keys: &[u64]) -> Vec<bool> {
    keys.iter()
        .map(|&k| matches!(replay.lookup(&ScopePath::root(), key(k)).outcome, Outcome::Replay(_)))
        .collect()
}

proptest! {
    #[test]
    fn replaying_a_journal_against_itself_is_all_hits(keys in prop::collection::vec(0u64..6, 0..40)) {
        let mut replay = Indexed::new(journal_of(&keys), &ReplayOptions::default());
        prop_assert!(run_calls(&mut replay, &keys).into_iter().all(|hit| hit));
        prop_assert_eq!(replay.preview(), Preview { hits: keys.len() as u64, ..Preview::default() });
    }

    #[test]
    fn an_inserted_call_costs_exactly_one_miss(
        keys in prop::collection::vec(0u64..6, 0..40),
        position in any::<prop::sample::Index>(),
    ) {
        let mut edited = keys.clone();
        let at = position.index(keys.len() + 1);
        edited.insert(at, 1000); // a call the journal has never seen
        let mut replay = Indexed::new(journal_of(&keys), &ReplayOptions::default());
        let hits = run_calls(&mut replay, &edited);
        for (i, hit) in hits.iter().enumerate() {
            prop_assert_eq!(*hit, i != at, "call {} of {:?}", i, edited);
        }
        prop_assert_eq!(replay.preview(), Preview { hits: keys.len() as u64, misses: 1, ..Preview::default() });
    }

    #[test]
    fn a_deleted_call_is_orphaned_and_never_charged(
        keys in prop::collection::vec(0u64..6, 1..40),
        position in any::<prop::sample::Index>(),
    ) {
        let mut edited = keys.clone();
        let at = position.index(keys.len());
        edited.remove(at);
        let journal = journal_of(&keys);
        let mut replay = Indexed::new(journal, &ReplayOptions::default());
        let hits = run_calls(&mut replay, &edited);
        // Every remaining call replays: nothing is paid again.
        prop_assert!(hits.into_iter().all(|hit| hit));
        prop_assert_eq!(replay.preview(), Preview { hits: edited.len() as u64, orphaned: 1, ..Preview::default() });
        prop_assert_eq!(replay.orphans(usize::MAX).len(), 1);
    }
}

#[test]
fn repeated_names_decode_to_one_shared_copy() {
    let mut a = Entry::new(Seq(1), Kind::Agent, Status::Running, ScopePath::root(), key(1), 0);
    a.model = Some(intern("anthropic:claude-sonnet-4-5"));
    a.role = Some(intern("loop"));
    let mut b = a.clone();
    b.seq = Seq(2);
    let decoded = decode_all(&[encode(&a).unwrap(), encode(&b).unwrap()]).unwrap();
    let (x, y) = (decoded[0].model.as_ref().unwrap(), decoded[1].model.as_ref().unwrap());
    assert_eq!(&**x, "anthropic:claude-sonnet-4-5");
    assert!(std::sync::Arc::ptr_eq(x, y), "one copy of a repeated name");
    assert_eq!(decoded[0].phase, None);
    let explicit_null = crate::store::RawEntry::new(
        3,
        format!(r#"{{"seq":3,"hash_version":1,"kind":"step","status":"running","scope":"","key":"{}","ordinal":0,"phase":null}}"#, key(1)),
    )
    .unwrap();
    assert_eq!(decode_all(&[explicit_null]).unwrap()[0].phase, None);
}

/// Any JSON value: keys and strings from ASCII, the BMP (including U+E000..U+FFFF, which
/// UTF-16 sorts after surrogates) and beyond; integers of every size; floats.
fn any_json() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let text = prop_oneof![
        "[a-z_]{0,6}",
        "[a-zA-Z\\u{0}-\\u{1f}\"\\\\/\\u{7f}]{0,6}",
        "[a\\u{e9}\\u{20ac}\\u{e000}\\u{ffff}\\u{10000}\\u{1f600}]{0,4}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-(1i64 << 53)..=(1i64 << 53)).prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        text.clone().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(text.clone(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn the_content_key_fast_path_equals_the_canonicalizer(value in any_json()) {
        let canonical = crate::journal::canonical_json(&value).unwrap();
        prop_assert_eq!(
            crate::journal::content_key(&value).unwrap(),
            crate::journal::content_key_of_canonical(&canonical)
        );
    }
}

#[test]
fn the_content_key_fast_path_is_taken_only_where_it_is_exact() {
    use serde_json::json;
    // Spot checks where the serde_json form and the canonical form differ: the key must
    // still be the canonical one.
    for value in [
        json!({"n": 1.0}),
        json!({"n": 9_007_199_254_740_993u64}),
        json!({"\u{e000}": 1, "\u{1f600}": 2}),
        json!([1e21, -0.0, 0.1]),
    ] {
        let canonical = crate::journal::canonical_json(&value).unwrap();
        assert_eq!(
            crate::journal::content_key(&value).unwrap(),
            crate::journal::content_key_of_canonical(&canonical),
            "{value}"
        );
    }
}

proptest! {
    #[test]
    fn content_keys_round_trip_through_hex(bytes in any::<[u8; 32]>()) {
        let key = ContentKey::from_bytes(bytes);
        prop_assert_eq!(ContentKey::from_hex(&key.to_hex()), Some(key));
        prop_assert_eq!(ContentKey::from_hex(&key.to_hex().to_uppercase()), Some(key));
    }
}

#[test]
fn malformed_hex_keys_are_refused() {
    let good = "0123456789abcdef".repeat(4);
    assert!(ContentKey::from_hex(&good).is_some());
    for bad in [
        String::new(),
        good[..63].to_owned(),
        format!("{good}0"),
        format!("g{}", &good[1..]),
        format!("{} ", &good[..63]),
        format!("é{}", &good[2..]),
    ] {
        assert_eq!(ContentKey::from_hex(&bad), None, "{bad:?}");
    }
}

#[test]
fn the_resident_index_keeps_a_few_dozen_bytes_per_call() {
    // What a journaled call costs in memory while a run matches against its journal (#31):
    // one record, and one key slot when its key is distinct.
    assert!(std::mem::size_of::<index::Record>() <= 56, "{}", std::mem::size_of::<index::Record>());
    let slot = std::mem::size_of::<(u32, index::Short)>() + std::mem::size_of::<index::KeyState>();
    assert!(slot <= 40, "{slot}");
}

#[test]
fn covering_a_scope_keeps_it_only_when_the_journal_holds_records_in_or_below_it() {
    // A replayed call covers the scope its body would have journaled in; most such scopes
    // (an agent call's approvals) hold nothing, and keeping their paths cost a resume tens of
    // bytes per replayed call (#31).
    let mut b = Builder::default();
    b.running("at:x:1/par:0:1", key(1));
    b.running("at:x:10", key(2));
    b.running("at:y:0", key(3));
    let mut replay = Indexed::new(b.entries, &ReplayOptions::default());
    for empty in ["at:x:0", "par:0:1", "at:x:1/par:0:2", "at:y:0/par:0:0", "at:x:11"] {
        replay.cover(&ScopePath::parse(empty).unwrap());
    }
    assert!(replay.covered.is_empty(), "{:?}", replay.covered);
    assert_eq!(replay.preview().orphaned, 3);
    // Exactly a journaled scope, and a scope with a journaled scope below it.
    replay.cover(&ScopePath::parse("at:y:0").unwrap());
    replay.cover(&ScopePath::parse("at:x:1").unwrap());
    assert_eq!(replay.covered.len(), 2, "{:?}", replay.covered);
    assert_eq!(replay.preview().orphaned, 1);
}

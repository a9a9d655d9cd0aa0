//! Store tests: the conformance suite against every shipped store and configuration, each
//! store's own failure modes (JSONL crash repair, SQLite reopen and cross-instance
//! fencing), and the multi-process soak over one SQLite file (in `store/soak.rs`).

mod soak;

use std::cell::Cell;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cairn::store::conformance::{self, Reopenable};
use cairn::store::{self, Durability, Error, JsonlStore, MemoryStore, SqliteOptions, SqliteStore};
use cairn::{JournalStore, LeasableStore, Lease, ManualClock, RawEntry, RunFilter, RunId, SharedClock};
use tempfile::TempDir;

/// Hands out a fresh path under one temp dir per call, as the suite's factories need.
struct Fresh {
    root: TempDir,
    next: Cell<u32>,
}

impl Fresh {
    fn new() -> Fresh {
        Fresh { root: tempfile::tempdir().unwrap(), next: Cell::new(0) }
    }

    fn path(&self, name: &str) -> PathBuf {
        let n = self.next.get();
        self.next.set(n + 1);
        let dir = self.root.path().join(format!("s{n}"));
        fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }
}

fn sqlite(
    path: &Path,
    clock: Option<SharedClock>,
    durability: Durability,
    group_commit: bool,
) -> SqliteStore {
    let mut options = SqliteOptions { durability, group_commit, ..SqliteOptions::new() };
    if let Some(clock) = clock {
        options.clock = clock;
    }
    SqliteStore::open(path, options).unwrap()
}

fn run(id: &str) -> RunId {
    RunId::parse(id).unwrap()
}

fn entry(seq: u64) -> RawEntry {
    RawEntry::new(seq, format!(r#"{{"seq":{seq}}}"#)).unwrap()
}

fn seqs(entries: &[RawEntry]) -> Vec<u64> {
    entries.iter().map(RawEntry::seq).collect()
}

#[test]
fn memory_store_conforms() {
    conformance::journal_store_conformance(&|| Box::new(MemoryStore::new()));
    conformance::leasable_store_conformance(&|clock| Box::new(MemoryStore::with_clock(clock)));
    conformance::transcript_store_conformance(&|| Box::new(MemoryStore::new()));
}

#[test]
fn jsonl_store_conforms() {
    let fresh = Fresh::new();
    conformance::journal_store_conformance(&|| {
        Box::new(JsonlStore::open(&fresh.path("runs"), Durability::Normal).unwrap())
    });
    conformance::transcript_store_conformance(&|| {
        Box::new(JsonlStore::open(&fresh.path("runs"), Durability::Normal).unwrap())
    });
    let last = std::sync::Mutex::new(PathBuf::new());
    conformance::exclusive_lease_conformance(
        &|| {
            let dir = fresh.path("runs");
            *last.lock().unwrap() = dir.clone();
            Box::new(JsonlStore::open(&dir, Durability::Normal).unwrap())
        },
        &|| Box::new(JsonlStore::open(&last.lock().unwrap(), Durability::Normal).unwrap()),
    );
    for durability in [Durability::Normal, Durability::Full] {
        conformance::durable_store_conformance(&|| {
            let dir = fresh.path("runs");
            let store = Box::new(JsonlStore::open(&dir, durability).unwrap());
            let reopen = Box::new(move || -> Box<dyn JournalStore> {
                Box::new(JsonlStore::open(&dir, durability).unwrap())
            });
            Reopenable { store, reopen }
        });
    }
}

#[test]
fn sqlite_store_conforms() {
    let fresh = Fresh::new();
    for group_commit in [true, false] {
        conformance::journal_store_conformance(&|| {
            Box::new(sqlite(&fresh.path("cairn.db"), None, Durability::Normal, group_commit))
        });
    }
    conformance::leasable_store_conformance(&|clock| {
        Box::new(sqlite(&fresh.path("cairn.db"), Some(clock), Durability::Normal, true))
    });
    let last = std::sync::Mutex::new(PathBuf::new());
    conformance::exclusive_lease_conformance(
        &|| {
            let path = fresh.path("cairn.db");
            *last.lock().unwrap() = path.clone();
            Box::new(sqlite(&path, None, Durability::Normal, true))
        },
        &|| Box::new(sqlite(&last.lock().unwrap(), None, Durability::Normal, true)),
    );
    conformance::transcript_store_conformance(&|| {
        Box::new(sqlite(&fresh.path("cairn.db"), None, Durability::Normal, true))
    });
    for durability in [Durability::Normal, Durability::Full] {
        conformance::durable_store_conformance(&|| {
            let path = fresh.path("cairn.db");
            let store = Box::new(sqlite(&path, None, durability, true));
            let reopen = Box::new(move || -> Box<dyn JournalStore> {
                Box::new(sqlite(&path, None, durability, true))
            });
            Reopenable { store, reopen }
        });
    }
}

#[test]
fn opened_urls_share_one_store_across_seams() {
    let fresh = Fresh::new();
    let path = fresh.path("nested/dir/cairn.db");
    let url = format!("sqlite:{}", path.display());
    let opened = store::open(&url).unwrap();
    let leases = opened.leases.as_ref().unwrap();
    let lease = leases.acquire(&run("r"), "w", Duration::from_secs(60)).unwrap();
    // The lease taken through one handle fences writes through the other.
    opened.journal.append(&run("r"), &[entry(1)], Some(&lease)).unwrap();
    let forged = Lease { epoch: lease.epoch + 1, ..lease.clone() };
    assert!(matches!(
        opened.journal.append(&run("r"), &[entry(2)], Some(&forged)),
        Err(Error::LeaseHeld { .. })
    ));
    opened.transcripts.put("r/t", b"blob").unwrap();
    drop(opened);
    let reopened = store::open(&url).unwrap();
    assert_eq!(seqs(&reopened.journal.load(&run("r")).unwrap()), [1]);
    assert_eq!(reopened.transcripts.get("r/t").unwrap().as_deref(), Some(&b"blob"[..]));
    let reopened_leases = reopened.leases.as_ref().unwrap();
    assert!(matches!(
        reopened_leases.acquire(&run("r"), "x", Duration::from_secs(1)),
        Err(Error::LeaseHeld { .. })
    ));

    let jsonl = store::open(&format!("jsonl:{}", fresh.path("runs").display())).unwrap();
    assert!(jsonl.leases.is_some());
    jsonl.journal.append(&run("r"), &[entry(1)], None).unwrap();
    jsonl.transcripts.put("r/x", b"1").unwrap();
    assert_eq!(jsonl.transcripts.list(&run("r")).unwrap(), ["r/x"]);
    assert!(matches!(store::open("mysql://x"), Err(Error::Config(_))));
}

// ---- JSONL crash repair ----

/// Writes a damaged journal by hand, as a crash (or a lost newline) would leave it.
fn damaged_jsonl(content: &str) -> (TempDir, JsonlStore, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.jsonl");
    fs::write(&path, content).unwrap();
    let store = JsonlStore::open(dir.path(), Durability::Normal).unwrap();
    (dir, store, path)
}

#[test]
fn jsonl_repairs_a_torn_last_line() {
    let torn = "{\"seq\":1}\n{\"seq\":2,\"v\":[1.50]}\n{\"seq\":3,\"v\":\"hal";
    let (_dir, store, path) = damaged_jsonl(torn);
    // A reader serves the sound prefix and leaves the file alone: the tail may be another
    // process's append in progress.
    let loaded = store.load(&run("r")).unwrap();
    assert_eq!(seqs(&loaded), [1, 2]);
    assert_eq!(loaded[1].json(), r#"{"seq":2,"v":[1.50]}"#);
    assert_eq!(store.load_page(&run("r"), 0, 10).unwrap(), loaded);
    assert_eq!(store.load_entry(&run("r"), 3).unwrap(), None);
    assert_eq!(fs::read_to_string(&path).unwrap(), torn);
    // The lease holder repairs it.
    let lease = store.acquire(&run("r"), "w", Duration::from_secs(1)).unwrap();
    assert_eq!(seqs(&store.load(&run("r")).unwrap()), [1, 2]);
    assert_eq!(fs::read_to_string(&path).unwrap(), "{\"seq\":1}\n{\"seq\":2,\"v\":[1.50]}\n");
    store.release(&lease).unwrap();
    store.append(&run("r"), &[entry(3)], None).unwrap();
    assert_eq!(seqs(&store.load(&run("r")).unwrap()), [1, 2, 3]);
    assert_eq!(fs::read_to_string(&path).unwrap(), "{\"seq\":1}\n{\"seq\":2,\"v\":[1.50]}\n{\"seq\":3}\n");
}

#[test]
fn jsonl_repairs_a_torn_line_on_first_append() {
    // The first touch of the run is an append: it must repair before writing.
    let (_dir, store, path) = damaged_jsonl("{\"seq\":1}\n{\"se");
    store.append(&run("r"), &[entry(2)], None).unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), "{\"seq\":1}\n{\"seq\":2}\n");
    assert!(matches!(store.append(&run("r"), &[entry(2)], None), Err(Error::OrderViolation { tail: 2, .. })));
}

#[test]
fn jsonl_serves_and_terminates_a_complete_unterminated_tail() {
    let (_dir, store, path) = damaged_jsonl("{\"seq\":1}\n{\"seq\":2}");
    assert_eq!(seqs(&store.load(&run("r")).unwrap()), [1, 2]);
    assert!(matches!(store.append(&run("r"), &[entry(2)], None), Err(Error::OrderViolation { tail: 2, .. })));
    store.append(&run("r"), &[entry(3), entry(4)], None).unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), "{\"seq\":1}\n{\"seq\":2}\n{\"seq\":3}\n{\"seq\":4}\n");
    assert_eq!(seqs(&store.load(&run("r")).unwrap()), [1, 2, 3, 4]);
}

#[test]
fn jsonl_salvages_glued_records() {
    // Glued in the middle, and glued in front of a torn fragment at the end.
    let (_dir, store, path) = damaged_jsonl(
        "{\"seq\":1,\"a\":\"}{\"}{\"seq\":2} {\"seq\":3}\n{\"seq\":4}\n{\"seq\":5}{\"seq\":6,\"x\":",
    );
    let loaded = store.load(&run("r")).unwrap();
    assert_eq!(seqs(&loaded), [1, 2, 3, 4, 5]);
    assert_eq!(loaded[0].json(), r#"{"seq":1,"a":"}{"}"#);
    assert_eq!(loaded[2].json(), r#"{"seq":3}"#);
    // Paged one by one, glued records are served one page each.
    for (after, want) in loaded.iter().enumerate() {
        assert_eq!(store.load_page(&run("r"), after as u64, 1).unwrap(), std::slice::from_ref(want));
        assert_eq!(store.load_entry(&run("r"), want.seq()).unwrap().as_ref(), Some(want));
    }
    store.append(&run("r"), &[entry(6)], None).unwrap();
    let loaded = store.load(&run("r")).unwrap();
    assert_eq!(seqs(&loaded), [1, 2, 3, 4, 5, 6]);
    assert!(fs::read_to_string(&path).unwrap().ends_with("{\"seq\":5}\n{\"seq\":6}\n"));
}

#[test]
fn jsonl_refuses_a_corrupt_middle_line() {
    for content in [
        "{\"seq\":1}\n{\"seq\":2,\"v\":\n{\"seq\":3}\n",
        "{\"seq\":1}\n\u{0}\u{0}\n{\"seq\":3}\n",
        "{\"seq\":2}\n{\"seq\":1}\n",
        "{\"seq\":1}\n{\"no_seq\":true}\n",
        "{\"seq\":1}\n{\"seq\":1}",
    ] {
        let (_dir, store, path) = damaged_jsonl(content);
        let err = store.load(&run("r")).unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { what, .. } if what.contains("run r")),
            "{content:?}: {err:?}"
        );
        let err = store.load_page(&run("r"), 0, 100).unwrap_err();
        assert!(matches!(&err, Error::Corrupt { .. }), "{content:?} paged: {err:?}");
        assert!(matches!(store.append(&run("r"), &[entry(9)], None), Err(Error::Corrupt { .. })));
        assert_eq!(fs::read_to_string(&path).unwrap(), content, "a corrupt journal was modified");
    }
}

#[test]
fn jsonl_refuses_leases_it_never_granted_and_checks_entry_text() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::open(dir.path(), Durability::Normal).unwrap();
    let lease = Lease { run_id: run("r"), owner: "w".into(), epoch: 1 };
    assert!(matches!(store.append(&run("r"), &[entry(1)], Some(&lease)), Err(Error::LeaseHeld { .. })));
    assert!(matches!(JournalStore::delete(&store, &run("r"), Some(&lease)), Err(Error::LeaseHeld { .. })));
    let lying = RawEntry::new(1, r#"{"seq":2}"#).unwrap();
    assert!(matches!(store.append(&run("r"), &[lying], None), Err(Error::Corrupt { .. })));
    assert!(store.load(&run("r")).unwrap().is_empty());
}

#[test]
fn jsonl_keeps_many_runs_correct_past_its_open_file_limit() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::open(dir.path(), Durability::Normal).unwrap();
    let runs: Vec<RunId> = (0..150).map(|n| run(&format!("run-{n}"))).collect();
    for seq in 1..=3 {
        for run in &runs {
            store.append(run, &[entry(seq)], None).unwrap();
        }
    }
    for run in &runs {
        assert_eq!(seqs(&store.load(run).unwrap()), [1, 2, 3]);
        assert!(matches!(store.append(run, &[entry(3)], None), Err(Error::OrderViolation { .. })));
    }
}

#[test]
fn jsonl_pages_a_journal_another_process_wrote_again() {
    // One instance reads pages (and learns where they lie in the file); another deletes the
    // run and writes it again, shorter lines and all: the first reads what is there now.
    let dir = tempfile::tempdir().unwrap();
    let writer = JsonlStore::open(dir.path(), Durability::Normal).unwrap();
    let reader = JsonlStore::open(dir.path(), Durability::Normal).unwrap();
    let padded = |seq: u64, pad: usize| {
        RawEntry::new(seq, format!(r#"{{"seq":{seq},"pad":"{}"}}"#, "p".repeat(pad))).unwrap()
    };
    let first: Vec<RawEntry> = (1..=300).map(|seq| padded(seq, 900)).collect();
    writer.append(&run("r"), &first, None).unwrap();
    let mut after = 0;
    while let Some(last) = reader.load_page(&run("r"), after, 17).unwrap().last() {
        after = last.seq();
    }
    assert_eq!(after, 300);
    assert_eq!(reader.load_entry(&run("r"), 250).unwrap().as_ref(), Some(&first[249]));
    JournalStore::delete(&writer, &run("r"), None).unwrap();
    let again: Vec<RawEntry> = (1..=400).map(|seq| padded(seq, 7 + (seq as usize % 5) * 300)).collect();
    writer.append(&run("r"), &again, None).unwrap();
    for seq in [299, 250, 120, 3, 400, 301] {
        assert_eq!(reader.load_entry(&run("r"), seq).unwrap().as_ref(), Some(&again[seq as usize - 1]));
    }
    assert_eq!(reader.load_page(&run("r"), 290, 200).unwrap(), again[290..]);
    assert_eq!(reader.load_since(&run("r"), 0).unwrap(), again);
}

#[test]
fn jsonl_refuses_a_corrupt_meta_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::open(dir.path(), Durability::Normal).unwrap();
    fs::write(dir.path().join("r.meta.json"), "{\"run_id\":").unwrap();
    fs::write(dir.path().join(".tmp.1.2"), "junk").unwrap();
    assert!(matches!(store.get_meta(&run("r")), Err(Error::Corrupt { .. })));
    assert!(matches!(store.list_runs(&RunFilter::default()), Err(Error::Corrupt { .. })));
}

// ---- SQLite ----

#[test]
fn sqlite_instances_over_one_file_fence_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    let clock = ManualClock::new(1_000_000);
    let first = sqlite(&path, Some(Arc::new(clock.clone())), Durability::Normal, true);
    let second = sqlite(&path, Some(Arc::new(clock.clone())), Durability::Normal, true);
    let r = run("shared");
    let ttl = Duration::from_secs(30);

    let lease = first.acquire(&r, "first", ttl).unwrap();
    assert!(matches!(second.acquire(&r, "second", ttl), Err(Error::LeaseHeld { .. })));
    first.append(&r, &[entry(1)], Some(&lease)).unwrap();
    assert_eq!(seqs(&second.load(&r).unwrap()), [1], "a commit on one instance is not visible to the other");

    clock.advance(30_000);
    let taken = second.acquire(&r, "second", ttl).unwrap();
    assert!(taken.epoch > lease.epoch);
    assert!(matches!(first.append(&r, &[entry(2)], Some(&lease)), Err(Error::LeaseHeld { .. })));
    assert!(matches!(first.renew(&lease, ttl), Err(Error::LeaseHeld { .. })));
    second.append(&r, &[entry(2)], Some(&taken)).unwrap();
    assert_eq!(seqs(&first.load(&r).unwrap()), [1, 2]);

    // The tombstone is shared too: a delete through one instance keeps the other's epochs
    // growing.
    second.delete(&r, Some(&taken)).unwrap();
    let recreated = first.acquire(&r, "first", ttl).unwrap();
    assert!(recreated.epoch > taken.epoch);
    assert!(first.load(&r).unwrap().is_empty());
}

#[test]
fn sqlite_refuses_a_newer_schema_and_memory_paths() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    drop(sqlite(&path, None, Durability::Normal, true));
    rusqlite::Connection::open(&path).unwrap().execute_batch("PRAGMA user_version = 99").unwrap();
    let err = SqliteStore::open(&path, SqliteOptions::new()).unwrap_err();
    assert!(matches!(&err, Error::Config(message) if message.contains("newer")), "{err:?}");
    assert!(matches!(SqliteStore::open(Path::new(":memory:"), SqliteOptions::new()), Err(Error::Config(_))));
}

#[test]
fn sqlite_concurrent_boots_and_appends_share_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    std::thread::scope(|scope| {
        for writer in 0..3 {
            let path = &path;
            scope.spawn(move || {
                let store = sqlite(path, None, Durability::Normal, true);
                let r = run(&format!("w{writer}"));
                for seq in 1..=20 {
                    store.append(&r, &[entry(seq)], None).unwrap();
                }
            });
        }
    });
    let store = sqlite(&path, None, Durability::Normal, true);
    for writer in 0..3 {
        assert_eq!(store.load(&run(&format!("w{writer}"))).unwrap().len(), 20);
    }
}

/// The version-1 schema (journal rows keyed by `(run_id, seq)`), as cairn wrote it before the
/// numbered journal.
const SQLITE_SCHEMA_V1: &str = "
CREATE TABLE entries (run_id TEXT NOT NULL, seq INTEGER NOT NULL, json TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
CREATE TABLE runs (run_id TEXT PRIMARY KEY, status TEXT NOT NULL, name TEXT,
    created_at_ms INTEGER NOT NULL, meta_json TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE run_tags (tag TEXT NOT NULL, run_id TEXT NOT NULL, PRIMARY KEY (tag, run_id)) WITHOUT ROWID;
CREATE TABLE leases (run_id TEXT PRIMARY KEY, owner TEXT NOT NULL, epoch INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE epochs (run_id TEXT PRIMARY KEY, high_water INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE blobs (ref TEXT PRIMARY KEY, run_id TEXT NOT NULL, data BLOB NOT NULL);
PRAGMA user_version = 1;
";

fn version_1_database(path: &Path, rows: &[(&str, i64)]) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("PRAGMA journal_mode = WAL").unwrap();
    conn.execute_batch(SQLITE_SCHEMA_V1).unwrap();
    for (run, seq) in rows {
        conn.execute(
            "INSERT INTO entries (run_id, seq, json) VALUES (?1, ?2, ?3)",
            rusqlite::params![run, seq, format!(r#"{{"seq":{seq},"run":"{run}"}}"#)],
        )
        .unwrap();
    }
}

#[test]
fn sqlite_migrates_a_version_1_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    version_1_database(&path, &[("b", 1), ("a", 1), ("a", 2), ("b", 2), ("a", 3)]);
    let store = sqlite(&path, None, Durability::Normal, true);
    let a = store.load(&run("a")).unwrap();
    assert_eq!(seqs(&a), [1, 2, 3]);
    assert_eq!(a[2].json(), r#"{"seq":3,"run":"a"}"#, "entry text is kept byte for byte");
    assert_eq!(seqs(&store.load(&run("b")).unwrap()), [1, 2]);
    // The migrated runs take appends at their tails, and new runs get numbers of their own.
    store.append(&run("a"), &[entry(4)], None).unwrap();
    assert!(matches!(store.append(&run("b"), &[entry(2)], None), Err(Error::OrderViolation { .. })));
    store.append(&run("c"), &[entry(1)], None).unwrap();
    assert_eq!(seqs(&store.load(&run("a")).unwrap()), [1, 2, 3, 4]);
    assert_eq!(seqs(&store.load(&run("c")).unwrap()), [1]);
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0)).unwrap();
    let old_tables: i64 = conn
        .query_row("SELECT COUNT(*) FROM sqlite_master WHERE name = 'entries'", [], |row| row.get(0))
        .unwrap();
    assert_eq!((version, old_tables), (2, 0));
}

#[test]
fn sqlite_refuses_to_migrate_a_journal_it_cannot_key_and_leaves_it_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    version_1_database(&path, &[("a", 1), ("a", 1 << 32)]);
    let err = SqliteStore::open(&path, SqliteOptions::new()).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0)).unwrap();
    let rows: i64 = conn.query_row("SELECT COUNT(*) FROM entries", [], |row| row.get(0)).unwrap();
    assert_eq!((version, rows), (1, 2));
}

#[test]
fn sqlite_refuses_a_seq_beyond_its_key_space() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir.path().join("cairn.db"), None, Durability::Normal, true);
    let err = store.append(&run("big"), &[entry(1 << 32)], None).unwrap_err();
    assert!(matches!(&err, Error::Config(message) if message.contains("limit")), "{err:?}");
    assert!(store.load(&run("big")).unwrap().is_empty());
}

/// A store that checkpoints after `pages` WAL pages (and inline at four times that).
fn checkpointing(path: &Path, pages: u32) -> SqliteStore {
    SqliteStore::open(path, SqliteOptions { checkpoint_pages: pages, ..SqliteOptions::new() }).unwrap()
}

/// An entry padded with `pad` bytes, to fill WAL pages quickly.
fn padded(seq: u64, pad: usize) -> RawEntry {
    RawEntry::new(seq, format!(r#"{{"seq":{seq},"pad":"{}"}}"#, "x".repeat(pad))).unwrap()
}

/// A writer that never pauses still gets its log checkpointed and started over: the WAL file
/// stays near the inline cap (four times the threshold) instead of growing with every commit.
#[test]
fn sqlite_keeps_its_wal_bounded_under_steady_appends() {
    const THRESHOLD: u32 = 64;
    const COMMITS: u64 = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    let store = checkpointing(&path, THRESHOLD);
    let r = run("steady");
    for seq in 1..=COMMITS {
        store.append(&r, &[padded(seq, 400)], None).unwrap();
    }
    let wal = fs::metadata(dir.path().join("cairn.db-wal")).unwrap().len();
    let page: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA page_size", [], |row| row.get(0))
        .unwrap();
    let frame = page as u64 + 24;
    // Unbounded, the log would hold at least one frame per commit. Bounded, it stays within a
    // small multiple of the inline cap (4 × the threshold): a background checkpoint that a
    // busy machine slows down lets the writer run past the cap before it resets the log (3.5 ×
    // the cap seen with the machine's load at 40 on 2 cores).
    assert!(wal < 5 * 4 * u64::from(THRESHOLD) * frame, "WAL grew to {wal} bytes");
    assert!(wal < COMMITS * frame / 4, "WAL grew to {wal} bytes");
    assert_eq!(seqs(&store.load(&r).unwrap()), (1..=COMMITS).collect::<Vec<_>>());
}

/// While a reader pins old frames no checkpoint can finish, and appends go on regardless.
#[test]
fn sqlite_appends_while_a_reader_pins_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    let store = checkpointing(&path, 16);
    let r = run("pinned");
    store.append(&r, &[entry(1)], None).unwrap();
    let reader = rusqlite::Connection::open(&path).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let seen: i64 = reader.query_row("SELECT COUNT(*) FROM journal", [], |row| row.get(0)).unwrap();
    for seq in 2..=400 {
        store.append(&r, &[entry(seq)], None).unwrap();
    }
    let still: i64 = reader.query_row("SELECT COUNT(*) FROM journal", [], |row| row.get(0)).unwrap();
    assert_eq!((seen, still), (1, 1), "the reader keeps its snapshot");
    reader.execute_batch("COMMIT").unwrap();
    for seq in 401..=800 {
        store.append(&r, &[entry(seq)], None).unwrap();
    }
    assert_eq!(store.load(&r).unwrap().len(), 800);
}

/// Once the writer pauses, the store's checkpoint thread copies the log back into the
/// database file without any further commit (below the inline cap, only the thread can).
///
/// Only the commit that takes the log past the threshold asks for a pass, so no pass can run
/// before the last commit, however long the machine keeps the writer waiting between commits
/// (a pause of the writer mid-way used to let a pass copy part of the log before the test
/// measured the file, and it then waited for growth that had already happened).
#[test]
fn sqlite_checkpoints_in_the_writers_pause() {
    const THRESHOLD: u64 = 64;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    let store = checkpointing(&path, THRESHOLD as u32);
    let r = run("pausing");
    let before = fs::metadata(&path).unwrap().len();
    // The log's frames, read off the WAL file: nothing started it over yet (no pass ran),
    // so they are the page count the store's hook compares with its threshold.
    let wal = dir.path().join("cairn.db-wal");
    let frames = || {
        let bytes = fs::read(&wal).unwrap();
        let page = u64::from(u32::from_be_bytes(bytes[8..12].try_into().unwrap()));
        (bytes.len() as u64 - 32) / (page + 24)
    };
    // About two pages a commit, until the log reaches the threshold: that last commit is the
    // first to ask for a pass, and the log stays well short of the inline cap (4 × threshold).
    let mut seq = 0u64;
    while frames() < THRESHOLD {
        seq += 1;
        assert_eq!(fs::metadata(&path).unwrap().len(), before, "nothing copied before the threshold");
        store.append(&r, &[padded(seq, 2_000)], None).unwrap();
    }
    assert!(frames() < 2 * THRESHOLD, "{} frames", frames());
    // Generous: on a loaded machine the checkpoint thread may wait long for a core.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut after = before;
    while after < before + seq * 2_000 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        after = fs::metadata(&path).unwrap().len();
    }
    assert!(after >= before + seq * 2_000, "the database file stayed at {after} bytes (was {before})");
    assert_eq!(store.load(&r).unwrap().len() as u64, seq);
}

/// Another instance over the same directory (as another process sees it) reads who holds a
/// run's lock while it is held, and nobody once it is released or never taken; reading takes
/// nothing (`cairn runs` tells a stalled run from a driven one by it).
#[cfg(target_os = "linux")]
#[test]
fn jsonl_holder_is_read_without_taking_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let driver = JsonlStore::open(dir.path(), Durability::Normal).unwrap();
    let reader = JsonlStore::open(dir.path(), Durability::Normal).unwrap();
    let run = run("held");
    assert_eq!(reader.holder(&run).unwrap(), None, "never leased");
    let lease = driver.acquire(&run, "pid 1 on elsewhere", Duration::from_secs(30)).unwrap();
    assert_eq!(reader.holder(&run).unwrap(), Some(lease.clone()));
    assert_eq!(reader.lease_holder(&run).unwrap(), Some(Some(lease.clone())));
    driver.renew(&lease, Duration::from_secs(30)).unwrap();
    assert!(reader.acquire(&run, "other", Duration::from_secs(30)).is_err());
    driver.release(&lease).unwrap();
    assert_eq!(reader.holder(&run).unwrap(), None, "released");
}

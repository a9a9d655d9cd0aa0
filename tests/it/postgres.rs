//! The PostgreSQL store against a real server: the conformance suite every store passes,
//! concurrent opens migrating once, identity refusals, read-only opens and group commit. The
//! two-process soak is in `store/soak.rs`, the queue in `queue.rs`.
//!
//! The server is the one `CAIRN_TEST_POSTGRES_URL` names (`.ci/run` starts one; locally,
//! `.ci/postgres start DIR`). Without it these tests are skipped with a note, except under
//! `CI=true`, where a missing server fails them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use cairn::store::conformance::{self, Reopenable};
use cairn::store::{self, Error, PostgresOptions, PostgresStore};
use cairn::{JournalStore, LeasableStore, RawEntry, RunFilter, RunId, SharedClock};

/// The test server's URL, or `None` (with a note) when there is none outside CI.
///
/// # Panics
/// Under `CI=true` when `CAIRN_TEST_POSTGRES_URL` is unset.
pub(crate) fn server_url() -> Option<String> {
    match std::env::var("CAIRN_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|ci| ci == "true" || ci == "1") => {
            panic!("CAIRN_TEST_POSTGRES_URL is not set under CI: .ci/run starts PostgreSQL for these tests")
        }
        _ => {
            eprintln!(
                "note: CAIRN_TEST_POSTGRES_URL is not set; skipping a PostgreSQL test (.ci/postgres start DIR)"
            );
            None
        }
    }
}

/// The test server's URL with a schema no other test uses.
pub(crate) fn fresh_url(tag: &str) -> Option<String> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let url = server_url()?;
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let schema = format!("t_{tag}_{}_{n}_{nanos}", std::process::id());
    let separator = if url.contains('?') { '&' } else { '?' };
    Some(format!("{url}{separator}schema={schema}"))
}

fn open(url: &str) -> PostgresStore {
    PostgresStore::open(url, PostgresOptions::new()).unwrap()
}

fn run(id: &str) -> RunId {
    RunId::parse(id).unwrap()
}

fn entry(seq: u64) -> RawEntry {
    RawEntry::new(seq, format!(r#"{{"seq":{seq}}}"#)).unwrap()
}

#[test]
fn postgres_store_conforms() {
    let Some(_) = server_url() else { return };
    for group_commit in [true, false] {
        conformance::journal_store_conformance(&|| {
            let options = PostgresOptions { group_commit, ..PostgresOptions::new() };
            Box::new(PostgresStore::open(&fresh_url("j").unwrap(), options).unwrap())
        });
    }
    conformance::leasable_store_conformance(&|clock: SharedClock| {
        let options = PostgresOptions { clock, ..PostgresOptions::new() };
        Box::new(PostgresStore::open(&fresh_url("l").unwrap(), options).unwrap())
    });
    let last = std::sync::Mutex::new(String::new());
    conformance::exclusive_lease_conformance(
        &|| {
            let url = fresh_url("x").unwrap();
            *last.lock().unwrap() = url.clone();
            Box::new(open(&url))
        },
        &|| Box::new(open(&last.lock().unwrap())),
    );
    conformance::transcript_store_conformance(&|| Box::new(open(&fresh_url("t").unwrap())));
    conformance::durable_store_conformance(&|| {
        let url = fresh_url("d").unwrap();
        let store = Box::new(open(&url));
        let reopen = Box::new(move || -> Box<dyn JournalStore> { Box::new(open(&url)) });
        Reopenable { store, reopen }
    });
}

#[test]
fn concurrent_opens_of_a_fresh_schema_migrate_once() {
    let Some(url) = fresh_url("boot") else { return };
    let stores: Vec<PostgresStore> = std::thread::scope(|scope| {
        let opening: Vec<_> = (0..4).map(|_| scope.spawn(|| open(&url))).collect();
        opening.into_iter().map(|handle| handle.join().unwrap()).collect()
    });
    for (i, store) in stores.iter().enumerate() {
        store.append(&run(&format!("r{i}")), &[entry(1)], None).unwrap();
    }
    drop(stores);
    let store = open(&url);
    assert_eq!(store.list_runs(&RunFilter::default()).unwrap().len(), 0);
    assert_eq!(store.load(&run("r3")).unwrap().len(), 1);
}

#[test]
fn a_schema_of_someone_elses_is_refused_and_left_alone() {
    let Some(url) = fresh_url("foreign") else { return };
    let schema = url.rsplit_once("schema=").unwrap().1.to_owned();
    // Someone else's table in that schema, made through a store-less connection.
    let base = server_url().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&base, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        client
            .batch_execute(&format!("CREATE SCHEMA {schema}; CREATE TABLE {schema}.orders (id int)"))
            .await
            .unwrap();
    });
    let err = PostgresStore::open(&url, PostgresOptions::new()).unwrap_err();
    assert!(matches!(&err, Error::Config(message) if message.contains("not a cairn store")), "{err:?}");
    assert!(matches!(PostgresStore::open_read_only(&url, PostgresOptions::new()), Err(Error::Config(_))));
    let tables: i64 = runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&base, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        let row = client
            .query_one("SELECT count(*) FROM information_schema.tables WHERE table_schema = $1", &[&schema])
            .await
            .unwrap();
        row.get(0)
    });
    assert_eq!(tables, 1, "the foreign schema was changed");
}

#[test]
fn read_only_opens_create_nothing_and_write_nothing() {
    let Some(url) = fresh_url("ro") else { return };
    assert!(PostgresStore::open_read_only(&url, PostgresOptions::new()).unwrap().is_none());
    assert!(store::open_read_only(&url).unwrap().is_none(), "a read created the store");
    let writer = open(&url);
    writer.append(&run("r"), &[entry(1)], None).unwrap();
    let reader = store::open_read_only(&url).unwrap().unwrap();
    assert!(reader.leases.is_none() && reader.queue.is_none());
    assert_eq!(reader.journal.load(&run("r")).unwrap().len(), 1);
    assert!(matches!(reader.journal.append(&run("r"), &[entry(2)], None), Err(Error::Config(_))));
}

#[test]
fn concurrent_appends_share_commits_and_all_land_in_order() {
    let Some(url) = fresh_url("group") else { return };
    let store = Arc::new(open(&url));
    std::thread::scope(|scope| {
        for thread in 0..8 {
            let store = &store;
            scope.spawn(move || {
                let run = run(&format!("r{thread}"));
                for seq in 1..=40u64 {
                    store.append(&run, &[entry(seq)], None).unwrap();
                }
            });
        }
    });
    for thread in 0..8 {
        let loaded = store.load(&run(&format!("r{thread}"))).unwrap();
        assert_eq!(loaded.iter().map(RawEntry::seq).collect::<Vec<_>>(), (1..=40).collect::<Vec<_>>());
    }
}

#[test]
fn a_stale_lease_is_fenced_by_the_database_across_two_stores() {
    let Some(url) = fresh_url("fence") else { return };
    let (a, b) = (open(&url), open(&url));
    let r = run("r");
    // Long enough for the first append on a loaded machine (50 ms expired before it once).
    let old = a.acquire(&r, "a", Duration::from_millis(500)).unwrap();
    a.append(&r, &[entry(1)], Some(&old)).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let new = b.acquire(&r, "b", Duration::from_secs(30)).unwrap();
    assert!(new.epoch > old.epoch);
    assert!(matches!(a.append(&r, &[entry(2)], Some(&old)), Err(Error::LeaseHeld { .. })));
    b.append(&r, &[entry(2)], Some(&new)).unwrap();
    assert_eq!(a.load(&r).unwrap().iter().map(RawEntry::seq).collect::<Vec<_>>(), [1, 2]);
}

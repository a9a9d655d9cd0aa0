//! A driver whose lease lapsed sends no model request: the lease is checked before every wire
//! attempt, not only by the writes the store fences. Two engines on one store (as two
//! processes would be), on SQLite and PostgreSQL: the first is held up between two calls past
//! its lease's expiry, the second takes the run over and asks the next call; released, the
//! first stops without asking it, so the call reaches the model once.

use std::sync::Arc;
use std::time::Duration;

use cairn::store::{PostgresOptions, PostgresStore, SqliteOptions, SqliteStore};
use cairn::testing::{FakeProvider, FakeScript};
use cairn::{
    AgentOptions, Engine, JournalStore, ManualClock, ModelRef, ResumeOptions, RunId, RunOptions, RunStatus,
    TranscriptStore, Workflow,
};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// The run's lease lasts this long by the shared clock; the renewal thread (every third of it,
/// in real time) never renews within the test, so only the clock's jump lapses it.
const TTL: Duration = Duration::from_secs(30);

type Stores = (Arc<dyn JournalStore>, Arc<dyn TranscriptStore>);

fn engine(stores: Stores, fake: &FakeProvider, clock: &ManualClock) -> Engine {
    Engine::builder_with_stores(stores.0, stores.1)
        .provider(Arc::new(fake.clone()))
        .default_model(ModelRef::parse("fake:m").unwrap())
        .clock(Arc::new(clock.clone()))
        .lease_ttl(TTL)
        .build()
        .unwrap()
}

/// Two calls; between them the driver waits for `go` when given one (the test holds it there).
fn two_calls(pause: Option<(Arc<Notify>, Arc<Notify>)>) -> Workflow {
    Workflow::new("lapse", move |ctx, _| {
        let pause = pause.clone();
        async move {
            let one = ctx.agent("one", AgentOptions::default()).await?;
            if let Some((paused, go)) = pause {
                paused.notify_one();
                go.notified().await;
            }
            let two = ctx.agent("two", AgentOptions::default()).await?;
            Ok(json!([one, two]))
        }
    })
}

/// `open` opens a store on the shared database with the shared clock; called once per driver.
async fn a_lapsed_driver_sends_nothing(open: &dyn Fn(&ManualClock) -> Stores) {
    let clock = ManualClock::new(1_700_000_000_000);
    let fake = FakeProvider::named("fake").on_any(FakeScript::text("answer"));
    let first = engine(open(&clock), &fake, &clock);
    let second = engine(open(&clock), &fake, &clock);
    let run = RunId::parse("lapse").unwrap();
    let (paused, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));

    let options = RunOptions { run_id: Some(run.clone()), ..RunOptions::default() };
    let held_up = first.run(&two_calls(Some((paused.clone(), go.clone()))), Value::Null, options).unwrap();
    paused.notified().await;
    // The first driver is held up past its lease's expiry (a starved process, renewals that
    // never came); the second takes the run over and drives it to its end.
    clock.advance(2 * i64::try_from(TTL.as_millis()).unwrap());
    let options = ResumeOptions { workflow: Some(two_calls(None)), ..ResumeOptions::default() };
    let taken = second.resume(&run, options).unwrap().result().await.unwrap();
    assert_eq!(taken.status, RunStatus::Ok, "{taken:?}");

    // Released, the first driver reaches its second call under a lease that is no longer its own.
    go.notify_one();
    let stopped = tokio::time::timeout(Duration::from_secs(30), held_up.result()).await.unwrap().unwrap();
    assert_ne!(stopped.status, RunStatus::Ok, "{stopped:?}");
    assert!(
        stopped.error.as_ref().is_some_and(|e| e.message.contains("lease")),
        "the driver did not say it lost the run: {stopped:?}"
    );
    let asked: Vec<String> = fake
        .calls()
        .iter()
        .map(|call| call.request.messages.last().map(|m| m.text()).unwrap_or_default())
        .collect();
    assert_eq!(
        asked,
        ["one", "two"],
        "a call was sent twice: by the driver that lost its lease and by its successor"
    );
    let journal = cairn::journal::decode_all(&second.journal_store().load(&run).unwrap()).unwrap();
    let paid = journal
        .iter()
        .filter(|e| e.kind == cairn::journal::Kind::Agent && e.status == cairn::journal::Status::Ok)
        .count();
    assert_eq!(paid, 2, "{journal:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_a_driver_whose_lease_lapsed_sends_no_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lapse.db");
    a_lapsed_driver_sends_nothing(&|clock| {
        let options = SqliteOptions { clock: Arc::new(clock.clone()), ..SqliteOptions::new() };
        let store = Arc::new(SqliteStore::open(&path, options).unwrap());
        (store.clone(), store)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_driver_whose_lease_lapsed_sends_no_request() {
    let Some(url) = crate::postgres::fresh_url("lapse") else { return };
    a_lapsed_driver_sends_nothing(&|clock| {
        let options = PostgresOptions { clock: Arc::new(clock.clone()), ..PostgresOptions::new() };
        let store = Arc::new(PostgresStore::open(&url, options).unwrap());
        (store.clone(), store)
    })
    .await;
}

/// A transcript store whose writes take `delay_ms` by the shared clock: a store slowed down
/// under load, as a submission sees it between taking the run's lease and writing its meta.
#[derive(Debug)]
struct SlowBlobs {
    inner: Arc<dyn TranscriptStore>,
    clock: ManualClock,
    delay_ms: Arc<std::sync::atomic::AtomicI64>,
}

impl TranscriptStore for SlowBlobs {
    fn put(&self, blob_ref: &str, blob: &[u8]) -> cairn::store::Result<()> {
        self.clock.advance(self.delay_ms.load(std::sync::atomic::Ordering::SeqCst));
        self.inner.put(blob_ref, blob)
    }
    fn get(&self, blob_ref: &str) -> cairn::store::Result<Option<Vec<u8>>> {
        self.inner.get(blob_ref)
    }
    fn list(&self, run: &RunId) -> cairn::store::Result<Vec<String>> {
        self.inner.list(run)
    }
    fn delete(&self, blob_ref: &str) -> cairn::store::Result<()> {
        self.inner.delete(blob_ref)
    }
}

/// A submission whose writes outlast the engine's (driver) lease is queued: its lease is sized
/// for the submission. One whose writes outlast even that is refused `store_io` (retryable,
/// naming the run), never `run_busy` (which the service answered "run  already exists", with
/// no id), and the same submission is queued when sent again. A second submission of a queued
/// run id is still refused as existing.
fn a_slow_submission_is_queued(open: &dyn Fn(&ManualClock) -> Stores) {
    let clock = ManualClock::new(1_700_000_000_000);
    let (journal, blobs) = open(&clock);
    let delay_ms = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let slow = Arc::new(SlowBlobs { inner: blobs, clock: clock.clone(), delay_ms: delay_ms.clone() });
    // The driver lease of the test that saw the false 409 (`CAIRN_LEASE_TTL_MS=1500`).
    let engine = Engine::builder_with_stores(journal, slow)
        .clock(Arc::new(clock.clone()))
        .lease_ttl(Duration::from_millis(1500))
        .build()
        .unwrap();
    let script = cairn::Script::rhai("slow", "40 + 2");
    let queued = |run: &RunId| engine.journal_store().get_meta(run).unwrap().map(|meta| meta.status);

    // Each of the two blob writes takes twice the driver lease.
    delay_ms.store(3_000, std::sync::atomic::Ordering::SeqCst);
    let run = engine.enqueue_script(&script, json!({}), RunOptions::default()).unwrap();
    assert_eq!(queued(&run), Some(RunStatus::Queued));

    // Each takes 20 s: the submission's 30 s lease lapses before the meta is written.
    delay_ms.store(20_000, std::sync::atomic::Ordering::SeqCst);
    let asked = RunId::parse("slow-store").unwrap();
    let options = RunOptions { run_id: Some(asked.clone()), ..RunOptions::default() };
    let refused = engine.enqueue_script(&script, json!({}), options.clone()).unwrap_err();
    assert_eq!(refused.code, cairn::ErrorCode::StoreIo, "{refused:?}");
    assert!(refused.message.contains("run slow-store"), "{refused:?}");
    assert_eq!(queued(&asked), None, "a refused submission left a meta");

    // Sent again once the store is fast: queued; sent once more: it exists.
    delay_ms.store(0, std::sync::atomic::Ordering::SeqCst);
    engine.enqueue_script(&script, json!({}), options.clone()).unwrap();
    assert_eq!(queued(&asked), Some(RunStatus::Queued));
    let again = engine.enqueue_script(&script, json!({}), options).unwrap_err();
    assert_eq!(again.code, cairn::ErrorCode::Config, "{again:?}");
    assert!(again.message.contains("run slow-store already exists"), "{again:?}");
}

#[test]
fn on_sqlite_a_submission_slower_than_the_driver_lease_is_queued() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("slow.db");
    a_slow_submission_is_queued(&|clock| {
        let options = SqliteOptions { clock: Arc::new(clock.clone()), ..SqliteOptions::new() };
        let store = Arc::new(SqliteStore::open(&path, options).unwrap());
        (store.clone(), store)
    });
}

#[test]
fn on_postgres_a_submission_slower_than_the_driver_lease_is_queued() {
    let Some(url) = crate::postgres::fresh_url("slowsubmit") else { return };
    a_slow_submission_is_queued(&|clock| {
        let options = PostgresOptions { clock: Arc::new(clock.clone()), ..PostgresOptions::new() };
        let store = Arc::new(PostgresStore::open(&url, options).unwrap());
        (store.clone(), store)
    });
}

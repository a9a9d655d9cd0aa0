//! Engine tests of the journal writer: deferred entries, durability before a result reaches
//! the workflow, lost writes and a panicking store, group commits, through a probing store.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;

use super::tests::{Counting, entries};
use crate::model::ModelRef;
use crate::store::{JournalStore, MemoryStore, RunStatus};
use crate::*;

/// A memory store that counts its appends, can make each one slow, and can refuse appends
/// holding a step's entries, as a full disk would.
#[derive(Debug)]
struct ProbeStore {
    inner: Arc<MemoryStore>,
    fail_steps: bool,
    /// Panics (instead of failing) on the first append holding a step entry.
    panic_steps: bool,
    write_delay: Duration,
    appends: AtomicUsize,
}

impl Default for ProbeStore {
    fn default() -> ProbeStore {
        ProbeStore {
            inner: Arc::new(MemoryStore::new()),
            fail_steps: false,
            panic_steps: false,
            write_delay: Duration::ZERO,
            appends: AtomicUsize::new(0),
        }
    }
}

impl JournalStore for ProbeStore {
    fn append_tallied(
        &self,
        run: &RunId,
        entries: &[crate::store::RawEntry],
        lease: Option<&crate::store::Lease>,
        tally: crate::store::Tally,
    ) -> crate::store::Result<()> {
        let has_step = entries.iter().any(|e| e.json().contains(r#""kind":"step""#));
        if self.fail_steps && has_step {
            return Err(crate::store::Error::Io(std::io::Error::other("disk full")));
        }
        if self.panic_steps && has_step {
            panic!("the store broke");
        }
        self.appends.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.write_delay);
        self.inner.append_tallied(run, entries, lease, tally)
    }
    fn load(&self, run: &RunId) -> crate::store::Result<Vec<crate::store::RawEntry>> {
        self.inner.load(run)
    }
    fn put_meta(
        &self,
        meta: &crate::store::RunMeta,
        lease: Option<&crate::store::Lease>,
    ) -> crate::store::Result<()> {
        self.inner.put_meta(meta, lease)
    }
    fn get_meta(&self, run: &RunId) -> crate::store::Result<Option<crate::store::RunMeta>> {
        self.inner.get_meta(run)
    }
    fn list_runs(
        &self,
        filter: &crate::store::RunFilter,
    ) -> crate::store::Result<Vec<crate::store::RunMeta>> {
        self.inner.list_runs(filter)
    }
    fn delete(&self, run: &RunId, lease: Option<&crate::store::Lease>) -> crate::store::Result<()> {
        JournalStore::delete(&*self.inner, run, lease)
    }
}

fn flaky_engine(fail_steps: bool) -> (Arc<MemoryStore>, Arc<Counting>, Engine) {
    let (store, provider, _, engine) = probe_engine(ProbeStore { fail_steps, ..ProbeStore::default() }, 0);
    (store, provider, engine)
}

fn probe_engine(
    probe: ProbeStore,
    latency_ms: u64,
) -> (Arc<MemoryStore>, Arc<Counting>, Arc<ProbeStore>, Engine) {
    let store = probe.inner.clone();
    let provider = Arc::new(Counting { latency_ms, ..Counting::default() });
    let journal = Arc::new(probe);
    let engine = Engine::builder_with_stores(journal.clone(), store.clone())
        .provider(Arc::new(provider.clone()))
        .default_model(ModelRef::parse("test:m").unwrap())
        .retries(0, Duration::from_millis(1))
        .max_concurrency(64)
        .build()
        .unwrap();
    (store, provider, journal, engine)
}

fn kinds(store: &MemoryStore, run: &RunId) -> Vec<(String, String)> {
    entries(store, run).iter().map(|e| (e.kind.as_str().to_owned(), e.status.as_str().to_owned())).collect()
}

#[tokio::test]
async fn deferred_entries_become_durable_without_an_awaited_append() {
    let (store, _provider, engine) = flaky_engine(false);
    let run = RunId::parse("deferred").unwrap();
    let (seen_store, seen_run) = (store.clone(), run.clone());
    let workflow = Workflow::new("deferred", move |ctx, _| {
        let (store, run) = (seen_store.clone(), seen_run.clone());
        async move {
            ctx.step("s", StepOptions::default(), |_| async { Ok(json!(1)) }).await?;
            // Nothing awaited follows the step: the background flush must write it.
            for _ in 0..200 {
                if store.load(&run).map(|raw| raw.len()).unwrap_or(0) == 2 {
                    return Ok(json!("written"));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(json!("never written"))
        }
    });
    let options = RunOptions { run_id: Some(run.clone()), ..RunOptions::default() };
    let outcome = engine.run(&workflow, json!({}), options).unwrap().result().await.unwrap();
    assert_eq!(outcome.value, Some(json!("written")));
}

#[tokio::test]
async fn a_paid_result_reaches_the_workflow_durable_with_everything_queued_before_it() {
    let (store, _provider, engine) = flaky_engine(false);
    let run = RunId::parse("awaited").unwrap();
    let (seen_store, seen_run) = (store.clone(), run.clone());
    let workflow = Workflow::new("awaited", move |ctx, _| {
        let (store, run) = (seen_store.clone(), seen_run.clone());
        async move {
            ctx.step("s", StepOptions::default(), |_| async { Ok(json!(1)) }).await?;
            ctx.random(None).await?;
            ctx.agent("paid", AgentOptions::default()).await?;
            // Read the store the moment the paid result arrives.
            Ok(json!(kinds(&store, &run)))
        }
    });
    let options = RunOptions { run_id: Some(run.clone()), ..RunOptions::default() };
    let outcome = engine.run(&workflow, json!({}), options).unwrap().result().await.unwrap();
    assert_eq!(
        outcome.value,
        Some(json!([
            ["step", "running"],
            ["step", "ok"],
            ["rand", "ok"],
            ["agent", "running"],
            ["agent", "ok"]
        ]))
    );
}

#[tokio::test]
async fn a_lost_deferred_write_fails_the_run_and_dispatches_nothing_after_it() {
    let (_store, provider, engine) = flaky_engine(true);
    let workflow = Workflow::new("lost", |ctx, _| async move {
        ctx.step("s", StepOptions::default(), |_| async { Ok(json!(1)) }).await?;
        // Let the background flush fail before the next call.
        tokio::time::sleep(Duration::from_millis(100)).await;
        ctx.agent("never paid", AgentOptions::default()).await
    });
    let outcome = engine.run(&workflow, json!({}), RunOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Error);
    assert_eq!(provider.calls.load(Ordering::SeqCst), 0, "a call was dispatched over a lost write");
    assert!(outcome.error.unwrap().message.contains("disk full"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_panics_fails_the_run_instead_of_hanging_it() {
    let (_store, _provider, _, engine) =
        probe_engine(ProbeStore { panic_steps: true, ..ProbeStore::default() }, 0);
    let workflow = Workflow::new("panicking_store", |ctx, _| async move {
        ctx.step("s", StepOptions::default(), |_| async { Ok(json!(1)) }).await?;
        // An awaited write (a paid result) after the panic must not wait for ever either.
        ctx.agent("after the panic", AgentOptions::default()).await
    });
    let handle = engine.run(&workflow, json!({}), RunOptions::default()).unwrap();
    let mut events = handle.events();
    let outcome = tokio::time::timeout(Duration::from_secs(10), handle.result()).await.unwrap().unwrap();
    assert_eq!(outcome.status, RunStatus::Error);
    let message = outcome.error.unwrap().message;
    assert!(message.contains("panicked"), "{message}");
    let drained =
        tokio::time::timeout(Duration::from_secs(5), async { while events.next().await.is_some() {} });
    assert!(drained.await.is_ok(), "the event stream ends");
}

#[tokio::test]
async fn a_run_cannot_settle_ok_over_a_lost_write() {
    let (store, _provider, engine) = flaky_engine(true);
    let workflow = Workflow::new("lost_at_end", |ctx, _| async move {
        ctx.step("s", StepOptions::default(), |_| async { Ok(json!(1)) }).await
    });
    let handle = engine.run(&workflow, json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Error);
    assert_eq!(outcome.value, None);
    assert_ne!(store.get_meta(&run).unwrap().unwrap().status, RunStatus::Ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_paid_results_share_group_commits() {
    // Each write takes 5 ms; twenty calls finish together: their terminals must share writes
    // rather than queue for one each.
    let probe = ProbeStore { write_delay: Duration::from_millis(5), ..ProbeStore::default() };
    let (store, provider, probe, engine) = probe_engine(probe, 50);
    let workflow = Workflow::new("fan", |ctx, _| async move {
        let items = (0..20).map(|i| json!(format!("p{i}"))).collect();
        let out = ctx
            .parallel_map(
                items,
                |ctx, item| async move {
                    ctx.agent(item.as_str().unwrap_or_default(), AgentOptions::default()).await
                },
                ParallelOptions::default(),
            )
            .await?;
        Ok(json!(out.len()))
    });
    let handle = engine.run(&workflow, json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Ok);
    assert_eq!(provider.calls.load(Ordering::SeqCst), 20);
    // 20 running + 20 ok + the settlement, all written, in far fewer writes than entries.
    assert_eq!(entries(&store, &run).len(), 41);
    let appends = probe.appends.load(Ordering::SeqCst);
    assert!(appends <= 12, "{appends} writes for 41 entries");
}

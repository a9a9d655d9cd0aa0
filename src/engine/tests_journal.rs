//! Engine tests of journal identity and determinism through the Rust API: a step body's own
//! scope, labelled child workflows, await timeouts in a live run.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;

use super::tests::{Counting, engine_with, entries};
use crate::store::{MemoryStore, RunStatus};
use crate::*;

#[tokio::test]
async fn a_rust_step_body_runs_in_its_own_scope() {
    let store = Arc::new(MemoryStore::new());
    let provider = Arc::new(Counting::default());
    let engine = engine_with(&store, &provider, |b| b);
    let wf = Workflow::new("stepped", |ctx, _| async move {
        let x = ctx
            .step("s", StepOptions::default(), |inner| async move {
                inner
                    .parallel(
                        vec![branch(|c| async move { c.agent("a", AgentOptions::default()).await })],
                        ParallelOptions::default(),
                    )
                    .await
                    .map(|v| json!(v))
            })
            .await?;
        let y = ctx
            .parallel(
                vec![branch(|c| async move { c.agent("b", AgentOptions::default()).await })],
                ParallelOptions::default(),
            )
            .await?;
        let r = ctx.await_external("go", ExternalOptions::default()).await?;
        Ok(json!([x, y, r]))
    });
    let handle = engine.run(&wf, json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    assert_eq!(handle.result().await.unwrap().status, RunStatus::Suspended);
    let inner = entries(&store, &run).into_iter().find(|e| e.kind == journal::Kind::Agent).unwrap();
    assert!(inner.scope.as_str().starts_with("step:"), "{}", inner.scope);
    engine.resolve_external(&run, "go", json!(1)).unwrap();
    let options = ResumeOptions { workflow: Some(wf), ..Default::default() };
    let outcome = engine.resume(&run, options).unwrap().result().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Ok);
    assert_eq!(outcome.value, Some(json!([["re: a"], ["re: b"], 1])));
    assert_eq!(provider.calls.load(Ordering::SeqCst), 2, "a call was paid twice");
    assert_eq!((outcome.preview.misses, outcome.preview.orphaned), (0, 0), "{:?}", outcome.preview);
}

#[tokio::test]
async fn a_labelled_child_call_keeps_its_identity_when_a_call_is_inserted_before_it() {
    let store = Arc::new(MemoryStore::new());
    let provider = Arc::new(Counting::default());
    let child = Workflow::new("child", |ctx, args| async move {
        ctx.agent(&format!("child {args}"), AgentOptions::default()).await
    });
    let engine = engine_with(&store, &provider, |b| b.workflow(child));
    let labelled = || WorkflowOptions { label: Some("main".into()), ..Default::default() };
    let v1 =
        Workflow::new(
            "parent",
            move |ctx, _| async move { ctx.workflow("child", json!(1), labelled()).await },
        );
    let handle = engine.run(&v1, json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    assert_eq!(handle.result().await.unwrap().status, RunStatus::Ok);
    let v2 = Workflow::new("parent", move |ctx, _| async move {
        let inserted = ctx.workflow("child", json!(2), WorkflowOptions::default()).await?;
        let kept = ctx.workflow("child", json!(1), labelled()).await?;
        Ok(json!([inserted, kept]))
    });
    let options = ResumeOptions { workflow: Some(v2), ..Default::default() };
    let outcome = engine.resume(&run, options).unwrap().result().await.unwrap();
    assert_eq!(outcome.value, Some(json!(["re: child 2", "re: child 1"])));
    // Only the inserted call ran.
    assert_eq!(provider.calls.load(Ordering::SeqCst), 2);
    assert_eq!(outcome.preview.orphaned, 0, "{:?}", outcome.preview);
}

#[tokio::test]
async fn a_wait_times_out_in_a_live_run_while_a_sibling_works() {
    let store = Arc::new(MemoryStore::new());
    let provider = Arc::new(Counting { latency_ms: 300, ..Counting::default() });
    let engine = engine_with(&store, &provider, |b| b);
    let wf = Workflow::new("waits", |ctx, _| async move {
        let values = ctx
            .parallel(
                vec![
                    branch(|c| async move {
                        let opts = ExternalOptions {
                            timeout: Some(Duration::from_millis(30)),
                            ..Default::default()
                        };
                        c.await_external("k", opts).await
                    }),
                    branch(|c| async move { c.agent("slow", AgentOptions::default()).await }),
                ],
                ParallelOptions::default(),
            )
            .await?;
        Ok(json!(values))
    });
    let handle = engine.run(&wf, json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    let value = outcome.value.unwrap();
    assert_eq!(value[0]["timed_out"], true, "{value}");
    // The timeout is journaled: a replay-strict resume serves it.
    let options = ResumeOptions { workflow: Some(wf), dry_run: true, ..Default::default() };
    let replayed = engine.resume(&run, options).unwrap().result().await.unwrap();
    assert_eq!(replayed.status, RunStatus::Ok, "{:?}", replayed.error);
    assert_eq!(replayed.value.unwrap(), value);
}

#[tokio::test]
async fn a_fan_out_admits_its_first_branches_even_when_calls_return_at_once() {
    // Calls return instantly and release most of their reservation: without the round, a
    // later branch could be admitted into room an earlier sibling freed, depending on timing.
    for _ in 0..3 {
        let store = Arc::new(MemoryStore::new());
        let provider = Arc::new(Counting::default());
        let engine = engine_with(&store, &provider, |b| b);
        let wf = Workflow::new("fan", |ctx, _| async move {
            let items = (0..20).map(|i| json!(i)).collect();
            let values = ctx
                .parallel_map(
                    items,
                    |c, item| async move {
                        // Later branches ask later: earlier calls have returned by then.
                        let delay = item.as_u64().unwrap_or(0) * 3;
                        tokio::time::sleep(Duration::from_millis(delay)).await;
                        let opts = AgentOptions {
                            est_cost: Some(Money::from_usd(0.05).unwrap()),
                            on_error: Some(OnError::Null),
                            ..AgentOptions::default()
                        };
                        c.agent(&format!("shard {item}"), opts).await
                    },
                    ParallelOptions { on_error: Some(OnError::Null), ..Default::default() },
                )
                .await?;
            Ok(json!(values))
        });
        let options = RunOptions { budget_usd: Some(0.25), ..RunOptions::default() };
        let outcome = engine.run(&wf, json!({}), options).unwrap().result().await.unwrap();
        assert_eq!(outcome.status, RunStatus::Exhausted);
        let value = outcome.value.unwrap();
        let admitted: Vec<usize> = value
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.is_null())
            .map(|(i, _)| i)
            .collect();
        assert_eq!(admitted, [0, 1, 2, 3, 4], "{value}");
    }
}

/// A memory store that never hands a journal over whole: only pages and single entries.
#[derive(Debug)]
struct PagesOnly(Arc<MemoryStore>);

impl crate::store::JournalStore for PagesOnly {
    fn append_tallied(
        &self,
        run: &RunId,
        entries: &[crate::store::RawEntry],
        lease: Option<&crate::store::Lease>,
        tally: crate::store::Tally,
    ) -> crate::store::Result<()> {
        self.0.append_tallied(run, entries, lease, tally)
    }
    fn load(&self, _run: &RunId) -> crate::store::Result<Vec<crate::store::RawEntry>> {
        Err(crate::store::Error::Config("a whole journal was loaded".into()))
    }
    fn load_since(&self, _run: &RunId, _after: u64) -> crate::store::Result<Vec<crate::store::RawEntry>> {
        Err(crate::store::Error::Config("the rest of a journal was loaded".into()))
    }
    fn load_page(
        &self,
        run: &RunId,
        after: u64,
        limit: usize,
    ) -> crate::store::Result<Vec<crate::store::RawEntry>> {
        self.0.load_page(run, after, limit)
    }
    fn put_meta(
        &self,
        meta: &crate::store::RunMeta,
        lease: Option<&crate::store::Lease>,
    ) -> crate::store::Result<()> {
        self.0.put_meta(meta, lease)
    }
    fn get_meta(&self, run: &RunId) -> crate::store::Result<Option<crate::store::RunMeta>> {
        self.0.get_meta(run)
    }
    fn list_runs(
        &self,
        filter: &crate::store::RunFilter,
    ) -> crate::store::Result<Vec<crate::store::RunMeta>> {
        self.0.list_runs(filter)
    }
    fn delete(&self, run: &RunId, lease: Option<&crate::store::Lease>) -> crate::store::Result<()> {
        crate::store::JournalStore::delete(&*self.0, run, lease)
    }
    fn leases(&self) -> Option<&dyn crate::store::LeasableStore> {
        self.0.leases()
    }
}

#[tokio::test]
async fn a_resume_reads_its_journal_page_by_page_and_serves_values_from_the_store() {
    // Issue #31: a run keeps an index of its journal, not its entries; resuming reads the
    // journal in pages, and each replayed call's value is read back by seq when it is served.
    let memory = Arc::new(MemoryStore::new());
    let provider = Arc::new(Counting::default());
    let engine = engine_with(&memory, &provider, |b| b);
    let inner = {
        let mut inner = (*engine.inner).clone();
        inner.journal = Arc::new(PagesOnly(memory.clone()));
        inner
    };
    let long = || {
        Workflow::new("long", |ctx, _| async move {
            let mut answers = Vec::new();
            for i in 0..300 {
                answers.push(ctx.agent(&format!("call {i}"), AgentOptions::default()).await?);
            }
            let fan = ctx
                .parallel(
                    (0..3)
                        .map(|b| {
                            branch(move |c| async move {
                                c.agent(&format!("branch {b}"), AgentOptions::default()).await
                            })
                        })
                        .collect(),
                    ParallelOptions::default(),
                )
                .await?;
            let stepped = ctx
                .step("s", StepOptions::default(), |c| async move { c.now().await.map(|n| json!(n > 0)) })
                .await?;
            Ok(json!([answers, fan, stepped]))
        })
    };
    let mut inner = inner;
    inner.workflows.insert("long".into(), long());
    let engine = Engine { inner: Arc::new(inner) };
    let first = engine.run(&long(), json!({}), RunOptions::default()).unwrap();
    let run = first.run_id().clone();
    let first = first.result().await.unwrap();
    assert_eq!(first.status, RunStatus::Ok, "{:?}", first.error);
    let paid = provider.calls.load(Ordering::SeqCst);
    assert_eq!(paid, 303);
    for options in
        [ResumeOptions::default(), ResumeOptions { dry_run: true, reproduce: true, ..Default::default() }]
    {
        let resumed = engine.resume(&run, options).unwrap().result().await.unwrap();
        assert_eq!(resumed.status, RunStatus::Ok, "{:?}", resumed.error);
        assert_eq!(provider.calls.load(Ordering::SeqCst), paid, "a resume paid again");
        assert_eq!(resumed.value, first.value, "a replayed value differs");
        assert_eq!((resumed.preview.hits, resumed.preview.misses, resumed.preview.orphaned), (304, 0, 0));
        assert_eq!(
            serde_json::to_string(&resumed.cost).unwrap(),
            serde_json::to_string(&first.cost).unwrap()
        );
    }
}

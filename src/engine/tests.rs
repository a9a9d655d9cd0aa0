//! Engine tests: runs, resume, budgets, fan-out, suspension, events, with an in-memory store
//! and a counting provider whose call log outlives each run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use futures::stream::BoxStream;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::model::{ModelRef, Price, PriceTable};
use crate::provider::{Capabilities, ChatEvent, ChatRequest, FinishReason, Part, Provider};
use crate::store::{JournalStore, MemoryStore, RunStatus};
use crate::*;

/// A provider that answers `re: <prompt>`, counts calls, can fail prompts containing
/// "FAIL", streams `deltas` chunks, and tracks peak concurrency.
#[derive(Debug, Default)]
pub(super) struct Counting {
    pub(super) calls: AtomicU32,
    pub(super) in_flight: AtomicUsize,
    pub(super) peak: AtomicUsize,
    pub(super) latency_ms: u64,
    pub(super) deltas: usize,
}

impl Provider for Arc<Counting> {
    fn name(&self) -> &str {
        "test"
    }
    fn capabilities(&self, _model: &str) -> Capabilities {
        Capabilities { native_schema: false, tools: false, reasoning: false }
    }
    fn stream(&self, request: ChatRequest, _cancel: CancellationToken) -> BoxStream<'static, ChatEvent> {
        let me = self.clone();
        let prompt = request
            .messages
            .iter()
            .flat_map(|m| m.parts.iter())
            .find_map(|p| if let Part::Text(t) = p { Some(t.clone()) } else { None })
            .unwrap_or_default();
        me.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async_stream(me, prompt))
    }
}

fn async_stream(me: Arc<Counting>, prompt: String) -> impl futures::Stream<Item = ChatEvent> {
    futures::stream::unfold(0usize, move |step| {
        let me = me.clone();
        let prompt = prompt.clone();
        async move {
            if step == 0 {
                let now = me.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                me.peak.fetch_max(now, Ordering::SeqCst);
                if me.latency_ms > 0 && !prompt.contains("FAIL") {
                    tokio::time::sleep(Duration::from_millis(me.latency_ms)).await;
                }
            }
            let chunks = me.deltas.max(1);
            if step < chunks {
                if prompt.contains("FAIL") {
                    me.in_flight.fetch_sub(1, Ordering::SeqCst);
                    return Some((
                        ChatEvent::Error(Error::new(ErrorCode::ContentFilter, "scripted")),
                        usize::MAX,
                    ));
                }
                // Later chunks are 40 characters: 10 estimated tokens, as the usage reports.
                let text = if step == 0 {
                    format!("re: {prompt}")
                } else {
                    " and a little more text to stream along".to_owned()
                };
                return Some((ChatEvent::TextDelta(text), step + 1));
            }
            if step == chunks {
                me.in_flight.fetch_sub(1, Ordering::SeqCst);
                let usage =
                    Usage { input_tokens: 100, output_tokens: 10 * chunks as u64, ..Usage::default() };
                return Some((ChatEvent::Finish { reason: FinishReason::Stop, usage }, step + 1));
            }
            None
        }
    })
}

pub(super) fn engine_with(
    store: &Arc<MemoryStore>,
    provider: &Arc<Counting>,
    tweak: impl FnOnce(EngineBuilder) -> EngineBuilder,
) -> Engine {
    let mut prices = PriceTable::shipped();
    // $1 per million tokens in and out: 100 in + 10 out = 110,000 nano-USD.
    prices.set("test:m", Price::flat(Money::from_usd(1.0).unwrap(), Money::from_usd(1.0).unwrap()));
    let builder = Engine::builder(store.clone())
        .provider(Arc::new(provider.clone()))
        .default_model(ModelRef::parse("test:m").unwrap())
        .prices(prices)
        .seed(7)
        .retries(0, Duration::from_millis(1));
    tweak(builder).build().unwrap()
}

pub(super) fn setup() -> (Arc<MemoryStore>, Arc<Counting>, Engine) {
    let store = Arc::new(MemoryStore::new());
    let provider = Arc::new(Counting::default());
    let engine = engine_with(&store, &provider, |b| b);
    (store, provider, engine)
}

pub(super) fn three_calls() -> Workflow {
    Workflow::new("three", |ctx, _args| async move {
        let a = ctx.agent("one", AgentOptions::default()).await?;
        let b = ctx.agent("two", AgentOptions::default()).await?;
        let c = ctx.agent("three", AgentOptions::default()).await?;
        Ok(json!([a, b, c]))
    })
}

pub(super) fn entries(store: &MemoryStore, run: &RunId) -> Vec<crate::journal::Entry> {
    crate::journal::decode_all(&store.load(run).unwrap()).unwrap()
}

#[tokio::test]
async fn a_closure_workflow_runs_and_journals_two_phase_entries() {
    let (store, provider, engine) = setup();
    let handle = engine.run(&three_calls(), json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Ok);
    assert_eq!(outcome.value, Some(json!(["re: one", "re: two", "re: three"])));
    assert_eq!(provider.calls.load(Ordering::SeqCst), 3);
    let journal = entries(&store, &run);
    let statuses: Vec<_> = journal.iter().map(|e| (e.kind.as_str(), e.status.as_str())).collect();
    assert_eq!(
        statuses,
        [
            ("agent", "running"),
            ("agent", "ok"),
            ("agent", "running"),
            ("agent", "ok"),
            ("agent", "running"),
            ("agent", "ok"),
            ("decision", "ok")
        ]
    );
    assert_eq!(journal[1].target, Some(journal[0].seq));
    assert_eq!(outcome.usage.input_tokens, 300);
    assert_eq!(outcome.cost.total.cost, Money::from_nano_usd(3 * 110_000));
    assert_eq!(store.get_meta(&run).unwrap().unwrap().status, RunStatus::Ok);
}

#[tokio::test]
async fn never_pay_twice_resume_replays_every_completed_call() {
    let (_store, provider, engine) = setup();
    let engine = Engine { inner: Arc::new(rebuild_with_workflow(&engine, three_calls())) };
    let first = engine.run(&three_calls(), json!({"x": 1}), RunOptions::default()).unwrap();
    let run = first.run_id().clone();
    let first = first.result().await.unwrap();
    let resumed = engine.resume(&run, ResumeOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(provider.calls.load(Ordering::SeqCst), 3, "a resume paid again");
    assert_eq!(resumed.value, first.value);
    assert_eq!(resumed.preview.hits, 3);
    assert_eq!(resumed.preview.misses, 0);
    // The cost report is a pure fold over the journal: a replay reproduces it byte for byte.
    assert_eq!(serde_json::to_string(&resumed.cost).unwrap(), serde_json::to_string(&first.cost).unwrap());
}

pub(super) fn rebuild_with_workflow(engine: &Engine, workflow: Workflow) -> super::EngineInner {
    let mut inner = (*engine.inner).clone();
    inner.workflows.insert(workflow.name.clone(), workflow);
    inner
}

#[tokio::test]
async fn an_edited_workflow_pays_only_for_the_inserted_call() {
    let (_store, provider, engine) = setup();
    let handle = engine.run(&three_calls(), json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    handle.result().await.unwrap();
    let edited = Workflow::new("three", |ctx, _| async move {
        let a = ctx.agent("one", AgentOptions::default()).await?;
        let new = ctx.agent("inserted", AgentOptions::default()).await?;
        let b = ctx.agent("two", AgentOptions::default()).await?;
        let c = ctx.agent("three", AgentOptions::default()).await?;
        Ok(json!([a, new, b, c]))
    });
    let options = ResumeOptions { workflow: Some(edited), ..ResumeOptions::default() };
    let outcome = engine.resume(&run, options).unwrap().result().await.unwrap();
    assert_eq!(provider.calls.load(Ordering::SeqCst), 4);
    assert_eq!(outcome.preview.hits, 3);
    assert_eq!(outcome.preview.misses, 1);
}

#[tokio::test]
async fn invalid_run_options_write_nothing() {
    let (store, _provider, engine) = setup();
    for budget in [f64::NAN, f64::INFINITY, -1.0] {
        let run = RunId::parse("bad-budget").unwrap();
        let options =
            RunOptions { budget_usd: Some(budget), run_id: Some(run.clone()), ..RunOptions::default() };
        let err = engine.run(&three_calls(), json!({}), options).unwrap_err();
        assert_eq!(err.code, ErrorCode::Config);
        assert!(store.get_meta(&run).unwrap().is_none());
        assert!(store.load(&run).unwrap().is_empty());
    }
    let options = RunOptions { deadline_ms: Some(1), ..RunOptions::default() };
    assert_eq!(engine.run(&three_calls(), json!({}), options).unwrap_err().code, ErrorCode::Config);
    assert!(store.list_runs(&Default::default()).unwrap().is_empty());
}

#[tokio::test]
async fn admission_fills_the_ceiling_exactly_then_exhausts_with_itemized_drops() {
    let (store, provider, engine) = setup();
    let wf = Workflow::new("fill", |ctx, _| async move {
        let mut out = Vec::new();
        for i in 0..5 {
            let opts = AgentOptions {
                est_cost: Some(Money::from_usd(0.25).unwrap()),
                on_error: Some(OnError::Null),
                label: Some(format!("call {i}")),
                ..AgentOptions::default()
            };
            out.push(ctx.agent(&format!("p{i}"), opts).await?);
        }
        Ok(json!(out))
    });
    // Each call really costs 110,000 nano-USD; a ceiling of 4 × 0.25 admits four reserves
    // at once only if spend is settled: it is, so all five fit... make the ceiling tight.
    let options = RunOptions { budget_usd: Some(0.25 + 0.00011 * 3.0), ..RunOptions::default() };
    let handle = engine.run(&wf, json!({}), options).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Exhausted);
    // Calls 0..=3 each reserve 0.25 against a remainder that exactly covers it, then spend
    // 0.00011; call 4 finds 0.25 + 0.00033 − 4 × 0.00011 < 0.25 free and is refused.
    assert_eq!(provider.calls.load(Ordering::SeqCst), 4);
    assert_eq!(outcome.value, Some(json!(["re: p0", "re: p1", "re: p2", "re: p3", null])));
    assert_eq!(outcome.dropped.len(), 1);
    assert_eq!(outcome.dropped[0].error.code, ErrorCode::BudgetExhausted);
    assert_eq!(outcome.dropped[0].label.as_deref(), Some("call 4"));
    // The denial dispatched nothing; it journaled its decision (so a replay serves the
    // refusal): 4 pairs, the refusal and the settlement.
    let journaled = entries(&store, &run);
    assert_eq!(journaled.len(), 10);
    assert_eq!(journaled.iter().filter(|e| e.kind == crate::journal::Kind::Decision).count(), 2);
    let meta = store.get_meta(&run).unwrap().unwrap();
    assert_eq!(meta.budget_ceiling, Some(Money::from_nano_usd(250_330_000)));
    assert_eq!(meta.status, RunStatus::Exhausted);
}

#[tokio::test]
async fn strict_parallel_failure_cancels_siblings_which_rerun_on_resume() {
    let store = Arc::new(MemoryStore::new());
    let provider = Arc::new(Counting { latency_ms: 30, ..Counting::default() });
    let engine = engine_with(&store, &provider, |b| b);
    let wf = Workflow::new("par", |ctx, _| async move {
        let values = ctx
            .parallel(
                vec![
                    branch(|ctx| async move { ctx.agent("slow sibling", AgentOptions::default()).await }),
                    branch(|ctx| async move { ctx.agent("FAIL here", AgentOptions::default()).await }),
                ],
                ParallelOptions::default(),
            )
            .await?;
        Ok(json!(values))
    });
    let handle = engine.run(&wf, json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Error);
    assert_eq!(outcome.error.unwrap().code, ErrorCode::ContentFilter);
    let journal = entries(&store, &run);
    let sibling: Vec<_> =
        journal.iter().filter(|e| e.scope.as_str() == "par:0:0").map(|e| e.status).collect();
    assert_eq!(sibling, [crate::journal::Status::Running, crate::journal::Status::Cancelled]);
    // On resume the cancelled sibling reruns (its scope keeps its identity).
    let resumed = engine.resume(&run, ResumeOptions { workflow: Some(wf), ..Default::default() }).unwrap();
    let outcome = resumed.result().await.unwrap();
    assert_eq!(outcome.preview.reruns, 2);
}

/// A `parallel_map` of agent calls over `["a", "FAIL", "c"]` (the middle one fails).
fn agents_over_a_fail_c(name: &str, opts: ParallelOptions) -> Workflow {
    Workflow::new(name, move |ctx, _| {
        let opts = opts.clone();
        async move {
            let items = vec![json!("a"), json!("FAIL"), json!("c")];
            let out = ctx
                .parallel_map(
                    items,
                    |ctx, item| async move {
                        ctx.agent(item.as_str().unwrap_or_default(), AgentOptions::default()).await
                    },
                    opts,
                )
                .await?;
            Ok(json!(out))
        }
    })
}

#[tokio::test]
async fn settle_mode_returns_every_branch_outcome_in_source_order() {
    let (_store, _provider, engine) = setup();
    let wf = agents_over_a_fail_c("settle", ParallelOptions { settle: true, ..Default::default() });
    let outcome = engine.run(&wf, json!({}), RunOptions::default()).unwrap().result().await.unwrap();
    let value = outcome.value.unwrap();
    assert_eq!(value[0], json!({"status": "ok", "value": "re: a"}));
    assert_eq!(value[1]["status"], "error");
    assert_eq!(value[1]["error"]["code"], "content_filter");
    assert_eq!(value[2], json!({"status": "ok", "value": "re: c"}));
}

#[tokio::test]
async fn pipeline_items_flow_through_stages_with_per_item_scopes() {
    let (store, _provider, engine) = setup();
    let wf = Workflow::new("pipe", |ctx, _| async move {
        let stages = vec![
            stage(|ctx, item: Value| async move {
                ctx.agent(&format!("draft {}", item.as_str().unwrap_or_default()), AgentOptions::default())
                    .await
            }),
            stage(|ctx, item: Value| async move {
                let text = item.as_str().unwrap_or_default().to_owned();
                if text.contains('2') {
                    return Err(Error::validation("item two is bad"));
                }
                ctx.step("polish", StepOptions::default(), |_| async move { Ok(json!(text.to_uppercase())) })
                    .await
            }),
        ];
        let items = vec![json!("1"), json!("2"), json!("3")];
        let dropped = ctx
            .pipeline(
                items.clone(),
                stages.clone(),
                PipelineOptions {
                    on_item_error: OnItemError::Drop,
                    concurrency: Some(2),
                    ..Default::default()
                },
            )
            .await?;
        let collected = ctx
            .pipeline(
                items,
                stages,
                PipelineOptions {
                    on_item_error: OnItemError::Collect,
                    concurrency: None,
                    ..Default::default()
                },
            )
            .await?;
        Ok(json!({ "dropped": dropped, "collected": collected }))
    });
    let handle = engine.run(&wf, json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    let value = outcome.value.unwrap();
    assert_eq!(value["dropped"], json!(["RE: DRAFT 1", "RE: DRAFT 3"]));
    assert_eq!(value["collected"][1]["error"]["code"], "validation");
    assert_eq!(outcome.dropped.len(), 1);
    let scopes: std::collections::BTreeSet<_> =
        entries(&store, &run).iter().map(|e| e.scope.to_string()).collect();
    assert!(scopes.contains("pipe:0:2") && scopes.contains("pipe:1:0"), "{scopes:?}");
    let bad = Workflow::new("bad", |ctx, _| async move {
        Ok(json!(ctx.pipeline(vec![json!(1)], vec![], Default::default()).await?))
    });
    let outcome = engine.run(&bad, json!({}), RunOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(outcome.error.unwrap().code, ErrorCode::Config);
}

#[tokio::test]
async fn await_external_suspends_and_resume_delivers_the_resolution() {
    let (store, provider, engine) = setup();
    let wf = Workflow::new("deploy", |ctx, _| async move {
        let plan = ctx.agent("plan the deploy", AgentOptions::default()).await?;
        let approval = ctx
            .await_external(
                "approve",
                ExternalOptions { prompt: Some("ship it?".into()), ..Default::default() },
            )
            .await?;
        Ok(json!({ "plan": plan, "approval": approval }))
    });
    let engine = Engine { inner: Arc::new(rebuild_with_workflow(&engine, wf.clone())) };
    let handle = engine.run(&wf, json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Suspended);
    assert_eq!(outcome.pending.len(), 1);
    assert_eq!(outcome.pending[0].key, "approve");
    assert_eq!(outcome.pending[0].prompt.as_deref(), Some("ship it?"));
    assert_eq!(store.get_meta(&run).unwrap().unwrap().status, RunStatus::Suspended);

    assert!(engine.resolve_external(&run, "approve", json!({"ok": true})).unwrap());
    assert!(
        !engine.resolve_external(&run, "approve", json!({"ok": false})).unwrap(),
        "second attempt must not apply"
    );
    assert_eq!(engine.resolve_external(&run, "nope", json!(1)).unwrap_err().code, ErrorCode::Validation);

    let outcome = engine.resume(&run, ResumeOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Ok);
    assert_eq!(outcome.value, Some(json!({"plan": "re: plan the deploy", "approval": {"ok": true}})));
    assert_eq!(provider.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_live_resolution_wakes_a_waiting_branch() {
    let (_store, _provider, engine) = setup();
    let wf = Workflow::new("live", |ctx, _| async move {
        let out = ctx
            .parallel(
                vec![
                    branch(|ctx| async move { ctx.await_external("k", Default::default()).await }),
                    branch(|ctx| async move {
                        // Keep one branch live while the other waits.
                        ctx.step("wait a bit", StepOptions::default(), |_| async {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            Ok(json!("done"))
                        })
                        .await
                    }),
                ],
                ParallelOptions::default(),
            )
            .await?;
        Ok(json!(out))
    });
    let handle = engine.run(&wf, json!({}), RunOptions::default()).unwrap();
    let mut events = handle.events();
    while let Some(event) = events.next().await {
        if matches!(event.kind, EventKind::ExternalWaiting { .. }) {
            break;
        }
    }
    assert!(handle.resolve_external("k", json!(42)).unwrap());
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.value, Some(json!([42, "done"])));
}

#[tokio::test]
async fn journaled_now_random_and_uuid_replay_identically() {
    let store = Arc::new(MemoryStore::new());
    let provider = Arc::new(Counting::default());
    let clock = ManualClock::new(1_000);
    let engine = engine_with(&store, &provider, |b| b.clock(Arc::new(clock.clone())));
    let wf = Workflow::new("shims", |ctx, _| async move {
        Ok(json!([
            ctx.now().await?,
            ctx.random(None).await?,
            ctx.random(Some("k")).await?,
            ctx.uuid().await?
        ]))
    });
    let engine = Engine { inner: Arc::new(rebuild_with_workflow(&engine, wf.clone())) };
    let handle = engine.run(&wf, json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let first = handle.result().await.unwrap().value.unwrap();
    assert_eq!(first[0], json!(1_000));
    let r = first[1].as_f64().unwrap();
    assert!((0.0..1.0).contains(&r));
    let uuid = first[3].as_str().unwrap();
    assert_eq!(uuid.len(), 36);
    assert_eq!(&uuid[14..15], "4");
    clock.advance(5_000);
    let again = engine.resume(&run, ResumeOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(again.value.unwrap(), first);
}

#[tokio::test]
async fn two_engines_share_nothing() {
    let (store_a, provider_a, engine_a) = setup();
    let (store_b, provider_b, engine_b) = setup();
    let run = RunId::parse("same-id").unwrap();
    let options = || RunOptions { run_id: Some(run.clone()), ..RunOptions::default() };
    engine_a.run(&three_calls(), json!({}), options()).unwrap().result().await.unwrap();
    engine_b.run(&three_calls(), json!({}), options()).unwrap().result().await.unwrap();
    assert_eq!(provider_a.calls.load(Ordering::SeqCst), 3);
    assert_eq!(provider_b.calls.load(Ordering::SeqCst), 3);
    assert_eq!(store_a.load(&run).unwrap().len(), 7);
    assert_eq!(store_b.load(&run).unwrap().len(), 7);
}

#[tokio::test]
async fn the_stream_is_cut_when_the_ceiling_is_crossed() {
    let store = Arc::new(MemoryStore::new());
    let provider = Arc::new(Counting { deltas: 200, ..Counting::default() });
    let engine = engine_with(&store, &provider, |b| b);
    let wf = Workflow::new("long", |ctx, _| async move {
        ctx.agent(
            "write a lot",
            // The worst turn (the prompt plus 400 output tokens) fits the ceiling; this
            // provider ignores the cap and is cut instead.
            AgentOptions {
                est_cost: Some(Money::from_usd(0.0001).unwrap()),
                max_output_tokens: Some(400),
                ..Default::default()
            },
        )
        .await
    });
    // 0.0005 USD at $1/Mtok is 500 tokens: the ~20 prompt-estimate tokens plus ~480 of
    // output, far below the 200 × 10 tokens the stream would produce.
    let options = RunOptions { budget_usd: Some(0.0005), ..RunOptions::default() };
    let handle = engine.run(&wf, json!({}), options).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Exhausted);
    let journal = entries(&store, &run);
    let terminal = &journal[1];
    assert_eq!(terminal.status, crate::journal::Status::Limit);
    assert_eq!(terminal.error.as_ref().unwrap().code, ErrorCode::BudgetExhausted);
    let usage = terminal.usage.unwrap();
    assert!(usage.approximate);
    // Overshoot is bounded by the event that crossed: one delta.
    assert!(terminal.cost.unwrap() <= Money::from_usd(0.0005).unwrap() + Money::from_nano_usd(10_000));
    assert!(outcome.cost.approximate);
}

#[tokio::test]
async fn the_spawn_cap_holds_across_resume() {
    let store = Arc::new(MemoryStore::new());
    let provider = Arc::new(Counting::default());
    let engine = engine_with(&store, &provider, |b| b.max_spawns(2));
    let engine = Engine { inner: Arc::new(rebuild_with_workflow(&engine, three_calls())) };
    let handle = engine.run(&three_calls(), json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Exhausted);
    assert_eq!(provider.calls.load(Ordering::SeqCst), 2);
    // The two spawns replay and do not count again; the third is still refused.
    let again = engine.resume(&run, ResumeOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(again.status, RunStatus::Exhausted);
    assert_eq!(again.preview.hits, 2);
    assert_eq!(provider.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_scheduler_caps_concurrent_model_calls() {
    let store = Arc::new(MemoryStore::new());
    let provider = Arc::new(Counting { latency_ms: 20, ..Counting::default() });
    let engine = engine_with(&store, &provider, |b| b.max_concurrency(3));
    let wf = Workflow::new("fan", |ctx, _| async move {
        let items = (0..12).map(|i| json!(i)).collect();
        let out = ctx
            .parallel_map(
                items,
                |ctx, i| async move { ctx.agent(&format!("item {i}"), AgentOptions::default()).await },
                Default::default(),
            )
            .await?;
        Ok(json!(out.len()))
    });
    let outcome = engine.run(&wf, json!({}), RunOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(outcome.value, Some(json!(12)));
    assert_eq!(provider.peak.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_dry_run_fails_on_the_first_live_call_and_writes_nothing() {
    let (store, provider, engine) = setup();
    let handle = engine.run(&three_calls(), json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    handle.result().await.unwrap();
    let before = store.load(&run).unwrap();
    let meta_before = store.get_meta(&run).unwrap();
    // Replaying the same workflow strictly is clean.
    let options = ResumeOptions { dry_run: true, workflow: Some(three_calls()), ..Default::default() };
    let clean = engine.resume(&run, options).unwrap().result().await.unwrap();
    assert_eq!(clean.status, RunStatus::Ok);
    // An edited one hits a miss.
    let edited =
        Workflow::new("three", |ctx, _| async move { ctx.agent("changed", AgentOptions::default()).await });
    let options = ResumeOptions { dry_run: true, workflow: Some(edited), ..Default::default() };
    let dirty = engine.resume(&run, options).unwrap().result().await.unwrap();
    assert_eq!(dirty.status, RunStatus::Error);
    assert_eq!(dirty.error.unwrap().code, ErrorCode::JournalMiss);
    assert_eq!(provider.calls.load(Ordering::SeqCst), 3);
    assert_eq!(store.load(&run).unwrap(), before);
    assert_eq!(store.get_meta(&run).unwrap(), meta_before);
}

#[tokio::test]
async fn child_workflows_get_a_sub_account_and_their_own_scope() {
    let store = Arc::new(MemoryStore::new());
    let provider = Arc::new(Counting::default());
    let child = Workflow::new("child", |ctx, args| async move {
        let remaining = ctx.budget_remaining().await?.map(Money::nano_usd);
        let answer = ctx.agent(&format!("child {args}"), AgentOptions::default()).await?;
        Ok(json!({ "answer": answer, "remaining": remaining }))
    });
    let engine = engine_with(&store, &provider, |b| b.workflow(child));
    let wf = Workflow::new("parent", |ctx, _| async move {
        let a = ctx.workflow("child", json!(1), WorkflowOptions::default()).await?;
        let b = ctx.workflow("child", json!(2), WorkflowOptions::default()).await?;
        Ok(json!([a, b, ctx.budget_spent().await?.nano_usd()]))
    });
    let options = RunOptions { budget_usd: Some(10.0), ..RunOptions::default() };
    let handle = engine.run(&wf, json!({}), options).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    let value = outcome.value.unwrap();
    assert_eq!(value[0]["answer"], "re: child 1");
    assert_eq!(value[0]["remaining"], json!(3_000_000_000i64));
    // The children's spend rolled up to the root.
    assert_eq!(value[2], json!(2 * 110_000));
    let scopes: Vec<_> = entries(&store, &run).iter().map(|e| e.scope.to_string()).collect();
    assert!(scopes.contains(&"wf:child:0".to_owned()) && scopes.contains(&"wf:child:1".to_owned()));
    assert_eq!(
        engine
            .run(
                &Workflow::new("x", |ctx, _| async move {
                    ctx.workflow("nope", json!(1), Default::default()).await
                }),
                json!({}),
                RunOptions::default()
            )
            .unwrap()
            .result()
            .await
            .unwrap()
            .error
            .unwrap()
            .code,
        ErrorCode::Config
    );
}

#[tokio::test]
async fn events_are_gapless_and_replays_are_marked() {
    let (_store, _provider, engine) = setup();
    let engine = Engine { inner: Arc::new(rebuild_with_workflow(&engine, three_calls())) };
    let handle = engine.run(&three_calls(), json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let mut events = handle.events();
    handle.result().await.unwrap();
    let mut seqs = Vec::new();
    let mut types = Vec::new();
    let mut spans = std::collections::HashSet::new();
    while let Some(event) = events.next().await {
        seqs.push(event.seq);
        spans.insert(event.span_id);
        types.push(serde_json::to_value(&*event).unwrap()["type"].as_str().unwrap().to_owned());
    }
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert_eq!(types.first().map(String::as_str), Some("run:start"));
    assert_eq!(types.last().map(String::as_str), Some("run:end"));
    assert_eq!(types.iter().filter(|t| *t == "agent:start").count(), 3);
    let last_seq = *seqs.last().unwrap();
    let resumed = engine.resume(&run, ResumeOptions::default()).unwrap();
    let mut events = resumed.events();
    resumed.result().await.unwrap();
    let mut replayed = 0;
    let mut resumed_seqs = Vec::new();
    while let Some(event) = events.next().await {
        resumed_seqs.push(event.seq);
        // Span ids stay unique across segments: the resumed segment's start above the first's.
        assert!(!spans.contains(&event.span_id), "span {} reused across segments", event.span_id);
        if matches!(event.kind, EventKind::AgentEnd { .. }) {
            assert!(event.replayed);
            replayed += 1;
        }
    }
    assert_eq!(replayed, 3);
    // Seqs keep increasing across segments, from the resumed segment's own base.
    assert!(resumed_seqs[0] > last_seq, "{} after {last_seq}", resumed_seqs[0]);
    assert!(resumed_seqs.windows(2).all(|pair| pair[0] < pair[1]));
}

#[tokio::test]
async fn cancel_severs_calls_and_settles_cancelled() {
    let store = Arc::new(MemoryStore::new());
    let provider = Arc::new(Counting { latency_ms: 5_000, ..Counting::default() });
    let engine = engine_with(&store, &provider, |b| b);
    let handle = engine.run(&three_calls(), json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let mut events = handle.events();
    while let Some(event) = events.next().await {
        if matches!(event.kind, EventKind::AgentStart { .. }) {
            break;
        }
    }
    handle.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(2), handle.result()).await.unwrap().unwrap();
    assert_eq!(outcome.status, RunStatus::Cancelled);
    let journal = entries(&store, &run);
    assert_eq!(journal[1].status, crate::journal::Status::Cancelled);
}

#[tokio::test]
async fn lenient_policy_turns_failures_into_nulls_and_drops() {
    let (_store, _provider, engine) = setup();
    let wf = Workflow::new("lenient", |ctx, _| async move {
        let a = ctx.agent("FAIL", AgentOptions::default()).await?;
        let b = ctx.call("missing", json!({}), CallOptions::default()).await?;
        Ok(json!([a, b]))
    });
    let options = RunOptions { policy: ErrorPolicy::Lenient, ..RunOptions::default() };
    let outcome = engine.run(&wf, json!({}), options).unwrap().result().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Ok);
    assert_eq!(outcome.value, Some(json!([null, null])));
    let codes: Vec<_> = outcome.dropped.iter().map(|d| d.error.code).collect();
    assert_eq!(codes, [ErrorCode::ContentFilter, ErrorCode::Config]);
}

#[tokio::test]
async fn host_calls_and_steps_are_journaled_and_replayed() {
    let store = Arc::new(MemoryStore::new());
    let provider = Arc::new(Counting::default());
    let counter = Arc::new(AtomicU32::new(0));
    let seen = counter.clone();
    let engine = engine_with(&store, &provider, move |b| {
        b.host_function("add", move |args: Value| {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                Ok(json!(args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)))
            }
        })
    });
    let wf = Workflow::new("calls", |ctx, _| async move {
        let sum = ctx.call("add", json!({"a": 2, "b": 3}), CallOptions::default()).await?;
        let step = ctx
            .step("fetch", StepOptions { deps: vec![sum.clone()], ..Default::default() }, |_| async {
                Ok(json!("fetched"))
            })
            .await?;
        Ok(json!([sum, step]))
    });
    let engine = Engine { inner: Arc::new(rebuild_with_workflow(&engine, wf.clone())) };
    let handle = engine.run(&wf, json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    assert_eq!(handle.result().await.unwrap().value, Some(json!([5, "fetched"])));
    let again = engine.resume(&run, ResumeOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(again.value, Some(json!([5, "fetched"])));
    assert_eq!(counter.load(Ordering::SeqCst), 1);
    assert_eq!(again.preview.hits, 2);
}

#[tokio::test]
async fn bounded_fanout_suspends_only_when_every_started_branch_waits() {
    let (_store, provider, engine) = setup();
    // Concurrency 2 over three branches: the first two wait on external input while the
    // third has not started. The run must not hang; it suspends listing both waits.
    let wf = Workflow::new("bounded", |ctx, _| async move {
        let out = ctx
            .parallel(
                vec![
                    branch(|ctx| async move { ctx.await_external("a", Default::default()).await }),
                    branch(|ctx| async move { ctx.await_external("b", Default::default()).await }),
                    branch(|ctx| async move { ctx.agent("third", AgentOptions::default()).await }),
                ],
                ParallelOptions { concurrency: Some(2), ..Default::default() },
            )
            .await?;
        Ok(json!(out))
    });
    let outcome = tokio::time::timeout(Duration::from_secs(5), async {
        engine.run(&wf, json!({}), RunOptions::default()).unwrap().result().await.unwrap()
    })
    .await
    .expect("a run whose live branches all wait must settle, not hang");
    assert_eq!(outcome.status, RunStatus::Suspended);
    let keys: Vec<_> = outcome.pending.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["a", "b"]);
    assert_eq!(provider.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn parallel_on_error_null_keeps_siblings_and_itemizes_the_loss() {
    let (_store, _provider, engine) = setup();
    let wf = agents_over_a_fail_c(
        "nulls",
        ParallelOptions { on_error: Some(OnError::Null), ..Default::default() },
    );
    let outcome = engine.run(&wf, json!({}), RunOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(outcome.value, Some(json!(["re: a", null, "re: c"])));
    assert_eq!(outcome.dropped.len(), 1);
    assert_eq!(outcome.dropped[0].scope, "par:0:1");
}

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
    let builder = Engine::builder(store.clone(), store.clone())
        .provider(Arc::new(provider.clone()))
        .default_model(ModelRef::parse("test:m").unwrap())
        .prices(prices)
        .seed(7)
        .retries(0, Duration::from_millis(1));
    tweak(builder).build().unwrap()
}

fn setup() -> (Arc<MemoryStore>, Arc<Counting>, Engine) {
    let store = Arc::new(MemoryStore::new());
    let provider = Arc::new(Counting::default());
    let engine = engine_with(&store, &provider, |b| b);
    (store, provider, engine)
}

fn three_calls() -> Workflow {
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

fn rebuild_with_workflow(engine: &Engine, workflow: Workflow) -> super::EngineInner {
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

// ---- tools ------------------------------------------------------------------------------------

#[derive(Debug)]
struct AddTool {
    calls: Arc<AtomicU32>,
    version: &'static str,
    parameters: Value,
}

impl AddTool {
    fn new(calls: Arc<AtomicU32>, version: &'static str) -> AddTool {
        AddTool {
            calls,
            version,
            parameters: json!({
                "type": "object",
                "required": ["a", "b"],
                "properties": { "a": { "type": "integer" }, "b": { "type": "integer" } }
            }),
        }
    }
}

impl crate::agent::Tool for AddTool {
    fn name(&self) -> &str {
        "add"
    }
    fn description(&self) -> &str {
        "adds two integers"
    }
    fn parameters(&self) -> &Value {
        &self.parameters
    }
    fn version(&self) -> &str {
        self.version
    }
    fn call(&self, args: Value) -> futures::future::BoxFuture<'static, Result<String, Error>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let sum = args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0);
        Box::pin(async move { Ok(sum.to_string()) })
    }
}

fn tool_engine(
    store: &Arc<MemoryStore>,
    fake: &crate::testing::FakeProvider,
    calls: &Arc<AtomicU32>,
    permissions: crate::agent::Permissions,
    version: &'static str,
) -> Engine {
    let tool: Arc<dyn crate::agent::Tool> = Arc::new(AddTool::new(calls.clone(), version));
    Engine::builder(store.clone(), store.clone())
        .provider(Arc::new(fake.clone()))
        .default_model(ModelRef::parse("fake:m").unwrap())
        .toolset(crate::agent::Toolset::new("math", vec![tool]))
        .permissions(permissions)
        .retries(0, Duration::from_millis(1))
        .build()
        .unwrap()
}

fn adder() -> Workflow {
    Workflow::new("adder", |ctx, _| async move {
        ctx.agent("what is 2 + 3?", AgentOptions { tools: vec!["math".into()], ..Default::default() }).await
    })
}

fn turn(reply: crate::testing::FakeReply) -> crate::testing::FakeTurn {
    crate::testing::FakeTurn { reply, usage: None, latency: None }
}

#[tokio::test]
async fn the_agent_loop_runs_tools_and_feeds_results_back() {
    use crate::testing::{FakeProvider, FakeReply, FakeScript};
    let store = Arc::new(MemoryStore::new());
    let fake = FakeProvider::new().on_any(
        FakeScript::tool_call("add", json!({"a": "two", "b": 3}))
            .then(turn(FakeReply::ToolCalls(vec![crate::testing::FakeToolCall {
                name: "add".into(),
                arguments: json!({"a": 2, "b": 3}),
            }])))
            .then(turn(FakeReply::Text("the sum is 5".into()))),
    );
    let calls = Arc::new(AtomicU32::new(0));
    let engine = tool_engine(&store, &fake, &calls, crate::agent::Permissions::allow_all(), "1");
    let handle = engine.run(&adder(), json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.value, Some(json!("the sum is 5")), "{:?}", outcome.error);
    // The invalid call was answered with its validation errors, not executed.
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(fake.call_count(), 3);
    let journal = entries(&store, &run);
    use crate::journal::{Kind, Status};
    let terminal = journal.iter().find(|e| e.kind == Kind::Agent && e.status != Status::Running);
    assert!(terminal.is_some_and(|e| e.transcript_ref.is_some()), "the turn checkpoints are referenced");
    // The executed call is a `tool` entry of its own (dispatch and result) in the agent's scope.
    let tools: Vec<_> = journal.iter().filter(|e| e.kind == Kind::Tool).collect();
    assert_eq!(tools.len(), 2, "{journal:?}");
    assert_eq!(tools[1].value(), Some(json!("5")));
}

#[tokio::test]
async fn denied_tools_are_refused_and_the_model_is_told() {
    use crate::testing::{FakeProvider, FakeReply, FakeScript};
    let store = Arc::new(MemoryStore::new());
    let fake = FakeProvider::new().on_any(
        FakeScript::tool_call("add", json!({"a": 2, "b": 3}))
            .then(turn(FakeReply::Text("could not add".into()))),
    );
    let calls = Arc::new(AtomicU32::new(0));
    let permissions =
        crate::agent::Permissions { deny: vec!["ad*".into()], ..crate::agent::Permissions::allow_all() };
    let engine = tool_engine(&store, &fake, &calls, permissions, "1");
    let outcome = engine.run(&adder(), json!({}), RunOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(outcome.value, Some(json!("could not add")));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_ask_rule_suspends_the_run_until_a_person_approves() {
    use crate::testing::{FakeProvider, FakeReply, FakeScript};
    let store = Arc::new(MemoryStore::new());
    let fake = FakeProvider::new().on_any(
        FakeScript::tool_call("add", json!({"a": 2, "b": 3})).then(turn(FakeReply::Text("5".into()))),
    );
    let calls = Arc::new(AtomicU32::new(0));
    let permissions =
        crate::agent::Permissions { ask: vec!["add".into()], ..crate::agent::Permissions::allow_all() };
    let engine = tool_engine(&store, &fake, &calls, permissions, "1");
    let engine = Engine { inner: Arc::new(rebuild_with_workflow(&engine, adder())) };
    let handle = engine.run(&adder(), json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Suspended);
    let key = outcome.pending[0].key.clone();
    assert!(key.starts_with("approve:"), "{key}");
    assert!(outcome.pending[0].prompt.as_deref().unwrap().contains("add"));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert!(engine.resolve_external(&run, &key, json!({"approved": true})).unwrap());
    let resumed = engine.resume(&run, ResumeOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(resumed.status, RunStatus::Ok, "{:?}", resumed.error);
    assert_eq!(resumed.value, Some(json!("5")));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // The turn that asked for the tool was checkpointed: the resume did not pay for it again.
    assert_eq!(fake.call_count(), 2);
}

#[tokio::test]
async fn a_tool_version_bump_rekeys_the_call_and_an_implementation_change_does_not() {
    use crate::testing::{FakeProvider, FakeScript};
    let store = Arc::new(MemoryStore::new());
    let fake = FakeProvider::new().on_any(FakeScript::text("no tools needed"));
    let calls = Arc::new(AtomicU32::new(0));
    let engine = tool_engine(&store, &fake, &calls, crate::agent::Permissions::allow_all(), "1");
    let handle = engine.run(&adder(), json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    handle.result().await.unwrap();
    // Same contract (a new tool object, same version): replays.
    let same = tool_engine(&store, &fake, &calls, crate::agent::Permissions::allow_all(), "1");
    let again = same.resume(&run, ResumeOptions { workflow: Some(adder()), ..Default::default() }).unwrap();
    assert_eq!(again.result().await.unwrap().preview.hits, 1);
    // A new contract version re-keys the call: refused unless the resume accepts re-keys.
    let bumped = tool_engine(&store, &fake, &calls, crate::agent::Permissions::allow_all(), "2");
    let again = bumped.resume(&run, ResumeOptions { workflow: Some(adder()), ..Default::default() }).unwrap();
    let refused = again.result().await.unwrap();
    assert_eq!(refused.error.map(|e| e.code), Some(crate::error::ErrorCode::RekeyRefused));
    let options = ResumeOptions { workflow: Some(adder()), accept_rekey: true, ..Default::default() };
    let outcome = bumped.resume(&run, options).unwrap().result().await.unwrap();
    assert_eq!((outcome.preview.hits, outcome.preview.misses), (0, 1));
    let unknown = Workflow::new("u", |ctx, _| async move {
        ctx.agent("x", AgentOptions { tools: vec!["nope".into()], ..Default::default() }).await
    });
    let outcome = same.run(&unknown, json!({}), RunOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(outcome.error.unwrap().code, ErrorCode::Config);
}

#[tokio::test]
async fn retryable_failures_fail_over_to_declared_fallbacks_keeping_the_key() {
    use crate::testing::{FakeProvider, FakeScript};
    let store = Arc::new(MemoryStore::new());
    let primary = FakeProvider::named("primary")
        .on_any(FakeScript::error(Error::new(ErrorCode::ProviderUnavailable, "overloaded")));
    let backup = FakeProvider::named("backup").on_any(FakeScript::text("from the backup"));
    let engine = Engine::builder(store.clone(), store.clone())
        .provider(Arc::new(primary.clone()))
        .provider(Arc::new(backup.clone()))
        .default_model(ModelRef::parse("primary:big").unwrap())
        .fallbacks(ModelRef::parse("primary:big").unwrap(), vec![ModelRef::parse("backup:small").unwrap()])
        .retries(1, Duration::from_millis(1))
        .build()
        .unwrap();
    let wf = Workflow::new("fo", |ctx, _| async move { ctx.agent("hello", AgentOptions::default()).await });
    let handle = engine.run(&wf, json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.value, Some(json!("from the backup")), "{:?}", outcome.error);
    assert_eq!(primary.call_count(), 2, "one try and one retry before failing over");
    let journal = entries(&store, &run);
    assert_eq!(journal[1].served_by.as_deref(), Some("backup:small"));
    assert_eq!(journal[1].model.as_deref(), Some("primary:big"));
    // The key is the requested model's: an engine without fallbacks still replays it.
    let plain = Engine::builder(store.clone(), store.clone())
        .provider(Arc::new(primary.clone()))
        .default_model(ModelRef::parse("primary:big").unwrap())
        .build()
        .unwrap();
    let again = plain.resume(&run, ResumeOptions { workflow: Some(wf), ..Default::default() }).unwrap();
    assert_eq!(again.result().await.unwrap().preview.hits, 1);
    // A non-retryable failure does not fail over.
    let filtered =
        FakeProvider::named("primary").on_any(FakeScript::error(Error::new(ErrorCode::ContentFilter, "no")));
    let engine = Engine::builder(store.clone(), store.clone())
        .provider(Arc::new(filtered))
        .provider(Arc::new(backup.clone()))
        .default_model(ModelRef::parse("primary:big").unwrap())
        .fallbacks(ModelRef::parse("primary:big").unwrap(), vec![ModelRef::parse("backup:small").unwrap()])
        .build()
        .unwrap();
    let wf = Workflow::new("fo2", |ctx, _| async move { ctx.agent("other", AgentOptions::default()).await });
    let outcome = engine.run(&wf, json!({}), RunOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(outcome.error.unwrap().code, ErrorCode::ContentFilter);
    assert_eq!(backup.call_count(), 1);
}

#[tokio::test]
async fn the_replay_strict_helper_fails_on_the_first_live_call() {
    let (_store, provider, engine) = setup();
    let handle = engine.run(&three_calls(), json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    handle.result().await.unwrap();
    let clean = crate::testing::replay_strict(&engine, &run, Some(three_calls())).await.unwrap();
    assert_eq!(clean.preview.hits, 3);
    let edited =
        Workflow::new("three", |ctx, _| async move { ctx.agent("rewritten", AgentOptions::default()).await });
    let err = crate::testing::replay_strict(&engine, &run, Some(edited)).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::JournalMiss);
    assert_eq!(provider.calls.load(Ordering::SeqCst), 3);
}

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
    fn append(
        &self,
        run: &RunId,
        entries: &[crate::store::RawEntry],
        lease: Option<&crate::store::Lease>,
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
        self.inner.append(run, entries, lease)
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
    let engine = Engine::builder(journal.clone(), store.clone())
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

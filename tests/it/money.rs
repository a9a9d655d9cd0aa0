//! Money: spend never exceeds the run's ceiling, and every turn is charged as the provider
//! bills it, exactly once. Against a scripted provider that streams exactly chosen usage.

use std::sync::Arc;
use std::time::Duration;

use cairn::provider::FinishReason;
use cairn::testing::{FakeProvider, FakeReply, FakeScript, FakeTurn};
use cairn::{
    AgentOptions, ChatEvent, ChatRequest, Engine, ErrorCode, MemoryStore, Money, ParallelOptions, RunOptions,
    Usage, Workflow, branch,
};
use cairn::{ManualClock, Price, PriceTable};
use serde_json::json;

fn usd(x: f64) -> Money {
    Money::from_usd(x).unwrap()
}

/// $0 input, $10 per million output tokens: 1,000 output tokens cost $0.01.
fn ten_per_million() -> Price {
    Price::flat(Money::ZERO, usd(10.0))
}

fn engine(fake: &FakeProvider, prices: PriceTable) -> Engine {
    let store = Arc::new(MemoryStore::new());
    Engine::builder(store)
        .provider(Arc::new(fake.clone()))
        .prices(prices)
        .retries(0, Duration::from_millis(1))
        .build()
        .unwrap()
}

fn priced(model: &str, price: Price) -> PriceTable {
    let mut prices = PriceTable::shipped();
    prices.set(model, price);
    prices
}

/// A turn that streams `tokens` output tokens as deltas of 1,000 tokens (4,000 characters)
/// and reports them in its final usage; with `honour_cap`, no more than the request's cap.
fn streaming(tokens: u64, honour_cap: bool) -> FakeScript {
    FakeScript::respond_with(move |request: &ChatRequest| {
        let cap = request.max_output_tokens.map_or(u64::MAX, u64::from);
        let tokens = if honour_cap { tokens.min(cap) } else { tokens };
        let mut events = Vec::new();
        let mut left = tokens;
        while left > 0 {
            let chunk = left.min(1000);
            events.push(ChatEvent::TextDelta("x".repeat(chunk as usize * 4)));
            left -= chunk;
        }
        let usage = Usage { input_tokens: 10, output_tokens: tokens, ..Usage::default() };
        // Cut at the cap when it reached it (a cut answer ends `limit`); ended by the model
        // otherwise.
        let reason = if tokens >= cap { FinishReason::Length } else { FinishReason::Stop };
        events.push(ChatEvent::Finish { reason, usage });
        FakeTurn::new(FakeReply::Events(events))
    })
}

fn ten_cheap_estimates() -> Workflow {
    Workflow::new("ten", |ctx, _args| async move {
        let branches = (0..10)
            .map(|i| {
                branch(move |ctx| async move {
                    let opts = AgentOptions {
                        model: Some("fake:m".into()),
                        est_cost: Some(usd(0.01)),
                        label: Some(format!("agent {i}")),
                        on_error: Some(cairn::OnError::Null),
                        ..AgentOptions::default()
                    };
                    ctx.agent(&format!("write a lot, {i}"), opts).await
                })
            })
            .collect();
        let values = ctx
            .parallel(
                branches,
                ParallelOptions { on_error: Some(cairn::OnError::Null), ..Default::default() },
            )
            .await?;
        Ok(json!(values))
    })
}

/// #10 §2.1–2.2: ten agents whose author estimated $0.01 each, against a model that would
/// stream $0.83 each, under a $1.00 ceiling: each reserves its worst turn and is sent with
/// that output cap, so the run spends at most the ceiling (it spent $8.30).
#[tokio::test]
async fn ten_parallel_cheap_estimates_stay_under_the_ceiling() {
    let fake = FakeProvider::named("fake").on_any(streaming(83_000, true));
    let engine = engine(&fake, priced("fake:m", ten_per_million()));
    let options = RunOptions { budget_usd: Some(1.0), ..RunOptions::default() };
    let outcome = engine.run(&ten_cheap_estimates(), json!({}), options).unwrap().result().await.unwrap();
    let total = outcome.cost.total.cost;
    assert!(total <= usd(1.0), "spent {total} under a $1.00 ceiling: {:?}", outcome.cost.total);
    assert!(total > Money::ZERO);
    // Every dispatched turn carried the output cap its reservation was computed for.
    for call in fake.calls() {
        assert!(call.request.max_output_tokens.is_some_and(|cap| cap <= 8192), "{call:?}");
    }
}

/// #10 §2.1: siblings see each other. A provider that ignores the output cap runs past its
/// hold; its in-flight spend is committed on the shared account as it streams, so the
/// stream that crosses the ceiling is cut: the run overshoots by at most one streamed delta
/// per concurrent call ($0.01 here), not by nine calls.
#[tokio::test]
async fn in_flight_spend_is_shared_so_overrunning_siblings_are_cut() {
    let fake = FakeProvider::named("fake").on_any(streaming(83_000, false));
    let engine = engine(&fake, priced("fake:m", ten_per_million()));
    let options = RunOptions { budget_usd: Some(1.0), ..RunOptions::default() };
    let outcome = engine.run(&ten_cheap_estimates(), json!({}), options).unwrap().result().await.unwrap();
    let total = outcome.cost.total.cost;
    assert!(total <= usd(1.0 + 10.0 * 0.01), "spent {total} under a $1.00 ceiling");
    assert_eq!(outcome.status, cairn::RunStatus::Exhausted, "{outcome:?}");
}

/// #10 §2.2: a call whose worst turn cannot fit is not dispatched, whatever its estimate,
/// and the refusal shows the arithmetic.
#[tokio::test]
async fn a_call_whose_worst_turn_cannot_fit_is_not_dispatched() {
    let fake = FakeProvider::named("fake").on_any(streaming(100, true));
    let engine = engine(&fake, priced("fake:m", ten_per_million()));
    let workflow = Workflow::new("one", |ctx, _args| async move {
        let opts = AgentOptions {
            model: Some("fake:m".into()),
            est_cost: Some(usd(0.001)),
            ..AgentOptions::default()
        };
        ctx.agent("hello", opts).await
    });
    // The worst turn: 8192 output tokens at $10/M = $0.08192 (plus the prompt at $0).
    let options = RunOptions { budget_usd: Some(0.05), ..RunOptions::default() };
    let outcome = engine.run(&workflow, json!({}), options).unwrap().result().await.unwrap();
    assert_eq!(fake.call_count(), 0);
    let error = outcome.error.expect("refused");
    assert_eq!(error.code, ErrorCode::BudgetExhausted);
    assert!(error.message.contains("8192 output tokens"), "{}", error.message);
    assert!(error.message.contains("$0.08192"), "{}", error.message);
    // With a smaller output cap the same call fits.
    let small = Workflow::new("small", |ctx, _args| async move {
        let opts = AgentOptions {
            model: Some("fake:m".into()),
            max_output_tokens: Some(1000),
            ..AgentOptions::default()
        };
        ctx.agent("hello", opts).await
    });
    let options = RunOptions { budget_usd: Some(0.05), ..RunOptions::default() };
    let outcome = engine.run(&small, json!({}), options).unwrap().result().await.unwrap();
    assert_eq!(outcome.status, cairn::RunStatus::Ok, "{outcome:?}");
}

fn cairn_in(dir: &std::path::Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"));
    cmd.current_dir(dir)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("CLAUDE_TEST_KEY", "not-a-real-key")
        .stdin(std::process::Stdio::null());
    cmd
}

/// Runs `agent("hi")` through the binary with `config` and `args`; returns the JSON outcome.
fn run_one(config: &str, args: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
    std::fs::write(dir.path().join("one.rhai"), r#"agent("hi", #{max_turns: 1})"#).unwrap();
    let out = cairn_in(dir.path()).args(["run", "one.rhai", "-q", "--json"]).args(args).output().unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("no JSON outcome: {}", String::from_utf8_lossy(&out.stderr)))
}

/// A provider nothing listens on: a call that reaches it fails `transport`.
const NOWHERE: &str = "http://127.0.0.1:9/v1";

/// #10 §2.3: under a finite ceiling a model with no price is refused before dispatch with
/// `unpriced_model`; `allow_unpriced = true` lets it through (here to a dead endpoint).
#[test]
fn an_unpriced_model_is_refused_under_a_ceiling_unless_allowed() {
    let config = format!(
        "[providers.local]\nkind = \"openai-compatible\"\nbase_url = \"{NOWHERE}\"\n[routing]\ndefault = \"local:m\"\n"
    );
    let refused = run_one(&config, &["--budget", "1"]);
    assert_eq!(refused["error"]["code"], "unpriced_model", "{refused}");
    // No ceiling: nothing to protect, the call is dispatched.
    let unbounded = run_one(&config, &[]);
    assert_eq!(unbounded["error"]["code"], "transport", "{unbounded}");
    let allowed = run_one(&format!("{config}[budget]\nallow_unpriced = true\n"), &["--budget", "1"]);
    assert_eq!(allowed["error"]["code"], "transport", "{allowed}");
    // The echo model is priced (free), so it is never refused as unpriced.
    let echo = run_one("", &["--budget", "0.01", "--model", "echo:anything"]);
    assert_eq!(echo["status"], "ok", "{echo}");
    // A demo price in echo's provider table makes it cost money like any priced model.
    let demo = run_one("[providers.echo]\nkind = \"echo\"\nprice = [1000, 1000]\n", &["--budget", "0.01"]);
    assert_eq!(demo["error"]["code"], "budget_exhausted", "{demo}");
}

/// #16 §1: prices are looked up by provider kind, and dated ids resolve to their family's
/// row: a `[providers.claude]` table of kind anthropic serving `claude-sonnet-4-5-20250929`
/// is priced ($15/M output), so its worst turn ($0.12) does not fit a $0.01 ceiling and is
/// refused before dispatch; a model in no row is unpriced.
#[test]
fn a_dated_model_of_a_renamed_provider_is_priced_by_kind() {
    let config = format!(
        "[providers.claude]\nkind = \"anthropic\"\napi_key_env = \"CLAUDE_TEST_KEY\"\nbase_url = \"{NOWHERE}\"\n"
    );
    let dated = run_one(&config, &["--budget", "0.01", "--model", "claude:claude-sonnet-4-5-20250929"]);
    assert_eq!(dated["error"]["code"], "budget_exhausted", "{dated}");
    assert!(dated["error"]["message"].as_str().unwrap().contains("8192 output tokens"), "{dated}");
    let unknown = run_one(&config, &["--budget", "0.01", "--model", "claude:claude-nonesuch"]);
    assert_eq!(unknown["error"]["code"], "unpriced_model", "{unknown}");
    let opus = run_one(&config, &["--budget", "10", "--model", "claude:claude-opus-4-1-20250805"]);
    assert_eq!(opus["error"]["code"], "transport", "{opus}");
}

/// An engine with the fake (priced at $1/M in, $10/M out for every `fake:` model) and the
/// fs-read toolset over `dir`.
/// [`tool_engine_leased`] on a store whose lease clock stands still, for the tests that "kill"
/// a driver in-process (its runtime dropped): no live driver's lease can lapse however slowly a
/// loaded machine runs it (a 60 ms lease on the system clock did, ending runs `run_busy`),
/// and the dead driver's lease runs out when the test moves the clock ([`lease_runs_out`]).
fn tool_engine(fake: &FakeProvider, dir: &std::path::Path) -> (Arc<MemoryStore>, ManualClock, Engine) {
    let clock = ManualClock::new(1_000_000);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    (store.clone(), clock, tool_engine_on(store, fake, dir, Duration::from_millis(60)))
}

/// [`tool_engine`] with a run lease of `ttl` (a test whose driver stays alive wants one that
/// cannot lapse on a loaded machine).
fn tool_engine_leased(
    fake: &FakeProvider,
    dir: &std::path::Path,
    ttl: Duration,
) -> (Arc<MemoryStore>, Engine) {
    let store = Arc::new(MemoryStore::new());
    (store.clone(), tool_engine_on(store, fake, dir, ttl))
}

fn tool_engine_on(
    store: Arc<MemoryStore>,
    fake: &FakeProvider,
    dir: &std::path::Path,
    ttl: Duration,
) -> Engine {
    Engine::builder(store)
        .provider(Arc::new(fake.clone()))
        .prices(priced("fake:*", Price::flat(usd(1.0), usd(10.0))))
        .toolset(cairn::fs_read_toolset(dir).unwrap())
        .retries(0, Duration::from_millis(1))
        .lease_ttl(ttl)
        .build()
        .unwrap()
}

/// A tool-using turn: lists `.`, takes 40 ms, reports 1,000 tokens in and 1,000 out ($0.011).
fn paid_tool_turn() -> FakeTurn {
    FakeTurn {
        reply: FakeReply::ToolCalls(vec![cairn::testing::FakeToolCall {
            name: "list_dir".into(),
            arguments: json!({"path": "."}),
        }]),
        usage: Some(Usage { input_tokens: 1000, output_tokens: 1000, ..Usage::default() }),
        latency: Some(Duration::from_millis(40)),
    }
}

/// #10 §2.4, #16 §1: an agent that reaches its timeout keeps the usage of its completed
/// turns (it reported $0 and was listed as unpriced): they are journaled and charged, the
/// call ends `limit`, and the usage is marked approximate for a turn cut in flight.
#[tokio::test]
async fn a_timed_out_agent_keeps_the_usage_of_its_completed_turns() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::named("fake").on_any(FakeScript::new(paid_tool_turn()));
    let (_store, engine) = tool_engine_leased(&fake, dir.path(), Duration::from_secs(30));
    let workflow = Workflow::new("slow", |ctx, _args| async move {
        let opts = AgentOptions {
            model: Some("fake:m".into()),
            tools: vec!["fs-read".into()],
            timeout: Some(Duration::from_millis(300)),
            on_error: Some(cairn::OnError::Null),
            ..AgentOptions::default()
        };
        ctx.agent("keep listing", opts).await
    });
    let options = RunOptions { budget_usd: Some(10.0), ..RunOptions::default() };
    let outcome = engine.run(&workflow, json!({}), options).unwrap().result().await.unwrap();
    assert_eq!(outcome.dropped.len(), 1, "{outcome:?}");
    assert_eq!(outcome.dropped[0].error.code, ErrorCode::TurnLimit);
    let completed = (fake.call_count() - 1) as u64;
    assert!(completed >= 3, "only {completed} turns completed in 300 ms");
    let total = outcome.cost.total;
    assert!(total.usage.output_tokens >= completed * 1000, "{total:?}");
    assert!(total.cost >= usd(0.011).times(completed), "{total:?}");
    assert!(outcome.cost.unpriced.is_empty(), "{:?}", outcome.cost.unpriced);
    // The timeout usually cuts a turn in flight, whose usage is then estimated; when it falls
    // between turns (a loaded machine running the tool), every turn asked was completed and
    // charged exactly.
    if !total.usage.approximate {
        assert_eq!(total.usage.output_tokens, fake.call_count() as u64 * 1000, "{total:?}");
    }
}

/// #16 §1: a failover's abandoned attempt is journaled in the call's usage, not only in its
/// cost, so the journal (and a resume) holds what was billed.
#[tokio::test]
async fn a_failovers_abandoned_attempt_is_in_the_journaled_usage() {
    let fake = FakeProvider::named("fake").on_any(FakeScript::respond_with(|request: &ChatRequest| {
        if request.model == "a" {
            // 1,000 output tokens stream, then the connection drops.
            FakeTurn::new(FakeReply::Events(vec![
                ChatEvent::TextDelta("y".repeat(4000)),
                ChatEvent::Error(cairn::Error::new(ErrorCode::Transport, "connection reset")),
            ]))
        } else {
            let mut turn = FakeTurn::new(FakeReply::Text("ok".into()));
            turn.usage = Some(Usage { input_tokens: 10, output_tokens: 10, ..Usage::default() });
            turn
        }
    }));
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::builder(store.clone())
        .provider(Arc::new(fake.clone()))
        .prices(priced("fake:*", Price::flat(usd(1.0), usd(10.0))))
        .fallbacks(cairn::ModelRef::parse("fake:a").unwrap(), vec![cairn::ModelRef::parse("fake:b").unwrap()])
        .retries(0, Duration::from_millis(1))
        .build()
        .unwrap();
    let workflow = Workflow::new("failover", |ctx, _args| async move {
        ctx.agent("hello", AgentOptions { model: Some("fake:a".into()), ..AgentOptions::default() }).await
    });
    let outcome = engine.run(&workflow, json!({}), RunOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(outcome.status, cairn::RunStatus::Ok, "{outcome:?}");
    assert_eq!(fake.calls().len(), 2);
    let total = outcome.cost.total;
    // The journaled usage holds both attempts, and the cost is the usage at each one's price.
    assert_eq!(total.usage.output_tokens, 1000 + 10, "{total:?}");
    assert!(total.cost >= usd(0.01), "{total:?}");
}

/// #18.3: each paid turn is charged exactly once across a failure, a crash and two resumes.
/// The agent pays two tool turns and fails on the third; a resume continues from its
/// checkpoint and is killed mid-turn (its runtime dropped, as a crash would); a second
/// resume finishes. The journal must hold those three completed turns once each (it held the
/// first two twice: in the failure's entry and again in the final one).
#[test]
fn each_paid_turn_is_charged_once_across_a_failure_a_crash_and_resumes() {
    use std::sync::atomic::{AtomicU8, Ordering};
    let dir = tempfile::tempdir().unwrap();
    // 0: fail the third turn; 1: hang in it; 2: answer it.
    let phase = Arc::new(AtomicU8::new(0));
    let script_phase = phase.clone();
    let fake = FakeProvider::named("fake").on_any(FakeScript::respond_with(move |request: &ChatRequest| {
        let results = request
            .messages
            .iter()
            .flat_map(|m| m.parts.iter())
            .filter(|p| matches!(p, cairn::provider::Part::ToolResult { .. }))
            .count();
        let paid = Some(Usage { input_tokens: 100, output_tokens: 10, ..Usage::default() });
        if results < 2 {
            return FakeTurn { usage: paid, ..paid_tool_turn() };
        }
        match script_phase.load(Ordering::SeqCst) {
            0 => FakeTurn::new(FakeReply::Error(cairn::Error::new(
                ErrorCode::ContentFilter,
                "scripted failure",
            ))),
            1 => FakeTurn {
                latency: Some(Duration::from_secs(30)),
                ..FakeTurn::new(FakeReply::Text("late".into()))
            },
            _ => FakeTurn { usage: paid, ..FakeTurn::new(FakeReply::Text("done".into())) },
        }
    }));
    let (store, clock, engine) = tool_engine(&fake, dir.path());
    let workflow = Workflow::new("turns", |ctx, _args| async move {
        let opts = AgentOptions {
            model: Some("fake:m".into()),
            tools: vec!["fs-read".into()],
            ..AgentOptions::default()
        };
        ctx.agent("list twice, then answer", opts).await
    });
    let run = cairn::RunId::parse("turns").unwrap();
    let options = RunOptions { run_id: Some(run.clone()), budget_usd: Some(10.0), ..RunOptions::default() };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let failed =
        rt.block_on(async { engine.run(&workflow, json!({}), options).unwrap().result().await.unwrap() });
    assert_eq!(failed.status, cairn::RunStatus::Error, "{failed:?}");
    assert_eq!(fake.call_count(), 3);
    // Resume: the third turn is in flight when the process "dies".
    phase.store(1, Ordering::SeqCst);
    let crashing = tokio::runtime::Runtime::new().unwrap();
    crashing.block_on(async {
        let resume = cairn::ResumeOptions { workflow: Some(workflow.clone()), ..Default::default() };
        let handle = engine.resume(&run, resume).unwrap();
        while fake.call_count() < 4 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Never settled: the runtime is dropped under it.
        std::mem::forget(handle);
    });
    crashing.shutdown_background();
    lease_runs_out(&store, &clock, &run);
    // A new process: same store, new engine.
    phase.store(2, Ordering::SeqCst);
    let engine2 = Engine::builder(store.clone())
        .provider(Arc::new(fake.clone()))
        .prices(priced("fake:*", Price::flat(usd(1.0), usd(10.0))))
        .toolset(cairn::fs_read_toolset(dir.path()).unwrap())
        .retries(0, Duration::from_millis(1))
        .lease_ttl(Duration::from_millis(60))
        .build()
        .unwrap();
    let done = rt.block_on(async {
        let resume = cairn::ResumeOptions { workflow: Some(workflow.clone()), ..Default::default() };
        engine2.resume(&run, resume).unwrap().result().await.unwrap()
    });
    assert_eq!(done.status, cairn::RunStatus::Ok, "{done:?}");
    assert_eq!(done.value, Some(json!("done")));
    // Turns paid with output: two tool turns and the answer (the failed and the killed
    // attempts produced no output).
    assert_eq!(done.cost.total.usage.output_tokens, 3 * 10, "{:?}", done.cost.total);
}

/// Runs one agent on `fake:m` priced `price` under `ceiling`, with `max_output_tokens`.
async fn one_call(fake: &FakeProvider, price: Price, ceiling: f64, cap: Option<u32>) -> cairn::RunOutcome {
    let engine = engine(fake, priced("fake:m", price));
    let workflow = Workflow::new("one", move |ctx, _args| async move {
        let opts =
            AgentOptions { model: Some("fake:m".into()), max_output_tokens: cap, ..AgentOptions::default() };
        ctx.agent("think hard", opts).await
    });
    let options = RunOptions { budget_usd: Some(ceiling), ..RunOptions::default() };
    engine.run(&workflow, json!({}), options).unwrap().result().await.unwrap()
}

/// Fifty deltas of 1,000 tokens each (`make` builds one from its 4,000 characters), then a
/// finish reporting all 50,000 as output.
fn fifty_thousand(make: fn(String) -> ChatEvent) -> FakeProvider {
    let mut events: Vec<ChatEvent> = (0..50).map(|_| make("z".repeat(4000))).collect();
    events.push(ChatEvent::Finish {
        reason: FinishReason::Stop,
        usage: Usage {
            input_tokens: 10,
            output_tokens: 50_000,
            reasoning_tokens: 50_000,
            ..Usage::default()
        },
    });
    FakeProvider::named("fake").on_any(FakeScript::new(FakeTurn::new(FakeReply::Events(events))))
}

/// #16 §1: the live cut sees a model that is thinking or streaming tool-call arguments. A
/// $0.10 ceiling let one call reach $0.75; now the stream is cut within one delta ($0.015).
#[tokio::test]
async fn reasoning_and_tool_argument_deltas_are_counted_by_the_cut() {
    let sonnet = Price::flat(usd(3.0), usd(15.0));
    for (what, make) in [
        ("reasoning", ChatEvent::ReasoningDelta as fn(String) -> ChatEvent),
        ("tool arguments", |text| ChatEvent::ToolCallDelta { wire_id: "w".into(), arguments_delta: text }),
    ] {
        let fake = fifty_thousand(make);
        // A provider that ignores its 4,000-token cap: the hold covers $0.06 of it.
        let outcome = one_call(&fake, sonnet, 0.10, Some(4000)).await;
        assert_eq!(outcome.status, cairn::RunStatus::Exhausted, "{what}: {outcome:?}");
        let total = outcome.cost.total;
        assert!(total.cost <= usd(0.10 + 0.015), "{what}: {total:?}");
        assert!(total.cost >= usd(0.09), "{what}: the streamed output was charged: {total:?}");
        assert!(total.usage.approximate);
    }
}

/// #16 §1: a cut estimate keeps cache counts consistent with input tokens: a call reading
/// 400k tokens from the prompt cache costs $0.1278 and is not cut under a $1 ceiling (it
/// was cut and charged $1.21, all 400k at the full input rate).
#[tokio::test]
async fn cache_reads_are_priced_at_their_rate_while_streaming() {
    let sonnet = Price {
        input_per_mtok: usd(3.0),
        output_per_mtok: usd(15.0),
        cache_read_per_mtok: usd(0.3),
        cache_write_per_mtok: usd(3.75),
        max_output_tokens: None,
    };
    let start =
        Usage { input_tokens: 400_100, cache_read_tokens: 400_000, output_tokens: 1, ..Usage::default() };
    let mut events = vec![ChatEvent::Usage(start)];
    events.extend((0..5).map(|_| ChatEvent::TextDelta("w".repeat(400))));
    events
        .push(ChatEvent::Finish { reason: FinishReason::Stop, usage: Usage { output_tokens: 500, ..start } });
    let fake = FakeProvider::named("fake").on_any(FakeScript::new(FakeTurn::new(FakeReply::Events(events))));
    let outcome = one_call(&fake, sonnet, 1.0, None).await;
    assert_eq!(outcome.status, cairn::RunStatus::Ok, "{outcome:?}");
    // 100 × $3 + 400,000 × $0.30 + 500 × $15, per million.
    assert_eq!(outcome.cost.total.cost, usd(0.0003 + 0.12 + 0.0075));
}

/// #16 §1: a Responses stream that ends in `response.failed` carries the usage the provider
/// bills; the turn is charged that, not an estimate from the few characters that streamed.
#[tokio::test]
async fn a_failed_responses_stream_is_charged_the_usage_it_carries() {
    use cairn::provider::openai_responses::OpenAiResponsesProvider;
    let sse = concat!(
        "event: response.created\n",
        "data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\"}}\n\n",
        "event: response.output_text.delta\n",
        "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":0,\"delta\":\"Hel\"}\n\n",
        "event: response.failed\n",
        "data: {\"type\":\"response.failed\",\"response\":{\"id\":\"resp_1\",\"status\":\"failed\",",
        "\"error\":{\"code\":\"server_error\",\"message\":\"The model failed.\"},",
        "\"usage\":{\"input_tokens\":1200,\"input_tokens_details\":{\"cached_tokens\":200},",
        "\"output_tokens\":3000,\"output_tokens_details\":{\"reasoning_tokens\":2900},\"total_tokens\":4200}}}\n\n",
    );
    let provider = OpenAiResponsesProvider::new(cairn::provider::ApiKey::new("sk-test")).unwrap();
    let mut decoder = provider.decoder(5);
    let events = cairn::provider::decode_sse(&mut decoder, sse.as_bytes());
    let billed = Usage {
        input_tokens: 1200,
        cache_read_tokens: 200,
        output_tokens: 3000,
        reasoning_tokens: 2900,
        ..Usage::default()
    };
    assert!(events.iter().any(|e| matches!(e, ChatEvent::Usage(u) if *u == billed)), "{events:?}");
    assert!(matches!(events.last(), Some(ChatEvent::Error(_))), "{events:?}");
    // Through the agent loop: the failed turn is journaled with the billed usage.
    let fake = FakeProvider::named("fake").on_any(FakeScript::new(FakeTurn::new(FakeReply::Events(events))));
    let outcome = one_call(&fake, ten_per_million(), 10.0, None).await;
    let total = outcome.cost.total;
    assert_eq!((total.usage.input_tokens, total.usage.output_tokens), (1200, 3000), "{total:?}");
    assert_eq!(total.cost, usd(0.03));
}

/// #16 §1: cancelling a run (what Ctrl-C does) keeps the usage of the turns its agent
/// completed, charged exactly, plus the turn in flight at its estimate.
#[tokio::test]
async fn a_cancelled_agent_keeps_the_usage_of_its_completed_turns() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::named("fake").on_any(FakeScript::new(paid_tool_turn()));
    // A live driver: a 60 ms lease lapsed under load and failed the run `run_busy`.
    let (_store, engine) = tool_engine_leased(&fake, dir.path(), Duration::from_secs(30));
    let workflow = Workflow::new("cancelled", |ctx, _args| async move {
        let opts = AgentOptions {
            model: Some("fake:m".into()),
            tools: vec!["fs-read".into()],
            ..AgentOptions::default()
        };
        ctx.agent("keep listing", opts).await
    });
    let handle = engine.run(&workflow, json!({}), RunOptions::default()).unwrap();
    let turns = tokio::time::timeout(Duration::from_secs(30), async {
        while fake.call_count() < 4 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    if turns.await.is_err() {
        let calls = fake.call_count();
        panic!("the agent made {calls} model calls in 30 s: {:?}", handle.result().await);
    }
    handle.cancel();
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.status, cairn::RunStatus::Cancelled, "{outcome:?}");
    let completed = (fake.call_count() - 1) as u64;
    let total = outcome.cost.total;
    assert!(total.usage.output_tokens >= completed * 1000, "{completed} turns: {total:?}");
    assert!(total.cost >= usd(0.011).times(completed), "{total:?}");
}

/// #18.3: an ask-suspended attempt's paid turn is charged once, even when the approved
/// resume is killed mid-turn and resumed again (it was counted in the suspended attempt's
/// entry and again in the final one).
#[test]
fn an_ask_suspended_turn_is_charged_once_across_a_crash() {
    use std::sync::atomic::{AtomicU8, Ordering};
    let dir = tempfile::tempdir().unwrap();
    // 1: hang in the turn after the tool; 2: answer it.
    let phase = Arc::new(AtomicU8::new(1));
    let script_phase = phase.clone();
    let fake = FakeProvider::named("fake").on_any(FakeScript::respond_with(move |request: &ChatRequest| {
        let answered = request
            .messages
            .iter()
            .flat_map(|m| m.parts.iter())
            .any(|p| matches!(p, cairn::provider::Part::ToolResult { .. }));
        let paid = Some(Usage { input_tokens: 100, output_tokens: 10, ..Usage::default() });
        match (answered, script_phase.load(Ordering::SeqCst)) {
            (false, _) => FakeTurn { usage: paid, latency: None, ..paid_tool_turn() },
            (true, 1) => FakeTurn {
                latency: Some(Duration::from_secs(30)),
                ..FakeTurn::new(FakeReply::Text("late".into()))
            },
            (true, _) => FakeTurn { usage: paid, ..FakeTurn::new(FakeReply::Text("done".into())) },
        }
    }));
    // The lease clock stands still (see [`tool_engine`]).
    let clock = ManualClock::new(1_000_000);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let build = || {
        Engine::builder(store.clone())
            .provider(Arc::new(fake.clone()))
            .prices(priced("fake:*", Price::flat(usd(1.0), usd(10.0))))
            .toolset(cairn::fs_read_toolset(dir.path()).unwrap())
            .permissions(cairn::Permissions {
                ask: vec!["list_dir".into()],
                ..cairn::Permissions::allow_all()
            })
            .retries(0, Duration::from_millis(1))
            .lease_ttl(Duration::from_millis(60))
            .build()
            .unwrap()
    };
    let workflow = Workflow::new("ask", |ctx, _args| async move {
        let opts = AgentOptions {
            model: Some("fake:m".into()),
            tools: vec!["fs-read".into()],
            ..AgentOptions::default()
        };
        ctx.agent("list, then answer", opts).await
    });
    let run = cairn::RunId::parse("ask").unwrap();
    let resume = || cairn::ResumeOptions { workflow: Some(workflow.clone()), ..Default::default() };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let engine = build();
    let options = RunOptions { run_id: Some(run.clone()), ..RunOptions::default() };
    let asked =
        rt.block_on(async { engine.run(&workflow, json!({}), options).unwrap().result().await.unwrap() });
    assert_eq!(asked.status, cairn::RunStatus::Suspended, "{asked:?}");
    assert!(engine.resolve_external(&run, &asked.pending[0].key, json!({"approved": true})).unwrap());
    let crashing = tokio::runtime::Runtime::new().unwrap();
    crashing.block_on(async {
        let handle = engine.resume(&run, resume()).unwrap();
        while fake.call_count() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Never settled: the runtime is dropped under it.
        std::mem::forget(handle);
    });
    crashing.shutdown_background();
    lease_runs_out(&store, &clock, &run);
    phase.store(2, Ordering::SeqCst);
    let engine = build();
    let done = rt.block_on(async { engine.resume(&run, resume()).unwrap().result().await.unwrap() });
    assert_eq!(done.status, cairn::RunStatus::Ok, "{done:?}");
    // The asking turn and the answer, once each.
    assert_eq!(done.cost.total.usage.output_tokens, 2 * 10, "{:?}", done.cost.total);
}

/// The "dead" driver's lease runs out: the lease clock moves past its ttl. A renewal after
/// that is refused, so the lease is gone whenever the dead driver's renewal last ran.
fn lease_runs_out(store: &MemoryStore, clock: &ManualClock, run: &cairn::RunId) {
    use cairn::LeasableStore as _;
    clock.advance(60_000);
    assert_eq!(store.holder(run).unwrap(), None, "the dead driver's lease of {run}");
}

//! The dynamic orchestrator, driven by a scripted fake model that issues the tool calls:
//! decisions precede their effects, refusals pay nothing, acceptance and validation verdicts
//! replay, the termination account finishes partial, the claim pass finds a planted
//! contradiction, and 200 children run under one orchestrator.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cairn::journal::{Entry, Kind};
use cairn::provider::{ChatRequest, Part, Role};
use cairn::testing::{FakeProvider, FakeReply, FakeScript, FakeToolCall, FakeTurn};
use cairn::{
    Acceptance, ChildPolicy, ChildView, ClaimPolicy, FinishValidator, OrchestrateOptions, orchestrate,
    orchestrate_workflow,
};
use cairn::{
    AgentProfile, Engine, ErrorCode, JournalStore, MemoryStore, Money, ResumeOptions, RunId, RunOptions,
    RunOutcome, RunStatus, Usage,
};
use cairn::{ModelRef, Price, PriceTable};
use serde_json::{Value, json};

fn tool(name: &str, arguments: Value) -> FakeTurn {
    FakeTurn::new(FakeReply::ToolCalls(vec![FakeToolCall { name: name.into(), arguments }]))
}

/// The orchestrator's turns, picked by how many turns its conversation already holds, so a
/// resumed orchestrator (continuing from its checkpoint) is answered where it left off.
fn orchestrator(turns: Vec<FakeTurn>) -> FakeScript {
    FakeScript::respond_with(move |request: &ChatRequest| {
        let done = request.messages.iter().filter(|m| m.role == Role::Assistant).count();
        turns.get(done).or(turns.last()).cloned().expect("turns")
    })
}

fn tool_results(request: &ChatRequest) -> Vec<String> {
    request
        .messages
        .iter()
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| if let Part::ToolResult { content, .. } = p { Some(content.clone()) } else { None })
        .collect()
}

fn profile(description: &str) -> AgentProfile {
    AgentProfile { description: description.into(), ..AgentProfile::default() }
}

fn engine_on(fake: &FakeProvider, store: Arc<MemoryStore>, prices: Option<PriceTable>) -> Engine {
    let mut builder = Engine::builder(store)
        .provider(Arc::new(fake.clone()))
        .default_model(ModelRef::parse("fake:m").unwrap())
        .profile("researcher", profile("finds facts"))
        .profile("writer", profile("writes prose"));
    if let Some(prices) = prices {
        builder = builder.prices(prices);
    }
    builder.build().unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap()
}

fn entries(store: &MemoryStore, run: &RunId) -> Vec<Entry> {
    cairn::journal::decode_all(&store.load(run).unwrap()).unwrap()
}

fn decisions(entries: &[Entry]) -> Vec<(u64, Value)> {
    entries
        .iter()
        .filter(|e| e.kind == Kind::Decision)
        .filter_map(|e| e.value().filter(|v| v["type"] == "orchestrate").map(|v| (e.seq.0, v)))
        .collect()
}

/// Children answer by prompt: "slow" ones take 5 s (they are cancelled long before), "fail"
/// ones fail, the rest echo their prompt.
fn children() -> FakeScript {
    FakeScript::respond_with(|request: &ChatRequest| {
        let prompt = request.last_user_text().unwrap_or_default();
        if prompt.contains("slow") {
            FakeTurn {
                latency: Some(Duration::from_secs(5)),
                ..FakeTurn::new(FakeReply::Text("late".into()))
            }
        } else if prompt.contains("fail") {
            FakeTurn::new(FakeReply::Error(cairn::Error::new(ErrorCode::ToolFailed, "the child failed")))
        } else {
            FakeTurn::new(FakeReply::Text(format!("found: {prompt}")))
        }
    })
}

fn spawn_three_cancel_finish() -> Vec<FakeTurn> {
    vec![
        tool(
            "parallel_agents",
            json!({"children": [
                {"profile": "researcher", "prompt": "facts about rivers"},
                {"profile": "writer", "prompt": "a poem about lakes"},
                {"profile": "researcher", "prompt": "slow survey of seas"},
            ]}),
        ),
        tool("wait_for_events", json!({"timeout_ms": 2000})),
        // Answered after 300 ms: the slow child is surely in flight by then.
        FakeTurn {
            latency: Some(Duration::from_millis(300)),
            ..tool("cancel_agent", json!({"handle": "c2"}))
        },
        tool("await_all", json!({"handles": ["c0", "c1", "c2"]})),
        tool("finish", json!({"result": "rivers and lakes [c0] [c1]"})),
    ]
}

fn fake(turns: Vec<FakeTurn>) -> FakeProvider {
    FakeProvider::named("fake")
        .on_label("orchestrator", orchestrator(turns))
        .on_label("orchestrator-finalize", FakeScript::new(tool("finish", json!({"result": "what we have"}))))
        .otherwise(children())
}

fn run(engine: &Engine, goal: &str, opts: OrchestrateOptions, options: RunOptions) -> RunOutcome {
    runtime().block_on(async { orchestrate(engine, goal, opts, options).unwrap().result().await.unwrap() })
}

fn resume(engine: &Engine, run: &RunId, goal: &str, opts: OrchestrateOptions) -> RunOutcome {
    let options =
        ResumeOptions { workflow: Some(orchestrate_workflow(goal, opts)), ..ResumeOptions::default() };
    runtime().block_on(async { engine.resume(run, options).unwrap().result().await.unwrap() })
}

#[test]
fn spawn_three_await_cancel_finish_journals_every_decision_before_its_effect() {
    let store = Arc::new(MemoryStore::new());
    let first = fake(spawn_three_cancel_finish());
    let engine = engine_on(&first, store.clone(), None);
    let outcome = run(&engine, "survey water", OrchestrateOptions::default(), RunOptions::default());
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    // Without a policy the value is the raw finish payload.
    assert_eq!(outcome.value, Some(json!("rivers and lakes [c0] [c1]")));

    // What the orchestrator saw: handles, then digests of the two that finished and the
    // cancelled one, each a summary and not a whole transcript.
    let calls = first.calls();
    // Every orchestrator turn must call a tool (it acts only through them); children choose.
    for call in &calls {
        let expected = if call.label.as_deref() == Some("orchestrator") {
            cairn::provider::ToolChoice::Required
        } else {
            cairn::provider::ToolChoice::Auto
        };
        assert_eq!(call.request.tool_choice, expected, "{:?}", call.label);
    }
    let last = calls.iter().rev().find(|c| c.label.as_deref() == Some("orchestrator")).unwrap();
    let results = tool_results(&last.request);
    assert!(results[0].contains("\"c0\"") && results[0].contains("\"c2\""), "{}", results[0]);
    let woken: Value = serde_json::from_str(&results[1]).unwrap();
    assert!(woken["running"].as_array().unwrap().contains(&json!("c2")), "{woken}");
    assert!(!woken["settled"].as_array().unwrap().is_empty(), "{woken}");
    let awaited: Value = serde_json::from_str(&results[3]).unwrap();
    let statuses: Vec<&str> =
        awaited["digests"].as_array().unwrap().iter().map(|d| d["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["ok", "ok", "cancelled"]);
    assert_eq!(awaited["digests"][0]["summary"], "found: facts about rivers");
    assert_eq!(awaited["digests"][0]["artifacts"], json!(["c0/output"]));

    let journal = entries(&store, &outcome.run_id);
    let decided = decisions(&journal);
    let kinds: Vec<&str> = decided.iter().map(|(_, v)| v["decision"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["admit", "admit", "admit", "cancel", "finish"]);
    // Each admission precedes everything of its child's scope; the cancel precedes the
    // child's cancelled terminal; the finish verdict precedes the orchestrator's terminal.
    for (seq, verdict) in &decided {
        match verdict["decision"].as_str().unwrap() {
            "admit" => {
                let scope = format!("at:child:{}", verdict["child"]);
                let first =
                    journal.iter().find(|e| e.scope.to_string().ends_with(&scope)).expect("child entries");
                assert!(*seq < first.seq.0, "admit {seq} after its child's first entry {}", first.seq.0);
            }
            "cancel" => {
                let terminal = journal
                    .iter()
                    .find(|e| {
                        e.scope.to_string().ends_with("at:child:2")
                            && e.status == cairn::journal::Status::Cancelled
                    })
                    .expect("a cancelled terminal");
                assert!(*seq < terminal.seq.0);
            }
            _ => {
                let terminal = journal
                    .iter()
                    .find(|e| {
                        e.kind == Kind::Agent
                            && e.label.as_deref() == Some("orchestrator")
                            && e.status.is_terminal()
                    })
                    .expect("the orchestrator's terminal");
                assert!(*seq < terminal.seq.0);
            }
        }
    }

    // A resume of the settled run replays everything: no model call at all.
    let again = fake(spawn_three_cancel_finish());
    let engine = engine_on(&again, store.clone(), None);
    let replayed = resume(&engine, &outcome.run_id, "survey water", OrchestrateOptions::default());
    assert_eq!(replayed.value, outcome.value);
    assert_eq!(
        again.call_count(),
        0,
        "{:?}",
        again.calls().iter().map(|c| c.label.clone()).collect::<Vec<_>>()
    );
    assert_eq!(replayed.preview.orphaned, 0);
}

#[test]
fn a_refused_admission_journals_its_arithmetic_and_pays_nothing() {
    let store = Arc::new(MemoryStore::new());
    let turns = vec![
        tool(
            "parallel_agents",
            json!({"children": [
                {"profile": "researcher", "prompt": "cheap one"},
                {"profile": "researcher", "prompt": "too dear", "est_cost": 50.0},
                {"profile": "researcher", "prompt": "never tried"},
            ]}),
        ),
        tool("spawn_agent", json!({"profile": "writer", "prompt": "second"})),
        tool("spawn_agent", json!({"profile": "researcher", "prompt": "over the cap"})),
        tool("await_all", json!({"handles": ["c0", "c1"]})),
        tool("finish", json!({"result": "done"})),
    ];
    let scripted = fake(turns);
    let mut prices = PriceTable::shipped();
    prices.set("fake:*", Price::flat(Money::from_usd(0.01).unwrap(), Money::from_usd(0.01).unwrap()));
    let engine = engine_on(&scripted, store.clone(), Some(prices));
    let opts = OrchestrateOptions { max_spawns: 2, ..OrchestrateOptions::default() };
    let outcome = run(&engine, "goal", opts, RunOptions { budget_usd: Some(10.0), ..RunOptions::default() });
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);

    let decided = decisions(&entries(&store, &outcome.run_id));
    let refusals: Vec<&Value> =
        decided.iter().map(|(_, v)| v).filter(|v| v["decision"] == "refuse").collect();
    assert_eq!(refusals.len(), 2, "{decided:?}");
    assert_eq!(refusals[0]["reason"], "budget");
    assert_eq!(refusals[0]["requested_nano_usd"], 50_000_000_000i64);
    assert!(refusals[0]["available_nano_usd"].as_i64().unwrap() < 10_000_000_000);
    assert_eq!(refusals[1]["reason"], "spawn_cap");
    // Only the admitted child was ever called.
    let children: Vec<String> = scripted
        .calls()
        .iter()
        .filter(|c| c.label.as_deref() != Some("orchestrator"))
        .filter_map(|c| c.last_user_text.clone())
        .collect();
    assert_eq!(children.len(), 2);
    assert!(children.contains(&"cheap one".to_owned()) && children.contains(&"second".to_owned()));
    // The model saw the refusal typed, and the batch stopped there.
    let last =
        scripted.calls().into_iter().rev().find(|c| c.label.as_deref() == Some("orchestrator")).unwrap();
    let results = tool_results(&last.request);
    assert!(
        results[0].contains("\"code\":\"budget\"") && results[0].contains("not_attempted"),
        "{}",
        results[0]
    );
    assert!(results[2].contains("\"code\":\"spawn_cap\""), "{}", results[2]);
}

#[derive(Debug)]
struct Counting(Arc<AtomicUsize>);

impl FinishValidator for Counting {
    fn name(&self) -> &str {
        "counting"
    }
    fn check(&self, result: &Value, _children: &[ChildView]) -> Vec<String> {
        self.0.fetch_add(1, Ordering::SeqCst);
        if result.as_str().is_some_and(|s| s.contains("## Findings")) {
            Vec::new()
        } else {
            vec!["no findings heading".into()]
        }
    }
}

#[test]
fn a_rejected_finish_is_repaired_and_every_verdict_replays_without_validators() {
    let store = Arc::new(MemoryStore::new());
    let turns = || {
        vec![
            tool("spawn_agent", json!({"profile": "researcher", "prompt": "facts"})),
            tool("await_any", json!({"handles": ["c0"]})),
            tool("finish", json!({"result": "just prose"})),
            tool("finish", json!({"result": "## Findings\nfacts [c0]"})),
        ]
    };
    let checked = Arc::new(AtomicUsize::new(0));
    let opts = || {
        let mut opts = OrchestrateOptions {
            acceptance: Some(Acceptance { policy: ChildPolicy::AllOk, min_spawned_children: Some(1) }),
            ..OrchestrateOptions::default()
        };
        opts.validation.min_cited_children = Some(1);
        opts.validation.custom.push(Arc::new(Counting(checked.clone())));
        opts
    };
    let fake1 = fake(turns());
    let engine = engine_on(&fake1, store.clone(), None);
    let outcome = run(&engine, "goal", opts(), RunOptions::default());
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    let value = outcome.value.clone().unwrap();
    assert_eq!(value["completion"], "complete");
    assert_eq!(value["result"], "## Findings\nfacts [c0]");
    assert_eq!(value["child_status_counts"]["ok"], 1);
    // A child's cost in the roster carries its unit (#29).
    assert_eq!(value["children"][0]["cost_nano_usd"], 0, "{value:#}");
    assert_eq!(value["children"][0]["cost_usd"], 0.0, "{value:#}");
    super::newcomer_output::assert_money_has_units("the orchestration's envelope", &value);
    assert_eq!(checked.load(Ordering::SeqCst), 2);
    // The rejection reached the model as the finish call's error.
    let last = fake1.calls().into_iter().rev().find(|c| c.label.as_deref() == Some("orchestrator")).unwrap();
    assert!(tool_results(&last.request)[2].contains("no findings heading"));
    let verdicts: Vec<String> = decisions(&entries(&store, &outcome.run_id))
        .iter()
        .filter(|(_, v)| v["decision"] == "finish" || v["decision"] == "acceptance")
        .map(|(_, v)| {
            format!(
                "{}:{}",
                v["decision"],
                v["verdict"].as_str().unwrap_or(if v["accepted"] == true { "accepted" } else { "refused" })
            )
        })
        .collect();
    assert_eq!(verdicts, ["\"finish\":rejected", "\"finish\":accepted", "\"acceptance\":accepted"]);

    // Resumed with a drifted policy: the journaled verdicts stand, no validator runs again.
    let fake2 = fake(turns());
    let engine = engine_on(&fake2, store.clone(), None);
    let mut drifted = opts();
    drifted.validation.max_repairs = 0;
    drifted.acceptance =
        Some(Acceptance { policy: ChildPolicy::MinSuccessful(5), min_spawned_children: Some(9) });
    let replayed = resume(&engine, &outcome.run_id, "goal", drifted);
    assert_eq!(replayed.status, RunStatus::Ok, "{:?}", replayed.error);
    assert_eq!(replayed.value, outcome.value);
    assert_eq!(checked.load(Ordering::SeqCst), 2);
    assert_eq!(fake2.call_count(), 0);
}

#[test]
fn a_violated_acceptance_fails_typed_with_the_child_counts_and_replays_so() {
    let store = Arc::new(MemoryStore::new());
    let turns = || {
        vec![
            tool(
                "parallel_agents",
                json!({"children": [
                    {"profile": "researcher", "prompt": "good"},
                    {"profile": "researcher", "prompt": "fail please"},
                ]}),
            ),
            tool("await_all", json!({"handles": ["c0", "c1"]})),
            tool("finish", json!({"result": "half"})),
        ]
    };
    let opts = || OrchestrateOptions {
        acceptance: Some(Acceptance { policy: ChildPolicy::AllOk, min_spawned_children: None }),
        ..OrchestrateOptions::default()
    };
    let engine = engine_on(&fake(turns()), store.clone(), None);
    let outcome = run(&engine, "goal", opts(), RunOptions::default());
    assert_eq!(outcome.status, RunStatus::Error);
    let error = outcome.error.clone().unwrap();
    assert_eq!(error.code, ErrorCode::AcceptanceFailed);
    assert!(error.message.contains("1 ok") && error.message.contains("1 error"), "{}", error.message);

    // min_successful 1 would accept, but the journaled verdict rules the resume.
    let fake2 = fake(turns());
    let engine = engine_on(&fake2, store.clone(), None);
    let lenient = OrchestrateOptions {
        acceptance: Some(Acceptance { policy: ChildPolicy::MinSuccessful(1), min_spawned_children: None }),
        ..OrchestrateOptions::default()
    };
    let replayed = resume(&engine, &outcome.run_id, "goal", lenient);
    assert_eq!(replayed.error.map(|e| e.code), Some(ErrorCode::AcceptanceFailed));
    // The failed child is the only call a resume makes again (a failure reruns).
    let labels: Vec<Option<String>> = fake2.calls().iter().map(|c| c.label.clone()).collect();
    assert!(labels.iter().all(|l| l.as_deref() == Some("c1")), "{labels:?}");

    // And a min_successful policy accepts a degraded roster as partial, naming the child.
    let store = Arc::new(MemoryStore::new());
    let engine = engine_on(&fake(turns()), store, None);
    let outcome = run(
        &engine,
        "goal",
        OrchestrateOptions {
            acceptance: Some(Acceptance {
                policy: ChildPolicy::MinSuccessful(1),
                min_spawned_children: None,
            }),
            ..OrchestrateOptions::default()
        },
        RunOptions::default(),
    );
    let value = outcome.value.unwrap();
    assert_eq!(value["completion"], "partial");
    assert!(value["degraded"][0].as_str().unwrap().starts_with("c1"), "{value}");
}

#[test]
fn the_termination_account_finishes_partial_under_a_tight_budget() {
    let store = Arc::new(MemoryStore::new());
    let turns = vec![
        tool("spawn_agent", json!({"profile": "researcher", "prompt": "expensive"})),
        tool("await_all", json!({"handles": ["c0"]})),
        tool("finish", json!({"result": "never reached"})),
    ];
    // The child's answer costs most of the ceiling, so the orchestrator's next turn cannot
    // be granted; the reserve pays for the finalization turn.
    let fake = FakeProvider::named("fake")
        .on_label("orchestrator", orchestrator(turns))
        .on_label(
            "orchestrator-finalize",
            FakeScript::new(tool("finish", json!({"result": "what we have [c0]"}))),
        )
        .otherwise(FakeScript::text("an expensive answer").with_usage(Usage {
            input_tokens: 10,
            output_tokens: 9_300,
            ..Usage::default()
        }));
    let mut prices = PriceTable::shipped();
    prices.set("fake:*", Price::flat(Money::from_usd(1.0).unwrap(), Money::from_usd(100.0).unwrap()));
    let engine = engine_on(&fake, store.clone(), Some(prices.clone()));
    let opts = OrchestrateOptions { finalize_share_ppm: 100_000, ..OrchestrateOptions::default() };
    let outcome =
        run(&engine, "goal", opts.clone(), RunOptions { budget_usd: Some(1.0), ..RunOptions::default() });
    let value = outcome.value.clone().unwrap_or_else(|| panic!("{:?}", outcome.error));
    assert_eq!(value["completion"], "partial", "{value}");
    assert_eq!(value["result"], "what we have [c0]");
    assert!(outcome.cost.total.cost <= Money::from_usd(1.0).unwrap());
    let decided = decisions(&entries(&store, &outcome.run_id));
    assert!(decided.iter().any(|(_, v)| v["decision"] == "finalize"), "{decided:?}");

    // Configured to fail instead: a typed budget_exhausted, no finalization turn.
    let fake = FakeProvider::named("fake")
        .on_label(
            "orchestrator",
            orchestrator(vec![
                tool("spawn_agent", json!({"profile": "researcher", "prompt": "expensive"})),
                tool("await_all", json!({"handles": ["c0"]})),
            ]),
        )
        .otherwise(FakeScript::text("dear").with_usage(Usage {
            input_tokens: 10,
            output_tokens: 9_300,
            ..Usage::default()
        }));
    let engine = engine_on(&fake, Arc::new(MemoryStore::new()), Some(prices));
    let fail = OrchestrateOptions { at_cap: cairn::AtCap::Fail, ..opts };
    let outcome = run(&engine, "goal", fail, RunOptions { budget_usd: Some(1.0), ..RunOptions::default() });
    assert_eq!(outcome.error.map(|e| e.code), Some(ErrorCode::BudgetExhausted));
    assert!(fake.calls().iter().all(|c| c.label.as_deref() != Some("orchestrator-finalize")));
}

/// A judge that compares the years in each claim and its source.
fn judge() -> FakeScript {
    FakeScript::respond_with(|request: &ChatRequest| {
        let prompt = request.last_user_text().unwrap_or_default();
        let year =
            |line: &str| line.split(|c: char| !c.is_ascii_digit()).find(|w| w.len() == 4).map(str::to_owned);
        let mut rulings = Vec::new();
        let mut claim = None;
        for line in prompt.lines() {
            if let Some(text) = line.strip_prefix("Claim: ") {
                claim = year(text);
            }
            if line.starts_with("Source [") {
                let verdict = if claim.is_some() && claim == year(line.split("]: ").nth(1).unwrap_or("")) {
                    "supported"
                } else {
                    "contradicted"
                };
                rulings.push(json!({"pair": rulings.len(), "verdict": verdict}));
            }
        }
        FakeTurn::new(FakeReply::Json(json!({ "rulings": rulings })))
    })
}

#[test]
fn the_claim_pass_finds_a_planted_contradiction_and_replays_at_zero_cost() {
    let store = Arc::new(MemoryStore::new());
    let turns = || {
        vec![
            tool(
                "parallel_agents",
                json!({"children": [
                    {"profile": "researcher", "prompt": "when did the bridge open? 1932"},
                    {"profile": "researcher", "prompt": "when did the tower open? 1889"},
                ]}),
            ),
            tool("await_all", json!({"handles": ["c0", "c1"]})),
            tool(
                "finish",
                json!({"result": "The bridge opened in 1950 [c0]. The tower opened in 1889 [c1]."}),
            ),
        ]
    };
    let make = || {
        FakeProvider::named("fake")
            .on_label("orchestrator", orchestrator(turns()))
            .on_label("claim-judge", judge())
            .otherwise(children())
    };
    let fake1 = make();
    let engine = engine_on(&fake1, store.clone(), None);
    let opts = OrchestrateOptions { claims: Some(ClaimPolicy::Report), ..OrchestrateOptions::default() };
    let outcome = run(&engine, "goal", opts.clone(), RunOptions::default());
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    let claims = outcome.value.as_ref().unwrap()["claims"].clone();
    assert_eq!(claims[0]["handle"], "c0");
    assert_eq!(claims[0]["verdict"], "contradicted");
    assert_eq!(claims[1]["verdict"], "supported");
    assert!(claims[0]["excerpt"].as_str().unwrap().contains("1932"));
    let judge_calls = fake1.calls().iter().filter(|c| c.label.as_deref() == Some("claim-judge")).count();
    assert_eq!(judge_calls, 1);
    let decided = decisions(&entries(&store, &outcome.run_id));
    assert!(
        decided
            .iter()
            .any(|(_, v)| v["decision"] == "claims" && v["findings"][0]["verdict"] == "contradicted")
    );

    let fake2 = make();
    let engine = engine_on(&fake2, store.clone(), None);
    let replayed = resume(&engine, &outcome.run_id, "goal", opts);
    assert_eq!(replayed.value, outcome.value);
    assert_eq!(fake2.call_count(), 0);

    // Under policy fail, the contradiction fails the run typed.
    let engine = engine_on(&make(), Arc::new(MemoryStore::new()), None);
    let strict = OrchestrateOptions { claims: Some(ClaimPolicy::Fail), ..OrchestrateOptions::default() };
    let outcome = run(&engine, "goal", strict, RunOptions::default());
    assert_eq!(outcome.error.map(|e| e.code), Some(ErrorCode::AcceptanceFailed));
}

/// 200 children under one orchestrator at concurrency 12, on the SQLite store `cairn` opens:
/// every child admitted by a journaled decision, settled ok with its terminal entry, in
/// bounded time.
#[test]
fn two_hundred_children_under_one_orchestrator_at_concurrency_twelve() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        cairn::store::SqliteStore::open(&dir.path().join("cairn.db"), cairn::store::SqliteOptions::new())
            .unwrap(),
    );
    let mut turns = Vec::new();
    for batch in 0..7 {
        let children: Vec<Value> = (batch * 32..(batch * 32 + 32).min(200))
            .map(|i| json!({"profile": "echoer", "prompt": format!("item {i}")}))
            .collect();
        turns.push(tool("parallel_agents", json!({ "children": children })));
    }
    let handles: Vec<String> = (0..200).map(|i| format!("c{i}")).collect();
    turns.push(tool("await_all", json!({ "handles": handles })));
    turns.push(tool("finish", json!({"result": "all echoed"})));
    let fake = FakeProvider::named("fake").on_label("orchestrator", orchestrator(turns));
    let engine = Engine::builder(store.clone())
        .provider(Arc::new(fake.clone()))
        .default_model(ModelRef::parse("fake:m").unwrap())
        .profile(
            "echoer",
            AgentProfile {
                description: "echoes".into(),
                model: Some(ModelRef::parse("echo:default").unwrap()),
                ..AgentProfile::default()
            },
        )
        .max_concurrency(12)
        .build()
        .unwrap();
    let opts = OrchestrateOptions {
        max_spawns: 200,
        acceptance: Some(Acceptance { policy: ChildPolicy::AllOk, min_spawned_children: Some(200) }),
        ..OrchestrateOptions::default()
    };
    let outcome = runtime().block_on(async {
        tokio::time::timeout(
            Duration::from_secs(120),
            orchestrate(&engine, "echo everything", opts, RunOptions::default()).unwrap().result(),
        )
        .await
        .expect("200 children settle in bounded time")
        .unwrap()
    });
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    let value = outcome.value.unwrap();
    assert_eq!(value["child_status_counts"]["ok"], 200);
    assert_eq!(value["completion"], "complete");
    assert_eq!(fake.call_count(), 9);
    // In the journal: 200 admissions, each before its child's first entry, and 200 ok children.
    let entries = cairn::journal::decode_all(&store.load(&outcome.run_id).unwrap()).unwrap();
    let admitted: Vec<(u64, u64)> = decisions(&entries)
        .into_iter()
        .filter(|(_, d)| d["decision"] == "admit")
        .map(|(seq, d)| (seq, d["child"].as_u64().unwrap()))
        .collect();
    assert_eq!(admitted.len(), 200);
    for (seq, child) in admitted {
        let scope = format!("/at:child:{child}");
        let first = entries.iter().find(|e| e.kind == Kind::Agent && e.scope.to_string().ends_with(&scope));
        assert!(first.is_some_and(|e| e.seq.0 > seq), "child {child} has no entry after its admission");
    }
    let ok = entries
        .iter()
        .filter(|e| e.kind == Kind::Agent && e.status == cairn::journal::Status::Ok)
        .filter(|e| e.scope.to_string().contains("/at:child:"))
        .count();
    assert_eq!(ok, 200);
}

#[test]
fn a_script_hands_a_goal_to_the_orchestrator_and_bad_options_are_typed() {
    let store = Arc::new(MemoryStore::new());
    let engine = engine_on(&fake(spawn_three_cancel_finish()), store, None);
    let source = r#"
        let out = orchestrate("survey water", #{
            profiles: ["researcher", "writer"],
            acceptance: #{ policy: #{ min_successful: 2 }, min_spawned_children: 3 },
            validation: #{ patterns: [#{ pattern: "\\[c\\d+\\]", min: 2 }] },
        });
        #{ completion: out.completion, ok: out.child_status_counts.ok, result: out.result }
    "#;
    let outcome = runtime().block_on(async {
        engine
            .run_script(&cairn::Script::rhai("s", source), Value::Null, RunOptions::default())
            .unwrap()
            .result()
            .await
            .unwrap()
    });
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    assert_eq!(
        outcome.value,
        Some(json!({"completion": "partial", "ok": 2, "result": "rivers and lakes [c0] [c1]"}))
    );

    for (opts, wanted) in [
        (r#"#{ bogus: 1 }"#, "bogus"),
        (r#"#{ acceptance: #{ policy: "most" } }"#, "acceptance"),
        (r#"#{ validation: #{ patterns: [#{ pattern: "(" }] } }"#, "pattern"),
        (r#"#{ profiles: ["nobody"] }"#, "nobody"),
    ] {
        let engine = engine_on(&fake(spawn_three_cancel_finish()), Arc::new(MemoryStore::new()), None);
        let source = format!("orchestrate(\"goal\", {opts})");
        // Lint refuses what it can see before the run starts; the rest fails the run typed.
        let error = runtime().block_on(async {
            match engine.run_script(&cairn::Script::rhai("s", &source), Value::Null, RunOptions::default()) {
                Err(error) => error,
                Ok(handle) => {
                    handle.result().await.unwrap().error.unwrap_or_else(|| panic!("{opts} was accepted"))
                }
            }
        });
        assert!(matches!(error.code, ErrorCode::Validation | ErrorCode::Config), "{opts}: {error:?}");
        assert!(error.message.contains(wanted), "{opts}: {}", error.message);
    }
}

/// Opt-in: the tiny real model of `shared/fixtures/README.md` as orchestrator and children.
/// Whatever it does (call the tools, answer prose, loop), the orchestration ends typed.
#[test]
fn live_an_orchestration_by_a_real_model_ends_typed() {
    let Ok(url) = std::env::var("CAIRN_TEST_OPENAI_BASE_URL") else {
        eprintln!("skipped: set CAIRN_TEST_OPENAI_BASE_URL to run against a real server");
        return;
    };
    let model = std::env::var("CAIRN_TEST_OPENAI_MODEL").unwrap_or_else(|_| "smollm2".into());
    let provider = cairn::provider::openai_compatible::OpenAiCompatibleProvider::new("local", &url)
        .unwrap()
        .with_capabilities(cairn::provider::Capabilities {
            native_schema: true,
            tools: true,
            reasoning: false,
        });
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::builder(store.clone())
        .provider(Arc::new(provider))
        .default_model(ModelRef::parse(&format!("local:{model}")).unwrap())
        .profile(
            "helper",
            AgentProfile {
                description: "answers a short question".into(),
                max_output_tokens: Some(48),
                max_turns: Some(2),
                ..AgentProfile::default()
            },
        )
        .retries(8, Duration::from_millis(250))
        .build()
        .unwrap();
    let opts = OrchestrateOptions { max_turns: 4, max_spawns: 2, ..OrchestrateOptions::default() };
    let outcome = runtime().block_on(async {
        tokio::time::timeout(
            Duration::from_secs(300),
            orchestrate(
                &engine,
                "Name two colours. Spawn one helper per colour, then finish.",
                opts,
                RunOptions::default(),
            )
            .unwrap()
            .result(),
        )
        .await
        .expect("the orchestration ends")
        .unwrap()
    });
    // What the model did, for whoever runs this by hand (`--nocapture`).
    let journal = entries(&store, &outcome.run_id);
    let decided: Vec<String> =
        decisions(&journal).iter().map(|(_, d)| d["decision"].as_str().unwrap_or("?").to_owned()).collect();
    let calls = journal.iter().filter(|e| e.kind == Kind::Agent && e.status.is_terminal()).count();
    eprintln!(
        "live orchestration: {:?}, {calls} agent call(s) settled, decisions {decided:?}, value {:?}, error {:?}",
        outcome.status, outcome.value, outcome.error
    );
    match outcome.status {
        RunStatus::Ok => assert!(outcome.value.is_some()),
        RunStatus::Error | RunStatus::Exhausted => {
            let error = outcome.error.expect("a typed error");
            assert!(!error.message.is_empty(), "{error:?}");
        }
        other => panic!("the orchestration ended {other:?}"),
    }
}

/// The orchestrator's own call holds no model slot while its tools wait for children: at
/// `max_concurrency(1)` its children still run (they would wait forever for the slot the
/// orchestrator holds), and the orchestrator's turns still count against the limit.
#[test]
fn an_orchestrator_at_concurrency_one_leaves_its_slot_to_its_children() {
    let store = Arc::new(MemoryStore::new());
    let turns = vec![
        tool(
            "parallel_agents",
            json!({"children": [
                {"profile": "researcher", "prompt": "facts about rivers"},
                {"profile": "writer", "prompt": "a poem about lakes"},
            ]}),
        ),
        tool("await_all", json!({"handles": ["c0", "c1"]})),
        tool("finish", json!({"result": "rivers and lakes [c0] [c1]"})),
    ];
    // Children take a moment, so an orchestrator turn made beside one would overlap it.
    let fake = FakeProvider::named("fake").on_label("orchestrator", orchestrator(turns)).otherwise(
        FakeScript::respond_with(|request: &ChatRequest| FakeTurn {
            latency: Some(Duration::from_millis(30)),
            ..FakeTurn::new(FakeReply::Text(format!(
                "found: {}",
                request.last_user_text().unwrap_or_default()
            )))
        }),
    );
    let counting = Arc::new(InFlight { inner: fake.clone(), now: Arc::default(), peak: Arc::default() });
    let engine = Engine::builder(store)
        .provider(counting.clone())
        .default_model(ModelRef::parse("fake:m").unwrap())
        .profile("researcher", profile("finds facts"))
        .profile("writer", profile("writes prose"))
        .max_concurrency(1)
        .build()
        .unwrap();
    let outcome = runtime().block_on(async {
        tokio::time::timeout(
            Duration::from_secs(20),
            orchestrate(&engine, "goal", OrchestrateOptions::default(), RunOptions::default())
                .unwrap()
                .result(),
        )
        .await
        .expect("the orchestration ends: its children got the model slot")
        .unwrap()
    });
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    assert_eq!(outcome.value, Some(json!("rivers and lakes [c0] [c1]")));
    // Two children and three orchestrator turns, one model call at a time.
    assert_eq!(fake.call_count(), 5);
    assert_eq!(counting.peak.load(Ordering::SeqCst), 1, "model calls overlapped at max_concurrency(1)");
}

struct Leaving(Arc<AtomicUsize>);

impl Drop for Leaving {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A provider that counts its streams in flight and the most at once.
#[derive(Debug)]
struct InFlight {
    inner: FakeProvider,
    now: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl cairn::provider::Provider for InFlight {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self, model: &str) -> cairn::provider::Capabilities {
        self.inner.capabilities(model)
    }
    fn stream(
        &self,
        request: ChatRequest,
        cancel: tokio_util::sync::CancellationToken,
    ) -> futures::stream::BoxStream<'static, cairn::provider::ChatEvent> {
        use futures::StreamExt;
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        let guard = Leaving(Arc::clone(&self.now));
        // The call is in flight until its stream is dropped.
        self.inner
            .stream(request, cancel)
            .map(move |event| {
                let _ = &guard;
                event
            })
            .boxed()
    }
}

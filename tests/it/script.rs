//! Rhai scripts run end to end through the engine: every global, the error policies, the
//! stored source and resume, and the sandbox boundary.

use std::sync::Arc;
use std::time::Duration;

use cairn::{Engine, ErrorCode, MemoryStore, ResumeOptions, RunOptions, RunStatus, Script};
use serde_json::{Value, json};

fn engine() -> (Arc<MemoryStore>, Engine) {
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::builder(store.clone())
        .host_function("add", |args: Value| async move {
            Ok(json!(args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)))
        })
        .host_function("fail", |_args: Value| async move {
            Err::<Value, _>(cairn::Error::new(ErrorCode::ToolFailed, "the tool broke"))
        })
        .build()
        .unwrap();
    (store, engine)
}

fn run(engine: &Engine, source: &str, args: Value) -> cairn::RunOutcome {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let handle = engine.run_script(&Script::rhai("test", source), args, RunOptions::default()).unwrap();
        tokio::time::timeout(Duration::from_secs(20), handle.result()).await.expect("the run hung").unwrap()
    })
}

#[test]
fn globals_bridge_onto_the_engine() {
    let (_store, engine) = engine();
    let outcome = run(
        &engine,
        r#"
        let a = agent("hello");
        let fan = parallel([|| agent("left"), || agent("right")]);
        let mapped = parallel(args.items, |x| agent(`item ${x}`));
        let piped = pipeline(args.items, [|x| x * 10, |y| y + 1]);
        let s = step("compute", || 40 + 2);
        let sum = host_call("add", #{a: 2, b: 3});
        let p = phase("draft", || agent("draft it"));
        log("info", "done", #{n: 1});
        let t = now();
        let r = random("k");
        let u = uuid();
        #{a: a, fan: fan, mapped: mapped, piped: piped, s: s, sum: sum, p: p,
          t_ok: t > 0, r_ok: r >= 0.0 && r < 1.0, u_len: u.len(), spent: budget.spent()}
        "#,
        json!({"items": [1, 2, 3]}),
    );
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    let v = outcome.value.unwrap();
    assert_eq!(v["a"], "echo: hello");
    assert_eq!(v["fan"], json!(["echo: left", "echo: right"]));
    assert_eq!(v["mapped"], json!(["echo: item 1", "echo: item 2", "echo: item 3"]));
    assert_eq!(v["piped"], json!([11, 21, 31]));
    assert_eq!(v["s"], 42);
    assert_eq!(v["sum"], 5);
    assert_eq!(v["p"], "echo: draft it");
    assert_eq!(v["t_ok"], true);
    assert_eq!(v["r_ok"], true);
    assert_eq!(v["u_len"], 36);
}

#[test]
fn a_script_run_resumes_from_its_stored_source_without_repaying() {
    let (store, engine) = engine();
    let source = r#"
        let a = agent("first");
        let ok = await_external("approve", #{prompt: "go?", schema: #{type: "object", required: ["yes"]}});
        let b = agent("second");
        #{a: a, ok: ok, b: b}
    "#;
    let outcome = run(&engine, source, json!({}));
    assert_eq!(outcome.status, RunStatus::Suspended);
    assert_eq!(outcome.pending[0].key, "approve");
    let run_id = outcome.run_id.clone();
    // A resolution that does not match the wait's schema is refused; the wait stays open.
    let bad = engine.resolve_external(&run_id, "approve", json!({"no": 1})).unwrap_err();
    assert_eq!(bad.code, ErrorCode::Validation);
    assert!(engine.resolve_external(&run_id, "approve", json!({"yes": true})).unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let resumed = runtime.block_on(async {
        engine.resume(&run_id, ResumeOptions::default()).unwrap().result().await.unwrap()
    });
    assert_eq!(resumed.status, RunStatus::Ok, "{:?}", resumed.error);
    assert_eq!(resumed.value.unwrap(), json!({"a": "echo: first", "ok": {"yes": true}, "b": "echo: second"}));
    assert_eq!(resumed.preview.hits, 2, "the first agent and the resolved wait replay");
    // A changed source is refused by hash.
    let changed =
        ResumeOptions { script: Some(Script::rhai("test", "agent(\"other\")")), ..Default::default() };
    let err = engine.resume(&run_id, changed).unwrap_err();
    assert_eq!(err.code, ErrorCode::Config);
    let meta = cairn::JournalStore::get_meta(&*store, &run_id).unwrap().unwrap();
    assert_eq!(meta.dialect.as_deref(), Some("rhai"));
}

#[test]
fn strict_errors_are_catchable_and_carry_their_code() {
    let (_store, engine) = engine();
    let outcome = run(
        &engine,
        r#"
        let caught = ();
        try { host_call("fail", #{}); } catch (e) { caught = e.code; }
        let thrown = ();
        try { throw "boom"; } catch (e) { thrown = e; }
        #{caught: caught, thrown: thrown}
        "#,
        json!({}),
    );
    assert_eq!(outcome.value.unwrap(), json!({"caught": "tool_failed", "thrown": "boom"}));
}

#[test]
fn planner_scripts_run_lenient() {
    let (_store, engine) = engine();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let outcome = runtime.block_on(async {
        let script = Script::rhai("planned", "let x = host_call(\"fail\", #{}); #{x: x}").planner_written();
        engine.run_script(&script, json!({}), RunOptions::default()).unwrap().result().await.unwrap()
    });
    assert_eq!(outcome.status, RunStatus::Ok);
    assert_eq!(outcome.value.unwrap(), json!({"x": null}));
    assert_eq!(outcome.dropped.len(), 1);
}

#[test]
fn closures_never_cross_as_json() {
    let (_store, engine) = engine();
    let outcome = run(&engine, "let f = || 1; let args2 = #{f: f}; host_call(\"add\", args2)", json!({}));
    assert_eq!(outcome.status, RunStatus::Error);
    assert_eq!(outcome.error.unwrap().code, ErrorCode::Validation);
}

#[test]
fn rejected_scripts_write_nothing() {
    let (store, engine) = engine();
    let err =
        engine.run_script(&Script::rhai("bad", "eval(\"1\")"), json!({}), RunOptions::default()).unwrap_err();
    assert_eq!(err.code, ErrorCode::Validation);
    assert!(err.message.contains("forbidden"), "{}", err.message);
    assert!(cairn::JournalStore::list_runs(&*store, &Default::default()).unwrap().is_empty());
}

#[test]
fn a_script_agent_uses_the_fs_read_toolset_and_a_schema() {
    use cairn::testing::{FakeProvider, FakeReply, FakeScript, FakeTurn};
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "the launch is on tuesday\n").unwrap();
    let fake = FakeProvider::named("fake").on_any(
        FakeScript::tool_call("read_file", json!({"path": "notes.txt"})).then(FakeTurn {
            reply: FakeReply::Json(json!({"day": "tuesday"})),
            usage: None,
            latency: None,
        }),
    );
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::builder(store)
        .provider(Arc::new(fake.clone()))
        .toolset(cairn::fs_read_toolset(dir.path()).unwrap())
        .build()
        .unwrap();
    let outcome = run(
        &engine,
        r#"agent("when is the launch?", #{
            model: "fake:reader",
            tools: ["fs-read"],
            schema: #{type: "object", required: ["day"], properties: #{day: #{type: "string"}}},
        })"#,
        json!({}),
    );
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    assert_eq!(outcome.value.unwrap(), json!({"day": "tuesday"}));
    let calls = fake.calls();
    assert_eq!(calls.len(), 2);
    let second = serde_json::to_string(&calls[1].request.messages).unwrap();
    assert!(second.contains("the launch is on tuesday"), "the tool result reached the model: {second}");
    assert!(calls[0].request.tools.iter().any(|t| t.name == "read_file"));
}

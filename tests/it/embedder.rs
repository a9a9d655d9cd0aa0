//! cairn as an embedder meets it: only the crate root's API and its public modules (#29's
//! "An embedder's crate"). A `cairn.toml` read by the library and wired by
//! `EngineBuilder::config`/`from_config`, one store for the builder, `Script::lua`, a typed
//! closure tool, a rejected script's typed diagnostics, and a closure workflow resumed by the
//! engine that ran it.

use std::sync::Arc;

use cairn::testing::{FakeProvider, FakeScript};
use cairn::{
    AgentOptions, Config, EngineBuilder, Error, ErrorCode, FnTool, MemoryStore, Money, ResumeOptions,
    RunOptions, RunStatus, Script, Toolset, Workflow,
};
use serde_json::{Value, json};

/// Everything a request carried, as text (tool results included).
fn request_text(call: &cairn::testing::LoggedCall) -> String {
    serde_json::to_string(&call.request.messages).unwrap()
}

#[tokio::test]
async fn a_config_file_wires_prices_routing_profiles_toolsets_permissions_and_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("notes")).unwrap();
    std::fs::write(dir.path().join("notes/a.txt"), "the notes say hello").unwrap();
    let path = dir.path().join("cairn.toml");
    std::fs::write(
        &path,
        r#"
        store = "jsonl:runs"
        [budget]
        default_usd = 0.25
        [routing]
        default = "fake:m"
        # Priced here; the embedder registers its own provider under this name below.
        [providers.fake]
        kind = "openai-compatible"
        base_url = "http://127.0.0.1:9/v1"
        prices = { m = [3.0, 15.0] }
        [profiles.reader]
        description = "Reads the notes."
        tools = ["notes"]
        [toolsets.notes]
        root = "notes"
        [permissions]
        default = "allow"
        deny = ["search_text"]
        "#,
    )
    .unwrap();
    let config = Config::from_file(&path).unwrap();
    assert_eq!(config.store_url(), Some(format!("jsonl:{}", dir.path().join("runs").display()).as_str()));

    let fake = FakeProvider::named("fake").on_agent_type(
        "reader",
        FakeScript::tool_call("read_file", json!({"path": "a.txt"}))
            .then_tool_call("search_text", json!({"pattern": "hello"}))
            .then_text("done"),
    );
    let store = Arc::new(MemoryStore::new());
    let engine = EngineBuilder::new(store.clone())
        .config(&config)
        .unwrap()
        .provider(Arc::new(fake.clone()))
        .build()
        .unwrap();
    assert_eq!(engine.registered().profiles, ["reader"]);

    let wf = Workflow::new("read", |ctx, _| async move {
        ctx.agent(
            "read the notes",
            AgentOptions { profile: Some("reader".into()), ..AgentOptions::default() },
        )
        .await
    });
    let handle = engine.run(&wf, json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let outcome = handle.result().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    assert_eq!(outcome.value, Some(json!("done")));

    let calls = fake.calls();
    assert_eq!(calls.len(), 3);
    assert!(calls.iter().all(|call| call.model == "m"), "routing.default sends every call to fake:m");
    assert!(request_text(&calls[1]).contains("the notes say hello"), "the toolset's root is notes/");
    assert!(request_text(&calls[2]).contains("denied by rule"), "permissions deny search_text");
    // The price comes from the file: $3 and $15 per million tokens.
    let by_model = &outcome.cost.by_model["fake:m"];
    let usage = by_model.usage;
    let expected =
        Money::from_usd((usage.input_tokens as f64 * 3.0 + usage.output_tokens as f64 * 15.0) / 1e6).unwrap();
    assert!(by_model.cost > Money::ZERO);
    assert_eq!(by_model.cost, expected);
    let meta = cairn::JournalStore::get_meta(&*store, &run).unwrap().unwrap();
    assert_eq!(meta.budget_ceiling, Some(Money::from_usd(0.25).unwrap()), "budget.default_usd");
}

#[tokio::test]
async fn from_config_opens_the_store_the_file_names_relative_to_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.toml");
    std::fs::write(&path, "store = \"jsonl:runs\"\n").unwrap();
    let engine = EngineBuilder::from_config(&Config::from_file(&path).unwrap()).unwrap().build().unwrap();
    let script = Script::rhai("hello", "agent(\"hi\")");
    let handle = engine.run_script(&script, json!({}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    assert_eq!(handle.result().await.unwrap().value, Some(json!("echo: hi")));
    assert!(
        dir.path().join("runs").join(format!("{run}.jsonl")).exists(),
        "the run is in runs/ beside the file"
    );

    let typo = Config::from_toml("[budget]\ndefault_usdd = 1\n").unwrap_err();
    assert_eq!(typo.code, ErrorCode::Config);
    assert!(typo.message.contains("default_usdd"), "{typo}");
    let missing = Config::from_file(&dir.path().join("nope.toml")).unwrap_err();
    assert_eq!(missing.code, ErrorCode::Config);
}

#[tokio::test]
async fn one_store_builds_an_engine_that_runs_lua_and_rhai() {
    let engine = EngineBuilder::new(Arc::new(MemoryStore::new())).build().unwrap();
    for script in [Script::lua("hi", "return agent(\"hi\")"), Script::rhai("hi", "agent(\"hi\")")] {
        let outcome =
            engine.run_script(&script, json!({}), RunOptions::default()).unwrap().result().await.unwrap();
        assert_eq!(outcome.value, Some(json!("echo: hi")));
    }
}

#[derive(serde::Deserialize)]
struct Add {
    a: i64,
    b: i64,
}

#[tokio::test]
async fn a_typed_closure_is_a_tool_the_model_calls() {
    let schema = json!({
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"]
    });
    let add = FnTool::new("add", "Adds two integers.", schema, |args: Add| async move {
        Ok::<_, Error>(json!({"sum": args.a + args.b}))
    });
    let fake = FakeProvider::named("fake").on_any(
        FakeScript::tool_call("add", json!({"a": 2, "b": 40}))
            .then_tool_call("add", json!({"a": "two", "b": 1}))
            .then_text("42"),
    );
    let store = Arc::new(MemoryStore::new());
    let engine = EngineBuilder::new(store)
        .provider(Arc::new(fake.clone()))
        .default_model(cairn::ModelRef::parse("fake:m").unwrap())
        .toolset(Toolset::new("math", vec![Arc::new(add)]))
        .build()
        .unwrap();
    let wf = Workflow::new("sum", |ctx, _| async move {
        ctx.agent("add 2 and 40", AgentOptions { tools: vec!["math".into()], ..AgentOptions::default() })
            .await
    });
    let outcome = engine.run(&wf, json!({}), RunOptions::default()).unwrap().result().await.unwrap();
    assert_eq!(outcome.value, Some(json!("42")), "{:?}", outcome.error);
    let calls = fake.calls();
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[0].request.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["add"]);
    assert!(request_text(&calls[1]).contains(r#"{\"sum\":42}"#), "{}", request_text(&calls[1]));
    // Arguments the schema refuses never reach the closure: the model is told, and may retry.
    assert!(request_text(&calls[2]).contains("\\\"two\\\""), "{}", request_text(&calls[2]));
}

#[tokio::test]
async fn a_rejected_script_carries_its_diagnostics_typed() {
    let engine = EngineBuilder::new(Arc::new(MemoryStore::new())).build().unwrap();
    for (script, rule) in [
        (Script::rhai("bad", "let x = agnet(\"hi\");\nx"), "unknown-function"),
        (Script::lua("bad", "local x = agnet(\"hi\")\nreturn x"), "unknown-function"),
    ] {
        let err = engine.run_script(&script, json!({}), RunOptions::default()).unwrap_err();
        assert_eq!(err.code, ErrorCode::Validation);
        assert!(!err.diagnostics.is_empty(), "{err}");
        assert!(err.diagnostics.iter().all(|d| d.is_error()));
        let found: Vec<&str> = err.diagnostics.iter().map(|d| d.rule_id.as_str()).collect();
        assert!(found.contains(&rule), "{found:?}");
        let first = &err.diagnostics[0];
        assert_eq!((first.line, first.message.is_empty()), (1, false));
        // The wire form carries them too, and reads back the same.
        let wire: Value = serde_json::to_value(&err).unwrap();
        assert_eq!(serde_json::from_value::<Error>(wire).unwrap(), err);
    }
    let ok = Error::new(ErrorCode::Internal, "x");
    assert!(serde_json::to_value(&ok).unwrap().get("diagnostics").is_none(), "absent when empty");
}

#[tokio::test]
async fn a_closure_workflow_resumes_on_the_engine_that_ran_it_and_a_fresh_engine_says_how() {
    let store = Arc::new(MemoryStore::new());
    let engine = EngineBuilder::new(store.clone()).build().unwrap();
    let greet = Workflow::new("greet", |ctx, args| async move {
        ctx.agent(&format!("greet {}", args["name"]), AgentOptions::default()).await
    });
    let handle = engine.run(&greet, json!({"name": "Ada"}), RunOptions::default()).unwrap();
    let run = handle.run_id().clone();
    let first = handle.result().await.unwrap();
    let again = engine.clone().resume(&run, ResumeOptions::default()).unwrap().result().await.unwrap();
    assert_eq!((again.value, again.preview.hits, again.preview.misses), (first.value, 1, 0));

    // Another engine (another process, after a crash) never saw the closure.
    let fresh = EngineBuilder::new(store).build().unwrap();
    let err = fresh.resume(&run, ResumeOptions::default()).unwrap_err();
    assert_eq!(err.code, ErrorCode::Config);
    assert!(err.message.contains("EngineBuilder::workflow"), "{err}");
}

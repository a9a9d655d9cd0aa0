//! The planner from outside: real `cairn plan` processes against a scripted OpenAI-compatible
//! server (counting every request at the provider), cassettes, a SIGKILL mid-run and a resume
//! without the source file, the offline echo model, and (opt-in) the tiny real model.

use std::time::Duration;

use serde_json::{Value, json};

use super::scripted_server::{Reply, ScriptedServer, cairn_in, project, run, text};

/// A draft with an unknown function and JavaScript syntax.
const BAD_DRAFT: &str =
    "Here you go:\n```js\nconst notes = fetch(\"https://example.com\");\nconsole.log(notes);\nnotes\n```\n";

/// The draft that fixes it: two agent calls, the second after the first.
const GOOD_DRAFT: &str =
    "```rhai\nlet a = agent(\"first\");\nlet b = agent(\"second\");\na + \" / \" + b\n```";

const GOAL: &str = "Ask two questions and join the answers";

/// The text of the last user message of a request body.
fn user_text(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.iter().rev().find(|m| m["role"] == "user").cloned().unwrap_or(Value::Null);
    match &last["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

fn system_text(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    messages.iter().filter(|m| m["role"] == "system").map(|m| m["content"].to_string()).collect()
}

fn plan_requests(server: &ScriptedServer) -> usize {
    server.requests().iter().filter(|body| user_text(body).contains("workflow script")).count()
}

#[test]
fn cli_plan_repairs_a_bad_draft_from_the_lint_json_and_replanning_is_free() {
    let server = ScriptedServer::start(vec![text(BAD_DRAFT, 900, 40), text(GOOD_DRAFT, 950, 30)]);
    let dir = project(&server.url, "", "");
    let (code, stdout, stderr) = run(dir.path(), &["plan", GOAL, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let plan: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(plan["drafts"], 2);
    assert_eq!(plan["dialect"], "rhai");
    assert_eq!(plan["source"], "let a = agent(\"first\");\nlet b = agent(\"second\");\na + \" / \" + b\n");
    assert!(plan["warnings"].is_array());
    assert_eq!(plan["cost_bound"]["max_agent_calls"], 2, "{plan}");
    assert!(plan["cost_bound"]["worst_case_usd"].as_f64().unwrap() > 0.0, "{plan}");
    let planning_run_id = plan["planning_run_id"].as_str().unwrap().to_owned();
    assert!(planning_run_id.starts_with("plan-"), "{planning_run_id}");

    // The goal went in a user message, never in the system prompt.
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(user_text(&requests[0]).contains(GOAL));
    assert!(!system_text(&requests[0]).contains(GOAL));
    // The repair prompt carries exactly what `cairn lint --json` prints for the draft.
    std::fs::write(
        dir.path().join("bad.rhai"),
        "const notes = fetch(\"https://example.com\");\nconsole.log(notes);\nnotes\n",
    )
    .unwrap();
    let (lint_code, lint_json, _) = run(dir.path(), &["lint", "bad.rhai", "--json"]);
    assert_eq!(lint_code, 6);
    let diagnostics: Vec<Value> = serde_json::from_str(&lint_json).unwrap();
    assert!(diagnostics.iter().all(|d| d["severity"] == "error"), "{lint_json}");
    let repair = user_text(&requests[1]);
    assert!(repair.contains(lint_json.trim_end()), "the repair prompt lacks the lint JSON:\n{repair}");

    // Planning the same goal again is served from the planning journal: no request at all.
    let (code, again, stderr) = run(dir.path(), &["plan", GOAL, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(server.requests().len(), 2, "re-planning called the provider");
    let again: Value = serde_json::from_str(&again).unwrap();
    assert_eq!(again, plan);
}

#[test]
fn cli_plan_without_json_prints_the_script_and_writes_out() {
    let server = ScriptedServer::start(vec![text(GOOD_DRAFT, 900, 30)]);
    let dir = project(&server.url, "", "");
    let (code, stdout, stderr) = run(dir.path(), &["plan", GOAL]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("let a = agent(\"first\");"), "{stdout}");
    assert!(stderr.contains("accepted after 1 draft"), "{stderr}");
    let (code, stdout, stderr) = run(dir.path(), &["plan", GOAL, "--out", "planned.rhai"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    let written = std::fs::read_to_string(dir.path().join("planned.rhai")).unwrap();
    assert!(written.contains("agent(\"second\")"));
    // The written file is an ordinary script: it lints clean.
    assert_eq!(run(dir.path(), &["lint", "planned.rhai"]).0, 0);
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn cli_plan_that_never_converges_exits_6_after_one_plus_repair_rounds_drafts() {
    let server = ScriptedServer::start(vec![text(BAD_DRAFT, 900, 40); 5]);
    let dir = project(&server.url, "", "");
    let (code, stdout, stderr) = run(dir.path(), &["plan", GOAL, "--repair-rounds", "2"]);
    assert_eq!(code, 6, "{stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.contains("draft 3:"), "the last draft's diagnostics are missing: {stderr}");
    assert!(stderr.contains("script_rejected"), "{stderr}");
    assert_eq!(server.requests().len(), 3);

    // --json: the rejection, every draft with its diagnostics.
    let (code, stdout, stderr) = run(dir.path(), &["plan", GOAL, "--repair-rounds", "2", "--json"]);
    assert_eq!(code, 6, "{stderr}");
    let rejection: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(rejection["error"]["code"], "script_rejected");
    assert_eq!(rejection["cause"], json!({"kind": "diagnostics", "repair_rounds": 2}));
    assert_eq!(rejection["drafts"].as_array().unwrap().len(), 3);
    assert_eq!(server.requests().len(), 3, "the rejected conversation was replayed, not paid again");
}

#[test]
fn cli_plan_refuses_bad_options_before_any_request() {
    let server = ScriptedServer::start(vec![text(GOOD_DRAFT, 900, 30)]);
    let dir = project(&server.url, "", "");
    for args in [
        vec!["plan", GOAL, "--repair-rounds", "11"],
        vec!["plan", GOAL, "--dialect", "cobol"],
        vec!["plan", GOAL, "--planner-model", "nowhere:x"],
        vec!["plan", GOAL, "--planning-budget", "-1"],
        vec!["plan", GOAL, "--run", "--args", "{not json"],
    ] {
        let (code, _, stderr) = run(dir.path(), &args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
    }
    assert_eq!(server.requests().len(), 0);
    let (_, runs, _) = run(dir.path(), &["runs", "--json"]);
    assert_eq!(serde_json::from_str::<Value>(&runs).unwrap_or(json!([])), json!([]), "{runs}");
}

#[test]
fn cli_plan_under_a_planning_ceiling_too_small_exits_3_and_pays_nothing() {
    let server = ScriptedServer::start(vec![text(GOOD_DRAFT, 900, 30)]);
    let dir = project(&server.url, "", "");
    let (code, _, stderr) = run(dir.path(), &["plan", GOAL, "--planning-budget", "0"]);
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(server.requests().len(), 0);
}

#[test]
fn cli_plan_run_json_nests_the_runs_outcome() {
    let server = ScriptedServer::start(vec![text(GOOD_DRAFT, 900, 30), text("A", 10, 2), text("B", 10, 2)]);
    let dir = project(&server.url, "", "");
    let (code, stdout, stderr) = run(dir.path(), &["plan", GOAL, "--run", "--json", "--budget", "1"]);
    assert_eq!(code, 0, "{stderr}");
    let object: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(object["drafts"], 1);
    assert_eq!(object["run"]["status"], "ok");
    assert_eq!(object["run"]["value"], "A / B");
    let run_id = object["run"]["run_id"].as_str().unwrap();
    let (_, inspect, _) = run(dir.path(), &["inspect", run_id, "--json"]);
    assert!(inspect.contains("lenient"), "a planned script runs under the lenient policy: {inspect}");
}

#[test]
fn cli_plan_run_over_its_ceiling_needs_force_and_the_ceiling_still_holds() {
    let server = ScriptedServer::start(vec![text(GOOD_DRAFT, 900, 30)]);
    let dir = project(&server.url, "", "");
    let (code, stdout, stderr) = run(dir.path(), &["plan", GOAL, "--run", "--budget", "0.000001"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("cost bound") && stderr.contains("--force"), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    let (_, runs, _) = run(dir.path(), &["runs", "--json"]);
    let runs: Vec<Value> = serde_json::from_str(&runs).unwrap();
    assert!(runs.iter().all(|r| r["name"] != "planned"), "a refused run was written: {runs:?}");
    // Forced: the draft replays from the planning journal, and the ceiling refuses the calls.
    let (code, _, stderr) = run(dir.path(), &["plan", GOAL, "--run", "--budget", "0.000001", "--force"]);
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(server.requests().len(), 1, "only the one draft was ever paid");
}

#[test]
fn cli_plan_offline_from_a_cassette_makes_no_request() {
    let server = ScriptedServer::start(vec![text(BAD_DRAFT, 900, 40), text(GOOD_DRAFT, 950, 30)]);
    let dir = project(&server.url, "", "");
    let (code, recorded, stderr) =
        run(dir.path(), &["plan", GOAL, "--json", "--record", "plan.cassette", "--store", "sqlite:a.db"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(server.requests().len(), 2);
    // A fresh store, so nothing comes from a journal: the cassette alone answers.
    let (code, replayed, stderr) =
        run(dir.path(), &["plan", GOAL, "--json", "--replay", "plan.cassette", "--store", "sqlite:b.db"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(server.requests().len(), 2, "a cassette replay reached the provider");
    let (a, b): (Value, Value) =
        (serde_json::from_str(&recorded).unwrap(), serde_json::from_str(&replayed).unwrap());
    assert_eq!(a, b);
}

/// With only the echo model, `cairn plan` refuses at once: no planning run, no draft paid.
#[test]
fn cli_plan_with_only_the_echo_model_refuses_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) =
        run(dir.path(), &["plan", "Compare three storage engines", "--repair-rounds", "1"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("offline echo model"), "{stderr}");
    assert!(stderr.contains("--planner-model"), "{stderr}");
    assert!(!stderr.contains("planning run"), "nothing started: {stderr}");
    let (code, runs, stderr) = run(dir.path(), &["runs", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(serde_json::from_str::<Value>(&runs).unwrap(), json!([]), "no planning run: {runs}");
}

#[test]
fn cairn_card_prints_a_dialects_card_and_the_profile_card() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cairn.toml"),
        "[profiles.researcher]\ndescription = \"Finds primary sources.\"\nmodel = \"echo:default\"\n\n\
         [host_functions.fetch_issue]\ncommand = [\"cat\"]\ndescription = \"Fetches one issue.\"\n\
         accepts = { type = \"object\", required = [\"number\"] }\n\n[host_functions.bare]\ncommand = [\"cat\"]\n",
    )
    .unwrap();
    let (code, plain, _) = run(dir.path(), &["card"]);
    assert_eq!(code, 0);
    let (code, rhai, _) = run(dir.path(), &["card", "--dialect", "rhai"]);
    assert_eq!(code, 0);
    assert_eq!(plain, rhai);
    let (code, profiles, _) = run(dir.path(), &["card", "--profiles"]);
    assert_eq!(code, 0);
    assert!(profiles.contains("- researcher: Finds primary sources. | model: echo:default"), "{profiles}");
    assert!(
        profiles.contains(
            r#"- fetch_issue: Fetches one issue. | accepts: {"required":["number"],"type":"object"}"#
        ),
        "{profiles}"
    );
    assert!(profiles.contains("- bare: (no description)"), "{profiles}");
    assert_eq!(run(dir.path(), &["card", "--profiles"]).1, profiles, "the profile card is byte-stable");
    assert_eq!(run(dir.path(), &["card", "--dialect", "cobol"]).0, 2);
}

/// `cairn plan --run` killed with SIGKILL while the run's second call is in flight, then
/// `cairn resume RUN` with no script file anywhere: the stored planned source runs again, the
/// first call replays, and neither the draft nor the first call is paid twice.
#[cfg(unix)]
#[test]
fn plan_then_run_killed_mid_run_resumes_without_the_source_file() {
    let server = ScriptedServer::start(vec![
        text(GOOD_DRAFT, 900, 30),
        text("A", 10, 2),
        Reply::Stall,
        text("B", 10, 2),
    ]);
    let dir = project(&server.url, "", "");
    std::fs::remove_file(dir.path().join("s.rhai")).unwrap();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cairn"))
        .current_dir(dir.path())
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("CAIRN_LEASE_TTL_MS")
        .args(["plan", GOAL, "--run", "--budget", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    server.wait_for_requests(3, Duration::from_secs(30));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let (_, runs, _) = run(dir.path(), &["runs", "--json"]);
    let runs: Vec<Value> = serde_json::from_str(&runs).unwrap();
    let planned = runs.iter().find(|r| r["name"] == "planned").expect("the planned run");
    assert_eq!(planned["status"], "running", "{planned}");
    let run_id = planned["run_id"].as_str().unwrap().to_owned();
    assert!(
        std::fs::read_dir(dir.path())
            .unwrap()
            .all(|e| { !e.unwrap().file_name().to_string_lossy().ends_with(".rhai") })
    );

    let out = cairn_in(dir.path()).args(["resume", &run_id, "--wait", "--json"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["value"], "A / B");
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    let count = |text: &str| requests.iter().filter(|body| user_text(body) == text).count();
    assert_eq!(plan_requests(&server), 1, "the draft was paid twice");
    assert_eq!(count("first"), 1, "the completed call was paid twice");
    assert_eq!(count("second"), 2, "the interrupted call reruns once");
}

/// Opt-in: the tiny real model (`CAIRN_TEST_OPENAI_BASE_URL`) as planner. Whatever it writes,
/// the loop ends in an accepted script (exit 0) or a typed `script_rejected` (exit 6), never a
/// crash or a transport error. SmolLM2-135M on llama.cpp has a 4,096-token context and the full
/// Rhai card alone is about 4,400 of its tokens (a streamed request that long gets an empty
/// event stream back); the provider declares `context_window = 4096`, so the planner writes
/// with the compact card, caps each draft at the room left, and shows a repair round only the
/// diagnostics that fit. A CPU build takes a minute or two per run.
#[test]
fn live_model_planning_ends_typed() {
    let Ok(url) = std::env::var("CAIRN_TEST_OPENAI_BASE_URL") else {
        eprintln!("skipped: set CAIRN_TEST_OPENAI_BASE_URL to run against a real server");
        return;
    };
    let model = std::env::var("CAIRN_TEST_OPENAI_MODEL").unwrap_or_else(|_| "smollm2".into());
    // The server's context window (llama.cpp `--n_ctx`), declared as a user would: the full
    // Rhai card alone takes about 4,400 of its 4,096 tokens, so the planner writes with the
    // compact card. One request at a time: the server interrupts the one in flight otherwise.
    let window = std::env::var("CAIRN_TEST_OPENAI_CONTEXT").unwrap_or_else(|_| "4096".into());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cairn.toml"),
        format!(
            "[providers.local]\nkind = \"openai-compatible\"\nbase_url = \"{url}\"\nprices = {{ {model} = [0.0, 0.0] }}\ncontext_window = {window}\nconcurrency = 1\n\n[routing]\nplan = \"local:{model}\"\n\n[retry]\nmax_attempts = 6\ninitial_backoff_ms = 2000\n"
        ),
    )
    .unwrap();
    let out = cairn_in(dir.path())
        .timeout(Duration::from_secs(900))
        .args(["plan", "Summarize the benefits of unit tests in two parallel agent calls", "--json"])
        .args(["--repair-rounds", "1", "--max-output-tokens", "128"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let value: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    eprintln!("exit {:?}\n{stderr}\n{value:#}", out.status.code());
    // The issue's promise: whatever the model writes, an accepted script or a typed
    // `script_rejected`, never a crash, a transport error or a context overflow.
    match out.status.code() {
        Some(0) => {
            assert!(value["source"].is_string(), "{value}");
            assert!(value["planning_run_id"].as_str().is_some_and(|id| id.starts_with("plan-")), "{value}");
        }
        Some(6) => {
            assert_eq!(value["error"]["code"], "script_rejected", "{value}\n{stderr}");
            let cause = value["cause"]["kind"].as_str().unwrap_or_default();
            assert!(matches!(cause, "diagnostics" | "truncated"), "{value}");
            assert!(!value["drafts"].as_array().unwrap().is_empty(), "{value}");
        }
        other => panic!("exit {other:?}: {stderr}"),
    }
    // Planning the same goal again replays the paid drafts: the same answer, no model call.
    let again = cairn_in(dir.path())
        .timeout(Duration::from_secs(120))
        .args(["plan", "Summarize the benefits of unit tests in two parallel agent calls", "--json"])
        .args(["--repair-rounds", "1", "--max-output-tokens", "128"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), out.status.code());
    assert_eq!(serde_json::from_slice::<Value>(&again.stdout).unwrap_or(Value::Null), value);
}

#[test]
fn cli_plan_in_lua_repairs_a_rhai_draft_and_runs_it() {
    let lua =
        "```lua\nlocal a = agent(\"first\")\nlocal b = agent(\"second\")\nreturn a .. \" / \" .. b\n```";
    let server = ScriptedServer::start(vec![
        text(GOOD_DRAFT, 900, 30),
        text(lua, 950, 30),
        text("A", 10, 2),
        text("B", 10, 2),
    ]);
    let dir = project(&server.url, "", "");
    let (code, stdout, stderr) = run(dir.path(), &["plan", GOAL, "--dialect", "lua", "--run", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let object: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!((object["dialect"].as_str(), object["drafts"].as_u64()), (Some("lua"), Some(2)), "{object}");
    assert_eq!(object["run"]["value"], "A / B");
    let requests = server.requests();
    assert!(system_text(&requests[0]).contains("cairn script dialect (Lua)"), "the Lua card is missing");
    assert!(user_text(&requests[1]).contains("\"rule_id\""), "the repair prompt lacks the diagnostics");
    let (code, card, _) = run(dir.path(), &["card", "--dialect", "lua"]);
    assert_eq!(code, 0);
    assert!(card.starts_with("# cairn script dialect (Lua)"), "{card}");
}

/// llama.cpp's (and OpenAI's) refusal of a request longer than the model's context window.
fn context_length_exceeded() -> Reply {
    Reply::Status(
        400,
        r#"{"error":{"message":"This model's maximum context length is 4096 tokens. However, you requested 5032 tokens (5016 in the messages, 16 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#.into(),
    )
}

/// A project whose provider `m` declares `context_window` (when given).
fn project_with_window(url: &str, window: Option<u64>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let window = window.map(|w| format!("context_window = {w}\n")).unwrap_or_default();
    let config = format!(
        "[providers.m]\nkind = \"openai-compatible\"\nbase_url = \"{url}\"\nprices = {{ tiny = [1.0, 2.0] }}\n{window}\n[routing]\ndefault = \"m:tiny\"\n"
    );
    std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
    dir
}

#[test]
fn cli_plan_for_a_small_context_window_writes_with_the_compact_card() {
    let server = ScriptedServer::start(vec![text(GOOD_DRAFT, 900, 30)]);
    let dir = project_with_window(&server.url, Some(4096));
    let (code, stdout, stderr) = run(dir.path(), &["plan", GOAL, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let plan: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(plan["drafts"], 1);
    let requests = server.requests();
    let system = system_text(&requests[0]);
    assert!(system.contains("(Rhai), compact"), "{system}");
    assert!(!system.contains("### agent(prompt, opts?)"), "the full card does not fit 4096 tokens");
    let max_tokens = requests[0]["max_tokens"].as_u64().unwrap();
    assert!(max_tokens < 4096, "the draft must leave the prompt its room: {max_tokens}");
    // `cairn card --compact` prints the card the planner was shown.
    let (code, card, _) = run(dir.path(), &["card", "--compact"]);
    assert_eq!(code, 0);
    let sent = requests[0]["messages"][0]["content"].as_str().unwrap_or_default();
    assert!(sent.contains(card.trim_end()), "the planner's card differs from `cairn card --compact`");
    // `--card full` overrides the choice, but the full card cannot fit 4096 tokens: a typed
    // rejection, and nothing is sent.
    let (code, stdout, stderr) = run(dir.path(), &["plan", "Another goal", "--card", "full", "--json"]);
    assert_eq!(code, 6, "{stderr}");
    let rejected: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(rejected["cause"]["kind"], "context_overflow", "{rejected}");
    assert_eq!(rejected["cause"]["context_window"], 4096, "{rejected}");
    assert_eq!(server.requests().len(), 1, "a request that cannot fit was sent");
    // `--card compact` with no declared window.
    let server = ScriptedServer::start(vec![text(GOOD_DRAFT, 900, 30)]);
    let dir = project_with_window(&server.url, None);
    let (code, _, stderr) = run(dir.path(), &["plan", GOAL, "--card", "compact", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(system_text(&server.requests()[0]).contains("(Rhai), compact"));
}

#[test]
fn cli_plan_falls_back_to_the_compact_card_when_the_provider_refuses_the_context_length() {
    let server = ScriptedServer::start(vec![context_length_exceeded(), text(GOOD_DRAFT, 900, 30)]);
    let dir = project_with_window(&server.url, None);
    let (code, stdout, stderr) = run(dir.path(), &["plan", GOAL, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let plan: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(plan["drafts"], 1, "{plan}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(system_text(&requests[0]).contains("### agent(prompt, opts?)"), "the full card first");
    assert!(system_text(&requests[1]).contains("(Rhai), compact"), "then the compact card");

    // Refused with both cards: a typed rejection (exit 6), never a crash or a transport error.
    let server = ScriptedServer::start(vec![context_length_exceeded(), context_length_exceeded()]);
    let dir = project_with_window(&server.url, None);
    let (code, stdout, stderr) = run(dir.path(), &["plan", GOAL, "--json"]);
    assert_eq!(code, 6, "{stderr}");
    let rejected: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(rejected["error"]["code"], "script_rejected", "{rejected}");
    assert_eq!(rejected["cause"]["kind"], "context_overflow", "{rejected}");
    assert_eq!(rejected["cause"]["draft"], 1, "{rejected}");
    assert_eq!(server.requests().len(), 2);
}

/// `cairn plan` killed with SIGKILL while its second draft is in flight, then `cairn resume
/// plan-…`: the planning run resumes (the paid first draft replays, the interrupted one is
/// drafted again) and prints the accepted plan as `cairn plan` would.
#[cfg(unix)]
#[test]
fn a_planning_run_killed_mid_draft_resumes_with_cairn_resume() {
    let server =
        ScriptedServer::start(vec![text(BAD_DRAFT, 900, 40), Reply::Stall, text(GOOD_DRAFT, 950, 30)]);
    let dir = project(&server.url, "", "");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cairn"))
        .current_dir(dir.path())
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("CAIRN_LEASE_TTL_MS")
        .args(["plan", GOAL, "--json", "--repair-rounds", "2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    server.wait_for_requests(2, Duration::from_secs(30));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let (_, runs, _) = run(dir.path(), &["runs", "--json"]);
    let runs: Vec<Value> = serde_json::from_str(&runs).unwrap();
    let planning = runs.iter().find(|r| r["name"] == "plan").expect("the planning run");
    assert_eq!(planning["status"], "running", "{planning}");
    let run_id = planning["run_id"].as_str().unwrap().to_owned();
    assert!(run_id.starts_with("plan-"), "{run_id}");

    // Flags that mean nothing to a planning conversation are refused, naming the way out.
    let (code, _, stderr) = run(dir.path(), &["resume", &run_id, "--dry-run"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("is a planning run") && stderr.contains("cairn plan"), "{stderr}");

    std::thread::sleep(Duration::from_millis(500)); // the killed driver's lease lapses
    let out = cairn_in(dir.path()).args(["resume", &run_id, "--json"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["planning_run_id"], run_id.as_str());
    assert_eq!(plan["drafts"], 2, "{plan}");
    assert_eq!(plan["source"], "let a = agent(\"first\");\nlet b = agent(\"second\");\na + \" / \" + b\n");
    assert_eq!(server.requests().len(), 3, "the paid first draft was paid again");

    // Once settled, `cairn plan` with the same goal replays it all: no request.
    let (code, again, stderr) = run(dir.path(), &["plan", GOAL, "--json", "--repair-rounds", "2"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(serde_json::from_str::<Value>(&again).unwrap(), plan);
    assert_eq!(server.requests().len(), 3);
}

/// A planning run whose inputs changed since it began (a profile added to cairn.toml) cannot
/// be resumed as the same conversation: a clear message to plan again, not a config error.
#[test]
fn resuming_a_planning_run_whose_inputs_changed_says_to_plan_again() {
    let server = ScriptedServer::start(vec![text(GOOD_DRAFT, 950, 30)]);
    let dir = project(&server.url, "", "");
    let (code, stdout, stderr) = run(dir.path(), &["plan", GOAL, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let run_id =
        serde_json::from_str::<Value>(&stdout).unwrap()["planning_run_id"].as_str().unwrap().to_owned();
    // A settled planning run resumes too: it replays, with no request.
    let (code, resumed, stderr) = run(dir.path(), &["resume", &run_id, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&resumed).unwrap(),
        serde_json::from_str::<Value>(&stdout).unwrap()
    );
    assert_eq!(server.requests().len(), 1);

    let config = std::fs::read_to_string(dir.path().join("cairn.toml")).unwrap();
    std::fs::write(
        dir.path().join("cairn.toml"),
        format!("{config}\n[profiles.writer]\ndescription = \"Writes.\"\n"),
    )
    .unwrap();
    let (code, _, stderr) = run(dir.path(), &["resume", &run_id]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("changed since it began") && stderr.contains("cairn plan"), "{stderr}");
    assert!(!stderr.contains("has not registered"), "{stderr}");
}

/// An Anthropic Messages stream answering `text`.
fn anthropic_text(text: &str) -> Reply {
    let events = [
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": [], "stop_reason": null, "usage": {"input_tokens": 900, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 30}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    Reply::Sse(events.iter().map(|(name, data)| format!("event: {name}\ndata: {data}\n\n")).collect())
}

/// A Responses API stream answering `text`.
fn responses_text(text: &str) -> Reply {
    let item = json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]});
    let events = [
        json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": text}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        json!({"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "output": [item], "usage": {"input_tokens": 900, "output_tokens": 30, "total_tokens": 930}}}),
    ];
    Reply::Sse(
        events.iter().map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap())).collect(),
    )
}

/// `cairn plan` against a keyed provider of `kind` (a mock server standing in for the real
/// API, the key from a variable): the accepted plan and the one request body it sent.
fn plan_with_keyed_provider(kind: &str, reply: Reply) -> (Value, Value) {
    let server = ScriptedServer::start(vec![reply]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cairn.toml"),
        format!(
            "[providers.p]\nkind = \"{kind}\"\nbase_url = \"{}\"\napi_key_env = \"CAIRN_TEST_FAKE_KEY\"\nprices = {{ big = [3.0, 15.0] }}\n\n[routing]\nplan = \"p:big\"\n",
            server.url
        ),
    )
    .unwrap();
    let out = cairn_in(dir.path())
        .env("CAIRN_TEST_FAKE_KEY", "sk-test-not-a-key")
        .args(["plan", GOAL, "--json", "--max-output-tokens", "2000"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{kind}: {stderr}");
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{kind}");
    assert!(!requests[0].to_string().contains("sk-test-not-a-key"), "the key leaked into the body");
    (plan, requests[0].clone())
}

/// The Anthropic, OpenAI Chat and Responses adapters each build a correct planning request:
/// the model, the system prompt (the rules, the full API card and the profile card) in the
/// API's own system field, the goal alone in the one user message, the draft's output cap,
/// streaming, no tools.
#[test]
fn a_planning_call_builds_each_keyed_apis_request() {
    let card = "### agent(prompt, opts?)";
    let user_of = |content: &Value| match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    };

    let (plan, body) = plan_with_keyed_provider("anthropic", anthropic_text(GOOD_DRAFT));
    assert_eq!(plan["drafts"], 1);
    assert_eq!(body["model"], "big");
    assert_eq!(body["max_tokens"], 2000);
    assert_eq!(body["stream"], true);
    assert!(body.get("tools").is_none(), "{body}");
    let system = body["system"].as_array().expect("system blocks");
    assert_eq!(system.len(), 1, "{body}");
    let system_text = system[0]["text"].as_str().unwrap();
    assert!(system_text.starts_with("You write one workflow script"), "{system_text}");
    assert!(system_text.contains(card) && system_text.contains("# Registered names"));
    assert!(!system_text.contains(GOAL), "the goal is data, never in the system prompt");
    assert_eq!(system[0]["cache_control"], json!({"type": "ephemeral"}), "the long, stable card is cached");
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1, "{body}");
    assert_eq!(messages[0]["role"], "user");
    let user = user_of(&messages[0]["content"]);
    assert!(user.contains(&format!("```text\n{GOAL}\n```")), "{user}");

    let (plan, body) = plan_with_keyed_provider("openai", text(GOOD_DRAFT, 900, 30));
    assert_eq!(plan["drafts"], 1);
    assert_eq!(body["model"], "big");
    assert_eq!(body["max_completion_tokens"], 2000, "OpenAI's current name for the cap: {body}");
    assert!(body.get("max_tokens").is_none(), "{body}");
    assert_eq!(body["stream"], true);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{body}");
    assert_eq!(messages[0]["role"], "system");
    let system_text = messages[0]["content"].as_str().unwrap();
    assert!(system_text.starts_with("You write one workflow script") && system_text.contains(card));
    assert!(!system_text.contains(GOAL));
    assert_eq!(messages[1]["role"], "user");
    assert!(user_of(&messages[1]["content"]).contains(GOAL));

    let (plan, body) = plan_with_keyed_provider("openai-responses", responses_text(GOOD_DRAFT));
    assert_eq!(plan["drafts"], 1, "{plan}");
    assert_eq!(body["model"], "big");
    assert_eq!(body["max_output_tokens"], 2000);
    assert_eq!(body["stream"], true);
    assert_eq!(body["store"], false, "nothing is kept on OpenAI's side");
    let instructions = body["instructions"].as_str().unwrap();
    assert!(instructions.starts_with("You write one workflow script") && instructions.contains(card));
    assert!(!instructions.contains(GOAL));
    let input = body["input"].as_array().unwrap();
    assert_eq!(input.len(), 1, "{body}");
    assert!(input[0].to_string().contains(GOAL), "{body}");
}

/// llama.cpp answers a streamed request longer than its context with `200 OK` and an empty
/// event stream (recorded against the SmolLM2 server). With no declared window, the planner
/// retries as for any broken stream, then drafts once more with the compact card.
#[test]
fn cli_plan_retries_an_empty_stream_with_the_compact_card() {
    let empty = || Reply::Sse(String::new());
    let server = ScriptedServer::start(vec![empty(), empty(), text(GOOD_DRAFT, 900, 30)]);
    let dir = project(&server.url, "[retry]\nmax_attempts = 2\ninitial_backoff_ms = 1\n", "");
    let (code, stdout, stderr) = run(dir.path(), &["plan", GOAL, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(serde_json::from_str::<Value>(&stdout).unwrap()["drafts"], 1);
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "two attempts with the full card, then one with the compact card");
    assert!(system_text(&requests[1]).contains("### agent(prompt, opts?)"));
    assert!(system_text(&requests[2]).contains("(Rhai), compact"));
}

/// A cassette records the model's context window with each exchange, so an offline replay
/// picks the same compact card as the recording did and every draft is a cassette hit.
#[test]
fn cli_plan_replays_a_small_window_plan_from_a_cassette() {
    let server = ScriptedServer::start(vec![text(BAD_DRAFT, 900, 40), text(GOOD_DRAFT, 950, 30)]);
    let dir = project_with_window(&server.url, Some(4096));
    let (code, recorded, stderr) =
        run(dir.path(), &["plan", GOAL, "--json", "--record", "plan.cassette", "--store", "sqlite:a.db"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(system_text(&server.requests()[0]).contains("(Rhai), compact"));
    let tape = std::fs::read_to_string(dir.path().join("plan.cassette")).unwrap();
    assert!(tape.lines().all(|row| row.contains("\"context_window\":4096")), "{tape}");
    let (code, replayed, stderr) =
        run(dir.path(), &["plan", GOAL, "--json", "--replay", "plan.cassette", "--store", "sqlite:b.db"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(server.requests().len(), 2, "a cassette replay reached the provider");
    assert_eq!(
        serde_json::from_str::<Value>(&recorded).unwrap(),
        serde_json::from_str::<Value>(&replayed).unwrap()
    );
}

//! The agent loop's contract through the real `cairn` binary, against a scripted
//! OpenAI-compatible model (see `scripted_server`): malformed tool calls, incomplete streams,
//! permissions, schemas, checkpoints, full results and the context bound.

use std::time::Duration;

use serde_json::{Value, json};

use crate::scripted_server::{Reply, ScriptedServer, project, run, sent_text, text, tool_call};

const FILES: &str = "[toolsets.files]\nkind = \"fs-read\"\nroot = \".\"\n";

fn value_of(stdout: &str) -> Value {
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout}"))
}

/// #18.2: tool-call arguments that are not JSON are the model's mistake: the model gets a tool
/// result naming the parse error and answers; nothing is retried, the turn is charged.
#[test]
fn a_malformed_tool_call_is_answered_with_its_parse_error_not_retried() {
    let server = ScriptedServer::start(vec![
        tool_call("call_a", "read_file", "{\"path\": ", 10, 5),
        text("done", 20, 3),
    ]);
    let dir = project(&server.url, FILES, "agent(\"read it\", #{tools: [\"files\"]})");
    let (code, stdout, stderr) = run(dir.path(), &["run", "s.rhai"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(value_of(&stdout), json!("done"));
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "one turn each, no retry: {requests:?}");
    let second = sent_text(&requests[1]);
    assert!(second.contains("not valid JSON"), "{second}");
    assert!(second.contains("path"), "the raw text is named: {second}");
    assert!(stderr.contains("run ok: 38 tokens"), "both turns are charged: {stderr}");

    // Each one counts as a correction: past the limit (3) the agent fails `tool_failed`, every
    // turn charged.
    let server = ScriptedServer::start(vec![tool_call("c", "read_file", "{oops", 10, 5); 4]);
    let script = "let r = agent(\"read it\", #{tools: [\"files\"], result: \"full\"}); #{code: r.error.code, usage: r.usage}";
    let dir = project(&server.url, FILES, script);
    let (code, stdout, stderr) = run(dir.path(), &["run", "s.rhai"]);
    assert_eq!(code, 0, "{stderr}");
    let value = value_of(&stdout);
    assert_eq!(server.requests().len(), 4);
    assert_eq!(value["code"], "tool_failed", "{value}");
    assert_eq!(value["usage"]["input_tokens"], 40, "{value}");
}

/// The stream llama.cpp's server sends to a request that arrives while it is busy: a role
/// chunk, then `[DONE]`, no finish reason.
fn incomplete_stream() -> Reply {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/fixtures/sse/llama-cpp-python-recorded/concurrent-empty.sse"
    );
    Reply::Sse(std::fs::read_to_string(path).unwrap())
}

/// #10 §4: an incomplete stream is never an answer: it is retried, and when every attempt is
/// incomplete the agent fails `provider_unavailable` instead of returning an empty string.
#[test]
fn an_incomplete_stream_is_retried_and_never_an_answer() {
    let server = ScriptedServer::start(vec![incomplete_stream(), text("hello", 10, 2)]);
    let dir = project(&server.url, "", "agent(\"hi\")");
    let (code, stdout, stderr) = run(dir.path(), &["run", "s.rhai"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(value_of(&stdout), json!("hello"));
    assert_eq!(server.requests().len(), 2);

    let server = ScriptedServer::start(vec![incomplete_stream(); 4]);
    let dir = project(&server.url, "", "agent(\"hi\")");
    let (code, stdout, stderr) = run(dir.path(), &["run", "s.rhai"]);
    assert_eq!(server.requests().len(), 4, "one try and three retries");
    assert_ne!(code, 0, "never an ok answer: {stdout}");
    assert!(stderr.contains("provider_unavailable") && stderr.contains("incomplete stream"), "{stderr}");
}

/// The approval key in a suspended run's output.
fn approve_key(output: &str) -> String {
    let start = output.find("approve:").unwrap_or_else(|| panic!("no approve: key in {output}"));
    output[start..].split(|c: char| c.is_whitespace() || c == '"' || c == ',').next().unwrap().to_owned()
}

fn permissions_project(server: &ScriptedServer, rules: &str, script: &str) -> tempfile::TempDir {
    let dir = project(&server.url, &format!("{FILES}\n{rules}"), script);
    std::fs::write(dir.path().join("notes.txt"), "the secret is 42").unwrap();
    dir
}

const READ_NOTES: &str = "{\"path\": \"notes.txt\"}";

/// #18.1: `[permissions] deny` refuses the call; the model is told, and the run goes on.
#[test]
fn a_denied_tool_call_goes_back_to_the_model_as_denied() {
    let server =
        ScriptedServer::start(vec![tool_call("c1", "read_file", READ_NOTES, 10, 5), text("ok", 20, 2)]);
    let dir = permissions_project(
        &server,
        "[permissions]\ndeny = [\"read_*\"]\n",
        "agent(\"go\", #{tools: [\"files\"]})",
    );
    let (code, stdout, stderr) = run(dir.path(), &["run", "s.rhai"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(value_of(&stdout), json!("ok"));
    let second = sent_text(&server.requests()[1]);
    assert!(second.contains("denied") && !second.contains("secret is 42"), "{second}");

    // A profile's own rules replace the top-level ones.
    let server =
        ScriptedServer::start(vec![tool_call("c1", "read_file", READ_NOTES, 10, 5), text("ok", 20, 2)]);
    let rules = "[profiles.careful]\ntools = [\"files\"]\n[profiles.careful.permissions]\ndeny = [\"*\"]\n";
    let dir = permissions_project(&server, rules, "agent(\"go\", #{profile: \"careful\"})");
    let (code, _, stderr) = run(dir.path(), &["run", "s.rhai"]);
    assert_eq!(code, 0, "{stderr}");
    let second = sent_text(&server.requests()[1]);
    assert!(second.contains("denied") && !second.contains("secret is 42"), "{second}");
}

/// #18.1: `ask` suspends (exit 4) with an `approve:` key; an approval runs the call on resume
/// without asking the model again for the completed turn; a refusal reaches the model as denied.
#[test]
fn an_ask_suspends_and_resolve_then_resume_runs_or_refuses_the_call() {
    for (answer, expect_read) in [(json!({"approved": true}), true), (json!({"approved": false}), false)] {
        let server =
            ScriptedServer::start(vec![tool_call("c1", "read_file", READ_NOTES, 10, 5), text("ok", 20, 2)]);
        let dir = permissions_project(
            &server,
            "[permissions]\nask = [\"read_*\"]\n",
            "agent(\"go\", #{tools: [\"files\"]})",
        );
        let (code, stdout, stderr) = run(dir.path(), &["run", "s.rhai"]);
        assert_eq!(code, 4, "{stdout}{stderr}");
        let key = approve_key(&format!("{stdout}{stderr}"));
        let id = crate::scripted_server::run_id(&stderr);
        let (code, _, resolved) = run(dir.path(), &["resolve", &id, &key, &answer.to_string()]);
        assert_eq!(code, 0, "{resolved}");
        let (code, stdout, stderr) = run(dir.path(), &["resume", &id]);
        assert_eq!(code, 0, "{stdout}{stderr}");
        assert_eq!(value_of(&stdout), json!("ok"));
        let requests = server.requests();
        assert_eq!(requests.len(), 2, "the completed turn is not asked again");
        let second = sent_text(&requests[1]);
        assert_eq!(second.contains("secret is 42"), expect_read, "{second}");
        assert_eq!(second.contains("denied"), !expect_read, "{second}");
        let (code, _, stderr) = run(dir.path(), &["replay", &id]);
        assert_eq!(code, 0, "a strict replay needs nothing live: {stderr}");
    }
}

/// #18.1: an approval with a deadline (`ask_timeout_ms`) that nobody answers counts as denied.
#[test]
fn an_unanswered_ask_past_its_deadline_is_denied() {
    let server =
        ScriptedServer::start(vec![tool_call("c1", "read_file", READ_NOTES, 10, 5), text("ok", 20, 2)]);
    let rules = "[permissions]\nask = [\"read_*\"]\nask_timeout_ms = 300\n";
    let dir = permissions_project(&server, rules, "agent(\"go\", #{tools: [\"files\"]})");
    // Not held in process (cairn run holds a deadline due within --hold-timers): it suspends.
    let (code, stdout, stderr) = run(dir.path(), &["run", "s.rhai", "--hold-timers", "0"]);
    assert_eq!(code, 4, "{stdout}{stderr}");
    let id = crate::scripted_server::run_id(&stderr);
    std::thread::sleep(Duration::from_millis(400));
    let (code, stdout, stderr) = run(dir.path(), &["resume", &id]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let second = sent_text(&server.requests()[1]);
    assert!(second.contains("denied") && !second.contains("secret is 42"), "{second}");
    // The expiry is journaled: a strict replay needs nothing live.
    let (code, _, stderr) = run(dir.path(), &["replay", &id]);
    assert_eq!(code, 0, "{stderr}");

    // Answered before its deadline, the approval stands.
    let server =
        ScriptedServer::start(vec![tool_call("c1", "read_file", READ_NOTES, 10, 5), text("ok", 20, 2)]);
    let rules = "[permissions]\nask = [\"read_*\"]\nask_timeout_ms = 60000\n";
    let dir = permissions_project(&server, rules, "agent(\"go\", #{tools: [\"files\"]})");
    let (code, stdout, stderr) = run(dir.path(), &["run", "s.rhai", "--hold-timers", "0"]);
    assert_eq!(code, 4, "{stdout}{stderr}");
    let key = approve_key(&format!("{stdout}{stderr}"));
    let id = crate::scripted_server::run_id(&stderr);
    let (code, _, resolved) = run(dir.path(), &["resolve", &id, &key, r#"{"approved": true}"#]);
    assert_eq!(code, 0, "{resolved}");
    let (code, stdout, stderr) = run(dir.path(), &["resume", &id]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(sent_text(&server.requests()[1]).contains("secret is 42"));
}

/// #18.6: with `result: "full"` a failed agent returns its record (status, typed error, usage,
/// cost) and the script branches on it, for a turn limit and for a provider error.
#[test]
fn a_full_result_reports_a_failure_with_its_usage_and_cost() {
    let server = ScriptedServer::start(vec![tool_call("c1", "read_file", READ_NOTES, 100, 50)]);
    let script = r#"
        let r = agent("go", #{tools: ["files"], max_turns: 1, result: "full"});
        if r.status == "ok" { throw "expected a failure"; }
        #{status: r.status, code: r.error.code, tokens: r.usage.input_tokens + r.usage.output_tokens, cost: r.cost_usd}
    "#;
    let dir = permissions_project(&server, "", script);
    let (code, stdout, stderr) = run(dir.path(), &["run", "s.rhai"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let value = value_of(&stdout);
    assert_eq!(value["status"], "limit", "{value}");
    assert_eq!(value["code"], "turn_limit", "{value}");
    assert_eq!(value["tokens"], 150, "{value}");
    // 100 input at $1/M and 50 output at $2/M.
    assert!((value["cost"].as_f64().unwrap() - 0.0002).abs() < 1e-12, "{value}");

    let bad_request =
        json!({"error": {"message": "no such model", "type": "invalid_request_error"}}).to_string();
    let server = ScriptedServer::start(vec![Reply::Status(404, bad_request)]);
    let script = r#"
        let r = agent("go", #{result: "full"});
        #{status: r.status, code: r.error.code, message: r.error.message, value: r.value}
    "#;
    let dir = project(&server.url, "", script);
    let (code, stdout, stderr) = run(dir.path(), &["run", "s.rhai"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let value = value_of(&stdout);
    assert_eq!(value["status"], "error", "{value}");
    assert!(value["code"].as_str().is_some_and(|c| !c.is_empty()), "{value}");
    assert!(value["message"].as_str().unwrap().contains("no such model"), "{value}");
    assert_eq!(value["value"], Value::Null);
}

const SCHEMA_SCRIPT: &str = r#"agent("capital of France?", #{schema: #{type: "object", required: ["answer"], properties: #{answer: #{type: "string"}}}})"#;
const SCHEMA_COMPACT: &str =
    r#"{"properties":{"answer":{"type":"string"}},"required":["answer"],"type":"object"}"#;

/// The system message of a Chat Completions request body, if any.
fn system_of(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["role"] == "system"))
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default()
}

/// #18.5: a model without native structured output is shown the schema in the system prompt,
/// and the correction after an invalid answer carries the schema too.
#[test]
fn a_schema_reaches_a_model_without_native_structured_output() {
    let server = ScriptedServer::start(vec![text("Paris!", 10, 2), text(r#"{"answer": "Paris"}"#, 30, 6)]);
    let dir = project(&server.url, "", SCHEMA_SCRIPT);
    let (code, stdout, stderr) = run(dir.path(), &["run", "s.rhai"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(value_of(&stdout), json!({"answer": "Paris"}));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].get("response_format").is_none(), "{}", requests[0]);
    let system = system_of(&requests[0]);
    assert!(system.contains(SCHEMA_COMPACT) && system.contains("only a JSON value"), "{system}");
    let last = requests[1]["messages"].as_array().unwrap().last().unwrap()["content"].to_string();
    assert!(last.contains("did not match") && last.contains(&SCHEMA_COMPACT.replace('"', "\\\"")), "{last}");
}

/// #10 §4: `capabilities = { native_schema = true }` on an openai-compatible provider turns on
/// constrained structured output: the request carries `response_format`, not system text.
#[test]
fn declared_capabilities_send_the_schema_natively() {
    let server = ScriptedServer::start(vec![text(r#"{"answer": "Paris"}"#, 30, 6)]);
    let dir = project(&server.url, "", SCHEMA_SCRIPT);
    let config = std::fs::read_to_string(dir.path().join("cairn.toml"))
        .unwrap()
        .replace("prices = {", "capabilities = { native_schema = true, tools = true }\nprices = {");
    std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
    let (code, stdout, stderr) = run(dir.path(), &["run", "s.rhai"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(value_of(&stdout), json!({"answer": "Paris"}));
    let body = &server.requests()[0];
    assert!(body["response_format"].to_string().contains(SCHEMA_COMPACT), "{body}");
    assert!(!system_of(body).contains(SCHEMA_COMPACT), "{body}");
}

/// Runs `s.rhai` as run `id` in `dir` and kills it (SIGKILL) once `server` has received `n`
/// requests (the last one stalls); returns the body of that last request.
fn kill_at_request(dir: &std::path::Path, id: &str, server: &ScriptedServer, n: usize) -> Value {
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cairn"))
        .current_dir(dir)
        .args(["run", "s.rhai", "--run-id", id])
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("CAIRN_LEASE_TTL_MS")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    server.wait_for_requests(n, Duration::from_secs(30));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    server.requests()[n - 1].clone()
}

/// Points the project's provider at `to` instead of `from`.
fn point_at(dir: &std::path::Path, from: &ScriptedServer, to: &ScriptedServer) {
    let config = std::fs::read_to_string(dir.join("cairn.toml")).unwrap().replace(&from.url, &to.url);
    std::fs::write(dir.join("cairn.toml"), config).unwrap();
}

/// #18.4: the schema-repair turn starts from a checkpoint: killed (SIGKILL) while the repair
/// turn is in flight, a resume does not ask the first (invalid) turn again, keeps its usage and
/// sends the same correction.
#[test]
fn a_kill_during_the_schema_repair_turn_resumes_without_re_asking() {
    let server = ScriptedServer::start(vec![text("Paris!", 10, 2), Reply::Stall]);
    let dir = project(&server.url, "", SCHEMA_SCRIPT);
    let repair = kill_at_request(dir.path(), "repair1", &server, 2);
    let second = ScriptedServer::start(vec![text(r#"{"answer": "Paris"}"#, 30, 6)]);
    point_at(dir.path(), &server, &second);
    let (code, stdout, stderr) = run(dir.path(), &["resume", "repair1", "--wait"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(value_of(&stdout), json!({"answer": "Paris"}));
    let resumed = second.requests();
    assert_eq!(resumed.len(), 1, "only the repair turn runs again");
    assert_eq!(resumed[0]["messages"], repair["messages"], "the same context as the killed repair turn");
    assert!(stderr.contains("run ok: 48 tokens"), "the invalid turn's usage is kept: {stderr}");
}

/// Estimated input tokens of a Chat Completions body, as cairn estimates them (chars / 4).
fn body_tokens(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().map_or(0, |c| c.chars().count().div_ceil(4)))
        .sum()
}

/// #18.7: a conversation has a size bound: a tool returning a big file turn after turn never
/// pushes a request past `max_context_tokens`; the oldest results are elided with a marker.
#[test]
fn the_context_stays_under_its_bound_as_tool_results_pile_up() {
    let replies = vec![
        tool_call("c1", "read_file", "{\"path\": \"big.txt\"}", 10, 5),
        tool_call("c2", "read_file", "{\"path\": \"big.txt\"}", 10, 5),
        tool_call("c3", "read_file", "{\"path\": \"big.txt\"}", 10, 5),
        text("done", 10, 2),
    ];
    let server = ScriptedServer::start(replies);
    let rules = "[profiles.reader]\ntools = [\"files\"]\nmax_context_tokens = 5000\n";
    let dir =
        project(&server.url, &format!("{FILES}\n{rules}"), "agent(\"read big.txt\", #{profile: \"reader\"})");
    std::fs::write(dir.path().join("big.txt"), "0123456789abcdef".repeat(500)).unwrap(); // 2000 tokens
    let (code, stdout, stderr) = run(dir.path(), &["run", "s.rhai"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(value_of(&stdout), json!("done"));
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    for body in &requests {
        assert!(body_tokens(body) <= 5000, "{} tokens sent", body_tokens(body));
    }
    let last = sent_text(&requests[3]);
    assert!(last.contains("was elided to keep the conversation under its bound of 5000 tokens"), "{last}");
    assert!(last.contains("0123456789abcdef"), "the newest result is still there");

    // As an agent option it overrides the profile's.
    let server = ScriptedServer::start(vec![
        tool_call("c1", "read_file", "{\"path\": \"big.txt\"}", 10, 5),
        text("done", 10, 2),
    ]);
    let script = "agent(\"read big.txt\", #{profile: \"reader\", max_context_tokens: 1000})";
    let dir = project(&server.url, &format!("{FILES}\n{rules}"), script);
    std::fs::write(dir.path().join("big.txt"), "0123456789abcdef".repeat(500)).unwrap();
    let (code, _, stderr) = run(dir.path(), &["run", "s.rhai"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(body_tokens(&server.requests()[1]) <= 1000, "{}", server.requests()[1]);
}

/// #18.1: while the run is still busy elsewhere, an ask's deadline passes in-process: the wait
/// is resolved as denied and the agent goes on without the run suspending.
#[test]
fn an_ask_deadline_passing_while_the_run_is_busy_denies_in_process() {
    let server =
        ScriptedServer::start(vec![tool_call("c1", "read_file", READ_NOTES, 10, 5), text("ok", 20, 2)]);
    let rules = "[permissions]\nask = [\"read_*\"]\nask_timeout_ms = 200\n\n[host_functions.slow]\ncommand = [\"sh\", \"-c\", \"sleep 3; echo 1\"]\n";
    let script = "parallel([|| agent(\"go\", #{tools: [\"files\"]}), || host_call(\"slow\", #{})])";
    let dir = permissions_project(&server, rules, script);
    let (code, stdout, stderr) = run(dir.path(), &["run", "s.rhai"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(value_of(&stdout), json!(["ok", 1]));
    let second = sent_text(&server.requests()[1]);
    assert!(second.contains("denied") && !second.contains("secret is 42"), "{second}");
}

/// #18.7: a run killed after the context was bounded resumes with exactly the same (elided)
/// context.
#[test]
fn a_resume_sends_the_same_bounded_context() {
    let read = || tool_call("c", "read_file", "{\"path\": \"big.txt\"}", 10, 5);
    let server = ScriptedServer::start(vec![read(), read(), read(), Reply::Stall]);
    let rules = "[profiles.reader]\ntools = [\"files\"]\nmax_context_tokens = 5000\n";
    let dir =
        project(&server.url, &format!("{FILES}\n{rules}"), "agent(\"read big.txt\", #{profile: \"reader\"})");
    std::fs::write(dir.path().join("big.txt"), "0123456789abcdef".repeat(500)).unwrap();
    let stalled = kill_at_request(dir.path(), "bounded1", &server, 4);
    assert!(sent_text(&stalled).contains("was elided"), "the bound applied before the kill");
    let second = ScriptedServer::start(vec![text("done", 10, 2)]);
    point_at(dir.path(), &server, &second);
    let (code, stdout, stderr) = run(dir.path(), &["resume", "bounded1", "--wait"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let resumed = second.requests();
    assert_eq!(resumed.len(), 1, "completed turns are not asked again");
    assert_eq!(resumed[0]["messages"], stalled["messages"]);
}

//! MCP servers that misbehave, through the `cairn` binary: one that dies, hangs, floods its
//! output, speaks garbage or changes its tool list between runs; a run killed with -9 in the
//! middle of a tool loop; permissions that deny and ask by qualified name. Every failure is
//! typed (`tool_failed`) and bounded in time; nothing completed is ever called again.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::scripted_server::{ScriptedServer, run_id, sent_text, text, tool_call};
use crate::tools_support::{cairn_at, cairn_process, calls, python_with_mcp, tool_calls, tools_project};

const SCRIPT: &str = r#"agent("Research Paris.", #{tools: ["research"]})"#;

fn inspect_json(dir: &std::path::Path, id: &str) -> Value {
    let (code, stdout, stderr) = cairn_at(dir, dir, &[], &["inspect", id, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

/// The tool calls `inspect --json` lists for the run's first agent call.
fn tool_rows(dir: &std::path::Path, id: &str) -> Vec<Value> {
    inspect_json(dir, id)["tools"][0]["tools"].as_array().cloned().unwrap_or_default()
}

/// A server that crashes mid-call, one that hangs past `timeout_ms`, and results past the
/// size cap: each is a `tool_failed` error result the model reads, the run goes on, and a
/// later call in the same agent still gets a typed answer.
#[test]
fn a_server_that_dies_hangs_or_floods_gives_the_model_a_tool_error_never_a_hang() {
    let Some(python) = python_with_mcp() else { return };
    let server = ScriptedServer::start(vec![
        tool_calls(&[
            ("w1", "docs_flood", r#"{"size": 200000}"#),
            ("w2", "docs_slow", r#"{"seconds": 600}"#),
            ("w3", "docs_add", r#"{"a": 2, "b": 3}"#),
            ("w4", "docs_broken", "{}"),
            ("w5", "docs_flood", r#"{"size": 5000000}"#),
            ("w6", "docs_add", r#"{"a": 1, "b": 1}"#),
        ]),
        tool_call("w7", "docs_crash", "{}", 10, 5),
        text("I could not finish.", 30, 8),
    ]);
    let dir = tools_project(&server.url, &python, "");
    // Tighter bounds for this server.
    let config = std::fs::read_to_string(dir.path().join("cairn.toml")).unwrap();
    let config = config.replace("timeout_ms = 5000\n", "timeout_ms = 1500\nmax_output_bytes = 100000\n");
    std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
    std::fs::write(dir.path().join("s.rhai"), SCRIPT).unwrap();
    let began = Instant::now();
    let (code, stdout, stderr) = cairn_at(dir.path(), dir.path(), &[], &["run", "s.rhai", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    // The slow tool would sleep 600 s: ending well before proves the call was cancelled at its
    // timeout (a loaded machine has taken 26 s for the whole run).
    assert!(began.elapsed() < Duration::from_secs(120), "bounded: {:?}", began.elapsed());
    assert_eq!(serde_json::from_str::<Value>(&stdout).unwrap()["value"], "I could not finish.");
    let second = sent_text(&server.requests()[1]);
    for says in [
        "exceeds max_output_bytes (100000)",
        "no answer within timeout_ms = 1500; cancelled",
        "tools/call broken failed",
        "it sent a message of more than",
    ] {
        assert!(second.contains(says), "{says}: {second}");
    }
    // After a cancelled call the session still answers.
    assert!(second.contains('5'), "{second}");
    let third = sent_text(&server.requests()[2]);
    assert!(third.contains("the server exited") || third.contains("connection closed"), "{third}");
    let id = run_id(&stderr);
    let rows = tool_rows(dir.path(), &id);
    let statuses: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["tool"].as_str().unwrap(), r["error"]["code"].as_str().unwrap_or("ok")))
        .collect();
    assert_eq!(
        statuses,
        [
            ("docs_flood", "tool_failed"),
            ("docs_slow", "tool_failed"),
            ("docs_add", "ok"),
            ("docs_broken", "tool_failed"),
            ("docs_flood", "tool_failed"),
            ("docs_add", "tool_failed"),
            ("docs_crash", "tool_failed"),
        ],
        "{rows:?}"
    );
    // The replay calls nothing: the failures are journaled outcomes too.
    let before = calls(&dir.path().join("mcp.log")).len();
    let (code, _, stderr) = cairn_at(dir.path(), dir.path(), &[], &["replay", &id]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(calls(&dir.path().join("mcp.log")).len(), before);
}

/// A server that answers with something that is not JSON-RPC fails the agent call typed and
/// at once, naming the server and what it wrote.
#[test]
fn a_server_that_speaks_garbage_fails_the_call_typed_and_at_once() {
    let Some(python) = python_with_mcp() else { return };
    let server = ScriptedServer::start(vec![text("unused", 1, 1)]);
    let dir = tools_project(&server.url, &python, "");
    std::fs::write(dir.path().join("garbage.py"), "import sys\nsys.stdin.readline()\nprint('hello, I am not JSON-RPC', flush=True)\nsys.stdin.readline()\n").unwrap();
    let config = std::fs::read_to_string(dir.path().join("cairn.toml")).unwrap();
    let config = config.replace(&crate::tools_support::test_server().display().to_string(), "garbage.py");
    std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
    std::fs::write(dir.path().join("s.rhai"), SCRIPT).unwrap();
    let began = Instant::now();
    let (code, _, stderr) = cairn_at(dir.path(), dir.path(), &[], &["run", "s.rhai"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(began.elapsed() < Duration::from_secs(15), "{:?}", began.elapsed());
    assert!(stderr.contains("tool_failed") && stderr.contains("mcp server docs"), "{stderr}");
    assert!(stderr.contains("not JSON-RPC"), "{stderr}");
    assert!(server.requests().is_empty(), "no model call with a broken toolset");
}

/// A run killed with -9 while the second of three tool calls of one turn runs: the resume
/// continues from the checkpoint, is served the completed first call from the journal, runs
/// the interrupted one again and the third once, and pays for no model turn twice.
#[test]
fn a_run_killed_mid_tool_loop_resumes_without_repeating_a_completed_call() {
    let Some(python) = python_with_mcp() else { return };
    let server = ScriptedServer::start(vec![
        tool_calls(&[
            ("w1", "docs_add", r#"{"a": 2, "b": 3}"#),
            ("w2", "docs_slow", r#"{"seconds": 2}"#),
            ("w3", "lookup", r#"{"city": "Paris"}"#),
        ]),
        text("done", 30, 8),
    ]);
    let dir = tools_project(&server.url, &python, "");
    std::fs::write(dir.path().join("s.rhai"), SCRIPT).unwrap();
    let log = dir.path().join("mcp.log");
    let mut child = cairn_process(dir.path(), &["run", "s.rhai", "--run-id", "killed"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !calls(&log).iter().any(|c| c.starts_with("slow")) {
        assert!(Instant::now() < deadline, "the slow call never started: {:?}", calls(&log));
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let (code, stdout, stderr) = cairn_at(dir.path(), dir.path(), &[], &["resume", "killed", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(serde_json::from_str::<Value>(&stdout).unwrap()["value"], "done", "{stdout}");
    let made = calls(&log);
    assert_eq!(made.iter().filter(|c| c.starts_with("add")).count(), 1, "{made:?}");
    assert_eq!(made.iter().filter(|c| c.starts_with("slow")).count(), 2, "{made:?}");
    assert_eq!(calls(&dir.path().join("host.log")).len(), 1);
    assert_eq!(server.requests().len(), 2, "the tool turn is not paid again");
    let last = sent_text(&server.requests()[1]);
    assert!(last.contains("woke up") && last.contains('5') && last.contains("2102650"), "{last}");
}

/// `[permissions]` rules by qualified name: `mcp.docs.add` denies (the server never sees the
/// call), `docs.*` asks; an approval resumes the run and the call runs once.
#[test]
fn permissions_deny_and_ask_mcp_tools_by_qualified_name() {
    let Some(python) = python_with_mcp() else { return };
    let server = ScriptedServer::start(vec![
        tool_calls(&[
            ("w1", "docs_add", r#"{"a": 2, "b": 3}"#),
            ("w2", "docs_search", r#"{"query": "rust"}"#),
        ]),
        text("ok", 30, 8),
    ]);
    let dir =
        tools_project(&server.url, &python, "[permissions]\ndeny = [\"mcp.docs.add\"]\nask = [\"docs.*\"]\n");
    std::fs::write(dir.path().join("s.rhai"), SCRIPT).unwrap();
    let (code, stdout, stderr) = cairn_at(dir.path(), dir.path(), &[], &["run", "s.rhai"]);
    assert_eq!(code, 4, "suspended for the ask: {stdout}{stderr}");
    assert!(calls(&dir.path().join("mcp.log")).is_empty());
    let id = run_id(&stderr);
    let pending = inspect_json(dir.path(), &id)["pending"].clone();
    let key = pending[0]["key"].as_str().unwrap().to_owned();
    assert!(key.starts_with("approve:"), "{pending}");
    let (code, _, stderr) =
        cairn_at(dir.path(), dir.path(), &[], &["resolve", &id, &key, r#"{"approved": true}"#]);
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = cairn_at(dir.path(), dir.path(), &[], &["resume", &id]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(calls(&dir.path().join("mcp.log")), [r#"search {"query": "rust"}"#]);
    let last = sent_text(&server.requests()[1]);
    assert!(last.contains("denied") && last.contains("3 documents"), "{last}");
}

/// A server whose tool list changed between a run and its resume re-keys the agent call that
/// used it: the resume explains which identity field changed and stops before paying.
#[test]
fn a_server_that_changes_its_tools_between_runs_rekeys_and_the_resume_explains() {
    let Some(python) = python_with_mcp() else { return };
    let server = ScriptedServer::start(vec![
        tool_call("w1", "docs_search", r#"{"query": "rust"}"#, 10, 5),
        text("found", 30, 8),
        // The second call's model fails the run (past the script, every request is a 400).
    ]);
    let dir = tools_project(&server.url, &python, "");
    let script = "let a = agent(\"Research Paris.\", #{tools: [\"research\"], label: \"research\"});\nagent(\"Summarize: \" + a)";
    std::fs::write(dir.path().join("s.rhai"), script).unwrap();
    let (code, _, stderr) = cairn_at(dir.path(), dir.path(), &[], &["run", "s.rhai"]);
    assert_eq!(code, 1, "the second call fails: {stderr}");
    let id = run_id(&stderr);
    let (code, stdout, stderr) =
        cairn_at(dir.path(), dir.path(), &[("CAIRN_MCP_VARIANT", "v2")], &["resume", &id]);
    assert_ne!(code, 0, "{stdout}{stderr}");
    assert!(stderr.contains("rekey_refused") || stderr.contains("re-key"), "{stderr}");
    assert!(stderr.contains("tools"), "the explanation names the tools: {stderr}");
    assert_eq!(server.requests().len(), 3, "nothing paid again");
    assert_eq!(calls(&dir.path().join("mcp.log")).len(), 1);
}

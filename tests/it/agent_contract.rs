//! The agent loop's contract through the real `cairn` binary, against a scripted
//! OpenAI-compatible model (see `scripted_server`): malformed tool calls, incomplete streams,
//! permissions, schemas, checkpoints, full results and the context bound.

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

//! The provider's finish reason on the agent result, from recorded real streams: each
//! fixture of `shared/fixtures/sse` is served byte for byte by a scripted server to the real
//! `cairn` binary (Chat Completions, Anthropic Messages, the Responses API, llama.cpp), and the
//! agent's full result carries the closed `finish_reason` the stream says. It is journaled with
//! the call: a strict replay returns the same result without a provider.

use std::path::Path;

use serde_json::Value;

use crate::provider::fixtures::read;
use crate::scripted_server::{Reply, ScriptedServer, cairn_in};

/// The call's record.
const SCRIPT: &str = "let r = agent(\"hi\", #{result: \"full\"});\n#{status: r.status, value: r.value, error: r.error, finish_reason: r.finish_reason}";

/// Runs [`SCRIPT`] against a provider of `kind` answering with `bodies`: (exit, the result,
/// stderr, the project dir). Retries are fast, so a retried incomplete stream costs no time.
fn run_against(kind: &str, bodies: Vec<Vec<u8>>) -> (i32, Value, String, tempfile::TempDir) {
    let replies = bodies.into_iter().map(|b| Reply::Sse(String::from_utf8(b).unwrap())).collect();
    let server = ScriptedServer::start(replies);
    let dir = tempfile::tempdir().unwrap();
    let key = if kind == "openai-compatible" { "" } else { "api_key_env = \"CAIRN_TEST_FAKE_KEY\"\n" };
    std::fs::write(
        dir.path().join("cairn.toml"),
        format!(
            "[providers.p]\nkind = \"{kind}\"\nbase_url = \"{}\"\n{key}prices = {{ m = [1.0, 2.0] }}\n\n[routing]\ndefault = \"p:m\"\n\n[retry]\nmax_attempts = 2\ninitial_backoff_ms = 1\n",
            server.url
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("s.rhai"), SCRIPT).unwrap();
    let out =
        cairn_in(dir.path()).env("CAIRN_TEST_FAKE_KEY", "sk-test").args(["run", "s.rhai"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let value = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), value, String::from_utf8_lossy(&out.stderr).into_owned(), dir)
}

/// `cairn replay` of the run in `stderr`: the same outcome, served from the journal.
fn replays_the_same(dir: &Path, stderr: &str) {
    let run_id = crate::scripted_server::run_id(stderr);
    let out = cairn_in(dir).env("CAIRN_TEST_FAKE_KEY", "sk-test").args(["replay", &run_id]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("same outcome"), "{said}");
}

#[test]
fn each_wire_dialects_finish_reason_reaches_the_agent_result_and_the_journal() {
    let cases = [
        // (adapter kind, fixture, what the stream itself says, the closed reason)
        (
            "openai-compatible",
            "openai-python/chat_completions/.inline-snapshot/external/e2aad469b71d1d4894ff833ea147020a9d875eb7ce644a0ff355581690a4cbfd.bin",
            "stop",
        ),
        (
            "openai-compatible",
            "openai-python/chat_completions/.inline-snapshot/external/4cc50a6135d254573a502310e6af1246f55edb6ad95fa24059f160996b68866d.bin",
            "length",
        ),
        ("openai-compatible", "llama-cpp-python-recorded/stream.sse", "stop"),
        ("anthropic", "anthropic/tests/lib/streaming/fixtures/basic_response.txt", "stop"),
        (
            "openai-responses",
            "derived/packages/openai/src/responses/__fixtures__/github-copilot-id-rotation.1.sse",
            "stop",
        ),
    ];
    for (kind, fixture, reason) in cases {
        let (code, value, stderr, dir) = run_against(kind, vec![read(fixture)]);
        assert_eq!(code, 0, "{fixture}: {stderr}");
        // An answer cut off at the output limit ends `limit`, never `ok`.
        let status = if reason == "length" { "limit" } else { "ok" };
        assert_eq!(value["status"], status, "{fixture}: {value}");
        assert_eq!(value["finish_reason"], reason, "{fixture}: {value}");
        replays_the_same(dir.path(), &stderr);
    }
}

#[test]
fn an_answer_cut_at_max_tokens_says_length() {
    // Anthropic stops this turn at max_tokens with a tool call's JSON unfinished: the call
    // ends `limit` (never `ok` with a cut answer), and the record says it was cut off.
    let fixture = "anthropic/tests/lib/streaming/fixtures/incomplete_partial_json_response.txt";
    let (code, value, stderr, dir) = run_against("anthropic", vec![read(fixture)]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(value["status"], "limit", "{value}");
    assert_eq!(value["value"], Value::Null, "{value}");
    assert_eq!(value["finish_reason"], "length", "{value}");
    replays_the_same(dir.path(), &stderr);
}

#[test]
fn a_stream_that_ends_without_a_finish_reason_is_incomplete_not_empty() {
    // llama.cpp's answer to a request that arrives while it is busy: a role chunk, `[DONE]`.
    // Retried, then the call fails `provider_unavailable`, and its record says `incomplete`.
    let busy = read("llama-cpp-python-recorded/concurrent-empty.sse");
    let (code, value, stderr, dir) = run_against("openai-compatible", vec![busy.clone(), busy]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(value["status"], "error", "{value}");
    assert_eq!(value["error"]["code"], "provider_unavailable", "{value}");
    assert_eq!(value["finish_reason"], "incomplete", "{value}");
    assert_eq!(value["value"], Value::Null, "an incomplete answer is never an empty one: {value}");
    replays_the_same(dir.path(), &stderr);
}

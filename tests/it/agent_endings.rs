//! #27: how an agent call ends, through the real binary against a fake provider on the wire in
//! the Anthropic Messages and the OpenAI Chat Completions formats, from Rhai and from Lua:
//! at `max_tool_calls` or `max_turns` the agent gets one final turn without tools and ends `ok`
//! with its answer (or `limit`); an answer cut at the output limit is `limit` with its partial
//! text; a refusal is a typed `refused` error; with native structured output the schema goes
//! on the answering turn only. Each run replays byte for byte (`cairn replay` says "same
//! outcome" without a provider call).

use serde_json::{Value, json};

use crate::scripted_server::{Reply, cairn_in, run_id};
use crate::wire_server::{
    Served, WireServer, anthropic_text, anthropic_tool_call, openai_chunks, openai_text, openai_tool_call,
    openai_usage,
};

const WIRES: [&str; 2] = ["openai", "anthropic"];

/// A project whose provider speaks `wire` at `server`, with the `files` toolset, `a.txt`, and
/// `script` as `s.rhai` (or `s.lua` when `lua`). `native` declares native structured output.
fn project(wire: &str, server: &WireServer, script: &str, lua: bool, native: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let provider = match wire {
        "openai" => format!(
            "[providers.o]\nkind = \"openai-compatible\"\nbase_url = \"{}\"\n{}prices = {{ small = [1.0, 2.0] }}\n\n[routing]\ndefault = \"o:small\"\n",
            server.url(),
            if native { "capabilities = { native_schema = true, tools = true }\n" } else { "" }
        ),
        _ => format!(
            "[providers.a]\nkind = \"anthropic\"\napi_key_env = \"CAIRN_WIRE_KEY\"\nbase_url = \"{}\"\nprices = {{ big = [1.0, 2.0] }}\n\n[routing]\ndefault = \"a:big\"\n",
            server.root_url()
        ),
    };
    let config = format!(
        "{provider}\n[retry]\nmax_attempts = 2\ninitial_backoff_ms = 1\nmax_backoff_ms = 2\n\n[toolsets.files]\nkind = \"fs-read\"\nroot = \".\"\n"
    );
    std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
    std::fs::write(dir.path().join("a.txt"), "the answer is 42\n").unwrap();
    std::fs::write(dir.path().join(if lua { "s.lua" } else { "s.rhai" }), script).unwrap();
    dir
}

/// `cairn run` of the project's script: (the run's outcome value, the run id), after checking
/// that `cairn replay` of it gives the same outcome.
fn run_and_replay(dir: &std::path::Path, lua: bool) -> (Value, String) {
    let file = if lua { "s.lua" } else { "s.rhai" };
    let out = cairn_in(dir).env("CAIRN_WIRE_KEY", "k").args(["run", file, "--json"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let outcome: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("no JSON outcome: {}{stderr}", String::from_utf8_lossy(&out.stdout)));
    let run = outcome["run_id"].as_str().map_or_else(|| run_id(&stderr), str::to_owned);
    let replay = cairn_in(dir).env("CAIRN_WIRE_KEY", "k").args(["replay", &run]).output().unwrap();
    let said = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(replay.status.code(), Some(0), "{said}{}", String::from_utf8_lossy(&replay.stderr));
    assert!(said.contains("same outcome"), "{said}");
    (outcome, run)
}

fn text(wire: &str, answer: &str) -> Served {
    if wire == "openai" { openai_text(answer, 50, 10) } else { anthropic_text(answer, 50, 10) }
}

fn read_call(wire: &str, n: usize) -> Served {
    let id = format!("call_{n}");
    let args = r#"{"path": "a.txt"}"#;
    if wire == "openai" {
        openai_tool_call(&id, "read_file", args, 50, 10)
    } else {
        anthropic_tool_call(&id, "read_file", args, 50, 10)
    }
}

/// Whether request `body` lets the model call its tools.
fn tools_callable(wire: &str, body: &Value) -> bool {
    let none = if wire == "openai" { json!("none") } else { json!({"type": "none"}) };
    body.get("tools").is_some() && body["tool_choice"] != none
}

/// The native schema request `body` carries, if any.
fn native_schema(wire: &str, body: &Value) -> Option<Value> {
    let at = if wire == "openai" { &body["response_format"] } else { &body["output_config"]["format"] };
    (!at.is_null()).then(|| at.clone())
}

/// The value of the script's agent record, from the outcome.
fn record(outcome: &Value) -> &Value {
    &outcome["value"]
}

#[test]
fn at_max_tool_calls_the_agent_answers_once_without_tools_in_both_dialects() {
    for wire in WIRES {
        for lua in [false, true] {
            let server = WireServer::start(vec![
                read_call(wire, 1),
                read_call(wire, 2),
                read_call(wire, 3),
                text(wire, "it is 42, read twice"),
            ]);
            let script = if lua {
                r#"return agent("what is in a.txt?", {tools = {"files"}, max_tool_calls = 2, result = "full"})"#
            } else {
                r#"agent("what is in a.txt?", #{tools: ["files"], max_tool_calls: 2, result: "full"})"#
            };
            let dir = project(wire, &server, script, lua, false);
            let (outcome, _) = run_and_replay(dir.path(), lua);
            let r = record(&outcome);
            assert_eq!(r["status"], "ok", "{wire} lua={lua}: {outcome}");
            assert_eq!(r["value"], "it is 42, read twice", "{wire} lua={lua}: {outcome}");
            let requests = server.requests();
            assert_eq!(requests.len(), 4, "{wire} lua={lua}: one final turn, then no more");
            assert!(requests[..3].iter().all(|b| tools_callable(wire, b)), "{wire}: tool turns");
            let last = &requests[3];
            assert!(!tools_callable(wire, last), "{wire}: the final turn withholds tools: {last}");
            let sent = last["messages"].to_string();
            assert!(sent.contains("not executed") && sent.contains("final answer"), "{wire}: {sent}");
            // The paid turns, the final one included, are on the record.
            assert_eq!(r["usage"]["input_tokens"], 200, "{wire}: {outcome}");
        }
    }
}

#[test]
fn at_max_turns_the_final_turn_answers_or_the_call_ends_limit() {
    for wire in WIRES {
        let server = WireServer::start(vec![read_call(wire, 1), read_call(wire, 2), text(wire, "42")]);
        let script = r#"agent("what is in a.txt?", #{tools: ["files"], max_turns: 2, result: "full"})"#;
        let dir = project(wire, &server, script, false, false);
        let (outcome, _) = run_and_replay(dir.path(), false);
        assert_eq!(record(&outcome)["status"], "ok", "{wire}: {outcome}");
        assert_eq!(record(&outcome)["value"], "42", "{wire}: {outcome}");
        let requests = server.requests();
        assert_eq!(requests.len(), 3, "{wire}");
        assert!(!tools_callable(wire, &requests[2]), "{wire}: {}", requests[2]);
        assert!(requests[2]["messages"].to_string().contains("limit of 2 turns"), "{wire}");

        // A final turn that answers nothing (it still calls a tool) ends `limit`.
        let server = WireServer::start(vec![read_call(wire, 1), read_call(wire, 2), read_call(wire, 3)]);
        let dir = project(wire, &server, script, false, false);
        let (outcome, _) = run_and_replay(dir.path(), false);
        let r = record(&outcome);
        assert_eq!(r["status"], "limit", "{wire}: {outcome}");
        assert_eq!(r["error"]["code"], "turn_limit", "{wire}: {outcome}");
        assert_eq!(server.requests().len(), 3, "{wire}: only one final turn");
    }
}

/// A turn cut off at the output limit, in `wire`'s format, after streaming `partial`.
fn cut_off(wire: &str, partial: &str) -> Served {
    if wire == "openai" {
        return openai_chunks(
            &[
                json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": partial}, "finish_reason": null}]}),
                json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
                openai_usage(50, 16),
            ],
            (50, 16),
        );
    }
    anthropic_stop(wire, partial, "max_tokens")
}

/// An Anthropic text turn that ends with `stop` (`max_tokens`, `refusal`).
fn anthropic_stop(_wire: &str, said: &str, stop: &str) -> Served {
    let events = [
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": null, "usage": {"input_tokens": 50, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": said}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 16}}),
        json!({"type": "message_stop"}),
    ];
    let body =
        events.iter().map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap())).collect();
    Served { reply: Reply::Sse(body), bill: (50, 16) }
}

#[test]
fn an_answer_cut_at_the_output_limit_is_limit_with_its_partial_text() {
    for wire in WIRES {
        for lua in [false, true] {
            let server = WireServer::start(vec![cut_off(wire, "The answer is fo")]);
            let script = if lua {
                r#"return agent("say it", {max_output_tokens = 16, result = "full"})"#
            } else {
                r#"agent("say it", #{max_output_tokens: 16, result: "full"})"#
            };
            let dir = project(wire, &server, script, lua, false);
            let (outcome, _) = run_and_replay(dir.path(), lua);
            let r = record(&outcome);
            assert_eq!(r["status"], "limit", "{wire} lua={lua}: {outcome}");
            assert_eq!(r["value"], Value::Null, "never ok with a cut answer: {outcome}");
            assert_eq!(r["partial"], "The answer is fo", "{wire} lua={lua}: {outcome}");
            assert_eq!(r["finish_reason"], "length", "{wire}: {outcome}");
            assert_eq!(r["error"]["code"], "turn_limit", "{wire}: {outcome}");
        }
        // An empty answer cut at the limit is `limit` too, never `ok` with "".
        let server = WireServer::start(vec![cut_off(wire, "")]);
        let dir = project(wire, &server, r#"agent("say it", #{result: "full"})"#, false, false);
        let (outcome, _) = run_and_replay(dir.path(), false);
        assert_eq!(record(&outcome)["status"], "limit", "{wire}: {outcome}");
    }
}

/// A refusal in `wire`'s format.
fn refusal(wire: &str) -> Served {
    if wire == "openai" {
        return openai_chunks(
            &[
                json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": null, "refusal": ""}, "finish_reason": null}]}),
                json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"refusal": "I can't help with that."}, "finish_reason": null}]}),
                json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
                openai_usage(50, 8),
            ],
            (50, 8),
        );
    }
    anthropic_stop(wire, "I can't help with that.", "refusal")
}

#[test]
fn a_refusal_is_a_typed_refused_outcome() {
    for wire in WIRES {
        for lua in [false, true] {
            let server = WireServer::start(vec![refusal(wire)]);
            let script = if lua {
                r#"return agent("do the bad thing", {result = "full"})"#
            } else {
                r#"agent("do the bad thing", #{result: "full"})"#
            };
            let dir = project(wire, &server, script, lua, false);
            let (outcome, _) = run_and_replay(dir.path(), lua);
            let r = record(&outcome);
            assert_eq!(r["status"], "error", "{wire} lua={lua}: {outcome}");
            assert_eq!(r["error"]["code"], "refused", "{wire} lua={lua}: {outcome}");
            assert_eq!(r["finish_reason"], "refusal", "{wire}: {outcome}");
            assert_eq!(r["value"], Value::Null, "{wire}: {outcome}");
        }
        // Without the full record, the refusal fails the call with its code.
        let server = WireServer::start(vec![refusal(wire)]);
        let dir = project(wire, &server, r#"agent("do the bad thing")"#, false, false);
        let out = cairn_in(dir.path())
            .env("CAIRN_WIRE_KEY", "k")
            .args(["run", "s.rhai", "--json"])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert_ne!(out.status.code(), Some(0), "{said}");
        assert!(said.contains("refused"), "{wire}: {said}");
    }
}

const SCHEMA: &str = r#"#{type: "object", properties: #{n: #{type: "integer"}}, required: ["n"]}"#;

#[test]
fn with_native_structured_output_only_the_answering_turn_carries_the_schema() {
    for wire in WIRES {
        // The model reads, then answers in prose: the answering turn asks again with the schema.
        let server =
            WireServer::start(vec![read_call(wire, 1), text(wire, "It is 42."), text(wire, r#"{"n": 42}"#)]);
        let script = format!(
            r#"agent("what number is in a.txt?", #{{tools: ["files"], schema: {SCHEMA}, result: "full"}})"#
        );
        let dir = project(wire, &server, &script, false, true);
        let (outcome, _) = run_and_replay(dir.path(), false);
        let r = record(&outcome);
        assert_eq!(r["status"], "ok", "{wire}: {outcome}");
        assert_eq!(r["value"], json!({"n": 42}), "{wire}: {outcome}");
        let requests = server.requests();
        assert_eq!(requests.len(), 3, "{wire}");
        for tool_turn in &requests[..2] {
            assert_eq!(
                native_schema(wire, tool_turn),
                None,
                "{wire}: a tool turn carries no schema: {tool_turn}"
            );
            assert!(tools_callable(wire, tool_turn), "{wire}");
        }
        let answering = &requests[2];
        assert!(native_schema(wire, answering).is_some(), "{wire}: {answering}");
        assert!(!tools_callable(wire, answering), "{wire}: {answering}");

        // An answer that already matches needs no answering turn.
        let server = WireServer::start(vec![read_call(wire, 1), text(wire, r#"{"n": 42}"#)]);
        let dir = project(wire, &server, &script, false, true);
        let (outcome, _) = run_and_replay(dir.path(), false);
        assert_eq!(record(&outcome)["value"], json!({"n": 42}), "{wire}: {outcome}");
        assert_eq!(server.requests().len(), 2, "{wire}");

        // Without tools every turn is an answering turn: the schema goes on the first.
        let server = WireServer::start(vec![text(wire, r#"{"n": 1}"#)]);
        let script = format!(r#"agent("a number", #{{schema: {SCHEMA}}})"#);
        let dir = project(wire, &server, &script, false, true);
        let (outcome, _) = run_and_replay(dir.path(), false);
        assert_eq!(outcome["value"], json!({"n": 1}), "{wire}: {outcome}");
        assert!(native_schema(wire, &server.requests()[0]).is_some(), "{wire}");
    }
}

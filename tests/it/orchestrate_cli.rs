//! `cairn orchestrate` as a real process against a local model server that plays the
//! orchestrator (tool calls picked by how far its conversation is) and the children (answers
//! picked by prompt), counting every request it answers. The process is SIGKILLed at a named
//! point (after a spawn decision, with children in flight, after finish) and `cairn resume`
//! finishes the run: no request answered before the kill is ever made again.

use std::collections::HashMap;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::scripted_server::{data_lines, read_request};

#[derive(Default)]
struct Counts {
    /// Requests received, by key (`orch:N` for the orchestrator's N-th turn, `child:PROMPT`).
    received: HashMap<String, usize>,
    /// Requests answered, by key.
    answered: HashMap<String, usize>,
    /// What the orchestrator's tools answered it, in the order its requests carried them.
    tool_results: Vec<Value>,
}

struct ModelServer {
    url: String,
    counts: Arc<(Mutex<Counts>, Condvar)>,
}

fn chunk(delta: Value, finish: Value) -> Value {
    json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

fn usage() -> Value {
    json!({"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}})
}

fn tool_sse(name: &str, arguments: Value) -> String {
    data_lines(&[
        chunk(json!({"role": "assistant", "content": null}), Value::Null),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "t1", "type": "function", "function": {"name": name, "arguments": arguments.to_string()}}]}),
            Value::Null,
        ),
        chunk(json!({}), json!("tool_calls")),
        usage(),
    ])
}

fn text_sse(text: &str) -> String {
    data_lines(&[
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": text}), Value::Null),
        chunk(json!({}), json!("stop")),
        usage(),
    ])
}

/// The orchestrator's turns and the children's answers.
fn answer(body: &Value) -> (String, String, Duration) {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let is_orchestrator = body["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == "spawn_agent"));
    if is_orchestrator {
        let turn = messages.iter().filter(|m| m["role"] == "assistant").count();
        let sse = match turn {
            0 => tool_sse(
                "parallel_agents",
                json!({"children": [
                    {"profile": "researcher", "prompt": "alpha"},
                    {"profile": "researcher", "prompt": "beta"},
                    {"profile": "researcher", "prompt": "gamma slow"},
                ]}),
            ),
            1 => tool_sse("await_all", json!({"handles": ["c0", "c1", "c2"]})),
            _ => tool_sse("finish", json!({"result": "done [c0] [c1] [c2]"})),
        };
        return (format!("orch:{turn}"), sse, Duration::ZERO);
    }
    let prompt = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .unwrap_or_default();
    let delay =
        if prompt.contains("slow") { Duration::from_millis(1500) } else { Duration::from_millis(150) };
    (format!("child:{prompt}"), text_sse(&format!("answer to {prompt}")), delay)
}

impl ModelServer {
    fn start() -> ModelServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let counts: Arc<(Mutex<Counts>, Condvar)> = Arc::default();
        let shared = counts.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let shared = shared.clone();
                std::thread::spawn(move || serve(stream, &shared));
            }
        });
        ModelServer { url, counts }
    }

    /// Waits until `done` holds over the counts (or panics after 20 s).
    fn wait_for(&self, what: &str, done: impl Fn(&Counts) -> bool) {
        let (lock, cvar) = &*self.counts;
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut counts = lock.lock().unwrap();
        while !done(&counts) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "timed out waiting for {what}: {:?}", counts.received);
            counts = cvar.wait_timeout(counts, left).unwrap().0;
        }
    }

    fn snapshot(&self) -> (HashMap<String, usize>, HashMap<String, usize>) {
        let counts = self.counts.0.lock().unwrap();
        (counts.received.clone(), counts.answered.clone())
    }
}

fn serve(mut stream: TcpStream, shared: &Arc<(Mutex<Counts>, Condvar)>) {
    let Some(body) = read_request(&stream) else { return };
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (key, sse, delay) = answer(&body);
    {
        let (lock, cvar) = &**shared;
        let mut counts = lock.lock().unwrap();
        *counts.received.entry(key.clone()).or_default() += 1;
        if key.starts_with("orch:") {
            let results = body["messages"].as_array().into_iter().flatten().filter(|m| m["role"] == "tool");
            for result in results.skip(counts.tool_results.len()) {
                let content = result["content"].as_str().unwrap_or_default();
                counts.tool_results.push(serde_json::from_str(content).unwrap_or(Value::Null));
            }
        }
        cvar.notify_all();
    }
    std::thread::sleep(delay);
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        sse.len()
    );
    if stream
        .write_all(head.as_bytes())
        .and_then(|_| stream.write_all(sse.as_bytes()))
        .and_then(|_| stream.flush())
        .is_ok()
    {
        let (lock, cvar) = &**shared;
        *lock.lock().unwrap().answered.entry(key).or_default() += 1;
        cvar.notify_all();
    }
}

fn project(url: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[providers.m]\nkind = \"openai-compatible\"\nbase_url = \"{url}\"\nprices = {{ tiny = [1.0, 2.0] }}\n\n\
         [routing]\ndefault = \"m:tiny\"\n\n[profiles.researcher]\ndescription = \"finds facts\"\n"
    );
    std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
    dir
}

fn cairn(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("cairn"));
    cmd.current_dir(dir)
        .args(args)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("CAIRN_LEASE_TTL_MS")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The run's journal as `cairn inspect --json` shows it.
fn entries(dir: &Path) -> Vec<Value> {
    let out = cairn(dir, &["inspect", "orch1", "--json"]).output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    report["entries"].as_array().cloned().unwrap_or_default()
}

fn start(dir: &Path) -> Child {
    cairn(dir, &["orchestrate", "survey", "--run-id", "orch1", "--budget", "5", "--quiet"]).spawn().unwrap()
}

fn resume(dir: &Path) -> (i32, Value, String) {
    let out = cairn(dir, &["resume", "orch1", "--wait", "--json", "--quiet"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), outcome, stderr)
}

/// Kills the process at the point `at` names, resumes, and checks that nothing answered
/// before the kill was asked for again.
fn kill_and_resume(at: &str) {
    let server = ModelServer::start();
    let dir = project(&server.url);
    let mut child = start(dir.path());
    match at {
        // The spawn decisions are journaled and the children dispatched; none has answered.
        "after-spawn" => {
            server.wait_for("a child's request", |c| c.received.keys().any(|k| k.starts_with("child:")))
        }
        // alpha and beta answered, gamma in flight, the orchestrator waiting on them.
        "children-in-flight" => server.wait_for("two children answered and gamma in flight", |c| {
            c.answered.contains_key("child:alpha")
                && c.answered.contains_key("child:beta")
                && c.received.contains_key("child:gamma slow")
                && c.answered.contains_key("orch:1")
        }),
        _ => server.wait_for("the finish turn", |c| c.answered.contains_key("orch:2")),
    }
    // Time for what the process received to be journaled (a paid result is durable before
    // the workflow sees it; a checkpoint is written at the turn boundary).
    // After a spawn the kill is at once (the children answer after 150 ms, so none has).
    if at != "after-spawn" {
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
    // What the killed process had journaled as paid: those calls are never asked again.
    let paid_before: Vec<String> = entries(dir.path())
        .iter()
        .filter(|e| e["kind"] == "agent" && e["status"] == "ok")
        .filter_map(|e| {
            e["value"].as_str().and_then(|v| v.strip_prefix("answer to ")).map(|p| format!("child:{p}"))
        })
        .collect();

    let (code, outcome, stderr) = resume(dir.path());
    assert_eq!(code, 0, "resume failed at {at}: {stderr} {outcome}");
    assert_eq!(outcome["status"], "ok", "{outcome}");
    assert_eq!(outcome["value"], json!("done [c0] [c1] [c2]"));
    let (received, _) = server.snapshot();
    for key in &paid_before {
        assert_eq!(received.get(key), Some(&1), "{key} was paid again after the kill at {at}: {received:?}");
    }
    // The orchestrator's first turn was checkpointed long before any kill point.
    assert_eq!(received.get("orch:0"), Some(&1), "{received:?}");
    // Whatever was in flight at the kill is asked at most once more.
    for (key, n) in &received {
        assert!(*n <= 2, "{key} asked {n} times at {at}");
    }
    for turn in ["orch:0", "orch:1", "orch:2"] {
        assert!(received.contains_key(turn), "{turn} never asked at {at}: {received:?}");
    }

    // inspect shows the roster and the decisions.
    let out = cairn(dir.path(), &["inspect", "orch1"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("orchestration at:orchestrate:0"), "{text}");
    let dump = || {
        entries(dir.path())
            .iter()
            .map(|e| format!("{} {} {} {} {}", e["seq"], e["kind"], e["status"], e["scope"], e["value"]))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(text.contains("child   c2") && text.contains("decided seq"), "{text}\n{}", dump());
    assert!(text.contains("finish") && text.contains("accepted"), "{text}");
}

#[test]
fn killed_after_a_spawn_decision_resumes_without_paying_again() {
    kill_and_resume("after-spawn");
}

#[test]
fn killed_with_children_in_flight_resumes_without_paying_again() {
    kill_and_resume("children-in-flight");
}

#[test]
fn killed_after_finish_resumes_without_paying_again() {
    kill_and_resume("after-finish");
}

#[test]
fn an_uninterrupted_orchestration_shows_its_roster_and_typed_usage_errors() {
    let server = ModelServer::start();
    let dir = project(&server.url);
    let out = cairn(dir.path(), &["orchestrate", "survey", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["value"], json!("done [c0] [c1] [c2]"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("child c0 (researcher): spawned") && stderr.contains("child c2 (researcher): ok"),
        "{stderr}"
    );

    let out = cairn(dir.path(), &["orchestrate", "survey", "--profiles", "nobody"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown profile \"nobody\""));
    let out = cairn(dir.path(), &["orchestrate", "  "]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Money in an orchestration carries its unit (#29): each child's cost in the digests the
/// orchestrator model reads and in `cairn inspect --json`'s roster is `cost_nano_usd` beside
/// `cost_usd`, and the roster's amounts are what the children paid; the admissions it lists pair
/// the ceiling's room with its decimal too.
#[test]
fn an_orchestrations_child_costs_carry_their_unit() {
    let server = ModelServer::start();
    let dir = project(&server.url);
    let out = cairn(
        dir.path(),
        &["orchestrate", "survey", "--run-id", "orch1", "--budget", "5", "--json", "--quiet"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    let tool_results = server.counts.0.lock().unwrap().tool_results.clone();
    let digests: Vec<&Value> =
        tool_results.iter().flat_map(|r| r["digests"].as_array().into_iter().flatten()).collect();
    assert_eq!(digests.len(), 3, "await_all reports the three children: {tool_results:#?}");
    for digest in &digests {
        assert!(digest["cost_nano_usd"].as_i64().is_some_and(|n| n > 0), "{digest:#}");
    }
    super::newcomer_output::assert_money_has_units("the orchestrator's tool results", &json!(tool_results));

    let out = cairn(dir.path(), &["inspect", "orch1", "--json"]).output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let children = report["orchestrations"][0]["children"].as_array().cloned().unwrap_or_default();
    assert_eq!(children.len(), 3, "{report:#}");
    let decisions = report["orchestrations"][0]["decisions"].as_array().cloned().unwrap_or_default();
    assert!(
        decisions.iter().any(|d| d["available_usd"].is_number()),
        "admissions under a ceiling: {decisions:#?}"
    );
    super::newcomer_output::assert_money_has_units(
        "inspect --json's orchestrations",
        &report["orchestrations"],
    );
    for child in &children {
        let paid: Vec<&Value> = digests.iter().copied().filter(|d| d["handle"] == child["handle"]).collect();
        assert_eq!(child["cost_nano_usd"], paid[0]["cost_nano_usd"], "{child:#} against {paid:#?}");
    }
}

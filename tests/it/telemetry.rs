//! #30 (OpenTelemetry): `cairn run` (and `serve` with its workers) export one trace per run
//! to the OTLP/HTTP endpoint of the standard variables. The receiver here is a tiny HTTP
//! server in the test that decodes what arrives (protobuf or JSON) with the OTLP types.

use std::collections::HashMap;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use crate::scripted_server::{
    ScriptedServer, cairn_in, listen, project, read_request, text, tool_call, wait_until,
};

const FILES: &str = "[toolsets.files]\nkind = \"fs-read\"\nroot = \".\"\n";

/// The script of the span-tree test: a phase holding a two-branch fan-out (one branch runs a
/// step) and an agent call whose first turn calls a tool.
const SCRIPT: &str = r#"
phase("gather", || {
    let xs = parallel([|| step("prep", || 1), || 2]);
    agent("read notes.txt", #{tools: ["files"], label: "reader"})
})
"#;

/// What the receiver got, decoded: every span of every request, and the requests' content
/// types.
#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    content_types: Vec<String>,
}

struct Receiver {
    endpoint: String,
    state: Arc<(Mutex<Received>, Condvar)>,
}

impl Receiver {
    fn start() -> Receiver {
        let state = Arc::new((Mutex::new(Received::default()), Condvar::new()));
        let endpoint = format!("http://{}", listen(&state, serve));
        Receiver { endpoint, state }
    }

    /// Waits until a span named `name` has arrived, then returns all spans so far.
    fn wait_for(&self, name: &str, within: Duration) -> Vec<Span> {
        let arrived = |state: &Received| state.spans.iter().any(|s| s.name == name);
        let missing = |state: &Received| format!("no span {name:?} among {:?}", names(&state.spans));
        wait_until(&self.state, within, arrived, missing).spans.clone()
    }

    fn spans(&self) -> Vec<Span> {
        self.state.0.lock().unwrap().spans.clone()
    }

    fn content_types(&self) -> Vec<String> {
        self.state.0.lock().unwrap().content_types.clone()
    }
}

/// Reads one request (keep-alive: several on one connection), decodes it, answers 200.
fn serve(mut stream: TcpStream, shared: &Arc<(Mutex<Received>, Condvar)>) {
    loop {
        let Some((content_type, body)) = read_typed_request(&stream) else { return };
        let request = if content_type.contains("json") {
            serde_json::from_slice::<ExportTraceServiceRequest>(&body).expect("OTLP/JSON decodes")
        } else {
            ExportTraceServiceRequest::decode(body.as_slice()).expect("OTLP protobuf decodes")
        };
        {
            let (lock, cvar) = &**shared;
            let mut state = lock.lock().unwrap();
            state.content_types.push(content_type.clone());
            for resource in request.resource_spans {
                for scope in resource.scope_spans {
                    state.spans.extend(scope.spans);
                }
            }
            cvar.notify_all();
        }
        let reply = if content_type.contains("json") { "{}" } else { "" };
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
            reply.len()
        );
        if stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(reply.as_bytes())).is_err() {
            return;
        }
    }
}

/// One request's content type and body.
fn read_typed_request(stream: &TcpStream) -> Option<(String, Vec<u8>)> {
    // `read_request` gives the body; the content type is read by peeking the head first.
    let mut head = vec![0u8; 4096];
    let n = stream.peek(&mut head).ok()?;
    let head = String::from_utf8_lossy(&head[..n]).to_ascii_lowercase();
    let content_type = head
        .lines()
        .find_map(|l| l.strip_prefix("content-type:"))
        .map(|v| v.trim().to_owned())
        .unwrap_or_default();
    let body = read_request(stream)?;
    Some((content_type, body))
}

fn names(spans: &[Span]) -> Vec<String> {
    spans.iter().map(|s| s.name.clone()).collect()
}

fn attr(span: &Span, key: &str) -> Option<AnyValue> {
    span.attributes.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.clone()).and_then(|v| v.value)
}

fn attr_str(span: &Span, key: &str) -> Option<String> {
    match attr(span, key)? {
        AnyValue::StringValue(s) => Some(s),
        _ => None,
    }
}

fn attr_int(span: &Span, key: &str) -> Option<i64> {
    match attr(span, key)? {
        AnyValue::IntValue(n) => Some(n),
        _ => None,
    }
}

fn attr_f64(span: &Span, key: &str) -> Option<f64> {
    match attr(span, key)? {
        AnyValue::DoubleValue(n) => Some(n),
        _ => None,
    }
}

fn by_name<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    spans.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no span {name:?} in {:?}", names(spans)))
}

fn run_traced(dir: &std::path::Path, endpoint: &str, envs: &[(&str, &str)]) -> (i32, String, Duration) {
    let mut cmd = cairn_in(dir);
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
        .env_remove(cairn::__internal::CAPTURE_CONTENT_VAR)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    for (key, value) in envs {
        cmd.env(key, value);
    }
    let began = Instant::now();
    let out = cmd.args(["run", "s.rhai"]).output().unwrap();
    let took = began.elapsed();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned(), took)
}

fn notes_project(server: &ScriptedServer) -> tempfile::TempDir {
    let dir = project(&server.url, FILES, SCRIPT);
    std::fs::write(dir.path().join("notes.txt"), "the secret is 42").unwrap();
    dir
}

fn scripted() -> ScriptedServer {
    ScriptedServer::start(vec![
        tool_call("c1", "read_file", "{\"path\": \"notes.txt\"}", 10, 5),
        text("the notes say 42", 20, 3),
    ])
}

/// The span tree of a run through the binary: run > phase > branches (> step), and
/// run > phase > agent > turns > tool, with GenAI attributes and cairn's cost, in one trace.
#[test]
fn a_run_exports_its_span_tree_with_genai_attributes() {
    let server = scripted();
    let dir = notes_project(&server);
    let receiver = Receiver::start();
    let (code, stderr, _) = run_traced(dir.path(), &receiver.endpoint, &[]);
    assert_eq!(code, 0, "{stderr}");
    let spans = receiver.wait_for("run s", Duration::from_secs(10));
    assert!(
        receiver.content_types().iter().all(|t| t == "application/x-protobuf"),
        "{:?}",
        receiver.content_types()
    );

    let run = by_name(&spans, "run s");
    assert!(run.parent_span_id.is_empty(), "the run's span is the root");
    let trace = run.trace_id.clone();
    assert!(spans.iter().all(|s| s.trace_id == trace), "one trace per run: {:?}", names(&spans));
    let run_id = attr_str(run, "cairn.run_id").expect("run id attribute");
    assert_eq!(run_id.len(), 26, "{run_id}");
    assert_eq!(attr_str(run, "cairn.status").as_deref(), Some("ok"));
    let run_cost = attr_f64(run, "cairn.cost_usd").expect("the run's cost");
    assert!(run_cost > 0.0, "{run_cost}");

    let phase = by_name(&spans, "phase gather");
    assert_eq!(phase.parent_span_id, run.span_id);
    let branches: Vec<&Span> = spans.iter().filter(|s| s.name.starts_with("branch ")).collect();
    assert_eq!(branches.len(), 2, "{:?}", names(&spans));
    assert!(branches.iter().all(|b| b.parent_span_id == phase.span_id));
    let step = by_name(&spans, "step prep");
    let branch0 = by_name(&spans, "branch 0");
    assert_eq!(step.parent_span_id, branch0.span_id, "the step runs in the first branch");

    let agent = by_name(&spans, "invoke_agent reader");
    assert_eq!(agent.parent_span_id, phase.span_id);
    assert_eq!(attr_str(agent, "gen_ai.operation.name").as_deref(), Some("invoke_agent"));
    assert_eq!(attr_str(agent, "gen_ai.provider.name").as_deref(), Some("m"));
    assert_eq!(attr_str(agent, "gen_ai.request.model").as_deref(), Some("tiny"));
    assert_eq!(attr_str(agent, "gen_ai.response.model").as_deref(), Some("tiny"));
    assert_eq!(attr_int(agent, "gen_ai.usage.input_tokens"), Some(30));
    assert_eq!(attr_int(agent, "gen_ai.usage.output_tokens"), Some(8));
    // Priced at $1 / $2 per million tokens: 30 in and 8 out.
    let cost = attr_f64(agent, "cairn.cost_usd").expect("the call's cost");
    assert!((cost - 0.000_046).abs() < 1e-9, "{cost}");
    assert_eq!(attr_str(agent, "cairn.run_id"), Some(run_id));

    let turns: Vec<&Span> = spans.iter().filter(|s| s.name == "chat tiny").collect();
    assert_eq!(turns.len(), 2, "two model turns: {:?}", names(&spans));
    let mut turns = turns;
    turns.sort_by_key(|t| attr_int(t, "cairn.turn"));
    for turn in &turns {
        assert_eq!(turn.parent_span_id, agent.span_id);
        assert_eq!(attr_str(turn, "gen_ai.operation.name").as_deref(), Some("chat"));
        assert_eq!(attr_str(turn, "gen_ai.provider.name").as_deref(), Some("m"));
        assert!(attr(turn, "gen_ai.input.messages").is_none(), "no content without the opt-in");
        assert!(attr(turn, "gen_ai.output.messages").is_none(), "no content without the opt-in");
    }
    assert_eq!(attr_int(turns[0], "gen_ai.usage.input_tokens"), Some(10));
    assert_eq!(attr_int(turns[1], "gen_ai.usage.output_tokens"), Some(3));
    let reasons = |t: &Span| match attr(t, "gen_ai.response.finish_reasons") {
        Some(AnyValue::ArrayValue(a)) => a
            .values
            .iter()
            .filter_map(|v| match &v.value {
                Some(AnyValue::StringValue(s)) => Some(s.clone()),
                _ => None,
            })
            .collect::<Vec<_>>(),
        other => panic!("finish reasons: {other:?}"),
    };
    assert_eq!(reasons(turns[0]), ["tool_use"]);
    assert_eq!(reasons(turns[1]), ["stop"]);

    let tool = by_name(&spans, "execute_tool read_file");
    assert_eq!(tool.parent_span_id, turns[0].span_id, "the tool call is a child of the turn that asked");
    assert_eq!(attr_str(tool, "gen_ai.tool.name").as_deref(), Some("read_file"));
    assert_eq!(attr_str(tool, "cairn.status").as_deref(), Some("ok"));

    // Every parent is in the trace, and every span ends no earlier than it starts.
    let ids: HashMap<&[u8], &str> = spans.iter().map(|s| (s.span_id.as_slice(), s.name.as_str())).collect();
    for span in &spans {
        assert!(span.end_time_unix_nano >= span.start_time_unix_nano, "{}", span.name);
        if !span.parent_span_id.is_empty() {
            assert!(ids.contains_key(span.parent_span_id.as_slice()), "{}'s parent is missing", span.name);
        }
    }
}

/// Prompts and answers are exported only with the opt-in variable, over OTLP/JSON too.
#[test]
fn message_content_is_exported_only_when_asked_and_json_is_spoken() {
    let server = scripted();
    let dir = notes_project(&server);
    let receiver = Receiver::start();
    let envs =
        [(cairn::__internal::CAPTURE_CONTENT_VAR, "true"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")];
    let (code, stderr, _) = run_traced(dir.path(), &receiver.endpoint, &envs);
    assert_eq!(code, 0, "{stderr}");
    let spans = receiver.wait_for("run s", Duration::from_secs(10));
    assert!(
        receiver.content_types().iter().all(|t| t == "application/json"),
        "{:?}",
        receiver.content_types()
    );
    let mut turns: Vec<&Span> = spans.iter().filter(|s| s.name == "chat tiny").collect();
    turns.sort_by_key(|t| attr_int(t, "cairn.turn"));
    let input = attr_str(turns[0], "gen_ai.input.messages").expect("the prompt, when asked");
    assert!(input.contains("read notes.txt"), "{input}");
    let output = attr_str(turns[1], "gen_ai.output.messages").expect("the answer, when asked");
    assert!(output.contains("the notes say 42"), "{output}");
}

/// A collector that accepts connections and never answers (a black hole) neither fails the
/// run nor holds it: the process ends within the flush deadline.
#[test]
fn a_collector_that_hangs_or_is_down_never_fails_or_holds_the_run() {
    let hole = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", hole.local_addr().unwrap());
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for stream in hole.incoming().flatten() {
            keep.lock().unwrap().push(stream);
        }
    });
    let server = scripted();
    let dir = notes_project(&server);
    let (code, stderr, took) = run_traced(dir.path(), &endpoint, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(took < Duration::from_secs(6), "a hung collector held the run: {took:?}");

    // Down: nothing listens on the port.
    let port = {
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let server = scripted();
    let dir = notes_project(&server);
    let (code, stderr, took) = run_traced(dir.path(), &format!("http://127.0.0.1:{port}"), &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(took < Duration::from_secs(6), "a down collector held the run: {took:?}");
}

/// Without the endpoint variable telemetry is not set up at all (a protocol it would refuse
/// is not even read); with it, gRPC (not built in) is refused with a usage error before
/// anything runs.
#[test]
fn nothing_is_set_up_without_the_endpoint_and_grpc_is_refused() {
    let server = scripted();
    let dir = notes_project(&server);
    let out = cairn_in(dir.path())
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .args(["run", "s.rhai"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let receiver = Receiver::start();
    let out = cairn_in(dir.path())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .args(["run", "s.rhai"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && stderr.contains("grpc"), "{stderr}");
    assert!(receiver.spans().is_empty());
}

/// `cairn serve` (its in-process workers) and a separate `cairn worker` export the runs they
/// drive, each run its own trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_and_a_separate_worker_export_the_runs_they_drive() {
    use std::process::{Command, Stdio};
    for separate_worker in [false, true] {
        let receiver = Receiver::start();
        let dir = tempfile::tempdir().unwrap();
        let store = format!("sqlite:{}", dir.path().join("c.db").display());
        let port = crate::support::serve::free_port();
        let workers = if separate_worker { "0" } else { "2" };
        let mut serve = crate::support::serve::serve_command_on(
            dir.path(),
            &store,
            &format!("127.0.0.1:{port}"),
            None,
            &["--workers", workers],
        );
        let traced = |command: &mut Command| {
            command
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
                .env("OTEL_BSP_SCHEDULE_DELAY", "100")
                .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
                .stdout(Stdio::null())
                .stderr(Stdio::null());
        };
        traced(&mut serve);
        let mut children = vec![serve.spawn().unwrap()];
        if separate_worker {
            let mut worker = Command::new(assert_cmd::cargo::cargo_bin("cairn"));
            worker.current_dir(dir.path()).args(["--store", &store, "worker", "--quiet"]);
            traced(&mut worker);
            children.push(worker.spawn().unwrap());
        }
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.get(format!("{base}/healthz")).send().await.map(|r| r.status() != 200).unwrap_or(true) {
            assert!(Instant::now() < deadline, "cairn serve did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let body = serde_json::json!({ "source": "phase(\"p\", || agent(\"one\"))", "name": "traced" });
        let submitted: serde_json::Value =
            client.post(format!("{base}/v1/runs")).json(&body).send().await.unwrap().json().await.unwrap();
        let run_id = submitted["run_id"].as_str().expect("a run id").to_owned();
        let spans = tokio::task::spawn_blocking({
            let state = receiver.state.clone();
            move || {
                Receiver { endpoint: String::new(), state }.wait_for("run traced", Duration::from_secs(20))
            }
        })
        .await
        .unwrap();
        for child in &mut children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let run = by_name(&spans, "run traced");
        assert_eq!(attr_str(run, "cairn.run_id"), Some(run_id), "worker apart: {separate_worker}");
        let agent = by_name(&spans, "invoke_agent default");
        assert_eq!(attr_str(agent, "gen_ai.provider.name").as_deref(), Some("echo"));
        assert_eq!(agent.trace_id, run.trace_id);
        assert_eq!(agent.parent_span_id, by_name(&spans, "phase p").span_id);
    }
}

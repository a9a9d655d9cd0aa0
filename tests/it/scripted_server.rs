//! A scripted OpenAI-compatible model for tests that drive the real `cairn` binary: a tiny
//! HTTP/1.1 server on a std thread that answers each request with the next scripted reply (an
//! SSE body, an HTTP error, or a stall that never answers) and records every request body.

#![allow(dead_code)] // a shared helper: each test uses part of it

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A 200 event stream with this body.
    Sse(String),
    /// An HTTP error status with a JSON body.
    Status(u16, String),
    /// Headers never come: the connection is held open until the server is dropped.
    Stall,
    /// A 200 event stream's headers, then nothing: the connection is held open (a hung upstream
    /// behind a proxy that already sent the headers).
    HeadersThenStall,
}

#[derive(Default)]
struct State {
    replies: Vec<Reply>,
    requests: Vec<Value>,
}

/// The running server; dropping it stops answering (the thread dies with the test process).
pub struct ScriptedServer {
    pub url: String,
    state: Arc<(Mutex<State>, Condvar)>,
}

impl ScriptedServer {
    /// Serves `replies` in order; past the end, every request gets a non-retryable 400.
    pub fn start(replies: Vec<Reply>) -> ScriptedServer {
        let state = Arc::new((Mutex::new(State { replies, requests: Vec::new() }), Condvar::new()));
        let url = format!("http://{}/v1", listen(&state, serve));
        ScriptedServer { url, state }
    }

    /// The JSON bodies received so far, in arrival order.
    pub fn requests(&self) -> Vec<Value> {
        self.state.0.lock().unwrap().requests.clone()
    }

    /// Waits until `n` requests have arrived (or panics after `within`).
    pub fn wait_for_requests(&self, n: usize, within: Duration) {
        drop(wait_until(
            &self.state,
            within,
            |state| state.requests.len() >= n,
            |state| format!("only {} of {n} requests arrived", state.requests.len()),
        ));
    }
}

/// The state a test server's connections share, and the condition variable they notify.
pub type Shared<S> = Arc<(Mutex<S>, Condvar)>;

/// A listener on a free local port whose every connection `serve` answers on a thread of its
/// own, with the state they share (the scripted model's and the OTLP receiver's); its address.
pub fn listen<S: Send + 'static>(
    state: &Shared<S>,
    serve: fn(TcpStream, &Shared<S>),
) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let shared = state.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let shared = shared.clone();
            std::thread::spawn(move || serve(stream, &shared));
        }
    });
    address
}

/// Waits until `ready` holds of the shared state (each `serve` notifies on a change), and
/// returns it locked; after `within`, fails the test with `missing`'s description.
pub fn wait_until<'a, S>(
    state: &'a (Mutex<S>, Condvar),
    within: Duration,
    ready: impl Fn(&S) -> bool,
    missing: impl Fn(&S) -> String,
) -> std::sync::MutexGuard<'a, S> {
    let (lock, cvar) = state;
    let deadline = Instant::now() + within;
    let mut guard = lock.lock().unwrap();
    while !ready(&*guard) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "{}", missing(&*guard));
        guard = cvar.wait_timeout(guard, left).unwrap().0;
    }
    guard
}

/// Reads one HTTP request's body (headers up to the blank line, then `Content-Length` bytes);
/// `None` when the peer closes first.
pub fn read_request(stream: &TcpStream) -> Option<Vec<u8>> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut length = 0usize;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        if let Some((name, value)) = trimmed.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(body)
}

fn serve(mut stream: TcpStream, shared: &Arc<(Mutex<State>, Condvar)>) {
    let Some(body) = read_request(&stream) else { return };
    let reply = {
        let (lock, cvar) = &**shared;
        let mut state = lock.lock().unwrap();
        let index = state.requests.len();
        state.requests.push(serde_json::from_slice(&body).unwrap_or(Value::Null));
        cvar.notify_all();
        state.replies.get(index).cloned()
    };
    let (status, content_type, text) = match reply {
        Some(Reply::Sse(text)) => (200, "text/event-stream", text),
        Some(Reply::Status(code, text)) => (code, "application/json", text),
        Some(Reply::Stall) => {
            std::thread::sleep(Duration::from_secs(120));
            return;
        }
        Some(Reply::HeadersThenStall) => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.flush();
            std::thread::sleep(Duration::from_secs(120));
            return;
        }
        None => {
            (400, "application/json", json!({"error": {"message": "no more scripted replies"}}).to_string())
        }
    };
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        text.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(text.as_bytes());
    let _ = stream.flush();
}

/// `data:` lines for Chat Completions chunks, ending `[DONE]`.
pub fn data_lines(chunks: &[Value]) -> String {
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    body
}

fn chunk(delta: Value, finish: Value) -> Value {
    json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

fn usage(input: u64, output: u64) -> Value {
    json!({"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}})
}

/// A streamed text answer with the given usage.
pub fn text(answer: &str, input: u64, output: u64) -> Reply {
    Reply::Sse(data_lines(&[
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": answer}), Value::Null),
        chunk(json!({}), json!("stop")),
        usage(input, output),
    ]))
}

/// A streamed tool call whose argument text is sent as is (it may be invalid JSON).
pub fn tool_call(id: &str, name: &str, arguments: &str, input: u64, output: u64) -> Reply {
    Reply::Sse(data_lines(&[
        chunk(json!({"role": "assistant", "content": null}), Value::Null),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": arguments}}]}),
            Value::Null,
        ),
        chunk(json!({}), json!("tool_calls")),
        usage(input, output),
    ]))
}

/// A directory with `cairn.toml` pointing provider `m` (model `m:tiny`, priced) at `url`, plus
/// `extra` config, and `script` as `s.rhai`.
pub fn project(url: &str, extra: &str, script: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[providers.m]\nkind = \"openai-compatible\"\nbase_url = \"{url}\"\nprices = {{ tiny = [1.0, 2.0] }}\n\n[routing]\ndefault = \"m:tiny\"\n\n{extra}\n"
    );
    std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
    std::fs::write(dir.path().join("s.rhai"), script).unwrap();
    dir
}

/// The `cairn` binary in `dir`, with no provider keys from the environment.
pub fn cairn_in(dir: &Path) -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("cairn").unwrap();
    cmd.current_dir(dir)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        // The default lease: a resume takes a killed driver's run over at once (its process is
        // gone), and a short ttl lapses while a loaded machine keeps the live driver waiting,
        // which stopped its run (`finish_reason::*` failed "cancelled" at 300 ms).
        .env_remove("CAIRN_LEASE_TTL_MS")
        .timeout(Duration::from_secs(60));
    cmd
}

/// Runs `cairn` with `args` in `dir`: (exit code, stdout, stderr).
pub fn run(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = cairn_in(dir).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The run id in `cairn run`'s stderr (`run RUNID ...`).
pub fn run_id(stderr: &str) -> String {
    for word in stderr.split_whitespace() {
        let word = word.trim_matches(|c: char| !c.is_ascii_alphanumeric());
        if word.len() == 26 && word.chars().all(|c| c.is_ascii_alphanumeric() && !c.is_ascii_lowercase()) {
            return word.to_owned();
        }
    }
    panic!("no run id in: {stderr}")
}

/// Every message text the model was sent in request `body` (system, user, tool), joined.
pub fn sent_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .map(|ms| ms.iter().map(|m| m["content"].to_string()).collect())
        .unwrap_or_default()
}

//! Starting `cairn serve` and `cairn worker` processes for the integration tests and waiting on
//! them: the one copy of the spawn-and-wait helpers that the serve, timer, budget and outage
//! tests share.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde_json::{Value, json};

/// A running `cairn serve` (and any `cairn worker`s beside it), killed on drop.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) workers: Vec<Child>,
    pub(crate) base: String,
    pub(crate) token: Option<String>,
    pub(crate) store: String,
    pub(crate) dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        for child in self.workers.iter_mut().chain(std::iter::once(&mut self.child)) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub(crate) fn serve_command(dir: &Path, listen: &str, token: Option<&str>, extra: &[&str]) -> Command {
    let store = format!("sqlite:{}", dir.join("c.db").display());
    serve_command_on(dir, &store, listen, token, extra)
}

pub(crate) fn serve_command_on(
    dir: &Path,
    store: &str,
    listen: &str,
    token: Option<&str>,
    extra: &[&str],
) -> Command {
    let mut command = Command::new(assert_cmd::cargo::cargo_bin("cairn"));
    command
        .current_dir(dir)
        .args(["serve", "--quiet", "--listen", listen, "--store", store])
        .args(extra)
        .env_remove("CAIRN_SERVER_TOKEN")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL");
    if let Some(token) = token {
        command.env("CAIRN_SERVER_TOKEN", token);
    }
    command
}

pub(crate) async fn start(token: Option<&str>, extra: &[&str]) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    start_on(dir, store, token, extra).await
}

/// `cairn serve` in `dir` (its `cairn.toml`, if any) over the store at `store`.
pub(crate) async fn start_on(
    dir: tempfile::TempDir,
    store: String,
    token: Option<&str>,
    extra: &[&str],
) -> Server {
    let port = free_port();
    let child = serve_command_on(dir.path(), &store, &format!("127.0.0.1:{port}"), token, extra)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let server = Server {
        child,
        workers: Vec::new(),
        base: format!("http://127.0.0.1:{port}"),
        token: token.map(str::to_owned),
        store,
        dir,
    };
    wait_healthy(&server.base, Duration::from_secs(20)).await;
    server
}

/// `cairn serve` over a fresh PostgreSQL schema, or `None` (skipped) without a test server
/// outside CI.
pub(crate) async fn start_on_postgres(token: Option<&str>, extra: &[&str]) -> Option<Server> {
    let store = crate::postgres::fresh_url("serve")?;
    Some(start_on(tempfile::tempdir().unwrap(), store, token, extra).await)
}

impl Server {
    /// Starts a `cairn worker` process on the server's store, killed with the server.
    pub(crate) fn add_worker(&mut self, extra: &[&str]) {
        let child = spawn_worker(self.dir.path(), &self.store, extra);
        self.workers.push(child);
    }

    pub(crate) fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
        let request = client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    pub(crate) async fn submit(&self, body: Value) -> (u16, Value) {
        let r = self.request(reqwest::Method::POST, "/v1/runs").json(&body).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap())
    }

    pub(crate) async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.request(reqwest::Method::GET, path).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self.request(reqwest::Method::POST, path).json(&body).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Waits until the run reaches `status`.
    pub(crate) async fn wait_for(&self, run: &str, status: &str) -> Value {
        let path = &format!("/v1/runs/{run}");
        let fetch = move || async move {
            let (code, body) = self.get(path).await;
            assert_eq!(code, 200, "{body}");
            body
        };
        poll_run(run, status, Duration::from_secs(20), Duration::from_millis(20), fetch).await
    }

    /// Follows the run's event stream (from `last_event_id`) until it closes or `stop_after`
    /// entry events arrived; returns `(event, id, data)` per event.
    pub(crate) async fn events(
        &self,
        run: &str,
        last_event_id: Option<u64>,
        stop_after: Option<usize>,
    ) -> Vec<(String, Option<u64>, Value)> {
        let mut request = self.request(reqwest::Method::GET, &format!("/v1/runs/{run}/events"));
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        let mut stream = response.bytes_stream();
        let mut buffer = String::new();
        let mut events = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let next =
                tokio::time::timeout_at(deadline, stream.next()).await.expect("the event stream stalled");
            let Some(chunk) = next else { return events };
            buffer.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                // A block without data is a keep-alive comment.
                let Some(parsed) = parse_event(&block) else { continue };
                events.push(parsed);
                if stop_after.is_some_and(|n| events.iter().filter(|e| e.0 == "entry").count() >= n) {
                    return events;
                }
            }
        }
    }
}

/// Sixteen clients resolve the wait `key` of the suspended run `run` with different values,
/// alternating over `servers`: exactly one is accepted, the run finishes `ok`, only the winner
/// is journaled (read through the last server), and every other client is answered 409
/// `already_resolved` with the winning value. Returns the winner's answer.
pub(crate) async fn race_resolutions(servers: &[&Server], run: &str, key: &str) -> (u16, Value) {
    let path = format!("/v1/runs/{run}/resolve/{key}");
    let resolutions = (0..16).map(|i| servers[i % servers.len()].post(&path, json!(i)));
    let answers = futures::future::join_all(resolutions).await;
    let accepted = |code: u16| code == 200 || code == 202;
    let won: Vec<&(u16, Value)> = answers.iter().filter(|(c, _)| accepted(*c)).collect();
    assert_eq!(won.len(), 1, "one resolution wins: {answers:?}");
    let done = servers[0].wait_for(run, "ok").await;
    let journal = servers[servers.len() - 1].get(&format!("/v1/runs/{run}/journal")).await.1;
    let resolved: Vec<&Value> = journal["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "resolution")
        .map(|e| &e["value"])
        .collect();
    assert_eq!(resolved.len(), 1, "only the winner is journaled: {resolved:?}");
    for (code, body) in answers.iter().filter(|(c, _)| !accepted(*c)) {
        assert_eq!((*code, body["code"].as_str()), (409, Some("already_resolved")), "{body}");
        assert_eq!(&body["details"]["value"], resolved[0], "{body}");
    }
    assert_eq!(done["status"], "ok");
    won[0].clone()
}

/// The events of a whole SSE body.
pub(crate) fn parse_events(text: &str) -> Vec<(String, Option<u64>, Value)> {
    text.split("\n\n").filter_map(parse_event).collect()
}

/// One SSE block's event name, id and JSON data; `None` for a block without data (a comment).
fn parse_event(block: &str) -> Option<(String, Option<u64>, Value)> {
    let (mut event, mut id, mut data) = (String::from("message"), None, String::new());
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            event = v.trim().to_owned();
        } else if let Some(v) = line.strip_prefix("id:") {
            id = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.trim_start());
        }
    }
    (!data.is_empty()).then(|| (event, id, serde_json::from_str(&data).unwrap()))
}

/// Waits until `{base}/healthz` answers 200, failing the test after `limit`.
pub(crate) async fn wait_healthy(base: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(r) = reqwest::get(format!("{base}/healthz")).await
            && r.status() == 200
        {
            return;
        }
        assert!(Instant::now() < deadline, "cairn serve did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A spawned `cairn` process, killed (and reaped) on drop.
pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_worker(dir: &Path, store: &str, extra: &[&str]) -> Child {
    Command::new(assert_cmd::cargo::cargo_bin("cairn"))
        .current_dir(dir)
        .args(["--store", store, "worker", "--quiet"])
        .args(extra)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// A `cairn worker` in `dir` (its `cairn.toml`, if any) over `store`, killed on drop.
pub(crate) fn worker(dir: &Path, store: &str, extra: &[&str]) -> Killed {
    Killed(spawn_worker(dir, store, extra))
}

/// A `cairn serve` with its in-process workers in a project directory the test owns, killed
/// on drop.
pub(crate) struct Serve {
    _child: Killed,
    pub(crate) base: String,
}

/// `cairn serve` in `dir` over `store`, up and healthy.
pub(crate) async fn serve_in(dir: &Path, store: &str, extra: &[&str]) -> Serve {
    let port = free_port();
    let child = serve_command_on(dir, store, &format!("127.0.0.1:{port}"), None, extra)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let server = Serve { _child: Killed(child), base: format!("http://127.0.0.1:{port}") };
    wait_healthy(&server.base, Duration::from_secs(60)).await;
    server
}

/// Polls `GET {base}/v1/runs/{run}` until the run reaches `status`.
pub(crate) async fn wait_status(base: &str, run: &str, status: &str) -> Value {
    let url = &format!("{base}/v1/runs/{run}");
    let fetch =
        move || async move { reqwest::get(url.as_str()).await.unwrap().json().await.unwrap_or(Value::Null) };
    poll_run(run, status, Duration::from_secs(60), Duration::from_millis(50), fetch).await
}

/// The one poll behind both waits: `fetch`es the run's body every `every` until its status is
/// `status`, failing the test after `limit`.
async fn poll_run<F, Fut>(run: &str, status: &str, limit: Duration, every: Duration, fetch: F) -> Value
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Value>,
{
    let deadline = Instant::now() + limit;
    loop {
        let body = fetch().await;
        if body["status"] == status {
            return body;
        }
        assert!(Instant::now() < deadline, "run {run} never reached {status}: {body}");
        tokio::time::sleep(every).await;
    }
}

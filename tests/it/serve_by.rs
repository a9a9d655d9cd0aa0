//! Who did what, through the binary: with named scoped tokens, the journal records which token
//! started, resumed, resolved and cancelled each run (the `by` of the entry that records it),
//! and `GET /v1/runs/{id}`, the journal route and `cairn inspect` (text and `--json`) show it;
//! a metrics-only token is refused on every run route.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use super::support::serve::{Server, start_on};

const CONFIG: &str = r#"
[routing]
default = "echo:default"

[providers.echo]
kind = "echo"
latency_ms = 30000

[server.tokens.alice]
env = "BY_TEST_ALICE"
scopes = ["read", "write"]

[server.tokens.bob]
env = "BY_TEST_BOB"
scopes = ["read", "write"]

[server.tokens.scrape]
env = "BY_TEST_SCRAPE"
scopes = ["metrics"]
"#;

const ALICE: &str = "alice-secret-by";
const BOB: &str = "bob-secret-by";
const SCRAPE: &str = "scrape-secret-by";

async fn call(server: &Server, method: Method, path: &str, token: &str, body: Option<Value>) -> (u16, Value) {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    let mut request = client.request(method, format!("{}{path}", server.base)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Polls the run (as alice) until `done` holds of it.
async fn wait_until(server: &Server, run: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, body) = call(server, Method::GET, &format!("/v1/runs/{run}"), ALICE, None).await;
        assert_eq!(code, 200, "{body}");
        if done(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "run {run} never {what}: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn actions(shown: &Value) -> Vec<(String, String)> {
    shown["actions"]
        .as_array()
        .unwrap_or_else(|| panic!("no actions: {shown}"))
        .iter()
        .map(|a| (a["action"].as_str().unwrap().to_owned(), a["by"].as_str().unwrap().to_owned()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}

fn inspect(server: &Server, run: &str, json: bool) -> String {
    let mut command = std::process::Command::new(assert_cmd::cargo::cargo_bin("cairn"));
    command.current_dir(server.dir.path()).args(["--store", &server.store, "inspect", run]);
    if json {
        command.arg("--json");
    }
    let out = command.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_records_which_token_started_resolved_resumed_and_cancelled_a_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cairn.toml"), CONFIG).unwrap();
    // SAFETY: set before the server process starts; it inherits them. No other test reads them.
    unsafe {
        std::env::set_var("BY_TEST_ALICE", ALICE);
        std::env::set_var("BY_TEST_BOB", BOB);
        std::env::set_var("BY_TEST_SCRAPE", SCRAPE);
    }
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    let server = start_on(dir, store, None, &[]).await;
    let wait = |key: &str| json!({ "source": format!("let r = await_external(\"{key}\");\nr") });

    // Alice starts a run; Bob resolves its wait; it finishes.
    let (code, body) = call(&server, Method::POST, "/v1/runs", ALICE, Some(wait("ok"))).await;
    assert_eq!(code, 202, "{body}");
    let approved = body["run_id"].as_str().unwrap().to_owned();
    wait_until(&server, &approved, "suspended", |b| b["status"] == "suspended").await;
    let (code, body) =
        call(&server, Method::POST, &format!("/v1/runs/{approved}/resolve/ok"), BOB, Some(json!("yes")))
            .await;
    assert_eq!(code, 200, "{body}");
    let shown = wait_until(&server, &approved, "finished", |b| b["status"] == "ok").await;
    assert_eq!(actions(&shown), pairs(&[("start", "alice"), ("resolve", "bob")]), "{shown}");
    assert_eq!(shown["actions"][1]["key"], "ok", "{shown}");

    // Alice starts another; Bob resumes it (it suspends again); Alice cancels it.
    let (code, body) = call(&server, Method::POST, "/v1/runs", ALICE, Some(wait("never"))).await;
    assert_eq!(code, 202, "{body}");
    let resumed = body["run_id"].as_str().unwrap().to_owned();
    wait_until(&server, &resumed, "suspended", |b| b["status"] == "suspended").await;
    let (code, body) = call(&server, Method::POST, &format!("/v1/runs/{resumed}/resume"), BOB, None).await;
    assert_eq!(code, 202, "{body}");
    wait_until(&server, &resumed, "resumed and suspended again", |b| {
        b["status"] == "suspended" && b["meta"]["segments"] == 2
    })
    .await;
    // 200 when the worker has let the parked run go, 202 while it still holds it (it cancels
    // the run as it parks): either way the journal names Alice.
    let (code, body) = call(&server, Method::POST, &format!("/v1/runs/{resumed}/cancel"), ALICE, None).await;
    assert!(code == 200 || code == 202, "{code} {body}");
    let shown = wait_until(&server, &resumed, "cancelled", |b| b["status"] == "cancelled").await;
    assert_eq!(
        actions(&shown),
        pairs(&[("start", "alice"), ("resume", "bob"), ("cancel", "alice")]),
        "{shown}"
    );

    // A run a worker drives (waiting on a slow model) is cancelled through its worker: the
    // worker journals who asked.
    let (code, body) =
        call(&server, Method::POST, "/v1/runs", BOB, Some(json!({ "source": "agent(\"slow\")" }))).await;
    assert_eq!(code, 202, "{body}");
    let driven = body["run_id"].as_str().unwrap().to_owned();
    wait_until(&server, &driven, "ran", |b| b["status"] == "running" && b["entries"].as_u64() > Some(1))
        .await;
    let (code, body) = call(&server, Method::POST, &format!("/v1/runs/{driven}/cancel"), ALICE, None).await;
    assert_eq!(code, 202, "{body}");
    let shown = wait_until(&server, &driven, "cancelled", |b| b["status"] == "cancelled").await;
    assert_eq!(actions(&shown), pairs(&[("start", "bob"), ("cancel", "alice")]), "{shown}");

    // The journal route carries `by` on the entries themselves.
    let (code, page) = call(&server, Method::GET, &format!("/v1/runs/{approved}/journal"), BOB, None).await;
    assert_eq!(code, 200, "{page}");
    let resolution = page["entries"].as_array().unwrap().iter().find(|e| e["kind"] == "resolution").unwrap();
    assert_eq!(resolution["by"], "bob", "{page}");

    // `cairn inspect` shows them, as text and as JSON.
    let text = inspect(&server, &resumed, false);
    for line in ["by        start by alice", "by        resume by bob", "by        cancel by alice"] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
    let text = inspect(&server, &approved, false);
    assert!(text.contains("by        resolve \"ok\" by bob"), "{text}");
    let out: Value = serde_json::from_str(&inspect(&server, &driven, true)).unwrap();
    assert_eq!(actions(&out), pairs(&[("start", "bob"), ("cancel", "alice")]), "{out}");

    // The scraper reads /metrics and nothing of the runs.
    assert_eq!(call(&server, Method::GET, "/metrics", SCRAPE, None).await.0, 200);
    let run_routes = [
        (Method::GET, "/v1/runs".to_owned()),
        (Method::POST, "/v1/runs".to_owned()),
        (Method::GET, format!("/v1/runs/{approved}")),
        (Method::GET, format!("/v1/runs/{approved}/journal")),
        (Method::GET, format!("/v1/runs/{approved}/events")),
        (Method::POST, format!("/v1/runs/{resumed}/resolve/never")),
        (Method::POST, format!("/v1/runs/{resumed}/cancel")),
        (Method::POST, format!("/v1/runs/{resumed}/resume")),
    ];
    for (method, path) in run_routes {
        let (code, body) = call(&server, method.clone(), &path, SCRAPE, Some(json!({ "source": "1" }))).await;
        assert_eq!(code, 403, "{method} {path}: {body}");
        assert_eq!(body["code"], "forbidden", "{body}");
    }
    // And the writers cannot scrape.
    assert_eq!(call(&server, Method::GET, "/metrics", ALICE, None).await.0, 403);
}

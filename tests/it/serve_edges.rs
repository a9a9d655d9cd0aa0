//! `cairn serve` at its edges, from outside: drive-by requests a web page could send, the
//! JSON error contract on every path, racing clients, slow clients, shutdown with clients
//! attached, scoped tokens and diagnostics on stderr.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::serve::TOKEN;
use super::support::serve::{
    Server, free_port, parse_events, race_resolutions, serve_command_on, start, start_on, wait_healthy,
};

/// One raw HTTP/1.1 exchange (`Connection: close`): the status and the body as JSON (`Null`
/// when it is not JSON).
fn raw(server: &Server, request: &str) -> (u16, Value) {
    let addr = server.base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response);
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn host_of(server: &Server) -> String {
    server.base.trim_start_matches("http://").to_owned()
}

fn post_text(host: &str, path: &str, headers: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drive_by_requests_from_a_web_page_are_refused_and_pay_nothing() {
    let server = start(None, &["--allowed-host", "cairn.example"]).await;
    let host = host_of(&server);
    let source = json!({ "source": "agent(\"pay me\")" }).to_string();
    // DNS rebinding: the page's own name, pointed at the loopback address.
    let (code, body) =
        raw(&server, "GET /v1/runs HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n");
    assert_eq!((code, body["code"].as_str()), (421, Some("host_not_allowed")), "{body}");
    let (code, _) = raw(
        &server,
        &format!(
            "GET /v1/runs HTTP/1.1\r\nHost: attacker.example:{}\r\nConnection: close\r\n\r\n",
            host.rsplit(':').next().unwrap()
        ),
    );
    assert_eq!(code, 421);
    // A configured name (what a reverse proxy forwards) and localhost are answered.
    let (code, _) = raw(&server, "GET /v1/runs HTTP/1.1\r\nHost: cairn.example\r\nConnection: close\r\n\r\n");
    assert_eq!(code, 200);
    let port = host.rsplit(':').next().unwrap();
    let (code, _) = raw(
        &server,
        &format!("GET /healthz HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(code, 200);
    // A cross-site form or text/plain POST, which a browser sends without asking.
    for content_type in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]
    {
        let (code, body) = raw(
            &server,
            &post_text(&host, "/v1/runs", &format!("Content-Type: {content_type}\r\n"), &source),
        );
        assert_eq!(
            (code, body["code"].as_str()),
            (415, Some("unsupported_media_type")),
            "{content_type}: {body}"
        );
    }
    let (code, _) = raw(&server, &post_text(&host, "/v1/runs", "", &source));
    assert_eq!(code, 415, "a body without a content type");
    // JSON from another origin, or marked cross-site by the browser.
    let json_from = |origin: &str| format!("Content-Type: application/json\r\nOrigin: {origin}\r\n");
    let (code, body) =
        raw(&server, &post_text(&host, "/v1/runs", &json_from("http://attacker.example"), &source));
    assert_eq!((code, body["code"].as_str()), (403, Some("cross_site_refused")), "{body}");
    let (code, _) = raw(&server, &post_text(&host, "/v1/runs", &json_from("null"), &source));
    assert_eq!(code, 403);
    let cross = "Content-Type: application/json\r\nSec-Fetch-Site: cross-site\r\n";
    assert_eq!(raw(&server, &post_text(&host, "/v1/runs", cross, &source)).0, 403);
    let (code, _) =
        raw(&server, &post_text(&host, "/v1/runs/x/cancel", "Origin: http://attacker.example\r\n", ""));
    assert_eq!(code, 403, "a body-less cross-site POST");
    // Nothing was queued, nothing paid.
    assert_eq!(server.get("/v1/runs").await.1["runs"], json!([]));
    // The service's own page (same origin) and a plain client are served.
    let own =
        format!("Content-Type: application/json\r\nOrigin: http://{host}\r\nSec-Fetch-Site: same-origin\r\n");
    let (code, body) = raw(&server, &post_text(&host, "/v1/runs", &own, &source));
    assert_eq!(code, 202, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_is_json_and_races_and_waits_get_their_codes() {
    let server = start(Some(TOKEN), &[]).await;
    let host = host_of(&server);
    let auth = format!("Authorization: bearer {TOKEN}\r\n");
    // A lower-case scheme is the same scheme (RFC 9110).
    let (code, body) =
        raw(&server, &format!("GET /v1/runs HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n"));
    assert_eq!(code, 200, "{body}");
    // 405 and a path that is not UTF-8: JSON errors.
    for request in [
        format!(
            "PUT /v1/runs HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
        ),
        format!("DELETE /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    ] {
        let (code, body) = raw(&server, &request);
        assert_eq!((code, body["code"].as_str()), (405, Some("method_not_allowed")), "{request}: {body}");
    }
    let (code, body) = raw(
        &server,
        &format!("GET /v1/runs/%FF%FE HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n"),
    );
    assert!(code == 400 || code == 404, "{code}");
    assert!(body["code"].is_string() && body["message"].is_string(), "{body}");
    let (code, body) = raw(
        &server,
        &format!("GET /v1/runs?limit=x HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n"),
    );
    assert_eq!((code, body["code"].as_str()), (400, Some("bad_request")), "{body}");
    // What the schema allows is served: `status=` and an empty Last-Event-ID.
    assert_eq!(server.get("/v1/runs?status=").await.0, 200);
    // Losers of a run-id race are told 409, one submission wins.
    let run_id = "raced-run";
    let submissions = (0..8).map(|_| {
        server.submit(json!({ "source": "let r = await_external(\"approve\");\nr", "run_id": run_id }))
    });
    let answers = futures::future::join_all(submissions).await;
    let codes: Vec<u16> = answers.iter().map(|(c, _)| *c).collect();
    assert_eq!(codes.iter().filter(|c| **c == 202).count(), 1, "{codes:?}");
    assert!(codes.iter().all(|c| *c == 202 || *c == 409), "{codes:?}");
    // Each loser is told which run exists.
    for (_, body) in answers.iter().filter(|(c, _)| *c == 409) {
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("run raced-run already exists"), "{body}");
    }
    // So is a submission of the run id once it is queued.
    let (code, body) = server.submit(json!({ "source": "1", "run_id": run_id })).await;
    assert_eq!((code, body["message"].as_str()), (409, Some("run raced-run already exists")), "{body}");
    server.wait_for(run_id, "suspended").await;
    let r = server
        .request(reqwest::Method::GET, &format!("/v1/runs/{run_id}/events"))
        .header("Last-Event-ID", "")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    drop(r);
    // A key the run never waited on.
    let (code, body) = server.post(&format!("/v1/runs/{run_id}/resolve/nope"), json!(1)).await;
    assert_eq!((code, body["code"].as_str()), (404, Some("unknown_wait")), "{body}");
    // Sixteen clients resolve the one wait with different values: one wins, every other is
    // told so with the winning value, and the run finishes with it.
    let (code, won) = race_resolutions(&[&server], run_id, "approve").await;
    assert_eq!((code, &won["resolution"]), (200, &json!("applied")), "{won}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_and_cannot_lock_others_out() {
    let server =
        start(None, &["--header-timeout-ms", "1000", "--body-timeout-ms", "1000", "--max-connections", "16"])
            .await;
    let addr = host_of(&server);
    // Half-open requests: a header that never ends, and connections that say nothing.
    let mut held = Vec::new();
    for i in 0..40 {
        let mut stream = TcpStream::connect(&addr).unwrap();
        if i % 2 == 0 {
            stream
                .write_all(format!("GET /v1/runs HTTP/1.1\r\nHost: {addr}\r\nX-Slow: ").as_bytes())
                .unwrap();
        }
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        held.push(stream);
    }
    // Every one is closed by the server: past the limit at once, the rest at the timeout.
    let started = Instant::now();
    for mut stream in held {
        let mut buf = [0u8; 256];
        let closed = loop {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break true,
                Ok(_) => continue, // a 408 before the close
            }
        };
        assert!(closed);
    }
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "half-open connections held for {:?}",
        started.elapsed()
    );
    // A body that never arrives is answered 408.
    let (code, body) = raw(
        &server,
        &format!(
            "POST /v1/runs HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{{\"source\""
        ),
    );
    assert_eq!((code, body["code"].as_str()), (408, Some("request_timeout")), "{body}");
    // Everyone else is served.
    assert_eq!(server.get("/healthz").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_event_streams_with_a_final_event_and_exits_in_the_grace_period() {
    let mut server = start(None, &["--grace-ms", "3000"]).await;
    let (_, body) = server.submit(json!({ "source": "let r = await_external(\"go\");\nr" })).await;
    let run = body["run_id"].as_str().unwrap().to_owned();
    server.wait_for(&run, "suspended").await;
    let stream =
        server.request(reqwest::Method::GET, &format!("/v1/runs/{run}/events")).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    let text = tokio::spawn(stream.text());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = i32::try_from(server.child.id()).unwrap();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let started = Instant::now();
    let text = tokio::time::timeout(Duration::from_secs(20), text).await.expect("the stream ended").unwrap();
    let events = parse_events(&text.unwrap_or_default());
    let last = events.last().expect("events");
    assert_eq!(last.0, "shutdown", "{events:?}");
    assert_eq!(last.2["run_id"], run.as_str());
    let exited = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(15), "the server did not exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exited.success(), "{exited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_have_scopes_and_a_scraper_cannot_touch_runs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cairn.toml"),
        "[server.tokens.scraper]\nenv = \"EDGE_SCRAPER\"\nscopes = [\"metrics\"]\n\n\
         [server.tokens.ci]\nenv = \"EDGE_CI\"\nscopes = [\"read\", \"write\"]\n\n\
         [server.tokens.viewer]\nenv = \"EDGE_VIEWER\"\nscopes = [\"read\"]\n",
    )
    .unwrap();
    // SAFETY: set before the server process starts; it inherits them.
    unsafe {
        std::env::set_var("EDGE_SCRAPER", "scraper-secret");
        std::env::set_var("EDGE_CI", "ci-secret");
        std::env::set_var("EDGE_VIEWER", "viewer-secret");
    }
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    let server = start_on(dir, store, None, &[]).await;
    let client = reqwest::Client::new();
    let call = |method: reqwest::Method, path: &str, token: &str| {
        let request = client.request(method.clone(), format!("{}{path}", server.base)).bearer_auth(token);
        if method == reqwest::Method::POST { request.json(&json!({ "source": "1" })) } else { request }
    };
    let status = |r: reqwest::Response| r.status().as_u16();
    assert_eq!(status(call(reqwest::Method::GET, "/metrics", "scraper-secret").send().await.unwrap()), 200);
    assert_eq!(status(call(reqwest::Method::GET, "/v1/runs", "scraper-secret").send().await.unwrap()), 403);
    assert_eq!(status(call(reqwest::Method::POST, "/v1/runs", "scraper-secret").send().await.unwrap()), 403);
    assert_eq!(status(call(reqwest::Method::GET, "/metrics", "ci-secret").send().await.unwrap()), 403);
    assert_eq!(status(call(reqwest::Method::GET, "/v1/runs", "viewer-secret").send().await.unwrap()), 200);
    assert_eq!(status(call(reqwest::Method::POST, "/v1/runs", "viewer-secret").send().await.unwrap()), 403);
    let r = call(reqwest::Method::POST, "/v1/runs", "ci-secret").send().await.unwrap();
    assert_eq!(r.status(), 202);
    // The run records which token submitted it.
    let run: Value = r.json().await.unwrap();
    let shown: Value =
        call(reqwest::Method::GET, &format!("/v1/runs/{}", run["run_id"].as_str().unwrap()), "viewer-secret")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(shown["meta"]["tags"], json!(["token:ci"]), "{shown}");
    assert_eq!(status(call(reqwest::Method::GET, "/v1/runs", "nobody").send().await.unwrap()), 401);
}

#[test]
fn a_configured_token_whose_variable_is_unset_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cairn.toml"),
        "[server.tokens.x]\nenv = \"EDGE_UNSET_TOKEN\"\nscopes = [\"read\"]\n",
    )
    .unwrap();
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    let out = serve_command_on(dir.path(), &store, &format!("127.0.0.1:{}", free_port()), None, &[])
        .env_remove("EDGE_UNSET_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("EDGE_UNSET_TOKEN"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diagnostics_go_to_stderr_as_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    let port = free_port();
    let log = dir.path().join("stderr.log");
    let mut child = serve_command_on(
        dir.path(),
        &store,
        &format!("127.0.0.1:{port}"),
        None,
        &["--max-connections", "1", "--log-format", "json"],
    )
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).unwrap())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut first = loop {
        if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) {
            break stream;
        }
        assert!(Instant::now() < deadline, "cairn serve did not come up");
        std::thread::sleep(Duration::from_millis(50));
    };
    first.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").unwrap();
    // Past the limit of one: refused, and the refusal logged.
    let found = loop {
        let _second = TcpStream::connect(("127.0.0.1", port));
        std::thread::sleep(Duration::from_millis(100));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains("too many open connections")) {
            break line.to_owned();
        }
        assert!(Instant::now() < deadline, "no log line: {text}");
    };
    let _ = child.kill();
    let _ = child.wait();
    let line: Value = serde_json::from_str(&found).unwrap();
    assert_eq!(line["level"], "WARN", "{line}");
    assert!(line["fields"]["limit"].is_number(), "{line}");
}

/// A fresh submission (no `run_id`) to a server whose driver lease is short (300 ms), held up
/// by the store past that lease (its blob writes wait for the test's lock on the PostgreSQL
/// `blobs` table, taken before the request and released only once the run's lease was taken
/// and 600 ms more went by), is queued: 202. Before, the store's fence refused the meta write
/// under the lapsed lease and the server answered 409 `run  already exists`, naming no run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_held_up_past_the_driver_lease_is_queued_on_postgres() {
    let Some(store) = crate::postgres::fresh_url("heldsubmit") else { return };
    let schema = store.rsplit_once("schema=").unwrap().1.to_owned();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let child = serve_command_on(dir.path(), &store, &format!("127.0.0.1:{port}"), None, &["--workers", "0"])
        .env("CAIRN_LEASE_TTL_MS", "300")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let server = Server { child, workers: Vec::new(), base: base.clone(), token: None, store, dir };
    wait_healthy(&base, Duration::from_secs(60)).await;

    let url = crate::postgres::server_url().unwrap();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client.batch_execute(&format!("BEGIN; LOCK TABLE {schema}.blobs IN EXCLUSIVE MODE")).await.unwrap();
    let hold = async {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let leased: i64 =
                client.query_one(&format!("SELECT count(*) FROM {schema}.leases"), &[]).await.unwrap().get(0);
            if leased > 0 {
                break;
            }
            assert!(Instant::now() < deadline, "the submission never took its run's lease");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Twice the driver lease after it was taken, at least.
        tokio::time::sleep(Duration::from_millis(600)).await;
        client.batch_execute("COMMIT").await.unwrap();
    };
    let ((code, body), ()) = tokio::join!(server.submit(json!({ "source": "40 + 2" })), hold);
    assert_eq!(code, 202, "{body}");
    let run = body["run_id"].as_str().unwrap();
    assert_eq!(server.get(&format!("/v1/runs/{run}")).await.1["status"], "queued");
}

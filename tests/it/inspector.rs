//! The browser inspector of `cairn serve`, in a real headless Chromium driven over WebDriver
//! (`fantoccini` and Debian's `chromium-driver`), plus the paged API and token events it
//! reads. Without Chromium the browser cases skip with a message, except under `CI=true`,
//! where a missing browser fails them. Screenshots land in `target/inspector-screenshots/`.

use std::io::Write as _;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use super::serve::TOKEN;
use super::support::serve::{Server, free_port, start, start_on};

const WAIT: Duration = Duration::from_secs(40);

/// Chromium and its driver, or `None` (skipped) when absent outside CI.
fn browser_tools() -> Option<(PathBuf, PathBuf)> {
    let chromium =
        std::env::var_os("CAIRN_CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    let driver = std::env::var_os("CAIRN_CHROMEDRIVER")
        .map_or_else(|| PathBuf::from("/usr/bin/chromedriver"), PathBuf::from);
    if chromium.exists() && driver.exists() {
        return Some((chromium, driver));
    }
    let missing = format!(
        "{} or {} is missing (apt-get install chromium chromium-driver)",
        chromium.display(),
        driver.display()
    );
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "the inspector's browser tests need Chromium: {missing}"
    );
    eprintln!("skipping a browser test of the inspector: {missing}");
    None
}

/// A headless Chromium session, its driver killed on drop.
struct Browser {
    client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

async fn browser() -> Option<Browser> {
    let (chromium, driver_path) = browser_tools()?;
    let port = free_port();
    let driver = Command::new(driver_path)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let profile = tempfile::tempdir().unwrap();
    let args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .chain(std::iter::once(format!("--user-data-dir={}", profile.path().display())))
    .collect::<Vec<_>>();
    let mut caps = serde_json::Map::new();
    caps.insert("goog:chromeOptions".into(), json!({ "binary": chromium, "args": args }));
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + WAIT;
    let client = loop {
        match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps.clone())
            .connect(&url)
            .await
        {
            Ok(client) => break client,
            Err(e) => {
                assert!(Instant::now() < deadline, "no WebDriver session: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    Some(Browser { client, driver, _profile: profile })
}

impl Browser {
    /// Opens the inspector at `fragment` and gives it the token.
    async fn open(&self, server: &Server, fragment: &str) {
        self.client.goto(&format!("{}/{fragment}", server.base)).await.unwrap();
        if let Some(token) = &server.token {
            let input = self.client.wait().at_most(WAIT).for_element(Locator::Css("#token")).await.unwrap();
            input.send_keys(token).await.unwrap();
            self.client
                .find(Locator::Css("#token-form button[type=submit]"))
                .await
                .unwrap()
                .click()
                .await
                .unwrap();
        }
    }

    async fn wait_for(&self, css: &str) -> fantoccini::elements::Element {
        match self.client.wait().at_most(WAIT).for_element(Locator::Css(css)).await {
            Ok(found) => found,
            Err(e) => {
                let page = self.client.source().await.unwrap_or_default();
                panic!("no {css} on the page ({e}): {page}")
            }
        }
    }

    async fn count(&self, css: &str) -> usize {
        self.client.find_all(Locator::Css(css)).await.unwrap().len()
    }

    async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/inspector-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), png).unwrap();
    }

    async fn url_has_no_token(&self, server: &Server) {
        let url = self.client.current_url().await.unwrap();
        if let Some(token) = &server.token {
            assert!(!url.as_str().contains(token.as_str()), "the token is in the URL: {url}");
        }
    }
}

async fn submitted(server: &Server, source: &str) -> String {
    let (code, body) = server.submit(json!({ "source": source })).await;
    assert_eq!(code, 202, "{body}");
    body["run_id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "races the page re-rendering its wait forms on the stream's first status event (stale element); unignore once the page keeps unchanged forms"]
async fn the_list_shows_a_finished_and_a_suspended_run_and_resolving_from_the_page_finishes_it() {
    let Some(browser) = browser().await else { return };
    let server = start(Some(TOKEN), &[]).await;
    let done = submitted(&server, "agent(\"hello\")").await;
    let waiting =
        submitted(&server, "let r = await_external(\"approve\");\nlet a = agent(\"after \" + r);\na").await;
    server.wait_for(&done, "ok").await;
    server.wait_for(&waiting, "suspended").await;

    browser.open(&server, "").await;
    browser.wait_for(&format!("tr.run[data-run=\"{done}\"][data-status=\"ok\"]")).await;
    browser.wait_for(&format!("tr.run[data-run=\"{waiting}\"][data-status=\"suspended\"]")).await;
    browser.screenshot("list.png").await;
    browser.url_has_no_token(&server).await;
    // Filtered by status, from the server: only the suspended run is left.
    browser.client.goto(&format!("{}/#/?status=suspended", server.base)).await.unwrap();
    browser.wait_for(&format!("tr.run[data-run=\"{waiting}\"]")).await;
    assert_eq!(browser.count("tr.run").await, 1, "only the suspended run is listed");

    browser.wait_for(&format!("tr.run[data-run=\"{waiting}\"] a")).await.click().await.unwrap();
    let value = browser.wait_for("form.wait[data-key=\"approve\"] textarea").await;
    browser.wait_for("#run-status[data-status=\"suspended\"]").await;
    value.send_keys("\"yes\"").await.unwrap();
    browser
        .client
        .find(Locator::Css("form.wait[data-key=\"approve\"] button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The page follows the run over SSE to its end.
    browser.wait_for("#run-status[data-status=\"ok\"]").await;
    let shown = server.wait_for(&waiting, "ok").await;
    assert_eq!(shown["pending"], json!([]), "{shown}");
    browser.wait_for("#costs svg.chart").await;
    browser.screenshot("run.png").await;
    browser.url_has_no_token(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_with_markup_renders_as_text() {
    let Some(browser) = browser().await else { return };
    let server = start(None, &[]).await;
    // The echo model answers with the prompt: markup a page must never run.
    let run = submitted(&server, "agent(\"<img src=x onerror=window.pwned=1><b>bold</b>\")").await;
    server.wait_for(&run, "ok").await;
    browser.open(&server, &format!("#/runs/{run}")).await;
    browser.wait_for("#run-status[data-status=\"ok\"]").await;
    browser.wait_for(".item-agent .row").await.click().await.unwrap();
    let answer = browser.wait_for("pre.field-answer").await;
    let text = answer.text().await.unwrap();
    assert!(text.contains("<img src=x onerror=window.pwned=1><b>bold</b>"), "{text}");
    assert_eq!(browser.count("img").await, 0, "the answer became an element");
    assert_eq!(browser.count("#main b").await, 0, "the answer became an element");
    let pwned = browser.client.execute("return window.pwned === undefined;", vec![]).await.unwrap();
    assert_eq!(pwned, json!(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_branch_fan_out_loads_collapsed_and_expands_on_demand() {
    let Some(browser) = browser().await else { return };
    let server = start(None, &[]).await;
    let source =
        "let fs = [];\nfor i in 0..500 { let j = i; fs.push(|| agent(`b${j}`)); }\nparallel(fs).len()";
    let run = submitted(&server, source).await;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (_, shown) = server.get(&format!("/v1/runs/{run}")).await;
        if shown["status"] == "ok" {
            break;
        }
        assert!(Instant::now() < deadline, "the fan-out never finished: {shown}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    browser.open(&server, &format!("#/runs/{run}")).await;
    let fan_out = browser.wait_for(".node-parallel").await;
    browser.wait_for("#loaded").await;
    assert_eq!(fan_out.attr("data-expanded").await.unwrap().as_deref(), Some("false"));
    assert_eq!(browser.count(".node-branch").await, 0, "branches are not rendered until asked");
    let summary = browser.wait_for(".node-parallel > .row .summary").await.text().await.unwrap();
    assert!(summary.contains("500 scopes"), "{summary}");
    browser.wait_for(".node-parallel > .row").await.click().await.unwrap();
    browser.wait_for(".node-branch").await;
    assert_eq!(browser.count(".node-branch").await, 500);
    assert_eq!(browser.count(".node-branch[data-expanded=\"true\"]").await, 0, "each branch is collapsed");
    assert_eq!(browser.count(".node-branch .item").await, 0);
    browser.client.find(Locator::Css(".node-branch > .row")).await.unwrap().click().await.unwrap();
    browser.wait_for(".node-branch .item-agent").await;
}

/// A model that streams `pieces` deltas (`tok0 `, `tok1 `, ...) `gap` apart, for every request.
fn slow_model(pieces: usize, gap: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                if super::scripted_server::read_request(&stream).is_none() {
                    return;
                }
                let chunk = |delta: Value, finish: Value| json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let mut send = |value: &Value| {
                    stream.write_all(format!("data: {value}\n\n").as_bytes()).is_ok()
                        && stream.flush().is_ok()
                };
                send(&chunk(json!({"role": "assistant", "content": ""}), Value::Null));
                for i in 0..pieces {
                    std::thread::sleep(gap);
                    if !send(&chunk(json!({"content": format!("tok{i} ")}), Value::Null)) {
                        return;
                    }
                }
                send(&chunk(json!({}), json!("stop")));
                send(
                    &json!({"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": pieces}}),
                );
                let _ = stream.write_all(b"data: [DONE]\n\n");
                let _ = stream.flush();
            });
        }
    });
    url
}

async fn slow_server(pieces: usize, gap: Duration) -> Server {
    let url = slow_model(pieces, gap);
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[providers.m]\nkind = \"openai-compatible\"\nbase_url = \"{url}\"\nprices = {{ tiny = [1.0, 2.0] }}\n\n[routing]\ndefault = \"m:tiny\"\n"
    );
    std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    start_on(dir, store, Some(TOKEN), &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the tokens appear, but the page's final wait for the settled status timed out once under load: to be diagnosed"]
async fn a_live_runs_tokens_appear_while_it_streams() {
    let Some(browser) = browser().await else { return };
    let server = slow_server(40, Duration::from_millis(250)).await;
    let run = submitted(&server, "agent(\"count\")").await;
    server.wait_for(&run, "running").await;
    browser.open(&server, &format!("#/runs/{run}")).await;
    let tokens = browser.wait_for("#live pre.tokens").await;
    let deadline = Instant::now() + WAIT;
    let seen = loop {
        let text = tokens.text().await.unwrap();
        if text.contains("tok3 ") {
            break text;
        }
        assert!(Instant::now() < deadline, "no streamed tokens: {text:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Seen while it streams: the call has not ended.
    assert!(!seen.contains("tok39"), "{seen}");
    let (_, shown) = server.get(&format!("/v1/runs/{run}")).await;
    assert_eq!(shown["status"], "running", "{shown}");
    browser.wait_for("#run-status[data-status=\"ok\"]").await;
}

/// The events of `GET /v1/runs/{id}/events{query}` until the stream ends.
async fn events_of(server: &Server, run: &str, query: &str) -> Vec<(String, Value)> {
    let response = server
        .request(reqwest::Method::GET, &format!("/v1/runs/{run}/events{query}"))
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    super::support::serve::parse_events(&text).into_iter().map(|(event, _, data)| (event, data)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_events_stream_when_asked_and_only_then() {
    let server = slow_server(8, Duration::from_millis(100)).await;
    let run = submitted(&server, "agent(\"count\")").await;
    let events = events_of(&server, &run, "?tokens=1").await;
    let tokens: Vec<&Value> = events.iter().filter(|e| e.0 == "token").map(|e| &e.1).collect();
    let text: String = tokens.iter().filter_map(|t| t["text"].as_str()).collect();
    // Lossy in principle; a listener this fast misses none of them.
    assert!(text.contains("tok0 ") && text.contains("tok7 "), "{events:?}");
    assert!(
        tokens.iter().all(|t| t["run_id"] == run.as_str() && t["scope"] == "" && t["call"].is_u64()),
        "{tokens:?}"
    );
    let first_token = events.iter().position(|e| e.0 == "token").unwrap();
    let answer = events
        .iter()
        .position(|e| e.0 == "entry" && e.1["status"] == "ok" && e.1["kind"] == "agent")
        .unwrap();
    assert!(first_token < answer, "the deltas come before the journaled answer: {events:?}");
    assert_eq!(events.last().unwrap().0, "outcome");
    // Not journaled: the journal holds the answer whole, and a replay streams no tokens.
    let again = events_of(&server, &run, "?tokens=1").await;
    assert!(again.iter().all(|e| e.0 != "token"), "{again:?}");
    let run = submitted(&server, "agent(\"count\")").await;
    let plain = events_of(&server, &run, "").await;
    assert!(plain.iter().all(|e| e.0 != "token"), "{plain:?}");
    assert_eq!(server.get(&format!("/v1/runs/{run}/events?tokens=maybe")).await.0, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_list_and_the_journal_are_paged_and_the_page_is_guarded() {
    let server = start(Some(TOKEN), &[]).await;
    let mut runs = Vec::new();
    for i in 0..3 {
        let run = submitted(&server, &format!("agent(\"a{i}\");\nagent(\"b{i}\")")).await;
        server.wait_for(&run, "ok").await;
        runs.push(run);
    }
    // Three pages of one run each, newest first, by cursor.
    let mut listed = Vec::new();
    let mut after = String::new();
    loop {
        let (code, page) = server.get(&format!("/v1/runs?limit=1&cost=true&after={after}")).await;
        assert_eq!(code, 200, "{page}");
        assert_eq!(page["runs"].as_array().unwrap().len(), 1, "{page}");
        assert!(page["runs"][0]["cost_nano_usd"].is_u64(), "{page}");
        listed.push(page["runs"][0]["run_id"].as_str().unwrap().to_owned());
        match page["next"].as_str() {
            Some(next) => after = next.to_owned(),
            None => break,
        }
    }
    runs.reverse();
    assert_eq!(listed, runs);
    let (code, body) = server.get("/v1/runs?after=no-such-run").await;
    assert_eq!((code, body["code"].as_str()), (400, Some("bad_request")), "{body}");
    let (code, page) = server.get("/v1/runs?tag=token:nobody").await;
    assert_eq!((code, page["runs"].as_array().map(Vec::len)), (200, Some(0)), "{page}");
    // The journal in pages of two, to the end.
    let run = &runs[0];
    let (_, whole) = server.get(&format!("/v1/runs/{run}/journal")).await;
    let whole: Vec<u64> =
        whole["entries"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    let mut paged: Vec<u64> = Vec::new();
    let mut after = 0;
    loop {
        let (code, page) = server.get(&format!("/v1/runs/{run}/journal?after={after}&limit=2")).await;
        assert_eq!(code, 200, "{page}");
        let seqs: Vec<u64> =
            page["entries"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert!(seqs.len() <= 2);
        paged.extend(&seqs);
        match page["next_after"].as_u64() {
            Some(next) => after = next,
            None => break,
        }
    }
    assert_eq!(paged, whole);
    for bad in ["limit=0", "limit=10001", "after=-1", "limit=x"] {
        let (code, body) = server.get(&format!("/v1/runs/{run}/journal?{bad}")).await;
        assert_eq!((code, body["code"].as_str()), (400, Some("bad_request")), "{bad}: {body}");
    }
    // The page itself needs no token (the API does), and carries a strict policy.
    let page = reqwest::get(format!("{}/", server.base)).await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.starts_with("default-src 'self'") && csp.contains("script-src 'self'"), "{csp}");
    assert_eq!(page.headers()["x-content-type-options"], "nosniff");
    assert!(page.text().await.unwrap().contains("/inspector.js"));
    let script = reqwest::get(format!("{}/inspector.js", server.base)).await.unwrap();
    assert!(script.headers()["content-type"].to_str().unwrap().starts_with("text/javascript"));
    assert_eq!(reqwest::get(format!("{}/v1/runs", server.base)).await.unwrap().status(), 401);
}

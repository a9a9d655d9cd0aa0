//! The browser inspector of `cairn serve`, in a real headless Chromium driven over WebDriver
//! (`fantoccini` and Debian's `chromium-driver`), plus the paged API and token events it
//! reads. Without Chromium the browser cases skip with a message, except under `CI=true`,
//! where a missing browser fails them. Screenshots land in `target/inspector-screenshots/`.

use std::io::Write as _;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

    /// [`Browser::screenshot`] of a picture the docs show as `docs/img/{name}`: kept as an
    /// artifact under that name, and written over the docs' copy with
    /// `CAIRN_UPDATE_SCREENSHOTS=1`.
    async fn docs_screenshot(&self, name: &str) {
        self.screenshot(name).await;
        if std::env::var("CAIRN_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
            std::fs::copy(
                root.join("target/inspector-screenshots").join(name),
                root.join("docs/img").join(name),
            )
            .unwrap();
        }
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
    browser.docs_screenshot("inspector.png").await;
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

/// A person follows a 500-branch run live: the page is open while the fan-out runs, its
/// branches join the (expanded) fan-out as they are journaled, one expands to its call; the
/// run's approval is resolved from the page, and the cost reads at every level of the tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_branch_run_is_followed_live_resolved_and_its_costs_read_in_the_page() {
    let Some(browser) = browser().await else { return };
    // The model holds its answers until the page follows the fan-out.
    let gate = Arc::new(AtomicBool::new(false));
    let server = slow_server_with(1, Duration::from_millis(1), gate.clone(), &[]).await;
    let source = "let fs = [];\nfor i in 0..500 { let j = i; fs.push(|| agent(`b${j}`)); }\n\
                  let n = parallel(fs).len();\nlet ok = await_external(\"approve\");\n`${n} branches, approved: ${ok}`";
    let run = submitted(&server, source).await;
    server.wait_for(&run, "running").await;
    browser.open(&server, &format!("#/runs/{run}")).await;
    browser.wait_for("#run-status[data-status=\"running\"]").await;
    browser.wait_for(".node-parallel > .row").await.click().await.unwrap();
    browser.wait_for(".node-parallel[data-expanded=\"true\"] .node-branch").await;
    let before = browser.count(".node-branch").await;
    assert!(before < 500, "the fan-out was done before the page followed it");
    gate.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let shown = browser.count(".node-branch").await;
        if shown == 500 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{shown} of 500 branches shown: {}",
            server.get(&format!("/v1/runs/{run}")).await.1
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A bounded number of calls stream on the page at once, and none once the run waits.
    assert!(browser.count("#live .stream").await <= 24, "the page keeps every call's stream");
    // The run waits for its approval: resolved from the page, it finishes.
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
    match browser
        .client
        .wait()
        .at_most(Duration::from_secs(90))
        .for_element(Locator::Css("#run-status[data-status=\"ok\"]"))
        .await
    {
        Ok(_) => {}
        Err(e) => panic!(
            "the page never showed the run settled ({e}): {}",
            server.get(&format!("/v1/runs/{run}")).await.1
        ),
    }
    let (_, shown) = server.get(&format!("/v1/runs/{run}")).await;
    assert_eq!(shown["status"], "ok", "{shown}");
    // The cost tree: the fan-out's total, each branch's, each call's.
    let fan_out = browser.wait_for(".node-parallel > .row .summary").await.text().await.unwrap();
    assert!(fan_out.contains("500 scopes") && fan_out.contains('$'), "{fan_out}");
    browser.wait_for(".node-branch > .row").await.click().await.unwrap();
    let branch =
        browser.wait_for(".node-branch[data-expanded=\"true\"] > .row .summary").await.text().await.unwrap();
    assert!(branch.contains('$'), "{branch}");
    let call = browser.wait_for(".node-branch .item-agent > .row").await.text().await.unwrap();
    assert!(call.contains("m:tiny") && call.contains('$'), "{call}");
    browser.wait_for("#costs svg.chart").await;
    browser.wait_for("#live[hidden]").await;
    browser.client.execute("window.scrollTo(0, 0);", vec![]).await.unwrap();
    browser.docs_screenshot("inspector-run.png").await;
}

/// A model that streams `pieces` deltas (`tok0 `, `tok1 `, ...) `gap` apart, for every request,
/// the first once `gate` is open.
fn slow_model(pieces: usize, gap: Duration, gate: Arc<AtomicBool>) -> String {
    held_model(pieces, gap, gate, Arc::new(AtomicBool::new(false)))
}

/// [`slow_model`] that also ends an answer early, after the delta during which `stop` is set.
fn held_model(pieces: usize, gap: Duration, gate: Arc<AtomicBool>, stop: Arc<AtomicBool>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (gate, stop) = (gate.clone(), stop.clone());
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
                while !gate.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let mut sent = 0;
                while sent < pieces && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(gap);
                    if !send(&chunk(json!({"content": format!("tok{sent} ")}), Value::Null)) {
                        return;
                    }
                    sent += 1;
                }
                send(&chunk(json!({}), json!("stop")));
                send(
                    &json!({"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": sent}}),
                );
                let _ = stream.write_all(b"data: [DONE]\n\n");
                let _ = stream.flush();
            });
        }
    });
    url
}

async fn slow_server(pieces: usize, gap: Duration) -> Server {
    slow_server_with(pieces, gap, Arc::new(AtomicBool::new(true)), &[]).await
}

async fn slow_server_with(pieces: usize, gap: Duration, gate: Arc<AtomicBool>, extra: &[&str]) -> Server {
    model_server(slow_model(pieces, gap, gate), extra).await
}

/// `cairn serve` (SQLite, [`TOKEN`]) whose default model is the fake at `url`, priced.
async fn model_server(url: String, extra: &[&str]) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[providers.m]\nkind = \"openai-compatible\"\nbase_url = \"{url}\"\nprices = {{ tiny = [1.0, 2.0] }}\n\n[routing]\ndefault = \"m:tiny\"\n"
    );
    std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    start_on(dir, store, Some(TOKEN), extra).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_runs_tokens_appear_while_it_streams() {
    let Some(browser) = browser().await else { return };
    // The model holds its deltas until the page follows the run: tokens are live only, and on
    // a loaded machine opening the page can take longer than a whole answer streams.
    let gate = Arc::new(AtomicBool::new(false));
    let server = slow_server_with(40, Duration::from_millis(250), gate.clone(), &[]).await;
    let run = submitted(&server, "agent(\"count\")").await;
    server.wait_for(&run, "running").await;
    browser.open(&server, &format!("#/runs/{run}")).await;
    browser.wait_for("#run-status[data-status=\"running\"]").await;
    // The journal page is loaded (the call's `running` entry shows): the stream opens next.
    browser.wait_for(".item-agent").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    gate.store(true, Ordering::SeqCst);
    let tokens = browser.wait_for("#live pre.tokens").await;
    let deadline = Instant::now() + WAIT;
    let seen = loop {
        let text = tokens.text().await.unwrap();
        if text.contains("tok") {
            break text;
        }
        assert!(Instant::now() < deadline, "no streamed tokens: {text:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Seen while it streams: the call has not ended, and more arrive.
    assert!(!seen.contains("tok39 "), "{seen}");
    let (_, shown) = server.get(&format!("/v1/runs/{run}")).await;
    assert_eq!(shown["status"], "running", "{shown}");
    let deadline = Instant::now() + WAIT;
    loop {
        let text = tokens.text().await.unwrap();
        if text.len() > seen.len() {
            break;
        }
        assert!(Instant::now() < deadline, "no more tokens after {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The page follows the run to its end (its stream, or its poll should the stream drop).
    match browser
        .client
        .wait()
        .at_most(Duration::from_secs(90))
        .for_element(Locator::Css("#run-status[data-status=\"ok\"]"))
        .await
    {
        Ok(_) => {}
        Err(e) => panic!(
            "the page never showed the run settled ({e}): {}",
            server.get(&format!("/v1/runs/{run}")).await.1
        ),
    }
    browser.screenshot("live.png").await;
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

/// An agent call that used a tool shows its turns: over the API (its checkpointed conversation
/// and its answer, as text) and in the page, where a tool result with markup stays text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_calls_turns_are_shown_as_text() {
    use super::scripted_server::{ScriptedServer, project, text, tool_call};
    let model = ScriptedServer::start(vec![
        tool_call("c1", "read_file", "{\"path\": \"notes.txt\"}", 10, 5),
        text("the answer is 42", 20, 3),
    ]);
    let dir = project(&model.url, "[toolsets.files]\nkind = \"fs-read\"\nroot = \".\"\n", "");
    std::fs::write(dir.path().join("notes.txt"), "<img src=x onerror=window.pwned=1>the secret is 42")
        .unwrap();
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    let server = start_on(dir, store, Some(TOKEN), &[]).await;
    let run = submitted(&server, "agent(\"go\", #{tools: [\"files\"]})").await;
    server.wait_for(&run, "ok").await;
    let (_, page) = server.get(&format!("/v1/runs/{run}/journal")).await;
    let answer = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "agent" && e["status"] == "ok")
        .unwrap_or_else(|| panic!("{page}"));
    let seq = answer["seq"].as_u64().unwrap();
    let (code, turns) = server.get(&format!("/v1/runs/{run}/calls/{seq}/turns")).await;
    assert_eq!(code, 200, "{turns}");
    assert_eq!(turns["checkpointed"], true, "{turns}");
    let parts: Vec<(String, String)> = turns["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["parts"].as_array().unwrap().clone())
        .map(|p| (p["type"].as_str().unwrap().to_owned(), p["text"].as_str().unwrap().to_owned()))
        .filter(|(kind, text)| kind != "text" || !text.is_empty())
        .collect();
    let kinds: Vec<&str> = parts.iter().map(|(kind, _)| kind.as_str()).collect();
    assert_eq!(kinds, ["text", "tool_call", "tool_result", "answer"], "{turns}");
    assert!(parts[1].1.contains("notes.txt") && parts[2].1.contains("the secret is 42"), "{turns}");
    assert_eq!(parts[3].1, "the answer is 42");
    // Each turn's record: its model, tokens and cost (at `prices = [1.0, 2.0]` per million
    // tokens), and its time; together they are the call's cost. The assistant messages say
    // which turn spoke.
    let log = turns["turn_log"].as_array().unwrap_or_else(|| panic!("{turns}"));
    let shown: Vec<(u64, &str, u64, u64, u64)> = log
        .iter()
        .map(|t| {
            (
                t["turn"].as_u64().unwrap(),
                t["served_by"].as_str().unwrap(),
                t["usage"]["input_tokens"].as_u64().unwrap(),
                t["usage"]["output_tokens"].as_u64().unwrap(),
                t["cost_nano_usd"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(shown, [(1, "m:tiny", 10, 5, 20_000), (2, "m:tiny", 20, 3, 26_000)], "{turns}");
    assert_eq!(turns["cost_nano_usd"], 46_000, "{turns}");
    assert!(log.iter().all(|t| t["ended_ms"].as_i64() >= t["started_ms"].as_i64() && t["status"] == "ok"));
    assert_eq!(turns["recorded"], true, "{turns}");
    let spoke: Vec<Value> = turns["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["turn"].clone())
        .collect();
    assert_eq!(spoke, [json!(1), json!(2)], "{turns}");
    // The running entry names the same call; anything else is no agent call.
    let running = answer["ref"].as_u64().unwrap();
    assert_eq!(server.get(&format!("/v1/runs/{run}/calls/{running}/turns")).await.0, 200);
    assert_eq!(server.get(&format!("/v1/runs/{run}/calls/999/turns")).await.0, 404);
    assert_eq!(server.get(&format!("/v1/runs/{run}/calls/x/turns")).await.0, 400);

    let Some(browser) = browser().await else { return };
    browser.open(&server, &format!("#/runs/{run}")).await;
    browser.wait_for("#run-status[data-status=\"ok\"]").await;
    browser.wait_for(".item-agent > .row").await.click().await.unwrap();
    browser.wait_for(".item-agent button.load-turns").await.click().await.unwrap();
    let result = browser.wait_for(".turns pre.part-tool_result").await.text().await.unwrap();
    assert!(result.contains("<img src=x onerror=window.pwned=1>the secret is 42"), "{result}");
    assert_eq!(
        browser.count(".turns .turn").await,
        4,
        "user, assistant (the tool call), user (its result) and the answer"
    );
    assert_eq!(browser.count("#main img").await, 0, "a tool result became an element");
    let rows = browser.client.find_all(Locator::Css(".turns table.turn-log tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 2, "one row per turn");
    let first = rows[0].text().await.unwrap();
    assert!(
        first.contains("m:tiny") && first.contains("10 in / 5 out") && first.contains("$0.000020"),
        "{first}"
    );
    browser
        .client
        .execute("document.querySelector('.turns table.turn-log').scrollIntoView();", vec![])
        .await
        .unwrap();
    browser.screenshot("turns.png").await;
}

/// A client following a run's events gets a `tool` event after each of a tool call's journal
/// entries: its start, then its end with its status, before the agent's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_streams_tool_events_beside_the_journal() {
    use super::scripted_server::{ScriptedServer, project, text, tool_call};
    let model = ScriptedServer::start(vec![
        tool_call("c1", "read_file", "{\"path\": \"notes.txt\"}", 10, 5),
        text("the answer is 42", 20, 3),
    ]);
    let dir = project(&model.url, "[toolsets.files]\nkind = \"fs-read\"\nroot = \".\"\n", "");
    std::fs::write(dir.path().join("notes.txt"), "the secret is 42").unwrap();
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    let server = start_on(dir, store, Some(TOKEN), &[]).await;
    let run = submitted(&server, "agent(\"go\", #{tools: [\"files\"]})").await;
    let events = events_of(&server, &run, "").await;
    let tools: Vec<(usize, &Value)> =
        events.iter().enumerate().filter(|(_, e)| e.0 == "tool").map(|(i, e)| (i, &e.1)).collect();
    let phases: Vec<(&str, &str, &str)> = tools
        .iter()
        .map(|(_, t)| {
            (t["phase"].as_str().unwrap(), t["tool"].as_str().unwrap(), t["status"].as_str().unwrap())
        })
        .collect();
    assert_eq!(phases, [("start", "read_file", "running"), ("end", "read_file", "ok")], "{events:?}");
    for (at, tool) in &tools {
        // Each follows its own entry.
        let (kind, entry) = &events[at - 1];
        assert_eq!(
            (kind.as_str(), &entry["kind"], &entry["seq"]),
            ("entry", &json!("tool"), &tool["seq"]),
            "{events:?}"
        );
        assert!(
            tool["call_id"].is_string() && tool["scope"].as_str().is_some_and(|s| s.starts_with("at:agent-")),
            "{tool}"
        );
    }
    let answer = events
        .iter()
        .position(|e| e.0 == "entry" && e.1["status"] == "ok" && e.1["kind"] == "agent")
        .unwrap();
    assert!(tools.iter().all(|(at, _)| *at < answer), "{events:?}");
    assert_eq!(events.last().unwrap().0, "outcome");
}

/// A call that took one turn (no checkpoint) shows its prompt and its answer as that turn,
/// with the turn's model, tokens, cost and time; a long prompt is cut and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_turn_call_shows_its_prompt_and_answer_as_a_turn() {
    let server = slow_server(2, Duration::from_millis(1)).await;
    let prompt = format!("<b>count</b> {}", "p".repeat(4100));
    let run = submitted(&server, &format!("agent(\"{prompt}\")")).await;
    server.wait_for(&run, "ok").await;
    let (_, page) = server.get(&format!("/v1/runs/{run}/journal")).await;
    let answer = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "agent" && e["status"] == "ok")
        .unwrap_or_else(|| panic!("{page}"))
        .clone();
    let seq = answer["seq"].as_u64().unwrap();
    let (code, turns) = server.get(&format!("/v1/runs/{run}/calls/{seq}/turns")).await;
    assert_eq!(code, 200, "{turns}");
    assert_eq!(
        (turns["checkpointed"].clone(), turns["recorded"].clone()),
        (json!(false), json!(true)),
        "{turns}"
    );
    let messages = turns["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{turns}");
    assert_eq!(messages[0]["role"], "user");
    let asked = &messages[0]["parts"][0];
    assert_eq!(asked["truncated"], true, "{turns}");
    assert_eq!(asked["text"].as_str().unwrap().chars().count(), 4000);
    assert!(asked["text"].as_str().unwrap().starts_with("<b>count</b> ppp"), "{turns}");
    assert_eq!((messages[1]["role"].as_str(), messages[1]["turn"].as_u64()), (Some("assistant"), Some(1)));
    assert_eq!(messages[1]["parts"][0]["text"], "tok0 tok1 ");
    let log = turns["turn_log"].as_array().unwrap();
    assert_eq!(log.len(), 1, "{turns}");
    // The turn is the call: its usage and cost are the entry's.
    assert_eq!(log[0]["usage"], answer["usage"], "{turns}");
    assert_eq!(log[0]["cost_nano_usd"], answer["cost_nano_usd"], "{turns}");
    assert_eq!(log[0]["cost_nano_usd"], 3 * 1000 + 2 * 2000, "{turns}");
    assert_eq!(log[0]["call_seq"], answer["ref"], "{turns}");

    let Some(browser) = browser().await else { return };
    browser.open(&server, &format!("#/runs/{run}")).await;
    browser.wait_for("#run-status[data-status=\"ok\"]").await;
    browser.wait_for(".item-agent > .row").await.click().await.unwrap();
    browser.wait_for(".item-agent button.load-turns").await.click().await.unwrap();
    let asked = browser.wait_for(".turns .turn-user pre.part-text").await.text().await.unwrap();
    assert!(asked.starts_with("<b>count</b> ppp"), "{asked}");
    assert_eq!(browser.count(".turns .turn").await, 2, "the prompt and the answer");
    assert_eq!(browser.count("#main .turns b").await, 0, "the prompt became an element");
    let row = browser.wait_for(".turns table.turn-log tbody tr").await.text().await.unwrap();
    assert!(row.contains("3 in / 2 out") && row.contains("$0.000007"), "{row}");
}

/// A run a separate `cairn worker` process drives streams its tokens to a `cairn serve` on the
/// same store: relayed through the store while the stream wants them, before the answer is
/// journaled; and the relay's blobs are gone once the run ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_driven_by_a_separate_worker_streams_its_tokens_through_the_store() {
    let mut server = slow_server_with(
        24,
        Duration::from_millis(150),
        Arc::new(AtomicBool::new(true)),
        &["--workers", "0"],
    )
    .await;
    let run = submitted(&server, "agent(\"count\")").await;
    // The stream opens while the run is queued and no worker exists yet.
    let response = server
        .request(reqwest::Method::GET, &format!("/v1/runs/{run}/events?tokens=1"))
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    server.add_worker(&[]);
    let text = response.text().await.unwrap();
    let events: Vec<(String, Value)> = super::support::serve::parse_events(&text)
        .into_iter()
        .map(|(event, _, data)| (event, data))
        .collect();
    assert_eq!(
        events.last().map(|e| (e.0.as_str(), e.1["status"].clone())),
        Some(("outcome", json!("ok"))),
        "{events:?}"
    );
    let streamed: String =
        events.iter().filter(|e| e.0 == "token").filter_map(|e| e.1["text"].as_str()).collect();
    // Lossy in principle (the relay starts within half a second of the call): most of it is there.
    let seen = (0..24).filter(|i| streamed.contains(&format!("tok{i} "))).count();
    assert!(seen >= 12, "only {seen} of 24 deltas came through the store: {streamed:?}");
    let first_token = events.iter().position(|e| e.0 == "token").unwrap();
    let answer = events
        .iter()
        .position(|e| e.0 == "entry" && e.1["status"] == "ok" && e.1["kind"] == "agent")
        .unwrap();
    assert!(first_token < answer, "the deltas come before the journaled answer: {events:?}");
    assert!(
        events
            .iter()
            .filter(|e| e.0 == "token")
            .all(|e| e.1["run_id"] == run.as_str() && e.1["call"].is_u64())
    );
    // The worker deletes its chunks a little after the call, and the stream its wish.
    let store = cairn::store::open(&server.store).unwrap();
    let id = cairn::RunId::parse(&run).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left: Vec<String> =
            store.transcripts.list(&id).unwrap().into_iter().filter(|r| r.contains("/live/")).collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the relay left {left:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The events of `GET {base}/v1/runs/{run}/events?tokens=1`, followed in a task until the
/// stream ends; what arrived so far is readable meanwhile.
type Followed = Arc<std::sync::Mutex<Vec<(String, Value)>>>;

fn follow_tokens(base: &str, token: Option<&str>, run: &str) -> (Followed, tokio::task::JoinHandle<()>) {
    use futures::StreamExt as _;
    let seen: Followed = Arc::default();
    let url = format!("{base}/v1/runs/{run}/events?tokens=1");
    let token = token.map(str::to_owned);
    let into = seen.clone();
    let task = tokio::spawn(async move {
        let mut request = reqwest::Client::new().get(url);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        let mut body = response.bytes_stream();
        let mut buffer = String::new();
        while let Some(chunk) = body.next().await {
            buffer.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let events = super::support::serve::parse_events(&block);
                into.lock().unwrap().extend(events.into_iter().map(|(event, _, data)| (event, data)));
            }
        }
    });
    (seen, task)
}

fn tokens_in(events: &[(String, Value)]) -> Vec<String> {
    events.iter().filter(|e| e.0 == "token").filter_map(|e| e.1["text"].as_str().map(str::to_owned)).collect()
}

/// A run one `cairn serve` drives streams its tokens to a second `cairn serve` on the same
/// SQLite file (through the store), while the first streams them to its own listener (in
/// process, each delta once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_the_same_store_streams_the_tokens_of_a_run_the_first_drives() {
    // The answer streams until both listeners have seen some of it: no race with the relay.
    let stop = Arc::new(AtomicBool::new(false));
    let url = held_model(2000, Duration::from_millis(50), Arc::new(AtomicBool::new(true)), stop.clone());
    let first = model_server(url, &[]).await;
    let port = super::support::serve::free_port();
    let second_base = format!("http://127.0.0.1:{port}");
    let _second = super::support::serve::Killed(
        super::support::serve::serve_command_on(
            first.dir.path(),
            &first.store,
            &format!("127.0.0.1:{port}"),
            None,
            &["--workers", "0"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap(),
    );
    super::support::serve::wait_healthy(&second_base, Duration::from_secs(20)).await;
    let run = submitted(&first, "agent(\"count\")").await;
    first.wait_for(&run, "running").await;
    let (here, here_done) = follow_tokens(&first.base, Some(TOKEN), &run);
    let (there, there_done) = follow_tokens(&second_base, None, &run);
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokens_in(&here.lock().unwrap()).len() < 3 || tokens_in(&there.lock().unwrap()).len() < 3 {
        assert!(
            Instant::now() < deadline,
            "tokens did not reach both servers: here {:?}, there {:?}",
            here.lock().unwrap(),
            there.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(60), here_done).await.unwrap().unwrap();
    tokio::time::timeout(Duration::from_secs(60), there_done).await.unwrap().unwrap();
    for (name, events) in [("the driving server", &here), ("the other server", &there)] {
        let events = events.lock().unwrap().clone();
        assert_eq!(
            events.last().map(|e| (e.0.as_str(), e.1["status"].clone())),
            Some(("outcome", json!("ok"))),
            "{name}: {events:?}"
        );
        let first_token = events.iter().position(|e| e.0 == "token").unwrap();
        let answer = events
            .iter()
            .position(|e| e.0 == "entry" && e.1["status"] == "ok" && e.1["kind"] == "agent")
            .unwrap();
        assert!(first_token < answer, "{name}: the deltas come before the journaled answer: {events:?}");
        // In order, and none twice (the driver's listener skips the chunks its own process wrote).
        let numbers: Vec<u64> =
            tokens_in(&events).iter().map(|t| t.trim().trim_start_matches("tok").parse().unwrap()).collect();
        assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{name}: {numbers:?}");
        assert!(events.iter().filter(|e| e.0 == "token").all(|e| e.1["run_id"] == run.as_str()));
    }
    // Each stream withdrew its process's wish, and the driver deleted its chunks.
    let store = cairn::store::open(&first.store).unwrap();
    let id = cairn::RunId::parse(&run).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left: Vec<String> =
            store.transcripts.list(&id).unwrap().into_iter().filter(|r| r.contains("/live/")).collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the relay left {left:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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

/// A priced run's money reaches the page in dollars: the run list's cost column, the run's
/// `spent` and its cost charts read the cost report's `cost_nano_usd` (#29).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priced_runs_cost_shows_in_dollars_on_the_list_and_its_page() {
    let Some(browser) = browser().await else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cairn.toml"), "[providers.echo]\nkind = \"echo\"\nprice = [1.0, 2.0]\n")
        .unwrap();
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    let server = start_on(dir, store, Some(TOKEN), &[]).await;
    // 3 input tokens at $1/M and 5 output tokens at $2/M.
    let run = submitted(&server, "agent(\"hello there\")").await;
    let shown = server.wait_for(&run, "ok").await;
    assert_eq!(shown["cost"]["total"]["cost_nano_usd"], 13_000, "{shown}");

    browser.open(&server, "").await;
    let row = browser.wait_for(&format!("tr.run[data-run=\"{run}\"][data-status=\"ok\"]")).await;
    assert!(row.text().await.unwrap().contains("$0.000013"), "the list's cost column");
    browser.client.goto(&format!("{}/#/runs/{run}", server.base)).await.unwrap();
    browser.wait_for("#run-status[data-status=\"ok\"]").await;
    let chart = browser.wait_for("#costs svg.chart").await;
    let facts = browser.wait_for("#run-facts").await.text().await.unwrap();
    assert!(facts.contains("spent $0.000013"), "{facts}");
    let chart = chart.text().await.unwrap();
    assert!(chart.contains("$0.000013"), "{chart}");
}

//! `cairn serve` over a real socket: a spawned server process on a free loopback port, driven
//! with reqwest.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::support::serve::{
    Server, free_port, parse_events, serve_command, serve_command_on, start, start_on, start_on_postgres,
};

pub(super) const TOKEN: &str = "s3cret-token";

fn entry_seqs(events: &[(String, Option<u64>, Value)]) -> Vec<u64> {
    events.iter().filter(|e| e.0 == "entry").map(|e| e.1.unwrap()).collect()
}

const TWO_AGENTS: &str = "let a = agent(\"one\");\nlet b = agent(\"two\");\n[a, b]";

/// A submitted run is driven, and its event stream delivers every journal entry once, in
/// order, ending with its outcome; a later stream replays it all.
async fn submitted_run_streams_to_its_outcome(server: &Server) {
    let (code, body) = server.submit(json!({ "source": TWO_AGENTS, "name": "two" })).await;
    assert_eq!(code, 202, "{body}");
    let run = body["run_id"].as_str().unwrap().to_owned();
    let events = server.events(&run, None, None).await;
    let last = events.last().unwrap();
    assert_eq!(last.0, "outcome", "{events:?}");
    assert_eq!(last.2["status"], "ok");
    let seqs = entry_seqs(&events);
    assert!(!seqs.is_empty());
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seqs out of order: {seqs:?}");
    let (code, journal) = server.get(&format!("/v1/runs/{run}/journal")).await;
    assert_eq!(code, 200);
    let journaled: Vec<u64> =
        journal["entries"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, journaled, "the stream delivers every journal entry once");
    let (code, shown) = server.get(&format!("/v1/runs/{run}")).await;
    assert_eq!(code, 200);
    assert_eq!(shown["status"], "ok");
    assert!(shown["cost"]["total"].is_object(), "{shown}");
    let (_, listed) = server.get("/v1/runs?status=ok").await;
    assert!(listed["runs"].as_array().unwrap().iter().any(|r| r["run_id"] == run.as_str()));
    // A stream opened after the run settled replays it all, marked replayed.
    let again = server.events(&run, None, None).await;
    assert_eq!(entry_seqs(&again), seqs);
    assert!(again.iter().filter(|e| e.0 == "entry").all(|e| e.2["replayed"] == true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_run_is_driven_and_its_events_stream_to_the_outcome() {
    submitted_run_streams_to_its_outcome(&start(Some(TOKEN), &[]).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_submitted_run_streams_to_its_outcome() {
    let Some(server) = start_on_postgres(Some(TOKEN), &[]).await else { return };
    submitted_run_streams_to_its_outcome(&server).await;
}

/// A stream cut after one entry and reopened with `Last-Event-ID` misses and repeats nothing.
async fn reconnect_misses_nothing(server: &Server) {
    let (code, body) = server.submit(json!({ "source": TWO_AGENTS })).await;
    assert_eq!(code, 202, "{body}");
    let run = body["run_id"].as_str().unwrap().to_owned();
    let first = server.events(&run, None, Some(1)).await;
    let cut = *entry_seqs(&first).last().unwrap();
    let rest = server.events(&run, Some(cut), None).await;
    assert_eq!(rest.last().unwrap().0, "outcome");
    let mut seen = entry_seqs(&first);
    seen.extend(entry_seqs(&rest));
    let (_, journal) = server.get(&format!("/v1/runs/{run}/journal")).await;
    let journaled: Vec<u64> =
        journal["entries"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seen, journaled);
    assert_eq!(server.get("/v1/runs/not-a-run/events").await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_with_last_event_id_misses_nothing_and_repeats_nothing() {
    reconnect_misses_nothing(&start(None, &[]).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_reconnect_with_last_event_id_misses_nothing() {
    let Some(server) = start_on_postgres(None, &[]).await else { return };
    reconnect_misses_nothing(&server).await;
}

/// An awaited run suspends, is resolved over HTTP, and finishes; resolving again is recorded.
async fn approval_resolved_over_http(server: &Server) {
    let source = "let r = await_external(\"approve\");\nlet a = agent(\"after \" + r);\na";
    let (code, body) = server.submit(json!({ "source": source })).await;
    assert_eq!(code, 202, "{body}");
    let run = body["run_id"].as_str().unwrap().to_owned();
    let shown = server.wait_for(&run, "suspended").await;
    assert_eq!(shown["pending"][0]["key"], "approve", "{shown}");
    let (code, resolved) = server.post(&format!("/v1/runs/{run}/resolve/approve"), json!("yes")).await;
    assert_eq!(code, 200, "{resolved}");
    let events = server.events(&run, None, None).await;
    assert_eq!(events.last().unwrap().2["status"], "ok", "{events:?}");
    // Resolving again is refused: the first resolution won, and its value is told.
    let (code, again) = server.post(&format!("/v1/runs/{run}/resolve/approve"), json!("no")).await;
    assert_eq!(code, 409, "{again}");
    assert_eq!(again["code"], "already_resolved");
    assert_eq!(again["details"]["value"], "yes", "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_awaited_run_suspends_is_resolved_over_http_and_finishes() {
    approval_resolved_over_http(&start(None, &[]).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_an_approval_is_resolved_over_http_and_the_run_finishes() {
    let Some(server) = start_on_postgres(None, &[]).await else { return };
    approval_resolved_over_http(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_run_is_cancelled_and_a_settled_one_refuses() {
    let server = start(None, &[]).await;
    let (_, body) = server.submit(json!({ "source": "let r = await_external(\"go\");\nr" })).await;
    let run = body["run_id"].as_str().unwrap().to_owned();
    server.wait_for(&run, "suspended").await;
    let (code, cancelled) = server.post(&format!("/v1/runs/{run}/cancel"), json!({})).await;
    assert_eq!(code, 200, "{cancelled}");
    let events = server.events(&run, None, None).await;
    assert_eq!(events.last().unwrap().0, "outcome");
    assert_eq!(events.last().unwrap().2["status"], "cancelled");
    let (code, refused) = server.post(&format!("/v1/runs/{run}/cancel"), json!({})).await;
    assert_eq!(code, 409, "{refused}");
    assert_eq!(server.post("/v1/runs/unknown-run/cancel", json!({})).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_guards_every_route_but_healthz() {
    let server = start(Some(TOKEN), &[]).await;
    let client = reqwest::Client::new();
    for path in ["/v1/runs", "/metrics", "/openapi.json"] {
        let r = client.get(format!("{}{path}", server.base)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["code"], "unauthorized");
        assert!(!body.to_string().contains(TOKEN));
        let wrong =
            client.get(format!("{}{path}", server.base)).bearer_auth("s3cret-tokeN").send().await.unwrap();
        assert_eq!(wrong.status(), 401, "{path}");
    }
    let r =
        client.post(format!("{}/v1/runs", server.base)).json(&json!({"source": "1"})).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(client.get(format!("{}/healthz", server.base)).send().await.unwrap().status(), 200);
    assert_eq!(server.get("/v1/runs").await.0, 200);
    let (code, metrics) = {
        let r = server.request(reqwest::Method::GET, "/metrics").send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    assert_eq!(code, 200);
    assert!(metrics.contains("cairn_queue_depth 0"), "{metrics}");
    assert!(metrics.contains("cairn_lease_takeovers_total 0"), "{metrics}");
    let (code, doc) = server.get("/openapi.json").await;
    assert_eq!(code, 200);
    assert_eq!(doc["openapi"], "3.1.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_get_typed_json_errors() {
    let server = start(None, &["--max-body-bytes", "4096", "--max-budget", "1"]).await;
    let big = "x".repeat(8192);
    let (code, body) = server.submit(json!({ "source": big })).await;
    assert_eq!(code, 413, "{body}");
    assert_eq!(body["code"], "payload_too_large");
    let r = server
        .request(reqwest::Method::POST, "/v1/runs")
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "bad_request");
    let (code, body) = server.submit(json!({ "source": "1", "budget_usd": 5.0 })).await;
    assert_eq!(code, 400, "{body}");
    let (code, body) = server.submit(json!({ "source": "let t = timestamp();\nagent(\"x\")" })).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["code"], "script_rejected");
    assert!(!body["details"]["diagnostics"].as_array().unwrap().is_empty(), "{body}");
    // A run that asks no budget gets the server's maximum.
    let (code, body) = server.submit(json!({ "source": "let r = await_external(\"x\");\nr" })).await;
    assert_eq!(code, 202, "{body}");
    let run = body["run_id"].as_str().unwrap().to_owned();
    let shown = server.wait_for(&run, "suspended").await;
    assert!(
        shown["meta"]["budget_ceiling_nano_usd"].is_i64() && shown["meta"]["budget_ceiling_usd"].is_f64(),
        "{shown}"
    );
    let (code, body) = server.submit(json!({ "source": "1", "run_id": run })).await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(server.get("/v1/runs/nope").await.0, 404);
}

#[test]
fn a_non_loopback_listen_without_a_token_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = serve_command(dir.path(), "0.0.0.0:0", None, &[]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("CAIRN_SERVER_TOKEN"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_route_is_served() {
    let server = start(None, &[]).await;
    let (_, body) = server.submit(json!({ "source": "let r = await_external(\"k\");\nr" })).await;
    let run = body["run_id"].as_str().unwrap().to_owned();
    server.wait_for(&run, "suspended").await;
    let (code, body) = server.get("/v1/no-such-route").await;
    assert_eq!((code, body["code"].as_str()), (404, Some("not_found")));
    for (method, path) in cairn::service::ROUTES {
        if *path == "/v1/runs/{id}/events" {
            continue; // a stream that stays open while the run waits
        }
        let path = path.replace("{id}", &run).replace("{key}", "k");
        let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let r = server.request(method.clone(), &path).json(&json!("v")).send().await.unwrap();
        // Served: neither axum's bare 404/405 for an unrouted path nor a server error.
        assert_ne!(r.status(), 405, "{method} {path}");
        assert!(r.status().as_u16() < 500, "{method} {path}: {}", r.status());
        if r.status() == 404 {
            panic!("{method} {path} is not routed");
        }
    }
}

/// The run's journal seqs, as `GET /v1/runs/{id}/journal` gives them.
async fn journal_seqs(server: &Server, run: &str) -> Vec<u64> {
    let (code, journal) = server.get(&format!("/v1/runs/{run}/journal")).await;
    assert_eq!(code, 200, "{journal}");
    journal["entries"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_run_driven_by_a_separate_worker_process_streams_to_the_end() {
    // No in-process workers: a `cairn worker` process drives the run, and the server follows
    // it through the store (woken by NOTIFY from the worker's store).
    let Some(mut server) = start_on_postgres(None, &["--workers", "0"]).await else { return };
    let (code, body) = server.submit(json!({ "source": TWO_AGENTS })).await;
    assert_eq!(code, 202, "{body}");
    let run = body["run_id"].as_str().unwrap().to_owned();
    // The stream opens while the run is still queued, before any worker exists.
    let stream = {
        let request = server.request(reqwest::Method::GET, &format!("/v1/runs/{run}/events"));
        request.send().await.unwrap()
    };
    assert_eq!(stream.status(), 200);
    assert_eq!(server.get(&format!("/v1/runs/{run}")).await.1["status"], "queued");
    server.add_worker(&["--concurrency", "2"]);
    let text = tokio::time::timeout(Duration::from_secs(30), stream.text()).await.expect("the stream ended");
    let events = parse_events(&text.unwrap());
    let last = events.last().unwrap();
    assert_eq!((last.0.as_str(), &last.2["status"]), ("outcome", &json!("ok")), "{events:?}");
    let seqs = entry_seqs(&events);
    assert_eq!(seqs, journal_seqs(&server, &run).await, "every entry once, in order");
    // Every entry was journaled after the stream opened: none is marked replayed.
    assert!(events.iter().filter(|e| e.0 == "entry").all(|e| e.2["replayed"] == false), "{events:?}");
    let statuses: Vec<&Value> = events.iter().filter(|e| e.0 == "status").map(|e| &e.2["status"]).collect();
    assert_eq!(statuses.first(), Some(&&json!("queued")), "{statuses:?}");
    assert!(statuses.contains(&&json!("running")), "{statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_write_by_another_store_wakes_this_stores_followers() {
    // Two stores over one schema stand for two hosts: a follower of the first is woken by a
    // write through the second (LISTEN/NOTIFY), with no polling at all.
    use cairn::store::{JournalStore, PostgresOptions, PostgresStore, RawEntry, RunId};
    let Some(url) = super::postgres::fresh_url("notify") else { return };
    let here = PostgresStore::open(&url, PostgresOptions::new()).unwrap();
    let there = PostgresStore::open(&url, PostgresOptions::new()).unwrap();
    let run = RunId::parse("followed").unwrap();
    let watch = here.watch().expect("a postgres store notifies");
    let mut changes = watch.subscribe(&run);
    // The listener starts with the first follower, and a write announced before it listens is
    // not heard (followers poll as the fallback): probe with writes to another run until one
    // wakes its follower, which proves the LISTEN stands.
    let probe = RunId::parse("probe").unwrap();
    let mut probed = watch.subscribe(&probe);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    for seq in 1.. {
        assert!(std::time::Instant::now() < deadline, "the store never listened");
        probed.mark_seen();
        let entry = RawEntry::new(seq, format!("{{\"seq\":{seq}}}")).unwrap();
        tokio::task::block_in_place(|| there.append(&probe, &[entry], None)).unwrap();
        if tokio::time::timeout(Duration::from_millis(250), probed.changed()).await.is_ok() {
            break;
        }
    }
    for seq in 1..=3u64 {
        changes.mark_seen();
        let entry = RawEntry::new(seq, format!("{{\"seq\":{seq}}}")).unwrap();
        let (store, id) = (&there, run.clone());
        tokio::task::block_in_place(|| store.append(&id, &[entry], None)).unwrap();
        tokio::time::timeout(Duration::from_secs(10), changes.changed())
            .await
            .unwrap_or_else(|_| panic!("the write of seq {seq} on another store never woke the follower"));
        assert_eq!(here.load_since(&run, seq - 1).unwrap().len(), 1);
    }
}

/// A planner draft (fenced, as models write them) that waits for an approval between its calls.
const PLANNED_DRAFT: &str =
    "```rhai\nlet a = agent(\"first\");\nlet ok = await_external(\"approve\");\na + \" \" + ok\n```";
const PLANNED_SOURCE: &str =
    "let a = agent(\"first\");\nlet ok = await_external(\"approve\");\na + \" \" + ok\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_is_planned_and_its_accepted_script_is_queued_run_and_resumed() {
    goal_planned_queued_and_resumed(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_goal_is_planned_and_its_accepted_script_is_queued_run_and_resumed() {
    let Some(store) = super::postgres::fresh_url("goal") else { return };
    goal_planned_queued_and_resumed(Some(store)).await;
}

/// A goal's run: reserved at once, planned, its accepted script queued, suspended, resolved
/// and resumed from the stored source (on SQLite, or the PostgreSQL store `store`).
async fn goal_planned_queued_and_resumed(store: Option<String>) {
    use super::scripted_server::{ScriptedServer, project, text};
    // The planner's one draft, then the script's one agent call; nothing else is scripted,
    // so a call asked twice fails the run.
    let model = ScriptedServer::start(vec![text(PLANNED_DRAFT, 900, 40), text("one", 10, 5)]);
    let dir = project(&model.url, "", "");
    let store = store.unwrap_or_else(|| format!("sqlite:{}", dir.path().join("c.db").display()));
    let server = start_on(dir, store, None, &["--max-budget", "5"]).await;
    let (code, body) =
        server.submit(json!({ "goal": "Ask one question, then wait for approval", "budget": 1.0 })).await;
    assert_eq!(code, 202, "{body}");
    let run = body["run_id"].as_str().unwrap().to_owned();
    assert!(body["planning_run_id"].as_str().unwrap().starts_with("plan-"), "{body}");
    // The run exists from the first moment, before its script does.
    let (code, shown) = server.get(&format!("/v1/runs/{run}")).await;
    assert_eq!(code, 200, "{shown}");
    assert_eq!(shown["planning"]["goal"], "Ask one question, then wait for approval");
    let shown = server.wait_for(&run, "suspended").await;
    assert_eq!(shown["source"], PLANNED_SOURCE, "GET shows the accepted source: {shown}");
    assert_eq!(shown["planning"]["goal"], "Ask one question, then wait for approval", "{shown}");
    assert_eq!(shown["planning"]["planning_run_id"], body["planning_run_id"], "{shown}");
    assert_eq!(shown["meta"]["name"], "planned");
    assert_eq!(shown["pending"][0]["key"], "approve", "{shown}");
    assert!(
        shown["meta"]["budget_ceiling_nano_usd"].is_i64() && shown["meta"]["budget_ceiling_usd"].is_f64()
    );
    // Resolving resumes the run from its stored source: the paid call replays.
    let (code, resolved) = server.post(&format!("/v1/runs/{run}/resolve/approve"), json!("yes")).await;
    assert_eq!(code, 200, "{resolved}");
    let events = server.events(&run, None, None).await;
    assert_eq!(events.last().unwrap().2["status"], "ok", "{events:?}");
    assert_eq!(model.requests().len(), 2, "a call was asked twice");
    let (_, journal) = server.get(&format!("/v1/runs/{run}/journal")).await;
    let paid =
        journal["entries"].as_array().unwrap().iter().filter(|e| e["kind"] == "agent" && e["status"] == "ok");
    assert_eq!(paid.count(), 1, "{journal}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_whose_plan_is_rejected_settles_failed_with_script_rejected_and_its_diagnostics() {
    // No cairn.toml: the planner is the offline echo model, which cannot write a script.
    let server = start(None, &[]).await;
    let (code, body) = server.submit(json!({ "goal": "Compare three storage engines" })).await;
    assert_eq!(code, 202, "{body}");
    let run = body["run_id"].as_str().unwrap().to_owned();
    let shown = server.wait_for(&run, "error").await;
    assert_eq!(shown["error"]["code"], "script_rejected", "{shown}");
    assert!(shown["source"].is_null(), "{shown}");
    let drafts = shown["planning"]["rejection"]["drafts"].as_array().unwrap();
    assert_eq!(drafts.len(), 4, "one draft and three repairs: {shown}");
    assert!(!drafts.last().unwrap()["diagnostics"].as_array().unwrap().is_empty(), "{shown}");
    let events = server.events(&run, None, None).await;
    let last = events.last().unwrap();
    assert_eq!((last.0.as_str(), &last.2["status"]), ("outcome", &json!("error")), "{events:?}");
    assert_eq!(last.2["error"]["code"], "script_rejected", "{events:?}");
    // There is no script to resume.
    let (code, refused) = server.post(&format!("/v1/runs/{run}/resume"), json!({})).await;
    assert_eq!(code, 409, "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_goal_submissions_are_refused_before_anything_is_written() {
    let server = start(None, &["--max-budget", "1"]).await;
    for (body, why) in [
        (json!({ "goal": "g", "source": "1" }), "both a goal and a script"),
        (json!({ "dialect": "rhai" }), "neither"),
        (json!({ "goal": "g", "dialect": "cobol" }), "an unknown dialect"),
        (json!({ "goal": "g", "planning_budget": 5.0 }), "a planning budget over the maximum"),
        (json!({ "goal": "g", "budget": -1.0 }), "a negative budget"),
        (json!({ "source": "1", "force": true }), "force with a script"),
        (json!({ "goal": "g", "name": "x" }), "a name for a goal's run"),
    ] {
        let (code, answer) = server.submit(body).await;
        assert_eq!(code, 400, "{why}: {answer}");
        assert_eq!(answer["code"], "bad_request", "{why}: {answer}");
    }
    let (_, listed) = server.get("/v1/runs").await;
    assert_eq!(listed["runs"], json!([]), "a refused submission wrote a run");
}

/// The README's newcomer path, step by step through the real binaries: PostgreSQL (the test
/// server, a fresh schema), `cairn serve` with a token and two `cairn worker`s on it, a script
/// submitted as the README's curl does, its events watched live, its approval resolved, and
/// the run seen to finish, driven by the workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_newcomer_path_on_postgres() {
    let Some(store) = super::postgres::fresh_url("readme") else { return };
    let dir = tempfile::tempdir().unwrap();
    let cairn = || {
        let mut command = Command::new(assert_cmd::cargo::cargo_bin("cairn"));
        command
            .current_dir(dir.path())
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("CAIRN_SERVER_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        command
    };
    let port = free_port();
    // CAIRN_SERVER_TOKEN=secret cairn --store $S serve --listen 127.0.0.1:7420 --max-budget 2 --workers 0
    let serve = cairn()
        .env("CAIRN_SERVER_TOKEN", "secret")
        .args(["--store", &store, "serve", "--listen", &format!("127.0.0.1:{port}"), "--max-budget", "2"])
        .args(["--workers", "0"])
        .spawn()
        .unwrap();
    // cairn --store $S worker --concurrency 4 &   (twice)
    let workers: Vec<Child> = (0..2)
        .map(|_| cairn().args(["--store", &store, "worker", "--concurrency", "4"]).spawn().unwrap())
        .collect();
    let server = Server {
        child: serve,
        workers,
        base: format!("http://127.0.0.1:{port}"),
        token: Some("secret".into()),
        store,
        dir: tempfile::tempdir().unwrap(),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !reqwest::get(format!("{}/healthz", server.base)).await.is_ok_and(|r| r.status() == 200) {
        assert!(Instant::now() < deadline, "cairn serve did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // curl -s -H 'Authorization: Bearer secret' -H 'Content-Type: application/json' \
    //   -d '{"source":"let ok = await_external(\"approve\");\nagent(\"write a haiku\")"}' .../v1/runs
    let body = r#"{"source":"let ok = await_external(\"approve\");\nagent(\"write a haiku\")"}"#;
    let submitted = server
        .request(reqwest::Method::POST, "/v1/runs")
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(submitted.status(), 202);
    let run = submitted.json::<Value>().await.unwrap()["run_id"].as_str().unwrap().to_owned();
    // curl -N .../v1/runs/$RUN/events   (live, in another terminal)
    let watching = {
        let stream = server.request(reqwest::Method::GET, &format!("/v1/runs/{run}/events"));
        let stream = stream.timeout(Duration::from_secs(60)).send().await.unwrap();
        assert_eq!(stream.status(), 200);
        tokio::spawn(async move { stream.text().await.unwrap() })
    };
    let shown = server.wait_for(&run, "suspended").await;
    assert_eq!(shown["pending"][0]["key"], "approve", "{shown}");
    // curl ... -d '"yes"' .../v1/runs/$RUN/resolve/approve
    let resolved = server
        .request(reqwest::Method::POST, &format!("/v1/runs/{run}/resolve/approve"))
        .header("Content-Type", "application/json")
        .body(r#""yes""#)
        .send()
        .await
        .unwrap();
    assert_eq!(resolved.status(), 200);
    let text =
        tokio::time::timeout(Duration::from_secs(60), watching).await.expect("the stream ended").unwrap();
    let events = parse_events(&text);
    let last = events.last().unwrap();
    assert_eq!((last.0.as_str(), &last.2["status"]), ("outcome", &json!("ok")), "{events:?}");
    let statuses: Vec<&Value> = events.iter().filter(|e| e.0 == "status").map(|e| &e.2["status"]).collect();
    assert!(statuses.contains(&&json!("suspended")), "watched live through the wait: {statuses:?}");
    assert_eq!(entry_seqs(&events), journal_seqs(&server, &run).await);
    let shown = server.wait_for(&run, "ok").await;
    assert!(shown["cost"]["total"].is_object(), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_a_write_by_another_store_on_the_file_wakes_this_stores_followers() {
    // Two stores over one file stand for the server and a `cairn worker` process.
    use cairn::store::{JournalStore, RawEntry, RunId, SqliteOptions, SqliteStore};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let here = SqliteStore::open(&path, SqliteOptions::new()).unwrap();
    let there = SqliteStore::open(&path, SqliteOptions::new()).unwrap();
    let run = RunId::parse("followed").unwrap();
    let mut changes = here.watch().expect("a sqlite store notifies").subscribe(&run);
    for seq in 1..=3u64 {
        changes.mark_seen();
        let entry = RawEntry::new(seq, format!("{{\"seq\":{seq}}}")).unwrap();
        tokio::task::block_in_place(|| there.append(&run, &[entry], None)).unwrap();
        tokio::time::timeout(Duration::from_secs(10), changes.changed())
            .await
            .unwrap_or_else(|_| panic!("the write of seq {seq} on another store never woke the follower"));
        assert_eq!(here.load_since(&run, seq - 1).unwrap().len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_left_mid_plan_by_a_killed_server_is_planned_by_the_next_one() {
    use super::scripted_server::{Reply, ScriptedServer, project, text};
    // The first server's planner never answers; it is killed while it waits.
    let stalled = ScriptedServer::start(vec![Reply::Stall]);
    let first_dir = project(&stalled.url, "", "");
    let store = format!("sqlite:{}", first_dir.path().join("c.db").display());
    let spawn = |dir: &std::path::Path, port: u16| {
        serve_command_on(dir, &store, &format!("127.0.0.1:{port}"), None, &[])
            .env("CAIRN_LEASE_TTL_MS", "300")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let up = |base: String| async move {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !reqwest::get(format!("{base}/healthz")).await.is_ok_and(|r| r.status() == 200) {
            assert!(Instant::now() < deadline, "cairn serve did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let port = free_port();
    let mut first = spawn(first_dir.path(), port);
    up(format!("http://127.0.0.1:{port}")).await;
    let submitted = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/v1/runs"))
        .json(&json!({ "goal": "Ask one question, then wait for approval" }))
        .send()
        .await
        .unwrap();
    assert_eq!(submitted.status(), 202);
    let run = submitted.json::<Value>().await.unwrap()["run_id"].as_str().unwrap().to_owned();
    tokio::task::block_in_place(|| stalled.wait_for_requests(1, Duration::from_secs(20)));
    first.kill().unwrap(); // SIGKILL, mid-plan
    first.wait().unwrap();
    // The next server (its planner answers) picks the reservation up on its own.
    let model = ScriptedServer::start(vec![text(PLANNED_DRAFT, 900, 40), text("one", 10, 5)]);
    let second_dir = project(&model.url, "", "");
    let port = free_port();
    let second = spawn(second_dir.path(), port);
    let server = Server {
        child: second,
        workers: Vec::new(),
        base: format!("http://127.0.0.1:{port}"),
        token: None,
        store: store.clone(),
        dir: second_dir,
    };
    up(server.base.clone()).await;
    let shown = server.wait_for(&run, "suspended").await;
    assert_eq!(shown["source"], PLANNED_SOURCE, "{shown}");
    drop(server); // before the directory holding its store
    drop(first_dir);
}

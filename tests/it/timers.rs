//! Durable timers: an `await_external` deadline wakes its run at its time, in-process under
//! `cairn run` when it is short enough to hold (`--hold-timers`), otherwise through the queue:
//! `cairn serve`'s workers keep a parked run with a deadline in the queue (`/metrics` counts
//! it) and claim it when due, across a restart. A run killed mid-wait waits only the remainder.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::lease::{cairn, entries, run, text};
use super::support::serve::{serve_in, wait_status};

const ECHO: &str = "[providers.echo]\nkind = \"echo\"\nlatency_ms = 1\n";

fn wait_rhai(ms: u64) -> String {
    format!(
        "let v = await_external(\"go\", #{{timeout_ms: {ms}}});\n#{{timed_out: v.timed_out, after: agent(\"after\")}}\n"
    )
}

fn wait_lua(ms: u64) -> String {
    format!(
        "local v = await_external(\"go\", {{ timeout_ms = {ms} }})\nreturn {{ timed_out = v.timed_out, after = agent(\"after\") }}\n"
    )
}

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cairn.toml"), ECHO).unwrap();
    dir
}

fn sqlite(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("c.db").display())
}

fn meta(dir: &Path, store: &str, id: &str) -> Value {
    let out = run(dir, store, &["inspect", id, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).unwrap()["meta"].clone()
}

#[test]
fn cairn_run_holds_a_short_deadline_and_wakes_in_process() {
    let dir = project();
    let root = dir.path();
    let store = sqlite(root);
    for (file, source) in [("w.rhai", wait_rhai(800)), ("w.lua", wait_lua(800))] {
        std::fs::write(root.join(file), source).unwrap();
        let id = format!("held-{file}").replace('.', "-");
        let out = run(root, &store, &["run", file, "--run-id", &id, "--json", "-q"]);
        assert_eq!(out.status.code(), Some(0), "{file}: {}", text(&out.stderr));
        let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(outcome["value"], json!({"timed_out": true, "after": "echo: after"}), "{file}");
        assert_eq!(meta(root, &store, &id)["segments"], 1, "{file}: woke in the same segment");
        // Past the hold, it suspends; a resume after the deadline delivers the timeout.
        let id = format!("parked-{file}").replace('.', "-");
        let out = run(root, &store, &["run", file, "--run-id", &id, "--hold-timers", "0", "-q"]);
        assert_eq!(out.status.code(), Some(4), "{file}: {}", text(&out.stderr));
        std::thread::sleep(Duration::from_millis(900));
        let out = run(root, &store, &["resume", &id, "--json", "-q"]);
        assert_eq!(out.status.code(), Some(0), "{file}: {}", text(&out.stderr));
        let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(outcome["value"]["timed_out"], true, "{file}");
        let out = run(root, &store, &["replay", &id]);
        assert_eq!(out.status.code(), Some(0), "{file}: {}", text(&out.stderr));
    }
}

#[test]
fn a_run_killed_mid_wait_waits_only_the_remainder_on_resume() {
    let dir = project();
    let root = dir.path();
    let store = sqlite(root);
    std::fs::write(root.join("w.rhai"), wait_rhai(6_000)).unwrap();
    let mut child: Child = cairn(root, &store)
        .args(["run", "w.rhai", "--run-id", "killed", "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let deadline_ms = loop {
        let journal = if run(root, &store, &["inspect", "killed", "--json"]).status.success() {
            entries(root, &store, "killed")
        } else {
            Vec::new()
        };
        if let Some(wait) = journal.iter().find(|e| e["kind"] == "external") {
            break wait["value"]["deadline_ms"].as_i64().unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the wait was never journaled");
        std::thread::sleep(Duration::from_millis(50));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    let out = run(root, &store, &["resume", "killed", "--json", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let journal = entries(root, &store, "killed");
    let timeout = journal.iter().find(|e| e["kind"] == "resolution").expect("the timeout is journaled");
    assert_eq!(timeout["value"]["deadline_ms"], deadline_ms, "the journaled deadline, not a new one");
    let woke = timeout["ts"].as_i64().unwrap();
    assert!(woke >= deadline_ms, "woke at {woke}, before its deadline {deadline_ms}");
    assert!(
        woke - deadline_ms < 5_000,
        "woke {} ms after its deadline: it waited the whole timeout again",
        woke - deadline_ms
    );
}

async fn delayed(base: &str) -> u64 {
    let metrics = reqwest::get(format!("{base}/metrics")).await.unwrap().text().await.unwrap();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("cairn_queue_delayed "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no cairn_queue_delayed in {metrics}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_wakes_a_parked_run_at_its_deadline_across_a_restart() {
    let dir = project();
    let store = sqlite(dir.path());
    wakes_across_a_restart(dir.path(), &store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_serve_wakes_a_parked_run_at_its_deadline_across_a_restart() {
    let Some(store) = super::postgres::fresh_url("timers") else { return };
    let dir = project();
    wakes_across_a_restart(dir.path(), &store).await;
}

async fn wakes_across_a_restart(root: &Path, store: &str) {
    let store = store.to_owned();
    let first = serve_in(root, &store, &[]).await;
    let client = reqwest::Client::new();
    let mut ids = Vec::new();
    for (dialect, source) in [("rhai", wait_rhai(5_000)), ("lua", wait_lua(5_000))] {
        let id = format!("timer-{dialect}");
        let r = client
            .post(format!("{}/v1/runs", first.base))
            .json(&json!({"source": source, "dialect": dialect, "run_id": id}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 202, "{}", r.text().await.unwrap());
        ids.push(id);
    }
    for id in &ids {
        wait_status(&first.base, id, "suspended").await;
    }
    // Parked in the queue until their deadline, visible in the metrics.
    let parked = delayed(&first.base).await;
    let still = {
        let mut n = 0;
        for id in &ids {
            let body: Value =
                reqwest::get(format!("{}/v1/runs/{id}", first.base)).await.unwrap().json().await.unwrap();
            n += u64::from(body["status"] == "suspended");
        }
        n
    };
    assert!(parked >= still, "{parked} delayed, {still} still parked");
    // A restart loses nothing: the next server's workers claim them when due.
    drop(first);
    let second = serve_in(root, &store, &[]).await;
    for id in &ids {
        wait_status(&second.base, id, "ok").await;
        let journal = entries(root, &store, id);
        let timeout = journal.iter().find(|e| e["kind"] == "resolution").expect("timed out");
        assert_eq!(timeout["value"]["timed_out"], true);
        assert!(journal.iter().any(|e| e["kind"] == "agent" && e["status"] == "ok"), "ran on after waking");
    }
    assert_eq!(delayed(&second.base).await, 0);
}

#[test]
fn sleep_wakes_in_process_in_both_dialects_and_a_killed_sleep_waits_only_the_remainder() {
    let dir = project();
    let root = dir.path();
    let store = sqlite(root);
    std::fs::write(root.join("s.rhai"), "sleep(700);\nagent(\"after\")\n").unwrap();
    std::fs::write(root.join("s.lua"), "sleep(700)\nreturn agent(\"after\")\n").unwrap();
    for (file, id) in [("s.rhai", "sleep-rhai"), ("s.lua", "sleep-lua")] {
        let started = Instant::now();
        let out = run(root, &store, &["run", file, "--run-id", id, "--json", "-q"]);
        assert_eq!(out.status.code(), Some(0), "{file}: {}", text(&out.stderr));
        assert!(started.elapsed() >= Duration::from_millis(700), "{file}: it slept");
        let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(outcome["value"], "echo: after", "{file}");
        let journal = entries(root, &store, id);
        let wake = journal.iter().find(|e| e["kind"] == "external").expect("the sleep is journaled");
        assert!(wake["value"]["deadline_ms"].is_i64(), "{file}: the wake time is journaled: {wake}");
        let out = run(root, &store, &["replay", id]);
        assert_eq!(out.status.code(), Some(0), "{file}: {} {}", text(&out.stdout), text(&out.stderr));
    }
    std::fs::write(root.join("long.lua"), "sleep(6000)\nreturn agent(\"after\")\n").unwrap();
    let mut child: Child = cairn(root, &store)
        .args(["run", "long.lua", "--run-id", "slept", "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let deadline_ms = loop {
        let journal = if run(root, &store, &["inspect", "slept", "--json"]).status.success() {
            entries(root, &store, "slept")
        } else {
            Vec::new()
        };
        if let Some(wait) = journal.iter().find(|e| e["kind"] == "external") {
            break wait["value"]["deadline_ms"].as_i64().unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the sleep was never journaled");
        std::thread::sleep(Duration::from_millis(50));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    let out = run(root, &store, &["resume", "slept", "--json", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let journal = entries(root, &store, "slept");
    let woke = journal.iter().find(|e| e["kind"] == "resolution").expect("the wake is journaled");
    let at = woke["ts"].as_i64().unwrap();
    assert!(
        at >= deadline_ms && at - deadline_ms < 5_000,
        "woke {} ms after its wake time",
        at - deadline_ms
    );
}

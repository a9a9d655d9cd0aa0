//! Resumes that remember how the run started, explain a re-key before paying for it, and take
//! an edited script: all through the binary.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::lease::{cairn, entries, run, run_id_of, text};

fn sqlite(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("c.db").display())
}

fn setup(latency_ms: u64, script: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cairn.toml"),
        format!("[providers.echo]\nkind = \"echo\"\nlatency_ms = {latency_ms}\n"),
    )
    .unwrap();
    std::fs::write(dir.path().join("flow.rhai"), script).unwrap();
    dir
}

fn agent_oks(journal: &[Value]) -> usize {
    journal.iter().filter(|e| e["kind"] == "agent" && e["status"] == "ok").count()
}

fn outcome(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("not JSON: {}", text(&out.stdout)))
}

const THREE_CALLS: &str =
    "let a = agent(\"one\"); let b = agent(\"two\"); let c = agent(\"three\"); [a, b, c]";

#[test]
fn a_resume_routes_calls_as_the_run_started() {
    let dir = setup(400, THREE_CALLS);
    let store = sqlite(dir.path());
    let mut child = cairn(dir.path(), &store)
        .args(["run", "flow.rhai", "--model", "echo:other", "--run-id", "routed", "-q"])
        .env_remove("CAIRN_LEASE_TTL_MS")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once two calls are journaled complete.
    let started = Instant::now();
    loop {
        let out = run(dir.path(), &store, &["inspect", "routed", "--json"]);
        if out.status.success() {
            let report: Value = serde_json::from_slice(&out.stdout).unwrap();
            if agent_oks(report["entries"].as_array().unwrap()) >= 2 {
                break;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the run never completed two calls");
        std::thread::sleep(Duration::from_millis(30));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let completed = agent_oks(&entries(dir.path(), &store, "routed"));
    std::thread::sleep(Duration::from_millis(400)); // the killed driver's lease expires
    let out = run(dir.path(), &store, &["resume", "routed", "--json", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let outcome = outcome(&out);
    assert_eq!(outcome["preview"]["orphaned"], 0, "{outcome:#}");
    assert_eq!(outcome["preview"]["hits"], completed as u64, "every completed call replays: {outcome:#}");
    assert_eq!(outcome["value"][0], "echo: one");
    let journal = entries(dir.path(), &store, "routed");
    assert!(
        journal
            .iter()
            .filter(|e| e["kind"] == "agent")
            .all(|e| e["model"].is_null() || e["model"] == "echo:other")
    );
    assert_eq!(agent_oks(&journal), 3);
}

#[test]
fn a_suspended_run_keeps_its_model_across_resolve_and_resume() {
    let dir = setup(0, "let a = agent(\"one\"); let k = await_external(\"go\"); [a, agent(\"two \" + k)]");
    let store = sqlite(dir.path());
    let out = run(dir.path(), &store, &["run", "flow.rhai", "--model", "echo:other", "-q"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let id = run_id_of(&out);
    assert!(run(dir.path(), &store, &["resolve", &id, "go", "1"]).status.success());
    let out = run(dir.path(), &store, &["resume", &id, "--json", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let outcome = outcome(&out);
    assert_eq!(
        (outcome["preview"]["hits"].as_u64(), outcome["preview"]["orphaned"].as_u64()),
        (Some(2), Some(0))
    );
}

/// A finished run of two calls on `model`.
fn finished_on(dir: &Path, store: &str, model: &str, id: &str) {
    let out = run(dir, store, &["run", "flow.rhai", "--model", model, "--run-id", id, "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn a_resume_that_would_rekey_paid_calls_explains_and_stops() {
    let dir = setup(0, "let a = agent(\"first question\"); let b = agent(\"second\"); [a, b]");
    let store = sqlite(dir.path());
    finished_on(dir.path(), &store, "echo:a", "rk");
    let before = entries(dir.path(), &store, "rk").len();

    let out = run(dir.path(), &store, &["resume", "rk", "--model", "echo:b", "-q"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("rekey_refused"), "{stderr}");
    assert!(stderr.contains("model: echo:a → echo:b"), "{stderr}");
    assert!(stderr.contains("--accept-rekey"), "{stderr}");
    // Nothing was dispatched: no agent entry was written.
    let after = entries(dir.path(), &store, "rk");
    assert_eq!(after.iter().skip(before).filter(|e| e["kind"] == "agent").count(), 0, "{after:#?}");

    let dry = run(dir.path(), &store, &["resume", "rk", "--model", "echo:b", "--dry-run", "-q"]);
    assert_eq!(dry.status.code(), Some(7), "{}", text(&dry.stderr));
    assert!(text(&dry.stderr).contains("model: echo:a → echo:b"), "{}", text(&dry.stderr));

    let out =
        run(dir.path(), &store, &["resume", "rk", "--model", "echo:b", "--accept-rekey", "--json", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(outcome(&out)["preview"]["misses"], 2);
}

#[test]
fn an_edited_script_replaces_the_stored_one_and_replays_what_did_not_change() {
    let dir = setup(0, "let a = agent(\"one\"); let b = agent(\"two\", #{label: \"second\"}); [a, b]");
    let store = sqlite(dir.path());
    let out = run(dir.path(), &store, &["run", "flow.rhai", "--run-id", "ed", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let edited = "let a = agent(\"one\"); let n = agent(\"inserted\"); \
                  let b = agent(\"two, edited\", #{label: \"second\"}); [a, n, b]";
    std::fs::write(dir.path().join("edited.rhai"), edited).unwrap();

    // The edit re-keys the labelled call: explained, not paid.
    let out = run(dir.path(), &store, &["resume", "ed", "--script", "edited.rhai", "-q"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("agent call 'second'"), "{stderr}");
    assert!(stderr.contains("prompt: \"two\" → \"two, edited\""), "{stderr}");
    let journal = entries(dir.path(), &store, "ed");
    assert!(!journal.iter().any(|e| e["kind"] == "agent" && e["ident"]["prompt_head"] == "two, edited"));

    // Accepted: the unchanged call replays, the edited one is paid anew.
    let out = run(
        dir.path(),
        &store,
        &["resume", "ed", "--script", "edited.rhai", "--accept-rekey", "--json", "-q"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let done = outcome(&out);
    assert_eq!(done["value"][2], "echo: two, edited", "{done:#}");
    assert_eq!(
        (done["preview"]["hits"].as_u64(), done["preview"]["misses"].as_u64()),
        (Some(2), Some(1)),
        "{done:#}"
    );

    // The edit is the run's source now; the original is kept.
    let report: Value =
        serde_json::from_slice(&run(dir.path(), &store, &["inspect", "ed", "--json"]).stdout).unwrap();
    let meta = &report["meta"];
    assert_ne!(meta["source_ref"], "ed/source");
    assert_eq!(meta["previous_sources"][0]["source_ref"], "ed/source");
    let out = run(dir.path(), &store, &["resume", "ed", "--json", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(outcome(&out)["preview"]["misses"], 0, "a plain resume runs the stored edit");
}

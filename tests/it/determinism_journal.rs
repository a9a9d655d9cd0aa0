//! The journal's identity and the engine's determinism, through the real `cairn` binary:
//! what a resume or a replay must never pay twice or diverge on (step bodies in their own
//! scope, journaled budget reads, durable unpaid effects before host calls, fail-fast
//! decisions, the strict replay gate, labelled sites, wait timeouts, ordered admission).

use std::path::Path;

use assert_cmd::Command;
use serde_json::{Value, json};

fn cairn_in(dir: &Path) -> Command {
    let mut cmd = Command::cargo_bin("cairn").unwrap();
    cmd.current_dir(dir)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL");
    cmd
}

/// A priced echo model, so spend is not zero.
const PRICED_ECHO: &str = r#"
[routing]
default = "echo:default"
[providers.echo]
kind = "echo"
prices = { default = [1000.0, 2000.0] }
"#;

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

/// `cairn <args> --json` → (exit code, outcome JSON).
fn run_json(dir: &Path, args: &[&str]) -> (i32, Value) {
    let out = cairn_in(dir).args(args).args(["--json", "--quiet"]).output().unwrap();
    let code = out.status.code().unwrap_or(-1);
    let value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "{args:?}: no JSON on stdout (exit {code}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, value)
}

fn replay(dir: &Path, run: &str) -> (i32, String) {
    let out = cairn_in(dir).args(["replay", run]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

fn resolve(dir: &Path, run: &str, key: &str, value: &str) {
    cairn_in(dir).args(["resolve", run, key, value]).assert().success();
}

/// Runs `script` until it suspends on `go`, resolves it and resumes: the resume's outcome.
fn suspend_resolve_resume(dir: &Path, script: &str, extra: &[&str]) -> Value {
    write(dir, "s.rhai", script);
    let mut args = vec!["run", "s.rhai", "--run-id", "r1"];
    args.extend_from_slice(extra);
    let (code, first) = run_json(dir, &args);
    assert_eq!(first["status"], "suspended", "exit {code}: {first}");
    resolve(dir, "r1", "go", "1");
    let (code, resumed) = run_json(dir, &["resume", "r1"]);
    assert_eq!(code, 0, "{resumed}");
    assert_eq!(resumed["status"], "ok", "{resumed}");
    assert_eq!(resumed["preview"]["orphaned"], 0, "{resumed}");
    resumed
}

// ---- 1. a step body has its own scope ----------------------------------------------------------

#[test]
fn effects_inside_a_step_do_not_shift_the_parallel_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let resumed = suspend_resolve_resume(
        dir.path(),
        r#"
        let x = step("s", || parallel([|| agent("a")]));
        let y = parallel([|| agent("b")]);
        let r = await_external("go");
        [x, y, r]
        "#,
        &[],
    );
    assert_eq!(resumed["value"], json!([["echo: a"], ["echo: b"], 1]));
    // `b` was paid once, in the first run: the resume serves it from the journal.
    assert_eq!(resumed["preview"]["misses"], 0, "b was paid again: {resumed}");
    assert_eq!(resumed["preview"]["reruns"], 0, "{resumed}");
    let (code, text) = replay(dir.path(), "r1");
    assert_eq!(code, 0, "{text}");
}

#[test]
fn a_random_inside_a_step_does_not_shift_the_one_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let resumed = suspend_resolve_resume(
        dir.path(),
        r#"
        let a = step("s", || random());
        let b = random();
        let r = await_external("go");
        [a, b]
        "#,
        &[],
    );
    let value = resumed["value"].as_array().unwrap().clone();
    assert_ne!(value[0], value[1], "b replayed a's value: {resumed}");
    assert_eq!(resumed["preview"]["misses"], 0, "{resumed}");
    let (code, text) = replay(dir.path(), "r1");
    assert_eq!(code, 0, "{text}");
}

// ---- 2. budget reads are journaled -------------------------------------------------------------

#[test]
fn a_prompt_built_from_budget_spent_replays_after_a_resume() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "cairn.toml", PRICED_ECHO);
    let resumed = suspend_resolve_resume(
        dir.path(),
        r#"
        let a = agent("first");
        let spent = budget.spent();
        let left = budget.remaining();
        let b = agent(`spent ${spent}, left ${left}`);
        let r = await_external("go");
        [spent, left, b]
        "#,
        &["--budget", "5"],
    );
    let value = &resumed["value"];
    assert!(value[0].as_f64().unwrap() > 0.0, "the model is priced: {resumed}");
    // The values seen the first time are the ones served: the prompt built from them
    // matches its journaled call.
    assert_eq!(resumed["preview"]["misses"], 0, "the budget-built prompt was paid again: {resumed}");
    assert_eq!(resumed["preview"]["reruns"], 0, "{resumed}");
    let (code, text) = replay(dir.path(), "r1");
    assert_eq!(code, 0, "{text}");
}

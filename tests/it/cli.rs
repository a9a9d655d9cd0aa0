//! The `cairn` binary, run as a real process.

use assert_cmd::Command;

fn cairn() -> Command {
    Command::cargo_bin("cairn").unwrap()
}

#[test]
fn canon_prints_canonical_form_and_key() {
    let out = cairn().arg("canon").write_stdin(r#"{ "b": 1.0, "a": ["é", 1e2] }"#).assert().success();
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert_eq!(
        stdout,
        "{\"a\":[\"é\",100],\"b\":1}\nkey: 8dfb5a8b5ecca76bd18ea687c796086a1b4b838d5a4b6294e4db24bfb704affd\n"
    );
}

#[test]
fn canon_rejects_invalid_json_with_exit_2() {
    let out = cairn().arg("canon").write_stdin("{nope").assert().code(2);
    let stderr = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(stderr.starts_with("cairn: stdin is not valid JSON"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1);
}

#[test]
fn unknown_command_is_a_usage_error() {
    cairn().arg("frobnicate").assert().code(2);
}

fn cairn_in(dir: &std::path::Path) -> Command {
    let mut cmd = cairn();
    cmd.current_dir(dir)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL");
    cmd
}

fn stderr_of(out: &assert_cmd::assert::Assert) -> String {
    String::from_utf8(out.get_output().stderr.clone()).unwrap()
}

#[test]
fn bad_input_gets_one_line_and_the_right_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ok.rhai"), "agent(\"hi\")").unwrap();
    let cases: [(&[&str], i32, &str); 6] = [
        (&["run", "missing.rhai"], 2, "cannot read missing.rhai"),
        (&["run", "ok.rhai", "--args", "{nope"], 2, "--args is not valid JSON"),
        (&["run", "ok.rhai", "--budget", "-1"], 2, "invalid --budget"),
        (&["run", "ok.rhai", "--run-id", "a/b"], 2, "invalid run id"),
        (&["resume", "no-such-run"], 2, "unknown run no-such-run"),
        (&["resolve", "no-such-run", "k", "{bad"], 2, "not valid JSON"),
    ];
    for (args, code, text) in cases {
        let out = cairn_in(dir.path()).args(args).assert().code(code);
        let stderr = stderr_of(&out);
        assert!(stderr.contains(text), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().filter(|l| l.starts_with("cairn:")).count(), 1, "{args:?}: {stderr}");
    }
    cairn_in(dir.path()).args(["run", "ok.rhai", "--bogus"]).assert().code(2);
    std::fs::write(dir.path().join("cairn.toml"), "[budget]\ndefault_usdd = 1\n").unwrap();
    let out = cairn_in(dir.path()).args(["run", "ok.rhai"]).assert().code(2);
    assert!(stderr_of(&out).contains("default_usdd"));
}

#[test]
fn run_says_it_uses_echo_once_and_prints_the_value() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hi.rhai"), "#{answer: agent(\"hi\")}").unwrap();
    let out = cairn_in(dir.path()).args(["run", "hi.rhai"]).assert().success();
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&stdout).unwrap(),
        serde_json::json!({"answer": "echo: hi"})
    );
    assert_eq!(stderr_of(&out).matches("offline echo model").count(), 1);
    // The default store is SQLite under .cairn/.
    assert!(dir.path().join(".cairn/cairn.db").exists());
    let out = cairn_in(dir.path()).args(["runs", "--json"]).assert().success();
    let runs: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(runs[0]["status"], "ok");
    let run_id = runs[0]["run_id"].as_str().unwrap().to_owned();
    let out = cairn_in(dir.path()).args(["inspect", &run_id, "--json"]).assert().success();
    let inspected: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(inspected["meta"]["dialect"], "rhai");
    assert_eq!(inspected["cost"]["total"]["entries"], 1);
    // Replay-strict is clean on an unchanged run.
    cairn_in(dir.path()).args(["replay", &run_id]).assert().success();
}

#[test]
fn lint_reports_json_diagnostics_and_exit_6() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.rhai"),
        "let t = timestamp();\nagent(\"x\", #{modle: \"echo:default\"})",
    )
    .unwrap();
    let out = cairn_in(dir.path()).args(["lint", "bad.rhai", "--json"]).assert().code(6);
    let diagnostics: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let rules: Vec<&str> =
        diagnostics.as_array().unwrap().iter().map(|d| d["rule_id"].as_str().unwrap()).collect();
    assert!(rules.contains(&"forbidden") && rules.contains(&"unknown-option"), "{rules:?}");
    assert!(diagnostics[0]["line"].as_u64().unwrap() <= diagnostics[1]["line"].as_u64().unwrap());
    // run refuses the same script with exit 6 and writes nothing.
    cairn_in(dir.path()).args(["run", "bad.rhai"]).assert().code(6);
    std::fs::write(dir.path().join("good.rhai"), "agent(\"x\")").unwrap();
    cairn_in(dir.path()).args(["lint", "good.rhai"]).assert().success();
}

#[test]
fn card_prints_the_dialect() {
    let out = cairn().arg("card").assert().success();
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert_eq!(stdout, cairn::api_card());
    assert!(stdout.contains("### agent(prompt, opts?)"));
}

#[test]
fn replay_exits_7_when_a_call_would_run_live() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("w.rhai"), "let n = now(); agent(`at ${n}`)").unwrap();
    cairn_in(dir.path()).args(["run", "w.rhai", "--run-id", "r1", "-q"]).assert().success();
    cairn_in(dir.path()).args(["replay", "r1"]).assert().success();
    // Invalidate the journaled clock: the agent prompt changes, so replay finds a live call.
    let out =
        cairn_in(dir.path()).args(["resume", "r1", "--dry-run", "--invalidate", "3", "-q"]).assert().code(7);
    assert!(stderr_of(&out).contains("journal_miss"), "{}", stderr_of(&out));
}

#[test]
fn cassettes_record_then_replay_with_a_typed_miss() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("w.rhai"), "parallel([|| agent(\"a\"), || agent(\"b\")])").unwrap();
    let out = cairn_in(dir.path())
        .args(["--store", "memory", "run", "w.rhai", "-q", "--record", "tape.jsonl"])
        .assert()
        .success();
    let recorded = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let tape = std::fs::read_to_string(dir.path().join("tape.jsonl")).unwrap();
    assert_eq!(tape.lines().count(), 2);
    // Replayed from the tape into a fresh store: the same value.
    let out = cairn_in(dir.path())
        .args(["--store", "memory", "run", "w.rhai", "-q", "--replay", "tape.jsonl"])
        .assert()
        .success();
    assert_eq!(String::from_utf8(out.get_output().stdout.clone()).unwrap(), recorded);
    // A request the tape does not hold is a typed miss, never a live call.
    std::fs::write(dir.path().join("other.rhai"), "agent(\"c\")").unwrap();
    let out = cairn_in(dir.path())
        .args(["--store", "memory", "run", "other.rhai", "-q", "--replay", "tape.jsonl"])
        .assert()
        .code(1);
    assert!(stderr_of(&out).contains("cassette miss"), "{}", stderr_of(&out));
    cairn_in(dir.path()).args(["run", "w.rhai", "--record", "x", "--replay", "y"]).assert().code(2);
}

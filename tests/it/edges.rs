//! The edges, through the binary: text that cannot hijack a terminal, signals, config that
//! says no early, host functions and tools that cannot hang or escape, URLs that keep secrets.

use std::path::Path;

use assert_cmd::Command;

fn cairn_in(dir: &Path) -> Command {
    let mut cmd = Command::cargo_bin("cairn").unwrap();
    cmd.current_dir(dir)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("CAIRN_LOG")
        .env("NO_COLOR", "1");
    cmd
}

fn out_err(assert: &assert_cmd::assert::Assert) -> (String, String) {
    let output = assert.get_output();
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

const HIJACK: &str = "\u{1b}]0;pwned\u{7}";

#[test]
fn escape_sequences_from_a_script_reach_the_terminal_escaped_and_json_exact() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("evil.rhai"),
        "log(\"info\", \"title \\u001b]0;pwned\\u0007\");\n\
         let r = parallel([|| { throw \"bad \\u001b[2J\" }, || 1], #{on_error: \"null\"});\n\
         \"\\u001b]0;pwned\\u0007\"",
    )
    .unwrap();
    let run = cairn_in(dir.path()).args(["run", "evil.rhai", "--run-id", "evil"]).assert();
    let (stdout, stderr) = out_err(&run);
    assert!(
        !stderr.contains('\u{1b}') && !stderr.contains('\u{7}'),
        "raw control bytes on stderr: {stderr:?}"
    );
    assert!(stderr.contains("title \\u{1b}]0;pwned\\u{7}"), "{stderr}");
    assert!(!stdout.contains('\u{1b}'), "{stdout:?}");
    assert!(stderr.contains("dropped branch 0: ") && !stderr.contains("branch branch"), "{stderr}");
    // --json stays exact: the value decodes to the very string the script returned.
    let json = cairn_in(dir.path()).args(["run", "evil.rhai", "--json", "-q"]).assert().success();
    let (stdout, _) = out_err(&json);
    let value: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(value["value"], HIJACK, "{stdout}");
    let human = cairn_in(dir.path()).args(["inspect", "evil"]).assert().success();
    let (stdout, _) = out_err(&human);
    assert!(!stdout.contains('\u{1b}'), "{stdout:?}");
}

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

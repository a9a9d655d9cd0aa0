//! What a newcomer meets first, through the binary: `cairn init` (a config and a sample that
//! run offline, never overwriting a file), `cairn completions`, and every subcommand's help
//! ending with an example and its exit codes.

use crate::scripted_server::cairn_in;

fn output(cmd: &mut assert_cmd::Command) -> (i32, String, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `cairn init DIR` writes a config and a sample; the sample runs offline on the echo model
/// under the config's ceiling, and its cost bound is finite.
#[test]
fn init_writes_a_config_and_a_sample_that_runs_offline() {
    let root = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = output(cairn_in(root.path()).args(["init", "proj"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("wrote proj/cairn.toml") && stdout.contains("wrote proj/hello.rhai"), "{stdout}");
    let dir = root.path().join("proj");
    let config = std::fs::read_to_string(dir.join("cairn.toml")).unwrap();
    assert!(config.contains("# [providers.anthropic]"), "a real provider, commented out: {config}");
    let (code, stdout, stderr) = output(cairn_in(&dir).args(["run", "hello.rhai", "--json"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("budget $1.00"), "the config's ceiling applies: {stderr}");
    let outcome: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(outcome["status"], "ok", "{stdout}");
    assert!(outcome["value"]["summary"].as_str().unwrap().starts_with("echo: "), "{stdout}");
    let (code, stdout, stderr) = output(cairn_in(&dir).args(["lint", "hello.rhai", "--bound"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("3 agent calls") || stdout.contains("at most 3"), "{stdout}");
}

/// A file that exists is named and kept byte for byte; the missing one is still written.
#[test]
fn init_never_overwrites_a_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cairn.toml"), "# mine\n").unwrap();
    let (code, stdout, stderr) = output(cairn_in(dir.path()).arg("init"));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("kept ./cairn.toml") || stdout.contains("kept cairn.toml"), "{stdout}");
    assert_eq!(std::fs::read_to_string(dir.path().join("cairn.toml")).unwrap(), "# mine\n");
    assert!(dir.path().join("hello.rhai").exists());
    let (code, stdout, _) = output(cairn_in(dir.path()).arg("init"));
    assert_eq!(code, 0);
    assert!(!stdout.contains("wrote"), "{stdout}");
}

/// `cairn completions SHELL` prints a script naming the subcommands; an unknown shell is usage.
#[test]
fn completions_cover_the_subcommands() {
    let dir = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let (code, stdout, stderr) = output(cairn_in(dir.path()).args(["completions", shell]));
        assert_eq!(code, 0, "{stderr}");
        for word in ["resume", "inspect", "budget", "accept-rekey"] {
            assert!(stdout.contains(word), "{shell} completions lack {word}");
        }
    }
    let (code, _, stderr) = output(cairn_in(dir.path()).args(["completions", "tcsh"]));
    assert_eq!(code, 2, "{stderr}");
}

/// The subcommands `cairn --help` lists (but `help`).
pub(crate) fn subcommands(top_help: &str) -> Vec<String> {
    top_help
        .lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .filter(|name| name != "help")
        .collect()
}

/// Every subcommand's help ends with an example and its exit codes.
#[test]
fn every_subcommand_help_shows_an_example_and_its_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let (_, top, _) = output(cairn_in(dir.path()).arg("--help"));
    let commands = subcommands(&top);
    assert!(commands.len() >= 16, "{top}");
    for command in commands {
        let (code, help, stderr) = output(cairn_in(dir.path()).args([command.as_str(), "--help"]));
        assert_eq!(code, 0, "{command}: {stderr}");
        assert!(help.contains("Example"), "cairn {command} --help shows no example:\n{help}");
        assert!(help.contains("Exit codes: 0"), "cairn {command} --help shows no exit codes:\n{help}");
    }
}

/// `resolve` tells what happened by its exit code: 0 applied, 1 for a key already resolved
/// (recorded, not applied), 2 for a key the run does not wait on, the error listing the keys
/// it does wait on.
#[test]
fn resolve_exit_codes_say_what_happened() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("w.rhai"),
        "let a = await_external(\"approve\"); let b = await_external(\"budget-ok\"); [a, b]",
    )
    .unwrap();
    let (code, _, stderr) = output(cairn_in(dir.path()).args(["run", "w.rhai", "--run-id", "w1", "-q"]));
    assert_eq!(code, 4, "suspended: {stderr}");
    let (code, _, stderr) = output(cairn_in(dir.path()).args(["resolve", "w1", "aprove", "true"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no wait on key \"aprove\""), "{stderr}");
    assert!(stderr.contains("it waits on \"approve\""), "the pending keys are listed: {stderr}");
    let (code, stdout, stderr) = output(cairn_in(dir.path()).args(["resolve", "w1", "approve", "true"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("resolved approve"), "{stdout}");
    let (code, stdout, stderr) = output(cairn_in(dir.path()).args(["resolve", "w1", "approve", "false"]));
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("already resolved"), "{stderr}");
}

/// `card --profiles` calls no model: a configured provider whose API key is unset is no error.
#[test]
fn card_profiles_needs_no_api_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cairn.toml"),
        "[providers.anthropic]\nkind = \"anthropic\"\n\n[profiles.writer]\ndescription = \"Writes.\"\n\
         model = \"anthropic:claude-sonnet-4-5\"\n",
    )
    .unwrap();
    let (code, stdout, stderr) = output(cairn_in(dir.path()).args(["card", "--profiles"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("- writer: Writes."), "{stdout}");
    // A command that calls models still asks for the key.
    std::fs::write(dir.path().join("a.rhai"), "agent(\"hi\", #{model: \"anthropic:claude-sonnet-4-5\"})")
        .unwrap();
    let (code, _, stderr) = output(cairn_in(dir.path()).args(["run", "a.rhai"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("ANTHROPIC_API_KEY"), "{stderr}");
}

/// A wrong argument type names the global, the argument and the type it expected, with the
/// typed code `validation`, in both dialects: not the interpreter's missing overload
/// (`Function not found: parallel (&str | ...)`).
#[test]
fn a_wrong_argument_type_names_the_global_and_what_it_expected() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("digest.rhai", "parallel: argument 1 (items) is a string; expected an array of items"),
        ("digest.lua", "parallel: items must be a list (a sequence table {...}), got a string"),
    ];
    for (file, expected) in cases {
        let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts").join(file);
        std::fs::copy(sample, dir.path().join(file)).unwrap();
        let (code, stdout, stderr) = output(cairn_in(dir.path()).args([
            "run",
            file,
            "--args",
            r#"{"topics":"rust"}"#,
            "--json",
            "-q",
        ]));
        assert_eq!(code, 1, "{file}: {stderr}");
        let outcome: serde_json::Value =
            serde_json::from_str(&stdout).unwrap_or_else(|_| panic!("{file}: not JSON: {stdout} {stderr}"));
        assert_eq!(outcome["error"]["code"], "validation", "{file}: {stdout}");
        let message = outcome["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(expected), "{file}: {message}");
        assert!(
            !message.contains("Function not found") && !stderr.contains("Function not found"),
            "{file}: {stderr}"
        );
    }
}

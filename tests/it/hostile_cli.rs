//! The hostile-CLI corpus (`tests/hostile_cli/*/`): each case is a directory with a
//! `cairn.toml`, an `args` file (one argument per line), an optional `script.rhai` and other
//! files, and an `expect.toml` (exit code and message fragments). Every case runs through the
//! binary in a scratch copy of its directory; none may panic.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    code: i32,
    #[serde(default)]
    stdout: Option<String>,
    #[serde(default)]
    stderr: Option<String>,
    #[serde(default)]
    stdout_not: Option<String>,
    #[serde(default)]
    stderr_not: Option<String>,
    /// No raw control characters (other than newline and tab) on stdout or stderr.
    #[serde(default)]
    no_raw_control: bool,
    /// Extra environment for the command.
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
    /// A path (relative to the case) the command must have created.
    #[serde(default)]
    created: Option<String>,
    /// A signal (`INT`, `TERM`) sent once the run has started.
    #[serde(default)]
    interrupt: Option<String>,
    /// A second command run afterwards (e.g. a resume), with its expectations.
    #[serde(default)]
    then: Vec<String>,
    #[serde(default)]
    then_code: Option<i32>,
    #[serde(default)]
    then_stdout: Option<String>,
    /// The `cairn.toml` the second command sees.
    #[serde(default)]
    then_config: Option<String>,
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn cairn(dir: &Path, args: &[String], env: &std::collections::BTreeMap<String, String>) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("cairn"));
    cmd.current_dir(dir)
        .args(args)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("NO_COLOR", "1")
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs the command; with `interrupt`, sends that signal once stderr shows the run started.
fn run(mut cmd: Command, interrupt: Option<&str>) -> (Option<i32>, String, String) {
    let mut child = cmd.spawn().unwrap();
    let mut stdout_pipe = child.stdout.take().unwrap();
    let stdout_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout_pipe.read_to_string(&mut text);
        text
    });
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut err_text = String::new();
    if let Some(signal) = interrupt {
        while !err_text.contains("running ") {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap() == 0 {
                break;
            }
            err_text.push_str(&line);
        }
        std::thread::sleep(Duration::from_millis(300));
        let sent =
            Command::new("kill").args([format!("-{signal}"), child.id().to_string()]).status().unwrap();
        assert!(sent.success());
    }
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("cairn {:?} did not exit within 60 s", cmd.get_args().collect::<Vec<_>>());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    err_text.push_str(&stderr_reader.join().unwrap());
    (status.code(), stdout_reader.join().unwrap(), err_text)
}

fn raw_control(text: &str) -> bool {
    text.chars().any(|c| c.is_control() && c != '\n' && c != '\t')
}

#[test]
fn every_hostile_cli_case_ends_with_its_exit_code_and_message() {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/hostile_cli");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&corpus).unwrap().map(|e| e.unwrap().path()).collect();
    cases.sort();
    assert!(cases.len() >= 20, "the corpus holds {} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().join(&name);
        copy_dir(case, &dir);
        let expect: Expect = toml::from_str(&std::fs::read_to_string(dir.join("expect.toml")).unwrap())
            .unwrap_or_else(|e| panic!("{name}/expect.toml: {e}"));
        let args: Vec<String> = std::fs::read_to_string(dir.join("args"))
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect();
        let (code, stdout, stderr) = run(cairn(&dir, &args, &expect.env), expect.interrupt.as_deref());
        let mut problems = Vec::new();
        if code != Some(expect.code) {
            problems.push(format!("exit {code:?}, expected {}", expect.code));
        }
        if stderr.contains("panicked") || code == Some(101) {
            problems.push("panicked".to_owned());
        }
        for (what, text, fragment, wanted) in [
            ("stdout", &stdout, &expect.stdout, true),
            ("stderr", &stderr, &expect.stderr, true),
            ("stdout", &stdout, &expect.stdout_not, false),
            ("stderr", &stderr, &expect.stderr_not, false),
        ] {
            if let Some(fragment) = fragment
                && text.contains(fragment.as_str()) != wanted
            {
                let how = if wanted { "lacks" } else { "holds" };
                problems.push(format!("{what} {how} {fragment:?}"));
            }
        }
        if expect.no_raw_control && (raw_control(&stdout) || raw_control(&stderr)) {
            problems.push("raw control characters reached the terminal".to_owned());
        }
        if let Some(path) = &expect.created
            && !dir.join(path).exists()
        {
            problems.push(format!("{path} was not created"));
        }
        if !expect.then.is_empty() {
            if let Some(config) = &expect.then_config {
                std::fs::write(dir.join("cairn.toml"), config).unwrap();
            }
            let (then_code, then_stdout, then_stderr) = run(cairn(&dir, &expect.then, &expect.env), None);
            if then_code != expect.then_code.or(Some(0)) {
                problems.push(format!("then: exit {then_code:?}: {then_stderr}"));
            }
            if let Some(fragment) = &expect.then_stdout
                && !then_stdout.contains(fragment.as_str())
            {
                problems.push(format!("then: stdout lacks {fragment:?}: {then_stdout}"));
            }
        }
        if !problems.is_empty() {
            failures.push(format!("{name}: {}\n  stdout: {stdout}\n  stderr: {stderr}", problems.join("; ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

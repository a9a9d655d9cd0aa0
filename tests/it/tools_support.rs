//! Shared helpers of the tool tests: the real MCP servers they run (the test server on the
//! official Python SDK, `tests/mcp/server.py`, and `@modelcontextprotocol/server-everything`),
//! found where `.ci/run` installs them; outside CI a missing one skips its test with a note,
//! under `CI=true` it fails the test.

#![allow(dead_code)] // each test file uses part of it

use std::path::{Path, PathBuf};
use std::process::Command;

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|ci| ci == "true" || ci == "1")
}

fn missing(what: &str) -> Option<PathBuf> {
    if in_ci() {
        panic!("{what} is missing under CI: .ci/run installs it");
    }
    eprintln!("note: {what} is missing; skipping an MCP test (.ci/run installs it)");
    None
}

/// The Python interpreter that has the MCP SDK (PyPI `mcp`), by absolute path (a pyenv shim
/// would need variables the server's clean environment does not pass).
pub fn python_with_mcp() -> Option<PathBuf> {
    let python = std::env::var("CAIRN_TEST_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let out = Command::new(&python)
        .args(["-c", "import sys, mcp.server.mcpserver; print(sys.executable)"])
        .output();
    match out {
        Ok(out) if out.status.success() => Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())),
        _ => missing("python3 with the MCP SDK (pip install mcp)"),
    }
}

/// `tests/mcp/server.py`.
pub fn test_server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/server.py")
}

/// The entry script of `@modelcontextprotocol/server-everything` and `node`.
pub fn server_everything() -> Option<(PathBuf, PathBuf)> {
    let prefix = std::env::var("CAIRN_TEST_NODE_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/mcp-node"));
    let entry = prefix.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let node = Command::new("node").arg("-e").arg("process.stdout.write(process.execPath)").output();
    match (entry.exists(), node) {
        (true, Ok(out)) if out.status.success() => {
            Some((PathBuf::from(String::from_utf8_lossy(&out.stdout).into_owned()), entry))
        }
        _ => missing("@modelcontextprotocol/server-everything (npm) under target/mcp-node")
            .map(|p| (p.clone(), p)),
    }
}

/// A `[mcp.NAME]` table for the Python test server over stdio; it sees `CAIRN_MCP_LOG` and
/// the variables in `env` (set them on the `cairn` command).
pub fn stdio_server(name: &str, python: &Path, env: &[&str]) -> String {
    let mut names = vec!["\"CAIRN_MCP_LOG\"".to_owned()];
    names.extend(env.iter().map(|k| format!("{k:?}")));
    format!(
        "[mcp.{name}]\ncommand = [{:?}, {:?}, \"stdio\"]\nenv = [{}]\ntimeout_ms = 5000\n",
        python.display().to_string(),
        test_server().display().to_string(),
        names.join(", ")
    )
}

/// The lines of a server's call log (one per call it ran).
pub fn calls(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log).map(|t| t.lines().map(str::to_owned).collect()).unwrap_or_default()
}

/// A host function beside the config: appends its arguments to `host.log` in its working
/// directory (the config's) and answers with a JSON object.
pub const LOOKUP_PY: &str = r#"
import json, sys
args = json.load(sys.stdin)
with open("host.log", "a") as log:
    log.write(json.dumps(args, sort_keys=True) + "\n")
print(json.dumps({"population": 2102650, "city": args["city"]}))
"#;

/// A project in a temporary directory: provider `m` (model `m:tiny`) at `url`, the host
/// function `lookup`, the MCP server `docs` (the Python test server over stdio), a toolset
/// `research` offering both, and `extra` config after them.
pub fn tools_project(url: &str, python: &Path, extra: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        r#"[providers.m]
kind = "openai-compatible"
base_url = "{url}"
prices = {{ tiny = [1.0, 2.0] }}

[routing]
default = "m:tiny"

[toolsets.research]
host_functions = ["lookup"]
mcp = ["docs"]

[host_functions.lookup]
command = [{python:?}, "lookup.py"]
description = "Looks a city up."
accepts = {{ type = "object", properties = {{ city = {{ type = "string" }} }}, required = ["city"] }}

{mcp}
{extra}
"#,
        python = python.display().to_string(),
        mcp = stdio_server("docs", python, &["CAIRN_MCP_VARIANT", "CAIRN_MCP_MARK"])
    );
    std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
    std::fs::write(dir.path().join("lookup.py"), LOOKUP_PY).unwrap();
    dir
}

/// `cairn --config DIR/cairn.toml --store sqlite:DIR/runs.db ARGS` run in `cwd`, the MCP log
/// at `DIR/mcp.log`, with `env` set: (exit code, stdout, stderr).
pub fn cairn_at(dir: &Path, cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let out = cairn_command(dir, cwd, env, args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The command [`cairn_at`] runs.
pub fn cairn_command(dir: &Path, cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> assert_cmd::Command {
    let config = dir.join("cairn.toml");
    let store = format!("sqlite:{}", dir.join("runs.db").display());
    let mut cmd = crate::scripted_server::cairn_in(cwd);
    // No run here waits on a stale lease (a killed driver's is taken over at once, its process
    // being gone), and a 300 ms one can lapse on a loaded machine while its driver is alive.
    cmd.env("CAIRN_LEASE_TTL_MS", "30000");
    cmd.env("CAIRN_MCP_LOG", dir.join("mcp.log")).args([
        "--config",
        config.to_str().unwrap(),
        "--store",
        &store,
    ]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.args(args);
    cmd
}

/// [`cairn_command`] as a plain process, to kill.
pub fn cairn_process(dir: &Path, args: &[&str]) -> std::process::Command {
    let config = dir.join("cairn.toml");
    let store = format!("sqlite:{}", dir.join("runs.db").display());
    #[allow(deprecated)]
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("cairn"));
    cmd.current_dir(dir)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("CAIRN_LEASE_TTL_MS", "30000")
        .env("CAIRN_MCP_LOG", dir.join("mcp.log"))
        .args(["--config", config.to_str().unwrap(), "--store", &store])
        .args(args);
    cmd
}

/// A Chat Completions turn that calls several tools at once: `(wire id, name, arguments)`.
pub fn tool_calls(calls: &[(&str, &str, &str)]) -> crate::scripted_server::Reply {
    use serde_json::{Value, json};
    let chunk = |delta: Value, finish: Value| json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    let mut chunks = vec![chunk(json!({"role": "assistant", "content": null}), Value::Null)];
    for (index, (id, name, arguments)) in calls.iter().enumerate() {
        chunks.push(chunk(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": arguments}}]}),
            Value::Null,
        ));
    }
    chunks.push(chunk(json!({}), json!("tool_calls")));
    chunks.push(json!({"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}));
    crate::scripted_server::Reply::Sse(crate::scripted_server::data_lines(&chunks))
}

/// Whether a live process still has `CAIRN_MCP_MARK=mark` in its environment two seconds on (a
/// zombie has none; a process SIGKILLed as cairn exits may take a moment to go under load).
pub fn process_with(mark: &str) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while process_with_now(mark) {
        if std::time::Instant::now() >= deadline {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

/// Whether a live process has `CAIRN_MCP_MARK=mark` in its environment now.
fn process_with_now(mark: &str) -> bool {
    let needle = format!("CAIRN_MCP_MARK={mark}");
    let Ok(dir) = std::fs::read_dir("/proc") else { return false };
    dir.flatten().any(|entry| {
        std::fs::read(entry.path().join("environ"))
            .is_ok_and(|environ| environ.split(|b| *b == 0).any(|var| var == needle.as_bytes()))
    })
}

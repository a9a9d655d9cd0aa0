//! Agents with real tools through the `cairn` binary: a host function and an MCP server's
//! tools in one toolset, called by a scripted model, journaled, and replayed without calling
//! either again.

use std::path::Path;

use serde_json::Value;

use crate::scripted_server::{ScriptedServer, cairn_in, text, tool_call};
use crate::tools_support::{calls, python_with_mcp, stdio_server};

/// A host function beside the config: appends its arguments to `host.log` in its working
/// directory (the config's) and answers with a JSON object.
const LOOKUP_PY: &str = r#"
import json, sys
args = json.load(sys.stdin)
with open("host.log", "a") as log:
    log.write(json.dumps(args, sort_keys=True) + "\n")
print(json.dumps({"population": 2102650, "city": args["city"]}))
"#;

/// A project in a temporary directory: provider `m` at `url`, toolset `research` with host
/// function `lookup` and the MCP server `docs`, and `script` as `s.<ext>`.
fn tools_project(url: &str, python: &Path, script: &str, ext: &str) -> tempfile::TempDir {
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
"#,
        python = python.display().to_string(),
        mcp = stdio_server("docs", python, &[])
    );
    std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
    std::fs::write(dir.path().join("lookup.py"), LOOKUP_PY).unwrap();
    std::fs::write(dir.path().join(format!("s.{ext}")), script).unwrap();
    dir
}

fn run_in(dir: &Path, cwd: &Path, args: &[&str]) -> (i32, String, String) {
    let log = dir.join("mcp.log");
    let config = dir.join("cairn.toml");
    let store = format!("sqlite:{}", dir.join("runs.db").display());
    let mut full = vec!["--config", config.to_str().unwrap(), "--store", &store];
    full.extend_from_slice(args);
    let out = cairn_in(cwd).env("CAIRN_MCP_LOG", &log).args(&full).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn run_id(stderr: &str) -> String {
    crate::scripted_server::run_id(stderr)
}

/// The model calls the MCP tool, then the host function, then answers.
fn three_turns() -> ScriptedServer {
    ScriptedServer::start(vec![
        tool_call("w1", "docs_search", r#"{"query": "rust"}"#, 10, 5),
        tool_call("w2", "lookup", r#"{"city": "Paris"}"#, 20, 5),
        text("Paris has 2.1M people; 3 documents mention rust.", 30, 8),
    ])
}

fn agent_uses_both_tools_and_replays(script: &str, ext: &str) {
    let Some(python) = python_with_mcp() else { return };
    let server = three_turns();
    let dir = tools_project(&server.url, &python, script, ext);
    // From another directory: the host function still runs beside its config.
    let elsewhere = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("s.{ext}"));
    let (code, stdout, stderr) =
        run_in(dir.path(), elsewhere.path(), &["run", file.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let out: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(out["value"], "Paris has 2.1M people; 3 documents mention rust.", "{stdout}");
    // The tool results reached the model.
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let sent = requests[2].to_string();
    assert!(sent.contains("3 documents mention 'rust'"), "{sent}");
    assert!(sent.contains("2102650"), "{sent}");
    assert_eq!(calls(&dir.path().join("mcp.log")), [r#"search {"query": "rust"}"#]);
    assert_eq!(calls(&dir.path().join("host.log")), [r#"{"city": "Paris"}"#]);
    // The CLI progress shows the tool calls.
    assert!(stderr.contains("tool docs_search") && stderr.contains("tool lookup"), "{stderr}");

    // Replayed: no model, MCP or host-function call again.
    let id = run_id(&stderr);
    let (code, _, stderr) = run_in(dir.path(), elsewhere.path(), &["replay", &id]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(server.requests().len(), 3);
    assert_eq!(calls(&dir.path().join("mcp.log")).len(), 1);
    assert_eq!(calls(&dir.path().join("host.log")).len(), 1);

    // Inspect lists the tool calls under their agent call.
    let (code, stdout, stderr) = run_in(dir.path(), elsewhere.path(), &["inspect", &id]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("tool docs_search") && stdout.contains("tool lookup"), "{stdout}");
}

#[test]
fn a_rhai_agent_uses_a_host_function_and_an_mcp_tool_and_replays_without_calling_them() {
    agent_uses_both_tools_and_replays(r#"agent("Research Paris.", #{tools: ["research"]})"#, "rhai");
}

#[test]
fn a_lua_agent_uses_a_host_function_and_an_mcp_tool_and_replays_without_calling_them() {
    agent_uses_both_tools_and_replays(r#"return agent("Research Paris.", {tools = {"research"}})"#, "lua");
}

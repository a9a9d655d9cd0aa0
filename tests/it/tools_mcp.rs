//! Agents with real tools through the `cairn` binary: a host function and an MCP server's
//! tools in one toolset, called by a scripted model, journaled, and replayed without calling
//! either again; the same for an orchestrator's child, over streamable HTTP, and against the
//! reference server `@modelcontextprotocol/server-everything`.

use serde_json::Value;

use crate::scripted_server::{ScriptedServer, text, tool_call};
use crate::tools_support::{cairn_at, calls, process_with, python_with_mcp, tools_project};

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
    let dir = tools_project(&server.url, &python, "");
    let file = dir.path().join(format!("s.{ext}"));
    std::fs::write(&file, script).unwrap();
    // From another directory: the host function still runs beside its config.
    let elsewhere = tempfile::tempdir().unwrap();
    let mark = format!("{}-{ext}", std::process::id());
    let env = [("CAIRN_MCP_MARK", mark.as_str())];
    let (code, stdout, stderr) =
        cairn_at(dir.path(), elsewhere.path(), &env, &["run", file.to_str().unwrap(), "--json"]);
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
    // The CLI progress shows the tool calls; the server did not outlive the run.
    assert!(stderr.contains("tool docs_search ok") && stderr.contains("tool lookup ok"), "{stderr}");
    assert!(!process_with(&mark), "the MCP server outlived cairn");

    // Replayed: no model, MCP or host-function call again.
    let id = crate::scripted_server::run_id(&stderr);
    let (code, _, stderr) = cairn_at(dir.path(), elsewhere.path(), &env, &["replay", &id]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(server.requests().len(), 3);
    assert_eq!(calls(&dir.path().join("mcp.log")).len(), 1);
    assert_eq!(calls(&dir.path().join("host.log")).len(), 1);

    // Inspect lists the tool calls under their agent call.
    let (code, stdout, stderr) = cairn_at(dir.path(), elsewhere.path(), &env, &["inspect", &id]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("tool docs_search call_1_0: ok") && stdout.contains("tool lookup call_2_0: ok"),
        "{stdout}"
    );
}

#[test]
fn a_rhai_agent_uses_a_host_function_and_an_mcp_tool_and_replays_without_calling_them() {
    agent_uses_both_tools_and_replays(r#"agent("Research Paris.", #{tools: ["research"]})"#, "rhai");
}

#[test]
fn a_lua_agent_uses_a_host_function_and_an_mcp_tool_and_replays_without_calling_them() {
    agent_uses_both_tools_and_replays(r#"return agent("Research Paris.", {tools = {"research"}})"#, "lua");
}

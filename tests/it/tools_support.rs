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

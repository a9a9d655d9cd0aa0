//! How one MCP server is reached and bounded (`[mcp.NAME]` as the client reads it), and the
//! typed error that names it.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, ErrorCode};

/// How one MCP server is reached and bounded.
#[derive(Debug, Clone)]
pub(crate) struct McpServerSpec {
    /// Its name in `cairn.toml` (`[mcp.docs]`): its tools are `docs_<tool>` to the model and
    /// `mcp.docs.<tool>` to permission rules.
    pub(crate) name: String,
    pub(crate) transport: McpTransport,
    /// The bound on one tool call; past it the call is cancelled (MCP's cancellation
    /// notification) and fails `tool_failed`.
    pub(crate) call_timeout: Duration,
    /// The bound on starting, initializing and listing the server.
    pub(crate) connect_timeout: Duration,
    /// The most bytes of one call's result text; past it the call fails `tool_failed`.
    pub(crate) max_output_bytes: usize,
}

/// The default bound on one call.
pub(crate) const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The default bound on connecting and listing.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default cap on a result's text.
pub(crate) const DEFAULT_MAX_OUTPUT_BYTES: usize = 1 << 20;

/// Where a server is.
#[derive(Debug, Clone)]
pub(crate) enum McpTransport {
    /// A child process speaking JSON-RPC on its stdin and stdout.
    Stdio {
        /// The program and its arguments.
        command: Vec<String>,
        /// The only variables of cairn's environment it sees.
        env: Vec<String>,
        /// Its working directory: the directory of the `cairn.toml` that declares it.
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint.
        url: url::Url,
        /// `(header, environment variable)`: each header's value is read from its variable
        /// when the session starts, and is never shown, journaled or logged.
        headers: Vec<(String, String)>,
    },
}

/// A `tool_failed` error naming the server.
pub(crate) fn failed(spec: &McpServerSpec, message: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::ToolFailed, format!("mcp server {}: {message}", spec.name))
}

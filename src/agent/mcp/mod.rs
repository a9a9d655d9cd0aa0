//! The MCP client: a Model Context Protocol server (`[mcp.NAME]`) as a [`ToolSource`], on the
//! official Rust SDK (`rmcp`), over stdio or streamable HTTP.
//!
//! One session per source, and one source per engine: the CLI's engine lives for one run, a
//! worker's for all the runs it drives, so a server is started once per run or shared per
//! worker. The session connects when an agent first uses a toolset that names the server,
//! lists its tools (their names, descriptions and schemas become tool contracts, so a server
//! whose tools change re-keys the calls that use them), and ends with the engine: a stdio
//! server's process group is killed then. A session that died (the server crashed or broke
//! the protocol) is replaced at the next listing; its calls fail `tool_failed` meanwhile.

mod stdio;
mod tool;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::RoleClient;
use rmcp::service::RunningService;

use super::{Tool, ToolSource};
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

/// An MCP server's tools, listed on first use.
#[derive(Debug)]
pub(crate) struct McpSource {
    spec: Arc<McpServerSpec>,
    label: String,
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    listed: Mutex<Option<Vec<Arc<dyn Tool>>>>,
}

impl McpSource {
    pub(crate) fn new(spec: McpServerSpec) -> McpSource {
        let label = format!("mcp server {}", spec.name);
        McpSource {
            spec: Arc::new(spec),
            label,
            session: tokio::sync::Mutex::new(None),
            listed: Mutex::new(None),
        }
    }

    async fn connect(&self) -> Result<(Arc<Session>, Vec<Arc<dyn Tool>>), Error> {
        let spec = self.spec.clone();
        let connecting = async {
            let session = Arc::new(Session::start(&spec).await?);
            let listed = session
                .client
                .peer()
                .list_all_tools()
                .await
                .map_err(|e| session.failure(&spec, "tools/list", &e))?;
            let tools = tool::contracts(&spec, &session, listed)?;
            Ok::<_, Error>((session, tools))
        };
        match tokio::time::timeout(spec.connect_timeout, connecting).await {
            Ok(result) => result,
            Err(_) => Err(failed(
                &spec,
                format!("did not start and list its tools within {} ms", spec.connect_timeout.as_millis()),
            )),
        }
    }
}

impl ToolSource for McpSource {
    fn name(&self) -> &str {
        &self.label
    }

    fn tools(&self) -> BoxFuture<'_, Result<Vec<Arc<dyn Tool>>, Error>> {
        Box::pin(async move {
            let mut session = self.session.lock().await;
            if let Some(live) = session.as_ref()
                && !live.client.is_closed()
                && let Some(tools) = self.listed()
            {
                return Ok(tools);
            }
            // Never started, or it died: (re)start it and list again.
            *session = None;
            let (started, tools) = self.connect().await?;
            *session = Some(started);
            *self.listed.lock().unwrap_or_else(|p| p.into_inner()) = Some(tools.clone());
            Ok(tools)
        })
    }

    fn listed(&self) -> Option<Vec<Arc<dyn Tool>>> {
        self.listed.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A connected server.
pub(super) struct Session {
    client: RunningService<RoleClient, rmcp::model::ClientConfig>,
    /// A stdio server's process (killed with its group when the session is dropped).
    process: Option<stdio::ServerProcess>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("closed", &self.client.is_closed()).finish_non_exhaustive()
    }
}

impl Session {
    async fn start(spec: &McpServerSpec) -> Result<Session, Error> {
        let info = client_info();
        match &spec.transport {
            McpTransport::Stdio { command, env, cwd } => {
                // A result's JSON escapes its text: a line may be several times the text cap.
                let max_line = spec.max_output_bytes.saturating_mul(6).saturating_add(64 * 1024);
                let spawned = stdio::spawn(command, env, cwd.as_ref(), max_line).map_err(|e| {
                    failed(
                        spec,
                        format!("cannot start {:?}: {e}", command.first().map_or("", String::as_str)),
                    )
                })?;
                let process = spawned.process;
                let client = rmcp::serve_client(info, (spawned.stdout, spawned.stdin)).await;
                let session_process = Some(process);
                match client {
                    Ok(client) => Ok(Session { client, process: session_process }),
                    Err(e) => {
                        let partial = PartialSession { process: session_process.as_ref() };
                        Err(failed(spec, format!("did not initialize: {e}{}", partial.why())))
                    }
                }
            }
            McpTransport::Http { url, headers } => {
                use rmcp::transport::StreamableHttpClientTransport;
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                // reqwest 0.13 in rmcp is built without a TLS crypto provider: ring, the one
                // the provider adapters' reqwest uses, is installed once (a second install is
                // refused and changes nothing).
                let _ = rustls::crypto::ring::default_provider().install_default();
                let mut custom = std::collections::HashMap::new();
                for (header, var) in headers {
                    let value = std::env::var(var)
                        .map_err(|_| failed(spec, format!("header {header}: set {var} to its value")))?;
                    let name = http::HeaderName::from_bytes(header.as_bytes())
                        .map_err(|_| failed(spec, format!("{header:?} is not a header name")))?;
                    let mut value = http::HeaderValue::from_str(&value).map_err(|_| {
                        failed(spec, format!("header {header}: the value in {var} is not a header value"))
                    })?;
                    value.set_sensitive(true);
                    custom.insert(name, value);
                }
                let limit = spec.max_output_bytes.saturating_mul(6).saturating_add(64 * 1024);
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom)
                    .max_sse_event_size(limit)
                    .max_json_response_size(limit);
                let transport = StreamableHttpClientTransport::from_config(config);
                let client = rmcp::serve_client(info, transport)
                    .await
                    .map_err(|e| failed(spec, format!("did not initialize: {e}")))?;
                Ok(Session { client, process: None })
            }
        }
    }

    /// A failed request as a `tool_failed` error naming the server, with what the process
    /// said or how it ended.
    fn failure(&self, spec: &McpServerSpec, what: &str, error: &rmcp::ServiceError) -> Error {
        let why = PartialSession { process: self.process.as_ref() }.why();
        let error = match error {
            rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_) => {
                "the connection closed".to_owned()
            }
            other => other.to_string(),
        };
        failed(spec, format!("{what}: {error}{why}"))
    }
}

/// What a stdio server's process says about a failure: a protocol violation, its exit status,
/// the end of its stderr.
struct PartialSession<'a> {
    process: Option<&'a stdio::ServerProcess>,
}

impl PartialSession<'_> {
    fn why(&self) -> String {
        let Some(process) = self.process else { return String::new() };
        let mut why = String::new();
        let diagnostics = process.diagnostics.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(violation) = &diagnostics.violation {
            why.push_str(&format!(" ({violation}; disconnected)"));
        }
        // Its stderr only explains a server that died; a live one's is its own business.
        if let Some(status) = process.exit_status() {
            why.push_str(&format!(" (the server exited: {status})"));
            let tail = String::from_utf8_lossy(&diagnostics.stderr_tail);
            let tail = tail.trim();
            if !tail.is_empty() {
                let last: Vec<&str> = tail.lines().rev().take(3).collect();
                let last: Vec<&str> = last.into_iter().rev().collect();
                why.push_str(&format!("; its stderr ends: {}", last.join(" | ")));
            }
        }
        why
    }
}

fn client_info() -> rmcp::model::ClientConfig {
    let mut info = rmcp::model::ClientConfig::default();
    info.client_info = rmcp::model::Implementation::new("cairn", env!("CARGO_PKG_VERSION"));
    info
}

/// A `tool_failed` error naming the server.
pub(super) fn failed(spec: &McpServerSpec, message: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::ToolFailed, format!("mcp server {}: {message}", spec.name))
}

//! A connected MCP server: the SDK's client over a stdio child or streamable HTTP, and the
//! typed errors of its failed requests (a protocol violation, the exit status, the end of a
//! dead server's stderr).

use rmcp::RoleClient;
use rmcp::service::RunningService;

use super::spec::{McpServerSpec, McpTransport, failed};
use super::stdio;
use crate::error::Error;

/// A connected server.
pub(super) struct Session {
    pub(super) client: RunningService<RoleClient, rmcp::model::ClientConfig>,
    /// A stdio server's process (killed with its group when the session is dropped).
    process: Option<stdio::ServerProcess>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("closed", &self.client.is_closed()).finish_non_exhaustive()
    }
}

impl Session {
    pub(super) async fn start(spec: &McpServerSpec) -> Result<Session, Error> {
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
    pub(super) fn failure(&self, spec: &McpServerSpec, what: &str, error: &rmcp::ServiceError) -> Error {
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

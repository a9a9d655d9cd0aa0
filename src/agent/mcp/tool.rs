//! An MCP server's tool as a cairn [`Tool`]: its contract from `tools/list`, its calls through
//! `tools/call` bounded in time (cancelled through MCP's cancellation notification when the
//! bound passes) and in bytes, and its result mapped to text: text blocks joined, images,
//! audio and resources summarized by type and size, `structuredContent` as JSON when there is
//! no text, and `isError` as a `tool_failed` error (the model sees it as an error result).

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::session::Session;
use super::spec::{McpServerSpec, failed};
use crate::agent::Tool;
use crate::error::Error;

/// One tool of one server.
pub(super) struct McpTool {
    spec: Arc<McpServerSpec>,
    session: Arc<Session>,
    /// What the model calls it: `<server>_<tool>`.
    model_name: String,
    /// What the server calls it.
    remote_name: String,
    /// `mcp.<server>.<tool>`, for permission rules.
    qualified: String,
    description: String,
    parameters: Value,
    /// `mcp` and, when the server declares one, a digest of its output schema: a changed
    /// output schema re-keys the calls too.
    version: String,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool").field("name", &self.model_name).finish_non_exhaustive()
    }
}

/// The most tools one server may list.
const MAX_TOOLS: usize = 512;

/// The tools a server listed, as contracts. A name the model cannot call (outside
/// `[a-zA-Z0-9_-]`, over 64 characters with its server prefix) or listed twice is refused.
pub(super) fn contracts(
    spec: &Arc<McpServerSpec>,
    session: &Arc<Session>,
    listed: Vec<rmcp::model::Tool>,
) -> Result<Vec<Arc<dyn Tool>>, Error> {
    if listed.len() > MAX_TOOLS {
        return Err(failed(spec, format!("it lists {} tools, more than {MAX_TOOLS}", listed.len())));
    }
    let mut tools: Vec<Arc<dyn Tool>> = Vec::with_capacity(listed.len());
    for tool in listed {
        // Read through JSON: the wire shape, not the SDK's Rust types, is the contract.
        let wire = serde_json::to_value(&tool).map_err(|e| failed(spec, format!("a listed tool: {e}")))?;
        let remote = wire.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let model_name = format!("{}_{remote}", spec.name);
        if remote.is_empty()
            || model_name.len() > 64
            || !model_name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(failed(
                spec,
                format!(
                    "tool name {remote:?} cannot be offered to a model (as {model_name:?}: [a-zA-Z0-9_-], at most 64)"
                ),
            ));
        }
        if tools.iter().any(|t| t.name() == model_name) {
            return Err(failed(spec, format!("it lists tool {remote:?} twice")));
        }
        let mut parameters = wire.get("inputSchema").cloned().unwrap_or_else(|| json!({"type": "object"}));
        if !parameters.is_object() {
            return Err(failed(spec, format!("tool {remote:?}: its inputSchema is not a JSON object")));
        }
        if let Err(e) = jsonschema::validator_for(&parameters) {
            return Err(failed(
                spec,
                format!("tool {remote:?}: its inputSchema is not a valid JSON Schema: {e}"),
            ));
        }
        // `title` is presentation; keep the contract to what validates.
        if let Some(object) = parameters.as_object_mut() {
            object.remove("title");
        }
        let version = match wire.get("outputSchema") {
            Some(schema) => {
                let digest = crate::journal::content_key(schema).map(|k| k.to_hex()).unwrap_or_default();
                format!("mcp:{}", &digest[..digest.len().min(16)])
            }
            None => "mcp".to_owned(),
        };
        tools.push(Arc::new(McpTool {
            spec: spec.clone(),
            session: session.clone(),
            qualified: format!("mcp.{}.{remote}", spec.name),
            model_name,
            description: wire.get("description").and_then(Value::as_str).unwrap_or_default().to_owned(),
            remote_name: remote,
            parameters,
            version,
        }));
    }
    Ok(tools)
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.model_name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    fn version(&self) -> &str {
        &self.version
    }

    fn qualified_name(&self) -> Option<&str> {
        Some(&self.qualified)
    }

    fn call(&self, args: Value) -> BoxFuture<'static, Result<String, Error>> {
        let spec = self.spec.clone();
        let session = self.session.clone();
        let remote = self.remote_name.clone();
        Box::pin(async move {
            let mut params = rmcp::model::CallToolRequestParams::new(remote.clone());
            params.arguments = match args {
                Value::Object(map) => Some(map),
                Value::Null => None,
                other => {
                    let mut wrapped = Map::new();
                    wrapped.insert("value".to_owned(), other);
                    Some(wrapped)
                }
            };
            let what = format!("tools/call {remote}");
            // Dropping the request (the bound passed, the run was cancelled) sends MCP's
            // cancellation notification for it.
            let answer =
                tokio::time::timeout(spec.call_timeout, session.client.peer().call_tool(params)).await;
            let result = match answer {
                Err(_) => {
                    return Err(failed(
                        &spec,
                        format!(
                            "{what}: no answer within timeout_ms = {}; cancelled",
                            spec.call_timeout.as_millis()
                        ),
                    ));
                }
                Ok(Err(error)) => return Err(session.failure(&spec, &what, &error)),
                Ok(Ok(result)) => result,
            };
            let wire = serde_json::to_value(&result).map_err(|e| failed(&spec, format!("{what}: {e}")))?;
            to_text(&spec, &what, &wire)
        })
    }
}

/// A `tools/call` result as the text the model reads.
fn to_text(spec: &McpServerSpec, what: &str, result: &Value) -> Result<String, Error> {
    let mut parts: Vec<String> = Vec::new();
    let mut has_text = false;
    for block in result.get("content").and_then(Value::as_array).into_iter().flatten() {
        match block.get("type").and_then(Value::as_str).unwrap_or_default() {
            "text" => {
                has_text = true;
                parts.push(block.get("text").and_then(Value::as_str).unwrap_or_default().to_owned());
            }
            "image" | "audio" => {
                let kind = block["type"].as_str().unwrap_or_default();
                let mime = block.get("mimeType").and_then(Value::as_str).unwrap_or("unknown type");
                let bytes = base64_len(block.get("data").and_then(Value::as_str).unwrap_or_default());
                parts.push(format!("[{kind}: {mime}, {bytes} bytes]"));
            }
            "resource" => {
                let resource = block.get("resource").cloned().unwrap_or(Value::Null);
                let uri = resource.get("uri").and_then(Value::as_str).unwrap_or("?");
                let mime = resource.get("mimeType").and_then(Value::as_str).unwrap_or("unknown type");
                let bytes = match (resource.get("text"), resource.get("blob")) {
                    (Some(Value::String(text)), _) => text.len(),
                    (_, Some(Value::String(blob))) => base64_len(blob),
                    _ => 0,
                };
                parts.push(format!("[resource {uri}: {mime}, {bytes} bytes]"));
            }
            "resource_link" => {
                let uri = block.get("uri").and_then(Value::as_str).unwrap_or("?");
                let mime = block.get("mimeType").and_then(Value::as_str).unwrap_or("unknown type");
                parts.push(format!("[resource link {uri}: {mime}]"));
            }
            other => parts.push(format!("[{other} content]")),
        }
    }
    if !has_text && let Some(structured) = result.get("structuredContent") {
        parts.insert(0, structured.to_string());
    }
    let text = parts.join("\n");
    if text.len() > spec.max_output_bytes {
        return Err(failed(
            spec,
            format!(
                "{what}: its result of {} bytes exceeds max_output_bytes ({})",
                text.len(),
                spec.max_output_bytes
            ),
        ));
    }
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let shown = if text.is_empty() { "(no message)".to_owned() } else { text };
        return Err(failed(spec, format!("{what} failed: {shown}")));
    }
    Ok(text)
}

/// The decoded size of base64 text.
fn base64_len(data: &str) -> usize {
    let trimmed = data.trim_end_matches('=');
    trimmed.len() * 3 / 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::mcp::spec::McpTransport;

    fn spec(max: usize) -> McpServerSpec {
        McpServerSpec {
            name: "docs".into(),
            transport: McpTransport::Stdio { command: vec!["x".into()], env: vec![], cwd: None },
            call_timeout: std::time::Duration::from_secs(1),
            connect_timeout: std::time::Duration::from_secs(1),
            max_output_bytes: max,
        }
    }

    #[test]
    fn text_joins_and_other_content_is_summarized() {
        let result = json!({"content": [
            {"type": "text", "text": "one"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a.md", "mimeType": "text/markdown", "text": "hello"}},
            {"type": "text", "text": "two"}
        ]});
        let text = to_text(&spec(1000), "tools/call x", &result).unwrap();
        assert_eq!(
            text,
            "one\n[image: image/png, 8 bytes]\n[resource file:///a.md: text/markdown, 5 bytes]\ntwo"
        );
        let structured = json!({"content": [], "structuredContent": {"n": 1}});
        assert_eq!(to_text(&spec(1000), "x", &structured).unwrap(), "{\"n\":1}");
    }

    #[test]
    fn errors_and_oversized_results_are_tool_failed() {
        let error = json!({"content": [{"type": "text", "text": "no such doc"}], "isError": true});
        let e = to_text(&spec(1000), "tools/call search", &error).unwrap_err();
        assert_eq!(e.code, crate::error::ErrorCode::ToolFailed);
        assert!(e.message.contains("no such doc"), "{}", e.message);
        let big = json!({"content": [{"type": "text", "text": "x".repeat(2000)}]});
        let e = to_text(&spec(1000), "tools/call flood", &big).unwrap_err();
        assert!(e.message.contains("exceeds max_output_bytes (1000)"), "{}", e.message);
    }
}

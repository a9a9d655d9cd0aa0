//! Toolsets and MCP servers in `cairn.toml`:
//!
//! ```toml
//! [toolsets.research]
//! root = "docs"                 # the fs-read tools over this directory (optional)
//! host_functions = ["fetch"]    # host functions offered to the model as tools
//! mcp = ["docs"]                # every tool of these MCP servers
//!
//! [host_functions.fetch]
//! command = ["python3", "fetch.py"]   # runs in this file's directory
//! description = "Fetches a page."
//! accepts = { type = "object", properties = { url = { type = "string" } } }  # or "fetch.schema.json"
//!
//! [mcp.docs]
//! command = ["python3", "docs_server.py"]   # stdio; or url = "http://127.0.0.1:8000/mcp"
//! env = ["PATH"]                            # the only variables it sees
//! headers = { Authorization = "DOCS_TOKEN" }  # HTTP only: header = the variable holding its value
//! timeout_ms = 60000
//! ```
//!
//! Everything is checked at load: names, references, URLs, bounds; one line names the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::host_fn::HostFunctionConfig;
use crate::agent::mcp::{McpServerSpec, McpSource, McpTransport};
use crate::agent::{HostFunction, HostFunctionTool, Tool, ToolSource, Toolset};
use crate::error::Error;

/// An `[mcp.NAME]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpServerConfig {
    /// stdio: the program and its arguments (a program path with a `/` is resolved against
    /// the config file's directory, which is also its working directory).
    command: Option<Vec<String>>,
    /// stdio: the environment variables it inherits (default `["PATH"]`).
    env: Option<Vec<String>>,
    /// Streamable HTTP: the endpoint.
    url: Option<String>,
    /// Streamable HTTP: `header = "VARIABLE"`, each value read from its variable.
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// The bound on one tool call (default 60000).
    timeout_ms: Option<u64>,
    /// The bound on starting the server and listing its tools (default 30000).
    connect_timeout_ms: Option<u64>,
    /// The most bytes of one result's text (default 1 MiB).
    max_output_bytes: Option<u64>,
}

/// The longest bound accepted: one day.
const MAX_MS: u64 = 86_400_000;

impl McpServerConfig {
    /// The server this table declares; `dir` is the config file's directory.
    pub(crate) fn spec(&self, name: &str, dir: Option<&Path>) -> Result<McpServerSpec, String> {
        let at = format!("mcp.{name}");
        check_name(name, &at)?;
        let transport = match (&self.command, &self.url) {
            (Some(command), None) => {
                if command.is_empty() {
                    return Err(format!("{at}.command: empty (give the program and its arguments)"));
                }
                if !self.headers.is_empty() {
                    return Err(format!("{at}.headers: only a server with a url takes headers"));
                }
                let mut command = command.clone();
                if let (Some(program), Some(dir)) = (command.first_mut(), dir)
                    && program.contains('/')
                    && !Path::new(program.as_str()).is_absolute()
                {
                    *program = dir.join(program.as_str()).display().to_string();
                }
                McpTransport::Stdio {
                    command,
                    env: self.env.clone().unwrap_or_else(|| vec!["PATH".to_owned()]),
                    cwd: dir.map(Path::to_path_buf),
                }
            }
            (None, Some(text)) => {
                if self.env.is_some() {
                    return Err(format!("{at}.env: only a stdio server (command) takes env"));
                }
                let url = url::Url::parse(text).map_err(|e| format!("{at}.url = {text:?}: {e}"))?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(format!("{at}.url = {text:?}: the scheme must be http or https"));
                }
                let mut headers = Vec::new();
                for (header, var) in &self.headers {
                    if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                        return Err(format!("{at}.headers: {header:?} is not a header name"));
                    }
                    if var.is_empty() || var.contains('=') {
                        return Err(format!(
                            "{at}.headers.{header}: name the environment variable holding its value"
                        ));
                    }
                    headers.push((header.clone(), var.clone()));
                }
                McpTransport::Http { url, headers }
            }
            (Some(_), Some(_)) => return Err(format!("{at}: set command (stdio) or url (HTTP), not both")),
            (None, None) => return Err(format!("{at}: set command = [...] (stdio) or url = \"http://...\"")),
        };
        let ms = |value: Option<u64>, key: &str, default: Duration| -> Result<Duration, String> {
            match value {
                None => Ok(default),
                Some(ms) if (1..=MAX_MS).contains(&ms) => Ok(Duration::from_millis(ms)),
                Some(ms) => Err(format!("{at}.{key} = {ms}: must be within 1..={MAX_MS}")),
            }
        };
        let max_output_bytes = match self.max_output_bytes {
            None => crate::agent::mcp::DEFAULT_MAX_OUTPUT_BYTES,
            Some(n) if (1..=(1 << 30)).contains(&n) => n as usize,
            Some(n) => return Err(format!("{at}.max_output_bytes = {n}: must be within 1..=1073741824")),
        };
        Ok(McpServerSpec {
            name: name.to_owned(),
            transport,
            call_timeout: ms(self.timeout_ms, "timeout_ms", crate::agent::mcp::DEFAULT_CALL_TIMEOUT)?,
            connect_timeout: ms(
                self.connect_timeout_ms,
                "connect_timeout_ms",
                crate::agent::mcp::DEFAULT_CONNECT_TIMEOUT,
            )?,
            max_output_bytes,
        })
    }
}

/// A name that can prefix tool names a model calls: `[a-zA-Z0-9_-]`, 1 to 32 characters.
fn check_name(name: &str, at: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 32
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!(
            "{at}: the name must be 1 to 32 of [a-zA-Z0-9_-] (it prefixes its tools' names)"
        ));
    }
    Ok(())
}

/// What of `cairn.toml` the tools read.
pub(crate) struct ToolsConfig<'a> {
    pub(crate) toolsets: &'a BTreeMap<String, toml::Table>,
    pub(crate) host_functions: &'a BTreeMap<String, HostFunctionConfig>,
    pub(crate) mcp: &'a BTreeMap<String, McpServerConfig>,
    /// The config file's directory.
    pub(crate) dir: Option<&'a Path>,
}

/// The keys a `[toolsets.NAME]` table takes.
const TOOLSET_KEYS: &[&str] = &["kind", "root", "max_scan_bytes", "timeout_ms", "host_functions", "mcp"];

/// The names a toolset table lists under `key` (`host_functions`, `mcp`).
fn listed<'a>(name: &str, table: &'a toml::Table, key: &str) -> Result<Vec<&'a str>, String> {
    match table.get(key) {
        None => Ok(Vec::new()),
        Some(toml::Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().ok_or_else(|| format!("toolsets.{name}.{key}: a list of names")))
            .collect(),
        Some(_) => Err(format!("toolsets.{name}.{key}: a list of names")),
    }
}

/// Checks every toolset, MCP server and host-function schema at load: one line names the key.
pub(crate) fn validate(config: &ToolsConfig<'_>) -> Result<(), String> {
    for (name, server) in config.mcp {
        server.spec(name, config.dir)?;
    }
    for (name, table) in config.toolsets {
        if let Some(key) = table.keys().find(|k| !TOOLSET_KEYS.contains(&k.as_str())) {
            return Err(format!("toolsets.{name}: unknown key {key:?} (use {})", TOOLSET_KEYS.join(", ")));
        }
        match table.get("kind") {
            None => {}
            Some(toml::Value::String(kind)) if kind == "fs-read" => {}
            Some(other) => {
                return Err(format!("toolsets.{name}: unknown toolset kind {other} (built in: fs-read)"));
            }
        }
        for function in listed(name, table, "host_functions")? {
            let Some(host) = config.host_functions.get(function) else {
                return Err(format!(
                    "toolsets.{name}.host_functions: {function:?} is not a [host_functions] table"
                ));
            };
            if host.description.as_deref().is_none_or(|d| d.trim().is_empty()) {
                return Err(format!(
                    "host_functions.{function}: a tool needs a description (toolsets.{name} offers it to the model)"
                ));
            }
            if host.accepts.is_none() {
                return Err(format!(
                    "host_functions.{function}: a tool needs accepts, the JSON Schema of its arguments (toolsets.{name} offers it to the model)"
                ));
            }
        }
        for server in listed(name, table, "mcp")? {
            if !config.mcp.contains_key(server) {
                let known: Vec<&str> = config.mcp.keys().map(String::as_str).collect();
                let known = if known.is_empty() { "none is declared".to_owned() } else { known.join(", ") };
                return Err(format!("toolsets.{name}.mcp: unknown MCP server {server:?} ({known})"));
            }
        }
    }
    for (name, host) in config.host_functions {
        if let Some(accepts) = &host.accepts {
            accepts_schema(name, accepts, config.dir)?;
        }
    }
    Ok(())
}

/// The JSON Schema `accepts` gives: an inline table, or a JSON file beside the config.
pub(crate) fn accepts_schema(
    function: &str,
    accepts: &toml::Value,
    dir: Option<&Path>,
) -> Result<Value, String> {
    let at = format!("host_functions.{function}.accepts");
    let schema = match accepts {
        toml::Value::Table(table) => {
            serde_json::to_value(table).map_err(|e| format!("{at}: not a JSON Schema: {e}"))?
        }
        toml::Value::String(file) => {
            let path = match dir {
                Some(dir) if Path::new(file).is_relative() => dir.join(file),
                _ => PathBuf::from(file),
            };
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("{at}: cannot read {}: {e}", path.display()))?;
            serde_json::from_str(&text).map_err(|e| format!("{at}: {} is not JSON: {e}", path.display()))?
        }
        _ => return Err(format!("{at}: a JSON Schema table, or the name of a JSON file holding one")),
    };
    if !schema.is_object() {
        return Err(format!("{at}: the schema must be a JSON object"));
    }
    jsonschema::validator_for(&schema).map_err(|e| format!("{at}: not a valid JSON Schema: {e}"))?;
    Ok(schema)
}

/// Builds every toolset: one MCP source per server, shared by the toolsets that name it (one
/// session per server); `functions` are the host functions as registered.
pub(crate) fn build_toolsets(
    config: &ToolsConfig<'_>,
    functions: &BTreeMap<String, HostFunction>,
) -> Result<Vec<Toolset>, Error> {
    let mut sources: BTreeMap<&str, Arc<McpSource>> = BTreeMap::new();
    let mut toolsets = Vec::new();
    for (name, table) in config.toolsets {
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        let fs_read = table.get("kind").is_some() || name == "fs-read" || table.contains_key("root");
        if fs_read {
            let root = table.get("root").and_then(|r| r.as_str()).ok_or_else(|| {
                Error::config(format!("toolsets.{name}: set root = \"DIR\", the directory it may read"))
            })?;
            let built = crate::agent::fs_read_toolset_bounded(Path::new(root), search_bounds(name, table)?)?;
            tools.extend(built.tools().iter().cloned());
        }
        for function in listed(name, table, "host_functions").map_err(Error::config)? {
            let (Some(host), Some(run)) = (config.host_functions.get(function), functions.get(function))
            else {
                return Err(Error::config(format!("toolsets.{name}.host_functions: unknown {function:?}")));
            };
            let schema = match &host.accepts {
                Some(accepts) => accepts_schema(function, accepts, config.dir).map_err(Error::config)?,
                None => {
                    return Err(Error::config(format!("host_functions.{function}: a tool needs accepts")));
                }
            };
            let description = host.description.as_deref().unwrap_or_default();
            tools.push(Arc::new(HostFunctionTool::new(
                function,
                description,
                schema,
                host.version.as_deref(),
                run.clone(),
            )));
        }
        let mut toolset = Toolset::new(name, tools);
        for server in listed(name, table, "mcp").map_err(Error::config)? {
            let source = match sources.get(server) {
                Some(source) => source.clone(),
                None => {
                    let spec = config
                        .mcp
                        .get(server)
                        .ok_or_else(|| Error::config(format!("toolsets.{name}.mcp: unknown {server:?}")))?
                        .spec(server, config.dir)
                        .map_err(Error::config)?;
                    let source = Arc::new(McpSource::new(spec));
                    sources.insert(server, source.clone());
                    source
                }
            };
            toolset = toolset.with_source(source as Arc<dyn ToolSource>);
        }
        toolsets.push(toolset);
    }
    Ok(toolsets)
}

/// `max_scan_bytes` and `timeout_ms` of an `fs-read` toolset: positive integers.
fn search_bounds(name: &str, table: &toml::Table) -> Result<crate::agent::SearchBounds, Error> {
    let positive = |key: &str| -> Result<Option<u64>, Error> {
        match table.get(key) {
            None => Ok(None),
            Some(toml::Value::Integer(n)) if *n > 0 => Ok(Some(*n as u64)),
            Some(other) => {
                Err(Error::config(format!("toolsets.{name}.{key} = {other}: must be a positive integer")))
            }
        }
    };
    let mut bounds = crate::agent::SearchBounds::default();
    if let Some(bytes) = positive("max_scan_bytes")? {
        bounds.max_scan_bytes = bytes;
    }
    if let Some(ms) = positive("timeout_ms")? {
        bounds.timeout = Duration::from_millis(ms);
    }
    Ok(bounds)
}

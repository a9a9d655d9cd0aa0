//! Tools an agent may call, grouped in named toolsets, and the permission chain every call
//! passes through before it runs.
//!
//! A tool's identity for the journal is its *contract*: name, description, JSON Schema
//! parameters and version. The toolset hash covers exactly those four (sorted by name), so
//! changing a tool's implementation never re-keys a paid call, and bumping its version does.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::error::Error;

/// A tool: a contract the model sees and an implementation the engine runs.
pub trait Tool: Send + Sync + fmt::Debug {
    /// The name the model calls it by (`[a-zA-Z0-9_-]`, unique within an agent's tools).
    fn name(&self) -> &str;
    /// What it does, for the model.
    fn description(&self) -> &str;
    /// The JSON Schema of its arguments; arguments are validated against it before a call.
    fn parameters(&self) -> &Value;
    /// The contract's version: bump it when the tool's meaning changes.
    fn version(&self) -> &str;
    /// Runs the tool. The result text goes back to the model as the tool result; an error
    /// goes back as an error result (the model may correct itself).
    fn call(&self, args: Value) -> BoxFuture<'static, Result<String, Error>>;
    /// Runs the tool for the call the loop minted `id` for (`call_<turn>_<index>`, stable
    /// across a resume of the loop from its checkpoint). A tool whose effects are journaled
    /// keys them on it; the default ignores it.
    fn call_with_id(&self, id: &str, args: Value) -> BoxFuture<'static, Result<String, Error>> {
        let _ = id;
        self.call(args)
    }
    /// Whether a successful call ends the agent, its result text (parsed as JSON when it is
    /// JSON) becoming the agent's value. The orchestrator's `finish` is one.
    fn ends_agent(&self) -> bool {
        false
    }
    /// The tool's name for permission rules beside the one the model calls it by: an MCP
    /// tool `search` of server `docs` is `docs_search` to the model and `mcp.docs.search` to
    /// `[permissions]` (where `docs.*` matches it too).
    fn qualified_name(&self) -> Option<&str> {
        None
    }
    /// How the engine journals its calls; see [`ToolJournaling`].
    fn journaling(&self) -> ToolJournaling {
        ToolJournaling::Effect
    }
}

/// How the engine journals a tool's calls. Every call is an entry in the agent call's own
/// scope, keyed on `{tool, call id, arguments}`, so a resumed loop is served each call that
/// completed before the crash and never runs it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolJournaling {
    /// It acts outside the run (a host function, an MCP server): everything queued before
    /// it is durable before it runs, and its result is durable before the model sees it.
    Effect,
    /// It only reads (`fs-read`): journaled without waiting for the write, since running it
    /// again after a crash changes nothing.
    Read,
    /// It journals its own decisions (the orchestrator's tools); the engine adds no entry.
    Own,
}

/// Tools that are known only once a server is reached (an MCP server's list), listed at most
/// once per engine. The list is part of every call's identity, like any tool's contract.
pub trait ToolSource: Send + Sync + fmt::Debug {
    /// The source's name, for errors (`mcp server docs`).
    fn name(&self) -> &str;
    /// Its tools, connecting on the first call.
    fn tools(&self) -> BoxFuture<'_, Result<Vec<Arc<dyn Tool>>, Error>>;
    /// Its tools if it has listed them already (the card of a source never reached says so).
    fn listed(&self) -> Option<Vec<Arc<dyn Tool>>>;
}

/// A named group of tools, registered on the engine and referred to by name: tools known
/// up front and tools of sources listed when an agent first uses the toolset.
#[derive(Clone)]
pub struct Toolset {
    name: String,
    tools: Vec<Arc<dyn Tool>>,
    sources: Vec<Arc<dyn ToolSource>>,
}

impl fmt::Debug for Toolset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.tools.iter().map(|t| t.name()).collect();
        let sources: Vec<&str> = self.sources.iter().map(|s| s.name()).collect();
        f.debug_struct("Toolset")
            .field("name", &self.name)
            .field("tools", &names)
            .field("sources", &sources)
            .finish()
    }
}

impl Toolset {
    /// A toolset of `tools` under `name`.
    pub fn new(name: &str, tools: Vec<Arc<dyn Tool>>) -> Toolset {
        Toolset { name: name.to_owned(), tools, sources: Vec::new() }
    }

    /// This toolset with the tools of `source` added when it is used.
    pub fn with_source(mut self, source: Arc<dyn ToolSource>) -> Toolset {
        self.sources.push(source);
        self
    }

    /// Its sources.
    pub fn sources(&self) -> &[Arc<dyn ToolSource>] {
        &self.sources
    }

    /// Every tool: those known up front, then each source's (listing it on first use).
    ///
    /// # Errors
    /// A source that cannot be reached or listed (`tool_failed`).
    pub async fn resolve(&self) -> Result<Vec<Arc<dyn Tool>>, Error> {
        let mut tools = self.tools.clone();
        for source in &self.sources {
            tools.extend(source.tools().await?);
        }
        Ok(tools)
    }

    /// The tools known now: those known up front and those of sources already listed; the
    /// names of sources not listed yet.
    pub fn listed(&self) -> (Vec<Arc<dyn Tool>>, Vec<String>) {
        let mut tools = self.tools.clone();
        let mut unlisted = Vec::new();
        for source in &self.sources {
            match source.listed() {
                Some(listed) => tools.extend(listed),
                None => unlisted.push(source.name().to_owned()),
            }
        }
        (tools, unlisted)
    }

    /// The toolset's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its tools.
    pub fn tools(&self) -> &[Arc<dyn Tool>] {
        &self.tools
    }
}

/// The hash of a set of tool contracts: sha256 (hex) of the canonical JSON of
/// `[{name, description, parameters, version}]` sorted by name. `None` for no tools, so an
/// agent without tools keys exactly as before tools existed.
pub fn toolset_hash(tools: &[Arc<dyn Tool>]) -> Option<String> {
    if tools.is_empty() {
        return None;
    }
    let mut contracts: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({
                "name": t.name(),
                "description": t.description(),
                "parameters": t.parameters(),
                "version": t.version(),
            })
        })
        .collect();
    contracts.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    crate::journal::content_key(&Value::Array(contracts)).ok().map(|k| k.to_hex())
}

/// What the permission chain decided for one tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Permission {
    /// Run it.
    Allow,
    /// Refuse it; the reason goes back to the model as an error result.
    Deny(String),
    /// Suspend the run until a person approves or denies it (`cairn resolve`).
    Ask,
}

/// A host hook in the permission chain: `Some` decides, `None` passes to the default.
pub type PermissionHook = Arc<dyn Fn(&str, &Value) -> Option<Permission> + Send + Sync>;

/// The permission chain: deny rules, then ask rules, then the host hook, then the default.
/// Rules are tool-name patterns where `*` matches any run of characters.
#[derive(Clone)]
pub struct Permissions {
    /// Tools that are always refused.
    pub deny: Vec<String>,
    /// Tools that need a person's approval.
    pub ask: Vec<String>,
    /// A host decision, consulted after the rules.
    pub hook: Option<PermissionHook>,
    /// What happens when nothing else decided.
    pub default: Permission,
    /// How long an `ask` waits for a person before it counts as denied (`None`: forever).
    pub ask_timeout: Option<std::time::Duration>,
}

impl fmt::Debug for Permissions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permissions")
            .field("deny", &self.deny)
            .field("ask", &self.ask)
            .field("hook", &self.hook.is_some())
            .field("default", &self.default)
            .field("ask_timeout", &self.ask_timeout)
            .finish()
    }
}

impl Permissions {
    /// Allow every tool call.
    pub fn allow_all() -> Permissions {
        Permissions {
            deny: Vec::new(),
            ask: Vec::new(),
            hook: None,
            default: Permission::Allow,
            ask_timeout: None,
        }
    }

    /// Decides one call.
    pub fn decide(&self, tool: &str, args: &Value) -> Permission {
        self.decide_named(tool, None, args)
    }

    /// Decides one call of `tool`: a rule matches the name the model calls it by or its
    /// qualified name (`mcp.docs.search`, also matched without the `mcp.` in front, so
    /// `docs.*` covers every tool of server `docs`). The host hook sees the model's name.
    pub fn decide_tool(&self, tool: &dyn Tool, args: &Value) -> Permission {
        self.decide_named(tool.name(), tool.qualified_name(), args)
    }

    fn decide_named(&self, tool: &str, qualified: Option<&str>, args: &Value) -> Permission {
        let short = qualified.and_then(|q| q.strip_prefix("mcp."));
        let matches = |pattern: &String| {
            glob(pattern, tool)
                || qualified.is_some_and(|q| glob(pattern, q))
                || short.is_some_and(|s| glob(pattern, s))
        };
        if let Some(rule) = self.deny.iter().find(|p| matches(p)) {
            return Permission::Deny(format!("tool {tool:?} is denied by rule {rule:?}"));
        }
        if self.ask.iter().any(matches) {
            return Permission::Ask;
        }
        if let Some(decision) = self.hook.as_ref().and_then(|hook| hook(tool, args)) {
            return decision;
        }
        self.default.clone()
    }
}

/// `*`-glob matching over whole names.
fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let mut rest = name;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_names() {
        assert!(glob("read_file", "read_file"));
        assert!(!glob("read_file", "read_files"));
        assert!(glob("read_*", "read_file"));
        assert!(glob("*_file", "read_file"));
        assert!(glob("*", "anything"));
        assert!(glob("a*c*e", "abcde"));
        assert!(!glob("a*c*e", "abcdf"));
    }

    #[derive(Debug)]
    struct Named(&'static str, &'static str);

    impl Tool for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn description(&self) -> &str {
            ""
        }
        fn parameters(&self) -> &Value {
            &Value::Null
        }
        fn version(&self) -> &str {
            "1"
        }
        fn call(&self, _args: Value) -> BoxFuture<'static, Result<String, Error>> {
            Box::pin(async { Ok(String::new()) })
        }
        fn qualified_name(&self) -> Option<&str> {
            Some(self.1)
        }
    }

    #[test]
    fn rules_match_an_mcp_tool_by_its_model_name_or_its_qualified_name() {
        let search = Named("docs_search", "mcp.docs.search");
        let rules = |deny: &[&str], ask: &[&str]| Permissions {
            deny: deny.iter().map(|s| s.to_string()).collect(),
            ask: ask.iter().map(|s| s.to_string()).collect(),
            ..Permissions::allow_all()
        };
        for pattern in ["docs_search", "mcp.docs.search", "docs.*", "mcp.docs.*", "mcp.*", "docs.search"] {
            assert!(
                matches!(rules(&[pattern], &[]).decide_tool(&search, &Value::Null), Permission::Deny(_)),
                "{pattern}"
            );
            assert_eq!(
                rules(&[], &[pattern]).decide_tool(&search, &Value::Null),
                Permission::Ask,
                "{pattern}"
            );
        }
        for pattern in ["web.*", "mcp.web.search", "search", "docs"] {
            assert_eq!(
                rules(&[pattern], &[]).decide_tool(&search, &Value::Null),
                Permission::Allow,
                "{pattern}"
            );
        }
    }

    #[test]
    fn the_chain_runs_deny_then_ask_then_hook_then_default() {
        let mut permissions = Permissions {
            deny: vec!["rm_*".into()],
            ask: vec!["write_*".into(), "rm_all".into()],
            hook: Some(Arc::new(|tool, _| {
                (tool == "fetch").then_some(Permission::Deny("no network".into()))
            })),
            default: Permission::Allow,
            ask_timeout: None,
        };
        assert!(matches!(permissions.decide("rm_all", &Value::Null), Permission::Deny(_)));
        assert_eq!(permissions.decide("write_file", &Value::Null), Permission::Ask);
        assert_eq!(permissions.decide("fetch", &Value::Null), Permission::Deny("no network".into()));
        assert_eq!(permissions.decide("read_file", &Value::Null), Permission::Allow);
        permissions.default = Permission::Ask;
        assert_eq!(permissions.decide("read_file", &Value::Null), Permission::Ask);
    }
}

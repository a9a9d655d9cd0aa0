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
}

/// A named group of tools, registered on the engine and referred to by name.
#[derive(Clone)]
pub struct Toolset {
    name: String,
    tools: Vec<Arc<dyn Tool>>,
}

impl fmt::Debug for Toolset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.tools.iter().map(|t| t.name()).collect();
        f.debug_struct("Toolset").field("name", &self.name).field("tools", &names).finish()
    }
}

impl Toolset {
    /// A toolset of `tools` under `name`.
    pub fn new(name: &str, tools: Vec<Arc<dyn Tool>>) -> Toolset {
        Toolset { name: name.to_owned(), tools }
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
        if let Some(rule) = self.deny.iter().find(|p| glob(p, tool)) {
            return Permission::Deny(format!("tool {tool:?} is denied by rule {rule:?}"));
        }
        if self.ask.iter().any(|p| glob(p, tool)) {
            return Permission::Ask;
        }
        if let Some(decision) = self.hook.as_ref().and_then(|hook| hook(tool, args)) {
            return decision;
        }
        self.default.clone()
    }
}

/// A tool call whose argument text is not valid JSON: kept in the conversation with empty
/// arguments (every wire accepts an object) and answered with the parse error, which names the
/// text the model sent (cut to a few hundred characters).
pub(super) fn malformed_call(wire_id: String, name: String, raw: &str, error: &str) -> super::RequestedCall {
    const SHOWN: usize = 300;
    let shown: String = raw.chars().take(SHOWN).collect();
    let cut = if raw.chars().count() > SHOWN { "..." } else { "" };
    super::RequestedCall {
        wire_id,
        name,
        arguments: Value::Object(Default::default()),
        malformed: Some(format!("the arguments are not valid JSON ({error}): {shown:?}{cut}")),
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

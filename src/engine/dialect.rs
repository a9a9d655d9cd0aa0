//! The seam a script language plugs into the engine through: `ScriptDialect` (lint, bound,
//! prepare a script into a workflow), the `Script` a run is started from, and what a dialect's
//! linter is told of the engine's registries. The engine knows dialects only through it.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::options::ErrorPolicy;
use super::registry::{Engine, Registered};
use super::workflow::Workflow;
use crate::error::Error;
use crate::script::bound::CallBound;
use crate::script::{Diagnostic, LintContext};

/// A script language the engine can run and resume: turns stored source into a workflow.
///
/// This is the seam that keeps the engine ignorant of dialects: the engine stores a script
/// run's source (and its hash) with the run and, on resume, hands it back to the dialect
/// named in run meta. The Rhai dialect is registered by default.
pub trait ScriptDialect: Send + Sync + fmt::Debug {
    /// The dialect's name, as run meta records it (`rhai`, `lua`).
    fn name(&self) -> &'static str;

    /// The file extension of the dialect's scripts, without the dot (`rhai`, `lua`); the CLI
    /// picks a script's dialect by it unless `--dialect` says otherwise.
    fn extension(&self) -> &'static str;

    /// The API card that teaches a planner model (and a person) this dialect: byte-stable text
    /// built into the binary.
    fn card(&self) -> &'static str;

    /// Every finding of lint and compile over `source` in one pass, errors and warnings, sorted
    /// by position: what `cairn lint --json` prints and what the planner's repair prompt carries.
    /// Never fails: a malformed or hostile script yields diagnostics.
    fn check(&self, source: &str, ctx: &LintContext) -> Vec<Diagnostic>;

    /// Compiles (and lints, against the engine's registries) a script into a workflow.
    ///
    /// # Errors
    /// `validation` when the script is rejected, with the diagnostics in the message.
    fn prepare(&self, engine: &Engine, name: &str, source: &str) -> Result<Workflow, Error>;

    /// The static bound on the script's agent calls given its `args`: every agent call site
    /// with how many times it can run at most, or the first construct that makes the count
    /// unbounded. [`crate::script::bound::cost_bound`] prices it. A dialect without an
    /// analysis reports the whole script unbounded.
    fn call_bound(&self, source: &str, args: &Value) -> CallBound {
        let _ = (source, args);
        CallBound::Unbounded {
            reason: format!("the {} dialect has no static call bound", self.name()),
            line: 1,
            column: 1,
        }
    }
}

/// A workflow script: its dialect, a name (usually the file stem) and its source.
#[derive(Debug, Clone)]
pub struct Script {
    pub(super) dialect: String,
    pub(super) name: String,
    pub(super) source: Arc<str>,
    pub(super) policy: ErrorPolicy,
}

impl Script {
    /// A hand-written script in the named dialect (strict error policy). The dialect must be
    /// registered with the engine by the time the script runs.
    pub fn new(dialect: &str, name: &str, source: &str) -> Script {
        Script {
            dialect: dialect.to_owned(),
            name: name.to_owned(),
            source: Arc::from(source),
            policy: ErrorPolicy::Strict,
        }
    }

    /// A hand-written Rhai script (strict error policy).
    pub fn rhai(name: &str, source: &str) -> Script {
        Script::new("rhai", name, source)
    }

    /// A hand-written Lua 5.4 script (strict error policy); needs the `lua` feature.
    #[cfg(feature = "lua")]
    pub fn lua(name: &str, source: &str) -> Script {
        Script::new("lua", name, source)
    }

    /// Marks the script as planner-written: it always runs with the lenient error policy.
    pub fn planner_written(mut self) -> Script {
        self.policy = ErrorPolicy::Lenient;
        self
    }

    /// The script's source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The script's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The script's dialect.
    pub fn dialect(&self) -> &str {
        &self.dialect
    }

    /// The sha256 (hex) of the source, as run meta records it.
    pub fn source_hash(&self) -> String {
        crate::journal::content_key_of_canonical(&self.source).to_hex()
    }
}

impl From<Registered> for LintContext {
    /// What an engine has registered, accepting any well-formed model ref.
    fn from(registered: Registered) -> LintContext {
        LintContext {
            profiles: registered.profiles.into_iter().collect(),
            toolsets: registered.toolsets.into_iter().collect(),
            host_functions: registered.host_functions.into_iter().collect(),
            child_workflows: registered.workflows.into_iter().collect(),
            workflow_args: registered.workflow_args,
            models: None,
        }
    }
}

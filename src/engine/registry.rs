//! `Engine`: a cheap handle on the engine's registries, stores and defaults (`EngineInner`),
//! and what the registries hold: agent profiles, host functions, descriptions for planners.
//! Nothing here is global: two engines in one process share nothing. Starting and resuming
//! runs is in `mod.rs` (the engine's entry); building an engine in `builder.rs`.
//!
//! The registries hold what runs on the engine, and some of it reaches back to the engine: a
//! registered workflow is a function of a `Ctx`, whose run state holds these registries, and
//! a dialect prepares scripts against the `Engine` that holds it. Those two imports
//! (`workflow.rs`, `dialect.rs`) are the type-level recursion of the engine, listed with this
//! reason in the tidy test's allowed edges.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use super::dialect::ScriptDialect;
use super::workflow::Workflow;
use crate::clock::SharedClock;
use crate::error::Error;
use crate::model::{InvocationRole, ModelRef, PriceTable};
use crate::money::Money;
use crate::provider::Provider;
use crate::store::{JournalStore, TranscriptStore};

/// A host function callable from workflows through `ctx.call(name, args)`.
pub type HostFn = Arc<dyn Fn(Value) -> BoxFuture<'static, Result<Value, Error>> + Send + Sync>;

/// Names the engine has registered, for a dialect's linter.
#[derive(Debug, Clone, Default)]
pub struct Registered {
    /// Agent profiles.
    pub profiles: Vec<String>,
    /// Toolsets.
    pub toolsets: Vec<String>,
    /// Host functions.
    pub host_functions: Vec<String>,
    /// Workflows callable as children.
    pub workflows: Vec<String>,
    /// The JSON Schema of each child's arguments, for the children described with one.
    pub workflow_args: std::collections::BTreeMap<String, Value>,
}

/// What a host function or child workflow is for and what it accepts: shown to planner models
/// on the profile card (see `EngineBuilder::describe_host_function`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Described {
    /// What it does, in a sentence.
    pub description: String,
    /// A JSON Schema of the arguments it accepts, when known.
    pub accepts: Option<Value>,
}

/// A named agent configuration: model, system prompt, limits and a default cost estimate.
#[derive(Debug, Clone, Default)]
pub struct AgentProfile {
    /// What the profile is for (shown to planners).
    pub description: String,
    /// Its model, overriding the engine default.
    pub model: Option<ModelRef>,
    /// Authored system text.
    pub system: Option<String>,
    /// Per-turn output cap.
    pub max_output_tokens: Option<u32>,
    /// Maximum model turns.
    pub max_turns: Option<u32>,
    /// The reserve admission holds for a call, when the call gives none.
    pub est_cost: Option<Money>,
    /// The toolsets its agents may use.
    pub tools: Vec<String>,
    /// Models to fail over to, in order, when its model keeps failing retryably.
    pub fallbacks: Vec<ModelRef>,
    /// Its permission rules, replacing the engine's (the engine's host hook still applies).
    pub permissions: Option<crate::agent::Permissions>,
    /// The bound on a turn's estimated input tokens (default 200,000).
    pub max_context_tokens: Option<u64>,
}

/// The engine: registries, stores and defaults. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    pub(super) inner: Arc<EngineInner>,
}

#[derive(Clone)]
pub(crate) struct EngineInner {
    pub(crate) providers: HashMap<String, Arc<dyn Provider>>,
    pub(crate) journal: Arc<dyn JournalStore>,
    pub(crate) transcripts: Arc<dyn TranscriptStore>,
    pub(crate) defaults: HashMap<InvocationRole, ModelRef>,
    pub(crate) default_model: ModelRef,
    pub(crate) profiles: HashMap<String, AgentProfile>,
    pub(crate) host_functions: HashMap<String, HostFn>,
    pub(crate) workflows: HashMap<String, Workflow>,
    /// The script children among `workflows`, stored with every run (sorted by name).
    pub(crate) child_scripts: std::collections::BTreeMap<String, super::dialect::Script>,
    pub(crate) prices: PriceTable,
    pub(crate) clock: SharedClock,
    pub(crate) seed: Option<u64>,
    pub(crate) max_concurrency: usize,
    pub(crate) provider_limits: HashMap<String, usize>,
    pub(crate) max_spawns: u32,
    pub(crate) default_budget: Option<Money>,
    pub(crate) child_share_ppm: u32,
    pub(crate) max_depth: u32,
    pub(crate) max_retries: u32,
    pub(crate) retry_base: Duration,
    pub(crate) dialects: HashMap<String, Arc<dyn ScriptDialect>>,
    pub(crate) toolsets: HashMap<String, crate::agent::Toolset>,
    pub(crate) fallbacks: HashMap<ModelRef, Vec<ModelRef>>,
    pub(crate) permissions: crate::agent::Permissions,
    /// How long a run's lease lasts unrenewed (a dead driver holds the run this long).
    pub(crate) lease_ttl: Duration,
    /// The backoff cap and the `Retry-After` clamp of every call.
    pub(crate) backoff: crate::agent::Backoff,
    /// Descriptions of host functions, for the planner's profile card.
    pub(crate) host_docs: HashMap<String, Described>,
    /// Descriptions of child workflows, for the planner's profile card.
    pub(crate) workflow_docs: HashMap<String, Described>,
    /// Who watches every run segment (telemetry).
    pub(crate) observers: Vec<Arc<dyn super::observer::RunObserver>>,
    /// The streamed text of the runs this process drives, for its listeners.
    pub(crate) live: Arc<super::live::LiveRelay>,
    /// Closure workflows this engine started without their being registered, by name: a
    /// resume by the same engine finds them (a closure cannot be stored with the run, so
    /// another process must register it with `EngineBuilder::workflow`).
    pub(crate) ran: Arc<std::sync::Mutex<HashMap<String, Workflow>>>,
}

impl fmt::Debug for EngineInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineInner")
            .field("default_model", &self.default_model.to_string())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut providers: Vec<_> = self.inner.providers.keys().collect();
        providers.sort();
        f.debug_struct("Engine")
            .field("providers", &providers)
            .field("journal", &self.inner.journal)
            .field("default_model", &self.inner.default_model.to_string())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// The registered dialect of that name (`rhai`, `lua`).
    ///
    /// # Errors
    /// `config` when no dialect of that name is registered.
    pub fn dialect(&self, name: &str) -> Result<Arc<dyn ScriptDialect>, Error> {
        self.inner
            .dialects
            .get(name)
            .cloned()
            .ok_or_else(|| Error::config(format!("unknown script dialect {name:?}")))
    }

    /// The registered dialect whose scripts carry that file extension (without the dot).
    pub fn dialect_for_extension(&self, extension: &str) -> Option<Arc<dyn ScriptDialect>> {
        let mut dialects: Vec<_> = self.inner.dialects.values().collect();
        dialects.sort_by_key(|dialect| dialect.name());
        dialects.into_iter().find(|dialect| dialect.extension() == extension).cloned()
    }

    /// The names a script may refer to (profiles, toolsets, host functions, workflows).
    pub fn registered(&self) -> Registered {
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        Registered {
            profiles: sorted(self.inner.profiles.keys().cloned().collect()),
            toolsets: sorted(self.inner.toolsets.keys().cloned().collect()),
            host_functions: sorted(self.inner.host_functions.keys().cloned().collect()),
            workflows: sorted(self.inner.workflows.keys().cloned().collect()),
            workflow_args: self
                .inner
                .workflow_docs
                .iter()
                .filter(|(name, _)| self.inner.workflows.contains_key(*name))
                .filter_map(|(name, doc)| Some((name.clone(), doc.accepts.clone()?)))
                .collect(),
        }
    }

    /// The journal store.
    pub fn journal_store(&self) -> &Arc<dyn JournalStore> {
        &self.inner.journal
    }

    /// The registries and defaults, for crate modules that analyse or render them (the static
    /// cost bound, the planner's profile card).
    pub(crate) fn inner(&self) -> &EngineInner {
        &self.inner
    }

    /// Lists the tools of every toolset's sources (MCP servers, connecting to each), so the
    /// profile card shows them; returns the failures, each naming its source.
    pub async fn list_tools(&self) -> Vec<Error> {
        let mut names: Vec<&String> = self.inner.toolsets.keys().collect();
        names.sort();
        let mut failures = Vec::new();
        for name in names {
            if let Some(toolset) = self.inner.toolsets.get(name)
                && let Err(error) = toolset.resolve().await
                && !failures.iter().any(|f: &Error| f.message == error.message)
            {
                failures.push(error);
            }
        }
        failures
    }
}

//! `EngineBuilder`: an engine's registries and defaults, set one by one, then `build`: the
//! composition point where the Rhai and Lua dialects are registered unless the embedder
//! registered its own (nothing below the builder names a dialect).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::dialect::ScriptDialect;
use super::lease;
use super::registry::{AgentProfile, Described, Engine, EngineInner};
use super::workflow::Workflow;
use crate::clock::{SharedClock, SystemClock};
use crate::error::{Error, ErrorCode};
use crate::model::{InvocationRole, ModelRef, PriceTable};
use crate::money::Money;
use crate::provider::Provider;
use crate::store::{JournalStore, TranscriptStore};

/// The latency of the echo model registered by default.
const ECHO_DEMO_LATENCY: Duration = Duration::from_millis(20);

/// Builds an [`Engine`].
pub struct EngineBuilder {
    inner: EngineInner,
}

impl fmt::Debug for EngineBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineBuilder").finish_non_exhaustive()
    }
}

impl Engine {
    /// A builder over one store that keeps both journals and transcripts (every shipped store
    /// does). The echo provider is registered and is the default model until another default
    /// is set.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cairn::{Engine, MemoryStore};
    /// let engine = Engine::builder(Arc::new(MemoryStore::new())).build().unwrap();
    /// # let _ = engine;
    /// ```
    pub fn builder<S>(store: Arc<S>) -> EngineBuilder
    where
        S: JournalStore + TranscriptStore + 'static,
    {
        Engine::builder_with_stores(store.clone(), store)
    }

    /// A builder over a journal store and a separate transcript store. The echo provider is
    /// registered and is the default model until another default is set.
    pub fn builder_with_stores(
        journal: Arc<dyn JournalStore>,
        transcripts: Arc<dyn TranscriptStore>,
    ) -> EngineBuilder {
        // The built-in echo model answers after a short, model-like latency, so offline demos
        // behave like real runs (a fan-out's branches are all in flight at once, and budget
        // admission does not depend on thread timing). Benchmarks register a zero-latency echo.
        let echo: Arc<dyn Provider> =
            Arc::new(crate::provider::echo::EchoProvider::new().with_latency(ECHO_DEMO_LATENCY));
        let mut providers: HashMap<String, Arc<dyn Provider>> = HashMap::new();
        providers.insert(echo.name().to_owned(), echo);
        EngineBuilder {
            inner: EngineInner {
                providers,
                journal,
                transcripts,
                defaults: HashMap::new(),
                default_model: ModelRef::parse("echo:default").unwrap_or_else(|_| unreachable_model()),
                profiles: HashMap::new(),
                host_functions: HashMap::new(),
                workflows: HashMap::new(),
                child_scripts: std::collections::BTreeMap::new(),
                prices: PriceTable::shipped(),
                clock: Arc::new(SystemClock),
                seed: None,
                max_concurrency: 12,
                provider_limits: HashMap::new(),
                max_spawns: 500,
                default_budget: None,
                child_share_ppm: 300_000,
                max_depth: super::child_scripts::DEFAULT_MAX_WORKFLOW_DEPTH,
                max_retries: 3,
                retry_base: Duration::from_millis(250),
                dialects: HashMap::new(),
                toolsets: HashMap::new(),
                fallbacks: HashMap::new(),
                permissions: crate::agent::Permissions::allow_all(),
                lease_ttl: lease::DEFAULT_LEASE_TTL,
                backoff: crate::agent::Backoff::default(),
                host_docs: HashMap::new(),
                workflow_docs: HashMap::new(),
                observers: Vec::new(),
                live: Arc::default(),
                ran: Arc::default(),
            },
        }
    }
}

impl EngineBuilder {
    /// A builder over one store that keeps both journals and transcripts (every shipped store
    /// does): the same as [`Engine::builder`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cairn::{EngineBuilder, MemoryStore};
    /// let engine = EngineBuilder::new(Arc::new(MemoryStore::new())).build().unwrap();
    /// # let _ = engine;
    /// ```
    pub fn new<S>(store: Arc<S>) -> EngineBuilder
    where
        S: JournalStore + TranscriptStore + 'static,
    {
        Engine::builder(store)
    }
}

fn unreachable_model() -> ModelRef {
    // "echo:default" always parses; this only satisfies the type checker without a panic.
    ModelRef::parse("echo:default").unwrap_or_else(|_| unreachable_model())
}

impl EngineBuilder {
    /// Registers a provider under its name (replacing one of the same name).
    pub fn provider(mut self, provider: Arc<dyn Provider>) -> EngineBuilder {
        self.inner.providers.insert(provider.name().to_owned(), provider);
        self
    }

    /// Replaces every registered provider by `wrap(provider)`: how a host records or
    /// replays all traffic through cassettes.
    ///
    /// # Errors
    /// The first error `wrap` returns.
    pub fn try_map_providers(
        mut self,
        wrap: impl Fn(Arc<dyn Provider>) -> Result<Arc<dyn Provider>, Error>,
    ) -> Result<EngineBuilder, Error> {
        let mut mapped = HashMap::with_capacity(self.inner.providers.len());
        for (name, provider) in self.inner.providers.drain() {
            mapped.insert(name, wrap(provider)?);
        }
        self.inner.providers = mapped;
        Ok(self)
    }

    /// Sets the model used when neither the call nor its profile names one.
    pub fn default_model(mut self, model: ModelRef) -> EngineBuilder {
        self.inner.default_model = model;
        self
    }

    /// Sets the default model of one invocation role.
    pub fn role_model(mut self, role: InvocationRole, model: ModelRef) -> EngineBuilder {
        self.inner.defaults.insert(role, model);
        self
    }

    /// Registers an agent profile.
    pub fn profile(mut self, name: &str, profile: AgentProfile) -> EngineBuilder {
        self.inner.profiles.insert(name.to_owned(), profile);
        self
    }

    /// Registers a host function.
    pub fn host_function<F, Fut>(mut self, name: &str, f: F) -> EngineBuilder
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, Error>> + Send + 'static,
    {
        self.inner.host_functions.insert(name.to_owned(), Arc::new(move |args| Box::pin(f(args))));
        self
    }

    /// Describes a registered host function for planner models: what it does and, when known,
    /// the JSON Schema of the arguments it accepts (shown on the profile card).
    pub fn describe_host_function(
        mut self,
        name: &str,
        description: &str,
        accepts: Option<Value>,
    ) -> EngineBuilder {
        self.inner
            .host_docs
            .insert(name.to_owned(), Described { description: description.to_owned(), accepts });
        self
    }

    /// Describes a registered child workflow for planner models: what it does and, when known,
    /// the JSON Schema of the arguments it accepts (shown on the profile card).
    pub fn describe_workflow(
        mut self,
        name: &str,
        description: &str,
        accepts: Option<Value>,
    ) -> EngineBuilder {
        self.inner
            .workflow_docs
            .insert(name.to_owned(), Described { description: description.to_owned(), accepts });
        self
    }

    /// Registers a workflow: callable as a child (`ctx.workflow(name, ..)`) and resumable by
    /// name.
    pub fn workflow(mut self, workflow: Workflow) -> EngineBuilder {
        self.inner.child_scripts.remove(&workflow.name);
        self.inner.workflows.insert(workflow.name.clone(), workflow);
        self
    }

    /// Registers a script as a child workflow under its name: callable from any workflow as
    /// `workflow(name, args)` (a Rhai parent may call a Lua child and the reverse). Its source
    /// is stored with every run started on the engine, so a resume runs the child the run
    /// started with and needs no file. The script is prepared (linted against the engine's
    /// registries) when it is called.
    pub fn script_workflow(mut self, script: super::dialect::Script) -> EngineBuilder {
        let workflow = super::child_scripts::workflow_of(&script);
        self.inner.workflows.insert(script.name.clone(), workflow);
        self.inner.child_scripts.insert(script.name.clone(), script);
        self
    }

    /// The nesting limit of child workflows: a call that would nest deeper fails with
    /// `config` (default 4, at most 16; larger values are clamped to 16, zero to 1).
    pub fn max_workflow_depth(mut self, depth: u32) -> EngineBuilder {
        self.inner.max_depth = depth.clamp(1, super::child_scripts::MAX_WORKFLOW_DEPTH);
        self
    }

    /// Replaces the price table.
    pub fn prices(mut self, prices: PriceTable) -> EngineBuilder {
        self.inner.prices = prices;
        self
    }

    /// Sets the clock (tests inject a `ManualClock`).
    pub fn clock(mut self, clock: SharedClock) -> EngineBuilder {
        self.inner.clock = clock;
        self
    }

    /// Seeds `random()` and `uuid()` (tests); by default each run seeds from its id and start time.
    pub fn seed(mut self, seed: u64) -> EngineBuilder {
        self.inner.seed = Some(seed);
        self
    }

    /// At most `n` concurrent model calls per run (default 12).
    pub fn max_concurrency(mut self, n: usize) -> EngineBuilder {
        self.inner.max_concurrency = n.max(1);
        self
    }

    /// At most `n` concurrent model calls per run to one provider.
    pub fn provider_limit(mut self, provider: &str, n: usize) -> EngineBuilder {
        self.inner.provider_limits.insert(provider.to_owned(), n.max(1));
        self
    }

    /// The lifetime cap of agent spawns per run (default 500).
    pub fn max_spawns(mut self, n: u32) -> EngineBuilder {
        self.inner.max_spawns = n;
        self
    }

    /// The ceiling of runs that give none (default: unbounded).
    pub fn default_budget(mut self, ceiling: Money) -> EngineBuilder {
        self.inner.default_budget = Some(ceiling);
        self
    }

    /// Retries of a retryable provider failure before failing (default 3), and the base
    /// backoff (doubled per attempt, with jitter, or the provider's Retry-After).
    pub fn retries(mut self, max_retries: u32, base: Duration) -> EngineBuilder {
        self.inner.max_retries = max_retries;
        self.inner.retry_base = base;
        self
    }

    /// Declares fallbacks for a model: when a call to `model` keeps failing retryably (after
    /// its retries), it moves to each fallback in turn. The call's identity stays `model`;
    /// the journal's `served_by` records who answered. Budget failures never fail over.
    pub fn fallbacks(mut self, model: ModelRef, fallbacks: Vec<ModelRef>) -> EngineBuilder {
        self.inner.fallbacks.insert(model, fallbacks);
        self
    }

    /// Caps retry waits: no backoff longer than `max_backoff` (default 30 s), and a provider's
    /// `Retry-After` honoured up to `max_retry_after` (default 60 s).
    pub fn retry_limits(mut self, max_backoff: Duration, max_retry_after: Duration) -> EngineBuilder {
        self.inner.backoff.max = max_backoff;
        self.inner.backoff.max_retry_after = max_retry_after;
        self
    }

    /// Registers a toolset under its name.
    pub fn toolset(mut self, toolset: crate::agent::Toolset) -> EngineBuilder {
        self.inner.toolsets.insert(toolset.name().to_owned(), toolset);
        self
    }

    /// Sets the permission chain every tool call passes (default: allow all).
    pub fn permissions(mut self, permissions: crate::agent::Permissions) -> EngineBuilder {
        self.inner.permissions = permissions;
        self
    }

    /// How long a run's lease lasts without renewal (default 30 s). A driver renews it every
    /// third of this; a driver that dies holds the run until it expires.
    pub fn lease_ttl(mut self, ttl: Duration) -> EngineBuilder {
        self.inner.lease_ttl = ttl.max(Duration::from_millis(30));
        self
    }

    /// Registers a script dialect (Rhai is registered by default).
    pub fn dialect(mut self, dialect: Arc<dyn ScriptDialect>) -> EngineBuilder {
        self.inner.dialects.insert(dialect.name().to_owned(), dialect);
        self
    }

    /// Registers an observer of every run segment the engine drives (an OpenTelemetry
    /// exporter, say): it is handed each segment's event stream as the segment starts.
    pub fn observer(mut self, observer: Arc<dyn super::observer::RunObserver>) -> EngineBuilder {
        self.inner.observers.push(observer);
        self
    }

    /// Builds the engine.
    ///
    /// # Errors
    /// `config` when the default model names an unregistered provider.
    pub fn build(mut self) -> Result<Engine, Error> {
        // The composition point: the engine knows dialects only through `ScriptDialect`.
        if !self.inner.dialects.contains_key("rhai") {
            self = self.dialect(Arc::new(crate::script::rhai::RhaiDialect::new()));
        }
        #[cfg(feature = "lua")]
        if !self.inner.dialects.contains_key("lua") {
            self = self.dialect(Arc::new(crate::script::lua::LuaDialect::new()));
        }
        let known = |m: &ModelRef| self.inner.providers.contains_key(m.provider());
        if !known(&self.inner.default_model) {
            return Err(Error::new(
                ErrorCode::Config,
                format!("default model {} names an unregistered provider", self.inner.default_model),
            ));
        }
        Ok(Engine { inner: Arc::new(self.inner) })
    }
}

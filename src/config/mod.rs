//! `cairn.toml`: providers, routing, profiles, host functions, budgets and the store, read
//! once at startup and turned into an engine. Unknown keys are errors (a typo in a budget
//! must not pass silently).

mod builder;
mod host_fn;
mod prices;
mod providers;
#[cfg(feature = "cli")]
mod server;
mod tools;
mod workflows;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::engine::EngineBuilder;
use crate::error::Error;
use crate::model::{InvocationRole, ModelRef, PriceTable};
use crate::money::Money;
use crate::provider::anthropic::AnthropicProvider;
use crate::provider::openai_chat::OpenAiChatProvider;
use crate::provider::openai_compatible::OpenAiCompatibleProvider;
use host_fn::HostFunctionConfig;
use providers::{ProfileConfig, ProviderConfig, parse_model};

/// A `cairn.toml`, parsed and checked: the store, providers, prices, routing, fallbacks,
/// profiles, toolsets (host functions, MCP servers, `fs-read`), permissions, retries, the
/// sandbox's bounds, budgets and child workflows. The reference is the guide's `cairn.toml`
/// page; unknown keys are errors, so a typo never passes silently.
///
/// [`EngineBuilder::from_config`](crate::EngineBuilder::from_config) opens the store it names
/// and wires everything else; [`EngineBuilder::config`](crate::EngineBuilder::config) wires
/// it onto a builder over a store of your own. `cairn` reads the same file the same way.
///
/// ```
/// use std::sync::Arc;
/// use cairn::{Config, EngineBuilder, MemoryStore};
///
/// let config = Config::from_toml(r#"
///     [routing]
///     default = "echo:default"
///     [profiles.researcher]
///     description = "Finds primary sources."
/// "#)?;
/// let engine = EngineBuilder::new(Arc::new(MemoryStore::new())).config(&config)?.build()?;
/// assert_eq!(engine.registered().profiles, ["researcher"]);
/// # Ok::<(), cairn::Error>(())
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub(crate) store: Option<String>,
    /// Providers are built without their API keys (a key that is unset is no error): for the
    /// commands that never call a model (`cairn card`).
    #[serde(skip)]
    pub(crate) keyless: bool,
    #[serde(default)]
    pub(crate) budget: BudgetConfig,
    #[serde(default)]
    pub(crate) routing: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) providers: BTreeMap<String, ProviderConfig>,
    #[serde(default)]
    pub(crate) profiles: BTreeMap<String, ProfileConfig>,
    #[serde(default)]
    pub(crate) toolsets: BTreeMap<String, toml::Table>,
    #[serde(default)]
    pub(crate) host_functions: BTreeMap<String, HostFunctionConfig>,
    /// MCP servers whose tools toolsets offer (`[mcp.NAME]`).
    #[serde(default)]
    pub(crate) mcp: BTreeMap<String, tools::McpServerConfig>,
    /// Fallback models per requested model: `"anthropic:x" = ["openai:y"]`.
    #[serde(default)]
    pub(crate) fallbacks: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub(crate) prices: Option<PathBuf>,
    #[serde(default)]
    pub(crate) concurrency: Option<usize>,
    #[serde(default)]
    pub(crate) max_spawns: Option<u32>,
    /// The permission chain of every tool call (a profile's own table replaces it).
    #[serde(default)]
    pub(crate) permissions: Option<crate::agent::PermissionsConfig>,
    /// Retries of retryable provider faults, for every call.
    #[serde(default)]
    pub(crate) retry: Option<RetryConfig>,
    #[serde(default)]
    pub(crate) sandbox: SandboxConfig,
    /// `[server]`: what `cairn serve` reads (named tokens with scopes, allowed hosts).
    #[cfg(feature = "cli")]
    #[serde(default)]
    pub(crate) server: server::ServerConfig,
    /// `[server]` in a build without the CLI: accepted unread, so one file serves every build.
    #[cfg(not(feature = "cli"))]
    #[serde(default, rename = "server")]
    _server: Option<toml::Table>,
    /// Script child workflows: `NAME = "path.rhai"` or `.lua`, relative to this file; the
    /// scripts of a `workflows/` folder beside it register under their stems too.
    #[serde(default)]
    pub(crate) workflows: BTreeMap<String, PathBuf>,
    /// The nesting limit of child workflows (default 4, at most 16).
    #[serde(default)]
    pub(crate) max_workflow_depth: Option<u32>,
    /// Set by `--record`/`--replay`: host-function exchanges go on, or come from, the tape.
    #[serde(skip)]
    pub(crate) host_tape: Option<Arc<crate::provider::cassette::HostTape>>,
    /// The file this config was read from, named in its errors.
    #[serde(skip)]
    pub(crate) source: Option<PathBuf>,
    /// That file's directory: relative paths resolve against it, and host functions and MCP
    /// servers run in it.
    #[serde(skip)]
    pub(crate) dir: Option<PathBuf>,
}

/// `[retry]`: `max_attempts` (first included, default 4), `initial_backoff_ms` (250, doubled
/// per attempt), `max_backoff_ms` (30000) and `max_retry_after_ms` (the longest provider
/// `Retry-After` honoured, 60000).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RetryConfig {
    max_attempts: Option<u32>,
    initial_backoff_ms: Option<u64>,
    max_backoff_ms: Option<u64>,
    max_retry_after_ms: Option<u64>,
}

impl RetryConfig {
    fn apply(self, builder: EngineBuilder) -> Result<EngineBuilder, Error> {
        if self.max_attempts == Some(0) {
            return Err(Error::config("retry.max_attempts: at least 1 (the first attempt counts)"));
        }
        let defaults = crate::agent::Backoff::default();
        let ms = |v: Option<u64>, default: Duration| v.map_or(default, Duration::from_millis);
        Ok(builder
            .retries(
                self.max_attempts.map_or(3, |n| n.saturating_sub(1)),
                ms(self.initial_backoff_ms, defaults.base),
            )
            .retry_limits(
                ms(self.max_backoff_ms, defaults.max),
                ms(self.max_retry_after_ms, defaults.max_retry_after),
            ))
    }
}

/// `[sandbox]`: the bounds of every script run (defaults: 256 MiB, 10 s of script time, 50M
/// operations, 10M allocations).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SandboxConfig {
    /// The most memory a run's script may hold, all branches together, in MiB.
    pub(crate) memory_mb: Option<u64>,
    /// The longest a script may run, in seconds of wall-clock time spent running script code.
    /// Unset, it grows with a raised `max_operations` (10 s per 50M operations).
    pub(crate) wall_time_s: Option<f64>,
    /// The operation budget of a run, all branches together.
    pub(crate) max_operations: Option<u64>,
    /// The allocation budget of a run, all branches together (copying values allocates).
    pub(crate) max_allocations: Option<u64>,
    /// The longest script source lint and compile accept, in KiB (default 256).
    pub(crate) max_script_kb: Option<u64>,
    /// The most tokens a script may have (default 40,000), counted before the parsers run.
    pub(crate) max_script_tokens: Option<u64>,
    /// The most journal entries one run may write (default 4,000,000).
    pub(crate) max_journal_entries: Option<u64>,
}

impl SandboxConfig {
    /// The Rhai sandbox limits these settings give.
    pub(crate) fn limits(&self) -> Result<crate::script::rhai::sandbox::SandboxLimits, Error> {
        use crate::script::rhai::sandbox::SandboxLimits;
        let mut limits = SandboxLimits::STANDARD;
        if let Some(mb) = self.memory_mb {
            if mb == 0 || mb > 1 << 20 {
                return Err(Error::config("sandbox.memory_mb must be between 1 and 1048576"));
            }
            limits.max_memory = mb << 20;
        }
        if let Some(seconds) = self.wall_time_s {
            if !(seconds > 0.0 && seconds <= 86_400.0) {
                return Err(Error::config("sandbox.wall_time_s must be above 0 and at most 86400"));
            }
            limits.max_wall_time = std::time::Duration::from_secs_f64(seconds);
        }
        if let Some(operations) = self.max_operations {
            if operations == 0 {
                return Err(Error::config("sandbox.max_operations must be above 0"));
            }
            limits.max_operations = operations;
            // The script time is the backstop sized for the operation budget: a host that
            // raises the budget and says nothing of time gets time in proportion.
            if self.wall_time_s.is_none() && operations > SandboxLimits::STANDARD.max_operations {
                let scale = operations as f64 / SandboxLimits::STANDARD.max_operations as f64;
                let seconds = (SandboxLimits::STANDARD.max_wall_time.as_secs_f64() * scale).min(86_400.0);
                limits.max_wall_time = std::time::Duration::from_secs_f64(seconds);
            }
        }
        if let Some(allocations) = self.max_allocations {
            if allocations == 0 {
                return Err(Error::config("sandbox.max_allocations must be above 0"));
            }
            limits.max_allocations = allocations;
        }
        if let Some(kb) = self.max_script_kb {
            if kb == 0 || kb > 16 << 10 {
                return Err(Error::config("sandbox.max_script_kb must be between 1 and 16384"));
            }
            limits.max_source_size = (kb as usize) << 10;
        }
        if let Some(tokens) = self.max_script_tokens {
            if tokens == 0 || tokens > 10_000_000 {
                return Err(Error::config("sandbox.max_script_tokens must be between 1 and 10000000"));
            }
            limits.max_source_tokens = tokens as usize;
        }
        if let Some(entries) = self.max_journal_entries {
            if entries == 0 {
                return Err(Error::config("sandbox.max_journal_entries must be above 0"));
            }
            limits.max_journal_entries = entries;
        }
        Ok(limits)
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BudgetConfig {
    /// The ceiling of runs started without `--budget`, in USD.
    pub(crate) default_usd: Option<f64>,
    /// Lets models with no price run under a finite ceiling, each call reserving $0.50
    /// (otherwise such a call is refused with `unpriced_model`).
    #[serde(default)]
    pub(crate) allow_unpriced: bool,
}

impl Config {
    /// Reads and checks the file at `path`. Relative paths in it (the store, the price
    /// table, toolset roots, host-function commands, child workflows) resolve against the
    /// file's directory, and host functions and MCP servers run there.
    ///
    /// # Errors
    /// `config` naming the file, the key and the value: a missing or unreadable file, bad
    /// TOML, an unknown key, a value out of range.
    pub fn from_file(path: &Path) -> Result<Config, Error> {
        Config::load(path, true)
    }

    /// Parses and checks a config's text. Relative paths in it resolve against the working
    /// directory when they are used.
    ///
    /// # Errors
    /// `config` naming the key and the value: bad TOML, an unknown key, a value out of range.
    pub fn from_toml(text: &str) -> Result<Config, Error> {
        let config = Config::parse(text)?;
        config.validate().map_err(Error::config)?;
        Ok(config)
    }

    /// The store the file names (`store = "sqlite:PATH"`, `jsonl:DIR`, `memory`,
    /// `postgres://...`), with a relative path resolved as [`Config::from_file`] says.
    pub fn store_url(&self) -> Option<&str> {
        self.store.as_deref()
    }

    /// Reads `path`; a missing file is an empty config when `required` is false.
    pub(crate) fn load(path: &Path, required: bool) -> Result<Config, Error> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => return Ok(Config::default()),
            Err(e) => return Err(Error::config(format!("cannot read {}: {e}", path.display()))),
        };
        let mut config =
            Config::parse(&text).map_err(|e| Error::config(format!("{}: {}", path.display(), e.message)))?;
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        // Absolute: host functions and MCP servers run in it, so their program paths (resolved
        // against it) must not depend on the working directory either.
        config.dir = Some(std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()));
        config.validate().map_err(|message| Error::config(format!("{}: {message}", path.display())))?;
        config.resolve_relative_to(path.parent().unwrap_or(Path::new("")));
        config.source = Some(path.to_owned());
        Ok(config)
    }

    /// The largest `concurrency` accepted (and the clamp of a script's `parallel` option).
    pub(crate) const MAX_CONCURRENCY: usize = 10_000;

    /// The longest echo `latency_ms` accepted: one hour.
    pub(crate) const MAX_ECHO_LATENCY_MS: u64 = 3_600_000;

    /// Checks the values serde cannot: one line naming the key and the value.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if let Some(n) = self.concurrency
            && !(1..=Config::MAX_CONCURRENCY).contains(&n)
        {
            return Err(format!("concurrency = {n}: must be within 1..={}", Config::MAX_CONCURRENCY));
        }
        for (name, provider) in &self.providers {
            if let Some(url) = &provider.base_url {
                crate::provider::parse_base_url(url)
                    .map_err(|why| format!("providers.{name}.base_url = {url:?}: {why}"))?;
            }
            if provider.context_window == Some(0) {
                return Err(format!("providers.{name}.context_window = 0: must be positive"));
            }
            if provider.idle_timeout_ms == Some(0) {
                return Err(format!("providers.{name}.idle_timeout_ms = 0: must be positive"));
            }
            if let Some(n) = provider.concurrency
                && !(1..=Config::MAX_CONCURRENCY).contains(&n)
            {
                return Err(format!(
                    "providers.{name}.concurrency = {n}: must be within 1..={}",
                    Config::MAX_CONCURRENCY
                ));
            }
            if let Some(ms) = provider.latency_ms
                && ms > Config::MAX_ECHO_LATENCY_MS
            {
                return Err(format!(
                    "providers.{name}.latency_ms = {ms}: must be at most {} (one hour)",
                    Config::MAX_ECHO_LATENCY_MS
                ));
            }
        }
        for (name, profile) in &self.profiles {
            profile.validate(name, &self.toolsets)?;
        }
        for (name, host) in &self.host_functions {
            if host.timeout_ms == Some(0) {
                return Err(format!("host_functions.{name}.timeout_ms = 0: must be positive"));
            }
            if host.max_output_bytes == Some(0) {
                return Err(format!("host_functions.{name}.max_output_bytes = 0: must be positive"));
            }
        }
        if let Some(depth) = self.max_workflow_depth
            && !(1..=crate::engine::MAX_WORKFLOW_DEPTH).contains(&depth)
        {
            return Err(format!(
                "max_workflow_depth = {depth}: must be within 1..={}",
                crate::engine::MAX_WORKFLOW_DEPTH
            ));
        }
        for (name, path) in &self.workflows {
            workflows::check_entry(name, path)?;
        }
        tools::validate(&self.tools())
    }

    /// What of this file the toolsets read.
    pub(crate) fn tools(&self) -> tools::ToolsConfig<'_> {
        tools::ToolsConfig {
            toolsets: &self.toolsets,
            host_functions: &self.host_functions,
            mcp: &self.mcp,
            dir: self.dir.as_deref(),
        }
    }

    /// Resolves the relative paths of the file (`store`, `prices`, an `fs-read` root, a
    /// host-function command with a `/`) against `dir`, the config file's directory, as cargo
    /// does: the same config means the same files from any working directory.
    pub(crate) fn resolve_relative_to(&mut self, dir: &Path) {
        let join = |path: &str| -> String {
            if Path::new(path).is_absolute() { path.to_owned() } else { dir.join(path).display().to_string() }
        };
        if let Some(store) = &self.store {
            for scheme in ["sqlite:", "jsonl:"] {
                if let Some(path) = store.strip_prefix(scheme)
                    && !path.is_empty()
                    && !path.starts_with("//")
                {
                    self.store = Some(format!("{scheme}{}", join(path)));
                    break;
                }
            }
        }
        if let Some(prices) = &self.prices {
            self.prices = Some(dir.join(prices));
        }
        for path in self.workflows.values_mut() {
            *path = dir.join(&*path);
        }
        for table in self.toolsets.values_mut() {
            if let Some(toml::Value::String(root)) = table.get_mut("root") {
                *root = join(root);
            }
        }
        for host in self.host_functions.values_mut() {
            if let Some(program) = host.command.first_mut()
                && program.contains('/')
            {
                // Absolute: the command starts in the config's directory, not the caller's.
                let joined = join(program);
                *program = std::path::absolute(&joined).map_or(joined, |p| p.display().to_string());
            }
        }
    }

    pub(crate) fn parse(text: &str) -> Result<Config, Error> {
        toml::from_str(text).map_err(|e| Error::config(e.to_string().trim().replace('\n', " ")))
    }

    /// A config error found after loading (building providers, prices, profiles), with the
    /// file it came from in front, as load-time errors have it: one line names the file, the
    /// key and the value.
    pub(crate) fn locate(&self, error: Error) -> Error {
        match &self.source {
            Some(path) if error.code == crate::error::ErrorCode::Config => {
                let prefix = format!("{}: ", path.display());
                if error.message.starts_with(&prefix) {
                    error
                } else {
                    Error::config(format!("{prefix}{}", error.message))
                }
            }
            _ => error,
        }
    }

    /// The default budget ceiling, validated.
    pub(crate) fn default_budget(&self) -> Result<Option<Money>, Error> {
        self.budget
            .default_usd
            .map(|usd| Money::from_usd(usd).map_err(|e| Error::config(format!("budget.default_usd: {e}"))))
            .transpose()
    }

    /// Registers providers, routing, profiles and host functions on `builder`. Returns the
    /// builder and whether the run falls back to the offline echo model.
    pub(crate) fn apply(
        &self,
        mut builder: EngineBuilder,
        model_flag: Option<&str>,
    ) -> Result<(EngineBuilder, bool), Error> {
        let mut prices = match &self.prices {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Error::config(format!("cannot read price table {}: {e}", path.display())))?;
                PriceTable::from_json(&text)?
            }
            None => PriceTable::shipped(),
        };
        builder =
            builder.dialect(Arc::new(crate::script::rhai::RhaiDialect::with_limits(self.sandbox.limits()?)));
        #[cfg(feature = "lua")]
        {
            builder = builder
                .dialect(Arc::new(crate::script::lua::LuaDialect::with_limits(self.sandbox.limits()?)));
        }
        let mut registered: Vec<String> = vec!["echo".into()];
        for (name, provider) in &self.providers {
            let built = provider.build(name, self.keyless)?;
            prices::apply_provider_prices(
                &mut prices,
                name,
                &provider.kind,
                provider.price.as_ref(),
                &provider.prices,
            )?;
            registered.push(name.clone());
            builder = builder.provider(built);
            if let Some(n) = provider.concurrency {
                builder = builder.provider_limit(name, n);
            }
        }
        // Providers reachable with no config file, from the environment.
        let mut env_default: Option<&str> = None;
        if !registered.iter().any(|n| n == "openai-compatible")
            && let Some(compatible) = OpenAiCompatibleProvider::from_env()?
        {
            builder = builder.provider(Arc::new(compatible));
            registered.push("openai-compatible".into());
            env_default = Some("openai-compatible");
        }
        if !registered.iter().any(|n| n == "openai") && std::env::var_os("OPENAI_API_KEY").is_some() {
            builder = builder.provider(Arc::new(OpenAiChatProvider::from_env()?));
            registered.push("openai".into());
            env_default = env_default.or(Some("openai"));
        }
        if !registered.iter().any(|n| n == "anthropic") && std::env::var_os("ANTHROPIC_API_KEY").is_some() {
            builder = builder.provider(Arc::new(AnthropicProvider::from_env()?));
            registered.push("anthropic".into());
            env_default = Some("anthropic");
        }
        let default = match (model_flag, self.routing.get("default")) {
            (Some(flag), _) => Some(flag.to_owned()),
            (None, Some(configured)) => Some(configured.clone()),
            (None, None) => match env_default {
                Some("anthropic") => Some("anthropic:claude-sonnet-4-5".to_owned()),
                Some("openai") => Some("openai:gpt-4o-mini".to_owned()),
                Some(_) => Some(format!(
                    "openai-compatible:{}",
                    std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "default".into())
                )),
                None => None,
            },
        };
        let uses_echo = default.as_deref().is_none_or(|m| m.starts_with("echo:"));
        if let Some(model) = default {
            let parsed = match model_flag {
                // The flag's value is the user's typing, not the file's: a usage error that
                // names the flag.
                Some(_) => ModelRef::parse(&model).map_err(|e| {
                    Error::new(crate::error::ErrorCode::Validation, format!("invalid --model: {e}"))
                })?,
                None => parse_model(&model, "routing.default")?,
            };
            builder = builder.default_model(parsed);
        }
        for (role, model) in &self.routing {
            if role == "default" {
                continue;
            }
            let role_value = InvocationRole::parse(role).ok_or_else(|| {
                Error::config(format!(
                    "routing.{role}: unknown role (use default, plan, loop, extract, summarize, finalize, orchestrate or synthesize)"
                ))
            })?;
            builder = builder.role_model(role_value, parse_model(model, &format!("routing.{role}"))?);
        }
        for (model, list) in &self.fallbacks {
            let requested = parse_model(model, "fallbacks")?;
            let list = list
                .iter()
                .map(|m| parse_model(m, &format!("fallbacks.{model}")))
                .collect::<Result<_, _>>()?;
            builder = builder.fallbacks(requested, list);
        }
        for (name, profile) in &self.profiles {
            builder = builder.profile(name, profile.build(name)?);
        }
        let mut functions: BTreeMap<String, crate::agent::HostFunction> = BTreeMap::new();
        for (name, host) in &self.host_functions {
            if host.command.is_empty() {
                return Err(Error::config(format!("host_functions.{name}: command is empty")));
            }
            let mut command = host.command(name, self.dir.as_deref());
            command.tape = self.host_tape.clone();
            let command = Arc::new(command);
            let function: crate::agent::HostFunction = Arc::new(move |args: Value| {
                let command = command.clone();
                Box::pin(async move { command.call(args).await })
            });
            functions.insert(name.clone(), function.clone());
            builder = builder.host_function(name, move |args: Value| function(args));
            if host.description.is_some() || host.accepts.is_some() {
                let accepts = host
                    .accepts
                    .as_ref()
                    .map(|accepts| {
                        tools::accepts_schema(name, accepts, self.dir.as_deref()).map_err(Error::config)
                    })
                    .transpose()?;
                let description = host.description.as_deref().unwrap_or_default();
                builder = builder.describe_host_function(name, description, accepts);
            }
        }
        for toolset in tools::build_toolsets(&self.tools(), &functions)? {
            builder = builder.toolset(toolset);
        }
        if let Some(n) = self.concurrency {
            builder = builder.max_concurrency(n);
        }
        if let Some(n) = self.max_spawns {
            builder = builder.max_spawns(n);
        }
        if let Some(retry) = self.retry {
            builder = retry.apply(builder)?;
        }
        if let Some(permissions) = &self.permissions {
            builder = builder.permissions(permissions.build("permissions")?);
        }
        if let Some(depth) = self.max_workflow_depth {
            builder = builder.max_workflow_depth(depth);
        }
        builder = workflows::register(&self.workflows, self.dir.as_deref(), builder)?;
        Ok((builder.prices(prices.allow_unpriced(self.budget.allow_unpriced)), uses_echo))
    }

    /// The same config, its providers built without their API keys (see `keyless`).
    #[cfg_attr(not(feature = "cli"), allow(dead_code))] // read by the CLI
    pub(crate) fn keyless(mut self) -> Config {
        self.keyless = true;
        self
    }

    /// Names for lint: profiles, toolsets, host functions.
    #[cfg_attr(not(feature = "cli"), allow(dead_code))] // read by the CLI
    pub(crate) fn names(&self) -> (Vec<String>, Vec<String>, Vec<String>) {
        (
            self.profiles.keys().cloned().collect(),
            self.toolsets.keys().cloned().collect(),
            self.host_functions.keys().cloned().collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn a_full_config_parses() {
        let config = Config::parse(
            r#"
            store = "jsonl:./runs"
            concurrency = 4
            [budget]
            default_usd = 2.5
            [routing]
            default = "local:smollm2"
            plan = "echo:default"
            [providers.local]
            kind = "openai-compatible"
            base_url = "http://127.0.0.1:8765/v1"
            prices = { smollm2 = [0.1, 0.2] }
            [profiles.researcher]
            description = "digs"
            model = "echo:default"
            est_cost_usd = 0.05
            [host_functions.upper]
            command = ["tr", "a-z", "A-Z"]
            [retry]
            max_attempts = 5
            max_backoff_ms = 2000
            max_retry_after_ms = 10000
            [permissions]
            default = "ask"
            deny = ["search_*"]
            "#,
        )
        .unwrap();
        assert_eq!(config.default_budget().unwrap(), Some(Money::from_usd(2.5).unwrap()));
        assert_eq!(config.names().0, ["researcher"]);
    }

    #[test]
    fn typos_and_bad_values_are_config_errors() {
        for bad in [
            "[budget]\ndefault_usdd = 1",
            "[budget]\ndefault_usd = \"lots\"",
            "[providers.x]\nkind = \"telepathy\"",
            "stor = \"memory\"",
            "[routing]\nsummarise = \"echo:default\"",
            "[retry]\nmax_attempts = 0",
            "[retry]\nmax_backof_ms = 1",
            "[permissions]\ndefault = \"sometimes\"",
        ] {
            let parsed = Config::parse(bad);
            let applied = parsed.and_then(|c| {
                let store = Arc::new(crate::store::MemoryStore::new());
                c.apply(crate::Engine::builder(store), None).map(|_| ())
            });
            assert_eq!(applied.unwrap_err().code, ErrorCode::Config, "{bad}");
        }
        let negative = Config::parse("[budget]\ndefault_usd = -1").unwrap();
        assert_eq!(negative.default_budget().unwrap_err().code, ErrorCode::Config);
    }

    fn check_tools(text: &str) -> Result<(), String> {
        let config = Config::parse(text).map_err(|e| e.message)?;
        config.validate()
    }

    #[test]
    fn toolsets_and_servers_are_checked_at_load() {
        let good = r#"
            [toolsets.research]
            host_functions = ["fetch"]
            mcp = ["docs", "web"]
            [host_functions.fetch]
            command = ["python3", "fetch.py"]
            description = "Fetches."
            accepts = { type = "object" }
            [mcp.docs]
            command = ["python3", "server.py"]
            [mcp.web]
            url = "http://127.0.0.1:9/mcp"
            headers = { Authorization = "WEB_TOKEN" }
        "#;
        check_tools(good).unwrap();
        for (bad, says) in [
            ("[toolsets.a]\nmcp = [\"nope\"]", "unknown MCP server \"nope\""),
            ("[toolsets.a]\nhost_functions = [\"f\"]", "\"f\" is not a [host_functions] table"),
            (
                "[toolsets.a]\nhost_functions = [\"f\"]\n[host_functions.f]\ncommand = [\"x\"]",
                "needs a description",
            ),
            (
                "[toolsets.a]\nhost_functions = [\"f\"]\n[host_functions.f]\ncommand = [\"x\"]\ndescription = \"d\"",
                "needs accepts",
            ),
            ("[mcp.a]\n", "set command"),
            ("[mcp.a]\ncommand = [\"x\"]\nurl = \"http://x\"", "not both"),
            ("[mcp.a]\nurl = \"ftp://x\"", "http or https"),
            ("[mcp.a]\ncommand = [\"x\"]\ntimeout_ms = 0", "timeout_ms = 0"),
            ("[mcp.a]\ncommand = [\"x\"]\nheaders = { A = \"B\" }", "only a server with a url"),
            ("[mcp.\"a.b\"]\ncommand = [\"x\"]", "the name must be"),
            ("[toolsets.a]\nmcps = []", "unknown key \"mcps\""),
            ("[host_functions.f]\ncommand = [\"x\"]\naccepts = 3", "a JSON Schema table"),
            ("[host_functions.f]\ncommand = [\"x\"]\naccepts = { type = 7 }", "not a valid JSON Schema"),
        ] {
            let error = check_tools(bad).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    /// The script time is the backstop sized for the operation budget: it grows with a raised
    /// budget unless the host sets it, and never shrinks with a lowered one.
    #[test]
    fn script_time_follows_a_raised_operation_budget_unless_set() {
        let limits = |text: &str| SandboxConfig::limits(&toml::from_str(text).unwrap()).unwrap();
        let standard = crate::script::rhai::sandbox::SandboxLimits::STANDARD;
        assert_eq!(limits("").max_wall_time, std::time::Duration::from_secs(10));
        assert_eq!(limits("max_operations = 500000000").max_wall_time, std::time::Duration::from_secs(100));
        assert_eq!(limits("max_operations = 1000").max_wall_time, standard.max_wall_time);
        let set = limits("max_operations = 500000000\nwall_time_s = 3");
        assert_eq!(set.max_wall_time, std::time::Duration::from_secs(3));
        assert_eq!(limits("max_operations = 18446744073709551615").max_wall_time.as_secs(), 86_400);
    }
}

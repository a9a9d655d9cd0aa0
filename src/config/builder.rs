//! A config onto an engine builder: what an embedder calls instead of wiring each table by
//! hand, and what `cairn` does for every command.

use super::Config;
use crate::engine::{Engine, EngineBuilder};
use crate::error::Error;
use crate::store;

impl EngineBuilder {
    /// A builder over the store `config` names (`sqlite` at `.cairn/cairn.db` when it names
    /// none), with everything else the file declares wired by [`EngineBuilder::config`].
    ///
    /// ```
    /// use cairn::{Config, EngineBuilder, RunOptions, Script};
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let config = Config::from_toml("store = \"memory\"\n[budget]\ndefault_usd = 0.5\n")?;
    /// let engine = EngineBuilder::from_config(&config)?.build()?;
    /// let run = engine.run_script(&Script::rhai("hi", "agent(\"hi\")"), serde_json::json!({}), RunOptions::default())?;
    /// assert_eq!(run.result().await?.value, Some(serde_json::json!("echo: hi")));
    /// # Ok::<(), cairn::Error>(()) }).unwrap();
    /// ```
    ///
    /// # Errors
    /// `config` for a store URL of no known shape or a bad table (naming the file, when the
    /// config was read from one); the store's own error when it cannot open.
    pub fn from_config(config: &Config) -> Result<EngineBuilder, Error> {
        let url = config.store_url().unwrap_or("sqlite");
        let opened = store::open(url).map_err(|e| match e {
            store::Error::Config(message) => config.locate(Error::config(message)),
            other => Error::internal(format!("cannot open store {url}: {other}")),
        })?;
        Engine::builder_with_stores(opened.journal, opened.transcripts).config(config)
    }

    /// Wires what `config` declares onto this builder: the default budget, providers (and,
    /// as `cairn` does, those reachable from the environment: `ANTHROPIC_API_KEY`,
    /// `OPENAI_API_KEY`, `OPENAI_BASE_URL`), prices, routing and fallbacks, profiles, host
    /// functions, toolsets and MCP servers, permissions, retries, concurrency and spawn
    /// limits, the sandbox's bounds (on the Rhai and Lua dialects) and child workflows. The
    /// store the file names is not opened (see [`EngineBuilder::from_config`]).
    ///
    /// # Errors
    /// `config` for a table that cannot be built (an unknown provider kind, a bad price, a
    /// model ref that does not parse, an unreadable price table or child script), naming
    /// the file when the config was read from one.
    pub fn config(self, config: &Config) -> Result<EngineBuilder, Error> {
        let builder = match config.default_budget().map_err(|e| config.locate(e))? {
            Some(ceiling) => self.default_budget(ceiling),
            None => self,
        };
        let (builder, _uses_echo) = config.apply(builder, None).map_err(|e| config.locate(e))?;
        Ok(builder)
    }
}

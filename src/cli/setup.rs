//! What every command that opens a store shares: the global flags, the config, the store
//! and the engine over it, the script and its `--args`, and the runtime a command runs on.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use serde_json::{Value, json};

use super::exit::{Exit, fail};
use crate::config::Config;
use crate::engine::Engine;
use crate::error::{Error, ErrorCode};
use crate::script::{Diagnostic, LintContext};
use crate::store::{self, OpenedStore, RunId};
/// Flags every command shares.
#[derive(Debug)]
pub(super) struct Globals {
    pub(super) store: Option<String>,
    pub(super) config: Option<PathBuf>,
}

/// Recording or replaying provider traffic.
#[derive(Debug, Args)]
pub(super) struct CassetteArgs {
    /// Record every provider exchange to this cassette (JSONL; no credentials are ever in it).
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    pub(super) record: Option<PathBuf>,
    /// Serve every provider exchange from this cassette, with zero network; a request it does
    /// not hold fails with a cassette miss.
    #[arg(long, value_name = "FILE")]
    pub(super) replay: Option<PathBuf>,
}

/// Runs an async command on a fresh multi-threaded runtime.
pub(super) fn with_runtime<F, Fut>(command: F) -> Exit
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Exit>,
{
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(async {
            let exit = command().await;
            super::telemetry::shutdown().await;
            exit
        }),
        Err(e) => fail(Exit::Error, format!("cannot start the async runtime: {e}")),
    }
}

/// A failure with the exit code it maps to.
pub(super) fn exit_of(error: &Error) -> Exit {
    match error.code {
        ErrorCode::Config | ErrorCode::Validation => Exit::Usage,
        ErrorCode::JournalMiss => Exit::ReplayMiss,
        _ => Exit::Error,
    }
}

pub(super) fn load_config(globals: &Globals) -> Result<Config, Error> {
    match &globals.config {
        Some(path) => Config::load(path, true),
        None => Config::load(Path::new("cairn.toml"), false),
    }
}

pub(super) fn open_store(globals: &Globals, config: &Config) -> Result<OpenedStore, Error> {
    let url = globals.store.clone().or_else(|| config.store.clone()).unwrap_or_else(|| "sqlite".into());
    store::open(&url).map_err(|e| match e {
        store::Error::Config(message) => Error::config(message),
        other => Error::internal(format!("cannot open store {url}: {other}")),
    })
}

/// Opens the store for reading only (`runs`, `inspect`, `replay`): nothing is created or
/// changed. `None` when nothing exists at the store's location yet.
pub(super) fn open_store_read_only(globals: &Globals, config: &Config) -> Result<Option<OpenedStore>, Error> {
    let url = globals.store.clone().or_else(|| config.store.clone()).unwrap_or_else(|| "sqlite".into());
    store::open_read_only(&url).map_err(|e| match e {
        store::Error::Config(message) => Error::config(message),
        other => Error::from(other),
    })
}

pub(super) struct Setup {
    pub(super) engine: Engine,
    pub(super) config: Config,
    pub(super) uses_echo: bool,
}

pub(super) fn setup(globals: &Globals, model: Option<&str>) -> Result<Setup, Error> {
    setup_with(globals, model, None)
}

/// An engine over the store opened read-only; `None` when there is no store yet.
pub(super) fn setup_read_only(globals: &Globals) -> Result<Option<Setup>, Error> {
    let config = load_config(globals)?;
    match open_store_read_only(globals, &config)? {
        Some(opened) => setup_over(globals, config, opened, None, None).map(Some),
        None => Ok(None),
    }
}

pub(super) fn setup_with(
    globals: &Globals,
    model: Option<&str>,
    cassette: Option<&CassetteArgs>,
) -> Result<Setup, Error> {
    let mut config = load_config(globals)?;
    if let Some(path) = cassette.and_then(|c| c.record.as_deref()) {
        crate::provider::cassette::create_tape(path)?;
        config.host_tape = Some(Arc::new(crate::provider::cassette::HostTape::record(path)));
    }
    if let Some(path) = cassette.and_then(|c| c.replay.as_deref()) {
        config.host_tape = Some(Arc::new(crate::provider::cassette::HostTape::replay(path)?));
    }
    let opened = open_store(globals, &config)?;
    setup_over(globals, config, opened, model, cassette)
}

pub(super) fn setup_over(
    _globals: &Globals,
    config: Config,
    opened: OpenedStore,
    model: Option<&str>,
    cassette: Option<&CassetteArgs>,
) -> Result<Setup, Error> {
    let builder = Engine::builder_with_stores(opened.journal, opened.transcripts);
    let builder = match config.default_budget().map_err(|e| config.locate(e))? {
        Some(ceiling) => builder.default_budget(ceiling),
        None => builder,
    };
    let (mut builder, uses_echo) = config.apply(builder, model).map_err(|e| config.locate(e))?;
    if let Some(path) = cassette.and_then(|c| c.record.as_deref()) {
        let path = path.to_owned();
        builder = builder.try_map_providers(|p| {
            Ok(Arc::new(crate::provider::cassette::RecordingProvider::new(p, &path))
                as Arc<dyn crate::provider::Provider>)
        })?;
    }
    if let Some(path) = cassette.and_then(|c| c.replay.as_deref()) {
        let path = path.to_owned();
        builder = builder.try_map_providers(|p| {
            let replay = crate::provider::cassette::ReplayProvider::open(&path, p.name())?;
            Ok(Arc::new(replay) as Arc<dyn crate::provider::Provider>)
        })?;
    }
    if let Some(ttl) = lease_ttl_from_env()? {
        builder = builder.lease_ttl(ttl);
    }
    if let Some(telemetry) = super::telemetry::current() {
        builder = builder.observer(telemetry);
    }
    let engine = builder.build()?;
    Ok(Setup { engine, config, uses_echo })
}

/// The run lease's ttl from `CAIRN_LEASE_TTL_MS`, when set (tests shorten it).
pub(super) fn lease_ttl_from_env() -> Result<Option<std::time::Duration>, Error> {
    match std::env::var("CAIRN_LEASE_TTL_MS") {
        Err(_) => Ok(None),
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Some(std::time::Duration::from_millis(ms))),
            _ => Err(Error::config(format!("CAIRN_LEASE_TTL_MS must be a positive integer, not {text:?}"))),
        },
    }
}

pub(super) fn lint_context(setup: &Setup) -> LintContext {
    let registered = setup.engine.registered();
    let (_, toolsets, _) = setup.config.names();
    LintContext {
        profiles: registered.profiles.into_iter().collect(),
        toolsets: toolsets.into_iter().collect(),
        host_functions: registered.host_functions.into_iter().collect(),
        child_workflows: registered.workflows.into_iter().collect(),
        workflow_args: registered.workflow_args,
        models: None,
    }
}

/// The dialect a script is written in: `--dialect` when given, else the one registered for
/// the file's extension, else Rhai.
pub(super) fn dialect_of(
    engine: &crate::Engine,
    file: &Path,
    flag: Option<&str>,
) -> Result<Arc<dyn crate::engine::ScriptDialect>, Exit> {
    if let Some(name) = flag {
        return engine.dialect(name).map_err(|e| fail(Exit::Usage, e));
    }
    // A file whose extension names no dialect is Rhai, the primary dialect.
    let extension = file.extension().and_then(|e| e.to_str()).unwrap_or("");
    match engine.dialect_for_extension(extension) {
        Some(dialect) => Ok(dialect),
        None => engine.dialect("rhai").map_err(|e| fail(Exit::Usage, e)),
    }
}

pub(super) fn read_script(file: &Path) -> Result<(String, String), Exit> {
    let source = std::fs::read_to_string(file)
        .map_err(|e| fail(Exit::Usage, format!("cannot read {}: {e}", file.display())))?;
    let name = file.file_stem().and_then(|s| s.to_str()).unwrap_or("script").to_owned();
    Ok((name, source))
}

pub(super) fn print_diagnostics(file: &Path, diagnostics: &[Diagnostic], as_json: bool) {
    if as_json {
        println!("{}", serde_json::to_string_pretty(diagnostics).unwrap_or_else(|_| "[]".into()));
        return;
    }
    for d in diagnostics {
        let severity = if d.is_error() { "error" } else { "warning" };
        let message = crate::text::for_terminal(&d.message);
        eprintln!("{}:{}:{}: {severity} [{}] {message}", file.display(), d.line, d.column, d.rule_id);
    }
}

pub(super) fn parse_args(text: Option<&str>) -> Result<Value, Exit> {
    let Some(text) = text else { return Ok(json!({})) };
    let body = match text.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| fail(Exit::Usage, format!("cannot read --args file {path}: {e}")))?,
        None => text.to_owned(),
    };
    serde_json::from_str(&body).map_err(|e| fail(Exit::Usage, format!("--args is not valid JSON: {e}")))
}

pub(super) fn parse_run_id(text: &str) -> Result<RunId, Exit> {
    RunId::parse(text).map_err(|e| fail(Exit::Usage, e))
}

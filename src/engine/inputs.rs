//! What a run starts from: its options (validated before anything is written), the inputs a
//! fresh run stores with itself (its arguments, its script's source, run meta with the
//! routing it started with), and what a resume reads back (the workflow, or the stored script
//! hash-checked, or an edit of it that replaces the stored source).

use std::sync::Arc;

use serde_json::Value;

use super::dialect::Script;
use super::options::ErrorPolicy;
use super::registry::{Engine, EngineInner};
use super::started::Routing;
use super::workflow::Workflow;
use crate::error::Error;
use crate::journal;
use crate::model::ModelRef;
use crate::money::Money;
use crate::store::{Lease, RunId, RunMeta, RunStatus};

/// Options of one run, validated before anything is written.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// The budget ceiling in USD (finite, ≥ 0); the engine default when `None`.
    pub budget_usd: Option<f64>,
    /// The run id; a fresh ULID when `None`.
    pub run_id: Option<RunId>,
    /// An absolute deadline in ms since the epoch; must lie in the future.
    pub deadline_ms: Option<i64>,
    /// Tags recorded in run meta.
    pub tags: Vec<String>,
    /// The error policy.
    pub policy: ErrorPolicy,
    /// How far ahead a wait's deadline (`await_external` with `timeout_ms`, `sleep`) may lie
    /// for the run to stay live and wake itself when every branch waits; a later one suspends
    /// the run (a worker claims it again at its deadline). Default zero: it suspends.
    pub hold_timers: std::time::Duration,
    /// Who asked for a queued run ([`Engine::enqueue_script`](crate::Engine::enqueue_script)):
    /// the service token's name, journaled as the `by` of the run's `start` action.
    pub by: Option<String>,
}

/// Options of a resume.
#[derive(Debug, Clone, Default)]
pub struct ResumeOptions {
    /// Replay-strict: the first would-be-live call fails the run with `journal_miss`, and
    /// nothing is written.
    pub dry_run: bool,
    /// With `dry_run`: reproduce the run as it settled (what `cairn replay` checks). A call
    /// whose journaled attempt failed, hit a limit or was cancelled is served that outcome, as
    /// the run saw it, instead of counting as a call a resume would run again.
    pub reproduce: bool,
    /// Entries (by seq) to rerun regardless of their status.
    pub invalidate: Vec<u64>,
    /// The workflow to resume with; by default the script stored with the run, or the
    /// registered workflow named in run meta.
    pub workflow: Option<Workflow>,
    /// A script to resume with: an edit of the run's script. Unless it is the stored source,
    /// it replaces it (stored as the run's new source, the old one kept), its unchanged calls
    /// replay, and re-keyed ones are explained (see `accept_rekey`). Must be of the run's
    /// dialect.
    pub script: Option<Script>,
    /// The arguments; by default the arguments stored with the run.
    pub args: Option<Value>,
    /// An absolute deadline in ms since the epoch.
    pub deadline_ms: Option<i64>,
    /// The default model for calls that name none. By default a resume routes calls as the
    /// run started (the default and per-role models stored with the run), whatever the
    /// engine's own defaults are now.
    pub model: Option<ModelRef>,
    /// Let calls whose identity changed since they were paid (model, prompt, tools, schema,
    /// options) run again, paid anew. Without it such a resume stops before dispatching any
    /// of them and reports each, and which identity field changed, as `rekey_refused`.
    pub accept_rekey: bool,
    /// A new ceiling in USD from this resume on (validated like `RunOptions::budget_usd`):
    /// refused with `config`, before anything is written, below the spend the run has settled;
    /// journaled as a `run_budget_override` decision before anything else of the segment. By
    /// default a resume keeps the recorded ceiling (or applies one the service left for it).
    pub budget_usd: Option<f64>,
    /// As `RunOptions::hold_timers`, for this segment.
    pub hold_timers: std::time::Duration,
}

/// The run's ceiling: the given budget in USD, else the engine's default.
///
/// # Errors
/// `config` for a non-finite or negative budget.
pub(super) fn validate_budget(
    budget_usd: Option<f64>,
    default: Option<Money>,
) -> Result<Option<Money>, Error> {
    match budget_usd {
        None => Ok(default),
        Some(usd) => {
            Money::from_usd(usd).map(Some).map_err(|e| Error::config(format!("invalid budget: {e}")))
        }
    }
}

/// Refuses a deadline that is not in the future.
///
/// # Errors
/// `config`.
pub(super) fn validate_deadline(deadline_ms: Option<i64>, now: i64) -> Result<(), Error> {
    match deadline_ms {
        Some(ms) if ms <= now => {
            Err(Error::config(format!("deadline {ms} is not in the future (now {now})")))
        }
        _ => Ok(()),
    }
}

/// Where a run's arguments are stored (canonical JSON).
pub(super) fn args_ref(run_id: &RunId) -> String {
    format!("{run_id}/args.json")
}

/// The source of a script run, stored with the run so a resume needs no file.
pub(super) struct ScriptSource {
    pub(super) dialect: &'static str,
    pub(super) source: Arc<str>,
    pub(super) hash: String,
}

/// Where a script run's source is stored.
pub(super) fn source_ref(run_id: &RunId) -> String {
    format!("{run_id}/source")
}

/// What a fresh run starts with.
pub(super) struct Fresh<'a> {
    pub(super) name: &'a str,
    pub(super) args: &'a Value,
    pub(super) options: &'a RunOptions,
    pub(super) script: Option<&'a ScriptSource>,
    pub(super) ceiling: Option<Money>,
    pub(super) now: i64,
}

/// Writes a fresh run's stored inputs and meta, under its lease.
pub(super) fn begin_fresh(
    engine: &EngineInner,
    run_id: &RunId,
    fresh: &Fresh<'_>,
    lease: Option<&Lease>,
) -> Result<RunMeta, Error> {
    let Fresh { name, args, options, script, ceiling, now } = *fresh;
    // Under the lease: nobody created the run between the check above and the lease.
    if engine.journal.get_meta(run_id)?.is_some() {
        return Err(Error::config(format!("run {run_id} already exists; resume it instead")));
    }
    let run_id = run_id.clone();
    let args_canonical = journal::canonical_json(args).map_err(|e| Error::validation(e.to_string()))?;
    engine.transcripts.put(&args_ref(&run_id), args_canonical.as_bytes())?;
    if let Some(script) = &script {
        engine.transcripts.put(&source_ref(&run_id), script.source.as_bytes())?;
    }
    let mut extra = serde_json::Map::new();
    if options.policy == ErrorPolicy::Lenient {
        extra.insert("policy".into(), Value::from("lenient"));
    }
    let mut meta = RunMeta {
        run_id: run_id.clone(),
        status: RunStatus::Running,
        name: Some(name.to_owned()),
        tags: options.tags.clone(),
        created_at_ms: now,
        updated_at_ms: now,
        hash_version: journal::HASH_VERSION,
        budget_ceiling: ceiling,
        dialect: script.as_ref().map(|s| s.dialect.to_owned()),
        source_ref: script.as_ref().map(|_| source_ref(&run_id)),
        source_hash: script.as_ref().map(|s| s.hash.clone()),
        args_hash: Some(journal::content_key_of_canonical(&args_canonical).to_hex()),
        segments: 1,
        extra,
    };
    // How calls are routed is part of their identity: a resume reuses it.
    Routing::of(engine).store(&mut meta);
    // The script children it may call, so a resume needs no files.
    super::child_scripts::store(engine, &mut meta)?;
    engine.journal.put_meta(&meta, lease)?;
    Ok(meta)
}

/// The workflow a resume runs: the given one, the stored script (hash-checked), or the
/// registered workflow named in run meta.
pub(super) fn resume_workflow(
    handle: &Engine,
    meta: &RunMeta,
    options: &ResumeOptions,
) -> Result<Workflow, Error> {
    let engine = &handle.inner;
    let run_id = &meta.run_id;
    if let Some(workflow) = &options.workflow {
        return Ok(workflow.clone());
    }
    let name = meta.name.clone().unwrap_or_else(|| "script".into());
    if let (Some(dialect), Some(stored_ref)) = (&meta.dialect, &meta.source_ref) {
        let dialect = engine.dialects.get(dialect).cloned().ok_or_else(|| {
            Error::config(format!("run {run_id} is a {dialect} script, a dialect this engine lacks"))
        })?;
        if let Some(script) = &options.script {
            if script.dialect() != dialect.name() {
                return Err(Error::config(format!(
                    "run {run_id} is a {} script; an edit must be one too, not {}",
                    dialect.name(),
                    script.dialect()
                )));
            }
            // A different source is an edit: it replaces the stored one when the resume
            // starts (see `store_edit`); unchanged calls replay.
            return dialect.prepare(handle, &name, script.source());
        }
        let bytes = engine
            .transcripts
            .get(stored_ref)?
            .ok_or_else(|| Error::internal(format!("the stored source of run {run_id} is missing")))?;
        let source = String::from_utf8(bytes)
            .map_err(|_| Error::internal(format!("the stored source of run {run_id} is not UTF-8")))?;
        if Some(journal::content_key_of_canonical(&source).to_hex()) != meta.source_hash {
            return Err(Error::internal(format!(
                "the stored source of run {run_id} does not match its hash"
            )));
        }
        return dialect.prepare(handle, &name, &source);
    }
    match &meta.name {
        Some(name) => {
            let ran =
                || engine.ran.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(name).cloned();
            engine.workflows.get(name).cloned().or_else(ran).ok_or_else(|| {
                Error::config(format!(
                    "run {run_id} ran workflow {name:?}, which this engine has not registered: register it \
                     with EngineBuilder::workflow, or pass it in ResumeOptions::workflow"
                ))
            })
        }
        None => Err(Error::config(format!("run {run_id} names no workflow; pass one to resume"))),
    }
}

/// Stores an edited script as the run's source from now on (a new blob, its ref and hash in
/// meta), keeping the earlier source and listing it in meta's `previous_sources`.
pub(super) fn store_edit(
    engine: &EngineInner,
    meta: &mut RunMeta,
    script: &Script,
    index: u32,
) -> Result<(), Error> {
    let hash = script.source_hash();
    if meta.source_hash.as_deref() == Some(hash.as_str()) {
        return Ok(());
    }
    let new_ref = format!("{}.{index}", source_ref(&meta.run_id));
    engine.transcripts.put(&new_ref, script.source().as_bytes())?;
    let previous = serde_json::json!({ "source_ref": meta.source_ref, "source_hash": meta.source_hash });
    match meta.extra.get_mut("previous_sources").and_then(Value::as_array_mut) {
        Some(list) => list.push(previous),
        None => {
            meta.extra.insert("previous_sources".into(), Value::Array(vec![previous]));
        }
    }
    meta.source_ref = Some(new_ref);
    meta.source_hash = Some(hash);
    Ok(())
}

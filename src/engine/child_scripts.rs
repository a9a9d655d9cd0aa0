//! Script children: a script registered as a child workflow (`EngineBuilder::script_workflow`,
//! what `[workflows]` and the `workflows/` folder of `cairn.toml` become), stored with every
//! run that starts on the engine, and restored from the run on resume, so a resume needs no
//! files. A script child is prepared by its dialect when it is called, against the engine of
//! the run that calls it (so it sees the same registries, its siblings included).
//!
//! Storage: each child's source is a blob `RUN/workflows/NAME`, listed in run meta's
//! `workflows` field as `{NAME: {dialect, source_ref, source_hash}}` (unknown to older
//! versions, which keep it through their round trips).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ctx::Ctx;
use super::dialect::Script;
use super::registry::{Engine, EngineInner};
use super::workflow::Workflow;
use crate::error::Error;
use crate::store::{RunId, RunMeta};

/// The run-meta field that lists the stored children.
const WORKFLOWS_FIELD: &str = "workflows";

/// The default nesting limit of child workflows.
pub(crate) const DEFAULT_MAX_WORKFLOW_DEPTH: u32 = 4;

/// The hard maximum of the nesting limit.
pub const MAX_WORKFLOW_DEPTH: u32 = 16;

/// One stored child, as run meta lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StoredChild {
    dialect: String,
    source_ref: String,
    source_hash: String,
}

/// Whether `name` may name a child workflow: 1 to 64 letters, digits, `_`, `-` or `.`
/// (it becomes part of the child's scope path `wf:NAME:k`).
pub(crate) fn valid_workflow_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// The workflow a script child runs as: prepared by its dialect on the calling run's engine.
pub(super) fn workflow_of(script: &Script) -> Workflow {
    let script = script.clone();
    Workflow::new(&script.name.clone(), move |ctx: Ctx, args: Value| {
        let script = script.clone();
        async move {
            let engine = Engine { inner: ctx.run.engine.clone() };
            let dialect = engine.dialect(&script.dialect)?;
            let workflow = dialect.prepare(&engine, &script.name, &script.source).map_err(|e| {
                Error::new(e.code, format!("child workflow {:?}: {}", script.name, e.message))
            })?;
            (workflow.body)(ctx, args).await
        }
    })
}

fn blob_ref(run_id: &RunId, name: &str) -> String {
    format!("{run_id}/workflows/{name}")
}

/// Stores the engine's script children with a fresh run (blobs, and their list in `meta`).
///
/// # Errors
/// `internal` for a store failure.
pub(super) fn store(engine: &EngineInner, meta: &mut RunMeta) -> Result<(), Error> {
    if engine.child_scripts.is_empty() {
        return Ok(());
    }
    let mut listed = BTreeMap::new();
    for (name, script) in &engine.child_scripts {
        let source_ref = blob_ref(&meta.run_id, name);
        engine.transcripts.put(&source_ref, script.source().as_bytes())?;
        let stored =
            StoredChild { dialect: script.dialect.clone(), source_ref, source_hash: script.source_hash() };
        listed.insert(name.clone(), stored);
    }
    let value = serde_json::to_value(listed).map_err(|e| Error::internal(e.to_string()))?;
    meta.extra.insert(WORKFLOWS_FIELD.into(), value);
    Ok(())
}

/// The engine a resume runs on: the given one with the script children stored with the run
/// registered over its own (a resume runs the children the run started with). `None` when the
/// run stored none, or the engine already registers each as stored.
///
/// # Errors
/// `internal` when the list is unreadable or a stored source is missing or does not match its
/// hash.
pub(super) fn restore(engine: &Arc<EngineInner>, meta: &RunMeta) -> Result<Option<Arc<EngineInner>>, Error> {
    let Some(value) = meta.extra.get(WORKFLOWS_FIELD) else { return Ok(None) };
    let run_id = &meta.run_id;
    let listed: BTreeMap<String, StoredChild> = serde_json::from_value(value.clone()).map_err(|e| {
        Error::internal(format!("the stored child workflows of run {run_id} are unreadable: {e}"))
    })?;
    let mut restored = Vec::new();
    for (name, stored) in listed {
        let same = engine.child_scripts.get(&name).is_some_and(|script| {
            script.dialect == stored.dialect && script.source_hash() == stored.source_hash
        });
        if same {
            continue;
        }
        let bytes = engine.transcripts.get(&stored.source_ref)?.ok_or_else(|| {
            Error::internal(format!(
                "the stored source of child workflow {name:?} of run {run_id} is missing"
            ))
        })?;
        let source = String::from_utf8(bytes).map_err(|_| {
            Error::internal(format!(
                "the stored source of child workflow {name:?} of run {run_id} is not UTF-8"
            ))
        })?;
        let script = Script::new(&stored.dialect, &name, &source);
        if script.source_hash() != stored.source_hash {
            return Err(Error::internal(format!(
                "the stored source of child workflow {name:?} of run {run_id} does not match its hash"
            )));
        }
        restored.push(script);
    }
    if restored.is_empty() {
        return Ok(None);
    }
    let mut inner = (**engine).clone();
    for script in restored {
        inner.workflows.insert(script.name.clone(), workflow_of(&script));
        inner.child_scripts.insert(script.name.clone(), script);
    }
    Ok(Some(Arc::new(inner)))
}

//! How a run started, kept with it: the model routing that applied (the default model and the
//! per-role models, after any `--model` override), so a resume keys its calls exactly as the
//! run did, whatever the resuming process's configuration says. The budget ceiling, the
//! arguments, the script and its dialect, and the error policy are kept by run meta and the
//! run's blobs already.
//!
//! The routing lives in run meta's `routing` field (unknown to older versions, which keep it
//! through their round trips): `{"default_model": "provider:model", "roles": {"plan": ..}}`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::registry::EngineInner;
use crate::error::Error;
use crate::model::{InvocationRole, ModelRef};
use crate::store::RunMeta;

/// The run-meta field that holds the routing.
const ROUTING_FIELD: &str = "routing";

/// The model routing a run started with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Routing {
    /// The model of calls that name none (and whose profile and role name none).
    pub(crate) default_model: String,
    /// The default model per invocation role.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) roles: BTreeMap<String, String>,
}

impl Routing {
    /// The routing an engine applies.
    pub(crate) fn of(engine: &EngineInner) -> Routing {
        Routing {
            default_model: engine.default_model.to_string(),
            roles: engine
                .defaults
                .iter()
                .map(|(role, model)| (role.as_str().to_owned(), model.to_string()))
                .collect(),
        }
    }

    /// Records the routing in run meta.
    pub(crate) fn store(&self, meta: &mut RunMeta) {
        if let Ok(value) = serde_json::to_value(self) {
            meta.extra.insert(ROUTING_FIELD.into(), value);
        }
    }

    /// The routing a run started with, when its meta recorded one (runs started by older
    /// versions did not).
    ///
    /// # Errors
    /// `internal` when the record is unreadable.
    pub(crate) fn stored(meta: &RunMeta) -> Result<Option<Routing>, Error> {
        match meta.extra.get(ROUTING_FIELD) {
            None => Ok(None),
            Some(value) => serde_json::from_value(value.clone()).map(Some).map_err(|e| {
                Error::internal(format!("the stored routing of run {} is unreadable: {e}", meta.run_id))
            }),
        }
    }
}

/// The engine a resume runs on: the given one with the run's stored routing, and the
/// default model replaced by `model` when the resume names one. `None` when nothing changes.
///
/// # Errors
/// `internal` when the stored routing is unreadable; `config` when it names a model that does
/// not parse or whose provider this engine has not registered.
pub(crate) fn resume_engine(
    engine: &Arc<EngineInner>,
    meta: &RunMeta,
    model: Option<&ModelRef>,
) -> Result<Option<Arc<EngineInner>>, Error> {
    let stored = Routing::stored(meta)?;
    if stored.is_none() && model.is_none() {
        return Ok(None);
    }
    let mut default_model = engine.default_model.clone();
    let mut defaults = engine.defaults.clone();
    if let Some(stored) = stored {
        let parse = |text: &str| {
            ModelRef::parse(text).map_err(|e| {
                Error::config(format!(
                    "run {} started with model {text:?}, which does not parse: {e}",
                    meta.run_id
                ))
            })
        };
        default_model = parse(&stored.default_model)?;
        let mut roles = HashMap::new();
        for (role, text) in &stored.roles {
            if let Some(role) = InvocationRole::parse(role) {
                roles.insert(role, parse(text)?);
            }
        }
        defaults = roles;
    }
    if let Some(model) = model {
        default_model = model.clone();
    }
    if !engine.providers.contains_key(default_model.provider()) {
        return Err(Error::config(format!(
            "run {} uses model {default_model}, whose provider this engine has not registered; \
             configure it, or resume with --model",
            meta.run_id
        )));
    }
    if default_model == engine.default_model && defaults == engine.defaults {
        return Ok(None);
    }
    let mut inner = (**engine).clone();
    inner.default_model = default_model;
    inner.defaults = defaults;
    Ok(Some(Arc::new(inner)))
}

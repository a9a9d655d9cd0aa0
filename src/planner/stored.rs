//! What a planning run stores beside its journal: its goal and the options it began with, so
//! `cairn resume plan-…` can plan the same conversation again after a kill.

use serde::Serialize;
use serde_json::Value;

use super::options::{CardChoice, PlanOptions};
use crate::engine::Engine;
use crate::error::Error;
use crate::store::RunId;

/// Where a planning run keeps its goal and options, beside its journal.
pub(super) fn stored_ref(run_id: &RunId) -> String {
    format!("{run_id}/planning.json")
}

/// A planning run's goal and the options it was started with, as stored with it: what a
/// resume after a kill needs to plan the same conversation again ([`stored_planning`]).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub(crate) struct StoredPlanning {
    /// The goal.
    pub goal: String,
    /// The options; `None` for a planning run that did not record them.
    pub options: Option<StoredOptions>,
}

/// The options of a planning run, resolved (the planner model as `provider:model`).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub(crate) struct StoredOptions {
    /// The dialect.
    pub dialect: String,
    /// The repair rounds.
    pub repair_rounds: u32,
    /// The planner model, resolved.
    pub model: String,
    /// The output cap of a draft.
    pub max_output_tokens: u32,
    /// The planning ceiling in USD.
    pub budget_usd: Option<f64>,
    /// The card choice.
    pub card: CardChoice,
    /// Whether the system prompt had authored rules of its own (they are not stored: such a
    /// conversation can only be planned again by its host).
    pub custom_rules: bool,
    /// The arguments the cost bound was computed with.
    pub args: Option<Value>,
}

impl StoredOptions {
    pub(super) fn of(options: &PlanOptions, model: &str) -> StoredOptions {
        StoredOptions {
            dialect: options.dialect.clone(),
            repair_rounds: options.repair_rounds,
            model: model.to_owned(),
            max_output_tokens: options.max_output_tokens,
            budget_usd: options.budget_usd,
            card: options.card,
            custom_rules: options.rules.is_some(),
            args: options.args.clone(),
        }
    }

    /// The [`PlanOptions`] these were stored from (with the default rules).
    #[cfg_attr(not(feature = "cli"), allow(dead_code))] // read by the CLI
    pub(crate) fn to_options(&self) -> PlanOptions {
        PlanOptions {
            dialect: self.dialect.clone(),
            repair_rounds: self.repair_rounds,
            budget_usd: self.budget_usd,
            model: Some(self.model.clone()),
            max_output_tokens: self.max_output_tokens,
            rules: None,
            args: self.args.clone(),
            card: self.card,
        }
    }
}

/// The goal and options stored with planning run `run_id`, or `None` when `run_id` is not a
/// planning run of this store.
///
/// # Errors
/// `store_io`/`internal` when the store cannot be read or the record is unreadable.
#[cfg_attr(not(feature = "cli"), allow(dead_code))] // read by the CLI
pub(crate) fn stored_planning(engine: &Engine, run_id: &RunId) -> Result<Option<StoredPlanning>, Error> {
    let Some(meta) = engine.journal_store().get_meta(run_id)? else { return Ok(None) };
    if meta.name.as_deref() != Some("plan") || !meta.tags.iter().any(|t| t == "plan") {
        return Ok(None);
    }
    match engine.inner().transcripts.get(&stored_ref(run_id))? {
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::internal(format!("the planning record of run {run_id} is unreadable: {e}"))),
        // A planning run from before the record was kept: its goal is its argument.
        None => {
            let args = engine.inner().transcripts.get(&format!("{run_id}/args.json"))?;
            let goal = args
                .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
                .and_then(|args| args["goal"].as_str().map(str::to_owned))
                .unwrap_or_default();
            Ok(Some(StoredPlanning { goal, options: None }))
        }
    }
}

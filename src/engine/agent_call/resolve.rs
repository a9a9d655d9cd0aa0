//! What an agent call resolves before it is keyed: its declared fallbacks and its tools.

use std::collections::HashMap;
use std::sync::Arc;

use crate::agent;
use crate::error::Error;
use crate::model::ModelRef;

/// The fallbacks of a call: its profile's, else the engine's for the requested model; a
/// fallback whose provider is not registered is skipped, and so is an unpriced one when
/// `priced_only` (a finite ceiling that does not allow unpriced models).
pub(super) fn declared_fallbacks(
    engine: &crate::engine::EngineInner,
    profile: Option<&crate::engine::AgentProfile>,
    model: &ModelRef,
    priced_only: bool,
) -> Vec<agent::Fallback> {
    let declared = match profile.map(|p| &p.fallbacks).filter(|f| !f.is_empty()) {
        Some(list) => list.clone(),
        None => engine.fallbacks.get(model).cloned().unwrap_or_default(),
    };
    declared
        .into_iter()
        .filter_map(|fallback| {
            let provider = engine.providers.get(fallback.provider())?.clone();
            let price = engine.prices.price(&fallback.to_string()).copied();
            if price.is_none() && priced_only {
                // Its spend could not be bounded: no grant, no cut. The primary's error ends
                // the call instead, as admission refuses an unpriced model (`unpriced_model`).
                tracing::warn!(%fallback, "not failing over to an unpriced model under a ceiling");
                return None;
            }
            Some(agent::Fallback {
                provider,
                served_by: fallback.to_string(),
                model: fallback.model().to_owned(),
                price,
            })
        })
        .collect()
}

/// The tools of the named toolsets (an MCP server's listed on first use), refusing unknown
/// toolsets and duplicate tool names.
pub(super) async fn resolve_tools(
    toolsets: &HashMap<String, crate::agent::Toolset>,
    names: &[String],
) -> Result<Vec<Arc<dyn crate::agent::Tool>>, Error> {
    let mut tools: Vec<Arc<dyn crate::agent::Tool>> = Vec::new();
    for name in names {
        let Some(toolset) = toolsets.get(name) else {
            let mut known: Vec<&str> = toolsets.keys().map(String::as_str).collect();
            known.sort();
            return Err(Error::config(format!(
                "unknown toolset {name:?} (registered: {})",
                known.join(", ")
            )));
        };
        for tool in toolset.resolve().await? {
            if tools.iter().any(|t| t.name() == tool.name()) {
                return Err(Error::config(format!("tool {:?} is offered by two toolsets", tool.name())));
            }
            tools.push(tool);
        }
    }
    Ok(tools)
}

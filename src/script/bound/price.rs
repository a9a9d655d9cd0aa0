//! Pricing a script's call bound: the worst case of each agent site, the way admission
//! reserves for it (`engine/admit.rs`, `agent/cost.rs`), added up along the paths a run can
//! take ([`super::CallPaths`]: calls in sequence add, a branch costs its dearer arm).
//!
//! # The worst case of one call
//!
//! - **Model**: the call's `model` option, else its profile's model, else the engine's route for
//!   the call's `role` (default `loop`), else the engine's default model. A call whose model may
//!   fail over is priced at the dearest of its model and its declared fallbacks.
//! - **Turns**: `max_turns` (option, else profile, else 32) when the call has tools (option,
//!   else profile), else 1; plus the two structured-output re-prompts when it has a `schema`.
//! - **Output per turn**: `max_output_tokens` (option, else profile, else the model's price-table
//!   cap, else 8192), at the output price.
//! - **Input per turn** (the rule; input is not known statically): the first turn of a call
//!   whose prompt (and system text) is a literal (or built only from literals and `args`) is
//!   the engine's estimator
//!   (`provider::estimate_request_tokens`: system, prompt, tool definitions, schema, plus 32
//!   tokens for the instruction that shows a schema to a model without native support) over
//!   that request; a computed prompt's first turn is the call's context bound,
//!   `max_context_tokens` (option, else profile, else 200,000). A tool turn after the first is
//!   priced at the context bound (tool results grow the conversation up to it). A re-prompt
//!   after a schema mismatch carries the previous request, the invalid reply and a correction:
//!   each adds twice the output cap, the schema and 256 tokens to the input before it.
//!   The estimator counts about four characters a token, so for text that tokenizes densely
//!   the real input can exceed it; and a computed prompt longer than the context bound is
//!   sent whole. Transport retries of a failed attempt are not counted.
//! - An `est_cost` raises the call's worst case to it (admission reserves at least that).
//! - The engine's lifetime cap on agent spawns (`max_spawns`) is not applied: the bound is the
//!   script's own.
//! - **Unpriced models**: unless the price table allows unpriced models, the cost is unbounded
//!   (the reason names the model); when allowed, the call is priced at the flat reserve
//!   admission holds for it ($0.50, or `est_cost` when larger).

use serde_json::Value;

use super::{AgentSite, CallBound, CallPaths, CostBound, Known};
use crate::engine::{Engine, EngineInner, ScriptDialect};
use crate::model::{InvocationRole, ModelRef, Price};
use crate::money::Money;
use crate::usage::Usage;

/// Re-prompts after a structured-output validation failure (the agent loop's limit).
const SCHEMA_REPROMPTS: u64 = 2;

/// The turns of an agent call without a `max_turns` anywhere (the engine's default).
const DEFAULT_MAX_TURNS: u32 = 32;

/// The most turns `max_turns` accepts: the bound of a computed `max_turns`.
const MAX_TURNS_CEILING: u32 = 256;

/// Tokens of the instruction that shows a schema to a model without native structured output.
const SCHEMA_INSTRUCTION_TOKENS: u64 = 32;

/// Tokens a schema re-prompt's correction adds beyond the reply and the schema.
const CORRECTION_TOKENS: u64 = 256;

/// The worst-case cost of running `source` with `args` on `engine`: the dialect's call bound,
/// priced per site (see the module docs for the rule).
///
/// `budget`, the run's ceiling, is for the caller's [`CostBound::exceeds`] check; the bound
/// itself does not depend on it.
///
/// ```
/// use cairn::{CostBound, cost_bound};
/// let store = std::sync::Arc::new(cairn::MemoryStore::new());
/// let engine = cairn::Engine::builder(store).build().unwrap();
/// let rhai = engine.dialect("rhai").unwrap();
/// let bound = cost_bound(&engine, rhai.as_ref(), r#"for i in 0..3 { agent("hi") }"#, &serde_json::json!({}), None);
/// assert!(matches!(bound, CostBound::Bounded { max_agent_calls: 3, .. }));
/// ```
pub fn cost_bound(
    engine: &Engine,
    dialect: &dyn ScriptDialect,
    source: &str,
    args: &Value,
    budget: Option<Money>,
) -> CostBound {
    let _ = budget;
    match dialect.call_bound(source, args) {
        CallBound::Unbounded { reason, line, column } => {
            CostBound::Unbounded { reason: format!("{reason} (line {line}, column {column})") }
        }
        CallBound::Bounded { sites, paths } => price_sites(engine.inner(), &sites, &paths),
    }
}

/// Prices every site, and adds the calls up along the paths a run can take.
fn price_sites(engine: &EngineInner, sites: &[AgentSite], paths: &CallPaths) -> CostBound {
    let mut per_call = std::collections::HashMap::new();
    for site in sites {
        if site.max_calls == 0 {
            continue;
        }
        match call_worst_case(engine, site) {
            Ok(cost) => {
                per_call.insert((site.line, site.column), cost);
            }
            Err(reason) => return CostBound::Unbounded { reason },
        }
    }
    CostBound::Bounded {
        max_agent_calls: paths.max_calls(),
        worst_case: paths.worst(&|pos| per_call.get(&pos).copied().unwrap_or(Money::ZERO)),
    }
}

/// The worst case of one call of `site`, or why it has none.
pub(crate) fn call_worst_case(engine: &EngineInner, site: &AgentSite) -> Result<Money, String> {
    let at = format!("the agent call at line {}, column {}", site.line, site.column);
    let computed = |what: &str| format!("{what} of {at} is computed, so its cost has no static bound");
    let profile = match &site.profile {
        Known::Unset => None,
        Known::Literal(name) => match engine.profiles.get(name) {
            Some(profile) => Some(profile),
            None => return Err(format!("{at} names the unregistered profile {name:?}")),
        },
        Known::Computed => return Err(computed("the profile")),
    };
    let role = match &site.role {
        Known::Unset => InvocationRole::Loop,
        Known::Literal(text) => {
            InvocationRole::parse(text).ok_or_else(|| format!("{at} names the unknown role {text:?}"))?
        }
        Known::Computed => return Err(computed("the role")),
    };
    let model = match &site.model {
        Known::Literal(text) => {
            ModelRef::parse(text).map_err(|e| format!("{at} names the invalid model {text:?}: {e}"))?
        }
        Known::Computed => return Err(computed("the model")),
        Known::Unset => profile
            .and_then(|p| p.model.clone())
            .or_else(|| engine.defaults.get(&role).cloned())
            .unwrap_or_else(|| engine.default_model.clone()),
    };
    let toolset_names = match &site.tools {
        Known::Literal(names) if !names.is_empty() => Some(names.clone()),
        Known::Computed => None,
        _ => Some(profile.map(|p| p.tools.clone()).unwrap_or_default()),
    };
    // A computed tool list may name any toolset: counted as a tool-using call whose tool
    // definitions are not known (so its input is priced at the context bound).
    let tools: Option<Vec<_>> = match &toolset_names {
        Some(names) => {
            let mut tools = Vec::new();
            // An MCP server not listed yet has tools whose definitions are not known either.
            let mut unknown = false;
            for name in names {
                match engine.toolsets.get(name) {
                    Some(toolset) => {
                        let (listed, unlisted) = toolset.listed();
                        tools.extend(listed);
                        unknown |= !unlisted.is_empty();
                    }
                    None => return Err(format!("{at} names the unregistered toolset {name:?}")),
                }
            }
            (!unknown).then_some(tools)
        }
        None => None,
    };
    let has_tools = tools.as_ref().is_none_or(|tools| !tools.is_empty());
    let max_turns = match site.max_turns {
        Known::Literal(n) => n,
        Known::Computed => MAX_TURNS_CEILING,
        Known::Unset => profile.and_then(|p| p.max_turns).unwrap_or(DEFAULT_MAX_TURNS),
    };
    let max_output_tokens = match site.max_output_tokens {
        Known::Literal(n) => Some(n),
        Known::Computed => return Err(computed("max_output_tokens")),
        Known::Unset => profile.and_then(|p| p.max_output_tokens),
    };
    let context_bound = match site.max_context_tokens {
        Known::Literal(n) => n,
        Known::Computed => return Err(computed("max_context_tokens")),
        Known::Unset => {
            profile.and_then(|p| p.max_context_tokens).unwrap_or(crate::agent::DEFAULT_MAX_CONTEXT_TOKENS)
        }
    };
    let system = match &site.system {
        Known::Literal(text) => Some(Some(text.clone())),
        Known::Computed => None,
        Known::Unset => Some(profile.and_then(|p| p.system.clone())),
    };
    let schema = match &site.schema {
        Known::Literal(schema) => Some(Some(schema.clone())),
        Known::Computed => None,
        Known::Unset => Some(None),
    };
    let has_schema = site.schema.is_set();
    let est_cost = site.est_cost.literal().copied().or_else(|| profile.and_then(|p| p.est_cost));
    // The request the first turn sends, when everything in it is literal.
    let request = match (&site.prompt, system, schema, &tools) {
        (Known::Literal(prompt), Some(system), Some(schema), Some(_)) => {
            let mut request = crate::provider::ChatRequest::new(
                model.model(),
                vec![crate::provider::Message::user(prompt.clone())],
            );
            request.system = system;
            request.response_schema = schema;
            request.max_output_tokens = max_output_tokens;
            Some(request)
        }
        _ => None,
    };
    let shape = CallShape {
        request,
        tools: tools.unwrap_or_default(),
        has_tools,
        max_turns,
        max_output_tokens,
        context_bound,
        reprompts: if has_schema { SCHEMA_REPROMPTS } else { 0 },
        schema_tokens: site
            .schema
            .literal()
            .map_or(0, |schema| crate::provider::estimate_text_tokens(&schema.to_string())),
    };
    let model_name = model.to_string();
    let fallbacks = match profile.map(|p| &p.fallbacks).filter(|f| !f.is_empty()) {
        Some(list) => list.clone(),
        None => engine.fallbacks.get(&model).cloned().unwrap_or_default(),
    };
    let mut worst = Money::ZERO;
    for name in std::iter::once(model_name).chain(fallbacks.iter().map(ModelRef::to_string)) {
        let cost = match engine.prices.price(&name) {
            Some(price) => shape.cost(price),
            None if engine.prices.unpriced_allowed() => {
                Money::from_nano_usd(crate::engine::FLAT_UNPRICED_RESERVE_NANO_USD)
            }
            None => {
                return Err(format!(
                    "model {name} of {at} has no price, so its cost has no bound: add its price, or allow unpriced models"
                ));
            }
        };
        worst = worst.max(cost);
    }
    Ok(match est_cost {
        Some(est) => worst.max(est),
        None => worst,
    })
}

/// What one call sends, turn by turn, as far as the bound needs it.
struct CallShape {
    /// The first turn's request, when all of it is literal.
    request: Option<crate::provider::ChatRequest>,
    tools: Vec<std::sync::Arc<dyn crate::agent::Tool>>,
    has_tools: bool,
    max_turns: u32,
    max_output_tokens: Option<u32>,
    context_bound: u64,
    reprompts: u64,
    schema_tokens: u64,
}

impl CallShape {
    /// The worst case of the whole call at `price`.
    fn cost(&self, price: &Price) -> Money {
        let (first_input, cap) = match &self.request {
            Some(request) => {
                let worst = crate::agent::cost::WorstCase::of(request, &self.tools, price);
                (worst.input_tokens, worst.output_tokens)
            }
            None => (
                self.context_bound,
                self.max_output_tokens
                    .or(price.max_output_tokens)
                    .unwrap_or(crate::agent::cost::DEFAULT_MAX_OUTPUT_TOKENS),
            ),
        };
        let cap = u64::from(cap);
        let turn =
            |input: u64| price.cost(&Usage { input_tokens: input, output_tokens: cap, ..Usage::default() });
        // A model without native structured output reads the schema from its system prompt,
        // with an instruction the estimate above does not count.
        let first_input =
            if self.reprompts > 0 { first_input + SCHEMA_INSTRUCTION_TOKENS } else { first_input };
        let mut total = turn(first_input);
        let mut input = first_input;
        if self.has_tools {
            let later = self.context_bound.max(first_input);
            total = total.saturating_add(turn(later).times(u64::from(self.max_turns.saturating_sub(1))));
            input = later;
        }
        for _ in 0..self.reprompts {
            input = input
                .saturating_add(cap.saturating_mul(2))
                .saturating_add(self.schema_tokens + CORRECTION_TOKENS);
            total = total.saturating_add(turn(input));
        }
        total
    }
}

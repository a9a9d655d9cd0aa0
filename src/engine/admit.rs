//! Admission's reserve: what a model call holds on its account before it is dispatched.
//!
//! A priced call reserves the worst case of its first turn (its request's input tokens plus
//! its output cap at the output price); an `est_cost` may raise that, never lower it. Under a
//! finite ceiling an unpriced model is refused (`unpriced_model`) unless the price table
//! allows unpriced models, which then reserve a flat [`FLAT_UNPRICED_RESERVE_NANO_USD`].

use std::sync::Arc;

use crate::agent::Tool;
use crate::agent::cost::WorstCase;
use crate::error::{Error, ErrorCode};
use crate::model::Price;
use crate::money::Money;
use crate::provider::ChatRequest;

/// The flat reserve of an unpriced model that the configuration allows: $0.50.
pub(crate) const FLAT_UNPRICED_RESERVE_NANO_USD: i64 = 500_000_000;

/// A reserve and how it was derived (for refusal messages).
#[derive(Debug, Clone)]
pub(crate) struct Reserve {
    pub(crate) amount: Money,
    pub(crate) derivation: String,
}

/// What the call reserves.
///
/// # Errors
/// `unpriced_model` for an unpriced model under a finite ceiling, unless allowed.
pub(crate) fn reserve_for(
    model: &str,
    price: Option<&Price>,
    request: &ChatRequest,
    tools: &[Arc<dyn Tool>],
    est_cost: Option<Money>,
    bounded: bool,
    allow_unpriced: bool,
) -> Result<Reserve, Error> {
    let (floor, derivation) = match price {
        Some(price) => {
            let worst = WorstCase::of(request, tools, price);
            (worst.cost, format!("its worst turn: {}", worst.describe()))
        }
        None if bounded && !allow_unpriced => {
            return Err(Error::new(
                ErrorCode::UnpricedModel,
                format!(
                    "model {model} has no price, so a budget ceiling cannot bound it: add its price (cairn.toml `prices` of its provider, or a price table), or set `allow_unpriced = true` under [budget] to reserve a flat {} per call",
                    Money::from_nano_usd(FLAT_UNPRICED_RESERVE_NANO_USD)
                ),
            ));
        }
        None => (
            Money::from_nano_usd(FLAT_UNPRICED_RESERVE_NANO_USD),
            "the flat reserve of an unpriced model".to_owned(),
        ),
    };
    Ok(match est_cost {
        Some(est) if est > floor => {
            Reserve { amount: est, derivation: format!("est_cost {est}, above {derivation}") }
        }
        _ => Reserve { amount: floor, derivation },
    })
}

/// Runs an agent call under its wall-clock limit through the call's own cancellation: at
/// the deadline `cancel` fires, the loop stops like a cancelled call (completed turns
/// counted exactly, the turn in flight at its estimate, marked approximate) and the call
/// ends `limit` with `turn_limit`, keeping that usage.
pub(crate) async fn with_deadline(
    timeout: Option<std::time::Duration>,
    cancel: &tokio_util::sync::CancellationToken,
    call: impl std::future::Future<Output = crate::agent::AgentRun>,
) -> crate::agent::AgentRun {
    let Some(limit) = timeout else { return call.await };
    tokio::pin!(call);
    tokio::select! {
        outcome = &mut call => return outcome,
        _ = tokio::time::sleep(limit) => {}
    }
    cancel.cancel();
    let mut outcome = call.await;
    if let crate::agent::AgentEnd::Cancelled(_) = outcome.end {
        outcome.end = crate::agent::AgentEnd::Limit(Error::new(
            ErrorCode::TurnLimit,
            format!("the agent reached its timeout of {} ms", limit.as_millis()),
        ));
    }
    outcome
}

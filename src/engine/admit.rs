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
    pub(crate) derivation: Derivation,
}

/// How a reserve was derived; its text is made only when a refusal shows it (every admitted
/// call used to format it, two `format!`s per agent call).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Derivation {
    floor: Floor,
    /// The call's `est_cost`, when it raised the reserve above the floor.
    est_cost: Option<Money>,
}

#[derive(Debug, Clone, Copy)]
enum Floor {
    WorstTurn(WorstCase),
    FlatUnpriced,
}

impl std::fmt::Display for Derivation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(est) = self.est_cost {
            write!(f, "est_cost {est}, above ")?;
        }
        match &self.floor {
            Floor::WorstTurn(worst) => write!(f, "its worst turn: {}", worst.describe()),
            Floor::FlatUnpriced => f.write_str("the flat reserve of an unpriced model"),
        }
    }
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
    let (amount, floor) = match price {
        Some(price) => {
            let worst = WorstCase::of(request, tools, price);
            (worst.cost, Floor::WorstTurn(worst))
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
        None => (Money::from_nano_usd(FLAT_UNPRICED_RESERVE_NANO_USD), Floor::FlatUnpriced),
    };
    Ok(match est_cost {
        Some(est) if est > amount => {
            Reserve { amount: est, derivation: Derivation { floor, est_cost: Some(est) } }
        }
        _ => Reserve { amount, derivation: Derivation { floor, est_cost: None } },
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Message;

    fn usd(x: f64) -> Money {
        Money::from_usd(x).unwrap()
    }

    /// The derivation is text only when shown, and says what it said when it was made eagerly.
    #[test]
    fn a_reserve_explains_how_it_was_derived() {
        let request = ChatRequest::new("m", vec![Message::user("hello")]);
        let price = Price::flat(usd(0.0), usd(10.0));
        let worst = reserve_for("p:m", Some(&price), &request, &[], None, true, false).unwrap();
        let text = worst.derivation.to_string();
        assert!(text.starts_with("its worst turn: ") && text.contains("output tokens at most = "), "{text}");
        let raised = reserve_for("p:m", Some(&price), &request, &[], Some(usd(5.0)), true, false).unwrap();
        assert_eq!(raised.amount, usd(5.0));
        assert_eq!(raised.derivation.to_string(), format!("est_cost {}, above {text}", usd(5.0)));
        let flat = reserve_for("p:m", None, &request, &[], None, true, true).unwrap();
        assert_eq!(flat.derivation.to_string(), "the flat reserve of an unpriced model");
        assert_eq!(
            reserve_for("p:m", None, &request, &[], None, true, false).unwrap_err().code,
            ErrorCode::UnpricedModel
        );
    }
}

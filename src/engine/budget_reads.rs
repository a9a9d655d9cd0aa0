//! `budget.spent()` and `budget.remaining()`: reads of the account's live state, journaled as
//! facts (`rand` entries keyed `{kind: rand, fn: budget.spent | budget.remaining}` by scope
//! and ordinal), so the value seen the first time is the one every replay sees.

use serde_json::{Value, json};

use super::ctx::Ctx;
use crate::error::Error;
use crate::money::Money;

impl Ctx {
    /// What this context's account has spent (the whole run's, at the root), journaled like
    /// [`Ctx::now`]: the value seen the first time is the one every replay and resume sees,
    /// so whatever is built from it keeps its identity.
    ///
    /// # Errors
    /// As for [`Ctx::now`].
    pub async fn budget_spent(&self) -> Result<Money, Error> {
        let account = self.account;
        let value = self
            .journaled_fact(json!({ "kind": "rand", "fn": "budget.spent" }), move |run| {
                json!(run.budget.spent(account).nano_usd())
            })
            .await?;
        value
            .as_i64()
            .map(Money::from_nano_usd)
            .ok_or_else(|| Error::internal("journaled budget.spent() is not an integer"))
    }

    /// What this context's account has left (`None` when unbounded), journaled like
    /// [`Ctx::budget_spent`].
    ///
    /// # Errors
    /// As for [`Ctx::now`].
    pub async fn budget_remaining(&self) -> Result<Option<Money>, Error> {
        let account = self.account;
        let value = self
            .journaled_fact(json!({ "kind": "rand", "fn": "budget.remaining" }), move |run| {
                json!(run.budget.remaining(account).map(Money::nano_usd))
            })
            .await?;
        match value {
            Value::Null => Ok(None),
            value => value
                .as_i64()
                .map(|n| Some(Money::from_nano_usd(n)))
                .ok_or_else(|| Error::internal("journaled budget.remaining() is not an integer")),
        }
    }
}

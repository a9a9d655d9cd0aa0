//! What a call's checkpointed turns cost, by the model that served them.
//!
//! A checkpoint's usage alone does not say what it cost: a call that failed over was served by
//! models at different prices, and pricing the whole of it at the requested model (all a
//! resume knew) undercounted a cheap primary's expensive fallback, so the resumed budget handed
//! the ceiling out again. A [`Spend`] keeps one record per serving model, its usage and its
//! cost as the ledger priced each attempt, beside the usage in every checkpoint and in the
//! marker of what terminal entries already hold; a resume carries the difference.

use serde::{Deserialize, Serialize};

use crate::money::Money;
use crate::usage::{AttemptEnd, AttemptRecord, Usage};

/// Usage and cost by serving model, one record per model, in the order each first served.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Spend(Vec<AttemptRecord>);

impl Spend {
    /// `usage` at `cost` (`None`: unpriced) served by `model`.
    pub(crate) fn of(model: &str, usage: Usage, cost: Option<Money>) -> Spend {
        let mut spend = Spend::default();
        spend.add(model, usage, cost);
        spend
    }

    /// Adds `usage` at `cost` served by `model`.
    pub(crate) fn add(&mut self, model: &str, usage: Usage, cost: Option<Money>) {
        match self.0.iter_mut().find(|r| r.model == model) {
            Some(record) => {
                record.usage += usage;
                record.cost = record.cost.zip(cost).map(|(a, b)| a.saturating_add(b));
            }
            None => {
                self.0.push(AttemptRecord { model: model.to_owned(), end: AttemptEnd::Settled, usage, cost })
            }
        }
    }

    /// Adds every record of `other`.
    pub(crate) fn merge(&mut self, other: &Spend) {
        for record in &other.0 {
            self.add(&record.model, record.usage, record.cost);
        }
    }

    /// `self` less `other`, model by model, never below zero (what a checkpoint holds that
    /// terminal entries do not).
    pub(crate) fn minus(&self, other: &Spend) -> Spend {
        let mut out = Spend::default();
        for record in &self.0 {
            let (usage, cost) = match other.0.iter().find(|r| r.model == record.model) {
                Some(taken) => (
                    record.usage.minus(&taken.usage),
                    record.cost.map(|c| c.sub_or_zero(taken.cost.unwrap_or(Money::ZERO))),
                ),
                None => (record.usage, record.cost),
            };
            if usage.total_tokens() > 0 {
                out.0.push(AttemptRecord { usage, cost, ..record.clone() });
            }
        }
        out
    }

    /// Whether nothing was spent.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The usage of every model.
    pub(crate) fn usage(&self) -> Usage {
        self.0.iter().fold(Usage::default(), |mut total, r| {
            total += r.usage;
            total
        })
    }

    /// What it cost; `None` when an unpriced model served part of it.
    pub(crate) fn cost(&self) -> Option<Money> {
        self.0.iter().try_fold(Money::ZERO, |total, r| r.cost.map(|c| total.saturating_add(c)))
    }

    /// What its priced models' part cost.
    pub(crate) fn priced(&self) -> Money {
        self.0.iter().filter_map(|r| r.cost).fold(Money::ZERO, Money::saturating_add)
    }

    /// The models that served it, in order.
    pub(crate) fn models(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|r| r.model.as_str())
    }

    /// The records, one per model (as a terminal entry's `attempts`).
    pub(crate) fn into_records(self) -> Vec<AttemptRecord> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usd(x: f64) -> Money {
        Money::from_usd(x).unwrap()
    }

    #[test]
    fn spend_is_kept_by_model_and_taken_back_model_by_model() {
        let turn = |n| Usage { output_tokens: n, ..Usage::default() };
        let mut spend = Spend::of("a:cheap", turn(100), Some(usd(0.0001)));
        spend.add("o:dear", turn(100), Some(usd(0.1)));
        spend.add("o:dear", turn(100), Some(usd(0.1)));
        assert_eq!(spend.usage().output_tokens, 300);
        assert_eq!(spend.cost(), Some(usd(0.2001)));
        // Terminal entries hold the first two turns: the dear model's second turn is left.
        let mut journaled = Spend::of("a:cheap", turn(100), Some(usd(0.0001)));
        journaled.add("o:dear", turn(100), Some(usd(0.1)));
        let left = spend.minus(&journaled);
        assert_eq!(left.models().collect::<Vec<_>>(), ["o:dear"]);
        assert_eq!((left.usage().output_tokens, left.cost()), (100, Some(usd(0.1))));
        spend.add("u:free", turn(1), None);
        assert_eq!(spend.cost(), None, "an unpriced model leaves the spend unpriced");
        let json = serde_json::to_value(&left).unwrap();
        assert_eq!(serde_json::from_value::<Spend>(json).unwrap(), left);
    }
}

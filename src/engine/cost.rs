//! The cost report: a pure fold over a run's journal entries. Replaying a run gives a
//! byte-identical report because nothing but the entries goes in.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::journal::{Entry, Seq};
use crate::money::Money;
use crate::usage::Usage;

/// Cost and usage of one slice of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CostLine {
    /// What it cost (priced usage only); in JSON `cost_nano_usd` and `cost_usd`.
    #[serde(flatten, with = "crate::money::json::cost")]
    pub cost: Money,
    /// Its token usage (priced or not).
    pub usage: Usage,
    /// How many journal entries it sums.
    pub entries: u64,
}

impl CostLine {
    fn add(&mut self, entry: &Entry) {
        self.cost += entry.priced_cost();
        if let Some(usage) = entry.usage {
            self.usage += usage;
        }
        self.entries += 1;
    }
}

/// Usage no price was known for: reported, never counted as free.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnpricedUsage {
    /// The entry that carries it.
    pub seq: Seq,
    /// The model that served it.
    pub model: String,
    /// Its usage.
    pub usage: Usage,
}

/// What a run cost, sliced every way the design asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CostReport {
    /// Everything.
    pub total: CostLine,
    /// By the model that served each call.
    pub by_model: BTreeMap<String, CostLine>,
    /// By phase (`-` outside any phase).
    pub by_phase: BTreeMap<String, CostLine>,
    /// By agent profile (`-` without one).
    pub by_agent_type: BTreeMap<String, CostLine>,
    /// By invocation role.
    pub by_role: BTreeMap<String, CostLine>,
    /// Usage whose model had no price.
    pub unpriced: Vec<UnpricedUsage>,
    /// Whether any usage was estimated.
    pub approximate: bool,
    /// Wire attempts the provider refused before any stream byte: retried, charged nothing.
    #[serde(skip_serializing_if = "is_zero")]
    pub refused_attempts: u64,
    /// Wire attempts sent and never answered (no response status): retried, each charged its
    /// whole grant (input estimate plus output cap), marked approximate.
    #[serde(skip_serializing_if = "is_zero")]
    pub unanswered_attempts: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl CostReport {
    /// Folds the cost-carrying entries of a journal.
    pub fn fold<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> CostReport {
        let mut report = CostReport::default();
        for entry in entries {
            report.add(entry);
        }
        report
    }

    /// Folds one more entry (the next in journal order).
    pub fn add(&mut self, entry: &Entry) {
        let report = self;
        if entry.cost.is_none() && entry.usage.is_none() {
            return;
        }
        let model = entry.served_by.as_deref().or(entry.model.as_deref()).unwrap_or("-");
        report.total.add(entry);
        report.refused_attempts += u64::from(entry.refused_attempts);
        report.unanswered_attempts += u64::from(entry.unanswered_attempts);
        if entry.attempts.is_empty() {
            line(&mut report.by_model, model).add(entry);
        } else {
            // A failed-over call: each attempt under the model that served it.
            for attempt in &entry.attempts {
                let line = line(&mut report.by_model, &attempt.model);
                line.cost += attempt.cost.unwrap_or(Money::ZERO);
                line.usage += attempt.usage;
            }
            line(&mut report.by_model, model).entries += 1;
        }
        for (lines, key) in [
            (&mut report.by_phase, slice(&entry.phase)),
            (&mut report.by_agent_type, slice(&entry.agent_type)),
            (&mut report.by_role, slice(&entry.role)),
        ] {
            line(lines, key).add(entry);
        }
        if let Some(usage) = entry.usage {
            report.approximate |= usage.approximate;
            if entry.cost.is_none() {
                report.unpriced.push(UnpricedUsage { seq: entry.seq, model: model.to_owned(), usage });
            }
        }
    }
}

/// A slice key: the name, or `-` when the entry has none.
fn slice(value: &Option<crate::journal::Name>) -> &str {
    value.as_deref().unwrap_or("-")
}

/// The line for `key`, made on first use (a journal repeats few keys, so a lookup by `&str`
/// first spares an allocation per entry).
fn line<'m>(lines: &'m mut BTreeMap<String, CostLine>, key: &str) -> &'m mut CostLine {
    if !lines.contains_key(key) {
        lines.insert(key.to_owned(), CostLine::default());
    }
    lines.get_mut(key).expect("inserted above")
}

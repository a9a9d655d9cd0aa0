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
    /// What it cost (priced usage only).
    pub cost: Money,
    /// Its token usage (priced or not).
    pub usage: Usage,
    /// How many journal entries it sums.
    pub entries: u64,
}

impl CostLine {
    fn add(&mut self, entry: &Entry) {
        self.cost += entry.cost.unwrap_or(Money::ZERO);
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
}

impl CostReport {
    /// Folds the cost-carrying entries of a journal.
    pub fn fold<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> CostReport {
        let mut report = CostReport::default();
        for entry in entries {
            if entry.cost.is_none() && entry.usage.is_none() {
                continue;
            }
            let model = entry
                .served_by
                .as_deref()
                .or(entry.model.as_deref())
                .map_or_else(|| "-".to_owned(), str::to_owned);
            report.total.add(entry);
            report.by_model.entry(model.clone()).or_default().add(entry);
            let slice = |value: &Option<crate::journal::Name>| value.as_deref().unwrap_or("-").to_owned();
            report.by_phase.entry(slice(&entry.phase)).or_default().add(entry);
            report.by_agent_type.entry(slice(&entry.agent_type)).or_default().add(entry);
            report.by_role.entry(slice(&entry.role)).or_default().add(entry);
            if let Some(usage) = entry.usage {
                report.approximate |= usage.approximate;
                if entry.cost.is_none() {
                    report.unpriced.push(UnpricedUsage { seq: entry.seq, model, usage });
                }
            }
        }
        report
    }
}

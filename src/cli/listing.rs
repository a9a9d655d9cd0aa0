//! `cairn runs`: the run listing as a table for a person (run, status, name, start time, cost,
//! segments) or as JSON, each run with what it spent and, for a run whose status says
//! `running`, whether a driver still holds it: a driver killed without settling the run leaves
//! it `running` with no live lease (`stalled`), which `cairn resume` continues.

use serde_json::{Value, json};

use super::table::{self, Column};
use crate::journal;
use crate::money::Money;
use crate::store::{JournalStore, RunMeta, RunStatus};

/// Whether a `running` run is being driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Driver {
    /// A live lease holds it.
    Live,
    /// No live lease holds it, or its holder's process on this machine is gone.
    Gone,
    /// The store keeps no leases a reader can see.
    Unknown,
}

impl Driver {
    fn as_str(self) -> Option<&'static str> {
        match self {
            Driver::Live => Some("live"),
            Driver::Gone => Some("gone"),
            Driver::Unknown => None,
        }
    }
}

/// One listed run with what the listing adds to its meta.
pub(super) struct Listed {
    pub(super) meta: RunMeta,
    pub(super) spent: Option<Money>,
    pub(super) driver: Option<Driver>,
}

/// Reads what the listing shows beside each run's meta: its spend (a fold of its journal) and,
/// for a `running` run, its driver.
pub(super) fn listed(journal: &dyn JournalStore, runs: Vec<RunMeta>) -> Vec<Listed> {
    runs.into_iter()
        .map(|meta| {
            // The journal folded page by page: a long run's entries are never held whole.
            let mut ledger = journal::Ledger::default();
            let read = journal::entries(journal, &meta.run_id, 0).try_for_each(|entry| {
                ledger.add(&entry?);
                Ok::<(), crate::Error>(())
            });
            let spent = read.is_ok().then_some(ledger.spent);
            let driver = (meta.status == RunStatus::Running).then(|| driver_of(journal, &meta));
            Listed { meta, spent, driver }
        })
        .collect()
}

fn driver_of(journal: &dyn JournalStore, meta: &RunMeta) -> Driver {
    match journal.lease_holder(&meta.run_id) {
        Ok(Some(Some(holder))) if crate::engine::driver_is_dead(&holder.owner) => Driver::Gone,
        Ok(Some(Some(_))) => Driver::Live,
        Ok(Some(None)) => Driver::Gone,
        Ok(None) | Err(_) => Driver::Unknown,
    }
}

/// One listed run as JSON: its meta (money with its unit), its spend as `cost_nano_usd` and
/// `cost_usd`, and for a `running` run `driver`: `live` or `gone`.
pub(super) fn json_of(run: &Listed) -> Value {
    let mut value = run.meta.to_output_json();
    if let Some(spent) = run.spent {
        value["cost_nano_usd"] = json!(spent.nano_usd());
        value["cost_usd"] = json!(spent.as_usd());
    }
    if let Some(driver) = run.driver.and_then(Driver::as_str) {
        value["driver"] = json!(driver);
    }
    value
}

/// The listing as a table printed page by page: the columns are sized by the first page (a
/// longer cell later is cut to its column), the header printed once, then each run as a
/// line; a note follows when a run is stalled.
pub(super) struct TablePrinter {
    columns: [Column; 6],
    stalled: usize,
}

impl TablePrinter {
    /// Sizes the columns by `first` (the first page) and prints the header.
    pub(super) fn new(first: &[Listed], out: &mut impl FnMut(String)) -> TablePrinter {
        let width = |header: &str, cells: &mut dyn Iterator<Item = usize>, cap: usize| {
            cells.fold(header.len(), usize::max).min(cap)
        };
        let shown = |text: &str| crate::text::for_terminal_line(text).chars().count();
        let run_width = width("RUN", &mut first.iter().map(|r| shown(r.meta.run_id.as_str())), 128);
        let name_width =
            width("NAME", &mut first.iter().map(|r| shown(r.meta.name.as_deref().unwrap_or("-"))), 24);
        let columns = [
            Column::left("RUN", run_width),
            Column::left("STATUS", 9),
            Column::left("NAME", name_width),
            Column::left("STARTED (UTC)", 19),
            Column::right("COST", 12),
            Column::right("SEGMENTS", 8),
        ];
        out(table::header(&columns));
        TablePrinter { columns, stalled: 0 }
    }

    /// Prints one run.
    pub(super) fn row(&mut self, run: &Listed, out: &mut impl FnMut(String)) {
        let status = match run.driver {
            Some(Driver::Gone) => {
                self.stalled += 1;
                "stalled"
            }
            _ => run.meta.status.as_str(),
        };
        out(table::row(
            &self.columns,
            &[
                run.meta.run_id.as_str().to_owned(),
                status.to_owned(),
                run.meta.name.clone().unwrap_or_else(|| "-".into()),
                table::utc(run.meta.created_at_ms),
                table::money(run.spent),
                run.meta.segments.to_string(),
            ],
        ));
    }

    /// Prints the note on stalled runs, if any.
    pub(super) fn finish(self, out: &mut impl FnMut(String)) {
        let stalled = self.stalled;
        if stalled > 0 {
            out(format!(
                "stalled: the run's driver is gone (killed before the run settled; no live lease); \
                 `cairn resume RUN` continues it ({stalled} such run{})",
                if stalled == 1 { "" } else { "s" }
            ));
        }
    }
}

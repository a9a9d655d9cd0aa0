//! `cairn inspect RUN`'s table of calls: one row per dispatched call (agent, tool, step, host
//! call, child workflow, wait) with its seq, kind, label, model, status, tokens, cost and
//! duration. Entries are pushed one at a time in journal order, so a caller can feed it a page
//! at a time: it keeps only the calls still open (dispatched, not yet ended), prints a call's
//! row when its terminal entry (or a wait's resolution) arrives, and the calls left open at
//! the end, in seq order.

use std::collections::BTreeMap;

use super::table::{self, Column};
use crate::journal::{Entry, Kind, Seq, Status};

const COLUMNS: [Column; 8] = [
    Column::right("SEQ", 6),
    Column::left("KIND", 8),
    Column::left("LABEL", 24),
    Column::left("MODEL", 24),
    Column::left("STATUS", 10),
    Column::right("TOKENS", 8),
    Column::right("COST", 12),
    Column::right("TIME", 9),
];

/// A dispatched call waiting for its end.
struct Open {
    kind: Kind,
    label: String,
    model: String,
    ts: Option<i64>,
}

/// The call table, fed entry by entry; rows go to `out` as they complete.
pub(super) struct CallTable<F: FnMut(String)> {
    out: F,
    open: BTreeMap<Seq, Open>,
    rows: usize,
}

impl<F: FnMut(String)> CallTable<F> {
    /// A table that writes its header, then each row, through `out`.
    pub(super) fn new(mut out: F) -> CallTable<F> {
        out(table::header(&COLUMNS));
        CallTable { out, open: BTreeMap::new(), rows: 0 }
    }

    /// Takes the next entry of the journal.
    pub(super) fn push(&mut self, entry: &Entry) {
        match (entry.kind, entry.status, entry.target) {
            (Kind::Agent | Kind::Step | Kind::Call | Kind::Child | Kind::Tool, Status::Running, _) => {
                self.open.insert(entry.seq, Open::of(entry));
            }
            (kind, status, Some(target)) if kind.is_two_phase() && status.is_terminal() => {
                if let Some(open) = self.open.remove(&target) {
                    self.print(target, &open, status.as_str(), Some(entry));
                }
            }
            (Kind::External, Status::Suspended, _) => {
                self.open.insert(entry.seq, Open::of(entry));
            }
            (Kind::Resolution, _, Some(target)) => {
                // The first resolution closes the wait; later ones were not applied.
                if let Some(open) = self.open.remove(&target) {
                    self.print(target, &open, "resolved", Some(entry));
                }
            }
            _ => {}
        }
    }

    /// Prints the calls still open, in seq order; returns how many rows the table has.
    pub(super) fn finish(mut self) -> usize {
        for (seq, open) in std::mem::take(&mut self.open) {
            let status = if open.kind == Kind::External { "waiting" } else { "running" };
            self.print(seq, &open, status, None);
        }
        self.rows
    }

    fn print(&mut self, seq: Seq, open: &Open, status: &str, end: Option<&Entry>) {
        let tokens =
            end.and_then(|e| e.usage).map_or_else(|| "-".to_owned(), |u| u.total_tokens().to_string());
        let cost = table::money(end.and_then(|e| e.cost));
        let took = match (open.ts, end.and_then(|e| e.ts)) {
            (Some(start), Some(stop)) => Some(stop - start),
            _ => None,
        };
        // The model that served an agent call (after any failover), else the one it asked for.
        let model = end.and_then(|e| e.served_by.as_deref()).unwrap_or(&open.model);
        let cells = [
            seq.0.to_string(),
            open.kind.as_str().to_owned(),
            open.label.clone(),
            model.to_owned(),
            status.to_owned(),
            tokens,
            cost,
            table::duration(took),
        ];
        (self.out)(table::row(&COLUMNS, &cells));
        self.rows += 1;
    }
}

impl Open {
    fn of(entry: &Entry) -> Open {
        // A tool call's entry names the tool and labels itself with the call id; a host call,
        // child workflow or wait is named; a step or agent call carries the script's label.
        let label = match entry.kind {
            Kind::Tool | Kind::Call | Kind::Child | Kind::External => {
                entry.name.clone().or(entry.label.clone())
            }
            _ => entry.label.clone(),
        };
        Open {
            kind: entry.kind,
            label: label.unwrap_or_else(|| "-".to_owned()),
            model: entry.model.as_deref().unwrap_or("-").to_owned(),
            ts: entry.ts,
        }
    }
}

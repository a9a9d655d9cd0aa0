//! `GET /metrics`: Prometheus text of the store's runs by status, their calls and spend, the
//! queue's depth and its lease takeovers.

use std::fmt::Write as _;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::{AppState, blocking};
use crate::store::{RunFilter, RunStatus};

const STATUSES: [RunStatus; 7] = [
    RunStatus::Queued,
    RunStatus::Running,
    RunStatus::Suspended,
    RunStatus::Ok,
    RunStatus::Error,
    RunStatus::Cancelled,
    RunStatus::Exhausted,
];

/// `GET /metrics`.
pub(super) async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let text = blocking(&state, |engine| {
        let store = engine.journal_store();
        // The store's own counters when it keeps them (one short read, however many runs it
        // holds); a fold over every journal otherwise.
        let (runs_by_status, calls, spend) = match store.counters()? {
            Some(counters) => {
                let runs = STATUSES.map(|status| counters.runs_in(status));
                (runs, counters.appended.calls, counters.appended.spend.as_usd())
            }
            None => {
                let runs = store.list_runs(&RunFilter::default())?;
                let by_status = STATUSES.map(|status| runs.iter().filter(|m| m.status == status).count() as u64);
                let (mut calls, mut spend) = (0u64, 0f64);
                for meta in &runs {
                    let mut cost = crate::engine::CostReport::default();
                    for entry in crate::journal::entries(store.as_ref(), &meta.run_id, 0) {
                        cost.add(&entry.map_err(ApiError::from)?);
                    }
                    calls += cost.total.entries;
                    spend += cost.total.cost.as_usd();
                }
                (by_status, calls, spend)
            }
        };
        let mut out = String::new();
        let _ = writeln!(out, "# HELP cairn_runs Runs in the store, by status.\n# TYPE cairn_runs gauge");
        for (status, n) in STATUSES.iter().zip(runs_by_status) {
            let _ = writeln!(out, "cairn_runs{{status=\"{}\"}} {n}", status.as_str());
        }
        let _ = writeln!(out, "# HELP cairn_calls_total Model calls journaled.\n# TYPE cairn_calls_total counter");
        let _ = writeln!(out, "cairn_calls_total {calls}");
        let _ = writeln!(out, "# HELP cairn_spend_usd_total Spend journaled, in USD.\n# TYPE cairn_spend_usd_total counter");
        let _ = writeln!(out, "cairn_spend_usd_total {spend}");
        if let Some(queue) = store.queue() {
            let _ = writeln!(out, "# HELP cairn_queue_depth Runs waiting in the queue.\n# TYPE cairn_queue_depth gauge");
            let _ = writeln!(out, "cairn_queue_depth {}", queue.depth()?);
            let _ = writeln!(
                out,
                "# HELP cairn_queue_delayed Queued runs deferred to a later time: parked runs waiting for a deadline.\n# TYPE cairn_queue_delayed gauge"
            );
            let _ = writeln!(out, "cairn_queue_delayed {}", queue.delayed()?);
            let _ = writeln!(
                out,
                "# HELP cairn_lease_takeovers_total Claims taken over from a stalled worker.\n# TYPE cairn_lease_takeovers_total counter"
            );
            let _ = writeln!(out, "cairn_lease_takeovers_total {}", queue.takeovers()?);
            let retried = queue.retried()?;
            let _ = writeln!(
                out,
                "# HELP cairn_queue_retried_runs Queued runs claimed more than once (a failed or lapsed claim).\n# TYPE cairn_queue_retried_runs gauge"
            );
            let _ = writeln!(out, "cairn_queue_retried_runs {}", retried.len());
            let _ = writeln!(
                out,
                "# HELP cairn_queue_run_attempts Claims of each retried queued run; past the workers' max_attempts a run no worker can drive is settled error.\n# TYPE cairn_queue_run_attempts gauge"
            );
            for (run, attempts) in retried {
                let _ = writeln!(out, "cairn_queue_run_attempts{{run_id=\"{run}\"}} {attempts}");
            }
        }
        Ok(out)
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

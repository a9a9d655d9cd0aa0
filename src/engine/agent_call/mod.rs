//! The agent call: one `agent` of a workflow, from its identity to its terminal entry.
//!
//! Its life is a small state machine (`life.rs`): *admitted* (a reservation held by
//! admission), then *attempt n* for every wire attempt (each through the call's money ledger,
//! `agent::ledger`: reserved by the turn guard, observed as it streams, settled or abandoned),
//! *turn checkpointed* at each turn boundary (the checkpoint holds the completed turns' usage,
//! so a resume counts them spent), and *settled* (the terminal entry durable, the reservation
//! settled less what a resume already counted). This file walks that life, one room per step:
//! `prepare.rs` (resolve and key the call, its first request), `journaled.rs` (serve it from
//! the journal when it can), `admission.rs` (the spawn cap and the reserve, in branch order),
//! `live.rs` (slots, the `running` entry, the checkpoint it continues from, the loop),
//! `settle.rs` (carried usage, the terminal entry, the settlement, the result). Beside them:
//! `hooks.rs` (the engine side of the loop), `record.rs` (what its entries say), `resolve.rs`
//! (fallbacks and tools).

mod admission;
mod hooks;
mod journaled;
mod life;
mod live;
mod prepare;
mod record;
mod resolve;
mod settle;

use std::ops::ControlFlow;
use std::sync::Arc;

use serde_json::Value;

use self::journaled::Served;
use self::live::LoopInput;
use self::prepare::Resolved;
use self::record::approvals_segment;
use super::ctx::Ctx;
use super::events::EventKind;
use super::options::AgentOptions;
use crate::error::{Error, ErrorCode};
use crate::journal::{self, Outcome};

impl Ctx {
    /// Runs an agent: model turns through the resolved provider, under admission, the turn
    /// guard and the stream cut.
    ///
    /// # Replay
    /// Keyed on `{profile, model + effort, prompt or key, schema hash, toolset hash}` in this
    /// scope. A journaled `ok` replays with zero live calls; see the replay disposition for
    /// failures.
    ///
    /// # Errors
    /// Under the strict policy (or `on_error: Throw`): `config` for an unknown profile, model
    /// or provider; `budget_exhausted` when admission, the guard or the cut stops it;
    /// provider and task failures; `cancelled`. Under the lenient policy failures return
    /// null and are itemized in `dropped`.
    pub async fn agent(&self, prompt: &str, opts: AgentOptions) -> Result<Value, Error> {
        self.agent_with(prompt, opts, &[]).await
    }

    /// [`Ctx::agent`] with tool instances beside the registered toolsets it names (the
    /// orchestrator's base toolset, bound to its roster). Their contracts enter the toolset
    /// hash like any tool's.
    pub(crate) async fn agent_with(
        &self,
        prompt: &str,
        opts: AgentOptions,
        extra_tools: &[Arc<dyn crate::agent::Tool>],
    ) -> Result<Value, Error> {
        self.check_stopped()?;
        // Resolved: profile, model, tools, provider; keyed on them.
        let call = match self.resolve_call(&opts, extra_tools).await {
            Ok(call) => call,
            Err(error) => return self.fail(opts.on_error, "agent", opts.label.clone(), error),
        };
        let key = call.key(prompt, &opts)?;
        let span = self.run.new_span();
        let matched = self.run.lookup(&self.scope, key)?;
        let site = (key, matched.ordinal);
        if matches!(matched.outcome, Outcome::Replay(_) | Outcome::Skip) {
            // The loop will not run: its approval waits are served by the call's result.
            self.run.cover(&self.scope.child(&approvals_segment(key, matched.ordinal)));
        }
        let start_event = || EventKind::AgentStart {
            label: opts.label.clone(),
            agent_type: opts.profile.clone(),
            model: call.model_name.clone(),
            scope: self.scope.to_string(),
        };
        // Served from the journal, or live (superseding an earlier attempt's entry).
        let live_miss = matches!(matched.outcome, Outcome::Live);
        let (supersedes, previous_terminal) =
            match self.serve_journaled(matched.outcome, key, &opts, span, &start_event) {
                Served::Done(result) => return result,
                Served::Live { supersedes, previous_terminal } => (supersedes, previous_terminal),
            };
        let summary = call.summary(prompt, &opts);
        self.check_live(&call, &opts, &summary, live_miss)?;

        // Admitted: the spawn cap, then a reserve on this context's account.
        let request = call.request(prompt, &opts);
        let price = self.run.engine.prices.price(&call.model_name).copied();
        let reservation = match self.admit_call(&call, &opts, &request, price.as_ref(), site, span).await {
            ControlFlow::Continue(reservation) => reservation,
            ControlFlow::Break(result) => return result,
        };
        let Some(slots) = self.take_slots(&call).await else {
            self.release(reservation);
            return Err(self.run.stopped_error());
        };
        let mut opened = match self.open_running(&call, &opts, site, supersedes, previous_terminal, summary) {
            Ok(opened) => opened,
            Err(e) => {
                self.release(reservation);
                return Err(e);
            }
        };
        self.run.emit(self.span_pair(span), false, start_event);

        // Attempts and turn checkpoints, in the loop; then settled.
        let input = LoopInput { request, price, slots };
        let ran = self.run_loop(call, &opts, input, &reservation, &mut opened, span).await;
        self.settle_call(&opts, prompt, reservation, opened, ran, span).await
    }

    /// Before a live call: on a journal miss, whether it re-keys a journaled call (the
    /// explanation check); a dry run stops at it.
    fn check_live(
        &self,
        call: &Resolved<'_>,
        opts: &AgentOptions,
        summary: &journal::IdentitySummary,
        live_miss: bool,
    ) -> Result<(), Error> {
        let rekeyed = if live_miss {
            let live = super::explain::LiveAgent {
                model: &call.model_name,
                agent_type: opts.profile.as_deref(),
                summary,
                label: opts.label.as_deref(),
            };
            super::explain::check(&self.run, &self.scope, &live)?
        } else {
            None
        };
        if self.run.dry_run {
            let rekeyed = rekeyed.map(|line| format!("; it re-keys {line}")).unwrap_or_default();
            let error = Error::new(
                ErrorCode::JournalMiss,
                format!("dry run reached a live agent call in scope '{}'{rekeyed}", self.scope),
            );
            return Err(error);
        }
        Ok(())
    }
}

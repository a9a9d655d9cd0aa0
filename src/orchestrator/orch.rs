//! One orchestration's shared state: its scope and accounts, its options, the roster behind a
//! lock, and the children it starts and cancels.

use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use super::options::OrchestrateOptions;
use super::roster::{Child, ChildStatus, ChildSummary, State, child_segment};
use super::verdict::Verdict;
use crate::engine::{AccountId, AgentOptions, Ctx, OnError, Reservation};
use crate::error::{Error, ErrorCode};
use crate::money::Money;

/// The smallest non-zero amount, for an admission with no estimate under a ceiling.
pub(super) const MIN_FREE: Money = Money::from_nano_usd(1);

/// One orchestration's shared state.
pub(crate) struct Orch {
    /// The orchestration's scope, on the parent's account (children draw on it).
    pub(crate) ctx: Ctx,
    orchestrator_account: AccountId,
    pub(crate) goal: String,
    pub(crate) opts: OrchestrateOptions,
    pub(crate) profiles: Vec<(String, String)>,
    state: Mutex<State>,
    /// Woken whenever a child settles.
    pub(crate) settled: tokio::sync::Notify,
    finalize: Mutex<Option<Reservation>>,
}

impl std::fmt::Debug for Orch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Orch").field("scope", &self.ctx.scope).finish_non_exhaustive()
    }
}

impl Orch {
    pub(crate) fn new(
        ctx: Ctx,
        goal: &str,
        opts: OrchestrateOptions,
        profiles: Vec<(String, String)>,
    ) -> Arc<Orch> {
        let budget = &ctx.run.budget;
        // The termination account first: held back from everyone until the cap.
        let finalize = budget
            .remaining(ctx.account)
            .map(|free| free.scale_ppm(opts.finalize_share_ppm))
            .filter(|amount| !amount.is_zero())
            .and_then(|amount| budget.reserve(ctx.account, amount).ok());
        let orchestrator_account = budget.open_sub_account(ctx.account, opts.orchestrator_share_ppm, None);
        Arc::new(Orch {
            ctx,
            orchestrator_account,
            goal: goal.to_owned(),
            opts,
            profiles,
            state: Mutex::new(State::default()),
            settled: tokio::sync::Notify::new(),
            finalize: Mutex::new(finalize),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The context the orchestrator's own turns run in: its sub-account.
    pub(crate) fn orchestrator_ctx(&self) -> Ctx {
        let mut ctx = self.ctx.clone();
        ctx.account = self.orchestrator_account;
        ctx
    }

    /// The context of the finalization turn: the parent's account, the reserve released.
    pub(crate) fn finalize_ctx(&self) -> Ctx {
        self.ctx.clone()
    }

    pub(crate) fn release_finalize_reserve(&self) {
        if let Some(reservation) = self.finalize.lock().unwrap_or_else(|p| p.into_inner()).take() {
            self.ctx.run.budget.settle(reservation, Money::ZERO);
        }
    }

    /// Starts child `n`'s agent call in its own scope (`at:child:n`), once.
    pub(crate) fn start(self: &Arc<Self>, n: u32) {
        let mut state = self.lock();
        let Some(child) = state.roster.get_mut(n as usize) else { return };
        if child.started || child.cancel_decided {
            return;
        }
        child.started = true;
        let cancel = self.ctx.cancel.child_token();
        child.cancel = cancel.clone();
        let segment = child_segment(n);
        let mut child_ctx = self.ctx.nested(&segment, cancel, self.ctx.account);
        // An admission holds what it admits (#23.5): the child's estimate (or the least
        // amount) is held on the account now, before the next spawn is judged, and exchanged
        // for the child call's own reservation when it is admitted.
        let engine = &self.ctx.run.engine;
        let need = child
            .est_cost
            .or_else(|| engine.profiles.get(&child.profile).and_then(|p| p.est_cost))
            .unwrap_or(MIN_FREE);
        child_ctx.prepaid = self
            .ctx
            .run
            .budget
            .reserve(self.ctx.account, need)
            .ok()
            .map(|hold| Arc::new(Mutex::new(Some(hold))));
        let unused = child_ctx.prepaid.clone();
        let prompt = child.prompt.clone();
        let opts = AgentOptions {
            label: Some(child.handle.clone()),
            profile: Some(child.profile.clone()),
            schema: child.schema.clone(),
            est_cost: child.est_cost,
            full: true,
            on_error: Some(OnError::Throw),
            ..AgentOptions::default()
        };
        let orch = Arc::clone(self);
        // Boxed: an agent call's future is large, and a task moves its future (and its
        // stage) by value several times between spawn and join.
        let call: futures::future::BoxFuture<'static, Result<Value, Error>> =
            Box::pin(async move { child_ctx.agent(&prompt, opts).await });
        let budget = self.ctx.run.budget.clone();
        let task = tokio::spawn(async move {
            let result = call.await;
            // A child stopped before its call was admitted leaves its hold: released.
            if let Some(hold) = unused.and_then(|h| h.lock().unwrap_or_else(|p| p.into_inner()).take()) {
                budget.settle(hold, Money::ZERO);
            }
            orch.settle(n, result);
        });
        child.task = Some(task);
    }

    /// Records how child `n`'s call ended and wakes every waiter.
    fn settle(&self, n: u32, result: Result<Value, Error>) {
        let line = {
            let mut state = self.lock();
            let Some(child) = state.roster.get_mut(n as usize) else { return };
            match result {
                Ok(record) => {
                    child.status = match record.get("status").and_then(Value::as_str) {
                        Some("ok") => ChildStatus::Ok,
                        Some("limit") => ChildStatus::Limit,
                        Some("cancelled") => ChildStatus::Cancelled,
                        _ => ChildStatus::Error,
                    };
                    child.cost = Money::from_nano_usd(
                        record.get("cost_nano_usd").and_then(Value::as_i64).unwrap_or(0),
                    );
                    if child.status == ChildStatus::Ok {
                        child.output = record.get("value").cloned();
                    } else if let Some(e) = record.get("error") {
                        let code = serde_json::from_value(e["code"].clone()).unwrap_or(ErrorCode::Internal);
                        child.error = Some(Error::new(code, e["message"].as_str().unwrap_or_default()));
                    }
                }
                Err(error) => {
                    child.status = if error.code == ErrorCode::Cancelled {
                        ChildStatus::Cancelled
                    } else {
                        ChildStatus::Error
                    };
                    child.error = Some(error);
                }
            }
            self.roster_observed().then(|| {
                format!(
                    "child {} ({}): {}, ${:.6}",
                    child.handle,
                    child.profile,
                    child.effective_status().as_str(),
                    child.cost.as_usd()
                )
            })
        };
        if let Some(line) = line {
            self.roster_line(&line);
        }
        self.settled.notify_waiters();
    }

    /// A line of the live roster, as a run event (the CLI prints it on stderr).
    pub(crate) fn roster_line(&self, line: &str) {
        self.ctx.log("info", line, None);
    }

    /// Whether anyone reads the roster's lines (else they are not even formatted).
    pub(crate) fn roster_observed(&self) -> bool {
        self.ctx.run.events.observed()
    }

    /// Every child, as the result reports it.
    pub(crate) fn summaries(&self) -> Vec<ChildSummary> {
        self.lock().roster.iter().map(Child::to_summary).collect()
    }

    /// Waits until `done` holds over the state, or the run stops.
    pub(crate) async fn wait_until(&self, mut done: impl FnMut(&State) -> bool) -> Result<(), Error> {
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if done(&self.lock()) {
                return Ok(());
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = self.ctx.cancel.cancelled() => return Err(self.ctx.run.stopped_error()),
            }
        }
    }

    /// Cancels every child still running, each a decision of `lane` before its effect, then
    /// waits for their terminal entries.
    pub(crate) async fn cancel_running(&self, lane: &str) -> Result<(), Error> {
        let running: Vec<u32> =
            self.lock().roster.iter().filter(|c| c.started && !c.settled()).map(|c| c.n).collect();
        for n in running {
            self.decide(lane, n, |_| Verdict::Cancel { child: n })?;
            if let Some(child) = self.lock().roster.get(n as usize) {
                child.cancel.cancel();
            }
        }
        self.join_children().await;
        Ok(())
    }

    /// The exit barrier: no child outlives the orchestration. A stopping run cancels them
    /// itself (and decides nothing); otherwise each straggler's cancellation is a decision.
    pub(crate) async fn exit_barrier(&self) {
        if self.ctx.cancel.is_cancelled() {
            self.join_children().await;
            return;
        }
        if self.cancel_running("exit").await.is_err() {
            for child in self.lock().roster.iter() {
                child.cancel.cancel();
            }
            self.join_children().await;
        }
    }

    async fn join_children(&self) {
        let tasks: Vec<_> = self.lock().roster.iter_mut().filter_map(|c| c.task.take()).collect();
        for task in tasks {
            let _ = task.await;
        }
    }
}

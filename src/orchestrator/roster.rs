//! The roster: the orchestration's children, their handles, their settled outcomes and the
//! digests the orchestrator reads instead of whole outputs.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::OrchestrateOptions;
use super::decisions::{Decision, Verdict};
use crate::engine::{AccountId, AgentOptions, Ctx, OnError, Reservation};
use crate::error::{Error, ErrorCode};
use crate::journal::Segment;
use crate::money::Money;

/// Characters of a child's output a digest carries.
pub(crate) const DIGEST_CHARS: usize = 400;

/// A child's status as the orchestrator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildStatus {
    /// Admitted and not settled.
    Running,
    /// Settled with a value.
    Ok,
    /// Failed.
    Error,
    /// Stopped by a limit (turns, budget).
    Limit,
    /// Cancelled by a decision.
    Cancelled,
}

impl ChildStatus {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ChildStatus::Running => "running",
            ChildStatus::Ok => "ok",
            ChildStatus::Error => "error",
            ChildStatus::Limit => "limit",
            ChildStatus::Cancelled => "cancelled",
        }
    }
}

/// One child as the result and the CLI report it.
#[derive(Debug, Clone, Serialize)]
pub struct ChildSummary {
    /// Its handle (`c0`, `c1`, ...: its admission ordinal).
    pub handle: String,
    /// Its profile.
    pub profile: String,
    /// How it settled.
    pub status: ChildStatus,
    /// What it cost.
    pub cost_usd: f64,
    /// The deterministic 400-character summary of its output (or of its error).
    pub summary: String,
}

/// One admitted child.
#[derive(Debug)]
pub(crate) struct Child {
    pub(crate) n: u32,
    pub(crate) handle: String,
    pub(crate) profile: String,
    pub(crate) prompt: String,
    pub(crate) schema: Option<Value>,
    pub(crate) est_cost: Option<Money>,
    pub(crate) status: ChildStatus,
    pub(crate) cost: Money,
    pub(crate) output: Option<Value>,
    pub(crate) error: Option<Error>,
    pub(crate) cancel_decided: bool,
    pub(crate) started: bool,
    /// Whether a wake digest or an await has shown its settled state.
    pub(crate) reported: bool,
    pub(crate) cancel: CancellationToken,
    pub(crate) task: Option<tokio::task::JoinHandle<()>>,
}

impl Child {
    pub(crate) fn new(
        n: u32,
        profile: String,
        prompt: String,
        schema: Option<Value>,
        est_cost: Option<Money>,
    ) -> Child {
        Child {
            n,
            handle: handle(n),
            profile,
            prompt,
            schema,
            est_cost,
            status: ChildStatus::Running,
            cost: Money::ZERO,
            output: None,
            error: None,
            cancel_decided: false,
            started: false,
            reported: false,
            cancel: CancellationToken::new(),
            task: None,
        }
    }

    /// The status the roster reports: a decided cancellation wins over a racing settle, so a
    /// resume (which never reruns a cancelled child) reports the same.
    pub(crate) fn effective_status(&self) -> ChildStatus {
        if self.cancel_decided { ChildStatus::Cancelled } else { self.status }
    }

    pub(crate) fn settled(&self) -> bool {
        self.effective_status() != ChildStatus::Running
    }

    /// The text of its output: a string as is, anything else as compact JSON.
    pub(crate) fn output_text(&self) -> String {
        match &self.output {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        }
    }

    /// The digest: status, cost, the 400-character summary, the artifact ids.
    pub(crate) fn digest(&self) -> Value {
        let mut digest = json!({
            "handle": self.handle,
            "profile": self.profile,
            "status": self.effective_status().as_str(),
            "cost_usd": self.cost.as_usd(),
            "summary": self.summary(),
            "artifacts": if self.output.is_some() { vec![format!("{}/output", self.handle)] } else { Vec::new() },
        });
        if let Some(error) = &self.error {
            digest["error"] =
                json!({ "code": error.code, "message": truncate(&error.message, DIGEST_CHARS) });
        }
        digest
    }

    pub(crate) fn summary(&self) -> String {
        match (&self.output, &self.error) {
            (Some(_), _) => summarize(&self.output_text(), DIGEST_CHARS),
            (None, Some(error)) => summarize(&format!("{}: {}", error.code, error.message), DIGEST_CHARS),
            (None, None) => String::new(),
        }
    }

    fn to_summary(&self) -> ChildSummary {
        ChildSummary {
            handle: self.handle.clone(),
            profile: self.profile.clone(),
            status: self.effective_status(),
            cost_usd: self.cost.as_usd(),
            summary: self.summary(),
        }
    }
}

/// `c{n}`.
pub(crate) fn handle(n: u32) -> String {
    format!("c{n}")
}

/// Child `n`'s scope segment under the orchestration: `at:child:n`.
pub(crate) fn child_segment(n: u32) -> Segment {
    Segment::Site { label: "child".into(), index: n }
}

/// The child ordinal a handle names.
pub(crate) fn parse_handle(handle: &str) -> Option<u32> {
    handle.strip_prefix('c')?.parse().ok()
}

/// Whitespace collapsed, cut to `max` characters with a trailing ellipsis: the same text for
/// the same output on every run.
pub(crate) fn summarize(text: &str, max: usize) -> String {
    let collapsed: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    truncate(&collapsed, max)
}

pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Counts by status, every status named.
pub(crate) fn status_counts(children: &[ChildSummary]) -> BTreeMap<String, u32> {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for status in [
        ChildStatus::Ok,
        ChildStatus::Error,
        ChildStatus::Limit,
        ChildStatus::Cancelled,
        ChildStatus::Running,
    ] {
        counts.insert(status.as_str().to_owned(), 0);
    }
    for child in children {
        *counts.entry(child.status.as_str().to_owned()).or_insert(0) += 1;
    }
    counts
}

/// What the orchestration knows, folded from its decisions and its children's settles.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) decisions: Vec<Decision>,
    pub(crate) by_call: HashMap<(String, u32), usize>,
    pub(crate) roster: Vec<Child>,
}

impl State {
    pub(crate) fn admitted(&self) -> u32 {
        self.roster.len() as u32
    }

    /// Rejected finishes so far (the repair loop's count).
    pub(crate) fn repairs(&self) -> u32 {
        self.decisions
            .iter()
            .filter(|d| matches!(&d.verdict, Verdict::Finish { verdict, .. } if verdict == "rejected"))
            .count() as u32
    }

    pub(crate) fn child(&self, handle: &str) -> Result<&Child, Error> {
        parse_handle(handle)
            .and_then(|n| self.roster.get(n as usize))
            .ok_or_else(|| Error::validation(format!("there is no child {handle:?}")))
    }
}

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
            .unwrap_or(super::MIN_FREE);
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

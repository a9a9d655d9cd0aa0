//! `Ctx`: the canonical workflow API, a cheap handle on one scope of a run (its scope path,
//! phase, budget account, cancellation and admission ticket). This file holds the handle and
//! its scopes; each verb lives in a room of its own that owns its identity input, its journal
//! records and its replay rules, as an `impl Ctx` block there: `step.rs`, `call.rs`,
//! `child.rs` (`workflow`), `external.rs` (`await_external`), `fanout.rs` (`parallel`,
//! `pipeline`), `budget_reads.rs`, `facts.rs` (`now`, `random`, `uuid`), `phase.rs` (`phase`,
//! `log`), over the shared protocol of `two_phase.rs` and the error policy of `policy.rs`.
//! (The verbs' rooms name `Ctx`; this file names none of them, so the handle sits below its
//! verbs in the import graph.) The agent call is `agent_call/`, beside the money ledger.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::budget::AccountId;
use super::run::RunState;
use crate::error::Error;
use crate::journal::{ContentKey, Entry, Kind, ScopePath, Segment, Seq, Status};
use crate::store::RunId;

/// Structural counters of one scope: which `parallel` site and which child-workflow call
/// comes next. Shared by every clone of a `Ctx` in that scope.
#[derive(Debug, Default)]
pub(crate) struct ScopeCounters {
    parallel_sites: AtomicU32,
    pub(super) children: Mutex<HashMap<String, u32>>,
    /// Uses of each site label in this scope.
    labels: Mutex<HashMap<String, u32>>,
    /// Pipelines begun in this scope (they key their fail-fast decisions; their items'
    /// scopes do not depend on it).
    pipelines: AtomicU32,
}

/// The workflow's view of its run: one scope of it, with its phase, budget account and
/// cancellation. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Ctx {
    pub(crate) run: Arc<RunState>,
    pub(crate) scope: ScopePath,
    pub(super) counters: Arc<ScopeCounters>,
    pub(super) phase: Option<Arc<str>>,
    pub(crate) account: AccountId,
    pub(super) span: u64,
    pub(super) parent_span: Option<u64>,
    pub(crate) cancel: CancellationToken,
    pub(super) depth: u32,
    /// This context's place in its fan-out's admission order (`None` outside fan-outs).
    pub(crate) admission: Option<super::admission::Ticket>,
    /// A hold taken for this context's first agent call when it was admitted (an orchestrator
    /// child), exchanged for the call's own reservation at its admission. Never inherited.
    pub(crate) prepaid: Option<Arc<Mutex<Option<super::budget::Reservation>>>>,
    /// The operation tally of the live step this context runs inside (`None` outside steps,
    /// and in a child workflow, whose script has a budget of its own).
    pub(crate) step_ops: Option<Arc<super::step_ops::StepOps>>,
    /// The script threads this scope may still start (branch threads, child workflows'
    /// script threads), by the run's structural division (`script::run_sandbox::MAX_RUN_THREADS`);
    /// `None`: the run's whole budget.
    pub(crate) threads: Option<usize>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("run_id", &self.run.run_id)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl Ctx {
    pub(crate) fn root(run: Arc<RunState>) -> Ctx {
        let span = run.root_span();
        let account = run.budget.root();
        let cancel = run.cancel.child_token();
        Ctx {
            run,
            scope: ScopePath::root(),
            counters: Arc::default(),
            phase: None,
            account,
            span,
            parent_span: None,
            cancel,
            depth: 0,
            admission: None,
            prepaid: None,
            step_ops: None,
            threads: None,
        }
    }

    /// A context for a nested scope (a branch, a pipeline item, a child workflow).
    pub(crate) fn nested(&self, segment: &Segment, cancel: CancellationToken, account: AccountId) -> Ctx {
        Ctx {
            run: self.run.clone(),
            scope: self.scope.child(segment),
            counters: Arc::default(),
            phase: self.phase.clone(),
            account,
            span: self.run.new_span(),
            parent_span: Some(self.span),
            cancel,
            depth: self.depth,
            admission: self.admission.clone(),
            prepaid: None,
            step_ops: self.step_ops.clone(),
            threads: self.threads,
        }
    }

    /// The next `parallel` site index of this scope.
    pub(crate) fn next_parallel_site(&self) -> u32 {
        self.counters.parallel_sites.fetch_add(1, Ordering::Relaxed)
    }

    /// The next pipeline's index in this scope.
    pub(crate) fn next_pipeline(&self) -> u32 {
        self.counters.pipelines.fetch_add(1, Ordering::Relaxed)
    }

    /// The context a labelled site runs in: scope `at:LABEL:n` (the `n`-th use of the label
    /// here) with fresh counters, so the site's identity depends on its label, not on how
    /// many unlabelled sites came before it. `None` without a label.
    ///
    /// # Errors
    /// `config` for a label with `/` or `:`, empty, or longer than 64 characters.
    pub(crate) fn labelled_site(&self, label: Option<&str>) -> Result<Option<Ctx>, Error> {
        let Some(label) = label else { return Ok(None) };
        if !Segment::valid_label(label) {
            return Err(Error::config(format!(
                "site label {label:?} must be 1 to 64 characters without '/' or ':'"
            )));
        }
        let index = {
            let mut labels = self.counters.labels.lock().unwrap_or_else(|p| p.into_inner());
            let slot = labels.entry(label.to_owned()).or_insert(0);
            let index = *slot;
            *slot += 1;
            index
        };
        let segment = Segment::Site { label: label.to_owned(), index };
        let mut site = self.nested(&segment, self.cancel.clone(), self.account);
        site.span = self.span;
        site.parent_span = self.parent_span;
        Ok(Some(site))
    }

    /// The run's id.
    pub fn run_id(&self) -> &RunId {
        &self.run.run_id
    }

    /// This context's scope path.
    pub fn scope(&self) -> &ScopePath {
        &self.scope
    }

    /// Fails fast when the run was cancelled, suspended or ran past its deadline.
    pub(crate) fn check_stopped(&self) -> Result<(), Error> {
        if self.cancel.is_cancelled() { Err(self.run.stopped_error()) } else { Ok(()) }
    }

    /// A permit from `slots`, or `None` once this context is cancelled. A free slot is
    /// taken at once, without setting up the wait.
    pub(super) async fn slot(
        &self,
        slots: &Arc<tokio::sync::Semaphore>,
    ) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if let Ok(permit) = slots.clone().try_acquire_owned() {
            return Some(permit);
        }
        tokio::select! {
            permit = slots.clone().acquire_owned() => permit.ok(),
            _ = self.cancel.cancelled() => None,
        }
    }

    pub(super) fn span_pair(&self, span: u64) -> (u64, Option<u64>) {
        (span, Some(self.span))
    }

    pub(super) fn entry(&self, kind: Kind, status: Status, key: ContentKey, ordinal: u32) -> Entry {
        let mut entry = Entry::new(Seq(0), kind, status, self.scope.clone(), key, ordinal);
        entry.phase = self.phase.clone();
        entry
    }

    /// A terminal entry for a dispatch, carrying its cosmetic fields.
    pub(super) fn terminal_for(running: &Entry, status: Status) -> Entry {
        let mut entry =
            Entry::new(Seq(0), running.kind, status, running.scope.clone(), running.key, running.ordinal);
        entry.target = Some(running.seq);
        entry.label = running.label.clone();
        entry.phase = running.phase.clone();
        entry.agent_type = running.agent_type.clone();
        entry.role = running.role.clone();
        entry.model = running.model.clone();
        entry.name = running.name.clone();
        entry.memoize_outcome = running.memoize_outcome;
        entry
    }
}

impl Ctx {
    /// This branch gives up its admission turn at once (it waits for external input).
    pub(crate) fn pass_admission_turn_now(&self) {
        if let Some(ticket) = &self.admission {
            ticket.pass();
        }
    }

    /// This branch takes its admission turn for a nested fan-out, whose branches then
    /// reserve in their own order.
    pub(crate) async fn pass_admission_turn(&self) {
        if let Some(ticket) = &self.admission {
            ticket.wait(&self.cancel).await;
            ticket.pass();
        }
    }
}

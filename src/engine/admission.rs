//! Admission in branch order: which calls of a fan-out a budget ceiling admits must not
//! depend on which branch thread got to the budget first.
//!
//! Every fan-out hands its branches a [`Ticket`] of one shared [`Turns`]. A branch's first
//! admission waits until every earlier branch has had its turn: it was admitted or refused
//! once, began a nested fan-out, began waiting for external input, or finished. So the
//! branches of one fan-out reserve in index order, and a ceiling admits the same branches
//! on every run. A refusal is journaled as a `decision` entry, with the refused call's key,
//! before it takes effect: a replay or resume serves the refusal instead of asking again.
//!
//! A branch's first admission is judged against the round: what the account had free when
//! the fan-out's first branch asked, less what the round admitted since. A sibling whose call
//! returns early (releasing its reservation) does not make room for a later sibling's first
//! call, so the round admits the same branches however quickly calls return.
//!
//! What stays timing-dependent (and is journaled, not reproduced): a branch's second and
//! later calls, first calls inside a child workflow (a sub-account), and spend by work outside
//! the fan-out while its round is open.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::budget::{AccountId, Denied, Reservation};
use super::ctx::Ctx;
use super::run::Durability;
use crate::error::{Error, ErrorCode};
use crate::journal::{ContentKey, Kind, Status};
use crate::money::Money;

/// The admission turns of one fan-out's branches.
#[derive(Debug)]
pub(crate) struct Turns {
    state: Mutex<TurnState>,
    /// One per branch: a branch is woken only when its own turn comes. (One shared `Notify`
    /// woke every waiting branch at each pass, each on its own thread in a script fan-out:
    /// quadratic wakeups in the fan-out's width.)
    moved: Box<[Notify]>,
    /// The fan-out's account: the round's arithmetic applies to first admissions on it.
    account: AccountId,
}

#[derive(Debug)]
struct TurnState {
    passed: Vec<bool>,
    /// Every branch below this index has had its turn.
    next: usize,
    /// The admission round: what the account had free when the first branch asked, less
    /// what the round has admitted since (`Some(None)`: unbounded). A sibling that finishes
    /// and releases its reservation mid-round does not make room for a later sibling's
    /// first call, so the round admits the same branches however fast the calls return.
    round: Option<Option<Money>>,
}

impl Turns {
    /// Turns for `branches` branches of a fan-out on `account`, in index order.
    pub(crate) fn new(branches: usize, account: AccountId) -> Arc<Turns> {
        Arc::new(Turns {
            state: Mutex::new(TurnState { passed: vec![false; branches], next: 0, round: None }),
            moved: (0..branches).map(|_| Notify::new()).collect(),
            account,
        })
    }

    /// Branch `index`'s ticket.
    pub(crate) fn ticket(self: &Arc<Turns>, index: usize) -> Ticket {
        Ticket { turns: self.clone(), index }
    }
}

/// One branch's place in its fan-out's admission order.
#[derive(Debug, Clone)]
pub(crate) struct Ticket {
    turns: Arc<Turns>,
    index: usize,
}

impl Ticket {
    /// Waits until every earlier branch has had its turn (or `cancel` fires).
    pub(crate) async fn wait(&self, cancel: &CancellationToken) {
        let Some(notify) = self.turns.moved.get(self.index) else { return };
        loop {
            let moved = notify.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            if self.turns.state.lock().unwrap_or_else(|p| p.into_inner()).next >= self.index {
                return;
            }
            tokio::select! {
                () = &mut moved => {}
                () = cancel.cancelled() => return,
            }
        }
    }

    /// This branch has had its turn; later branches may go. Idempotent.
    pub(crate) fn pass(&self) {
        let mut state = self.turns.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.passed.get(self.index).copied().unwrap_or(true) {
            return;
        }
        state.passed[self.index] = true;
        let before = state.next;
        while state.next < state.passed.len() && state.passed[state.next] {
            state.next += 1;
        }
        // Only the branch at `next` can have become free to go: every branch before it has
        // passed, and every one after it still waits for it. `notify_one` keeps the wakeup
        // for a branch that is not waiting yet.
        let next = state.next;
        drop(state);
        if next != before
            && let Some(notify) = self.turns.moved.get(next)
        {
            notify.notify_one();
        }
    }
}

impl Ctx {
    /// Admission for one agent call: in branch order within its fan-out, then a reserve of
    /// `amount` on this context's account. A refusal is journaled (a `decision` entry with
    /// the call's key and ordinal, so a replay finds it in the call's place) before it takes
    /// effect.
    pub(crate) async fn admit(
        &self,
        amount: Money,
        key: ContentKey,
        ordinal: u32,
    ) -> Result<Reservation, Denied> {
        if let Some(ticket) = &self.admission {
            ticket.wait(&self.cancel).await;
        }
        let verdict = match &self.admission {
            Some(ticket) if ticket.turns.account == self.account => {
                let mut state = ticket.turns.state.lock().unwrap_or_else(|p| p.into_inner());
                if state.passed.get(ticket.index).copied().unwrap_or(true) {
                    drop(state);
                    self.run.budget.reserve(self.account, amount)
                } else {
                    // This branch's first admission: judged against the round.
                    let left = *state.round.get_or_insert_with(|| self.run.budget.remaining(self.account));
                    match left {
                        Some(left) if amount > left => Err(Denied { requested: amount, available: left }),
                        _ => {
                            let verdict = self.run.budget.reserve(self.account, amount);
                            if verdict.is_ok() {
                                state.round = Some(left.map(|l| l.sub_or_zero(amount)));
                            }
                            verdict
                        }
                    }
                }
            }
            _ => self.run.budget.reserve(self.account, amount),
        };
        if let Err(denied) = &verdict {
            let mut entry = crate::journal::Entry::new(
                crate::journal::Seq(0),
                Kind::Decision,
                Status::Error,
                self.scope.clone(),
                key,
                ordinal,
            );
            entry.error = Some(refusal(denied));
            entry.set_value(Some(&serde_json::json!({
                "type": "admission",
                "verdict": "refused",
                "requested_nano_usd": denied.requested.nano_usd(),
                "available_nano_usd": denied.available.nano_usd(),
            })));
            // A write failure latches and fails the run; the refusal stands either way.
            let _ = self.run.append_one(entry, Durability::Deferred);
        }
        if let Some(ticket) = &self.admission {
            ticket.pass();
        }
        verdict
    }

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

/// The error a journaled refusal replays as.
fn refusal(denied: &Denied) -> Error {
    Error::new(
        ErrorCode::BudgetExhausted,
        format!("admission refused: the call reserves {} but {} is left", denied.requested, denied.available),
    )
}

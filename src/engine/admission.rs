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

use super::budget::{AccountId, Budget, Denied, Reservation};
use crate::error::{Error, ErrorCode};
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

impl Ticket {
    /// Reserves `amount` for this branch's call on `account`: a branch's first admission on
    /// its fan-out's own account is judged against the round (what the account had free when
    /// the first branch asked, less what the round admitted since); any other is a plain
    /// reserve.
    pub(crate) fn reserve(
        &self,
        budget: &Budget,
        account: AccountId,
        amount: Money,
    ) -> Result<Reservation, Denied> {
        if self.turns.account != account {
            return budget.reserve(account, amount);
        }
        let mut state = self.turns.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.passed.get(self.index).copied().unwrap_or(true) {
            drop(state);
            return budget.reserve(account, amount);
        }
        let left = *state.round.get_or_insert_with(|| budget.remaining(account));
        match left {
            Some(left) if amount > left => Err(Denied { requested: amount, available: left }),
            _ => {
                let verdict = budget.reserve(account, amount);
                if verdict.is_ok() {
                    state.round = Some(left.map(|l| l.sub_or_zero(amount)));
                }
                verdict
            }
        }
    }
}

/// The error a journaled refusal replays as.
pub(crate) fn refusal(denied: &Denied, derivation: &dyn std::fmt::Display) -> Error {
    Error::new(
        ErrorCode::BudgetExhausted,
        format!(
            "admission refused: the call reserves {} ({derivation}) but {} is left",
            denied.requested, denied.available
        ),
    )
}

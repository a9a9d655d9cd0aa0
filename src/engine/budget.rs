//! The budget: a tree of accounts in integer nano-USD, with reserve-before-spawn admission,
//! a guard before every model turn, and live checks for the stream cut.
//!
//! The root account's ceiling is fixed when the run starts (and restored from run meta on
//! resume); nothing raises it. A child workflow gets a sub-account whose ceiling is a share
//! of the parent's remainder; every reserve and charge on a sub-account is also held on
//! each ancestor, so a child can never spend what its parent does not have. All accounts of
//! a run live under one mutex: each operation is a few additions, and one lock makes every
//! check-and-reserve atomic across the tree.
//!
//! # Live reservations: what siblings see
//! A call admitted by [`Budget::reserve`] holds a reservation until it settles. The
//! reservation has a *hold* (the worst case admission and every later turn guard granted
//! it) and an *in-flight* amount (what the call has consumed so far, updated as its usage
//! streams). Its *exposure* is the larger of the two, and every account on its path carries
//! the sum of its live reservations' exposures as `committed`. So admission, the turn guard
//! and the stream cut of every call compare `settled + committed` with the ceiling: a
//! sibling streaming past its hold is seen by everyone at once, and the call that runs past
//! the ceiling is the one cut.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::money::Money;

/// An account's index in its budget tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct AccountId(usize);

#[derive(Debug)]
struct Account {
    parent: Option<AccountId>,
    /// `None` for an unbounded account.
    ceiling: Option<Money>,
    /// Settled spend.
    spent: Money,
    /// The sum of the exposures of the live reservations on this account or below it.
    committed: Money,
}

/// One live reservation's numbers.
#[derive(Debug, Clone, Copy)]
struct Live {
    account: AccountId,
    /// What admission and the turn guards granted it.
    held: Money,
    /// What the call has consumed so far (settled turns of the call included).
    used: Money,
}

impl Live {
    fn exposure(&self) -> Money {
        self.held.max(self.used)
    }
}

#[derive(Debug)]
struct Tree {
    accounts: Vec<Account>,
    live: HashMap<u64, Live>,
    next_id: u64,
    /// Spend carried into this segment for calls a crashed segment left unsettled (their
    /// checkpointed turns), by checkpoint ref: already in the root's `spent`, taken back
    /// from the call's charge when it settles.
    carried: HashMap<String, Money>,
}

/// The budget tree of one run.
#[derive(Debug)]
pub(crate) struct Budget {
    tree: Mutex<Tree>,
}

/// A held reservation; settled exactly once (by value).
#[derive(Debug)]
pub(crate) struct Reservation {
    id: ReservationId,
}

/// A live reservation's handle, for the turn guard and the stream cut of its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReservationId(u64);

impl Reservation {
    /// The handle the call's guards and cut use.
    pub(crate) fn id(&self) -> ReservationId {
        self.id
    }
}

/// Why a reserve was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Denied {
    /// What was asked for.
    pub(crate) requested: Money,
    /// What the tightest account on the path still had free.
    pub(crate) available: Money,
}

impl Budget {
    /// A budget whose root account has `ceiling` and has already spent `spent` (restored
    /// from the journal's ledger on resume).
    #[cfg(test)]
    pub(crate) fn new(ceiling: Option<Money>, spent: Money) -> Arc<Budget> {
        Budget::resumed(ceiling, spent, Vec::new())
    }

    /// A resumed segment's budget: `spent` from the journal's ledger plus the `carried`
    /// checkpointed turns of calls left unsettled, which are spent from the start (a resume
    /// never hands out again what a crashed segment's turns already paid).
    pub(crate) fn resumed(
        ceiling: Option<Money>,
        spent: Money,
        carried: Vec<(String, Money)>,
    ) -> Arc<Budget> {
        let spent = carried.iter().fold(spent, |total, (_, cost)| total.saturating_add(*cost));
        Arc::new(Budget {
            tree: Mutex::new(Tree {
                accounts: vec![Account { parent: None, ceiling, spent, committed: Money::ZERO }],
                live: HashMap::new(),
                next_id: 0,
                carried: carried.into_iter().collect(),
            }),
        })
    }

    /// Takes the spend carried in for the call whose checkpoint is `checkpoint_ref` (zero when
    /// none): its settle charges only the rest of its cost.
    pub(crate) fn take_carried(&self, checkpoint_ref: &str) -> Money {
        self.lock().carried.remove(checkpoint_ref).unwrap_or(Money::ZERO)
    }

    /// The root account.
    pub(crate) fn root(&self) -> AccountId {
        AccountId(0)
    }

    fn lock(&self) -> MutexGuard<'_, Tree> {
        // A poisoned lock means a panic mid-update of plain integers; the numbers are still
        // the best record we have.
        self.tree.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Opens a sub-account under `parent` whose ceiling is `share_ppm` of the parent's free
    /// amount, capped by `cap` when given.
    pub(crate) fn open_sub_account(
        &self,
        parent: AccountId,
        share_ppm: u32,
        cap: Option<Money>,
    ) -> AccountId {
        let mut tree = self.lock();
        let free = free_on_path(&tree.accounts, parent);
        let ceiling = match (free, cap) {
            (Some(free), Some(cap)) => Some(free.scale_ppm(share_ppm).min(cap)),
            (Some(free), None) => Some(free.scale_ppm(share_ppm)),
            (None, cap) => cap,
        };
        tree.accounts.push(Account {
            parent: Some(parent),
            ceiling,
            spent: Money::ZERO,
            committed: Money::ZERO,
        });
        AccountId(tree.accounts.len() - 1)
    }

    /// Admission: holds `amount` on the account and every ancestor, or refuses without
    /// holding anything. An exact fill is admitted.
    pub(crate) fn reserve(&self, account: AccountId, amount: Money) -> Result<Reservation, Denied> {
        let mut tree = self.lock();
        if let Some(free) = free_on_path(&tree.accounts, account)
            && amount > free
        {
            return Err(Denied { requested: amount, available: free });
        }
        for_each_on_path(&mut tree.accounts, account, |a| a.committed += amount);
        let id = tree.next_id;
        tree.next_id += 1;
        tree.live.insert(id, Live { account, held: amount, used: Money::ZERO });
        Ok(Reservation { id: ReservationId(id) })
    }

    /// Settles a reservation: releases its exposure and charges `cost` on the path.
    pub(crate) fn settle(&self, reservation: Reservation, cost: Money) {
        let mut tree = self.lock();
        let Some(live) = tree.live.remove(&reservation.id.0) else { return };
        let exposure = live.exposure();
        for_each_on_path(&mut tree.accounts, live.account, |a| {
            a.committed = a.committed.sub_or_zero(exposure);
            a.spent += cost;
        });
    }

    /// Replaces a live reservation's numbers, moving the difference of its exposure onto
    /// every account of its path.
    fn update(tree: &mut Tree, id: ReservationId, next: Live) {
        let Some(live) = tree.live.get_mut(&id.0) else { return };
        let before = live.exposure();
        *live = next;
        let after = next.exposure();
        for_each_on_path(&mut tree.accounts, next.account, |a| {
            a.committed = a.committed.sub_or_zero(before) + after;
        });
    }

    /// The stream cut: records that the call has consumed `used` so far (its completed
    /// turns and the live estimate of the one streaming), and says whether settled spend plus
    /// every live exposure on the path now crosses a ceiling. Only a call running past its
    /// own hold can make that true, so the call that crosses is the one cut.
    pub(crate) fn record_in_flight(&self, id: ReservationId, used: Money) -> bool {
        let mut tree = self.lock();
        let Some(live) = tree.live.get(&id.0).copied() else { return false };
        Budget::update(&mut tree, id, Live { used, ..live });
        crosses(&tree.accounts, live.account)
    }

    /// The turn guard: records `used` (what the call consumed so far), then grants the next
    /// turn up to `want` (its worst case), raising the call's hold to `used + granted`. A grant
    /// smaller than `want` is what the ceiling still allows; below `floor` nothing is granted
    /// and the turn must not be dispatched. `Ok(None)` on an unbounded path.
    pub(crate) fn grant_turn(
        &self,
        id: ReservationId,
        used: Money,
        want: Money,
        floor: Money,
    ) -> Result<Option<Money>, Denied> {
        let mut tree = self.lock();
        let Some(live) = tree.live.get(&id.0).copied() else { return Ok(None) };
        let live = Live { used, ..live };
        Budget::update(&mut tree, id, live);
        let Some(free) = free_on_path(&tree.accounts, live.account) else { return Ok(None) };
        // What the turn may spend: the free money plus the part of its own hold not yet used.
        let allowance = free.saturating_add(live.exposure().sub_or_zero(used));
        if allowance < floor {
            return Err(Denied { requested: want, available: allowance });
        }
        let granted = want.min(allowance);
        Budget::update(&mut tree, id, Live { held: live.held.max(used.saturating_add(granted)), ..live });
        Ok(Some(granted))
    }

    /// The turn guard for calls whose cost cannot be priced (they hold a flat reserve): whether
    /// settled spend is still strictly below every ceiling on the path.
    pub(crate) fn can_start_turn(&self, account: AccountId) -> bool {
        let tree = self.lock();
        let mut next = Some(account);
        while let Some(id) = next {
            let a = &tree.accounts[id.0];
            if let Some(ceiling) = a.ceiling
                && a.spent >= ceiling
            {
                return false;
            }
            next = a.parent;
        }
        true
    }

    /// What the account has spent.
    pub(crate) fn spent(&self, account: AccountId) -> Money {
        self.lock().accounts[account.0].spent
    }

    /// What the account (and its ancestors) still leave free; `None` when unbounded.
    pub(crate) fn remaining(&self, account: AccountId) -> Option<Money> {
        free_on_path(&self.lock().accounts, account)
    }

    /// The account's ceiling.
    pub(crate) fn ceiling(&self, account: AccountId) -> Option<Money> {
        self.lock().accounts[account.0].ceiling
    }

    /// Whether any account on the path has a ceiling.
    pub(crate) fn is_bounded(&self, account: AccountId) -> bool {
        free_on_path(&self.lock().accounts, account).is_some()
    }
}

/// The smallest free amount (ceiling − spent − committed) on the path to the root.
fn free_on_path(accounts: &[Account], account: AccountId) -> Option<Money> {
    let mut free: Option<Money> = None;
    let mut next = Some(account);
    while let Some(id) = next {
        let a = &accounts[id.0];
        if let Some(ceiling) = a.ceiling {
            let here = ceiling.sub_or_zero(a.spent + a.committed);
            free = Some(free.map_or(here, |f| f.min(here)));
        }
        next = a.parent;
    }
    free
}

/// Whether settled spend plus live exposure crosses a ceiling on the path.
fn crosses(accounts: &[Account], account: AccountId) -> bool {
    let mut next = Some(account);
    while let Some(id) = next {
        let a = &accounts[id.0];
        if let Some(ceiling) = a.ceiling
            && a.spent.saturating_add(a.committed) > ceiling
        {
            return true;
        }
        next = a.parent;
    }
    false
}

fn for_each_on_path(accounts: &mut [Account], account: AccountId, mut f: impl FnMut(&mut Account)) {
    let mut next = Some(account);
    while let Some(id) = next {
        f(&mut accounts[id.0]);
        next = accounts[id.0].parent;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usd(x: f64) -> Money {
        Money::from_usd(x).unwrap()
    }

    #[test]
    fn exact_fill_is_admitted_and_one_nano_more_is_not() {
        let budget = Budget::new(Some(usd(1.0)), Money::ZERO);
        let root = budget.root();
        let a = budget.reserve(root, usd(0.6)).unwrap();
        let b = budget.reserve(root, usd(0.4)).unwrap();
        assert_eq!(
            budget.reserve(root, Money::from_nano_usd(1)).unwrap_err(),
            Denied { requested: Money::from_nano_usd(1), available: Money::ZERO }
        );
        budget.settle(a, usd(0.1));
        budget.settle(b, usd(0.2));
        assert_eq!(budget.spent(root), usd(0.3));
        assert_eq!(budget.remaining(root), Some(usd(0.7)));
        assert!(budget.can_start_turn(root));
    }

    #[test]
    fn carried_spend_is_spent_from_the_start_and_taken_back_once() {
        let budget = Budget::resumed(Some(usd(1.0)), usd(0.1), vec![("r/ckpt/3".into(), usd(0.36))]);
        let root = budget.root();
        assert_eq!(budget.spent(root), usd(0.46));
        assert_eq!(budget.remaining(root), Some(usd(0.54)));
        let r = budget.reserve(root, usd(0.5)).unwrap();
        let carried = budget.take_carried("r/ckpt/3");
        assert_eq!(carried, usd(0.36));
        assert_eq!(budget.take_carried("r/ckpt/3"), Money::ZERO);
        // The call settles with its whole cost, the carried turns included.
        budget.settle(r, usd(0.5).sub_or_zero(carried));
        assert_eq!(budget.spent(root), usd(0.6));
    }

    #[test]
    fn a_denial_holds_nothing() {
        let budget = Budget::new(Some(usd(0.5)), Money::ZERO);
        assert!(budget.reserve(budget.root(), usd(0.6)).is_err());
        assert_eq!(budget.remaining(budget.root()), Some(usd(0.5)));
    }

    #[test]
    fn sub_accounts_take_a_share_and_roll_up() {
        let budget = Budget::new(Some(usd(1.0)), usd(0.5));
        let root = budget.root();
        let child = budget.open_sub_account(root, 300_000, None);
        assert_eq!(budget.ceiling(child), Some(usd(0.15)));
        let r = budget.reserve(child, usd(0.15)).unwrap();
        assert!(budget.reserve(child, Money::from_nano_usd(1)).is_err());
        budget.settle(r, usd(0.1));
        assert_eq!(budget.spent(child), usd(0.1));
        assert_eq!(budget.spent(root), usd(0.6));
        let capped = budget.open_sub_account(root, 1_000_000, Some(usd(0.01)));
        assert_eq!(budget.ceiling(capped), Some(usd(0.01)));
    }

    #[test]
    fn in_flight_spend_is_seen_by_siblings_and_the_crossing_call_is_cut() {
        let budget = Budget::new(Some(usd(1.0)), Money::ZERO);
        let root = budget.root();
        let a = budget.reserve(root, usd(0.01)).unwrap();
        let b = budget.reserve(root, usd(0.01)).unwrap();
        // Within its hold a call changes nothing for anyone.
        assert!(!budget.record_in_flight(a.id(), usd(0.01)));
        assert_eq!(budget.remaining(root), Some(usd(0.98)));
        // Past its hold, its in-flight spend is committed on the account at once.
        assert!(!budget.record_in_flight(a.id(), usd(0.6)));
        assert_eq!(budget.remaining(root), Some(usd(0.39)));
        assert!(budget.reserve(root, usd(0.4)).is_err());
        // The sibling that runs the account past the ceiling is the one that crosses.
        assert!(budget.record_in_flight(b.id(), usd(0.41)));
        budget.settle(a, usd(0.6));
        budget.settle(b, usd(0.41));
        assert_eq!(budget.spent(root), usd(1.01));
        assert_eq!(budget.remaining(root), Some(Money::ZERO));
        assert!(!budget.can_start_turn(root));
    }

    #[test]
    fn the_turn_guard_grants_the_worst_case_or_what_is_left() {
        let budget = Budget::new(Some(usd(1.0)), Money::ZERO);
        let root = budget.root();
        let a = budget.reserve(root, usd(0.3)).unwrap();
        let other = budget.reserve(root, usd(0.5)).unwrap();
        // The first turn fits the hold: nothing more is committed.
        assert_eq!(budget.grant_turn(a.id(), Money::ZERO, usd(0.3), usd(0.01)), Ok(Some(usd(0.3))));
        assert_eq!(budget.remaining(root), Some(usd(0.2)));
        // The second turn, after 0.3 was used, wants 0.3 more: only 0.2 is free.
        assert_eq!(budget.grant_turn(a.id(), usd(0.3), usd(0.3), usd(0.01)), Ok(Some(usd(0.2))));
        assert_eq!(budget.remaining(root), Some(Money::ZERO));
        // A third turn after using all of it gets nothing and holds nothing more.
        assert_eq!(
            budget.grant_turn(a.id(), usd(0.5), usd(0.3), usd(0.01)),
            Err(Denied { requested: usd(0.3), available: Money::ZERO })
        );
        budget.settle(other, Money::ZERO);
        budget.settle(a, usd(0.5));
        assert_eq!(budget.remaining(root), Some(usd(0.5)));
        let unbounded = Budget::new(None, Money::ZERO);
        let r = unbounded.reserve(unbounded.root(), Money::MAX).unwrap();
        assert_eq!(unbounded.grant_turn(r.id(), usd(1.0), usd(1.0), usd(1.0)), Ok(None));
        assert!(!unbounded.record_in_flight(r.id(), Money::MAX));
        assert_eq!(unbounded.remaining(unbounded.root()), None);
    }
}

//! The budget: a tree of accounts in integer nano-USD, with reserve-before-spawn admission,
//! a guard before every model turn, and live checks for the stream cut.
//!
//! The root account's ceiling is fixed when the run starts (and restored from run meta on
//! resume); nothing raises it. A child workflow gets a sub-account whose ceiling is a share
//! of the parent's remainder; every reserve and charge on a sub-account is also held on
//! each ancestor, so a child can never spend what its parent does not have. All accounts of
//! a run live under one mutex: each operation is a few additions, and one lock makes every
//! check-and-reserve atomic across the tree.

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
    spent: Money,
    reserved: Money,
}

/// The budget tree of one run.
#[derive(Debug)]
pub(crate) struct Budget {
    accounts: Mutex<Vec<Account>>,
}

/// A held reservation; released (fully or by a charge) exactly once.
#[derive(Debug)]
pub(crate) struct Reservation {
    account: AccountId,
    amount: Money,
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
    pub(crate) fn new(ceiling: Option<Money>, spent: Money) -> Arc<Budget> {
        Arc::new(Budget {
            accounts: Mutex::new(vec![Account { parent: None, ceiling, spent, reserved: Money::ZERO }]),
        })
    }

    /// The root account.
    pub(crate) fn root(&self) -> AccountId {
        AccountId(0)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Account>> {
        // A poisoned lock means a panic mid-update of plain integers; the numbers are still
        // the best record we have.
        self.accounts.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Opens a sub-account under `parent` whose ceiling is `share_ppm` of the parent's free
    /// amount, capped by `cap` when given.
    pub(crate) fn open_sub_account(
        &self,
        parent: AccountId,
        share_ppm: u32,
        cap: Option<Money>,
    ) -> AccountId {
        let mut accounts = self.lock();
        let free = free_on_path(&accounts, parent);
        let ceiling = match (free, cap) {
            (Some(free), Some(cap)) => Some(free.scale_ppm(share_ppm).min(cap)),
            (Some(free), None) => Some(free.scale_ppm(share_ppm)),
            (None, cap) => cap,
        };
        accounts.push(Account { parent: Some(parent), ceiling, spent: Money::ZERO, reserved: Money::ZERO });
        AccountId(accounts.len() - 1)
    }

    /// Admission: holds `amount` on the account and every ancestor, or refuses without
    /// holding anything. An exact fill is admitted.
    pub(crate) fn reserve(&self, account: AccountId, amount: Money) -> Result<Reservation, Denied> {
        let mut accounts = self.lock();
        if let Some(free) = free_on_path(&accounts, account)
            && amount > free
        {
            return Err(Denied { requested: amount, available: free });
        }
        for_each_on_path(&mut accounts, account, |a| a.reserved += amount);
        Ok(Reservation { account, amount })
    }

    /// Settles a reservation: releases the hold and charges `cost` on the path.
    pub(crate) fn settle(&self, reservation: Reservation, cost: Money) {
        let mut accounts = self.lock();
        for_each_on_path(&mut accounts, reservation.account, |a| {
            a.reserved = a.reserved.sub_or_zero(reservation.amount);
            a.spent += cost;
        });
    }

    /// The turn guard: whether the account's path still has money for another model turn
    /// (spent strictly below every ceiling).
    pub(crate) fn can_start_turn(&self, account: AccountId) -> bool {
        let accounts = self.lock();
        let mut next = Some(account);
        while let Some(id) = next {
            let a = &accounts[id.0];
            if let Some(ceiling) = a.ceiling
                && a.spent >= ceiling
            {
                return false;
            }
            next = a.parent;
        }
        true
    }

    /// The stream cut: whether spending `extra` beyond what is already spent (ignoring the
    /// call's own reservation) would cross a ceiling on the path.
    pub(crate) fn would_cross(&self, account: AccountId, extra: Money) -> bool {
        let accounts = self.lock();
        let mut next = Some(account);
        while let Some(id) = next {
            let a = &accounts[id.0];
            if let Some(ceiling) = a.ceiling
                && a.spent + extra > ceiling
            {
                return true;
            }
            next = a.parent;
        }
        false
    }

    /// What the account has spent.
    pub(crate) fn spent(&self, account: AccountId) -> Money {
        self.lock()[account.0].spent
    }

    /// What the account (and its ancestors) still leave free; `None` when unbounded.
    pub(crate) fn remaining(&self, account: AccountId) -> Option<Money> {
        free_on_path(&self.lock(), account)
    }

    /// The account's ceiling.
    pub(crate) fn ceiling(&self, account: AccountId) -> Option<Money> {
        self.lock()[account.0].ceiling
    }
}

/// The smallest free amount (ceiling − spent − reserved) on the path to the root.
fn free_on_path(accounts: &[Account], account: AccountId) -> Option<Money> {
    let mut free: Option<Money> = None;
    let mut next = Some(account);
    while let Some(id) = next {
        let a = &accounts[id.0];
        if let Some(ceiling) = a.ceiling {
            let here = ceiling.sub_or_zero(a.spent + a.reserved);
            free = Some(free.map_or(here, |f| f.min(here)));
        }
        next = a.parent;
    }
    free
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
    fn guard_and_cut_see_the_whole_path() {
        let budget = Budget::new(Some(usd(1.0)), Money::ZERO);
        let root = budget.root();
        assert!(!budget.would_cross(root, usd(1.0)));
        assert!(budget.would_cross(root, usd(1.0) + Money::from_nano_usd(1)));
        let all = budget.reserve(root, usd(1.0)).unwrap();
        budget.settle(all, usd(1.0));
        assert!(!budget.can_start_turn(root));
        let unbounded = Budget::new(None, Money::ZERO);
        assert!(unbounded.reserve(unbounded.root(), Money::MAX).is_ok());
        assert_eq!(unbounded.remaining(unbounded.root()), None);
    }
}

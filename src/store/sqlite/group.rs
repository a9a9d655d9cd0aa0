//! Group commit: appends that arrive together share one transaction. The first appender
//! becomes the leader, takes every queued batch and hands them to the commit; the others wait
//! for their outcomes.

use std::collections::HashMap;
use std::io;
use std::sync::{Condvar, Mutex, PoisonError};

use super::keys::lock;
use crate::store::{Error, Lease, RawEntry, Result, RunId, Tally};

/// The queue of appends waiting for a leader, and the wake-up of their appenders.
#[derive(Default)]
pub(super) struct GroupCommit {
    /// Appends waiting for a group commit, and the outcomes of committed ones.
    group: Mutex<Group>,
    /// Wakes appenders when a group's outcomes are in.
    group_done: Condvar,
}

#[derive(Default)]
struct Group {
    /// Batches no leader has taken yet.
    queue: Vec<Pending>,
    /// Outcomes by ticket, until their appender picks them up.
    done: HashMap<u64, Result<()>>,
    /// Whether a leader is committing right now.
    leading: bool,
    /// How many appenders wait for a leader; a lone appender skips the wake-up syscall.
    waiting: usize,
    next_ticket: u64,
}

/// One append waiting in (or taken from) the group queue.
pub(super) struct Pending {
    pub(super) ticket: u64,
    pub(super) run: RunId,
    pub(super) entries: Vec<RawEntry>,
    pub(super) lease: Option<Lease>,
    pub(super) tally: Tally,
}

impl GroupCommit {
    /// Queues one append and returns its outcome: led by this caller through `commit` (with
    /// every batch queued meanwhile) when no leader is committing, else by the leader.
    pub(super) fn submit(
        &self,
        run: &RunId,
        entries: &[RawEntry],
        lease: Option<&Lease>,
        tally: Tally,
        commit: impl Fn(&[Pending]) -> Vec<Result<()>>,
    ) -> Result<()> {
        let mut group = lock(&self.group);
        let ticket = group.next_ticket;
        group.next_ticket += 1;
        group.queue.push(Pending {
            ticket,
            run: run.clone(),
            entries: entries.to_vec(),
            lease: lease.cloned(),
            tally,
        });
        loop {
            if let Some(outcome) = group.done.remove(&ticket) {
                return outcome;
            }
            if group.leading {
                group.waiting += 1;
                group = self.group_done.wait(group).unwrap_or_else(PoisonError::into_inner);
                group.waiting -= 1;
                continue;
            }
            group.leading = true;
            let batch = std::mem::take(&mut group.queue);
            drop(group);
            let mut leader = Leader { group: self, batch: &batch, outcomes: None };
            leader.outcomes = Some(commit(&batch));
            drop(leader);
            group = lock(&self.group);
        }
    }
}

/// Hands a leader's outcomes to the waiting appenders and steps down, also when the
/// commit panicked: then every batch of the group fails, and nobody waits forever.
struct Leader<'a> {
    group: &'a GroupCommit,
    batch: &'a [Pending],
    outcomes: Option<Vec<Result<()>>>,
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        let outcomes = self
            .outcomes
            .take()
            .unwrap_or_default()
            .into_iter()
            .map(Some)
            .chain(std::iter::repeat_with(|| None));
        let mut group = lock(&self.group.group);
        for (pending, outcome) in self.batch.iter().zip(outcomes) {
            let outcome =
                outcome.unwrap_or_else(|| Err(Error::Io(io::Error::other("group commit leader panicked"))));
            group.done.insert(pending.ticket, outcome);
        }
        group.leading = false;
        if group.waiting > 0 {
            self.group.group_done.notify_all();
        }
    }
}

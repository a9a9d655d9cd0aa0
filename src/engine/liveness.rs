//! Branch liveness and external waits: which threads of control of a run can still make
//! progress, and which are parked on an `await_external`. When every live one is parked the
//! run suspends instead of hanging; the open waits are what the suspended outcome lists as
//! `pending`.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::oneshot;

use super::outcome::Pending;
use crate::journal::Seq;

/// The run's threads of control and its open waits.
#[derive(Debug)]
pub(super) struct Liveness {
    counts: Mutex<Counts>,
    waits: Mutex<HashMap<String, Waiting>>,
}

/// Threads of control that can still make progress, and those parked on external input.
#[derive(Debug)]
struct Counts {
    active: usize,
    blocked: usize,
}

/// One open wait on external input.
#[derive(Debug)]
struct Waiting {
    seq: Seq,
    prompt: Option<String>,
    /// When its timeout resolves it (ms since the epoch), if it has one.
    deadline_ms: Option<i64>,
    wake: Option<oneshot::Sender<Value>>,
}

/// Whether a change left every live thread of control parked (the run must suspend).
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AllBlocked(pub(super) bool);

impl Liveness {
    /// A run's liveness at its start: one thread of control (the workflow's body), no waits.
    pub(super) fn new() -> Liveness {
        Liveness { counts: Mutex::new(Counts { active: 1, blocked: 0 }), waits: Mutex::new(HashMap::new()) }
    }

    fn change(&self, f: impl FnOnce(&mut Counts)) -> AllBlocked {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut counts);
        AllBlocked(counts.active > 0 && counts.blocked >= counts.active)
    }

    fn lock_waits(&self) -> MutexGuard<'_, HashMap<String, Waiting>> {
        self.waits.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A branch of a fan-out started.
    pub(super) fn branch_started(&self) -> AllBlocked {
        self.change(|c| c.active += 1)
    }

    /// Every branch of a fan-out has started (its parent only waits from now on), or one
    /// finished.
    pub(super) fn one_less(&self) -> AllBlocked {
        self.change(|c| c.active = c.active.saturating_sub(1))
    }

    /// The fan-out joined; its parent runs again.
    pub(super) fn join(&self) -> AllBlocked {
        self.change(|c| c.active += 1)
    }

    /// Threads of control that can make progress now.
    pub(super) fn live(&self) -> usize {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).active
    }

    /// Registers a wait on `key` (journaled at `seq`); returns the receiver of its value.
    pub(super) fn wait(
        &self,
        key: &str,
        seq: Seq,
        prompt: Option<String>,
        deadline_ms: Option<i64>,
    ) -> (oneshot::Receiver<Value>, AllBlocked) {
        let (tx, rx) = oneshot::channel();
        self.lock_waits().insert(key.to_owned(), Waiting { seq, prompt, deadline_ms, wake: Some(tx) });
        (rx, self.change(|c| c.blocked += 1))
    }

    /// The wait on `key` ended (resolved or stopped).
    pub(super) fn end_wait(&self, key: &str, resolved: bool) -> AllBlocked {
        if resolved {
            self.lock_waits().remove(key);
        }
        self.change(|c| c.blocked = c.blocked.saturating_sub(1))
    }

    /// The journaled seq of the open wait on `key`.
    pub(super) fn seq_of(&self, key: &str) -> Option<Seq> {
        self.lock_waits().get(key).map(|w| w.seq)
    }

    /// Hands `value` to whoever waits on `key`, if anyone still does.
    pub(super) fn wake(&self, key: &str, value: Value) {
        if let Some(wake) = self.lock_waits().get_mut(key).and_then(|w| w.wake.take()) {
            let _ = wake.send(value);
        }
    }

    /// The earliest deadline of the open waits, if any has one.
    pub(super) fn next_deadline(&self) -> Option<i64> {
        self.lock_waits().values().filter_map(|w| w.deadline_ms).min()
    }

    /// Whether some wait is open.
    pub(super) fn has_waits(&self) -> bool {
        !self.lock_waits().is_empty()
    }

    /// The open waits, in journal order.
    pub(super) fn pending(&self) -> Vec<Pending> {
        let waits = self.lock_waits();
        let mut pending: Vec<Pending> = waits
            .iter()
            .map(|(key, w)| Pending {
                key: key.clone(),
                prompt: w.prompt.clone(),
                seq: w.seq.0,
                deadline_ms: w.deadline_ms,
            })
            .collect();
        pending.sort_by_key(|p| p.seq);
        pending
    }
}

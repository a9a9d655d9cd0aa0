//! Change notifications per run: a store that can tell when a run's journal or meta changed
//! wakes the readers following that run at once, instead of leaving them to poll.
//!
//! A [`RunWatch`] is shared by a store and its followers. The store calls
//! [`RunWatch::notify`] after every committed append or meta write of a run (SQLite: writes
//! made through this store; PostgreSQL: writes made by any process on the database, delivered
//! by `LISTEN`/`NOTIFY`). A follower takes a [`RunChanges`] with [`RunWatch::subscribe`]
//! *before* it reads, marks it seen before each read, and waits on
//! [`RunChanges::changed`] after: a write that lands between its read and its wait still
//! wakes it, so nothing is missed. A notification says only "something changed": the
//! follower re-reads (cheaply, with [`JournalStore::load_since`](super::JournalStore::load_since)).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::run_id::RunId;

/// The change notifications of one store's runs.
#[derive(Clone, Default)]
pub struct RunWatch {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    /// One channel per followed run; a channel nobody holds a receiver of is dropped.
    runs: HashMap<RunId, watch::Sender<u64>>,
}

impl RunWatch {
    /// A watch nobody follows yet.
    pub fn new() -> RunWatch {
        RunWatch::default()
    }

    /// Starts following `run`: the returned handle wakes on every later [`RunWatch::notify`]
    /// of the run (and on [`RunWatch::notify_all`]).
    pub fn subscribe(&self, run: &RunId) -> RunChanges {
        let mut inner = self.lock();
        inner.runs.retain(|_, sender| sender.receiver_count() > 0);
        let receiver = match inner.runs.get(run) {
            Some(sender) => sender.subscribe(),
            None => {
                let (sender, receiver) = watch::channel(0);
                inner.runs.insert(run.clone(), sender);
                receiver
            }
        };
        RunChanges { receiver }
    }

    /// Says that `run`'s journal or meta changed. Cheap when nobody follows the run.
    pub fn notify(&self, run: &RunId) {
        let inner = self.lock();
        if let Some(sender) = inner.runs.get(run) {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Wakes every follower (after notifications may have been lost, e.g. a reconnect).
    pub fn notify_all(&self) {
        let inner = self.lock();
        for sender in inner.runs.values() {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// How many runs are followed now.
    pub fn followed(&self) -> usize {
        self.lock().runs.values().filter(|sender| sender.receiver_count() > 0).count()
    }

    /// A handle that does not keep the watch alive (for a store's helper thread, which
    /// stops once its store is gone).
    pub(crate) fn downgrade(&self) -> WeakRunWatch {
        WeakRunWatch(Arc::downgrade(&self.inner))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves the map consistent (every step is one call).
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl fmt::Debug for RunWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunWatch").field("followed", &self.followed()).finish()
    }
}

/// A [`RunWatch`] that may be gone.
#[derive(Debug, Clone)]
pub(crate) struct WeakRunWatch(std::sync::Weak<Mutex<Inner>>);

impl WeakRunWatch {
    /// The watch, while its store keeps it.
    pub(crate) fn upgrade(&self) -> Option<RunWatch> {
        self.0.upgrade().map(|inner| RunWatch { inner })
    }
}

/// One follower's view of a run's changes.
#[derive(Debug)]
pub struct RunChanges {
    receiver: watch::Receiver<u64>,
}

impl RunChanges {
    /// Marks every change so far as seen: call it just before reading the run.
    pub fn mark_seen(&mut self) {
        self.receiver.borrow_and_update();
    }

    /// Waits for a change not yet marked seen (at once if one came since
    /// [`RunChanges::mark_seen`]).
    pub async fn changed(&mut self) {
        if self.receiver.changed().await.is_err() {
            // The watch is gone (its store was dropped): nothing will notify again.
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_change_between_read_and_wait_still_wakes() {
        let watch = RunWatch::new();
        let run = RunId::parse("r1").unwrap();
        let mut changes = watch.subscribe(&run);
        changes.mark_seen();
        watch.notify(&run); // lands after the "read", before the wait
        tokio::time::timeout(Duration::from_secs(1), changes.changed()).await.expect("woken");
        changes.mark_seen();
        let other = RunId::parse("r2").unwrap();
        watch.notify(&other);
        assert!(tokio::time::timeout(Duration::from_millis(20), changes.changed()).await.is_err());
        watch.notify_all();
        tokio::time::timeout(Duration::from_secs(1), changes.changed()).await.expect("woken by notify_all");
    }

    #[test]
    fn dropped_followers_are_forgotten() {
        let watch = RunWatch::new();
        let a = RunId::parse("a").unwrap();
        let first = watch.subscribe(&a);
        let second = watch.subscribe(&a);
        assert_eq!(watch.followed(), 1);
        drop(first);
        drop(second);
        assert_eq!(watch.followed(), 0);
        watch.notify(&a); // no follower: a no-op
        let _again = watch.subscribe(&RunId::parse("b").unwrap());
        assert_eq!(watch.inner.lock().unwrap().runs.len(), 1, "a's channel is pruned");
    }
}

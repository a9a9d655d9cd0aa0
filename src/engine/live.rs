//! The live relay: an agent call's streamed text, handed from the worker that drives a run to
//! the event streams of the same process (`GET /v1/runs/{id}/events?tokens=1`). Tokens are
//! never journaled: they exist only in the process driving the run, and only while someone
//! listens. The relay is lossy by design: a listener that falls more than [`RELAY_CAPACITY`]
//! deltas behind skips the ones it missed (the journaled answer is whole either way).
//!
//! A worker asks the relay whether its run has listeners ([`LiveRelay::wanted`]) and only then
//! reads the run's events, so a run nobody watches builds no events for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, broadcast};

use super::events::{EventKind, EventStream};
use crate::store::RunId;

/// How many deltas a slow listener may fall behind before it skips some.
pub(crate) const RELAY_CAPACITY: usize = 1024;

/// A text delta of one agent call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LiveToken {
    /// The call's scope path (`""` for the root).
    pub(crate) scope: String,
    /// The call's label, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) label: Option<String>,
    /// The requested model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<String>,
    /// Which call of the run segment it is (its event span id): deltas of one call share it.
    pub(crate) call: u64,
    /// The text.
    pub(crate) text: String,
}

/// The live deltas of the runs this process drives, for the listeners of this process.
#[derive(Debug, Default)]
pub(crate) struct LiveRelay {
    runs: Mutex<HashMap<RunId, broadcast::Sender<LiveToken>>>,
    /// Fired when a run gains a listener, so its worker starts relaying.
    asked: Notify,
    /// The relays at work, by run: a listener waits for them to end before it reports a
    /// settled run's outcome ([`LiveRelay::relayed`]), so the last deltas reach it first.
    relaying: Mutex<HashMap<RunId, usize>>,
    /// Fired when a relay ends.
    ended: Notify,
}

impl LiveRelay {
    fn lock(&self) -> MutexGuard<'_, HashMap<RunId, broadcast::Sender<LiveToken>>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Listens to `run`'s deltas from now on.
    pub(crate) fn subscribe(&self, run: &RunId) -> broadcast::Receiver<LiveToken> {
        let receiver = {
            let mut runs = self.lock();
            // Runs whose listeners all left are forgotten here: the map holds only the runs
            // someone listens to.
            runs.retain(|_, tx| tx.receiver_count() > 0);
            runs.entry(run.clone()).or_insert_with(|| broadcast::channel(RELAY_CAPACITY).0).subscribe()
        };
        self.asked.notify_waiters();
        receiver
    }

    /// Whether anyone listens to `run` now.
    pub(crate) fn listened(&self, run: &RunId) -> bool {
        self.lock().get(run).is_some_and(|tx| tx.receiver_count() > 0)
    }

    /// Resolves once `run` has a listener.
    pub(crate) async fn wanted(&self, run: &RunId) {
        loop {
            let asked = self.asked.notified();
            tokio::pin!(asked);
            asked.as_mut().enable();
            if self.listened(run) {
                return;
            }
            asked.await;
        }
    }

    /// Resolves once no relay of `run` is at work in this process: every delta its relays
    /// read is published by then. A relay reads a run segment's events until the segment
    /// settles, so this follows a settlement by no more than the relay's catching up.
    pub(crate) async fn relayed(&self, run: &RunId) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if !self.relaying.lock().unwrap_or_else(|p| p.into_inner()).contains_key(run) {
                return;
            }
            ended.await;
        }
    }

    /// Counts a relay of `run` at work until the guard drops.
    fn at_work(self: &Arc<Self>, run: &RunId) -> AtWork {
        *self.relaying.lock().unwrap_or_else(|p| p.into_inner()).entry(run.clone()).or_default() += 1;
        AtWork { relay: self.clone(), run: run.clone() }
    }

    fn publish(&self, run: &RunId, token: LiveToken) -> bool {
        match self.lock().get(run) {
            // No listener left: the sender stays for the next subscribe to reuse or forget.
            Some(tx) => tx.send(token).is_ok(),
            None => false,
        }
    }
}

/// Which agent call each span of a run's event stream is (from its `agent:start`), so its
/// deltas become [`LiveToken`]s.
#[derive(Debug, Default)]
pub(crate) struct Calls(HashMap<u64, (String, Option<String>, String)>);

impl Calls {
    /// The delta `event` carries, as a token; `None` for any other event.
    pub(crate) fn token(&mut self, event: &super::events::Event) -> Option<LiveToken> {
        match &event.kind {
            EventKind::AgentStart { label, model, scope, .. } => {
                self.0.insert(event.span_id, (scope.clone(), label.clone(), model.clone()));
                None
            }
            EventKind::AgentDelta { text } => {
                let (scope, label, model) = self.0.get(&event.span_id).cloned().unwrap_or_default();
                Some(LiveToken {
                    scope,
                    label,
                    model: (!model.is_empty()).then_some(model),
                    call: event.span_id,
                    text: text.clone(),
                })
            }
            EventKind::AgentEnd { .. } => {
                self.0.remove(&event.span_id);
                None
            }
            _ => None,
        }
    }
}

/// A relay at work ([`LiveRelay::relayed`] waits for it).
struct AtWork {
    relay: Arc<LiveRelay>,
    run: RunId,
}

impl Drop for AtWork {
    fn drop(&mut self) {
        let mut relaying = self.relay.relaying.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = relaying.get_mut(&self.run) {
            *count -= 1;
            if *count == 0 {
                relaying.remove(&self.run);
            }
        }
        drop(relaying);
        self.relay.ended.notify_waiters();
    }
}

/// Relays the agent deltas of `events` (a run segment's stream) to `relay` until the stream
/// ends or nobody listens any more. The relay counts as at work from this call (not from the
/// future's first poll), so a listener that sees the run settled waits for it.
pub(crate) fn relay(
    relay: Arc<LiveRelay>,
    run: RunId,
    mut events: EventStream,
) -> impl Future<Output = ()> + Send + 'static {
    let at_work = relay.at_work(&run);
    async move {
        let _at_work = at_work;
        let mut calls = Calls::default();
        while let Some(event) = events.next().await {
            if let Some(token) = calls.token(&event)
                && !relay.publish(&run, token)
            {
                // Everyone left: stop reading, so the run builds no more events for us.
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str) -> LiveToken {
        LiveToken { scope: String::new(), label: None, model: None, call: 1, text: text.into() }
    }

    #[tokio::test]
    async fn a_listener_gets_the_deltas_and_a_run_without_one_is_forgotten() {
        let relay = Arc::new(LiveRelay::default());
        let run = RunId::parse("r1").unwrap();
        assert!(!relay.publish(&run, token("lost")), "nobody listens yet");
        let waiting = {
            let (relay, run) = (relay.clone(), run.clone());
            tokio::spawn(async move { relay.wanted(&run).await })
        };
        let mut rx = relay.subscribe(&run);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await.unwrap().unwrap();
        assert!(relay.publish(&run, token("hel")));
        assert!(relay.publish(&run, token("lo")));
        assert_eq!(rx.recv().await.unwrap().text, "hel");
        assert_eq!(rx.recv().await.unwrap().text, "lo");
        drop(rx);
        assert!(!relay.listened(&run));
        assert!(!relay.publish(&run, token("after")), "the listener left");
        let _other = relay.subscribe(&RunId::parse("r2").unwrap());
        assert!(!relay.lock().contains_key(&run), "a run nobody listens to is forgotten");
    }

    /// A listener that saw the run settle waits for the relay started for it, even one whose
    /// task has not run yet, and then has its last delta.
    #[tokio::test]
    async fn a_relay_counts_from_its_start_and_its_last_delta_comes_before_it_ends() {
        use futures::FutureExt as _;
        let relay = Arc::new(LiveRelay::default());
        let run = RunId::parse("r1").unwrap();
        let mut rx = relay.subscribe(&run);
        let log = super::super::events::EventLog::new(run.clone(), 0);
        let work = super::relay(relay.clone(), run.clone(), log.subscribe());
        assert!(relay.relayed(&run).now_or_never().is_none(), "at work before its first poll");
        let start =
            EventKind::AgentStart { label: None, agent_type: None, model: "m".into(), scope: String::new() };
        log.emit(0, (7, None), false, start);
        log.emit(0, (7, None), false, EventKind::AgentDelta { text: "last".into() });
        log.close();
        let waiting = {
            let (relay, run) = (relay.clone(), run.clone());
            tokio::spawn(async move { relay.relayed(&run).await })
        };
        tokio::spawn(work);
        waiting.await.unwrap();
        assert_eq!(rx.try_recv().unwrap().text, "last");
        assert!(relay.relayed(&run).now_or_never().is_some(), "no relay left at work");
    }

    #[tokio::test]
    async fn a_slow_listener_skips_what_it_missed_and_reads_on() {
        let relay = LiveRelay::default();
        let run = RunId::parse("r1").unwrap();
        let mut rx = relay.subscribe(&run);
        for i in 0..RELAY_CAPACITY + 10 {
            relay.publish(&run, token(&i.to_string()));
        }
        assert!(matches!(rx.recv().await, Err(broadcast::error::RecvError::Lagged(10))));
        assert_eq!(rx.recv().await.unwrap().text, "10");
    }
}

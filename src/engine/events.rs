//! Run events: one typed enum in one envelope, kept in a per-run log so every subscriber
//! sees the whole sequence from the handle's creation, without gaps.

use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::watch;

use crate::journal::Preview;
use crate::money::Money;
use crate::store::{RunId, RunStatus};
use crate::usage::Usage;

/// One event of a run, serialized as `{"type":"agent:start","run_id":...,"seq":...,...}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// The run.
    pub run_id: RunId,
    /// Position in the run's event sequence (per segment, from 1).
    pub seq: u64,
    /// Milliseconds since the epoch, from the engine's clock.
    pub ts: i64,
    /// The span this event belongs to (a call, a phase, the run).
    pub span_id: u64,
    /// The enclosing span.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<u64>,
    /// Whether the event re-emits a result served from the journal.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
#[non_exhaustive]
pub enum EventKind {
    /// The run (or a resume segment of it) started.
    #[serde(rename = "run:start")]
    RunStart {
        /// The workflow's name.
        name: String,
        /// Whether this segment resumes an earlier one.
        resumed: bool,
        /// The ceiling, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        ceiling: Option<Money>,
    },
    /// The run settled.
    #[serde(rename = "run:end")]
    RunEnd {
        /// Its final status.
        status: RunStatus,
        /// What this segment replayed, reran and skipped.
        preview: Preview,
    },
    /// A phase began.
    #[serde(rename = "phase:start")]
    PhaseStart {
        /// The phase name.
        name: String,
    },
    /// A phase ended.
    #[serde(rename = "phase:end")]
    PhaseEnd {
        /// The phase name.
        name: String,
    },
    /// An agent call began (or was replayed).
    #[serde(rename = "agent:start")]
    AgentStart {
        /// The call's label.
        #[serde(skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        /// The profile.
        #[serde(skip_serializing_if = "Option::is_none")]
        agent_type: Option<String>,
        /// The requested model.
        model: String,
        /// The scope path.
        scope: String,
    },
    /// Streamed text of an agent call.
    #[serde(rename = "agent:delta")]
    AgentDelta {
        /// The text.
        text: String,
    },
    /// An agent call ended.
    #[serde(rename = "agent:end")]
    AgentEnd {
        /// `ok`, `error`, `limit`, `cancelled` or `skipped`.
        status: String,
        /// Token usage.
        usage: Usage,
        /// Cost, if priced.
        #[serde(skip_serializing_if = "Option::is_none")]
        cost: Option<Money>,
        /// The model that served it.
        #[serde(skip_serializing_if = "Option::is_none")]
        served_by: Option<String>,
        /// The error code, for failures.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<crate::ErrorCode>,
    },
    /// A step, host call or child workflow began.
    #[serde(rename = "step:start")]
    StepStart {
        /// `step`, `call` or `child`.
        kind: String,
        /// Its label or name.
        label: String,
    },
    /// A step, host call or child workflow ended.
    #[serde(rename = "step:end")]
    StepEnd {
        /// `step`, `call` or `child`.
        kind: String,
        /// Its label or name.
        label: String,
        /// `ok`, `error`, `cancelled` or `skipped`.
        status: String,
    },
    /// Spend changed.
    #[serde(rename = "budget:update")]
    BudgetUpdate {
        /// Spent so far (whole run).
        spent: Money,
        /// Left under the ceiling, if bounded.
        #[serde(skip_serializing_if = "Option::is_none")]
        remaining: Option<Money>,
    },
    /// Admission refused a spawn, or a guard or cut stopped a turn.
    #[serde(rename = "budget:exhausted")]
    BudgetExhausted {
        /// What was stopped.
        what: String,
    },
    /// A workflow log line.
    #[serde(rename = "log")]
    Log {
        /// `debug`, `info`, `warn` or `error`.
        level: String,
        /// The message.
        message: String,
        /// Structured data.
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<Value>,
    },
    /// The run waits for an external value.
    #[serde(rename = "external:waiting")]
    ExternalWaiting {
        /// The key to resolve.
        key: String,
        /// The prompt shown to whoever resolves it.
        #[serde(skip_serializing_if = "Option::is_none")]
        prompt: Option<String>,
    },
    /// An external value arrived.
    #[serde(rename = "external:resolved")]
    ExternalResolved {
        /// The key.
        key: String,
        /// Whether this attempt closed the wait (false: an earlier one already had).
        applied: bool,
    },
}

/// The event log of one run segment.
#[derive(Debug)]
pub(crate) struct EventLog {
    run_id: RunId,
    events: Mutex<Vec<Arc<Event>>>,
    /// The number of events (and whether the log is closed), for waking subscribers.
    count: watch::Sender<(usize, bool)>,
}

impl EventLog {
    pub(crate) fn new(run_id: RunId) -> Arc<EventLog> {
        Arc::new(EventLog { run_id, events: Mutex::new(Vec::new()), count: watch::channel((0, false)).0 })
    }

    /// Appends one event, assigning its seq.
    pub(crate) fn emit(&self, ts: i64, span: (u64, Option<u64>), replayed: bool, kind: EventKind) {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let seq = events.len() as u64 + 1;
        events.push(Arc::new(Event {
            run_id: self.run_id.clone(),
            seq,
            ts,
            span_id: span.0,
            parent_span_id: span.1,
            replayed,
            kind,
        }));
        let len = events.len();
        drop(events);
        // Nobody to wake: skip the notification (a later subscriber reads the log itself).
        if self.count.receiver_count() > 0 {
            self.count.send_replace((len, false));
        }
    }

    /// Marks the log complete: subscribers end after the last event.
    pub(crate) fn close(&self) {
        let len = self.events.lock().unwrap_or_else(|p| p.into_inner()).len();
        self.count.send_replace((len, true));
    }

    pub(crate) fn subscribe(self: &Arc<Self>) -> EventStream {
        EventStream { log: self.clone(), next: 0, watch: self.count.subscribe() }
    }
}

/// A subscriber's view of a run's events: every event from the first, in order.
#[derive(Debug)]
pub struct EventStream {
    log: Arc<EventLog>,
    next: usize,
    watch: watch::Receiver<(usize, bool)>,
}

impl EventStream {
    /// The next event, or `None` once the run has settled and every event was seen.
    ///
    /// # Cancel safety
    /// Cancel-safe: a cancelled call consumes nothing.
    pub async fn next(&mut self) -> Option<Arc<Event>> {
        loop {
            // Mark the current notification seen first, then read the log itself: an event
            // appended after this point bumps the notification and wakes `changed`.
            let (_, closed) = *self.watch.borrow_and_update();
            {
                let events = self.log.events.lock().unwrap_or_else(|p| p.into_inner());
                if self.next < events.len() {
                    let event = events[self.next].clone();
                    self.next += 1;
                    return Some(event);
                }
            }
            if closed {
                return None;
            }
            if self.watch.changed().await.is_err() {
                return None;
            }
        }
    }

    /// Every event already emitted, without waiting.
    pub fn drain_now(&mut self) -> Vec<Arc<Event>> {
        let events = self.log.events.lock().unwrap_or_else(|p| p.into_inner());
        let out = events[self.next.min(events.len())..].to_vec();
        self.next = events.len();
        out
    }
}

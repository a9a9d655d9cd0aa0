//! Run events: one typed enum in one envelope, kept in a per-run log so every subscriber
//! sees the whole sequence from the handle's creation, without gaps, and released once no
//! observer can read them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

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
        /// The ceiling, if any (`ceiling_nano_usd` and `ceiling_usd`).
        #[serde(flatten, with = "crate::money::json::ceiling")]
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
        /// Cost, if priced (`cost_nano_usd` and `cost_usd`).
        #[serde(flatten, with = "crate::money::json::cost")]
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
    /// A branch of a `parallel` fan-out (or a `parallel_map` item) began.
    #[serde(rename = "branch:start")]
    BranchStart {
        /// The branch's index in its fan-out.
        index: u32,
        /// The branch's scope path.
        scope: String,
    },
    /// A branch of a fan-out ended.
    #[serde(rename = "branch:end")]
    BranchEnd {
        /// The branch's index in its fan-out.
        index: u32,
        /// `ok` or `error`.
        status: String,
    },
    /// A model turn of an agent call began (its span's parent is the call's span; the tool
    /// calls the turn requests are children of the turn's span).
    #[serde(rename = "turn:start")]
    TurnStart {
        /// The turn's number in the call (from 1; continues after a checkpoint).
        turn: u32,
        /// The model the turn is sent to (the provider-local name).
        model: String,
        /// The turn's output cap, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        max_tokens: Option<u32>,
        /// The conversation sent, as JSON, only when an observer asked for content
        /// (see [`RunObserver::wants_content`](crate::RunObserver::wants_content)).
        #[serde(skip_serializing_if = "Option::is_none")]
        input: Option<Value>,
    },
    /// A model turn ended.
    #[serde(rename = "turn:end")]
    TurnEnd {
        /// The turn's number in the call.
        turn: u32,
        /// `ok` or `error`.
        status: String,
        /// The model that answered (differs from the start's after a failover).
        model: String,
        /// What the turn used.
        usage: Usage,
        /// Why the model stopped (`stop`, `length`, `tool_use`, ...), when it answered.
        #[serde(skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
        /// The turn's answer text, only when an observer asked for content.
        #[serde(skip_serializing_if = "Option::is_none")]
        output: Option<String>,
    },
    /// An agent's tool call began (or was served from the journal: `replayed`).
    #[serde(rename = "tool:start")]
    ToolStart {
        /// The tool, as the model calls it.
        tool: String,
        /// The call id the loop minted (`call_<turn>_<index>`).
        call_id: String,
        /// The first 16 hex digits of the sha256 of the arguments' canonical JSON.
        args_digest: String,
    },
    /// An agent's tool call ended.
    #[serde(rename = "tool:end")]
    ToolEnd {
        /// The tool, as the model calls it.
        tool: String,
        /// The call id the loop minted.
        call_id: String,
        /// `ok`, `error` or `cancelled`.
        status: String,
        /// How long it ran, in milliseconds (0 when served from the journal).
        duration_ms: u64,
        /// The bytes of its result text (or of its error message).
        bytes: u64,
        /// The error code, for failures.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<crate::ErrorCode>,
    },
    /// Spend changed.
    #[serde(rename = "budget:update")]
    BudgetUpdate {
        /// Spent so far, whole run (`spent_nano_usd` and `spent_usd`).
        #[serde(flatten, with = "crate::money::json::spent")]
        spent: Money,
        /// Left under the ceiling, if bounded (`remaining_nano_usd` and `remaining_usd`).
        #[serde(flatten, with = "crate::money::json::remaining")]
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
///
/// It buffers what an observer may still read, and nothing else. Observers are the run's
/// handle (which may subscribe at any time, so while it lives every event is kept: the
/// stream is gapless from the handle's creation) and each open [`EventStream`] (which needs
/// the events it has not read yet). Once the handle is gone (dropped, or consumed by
/// [`RunHandle::result`](crate::RunHandle::result)), events every stream has read are
/// released; with no observer left, nobody can ever read an event, so none is built.
#[derive(Debug)]
pub(crate) struct EventLog {
    run_id: RunId,
    buffer: Mutex<Buffer>,
    /// Handle claims plus open streams, readable without the lock: the emit fast path.
    observers: AtomicUsize,
    /// The next seq (and whether the log is closed), for waking subscribers.
    count: watch::Sender<(u64, bool)>,
}

#[derive(Debug)]
struct Buffer {
    /// Events some observer may still read; the first has seq `first`.
    events: VecDeque<Arc<Event>>,
    first: u64,
    /// The seq the next event gets.
    next: u64,
    /// Live handle claims: while any, nothing is released.
    claims: usize,
    /// The run settled; an event emitted after (a late resolution) does not reopen the log.
    closed: bool,
    /// The next seq each open stream reads, by stream id.
    cursors: Vec<(u64, u64)>,
    next_stream: u64,
}

impl Buffer {
    /// Releases events no observer can read any more.
    fn release(&mut self) {
        if self.claims > 0 {
            return;
        }
        let keep_from = self.cursors.iter().map(|&(_, cursor)| cursor).min().unwrap_or(self.next);
        while self.first < keep_from && self.events.pop_front().is_some() {
            self.first += 1;
        }
    }
}

impl EventLog {
    /// A log with one claim already held, for the handle the run is about to return. Its
    /// seqs start just above `base` (the segment's, so seqs increase across segments).
    pub(crate) fn new(run_id: RunId, base: u64) -> Arc<EventLog> {
        let buffer = Buffer {
            events: VecDeque::new(),
            first: base + 1,
            next: base + 1,
            claims: 1,
            closed: false,
            cursors: Vec::new(),
            next_stream: 0,
        };
        Arc::new(EventLog {
            run_id,
            buffer: Mutex::new(buffer),
            observers: AtomicUsize::new(1),
            count: watch::channel((base + 1, false)).0,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Buffer> {
        self.buffer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether anyone can still read an event; when not, emitting is a no-op, so callers
    /// skip building the event.
    pub(crate) fn observed(&self) -> bool {
        self.observers.load(Ordering::Acquire) > 0
    }

    /// Appends one event, assigning its seq.
    pub(crate) fn emit(&self, ts: i64, span: (u64, Option<u64>), replayed: bool, kind: EventKind) {
        if !self.observed() {
            return;
        }
        let mut buffer = self.lock();
        let seq = buffer.next;
        buffer.next += 1;
        buffer.events.push_back(Arc::new(Event {
            run_id: self.run_id.clone(),
            seq,
            ts,
            span_id: span.0,
            parent_span_id: span.1,
            replayed,
            kind,
        }));
        let (next, closed) = (buffer.next, buffer.closed);
        drop(buffer);
        // Nobody to wake: skip the notification (a later subscriber reads the buffer itself).
        if self.count.receiver_count() > 0 {
            self.count.send_replace((next, closed));
        }
    }

    /// Marks the log complete: subscribers end after the last event.
    pub(crate) fn close(&self) {
        let mut buffer = self.lock();
        buffer.closed = true;
        let next = buffer.next;
        drop(buffer);
        self.count.send_replace((next, true));
    }

    /// Gives up the handle's claim (the handle is dropped or consumed).
    pub(crate) fn release_claim(&self) {
        let mut buffer = self.lock();
        buffer.claims = buffer.claims.saturating_sub(1);
        self.observers.fetch_sub(1, Ordering::AcqRel);
        buffer.release();
    }

    /// A stream from the first event (the handle's claim kept every one of them).
    pub(crate) fn subscribe(self: &Arc<Self>) -> EventStream {
        let mut buffer = self.lock();
        let id = buffer.next_stream;
        buffer.next_stream += 1;
        let from = buffer.first;
        buffer.cursors.push((id, from));
        self.observers.fetch_add(1, Ordering::AcqRel);
        drop(buffer);
        EventStream { log: self.clone(), id, watch: self.count.subscribe() }
    }
}

/// A subscriber's view of a run's events: every event from the first, in order.
#[derive(Debug)]
pub struct EventStream {
    log: Arc<EventLog>,
    id: u64,
    watch: watch::Receiver<(u64, bool)>,
}

impl EventStream {
    /// Reads up to `limit` unread events, advancing this stream's cursor.
    fn read(&self, limit: usize) -> Vec<Arc<Event>> {
        let mut buffer = self.log.lock();
        let Buffer { events, first, next, cursors, .. } = &mut *buffer;
        let Some(cursor) = cursors.iter_mut().find(|(id, _)| *id == self.id).map(|(_, cursor)| cursor) else {
            return Vec::new();
        };
        let start = (*cursor - *first) as usize;
        let unread = usize::try_from(*next - *cursor).unwrap_or(usize::MAX);
        let out: Vec<Arc<Event>> = events.range(start..start + unread.min(limit)).cloned().collect();
        *cursor += out.len() as u64;
        buffer.release();
        out
    }

    /// The next event, or `None` once the run has settled and every event was seen.
    ///
    /// # Cancel safety
    /// Cancel-safe: a cancelled call consumes nothing.
    pub async fn next(&mut self) -> Option<Arc<Event>> {
        loop {
            // Mark the current notification seen first, then read the buffer itself: an
            // event appended after this point bumps the notification and wakes `changed`.
            let (_, closed) = *self.watch.borrow_and_update();
            if let Some(event) = self.read(1).pop() {
                return Some(event);
            }
            if closed {
                return None;
            }
            if self.watch.changed().await.is_err() {
                return None;
            }
        }
    }

    /// Every event already emitted and not yet read, without waiting.
    pub fn drain_now(&mut self) -> Vec<Arc<Event>> {
        self.read(usize::MAX)
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        let mut buffer = self.log.lock();
        buffer.cursors.retain(|(id, _)| *id != self.id);
        self.log.observers.fetch_sub(1, Ordering::AcqRel);
        buffer.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log() -> Arc<EventLog> {
        EventLog::new(RunId::parse("events").unwrap(), 0)
    }

    fn emit(log: &EventLog, message: &str) {
        log.emit(
            0,
            (0, None),
            false,
            EventKind::Log { level: "info".into(), message: message.into(), data: None },
        );
    }

    fn buffered(log: &EventLog) -> usize {
        log.lock().events.len()
    }

    fn seqs(events: &[Arc<Event>]) -> Vec<u64> {
        events.iter().map(|event| event.seq).collect()
    }

    #[test]
    fn the_handle_claim_keeps_every_event_for_a_late_subscriber() {
        let log = log();
        for message in ["a", "b", "c"] {
            emit(&log, message);
        }
        let mut late = log.subscribe();
        assert_eq!(seqs(&late.drain_now()), [1, 2, 3]);
        // The claim still holds them: a second late subscriber sees them too.
        assert_eq!(buffered(&log), 3);
        assert_eq!(seqs(&log.subscribe().drain_now()), [1, 2, 3]);
    }

    #[test]
    fn without_the_claim_a_stream_keeps_only_what_it_has_not_read() {
        let log = log();
        let mut stream = log.subscribe();
        emit(&log, "a");
        emit(&log, "b");
        log.release_claim();
        assert_eq!(buffered(&log), 2, "the stream has read nothing yet");
        assert_eq!(seqs(&stream.drain_now()), [1, 2]);
        assert_eq!(buffered(&log), 0);
        emit(&log, "c");
        assert_eq!(buffered(&log), 1);
        assert_eq!(seqs(&stream.drain_now()), [3]);
        assert_eq!(buffered(&log), 0);
    }

    #[test]
    fn the_slowest_stream_bounds_what_is_kept() {
        let log = log();
        let mut fast = log.subscribe();
        let slow = log.subscribe();
        log.release_claim();
        for message in ["a", "b", "c", "d"] {
            emit(&log, message);
        }
        assert_eq!(fast.drain_now().len(), 4);
        assert_eq!(buffered(&log), 4);
        assert_eq!(slow.read(1).len(), 1);
        assert_eq!(buffered(&log), 3);
        drop(slow);
        assert_eq!(buffered(&log), 0);
    }

    #[test]
    fn a_stream_drains_after_reading_while_the_claim_holds() {
        let log = log();
        let mut stream = log.subscribe();
        for message in ["a", "b", "c"] {
            emit(&log, message);
        }
        assert_eq!(seqs(&stream.read(1)), [1]);
        assert_eq!(seqs(&stream.drain_now()), [2, 3]);
        assert!(stream.drain_now().is_empty());
        emit(&log, "d");
        assert_eq!(seqs(&stream.drain_now()), [4]);
    }

    #[tokio::test]
    async fn a_late_event_does_not_reopen_a_closed_log() {
        let log = log();
        let mut stream = log.subscribe();
        emit(&log, "a");
        log.close();
        emit(&log, "after settling");
        assert_eq!(stream.next().await.map(|e| e.seq), Some(1));
        assert_eq!(stream.next().await.map(|e| e.seq), Some(2));
        assert!(stream.next().await.is_none(), "the stream ends instead of waiting");
    }

    #[test]
    fn with_no_observer_left_nothing_is_built_or_kept() {
        let log = log();
        let stream = log.subscribe();
        drop(stream);
        emit(&log, "kept for the claim");
        log.release_claim();
        assert!(!log.observed());
        assert_eq!(buffered(&log), 0);
        emit(&log, "nobody can read this");
        assert_eq!(buffered(&log), 0);
    }

    /// An event's money is the unit-carrying pair, also inside the flattened event.
    #[test]
    fn money_in_events_carries_its_unit() {
        let event = |kind| Event {
            run_id: RunId::parse("events").unwrap(),
            seq: 1,
            ts: 0,
            span_id: 1,
            parent_span_id: None,
            replayed: false,
            kind,
        };
        let spent = Money::from_nano_usd(13_000);
        let update = serde_json::to_value(event(EventKind::BudgetUpdate {
            spent,
            remaining: Some(Money::from_nano_usd(999_987_000)),
        }))
        .unwrap();
        assert_eq!(update["type"], "budget:update");
        assert_eq!(update["spent_nano_usd"], 13_000);
        assert_eq!(update["spent_usd"], 0.000013);
        assert_eq!(update["remaining_nano_usd"], 999_987_000);
        assert!(update.get("spent").is_none() && update.get("remaining").is_none(), "{update}");
        let start = serde_json::to_value(event(EventKind::RunStart {
            name: "w".into(),
            resumed: false,
            ceiling: None,
        }))
        .unwrap();
        assert!(start.get("ceiling_nano_usd").is_none() && start.get("ceiling").is_none(), "{start}");
        let end = serde_json::to_value(event(EventKind::AgentEnd {
            status: "ok".into(),
            usage: Usage::default(),
            cost: Some(spent),
            served_by: None,
            error: None,
        }))
        .unwrap();
        assert_eq!((end["cost_nano_usd"].as_i64(), end["cost_usd"].as_f64()), (Some(13_000), Some(0.000013)));
    }
}

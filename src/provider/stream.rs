//! The streaming half every HTTP adapter shares: the [`StreamDecoder`] seam, and the driver
//! that connects, reads the body under an idle timeout and cancellation, and enforces the
//! one-terminal-event contract.
//!
//! The driver is pull-based (a `futures::stream::unfold`): nothing is read from the socket
//! until the consumer asks for the next event, so a slow consumer slows the wire read instead
//! of growing a queue, and dropping the stream drops the response, which closes the connection.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::ChatEvent;
use super::http::{ErrorContext, classify_http};
use super::probe::{AttemptProbe, SentRequest};
use super::sse::{SseEvent, SseParser};
use crate::{Error, ErrorCode};

/// Turns one provider's server-sent events into canonical [`ChatEvent`]s.
///
/// A decoder is a pure state machine over events, with no IO, so it runs the same on a live
/// HTTP body and on a recorded stream. It pushes a terminal event ([`ChatEvent::Finish`] or
/// [`ChatEvent::Error`]) when the wire says the turn is over; whoever drives it stops there.
pub trait StreamDecoder: Send {
    /// Handles one event, pushing the canonical events it yields to `out`.
    fn on_event(&mut self, event: &SseEvent, out: &mut Vec<ChatEvent>);

    /// The body ended. A decoder whose wire can legitimately end without an explicit marker
    /// pushes its terminal event here; otherwise the driver reports a truncated stream.
    fn on_end(&mut self, _out: &mut Vec<ChatEvent>) {}

    /// The server answered with a whole JSON document instead of an event stream (some
    /// OpenAI-compatible servers ignore `stream: true`). The default treats it as a fault.
    fn on_json_body(&mut self, _body: &[u8], out: &mut Vec<ChatEvent>) {
        out.push(ChatEvent::Error(truncated("the server sent json instead of an event stream")));
    }
}

/// Decodes a complete recorded stream: every event up to and including the first terminal one.
///
/// Events after the terminal event are not read. A stream that ends without a terminal event
/// yields a retryable `transport` error as its last event, exactly as a live stream would.
pub fn decode_sse(decoder: &mut dyn StreamDecoder, bytes: &[u8]) -> Vec<ChatEvent> {
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    parser.feed(bytes, &mut events);
    parser.finish(&mut events);
    if parser.overflowed() {
        return vec![ChatEvent::Error(line_too_long("the recorded stream"))];
    }
    let mut out = Vec::new();
    for event in &events {
        let before = out.len();
        decoder.on_event(event, &mut out);
        if let Some(end) = out[before..].iter().position(ChatEvent::is_terminal) {
            out.truncate(before + end + 1);
            return out;
        }
    }
    decoder.on_end(&mut out);
    if let Some(end) = out.iter().position(ChatEvent::is_terminal) {
        out.truncate(end + 1);
    } else {
        out.push(ChatEvent::Error(truncated("the stream ended without its terminal event")));
    }
    out
}

/// A server that sends a line (or an event) past the parser's bound: a typed `transport`
/// error, never an unbounded buffer.
fn line_too_long(provider: &str) -> Error {
    Error::new(
        ErrorCode::Transport,
        format!(
            "{provider}: an event-stream line or event exceeds {} MiB; the stream was abandoned",
            super::sse::DEFAULT_MAX_LINE_BYTES / (1024 * 1024)
        ),
    )
}

/// A retryable transport error for a stream that broke off.
pub(crate) fn truncated(message: &str) -> Error {
    Error::new(ErrorCode::Transport, message)
}

/// A retryable `provider_unavailable` error for a stream the server closed properly but
/// without saying why the turn ended (llama.cpp answers a request that arrives while it is busy
/// with a role chunk and `[DONE]`): an incomplete turn is never an answer.
pub(crate) fn incomplete(provider: &str) -> Error {
    Error::new(
        ErrorCode::ProviderUnavailable,
        format!("{provider}: incomplete stream: it ended without a finish reason"),
    )
}

/// One HTTP call to drive: the prepared request and how to read its answer.
pub(crate) struct WireCall {
    /// The request, ready to send (headers, credentials and body set).
    pub(crate) request: reqwest::RequestBuilder,
    /// The decoder for the response's events.
    pub(crate) decoder: Box<dyn StreamDecoder>,
    /// How long the connection may stay silent (no headers, no bytes) before it counts as stalled.
    pub(crate) idle_timeout: Duration,
    /// Names the provider in errors and scrubs its credential from them.
    pub(crate) context: ErrorContext,
    /// The fault simulator's client-side record of attempts (`None` outside it).
    pub(crate) probe: Option<Arc<AttemptProbe>>,
}

/// Starts `call` lazily and streams its canonical events.
pub(crate) fn drive(call: WireCall, cancel: CancellationToken) -> BoxStream<'static, ChatEvent> {
    let idle = call.idle_timeout;
    let mut request = call.request;
    let mut probe = None;
    if let Some(sim) = call.probe {
        let id = sim.next_id();
        request = request.header(AttemptProbe::HEADER, id);
        probe = Some((sim, id, SentRequest::of(&request)));
    }
    let state = Driver {
        phase: Phase::Connect(Some(request)),
        probe,
        decoder: call.decoder,
        context: call.context,
        parser: SseParser::new(),
        sse_events: Vec::new(),
        decoded: Vec::new(),
        queue: VecDeque::new(),
        watch: Watch { idle, cancel, cancelled: None, deadline: None, last_activity: Instant::now() },
        finished: false,
        cancel_handled: false,
    };
    futures::stream::unfold(state, |mut driver| async move {
        let event = driver.next_event().await?;
        Some((event, driver))
    })
    .boxed()
}

enum Phase {
    Connect(Option<reqwest::RequestBuilder>),
    Body(reqwest::Response),
    Done,
}

struct Driver {
    phase: Phase,
    /// The simulator's probe and this request's number in it.
    probe: Option<(Arc<AttemptProbe>, u64, SentRequest)>,
    decoder: Box<dyn StreamDecoder>,
    context: ErrorContext,
    parser: SseParser,
    /// Scratch buffers reused across chunks.
    sse_events: Vec<SseEvent>,
    decoded: Vec<ChatEvent>,
    /// Events decoded but not yet handed to the consumer.
    queue: VecDeque<ChatEvent>,
    /// Cancellation and the idle timeout around every wait.
    watch: Watch,
    /// A terminal event has been queued; nothing more is read.
    finished: bool,
    /// Cancellation was noticed (and, if the turn was still running, reported).
    cancel_handled: bool,
}

impl Driver {
    /// The next event for the consumer, or `None` once the terminal event was handed out.
    async fn next_event(&mut self) -> Option<ChatEvent> {
        // A cancelled call ends at the next poll, even with decoded events (or a decoded
        // terminal event) still queued; only a terminal event already handed out stands.
        if !self.cancel_handled && self.watch.cancel.is_cancelled() {
            self.cancel_handled = true;
            if !self.finished || !self.queue.is_empty() {
                self.queue.clear();
                self.fail(cancelled());
            }
        }
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Some(event);
            }
            if self.finished {
                return None;
            }
            match &mut self.phase {
                Phase::Done => return None,
                Phase::Connect(request) => {
                    let Some(request) = request.take() else {
                        self.fail(Error::internal("the request was already sent"));
                        continue;
                    };
                    self.connect(request).await;
                }
                Phase::Body(_) => self.read_chunk().await,
            }
        }
    }

    async fn connect(&mut self, request: reqwest::RequestBuilder) {
        self.watch.touch();
        let response = match self.watch.guard(request.send()).await {
            Ok(response) => response,
            Err(interrupt) => {
                // A stall here may be a connect that never completed, or a request the
                // provider is running and answers too late: it cannot be told apart, so it
                // counts as sent. A cancellation is the caller's own (its ledger charges it).
                if matches!(interrupt, Interrupt::Stalled) {
                    self.unanswered();
                }
                return self.interrupted(interrupt, "waiting for the response");
            }
        };
        let response = match response {
            Ok(response) => response,
            Err(err) => {
                // Only a failed connect (or a request that could not be built) certainly
                // never reached the provider.
                if !err.is_connect() && !err.is_builder() {
                    self.unanswered();
                }
                return self.fail(self.context.transport(&err));
            }
        };
        let status = response.status();
        if !status.is_success() {
            let headers = response.headers().clone();
            let body = match self.read_to_end(response).await {
                Ok(body) => body,
                Err(err) => return self.fail(err),
            };
            return self.fail(classify_http(&self.context, status, &headers, &body));
        }
        // The attempt began: the provider runs (and bills) the prompt from here.
        self.queue.push_back(ChatEvent::Opened);
        let is_json = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.trim_start().starts_with("application/json"));
        if is_json {
            let body = match self.read_to_end(response).await {
                Ok(body) => body,
                Err(err) => return self.fail(err),
            };
            self.decoded.clear();
            self.decoder.on_json_body(&body, &mut self.decoded);
            self.take_decoded(true);
            return;
        }
        self.phase = Phase::Body(response);
    }

    async fn read_chunk(&mut self) {
        let Phase::Body(response) = &mut self.phase else { return };
        let chunk = match self.watch.guard(response.chunk()).await {
            Ok(chunk) => chunk,
            Err(interrupt) => return self.interrupted(interrupt, "between events"),
        };
        match chunk {
            Ok(Some(bytes)) => {
                self.parser.feed(&bytes, &mut self.sse_events);
                if self.parser.overflowed() {
                    return self.fail(line_too_long(&self.context.provider));
                }
                self.decode_pending(false);
            }
            Ok(None) => {
                self.parser.finish(&mut self.sse_events);
                self.decode_pending(true);
            }
            Err(err) => self.fail(self.context.transport(&err)),
        }
    }

    /// Feeds parsed SSE events to the decoder and queues what it yields.
    fn decode_pending(&mut self, at_end: bool) {
        self.decoded.clear();
        let mut terminal = false;
        for event in self.sse_events.drain(..) {
            let before = self.decoded.len();
            self.decoder.on_event(&event, &mut self.decoded);
            if self.decoded[before..].iter().any(ChatEvent::is_terminal) {
                terminal = true;
                break;
            }
        }
        self.sse_events.clear();
        if at_end && !terminal {
            self.decoder.on_end(&mut self.decoded);
        }
        self.take_decoded(at_end);
    }

    /// Moves decoded events to the queue, up to the first terminal one; at the end of the body,
    /// a missing terminal event becomes a retryable transport error.
    fn take_decoded(&mut self, at_end: bool) {
        for event in self.decoded.drain(..) {
            let terminal = event.is_terminal();
            self.queue.push_back(event);
            if terminal {
                self.finished = true;
                if let Phase::Body(response) = std::mem::replace(&mut self.phase, Phase::Done) {
                    drain(response);
                }
                return;
            }
        }
        if at_end {
            self.fail(truncated("the stream ended without its terminal event"));
        }
    }

    /// The request went out (or may have) and no response status came back.
    fn unanswered(&mut self) {
        if let Some((probe, id, sent)) = self.probe.take() {
            probe.record_unanswered(id, sent);
        }
        self.queue.push_back(ChatEvent::Unanswered);
    }

    fn interrupted(&mut self, interrupt: Interrupt, when: &str) {
        let error = match interrupt {
            Interrupt::Cancelled => cancelled(),
            Interrupt::Stalled => stalled(&self.context, self.watch.idle, when),
        };
        self.fail(error);
    }

    fn fail(&mut self, error: Error) {
        self.queue.push_back(ChatEvent::Error(error));
        self.finished = true;
        self.phase = Phase::Done;
    }

    /// Reads a whole (error or JSON) body, bounded in size and under the same idle timeout
    /// and cancellation as the stream.
    async fn read_to_end(&mut self, mut response: reqwest::Response) -> Result<Vec<u8>, Error> {
        const MAX_BODY: usize = 4 << 20;
        let mut body = Vec::new();
        loop {
            let chunk = match self.watch.guard(response.chunk()).await {
                Ok(chunk) => chunk,
                Err(Interrupt::Cancelled) => return Err(cancelled()),
                Err(Interrupt::Stalled) => {
                    return Err(stalled(&self.context, self.watch.idle, "reading the response body"));
                }
            };
            match chunk {
                Ok(Some(bytes)) => {
                    body.extend_from_slice(&bytes);
                    if body.len() > MAX_BODY {
                        return Ok(body);
                    }
                }
                Ok(None) => return Ok(body),
                Err(err) => return Err(self.context.transport(&err)),
            }
        }
    }
}

/// Reads what is left of a completed response (usually only the end of the chunked body) in
/// the background, so the connection goes back to the pool instead of being closed: against a
/// real provider that saves a TLS handshake on the next call. Bounded in time; without a
/// runtime the response is simply dropped.
fn drain(mut response: reqwest::Response) {
    const DRAIN_FOR: Duration = Duration::from_secs(2);
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let rest = async { while let Ok(Some(_)) = response.chunk().await {} };
            let _ = tokio::time::timeout(DRAIN_FOR, rest).await;
        });
    }
}

/// Why a guarded wait ended early.
enum Interrupt {
    Cancelled,
    Stalled,
}

/// Cancellation and the idle timeout, applied to every wait of one call.
///
/// The timer is lazy: bytes arriving only record the time, and the timer, armed once, is moved
/// forward only when it fires early. Resetting a timer for every chunk of a fast stream costs
/// more than reading the chunk.
struct Watch {
    idle: Duration,
    cancel: CancellationToken,
    /// Kept across waits, so waiting does not re-register with the token every time.
    cancelled: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    /// Created on first use, inside the runtime, so `Provider::stream` may be called outside one.
    deadline: Option<Pin<Box<Sleep>>>,
    /// When the connection last made progress.
    last_activity: Instant,
}

impl Watch {
    /// Records progress now.
    fn touch(&mut self) {
        self.last_activity = Instant::now();
    }

    /// Waits for `future` unless the call is cancelled or stays silent for the idle timeout;
    /// its completion counts as progress.
    ///
    /// # Cancel safety
    /// Dropping the returned future drops `future`; the watch itself stays usable.
    async fn guard<F: Future>(&mut self, future: F) -> Result<F::Output, Interrupt> {
        let mut future = pin!(future);
        let cancel = &self.cancel;
        let cancelled = self.cancelled.get_or_insert_with(|| Box::pin(cancel.clone().cancelled_owned()));
        let due = self.last_activity + self.idle;
        let deadline = self.deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        loop {
            tokio::select! {
                biased;
                _ = cancelled.as_mut() => return Err(Interrupt::Cancelled),
                output = future.as_mut() => {
                    self.last_activity = Instant::now();
                    return Ok(output);
                }
                _ = deadline.as_mut() => {
                    let due = self.last_activity + self.idle;
                    if Instant::now() >= due {
                        return Err(Interrupt::Stalled);
                    }
                    deadline.as_mut().reset(due);
                }
            }
        }
    }
}

/// The error of a connection silent for longer than the idle timeout.
fn stalled(context: &ErrorContext, idle: Duration, when: &str) -> Error {
    Error::new(
        ErrorCode::Transport,
        format!("{} stream stalled {when}: no bytes for {} ms", context.provider, idle.as_millis()),
    )
}

/// The terminal error of a cancelled call.
pub(crate) fn cancelled() -> Error {
    Error::new(ErrorCode::Cancelled, "the call was cancelled")
}

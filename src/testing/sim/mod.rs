//! `cairn::testing::sim`: a fault simulator. A fake model provider over real HTTP that speaks
//! Anthropic Messages, OpenAI Chat Completions and OpenAI Responses event streams (shaped like
//! the recorded streams in the fixtures), meets each request with a fault drawn from a seed,
//! and is the **billing authority**: it records what every attempt would cost at its provider,
//! so a test can hold the engine's journal against the bill.
//!
//! A call tells the simulator what conversation it is with a directive in its prompt
//! ([`Directive`], `<<sim tag=c3 tools=2 json=1 repair=1 out=40>>`): how many tool turns, whether
//! the answer is JSON and whether its first JSON breaks the schema. The simulator decides only
//! the faults, from `(seed, tag, turn, attempt)`, so a seed reproduces exactly
//! ([`FaultMix::draw`]).
//!
//! # The faults
//! An HTTP 429, 500, 503 or (Anthropic) 529 before any stream byte, with `Retry-After`, with
//! `retry-after-ms` or with neither; a connection that drops after k output tokens; a stream
//! that goes silent after k tokens (past the client's idle timeout); a malformed chunk after k
//! tokens; an error event inside the stream; usage missing (OpenAI dialects) or reported only at
//! the end (Anthropic); a refusal; a turn cut at `max_tokens`. At most
//! [`FaultMix::max_faulty_attempts`] attempts of one turn meet a fault, so retries end.
//!
//! # The billing rules
//! Tokens are the simulator's own: four characters a token, rounded up, over the prompt's text
//! (system, message text, tool calls' names and arguments, tool results; not tool
//! definitions or schemas) and over the output streamed (text, refusal text, tool arguments).
//! Every answer is ASCII. Each attempt is billed on its own, at the price of the model named in
//! its body ([`SimConfig::prices`]), as its provider bills:
//! - **refused before any stream byte** (any HTTP error status): nothing. No provider bills a
//!   request it did not run ([`AttemptEnd::Refused`]).
//! - **finished with usage on the wire** (including a `max_tokens` cut, a refusal, Anthropic's
//!   usage reported only in `message_delta`, and a Responses `response.failed` that carries its
//!   usage): the usage reported, which is the prompt plus the output streamed
//!   ([`AttemptEnd::Reported`]). A client must charge this exactly.
//! - **finished without usage on the wire** (an OpenAI-dialect server that ignores
//!   `include_usage`): the prompt plus the output streamed ([`AttemptEnd::Unreported`]).
//! - **broken after it began** (dropped, stalled, malformed, an error event): the prompt plus
//!   the output streamed before the break ([`AttemptEnd::Broken`]). An Anthropic stream told the
//!   client the prompt's tokens in `message_start`; an OpenAI stream told it nothing.
//!
//! For the last two a client can only estimate; [`Attempt::tolerance`] bounds how far above
//! the bill a sound estimate may lie (the whole request body at four characters a token, plus
//! four output tokens). An attempt whose response the client never saw (its idle timeout fired
//! before the headers: [`Attempt::unanswered`], recorded client-side by the adapters this
//! simulator builds, since the server cannot know) may be charged up to its whole grant. A
//! client must never charge *less* than the bill: that would let real
//! spend pass its ceiling unseen. A provider never streams past the request's `max_tokens`.
//!
//! # Example
//! ```
//! use std::sync::Arc;
//! use cairn::{Price, PriceTable};
//! use cairn::testing::sim::{Directive, FaultMix, SimConfig, Simulator};
//! use cairn::{AgentOptions, Engine, MemoryStore, Money, RunOptions, Workflow};
//!
//! let price = Price::flat(Money::from_usd(3.0).unwrap(), Money::from_usd(15.0).unwrap());
//! let config = SimConfig::new(7).faults(FaultMix::none()).price("claude-sim", price);
//! let sim = Simulator::start(config).unwrap();
//! let mut prices = PriceTable::shipped();
//! prices.set("anth:claude-sim", price);
//! let store = Arc::new(MemoryStore::new());
//! let engine = Engine::builder(store)
//!     .provider(Arc::new(sim.anthropic("anth").unwrap()))
//!     .prices(prices)
//!     .build()
//!     .unwrap();
//! let wf = Workflow::new("one", |ctx, _args| async move {
//!     let prompt = format!("say hello {}", Directive::text("c0", 12).render());
//!     ctx.agent(&prompt, AgentOptions { model: Some("anth:claude-sim".into()), ..AgentOptions::default() }).await
//! });
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let outcome = engine.run(&wf, serde_json::json!({}), RunOptions::default()).unwrap().result().await.unwrap();
//! // The engine charged exactly what the provider billed.
//! assert_eq!(outcome.cost.total.cost, sim.bill().total);
//! # });
//! ```

mod bill;
mod config;
mod faults;
mod request;
mod server;
mod wire;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

pub use bill::{Attempt, AttemptEnd, Bill};
pub use config::SimConfig;
pub use faults::{Fault, FaultMix, RetryAfter};
pub use request::{Directive, WireDialect, output_tokens, prompt_tokens};

use crate::Error;
use crate::provider::ApiKey;
use crate::provider::anthropic::AnthropicProvider;
use crate::provider::openai_chat::OpenAiChatProvider;
use crate::provider::openai_responses::OpenAiResponsesProvider;

/// A running simulator. It serves on `127.0.0.1` from a thread and runtime of its own, so it
/// outlives a runtime a test drops to simulate a crash; dropping the simulator stops it.
#[derive(Debug)]
pub struct Simulator {
    shared: Arc<server::Shared>,
    base_url: String,
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl std::fmt::Debug for server::Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Simulator {
    /// Starts a simulator on a free local port.
    ///
    /// # Errors
    /// `internal` when no port can be bound or the server's runtime cannot start.
    pub fn start(config: SimConfig) -> Result<Simulator, Error> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|e| Error::internal(format!("the simulator cannot bind a port: {e}")))?;
        let address = listener
            .local_addr()
            .map_err(|e| Error::internal(format!("the simulator has no address: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::internal(format!("the simulator's socket: {e}")))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Error::internal(format!("the simulator's runtime: {e}")))?;
        let shared = Arc::new(server::Shared {
            config,
            log: Mutex::new(server::Log::default()),
            probe: Arc::default(),
        });
        let router = server::router(shared.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, is_ready) = std::sync::mpsc::channel::<Result<(), String>>();
        std::thread::Builder::new()
            .name("cairn-sim".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => listener,
                        Err(e) => {
                            let _ = ready.send(Err(e.to_string()));
                            return;
                        }
                    };
                    let _ = ready.send(Ok(()));
                    tokio::select! {
                        _ = axum::serve(listener, router) => {}
                        _ = stopped => {}
                    }
                });
                runtime.shutdown_background();
            })
            .map_err(|e| Error::internal(format!("the simulator's thread: {e}")))?;
        match is_ready.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(Error::internal(format!("the simulator cannot listen: {e}"))),
            Err(_) => return Err(Error::internal("the simulator's thread ended before listening")),
        }
        Ok(Simulator { shared, base_url: format!("http://{address}"), stop: Mutex::new(Some(stop)) })
    }

    /// The server's base URL (`http://127.0.0.1:PORT`); OpenAI dialects live under `/v1`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// An Anthropic adapter registered as `name`, pointed at the simulator.
    ///
    /// # Errors
    /// `internal` when the HTTP client cannot be built.
    pub fn anthropic(&self, name: &str) -> Result<AnthropicProvider, Error> {
        Ok(AnthropicProvider::new(ApiKey::new("sim-key"))?
            .with_base_url(&self.base_url)
            .with_name(name)
            .with_idle_timeout(self.shared.config.idle_timeout)
            .with_attempt_probe(self.shared.probe.clone()))
    }

    /// An OpenAI Chat Completions adapter registered as `name`, pointed at the simulator.
    ///
    /// # Errors
    /// `internal` when the HTTP client cannot be built.
    pub fn openai_chat(&self, name: &str) -> Result<OpenAiChatProvider, Error> {
        Ok(OpenAiChatProvider::new(ApiKey::new("sim-key"))?
            .with_base_url(format!("{}/v1", self.base_url))
            .with_name(name)
            .with_idle_timeout(self.shared.config.idle_timeout)
            .with_attempt_probe(self.shared.probe.clone()))
    }

    /// An OpenAI Responses adapter registered as `name`, pointed at the simulator.
    ///
    /// # Errors
    /// `internal` when the HTTP client cannot be built.
    pub fn openai_responses(&self, name: &str) -> Result<OpenAiResponsesProvider, Error> {
        Ok(OpenAiResponsesProvider::new(ApiKey::new("sim-key"))?
            .with_base_url(format!("{}/v1", self.base_url))
            .with_name(name)
            .with_idle_timeout(self.shared.config.idle_timeout)
            .with_attempt_probe(self.shared.probe.clone()))
    }

    /// Every attempt served so far, in arrival order.
    ///
    /// Each is judged from the client's side where the server cannot know: an attempt whose
    /// response the client never saw (recorded by the adapters this simulator built) may be
    /// charged up to its grant ([`Attempt::unanswered_tolerance`]), never less than the bill.
    ///
    /// A request the client recorded unanswered that never arrived (lost on the way, or one a
    /// killed client had not finished writing) is listed last, billed nothing, with its grant as
    /// its tolerance: the client could not know it was never run.
    pub fn attempts(&self) -> Vec<Attempt> {
        let mut attempts = self.served();
        let seen: std::collections::HashSet<u64> = attempts.iter().filter_map(|a| a.client_id).collect();
        for (id, sent) in self.shared.probe.unanswered_requests() {
            if !seen.contains(&id) {
                let seq = attempts.len() as u64;
                attempts.extend(server::unseen(&self.shared, seq, id, &sent.path, &sent.body));
            }
        }
        attempts
    }

    /// Every attempt the server saw, in arrival order.
    fn served(&self) -> Vec<Attempt> {
        self.shared
            .log()
            .attempts
            .iter()
            .map(|(attempt, delivered)| {
                let delivered = delivered.load(Ordering::SeqCst);
                // A client that hung up before a reported usage reached it (a live cut at the
                // ceiling, a cancellation, a kill) could only estimate: the estimate's
                // tolerance applies.
                let cut = !delivered && attempt.end == AttemptEnd::Reported;
                let unanswered = attempt.client_id.is_some_and(|id| self.shared.probe.unanswered(id));
                let tolerance = if cut { attempt.drop_tolerance } else { attempt.tolerance };
                Attempt {
                    delivered,
                    unanswered,
                    tolerance: if unanswered {
                        tolerance.max(attempt.unanswered_tolerance)
                    } else {
                        tolerance
                    },
                    ..attempt.clone()
                }
            })
            .collect()
    }

    /// The bill of every attempt so far.
    pub fn bill(&self) -> Bill {
        Bill::of(&self.attempts())
    }

    /// Starts counting arrivals at [`Simulator::base_url`] as segment `segment` (a harness's
    /// count of starts and resumes).
    pub fn begin_segment(&self, segment: u32) {
        self.shared.log().segment = segment;
    }

    /// A simulator whose adapters say which segment they belong to: every request they send
    /// is counted in `segment`, however late it arrives (a request a killed process had already
    /// written lands in the killed segment, not in the resume's).
    pub fn in_segment(&self, segment: u32) -> SegmentView<'_> {
        SegmentView { sim: self, base_url: format!("{}/segment/{segment}", self.base_url) }
    }
}

/// The adapters of one segment (see [`Simulator::in_segment`]).
#[derive(Debug)]
pub struct SegmentView<'a> {
    sim: &'a Simulator,
    base_url: String,
}

impl SegmentView<'_> {
    /// An Anthropic adapter registered as `name` whose requests count in this segment.
    ///
    /// # Errors
    /// `internal` when the HTTP client cannot be built.
    pub fn anthropic(&self, name: &str) -> Result<AnthropicProvider, Error> {
        Ok(self.sim.anthropic(name)?.with_base_url(&self.base_url))
    }

    /// An OpenAI Chat Completions adapter registered as `name` whose requests count in this segment.
    ///
    /// # Errors
    /// `internal` when the HTTP client cannot be built.
    pub fn openai_chat(&self, name: &str) -> Result<OpenAiChatProvider, Error> {
        Ok(self.sim.openai_chat(name)?.with_base_url(format!("{}/v1", self.base_url)))
    }

    /// An OpenAI Responses adapter registered as `name` whose requests count in this segment.
    ///
    /// # Errors
    /// `internal` when the HTTP client cannot be built.
    pub fn openai_responses(&self, name: &str) -> Result<OpenAiResponsesProvider, Error> {
        Ok(self.sim.openai_responses(name)?.with_base_url(format!("{}/v1", self.base_url)))
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        let stop = self.stop.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(stop) = stop {
            let _ = stop.send(());
        }
    }
}

//! The ledger of one agent call: every wire attempt it makes, in one place.
//!
//! An attempt is *reserved* before its request goes out (the turn guard grants its worst case
//! against what the call has already spent), *observes* every usage delta while it streams
//! (text, reasoning and tool-argument characters, and the provider's running usage), and ends
//! *settled* (the provider's billed usage of a finished turn) or *abandoned* (a dropped,
//! failed, cut or cancelled stream: its observed usage, marked approximate). Either way its
//! cost is spent the moment the attempt ends, priced at the model that served it, so the next
//! attempt's guard and every live cut see it at once, whatever happens to the call. An attempt
//! the provider refused before any stream byte (an HTTP error, a 529) costs nothing: no
//! provider bills a request it did not run; the ledger counts it as refused. One sent and never
//! answered (no response status: [`ChatEvent::Unanswered`]) is the opposite case: the provider
//! may have run it whole, so it is charged its whole grant (the input estimate plus the output
//! cap it was sent with), marked approximate, and counted as unanswered.
//!
//! Every guard reads [`Ledger::spent`] and [`Ledger::in_flight`]: the turn guard grants the
//! next attempt against the first, the live cut compares the second with the ceiling (through
//! [`super::BudgetHooks`], which puts it on the call's reservation where siblings see it).
//!
//! The ledger sits on every stream event of every attempt, so it is kept cheap (#23: at most
//! 1 µs per attempt, `benches/ledger.rs`) without changing a result: the running estimate is
//! priced again only when an event changes what is priced (the streamed tokens or the
//! provider's running usage), [`Price::cost`] takes a 64-bit path, and the models that served
//! the call are interned, so an attempt by a model already seen allocates nothing.

use crate::model::Price;
use crate::money::Money;
use crate::provider::{ChatEvent, ChatRequest};
use crate::usage::{AttemptEnd, AttemptRecord, Usage};

/// The attempt on the wire.
#[derive(Debug)]
struct Open {
    /// Its model, as an index into [`Ledger::models`].
    model: usize,
    price: Option<Price>,
    /// The estimate weight streamed of every kind billed as output (text, reasoning, tool
    /// arguments).
    streamed_chars: usize,
    /// The provider's latest running usage.
    live: Usage,
    /// Whether any stream event arrived.
    observed: bool,
    /// The output cap the attempt was sent with (its grant's output).
    output_cap: u32,
    /// The request went out and no response status came back ([`ChatEvent::Unanswered`]).
    unanswered: bool,
    /// The request's input estimate, made once per attempt (it walks the conversation).
    input_estimate: std::cell::OnceCell<u64>,
    /// The running estimate's cost as of the last event that changed what is priced; `None`
    /// before the first observation and for an unpriced model.
    running: Option<Money>,
}

impl Open {
    /// Adds streamed estimate weight; whether the streamed token count changed.
    fn stream(&mut self, weight: usize) -> bool {
        let before = crate::provider::estimate_tokens_for_chars(self.streamed_chars);
        self.streamed_chars += weight;
        crate::provider::estimate_tokens_for_chars(self.streamed_chars) != before
    }

    /// What the running estimate costs now.
    fn price_running(&self, request: &ChatRequest) -> Option<Money> {
        Some(self.price?.cost(&self.partial(request)))
    }

    fn partial(&self, request: &ChatRequest) -> Usage {
        let estimate =
            || *self.input_estimate.get_or_init(|| crate::provider::estimate_request_tokens(request));
        super::cost::partial_usage_with(estimate, self.streamed_chars, self.live)
    }
}

/// The ledger of one agent call.
#[derive(Debug)]
pub(crate) struct Ledger {
    /// The cost of every ended priced attempt: an unpriced attempt never hides what the
    /// priced ones were charged.
    spent: Money,
    /// Whether an unpriced model served usage (the call's cost is then unknown).
    unpriced: bool,
    /// The usage of every ended attempt.
    usage: Usage,
    attempts: Vec<Attempt>,
    /// Every model that served an attempt, each once (attempts name them by index).
    models: Vec<String>,
    open: Option<Open>,
}

/// An ended attempt, as the ledger keeps it.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    /// Its model, as an index into [`Ledger::models`].
    model: usize,
    end: AttemptEnd,
    usage: Usage,
    cost: Option<Money>,
}

impl Default for Ledger {
    fn default() -> Ledger {
        Ledger::new()
    }
}

impl Ledger {
    /// An empty ledger.
    pub(crate) fn new() -> Ledger {
        Ledger {
            spent: Money::ZERO,
            unpriced: false,
            usage: Usage::default(),
            attempts: Vec::new(),
            models: Vec::new(),
            open: None,
        }
    }

    /// What the ended priced attempts cost (an unpriced attempt's usage adds nothing: it
    /// cannot be priced, and it never hides what the priced ones were charged).
    pub(crate) fn spent(&self) -> Money {
        self.spent
    }

    /// What the ended attempts cost; `None` once any was served by an unpriced model.
    pub(crate) fn cost(&self) -> Option<Money> {
        (!self.unpriced).then_some(self.spent)
    }

    /// The usage of every ended attempt.
    pub(crate) fn usage(&self) -> Usage {
        self.usage
    }

    /// Attempts refused before any stream byte.
    pub(crate) fn refused(&self) -> u32 {
        self.attempts.iter().filter(|a| a.end == AttemptEnd::Refused).count() as u32
    }

    /// Attempts sent and never answered (no response status), each charged its grant.
    pub(crate) fn unanswered(&self) -> u32 {
        self.attempts.iter().filter(|a| a.end == AttemptEnd::Unanswered).count() as u32
    }

    /// Opens an attempt served by `model` at `price`, sent with `output_cap` output tokens
    /// (after the turn guard granted it).
    pub(crate) fn open(&mut self, model: &str, price: Option<Price>, output_cap: u32) {
        // A call's attempts are served by one model, or a few on failover: the latest first.
        let model = match self.models.iter().rposition(|seen| seen == model) {
            Some(index) => index,
            None => {
                self.models.push(model.to_owned());
                self.models.len() - 1
            }
        };
        self.open = Some(Open {
            model,
            price,
            streamed_chars: 0,
            live: Usage::default(),
            observed: false,
            output_cap,
            unanswered: false,
            input_estimate: std::cell::OnceCell::new(),
            running: None,
        });
    }

    /// Observes one stream event of the open attempt; returns what the call has spent so
    /// far, this attempt's running estimate included (`None` when its model is unpriced).
    pub(crate) fn observe(&mut self, event: &ChatEvent, request: &ChatRequest) -> Option<Money> {
        let open = self.open.as_mut()?;
        if *event == ChatEvent::Unanswered {
            // No response: nothing was observed, but the request may be running whole.
            open.unanswered = true;
            return self.in_flight(request);
        }
        open.observed = true;
        let changed = match event {
            ChatEvent::TextDelta(delta) | ChatEvent::ReasoningDelta(delta) => {
                open.stream(crate::provider::estimate_weight(delta))
            }
            ChatEvent::ToolCallDelta { arguments_delta, .. } => {
                open.stream(crate::provider::estimate_weight(arguments_delta))
            }
            ChatEvent::Usage(usage) => std::mem::replace(&mut open.live, *usage) != *usage,
            _ => false,
        };
        // The estimate depends on nothing else while the attempt is open (its input estimate
        // is made once): an event that changed none of it leaves its cost as it was.
        if changed || open.running.is_none() {
            open.running = open.price_running(request);
        }
        self.in_flight(request)
    }

    /// What the call has spent, the open attempt's running estimate included; `None` when
    /// the open attempt's model is unpriced.
    pub(crate) fn in_flight(&self, request: &ChatRequest) -> Option<Money> {
        let open = self.open.as_ref()?;
        let running = match open.running {
            Some(running) => running,
            None => open.price_running(request)?,
        };
        Some(self.spent().saturating_add(running))
    }

    /// Settles the open attempt with the provider's billed usage; returns it.
    pub(crate) fn settle(&mut self, billed: Usage) -> Usage {
        self.close(AttemptEnd::Settled, billed);
        billed
    }

    /// Abandons the open attempt: its observed usage (approximate) is spent now; an attempt
    /// sent and never answered is charged its whole grant (approximate); one that saw no
    /// stream byte otherwise was refused and costs nothing. Returns what it charged.
    pub(crate) fn abandon(&mut self, request: &ChatRequest) -> Usage {
        let Some(open) = &self.open else { return Usage::default() };
        if open.unanswered && !open.observed {
            let input_tokens =
                *open.input_estimate.get_or_init(|| crate::provider::estimate_request_tokens(request));
            let grant = Usage {
                input_tokens,
                output_tokens: u64::from(open.output_cap),
                approximate: true,
                ..Usage::default()
            };
            self.close(AttemptEnd::Unanswered, grant);
            return grant;
        }
        if !open.observed {
            self.close(AttemptEnd::Refused, Usage::default());
            return Usage::default();
        }
        let partial = open.partial(request);
        self.close(AttemptEnd::Abandoned, partial);
        partial
    }

    /// Abandons the open attempt whatever it saw (a cancelled or cut stream: the provider
    /// ran it, so its input is charged at the estimate even before a byte arrived).
    pub(crate) fn abandon_observed(&mut self, request: &ChatRequest) -> Usage {
        if let Some(open) = &mut self.open {
            open.observed = true;
        }
        self.abandon(request)
    }

    fn close(&mut self, end: AttemptEnd, usage: Usage) {
        let Some(open) = self.open.take() else { return };
        let cost = open.price.map(|p| p.cost(&usage));
        if end != AttemptEnd::Refused {
            self.usage += usage;
            match cost {
                Some(cost) => self.spent = self.spent.saturating_add(cost),
                None => self.unpriced = true,
            }
        }
        self.attempts.push(Attempt { model: open.model, end, usage, cost });
    }

    /// Where the next attempt will be, to measure a turn by ([`Ledger::since`]).
    pub(crate) fn mark(&self) -> usize {
        self.attempts.len()
    }

    /// What the attempts ended since `mark` were charged: their usage and cost, priced at the
    /// model that served each (`None` when one was unpriced).
    pub(crate) fn since(&self, mark: usize) -> (Usage, Option<Money>) {
        let mut usage = Usage::default();
        let mut cost = Some(Money::ZERO);
        for attempt in self.attempts.iter().skip(mark).filter(|a| a.end != AttemptEnd::Refused) {
            usage += attempt.usage;
            cost = cost.zip(attempt.cost).map(|(total, one)| total.saturating_add(one));
        }
        (usage, cost)
    }

    /// What the attempts ended since `mark` were charged, by the model that served each (a
    /// checkpoint keeps it, so a resume carries what its turns cost, not their usage priced at
    /// the requested model).
    pub(crate) fn spend_since(&self, mark: usize) -> super::spend::Spend {
        let mut spend = super::spend::Spend::default();
        for attempt in self.attempts.iter().skip(mark).filter(|a| a.end != AttemptEnd::Refused) {
            spend.add(&self.models[attempt.model], attempt.usage, attempt.cost);
        }
        spend
    }

    /// The attempts worth journaling: all of them when more than one model served the call
    /// (so the cost report can split it by model), none otherwise (the entry's `served_by`,
    /// `usage` and `cost` say everything).
    pub(crate) fn journaled_attempts(&self) -> Vec<AttemptRecord> {
        let charged = || self.attempts.iter().filter(|a| a.end != AttemptEnd::Refused);
        let mut models = charged().map(|a| a.model);
        let Some(first) = models.next() else { return Vec::new() };
        if models.all(|m| m == first) {
            return Vec::new();
        }
        charged()
            .map(|a| AttemptRecord {
                model: self.models[a.model].clone(),
                end: a.end,
                usage: a.usage,
                cost: a.cost,
            })
            .collect()
    }
}

/// The ledger's work for `attempts` wire attempts of one call, each observing `deltas` text
/// deltas of 100 characters and a running usage, then settling (every fourth abandoned after a
/// drop): the workload of `benches/ledger.rs`. Returns what was spent.
#[doc(hidden)]
pub fn bench_attempts(attempts: u32, deltas: u32) -> Money {
    let request = ChatRequest::new("m", vec![crate::provider::Message::user("write at length")]);
    let price = Price::flat(Money::from_nano_usd(1_000), Money::from_nano_usd(10_000));
    let text = ChatEvent::TextDelta("x".repeat(100));
    let mut ledger = Ledger::new();
    for n in 0..attempts {
        ledger.open("p:m", Some(price), 4096);
        for k in 0..deltas {
            std::hint::black_box(ledger.observe(&text, &request));
            if k == 0 {
                let live = Usage { input_tokens: 10, output_tokens: 1, ..Usage::default() };
                std::hint::black_box(ledger.observe(&ChatEvent::Usage(live), &request));
            }
        }
        if n % 4 == 3 {
            ledger.abandon(&request);
        } else {
            ledger.settle(Usage {
                input_tokens: 10,
                output_tokens: u64::from(deltas) * 25,
                ..Usage::default()
            });
        }
    }
    ledger.spent()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Message;

    fn price(output_per_mtok: f64) -> Price {
        Price::flat(Money::ZERO, Money::from_usd(output_per_mtok).unwrap())
    }

    #[test]
    fn a_failed_attempt_is_spent_when_it_ends_and_a_refusal_costs_nothing() {
        let request = ChatRequest::new("m", vec![Message::user("hi")]);
        let mut ledger = Ledger::new();
        ledger.open("p:a", Some(price(1000.0)), 450);
        ledger.observe(&ChatEvent::TextDelta("x".repeat(1600)), &request);
        // 400 tokens at $1000/M in flight.
        assert_eq!(ledger.in_flight(&request), Some(Money::from_usd(0.4).unwrap()));
        let charged = ledger.abandon(&request);
        assert_eq!(charged.output_tokens, 400);
        assert!(charged.approximate);
        assert_eq!(ledger.spent(), Money::from_usd(0.4).unwrap());
        // A refused request (no stream byte) adds nothing.
        ledger.open("p:a", Some(price(1000.0)), 450);
        ledger.abandon(&request);
        assert_eq!(ledger.spent(), Money::from_usd(0.4).unwrap());
        assert_eq!(ledger.refused(), 1);
        // A failover's attempt is priced at its own model.
        ledger.open("p:b", Some(price(10.0)), 450);
        ledger.settle(Usage { output_tokens: 1000, ..Usage::default() });
        assert_eq!(ledger.spent(), Money::from_usd(0.41).unwrap());
        let attempts = ledger.journaled_attempts();
        assert_eq!(attempts.len(), 2);
        // A turn is measured by the attempts it made: here the last two (a refusal, then b).
        let (usage, cost) = ledger.since(1);
        assert_eq!((usage.output_tokens, cost), (1000, Some(Money::from_usd(0.01).unwrap())));
        ledger.open("p:c", None, 450);
        ledger.settle(Usage { output_tokens: 1, ..Usage::default() });
        assert_eq!(ledger.since(1).1, None, "an unpriced attempt leaves the turn unpriced");
        assert_eq!(attempts[0].model, "p:a");
        assert_eq!(attempts[1].cost, Some(Money::from_usd(0.01).unwrap()));
    }

    #[test]
    fn an_unanswered_attempt_is_charged_its_grant_and_a_refusal_nothing() {
        let request = ChatRequest::new("m", vec![Message::user("hi")]);
        let mut ledger = Ledger::new();
        ledger.open("p:a", Some(price(1000.0)), 400);
        ledger.observe(&ChatEvent::Unanswered, &request);
        let charged = ledger.abandon(&request);
        let input = crate::provider::estimate_request_tokens(&request);
        assert_eq!((charged.input_tokens, charged.output_tokens), (input, 400));
        assert!(charged.approximate);
        // The whole output cap at $1000/M, the input free at this price.
        assert_eq!(ledger.spent(), Money::from_usd(0.4).unwrap());
        assert_eq!((ledger.unanswered(), ledger.refused()), (1, 0));
        // A refusal (no `Unanswered`, no stream byte) still costs nothing.
        ledger.open("p:a", Some(price(1000.0)), 400);
        ledger.abandon(&request);
        assert_eq!(ledger.spent(), Money::from_usd(0.4).unwrap());
        assert_eq!((ledger.unanswered(), ledger.refused()), (1, 1));
        assert_eq!(ledger.since(0).0.output_tokens, 400, "a turn's charge counts its unanswered attempt");
    }

    fn event() -> impl proptest::strategy::Strategy<Value = ChatEvent> {
        use proptest::prelude::*;
        prop_oneof![
            "[a-z\u{e9}\u{65e5} ]{0,9}".prop_map(ChatEvent::TextDelta),
            "[a-z]{0,5}".prop_map(ChatEvent::ReasoningDelta),
            (0u64..50, 0u64..50, 0u64..5).prop_map(|(input_tokens, output_tokens, cache_read_tokens)| {
                ChatEvent::Usage(Usage { input_tokens, output_tokens, cache_read_tokens, ..Usage::default() })
            }),
            "[a-z{}]{0,6}".prop_map(|arguments_delta| ChatEvent::ToolCallDelta {
                wire_id: "w".into(),
                arguments_delta
            }),
            Just(ChatEvent::ToolCallStart { wire_id: "w".into(), name: "t".into() }),
            Just(ChatEvent::Opened),
            Just(ChatEvent::Unanswered),
        ]
    }

    proptest::proptest! {
        /// What `observe` returns, from the estimate it keeps, is what pricing the attempt's
        /// running estimate afresh gives after every event, across attempts and models.
        #[test]
        fn the_kept_estimate_is_always_the_fresh_one(
            attempts in proptest::collection::vec(
                (0usize..3, proptest::collection::vec(event(), 0..12), proptest::bool::ANY),
                1..5,
            ),
        ) {
            let request = ChatRequest::new("m", vec![Message::user("write at length")]);
            let prices = [Some(price(1000.0)), Some(price(3.0)), None];
            let mut ledger = Ledger::new();
            for (model, events, settle) in attempts {
                ledger.open(["p:a", "p:b", "p:c"][model], prices[model], 450);
                for event in &events {
                    let kept = ledger.observe(event, &request);
                    let open = ledger.open.as_ref().unwrap();
                    let fresh = open.price_running(&request).map(|r| ledger.spent().saturating_add(r));
                    proptest::prop_assert_eq!(kept, fresh);
                }
                if settle {
                    ledger.settle(Usage { output_tokens: 7, ..Usage::default() });
                } else {
                    ledger.abandon(&request);
                }
            }
        }
    }
}

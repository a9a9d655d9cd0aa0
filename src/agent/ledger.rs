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
//! provider bills a request it did not run; the ledger counts it as refused.
//!
//! Every guard reads [`Ledger::spent`] and [`Ledger::in_flight`]: the turn guard grants the
//! next attempt against the first, the live cut compares the second with the ceiling (through
//! [`super::BudgetHooks`], which puts it on the call's reservation where siblings see it).

use crate::model::Price;
use crate::money::Money;
use crate::provider::{ChatEvent, ChatRequest};
use crate::usage::{AttemptEnd, AttemptRecord, Usage};

/// The attempt on the wire.
#[derive(Debug)]
struct Open {
    model: String,
    price: Option<Price>,
    /// The estimate weight streamed of every kind billed as output (text, reasoning, tool
    /// arguments).
    streamed_chars: usize,
    /// The provider's latest running usage.
    live: Usage,
    /// Whether any stream event arrived.
    observed: bool,
    /// The request's input estimate, made once per attempt (it walks the conversation).
    input_estimate: std::cell::OnceCell<u64>,
}

impl Open {
    fn partial(&self, request: &ChatRequest) -> Usage {
        let estimate =
            || *self.input_estimate.get_or_init(|| crate::provider::estimate_request_tokens(request));
        super::cost::partial_usage_with(estimate, self.streamed_chars, self.live)
    }
}

/// The ledger of one agent call.
#[derive(Debug)]
pub(crate) struct Ledger {
    /// The cost of every ended attempt; `None` once an unpriced model served usage.
    spent: Option<Money>,
    /// The usage of every ended attempt.
    usage: Usage,
    attempts: Vec<AttemptRecord>,
    open: Option<Open>,
}

impl Default for Ledger {
    fn default() -> Ledger {
        Ledger::new()
    }
}

impl Ledger {
    /// An empty ledger.
    pub(crate) fn new() -> Ledger {
        Ledger { spent: Some(Money::ZERO), usage: Usage::default(), attempts: Vec::new(), open: None }
    }

    /// What the ended attempts cost (zero for unpriced usage: an unpriced model's guard is
    /// not priced).
    pub(crate) fn spent(&self) -> Money {
        self.spent.unwrap_or(Money::ZERO)
    }

    /// What the ended attempts cost; `None` once any was served by an unpriced model.
    pub(crate) fn cost(&self) -> Option<Money> {
        self.spent
    }

    /// The usage of every ended attempt.
    pub(crate) fn usage(&self) -> Usage {
        self.usage
    }

    /// Attempts refused before any stream byte.
    pub(crate) fn refused(&self) -> u32 {
        self.attempts.iter().filter(|a| a.end == AttemptEnd::Refused).count() as u32
    }

    /// Opens an attempt served by `model` at `price` (after the turn guard granted it).
    pub(crate) fn open(&mut self, model: &str, price: Option<Price>) {
        self.open = Some(Open {
            model: model.to_owned(),
            price,
            streamed_chars: 0,
            live: Usage::default(),
            observed: false,
            input_estimate: std::cell::OnceCell::new(),
        });
    }

    /// Observes one stream event of the open attempt; returns what the call has spent so
    /// far, this attempt's running estimate included (`None` when its model is unpriced).
    pub(crate) fn observe(&mut self, event: &ChatEvent, request: &ChatRequest) -> Option<Money> {
        let open = self.open.as_mut()?;
        open.observed = true;
        match event {
            ChatEvent::TextDelta(delta) | ChatEvent::ReasoningDelta(delta) => {
                open.streamed_chars += crate::provider::estimate_weight(delta)
            }
            ChatEvent::ToolCallDelta { arguments_delta, .. } => {
                open.streamed_chars += crate::provider::estimate_weight(arguments_delta)
            }
            ChatEvent::Usage(usage) => open.live = *usage,
            _ => {}
        }
        self.in_flight(request)
    }

    /// What the call has spent, the open attempt's running estimate included; `None` when
    /// the open attempt's model is unpriced.
    pub(crate) fn in_flight(&self, request: &ChatRequest) -> Option<Money> {
        let open = self.open.as_ref()?;
        let price = open.price?;
        let partial = open.partial(request);
        Some(self.spent().saturating_add(price.cost(&partial)))
    }

    /// Settles the open attempt with the provider's billed usage; returns it.
    pub(crate) fn settle(&mut self, billed: Usage) -> Usage {
        self.close(AttemptEnd::Settled, billed);
        billed
    }

    /// Abandons the open attempt: its observed usage (approximate) is spent now; an attempt
    /// that saw no stream byte was refused and costs nothing. Returns what it charged.
    pub(crate) fn abandon(&mut self, request: &ChatRequest) -> Usage {
        let Some(open) = &self.open else { return Usage::default() };
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
            self.spent = match (self.spent, cost) {
                (Some(total), Some(cost)) => Some(total.saturating_add(cost)),
                _ => None,
            };
        }
        self.attempts.push(AttemptRecord { model: open.model, end, usage, cost });
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

    /// The attempts worth journaling: all of them when more than one model served the call
    /// (so the cost report can split it by model), none otherwise (the entry's `served_by`,
    /// `usage` and `cost` say everything).
    pub(crate) fn journaled_attempts(&self) -> Vec<AttemptRecord> {
        let charged = || self.attempts.iter().filter(|a| a.end != AttemptEnd::Refused);
        let mut models = charged().map(|a| a.model.as_str());
        let Some(first) = models.next() else { return Vec::new() };
        if models.all(|m| m == first) {
            return Vec::new();
        }
        charged().cloned().collect()
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
        ledger.open("p:m", Some(price));
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
        ledger.open("p:a", Some(price(1000.0)));
        ledger.observe(&ChatEvent::TextDelta("x".repeat(1600)), &request);
        // 400 tokens at $1000/M in flight.
        assert_eq!(ledger.in_flight(&request), Some(Money::from_usd(0.4).unwrap()));
        let charged = ledger.abandon(&request);
        assert_eq!(charged.output_tokens, 400);
        assert!(charged.approximate);
        assert_eq!(ledger.spent(), Money::from_usd(0.4).unwrap());
        // A refused request (no stream byte) adds nothing.
        ledger.open("p:a", Some(price(1000.0)));
        ledger.abandon(&request);
        assert_eq!(ledger.spent(), Money::from_usd(0.4).unwrap());
        assert_eq!(ledger.refused(), 1);
        // A failover's attempt is priced at its own model.
        ledger.open("p:b", Some(price(10.0)));
        ledger.settle(Usage { output_tokens: 1000, ..Usage::default() });
        assert_eq!(ledger.spent(), Money::from_usd(0.41).unwrap());
        let attempts = ledger.journaled_attempts();
        assert_eq!(attempts.len(), 2);
        // A turn is measured by the attempts it made: here the last two (a refusal, then b).
        let (usage, cost) = ledger.since(1);
        assert_eq!((usage.output_tokens, cost), (1000, Some(Money::from_usd(0.01).unwrap())));
        ledger.open("p:c", None);
        ledger.settle(Usage { output_tokens: 1, ..Usage::default() });
        assert_eq!(ledger.since(1).1, None, "an unpriced attempt leaves the turn unpriced");
        assert_eq!(attempts[0].model, "p:a");
        assert_eq!(attempts[1].cost, Some(Money::from_usd(0.01).unwrap()));
    }
}

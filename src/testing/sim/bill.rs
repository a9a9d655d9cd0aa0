//! What the simulator billed: one record per attempt, and the rules that priced it.

use std::collections::BTreeMap;

use crate::model::Price;
use crate::money::Money;
use crate::usage::Usage;

use super::faults::Fault;
use super::request::WireDialect;

/// How an attempt ended, as the provider saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AttemptEnd {
    /// Refused with an HTTP error before any stream byte: bills nothing.
    Refused,
    /// The turn finished and the stream reported its usage: bills that usage.
    Reported,
    /// The turn finished but the stream carried no usage: bills what ran (the client must
    /// estimate).
    Unreported,
    /// The stream broke off, stalled, turned malformed or failed after it began: bills the
    /// prompt and the output streamed before the break (the client must estimate).
    Broken,
}

/// One attempt the simulator served, and what it billed.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// Arrival order, from 0.
    pub seq: u64,
    /// The segment (the harness's count of starts and resumes) it arrived in.
    pub segment: u32,
    /// The wire dialect.
    pub dialect: WireDialect,
    /// The model named in the body.
    pub model: String,
    /// The call's tag (from its directive), `None` for a request without one.
    pub tag: Option<String>,
    /// Model turns the conversation already held.
    pub turn: u32,
    /// Attempts of the same turn of the same call before this one (0-based).
    pub attempt: u32,
    /// The fault it met.
    pub fault: Fault,
    /// How it ended.
    pub end: AttemptEnd,
    /// The usage billed.
    pub usage: Usage,
    /// What it cost at the model's price.
    pub cost: Money,
    /// For an attempt the client must estimate ([`AttemptEnd::Unreported`], [`AttemptEnd::Broken`],
    /// or a reported one whose client hung up before its body was delivered), how far above
    /// the bill a sound client estimate may lie: the whole request body at four characters a
    /// token as input, plus four output tokens (Anthropic's placeholder and a tool name an
    /// adapter counts). Zero for the others, which must be charged exactly.
    pub tolerance: Money,
    /// How far above the bill a client that lost this attempt's stream may charge it (its
    /// estimate, as [`Attempt::tolerance`] of a broken stream): an attempt a killed driver had
    /// on the wire may have been charged so before it died (its connection failed, and its
    /// charge was checkpointed before the retry).
    pub drop_tolerance: Money,
    /// How far above the bill a client that never saw this attempt's response may charge it:
    /// its whole grant (the request body's input estimate plus the output cap it was sent
    /// with), less the bill. Applies only when [`Attempt::unanswered`].
    pub unanswered_tolerance: Money,
    /// The number the client's probe gave the request (`None` for a client without one).
    pub client_id: Option<u64>,
    /// Whether the client saw no response status for this attempt (its idle timeout fired
    /// while it waited for the headers, or the connection failed after the request went out),
    /// as the client recorded it: the server cannot know. Such an attempt is charged its grant.
    pub unanswered: bool,
    /// Whether the whole planned body was handed to the connection (false: the client hung up first).
    pub delivered: bool,
    /// Whether the turn's answer completed (a finished, non-tool turn).
    pub answered: bool,
}

impl Attempt {
    /// Whether a client can charge this attempt exactly from the wire: refused, or its usage
    /// reported and its whole body handed to the connection (a client that hung up before
    /// that, at a live cut, a cancellation or a kill, never read the usage and can only
    /// estimate: [`Simulator::attempts`](super::Simulator::attempts) grants it the estimate's
    /// tolerance).
    pub fn is_exact(&self) -> bool {
        if self.unanswered {
            return false;
        }
        match self.end {
            AttemptEnd::Refused => true,
            AttemptEnd::Reported => self.delivered,
            AttemptEnd::Unreported | AttemptEnd::Broken => false,
        }
    }
}

/// The bill of a set of attempts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bill {
    /// Everything billed.
    pub total: Money,
    /// By the model that served each attempt.
    pub by_model: BTreeMap<String, Money>,
    /// By call tag.
    pub by_tag: BTreeMap<String, Money>,
    /// The sum of the attempts' tolerances.
    pub tolerance: Money,
    /// Attempts refused before any stream byte.
    pub refused: u64,
}

impl Bill {
    /// Sums `attempts`.
    pub fn of<'a>(attempts: impl IntoIterator<Item = &'a Attempt>) -> Bill {
        let mut bill = Bill::default();
        for attempt in attempts {
            bill.total += attempt.cost;
            bill.tolerance += attempt.tolerance;
            *bill.by_model.entry(attempt.model.clone()).or_default() += attempt.cost;
            *bill.by_tag.entry(attempt.tag.clone().unwrap_or_default()).or_default() += attempt.cost;
            bill.refused += u64::from(attempt.end == AttemptEnd::Refused);
        }
        bill
    }
}

/// Prices `usage` at `price`, zero for an unknown model.
pub(crate) fn price(price: Option<&Price>, usage: &Usage) -> Money {
    price.map_or(Money::ZERO, |p| p.cost(usage))
}

//! The static cost bound of a script: how many agent calls it can make at most, and what they
//! can cost at worst, computed from the source and the run's `args` before anything runs.
//!
//! A dialect counts ([`crate::ScriptDialect::call_bound`]): every agent call site with how many
//! times it can run, multiplying through loops, fan-outs and inlined functions; or the first
//! construct whose count it cannot bound (a `while` loop that calls agents, a child workflow, a
//! loop over a value of unknown size), with its position. The count is priced
//! ([`cost_bound`], in `bound/price.rs`) with the engine's registries and price table, the way
//! admission does. This file holds the data both sides share; beside it, the one analysis
//! both dialects share: each dialect's front end lowers its syntax tree into a shape
//! (`shape.rs`) that `eval.rs` walks over the values of `value.rs`, counting per site
//! (`count.rs`) and merging what a site's options say over the contexts that reach it
//! (`sites.rs`); every unbounded reason is worded in `reason.rs`, and `guard.rs` says how an
//! analysis runs.

pub(crate) mod count;
pub(crate) mod eval;
pub(crate) mod guard;
mod price;
pub(crate) mod reason;
pub(crate) mod shape;
pub(crate) mod sites;
#[cfg(test)]
mod tests;
pub(crate) mod value;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::money::Money;

pub use price::cost_bound;

/// The statically known bound on a script's agent calls.
#[derive(Debug, Clone, PartialEq)]
pub enum CallBound {
    /// Every agent call site, with how many times it can run at most.
    Bounded {
        /// The call sites, in source order; a site inside a function called from two places
        /// appears once, with both counts summed, and a site in a branch with its count in
        /// its branch's arm.
        sites: Vec<AgentSite>,
        /// How the sites' calls add up along the paths a run can take: of a branch's arms,
        /// one runs.
        paths: CallPaths,
    },
    /// Some construct makes the count unbounded.
    Unbounded {
        /// What it is, e.g. "a `while` loop at line 4 calls agents and has no static bound".
        reason: String,
        /// Its line (1-based).
        line: u32,
        /// Its column (1-based).
        column: u32,
    },
}

impl CallBound {
    /// The most agent calls the script can make, when bounded: calls in sequence add, loops
    /// multiply, and a branch counts its larger arm.
    pub fn max_agent_calls(&self) -> Option<u64> {
        match self {
            CallBound::Bounded { paths, .. } => Some(paths.max_calls()),
            CallBound::Unbounded { .. } => None,
        }
    }
}

/// How a bounded script's agent calls add up along the paths a run can take: calls one after
/// the other add, a loop multiplies its body, and of a branch's arms one runs. Each
/// [`AgentSite::max_calls`] is the most its site can run on any path; summing them would count
/// every arm of every branch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallPaths(count::SiteCounts);

impl CallPaths {
    /// The most agent calls along any path.
    pub fn max_calls(&self) -> u64 {
        self.0.total(&count::Weigh {
            zero: 0u64,
            weight: &|_| 1,
            times: &|calls: u64, n| calls.saturating_mul(n),
            plus: &|a: u64, b| a.saturating_add(b),
        })
    }

    /// The most a run can cost along any path, each call of the site at (line, column)
    /// costing `per_call(line, column)`.
    pub(crate) fn worst(&self, per_call: &dyn Fn((u32, u32)) -> Money) -> Money {
        self.0.total(&count::Weigh {
            zero: Money::ZERO,
            weight: per_call,
            times: &|cost: Money, n| cost.times(n),
            plus: &|a: Money, b| a.saturating_add(b),
        })
    }
}

/// What a dialect knows statically of one option (or the prompt) of an agent call.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Known<T> {
    /// The call does not give it.
    #[default]
    Unset,
    /// A literal (or a value read from the given `args`).
    Literal(T),
    /// Given, but computed: its value is not known before the run.
    Computed,
}

impl<T> Known<T> {
    /// The literal, if known.
    pub fn literal(&self) -> Option<&T> {
        match self {
            Known::Literal(value) => Some(value),
            _ => None,
        }
    }

    /// Whether the call gives it as a computed value.
    pub fn is_computed(&self) -> bool {
        matches!(self, Known::Computed)
    }

    /// Whether the call gives it at all.
    pub fn is_set(&self) -> bool {
        !matches!(self, Known::Unset)
    }
}

/// One agent call site of a script and what its literal options say.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentSite {
    /// Line of the call (1-based).
    pub line: u32,
    /// Column of the call (1-based).
    pub column: u32,
    /// How many times it can run at most.
    pub max_calls: u64,
    /// The prompt.
    pub prompt: Known<String>,
    /// `system`.
    pub system: Known<String>,
    /// `model`.
    pub model: Known<String>,
    /// `profile`.
    pub profile: Known<String>,
    /// `role`.
    pub role: Known<String>,
    /// `max_output_tokens`.
    pub max_output_tokens: Known<u32>,
    /// `max_turns`.
    pub max_turns: Known<u32>,
    /// `max_context_tokens`.
    pub max_context_tokens: Known<u64>,
    /// `tools`.
    pub tools: Known<Vec<String>>,
    /// `schema`.
    pub schema: Known<Value>,
    /// `est_cost`.
    pub est_cost: Known<Money>,
}

impl AgentSite {
    /// A site at a position whose options are all unset.
    pub fn at(line: u32, column: u32, max_calls: u64) -> AgentSite {
        AgentSite { line, column, max_calls, ..AgentSite::default() }
    }

    /// Marks every option computed: the call's options are not a literal map.
    pub fn with_computed_options(mut self) -> AgentSite {
        self.system = Known::Computed;
        self.model = Known::Computed;
        self.profile = Known::Computed;
        self.role = Known::Computed;
        self.max_output_tokens = Known::Computed;
        self.max_turns = Known::Computed;
        self.max_context_tokens = Known::Computed;
        self.tools = Known::Computed;
        self.schema = Known::Computed;
        self.est_cost = Known::Computed;
        self
    }

    /// Reads one option of a literal options map into the site. Unknown keys are ignored (lint
    /// rejects them); a value of the wrong shape counts as computed.
    pub fn set_option(&mut self, key: &str, value: Known<Value>) {
        fn map<T>(value: &Known<Value>, read: impl Fn(&Value) -> Option<T>) -> Known<T> {
            match value {
                Known::Unset => Known::Unset,
                Known::Literal(v) => read(v).map_or(Known::Computed, Known::Literal),
                Known::Computed => Known::Computed,
            }
        }
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let small = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
        match key {
            "system" => self.system = map(&value, text),
            "model" => self.model = map(&value, text),
            "profile" => self.profile = map(&value, text),
            "role" => self.role = map(&value, text),
            "max_output_tokens" => self.max_output_tokens = map(&value, small),
            "max_turns" => self.max_turns = map(&value, small),
            "max_context_tokens" => self.max_context_tokens = map(&value, Value::as_u64),
            "tools" => {
                self.tools = map(&value, |v| {
                    v.as_array()?.iter().map(|t| t.as_str().map(str::to_owned)).collect::<Option<Vec<_>>>()
                });
            }
            "schema" => self.schema = map(&value, |v| (!v.is_null()).then(|| v.clone())),
            "est_cost" => {
                self.est_cost = map(&value, |v| v.as_f64().and_then(|usd| Money::from_usd(usd).ok()));
            }
            _ => {}
        }
    }
}

/// The worst-case cost of a script, in the wire shape `cairn plan --json` and
/// `cairn lint --bound --json` print: `{"max_agent_calls": N, "worst_case_usd": X}` or
/// `{"unbounded": "reason"}`.
#[derive(Debug, Clone, PartialEq)]
pub enum CostBound {
    /// At most this many agent calls, costing at most this much.
    Bounded {
        /// The most agent calls the script can make.
        max_agent_calls: u64,
        /// What they can cost at worst.
        worst_case: Money,
    },
    /// No static bound: why.
    Unbounded {
        /// The construct (with its position) or the model that makes it so.
        reason: String,
    },
}

impl CostBound {
    /// Whether the worst case may exceed `ceiling`: true for an unbounded script.
    pub fn exceeds(&self, ceiling: Money) -> bool {
        match self {
            CostBound::Bounded { worst_case, .. } => *worst_case > ceiling,
            CostBound::Unbounded { .. } => true,
        }
    }
}

impl std::fmt::Display for CostBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CostBound::Bounded { max_agent_calls, worst_case } => {
                let calls = if *max_agent_calls == 1 { "call" } else { "calls" };
                write!(f, "at most {max_agent_calls} agent {calls}, worst case {worst_case}")
            }
            CostBound::Unbounded { reason } => write!(f, "unbounded: {reason}"),
        }
    }
}

/// The wire form of [`CostBound`].
#[derive(Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
enum CostBoundWire {
    Bounded {
        max_agent_calls: u64,
        /// The exact amount; absent in bounds written before it was added.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worst_case_nano_usd: Option<i64>,
        worst_case_usd: f64,
    },
    Unbounded {
        unbounded: String,
    },
}

impl Serialize for CostBound {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            CostBound::Bounded { max_agent_calls, worst_case } => CostBoundWire::Bounded {
                max_agent_calls: *max_agent_calls,
                worst_case_nano_usd: Some(worst_case.nano_usd()),
                worst_case_usd: worst_case.as_usd(),
            },
            CostBound::Unbounded { reason } => CostBoundWire::Unbounded { unbounded: reason.clone() },
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CostBound {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<CostBound, D::Error> {
        Ok(match CostBoundWire::deserialize(deserializer)? {
            CostBoundWire::Bounded { max_agent_calls, worst_case_nano_usd, worst_case_usd } => {
                let worst_case = match worst_case_nano_usd {
                    Some(nanos) => Money::from_nano_usd(nanos),
                    None => Money::from_usd(worst_case_usd).map_err(serde::de::Error::custom)?,
                };
                CostBound::Bounded { max_agent_calls, worst_case }
            }
            CostBoundWire::Unbounded { unbounded } => CostBound::Unbounded { reason: unbounded },
        })
    }
}

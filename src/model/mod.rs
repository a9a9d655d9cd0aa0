//! L2: model references, invocation roles and the price table.
//!
//! A model ref is `provider:model` (`anthropic:claude-sonnet-4-5`, `echo:default`). Usage is
//! priced by the model that actually served a call, from a versioned price table that is
//! data (`prices.json`), not code, and that a host can override entry by entry. A model the
//! table does not know is *unpriced*: its usage is reported as such, never as a silent zero.

use std::collections::HashMap;
use std::fmt;

use serde::Deserialize;

use crate::money::Money;
use crate::usage::Usage;

/// A `provider:model` reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModelRef {
    provider: String,
    model: String,
}

/// Why a string is not a model ref.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid model ref {0:?}: expected provider:model, e.g. anthropic:claude-sonnet-4-5 or echo:default")]
pub struct InvalidModelRef(pub String);

impl ModelRef {
    /// Parses `provider:model`.
    ///
    /// # Errors
    /// [`InvalidModelRef`] when either side is empty or the colon is missing.
    pub fn parse(text: &str) -> Result<ModelRef, InvalidModelRef> {
        match text.split_once(':') {
            Some((provider, model))
                if !provider.is_empty() && !model.is_empty() && !provider.contains(' ') =>
            {
                Ok(ModelRef { provider: provider.to_owned(), model: model.to_owned() })
            }
            _ => Err(InvalidModelRef(text.to_owned())),
        }
    }

    /// The provider part.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The provider-local model name.
    pub fn model(&self) -> &str {
        &self.model
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.provider, self.model)
    }
}

/// What a model invocation is for; routing resolves a model per role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InvocationRole {
    /// Writing a plan or script.
    Plan,
    /// An agent's working loop (the default).
    Loop,
    /// Extracting structured data.
    Extract,
    /// Summarizing.
    Summarize,
    /// Producing a final answer.
    Finalize,
    /// Orchestrating other agents.
    Orchestrate,
    /// Merging results.
    Synthesize,
}

impl InvocationRole {
    /// The lowercase name.
    pub const fn as_str(self) -> &'static str {
        match self {
            InvocationRole::Plan => "plan",
            InvocationRole::Loop => "loop",
            InvocationRole::Extract => "extract",
            InvocationRole::Summarize => "summarize",
            InvocationRole::Finalize => "finalize",
            InvocationRole::Orchestrate => "orchestrate",
            InvocationRole::Synthesize => "synthesize",
        }
    }

    /// Parses the lowercase name.
    pub fn parse(text: &str) -> Option<InvocationRole> {
        [
            InvocationRole::Plan,
            InvocationRole::Loop,
            InvocationRole::Extract,
            InvocationRole::Summarize,
            InvocationRole::Finalize,
            InvocationRole::Orchestrate,
            InvocationRole::Synthesize,
        ]
        .into_iter()
        .find(|r| r.as_str() == text)
    }
}

/// Prices of one model, in nano-USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price {
    /// Per million uncached input tokens.
    pub input_per_mtok: Money,
    /// Per million output tokens (reasoning included).
    pub output_per_mtok: Money,
    /// Per million cache-read input tokens.
    pub cache_read_per_mtok: Money,
    /// Per million cache-write input tokens.
    pub cache_write_per_mtok: Money,
}

impl Price {
    /// A price with the same rate for all input kinds.
    pub fn flat(input_per_mtok: Money, output_per_mtok: Money) -> Price {
        Price {
            input_per_mtok,
            output_per_mtok,
            cache_read_per_mtok: input_per_mtok,
            cache_write_per_mtok: input_per_mtok,
        }
    }

    /// The cost of `usage` at this price, rounded up to the next nano-USD.
    pub fn cost(&self, usage: &Usage) -> Money {
        let cached = usage.cache_read_tokens.saturating_add(usage.cache_write_tokens);
        let plain_input = usage.input_tokens.saturating_sub(cached);
        let nanos_times_million: i128 = plain_input as i128 * self.input_per_mtok.nano_usd() as i128
            + usage.cache_read_tokens as i128 * self.cache_read_per_mtok.nano_usd() as i128
            + usage.cache_write_tokens as i128 * self.cache_write_per_mtok.nano_usd() as i128
            + usage.output_tokens as i128 * self.output_per_mtok.nano_usd() as i128;
        let nanos = (nanos_times_million + 999_999) / 1_000_000;
        Money::from_nano_usd(nanos.min(i64::MAX as i128) as i64)
    }
}

/// The shipped price table.
const SHIPPED_PRICES: &str = include_str!("prices.json");

#[derive(Deserialize)]
struct PriceFile {
    version: String,
    models: HashMap<String, PriceRow>,
}

#[derive(Deserialize)]
struct PriceRow {
    input: f64,
    output: f64,
    #[serde(default)]
    cache_read: Option<f64>,
    #[serde(default)]
    cache_write: Option<f64>,
}

/// Model prices by model ref, with a version naming the table's date.
#[derive(Debug, Clone)]
pub struct PriceTable {
    version: String,
    prices: HashMap<String, Price>,
}

impl PriceTable {
    /// The table shipped with this release (`src/model/prices.json`, USD per million tokens).
    pub fn shipped() -> PriceTable {
        // The shipped file is tested to parse; an empty table is the safe fallback.
        PriceTable::from_json(SHIPPED_PRICES)
            .unwrap_or_else(|_| PriceTable { version: "empty".into(), prices: HashMap::new() })
    }

    /// A table from JSON `{"version": "...", "models": {"provider:model": {"input": USD/Mtok, "output": ..., "cache_read"?: ..., "cache_write"?: ...}}}`.
    ///
    /// # Errors
    /// [`crate::Error`] (code `config`) for malformed JSON or a negative or non-finite price.
    pub fn from_json(text: &str) -> Result<PriceTable, crate::Error> {
        let file: PriceFile =
            serde_json::from_str(text).map_err(|e| crate::Error::config(format!("bad price table: {e}")))?;
        let mut prices = HashMap::new();
        for (model, row) in file.models {
            let money = |usd: f64| {
                Money::from_usd(usd).map_err(|e| crate::Error::config(format!("bad price for {model}: {e}")))
            };
            let input = money(row.input)?;
            prices.insert(
                model.clone(),
                Price {
                    input_per_mtok: input,
                    output_per_mtok: money(row.output)?,
                    cache_read_per_mtok: row.cache_read.map(money).transpose()?.unwrap_or(input),
                    cache_write_per_mtok: row.cache_write.map(money).transpose()?.unwrap_or(input),
                },
            );
        }
        Ok(PriceTable { version: file.version, prices })
    }

    /// Sets (or overrides) one model's price.
    pub fn set(&mut self, model: &str, price: Price) {
        self.prices.insert(model.to_owned(), price);
    }

    /// The price of a model ref, if known.
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.prices.get(model)
    }

    /// The table's version.
    pub fn version(&self) -> &str {
        &self.version
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_refs_parse() {
        let r = ModelRef::parse("anthropic:claude-sonnet-4-5").unwrap();
        assert_eq!((r.provider(), r.model()), ("anthropic", "claude-sonnet-4-5"));
        assert_eq!(ModelRef::parse("openai:ft:gpt-4o:org").unwrap().model(), "ft:gpt-4o:org");
        for bad in ["", "echo", ":x", "x:", "a b:c"] {
            assert!(ModelRef::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shipped_table_parses_and_prices_exactly() {
        let table = PriceTable::from_json(SHIPPED_PRICES).unwrap();
        assert!(!table.version().is_empty());
        let price = table.price("anthropic:claude-sonnet-4-5").unwrap();
        // $3 / Mtok input, $15 / Mtok output: 1000 in + 100 out = $0.003 + $0.0015.
        let usage = Usage { input_tokens: 1000, output_tokens: 100, ..Usage::default() };
        assert_eq!(price.cost(&usage), Money::from_nano_usd(4_500_000));
    }

    #[test]
    fn cache_tokens_use_their_own_rates() {
        let price = Price {
            input_per_mtok: Money::from_usd(3.0).unwrap(),
            output_per_mtok: Money::from_usd(15.0).unwrap(),
            cache_read_per_mtok: Money::from_usd(0.3).unwrap(),
            cache_write_per_mtok: Money::from_usd(3.75).unwrap(),
        };
        let usage = Usage {
            input_tokens: 1_000_000,
            cache_read_tokens: 500_000,
            cache_write_tokens: 100_000,
            ..Usage::default()
        };
        // 400k plain × 3 + 500k × 0.3 + 100k × 3.75 = 1.2 + 0.15 + 0.375
        assert_eq!(price.cost(&usage), Money::from_usd(1.725).unwrap());
        assert!(
            PriceTable::from_json(r#"{"version":"x","models":{"a:b":{"input":-1,"output":1}}}"#).is_err()
        );
    }
}

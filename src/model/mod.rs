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
    /// The output cap a turn is reserved and sent with when the call names none (the
    /// engine's default, 8192, when `None`).
    pub max_output_tokens: Option<u32>,
}

impl Price {
    /// A price with the same rate for all input kinds.
    pub fn flat(input_per_mtok: Money, output_per_mtok: Money) -> Price {
        Price {
            input_per_mtok,
            output_per_mtok,
            cache_read_per_mtok: input_per_mtok,
            cache_write_per_mtok: input_per_mtok,
            max_output_tokens: None,
        }
    }

    /// The cost of `usage` at this price, rounded up to the next nano-USD.
    ///
    /// Every live cut prices a streaming turn's running estimate, so this is on the hot path:
    /// when the rates are not negative and the products fit in 64 bits (any real usage at
    /// any real price) it is computed in `u64`, whose division by a constant compiles to a
    /// multiply; otherwise in `i128`, which cannot overflow. Both give the same result
    /// (a proptest holds them equal).
    pub fn cost(&self, usage: &Usage) -> Money {
        self.cost_narrow(usage).unwrap_or_else(|| self.cost_wide(usage))
    }

    /// [`Price::cost`] in `u64`; `None` when a rate is negative or anything overflows.
    fn cost_narrow(&self, usage: &Usage) -> Option<Money> {
        let rate = |money: Money| u64::try_from(money.nano_usd()).ok();
        let cached = usage.cache_read_tokens.saturating_add(usage.cache_write_tokens);
        let plain_input = usage.input_tokens.saturating_sub(cached);
        let nanos_times_million = plain_input
            .checked_mul(rate(self.input_per_mtok)?)?
            .checked_add(usage.cache_read_tokens.checked_mul(rate(self.cache_read_per_mtok)?)?)?
            .checked_add(usage.cache_write_tokens.checked_mul(rate(self.cache_write_per_mtok)?)?)?
            .checked_add(usage.output_tokens.checked_mul(rate(self.output_per_mtok)?)?)?;
        let nanos = nanos_times_million.checked_add(999_999)? / 1_000_000;
        Some(Money::from_nano_usd(nanos.min(i64::MAX as u64) as i64))
    }

    /// [`Price::cost`] in `i128`: each product fits (a `u64` count times an `i64` rate), and
    /// their sum saturates instead of wrapping, so any usage at any rates has a cost.
    fn cost_wide(&self, usage: &Usage) -> Money {
        let cached = usage.cache_read_tokens.saturating_add(usage.cache_write_tokens);
        let plain_input = usage.input_tokens.saturating_sub(cached);
        let product = |tokens: u64, rate: Money| i128::from(tokens) * i128::from(rate.nano_usd());
        let nanos_times_million = product(plain_input, self.input_per_mtok)
            .saturating_add(product(usage.cache_read_tokens, self.cache_read_per_mtok))
            .saturating_add(product(usage.cache_write_tokens, self.cache_write_per_mtok))
            .saturating_add(product(usage.output_tokens, self.output_per_mtok));
        let nanos = nanos_times_million.saturating_add(999_999) / 1_000_000;
        Money::from_nano_usd(nanos.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
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
    /// The output cap a turn reserves for when the call names none.
    #[serde(default)]
    max_output: Option<u32>,
}

/// Model prices by model ref, with a version naming the table's date.
#[derive(Debug, Clone)]
pub struct PriceTable {
    version: String,
    prices: HashMap<String, Price>,
    /// Whether an unpriced model may run under a finite ceiling (reserving a flat amount).
    allow_unpriced: bool,
    /// Provider names registered under another kind's prices (`claude` → `anthropic`).
    kinds: HashMap<String, String>,
}

impl PriceTable {
    /// The table shipped with this release (`src/model/prices.json`, USD per million tokens).
    pub fn shipped() -> PriceTable {
        // The shipped file is tested to parse; an empty table is the safe fallback.
        PriceTable::from_json(SHIPPED_PRICES).unwrap_or_else(|_| PriceTable {
            version: "empty".into(),
            prices: HashMap::new(),
            allow_unpriced: false,
            kinds: HashMap::new(),
        })
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
                    max_output_tokens: row.max_output,
                },
            );
        }
        Ok(PriceTable { version: file.version, prices, allow_unpriced: false, kinds: HashMap::new() })
    }

    /// Sets (or overrides) one model's price.
    pub fn set(&mut self, model: &str, price: Price) {
        self.prices.insert(model.to_owned(), price);
    }

    /// The price of a `provider:model` ref, if known.
    ///
    /// The lookup rule, in order, first for the provider's own name and then for the kind it
    /// was registered as ([`PriceTable::provider_kind`]): the exact `provider:model`; the
    /// model with a trailing date stripped (`-YYYYMMDD` or `-YYYY-MM-DD`: a dated snapshot
    /// such as `claude-sonnet-4-5-20250929` or `gpt-4o-2024-08-06` is priced as its family's
    /// row); then the provider's catch-all row `provider:*`. Anything else is unpriced.
    pub fn price(&self, model: &str) -> Option<&Price> {
        let (provider, name) = model.split_once(':')?;
        let kind = self.kinds.get(provider).map(String::as_str);
        [Some(provider), kind.filter(|k| *k != provider)].into_iter().flatten().find_map(|provider| {
            self.prices
                .get(&format!("{provider}:{name}"))
                .or_else(|| {
                    strip_date(name).and_then(|family| self.prices.get(&format!("{provider}:{family}")))
                })
                .or_else(|| self.prices.get(&format!("{provider}:*")))
        })
    }

    /// Prices the models of provider `name` as those of `kind` (a provider table
    /// `[providers.claude]` with `kind = "anthropic"` is priced from the `anthropic:` rows).
    pub fn provider_kind(&mut self, name: &str, kind: &str) {
        self.kinds.insert(name.to_owned(), kind.to_owned());
    }

    /// The table's version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Lets models missing from the table run under a finite budget ceiling, each call
    /// reserving a flat $0.50 (by default such a call is refused with `unpriced_model`,
    /// since the ceiling cannot bound what it costs).
    pub fn allow_unpriced(mut self, allow: bool) -> PriceTable {
        self.allow_unpriced = allow;
        self
    }

    /// Whether unpriced models may run under a finite ceiling.
    pub fn unpriced_allowed(&self) -> bool {
        self.allow_unpriced
    }
}

/// The family of a dated model id: `claude-opus-4-1-20250805` → `claude-opus-4-1`,
/// `gpt-4o-2024-08-06` → `gpt-4o`; `None` when the id ends in no date.
pub(crate) fn strip_date(model: &str) -> Option<&str> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let bytes = model.as_bytes();
    // -YYYYMMDD
    if bytes.len() > 9 && bytes[bytes.len() - 9] == b'-' && digits(&model[bytes.len() - 8..]) {
        return Some(&model[..bytes.len() - 9]);
    }
    // -YYYY-MM-DD
    if bytes.len() > 11 {
        let tail = &model[bytes.len() - 11..];
        let t = tail.as_bytes();
        if t[0] == b'-'
            && t[5] == b'-'
            && t[8] == b'-'
            && digits(&tail[1..5])
            && digits(&tail[6..8])
            && digits(&tail[9..])
        {
            return Some(&model[..bytes.len() - 11]);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dated_ids_and_other_kinds_resolve_to_their_family_row() {
        assert_eq!(strip_date("claude-opus-4-1-20250805"), Some("claude-opus-4-1"));
        assert_eq!(strip_date("claude-sonnet-4-5-20250929"), Some("claude-sonnet-4-5"));
        assert_eq!(strip_date("gpt-4o-2024-08-06"), Some("gpt-4o"));
        assert_eq!(strip_date("gpt-4o"), None);
        assert_eq!(strip_date("o3"), None);
        let mut table = PriceTable::shipped();
        let sonnet = *table.price("anthropic:claude-sonnet-4-5").unwrap();
        assert_eq!(table.price("anthropic:claude-sonnet-4-5-20250929"), Some(&sonnet));
        assert!(table.price("openai:gpt-4o-2024-08-06").is_some());
        assert!(table.price("anthropic:claude-opus-4-1-20250805").is_some());
        assert!(table.price("claude:claude-sonnet-4-5-20250929").is_none());
        table.provider_kind("claude", "anthropic");
        assert_eq!(table.price("claude:claude-sonnet-4-5-20250929"), Some(&sonnet));
        assert!(table.price("claude:no-such-model").is_none());
        // Echo is priced (free) whatever the model name.
        assert!(table.price("echo:anything").is_some_and(|p| p.output_per_mtok.is_zero()));
        assert!(table.price("nonsense").is_none());
    }

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

    /// Any token count below 2^40 or anywhere in `u64`, so both paths are exercised: the
    /// narrow one for real usage, the wide one past what 64 bits hold.
    fn tokens() -> impl proptest::strategy::Strategy<Value = u64> {
        use proptest::prelude::*;
        prop_oneof![0u64..(1 << 40), any::<u64>()]
    }

    /// Rates in nano-USD per million tokens: real ones, negative ones (which only the wide
    /// path takes) and extreme ones.
    fn rate() -> impl proptest::strategy::Strategy<Value = Money> {
        use proptest::prelude::*;
        prop_oneof![0i64..200_000_000_000, any::<i64>()].prop_map(Money::from_nano_usd)
    }

    proptest::proptest! {
        /// The `u64` fast path of `Price::cost` gives exactly what the `i128` path gives,
        /// whenever it answers at all.
        #[test]
        fn the_narrow_cost_equals_the_wide_one(
            input in tokens(), output in tokens(), cache_read in tokens(), cache_write in tokens(),
            rates in (rate(), rate(), rate(), rate()),
        ) {
            let price = Price {
                input_per_mtok: rates.0,
                output_per_mtok: rates.1,
                cache_read_per_mtok: rates.2,
                cache_write_per_mtok: rates.3,
                max_output_tokens: None,
            };
            let usage = Usage {
                input_tokens: input,
                output_tokens: output,
                cache_read_tokens: cache_read,
                cache_write_tokens: cache_write,
                ..Usage::default()
            };
            if let Some(narrow) = price.cost_narrow(&usage) {
                proptest::prop_assert_eq!(narrow, price.cost_wide(&usage));
            }
            proptest::prop_assert_eq!(price.cost(&usage), price.cost_wide(&usage));
        }
    }

    #[test]
    fn the_narrow_path_answers_for_real_usage_and_steps_aside_past_64_bits() {
        let price = Price::flat(Money::from_usd(3.0).unwrap(), Money::from_usd(15.0).unwrap());
        let usage = Usage { input_tokens: 200_000, output_tokens: 64_000, ..Usage::default() };
        assert_eq!(price.cost_narrow(&usage), Some(Money::from_nano_usd(1_560_000_000)));
        let huge = Usage { output_tokens: u64::MAX, ..Usage::default() };
        assert_eq!(price.cost_narrow(&huge), None);
        assert_eq!(price.cost(&huge), Money::MAX);
        let negative = Price::flat(Money::from_nano_usd(-1), Money::ZERO);
        assert_eq!(negative.cost_narrow(&usage), None);
        assert_eq!(negative.cost(&usage), Money::ZERO);
    }

    #[test]
    fn cache_tokens_use_their_own_rates() {
        let price = Price {
            input_per_mtok: Money::from_usd(3.0).unwrap(),
            output_per_mtok: Money::from_usd(15.0).unwrap(),
            cache_read_per_mtok: Money::from_usd(0.3).unwrap(),
            cache_write_per_mtok: Money::from_usd(3.75).unwrap(),
            max_output_tokens: None,
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

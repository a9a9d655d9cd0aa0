//! Prices in `cairn.toml`: a provider table's `prices` (per model) and `price` (every model
//! of the provider, e.g. a demo price for `echo`), each either `[input, output]` in USD per
//! million tokens or `{ input, output, cache_read, cache_write, max_output }`.
//!
//! Cache rates not given are derived from the provider kind's published multipliers of the
//! input price: Anthropic reads at 0.1× and writes at 1.25×, OpenAI reads cached input at
//! 0.5× (writes are not charged extra: 1×); other kinds use the input rate.

use serde::Deserialize;

use crate::error::Error;
use crate::model::{Price, PriceTable};
use crate::money::Money;

/// One price as written in `cairn.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum PriceSpec {
    /// `[input, output]`, USD per million tokens.
    Pair([f64; 2]),
    /// Every rate spelled out.
    Table(PriceFields),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PriceFields {
    input: f64,
    output: f64,
    cache_read: Option<f64>,
    cache_write: Option<f64>,
    max_output: Option<u32>,
}

/// The price-table provider prefix a provider kind is priced under.
pub(crate) fn priced_kind(kind: &str) -> Option<&'static str> {
    match kind {
        "anthropic" => Some("anthropic"),
        "openai" | "openai-responses" => Some("openai"),
        "echo" => Some("echo"),
        _ => None,
    }
}

/// The cache read and write multipliers of a provider kind, in parts per million of the
/// input price.
fn cache_multipliers_ppm(kind: &str) -> (u32, u32) {
    match kind {
        "anthropic" => (100_000, 1_250_000),
        "openai" | "openai-responses" => (500_000, 1_000_000),
        _ => (1_000_000, 1_000_000),
    }
}

impl PriceSpec {
    /// The price, with cache rates derived from `kind` where not given.
    pub(crate) fn to_price(&self, kind: &str, at: &str) -> Result<Price, Error> {
        let usd = |x: f64| Money::from_usd(x).map_err(|e| Error::config(format!("{at}: {e}")));
        let (input, output, read, write, max_output) = match self {
            PriceSpec::Pair([input, output]) => (usd(*input)?, usd(*output)?, None, None, None),
            PriceSpec::Table(f) => (
                usd(f.input)?,
                usd(f.output)?,
                f.cache_read.map(usd).transpose()?,
                f.cache_write.map(usd).transpose()?,
                f.max_output,
            ),
        };
        let (read_ppm, write_ppm) = cache_multipliers_ppm(kind);
        Ok(Price {
            input_per_mtok: input,
            output_per_mtok: output,
            cache_read_per_mtok: read.unwrap_or_else(|| input.scale_ppm(read_ppm)),
            cache_write_per_mtok: write.unwrap_or_else(|| input.scale_ppm(write_ppm)),
            max_output_tokens: max_output,
        })
    }
}

/// Registers a provider table's prices and kind on `prices`.
pub(crate) fn apply_provider_prices(
    prices: &mut PriceTable,
    name: &str,
    kind: &str,
    price: Option<&PriceSpec>,
    models: &std::collections::BTreeMap<String, PriceSpec>,
) -> Result<(), Error> {
    if let Some(prefix) = priced_kind(kind)
        && prefix != name
    {
        prices.provider_kind(name, prefix);
    }
    if let Some(spec) = price {
        prices.set(&format!("{name}:*"), spec.to_price(kind, &format!("providers.{name}.price"))?);
    }
    for (model, spec) in models {
        prices.set(&format!("{name}:{model}"), spec.to_price(kind, &format!("price of {name}:{model}"))?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_numbers_take_the_kinds_cache_multipliers_and_a_table_overrides_them() {
        let pair = PriceSpec::Pair([3.0, 15.0]);
        let anthropic = pair.to_price("anthropic", "x").unwrap();
        assert_eq!(anthropic.cache_read_per_mtok, Money::from_usd(0.3).unwrap());
        assert_eq!(anthropic.cache_write_per_mtok, Money::from_usd(3.75).unwrap());
        let openai = pair.to_price("openai", "x").unwrap();
        assert_eq!(openai.cache_read_per_mtok, Money::from_usd(1.5).unwrap());
        let table: PriceSpec =
            toml::from_str::<toml::Table>("p = { input = 3, output = 15, cache_read = 0.5 }").unwrap()["p"]
                .clone()
                .try_into()
                .unwrap();
        let explicit = table.to_price("anthropic", "x").unwrap();
        assert_eq!(explicit.cache_read_per_mtok, Money::from_usd(0.5).unwrap());
        assert_eq!(explicit.cache_write_per_mtok, Money::from_usd(3.75).unwrap());
        assert!(PriceSpec::Pair([-1.0, 1.0]).to_price("echo", "x").is_err());
    }
}

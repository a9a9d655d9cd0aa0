//! `Money`: an amount in integer nano-USD.
//!
//! Every amount the engine accounts for (costs, reserves, ceilings, remainders) is a `Money`.
//! Floating point never touches accounting: a ceiling of `$0.30` is exactly `300_000_000`
//! nano-USD, and three `$0.10` calls fill it exactly. Conversion from a user-supplied `f64`
//! happens once, at the edge, through [`Money::from_usd`], which refuses non-finite and
//! out-of-range values.

use std::fmt;
use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

/// Nano-USD per USD.
const NANOS_PER_USD: i64 = 1_000_000_000;

/// An amount of money in integer nano-USD (1 USD = 1,000,000,000).
///
/// Arithmetic saturates instead of wrapping: the largest representable amount (about 9.2
/// billion USD) is far beyond any budget, so saturation can only ever make a ceiling check
/// stricter, never looser.
///
/// ```
/// use cairn::Money;
/// let ceiling = Money::from_usd(0.30).unwrap();
/// let call = Money::from_usd(0.10).unwrap();
/// assert_eq!(call + call + call, ceiling);
/// assert_eq!(ceiling.to_string(), "$0.30");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Money(i64);

/// Why a USD amount could not become [`Money`].
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum MoneyError {
    /// NaN or an infinity.
    #[error("amount is not a finite number")]
    NotFinite,
    /// Below zero where only non-negative amounts make sense.
    #[error("amount {0} is negative")]
    Negative(f64),
    /// Larger than the representable range.
    #[error("amount {0} is too large")]
    TooLarge(f64),
}

impl Money {
    /// Zero dollars.
    pub const ZERO: Money = Money(0);
    /// The largest representable amount.
    pub const MAX: Money = Money(i64::MAX);

    /// An amount given in nano-USD.
    pub const fn from_nano_usd(nanos: i64) -> Money {
        Money(nanos)
    }

    /// An amount given in micro-USD.
    pub const fn from_micro_usd(micros: i64) -> Money {
        Money(micros.saturating_mul(1_000))
    }

    /// Converts a non-negative, finite USD amount, rounding to the nearest nano-USD.
    ///
    /// # Errors
    /// [`MoneyError`] for NaN, infinities, negative amounts and amounts beyond the range.
    pub fn from_usd(usd: f64) -> Result<Money, MoneyError> {
        if !usd.is_finite() {
            return Err(MoneyError::NotFinite);
        }
        if usd < 0.0 {
            return Err(MoneyError::Negative(usd));
        }
        let nanos = (usd * NANOS_PER_USD as f64).round();
        if nanos >= i64::MAX as f64 {
            return Err(MoneyError::TooLarge(usd));
        }
        Ok(Money(nanos as i64))
    }

    /// The amount in nano-USD.
    pub const fn nano_usd(self) -> i64 {
        self.0
    }

    /// The amount in USD, for display and reports only: never feed it back into accounting.
    pub fn as_usd(self) -> f64 {
        self.0 as f64 / NANOS_PER_USD as f64
    }

    /// `self + other`, saturating.
    pub const fn saturating_add(self, other: Money) -> Money {
        Money(self.0.saturating_add(other.0))
    }

    /// `self - other`, saturating.
    pub const fn saturating_sub(self, other: Money) -> Money {
        Money(self.0.saturating_sub(other.0))
    }

    /// `self - other`, or zero when `other` is larger.
    pub const fn sub_or_zero(self, other: Money) -> Money {
        if other.0 >= self.0 { Money(0) } else { Money(self.0 - other.0) }
    }

    /// `self * ratio` for a ratio in `[0, 1]` given as parts per million, rounding down.
    pub const fn scale_ppm(self, ppm: u32) -> Money {
        Money(((self.0 as i128 * ppm as i128) / 1_000_000) as i64)
    }

    /// `count * unit_price`, saturating; for pricing token counts.
    pub const fn times(self, count: u64) -> Money {
        let product = self.0 as i128 * count as i128;
        if product > i64::MAX as i128 {
            Money::MAX
        } else if product < i64::MIN as i128 {
            Money(i64::MIN)
        } else {
            Money(product as i64)
        }
    }

    /// Whether the amount is zero.
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }
}

impl Add for Money {
    type Output = Money;
    fn add(self, other: Money) -> Money {
        self.saturating_add(other)
    }
}

impl AddAssign for Money {
    fn add_assign(&mut self, other: Money) {
        *self = self.saturating_add(other);
    }
}

impl std::iter::Sum for Money {
    fn sum<I: Iterator<Item = Money>>(iter: I) -> Money {
        iter.fold(Money::ZERO, Add::add)
    }
}

impl fmt::Display for Money {
    /// `$1.50`, `$0.000125`: at least two decimals, at most nine, trailing zeros trimmed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let abs = self.0.unsigned_abs();
        let whole = abs / NANOS_PER_USD as u64;
        let frac = abs % NANOS_PER_USD as u64;
        let mut digits = format!("{frac:09}");
        while digits.len() > 2 && digits.ends_with('0') {
            digits.pop();
        }
        write!(f, "{sign}${whole}.{digits}")
    }
}

/// Money in JSON for people and programs: every amount the CLI, the service and the events
/// print is a pair of fields, `<name>_nano_usd` (the exact integer) and `<name>_usd` (the same
/// amount as a decimal number, for reading). One module per field name, for
/// `#[serde(flatten, with = "crate::money::json::NAME")]` on a `Money` or `Option<Money>`
/// field of a serialize-only type; an absent amount writes neither field.
pub(crate) mod json {
    use serde::Serializer;
    use serde::ser::SerializeMap;

    use super::Money;

    /// A field holding an amount, or maybe none.
    pub(crate) trait Amount {
        fn amount(&self) -> Option<Money>;
    }

    impl Amount for Money {
        fn amount(&self) -> Option<Money> {
            Some(*self)
        }
    }

    impl Amount for Option<Money> {
        fn amount(&self) -> Option<Money> {
            *self
        }
    }

    /// Writes `{name}_nano_usd` and `{name}_usd` into the enclosing map.
    pub(crate) fn pair<S: Serializer>(
        nano_name: &'static str,
        usd_name: &'static str,
        amount: Option<Money>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        if let Some(amount) = amount {
            map.serialize_entry(nano_name, &amount.nano_usd())?;
            map.serialize_entry(usd_name, &amount.as_usd())?;
        }
        map.end()
    }

    macro_rules! field {
        ($($name:ident),*) => {$(
            #[doc = concat!("`", stringify!($name), "_nano_usd` and `", stringify!($name), "_usd`.")]
            pub(crate) mod $name {
                pub(crate) fn serialize<A: super::Amount, S: serde::Serializer>(
                    amount: &A,
                    serializer: S,
                ) -> Result<S::Ok, S::Error> {
                    super::pair(
                        concat!(stringify!($name), "_nano_usd"),
                        concat!(stringify!($name), "_usd"),
                        amount.amount(),
                        serializer,
                    )
                }
            }
        )*};
    }

    field!(cost, ceiling, spent, remaining);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_amounts_carry_their_unit() {
        #[derive(Serialize)]
        struct Line {
            #[serde(flatten, with = "json::cost")]
            cost: Money,
            #[serde(flatten, with = "json::ceiling")]
            ceiling: Option<Money>,
        }
        let line = Line { cost: Money::from_nano_usd(1_149_000), ceiling: None };
        assert_eq!(serde_json::to_string(&line).unwrap(), r#"{"cost_nano_usd":1149000,"cost_usd":0.001149}"#);
        let line = Line { cost: Money::ZERO, ceiling: Some(Money::from_usd(1.5).unwrap()) };
        assert_eq!(
            serde_json::to_string(&line).unwrap(),
            r#"{"cost_nano_usd":0,"cost_usd":0.0,"ceiling_nano_usd":1500000000,"ceiling_usd":1.5}"#
        );
    }

    #[test]
    fn usd_conversion_is_exact_for_cents() {
        assert_eq!(Money::from_usd(0.1).unwrap().nano_usd(), 100_000_000);
        assert_eq!(Money::from_usd(5.0).unwrap().nano_usd(), 5_000_000_000);
        assert_eq!(Money::from_usd(0.0).unwrap(), Money::ZERO);
    }

    #[test]
    fn bad_usd_is_refused() {
        assert_eq!(Money::from_usd(f64::NAN), Err(MoneyError::NotFinite));
        assert_eq!(Money::from_usd(f64::INFINITY), Err(MoneyError::NotFinite));
        assert_eq!(Money::from_usd(-0.01), Err(MoneyError::Negative(-0.01)));
        assert!(matches!(Money::from_usd(1e30), Err(MoneyError::TooLarge(_))));
    }

    #[test]
    fn display_trims_but_keeps_cents() {
        assert_eq!(Money::from_nano_usd(1_500_000_000).to_string(), "$1.50");
        assert_eq!(Money::from_nano_usd(125_000).to_string(), "$0.000125");
        assert_eq!(Money::from_nano_usd(1).to_string(), "$0.000000001");
        assert_eq!(Money::from_nano_usd(-2_000_000_000).to_string(), "-$2.00");
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Money::MAX + Money::from_nano_usd(1), Money::MAX);
        assert_eq!(Money::from_nano_usd(5).sub_or_zero(Money::from_nano_usd(9)), Money::ZERO);
        assert_eq!(Money::from_nano_usd(3).times(u64::MAX), Money::MAX);
        assert_eq!(Money::from_nano_usd(1_000_000).scale_ppm(300_000), Money::from_nano_usd(300_000));
    }
}

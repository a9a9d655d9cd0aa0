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

#[cfg(test)]
mod tests {
    use super::*;

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

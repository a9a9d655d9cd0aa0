//! How a simulator behaves: its seed, its faults, its prices, its adapters' idle timeout.

use std::collections::BTreeMap;
use std::time::Duration;

use super::faults::FaultMix;
use crate::model::Price;

/// How a simulator behaves.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The seed every fault is drawn from.
    pub seed: u64,
    /// Which faults, how often.
    pub faults: FaultMix,
    /// Prices by the model name a request body carries (`claude-sim`, not `anth:claude-sim`).
    pub prices: BTreeMap<String, Price>,
    /// The idle timeout the adapters the simulator hands out are built with: a stall lasts past it.
    pub idle_timeout: Duration,
}

impl SimConfig {
    /// The default mix of faults under `seed`, no prices, a 2 s idle timeout.
    pub fn new(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            faults: FaultMix::default(),
            prices: BTreeMap::new(),
            idle_timeout: Duration::from_secs(2),
        }
    }

    /// Sets the fault mix.
    pub fn faults(mut self, faults: FaultMix) -> SimConfig {
        self.faults = faults;
        self
    }

    /// Prices `model` (the name in the request body).
    pub fn price(mut self, model: &str, price: Price) -> SimConfig {
        self.prices.insert(model.to_owned(), price);
        self
    }

    /// Sets the idle timeout of the adapters it hands out.
    pub fn idle_timeout(mut self, idle_timeout: Duration) -> SimConfig {
        self.idle_timeout = idle_timeout;
        self
    }
}

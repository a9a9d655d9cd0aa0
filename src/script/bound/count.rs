//! How many times each agent site can run: what both dialects' bound analyses fold, site by
//! site, through sequences, branches and loops.

use std::collections::BTreeMap;

/// How many times each agent site (line, column) can run: what both dialects' bound analyses
/// fold, site by site, through sequences, branches and loops.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SiteCounts(pub(crate) BTreeMap<(u32, u32), u64>);

impl SiteCounts {
    pub(crate) fn one(pos: (u32, u32)) -> SiteCounts {
        SiteCounts(BTreeMap::from([(pos, 1)]))
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.0.values().all(|n| *n == 0)
    }

    /// One after the other: the counts add.
    pub(crate) fn add(&mut self, other: &SiteCounts) {
        for (pos, n) in &other.0 {
            let slot = self.0.entry(*pos).or_insert(0);
            *slot = slot.saturating_add(*n);
        }
    }

    /// Run `factor` times.
    pub(crate) fn scaled(mut self, factor: u64) -> SiteCounts {
        for n in self.0.values_mut() {
            *n = n.saturating_mul(factor);
        }
        self
    }

    /// Per site, the larger of the two: at least what either branch can do.
    pub(crate) fn max_with(&mut self, other: &SiteCounts) {
        for (pos, n) in &other.0 {
            let slot = self.0.entry(*pos).or_insert(0);
            *slot = (*slot).max(*n);
        }
    }
}

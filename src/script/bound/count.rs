//! How many times the agent sites of a script can run, folded through sequences (calls add),
//! loops (they multiply) and branches (one arm runs): what the analysis counts, node by node.
//!
//! Two readings of one count: per site, the most times it can run ([`SiteCounts::per_site`],
//! each branch at its largest arm *per site*); and along the paths a run can take, the most
//! calls and the worst cost ([`SiteCounts::total`], each branch at its largest arm *as a
//! whole*). `if c { agent("a") } else { agent("b") }` can run each site once, and makes one
//! call, not two.

use std::collections::BTreeMap;
use std::sync::Arc;

/// How many times each agent site (line, column) can run, and which of those calls exclude
/// each other.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SiteCounts {
    /// Calls made on every path through this count, per site.
    flat: BTreeMap<(u32, u32), u64>,
    /// Branches: of each, `times` runs of one arm.
    choices: Vec<Choice>,
}

/// How [`SiteCounts::total`] weighs calls: a call of a site, `n` of a weight, two together.
pub(crate) struct Weigh<'w, T> {
    pub(crate) zero: T,
    pub(crate) weight: &'w dyn Fn((u32, u32)) -> T,
    pub(crate) times: &'w dyn Fn(T, u64) -> T,
    pub(crate) plus: &'w dyn Fn(T, T) -> T,
}

/// A branch reached `times` times, each time running one of its arms.
#[derive(Debug, Clone, PartialEq)]
struct Choice {
    times: u64,
    arms: Arc<Vec<SiteCounts>>,
}

/// The most distinct branches one count keeps; past it, branches fold into per-site counts
/// (each site at its largest arm: sound, and looser), so a hostile script cannot grow a count
/// without bound.
const MAX_CHOICES: usize = 64;

impl SiteCounts {
    pub(crate) fn one(pos: (u32, u32)) -> SiteCounts {
        SiteCounts { flat: BTreeMap::from([(pos, 1)]), choices: Vec::new() }
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.flat.values().all(|n| *n == 0)
            && self
                .choices
                .iter()
                .all(|choice| choice.times == 0 || choice.arms.iter().all(SiteCounts::is_zero))
    }

    /// One after the other: the counts add.
    pub(crate) fn add(&mut self, other: &SiteCounts) {
        for (pos, n) in &other.flat {
            let slot = self.flat.entry(*pos).or_insert(0);
            *slot = slot.saturating_add(*n);
        }
        for choice in &other.choices {
            match self.choices.iter_mut().find(|mine| mine.arms == choice.arms) {
                Some(mine) => mine.times = mine.times.saturating_add(choice.times),
                None => self.choices.push(choice.clone()),
            }
        }
        if self.choices.len() > MAX_CHOICES {
            self.flatten();
        }
    }

    /// Run `factor` times.
    pub(crate) fn scaled(mut self, factor: u64) -> SiteCounts {
        for n in self.flat.values_mut() {
            *n = n.saturating_mul(factor);
        }
        for choice in &mut self.choices {
            choice.times = choice.times.saturating_mul(factor);
        }
        self
    }

    /// One or the other runs: per site at least what either does, and as a whole the larger.
    pub(crate) fn max_with(&mut self, other: &SiteCounts) {
        if other.is_zero() || *self == *other {
            return;
        }
        if self.is_zero() {
            *self = other.clone();
            return;
        }
        let mine = std::mem::take(self);
        *self = SiteCounts {
            flat: BTreeMap::new(),
            choices: vec![Choice { times: 1, arms: Arc::new(vec![mine, other.clone()]) }],
        };
    }

    /// Per site, the most times it can run: every branch at its largest arm for that site.
    pub(crate) fn per_site(&self) -> BTreeMap<(u32, u32), u64> {
        let mut sites = self.flat.clone();
        for choice in &self.choices {
            let mut largest: BTreeMap<(u32, u32), u64> = BTreeMap::new();
            for arm in choice.arms.iter() {
                for (pos, n) in arm.per_site() {
                    let slot = largest.entry(pos).or_insert(0);
                    *slot = (*slot).max(n);
                }
            }
            for (pos, n) in largest {
                let slot = sites.entry(pos).or_insert(0);
                *slot = slot.saturating_add(n.saturating_mul(choice.times));
            }
        }
        sites
    }

    /// The most a run can add up along any path, each call of a site weighing `weight(site)`:
    /// calls in sequence add (`plus`), `n` runs of a call weigh `times(weight, n)`, and a branch
    /// weighs its heaviest arm.
    pub(crate) fn total<T: Copy + Ord>(&self, weigh: &Weigh<'_, T>) -> T {
        let mut sum = weigh.zero;
        for (pos, n) in &self.flat {
            sum = (weigh.plus)(sum, (weigh.times)((weigh.weight)(*pos), *n));
        }
        for choice in &self.choices {
            let heaviest = choice.arms.iter().map(|arm| arm.total(weigh)).max().unwrap_or(weigh.zero);
            sum = (weigh.plus)(sum, (weigh.times)(heaviest, choice.times));
        }
        sum
    }

    /// Folds every branch into per-site counts.
    fn flatten(&mut self) {
        self.flat = self.per_site();
        self.choices.clear();
    }
}

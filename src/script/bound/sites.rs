//! The agent call sites a walk reaches, in the one shape both dialects hand over: a position,
//! what the prompt is, and what the options map says. A site reached in several contexts (a
//! function called from two places, a loop walked element by element) is merged so that its
//! options say at least what every context says.

use std::collections::HashMap;

use serde_json::Value;

use super::count::SiteCounts;
use super::{AgentSite, CallBound, CallPaths, Known};

/// The options argument of an `agent` call, as far as it is static.
#[derive(Debug)]
pub(crate) enum Options {
    /// No options argument.
    Absent,
    /// A literal map (or table): each key with what its value is.
    Fields(Vec<(String, Known<Value>)>),
    /// A computed value: every option is unknown.
    Computed,
}

/// The site of one `agent(prompt, options)` call as one context reaches it.
pub(crate) fn site(pos: (u32, u32), prompt: Known<String>, options: Options) -> AgentSite {
    let mut site = AgentSite::at(pos.0, pos.1, 0);
    site.prompt = prompt;
    match options {
        Options::Absent => {}
        Options::Fields(fields) => {
            for (key, value) in fields {
                site.set_option(&key, value);
            }
        }
        Options::Computed => site = site.with_computed_options(),
    }
    site
}

/// Every site reached so far, by position, merged over the contexts that reached it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sites(HashMap<(u32, u32), AgentSite>);

impl Sites {
    /// Merges what a site's options say in one context into what they said in others: equal
    /// literals stay, a prompt or system text keeps the longest, a number the largest, anything
    /// else differing turns computed.
    pub(crate) fn record(&mut self, site: AgentSite) {
        let pos = (site.line, site.column);
        let Some(old) = self.0.get_mut(&pos) else {
            self.0.insert(pos, site);
            return;
        };
        fn same<T: PartialEq + Clone>(old: &mut Known<T>, new: Known<T>) {
            if *old != new {
                *old = Known::Computed;
            }
        }
        fn longest(old: &mut Known<String>, new: Known<String>) {
            match (&*old, &new) {
                (Known::Literal(a), Known::Literal(b)) => {
                    if b.chars().count() > a.chars().count() {
                        *old = new;
                    }
                }
                (Known::Unset, Known::Unset) => {}
                _ => *old = Known::Computed,
            }
        }
        fn largest<T: PartialOrd + Clone>(old: &mut Known<T>, new: Known<T>) {
            match (&*old, &new) {
                (Known::Literal(a), Known::Literal(b)) => {
                    if b > a {
                        *old = new;
                    }
                }
                (Known::Unset, Known::Unset) => {}
                _ => *old = Known::Computed,
            }
        }
        longest(&mut old.prompt, site.prompt);
        longest(&mut old.system, site.system);
        same(&mut old.model, site.model);
        same(&mut old.profile, site.profile);
        same(&mut old.role, site.role);
        largest(&mut old.max_output_tokens, site.max_output_tokens);
        largest(&mut old.max_turns, site.max_turns);
        largest(&mut old.max_context_tokens, site.max_context_tokens);
        same(&mut old.tools, site.tools);
        same(&mut old.schema, site.schema);
        largest(&mut old.est_cost, site.est_cost);
    }

    /// The bound: every site the count says can run, in source order, with its count, and how
    /// their calls add up.
    pub(crate) fn finish(mut self, count: SiteCounts) -> CallBound {
        let mut sites: Vec<AgentSite> = count
            .per_site()
            .into_iter()
            .filter(|(_, calls)| *calls > 0)
            .map(|(pos, calls)| {
                let mut site = self.0.remove(&pos).unwrap_or_else(|| AgentSite::at(pos.0, pos.1, 0));
                site.max_calls = calls;
                site
            })
            .collect();
        sites.sort_by_key(|site| (site.line, site.column));
        CallBound::Bounded { sites, paths: CallPaths(count) }
    }
}

//! Helpers several integration modules share (one copy each; see STYLE.md §7).

pub(crate) mod serve;

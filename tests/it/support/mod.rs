//! Helpers several integration modules share (one copy each; see STYLE.md §7).

pub(crate) mod hostile;
pub(crate) mod serve;

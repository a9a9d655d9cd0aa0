//! The one integration test binary (one binary links the crate once; see STYLE.md §7).

mod adapters_e2e;
mod cli;
mod concurrency;
mod crash;
mod determinism_journal;
mod hostile;
mod jcs;
mod lease;
mod lint;
mod live_model;
mod money;
mod provider;
mod resume_explain;
mod samples;
mod script;
mod store;

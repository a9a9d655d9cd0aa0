//! The one integration test binary (one binary links the crate once; see STYLE.md §7).

mod adapters_e2e;
mod agent_contract;
mod cli;
mod concurrency;
mod crash;
mod determinism_journal;
mod hostile;
mod jcs;
mod lint;
mod live_model;
mod provider;
mod samples;
mod script;
mod scripted_server;
mod store;

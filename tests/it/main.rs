//! The one integration test binary (one binary links the crate once; see STYLE.md §7).

mod adapters_e2e;
mod cli;
mod concurrency;
mod crash;
mod edges;
mod hostile;
mod hostile_cli;
mod jcs;
mod lint;
mod live_model;
mod provider;
mod samples;
mod script;
mod store;

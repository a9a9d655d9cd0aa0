//! The one integration test binary (one binary links the crate once; see STYLE.md §7).

/// Counted allocations, as in the `cairn` binary, so in-process runs have their memory limit.
#[global_allocator]
static ALLOCATOR: cairn::CountingAlloc = cairn::CountingAlloc;

mod adapters_e2e;
mod cli;
mod concurrency;
mod crash;
mod determinism_sandbox;
mod hostile;
mod jcs;
mod lint;
mod live_model;
mod provider;
mod samples;
mod script;
mod store;

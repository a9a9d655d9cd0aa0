//! The one integration test binary (one binary links the crate once; see STYLE.md §7).

/// Counted allocations, as in the `cairn` binary, so in-process runs have their memory limit.
#[global_allocator]
static ALLOCATOR: cairn::CountingAlloc = cairn::CountingAlloc;

mod adapters_e2e;
mod agent_contract;
mod bound;
mod children;
mod cli;
mod concurrency;
mod crash;
mod determinism_journal;
mod determinism_sandbox;
mod determinism_steps;
mod docs;
mod edges;
mod fanout_defer;
mod finish_reason;
mod hostile;
mod hostile_cli;
mod hostile_host;
mod inspector;
mod jcs;
mod lease;
mod lint;
mod live_model;
mod lua;
mod money;
mod money_sim;
mod money_wire;
mod newcomer;
mod orchestrate;
mod orchestrate_cli;
mod outside;
mod planner;
mod postgres;
mod provider;
mod queue;
mod resume_budget;
mod resume_explain;
mod samples;
mod script;
mod scripted_server;
mod serve;
mod serve_edges;
mod serve_outages;
mod store;
mod timers;
mod tools_faults;
mod tools_mcp;
mod tools_support;
mod wire_server;

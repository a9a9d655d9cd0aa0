//! cairn: an embeddable engine for durable, budget-bounded, multi-agent LLM workflows.
//!
//! A workflow is a Rust closure ([`Workflow`]) or a Rhai script ([`Script`]) run by an
//! [`Engine`]. It reaches the world only through [`Ctx`] — `agent`, `parallel`, `pipeline`,
//! `step`, `call`, `workflow`, `await_external`, `now`/`random`/`uuid` — and every effect is
//! recorded in a content-addressed journal kept by a [`JournalStore`] (SQLite, JSONL or
//! memory). A crashed, edited or suspended run resumes ([`Engine::resume`]) without paying
//! twice for any completed model call, under a budget ceiling no API can raise; the
//! [`RunOutcome`] carries the value, the dropped work, pending waits and a [`CostReport`].
//!
//! ```
//! use std::sync::Arc;
//! use cairn::{AgentOptions, Engine, MemoryStore, ResumeOptions, RunOptions, RunStatus, Workflow};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let store = Arc::new(MemoryStore::new());
//! let wf = Workflow::new("greet", |ctx, args| async move {
//!     ctx.agent(&format!("greet {}", args["name"]), AgentOptions::default()).await
//! });
//! // No provider registered: the built-in offline echo model answers.
//! let engine = Engine::builder(store.clone(), store).workflow(wf.clone()).build().unwrap();
//! let handle = engine.run(&wf, serde_json::json!({"name": "Ada"}), RunOptions::default()).unwrap();
//! let run_id = handle.run_id().clone();
//! let outcome = handle.result().await.unwrap();
//! assert_eq!(outcome.status, RunStatus::Ok);
//! assert_eq!(outcome.value, Some(serde_json::json!("echo: greet \"Ada\"")));
//!
//! // Resuming replays the journal: nothing is paid again.
//! let again = engine.resume(&run_id, ResumeOptions::default()).unwrap().result().await.unwrap();
//! assert_eq!((again.preview.hits, again.preview.misses), (1, 0));
//! # });
//! ```
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

mod agent;
pub mod alloc;
pub mod cli;
pub mod clock;
mod engine;
mod error;
pub mod journal;
pub mod model;
mod money;
pub mod orchestrator;
pub mod planner;
pub mod provider;
pub mod script;
pub mod service;
pub mod store;
pub mod telemetry;
pub mod testing;
pub mod text;
#[cfg(test)]
mod tidy;

/// The README's Rust example, compiled by `cargo test` (doctests) so it cannot drift.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
mod usage;

pub use agent::{
    Permission, PermissionHook, Permissions, Tool, ToolJournaling, ToolSource, Toolset, fs_read_toolset,
    toolset_hash,
};
pub use alloc::CountingAlloc;
pub use clock::{Clock, ManualClock, SharedClock, SystemClock};
pub use engine::{
    AgentOptions, AgentProfile, Branch, CallOptions, CancelOutcome, CostLine, CostReport, Ctx, Described,
    Dropped, Engine, EngineBuilder, ErrorPolicy, Event, EventKind, EventStream, ExternalOptions, HostFn,
    MAX_WORKFLOW_DEPTH, OnError, OnItemError, ParallelOptions, Pending, PipelineOptions, Registered,
    Resolution, ResumeOptions, RetryPolicy, RunHandle, RunObserver, RunOptions, RunOutcome, Script,
    ScriptDialect, SegmentCeiling, Stage, StepOptions, UnpricedUsage, Worker, WorkerOptions, WorkerReport,
    Workflow, WorkflowFn, WorkflowOptions, branch, segment_ceilings, stage,
};
pub use error::{Error, ErrorClass, ErrorCode};
pub use money::{Money, MoneyError};
pub use provider::{ChatEvent, ChatRequest, Provider};
pub use script::bound::{AgentSite, CallBound, CallPaths, CostBound, cost_bound};
/// The host-charging switch of the overhead bench (`benches/host_charge.rs`); only in a build
/// with the `bench-seams` feature.
#[cfg(feature = "bench-seams")]
#[doc(hidden)]
pub use script::host::set_charging as set_host_charging;
pub use script::{Diagnostic, LintContext, Severity};
pub use store::{Claim, PostgresOptions, PostgresStore, RunQueue};
pub use store::{
    Durability, JournalStore, JsonlStore, LeasableStore, Lease, MemoryStore, OpenedStore, RawEntry,
    RunCursor, RunFilter, RunId, RunMeta, RunStatus, SqliteOptions, SqliteStore, StoreCounters, Tally,
    TranscriptStore,
};
pub use usage::{AttemptEnd, AttemptRecord, Usage};

/// The money ledger's workload, for `benches/ledger.rs` only.
#[doc(hidden)]
pub use agent::ledger::bench_attempts as __bench_ledger_attempts;

//! cairn: an embeddable engine for durable, budget-bounded, multi-agent LLM workflows.
//!
//! A workflow is a Rust closure ([`Workflow`]) or a Rhai or Lua script ([`Script`]) run by an
//! [`Engine`]. It reaches the world only through [`Ctx`] — `agent`, `parallel`, `pipeline`,
//! `step`, `call`, `workflow`, `await_external`, `now`/`random`/`uuid` — and every effect is
//! recorded in a content-addressed journal kept by a [`JournalStore`] (SQLite, JSONL,
//! PostgreSQL or memory). A crashed, edited or suspended run resumes ([`Engine::resume`])
//! without paying twice for any completed model call, under a budget ceiling no API can raise;
//! the [`RunOutcome`] carries the value, the dropped work, pending waits and a [`CostReport`].
//!
//! An [`EngineBuilder`] takes the store, providers ([`provider::Provider`]), prices, routing,
//! agent profiles, toolsets ([`Toolset`], [`FnTool`]) and permissions one by one, or all at
//! once from a `cairn.toml` ([`Config`], [`EngineBuilder::from_config`]).
//!
//! ```
//! use std::sync::Arc;
//! use cairn::{AgentOptions, EngineBuilder, MemoryStore, ResumeOptions, RunOptions, RunStatus, Workflow};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! // No provider registered: the built-in offline echo model answers.
//! let engine = EngineBuilder::new(Arc::new(MemoryStore::new())).build().unwrap();
//! let wf = Workflow::new("greet", |ctx, args| async move {
//!     ctx.agent(&format!("greet {}", args["name"]), AgentOptions::default()).await
//! });
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
//!
//! # Feature flags
//! The default build is the whole product (`cli`, `serve`, `postgres`, `lua`, `sim`). With
//! `default-features = false` the crate is the engine with Rhai scripts, the SQLite, JSONL and
//! memory stores, the HTTP providers, MCP tools and telemetry; add back what you use:
//! - `lua`: the Lua 5.4 dialect (`Script::lua`).
//! - `postgres`: `PostgresStore` and `postgres://` store URLs.
//! - `serve`: the HTTP service (`cairn::service`).
//! - `sim`: the fault simulator (`cairn::testing::sim`).
//! - `cli`: the `cairn` binary's commands (takes `serve`, `postgres` and `lua`).
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

mod agent;
mod alloc;
#[cfg(feature = "cli")]
mod cli;
mod clock;
mod config;
mod diagnostic;
mod engine;
mod error;
pub mod journal;
mod model;
mod money;
mod orchestrator;
mod planner;
pub mod provider;
mod script;
#[cfg(feature = "serve")]
pub mod service;
pub mod store;
mod telemetry;
pub mod testing;
mod text;
#[cfg(test)]
mod tidy;
mod usage;

/// The README's Rust example, compiled by `cargo test` (doctests) so it cannot drift.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The guide's Rust examples, compiled as doctests like the README's.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/embedding.md")]
pub struct GuideEmbeddingDoctests;

/// The fault simulator page's Rust example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../docs/fault-simulator.md")]
pub struct FaultSimulatorDoctests;

pub use agent::{
    FnTool, Permission, PermissionHook, Permissions, Tool, ToolJournaling, ToolSource, Toolset,
    fs_read_toolset, toolset_hash,
};
pub use alloc::CountingAlloc;
pub use clock::{Clock, ManualClock, SharedClock, SystemClock};
pub use config::Config;
pub use engine::{
    AgentOptions, AgentProfile, Branch, CallOptions, CancelOutcome, CostLine, CostReport, Ctx, Described,
    Dropped, Engine, EngineBuilder, ErrorPolicy, Event, EventKind, EventStream, ExternalOptions, HostFn,
    MAX_WORKFLOW_DEPTH, OnError, OnItemError, ParallelOptions, Pending, PipelineOptions, Registered,
    Resolution, ResumeOptions, RetryPolicy, RunHandle, RunObserver, RunOptions, RunOutcome, Script,
    ScriptDialect, SegmentCeiling, Stage, StepOptions, UnpricedUsage, Worker, WorkerOptions, WorkerReport,
    Workflow, WorkflowFn, WorkflowOptions, branch, segment_ceilings, stage,
};
pub use error::{Error, ErrorClass, ErrorCode};
pub use model::{InvalidModelRef, InvocationRole, ModelRef, Price, PriceTable};
pub use money::{Money, MoneyError};
pub use orchestrator::{
    Acceptance, AtCap, ChildPolicy, ChildStatus, ChildSummary, ChildView, ClaimFinding, ClaimPolicy,
    ClaimVerdict, Completion, FinishValidation, FinishValidator, OrchestrateOptions, Orchestration,
    PatternRule, orchestrate, orchestrate_workflow,
};
pub use planner::{
    CardChoice, DraftReport, PendingVerdict, PlanError, PlanOptions, PlanResult, Planned, Planning,
    RejectCause, Rejection, RunPlannedOptions, plan, planning_run_id, profile_card, run_planned,
    start_planned,
};
pub use provider::{ChatEvent, ChatRequest, Provider};
pub use script::bound::{AgentSite, CallBound, CallPaths, CostBound, cost_bound};
#[cfg(feature = "lua")]
pub use script::lua::LuaDialect;
pub use script::rhai::RhaiDialect;
pub use script::rhai::sandbox::{SandboxLimits, stable_hashing as stable_rhai_hashing};
pub use script::{Diagnostic, LintContext, Severity, api_card};
pub use store::{Claim, RunQueue};
pub use store::{
    Durability, JournalStore, JsonlStore, LeasableStore, Lease, MemoryStore, OpenedStore, RawEntry,
    RunCursor, RunFilter, RunId, RunMeta, RunStatus, SqliteOptions, SqliteStore, StoreCounters, Tally,
    TranscriptStore,
};
#[cfg(feature = "postgres")]
pub use store::{PostgresOptions, PostgresStore};
pub use telemetry::{Telemetry, TelemetryConfig, TelemetryError};
pub use usage::{AttemptEnd, AttemptRecord, Usage};

/// The `cairn` binary's entry point: the binary is this one call (see `src/main.rs`).
#[cfg(feature = "cli")]
#[doc(hidden)]
pub fn __cli_main() -> std::process::ExitCode {
    // Before anything builds a Rhai engine: the hashing seed can be set only first.
    script::rhai::sandbox::stable_hashing();
    cli::main()
}

/// Internals the integration tests and the benches reach. Not part of the API: no docs, no
/// semver promise; an embedder uses the items above.
#[doc(hidden)]
pub mod __internal {
    pub use crate::agent::ledger::bench_attempts as bench_ledger_attempts;
    pub use crate::planner::{compact_card, extract_script, repair_prompt};
    pub use crate::script::RULES;
    pub use crate::telemetry::CAPTURE_CONTENT_VAR;
    /// The Rhai dialect's compile and lint.
    pub mod rhai {
        pub use crate::script::rhai::{compile, lint};
    }
    /// The Lua dialect's lint and call bound.
    #[cfg(feature = "lua")]
    pub mod lua {
        pub use crate::script::lua::lint::bound::call_bound;
        pub use crate::script::lua::lint::lint;
    }
    /// The host-charging switch of the overhead bench (`benches/host_charge.rs`).
    #[cfg(feature = "bench-seams")]
    pub use crate::script::host::set_charging as set_host_charging;
}

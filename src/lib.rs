//! cairn: an embeddable engine for durable, budget-bounded, multi-agent LLM workflows.
//!
//! A workflow's every effect is recorded in a content-addressed journal kept by a
//! [`JournalStore`], so a crashed or edited run resumes without paying twice for any
//! completed model call. This release holds the foundation: the journal kernel
//! ([`journal`]) and the stores ([`store`]).
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

mod agent;
pub mod cli;
pub mod clock;
mod engine;
mod error;
pub mod journal;
pub mod model;
mod money;
pub mod provider;
pub mod script;
pub mod store;
pub mod testing;
mod usage;

pub use agent::{Permission, PermissionHook, Permissions, Tool, Toolset, fs_read_toolset, toolset_hash};
pub use clock::{Clock, ManualClock, SharedClock, SystemClock};
pub use engine::{
    AgentOptions, AgentProfile, Branch, CallOptions, CostLine, CostReport, Ctx, Dropped, Engine,
    EngineBuilder, ErrorPolicy, Event, EventKind, EventStream, ExternalOptions, HostFn, OnError, OnItemError,
    ParallelOptions, Pending, PipelineOptions, Registered, ResumeOptions, RetryPolicy, RunHandle, RunOptions,
    RunOutcome, Script, ScriptDialect, Stage, StepOptions, UnpricedUsage, Workflow, WorkflowFn,
    WorkflowOptions, branch, stage,
};
pub use error::{Error, ErrorClass, ErrorCode};
pub use money::{Money, MoneyError};
pub use provider::{ChatEvent, ChatRequest, Provider};
pub use script::{Diagnostic, LintContext, Severity};
pub use store::{
    Durability, JournalStore, JsonlStore, LeasableStore, Lease, MemoryStore, OpenedStore, RawEntry,
    RunFilter, RunId, RunMeta, RunStatus, SqliteOptions, SqliteStore, TranscriptStore,
};
pub use usage::Usage;

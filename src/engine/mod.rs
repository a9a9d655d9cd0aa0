//! L4: the engine, and its entry: starting, resuming and resolving runs. Everything below
//! it has a room of its own, and none imports this file back:
//!
//! - the registries and the handle on them (`registry.rs`), the builder (`builder.rs`), the
//!   dialect seam (`dialect.rs`), workflows (`workflow.rs`);
//! - a run's lifecycle (`lifecycle.rs`, `inputs.rs`: start, resume, launch), its state
//!   (`run.rs`: one owner, over the journal writer `writer.rs`, `liveness.rs`, leasing in
//!   `lease.rs`, settling in `settle.rs`), the caller's `RunHandle` (`handle.rs`) and the
//!   outcome (`outcome.rs`);
//! - `Ctx` (`ctx.rs`), the one canonical API a workflow sees its run through, and its verbs,
//!   one room each (`step.rs`, `call.rs`, `child.rs`, `external.rs`, `fanout.rs`,
//!   `budget_reads.rs`, `facts.rs`, `phase.rs`, over `two_phase.rs` and `policy.rs`);
//! - budgets and admission (`budget.rs`, `admit.rs`, `admission.rs`, `carry.rs`), identity
//!   (`identity.rs`), re-keys (`explain.rs`, `rekeys.rs`), events and cost (`events.rs`,
//!   `cost.rs`), the run queue (`queue.rs`).
//!
//! Nothing here is global: two engines in one process share nothing.

mod abandon;
mod actions;
mod admission;
mod admit;
mod agent_call;
mod before;
mod budget;
mod budget_override;
mod budget_reads;
mod builder;
mod call;
mod call_records;
mod carry;
mod child;
mod child_scripts;
mod cost;
mod ctx;
mod dialect;
#[cfg(any(feature = "cli", feature = "serve"))]
mod digest;
mod events;
mod explain;
mod external;
mod facts;
mod fanout;
mod handle;
mod identity;
mod inputs;
mod lease;
mod lifecycle;
// What the service relays of a live run (its tokens) is read only with the `serve` feature.
#[cfg_attr(not(feature = "serve"), allow(dead_code))]
mod live;
#[cfg_attr(not(feature = "serve"), allow(dead_code))]
mod live_store;
mod liveness;
mod observer;
mod options;
mod outcome;
mod phase;
mod policy;
mod queue;
mod registry;
mod rekeys;
mod resolution;
mod run;
mod script_clock;
mod settle;
mod started;
mod step;
mod step_ops;
mod stored;
mod summary;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_features;
#[cfg(test)]
mod tests_journal;
#[cfg(test)]
mod tests_tools;
#[cfg(test)]
mod tests_writer;
mod tool_call;
mod two_phase;
mod worker;
mod workflow;
mod writer;

use serde_json::Value;

pub(crate) use admit::FLAT_UNPRICED_RESERVE_NANO_USD;
pub(crate) use budget::{AccountId, Reservation};
pub use budget_override::{SegmentCeiling, segment_ceilings};
pub use builder::EngineBuilder;
#[cfg(feature = "serve")]
pub(crate) use call_records::call_record;
pub use child_scripts::MAX_WORKFLOW_DEPTH;
pub(crate) use child_scripts::valid_workflow_name;
pub use cost::{CostLine, CostReport, UnpricedUsage};
pub use ctx::Ctx;
pub use dialect::{Script, ScriptDialect};
#[cfg(any(feature = "cli", feature = "serve"))]
pub(crate) use digest::RunDigest;
pub use events::{Event, EventKind, EventStream};
pub use fanout::{Branch, Stage, branch, stage};
pub use handle::RunHandle;
pub use inputs::{ResumeOptions, RunOptions};
pub use lease::Resolution;
#[cfg(feature = "cli")]
pub(crate) use lease::is_dead as driver_is_dead;
#[cfg(feature = "serve")]
pub(crate) use live::LiveToken;
#[cfg(feature = "serve")]
pub(crate) use live_store::{RemoteLive, read_remote_live, unwant_live};
pub use observer::RunObserver;
pub use options::{
    AgentOptions, CallOptions, ErrorPolicy, ExternalOptions, OnError, OnItemError, ParallelOptions,
    PipelineOptions, RetryPolicy, StepOptions, WorkflowOptions,
};
pub use outcome::{Dropped, Pending, RunOutcome};
pub use queue::CancelOutcome;
#[cfg(feature = "serve")]
pub(crate) use queue::{RESERVED_FIELD, is_reserved};
pub(crate) use registry::EngineInner;
pub use registry::{AgentProfile, Described, Engine, HostFn, Registered};
pub(crate) use script_clock::{PastLimit, REPRODUCTION_MARGIN, ScriptClock};
pub(crate) use step_ops::StepOps;
pub(crate) use two_phase::Begun;
pub use worker::{Worker, WorkerOptions, WorkerReport};
pub use workflow::{Workflow, WorkflowFn};
pub(crate) use writer::Durability;

use crate::error::Error;
use crate::store::RunId;

impl Engine {
    /// Starts a run of `workflow` with `args`. Must be called inside a tokio runtime.
    ///
    /// A workflow the builder did not register is remembered by name, so [`Engine::resume`]
    /// on this engine (or a clone) finds it. A closure cannot be stored with the run: another
    /// process resumes it only with the workflow registered (`EngineBuilder::workflow`).
    ///
    /// # Errors
    /// `config` for invalid options (a non-finite or negative budget, a deadline in the
    /// past, a run id that already exists); nothing is written then. `internal` for a store
    /// failure.
    pub fn run(&self, workflow: &Workflow, args: Value, options: RunOptions) -> Result<RunHandle, Error> {
        if !self.inner.workflows.contains_key(&workflow.name) {
            let mut ran = self.inner.ran.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            ran.insert(workflow.name.clone(), workflow.clone());
        }
        lifecycle::start(self.inner.clone(), workflow.clone(), args, options, None)
    }

    /// Starts a run of a script: compiles it (lint errors reject it before anything is
    /// written), stores its source with the run so a resume needs no file, and runs it.
    ///
    /// # Errors
    /// `validation` when the script is rejected (the diagnostics are in the message);
    /// `config` for an unknown dialect or invalid options.
    pub fn run_script(
        &self,
        script: &Script,
        args: Value,
        mut options: RunOptions,
    ) -> Result<RunHandle, Error> {
        let dialect = self.dialect(&script.dialect)?;
        let workflow = dialect.prepare(self, &script.name, &script.source)?;
        if script.policy == ErrorPolicy::Lenient {
            options.policy = ErrorPolicy::Lenient;
        }
        let source = inputs::ScriptSource {
            dialect: dialect.name(),
            source: script.source.clone(),
            hash: script.source_hash(),
        };
        lifecycle::start(self.inner.clone(), workflow, args, options, Some(source))
    }

    /// Resumes a run from its journal: completed calls replay, the rest run live.
    ///
    /// # Errors
    /// `config` for an unknown run, an unknown workflow or bad options; `internal` for a
    /// store failure or an unreadable journal.
    pub fn resume(&self, run_id: &RunId, options: ResumeOptions) -> Result<RunHandle, Error> {
        lifecycle::resume(self, run_id, options)
    }

    /// Appends a resolution for a suspended run's `await_external(key)` to its journal, for
    /// a run that is not live in this process (`cairn resolve`). Returns whether it applied
    /// (or, for a run another process is driving, was queued for that driver to apply).
    ///
    /// # Errors
    /// `config` for an unknown run; `validation` when the run never waited on `key`.
    pub fn resolve_external(&self, run_id: &RunId, key: &str, value: Value) -> Result<bool, Error> {
        self.resolve(run_id, key, value).map(|r| r != Resolution::AlreadyResolved)
    }

    /// Leaves a new ceiling for the next resume of a settled run (what the service's resume
    /// route does before a worker resumes the run): judged now against the spend the run has
    /// settled, then applied and journaled by that resume as a `run_budget_override` decision.
    ///
    /// # Errors
    /// `config` for an unknown run, an invalid value or one below the settled spend;
    /// `run_busy` when another process drives the run; `internal` for a store failure.
    pub fn raise_ceiling_on_resume(&self, run_id: &RunId, budget_usd: f64) -> Result<(), Error> {
        budget_override::leave_for_resume(&self.inner, run_id, budget_usd)
    }

    /// Resolves an `await_external(key)` wait of a run that is not live in this process.
    /// When nobody drives the run, the resolution is appended under the run's lease; when
    /// another process drives it, the resolution waits in the run's inbox and that driver
    /// applies it (or the next resume does), so it is never lost.
    ///
    /// # Errors
    /// `config` for an unknown run; `validation` when the run never waited on `key` or the
    /// value does not satisfy the wait's schema; `internal` for a store failure.
    pub fn resolve(&self, run_id: &RunId, key: &str, value: Value) -> Result<Resolution, Error> {
        self.resolve_by(run_id, key, value, None)
    }

    /// [`Engine::resolve`] on behalf of a named requester (the service's token): its name is
    /// journaled as the resolution's `by`.
    ///
    /// # Errors
    /// As [`Engine::resolve`].
    pub fn resolve_by(
        &self,
        run_id: &RunId,
        key: &str,
        value: Value,
        by: Option<&str>,
    ) -> Result<Resolution, Error> {
        let resolution = lease::resolve(&self.inner, run_id, key, value, by)?;
        if resolution != Resolution::AlreadyResolved {
            // A parked queued run goes back to the queue for a worker to continue.
            queue::requeue_resolved(&self.inner, run_id)?;
        }
        Ok(resolution)
    }

    /// The value a resolution of `key` left in the run's inbox holds, while it waits there for
    /// the run's driver to apply it, or, before its resolver (in this process or another on
    /// the store) has written it, the value that claimed the run's newest wait on `key`.
    ///
    /// # Errors
    /// The store's failure.
    pub fn queued_resolution(&self, run_id: &RunId, key: &str) -> Result<Option<Value>, Error> {
        match lease::inbox(&self.inner, run_id)?.into_iter().find(|(_, item)| item.key == key) {
            Some((_, item)) => Ok(Some(item.value)),
            // Claimed in the store by a resolver (maybe another process) still writing it.
            None => resolution::claimed(&self.inner, run_id, key),
        }
    }
}

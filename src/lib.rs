//! cairn: an embeddable engine for durable, budget-bounded, multi-agent LLM workflows.
//!
//! A workflow's every effect is recorded in a content-addressed journal kept by a
//! [`JournalStore`], so a crashed or edited run resumes without paying twice for any
//! completed model call. This release holds the foundation: the journal kernel
//! ([`journal`]) and the stores ([`store`]).
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

pub mod clock;
mod error;
pub mod journal;
mod money;
pub mod script;
pub mod store;
mod usage;

pub use clock::{Clock, ManualClock, SharedClock, SystemClock};
pub use error::{Error, ErrorClass, ErrorCode};
pub use money::{Money, MoneyError};
pub use script::{Diagnostic, LintContext, Severity};
pub use store::{
    JournalStore, LeasableStore, Lease, RawEntry, RunFilter, RunId, RunMeta, RunStatus, TranscriptStore,
};
pub use usage::Usage;

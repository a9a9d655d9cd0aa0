//! `Workflow`: a named Rust closure `|ctx, args| async { .. }`, the form every workflow takes
//! to run (a script is prepared into one by its dialect).

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::ctx::Ctx;
use crate::error::Error;

/// The body of a closure workflow.
pub type WorkflowFn = Arc<dyn Fn(Ctx, Value) -> BoxFuture<'static, Result<Value, Error>> + Send + Sync>;

/// A named workflow: a Rust closure `|ctx, args| async { .. }`.
#[derive(Clone)]
pub struct Workflow {
    pub(super) name: String,
    pub(super) body: WorkflowFn,
}

impl Workflow {
    /// A closure workflow.
    ///
    /// ```
    /// use cairn::{Workflow, AgentOptions};
    /// let wf = Workflow::new("greet", |ctx, args| async move {
    ///     let name = args["name"].as_str().unwrap_or("world").to_owned();
    ///     ctx.agent(&format!("greet {name}"), AgentOptions::default()).await
    /// });
    /// assert_eq!(wf.name(), "greet");
    /// ```
    pub fn new<F, Fut>(name: &str, body: F) -> Workflow
    where
        F: Fn(Ctx, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, Error>> + Send + 'static,
    {
        Workflow { name: name.to_owned(), body: Arc::new(move |ctx, args| Box::pin(body(ctx, args))) }
    }

    /// The workflow's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for Workflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workflow").field("name", &self.name).finish_non_exhaustive()
    }
}

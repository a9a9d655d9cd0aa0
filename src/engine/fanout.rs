//! Structured concurrency: `parallel` (branches in source order, strict abort or settle)
//! and `pipeline` (items flowing through up to six stages with no barrier between stages).
//!
//! Branch `i` of the `n`-th `parallel` in a scope runs in scope `par:n:i`; stage `s` of item
//! `i` of a pipeline runs in `pipe:s:i`. Scopes come from structure only, so a branch's calls
//! keep their identity however the branches interleave.

use std::future::Future;
use std::sync::Arc;

use futures::future::{BoxFuture, join_all};
use serde_json::{Value, json};

use super::Dropped;
use super::ctx::{Ctx, ParallelOptions, PipelineOptions};
use crate::error::{Error, ErrorCode};
use crate::journal::Segment;

/// One branch of [`Ctx::parallel`].
pub type Branch = Box<dyn FnOnce(Ctx) -> BoxFuture<'static, Result<Value, Error>> + Send>;

/// One stage of [`Ctx::pipeline`]: takes the item's previous value, returns its next.
pub type Stage = Arc<dyn Fn(Ctx, Value) -> BoxFuture<'static, Result<Value, Error>> + Send + Sync>;

/// Wraps a closure as a [`Branch`].
pub fn branch<F, Fut>(body: F) -> Branch
where
    F: FnOnce(Ctx) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Value, Error>> + Send + 'static,
{
    Box::new(move |ctx| Box::pin(body(ctx)))
}

/// Wraps a closure as a [`Stage`].
pub fn stage<F, Fut>(body: F) -> Stage
where
    F: Fn(Ctx, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, Error>> + Send + 'static,
{
    Arc::new(move |ctx, value| Box::pin(body(ctx, value)))
}

/// What a failed pipeline item does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnItemError {
    /// Abort the pipeline (cancelling the other items) and raise the error.
    #[default]
    Throw,
    /// Leave the item out of the result; the loss is itemized in `dropped`.
    Drop,
    /// Put `{"error": {...}}` in the item's place.
    Collect,
}

/// The most stages a pipeline may have.
const MAX_STAGES: usize = 6;

/// Picks the error to raise for a failed fan-out: the first failure that is not a sibling's
/// cancellation, so the root cause surfaces.
fn root_cause(errors: impl Iterator<Item = Error>) -> Option<Error> {
    let errors: Vec<Error> = errors.collect();
    errors.iter().find(|e| e.code != ErrorCode::Cancelled).cloned().or_else(|| errors.into_iter().next())
}

impl Ctx {
    /// Runs branches concurrently and returns their values in source order.
    ///
    /// Without `settle`, the first failure cancels the siblings (their in-flight calls
    /// journal as `cancelled` and rerun on resume) and is raised. With `settle`, every
    /// branch runs to its end and each result is `{"status":"ok","value":..}` or
    /// `{"status":"error","error":{..}}`.
    ///
    /// # Errors
    /// The first branch failure (strict), or `cancelled` when the run stops.
    pub async fn parallel(&self, branches: Vec<Branch>, opts: ParallelOptions) -> Result<Vec<Value>, Error> {
        self.check_stopped()?;
        let site = self.next_parallel_site();
        if branches.is_empty() {
            return Ok(Vec::new());
        }
        let group = self.cancel.child_token();
        self.run.fork(branches.len());
        let runs = branches.into_iter().enumerate().map(|(index, body)| {
            let ctx =
                self.nested(&Segment::Par { site, branch: index as u32 }, group.child_token(), self.account);
            let group = group.clone();
            let run = self.run.clone();
            let settle = opts.settle;
            async move {
                let result = body(ctx).await;
                if result.is_err() && !settle {
                    group.cancel();
                }
                run.branch_done();
                result
            }
        });
        let results = join_all(runs).await;
        self.run.join();
        if opts.settle {
            return Ok(results
                .into_iter()
                .map(|r| match r {
                    Ok(value) => json!({ "status": "ok", "value": value }),
                    Err(error) => json!({ "status": "error", "error": error }),
                })
                .collect());
        }
        if let Some(error) = root_cause(results.iter().filter_map(|r| r.as_ref().err().cloned())) {
            return Err(error);
        }
        Ok(results.into_iter().map(|r| r.unwrap_or(Value::Null)).collect())
    }

    /// Like [`Ctx::parallel`] over data: one branch per item, each given its item.
    ///
    /// # Errors
    /// As for [`Ctx::parallel`].
    pub async fn parallel_map<F, Fut>(
        &self,
        items: Vec<Value>,
        body: F,
        opts: ParallelOptions,
    ) -> Result<Vec<Value>, Error>
    where
        F: Fn(Ctx, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, Error>> + Send + 'static,
    {
        let body = Arc::new(body);
        let branches = items
            .into_iter()
            .map(|item| {
                let body = body.clone();
                branch(move |ctx| body(ctx, item))
            })
            .collect();
        self.parallel(branches, opts).await
    }

    /// Streams every item through 1–6 stages; each item moves to its next stage as soon as
    /// it finishes the last (no barrier between stages). Returns the final values in source
    /// order.
    ///
    /// # Errors
    /// `config` for 0 or more than 6 stages; with `on_item_error: Throw`, the first item
    /// failure (the other items are cancelled); `cancelled` when the run stops.
    pub async fn pipeline(
        &self,
        items: Vec<Value>,
        stages: Vec<Stage>,
        opts: PipelineOptions,
    ) -> Result<Vec<Value>, Error> {
        self.check_stopped()?;
        if stages.is_empty() || stages.len() > MAX_STAGES {
            return Err(Error::config(format!(
                "a pipeline takes 1 to {MAX_STAGES} stages, not {}",
                stages.len()
            )));
        }
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let group = self.cancel.child_token();
        let stages = Arc::new(stages);
        self.run.fork(items.len());
        let runs = items.into_iter().enumerate().map(|(index, item)| {
            let stages = stages.clone();
            let group = group.clone();
            let run = self.run.clone();
            let parent = self.clone();
            let throw = opts.on_item_error == OnItemError::Throw;
            async move {
                let mut value = item;
                let mut result = Ok(());
                for (stage_index, stage) in stages.iter().enumerate() {
                    let segment = Segment::Pipe { stage: stage_index as u32, item: index as u32 };
                    let ctx = parent.nested(&segment, group.child_token(), parent.account);
                    match stage(ctx, value.clone()).await {
                        Ok(next) => value = next,
                        Err(error) => {
                            result = Err(error);
                            break;
                        }
                    }
                }
                if result.is_err() && throw {
                    group.cancel();
                }
                run.branch_done();
                result.map(|()| value)
            }
        });
        let results = join_all(runs).await;
        self.run.join();
        match opts.on_item_error {
            OnItemError::Throw => {
                if let Some(error) = root_cause(results.iter().filter_map(|r| r.as_ref().err().cloned())) {
                    return Err(error);
                }
                Ok(results.into_iter().map(|r| r.unwrap_or(Value::Null)).collect())
            }
            OnItemError::Drop => Ok(results
                .into_iter()
                .enumerate()
                .filter_map(|(index, r)| match r {
                    Ok(value) => Some(value),
                    Err(error) => {
                        self.run.record_dropped(Dropped {
                            scope: self.scope.to_string(),
                            kind: "item".into(),
                            label: Some(format!("item {index}")),
                            error,
                        });
                        None
                    }
                })
                .collect()),
            OnItemError::Collect => {
                Ok(results.into_iter().map(|r| r.unwrap_or_else(|error| json!({ "error": error }))).collect())
            }
        }
    }
}

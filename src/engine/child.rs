//! `workflow`: a registered workflow run as a child. Identity: `{kind: child, name, args or
//! key}`; the child runs in scope `wf:name:k` (the k-th call of that workflow here, or under a
//! site label), on a budget sub-account whose spend rolls up, within the engine's depth limit.
//! Journal: the two-phase pair; a child that replays whole never runs its body, which covers
//! the records under its scope.

use serde_json::Value;

use super::budget::AccountId;
use super::ctx::Ctx;
use super::identity::CallIdentity;
use super::options::WorkflowOptions;
use super::two_phase::Begun;
use crate::error::Error;
use crate::journal::{Kind, Segment};

impl Ctx {
    /// Runs a registered workflow as a child: its own scope (`wf:name:k`), a budget
    /// sub-account (30 % of this account's remainder, capped by `opts.budget`) whose spend
    /// rolls up, and a depth limit.
    ///
    /// # Replay
    /// Keyed on `{name, args or key}`; a completed child replays without running its body,
    /// and a rerun child replays its own completed calls.
    ///
    /// # Errors
    /// `config` for an unknown workflow or when the depth limit is reached; the child's error.
    pub async fn workflow(&self, name: &str, args: Value, opts: WorkflowOptions) -> Result<Value, Error> {
        let site = match self.labelled_site(opts.label.as_deref()) {
            Ok(site) => site,
            Err(error) => return self.fail(opts.on_error, "child", Some(name.to_owned()), error),
        };
        let this = site.as_ref().unwrap_or(self);
        this.workflow_here(name, args, opts).await
    }

    async fn workflow_here(&self, name: &str, args: Value, opts: WorkflowOptions) -> Result<Value, Error> {
        let engine = self.run.engine.clone();
        let Some(child) = engine.workflows.get(name).cloned() else {
            let error = Error::config(format!("unknown child workflow {name:?}"));
            return self.fail(opts.on_error, "child", Some(name.to_owned()), error);
        };
        if self.depth + 1 > engine.max_depth {
            let error =
                Error::config(format!("child workflow depth limit {} reached at {name:?}", engine.max_depth));
            return self.fail(opts.on_error, "child", Some(name.to_owned()), error);
        }
        let call_index = {
            let mut children = self.counters.children.lock().unwrap_or_else(|p| p.into_inner());
            let slot = children.entry(name.to_owned()).or_insert(0);
            let index = *slot;
            *slot += 1;
            index
        };
        let key = CallIdentity::new("child", name, opts.key.as_deref(), &args).key()?;
        let account = engine_share(self, &opts);
        let mut child_ctx = self.nested(
            &Segment::Wf { name: name.to_owned(), call: call_index },
            self.cancel.child_token(),
            account,
        );
        child_ctx.depth = self.depth + 1;
        // A child's script counts its operations against its own budget, not a step's.
        child_ctx.step_ops = None;
        let child_scope = child_ctx.scope.clone();
        let live = match self.begin_two_phase(Kind::Child, "child", name, key, opts.on_error)? {
            Begun::Done(result, _) => {
                // A child that replays whole never runs its body.
                self.run.cover(&child_scope);
                return result;
            }
            Begun::Live(live) => live,
        };
        // What the parent recorded before the child is durable before the child acts on it.
        if let Err(e) = self.run.flush_async().await {
            return self.end_two_phase(live, Err(e));
        }
        let body = child.body.clone();
        let result = tokio::select! {
            result = body(child_ctx, args) => result,
            _ = self.cancel.cancelled() => Err(self.run.stopped_error()),
        };
        self.end_two_phase(live, result)
    }
}

fn engine_share(ctx: &Ctx, opts: &WorkflowOptions) -> AccountId {
    ctx.run.budget.open_sub_account(ctx.account, ctx.run.engine.child_share_ppm, opts.budget)
}

//! `step`: a body run once, its JSON result journaled and replayed. Identity: `{kind: step,
//! label or key, deps, body}` (body: the source identity of a script's step body) in the calling scope; the body runs in a scope of its own,
//! `step:KEY16:n` (the key's first 16 hex digits and the step's ordinal among same-key steps
//! here), so whatever it does never shifts the identity of what comes after it. Journal: a
//! `running` entry and a terminal one (the two-phase protocol of `two_phase.rs`).

use std::future::Future;

use serde_json::Value;

use super::ctx::Ctx;
use super::identity::StepIdentity;
use super::options::StepOptions;
use super::two_phase::{Begun, LiveCall, step_segment};
use crate::error::Error;
use crate::journal::{ContentKey, Kind};

impl Ctx {
    /// Runs `body` once and journals its JSON result; later runs replay it.
    ///
    /// The body gets a context of its own scope (`step:KEY:n`, from the step's content key
    /// and its ordinal among same-key steps here): effects inside it (agents, `parallel`
    /// sites, child workflows, `now`/`random`/`uuid`) count in that scope, so whether the
    /// step ran or replayed never shifts what comes after it.
    ///
    /// # Replay
    /// Keyed on `{label or key, deps}` in this scope.
    ///
    /// # Errors
    /// The body's error (or null under the lenient policy); `cancelled`; `journal_miss` in a
    /// dry run.
    pub async fn step<F, Fut>(&self, label: &str, opts: StepOptions, body: F) -> Result<Value, Error>
    where
        F: FnOnce(Ctx) -> Fut,
        Fut: Future<Output = Result<Value, Error>>,
    {
        let key = Ctx::step_key(label, &opts)?;
        let live = match self.begin_two_phase(Kind::Step, "step", label, key, opts.on_error)? {
            Begun::Done(result, _) => return result,
            Begun::Live(live) => live,
        };
        let inner = self.step_body(&live);
        let result = tokio::select! {
            result = body(inner) => result,
            _ = self.cancel.cancelled() => Err(self.run.stopped_error()),
        };
        self.end_two_phase(live, result)
    }

    /// The context a live step's body runs in: the scope `step:KEY:n` under this one, with
    /// fresh counters, counting the operations run in it into the step's tally.
    pub(crate) fn step_body(&self, live: &LiveCall) -> Ctx {
        let segment = step_segment(live.running.key, live.running.ordinal);
        let mut inner = self.nested(&segment, self.cancel.clone(), self.account);
        inner.step_ops = live.ops.clone();
        inner
    }

    /// The identity of a step, as [`Ctx::step`] derives it.
    pub(crate) fn step_key(label: &str, opts: &StepOptions) -> Result<ContentKey, Error> {
        StepIdentity::new(label, opts.key.as_deref(), &opts.deps, opts.body.as_deref()).key()
    }
}

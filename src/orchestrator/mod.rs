//! The dynamic orchestrator (mode (c)): an ordinary agent, role `orchestrate`, holding a base
//! toolset with which it spawns, awaits, pages, cancels and finishes child agents as it goes.
//!
//! It is not a framework beside the engine. The orchestrator's turns are an agent call like any
//! other (checkpointed at every turn boundary, so a killed orchestration continues from its
//! last turn); each child is an agent call in a scope of its own (`at:child:N` under the
//! orchestration's `at:orchestrate:K`, N the child's admission ordinal); and every dynamic
//! verdict (an admission or a refusal with its arithmetic, a cancellation, a finish, an
//! acceptance, the claim findings) is a `decision` entry written before its effect. A resume
//! folds those decisions back into the roster before the orchestrator's loop continues, so a
//! re-answered tool call finds its journaled verdict by the call's id instead of deciding
//! again against options or a budget that drifted, and each child replays from its own scope
//! without paying twice.
//!
//! ```no_run
//! # async fn demo(ctx: cairn::Ctx) -> Result<(), cairn::Error> {
//! use cairn::{Acceptance, ChildPolicy, OrchestrateOptions};
//! let opts = OrchestrateOptions {
//!     profiles: vec!["researcher".into(), "writer".into()],
//!     acceptance: Some(Acceptance { policy: ChildPolicy::MinSuccessful(2), min_spawned_children: Some(3) }),
//!     ..OrchestrateOptions::default()
//! };
//! let outcome = ctx.orchestrate("Audit the public API for breaking changes", opts).await?;
//! println!("{} with {} children", outcome.completion.as_str(), outcome.children.len());
//! # Ok(()) }
//! ```

mod acceptance;
mod claims;
mod decisions;
mod options;
mod orch;
mod roster;
mod tools;
mod validate;
mod verdict;

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Value, json};

use crate::engine::{AgentOptions, Ctx, Engine, OnError, RunHandle, RunOptions, Workflow};
use crate::error::{Error, ErrorCode};
use crate::model::InvocationRole;

pub use acceptance::{Acceptance, ChildPolicy};
#[cfg(feature = "cli")]
pub(crate) use decisions::journal_report;
pub use options::{AtCap, ClaimPolicy, OrchestrateOptions};
pub use roster::{ChildStatus, ChildSummary};
pub use validate::{ChildView, FinishValidation, FinishValidator, PatternRule};
pub use verdict::{ClaimFinding, ClaimVerdict, Completion};

use orch::Orch;
use verdict::Verdict;

/// How an orchestration ended.
#[derive(Debug, Clone, Serialize)]
pub struct Orchestration {
    /// The finish payload.
    pub result: Value,
    /// `complete`, or `partial` when a child degraded under the policy or the termination
    /// account finished the run.
    pub completion: Completion,
    /// The roster: every admitted child with its settled status and spend.
    pub children: Vec<ChildSummary>,
    /// Why the result is partial (degraded children by handle, the cap).
    pub degraded: Vec<String>,
    /// The claim-consistency findings, when the pass ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claims: Option<Vec<ClaimFinding>>,
    /// Whether the options asked for an envelope (acceptance or claims set) or the cap forced
    /// one; otherwise [`Orchestration::value`] is the raw finish payload.
    #[serde(skip)]
    envelope: bool,
}

impl Orchestration {
    /// The orchestration's value as a workflow returns it: the raw finish payload, or — with an
    /// acceptance policy, a claim pass, or a partial finish at the cap — the envelope
    /// `{result, completion, child_status_counts, children, degraded, claims?}`.
    pub fn value(&self) -> Value {
        if !self.envelope {
            return self.result.clone();
        }
        let mut value = json!({
            "result": self.result,
            "completion": self.completion.as_str(),
            "child_status_counts": roster::status_counts(&self.children),
            "children": self.children,
            "degraded": self.degraded,
        });
        if let Some(claims) = &self.claims {
            value["claims"] = json!(claims);
        }
        value
    }
}

impl Ctx {
    /// Hands `goal` to a dynamic orchestrator: an agent (role `orchestrate`) that spawns and
    /// steers child agents with typed tools until it calls `finish`. Children run in this
    /// run (journal, budget tree, scheduler, events); see the guide's orchestrator chapter.
    ///
    /// # Errors
    /// `acceptance_failed` when the acceptance policy, the finish validators (repairs spent)
    /// or the claim pass (policy `fail`) refuse the result; `budget_exhausted` at the cap
    /// under `at_cap: fail` or when the finalization turn cannot finish; the orchestrator
    /// agent's own failure; `config`/`validation` for bad options.
    pub async fn orchestrate(&self, goal: &str, opts: OrchestrateOptions) -> Result<Orchestration, Error> {
        run(self, goal, opts).await
    }
}

/// Starts a run whose workflow is one orchestration of `goal` (see [`Ctx::orchestrate`]); the
/// run's value is [`Orchestration::value`]. Resume it with [`orchestrate_workflow`] built from
/// the same goal and options.
///
/// # Errors
/// What [`Engine::run`] refuses.
pub fn orchestrate(
    engine: &Engine,
    goal: &str,
    opts: OrchestrateOptions,
    run: RunOptions,
) -> Result<RunHandle, Error> {
    engine.run(&orchestrate_workflow(goal, opts), Value::Null, run)
}

/// The workflow [`orchestrate`] runs: pass it as `ResumeOptions::workflow` to resume one.
pub fn orchestrate_workflow(goal: &str, opts: OrchestrateOptions) -> Workflow {
    let goal = goal.to_owned();
    Workflow::new("orchestrate", move |ctx, _args| {
        let goal = goal.clone();
        let opts = opts.clone();
        async move { ctx.orchestrate(&goal, opts).await.map(|o| o.value()) }
    })
}

/// One orchestration, start to end.
async fn run(parent: &Ctx, goal: &str, opts: OrchestrateOptions) -> Result<Orchestration, Error> {
    parent.check_stopped()?;
    let engine = parent.run.engine.clone();
    let mut profiles: Vec<(String, String)> = Vec::new();
    if opts.profiles.is_empty() {
        for (name, profile) in &engine.profiles {
            profiles.push((name.clone(), profile.description.clone()));
        }
    } else {
        for name in &opts.profiles {
            match engine.profiles.get(name) {
                Some(profile) => profiles.push((name.clone(), profile.description.clone())),
                None => return Err(Error::config(format!("orchestrate: unknown agent profile {name:?}"))),
            }
        }
    }
    profiles.sort();
    profiles.dedup_by(|a, b| a.0 == b.0);
    if profiles.is_empty() {
        return Err(Error::config(
            "orchestrate: no agent profile is registered for children to be spawned with",
        ));
    }
    if let Some(schema) = &opts.schema
        && let Err(e) = jsonschema::validator_for(schema)
    {
        return Err(Error::validation(format!("orchestrate schema is not a valid JSON Schema: {e}")));
    }
    // The orchestration's own scope: `at:orchestrate:K`, the K-th here.
    let scope = parent.labelled_site(Some("orchestrate"))?.unwrap_or_else(|| parent.clone());
    let orch = Orch::new(scope, goal, opts, profiles);
    orch.restore()?;
    // Restored children settle first (a completed one replays at once; one a crash left in
    // flight runs again), so the orchestrator continues from the roster as it stood.
    let outcome = match orch.wait_until(|state| state.roster.iter().all(|c| c.settled())).await {
        Ok(()) => orch.drive().await,
        Err(e) => Err(e),
    };
    // The exit barrier: every child has a journaled terminal before the orchestration ends.
    orch.exit_barrier().await;
    orch.release_finalize_reserve();
    let mut done = outcome?;
    if let Some(policy) = orch.opts.claims {
        let findings = claims::pass(&orch, &done.result).await?;
        let contradicted = findings.iter().filter(|f| f.verdict == ClaimVerdict::Contradicted).count();
        done.claims = Some(findings);
        done.envelope = true;
        if policy == ClaimPolicy::Fail && contradicted > 0 {
            return Err(Error::new(
                ErrorCode::AcceptanceFailed,
                format!(
                    "claim consistency: {contradicted} claim(s) in the result contradict the cited child's output"
                ),
            ));
        }
    }
    done.children = orch.summaries();
    Ok(done)
}

impl Orch {
    /// Runs the orchestrator agent, then the termination account when it stopped at the cap.
    async fn drive(self: &Arc<Self>) -> Result<Orchestration, Error> {
        let prompt = self.prompt();
        let toolset = tools::base_toolset(self, "main");
        let opts = AgentOptions {
            label: Some("orchestrator".into()),
            key: None,
            model: self.opts.model.clone(),
            role: Some(InvocationRole::Orchestrate),
            system: Some(self.system()),
            max_turns: Some(self.opts.max_turns),
            full: true,
            on_error: Some(OnError::Throw),
            ..AgentOptions::default()
        };
        let record = self.orchestrator_ctx().agent_with(&prompt, opts, &toolset).await?;
        let status = record.get("status").and_then(Value::as_str).unwrap_or("error").to_owned();
        if status == "ok" {
            return self.finished(false);
        }
        let error = match record.get("error") {
            Some(e) => Error::new(
                serde_json::from_value(e["code"].clone()).unwrap_or(ErrorCode::Internal),
                e["message"].as_str().unwrap_or_default(),
            ),
            None => Error::internal("the orchestrator ended with neither value nor error"),
        };
        if error.code != ErrorCode::BudgetExhausted {
            return Err(error);
        }
        // The termination account.
        if self.opts.at_cap == AtCap::Fail {
            return Err(error);
        }
        self.decide("final", 0, |_| Verdict::Finalize)?;
        self.cancel_running("final").await?;
        self.release_finalize_reserve();
        let toolset = tools::finish_only(self, "final");
        let opts = AgentOptions {
            label: Some("orchestrator-finalize".into()),
            key: Some("orchestrate:finalize".into()),
            model: self.opts.model.clone(),
            role: Some(InvocationRole::Orchestrate),
            system: Some(self.system()),
            max_turns: Some(2),
            full: true,
            on_error: Some(OnError::Throw),
            ..AgentOptions::default()
        };
        let prompt = self.finalize_prompt();
        let record = self.finalize_ctx().agent_with(&prompt, opts, &toolset).await?;
        if record.get("status").and_then(Value::as_str) == Some("ok") {
            return self.finished(true);
        }
        Err(Error::new(
            ErrorCode::BudgetExhausted,
            format!(
                "the orchestrator reached its budget cap and its finalization turn did not finish ({})",
                record["error"]["message"].as_str().unwrap_or("no result")
            ),
        ))
    }

    /// The outcome once an orchestrator agent ended `ok`: its accepted finish, read from the
    /// journaled verdicts (which a resume restores even when the agent replays whole).
    fn finished(&self, at_cap: bool) -> Result<Orchestration, Error> {
        let state = self.lock();
        let finish = state.decisions.iter().rev().find_map(|d| match &d.verdict {
            Verdict::Finish { verdict, result, problems, .. } => {
                Some((verdict.clone(), result.clone(), problems.clone()))
            }
            _ => None,
        });
        let Some((verdict, result, problems)) = finish else {
            return Err(Error::new(
                ErrorCode::ToolFailed,
                "the orchestrator ended without calling finish (every orchestration ends with a finish call)",
            ));
        };
        if verdict != "accepted" {
            return Err(Error::new(
                ErrorCode::AcceptanceFailed,
                format!("the finish result failed validation after its repairs: {}", problems.join("; ")),
            ));
        }
        let acceptance = state.decisions.iter().rev().find_map(|d| match &d.verdict {
            Verdict::Acceptance { accepted, completion, degraded, message, .. } => {
                Some((*accepted, *completion, degraded.clone(), message.clone()))
            }
            _ => None,
        });
        drop(state);
        let (completion, mut degraded) = match acceptance {
            Some((true, completion, degraded, _)) => (completion, degraded),
            Some((false, _, _, message)) => return Err(Error::new(ErrorCode::AcceptanceFailed, message)),
            None => (Completion::Complete, Vec::new()),
        };
        let completion = if at_cap {
            degraded.push("the budget cap: the termination account finished the run".into());
            Completion::Partial
        } else {
            completion
        };
        Ok(Orchestration {
            result,
            completion,
            children: self.summaries(),
            degraded,
            claims: None,
            envelope: at_cap || self.opts.acceptance.is_some() || self.opts.claims.is_some(),
        })
    }

    fn prompt(&self) -> String {
        let mut text = format!("Goal:\n{}\n\nAgent profiles you may spawn children with:\n", self.goal);
        for (name, description) in &self.profiles {
            text.push_str(&format!("- {name}: {description}\n"));
        }
        text
    }

    fn system(&self) -> String {
        let mut text = String::from(
            "You are an orchestrator. You do not do the work yourself: you split the goal into tasks, \
             spawn child agents for them (spawn_agent, parallel_agents), wait for their digests \
             (await_any, await_all, wait_for_events), read a child's full output with \
             get_child_result when the digest is not enough, cancel children you no longer need \
             (cancel_agent), and end with finish {result}. Cite a child's output as [HANDLE] \
             (for example [c0]) where your result relies on it.",
        );
        // Policy goes here, not in the prompt: the system text is not part of the call's
        // identity, so a resume with drifted options continues the same orchestrator.
        text.push_str(&format!("\n\nYou may admit at most {} children.", self.opts.max_spawns));
        if let Some(acceptance) = &self.opts.acceptance {
            text.push_str(&format!(" Acceptance: {}.", acceptance.describe()));
        }
        if let Some(extra) = &self.opts.system {
            text.push_str("\n\n");
            text.push_str(extra);
        }
        text
    }

    fn finalize_prompt(&self) -> String {
        let mut text = format!(
            "Goal:\n{}\n\nThe budget is nearly spent: this is your last turn. Call finish now with the \
             best result the children's work supports. The children's digests:\n",
            self.goal
        );
        for child in self.summaries() {
            text.push_str(&format!(
                "- [{}] {} ({}): {}\n",
                child.handle,
                child.profile,
                child.status.as_str(),
                child.summary
            ));
        }
        text
    }
}

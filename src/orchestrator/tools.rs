//! The orchestrator's base toolset, its JSON Schemas, and what each tool does to the roster.
//!
//! Tool contracts depend on the options only through the profile allowlist (the spawn tools'
//! `profile` enum) and the finish schema, so an orchestration's toolset hash, and with it the
//! orchestrator call's identity, is the same on every resume with the same options.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::acceptance;
use super::orch::{MIN_FREE, Orch};
use super::roster::State;
use super::validate;
use super::verdict::{Refusal, Verdict};
use crate::agent::Tool;
use crate::error::Error;
use crate::money::Money;

/// Characters of a child's output one `get_child_result` page carries.
const PAGE_CHARS: usize = 4_000;

/// Most children one `parallel_agents` call may submit.
const MAX_BATCH: usize = 32;

/// The longest `wait_for_events` sleep.
const MAX_WAIT_MS: u64 = 600_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Spawn,
    Parallel,
    AwaitAny,
    AwaitAll,
    GetResult,
    Cancel,
    WaitForEvents,
    Finish,
}

struct OrchTool {
    orch: Arc<Orch>,
    /// Which agent this tool serves (`main`, `final`): call ids are unique within one agent.
    lane: &'static str,
    kind: Kind,
    name: &'static str,
    description: &'static str,
    parameters: Value,
}

impl std::fmt::Debug for OrchTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrchTool").field("name", &self.name).field("lane", &self.lane).finish()
    }
}

impl Tool for OrchTool {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        self.description
    }
    fn parameters(&self) -> &Value {
        &self.parameters
    }
    fn version(&self) -> &str {
        "1"
    }
    fn call(&self, args: Value) -> BoxFuture<'static, Result<String, Error>> {
        self.call_with_id("call", args)
    }
    fn call_with_id(&self, id: &str, args: Value) -> BoxFuture<'static, Result<String, Error>> {
        let orch = self.orch.clone();
        let call = format!("{}:{id}", self.lane);
        let kind = self.kind;
        let lane = self.lane;
        Box::pin(async move {
            let value = match kind {
                Kind::Spawn => orch.spawn_one(&call, &args),
                Kind::Parallel => orch.spawn_batch(&call, &args),
                Kind::AwaitAny => orch.await_handles(&args, false).await,
                Kind::AwaitAll => orch.await_handles(&args, true).await,
                Kind::GetResult => orch.child_result(&args),
                Kind::Cancel => orch.cancel_one(&call, &args),
                Kind::WaitForEvents => orch.wait_for_events(&args).await,
                Kind::Finish => orch.finish(&call, lane == "final", &args),
            }?;
            if matches!(kind, Kind::Spawn | Kind::Parallel | Kind::Cancel | Kind::Finish) {
                // The answer reaches the model (and the loop's checkpoint, written outside
                // the journal) only once the verdicts behind it are durable: a resume never
                // continues a conversation that names a decision the journal lost.
                orch.ctx.run.flush_async().await?;
            }
            Ok(value.to_string())
        })
    }
    fn ends_agent(&self) -> bool {
        self.kind == Kind::Finish
    }
    fn journaling(&self) -> crate::agent::ToolJournaling {
        // Its verdicts are decision entries of their own, replayed by `(call, item)`.
        crate::agent::ToolJournaling::Own
    }
}

fn spawn_schema(profiles: &[String]) -> Value {
    json!({
        "type": "object",
        "properties": {
            "profile": { "type": "string", "enum": profiles, "description": "the agent profile of the child" },
            "prompt": { "type": "string", "minLength": 1, "description": "the child's task, self-contained" },
            "schema": { "type": "object", "description": "a JSON Schema the child's output must match" },
            "est_cost": { "type": "number", "minimum": 0, "description": "estimated cost in USD, reserved at admission" }
        },
        "required": ["profile", "prompt"],
        "additionalProperties": false
    })
}

fn handles_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "handles": { "type": "array", "items": { "type": "string" }, "minItems": 1 } },
        "required": ["handles"],
        "additionalProperties": false
    })
}

fn finish_tool(orch: &Arc<Orch>, lane: &'static str) -> Arc<dyn Tool> {
    let result = orch.opts.schema.clone().unwrap_or_else(|| json!({}));
    Arc::new(OrchTool {
        orch: orch.clone(),
        lane,
        kind: Kind::Finish,
        name: "finish",
        description: "End the orchestration with its result. The result is validated; a rejection comes back \
                      as an error naming what to fix.",
        parameters: json!({
            "type": "object",
            "properties": { "result": result },
            "required": ["result"],
            "additionalProperties": false
        }),
    })
}

/// The base toolset of the orchestrator's `lane`.
pub(crate) fn base_toolset(orch: &Arc<Orch>, lane: &'static str) -> Vec<Arc<dyn Tool>> {
    let profiles: Vec<String> = orch.profiles.iter().map(|(name, _)| name.clone()).collect();
    let tool = |kind, name, description, parameters| -> Arc<dyn Tool> {
        Arc::new(OrchTool { orch: orch.clone(), lane, kind, name, description, parameters })
    };
    vec![
        tool(
            Kind::Spawn,
            "spawn_agent",
            "Admit and start one child agent. Returns its handle, or a typed refusal (budget, spawn cap, \
             unknown profile, roster floor) that costs nothing.",
            spawn_schema(&profiles),
        ),
        tool(
            Kind::Parallel,
            "parallel_agents",
            "Admit and start several children, in order; stops at the first refusal. Returns every \
             admitted handle and the refusal, if any.",
            json!({
                "type": "object",
                "properties": {
                    "children": { "type": "array", "items": spawn_schema(&profiles), "minItems": 1, "maxItems": MAX_BATCH }
                },
                "required": ["children"],
                "additionalProperties": false
            }),
        ),
        tool(
            Kind::AwaitAny,
            "await_any",
            "Wait until at least one of the children settles; returns the digests of those settled \
             (status, cost, a 400-character summary, artifact ids) and the handles still pending.",
            handles_schema(),
        ),
        tool(
            Kind::AwaitAll,
            "await_all",
            "Wait until every one of the children settles; returns their digests.",
            handles_schema(),
        ),
        tool(
            Kind::GetResult,
            "get_child_result",
            "Read a settled child's full output, a page of 4000 characters from offset.",
            json!({
                "type": "object",
                "properties": { "handle": { "type": "string" }, "offset": { "type": "integer", "minimum": 0 } },
                "required": ["handle"],
                "additionalProperties": false
            }),
        ),
        tool(
            Kind::Cancel,
            "cancel_agent",
            "Cancel a running child.",
            json!({
                "type": "object",
                "properties": { "handle": { "type": "string" } },
                "required": ["handle"],
                "additionalProperties": false
            }),
        ),
        tool(
            Kind::WaitForEvents,
            "wait_for_events",
            "Sleep until children settle (or timeout_ms passes); returns one digest of everything that \
             settled since the last wake, in spawn order, and the handles still running.",
            json!({
                "type": "object",
                "properties": { "timeout_ms": { "type": "integer", "minimum": 0, "maximum": MAX_WAIT_MS } },
                "required": ["timeout_ms"],
                "additionalProperties": false
            }),
        ),
        finish_tool(orch, lane),
    ]
}

/// The finalization turn's toolset: `finish` only.
pub(crate) fn finish_only(orch: &Arc<Orch>, lane: &'static str) -> Vec<Arc<dyn Tool>> {
    vec![finish_tool(orch, lane)]
}

/// A spawn request.
struct Spec {
    profile: String,
    prompt: String,
    schema: Option<Value>,
    est_cost: Option<Money>,
}

fn spec(args: &Value) -> Result<Spec, Error> {
    let profile = args["profile"].as_str().unwrap_or_default().to_owned();
    let prompt = args["prompt"].as_str().unwrap_or_default().to_owned();
    let est_cost = match args.get("est_cost").and_then(Value::as_f64) {
        Some(usd) => Some(Money::from_usd(usd).map_err(|e| Error::validation(format!("est_cost: {e}")))?),
        None => None,
    };
    Ok(Spec { profile, prompt, schema: args.get("schema").cloned(), est_cost })
}

impl Orch {
    /// The admission verdict for `spec`, given what is admitted and what the budget leaves.
    fn admit(&self, state: &State, spec: &Spec) -> Verdict {
        let admitted = state.admitted();
        let refuse =
            |reason: Refusal, message: String, requested: Option<Money>, available: Option<Money>, floor| {
                Verdict::Refuse {
                    reason,
                    message,
                    profile: spec.profile.clone(),
                    admitted,
                    requested_nano_usd: requested.map(Money::nano_usd),
                    available_nano_usd: available.map(Money::nano_usd),
                    floor,
                }
            };
        let Some(profile) = self.profiles.iter().find(|(name, _)| *name == spec.profile) else {
            return refuse(
                Refusal::UnknownProfile,
                format!("no spawnable profile {:?}", spec.profile),
                None,
                None,
                None,
            );
        };
        if admitted >= self.opts.max_spawns {
            let message = format!("{admitted} children are admitted, the cap is {}", self.opts.max_spawns);
            return refuse(Refusal::SpawnCap, message, None, None, None);
        }
        let engine = &self.ctx.run.engine;
        let est = spec.est_cost.or_else(|| engine.profiles.get(&profile.0).and_then(|p| p.est_cost));
        let available = self.ctx.run.budget.remaining(self.ctx.account);
        if let Some(available) = available {
            let need = est.unwrap_or(MIN_FREE);
            if need > available {
                let message = format!("the child reserves {need} but {available} is left");
                return refuse(Refusal::Budget, message, Some(need), Some(available), None);
            }
            // The roster floor: the seats still owed must fit what is left.
            if let (Some(floor), Some(est)) =
                (self.opts.acceptance.as_ref().and_then(|a| a.min_spawned_children), est)
                && floor > admitted
            {
                let seats = u64::from(floor - admitted);
                let need = est.times(seats);
                if need > available {
                    let message = format!(
                        "{seats} more children are needed for the floor of {floor}, at {est} each {need}, but {available} is left"
                    );
                    return refuse(Refusal::RosterFloor, message, Some(need), Some(available), Some(floor));
                }
            }
        }
        Verdict::Admit {
            child: admitted,
            profile: spec.profile.clone(),
            prompt: spec.prompt.clone(),
            schema: spec.schema.clone(),
            est_cost_nano_usd: est.map(Money::nano_usd),
            available_nano_usd: available.map(Money::nano_usd),
        }
    }

    /// Decides one spawn and acts on it; the typed answer the model sees.
    fn spawn(self: &Arc<Self>, call: &str, item: u32, spec: &Spec) -> Result<(Value, bool), Error> {
        let verdict = self.decide(call, item, |state| self.admit(state, spec))?;
        match verdict {
            Verdict::Admit { child, profile, .. } => {
                self.start(child);
                let handle = super::roster::handle(child);
                if self.roster_observed() {
                    self.roster_line(&format!("child {handle} ({profile}): spawned"));
                }
                Ok((json!({ "handle": handle, "status": "admitted" }), true))
            }
            Verdict::Refuse { reason, message, .. } => {
                self.roster_line(&format!("spawn refused ({}): {message}", reason.as_str()));
                Ok((json!({ "refused": true, "code": reason.as_str(), "reason": message }), false))
            }
            _ => Err(Error::internal("a spawn's decision is not an admission verdict")),
        }
    }

    fn spawn_one(self: &Arc<Self>, call: &str, args: &Value) -> Result<Value, Error> {
        self.spawn(call, 0, &spec(args)?).map(|(value, _)| value)
    }

    /// Admits `children` in order up to the first refusal. The answer stays small, since it
    /// stays in the orchestrator's conversation for every later turn: `{handles}` for the
    /// admitted, and after a refusal `refused: {index, code, reason}` and the indices
    /// `not_attempted`.
    fn spawn_batch(self: &Arc<Self>, call: &str, args: &Value) -> Result<Value, Error> {
        let children = args["children"].as_array().map(Vec::as_slice).unwrap_or_default();
        let mut handles = Vec::with_capacity(children.len());
        for (index, child) in children.iter().enumerate() {
            let (value, admitted) = self.spawn(call, index as u32, &spec(child)?)?;
            if admitted {
                handles.push(value["handle"].clone());
                continue;
            }
            let mut refused = value;
            refused["index"] = json!(index);
            let not_attempted: Vec<usize> = (index + 1..children.len()).collect();
            return Ok(json!({ "handles": handles, "refused": refused, "not_attempted": not_attempted }));
        }
        Ok(json!({ "handles": handles }))
    }

    async fn await_handles(&self, args: &Value, all: bool) -> Result<Value, Error> {
        let handles: Vec<String> = args["handles"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        let mut wanted = Vec::with_capacity(handles.len());
        {
            let state = self.lock();
            for handle in &handles {
                wanted.push(state.child(handle)?.n as usize);
            }
        }
        // A settled child stays settled: `wanted[..seen]` need no second look.
        let mut seen = 0;
        self.wait_until(|state| {
            while seen < wanted.len() && state.roster[wanted[seen]].settled() {
                seen += 1;
            }
            if all {
                seen == wanted.len()
            } else {
                seen > 0 || wanted.iter().any(|&n| state.roster[n].settled())
            }
        })
        .await?;
        let mut state = self.lock();
        let mut digests = Vec::new();
        let mut pending = Vec::new();
        for &n in &wanted {
            let child = &mut state.roster[n];
            if child.settled() {
                child.reported = true;
                digests.push(child.digest());
            } else {
                pending.push(child.handle.clone());
            }
        }
        Ok(json!({ "digests": digests, "pending": pending }))
    }

    fn child_result(&self, args: &Value) -> Result<Value, Error> {
        let state = self.lock();
        let child = state.child(args["handle"].as_str().unwrap_or_default())?;
        if !child.settled() {
            return Ok(json!({ "handle": child.handle, "status": "running" }));
        }
        let text = match (&child.output, &child.error) {
            (Some(_), _) => child.output_text(),
            (None, Some(error)) => format!("{}: {}", error.code, error.message),
            (None, None) => String::new(),
        };
        let total = text.chars().count();
        let offset = args.get("offset").and_then(Value::as_u64).unwrap_or(0) as usize;
        let page: String = text.chars().skip(offset).take(PAGE_CHARS).collect();
        let next = offset + page.chars().count();
        Ok(json!({
            "handle": child.handle,
            "status": child.effective_status().as_str(),
            "total_chars": total,
            "offset": offset,
            "next_offset": if next < total { json!(next) } else { Value::Null },
            "text": page,
        }))
    }

    fn cancel_one(&self, call: &str, args: &Value) -> Result<Value, Error> {
        let handle = args["handle"].as_str().unwrap_or_default();
        let n = {
            let state = self.lock();
            let child = state.child(handle)?;
            let restored = state.by_call.contains_key(&(call.to_owned(), 0));
            if child.settled() && !restored {
                return Ok(
                    json!({ "handle": handle, "cancelled": false, "status": child.effective_status().as_str() }),
                );
            }
            child.n
        };
        self.decide(call, 0, |_| Verdict::Cancel { child: n })?;
        if let Some(child) = self.lock().roster.get(n as usize) {
            child.cancel.cancel();
        }
        self.roster_line(&format!("child {handle}: cancelled"));
        self.settled.notify_waiters();
        Ok(json!({ "handle": handle, "cancelled": true }))
    }

    async fn wait_for_events(&self, args: &Value) -> Result<Value, Error> {
        let timeout = Duration::from_millis(args["timeout_ms"].as_u64().unwrap_or(0).min(MAX_WAIT_MS));
        let woken = |state: &State| {
            state.roster.iter().any(|c| c.settled() && !c.reported)
                || state.roster.iter().all(|c| c.settled())
        };
        let timed_out = tokio::time::timeout(timeout, self.wait_until(woken)).await.is_err();
        let mut state = self.lock();
        let mut settled = Vec::new();
        let mut running = Vec::new();
        for child in state.roster.iter_mut() {
            if child.settled() {
                if !child.reported {
                    child.reported = true;
                    settled.push(child.digest());
                }
            } else {
                running.push(child.handle.clone());
            }
        }
        Ok(json!({ "settled": settled, "running": running, "timed_out": timed_out }))
    }

    /// `finish`: validation (a journaled verdict; a rejection asks for a repair as a tool
    /// error), then the acceptance policy (a journaled verdict). The agent ends on any answer
    /// but a rejection; the orchestration reads the verdicts.
    fn finish(&self, call: &str, at_cap: bool, args: &Value) -> Result<Value, Error> {
        let result = args.get("result").cloned().unwrap_or(Value::Null);
        let verdict = self.decide(call, 0, |state| {
            let views = validate::views(state);
            let problems = validate::check(&self.opts.validation, &result, &views);
            let repair = state.repairs();
            let verdict = match (problems.is_empty(), repair < self.opts.validation.max_repairs) {
                (true, _) => "accepted",
                (false, true) => "rejected",
                (false, false) => "failed",
            };
            Verdict::Finish { verdict: verdict.into(), problems, repair, result: result.clone(), at_cap }
        })?;
        let Verdict::Finish { verdict, problems, .. } = verdict else {
            return Err(Error::internal("a finish's decision is not a finish verdict"));
        };
        match verdict.as_str() {
            "rejected" => Err(Error::validation(format!(
                "finish rejected; fix these and call finish again: {}",
                problems.join("; ")
            ))),
            "accepted" => {
                if let Some(policy) = &self.opts.acceptance {
                    self.decide(call, 1, |state| acceptance::evaluate(policy, state, at_cap))?;
                }
                Ok(result)
            }
            _ => Ok(result),
        }
    }
}

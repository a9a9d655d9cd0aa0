//! One tool call of an agent's loop as a journaled effect, announced by `tool:start` and
//! `tool:end` events.
//!
//! A call is an entry of kind `tool` in the agent call's own scope (`at:agent-KEY:n`, the scope
//! its approval waits use, covered when the call replays whole), keyed on `{args, call_id,
//! kind: "tool", tool}`. The call id is the loop's (`call_<turn>_<index>`), stable across a
//! resume from a checkpoint, so a resumed loop that re-answers the calls of its last turn is
//! served each one that completed before the crash and runs only the rest. A tool that acts
//! outside the run ([`ToolJournaling::Effect`]) runs only once everything queued before it is
//! durable, and its result is durable before the model sees it: a crash never repeats a
//! completed effect. Failures are memoized (a task-class failure replays as itself; a
//! cancelled or transport-class one runs again). A tool that journals its own decisions
//! ([`ToolJournaling::Own`], the orchestrator's) gets its events and no entry.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use super::events::EventKind;
use super::run::Durability;
use super::{Ctx, identity};
use crate::agent::{Tool, ToolJournaling};
use crate::error::{Error, ErrorCode};
use crate::journal::{self, ContentKey, Entry, Kind, Outcome, Status};

/// What a tool call is keyed on, in byte order of its fields.
#[derive(Debug, Serialize)]
struct ToolIdentity<'a> {
    args: &'a Value,
    call_id: &'a str,
    kind: &'static str,
    tool: &'a str,
}

impl ToolIdentity<'_> {
    fn key(&self) -> Result<ContentKey, Error> {
        journal::content_key_of(self, [self.args]).map_err(|e| Error::validation(e.to_string()))
    }
}

/// The first 16 hex digits of the sha256 of `args`' canonical JSON: what events and `inspect`
/// show of a call's arguments (which may be long, or private).
pub(crate) fn args_digest(args: &Value) -> String {
    let mut hex = identity::value_key(args).map(|k| k.to_hex()).unwrap_or_default();
    hex.truncate(16);
    hex
}

impl Ctx {
    /// Runs (or serves from the journal) one permitted tool call of the agent whose own scope
    /// this context is.
    pub(super) async fn run_tool(
        &self,
        tool: &Arc<dyn Tool>,
        id: &str,
        args: Value,
    ) -> Result<String, Error> {
        run_tool(self, tool, id, args).await
    }
}

async fn run_tool(ctx: &Ctx, tool: &Arc<dyn Tool>, id: &str, args: Value) -> Result<String, Error> {
    let digest = args_digest(&args);
    let span = ctx.run.new_span();
    let start =
        || EventKind::ToolStart { tool: tool.name().to_owned(), call_id: id.to_owned(), args_digest: digest };
    let journaling = tool.journaling();
    if journaling == ToolJournaling::Own {
        ctx.run.emit(ctx.span_pair(span), false, start);
        let began = Instant::now();
        let result = tool.call_with_id(id, args).await;
        let status = status_of(&result);
        ctx.run.emit(ctx.span_pair(span), false, || end_event(tool.name(), id, status, began, &result));
        return result;
    }
    ctx.check_stopped()?;
    let key = ToolIdentity { args: &args, call_id: id, kind: "tool", tool: tool.name() }.key()?;
    let matched = ctx.run.lookup(&ctx.scope, key)?;
    let supersedes = match matched.outcome {
        Outcome::Replay(entry) => return served(ctx, span, tool.name(), id, start, &entry),
        Outcome::Rerun { previous: Some(terminal), .. } if ctx.run.reproduce => {
            return served(ctx, span, tool.name(), id, start, &terminal);
        }
        Outcome::Skip => {
            return Err(Error::new(ErrorCode::ToolFailed, "the tool call lies in an abandoned subtree"));
        }
        Outcome::Wait(_) => return Err(Error::internal("a tool call is journaled as suspended")),
        Outcome::Live => None,
        Outcome::Rerun { supersedes, .. } => Some(supersedes),
    };
    let mut running = ctx.entry(Kind::Tool, Status::Running, key, matched.ordinal);
    running.target = supersedes;
    running.name = Some(tool.name().to_owned());
    running.label = Some(id.to_owned());
    // A tool's failure is its answer to the model: a task-class one replays as itself.
    running.memoize_outcome = true;
    let running = ctx.run.append_one(running, Durability::Lazy)?;
    ctx.run.emit(ctx.span_pair(span), false, start);
    let began = Instant::now();
    let result = async {
        if journaling == ToolJournaling::Effect {
            // It acts outside the run: what the run recorded before it is durable first.
            ctx.run.flush_async().await?;
        }
        tokio::select! {
            result = tool.call_with_id(id, args) => result,
            _ = ctx.cancel.cancelled() => Err(ctx.run.stopped_error()),
        }
    }
    .await;
    let status = status_of(&result);
    let mut terminal = Ctx::terminal_for(&running, status);
    match &result {
        Ok(text) => terminal.set_value(Some(&Value::String(text.clone()))),
        Err(error) => terminal.error = Some(error.clone()),
    }
    let written = match journaling {
        // Its result is durable before the model sees it: a resume never repeats it.
        ToolJournaling::Effect => ctx.run.append_one_async(terminal).await.map(|_| ()),
        _ => ctx.run.append_one(terminal, Durability::Deferred).map(|_| ()),
    };
    ctx.run.emit(ctx.span_pair(span), false, || end_event(tool.name(), id, status, began, &result));
    written?;
    result
}

/// Serves a journaled tool call: its result text, or its failure.
fn served(
    ctx: &Ctx,
    span: u64,
    tool: &str,
    id: &str,
    start: impl FnOnce() -> EventKind,
    entry: &Entry,
) -> Result<String, Error> {
    ctx.run.emit(ctx.span_pair(span), true, start);
    let result = match entry.status {
        Status::Ok => match entry.value() {
            Some(Value::String(text)) => Ok(text),
            Some(other) => Ok(other.to_string()),
            None => Ok(String::new()),
        },
        _ => Err(entry
            .error
            .clone()
            .unwrap_or_else(|| Error::internal("journaled tool failure carries no error"))),
    };
    let bytes = result_bytes(&result);
    ctx.run.emit(ctx.span_pair(span), true, || EventKind::ToolEnd {
        tool: tool.to_owned(),
        call_id: id.to_owned(),
        status: entry.status.as_str().to_owned(),
        duration_ms: 0,
        bytes,
        error: entry.error.as_ref().map(|e| e.code),
    });
    result
}

fn status_of(result: &Result<String, Error>) -> Status {
    match result {
        Ok(_) => Status::Ok,
        Err(error) if error.code == ErrorCode::Cancelled => Status::Cancelled,
        Err(_) => Status::Error,
    }
}

fn result_bytes(result: &Result<String, Error>) -> u64 {
    match result {
        Ok(text) => text.len() as u64,
        Err(error) => error.message.len() as u64,
    }
}

fn end_event(
    tool: &str,
    id: &str,
    status: Status,
    began: Instant,
    result: &Result<String, Error>,
) -> EventKind {
    EventKind::ToolEnd {
        tool: tool.to_owned(),
        call_id: id.to_owned(),
        status: status.as_str().to_owned(),
        duration_ms: u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX),
        bytes: result_bytes(result),
        error: result.as_ref().err().map(|e| e.code),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_identity_keys_as_its_json_object() {
        let args = json!({"query": "rust", "n": 3});
        let identity = ToolIdentity { args: &args, call_id: "call_0_1", kind: "tool", tool: "docs_search" };
        let by_value = journal::content_key(&json!({
            "args": args, "call_id": "call_0_1", "kind": "tool", "tool": "docs_search"
        }))
        .unwrap();
        assert_eq!(identity.key().unwrap(), by_value);
        assert_eq!(args_digest(&args).len(), 16);
        assert_eq!(args_digest(&json!({"n": 3, "query": "rust"})), args_digest(&args));
    }
}

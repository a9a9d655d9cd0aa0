//! `GET /v1/runs/{id}/calls/{seq}/turns`: an agent call's turns, for the inspector. The
//! conversation comes from the call's checkpoint (written at every turn boundary of a call that
//! took more than one turn: tool calls, schema repairs), or, for a call that took one turn,
//! its prompt from the run's call records (`engine/call_records.rs`); the final answer from
//! its journaled entry. `turn_log` holds each turn's record (model, status, usage, cost, start
//! and end), from the call records or, while the call runs, its checkpoint; each assistant
//! message carries the number of the turn that said it. Bounded: the last [`MAX_MESSAGES`]
//! messages, each part's text cut at [`MAX_TEXT`] characters (marked `truncated`),
//! provider-private blocks left out.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::error::ApiError;
use super::runs::{meta_of, parse_run_id};
use super::state::{AppState, blocking};
use crate::error::Error;
use crate::journal::{self, Kind, Status};

/// The most messages one answer holds (the latest ones).
pub(super) const MAX_MESSAGES: usize = 200;
/// The most characters of one part's text.
pub(super) const MAX_TEXT: usize = 4000;

/// `GET /v1/runs/{id}/calls/{seq}/turns`: `seq` is the agent call's `running` entry or its
/// terminal entry.
pub(super) async fn turns(
    State(state): State<AppState>,
    Path((id, seq)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let run = parse_run_id(&id)?;
    let seq: u64 = seq
        .trim()
        .parse()
        .map_err(|_| ApiError::bad_request("seq must be a journal seq (a whole number)"))?;
    blocking(&state, move |engine| {
        meta_of(engine, &run)?;
        let no_call = || {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_call",
                format!("run {run} has no agent call at seq {seq}"),
            )
        };
        let entry = entry_at(engine, &run, seq)?.ok_or_else(no_call)?;
        if entry.kind != Kind::Agent {
            return Err(no_call());
        }
        // The attempt's `running` entry names its record; a terminal entry points at it.
        let running = match (entry.status, entry.target) {
            (Status::Running, _) => Some(entry.clone()),
            (_, Some(target)) => entry_at(engine, &run, target.0)?,
            (_, None) => None,
        };
        let transcripts = engine.inner().transcripts.clone();
        let record =
            running.as_ref().and_then(|r| crate::engine::call_record(transcripts.as_ref(), &run, r.seq.0));
        let prompt = record.as_ref().and_then(|r| r.get("prompt")).filter(|p| !p.is_null());
        // The conversation: the checkpoint the entry names, else the one its call writes
        // beside its first attempt (a call in flight, or a rerun that continued from it).
        let reference = match (&entry.transcript_ref, &running) {
            (Some(reference), _) => Some(reference.clone()),
            (None, Some(running)) if prompt.is_none() => {
                Some(format!("{run}/ckpt/{}", running.target.unwrap_or(running.seq).0))
            }
            _ => None,
        };
        let stored = match &reference {
            Some(reference) if reference.starts_with(&format!("{run}/")) => transcripts.get(reference)?,
            _ => None,
        };
        let checkpoint = stored.as_deref().and_then(|bytes| serde_json::from_slice::<Value>(bytes).ok());
        let mut messages: Vec<Value> = checkpoint
            .as_ref()
            .and_then(|c| c.get("messages"))
            .and_then(Value::as_array)
            .map(|all| all.iter().map(message).collect())
            .unwrap_or_default();
        if let Some(prompt) = prompt {
            let text = prompt.get("text").and_then(Value::as_str).unwrap_or_default();
            let mut part = text_part("text", text);
            let whole = prompt.get("chars").and_then(Value::as_u64).unwrap_or(0);
            if whole > text.chars().count() as u64 {
                part["truncated"] = Value::Bool(true);
            }
            messages.push(json!({ "role": "user", "parts": [part] }));
        }
        // Each turn's record: the call's, else (in flight, crashed, or written before they
        // were kept) what its checkpoint holds.
        let turn_log = record
            .as_ref()
            .and_then(|r| r.get("turns"))
            .or_else(|| checkpoint.as_ref().and_then(|c| c.get("turn_log")))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(with_cost_usd)
            .collect::<Vec<_>>();
        // The k-th assistant message is the k-th turn's output.
        let mut turn = 0u64;
        for message in &mut messages {
            if message["role"] == "assistant" {
                turn += 1;
                message["turn"] = json!(turn);
            }
        }
        if entry.status != Status::Running
            && let Some(answer) = entry.value()
        {
            let text = match answer {
                Value::String(text) => text,
                other => other.to_string(),
            };
            let mut answered = json!({ "role": "assistant", "parts": [text_part("answer", &text)] });
            // The answer is the last turn's output unless a tool ended the call (no turn after).
            let last = turn_log.iter().filter_map(|t| t.get("turn").and_then(Value::as_u64)).max();
            if let Some(last) = last.filter(|&last| last > turn) {
                answered["turn"] = json!(last);
            }
            messages.push(answered);
        }
        let omitted = messages.len().saturating_sub(MAX_MESSAGES);
        let messages = messages.split_off(omitted);
        Ok(Json(json!({
            "run_id": run,
            "seq": seq,
            "status": entry.status,
            "checkpointed": checkpoint.is_some(),
            "recorded": record.is_some(),
            "turns": checkpoint.as_ref().and_then(|c| c.get("turns")).cloned(),
            "tool_calls": checkpoint.as_ref().and_then(|c| c.get("tool_calls")).cloned(),
            "usage": entry.usage,
            "cost_nano_usd": entry.cost.map(crate::money::Money::nano_usd),
            "turn_log": turn_log,
            "cost_usd": entry.cost.map(crate::money::Money::as_usd),
            "omitted": omitted,
            "messages": messages,
        })))
    })
    .await
}

/// The journal entry at `seq`, if there is one.
fn entry_at(
    engine: &crate::engine::Engine,
    run: &crate::store::RunId,
    seq: u64,
) -> Result<Option<journal::Entry>, ApiError> {
    let raw = engine.journal_store().load_page(run, seq.saturating_sub(1), 1)?;
    match raw.first() {
        Some(first) if first.seq() == seq => {
            Ok(journal::decode_all(&raw).map_err(|e| ApiError::from(Error::from(e)))?.pop())
        }
        _ => Ok(None),
    }
}

/// A checkpointed message as `{role, parts}`, each part `{type, ...}` with its text bounded.
fn message(message: &Value) -> Value {
    let parts: Vec<Value> = message
        .get("parts")
        .and_then(Value::as_array)
        .map(|parts| parts.iter().filter_map(part).collect())
        .unwrap_or_default();
    json!({ "role": message.get("role").cloned().unwrap_or(Value::Null), "parts": parts })
}

fn part(part: &Value) -> Option<Value> {
    if let Some(text) = part.get("text").and_then(Value::as_str) {
        return Some(text_part("text", text));
    }
    if let Some(call) = part.get("tool_call") {
        let arguments = call.get("arguments").map(Value::to_string).unwrap_or_default();
        let mut out = text_part("tool_call", &arguments);
        out["name"] = call.get("name").cloned().unwrap_or(Value::Null);
        out["id"] = call.get("id").cloned().unwrap_or(Value::Null);
        return Some(out);
    }
    if let Some(result) = part.get("tool_result") {
        let content = result.get("content").and_then(Value::as_str).unwrap_or_default();
        let mut out = text_part("tool_result", content);
        out["id"] = result.get("id").cloned().unwrap_or(Value::Null);
        out["is_error"] = result.get("is_error").cloned().unwrap_or(Value::Bool(false));
        return Some(out);
    }
    // Provider-private blocks (signed reasoning) are not shown.
    None
}

fn text_part(kind: &str, text: &str) -> Value {
    let cut: String = text.chars().take(MAX_TEXT).collect();
    let truncated = cut.len() < text.len();
    let mut out = json!({ "type": kind, "text": cut });
    if truncated {
        out["truncated"] = Value::Bool(true);
    }
    out
}

/// A stored turn record as the API shows it: its `cost_nano_usd` with `cost_usd` beside it, as
/// every amount the API shows.
fn with_cost_usd(mut turn: Value) -> Value {
    if let Some(nanos) = turn.get("cost_nano_usd").and_then(Value::as_i64) {
        turn["cost_usd"] = json!(crate::money::Money::from_nano_usd(nanos).as_usd());
    }
    turn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_bounded_and_private_blocks_left_out() {
        let long = "x".repeat(MAX_TEXT + 10);
        let m = json!({ "role": "user", "parts": [
            { "text": long },
            { "tool_result": { "id": "c1", "content": "<b>42</b>", "is_error": false } },
            { "provider_raw": { "provider": "anthropic", "data": {} } },
        ]});
        let shown = message(&m);
        let parts = shown["parts"].as_array().unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0]["text"].as_str().unwrap().len(), MAX_TEXT);
        assert_eq!(parts[0]["truncated"], true);
        assert_eq!(parts[1]["type"], "tool_result");
        assert_eq!(parts[1]["text"], "<b>42</b>");
    }
}

//! `GET /v1/runs/{id}/calls/{seq}/turns`: an agent call's turns, for the inspector. The
//! conversation comes from the call's checkpoint (written at every turn boundary of a call that
//! took more than one turn: tool calls, schema repairs), the final answer from its journaled
//! entry. Bounded: the last [`MAX_MESSAGES`] messages, each part's text cut at [`MAX_TEXT`]
//! characters (marked `truncated`), provider-private blocks left out.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::runs::{blocking, meta_of, parse_run_id};
use super::{ApiError, AppState};
use crate::error::Error;
use crate::journal::{self, Kind, Status};

/// The most messages one answer holds (the latest ones).
pub const MAX_MESSAGES: usize = 200;
/// The most characters of one part's text.
pub const MAX_TEXT: usize = 4000;

/// `GET /v1/runs/{id}/calls/{seq}/turns`: `seq` is the agent call's `running` entry or its
/// terminal entry.
pub async fn turns(
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
        let raw = engine.journal_store().load_page(&run, seq.saturating_sub(1), 1)?;
        let entry = match raw.first() {
            Some(first) if first.seq() == seq => journal::decode_all(&raw)
                .map_err(|e| ApiError::from(Error::from(e)))?
                .pop()
                .ok_or_else(no_call)?,
            _ => return Err(no_call()),
        };
        if entry.kind != Kind::Agent {
            return Err(no_call());
        }
        // A settled call names its checkpoint; a call in flight writes it under its own seq.
        let reference = match (&entry.transcript_ref, entry.status) {
            (Some(reference), _) => Some(reference.clone()),
            (None, Status::Running) => Some(format!("{run}/ckpt/{seq}")),
            (None, _) => None,
        };
        let checkpoint = match &reference {
            Some(reference) if reference.starts_with(&format!("{run}/")) => engine
                .inner()
                .transcripts
                .get(reference)?
                .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok()),
            _ => None,
        };
        let mut messages: Vec<Value> = checkpoint
            .as_ref()
            .and_then(|c| c.get("messages"))
            .and_then(Value::as_array)
            .map(|all| all.iter().map(message).collect())
            .unwrap_or_default();
        if entry.status != Status::Running
            && let Some(answer) = entry.value()
        {
            let text = match answer {
                Value::String(text) => text,
                other => other.to_string(),
            };
            messages.push(json!({ "role": "assistant", "parts": [text_part("answer", &text)] }));
        }
        let omitted = messages.len().saturating_sub(MAX_MESSAGES);
        let messages = messages.split_off(omitted);
        Ok(Json(json!({
            "run_id": run,
            "seq": seq,
            "status": entry.status,
            "checkpointed": checkpoint.is_some(),
            "turns": checkpoint.as_ref().and_then(|c| c.get("turns")).cloned(),
            "tool_calls": checkpoint.as_ref().and_then(|c| c.get("tool_calls")).cloned(),
            "usage": entry.usage,
            "cost_nano_usd": entry.cost.map(crate::money::Money::nano_usd),
            "cost_usd": entry.cost.map(crate::money::Money::as_usd),
            "omitted": omitted,
            "messages": messages,
        })))
    })
    .await
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

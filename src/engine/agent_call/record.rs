//! What an agent call's journal entries say to the workflow and to observers: the record
//! `result: "full"` returns, the end event, the failure path, and the scope of its approvals.

use serde_json::{Value, json};

use crate::engine::ctx::Ctx;
use crate::engine::events::EventKind;
use crate::engine::options::AgentOptions;
use crate::error::{Error, ErrorCode};
use crate::journal::{ContentKey, Entry, Segment};
use crate::usage::Usage;

/// The scope of an agent call's approval waits: `at:agent-KEY:ordinal`, from the call's
/// identity (KEY: the first 16 hex digits of its content key).
pub(super) fn approvals_segment(key: ContentKey, ordinal: u32) -> Segment {
    let mut hex = key.to_hex();
    hex.truncate(16);
    Segment::Site { label: format!("agent-{hex}"), index: ordinal }
}

pub(super) fn agent_end_event(entry: &Entry) -> EventKind {
    EventKind::AgentEnd {
        status: entry.status.as_str().into(),
        usage: entry.usage.unwrap_or_default(),
        cost: entry.cost,
        served_by: entry.served_by.as_deref().map(str::to_owned),
        error: entry.error.as_ref().map(|e| e.code),
    }
}

impl Ctx {
    /// A failed agent call: with `result: "full"` its record (status, typed error, usage and
    /// cost of what it consumed) for the workflow to branch on; otherwise the error policy.
    /// A stopped run (cancellation, a dry run's miss) always raises.
    pub(super) fn agent_failed(
        &self,
        opts: &AgentOptions,
        label: Option<String>,
        error: Error,
        entry: Option<(&Entry, bool)>,
    ) -> Result<Value, Error> {
        if !opts.full || matches!(error.code, ErrorCode::Cancelled | ErrorCode::JournalMiss) {
            return self.fail(opts.on_error, "agent", label, error);
        }
        if error.code == ErrorCode::BudgetExhausted {
            self.run.mark_exhausted();
        }
        let mut record = match entry {
            Some((entry, _)) => {
                let mut record = full_result(entry, Value::Null);
                if let Some(partial) = entry.value() {
                    record["partial"] = partial;
                }
                record
            }
            None => json!({
                "value": null,
                "status": "limit",
                "usage": Usage::default(),
                "cost_nano_usd": 0,
                "cost_usd": 0.0,
                "served_by": null,
                "finish_reason": null,
            }),
        };
        record["error"] = json!({ "code": error.code, "message": error.message });
        Ok(record)
    }
}

/// The record `result: "full"` returns, the fields `dialect/agent.schema.json`'s `result`
/// option names (a test holds the two together, in both dialects): `status`, `value`, `error`
/// (null unless it failed), `usage`, `cost_usd` and `cost_nano_usd`, `served_by`,
/// `finish_reason`, and `partial` for an answer cut at its output limit. It holds only what the
/// journal holds, so a replay returns the same record: whether the call was served from the
/// journal is not in it (a script could branch on that, and its value would differ on replay).
pub(super) fn full_result(entry: &Entry, value: Value) -> Value {
    json!({
        "value": value,
        "status": entry.status.as_str(),
        "error": null,
        "usage": entry.usage.unwrap_or_default(),
        "cost_nano_usd": entry.cost,
        "cost_usd": entry.cost.map(crate::money::Money::as_usd),
        "served_by": entry.served_by,
        "finish_reason": entry.finish_reason,
    })
}

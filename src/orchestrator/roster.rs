//! The roster: the orchestration's children, their handles, their settled outcomes and the
//! digests the orchestrator reads instead of whole outputs.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::verdict::{Decision, Verdict};
use crate::error::Error;
use crate::journal::Segment;
use crate::money::Money;

/// Characters of a child's output a digest carries.
pub(crate) const DIGEST_CHARS: usize = 400;

/// A child's status as the orchestrator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildStatus {
    /// Admitted and not settled.
    Running,
    /// Settled with a value.
    Ok,
    /// Failed.
    Error,
    /// Stopped by a limit (turns, budget).
    Limit,
    /// Cancelled by a decision.
    Cancelled,
}

impl ChildStatus {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ChildStatus::Running => "running",
            ChildStatus::Ok => "ok",
            ChildStatus::Error => "error",
            ChildStatus::Limit => "limit",
            ChildStatus::Cancelled => "cancelled",
        }
    }
}

/// One child as the result and the CLI report it.
#[derive(Debug, Clone, Serialize)]
pub struct ChildSummary {
    /// Its handle (`c0`, `c1`, ...: its admission ordinal).
    pub handle: String,
    /// Its profile.
    pub profile: String,
    /// How it settled.
    pub status: ChildStatus,
    /// What it cost: `cost_nano_usd` and `cost_usd` in JSON, as every amount is written
    /// (`docs/reference/json.md`).
    #[serde(flatten, with = "crate::money::json::cost")]
    pub cost: Money,
    /// The deterministic 400-character summary of its output (or of its error).
    pub summary: String,
}

/// One admitted child.
#[derive(Debug)]
pub(crate) struct Child {
    pub(crate) n: u32,
    pub(crate) handle: String,
    pub(crate) profile: String,
    pub(crate) prompt: String,
    pub(crate) schema: Option<Value>,
    pub(crate) est_cost: Option<Money>,
    pub(crate) status: ChildStatus,
    pub(crate) cost: Money,
    pub(crate) output: Option<Value>,
    pub(crate) error: Option<Error>,
    pub(crate) cancel_decided: bool,
    pub(crate) started: bool,
    /// Whether a wake digest or an await has shown its settled state.
    pub(crate) reported: bool,
    pub(crate) cancel: CancellationToken,
    pub(crate) task: Option<tokio::task::JoinHandle<()>>,
}

impl Child {
    pub(crate) fn new(
        n: u32,
        profile: String,
        prompt: String,
        schema: Option<Value>,
        est_cost: Option<Money>,
    ) -> Child {
        Child {
            n,
            handle: handle(n),
            profile,
            prompt,
            schema,
            est_cost,
            status: ChildStatus::Running,
            cost: Money::ZERO,
            output: None,
            error: None,
            cancel_decided: false,
            started: false,
            reported: false,
            cancel: CancellationToken::new(),
            task: None,
        }
    }

    /// The status the roster reports: a decided cancellation wins over a racing settle, so a
    /// resume (which never reruns a cancelled child) reports the same.
    pub(crate) fn effective_status(&self) -> ChildStatus {
        if self.cancel_decided { ChildStatus::Cancelled } else { self.status }
    }

    pub(crate) fn settled(&self) -> bool {
        self.effective_status() != ChildStatus::Running
    }

    /// The text of its output: a string as is, anything else as compact JSON.
    pub(crate) fn output_text(&self) -> String {
        match &self.output {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        }
    }

    /// The digest: status, cost, the 400-character summary, the artifact ids.
    pub(crate) fn digest(&self) -> Value {
        let mut digest = json!({
            "handle": self.handle,
            "profile": self.profile,
            "status": self.effective_status().as_str(),
            "cost_nano_usd": self.cost.nano_usd(),
            "cost_usd": self.cost.as_usd(),
            "summary": self.summary(),
            "artifacts": if self.output.is_some() { vec![format!("{}/output", self.handle)] } else { Vec::new() },
        });
        if let Some(error) = &self.error {
            digest["error"] =
                json!({ "code": error.code, "message": truncate(&error.message, DIGEST_CHARS) });
        }
        digest
    }

    pub(crate) fn summary(&self) -> String {
        match (&self.output, &self.error) {
            (Some(_), _) => summarize(&self.output_text(), DIGEST_CHARS),
            (None, Some(error)) => summarize(&format!("{}: {}", error.code, error.message), DIGEST_CHARS),
            (None, None) => String::new(),
        }
    }

    pub(crate) fn to_summary(&self) -> ChildSummary {
        ChildSummary {
            handle: self.handle.clone(),
            profile: self.profile.clone(),
            status: self.effective_status(),
            cost: self.cost,
            summary: self.summary(),
        }
    }
}

/// `c{n}`.
pub(crate) fn handle(n: u32) -> String {
    format!("c{n}")
}

/// Child `n`'s scope segment under the orchestration: `at:child:n`.
pub(crate) fn child_segment(n: u32) -> Segment {
    Segment::Site { label: "child".into(), index: n }
}

/// The child ordinal a handle names.
pub(crate) fn parse_handle(handle: &str) -> Option<u32> {
    handle.strip_prefix('c')?.parse().ok()
}

/// Whitespace collapsed, cut to `max` characters with a trailing ellipsis: the same text for
/// the same output on every run.
pub(crate) fn summarize(text: &str, max: usize) -> String {
    let collapsed: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    truncate(&collapsed, max)
}

pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Counts by status, every status named.
pub(crate) fn status_counts(children: &[ChildSummary]) -> BTreeMap<String, u32> {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for status in [
        ChildStatus::Ok,
        ChildStatus::Error,
        ChildStatus::Limit,
        ChildStatus::Cancelled,
        ChildStatus::Running,
    ] {
        counts.insert(status.as_str().to_owned(), 0);
    }
    for child in children {
        *counts.entry(child.status.as_str().to_owned()).or_insert(0) += 1;
    }
    counts
}

/// What the orchestration knows, folded from its decisions and its children's settles.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) decisions: Vec<Decision>,
    pub(crate) by_call: HashMap<(String, u32), usize>,
    pub(crate) roster: Vec<Child>,
}

impl State {
    pub(crate) fn admitted(&self) -> u32 {
        self.roster.len() as u32
    }

    /// Rejected finishes so far (the repair loop's count).
    pub(crate) fn repairs(&self) -> u32 {
        self.decisions
            .iter()
            .filter(|d| matches!(&d.verdict, Verdict::Finish { verdict, .. } if verdict == "rejected"))
            .count() as u32
    }

    pub(crate) fn child(&self, handle: &str) -> Result<&Child, Error> {
        parse_handle(handle)
            .and_then(|n| self.roster.get(n as usize))
            .ok_or_else(|| Error::validation(format!("there is no child {handle:?}")))
    }
}

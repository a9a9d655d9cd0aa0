//! From a run segment's events to OpenTelemetry spans: each `*:start` opens a span under the
//! event's span id, its `*:end` closes it, and a closed span is handed over as the SDK's
//! `SpanData` with the ids the engine gave it (engine span `n` is OTel span `n + 1`, within
//! the trace whose id is derived from the run id). Attributes follow the GenAI semantic
//! conventions (`gen_ai.*`), plus cairn's own (`cairn.*`): cost, run id, status, scope.

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value as OtelValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use sha2::{Digest, Sha256};

use crate::engine::{Event, EventKind};
use crate::money::Money;
use crate::store::{RunId, RunStatus};
use crate::usage::Usage;

/// The trace id of a run: the first 16 bytes of the sha256 of `cairn-trace:` and the run id,
/// the same for every segment of the run.
pub(crate) fn trace_id(run_id: &RunId) -> TraceId {
    let digest = Sha256::digest(format!("cairn-trace:{}", run_id.as_str()).as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    if bytes == [0; 16] {
        bytes[15] = 1;
    }
    TraceId::from_bytes(bytes)
}

/// The OTel id of engine span `span` (never zero, which OTel reserves).
fn span_id(span: u64) -> SpanId {
    SpanId::from_bytes(span.wrapping_add(1).max(1).to_be_bytes())
}

/// A span opened by a start event, waiting for its end.
struct Open {
    name: String,
    parent: Option<u64>,
    kind: SpanKind,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    /// `provider` of an agent call, for its turns' `gen_ai.provider.name`.
    provider: Option<String>,
}

/// Turns one segment's events into finished spans.
pub(crate) struct Tracker {
    run_id: RunId,
    trace: TraceId,
    capture_content: bool,
    open: HashMap<u64, Open>,
    /// The run's spend, from the last `budget:update`.
    spent: Option<Money>,
    scope: InstrumentationScope,
}

fn time_of(ts_ms: i64) -> SystemTime {
    let ms = u64::try_from(ts_ms).unwrap_or(0);
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn kv(key: &'static str, value: impl Into<OtelValue>) -> KeyValue {
    KeyValue::new(key, value)
}

fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `provider:model` split (a bare name has no provider).
fn split_model(model: &str) -> (Option<&str>, &str) {
    match model.split_once(':') {
        Some((provider, name)) => (Some(provider), name),
        None => (None, model),
    }
}

fn usage_attributes(usage: &Usage, into: &mut Vec<KeyValue>) {
    into.push(kv("gen_ai.usage.input_tokens", int(usage.input_tokens)));
    into.push(kv("gen_ai.usage.output_tokens", int(usage.output_tokens)));
    if usage.cache_read_tokens > 0 {
        into.push(kv("gen_ai.usage.cache_read.input_tokens", int(usage.cache_read_tokens)));
    }
    if usage.cache_write_tokens > 0 {
        into.push(kv("gen_ai.usage.cache_creation.input_tokens", int(usage.cache_write_tokens)));
    }
}

fn provider_attributes(provider: &str, into: &mut Vec<KeyValue>) {
    into.push(kv("gen_ai.provider.name", provider.to_owned()));
    into.push(kv("gen_ai.system", provider.to_owned()));
}

fn status_of(status: &str) -> Status {
    match status {
        "ok" | "skipped" => Status::Ok,
        other => Status::error(other.to_owned()),
    }
}

impl Tracker {
    pub(crate) fn new(run_id: &RunId, capture_content: bool) -> Tracker {
        Tracker {
            run_id: run_id.clone(),
            trace: trace_id(run_id),
            capture_content,
            open: HashMap::new(),
            spent: None,
            scope: InstrumentationScope::builder("cairn").with_version(env!("CARGO_PKG_VERSION")).build(),
        }
    }

    fn start(&mut self, event: &Event, name: String, kind: SpanKind, mut attributes: Vec<KeyValue>) {
        attributes.push(kv("cairn.run_id", self.run_id.as_str().to_owned()));
        if event.replayed {
            attributes.push(kv("cairn.replayed", true));
        }
        let open = Open {
            name,
            parent: event.parent_span_id,
            kind,
            start: time_of(event.ts),
            attributes,
            provider: None,
        };
        self.open.insert(event.span_id, open);
    }

    fn data(&self, span: u64, open: Open, end: SystemTime, status: Status) -> SpanData {
        let context =
            SpanContext::new(self.trace, span_id(span), TraceFlags::SAMPLED, false, TraceState::default());
        SpanData {
            span_context: context,
            parent_span_id: open.parent.map_or(SpanId::INVALID, span_id),
            parent_span_is_remote: false,
            span_kind: open.kind,
            name: Cow::Owned(open.name),
            start_time: open.start,
            end_time: end.max(open.start),
            attributes: open.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.scope.clone(),
        }
    }

    /// Closes the span `event` ends, with `extra` attributes and `status`.
    fn end(&mut self, event: &Event, extra: Vec<KeyValue>, status: Status) -> Option<SpanData> {
        let mut open = self.open.remove(&event.span_id)?;
        open.attributes.extend(extra);
        Some(self.data(event.span_id, open, time_of(event.ts), status))
    }

    /// The spans `event` closes (none, one, or, at `run:end`, every span still open).
    pub(crate) fn observe(&mut self, event: &Event) -> Vec<SpanData> {
        match &event.kind {
            EventKind::RunStart { name, resumed, ceiling } => {
                let mut attributes = vec![kv("cairn.workflow", name.clone()), kv("cairn.resumed", *resumed)];
                if let Some(ceiling) = ceiling {
                    attributes.push(kv("cairn.ceiling_usd", ceiling.as_usd()));
                }
                self.start(event, format!("run {name}"), SpanKind::Internal, attributes);
                Vec::new()
            }
            EventKind::RunEnd { status, .. } => {
                let status_text = run_status(*status);
                let mut extra = vec![kv("cairn.status", status_text.to_owned())];
                if let Some(spent) = self.spent {
                    extra.push(kv("cairn.cost_usd", spent.as_usd()));
                }
                let otel_status = match status {
                    RunStatus::Error => Status::error("error"),
                    _ => Status::Ok,
                };
                let mut done: Vec<SpanData> = Vec::new();
                if let Some(span) = self.end(event, extra, otel_status) {
                    done.push(span);
                }
                done.extend(self.close_open(event.ts));
                done
            }
            EventKind::PhaseStart { name } => {
                self.start(
                    event,
                    format!("phase {name}"),
                    SpanKind::Internal,
                    vec![kv("cairn.phase", name.clone())],
                );
                Vec::new()
            }
            EventKind::PhaseEnd { .. } => self.end(event, Vec::new(), Status::Unset).into_iter().collect(),
            EventKind::BranchStart { index, scope } => {
                let attributes =
                    vec![kv("cairn.branch.index", i64::from(*index)), kv("cairn.scope", scope.clone())];
                self.start(event, format!("branch {index}"), SpanKind::Internal, attributes);
                Vec::new()
            }
            EventKind::BranchEnd { status, .. } => {
                let extra = vec![kv("cairn.status", status.clone())];
                self.end(event, extra, status_of(status)).into_iter().collect()
            }
            EventKind::StepStart { kind, label } => {
                let attributes = vec![kv("cairn.step.kind", kind.clone()), kv("cairn.label", label.clone())];
                self.start(event, format!("{kind} {label}"), SpanKind::Internal, attributes);
                Vec::new()
            }
            EventKind::StepEnd { status, .. } => {
                let extra = vec![kv("cairn.status", status.clone())];
                self.end(event, extra, status_of(status)).into_iter().collect()
            }
            EventKind::AgentStart { label, agent_type, model, scope } => {
                let (provider, name) = split_model(model);
                let mut attributes = vec![
                    kv("gen_ai.operation.name", "invoke_agent"),
                    kv("gen_ai.request.model", name.to_owned()),
                    kv("cairn.scope", scope.clone()),
                ];
                if let Some(provider) = provider {
                    provider_attributes(provider, &mut attributes);
                }
                let agent = label.clone().or_else(|| agent_type.clone());
                if let Some(agent) = &agent {
                    attributes.push(kv("gen_ai.agent.name", agent.clone()));
                }
                if let Some(agent_type) = agent_type {
                    attributes.push(kv("cairn.agent_type", agent_type.clone()));
                }
                let span_name = format!("invoke_agent {}", agent.as_deref().unwrap_or(name));
                let provider = provider.map(str::to_owned);
                self.start(event, span_name, SpanKind::Internal, attributes);
                if let Some(open) = self.open.get_mut(&event.span_id) {
                    open.provider = provider;
                }
                Vec::new()
            }
            EventKind::AgentEnd { status, usage, cost, served_by, error } => {
                let mut extra = vec![kv("cairn.status", status.clone())];
                usage_attributes(usage, &mut extra);
                if let Some(cost) = cost {
                    extra.push(kv("cairn.cost_usd", cost.as_usd()));
                }
                if let Some(served_by) = served_by {
                    extra.push(kv("gen_ai.response.model", split_model(served_by).1.to_owned()));
                }
                if let Some(error) = error {
                    extra.push(kv("error.type", error.to_string()));
                }
                self.end(event, extra, status_of(status)).into_iter().collect()
            }
            EventKind::TurnStart { turn, model, max_tokens, input } => {
                let mut attributes = vec![
                    kv("gen_ai.operation.name", "chat"),
                    kv("gen_ai.request.model", model.clone()),
                    kv("cairn.turn", i64::from(*turn)),
                ];
                let provider =
                    event.parent_span_id.and_then(|p| self.open.get(&p)).and_then(|a| a.provider.clone());
                if let Some(provider) = &provider {
                    provider_attributes(provider, &mut attributes);
                }
                if let Some(max) = max_tokens {
                    attributes.push(kv("gen_ai.request.max_tokens", i64::from(*max)));
                }
                if self.capture_content
                    && let Some(input) = input
                {
                    attributes.push(kv("gen_ai.input.messages", input.to_string()));
                }
                self.start(event, format!("chat {model}"), SpanKind::Client, attributes);
                Vec::new()
            }
            EventKind::TurnEnd { status, model, usage, finish_reason, output, .. } => {
                let mut extra = vec![
                    kv("cairn.status", status.clone()),
                    kv("gen_ai.response.model", split_model(model).1.to_owned()),
                ];
                usage_attributes(usage, &mut extra);
                if let Some(reason) = finish_reason {
                    let reasons = Array::String(vec![StringValue::from(reason.clone())]);
                    extra.push(KeyValue::new("gen_ai.response.finish_reasons", OtelValue::Array(reasons)));
                }
                if self.capture_content
                    && let Some(output) = output
                {
                    let messages = serde_json::json!([{ "role": "assistant", "parts": [{ "type": "text", "content": output }] }]);
                    extra.push(kv("gen_ai.output.messages", messages.to_string()));
                }
                self.end(event, extra, status_of(status)).into_iter().collect()
            }
            EventKind::ToolStart { tool, call_id, args_digest } => {
                let attributes = vec![
                    kv("gen_ai.operation.name", "execute_tool"),
                    kv("gen_ai.tool.name", tool.clone()),
                    kv("gen_ai.tool.call.id", call_id.clone()),
                    kv("cairn.args_digest", args_digest.clone()),
                ];
                self.start(event, format!("execute_tool {tool}"), SpanKind::Internal, attributes);
                Vec::new()
            }
            EventKind::ToolEnd { status, duration_ms, bytes, error, .. } => {
                let mut extra = vec![
                    kv("cairn.status", status.clone()),
                    kv("cairn.duration_ms", int(*duration_ms)),
                    kv("cairn.result_bytes", int(*bytes)),
                ];
                if let Some(error) = error {
                    extra.push(kv("error.type", error.to_string()));
                }
                self.end(event, extra, status_of(status)).into_iter().collect()
            }
            EventKind::BudgetUpdate { spent, .. } => {
                self.spent = Some(*spent);
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    /// Spans a segment left open (it suspended, or its stream ended early), closed at `ts`.
    fn close_open(&mut self, ts: i64) -> Vec<SpanData> {
        let end = time_of(ts);
        let mut open: Vec<(u64, Open)> = self.open.drain().collect();
        open.sort_by_key(|(span, _)| *span);
        open.into_iter()
            .map(|(span, mut open)| {
                open.attributes.push(kv("cairn.unfinished", true));
                self.data(span, open, end, Status::Unset)
            })
            .collect()
    }

    /// What is left when the stream ends without `run:end`.
    pub(crate) fn finish(&mut self) -> Vec<SpanData> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        self.close_open(now)
    }
}

fn run_status(status: RunStatus) -> &'static str {
    status.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Preview;

    fn event(seq: u64, span: (u64, Option<u64>), kind: EventKind) -> Event {
        Event {
            run_id: RunId::parse("01JTRACE0000000000000000AA").unwrap(),
            seq,
            ts: 1_000 + i64::try_from(seq).unwrap(),
            span_id: span.0,
            parent_span_id: span.1,
            replayed: false,
            kind,
        }
    }

    fn run_start(base: u64, resumed: bool) -> Event {
        event(base + 1, (base, None), EventKind::RunStart { name: "w".into(), resumed, ceiling: None })
    }

    fn run_end(base: u64, seq: u64, status: RunStatus) -> Event {
        event(base + seq, (base, None), EventKind::RunEnd { status, preview: Preview::default() })
    }

    #[test]
    fn the_trace_id_is_the_run_ids_and_only_its() {
        let a = RunId::parse("01JTRACE0000000000000000AA").unwrap();
        let b = RunId::parse("01JTRACE0000000000000000AB").unwrap();
        assert_eq!(trace_id(&a), trace_id(&a));
        assert_ne!(trace_id(&a), trace_id(&b));
        assert_ne!(trace_id(&a), TraceId::INVALID);
    }

    #[test]
    fn a_resumed_segment_joins_its_runs_trace_under_a_root_of_its_own() {
        let run = RunId::parse("01JTRACE0000000000000000AA").unwrap();
        let mut first = Tracker::new(&run, false);
        let mut spans = first.observe(&run_start(0, false));
        spans.extend(first.observe(&event(2, (1, Some(0)), EventKind::PhaseStart { name: "p".into() })));
        spans.extend(first.observe(&run_end(0, 3, RunStatus::Suspended)));
        let base = 1 << 32;
        let mut second = Tracker::new(&run, false);
        spans.extend(second.observe(&run_start(base, true)));
        spans.extend(second.observe(&run_end(base, 2, RunStatus::Ok)));
        assert_eq!(spans.len(), 3, "two roots and the phase the suspension left open");
        assert!(spans.iter().all(|s| s.span_context.trace_id() == trace_id(&run)));
        let roots: Vec<_> = spans.iter().filter(|s| s.parent_span_id == SpanId::INVALID).collect();
        assert_eq!(roots.len(), 2);
        assert_ne!(roots[0].span_context.span_id(), roots[1].span_context.span_id());
        let phase = spans.iter().find(|s| s.name == "phase p").unwrap();
        assert_eq!(phase.parent_span_id, span_id(0));
        assert!(phase.attributes.iter().any(|kv| kv.key.as_str() == "cairn.unfinished"));
        let resumed = roots.iter().find(|s| s.span_context.span_id() == span_id(base)).unwrap();
        assert!(resumed.attributes.contains(&KeyValue::new("cairn.resumed", true)));
        assert!(resumed.attributes.contains(&KeyValue::new("cairn.status", "ok")));
    }

    #[test]
    fn content_is_dropped_unless_captured() {
        let run = RunId::parse("01JTRACE0000000000000000AA").unwrap();
        for capture in [false, true] {
            let mut tracker = Tracker::new(&run, capture);
            let input = Some(serde_json::json!({"messages": ["secret prompt"]}));
            let start = EventKind::TurnStart { turn: 1, model: "tiny".into(), max_tokens: Some(64), input };
            let end = EventKind::TurnEnd {
                turn: 1,
                status: "ok".into(),
                model: "m:tiny".into(),
                usage: Usage { input_tokens: 7, output_tokens: 2, ..Usage::default() },
                finish_reason: Some("stop".into()),
                output: Some("secret answer".into()),
            };
            assert!(tracker.observe(&event(1, (5, Some(4)), start)).is_empty());
            let spans = tracker.observe(&event(2, (5, Some(4)), end));
            let turn = &spans[0];
            let has = |key: &str| turn.attributes.iter().any(|kv| kv.key.as_str() == key);
            assert_eq!(has("gen_ai.input.messages"), capture);
            assert_eq!(has("gen_ai.output.messages"), capture);
            assert!(turn.attributes.contains(&KeyValue::new("gen_ai.request.max_tokens", 64_i64)));
            assert!(turn.attributes.contains(&KeyValue::new("gen_ai.response.model", "tiny")));
            assert!(turn.attributes.contains(&KeyValue::new("gen_ai.usage.input_tokens", 7_i64)));
            assert_eq!(turn.parent_span_id, span_id(4));
            assert_eq!(turn.span_context.span_id(), span_id(5));
        }
    }
}

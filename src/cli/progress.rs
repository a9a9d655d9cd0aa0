//! Progress on stderr while a run is live: on a terminal, a live line (agents in flight,
//! tokens, spend against the ceiling) via indicatif with finished calls printed above it;
//! elsewhere (CI, pipes), plain lines. `NO_COLOR` turns styling off.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Duration;

use futures::FutureExt as _;
use indicatif::{ProgressBar, ProgressStyle};

use crate::engine::{EventKind, EventStream};
use crate::money::Money;

/// Renders a run's events until the run ends.
pub(super) async fn render(mut events: EventStream, quiet: bool) {
    if quiet {
        while events.next().await.is_some() {}
        return;
    }
    let terminal = std::io::stderr().is_terminal();
    let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && terminal;
    let bar = terminal.then(|| {
        let bar = ProgressBar::new_spinner();
        let template = if color { "{spinner:.cyan} {msg}" } else { "{spinner} {msg}" };
        bar.set_style(
            ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    });
    let mut in_flight = 0i64;
    let mut tokens = 0u64;
    let mut spent = Money::ZERO;
    let mut ceiling: Option<Money> = None;
    // The labels of the agent calls in flight, by span: an end event names its call by them.
    let mut labels: HashMap<u64, String> = HashMap::new();
    let mut out = Lines { bar: bar.as_ref(), pending: String::new() };
    loop {
        // Lines are written in batches: whatever is already emitted is rendered, then written
        // with one system call before waiting for more.
        let event = match events.next().now_or_never() {
            Some(Some(event)) => event,
            Some(None) => break,
            None => {
                out.flush();
                match events.next().await {
                    Some(event) => event,
                    None => break,
                }
            }
        };
        let mut line = |text: String| out.line(text);
        match &event.kind {
            EventKind::RunStart { name, resumed, ceiling: c } => {
                ceiling = *c;
                let verb = if *resumed { "resuming" } else { "running" };
                let budget = c.map_or("no budget ceiling".to_owned(), |c| format!("budget {c}"));
                line(format!("{verb} {name} as run {} ({budget})", event.run_id));
            }
            EventKind::AgentStart { label, model, scope, .. } => {
                in_flight += 1;
                if let Some(label) = label {
                    labels.insert(event.span_id, label.clone());
                }
                if bar.is_none() && !event.replayed {
                    let name = label.clone().unwrap_or_else(|| "agent".into());
                    let at = if scope.is_empty() { String::new() } else { format!(" [{scope}]") };
                    line(format!("  > {name}{at} on {model}"));
                }
            }
            EventKind::AgentEnd { status, usage, cost, error, .. } => {
                in_flight -= 1;
                tokens += usage.total_tokens();
                let how = if event.replayed { "replayed" } else { status.as_str() };
                let price = cost.map_or(String::new(), |c| format!(", {c}"));
                let why = error.map_or(String::new(), |e| format!(" ({e})"));
                let total = usage.total_tokens();
                let name = labels.remove(&event.span_id).map_or(String::new(), |label| format!(" {label}"));
                line(format!(
                    "  {} agent{name} {how}: {total} tokens{price}{why}",
                    mark(status, event.replayed)
                ));
            }
            EventKind::StepEnd { kind, label, status } => {
                line(format!("  {} {kind} {label}: {status}", mark(status, event.replayed)));
            }
            EventKind::ToolEnd { tool, status, duration_ms, bytes, error, .. } => {
                let how = if event.replayed { "replayed" } else { status.as_str() };
                let why = error.map_or(String::new(), |e| format!(" ({e})"));
                line(format!(
                    "    {} tool {tool} {how}: {bytes} bytes in {duration_ms} ms{why}",
                    mark(status, event.replayed)
                ));
            }
            EventKind::PhaseStart { name } => line(format!("phase {name}")),
            EventKind::BudgetUpdate { spent: s, .. } => spent = *s,
            EventKind::BudgetExhausted { what } => line(format!("  ! budget exhausted: {what} refused")),
            EventKind::Log { level, message, .. } => line(format!("  [{level}] {message}")),
            EventKind::ExternalWaiting { key, prompt } => {
                let ask = prompt.as_deref().map_or(String::new(), |p| format!(": {p}"));
                line(format!("  … waiting for external input {key:?}{ask}"));
            }
            EventKind::RunEnd { status, preview } => {
                if preview.hits + preview.reruns + preview.skipped + preview.orphaned > 0 {
                    line(format!(
                        "journal: {} replayed, {} live, {} rerun, {} skipped, {} orphaned",
                        preview.hits, preview.misses, preview.reruns, preview.skipped, preview.orphaned
                    ));
                }
                line(format!("run {status}: {tokens} tokens, spent {spent}"));
            }
            _ => {}
        }
        if let Some(bar) = &bar {
            let of = ceiling.map_or(String::new(), |c| format!(" of {c}"));
            bar.set_message(format!("{in_flight} agents in flight · {tokens} tokens · {spent}{of}"));
        }
    }
    out.flush();
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}

/// Where progress lines go: above the live line on a terminal, else batched for stderr.
struct Lines<'a> {
    bar: Option<&'a ProgressBar>,
    pending: String,
}

impl Lines<'_> {
    /// One line for a person, escaped for the terminal: labels, log messages, errors and
    /// prompts come from scripts, models and providers.
    fn line(&mut self, text: String) {
        let text = crate::text::for_terminal(&text);
        match self.bar {
            Some(bar) => bar.println(text),
            None => {
                self.pending.push_str(&text);
                self.pending.push('\n');
            }
        }
    }

    /// Writes the batched lines.
    fn flush(&mut self) {
        if !self.pending.is_empty() {
            use std::io::Write as _;
            let _ = std::io::stderr().lock().write_all(self.pending.as_bytes());
            self.pending.clear();
        }
    }
}

fn mark(status: &str, replayed: bool) -> &'static str {
    match (status, replayed) {
        (_, true) => "=",
        ("ok", _) => "+",
        ("skipped", _) => "-",
        _ => "x",
    }
}

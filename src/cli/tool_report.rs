//! The tool calls `cairn inspect` lists under each agent call: every `tool` entry journaled in
//! the call's own scope (`at:agent-KEY:n`), with its status, result bytes, duration and error.

use serde_json::{Value, json};

use crate::journal::{Entry, Kind, Segment, Status};

/// One agent call and its tool calls, in journal order; agent calls without tools are left out.
pub(super) fn tool_report(entries: &[Entry]) -> Vec<Value> {
    let mut report = Vec::new();
    for agent in entries.iter().filter(|e| e.kind == Kind::Agent && e.status == Status::Running) {
        let mut hex = agent.key.to_hex();
        hex.truncate(16);
        let own = agent.scope.child(&Segment::Site { label: format!("agent-{hex}"), index: agent.ordinal });
        let mut calls = Vec::new();
        for running in
            entries.iter().filter(|e| e.kind == Kind::Tool && e.status == Status::Running && e.scope == own)
        {
            // Its latest attempt's terminal entry, if any.
            let terminal = entries.iter().rev().find(|e| {
                e.kind == Kind::Tool && e.status != Status::Running && e.target == Some(running.seq)
            });
            let (status, bytes, error, duration_ms) = match terminal {
                Some(end) => (
                    end.status.as_str(),
                    match end.value() {
                        Some(Value::String(text)) => text.len(),
                        Some(other) => other.to_string().len(),
                        None => 0,
                    },
                    end.error.as_ref().map(|e| json!({"code": e.code, "message": e.message})),
                    end.ts.zip(running.ts).map(|(end, start)| (end - start).max(0)),
                ),
                // Dispatched, never finished (the process died meanwhile).
                None => ("running", 0, None, None),
            };
            if running.target.is_some() && calls.iter().any(|c: &Value| c["call_id"] == json!(running.label))
            {
                // A re-dispatch: the report keeps the latest attempt only.
                calls.retain(|c: &Value| c["call_id"] != json!(running.label));
            }
            calls.push(json!({
                "seq": running.seq,
                "tool": running.name,
                "call_id": running.label,
                "status": status,
                "bytes": bytes,
                "duration_ms": duration_ms,
                "error": error,
            }));
        }
        if !calls.is_empty() {
            report.push(json!({
                "agent_seq": agent.seq,
                "label": agent.label,
                "scope": agent.scope.as_str(),
                "tools": calls,
            }));
        }
    }
    report
}

/// Prints the report for a person: one line an agent call, one line a tool call.
pub(super) fn print_tool_report(report: &[Value]) {
    for agent in report {
        let label = agent["label"].as_str().map_or(String::new(), |l| format!(" {l}"));
        let scope =
            agent["scope"].as_str().filter(|s| !s.is_empty()).map_or(String::new(), |s| format!(" [{s}]"));
        println!(
            "{}",
            crate::text::for_terminal_line(&format!(
                "tools of agent seq {}{label}{scope}",
                agent["agent_seq"]
            ))
        );
        for call in agent["tools"].as_array().into_iter().flatten() {
            let duration = call["duration_ms"].as_i64().map_or(String::new(), |ms| format!(" in {ms} ms"));
            let error = call["error"]["code"].as_str().map_or(String::new(), |code| {
                format!(" ({code}: {})", call["error"]["message"].as_str().unwrap_or_default())
            });
            let line = format!(
                "  tool {} {}: {}, {} bytes{duration}{error}",
                call["tool"].as_str().unwrap_or("?"),
                call["call_id"].as_str().unwrap_or("?"),
                call["status"].as_str().unwrap_or("?"),
                call["bytes"],
            );
            println!("{}", crate::text::for_terminal_line(&line));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{self, ScopePath, Seq};

    #[test]
    fn tool_entries_are_listed_under_their_agent_call() {
        let key = journal::content_key(&json!("agent")).unwrap();
        let mut agent = Entry::new(Seq(1), Kind::Agent, Status::Running, ScopePath::root(), key, 0);
        agent.label = Some("research".into());
        let mut hex = key.to_hex();
        hex.truncate(16);
        let own = ScopePath::root().child(&Segment::Site { label: format!("agent-{hex}"), index: 0 });
        let tool_key = journal::content_key(&json!("tool")).unwrap();
        let mut running = Entry::new(Seq(2), Kind::Tool, Status::Running, own.clone(), tool_key, 0);
        running.name = Some("docs_search".into());
        running.label = Some("call_0_0".into());
        running.ts = Some(1_000);
        let mut end = Entry::new(Seq(3), Kind::Tool, Status::Ok, own, tool_key, 0);
        end.target = Some(Seq(2));
        end.ts = Some(1_042);
        end.set_value(Some(&json!("three hits")));
        let report = tool_report(&[agent, running, end]);
        assert_eq!(report.len(), 1);
        let call = &report[0]["tools"][0];
        assert_eq!(call["tool"], "docs_search");
        assert_eq!(call["status"], "ok");
        assert_eq!(call["bytes"], 10);
        assert_eq!(call["duration_ms"], 42);
    }
}

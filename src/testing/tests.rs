//! Unit tests of the fake provider: matching order, scripts, the call log.

use futures::StreamExt;
use serde_json::json;

use super::*;
use crate::ErrorCode;
use crate::provider::{CallMeta, Message};

fn request(label: Option<&str>, agent_type: Option<&str>, prompt: &str) -> ChatRequest {
    let mut request = ChatRequest::new("any", vec![Message::user(prompt)]);
    request.meta = CallMeta { label: label.map(str::to_owned), agent_type: agent_type.map(str::to_owned) };
    request
}

async fn run(fake: &FakeProvider, request: ChatRequest) -> Vec<ChatEvent> {
    fake.stream(request, CancellationToken::new()).collect().await
}

fn text_of(events: &[ChatEvent]) -> String {
    events
        .iter()
        .filter_map(|e| if let ChatEvent::TextDelta(t) = e { Some(t.as_str()) } else { None })
        .collect()
}

#[tokio::test]
async fn first_matching_responder_wins_then_fallback() {
    let fake = FakeProvider::new()
        .on_label("summary", FakeScript::text("by label"))
        .on_agent_type("reviewer", FakeScript::text("by type"))
        .on_prompt(Regex::new("(?i)weather").unwrap(), FakeScript::text("by prompt"))
        .otherwise(FakeScript::text("fallback"));
    let handle = fake.clone();
    assert_eq!(text_of(&run(&fake, request(Some("summary"), Some("reviewer"), "weather")).await), "by label");
    assert_eq!(text_of(&run(&fake, request(None, Some("reviewer"), "weather")).await), "by type");
    assert_eq!(text_of(&run(&fake, request(None, None, "The WEATHER?")).await), "by prompt");
    assert_eq!(text_of(&run(&fake, request(None, None, "hi")).await), "fallback");
    let calls = handle.calls();
    assert_eq!(handle.call_count(), 4);
    assert_eq!(calls.iter().map(|c| c.responder).collect::<Vec<_>>(), [Some(0), Some(1), Some(2), None]);
    assert_eq!(calls[2].last_user_text.as_deref(), Some("The WEATHER?"));
    assert_eq!(calls[0].label.as_deref(), Some("summary"));
}

#[tokio::test]
async fn scripts_advance_and_repeat_their_last_turn() {
    let rate_limited =
        Error::new(ErrorCode::ProviderRateLimit, "429 too many requests").with_retry_after_ms(1000);
    let fake = FakeProvider::new().otherwise(FakeScript::fail_times(2, rate_limited.clone()).then_text("ok"));
    for _ in 0..2 {
        assert_eq!(run(&fake, request(None, None, "x")).await, [ChatEvent::Error(rate_limited.clone())]);
    }
    for _ in 0..2 {
        let events = run(&fake, request(None, None, "x")).await;
        assert_eq!(text_of(&events), "ok");
        assert!(matches!(events.last(), Some(ChatEvent::Finish { reason: FinishReason::Stop, .. })));
    }
}

#[tokio::test]
async fn tool_call_turns_then_text_with_usage() {
    let usage = Usage { input_tokens: 10, output_tokens: 5, ..Usage::default() };
    let fake = FakeProvider::new().otherwise(
        FakeScript::tool_call("search", json!({"q": "x"})).with_usage(usage).then_json(json!({"a": 1})),
    );
    let events = run(&fake, request(None, None, "go")).await;
    assert_eq!(events[0], ChatEvent::ToolCallStart { wire_id: "fake_call_1".into(), name: "search".into() });
    assert_eq!(
        events[2],
        ChatEvent::ToolCallEnd {
            wire_id: "fake_call_1".into(),
            name: "search".into(),
            arguments: json!({"q": "x"})
        }
    );
    assert_eq!(events[3], ChatEvent::Finish { reason: FinishReason::ToolUse, usage });
    let events = run(&fake, request(None, None, "go")).await;
    assert_eq!(text_of(&events), r#"{"a":1}"#);
    let Some(ChatEvent::Finish { usage, .. }) = events.last() else { panic!("no finish") };
    assert!(usage.output_tokens >= 1 && !usage.approximate);
}

#[tokio::test]
async fn unmatched_calls_fail_typed() {
    let fake = FakeProvider::new().on_label("only", FakeScript::text("x"));
    let events = run(&fake, request(None, None, "hi")).await;
    let [ChatEvent::Error(error)] = events.as_slice() else { panic!("{events:?}") };
    assert_eq!(error.code, ErrorCode::Config);
    assert_eq!(fake.call_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn latency_uses_tokio_time_and_honours_cancellation() {
    let fake =
        FakeProvider::new().otherwise(FakeScript::text("slow").with_latency(Duration::from_secs(3600)));
    let start = tokio::time::Instant::now();
    let events = run(&fake, request(None, None, "x")).await;
    assert_eq!(text_of(&events), "slow");
    assert!(start.elapsed() >= Duration::from_secs(3600));
    let cancel = CancellationToken::new();
    let stream = fake.stream(request(None, None, "x"), cancel.clone());
    cancel.cancel();
    let events: Vec<ChatEvent> = stream.collect().await;
    assert!(matches!(events.as_slice(), [ChatEvent::Error(e)] if e.code == ErrorCode::Cancelled));
}

#[tokio::test]
async fn responders_can_be_functions_of_the_call() {
    use crate::provider::Part;
    let fake = FakeProvider::new().on_agent_type(
        "researcher",
        FakeScript::respond_with(|request| {
            let has_result =
                request.messages.iter().flat_map(|m| &m.parts).any(|p| matches!(p, Part::ToolResult { .. }));
            if has_result {
                FakeTurn::new(FakeReply::Text("summary".into()))
            } else {
                FakeTurn::new(FakeReply::ToolCalls(vec![FakeToolCall {
                    name: "search".into(),
                    arguments: json!({}),
                }]))
            }
        }),
    );
    let first = run(&fake, request(None, Some("researcher"), "go")).await;
    assert!(matches!(first.last(), Some(ChatEvent::Finish { reason: FinishReason::ToolUse, .. })));
    let mut second = request(None, Some("researcher"), "go");
    second.messages.push(Message {
        role: crate::provider::Role::User,
        parts: vec![Part::ToolResult { id: "1".into(), wire_id: None, content: "r".into(), is_error: false }],
    });
    assert_eq!(text_of(&run(&fake, second).await), "summary");
}

//! Unit tests of the canonical types: helpers and their serialized (cassette) form.

use serde_json::json;

use super::*;

#[test]
fn wire_tool_id_prefers_the_wire_id() {
    let call = Part::ToolCall {
        id: "01J".into(),
        wire_id: Some("toolu_1".into()),
        name: "f".into(),
        arguments: json!({}),
    };
    assert_eq!(call.wire_tool_id(), Some("toolu_1"));
    let minted =
        Part::ToolResult { id: "01J".into(), wire_id: None, content: String::new(), is_error: false };
    assert_eq!(minted.wire_tool_id(), Some("01J"));
    assert_eq!(Part::text("x").wire_tool_id(), None);
}

#[test]
fn last_user_text_skips_tool_only_turns() {
    let request = ChatRequest::new(
        "m",
        vec![
            Message::user("first"),
            Message::assistant("reply"),
            Message {
                role: Role::User,
                parts: vec![Part::ToolResult {
                    id: "1".into(),
                    wire_id: None,
                    content: "r".into(),
                    is_error: false,
                }],
            },
        ],
    );
    assert_eq!(request.last_user_text().as_deref(), Some("first"));
}

#[test]
fn events_and_requests_round_trip_through_json() {
    let events = vec![
        ChatEvent::text("hi"),
        ChatEvent::ReasoningDelta("hmm".into()),
        ChatEvent::ToolCallStart { wire_id: "w".into(), name: "f".into() },
        ChatEvent::ToolCallDelta { wire_id: "w".into(), arguments_delta: "{}".into() },
        ChatEvent::ToolCallEnd { wire_id: "w".into(), name: "f".into(), arguments: json!({"a": 1}) },
        ChatEvent::ProviderRaw { provider: "anthropic".into(), data: json!({"type": "thinking"}) },
        ChatEvent::Usage(Usage { input_tokens: 3, ..Usage::default() }),
        ChatEvent::Finish { reason: FinishReason::Other("weird".into()), usage: Usage::default() },
        ChatEvent::Error(crate::Error::internal("x")),
    ];
    let text = serde_json::to_string(&events).unwrap();
    assert_eq!(serde_json::from_str::<Vec<ChatEvent>>(&text).unwrap(), events);
    assert_eq!(serde_json::to_value(ChatEvent::text("hi")).unwrap(), json!({"text_delta": "hi"}));
    let mut request = ChatRequest::new("m", vec![Message::user("q")]);
    request.tool_choice = ToolChoice::Tool("f".into());
    let text = serde_json::to_string(&request).unwrap();
    assert_eq!(serde_json::from_str::<ChatRequest>(&text).unwrap(), request);
    assert!(events.last().is_some_and(ChatEvent::is_terminal));
    assert!(!events[0].is_terminal());
}

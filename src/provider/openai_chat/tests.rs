//! The OpenAI Chat Completions adapter's tests: usage, the stream decoder, strict mode, history.

use super::*;
use crate::provider::ToolSpec;

#[test]
fn usage_never_assumes_total_is_prompt_plus_completion() {
    let openai = parse_usage(&json!({"prompt_tokens": 15, "completion_tokens": 78, "total_tokens": 93,
        "completion_tokens_details": {"reasoning_tokens": 64}, "prompt_tokens_details": {"cached_tokens": 3}}));
    assert_eq!(
        (openai.input_tokens, openai.output_tokens, openai.reasoning_tokens, openai.cache_read_tokens),
        (15, 78, 64, 3)
    );
    let xai = parse_usage(&json!({"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 354,
        "completion_tokens_details": {"reasoning_tokens": 340}}));
    assert_eq!((xai.input_tokens, xai.output_tokens, xai.reasoning_tokens), (12, 342, 340));
    assert_eq!(xai.total_tokens(), 354);
}

fn decode(chunks: &[&str]) -> Vec<ChatEvent> {
    let mut decoder = ChatDecoder::new("t", 5);
    let body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    crate::provider::decode_sse(&mut decoder, body.as_bytes())
}

#[test]
fn the_text_fast_path_matches_the_general_path() {
    for chunk in [
        r#"{"choices":[{"index":0,"delta":{"content":"a\u00e9\n","reasoning_content":"r","role":"assistant"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"","reasoning":"why"},"finish_reason":null}],"usage":null}"#,
        r#"{"choices":[{"index":1,"delta":{"content":"other choice"}}]}"#,
        r#"{"choices":[{"delta":{"content":"no index"}}]}"#,
    ] {
        let parsed: TextChunk<'_> = serde_json::from_str(chunk).unwrap();
        assert!(parsed.is_plain_text(), "{chunk}");
        let (mut fast, mut slow) = (Vec::new(), Vec::new());
        let mut decoder = ChatDecoder::new("t", 0);
        decoder.text_chunk(&parsed, &mut fast);
        let mut decoder = ChatDecoder::new("t", 0);
        decoder.chunk(&serde_json::from_str(chunk).unwrap(), &mut slow);
        assert_eq!(fast, slow, "{chunk}");
    }
    let refusal: TextChunk<'_> =
        serde_json::from_str(r#"{"choices":[{"index":0,"delta":{"refusal":""}}]}"#).unwrap();
    assert!(!refusal.is_plain_text());
}

#[test]
fn a_finished_choice_without_done_still_finishes_with_estimated_usage() {
    let events = decode(&[
        r#"{"choices":[{"index":0,"delta":{"content":"abcdefgh"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
    ]);
    let usage = Usage { input_tokens: 5, output_tokens: 2, approximate: true, ..Usage::default() };
    assert_eq!(events.last(), Some(&ChatEvent::Finish { reason: FinishReason::Stop, usage }));
    let cut = decode(&[r#"{"choices":[{"index":0,"delta":{"content":"abc"}}]}"#]);
    assert!(
        matches!(cut.last(), Some(ChatEvent::Error(e)) if e.code == crate::ErrorCode::Transport && e.retryable)
    );
}

#[test]
fn in_stream_errors_and_odd_tool_deltas() {
    let events = decode(&[r#"{"error":{"message":"overloaded","type":"server_error","code":null}}"#]);
    assert!(
        matches!(events.as_slice(), [ChatEvent::Error(e)] if e.code == crate::ErrorCode::ProviderUnavailable)
    );
    // No id at all, the name repeated in every delta (as llama.cpp does), arguments split.
    let events = decode(&[
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\""}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":":1}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        "[DONE]",
    ]);
    assert_eq!(events[0], ChatEvent::ToolCallStart { wire_id: "call_0".into(), name: "f".into() });
    assert_eq!(
        events[3],
        ChatEvent::ToolCallEnd { wire_id: "call_0".into(), name: "f".into(), arguments: json!({"a": 1}) }
    );
    assert!(matches!(events.last(), Some(ChatEvent::Finish { reason: FinishReason::ToolUse, .. })));
    // A role chunk and `[DONE]` with no finish reason (llama.cpp, busy) is an incomplete
    // stream: a retryable error, never an empty answer.
    let events =
        decode(&[r#"{"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}"#, "[DONE]"]);
    assert!(
        matches!(events.last(), Some(ChatEvent::Error(e)) if e.code == crate::ErrorCode::ProviderUnavailable && e.retryable),
        "{events:?}"
    );
    // Arguments that never parse are a model mistake carried with their raw text (not a
    // transport error, not a silent {}); cut by the cap, the call is dropped.
    let events = decode(&[
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{\"a\":"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}"#,
        "[DONE]",
    ]);
    assert!(
        events.iter().any(|e| matches!(e, ChatEvent::ToolCallInvalid { wire_id, name, raw_arguments, .. }
            if wire_id == "c" && name == "f" && raw_arguments == "{\"a\":")),
        "{events:?}"
    );
    assert!(!events.iter().any(|e| matches!(e, ChatEvent::Error(_))), "{events:?}");
    assert!(
        matches!(events.last(), Some(ChatEvent::Finish { reason: FinishReason::ToolUse, usage }) if usage.output_tokens == 4),
        "{events:?}"
    );
    let events = decode(&[
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{\"a\":"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
        "[DONE]",
    ]);
    assert!(matches!(events.last(), Some(ChatEvent::Finish { reason: FinishReason::Length, .. })));
    assert!(!events.iter().any(|e| matches!(e, ChatEvent::ToolCallEnd { .. })));
}

#[test]
fn strict_mode_only_for_closed_schemas() {
    assert!(strict_compatible(&json!({"type": "object", "properties": {"a": {"type": "string"}},
        "required": ["a"], "additionalProperties": false})));
    assert!(!strict_compatible(&json!({"type": "object", "properties": {"a": {"type": "string"}}})));
    assert!(!strict_compatible(&json!({"type": "object", "properties": {"a": {"type": "object",
        "properties": {"b": {"type": "string"}}}}, "required": ["a"], "additionalProperties": false})));
}

#[test]
fn compiles_tool_history_in_wire_order() {
    let mut request = ChatRequest::new(
        "gpt-4o",
        vec![
            Message::user("hi"),
            Message {
                role: Role::Assistant,
                parts: vec![
                    Part::ProviderRaw { provider: "anthropic".into(), data: json!({"type": "thinking"}) },
                    Part::ToolCall {
                        id: "c1".into(),
                        wire_id: Some("call_1".into()),
                        name: "f".into(),
                        arguments: json!({"x": 1}),
                    },
                ],
            },
            Message {
                role: Role::User,
                parts: vec![
                    Part::text("more"),
                    Part::ToolResult {
                        id: "c1".into(),
                        wire_id: Some("call_1".into()),
                        content: "ok".into(),
                        is_error: false,
                    },
                ],
            },
        ],
    );
    request.system = Some("sys".into());
    request.tools =
        vec![ToolSpec { name: "f".into(), description: "d".into(), parameters: json!({"type": "object"}) }];
    request.tool_choice = ToolChoice::Tool("f".into());
    request.max_output_tokens = Some(100);
    request.response_schema = Some(json!({"type": "object"}));
    request.effort = Some("low".into());
    let body = compile(&request, Dialect::OPENAI, openai_capabilities("gpt-4o"));
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages[0], json!({"role": "system", "content": "sys"}));
    assert_eq!(messages[2]["content"], Value::Null);
    assert_eq!(messages[2]["tool_calls"][0]["function"]["arguments"], "{\"x\":1}");
    assert_eq!(messages[3], json!({"role": "tool", "tool_call_id": "call_1", "content": "ok"}));
    assert_eq!(messages[4], json!({"role": "user", "content": "more"}));
    assert_eq!(body["tool_choice"], json!({"type": "function", "function": {"name": "f"}}));
    assert_eq!(body["max_completion_tokens"], 100);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(body["response_format"]["json_schema"]["strict"], false);
    assert!(body.get("reasoning_effort").is_none(), "gpt-4o takes no effort");
    let compatible = compile(&request, Dialect::COMPATIBLE, Capabilities::CONSERVATIVE);
    assert_eq!(compatible["max_tokens"], 100);
    assert!(compatible.get("response_format").is_none());
}

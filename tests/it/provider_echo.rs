//! The offline echo model: deterministic replies, schema-valid JSON checked by a real JSON
//! Schema validator, usage, latency on tokio's clock, cancellation.

use std::time::Duration;

use cairn::provider::echo::{EchoProvider, json_for_schema};
use cairn::provider::{ChatEvent, ChatRequest, FinishReason, Message, Provider};
use cairn::{ErrorCode, Usage};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

async fn run(provider: &EchoProvider, request: ChatRequest) -> Vec<ChatEvent> {
    provider.stream(request, CancellationToken::new()).collect().await
}

fn text(events: &[ChatEvent]) -> String {
    events
        .iter()
        .filter_map(|e| if let ChatEvent::TextDelta(t) = e { Some(t.as_str()) } else { None })
        .collect()
}

#[tokio::test]
async fn echoes_the_last_user_text_in_a_few_deltas() {
    let request = ChatRequest::new(
        "default",
        vec![Message::user("first"), Message::assistant("echo: first"), Message::user("what is a cairn?")],
    );
    let events = run(&EchoProvider::new(), request.clone()).await;
    assert_eq!(text(&events), "echo: what is a cairn?");
    let deltas = events.iter().filter(|e| matches!(e, ChatEvent::TextDelta(_))).count();
    assert!((2..=4).contains(&deltas), "{deltas} deltas");
    let Some(ChatEvent::Finish { reason, usage }) = events.last() else { panic!("{events:?}") };
    assert_eq!(*reason, FinishReason::Stop);
    // "first" + "echo: first" + "what is a cairn?" = 32 chars -> 8 tokens; the reply 22 -> 6.
    assert_eq!(*usage, Usage { input_tokens: 8, output_tokens: 6, ..Usage::default() });
    assert!(!usage.approximate, "echo's usage is its own truth");
    assert_eq!(events.iter().filter(|e| e.is_terminal()).count(), 1);
    // Deterministic.
    assert_eq!(run(&EchoProvider::new(), request).await, events);
}

#[tokio::test]
async fn an_empty_prompt_still_costs_a_token() {
    let events = run(&EchoProvider::new(), ChatRequest::new("default", vec![])).await;
    let Some(ChatEvent::Finish { usage, .. }) = events.last() else { panic!() };
    assert_eq!((usage.input_tokens, usage.output_tokens), (1, 2));
    assert_eq!(text(&events), "echo: ");
}

fn schemas() -> Vec<Value> {
    vec![
        json!({"type": "object", "properties": {"verdict": {"type": "string", "enum": ["pass", "fail"]}, "score": {"type": "number", "minimum": 0.5, "maximum": 1}}, "required": ["verdict", "score"], "additionalProperties": false}),
        json!({"type": "array", "items": {"type": "integer", "minimum": 3, "multipleOf": 5}, "minItems": 3, "uniqueItems": true}),
        json!({"type": "string", "minLength": 12, "maxLength": 12}),
        json!({"type": "string", "maxLength": 2}),
        json!({"type": "string", "pattern": "^[A-Z]{3}$"}),
        json!({"type": "string", "format": "email"}),
        json!({"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 12}),
        json!({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.5}),
        json!({"type": "integer", "maximum": -5}),
        json!({"type": "boolean"}),
        json!({"type": "null"}),
        json!({"type": ["null", "string"]}),
        json!({"const": {"fixed": [1, 2]}}),
        json!({"enum": [7, "seven"]}),
        json!({"anyOf": [{"type": "integer", "minimum": 4}, {"type": "string"}]}),
        json!({"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"]}, {"type": "string"}]}),
        json!({"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]}),
        json!({
            "$defs": {
                "person": {"type": "object", "properties": {"name": {"type": "string", "minLength": 1}, "friends": {"type": "array", "items": {"$ref": "#/$defs/person"}, "maxItems": 0}}, "required": ["name", "friends"]}
            },
            "type": "object",
            "properties": {"people": {"type": "array", "items": {"$ref": "#/$defs/person"}, "minItems": 2}},
            "required": ["people"]
        }),
        json!({"definitions": {"id": {"type": "string", "format": "uuid"}}, "type": "object", "properties": {"id": {"$ref": "#/definitions/id"}}, "required": ["id", "extra"], "additionalProperties": {"type": "integer", "minimum": 1}}),
        json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false}),
        json!({"type": "object", "minProperties": 2}),
        json!({"type": "array", "items": {"enum": ["x", "y", "z"]}, "minItems": 3, "uniqueItems": true}),
        json!({"type": "object", "properties": {"when": {"type": "string", "format": "date-time"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}}, "required": ["when"]}),
        json!({}),
    ]
}

#[test]
fn generated_json_satisfies_its_schema() {
    for schema in schemas() {
        let validator = jsonschema::options().should_validate_formats(true).build(&schema).unwrap();
        let value = json_for_schema(&schema);
        let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "schema {schema}\nvalue {value}\nerrors {errors:?}");
    }
}

#[tokio::test]
async fn structured_output_replies_are_valid_json() {
    for schema in schemas() {
        let mut request = ChatRequest::new("default", vec![Message::user("give me json")]);
        request.response_schema = Some(schema.clone());
        let reply = text(&run(&EchoProvider::new(), request).await);
        let value: Value = serde_json::from_str(&reply).unwrap();
        assert!(jsonschema::is_valid(&schema, &value), "{schema} -> {reply}");
    }
}

#[tokio::test]
async fn echo_never_calls_tools() {
    let mut request = ChatRequest::new("default", vec![Message::user("use the tool")]);
    request.tools = vec![cairn::provider::ToolSpec {
        name: "search".into(),
        description: "search".into(),
        parameters: json!({"type": "object"}),
    }];
    request.tool_choice = cairn::provider::ToolChoice::Required;
    let events = run(&EchoProvider::new(), request).await;
    assert!(
        !events.iter().any(|e| matches!(e, ChatEvent::ToolCallStart { .. } | ChatEvent::ToolCallEnd { .. }))
    );
    assert!(EchoProvider::new().capabilities("default").native_schema);
}

#[tokio::test(start_paused = true)]
async fn latency_runs_on_tokio_time_and_cancellation_cuts_it() {
    let echo = EchoProvider::new().with_latency(Duration::from_secs(30));
    let started = tokio::time::Instant::now();
    let events = run(&echo, ChatRequest::new("default", vec![Message::user("hi")])).await;
    assert_eq!(text(&events), "echo: hi");
    assert!(started.elapsed() >= Duration::from_secs(30));

    let cancel = CancellationToken::new();
    let mut stream = echo.stream(ChatRequest::new("default", vec![Message::user("hi")]), cancel.clone());
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        cancel.cancel();
    });
    let started = tokio::time::Instant::now();
    let first = stream.next().await;
    assert!(matches!(first, Some(ChatEvent::Error(ref e)) if e.code == ErrorCode::Cancelled), "{first:?}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(stream.next().await.is_none());
    canceller.await.unwrap();
}

//! Structured output for every model: how a schema reaches a model with no native structured
//! output (the system prompt), and the correction sent after an invalid answer.

use serde_json::Value;

use crate::provider::ChatRequest;

/// Shows a model without native structured output the schema: appended to the system prompt
/// as compact JSON with the instruction to answer only with JSON matching it. A request that
/// carries the schema natively (`response_schema`) is left alone.
pub(super) fn show_schema(request: &mut ChatRequest, schema: &Value) {
    if request.response_schema.is_some() {
        return;
    }
    let instruction = format!(
        "Answer with only a JSON value (no prose, no code fence) that matches this JSON Schema:\n{schema}"
    );
    request.system = Some(match request.system.take() {
        Some(system) if !system.trim().is_empty() => format!("{system}\n\n{instruction}"),
        _ => instruction,
    });
}

/// The message after an answer that did not match: the problems, and the schema itself.
pub(super) fn correction(problems: &[String], schema: &Value) -> String {
    format!(
        "Your reply did not match the required JSON Schema:\n- {}\nThe schema is:\n{schema}\nReply again with only a JSON value that matches the schema.",
        problems.join("\n- ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Message;

    #[test]
    fn the_schema_goes_in_the_system_prompt_only_without_native_support() {
        let schema = serde_json::json!({"type": "object", "required": ["a"]});
        let mut request = ChatRequest::new("m", vec![Message::user("hi")]);
        request.system = Some("Be brief.".into());
        show_schema(&mut request, &schema);
        let system = request.system.clone().unwrap();
        assert!(system.starts_with("Be brief.\n\n"), "{system}");
        assert!(system.ends_with(r#"{"required":["a"],"type":"object"}"#), "{system}");
        let mut native = ChatRequest::new("m", vec![Message::user("hi")]);
        native.response_schema = Some(schema.clone());
        show_schema(&mut native, &schema);
        assert_eq!(native.system, None);
        assert!(correction(&["at '': missing a".into()], &schema).contains(r#""required":["a"]"#));
    }
}

//! How an agent invocation ends when it does not simply answer: the one final answer turn it
//! gets at its tool-call or turn limit (tools withheld, so the paid tool work is not lost), the
//! answering turn that carries a native structured-output schema (tool turns go out without
//! it, so the schema does not bias the model away from its tools), and the texts the model is
//! sent for each.

use serde_json::Value;

use crate::provider::{ChatRequest, ToolChoice};

/// The result a tool call past the limit gets instead of running: the transcript stays well
/// formed (every provider wants a result for each call) and the model sees which calls never ran.
pub(super) fn skipped_result(max: u32) -> String {
    format!("error: skipped: the limit of {max} tool calls is reached; the call was not executed")
}

/// The instruction of the final answer turn, after `limit` (what was reached) and `skipped`
/// calls that were not executed.
pub(super) fn final_instruction(limit: &str, skipped: usize) -> String {
    let skipped = match skipped {
        0 => String::new(),
        1 => " One requested tool call was not executed.".to_owned(),
        n => format!(" {n} requested tool calls were not executed."),
    };
    format!(
        "You have {limit}.{skipped} Tools are no longer available: give your final answer now, from what you have found so far."
    )
}

/// The instruction of the answering turn of a call with tools and a native schema, after a
/// reply that did not match the schema.
pub(super) const ANSWER_INSTRUCTION: &str =
    "Give your final answer now, as a JSON value that matches the required schema.";

/// Makes `request` the answering turn: tools withheld (kept defined, as providers require for a
/// conversation that holds tool calls, but not callable) and the native schema attached.
pub(super) fn answering_turn(request: &mut ChatRequest, native_schema: Option<&Value>) {
    if !request.tools.is_empty() {
        request.tool_choice = ToolChoice::None;
    }
    if let Some(schema) = native_schema {
        request.response_schema = Some(schema.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{Message, ToolSpec};

    #[test]
    fn the_answering_turn_withholds_tools_and_carries_the_schema() {
        let mut request = ChatRequest::new("m", vec![Message::user("hi")]);
        request.tools =
            vec![ToolSpec { name: "t".into(), description: "d".into(), parameters: serde_json::json!({}) }];
        let schema = serde_json::json!({"type": "object"});
        answering_turn(&mut request, Some(&schema));
        assert_eq!(request.tool_choice, ToolChoice::None);
        assert_eq!(request.response_schema, Some(schema));
        assert_eq!(request.tools.len(), 1, "tools stay defined for the tool calls in the transcript");
        assert!(final_instruction("reached the limit of 2 tool calls", 3).contains("3 requested tool calls"));
        assert!(skipped_result(2).contains("not executed"));
    }
}

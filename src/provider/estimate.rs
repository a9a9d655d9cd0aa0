//! Token estimates from text lengths (about four characters per token), for endpoints that
//! report no usage and for the offline models.
//!
//! An estimate is never passed off as a count: adapters that estimate mark the usage
//! `approximate`, so a cost report shows it instead of a silent zero.

use super::{ChatRequest, Part};

/// Estimated tokens for `chars` characters of text: `ceil(chars / 4)`.
pub(crate) fn tokens_for_chars(chars: usize) -> u64 {
    (chars as u64).div_ceil(4)
}

/// Estimated prompt tokens of a request: system, message text, tool traffic and tool specs.
/// At least 1, since any request has a prompt.
pub(crate) fn request_tokens(request: &ChatRequest) -> u64 {
    tokens_for_chars(request_chars(request)).max(1)
}

/// Characters of everything a request puts in the model's context.
pub(crate) fn request_chars(request: &ChatRequest) -> usize {
    let mut chars = request.system.as_deref().map_or(0, |s| s.chars().count());
    for message in &request.messages {
        for part in &message.parts {
            chars += match part {
                Part::Text(text) => text.chars().count(),
                Part::ToolCall { name, arguments, .. } => {
                    name.chars().count() + arguments.to_string().chars().count()
                }
                Part::ToolResult { content, .. } => content.chars().count(),
                Part::ProviderRaw { .. } => 0,
            };
        }
    }
    for tool in &request.tools {
        chars += tool.name.chars().count()
            + tool.description.chars().count()
            + tool.parameters.to_string().chars().count();
    }
    if let Some(schema) = &request.response_schema {
        chars += schema.to_string().chars().count();
    }
    chars
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Message;

    #[test]
    fn four_characters_per_token_rounded_up() {
        assert_eq!(tokens_for_chars(0), 0);
        assert_eq!(tokens_for_chars(1), 1);
        assert_eq!(tokens_for_chars(4), 1);
        assert_eq!(tokens_for_chars(5), 2);
        let request = ChatRequest::new("m", vec![Message::user("")]);
        assert_eq!(request_tokens(&request), 1);
        let request = ChatRequest::new("m", vec![Message::user("\u{e9}".repeat(8))]);
        assert_eq!(request_tokens(&request), 2);
    }
}

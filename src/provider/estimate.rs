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
                Part::ToolCall { name, arguments, .. } => name.chars().count() + json_chars(arguments),
                Part::ToolResult { content, .. } => content.chars().count(),
                Part::ProviderRaw { .. } => 0,
            };
        }
    }
    for tool in &request.tools {
        chars += tool.name.chars().count() + tool.description.chars().count() + json_chars(&tool.parameters);
    }
    if let Some(schema) = &request.response_schema {
        chars += json_chars(schema);
    }
    chars
}

/// Characters of `value`'s compact JSON text, counted as it is written instead of built: a
/// conversation's tool calls are measured before every turn.
fn json_chars(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            // Serde writes whole UTF-8 sequences: count the bytes that start a character.
            self.0 += bytes.iter().filter(|&&b| (b as i8) >= -0x40).count();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => value.to_string().chars().count(),
    }
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
        for value in [
            serde_json::json!({"a": "\u{e9}t\u{e9} \u{1f600}", "b": [1, 2.5, null, "\"q\"\n"]}),
            serde_json::json!("plain"),
            serde_json::json!({}),
        ] {
            assert_eq!(json_chars(&value), value.to_string().chars().count(), "{value}");
        }
    }
}

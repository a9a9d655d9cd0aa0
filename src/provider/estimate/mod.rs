//! Token estimates from text lengths, for reservations, the context bound, endpoints that
//! report no usage and the offline models.
//!
//! A request's estimate is meant as an upper bound for every supported tokenizer: ASCII text
//! counts the larger of four characters a token (English prose tokenizes at about that rate,
//! so its estimate stays close) and a count by [`pieces`] (words, digit groups, punctuation
//! and whitespace runs: code, JSON, numbers and hashes take two characters a token or less),
//! and every byte of non-ASCII text counts a whole token (a byte-level BPE, as every
//! supported provider's tokenizer is, never makes more tokens than bytes; a Japanese
//! character is three UTF-8 bytes and at most a few tokens). The unit is a text's weight in
//! quarter tokens: [`bound_weight`] for what a request sends, the cheaper [`weight`] (one per
//! ASCII byte, four per non-ASCII byte) for the running estimate of streamed output and the
//! offline models' own bills.
//!
//! An estimate is never passed off as a count: adapters that estimate mark the usage
//! `approximate`, so a cost report shows it instead of a silent zero.

mod pieces;

use super::{ChatRequest, Part};
use pieces::Pieces;

/// Estimated tokens for a [`weight`] of `chars` (for ASCII text, its characters):
/// `ceil(chars / 4)`.
pub(crate) fn tokens_for_chars(chars: usize) -> u64 {
    (chars as u64).div_ceil(4)
}

/// A text's estimate weight: one per ASCII byte, four per byte of non-ASCII text, so that
/// [`tokens_for_chars`] of it counts ASCII at four characters a token and non-ASCII text at a
/// token per UTF-8 byte.
pub(crate) fn weight(text: &str) -> usize {
    text.len() + 3 * non_ascii_bytes(text.as_bytes())
}

/// A text's weight as a request's input: the larger of its ASCII bytes and its [`pieces`]
/// count, plus four per byte of other text (quarter tokens).
pub(crate) fn bound_weight(text: &str) -> usize {
    let mut pieces = Pieces::new();
    pieces.feed(text.as_bytes());
    pieces.finish()
}

/// The estimated tokens of `text` sent as input: `ceil(bound_weight / 4)`.
pub(crate) fn text_tokens(text: &str) -> u64 {
    tokens_for_chars(bound_weight(text))
}

/// The bill of an offline model (echo, the testing fakes) for a request: their tokenizer is
/// four characters of [`weight`] a token. At least 1. Never above [`request_tokens`].
pub(crate) fn plain_request_tokens(request: &ChatRequest) -> u64 {
    tokens_for_chars(request_weight(request, weight, json_weight::<Plain>)).max(1)
}

/// How many bytes of `bytes` are not ASCII. Every streamed delta is weighed (the ledger's
/// running estimate), so ASCII text, the common case, is recognised eight bytes at a time (the
/// high bits of every word, or-ed together: a loop the compiler vectorises, where `is_ascii`
/// walks a short tail byte by byte), and only other text is counted byte by byte.
fn non_ascii_bytes(bytes: &[u8]) -> usize {
    const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
    let (words, tail) = bytes.as_chunks::<8>();
    let high = words.iter().fold(0, |high, word| high | u64::from_ne_bytes(*word));
    if high & HIGH_BITS == 0 && tail.is_ascii() {
        return 0;
    }
    bytes.iter().map(|&b| usize::from(b >> 7)).sum()
}

/// Estimated prompt tokens of a request: system, message text, tool traffic and tool specs.
/// At least 1, since any request has a prompt.
pub(crate) fn request_tokens(request: &ChatRequest) -> u64 {
    tokens_for_chars(request_chars(request)).max(1)
}

/// The [`bound_weight`] of everything a request puts in the model's context.
pub(crate) fn request_chars(request: &ChatRequest) -> usize {
    request_weight(request, bound_weight, json_chars)
}

/// The weight of everything a request puts in the model's context, by `text` for its texts
/// and `json` for its JSON values.
fn request_weight(
    request: &ChatRequest,
    text: impl Fn(&str) -> usize,
    json: impl Fn(&serde_json::Value) -> usize,
) -> usize {
    let mut chars = request.system.as_deref().map_or(0, &text);
    for message in &request.messages {
        for part in &message.parts {
            chars += match part {
                Part::Text(body) => text(body),
                Part::ToolCall { name, arguments, .. } => text(name) + json(arguments),
                Part::ToolResult { content, .. } => text(content),
                Part::ProviderRaw { .. } => 0,
            };
        }
    }
    for tool in &request.tools {
        chars += text(&tool.name) + text(&tool.description) + json(&tool.parameters);
    }
    if let Some(schema) = &request.response_schema {
        chars += json(schema);
    }
    chars
}

/// A text's weight, counted as the text is written.
trait Weigh {
    fn start() -> Self;
    fn feed(&mut self, bytes: &[u8]);
    fn finish(self) -> usize;
}

impl Weigh for Pieces {
    fn start() -> Pieces {
        Pieces::new()
    }
    fn feed(&mut self, bytes: &[u8]) {
        Pieces::feed(self, bytes);
    }
    fn finish(self) -> usize {
        Pieces::finish(self)
    }
}

/// The plain [`weight`]: one per ASCII byte, four per other byte.
struct Plain(usize);

impl Weigh for Plain {
    fn start() -> Plain {
        Plain(0)
    }
    fn feed(&mut self, bytes: &[u8]) {
        self.0 += bytes.len() + 3 * non_ascii_bytes(bytes);
    }
    fn finish(self) -> usize {
        self.0
    }
}

/// The weight `W` of `value`'s compact JSON text, counted as it is written instead of built:
/// a conversation's tool calls are measured before every turn.
fn json_weight<W: Weigh>(value: &serde_json::Value) -> usize {
    struct Count<W>(W);
    impl<W: Weigh> std::io::Write for Count<W> {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.feed(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(W::start());
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0.finish(),
        Err(_) => {
            let mut whole = W::start();
            whole.feed(value.to_string().as_bytes());
            whole.finish()
        }
    }
}

/// The [`bound_weight`] of `value`'s compact JSON text.
fn json_chars(value: &serde_json::Value) -> usize {
    json_weight::<Pieces>(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Message;

    /// #23.4: 4,000 Japanese characters (billed as about 4,000 tokens) are never estimated
    /// below that; English prose stays at about four characters a token.
    #[test]
    fn the_estimate_bounds_non_ascii_text_and_keeps_english_close() {
        let japanese = ChatRequest::new("m", vec![Message::user("\u{65e5}\u{672c}".repeat(2000))]);
        assert_eq!(request_tokens(&japanese), 12_000);
        let prose = "The engine keeps a journal of every call, so a run that stops can resume where it was. "
            .repeat(50);
        let english = ChatRequest::new("m", vec![Message::user(prose.clone())]);
        let plain = (prose.len() as u64).div_ceil(4);
        assert!(
            (plain..=plain * 106 / 100).contains(&request_tokens(&english)),
            "{}",
            request_tokens(&english)
        );
        assert_eq!(weight("a\u{e9}"), 1 + 8);
        for text in [
            "",
            "plain ascii text, longer than a word or two",
            "\u{65e5}\u{672c}",
            "mixed \u{e9}t\u{e9} \u{1f600}",
            // Non-ASCII in the words only, and in the tail only.
            "\u{e9}0123456789abcd",
            "0123456789abcdef\u{e9}",
        ] {
            let slow = text.bytes().filter(|&b| b >= 0x80).count();
            assert_eq!(non_ascii_bytes(text.as_bytes()), slow, "{text}");
        }
    }

    #[test]
    fn four_characters_per_token_rounded_up() {
        assert_eq!(tokens_for_chars(0), 0);
        assert_eq!(tokens_for_chars(1), 1);
        assert_eq!(tokens_for_chars(4), 1);
        assert_eq!(tokens_for_chars(5), 2);
        let request = ChatRequest::new("m", vec![Message::user("")]);
        assert_eq!(request_tokens(&request), 1);
        // Non-ASCII text: a token per UTF-8 byte (é is two).
        let request = ChatRequest::new("m", vec![Message::user("\u{e9}".repeat(8))]);
        assert_eq!(request_tokens(&request), 16);
        for value in [
            serde_json::json!({"a": "\u{e9}t\u{e9} \u{1f600}", "b": [1, 2.5, null, "\"q\"\n"]}),
            serde_json::json!("plain"),
            serde_json::json!({}),
        ] {
            assert_eq!(json_chars(&value), bound_weight(&value.to_string()), "{value}");
            assert_eq!(json_weight::<Plain>(&value), weight(&value.to_string()), "{value}");
        }
    }
}

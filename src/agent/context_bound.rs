//! The size bound of a conversation: before a turn is sent, tool traffic is elided, oldest
//! first, until the request's estimated input fits the bound: tool results and the model's
//! own tool-call arguments alike (a model that passes a 20 KB argument on every call fills
//! its context as fast as big results do). A conversation that still does not fit (a prompt
//! bigger than the bound) is `context_overflow`, never sent past its bound. Elision rewrites the
//! conversation in place, so the checkpoints taken after it hold the elided form and a resume
//! sends exactly the same context.

use crate::provider::{ChatRequest, Part};

/// The default bound, in estimated input tokens per turn.
pub(crate) const DEFAULT_MAX_CONTEXT_TOKENS: u64 = 200_000;

/// The text an elided tool result is replaced with.
fn marker(tokens: u64, bound: u64) -> String {
    format!(
        "[cairn: this tool result (about {tokens} tokens) was elided to keep the conversation under its bound of {bound} tokens]"
    )
}

fn is_marker(content: &str) -> bool {
    content.starts_with("[cairn: this tool result")
}

/// The key of the one-field object an elided tool call's arguments are replaced with.
const ELIDED_ARGUMENTS: &str = "cairn_elided";

fn arguments_marker(tokens: u64, bound: u64) -> serde_json::Value {
    serde_json::json!({
        ELIDED_ARGUMENTS: format!(
            "[cairn: these arguments (about {tokens} tokens) were elided to keep the conversation under its bound of {bound} tokens]"
        )
    })
}

fn is_arguments_marker(arguments: &serde_json::Value) -> bool {
    arguments.as_object().is_some_and(|o| o.len() == 1 && o.contains_key(ELIDED_ARGUMENTS))
}

fn arguments_tokens(arguments: &serde_json::Value) -> u64 {
    super::estimate_tokens(&arguments.to_string())
}

/// A conversation bigger than its bound even with all its tool traffic elided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Overflow {
    /// Its estimated input tokens.
    pub(super) tokens: u64,
}

impl Overflow {
    /// The `context_overflow` error.
    pub(super) fn error(self, bound: u64) -> crate::error::Error {
        crate::error::Error::new(
            crate::error::ErrorCode::ContextOverflow,
            format!(
                "the conversation is about {} input tokens with its tool traffic elided, over its bound of {bound} (`max_context_tokens`)",
                self.tokens
            ),
        )
    }
}

/// Brings `request` under `bound` estimated input tokens: elides whole tool results and
/// tool-call arguments oldest first; if the newest message's results alone are still too
/// big, cuts them to what fits. Returns how many parts it elided or cut (0 when the request
/// already fit). Idempotent.
///
/// # Errors
/// [`Overflow`] when the request does not fit even so.
pub(super) fn bound_context(request: &mut ChatRequest, bound: u64) -> Result<u32, Overflow> {
    // The estimate walks the whole conversation: a request that fits (the common case) is
    // walked once; one that was cut is walked again, exactly, after the cut.
    let total = crate::provider::estimate_request_tokens(request);
    if total <= bound {
        return Ok(0);
    }
    let changed = elide(request, bound, total);
    let tokens = crate::provider::estimate_request_tokens(request);
    if tokens > bound { Err(Overflow { tokens }) } else { Ok(changed) }
}

/// Elides tool traffic of `request`, whose estimate is `total` (over `bound`).
fn elide(request: &mut ChatRequest, bound: u64, mut total: u64) -> u32 {
    let mut changed = 0;
    let last = request.messages.len().saturating_sub(1);
    for message in &mut request.messages[..last] {
        for part in &mut message.parts {
            if total <= bound {
                return changed;
            }
            match part {
                Part::ToolResult { content, .. } if !is_marker(content) => {
                    let tokens = super::estimate_tokens(content);
                    let replacement = marker(tokens, bound);
                    total = total.saturating_sub(tokens) + super::estimate_tokens(&replacement);
                    *content = replacement;
                    changed += 1;
                }
                Part::ToolCall { arguments, .. } if !is_arguments_marker(arguments) => {
                    let tokens = arguments_tokens(arguments);
                    let replacement = arguments_marker(tokens, bound);
                    let after = arguments_tokens(&replacement);
                    if after < tokens {
                        total = total.saturating_sub(tokens) + after;
                        *arguments = replacement;
                        changed += 1;
                    }
                }
                _ => {}
            }
        }
    }
    if total <= bound {
        return changed;
    }
    // The newest results alone are too big: keep the head of each, sharing what is left.
    let Some(message) = request.messages.last_mut() else { return changed };
    let results = message.parts.iter().filter(|p| matches!(p, Part::ToolResult { .. })).count() as u64;
    if results == 0 {
        return changed;
    }
    let in_results: u64 = message
        .parts
        .iter()
        .map(|p| if let Part::ToolResult { content, .. } = p { super::estimate_tokens(content) } else { 0 })
        .sum();
    let room = bound.saturating_sub(total - in_results) / results;
    for part in &mut message.parts {
        if let Part::ToolResult { content, .. } = part
            && super::estimate_tokens(content) > room
        {
            let note = format!(
                "\n[cairn: cut here; the rest of this tool result (about {} tokens) was elided to keep the conversation under its bound of {bound} tokens]",
                super::estimate_tokens(content)
            );
            let head = head_within(content, room.saturating_sub(super::estimate_tokens(&note)));
            *content = format!("{head}{note}");
            changed += 1;
        }
    }
    changed
}

/// The longest head of `content` (to within a quarter) whose estimate is at most `tokens`:
/// four characters a token at best, less for code, JSON or other scripts.
fn head_within(content: &str, tokens: u64) -> &str {
    let mut keep = usize::try_from(tokens.saturating_mul(4)).unwrap_or(usize::MAX).min(content.len());
    loop {
        let mut end = keep;
        while !content.is_char_boundary(end) {
            end -= 1;
        }
        let head = &content[..end];
        if end == 0 || super::estimate_tokens(head) <= tokens {
            return head;
        }
        keep = end - end.div_ceil(4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{Message, Role};

    fn result(id: &str, content: String) -> Message {
        Message {
            role: Role::User,
            parts: vec![Part::ToolResult { id: id.into(), wire_id: None, content, is_error: false }],
        }
    }

    #[test]
    fn oldest_results_go_first_and_the_bound_holds() {
        let big = "x".repeat(40_000); // 10k tokens each
        let mut request = ChatRequest::new(
            "m",
            vec![Message::user("read"), result("a", big.clone()), result("b", big.clone()), result("c", big)],
        );
        assert_eq!(bound_context(&mut request, 1_000_000), Ok(0));
        assert_eq!(bound_context(&mut request, 25_000), Ok(1));
        let contents: Vec<String> = request
            .messages
            .iter()
            .flat_map(|m| &m.parts)
            .filter_map(
                |p| if let Part::ToolResult { content, .. } = p { Some(content.clone()) } else { None },
            )
            .collect();
        assert!(is_marker(&contents[0]) && contents[1].len() == 40_000 && contents[2].len() == 40_000);
        assert!(crate::provider::estimate_request_tokens(&request) <= 25_000);
        // Idempotent: a second pass (a resume) changes nothing.
        let before = request.clone();
        assert_eq!(bound_context(&mut request, 25_000), Ok(0));
        assert_eq!(request, before);
        // A newest result bigger than the bound on its own is cut to fit.
        assert!(bound_context(&mut request, 5_000).unwrap() >= 2);
        assert!(crate::provider::estimate_request_tokens(&request) <= 5_000);
    }

    /// #23.6: the model's own tool-call arguments are elided like results, and a
    /// conversation that cannot fit is an overflow, not sent.
    #[test]
    fn tool_call_arguments_are_elided_and_an_unfittable_prompt_overflows() {
        let path = "p/".repeat(10_000); // 20 KB, 5k tokens
        let mut messages = vec![Message::user("read")];
        for i in 0..6 {
            messages.push(Message {
                role: Role::Assistant,
                parts: vec![Part::ToolCall {
                    id: format!("c{i}"),
                    wire_id: None,
                    name: "read".into(),
                    arguments: serde_json::json!({ "path": path }),
                }],
            });
            messages.push(result(&format!("c{i}"), "no such file".into()));
        }
        let mut request = ChatRequest::new("m", messages);
        assert!(crate::provider::estimate_request_tokens(&request) > 30_000);
        assert!(bound_context(&mut request, 3_000).unwrap() >= 6);
        assert!(crate::provider::estimate_request_tokens(&request) <= 3_000);
        let calls = request.messages.iter().flat_map(|m| &m.parts).filter_map(|p| match p {
            Part::ToolCall { arguments, .. } => Some(arguments),
            _ => None,
        });
        assert!(calls.clone().count() == 6 && calls.clone().all(is_arguments_marker));
        let before = request.clone();
        assert_eq!(bound_context(&mut request, 3_000), Ok(0));
        assert_eq!(request, before);
        let mut huge = ChatRequest::new("m", vec![Message::user("x".repeat(40_000))]);
        assert_eq!(bound_context(&mut huge, 3_000), Err(Overflow { tokens: 10_000 }));
    }
}

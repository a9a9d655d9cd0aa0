//! The size bound of a conversation: before a turn is sent, tool results are elided, oldest
//! first, until the request's estimated input fits the bound. Elision rewrites the
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

/// Brings `request` under `bound` estimated input tokens: elides whole tool results oldest
/// first; if the newest message's results alone are still too big, cuts them to what fits.
/// Returns how many results it elided or cut (0 when the request already fit). Idempotent.
pub(super) fn bound_context(request: &mut ChatRequest, bound: u64) -> u32 {
    let mut total = crate::provider::estimate_request_tokens(request);
    if total <= bound {
        return 0;
    }
    let mut changed = 0;
    let last = request.messages.len().saturating_sub(1);
    for message in &mut request.messages[..last] {
        for part in &mut message.parts {
            if total <= bound {
                return changed;
            }
            if let Part::ToolResult { content, .. } = part
                && !is_marker(content)
            {
                let tokens = super::estimate_tokens(content);
                let replacement = marker(tokens, bound);
                total = total - tokens + super::estimate_tokens(&replacement);
                *content = replacement;
                changed += 1;
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
            let keep = (room.saturating_sub(super::estimate_tokens(&note)) * 4) as usize;
            let head: String = content.chars().take(keep).collect();
            *content = format!("{head}{note}");
            changed += 1;
        }
    }
    changed
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
        assert_eq!(bound_context(&mut request, 1_000_000), 0);
        assert_eq!(bound_context(&mut request, 25_000), 1);
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
        assert_eq!(bound_context(&mut request, 25_000), 0);
        assert_eq!(request, before);
        // A newest result bigger than the bound on its own is cut to fit.
        assert!(bound_context(&mut request, 5_000) >= 2);
        assert!(crate::provider::estimate_request_tokens(&request) <= 5_000);
    }
}

//! Text for a person. Scripts, models, tools and providers' error bodies are untrusted: an
//! escape sequence in a fetched page or a model's answer must not retitle, clear or rewrite a
//! terminal. Everything the CLI prints for a person passes [`for_terminal`]; `--json` output is
//! exact JSON (which escapes control characters itself) and does not.

use std::borrow::Cow;

/// `text` with every control character other than newline and tab shown escaped: C0 controls
/// (ESC, CR, BEL, ...), DEL, C1 controls and the bidirectional overrides and isolates that can
/// reorder what a line appears to say. Ordinary text is returned as is, without copying.
pub(crate) fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if needs_escape(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`for_terminal`] for one line: newlines and tabs are escaped too, so the text cannot start
/// a line of its own that looks like the tool's output.
#[cfg_attr(not(feature = "serve"), allow(dead_code))] // read by the CLI and the service
pub(crate) fn for_terminal_line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c == '\n' || c == '\t' || needs_escape(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        // C0, DEL and C1.
        c if c.is_control() => true,
        // Bidirectional embeddings, overrides and isolates (Trojan Source).
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}' => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_ordinary_text_is_not_copied() {
        assert!(matches!(for_terminal("plain é 漢字\n\t"), Cow::Borrowed(_)));
        assert_eq!(for_terminal("a\u{1b}]0;pwned\u{7}b"), "a\\u{1b}]0;pwned\\u{7}b");
        assert_eq!(for_terminal("line\n\tindented"), "line\n\tindented");
        assert_eq!(for_terminal("\u{1b}[2J\r\u{7}\u{7f}\u{9b}"), "\\u{1b}[2J\\u{d}\\u{7}\\u{7f}\\u{9b}");
        assert_eq!(for_terminal("a\u{202e}b"), "a\\u{202e}b");
        assert_eq!(for_terminal_line("a\nb\tc\u{1b}"), "a\\nb\\tc\\u{1b}");
    }
}

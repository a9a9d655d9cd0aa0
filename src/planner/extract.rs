//! Extracting the script from a planner's reply: the first fenced code block (any info
//! string, backticks or tildes, three or more), or the whole reply when it has no fence.
//!
//! Deterministic and total: any text yields a script (maybe empty). An opening fence that is
//! never closed yields everything after it, which is what a reply cut mid-block holds.

/// The script in `reply`: the body of its first fenced code block, else the whole reply
/// (trimmed).
pub fn extract_script(reply: &str) -> &str {
    for (start, end) in LineSpans::new(reply) {
        let line = &reply[start..end];
        let Some(fence) = opening_fence(line) else { continue };
        let body_start = next_line_start(reply, end);
        for (line_start, line_end) in LineSpans::from(reply, body_start) {
            if closes(&reply[line_start..line_end], fence) {
                return &reply[body_start..line_start];
            }
        }
        return &reply[body_start.min(reply.len())..];
    }
    reply.trim()
}

/// A fence: its character and length.
#[derive(Debug, Clone, Copy)]
struct Fence {
    ch: char,
    len: usize,
}

/// The fence a line opens (up to three spaces of indent, then three or more backticks or
/// tildes; a backtick fence's info string holds no backtick).
fn opening_fence(line: &str) -> Option<Fence> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let ch = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let len = rest.chars().take_while(|c| *c == ch).count();
    if len < 3 {
        return None;
    }
    let info = &rest[len..];
    if ch == '`' && info.contains('`') {
        return None;
    }
    Some(Fence { ch, len })
}

/// Whether a line closes `fence`: the same character, at least as long, nothing after it.
fn closes(line: &str, fence: Fence) -> bool {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return false;
    }
    let rest = line[indent..].trim_end();
    let len = rest.chars().take_while(|c| *c == fence.ch).count();
    len >= fence.len && rest.chars().all(|c| c == fence.ch)
}

fn next_line_start(text: &str, line_end: usize) -> usize {
    if text[line_end..].starts_with("\r\n") {
        line_end + 2
    } else if line_end < text.len() {
        line_end + 1
    } else {
        line_end
    }
}

/// The (start, end) byte spans of lines, without their terminators.
struct LineSpans<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> LineSpans<'a> {
    fn new(text: &'a str) -> Self {
        LineSpans { text, at: 0 }
    }

    fn from(text: &'a str, at: usize) -> Self {
        LineSpans { text, at }
    }
}

impl Iterator for LineSpans<'_> {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        if self.at >= self.text.len() {
            return None;
        }
        let start = self.at;
        let end = self.text[start..].find('\n').map_or(self.text.len(), |i| start + i);
        self.at = end + 1;
        let end = if end > start && self.text.as_bytes()[end - 1] == b'\r' { end - 1 } else { end };
        Some((start, end))
    }
}

#[cfg(test)]
mod tests {
    use super::extract_script;

    #[test]
    fn first_fenced_block_any_info_string() {
        let reply = "Here it is:\n```rhai\nlet x = agent(\"hi\");\nx\n```\nDone.";
        assert_eq!(extract_script(reply), "let x = agent(\"hi\");\nx\n");
        assert_eq!(extract_script("  agent(\"hi\")  "), "agent(\"hi\")");
        let reply = "text\n```js\nfirst\n```\n```rhai\nsecond\n```\n";
        assert_eq!(extract_script(reply), "first\n");
        assert_eq!(extract_script("~~~\nbody\n~~~"), "body\n");
        assert_eq!(extract_script("```\n```"), "");
    }

    #[test]
    fn a_longer_fence_holds_a_shorter_one() {
        let reply = "````rhai\nlet s = \"```\";\n```\nstill inside\n````\n";
        assert_eq!(extract_script(reply), "let s = \"```\";\n```\nstill inside\n");
    }

    #[test]
    fn no_fence_is_the_whole_reply_trimmed() {
        assert_eq!(extract_script("\n  let x = 1;\n  x\n"), "let x = 1;\n  x");
        assert_eq!(extract_script(""), "");
        assert_eq!(extract_script("inline ``` is not a fence"), "inline ``` is not a fence");
    }

    #[test]
    fn an_unclosed_fence_yields_the_rest() {
        assert_eq!(extract_script("```rhai\nlet x = agent(\"a"), "let x = agent(\"a");
        assert_eq!(extract_script("```rhai"), "");
    }

    #[test]
    fn crlf_lines() {
        assert_eq!(extract_script("```rhai\r\nlet x = 1;\r\n```\r\n"), "let x = 1;\r\n");
    }

    #[test]
    fn hostile_text_never_panics() {
        for text in ["```", "\u{feff}```\u{0}\n", "   ```é\n\u{2028}\n   ```", "\r\n\r```\r", "````~~~\n~~~"]
        {
            let _ = extract_script(text);
        }
    }
}

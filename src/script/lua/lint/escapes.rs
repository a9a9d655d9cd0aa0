//! `template-escape` in Lua: a long string (`[[...]]`, `[==[...]==]`) processes no escape
//! sequence, so `\n` there is a backslash and an `n`, sent to the model as written. A warning,
//! at the first escape of each long string (a pattern or a path may mean the backslash).

use crate::script::{Diagnostic, Severity};

/// The characters that make a backslash an escape in a quoted Lua string.
const ESCAPED: &[char] = &['n', 't', 'r', '0', '\\', '"', '\'', 'u', 'x'];

/// The finding for the long string `chars` (its brackets included), which starts at `line`
/// and `column`, if it holds an escape sequence.
pub(super) fn in_long_string(chars: &[char], line: u32, column: u32) -> Option<Diagnostic> {
    let (mut line, mut column) = (line, column);
    for (i, &c) in chars.iter().enumerate() {
        if c == '\\'
            && let Some(&next) = chars.get(i + 1)
            && ESCAPED.contains(&next)
        {
            let instead = if next == 'n' {
                "put a real line break inside the brackets"
            } else {
                "write the character itself inside the brackets"
            };
            let message = format!(
                "a long string keeps \\{next} as a backslash and {next:?} (lua processes no escape in it): \
                 {instead}, or use a quoted string (\"a\\{next}b\")"
            );
            return Some(Diagnostic {
                rule_id: "template-escape".to_owned(),
                message,
                line,
                column,
                end_line: Some(line),
                end_column: Some(column.saturating_add(2)),
                severity: Severity::Warning,
            });
        }
        if c == '\n' {
            line = line.saturating_add(1);
            column = 1;
        } else {
            column = column.saturating_add(1);
        }
    }
    None
}

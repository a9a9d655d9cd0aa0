//! `template-escape`: Rhai processes no escape sequence in a backtick string, so `\n` there is
//! a backslash and an `n`, sent to the model as written. A warning, at the first escape of each
//! text part of a backtick string (a regex or a path may mean the backslash).

use super::scan::{Kind, scan};
use crate::script::{Diagnostic, Severity};

/// The rule's id (a folder under `lint/`).
pub(super) const RULE: &str = "template-escape";

/// The characters that make a backslash an escape in a double-quoted string.
const ESCAPED: &[char] = &['n', 't', 'r', '0', '\\', '"', '\'', 'u', 'x'];

/// A warning for each text part of a backtick string that holds an escape sequence.
pub(super) fn check(source: &str) -> Vec<Diagnostic> {
    let mut found = Vec::new();
    for tok in scan(source) {
        // Text parts of a backtick string: "`a ${", "} b ${", "} c`" (double-quoted start with `"`).
        if tok.kind != Kind::Str || tok.text.starts_with('"') {
            continue;
        }
        let (mut line, mut column) = (tok.line, tok.col);
        let mut chars = tok.text.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\\'
                && let Some(&next) = chars.peek()
                && ESCAPED.contains(&next)
            {
                let instead = if next == 'n' {
                    "put a real line break inside the backticks"
                } else {
                    "write the character itself inside the backticks"
                };
                let message = format!(
                    "a backtick string keeps \\{next} as a backslash and {next:?} (rhai processes no escape in \
                     it): {instead}, or use a double-quoted string joined with +"
                );
                found.push(Diagnostic {
                    rule_id: RULE.to_owned(),
                    message,
                    line,
                    column,
                    end_line: Some(line),
                    end_column: Some(column.saturating_add(2)),
                    severity: Severity::Warning,
                });
                break;
            }
            if c == '\n' {
                line = line.saturating_add(1);
                column = 1;
            } else {
                column = column.saturating_add(1);
            }
        }
    }
    found
}

//! `template-escape` for both dialects: a string form that processes no escape sequence (a
//! Rhai backtick string, a Lua long string) keeps `\n` as a backslash and an `n`, sent to the
//! model as written. Each linter finds its raw strings; this file finds the first escape in
//! one and words the warning in the dialect's terms.

use crate::script::{Diagnostic, Severity};

/// The rule's id (a folder under `lint/`).
pub(crate) const RULE: &str = "template-escape";

/// The characters that make a backslash an escape in a quoted string (both dialects).
const ESCAPED: &[char] = &['n', 't', 'r', '0', '\\', '"', '\'', 'u', 'x'];

/// How a dialect names its raw string form and what to write instead.
#[derive(Debug)]
pub(crate) struct RawString {
    /// The form, as a message names it (`a backtick string`).
    pub(crate) form: &'static str,
    /// Where the text goes (`the backticks`).
    pub(crate) inside: &'static str,
    /// The dialect, lowercase.
    pub(crate) dialect: &'static str,
    /// The other string form, given the escaped character.
    pub(crate) instead: fn(char) -> String,
}

impl RawString {
    /// Rhai's backtick strings.
    pub(crate) const RHAI: RawString = RawString {
        form: "a backtick string",
        inside: "the backticks",
        dialect: "rhai",
        instead: |_| "use a double-quoted string joined with +".to_owned(),
    };

    /// Lua's long strings.
    #[cfg_attr(not(feature = "lua"), allow(dead_code))]
    pub(crate) const LUA: RawString = RawString {
        form: "a long string",
        inside: "the brackets",
        dialect: "lua",
        instead: |next| format!("use a quoted string (\"a\\{next}b\")"),
    };
}

/// The warning for the first escape sequence in `text`, a raw string of `form` whose first
/// character stands at `line` and `column`; `None` when it holds none.
pub(crate) fn first_escape(
    text: impl IntoIterator<Item = char>,
    line: u32,
    column: u32,
    form: &RawString,
) -> Option<Diagnostic> {
    let (mut line, mut column) = (line, column);
    let mut chars = text.into_iter().peekable();
    while let Some(c) = chars.next() {
        if c == '\\'
            && let Some(&next) = chars.peek()
            && ESCAPED.contains(&next)
        {
            let what = if next == 'n' { "put a real line break" } else { "write the character itself" };
            let message = format!(
                "{} keeps \\{next} as a backslash and {next:?} ({} processes no escape in it): {what} inside {}, \
                 or {}",
                form.form,
                form.dialect,
                form.inside,
                (form.instead)(next)
            );
            return Some(Diagnostic {
                rule_id: RULE.to_owned(),
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

//! `template-escape` in Lua: a long string (`[[...]]`, `[==[...]==]`) processes no escape
//! sequence (see `script::escape_check`). A warning, at the first escape of each long string
//! (a pattern or a path may mean the backslash).

use crate::script::Diagnostic;
use crate::script::escape_check::{RawString, first_escape};

/// The finding for the long string `chars` (its brackets included), which starts at `line`
/// and `column`, if it holds an escape sequence.
pub(super) fn in_long_string(chars: &[char], line: u32, column: u32) -> Option<Diagnostic> {
    first_escape(chars.iter().copied(), line, column, &RawString::LUA)
}

//! `template-escape` in Rhai: a backtick string processes no escape sequence (see
//! `script::escape_check`). A warning, at the first escape of each text part of a backtick
//! string (a regex or a path may mean the backslash).

use super::scan::{Kind, scan};
use crate::script::Diagnostic;
use crate::script::escape_check::{RawString, first_escape};

/// A warning for each text part of a backtick string that holds an escape sequence.
pub(super) fn check(source: &str) -> Vec<Diagnostic> {
    scan(source)
        .into_iter()
        // Text parts of a backtick string: "`a ${", "} b ${", "} c`" (double-quoted start with `"`).
        .filter(|tok| tok.kind == Kind::Str && !tok.text.starts_with('"'))
        .filter_map(|tok| first_escape(tok.text.chars(), tok.line, tok.col, &RawString::RHAI))
        .collect()
}
